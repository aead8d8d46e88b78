"""The incidents: each makes a real incident (or its quiet neighbour) on
this kernel, checks an independent kernel counter against what usescope
reported, and records which alert reached the receiver, at what severity,
after how long (multiplied back by scaling.FACTOR) and how long it took to
resolve once the incident ended.

Each function takes (stack, report) and is run by run.py, some in parallel.
"""

import contextlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import resources as r
import scaling
from stack import HERE, now, run

LOAD = [sys.executable, str(HERE / "load.py")]
PAGE_TIMEOUT_S = 120  # scaled seconds to wait for a page (40 production minutes)
RESOLVE_TIMEOUT_S = 60
QUIET_S = 60  # longer than every window plus `for:` the quiet cases touch (15 s + 45 s)
# The iowait incidents need CPU 1 idle (a CPU accrues iowait only while
# idle), so every other load of the phases they share runs on CPU 0.
NOISE_CPU = 0


class Report:
    """Rows for the closing table and the pass/fail count."""

    def __init__(self):
        self.rows = []
        self.passed = 0
        self.failures = []
        self.inconclusive = []
        self._lock = threading.Lock()

    def check(self, what, ok, detail=""):
        with self._lock:
            print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f"\n     {detail}" if detail and not ok else ""), flush=True)
            if ok:
                self.passed += 1
            else:
                self.failures.append(what)
        return ok

    def not_testable_here(self, what, why):
        """A check this machine cannot make because other work holds the
        resource (a shared CPU). Under CI=true or USESCOPE_REQUIRE_BPF=1,
        where the machine is the test's own, that is a failure."""
        if os.environ.get("CI") == "true" or os.environ.get("USESCOPE_REQUIRE_BPF") == "1":
            return self.check(what, False, why)
        with self._lock:
            print(f"INCONCLUSIVE {what}\n     {why}", flush=True)
            self.inconclusive.append(f"{what}: {why}")
        return False

    def row(self, **row):
        with self._lock:
            self.rows.append(row)


@contextlib.contextmanager
def load(*argv, netns=None, cpu=None, nice=None, group=None):
    """A load.py subcommand, stopped (by PID) when the block ends."""
    cmd = [*LOAD, *argv]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    if nice is not None:
        cmd = ["nice", "-n", str(nice), *cmd]
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    if group is not None:
        proc = r.start_in_cgroup(group, cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    else:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def expect_page(stack, report, incident, alertname, started, labels, severity="page", timeout=PAGE_TIMEOUT_S,
                receiver=None, excuse=None):
    """Waits for the notification, checks severity and receiver (named
    after the severity unless told); returns the production-scale seconds
    to page, or None. `excuse`, if given, is asked when nothing arrived:
    a reason from it (the kernel says the incident did not really happen,
    because other work held the CPU) makes the check not testable here
    instead of failed."""
    receiver = receiver or severity
    got = stack.wait_notification(alertname, started, "firing", timeout, **labels)
    what = f"{incident}: {alertname}{labels_text(labels)} reaches the {receiver} receiver with severity {severity}"
    if not got and excuse and (why := excuse()):
        report.not_testable_here(what, why)
        return None
    if not got:
        firing = stack.firing_in_prometheus(alertname)
        report.check(what, False, f"nothing within {timeout}s scaled; firing in Prometheus: {firing}")
        report.row(incident=incident, alert=alertname, labels=labels, expected=severity, severity=None, page_s=None, resolve_s=None)
        return None
    seconds, path, alert = got
    report.check(what, alert["labels"].get("severity") == severity and path == f"/{receiver}",
                 f"severity {alert['labels'].get('severity')}, receiver {path}")
    report.row(incident=incident, alert=alertname, labels=labels, expected=severity,
               severity=alert["labels"].get("severity"), page_s=seconds * scaling.FACTOR, scaled_page_s=seconds, resolve_s=None)
    return seconds


def expect_resolved(stack, report, incident, alertname, ended, labels):
    """Waits for the resolved notification of an alert that paged (one
    that never paged has already failed its check)."""
    with report._lock:
        paged = any(row["incident"] == incident and row["alert"] == alertname and row["labels"] == labels
                    and row.get("page_s") is not None for row in report.rows)
    if not paged:
        return
    got = stack.wait_notification(alertname, ended, "resolved", RESOLVE_TIMEOUT_S, **labels)
    report.check(f"{incident}: {alertname}{labels_text(labels)} resolves after the incident ends", got,
                 f"no resolved notification within {RESOLVE_TIMEOUT_S}s scaled; "
                 f"firing in Prometheus: {stack.firing_in_prometheus(alertname, **labels)}")
    with report._lock:
        for row in report.rows:
            if row["incident"] == incident and row["alert"] == alertname and row["labels"] == labels and got:
                row["resolve_s"] = got[0] * scaling.FACTOR


def expect_quiet(stack, report, incident, alertnames, started, labels, oracle):
    """After QUIET_S, none of `alertnames` fired (nothing at the receiver,
    nothing firing in Prometheus). `oracle` describes the load that was
    measured, for the report."""
    time.sleep(max(0, started + QUIET_S - now()))
    for name in alertnames:
        notes = stack.notifications(name, started, "firing", **labels)
        firing = stack.firing_in_prometheus(name, **labels)
        report.check(f"{incident} (quiet): no {name}{labels_text(labels)} ({oracle()})", not notes and not firing,
                     f"notified: {[a['labels'] for _, _, a in notes]}, firing in Prometheus: {firing}")
        report.row(incident=incident + " (quiet)", alert=name, labels=labels, expected="quiet",
                   severity=(notes[0][2]["labels"].get("severity") if notes else None), page_s=None, resolve_s=None)


def labels_text(labels):
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else ""


def close(a, b, rel, abs_=0.0):
    return a is not None and b is not None and abs(a - b) <= max(abs_, rel * max(abs(a), abs(b)))


def ns_read(netns, path):
    return run(["ip", "netns", "exec", netns, "cat", path])


def netstat_counter(text, group, name):
    lines = [line.split() for line in text.splitlines()]
    for head, values in zip(lines[::2], lines[1::2]):
        if head[0] == f"{group}:":
            return int(values[head.index(name)])
    raise KeyError(name)


# --- conntrack ---------------------------------------------------------------

CONNTRACK_LIMIT = 1000
CT_RULESET = """table inet usescope_incident {
  chain out { type filter hook output priority 0; ct state new counter; }
}
"""


def conntrack_setup(netns):
    """Conntrack on in `netns` (an nft rule that matches on ct state) with
    a 10 s timeout for unreplied UDP, so the table drains quickly after."""
    run(["ip", "netns", "exec", netns, "nft", "-f", "-"], input=CT_RULESET)
    run(["ip", "netns", "exec", netns, "sysctl", "-qw", "net.netfilter.nf_conntrack_udp_timeout=10"])


def conntrack_drops(netns):
    """Packets conntrack dropped in `netns` (the `drop` column of
    /proc/net/stat/nf_conntrack, one hexadecimal row per CPU)."""
    lines = ns_read(netns, "/proc/net/stat/nf_conntrack").split("\n")
    col = lines[0].split().index("drop")
    return sum(int(line.split()[col], 16) for line in lines[1:] if line.strip())


def conntrack_full(stack, report, netns, instance):
    incident = "conntrack table full"
    netfilter_drops = f'usescope_skb_drops_total{{instance="{stack.host}",reason="NETFILTER_DROP"}}'
    probe_before, kernel_before = stack.value(netfilter_drops) or 0.0, conntrack_drops(netns)
    started = now()
    with load("udp-new-flows", "400", netns=netns, cpu=NOISE_CPU):
        page = threading.Thread(target=expect_page, args=(stack, report, incident, "ConntrackTableFull", started,
                                                          {"instance": instance, "signal": "conntrack_failures"}))
        page.start()
        expect_page(stack, report, incident, "ConntrackTableFull", started, {"instance": instance, "signal": "table_usage"})
        page.join()
        # The count saw-tooths as the kernel's GC expires entries in
        # batches, so compare peaks over the same few seconds.
        reads = []
        for _ in range(10):
            reads.append(int(ns_read(netns, "/proc/sys/net/netfilter/nf_conntrack_count")))
            time.sleep(0.3)
        kernel = max(reads)
        scraped = stack.value(f'max_over_time(node_nf_conntrack_entries{{instance="{instance}"}}[3s])')
        report.check(f"{incident}: the peak of node_nf_conntrack_entries over 3 s ({scraped}) matches the peak of the "
                     f"namespace's nf_conntrack_count ({kernel}; reads {min(reads)}-{kernel}) within 5%",
                     close(scraped, kernel, 0.05))
        # What the host's usescope sees of it: not the table (its own
        # namespace's is empty), but the drops (the probe sees every
        # namespace).
        host_entries = stack.value(f'node_nf_conntrack_entries{{instance="{stack.host}"}}') or 0.0
        time.sleep(2)
        probe, kernel_drops = (stack.value(netfilter_drops) or 0.0) - probe_before, conntrack_drops(netns) - kernel_before
        report.check(f"{incident}: the host's usescope sees {host_entries:.0f} entries (not the namespace's table) "
                     f"but counts its drops: NETFILTER_DROP +{probe:.0f}, conntrack's own drop counter +{kernel_drops}",
                     host_entries < 0.1 * CONNTRACK_LIMIT and kernel_drops > 0 and probe >= 0.9 * kernel_drops)
        limit = stack.value(f'node_nf_conntrack_entries_limit{{instance="{instance}"}}')
        report.check(f"{incident}: the limit usescope reads in the namespace is the global nf_conntrack_max",
                     limit == CONNTRACK_LIMIT, f"{limit}")
    ended = now()
    for signal in ("table_usage", "conntrack_failures"):
        expect_resolved(stack, report, incident, "ConntrackTableFull", ended, {"instance": instance, "signal": signal})


def conntrack_quiet(stack, report, netns, instance):
    incident = "conntrack table at 60%"
    started = now()
    with load("udp-hold-flows", str(int(CONNTRACK_LIMIT * 0.6)), netns=netns, cpu=NOISE_CPU):
        expect_quiet(stack, report, incident, ["ConntrackTableFull", "ConntrackTableNearlyFull"], started,
                     {"instance": instance},
                     lambda: f"nf_conntrack_count {ns_read(netns, '/proc/sys/net/netfilter/nf_conntrack_count').strip()}"
                             f" of {CONNTRACK_LIMIT}")
        # A held table stands still: usescope must read it exactly.
        kernel = int(ns_read(netns, "/proc/sys/net/netfilter/nf_conntrack_count"))
        scraped = stack.value(f'node_nf_conntrack_entries{{instance="{instance}"}}')
        report.check(f"{incident}: node_nf_conntrack_entries ({scraped}) equals the namespace's nf_conntrack_count "
                     f"({kernel}), 60% of the limit", scraped == kernel and abs(kernel - 0.6 * CONNTRACK_LIMIT) <= 10)


# --- listen overflow ---------------------------------------------------------

def listen_overflow(stack, report, netns, instance):
    incident = "listen queue overflow"
    before = netstat_counter(ns_read(netns, "/proc/net/netstat"), "TcpExt", "ListenOverflows")
    started = now()
    with load("listen-flood", "8080", "50", netns=netns, cpu=NOISE_CPU):
        expect_page(stack, report, incident, "ListenQueueOverflow", started, {"instance": instance}, severity="ticket")
    ended = now()
    # The flood and its half-open clients are gone, so the counter stands
    # still: two scrape intervals later usescope must report it exactly.
    time.sleep(2)
    kernel = netstat_counter(ns_read(netns, "/proc/net/netstat"), "TcpExt", "ListenOverflows")
    scraped = stack.value(f'node_netstat_TcpExt_ListenOverflows{{instance="{instance}"}}')
    report.check(f"{incident}: node_netstat_TcpExt_ListenOverflows ({scraped}) equals the namespace's "
                 f"TcpExt ListenOverflows ({kernel}, {kernel - before} during the flood)",
                 kernel > before and scraped == kernel)
    expect_resolved(stack, report, incident, "ListenQueueOverflow", ended, {"instance": instance})


# --- drops -------------------------------------------------------------------

def drops(stack, report, incident, reason, argv, netns=None, counter=None):
    """PacketDropsHigh for `reason` on the host's usescope (the drops
    probe sees every namespace) while argv sends 500 datagrams/s."""
    labels = {"instance": stack.host, "reason": reason}
    series = f'usescope_skb_drops_total{{instance="{stack.host}",reason="{reason}"}}'
    started = now()
    before = stack.value(series) or 0.0
    kernel_before = counter()
    with load(*argv, netns=netns, cpu=NOISE_CPU):
        expect_page(stack, report, incident, "PacketDropsHigh", started, labels, severity="ticket")
        time.sleep(2)
        scraped, kernel = stack.value(series), counter()
    report.check(f"{incident}: drops counted by the probe ({(scraped or 0) - before:.0f}) match the kernel's own "
                 f"counter ({kernel - kernel_before}) within 10%", close((scraped or 0) - before, kernel - kernel_before, 0.10, 50))
    expect_resolved(stack, report, incident, "PacketDropsHigh", now(), labels)


def udp_no_ports():
    return netstat_counter(Path("/proc/net/snmp").read_text(), "Udp", "NoPorts")


def udp_closed_port(stack, report):
    drops(stack, report, "UDP to a closed port", "NO_SOCKET", ["udp-to-port", "9", "500"], counter=udp_no_ports)


NFT_DROP = """table inet usescope_incident {
  chain out { type filter hook output priority 0; udp dport 9 counter drop; }
}
"""


def nft_drop(stack, report, netns):
    run(["ip", "netns", "exec", netns, "nft", "-f", "-"], input=NFT_DROP)

    def rule_counter():
        text = run(["ip", "netns", "exec", netns, "nft", "list", "chain", "inet", "usescope_incident", "out"])
        return int(text.split("packets ")[1].split()[0])

    drops(stack, report, "nft drop rule", "NETFILTER_DROP", ["udp-to-port", "9", "500"], netns=netns, counter=rule_counter)


# --- disk: iowait and saturation ------------------------------------------------

def cpu_iowait_ticks(cpu):
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{cpu} "):
            return int(line.split()[5])
    raise KeyError(cpu)


@contextlib.contextmanager
def throttled_loop(iops):
    """A --direct-io=on loop device whose writes reach the backing disk
    through a blkio cgroup throttled to `iops` writes per second. The
    cgroup is a .service, so the cgroup collector's default selection
    names it. The loop device gets a rule too, one that never holds a
    write back: v1 blkio counts a device's I/O only once the device has a
    rule (docs/collectors/cgroup.md), and DiskSaturated's top_cgroups
    query ranks cgroups on the saturated device, the loop device."""
    with r.loop_device(256, direct_io=True) as device:
        disk = r.backing_disk("/var/tmp")
        rdev = os.stat(device).st_rdev
        name = f"usescope-incident-io-{os.getpid()}-{Path(device).name}.service"
        with r.cgroup(r.BLKIO, name, {"blkio.throttle.write_iops_device": f"{disk} {iops}",
                                      "blkio.throttle.read_iops_device":
                                          f"{os.major(rdev)}:{os.minor(rdev)} 1000000"}) as group:
            yield device, group


def kernel_cgroup_ios(group):
    """Reads plus writes blkio has counted for `group` over all devices
    (blkio.throttle.io_serviced_recursive, as the cgroup collector reads)."""
    total = 0
    for line in (group / "blkio.throttle.io_serviced_recursive").read_text().splitlines():
        f = line.split()
        if len(f) == 3 and f[1] in ("Read", "Write"):
            total += int(f[2])
    return total


def top_cgroup_named(stack, report, incident, alertname, since, labels, group, started_ios):
    """Runs the page's own top_cgroups query, as on-call would: the cgroup
    doing the I/O must come first. Its operations in usescope must match
    blkio's file, read just before and after, within what the writer does
    in one scrape interval and a second. Quiet if nothing paged (the
    missing page is reported by expect_page)."""
    notes = stack.notifications(alertname, since, "firing", **labels)
    if not notes:
        return
    annotation = notes[0][2].get("annotations", {}).get("top_cgroups", "")
    _, _, query = annotation.partition(": ")
    ranked = sorted(stack.vector(query), key=lambda s: -s[1])
    expected = "/" + group.name
    shown = [(s.get("cgroup"), round(v, 1)) for s, v in ranked[:3]]
    report.check(f"{incident}: the {alertname} page's top_cgroups query ranks the writer's cgroup first "
                 f"(expected {expected}, got {shown})", bool(ranked) and ranked[0][0].get("cgroup") == expected,
                 f"annotation: {annotation!r}")
    before = kernel_cgroup_ios(group)
    scraped = stack.value(f'sum(usescope_cgroup_io_reads_total{{instance="{stack.host}", cgroup="{expected}"}}) + '
                          f'sum(usescope_cgroup_io_writes_total{{instance="{stack.host}", cgroup="{expected}"}})')
    after = kernel_cgroup_ios(group)
    rate = (after - started_ios) / max(1e-3, now() - since)
    slack = rate * (scaling.PRODUCTION_INTERVAL_S / scaling.FACTOR + 1)
    report.check(f"{incident}: usescope's I/O count for {expected} ({scraped}) matches blkio's "
                 f"io_serviced_recursive ({before}..{after}) within {slack:.0f} operations",
                 scraped is not None and before - slack <= scraped <= after)


def disk_and_iowait(stack, dev):
    """The recorded USE signals of the iowait incidents (0 where absent)."""
    host = f'instance="{stack.host}"'
    exprs = {
        "cpu1": f'instance_cpu:node_cpu_iowait:rate5m{{{host},cpu="1"}}',
        "average": f"instance:node_cpu_iowait:rate5m{{{host}}}",
        "util": f'instance_device:node_disk_io_time_seconds:rate5m{{{host},device="{dev}"}}',
        "aqu-sz": f'instance_device:node_disk_io_time_weighted_seconds:rate5m{{{host},device="{dev}"}}',
    }
    return {k: stack.value(e) or 0.0 for k, e in exprs.items()}


def disk_ticks(dev):
    """(io_ticks, weighted time) of `dev` in seconds, from /proc/diskstats."""
    for line in Path("/proc/diskstats").read_text().splitlines():
        f = line.split()
        if f[2] == dev:
            return int(f[12]) / 1000, int(f[13]) / 1000
    raise KeyError(dev)


def iowait_saturated(stack, report):
    """DiskSaturated, and HighIOWait judged against the iowait the kernel
    actually booked: a CPU accrues iowait only while it is idle, so on a
    machine shared with other work the writer's wait may not be booked as
    iowait, and then the missing page is not the rule's fault."""
    incident = "iowait: saturated loop device, writer on CPU 1"
    background = cpu_busy_share(cpus=(1,))
    with throttled_loop(40) as (device, group):
        dev = Path(device).name
        started = now()
        ticks, disk = cpu_iowait_ticks(1), disk_ticks(dev)
        started_ios = kernel_cgroup_ios(group)
        with load("direct-writer", device, "0", cpu=1, group=group):
            waits = [threading.Thread(target=expect_page, args=(stack, report, incident, "DiskSaturated", started,
                                                               {"instance": stack.host, "device": dev}))]
            def cpu_was_taken():
                booked = (cpu_iowait_ticks(1) - ticks) / 100 / (now() - started)
                if booked < 0.6:
                    return (f"other work took CPU 1 during the incident: the kernel booked only {booked:.2f} "
                            f"iowait on it (HighIOWait needs 0.5 over 5 minutes)")
                return None

            waits.append(threading.Thread(target=expect_page, args=(stack, report, incident, "HighIOWait", started,
                                                                   {"instance": stack.host, "cpu": "1"}),
                                          kwargs={"excuse": cpu_was_taken}))
            for t in waits:
                t.start()
            for t in waits:
                t.join()
            top_cgroup_named(stack, report, incident, "DiskSaturated", started, {"instance": stack.host, "device": dev},
                             group, started_ios)
            top_cgroup_named(stack, report, incident, "HighIOWait", started, {"instance": stack.host, "cpu": "1"},
                             group, started_ios)
            elapsed = now() - started
            kernel_iowait = (cpu_iowait_ticks(1) - ticks) / 100 / elapsed
            kernel_util, kernel_queue = ((b - a) / elapsed for a, b in zip(disk, disk_ticks(dev)))
            m = disk_and_iowait(stack, dev)
            report.check(f"{incident}: {dev} util {m['util']:.3f} and aqu-sz {m['aqu-sz']:.3f} match /proc/diskstats "
                         f"since the start ({kernel_util:.3f}, {kernel_queue:.3f}) within 10%",
                         close(m["util"], kernel_util, 0.10) and close(m["aqu-sz"], kernel_queue, 0.10))
            paged = any(row["alert"] == "HighIOWait" and row.get("page_s") is not None for row in report.rows)
            if paged:
                report.check(f"{incident}: CPU 1 iowait {m['cpu1']:.2f} matches /proc/stat since the start "
                             f"({kernel_iowait:.2f}) within 25%", close(m["cpu1"], kernel_iowait, 0.25, 0.05))
                # The per-CPU case: the page came from CPU 1 alone, while
                # the average of all CPUs stayed below the per-CPU threshold.
                report.check(f"{incident}: the per-CPU case, CPU 1 at {m['cpu1']:.2f} iowait while the average "
                             f"is {m['average']:.2f}", m["cpu1"] > 0.5 > m["average"])
            report.row(incident=incident, alert="(measured)", labels={}, expected="", severity=None, page_s=None, resolve_s=None,
                       note=", ".join(f"{k} {v:.3f}" for k, v in m.items())
                       + f", CPU 1 busy with other work before the start {background:.0%}")
        ended = now()
    expect_resolved(stack, report, incident, "HighIOWait", ended, {"instance": stack.host, "cpu": "1"})
    expect_resolved(stack, report, incident, "DiskSaturated", ended, {"instance": stack.host, "device": dev})


def iowait_quiet(stack, report):
    """Judged afterwards, like iowait_saturated: a busy CPU accrues no
    iowait, and the quiet case would then pass for nothing."""
    incident = "disk at ~50% utilisation"
    with throttled_loop(40) as (device, group):
        dev = Path(device).name
        started = now()
        ticks = cpu_iowait_ticks(1)

        def measured():
            m = disk_and_iowait(stack, dev)
            return ", ".join(f"{k} {v:.2f}" for k, v in m.items())

        with load("direct-writer", device, "1.2", cpu=1, group=group):
            expect_quiet(stack, report, incident, ["HighIOWait", "DiskSaturated"], started, {"instance": stack.host}, measured)
            booked = (cpu_iowait_ticks(1) - ticks) / 100 / (now() - started)
            if booked < 0.15:
                report.not_testable_here(f"{incident}: the quiet case meant something",
                                         f"other work took CPU 1: the kernel booked only {booked:.2f} iowait on it")
            util = disk_and_iowait(stack, dev)["util"]
            report.check(f"{incident}: the disk really was busy, not idle (util {util:.2f} in 0.3-0.7)", 0.3 <= util <= 0.7)



@contextlib.contextmanager
def self_throttled_loop(iops):
    """A --direct-io=on loop device throttled at itself (blkio write IOPS on
    its own major:minor): a writer's bios wait in the throttle before the
    device sees them, so the writer waits (iowait) while the device, busy
    only with what the throttle lets through, stays nearly idle."""
    with r.loop_device(64, direct_io=True) as device:
        rdev = os.stat(device).st_rdev
        name = f"usescope-incident-fsync-{os.getpid()}-{Path(device).name}.service"
        limit = f"{os.major(rdev)}:{os.minor(rdev)} {iops}"
        with r.cgroup(r.BLKIO, name, {"blkio.throttle.write_iops_device": limit}) as group:
            yield device, group


# Synchronous writes a second the fsync storm's device takes (Redis with
# appendfsync always, fsyncing every ~10 ms, waits on each).
FSYNC_IOPS = 50


def fsync_storm(stack, report):
    """iowait without disk saturation (HighIOWaitWithoutDiskSaturation, a
    ticket; HighIOWait, the page, must not fire): 4 KiB O_DSYNC writes on
    CPU 1 waiting in a throttle of FSYNC_IOPS, first with the writer idle
    twice each write's duration (quiet: a third of CPU 1 in iowait), then
    back to back. Judged by the iowait the kernel booked, like
    iowait_saturated."""
    host = {"instance": stack.host}
    cpu1 = {**host, "cpu": "1"}
    with self_throttled_loop(FSYNC_IOPS) as (device, group):
        dev = Path(device).name

        def measured():
            m = disk_and_iowait(stack, dev)
            return ", ".join(f"{k} {v:.2f}" for k, v in m.items())

        incident = f"fsync: a synchronous write every 60 ms through a {FSYNC_IOPS} writes/s throttle"
        started, ticks = now(), cpu_iowait_ticks(1)
        with load("direct-writer", device, "2", cpu=1, group=group):
            expect_quiet(stack, report, incident, ["HighIOWaitWithoutDiskSaturation", "HighIOWait"], started, host,
                         measured)
        booked = (cpu_iowait_ticks(1) - ticks) / 100 / (now() - started)
        if booked < 0.15:
            report.not_testable_here(f"{incident}: the quiet case meant something",
                                     f"other work took CPU 1: the kernel booked only {booked:.2f} iowait on it")

        incident = f"fsync storm: synchronous writes back to back through a {FSYNC_IOPS} writes/s throttle"
        started, ticks = now(), cpu_iowait_ticks(1)
        disk, started_ios = disk_ticks(dev), kernel_cgroup_ios(group)
        with load("direct-writer", device, "0", cpu=1, group=group):
            def cpu_was_taken():
                booked = (cpu_iowait_ticks(1) - ticks) / 100 / (now() - started)
                if booked < 0.6:
                    return (f"other work took CPU 1 during the incident: the kernel booked only {booked:.2f} "
                            f"iowait on it (the alert needs 0.5 over 5 minutes)")
                return None

            expect_page(stack, report, incident, "HighIOWaitWithoutDiskSaturation", started, cpu1, severity="ticket",
                        excuse=cpu_was_taken)
            top_cgroup_named(stack, report, incident, "HighIOWaitWithoutDiskSaturation", started, cpu1, group,
                             started_ios)
            elapsed = now() - started
            kernel_iowait = (cpu_iowait_ticks(1) - ticks) / 100 / elapsed
            kernel_util = (disk_ticks(dev)[0] - disk[0]) / elapsed
            m = disk_and_iowait(stack, dev)
        ended = now()
        pages = stack.notifications("HighIOWait", started, "firing", **host)
        report.check(f"{incident}: no HighIOWait page (the disk was not saturated)", not pages,
                     f"paged: {[a['labels'] for _, _, a in pages]}")
        report.check(f"{incident}: {dev} util {m['util']:.3f} matches /proc/diskstats since the start "
                     f"({kernel_util:.3f}) within 0.05, and is far below saturation",
                     abs(m["util"] - kernel_util) <= 0.05 and kernel_util < 0.3)
        report.row(incident=incident, alert="(measured)", labels={}, expected="", severity=None, page_s=None,
                   resolve_s=None, note=f"CPU 1 iowait {m['cpu1']:.2f} (/proc/stat {kernel_iowait:.2f}), "
                                        f"{dev} util {m['util']:.3f} (/proc/diskstats {kernel_util:.3f})")
    expect_resolved(stack, report, incident, "HighIOWaitWithoutDiskSaturation", ended, cpu1)

# --- CPU -----------------------------------------------------------------------

def cpu_busy_share(cpus=(0, 1), seconds=3.0):
    """The share of time these CPUs were not idle over `seconds` (other
    work on a shared machine), from /proc/stat."""
    def ticks():
        rows = [line.split() for line in Path("/proc/stat").read_text().splitlines()
                if line.split()[0] in {f"cpu{c}" for c in cpus}]
        return sum(sum(map(int, r[1:9])) for r in rows), sum(int(r[4]) + int(r[5]) for r in rows)

    total0, idle0 = ticks()
    time.sleep(seconds)
    total1, idle1 = ticks()
    return 1 - (idle1 - idle0) / max(1, total1 - total0)


def cpu_saturated(stack, report):
    incident = "CPU saturation: 16 busy loops on 2 CPUs"
    started = now()
    with contextlib.ExitStack() as loops:
        for _ in range(16):
            loops.enter_context(load("busy", "1", nice=19))
        page = threading.Thread(target=expect_page, args=(stack, report, incident, "CPUSaturated", started,
                                                          {"instance": stack.host, "signal": "load_per_cpu"}, "ticket"))
        page.start()
        expect_page(stack, report, incident, "CPUSaturated", started, {"instance": stack.host, "signal": "runqueue_latency"}, "ticket")
        page.join()
    ended = now()
    # load5 is the kernel's own 5-minute average, which the test cannot
    # scale: from 8 per CPU it needs about 10 real minutes to fall below 1,
    # so only the run-queue signal's resolution is measured.
    expect_resolved(stack, report, incident, "CPUSaturated", ended, {"instance": stack.host, "signal": "runqueue_latency"})


def cpu_quiet(stack, report):
    """Runs before cpu_saturated: load5 would still be high after it."""
    incident = "CPU at 70%: one busy thread per CPU"
    background = cpu_busy_share()
    if background > 0.3:
        report.not_testable_here(f"{incident} (quiet)", f"other work already keeps the CPUs {background:.0%} busy")
        return
    # The load average is the kernel's 5-minute average of runnable (and
    # D-state) tasks: work that ran in the last minutes still counts, and
    # the test cannot scale it. The 70% threads add about 0.7 per CPU, so
    # the load signal is checked only when the average starts below 0.3.
    load5 = float(Path("/proc/loadavg").read_text().split()[1]) / os.cpu_count()
    signals = ["runqueue_latency"] + (["load_per_cpu"] if load5 < 0.3 else [])
    if len(signals) == 1:
        print(f"note {incident}: CPUSaturated{{signal=\"load_per_cpu\"}} not checked quiet: load5 per CPU "
              f"starts at {load5:.2f} from earlier work", flush=True)
    started = now()
    host = f'{{instance="{stack.host}"}}'

    def measured():
        p99 = stack.value(f"instance:usescope_runqueue_latency_seconds:p99_rate5m{host}") or 0
        recorded_load5 = stack.value(f"instance:node_load5_per_cpu:ratio{host}") or 0
        return f"p99 run-queue latency {p99:.4f}s, load5 per CPU {recorded_load5:.2f}"

    with load("busy", "0.7", cpu=0), load("busy", "0.7", cpu=1):
        for signal in signals:
            expect_quiet(stack, report, incident, ["CPUSaturated"], started, {"instance": stack.host, "signal": signal},
                         measured)


# --- which workload: the per-cgroup alerts (--collector.cgroup) ---------------------
# The cgroups are named *.service so that the collector's default selection
# reports them; their `cgroup` label is "/" + name (a v1 hierarchy's root).

CPU_CGROUP = Path("/sys/fs/cgroup/cpu")


def cgroup_keyed(group, name):
    """A flat-keyed cgroup file (cpu.stat, memory.oom_control) as a dict of ints."""
    return {k: int(v) for k, v in (line.split() for line in (group / name).read_text().splitlines())}


def cgroup_cpu_quota(stack, report):
    """A busy loop in a v1 cgroup with a CFS quota of 20% of a CPU: the
    throttling alert names that cgroup. Its neighbour, busy 30% of every
    100 ms under a quota of 50%, is never throttled and stays quiet. Both
    on NOISE_CPU."""
    incident = "CPU quota: a busy loop in a cgroup with 20% of a CPU"
    quiet = "CPU quota not reached: busy 30% under a quota of 50%"
    hot_name = f"usescope-incident-quota-{os.getpid()}.service"
    cool_name = f"usescope-incident-unthrottled-{os.getpid()}.service"
    hot_labels = {"instance": stack.host, "cgroup": "/" + hot_name}

    def throttled_share(group, since):
        stat = cgroup_keyed(group, "cpu.stat")
        periods = stat["nr_periods"] - since[0]
        return (stat["nr_throttled"] - since[1]) / max(1, periods), periods

    with r.cgroup(CPU_CGROUP, hot_name, {"cpu.cfs_quota_us": 20000}) as hot, \
            r.cgroup(CPU_CGROUP, cool_name, {"cpu.cfs_quota_us": 50000}) as cool:
        start = {}
        for group in (hot, cool):
            stat = cgroup_keyed(group, "cpu.stat")
            start[group] = (stat["nr_periods"], stat["nr_throttled"])
        started = now()

        def cool_measured():
            share, periods = throttled_share(cool, start[cool])
            return f"kernel: throttled in {share:.1%} of {periods} periods"

        with load("busy", "1", group=hot, cpu=NOISE_CPU), load("busy", "0.3", group=cool, cpu=NOISE_CPU):
            neighbour = threading.Thread(target=expect_quiet, args=(
                stack, report, quiet, ["CgroupCPUThrottlingHigh"], started,
                {"instance": stack.host, "cgroup": "/" + cool_name}, cool_measured))
            neighbour.start()
            expect_page(stack, report, incident, "CgroupCPUThrottlingHigh", started, hot_labels, severity="ticket")
            share, periods = throttled_share(hot, start[hot])
            scraped = stack.value(
                f'instance_cgroup:usescope_cgroup_cpu_cfs_throttled:ratio_rate5m{{instance="{stack.host}", cgroup="/{hot_name}"}}')
            neighbour.join()
        report.check(f"{incident}: the kernel throttled it in {share:.1%} of {periods} periods, usescope's recorded "
                     f"ratio {scraped or 0:.1%}", share > 0.25 and scraped is not None and scraped > 0.25)
    ended = now()
    # The cgroup is gone: its series end and the alert resolves.
    expect_resolved(stack, report, incident, "CgroupCPUThrottlingHigh", ended, hot_labels)


def cgroup_oom(stack, report):
    """A process OOM-killed at its memory cgroup's 64 MiB limit: the
    alert names that cgroup. A neighbour using 32 MiB of its 256 MiB stays
    quiet."""
    incident = "OOM kill in a 64 MiB memory cgroup"
    quiet = "a memory cgroup using 32 of its 256 MiB"
    victim_name = f"usescope-incident-oom-{os.getpid()}.service"
    roomy_name = f"usescope-incident-fits-{os.getpid()}.service"
    labels = {"instance": stack.host, "cgroup": "/" + victim_name}
    with r.cgroup(r.MEMORY, victim_name, {"memory.limit_in_bytes": 64 << 20}) as victim, \
            r.cgroup(r.MEMORY, roomy_name, {"memory.limit_in_bytes": 256 << 20}) as roomy:
        # increase() counts from a series' first sample: the kill must come
        # after the collector has reported the counter at 0.
        deadline = now() + 30
        query = f'usescope_cgroup_memory_oom_kills_total{{instance="{stack.host}", cgroup="/{victim_name}"}}'
        while stack.value(query) is None and now() < deadline:
            time.sleep(0.25)
        if not report.check(f"{incident}: usescope reports the new cgroup's OOM-kill counter", stack.value(query) == 0):
            return
        started = now()
        with load("memory-hog", "32", group=roomy, cpu=NOISE_CPU), \
                load("memory-hog", "192", group=victim, cpu=NOISE_CPU) as hog:
            neighbour = threading.Thread(target=expect_quiet, args=(
                stack, report, quiet, ["CgroupOOMKill"], started, {"instance": stack.host, "cgroup": "/" + roomy_name},
                lambda: f"kernel: oom_kill {cgroup_keyed(roomy, 'memory.oom_control')['oom_kill']}"))
            neighbour.start()
            expect_page(stack, report, incident, "CgroupOOMKill", started, labels, severity="ticket")
            with contextlib.suppress(subprocess.TimeoutExpired):
                hog.wait(timeout=10)
            neighbour.join()
        kills = cgroup_keyed(victim, "memory.oom_control")["oom_kill"]
    report.check(f"{incident}: the kernel OOM-killed the hog in its cgroup ({kills} kill(s))",
                 kills >= 1 and hog.returncode == -9)


# --- filesystem full -------------------------------------------------------------

def filesystem_full(stack, report):
    incident = "filesystem full: space and inodes"
    with r.loop_device(64) as device, r.mounted(device, mkfs_args=["-N", "1024"]) as mnt:
        started = now()
        out = run([*LOAD, "fill-fs", str(mnt)])
        st = os.statvfs(mnt)
        report.check(f"{incident}: filled ({out.strip()}): statvfs avail {st.f_bavail} blocks, {st.f_favail} inodes",
                     st.f_favail == 0 and st.f_bavail * st.f_frsize < 0.03 * st.f_blocks * st.f_frsize)
        labels = {"instance": stack.host, "mountpoint": str(mnt), "severity": "page"}
        # FilesystemAlmostOutOfFiles waits `for: 1h`, 180 s scaled.
        timeout = 3600 / scaling.FACTOR + 30
        # usescope's alerts page; node-mixin's own (rendered from upstream)
        # are "critical", which alerts/alertmanager.yml does not route as a
        # page: they reach the default (ticket) receiver.
        mixin = {**labels, "severity": "critical"}
        expected = [("FilesystemAlmostOutOfSpace", labels, "page", "page"),
                    ("FilesystemAlmostOutOfFiles", labels, "page", "page"),
                    ("NodeFilesystemAlmostOutOfSpace", mixin, "critical", "ticket"),
                    ("NodeFilesystemAlmostOutOfFiles", mixin, "critical", "ticket")]
        waits = [threading.Thread(target=expect_page, args=(stack, report, incident, name, started, lab, sev, timeout, rcv))
                 for name, lab, sev, rcv in expected]
        for t in waits:
            t.start()
        for t in waits:
            t.join()
        run(["sh", "-c", f"rm -rf {mnt}/*"])
        ended = now()
        for name, lab, _, _ in expected:
            expect_resolved(stack, report, incident, name, ended, lab)


# --- memory ----------------------------------------------------------------------

def psi_memory_stall_us():
    return int(Path("/proc/pressure/memory").read_text().split("total=")[1].split()[0])


def memory_pressure(stack, report):
    incident = "memory pressure in a 64 MiB cgroup"
    stall = psi_memory_stall_us()
    name = f"usescope-incident-mem-{id(report)}"
    settings = {"memory.limit_in_bytes": 64 << 20}
    with r.cgroup(r.MEMORY, name, settings) as group:
        started = now()
        with load("memory-hog", "192", group=group, cpu=NOISE_CPU) as hog:
            expect_page(stack, report, incident, "OOMKill", started, {"instance": stack.host}, severity="ticket")
            hog.wait(timeout=10)
        failcnt = int((group / "memory.failcnt").read_text())
    stalled = (psi_memory_stall_us() - stall) / 1e6
    scraped = stack.value(f'increase(node_pressure_memory_stalled_seconds_total{{instance="{stack.host}"}}[{int(now() - started) + 5}s])')
    report.check(f"{incident}: the cgroup hit its limit ({failcnt} times) and was OOM-killed; PSI memory some stall "
                 f"{stalled:.2f}s (kernel), node_pressure_memory_stalled_seconds_total rose {scraped or 0:.2f}s",
                 failcnt > 0 and hog.returncode == -9)
    report.row(incident=incident, alert="(measured)", labels={}, expected="", severity=None, page_s=None, resolve_s=None,
               note=f"PSI memory stall {stalled:.2f}s, limit hit {failcnt} times; no page-severity memory alert fires in a cgroup")
