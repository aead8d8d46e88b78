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
    run("mount", &["-t", "tmpfs", "tmpfs", tmpfs.to_str().unwrap()]);
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
