#!/usr/bin/env bash
# The README's kind quick starts, run for real on a machine that reaches Debian's packages, the Go
# module proxy and the crate registry but no image registry: e2e/run.sh (yh-genie as the node's
# CNI, flannel's daemon as the yonghui fabric) and e2e/beside.sh (yh-genie beside the network the
# cluster already has, flannel with its CNI plugin), as a user runs them, with Docker, kind and
# kubectl, the one difference being the node image passed to `kind create cluster --image` (built
# here, since the published one cannot be pulled).
#
#   1. Debian's packages it needs (docker.io, mmdebstrap, libseccomp-dev for runc, ...);
#   2. Kubernetes (scripts/cluster/build.sh: its binaries, and the etcd its kubeadm deploys);
#   3. kind, the node's runtime parts, flanneld, flannel's CNI plugin, Debian root filesystems
#      (scripts/kind/binaries.sh);
#   4. a Docker engine of its own (scripts/kind/dockerd.sh), then in it the node image, flannel's,
#      its CNI plugin's, busybox's, and the stand-in for the Dockerfile's Rust image
#      (scripts/kind/images.sh);
#   5. e2e/run.sh, then e2e/beside.sh, with Debian's Docker CLI (the engine's own release; BuildKit
#      is built into the engine), kind and Kubernetes' kubectl first on PATH;
#   6. whatever happens: the cluster, every container, the engine, its bridges and iptables rules
#      and chains, the FORWARD policy and the kernel settings it or the nodes changed, as they were.
#
# Everything slow is cached by version under ${YH_GENIE_CACHE:-/var/cache/yh-genie}/ (kind-*, and
# the Docker engine's images and build cache in kind-docker/). docs/kind.md says what is built and
# how it differs from kind's published node image, and what each step costs. Needs root.
# Usage: scripts/kind-e2e.sh   (KEEP_CLUSTER=1 is refused: the engine stops at the end)
#        scripts/kind-e2e.sh --quick-start   e2e/run.sh alone
#        scripts/kind-e2e.sh --beside        e2e/beside.sh alone
#        scripts/kind-e2e.sh --prepare   steps 1 to 3 only, into the cache (scripts/test.sh runs
#                                        this in the background while the other tiers run)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/kind/common.sh
source scripts/kind/common.sh
# shellcheck source=scripts/kind/dockerd.sh
source scripts/kind/dockerd.sh

prepare_only=0
runs=(e2e/run.sh e2e/beside.sh)
case ${1:-} in
	"") ;;
	--prepare) prepare_only=1 ;;
	--quick-start) runs=(e2e/run.sh) ;;
	--beside) runs=(e2e/beside.sh) ;;
	*)
		echo "usage: scripts/kind-e2e.sh [--prepare | --quick-start | --beside]" >&2
		exit 2
		;;
esac

if [[ $(id -u) -ne 0 ]]; then
	echo "scripts/kind-e2e.sh needs root: it runs its own Docker engine" >&2
	exit 1
fi
if [[ ${KEEP_CLUSTER:-0} == 1 ]]; then
	echo "KEEP_CLUSTER=1: the engine the cluster runs in stops at the end of scripts/kind-e2e.sh; run e2e/run.sh or e2e/beside.sh yourself" >&2
	exit 1
fi

started=$SECONDS
KIND_TIMES=$(mktemp)
export KIND_TIMES
run=$(mktemp -d /run/yh-genie-kind.XXXXXX)
teardown() {
	local rc=$?
	trap - EXIT INT TERM
	kind_log "stopping the Docker engine, restoring the host"
	kind_timed teardown kind_dockerd_stop || rc=1
	rm -rf "$run"
	kind_log "times (s)"
	column -t -s $'\t' "$KIND_TIMES" >&2 || cat "$KIND_TIMES" >&2
	rm -f "$KIND_TIMES"
	local outcome=PASS
	((prepare_only)) && outcome=prepared
	((rc == 0)) || outcome="FAIL ($rc)"
	printf 'scripts/kind-e2e.sh: %s in %d s\n' "$outcome" $((SECONDS - started)) >&2
	exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT TERM

# docker is Debian's CLI, the engine's own release, for every step (the newer CLI some machines have
# in /usr/local/bin wants buildx for BuildKit, and falls back to the legacy builder without it).
mkdir -p "$run/bin"
ln -s /usr/bin/docker "$run/bin/docker"
export PATH=$run/bin:$PATH

# Debian's packages: the engine and its CLI, mmdebstrap, runc's seccomp headers,
# a C compiler (runc, the pause image), jq (e2e/run.sh, runc-bounded.sh),
# capsh (runc-bounded.sh).
prereqs() {
	local packages=(docker.io mmdebstrap libseccomp-dev gcc libc6-dev jq libcap2-bin) missing=() p
	for p in "${packages[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	((${#missing[@]} == 0)) && return
	apt-get update -qq
	# docker.io's scripts would start (and enable) a system dockerd; this run starts its own.
	local policy=
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		policy=/usr/sbin/policy-rc.d
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	[[ -z $policy ]] || rm -f "$policy"
	if command -v systemctl >/dev/null && [[ -d /run/systemd/system ]]; then
		systemctl disable --now --quiet docker.service docker.socket 2>/dev/null || true
	fi
}
kind_timed "debian packages" prereqs

kind_log "Kubernetes (scripts/cluster/build.sh)"
k8s_bin=$(kind_timed "kubernetes binaries" scripts/cluster/build.sh --without-e2e | tail -1)
kind_timed "binaries (all)" scripts/kind/binaries.sh "$k8s_bin" >"$run/artifacts"
cat "$run/artifacts" >&2
if ((prepare_only)); then
	exit 0
fi

kind_log "starting dockerd"
kind_timed "dockerd start" kind_dockerd_start "$run/dockerd" "$kind_cache_root/kind-docker"
node_image=$(scripts/kind/images.sh "$run/artifacts" | tail -1)

# What a user with kind has on PATH: docker, kind, and kubectl of the cluster's Kubernetes release.
ln -s "$(sed -n 's/^kind=//p' "$run/artifacts")" "$run/bin/kind"
ln -s "$k8s_bin/kubectl" "$run/bin/kubectl"
kind version >&2

for script in "${runs[@]}"; do
	kind_log "$script with KIND_NODE_IMAGE=$node_image"
	KIND_NODE_IMAGE=$node_image kind_timed "$script" "$script"
done
