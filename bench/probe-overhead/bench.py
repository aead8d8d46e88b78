#!/usr/bin/env python3
"""Probe overhead: each workload with its probe off and on, alternating.

For every workload and run, three timings:
  off     no usescope running;
  stats   usescope with only the matching probe and --probe.bpf-stats (the
          kernel's BPF run-time statistics), scraping the probe's program
          run counters (usescope_bpf_program_runs_total) before and after
          to count the events the probe handled;
  on      the same with default flags (statistics off: they add two clock
          reads to every BPF program run on the host). This is the headline.
Overhead per event = (median on - median off) / median events, likewise
for stats (same workload, so the same event count). Also reported: the
kernel's own run time per program run (run_seconds / runs), i.e. the cost
inside the BPF program, without the tracepoint dispatch around it.

The block I/O workload's completions run partly in interrupt context,
whose CPU time lands on whatever task the interrupt hits, so for
biolatency the in-program figure is the reliable one.

Usage: bench.py USESCOPE_BINARY WORKLOAD_BINARY DATA_DIR [RUNS [PROBE...]]
(with PROBEs, only their workloads run)
"""

import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request

WORKLOADS = [
    # name, probe, argv after the workload binary[, extra usescope flags]
    ("runqlat (sched_info): thread ping-pong (100k round trips)", "runqlat",
     ["pingpong", "100000"]),
    ("runqlat (sched_info), --probe.runqlat.per-cgroup: thread ping-pong (100k round trips)",
     "runqlat", ["pingpong", "100000"], ["--probe.runqlat.per-cgroup"]),
    ("runqlat, wakeups + task storage: thread ping-pong (100k round trips)", "runqlat",
     ["pingpong", "100000"], ["--probe.runqlat.source=task-storage"]),
    ("runqlat, wakeups + LRU hash: thread ping-pong (100k round trips)", "runqlat",
     ["pingpong", "100000"], ["--probe.runqlat.source=lru-hash"]),
    ("drops: UDP to a closed port (200k datagrams)", "drops", ["udp", "200000"]),
    # Drops with a socket (its buffer full), with and without the socket's
    # cgroup read and counted; a closed port has no socket, so there the
    # per-cgroup path only tests for one.
    ("drops: UDP to a full socket (200k datagrams)", "drops", ["udpfull", "200000"]),
    ("drops, --probe.drops.per-cgroup: UDP to a full socket (200k datagrams)", "drops",
     ["udpfull", "200000"], ["--probe.drops.per-cgroup"]),
    ("drops, --probe.drops.per-cgroup: UDP to a closed port (200k datagrams)", "drops",
     ["udp", "200000"], ["--probe.drops.per-cgroup"]),
    ("cachestat: warm 4 KiB preads (500k)", "cachestat", ["warm", "{file}", "500000"]),
    ("cachestat, --probe.cachestat.per-cgroup: warm 4 KiB preads (500k)", "cachestat",
     ["warm", "{file}", "500000"], ["--probe.cachestat.per-cgroup"]),
    ("cachestat: cold 64 MiB read (1 MiB reads)", "cachestat", ["cold", "{file}"]),
    ("cachestat: warm 64 MiB mapped and read 20 times", "cachestat", ["mmap", "{file}", "20"]),
    ("biolatency: 20k O_DIRECT 4 KiB reads", "biolatency", ["direct", "{file}", "20000"]),
    ("biolatency, --probe.biolatency.per-cgroup: 20k O_DIRECT 4 KiB reads", "biolatency",
     ["direct", "{file}", "20000"], ["--probe.biolatency.per-cgroup"]),
    ("softirq: UDP to a closed port (200k datagrams, one NET_RX each)", "softirq", ["udp", "200000"]),
    # In a memory cgroup limited to 16 MiB (the 5th field): every 64 pages
    # or so the read reclaims the cgroup's page cache, one memcg reclaim each.
    ("reclaim: cold 64 MiB read in a 16 MiB memory cgroup", "reclaim", ["cold", "{file}"], [], 16 << 20),
    # The program runs when the kernel frees a task, an RCU grace period
    # after its reaping, in whatever context runs RCU callbacks: its CPU time
    # lands on the workload only partly, so the in-program figure is the
    # reliable one (as for biolatency).
    ("exits: 20k processes forked, exiting at once, reaped", "exits", ["fork", "20000"]),
    # The exec program with and without its per-cgroup hash (the workload's
    # cgroup gets an entry like any other).
    ("tasks: 2 000 execs of /bin/true", "tasks", ["exec", "2000"]),
    ("tasks, --probe.tasks.per-cgroup: 2 000 execs of /bin/true", "tasks", ["exec", "2000"],
     ["--probe.tasks.per-cgroup"]),
]
PROBES = ["runqlat", "cachestat", "drops", "biolatency", "softirq", "reclaim", "exits", "tasks"]
# Probes that are off unless asked for.
OPT_IN = {"biolatency", "softirq", "reclaim", "exits", "tasks"}


def start(usescope, probe, extra=()):
    args = [usescope, "--web.listen-address=127.0.0.1:0",
            "--collector.disable-defaults", "--collector.loadavg", *extra]
    args += [f"--no-probe.{p}" for p in PROBES if p != probe]
    if probe in OPT_IN:
        args.append(f"--probe.{probe}")
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        m = re.search(r'address="?([0-9.:]+)"?', line)
        if "usescope listening" in line and m:
            return proc, m.group(1)
    raise SystemExit("usescope did not start")


def stop(proc):
    proc.terminate()
    proc.wait()


def scrape(addr, probe):
    text = urllib.request.urlopen(f"http://{addr}/metrics").read().decode()
    up = re.search(rf'usescope_probe_up{{probe="{probe}"}} (\S+)', text)
    if not up or up.group(1) != "1":
        raise SystemExit(f"probe {probe} is not up")
    runs = seconds = 0.0
    for m in re.finditer(rf'usescope_bpf_program_runs_total{{probe="{probe}",[^}}]*}} (\S+)', text):
        runs += float(m.group(1))
    for m in re.finditer(rf'usescope_bpf_program_run_seconds_total{{probe="{probe}",[^}}]*}} (\S+)', text):
        seconds += float(m.group(1))
    return runs, seconds


def timed(workload, argv, cgroup=None):
    """CPU nanoseconds of the workload's measured part, run inside the
    memory cgroup directory `cgroup` if given."""
    # Pinned to one CPU: the ping-pong's threads then switch on one run
    # queue instead of waking each other across CPUs, whose IPIs on a VM
    # vary far more than the probe costs we are measuring.
    cmd = ["taskset", "-c", "0", workload] + argv
    if cgroup:
        cmd = ["sh", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec "$@"', "sh"] + cmd
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return int(out.stdout.strip())


def memory_cgroup(name, limit):
    """Creates a memory cgroup with a limit on the hierarchy that has the
    memory controller (cgroup v1 or v2); returns its directory."""
    for line in open("/proc/self/mountinfo"):
        left, right = line.split(" - ", 1)
        mount, (fstype, _, options) = left.split()[4], right.split()[:3]
        if fstype == "cgroup" and "memory" in options.split(","):
            limit_file = "memory.limit_in_bytes"
            break
        if fstype == "cgroup2" and "memory" in open(f"{mount}/cgroup.controllers").read().split():
            limit_file = "memory.max"
            break
    else:
        raise SystemExit("no memory cgroup controller mounted")
    path = os.path.join(mount, name)
    os.mkdir(path)
    with open(os.path.join(path, limit_file), "w") as f:
        f.write(str(limit))
    return path


def main():
    usescope, workload, data = sys.argv[1], sys.argv[2], sys.argv[3]
    runs = int(sys.argv[4]) if len(sys.argv) > 4 else 7
    only = set(sys.argv[5:])
    path = os.path.join(data, "bench.bin")
    with open(path, "wb") as f:
        for _ in range(64):
            f.write(os.urandom(1 << 20))
        f.flush()
        os.fsync(f.fileno())
    rows = []
    for name, probe, argv, *extra in WORKLOADS:
        flags = extra[0] if extra else []
        limit = extra[1] if len(extra) > 1 else None
        if only and probe not in only:
            continue
        argv = [a.format(file=path) for a in argv]
        off, stats, on, events, inside = [], [], [], [], []
        cgroup = memory_cgroup(f"usescope-bench-{os.getpid()}", limit) if limit else None
        try:
            timed(workload, argv, cgroup)  # warm-up
            for _ in range(runs):
                off.append(timed(workload, argv, cgroup))
                proc, addr = start(usescope, probe, ["--probe.bpf-stats", *flags])
                try:
                    r0, s0 = scrape(addr, probe)
                    stats.append(timed(workload, argv, cgroup))
                    r1, s1 = scrape(addr, probe)
                finally:
                    stop(proc)
                events.append(r1 - r0)
                inside.append((s1 - s0) * 1e9 / max(r1 - r0, 1))
                proc, _ = start(usescope, probe, flags)
                try:
                    on.append(timed(workload, argv, cgroup))
                finally:
                    stop(proc)
        finally:
            if cgroup:
                os.rmdir(cgroup)
        m_off, m_on, m_st, m_ev = (statistics.median(x) for x in (off, on, stats, events))
        row = (name, runs, m_off / 1e6, m_on / 1e6, m_st / 1e6, m_ev,
               (m_on - m_off) / m_ev, (m_st - m_off) / m_ev, statistics.median(inside))
        rows.append(row)
        print("{}: {} runs, off {:.1f} ms, on {:.1f} ms, on with stats {:.1f} ms, "
              "{:.0f} events, {:.0f} ns/event, {:.0f} ns/event with stats, "
              "in-program {:.0f} ns".format(*row), flush=True)
    os.unlink(path)
    print()
    print("| workload | runs | median CPU off (ms) | median CPU on (ms) | median CPU on, --probe.bpf-stats (ms) "
          "| median events | ns/event | ns/event, --probe.bpf-stats | in-program ns/run |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.0f} | {:.0f} | {:.0f} | {:.0f} |".format(*r))


if __name__ == "__main__":
    main()
