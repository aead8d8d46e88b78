//! The filesystem collector reads mountinfo only when the mount table may
//! have changed (exporter/src/kernel/mount_changes.rs). Against the real
//! daemon and kernel, as root, each way the table changes must show at the
//! next scrape, and a scrape with no change must really skip the read (or
//! the saving is gone):
//! - a mount and an unmount (a mount event);
//! - a remount read-only and back (a mount event);
//! - a superblock made read-only from another mount namespace, which this
//!   namespace hears nothing of (statfs's flags move);
//! - an ext4 error under errors=remount-ro, which since Linux 6.15 sets
//!   `emergency_ro` in the superblock's options and nothing statfs shows
//!   (the ext4 error counter moves).

mod common;

use std::path::Path;

use common::host::{Unmount, proc_io, quietest_scrape, run};
use common::loop_mount::LoopMount;

/// Bytes the process has read.
fn bytes_read(pid: u32) -> u64 {
    proc_io(pid, "rchar")
}

fn readonly(text: &str, mount_point: &Path) -> Option<f64> {
    let label = format!(r#"mountpoint="{}"}}"#, mount_point.display());
    text.lines()
        .find(|l| l.starts_with("node_filesystem_readonly{") && l.contains(&label))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

fn reported(text: &str, mount_point: &Path) -> bool {
    readonly(text, mount_point).is_some()
}

#[test]
fn each_kind_of_change_shows_at_the_next_scrape() {
    if !common::skip::unless_root("to mount filesystems") {
        return;
    }
    // The error behaviour set at mkfs time, so that the mount needs no
    // option for it.
    let Some(disk) = LoopMount::new("ext4", &["mkfs.ext4", "-q", "-F", "-e", "remount-ro"], 64)
    else {
        return;
    };
    let ext4 = disk.mnt();
    let dir = common::temp_dir();
    let tmpfs = dir.path().join("tmpfs");
    std::fs::create_dir(&tmpfs).unwrap();
    let d = common::Daemon::start(&["--collector.disable-defaults", "--collector.filesystem"]);
    let pid = d.child.id();
    let text = d.scrape();
    assert_eq!(readonly(&text, &ext4), Some(0.0), "{text}");

    // Between changes mountinfo is not read.
    let quiet = quietest_scrape(&d, "rchar");

    let before = bytes_read(pid);
    run("mount", &["-t", "tmpfs", "tmpfs", tmpfs.to_str().unwrap()]);
    let unmount_tmpfs = Unmount(tmpfs.clone());
    let text = d.scrape();
    let after_mount = bytes_read(pid) - before;
    assert!(reported(&text, &tmpfs), "tmpfs mounted:\n{text}");
    let table = std::fs::read_to_string("/proc/1/mountinfo").unwrap().len() as u64;
    assert!(
        after_mount >= quiet + table,
        "a scrape with no change read {quiet} bytes, the one after a mount {after_mount}, \
         and mountinfo is {table} bytes: it is read at every scrape, or not after a mount"
    );

    drop(unmount_tmpfs);
    let text = d.scrape();
    assert!(!reported(&text, &tmpfs), "tmpfs unmounted:\n{text}");

    run("mount", &["-o", "remount,ro", ext4.to_str().unwrap()]);
    assert_eq!(readonly(&d.scrape(), &ext4), Some(1.0), "remounted ro");
    run("mount", &["-o", "remount,rw", ext4.to_str().unwrap()]);
    assert_eq!(readonly(&d.scrape(), &ext4), Some(0.0), "remounted rw");

    // From a namespace of its own, a remount changes the superblock, which
    // both namespaces share, and tells only its own namespace: here the
    // mount stays "rw" and the superblock options say "ro".
    run(
        "unshare",
        &[
            "--mount",
            "--propagation",
            "private",
            "mount",
            "-o",
            "remount,ro",
            ext4.to_str().unwrap(),
        ],
    );
    let table = std::fs::read_to_string("/proc/1/mountinfo").unwrap();
    let line = table
        .lines()
        .find(|l| l.contains(&format!(" {} ", ext4.display())))
        .unwrap();
    let mount_options = line.split(' ').nth(5).unwrap();
    let super_options = line.rsplit(' ').next().unwrap();
    assert!(
        mount_options.starts_with("rw") && super_options.starts_with("ro"),
        "the superblock read-only and the mount read-write: {line}"
    );
    assert_eq!(
        readonly(&d.scrape(), &ext4),
        Some(1.0),
        "superblock made read-only in another mount namespace"
    );
    run("mount", &["-o", "remount,rw", ext4.to_str().unwrap()]);
    assert_eq!(readonly(&d.scrape(), &ext4), Some(0.0), "remounted rw");

    // An ext4 error: Linux 6.15+ marks the superblock emergency_ro and
    // statfs still says read-write (older kernels set it read-only, which
    // statfs shows).
    let name = &disk.device;
    std::fs::write(
        format!("/sys/fs/ext4/{name}/trigger_fs_error"),
        "usescope test error",
    )
    .unwrap();
    assert_eq!(
        readonly(&d.scrape(), &ext4),
        Some(1.0),
        "ext4 error under errors=remount-ro:\n{}",
        std::fs::read_to_string("/proc/1/mountinfo").unwrap()
    );
}

/// A daemon in a mount namespace of its own (systemd's ProtectSystem= and
/// PrivateTmp= make one) hears of no mount on the host through its own
/// mountinfo. It reports PID 1's mounts, and must poll PID 1's mountinfo
/// for them.
#[test]
fn a_mount_in_pid_1s_namespace_shows_when_the_daemon_has_its_own() {
    if !common::skip::unless_root("to mount a filesystem and make a mount namespace") {
        return;
    }
    let dir = common::temp_dir();
    let tmpfs = dir.path().join("tmpfs");
    std::fs::create_dir(&tmpfs).unwrap();
    let mut cmd = std::process::Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private"])
        .arg(common::bin());
    let d = common::Daemon::try_start_with(
        cmd,
        &["--collector.disable-defaults", "--collector.filesystem"],
    )
    .unwrap();
    for _ in 0..3 {
        assert!(!reported(&d.scrape(), &tmpfs));
    }
    run(
        "mount",
        &[
            "-t",
            "tmpfs",
            "-o",
            "size=7m",
            "tmpfs",
            tmpfs.to_str().unwrap(),
        ],
    );
    let unmount = Unmount(tmpfs.clone());
    let text = d.scrape();
    assert!(
        reported(&text, &tmpfs),
        "tmpfs mounted on the host:\n{text}"
    );

    drop(unmount);
    let text = d.scrape();
    assert!(!reported(&text, &tmpfs), "tmpfs unmounted:\n{text}");
}

/// ... and must stat them in PID 1's namespace: in its own, a mount made
/// after it started is not there, and statfs answered for the filesystem
/// beneath the mount point. This machine's PID 1 cannot be entered even by
/// root (its /proc/1/root is refused), so the test makes a PID 1 of its
/// own: a shell as PID 1 of a new PID namespace, in mount namespace X,
/// starts the daemon in mount namespace Y (a copy of X), and mounts a
/// 7 MiB tmpfs in X once the daemon is up. The oracle is the shell's own
/// statvfs of it (`stat -f`), written to a file.
#[test]
fn mounts_are_stat_ed_in_pid_1s_namespace() {
    if !common::skip::unless_root("to make PID and mount namespaces") {
        return;
    }
    let dir = common::temp_dir();
    let tmpfs = dir.path().join("tmpfs");
    std::fs::create_dir(&tmpfs).unwrap();
    let go = dir.path().join("go");
    let oracle = dir.path().join("oracle");
    // PID 1: start the daemon in a mount namespace of its own, wait for
    // the test's signal, mount, report the size it sees, and stay.
    let script = format!(
        "unshare --mount --propagation private \"$0\" \"$@\" & \
         while [ ! -e {go} ]; do sleep 0.05; done; \
         mount -t tmpfs -o size=7m tmpfs {mnt} && \
         stat -f -c '%b %S' {mnt} > {oracle}.tmp && mv {oracle}.tmp {oracle}; \
         wait",
        go = go.display(),
        mnt = tmpfs.display(),
        oracle = oracle.display(),
    );
    let mut cmd = std::process::Command::new("unshare");
    cmd.args([
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
    ])
    .arg(common::bin());
    let d = common::Daemon::try_start_with(
        cmd,
        &["--collector.disable-defaults", "--collector.filesystem"],
    )
    .unwrap();
    assert!(!reported(&d.scrape(), &tmpfs));
    std::fs::write(&go, "").unwrap();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !oracle.exists() {
        assert!(
            std::time::Instant::now() < end,
            "PID 1 did not mount the tmpfs"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let text = std::fs::read_to_string(&oracle).unwrap();
    let mut it = text.split_whitespace().map(|v| v.parse::<u64>().unwrap());
    let size = it.next().unwrap() * it.next().unwrap();
    assert_eq!(size, 7 << 20, "PID 1's statvfs of its tmpfs");
    let text = d.scrape();
    let series = format!(
        r#"node_filesystem_size_bytes{{device="tmpfs",device_error="",fstype="tmpfs",mountpoint="{}"}}"#,
        tmpfs.display()
    );
    assert_eq!(
        common::sample(&text, &series),
        Some(size as f64),
        "the daemon stat'ed another filesystem than PID 1's mount:\n{text}"
    );
    assert!(
        d.log()
            .iter()
            .any(|l| l.contains("runs in a mount namespace other than PID 1")),
        "{:?}",
        d.log()
    );
}
