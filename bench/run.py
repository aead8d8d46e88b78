#!/usr/bin/env python3
"""usescope benchmark: one command, one run, every number at once, so the
ratios hold on a noisy machine.

  bench/run.py [--rounds 2000] [--quick] [--out bench/out/report.md]

1. usescope vs node_exporter, same sources, both on 127.0.0.1, scraped
   alternately (sequential) and then with 40 concurrent clients (wrk):
   CPU per scrape (the process's own on-CPU time from /proc/PID/schedstat,
   cross-checked with utime+stime from /proc/PID/stat), latency p50/p99,
   peak RSS (VmHWM), bytes per scrape.
2. The floor: bench/floor-reader reads the same /proc files and nothing else.
3. Scaling: usescope on synthetic trees of 2/64/256/1024 CPUs and
   1/100/1000 disks; CPU per scrape, per-CPU and per-disk slopes.
4. Peak RSS with the eBPF probes attached (needs root).
5. eBPF per-event overhead: runs bench/probe-overhead/run.sh if present (root).

Needs: cargo, wrk, python3; installs node_exporter with `go install` if missing.
"""
import argparse
import http.client
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USESCOPE = os.path.join(ROOT, "target/release/usescope")
FLOOR = os.path.join(ROOT, "target/release/floor-reader")
GEN = os.path.join(ROOT, "exporter/tests/fixtures/gen_synthetic.py")
LUA = os.path.join(ROOT, "tests/load/count_status.lua")
# The same sources on both sides (node_exporter's names → usescope's).
NE_COLLECTORS = ["cpu", "stat", "softirqs", "zoneinfo", "diskstats", "conntrack", "loadavg", "meminfo",
                 "vmstat", "pressure", "netstat", "sockstat", "netdev", "softnet"]
US_COLLECTORS = ["stat", "softirqs", "zoneinfo", "diskstats", "conntrack", "loadavg", "meminfo",
                 "vmstat", "pressure", "netstat", "sockstat", "netdev", "softnet"]
NO_PROBES = ["--no-probe.runqlat", "--no-probe.cachestat", "--no-probe.drops"]
# The same output too: node_exporter's zoneinfo writes every field of
# every zone, usescope's only with this flag.
US_SAME_OUTPUT = ["--collector.zoneinfo.all"]


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw).stdout


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def oncpu_ns(pid):
    """Precise on-CPU time summed over the process's live threads (first
    field of /proc/PID/task/TID/schedstat). Threads that exit take their
    time with them, so the utime+stime cross-check (which keeps it, at
    clock-tick resolution) is reported next to it."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


def ticks_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def vm(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


class Exporter:
    def __init__(self, name, argv, port):
        self.name, self.port = name, port
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.conn = None
        end = time.time() + 30
        while time.time() < end:
            try:
                self.scrape()
                return
            except OSError:
                self.conn = None
                time.sleep(0.1)
        raise SystemExit(f"{name} did not start")

    def scrape(self, gzip=False):
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        self.conn.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"} if gzip else {})
        r = self.conn.getresponse()
        body = r.read()
        if r.status != 200:
            raise SystemExit(f"{self.name}: HTTP {r.status}")
        return body

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


def pct(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def sequential(exporters, rounds, gzip=False):
    """Alternate scrapes; per exporter: CPU per scrape and latency percentiles."""
    lat = {e.name: [] for e in exporters}
    size = {}
    cpu0 = {e.name: (oncpu_ns(e.proc.pid), ticks_s(e.proc.pid)) for e in exporters}
    for _ in range(rounds):
        for e in exporters:
            t = time.perf_counter()
            body = e.scrape(gzip)
            lat[e.name].append(time.perf_counter() - t)
            size[e.name] = len(body)
    out = {}
    for e in exporters:
        ns0, t0 = cpu0[e.name]
        out[e.name] = {
            "cpu_us": (oncpu_ns(e.proc.pid) - ns0) / rounds / 1e3,
            "cpu_us_ticks": (ticks_s(e.proc.pid) - t0) / rounds * 1e6,
            "p50_ms": pct(lat[e.name], 50) * 1e3,
            "p99_ms": pct(lat[e.name], 99) * 1e3,
            "bytes": size[e.name],
        }
    return out


def concurrent(e, clients, seconds):
    ns0 = oncpu_ns(e.proc.pid)
    out = sh(["wrk", "-t2", f"-c{clients}", f"-d{seconds}s", "--timeout", "10s", "-s", LUA,
              f"http://127.0.0.1:{e.port}/metrics"])
    codes = {int(c): int(n) for c, n in re.findall(r"^status (\d+) (\d+)$", out, re.M)}
    errs = sum(int(v) for v in re.findall(r"=(\d+)", re.search(r"^errors .*$", out, re.M).group(0)))
    ok = codes.get(200, 0)
    return {
        "requests": sum(codes.values()),
        "ok": ok,
        "non200": sum(n for c, n in codes.items() if c != 200),
        "socket_errors": errs,
        "p50_ms": int(re.search(r"latency_p50_us (\d+)", out).group(1)) / 1e3,
        "p99_ms": int(re.search(r"latency_p99_us (\d+)", out).group(1)) / 1e3,
        "cpu_us": (oncpu_ns(e.proc.pid) - ns0) / max(ok, 1) / 1e3,
        "rps": sum(codes.values()) / seconds,
    }


def node_exporter_path():
    gopath = subprocess.run(["go", "env", "GOPATH"], capture_output=True, text=True).stdout.strip() or os.path.expanduser("~/go")
    path = os.path.join(gopath, "bin", "node_exporter")
    if not os.path.exists(path):
        print("installing node_exporter with go install ...", file=sys.stderr)
        sh(["go", "install", "github.com/prometheus/node_exporter@latest"])
    return path


def floor(iterations):
    res = {}
    for mode, extra in (("kept fds + pread", []), ("reopen each file", ["--reopen"])):
        line = sh([FLOOR] + extra + [str(iterations)])
        res[mode] = {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", line)}
    return res


def scaling(rounds):
    rows = []
    tmp = tempfile.mkdtemp(prefix="usescope-scale-")
    try:
        for cpus, disks in [(2, 1), (64, 1), (256, 1), (1024, 1), (2, 100), (2, 1000), (256, 1000), (1024, 1000)]:
            tree = os.path.join(tmp, f"c{cpus}d{disks}")
            sh([sys.executable, GEN, tree, "--cpus", str(cpus), "--disks", str(disks), "--nodes", "4" if cpus >= 64 else "1"])
            port = free_port()
            e = Exporter("usescope", [USESCOPE, f"--web.listen-address=127.0.0.1:{port}", f"--path.procfs={tree}"] + NO_PROBES, port)
            for _ in range(20):
                e.scrape()
            r = sequential([e], rounds)["usescope"]
            e.stop()
            rows.append({"cpus": cpus, "disks": disks, **r})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


def slope(points):
    """Least-squares slope of (x, y) points."""
    xs, ys = zip(*points)
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)


def probes_rss(rounds):
    if os.geteuid() != 0:
        return None
    port = free_port()
    e = Exporter("usescope+probes", [USESCOPE, f"--web.listen-address=127.0.0.1:{port}"], port)
    body = e.scrape().decode()
    up = re.findall(r'usescope_probe_up\{probe="(\w+)"\} (\d)', body)
    for _ in range(rounds):
        e.scrape()
    r = {"hwm_kb": vm(e.proc.pid, "VmHWM"), "rss_kb": vm(e.proc.pid, "VmRSS"), "probes_up": up,
         "loader_kb": loader_peak_kb()}
    e.stop()
    return r


def loader_peak_kb():
    """Peak RSS of the probe loader process, which the daemon runs once at
    start-up. Run here on its own, in a fresh interpreter so that
    RUSAGE_CHILDREN holds only it; with no daemon socket on its stdin it
    loads and attaches everything, fails to hand over, and exits (detaching)."""
    code = ("import resource, subprocess, sys; "
            "subprocess.run([sys.argv[1], '--internal.probe-loader'], stdin=subprocess.DEVNULL, "
            "stderr=subprocess.DEVNULL); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    return int(sh([sys.executable, "-c", code, USESCOPE]).strip())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--quick", action="store_true", help="fewer rounds and shorter concurrent runs")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/out/report.md"))
    a = ap.parse_args()
    rounds = 300 if a.quick else a.rounds
    conc_s = 5 if a.quick else 15
    sh(["scripts/build-release.sh", "-q", "-p", "floor-reader"], cwd=ROOT)
    ne_bin = node_exporter_path()
    ne_version = sh([ne_bin, "--version"]).splitlines()[0] if True else ""
    mod = subprocess.run(["go", "version", "-m", ne_bin], capture_output=True, text=True).stdout
    m = re.search(r"mod\s+github.com/prometheus/node_exporter\s+(\S+)", mod)
    ne_version = m.group(1) if m else ne_version

    up, np_ = free_port(), free_port()
    us = Exporter("usescope", [USESCOPE, f"--web.listen-address=127.0.0.1:{up}", "--collector.disable-defaults"]
                  + [f"--collector.{c}" for c in US_COLLECTORS] + US_SAME_OUTPUT + NO_PROBES, up)
    ne = Exporter("node_exporter", [ne_bin, f"--web.listen-address=127.0.0.1:{np_}", "--collector.disable-defaults"]
                  + [f"--collector.{c}" for c in NE_COLLECTORS], np_)
    try:
        for _ in range(50):
            us.scrape()
            ne.scrape()
        seq = sequential([us, ne], rounds)
        seq_gz = sequential([us, ne], rounds // 2, gzip=True)
        conc = {e.name: concurrent(e, 40, conc_s) for e in (us, ne)}
        hwm = {e.name: vm(e.proc.pid, "VmHWM") for e in (us, ne)}
    finally:
        us.stop()
        ne.stop()
    fl = floor(rounds * 2)
    scale = scaling(max(100, rounds // 10))
    prss = probes_rss(200)
    probe_report = None
    probe_script = os.path.join(ROOT, "bench/probe-overhead/run.sh")
    if os.geteuid() == 0 and os.path.exists(probe_script):
        probe_report = subprocess.run([probe_script], capture_output=True, text=True, cwd=ROOT).stdout

    u, n = seq["usescope"], seq["node_exporter"]
    kept = fl["kept fds + pread"]["cpu_us"]
    lines = []
    w = lines.append
    w(f"## Run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    w("")
    w(f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, kernel {platform.release()}; "
      f"node_exporter {ne_version}; command: `bench/run.py{' --quick' if a.quick else ''}`; "
      f"{rounds} alternating sequential scrapes per exporter, then {conc_s} s of 40 concurrent clients (wrk).")
    w("")
    w("### usescope against node_exporter (same 13 sources, probes off)")
    w("")
    w("| | usescope | node_exporter | ratio |")
    w("|---|---|---|---|")
    w(f"| CPU per scrape, sequential (schedstat) | {u['cpu_us']:.0f} µs | {n['cpu_us']:.0f} µs | 1/{n['cpu_us'] / u['cpu_us']:.1f} |")
    w(f"| CPU per scrape, sequential (utime+stime) | {u['cpu_us_ticks']:.0f} µs | {n['cpu_us_ticks']:.0f} µs | |")
    w(f"| latency p50 / p99, one client | {u['p50_ms']:.2f} / {u['p99_ms']:.2f} ms | {n['p50_ms']:.2f} / {n['p99_ms']:.2f} ms | |")
    ug, ng = seq_gz["usescope"], seq_gz["node_exporter"]
    w(f"| CPU per scrape, gzip as Prometheus asks (schedstat) | {ug['cpu_us']:.0f} µs | {ng['cpu_us']:.0f} µs | 1/{ng['cpu_us'] / ug['cpu_us']:.1f} |")
    w(f"| latency p50 / p99, gzip | {ug['p50_ms']:.2f} / {ug['p99_ms']:.2f} ms | {ng['p50_ms']:.2f} / {ng['p99_ms']:.2f} ms | |")
    cu, cn = conc["usescope"], conc["node_exporter"]
    w(f"| 40 clients: requests/s | {cu['rps']:.0f} | {cn['rps']:.0f} | |")
    w(f"| 40 clients: p50 / p99 | {cu['p50_ms']:.2f} / {cu['p99_ms']:.2f} ms | {cn['p50_ms']:.2f} / {cn['p99_ms']:.2f} ms | |")
    w(f"| 40 clients: non-200 / socket errors | {cu['non200']} / {cu['socket_errors']} | {cn['non200']} / {cn['socket_errors']} | |")
    w(f"| 40 clients: CPU per successful scrape | {cu['cpu_us']:.0f} µs | {cn['cpu_us']:.0f} µs | |")
    w(f"| peak RSS (VmHWM) | {hwm['usescope'] / 1024:.1f} MB | {hwm['node_exporter'] / 1024:.1f} MB | |")
    w(f"| bytes per scrape | {u['bytes']} | {n['bytes']} | |")
    w("")
    w("### The floor (bench/floor-reader: read the same files, nothing else)")
    w("")
    w("| mode | CPU per iteration | of which system |")
    w("|---|---|---|")
    for mode, r in fl.items():
        w(f"| {mode} | {r['cpu_us']:.0f} µs | {r['system_us']:.0f} µs |")
    w("")
    w(f"usescope CPU per scrape / floor (kept fds): **{u['cpu_us'] / kept:.2f}×** (target ≤ 2×). "
      f"usescope / node_exporter: **1/{n['cpu_us'] / u['cpu_us']:.1f}** (target ≤ 1/10).")
    w("")
    w("### Scaling (synthetic trees, all default collectors, CPU per scrape)")
    w("")
    w("| CPUs | disks | CPU per scrape | bytes |")
    w("|---|---|---|---|")
    for r in scale:
        w(f"| {r['cpus']} | {r['disks']} | {r['cpu_us']:.0f} µs | {r['bytes']} |")
    per_cpu = slope([(r["cpus"], r["cpu_us"]) for r in scale if r["disks"] == 1])
    per_disk = slope([(r["disks"], r["cpu_us"]) for r in scale if r["cpus"] == 2])
    c = {r["cpus"]: r["cpu_us"] for r in scale if r["disks"] == 1}
    lo = (c[256] - c[2]) / 254
    hi = (c[1024] - c[256]) / 768
    w("")
    w(f"Slopes: **{per_cpu:.2f} µs per CPU**, **{per_disk:.3f} µs per disk**. "
      f"Per-CPU cost from 2→256 CPUs {lo:.2f} µs, from 256→1024 {hi:.2f} µs "
      f"(ratio {hi / lo if lo else float('nan'):.2f}; a quadratic step would show as a ratio well above 1).")
    w("")
    if prss:
        w(f"### With the eBPF probes attached (root)\n\nprobes up: {prss['probes_up']}; "
          f"daemon peak RSS after 200 scrapes: **{prss['hwm_kb'] / 1024:.1f} MB** (VmHWM), RSS {prss['rss_kb'] / 1024:.1f} MB (target ≤ 10 MB). "
          f"The probe loader process, which lives about 0.1 s at start-up, peaks at {prss['loader_kb'] / 1024:.1f} MB "
          "(aya parsing the kernel BTF; see docs/probes.md).")
        w("")
    if probe_report:
        w("### eBPF per-event overhead (bench/probe-overhead/run.sh)\n")
        w(probe_report.strip())
        w("")
    report = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        f.write(report)
    print(report)


if __name__ == "__main__":
    main()
