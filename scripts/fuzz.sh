#!/usr/bin/env bash
# Bounded coverage-guided fuzzing of every parser of outside input (cargo fuzz / libFuzzer), starting
# from the corpora kept in fuzz/corpus. Exits non-zero on any finding (panic, hang, OOM).
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET]   (default 20)
#        scripts/fuzz.sh --build   only install cargo-fuzz and build the targets (scripts/test.sh
#                                  does this in the background while the other tiers run)
# The committed corpora are only read: what a run discovers goes to a temp dir, so running the tests
# leaves the checkout as it was. FUZZ_GROW=1 writes discoveries into fuzz/corpus instead, for a
# deliberate commit.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds=${1:-20}
# One install and build at a time: a run waits for the background build of scripts/test.sh, then
# finds the targets built.
mkdir -p target
exec 9>target/.fuzz-build.lock
flock 9
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked --quiet
# `-s none`: no sanitizer, so the stable toolchain builds it; Rust's own checks catch what matters
# here (panics, overflows in debug assertions, hangs via -timeout).
targets=$(cargo fuzz list)
cargo fuzz build -s none -O --debug-assertions
exec 9>&-
if [ "$seconds" = --build ]; then
  exit 0
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for t in $targets; do
  mkdir -p "corpus/$t" "$scratch/$t"
  # libFuzzer writes new inputs (and replaces reduced ones) in the first corpus directory only.
  if [ "${FUZZ_GROW:-0}" = 1 ]; then dirs=("corpus/$t"); else dirs=("$scratch/$t" "corpus/$t"); fi
  echo "fuzz: $t for ${seconds}s"
  cargo fuzz run -s none -O --debug-assertions "$t" "${dirs[@]}" -- \
    -max_total_time="$seconds" -timeout=5 -rss_limit_mb=1024 -print_final_stats=0 2>&1 | grep -E '^(#[0-9]+ +DONE|Done)|ERROR|panicked' || true
  # A finding leaves an artifact; make it fail the run.
  if compgen -G "artifacts/$t/*" >/dev/null; then
    echo "fuzz: $t found a crash: $(ls "artifacts/$t")" >&2
    exit 1
  fi
done
echo "fuzz: all targets ran ${seconds}s with no finding"
