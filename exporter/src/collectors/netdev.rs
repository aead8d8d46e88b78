//! /proc/net/dev → `node_network_{receive,transmit}_*_total{device}`.
//!
//! The names are node_exporter's for this file (its procfs path, after its
//! `legacy` renaming): `receive_errs`, `receive_drop`, `transmit_colls`, ...
//! Errors, drops, overruns (`fifo`), carrier losses and collisions are the
//! interface "errors" of the USE method: any non-zero rate is worth a look.
//!
//! The column layout has been fixed since Linux 2.6; the header is still
//! checked so a kernel that changes it is reported rather than silently
//! mislabelled.
//!
//! `node_network_receive_nohandler_total` (packets dropped because no
//! protocol handler wanted them) is not in /proc/net/dev; node_exporter
//! 1.12 takes it from netlink. usescope reads the same kernel counter from
//! /sys/class/net/IFACE/statistics/rx_nohandler, for the interfaces of
//! /proc/net/dev that sysfs lists (kept descriptors, see
//! [`SourceFile::attribute`]). An interface deleted in between (ENODEV)
//! has no such series in that scrape; the collector does not fail.
//!
//! `--collector.netdev.device-include` or `--collector.netdev.device-exclude`
//! (node_exporter's flags, one at a time) keep a Kubernetes node's hundreds
//! of `veth*`/`cali*` interfaces out of the exposition.

use regex::Regex;

use crate::collectors::{Flag, FlagKind, Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError, excerpt};
use crate::kernel::parse::{fields, lines, recycle, u64_field, u64_sysctl_into};
use crate::kernel::source::{DirListing, Read, SourceFile};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const INCLUDE: &str = "collector.netdev.device-include";
pub const EXCLUDE: &str = "collector.netdev.device-exclude";

pub const SPEC: Spec = Spec {
    name: "netdev",
    default_enabled: true,
    help: "Network interface statistics from /proc/net/dev",
    flags: &[
        Flag {
            name: INCLUDE,
            help: "Regexp of net devices to include (mutually exclusive with device-exclude)",
            default: None,
            kind: FlagKind::Regex,
            conflicts_with: Some(EXCLUDE),
        },
        Flag {
            name: EXCLUDE,
            help: "Regexp of net devices to exclude (mutually exclusive with device-include)",
            default: None,
            kind: FlagKind::Regex,
            conflicts_with: None,
        },
    ],
    build,
    sources: &[
        Source::proc("net/dev", "netdev"),
        Source::sys("class/net/eth0/statistics/rx_nohandler", "netdev_nohandler"),
    ],
    parsers: &[
        Parser::numeric("netdev", |t| parse_into(t, &mut Vec::new())),
        Parser::numeric("netdev_nohandler", |t| {
            crate::kernel::parse::parse_fresh(t, u64_sysctl_into).map(drop)
        }),
    ],
};

const NOHANDLER: Desc = Desc::counter(
    "node_network_receive_nohandler_total",
    "Network device statistic receive_nohandler.",
);

/// Column names of the receive and transmit halves of the header.
const RECEIVE: [&str; 8] = [
    "bytes",
    "packets",
    "errs",
    "drop",
    "fifo",
    "frame",
    "compressed",
    "multicast",
];
const TRANSMIT: [&str; 8] = [
    "bytes",
    "packets",
    "errs",
    "drop",
    "fifo",
    "colls",
    "carrier",
    "compressed",
];
const COLUMNS: usize = RECEIVE.len() + TRANSMIT.len();

/// One family per column, in file order.
const DESCS: [Desc; COLUMNS] = [
    Desc::counter(
        "node_network_receive_bytes_total",
        "Network device statistic receive_bytes.",
    ),
    Desc::counter(
        "node_network_receive_packets_total",
        "Network device statistic receive_packets.",
    ),
    Desc::counter(
        "node_network_receive_errs_total",
        "Network device statistic receive_errs.",
    ),
    Desc::counter(
        "node_network_receive_drop_total",
        "Network device statistic receive_drop.",
    ),
    Desc::counter(
        "node_network_receive_fifo_total",
        "Network device statistic receive_fifo.",
    ),
    Desc::counter(
        "node_network_receive_frame_total",
        "Network device statistic receive_frame.",
    ),
    Desc::counter(
        "node_network_receive_compressed_total",
        "Network device statistic receive_compressed.",
    ),
    Desc::counter(
        "node_network_receive_multicast_total",
        "Network device statistic receive_multicast.",
    ),
    Desc::counter(
        "node_network_transmit_bytes_total",
        "Network device statistic transmit_bytes.",
    ),
    Desc::counter(
        "node_network_transmit_packets_total",
        "Network device statistic transmit_packets.",
    ),
    Desc::counter(
        "node_network_transmit_errs_total",
        "Network device statistic transmit_errs.",
    ),
    Desc::counter(
        "node_network_transmit_drop_total",
        "Network device statistic transmit_drop.",
    ),
    Desc::counter(
        "node_network_transmit_fifo_total",
        "Network device statistic transmit_fifo.",
    ),
    Desc::counter(
        "node_network_transmit_colls_total",
        "Network device statistic transmit_colls.",
    ),
    Desc::counter(
        "node_network_transmit_carrier_total",
        "Network device statistic transmit_carrier.",
    ),
    Desc::counter(
        "node_network_transmit_compressed_total",
        "Network device statistic transmit_compressed.",
    ),
];

/// One interface's counters, in [`DESCS`] order.
#[derive(Debug, PartialEq, Eq)]
pub struct Interface<'a> {
    pub name: &'a str,
    pub values: [u64; COLUMNS],
}

/// Checks the two header lines and parses every interface into `out`.
/// A file with the header only (no interfaces) is valid.
pub fn parse_into<'t>(s: &'t str, out: &mut Vec<Interface<'t>>) -> Result<(), ParseError> {
    out.clear();
    let mut lines = lines(s);
    let first = lines
        .next()
        .ok_or_else(|| ParseError::new(1, "empty file"))?;
    if !first.starts_with("Inter-|") {
        return Err(ParseError::new(
            1,
            format!("expected the \"Inter-|\" header, found {}", excerpt(first)),
        ));
    }
    let second = lines
        .next()
        .ok_or_else(|| ParseError::new(2, "missing the column header line"))?;
    check_columns(second)?;
    for (i, line) in lines.enumerate() {
        out.push(parse_interface(line, i + 3)?);
    }
    Ok(())
}

/// The second header line: ` face |bytes packets ...|bytes packets ...`.
fn check_columns(line: &str) -> Result<(), ParseError> {
    let mut parts = line.split('|');
    let (_face, rx, tx) = match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(face), Some(rx), Some(tx), None) => (face, rx, tx),
        _ => {
            return Err(ParseError::new(
                2,
                "column header must have three |-separated parts",
            ));
        }
    };
    for (half, names, want) in [("receive", rx, &RECEIVE), ("transmit", tx, &TRANSMIT)] {
        if !fields(names).eq(want.iter().copied()) {
            return Err(ParseError::new(
                2,
                format!("unexpected {half} columns {}", excerpt(names.trim())),
            ));
        }
    }
    Ok(())
}

/// `  eth0: 129599572    3995    0 ...`: the kernel pads the name to six
/// characters, so a long counter may follow the colon without a space.
/// The last colon ends the name: counters never contain one, while names
/// seen in the wild do (`ibr10:30`), dev_valid_name notwithstanding;
/// prometheus/procfs splits at the last colon for the same reason.
fn parse_interface(line: &str, lineno: usize) -> Result<Interface<'_>, ParseError> {
    let (name, rest) = line
        .rsplit_once(':')
        .ok_or_else(|| ParseError::new(lineno, "missing ':' after the interface name"))?;
    let name = name.trim();
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err(ParseError::new(
            lineno,
            format!("invalid interface name {}", excerpt(name)),
        ));
    }
    let mut values = [0u64; COLUMNS];
    let mut n = 0;
    for (i, tok) in fields(rest).enumerate() {
        let slot = values.get_mut(i).ok_or_else(|| {
            ParseError::new(
                lineno,
                format!("{}: more than {COLUMNS} counters", excerpt(name)),
            )
        })?;
        *slot = u64_field(tok, lineno, DESCS[i].name)?;
        n = i + 1;
    }
    if n != COLUMNS {
        return Err(ParseError::new(
            lineno,
            format!("{}: {n} counters, {COLUMNS} expected", excerpt(name)),
        ));
    }
    Ok(Interface { name, values })
}

/// Which interfaces to export; the regex was validated when the flag was
/// parsed (cli.rs).
#[derive(Debug, Clone)]
pub enum DeviceFilter {
    Include(Regex),
    Exclude(Regex),
}

impl DeviceFilter {
    fn keeps(&self, device: &str) -> bool {
        match self {
            DeviceFilter::Include(r) => r.is_match(device),
            DeviceFilter::Exclude(r) => !r.is_match(device),
        }
    }
}

/// The filter from the `--collector.netdev.device-*` flags, if any.
fn filter_from(s: &Settings) -> Option<DeviceFilter> {
    s.regex(INCLUDE)
        .map(|r| DeviceFilter::Include(r.clone()))
        .or_else(|| s.regex(EXCLUDE).map(|r| DeviceFilter::Exclude(r.clone())))
}

pub struct NetDevCollector {
    file: SourceFile,
    filter: Option<DeviceFilter>,
    /// Kept empty between scrapes; only its allocation is reused.
    ifaces: Vec<Interface<'static>>,
    nohandler: NoHandler,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(NetDevCollector {
        file: SourceFile::new(&s.procfs, "net/dev"),
        filter: filter_from(s),
        ifaces: Vec::new(),
        nohandler: NoHandler {
            net: s.sysfs.join("class/net"),
            listing: DirListing::of_devices(),
            files: Vec::new(),
            scrape: 0,
        },
    })
}

/// `statistics/rx_nohandler` of each interface, from sysfs.
struct NoHandler {
    net: std::path::PathBuf,
    listing: DirListing,
    /// Sorted by name, one per exported interface that sysfs lists.
    files: Vec<NoHandlerFile>,
    scrape: u64,
}

struct NoHandlerFile {
    name: String,
    /// The interface directory's inode: a name that comes back as another
    /// device gets a fresh file.
    ino: u64,
    file: SourceFile,
    value: Option<u64>,
    seen: u64,
}

impl NoHandler {
    /// Reads the counter of each of `ifaces`.
    fn read(&mut self, ifaces: &[Interface]) -> Result<(), CollectError> {
        self.scrape += 1;
        if !self.listing.read(&self.net)? {
            self.files.clear();
            return Ok(());
        }
        let entries = self.listing.entries();
        for iface in ifaces {
            let Ok(e) = entries.binary_search_by(|e| e.name.as_str().cmp(iface.name)) else {
                continue;
            };
            let ino = entries[e].ino;
            let i = match self
                .files
                .binary_search_by(|f| f.name.as_str().cmp(iface.name))
            {
                Ok(i) if self.files[i].ino == ino => i,
                found => {
                    let f = NoHandlerFile {
                        name: iface.name.to_string(),
                        ino,
                        file: SourceFile::attribute(
                            &self.net,
                            format!("{}/statistics/rx_nohandler", iface.name),
                        ),
                        value: None,
                        seen: 0,
                    };
                    match found {
                        Ok(i) => {
                            self.files[i] = f;
                            i
                        }
                        Err(i) => {
                            self.files.insert(i, f);
                            i
                        }
                    }
                }
            };
            let f = &mut self.files[i];
            f.seen = self.scrape;
            let mut v = 0;
            f.value = match f.file.parse_with(|t| u64_sysctl_into(t, &mut v)) {
                Ok(read) => read.map(|()| v),
                // Deleted since /proc/net/dev listed it (ENODEV): its
                // counters from there stand, this one is left out.
                Err(_) if f.file.device_gone() => None,
                Err(e) => return Err(e),
            };
        }
        let scrape = self.scrape;
        self.files.retain(|f| f.seen == scrape);
        Ok(())
    }

    fn encode(&self, enc: &mut Encoder) {
        if !self.files.iter().any(|f| f.value.is_some()) {
            return;
        }
        enc.family(&NOHANDLER);
        for f in &self.files {
            if let Some(v) = f.value {
                enc.sample(&NOHANDLER, &[("device", &f.name)], v);
            }
        }
    }
}

/// Drops the interfaces `filter` rejects. Every line was parsed first, so
/// a malformed file fails the same way whatever the filter.
fn apply(filter: Option<&DeviceFilter>, ifaces: &mut Vec<Interface>) {
    if let Some(f) = filter {
        ifaces.retain(|i| f.keeps(i.name));
    }
}

/// Families are written column by column, so every interface is parsed
/// before the first is written.
fn encode(ifaces: &[Interface], enc: &mut Encoder) {
    if ifaces.is_empty() {
        return;
    }
    for (k, desc) in DESCS.iter().enumerate() {
        enc.family(desc);
        for iface in ifaces {
            enc.sample(desc, &[("device", iface.name)], iface.values[k]);
        }
    }
}

impl Collector for NetDevCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let text = match self.file.read()? {
            Read::Text(t) => t,
            Read::Absent => return Ok(()),
        };
        let mut ifaces = recycle(std::mem::take(&mut self.ifaces));
        let parsed = parse_into(text, &mut ifaces);
        let mut nohandler = Ok(());
        if parsed.is_ok() {
            apply(self.filter.as_ref(), &mut ifaces);
            nohandler = self.nohandler.read(&ifaces);
            if nohandler.is_ok() {
                encode(&ifaces, enc);
                self.nohandler.encode(enc);
            }
        }
        self.ifaces = recycle(ifaces);
        parsed.map_err(|e| self.file.parse_error(e))?;
        nohandler
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scrape::exposition::Format;
    use std::path::Path;

    const FIXTURE: &str = include_str!("../../tests/fixtures/proc/net/dev");
    const HEADER: &str = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
";

    fn interfaces(s: &str) -> Result<Vec<Interface<'_>>, ParseError> {
        let mut out = Vec::new();
        parse_into(s, &mut out).map(|()| out)
    }

    #[test]
    fn fixture() {
        let ifs = interfaces(FIXTURE).unwrap();
        let names: Vec<&str> = ifs.iter().map(|i| i.name).collect();
        assert_eq!(names, ["lo", "ifb0", "ifb1", "eth0"]);
        assert_eq!(
            ifs[3].values,
            [
                129599572, 3995, 0, 0, 0, 0, 0, 0, 258896, 2430, 0, 0, 0, 0, 0, 0
            ]
        );
    }

    #[test]
    fn counter_glued_to_the_colon() {
        let s =
            format!("{HEADER}enp0s31f6:18446744073709551615 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n");
        let ifs = interfaces(&s).unwrap();
        assert_eq!(ifs[0].name, "enp0s31f6");
        assert_eq!(ifs[0].values[0], u64::MAX);
        assert_eq!(ifs[0].values[15], 15);
    }

    #[test]
    fn header_only_means_no_interfaces() {
        assert_eq!(interfaces(HEADER).unwrap(), vec![]);
    }

    #[test]
    fn malformed() {
        assert_eq!(interfaces("").unwrap_err().line, 1);
        assert_eq!(interfaces("Inter-|\n").unwrap_err().line, 2);
        assert!(interfaces("\u{1}garbage here\n%%% not a kernel file %%%\n:::\n").is_err());
        // A header with an unknown column.
        let renamed = FIXTURE.replace("colls", "collisions");
        let e = interfaces(&renamed).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.msg.contains("transmit"));
        let base = format!("{HEADER}  eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15");
        let e = interfaces(&base).unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.msg.contains("15 counters"), "{}", e.msg);
        let e = interfaces(&format!("{base} 16 17\n")).unwrap_err();
        assert!(e.msg.contains("more than 16"), "{}", e.msg);
        let e = interfaces(&format!("{HEADER}eth0 1 2 3\n")).unwrap_err();
        assert!(e.msg.contains("':'"));
        let e = interfaces(&format!("{HEADER}   : 1\n")).unwrap_err();
        assert!(e.msg.contains("interface name"));
        let e = interfaces(&format!("{base} x\n")).unwrap_err();
        assert!(e.msg.contains("node_network_transmit_compressed_total"));
        let over =
            format!("{HEADER}eth0: 18446744073709551616 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n");
        let e = interfaces(&over).unwrap_err();
        assert!(e.msg.contains("node_network_receive_bytes_total"));
        // Truncated in the middle of the last interface.
        let cut = &FIXTURE[..FIXTURE.len() - 40];
        assert_eq!(interfaces(cut).unwrap_err().line, 6);
    }

    #[test]
    fn collector_on_fixture() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proc");
        let mut c = build(&Settings::with_roots(root, "/nonexistent"));
        let mut buf = Vec::new();
        let mut enc = Encoder::new(&mut buf, Format::PrometheusText);
        c.collect(&mut enc).unwrap();
        let out = String::from_utf8(buf).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 16 * (2 + 4));
        assert_eq!(
            lines[..6],
            [
                "# HELP node_network_receive_bytes_total Network device statistic receive_bytes.",
                "# TYPE node_network_receive_bytes_total counter",
                "node_network_receive_bytes_total{device=\"lo\"} 9062",
                "node_network_receive_bytes_total{device=\"ifb0\"} 0",
                "node_network_receive_bytes_total{device=\"ifb1\"} 0",
                "node_network_receive_bytes_total{device=\"eth0\"} 129599572",
            ]
        );
        for line in [
            "node_network_receive_packets_total{device=\"eth0\"} 3995",
            "node_network_receive_errs_total{device=\"eth0\"} 0",
            "node_network_receive_drop_total{device=\"eth0\"} 0",
            "node_network_receive_multicast_total{device=\"lo\"} 0",
            "node_network_transmit_bytes_total{device=\"eth0\"} 258896",
            "node_network_transmit_packets_total{device=\"eth0\"} 2430",
            "node_network_transmit_colls_total{device=\"eth0\"} 0",
            "node_network_transmit_carrier_total{device=\"eth0\"} 0",
            "# TYPE node_network_transmit_compressed_total counter",
        ] {
            assert!(lines.contains(&line), "missing {line}");
        }
        // A second scrape reuses the buffers and yields the same output.
        let mut again = Vec::new();
        c.collect(&mut Encoder::new(&mut again, Format::PrometheusText))
            .unwrap();
        assert_eq!(String::from_utf8(again).unwrap(), out);
    }

    fn devices_with(filter: DeviceFilter) -> Vec<String> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proc");
        let mut s = Settings::with_roots(root, "/nonexistent");
        let (flag, re) = match filter {
            DeviceFilter::Include(r) => (INCLUDE, r),
            DeviceFilter::Exclude(r) => (EXCLUDE, r),
        };
        s.set(flag, Some(crate::collectors::FlagValue::Regex(re)));
        let out = crate::collectors::test_support::render(build(&s).as_mut()).unwrap();
        out.lines()
            .filter_map(|l| l.strip_prefix("node_network_receive_bytes_total{device=\""))
            .filter_map(|l| l.split('"').next())
            .map(String::from)
            .collect()
    }

    #[test]
    fn device_include_and_exclude() {
        let re = |r: &str| Regex::new(r).unwrap();
        assert_eq!(
            devices_with(DeviceFilter::Exclude(re("^(lo|ifb.*)$"))),
            ["eth0"]
        );
        assert_eq!(
            devices_with(DeviceFilter::Include(re("^ifb"))),
            ["ifb0", "ifb1"]
        );
        assert!(devices_with(DeviceFilter::Include(re("^nothing$"))).is_empty());
    }

    #[test]
    fn colon_in_the_name_splits_at_the_last_colon() {
        let s = format!(
            "{HEADER}ibr10:30: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n  eth0:7 0 0 0 0 0 0 0 0 0 0 0 0 0 0 9\n"
        );
        let ifs = interfaces(&s).unwrap();
        assert_eq!(ifs[0].name, "ibr10:30");
        assert_eq!(ifs[0].values[0], 1);
        assert_eq!(ifs[0].values[15], 16);
        assert_eq!((ifs[1].name, ifs[1].values[0]), ("eth0", 7));
        let s = format!("{HEADER}a:b:1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n");
        assert_eq!(interfaces(&s).unwrap()[0].name, "a:b");
    }

    #[test]
    fn errors_quote_a_short_excerpt_of_the_file() {
        let huge = "x".repeat(10 << 20);
        let e = interfaces(&format!("{huge}\n")).unwrap_err();
        assert!(e.msg.len() < 100, "{}", e.msg);
        let e = interfaces(&format!("{HEADER}{huge}: 1\n")).unwrap_err();
        assert!(e.msg.len() < 100, "{}", e.msg);
        let e = interfaces(&format!("{HEADER}\u{1b}[2J{huge}: 1 2\n")).unwrap_err();
        assert!(e.msg.starts_with("\"\\u{1b}[2Jxxx"), "{}", e.msg);
        assert!(e.msg.len() < 100, "{}", e.msg);
    }

    /// Renders the collector over a procfs tree whose net/dev is `content`.
    fn collect_net_dev(content: &[u8]) -> Result<String, CollectError> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("net")).unwrap();
        std::fs::write(dir.path().join("net/dev"), content).unwrap();
        let mut c = build(&Settings::with_roots(
            dir.path().to_path_buf(),
            "/nonexistent",
        ));
        crate::collectors::test_support::render(c.as_mut())
    }

    #[test]
    fn a_name_that_is_not_utf8_loses_only_its_line() {
        let mut file = HEADER.as_bytes().to_vec();
        file.extend_from_slice(b"  lo: 5 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n");
        file.extend_from_slice(b"eth\xff0: 6 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n");
        file.extend_from_slice(b"  eth1: 7 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n");
        let out = collect_net_dev(&file).unwrap();
        assert!(out.contains("node_network_receive_bytes_total{device=\"lo\"} 5\n"));
        assert!(out.contains("node_network_receive_bytes_total{device=\"eth1\"} 7\n"));
        assert_eq!(out.matches("node_network_receive_bytes_total{").count(), 2);
        // An error after the dropped line names the file's line, not the
        // parser's.
        file.extend_from_slice(b"  eth2: x\n");
        let e = collect_net_dev(&file).unwrap_err();
        assert_eq!(e.line, Some(6), "{e}");
    }
}
