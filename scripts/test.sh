#!/usr/bin/env bash
# Runs every test: formatting, lints, unit tests and the root integration tests (real network
# namespaces, real plugins, cnidrive, a local Kubernetes cluster, and on it Kubernetes' own
# pod-networking conformance specs: tests/conformance.rs). Needs root. Usage: scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/test.sh needs root: the integration tests create network namespaces" >&2
  exit 1
fi
scripts/prereqs.sh
# The local Kubernetes cluster's binaries, its e2e suite and CoreDNS (tests/cluster.rs,
# tests/conformance.rs): built once per version, cached in /var/cache/yh-genie (a cold build takes
# half an hour or more on 2 cores).
scripts/cluster/build.sh | grep -v '^/'
# containerd 2.x for tests/cri.rs's second run (the CNI 1.1 STATUS it asks), cached the same way.
containerd2=$(scripts/containerd2.sh | tail -1)

cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
mapfile -t shell_scripts < <(git ls-files '*.sh' .ci/run)
shellcheck "${shell_scripts[@]}"
cargo test --all-targets -- --test-threads "${TEST_THREADS:-4}"
# The CRI node's tests again, under containerd 2.x instead of Debian's 1.6.
YH_GENIE_CONTAINERD_BIN=$containerd2 cargo test --test cri -- --test-threads "${TEST_THREADS:-4}"

# A bounded fuzzing run of every outside-input parser, from the corpora in fuzz/corpus.
scripts/fuzz.sh "${FUZZ_SECONDS:-15}"
