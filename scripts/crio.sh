#!/usr/bin/env bash
# Builds CRI-O (crio and its pinns helper) and crictl from the Go module proxy, once per version,
# into ${YH_GENIE_CACHE:-/var/cache/yh-genie}/crio-<version>/bin, for a run of tests/cri under
# CRI-O beside containerd (scripts/containerd2.sh): the other CRI runtime that Kubernetes nodes run,
# which calls CNI plugins through its own library (ocicni) rather than containerd's go-cni.
#   - crio: the newest release that the module proxy serves here, v1.36.3 (it refuses every v1.37.x,
#     and v1.36.4 on); with cgo for libseccomp, and the build tags that leave out gpgme (signatures
#     go through Go's openpgp), the btrfs driver (the tests use overlay or vfs) and ostree; the build
#     date and commit ldflags as CRI-O's Makefile sets them, from the proxy's record of the tag.
#   - pinns: C, static, with the module's own pinns/Makefile, in a copy of pinns/ (the module cache
#     is read-only); crio will not start without it (its pinns_path).
#   - crictl v1.36.0 (sigs.k8s.io/cri-tools, without cgo): Debian 12 has no cri-tools package.
# From Debian, installed with apt-get when missing (so run as root): gcc, libc6-dev, make,
# pkg-config and libseccomp-dev (2.5.4) to build; for running it, conmon 2.1.6 and runc 1.1.5,
# which CRI-O 1.36.3 accepts (a pod sandbox and a container ran under them), skopeo 1.9.3, which
# copies an OCI layout into CRI-O's storage (containers-storage:), and containernetworking-plugins.
# Not crun: Debian 12's 1.8.1 refuses the runtime-spec 1.3.0 bundles CRI-O 1.36 writes ("unknown
# version specified"), and cgroup v1 with controllers on the v2 hierarchy too ("cgroups in hybrid
# mode not supported"). Where root lacks CAP_SYS_RESOURCE, runc cannot give the infra container
# CRI-O's fixed oom_score_adj of -998 and CRI-O has no setting for it: the runtime_path must be a
# wrapper that raises it (as scripts/kind/runc-bounded.sh edits bundles for Docker).
# Needs a Go at least as new as CRI-O's go.mod asks (1.26.3; the Debian one is too old):
# /usr/local/go/bin/go or GO=... Nothing is written outside the cache but those packages. Usage:
#   scripts/crio.sh            # prints the bin dir on its last line
set -euo pipefail

version=${CRIO_VERSION:-v1.36.3}
crictl_version=${CRICTL_VERSION:-v1.36.0}
cache=${YH_GENIE_CACHE:-/var/cache/yh-genie}
out=$cache/crio-$version
# Go's module and build caches in the same place (scripts/kind/common.sh says why).
export GOMODCACHE=${GOMODCACHE:-$cache/go/mod} GOCACHE=${GOCACHE:-$cache/go/build}

# One build of a version at a time (two test runs may ask for it at once).
mkdir -p "$cache"
exec 9>"$cache/crio-$version.lock"
flock 9

# Debian's packages (above): to build, then to run it.
packages=(gcc libc6-dev make pkg-config libseccomp-dev conmon runc skopeo containernetworking-plugins)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

go=${GO:-}
if [ -z "$go" ]; then
  if [ -x /usr/local/go/bin/go ]; then go=/usr/local/go/bin/go; else go=go; fi
fi

# Downloads a module (module@version) into the module cache if need be: $source_dir is its directory
# there, $info the proxy's record of the version (its time and, for a tag, its commit).
source_dir='' info=''
download() {
  local json
  json=$(cd / && "$go" mod download -json "$1")
  source_dir=$(sed -n 's/.*"Dir": "\(.*\)".*/\1/p' <<<"$json")
  info=$(sed -n 's/.*"Info": "\(.*\)".*/\1/p' <<<"$json")
}

started=$(date +%s)
built=()
if [ ! -x "$out/bin/crio" ] || [ ! -x "$out/bin/pinns" ]; then
  rm -rf "$out/bin.new" "$out/pinns"
  mkdir -p "$out/bin.new"
  download "github.com/cri-o/cri-o@$version"
  # The Makefile's buildDate (ISO 8601, UTC) and buildCommit (git rev-parse HEAD): the tag's time
  # and commit as the proxy recorded them, so that `crio version` names the release's commit.
  build_date=$(sed -n 's/.*"Time": *"\([^"]*\)".*/\1/p' "$info")
  build_commit=$(sed -n 's/.*"Hash": *"\([0-9a-f]*\)".*/\1/p' "$info")
  # Built in the module's own directory, under its own go.mod, as its Makefile does; -mod=readonly:
  # the module has no vendor directory.
  (cd "$source_dir" && CGO_ENABLED=1 "$go" build -mod=readonly -p "${BUILD_JOBS:-2}" -trimpath \
    -o "$out/bin.new/crio" \
    -tags "containers_image_openpgp containers_image_ostree_stub exclude_graphdriver_btrfs seccomp" \
    -ldflags "-s -w -X github.com/cri-o/cri-o/internal/version.buildDate=$build_date -X github.com/cri-o/cri-o/internal/version.buildCommit=$build_commit" \
    ./cmd/crio)
  # pinns/Makefile writes ../bin/pinns: made in a writable copy of pinns/ under $out.
  mkdir -p "$out/pinns"
  cp -R "$source_dir/pinns" "$out/pinns/"
  chmod -R u+w "$out/pinns"
  make -s -C "$out/pinns/pinns"
  mv "$out/pinns/bin/pinns" "$out/bin.new/pinns"
  rm -rf "$out/pinns"
  # crictl, if built already, stays.
  if [ -x "$out/bin/crictl" ]; then mv "$out/bin/crictl" "$out/bin.new/crictl"; fi
  rm -rf "${out:?}/bin"
  mv "$out/bin.new" "$out/bin"
  built+=("CRI-O $version")
fi

if [ "$("$out/bin/crictl" --version 2>/dev/null)" != "crictl version ${crictl_version#v}" ]; then
  download "sigs.k8s.io/cri-tools@$crictl_version"
  # Its Makefile's version (git describe without the v); built like crio, in its own directory.
  (cd "$source_dir" && CGO_ENABLED=0 "$go" build -mod=readonly -p "${BUILD_JOBS:-2}" -trimpath \
    -o "$out/crictl.new" -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=${crictl_version#v}" \
    ./cmd/crictl)
  mv -f "$out/crictl.new" "$out/bin/crictl"
  built+=("crictl $crictl_version")
fi

if [ ${#built[@]} -eq 0 ]; then
  echo "CRI-O $version, crictl $crictl_version: cached in $out/bin"
else
  echo "built ${built[*]} in $(( $(date +%s) - started )) s"
fi
echo "$out/bin"
