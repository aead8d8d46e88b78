//! The exposition encoder: writes metric families straight into a reused
//! byte buffer, in either the Prometheus text format 0.0.4 or OpenMetrics 1.0.
//!
//! Why not prometheus-client's encoder: it writes OpenMetrics only, does
//! not escape HELP text or label values, can only fail with `fmt::Error`,
//! cannot take back a failed collector's output, and took twice the
//! instructions for the same scrape (ARCHITECTURE.md; BENCHMARKS.md, "The
//! encoder", measured with bench/encoder-compare).
//!
//! Naming follows the Prometheus convention used throughout usescope: a
//! [`Desc`] carries the *full* sample name as node_exporter emits it
//! (`node_cpu_seconds_total`). For OpenMetrics the encoder strips `_total`
//! from the `# TYPE` / `# HELP` lines of counters, as that format requires.

use std::io::Write;

/// The wire format a client asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `text/plain; version=0.0.4`
    PrometheusText,
    /// `application/openmetrics-text; version=1.0.0`
    OpenMetrics,
}

impl Format {
    /// Picks the format from an HTTP `Accept` header, as Prometheus' own
    /// content negotiation does: OpenMetrics only when explicitly asked for.
    /// OpenMetrics when `Accept` gives it a weight above zero and at least
    /// that of `text/plain` (Prometheus lists both, OpenMetrics first);
    /// otherwise text 0.0.4. Parsed in place: this runs on every scrape.
    pub fn from_accept(accept: Option<&str>) -> Format {
        let (mut openmetrics, mut text) = (0.0f32, 0.0f32);
        for range in accept.unwrap_or("").split(',') {
            let mut params = range.split(';');
            let media = params.next().unwrap_or("").trim();
            // RFC 9110: a missing weight is 1; an unreadable one counts as 0.
            let q = params
                .find_map(|p| {
                    let (k, v) = p.split_once('=')?;
                    k.trim().eq_ignore_ascii_case("q").then(|| v.trim())
                })
                .map_or(1.0, |v| v.parse::<f32>().unwrap_or(0.0).clamp(0.0, 1.0));
            if media.eq_ignore_ascii_case("application/openmetrics-text") {
                openmetrics = openmetrics.max(q);
            } else if media.eq_ignore_ascii_case("text/plain") {
                text = text.max(q);
            }
        }
        if openmetrics > 0.0 && openmetrics >= text {
            Format::OpenMetrics
        } else {
            Format::PrometheusText
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::PrometheusText => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// Metric type, as written on the `# TYPE` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricType {
    Counter,
    Gauge,
    /// node_exporter exports some fields untyped (`node_vmstat_*`,
    /// `node_netstat_*`); OpenMetrics calls this `unknown`.
    Untyped,
    Histogram,
    /// Only the textfile collector re-exports summaries.
    Summary,
}

/// A metric family's static description. Declare these as `const`s next to
/// the collector that emits them so the name, type and help live together.
#[derive(Clone, Copy, Debug)]
pub struct Desc {
    /// Full sample name (counters include `_total`; histograms are the base name).
    pub name: &'static str,
    pub help: &'static str,
    pub kind: MetricType,
    /// [`help_is_plain`] of `help`, decided at compile time.
    pub help_plain: bool,
}

impl Desc {
    const fn new(name: &'static str, help: &'static str, kind: MetricType) -> Desc {
        Desc {
            name,
            help,
            kind,
            help_plain: help_is_plain(help),
        }
    }
    pub const fn counter(name: &'static str, help: &'static str) -> Desc {
        Desc::new(name, help, MetricType::Counter)
    }
    pub const fn gauge(name: &'static str, help: &'static str) -> Desc {
        Desc::new(name, help, MetricType::Gauge)
    }
    pub const fn untyped(name: &'static str, help: &'static str) -> Desc {
        Desc::new(name, help, MetricType::Untyped)
    }
    pub const fn histogram(name: &'static str, help: &'static str) -> Desc {
        Desc::new(name, help, MetricType::Histogram)
    }
}

/// Whether help text needs no escaping (has no `\` and no newline). Help
/// texts are fixed, so this is decided once where each is defined (at
/// compile time for a [`Desc`]) instead of scanning ~15 KB of help on
/// every scrape.
pub const fn help_is_plain(help: &str) -> bool {
    let b = help.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' || b[i] == b'\n' {
            return false;
        }
        i += 1;
    }
    true
}

/// A sample value. Integers are written exactly; floats in the shortest form
/// that round-trips.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    U64(u64),
    I64(i64),
    F64(f64),
}

impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::U64(v)
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::I64(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::F64(v)
    }
}

/// Writes families into a byte buffer the caller owns and reuses.
pub struct Encoder<'b> {
    buf: &'b mut Vec<u8>,
    format: Format,
    scrape: Option<u64>,
}

impl<'b> Encoder<'b> {
    pub fn new(buf: &'b mut Vec<u8>, format: Format) -> Encoder<'b> {
        Encoder {
            buf,
            format,
            scrape: None,
        }
    }

    /// An encoder for the scraper's scrape number `n`: collectors that
    /// share a source read it once per scrape ([`Encoder::scrape`]).
    pub fn for_scrape(buf: &'b mut Vec<u8>, format: Format, n: u64) -> Encoder<'b> {
        Encoder {
            buf,
            format,
            scrape: Some(n),
        }
    }

    /// Which scrape this is; None outside a scraper (tools, unit tests),
    /// where every collector reads its own sources.
    pub fn scrape(&self) -> Option<u64> {
        self.scrape
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// What has been written so far in this scrape (the textfile collector
    /// checks its families against the built-in ones).
    pub fn written(&self) -> &[u8] {
        self.buf
    }

    /// Current length of the output, so a failed collector's partial output
    /// can be cut off again with [`Encoder::truncate`].
    pub fn mark(&self) -> usize {
        self.buf.len()
    }

    pub fn truncate(&mut self, mark: usize) {
        self.buf.truncate(mark);
    }

    /// Starts a family: writes its `# HELP` and `# TYPE` lines. Every sample
    /// of the family must follow before the next `family` call.
    pub fn family(&mut self, desc: &Desc) {
        self.family_named(desc.name, desc.help, desc.help_plain, desc.kind);
    }

    /// [`Encoder::family`] for names only known at run time (vmstat and
    /// netstat fields come from the kernel's own field names).
    /// `help_plain` is [`help_is_plain`] of `help`, computed once where the
    /// text is built; `false` always escapes, which is never wrong.
    pub fn family_named(&mut self, name: &str, help: &str, help_plain: bool, kind: MetricType) {
        let name = match (self.format, kind) {
            (Format::OpenMetrics, MetricType::Counter) => {
                name.strip_suffix("_total").unwrap_or(name)
            }
            _ => name,
        };
        let kind = match (kind, self.format) {
            (MetricType::Counter, _) => "counter",
            (MetricType::Gauge, _) => "gauge",
            (MetricType::Histogram, _) => "histogram",
            (MetricType::Summary, _) => "summary",
            (MetricType::Untyped, Format::PrometheusText) => "untyped",
            (MetricType::Untyped, Format::OpenMetrics) => "unknown",
        };
        self.buf.extend_from_slice(b"# HELP ");
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(b' ');
        if help_plain {
            self.buf.extend_from_slice(help.as_bytes());
        } else {
            write_escaped(self.buf, help, false);
        }
        self.buf.extend_from_slice(b"\n# TYPE ");
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(b' ');
        self.buf.extend_from_slice(kind.as_bytes());
        self.buf.push(b'\n');
    }

    /// Writes one sample of the current family, named `desc.name`.
    pub fn sample(&mut self, desc: &Desc, labels: &[(&str, &str)], value: impl Into<Value>) {
        self.sample_named(desc.name, "", labels, None, value.into());
    }

    /// Writes one sample whose name is `base` + `suffix` (histogram parts),
    /// with an optional trailing `le` label.
    pub fn sample_named(
        &mut self,
        base: &str,
        suffix: &str,
        labels: &[(&str, &str)],
        le: Option<f64>,
        value: Value,
    ) {
        self.buf.extend_from_slice(base.as_bytes());
        self.buf.extend_from_slice(suffix.as_bytes());
        if !labels.is_empty() || le.is_some() {
            self.buf.push(b'{');
            let mut first = true;
            for (k, v) in labels {
                if !first {
                    self.buf.push(b',');
                }
                first = false;
                self.buf.extend_from_slice(k.as_bytes());
                self.buf.extend_from_slice(b"=\"");
                write_escaped(self.buf, v, true);
                self.buf.push(b'"');
            }
            if let Some(le) = le {
                if !first {
                    self.buf.push(b',');
                }
                self.buf.extend_from_slice(b"le=\"");
                write_float(self.buf, le);
                self.buf.push(b'"');
            }
            self.buf.push(b'}');
        }
        self.buf.push(b' ');
        write_value(self.buf, value);
        self.buf.push(b'\n');
    }

    /// Writes a whole histogram family member: cumulative buckets (given as
    /// `(upper_bound, cumulative_count)` pairs in ascending order, without
    /// +Inf), then `+Inf`, `_sum` and `_count`.
    pub fn histogram(
        &mut self,
        desc: &Desc,
        labels: &[(&str, &str)],
        buckets: &[(f64, u64)],
        sum: f64,
        count: u64,
    ) {
        for &(le, cumulative) in buckets {
            self.sample_named(
                desc.name,
                "_bucket",
                labels,
                Some(le),
                Value::U64(cumulative),
            );
        }
        self.sample_named(
            desc.name,
            "_bucket",
            labels,
            Some(f64::INFINITY),
            Value::U64(count),
        );
        self.sample_named(desc.name, "_sum", labels, None, Value::F64(sum));
        self.sample_named(desc.name, "_count", labels, None, Value::U64(count));
    }

    /// Ends the exposition (OpenMetrics needs `# EOF`).
    pub fn finish(&mut self) {
        if self.format == Format::OpenMetrics {
            self.buf.extend_from_slice(b"# EOF\n");
        }
    }
}

/// Copies `s`, escaping `\\`, newline and (in label values) `"`.
fn write_escaped(buf: &mut Vec<u8>, s: &str, quote: bool) {
    let bytes = s.as_bytes();
    // Almost no string has a special byte, so look for one first. The
    // check has no early exit, which lets LLVM vectorise it; on the short
    // label values and help texts written here it costs a fraction of the
    // memchr call it replaced.
    let special = |b: u8| u8::from(b == b'\\' || b == b'\n' || (quote && b == b'"'));
    if bytes.iter().fold(0, |found, &b| found | special(b)) == 0 {
        buf.extend_from_slice(bytes);
        return;
    }
    for &b in bytes {
        match b {
            b'\\' => buf.extend_from_slice(b"\\\\"),
            b'\n' => buf.extend_from_slice(b"\\n"),
            b'"' if quote => buf.extend_from_slice(b"\\\""),
            _ => buf.push(b),
        }
    }
}

/// Integers (and floats holding an exact integer, which most counters
/// converted to seconds or bytes are) are written digit by digit on the
/// stack: `core::fmt` cost hundreds of instructions per sample, a sixth of
/// a scrape.
fn write_value(buf: &mut Vec<u8>, v: Value) {
    let mut digits = [0u8; 20];
    match v {
        Value::U64(n) => buf.extend_from_slice(u64_digits(n, &mut digits)),
        Value::I64(n) => {
            if n < 0 {
                buf.push(b'-');
            }
            buf.extend_from_slice(u64_digits(n.unsigned_abs(), &mut digits));
        }
        // Exactly representable integers only (|f| < 2^53), so the digits
        // are the float's own value.
        Value::F64(f) if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 => {
            if f < 0.0 {
                buf.push(b'-');
            }
            buf.extend_from_slice(u64_digits(f.abs() as u64, &mut digits));
        }
        Value::F64(f) => write_float(buf, f),
    }
}

/// Shortest round-trip float. Rust's `Display` never uses exponents, which
/// turns 1e300 into 301 digits; switch to exponent form for large/small
/// magnitudes so output stays compact and parseable.
pub fn write_float(buf: &mut Vec<u8>, f: f64) {
    if f.is_nan() {
        buf.extend_from_slice(b"NaN");
    } else if f.is_infinite() {
        buf.extend_from_slice(if f > 0.0 { b"+Inf" } else { b"-Inf" });
    } else if f != 0.0 && (f.abs() >= 1e21 || f.abs() < 1e-6) {
        let _ = write!(buf, "{f:e}");
    } else {
        let _ = write!(buf, "{f}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: Desc = Desc::counter("node_forks_total", "Total number of forks.");
    const H: Desc = Desc::histogram("usescope_x_seconds", "A histogram.");

    fn render(format: Format, f: impl FnOnce(&mut Encoder)) -> String {
        let mut buf = Vec::new();
        let mut e = Encoder::new(&mut buf, format);
        f(&mut e);
        e.finish();
        String::from_utf8(buf).unwrap()
    }

    #[test]
    fn help_is_escaped_unless_known_plain() {
        const ODD: Desc = Desc::gauge("x", "a \\ b\nc");
        const { assert!(C.help_plain && !ODD.help_plain) };
        let body = |e: &mut Encoder| {
            e.family(&ODD);
            e.family_named("y", "d\\e", false, MetricType::Gauge);
            e.family_named("z", "plain", true, MetricType::Gauge);
        };
        let text = render(Format::PrometheusText, body);
        assert!(text.contains("# HELP x a \\\\ b\\nc\n"), "{text}");
        assert!(text.contains("# HELP y d\\\\e\n"), "{text}");
        assert!(text.contains("# HELP z plain\n"), "{text}");
    }

    #[test]
    fn counter_in_both_formats() {
        let body = |e: &mut Encoder| {
            e.family(&C);
            e.sample(&C, &[], 42u64);
        };
        assert_eq!(
            render(Format::PrometheusText, body),
            "# HELP node_forks_total Total number of forks.\n# TYPE node_forks_total counter\nnode_forks_total 42\n"
        );
        assert_eq!(
            render(Format::OpenMetrics, body),
            "# HELP node_forks Total number of forks.\n# TYPE node_forks counter\nnode_forks_total 42\n# EOF\n"
        );
    }

    #[test]
    fn escapes_label_values_and_help() {
        let d = Desc::gauge("g", "a \\ b\nc");
        let out = render(Format::PrometheusText, |e| {
            e.family(&d);
            e.sample(&d, &[("l", "q\"\\\n")], 1.5f64);
        });
        assert!(out.contains("# HELP g a \\\\ b\\nc\n"));
        assert!(out.contains("g{l=\"q\\\"\\\\\\n\"} 1.5\n"));
    }

    #[test]
    fn histogram_layout() {
        let out = render(Format::PrometheusText, |e| {
            e.family(&H);
            e.histogram(&H, &[("cpu", "0")], &[(1e-6, 1), (2e-6, 3)], 0.5, 4);
        });
        assert!(out.contains("usescope_x_seconds_bucket{cpu=\"0\",le=\"0.000001\"} 1\n"));
        assert!(out.contains("usescope_x_seconds_bucket{cpu=\"0\",le=\"0.000002\"} 3\n"));
        assert!(out.contains("usescope_x_seconds_bucket{cpu=\"0\",le=\"+Inf\"} 4\n"));
        assert!(out.contains("usescope_x_seconds_sum{cpu=\"0\"} 0.5\n"));
        assert!(out.contains("usescope_x_seconds_count{cpu=\"0\"} 4\n"));
    }

    #[test]
    fn floats() {
        let f = |x: f64| {
            let mut b = Vec::new();
            write_float(&mut b, x);
            String::from_utf8(b).unwrap()
        };
        assert_eq!(f(0.0), "0");
        assert_eq!(f(1234.5), "1234.5");
        assert_eq!(f(1e300), "1e300");
        assert_eq!(f(f64::NAN), "NaN");
        assert_eq!(f(f64::NEG_INFINITY), "-Inf");
    }

    #[test]
    fn untyped_is_unknown_in_openmetrics() {
        let d = Desc::untyped("node_vmstat_pgfault", "x");
        assert!(
            render(Format::OpenMetrics, |e| e.family(&d))
                .contains("# TYPE node_vmstat_pgfault unknown\n")
        );
        assert!(
            render(Format::PrometheusText, |e| e.family(&d))
                .contains("# TYPE node_vmstat_pgfault untyped\n")
        );
    }
}

/// Formats an unsigned integer label value (a CPU id, a node number) into a
/// caller-provided stack buffer, so no String is allocated per sample.
pub fn u64_label(n: u64, buf: &mut [u8; 20]) -> &str {
    // Only ASCII digits were written.
    std::str::from_utf8(u64_digits(n, buf)).unwrap_or("0")
}

/// Writes the decimal digits of `n` at the end of `buf` and returns them.
/// Sample values use the bytes directly: checking them as UTF-8 for a
/// `&str` cost as much as producing them.
fn u64_digits(n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    let mut n = n;
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

#[cfg(test)]
mod value_tests {
    use super::*;

    fn v(x: Value) -> String {
        let mut b = Vec::new();
        write_value(&mut b, x);
        String::from_utf8(b).unwrap()
    }

    #[test]
    fn integers_and_integral_floats() {
        assert_eq!(v(Value::U64(0)), "0");
        assert_eq!(v(Value::U64(u64::MAX)), "18446744073709551615");
        assert_eq!(v(Value::I64(-1)), "-1");
        assert_eq!(v(Value::I64(i64::MIN)), "-9223372036854775808");
        assert_eq!(v(Value::F64(25276502016.0)), "25276502016");
        assert_eq!(v(Value::F64(-3.0)), "-3");
        assert_eq!(v(Value::F64(-0.0)), "0");
        assert_eq!(v(Value::F64(362.21)), "362.21");
        assert_eq!(v(Value::F64(1e300)), "1e300");
        assert_eq!(v(Value::F64(9007199254740992.0)), "9007199254740992");
        assert_eq!(v(Value::F64(f64::NAN)), "NaN");
        assert_eq!(v(Value::F64(f64::INFINITY)), "+Inf");
    }
}

#[cfg(test)]
mod label_tests {
    #[test]
    fn u64_label() {
        let mut b = [0u8; 20];
        assert_eq!(super::u64_label(0, &mut b), "0");
        assert_eq!(super::u64_label(255, &mut b), "255");
        assert_eq!(super::u64_label(u64::MAX, &mut b), "18446744073709551615");
    }
}
