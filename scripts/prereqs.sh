#!/usr/bin/env bash
# Installs what building and testing yh-genie needs on a fresh Debian machine (run as root):
# Debian's reference CNI plugins (real delegates and the behaviour to match), iproute2, iptables and
# nftables, ping, shellcheck, containerd and runc with gcc and libc6-dev (tests/cri.rs runs a
# private containerd and builds its pause image), and cnidrive, a minimal CNI runtime on libcni
# (as containerd uses).
set -euo pipefail

packages=(containernetworking-plugins iproute2 iptables nftables iputils-ping shellcheck jq time
          containerd runc gcc libc6-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  # containerd's package would start (and enable) a system containerd. The tests run their own and
  # must not depend on or disturb one, so a policy-rc.d tells the package scripts not to start
  # services during this install (unless the machine already has a policy of its own).
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  if printf '%s\n' "${missing[@]}" | grep -qx containerd && command -v systemctl >/dev/null; then
    systemctl disable --quiet containerd.service 2>/dev/null || true
  fi
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
