#!/usr/bin/env bash
# yh-genie on kind beside the network a cluster already has (docs/install.md, "Beside the network
# you already have"): the second kind quick start. The cluster's network is flannel with its CNI
# plugin (e2e/flannel-cni.yaml: /etc/cni/net.d/10-flannel.conflist, flannel's plugin and bridge in
# /opt/cni/bin), on a kind cluster without kindnet (kind-config.yaml). Then, as an admin would:
#   - pods start on flannel before yh-genie exists (e2e/beside/before.yaml);
#   - yh-genie is installed by `kubectl apply -f manifests/` with the one setting changed in
#     config.yaml's selector.json, `"defaultNetwork": "auto"`, and a second network (ptplan, of
#     e2e/networks.yaml) is added for net1;
# and asserts:
#   - the runtime loads yh-genie's conflist, and no file of the conf dir but flannel's own holds
#     flannel's network (it is read in place, not copied);
#   - a new pod's eth0 comes from flannel (its node's podCIDR, a lease in flannel's host-local store
#     /var/lib/cni/networks/cbr0) and its net1 from a NetworkAttachmentDefinition (ptplan), both in
#     its network-status annotation; pod to pod across the nodes and pod to Service (ClusterIP, DNS
#     name) over eth0, between new pods and the pods from before the install;
#   - an edit of 10-flannel.conflist on a node (the delegate's mtu) reaches the next pod there;
#   - the pods from before the install, deleted, leave no lease in flannel's store (their DEL came
#     to yh-genie, which passed it to flannel's file);
#   - uninstalled (a pod with net1 still running), the nodes load flannel's file again; that pod,
#     deleted then, leaves its net1 lease, which `yh-genie cleanup` releases; and new pods get
#     flannel alone, across the nodes.
# It stops at the first mismatch with a non-zero exit, prints diagnostics, and deletes the cluster.
#
# Needs docker (with BuildKit), kind, kubectl and jq, like e2e/run.sh. Environment:
#   CLUSTER          kind cluster name (default: yh-genie-beside; must not exist yet)
#   KEEP_CLUSTER=1   keep the cluster afterwards (its kubeconfig path is printed)
#   KIND_NODE_IMAGE  node image for kind create cluster --image (default: kind's own)
#   WAIT_SECS        how long any one wait may take (default 180)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
cluster=${CLUSTER:-yh-genie-beside}
wait_secs=${WAIT_SECS:-180}
ns=yh-beside
pod_cidr=10.244.0.0/16    # kind-config.yaml podSubnet, e2e/flannel-cni.yaml Network
ptplan_cidr=10.249.0.0/24 # e2e/networks.yaml, ptplan's host-local range
conf_dir=/etc/cni/net.d
conflist=$conf_dir/00-yh-genie.conflist
flannel_conflist=$conf_dir/10-flannel.conflist
flannel_store=/var/lib/cni/networks/cbr0 # host-local's leases of flannel's network, named cbr0
ptplan_store=/var/lib/cni/networks/ptplan
edited_mtu=1400

nodes=()
scratch=

# shellcheck source=e2e/lib.sh
source "$repo/e2e/lib.sh"

pod_node() { pod_field "$1" '{.spec.nodeName}'; }

# pod_mtu POD DEV: the MTU of the pod's interface DEV.
pod_mtu() {
	kubectl -n "$ns" exec "$1" -- cat "/sys/class/net/$2/mtu" || fail "$1 has no $2"
}

# assert_on_flannel POD: the pod's address (as the runtime reported it) is on eth0, in its node's
# podCIDR (flannel's subnet for the node), leased in flannel's host-local store on that node.
assert_on_flannel() {
	local pod=$1 ip node node_cidr addrs
	ip=$(pod_field "$pod" '{.status.podIP}')
	node=$(pod_node "$pod")
	node_cidr=$(kubectl get node "$node" -o 'jsonpath={.spec.podCIDR}')
	ip_in_cidr "$ip" "$pod_cidr" || fail "$pod: address '$ip' is not in $pod_cidr"
	ip_in_cidr "$ip" "$node_cidr" || fail "$pod: address '$ip' is not in $node's podCIDR $node_cidr"
	addrs=$(kubectl -n "$ns" exec "$pod" -- ip -4 -o addr show dev eth0)
	[[ $addrs == *"inet $ip/"* ]] || fail "$pod: eth0 does not hold $ip: $addrs"
	node_has "$node" "$flannel_store/$ip" || fail "$node: no lease $flannel_store/$ip for $pod"
}

# The first *.conf, *.conflist or *.json of the conf dir by name: what libcni, and so the runtime,
# loads as the node's network.
loaded_conf() {
	docker exec "$1" sh -c "ls $conf_dir | grep -E '\\.(conf|conflist|json)\$' | head -n 1"
}

diagnostics() {
	local node
	if ((${#nodes[@]} == 0)); then
		return
	fi
	log "diagnostics"
	kubectl get nodes -o wide || true
	kubectl get pods -A -o wide || true
	kubectl -n "$ns" describe pods || true
	kubectl -n kube-system logs -l app.kubernetes.io/name=yh-genie --prefix --tail=50 || true
	kubectl -n kube-flannel logs -l app=flannel --prefix --tail=20 || true
	kubectl get events -A --sort-by=.lastTimestamp | tail -n 40 || true
	for node in "${nodes[@]}"; do
		echo "--- $node"
		docker exec "$node" ls -la /opt/cni/bin "$conf_dir" "$flannel_store" || true
	done
}

create_cluster() {
	local args=(create cluster --config kind-config.yaml --name "$cluster")
	if [[ -n ${KIND_NODE_IMAGE:-} ]]; then
		args+=(--image "$KIND_NODE_IMAGE")
	fi
	log "creating kind cluster $cluster (no kindnet)"
	kind "${args[@]}"
	mapfile -t nodes < <(kind get nodes --name "$cluster")
	((${#nodes[@]} == 3)) || fail "want 3 nodes, kind made ${#nodes[@]}: ${nodes[*]}"
}

# As e2e/run.sh: our image built and loaded; third-party images preloaded when Docker has them or
# can pull them.
load_images() {
	local image
	local -a images
	yh_image=$(manifest_image manifests/yh-genie.yaml)
	images=("$(manifest_image e2e/flannel-cni.yaml flannel-cni-plugin:)" "$(manifest_image e2e/flannel-cni.yaml flannel:)"
		"$(manifest_image e2e/beside/before.yaml)")
	[[ -n $yh_image && -n ${images[0]} && -n ${images[1]} && -n ${images[2]} ]] || fail "cannot read the images from the manifests"
	log "building $yh_image"
	docker build -t "$yh_image" .
	kind load docker-image "$yh_image" --name "$cluster"
	for image in "${images[@]}"; do
		if { docker image inspect "$image" >/dev/null 2>&1 || docker pull "$image"; } &&
			kind load docker-image "$image" --name "$cluster"; then
			continue
		fi
		log "could not preload $image; the nodes will pull it"
	done
}

install_flannel() {
	local node
	log "the cluster's network: flannel with its CNI plugin (e2e/flannel-cni.yaml)"
	kubectl apply -f e2e/flannel-cni.yaml
	kubectl -n kube-flannel rollout status ds/kube-flannel-ds --timeout="${wait_secs}s"
	kubectl wait --for=condition=Ready nodes --all --timeout="${wait_secs}s"
	for node in "${nodes[@]}"; do
		node_has "$node" /opt/cni/bin/flannel || fail "$node: no /opt/cni/bin/flannel"
		node_has "$node" /opt/cni/bin/bridge || fail "$node: no /opt/cni/bin/bridge"
		[[ $conf_dir/$(loaded_conf "$node") == "$flannel_conflist" ]] || fail "$node: the runtime does not load $flannel_conflist"
	done
	kubectl -n kube-system rollout status deploy/coredns --timeout="${wait_secs}s"
}

start_pods_before() {
	local workers
	log "pods on flannel, before yh-genie"
	mapfile -t workers < <(kubectl get nodes -l '!node-role.kubernetes.io/control-plane' -o 'jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}')
	((${#workers[@]} == 2)) || fail "want 2 workers, got ${#workers[@]}: ${workers[*]}"
	kubectl label node "${workers[0]}" yh-genie-e2e/slot=a --overwrite
	kubectl label node "${workers[1]}" yh-genie-e2e/slot=b --overwrite
	kubectl apply -f e2e/beside/before.yaml
	kubectl -n "$ns" wait --for=condition=Ready pod/before-a pod/before-b --timeout="${wait_secs}s"
	assert_on_flannel before-a
	assert_on_flannel before-b
	assert_fetch before-a "http://$(pod_field before-b '{.status.podIP}'):8080/" before-b
}

# docs/install.md's way beside an existing network: manifests/ as shipped, with config.yaml's
# selector.json saying "defaultNetwork": "auto" (the edit an admin makes), then the 1.30 policies.
install_yh_genie() {
	local node
	log "installing yh-genie with \"defaultNetwork\": \"auto\""
	scratch=$(mktemp -d)
	mkdir "$scratch/manifests"
	cp manifests/*.yaml "$scratch/manifests/"
	sed -i 's/"defaultNetwork": "yonghui"/"defaultNetwork": "auto"/' "$scratch/manifests/config.yaml"
	grep -q '"defaultNetwork": "auto"' "$scratch/manifests/config.yaml" ||
		fail "manifests/config.yaml's selector.json no longer says \"defaultNetwork\": \"yonghui\"; update e2e/beside.sh"
	kubectl apply -f "$scratch/manifests/"
	kubectl apply -f manifests/kubernetes-1.30/
	kubectl -n kube-system rollout status ds/yh-genie --timeout="${wait_secs}s"
	for node in "${nodes[@]}"; do
		wait_until "the conflist on $node" node_has "$node" "$conflist"
		[[ $conf_dir/$(loaded_conf "$node") == "$conflist" ]] || fail "$node: the runtime would not load $conflist"
		[[ $(docker exec "$node" jq -r '.plugins[0].defaultNetwork' "$conflist") == auto ]] ||
			fail "$node: $conflist does not say \"defaultNetwork\": \"auto\""
		assert_not_copied "$node"
	done
}

# Nothing of the conf dir but flannel's own file names flannel's network.
assert_not_copied() {
	local holders
	holders=$(docker exec "$1" grep -rlF '"cbr0"' "$conf_dir" || true)
	[[ $holders == "$flannel_conflist" ]] || fail "$1: flannel's network is in more than its own file: $holders"
}

# The networks a pod may add: e2e/networks.yaml's (ptplan for net1). A restart of the installers
# applies the ConfigMap at once, rather than at the kubelet's next sync of their pods.
add_networks() {
	log "adding the ptplan network (e2e/networks.yaml)"
	kubectl apply -f e2e/networks.yaml
	kubectl -n kube-system rollout restart ds/yh-genie
	kubectl -n kube-system rollout status ds/yh-genie --timeout="${wait_secs}s"
	wait_until "ptplan on every node" on_every_node test -s "$conf_dir/ptplan/ptplan.conflist"
	wait_until "the conflist on every node" on_every_node test -s "$conflist"
}

check_new_pods() {
	local pod ip net1 route svc_ip
	log "new pods: eth0 from flannel in place, net1 from a NetworkAttachmentDefinition"
	kubectl wait --for=condition=Established crd/network-attachment-definitions.k8s.cni.cncf.io --timeout="${wait_secs}s"
	kubectl apply -f e2e/beside/with-net1.yaml
	kubectl -n "$ns" wait --for=condition=Ready pod/new-a pod/new-b --timeout="${wait_secs}s"
	for pod in new-a new-b; do
		assert_on_flannel "$pod"
		ip=$(pod_field "$pod" '{.status.podIP}')
		net1=$(pod_addr_on "$pod" net1)
		ip_in_cidr "$net1" "$ptplan_cidr" || fail "$pod: net1 has $net1, not in $ptplan_cidr"
		assert_network_status "$pod" "$ip" "$net1"
		node_has "$(pod_node "$pod")" "$ptplan_store/$net1" || fail "no ptplan lease $net1 for $pod"
		route=$(kubectl -n "$ns" exec "$pod" -- ip -4 route show | grep '^default ' || true)
		[[ $route == *" dev eth0"* && $route != *net1* ]] || fail "$pod: the default route is not eth0's alone: $route"
	done
	log "connectivity over eth0: across the nodes, to a Service, to and from the pods of before"
	assert_fetch new-a "http://$(pod_field new-b '{.status.podIP}'):8080/" new-b
	assert_fetch new-b "http://$(pod_field new-a '{.status.podIP}'):8080/" new-a
	assert_fetch new-a "http://$(pod_field before-b '{.status.podIP}'):8080/" before-b
	assert_fetch before-a "http://$(pod_field new-b '{.status.podIP}'):8080/" new-b
	svc_ip=$(kubectl -n "$ns" get service backend -o 'jsonpath={.spec.clusterIP}')
	[[ -n $svc_ip ]] || fail "the backend Service has no ClusterIP"
	assert_fetch new-a "http://$svc_ip/" new-b
	assert_fetch new-a "http://backend.$ns.svc.cluster.local/" new-b
}

# An edit of flannel's file on one node (its delegate's mtu) reaches the next pod there: yh-genie
# reads the file as it is at each ADD.
check_edit_reaches_new_pods() {
	local node before sandbox
	log "editing $flannel_conflist on one node"
	node=$(pod_node new-a)
	before=$(pod_mtu new-a eth0)
	((before != edited_mtu)) || fail "new-a's eth0 has the MTU $edited_mtu before the edit"
	docker exec "$node" cp "$flannel_conflist" /tmp/10-flannel.conflist.orig
	docker exec "$node" sh -c "jq '.plugins[0].delegate.mtu = $edited_mtu' /tmp/10-flannel.conflist.orig >/tmp/10-flannel.conflist.new &&
		cat /tmp/10-flannel.conflist.new >$flannel_conflist"
	kubectl apply -f e2e/beside/after-edit.yaml
	kubectl -n "$ns" wait --for=condition=Ready pod/after-edit --timeout="${wait_secs}s"
	[[ $(pod_node after-edit) == "$node" ]] || fail "after-edit is not on $node"
	assert_on_flannel after-edit
	[[ $(pod_mtu after-edit eth0) == "$edited_mtu" ]] ||
		fail "after-edit's eth0 has the MTU $(pod_mtu after-edit eth0), not the edited file's $edited_mtu (was $before)"
	# flannel's plugin keeps the delegate's configuration per sandbox for the DEL.
	sandbox=$(sandbox_id "$node" after-edit) || fail "after-edit: no single ready sandbox on $node"
	docker exec "$node" jq -e ".mtu == $edited_mtu" "/var/lib/cni/flannel/$sandbox" >/dev/null ||
		fail "$node: flannel's saved delegate for after-edit has no mtu $edited_mtu"
	kubectl -n "$ns" delete pod after-edit --wait=true --timeout="${wait_secs}s"
	docker exec "$node" sh -c "cat /tmp/10-flannel.conflist.orig >$flannel_conflist"
	assert_not_copied "$node"
}

# The pods from before the install, deleted: their DEL comes to yh-genie, which passes it to
# flannel's file; flannel's host-local releases their addresses.
check_pods_from_before_deleted() {
	local pod node ip entry
	local -a leases=()
	log "deleting the pods from before the install"
	for pod in before-a before-b; do
		node=$(pod_node "$pod")
		ip=$(pod_field "$pod" '{.status.podIP}')
		leases+=("$node:$flannel_store/$ip")
	done
	kubectl -n "$ns" delete pod before-a before-b --wait=true --timeout="${wait_secs}s"
	for entry in "${leases[@]}"; do
		wait_until "${entry#*:} to go on ${entry%%:*}" node_lacks "${entry%%:*}" "${entry#*:}"
	done
}

# docs/install.md's uninstall, beside the network: new-b deleted first (its DEL goes through
# yh-genie), new-a left running across the uninstall, deleted after it, then `yh-genie cleanup`.
check_uninstall() {
	local node ip net1 out rc every
	log "uninstalling, one pod with net1 still running"
	node=$(pod_node new-b)
	ip=$(pod_field new-b '{.status.podIP}')
	net1=$(pod_addr_on new-b net1)
	kubectl -n "$ns" delete pod new-b --wait=true --timeout="${wait_secs}s"
	wait_until "new-b's leases to go on $node" node_lacks "$node" "$flannel_store/$ip"
	wait_until "new-b's net1 lease to go on $node" node_lacks "$node" "$ptplan_store/$net1"

	node=$(pod_node new-a)
	ip=$(pod_field new-a '{.status.podIP}')
	net1=$(pod_addr_on new-a net1)
	kubectl delete -f manifests/yh-genie.yaml --cascade=foreground --wait=true --timeout="${wait_secs}s"
	kubectl delete -f manifests/config.yaml
	wait_until "the installer pods to go" no_installer_pods
	for every in "${nodes[@]}"; do
		node_lacks "$every" "$conflist" || fail "$every: $conflist is still there after uninstall"
		[[ $conf_dir/$(loaded_conf "$every") == "$flannel_conflist" ]] || fail "$every: the runtime does not load $flannel_conflist again"
	done

	log "new-a deleted after the uninstall, then yh-genie cleanup"
	kubectl -n "$ns" delete pod new-a --wait=true --timeout="${wait_secs}s"
	wait_until "new-a's flannel lease to go on $node" node_lacks "$node" "$flannel_store/$ip"
	node_has "$node" "$ptplan_store/$net1" || fail "$node: new-a's net1 lease went without yh-genie cleanup"
	rc=0
	out=$(docker exec "$node" /opt/cni/bin/yh-genie cleanup 2>&1) || rc=$?
	printf '%s\n' "$out" >&2
	((rc == 0)) || fail "$node: yh-genie cleanup exited $rc"
	node_lacks "$node" "$ptplan_store/$net1" || fail "$node: new-a's net1 lease is still there after yh-genie cleanup"
}

check_flannel_after_uninstall() {
	local pod
	log "new pods after the uninstall: flannel alone"
	kubectl apply -f e2e/beside/after-uninstall.yaml
	kubectl -n "$ns" wait --for=condition=Ready pod/after-a pod/after-b --timeout="${wait_secs}s"
	for pod in after-a after-b; do
		assert_on_flannel "$pod"
		if kubectl -n "$ns" exec "$pod" -- ip link show net1 >/dev/null 2>&1; then
			fail "$pod has a net1"
		fi
	done
	assert_fetch after-a "http://$(pod_field after-b '{.status.podIP}'):8080/" after-b
	assert_fetch after-b "http://$(pod_field after-a '{.status.podIP}'):8080/" after-a
}

main() {
	local tool clusters
	for tool in docker kind kubectl jq; do
		command -v "$tool" >/dev/null || fail "$tool is not installed"
	done
	clusters=$(kind get clusters 2>/dev/null)
	if grep -qx "$cluster" <<<"$clusters"; then
		fail "a kind cluster named $cluster exists already; delete it or set CLUSTER"
	fi
	KUBECONFIG=$(mktemp)
	export KUBECONFIG
	trap cleanup EXIT
	trap 'exit 130' INT TERM

	create_cluster
	load_images
	install_flannel
	start_pods_before
	install_yh_genie
	add_networks
	check_new_pods
	check_edit_reaches_new_pods
	check_pods_from_before_deleted
	check_uninstall
	check_flannel_after_uninstall
	log "PASS"
}

main "$@"
