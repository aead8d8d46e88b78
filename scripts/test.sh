#!/usr/bin/env bash
# Sets up and runs every test: formatting, lints, unit and integration tests
# (including the real eBPF probes when run as root), promtool/amtool checks
# of the rules and Alertmanager config, compose validation, the
# end-to-end tests against real Prometheus and Alertmanager servers, and the
# container image and compose stack on a Docker engine of the test's own.
#
# Set USESCOPE_REQUIRE_BPF=1 (CI does) to make any BPF test that cannot run
# fail instead of skip.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"

passed=0
failed=0
failures=()
# Each step's output is kept, so that the summary at the end can repeat
# the lines that say what failed: a CI log is often shown only in part.
step_logs=$(mktemp -d)
trap 'rm -rf "$step_logs"' EXIT
step() {
  local name=$1
  shift
  echo "==> $name"
  local start=$SECONDS log="$step_logs/$((passed + failed)).log"
  "$@" 2>&1 | tee "$log"
  if [ "${PIPESTATUS[0]}" -eq 0 ]; then
    passed=$((passed + 1))
    echo "<== $name: ok ($((SECONDS - start)) s)"
  else
    failed=$((failed + 1))
    failures+=("$name"$'\n'"$(grep -E -m 40 -- '^FAIL|--- FAILED|panicked at|^not ok|^failed:|^error' "$log")")
    echo "<== $name: FAILED ($((SECONDS - start)) s)"
  fi
}

step "cargo fmt" cargo fmt --all -- --check
step "dependencies: none unused (cargo-machete), none deprecated" scripts/check_dependencies.sh
step "references: every file the docs and comments name exists" python3 scripts/check_references.py
step "layers: no cycle, no collector importing another" python3 scripts/module_graph.py
step "cargo clippy" cargo clippy --locked --all-targets -q -- -D warnings
# A test that skips (missing root, BPF, FUSE, promtool, node_exporter)
# appends a USESCOPE-SKIPPED line here (exporter/tests/common/skip.rs);
# cargo hides a passing test's output, so the summary comes from the file.
export USESCOPE_SKIP_LOG="$PWD/target/skipped-tests.log"
rm -f "$USESCOPE_SKIP_LOG"
skipped_tests() {
  local lines=()
  [ -f "$USESCOPE_SKIP_LOG" ] && mapfile -t lines <"$USESCOPE_SKIP_LOG"
  echo "skipped tests: ${#lines[@]}"
  [ "${#lines[@]}" -gt 0 ] && printf '  %s\n' "${lines[@]}"
  # In CI (CI=true, or .ci/run's USESCOPE_REQUIRE_BPF=1) no test may skip.
  [ "${#lines[@]}" -eq 0 ] || { [ "${CI:-}" != true ] && [ "${USESCOPE_REQUIRE_BPF:-}" != 1 ]; }
}
step "cargo test" cargo test --locked -q
step "skipped tests (none allowed in CI)" skipped_tests
# The daemon only: the bench tools are not run here (clippy has compiled
# them), and each release binary costs a whole-program LTO pass.
step "release build (profile-guided)" scripts/build-release.sh -q
step "node_exporter compatibility: defaults against defaults, live host and fixture trees" \
  python3 scripts/compat_node_exporter.py --usescope target/release/usescope \
  --node-exporter "$(go env GOPATH 2>/dev/null || echo "$HOME/go")/bin/node_exporter"
step "load: 100 concurrent scrapers for 60 s (wrk)" env USESCOPE_BIN=target/release/usescope tests/load/load_test.py
[ -x alerts/test.sh ] && step "rules and alertmanager config (promtool, amtool)" alerts/test.sh
step "fleet packaging (systemd-analyze, kubernetes-validate)" deploy/test.sh
[ -f docker-compose.yml ] && step "docker-compose config" docker-compose -f docker-compose.yml config -q
[ -x tests/e2e/run.sh ] && step "end-to-end with Prometheus and Alertmanager" tests/e2e/run.sh
step "real incidents page through Prometheus and Alertmanager (root, about 12 min)" \
  env USESCOPE_BIN=target/release/usescope tests/incidents/run.sh
step "fleet: 200 hosts, sharded HA Prometheus, Thanos, an Alertmanager pair (root, about 7 min)" \
  env USESCOPE_BIN=target/release/usescope tests/fleet/run.sh
step "containers on a real engine (own dockerd: image, capabilities, compose stack)" \
  env USESCOPE_BIN=target/release/usescope tests/container/run.sh

echo
for f in "${failures[@]}"; do
  echo "FAILED STEP: $f"
done
echo "test.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
