#!/usr/bin/env python3
"""User and system CPU per usescope scrape, alone or alternating with
node_exporter: the split behind "Why the CPU targets are missed" in
BENCHMARKS.md. bench/run.py reports the totals; this says where they go.

usage: bench/cpu_split.py [--gzip] [--scrapes N] [--runs R]
Builds nothing: run bench/run.py (or cargo build --release) first.
"""

import argparse
import importlib.util
import os
import statistics

spec = importlib.util.spec_from_file_location("bench_run", os.path.join(os.path.dirname(__file__), "run.py"))
run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run)


def utime_stime_us(pid):
    """(user, system) CPU microseconds of a process, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    hz = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) * 1e6 / hz, int(fields[12]) * 1e6 / hz


def measure(alternate, gzip, scrapes):
    up = run.free_port()
    us = run.Exporter("usescope", [run.USESCOPE, f"--web.listen-address=127.0.0.1:{up}", "--collector.disable-defaults"]
                      + [f"--collector.{c}" for c in run.US_COLLECTORS] + run.NO_PROBES, up)
    ne = None
    if alternate:
        np_ = run.free_port()
        ne = run.Exporter("node_exporter", [run.node_exporter_path(), f"--web.listen-address=127.0.0.1:{np_}",
                                            "--collector.disable-defaults"]
                          + [f"--collector.{c}" for c in run.NE_COLLECTORS], np_)
    try:
        for _ in range(50):
            us.scrape(gzip)
            ne and ne.scrape(gzip)
        u0, s0 = utime_stime_us(us.proc.pid)
        for _ in range(scrapes):
            us.scrape(gzip)
            ne and ne.scrape(gzip)
        u1, s1 = utime_stime_us(us.proc.pid)
        return (u1 - u0) / scrapes, (s1 - s0) / scrapes
    finally:
        us.stop()
        ne and ne.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gzip", action="store_true", help="ask for gzip, as Prometheus does")
    ap.add_argument("--scrapes", type=int, default=3000)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    print(f"usescope CPU per scrape, {a.scrapes} scrapes, median of {a.runs} runs"
          f"{', gzip' if a.gzip else ''} (utime/stime at clock-tick resolution)")
    print("| | user | system |\n|---|---|---|")
    for alternate in (False, True):
        rows = [measure(alternate, a.gzip, a.scrapes) for _ in range(a.runs)]
        user = statistics.median(r[0] for r in rows)
        system = statistics.median(r[1] for r in rows)
        label = "alternating with node_exporter" if alternate else "scraped alone"
        print(f"| usescope {label} | {user:.0f} µs | {system:.0f} µs |")


if __name__ == "__main__":
    main()
