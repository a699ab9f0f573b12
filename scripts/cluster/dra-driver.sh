#!/usr/bin/env bash
# Builds the cluster suite's test DRA driver (tests/support/dra-driver: a kubelet plugin publishing
# veth links as network devices) with the Go module proxy's k8s.io/dynamic-resource-allocation,
# once per source: the binary is cached outside the checkout, in
# ${YH_GENIE_CACHE:-/var/cache/yh-genie}/dra-driver-<hash of its sources>/, so later runs and fresh
# clones on the same machine reuse it. Needs a Go at least as new as its go.mod asks (the Debian
# one is too old): /usr/local/go/bin/go or GO=... Usage:
#   scripts/cluster/dra-driver.sh       # prints the binary's path on its last line
set -euo pipefail

source_dir=$(cd "$(dirname "$0")/../../tests/support/dra-driver" && pwd)
cache=${YH_GENIE_CACHE:-/var/cache/yh-genie}
go=${GO:-}
if [ -z "$go" ]; then
  if [ -x /usr/local/go/bin/go ]; then go=/usr/local/go/bin/go; else go=go; fi
fi

key=$(cat "$source_dir"/go.mod "$source_dir"/go.sum "$source_dir"/*.go | sha256sum | cut -c1-16)
out=$cache/dra-driver-$key
binary=$out/yh-genie-test-dra-driver
# One build at a time (scripts/test.sh may be building it in the background).
mkdir -p "$cache"
exec 9>"$out.lock"
flock 9
if [ -x "$binary" ]; then
  echo "test DRA driver: cached in $out"
  echo "$binary"
  exit 0
fi

started=$(date +%s)
mkdir -p "$out"
# Module mode whatever the environment says; go.sum is completed if the proxy has more to say.
(cd "$source_dir" && GOFLAGS=-mod=mod GO111MODULE=on CGO_ENABLED=0 "$go" build -trimpath -o "$binary.tmp" .)
mv "$binary.tmp" "$binary"
echo "test DRA driver: built in $(($(date +%s) - started))s into $out"
echo "$binary"
