#!/usr/bin/env bash
# Cluster-wide addresses, side by side: Spiderpool's published workload shape (D Deployments of R
# replicas, 100 x 10 = 1000 pods by default) over K simulated nodes, each pod's ADD exec'd on its
# node as a runtime execs its network plugin's IPAM (CNI_COMMAND=ADD, CNI_CONTAINERID, K8S_POD_UID,
# K8S_POD_NAME and K8S_POD_NAMESPACE in CNI_ARGS, the network configuration on stdin), a few at once
# per node as a kubelet starts sandboxes, a failed ADD torn down with a DEL and tried again with a
# backoff. Per system, a control plane of its own (bench/scale's: a real API server and etcd from
# scripts/cluster/build.sh, its audit log) with the pods bound to their node, and three cases:
#   equal       a pool of exactly as many addresses as pods
#   sufficient  a /16
#   killed      a /16, one node's IPAM killed (yh-ipam: its agent) and its node deleted mid-burst,
#               its pods created again on the other nodes
# Systems: yh-ipam (one node agent per node, as bench/scale.sh runs them; the plugin is the
# yh-genie binary the installer links as yh-ipam), yh-ipam-4 (blockSize 4), host-local (a range
# per node, no API server), whereabouts and whereabouts-slices (v0.9.2 in its IPPool mode and with
# node_slice_size, its node slice controller running; built by scripts/cluster/whereabouts.sh
# --controllers). Spiderpool is listed as not run. Prints, per case and system: the time until
# every pod has its address (or "did not finish in N s" and how many did), API requests of the
# IPAM's per-node part per address (the audit log), conflicts (an address held by two live pods),
# and the addresses still held after every pod's DEL (records, files, IPPools). Release build;
# needs root; starts a control plane and K agents: run it alone (flock /work/locks/heavy.lock on
# shared machines). Prints figures; passes or fails nothing.
#
# Usage: bench/ipam.sh [--nodes K] [--deployments D] [--replicas R] [--per-node C]
#                      [--time-limit SECONDS] [--systems yh-ipam,yh-ipam-4,host-local,whereabouts,whereabouts-slices]
#                      [--cases equal,sufficient,killed] [--yh-genie-bin PATH] [--whereabouts-dir DIR]
#                      [--keep]  (keeps each run directory: agents' logs, the audit log)
#        (defaults: 10 nodes, 100 Deployments of 10 replicas, 4 ADDs at once per node, 600 s per
#         system and case, every system and case)
set -euo pipefail
cd "$(dirname "$0")/.."
whereabouts=()
case " $* " in
  *" --whereabouts-dir "*) ;;
  *) whereabouts=(--whereabouts-dir "$(scripts/cluster/whereabouts.sh --controllers | tail -1)") ;;
esac
exec cargo bench --bench ipam -- "${whereabouts[@]}" "$@"
