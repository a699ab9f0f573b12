#!/usr/bin/env bash
# The Docker engine's runtime on a machine whose root lacks capabilities in its bounding set (some
# sandboxes withhold CAP_SYS_RESOURCE): Docker 20.10 gives a --privileged container, as every kind
# node is, every capability it knows, and runc cannot grant one the bounding set lacks ("unable to
# apply caps: operation not permitted"), nor to a process docker exec --privileged starts in it.
# This keeps, in the container's or the process's configuration, only the capabilities the
# bounding set has (what they could hold anyway), then runs runc.
# scripts/kind/dockerd.sh configures it only on such machines.
set -euo pipefail
args=("$@")
# create and run name the bundle, whose config.json holds the process; exec names a process file.
config='' filter=''
for ((i = 0; i < ${#args[@]}; i++)); do
	case ${args[i]} in
	--bundle | -b) config=${args[i + 1]:-}/config.json filter=.process.capabilities ;;
	--bundle=*) config=${args[i]#--bundle=}/config.json filter=.process.capabilities ;;
	--process | -p) config=${args[i + 1]:-} filter=.capabilities ;;
	--process=*) config=${args[i]#--process=} filter=.capabilities ;;
	esac
done
if [[ -n $config && -f $config ]]; then
	# capsh prints e.g. 0x...=cap_chown,cap_dac_override,...
	allowed=$(capsh --decode="$(awk '$1 == "CapBnd:" { print $2 }' /proc/self/status)" |
		sed 's/^[^=]*=//' | tr ',' '\n' | tr '[:lower:]' '[:upper:]' | jq -R . | jq -sc .)
	jq --argjson allowed "$allowed" \
		"if $filter then $filter |= map_values(map(select(. as \$c | \$allowed | index(\$c)))) else . end" \
		"$config" >"$config.bounded"
	mv "$config.bounded" "$config"
fi
exec runc "$@"
