#!/usr/bin/env python3
"""Two usescope builds against node_exporter, defaults against defaults, in
repeated trials: bench/defaults.py for each build in turn, for each method,
REPS times, the order of the builds swapped every trial.

  bench/defaults_ab.py BEFORE AFTER [--reps 6] [--only "50 ms gaps"]

One defaults.py run lasts seconds, and on a shared VM the ratio of one run
can move from 1/6 to 1/9 within minutes (other guests evict the caches an
exporter finds at each scrape, and usescope, whose work is mostly the
kernel's, feels it more). The medians over interleaved trials are what
BENCHMARKS.md quotes; the range shows the spread.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
METHODS = [
    ("alternating, plain", ["--rounds", "300", "--client", "plain"]),
    ("25 in a row, plain", ["--rounds", "500", "--block", "25", "--client", "plain"]),
    ("50 ms gaps, plain", ["--rounds", "200", "--gap", "0.05", "--client", "plain"]),
    ("alternating, as Prometheus", ["--rounds", "300"]),
    ("50 ms gaps, as Prometheus", ["--rounds", "200", "--gap", "0.05"]),
    ("25 in a row, as Prometheus", ["--rounds", "500", "--block", "25"]),
]


def run(binary, args):
    out = subprocess.run([sys.executable, os.path.join(HERE, "defaults.py"), "--usescope", binary] + args,
                         capture_output=True, text=True, check=True).stdout
    us, ne = map(int, re.search(r"CPU per scrape[^|]*\| (\d+) µs \| (\d+) µs", out).groups())
    rss = float(re.search(r"peak RSS[^|]*\| ([\d.]+) MB", out).group(1))
    return us, ne, rss


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--only", default="", help="run only the methods whose name contains this")
    a = ap.parse_args()
    methods = [(m, args) for m, args in METHODS if a.only in m]
    builds = {"before": a.before, "after": a.after}
    results = {(m, b): [] for m, _ in methods for b in builds}
    for rep in range(a.reps):
        for name, args in methods:
            order = ["before", "after"] if rep % 2 == 0 else ["after", "before"]
            for b in order:
                results[(name, b)].append(run(builds[b], args))
    print(f"{a.reps} trials per build and method; medians, (min–max)")
    print("| method | build | usescope | node_exporter | ratio | peak RSS |")
    print("|---|---|---:|---:|---|---:|")
    for name, _ in methods:
        for b in builds:
            rows = results[(name, b)]
            us = [r[0] for r in rows]
            ne = [r[1] for r in rows]
            ratio = [r[1] / r[0] for r in rows]
            rss = [r[2] for r in rows]
            print(f"| {name} | {b} | {statistics.median(us):.0f} µs ({min(us)}–{max(us)}) "
                  f"| {statistics.median(ne):.0f} µs | 1/{statistics.median(ratio):.1f} "
                  f"(1/{min(ratio):.1f}–1/{max(ratio):.1f}) | {min(rss)}–{max(rss)} MB |")


if __name__ == "__main__":
    main()
