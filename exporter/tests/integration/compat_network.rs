//! node_exporter compatibility of the network and RAID collectors: netclass,
//! netdev's `receive_nohandler`, arp, udp_queues, bonding and mdadm. Each
//! test runs node_exporter (v1.12.1, `/root/go/bin/node_exporter` or
//! `$NODE_EXPORTER`) and usescope on the same fixture tree, with only that
//! collector enabled, and asserts the same families (name, type, HELP),
//! the same label sets and the same values. What differs on purpose is
//! asserted as such, by name (`known difference:` below; see
//! docs/collectors/network.md).
//!
//! Without node_exporter the tests skip through common/skip.rs, and fail
//! in CI (`USESCOPE_REQUIRE_BPF=1` or `CI=true`: every test must run).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::common::node_exporter::{
    self, Family, Pair, assert_same, families, scrape_both, success,
};
use crate::common::{Daemon, copy_tree, fixture};

/// [`assert_same`] for the families `keep` selects, whatever the success.
fn assert_same_families(
    pair: &Pair,
    collector: &str,
    keep: impl Fn(&str) -> bool,
) -> BTreeMap<String, Family> {
    node_exporter::assert_none(collector, &node_exporter::differences(pair, &keep));
    let mut us = families(&pair.usescope);
    us.retain(|k, _| keep(k));
    us
}

/// A fixture copy the test may edit, removed when it drops.
struct Tree(tempfile::TempDir);

impl Tree {
    fn path(&self) -> &Path {
        self.0.path()
    }
    fn of(name: &str) -> Tree {
        Tree(copy_tree(&fixture(name)))
    }
    fn empty() -> Tree {
        Tree(crate::common::temp_dir())
    }
    fn write(&self, rel: &str, text: &str) {
        let p = self.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}

#[test]
fn netclass() {
    let Some(bin) = crate::common::node_exporter() else {
        return;
    };
    let pair = scrape_both(
        &bin,
        &fixture("proc"),
        &fixture("sys"),
        &["--collector.netclass"],
    );
    let us = assert_same(&pair, "netclass");
    // Every family node_exporter's sysfs path has, on the fixture.
    assert_eq!(us.len(), 19, "{:?}", us.keys());
    // The EINVAL attributes of a down ifb are absent for both.
    assert!(
        !us["node_network_carrier"]
            .series
            .keys()
            .any(|l| l[0].1 == "ifb0")
    );
    // And with the flags.
    let pair = scrape_both(
        &bin,
        &fixture("proc"),
        &fixture("sys"),
        &[
            "--collector.netclass",
            "--collector.netclass.ignore-invalid-speed",
            "--collector.netclass.ignored-devices=^(v|br)",
        ],
    );
    let us = assert_same(&pair, "netclass");
    assert!(
        us["node_network_speed_bytes"]
            .series
            .values()
            .all(|v| *v >= 0.0)
    );
}

/// `node_network_receive_nohandler_total`: node_exporter 1.12 reads it over
/// netlink, which sees the live host whatever `--path.*` says, so this
/// compares the live host: usescope reads /sys/class/net/*/statistics.
#[test]
fn netdev_nohandler_on_the_live_host() {
    let Some(bin) = crate::common::node_exporter() else {
        return;
    };
    let pair = scrape_both(
        &bin,
        Path::new("/proc"),
        Path::new("/sys"),
        &["--collector.netdev"],
    );
    let name = "node_network_receive_nohandler_total";
    let ne = families(&pair.node_exporter)
        .remove(name)
        .expect("node_exporter has it");
    let us = families(&pair.usescope)
        .remove(name)
        .expect("usescope has it");
    assert_eq!((&ne.kind, &ne.help), (&us.kind, &us.help));
    assert_eq!(
        ne.series.keys().collect::<Vec<_>>(),
        us.series.keys().collect::<Vec<_>>()
    );
    // A counter of packets no protocol wanted: equal unless one arrived
    // between the two scrapes.
    for (labels, v) in &ne.series {
        assert!(
            us.series[labels] >= *v,
            "{labels:?}: {v} then {}",
            us.series[labels]
        );
    }
}

#[test]
fn arp() {
    let Some(bin) = crate::common::node_exporter() else {
        return;
    };
    // known difference: node_exporter 1.12 counts over netlink by default,
    // which ignores --path.procfs; its file mode reads what usescope reads.
    let pair = scrape_both(
        &bin,
        &fixture("proc"),
        &fixture("sys"),
        &["--collector.arp", "--no-collector.arp.netlink"],
    );
    assert_same(&pair, "arp");
    // Several devices, incomplete and permanent entries (captured in a
    // network namespace), and the device filters.
    let t = Tree::empty();
    t.write(
        "net/arp",
        "IP address       HW type     Flags       HW address            Mask     Device
10.9.1.7         0x1         0x2         02:00:00:00:01:07     *        br0
10.9.1.99        0x1         0x0         00:00:00:00:00:00     *        br0
10.9.0.77        0x1         0x0         00:00:00:00:00:00     *        va
10.9.0.2         0x1         0x2         7a:33:c3:ca:52:c5     *        va
10.9.0.50        0x1         0x6         02:00:00:00:00:50     *        va
",
    );
    let sys = fixture("sys");
    for flags in [
        &["--collector.arp", "--no-collector.arp.netlink"][..],
        &[
            "--collector.arp",
            "--no-collector.arp.netlink",
            "--collector.arp.device-exclude=^br",
        ],
        &[
            "--collector.arp",
            "--no-collector.arp.netlink",
            "--collector.arp.device-include=^v",
        ],
    ] {
        assert_same(&scrape_both(&bin, t.path(), &sys, flags), "arp");
    }
    // The live host, node_exporter over netlink (its default): the same
    // entries as the live /proc/net/arp.
    let live = scrape_both(
        &bin,
        Path::new("/proc"),
        Path::new("/sys"),
        &["--collector.arp"],
    );
    assert_same(&live, "arp");
}

#[test]
fn udp_queues() {
    let Some(bin) = crate::common::node_exporter() else {
        return;
    };
    let pair = scrape_both(
        &bin,
        &fixture("proc"),
        &fixture("sys"),
        &["--collector.udp_queues"],
    );
    let us = assert_same(&pair, "udp_queues");
    assert_eq!(us["node_udp_queues"].series.len(), 4);
    // Without IPv6: only the v4 series, for both.
    let t = Tree::of("proc");
    std::fs::remove_file(t.path().join("net/udp6")).unwrap();
    let pair = scrape_both(&bin, t.path(), &fixture("sys"), &["--collector.udp_queues"]);
    assert_eq!(
        assert_same(&pair, "udp_queues")["node_udp_queues"]
            .series
            .len(),
        2
    );
    // known difference: with neither file node_exporter reports no data as
    // a failure; usescope exports nothing and succeeds.
    std::fs::remove_file(t.path().join("net/udp")).unwrap();
    let pair = scrape_both(&bin, t.path(), &fixture("sys"), &["--collector.udp_queues"]);
    assert!(families(&pair.node_exporter).is_empty() && families(&pair.usescope).is_empty());
    assert_eq!(success(&pair.node_exporter, "udp_queues"), Some(0.0));
    assert_eq!(success(&pair.usescope, "udp_queues"), Some(1.0));
}

#[test]
fn bonding() {
    let Some(bin) = crate::common::node_exporter() else {
        return;
    };
    // bond0: one slave up, one down; bond1: its only slave "going back".
    let pair = scrape_both(
        &bin,
        &fixture("proc"),
        &fixture("sys"),
        &["--collector.bonding"],
    );
    let us = assert_same(&pair, "bonding");
    assert_eq!(us["node_bonding_active"].series.values().sum::<f64>(), 1.0);
    // The pre-4.x layout (slave_ISLAVE) and a bond without slaves.
    let t = Tree::empty();
    t.write("class/net/bonding_masters", "bond0 bond2\n");
    t.write("class/net/bond0/bonding/slaves", "eth0 eth1\n");
    t.write(
        "class/net/bond0/slave_eth0/bonding_slave/mii_status",
        "up\n",
    );
    t.write(
        "class/net/bond0/slave_eth1/bonding_slave/mii_status",
        "going down\n",
    );
    t.write("class/net/bond2/bonding/slaves", "");
    assert_same(
        &scrape_both(&bin, &fixture("proc"), t.path(), &["--collector.bonding"]),
        "bonding",
    );
    // known difference: a slave whose status file is gone (released
    // mid-scrape) fails node_exporter's collector (no data) and is left
    // out by usescope.
    std::fs::remove_dir_all(t.path().join("class/net/bond0/slave_eth1")).unwrap();
    let pair = scrape_both(&bin, &fixture("proc"), t.path(), &["--collector.bonding"]);
    assert_eq!(success(&pair.node_exporter, "bonding"), Some(0.0));
    assert_eq!(success(&pair.usescope, "bonding"), Some(1.0));
    let us = families(&pair.usescope);
    let bond0 = vec![("master".to_string(), "bond0".to_string())];
    assert_eq!(us["node_bonding_slaves"].series[&bond0], 1.0);
    // known difference: no bonding driver (no bonding_masters): node_exporter
    // reports no data as a failure, usescope exports nothing and succeeds.
    let none = Tree::empty();
    let pair = scrape_both(
        &bin,
        &fixture("proc"),
        none.path(),
        &["--collector.bonding"],
    );
    assert_eq!(success(&pair.node_exporter, "bonding"), Some(0.0));
    assert_eq!(success(&pair.usescope, "bonding"), Some(1.0));
    assert!(families(&pair.usescope).is_empty());
}

/// The synthetic mdstat (every state and level node_exporter handles:
/// resync, PENDING and DELAYED resyncs, recovery, check, reshape, a
/// degraded array with a failed and a spare disk, inactive, raid0/1/5/6/10,
/// linear) with the sysfs md attributes of the fixture.
#[test]
fn mdadm() {
    let Some(bin) = crate::common::node_exporter() else {
        return;
    };
    // md9's resync is DELAYED, so its md/sync_completed reads "delayed";
    // see below for what node_exporter makes of that. Here it reads "none".
    let sys = Tree::of("sys");
    sys.write("block/md9/md/sync_completed", "none\n");
    let pair = scrape_both(&bin, &fixture("large"), sys.path(), &["--collector.mdadm"]);
    let us = assert_same(&pair, "mdadm");
    assert_eq!(us.len(), 7, "{:?}", us.keys());
    let state = |dev: &str, s: &str| {
        us["node_md_state"].series[&vec![
            ("device".to_string(), dev.to_string()),
            ("state".to_string(), s.to_string()),
        ]]
    };
    assert_eq!(state("md1", "recovering"), 1.0);
    assert_eq!(state("md3", "check"), 1.0);
    assert_eq!(state("md8", "inactive"), 1.0);
    // A reshape has no label of its own: every state is 0, as in node_exporter.
    for s in ["active", "inactive", "recovering", "resync", "check"] {
        assert_eq!(state("md5", s), 0.0);
    }
    // known difference: a DELAYED resync's sync_completed is "delayed",
    // which procfs cannot parse ("%d / %d"): node_exporter fails the
    // collector after the /proc/mdstat families and exports no sysfs ones.
    // usescope does not read sync_completed (no metric uses it).
    let pair = scrape_both(
        &bin,
        &fixture("large"),
        &fixture("sys"),
        &["--collector.mdadm"],
    );
    let sysfs_family = |f: &str| f == "node_md_raid_disks" || f == "node_md_degraded";
    assert_same_families(&pair, "mdadm", |f| !sysfs_family(f));
    assert_eq!(success(&pair.node_exporter, "mdadm"), Some(0.0));
    assert_eq!(success(&pair.usescope, "mdadm"), Some(1.0));
    assert!(
        !families(&pair.node_exporter)
            .keys()
            .any(|f| sysfs_family(f))
    );
    assert_eq!(families(&pair.usescope).len(), 7);
    // Arrays without sysfs attributes: only the /proc/mdstat families.
    let pair = scrape_both(
        &bin,
        &fixture("large"),
        Tree::empty().path(),
        &["--collector.mdadm"],
    );
    assert_eq!(assert_same(&pair, "mdadm").len(), 5);
    // known difference: no /proc/mdstat (no md driver): node_exporter
    // reports no data as a failure; usescope exports nothing and succeeds.
    let pair = scrape_both(
        &bin,
        &fixture("proc"),
        &fixture("sys"),
        &["--collector.mdadm"],
    );
    assert!(families(&pair.node_exporter).is_empty() && families(&pair.usescope).is_empty());
    assert_eq!(success(&pair.node_exporter, "mdadm"), Some(0.0));
    assert_eq!(success(&pair.usescope, "mdadm"), Some(1.0));
}

/// node_exporter's flags for these collectors start usescope too, so a
/// node_exporter command line carries over.
#[test]
fn node_exporter_flags_are_accepted() {
    let d = Daemon::start(&[
        &format!("--path.procfs={}", fixture("proc").display()),
        &format!("--path.sysfs={}", fixture("sys").display()),
        "--collector.netclass.ignored-devices=^veth",
        "--collector.netclass.ignore-invalid-speed",
        "--no-collector.netclass.ignore-invalid-speed",
        "--collector.netclass.netlink",
        "--no-collector.arp.netlink",
        "--collector.arp.device-include=^eth",
        "--collector.arp.device-exclude=^lo$",
        "--no-probe.runqlat",
        "--no-probe.cachestat",
        "--no-probe.drops",
    ]);
    let expo = d.scrape();
    for c in ["netclass", "arp", "udp_queues", "bonding", "mdadm"] {
        assert_eq!(success(&expo, c), Some(1.0), "{c}");
    }
    // --no- cleared ignore-invalid-speed again: eth0's -1 is exported.
    assert!(expo.contains("node_network_speed_bytes{device=\"eth0\"} -125000"));
    assert!(
        d.wait_for_log("has no effect", Duration::from_secs(5))
            .is_some()
    );
}
