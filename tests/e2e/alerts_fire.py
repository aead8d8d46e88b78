#!/usr/bin/env python3
"""End-to-end: the real alerting rules fire through real Prometheus and
Alertmanager on data that usescope reads from a /proc tree.

usescope runs on a copy of exporter/tests/fixtures/proc whose counters this
test advances continuously:
  - /proc/stat: CPU 1 spends 90% of its time in iowait, CPU 0 is idle
    (the per-CPU case the average would hide);
  - /proc/diskstats: vda is busy 95% of the time with 2 requests queued, so
    the iowait coincides with disk saturation and pages;
  - nf_conntrack_count: 95% of nf_conntrack_max.
Prometheus (Debian's `prometheus`) scrapes it every second and evaluates
alerts/usescope-rules.yml and a copy of alerts/usescope-alerts.yml whose
`for:` durations are shortened to 5s; the test asserts that the copy differs
from the original only in `for:` lines. Alertmanager (Debian's
`prometheus-alertmanager`) runs alerts/alertmanager.yml unchanged, and the
test reads /api/v2/alerts until ConntrackTableFull and HighIOWait arrive.

The rules use 5-minute rate windows. So that they see full windows within
the test's two minutes, the same counter model is backfilled 6 minutes into
the past with `promtool tsdb create-blocks-from openmetrics` before
Prometheus starts; the live scrapes continue those exact series.
"""

import re
import shutil
import subprocess
import sys
import threading
import time

# Keep the source tree clean: no __pycache__ next to the tests.
sys.dont_write_bytecode = True
import harness as h  # noqa: E402

FOR_SHORT = "5s"
HISTORY_S = 360
DEADLINE_S = 80
IOWAIT_SHARE = 0.90  # CPU 1
DISK_UTIL = 0.95  # vda io_time seconds per second
DISK_QUEUE = 2.0  # vda weighted io_time seconds per second (aqu-sz)
CONNTRACK_USE = 0.95


def shortened_alert_rules(dest):
    """Writes the alert rules with every `for:` set to FOR_SHORT and returns
    the lines that differ, as (original, copy) pairs."""
    original = (h.ALERTS / "usescope-alerts.yml").read_text().splitlines(keepends=True)
    pattern = re.compile(r"^(\s*for:\s*)\S+(\s*)$")
    copy = [pattern.sub(lambda m: m.group(1) + FOR_SHORT + m.group(2), line) for line in original]
    dest.write_text("".join(copy))
    return [(a, b) for a, b in zip(original, copy) if a != b], len(original) == len(copy)


class Model:
    """Counter values as a function of wall-clock time, shared by the
    backfilled history and the live /proc files so the series join up."""

    def __init__(self, proc):
        self.proc = proc
        self.t0 = time.time() - HISTORY_S - 60
        self.stat_lines = (proc / "stat").read_text().splitlines()
        self.cpu = {}
        for line in self.stat_lines:
            f = line.split()
            if f and re.fullmatch(r"cpu\d+", f[0]):
                self.cpu[f[0]] = [int(x) for x in f[1:]]
        self.disk_lines = (proc / "diskstats").read_text().splitlines()
        vda = next(l.split() for l in self.disk_lines if len(l.split()) > 2 and l.split()[2] == "vda")
        self.vda = [int(x) for x in vda[3:]]

    # CPU fields: user nice system idle iowait irq softirq steal guest guest_nice (USER_HZ = 100).
    def cpu_ticks(self, cpu, t):
        base = list(self.cpu[cpu])
        dt = t - self.t0
        if cpu == "cpu1":
            base[4] += round(100 * IOWAIT_SHARE * dt)
            base[3] += round(100 * (1 - IOWAIT_SHARE) * dt)
        else:
            base[3] += round(100 * dt)
        return base

    # diskstats fields after the name: reads rmerged rsect rtime writes
    # wmerged wsect wtime in_flight io_ticks weighted ... (times in ms).
    def vda_fields(self, t):
        f = list(self.vda)
        dt = t - self.t0
        f[4] += round(200 * dt)
        f[6] += round(200 * 8 * dt)
        f[7] += round(1000 * DISK_QUEUE * dt)
        f[8] = 2
        f[9] += round(1000 * DISK_UTIL * dt)
        f[10] += round(1000 * DISK_QUEUE * dt)
        return f

    def write(self, t):
        cpus = {c: self.cpu_ticks(c, t) for c in self.cpu}
        total = [sum(v[i] for v in cpus.values()) for i in range(len(next(iter(cpus.values()))))]
        out = []
        for line in self.stat_lines:
            name = line.split()[0] if line.split() else ""
            if name == "cpu":
                out.append("cpu  " + " ".join(map(str, total)))
            elif name in cpus:
                out.append(name + " " + " ".join(map(str, cpus[name])))
            else:
                out.append(line)
        replace(self.proc / "stat", "\n".join(out) + "\n")
        disk = []
        for line in self.disk_lines:
            f = line.split()
            if len(f) > 2 and f[2] == "vda":
                disk.append(f"{f[0]:>4} {f[1]:>7} vda " + " ".join(map(str, self.vda_fields(t))))
            else:
                disk.append(line)
        replace(self.proc / "diskstats", "\n".join(disk) + "\n")

    def openmetrics(self, instance, start, end, step):
        """The history Prometheus would have scraped, for the series the
        iowait alerts read."""
        labels = f'instance="{instance}",job="usescope"'
        fams = {"cpu": [], "io": [], "weighted": []}
        t = start
        while t <= end:
            for cpu in self.cpu:
                n = cpu[3:]
                v = self.cpu_ticks(cpu, t)[4] / 100
                fams["cpu"].append(f'node_cpu_seconds_total{{cpu="{n}",mode="iowait",{labels}}} {v} {t:.3f}')
            f = self.vda_fields(t)
            fams["io"].append(f'node_disk_io_time_seconds_total{{device="vda",{labels}}} {f[9] / 1000} {t:.3f}')
            fams["weighted"].append(f'node_disk_io_time_weighted_seconds_total{{device="vda",{labels}}} {f[10] / 1000} {t:.3f}')
            t += step
        # OpenMetrics wants each family's samples together, each series in time order.
        lines = []
        for samples in fams.values():
            lines += sorted(samples, key=lambda s: (s.split(" ")[0], float(s.split(" ")[2])))
        return "\n".join(lines) + "\n# EOF\n"


def replace(path, text):
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def advance(model, stop):
    while not stop.is_set():
        model.write(time.time())
        stop.wait(0.5)


def backfill(model, instance, storage, logdir):
    promtool = h.require("promtool", "prometheus")
    now = time.time()
    om = logdir / "history.om"
    om.write_text(model.openmetrics(instance, now - HISTORY_S, now - 2, 5.0))
    out = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(storage)],
        capture_output=True,
        text=True,
    )
    return out.returncode == 0, out.stdout + out.stderr


def am_alerts(am):
    return h.get_json(am.url + "/api/v2/alerts")


def find(alerts, name, **labels):
    return [
        a
        for a in alerts
        if a["labels"].get("alertname") == name and all(a["labels"].get(k) == v for k, v in labels.items())
    ]


def main():
    r = h.Results("alerts_fire")
    started = time.monotonic()
    work = h.tmpdir("alerts-fire")
    logdir = work

    alerts_copy = work / "usescope-alerts.yml"
    changed, same_length = shortened_alert_rules(alerts_copy)
    for_line = re.compile(r"^\s*for:\s*\S+\s*$")
    r.check(
        "the rule copy differs from alerts/usescope-alerts.yml only in for: lines",
        same_length and changed and all(for_line.match(a) and for_line.match(b) for a, b in changed),
        changed,
    )

    proc = work / "proc"
    shutil.copytree(h.REPO / "exporter/tests/fixtures/proc", proc)
    limit = int((proc / "sys/net/netfilter/nf_conntrack_max").read_text())
    (proc / "sys/net/netfilter/nf_conntrack_count").write_text(f"{int(limit * CONNTRACK_USE)}\n")
    model = Model(proc)
    model.write(time.time())
    stop = threading.Event()
    threading.Thread(target=advance, args=(model, stop), daemon=True).start()

    try:
        usescope = h.start_usescope([f"--path.procfs={proc}", "--no-probe.runqlat", "--no-probe.cachestat", "--no-probe.drops"], logdir)
        instance = f"127.0.0.1:{usescope.port}"
        storage = h.tmpdir("prometheus-data")
        ok, out = backfill(model, instance, storage, logdir)
        if not r.check("6 minutes of history backfilled with promtool", ok, out):
            return r.finish()
        am = h.start_alertmanager(h.ALERTS / "alertmanager.yml", logdir)
        prom = h.start_prometheus(usescope.port, [h.ALERTS / "usescope-rules.yml", alerts_copy], logdir, am.port, storage)

        def arrived():
            alerts = am_alerts(am)
            if find(alerts, "ConntrackTableFull") and find(alerts, "HighIOWait"):
                return alerts
            return None

        remaining = DEADLINE_S - (time.monotonic() - started)
        alerts = h.wait_for("alerts at Alertmanager", arrived, timeout=max(10, remaining))
        if not r.check("ConntrackTableFull and HighIOWait reach Alertmanager's /api/v2/alerts", alerts,
                       f"after {time.monotonic() - started:.0f}s; Alertmanager has: "
                       f"{sorted({a['labels']['alertname'] for a in am_alerts(am)})}\n"
                       f"Prometheus ALERTS: {h.query(prom, 'ALERTS')}\nprometheus log:\n{prom.log_tail(10)}"):
            return r.finish()
        # One more evaluation round, so siblings that fire in the same second
        # (NearlyFull) are there too.
        time.sleep(3)
        alerts = am_alerts(am)

        full = find(alerts, "ConntrackTableFull", instance=instance, signal="table_usage")
        r.check("ConntrackTableFull has severity=page and routes to the page receiver",
                full and full[0]["labels"].get("severity") == "page"
                and [x["name"] for x in full[0]["receivers"]] == ["page"], full)
        r.check("ConntrackTableFull's description renders the use as 95%",
                full and "reached 95% full" in full[0]["annotations"].get("description", ""), full)
        r.check("ConntrackTableFull links its runbook section",
                full and full[0]["annotations"].get("runbook_url", "").endswith("docs/runbooks.md#conntracktablefull"), full)
        nearly = find(alerts, "ConntrackTableNearlyFull", instance=instance)
        r.check("ConntrackTableNearlyFull is inhibited by ConntrackTableFull",
                nearly and nearly[0]["status"]["state"] == "suppressed" and nearly[0]["status"]["inhibitedBy"], nearly)

        iowait = find(alerts, "HighIOWait", instance=instance)
        r.check("HighIOWait fires for CPU 1 only (the per-CPU signal, not the average)",
                [a["labels"].get("cpu") for a in iowait] == ["1"], [a["labels"] for a in iowait])
        desc = iowait[0]["annotations"].get("description", "") if iowait else ""
        m = re.search(r"CPU 1 on \S+ spent ([\d.]+)% of the last 5 minutes waiting for I/O", desc)
        r.check("HighIOWait's description renders CPU 1's iowait near 90%",
                m and 80 <= float(m.group(1)) <= 100, desc)
        r.check("HighIOWait has severity=page and routes to the page receiver",
                iowait and iowait[0]["labels"].get("severity") == "page"
                and [x["name"] for x in iowait[0]["receivers"]] == ["page"], iowait)
        r.check("HighIOWaitWithoutDiskSaturation does not fire while the disk is saturated",
                not find(alerts, "HighIOWaitWithoutDiskSaturation"), find(alerts, "HighIOWaitWithoutDiskSaturation"))
        r.check("the whole test stayed within two minutes", time.monotonic() - started < 120,
                f"{time.monotonic() - started:.0f}s")
    except Exception as e:  # a start-up failure is a test failure, with its log
        r.check("test ran without error", False, repr(e))
    finally:
        stop.set()
    return r.finish()


if __name__ == "__main__":
    sys.exit(main())
