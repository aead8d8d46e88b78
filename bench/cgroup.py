#!/usr/bin/env python3
"""The cgroup collector's cost on this host's real cgroups (root).

  bench/cgroup.py [--usescope PATH] [--counts 10,100,2000] [--scrapes 200]
                  [--gap SECONDS] [--churn-minutes 2]

For each count N it makes N empty cgroups `usescope-bench-PID/cI.scope` in
the v1 cpu, cpuacct and memory hierarchies (under the v2 root on a v2
host). Their `.scope` names match the collector's default selection, so
usescope runs with nothing but `--collector.disable-defaults
--collector.cgroup` (default `--collector.cgroup.max` 200). A second
usescope with no collector at all is scraped in alternation with it, and
the table gives, per scrape:
  - CPU: the daemon's on-CPU time (schedstat of its threads) less the empty
    daemon's, i.e. what the collector adds;
  - the collector's own wall time (node_scrape_collector_duration_seconds);
  - series: sample lines of the per-cgroup families (labels cgroup=...),
    and the page's bytes;
  - the descriptors it keeps (usescope_cgroup_kept_files).
--gap sleeps after every scrape (caches go cold, as between Prometheus
scrapes).

Churn: with 100 cgroups made, one is removed and another made every 0.6 s
(100 a minute) for --churn-minutes, while the daemon is scraped every
second; its RSS, open descriptors, kept files and series are sampled every
10 s, so growth would show.

Everything made is removed at exit, also on failure or Ctrl-C.
"""
import argparse
import http.client
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CG = "/sys/fs/cgroup"


def hierarchies():
    """The directories to make cgroups in: v1 cpu, cpuacct, memory (each
    once), else the v2 root."""
    if os.path.exists(f"{CG}/cgroup.controllers"):
        return [CG]
    out = []
    for c in ("cpu", "cpuacct", "memory"):
        d = os.path.realpath(f"{CG}/{c}")
        if os.path.isdir(d) and d not in out:
            out.append(d)
    if not out:
        sys.exit("no cgroup v1 cpu/cpuacct/memory hierarchy and no v2 root")
    return out


class Tree:
    """`usescope-bench-PID` in each hierarchy and the cgroups in it."""

    def __init__(self):
        self.rel = f"usescope-bench-{os.getpid()}"
        self.roots = hierarchies()
        self.names = []
        for r in self.roots:
            os.mkdir(f"{r}/{self.rel}")

    def add(self, name):
        for r in self.roots:
            os.mkdir(f"{r}/{self.rel}/{name}")
        self.names.append(name)

    def remove(self, name):
        for r in self.roots:
            try:
                os.rmdir(f"{r}/{self.rel}/{name}")
            except FileNotFoundError:
                pass
        self.names.remove(name)

    def resize(self, n):
        while len(self.names) > n:
            self.remove(self.names[-1])
        i = 0
        while len(self.names) < n:
            name = f"c{i}.scope"
            if name not in self.names:
                self.add(name)
            i += 1

    def close(self):
        for name in list(self.names):
            self.remove(name)
        for r in self.roots:
            try:
                os.rmdir(f"{r}/{self.rel}")
            except OSError as e:
                print(f"could not remove {r}/{self.rel}: {e}", file=sys.stderr)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_ns(pid):
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total


def status_kb(pid, field):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(rf"{field}:\s+(\d+)", f.read()).group(1))


def start(binary, extra):
    port = free_port()
    argv = [binary, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
            "--no-probe.runqlat", "--no-probe.cachestat", "--no-probe.drops"] + extra
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.time() + 30
    while time.time() < end:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            scrape(c)
            return p, c
        except OSError:
            time.sleep(0.2)
    p.kill()
    sys.exit(f"{binary} did not answer")


def scrape(conn):
    conn.request("GET", "/metrics")
    r = conn.getresponse()
    return r.read().decode()


def value(text, series):
    m = re.search(rf"^{re.escape(series)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def series(text):
    return sum(1 for line in text.splitlines() if line.startswith("usescope_cgroup_") and 'cgroup="' in line)


def measure(a, tree, n):
    tree.resize(n)
    cg, cgc = start(a.usescope, ["--collector.cgroup"])
    empty, ec = start(a.usescope, [])
    try:
        for _ in range(5):
            scrape(cgc), scrape(ec)
        durations = []
        c0, e0 = cpu_ns(cg.pid), cpu_ns(empty.pid)
        scrapes = a.scrapes if n < 1000 else max(20, a.scrapes // 5)
        for _ in range(scrapes):
            text = scrape(cgc)
            durations.append(value(text, 'node_scrape_collector_duration_seconds{collector="cgroup"}'))
            if a.gap:
                time.sleep(a.gap)
            scrape(ec)
            if a.gap:
                time.sleep(a.gap)
        c1, e1 = cpu_ns(cg.pid), cpu_ns(empty.pid)
        assert value(text, 'node_scrape_collector_success{collector="cgroup"}') == 1.0, text[-2000:]
        return {
            "n": n,
            "cpu_us": ((c1 - c0) - (e1 - e0)) / scrapes / 1000,
            "wall_us": statistics.mean(durations) * 1e6,
            "series": series(text),
            "seen": value(text, "usescope_cgroup_seen"),
            "folded": value(text, "usescope_cgroup_folded"),
            "kept": value(text, "usescope_cgroup_kept_files"),
            "bytes": len(text),
            "rss_mb": status_kb(cg.pid, "VmRSS") / 1024,
            "scrapes": scrapes,
        }
    finally:
        for p in (cg, empty):
            p.terminate()
            p.wait(timeout=10)


def churn(a, tree):
    tree.resize(100)
    cg, cgc = start(a.usescope, ["--collector.cgroup"])
    samples = []
    try:
        next_name = 100000
        end = time.time() + a.churn_minutes * 60
        last_change = last_sample = 0.0
        made = removed = 0
        while time.time() < end:
            now = time.time()
            if now - last_change >= 0.6:
                tree.remove(tree.names[0])
                tree.add(f"c{next_name}.scope")
                next_name += 1
                made += 1
                removed += 1
                last_change = now
            text = scrape(cgc)
            assert value(text, 'node_scrape_collector_success{collector="cgroup"}') == 1.0
            if now - last_sample >= 10:
                samples.append((round(now - end + a.churn_minutes * 60), status_kb(cg.pid, "VmRSS") / 1024,
                                len(os.listdir(f"/proc/{cg.pid}/fd")), value(text, "usescope_cgroup_kept_files"),
                                series(text), value(text, "usescope_cgroup_seen")))
                last_sample = now
            time.sleep(max(0.0, 1.0 - (time.time() - now)))
        return samples, made, removed
    finally:
        cg.terminate()
        cg.wait(timeout=10)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--usescope", default=os.path.join(ROOT, "target/release/usescope"))
    ap.add_argument("--counts", default="10,100,2000")
    ap.add_argument("--scrapes", type=int, default=200)
    ap.add_argument("--gap", type=float, default=0.0)
    ap.add_argument("--churn-minutes", type=float, default=2.0)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("root is needed to make cgroups")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    tree = Tree()
    try:
        print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.uname().release}, {os.cpu_count()} CPUs; "
              f"cgroups in {', '.join(tree.roots)}; gap {a.gap} s")
        print("| cgroups | CPU per scrape (added) | collector wall time | series | seen / folded | kept files | page bytes | RSS | scrapes |")
        print("|---:|---:|---:|---:|---|---:|---:|---:|---:|")
        for n in [int(x) for x in a.counts.split(",")]:
            r = measure(a, tree, n)
            print(f"| {r['n']} | {r['cpu_us']:.0f} µs | {r['wall_us']:.0f} µs | {r['series']} | "
                  f"{r['seen']:.0f} / {r['folded']:.0f} | {r['kept']:.0f} | {r['bytes']} | {r['rss_mb']:.1f} MB | {r['scrapes']} |",
                  flush=True)
        if a.churn_minutes > 0:
            samples, made, removed = churn(a, tree)
            print()
            print(f"churn: {made} cgroups made and {removed} removed in {a.churn_minutes} min, scraped every second")
            print("| s | RSS | open fds | kept files | series | seen |")
            print("|---:|---:|---:|---:|---:|---:|")
            for s in samples:
                print(f"| {s[0]} | {s[1]:.1f} MB | {s[2]} | {s[3]:.0f} | {s[4]} | {s[5]:.0f} |")
    finally:
        tree.close()


if __name__ == "__main__":
    main()
