#!/usr/bin/env bash
# Benchmark of the selector: ADD and DEL through `yh-genie -> network` beside the network's plugin
# run alone, one pod at a time and several at once, with API requests per call and the peak RSS of
# one ADD; then pods with 1, 2 and 4 networks through the selector beside the same networks' plugins
# run directly. Release build (cargo's bench profile inherits release). Needs root (network
# namespaces) and Debian's containernetworking-plugins. Prints figures; passes or fails nothing.
# With --capabilities, only the selector's ADD and DEL with and without the runtime's
# capability arguments (hostPort, bandwidth, DNS) through a no-op network that declares them.
#
# Usage: bench/selector.sh [--pods N] [--parallel N] [--networks-only | --capabilities]
#        (defaults: 100 pods, 8 at once, both parts)
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo bench --bench selector -- "$@"
