#!/usr/bin/env bash
# The project's tests, in tiers that run alone or together (docs/testing.md says what each proves
# and what it costs). Usage:
#   scripts/test.sh [--quick] [--root] [--cri] [--cluster] [--kind] [--fuzz] [--matrix]
#   --quick    no root: formatting, clippy, shellcheck, the unit tests and tests/offline
#   --root     root: tests/netns (plugins, selector and agent in throwaway network namespaces) and
#              the benchmark driver's smoke run
#   --cri      root: tests/cri under Debian's containerd 1.6, then under containerd 2.x
#   --cluster  root: a real Kubernetes (tests/cluster), then Kubernetes' pod-networking
#              conformance specs on a cluster of their own (tests/conformance), and the scale
#              benchmark's driver in its smoke mode
#   --kind     root: the kind quick starts end to end (scripts/kind-e2e.sh)
#   --fuzz     a bounded fuzzing run of every parser of outside input (FUZZ_SECONDS per target)
#   --matrix   root: the supported range, for each Kubernetes of MATRIX_VERSIONS (the oldest
#              supported minor and the newest: v1.35.4 v1.37.2) tests/cluster and every
#              [sig-network] [Conformance] spec with yh-genie and with the reference bridge
#              (scripts/conformance.sh --baseline), the newest with a CRI-O node; then tests/cri
#              under CRI-O (scripts/crio.sh).
#              Results in target/matrix/. Not part of a run without flags.
# Flags combine (--root --cri). Without a flag: every tier but matrix, in the order above, as CI
# runs it (.ci/run). Tiers run one after another, never side by side: the root ones share fixed names
# (the cluster's addresses, the caches in /var/cache/yh-genie, the machine's cgroups and CPUs).
# TEST_THREADS (default 4) is libtest's --test-threads for the netns and CRI suites.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

tiers=()
for arg in "$@"; do
  case $arg in
    --quick | --root | --cri | --cluster | --kind | --fuzz | --matrix) tiers+=("${arg#--}") ;;
    -h | --help) usage ;;
    *) echo "scripts/test.sh: unknown option $arg" >&2; usage ;;
  esac
done
all=0
if [ ${#tiers[@]} -eq 0 ]; then
  all=1
  tiers=(quick root cri cluster kind fuzz)
fi
threads=${TEST_THREADS:-4}
matrix_versions=${MATRIX_VERSIONS:-v1.35.4 v1.37.2}

wants() {
  local tier
  for tier in "${tiers[@]}"; do [ "$tier" = "$1" ] && return 0; done
  return 1
}

# Every tier but quick and fuzz needs root (network namespaces, mounts, cgroups) and the packages
# scripts/prereqs.sh installs; quick only needs the tools it runs.
for tier in "${tiers[@]}"; do
  case $tier in quick | fuzz) ;; *) needs_root=$tier ;; esac
done
if [ -n "${needs_root:-}" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "scripts/test.sh --$needs_root needs root: it creates network namespaces, mounts and cgroups" \
      "(run it with sudo, or run scripts/test.sh --quick, which needs none)" >&2
    exit 1
  fi
  scripts/prereqs.sh
elif ! command -v shellcheck >/dev/null; then
  echo "shellcheck is missing: install it (apt-get install shellcheck, or scripts/prereqs.sh as root)" >&2
  exit 1
fi

# The slow builds the later tiers need, each cached outside the checkout (Kubernetes, the static
# yh-genie of its images, the test DRA driver, Multus and whereabouts for cluster, containerd 2.x
# for cri and the cluster's nodes, kind's programs and root filesystems for kind, the fuzz targets
# for fuzz, and for matrix each Kubernetes of its range and CRI-O), start at once
# in the background, one after another at a lower priority, when other tiers come first: they use
# the CPU those tiers leave idle (tests waiting on namespaces, containerd, control planes). Each
# build holds a lock while it runs (cargo's own, for the two cargo builds), so a tier that needs it
# waits for it rather than building it twice; one that failed in the background is built again by
# that tier, where its error shows. Nothing of it outlives the run.
background_pid=
background_log=
start_background_builds() {
  local steps=() version
  if wants cri || wants cluster || wants matrix; then steps+=("scripts/containerd2.sh"); fi
  if wants cluster || wants kind; then steps+=("scripts/cluster/build.sh --without-e2e"); fi
  # tests/cluster's needs first, then the e2e suite's, which only the conformance run after it needs.
  wants cluster && steps+=("scripts/cluster/static-binary.sh" "scripts/cluster/dra-driver.sh" "scripts/cluster/multus.sh"
    "scripts/cluster/whereabouts.sh" "scripts/cluster/build.sh")
  wants kind && [ -x scripts/kind-e2e.sh ] && steps+=("scripts/kind-e2e.sh --prepare")
  wants fuzz && steps+=("scripts/fuzz.sh --build")
  if wants matrix; then
    wants cluster || steps+=("scripts/cluster/static-binary.sh" "scripts/cluster/dra-driver.sh" "scripts/cluster/multus.sh"
      "scripts/cluster/whereabouts.sh")
    for version in $matrix_versions; do steps+=("env KUBERNETES_VERSION=$version scripts/cluster/build.sh"); done
    steps+=("scripts/crio.sh")
  fi
  [ ${#steps[@]} -gt 0 ] || return 0
  background_log=$(mktemp /tmp/yh-genie-background.XXXXXX)
  echo "== background builds (log: $background_log): ${steps[*]}"
  # A session of its own (setsid), so that the end of the run stops all of it; with the kernel's
  # autogroups, a session is also a scheduling group of its own, whose niceness is set apart from
  # its processes': both at 10.
  local script="set -e; echo 10 >/proc/self/autogroup 2>/dev/null || true;" step
  for step in "${steps[@]}"; do script+=" echo '>> $step'; $step;"; done
  setsid nice -n 10 bash -c "$script echo \">> done in \$SECONDS s\"" >"$background_log" 2>&1 &
  background_pid=$!
}
stop_background_builds() {
  [ -n "$background_pid" ] || return 0
  if kill -0 "$background_pid" 2>/dev/null; then
    kill -TERM -- "-$background_pid" 2>/dev/null || true
    wait "$background_pid" 2>/dev/null || true
    echo "== background builds stopped (log: $background_log)"
  elif wait "$background_pid"; then
    rm -f "$background_log"
  else
    echo "== background builds failed; the tiers built what they needed themselves (log: $background_log)"
  fi
  background_pid=
}
trap stop_background_builds EXIT
if [ ${#tiers[@]} -gt 1 ] || wants matrix; then start_background_builds; fi

timings=()
# Run tier $1 (the function tier_$1), recording how long it took.
run_tier() {
  local started=$SECONDS
  echo "== tier $1"
  "tier_$1"
  timings+=("$1 $((SECONDS - started)) s")
}

tier_quick() {
  cargo fmt --all -- --check
  cargo clippy --workspace --all-targets -- -D warnings
  local shell_scripts
  mapfile -t shell_scripts < <(git ls-files '*.sh' .ci/run)
  shellcheck "${shell_scripts[@]}"
  cargo test --lib --bins --test offline
}

tier_root() {
  cargo test --test netns -- --test-threads "$threads"
  # The benchmark driver in its smoke mode (a few pods, debug build): it still works.
  cargo test --bench selector
}

tier_cri() {
  # containerd 2.x for the second run (the CNI 1.1 STATUS it asks): built once per version,
  # cached in /var/cache/yh-genie.
  local containerd2
  containerd2=$(scripts/containerd2.sh | tail -1)
  cargo test --test cri -- --test-threads "$threads"
  YH_GENIE_CONTAINERD_BIN=$containerd2 cargo test --test cri -- --test-threads "$threads"
}

tier_cluster() {
  # The cluster's Kubernetes binaries, then its e2e suite and CoreDNS for the conformance run: built
  # once per version, cached in /var/cache/yh-genie (a cold build takes half an hour or more on 2
  # cores).
  scripts/cluster/build.sh --without-e2e | grep -v '^/'
  # That build's kubectl renders the kustomize overlays (tests/offline skips it without a kubectl).
  YH_GENIE_KUBECTL="$(scripts/cluster/build.sh --without-e2e | tail -1)/kubectl" \
    cargo test --test offline manifests::the_dynamic_networks_overlay
  # Multus thin and thick, and whereabouts, built once per version from the module proxy: the
  # move from Multus starts from nodes whose pods they attached; a NAD's IPAM is whereabouts.
  YH_GENIE_MULTUS_BIN=$(scripts/cluster/multus.sh | tail -1) \
    YH_GENIE_WHEREABOUTS=$(scripts/cluster/whereabouts.sh | tail -1) cargo test --test cluster
  scripts/cluster/build.sh | grep -v '^/'
  cargo test --test conformance
  # bench/scale.sh's driver in its smoke mode (2 nodes, 3 pods each, debug build) on the same
  # Kubernetes build: it still works, with the build's etcd and with Debian's 3.4.23, whose API
  # server does not serve streaming lists (the agents must list instead, and hold their pods).
  cargo test --bench scale -- --etcd built --etcd "$(scripts/cluster/etcd-debian.sh | tail -1)"
}

tier_kind() {
  if [ ! -x scripts/kind-e2e.sh ]; then
    if [ $all -eq 1 ]; then
      echo "kind: scripts/kind-e2e.sh is not in this checkout; skipped"
      return
    fi
    echo "scripts/test.sh --kind: scripts/kind-e2e.sh is not in this checkout" >&2
    return 1
  fi
  scripts/kind-e2e.sh
}

tier_fuzz() {
  # A bounded fuzzing run of every outside-input parser, from the corpora in fuzz/corpus.
  scripts/fuzz.sh "${FUZZ_SECONDS:-15}"
}

# The range Kubernetes itself supports (its three newest minors): the oldest and the newest of them.
# For each, the cluster suite and the [sig-network] conformance specs with yh-genie and with the
# reference bridge, on clusters of that release: on the oldest, nodes on Debian's containerd 1.6;
# on the newest, node-a on containerd 2.x and node-b on CRI-O. Then the CRI suite under CRI-O.
# target/matrix/summary.txt has a line per step.
tier_matrix() {
  local version bin started out=target/matrix crio newest=${matrix_versions##* } runtimes
  mkdir -p "$out"
  : >"$out/summary.txt"
  crio=$(scripts/crio.sh | tail -1)
  for version in $matrix_versions; do
    bin=$(KUBERNETES_VERSION=$version scripts/cluster/build.sh | tail -1)
    runtimes=()
    [ "$version" = "$newest" ] && runtimes=(YH_GENIE_CLUSTER_CRIO_BIN="$crio")
    echo "== matrix: Kubernetes $version ($bin) ${runtimes[*]}"
    started=$SECONDS
    env KUBERNETES_VERSION="$version" "${runtimes[@]}" cargo test --test cluster
    echo "$version tests/cluster passed in $((SECONDS - started)) s ${runtimes[*]}" >>"$out/summary.txt"
    started=$SECONDS
    env KUBERNETES_VERSION="$version" "${runtimes[@]}" scripts/conformance.sh --baseline
    rm -rf "${out:?}/$version"
    mkdir -p "$out/$version"
    cp -r target/conformance/yh-genie-sig-network target/conformance/bridge-sig-network "$out/$version/"
    echo "$version [sig-network] conformance, both CNIs, in $((SECONDS - started)) s:" \
      "yh-genie $(head -1 "$out/$version/yh-genie-sig-network/summary.txt");" \
      "bridge $(head -1 "$out/$version/bridge-sig-network/summary.txt")" >>"$out/summary.txt"
  done
  started=$SECONDS
  YH_GENIE_CRIO_BIN=$crio cargo test --test cri -- --test-threads "$threads"
  echo "tests/cri under CRI-O ($("$crio/crio" --version | awk 'NR == 1 { print $3 }')) passed in" \
    "$((SECONDS - started)) s" >>"$out/summary.txt"
  cat "$out/summary.txt"
}

for tier in quick root cri cluster kind fuzz matrix; do
  if wants "$tier"; then run_tier "$tier"; fi
done
if [ -n "$background_pid" ] && ! kill -0 "$background_pid" 2>/dev/null; then
  # Finished by now (every step is one a tier waited for): how long the builds took beside the tiers.
  done_line=$(tail -1 "$background_log")
  [[ $done_line == ">> done in "* ]] && timings+=("background builds ${done_line#>> done in }")
fi
summary=$(printf '%s, ' "${timings[@]}")
echo "== passed: ${summary%, }"
