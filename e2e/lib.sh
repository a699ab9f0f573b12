#!/usr/bin/env bash
# What the kind quick starts (e2e/run.sh, e2e/beside.sh) share: logging and failing, waits, the
# nodes, pods' addresses and fetches, sandboxes, the network-status annotation, and the EXIT trap.
# Sourced, never run. The script that sources it sets `ns` (the test namespace), `wait_secs` (how
# long one wait may take), `nodes` (the kind nodes' container names, filled once the cluster is
# up), `cluster`, `scratch` (a directory to remove at exit, or empty) and KUBECONFIG, and defines
# `diagnostics` (what to print when it fails).
# shellcheck disable=SC2154 # those variables are the sourcing script's

log() { printf '\n=== [%d s] %s\n' "$SECONDS" "$*" >&2; }

fail() {
	printf '\nFAIL: %s\n' "$*" >&2
	exit 1
}

# wait_until WHAT CMD...: run CMD every 2 s until it succeeds; fail after $wait_secs.
wait_until() {
	local what=$1 deadline=$((SECONDS + wait_secs))
	shift
	until "$@"; do
		((SECONDS < deadline)) || fail "timed out after ${wait_secs}s waiting for $what"
		sleep 2
	done
}

on_every_node() {
	local node
	for node in "${nodes[@]}"; do
		docker exec "$node" "$@" || return 1
	done
}

# The first `image:` of a manifest, or with a second argument the first matching that pattern.
manifest_image() { awk -v want="${2:-}" '$1 == "image:" && $2 ~ want { print $2; exit }' "$1"; }

ip_to_int() {
	local a b c d
	IFS=. read -r a b c d <<<"$1"
	echo $(((a << 24) | (b << 16) | (c << 8) | d))
}

# ip_in_cidr IP CIDR (IPv4). A malformed CIDR (e.g. from a failed lookup) is an error, not a match.
ip_in_cidr() {
	local ip net bits mask
	[[ $2 =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}$ ]] || fail "not an IPv4 CIDR: '$2'"
	[[ $1 =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ ]] || return 1
	ip=$(ip_to_int "$1")
	net=$(ip_to_int "${2%/*}")
	bits=${2#*/}
	mask=$((bits == 0 ? 0 : (0xffffffff << (32 - bits)) & 0xffffffff))
	(((ip & mask) == (net & mask)))
}

pod_field() { kubectl -n "$ns" get pod "$1" -o "jsonpath=$2"; }

# pod_addr_on POD DEV: the pod's IPv4 address on interface DEV; fails when there is not exactly one.
pod_addr_on() {
	local addrs
	addrs=$(kubectl -n "$ns" exec "$1" -- ip -4 -o addr show dev "$2") || fail "$1 has no $2"
	mapfile -t addrs < <(awk '{ split($4, a, "/"); print a[1] }' <<<"$addrs")
	((${#addrs[@]} == 1)) || fail "$1: want one address on $2, got ${#addrs[@]}: ${addrs[*]}"
	echo "${addrs[0]}"
}

# assert_fetch FROM URL WANT: an HTTP GET from pod FROM returns WANT (the answering pod's name).
assert_fetch() {
	local body
	body=$(kubectl -n "$ns" exec "$1" -- wget -q -O - -T 5 "$2") || fail "$1 cannot fetch $2"
	[[ $body == "$3" ]] || fail "$1 fetched '$body' from $2, want '$3'"
}

# The id of the one ready sandbox of POD on NODE (what CNI calls the container id).
sandbox_id() {
	docker exec "$1" crictl pods --namespace "$ns" --name "$2" -o json |
		jq -er --arg pod "$2" '[.items[] | select(.metadata.name == $pod and .state == "SANDBOX_READY") | .id]
			| if length == 1 then .[0] else error("want one ready sandbox, got \(length)") end'
}

node_has() { docker exec "$1" test -e "$2"; }

node_lacks() { ! docker exec "$1" test -e "$2"; }

# assert_network_status POD ETH0_IP NET1_IP: eth0 (the default, the pod IP) and net1, in that order.
assert_network_status() {
	local status
	status=$(pod_field "$1" '{.metadata.annotations.k8s\.v1\.cni\.cncf\.io/network-status}')
	jq -e --arg eth0 "$2" --arg net1 "$3" '
		length == 2
		and .[0].interface == "eth0" and .[0].default == true and (.[0].ips | index($eth0))
		and .[1].interface == "net1" and (.[1].default | not) and (.[1].ips | index($net1))' <<<"$status" >/dev/null ||
		fail "$1: network-status does not list eth0 $2 and net1 $3: $status"
}

no_installer_pods() {
	local pods
	pods=$(kubectl -n kube-system get pods -l app.kubernetes.io/name=yh-genie -o name) || return 1
	[[ -z $pods ]]
}

cleanup() {
	local rc=$?
	trap - EXIT
	if ((rc != 0)); then
		diagnostics || true
	fi
	if [[ ${KEEP_CLUSTER:-0} == 1 ]]; then
		log "kept cluster $cluster; KUBECONFIG=$KUBECONFIG"
	else
		kind delete cluster --name "$cluster" >/dev/null 2>&1 || true
		rm -f "$KUBECONFIG"
	fi
	if [[ -n $scratch ]]; then
		rm -rf "$scratch"
	fi
	exit "$rc"
}
