"""Synthetic host trees for the fleet test and the series budget: a /proc,
a /sys and a root filesystem per simulated host, for usescope's (and
node_exporter's) --path.procfs, --path.sysfs and --path.rootfs.

/proc comes from exporter/tests/fixtures/gen_synthetic.py (any number of
CPUs and disks), less what a typical server does not have (the captured
tree's NFS client and server, ZFS, IPVS and md arrays, kept there for the
compatibility tests). This module adds what gen_synthetic.py has no flag
for: network interfaces (physical NICs and Kubernetes-style veths) in
/proc/net/dev and /sys/class/net, the per-CPU sysfs of a bare-metal host
(online, topology, thermal throttle counters, one cpufreq policy per CPU),
and a mount table of / and /data.

`Host` also plays the host's activity: `tick()` rewrites /proc/stat,
/proc/diskstats and /proc/net/dev with counters that grow at the rates the
host was given, so that rate() over its series gives known values. Files are
replaced by rename, so a scrape never reads half a file (usescope reopens
files that are not on a real procfs).
"""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "exporter" / "tests" / "fixtures"
GEN_SYNTHETIC = FIXTURES / "gen_synthetic.py"
USER_HZ = 100

# The captured tree's extras that a typical server lacks.
PRUNE = ["net/rpc", "spl", "net/ip_vs", "net/ip_vs_stats"]
EMPTY_MDSTAT = "Personalities : \nunused devices: <none>\n"


def _write(path, text):
    """Replaces `path` by rename, so a reader sees the old or the new file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _attrs(directory, values):
    directory.mkdir(parents=True, exist_ok=True)
    for name, value in values.items():
        (directory / name).write_text(f"{value}\n")


def interface_names(nics, veths):
    return ["lo"] + [f"eth{i}" for i in range(nics)] + [f"veth{i:08x}" for i in range(veths)]


def _net_class(sysfs, names):
    for index, name in enumerate(names, start=1):
        veth = name.startswith("veth")
        mac = f"02:{index >> 24 & 255:02x}:{index >> 16 & 255:02x}:{index >> 8 & 255:02x}:{index & 255:02x}:01"
        values = {
            "addr_assign_type": 3 if veth else 0, "address": "00:00:00:00:00:00" if name == "lo" else mac,
            "broadcast": "00:00:00:00:00:00" if name == "lo" else "ff:ff:ff:ff:ff:ff",
            "carrier": 1, "carrier_changes": 2, "carrier_down_count": 1, "carrier_up_count": 1,
            "dev_id": "0x0", "dormant": 0, "duplex": "full", "flags": "0x9" if name == "lo" else "0x1003",
            "ifalias": "", "ifindex": index, "iflink": index + 1 if veth else index, "link_mode": 0,
            "mtu": 65536 if name == "lo" else 1500, "name_assign_type": 3 if veth else 4, "netdev_group": 0,
            "operstate": "unknown" if name == "lo" else "up", "speed": 10000, "tx_queue_len": 1000,
            "type": 772 if name == "lo" else 1,
        }
        if name == "lo":
            del values["speed"], values["duplex"]
        _attrs(sysfs / "class" / "net" / name, values)
        _attrs(sysfs / "class" / "net" / name / "statistics", {"rx_nohandler": 0})


def _cpu_sysfs(sysfs, cpus, packages):
    base = sysfs / "devices" / "system" / "cpu"
    per_package = max(cpus // packages, 1)
    for c in range(cpus):
        d = base / f"cpu{c}"
        if c:
            _attrs(d, {"online": 1})
        package, local = divmod(c, per_package)
        _attrs(d / "topology", {"core_id": local // 2, "physical_package_id": package})
        _attrs(d / "thermal_throttle", {"core_throttle_count": 0, "package_throttle_count": 0})
        _attrs(base / "cpufreq" / f"policy{c}", {
            "affected_cpus": c, "related_cpus": c, "cpuinfo_min_freq": 400000, "cpuinfo_max_freq": 4700000,
            "cpuinfo_transition_latency": 0, "scaling_cur_freq": 2400000, "scaling_min_freq": 400000,
            "scaling_max_freq": 4700000, "scaling_driver": "intel_pstate", "scaling_governor": "powersave",
            "scaling_available_governors": "performance powersave", "scaling_setspeed": "<unsupported>",
        })
        (d / "cpufreq").symlink_to(f"../cpufreq/policy{c}")
    _attrs(base, {"online": f"0-{cpus - 1}", "possible": f"0-{cpus - 1}", "present": f"0-{cpus - 1}",
                  "offline": "", "isolated": ""})


def build_tree(out, cpus, disks, nics, veths=0, nodes=1, seed=42):
    """Writes OUT/proc, OUT/sys and OUT/rootfs for one host; returns OUT."""
    out = Path(out)
    proc, sysfs, rootfs = out / "proc", out / "sys", out / "rootfs"
    subprocess.run([sys.executable, str(GEN_SYNTHETIC), str(proc), "--cpus", str(cpus), "--disks", str(disks),
                    "--nodes", str(nodes), "--seed", str(seed)], check=True, stdout=subprocess.DEVNULL)
    for rel in PRUNE:
        p = proc / rel
        shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    (proc / "mdstat").write_text(EMPTY_MDSTAT)
    names = interface_names(nics, veths)
    _write(proc / "net" / "dev", render_netdev({n: (0, 0) for n in names}))
    # / and /data; the filesystem collector stats them under --path.rootfs.
    (proc / "1" / "mountinfo").write_text(
        "1 0 259:0 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p1 rw,errors=remount-ro\n"
        "2 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:2 - proc proc rw\n"
        "3 1 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:3 - sysfs sysfs rw\n"
        "4 1 259:1 / /data rw,noatime shared:4 - xfs /dev/nvme0n1p2 rw,attr2,inode64,noquota\n")
    _net_class(sysfs, names)
    _cpu_sysfs(sysfs, cpus, nodes)
    (rootfs / "etc").mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURES / "rootfs" / "etc" / "os-release", rootfs / "etc" / "os-release")
    (rootfs / "data").mkdir(exist_ok=True)
    return out


def render_netdev(counters):
    """/proc/net/dev; counters: {interface: (rx_bytes, tx_bytes)}."""
    lines = ["Inter-|   Receive                                                |  Transmit",
             " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed"]
    for name, (rx, tx) in counters.items():
        lines.append(f"{name:>6}: {rx:>8} {rx // 1000:>7}    0    0    0     0          0         0 "
                     f"{tx:>8} {tx // 1000:>7}    0    0    0     0       0          0")
    return "\n".join(lines) + "\n"


class Host:
    """One simulated host's tree and activity.

    busy: share of each CPU's time in user+system; iowait: {cpu: share};
    disk_util: share of time disk 0 has I/O in flight (others: a tenth of
    it); disk_queue: requests in flight on disk 0 on average; net_bps: bytes
    per second received on eth0 (half that sent)."""

    def __init__(self, root, cpus, disks, nics, busy, disk_util, net_bps, load_per_cpu, mem_used,
                 iowait=None, disk_queue=None, seed=42, build=True):
        self.root = Path(root)
        self.cpus, self.disks, self.nics = cpus, disks, nics
        self.busy, self.disk_util, self.net_bps = busy, disk_util, net_bps
        # Requests in flight on disk 0 on average (aqu-sz); half its
        # utilisation unless told.
        self.disk_queue = disk_util / 2 if disk_queue is None else disk_queue
        self.iowait = dict(iowait or {})
        self.t0 = time.time()
        if build:  # else ROOT is a copy of a tree build_tree made for this shape
            build_tree(self.root, cpus, disks, nics, seed=seed)
        self.proc = self.root / "proc"
        self.sys = self.root / "sys"
        self.rootfs = self.root / "rootfs"
        self._tail = [l for l in (self.proc / "stat").read_text().splitlines() if not l.startswith("cpu")]
        load = load_per_cpu * cpus
        (self.proc / "loadavg").write_text(f"{load:.2f} {load:.2f} {load:.2f} 2/345 12345\n")
        total_kb = 16 * 1024 * 1024 * max(1, cpus // 4)
        text = (self.proc / "meminfo").read_text().splitlines()
        repl = {"MemTotal:": total_kb, "MemAvailable:": int(total_kb * (1 - mem_used)),
                "MemFree:": int(total_kb * (1 - mem_used) * 0.8)}
        text = [f"{l.split()[0]:<16}{repl[l.split()[0]]:>8} kB" if l.split()[0] in repl else l for l in text]
        (self.proc / "meminfo").write_text("\n".join(text) + "\n")
        self.tick()

    def set_conntrack(self, entries, limit=262144):
        nf = self.proc / "sys" / "net" / "netfilter"
        _write(nf / "nf_conntrack_max", f"{limit}\n")
        _write(nf / "nf_conntrack_count", f"{entries}\n")

    def tick(self, now=None):
        """Rewrites the counters for the time `now` (time.time())."""
        t = (now or time.time()) - self.t0 + 1000  # non-zero counters from the start
        rows, total = [], [0] * 10
        for c in range(self.cpus):
            iow = self.iowait.get(c, 0.0)
            busy = min(self.busy, 1 - iow)
            v = [int(USER_HZ * t * busy * 0.7), 0, int(USER_HZ * t * busy * 0.3),
                 int(USER_HZ * t * (1 - busy - iow)), int(USER_HZ * t * iow), 0, 0, 0, 0, 0]
            total = [a + b for a, b in zip(total, v)]
            rows.append(f"cpu{c} " + " ".join(map(str, v)))
        _write(self.proc / "stat", "\n".join(["cpu  " + " ".join(map(str, total)), *rows, *self._tail]) + "\n")
        disk_rows = []
        for d in range(self.disks):
            util = self.disk_util if d == 0 else self.disk_util / 10
            queue = self.disk_queue if d == 0 else util / 2
            ios = int(t * 200 * util)
            ms = int(t * 1000 * util)
            v = [ios, 0, ios * 8, ms // 2, ios, 0, ios * 8, ms // 2, 0, ms, int(t * 1000 * queue), 0, 0, 0, 0, 0, 0]
            disk_rows.append(f" 259 {d:7d} nvme{d}n1 " + " ".join(map(str, v)))
        _write(self.proc / "diskstats", "\n".join(disk_rows) + "\n")
        counters = {"lo": (int(t * 100), int(t * 100))}
        for i in range(self.nics):
            rx = int(t * self.net_bps) if i == 0 else int(t * 10)
            counters[f"eth{i}"] = (rx, rx // 2)
        _write(self.proc / "net" / "dev", render_netdev(counters))
