//! A real hung mount under the filesystem collector: tests/tools/hangfs.py
//! mounted for real (its statfs never answers), usescope on the machine's
//! own /proc, so the mount is in /proc/1/mountinfo like any other.
//!
//! With `--collector.filesystem.mount-timeout=1s`, every scrape must answer
//! within the timeout plus a second, the hung mount must show as
//! `node_filesystem_device_error{device_error="mountpoint timeout"} 1`
//! while `/` keeps its sizes, the hung mount must not be called again (no
//! new thread per scrape), and SIGTERM must still end the daemon.
//! (node_exporter 1.12 blocks its first scrape on such a mount until the
//! call returns; only later, concurrent scrapes skip it.)

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::hangfs::{HungMount, SIGSTOP};
use common::{Daemon, http_get, sample};

const TIMEOUT: Duration = Duration::from_secs(1);

/// usescope with the filesystem collector only, one stat worker, a 1 s
/// mount timeout, and only `/` and `mount` included: other tests' hung
/// mounts on the same machine stay out of it.
fn start(mount: &Path) -> Daemon {
    let include = format!(
        "--collector.filesystem.mount-points-include=^(/|{})$",
        regex::escape(&mount.to_string_lossy())
    );
    Daemon::start(&[
        "--collector.disable-defaults",
        "--collector.filesystem",
        "--collector.filesystem.mount-timeout=1s",
        "--collector.filesystem.stat-workers=1",
        &include,
        "--no-probe.runqlat",
        "--no-probe.cachestat",
        "--no-probe.drops",
    ])
}

/// The `node_filesystem_*{..., mountpoint="<mp>"}` line of `family`.
fn line_for<'a>(expo: &'a str, family: &str, mp: &str) -> Option<&'a str> {
    let needle = format!("mountpoint=\"{mp}\"");
    expo.lines()
        .find(|l| l.starts_with(&format!("{family}{{")) && l.contains(&needle))
}

/// The daemon's statfs threads.
fn statfs_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim() == "statfs")
        .count()
}

/// Mounts hangfs at `dir` and checks that PID 1 sees it (the collector
/// reads /proc/1/mountinfo); `None` when the test is skipped.
fn hung_mount(base: tempfile::TempDir) -> Option<HungMount> {
    let m = HungMount::mount(base)?;
    assert!(
        m.is_mounted_for("1"),
        "{} is not in /proc/1/mountinfo: this test must share PID 1's mount namespace",
        m.dir.display()
    );
    Some(m)
}

/// Five scrapes: each within the timeout plus a second, the hung mount
/// timed out, `/` with its sizes, the collector successful, and no thread
/// added after the first scrape (the hung mount is not called again).
fn assert_scrapes_skip(d: &Daemon, mount: &Path) {
    let mp = mount.to_string_lossy();
    for i in 0..5 {
        let t = Instant::now();
        let r = http_get(d.addr, "/metrics", &[]);
        let took = t.elapsed();
        assert_eq!(r.status, 200, "scrape {i}: {}", r.text());
        assert!(
            took < TIMEOUT + Duration::from_secs(1),
            "scrape {i} took {took:?}"
        );
        // The first scrape waits the timeout for the hung mount; the later
        // ones do not call it at all.
        if i == 0 {
            assert!(took >= TIMEOUT - Duration::from_millis(100), "{took:?}");
        } else {
            assert!(took < TIMEOUT / 2, "scrape {i} took {took:?}");
        }
        let expo = r.text();
        let err = line_for(&expo, "node_filesystem_device_error", &mp)
            .unwrap_or_else(|| panic!("scrape {i}: no device_error line for {mp}:\n{expo}"));
        assert!(
            err.contains("device_error=\"mountpoint timeout\"") && err.ends_with(" 1"),
            "scrape {i}: {err}"
        );
        assert!(
            line_for(&expo, "node_filesystem_size_bytes", &mp).is_none(),
            "scrape {i}: a size for the hung mount"
        );
        let root = line_for(&expo, "node_filesystem_size_bytes", "/")
            .unwrap_or_else(|| panic!("scrape {i}: no size for /:\n{expo}"));
        let size: f64 = root.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(size > 0.0, "{root}");
        assert_eq!(
            sample(
                &expo,
                "node_scrape_collector_success{collector=\"filesystem\"}"
            ),
            Some(1.0)
        );
        // One worker: after the first scrape, the thread stuck in the hung
        // mount and one more for the others; never a second call on it.
        let threads = statfs_threads(d.child.id());
        if i == 0 {
            assert!(threads <= 2, "scrape 0: {threads} statfs threads");
        } else {
            assert_eq!(threads, 2, "scrape {i}: statfs threads");
        }
    }
    let warned: Vec<String> = d
        .log()
        .into_iter()
        .filter(|l| l.contains("statfs did not answer") && l.contains(mp.as_ref()))
        .collect();
    assert_eq!(
        warned.len(),
        1,
        "one warning for the hung mount:\n{}",
        d.log().join("\n")
    );
}

/// The server is stopped: statfs waits killably. SIGTERM ends the daemon
/// within 5 s, with a thread still inside the call.
/// One test at a time: each daemon reads the host's real mountinfo, so it
/// would also call statfs on the other test's hung mount, and a call that
/// the holding server has taken keeps a thread, and so the process, alive.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn stopped_fuse_server_times_out_one_mount_and_sigterm_exits() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    // The daemon first, so that the mount is dropped (released) first if
    // the test fails: a daemon stuck in it could not be reaped before.
    let base = HungMount::base();
    let dir = base.path().join("mnt");
    let d = start(&dir);
    let Some(mount) = hung_mount(base) else {
        return;
    };
    mount.signal(SIGSTOP);
    assert_scrapes_skip(&d, &mount.dir);
    let t = Instant::now();
    let status = d.stop();
    assert!(status.success(), "{status:?}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "exit took {:?}",
        t.elapsed()
    );
    drop(mount);
}

/// The server has taken the statfs and never answers: that thread cannot
/// die until the server does (FUSE waits uninterruptibly for a request
/// already in user space), but scrapes go on the same way, the daemon's
/// shutdown finishes, and the process is gone once the mount is released.
#[test]
fn fuse_server_holding_statfs_times_out_one_mount() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let base = HungMount::base();
    let dir = base.path().join("mnt");
    let mut d = start(&dir);
    let Some(mount) = hung_mount(base) else {
        return;
    };
    assert_scrapes_skip(&d, &mount.dir);
    common::hangfs::assert_sigterm_exits_past(&mut d, mount);
}
