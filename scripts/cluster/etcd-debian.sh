#!/usr/bin/env bash
# Debian 12's etcd server (3.4.23), for the tests and benchmarks that run an API server on an etcd
# without progress requests (etcd before 3.4.31 or 3.5.13): its API server answers a streaming
# list with an ERROR event, and the node agents must list instead. Taken from Debian's package
# with `apt-get download` and unpacked with `dpkg-deb -x`, never installed: on a machine without
# systemd, installing etcd-server starts an etcd on port 2379 from its init script. Cached once per
# package version in ${YH_GENIE_CACHE:-/var/cache/yh-genie}/etcd-debian-<version>/bin. Usage:
#   scripts/cluster/etcd-debian.sh      # prints the etcd binary's path on its last line
set -euo pipefail

cache=${YH_GENIE_CACHE:-/var/cache/yh-genie}
mkdir -p "$cache"
exec 9>"$cache/etcd-debian.lock"
flock 9

version=$(apt-cache policy etcd-server | sed -n 's/^ *Candidate: //p')
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
  apt-get update -qq
  version=$(apt-cache policy etcd-server | sed -n 's/^ *Candidate: //p')
fi
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
  echo "scripts/cluster/etcd-debian.sh: apt knows no etcd-server package (is Debian's main archive in sources.list?)" >&2
  exit 1
fi
out=$cache/etcd-debian-${version//[^A-Za-z0-9.+-]/_}
if [ -x "$out/bin/etcd" ]; then
  echo "Debian's etcd-server $version: cached in $out/bin"
  echo "$out/bin/etcd"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# apt downloads as its own user where it can write (else it warns and downloads as root).
if id _apt >/dev/null 2>&1; then chown _apt "$work"; fi
(cd "$work" && apt-get download -qq "etcd-server=$version")
dpkg-deb -x "$work"/etcd-server_*.deb "$work/root"
mkdir -p "$out/bin"
cp "$work/root/usr/bin/etcd" "$out/bin/etcd.new"
mv -f "$out/bin/etcd.new" "$out/bin/etcd"
echo "Debian's etcd-server $version: unpacked into $out/bin ($("$out/bin/etcd" --version | head -1))"
echo "$out/bin/etcd"
