#!/usr/bin/env bash
# The main job on a fresh machine: install prerequisites, build the release binary, and give a pod
# a network the way a container runtime does — through libcni (tools/cnidrive) in throwaway network
# namespaces: yonghui reads a subnet.env and delegates to the built-in yh-bridge, the pod gets an
# address, routes and MTU, pings its gateway, and DEL takes everything back. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "scripts/run.sh needs root (network namespaces)" >&2; exit 1; }
scripts/prereqs.sh
cargo build --release --quiet
binary=$PWD/target/release/yh-genie
cnidrive=$PWD/target/tools/cnidrive
"$binary" --version

work=$(mktemp -d)
node=yhdemo-node-$$
pod=yhdemo-pod-$$
cleanup() {
  ip netns delete "$pod" 2>/dev/null || true
  ip netns delete "$node" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# A CNI bin dir as the installer lays it out: yh-genie under every plugin name, beside host-local.
mkdir -p "$work/bin"
for name in yh-genie yonghui yh-bridge veth router; do ln -s "$binary" "$work/bin/$name"; done
ln -s /usr/lib/cni/host-local "$work/bin/host-local"

cat > "$work/subnet.env" <<ENV
FLANNEL_NETWORK=10.1.0.0/16
FLANNEL_SUBNET=10.1.17.1/24
FLANNEL_MTU=1450
FLANNEL_IPMASQ=true
ENV
cat > "$work/yonghui.conflist" <<JSON
{ "cniVersion": "1.0.0", "name": "yonghui",
  "plugins": [ { "type": "yonghui", "subnetFile": "$work/subnet.env", "dataDir": "$work/yonghui",
                 "ipam": { "dataDir": "$work/ipam" } } ] }
JSON

ip netns add "$node"
ip netns add "$pod"
run() { ip netns exec "$node" env CNI_PATH="$work/bin" CNI_CACHE_DIR="$work/cache" "$cnidrive" "$@"; }

echo "== ADD (pod netns $pod, node netns $node)"
run add "$work/yonghui.conflist" "/run/netns/$pod" demo-container eth0 "IgnoreUnknown=1"
echo
echo "== the pod's network"
ip netns exec "$pod" ip -br addr show dev eth0
ip netns exec "$pod" ip route
ip netns exec "$pod" ping -c 1 -W 2 10.1.17.1 >/dev/null && echo "pod -> gateway 10.1.17.1: ok"
echo "== CHECK"
run check "$work/yonghui.conflist" "/run/netns/$pod" demo-container eth0 "IgnoreUnknown=1" && echo ok
echo "== DEL"
run del "$work/yonghui.conflist" "/run/netns/$pod" demo-container eth0 "IgnoreUnknown=1" && echo ok
left=$(find "$work/ipam" -type f -name '10.*' | wc -l)
echo "addresses still held: $left"
[ "$left" -eq 0 ]
