#!/usr/bin/env bash
# Installs what building and testing yh-genie needs on a fresh Debian machine (run as root):
# Debian's reference CNI plugins (real delegates and the behaviour to match), iproute2, iptables and
# nftables, ping, shellcheck; containerd and runc with gcc and libc6-dev (tests/cri runs a
# private containerd and builds its pause image); and Go with Debian's libcni sources, from which it
# builds the project's own libcni driver (tools/cnidrive) into target/tools/cnidrive; and, with the
# Go on PATH in module mode, the same driver against the current libcni (go.mod: CNI 1.1.0 with
# version lists, GC and STATUS) into target/tools/cnidrive11. For the local Kubernetes cluster
# (tests/cluster): busybox-static (the workloads' image), conntrack (kube-proxy) and umoci
# (which packs the nodes' images, and tests/cri's pause image); for the agnhost image of
# Kubernetes' e2e suite (tests/conformance.rs): curl, OpenBSD netcat and dig; scripts/cluster/build.sh
# builds Kubernetes itself, and the etcd it runs with (Debian's is older than Kubernetes supports).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(containernetworking-plugins iproute2 iptables nftables iputils-ping shellcheck jq time
          containerd runc gcc libc6-dev golang-go golang-github-appc-cni-dev
          busybox-static conntrack curl netcat-openbsd bind9-dnsutils umoci)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  # containerd's package would start (and enable) a system containerd. The tests run their own and
  # must not depend on or disturb one, so a policy-rc.d tells the package scripts not to start
  # services during this install (unless the machine already has a policy of its own).
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  if printf '%s\n' "${missing[@]}" | grep -qx containerd && command -v systemctl >/dev/null; then
    systemctl disable --quiet containerd.service 2>/dev/null || true
  fi
fi

# cnidrive: built against Debian's packaged libcni (GOPATH mode: no module download), rebuilt
# whenever its source or the Go toolchain changes. A stamp beside it records what it was built from.
tools=$PWD/target/tools
source_dir=$PWD/tools/cnidrive
stamp=$( (cat "$source_dir"/main.go "$source_dir"/lifecycle_old.go; go version; dpkg-query -W -f='${Version}' golang-github-appc-cni-dev) | sha256sum | cut -d' ' -f1)
if [ ! -x "$tools/cnidrive" ] || [ "$(cat "$tools/cnidrive.stamp" 2>/dev/null)" != "$stamp" ]; then
  mkdir -p "$tools"
  GOPATH=/usr/share/gocode GO111MODULE=off GOFLAGS='' GOCACHE="$tools/go-cache" \
    go build -o "$tools/cnidrive.new" ./tools/cnidrive
  mv -f "$tools/cnidrive.new" "$tools/cnidrive"
  echo "$stamp" > "$tools/cnidrive.stamp"
  echo "built $tools/cnidrive"
fi

# cnidrive11: module mode with the go on PATH (Go 1.22 or later; built here with go1.26 from
# /usr/local/go), libcni as tools/cnidrive/go.mod and go.sum pin it (fetched once through
# Go's module proxy into the module cache), with the GC and STATUS commands (build tag libcni11).
stamp=$( (cat "$source_dir"/*.go "$source_dir"/go.mod "$source_dir"/go.sum; go version) | sha256sum | cut -d' ' -f1)
if [ ! -x "$tools/cnidrive11" ] || [ "$(cat "$tools/cnidrive11.stamp" 2>/dev/null)" != "$stamp" ]; then
  mkdir -p "$tools"
  # Not fatal: without a recent enough Go or the module proxy, everything but the CNI 1.1 test of
  # tests/netns/capabilities.rs still runs (that test fails naming this script).
  if (cd "$source_dir" && GO111MODULE=on GOFLAGS=-mod=readonly GOCACHE="$tools/go-cache" \
      go build -tags libcni11 -o "$tools/cnidrive11.new" .); then
    mv -f "$tools/cnidrive11.new" "$tools/cnidrive11"
    echo "$stamp" > "$tools/cnidrive11.stamp"
    echo "built $tools/cnidrive11"
  else
    echo "note: $tools/cnidrive11 not built ($(go version); it needs Go 1.22 or later and the module proxy)" >&2
  fi
fi
