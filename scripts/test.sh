#!/usr/bin/env bash
# Runs every test: formatting, lints, unit tests and the root integration tests (real network
# namespaces, real plugins, cnidrive, a local Kubernetes cluster). Needs root. Usage: scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/test.sh needs root: the integration tests create network namespaces" >&2
  exit 1
fi
scripts/prereqs.sh
# The local Kubernetes cluster's binaries (tests/cluster.rs): built once per version, cached in
# /var/cache/yh-genie (a cold build takes a quarter to half an hour on 2 cores).
scripts/cluster/build.sh | grep -v '^/'

cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
mapfile -t shell_scripts < <(git ls-files '*.sh' .ci/run)
shellcheck "${shell_scripts[@]}"
cargo test --all-targets -- --test-threads "${TEST_THREADS:-4}"

# A bounded fuzzing run of every outside-input parser, from the corpora in fuzz/corpus.
scripts/fuzz.sh "${FUZZ_SECONDS:-15}"
