#!/bin/bash
# The node container's first process: prepares what systemd and the kubelet need from inside a
# privileged container, then becomes systemd (the arguments, /sbin/init). kind starts the node
# container with --privileged, a private cgroup namespace, tmpfs /run and /tmp and a volume on /var,
# and waits for "Reached target ... Multi-User System" (systemd) or "detected cgroup v1" (below) in
# the container's log before it goes on.
#
# For rootful Docker or Podman with a private cgroup namespace (Docker 20.10 and later, which kind
# asks for), on cgroup v1 or v2. Not handled here, unlike kind's own node image: user namespaces
# (rootless engines), cgroup v1 without a cgroup namespace, snapshotters other than overlayfs, proxy
# settings, and a node restarted with another address.
set -o errexit -o nounset -o pipefail

say() { echo "INFO: $*" >&2; }
die() {
	echo "ERROR: $*" >&2
	exit 1
}

if ! grep -Eq '^[[:space:]]*0[[:space:]]+0[[:space:]]+4294967295' /proc/self/uid_map; then
	die 'this node image does not run in a user namespace (a rootless engine): use a rootful one'
fi

# containerd sets a container's oom_score_adj as the kubelet asks (-997 for node-critical pods),
# and lowering it takes CAP_SYS_RESOURCE. Where the node lacks it (an engine in a user namespace,
# or a host that withholds it from root), containerd keeps every container at or above its own.
bounding=$(awk '$1 == "CapBnd:" { print $2 }' /proc/self/status)
if ((((0x$bounding >> 24) & 1) == 0)); then
	say 'no CAP_SYS_RESOURCE: containers keep an oom_score_adj no lower than containerd'"'"'s'
	sed -i 's/^\( *restrict_oom_score_adj = \)false/\1true/' /etc/containerd/config.toml
fi

# systemd expects a read-only /sys in a container; --privileged made it writable. Mounts made below
# by the kubelet and containerd must propagate.
mount -o remount,ro /sys
mount --make-rshared /

# The kubelet runs pods under the cgroup root /kubelet (kind's kubelet configuration), and systemd
# must not remove it before the kubelet starts: on cgroup v1 each hierarchy gets /kubelet and
# /kubelet.slice bound onto themselves. On cgroup v2 the kubelet's unit makes them once systemd has
# moved itself out of the root cgroup (/kind/bin/kubelet-cgroups.sh).
prepare_cgroup_v1() {
	local mnt dir
	if [[ $(grep -E '^[^:]*:([^:]*,)?cpu(,[^:]*)?:' /proc/self/cgroup | cut -d: -f3) != / ]]; then
		die 'cgroup v1 without a cgroup namespace: start the node with --cgroupns=private (Docker 20.10 or later)'
	fi
	# The misc controller nests badly on v1; systemd would mount it again unless /proc/cgroups hides it
	# (kind-undo-cgroups.service unmounts that view once systemd is up).
	if [[ -d /sys/fs/cgroup/misc ]]; then
		if ! umount /sys/fs/cgroup/misc || ! rmdir /sys/fs/cgroup/misc; then
			say 'could not remove the misc cgroup controller'
		fi
		grep -v misc /proc/cgroups >/kind/cgroups
		mount --bind /kind/cgroups /proc/cgroups
	fi
	mount --make-rprivate /sys/fs/cgroup
	while read -r mnt; do
		for dir in /kubelet /kubelet.slice; do
			mkdir -p "$mnt$dir"
			if [[ $mnt == */cpuset ]]; then
				# A cpuset cgroup takes no process until it has cpus and mems.
				cat "$mnt/cpuset.cpus" >"$mnt$dir/cpuset.cpus"
				cat "$mnt/cpuset.mems" >"$mnt$dir/cpuset.mems"
			fi
			mount --bind "$mnt$dir" "$mnt$dir"
		done
	done < <(findmnt -lun -o target -t cgroup)
}
if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
	say 'detected cgroup v2'
else
	say 'detected cgroup v1'
	prepare_cgroup_v1
fi

# Every node is a machine of its own to the kubelet: its own machine-id, and where the host has DMI,
# its own product_uuid (pods see the same through /kind/bin/mount-product-files.sh, a createContainer
# hook of containerd's base runtime spec).
rm -f /etc/machine-id
systemd-machine-id-setup >/dev/null
echo kind >/kind/product_name
[[ -f /kind/product_uuid ]] || cat /proc/sys/kernel/random/uuid >/kind/product_uuid
for dmi in /sys/class/dmi/id /sys/devices/virtual/dmi/id; do
	[[ ! -f $dmi/product_name ]] || mount -o ro,bind /kind/product_name "$dmi/product_name"
	[[ ! -f $dmi/product_uuid ]] || mount -o ro,bind /kind/product_uuid "$dmi/product_uuid"
done

# iptables, ip6tables: the backend the engine wrote the node's rules with (its DNS redirection), so
# that the node's own rules (kube-proxy's, the CNI plugins') land in the same tables.
count_rules() { "$@" 2>/dev/null | grep -c '^-' || true; }
legacy=$(($(count_rules iptables-legacy-save) + $(count_rules ip6tables-legacy-save)))
nft=$(($(count_rules timeout 5 iptables-nft-save) + $(count_rules timeout 5 ip6tables-nft-save)))
mode=nft
((legacy < nft)) || mode=legacy
say "iptables backend: $mode ($legacy legacy rules, $nft nft rules)"
update-alternatives --quiet --set iptables "/usr/sbin/iptables-$mode"
update-alternatives --quiet --set ip6tables "/usr/sbin/ip6tables-$mode"

# DNS: the engine's resolver answers on 127.0.0.11 in the node's network namespace only, which pods
# (and CoreDNS, which forwards to the node's resolv.conf) cannot reach. Its redirection rules are
# moved to the address of the engine's host on the node's network, applied to traffic arriving from
# pods too, and resolv.conf names that address.
engine_dns=127.0.0.11
if grep -q "^nameserver $engine_dns\$" /etc/resolv.conf; then
	host_ip=$(timeout 5 getent ahostsv4 host.docker.internal | awk '{ print $1; exit }' || true)
	if [[ -z $host_ip || $host_ip == 127.* ]]; then
		host_ip=$(ip -4 route show default | awk '{ print $3; exit }')
	fi
	iptables-save -t nat |
		sed -e "s/-d ${engine_dns//./\\.}/-d $host_ip/g" \
			-e "s/--to-source :53/--to-source $host_ip:53/g" \
			-e 's/^-A OUTPUT \(.*\) -j DOCKER_OUTPUT$/&\n-A PREROUTING \1 -j DOCKER_OUTPUT/' |
		iptables-restore
	resolv=$(sed "s/^nameserver $engine_dns\$/nameserver $host_ip/" /etc/resolv.conf)
	echo "$resolv" >/etc/resolv.conf
	say "DNS through $host_ip"
fi

say 'starting systemd'
exec "$@"
