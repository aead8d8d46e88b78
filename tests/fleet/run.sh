#!/usr/bin/env bash
# The fleet test (tests/fleet/run.py says what it runs and checks): 200
# usescope hosts behind deploy/fleet's sharded HA Prometheus, Thanos and
# Alertmanager pair. Needs root and Thanos (scripts/setup.sh builds it).
# The last line is "fleet: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/../.."
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
if [ -z "${USESCOPE_BIN:-}" ]; then
  cargo build --locked -q -p usescope || { echo "fleet: 0 passed, 1 failed"; exit 1; }
  export USESCOPE_BIN=target/debug/usescope
fi
exec python3 tests/fleet/run.py "$@"
