#!/usr/bin/env bash
# Builds containerd 2.x (containerd, its runc shim and ctr) from the Go module proxy, once per
# version, into ${YH_GENIE_CACHE:-/var/cache/yh-genie}/containerd-<version>/bin, for the second run
# of tests/cri (YH_GENIE_CONTAINERD_BIN): the CRI node's tests under the containerd line that
# current Kubernetes releases ship with, beside Debian's 1.6. Without cgo, and without the btrfs,
# devmapper and zfs snapshotters (the tests use overlayfs). Needs a Go at least as new as its
# go.mod asks (the Debian one is too old): /usr/local/go/bin/go or GO=... Usage:
#   scripts/containerd2.sh            # prints the bin dir on its last line
set -euo pipefail

version=${CONTAINERD2_VERSION:-v2.4.2}
cache=${YH_GENIE_CACHE:-/var/cache/yh-genie}
out=$cache/containerd-$version
# Go's module and build caches in the same place (scripts/kind/common.sh says why).
export GOMODCACHE=${GOMODCACHE:-$cache/go/mod} GOCACHE=${GOCACHE:-$cache/go/build}
# One build of a version at a time (scripts/test.sh may be building it in the background).
mkdir -p "$cache"
exec 9>"$cache/containerd-$version.lock"
flock 9
commands=(containerd containerd-shim-runc-v2 ctr)

go=${GO:-}
if [ -z "$go" ]; then
  if [ -x /usr/local/go/bin/go ]; then go=/usr/local/go/bin/go; else go=go; fi
fi

missing=0
for c in "${commands[@]}"; do [ -x "$out/bin/$c" ] || missing=1; done
if [ $missing -eq 0 ]; then
  echo "containerd $version: cached in $out/bin"
  echo "$out/bin"
  exit 0
fi

started=$(date +%s)
rm -rf "$out/bin.new"
mkdir -p "$out/bin.new"
# Built in the module's own directory (as its Makefile does), under its own go.mod: `go install
# pkg@version` refuses modules with exclude directives (v2.1.x has some). -mod=readonly: the
# published module keeps vendor/modules.txt but not the vendored code.
source_dir=$(cd / && "$go" mod download -json "github.com/containerd/containerd/v2@$version" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
packages=()
for c in "${commands[@]}"; do packages+=("./cmd/$c"); done
(cd "$source_dir" && CGO_ENABLED=0 "$go" build -mod=readonly -p "${BUILD_JOBS:-2}" -trimpath -o "$out/bin.new/" \
  -tags no_btrfs,no_devmapper,no_zfs -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$version" \
  "${packages[@]}")
rm -rf "${out:?}/bin"
mv "$out/bin.new" "$out/bin"
echo "built containerd $version in $(( $(date +%s) - started )) s"
echo "$out/bin"
