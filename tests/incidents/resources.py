"""Kernel objects the incidents create, each a context manager that
removes or restores what it changed on every exit path (also on failure
and on SIGTERM, which tests/e2e/harness.py turns into SystemExit):
network namespaces, the global nf_conntrack_max, loop devices and their
files, mounts, blkio and memory cgroups (v1 on this kernel).
"""

import contextlib
import os
import subprocess
import tempfile
from pathlib import Path

from stack import run

CONNTRACK_MAX = Path("/proc/sys/net/netfilter/nf_conntrack_max")
BLKIO = Path("/sys/fs/cgroup/blkio")
MEMORY = Path("/sys/fs/cgroup/memory")


@contextlib.contextmanager
def netns(name):
    run(["ip", "netns", "add", name])
    try:
        run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"])
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def in_netns(name, argv, **kw):
    return subprocess.Popen(["ip", "netns", "exec", name, *argv], **kw)


@contextlib.contextmanager
def conntrack_max(limit):
    """nf_conntrack_max is global (only the host's namespace may write it,
    every namespace compares its own count with it)."""
    saved = CONNTRACK_MAX.read_text()
    CONNTRACK_MAX.write_text(f"{limit}\n")
    try:
        yield limit
    finally:
        CONNTRACK_MAX.write_text(saved)


@contextlib.contextmanager
def loop_device(size_mb, direct_io=False, directory="/var/tmp"):
    """A loop device on a sparse file in `directory`: by default /var/tmp, a
    real disk (tmpfs has no O_DIRECT)."""
    fd, path = tempfile.mkstemp(prefix="usescope-incident-", suffix=".img", dir=directory)
    os.close(fd)
    try:
        os.truncate(path, size_mb << 20)
        argv = ["losetup", "--find", "--show", *(["--direct-io=on"] if direct_io else []), path]
        device = run(argv).strip()
        try:
            yield device
        finally:
            subprocess.run(["losetup", "-d", device], capture_output=True)
    finally:
        os.unlink(path)


@contextlib.contextmanager
def mounted(device, fstype="ext4", mkfs_args=()):
    run([f"mkfs.{fstype}", "-q", *mkfs_args, device])
    target = tempfile.mkdtemp(prefix="usescope-incident-mnt-")
    run(["mount", device, target])
    try:
        yield Path(target)
    finally:
        subprocess.run(["umount", "-l", target], capture_output=True)
        os.rmdir(target)


def backing_disk(path):
    """MAJ:MIN of the whole disk that holds `path` (the device the blkio
    throttle must name: the loop device's I/O reaches it in the writer's
    cgroup)."""
    dev = os.stat(path).st_dev
    sysfs = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    if (sysfs / "partition").exists():
        sysfs = sysfs.resolve().parent
    return (sysfs / "dev").read_text().strip()


@contextlib.contextmanager
def cgroup(controller_root, name, settings):
    """A v1 cgroup with `settings` (file -> value); its tasks are moved back
    to the root before it is removed."""
    path = controller_root / name
    path.mkdir()
    try:
        for f, v in settings.items():
            (path / f).write_text(f"{v}\n")
        yield path
    finally:
        for pid in (path / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                (controller_root / "cgroup.procs").write_text(pid)
        with contextlib.suppress(OSError):
            path.rmdir()


def start_in_cgroup(group, argv, **kw):
    """Starts argv already inside `group` (the child joins before exec)."""
    procs = str(group / "cgroup.procs")

    def join():
        with open(procs, "w") as f:
            f.write(str(os.getpid()))

    return subprocess.Popen(argv, preexec_fn=join, **kw)
