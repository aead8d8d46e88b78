#!/usr/bin/env python3
"""Load test: 100 concurrent scrapers (wrk) for 60 s against usescope on
this machine's real /proc, on 127.0.0.1.

Passes when:
- every response is 200, or 503 from --web.max-requests (no other status,
  no socket errors other than wrk's own timeouts being zero);
- RSS shows no growth trend (last 10 s against the 10 s after warm-up);
- the open-fd count stays flat during the run and returns to its baseline
  after the clients disconnect (no descriptor leak).

env: USESCOPE_BIN (default target/release/usescope), USESCOPE_LOAD_SECONDS (60),
     USESCOPE_LOAD_CONNECTIONS (100)
"""
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("USESCOPE_BIN", "target/release/usescope")
SECONDS = int(os.environ.get("USESCOPE_LOAD_SECONDS", "60"))
CONNS = int(os.environ.get("USESCOPE_LOAD_CONNECTIONS", "100"))
MAX_REQUESTS = 40


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def main():
    port = free_port()
    d = subprocess.Popen([BIN, f"--web.listen-address=127.0.0.1:{port}", f"--web.max-requests={MAX_REQUESTS}",
                          # wrk's connections all come from 127.0.0.1, so the
                          # per-peer limits are lifted: the totals are tested.
                          f"--web.max-connections-per-peer={CONNS + 8}",
                          "--web.max-requests-per-peer=0"],
                         stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"
    results = []

    def check(name, ok, detail):
        results.append(ok)
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")

    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(url, timeout=5).read()
                break
            except OSError:
                time.sleep(0.1)
        time.sleep(0.5)
        baseline_fds = fds(d.pid)
        samples = []
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                samples.append((time.time(), rss_kb(d.pid), fds(d.pid)))
                time.sleep(1)

        sampler = threading.Thread(target=sample)
        sampler.start()
        wrk = subprocess.run(["wrk", "-t2", f"-c{CONNS}", f"-d{SECONDS}s", "--timeout", "5s",
                              "-s", os.path.join(HERE, "count_status.lua"), url],
                             capture_output=True, text=True, timeout=SECONDS + 60)
        stop.set()
        sampler.join()
        out = wrk.stdout
        print(out)
        codes = {int(c): int(n) for c, n in re.findall(r"^status (\d+) (\d+)$", out, re.M)}
        errors = dict(re.findall(r"(\w+)=(\d+)", re.search(r"^errors .*$", out, re.M).group(0)))
        other = {c: n for c, n in codes.items() if c not in (200, 503)}
        check("statuses", not other and codes.get(200, 0) > 0,
              f"200={codes.get(200, 0)} 503(max-requests)={codes.get(503, 0)} other={other}")
        check("socket errors", all(int(v) == 0 for v in errors.values()), str(errors))

        # Trend: compare the 10 s after warm-up with the last 10 s.
        rss = [s[1] for s in samples]
        early, late = rss[5:15], rss[-10:]
        e, l = statistics.median(early), statistics.median(late)
        check("RSS trend", l <= e * 1.10 + 512,
              f"median RSS {e:.0f} kB after warm-up, {l:.0f} kB at the end, peak {max(rss)} kB")
        f_early, f_late = [s[2] for s in samples[5:15]], [s[2] for s in samples[-10:]]
        check("fd trend", max(f_late) <= max(f_early) + 4,
              f"max fds {max(f_early)} after warm-up, {max(f_late)} at the end")
        time.sleep(2)
        after = fds(d.pid)
        check("fd leak", after <= baseline_fds + 2, f"{baseline_fds} fds before the run, {after} after")
    finally:
        d.terminate()
        d.wait(timeout=10)
    passed = sum(results)
    print(f"load: {passed} passed, {len(results) - passed} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
