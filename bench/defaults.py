#!/usr/bin/env python3
"""usescope against node_exporter, each with its DEFAULT collector set, on
this host: what an operator who swaps one for the other pays.

  bench/defaults.py [--rounds 500] [--gap SECONDS] [--block N] [--client prometheus|plain]
                    [--usescope PATH] [--node-exporter PATH]

Each scrape sends what Prometheus sends (--client prometheus, the default:
OpenMetrics offered first, gzip asked for; each exporter answers as it
would answer Prometheus), or no Accept and Accept-Encoding headers at all
(--client plain: uncompressed text, the method of the sections of
BENCHMARKS.md before 2026-11-24 13:17 UTC).

Both listen on 127.0.0.1 (usescope's probes off, so the comparison is /proc
and /sys against /proc and /sys). Each round scrapes usescope once, then
node_exporter once, on one keep-alive connection each; with --gap, the
client sleeps after every scrape, so each scrape of either exporter
starts with caches that other work has had time to evict, as a scrape
every 15 s in production does (the default, back to back, measures each
exporter with its caches warmer). Before 2026-11-24 20:10 UTC the sleep
came only after node_exporter's scrape, so node_exporter's scrape began
right after usescope's, with the kernel's side of the same /proc files
still warm.
With --block N, each exporter is scraped N times in a row, as if it ran
alone; its caches then hold only its own work.
Reported:
  - CPU per scrape: the process's own on-CPU time from
    /proc/PID/task/*/schedstat over the rounds, divided by the rounds;
  - peak RSS (VmHWM) after the rounds;
  - usescope's per-collector cost: the mean of its own
    node_scrape_collector_duration_seconds over the rounds (wall time
    inside the collector, for the new collectors one by one).
"""
import argparse
import gzip
import http.client
import os
import re
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def hwm_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmHWM:\s+(\d+)", f.read()).group(1))


def start(argv, port):
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.time() + 30
    while time.time() < end:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            scrape(c)
            return p, c
        except OSError:
            time.sleep(0.2)
    sys.exit(f"{argv[0]} did not answer")


# What Prometheus sends on every scrape (captured from the Debian package's
# Prometheus 2.42 scraping a listener here): it offers OpenMetrics first and
# asks for gzip. --client plain sends neither, as before 2026-11-24.
PROMETHEUS_HEADERS = {
    "User-Agent": "Prometheus/2.42.0+ds",
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
              "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
    "X-Prometheus-Scrape-Timeout-Seconds": "10",
}
HEADERS = PROMETHEUS_HEADERS


def scrape(conn):
    """The body as text, and the bytes that went over the wire."""
    conn.request("GET", "/metrics", headers=HEADERS)
    resp = conn.getresponse()
    wire = resp.read()
    body = gzip.decompress(wire) if resp.getheader("Content-Encoding") == "gzip" else wire
    return body.decode(), len(wire)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=500)
    ap.add_argument("--gap", type=float, default=0.0, help="seconds to sleep after each round")
    ap.add_argument("--block", type=int, default=0,
                    help="scrape each exporter this many times in a row (0: alternate every scrape)")
    ap.add_argument("--usescope", default=os.path.join(ROOT, "target/release/usescope"))
    ap.add_argument("--node-exporter", default=os.path.expanduser("~/go/bin/node_exporter"))
    ap.add_argument("--client", choices=["prometheus", "plain"], default="prometheus",
                    help="prometheus: Prometheus's own request headers (OpenMetrics offered, gzip); "
                         "plain: no Accept or Accept-Encoding header")
    a = ap.parse_args()
    global HEADERS
    HEADERS = PROMETHEUS_HEADERS if a.client == "prometheus" else {}
    up, np_ = free_port(), free_port()
    us, uc = start([a.usescope, f"--web.listen-address=127.0.0.1:{up}",
                    "--no-probe.runqlat", "--no-probe.cachestat", "--no-probe.drops"], up)
    ne, nc = start([a.node_exporter, f"--web.listen-address=127.0.0.1:{np_}"], np_)
    try:
        for _ in range(20):
            scrape(uc), scrape(nc)
        durations = {}
        u0, n0 = cpu_ns(us.pid), cpu_ns(ne.pid)
        ubytes = nbytes = 0
        # Alternating rounds: one scrape each; in blocks, `--block` scrapes
        # of one exporter then as many of the other.
        per_turn = a.block or 1
        for _ in range(a.rounds // per_turn):
            for _ in range(per_turn):
                text, ubytes = scrape(uc)
                for m in re.finditer(r'^node_scrape_collector_duration_seconds\{collector="([^"]+)"\} (\S+)$', text, re.M):
                    durations.setdefault(m.group(1), []).append(float(m.group(2)))
                if a.gap:
                    time.sleep(a.gap)
            for _ in range(per_turn):
                nbytes = scrape(nc)[1]
                if a.gap:
                    time.sleep(a.gap)
        a.rounds = a.rounds // per_turn * per_turn
        u1, n1 = cpu_ns(us.pid), cpu_ns(ne.pid)
        u_cpu = (u1 - u0) / a.rounds / 1000
        n_cpu = (n1 - n0) / a.rounds / 1000
        print(f"rounds {a.rounds}, gap {a.gap} s, block {a.block}, client {a.client}; machine {os.uname().machine}, {os.cpu_count()} CPUs, kernel {os.uname().release}")
        print("| | usescope | node_exporter | ratio |")
        print("|---|---|---|---|")
        print(f"| CPU per scrape, default collectors | {u_cpu:.0f} µs | {n_cpu:.0f} µs | 1/{n_cpu / u_cpu:.1f} |")
        print(f"| peak RSS (VmHWM) | {hwm_kb(us.pid) / 1024:.1f} MB | {hwm_kb(ne.pid) / 1024:.1f} MB | |")
        print(f"| bytes per scrape (on the wire) | {ubytes} | {nbytes} | |")
        print()
        print("| usescope collector | mean wall time per scrape |")
        print("|---|---|")
        for name, v in sorted(durations.items(), key=lambda kv: -statistics.mean(kv[1])):
            print(f"| {name} | {statistics.mean(v) * 1e6:.0f} µs |")
    finally:
        for p in (us, ne):
            p.terminate()
            p.wait(timeout=10)


if __name__ == "__main__":
    main()
