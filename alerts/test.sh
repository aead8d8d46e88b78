#!/usr/bin/env bash
# Checks the rules and the Alertmanager config with the real tools:
#   promtool check rules   on every rule file
#   promtool test rules    on every unit-test file in tests/
#   a coverage check       every alert has at least one firing test case
#   runbook anchors        every runbook_url names a section of docs/runbooks.md
#   promtool check config  on the compose stack's Prometheus config
#   amtool check-config    on alertmanager.yml, plus routing checks
# Exits non-zero if anything fails; the last line is
# "alerts: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")"

passed=0
failed=0
check() {
  local name=$1
  shift
  local out
  if out=$("$@" 2>&1); then
    passed=$((passed + 1))
    echo "ok   $name"
  else
    failed=$((failed + 1))
    echo "FAIL $name"
    echo "$out" | sed 's/^/     /'
  fi
}

for tool in promtool amtool; do
  if ! command -v "$tool" >/dev/null; then
    echo "$tool not found (apt-get install prometheus prometheus-alertmanager)" >&2
    echo "alerts: 0 passed, 1 failed"
    exit 1
  fi
done

rule_files=(usescope-rules.yml usescope-alerts.yml)
for f in "${rule_files[@]}"; do
  check "promtool check rules $f" promtool check rules "$f"
done
for f in tests/*.test.yml; do
  check "promtool test rules $f" promtool test rules "$f"
done

# Every alert name in the rules must appear in a test with a non-empty
# exp_alerts list, i.e. a case where it fires.
coverage() {
  python3 - "$@" <<'PY'
import re, sys, glob
alerts = set(re.findall(r"^\s*- alert:\s*(\S+)", open("usescope-alerts.yml").read(), re.M))
fired = set()
for path in glob.glob("tests/*.test.yml"):
    current = None
    for line in open(path):
        m = re.match(r"^\s*alertname:\s*(\S+)", line)
        if m:
            current = m.group(1)
            continue
        m = re.match(r"^\s*exp_alerts:\s*(.*)$", line)
        if m and current:
            if m.group(1).strip() != "[]":
                fired.add(current)
            current = None
missing = sorted(alerts - fired)
if missing:
    print("alerts without a firing test case: " + ", ".join(missing))
    sys.exit(1)
print(f"{len(alerts)} alerts, each with a firing test case")
PY
}
check "every alert has a firing test" coverage

# Every runbook_url anchor must name a section of docs/runbooks.md.
runbooks() {
  python3 - <<'PY'
import re, sys
urls = set(re.findall(r"runbook_url:\s*\S+#(\S+)", open("usescope-alerts.yml").read()))
anchors = {h.strip().lower() for h in re.findall(r"^## (.+)$", open("../docs/runbooks.md").read(), re.M)}
missing = sorted(urls - anchors)
if missing:
    print("runbook anchors without a section in docs/runbooks.md: " + ", ".join(missing))
    sys.exit(1)
PY
}
check "every runbook_url has a section in docs/runbooks.md" runbooks

# The compose stack's Prometheus config, with the rule paths it sees inside
# its container mapped back to this directory.
compose_prometheus_config() {
  local tmp
  tmp=$(mktemp -d)
  sed "s|/etc/prometheus/rules/|$PWD/|" ../deploy/prometheus/prometheus.yml >"$tmp/prometheus.yml"
  promtool check config "$tmp/prometheus.yml"
  local rc=$?
  rm -rf "$tmp"
  return $rc
}
check "promtool check config deploy/prometheus/prometheus.yml" compose_prometheus_config

check "amtool check-config alertmanager.yml" amtool check-config alertmanager.yml
check "pages route to the page receiver" \
  amtool config routes test --config.file=alertmanager.yml --verify.receivers=page severity=page alertname=HighIOWait instance=h1
check "tickets route to the ticket receiver" \
  amtool config routes test --config.file=alertmanager.yml --verify.receivers=ticket severity=ticket alertname=DiskUtilisationHigh instance=h1

echo "alerts: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
