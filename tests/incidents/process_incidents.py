"""The process-table and memory incidents: zombies piling up, drop_caches,
a process-start storm of short-lived processes burning the CPU, a
context-switch storm, swap thrashing.
Each has a quiet neighbour (the same host-wide signal, so never at the
same time), checks a kernel counter against what usescope reported, and
records the time to page like incidents.py.

run.py places them beside the suite's other incidents:
  - zombies and drop_caches in phase 1 (no CPU, no disk);
  - the start and switch storms' quiet neighbour on CPU 0 beside the
    saturated-disk iowait case on CPU 1;
  - the short-lived and swap quiet neighbours beside CPU saturation;
  - the process storm (forks, execs, exited CPU) and swap thrashing in a
    phase of their own;
  - the context-switch storm alone in the last phase (beside the process
    storm its long-lived ping-pong would take the CPU that the short-lived
    alert measures).
The host usescope runs with --probe.tasks and --probe.exits (run.py).
"""

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import incidents as i
import resources as r
import scaling
from incidents import QUIET_S, RESOLVE_TIMEOUT_S, expect_page, expect_quiet, expect_resolved, labels_text
from stack import HERE, now, run

PLOAD = [sys.executable, str(HERE / "proc_load.py")]
OTHER_CPU = i.NOISE_CPU
TICK = os.sysconf("SC_CLK_TCK")
# Scaled seconds to wait for a jump alert (ProcessStartStorm,
# ContextSwitchStorm): process_storm says why no page can come later.
JUMP_TIMEOUT_S = 70


@contextlib.contextmanager
def pload(*argv, cpu=None, group=None):
    """A proc_load.py subcommand, stopped (by PID) when the block ends."""
    cmd = [*PLOAD, *map(str, argv)]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    if group is not None:
        proc = r.start_in_cgroup(group, cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    else:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def vmstat(field):
    for line in Path("/proc/vmstat").read_text().splitlines():
        name, value = line.split()
        if name == field:
            return int(value)
    raise KeyError(field)


def proc_stat(field):
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(field + " "):
            return int(line.split()[1])
    raise KeyError(field)


def bracketed(stack, series, kernel, tries=20):
    """usescope's value of a counter that keeps moving, with kernel reads
    taken just before and after the scrape that produced it: (lo, scraped,
    hi), lo <= scraped <= hi when they agree."""
    for _ in range(tries):
        lo = kernel()
        time.sleep(1.5)  # two scrape intervals: a scrape after `lo`
        scraped = stack.value(series)
        hi = kernel()
        if scraped is not None and lo <= scraped <= hi:
            break
    return lo, scraped, hi


def zombies_in_proc():
    n = 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                s = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            if s[s.rindex(")") + 2] == "Z":
                n += 1
    return n


def quiet_unless_others(stack, report, incident, alertnames, started, labels, oracle, others):
    """expect_quiet for a host-wide signal that other work on a shared
    machine can raise by itself: an alert that fired while `others()`
    gives a reason (the kernel counted the storm without this test's load)
    makes the check not testable here, not failed."""
    time.sleep(max(0, started + QUIET_S - now()))
    for name in alertnames:
        notes = stack.notifications(name, started, "firing", **labels)
        firing = stack.firing_in_prometheus(name, **labels)
        what = f"{incident} (quiet): no {name}{labels_text(labels)} ({oracle()})"
        why = (notes or firing) and others()
        if why:
            report.not_testable_here(what, why)
        else:
            report.check(what, not notes and not firing,
                         f"notified: {[a['labels'] for _, _, a in notes]}, firing in Prometheus: {firing}")
        report.row(incident=incident + " (quiet)", alert=name, labels=labels, expected="quiet",
                   severity=(notes[0][2]["labels"].get("severity") if notes else None), page_s=None, resolve_s=None)


def baseline_excuse(stack, series, what):
    """A reason when the hour before (scaled) already had a tenth of the
    storm's rate: other work, and the storm is then no jump over it."""
    on_host = f'{{instance="{stack.host}"}}'
    rate = stack.value(f"instance:{series}:rate5m{on_host}") or 0
    base = stack.value(f"instance:{series}:rate1h_offset15m{on_host}") or 0
    if 10 * base > rate:
        return f"other work: {base:.0f} {what}/s the hour before (scaled), against {rate:.0f}/s now"
    return None


def expect_resolved_unless(stack, report, incident, alertname, ended, labels, others):
    """expect_resolved, where `others()` may say that other work keeps the
    alert's condition true after the incident's own load is gone."""
    with report._lock:
        paged = any(row["incident"] == incident and row["alert"] == alertname and row["labels"] == labels
                    and row.get("page_s") is not None for row in report.rows)
    if not paged:
        return
    if not stack.wait_notification(alertname, ended, "resolved", RESOLVE_TIMEOUT_S, **labels) and (why := others()):
        report.not_testable_here(f"{incident}: {alertname}{labels_text(labels)} resolves after the incident ends", why)
        return
    expect_resolved(stack, report, incident, alertname, ended, labels)


def others_still_burning(stack):
    on_host = f'{{instance="{stack.host}"}}'
    share = stack.value(f"instance:usescope_exited_tasks_cpu:ratio_rate5m{on_host}") or 0
    busy = stack.value(f"instance:node_cpu_utilisation:rate5m{on_host}") or 0
    if share >= 0.5 and busy >= 0.7:
        return (f"other work: with this test's loops gone, ended tasks still had {share:.0%} of the CPU used, "
                f"the CPUs {busy:.0%} busy")
    return None


def measured_row(report, incident, note):
    report.row(incident=incident, alert="(measured)", labels={}, expected="", severity=None, page_s=None,
               resolve_s=None, note=note)


# --- zombies -----------------------------------------------------------------

def zombies(stack, report):
    host = {"instance": stack.host}
    gauge = f'usescope_zombie_processes{{instance="{stack.host}"}}'
    incident = "zombies: a parent that never reaps, 0.5 a second up to 30"
    started = now()
    with pload("zombies", 0.5, 30, cpu=OTHER_CPU):
        expect_quiet(stack, report, incident, ["ZombiesPilingUp"], started, host,
                     lambda: f"usescope {stack.value(gauge)}, /proc {zombies_in_proc()} zombies")
    incident = "zombies: a parent that never reaps, 4 a second"
    started = now()
    with pload("zombies", 4, 2000, cpu=OTHER_CPU):
        expect_page(stack, report, incident, "ZombiesPilingUp", started, host, severity="ticket")
        # The gauge against a walk of /proc between two of its samples.
        a = b = walk = None
        for _ in range(40):
            a = stack.value(gauge)
            walk = zombies_in_proc()
            time.sleep(0.8)
            b = stack.value(gauge)
            if a is not None and b is not None and min(a, b) <= walk <= max(a, b):
                break
        ok = a is not None and b is not None and min(a, b) <= walk <= max(a, b) and walk > 50
        report.check(f"{incident}: usescope_zombie_processes ({a}, then {b}) brackets a walk of /proc ({walk})", ok)
        measured_row(report, incident, f"{walk} zombies in /proc, usescope {a}-{b}")
    ended = now()
    expect_resolved(stack, report, incident, "ZombiesPilingUp", ended, host)


# --- drop_caches -------------------------------------------------------------

DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def drop_caches(stack, report):
    """PageCacheDropped has no `for:` and looks back an hour (3 minutes
    scaled): its resolution is not waited for."""
    host = {"instance": stack.host}
    incident = "drop_caches: slab only (echo 2)"
    started = now()
    slab0 = vmstat("drop_slab")
    DROP_CACHES.write_text("2\n")
    time.sleep(10)  # the alert has no `for:`: 20 evaluations
    notes = stack.notifications("PageCacheDropped", started, "firing", **host)
    firing = stack.firing_in_prometheus("PageCacheDropped", **host)
    report.check(f"{incident} (quiet): no PageCacheDropped (drop_slab +{vmstat('drop_slab') - slab0})",
                 not notes and not firing, f"notified {len(notes)}, firing in Prometheus: {firing}")
    report.row(incident=incident + " (quiet)", alert="PageCacheDropped", labels=host, expected="quiet", severity=None,
               page_s=None, resolve_s=None)
    incident = "drop_caches: page cache (echo 1)"
    cached = f'node_memory_Cached_bytes{{instance="{stack.host}"}}'
    before = stack.value(cached)
    started = now()
    DROP_CACHES.write_text("1\n")
    expect_page(stack, report, incident, "PageCacheDropped", started, host, severity="ticket")
    after = stack.value(f"min_over_time({cached}[10s])")
    time.sleep(1.5)  # the counter stands still now: a scrape after the drop
    kernel = vmstat("drop_pagecache")
    scraped = stack.value(f'node_vmstat_drop_pagecache{{instance="{stack.host}"}}')
    report.check(f"{incident}: node_vmstat_drop_pagecache ({scraped}) equals /proc/vmstat's ({kernel}); "
                 f"Cached fell from {(before or 0) / 2**20:.0f} to {(after or 0) / 2**20:.0f} MiB",
                 scraped == kernel and before is not None and after is not None and after < before)


# --- the storms --------------------------------------------------------------

def starts_quiet(stack, report):
    """The start and context-switch storms' quiet neighbour: programs
    started and round trips made below the alerts' floors, on CPU 0 (run.py
    runs it beside the iowait case on CPU 1), long before the storms, whose
    baseline is the hour before them."""
    host = {"instance": stack.host}
    incident = "50 programs a second, 1 000 pipe round trips a second"
    started = now()
    forks0, ctxt0 = proc_stat("processes"), proc_stat("ctxt")
    on_host = f'{{instance="{stack.host}"}}'

    def measured():
        elapsed = now() - started
        return (f"/proc/stat: {(proc_stat('processes') - forks0) / elapsed:.0f} forks/s, "
                f"{(proc_stat('ctxt') - ctxt0) / elapsed:.0f} switches/s; usescope: "
                f"{stack.value(f'instance:usescope_process_execs:rate5m{on_host}') or 0:.0f} execs/s")

    def others():
        elapsed = now() - started
        forks, switches = (proc_stat("processes") - forks0) / elapsed, (proc_stat("ctxt") - ctxt0) / elapsed
        if forks > 100 or switches > 10000:
            return (f"other work: the kernel counted {forks:.0f} forks/s and {switches:.0f} switches/s, over the "
                    f"floors (100, 10 000) without this test's 50 and ~4 000")
        return None

    with pload("spawn", 50, "/bin/true", cpu=OTHER_CPU), pload("pingpong", 1000, cpu=OTHER_CPU):
        quiet_unless_others(stack, report, incident, ["ProcessStartStorm", "ContextSwitchStorm"], started, host,
                            measured, others)


def short_lived_quiet(stack, report):
    """The CPUs busy with long-lived processes (run.py runs it beside CPU
    saturation's 16 busy loops) and two of its own, and 10 short programs a
    second: the CPU is not going to tasks that have ended."""
    host = {"instance": stack.host}
    incident = "two busy loops and 10 programs a second"
    exited = f'instance:usescope_exited_tasks_cpu:ratio_rate5m{{instance="{stack.host}"}}'
    used = f'instance:node_cpu_utilisation:rate5m{{instance="{stack.host}"}}'
    counter = f'usescope_exited_tasks_cpu_seconds_total{{instance="{stack.host}"}}'
    started = now()
    busy0, probe0 = cpu_ticks(), stack.value(counter)
    with pload("spawn", 10, "/bin/true") as spawner, i.load("busy", "1"), i.load("busy", "1"):

        def others():
            # What other work's ended tasks used: all the probe counted less
            # this test's children. Other sessions' compilers are exactly
            # short-lived processes burning the CPU.
            busy = (cpu_ticks() - busy0) / TICK
            theirs = (stack.value(counter) or 0) - (probe0 or 0) - children_cpu(spawner.pid)
            if busy > 0 and theirs / busy >= 0.4:
                return (f"other work: tasks that were not this test's ended having used {theirs:.0f} of the "
                        f"{busy:.0f} CPU-seconds the host used (exits probe, /proc/stat)")
            return None

        quiet_unless_others(stack, report, incident, ["ShortLivedProcessesBurningCPU"], started, host,
                            lambda: f"usescope: exited tasks' share {stack.value(exited) or 0:.2f} of the CPU used, "
                                    f"CPUs {stack.value(used) or 0:.0%} busy", others)


def cpu_ticks():
    """Busy jiffies of all CPUs as the rules count them (every mode but
    idle, iowait and steal), from /proc/stat."""
    v = list(map(int, Path("/proc/stat").read_text().splitlines()[0].split()[1:9]))
    return sum(v) - v[3] - v[4] - v[7]


def children_cpu(pid):
    """cutime + cstime of a process (its reaped children's CPU), seconds."""
    s = Path(f"/proc/{pid}/stat").read_text()
    f = s[s.rindex(")") + 2:].split()
    return (int(f[13]) + int(f[14])) / TICK


def process_storm(stack, report):
    """A shell-loop storm: one loop forks and execs /bin/true as fast as it
    can, another forks children that each burn 20 ms and exit. Forks and
    execs jump far above their last hour, and most of the CPU goes to tasks
    that are gone before top samples."""
    host = {"instance": stack.host}
    incident = "process storm: fork+exec /bin/true, and children burning 20 ms"
    execs = f'usescope_process_execs_total{{instance="{stack.host}"}}'
    exited = f'usescope_exited_tasks_cpu_seconds_total{{instance="{stack.host}"}}'
    # Long-lived processes that ended just before (CPU saturation's busy
    # loops) add their whole run time at once: wait until that burst has
    # left the 5-minute window, or it would start ShortLived's `for:` early.
    ratio = f'instance:usescope_exited_tasks_cpu:ratio_rate5m{{instance="{stack.host}"}}'
    pending = f'ALERTS{{alertname="ShortLivedProcessesBurningCPU",instance="{stack.host}"}}'
    deadline = now() + 30
    while now() < deadline and ((stack.value(ratio) or 0) >= 0.5 or stack.value(pending) is not None):
        time.sleep(0.5)
    started = now()
    forks0, busy0 = proc_stat("processes"), cpu_ticks()
    execs0, exited0 = stack.value(execs), stack.value(exited)
    with pload("spawn", 0, "/bin/true") as spawner, pload("burner", 20) as burner:
        parents = (spawner.pid, burner.pid)
        def others_took_the_cpu():
            busy = (cpu_ticks() - busy0) / TICK
            burnt = sum(children_cpu(p) for p in parents)
            if busy <= 0 or burnt / busy < 0.55:
                return (f"other work used the CPUs: the loops' children had {burnt:.0f} of {busy:.0f} CPU-seconds "
                        f"used (the alert needs half)")
            return None

        excuses = {"forks": lambda: baseline_excuse(stack, "node_forks", "forks"),
                   "execs": lambda: baseline_excuse(stack, "usescope_process_execs", "execs")}
        # The jump alerts compare with the hour before, offset by 15
        # minutes: about 63 s (scaled) into the storm its own forks make
        # that baseline a tenth of it and they resolve by themselves. A page
        # later than that cannot come, and the storm stops at once when the
        # three have paged, so that "resolves after the incident ends"
        # means the storm's end.
        waits = [threading.Thread(target=expect_page, args=(stack, report, incident, "ProcessStartStorm", started,
                                                           {**host, "signal": s}, "ticket", JUMP_TIMEOUT_S),
                                  kwargs={"excuse": excuses[s]}) for s in ("forks", "execs")]
        waits.append(threading.Thread(target=expect_page, args=(stack, report, incident, "ShortLivedProcessesBurningCPU",
                                                               started, host, "ticket"),
                                      kwargs={"excuse": others_took_the_cpu}))
        for t in waits:
            t.start()
        for t in waits:
            t.join()
        burnt = sum(children_cpu(p) for p in parents)
        forks1 = proc_stat("processes")
    ended = now()
    elapsed = ended - started
    busy = (cpu_ticks() - busy0) / TICK
    lo, scraped, hi = bracketed(stack, f'node_forks_total{{instance="{stack.host}"}}', lambda: proc_stat("processes"))
    execs1, exited1 = stack.value(execs), stack.value(exited)
    forks = forks1 - forks0
    exec_rate = (execs1 - execs0) / elapsed if None not in (execs0, execs1) else 0
    probe = exited1 - exited0 if None not in (exited0, exited1) else 0
    report.check(f"{incident}: node_forks_total ({scraped}) within /proc/stat processes ({lo}-{hi})",
                 scraped is not None and lo <= scraped <= hi)
    # Every fork of the spawn loop execs; the burner's children do not.
    report.check(f"{incident}: {forks / elapsed:.0f} forks/s (/proc/stat), {exec_rate:.0f} execs/s (tasks probe): "
                 f"execs between a quarter and all of the forks", 0.25 * forks / elapsed <= exec_rate <= forks / elapsed)
    report.check(f"{incident}: the exits probe counted {probe:.1f} CPU-seconds of ended tasks, at least the loops' "
                 f"children's {burnt:.1f} (their parents' cutime+cstime), of {busy:.1f} used on the host",
                 burnt > 0 and probe >= 0.95 * burnt)
    measured_row(report, incident, f"{forks / elapsed:.0f} forks/s, {exec_rate:.0f} execs/s; children {burnt:.1f} of "
                                   f"{busy:.1f} CPU-s used, exits probe {probe:.1f} s")
    expect_resolved(stack, report, incident, "ProcessStartStorm", ended, {**host, "signal": "forks"})
    # Other sessions' compilers are short-lived processes burning the CPU
    # too: while they keep the ratio up after the storm, the alert rightly
    # stays.
    expect_resolved_unless(stack, report, incident, "ShortLivedProcessesBurningCPU", ended, host,
                           lambda: others_still_burning(stack))


def context_switch_storm(stack, report):
    """Two processes passing a byte over pipes as fast as they can, both
    pinned to CPU 0 (no cross-CPU wake-ups: the fastest)."""
    host = {"instance": stack.host}
    incident = "context-switch storm: a pipe ping-pong on CPU 0"
    started = now()
    ctxt0 = proc_stat("ctxt")
    with pload("pingpong", 0, cpu=OTHER_CPU):
        expect_page(stack, report, incident, "ContextSwitchStorm", started, host, severity="ticket",
                    timeout=JUMP_TIMEOUT_S, excuse=lambda: baseline_excuse(stack, "node_context_switches", "switches"))
        rate = stack.value(f'instance:node_context_switches:rate5m{{instance="{stack.host}"}}')
        base = stack.value(f'instance:node_context_switches:rate1h_offset15m{{instance="{stack.host}"}}')
        kernel_rate = (proc_stat("ctxt") - ctxt0) / (now() - started)
    ended = now()
    lo, scraped, hi = bracketed(stack, f'node_context_switches_total{{instance="{stack.host}"}}',
                                lambda: proc_stat("ctxt"))
    report.check(f"{incident}: node_context_switches_total ({scraped}) within /proc/stat ctxt ({lo}-{hi})",
                 scraped is not None and lo <= scraped <= hi)
    measured_row(report, incident, f"{kernel_rate:.0f} switches/s (/proc/stat); recorded {rate or 0:.0f}/s against "
                                   f"{base or 0:.0f}/s the hour before (scaled)")
    expect_resolved(stack, report, incident, "ContextSwitchStorm", ended, host)


# --- memory: swap and the page cache ---------------------------------------------

@contextlib.contextmanager
def swap_file(mb):
    """Swap on a file in /var/tmp, switched off and removed on every exit."""
    fd, path = tempfile.mkstemp(prefix="usescope-incident-swap-", dir="/var/tmp")
    os.close(fd)
    try:
        run(["fallocate", "-l", f"{mb}M", path])
        os.chmod(path, 0o600)
        run(["mkswap", "-q", path])
        run(["swapon", path])
        try:
            yield path
        finally:
            subprocess.run(["swapoff", path], capture_output=True)
    finally:
        os.unlink(path)


@contextlib.contextmanager
def swapping_cgroup(tag):
    """A 48 MiB memory cgroup that swaps eagerly, over its own swap file."""
    name = f"usescope-incident-{tag}-{os.getpid()}"
    with swap_file(256), r.cgroup(r.MEMORY, name, {"memory.limit_in_bytes": 48 << 20, "memory.swappiness": 100}) as group:
        yield group


def swap_quiet(stack, report):
    """Pages pushed out once and left there: swap-out without swap-in."""
    host = {"instance": stack.host}
    incident = "swap: 96 MiB touched once in a 48 MiB cgroup"
    with swapping_cgroup("swap-once") as group:
        started = now()
        in0, out0 = vmstat("pswpin"), vmstat("pswpout")
        with pload("hold", 96, group=group, cpu=OTHER_CPU):
            expect_quiet(stack, report, incident, ["SwapThrashing"], started, host,
                         lambda: f"/proc/vmstat: pswpin +{vmstat('pswpin') - in0}, pswpout +{vmstat('pswpout') - out0}")


def swap_thrash(stack, report):
    host = {"instance": stack.host}
    incident = "swap thrashing: 96 MiB touched over and over in a 48 MiB cgroup"
    with swapping_cgroup("swap-thrash") as group:
        started = now()
        in0, out0 = vmstat("pswpin"), vmstat("pswpout")
        with pload("thrash", 96, group=group):
            expect_page(stack, report, incident, "SwapThrashing", started, host, severity="ticket")
            lo, scraped, hi = bracketed(stack, f'node_vmstat_pswpin{{instance="{stack.host}"}}', lambda: vmstat("pswpin"))
            elapsed = now() - started
            out = vmstat("pswpout") - out0
        ended = now()
    report.check(f"{incident}: node_vmstat_pswpin ({scraped}) within /proc/vmstat's ({lo}-{hi})",
                 scraped is not None and lo <= scraped <= hi)
    measured_row(report, incident, f"{(hi - in0) / elapsed:.0f} pages/s in, {out / elapsed:.0f} out (/proc/vmstat)")
    expect_resolved(stack, report, incident, "SwapThrashing", ended, host)


# --- the page cache: reads that miss -------------------------------------------

# Random 4 KiB reads a second: ten times PageCacheHitRatioLow's floor of
# 1 000 accesses a second, so that other work's hits do not lift the
# host's ratio over 0.5; from memory (cached_file), so the loop device
# stays far from the disk alerts' 60% utilisation.
RANDREAD_RATE = 10000
# Beside the context-switch storm on CPU 0: CPU 1 stays idle for the fsync
# storm's iowait (run.py).
CPU_READER = 0
# PageCacheHitRatioLow's `for:` (30m) and rate window (5m), scaled, and a
# margin: how long the quiet case must last to show the alert would not fire.
PAGE_CACHE_QUIET_S = (30 * 60 + 5 * 60) / scaling.FACTOR + 10


@contextlib.contextmanager
def cached_file(tag, file_mb, cgroup_mb):
    """A file of file_mb on ext4 over a loop device, and a memory cgroup of
    cgroup_mb for its reader. The loop device's backing file is in /dev/shm:
    tmpfs reads are fast and do not take the page cache's read path that
    the probe hooks, so the probe sees only the reader's accesses, and each
    miss is one page the loop device reads."""
    with r.loop_device(file_mb + 64, directory="/dev/shm") as dev, r.mounted(dev) as mnt, \
            r.cgroup(r.MEMORY, f"usescope-incident-{tag}-{os.getpid()}", {"memory.limit_in_bytes": cgroup_mb << 20}) as group:
        path = mnt / "data"
        with open(path, "wb") as f:
            chunk = os.urandom(1 << 20)
            for _ in range(file_mb):
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        yield Path(dev).name, path, group


def pages_read(device):
    """Pages the block device has read (/proc/diskstats sectors / 8)."""
    for line in Path("/proc/diskstats").read_text().splitlines():
        fields = line.split()
        if fields[2] == device:
            return int(fields[5]) // 8
    raise KeyError(device)


def page_cache_quiet(stack, report):
    """The same reader on a file its cgroup can hold: after the first
    pass, every read hits."""
    host = {"instance": stack.host}
    incident = f"page cache: {RANDREAD_RATE} random reads/s of a 8 MiB file in a 32 MiB cgroup"
    with cached_file("pagecache-fits", 8, 32) as (device, path, group):
        started, read0 = now(), pages_read(device)
        with pload("randread", path, RANDREAD_RATE, group=group, cpu=CPU_READER):
            # Longer than expect_quiet's QUIET_S: this rule's `for:` is 30m.
            time.sleep(max(0, started + PAGE_CACHE_QUIET_S - now()))
            ratio = f'instance:usescope_page_cache_hit:ratio_rate5m{{instance="{stack.host}"}}'
            expect_quiet(stack, report, incident, ["PageCacheHitRatioLow"], started, host,
                         lambda: f"hit ratio {stack.value(ratio) or 0:.3f}; {device} read "
                                 f"{pages_read(device) - read0} pages")


def page_cache_misses(stack, report):
    host = {"instance": stack.host}
    incident = f"page cache: {RANDREAD_RATE} random reads/s of a 128 MiB file in a 32 MiB cgroup"
    misses = f'usescope_page_cache_misses_total{{instance="{stack.host}"}}'
    with cached_file("pagecache-misses", 128, 32) as (device, path, group):
        started = now()
        with pload("randread", path, RANDREAD_RATE, group=group, cpu=CPU_READER):
            time.sleep(1.5)  # a scrape after the reader started
            k0, p0 = pages_read(device), stack.value(misses)
            # Its `for:` is 30m and its window 5m: 105 s scaled before it can fire.
            expect_page(stack, report, incident, "PageCacheHitRatioLow", started, host, severity="ticket",
                        timeout=PAGE_CACHE_QUIET_S + 30)
            ratio = stack.value(f'instance:usescope_page_cache_hit:ratio_rate5m{{instance="{stack.host}"}}')
            k1, p1 = pages_read(device), stack.value(misses)
        ended = now()
    # The probe counts every miss on the host; the loop device reads one
    # page per miss of this reader. A scrape is up to 1.5 s (scaled
    # interval and a margin) older than the kernel read beside it.
    kernel, probe = k1 - k0, (p1 or 0) - (p0 or 0)
    report.check(f"{incident}: the cachestat probe counted {probe:.0f} misses, at least the {kernel} pages "
                 f"{device} read (less 2 s of reads)",
                 p0 is not None and p1 is not None and probe >= kernel - 2 * RANDREAD_RATE)
    measured_row(report, incident, f"hit ratio {ratio or 0:.3f} (rate5m scaled); {kernel / (ended - started):.0f} "
                                   f"pages/s read by {device}")
    expect_resolved(stack, report, incident, "PageCacheHitRatioLow", ended, host)


def phases(st, report):
    """Incident name -> callable, by the run.py phase they join."""
    return {
        "phase1": {
            "zombies": lambda: zombies(st, report),
            "drop_caches": lambda: drop_caches(st, report),
        },
        "beside_iowait_saturated": {
            "starts_quiet": lambda: starts_quiet(st, report),
        },
        "beside_cpu_saturated": {
            "short_lived_quiet": lambda: short_lived_quiet(st, report),
            "swap_quiet": lambda: swap_quiet(st, report),
        },
        "storms": {
            "process_storm": lambda: process_storm(st, report),
            "swap_thrash": lambda: swap_thrash(st, report),
        },
        # The page cache's quiet neighbour runs from phase 1 into the
        # next phases (its 30m `for:` outlasts phase 1): a burst of other
        # work's misses there (memory pressure reads a file twice) lasts
        # seconds, not the 90 s scaled the alert needs. The misses beside
        # the context-switch storm, on CPU 0.
        "from_phase1": {
            "page_cache_quiet": lambda: page_cache_quiet(st, report),
        },
        "switches": {
            "context_switch_storm": lambda: context_switch_storm(st, report),
            "page_cache_misses": lambda: page_cache_misses(st, report),
        },
    }
