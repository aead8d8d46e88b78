#!/usr/bin/env bash
# Offline validation of the fleet packaging:
# - the systemd unit with `systemd-analyze verify` (ExecStart pointed at the built binary);
# - the container security rules (deploy/container/security.py) on the
#   DaemonSet and on docker-compose.yml, and that the checker rejects a
#   privileged, over-capable, writable variant of each;
# - the Kubernetes manifests with kubernetes-validate (PyPI; it ships the
#   Kubernetes JSON schemas), strict mode;
# - the DaemonSet's arguments on the built binary (the /host paths as this
#   host's, a loopback port): it must start and serve one scrape, so a
#   mistyped flag or regex cannot ship.
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
# The DaemonSet's usescope arguments, run for real on this host.
mapfile -t ds_args < <(python3 -c '
import sys, yaml
docs = [d for d in yaml.safe_load_all(open("deploy/kubernetes/daemonset.yaml")) if d]
c = [c for d in docs if d.get("kind") == "DaemonSet" for c in d["spec"]["template"]["spec"]["containers"] if c["name"] == "usescope"][0]
for a in c["args"]:
    a = a.replace("/host/proc", "/proc").replace("/host/sys", "/sys").replace("/host/root", "/")
    print("--web.listen-address=127.0.0.1:0" if a.startswith("--web.listen-address") else a)
')
"$bin" "${ds_args[@]}" --no-probe.runqlat --no-probe.cachestat --no-probe.drops 2>"$tmp/ds.log" &
ds_pid=$!
addr=
for _ in $(seq 100); do
  addr=$(grep -o 'usescope listening.*address=[0-9.:]*' "$tmp/ds.log" | sed 's/.*address=//' || true)
  [ -n "$addr" ] && break
  kill -0 "$ds_pid" 2>/dev/null || break
  sleep 0.1
done
if [ -n "$addr" ] && curl -sf "http://$addr/metrics" | grep -q '^node_scrape_collector_success{collector="netdev"} 1$'; then
  echo "ok   the DaemonSet's ${#ds_args[@]} arguments start usescope and it serves a scrape"; passed=$((passed + 1))
else
  echo "FAIL the DaemonSet's arguments: $(tail -3 "$tmp/ds.log")"; failed=$((failed + 1))
fi
kill "$ds_pid" 2>/dev/null || true
wait "$ds_pid" 2>/dev/null || true

echo "deploy: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
