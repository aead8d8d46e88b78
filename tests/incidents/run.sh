#!/usr/bin/env bash
# Real incidents on this kernel, paged through real Prometheus and
# Alertmanager running the shipped rules time-scaled (tests/incidents/run.py
# says which and how). Needs root; without it the suite fails under CI=true
# or USESCOPE_REQUIRE_BPF=1 and prints a USESCOPE-SKIPPED line otherwise.
# The last line is "incidents: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/../.."
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
if [ -z "${USESCOPE_BIN:-}" ]; then
  cargo build --locked -q -p usescope || { echo "incidents: 0 passed, 1 failed"; exit 1; }
  export USESCOPE_BIN=target/debug/usescope
fi
exec python3 tests/incidents/run.py "$@"
