//! `*.prom` files in `--collector.textfile.directory` → their own families,
//! plus `node_textfile_mtime_seconds{file}` and `node_textfile_scrape_error`:
//! node_exporter's textfile collector (collector/textfile.go).
//!
//! The files are in the Prometheus text format 0.0.4. [`parse_into`] is a
//! parser of that format written to accept what node_exporter's parser
//! (prometheus/common expfmt `TextParser`, legacy name validation) accepts
//! and to reject what it rejects, with the same error wording where it has
//! one. Each file is re-encoded through usescope's [`Encoder`], so the
//! output is valid in both exposition formats whatever the file's layout.
//!
//! A file is taken or skipped whole. It is skipped, with
//! `node_textfile_scrape_error 1` and one log line naming the file (and the
//! line, where there is one), when it cannot be read (not a regular file,
//! over [`crate::source::MAX_FILE_BYTES`], not valid UTF-8; as root, a
//! symbolic link or another owner's file than the directory's: `open_at`),
//! does not parse (also: more than [`MAX_LABEL_NAMES`] label names in a
//! family, more than [`MAX_LABEL_PAIRS_PER_BYTE`] label pairs written per
//! byte), carries client-side timestamps (node_exporter skips those files
//! too), or conflicts with what is already exported: a family with another
//! TYPE or another HELP in an earlier file, a series an earlier file (or the
//! same file) already has, two families that would write one name in either
//! format (`occupied`: a counter `x` and a gauge `x_total`, a summary `s`
//! and a family `s_count`), or a family that would write a name a built-in
//! collector or the daemon itself writes. Files are taken in the order of
//! the flags and, within a directory, by name, so the earlier file wins a
//! conflict. The other files and every other collector are unaffected.
//!
//! Bounds: at most [`MAX_FILES`] `*.prom` files and [`MAX_TOTAL_BYTES`] of
//! them per scrape; files past either bound are skipped as errors.
//!
//! Cost: a file is read and parsed only when its (device, inode, size,
//! mtime, ctime) changes; otherwise a scrape stats it and re-encodes the
//! parsed families kept from the last read. A parse is linear in the file
//! (but for its sorts). After a large parse is let go of, its memory is
//! handed back (`TRIM_AFTER_BYTES`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::collector::Collector;
use crate::collectors::{Flag, FlagKind, Parser, Settings, Source, Spec};
use crate::error::{CollectError, ParseError};
use crate::exposition::{Desc, Encoder, Format, MetricType, Value, help_is_plain};
use crate::parse::{parse_fresh, recycle};
use crate::source::MAX_FILE_BYTES;

pub const DIRECTORY: &str = "collector.textfile.directory";

pub const SPEC: Spec = Spec {
    name: "textfile",
    default_enabled: true,
    help: "Metrics from *.prom files (Prometheus text format) in --collector.textfile.directory",
    flags: &[Flag {
        name: DIRECTORY,
        help: "Directory to read text files with metrics from, supports glob matching. (repeatable)",
        default: None,
        kind: FlagKind::TextList,
        conflicts_with: None,
    }],
    build,
    sources: &[Source::textfile("good/app.prom", "textfile")],
    parsers: &[Parser::text("textfile", |t| {
        parse_fresh(t, parse_into).map(drop)
    })],
};

/// Most `*.prom` files read in one scrape.
pub const MAX_FILES: usize = 10_000;
/// Most bytes of `*.prom` files read in one scrape (each file is also held
/// to [`crate::source::MAX_FILE_BYTES`]).
pub const MAX_TOTAL_BYTES: u64 = 64 << 20;

/// Most distinct label names one family may have in one file (and so most
/// labels on one series). node_exporter gives every series of a family
/// every label name any of them has (the missing ones empty), so the names
/// multiply the output; real families have a handful.
pub const MAX_LABEL_NAMES: usize = 128;

/// Most label pairs a file's families may write, per byte of the file:
/// the sum over its families of (samples × the family's label names). A
/// family whose series share their labels writes under one pair per five
/// bytes (each pair is at least `a="",` in the file); only series that
/// each bring names of their own make more, and those would make the
/// output (and the work) grow with the square of the file.
pub const MAX_LABEL_PAIRS_PER_BYTE: usize = 2;

const MTIME: Desc = Desc::gauge(
    "node_textfile_mtime_seconds",
    "Unixtime mtime of textfiles successfully read.",
);
const SCRAPE_ERROR: Desc = Desc::gauge(
    "node_textfile_scrape_error",
    "1 if there was an error opening or reading a file, 0 otherwise",
);

/// Family names written after this collector (the scraper's own families,
/// the process and probe metrics), or by this collector: a textfile family
/// that would write a name with one of these prefixes ([`occupied`]) could
/// clash with them, now or in a later version.
const RESERVED_PREFIXES: &[&str] = &[
    "node_scrape_collector_",
    "node_textfile_",
    "process_",
    "usescope_",
];

/// The other families written after this collector
/// (`crate::self_metrics`), which a textfile family may not write either.
const RESERVED_NAMES: &[&str] = &["node_exporter_build_info"];

// ---------------------------------------------------------------------------
// The parser

/// A family's type, from its `# TYPE` line (untyped without one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Untyped,
    Summary,
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Untyped => "untyped",
            Kind::Summary => "summary",
            Kind::Histogram => "histogram",
        }
    }

    fn metric_type(self) -> MetricType {
        match self {
            Kind::Counter => MetricType::Counter,
            Kind::Gauge => MetricType::Gauge,
            Kind::Untyped => MetricType::Untyped,
            Kind::Summary => MetricType::Summary,
            Kind::Histogram => MetricType::Histogram,
        }
    }
}

/// One quantile of a summary or one bucket of a histogram.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// The quantile or the upper bound.
    pub bound: f64,
    /// `bound` as node_exporter writes it in the `quantile`/`le` label.
    pub label: String,
    pub value: f64,
}

/// One series: a sample, or a whole summary or histogram.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    /// The labels its lines gave, sorted by name; without `quantile`/`le`
    /// for summaries and histograms. [`Family::labels`] adds the family's
    /// other label names with "", as node_exporter writes them.
    pub labels: Vec<(String, String)>,
    /// Counter, gauge and untyped.
    pub value: f64,
    /// Summary and histogram.
    pub sum: f64,
    pub count: f64,
    /// Quantiles or buckets, ascending, one per bound (the last given wins).
    pub points: Vec<Point>,
    /// The file line that started the series.
    pub line: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Family {
    pub name: String,
    pub help: Option<String>,
    pub kind: Kind,
    /// Every label name of its series, sorted; at most [`MAX_LABEL_NAMES`].
    pub label_names: Vec<String>,
    /// Sorted by label values, as node_exporter sorts them.
    pub series: Vec<Series>,
    /// The line that first named the family.
    pub line: usize,
}

impl Family {
    /// `s`'s labels as node_exporter writes them: every label name of the
    /// family, in order, with "" where `s` has none. The empty ones are not
    /// stored: a family whose series each bring a name of their own would
    /// hold names × series of them.
    pub fn labels<'a>(&'a self, s: &'a Series) -> impl Iterator<Item = (&'a str, &'a str)> {
        filled(&self.label_names, &s.labels)
    }
}

/// `s`'s label values as node_exporter writes them, in the order of `names`.
fn label_values<'a>(names: &'a [String], s: &'a Series) -> impl Iterator<Item = &'a str> {
    filled(names, &s.labels).map(|(_, v)| v)
}

/// `given` (sorted by name, every name in `names`) with the names it lacks
/// added as "", in the order of `names`.
fn filled<'a>(
    names: &'a [String],
    given: &'a [(String, String)],
) -> impl Iterator<Item = (&'a str, &'a str)> {
    // Most series have every name of their family: no names to compare.
    let complete = given.len() == names.len();
    let mut given = given.iter().peekable();
    names.iter().map(move |n| match given.peek() {
        Some((m, v)) if complete || m == n => {
            given.next();
            (n.as_str(), v.as_str())
        }
        _ => (n.as_str(), ""),
    })
}

/// A parsed file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Exposition {
    /// Sorted by name; families without samples are left out.
    pub families: Vec<Family>,
    /// The first line whose sample has a timestamp.
    pub timestamp_line: Option<usize>,
}

/// A family while its file is being read: the kind is unknown until its
/// `# TYPE` line or first sample.
struct Building {
    name: String,
    help: Option<String>,
    kind: Option<Kind>,
    series: Vec<Series>,
    line: usize,
}

struct State {
    families: Vec<Building>,
    by_name: HashMap<String, usize>,
    /// (family, labels) → series, for summaries and histograms, whose
    /// lines add to one series.
    composite: HashMap<(usize, Vec<(String, String)>), usize>,
    timestamp_line: Option<usize>,
}

/// What a sample line's name resolved to.
struct Resolved {
    family: usize,
    is_count: bool,
    is_sum: bool,
}

impl State {
    /// expfmt's `setOrCreateCurrentMF`: `NAME`, else the summary or
    /// histogram `NAME` is the `_sum`/`_count`/`_bucket` of, else a new
    /// family.
    fn resolve(&mut self, name: &str, line: usize) -> Resolved {
        if let Some(&family) = self.by_name.get(name) {
            return Resolved {
                family,
                is_count: false,
                is_sum: false,
            };
        }
        let is_count = name.len() > 6 && name.ends_with("_count");
        let is_sum = name.len() > 4 && name.ends_with("_sum");
        let is_bucket = name.len() > 7 && name.ends_with("_bucket");
        let base = if is_count {
            &name[..name.len() - 6]
        } else if is_sum {
            &name[..name.len() - 4]
        } else {
            name
        };
        if let Some(&family) = self.by_name.get(base)
            && self.families[family].kind == Some(Kind::Summary)
        {
            return Resolved {
                family,
                is_count,
                is_sum,
            };
        }
        let base = if is_bucket {
            &name[..name.len() - 7]
        } else {
            base
        };
        if let Some(&family) = self.by_name.get(base)
            && self.families[family].kind == Some(Kind::Histogram)
        {
            return Resolved {
                family,
                is_count,
                is_sum,
            };
        }
        self.families.push(Building {
            name: name.to_string(),
            help: None,
            kind: None,
            series: Vec::new(),
            line,
        });
        let family = self.families.len() - 1;
        self.by_name.insert(name.to_string(), family);
        Resolved {
            family,
            is_count: false,
            is_sum: false,
        }
    }
}

/// A cursor over one line.
struct Cursor<'a> {
    s: &'a str,
    i: usize,
    line: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.i).copied()
    }

    fn skip_blank(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
    }

    /// Up to the next blank, tab or the end of the line.
    fn token(&mut self) -> &'a str {
        let start = self.i;
        while !matches!(self.peek(), None | Some(b' ' | b'\t')) {
            self.i += 1;
        }
        &self.s[start..self.i]
    }

    /// A legacy metric (`[a-zA-Z_:][a-zA-Z0-9_:]*`) or label
    /// (`[a-zA-Z_][a-zA-Z0-9_]*`) name; empty if none starts here.
    fn name(&mut self, metric: bool) -> &'a str {
        let start = self.i;
        let first = |b: u8| b.is_ascii_alphabetic() || b == b'_' || (metric && b == b':');
        if self.peek().is_some_and(first) {
            self.i += 1;
            while self.peek().is_some_and(|b| first(b) || b.is_ascii_digit()) {
                self.i += 1;
            }
        }
        &self.s[start..self.i]
    }

    fn err(&self, msg: impl Into<String>) -> ParseError {
        ParseError::new(self.line, msg)
    }

    /// The rest of the line, unescaping `\\`, `\n` and `\"` when `escapes`.
    fn rest(&mut self, escapes: bool) -> Result<String, ParseError> {
        let rest = &self.s[self.i..];
        self.i = self.s.len();
        if !escapes || !rest.contains('\\') {
            return Ok(rest.to_string());
        }
        let mut out = String::with_capacity(rest.len());
        let mut chars = rest.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some('\\') => out.push('\\'),
                Some('n') => out.push('\n'),
                Some('"') => out.push('"'),
                Some(o) => return Err(self.err(format!("invalid escape sequence '\\{o}'"))),
                None => return Err(self.err("invalid escape sequence '\\\\n'")),
            }
        }
        Ok(out)
    }

    /// A label value after its opening quote, up to the closing one.
    fn quoted(&mut self) -> Result<String, ParseError> {
        let mut out = String::new();
        let rest = &self.s[self.i..];
        let mut chars = rest.char_indices();
        while let Some((at, c)) = chars.next() {
            match c {
                '"' => {
                    self.i += at + 1;
                    return Ok(out);
                }
                '\\' => match chars.next() {
                    Some((_, '"')) => out.push('"'),
                    Some((_, '\\')) => out.push('\\'),
                    Some((_, 'n')) => out.push('\n'),
                    Some((_, o)) => {
                        return Err(self.err(format!("invalid escape sequence '\\{o}'")));
                    }
                    None => break,
                },
                c => out.push(c),
            }
        }
        Err(self.err(format!("label value {out:?} contains unescaped new-line")))
    }
}

/// Go's `strconv.ParseFloat` as expfmt calls it: `p`, `P` and `_` refused;
/// `NaN` (unsigned), `Inf`/`Infinity` (signed, any case); a finite number
/// too large for an f64 is an error, not infinity.
pub fn go_parse_float(s: &str) -> Option<f64> {
    if s.is_empty() || s.contains(['p', 'P', '_']) {
        return None;
    }
    let (negative, unsigned) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if unsigned.eq_ignore_ascii_case("inf") || unsigned.eq_ignore_ascii_case("infinity") {
        return Some(if negative {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    if unsigned.eq_ignore_ascii_case("nan") {
        return (unsigned.len() == s.len()).then_some(f64::NAN);
    }
    // What is left must be a decimal number: Rust's grammar for it is Go's
    // (hex needs a `p` exponent in Go, and `p` was refused above).
    if !unsigned
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
    {
        return None;
    }
    let v: f64 = s.parse().ok()?;
    v.is_finite().then_some(v)
}

/// A float as Go's `strconv.FormatFloat(f, 'g', -1, 64)` writes it, with
/// expfmt's spellings of the special values: how node_exporter writes the
/// `le` and `quantile` labels, so that series keep node_exporter's label
/// values (`1e+06`, not `1000000`).
pub fn go_format_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    if f == 0.0 {
        return "0".to_string();
    }
    // Rust's `{:e}` is the shortest round-trip digits: "1.5e-7", "1e6".
    let e = format!("{f:e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    } else {
        format!("{f}")
    }
}

/// Parses one file of the text format into `out` (see the module
/// documentation). Errors carry the line and, where expfmt has one, its
/// wording.
pub fn parse_into(text: &str, out: &mut Exposition) -> Result<(), ParseError> {
    out.families.clear();
    out.timestamp_line = None;
    let mut st = State {
        families: Vec::new(),
        by_name: HashMap::new(),
        composite: HashMap::new(),
        timestamp_line: None,
    };
    let mut lines = text.split('\n').enumerate().peekable();
    while let Some((i, line)) = lines.next() {
        let mut c = Cursor {
            s: line,
            i: 0,
            line: i + 1,
        };
        c.skip_blank();
        if c.peek().is_none() {
            continue;
        }
        if lines.peek().is_none() {
            // The text does not end with a newline and this last line is
            // not blank: expfmt reads past its end.
            return Err(c.err("unexpected end of input stream (no newline at the end)"));
        }
        if c.peek() == Some(b'#') {
            c.i += 1;
            comment(&mut c, &mut st)?;
        } else {
            sample(&mut c, &mut st)?;
        }
    }
    finish(st, text.len(), out)
}

fn comment(c: &mut Cursor, st: &mut State) -> Result<(), ParseError> {
    c.skip_blank();
    let keyword = c.token();
    if c.peek().is_none() || (keyword != "HELP" && keyword != "TYPE") {
        return Ok(());
    }
    c.skip_blank();
    if c.peek() == Some(b'"') {
        return Err(c.err("quoted (UTF-8) metric names are not supported"));
    }
    let name = c.name(true);
    if c.peek().is_none() {
        return Ok(());
    }
    if name.is_empty() || !matches!(c.peek(), Some(b' ' | b'\t')) {
        return Err(c.err("invalid metric name in comment"));
    }
    let r = st.resolve(name, c.line);
    c.skip_blank();
    if c.peek().is_none() {
        return Ok(());
    }
    let f = &mut st.families[r.family];
    if keyword == "HELP" {
        if f.help.is_some() {
            return Err(c.err(format!("second HELP line for metric name {:?}", f.name)));
        }
        f.help = Some(c.rest(true)?);
        return Ok(());
    }
    if f.kind.is_some() {
        return Err(c.err(format!(
            "second TYPE line for metric name {:?}, or TYPE reported after samples",
            f.name
        )));
    }
    let t = c.rest(false)?;
    f.kind = Some(match t.to_ascii_uppercase().as_str() {
        "COUNTER" => Kind::Counter,
        "GAUGE" => Kind::Gauge,
        "UNTYPED" => Kind::Untyped,
        "SUMMARY" => Kind::Summary,
        "HISTOGRAM" => Kind::Histogram,
        // node_exporter 1.12.1 parses these and then panics on them.
        "GAUGE_HISTOGRAM" | "GAUGEHISTOGRAM" => {
            return Err(c.err(format!("metric type {t:?} is not supported")));
        }
        _ => return Err(c.err(format!("unknown metric type {t:?}"))),
    });
    Ok(())
}

fn sample(c: &mut Cursor, st: &mut State) -> Result<(), ParseError> {
    let name = c.name(true);
    if name.is_empty() {
        return Err(match c.peek() {
            Some(b'{') => c.err("metric names inside the braces are not supported"),
            Some(b'"') => c.err("quoted (UTF-8) metric names are not supported"),
            _ => c.err("invalid metric name"),
        });
    }
    let r = st.resolve(name, c.line);
    let kind = *st.families[r.family].kind.get_or_insert(Kind::Untyped);
    let family_name = st.families[r.family].name.clone();
    c.skip_blank();
    let mut labels: Vec<(String, String)> = Vec::new();
    // The quantile or le label's value; NaN when absent (or NaN).
    let mut bound: Option<f64> = None;
    if c.peek() == Some(b'{') {
        c.i += 1;
        loop {
            c.skip_blank();
            if c.peek() == Some(b'}') {
                c.i += 1;
                break;
            }
            if c.peek() == Some(b'"') {
                return Err(c.err("quoted (UTF-8) label names are not supported"));
            }
            let label = c.name(false);
            if label.is_empty() {
                return Err(c.err(format!("invalid label name for metric {family_name:?}")));
            }
            c.skip_blank();
            if c.peek() != Some(b'=') {
                let found = c.s[c.i..].chars().next().unwrap_or('\n');
                return Err(c.err(format!("expected '=' after label name, found {found:?}")));
            }
            c.i += 1;
            if label.starts_with("__") {
                // expfmt refuses __name__; node_exporter 1.12.1 panics on
                // any other label with the reserved prefix.
                return Err(c.err(format!("label name {label:?} is reserved")));
            }
            let special = (kind == Kind::Summary && label == "quantile")
                || (kind == Kind::Histogram && label == "le");
            if !special && labels.iter().any(|(n, _)| n == label) {
                return Err(c.err(format!("duplicate label names for metric {family_name:?}")));
            }
            // Also bounds the check just above to a few thousand
            // comparisons per line.
            if !special && labels.len() == MAX_LABEL_NAMES {
                return Err(c.err(format!(
                    "more than {MAX_LABEL_NAMES} labels for metric {family_name:?}"
                )));
            }
            c.skip_blank();
            if c.peek() != Some(b'"') {
                let found = c.s[c.i..].chars().next().unwrap_or('\n');
                return Err(c.err(format!(
                    "expected '\"' at start of label value, found {found:?}"
                )));
            }
            c.i += 1;
            let value = c.quoted()?;
            if special {
                let v = go_parse_float(&value).ok_or_else(|| {
                    c.err(format!(
                        "expected float as value for '{label}' label, got {value:?}"
                    ))
                })?;
                bound = Some(v);
            } else {
                labels.push((label.to_string(), value));
            }
            c.skip_blank();
            match c.peek() {
                Some(b',') => c.i += 1,
                Some(b'}') => {
                    c.i += 1;
                    break;
                }
                _ => {
                    let v = labels.last().map_or("", |(_, v)| v.as_str());
                    return Err(c.err(format!("unexpected end of label value {v:?}")));
                }
            }
        }
        c.skip_blank();
    }
    let tok = c.token();
    let value = go_parse_float(tok)
        .ok_or_else(|| c.err(format!("expected float as value, got {tok:?}")))?;
    if c.peek().is_some() {
        c.skip_blank();
        let ts = c.token();
        if ts.parse::<i64>().is_err() {
            return Err(c.err(format!("expected integer as timestamp, got {ts:?}")));
        }
        if c.i < c.s.len() {
            return Err(c.err(format!(
                "spurious string after timestamp: {:?}",
                &c.s[c.i..]
            )));
        }
        st.timestamp_line.get_or_insert(c.line);
    }
    labels.sort_by(|a, b| a.0.cmp(&b.0));
    let line = c.line;
    let f = r.family;
    match kind {
        Kind::Counter | Kind::Gauge | Kind::Untyped => {
            st.families[f].series.push(Series {
                labels,
                value,
                line,
                ..Series::default()
            });
        }
        Kind::Summary | Kind::Histogram => {
            let key = (f, labels);
            let idx = match st.composite.get(&key) {
                Some(&i) => i,
                None => {
                    let series = &mut st.families[f].series;
                    series.push(Series {
                        labels: key.1.clone(),
                        line,
                        ..Series::default()
                    });
                    st.composite.insert(key, series.len() - 1);
                    series.len() - 1
                }
            };
            let s = &mut st.families[f].series[idx];
            let histogram = kind == Kind::Histogram;
            if histogram
                && (r.is_count || (!r.is_sum && bound.is_some_and(|b| !b.is_nan())))
                && value < 0.0
            {
                return Err(c.err(format!(
                    "negative {} for histogram {family_name:?}",
                    if r.is_count {
                        "count"
                    } else {
                        "bucket population"
                    }
                )));
            }
            if r.is_count {
                // A summary's count is a uint64 in node_exporter.
                s.count = if histogram || value.is_nan() {
                    value
                } else {
                    value.trunc().max(0.0)
                };
            } else if r.is_sum {
                s.sum = value;
            } else if let Some(b) = bound.filter(|b| !b.is_nan()) {
                s.points.push(Point {
                    bound: b,
                    label: go_format_float(b),
                    value,
                });
            }
        }
    }
    Ok(())
}

/// Drops families without samples, settles points, gathers each family's
/// label names, sorts, and checks for duplicate series and the bounds on
/// label names ([`MAX_LABEL_NAMES`], [`MAX_LABEL_PAIRS_PER_BYTE`] of the
/// `text_len` bytes). Linear in the text but for the sorts.
fn finish(st: State, text_len: usize, out: &mut Exposition) -> Result<(), ParseError> {
    out.timestamp_line = st.timestamp_line;
    let budget = text_len.saturating_mul(MAX_LABEL_PAIRS_PER_BYTE);
    let mut pairs = 0usize;
    for b in st.families {
        if b.series.is_empty() {
            continue;
        }
        let kind = b.kind.unwrap_or(Kind::Untyped);
        let mut series = b.series;
        let mut label_names: Vec<String> = {
            let mut seen: HashSet<&str> = HashSet::new();
            let mut last: &[(String, String)] = &[];
            for s in &series {
                // Most series have the names of the one before: no hashing.
                let same = s.labels.len() == last.len()
                    && s.labels.iter().zip(last).all(|(a, b)| a.0 == b.0);
                last = &s.labels;
                if same {
                    continue;
                }
                for (n, _) in &s.labels {
                    if seen.insert(n) && seen.len() > MAX_LABEL_NAMES {
                        return Err(ParseError::new(
                            s.line,
                            format!(
                                "family {:?} has more than {MAX_LABEL_NAMES} label names \
                                 over its series",
                                b.name
                            ),
                        ));
                    }
                }
            }
            seen.into_iter().map(str::to_string).collect()
        };
        label_names.sort_unstable();
        for s in &mut series {
            // One point per bound, the last given; ascending.
            s.points.reverse();
            s.points.sort_by(|a, b| {
                a.bound
                    .partial_cmp(&b.bound)
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
            s.points.dedup_by(|a, b| a.bound == b.bound);
            let samples = match kind {
                Kind::Counter | Kind::Gauge | Kind::Untyped => 1,
                // _sum, _count, and a histogram's +Inf if it lacks one.
                Kind::Summary => s.points.len() + 2,
                Kind::Histogram => s.points.len() + 3,
            };
            pairs = pairs.saturating_add(samples.saturating_mul(label_names.len()));
            if pairs > budget {
                return Err(ParseError::new(
                    s.line,
                    format!(
                        "family {:?} would write more label pairs than the file may \
                         ({MAX_LABEL_PAIRS_PER_BYTE} per byte): its series lack most of its \
                         {} label names, which are written empty",
                        b.name,
                        label_names.len()
                    ),
                ));
            }
        }
        let names = &label_names;
        series.sort_by(|a, b| {
            label_values(names, a)
                .cmp(label_values(names, b))
                .then(a.line.cmp(&b.line))
        });
        for w in series.windows(2) {
            if label_values(names, &w[0]).eq(label_values(names, &w[1])) {
                return Err(ParseError::new(
                    w[1].line.max(w[0].line),
                    format!(
                        "duplicate series {} (also on line {})",
                        series_text(&b.name, &w[1].labels),
                        w[1].line.min(w[0].line)
                    ),
                ));
            }
        }
        out.families.push(Family {
            name: b.name,
            help: b.help,
            kind,
            label_names,
            series,
            line: b.line,
        });
    }
    out.families.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(())
}

/// `name{a="x",b="y"}` for messages (empty labels left out).
fn series_text(name: &str, labels: &[(String, String)]) -> String {
    let set: Vec<String> = labels
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(n, v)| format!("{n}={v:?}"))
        .collect();
    format!("{name}{{{}}}", set.join(","))
}

// ---------------------------------------------------------------------------
// Paths: Go's filepath.Clean, Join and Glob, as node_exporter uses them.

/// Go's `filepath.Clean`: how node_exporter spells the `file` label.
pub fn go_clean(path: &str) -> String {
    let rooted = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|l| *l != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            p => parts.push(p),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_string(),
        (false, false) => joined,
    }
}

fn go_join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        go_clean(name)
    } else {
        go_clean(&format!("{dir}/{name}"))
    }
}

fn has_meta(s: &str) -> bool {
    s.contains(['*', '?', '[', '\\'])
}

/// Go's `filepath.Match` on one path element; `None` for a malformed
/// pattern.
pub fn glob_match(pattern: &str, name: &str) -> Option<bool> {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    match_from(&p, &n)
}

fn match_from(p: &[char], n: &[char]) -> Option<bool> {
    let Some(&first) = p.first() else {
        return Some(n.is_empty());
    };
    match first {
        '*' => {
            // Check the rest of the pattern is well formed even when no
            // name is left to try it on, as Go does.
            let mut any = false;
            for skip in 0..=n.len() {
                if n[..skip].contains(&'/') {
                    break;
                }
                if match_from(&p[1..], &n[skip..])? {
                    any = true;
                    break;
                }
            }
            Some(any)
        }
        '?' => match n.first() {
            Some(&c) if c != '/' => match_from(&p[1..], &n[1..]),
            _ => validate(&p[1..]).map(|_| false),
        },
        '[' => {
            let (matched, used) = class(&p[1..], n.first().copied())?;
            if matched {
                match_from(&p[1 + used..], &n[1..])
            } else {
                validate(&p[1 + used..]).map(|_| false)
            }
        }
        '\\' => {
            let &lit = p.get(1)?;
            if n.first() == Some(&lit) {
                match_from(&p[2..], &n[1..])
            } else {
                validate(&p[2..]).map(|_| false)
            }
        }
        lit => {
            if n.first() == Some(&lit) {
                match_from(&p[1..], &n[1..])
            } else {
                validate(&p[1..]).map(|_| false)
            }
        }
    }
}

/// Whether the pattern is well formed (for the `ErrBadPattern` cases).
fn validate(p: &[char]) -> Option<()> {
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            '[' => i += 1 + class(&p[i + 1..], None)?.1,
            '\\' => {
                p.get(i + 1)?;
                i += 2;
            }
            _ => i += 1,
        }
    }
    Some(())
}

/// A character class after its `[`: whether `c` is in it, and how many
/// pattern characters it took (the closing `]` included).
fn class(p: &[char], c: Option<char>) -> Option<(bool, usize)> {
    let mut i = 0;
    let negated = p.first() == Some(&'^');
    if negated {
        i += 1;
    }
    let mut matched = false;
    let mut ranges = 0;
    // One escaped or plain character of a range; `-` and `]` must be escaped.
    let esc = |i: &mut usize| -> Option<char> {
        let mut ch = *p.get(*i)?;
        if ch == '-' || ch == ']' {
            return None;
        }
        if ch == '\\' {
            *i += 1;
            ch = *p.get(*i)?;
        }
        *i += 1;
        Some(ch)
    };
    loop {
        if p.get(i) == Some(&']') && ranges > 0 {
            i += 1;
            break;
        }
        let lo = esc(&mut i)?;
        let mut hi = lo;
        if p.get(i) == Some(&'-') {
            i += 1;
            hi = esc(&mut i)?;
            if hi < lo {
                return None;
            }
        }
        ranges += 1;
        if let Some(c) = c
            && lo <= c
            && c <= hi
        {
            matched = true;
        }
    }
    let hit = c.is_some_and(|c| c != '/') && matched != negated;
    Some((hit, i))
}

/// Go's `filepath.Glob`, sorted per directory as Go's is. `None` for a
/// malformed pattern.
pub fn glob(pattern: &str) -> Option<Vec<String>> {
    if !has_meta(pattern) {
        return Some(if std::fs::symlink_metadata(pattern).is_ok() {
            vec![pattern.to_string()]
        } else {
            Vec::new()
        });
    }
    let (dir, file) = match pattern.rfind('/') {
        Some(i) => (&pattern[..=i], &pattern[i + 1..]),
        None => ("", pattern),
    };
    validate(&file.chars().collect::<Vec<_>>())?;
    let dir = match dir {
        "" => ".".to_string(),
        "/" => "/".to_string(),
        d => d[..d.len() - 1].to_string(),
    };
    let dirs = if has_meta(&dir) {
        if dir == pattern {
            return None;
        }
        glob(&dir)?
    } else {
        vec![dir]
    };
    let mut out = Vec::new();
    for d in dirs {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        names.sort();
        for n in names {
            if glob_match(file, &n) == Some(true) {
                out.push(go_join(&d, &n));
            }
        }
    }
    Some(out)
}

// ---------------------------------------------------------------------------
// The collector

/// What identifies a file's content without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Key {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Key {
    fn of(m: &std::fs::Metadata) -> Key {
        Key {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

/// A file's error: the message for the log, and the line if there is one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct FileError {
    line: Option<usize>,
    msg: String,
}

/// One `*.prom` file as last read.
struct FileEntry {
    /// The `file` label: node_exporter's `filepath.Join(dir, name)`.
    label: String,
    key: Option<Key>,
    /// Seconds, truncated, as node_exporter exports it.
    mtime: i64,
    parsed: Result<Exposition, FileError>,
}

/// A family merged over the files that carry it.
struct Merged {
    name: String,
    help: String,
    help_plain: bool,
    kind: Kind,
    /// (file, family, series), sorted by label values over all files.
    series: Vec<(usize, usize, usize)>,
}

/// The merge of the current files, kept while none of them changes.
#[derive(Default)]
struct Merge {
    families: Vec<Merged>,
    /// Per file: the reason it was left out of the merge, if it was.
    conflicts: Vec<Option<FileError>>,
    /// Every name a family of a parsed file writes ([`occupied`]) → the
    /// built-in family that writes it too this scrape, if one does.
    names: HashMap<String, Builtin>,
    /// The files' built-in clashes the merge was made with: (name, the
    /// built-in family).
    clashes: Vec<(String, String)>,
}

/// After parses of this many bytes of files were let go of in a scrape
/// (files removed, changed, or failing), the allocator is asked to give
/// the freed memory back ([`give_back_freed_memory`]). Also after a file
/// is only rewritten: its new parse may well run on the other tokio worker,
/// whose malloc arena does not hold the old parse's free memory.
const TRIM_AFTER_BYTES: u64 = 1 << 20;

/// A parse is many small allocations (a few per label), which glibc's
/// malloc serves from its heaps, not from mappings of their own; freed,
/// they stay with the process unless they happen to lie at a heap's top.
/// Measured with a 19 MB file of 260,000 series: RSS 8 → 196 MB while it
/// was there and still 150 MB after it was removed, all of it free heap
/// (`malloc_trim(0)` brought it back to 8 MB). So after a large parse is
/// let go of, the free pages of every heap are handed back: 0.1–0.25 s for
/// that file's 180 MB (its parse takes 1 s), after a rare event.
fn give_back_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free memory; any thread may call it.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Whether a built-in collector wrote a name this scrape, and in which
/// family (its text is kept between scrapes, so a lasting clash costs no
/// allocation).
#[derive(Default)]
struct Builtin {
    seen: bool,
    family: String,
}

/// A `*.prom` file to read: its directory (an index into the listing's
/// directories), its name there, and its `file` label.
struct Listed {
    dir: usize,
    name: String,
    label: String,
}

/// A directory of `*.prom` files, opened when a file in it is read.
struct TextDir {
    fd: std::fs::File,
    /// Its owner. As root only this owner's files are read, and only their
    /// content is quoted in an error.
    uid: u32,
}

pub struct TextfileCollector {
    patterns: Vec<String>,
    files: Vec<FileEntry>,
    by_label: HashMap<String, usize>,
    merge: Merge,
    /// Whether the merge must be redone (a file changed).
    dirty: bool,
    /// Errors logged last scrape, so a lasting error is logged once.
    logged: HashSet<(String, FileError)>,
    /// Reused per scrape.
    labels: Vec<(&'static str, &'static str)>,
    scratch: String,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(TextfileCollector {
        patterns: s.texts(DIRECTORY).to_vec(),
        files: Vec::new(),
        by_label: HashMap::new(),
        merge: Merge::default(),
        dirty: true,
        logged: HashSet::new(),
        labels: Vec::new(),
        scratch: String::new(),
    })
}

/// A directory listing's error or a bound, reported like a file's.
fn dir_error(errors: &mut Vec<(String, FileError)>, what: &str, msg: String) {
    errors.push((what.to_string(), FileError { line: None, msg }));
}

impl TextfileCollector {
    /// The `*.prom` files to read, in node_exporter's order, and the
    /// directories they are in.
    fn list(&self, errors: &mut Vec<(String, FileError)>) -> (Vec<String>, Vec<Listed>) {
        let mut dirs = Vec::new();
        for p in &self.patterns {
            match glob(p) {
                Some(found) if !found.is_empty() => dirs.extend(found),
                _ => dirs.push(p.clone()),
            }
        }
        let mut out = Vec::new();
        let mut kept_dirs = Vec::new();
        for dir in dirs {
            if dir.is_empty() {
                continue;
            }
            let entries = match std::fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) => {
                    dir_error(
                        errors,
                        &dir,
                        format!("failed to read textfile collector directory: {e}"),
                    );
                    continue;
                }
            };
            let mut names: Vec<String> = Vec::new();
            for e in entries {
                match e {
                    Ok(e) => match e.file_name().into_string() {
                        Ok(n) if n.ends_with(".prom") => names.push(n),
                        Ok(_) => {}
                        Err(n) if n.as_encoded_bytes().ends_with(b".prom") => dir_error(
                            errors,
                            &dir,
                            format!("a file name is not valid UTF-8: {:?}", n.to_string_lossy()),
                        ),
                        Err(_) => {}
                    },
                    Err(e) => dir_error(
                        errors,
                        &dir,
                        format!("failed to read textfile collector directory: {e}"),
                    ),
                }
            }
            names.sort();
            for n in names {
                if out.len() == MAX_FILES {
                    dir_error(
                        errors,
                        &dir,
                        format!("more than {MAX_FILES} *.prom files; the rest are not read"),
                    );
                    return (kept_dirs, out);
                }
                let label = go_join(&dir, &n);
                out.push(Listed {
                    dir: kept_dirs.len(),
                    name: n,
                    label,
                });
            }
            kept_dirs.push(dir);
        }
        (kept_dirs, out)
    }

    /// Brings `files` up to date with the directory: stats every file,
    /// reads and parses those whose key changed.
    /// Returns how many bytes of files the parses it let go of came from
    /// (see [`TRIM_AFTER_BYTES`]).
    fn refresh(&mut self, errors: &mut Vec<(String, FileError)>) -> u64 {
        let (dirs, listed) = self.list(errors);
        let mut released = 0;
        let weight = |e: &FileEntry| match (&e.parsed, e.key) {
            (Ok(_), Some(k)) => k.size,
            _ => 0,
        };
        // Opened when a file in them is read, once per scrape.
        let mut opened: Vec<Option<Result<TextDir, String>>> = dirs.iter().map(|_| None).collect();
        // Decided at each scrape, on the uid the process has now.
        // SAFETY: geteuid has no preconditions and cannot fail.
        let as_root = unsafe { libc::geteuid() } == 0;
        let mut old = std::mem::take(&mut self.files);
        let old_index = std::mem::take(&mut self.by_label);
        let mut total: u64 = 0;
        let same_set =
            listed.len() == old.len() && listed.iter().zip(&old).all(|(l, f)| l.label == f.label);
        if !same_set {
            self.dirty = true;
        }
        for Listed { dir, name, label } in listed {
            let prev = old_index.get(&label).map(|&i| {
                std::mem::replace(
                    &mut old[i],
                    FileEntry {
                        label: String::new(),
                        key: None,
                        mtime: 0,
                        parsed: Ok(Exposition::default()),
                    },
                )
            });
            let meta = std::fs::metadata(&label);
            let key = meta.as_ref().ok().map(Key::of);
            if let (Some(p), Some(k)) = (&prev, key)
                && p.key == Some(k)
            {
                total += k.size;
                if total <= MAX_TOTAL_BYTES {
                    self.by_label.insert(label, self.files.len());
                    self.files.push(prev.unwrap());
                    continue;
                }
            }
            self.dirty = true;
            // Let go of before the file is parsed again: the new parse can
            // reuse its memory (if it runs on the same malloc arena).
            let prev_key = prev.as_ref().and_then(|p| p.key);
            released += prev.as_ref().map_or(0, weight);
            let had_prev = prev.is_some();
            drop(prev);
            let entry = match meta {
                Err(e) => FileEntry {
                    label: label.clone(),
                    key: None,
                    mtime: 0,
                    parsed: Err(FileError {
                        line: None,
                        msg: format!("failed to open textfile data file: {e}"),
                    }),
                },
                Ok(m) => {
                    let k = Key::of(&m);
                    let parsed = if !had_prev || prev_key != Some(k) {
                        total += if m.is_file() { k.size } else { 0 };
                        if total > MAX_TOTAL_BYTES {
                            Err(FileError {
                                line: None,
                                msg: format!(
                                    "the *.prom files exceed {} MiB in all; this one is not read",
                                    MAX_TOTAL_BYTES >> 20
                                ),
                            })
                        } else {
                            let d = opened[dir].get_or_insert_with(|| open_text_dir(&dirs[dir]));
                            let read = match d {
                                Ok(d) => read_file(d, &name, as_root),
                                Err(msg) => Err(FileError {
                                    line: None,
                                    msg: msg.clone(),
                                }),
                            };
                            // A parse that failed has let its memory go.
                            if read.is_err() {
                                released += k.size;
                            }
                            read
                        }
                    } else {
                        Err(FileError {
                            line: None,
                            msg: format!(
                                "the *.prom files exceed {} MiB in all; this one is not read",
                                MAX_TOTAL_BYTES >> 20
                            ),
                        })
                    };
                    FileEntry {
                        label: label.clone(),
                        // A bad file is not read again until it changes; one
                        // left out by the size bound is tried every scrape.
                        key: match &parsed {
                            Err(e) if e.msg.contains("in all; this one is not read") => None,
                            _ => Some(k),
                        },
                        mtime: m.mtime(),
                        parsed,
                    }
                }
            };
            self.by_label.insert(label, self.files.len());
            self.files.push(entry);
        }
        // The files that are gone (those taken over were emptied above).
        released += old.iter().map(weight).sum::<u64>();
        drop(old);
        for f in &self.files {
            if let Err(e) = &f.parsed {
                errors.push((f.label.clone(), e.clone()));
            }
        }
        released
    }

    /// Redoes the merge when a file changed or the built-in clashes did.
    fn merge_if_needed(&mut self, written: &[u8]) {
        if self.dirty {
            // Made anew rather than cleared: a large file that is gone must
            // not leave its peak capacity behind.
            self.merge.names = HashMap::new();
            for f in &self.files {
                if let Ok(e) = &f.parsed {
                    for fam in &e.families {
                        occupied(&fam.name, fam.kind, &mut self.scratch, |o| {
                            if !self.merge.names.contains_key(o) {
                                self.merge.names.insert(o.to_string(), Builtin::default());
                            }
                        });
                    }
                }
            }
        }
        // Which of them a built-in collector wrote this scrape: each TYPE
        // line written before this collector, in either format, read as
        // the names its family writes.
        for v in self.merge.names.values_mut() {
            v.seen = false;
        }
        if !self.merge.names.is_empty() {
            for at in memchr::memmem::find_iter(written, b"# TYPE ") {
                if at != 0 && written[at - 1] != b'\n' {
                    continue;
                }
                let rest = &written[at + 7..];
                let end = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
                let line = &rest[..end];
                let Some(sp) = memchr::memchr(b' ', line) else {
                    continue;
                };
                let Ok(family) = std::str::from_utf8(&line[..sp]) else {
                    continue;
                };
                let kind = match &line[sp + 1..] {
                    b"counter" => Kind::Counter,
                    b"gauge" => Kind::Gauge,
                    b"summary" => Kind::Summary,
                    b"histogram" => Kind::Histogram,
                    _ => Kind::Untyped,
                };
                // A counter's family is `x` in OpenMetrics and `x_total` in
                // the text format: named the same in both, so a clash does
                // not read as a new one when the format changes.
                let (stem, total) = match kind {
                    Kind::Counter => (family.strip_suffix("_total").unwrap_or(family), "_total"),
                    _ => (family, ""),
                };
                occupied(family, kind, &mut self.scratch, |o| {
                    if let Some(v) = self.merge.names.get_mut(o) {
                        v.seen = true;
                        if v.family.strip_suffix(total) != Some(stem) {
                            v.family.clear();
                            v.family.push_str(stem);
                            v.family.push_str(total);
                        }
                    }
                });
            }
        }
        // A name is at most a line of a file: do not keep a long one's
        // buffer.
        if self.scratch.capacity() > 4096 {
            self.scratch = String::new();
        }
        let clashes_changed = {
            let now = self.merge.names.values().filter(|v| v.seen).count();
            now != self.merge.clashes.len()
                || self.merge.clashes.iter().any(|(n, fam)| {
                    self.merge
                        .names
                        .get(n)
                        .is_none_or(|v| !v.seen || v.family != *fam)
                })
        };
        if !self.dirty && !clashes_changed {
            return;
        }
        self.merge.clashes = self
            .merge
            .names
            .iter()
            .filter(|(_, v)| v.seen)
            .map(|(n, v)| (n.clone(), v.family.clone()))
            .collect();
        self.merge.clashes.sort();
        let builtin: HashMap<&str, &str> = self
            .merge
            .clashes
            .iter()
            .map(|(n, f)| (n.as_str(), f.as_str()))
            .collect();
        let (families, conflicts) = merge(&self.files, &builtin);
        self.merge.families = families;
        self.merge.conflicts = conflicts;
        self.dirty = false;
    }

    /// Logs each error that was not there last scrape, in file order.
    fn log_errors(&mut self, errors: Vec<(String, FileError)>) {
        let mut now = HashSet::with_capacity(errors.len());
        for (file, e) in errors {
            if !self.logged.contains(&(file.clone(), e.clone())) {
                tracing::warn!(
                    collector = "textfile",
                    file = %file,
                    line = e.line,
                    error = %e.msg,
                    "textfile skipped"
                );
            }
            now.insert((file, e));
        }
        self.logged = now;
    }
}

/// Opens a directory of `*.prom` files, to read its files relative to it
/// and to know its owner.
fn open_text_dir(path: &str) -> Result<TextDir, String> {
    let fd = crate::source::open_dir(Path::new(path))
        .map_err(|e| format!("failed to open textfile collector directory: {e}"))?;
    let uid = fd
        .metadata()
        .map_err(|e| format!("failed to open textfile collector directory: {e}"))?
        .uid();
    Ok(TextDir { fd, uid })
}

/// Why a file that is not a regular file is not read.
fn not_regular(mode: u32) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFIFO => "is a FIFO, not a regular file",
        libc::S_IFCHR => "is a character device, not a regular file",
        libc::S_IFBLK => "is a block device, not a regular file",
        libc::S_IFSOCK => "is a socket, not a regular file",
        libc::S_IFDIR => "is a directory, not a regular file",
        _ => "is not a regular file",
    }
}

/// As root, a file reached through a symbolic link is not read.
const SYMLINK_REFUSED: &str = "is a symbolic link: refused while usescope runs as root \
     (a link another user planted could point at a file only root may read); \
     write the file itself here, or pass --runtime.user";

/// Opens `name` in `dir` for reading, and checks what was opened (on the
/// descriptor, so what is checked is what is read). Not a regular file:
/// refused, and a FIFO or device is not even opened. As root (`as_root`),
/// a symbolic link or a file another user than the directory's owner owns
/// is refused too: otherwise anyone who may write to the directory could
/// have root read a file of root's for them.
fn open_at(dir: &TextDir, name: &str, as_root: bool) -> Result<std::fs::File, FileError> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let fail = |msg: String| FileError { line: None, msg };
    let open_error = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::NotFound => {
            fail("failed to open textfile data file: it is gone".into())
        }
        _ if as_root && e.raw_os_error() == Some(libc::ELOOP) => fail(SYMLINK_REFUSED.into()),
        _ => fail(format!("failed to open textfile data file: {e}")),
    };
    let c = std::ffi::CString::new(name)
        .map_err(|_| fail("failed to open textfile data file: a NUL in its name".into()))?;
    let nofollow = if as_root { libc::O_NOFOLLOW } else { 0 };
    // Looked at before the open, so that a device is never opened (opening
    // one can act on it); the descriptor is checked again below.
    // SAFETY: stat is plain C data; all-zero is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let at_flags = if as_root {
        libc::AT_SYMLINK_NOFOLLOW
    } else {
        0
    };
    // SAFETY: a NUL-terminated name relative to a directory descriptor we
    // hold, and a struct we own.
    if unsafe { libc::fstatat(dir.fd.as_raw_fd(), c.as_ptr(), &mut st, at_flags) } != 0 {
        return Err(open_error(std::io::Error::last_os_error()));
    }
    if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
        return Err(fail(SYMLINK_REFUSED.into()));
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(fail(not_regular(st.st_mode).into()));
    }
    // O_NONBLOCK: a FIFO swapped in after the look above does not block
    // the open. O_NOFOLLOW (as root): nor does a symbolic link get
    // followed.
    let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY | nofollow;
    // SAFETY: as for fstatat.
    let fd = unsafe { libc::openat(dir.fd.as_raw_fd(), c.as_ptr(), flags) };
    if fd < 0 {
        return Err(open_error(std::io::Error::last_os_error()));
    }
    // SAFETY: a descriptor openat just returned, owned by nothing else.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    let meta = file
        .metadata()
        .map_err(|e| fail(format!("failed to read textfile data file: {e}")))?;
    if !meta.file_type().is_file() {
        return Err(fail(not_regular(meta.mode()).into()));
    }
    if as_root && meta.uid() != dir.uid {
        return Err(fail(format!(
            "is owned by uid {}, not by uid {} that owns its directory: refused while \
             usescope runs as root (another user's file could be a hard link to, or \
             a copy made by, something only root may read); pass --runtime.user",
            meta.uid(),
            dir.uid
        )));
    }
    Ok(file)
}

/// Reads and parses `name` in `dir`; any failure is the file's error. A
/// parse error quotes the file (a token, at most an excerpt) only when the
/// file's owner is the directory's: the file could be someone else's
/// secret that a link here made readable to usescope.
fn read_file(dir: &TextDir, name: &str, as_root: bool) -> Result<Exposition, FileError> {
    use std::io::Read as _;
    let file = open_at(dir, name, as_root)?;
    let fail = |msg: String| FileError { line: None, msg };
    let meta = file
        .metadata()
        .map_err(|e| fail(format!("failed to read textfile data file: {e}")))?;
    let too_large = || {
        fail(format!(
            "is larger than the {} MiB cap on a textfile; not read past it",
            MAX_FILE_BYTES >> 20
        ))
    };
    if meta.len() > MAX_FILE_BYTES as u64 {
        return Err(too_large());
    }
    // One byte more than the cap, to tell a file of exactly the cap from a
    // longer one (it may grow between the fstat and the read).
    let mut bytes = Vec::with_capacity(meta.len() as usize + 1);
    (&file)
        .take(MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(format!("failed to read textfile data file: {e}")))?;
    if bytes.len() > MAX_FILE_BYTES {
        return Err(too_large());
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        FileError {
            line: Some(1 + memchr::memchr_iter(b'\n', valid).count()),
            msg: "not valid UTF-8".to_string(),
        }
    })?;
    let mut out = Exposition::default();
    if let Err(e) = parse_into(&text, &mut out) {
        let msg = if meta.uid() == dir.uid {
            format!("text format parsing error: {}", e.msg)
        } else {
            format!(
                "text format parsing error (its cause is not shown: the file is owned by \
                 uid {}, not by uid {} that owns its directory)",
                meta.uid(),
                dir.uid
            )
        };
        return Err(FileError {
            line: Some(e.line),
            msg,
        });
    }
    if let Some(line) = out.timestamp_line {
        return Err(FileError {
            line: Some(line),
            msg: "contains unsupported client-side timestamps, skipping entire file".to_string(),
        });
    }
    for f in &out.families {
        if let Some(r) = reserved(&f.name, f.kind) {
            return Err(FileError {
                line: Some(f.line),
                msg: format!(
                    "family {} clashes with usescope's own families ({r})",
                    f.name
                ),
            });
        }
    }
    Ok(out)
}

/// The reserved prefix or name ([`RESERVED_PREFIXES`], [`RESERVED_NAMES`])
/// that a family would write, if it would write one.
fn reserved(name: &str, kind: Kind) -> Option<String> {
    let mut found = None;
    occupied(name, kind, &mut String::new(), |o| {
        if found.is_none() {
            found = RESERVED_PREFIXES
                .iter()
                .find(|p| o.starts_with(*p))
                .map(|p| format!("{p}*"))
                .or_else(|| RESERVED_NAMES.contains(&o).then(|| o.to_string()));
        }
    });
    found
}

/// The label set that identifies a series across files: empty values are
/// absent values in Prometheus.
fn identity(s: &Series) -> Vec<(&str, &str)> {
    s.labels
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect()
}

/// Calls `each` with every name usescope writes for a family `name` of
/// type `kind`, in either format: on its HELP and TYPE lines and on its
/// samples. In OpenMetrics a counter `x` or `x_total` is the family `x`
/// with samples `x_total`, so both take `x` and `x_total`; a summary `s`
/// takes `s`, `s_sum` and `s_count`; a histogram `h` also `h_bucket`. Two
/// families that take one name would write it twice, and a reader keeps
/// one of them (or, for a family name, refuses the page).
///
/// `X_created`, which OpenMetrics reserves for a counter's, summary's or
/// histogram's creation time, is not taken: usescope never writes it, and
/// Python's client library writes that time as a gauge family `X_created`
/// of its own beside `X`, which Prometheus reads as a series of its own.
fn occupied(name: &str, kind: Kind, scratch: &mut String, mut each: impl FnMut(&str)) {
    let (base, suffixes): (&str, &[&str]) = match kind {
        Kind::Counter => (name.strip_suffix("_total").unwrap_or(name), &["", "_total"]),
        Kind::Gauge | Kind::Untyped => (name, &[""]),
        Kind::Summary => (name, &["", "_sum", "_count"]),
        Kind::Histogram => (name, &["", "_bucket", "_sum", "_count"]),
    };
    for suffix in suffixes {
        scratch.clear();
        scratch.push_str(base);
        scratch.push_str(suffix);
        each(scratch);
    }
}

/// Merges the parsed files in order. A file that conflicts with what is
/// already taken, with itself, or with a built-in family (`builtin`: each
/// name a built-in family writes that a file's family would write too →
/// that built-in family), is left out whole.
fn merge(
    files: &[FileEntry],
    builtin: &HashMap<&str, &str>,
) -> (Vec<Merged>, Vec<Option<FileError>>) {
    struct Taken<'a> {
        help: Option<&'a str>,
        kind: Kind,
        file: usize,
        series: HashMap<Vec<(&'a str, &'a str)>, (usize, usize)>,
        parts: Vec<(usize, usize)>,
    }
    let mut taken: BTreeMap<&str, Taken> = BTreeMap::new();
    // Every name the taken families write ([`occupied`]) → the family.
    let mut claimed: HashMap<String, &str> = HashMap::new();
    let mut scratch = String::new();
    let mut conflicts = Vec::with_capacity(files.len());
    for (fi, file) in files.iter().enumerate() {
        let Ok(exp) = &file.parsed else {
            conflicts.push(None);
            continue;
        };
        // The names this file's families write, as `claimed`.
        let mut mine: HashMap<String, &str> = HashMap::new();
        let mut conflict = None;
        'families: for fam in &exp.families {
            let err = |msg: String| FileError {
                line: Some(fam.line),
                msg,
            };
            let mut clash = None;
            occupied(&fam.name, fam.kind, &mut scratch, |o| {
                if clash.is_some() {
                    return;
                }
                let what = |other: &str, kind: Kind, where_: &str| {
                    format!(
                        "{} {} collides with the {} {other}{where_}: both would write {o}",
                        fam.kind.name(),
                        fam.name,
                        kind.name()
                    )
                };
                if let Some(b) = builtin.get(o) {
                    clash = Some(format!(
                        "{} {} collides with the family {b} of a built-in collector: both \
                         would write {o}",
                        fam.kind.name(),
                        fam.name
                    ));
                } else if let Some(&other) = mine.get(o)
                    && other != fam.name
                {
                    let kind = exp
                        .families
                        .iter()
                        .find(|f| f.name == other)
                        .map_or(Kind::Untyped, |f| f.kind);
                    clash = Some(what(other, kind, " in the same file"));
                } else if let Some(&other) = claimed.get(o)
                    && other != fam.name
                    && let Some(t) = taken.get(other)
                {
                    clash = Some(what(other, t.kind, &format!(" of {}", files[t.file].label)));
                } else if !mine.contains_key(o) {
                    mine.insert(o.to_string(), fam.name.as_str());
                }
            });
            if let Some(msg) = clash {
                conflict = Some(err(msg));
                break;
            }
            let Some(t) = taken.get(fam.name.as_str()) else {
                continue;
            };
            let other = &files[t.file].label;
            if t.kind != fam.kind {
                conflict = Some(err(format!(
                    "family {} is a {} here but a {} in {other}",
                    fam.name,
                    fam.kind.name(),
                    t.kind.name()
                )));
                break;
            }
            if let (Some(a), Some(b)) = (t.help, fam.help.as_deref())
                && a != b
            {
                conflict = Some(err(format!(
                    "family {} has another HELP text than in {other}",
                    fam.name
                )));
                break;
            }
            for s in &fam.series {
                if t.series.contains_key(&identity(s)) {
                    conflict = Some(FileError {
                        line: Some(s.line),
                        msg: format!(
                            "series {} is already in {other}",
                            series_text(&fam.name, &s.labels)
                        ),
                    });
                    break 'families;
                }
            }
        }
        if conflict.is_some() {
            conflicts.push(conflict);
            continue;
        }
        conflicts.push(None);
        claimed.extend(mine);
        for (fam_i, fam) in exp.families.iter().enumerate() {
            let t = taken.entry(fam.name.as_str()).or_insert_with(|| Taken {
                help: None,
                kind: fam.kind,
                file: fi,
                series: HashMap::new(),
                parts: Vec::new(),
            });
            if t.help.is_none() {
                t.help = fam.help.as_deref();
            }
            for (si, s) in fam.series.iter().enumerate() {
                t.series.insert(identity(s), (fi, si));
            }
            t.parts.push((fi, fam_i));
        }
    }
    let families = taken
        .into_iter()
        .map(|(name, t)| {
            let help = match t.help {
                Some(h) => h.to_string(),
                None => {
                    let paths: Vec<&str> = t
                        .parts
                        .iter()
                        .map(|&(f, _)| files[f].label.as_str())
                        .collect();
                    format!("Metric read from {}", paths.join(", "))
                }
            };
            let mut series: Vec<(usize, usize, usize)> = t
                .parts
                .iter()
                .flat_map(|&(f, fam)| {
                    let n = family_of(files, f, fam).series.len();
                    (0..n).map(move |s| (f, fam, s))
                })
                .collect();
            series.sort_by(|a, b| {
                let (fa, fb) = (family_of(files, a.0, a.1), family_of(files, b.0, b.1));
                let va = fa.labels(&fa.series[a.2]).map(|(_, v)| v);
                let vb = fb.labels(&fb.series[b.2]).map(|(_, v)| v);
                va.cmp(vb)
            });
            Merged {
                name: name.to_string(),
                help_plain: help_is_plain(&help),
                help,
                kind: t.kind,
                series,
            }
        })
        .collect();
    (families, conflicts)
}

fn family_of(files: &[FileEntry], f: usize, fam: usize) -> &Family {
    match &files[f].parsed {
        Ok(e) => &e.families[fam],
        // The merge only refers to parsed files.
        Err(_) => unreachable!("merged family of an unparsed file"),
    }
}

impl Collector for TextfileCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let mut errors = Vec::new();
        let released = self.refresh(&mut errors);
        let format = enc.format();
        self.merge_if_needed(enc.written());
        if released >= TRIM_AFTER_BYTES {
            give_back_freed_memory();
        }
        for (f, c) in self.files.iter().zip(&self.merge.conflicts) {
            if let Some(c) = c {
                errors.push((f.label.clone(), c.clone()));
            }
        }
        let errored = !errors.is_empty();
        self.log_errors(errors);

        let mut labels: Vec<(&str, &str)> = recycle(std::mem::take(&mut self.labels));
        for m in &self.merge.families {
            enc.family_named(&m.name, &m.help, m.help_plain, m.kind.metric_type());
            // OpenMetrics names a counter's samples NAME_total.
            let suffix = if format == Format::OpenMetrics
                && m.kind == Kind::Counter
                && !m.name.ends_with("_total")
            {
                "_total"
            } else {
                ""
            };
            for &(f, fam, s) in &m.series {
                let fam = family_of(&self.files, f, fam);
                let s = &fam.series[s];
                labels.clear();
                labels.extend(fam.labels(s));
                match m.kind {
                    Kind::Counter | Kind::Gauge | Kind::Untyped => {
                        enc.sample_named(&m.name, suffix, &labels, None, Value::F64(s.value));
                    }
                    Kind::Summary | Kind::Histogram => {
                        let (extra, parts) = if m.kind == Kind::Summary {
                            ("quantile", "")
                        } else {
                            ("le", "_bucket")
                        };
                        let mut inf_seen = false;
                        for p in &s.points {
                            labels.push((extra, p.label.as_str()));
                            enc.sample_named(&m.name, parts, &labels, None, Value::F64(p.value));
                            labels.pop();
                            inf_seen |= p.bound == f64::INFINITY;
                        }
                        if m.kind == Kind::Histogram && !inf_seen {
                            labels.push(("le", "+Inf"));
                            enc.sample_named(
                                &m.name,
                                "_bucket",
                                &labels,
                                None,
                                Value::F64(s.count),
                            );
                            labels.pop();
                        }
                        enc.sample_named(&m.name, "_sum", &labels, None, Value::F64(s.sum));
                        enc.sample_named(&m.name, "_count", &labels, None, Value::F64(s.count));
                    }
                }
            }
        }
        labels.clear();
        self.labels = recycle(labels);

        let mut ok: Vec<(&str, i64)> = self
            .files
            .iter()
            .zip(&self.merge.conflicts)
            .filter(|(f, c)| f.parsed.is_ok() && c.is_none())
            .map(|(f, _)| (f.label.as_str(), f.mtime))
            .collect();
        ok.sort();
        if !ok.is_empty() {
            enc.family(&MTIME);
            for (file, mtime) in ok {
                enc.sample(&MTIME, &[("file", file)], mtime);
            }
        }
        enc.family(&SCRAPE_ERROR);
        enc.sample(&SCRAPE_ERROR, &[], u64::from(errored));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::FlagValue;
    use crate::collectors::test_support::{fixture, render};

    fn parse(s: &str) -> Result<Exposition, ParseError> {
        parse_fresh(s, parse_into)
    }

    fn err(s: &str) -> ParseError {
        parse(s).unwrap_err()
    }

    #[test]
    fn floats_as_go_parses_them() {
        for (s, v) in [
            ("1", 1.0),
            ("-1.5", -1.5),
            ("1e3", 1000.0),
            (".5", 0.5),
            ("5.", 5.0),
            ("+Inf", f64::INFINITY),
            ("-inf", f64::NEG_INFINITY),
            ("Infinity", f64::INFINITY),
            ("1e-400", 0.0),
        ] {
            assert_eq!(go_parse_float(s), Some(v), "{s}");
        }
        assert!(go_parse_float("NaN").unwrap().is_nan());
        assert!(go_parse_float("nan").unwrap().is_nan());
        for s in [
            "", "+NaN", "-nan", "1e400", "0x10", "0x1p3", "1_000", "x", "1,5", ".",
        ] {
            assert_eq!(go_parse_float(s), None, "{s}");
        }
    }

    #[test]
    fn floats_as_go_formats_them() {
        for (f, s) in [
            (0.0, "0"),
            (1.0, "1"),
            (-1.0, "-1"),
            (0.5, "0.5"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (100000.0, "100000"),
            (1e6, "1e+06"),
            (1234567.0, "1.234567e+06"),
            (2.5e-7, "2.5e-07"),
            (1e300, "1e+300"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
        ] {
            assert_eq!(go_format_float(f), s, "{f}");
        }
    }

    #[test]
    fn simple_families() {
        let e = parse(
            "# HELP b_total Escaped \\\\ and \\n and \\\".\n# TYPE b_total counter\n\
             b_total{x=\"1\"} 3\n  b_total { y = \"q\\\"\\\\\\n\" , } 4\n\
             # a comment\n\n#\n# TYPE\na 1\n",
        )
        .unwrap();
        assert_eq!(e.families.len(), 2);
        let a = &e.families[0];
        assert_eq!(
            (a.name.as_str(), a.kind, a.help.as_deref()),
            ("a", Kind::Untyped, None)
        );
        let b = &e.families[1];
        assert_eq!(b.help.as_deref(), Some("Escaped \\ and \n and \"."));
        assert_eq!(b.kind, Kind::Counter);
        // Missing labels filled with "", labels sorted, series sorted by values.
        let labels = |i: usize| b.labels(&b.series[i]).collect::<Vec<_>>();
        assert_eq!(labels(0), [("x", ""), ("y", "q\"\\\n")]);
        assert_eq!(labels(1), [("x", "1"), ("y", "")]);
        // Only the given ones are stored.
        assert_eq!(b.series[1].labels, [("x".into(), "1".into())]);
        assert_eq!((b.series[0].value, b.series[1].value), (4.0, 3.0));
    }

    #[test]
    fn summaries_and_histograms() {
        let e = parse(
            "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"0.5\"} 0\nh_bucket{le=\"1000000\"} 2\n\
             h_sum 3.5\nh_count 2\n# TYPE s summary\ns{quantile=\"0.5\",a=\"x\"} 7\n\
             s_sum{a=\"x\"} 9\ns_count{a=\"x\"} 3.9\n",
        )
        .unwrap();
        let h = &e.families[0];
        assert_eq!(h.kind, Kind::Histogram);
        let pts: Vec<(&str, f64)> = h.series[0]
            .points
            .iter()
            .map(|p| (p.label.as_str(), p.value))
            .collect();
        assert_eq!(pts, [("0.5", 0.0), ("1", 1.0), ("1e+06", 2.0)]);
        assert_eq!((h.series[0].sum, h.series[0].count), (3.5, 2.0));
        let s = &e.families[1];
        assert_eq!(s.series.len(), 1);
        assert_eq!(s.series[0].labels, [("a".into(), "x".into())]);
        assert_eq!((s.series[0].sum, s.series[0].count), (9.0, 3.0));
        assert_eq!(s.series[0].points[0].value, 7.0);
    }

    #[test]
    fn timestamps_are_noted() {
        let e = parse("a 1\nb 2 1700000000000\n").unwrap();
        assert_eq!(e.timestamp_line, Some(2));
        assert!(err("a 1 x\n").msg.contains("expected integer as timestamp"));
        assert!(err("a 1 \n").msg.contains("expected integer as timestamp"));
        assert!(err("a 1 5 \n").msg.contains("spurious string"));
    }

    #[test]
    fn malformed() {
        let cases: &[(&str, usize, &str)] = &[
            ("a 1", 1, "unexpected end of input"),
            ("a 1\n# x", 2, "unexpected end of input"),
            ("a\n", 1, "expected float as value"),
            ("a 1\r\n", 1, "expected float as value"),
            ("a x\n", 1, "expected float as value"),
            ("a 1e999\n", 1, "expected float as value"),
            ("9a 1\n", 1, "invalid metric name"),
            ("{a=\"1\"} 1\n", 1, "inside the braces"),
            ("\"a\" 1\n", 1, "quoted"),
            ("a{b=\"1\",b=\"2\"} 1\n", 1, "duplicate label names"),
            ("a{__name__=\"x\"} 1\n", 1, "reserved"),
            ("a{__x=\"x\"} 1\n", 1, "reserved"),
            ("a{b=1} 1\n", 1, "at start of label value"),
            ("a{b\"1\"} 1\n", 1, "expected '='"),
            ("a{b=\"1\" c=\"2\"} 1\n", 1, "unexpected end of label value"),
            ("a{b=\"1} 1\n", 1, "unescaped new-line"),
            ("a{b=\"\\x\"} 1\n", 1, "invalid escape"),
            ("a{9=\"1\"} 1\n", 1, "invalid label name"),
            ("# HELP a x\n# HELP a y\n", 2, "second HELP"),
            ("# HELP a x\\q\n", 1, "invalid escape"),
            ("# HELP a x\\\n", 1, "invalid escape"),
            ("# TYPE a gauge\n# TYPE a counter\n", 2, "second TYPE"),
            ("a 1\n# TYPE a gauge\n", 2, "TYPE reported after samples"),
            ("# TYPE a gauge \n", 1, "unknown metric type"),
            ("# TYPE a foo\n", 1, "unknown metric type"),
            ("# TYPE a gaugehistogram\n", 1, "not supported"),
            ("# TYPE a-b gauge\n", 1, "invalid metric name in comment"),
            (
                "# TYPE s summary\ns{quantile=\"x\"} 1\n",
                2,
                "'quantile' label",
            ),
            (
                "# TYPE h histogram\nh_bucket{le=\"x\"} 1\n",
                2,
                "'le' label",
            ),
            (
                "# TYPE h histogram\nh_bucket{le=\"1\"} -1\n",
                2,
                "negative bucket",
            ),
            ("# TYPE h histogram\nh_count -1\n", 2, "negative count"),
            ("a{b=\"1\"} 1\nc 1\na{b=\"1\"} 2\n", 3, "duplicate series"),
        ];
        for &(text, line, what) in cases {
            let e = err(text);
            assert!(e.msg.contains(what), "{text:?}: {e}");
            assert_eq!(e.line, line, "{text:?}: {e}");
        }
        // Accepted oddities, as expfmt accepts them.
        assert!(parse("").unwrap().families.is_empty());
        assert!(parse("  \n\t\n   ").unwrap().families.is_empty());
        assert!(
            parse("# HELP\n# HELP a\n# TYPE a \n#x y z\n")
                .unwrap()
                .families
                .is_empty()
        );
        assert_eq!(
            parse("# TYPE a GAUGE\na NaN\n").unwrap().families[0].kind,
            Kind::Gauge
        );
        // Interleaved samples of one family are one family.
        let e = parse("a{x=\"1\"} 1\nb 1\na{x=\"2\"} 2\n").unwrap();
        assert_eq!(e.families[0].series.len(), 2);
    }

    #[test]
    fn paths_as_go_cleans_and_globs_them() {
        assert_eq!(go_clean("a//b/./c/"), "a/b/c");
        assert_eq!(go_clean("/../a/../b"), "/b");
        assert_eq!(go_clean("../a"), "../a");
        assert_eq!(go_clean(""), ".");
        assert_eq!(go_join("./dir/", "x.prom"), "dir/x.prom");
        for (p, n, m) in [
            ("*.prom", "a.prom", true),
            ("*.prom", "a.txt", false),
            ("a?c", "abc", true),
            ("[a-c]x", "bx", true),
            ("[^a-c]x", "bx", false),
            ("\\*", "*", true),
            ("*", "a/b", false),
        ] {
            assert_eq!(glob_match(p, n), Some(m), "{p} {n}");
        }
        assert_eq!(glob_match("[", "x"), None);
        assert_eq!(glob_match("a\\", "a"), None);
        let root = fixture("textfile");
        let found = glob(&format!("{}/g*", root.display())).unwrap();
        assert!(found.iter().any(|p| p.ends_with("/good")), "{found:?}");
    }

    fn collector(dirs: &[&Path]) -> TextfileCollector {
        let mut s = Settings::with_roots("/nonexistent", "/nonexistent");
        s.set(
            DIRECTORY,
            Some(FlagValue::TextList(
                dirs.iter().map(|d| d.display().to_string()).collect(),
            )),
        );
        TextfileCollector {
            patterns: s.texts(DIRECTORY).to_vec(),
            files: Vec::new(),
            by_label: HashMap::new(),
            merge: Merge::default(),
            dirty: true,
            logged: HashSet::new(),
            labels: Vec::new(),
            scratch: String::new(),
        }
    }

    /// The output without the mtime values, which depend on the checkout.
    fn stable(out: &str) -> String {
        out.lines()
            .map(|l| match l.strip_prefix("node_textfile_mtime_seconds{") {
                Some(rest) => format!(
                    "node_textfile_mtime_seconds{{{} T",
                    rest.rsplit_once(' ').map_or(rest, |(a, _)| a)
                ),
                None => l.to_string(),
            })
            .map(|l| format!("{l}\n"))
            .collect()
    }

    #[test]
    fn no_directory_is_no_error() {
        let mut c = build(&Settings::with_roots("/x", "/y"));
        assert_eq!(
            render(c.as_mut()).unwrap(),
            "# HELP node_textfile_scrape_error 1 if there was an error opening or reading a file, 0 otherwise\n\
             # TYPE node_textfile_scrape_error gauge\nnode_textfile_scrape_error 0\n"
        );
        let mut c = collector(&[Path::new("/nonexistent-usescope")]);
        assert!(
            render(&mut c)
                .unwrap()
                .ends_with("node_textfile_scrape_error 1\n")
        );
    }

    #[test]
    fn good_directory() {
        let dir = fixture("textfile/good");
        let mut c = collector(&[&dir]);
        let out = stable(&render(&mut c).unwrap());
        let d = dir.display();
        let expected = format!(
            "# HELP app_jobs_total Jobs run, by result.\n\
             # TYPE app_jobs_total counter\n\
             app_jobs_total{{result=\"failed\"}} 2\n\
             app_jobs_total{{result=\"ok\"}} 40\n\
             # HELP app_last_run_seconds Metric read from {d}/app.prom\n\
             # TYPE app_last_run_seconds untyped\n\
             app_last_run_seconds 1700000000\n"
        );
        assert!(out.contains(&expected), "{out}");
        assert!(out.contains(
            "app_request_duration_seconds_bucket{handler=\"/\",le=\"1e+06\"} 11\n\
             app_request_duration_seconds_bucket{handler=\"/\",le=\"+Inf\"} 11\n"
        ));
        // The +Inf bucket a histogram lacks is its count.
        assert!(
            out.contains("app_request_duration_seconds_bucket{handler=\"/api\",le=\"+Inf\"} 2\n")
        );
        assert!(
            out.contains("app_rpc_seconds{quantile=\"0.99\"} 0.25\napp_rpc_seconds_sum 17.5\n")
        );
        assert!(out.contains(
            "# HELP app_build_info Build facts: a \"quoted\" word, a back\\\\slash and a\\nnewline.\n"
        ), "{out}");
        assert!(out.contains(
            "app_build_info{note=\"say \\\"hi\\\"\\nbye\",path=\"C:\\\\tmp\\\\x\",version=\"1.2.3\"} 1\n"
        ), "{out}");
        assert!(out.contains("app_temperature_celsius{extra=\"\",sensor=\"a\"} NaN\n"));
        assert!(out.contains(&format!(
            "node_textfile_mtime_seconds{{file=\"{d}/app.prom\"}} T\n"
        )));
        assert!(out.ends_with("node_textfile_scrape_error 0\n"), "{out}");
        // A second scrape reuses the parse and writes the same.
        assert_eq!(stable(&render(&mut c).unwrap()), out);
    }

    #[test]
    fn bad_files_are_skipped_alone() {
        let dir = fixture("textfile/bad");
        let mut c = collector(&[&dir]);
        let out = render(&mut c).unwrap();
        assert!(out.ends_with("node_textfile_scrape_error 1\n"), "{out}");
        // The good file's families and mtime are there; no bad file's are.
        assert!(out.contains("ok_value 1\n"), "{out}");
        let mtimes: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("node_textfile_mtime_seconds{"))
            .collect();
        assert_eq!(mtimes.len(), 1, "{mtimes:?}");
        assert!(mtimes[0].contains("/ok.prom\""), "{mtimes:?}");
        let errors: BTreeMap<String, FileError> = c
            .logged
            .iter()
            .map(|(f, e)| (f.rsplit('/').next().unwrap().to_string(), e.clone()))
            .collect();
        let line = |f: &str| errors.get(f).and_then(|e| e.line);
        assert_eq!(line("syntax.prom"), Some(3), "{errors:?}");
        assert_eq!(line("timestamps.prom"), Some(2), "{errors:?}");
        assert_eq!(line("utf8.prom"), Some(2), "{errors:?}");
        assert!(errors.contains_key("nonl.prom"), "{errors:?}");
        assert!(errors.contains_key("dup.prom"), "{errors:?}");
        assert!(errors.contains_key("reserved.prom"), "{errors:?}");
        assert!(!errors.contains_key("ok.prom"), "{errors:?}");
    }

    #[test]
    fn conflicting_files_lose_to_earlier_ones() {
        let dir = fixture("textfile/conflict");
        let mut c = collector(&[&dir]);
        let out = render(&mut c).unwrap();
        assert!(out.ends_with("node_textfile_scrape_error 1\n"), "{out}");
        let errors: BTreeMap<String, String> = c
            .logged
            .iter()
            .map(|(f, e)| (f.rsplit('/').next().unwrap().to_string(), e.msg.clone()))
            .collect();
        assert!(
            errors["b_type.prom"].contains("is a gauge here but a counter"),
            "{errors:?}"
        );
        assert!(errors["z_help.prom"].contains("another HELP"), "{errors:?}");
        assert!(
            errors["d_series.prom"].contains("is already in"),
            "{errors:?}"
        );
        assert!(errors["e_suffix.prom"].contains("collides"), "{errors:?}");
        assert!(!errors.contains_key("a_first.prom"));
        assert!(!errors.contains_key("f_more.prom"), "{errors:?}");
        // f_more adds a series to a_first's family, without a HELP of its own.
        assert!(
            out.contains("shared_total{job=\"a\"} 1\nshared_total{job=\"f\"} 6\n"),
            "{out}"
        );
    }

    #[test]
    fn builtin_families_are_not_overwritten() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("x.prom"), "node_load1 99\n").unwrap();
        std::fs::write(tmp.path().join("y.prom"), "fine 1\n").unwrap();
        let mut c = collector(&[tmp.path()]);
        let mut buf =
            b"# HELP node_load1 1m load average.\n# TYPE node_load1 gauge\nnode_load1 0.5\n"
                .to_vec();
        let mut enc = Encoder::new(&mut buf, Format::PrometheusText);
        c.collect(&mut enc).unwrap();
        let out = String::from_utf8(buf).unwrap();
        // (Not just "99": the mtime of the files written above may hold it.)
        assert!(!out.contains("node_load1 99"), "{out}");
        assert!(out.contains("node_load1 0.5\n"), "{out}");
        assert!(out.contains("fine 1\n"), "{out}");
        assert!(out.ends_with("node_textfile_scrape_error 1\n"));
        // Without the built-in family, the file is taken.
        let out = render(&mut c).unwrap();
        assert!(out.contains("node_load1 99\n"), "{out}");
        assert!(out.ends_with("node_textfile_scrape_error 0\n"));
    }

    #[test]
    fn changes_are_seen_and_bounds_hold() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("x.prom");
        std::fs::write(&f, "a 1\n").unwrap();
        let mut c = collector(&[tmp.path()]);
        assert!(render(&mut c).unwrap().contains("a 1\n"));
        std::fs::write(&f, "a 2\n").unwrap();
        assert!(render(&mut c).unwrap().contains("a 2\n"));
        std::fs::write(&f, "a 2 x\n").unwrap();
        let out = render(&mut c).unwrap();
        assert!(!out.contains("\na "), "{out}");
        assert!(out.ends_with("node_textfile_scrape_error 1\n"));
        // Not read again while unchanged, and still an error.
        assert!(
            render(&mut c)
                .unwrap()
                .ends_with("node_textfile_scrape_error 1\n")
        );
        std::fs::remove_file(&f).unwrap();
        assert!(
            render(&mut c)
                .unwrap()
                .ends_with("node_textfile_scrape_error 0\n")
        );
        // A FIFO is refused without blocking.
        let fifo = tmp.path().join("p.prom");
        let cpath = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(cpath.as_ptr(), 0o600) }, 0);
        assert!(
            render(&mut c)
                .unwrap()
                .ends_with("node_textfile_scrape_error 1\n")
        );
        let logged: Vec<String> = c.logged.iter().map(|(_, e)| e.msg.clone()).collect();
        assert!(logged.iter().any(|m| m.contains("FIFO")), "{logged:?}");
    }

    #[test]
    fn label_names_are_bounded_per_family_and_file() {
        // Each series a name of its own: N² pairs before the bound.
        let own: String = (0..2000).map(|i| format!("x{{l{i}=\"1\"}} 1\n")).collect();
        let e = err(&own);
        assert_eq!(e.line, MAX_LABEL_NAMES + 1, "{e}");
        assert!(e.msg.contains("more than 128 label names"), "{e}");
        // Under the name bound, but most series lack most names.
        let spread: String = (0..2000)
            .map(|i| format!("y{{l{}=\"{i}\"}} 1\n", i % 128))
            .collect();
        assert!(
            err(&spread)
                .msg
                .contains("more label pairs than the file may")
        );
        // A histogram's buckets count: each is written with every name.
        let buckets: String = (0..300)
            .map(|i| format!("h_bucket{{l{}=\"a\",le=\"{i}\"}} 1\n", i % 80))
            .collect();
        let e = err(&format!("# TYPE h histogram\n{buckets}"));
        assert!(e.msg.contains("more label pairs"), "{e}");
        // One line with more labels than a family may have.
        let labels: Vec<String> = (0..=MAX_LABEL_NAMES)
            .map(|i| format!("l{i}=\"v\""))
            .collect();
        let e = err(&format!("z{{{}}} 1\n", labels.join(",")));
        assert!(e.msg.contains("more than 128 labels"), "{e}");
        // A real family at the bound: every series with all 128 names.
        let full: String = (0..100)
            .map(|s| format!("w{{{},s=\"{s}\"}} 1\n", labels[..127].join(",")))
            .collect();
        let e = parse(&full).unwrap();
        assert_eq!(e.families[0].label_names.len(), MAX_LABEL_NAMES);
        // Sparse but ordinary: series with some of a few names.
        let e = parse("a{x=\"1\"} 1\na{y=\"1\"} 1\na{x=\"2\",y=\"2\"} 1\na 4\n").unwrap();
        let a = &e.families[0];
        let rows: Vec<Vec<(&str, &str)>> = a.series.iter().map(|s| a.labels(s).collect()).collect();
        assert_eq!(
            rows,
            [
                vec![("x", ""), ("y", "")],
                vec![("x", ""), ("y", "1")],
                vec![("x", "1"), ("y", "")],
                vec![("x", "2"), ("y", "2")],
            ]
        );
        // An empty value given and a label left out are one series.
        assert!(err("a{x=\"\"} 1\na 2\n").msg.contains("duplicate series"));
    }

    #[test]
    fn families_that_would_write_one_name_collide() {
        let tmp = tempfile::tempdir().unwrap();
        let w = |n: &str, t: &str| std::fs::write(tmp.path().join(n), t).unwrap();
        w(
            "a.prom",
            "# TYPE c counter\nc 1\n# TYPE s summary\ns_sum 1\ns_count 1\n",
        );
        w("b.prom", "# TYPE c_total gauge\nc_total 2\n");
        w("c.prom", "# TYPE c_total counter\nc_total 3\n");
        w("d.prom", "s_count 4\n");
        w(
            "e.prom",
            "# TYPE c_created gauge\nc_created 5\n# TYPE t counter\nt 1\nt_total 2\n",
        );
        w("f.prom", "# TYPE c counter\nc{x=\"f\"} 6\n");
        let mut c = collector(&[tmp.path()]);
        for format in [Format::PrometheusText, Format::OpenMetrics] {
            let mut buf = Vec::new();
            c.collect(&mut Encoder::new(&mut buf, format)).unwrap();
            let out = String::from_utf8(buf).unwrap();
            assert!(out.ends_with("node_textfile_scrape_error 1\n"), "{out}");
            assert!(
                out.contains(" 1\n") && out.contains("{x=\"f\"} 6\n"),
                "{out}"
            );
            for refused in [" 2\n", " 3\n", " 4\n", " 5\n"] {
                assert!(!out.contains(refused), "{format:?}: {out}");
            }
        }
        let errors: BTreeMap<String, String> = c
            .logged
            .iter()
            .map(|(f, e)| (f.rsplit('/').next().unwrap().to_string(), e.msg.clone()))
            .collect();
        let b = &errors["b.prom"];
        assert!(
            b.contains("gauge c_total collides with the counter c of ") && b.contains("/a.prom"),
            "{b}"
        );
        assert!(
            errors["c.prom"].contains("counter c_total collides with the counter c"),
            "{errors:?}"
        );
        assert!(
            errors["d.prom"].contains("collides with the summary s"),
            "{errors:?}"
        );
        assert!(errors["e.prom"].contains("in the same file"), "{errors:?}");
        assert!(
            !errors.contains_key("a.prom") && !errors.contains_key("f.prom"),
            "{errors:?}"
        );
    }

    #[test]
    fn the_daemons_own_families_are_reserved() {
        // Everything the scraper writes after the collectors, the
        // textfile collector's own families and any probe's.
        let scraper = crate::collector::Scraper::new(crate::self_metrics::SelfMetrics::new());
        let out = String::from_utf8(scraper.scrape(Format::PrometheusText)).unwrap();
        let mut families: Vec<(&str, &str)> = out
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE ")?.split_once(' '))
            .collect();
        assert!(
            families
                .iter()
                .any(|(n, _)| *n == "node_exporter_build_info"),
            "{out}"
        );
        families.extend([
            ("node_textfile_scrape_error", "gauge"),
            ("node_textfile_mtime_seconds", "gauge"),
            ("node_scrape_collector_success", "gauge"),
            ("usescope_probe_up", "gauge"),
        ]);
        for (name, kind) in families {
            let kind = match kind {
                "counter" => Kind::Counter,
                "histogram" => Kind::Histogram,
                _ => Kind::Gauge,
            };
            assert!(reserved(name, kind).is_some(), "{name} is not reserved");
            // Nor may a counter write it as its samples.
            if let Some(stem) = name.strip_suffix("_total") {
                assert!(reserved(stem, Kind::Counter).is_some(), "{stem}");
            }
        }
        assert!(reserved("app_build_info", Kind::Gauge).is_none());
    }

    #[test]
    fn nothing_is_kept_at_its_peak_once_a_large_file_is_gone() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("many.prom");
        let many: String = (0..20_000).map(|i| format!("family_{i} 1\n")).collect();
        std::fs::write(&f, many).unwrap();
        let mut c = collector(&[tmp.path()]);
        assert!(render(&mut c).unwrap().contains("family_19999 1\n"));
        assert!(c.merge.names.capacity() >= 20_000);
        std::fs::write(&f, "few 1\n").unwrap();
        assert!(render(&mut c).unwrap().contains("few 1\n"));
        assert!(
            c.merge.names.capacity() < 64,
            "{}",
            c.merge.names.capacity()
        );
        assert!(c.merge.families.capacity() < 64 && c.merge.clashes.capacity() < 64);
        assert!(c.labels.capacity() <= MAX_LABEL_NAMES + 1 && c.scratch.capacity() <= 4096);
        assert!(c.files.capacity() < 64 && c.by_label.capacity() < 64);
    }

    #[test]
    fn openmetrics_counters_get_total() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(
            tmp.path().join("x.prom"),
            "# TYPE c counter\nc 1\n# TYPE d_total counter\nd_total 2\n# TYPE u untyped\nu 3\n",
        )
        .unwrap();
        let mut c = collector(&[tmp.path()]);
        let mut buf = Vec::new();
        let mut enc = Encoder::new(&mut buf, Format::OpenMetrics);
        c.collect(&mut enc).unwrap();
        let out = String::from_utf8(buf).unwrap();
        assert!(out.contains("# TYPE c counter\nc_total 1\n"), "{out}");
        assert!(out.contains("# TYPE d counter\nd_total 2\n"), "{out}");
        assert!(out.contains("# TYPE u unknown\nu 3\n"), "{out}");
    }
}
