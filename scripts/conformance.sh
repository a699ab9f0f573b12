#!/usr/bin/env bash
# Kubernetes' own network conformance specs (its e2e suite, built from the same source as the local
# test cluster) with yh-genie installed from manifests/ as the cluster's CNI: tests/conformance.rs.
# Usage (root; KUBERNETES_VERSION picks another supported release, as for scripts/cluster/build.sh):
#   scripts/conformance.sh                   # every [sig-network] [Conformance] spec
#   scripts/conformance.sh --pod-networking  # the Granular Checks for pods and HostPort (CI's set)
#   scripts/conformance.sh --baseline        # then the same specs with the reference bridge as the
#                                            # nodes' only CNI, and what fails only with yh-genie
# Prints passed, failed and skipped with each failure's message; keeps the e2e log, the JUnit and
# JSON reports and the summary in target/conformance/<cni>-<set>/. Exits non-zero when a spec fails
# with yh-genie that tests/conformance.rs does not list as a limit of the test cluster.
set -euo pipefail
cd "$(dirname "$0")/.."

set=sig-network
baseline=false
for arg in "$@"; do
  case $arg in
    --pod-networking) set=pod-networking ;;
    --baseline) baseline=true ;;
    *) echo "usage: $0 [--pod-networking] [--baseline]" >&2; exit 2 ;;
  esac
done

scripts/prereqs.sh
bin=$(scripts/cluster/build.sh | tail -1)
version=$("$bin/kubelet" --version | awk '{ print $NF }')

run() { # CNI: runs the set with that CNI; its status
  YH_GENIE_CONFORMANCE=$set YH_GENIE_CONFORMANCE_CNI=$1 cargo test --locked --test conformance -- --nocapture
}

status=0
run yh-genie || status=$?
if $baseline; then
  run bridge || true
  ours=target/conformance/yh-genie-$set/summary.txt
  theirs=target/conformance/bridge-$set/summary.txt
  echo
  echo "== $set, Kubernetes $version"
  echo "yh-genie: $(head -1 "$ours")"
  echo "bridge:   $(head -1 "$theirs")"
  only_ours=$(comm -23 <(sed -n 's/^FAILED //p' "$ours" | sort) <(sed -n 's/^FAILED //p' "$theirs" | sort))
  if [ -n "$only_ours" ]; then
    echo "failed with yh-genie only:"
    while read -r spec; do echo "  $spec"; done <<<"$only_ours"
    status=1
  else
    echo "no spec fails with yh-genie that passes with the reference bridge"
  fi
fi
exit "$status"
