//! /proc/net/sockstat and /proc/net/sockstat6 → `node_sockstat_*` gauges,
//! named as node_exporter names them: `node_sockstat_sockets_used`, then
//! `node_sockstat_<PROTO>_<field>` for the fields `inuse`, `orphan`, `tw`,
//! `alloc`, `mem` and `memory`, plus `<PROTO>_mem_bytes` (`mem` is in
//! pages) wherever `mem` is present.
//!
//! `TCP_tw` is the TIME_WAIT count behind the short-connection cases in
//! docs/signals.md. A missing file (sockstat6 without IPv6) is skipped.

use crate::collectors::dynamic::DynamicFamilies;
use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError};
use crate::kernel::parse::{i64_field, recycle};
use crate::kernel::sockstat::{Line, parse_into};
use crate::kernel::source::{Read, SourceFile};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder, Format, MetricType};

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
}
