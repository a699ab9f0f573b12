# Sourced by scripts/kind-e2e.sh and scripts/kind/*.sh: what the kind run is built from, where it is
# cached, and the helpers they share. Every version of a third-party part is pinned here or read from
# the one file that owns it:
#   - Kubernetes: whatever scripts/cluster/build.sh builds (its default version), read from kubeadm;
#   - etcd, CoreDNS: what that kubeadm deploys (`kubeadm config images list`); the pause image: the
#     sandbox image of the node's containerd configuration, as kind's node image build does;
#   - flannel: the tag of the image e2e/flannel.yaml runs; busybox: the tag the e2e pods name, the
#     program Debian's busybox-static of KIND_BUSYBOX_SUITE;
#   - kind and what its base image pins: below.
# shellcheck shell=bash disable=SC2034 # the variables are the sourcing scripts'

# kind v0.33.0: its default node image is kindest/node:v1.37.0 (v0.30.0 cannot make a 1.37 cluster:
# it writes kubeadm's v1beta3 configuration, which kubeadm 1.37 refuses).
KIND_VERSION=v0.33.0
# What kind v0.33.0's base image (images/base/Dockerfile) builds in, and the Debian release of the
# node. containerd: the CRI suite's release (scripts/containerd2.sh's default, built once for both)
# rather than kind's v2.3.4; both are 2.x, whose configuration kind v0.33.0's `kind load` reads.
KIND_CONTAINERD_VERSION=v2.4.2
KIND_RUNC_VERSION=v1.4.3
KIND_CRICTL_VERSION=v1.36.0
KIND_CNI_PLUGINS_VERSION=v1.9.1
KIND_CNI_PLUGINS=(ipam/host-local main/loopback main/ptp meta/portmap)
# kind's base moved to Debian 13 (trixie); the node stays on 12 (bookworm), the release of the
# machines it runs on, whose systemd boots as a container's init on a cgroup v1 host.
KIND_DEBIAN_SUITE=bookworm
# The pods' busybox: Debian 13's static one (1.37.0; the published busybox:1.36 is 1.36.1). Debian
# 12's (1.35.0) wget dies of SIGSEGV when given a timeout (-T), which e2e/run.sh's fetches give.
KIND_BUSYBOX_SUITE=trixie
KIND_DEBIAN_MIRROR=${KIND_DEBIAN_MIRROR:-http://deb.debian.org/debian}
KIND_DEBIAN_SECURITY_MIRROR=${KIND_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}

kind_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
kind_cache_root=${YH_GENIE_CACHE:-/var/cache/yh-genie}
# Go's module and build caches beside the programs they build (scripts/cluster/build.sh and
# scripts/containerd2.sh use the same two), so a cold run downloads each module once and a kept
# cache keeps them; both are keyed by content (module@version, and the compiler, flags and sources).
export GOMODCACHE=${GOMODCACHE:-$kind_cache_root/go/mod} GOCACHE=${GOCACHE:-$kind_cache_root/go/build}

kind_go=${GO:-}
if [[ -z $kind_go ]]; then
	if [[ -x /usr/local/go/bin/go ]]; then kind_go=/usr/local/go/bin/go; else kind_go=go; fi
fi

# The first `image:` of a manifest.
kind_manifest_image() { awk '$1 == "image:" { print $2; exit }' "$1"; }

# kind_hash FILE...: a short hash of the files' contents (and names), for cache keys.
kind_hash() { (for f in "$@"; do printf '%s\n' "$f"; cat "$f"; done) | sha256sum | cut -c1-12; }

# kind_timed NAME CMD...: runs CMD and prints how long it took on stderr, wall and CPU (user and
# system time of the processes it ran, Docker's engine excepted: a `docker build` runs in the
# engine), and as a line of the file $KIND_TIMES when that is set (scripts/kind-e2e.sh prints them
# all at the end). The CPU time tells what a step costs on a machine that other work shares.
kind_timed() {
	local name=$1 started=$SECONDS rc=0 outcome="" cpu_before cpu
	shift
	kind_cpu_ticks
	cpu_before=$kind_cpu
	"$@" || rc=$?
	kind_cpu_ticks
	((rc == 0)) || outcome=" (failed: $rc)"
	cpu=$(((kind_cpu - cpu_before) / kind_clock_ticks))
	printf 'time: %s %d s (CPU %d s)%s\n' "$name" $((SECONDS - started)) "$cpu" "$outcome" >&2
	if [[ -n ${KIND_TIMES:-} ]]; then
		printf '%s\t%d s\tCPU %d s%s\n' "$name" $((SECONDS - started)) "$cpu" "$outcome" >>"$KIND_TIMES"
	fi
	return "$rc"
}
# kind_cpu_ticks: sets kind_cpu to the CPU time, in clock ticks, of this shell's children that have
# ended (fields cutime and cstime of /proc/PID/stat; read without starting a process).
kind_clock_ticks=$(getconf CLK_TCK)
kind_cpu_ticks() {
	local -a stat
	read -r -a stat <"/proc/$BASHPID/stat"
	kind_cpu=$((stat[15] + stat[16]))
}

kind_log() { printf '\n=== %s\n' "$*" >&2; }
