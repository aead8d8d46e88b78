#!/usr/bin/env python3
"""End-to-end: the alerts node-mixin also has fire through real Prometheus
and Alertmanager when usescope reads an input that should fire them, and
stay quiet on the healthy neighbours in the same input.

usescope (as root: it mounts) reads a copy of the fixture /proc and /sys
trees edited to show:
  - file-nr at 95% of fs.file-max                  -> FileDescriptorLimit (page)
  - md0, raid1 with one of two disks failed        -> RAIDDegraded (page), RAIDDiskFailure
    (md1 beside it is healthy)
  - bond0 with one of two slaves down (bond1 full) -> BondingDegraded
  - eth7 whose operstate flips every 3 s           -> NetworkInterfaceFlapping
  - a textfile directory with a malformed file     -> TextfileCollectorError
  - two real tmpfs mounts, one 98% full and one    -> FilesystemAlmostOutOfSpace (page),
    with 98% of its inodes used, and a roomy one      FilesystemAlmostOutOfFiles (page)
Prometheus scrapes every second and evaluates the shipped rules with every
`for:` shortened to 5 s (alerts_fire.py checks that only `for:` lines
differ); Alertmanager runs alerts/alertmanager.yml unchanged.

Not made here, and covered by promtool unit tests instead
(alerts/tests/node.test.yml): the *FillingUp alerts, which predict from 6
hours of history, and the clock alerts, which read the kernel's own
adjtimex state.
"""

import shutil
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True
import harness as h  # noqa: E402
from alerts_fire import am_alerts, find, shortened_alert_rules  # noqa: E402

DEADLINE_S = 90
EXPECTED = {
    "FileDescriptorLimit": "page",
    "RAIDDegraded": "page",
    "RAIDDiskFailure": "ticket",
    "BondingDegraded": "ticket",
    "NetworkInterfaceFlapping": "ticket",
    "TextfileCollectorError": "ticket",
    "FilesystemAlmostOutOfSpace": "page",
    "FilesystemAlmostOutOfFiles": "page",
}

MDSTAT = """Personalities : [raid1]
md0 : active raid1 sdb1[1](F) sda1[0]
      1046528 blocks super 1.2 [2/1] [U_]

md1 : active raid1 sdd1[1] sdc1[0]
      1046528 blocks super 1.2 [2/2] [UU]

unused devices: <none>
"""


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def interface(sys_root, name, operstate):
    d = sys_root / "class/net" / name
    for attr, value in {"operstate": operstate, "mtu": "1500", "carrier": "1" if operstate == "up" else "0",
                        "address": "02:00:00:00:00:07", "type": "1", "flags": "0x1003", "ifindex": "7",
                        "iflink": "7", "tx_queue_len": "1000"}.items():
        write(d / attr, value + "\n")


def bond(sys_root, master, slaves):
    write(sys_root / "class/net" / master / "bonding/slaves", " ".join(slaves) + "\n")
    for slave, mii in slaves.items():
        write(sys_root / "class/net" / master / f"lower_{slave}" / "bonding_slave/mii_status", mii + "\n")


class Mounts:
    """Real tmpfs mounts, always unmounted."""

    def __init__(self):
        self.points = []

    def tmpfs(self, point, options):
        point.mkdir(parents=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], check=True)
        self.points.append(point)

    def mountinfo_lines(self):
        out = []
        for i, p in enumerate(self.points):
            out.append(f"{900 + i} 1 0:{90 + i} / {p} rw,relatime shared:{900 + i} - tmpfs tmpfs rw")
        return "\n".join(out) + "\n"

    def close(self):
        for p in reversed(self.points):
            subprocess.run(["umount", "-l", str(p)], check=False)


def flap(path, stop):
    up = True
    while not stop.is_set():
        write(path, ("up" if up else "down") + "\n")
        up = not up
        stop.wait(3)


def main():
    r = h.Results("node_alerts_fire")
    started = time.monotonic()
    work = h.tmpdir("node-alerts-fire")
    alerts_copy = work / "usescope-alerts.yml"
    shortened_alert_rules(alerts_copy)

    proc, sys_root = work / "proc", work / "sys"
    shutil.copytree(h.REPO / "exporter/tests/fixtures/proc", proc)
    # sysfs is made of links, some of them pointing back up (device/power_supply).
    shutil.copytree(h.REPO / "exporter/tests/fixtures/sys", sys_root, symlinks=True)
    write(proc / "sys/fs/file-nr", "9500\t0\t10000\n")
    write(proc / "mdstat", MDSTAT)
    write(sys_root / "class/net/bonding_masters", "bond0 bond1\n")
    bond(sys_root, "bond0", {"eth8": "up", "eth9": "down"})
    bond(sys_root, "bond1", {"eth10": "up", "eth11": "up"})
    interface(sys_root, "eth7", "up")
    textfiles = work / "textfile"
    textfiles.mkdir()
    (textfiles / "good.prom").write_text("# TYPE backup_last_success_seconds gauge\nbackup_last_success_seconds 1.7e9\n")
    (textfiles / "broken.prom").write_text("this is { not the exposition format\n")

    mounts = Mounts()
    stop = threading.Event()
    try:
        full, inodes, roomy = work / "full", work / "inodes", work / "roomy"
        mounts.tmpfs(full, "size=1m")
        mounts.tmpfs(inodes, "nr_inodes=100,size=8m")
        mounts.tmpfs(roomy, "size=64m")
        subprocess.run(["dd", "if=/dev/zero", f"of={full}/fill", "bs=1k", "count=1004", "status=none"], check=False)
        for i in range(97):
            (inodes / f"f{i}").write_text("")
        info = mounts.mountinfo_lines()
        for who in ("1", "self"):
            write(proc / who / "mountinfo", info)
        threading.Thread(target=flap, args=(sys_root / "class/net/eth7/operstate", stop), daemon=True).start()

        usescope = h.start_usescope([f"--path.procfs={proc}", f"--path.sysfs={sys_root}",
                                     f"--collector.textfile.directory={textfiles}",
                                     "--no-probe.runqlat", "--no-probe.cachestat", "--no-probe.drops"], work)
        instance = f"127.0.0.1:{usescope.port}"
        am = h.start_alertmanager(h.ALERTS / "alertmanager.yml", work)
        prom = h.start_prometheus(usescope.port, [h.ALERTS / "usescope-rules.yml", alerts_copy], work, am.port)

        def arrived():
            alerts = am_alerts(am)
            return alerts if all(find(alerts, name) for name in EXPECTED) else None

        alerts = h.wait_for("alerts at Alertmanager", arrived, timeout=DEADLINE_S)
        if not alerts:
            alerts = am_alerts(am)
            missing = [n for n in EXPECTED if not find(alerts, n)]
            r.check("every expected alert reaches Alertmanager", False,
                    f"missing {missing} after {time.monotonic() - started:.0f}s\n"
                    f"Prometheus ALERTS: {h.query(prom, 'ALERTS')}\nusescope log:\n{usescope.log_tail(20)}")
        time.sleep(3)
        alerts = am_alerts(am)
        for name, severity in EXPECTED.items():
            got = find(alerts, name, instance=instance, severity=severity)
            r.check(f"{name} arrives with severity={severity}", got, [a["labels"] for a in find(alerts, name)])
        r.check("RAIDDegraded names md0 only, not the healthy md1",
                sorted(a["labels"].get("device") for a in find(alerts, "RAIDDegraded")) == ["md0"],
                [a["labels"] for a in find(alerts, "RAIDDegraded")])
        r.check("BondingDegraded names bond0 only, not the full bond1",
                sorted(a["labels"].get("master") for a in find(alerts, "BondingDegraded")) == ["bond0"],
                [a["labels"] for a in find(alerts, "BondingDegraded")])
        space = {a["labels"].get("mountpoint") for a in find(alerts, "FilesystemAlmostOutOfSpace")}
        r.check("FilesystemAlmostOutOfSpace names the full tmpfs, not the roomy one",
                space == {str(full)}, space)
        files = {a["labels"].get("mountpoint") for a in find(alerts, "FilesystemAlmostOutOfFiles")}
        r.check("FilesystemAlmostOutOfFiles names the inode-starved tmpfs only", files == {str(inodes)}, files)
        flapping = {a["labels"].get("device") for a in find(alerts, "NetworkInterfaceFlapping")}
        r.check("NetworkInterfaceFlapping names eth7 only", flapping == {"eth7"}, flapping)
        page = find(alerts, "FileDescriptorLimit", severity="page")
        r.check("a page routes to the page receiver",
                page and [x["name"] for x in page[0]["receivers"]] == ["page"], page)
        r.check("the whole test stayed within two minutes", time.monotonic() - started < 120,
                f"{time.monotonic() - started:.0f}s")
    except Exception as e:  # a start-up failure is a test failure, with its log
        r.check("test ran without error", False, repr(e))
    finally:
        stop.set()
        mounts.close()
    return r.finish()


if __name__ == "__main__":
    sys.exit(main())
