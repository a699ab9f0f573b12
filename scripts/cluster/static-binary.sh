#!/usr/bin/env bash
# Builds yh-genie as one static executable (the C library linked in: no loader on the host it is
# copied to), as the Dockerfile's musl build makes it, for the images of the test cluster
# (tests/cluster, tests/conformance, bench/scale.sh's smoke run). In its own target dir, with the
# `cluster-image` profile (release without LTO, incremental), kept outside the checkout beside the
# cached Kubernetes, so that a fresh clone on the same machine rebuilds only yh-genie itself, not
# its dependencies (a quarter of an hour on two cores). The cluster's tests run this script, and
# scripts/test.sh runs it in the background ahead of them: the environment is cleared to the same
# few variables either way, since every difference cargo's build scripts see rebuilds them.
#   scripts/cluster/static-binary.sh     # prints the binary's path on its last line
set -euo pipefail
cd "$(dirname "$0")/../.."
cache=${YH_GENIE_CACHE:-/var/cache/yh-genie}
target_dir=$cache/image-target
triple=$(uname -m)-unknown-linux-gnu
keep=()
for name in PATH HOME RUSTUP_HOME CARGO_HOME RUSTUP_TOOLCHAIN; do
  [ -z "${!name:-}" ] || keep+=("$name=${!name}")
done
# Cargo hashes a workspace's own crates by their path inside the workspace, so two checkouts (git
# worktrees) share yh-genie's artifacts here, and judges them fresh by mtime alone: a checkout whose
# files are older than another checkout's last build would get that checkout's binary. When the
# checkout differs from the last one built here, yh-genie itself (not its dependencies) is rebuilt.
checkout=$(pwd -P)
stamp=$target_dir/yh-genie-checkout
if [ "$(cat "$stamp" 2>/dev/null)" != "$checkout" ]; then
  env -i "${keep[@]}" cargo clean --profile cluster-image --target "$triple" --target-dir "$target_dir" \
    -p yh-genie >&2 || true
fi
env -i "${keep[@]}" RUSTFLAGS="-C target-feature=+crt-static" \
  cargo build --profile cluster-image --locked --bin yh-genie --target "$triple" --target-dir "$target_dir" >&2
mkdir -p "$target_dir"
echo "$checkout" >"$stamp"
echo "$target_dir/$triple/cluster-image/yh-genie"
