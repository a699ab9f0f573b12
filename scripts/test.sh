#!/usr/bin/env bash
# Runs every test: formatting, lints, unit tests and the root integration tests (real network
# namespaces, real plugins, cnidrive). Needs root. Usage: scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/test.sh needs root: the integration tests create network namespaces" >&2
  exit 1
fi
scripts/prereqs.sh

cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
mapfile -t shell_scripts < <(git ls-files '*.sh' .ci/run)
shellcheck "${shell_scripts[@]}"
cargo test --all-targets -- --test-threads "${TEST_THREADS:-4}"

# A bounded fuzzing run of every outside-input parser, from the corpora in fuzz/corpus.
scripts/fuzz.sh "${FUZZ_SECONDS:-15}"
