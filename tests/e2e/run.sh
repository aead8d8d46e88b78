#!/usr/bin/env bash
# Builds usescope and runs the end-to-end tests against real Prometheus and
# Alertmanager binaries (Debian packages prometheus, prometheus-alertmanager).
# Exits non-zero if any fails; the last line is "e2e: N passed, M failed",
# counting test scripts.
set -uo pipefail
cd "$(dirname "$0")/../.."
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"

if [ -z "${USESCOPE_BIN:-}" ]; then
  cargo build --locked -q -p usescope || { echo "e2e: 0 passed, 1 failed"; exit 1; }
  export USESCOPE_BIN=target/debug/usescope
fi

passed=0
failed=0
run() {
  echo "==> $*"
  if "$@"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "<== FAILED: $*"
  fi
}

# The e2e queries read the checked-in dashboards: they must match generate.py.
run python3 dashboards/generate.py --check
run python3 tests/e2e/alerts_fire.py
run python3 tests/e2e/node_alerts_fire.py
run python3 tests/e2e/queries_run.py

echo "e2e: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
