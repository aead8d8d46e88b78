//! /proc/net/sockstat and /proc/net/sockstat6 → `node_sockstat_*` gauges,
//! named as node_exporter names them: `node_sockstat_sockets_used`, then
//! `node_sockstat_<PROTO>_<field>` for the fields `inuse`, `orphan`, `tw`,
//! `alloc`, `mem` and `memory`, plus `<PROTO>_mem_bytes` (`mem` is in
//! pages) wherever `mem` is present.
//!
//! `TCP_tw` is the TIME_WAIT count behind the short-connection cases in
//! docs/signals.md. A missing file (sockstat6 without IPv6) is skipped.

use crate::collector::Collector;
use crate::collectors::dynamic::DynamicFamilies;
use crate::collectors::{Parser, Settings, Source, Spec};
use crate::error::{CollectError, ParseError, excerpt};
use crate::exposition::{Desc, Encoder, Format, MetricType};
use crate::parse::{fields, i64_field, is_blank, lines, recycle};
use crate::source::{Read, SourceFile};

pub const SPEC: Spec = Spec {
    name: "sockstat",
    default_enabled: true,
    help: "Socket statistics from /proc/net/sockstat and sockstat6",
    flags: &[],
    build,
    sources: &[
        Source::proc("net/sockstat", "sockstat"),
        Source::proc("net/sockstat6", "sockstat"),
    ],
    parsers: &[Parser::numeric("sockstat", check)],
};

/// The registry's entry point: parses, then writes the families as the
/// collector does (into a scratch buffer), which also checks the `mem`
/// conversion and the family names.
fn check(text: &str) -> Result<(), ParseError> {
    let mut lines = Vec::new();
    parse_into(text, &mut lines)?;
    let mut buf = Vec::new();
    let mut families = DynamicFamilies::new(MetricType::Gauge);
    let mut enc = Encoder::new(&mut buf, Format::PrometheusText);
    emit(&lines, true, page_size(), &mut families, &mut enc)
}

const SOCKETS_USED: Desc = Desc::gauge(
    "node_sockstat_sockets_used",
    "Number of IPv4 sockets in use.",
);

/// The per-protocol fields node_exporter exports; others are ignored, as
/// there (procfs parses only these).
const FIELDS: [&str; 6] = ["inuse", "orphan", "tw", "alloc", "mem", "memory"];

/// One line, `TCP: inuse 1 orphan 0 tw 3 alloc 1 mem 166`, checked: a
/// protocol, then an even number of tokens whose values are integers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Line<'a> {
    pub proto: &'a str,
    pairs: &'a str,
    pub line: usize,
}

impl<'a> Line<'a> {
    /// `(key, value token)` pairs in file order.
    pub fn pairs(&self) -> impl Iterator<Item = (&'a str, &'a str)> + use<'a> {
        let mut toks = fields(self.pairs);
        std::iter::from_fn(move || Some((toks.next()?, toks.next()?)))
    }
}

/// Parses a sockstat file into checked lines, skipping blank ones.
pub fn parse_into<'t>(s: &'t str, out: &mut Vec<Line<'t>>) -> Result<(), ParseError> {
    out.clear();
    for (i, l) in lines(s).enumerate() {
        if !is_blank(l) {
            out.push(line(l, i + 1)?);
        }
    }
    Ok(())
}

fn line(text: &str, lineno: usize) -> Result<Line<'_>, ParseError> {
    let (proto, pairs) = text
        .split_once(':')
        .ok_or_else(|| ParseError::new(lineno, "missing ':' after the protocol name"))?;
    if proto.is_empty() || !proto.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(ParseError::new(
            lineno,
            format!("invalid protocol name {proto:?}"),
        ));
    }
    let n = fields(pairs).count();
    if n == 0 || !n.is_multiple_of(2) {
        return Err(ParseError::new(
            lineno,
            format!("{}: {n} tokens, expected key/value pairs", excerpt(proto)),
        ));
    }
    let l = Line {
        proto,
        pairs,
        line: lineno,
    };
    for (key, tok) in l.pairs() {
        if !key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
            return Err(ParseError::new(
                lineno,
                format!("{}: invalid key {}", excerpt(proto), excerpt(key)),
            ));
        }
        i64_field(tok, lineno, key)?;
    }
    Ok(l)
}

/// `proto`'s `inuse` count in a sockstat file's text (udp_queues' count of
/// a UDP table), if the protocol's line parses and starts with it. A line
/// before it that does not parse also means None.
pub fn inuse(text: &str, proto: &str) -> Option<u64> {
    for (i, l) in lines(text).enumerate() {
        if is_blank(l) {
            continue;
        }
        let l = line(l, i + 1).ok()?;
        if l.proto == proto {
            let (key, value) = l.pairs().next()?;
            return (key == "inuse").then(|| value.parse().ok())?;
        }
    }
    None
}

pub struct SockStatCollector {
    v4: SourceFile,
    v6: SourceFile,
    page_size: i64,
    families: DynamicFamilies,
    /// Kept empty between scrapes; only its allocation is reused.
    lines: Vec<Line<'static>>,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(collector(s, page_size()))
}

fn collector(s: &Settings, page_size: i64) -> SockStatCollector {
    SockStatCollector {
        v4: SourceFile::new(&s.procfs, "net/sockstat"),
        v6: SourceFile::new(&s.procfs, "net/sockstat6"),
        page_size,
        families: DynamicFamilies::new(MetricType::Gauge),
        lines: Vec::new(),
    }
}

/// The size of the pages `mem` is counted in, as node_exporter takes it
/// (os.Getpagesize).
fn page_size() -> i64 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 { n } else { 4096 }
}

/// Writes one file's families; `v4` says whether `sockets: used` counts.
fn emit(
    lines: &[Line],
    v4: bool,
    page_size: i64,
    families: &mut DynamicFamilies,
    enc: &mut Encoder,
) -> Result<(), ParseError> {
    for l in lines {
        if l.proto == "sockets" {
            for (key, tok) in l.pairs() {
                if v4 && key == "used" {
                    enc.family(&SOCKETS_USED);
                    enc.sample(&SOCKETS_USED, &[], i64_field(tok, l.line, key)?);
                }
            }
            continue;
        }
        let mut mem = None;
        for (key, tok) in l.pairs() {
            if !FIELDS.contains(&key) {
                continue;
            }
            let v = i64_field(tok, l.line, key)?;
            if key == "mem" {
                mem = Some(v);
            }
            gauge(families, enc, l, key, v)?;
        }
        if let Some(pages) = mem {
            let bytes = pages.checked_mul(page_size).ok_or_else(|| {
                ParseError::new(
                    l.line,
                    format!("{}: mem {pages} pages overflows bytes", l.proto),
                )
            })?;
            gauge(families, enc, l, "mem_bytes", bytes)?;
        }
    }
    Ok(())
}

fn gauge(
    families: &mut DynamicFamilies,
    enc: &mut Encoder,
    l: &Line,
    field: &str,
    v: i64,
) -> Result<(), ParseError> {
    let id = families.get(l.proto, field, l.line, || {
        (
            format!("node_sockstat_{}_{field}", l.proto),
            format!("Number of {} sockets in state {field}.", l.proto),
        )
    })?;
    families.write(id, enc, v);
    Ok(())
}

impl Collector for SockStatCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        for (file, v4) in [(&mut self.v4, true), (&mut self.v6, false)] {
            let Read::Text(t) = file.read()? else {
                continue;
            };
            let mut lines = recycle(std::mem::take(&mut self.lines));
            let r = parse_into(t, &mut lines)
                .and_then(|()| emit(&lines, v4, self.page_size, &mut self.families, enc));
            self.lines = recycle(lines);
            r.map_err(|e| file.parse_error(e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::render;
    use std::path::Path;

    const SOCKSTAT: &str = include_str!("../../tests/fixtures/proc/net/sockstat");
    const SOCKSTAT6: &str = include_str!("../../tests/fixtures/proc/net/sockstat6");

    fn lines(s: &str) -> Result<Vec<Line<'_>>, ParseError> {
        let mut out = Vec::new();
        parse_into(s, &mut out).map(|()| out)
    }

    #[test]
    fn fixtures() {
        let l = lines(SOCKSTAT).unwrap();
        let protos: Vec<&str> = l.iter().map(|l| l.proto).collect();
        assert_eq!(protos, ["sockets", "TCP", "UDP", "UDPLITE", "RAW", "FRAG"]);
        let tcp: Vec<_> = l[1].pairs().collect();
        assert_eq!(
            tcp,
            [
                ("inuse", "1"),
                ("orphan", "0"),
                ("tw", "3"),
                ("alloc", "1"),
                ("mem", "166")
            ]
        );
        let l6 = lines(SOCKSTAT6).unwrap();
        assert_eq!(l6.len(), 5);
        assert_eq!(
            l6[4].pairs().collect::<Vec<_>>(),
            [("inuse", "0"), ("memory", "0")]
        );
    }

    #[test]
    fn malformed() {
        assert_eq!(lines("").unwrap(), vec![]);
        assert!(lines("\u{1}garbage here\n%%% not a kernel file %%%\n:::\n").is_err());
        let e = lines("sockets: used 8\nTCP: inuse 1 orphan\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.msg.contains("3 tokens"), "{}", e.msg);
        assert!(lines("TCP:\n").unwrap_err().msg.contains("0 tokens"));
        assert!(lines("TCP inuse 1\n").unwrap_err().msg.contains("':'"));
        assert!(lines("TCP: inuse x\n").unwrap_err().msg.contains("inuse"));
        assert!(
            lines("TCP: 1 inuse\n")
                .unwrap_err()
                .msg
                .contains("invalid key")
        );
        assert!(lines("TCP: inuse 9223372036854775808\n").is_err());
        assert!(lines("TCP: inuse 99999999999999999999999\n").is_err());
        let extra: String = SOCKSTAT.lines().map(|l| format!("{l} 7\n")).collect();
        assert!(lines(&extra).is_err());
        let cut = &SOCKSTAT[..SOCKSTAT.len() / 2];
        assert!(lines(cut).is_err());
    }

    #[test]
    fn collector_on_fixture() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proc");
        let mut c = collector(&Settings::with_roots(root, "/nonexistent"), 4096);
        let out = render(&mut c).unwrap();
        let samples: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            samples,
            [
                "node_sockstat_sockets_used 8",
                "node_sockstat_TCP_inuse 1",
                "node_sockstat_TCP_orphan 0",
                "node_sockstat_TCP_tw 3",
                "node_sockstat_TCP_alloc 1",
                "node_sockstat_TCP_mem 166",
                "node_sockstat_TCP_mem_bytes 679936",
                "node_sockstat_UDP_inuse 0",
                "node_sockstat_UDP_mem 0",
                "node_sockstat_UDP_mem_bytes 0",
                "node_sockstat_UDPLITE_inuse 0",
                "node_sockstat_RAW_inuse 0",
                "node_sockstat_FRAG_inuse 0",
                "node_sockstat_FRAG_memory 0",
                "node_sockstat_TCP6_inuse 0",
                "node_sockstat_UDP6_inuse 0",
                "node_sockstat_UDPLITE6_inuse 0",
                "node_sockstat_RAW6_inuse 0",
                "node_sockstat_FRAG6_inuse 0",
                "node_sockstat_FRAG6_memory 0",
            ]
        );
        assert!(out.starts_with(
            "# HELP node_sockstat_sockets_used Number of IPv4 sockets in use.\n# TYPE node_sockstat_sockets_used gauge\nnode_sockstat_sockets_used 8\n"
        ));
        assert!(out.contains(
            "# HELP node_sockstat_TCP_tw Number of TCP sockets in state tw.\n# TYPE node_sockstat_TCP_tw gauge\nnode_sockstat_TCP_tw 3\n"
        ));
        assert!(out.contains(
            "# HELP node_sockstat_TCP_mem_bytes Number of TCP sockets in state mem_bytes.\n"
        ));
        assert_eq!(render(&mut c).unwrap(), out);
    }

    #[test]
    fn without_ipv6_and_with_unknown_keys() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path();
        std::fs::create_dir_all(dir.join("net")).unwrap();
        std::fs::write(
            dir.join("net/sockstat"),
            "sockets: used 3\nTCP: inuse 2 orphan 0 tw 32768 alloc 2 mem 1 newkey 5\n",
        )
        .unwrap();
        let mut c = collector(&Settings::with_roots(dir, "/nonexistent"), 65536);
        let out = render(&mut c).unwrap();
        assert!(out.contains("node_sockstat_TCP_tw 32768\n"));
        assert!(out.contains("node_sockstat_TCP_mem_bytes 65536\n"));
        assert!(!out.contains("newkey"));
        assert!(!out.contains("TCP6"));
        std::fs::write(
            dir.join("net/sockstat"),
            "TCP: inuse 2 mem 9223372036854775807\n",
        )
        .unwrap();
        let e = render(&mut c).unwrap_err();
        assert!(e.cause.contains("overflows"));
        assert_eq!(e.line, Some(1));
    }

    #[test]
    fn inuse_counts() {
        let v4 = "sockets: used 7\nTCP: inuse 1 orphan 0 tw 1 alloc 1 mem 0\nUDP: inuse 3 mem 2\nUDPLITE: inuse 0\n";
        assert_eq!(inuse(v4, "UDP"), Some(3));
        assert_eq!(inuse(v4, "UDPLITE"), Some(0));
        assert_eq!(inuse("UDPLITE: inuse 0\n", "UDP"), None);
        let v6 = "TCP6: inuse 0\nUDP6: inuse 0\nUDPLITE6: inuse 0\n";
        assert_eq!(inuse(v6, "UDP6"), Some(0));
        assert_eq!(inuse(v6, "UDP"), None);
        for bad in [
            "UDP: mem 0 inuse 0\n",
            "UDP: inuse\n",
            "UDP: inuse x\n",
            "UDP: inuse -1\n",
            "garbage\nUDP: inuse 0\n",
            "",
        ] {
            assert_eq!(inuse(bad, "UDP"), None, "{bad:?}");
        }
    }
}
