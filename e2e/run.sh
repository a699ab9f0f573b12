#!/usr/bin/env bash
# yh-genie end to end on kind: the README's quick start, command for command, then more. Creates a
# cluster with no default CNI (kind-config.yaml), builds and loads the image, runs the yonghui
# fabric (flannel, e2e/flannel.yaml, without flannel's own CNI), installs yh-genie (manifests/, and
# manifests/kubernetes-1.30/'s policies), starts the example pod (examples/pods/yonghui.yaml), adds
# networks (e2e/networks.yaml), starts pods choosing networks in each of the ways a pod can
# (e2e/workload.yaml) and pods with two networks (e2e/multinet.yaml) and asserts:
#   - the installer put binary, plugin links, kubeconfig (0600) and the conflist on every node,
#     and the conflist is the one the runtime loads; CoreDNS came up on the default network;
#   - the example pod is Running with its address on eth0, in the pod network;
#   - every pod is Ready (the kubelet's probe reaches it from the node) with its address in the
#     expected subnet, on eth0;
#   - pod to pod across nodes, pod to pod on the second network, pod to Service by ClusterIP and
#     by DNS name, from both networks (each pod serves its own name, so the answer names the pod);
#   - host-local leases and yonghui's per-container records exist, and are gone after the pods are;
#   - a pod choosing `yonghui,ptplan@net1` in a ConfigMap, and one asking for ptplan on net1 by the
#     networks annotation (a NetworkAttachmentDefinition, of the CRD manifests/ installs), get
#     both interfaces: the pod IP on eth0, net1 in ptplan, both listed in the network-status
#     annotation; they reach each other over net1, keep eth0's default route, went through the
#     node agent, and their net1 leases go with them;
#   - the node agent runs on every node (socket 0600, /readyz ready, the conflist names its socket)
#     and the workload's pods got their networks through it (its hit counters cover them);
#   - after the installer is restarted (new pod, new token) new pods still get a network;
#   - deleting the DaemonSet removes the conflist and the kubeconfig from every node.
# It stops at the first mismatch with a non-zero exit, prints diagnostics, and deletes the cluster.
#
# Needs docker (with BuildKit: Docker 23 or later, or 20.10 with it enabled), kind, kubectl and jq.
# The cluster's kubeconfig is a temporary file (KUBECONFIG), not ~/.kube/config. Environment:
#   CLUSTER          kind cluster name (default: kind-config.yaml's, yh-genie; must not exist yet)
#   KEEP_CLUSTER=1   keep the cluster afterwards (its kubeconfig path is printed)
#   KIND_NODE_IMAGE  node image for kind create cluster --image (default: kind's own)
#   WAIT_SECS        how long any one wait may take (default 180)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The README's commands, from the checkout.
cd "$repo"
config_cluster=$(awk '$1 == "name:" { print $2; exit }' kind-config.yaml)
cluster=${CLUSTER:-$config_cluster}
wait_secs=${WAIT_SECS:-180}
ns=yh-e2e
pod_cidr=10.244.0.0/16 # kind-config.yaml podSubnet, e2e/flannel.yaml Network
ptp_cidr=10.248.0.0/24 # e2e/networks.yaml, ptpnet's host-local range
ptplan_cidr=10.249.0.0/24 # e2e/networks.yaml, ptplan's host-local range
bin_dir=/opt/cni/bin
conf_dir=/etc/cni/net.d
conflist=$conf_dir/00-yh-genie.conflist
kubeconfig_on_node=$conf_dir/yh-genie.d/yh-genie.kubeconfig
plugin_names=(yonghui yh-bridge veth router)
agent_socket=/run/yh-genie/agent.sock
agent_port=9745 # --agent-metrics-address, on the node's loopback

nodes=()
scratch=

# shellcheck source=e2e/lib.sh
source "$repo/e2e/lib.sh"

# The pod's address as the runtime reported it; fails when there is none.
pod_ip() {
	local ip
	ip=$(pod_field "$1" '{.status.podIP}')
	[[ -n $ip ]] || fail "$1 has no address"
	echo "$ip"
}

# assert_pod_address POD CIDR: the pod's address (as the runtime reported it) is in CIDR and on eth0.
assert_pod_address() {
	local pod=$1 cidr=$2 ip addrs
	ip=$(pod_ip "$pod")
	ip_in_cidr "$ip" "$cidr" || fail "$pod: address '$ip' is not in $cidr"
	addrs=$(kubectl -n "$ns" exec "$pod" -- ip -4 -o addr show dev eth0)
	[[ $addrs == *"inet $ip/"* ]] || fail "$pod: eth0 does not hold $ip: $addrs"
}

# agent_get NODE PATH: the body of GET PATH on the node agent's local port (bash's /dev/tcp: the
# node image needs no curl).
agent_get() {
	docker exec "$1" bash -c "exec 3<>/dev/tcp/127.0.0.1/$agent_port && printf 'GET $2 HTTP/1.0\r\n\r\n' >&3 && cat <&3" |
		sed '1,/^\r\?$/d'
}

# agent_hits NODE: selection requests the node's agent answered with the pod's objects.
agent_hits() {
	agent_get "$1" /metrics | awk '$1 ~ /^yh_genie_agent_answers_total\{outcome="hit(_after_wait)?"\}$/ { n += $2 } END { print n + 0 }'
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
	for node in "${nodes[@]}"; do
		echo "--- $node agent"
		agent_get "$node" /metrics | grep -v '^#' || true
	done
	kubectl get events -A --sort-by=.lastTimestamp | tail -n 40 || true
	for node in "${nodes[@]}"; do
		echo "--- $node"
		docker exec "$node" ls -la "$bin_dir" "$conf_dir" || true
	done
}

create_cluster() {
	# kind writes the cluster's credentials to $KUBECONFIG.
	local args=(create cluster --config kind-config.yaml)
	if [[ $cluster != "$config_cluster" ]]; then
		args+=(--name "$cluster")
	fi
	if [[ -n ${KIND_NODE_IMAGE:-} ]]; then
		args+=(--image "$KIND_NODE_IMAGE")
	fi
	log "creating kind cluster $cluster"
	kind "${args[@]}"
	mapfile -t nodes < <(kind get nodes --name "$cluster")
	((${#nodes[@]} == 3)) || fail "want 3 nodes, kind made ${#nodes[@]}: ${nodes[*]}"
}

# Our image must be built and loaded; third-party images are preloaded when Docker has them or can
# pull them (nodes can still pull them), which spares registry rate limits.
load_images() {
	local image flannel_image workload_image
	yh_image=$(manifest_image manifests/yh-genie.yaml)
	flannel_image=$(manifest_image e2e/flannel.yaml)
	workload_image=$(manifest_image e2e/workload.yaml)
	[[ -n $yh_image && -n $flannel_image && -n $workload_image ]] || fail "cannot read the images from the manifests"
	log "building $yh_image"
	docker build -t "$yh_image" .
	kind load docker-image "$yh_image" --name "$cluster"
	for image in "$flannel_image" "$workload_image"; do
		if { docker image inspect "$image" >/dev/null 2>&1 || docker pull "$image"; } &&
			kind load docker-image "$image" --name "$cluster"; then
			continue
		fi
		log "could not preload $image; the nodes will pull it"
	done
}

install_fabric() {
	log "starting the yonghui fabric (flannel)"
	kubectl apply -f e2e/flannel.yaml
	kubectl -n kube-flannel rollout status ds/kube-flannel-ds --timeout="${wait_secs}s"
	wait_until "flannel's subnet.env on every node" on_every_node test -s /run/flannel/subnet.env
}

assert_installed_on() {
	local node=$1 name target version mode first installed
	installed=$(docker exec "$node" sha256sum "$bin_dir/yh-genie") || fail "$node: no $bin_dir/yh-genie"
	[[ ${installed%% *} == "$image_sha" ]] || fail "$node: $bin_dir/yh-genie is not the image's binary"
	for name in "${plugin_names[@]}"; do
		target=$(docker exec "$node" readlink "$bin_dir/$name") || fail "$node: $bin_dir/$name is not a link"
		[[ $target == yh-genie ]] || fail "$node: $bin_dir/$name -> $target, want yh-genie"
		version=$(docker exec "$node" "$bin_dir/$name" --version) || fail "$node: $bin_dir/$name does not run"
		[[ $version == "$name "* ]] || fail "$node: $bin_dir/$name is not the $name plugin: $version"
	done
	mode=$(docker exec "$node" stat -c %a "$kubeconfig_on_node") || fail "$node: no $kubeconfig_on_node"
	[[ $mode == 600 ]] || fail "$node: $kubeconfig_on_node has mode $mode, want 600"
	# What libcni does: the first *.conf, *.conflist or *.json by name is the node's network.
	first=$(docker exec "$node" sh -c "ls $conf_dir | grep -E '\\.(conf|conflist|json)\$' | head -n 1")
	[[ $conf_dir/$first == "$conflist" ]] || fail "$node: the runtime would load '$first', not $conflist"
	node_has "$node" "$conf_dir/yonghui/yonghui.conflist" || fail "$node: the yonghui network is not installed"
	# The node agent: its socket root's only, ready, and the conflist tells the plugin to ask it.
	mode=$(docker exec "$node" stat -c %a "$agent_socket") || fail "$node: no agent socket $agent_socket"
	[[ $mode == 600 ]] || fail "$node: $agent_socket has mode $mode, want 600"
	[[ $(agent_get "$node" /readyz) == ready ]] || fail "$node: the agent is not ready"
	[[ $(docker exec "$node" cat "$conflist" | jq -r '.plugins[0].agentSocket') == "$agent_socket" ]] ||
		fail "$node: the conflist does not name the agent's socket"
}

install_yh_genie() {
	local node cid ip dns_ips
	log "installing yh-genie"
	scratch=$(mktemp -d)
	cid=$(docker create "$yh_image")
	docker cp "$cid:/usr/local/bin/yh-genie" "$scratch/yh-genie"
	docker rm "$cid" >/dev/null
	image_sha=$(sha256sum "$scratch/yh-genie")
	image_sha=${image_sha%% *}

	kubectl apply -f manifests/
	# Kubernetes 1.30 and later: the nodes' credentials write only their own pods' status.
	kubectl apply -f manifests/kubernetes-1.30/
	kubectl -n kube-system rollout status ds/yh-genie --timeout="${wait_secs}s"
	kubectl wait --for=condition=Ready nodes --all --timeout="${wait_secs}s"
	for node in "${nodes[@]}"; do
		wait_until "the conflist on $node" node_has "$node" "$conflist"
		assert_installed_on "$node"
	done
	log "CoreDNS on the default network"
	kubectl -n kube-system rollout status deploy/coredns --timeout="${wait_secs}s"
	dns_ips=$(kubectl -n kube-system get pods -l k8s-app=kube-dns -o 'jsonpath={.items[*].status.podIP}')
	[[ -n $dns_ips ]] || fail "CoreDNS pods have no addresses"
	for ip in $dns_ips; do
		ip_in_cidr "$ip" "$pod_cidr" || fail "CoreDNS got $ip, outside $pod_cidr"
	done
}

# The README's last step: a pod choosing the yonghui network by ConfigMap, in the default namespace.
check_example() {
	local ip addrs
	log "the README's example pod (examples/pods/yonghui.yaml)"
	kubectl apply -f examples/pods/yonghui.yaml
	kubectl wait --for=condition=Ready pod/on-yonghui --timeout="${wait_secs}s"
	ip=$(kubectl get pod on-yonghui -o 'jsonpath={.status.podIP}')
	ip_in_cidr "$ip" "$pod_cidr" || fail "on-yonghui: address '$ip' is not in $pod_cidr"
	addrs=$(kubectl exec on-yonghui -- ip -4 -o addr show dev eth0)
	[[ $addrs == *"inet $ip/"* ]] || fail "on-yonghui: eth0 does not hold $ip: $addrs"
	# Its sleep ignores SIGTERM: no need to wait out the grace period.
	kubectl delete -f examples/pods/yonghui.yaml --grace-period=1 --wait=true --timeout="${wait_secs}s"
}

add_networks() {
	local net
	log "adding the ptpnet and ptplan networks to the yh-genie-networks ConfigMap"
	kubectl apply -f e2e/networks.yaml
	# The kubelet syncs ConfigMap volumes within about a minute; the installer polls every 2 s.
	for net in ptpnet ptplan; do
		wait_until "$net on every node" on_every_node test -s "$conf_dir/$net/$net.conflist"
	done
}

check_workload() {
	local workers pod node node_cidr ip net sandbox svc_ip entry hits
	local -a records=()
	local -A ip_of=() pods_on=()
	log "pods choosing networks"
	mapfile -t workers < <(kubectl get nodes -l '!node-role.kubernetes.io/control-plane' -o 'jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}')
	((${#workers[@]} == 2)) || fail "want 2 workers, got ${#workers[@]}: ${workers[*]}"
	kubectl label node "${workers[0]}" yh-genie-e2e/slot=a --overwrite
	kubectl label node "${workers[1]}" yh-genie-e2e/slot=b --overwrite
	kubectl apply -f e2e/workload.yaml
	kubectl -n "$ns" wait --for=condition=Ready pod --all --timeout="${wait_secs}s"

	node=$(pod_field yh-a '{.spec.nodeName}')
	[[ $node == "${workers[0]}" ]] || fail "yh-a is on '$node', not ${workers[0]}"
	node=$(pod_field yh-b '{.spec.nodeName}')
	[[ $node == "${workers[1]}" ]] || fail "yh-b is on '$node', not ${workers[1]}"
	for pod in yh-a yh-b yh-default ptp-a ptp-b; do
		ip_of[$pod]=$(pod_ip "$pod")
	done
	for pod in yh-a yh-b yh-default; do
		node=$(pod_field "$pod" '{.spec.nodeName}')
		node_cidr=$(kubectl get node "$node" -o 'jsonpath={.spec.podCIDR}')
		assert_pod_address "$pod" "$pod_cidr"
		# flannel's subnet for a node is the node's podCIDR.
		assert_pod_address "$pod" "$node_cidr"
	done
	for pod in ptp-a ptp-b; do
		assert_pod_address "$pod" "$ptp_cidr"
	done

	log "the pods' networks came through the node agents"
	for pod in yh-a yh-b yh-default ptp-a ptp-b; do
		node=$(pod_field "$pod" '{.spec.nodeName}')
		pods_on[$node]=$((${pods_on[$node]:-0} + 1))
	done
	for node in "${!pods_on[@]}"; do
		hits=$(agent_hits "$node")
		((hits >= pods_on[$node])) || fail "$node: its agent answered $hits ADDs, fewer than its ${pods_on[$node]} pods"
	done

	log "connectivity"
	assert_fetch yh-a "http://${ip_of[yh-b]}:8080/" yh-b
	assert_fetch yh-b "http://${ip_of[yh-a]}:8080/" yh-a
	svc_ip=$(kubectl -n "$ns" get service backend -o 'jsonpath={.spec.clusterIP}')
	[[ -n $svc_ip ]] || fail "the backend Service has no ClusterIP"
	assert_fetch yh-a "http://$svc_ip/" yh-default
	assert_fetch yh-a "http://backend.$ns.svc.cluster.local/" yh-default
	assert_fetch ptp-a "http://${ip_of[ptp-b]}:8080/" ptp-b
	assert_fetch ptp-a "http://$svc_ip/" yh-default
	assert_fetch ptp-b "http://backend.$ns.svc.cluster.local/" yh-default

	log "leases and records while the pods run"
	for pod in yh-a yh-b yh-default ptp-a ptp-b; do
		node=$(pod_field "$pod" '{.spec.nodeName}')
		ip=${ip_of[$pod]}
		net=yonghui
		if [[ $pod == ptp-* ]]; then net=ptpnet; fi
		records+=("$node:/var/lib/cni/networks/$net/$ip")
		if [[ $net == yonghui ]]; then
			sandbox=$(sandbox_id "$node" "$pod") || fail "$pod: no single ready sandbox on $node"
			# yonghui keeps its delegate's configuration per attachment, on tmpfs: <sandbox>:<interface>.
			records+=("$node:/run/yh-genie/yonghui/$sandbox:eth0")
		fi
	done
	for entry in "${records[@]}"; do
		node_has "${entry%%:*}" "${entry#*:}" || fail "${entry%%:*}: ${entry#*:} does not exist"
	done

	log "deleting the pods frees their addresses"
	kubectl -n "$ns" delete pod --all --wait=true --timeout="${wait_secs}s"
	for entry in "${records[@]}"; do
		wait_until "${entry#*:} to go on ${entry%%:*}" node_lacks "${entry%%:*}" "${entry#*:}"
	done
}

check_multinet() {
	local pod other node hits before route routes
	local -A net1_of=() leases=()
	log "pods with two networks (a list in a ConfigMap, a NetworkAttachmentDefinition)"
	# manifests/ installed the CRD; the API server serves the kind once it is Established.
	kubectl wait --for=condition=Established crd/network-attachment-definitions.k8s.cni.cncf.io --timeout="${wait_secs}s"
	node=$(kubectl get nodes -l yh-genie-e2e/slot=a -o 'jsonpath={.items[0].metadata.name}')
	before=$(agent_hits "$node")
	kubectl apply -f e2e/multinet.yaml
	kubectl -n "$ns" wait --for=condition=Ready pod/multi-cm pod/multi-nad --timeout="${wait_secs}s"
	hits=$(agent_hits "$node")
	((hits >= before + 2)) || fail "$node: its agent answered $((hits - before)) of the 2 multi-network ADDs"

	for pod in multi-cm multi-nad; do
		[[ $(pod_field "$pod" '{.spec.nodeName}') == "$node" ]] || fail "$pod is not on $node"
		assert_pod_address "$pod" "$pod_cidr"
		net1_of[$pod]=$(pod_addr_on "$pod" net1)
		ip_in_cidr "${net1_of[$pod]}" "$ptplan_cidr" || fail "$pod: net1 has ${net1_of[$pod]}, not in $ptplan_cidr"
		assert_network_status "$pod" "$(pod_ip "$pod")" "${net1_of[$pod]}"
		leases[$pod]=/var/lib/cni/networks/ptplan/${net1_of[$pod]}
		node_has "$node" "${leases[$pod]}" || fail "$node: no lease ${leases[$pod]} for $pod's net1"
	done

	log "multi-network connectivity"
	# Each pod reaches the other's net1 address through its own net1; its default route stays eth0's.
	for pod in multi-cm multi-nad; do
		# busybox's `ip route show default` lists every route: the default ones are picked here.
		routes=$(kubectl -n "$ns" exec "$pod" -- ip -4 route show)
		route=$(grep '^default ' <<<"$routes" || true)
		[[ $route == *" dev eth0"* && $route != *net1* ]] || fail "$pod: the default route is not eth0's alone: $routes"
		[[ $pod == multi-cm ]] && other=multi-nad || other=multi-cm
		route=$(kubectl -n "$ns" exec "$pod" -- ip route get "${net1_of[$other]}")
		[[ $route == *" dev net1 "* ]] || fail "$pod: ${net1_of[$other]} is not routed by net1: $route"
		assert_fetch "$pod" "http://${net1_of[$other]}:8080/" "$other"
	done
	kubectl -n "$ns" delete pod multi-cm multi-nad --wait=true --timeout="${wait_secs}s"
	for pod in multi-cm multi-nad; do
		wait_until "${leases[$pod]} to go on $node" node_lacks "$node" "${leases[$pod]}"
	done
}

check_upgrade() {
	local node
	log "restarting the installer (new pod, new token)"
	kubectl -n kube-system rollout restart ds/yh-genie
	kubectl -n kube-system rollout status ds/yh-genie --timeout="${wait_secs}s"
	for node in "${nodes[@]}"; do
		wait_until "the conflist on $node" node_has "$node" "$conflist"
		assert_installed_on "$node"
	done
	kubectl apply -f e2e/after-upgrade.yaml
	kubectl -n "$ns" wait --for=condition=Ready pod/yh-after-upgrade --timeout="${wait_secs}s"
	assert_pod_address yh-after-upgrade "$pod_cidr"
	kubectl -n "$ns" delete pod yh-after-upgrade --wait=true --timeout="${wait_secs}s"
}

check_uninstall() {
	local node
	log "uninstalling"
	kubectl delete -f manifests/yh-genie.yaml --cascade=foreground --wait=true --timeout="${wait_secs}s"
	wait_until "the installer pods to go" no_installer_pods
	for node in "${nodes[@]}"; do
		node_lacks "$node" "$conflist" || fail "$node: $conflist is still there after uninstall"
		node_lacks "$node" "$kubeconfig_on_node" || fail "$node: $kubeconfig_on_node is still there after uninstall"
	done
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
	install_fabric
	install_yh_genie
	check_example
	add_networks
	check_workload
	check_multinet
	check_upgrade
	check_uninstall
	log "PASS"
}

main "$@"
