#!/usr/bin/env bash
# Benchmark of the selector: ADD and DEL through `yh-genie -> network` beside the network's plugin
# run alone, one pod at a time and several at once, with API requests per call and the peak RSS of
# one ADD; then pods with 1, 2 and 4 networks through the selector beside the same networks' plugins
# run directly. Release build (cargo's bench profile inherits release). Needs root (network
# namespaces) and Debian's containernetworking-plugins. Prints figures; passes or fails nothing.
# With --capabilities, only the selector's ADD and DEL with and without the runtime's
# capability arguments (hostPort, bandwidth, DNS) through a no-op network that declares them.
#
# The single-network part runs against a real API server (kube-apiserver + etcd from
# scripts/cluster/build.sh's cache; --fake-api: the tests' fake one), --runs times (5), and prints
# the median of the runs' ratios. It starts a control plane: run it alone on the machine.
#
# Usage: bench/selector.sh [--pods N] [--parallel N] [--runs N] [--fake-api] [--strace FILE]
#                          [--single-network | --networks-only | --capabilities]
#        (defaults: 100 pods, 8 at once, 5 runs, every part)
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo bench --bench selector -- "$@"
