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

mod common;

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Daemon, copy_tree, fixture, http_get};

/// Labels (sorted by name) → value.
type Series = BTreeMap<Vec<(String, String)>, f64>;

/// One metric family of an exposition.
#[derive(Debug, Default, PartialEq)]
struct Family {
    kind: String,
    help: String,
    series: Series,
}

/// Family name → family, for the `node_*` families a collector emits
/// (the scrape's own `node_scrape_*` and the exporter's build info left
/// out). Counter samples are keyed by their family name.
fn families(expo: &str) -> BTreeMap<String, Family> {
    let mut out: BTreeMap<String, Family> = BTreeMap::new();
    let wanted = |n: &str| {
        n.starts_with("node_") && !n.starts_with("node_scrape_") && !n.starts_with("node_exporter_")
    };
    for line in expo.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            if wanted(name) {
                out.entry(name.to_string()).or_default().help = unescape(help);
            }
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            if wanted(name) {
                out.entry(name.to_string()).or_default().kind = kind.to_string();
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            let (name, labels, value) = sample_of(line);
            if wanted(&name) {
                out.entry(name).or_default().series.insert(labels, value);
            }
        }
    }
    out
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some(o) => out.push(o),
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `name{a="x",b="y"} value` → (name, sorted labels, value).
fn sample_of(line: &str) -> (String, Vec<(String, String)>, f64) {
    let (head, value) = line.rsplit_once(' ').unwrap();
    let value: f64 = value.parse().unwrap_or_else(|_| panic!("value in {line}"));
    let Some((name, rest)) = head.split_once('{') else {
        return (head.to_string(), Vec::new(), value);
    };
    let mut labels = Vec::new();
    let mut rest = rest.strip_suffix('}').unwrap();
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"").unwrap();
        let mut val = String::new();
        let mut end = 0;
        let mut chars = after.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => val.push('\n'),
                    Some((_, o)) => val.push(o),
                    None => {}
                },
                '"' => {
                    end = i + 1;
                    break;
                }
                c => val.push(c),
            }
        }
        labels.push((key.to_string(), val));
        rest = after[end..].strip_prefix(',').unwrap_or(&after[end..]);
    }
    labels.sort();
    (name.to_string(), labels, value)
}

/// A node_exporter process, killed when dropped.
struct NodeExporter {
    child: Child,
    addr: SocketAddr,
}

impl Drop for NodeExporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl NodeExporter {
    fn start(bin: &Path, args: &[String]) -> NodeExporter {
        // A free port: bind, note it, release it for node_exporter.
        let addr = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let child = Command::new(bin)
            .arg(format!("--web.listen-address={addr}"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start node_exporter");
        let ne = NodeExporter { child, addr };
        let end = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(
                Instant::now() < end,
                "node_exporter did not listen on {addr}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        ne
    }

    fn scrape(&self) -> String {
        let r = http_get(self.addr, "/metrics", &[]);
        assert_eq!(r.status, 200);
        r.text()
    }
}

/// Both exporters' expositions with the same roots and flags.
struct Pair {
    node_exporter: String,
    usescope: String,
}

fn scrape_both(bin: &Path, procfs: &Path, sysfs: &Path, flags: &[&str]) -> Pair {
    let mut args = vec![
        format!("--path.procfs={}", procfs.display()),
        format!("--path.sysfs={}", sysfs.display()),
        "--collector.disable-defaults".to_string(),
    ];
    args.extend(flags.iter().map(|s| s.to_string()));
    let ne = NodeExporter::start(bin, &args);
    let mut ours = args.clone();
    ours.extend(
        [
            "--no-probe.runqlat",
            "--no-probe.cachestat",
            "--no-probe.drops",
        ]
        .map(String::from),
    );
    let refs: Vec<&str> = ours.iter().map(String::as_str).collect();
    let d = Daemon::start(&refs);
    Pair {
        node_exporter: ne.scrape(),
        usescope: d.scrape(),
    }
}

fn success(expo: &str, collector: &str) -> Option<f64> {
    common::sample(
        expo,
        &format!("node_scrape_collector_success{{collector=\"{collector}\"}}"),
    )
}

/// Asserts the two expositions hold the same `node_*` families, types,
/// HELP, label sets and values, and that both collectors succeeded.
fn assert_same(pair: &Pair, collector: &str) -> BTreeMap<String, Family> {
    let us = assert_same_families(pair, collector, |_| true);
    assert_eq!(
        success(&pair.node_exporter, collector),
        Some(1.0),
        "node_exporter {collector}"
    );
    assert_eq!(
        success(&pair.usescope, collector),
        Some(1.0),
        "usescope {collector}"
    );
    us
}

/// [`assert_same`] for the families `keep` selects, whatever the success.
fn assert_same_families(
    pair: &Pair,
    collector: &str,
    keep: impl Fn(&str) -> bool,
) -> BTreeMap<String, Family> {
    let mut ne = families(&pair.node_exporter);
    let mut us = families(&pair.usescope);
    ne.retain(|k, _| keep(k));
    us.retain(|k, _| keep(k));
    let mut problems = Vec::new();
    for name in ne
        .keys()
        .chain(us.keys())
        .collect::<std::collections::BTreeSet<_>>()
    {
        match (ne.get(name), us.get(name)) {
            (Some(_), None) => problems.push(format!("{name}: only node_exporter has it")),
            (None, Some(_)) => problems.push(format!("{name}: only usescope has it")),
            (Some(a), Some(b)) => {
                if a.kind != b.kind {
                    problems.push(format!("{name}: type {} vs {}", a.kind, b.kind));
                }
                if a.help != b.help {
                    problems.push(format!("{name}: HELP {:?} vs {:?}", a.help, b.help));
                }
                for (labels, v) in &a.series {
                    match b.series.get(labels) {
                        None => problems.push(format!("{name}{labels:?}: missing in usescope")),
                        Some(w) if w != v => {
                            problems.push(format!("{name}{labels:?}: {v} vs usescope {w}"))
                        }
                        Some(_) => {}
                    }
                }
                for labels in b.series.keys().filter(|l| !a.series.contains_key(*l)) {
                    problems.push(format!("{name}{labels:?}: only usescope has it"));
                }
            }
            (None, None) => unreachable!(),
        }
    }
    assert!(
        problems.is_empty(),
        "{collector}: {} differences from node_exporter:\n{}",
        problems.len(),
        problems.join("\n")
    );
    us
}

/// A fresh copy of a fixture tree, removed when dropped.
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
        Tree(common::temp_dir())
    }
    fn write(&self, rel: &str, text: &str) {
        let p = self.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}

#[test]
fn netclass() {
    let Some(bin) = common::node_exporter() else {
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
    let Some(bin) = common::node_exporter() else {
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
    let Some(bin) = common::node_exporter() else {
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
    let Some(bin) = common::node_exporter() else {
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
    let Some(bin) = common::node_exporter() else {
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
    let Some(bin) = common::node_exporter() else {
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
