#!/usr/bin/env python3
"""Series budget per host: usescope against node_exporter, each with its
default collectors, on the same input, scraped once over loopback.

Host types:
  vm          this machine's own /proc, /sys and / (usescope also with its
              default probes on: runqlat, cachestat, drops)
  large       synthetic: 1,024 CPUs, 1,000 disks, 5,000 interfaces, 4 NUMA nodes
  kubernetes  synthetic: 32 CPUs, 4 disks, 2 NICs and 500 veths
(tests/fleet/hosttree.py builds the synthetic trees.) Probes cannot be
faked in a tree: for the synthetic hosts, the probe series counted on this
VM are added to give usescope's "with probes" figure (runqlat is per host
unless --probe.runqlat.per-cpu, drops per reason seen, cachestat fixed).

For each: series, bytes of one scrape (text format, and gzip as Prometheus
asks for it), the ratio usescope / node_exporter, the families where
usescope has more series than node_exporter, and the fleet totals at 1,000
and 10,000 hosts with a 15 s scrape interval.

usage: series_budget.py [--usescope PATH] [--node-exporter PATH] [--json OUT]
                        [--usescope-flag FLAG ...] [--hosts vm,large,kubernetes]

--usescope-flag adds a flag to every usescope run, to measure a setting
against the defaults (--usescope-flag=--probe.histogram.bucket-factor=2 is
the probe histograms at full resolution).
"""

import argparse
import gzip
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))
import hosttree  # noqa: E402

REPO = hosttree.REPO
PROBES_OFF = ["--no-probe.runqlat", "--no-probe.cachestat", "--no-probe.drops"]
INTERVAL_S = 15
NOHANDLER = "node_network_receive_nohandler_total"
FLEETS = (1000, 10000)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape_once(argv, port, logdir, name, settle_s=0.0):
    """Starts argv (which listens on 127.0.0.1:port), scrapes it once (twice
    for usescope after `settle_s`, so its probes have seen some events),
    stops it; returns the page."""
    log = open(Path(logdir) / f"{name}.log", "wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as r:
                    page = r.read().decode()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not serve; see {log.name}")
                time.sleep(0.2)
        if settle_s:
            time.sleep(settle_s)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as r:
                page = r.read().decode()
        return page
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def families(page):
    """Series per family (histogram/summary children counted under the family)."""
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)", page, re.M))
    out = Counter()
    for line in page.splitlines():
        if not line or line.startswith("#"):
            continue
        name = re.match(r"[^{ ]+", line).group(0)
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        out[base if types.get(base) in ("histogram", "summary") else name] += 1
    return out


def measure(usescope, node_exporter, paths, logdir, name, probes, flags=()):
    p = free_port()
    u_page = scrape_once([usescope, f"--web.listen-address=127.0.0.1:{p}", *PROBES_OFF, *flags, *paths], p, logdir,
                         f"usescope-{name}")
    p = free_port()
    # node_exporter's netdev asks the running kernel over netlink by default,
    # whatever --path.procfs says; on a tree it must read /proc/net/dev.
    tree_only = ["--no-collector.netdev.netlink"] if paths else []
    n_page = scrape_once([node_exporter, f"--web.listen-address=127.0.0.1:{p}", *tree_only, *paths], p, logdir,
                         f"node_exporter-{name}")
    row = {"usescope": stats(u_page), "node_exporter": stats(n_page), "families": diff(u_page, n_page),
           "zoneinfo": zoneinfo_parts(u_page)}
    if tree_only:
        # Read from /proc/net/dev, node_exporter has no receive_nohandler
        # (netlink has it, and on the live host both exporters export it):
        # it is counted on node_exporter's side, as netlink would.
        extra = families(u_page)[NOHANDLER] - families(n_page).get(NOHANDLER, 0)
        row["node_exporter"]["series"] += extra
        row["node_exporter"]["netlink_nohandler_added"] = extra
        row["families"] = [(f, d) for f, d in row["families"] if f != NOHANDLER]
    if probes:
        p = free_port()
        with_probes = scrape_once([usescope, f"--web.listen-address=127.0.0.1:{p}", *flags, *paths], p, logdir,
                                  f"usescope-probes-{name}", settle_s=5)
        row["usescope_probes"] = stats(with_probes)
        probe_fams = {f: n for f, n in families(with_probes).items() if f not in families(u_page)}
        row["probe_series"] = sum(probe_fams.values())
        row["probe_bytes"] = len(with_probes.encode()) - len(u_page.encode())
        row["probe_families"] = probe_fams
    return row


def zoneinfo_parts(page):
    """usescope's zoneinfo series split by what a cut could leave out: the
    zones with no pages (`present 0`), then of the others the per-node
    counters the kernel prints under each node's first zone (nr_* but
    nr_free_pages), numa_* and protection_*; the rest (free pages,
    watermarks, sizes) is what the rules and dashboards read."""
    zone = {}
    for m in re.finditer(r'^node_zoneinfo_(\w+)\{node="([^"]*)",zone="([^"]*)"\} (\S+)', page, re.M):
        zone.setdefault((m.group(2), m.group(3)), []).append((m.group(1), m.group(4)))
    parts = Counter()
    for fields in zone.values():
        empty = ("present_pages", "0") in fields
        for field, _ in fields:
            if empty:
                parts["empty_zones"] += 1
            elif field.startswith("nr_") and field != "nr_free_pages":
                parts["node_counters"] += 1
            elif field.startswith("numa_"):
                parts["numa"] += 1
            elif field.startswith("protection_"):
                parts["protection"] += 1
            else:
                parts["read_by_rules"] += 1
    parts["zones"] = len(zone)
    parts["empty"] = sum(1 for f in zone.values() if ("present_pages", "0") in f)
    return dict(parts)


def stats(page):
    body = page.encode()
    return {"series": sum(1 for l in page.splitlines() if l and not l.startswith("#")),
            "bytes": len(body), "gzip_bytes": len(gzip.compress(body, 1))}


def group(family):
    """The collector (or probe) a family comes from, for the summary."""
    # Probe series are counted apart (probe_series): the page these
    # families come from has the probes off, so a usescope_ family here is
    # the daemon's own (build info) or a collector's (usescope_tasks).
    if family.startswith("usescope_"):
        return "self" if family.startswith("usescope_build") else "other"
    m = re.match(r"node_(softirqs|zoneinfo|vmstat|scrape_collector|network|cpu|netstat|disk|filesystem)_", family)
    return m.group(1) if m else "other"


def diff(u_page, n_page):
    u, n = families(u_page), families(n_page)
    return sorted(((f, u[f] - n.get(f, 0)) for f in u if u[f] > n.get(f, 0)), key=lambda x: -x[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--usescope", default=os.environ.get("USESCOPE_BIN", str(REPO / "target/release/usescope")))
    ap.add_argument("--node-exporter",
                    default=str(Path(os.environ.get("GOPATH", Path.home() / "go")) / "bin" / "node_exporter"))
    ap.add_argument("--json")
    ap.add_argument("--usescope-flag", action="append", default=[], metavar="FLAG",
                    help="a flag for every usescope run (repeatable)")
    ap.add_argument("--hosts", default="vm,large,kubernetes",
                    help="which hosts (the synthetic ones use vm's probe series, so vm is always measured)")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="usescope-series-budget-"))
    try:
        results = {}
        flags = a.usescope_flag
        results["vm"] = measure(a.usescope, a.node_exporter, [], work, "vm", probes=True, flags=flags)
        for name, shape in {"large": dict(cpus=1024, disks=1000, nics=5000, nodes=4),
                            "kubernetes": dict(cpus=32, disks=4, nics=2, veths=500, nodes=2)}.items():
            if name not in a.hosts.split(","):
                continue
            tree = hosttree.build_tree(work / name, **shape)
            paths = [f"--path.procfs={tree / 'proc'}", f"--path.sysfs={tree / 'sys'}",
                     f"--path.rootfs={tree / 'rootfs'}"]
            results[name] = measure(a.usescope, a.node_exporter, paths, work, name, probes=False, flags=flags)
            shutil.rmtree(tree)
        report(results)
        if a.json:
            Path(a.json).write_text(json.dumps(results, indent=1) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(results):
    probe_series = results["vm"]["probe_series"]
    probe_bytes = results["vm"]["probe_bytes"]
    print(f"probe series on this VM (default probes): {probe_series} ({probe_bytes} bytes): "
          + ", ".join(f"{f} {n}" for f, n in sorted(results["vm"]["probe_families"].items())))
    print()
    print("| host | node_exporter series | usescope series | ratio | usescope + probes | ratio | "
          "node_exporter bytes (gzip) | usescope bytes (gzip) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        if r["node_exporter"].get("netlink_nohandler_added"):
            print(f"({name}: node_exporter read /proc/net/dev (--no-collector.netdev.netlink); its series include "
                  f"{r['node_exporter']['netlink_nohandler_added']} {NOHANDLER} that its default netlink mode exports)")
    for name, r in results.items():
        n, u = r["node_exporter"], r["usescope"]
        up = r["usescope_probes"]["series"] if "usescope_probes" in r else u["series"] + probe_series
        r["usescope_probes_series"] = up
        print(f"| {name} | {n['series']} | {u['series']} | {u['series'] / n['series']:.2f} | {up}"
              f"{'' if 'usescope_probes' in r else ' (est.)'} | {up / n['series']:.2f} | "
              f"{n['bytes']} ({n['gzip_bytes']}) | {u['bytes']} ({u['gzip_bytes']}) |")
    print()
    for name, r in results.items():
        groups = Counter()
        for f, d in r["families"]:
            groups[group(f)] += d
        groups["probes"] += r.get("probe_series", probe_series)
        n = r["node_exporter"]["series"]
        up = r["usescope_probes_series"]
        print(f"{name}: series usescope has beyond node_exporter, by collector: "
              + ", ".join(f"{g} +{d}" for g, d in groups.most_common()))
        print(f"{name}: ratio with probes {up / n:.2f}; without softirqs {(up - groups['softirqs']) / n:.2f}, "
              f"without zoneinfo {(up - groups['zoneinfo']) / n:.2f}, "
              f"without both {(up - groups['softirqs'] - groups['zoneinfo']) / n:.2f}")
        z = r.get("zoneinfo", {})
        print(f"{name}: zoneinfo {sum(v for k, v in z.items() if k not in ('zones', 'empty'))} series in "
              f"{z.get('zones', 0)} zones: {z.get('empty_zones', 0)} of the {z.get('empty', 0)} empty zones, "
              f"{z.get('node_counters', 0)} per-node counters, {z.get('numa', 0)} numa_*, "
              f"{z.get('protection', 0)} protection_*, {z.get('read_by_rules', 0)} free pages, watermarks and sizes")
        top = ", ".join(f"{f} +{d}" for f, d in r["families"][:8])
        print(f"{name}: largest families: {top}")
    print()
    print(f"fleet totals, {INTERVAL_S} s interval (usescope with default probes; bytes uncompressed / gzip):")
    print("| host | hosts | exporter | series | samples/s | bytes per scrape round | gzip |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for name, r in results.items():
        for hosts in FLEETS:
            for exporter, series, size in (
                    ("node_exporter", r["node_exporter"]["series"], r["node_exporter"]),
                    ("usescope", r["usescope_probes_series"], r.get("usescope_probes", r["usescope"]))):
                extra = 0 if "usescope_probes" in r or exporter == "node_exporter" else probe_bytes
                print(f"| {name} | {hosts:,} | {exporter} | {series * hosts:,} | {series * hosts / INTERVAL_S:,.0f} | "
                      f"{(size['bytes'] + extra) * hosts / 1e6:,.1f} MB | {size['gzip_bytes'] * hosts / 1e6:,.1f} MB |")


if __name__ == "__main__":
    main()
