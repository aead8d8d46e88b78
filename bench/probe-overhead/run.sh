#!/usr/bin/env bash
# Probe overhead benchmark: ns per event for each probe, probe off vs on.
# Needs root (loads the probes).
# Usage: bench/probe-overhead/run.sh [RUNS [PROBE...]]  (PROBEs: only their workloads)
# Prints a Markdown table; see RESULTS.md for the method and last results.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
runs="${1:-7}"
shift || true
cd "$root"
scripts/build-release.sh -q
target="${CARGO_TARGET_DIR:-$root/target}"
mkdir -p "$target/probe-overhead"
rustc -O --edition 2021 "$here/workload.rs" -o "$target/probe-overhead/workload"
# The data file must be on a disk filesystem for cold reads to mean anything.
data="$target/probe-overhead"
exec python3 "$here/bench.py" "$target/release/usescope" "$target/probe-overhead/workload" "$data" "$runs" "$@"
