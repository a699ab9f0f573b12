#!/usr/bin/env bash
# Builds Multus (thin: `multus`; thick: `multus-shim` and `multus-daemon`; and `passthru`'s
# installer is not needed) from the Go module proxy, once per version, into
# ${YH_GENIE_CACHE:-/var/cache/yh-genie}/multus-<version>/bin, for the cluster suite's test of
# docs/migrate.md (YH_GENIE_MULTUS_BIN): a node whose pods Multus attached moves to yh-genie.
# Without cgo, as Multus's own hack/build-go.sh builds it. Needs a Go at least as new as its
# go.mod asks (the Debian one is too old): /usr/local/go/bin/go or GO=... Usage:
#   scripts/cluster/multus.sh          # prints the bin dir on its last line
set -euo pipefail

version=${MULTUS_VERSION:-v4.3.0}
module=gopkg.in/k8snetworkplumbingwg/multus-cni.v4
cache=${YH_GENIE_CACHE:-/var/cache/yh-genie}
out=$cache/multus-$version
# Go's module and build caches in the same place (scripts/kind/common.sh says why).
export GOMODCACHE=${GOMODCACHE:-$cache/go/mod} GOCACHE=${GOCACHE:-$cache/go/build}
# One build of a version at a time (scripts/test.sh may be building it in the background).
mkdir -p "$cache"
exec 9>"$cache/multus-$version.lock"
flock 9
commands=(multus multus-shim multus-daemon)

go=${GO:-}
if [ -z "$go" ]; then
  if [ -x /usr/local/go/bin/go ]; then go=/usr/local/go/bin/go; else go=go; fi
fi

missing=0
for c in "${commands[@]}"; do [ -x "$out/bin/$c" ] || missing=1; done
if [ $missing -eq 0 ]; then
  echo "Multus $version: cached in $out/bin"
  echo "$out/bin"
  exit 0
fi

started=$(date +%s)
rm -rf "$out/bin.new"
mkdir -p "$out/bin.new"
# Built in the module's own directory, under its own go.mod: `go install pkg@version` asks the
# proxy for the module's version list, which it refuses for this gopkg.in path, while the version
# itself is served. -mod=mod: the published module keeps vendor/modules.txt but not the vendored
# code.
source_dir=$(cd / && "$go" mod download -json "$module@$version" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
packages=()
for c in "${commands[@]}"; do packages+=("./cmd/$c"); done
(cd "$source_dir" && CGO_ENABLED=0 GOFLAGS=-mod=mod "$go" build -p "${BUILD_JOBS:-2}" -trimpath -o "$out/bin.new/" \
  -ldflags "-s -w -X $module/pkg/multus.version=$version" "${packages[@]}")
rm -rf "${out:?}/bin"
mv "$out/bin.new" "$out/bin"
echo "built Multus $version in $(( $(date +%s) - started )) s"
echo "$out/bin"
