#!/usr/bin/env bash
# Builds what the kind run needs outside Docker, once per version, cached under
# ${YH_GENIE_CACHE:-/var/cache/yh-genie}/kind-*/: kind itself, the node's runtime parts that kind's
# base image pins (containerd with its runc shim and ctr, runc, crictl, the CNI plugins kind keeps:
# host-local, loopback, ptp, portmap), the images' programs (etcd and CoreDNS as kubeadm wants them,
# flanneld as e2e/flannel.yaml names it), and Debian root filesystems made with mmdebstrap from
# Debian's packages (the node's, one with iptables for kube-proxy and flannel, one with a C
# toolchain for the stand-in Rust image). Go modules come from the module proxy.
#
#   scripts/kind/binaries.sh K8S_BIN_DIR
#
# K8S_BIN_DIR is what scripts/cluster/build.sh printed. Prints NAME=PATH lines on stdout, one per
# artifact; progress and the time of each step go to stderr.
set -euo pipefail
# shellcheck source=scripts/kind/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

k8s_bin=${1:?usage: scripts/kind/binaries.sh K8S_BIN_DIR}
flannel_image=$(kind_manifest_image "$kind_repo/e2e/flannel.yaml")
flannel_version=${flannel_image##*:}

emit() { printf '%s=%s\n' "$1" "$2"; }

# go_install DIR LDFLAGS PACKAGE@VERSION...: installs into DIR/bin (replaced whole, so an interrupted
# build leaves nothing half-written). Two cores shared with other work: two compiles at a time.
go_install() {
	local dir=$1 ldflags=$2
	shift 2
	rm -rf "$dir/bin.new"
	mkdir -p "$dir"
	(cd / && GOBIN="$dir/bin.new" "$kind_go" install -p "${BUILD_JOBS:-2}" -trimpath -ldflags "-s -w $ldflags" "$@")
	rm -rf "${dir:?}/bin"
	mv "$dir/bin.new" "$dir/bin"
}

build_kind() {
	CGO_ENABLED=0 go_install "$1" "" "sigs.k8s.io/kind@$KIND_VERSION"
}

# As kind's base builds it (make runc): cgo, with seccomp (libseccomp-dev on the build machine;
# the node has Debian's libseccomp2, the same release).
build_runc() {
	CGO_ENABLED=1 go_install "$1" "-X main.gitCommit=$KIND_RUNC_VERSION" -tags "seccomp urfave_cli_no_docs" \
		"github.com/opencontainers/runc@$KIND_RUNC_VERSION"
}

build_crictl() {
	CGO_ENABLED=0 go_install "$1" "-X sigs.k8s.io/cri-tools/pkg/version.Version=$KIND_CRICTL_VERSION" \
		"sigs.k8s.io/cri-tools/cmd/crictl@$KIND_CRICTL_VERSION"
}

build_cni_plugins() {
	local plugin packages=()
	for plugin in "${KIND_CNI_PLUGINS[@]}"; do
		packages+=("github.com/containernetworking/plugins/plugins/$plugin@$KIND_CNI_PLUGINS_VERSION")
	done
	CGO_ENABLED=0 go_install "$1" \
		"-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$KIND_CNI_PLUGINS_VERSION" \
		"${packages[@]}"
}

build_coredns() {
	CGO_ENABLED=0 go_install "$1" "" "github.com/coredns/coredns@$coredns_version"
}

# As flannel's Makefile builds it on amd64: with cgo (its udp backend has C), linked statically.
build_flanneld() {
	CGO_ENABLED=1 go_install "$1" \
		"-X github.com/flannel-io/flannel/pkg/version.Version=$flannel_version -extldflags -static" \
		"github.com/flannel-io/flannel@$flannel_version"
	mv "$1/bin/flannel" "$1/bin/flanneld"
}

# Debian's busybox-static of $KIND_BUSYBOX_SUITE, with apt's own client and lists kept apart from
# the machine's (its sources stay as they are).
fetch_busybox() {
	local dir=$1 apt=$1/apt
	local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/nonexistent
		-o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o APT::Sandbox::User=root)
	rm -rf "$apt" "$dir/bin.new"
	mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$dir/bin.new"
	echo "deb $KIND_DEBIAN_MIRROR $KIND_BUSYBOX_SUITE main" >"$apt/sources.list"
	apt-get -qq "${opts[@]}" update
	(cd "$apt" && apt-get -qq "${opts[@]}" download busybox-static)
	dpkg-deb -x "$apt"/busybox-static_*.deb "$apt/root"
	install -m 0755 "$apt/root/usr/bin/busybox" "$dir/bin.new/busybox"
	"$dir/bin.new/busybox" | head -1 >&2
	rm -rf "$apt" "${dir:?}/bin"
	mv "$dir/bin.new" "$dir/bin"
}

# cached NAME DIR BUILDER FILE...: runs BUILDER DIR unless every FILE exists in DIR/bin.
cached() {
	local name=$1 dir=$2 builder=$3 file missing=0
	shift 3
	for file in "$@"; do [[ -x $dir/bin/$file ]] || missing=1; done
	if ((missing)); then
		kind_log "building $name"
		kind_timed "$name" "$builder" "$dir"
	fi
}

cached "kind $KIND_VERSION" "$kind_cache_root/kind-tools-$KIND_VERSION" build_kind kind
emit kind "$kind_cache_root/kind-tools-$KIND_VERSION/bin/kind"

# containerd: scripts/containerd2.sh builds it (containerd, its runc shim, ctr) for tests/cri.rs; the
# same script at kind's version.
containerd_bin=$(CONTAINERD2_VERSION=$KIND_CONTAINERD_VERSION kind_timed "containerd $KIND_CONTAINERD_VERSION" \
	"$kind_repo/scripts/containerd2.sh" | tail -1)
emit containerd_bin "$containerd_bin"

cached "runc $KIND_RUNC_VERSION" "$kind_cache_root/kind-runc-$KIND_RUNC_VERSION" build_runc runc
emit runc "$kind_cache_root/kind-runc-$KIND_RUNC_VERSION/bin/runc"

cached "crictl $KIND_CRICTL_VERSION" "$kind_cache_root/kind-crictl-$KIND_CRICTL_VERSION" build_crictl crictl
emit crictl "$kind_cache_root/kind-crictl-$KIND_CRICTL_VERSION/bin/crictl"

cni_names=()
for plugin in "${KIND_CNI_PLUGINS[@]}"; do cni_names+=("${plugin#*/}"); done
cached "CNI plugins $KIND_CNI_PLUGINS_VERSION" "$kind_cache_root/kind-cni-plugins-$KIND_CNI_PLUGINS_VERSION" \
	build_cni_plugins "${cni_names[@]}"
emit cni_bin "$kind_cache_root/kind-cni-plugins-$KIND_CNI_PLUGINS_VERSION/bin"

cached "flanneld $flannel_version" "$kind_cache_root/kind-flannel-$flannel_version" build_flanneld flanneld
emit flanneld "$kind_cache_root/kind-flannel-$flannel_version/bin/flanneld"

cached "busybox ($KIND_BUSYBOX_SUITE)" "$kind_cache_root/kind-busybox-$KIND_BUSYBOX_SUITE" fetch_busybox busybox
emit busybox "$kind_cache_root/kind-busybox-$KIND_BUSYBOX_SUITE/bin/busybox"

# Debian root filesystems, as tarballs for `docker import`. Like Debian's -slim images: minbase,
# without documentation, man pages or translations; with the release's updates and security
# fixes, as kind's base image upgrades its packages.
debian_rootfs() { # NAME PACKAGE...: prints the tarball
	local name=$1 key tar
	shift
	key=$(printf '%s\n' "$KIND_DEBIAN_SUITE" "$KIND_DEBIAN_MIRROR" "$KIND_DEBIAN_SECURITY_MIRROR" "$@" | sha256sum | cut -c1-12)
	tar=$kind_cache_root/kind-debian-$KIND_DEBIAN_SUITE/$name-$key.tar
	if [[ ! -s $tar ]]; then
		kind_log "making the Debian $KIND_DEBIAN_SUITE root filesystem '$name' (mmdebstrap)"
		mkdir -p "${tar%/*}"
		kind_timed "debian $name" mmdebstrap --quiet --variant=minbase --format=tar --include="$(
			IFS=,
			echo "$*"
		)" \
			--aptopt='Acquire::Languages "none"' \
			--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
			--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
			--dpkgopt='path-exclude=/usr/share/locale/*' \
			"$KIND_DEBIAN_SUITE" "$tar.new" \
			"deb $KIND_DEBIAN_MIRROR $KIND_DEBIAN_SUITE main" \
			"deb $KIND_DEBIAN_MIRROR $KIND_DEBIAN_SUITE-updates main" \
			"deb $KIND_DEBIAN_SECURITY_MIRROR $KIND_DEBIAN_SUITE-security main" >&2
		mv "$tar.new" "$tar"
	fi
	echo "$tar"
}
# The node: what kind's base image installs (services, Kubernetes' needs, network storage, the
# container runtime's, kind's own tools).
emit rootfs_node "$(debian_rootfs node systemd \
	conntrack iptables nftables iproute2 ethtool util-linux mount kmod \
	libseccomp2 pigz fuse-overlayfs \
	nfs-common open-iscsi \
	bash ca-certificates curl jq procps)"
# kube-proxy's and flanneld's: the netfilter tools they run.
emit rootfs_netfilter "$(debian_rootfs netfilter iptables nftables ipset conntrack iproute2 kmod ca-certificates)"
# The stand-in for the Dockerfile's Rust image: a C toolchain for ring, certificates for the registry.
emit rootfs_rust "$(debian_rootfs rust gcc libc6-dev ca-certificates)"

# etcd and CoreDNS as this Kubernetes' kubeadm deploys them: the local cluster's build
# (scripts/cluster/build.sh) builds etcd, and CoreDNS when its version is the same; else built here.
k8s_version=$("$k8s_bin/kubeadm" version -o short)
mapfile -t kubeadm_images < <("$k8s_bin/kubeadm" config images list --kubernetes-version "$k8s_version")
kubeadm_image() { # NAME: the tag kubeadm deploys for registry.k8s.io/.../NAME
	local image
	for image in "${kubeadm_images[@]}"; do
		if [[ ${image%:*} == */"$1" ]]; then
			echo "${image##*:}"
			return
		fi
	done
	echo "kubeadm $k8s_version lists no $1 image" >&2
	return 1
}
etcd_version=v$(kubeadm_image etcd)
etcd_version=${etcd_version%-*} # 3.6.5-0 is etcd v3.6.5
coredns_version=$(kubeadm_image coredns)
if [[ ! -x $k8s_bin/etcd || $(cat "$k8s_bin/etcd.version" 2>/dev/null) != "$etcd_version" ]]; then
	echo "$k8s_bin has no etcd $etcd_version: scripts/cluster/build.sh builds it" >&2
	exit 1
fi
emit etcd "$k8s_bin/etcd"
if [[ -x $k8s_bin/coredns && $(cat "$k8s_bin/coredns.version" 2>/dev/null) == "$coredns_version" ]]; then
	emit coredns "$k8s_bin/coredns"
else
	cached "coredns $coredns_version" "$kind_cache_root/kind-coredns-$coredns_version" build_coredns coredns
	emit coredns "$kind_cache_root/kind-coredns-$coredns_version/bin/coredns"
fi

emit k8s_version "$k8s_version"
emit k8s_bin "$k8s_bin"
emit flannel_version "$flannel_version"
