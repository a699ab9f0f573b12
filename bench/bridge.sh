#!/usr/bin/env bash
# Time N ADDs then N DELs of yh-bridge against the reference `bridge` plugin on the same
# configuration, and yonghui -> yh-bridge (in process) against yonghui -> bridge (exec), in a
# throwaway node netns with throwaway pod netns. Prints median and p90 per case. No pass/fail.
#
#   cargo build --release && sudo bench/bridge.sh            # N=50 by default
#   N=200 sudo -E bench/bridge.sh
#
# Only the plugin process is timed: the loop runs inside the node netns and reads bash's
# EPOCHREALTIME around each exec, so `ip netns exec` and netns creation are not counted.
set -euo pipefail

N=${N:-50}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${YH_GENIE:-$ROOT/target/release/yh-genie}
REFERENCE=${REFERENCE_PLUGINS:-/usr/lib/cni}

[ "$(id -u)" = 0 ] || { echo "bench/bridge.sh needs root (network namespaces)" >&2; exit 1; }
[ -x "$BIN" ] || { echo "no $BIN: run cargo build --release first" >&2; exit 1; }
[ -x "$REFERENCE/bridge" ] || { echo "no reference plugins in $REFERENCE (apt-get install containernetworking-plugins)" >&2; exit 1; }

WORK=$(mktemp -d /tmp/yh-bench.XXXXXX)
PREFIX=ybb$$
cleanup() {
    for ns in $(ip netns list | awk '{print $1}' | grep "^$PREFIX" || true); do ip netns delete "$ns"; done
    rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$WORK/bin"
ln -s "$REFERENCE"/* "$WORK/bin/"
for name in yh-bridge yonghui; do ln -sf "$BIN" "$WORK/bin/$name"; done

# Every case gets its own bridge, subnet, host-local dir and container ids, so all of them share
# one node netns and run interleaved (pod i of every case, then pod i+1): background load on a
# shared machine then hits every case alike.
conf() { # case number, plugin type, extra keys
    local k=$1 type=$2 extra=$3
    local ipam="\"ipam\":{\"type\":\"host-local\",\"dataDir\":\"$WORK/ipam-$k\",\"ranges\":[[{\"subnet\":\"10.$k.1.0/24\"}]],\"routes\":[{\"dst\":\"10.$k.0.0/16\"}]}"
    local keys="\"bridge\":\"bench$k\",\"isGateway\":true,\"mtu\":1450,\"hairpinMode\":true"
    printf '{"cniVersion":"1.0.0","name":"bench%s","type":"%s",%s,%s%s}\n' "$k" "$type" "$keys" "$ipam" "$extra" >"$WORK/$k.json"
}
yonghui() { # case number, delegate type
    local k=$1
    printf 'FLANNEL_NETWORK=10.%s.0.0/16\nFLANNEL_SUBNET=10.%s.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n' "$k" "$k" >"$WORK/subnet-$k.env"
    printf '{"cniVersion":"1.0.0","name":"bench%s","type":"yonghui","subnetFile":"%s","dataDir":"%s","ipam":{"dataDir":"%s"},"delegate":{"type":"%s","bridge":"bench%s","hairpinMode":true}}\n' \
        "$k" "$WORK/subnet-$k.env" "$WORK/yonghui-$k" "$WORK/ipam-$k" "$2" "$k" >"$WORK/$k.json"
}
LABELS=("yh-bridge" "bridge (reference)" "yh-bridge, ipMasq" "bridge (reference), ipMasq"
    "yonghui -> yh-bridge (in process)" "yonghui -> bridge (exec)")
PLUGINS=(yh-bridge bridge yh-bridge bridge yonghui yonghui)
conf 1 yh-bridge ""
conf 2 bridge ""
conf 3 yh-bridge ',"ipMasq":true'
conf 4 bridge ',"ipMasq":true'
yonghui 5 yh-bridge
yonghui 6 bridge

NODE=${PREFIX}node
ip netns add "$NODE"
ip -n "$NODE" link set lo up
for k in $(seq 1 ${#PLUGINS[@]}); do
    for i in $(seq 0 "$N"); do ip netns add "${PREFIX}p${k}x$i"; done
done

# Prints one line per case and command: "<case> <ADD|DEL> <microseconds>...".
# shellcheck disable=SC2016 # the inner script is single-quoted on purpose: it expands inside the node netns
ip netns exec "$NODE" env WORK="$WORK" N="$N" POD="/run/netns/${PREFIX}p" PLUGINS="${PLUGINS[*]}" \
    CNI_PATH="$WORK/bin" CNI_IFNAME=eth0 bash -c '
    read -r -a plugins <<<"$PLUGINS"
    call() { # case, command, pod; prints elapsed microseconds
        local t0=$EPOCHREALTIME
        CNI_COMMAND=$2 CNI_CONTAINERID=bench$1x$3 CNI_NETNS=$POD$1x$3 "$WORK/bin/${plugins[$1-1]}" <"$WORK/$1.json" 2>>"$WORK/plugins.log" \
            >"$WORK/out" || { echo "case $1 $2 of pod $3 failed: $(cat "$WORK/out")" >&2; exit 1; }
        local t1=$EPOCHREALTIME
        echo $(( ${t1/./} - ${t0/./} ))
    }
    declare -A times
    for k in $(seq 1 ${#plugins[@]}); do # warm-up: caches, bridges, NAT tables; not counted
        call "$k" ADD 0 >/dev/null
    done
    for cmd in ADD DEL; do
        for i in $(seq 1 $N); do
            for k in $(seq 1 ${#plugins[@]}); do times[$k $cmd]+=" $(call "$k" $cmd "$i")"; done
        done
    done
    for key in "${!times[@]}"; do echo "$key${times[$key]}"; done' >"$WORK/times"

# Median and p90 (nearest rank) of microsecond samples, in milliseconds.
stats() {
    tr ' ' '\n' | grep . | sort -n | awk '{ v[NR] = $1 } END {
        printf "%8.2f %8.2f", v[int((NR + 1) / 2)] / 1000, v[int(NR * 0.9 + 0.999)] / 1000 }'
}

echo "N=$N pods per case, interleaved; milliseconds per plugin call ($(nproc) CPUs, load $(cut -d" " -f1 /proc/loadavg), kernel $(uname -r))"
printf '%-36s %8s %8s   %8s %8s\n' case "ADD med" "ADD p90" "DEL med" "DEL p90"
for k in $(seq 1 ${#PLUGINS[@]}); do
    add=$(grep "^$k ADD " "$WORK/times" | cut -d" " -f3- | stats)
    del=$(grep "^$k DEL " "$WORK/times" | cut -d" " -f3- | stats)
    printf '%-36s %s   %s\n' "${LABELS[$k-1]}" "$add" "$del"
done
