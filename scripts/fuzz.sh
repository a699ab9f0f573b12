#!/usr/bin/env bash
# Bounded coverage-guided fuzzing of every parser of outside input (cargo fuzz / libFuzzer), starting
# from the corpora kept in fuzz/corpus. Exits non-zero on any finding (panic, hang, OOM).
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET]   (default 20)
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds=${1:-20}
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked --quiet
# `-s none`: no sanitizer, so the stable toolchain builds it; Rust's own checks catch what matters
# here (panics, overflows in debug assertions, hangs via -timeout).
targets=$(cargo fuzz list)
cargo fuzz build -s none -O --debug-assertions
for t in $targets; do
  mkdir -p "corpus/$t"
  echo "fuzz: $t for ${seconds}s"
  cargo fuzz run -s none -O --debug-assertions "$t" "corpus/$t" -- \
    -max_total_time="$seconds" -timeout=5 -rss_limit_mb=1024 -print_final_stats=0 2>&1 | grep -E '^(#[0-9]+ +DONE|Done)|ERROR|panicked' || true
  # A finding leaves an artifact; make it fail the run.
  if compgen -G "artifacts/$t/*" >/dev/null; then
    echo "fuzz: $t found a crash: $(ls "artifacts/$t")" >&2
    exit 1
  fi
done
echo "fuzz: all targets ran ${seconds}s with no finding"
