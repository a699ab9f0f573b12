# Sourced by scripts/kind-e2e.sh: a Docker engine of the run's own (Debian's docker.io), and the
# host as it was once the engine is gone.
#
# kind_dockerd_start RUNDIR DATAROOT starts dockerd with its own socket (RUNDIR/docker.sock),
# exec-root, pidfile and configuration, and images, build cache and containers in DATAROOT (a cache:
# the images stay for the next run), and exports DOCKER_HOST. What dockerd changes on the host is
# recorded first: its bridges, its iptables chains and rules (NAT for builds and nodes, the FORWARD
# policy), and the kernel settings it and the nodes' kubelets write (IP forwarding, bridge netfilter,
# the kubelet's kernel tunables: a privileged node container writes the host's /proc/sys).
#
# kind_dockerd_stop removes every container and network of the engine, stops it, deletes the
# bridges it made, the iptables rules and chains it added, and puts back the FORWARD policy and the
# recorded kernel settings. Safe to call when the start failed half-way, or twice.
# shellcheck shell=bash

kind_dockerd_rundir=
kind_dockerd_state=
kind_dockerd_scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# Kernel settings the engine (forwarding, bridge netfilter), kind's nodes (their kubelets' kernel
# tunables, systemd's pid_max) or kube-proxy may write. Per network namespace ones (net.ipv4.conf.*,
# conntrack timeouts) are the nodes' own and not listed.
kind_sysctls=(net.ipv4.ip_forward net.ipv6.conf.all.forwarding net.ipv6.conf.default.forwarding
	net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables net.bridge.bridge-nf-call-arptables
	kernel.panic kernel.panic_on_oops vm.overcommit_memory vm.panic_on_oom kernel.keys.root_maxkeys
	kernel.keys.root_maxbytes kernel.pid_max net.netfilter.nf_conntrack_max fs.inotify.max_user_watches
	fs.inotify.max_user_instances)

# Paths outside its roots that dockerd (its key, its plugins' sockets) or a kind node (the bind mount
# of the host's kernel modules) creates where they are missing.
kind_host_paths=(/etc/docker/key.json /run/docker /lib/modules)

# The engine's marks in a rule or chain: its chains, its default bridge, its networks' bridges.
kind_docker_pattern='DOCKER|docker0|br-[0-9a-f]{12}'

kind_dockerd_start() {
	local rundir=$1 dataroot=$2 name value i
	kind_dockerd_rundir=$rundir
	kind_dockerd_state=$rundir/host-before
	mkdir -p "$kind_dockerd_state" "$dataroot"
	for i in iptables ip6tables; do
		"$i-save" >"$kind_dockerd_state/$i" 2>/dev/null || true
	done
	nft list tables >"$kind_dockerd_state/nft-tables" 2>/dev/null || true
	ip -o link show | awk -F': ' '{ print $2 }' | cut -d@ -f1 | sort >"$kind_dockerd_state/links"
	for name in "${kind_sysctls[@]}"; do
		if value=$(sysctl -n "$name" 2>/dev/null); then
			printf '%s=%s\n' "$name" "$value"
		fi
	done >"$kind_dockerd_state/sysctls"
	for name in "${kind_host_paths[@]}"; do
		[[ -e $name ]] || echo "$name"
	done >"$kind_dockerd_state/absent-paths"

	# BuildKit by default (Docker 23 and later build with it; 20.10 when the engine says so), its cache
	# bounded; the engine's containerd is its own child (no --containerd). Where root's capability
	# bounding set is not full, containers run through runc-bounded.sh (it says why).
	local runtime='"runtimes": {}'
	if (($(printf '%d' "0x$(awk '$1 == "CapBnd:" { print $2 }' /proc/self/status)") != (1 << ($(cat /proc/sys/kernel/cap_last_cap) + 1)) - 1)); then
		runtime="\"runtimes\": { \"runc-bounded\": { \"path\": \"$kind_dockerd_scripts/runc-bounded.sh\" } },
		  \"default-runtime\": \"runc-bounded\""
		echo "root's capability bounding set is not full: containers run through runc-bounded.sh" >&2
	fi
	cat >"$rundir/daemon.json" <<-EOF
		{
		  "features": { "buildkit": true },
		  "builder": { "gc": { "enabled": true, "defaultKeepStorage": "20GB" } },
		  "log-driver": "json-file",
		  "log-opts": { "max-size": "10m" },
		  $runtime
		}
	EOF
	/usr/sbin/dockerd --config-file "$rundir/daemon.json" --data-root "$dataroot" --exec-root "$rundir/exec" \
		--pidfile "$rundir/dockerd.pid" -H "unix://$rundir/docker.sock" >"$rundir/dockerd.log" 2>&1 &
	export DOCKER_HOST=unix://$rundir/docker.sock
	for i in $(seq 120); do
		if /usr/bin/docker version >/dev/null 2>&1; then
			echo "dockerd $(/usr/bin/docker version -f '{{.Server.Version}}') on $DOCKER_HOST, data in $dataroot" >&2
			# Left by a run that was killed before it could clean up.
			kind_docker_remove_all
			return 0
		fi
		if ! kill -0 "$(cat "$rundir/dockerd.pid" 2>/dev/null || echo 0)" 2>/dev/null && ((i > 10)); then
			break
		fi
		sleep 0.5
	done
	echo "dockerd did not start; its log:" >&2
	tail -n 30 "$rundir/dockerd.log" >&2
	return 1
}

# Every container (with its anonymous volumes) and user network of the engine, and its dangling
# images (each build of yh-genie's image leaves the previous one untagged).
kind_docker_remove_all() {
	/usr/bin/docker ps -aq | xargs -r /usr/bin/docker rm -f -v >/dev/null
	/usr/bin/docker network prune -f >/dev/null
	/usr/bin/docker image prune -f >/dev/null
}

kind_dockerd_stop() {
	[[ -n $kind_dockerd_rundir && -d $kind_dockerd_rundir ]] || return 0
	# Every step is tried, whatever failed before it.
	(
		set +o errexit +o pipefail
		kind_dockerd_restore
	)
	rm -rf "$kind_dockerd_rundir"
	kind_dockerd_rundir=
	unset DOCKER_HOST
}

kind_dockerd_restore() {
	local rundir=$kind_dockerd_rundir state=$kind_dockerd_state pid i link table rule chain policy line name value before family
	local -a rules=()
	if [[ -S $rundir/docker.sock ]] && /usr/bin/docker version >/dev/null 2>&1; then
		kind_docker_remove_all || true
	fi
	pid=$(cat "$rundir/dockerd.pid" 2>/dev/null || true)
	if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid"
		for i in $(seq 60); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.5
		done
		if kill -0 "$pid" 2>/dev/null; then
			echo "dockerd ($pid) did not stop in 30 s; killing it" >&2
			kill -KILL "$pid"
		fi
	fi

	# Bridges and host ends of veth pairs that did not exist before.
	while read -r link; do
		if [[ $link =~ ^(docker0|br-[0-9a-f]{12}|veth[0-9a-f]{7})$ ]] && ! grep -qxF "$link" "$state/links"; then
			ip link delete "$link" 2>/dev/null && echo "removed link $link" >&2
		fi
	done < <(ip -o link show | awk -F': ' '{ print $2 }' | cut -d@ -f1)

	# iptables: the engine's new rules (in reverse, so jumps go before their chains), then its new
	# chains, then the built-in chains' policies as they were; a table the engine made (nftables
	# backend) goes once it is empty again.
	for i in iptables ip6tables; do
		command -v "$i" >/dev/null || continue
		for table in filter nat mangle raw; do
			before=$(sed -n "/^\*$table\$/,/^COMMIT\$/p" "$state/$i" 2>/dev/null)
			mapfile -t rules < <("$i" -t "$table" -S 2>/dev/null | grep -E -- "^-A .*($kind_docker_pattern)" | tac)
			for rule in "${rules[@]}"; do
				if ! grep -qxF -- "$rule" <<<"$before"; then
					# The rule as iptables -S prints it: words, quoted where needed.
					eval "$i -t $table -D ${rule#-A }" && echo "removed $i -t $table $rule" >&2
				fi
			done
			while read -r chain; do
				if ! grep -q "^:$chain " <<<"$before"; then
					"$i" -t "$table" -F "$chain" && "$i" -t "$table" -X "$chain" && echo "removed $i -t $table chain $chain" >&2
				fi
			done < <("$i" -t "$table" -S 2>/dev/null | awk '$1 == "-N" { print $2 }' | grep -E "$kind_docker_pattern")
			while read -r line; do
				chain=$(awk '{ print $2 }' <<<"$line")
				policy=$(grep "^:$chain " <<<"$before" | awk '{ print $2 }')
				[[ -n $policy ]] || policy=ACCEPT
				if [[ $(awk '{ print $3 }' <<<"$line") != "$policy" ]]; then
					"$i" -t "$table" -P "$chain" "$policy" && echo "restored $i -t $table policy $chain $policy" >&2
				fi
			done < <("$i" -t "$table" -S 2>/dev/null | grep '^-P ')
			family=ip
			[[ $i == iptables ]] || family=ip6
			if [[ $("$i" --version) == *nf_tables* && -z $before ]] &&
				! grep -qx "table $family $table" "$state/nft-tables" 2>/dev/null &&
				! "$i" -t "$table" -S 2>/dev/null | grep -qv '^-P .* ACCEPT$' &&
				nft list table "$family" "$table" >/dev/null 2>&1; then
				nft delete table "$family" "$table" && echo "removed nft table $family $table" >&2
			fi
		done
	done

	while IFS='=' read -r name value; do
		if [[ $(sysctl -n "$name" 2>/dev/null) != "$value" ]]; then
			sysctl -q -w "$name=$value" && echo "restored $name=$value" >&2
		fi
	done <"$state/sysctls"
	while read -r name; do
		if [[ -e $name ]]; then
			rm -rf "$name" && echo "removed $name" >&2
		fi
	done <"$state/absent-paths"
}
