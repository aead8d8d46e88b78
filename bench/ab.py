#!/usr/bin/env python3
"""A/B of usescope builds: CPU per scrape of several binaries running side by
side, measured in interleaved rounds so that the machine's drift hits all
of them alike.

  bench/ab.py [--rounds 12] [--scrapes 60] [--gap 0.02] BINARY... [-- EXTRA ARGS]

Each binary runs as a daemon on a free loopback port (probes off, plus the
extra arguments). A round scrapes each daemon --scrapes times in turn,
sleeping --gap seconds after each scrape (0: back to back), and records its
on-CPU time per scrape from /proc/PID/task/*/schedstat. Prints the median,
minimum and maximum over the rounds.

The daemon scraped first in a round tends to come out ~20 µs cheaper
(measured with two copies of one binary): run it twice, in both orders,
before believing a difference that small. To price one collector, pass a
wrapper script that execs usescope with --no-collector.NAME.
"""
import argparse
import http.client
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from defaults import cpu_ns, free_port  # noqa: E402


def scrape(conn):
    # The daemon closes a keep-alive connection that idles while the
    # others are measured; reconnect once.
    for attempt in range(2):
        try:
            conn.request("GET", "/metrics")
            return conn.getresponse().read()
        except (http.client.HTTPException, OSError):
            if attempt:
                raise
            conn.close()


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--scrapes", type=int, default=60)
    ap.add_argument("--gap", type=float, default=0.02)
    ap.add_argument("binaries", nargs="+")
    a = ap.parse_args(argv)
    daemons = []
    try:
        for b in a.binaries:
            port = free_port()
            p = subprocess.Popen([b, f"--web.listen-address=127.0.0.1:{port}", "--no-probe.runqlat",
                                  "--no-probe.cachestat", "--no-probe.drops"] + extra,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            daemons.append((b, p, None))
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            deadline = time.time() + 30
            while True:
                try:
                    scrape(conn)
                    break
                except OSError:
                    if time.time() > deadline:
                        sys.exit(f"{b} did not answer")
                    time.sleep(0.1)
            for _ in range(20):
                scrape(conn)
            daemons[-1] = (b, p, conn)
        per_scrape = {b: [] for b, _, _ in daemons}
        for _ in range(a.rounds):
            for b, p, conn in daemons:
                before = cpu_ns(p.pid)
                for _ in range(a.scrapes):
                    scrape(conn)
                    if a.gap:
                        time.sleep(a.gap)
                per_scrape[b].append((cpu_ns(p.pid) - before) / a.scrapes / 1000)
        for b, v in per_scrape.items():
            print(f"{b}: median {statistics.median(v):.0f} µs, min {min(v):.0f}, max {max(v):.0f} "
                  f"({a.rounds} rounds of {a.scrapes} scrapes, gap {a.gap} s)")
    finally:
        for _, p, _ in daemons:
            p.terminate()
            p.wait(timeout=10)


if __name__ == "__main__":
    main()
