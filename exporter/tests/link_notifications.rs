//! netclass reads most of an interface's sysfs attributes again only after
//! an rtnetlink link notification names the interface
//! (exporter/src/kernel/link_events.rs). Against the real daemon and kernel, as
//! root: every kind of change an operator makes must show at the next
//! scrape, the attributes must really be skipped between changes (or the
//! saving is gone), and a sysfs mounted from another network namespace,
//! whose changes never reach the daemon's socket, must be read in full.

mod common;

use std::time::Duration;

use common::host::{DeleteLink, DeleteNetns, Unmount, proc_io, quietest_scrape, run};

fn ip(args: &[&str]) {
    run("ip", args);
}

/// Read system calls the process has made.
fn read_calls(pid: u32) -> u64 {
    proc_io(pid, "syscr")
}

fn value(text: &str, family: &str, device: &str) -> Option<f64> {
    common::sample(
        text,
        &format!(r#"node_network_{family}{{device="{device}"}}"#),
    )
}

fn info_line<'a>(text: &'a str, device: &str) -> &'a str {
    let device = format!(r#"device="{device}""#);
    text.lines()
        .find(|l| l.starts_with("node_network_info{") && l.contains(&device))
        .unwrap_or_else(|| panic!("no node_network_info for {device}:\n{text}"))
}

/// The attributes read only after a notification.
const FULL_READ: u64 = 15;

#[test]
fn each_kind_of_change_shows_at_the_next_scrape() {
    if !common::skip::unless_root("to create a veth pair and change it") {
        return;
    }
    let id = std::process::id() % 100_000;
    let (a, b) = (format!("usn{id}a"), format!("usn{id}b"));
    ip(&["link", "add", &a, "type", "veth", "peer", "name", &b]);
    let _delete = DeleteLink(a.clone());
    let d = common::Daemon::start(&["--collector.disable-defaults", "--collector.netclass"]);
    let pid = d.child.id();
    let text = d.scrape();
    assert_eq!(value(&text, "mtu_bytes", &a), Some(1500.0), "{text}");

    // Between changes the notified attributes are not read.
    let quiet = quietest_scrape(&d, "syscr");

    let before = read_calls(pid);
    ip(&["link", "set", &a, "mtu", "1400"]);
    let text = d.scrape();
    let after_change = read_calls(pid) - before;
    assert_eq!(value(&text, "mtu_bytes", &a), Some(1400.0), "mtu 1400");
    assert!(
        after_change >= quiet + FULL_READ,
        "a scrape with no change made {quiet} reads, the one after {a}'s MTU changed {after_change}: \
         the notified attributes are read at every scrape, or not re-read after a notification"
    );

    ip(&["link", "set", &a, "address", "02:00:00:00:00:42"]);
    let text = d.scrape();
    assert!(
        info_line(&text, &a).contains(r#"address="02:00:00:00:00:42""#),
        "{text}"
    );

    ip(&["link", "set", &a, "txqueuelen", "77"]);
    let text = d.scrape();
    assert_eq!(
        value(&text, "transmit_queue_length", &a),
        Some(77.0),
        "txqueuelen"
    );

    // Group and alias are announced only while the interface is up (and
    // the group not at all when set through sysfs): read every scrape.
    ip(&["link", "set", &a, "group", "5"]);
    let text = d.scrape();
    assert_eq!(value(&text, "net_dev_group", &a), Some(5.0), "group");
    std::fs::write(format!("/sys/class/net/{a}/netdev_group"), "6").unwrap();
    let text = d.scrape();
    assert_eq!(
        value(&text, "net_dev_group", &a),
        Some(6.0),
        "group via sysfs"
    );

    ip(&["link", "set", &a, "alias", "uplink to b"]);
    let text = d.scrape();
    assert!(
        info_line(&text, &a).contains(r#"ifalias="uplink to b""#),
        "{text}"
    );

    // Up on both ends: carrier comes (through linkwatch, which may take a
    // second to notify).
    ip(&["link", "set", &b, "up"]);
    ip(&["link", "set", &a, "up"]);
    let text = eventually(&d, |t| value(t, "carrier", &a) == Some(1.0));
    assert_eq!(value(&text, "up", &a), Some(1.0), "{a} up");
    assert!(
        info_line(&text, &a).contains(r#"adminstate="up""#),
        "{text}"
    );
    let ups = value(&text, "carrier_up_changes_total", &a).unwrap();
    assert!(
        ups >= 1.0,
        "carrier came up, yet carrier_up_changes_total is {ups}"
    );

    // The peer goes down: a veth loses carrier with it.
    ip(&["link", "set", &b, "down"]);
    let text = eventually(&d, |t| value(t, "carrier", &a) == Some(0.0));
    assert_eq!(value(&text, "up", &a), Some(0.0), "{b} down: {a} is not up");
    let downs = value(&text, "carrier_down_changes_total", &a).unwrap();
    assert!(
        downs >= 1.0,
        "carrier went down, yet carrier_down_changes_total is {downs}"
    );

    // Promiscuous mode: IFF_PROMISC (0x100) in flags.
    ip(&["link", "set", &a, "promisc", "on"]);
    let text = d.scrape();
    let flags = value(&text, "flags", &a).unwrap() as u64;
    assert_eq!(flags & 0x100, 0x100, "promisc on, flags {flags:#x}");

    // Down: operational state and carrier at once (sysfs masks them; the
    // flags change is announced).
    ip(&["link", "set", &b, "up"]);
    eventually(&d, |t| value(t, "up", &a) == Some(1.0));
    ip(&["link", "set", &a, "down"]);
    let text = d.scrape();
    assert_eq!(value(&text, "up", &a), Some(0.0), "{a} set down");
    assert!(
        info_line(&text, &a).contains(r#"adminstate="down""#),
        "{text}"
    );
    assert_eq!(
        value(&text, "carrier", &a),
        None,
        "{a} is down: no carrier series"
    );
}

/// Scrapes until `ok` holds, for at most 5 s (linkwatch delays carrier
/// notifications by up to a second). Each scrape that does not show it is
/// a scrape before the notification, which is allowed to lag.
fn eventually(d: &common::Daemon, ok: impl Fn(&str) -> bool) -> String {
    let end = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let text = d.scrape();
        if ok(&text) || std::time::Instant::now() > end {
            assert!(ok(&text), "not seen within 5 s:\n{text}");
            return text;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `--path.sysfs` at a sysfs mounted from another network namespace: the
/// daemon's socket never hears of those interfaces' changes. The index
/// check must notice, and from then on every attribute is read at every
/// scrape, loopback's too (whose name and index the two namespaces share).
#[test]
fn sysfs_of_another_network_namespace_is_read_in_full() {
    if !common::skip::unless_root("to create a network namespace and mount its sysfs") {
        return;
    }
    let id = std::process::id() % 100_000;
    let (ns, a, b) = (
        format!("usn{id}ns"),
        format!("usn{id}x"),
        format!("usn{id}y"),
    );
    ip(&["netns", "add", &ns]);
    let _ns = DeleteNetns(ns.clone());
    ip(&["link", "add", &a, "type", "veth", "peer", "name", &b]);
    let _delete = DeleteLink(a.clone());
    ip(&["link", "set", &b, "netns", &ns]);
    let sysfs = common::temp_dir();
    let path = sysfs.path().to_str().unwrap().to_string();
    // nsenter changes the network namespace only: the mount is made in
    // ours, and the sysfs it makes shows the other namespace's interfaces.
    run(
        "nsenter",
        &[
            &format!("--net=/run/netns/{ns}"),
            "mount",
            "-t",
            "sysfs",
            "sysfs",
            &path,
        ],
    );
    let _unmount = Unmount(sysfs.path().to_path_buf());
    let d = common::Daemon::start(&[
        "--collector.disable-defaults",
        "--collector.netclass",
        &format!("--path.sysfs={path}"),
    ]);
    let text = d.scrape();
    assert_eq!(value(&text, "mtu_bytes", &b), Some(1500.0), "{text}");
    for _ in 0..3 {
        d.scrape();
    }
    assert!(
        d.wait_for_log("under other indexes", Duration::from_secs(2))
            .is_some(),
        "three scrapes of another namespace's sysfs, and notifications are still trusted:\n{}",
        d.log().join("\n")
    );
    ip(&["-n", &ns, "link", "set", &b, "mtu", "1300"]);
    ip(&["-n", &ns, "link", "set", "lo", "mtu", "1234"]);
    let text = d.scrape();
    assert_eq!(value(&text, "mtu_bytes", &b), Some(1300.0), "{text}");
    assert_eq!(value(&text, "mtu_bytes", "lo"), Some(1234.0), "{text}");
}
