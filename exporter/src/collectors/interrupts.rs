//! /proc/interrupts → `node_interrupts_total{cpu,devices,info,type}`, built
//! as node_exporter's interrupts_linux.go builds it:
//! - `type` is the row name left of the first `:` (`24`, `NMI`, `RES`);
//! - for a numbered IRQ, `info` is the first word after the counts (the
//!   chip, `IO-APIC`) and `devices` the remaining words (`5-edge ACPI:Ged`);
//! - for a named row, `info` is the whole description and `devices` is empty;
//! - words are joined with single spaces; zero counts are kept
//!   (node_exporter's `--collector.interrupts.include-zeros` default);
//! - rows with fewer counts than CPUs (x86's ERR and MIS, one system-wide
//!   number) are skipped.
//!
//! One difference: `cpu` is the id from the header (`CPU3` → `3`), where
//! node_exporter uses the column position. The two agree unless CPUs are
//! offline; then the header id is the one that matches node_cpu_seconds_total.
//!
//! Off by default, as in node_exporter: one series per CPU per IRQ line.
//! It is the source for the rescheduling (RES) and function-call (CAL) IPI
//! rates that show context-switch storms and RPS costs (docs/signals.md).

use std::ops::Range;

use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError, excerpt};
use crate::kernel::parse::{fields, is_blank, lines, parse_cpu_header, parse_fresh, u64_field};
use crate::kernel::source::{Read, SourceFile};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder, u64_label};

pub const SPEC: Spec = Spec {
    name: "interrupts",
    default_enabled: false,
    help: "Interrupt counts per CPU and line from /proc/interrupts (high cardinality)",
    flags: &[],
    build,
    sources: &[Source::proc("interrupts", "interrupts")],
    parsers: &[Parser::numeric("interrupts", check)],
};

/// The registry's entry point: parses, then builds every row's labels as
/// the collector does.
fn check(text: &str) -> Result<(), ParseError> {
    let parsed = parse_fresh(text, parse_into)?;
    let mut buf = String::new();
    for row in parsed.rows(text) {
        std::hint::black_box(normalize(row.info, &mut buf));
        std::hint::black_box(normalize(row.devices, &mut buf));
        std::hint::black_box((row.name, row.counts));
    }
    Ok(())
}

const INTERRUPTS: Desc = Desc::counter("node_interrupts_total", "Interrupt details.");

/// Byte ranges of one row's labels within the parsed text. Ranges rather
/// than `&str` so the parsed form owns no borrow and its Vecs can be kept
/// in the collector and reused on every scrape.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Spans {
    name: Range<usize>,
    info: Range<usize>,
    devices: Range<usize>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Interrupts {
    /// CPU ids from the header, in column order.
    pub cpus: Vec<u32>,
    rows: Vec<Spans>,
    /// Per-CPU counts of each row, `cpus.len()` per row, row-major.
    counts: Vec<u64>,
}

/// One exported row. `info` and `devices` are raw text and may hold runs
/// of spaces; [`normalize`] gives the label value.
#[derive(Debug, PartialEq, Eq)]
pub struct Row<'a> {
    pub name: &'a str,
    pub info: &'a str,
    pub devices: &'a str,
    pub counts: &'a [u64],
}

impl Interrupts {
    /// The exported rows; `text` must be the string this was parsed from.
    pub fn rows<'a>(&'a self, text: &'a str) -> impl Iterator<Item = Row<'a>> {
        let at = |r: &Range<usize>| text.get(r.clone()).unwrap_or("");
        self.rows
            .iter()
            .zip(self.counts.chunks_exact(self.cpus.len().max(1)))
            .map(move |(s, counts)| Row {
                name: at(&s.name),
                info: at(&s.info),
                devices: at(&s.devices),
                counts,
            })
    }
}

/// Parses /proc/interrupts into `out`, reusing its Vecs. On error `out`
/// holds partial data.
///
/// Beyond node_exporter's rules, input that cannot come from the kernel is
/// rejected, so corruption shows as a failed scrape rather than odd series:
/// a line without `:`, an empty name, a non-number among the first
/// per-CPU columns, a short row holding anything but numbers (a numbered
/// IRQ cut short), numbered IRQs out of order, a named row twice.
pub fn parse_into(s: &str, out: &mut Interrupts) -> Result<(), ParseError> {
    out.rows.clear();
    out.counts.clear();
    let mut lines = lines(s);
    let header = lines
        .next()
        .ok_or_else(|| ParseError::new(1, "empty file"))?;
    parse_cpu_header(header, 1, &mut out.cpus)?;
    let mut order = Order::default();
    for (i, line) in lines.enumerate() {
        let n = i + 2;
        if is_blank(line) {
            continue;
        }
        let Some(spans) = parse_row(s, line, n, out)? else {
            continue;
        };
        order.check(s, &spans.name, &out.rows, n)?;
        out.rows.push(spans);
    }
    Ok(())
}

/// Guards against a row that would repeat a series: numbered IRQs must
/// ascend (the kernel prints them in order) and a named row must not appear
/// twice. Named rows are few (NMI, LOC, ...) and follow the numbered ones,
/// so the duplicate search starts at the first of them.
#[derive(Default)]
struct Order {
    last_irq: Option<i64>,
    first_named: Option<usize>,
}

impl Order {
    fn check(
        &mut self,
        text: &str,
        name: &Range<usize>,
        rows: &[Spans],
        n: usize,
    ) -> Result<(), ParseError> {
        let at = |r: &Range<usize>| text.get(r.clone()).unwrap_or("");
        let this = at(name);
        if let Ok(irq) = this.parse::<i64>() {
            if self.last_irq.is_some_and(|last| irq <= last) {
                return Err(ParseError::new(
                    n,
                    format!("IRQ {irq} out of order: numbered IRQs must ascend"),
                ));
            }
            self.last_irq = Some(irq);
            return Ok(());
        }
        let named = rows
            .get(self.first_named.unwrap_or(rows.len())..)
            .unwrap_or(&[]);
        if named.iter().any(|r| at(&r.name) == this) {
            return Err(ParseError::new(
                n,
                format!("duplicate row {}", excerpt(this)),
            ));
        }
        self.first_named.get_or_insert(rows.len());
        Ok(())
    }
}

/// Parses one row, appending its counts to `out.counts`. `Ok(None)` for a
/// row node_exporter skips.
fn parse_row(
    text: &str,
    line: &str,
    n: usize,
    out: &mut Interrupts,
) -> Result<Option<Spans>, ParseError> {
    // Split at the colon first: on arm64 a long name can touch the first
    // count with no space between them.
    let (label, rest) = line.split_once(':').ok_or_else(|| {
        ParseError::new(
            n,
            format!("expected `NAME: counts`, found {}", excerpt(line)),
        )
    })?;
    let name = label.trim_start_matches(' ');
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err(ParseError::new(
            n,
            format!("invalid interrupt name {name:?}"),
        ));
    }
    let start = out.counts.len();
    let mut words = fields(rest);
    for tok in words.by_ref().take(out.cpus.len()) {
        out.counts.push(u64_field(tok, n, name)?);
    }
    // node_exporter keeps a row only if it has a word beyond one count per
    // CPU. A shorter row whose words all parsed as counts is ERR/MIS-shaped;
    // one with a non-number among them has already failed above.
    let Some(first_word) = words.next() else {
        out.counts.truncate(start);
        return Ok(None);
    };
    let desc = rest
        .get(offset(rest, first_word)..)
        .unwrap_or("")
        .trim_end();
    let (info, devices) = if name.parse::<i64>().is_ok() {
        match desc.split_once(char::is_whitespace) {
            Some((chip, tail)) => (chip, tail.trim_start()),
            None => (desc, empty_end(desc)),
        }
    } else {
        (desc, empty_end(desc))
    };
    Ok(Some(Spans {
        name: span(text, name),
        info: span(text, info),
        devices: span(text, devices),
    }))
}

/// The empty subslice at the end of `s`: an empty label that still has a
/// position inside the parsed text.
fn empty_end(s: &str) -> &str {
    s.get(s.len()..).unwrap_or_default()
}

/// Where `sub`, a subslice of `text`, starts in it. Wrapping arithmetic, so
/// a misuse yields a range that `Interrupts::rows` resolves to "" rather
/// than a panic.
fn offset(text: &str, sub: &str) -> usize {
    (sub.as_ptr() as usize).wrapping_sub(text.as_ptr() as usize)
}

fn span(text: &str, sub: &str) -> Range<usize> {
    let start = offset(text, sub);
    start..start.wrapping_add(sub.len())
}

/// The words of `raw` joined by single spaces, as node_exporter's
/// `strings.Join(fields, " ")`. Borrows `raw` when it already is, which is
/// the common case; otherwise builds the value in the caller's reused buffer.
pub fn normalize<'b>(raw: &'b str, buf: &'b mut String) -> &'b str {
    let clean = !raw.contains(|c: char| c.is_whitespace() && c != ' ') && !raw.contains("  ");
    if clean {
        return raw;
    }
    buf.clear();
    for (i, w) in fields(raw).enumerate() {
        if i > 0 {
            buf.push(' ');
        }
        buf.push_str(w);
    }
    buf
}

pub struct InterruptsCollector {
    file: SourceFile,
    parsed: Interrupts,
    info_buf: String,
    devices_buf: String,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(InterruptsCollector {
        file: SourceFile::new(&s.procfs, "interrupts"),
        parsed: Interrupts::default(),
        info_buf: String::new(),
        devices_buf: String::new(),
    })
}

impl Collector for InterruptsCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let text = match self.file.read()? {
            Read::Text(t) => t,
            Read::Absent => return Ok(()),
        };
        if let Err(e) = parse_into(text, &mut self.parsed) {
            return Err(self.file.parse_error(e));
        }
        let mut b = [0u8; 20];
        enc.family(&INTERRUPTS);
        for row in self.parsed.rows(text) {
            let info = normalize(row.info, &mut self.info_buf);
            let devices = normalize(row.devices, &mut self.devices_buf);
            for (&cpu, &c) in self.parsed.cpus.iter().zip(row.counts) {
                let cpu = u64_label(u64::from(cpu), &mut b);
                let labels = [
                    ("cpu", cpu),
                    ("devices", devices),
                    ("info", info),
                    ("type", row.name),
                ];
                enc.sample(&INTERRUPTS, &labels, c);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scrape::exposition::Format;
    use std::path::Path;

    const FIXTURE: &str = include_str!("../../tests/fixtures/proc/interrupts");
    const LARGE: &str = include_str!("../../tests/fixtures/large/interrupts");

    fn parse(s: &str) -> Result<Interrupts, ParseError> {
        parse_fresh(s, parse_into)
    }

    fn rows(s: &str) -> Vec<(String, String, String, Vec<u64>)> {
        let p = parse(s).unwrap();
        let (mut a, mut b) = (String::new(), String::new());
        p.rows(s)
            .map(|r| {
                (
                    r.name.to_string(),
                    normalize(r.info, &mut a).to_string(),
                    normalize(r.devices, &mut b).to_string(),
                    r.counts.to_vec(),
                )
            })
            .collect()
    }

    fn row(
        name: &str,
        info: &str,
        devices: &str,
        counts: &[u64],
    ) -> (String, String, String, Vec<u64>) {
        (name.into(), info.into(), devices.into(), counts.to_vec())
    }

    #[test]
    fn parses_captured_fixture() {
        let p = parse(FIXTURE).unwrap();
        assert_eq!(p.cpus, [0, 1]);
        let r = rows(FIXTURE);
        // 19 numbered IRQs and 14 named rows: ERR and MIS are skipped.
        assert_eq!(r.len(), 19 + 14);
        assert_eq!(r[0], row("24", "IO-APIC", "5-edge ACPI:Ged", &[1, 0]));
        assert!(r.contains(&row(
            "36",
            "PCI-MSIX-0000:00:02.0",
            "1-edge virtio1-req.0",
            &[0, 65213]
        )));
        assert!(r.contains(&row("NMI", "Non-maskable interrupts", "", &[0, 0])));
        assert!(r.contains(&row("RES", "Rescheduling interrupts", "", &[6924, 5576])));
        assert!(!r.iter().any(|x| x.0 == "ERR" || x.0 == "MIS"));
    }

    #[test]
    fn parses_large_host() {
        let p = parse(LARGE).unwrap();
        assert_eq!(p.cpus.len(), 256);
        assert!(p.rows(LARGE).all(|r| r.counts.len() == 256));
        assert!(p.rows(LARGE).any(|r| r.name == "CAL"));
    }

    #[test]
    fn arm64_names_touching_counts_and_header_gaps() {
        let s = "           CPU0       CPU2\nIPI0:1 2       Rescheduling interrupts\n 11:  7  8  GICv3  27 Level     arch_timer\nErr:     0\n";
        assert_eq!(parse(s).unwrap().cpus, [0, 2]);
        assert_eq!(
            rows(s),
            [
                row("IPI0", "Rescheduling interrupts", "", &[1, 2]),
                row("11", "GICv3", "27 Level arch_timer", &[7, 8]),
            ]
        );
    }

    #[test]
    fn numbered_irq_without_devices() {
        assert_eq!(rows("CPU0\n 5: 3 XT-PIC\n"), [row("5", "XT-PIC", "", &[3])]);
    }

    #[test]
    fn malformed() {
        let err = |s: &str| parse(s).unwrap_err();
        assert_eq!(err("").line, 1);
        assert!(err("CPU0 CPU1 7\n").msg.contains("header"));
        assert!(err("CPU1 CPU0\n").msg.contains("ascend"));
        let missing = err("CPU0 CPU1\n 24: 1 IO-APIC 5-edge ACPI:Ged\n");
        assert_eq!(missing.line, 2);
        assert!(missing.msg.contains("IO-APIC"), "{}", missing.msg);
        let cut = err("CPU0 CPU1 CPU2\n 24: 1 IO-APIC\n");
        assert!(cut.msg.contains("IO-APIC"), "{}", cut.msg);
        let overflow = err("CPU0\n 1: 18446744073709551616 IO-APIC 1-edge x\n");
        assert_eq!(overflow.line, 2);
        assert!(overflow.msg.contains("invalid unsigned integer"));
        assert!(err("CPU0\nno colon here\n").msg.contains("NAME: counts"));
        assert!(err("CPU0\n: 1 x\n").msg.contains("invalid interrupt name"));
        assert!(err("CPU0\n 2: 1 x\n 1: 1 x\n").msg.contains("ascend"));
        assert!(err("CPU0\nNMI: 1 x\nNMI: 2 x\n").msg.contains("duplicate"));
        assert!(err("CPU0 CPU1\nERR: x\n").msg.contains("ERR"));
        assert_eq!(
            err("\x01garbage here\n%%% not a kernel file %%%\n:::\n").line,
            1
        );
        // A short all-number row is ERR/MIS-shaped and skipped, not an error.
        assert_eq!(rows("CPU0 CPU1\nERR: 0\nMIS: 0 0\n"), []);
        // Extra columns on a named row only lengthen its description.
        assert_eq!(
            rows("CPU0\nLOC: 5 Local timer interrupts 7\n"),
            [row("LOC", "Local timer interrupts 7", "", &[5])]
        );
    }

    #[test]
    fn normalize_joins_words() {
        let mut b = String::new();
        assert_eq!(normalize("5-edge      ACPI:Ged", &mut b), "5-edge ACPI:Ged");
        assert_eq!(normalize("a\tb", &mut b), "a b");
        assert_eq!(normalize("plain words", &mut b), "plain words");
        assert_eq!(normalize("", &mut b), "");
    }

    fn collect(procfs: &Path) -> String {
        let mut c = build(&Settings::with_roots(procfs, "/nonexistent"));
        let mut buf = Vec::new();
        let mut enc = Encoder::new(&mut buf, Format::PrometheusText);
        c.collect(&mut enc).unwrap();
        // A second scrape reuses the buffers and must give the same output.
        let first = String::from_utf8(buf.clone()).unwrap();
        buf.clear();
        let mut enc = Encoder::new(&mut buf, Format::PrometheusText);
        c.collect(&mut enc).unwrap();
        assert_eq!(first, String::from_utf8(buf).unwrap());
        first
    }

    #[test]
    fn collector_on_captured_fixture() {
        let out = collect(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proc"));
        for line in [
            "# HELP node_interrupts_total Interrupt details.",
            "# TYPE node_interrupts_total counter",
            "node_interrupts_total{cpu=\"0\",devices=\"5-edge ACPI:Ged\",info=\"IO-APIC\",type=\"24\"} 1",
            "node_interrupts_total{cpu=\"1\",devices=\"1-edge virtio1-req.0\",info=\"PCI-MSIX-0000:00:02.0\",type=\"36\"} 65213",
            "node_interrupts_total{cpu=\"0\",devices=\"\",info=\"Rescheduling interrupts\",type=\"RES\"} 6924",
            "node_interrupts_total{cpu=\"1\",devices=\"\",info=\"Function call interrupts\",type=\"CAL\"} 33354",
        ] {
            assert!(out.lines().any(|l| l == line), "missing {line:?} in\n{out}");
        }
        assert_eq!(
            out.lines()
                .filter(|l| l.starts_with("node_interrupts_total{"))
                .count(),
            33 * 2
        );
    }

    #[test]
    fn collector_absent_file_emits_nothing() {
        assert_eq!(collect(Path::new("/nonexistent-usescope")), "");
    }
}
