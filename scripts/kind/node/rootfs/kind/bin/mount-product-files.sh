#!/bin/bash
# containerd's createContainer hook (cri-base.json): every container sees the node's own
# product_name and product_uuid where the host has DMI, as the kubelet does (see the entrypoint).
# The hook reads the container's state, with its bundle directory, on stdin.
set -o errexit -o nounset -o pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
rootfs=$(jq -r .bundle)/rootfs
cp /kind/product_name /kind/product_uuid "$rootfs/"
for dmi in sys/class/dmi/id sys/devices/virtual/dmi/id; do
	[[ ! -f /$dmi/product_name ]] || mount -o ro,bind "$rootfs/product_name" "$rootfs/$dmi/product_name"
	[[ ! -f /$dmi/product_uuid ]] || mount -o ro,bind "$rootfs/product_uuid" "$rootfs/$dmi/product_uuid"
done
