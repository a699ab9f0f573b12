#!/usr/bin/env bash
# Builds, in the running Docker engine, every image the kind run uses that no registry can give
# here, from what scripts/kind/binaries.sh built:
#   - kind's node image for the Kubernetes of scripts/cluster/build.sh: the node base
#     (scripts/kind/node/), then the steps of `kind build node-image`: kubeadm, kubelet and kubectl
#     in /usr/bin, /kind/version, and the control plane's images (kube-apiserver,
#     kube-controller-manager, kube-scheduler, kube-proxy, etcd, CoreDNS as this kubeadm names them,
#     and the sandbox image of the node's containerd configuration) imported into the node's
#     containerd, pinned, so that no node fetches them;
#   - flannel's image as e2e/flannel.yaml names it, the image of flannel's CNI plugin (with the
#     bridge plugin) as e2e/flannel-cni.yaml names it, busybox as the e2e and example pods name it
#     (Debian's static busybox, scripts/kind/common.sh says which);
#   - the Rust image the repository's Dockerfile starts from, as a stand-in under its name
#     (scripts/kind/images/rust.Dockerfile says what it is).
# Each image carries the key of what it was built from (label yh-genie.kind.key, or its tag) and is
# rebuilt only when that changes. Usage:
#   scripts/kind/images.sh ARTIFACTS      # ARTIFACTS: a file of the NAME=PATH lines of binaries.sh
# Prints the node image's name on its last line.
set -euo pipefail
# shellcheck source=scripts/kind/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

declare -A artifact=()
while IFS='=' read -r name path; do artifact[$name]=$path; done <"${1:?usage: scripts/kind/images.sh ARTIFACTS}"
k8s_version=${artifact[k8s_version]}
k8s_bin=${artifact[k8s_bin]}
key_label=yh-genie.kind.key
default_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
node_dir=$kind_repo/scripts/kind/node

work=$(mktemp -d /var/tmp/yh-genie-kind-images.XXXXXX)
trap 'rm -rf "$work"' EXIT

# fresh IMAGE KEY: IMAGE exists and was built from KEY.
fresh() { [[ $(docker image inspect -f "{{index .Config.Labels \"$key_label\"}}" "$1" 2>/dev/null) == "$2" ]]; }

# stat_key FILE...: a key from the files' names, sizes and times (built programs: their paths name
# their versions, and a rebuild replaces them whole).
stat_key() { stat -L -c '%n %s %Y' "$@" | sha256sum | cut -c1-12; }

# debian_image TARBALL: the root filesystem imported as an image, named with the tarball's key;
# prints the name.
debian_image() {
	local image
	image=yh-genie-kind/debian:$(basename "$1" .tar)
	if ! docker image inspect "$image" >/dev/null 2>&1; then
		docker import --change "ENV PATH=$default_path" --change 'CMD ["bash"]' "$1" "$image" >/dev/null
	fi
	echo "$image"
}

# program_image NAME FILE DEST [ENTRYPOINT]: FILE at DEST in an otherwise empty image.
program_image() {
	local name=$1 file=$2 dest=$3 entrypoint=${4:-} key dir
	key=$(printf '%s %s %s\n' "$(stat_key "$file")" "$dest" "$entrypoint" | sha256sum | cut -c1-12)
	fresh "$name" "$key" && return
	dir=$work/program-$RANDOM
	install -D -m 0755 "$file" "$dir/rootfs/$dest"
	mkdir -p "$dir/rootfs/tmp"
	chmod 1777 "$dir/rootfs/tmp"
	local changes=(--change "ENV PATH=$default_path" --change "LABEL $key_label=$key")
	[[ -z $entrypoint ]] || changes+=(--change "ENTRYPOINT [\"$entrypoint\"]")
	tar -C "$dir/rootfs" --owner=0 --group=0 -c . | docker import "${changes[@]}" - "$name" >/dev/null
	echo "built $name" >&2
}

# debian_program_image NAME BASE FILE DEST: FILE at DEST on the Debian image BASE.
debian_program_image() {
	local name=$1 base=$2 file=$3 dest=$4 key dir
	key=$(printf '%s %s %s\n' "$(stat_key "$file")" "$base" "$dest" | sha256sum | cut -c1-12)
	fresh "$name" "$key" && return
	dir=$work/program-$RANDOM
	mkdir -p "$dir"
	cp "$file" "$dir/program"
	docker build --quiet -f "$kind_repo/scripts/kind/images/on-debian.Dockerfile" --build-arg "BASE=$base" \
		--build-arg "DEST=$dest" --label "$key_label=$key" -t "$name" "$dir" >/dev/null
	echo "built $name" >&2
}

netfilter_base=$(debian_image "${artifact[rootfs_netfilter]}")

# The fabric's image.
flannel() {
	debian_program_image "$(kind_manifest_image "$kind_repo/e2e/flannel.yaml")" "$netfilter_base" \
		"${artifact[flanneld]}" /opt/bin/flanneld
}

# The image e2e/flannel-cni.yaml's install-cni-plugin copies flannel's CNI plugin and bridge from.
flannel_cni_plugin() {
	local name key dir bin=${artifact[flannel_cni_bin]}
	name=$(awk '$1 == "image:" && $2 ~ /flannel-cni-plugin:/ { print $2; exit }' "$kind_repo/e2e/flannel-cni.yaml")
	key=$(printf '%s %s\n' "$(stat_key "$bin/flannel" "$bin/bridge")" "$netfilter_base" | sha256sum | cut -c1-12)
	fresh "$name" "$key" && return
	dir=$work/flannel-cni-plugin
	mkdir -p "$dir"
	cp "$bin/flannel" "$bin/bridge" "$dir/"
	docker build --quiet -f "$kind_repo/scripts/kind/images/flannel-cni-plugin.Dockerfile" --build-arg "BASE=$netfilter_base" \
		--label "$key_label=$key" -t "$name" "$dir" >/dev/null
	echo "built $name" >&2
}

# The workloads' image: Debian's static busybox, a link per applet in /bin.
busybox() {
	local name key rootfs applet program=${artifact[busybox]}
	name=$(kind_manifest_image "$kind_repo/e2e/workload.yaml")
	key=$(stat_key "$program")
	fresh "$name" "$key" && return
	rootfs=$work/busybox
	mkdir -p "$rootfs/bin" "$rootfs/etc" "$rootfs/tmp"
	chmod 1777 "$rootfs/tmp"
	cp "$program" "$rootfs/bin/busybox"
	for applet in $("$program" --list); do
		[[ $applet == busybox ]] || ln -s busybox "$rootfs/bin/$applet"
	done
	printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n' >"$rootfs/etc/passwd"
	printf 'root:x:0:\nnobody:x:65534:\n' >"$rootfs/etc/group"
	tar -C "$rootfs" --owner=0 --group=0 -c . |
		docker import --change "ENV PATH=$default_path" --change 'CMD ["sh"]' --change "LABEL $key_label=$key" - "$name" >/dev/null
	echo "built $name from Debian's busybox-static ($("$program" | head -1))" >&2
}

# The Rust image the Dockerfile starts from, made of the machine's own Rust toolchain (the one
# cargo runs here) and the certificate authorities it trusts (a machine whose HTTPS goes through a
# proxy of its own reaches the crate registry only with that proxy's authority); its key is that
# toolchain's version and that bundle.
rust_standin() {
	local name base sysroot key ctx ca_bundle=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
	name=$(sed -n 's/^ARG RUST_IMAGE=//p' "$kind_repo/Dockerfile")
	if [[ -z $name ]]; then
		echo "the Dockerfile has no ARG RUST_IMAGE=<image>" >&2
		return 1
	fi
	base=$(debian_image "${artifact[rootfs_rust]}")
	sysroot=$(rustc --print sysroot)
	key=$(printf '%s\n%s\n%s\n' "$base" "$(rustc -vV)" "$(sha256sum <"$ca_bundle")" | sha256sum | cut -c1-12)
	fresh "$name" "$key" && return
	ctx=$work/rust
	mkdir -p "$ctx/toolchain/bin"
	cp "$ca_bundle" "$ctx/ca-certificates.crt"
	cp -a "$sysroot/bin/cargo" "$sysroot/bin/rustc" "$sysroot/bin/rustdoc" "$ctx/toolchain/bin/"
	cp -a "$sysroot/lib" "$ctx/toolchain/"
	docker build --quiet -f "$kind_repo/scripts/kind/images/rust.Dockerfile" --build-arg "BASE=$base" \
		--label "$key_label=$key" -t "$name" "$ctx" >/dev/null
	rm -rf "$ctx"
	echo "built $name: a stand-in on Debian $KIND_DEBIAN_SUITE with $(rustc --version)" >&2
}

# remove_other_tags REPOSITORY KEEP: removes the repository's images but KEEP.
remove_other_tags() {
	docker images --format '{{.Repository}}:{{.Tag}}' "$1" | { grep -vxF "$2" || true; } | xargs -r docker rmi >/dev/null
}

# The node image, named with the key of everything in it; prints its name.
node_image() {
	local base_key key image base ctx sandbox_image cid image_name program
	local -a node_files=() control_plane=()
	local -a programs=(kubeadm kubelet kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy)
	mapfile -t control_plane < <("$k8s_bin/kubeadm" config images list --kubernetes-version "$k8s_version" | grep -v /pause:)
	sandbox_image=$(sed -n 's/^ *sandbox_image = "\(.*\)"/\1/p' "$node_dir/rootfs/etc/containerd/config.toml")
	if [[ -z $sandbox_image ]]; then
		echo "no sandbox_image in $node_dir/rootfs/etc/containerd/config.toml" >&2
		return 1
	fi
	# Paths relative to the checkout, so that every clone computes the same key.
	mapfile -t node_files < <(cd "$kind_repo" && find scripts/kind/node -type f | sort)
	base_key=$(
		cd "$kind_repo" || exit 1
		{
			kind_hash scripts/kind/images.sh scripts/kind/common.sh tests/testkit/src/pause.c "${node_files[@]}"
			stat_key "${artifact[containerd_bin]}"/{containerd,containerd-shim-runc-v2,ctr} "${artifact[runc]}" \
				"${artifact[crictl]}" "${artifact[cni_bin]}"/{host-local,loopback,ptp,portmap}
			echo "${artifact[rootfs_node]}" "${artifact[rootfs_netfilter]}"
		} | sha256sum | cut -c1-12
	)
	key=$(printf '%s\n' "$base_key" "$(stat_key "${programs[@]/#/$k8s_bin/}" "${artifact[etcd]}" "${artifact[coredns]}")" \
		"${control_plane[@]}" | sha256sum | cut -c1-12)
	image=yh-genie-kind/node:$k8s_version-$key
	if docker image inspect "$image" >/dev/null 2>&1; then
		echo "$image"
		return
	fi

	base=yh-genie-kind/node-base:$base_key
	if ! docker image inspect "$base" >/dev/null 2>&1; then
		kind_log "building the node base"
		ctx=$work/node
		mkdir -p "$ctx/bin"
		cp -a "$node_dir/rootfs" "$ctx/rootfs"
		cp -a "${artifact[containerd_bin]}"/{containerd,containerd-shim-runc-v2,ctr} "${artifact[runc]}" \
			"${artifact[crictl]}" "${artifact[cni_bin]}"/{host-local,loopback,ptp,portmap} "$ctx/bin/"
		kind_timed "node base" docker build --quiet --build-arg "DEBIAN=$(debian_image "${artifact[rootfs_node]}")" \
			-f "$node_dir/Dockerfile" -t "$base" "$ctx" >/dev/null
	fi

	kind_log "building the control plane's images"
	for image_name in "${control_plane[@]}"; do
		program=${image_name##*/}
		program=${program%:*}
		case $program in
		kube-proxy) debian_program_image "$image_name" "$netfilter_base" "$k8s_bin/kube-proxy" /usr/local/bin/kube-proxy ;;
		kube-apiserver | kube-controller-manager | kube-scheduler)
			program_image "$image_name" "$k8s_bin/$program" "/usr/local/bin/$program"
			;;
		etcd) program_image "$image_name" "${artifact[etcd]}" /usr/local/bin/etcd ;;
		coredns) program_image "$image_name" "${artifact[coredns]}" /coredns /coredns ;;
		*)
			echo "kubeadm lists an image this script does not build: $image_name" >&2
			return 1
			;;
		esac
	done
	gcc -static -Os -o "$work/pause" "$kind_repo/tests/testkit/src/pause.c"
	program_image "$sandbox_image" "$work/pause" /pause /pause

	kind_log "building the node image $image"
	cid=$(docker run -d --entrypoint=sleep --security-opt seccomp=unconfined "$base" infinity)
	if ! kind_timed "node image" assemble_node "$cid" "$image" "${control_plane[@]}" "$sandbox_image"; then
		docker rm -f "$cid" >/dev/null
		return 1
	fi
	docker rm -f "$cid" >/dev/null
	# Only the current node image and its base stay.
	remove_other_tags yh-genie-kind/node "$image"
	remove_other_tags yh-genie-kind/node-base "$base"
	echo "$image"
}

# assemble_node CONTAINER IMAGE PRELOADED...: what `kind build node-image` does in its build
# container, with the images from the local engine instead of a registry.
assemble_node() {
	local cid=$1 image=$2 program listed preloaded
	shift 2
	for program in kubeadm kubelet kubectl; do
		docker cp "$k8s_bin/$program" "$cid:/usr/bin/$program"
		docker exec "$cid" chown root:root "/usr/bin/$program"
		docker exec "$cid" chmod 0755 "/usr/bin/$program"
	done
	docker exec "$cid" sh -c "echo $k8s_version >/kind/version"
	docker exec "$cid" bash -c 'nohup containerd >/dev/null 2>&1 &'
	docker exec "$cid" bash -c 'for i in $(seq 50); do [ -S /run/containerd/containerd.sock ] && break; sleep 0.2; done; ctr version >/dev/null'
	docker save "$@" | docker exec -i "$cid" ctr --namespace=k8s.io images import \
		--label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack --digests - >/dev/null
	listed=$(docker exec "$cid" ctr --namespace=k8s.io images list --quiet)
	for preloaded in "$@"; do
		if ! grep -qxF "$preloaded" <<<"$listed"; then
			echo "the node's containerd does not list $preloaded after the import" >&2
			return 1
		fi
	done
	docker exec "$cid" pkill -x containerd
	docker exec "$cid" bash -c 'for i in $(seq 50); do pgrep -x containerd >/dev/null || exit 0; sleep 0.2; done; exit 1'
	docker commit --change 'ENTRYPOINT ["/usr/local/bin/entrypoint.sh", "/sbin/init"]' \
		--change 'CMD []' "$cid" "$image" >/dev/null
}

kind_timed "image flannel" flannel
kind_timed "image flannel CNI plugin" flannel_cni_plugin
kind_timed "image busybox" busybox
kind_timed "image rust stand-in" rust_standin
kind_timed "node image (all)" node_image
