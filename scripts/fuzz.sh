#!/usr/bin/env bash
# Bounded coverage-guided fuzzing of every parser of outside input (cargo fuzz / libFuzzer), starting
# from the seeds kept in fuzz/corpus. Exits non-zero on any finding (panic, hang, OOM).
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET]   (default 20)
#        scripts/fuzz.sh --build   only install cargo-fuzz and build the targets (scripts/test.sh
#                                  does this in the background while the other tiers run)
# The committed seeds (a few hand-picked inputs per target, one of each shape the target reads) are
# only read: what a run discovers goes to the working corpus outside the checkout,
# ${YH_GENIE_CACHE:-/var/cache/yh-genie}/fuzz-corpus/<target>, which each run reads and grows, so
# runs build on each other while git keeps only the seeds and the checkout stays as it was.
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
working=${YH_GENIE_CACHE:-/var/cache/yh-genie}/fuzz-corpus
if ! mkdir -p "$working" 2>/dev/null; then
  echo "fuzz: cannot create the working corpus $working: point YH_GENIE_CACHE at a writable directory" >&2
  exit 1
fi
for t in $targets; do
  mkdir -p "corpus/$t" "$working/$t"
  echo "fuzz: $t for ${seconds}s"
  # libFuzzer reads every corpus directory given and writes new inputs (and replaces reduced ones)
  # in the first only: the working corpus.
  cargo fuzz run -s none -O --debug-assertions "$t" "$working/$t" "corpus/$t" -- \
    -max_total_time="$seconds" -timeout=5 -rss_limit_mb=1024 -print_final_stats=0 2>&1 | grep -E '^(#[0-9]+ +DONE|Done)|ERROR|panicked' || true
  # A finding leaves an artifact; make it fail the run.
  if compgen -G "artifacts/$t/*" >/dev/null; then
    echo "fuzz: $t found a crash: $(ls "artifacts/$t")" >&2
    exit 1
  fi
done
echo "fuzz: all targets ran ${seconds}s with no finding"
