#!/usr/bin/env bash
# Builds the Kubernetes binaries the local test cluster runs (tests/cluster) with the etcd
# kubeadm pairs with that Kubernetes, and Kubernetes' own e2e suite with what it needs
# (tests/conformance.rs: e2e.test, the agnhost of its test images, the ginkgo CLI that runs specs in
# parallel, CoreDNS), from the Go module proxy, once per version: they are
# cached outside the checkout, in ${YH_GENIE_CACHE:-/var/cache/yh-genie}/kubernetes-<version>/, so
# later runs and fresh clones on the same machine reuse them. Prints what it built and how long it
# took. Usage:
#   scripts/cluster/build.sh            # prints the bin dir on its last line
#   scripts/cluster/build.sh --without-e2e   # only the cluster's own commands, without the e2e
#                                            # suite and what only it uses (e2e.test, agnhost,
#                                            # ginkgo, CoreDNS): what tests/cluster and kind need
#   KUBERNETES_VERSION=v1.35.4 scripts/cluster/build.sh   # another supported release
#
# k8s.io/kubernetes replaces its staging modules (k8s.io/api, client-go, ...) with paths of its own
# tree, which `go install pkg@version` refuses; a scratch module that requires it and pins every
# staging module to the matching v0.Y.Z builds its commands. Needs a Go at least as new as the
# version's go.mod asks (the Debian one is too old): /usr/local/go/bin/go or GO=...
set -euo pipefail

version=${KUBERNETES_VERSION:-v1.37.2}
cache=${YH_GENIE_CACHE:-/var/cache/yh-genie}
out=$cache/kubernetes-$version
# Go's module and build caches in the same place (scripts/kind/common.sh says why).
export GOMODCACHE=${GOMODCACHE:-$cache/go/mod} GOCACHE=${GOCACHE:-$cache/go/build}
# One build of a version at a time: scripts/test.sh starts this build in the background at the
# beginning of a run, and a tier that needs it waits here for that build instead of starting its own.
mkdir -p "$cache"
exec 9>"$cache/kubernetes-$version.lock"
flock 9
commands=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl kubeadm etcd images)
case ${1:-} in
  "") commands+=(e2e.test agnhost ginkgo coredns agnhost-localhost.crt agnhost-localhost.key e2e-images) ;;
  --without-e2e) ;;
  *) echo "usage: scripts/cluster/build.sh [--without-e2e]" >&2; exit 2 ;;
esac
go=${GO:-}
if [ -z "$go" ]; then
  if [ -x /usr/local/go/bin/go ]; then go=/usr/local/go/bin/go; else go=go; fi
fi

# The version's source (from the module cache once downloaded): kubeadm's constants name the etcd
# and CoreDNS it deploys, the e2e framework's manifest the tags of its test images.
module_json=$(cd / && "$go" mod download -json "k8s.io/kubernetes@$version")
modfile=$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' <<<"$module_json")
source_dir=$(sed -n 's/.*"Dir": "\(.*\)".*/\1/p' <<<"$module_json")
kubeadm_constant() { # NAME: the string constant NAME of kubeadm's constants.go
  sed -n "s/^\s*$1 = \"\(.*\)\"\$/\1/p" "$source_dir/cmd/kubeadm/app/constants/constants.go" | head -1
}
# Two commands are modules of their own, at the versions kubeadm deploys with this Kubernetes
# (`kubeadm config images list`): etcd, the cluster's store (kubeadm refuses an external etcd
# older than 3.5.24; Debian 12's is 3.4.23), and CoreDNS, the cluster DNS of the e2e suite's DNS
# specs. "3.7.0-0" is the image of etcd v3.7.0.
etcd_default=$(kubeadm_constant DefaultEtcdVersion)
etcd_version=${ETCD_VERSION:-v${etcd_default%-*}}
coredns_version=${COREDNS_VERSION:-$(kubeadm_constant CoreDNSVersion)}
if [ "$etcd_version" = v ] || [ -z "$coredns_version" ]; then
  echo "kubeadm $version names no etcd or CoreDNS version in its constants.go" >&2
  exit 1
fi
# images: the images kubeadm pairs with this Kubernetes, `<name> <tag>` a line (pause, etcd,
# coredns). e2e-images: the e2e framework's names and tags for the test images tests/conformance.rs
# builds (agnhost, busybox, the DNS querier: jessie-dnsutils up to 1.35, glibc-dns-testing from
# 1.36), from its test/utils/image/manifest.go.
write_images() {
  {
    echo "pause $(kubeadm_constant PauseVersion)"
    echo "etcd $etcd_default"
    echo "coredns $coredns_version"
  } >"$out/bin/images.new"
  mv -f "$out/bin/images.new" "$out/bin/images"
}
write_e2e_images() {
  sed -n 's/^\s*configs\[\(Agnhost\|BusyBox\|JessieDnsutils\|GlibcDnsTesting\)\] = Config{list\.[A-Za-z0-9]*, "\([^"]*\)", "\([^"]*\)"}.*/\2 \3/p' \
    "$source_dir/test/utils/image/manifest.go" >"$out/bin/e2e-images.new"
  if [ "$(wc -l <"$out/bin/e2e-images.new")" -ne 3 ]; then
    echo "test/utils/image/manifest.go of $version does not name agnhost, busybox and one DNS querier:" >&2
    cat "$out/bin/e2e-images.new" >&2
    exit 1
  fi
  mv -f "$out/bin/e2e-images.new" "$out/bin/e2e-images"
}

missing=()
for c in "${commands[@]}"; do [ -e "$out/bin/$c" ] || missing+=("$c"); done
# Each of those two is recorded beside it with its version: another version rebuilds it.
own_version() { case $1 in etcd) echo "$etcd_version" ;; coredns) echo "$coredns_version" ;; esac; }
for c in etcd coredns; do
  if [ -e "$out/bin/$c" ] && [ "$(cat "$out/bin/$c.version" 2>/dev/null)" != "$(own_version "$c")" ]; then
    missing+=("$c")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "kubernetes $version: cached in $out/bin"
  echo "$out/bin"
  exit 0
fi

started=$(date +%s)
work=$out/module
mkdir -p "$work" "$out/bin"
minor=${version#v1.}
{
  echo "module yh-genie.test/kubernetes-build"
  echo "go 1.23.0"
  echo "require k8s.io/kubernetes $version"
} >"$work/go.mod"
cd "$work"
# Every staging module k8s.io/kubernetes replaces, pinned to its published twin.
# The module proxy may lack a patch release of one of them: the newest earlier patch of the same
# minor then stands in (staging modules change little between patches), and the build says so.
# Asked from outside the scratch module, whose graph needs every replacement first.
newest_patch_before() { # MODULE WANT: the newest v0.<minor>.x of MODULE on the proxy before WANT
  local listed
  listed=$(cd / && "$go" list -m -versions "$1" 2>/dev/null) || return 0
  tr ' ' '\n' <<<"$listed" | grep -E "^v0\.${minor%%.*}\.[0-9]+$" | { cat; echo "$2"; } | sort -V |
    sed -n "/^$2\$/q;p" | tail -1 || true
}
sed -n 's#^\s*\(k8s.io/[^ ]*\) => ./staging/.*#\1#p' "$modfile" >"$work/staging"
while read -r m; do
  want=v0.$minor
  if ! (cd / && "$go" mod download "$m@$want" 2>/dev/null); then
    found=$(newest_patch_before "$m" "$want")
    if [ -z "$found" ]; then
      # Not every staging module is used by the commands (sample-*); one that is fails the build.
      echo "note: no $m v0.${minor%%.*}.x on the module proxy; left out"
      continue
    fi
    echo "note: $m $want is not on the module proxy; using $found"
    want=$found
  fi
  "$go" mod edit -replace "$m=$m@$want"
done <"$work/staging"
# -mod=mod: the build adds the requirements and sums it meets to the scratch module.
# Two cores shared with other work: one compile at a time per package, parallel packages capped.
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor%%.*}"
for c in "${missing[@]}"; do
  t=$(date +%s)
  if [ "$c" = images ]; then write_images; continue; fi
  if [ "$c" = e2e-images ]; then write_e2e_images; continue; fi
  if [[ $c == agnhost-localhost.* ]]; then
    # agnhost's image has porter's TLS pair at / (its Dockerfile ADDs them), from the same tree.
    cp "$source_dir/test/images/agnhost/porter/${c#agnhost-}" "$out/bin/$c"
    continue
  fi
  if [ "$c" = coredns ]; then
    # Its own module (no staging replacements): installed as it is published.
    rm -rf "$out/coredns.new"
    (cd / && CGO_ENABLED=0 GOBIN="$out/coredns.new" "$go" install -p "${BUILD_JOBS:-2}" -trimpath \
      -ldflags "-s -w" "github.com/coredns/coredns@$coredns_version")
    mv -f "$out/coredns.new/coredns" "$out/bin/coredns"
    rmdir "$out/coredns.new"
    echo "$coredns_version" >"$out/bin/coredns.version"
    echo "built coredns $coredns_version in $(( $(date +%s) - t )) s"
    continue
  fi
  if [ "$c" = etcd ]; then
    # The server module's go.mod replaces etcd's sibling modules with paths of its tree, which
    # `go install pkg@version` refuses: a scratch module of its own requires it (the siblings at
    # the same version, as it requires them) and builds its main package, the etcd command.
    etcd_work=$out/etcd-module
    mkdir -p "$etcd_work"
    printf 'module yh-genie.test/etcd-build\ngo 1.24\nrequire go.etcd.io/etcd/server/v3 %s\n' \
      "$etcd_version" >"$etcd_work/go.mod"
    (cd "$etcd_work" && CGO_ENABLED=0 "$go" build -mod=mod -p "${BUILD_JOBS:-2}" -trimpath -ldflags "-s -w" \
      -o "$out/bin/etcd.new" go.etcd.io/etcd/server/v3)
    mv -f "$out/bin/etcd.new" "$out/bin/etcd"
    echo "$etcd_version" >"$out/bin/etcd.version"
    echo "built etcd $etcd_version in $(( $(date +%s) - t )) s"
    continue
  fi
  case $c in
    # The e2e suite is the test binary of test/e2e; the ginkgo CLI is the version go.mod pins.
    e2e.test) build=(test -c); package=k8s.io/kubernetes/test/e2e ;;
    agnhost) build=(build); package=k8s.io/kubernetes/test/images/agnhost ;;
    ginkgo) build=(build); package=github.com/onsi/ginkgo/v2/ginkgo ;;
    *) build=(build); package=k8s.io/kubernetes/cmd/$c ;;
  esac
  CGO_ENABLED=0 "$go" "${build[@]}" -mod=mod -p "${BUILD_JOBS:-2}" -trimpath -ldflags "$ldflags" \
    -o "$out/bin/$c.new" "$package"
  mv -f "$out/bin/$c.new" "$out/bin/$c"
  echo "built $c $version in $(( $(date +%s) - t )) s"
done
echo "kubernetes $version built in $(( $(date +%s) - started )) s into $out/bin"
echo "$out/bin"
