//! /proc/net/netstat, /proc/net/snmp and /proc/net/snmp6 →
//! `node_netstat_<Proto>_<Field>`, untyped, as node_exporter exports them.
//!
//! netstat and snmp come as pairs of lines, `Proto: names...` then
//! `Proto: values...`; snmp6 has one `Ip6InReceives  1` pair per line and
//! the protocol is the name up to its first '6' (`Ip6`, `Icmp6`, `Udp6`).
//!
//! Which fields are exported: node_exporter 1.9's default
//! `--collector.netstat.fields`, plus what the USE rules here need on top:
//! `TcpExt_TW*` (TIME_WAIT churn) and `TcpExt_DelayedACKs` (delayed ACKs
//! that a peer's Nagle stalls wait for). `TcpExt_ListenOverflows`,
//! `TcpExt_ListenDrops`, `TcpExt_TCPTimeouts` and `Tcp_RetransSegs` are
//! listed explicitly too, so they stay even if node_exporter's default
//! changes. The regex runs only when a header line (or an snmp6 name) is
//! seen for the first time; the decision is cached with the header.
//!
//! Each file is optional: one the kernel lacks (snmp6 without IPv6) is
//! skipped, the others are still exported.
//!
//! Like vmstat's, the scrape path caches per header line and checks each
//! value while it writes it, instead of calling [`parse_into`] and parsing
//! every value twice; the registry's tests hold it to rejecting whatever
//! the parsers reject.

use std::sync::OnceLock;

use regex::Regex;

use crate::collectors::dynamic::{DynamicFamilies, FamilyId};
use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError, excerpt};
use crate::kernel::parse::{
    after_key, fields, i64_field, is_blank, lines, plain_u64, single_field, u64_field,
};
use crate::kernel::source::{Read, SourceFile};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Encoder, Format, MetricType, Value};

pub const SPEC: Spec = Spec {
    name: "netstat",
    default_enabled: true,
    help: "Protocol statistics from /proc/net/netstat, snmp and snmp6",
    flags: &[],
    build,
    sources: &[
        Source::proc("net/netstat", "netstat"),
        Source::proc("net/snmp", "netstat"),
        Source::proc("net/snmp6", "snmp6"),
    ],
    parsers: &[
        Parser::numeric("netstat", check_netstat),
        Parser::numeric("snmp6", check_snmp6),
    ],
};

/// The registry's entry points: the parser, then the scrape path itself
/// (into a scratch buffer) with a fresh cache and with the cache that
/// first pass filled.
fn check_netstat(text: &str) -> Result<(), ParseError> {
    let mut sections = Vec::new();
    parse_into(text, &mut sections)?;
    for s in &sections {
        for f in s.fields() {
            std::hint::black_box(f);
        }
    }
    let mut families = DynamicFamilies::new(MetricType::Untyped);
    let mut headers = Vec::new();
    let mut buf = Vec::new();
    for _ in 0..2 {
        buf.clear();
        let mut sel = Selector {
            select: field_regex(),
            families: &mut families,
        };
        let mut enc = Encoder::new(&mut buf, Format::PrometheusText);
        emit_sections(text, &mut sel, &mut headers, &mut enc)?;
    }
    Ok(())
}

fn check_snmp6(text: &str) -> Result<(), ParseError> {
    parse_snmp6_into(text, &mut Vec::new())?;
    let mut families = DynamicFamilies::new(MetricType::Untyped);
    let mut names = Vec::new();
    let mut buf = Vec::new();
    for _ in 0..2 {
        buf.clear();
        let mut sel = Selector {
            select: field_regex(),
            families: &mut families,
        };
        let mut enc = Encoder::new(&mut buf, Format::PrometheusText);
        emit_snmp6(text, &mut sel, &mut names, &mut enc)?;
    }
    Ok(())
}

/// The exported fields: node_exporter's default and usescope's additions.
fn field_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        let pattern = format!("(?:{NODE_EXPORTER_FIELDS})|(?:{USESCOPE_FIELDS})");
        Regex::new(&pattern).expect("the netstat field patterns are valid regexes")
    })
}

/// node_exporter 1.9's default for `--collector.netstat.fields`.
pub const NODE_EXPORTER_FIELDS: &str = "^(.*_(InErrors|InErrs)|Ip_Forwarding|Ip(6|Ext)_(InOctets|OutOctets)|Icmp6?_(InMsgs|OutMsgs)|TcpExt_(Listen.*|Syncookies.*|TCPSynRetrans|TCPTimeouts|TCPOFOQueue|TCPRcvQDrop)|Tcp_(ActiveOpens|InSegs|OutSegs|OutRsts|PassiveOpens|RetransSegs|CurrEstab)|Udp6?_(InDatagrams|OutDatagrams|NoPorts|RcvbufErrors|SndbufErrors))$";

/// Fields usescope's alerts and dashboards rely on, beyond that default.
pub const USESCOPE_FIELDS: &str =
    "^(TcpExt_(ListenOverflows|ListenDrops|TCPTimeouts|TW.*|DelayedACKs)|Tcp_RetransSegs)$";

/// Most distinct header lines remembered before the cache starts over; the
/// kernel prints about ten, so only a file that keeps changing hits this.
const MAX_CACHED_HEADERS: usize = 64;

/// Parses a counter. Nearly all are unsigned; a few snmp values are signed
/// (`Tcp: MaxConn` is -1 when the limit is dynamic).
pub fn number(tok: &str, line: usize, what: &str) -> Result<Value, ParseError> {
    if tok.starts_with('-') {
        i64_field(tok, line, what).map(Value::I64)
    } else {
        u64_field(tok, line, what).map(Value::U64)
    }
}

/// One `Proto: names` / `Proto: values` pair of lines. Those [`parse_into`]
/// returns are checked: same protocol, same number of fields, every value a
/// number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Section<'a> {
    pub proto: &'a str,
    /// The whole names line, which keys the field-selection cache.
    pub header: &'a str,
    names: &'a str,
    values: &'a str,
    /// Line number of the values line.
    pub line: usize,
    header_line: usize,
}

impl<'a> Section<'a> {
    /// `(field name, value token)` in file order.
    pub fn fields(&self) -> impl Iterator<Item = (&'a str, &'a str)> + use<'a> {
        fields(self.names).zip(fields(self.values))
    }
}

/// Parses /proc/net/netstat or /proc/net/snmp into checked sections.
pub fn parse_into<'t>(s: &'t str, out: &mut Vec<Section<'t>>) -> Result<(), ParseError> {
    out.clear();
    for pair in pairs(s) {
        let section = pair?;
        check_fields(&section)?;
        out.push(section);
    }
    Ok(())
}

/// The line pairs of a netstat/snmp file with their protocols checked but
/// not yet their fields: the collector checks the fields of a pair whose
/// header it has seen before while it writes the values (see
/// [`emit_values`]), so each value is parsed once per scrape.
fn pairs(s: &str) -> Pairs<'_> {
    Pairs {
        lines: lines(s).enumerate(),
    }
}

struct Pairs<'a> {
    lines: std::iter::Enumerate<crate::kernel::parse::Lines<'a>>,
}

impl<'a> Iterator for Pairs<'a> {
    type Item = Result<Section<'a>, ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (i, header) = self.lines.find(|(_, l)| !is_blank(l))?;
        let values = self.lines.next();
        Some(pair(header, i + 1, values.map(|(j, v)| (v, j + 1))))
    }
}

fn pair<'a>(
    header: &'a str,
    header_line: usize,
    values: Option<(&'a str, usize)>,
) -> Result<Section<'a>, ParseError> {
    let (proto, names) = split_proto(header, header_line)?;
    let (values, line) = values.ok_or_else(|| {
        ParseError::new(header_line, format!("{}: no values line", excerpt(proto)))
    })?;
    let (vproto, vals) = split_proto(values, line)?;
    if vproto != proto {
        return Err(ParseError::new(
            line,
            format!("values for {vproto:?} follow the {proto:?} header"),
        ));
    }
    Ok(Section {
        proto,
        header,
        names,
        values: vals,
        line,
        header_line,
    })
}

/// Checks a pair's fields: every name usable in a metric name, every value
/// a number, as many names as values, and at least one.
fn check_fields(s: &Section) -> Result<(), ParseError> {
    // One pass over names and values together: validate each pair, and
    // count both sides only when their lengths turn out to differ.
    let (mut name_it, mut value_it) = (fields(s.names), fields(s.values));
    let mut n = 0;
    loop {
        match (name_it.next(), value_it.next()) {
            (Some(name), Some(tok)) => {
                if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                    return Err(ParseError::new(
                        s.header_line,
                        format!("{}: invalid field name {name:?}", s.proto),
                    ));
                }
                number(tok, s.line, name)?;
                n += 1;
            }
            (None, None) => break,
            (extra_name, _) => {
                let n_names = n + usize::from(extra_name.is_some()) + name_it.count();
                return Err(count_mismatch(s, n_names));
            }
        }
    }
    if n == 0 {
        return Err(ParseError::new(s.line, format!("{}: no fields", s.proto)));
    }
    Ok(())
}

/// The error for a values line whose length differs from its header's.
fn count_mismatch(s: &Section, n_names: usize) -> ParseError {
    let n_values = fields(s.values).count();
    ParseError::new(
        s.line,
        format!("{}: {n_names} names but {n_values} values", s.proto),
    )
}

/// `TcpExt: a b c` → (`TcpExt`, ` a b c`).
fn split_proto(line: &str, lineno: usize) -> Result<(&str, &str), ParseError> {
    let (proto, rest) = line
        .split_once(':')
        .ok_or_else(|| ParseError::new(lineno, "missing ':' after the protocol name"))?;
    if proto.is_empty() || !proto.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(ParseError::new(
            lineno,
            format!("invalid protocol name {proto:?}"),
        ));
    }
    Ok((proto, rest))
}

/// One snmp6 line: `Icmp6InMsgs    1` → proto `Icmp6`, field `InMsgs`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Snmp6Field<'a> {
    /// The whole name, `Icmp6InMsgs`.
    pub name: &'a str,
    pub proto: &'a str,
    pub field: &'a str,
    pub value: Value,
    pub line: usize,
}

/// Parses /proc/net/snmp6, one field per non-blank line.
pub fn parse_snmp6_into<'t>(s: &'t str, out: &mut Vec<Snmp6Field<'t>>) -> Result<(), ParseError> {
    out.clear();
    for (n, l) in numbered_lines(s) {
        out.push(snmp6_line(l, n)?);
    }
    Ok(())
}

/// The non-empty lines with their 1-based line numbers.
fn numbered_lines(s: &str) -> impl Iterator<Item = (usize, &str)> {
    lines(s)
        .enumerate()
        .filter(|(_, l)| !is_blank(l))
        .map(|(i, l)| (i + 1, l))
}

fn snmp6_line(line: &str, lineno: usize) -> Result<Snmp6Field<'_>, ParseError> {
    let mut toks = fields(line);
    let (name, tok) = match (toks.next(), toks.next(), toks.next()) {
        (Some(name), Some(tok), None) => (name, tok),
        _ => {
            return Err(ParseError::new(lineno, "expected a name and one value"));
        }
    };
    let split = name
        .find('6')
        .map(|i| i + 1)
        .filter(|&i| i > 1 && i < name.len())
        .ok_or_else(|| ParseError::new(lineno, format!("{name:?} is not <Proto>6<Field>")))?;
    let (proto, field) = name.split_at(split);
    if !name.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(ParseError::new(lineno, format!("invalid name {name:?}")));
    }
    Ok(Snmp6Field {
        name,
        proto,
        field,
        value: number(tok, lineno, name)?,
        line: lineno,
    })
}

/// Which fields of one header line are exported, with their descriptions.
struct HeaderSelection {
    header: String,
    families: Vec<Option<FamilyId>>,
}

pub struct NetStatCollector {
    netstat: SourceFile,
    snmp: SourceFile,
    snmp6: SourceFile,
    select: Regex,
    families: DynamicFamilies,
    /// Selections for the netstat/snmp header lines seen so far.
    headers: Vec<HeaderSelection>,
    /// snmp6 selections by line: the name seen there and its description.
    snmp6_names: Vec<(Box<str>, Option<FamilyId>)>,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(NetStatCollector {
        netstat: SourceFile::new(&s.procfs, "net/netstat"),
        snmp: SourceFile::new(&s.procfs, "net/snmp"),
        snmp6: SourceFile::new(&s.procfs, "net/snmp6"),
        select: field_regex().clone(),
        families: DynamicFamilies::new(MetricType::Untyped),
        headers: Vec::new(),
        snmp6_names: Vec::new(),
    })
}

/// Everything the emitters share, borrowed apart from the source files.
struct Selector<'c> {
    select: &'c Regex,
    families: &'c mut DynamicFamilies,
}

impl Selector<'_> {
    /// Runs the field regex on `Proto_Field`; only on a cache miss.
    fn family_for(
        &mut self,
        proto: &str,
        field: &str,
        line: usize,
    ) -> Result<Option<FamilyId>, ParseError> {
        let key = format!("{proto}_{field}");
        if !self.select.is_match(&key) {
            return Ok(None);
        }
        self.families
            .get(proto, field, line, || {
                (
                    format!("node_netstat_{key}"),
                    format!("Statistic {proto}{field}."),
                )
            })
            .map(Some)
    }
}

fn emit_sections(
    text: &str,
    sel: &mut Selector,
    headers: &mut Vec<HeaderSelection>,
    enc: &mut Encoder,
) -> Result<(), ParseError> {
    for section in pairs(text) {
        let section = section?;
        let idx = match headers.iter().position(|h| h.header == section.header) {
            Some(i) => i,
            None => {
                check_fields(&section)?;
                if headers.len() >= MAX_CACHED_HEADERS {
                    headers.clear();
                }
                let mut families = Vec::new();
                for field in fields(section.names) {
                    families.push(sel.family_for(section.proto, field, section.line)?);
                }
                headers.push(HeaderSelection {
                    header: section.header.to_string(),
                    families,
                });
                headers.len() - 1
            }
        };
        emit_values(&section, &headers[idx].families, sel.families, enc)?;
    }
    Ok(())
}

/// Parses every value of a pair whose header is cached, writing the
/// selected ones. The cached header's names passed [`check_fields`] and
/// `selection` has one entry per name, so only the values remain to check,
/// and they fail exactly as [`check_fields`] would fail them.
fn emit_values(
    section: &Section,
    selection: &[Option<FamilyId>],
    families: &DynamicFamilies,
    enc: &mut Encoder,
) -> Result<(), ParseError> {
    let mut values = fields(section.values);
    for (i, id) in selection.iter().enumerate() {
        let tok = values
            .next()
            .ok_or_else(|| count_mismatch(section, selection.len()))?;
        let value = match plain_u64(tok) {
            Some(v) => Value::U64(v),
            // Negative, or malformed: the full parser, naming the field in
            // its error. Looking the name up is slow but rare.
            None => {
                let name = fields(section.names).nth(i).unwrap_or_default();
                number(tok, section.line, name)?
            }
        };
        if let Some(id) = *id {
            families.write(id, enc, value);
        }
    }
    if values.next().is_some() {
        return Err(count_mismatch(section, selection.len()));
    }
    Ok(())
}

fn emit_snmp6(
    text: &str,
    sel: &mut Selector,
    names: &mut Vec<(Box<str>, Option<FamilyId>)>,
    enc: &mut Encoder,
) -> Result<(), ParseError> {
    for (i, (n, line)) in numbered_lines(text).enumerate() {
        let (id, value) = match cached_snmp6(names, i, line) {
            Some((name, id, tok)) => (id, number(tok, n, name)?),
            None => {
                let f = snmp6_line(line, n)?;
                let id = sel.family_for(f.proto, f.field, f.line)?;
                names.truncate(i);
                names.push((f.name.into(), id));
                (id, f.value)
            }
        };
        if let Some(id) = id {
            sel.families.write(id, enc, value);
        }
    }
    Ok(())
}

/// The name, family and value token of an snmp6 line that starts with the
/// name cached for position `i`. That name passed [`snmp6_line`]'s checks
/// when it was cached, so only the value is left to parse; any other line
/// (`None`) goes through [`snmp6_line`].
fn cached_snmp6<'n, 'l>(
    names: &'n [(Box<str>, Option<FamilyId>)],
    i: usize,
    line: &'l str,
) -> Option<(&'n str, Option<FamilyId>, &'l str)> {
    let (name, id) = names.get(i)?;
    let tok = single_field(after_key(line, name)?)?;
    Some((name, *id, tok))
}

impl Collector for NetStatCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let mut sel = Selector {
            select: &self.select,
            families: &mut self.families,
        };
        for file in [&mut self.netstat, &mut self.snmp] {
            if let Read::Text(t) = file.read()? {
                let r = emit_sections(t, &mut sel, &mut self.headers, enc);
                r.map_err(|e| file.parse_error(e))?;
            }
        }
        if let Read::Text(t) = self.snmp6.read()? {
            let r = emit_snmp6(t, &mut sel, &mut self.snmp6_names, enc);
            r.map_err(|e| self.snmp6.parse_error(e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::render;
    use std::path::{Path, PathBuf};

    const NETSTAT: &str = include_str!("../../tests/fixtures/proc/net/netstat");
    const SNMP: &str = include_str!("../../tests/fixtures/proc/net/snmp");
    const SNMP6: &str = include_str!("../../tests/fixtures/proc/net/snmp6");

    fn sections(s: &str) -> Result<Vec<Section<'_>>, ParseError> {
        let mut out = Vec::new();
        parse_into(s, &mut out).map(|()| out)
    }

    fn snmp6(s: &str) -> Result<Vec<Snmp6Field<'_>>, ParseError> {
        let mut out = Vec::new();
        parse_snmp6_into(s, &mut out).map(|()| out)
    }

    fn fixture_root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proc")
    }

    #[test]
    fn netstat_fixture() {
        let s = sections(NETSTAT).unwrap();
        let protos: Vec<&str> = s.iter().map(|s| s.proto).collect();
        assert_eq!(protos, ["TcpExt", "IpExt", "MPTcpExt"]);
        let tcp: Vec<(&str, &str)> = s[0].fields().collect();
        assert_eq!(tcp[10], ("TW", "15"));
        assert!(tcp.contains(&("ListenOverflows", "0")));
        assert_eq!(s[1].line, 4);
    }

    #[test]
    fn snmp_fixture_with_a_negative_value() {
        let s = sections(SNMP).unwrap();
        let protos: Vec<&str> = s.iter().map(|s| s.proto).collect();
        assert_eq!(protos, ["Ip", "Icmp", "IcmpMsg", "Tcp", "Udp", "UdpLite"]);
        let tcp: Vec<(&str, &str)> = s[3].fields().collect();
        assert_eq!(tcp[3], ("MaxConn", "-1"));
        assert_eq!(number("-1", 1, "x").unwrap(), Value::I64(-1));
    }

    #[test]
    fn snmp6_fixture() {
        let f = snmp6(SNMP6).unwrap();
        assert_eq!(f.len(), 90);
        assert_eq!(
            f[0],
            Snmp6Field {
                name: "Ip6InReceives",
                proto: "Ip6",
                field: "InReceives",
                value: Value::U64(1),
                line: 1
            }
        );
        let udplite = f.iter().find(|f| f.proto == "UdpLite6").unwrap();
        assert_eq!(udplite.field, "InDatagrams");
        let icmp = f.iter().find(|f| f.field == "OutType143").unwrap();
        assert_eq!(icmp.proto, "Icmp6");
    }

    #[test]
    fn header_and_values_must_agree() {
        let e = sections("Tcp: A B C\nTcp: 1 2\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.msg.contains("3 names but 2 values"), "{}", e.msg);
        let e = sections("Tcp: A B\nTcp: 1 2 3\n").unwrap_err();
        assert!(e.msg.contains("2 names but 3 values"));
        let e = sections("Tcp: A B\nUdp: 1 2\n").unwrap_err();
        assert!(e.msg.contains("follow"));
        let e = sections("Tcp: A B\nTcp: 1 2\nUdp: A\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.msg.contains("no values line"));
    }

    #[test]
    fn malformed_pairs() {
        assert_eq!(sections("").unwrap(), vec![]);
        assert!(sections("\u{1}garbage here\n%%% not a kernel file %%%\n:::\n").is_err());
        assert!(
            sections("Tcp A B\nTcp 1 2\n")
                .unwrap_err()
                .msg
                .contains("':'")
        );
        assert!(
            sections("Tcp:\nTcp:\n")
                .unwrap_err()
                .msg
                .contains("no fields")
        );
        let e = sections("Tcp: A B\nTcp: 1 x\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.msg.contains("B: invalid"), "{}", e.msg);
        let e = sections("Tcp: A\nTcp: 18446744073709551616\n").unwrap_err();
        assert!(e.msg.contains("A: invalid unsigned"));
        assert!(sections("Tcp: A\nTcp: -9223372036854775809\n").is_err());
        let cut = &NETSTAT[..NETSTAT.len() / 2];
        assert!(sections(cut).is_err());
        // A column appended to both lines of every pair is still a pair.
        let extra: String = NETSTAT.lines().map(|l| format!("{l} 7\n")).collect();
        assert_eq!(sections(&extra).unwrap().len(), 3);
        // Names become part of metric names: only [A-Za-z0-9_] will do.
        let e = sections("Tcp: A B-C\nTcp: 1 2\n").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.msg.contains("B-C"), "{}", e.msg);
    }

    #[test]
    fn cached_header_fails_like_a_new_one() {
        let re = Regex::new(&format!("(?:{NODE_EXPORTER_FIELDS})|(?:{USESCOPE_FIELDS})")).unwrap();
        let mut families = DynamicFamilies::new(MetricType::Untyped);
        let mut sel = Selector {
            select: &re,
            families: &mut families,
        };
        let mut headers = Vec::new();
        let mut emit = |text: &str| {
            let mut buf = Vec::new();
            let mut enc = Encoder::new(&mut buf, crate::scrape::exposition::Format::PrometheusText);
            emit_sections(text, &mut sel, &mut headers, &mut enc).map(|()| buf.len())
        };
        emit("Tcp: MaxConn InErrs RetransSegs\nTcp: 1 2 3\n").unwrap();
        for values in [
            "-1 +2 3",
            "1 x 3",
            "1 2",
            "1 2 3 4",
            "1 2 18446744073709551616",
            "",
        ] {
            let text = format!("Tcp: MaxConn InErrs RetransSegs\nTcp: {values}\n");
            let fresh = sections(&text).map(|_| ()).map_err(|e| (e.line, e.msg));
            let cached = emit(&text).map(|_| ()).map_err(|e| (e.line, e.msg));
            assert_eq!(cached, fresh, "{values:?}");
        }
    }

    #[test]
    fn cached_snmp6_lines_fail_like_new_ones() {
        let re = Regex::new(&format!("(?:{NODE_EXPORTER_FIELDS})|(?:{USESCOPE_FIELDS})")).unwrap();
        let mut families = DynamicFamilies::new(MetricType::Untyped);
        let mut sel = Selector {
            select: &re,
            families: &mut families,
        };
        let mut cached = Vec::new();
        let mut emit = |text: &str, names: &mut Vec<_>| {
            let mut buf = Vec::new();
            let mut enc = Encoder::new(&mut buf, crate::scrape::exposition::Format::PrometheusText);
            emit_snmp6(text, &mut sel, names, &mut enc)
                .map(|()| String::from_utf8(buf).unwrap())
                .map_err(|e| (e.line, e.msg))
        };
        let good = "Ip6InReceives 1\nUdp6InErrors 2\n";
        emit(good, &mut cached).unwrap();
        for line in [
            "Udp6InErrors x",
            "Udp6InErrors -1",
            "Udp6InErrors +5",
            "Udp6InErrors 18446744073709551616",
            "Udp6InErrors",
            "Udp6InErrors 1 2",
            "Udp6InErrorsX 3",
            "Udp6InErrors-x 3",
        ] {
            let text = format!("Ip6InReceives 1\n{line}\n");
            let fresh = emit(&text, &mut Vec::new());
            assert_eq!(emit(&text, &mut cached), fresh, "{line:?}");
            emit(good, &mut cached).unwrap();
        }
    }

    #[test]
    fn malformed_snmp6() {
        assert_eq!(snmp6("").unwrap(), vec![]);
        assert!(
            snmp6("Ip6InReceives\n")
                .unwrap_err()
                .msg
                .contains("one value")
        );
        assert!(snmp6("Ip6InReceives 1 2\n").is_err());
        assert!(snmp6("TcpInSegs 1\n").unwrap_err().msg.contains("<Proto>6"));
        assert!(snmp6("Ip6 1\n").is_err());
        assert!(snmp6("6In 1\n").is_err());
        assert!(snmp6("Ip6In-x 1\n").is_err());
        let e = snmp6("Ip6InReceives 1\nIp6InDelivers 18446744073709551616\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(snmp6("\u{1}garbage here\n%%% not a kernel file %%%\n:::\n").is_err());
    }

    #[test]
    fn field_selection() {
        let re = Regex::new(&format!("(?:{NODE_EXPORTER_FIELDS})|(?:{USESCOPE_FIELDS})")).unwrap();
        for yes in [
            "TcpExt_ListenOverflows",
            "TcpExt_ListenDrops",
            "TcpExt_TCPTimeouts",
            "TcpExt_TW",
            "TcpExt_TWRecycled",
            "TcpExt_TWKilled",
            "TcpExt_DelayedACKs",
            "TcpExt_SyncookiesSent",
            "Tcp_RetransSegs",
            "Tcp_CurrEstab",
            "Udp_InErrors",
            "Ip_Forwarding",
            "Ip6_InOctets",
            "IpExt_OutOctets",
            "Icmp6_InMsgs",
            "Udp6_RcvbufErrors",
        ] {
            assert!(re.is_match(yes), "{yes}");
        }
        for no in [
            "TcpExt_TCPHPHits",
            "TcpExt_DelayedACKLost",
            "Tcp_MaxConn",
            "Ip_InReceives",
            "MPTcpExt_MPTCPRetrans",
        ] {
            assert!(!re.is_match(no), "{no}");
        }
    }

    #[test]
    fn collector_on_fixture() {
        let mut c = build(&Settings::with_roots(fixture_root(), "/nonexistent"));
        let out = render(c.as_mut()).unwrap();
        let samples: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            samples,
            [
                "node_netstat_TcpExt_SyncookiesSent 0",
                "node_netstat_TcpExt_SyncookiesRecv 0",
                "node_netstat_TcpExt_SyncookiesFailed 0",
                "node_netstat_TcpExt_TW 15",
                "node_netstat_TcpExt_TWRecycled 0",
                "node_netstat_TcpExt_TWKilled 0",
                "node_netstat_TcpExt_DelayedACKs 1",
                "node_netstat_TcpExt_ListenOverflows 0",
                "node_netstat_TcpExt_ListenDrops 0",
                "node_netstat_TcpExt_TCPTimeouts 2",
                "node_netstat_TcpExt_TCPOFOQueue 0",
                "node_netstat_TcpExt_TCPSynRetrans 0",
                "node_netstat_TcpExt_TCPRcvQDrop 0",
                "node_netstat_IpExt_InOctets 129552492",
                "node_netstat_IpExt_OutOctets 233054",
                "node_netstat_Ip_Forwarding 2",
                "node_netstat_Icmp_InMsgs 1",
                "node_netstat_Icmp_InErrors 0",
                "node_netstat_Icmp_OutMsgs 0",
                "node_netstat_Tcp_ActiveOpens 48",
                "node_netstat_Tcp_PassiveOpens 5",
                "node_netstat_Tcp_CurrEstab 0",
                "node_netstat_Tcp_InSegs 3958",
                "node_netstat_Tcp_OutSegs 2417",
                "node_netstat_Tcp_RetransSegs 0",
                "node_netstat_Tcp_InErrs 0",
                "node_netstat_Tcp_OutRsts 35",
                "node_netstat_Udp_InDatagrams 91",
                "node_netstat_Udp_NoPorts 0",
                "node_netstat_Udp_InErrors 0",
                "node_netstat_Udp_OutDatagrams 92",
                "node_netstat_Udp_RcvbufErrors 0",
                "node_netstat_Udp_SndbufErrors 0",
                "node_netstat_UdpLite_InErrors 0",
                "node_netstat_Ip6_InOctets 128",
                "node_netstat_Ip6_OutOctets 880",
                "node_netstat_Icmp6_InMsgs 1",
                "node_netstat_Icmp6_InErrors 1",
                "node_netstat_Icmp6_OutMsgs 9",
                "node_netstat_Udp6_InDatagrams 0",
                "node_netstat_Udp6_NoPorts 0",
                "node_netstat_Udp6_InErrors 0",
                "node_netstat_Udp6_OutDatagrams 0",
                "node_netstat_Udp6_RcvbufErrors 0",
                "node_netstat_Udp6_SndbufErrors 0",
                "node_netstat_UdpLite6_InErrors 0",
            ]
        );
        assert!(out.contains(
            "# HELP node_netstat_TcpExt_ListenOverflows Statistic TcpExtListenOverflows.\n# TYPE node_netstat_TcpExt_ListenOverflows untyped\nnode_netstat_TcpExt_ListenOverflows 0\n"
        ));
        // The cached selections give the same output on the next scrape.
        assert_eq!(render(c.as_mut()).unwrap(), out);
    }

    #[test]
    fn selection_follows_a_changed_header() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path();
        std::fs::create_dir_all(dir.join("net")).unwrap();
        std::fs::write(
            dir.join("net/netstat"),
            "TcpExt: TW ListenDrops\nTcpExt: 1 2\n",
        )
        .unwrap();
        let mut c = build(&Settings::with_roots(dir, "/nonexistent"));
        let out = render(c.as_mut()).unwrap();
        let samples: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            samples,
            [
                "node_netstat_TcpExt_TW 1",
                "node_netstat_TcpExt_ListenDrops 2"
            ]
        );
        std::fs::write(
            dir.join("net/netstat"),
            "TcpExt: TCPHPHits ListenDrops TW\nTcpExt: 9 3 4\n",
        )
        .unwrap();
        let out = render(c.as_mut()).unwrap();
        let samples: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            samples,
            [
                "node_netstat_TcpExt_ListenDrops 3",
                "node_netstat_TcpExt_TW 4"
            ]
        );
        // A broken file fails the collector with the file and line.
        std::fs::write(
            dir.join("net/netstat"),
            "TcpExt: TW ListenDrops\nTcpExt: 1\n",
        )
        .unwrap();
        let e = render(c.as_mut()).unwrap_err();
        assert!(e.file.ends_with("net/netstat"));
        assert_eq!(e.line, Some(2));
    }
}
