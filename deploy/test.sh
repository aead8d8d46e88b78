#!/usr/bin/env bash
# Offline validation of the fleet packaging:
# - the systemd unit with `systemd-analyze verify` (ExecStart pointed at the built binary);
# - the Kubernetes manifests with kubernetes-validate (PyPI; it ships the
#   Kubernetes JSON schemas), strict mode.
# The ServiceMonitor is a Prometheus Operator CRD whose schema
# kubernetes-validate does not ship: it is only parsed, not schema-checked.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(pwd)/${USESCOPE_BIN:-target/debug/usescope}
[ -x "$bin" ] || cargo build -q
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

sed "s#/usr/local/bin/usescope#$bin#" deploy/systemd/usescope.service > "$tmp/usescope.service"
if out=$(systemd-analyze verify "$tmp/usescope.service" 2>&1) && [ -z "$out" ]; then
  echo "ok   systemd-analyze verify usescope.service"; passed=$((passed + 1))
else
  echo "FAIL systemd-analyze verify usescope.service: $out"; failed=$((failed + 1))
fi

# The unit must raise the open-file limit (held connections, docs/security.md).
if grep -qE '^LimitNOFILE=[0-9]+' deploy/systemd/usescope.service; then
  echo "ok   usescope.service sets LimitNOFILE"; passed=$((passed + 1))
else
  echo "FAIL usescope.service sets no LimitNOFILE"; failed=$((failed + 1))
fi

venv=${KUBERNETES_VALIDATE_VENV:-/var/tmp/usescope-kv}
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q kubernetes-validate
fi
for f in deploy/kubernetes/*.yaml; do
  if out=$("$venv/bin/kubernetes-validate" --strict "$f" 2>&1) && ! grep -qE "ERROR|FAIL" <<<"$out"; then
    echo "ok   kubernetes-validate --strict $f"; passed=$((passed + 1))
  else
    echo "FAIL kubernetes-validate $f: $out"; failed=$((failed + 1))
  fi
done
echo "deploy: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
