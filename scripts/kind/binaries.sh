#!/usr/bin/env bash
# Builds what the kind run needs outside Docker, once per version, cached under
# ${YH_GENIE_CACHE:-/var/cache/yh-genie}/kind-*/: kind itself, the node's runtime parts that kind's
# base image pins (containerd with its runc shim and ctr, runc, crictl, the CNI plugins kind keeps:
# host-local, loopback, ptp, portmap), the images' programs (etcd and CoreDNS as kubeadm wants them,
# flanneld as e2e/flannel.yaml names it, flannel's CNI plugin and the bridge plugin it delegates to
# for e2e/flannel-cni.yaml), and Debian root filesystems made with mmdebstrap from
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
# One run at a time (scripts/test.sh may be running it in the background): a second waits, then
# finds everything cached.
mkdir -p "$kind_cache_root"
exec 9>"$kind_cache_root/kind-binaries.lock"
flock 9

k8s_bin=${1:?usage: scripts/kind/binaries.sh K8S_BIN_DIR}
flannel_image=$(kind_manifest_image "$kind_repo/e2e/flannel.yaml")
flannel_version=${flannel_image##*:}
# The flannel backends e2e/flannel.yaml configures (flanneld is built with these alone).
mapfile -t flannel_backends < <(sed -n 's/^ *"Type": *"\([a-z0-9-]*\)".*/\1/p' "$kind_repo/e2e/flannel.yaml" | sort -u)
if ((${#flannel_backends[@]} == 0)); then
	echo "e2e/flannel.yaml configures no backend (\"Backend\": {\"Type\": ...})" >&2
	exit 1
fi

# flannel's CNI plugin: the version the image of e2e/flannel-cni.yaml's install-cni-plugin names.
flannel_cni_image=$(awk '$1 == "image:" && $2 ~ /flannel-cni-plugin:/ { print $2; exit }' "$kind_repo/e2e/flannel-cni.yaml")
flannel_cni_version=${flannel_cni_image##*:}
if [[ -z $flannel_cni_image ]]; then
	echo "e2e/flannel-cni.yaml names no flannel-cni-plugin image" >&2
	exit 1
fi

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

# flanneld as e2e/flannel.yaml runs it: flannel's own main package (main.go of the module, unchanged
# but for its list of backends) with only the backends the manifest configures. flannel registers
# each backend through a blank import in main.go and has no build tags for them, so the others
# (ipsec, wireguard, udp, host-gw, ipip, alloc, extension, Tencent Cloud's VPC) would be compiled
# and linked for nothing; without udp's C packet proxy, cgo is off and the binary static as it is.
# Built in a scratch module that requires flannel at that version, so every dependency is the
# version flannel's go.mod selects.
build_flanneld() {
	local dir=$1 source_dir work backend go_version
	source_dir=$(cd / && "$kind_go" mod download -json "github.com/flannel-io/flannel@$flannel_version" |
		sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
	work=$dir/module
	rm -rf "$work" "$dir/bin.new"
	mkdir -p "$work" "$dir/bin.new"
	go_version=$(sed -n 's/^go //p' "$source_dir/go.mod")
	printf 'module yh-genie.test/flanneld\ngo %s\nrequire github.com/flannel-io/flannel %s\n' \
		"$go_version" "$flannel_version" >"$work/go.mod"
	# Every blank import of a backend but the configured ones is dropped; each configured one must
	# be there (a renamed package fails here rather than at the pods).
	awk -v keep=" ${flannel_backends[*]} " '
		/^\t_ "github.com\/flannel-io\/flannel\/pkg\/backend\/[a-z0-9]+"$/ {
			name = $2; gsub(/"/, "", name); sub(/.*\//, "", name)
			if (index(keep, " " name " ") == 0) next
		}
		{ print }' "$source_dir/main.go" >"$work/main.go"
	for backend in "${flannel_backends[@]}"; do
		if ! grep -qxF "	_ \"github.com/flannel-io/flannel/pkg/backend/$backend\"" "$work/main.go"; then
			echo "flannel $flannel_version's main.go imports no backend '$backend' (e2e/flannel.yaml's)" >&2
			return 1
		fi
	done
	echo "flanneld $flannel_version with the backends ${flannel_backends[*]}" >&2
	(cd "$work" && CGO_ENABLED=0 "$kind_go" build -mod=mod -p "${BUILD_JOBS:-2}" -trimpath \
		-ldflags "-s -w -X github.com/flannel-io/flannel/pkg/version.Version=$flannel_version" \
		-o "$dir/bin.new/flanneld" .)
	rm -rf "${dir:?}/bin" "$work"
	mv "$dir/bin.new" "$dir/bin"
}

# The flannel CNI plugin e2e/flannel-cni.yaml installs, and the bridge plugin it delegates to.
# flannel's plugin lives in its own repository (flannel-io/cni-plugin) since 2021, which the module
# proxy does not serve; this is the same plugin at its last release inside containernetworking/plugins,
# built in a copy of that module (its go.sum predates the Go that builds it: -mod=mod completes it).
# bridge is the node's CNI plugins' release: kind's node has no bridge (kindnet needs ptp), so on kind
# it is installed beside flannel's plugin, as kubeadm's nodes get it from their CNI plugins package.
build_flannel_cni() {
	local dir=$1 source_dir work
	source_dir=$(cd / && "$kind_go" mod download -json "github.com/containernetworking/plugins@$flannel_cni_version" |
		sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
	work=$dir/module
	rm -rf "$work" "$dir/bin.new"
	mkdir -p "$dir/bin.new"
	cp -r "$source_dir" "$work"
	chmod -R u+w "$work"
	(cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod "$kind_go" build -p "${BUILD_JOBS:-2}" -trimpath -ldflags "-s -w" \
		-o "$dir/bin.new/flannel" ./plugins/meta/flannel)
	rm -rf "$work"
	(cd / && CGO_ENABLED=0 GOBIN="$dir/bin.new" "$kind_go" install -p "${BUILD_JOBS:-2}" -trimpath \
		-ldflags "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$KIND_CNI_PLUGINS_VERSION" \
		"github.com/containernetworking/plugins/plugins/main/bridge@$KIND_CNI_PLUGINS_VERSION")
	rm -rf "${dir:?}/bin"
	mv "$dir/bin.new" "$dir/bin"
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

# cached NAME DIR BUILDER FILE...: runs BUILDER DIR unless every FILE exists in DIR/bin. In a
# subshell of its own, so that its CPU time is its own: the root filesystems' background job counts
# in this shell's when it ends.
cached() {
	local name=$1 dir=$2 builder=$3 file missing=0
	shift 3
	for file in "$@"; do [[ -x $dir/bin/$file ]] || missing=1; done
	if ((missing)); then
		kind_log "building $name"
		(kind_timed "$name" "$builder" "$dir")
	fi
}

# Debian root filesystems, as tarballs for `docker import`. Like Debian's -slim images: minbase,
# without documentation, man pages or translations; with the release's updates and security
# fixes, as kind's base image upgrades its packages. Made in the background while the Go programs
# below compile (those want the CPU, mmdebstrap mostly the network and the disk), one after the
# other, each handing the packages it downloaded to the next through an archive kept for this run.
debian_work=$(mktemp -d /var/tmp/yh-genie-kind-debian.XXXXXX)
debian_pid=
# kill_tree PID: PID and every process under it (mmdebstrap's apt and dpkg outlive a killed parent).
kill_tree() {
	local child
	# shellcheck disable=SC2013 # the files hold process ids separated by spaces
	for child in $(cat "/proc/$1/task/"*/children 2>/dev/null); do kill_tree "$child"; done
	kill "$1" 2>/dev/null || true
}
# A failed Go build ends this script: the background job with it, before its work dir goes.
trap '[[ -z $debian_pid ]] || { kill_tree "$debian_pid"; wait "$debian_pid" 2>/dev/null; }; rm -rf "$debian_work"' EXIT
mkdir -p "$debian_work/archives"
debian_rootfs() { # NAME PACKAGE...: prints the tarball
	local name=$1 key tar
	shift
	key=$(printf '%s\n' "$KIND_DEBIAN_SUITE" "$KIND_DEBIAN_MIRROR" "$KIND_DEBIAN_SECURITY_MIRROR" "$@" | sha256sum | cut -c1-12)
	tar=$kind_cache_root/kind-debian-$KIND_DEBIAN_SUITE/$name-$key.tar
	if [[ ! -s $tar ]]; then
		kind_log "making the Debian $KIND_DEBIAN_SUITE root filesystem '$name' (mmdebstrap)"
		mkdir -p "${tar%/*}"
		# The archive's packages in, the downloaded ones out; the tarball holds neither (mmdebstrap
		# empties /var/cache/apt/archives at the end).
		# shellcheck disable=SC2016 # "$1" is the hook's, the root filesystem being made
		kind_timed "debian $name" mmdebstrap --quiet --variant=minbase --format=tar --include="$(
			IFS=,
			echo "$*"
		)" \
			--skip=essential/unlink \
			--setup-hook='mkdir -p "$1"/var/cache/apt/archives' \
			--setup-hook="sync-in $debian_work/archives /var/cache/apt/archives" \
			--customize-hook="sync-out /var/cache/apt/archives $debian_work/archives" \
			--aptopt='Acquire::Languages "none"' \
			--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
			--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
			--dpkgopt='path-exclude=/usr/share/locale/*' \
			"$KIND_DEBIAN_SUITE" "$tar.new" \
			"deb $KIND_DEBIAN_MIRROR $KIND_DEBIAN_SUITE main" \
			"deb $KIND_DEBIAN_MIRROR $KIND_DEBIAN_SUITE-updates main" \
			"deb $KIND_DEBIAN_SECURITY_MIRROR $KIND_DEBIAN_SUITE-security main" >&2 || return 1
		mv "$tar.new" "$tar" || return 1
	fi
	echo "$tar"
}
debian_all() {
	local tar
	# The node: what kind's base image installs (services, Kubernetes' needs, network storage, the
	# container runtime's, kind's own tools).
	tar=$(debian_rootfs node systemd \
		conntrack iptables nftables iproute2 ethtool util-linux mount kmod \
		libseccomp2 pigz fuse-overlayfs \
		nfs-common open-iscsi \
		bash ca-certificates curl jq procps)
	emit rootfs_node "$tar"
	# kube-proxy's and flanneld's: the netfilter tools they run.
	tar=$(debian_rootfs netfilter iptables nftables ipset conntrack iproute2 kmod ca-certificates)
	emit rootfs_netfilter "$tar"
	# The stand-in for the Dockerfile's Rust image: a C toolchain for ring, certificates for the
	# registry.
	tar=$(debian_rootfs rust gcc libc6-dev ca-certificates)
	emit rootfs_rust "$tar"
}
debian_all >"$debian_work/emitted" 2>"$debian_work/log" &
debian_pid=$!

cached "kind $KIND_VERSION" "$kind_cache_root/kind-tools-$KIND_VERSION" build_kind kind
emit kind "$kind_cache_root/kind-tools-$KIND_VERSION/bin/kind"

# containerd: scripts/containerd2.sh builds it (containerd, its runc shim, ctr) for tests/cri; the
# same script at kind's version (scripts/kind/common.sh says why not the CRI suite's).
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

flannel_dir=$kind_cache_root/kind-flannel-$flannel_version-$(IFS=-; echo "${flannel_backends[*]}")
cached "flanneld $flannel_version" "$flannel_dir" build_flanneld flanneld
emit flanneld "$flannel_dir/bin/flanneld"

flannel_cni_dir=$kind_cache_root/kind-flannel-cni-$flannel_cni_version-bridge-$KIND_CNI_PLUGINS_VERSION
cached "flannel CNI plugin $flannel_cni_version, bridge $KIND_CNI_PLUGINS_VERSION" "$flannel_cni_dir" \
	build_flannel_cni flannel bridge
emit flannel_cni_bin "$flannel_cni_dir/bin"

cached "busybox ($KIND_BUSYBOX_SUITE)" "$kind_cache_root/kind-busybox-$KIND_BUSYBOX_SUITE" fetch_busybox busybox
emit busybox "$kind_cache_root/kind-busybox-$KIND_BUSYBOX_SUITE/bin/busybox"

debian_rc=0
wait "$debian_pid" || debian_rc=$?
debian_pid=
cat "$debian_work/log" >&2
if ((debian_rc != 0)); then
	echo "making the Debian root filesystems failed ($debian_rc): mmdebstrap's output is above" >&2
	exit 1
fi
cat "$debian_work/emitted"

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
etcd_version=${etcd_version%-*} # 3.7.0-0 is etcd v3.7.0
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
