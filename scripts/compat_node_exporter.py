#!/usr/bin/env python3
"""node_exporter compatibility check: can an operator delete node_exporter?

Runs usescope and node_exporter (both on 127.0.0.1, each with its DEFAULT
collector set) on the same input, scrapes each once, and checks, for every
target below:

  1. every metric family node_exporter emits is emitted by usescope,
     unless KNOWN_GAPS explains why not (a gap that stops being a gap is an
     error too, so the list stays true);
  2. every family both emit has the same type and the same label names;
  3. every series both emit has the same value, except families in
     VOLATILE, whose values move between two reads (clocks, free space on
     a live filesystem, counters on the live host).

Targets: the live host (/proc, /sys, /), and the checked-in fixture trees
(exporter/tests/fixtures/proc and sys, which are static, so values must
agree exactly there).

node_exporter's vmstat and netstat field filters are widened to the fields
usescope exports by default, so those extra families are compared too.

usage: compat_node_exporter.py [--usescope PATH] [--node-exporter PATH]
Exits non-zero on any failure; the last line is "compat: N passed, M failed".
"""
import argparse
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "exporter/tests/fixtures"

VMSTAT_FIELDS = r"^(oom_kill|pgpg|pswp|pg.*fault|pgscan.*|pgsteal.*|allocstall.*|compact_stall).*"
NETSTAT_FIELDS = (r"^(.*_(InErrors|InErrs)|Ip_Forwarding|Ip(6|Ext)_(InOctets|OutOctets)|Icmp6?_(InMsgs|OutMsgs)"
                  r"|TcpExt_(Listen.*|Syncookies.*|TCPSynRetrans|TCPTimeouts|TCPOFOQueue|TCPRcvQDrop|TW.*|DelayedACKs)"
                  r"|Tcp_(ActiveOpens|InSegs|OutSegs|OutRsts|PassiveOpens|RetransSegs|CurrEstab)"
                  r"|Udp6?_(InDatagrams|OutDatagrams|NoPorts|RcvbufErrors|SndbufErrors))$")

# Families of node_exporter's that usescope does not emit, and why. Each
# entry is a regular expression over family names. docs/node-exporter-compat.md
# explains them for users.
KNOWN_GAPS = {}

# Per target: families whose values differ there by design, and why. The
# value is not compared; the family must still be emitted by both.
TARGET_DIFFERENCES = {
    "fixture tree": {
        r"node_selinux_enabled":
            "usescope reads selinuxfs under --path.sysfs (the fixture's fs/selinux says enabled); "
            "node_exporter always reads the running host's /sys/fs/selinux",
    },
}

# Families whose values legitimately differ between two reads a moment apart.
VOLATILE = re.compile(
    r"^node_(cpu_seconds_total|cpu_guest_seconds_total|intr_total|context_switches_total|forks_total"
    r"|procs_(running|blocked)|load(1|5|15)|memory_.*|vmstat_.*|disk_.*|network_(receive|transmit)_.*"
    r"|netstat_.*|sockstat_.*|softnet_.*|softirqs_.*|interrupts_total|pressure_.*|entropy_available_bits"
    r"|filefd_allocated|nf_conntrack_.*|time_.*|timex_.*|filesystem_(free|avail)_bytes|filesystem_files_free"
    r"|schedstat_.*|udp_queues|arp_entries|processes_.*|boot_time_seconds|zoneinfo_.*|scrape_collector_duration_seconds"
    # Busy filesystems, NFS and IPVS on a live host; their fixture values
    # are compared exactly by tests/compat_fs_net.rs.
    r"|xfs_.*|zfs_.*|btrfs_(commit.*|last_commit_seconds|max_commit_seconds|.*_bytes)|nfsd?_.*|ipvs_.*)$")
IGNORE = re.compile(r"^(go_|promhttp_|process_|node_exporter_build_info|usescope_|node_scrape_collector_)")

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(argv):
    """Starts a process whose stderr goes to a temporary file (a pipe that
    nobody reads would block a chatty process), kept for error reports."""
    errfile = tempfile.TemporaryFile()
    proc = subprocess.Popen(argv, stderr=errfile)
    proc.errfile = errfile
    return proc


def wait_scrape(url, proc, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            proc.errfile.seek(0)
            err = proc.errfile.read().decode(errors="replace")[-2000:]
            sys.exit(f"{url} ({proc.args[0]}): exited with {proc.returncode}\n{err}")
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return r.read().decode()
        except OSError:
            time.sleep(0.2)
    sys.exit(f"{url}: no answer within {timeout}s")


def parse(text):
    """(families: name -> (type, frozenset of label names), samples: (name, labels) -> value)"""
    types, labels, samples = {}, {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
            labels.setdefault(name, set())
        elif line and not line.startswith("#"):
            m = SAMPLE.match(line)
            if not m:
                continue
            name = m.group(1)
            fam = name
            for suffix in ("_bucket", "_sum", "_count"):
                base = name[: -len(suffix)]
                if name.endswith(suffix) and types.get(base) in ("histogram", "summary"):
                    fam = base
            pairs = LABEL.findall(m.group(3) or "")
            labels.setdefault(fam, set()).update(k for k, _ in pairs if k != "le")
            samples[(name, frozenset(pairs))] = float(m.group(4))
    fams = {n: (types.get(n, "untyped"), frozenset(labels.get(n, ()))) for n in types}
    return fams, samples


def scrape_both(us_bin, ne_bin, paths):
    up, np_ = free_port(), free_port()
    us = spawn([us_bin, f"--web.listen-address=127.0.0.1:{up}",
                "--no-probe.runqlat", "--no-probe.cachestat", "--no-probe.drops", *paths])
    ne = spawn([ne_bin, f"--web.listen-address=127.0.0.1:{np_}",
                f"--collector.vmstat.fields={VMSTAT_FIELDS}", f"--collector.netstat.fields={NETSTAT_FIELDS}",
                *paths])
    try:
        u = wait_scrape(f"http://127.0.0.1:{up}/metrics", us)
        n = wait_scrape(f"http://127.0.0.1:{np_}/metrics", ne)
    finally:
        for p in (us, ne):
            p.terminate()
            p.wait(timeout=10)
    return parse(u), parse(n)


def gap_reason(family):
    for pattern, reason in KNOWN_GAPS.items():
        if reason and re.fullmatch(pattern, family):
            return reason
    return None


def compare(target, us, ne):
    (uf, us_samples), (nf, ne_samples) = us, ne
    failures, passed = [], 0
    for f in sorted(nf):
        if IGNORE.match(f):
            continue
        if f not in uf:
            reason = gap_reason(f)
            if reason:
                print(f"  gap      {f}: {reason}")
                passed += 1
            else:
                failures.append(f"{target}: missing {f} (labels {','.join(sorted(nf[f][1]))})")
            continue
        (ut, ul), (nt, nl) = uf[f], nf[f]
        if ut != nt or ul != nl:
            failures.append(f"{target}: {f}: type {ut} vs {nt}, labels {sorted(ul)} vs {sorted(nl)}")
            continue
        passed += 1
    for f in sorted(uf):
        if f not in nf and gap_reason(f):
            failures.append(f"{target}: {f} is listed as a gap but usescope emits it")
    wrong = 0
    for key, nv in ne_samples.items():
        name = key[0]
        fam = next((f for f in (name, re.sub(r"_(bucket|sum|count)$", "", name)) if f in nf), name)
        if IGNORE.match(fam) or VOLATILE.match(fam) or key not in us_samples:
            continue
        reason = next((r for p, r in TARGET_DIFFERENCES.get(target, {}).items() if re.fullmatch(p, fam)), None)
        if reason:
            print(f"  differs  {name}: {reason}")
            continue
        uv = us_samples[key]
        same = (math.isnan(uv) and math.isnan(nv)) or uv == nv or abs(uv - nv) <= 1e-9 * max(abs(uv), abs(nv))
        if not same:
            wrong += 1
            if wrong <= 20:
                failures.append(f"{target}: {name}{dict(key[1])} = {uv} vs node_exporter {nv}")
    # Collector success: everything node_exporter's collectors manage, ours must too.
    for key, nv in ne_samples.items():
        if key[0] == "node_scrape_collector_success" and nv == 1.0:
            ours = us_samples.get(key)
            if ours == 0.0:
                failures.append(f"{target}: collector {dict(key[1])['collector']} fails in usescope, not in node_exporter")
    only_us = sorted(f for f in uf if f not in nf and not IGNORE.match(f))
    print(f"  {target}: node_exporter families {len([f for f in nf if not IGNORE.match(f)])}, "
          f"usescope-only {len(only_us)}, value mismatches {wrong}")
    return passed, failures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--usescope", default=str(ROOT / "target/release/usescope"))
    ap.add_argument("--node-exporter", default=os.path.expanduser("~/go/bin/node_exporter"))
    a = ap.parse_args()
    targets = {
        "live host": [],
        "fixture tree": [f"--path.procfs={FIXTURES / 'proc'}", f"--path.sysfs={FIXTURES / 'sys'}"],
    }
    passed, failures = 0, []
    for name, paths in targets.items():
        print(f"==> {name}")
        p, f = compare(name, *scrape_both(a.usescope, a.node_exporter, paths))
        passed += p
        failures += f
    for f in failures:
        print(f"FAIL {f}")
    print(f"compat: {passed} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
