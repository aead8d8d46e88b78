//! /sys/class/net/IFACE/* → `node_network_up`, `node_network_info` and the
//! `node_network_*` device properties, node_exporter's netclass collector
//! (collector/netclass_linux.go, prometheus/procfs sysfs/net_class.go).
//!
//! Per interface: operational state, carrier and its changes, speed, MTU,
//! transmit queue length, flags and the identifiers dashboards join on
//! (`iface_id`, `iface_link`). A link that flaps (`carrier_changes_total`
//! rising) or runs below its expected speed is an error of the USE method
//! that the byte counters of netdev do not show.
//!
//! Each interface is a directory of one-value attribute files; every
//! entry of class/net that is not a regular file (`bonding_masters` is one)
//! is an interface, as in procfs. An attribute the device does not report
//! now reads as EINVAL or EOPNOTSUPP (a virtual device's `speed`, a down
//! link's `carrier`): its series is left out, which is what node_exporter
//! does, and is not a failure. An interface deleted while it is read
//! answers ENODEV (sysfs removed the file under an open descriptor, or,
//! on recent kernels (seen on 6.18), `carrier`, `speed`, `duplex`, ... of
//! an interface being unregistered): that interface is left out of the
//! scrape, where node_exporter fails the collector, which on a host that
//! starts and stops containers cost every interface's series. Anything
//! else that cannot be read, or that does not parse, fails the collector
//! naming the file.
//!
//! Cost: 22 small files per interface. Their descriptors are kept and
//! re-read with pread (0.55 µs each against 7 µs for an open, measured on
//! the development VM) up to the process-wide budget of
//! [`crate::kernel::source::attribute_fd_budget`]; on a host with more interfaces
//! than that covers, the rest are reopened every scrape. A name that comes
//! back with another inode (deleted and recreated, or renamed onto) gets
//! fresh descriptors.
//!
//! On the live sysfs, 15 of the 22 are read again only after the kernel
//! announces a change of that interface over rtnetlink
//! ([`crate::kernel::link_events`]): every path that changes them sends an
//! RTM_NEWLINK. MTU, addresses, queue length and type notify through
//! their netdevice events whatever the interface's state; carrier,
//! operational and dormant state through linkwatch while the interface is
//! up, and while it is down sysfs masks them (EINVAL, `down`). The other
//! seven are read at every scrape, because they change without one:
//! `speed` and `duplex` (link renegotiation reaches the ethtool netlink
//! family, not this one), `flags` (the kernel turns promiscuous mode on
//! itself when a device without unicast filtering gets a secondary
//! address), `iflink` (a veth's peer index moves with the peer's
//! namespace), `netdev_group` (its sysfs file sets it silently),
//! `link_mode` and `ifalias` (netlink announces them only while the
//! interface is up). One known lag: the carrier counters are not masked,
//! and a driver that moves carrier while the interface is down does so
//! without a notification; they are refreshed when it comes up.
//! Everything is read again when the socket overflowed, when anything but
//! a link message arrives, and while sysfs and the socket disagree on an
//! interface's index (sysfs from another network namespace than the
//! daemon's: after three such scrapes, notifications are no longer used).
//!
//! usescope reads sysfs only: `--collector.netclass.netlink` is accepted
//! and logs a warning. With it node_exporter reads netlink instead, which
//! changes `node_network_info` (no `adminstate` label, another HELP) and
//! adds `node_network_altnames_info`.

use regex::Regex;

use crate::collectors::{Flag, FlagKind, Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError, excerpt};
use crate::kernel::link_events::LinkEvents;
use crate::kernel::parse::{lines, parse_fresh};
use crate::kernel::source::{DirListing, SourceFile};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const IGNORED: &str = "collector.netclass.ignored-devices";
pub const IGNORE_INVALID_SPEED: &str = "collector.netclass.ignore-invalid-speed";
pub const NETLINK: &str = "collector.netclass.netlink";

pub const SPEC: Spec = Spec {
    name: "netclass",
    default_enabled: true,
    help: "Network interface properties from /sys/class/net",
    flags: &[
        Flag {
            name: IGNORED,
            help: "Regexp of net devices to ignore for netclass collector.",
            default: Some("^$"),
            kind: FlagKind::Regex,
            conflicts_with: None,
        },
        Flag {
            name: IGNORE_INVALID_SPEED,
            help: "Ignore devices where the speed is invalid. This will be the default behavior in 2.x.",
            default: Some("false"),
            kind: FlagKind::Bool,
            conflicts_with: None,
        },
        Flag {
            name: NETLINK,
            help: "Accepted for node_exporter compatibility and ignored: usescope always reads /sys/class/net",
            default: Some("false"),
            kind: FlagKind::Bool,
            conflicts_with: None,
        },
    ],
    build,
    sources: &[
        Source::sys("class/net/eth0/addr_assign_type", "netclass_int"),
        Source::sys("class/net/eth0/carrier", "netclass_int"),
        Source::sys("class/net/eth0/carrier_changes", "netclass_int"),
        Source::sys("class/net/eth0/carrier_up_count", "netclass_int"),
        Source::sys("class/net/eth0/carrier_down_count", "netclass_int"),
        Source::sys("class/net/eth0/dev_id", "netclass_int"),
        Source::sys("class/net/eth0/dormant", "netclass_int"),
        Source::sys("class/net/eth0/flags", "netclass_int"),
        Source::sys("class/net/eth0/ifindex", "netclass_int"),
        Source::sys("class/net/eth0/iflink", "netclass_int"),
        Source::sys("class/net/eth0/link_mode", "netclass_int"),
        Source::sys("class/net/eth0/mtu", "netclass_int"),
        Source::sys("class/net/eth0/name_assign_type", "netclass_int"),
        Source::sys("class/net/eth0/netdev_group", "netclass_int"),
        Source::sys("class/net/eth0/speed", "netclass_int"),
        Source::sys("class/net/eth0/tx_queue_len", "netclass_int"),
        Source::sys("class/net/eth0/type", "netclass_int"),
        Source::sys("class/net/eth0/address", "netclass_address"),
        Source::sys("class/net/eth0/broadcast", "netclass_address"),
        Source::sys("class/net/eth0/duplex", "netclass_word"),
        Source::sys("class/net/eth0/operstate", "netclass_word"),
        Source::sys("class/net/va/ifalias", "netclass_alias"),
    ],
    parsers: &[
        Parser::numeric("netclass_int", |t| parse_fresh(t, parse_int_into).map(drop)),
        Parser::text("netclass_address", |t| {
            parse_fresh(t, parse_address_into).map(drop)
        }),
        Parser::text("netclass_word", |t| {
            parse_fresh(t, parse_word_into).map(drop)
        }),
        Parser::text("netclass_alias", |t| {
            parse_fresh(t, parse_alias_into).map(drop)
        }),
    ],
};

/// A property family as node_exporter's getFieldDesc names it:
/// `node_network_NAME`, HELP `Network device property: NAME` (no full stop).
macro_rules! prop {
    ($kind:ident, $prop:literal) => {
        Desc::$kind(
            concat!("node_network_", $prop),
            concat!("Network device property: ", $prop),
        )
    };
}

/// The numeric attributes, in node_exporter's output order: file, family.
const NUMERIC: [(&str, Desc); 17] = [
    ("addr_assign_type", prop!(gauge, "address_assign_type")),
    ("carrier", prop!(gauge, "carrier")),
    ("carrier_changes", prop!(counter, "carrier_changes_total")),
    (
        "carrier_up_count",
        prop!(counter, "carrier_up_changes_total"),
    ),
    (
        "carrier_down_count",
        prop!(counter, "carrier_down_changes_total"),
    ),
    ("dev_id", prop!(gauge, "device_id")),
    ("dormant", prop!(gauge, "dormant")),
    ("flags", prop!(gauge, "flags")),
    ("ifindex", prop!(gauge, "iface_id")),
    ("iflink", prop!(gauge, "iface_link")),
    ("link_mode", prop!(gauge, "iface_link_mode")),
    ("mtu", prop!(gauge, "mtu_bytes")),
    ("name_assign_type", prop!(gauge, "name_assign_type")),
    ("netdev_group", prop!(gauge, "net_dev_group")),
    ("speed", prop!(gauge, "speed_bytes")),
    ("tx_queue_len", prop!(gauge, "transmit_queue_length")),
    ("type", prop!(gauge, "protocol_type")),
];
const FLAGS: usize = 7;
const IFINDEX: usize = 8;
const IFLINK: usize = 9;
const LINK_MODE: usize = 10;
const NETDEV_GROUP: usize = 13;
const SPEED: usize = 14;

/// The text attributes.
const TEXT: [&str; 5] = ["address", "broadcast", "duplex", "operstate", "ifalias"];
const ADDRESS: usize = 0;
const BROADCAST: usize = 1;
const DUPLEX: usize = 2;
const OPERSTATE: usize = 3;
const IFALIAS: usize = 4;

/// The attributes that change without a link notification (see the module
/// doc): read at every scrape.
fn read_every_scrape_numeric(k: usize) -> bool {
    matches!(k, FLAGS | IFLINK | LINK_MODE | NETDEV_GROUP | SPEED)
}
fn read_every_scrape_text(k: usize) -> bool {
    matches!(k, DUPLEX | IFALIAS)
}

/// Consecutive scrapes in which sysfs and the notification socket
/// disagreed on an interface's index, after which notifications are
/// no longer used.
const MISMATCHES_TO_GIVE_UP: u32 = 3;

const UP: Desc = Desc::gauge(
    "node_network_up",
    "Value is 1 if operstate is 'up', 0 otherwise.",
);
const INFO: Desc = Desc::gauge(
    "node_network_info",
    "Non-numeric data from /sys/class/net/<iface>, value is always 1.",
);

/// The value of a one-line attribute: the file holds one line (its `\n`
/// optional), and the value is that line without surrounding whitespace,
/// as procfs's SysReadFile trims it.
fn value_of(s: &str) -> Result<&str, ParseError> {
    let mut l = lines(s);
    let value = l.next().unwrap_or("");
    if l.next().is_some() {
        return Err(ParseError::new(2, "expected a single line"));
    }
    Ok(value.trim())
}

/// A numeric attribute: a signed decimal (`1500`, `-1`) or `0x` hex
/// (`0x1003`), the two forms the kernel prints and Go's ParseInt with base
/// 0 reads. Outside i64 is an error (procfs would read 0).
pub fn parse_int_into(s: &str, out: &mut i64) -> Result<(), ParseError> {
    let v = value_of(s)?;
    let bad = |why: &str| ParseError::new(1, format!("{why} {}", excerpt(v)));
    *out = if let Some(hex) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad("invalid hex number"));
        }
        u64::from_str_radix(hex, 16)
            .ok()
            .and_then(|n| i64::try_from(n).ok())
            .ok_or_else(|| bad("out of range:"))?
    } else {
        let digits = v.strip_prefix('-').unwrap_or(v);
        if digits.is_empty()
            || !digits.bytes().all(|b| b.is_ascii_digit())
            || (digits.len() > 1 && digits.starts_with('0'))
        {
            return Err(bad("invalid number"));
        }
        v.parse::<i64>().map_err(|_| bad("out of range:"))?
    };
    Ok(())
}

/// `address`, `broadcast`: hex byte pairs joined by `:`, or empty for a
/// device without a hardware address (a tun device).
pub fn parse_address_into(s: &str, out: &mut String) -> Result<(), ParseError> {
    let v = value_of(s)?;
    if !v.is_empty()
        && !v
            .split(':')
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return Err(ParseError::new(
            1,
            format!("invalid hardware address {}", excerpt(v)),
        ));
    }
    out.clear();
    out.push_str(v);
    Ok(())
}

/// `operstate` (`up`, `lowerlayerdown`, ...) and `duplex` (`full`,
/// `half`, `unknown`): one lowercase word.
pub fn parse_word_into(s: &str, out: &mut String) -> Result<(), ParseError> {
    let v = value_of(s)?;
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_lowercase()) {
        return Err(ParseError::new(1, format!("invalid value {}", excerpt(v))));
    }
    out.clear();
    out.push_str(v);
    Ok(())
}

/// `ifalias`: free text set by the administrator, on one line; empty (no
/// bytes at all) when unset.
pub fn parse_alias_into(s: &str, out: &mut String) -> Result<(), ParseError> {
    let v = value_of(s)?;
    out.clear();
    out.push_str(v);
    Ok(())
}

/// One interface: its attribute files and what they held this scrape.
struct Iface {
    name: String,
    ino: u64,
    numeric_files: [SourceFile; NUMERIC.len()],
    text_files: [SourceFile; TEXT.len()],
    numeric: [Option<i64>; NUMERIC.len()],
    /// Empty when absent, as procfs leaves a string it could not read.
    text: [String; TEXT.len()],
    seen: u64,
    /// The attributes that only change with a link notification were read
    /// after the last notification for this interface.
    notified_current: bool,
}

impl Iface {
    fn new(net: &std::path::Path, name: &str, ino: u64) -> Iface {
        let dir = net.join(name);
        Iface {
            name: name.to_string(),
            ino,
            numeric_files: std::array::from_fn(|k| SourceFile::attribute(&dir, NUMERIC[k].0)),
            text_files: std::array::from_fn(|k| SourceFile::attribute(&dir, TEXT[k])),
            numeric: [None; NUMERIC.len()],
            text: Default::default(),
            seen: 0,
            notified_current: false,
        }
    }

    /// Reads the attributes, those that change only with a link
    /// notification only if `all`. `Ok(false)`: the interface went away
    /// while it was read (see the module doc).
    fn read(&mut self, all: bool) -> Result<bool, CollectError> {
        let numeric = self.numeric_files.iter_mut().zip(&mut self.numeric);
        for (k, (file, value)) in numeric.enumerate() {
            if !all && !read_every_scrape_numeric(k) {
                continue;
            }
            let mut v = 0;
            match file.parse_with(|t| parse_int_into(t, &mut v)) {
                Ok(read) => *value = read.map(|()| v),
                Err(_) if file.device_gone() => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        for (k, (file, value)) in self.text_files.iter_mut().zip(&mut self.text).enumerate() {
            if !all && !read_every_scrape_text(k) {
                continue;
            }
            let parse = match k {
                ADDRESS | BROADCAST => parse_address_into,
                DUPLEX | OPERSTATE => parse_word_into,
                _ => parse_alias_into,
            };
            match file.parse_with(|t| parse(t, value)) {
                Ok(Some(())) => {}
                Ok(None) => value.clear(),
                Err(_) if file.device_gone() => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// node_exporter's `adminstate`: from bit 0 (IFF_UP) of `flags`.
    fn adminstate(&self) -> &'static str {
        match self.numeric[FLAGS] {
            None => "unknown",
            Some(f) if f & 1 == 1 => "up",
            Some(_) => "down",
        }
    }
}

pub struct NetClassCollector {
    net: std::path::PathBuf,
    ignored: Option<Regex>,
    ignore_invalid_speed: bool,
    listing: DirListing,
    /// Sorted by name; interfaces gone from class/net are dropped.
    ifaces: Vec<Iface>,
    scrape: u64,
    /// Link notifications, on the live sysfs; None: every attribute is
    /// read at every scrape.
    links: Option<LinkEvents>,
    /// Consecutive scrapes with an index disagreement (see the module doc).
    mismatches: u32,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    if s.switch(NETLINK) {
        tracing::warn!("--{NETLINK} has no effect: usescope reads the same attributes from sysfs");
    }
    // A fixture tree can change at any moment without a notification.
    let links = crate::kernel::fs_kind::is_sysfs(&s.sysfs)
        .then(|| {
            LinkEvents::open()
                .map_err(|e| {
                    tracing::info!(
                        error = %e,
                        "no rtnetlink link notifications: netclass reads every attribute at every scrape"
                    )
                })
                .ok()
        })
        .flatten();
    Box::new(NetClassCollector {
        net: s.sysfs.join("class/net"),
        ignored: s.regex(IGNORED).cloned(),
        ignore_invalid_speed: s.switch(IGNORE_INVALID_SPEED),
        listing: DirListing::of_devices(),
        ifaces: Vec::new(),
        scrape: 0,
        links,
        mismatches: 0,
    })
}

impl NetClassCollector {
    fn read(&mut self) -> Result<(), CollectError> {
        self.scrape += 1;
        // Before sysfs is read: a change made after this point is either
        // in what is read now, or announced to the next scrape.
        self.take_notifications();
        if !self.listing.read(&self.net)? {
            self.ifaces.clear();
            return Ok(());
        }
        let mut mismatched = false;
        for e in self.listing.entries() {
            if e.is_file || self.ignored.as_ref().is_some_and(|r| r.is_match(&e.name)) {
                continue;
            }
            let i = match self
                .ifaces
                .binary_search_by(|i| i.name.as_str().cmp(&e.name))
            {
                Ok(i) => {
                    if self.ifaces[i].ino != e.ino {
                        self.ifaces[i] = Iface::new(&self.net, &e.name, e.ino);
                    }
                    i
                }
                Err(i) => {
                    self.ifaces.insert(i, Iface::new(&self.net, &e.name, e.ino));
                    i
                }
            };
            let iface = &mut self.ifaces[i];
            iface.seen = self.scrape;
            let all = !iface.notified_current;
            if !iface.read(all)? {
                tracing::debug!(device = %e.name, "interface went away during the scrape; left out");
                self.ifaces.remove(i);
                continue;
            }
            if all && let Some(links) = &self.links {
                // Trusted only if the socket's namespace has this interface
                // under the same index.
                let index = iface.numeric[IFINDEX];
                iface.notified_current =
                    index.is_some() && links.index_of(&iface.name).map(i64::from) == index;
                mismatched |= !iface.notified_current;
            }
        }
        let scrape = self.scrape;
        self.ifaces.retain(|i| i.seen == scrape);
        self.note_mismatch(mismatched);
        Ok(())
    }

    /// Marks the interfaces named by link notifications (all of them, when
    /// the notifications may be incomplete) for a full read.
    fn take_notifications(&mut self) {
        let Some(links) = &mut self.links else {
            return;
        };
        let ifaces = &mut self.ifaces;
        let exact = links.drain(|index| {
            for i in ifaces.iter_mut() {
                if i.numeric[IFINDEX] == Some(i64::from(index)) {
                    i.notified_current = false;
                }
            }
        });
        if !exact {
            for i in ifaces.iter_mut() {
                i.notified_current = false;
            }
        }
    }

    fn note_mismatch(&mut self, mismatched: bool) {
        if !mismatched {
            self.mismatches = 0;
            return;
        }
        self.mismatches += 1;
        if self.mismatches >= MISMATCHES_TO_GIVE_UP && self.links.is_some() {
            tracing::info!(
                sysfs = %self.net.display(),
                "sysfs lists interfaces that the daemon's network namespace has under other indexes \
                 (a sysfs mounted from another namespace?): netclass reads every attribute at every scrape"
            );
            self.links = None;
            for i in &mut self.ifaces {
                i.notified_current = false;
            }
        }
    }

    /// The value exported for property `k`: speed is in bytes per second
    /// (Mbit/s × 125000, with Go's int64 arithmetic), and with
    /// `--collector.netclass.ignore-invalid-speed` a negative speed (-1:
    /// unknown) is left out.
    fn value(&self, iface: &Iface, k: usize) -> Option<i64> {
        let v = iface.numeric[k]?;
        if k != SPEED {
            return Some(v);
        }
        if v < 0 && self.ignore_invalid_speed {
            return None;
        }
        Some(v.wrapping_mul(1000 * 1000) / 8)
    }

    fn encode(&self, enc: &mut Encoder) {
        if self.ifaces.is_empty() {
            return;
        }
        enc.family(&UP);
        for i in &self.ifaces {
            let up = u64::from(i.text[OPERSTATE] == "up");
            enc.sample(&UP, &[("device", &i.name)], up);
        }
        enc.family(&INFO);
        for i in &self.ifaces {
            enc.sample(
                &INFO,
                &[
                    ("address", &i.text[ADDRESS]),
                    ("adminstate", i.adminstate()),
                    ("broadcast", &i.text[BROADCAST]),
                    ("device", &i.name),
                    ("duplex", &i.text[DUPLEX]),
                    ("ifalias", &i.text[IFALIAS]),
                    ("operstate", &i.text[OPERSTATE]),
                ],
                1u64,
            );
        }
        for (k, (_, desc)) in NUMERIC.iter().enumerate() {
            if !self.ifaces.iter().any(|i| self.value(i, k).is_some()) {
                continue;
            }
            enc.family(desc);
            for i in &self.ifaces {
                if let Some(v) = self.value(i, k) {
                    enc.sample(desc, &[("device", &i.name)], v);
                }
            }
        }
    }
}

impl Collector for NetClassCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.read()?;
        self.encode(enc);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::FlagValue;
    use crate::collectors::test_support::{fixture, render};

    fn int(s: &str) -> Result<i64, ParseError> {
        parse_fresh(s, parse_int_into)
    }

    #[test]
    fn numbers_as_the_kernel_prints_them() {
        assert_eq!(int("1500\n").unwrap(), 1500);
        assert_eq!(int("-1\n").unwrap(), -1);
        assert_eq!(int("0x1003\n").unwrap(), 0x1003);
        assert_eq!(int("0x0\n").unwrap(), 0);
        assert_eq!(int("0").unwrap(), 0);
        assert_eq!(int("9223372036854775807\n").unwrap(), i64::MAX);
        for bad in [
            "",
            "\n",
            "x\n",
            "0x\n",
            "0xg\n",
            "010\n",
            "+1\n",
            "1 2\n",
            "1\n2\n",
            "1.5\n",
            "9223372036854775808\n",
            "0x8000000000000000\n",
            "-\n",
        ] {
            assert!(int(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(int("1\n2\n").unwrap_err().line, 2);
    }

    #[test]
    fn text_attributes() {
        let addr = |s| parse_fresh(s, parse_address_into);
        assert_eq!(addr("02:fc:00:00:00:01\n").unwrap(), "02:fc:00:00:00:01");
        assert_eq!(addr("\n").unwrap(), "");
        assert_eq!(addr("00:00:00:00\n").unwrap(), "00:00:00:00");
        assert!(addr("02:fc:00:00:00:1\n").is_err());
        assert!(addr("garbage\n").is_err());
        let word = |s| parse_fresh(s, parse_word_into);
        assert_eq!(word("lowerlayerdown\n").unwrap(), "lowerlayerdown");
        assert!(word("\n").is_err());
        assert!(word("Up\n").is_err());
        let alias = |s| parse_fresh(s, parse_alias_into);
        assert_eq!(alias("").unwrap(), "");
        assert_eq!(alias("uplink to ns b\n").unwrap(), "uplink to ns b");
        assert_eq!(alias("a\nb\n").unwrap_err().line, 2);
    }

    #[test]
    fn help_strings() {
        assert_eq!(
            NUMERIC[2].1.help,
            "Network device property: carrier_changes_total"
        );
        for (_, d) in &NUMERIC {
            let prop = d.name.strip_prefix("node_network_").unwrap();
            assert_eq!(d.help, format!("Network device property: {prop}"));
        }
    }

    fn scrape(s: &Settings) -> String {
        render(build(s).as_mut()).unwrap()
    }

    #[test]
    fn collector_on_fixture() {
        let s = Settings::with_roots("/nonexistent", fixture("sys"));
        let out = scrape(&s);
        for line in [
            "# HELP node_network_up Value is 1 if operstate is 'up', 0 otherwise.",
            "node_network_up{device=\"eth0\"} 1",
            "node_network_up{device=\"br0\"} 0",
            "node_network_info{address=\"02:fc:00:00:00:01\",adminstate=\"up\",broadcast=\"ff:ff:ff:ff:ff:ff\",device=\"eth0\",duplex=\"unknown\",ifalias=\"\",operstate=\"up\"} 1",
            "node_network_info{address=\"ba:dd:02:93:a9:08\",adminstate=\"up\",broadcast=\"ff:ff:ff:ff:ff:ff\",device=\"va\",duplex=\"full\",ifalias=\"uplink to ns b\",operstate=\"up\"} 1",
            "node_network_info{address=\"\",adminstate=\"down\",broadcast=\"\",device=\"t0\",duplex=\"\",ifalias=\"\",operstate=\"down\"} 1",
            "# TYPE node_network_carrier_changes_total counter",
            "node_network_flags{device=\"eth0\"} 4099",
            "node_network_mtu_bytes{device=\"v0\"} 9000",
            "node_network_protocol_type{device=\"lo\"} 772",
            "node_network_speed_bytes{device=\"va\"} 1250000000",
            // speed -1 (unknown) is exported as node_exporter does by default.
            "node_network_speed_bytes{device=\"eth0\"} -125000",
        ] {
            assert!(out.lines().any(|l| l == line), "missing {line}\n{out}");
        }
        // EINVAL when captured (a down ifb has no carrier or speed): no series.
        assert!(!out.contains("node_network_carrier{device=\"ifb0\"}"));
        assert!(!out.contains("node_network_speed_bytes{device=\"ifb0\"}"));
        // bonding_masters is a file, not an interface.
        assert!(!out.contains("bonding_masters"));
        let families = out.lines().filter(|l| l.starts_with("# TYPE")).count();
        assert_eq!(families, 19);
    }

    #[test]
    fn flags() {
        let mut s = Settings::with_roots("/nonexistent", fixture("sys"));
        s.set(IGNORE_INVALID_SPEED, Some(FlagValue::Bool(true)));
        s.set(
            IGNORED,
            Some(FlagValue::Regex(Regex::new("^(v|b)").unwrap())),
        );
        let out = scrape(&s);
        assert!(!out.contains("node_network_speed_bytes{device=\"eth0\"}"));
        assert!(!out.contains("device=\"va\""));
        assert!(!out.contains("device=\"br0\""));
        assert!(out.contains("node_network_up{device=\"eth0\"} 1"));
        let absent = Settings::with_roots("/nonexistent", "/nonexistent-usescope");
        assert_eq!(scrape(&absent), "");
    }

    /// The live sysfs: every interface parses, and attributes that give
    /// EINVAL (lo's speed) are simply absent.
    #[test]
    fn live_sysfs() {
        let s = Settings::with_roots("/proc", "/sys");
        let mut c = build(&s);
        let out = render(c.as_mut()).unwrap();
        assert!(out.contains("node_network_up{device=\"lo\"}"), "{out}");
        assert!(
            !out.contains("node_network_speed_bytes{device=\"lo\"}"),
            "{out}"
        );
        assert_eq!(
            render(c.as_mut()).unwrap().lines().count(),
            out.lines().count()
        );
    }

    #[test]
    fn a_recreated_interface_gets_fresh_files() {
        let dir = tempfile::tempdir().unwrap();
        let eth = dir.path().join("class/net/eth9");
        std::fs::create_dir_all(&eth).unwrap();
        std::fs::write(eth.join("mtu"), "1500\n").unwrap();
        let mut c = build(&Settings::with_roots("/nonexistent", dir.path()));
        assert!(
            render(c.as_mut())
                .unwrap()
                .contains("node_network_mtu_bytes{device=\"eth9\"} 1500")
        );
        std::fs::remove_dir_all(&eth).unwrap();
        assert_eq!(render(c.as_mut()).unwrap(), "");
        std::fs::create_dir_all(&eth).unwrap();
        std::fs::write(eth.join("mtu"), "9000\n").unwrap();
        assert!(
            render(c.as_mut())
                .unwrap()
                .contains("node_network_mtu_bytes{device=\"eth9\"} 9000")
        );
        std::fs::write(eth.join("mtu"), "9000 x\n").unwrap();
        assert_eq!(render(c.as_mut()).unwrap_err().file, eth.join("mtu"));
    }
}
