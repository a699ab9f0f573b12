#!/usr/bin/env bash
# The node agents at cluster scale: one real API server with etcd (the test cluster's build,
# scripts/cluster/build.sh; KUBERNETES_VERSION picks it), K simulated nodes each running yh-genie's
# node agent as its DaemonSet does (its own node name and pod-bound token), the node-density
# workload (P pods per node in a burst, a networks ConfigMap and five NADs per namespace, churn),
# every agent started again at once with its node's pods, then the API server restarted. Each system
# runs twice, side by side: on the Kubernetes build's etcd and on Debian 12's etcd 3.4.23, which
# cannot answer progress requests, so that its API server does not serve streaming lists (both
# etcds keep their data on a tmpfs). With --multus-thick-bin DIR (multus-daemon built from its
# source), Multus thick's daemons on the same nodes and workload, side by side. Release build;
# needs root; starts a control plane and K daemons: run it alone (flock /work/locks/heavy.lock on
# shared machines). Prints figures; passes or fails nothing.
#
# Usage: bench/scale.sh [--nodes K] [--pods P] [--namespaces N] [--add-every M] [--churn-rounds R]
#                       [--restart-sample S] [--multus-thick-bin DIR] [--yh-genie-bin PATH] [--no-yh-genie]
#                       [--etcd built|PATH ...] (the etcds, each a run; default: built and Debian's)
#                       [--keep]  (keeps each run directory: daemon logs, the audit log)
#        (defaults: 100 nodes, 30 pods each, 10 namespaces, an ADD every 10th pod, 3 churn rounds,
#         10 daemons started again)
set -euo pipefail
cd "$(dirname "$0")/.."
etcds=()
case " $* " in
  *" --etcd "*) ;;
  *) etcds=(--etcd built --etcd "$(scripts/cluster/etcd-debian.sh | tail -1)") ;;
esac
exec cargo bench --bench scale -- "${etcds[@]}" "$@"
