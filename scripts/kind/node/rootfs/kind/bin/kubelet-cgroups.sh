#!/bin/bash
# Before each start of the kubelet: the cgroups it runs pods under exist. On cgroup v1 the
# entrypoint made them in every hierarchy but systemd's own. On cgroup v2 they are made here, once
# systemd has left the root cgroup (so the root may delegate controllers), with every controller
# enabled below them.
set -o errexit -o nounset -o pipefail
if [[ ! -f /sys/fs/cgroup/cgroup.controllers ]]; then
	mkdir -p /sys/fs/cgroup/systemd/kubelet
	exit 0
fi
if grep -qv '^0$' /sys/fs/cgroup/cgroup.procs; then
	echo 'the root cgroup still has processes: this runs under systemd, before the kubelet' >&2
	exit 1
fi
enable_controllers() {
	local controllers
	controllers=$(sed -e 's/ / +/g' -e 's/^/+/' "/sys/fs/cgroup/$1/cgroup.controllers")
	echo "$controllers" >"/sys/fs/cgroup/$1/cgroup.subtree_control"
}
enable_controllers /
for group in kubelet kubelet.slice; do
	mkdir -p "/sys/fs/cgroup/$group"
	enable_controllers "$group"
done
