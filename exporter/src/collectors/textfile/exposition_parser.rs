//! A parser of the Prometheus text format 0.0.4, written to accept what
//! node_exporter's parser (prometheus/common expfmt `TextParser`, legacy
//! name validation) accepts and to reject what it rejects, with the same
//! error wording where it has one. The textfile collector re-encodes what
//! it parses through usescope's encoder.

use std::collections::{HashMap, HashSet};

use crate::kernel::error::ParseError;
use crate::kernel::go_compat::{go_format_float, go_parse_float};
use crate::scrape::exposition::MetricType;

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
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Untyped => "untyped",
            Kind::Summary => "summary",
            Kind::Histogram => "histogram",
        }
    }

    pub(super) fn metric_type(self) -> MetricType {
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
pub(super) fn series_text(name: &str, labels: &[(String, String)]) -> String {
    let set: Vec<String> = labels
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(n, v)| format!("{n}={v:?}"))
        .collect();
    format!("{name}{{{}}}", set.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::parse::parse_fresh;

    fn parse(s: &str) -> Result<Exposition, ParseError> {
        parse_fresh(s, parse_into)
    }

    fn err(s: &str) -> ParseError {
        parse(s).unwrap_err()
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
}
