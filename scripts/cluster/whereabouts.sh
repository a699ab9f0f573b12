#!/usr/bin/env bash
# Builds whereabouts (its CNI IPAM plugin, `whereabouts`) from the Go module proxy, once per
# version, into ${YH_GENIE_CACHE:-/var/cache/yh-genie}/whereabouts-<version>/, with its CRDs beside
# it (crds/), for the cluster suite's test of a whereabouts NAD under yh-genie
# (YH_GENIE_WHEREABOUTS). With --controllers, also its two controllers beside it: the node slice
# controller (`nodeslicecontroller`, which node_slice_size needs) and the IPPool reconciler
# (`controlloop`), for bench/ipam.sh. Built in the module's own directory, under its own go.mod: `go install
# pkg@version` refuses a module with replace directives, which whereabouts' go.mod has. Without
# cgo, as its hack/build-go.sh builds it. Needs a Go at least as new as its go.mod asks (the
# Debian one is too old): /usr/local/go/bin/go or GO=... Usage:
#   scripts/cluster/whereabouts.sh [--controllers]    # prints the directory on its last line
set -euo pipefail

controllers=false
if [ "${1:-}" = --controllers ]; then controllers=true; fi

version=${WHEREABOUTS_VERSION:-v0.9.2}
module=github.com/k8snetworkplumbingwg/whereabouts
cache=${YH_GENIE_CACHE:-/var/cache/yh-genie}
out=$cache/whereabouts-$version
# Go's module and build caches in the same place (scripts/kind/common.sh says why).
export GOMODCACHE=${GOMODCACHE:-$cache/go/mod} GOCACHE=${GOCACHE:-$cache/go/build}
# One build of a version at a time (scripts/test.sh may be building it in the background).
mkdir -p "$cache"
exec 9>"$cache/whereabouts-$version.lock"
flock 9

go=${GO:-}
if [ -z "$go" ]; then
  if [ -x /usr/local/go/bin/go ]; then go=/usr/local/go/bin/go; else go=go; fi
fi

source_dir() {
  (cd / && "$go" mod download -json "$module@$version" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
}

# The controllers, built into $out once the plugin is there.
build_controllers() {
  local source_dir command
  source_dir=$(source_dir)
  for command in nodeslicecontroller controlloop; do
    [ -x "$out/$command" ] && continue
    (cd "$source_dir" && CGO_ENABLED=0 GOFLAGS=-mod=mod "$go" build -p "${BUILD_JOBS:-2}" -trimpath \
      -o "$out/$command.new" -ldflags "-s -w -X $module/pkg/version.Version=$version" "./cmd/$command")
    mv "$out/$command.new" "$out/$command"
  done
}

if [ -x "$out/whereabouts" ] && [ -d "$out/crds" ]; then
  if $controllers; then build_controllers; fi
  echo "whereabouts $version: cached in $out"
  echo "$out"
  exit 0
fi

started=$(date +%s)
rm -rf "$out.new"
mkdir -p "$out.new/crds"
source_dir=$(source_dir)
(cd "$source_dir" && CGO_ENABLED=0 GOFLAGS=-mod=mod "$go" build -p "${BUILD_JOBS:-2}" -trimpath \
  -o "$out.new/whereabouts" -ldflags "-s -w -X $module/pkg/version.Version=$version" ./cmd/)
cp "$source_dir"/doc/crds/whereabouts.cni.cncf.io_*.yaml "$out.new/crds/"
rm -rf "$out"
mv "$out.new" "$out"
if $controllers; then build_controllers; fi
echo "built whereabouts $version in $(( $(date +%s) - started )) s"
echo "$out"
