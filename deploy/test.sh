#!/usr/bin/env bash
# Offline validation of the fleet packaging:
# - the systemd unit with `systemd-analyze verify` (ExecStart pointed at the built binary);
# - the container security rules (deploy/container/security.py) on the
#   DaemonSet and on docker-compose.yml, and that the checker rejects a
#   privileged, over-capable, writable variant of each;
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
# The same security rules the container test runs the image under.
for target in "daemonset deploy/kubernetes/daemonset.yaml" "compose docker-compose.yml"; do
  set -- $target
  if out=$(python3 deploy/container/security.py "$1" "$2" 2>&1); then
    echo "$out"; passed=$((passed + 1))
  else
    echo "$out"; failed=$((failed + 1))
  fi
done
# ...and they can fail: a variant breaking each rule must be rejected.
sed -e 's/privileged: false/privileged: true/' -e 's/readOnlyRootFilesystem: true/readOnlyRootFilesystem: false/' \
  -e 's/add: \["BPF", /add: ["SYS_PTRACE", "BPF", /' deploy/kubernetes/daemonset.yaml >"$tmp/daemonset.yaml"
sed -e 's/read_only: true/read_only: false/' -e 's|/proc:/host/proc:ro|/proc:/host/proc|' \
  -e 's/- no-new-privileges:true/- seccomp=unconfined/' docker-compose.yml >"$tmp/docker-compose.yml"
for target in "daemonset $tmp/daemonset.yaml 3" "compose $tmp/docker-compose.yml 3"; do
  set -- $target
  rejected=$(python3 deploy/container/security.py "$1" "$2" 2>&1 | grep -c '^FAIL' || true)
  if [ "$rejected" = "$3" ]; then
    echo "ok   security.py rejects the broken $1 ($rejected rules)"; passed=$((passed + 1))
  else
    echo "FAIL security.py found $rejected of the $3 broken rules in $2"; failed=$((failed + 1))
  fi
done
echo "deploy: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
