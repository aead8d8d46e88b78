//! /proc/net/arp → `node_arp_entries{device}`, node_exporter's arp
//! collector (collector/arp_linux.go, prometheus/procfs arp.go).
//!
//! One line per IPv4 neighbour entry, NOARP entries left out, incomplete
//! and failed ones included (flags 0x0, address all zeros). A neighbour
//! table near `net.ipv4.neigh.default.gc_thresh3` drops entries and
//! traffic: the count per device is its utilisation.
//!
//! node_exporter 1.12 counts the same entries over netlink by default
//! (`--collector.arp.netlink`, default true; RTM_GETNEIGH, AF_INET, NOARP
//! skipped, which is what the kernel's /proc/net/arp shows). usescope
//! always reads the file, so the flag is accepted and has no effect. The
//! file is the reading process's network namespace, as netlink is; with
//! netlink, node_exporter ignores `--path.procfs` for this collector.

use regex::Regex;

use crate::collectors::{Flag, FlagKind, Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError, excerpt};
use crate::kernel::parse::{fields, lines, recycle};
use crate::kernel::source::{Read, SourceFile};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const INCLUDE: &str = "collector.arp.device-include";
pub const EXCLUDE: &str = "collector.arp.device-exclude";
pub const NETLINK: &str = "collector.arp.netlink";

pub const SPEC: Spec = Spec {
    name: "arp",
    default_enabled: true,
    help: "ARP entries per device from /proc/net/arp",
    flags: &[
        Flag {
            name: INCLUDE,
            help: "Regexp of arp devices to include (mutually exclusive to device-exclude).",
            default: None,
            kind: FlagKind::Regex,
            conflicts_with: None,
        },
        Flag {
            name: EXCLUDE,
            help: "Regexp of arp devices to exclude (mutually exclusive to device-include).",
            default: None,
            kind: FlagKind::Regex,
            conflicts_with: None,
        },
        Flag {
            name: NETLINK,
            help: "Accepted for node_exporter compatibility; usescope always reads /proc/net/arp, which holds the same entries",
            default: Some("true"),
            kind: FlagKind::Bool,
            conflicts_with: None,
        },
    ],
    build,
    sources: &[Source::proc("net/arp", "arp")],
    parsers: &[Parser::numeric("arp", |t| parse_into(t, &mut Vec::new()))],
};

const ENTRIES: Desc = Desc::gauge("node_arp_entries", "ARP entries by device");

/// Entries per device, in order of first appearance.
#[derive(Debug, PartialEq, Eq)]
pub struct Device<'t> {
    pub name: &'t str,
    pub entries: u64,
}

const HEADER: [&str; 9] = [
    "IP", "address", "HW", "type", "Flags", "HW", "address", "Mask", "Device",
];

/// Checks the header and every entry (`IP HWtype Flags HWaddress Mask
/// Device`, arp_format_neigh_entry) and counts the entries per device.
pub fn parse_into<'t>(s: &'t str, out: &mut Vec<Device<'t>>) -> Result<(), ParseError> {
    out.clear();
    let mut lines = lines(s);
    let header = lines
        .next()
        .ok_or_else(|| ParseError::new(1, "empty file"))?;
    if !fields(header).eq(HEADER) {
        return Err(ParseError::new(
            1,
            format!(
                "expected the \"IP address  HW type ...\" header, found {}",
                excerpt(header)
            ),
        ));
    }
    for (i, line) in lines.enumerate() {
        let n = i + 2;
        let mut f = fields(line);
        let mut next = |what: &str| {
            f.next()
                .ok_or_else(|| ParseError::new(n, format!("missing field {what}")))
        };
        let ip = next("IP address")?;
        let hw_type = next("HW type")?;
        let flags = next("Flags")?;
        let hw_addr = next("HW address")?;
        let _mask = next("Mask")?;
        let device = next("Device")?;
        if let Some(extra) = f.next() {
            return Err(ParseError::new(
                n,
                format!("unexpected extra field {}", excerpt(extra)),
            ));
        }
        if ip.parse::<std::net::Ipv4Addr>().is_err() {
            return Err(ParseError::new(
                n,
                format!("IP address: invalid {}", excerpt(ip)),
            ));
        }
        hex_0x(hw_type, n, "HW type")?;
        if hex_0x(flags, n, "Flags")? > 0xff {
            return Err(ParseError::new(
                n,
                format!("Flags: {} is above 0xff", excerpt(flags)),
            ));
        }
        if !is_hw_address(hw_addr) {
            return Err(ParseError::new(
                n,
                format!("HW address: invalid {}", excerpt(hw_addr)),
            ));
        }
        match out.iter_mut().find(|d| d.name == device) {
            Some(d) => d.entries += 1,
            None => out.push(Device {
                name: device,
                entries: 1,
            }),
        }
    }
    Ok(())
}

/// `0x1`: the kernel prints both hex numbers with `0x%x`.
fn hex_0x(tok: &str, line: usize, what: &str) -> Result<u64, ParseError> {
    tok.strip_prefix("0x")
        .filter(|h| !h.is_empty() && h.len() <= 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .ok_or_else(|| ParseError::new(line, format!("{what}: invalid {}", excerpt(tok))))
}

/// Colon-separated pairs of hex digits, as the kernel formats
/// `dev->addr_len` bytes (6 for Ethernet, 20 for InfiniBand).
fn is_hw_address(tok: &str) -> bool {
    !tok.is_empty()
        && tok
            .split(':')
            .all(|pair| pair.len() == 2 && pair.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// node_exporter's device filter: a device is left out if the exclude
/// pattern matches it or the include pattern does not; both may be given.
struct Filter {
    include: Option<Regex>,
    exclude: Option<Regex>,
}

impl Filter {
    fn keeps(&self, device: &str) -> bool {
        !self.exclude.as_ref().is_some_and(|r| r.is_match(device))
            && self.include.as_ref().is_none_or(|r| r.is_match(device))
    }
}

pub struct ArpCollector {
    file: SourceFile,
    filter: Filter,
    /// Kept empty between scrapes; only its allocation is reused.
    devices: Vec<Device<'static>>,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(ArpCollector {
        file: SourceFile::new(&s.procfs, "net/arp"),
        filter: Filter {
            include: s.regex(INCLUDE).cloned(),
            exclude: s.regex(EXCLUDE).cloned(),
        },
        devices: Vec::new(),
    })
}

impl Collector for ArpCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let text = match self.file.read()? {
            Read::Text(t) => t,
            Read::Absent => return Ok(()),
        };
        let mut devices = recycle(std::mem::take(&mut self.devices));
        let parsed = parse_into(text, &mut devices);
        if parsed.is_ok() {
            devices.retain(|d| self.filter.keeps(d.name));
            devices.sort_unstable_by(|a, b| a.name.cmp(b.name));
            if !devices.is_empty() {
                enc.family(&ENTRIES);
                for d in &devices {
                    enc.sample(&ENTRIES, &[("device", d.name)], d.entries);
                }
            }
        }
        self.devices = recycle(devices);
        parsed.map_err(|e| self.file.parse_error(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::FlagValue;
    use crate::collectors::test_support::{fixture, render};

    const HEAD: &str =
        "IP address       HW type     Flags       HW address            Mask     Device\n";
    /// Captured in a network namespace with a veth pair, a bridge, a
    /// permanent entry and two unanswered neighbours.
    const NETNS: &str =
        "IP address       HW type     Flags       HW address            Mask     Device
10.9.1.7         0x1         0x2         02:00:00:00:01:07     *        br0
10.9.1.99        0x1         0x0         00:00:00:00:00:00     *        br0
10.9.0.77        0x1         0x0         00:00:00:00:00:00     *        va
10.9.0.2         0x1         0x2         7a:33:c3:ca:52:c5     *        va
10.9.0.50        0x1         0x6         02:00:00:00:00:50     *        va
";

    fn parse(s: &str) -> Result<Vec<(&str, u64)>, ParseError> {
        let mut out = Vec::new();
        parse_into(s, &mut out)?;
        Ok(out.iter().map(|d| (d.name, d.entries)).collect())
    }

    #[test]
    fn counts_per_device() {
        assert_eq!(parse(NETNS).unwrap(), [("br0", 2), ("va", 3)]);
        assert_eq!(parse(HEAD).unwrap(), []);
        let fixture = include_str!("../../tests/fixtures/proc/net/arp");
        assert_eq!(parse(fixture).unwrap(), [("eth0", 1)]);
        // InfiniBand: 20-byte addresses.
        let ib = format!(
            "{HEAD}10.0.0.1 0x20 0x2 80:00:00:48:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:cb:a1 * ib0\n"
        );
        assert_eq!(parse(&ib).unwrap(), [("ib0", 1)]);
    }

    #[test]
    fn malformed() {
        assert_eq!(parse("").unwrap_err().line, 1);
        assert!(parse("IP address\n").unwrap_err().msg.contains("header"));
        let e = parse(&format!("{HEAD}10.0.0.1 0x1 0x2 00:11:22:33:44:55 *\n")).unwrap_err();
        assert_eq!((e.line, e.msg.as_str()), (2, "missing field Device"));
        let e = parse(&format!(
            "{HEAD}10.0.0.1 0x1 0x2 00:11:22:33:44:55 * eth0 x\n"
        ))
        .unwrap_err();
        assert!(e.msg.contains("extra"), "{}", e.msg);
        let e = parse(&format!(
            "{HEAD}10.0.0.300 0x1 0x2 00:11:22:33:44:55 * eth0\n"
        ))
        .unwrap_err();
        assert!(e.msg.contains("IP address"), "{}", e.msg);
        let e = parse(&format!("{HEAD}10.0.0.1 1 0x2 00:11:22:33:44:55 * eth0\n")).unwrap_err();
        assert!(e.msg.contains("HW type"), "{}", e.msg);
        let e = parse(&format!(
            "{HEAD}10.0.0.1 0x1 0x200 00:11:22:33:44:55 * eth0\n"
        ))
        .unwrap_err();
        assert!(e.msg.contains("Flags"), "{}", e.msg);
        let e = parse(&format!("{HEAD}10.0.0.1 0x1 0x2 00:11:22:33:44:5 * eth0\n")).unwrap_err();
        assert!(e.msg.contains("HW address"), "{}", e.msg);
    }

    fn with_filter(include: Option<&str>, exclude: Option<&str>) -> String {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("net")).unwrap();
        std::fs::write(dir.path().join("net/arp"), NETNS).unwrap();
        let mut s = Settings::with_roots(dir.path(), "/nonexistent");
        let re = |r: &str| Some(FlagValue::Regex(Regex::new(r).unwrap()));
        s.set(INCLUDE, include.and_then(re));
        s.set(EXCLUDE, exclude.and_then(re));
        render(build(&s).as_mut()).unwrap()
    }

    #[test]
    fn collector_and_filters() {
        assert_eq!(
            with_filter(None, None),
            "# HELP node_arp_entries ARP entries by device\n\
             # TYPE node_arp_entries gauge\n\
             node_arp_entries{device=\"br0\"} 2\n\
             node_arp_entries{device=\"va\"} 3\n"
        );
        assert!(!with_filter(None, Some("^br")).contains("br0"));
        assert!(!with_filter(Some("^br"), None).contains("va"));
        // Both: excluded, or not included, is left out.
        assert_eq!(with_filter(Some("^v"), Some("a$")), "");
        let s = Settings::with_roots(fixture("proc"), "/nonexistent");
        assert!(
            render(build(&s).as_mut())
                .unwrap()
                .ends_with("node_arp_entries{device=\"eth0\"} 1\n")
        );
        let absent = Settings::with_roots("/nonexistent-usescope", "/nonexistent");
        assert_eq!(render(build(&absent).as_mut()).unwrap(), "");
    }
}
