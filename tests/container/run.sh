#!/usr/bin/env bash
# The container image and the compose stack on a real Docker engine.
#
# Starts a dockerd of its own (private socket, data root and exec root,
# no bridge, no iptables, no IP forwarding) inside a network and mount
# namespace of its own: containers use "host" networking, which is that
# namespace's 127.0.0.1, so nothing reaches the host's interfaces or ports
# and every mount the engine makes dies with the namespace. No registry is
# reachable, so the base image comes from debootstrap (minbase) plus
# `docker import`, cached under /var/tmp.
#
# The image is the Dockerfile's runtime stage exactly as shipped, on a
# build stage that runs the same deploy/container/make-rootfs.sh on the
# binary built on this host (target/release/usescope) instead of compiling
# it again inside a rust image. Checks:
#   1. probes up with the documented capability set for this engine
#      (deploy/container/security.py), and the kernel holds their programs;
#      1b. and with the set for current runtimes (CAP_BPF, CAP_PERFMON) on
#      the engine's containerd and runc, which Kubernetes uses;
#   2. after start, CapEff/CapPrm/CapBnd 0, NoNewPrivs 1 and uid 65534 on
#      every thread;
#   3. with no capabilities at all: /proc metrics served (MemTotal equal to
#      /proc/meminfo's), usescope_probe_up 0 for every probe, the reason logged;
#   4. docker-compose.yml's usescope, Prometheus and Alertmanager come up:
#      Prometheus scrapes usescope, loads every shipped rule, finds Alertmanager;
#   5. docker stop exits 0 within 5 s and leaves none of its BPF programs;
#   6. which workload: of two real containers, a busy loop and a sleeper,
#      the image's cgroup collector names the busy one by its container_id,
#      with the CPU the kernel's cpuacct.usage shows for that container.
# It also measures the image size and the time from container start to
# the first successful scrape.
#
# Needs root. Without it (or a tool) it skips, or fails when
# USESCOPE_REQUIRE_BPF=1 or CI=true. Cleans up on every exit path: containers,
# dockerd and containerd (by PID), the namespaces, the work directory.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD

# The project's skip convention (exporter/tests/common/skip.rs): a failure
# under USESCOPE_REQUIRE_BPF=1 or CI=true, otherwise one USESCOPE-SKIPPED line.
skip() {
  if [ "${USESCOPE_REQUIRE_BPF:-0}" = 1 ] || [ "${CI:-}" = true ]; then
    echo "FAIL container test cannot run: it needs $1 (USESCOPE_REQUIRE_BPF=1 or CI=true)"
    exit 1
  fi
  echo "USESCOPE-SKIPPED test=tests/container/run.sh needs=$1"
  exit 0
}
[ "$(id -u)" = 0 ] || skip "root, to start its own dockerd"
for tool in dockerd ctr runc docker-compose debootstrap unshare nsenter curl bpftool python3; do
  command -v "$tool" >/dev/null || skip "$tool (scripts/setup.sh installs it)"
done
# The client that comes with the engine (Debian's docker.io); another
# docker on PATH may be a newer CLI that wants buildx for builds.
docker=${USESCOPE_DOCKER:-/usr/bin/docker}
[ -x "$docker" ] || skip "$docker (scripts/setup.sh installs docker.io)"
bin=${USESCOPE_BIN:-target/release/usescope}
if [ ! -x "$bin" ]; then
  [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
  scripts/build-release.sh -q
fi

passed=0
failed=0
ok() { echo "ok   $*"; passed=$((passed + 1)); }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }

work=$(mktemp -d /var/tmp/usescope-container.XXXXXX)
export DOCKER_HOST=unix://$work/docker.sock
# Compose names containers and volumes after the project.
export COMPOSE_PROJECT_NAME=usescopetest
dockerd_pid=
unshare_pid=
netns=

# Every process in our network namespace is one this test started (dockerd,
# containerd, shims, containers): the namespace was created empty.
processes_in_our_netns() {
  [ -n "$netns" ] || return 0
  local p
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/ns/net" 2>/dev/null)" = "$netns" ] && echo "${p#/proc/}"
  done
  return 0
}

cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  if [ -z "$dockerd_pid" ] && [ -n "$unshare_pid" ]; then
    # dockerd never came up: unshare's --kill-child ends it with unshare.
    kill -TERM "$unshare_pid" 2>/dev/null
    wait "$unshare_pid" 2>/dev/null
  fi
  if [ -n "$dockerd_pid" ]; then
    docker-compose -f "$repo/docker-compose.yml" down -v -t 5 >/dev/null 2>&1
    ids=$("$docker" ps -aq 2>/dev/null)
    [ -n "$ids" ] && "$docker" rm -f $ids >/dev/null 2>&1
    kill -TERM "$dockerd_pid" 2>/dev/null
    for _ in $(seq 150); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.1; done
    # Whatever outlived dockerd (a hung shim, a container): end it by PID.
    leftovers=$(processes_in_our_netns)
    if [ -n "$leftovers" ]; then
      echo "cleanup: killing what outlived dockerd: $leftovers"
      kill -KILL $leftovers 2>/dev/null
      sleep 0.5
    fi
  fi
  # The mount namespace died with its last process; nothing of ours may
  # remain mounted in the host's.
  if grep -q " $work" /proc/self/mountinfo; then
    echo "cleanup: mounts left under $work:"; grep " $work" /proc/self/mountinfo
    grep " $work" /proc/self/mountinfo | awk '{print $5}' | sort -r | xargs -r -n1 umount -l
    rc=1
  fi
  rm -rf "$work"
  # The engine ran in its own network namespace with --iptables=false: the
  # host must have no interface or firewall chain of Docker's.
  if ip -o link show | grep -qE ': (docker0|br-[0-9a-f]+)[:@]'; then
    echo "cleanup: a Docker bridge exists on the host"; rc=1
  fi
  if command -v iptables-save >/dev/null && iptables-save 2>/dev/null | grep -q DOCKER; then
    echo "cleanup: Docker chains in the host's iptables"; rc=1
  fi
  if command -v nft >/dev/null && nft list ruleset 2>/dev/null | grep -q DOCKER; then
    echo "cleanup: Docker chains in the host's nftables"; rc=1
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The base image: Debian minbase, as a tarball cached per suite,
# architecture and debootstrap version (it changes only with those).
suite=bookworm
arch=$(dpkg --print-architecture)
key="$suite-$arch-debootstrap$(dpkg-query -W -f='${Version}' debootstrap)"
cache=${USESCOPE_CONTAINER_CACHE:-/var/tmp/usescope-container-cache}
base_tar="$cache/minbase-$key.tar"
if [ ! -s "$base_tar" ]; then
  echo "debootstrap --variant=minbase $suite (cached in $base_tar afterwards)"
  mkdir -p "$cache"
  debootstrap --variant=minbase "$suite" "$work/minbase" \
    "${USESCOPE_DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log"; exit 1; }
  tar -C "$work/minbase" -cf "$base_tar.$$.tmp" . && mv "$base_tar.$$.tmp" "$base_tar"
  rm -rf "$work/minbase"
fi

# dockerd in fresh network and mount namespaces. / becomes shared inside
# ours (it may be private on the host) so the rslave bind of / that the
# filesystem collector needs is allowed; propagation never leaves ours.
unshare --net --mount --propagation slave --fork --kill-child=TERM -- sh -c '
  ip link set lo up && mount --make-rshared / && exec dockerd \
    --host "unix://$1/docker.sock" --data-root "$1/data" --exec-root "$1/exec" \
    --pidfile "$1/dockerd.pid" --bridge=none --iptables=false --ip6tables=false \
    --ip-forward=false --ip-masq=false --userland-proxy=false' sh "$work" \
  >"$work/dockerd.log" 2>&1 &
unshare_pid=$!
for _ in $(seq 300); do
  [ -s "$work/dockerd.pid" ] && "$docker" info >/dev/null 2>&1 && break
  sleep 0.1
done
dockerd_pid=$(cat "$work/dockerd.pid" 2>/dev/null || true)
if [ -z "$dockerd_pid" ] || ! "$docker" info >/dev/null 2>&1; then
  echo "FAIL dockerd did not come up:"; tail -20 "$work/dockerd.log"; exit 1
fi
netns=$(readlink "/proc/$dockerd_pid/ns/net")
in_netns() { nsenter --net="/proc/$dockerd_pid/ns/net" "$@"; }
engine=$("$docker" version -f '{{.Server.Version}}')
echo "engine: dockerd $engine, client $("$docker" version -f '{{.Client.Version}}'), $(docker-compose version --short 2>/dev/null | sed 's/^/docker-compose /')"

"$docker" import - usescope-test/minbase:latest <"$base_tar" >/dev/null

# The usescope image: our build stage, then the shipped runtime stage.
ctx=$work/image
mkdir -p "$ctx"
cp "$bin" "$ctx/usescope"
strip "$ctx/usescope"
cp deploy/container/make-rootfs.sh "$ctx/"
grep -q '^FROM scratch AS runtime$' Dockerfile || { echo "FAIL Dockerfile has no 'FROM scratch AS runtime' stage"; exit 1; }
{
  echo "FROM usescope-test/minbase:latest AS build"
  echo "COPY usescope /out/usescope"
  echo "COPY make-rootfs.sh /usr/local/bin/make-rootfs.sh"
  echo "RUN make-rootfs.sh /out/usescope /rootfs"
  sed -n '/^FROM scratch AS runtime$/,$p' Dockerfile
} >"$ctx/Dockerfile"
"$docker" build -q --network host -t usescope:local "$ctx" >/dev/null
size=$("$docker" image inspect -f '{{.Size}}' usescope:local)
echo "image usescope:local: $size bytes ($((size / 1024 / 1024)) MiB)"

# Run the image as docs/containers.md does; $1 is a name, $2 a port, the
# rest docker run options.
run_usescope() {
  local name=$1 port=$2
  shift 2
  "$docker" create --name "$name" --network host --pid host --read-only \
    --security-opt no-new-privileges:true \
    -v /proc:/host/proc:ro -v /sys:/host/sys:ro -v /:/host/root:ro,rslave \
    -v /sys/kernel/btf:/sys/kernel/btf:ro "$@" usescope:local \
    --path.procfs=/host/proc --path.sysfs=/host/sys --path.rootfs=/host/root \
    --web.listen-address="127.0.0.1:$port" >/dev/null
}
# Starts a created container; prints the milliseconds from `docker start`
# to the first successful scrape.
start_and_time_first_scrape() {
  local name=$1 port=$2 t0
  t0=$(date +%s%N)
  "$docker" start "$name" >/dev/null
  for _ in $(seq 500); do
    if in_netns curl -sf -o /dev/null "http://127.0.0.1:$port/metrics"; then
      echo $((($(date +%s%N) - t0) / 1000000))
      return 0
    fi
    sleep 0.02
  done
  return 1
}
scrape() { in_netns curl -sf "http://127.0.0.1:$1/metrics"; }
container_pid() { "$docker" inspect -f '{{.State.Pid}}' "$1"; }
# BPF program ids the process holds, read from the kernel's fdinfo.
bpf_prog_ids() { grep -h '^prog_id:' /proc/"$1"/fdinfo/* 2>/dev/null | awk '{print $2}' | sort -un; }

# 1. Probes up with the documented capabilities.
mapfile -t caps < <(python3 deploy/container/security.py caps "$engine")
cap_args=(--cap-drop ALL)
for c in "${caps[@]}"; do cap_args+=(--cap-add "$c"); done
run_usescope probes 19200 "${cap_args[@]}"
if ms=$(start_and_time_first_scrape probes 19200); then
  echo "start to first successful scrape: $ms ms (capabilities ${caps[*]})"
else
  fail "the container with ${caps[*]} never served /metrics"; "$docker" logs probes 2>&1 | tail
fi
pid=$(container_pid probes)
metrics=$(scrape 19200 || true)
up=$(grep -c '^usescope_probe_up{.*} 1$' <<<"$metrics" || true)
down=$(grep -c '^usescope_probe_up{.*} 0$' <<<"$metrics" || true)
prog_ids=$(bpf_prog_ids "$pid")
if [ "$up" -ge 1 ] && [ "$down" = 0 ] && [ -n "$prog_ids" ]; then
  ok "1. capabilities ${caps[*]} on dockerd $engine: $up probes up, the kernel shows $(wc -w <<<"$prog_ids") BPF programs held by the container's process"
else
  fail "1. capabilities ${caps[*]}: $up probes up, $down down, BPF program ids held: [${prog_ids}]"
  "$docker" logs probes 2>&1 | grep -i warn | head -5
fi

# 2. Every thread dropped everything and runs as 65534.
bad=
threads=0
for status in /proc/"$pid"/task/*/status; do
  threads=$((threads + 1))
  for field in CapEff CapPrm CapBnd CapAmb CapInh; do
    v=$(awk -v f="$field:" '$1 == f {print $2}' "$status")
    [ "$v" = 0000000000000000 ] || bad+=" $status:$field=$v"
  done
  [ "$(awk '$1 == "NoNewPrivs:" {print $2}' "$status")" = 1 ] || bad+=" $status:NoNewPrivs"
  [ "$(awk '$1 == "Uid:" {print $2 $3 $4 $5}' "$status")" = 65534655346553465534 ] || bad+=" $status:Uid"
done
if [ -z "$bad" ] && [ "$threads" -ge 2 ]; then
  ok "2. all $threads threads: uid 65534, CapEff/CapPrm/CapBnd/CapAmb/CapInh 0, NoNewPrivs 1"
else
  fail "2. privileges after start ($threads threads):$bad"
fi

# 5. docker stop: exit 0 within 5 s, and the kernel no longer has the programs.
t0=$(date +%s%N)
"$docker" stop -t 10 probes >/dev/null
stop_ms=$((($(date +%s%N) - t0) / 1000000))
exit_code=$("$docker" inspect -f '{{.State.ExitCode}}' probes)
left=
for id in $prog_ids; do
  bpftool prog show id "$id" >/dev/null 2>&1 && left+=" $id"
done
if [ "$exit_code" = 0 ] && [ "$stop_ms" -lt 5000 ] && [ -z "$left" ] && [ -n "$prog_ids" ]; then
  ok "5. docker stop: exit 0 after $stop_ms ms, none of the $(wc -w <<<"$prog_ids") BPF programs left"
else
  fail "5. docker stop: exit $exit_code after $stop_ms ms, BPF programs still loaded:[$left] (held before: [$prog_ids])"
fi

# 1b. The capability set for current runtimes (CAP_BPF, CAP_PERFMON), on
# the containerd and runc under this dockerd: what Kubernetes (CRI) and
# Docker >= 23.0 hand the same names to. ctr starts from containerd's
# default set and cannot drop "ALL": drop every default not in ours, then
# check that the container's spec holds exactly ours.
mapfile -t current < <(python3 deploy/container/security.py caps 23.0)
ctr=(ctr --address "$work/exec/containerd/containerd.sock" -n usescope-test)
"$docker" save usescope:local | "${ctr[@]}" images import - >/dev/null
ctr_args=()
for c in CHOWN DAC_OVERRIDE FSETID FOWNER MKNOD NET_RAW SETFCAP NET_BIND_SERVICE SYS_CHROOT KILL AUDIT_WRITE; do
  [[ " ${current[*]} " == *" $c "* ]] || ctr_args+=(--cap-drop "CAP_$c")
done
for c in "${current[@]}"; do ctr_args+=(--cap-add "CAP_$c"); done
"${ctr[@]}" run -d --net-host --read-only "${ctr_args[@]}" \
  --mount type=bind,src=/proc,dst=/host/proc,options=rbind:ro \
  --mount type=bind,src=/sys,dst=/host/sys,options=rbind:ro \
  --mount type=bind,src=/sys/kernel/btf,dst=/sys/kernel/btf,options=rbind:ro \
  docker.io/library/usescope:local ctr-probes /usr/local/bin/usescope --runtime.user=65534 \
  --path.procfs=/host/proc --path.sysfs=/host/sys --web.listen-address=127.0.0.1:19202 >/dev/null
granted=$("${ctr[@]}" containers info ctr-probes | python3 -c '
import json, sys
caps = json.load(sys.stdin)["Spec"]["process"]["capabilities"]["bounding"]
print(" ".join(sorted(c.removeprefix("CAP_") for c in caps)))')
for _ in $(seq 250); do in_netns curl -sf -o /dev/null http://127.0.0.1:19202/metrics && break; sleep 0.02; done
metrics=$(scrape 19202 || true)
up=$(grep -c '^usescope_probe_up{.*} 1$' <<<"$metrics" || true)
down=$(grep -c '^usescope_probe_up{.*} 0$' <<<"$metrics" || true)
ctr_pid=$("${ctr[@]}" tasks ls | awk '$1 == "ctr-probes" {print $2}')
uid_eff=$(awk '$1 == "Uid:" {print $3} $1 == "CapEff:" {print $2}' "/proc/$ctr_pid/status" 2>/dev/null | paste -sd/)
if [ "$granted" = "$(tr ' ' '\n' <<<"${current[*]}" | sort | paste -sd' ')" ] && [ "$up" -ge 1 ] && [ "$down" = 0 ] && [ "$uid_eff" = 65534/0000000000000000 ]; then
  ok "1b. capabilities ${current[*]} on containerd $(ctr --version | awk '{print $3}') + runc $(runc --version | awk 'NR == 1 {print $3}'): $up probes up, then uid 65534 with CapEff 0"
else
  fail "1b. containerd with [$granted]: $up probes up, $down down, uid/CapEff after start $uid_eff"
fi
"${ctr[@]}" tasks kill -s SIGTERM ctr-probes >/dev/null 2>&1
for _ in $(seq 100); do
  "${ctr[@]}" tasks ls | grep -q '^ctr-probes .*RUNNING' || break
  sleep 0.05
done
"${ctr[@]}" tasks rm ctr-probes >/dev/null 2>&1
"${ctr[@]}" containers rm ctr-probes >/dev/null 2>&1

# 3. No capabilities at all: /proc metrics, probes down with the reason.
run_usescope nocaps 19201 --cap-drop ALL
start_and_time_first_scrape nocaps 19201 >/dev/null || true
metrics=$(scrape 19201 || true)
memtotal=$(awk '/^MemTotal:/ {printf "%.0f", $2 * 1024}' /proc/meminfo)
exported=$(awk '$1 == "node_memory_MemTotal_bytes" {print $2}' <<<"$metrics")
up=$(grep -c '^usescope_probe_up{.*} 1$' <<<"$metrics" || true)
down=$(grep -c '^usescope_probe_up{.*} 0$' <<<"$metrics" || true)
reasons=$("$docker" logs nocaps 2>&1 | grep -c 'probe disabled.*Operation not permitted' || true)
if [ "$exported" = "$memtotal" ] && [ "$up" = 0 ] && [ "$down" -ge 1 ] && [ "$reasons" = "$down" ]; then
  ok "3. no capabilities: node_memory_MemTotal_bytes $exported equals /proc/meminfo, $down probes report usescope_probe_up 0, each with its reason logged"
else
  fail "3. no capabilities: MemTotal exported '$exported' vs /proc/meminfo $memtotal, probes up $up, down $down, reasons logged $reasons"
  "$docker" logs nocaps 2>&1 | tail -5
fi
"$docker" rm -f nocaps >/dev/null

# 6. Which workload: two real containers, one busy, one asleep. The
# image's cgroup collector must name the busy one by its container_id as
# the top CPU cgroup, with the CPU the kernel's own cpuacct.usage of the
# container's cgroup shows over the same interval.
"$docker" run -d --name busy --network host usescope-test/minbase:latest \
  sh -c 'while :; do :; done' >/dev/null
"$docker" run -d --name idle --network host usescope-test/minbase:latest sleep 600 >/dev/null
busy_id=$("$docker" inspect -f '{{.Id}}' busy)
idle_id=$("$docker" inspect -f '{{.Id}}' idle)
"$docker" create --name cgroups --network host --pid host --read-only \
  --security-opt no-new-privileges:true --cap-drop ALL \
  -v /proc:/host/proc:ro -v /sys:/host/sys:ro usescope:local \
  --path.procfs=/host/proc --path.sysfs=/host/sys --collector.cgroup \
  --no-probe.runqlat --no-probe.cachestat --no-probe.drops \
  --web.listen-address=127.0.0.1:19203 >/dev/null
start_and_time_first_scrape cgroups 19203 >/dev/null || fail "6. the cgroup container never served /metrics"
cpuacct() { cat "/sys/fs/cgroup/cpuacct/docker/$1/cpuacct.usage" 2>/dev/null || echo -1; }
before=$(scrape 19203 || true); k0=$(cpuacct "$busy_id"); t0=$(date +%s%N)
sleep 5
after=$(scrape 19203 || true); k1=$(cpuacct "$busy_id"); t1=$(date +%s%N)
verdict=$(python3 - "$busy_id" "$idle_id" "$k0" "$k1" "$t0" "$t1" 3<<<"$before" 4<<<"$after" <<'PY'
import re, sys
busy, idle, k0, k1, t0, t1 = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
def usage(text):
    out = {}
    for line in text.splitlines():
        m = re.match(r'usescope_cgroup_cpu_usage_seconds_total\{(.*)\} (\S+)$', line)
        if m:
            cid = re.search(r'container_id="([^"]*)"', m.group(1))
            out[cid.group(1) if cid else ""] = float(m.group(2))
    return out
a, b = usage(open(3).read()), usage(open(4).read())
rates = {c: b[c] - a[c] for c in b if c in a}
if not rates:
    print("FAIL no usescope_cgroup_cpu_usage_seconds_total series"); sys.exit()
top = max(rates, key=rates.get)
kernel = (k1 - k0) / 1e9
ours = rates.get(busy, -1)
ok = top == busy and busy in rates and idle in rates and rates[idle] < 0.05 * ours \
    and k0 >= 0 and abs(ours - kernel) <= 0.05 * kernel + 0.05
print(("ok " if ok else "FAIL ") + f"top CPU cgroup container_id={top[:12]} (busy {busy[:12]}): "
      f"busy {ours:.2f} s, idle {rates.get(idle, -1):.3f} s over {(t1 - t0) / 1e9:.1f} s; "
      f"the kernel's cpuacct.usage of the busy container {kernel:.2f} s")
PY
)
if [[ "$verdict" == ok* ]]; then ok "6. which workload: ${verdict#ok }"; else fail "6. which workload: ${verdict#FAIL }"; fi
"$docker" rm -f busy idle cgroups >/dev/null

# 4. The compose stack, with local stand-ins for the Prometheus and
# Alertmanager images: Debian's binaries of the same servers on the base.
for server in prometheus alertmanager; do
  dir=$work/$server
  mkdir -p "$dir"
  cp "$(command -v "$server" || command -v "prometheus-$server")" "$dir/$server"
  printf 'FROM usescope-test/minbase:latest\nCOPY %s /bin/%s\nWORKDIR /%s\nENTRYPOINT ["/bin/%s"]\n' \
    "$server" "$server" "$server" "$server" >"$dir/Dockerfile"
  "$docker" build -q --network host -t "usescope-test/$server:debian" "$dir" >/dev/null
done
export USESCOPE_PROMETHEUS_IMAGE=usescope-test/prometheus:debian
export USESCOPE_ALERTMANAGER_IMAGE=usescope-test/alertmanager:debian
compose=(docker-compose -f "$repo/docker-compose.yml")
if ! "${compose[@]}" up -d --no-build usescope prometheus alertmanager >"$work/compose.log" 2>&1; then
  fail "4. docker-compose up:"; tail -20 "$work/compose.log"
fi
# Every rule in the shipped files, counted by the YAML, not by Prometheus.
rules_shipped=$(python3 -c '
import sys, yaml
print(sum(len(g["rules"]) for f in sys.argv[1:] for g in yaml.safe_load(open(f))["groups"]))
' alerts/usescope-rules.yml alerts/usescope-alerts.yml)
prom=http://127.0.0.1:9090/api/v1
health= rules_loaded= alertmanagers= samples=
# Prometheus scrapes a new target within one 15 s interval.
for _ in $(seq 60); do
  health=$(in_netns curl -sf "$prom/targets" | python3 -c '
import json, sys
t = [t for t in json.load(sys.stdin)["data"]["activeTargets"] if t["labels"]["job"] == "usescope"]
print(t[0]["health"] if t else "absent")' 2>/dev/null || true)
  [ "$health" = up ] && break
  sleep 1
done
rules_loaded=$(in_netns curl -sf "$prom/rules" | python3 -c '
import json, sys
print(sum(len(g["rules"]) for g in json.load(sys.stdin)["data"]["groups"]))' 2>/dev/null || echo 0)
alertmanagers=$(in_netns curl -sf "$prom/alertmanagers" | python3 -c '
import json, sys
print(",".join(a["url"] for a in json.load(sys.stdin)["data"]["activeAlertmanagers"]))' 2>/dev/null || true)
samples=$(in_netns curl -sf "$prom/query" --data-urlencode 'query=count(usescope_probe_up == 1)' | python3 -c '
import json, sys
r = json.load(sys.stdin)["data"]["result"]
print(r[0]["value"][1] if r else 0)' 2>/dev/null || echo 0)
if [ "$health" = up ] && [ "$rules_loaded" = "$rules_shipped" ] && [[ "$alertmanagers" == *127.0.0.1:9093* ]] && [ "$samples" -ge 1 ]; then
  ok "4. compose: Prometheus scrapes usescope (up), loaded $rules_loaded of $rules_shipped shipped rules, sends to $alertmanagers, sees $samples probes up"
else
  fail "4. compose: usescope target '$health', rules loaded $rules_loaded of $rules_shipped, alertmanagers '$alertmanagers', probes up in Prometheus '$samples'"
  "${compose[@]}" logs --tail 10 2>&1 | tail -30
fi

echo "container: $passed passed, $failed failed (dockerd $engine, image $((size / 1024 / 1024)) MiB)"
[ "$failed" -eq 0 ]
