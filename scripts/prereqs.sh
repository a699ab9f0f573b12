#!/usr/bin/env bash
# Installs what building and testing yh-genie needs on a fresh Debian machine (run as root):
# Debian's reference CNI plugins (real delegates and the behaviour to match), iproute2, iptables and
# nftables, ping, shellcheck, and cnidrive, a minimal CNI runtime on libcni (as containerd uses).
set -euo pipefail

packages=(containernetworking-plugins iproute2 iptables nftables iputils-ping shellcheck jq time)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# cnidrive is built from Debian's packaged libcni by the shared tool, when it is beside the checkout.
here=$(cd "$(dirname "$0")/.." && pwd)
cnidrive_src=${CNIDRIVE_SRC:-$here/../shared/tools/cnidrive}
if ! command -v cnidrive >/dev/null 2>&1; then
  if [ -x "$cnidrive_src/build.sh" ]; then
    bash "$cnidrive_src/build.sh" /usr/local/bin/cnidrive
  else
    echo "note: $cnidrive_src/build.sh not found; tests that replay flows through libcni will fail" >&2
  fi
fi
