#!/usr/bin/env python3
"""How long after its reaping the exits probe counts a task.

The exits probe hooks sched_process_free, which runs when the kernel
releases a task's struct: normally an RCU grace period after the parent
reaps it, but a few tasks are released much later. This forks N short
children of one parent, reaps each, optionally runs an RCU barrier
(rcutree.do_rcu_barrier, kernel 6.7+), and then prints each change of the
probe's process and task counts for 30 s.

Usage (root, from the repository root, after `cargo build`):
    python3 bench/exits_free_lag.py 2000 [barrier]
"""
import os
import re
import subprocess
import sys
import time
import urllib.request

PORT = 19333
BIN = os.environ.get("USESCOPE_BIN", "target/debug/usescope")


def scrape():
    text = urllib.request.urlopen(f"http://127.0.0.1:{PORT}/metrics").read().decode()
    value = lambda name: float(re.search(rf"^{name} (\S+)", text, re.M).group(1))
    return value("usescope_exited_processes_total"), value("usescope_exited_tasks_total")


def main():
    n = int(sys.argv[1])
    barrier = len(sys.argv) > 2 and sys.argv[2] == "barrier"
    daemon = subprocess.Popen(
        [BIN, f"--web.listen-address=127.0.0.1:{PORT}", "--collector.disable-defaults",
         "--collector.loadavg", "--no-probe.runqlat", "--no-probe.cachestat",
         "--no-probe.drops", "--probe.exits"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):
            try:
                scrape()
                break
            except OSError:
                time.sleep(0.2)
        time.sleep(1)
        p0, t0 = scrape()
        for _ in range(n):
            pid = os.fork()
            if pid == 0:
                sum(range(20000))
                os._exit(0)
            os.waitpid(pid, 0)
        if barrier:
            with open("/sys/module/rcutree/parameters/do_rcu_barrier", "w") as f:
                f.write("1")
        start, last = time.time(), None
        while time.time() - start < 30:
            p, t = scrape()
            now = (p - p0, t - t0)
            if now != last:
                print(f"{time.time() - start:6.2f}s processes +{now[0]:.0f} tasks +{now[1]:.0f}",
                      flush=True)
                last = now
            time.sleep(0.05)
    finally:
        daemon.terminate()
        daemon.wait()


if __name__ == "__main__":
    main()
