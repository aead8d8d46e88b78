//! Absent sources are remembered until the kernel could have created them,
//! and listings of device directories are replayed until a uevent
//! (exporter/src/kernel/absence.rs): a source that appears must still be seen.
//! Both signals are exercised for real, as root: uevents (written to a
//! device's `uevent` file, or sent by creating a network interface) and a
//! mount.

mod common;

use std::path::Path;

use common::host::{DeleteLink, Unmount, run};

use usescope::kernel::absence::{Epoch, Memo, Watch};

/// The library side: a uevent moves the epoch, so the memo forgets. Without
/// one, the memo holds (retried: another process may send a uevent at any
/// moment, but not at every one of ten).
#[test]
fn a_uevent_makes_absent_paths_be_looked_up_again() {
    if !common::skip::unless_root("to send a uevent (write /sys/class/net/lo/uevent)") {
        return;
    }
    let mut watch = Watch::new(Path::new("/proc"), Path::new("/sys"));
    watch.refresh();
    let path = Path::new("/sys/class/usescope-test-absent");
    let mut memo = Memo::default();
    let held = (0..10).any(|_| {
        memo.absent(Epoch::now(), path);
        watch.refresh();
        memo.still_absent()
    });
    assert!(held, "the memo never held across a quiet scrape");

    memo.absent(Epoch::now(), path);
    std::fs::write("/sys/class/net/lo/uevent", "change").unwrap();
    watch.refresh();
    assert!(
        !memo.still_absent(),
        "a uevent was sent, yet the absent path is still taken as absent"
    );
}

/// The daemon side: bcache's sysfs root is absent from a real sysfs, and
/// is remembered as absent; a tmpfs mounted over `fs/` with a bcache tree
/// in it must be reported at the next scrape.
#[test]
fn a_source_that_a_mount_brings_is_reported_at_the_next_scrape() {
    if !common::skip::unless_root("to mount sysfs and tmpfs") {
        return;
    }
    let root = common::temp_dir();
    let sys = root.path().join("sys");
    std::fs::create_dir(&sys).unwrap();
    run("mount", &["-t", "sysfs", "sysfs", sys.to_str().unwrap()]);
    let _unmount = Unmount(sys.clone());
    assert!(
        !sys.join("fs/bcache").exists(),
        "this kernel has bcache: the test needs a source it lacks"
    );

    let d = common::Daemon::start(&[
        "--collector.disable-defaults",
        "--collector.bcache",
        &format!("--path.sysfs={}", sys.display()),
    ]);
    for _ in 0..3 {
        let text = d.scrape();
        assert!(
            !text.contains("node_bcache_"),
            "bcache reported before it exists"
        );
        assert_eq!(
            common::sample(
                &text,
                r#"node_scrape_collector_success{collector="bcache"}"#
            ),
            Some(1.0)
        );
    }

    let fs = sys.join("fs");
    run("mount", &["-t", "tmpfs", "tmpfs", fs.to_str().unwrap()]);
    let _unmount_fs = Unmount(fs.clone());
    common::copy_dir(&common::fixture("sys/fs/bcache"), &fs.join("bcache"));

    let text = d.scrape();
    assert!(
        text.contains("node_bcache_"),
        "bcache appeared with a mount, but the next scrape did not report it"
    );
}

/// The daemon side of device listings: `class/net` is replayed between
/// uevents, so an interface created, renamed or deleted between two
/// scrapes must show in the very next one, in netclass's series and in
/// netdev's `rx_nohandler` (which finds the interface in the listing).
#[test]
fn a_network_interface_that_comes_renamed_and_goes_is_seen_at_the_next_scrape() {
    if !common::skip::unless_root("to create a veth pair") {
        return;
    }
    let id = std::process::id() % 100_000;
    let (first, peer, renamed) = (
        format!("usc{id}a"),
        format!("usc{id}b"),
        format!("usc{id}c"),
    );
    let d = common::Daemon::start(&[
        "--collector.disable-defaults",
        "--collector.netclass",
        "--collector.netdev",
    ]);
    let reported = |text: &str, name: &str| {
        [
            format!(r#"node_network_mtu_bytes{{device="{name}"}}"#),
            format!(r#"node_network_receive_nohandler_total{{device="{name}"}}"#),
        ]
        .map(|series| common::sample(text, &series).is_some())
    };
    for _ in 0..3 {
        assert_eq!(reported(&d.scrape(), &first), [false, false]);
    }

    run(
        "ip",
        &["link", "add", &first, "type", "veth", "peer", "name", &peer],
    );
    let _delete = DeleteLink(peer.clone());
    let text = d.scrape();
    assert_eq!(
        reported(&text, &first),
        [true, true],
        "{first} was created, but the next scrape does not report it (mtu, nohandler)"
    );

    run("ip", &["link", "set", &first, "name", &renamed]);
    let text = d.scrape();
    assert_eq!(
        reported(&text, &first),
        [false, false],
        "{first} was renamed"
    );
    assert_eq!(
        reported(&text, &renamed),
        [true, true],
        "{first} was renamed {renamed}"
    );

    run("ip", &["link", "del", &renamed]);
    let text = d.scrape();
    assert_eq!(
        reported(&text, &renamed),
        [false, false],
        "{renamed} was deleted"
    );
    assert_eq!(
        reported(&text, &peer),
        [false, false],
        "{peer} went with it"
    );
}
