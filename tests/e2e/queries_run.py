#!/usr/bin/env python3
"""End-to-end: every PromQL expression the project ships runs against a
real Prometheus scraping usescope on this machine's /proc.

- Every target of every dashboard panel (dashboards/*.json), with the
  template variables substituted ($job, $instance, $__rate_interval,
  $__interval, $__range, $cgroup), and the dashboards' variable queries.
  usescope runs with --collector.cgroup, and a busy .service cgroup of the
  test's own, with a CPU quota and memory and pids limits, and synchronous
  writes charged to it, gives the per-cgroup panels and rules data (cgroup
  v1 blkio's own I/O counts stay empty: they need a throttle rule).
- Every recording and alerting rule (alerts/usescope-*.yml), as Prometheus
  itself loaded them (/api/v1/rules), plus each rule's evaluation health.

Every query must parse and run. Those that should have data on any Linux
host must return data; ALLOWED_EMPTY lists, with a reason, the ones that may
be empty, and for most of them a feature query: the expression may be empty
only while the feature query is empty too (probe down, module missing).
Alerting expressions are conditions: empty means "not firing", so for them
only errors count.
"""

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

# Keep the source tree clean: no __pycache__ next to the tests.
sys.dont_write_bytecode = True
import harness as h  # noqa: E402

WARMUP_S = 20
VARS = {
    "$__rate_interval": "1m",
    "$__interval": "1s",
    "$__range": "1m",
}

# (pattern matched against the expression or rule name, why it may be empty,
#  feature query: if given, emptiness is allowed only while it is empty too)
ALLOWED_EMPTY = [
    (r'cpu!=""', "per-CPU run-queue histogram exists only with --probe.runqlat.per-cpu", None),
    (r"usescope_runqueue_latency", "runqlat probe not attached (unprivileged, no BTF, --no-probe.runqlat)",
     'usescope_probe_up{probe="runqlat"} == 1'),
    (r"usescope_page_cache", "cachestat probe not attached", 'usescope_probe_up{probe="cachestat"} == 1'),
    (r"usescope_skb_drops", "drops probe not attached", 'usescope_probe_up{probe="drops"} == 1'),
    (r"usescope_block_io_latency", "biolatency probe not attached", 'usescope_probe_up{probe="biolatency"} == 1'),
    (r"usescope_softirq_", "softirq probe not attached", 'usescope_probe_up{probe="softirq"} == 1'),
    (r"usescope_direct_reclaim|usescope_compaction_stall", "reclaim probe not attached",
     'usescope_probe_up{probe="reclaim"} == 1'),
    (r"usescope_tcp_retransmitted", "tcpretrans probe not attached", 'usescope_probe_up{probe="tcpretrans"} == 1'),
    (r"usescope_tcp_connect_no_local_port", "tcpconnect probe not attached", 'usescope_probe_up{probe="tcpconnect"} == 1'),
    (r"usescope_process_execs|usescope_zombie_processes|zombie_processes:count",
     "tasks probe not attached (off by default, --probe.tasks)", 'usescope_probe_up{probe="tasks"} == 1'),
    (r"usescope_cgroup_block_io_latency", "no selected cgroup did an I/O a second (the recorded p99 leaves those out)",
     'rate(usescope_cgroup_block_io_latency_seconds_count{cgroup!="other"}[5m]) >= 1'),
    (r"usescope_cgroup_process_execs", "execs per cgroup need --probe.tasks --probe.tasks.per-cgroup",
     "usescope_cgroup_process_execs_folded_total"),
    (r"usescope_exited_tasks", "exits probe not attached (off by default, --probe.exits)",
     'usescope_probe_up{probe="exits"} == 1'),
    (r"receive_bytes_per_packet", "no interface received a packet in the window (the ratio keeps only devices that did)",
     "instance_device:node_network_receive_packets:rate5m > 0"),
    (r"usescope_bpf_program", "BPF run-time stats are opt-in (--probe.bpf-stats, needs CAP_SYS_ADMIN)",
     "usescope_bpf_program_runs_total"),
    (r"nf_conntrack", "no nf_conntrack module loaded", "node_nf_conntrack_entries_limit"),
    (r"node_pressure_", "kernel without PSI (CONFIG_PSI)", "node_pressure_cpu_waiting_seconds_total"),
    (r"node_interrupts_total|machine_check", "/proc/interrupts has an MCE row only on x86",
     'node_interrupts_total{type="MCE"}'),
    (r"await|read_time_seconds_total\[[^]]*\]\) / \(rate\(node_disk_reads|write_time_seconds_total\[[^]]*\]\) / \(rate\(node_disk_writes",
     "await is defined only while requests complete; an idle disk has none", None),
    (r"node_scrape_collector_success\{[^}]*\} == 0", "lists failing collectors only: empty when all succeed", None),
    (r"offset 15m", "the baseline starts 15 minutes back; a fresh Prometheus has no data there yet", None),
    (r"^count by \(alertname, instance, job\) \(ALERTS\{", "lists firing pages only: empty on a healthy host", None),
    (r"usescope_cgroup_io_", "cgroup v1 blkio counts a device only once a throttle rule is set on it",
     "usescope_cgroup_io_reads_total"),
    (r"usescope_cgroup_pressure_", "PSI per cgroup needs cgroup v2 (or a hybrid host's unified hierarchy)",
     "usescope_cgroup_pressure_cpu_waiting_seconds_total"),
    (r"usescope_cgroup_(memory_)?oom_kills_total\{[^}]*\}\[1h\]\) > 0", "lists cgroups with OOM kills only", None),
]

# A cgroup the default --collector.cgroup.select selects (a .service), with a
# CPU quota, memory and pids limits, running a busy loop during the whole
# run: data for every per-cgroup panel and rule, the throttling ones too.
# Also in the unified hierarchy (for PSI) where there is one.
E2E_CGROUP = "usescope-e2e-queries.service"
CGROUP_ROOT = Path("/sys/fs/cgroup")
E2E_CGROUP_SETTINGS = {
    # 20% of a CPU in 10 ms periods: a throttled wait every period, so that
    # even a warm-up much shorter than a rule's 5-minute window (rate()
    # divides by the whole window) gives the per-cgroup run-queue rule its
    # one wait a second.
    "cpu": {"cpu.cfs_period_us": 10000, "cpu.cfs_quota_us": 2000},
    "cpuacct": {},
    "memory": {"memory.limit_in_bytes": 256 << 20},
    "pids": {"pids.max": 64},
    # The I/O loop below is charged here, for the per-cgroup block I/O
    # latency rule and panel (--probe.biolatency.per-cgroup).
    "blkio": {},
    "unified": {},
}
# Synchronous 4 KiB writes, over and over to the first MiB of one file on
# the build directory's disk (not tmpfs), from inside the cgroup.
IO_LOOP = ("while :; do dd if=/dev/zero of={} bs=4k count=256 oflag=direct,dsync conv=notrunc "
           "status=none || sleep 1; done")


@contextlib.contextmanager
def busy_cgroup():
    made = []
    busy = writer = None
    try:
        for hierarchy, settings in E2E_CGROUP_SETTINGS.items():
            if not (CGROUP_ROOT / hierarchy / "cgroup.procs").exists():
                continue
            path = CGROUP_ROOT / hierarchy / E2E_CGROUP
            path.mkdir(exist_ok=True)
            made.append(path)
            for f, v in settings.items():
                (path / f).write_text(f"{v}\n")

        def join():
            for path in made:
                (path / "cgroup.procs").write_text(str(os.getpid()))

        busy = subprocess.Popen(["sh", "-c", "while :; do :; done"], preexec_fn=join)
        writer = subprocess.Popen(["sh", "-c", IO_LOOP.format(IO_LOOP_FILE)], preexec_fn=join)
        yield "/" + E2E_CGROUP
    finally:
        for proc in (busy, writer):
            if proc:
                proc.kill()
                proc.wait()
        IO_LOOP_FILE.unlink(missing_ok=True)
        for path in made:
            with contextlib.suppress(OSError):
                path.rmdir()


def substitute(expr, job, instance):
    expr = expr.replace("$job", job).replace("$instance", instance).replace("$cgroup", "/" + E2E_CGROUP)
    for k, v in VARS.items():
        expr = expr.replace(k, v)
    return expr


def dashboard_queries(job, instance):
    out = []
    for path in sorted((h.REPO / "dashboards").glob("*.json")):
        d = json.loads(path.read_text())
        for p in d["panels"]:
            for t in p.get("targets", []):
                label = f"{d['uid']} / {p['title']} / {t['refId']}"
                out.append((label, substitute(t["expr"], job, instance)))
    return out


def variable_queries():
    out = []
    for path in sorted((h.REPO / "dashboards").glob("*.json")):
        d = json.loads(path.read_text())
        for v in d["templating"]["list"]:
            if v["type"] == "query":
                out.append((f"{d['uid']} / ${v['name']}", v["query"]["query"]))
    return out


def allowance(name, expr, prom):
    """None if the query must have data, else the reason it may be empty:
    the first entry of ALLOWED_EMPTY that matches and holds here (the
    tasks probe's execs are present, yet their 15-minute baseline is
    still empty on a fresh Prometheus)."""
    for pattern, reason, feature in ALLOWED_EMPTY:
        if re.search(pattern, expr) or re.search(pattern, name):
            if feature is None:
                return reason
            status, result = h.query(prom, feature)
            if status == "success" and not result:
                return reason + " (feature absent here)"
    return None


# Written and fsynced during the warm-up so that biolatency sees block I/O:
# the build directory is on a disk, where /tmp may be tmpfs.
SYNCED_FILE = h.REPO / "target" / "e2e-queries-run.fsync"
IO_LOOP_FILE = h.REPO / "target" / "e2e-queries-run.cgroup-io"


def make_activity():
    """Things the probes should see during the warm-up: file reads through
    the page cache, a UDP datagram to a closed loopback port, which the
    kernel drops with reason NO_SOCKET (and which is a NET_RX softirq), and
    a write forced to disk (block I/O for biolatency)."""
    data = Path(h.require("prometheus", "prometheus")).read_bytes()
    SYNCED_FILE.parent.mkdir(exist_ok=True)
    with open(SYNCED_FILE, "wb") as f:
        f.write(data[: 1 << 16])
        f.flush()
        os.fsync(f.fileno())
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        port = h.free_port()
        for _ in range(20):
            s.sendto(b"usescope e2e", ("127.0.0.1", port))
    return len(data)


def main():
    r = h.Results("queries_run")
    logdir = h.tmpdir("queries-run")
    cgroup = contextlib.ExitStack()
    try:
        cgroup.enter_context(busy_cgroup())
        # The opt-in probes too, so that their panels and rules are proven.
        usescope = h.start_usescope(
            ["--collector.interrupts", "--collector.cgroup", "--collector.tcpsockets", "--probe.biolatency", "--probe.softirq",
             "--probe.reclaim", "--probe.tcpretrans", "--probe.tcpconnect", "--probe.runqlat.per-cgroup",
             "--probe.tasks", "--probe.tasks.per-cgroup", "--probe.biolatency.per-cgroup"],
            logdir)
        prom = h.start_prometheus(usescope.port, h.RULE_FILES, logdir)
        job, instance = "usescope", f"127.0.0.1:{usescope.port}"
        deadline = time.monotonic() + WARMUP_S
        while time.monotonic() < deadline:
            make_activity()
            time.sleep(2)

        up = h.query(prom, f'up{{job="{job}", instance="{instance}"}} == 1')
        r.check("Prometheus scrapes usescope", up[0] == "success" and up[1], up)

        for name, q in variable_queries():
            m = re.fullmatch(r"label_values\((.+), (\w+)\)", q)
            if not r.check(f"variable {name} is a label_values query", m, q):
                continue
            series = substitute(m.group(1), job, instance)
            status, result = h.query(prom, series)
            values = {s["metric"].get(m.group(2)) for s in result} if status == "success" else set()
            want = {"job": job, "instance": instance, "cgroup": "/" + E2E_CGROUP}[m.group(2)]
            r.check(f"variable {name} offers {want}", want in values, result if status != "success" else values)

        for name, expr in dashboard_queries(job, instance):
            check_query(r, prom, f"dashboard {name}", expr, must_have_data=True)

        rules = h.get_json(prom.url + "/api/v1/rules")["data"]["groups"]
        count = 0
        for group in rules:
            for rule in group["rules"]:
                count += 1
                label = f"{rule['type']} {rule['name']}"
                r.check(f"{label} evaluates healthily", rule.get("health") == "ok",
                        f"health={rule.get('health')} lastError={rule.get('lastError')}")
                check_query(r, prom, label, rule["query"], must_have_data=rule["type"] == "recording")
        in_files = sum(len(re.findall(r"^\s*- (?:record|alert):", f.read_text(), re.M)) for f in h.RULE_FILES)
        r.check(f"Prometheus loaded every rule of the rule files ({in_files})", count == in_files, count)
    except Exception as e:
        r.check("test ran without error", False, repr(e))
    finally:
        cgroup.close()
        SYNCED_FILE.unlink(missing_ok=True)
    return r.finish()


def check_query(r, prom, label, expr, must_have_data):
    status, result = h.query(prom, expr)
    if not r.check(f"{label} runs", status == "success", f"{expr}\n{result}"):
        return
    if not must_have_data or result:
        return
    reason = allowance(label, expr, prom)
    if reason:
        print(f"     (empty, allowed: {reason})")
    r.check(f"{label} returns data", reason is not None, expr)


if __name__ == "__main__":
    sys.exit(main())
