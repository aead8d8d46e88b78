//! A read that never returns, made for real: a FUSE filesystem (Debian's
//! python3-fusepy, tests/tools/hangfs.py) whose server is stopped, or which
//! takes the read and never answers. The source file is a symlink into it.
//!
//! The scrape that meets it must answer by its deadline (503 naming the
//! collector), every later scrape must answer at once without that
//! collector, and SIGTERM must still end the daemon.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::hangfs::{HungMount, SIGSTOP};
use common::{Daemon, http_get, sample};

/// A copy of the fixture procfs whose `loadavg` points into the mount.
fn tree_with_loadavg_in(mount: &Path) -> tempfile::TempDir {
    let tree = common::copy_tree(&common::fixture("proc"));
    let loadavg = tree.path().join("loadavg");
    std::fs::remove_file(&loadavg).unwrap();
    std::os::unix::fs::symlink(mount.join("loadavg"), loadavg).unwrap();
    tree
}

fn start(tree: &Path) -> Daemon {
    Daemon::start(&[
        &format!("--path.procfs={}", tree.display()),
        "--web.scrape-timeout=2s",
        "--no-probe.runqlat",
        "--no-probe.cachestat",
        "--no-probe.drops",
    ])
}

/// The first scrape answers 503 by its deadline; the next ones answer
/// quickly, with loadavg failed and everything else there.
fn assert_deadline_then_skip(d: &Daemon) {
    let t = Instant::now();
    let first = http_get(d.addr, "/metrics", &[]);
    let took = t.elapsed();
    assert_eq!(first.status, 503, "{}", first.text());
    assert!(
        took >= Duration::from_millis(1800) && took < Duration::from_secs(4),
        "the stuck scrape answered after {took:?}, not at its 2 s deadline"
    );
    assert!(first.text().contains("loadavg"), "{}", first.text());
    for _ in 0..3 {
        let t = Instant::now();
        let r = http_get(d.addr, "/metrics", &[]);
        assert_eq!(r.status, 200);
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "a later scrape took {:?}",
            t.elapsed()
        );
        let expo = r.text();
        assert_eq!(
            sample(
                &expo,
                "node_scrape_collector_success{collector=\"loadavg\"}"
            ),
            Some(0.0)
        );
        assert_eq!(
            sample(&expo, "node_scrape_collector_success{collector=\"stat\"}"),
            Some(1.0)
        );
        assert!(expo.contains("node_cpu_seconds_total{"));
        assert!(!expo.contains("node_load1 "));
    }
    // Prometheus' own timeout header shortens the deadline; a stuck
    // collector is skipped, so this one is fast anyway.
    let r = http_get(
        d.addr,
        "/metrics",
        &[("X-Prometheus-Scrape-Timeout-Seconds", "0.5")],
    );
    assert_eq!(r.status, 200);
    assert_eq!(http_get(d.addr, "/", &[]).status, 200);
    assert!(
        d.log()
            .iter()
            .any(|l| l.contains("scrape deadline exceeded") && l.contains("loadavg")),
        "no log line names the stuck collector:\n{}",
        d.log().join("\n")
    );
}

/// The server process is stopped: every request on the mount waits in the
/// kernel, killably. SIGTERM ends the daemon within 5 s.
#[test]
fn stopped_fuse_server_costs_one_collector_and_sigterm_still_exits() {
    let Some(mount) = HungMount::mount(HungMount::base()) else {
        return;
    };
    mount.signal(SIGSTOP);
    let tree = tree_with_loadavg_in(&mount.dir);
    let d = start(tree.path());
    assert_deadline_then_skip(&d);
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

/// The server has taken the read and never answers. The kernel will not
/// let that one thread die until the server answers or goes away (FUSE
/// waits uninterruptibly for a request already in user space), but the
/// daemon's own shutdown finishes: it stops serving and closes its BPF
/// links, and the process is gone as soon as the mount is released.
#[test]
fn fuse_server_holding_a_read_costs_one_collector() {
    let Some(mount) = HungMount::mount(HungMount::base()) else {
        return;
    };
    let tree = tree_with_loadavg_in(&mount.dir);
    let mut d = start(tree.path());
    assert_deadline_then_skip(&d);
    common::hangfs::assert_sigterm_exits_past(&mut d, mount);
}
