//! /proc/softirqs → `node_softirqs_functions_total{cpu,type}` (node_exporter's
//! softirqs collector) and `node_softirqs_total{vector}`.
//!
//! node_exporter reads the per-vector totals from /proc/stat's `softirq`
//! line (behind `--collector.stat.softirq`). The kernel builds that line by
//! summing the same per-CPU counters /proc/softirqs prints, over the same
//! possible CPUs, so summing them here gives the same numbers from one file,
//! and without /proc/stat's 32-bit per-vector sums, which wrap.
//!
//! Per-CPU rates of NET_RX and TIMER are what show a softirq storm pinned to
//! one CPU (docs/signals.md: SYN flood, RPS), which the totals hide.

use crate::collectors::single_file;
use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::{ParseError, excerpt};
use crate::kernel::parse::{fields, is_blank, lines, parse_cpu_header, parse_fresh, u64_field};
use crate::kernel::source::SourceFile;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder, u64_label};

pub const SPEC: Spec = Spec {
    name: "softirqs",
    default_enabled: true,
    help: "Softirq counts per CPU and type from /proc/softirqs",
    flags: &[],
    build,
    sources: &[Source::proc("softirqs", "softirqs")],
    parsers: &[Parser::numeric("softirqs", |t| {
        for row in parse_fresh(t, parse_into)?.rows() {
            std::hint::black_box(row);
        }
        Ok(())
    })],
};

const FUNCTIONS: Desc = Desc::counter("node_softirqs_functions_total", "Softirq counts per CPU.");
const TOTAL: Desc = Desc::counter("node_softirqs_total", "Number of softirq calls.");

/// One softirq as the kernel names it in /proc/softirqs, with the label
/// values node_exporter uses for it.
#[derive(Debug, PartialEq, Eq)]
pub struct Vector {
    /// Row name in /proc/softirqs.
    pub kernel: &'static str,
    /// `type` label of `node_softirqs_functions_total`.
    pub kind: &'static str,
    /// `vector` label of `node_softirqs_total` (procfs's /proc/stat names).
    pub vector: &'static str,
}

const fn v(kernel: &'static str, kind: &'static str, vector: &'static str) -> Vector {
    Vector {
        kernel,
        kind,
        vector,
    }
}

/// The softirqs node_exporter knows, in the kernel's enum order. Rows with
/// other names are validated but not exported, as procfs skips them.
pub const VECTORS: [Vector; 11] = [
    v("HI", "HI", "hi"),
    v("TIMER", "TIMER", "timer"),
    v("NET_TX", "NET_TX", "net_tx"),
    v("NET_RX", "NET_RX", "net_rx"),
    v("BLOCK", "BLOCK", "block"),
    v("IRQ_POLL", "IRQ_POLL", "block_iopoll"),
    // The same softirq before Linux 4.5 renamed it; node_exporter drops the
    // row there, usescope keeps dashboards working by using the new name.
    v("BLOCK_IOPOLL", "IRQ_POLL", "block_iopoll"),
    v("TASKLET", "TASKLET", "tasklet"),
    v("SCHED", "SCHED", "sched"),
    v("HRTIMER", "HRTIMER", "hrtimer"),
    v("RCU", "RCU", "rcu"),
];

/// One known softirq row: which vector, and its sum over all CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    pub vector: &'static Vector,
    pub total: u64,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Softirqs {
    /// CPU ids from the header, in column order.
    pub cpus: Vec<u32>,
    /// Known rows in file order.
    pub rows: Vec<Row>,
    /// Per-CPU counts of each row, `cpus.len()` per row, row-major.
    counts: Vec<u64>,
}

impl Softirqs {
    /// Each known row with its per-CPU counts, aligned with [`Softirqs::cpus`].
    pub fn rows(&self) -> impl Iterator<Item = (&Row, &[u64])> {
        self.rows
            .iter()
            .zip(self.counts.chunks_exact(self.cpus.len().max(1)))
    }
}

/// Parses /proc/softirqs into `out`, reusing its Vecs. Every row must have
/// exactly one count per header CPU. On error `out` holds partial data.
pub fn parse_into(s: &str, out: &mut Softirqs) -> Result<(), ParseError> {
    out.rows.clear();
    out.counts.clear();
    let mut lines = lines(s);
    let header = lines
        .next()
        .ok_or_else(|| ParseError::new(1, "empty file"))?;
    parse_cpu_header(header, 1, &mut out.cpus)?;
    for (i, line) in lines.enumerate() {
        let n = i + 2;
        if is_blank(line) {
            continue;
        }
        parse_row(line, n, out)?;
    }
    Ok(())
}

fn parse_row(line: &str, n: usize, out: &mut Softirqs) -> Result<(), ParseError> {
    let (name, values) = line.split_once(':').ok_or_else(|| {
        ParseError::new(
            n,
            format!("expected `NAME: counts`, found {}", excerpt(line)),
        )
    })?;
    let name = name.trim();
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err(ParseError::new(n, format!("invalid softirq name {name:?}")));
    }
    let start = out.counts.len();
    let mut total = 0u64;
    for tok in fields(values) {
        let c = u64_field(tok, n, name)?;
        total = total
            .checked_add(c)
            .ok_or_else(|| ParseError::new(n, format!("{name}: sum over CPUs overflows u64")))?;
        out.counts.push(c);
    }
    let found = out.counts.len() - start;
    if found != out.cpus.len() {
        return Err(ParseError::new(
            n,
            format!(
                "{name}: {found} counts for {} CPUs in the header",
                out.cpus.len()
            ),
        ));
    }
    let Some(vector) = VECTORS.iter().find(|v| v.kernel == name) else {
        out.counts.truncate(start);
        return Ok(());
    };
    if out.rows.iter().any(|r| r.vector.vector == vector.vector) {
        return Err(ParseError::new(n, format!("duplicate softirq row {name}")));
    }
    out.rows.push(Row { vector, total });
    Ok(())
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    single_file::boxed(SourceFile::new(&s.procfs, "softirqs"), parse_into, write)
}

/// The families of one read of the file.
fn write(parsed: &Softirqs, enc: &mut Encoder) {
    let mut b = [0u8; 20];
    enc.family(&FUNCTIONS);
    for (row, counts) in parsed.rows() {
        for (&cpu, &c) in parsed.cpus.iter().zip(counts) {
            let cpu = u64_label(u64::from(cpu), &mut b);
            enc.sample(&FUNCTIONS, &[("cpu", cpu), ("type", row.vector.kind)], c);
        }
    }
    enc.family(&TOTAL);
    for row in &parsed.rows {
        enc.sample(&TOTAL, &[("vector", row.vector.vector)], row.total);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scrape::exposition::Format;
    use std::path::Path;

    const FIXTURE: &str = include_str!("../../tests/fixtures/proc/softirqs");

    fn parse(s: &str) -> Result<Softirqs, ParseError> {
        parse_fresh(s, parse_into)
    }
    const FIXTURE_STAT: &str = include_str!("../../tests/fixtures/proc/stat");
    const LARGE: &str = include_str!("../../tests/fixtures/large/softirqs");

    fn totals(s: &Softirqs) -> Vec<(&'static str, u64)> {
        s.rows.iter().map(|r| (r.vector.vector, r.total)).collect()
    }

    /// /proc/stat's `softirq` line: total, then one sum per vector in the
    /// kernel's enum order, which procfs names hi, timer, ... rcu.
    fn stat_softirq_line(stat: &str) -> Vec<u64> {
        let line = stat.lines().find(|l| l.starts_with("softirq ")).unwrap();
        line.split_ascii_whitespace()
            .skip(2)
            .map(|t| t.parse().unwrap())
            .collect()
    }

    const PROCFS_ORDER: [&str; 10] = [
        "hi",
        "timer",
        "net_tx",
        "net_rx",
        "block",
        "block_iopoll",
        "tasklet",
        "sched",
        "hrtimer",
        "rcu",
    ];

    /// Both files' counters only grow; `later` was read after `earlier`.
    /// The kernel sums /proc/stat's vectors in 32 bits, so compare mod 2^32.
    fn assert_sums_match(later: &Softirqs, earlier: &[u64], slack: u32) {
        let ours = totals(later);
        for (name, &theirs) in PROCFS_ORDER.iter().zip(earlier) {
            let (_, mine) = ours.iter().find(|(v, _)| v == name).unwrap();
            assert!(
                (*mine as u32).wrapping_sub(theirs as u32) <= slack,
                "{name}: /proc/softirqs sums to {mine}, /proc/stat says {theirs}"
            );
        }
    }

    #[test]
    fn parses_captured_fixture() {
        let s = parse(FIXTURE).unwrap();
        assert_eq!(s.cpus, [0, 1]);
        let net_rx = s.rows().find(|(r, _)| r.vector.kind == "NET_RX").unwrap();
        assert_eq!(net_rx.1, [1878, 2854]);
        assert_eq!(net_rx.0.total, 4732);
        assert_eq!(
            totals(&s),
            [
                ("hi", 0),
                ("timer", 10818),
                ("net_tx", 4),
                ("net_rx", 4732),
                ("block", 65213),
                ("block_iopoll", 0),
                ("tasklet", 95),
                ("sched", 21546),
                ("hrtimer", 0),
                ("rcu", 24501),
            ]
        );
    }

    /// The captured /proc/stat was read a moment before /proc/softirqs:
    /// the sums agree with its `softirq` line up to the few softirqs that
    /// ran in between, which checks the vector-name mapping.
    #[test]
    fn sums_match_proc_stat_softirq_line_in_fixture() {
        assert_sums_match(
            &parse(FIXTURE).unwrap(),
            &stat_softirq_line(FIXTURE_STAT),
            5,
        );
    }

    #[test]
    fn sums_match_proc_stat_softirq_line_on_this_machine() {
        let stat = std::fs::read_to_string("/proc/stat").unwrap();
        let softirqs = std::fs::read_to_string("/proc/softirqs").unwrap();
        assert_sums_match(
            &parse(&softirqs).unwrap(),
            &stat_softirq_line(&stat),
            10_000,
        );
    }

    #[test]
    fn parses_large_host() {
        let s = parse(LARGE).unwrap();
        assert_eq!(s.cpus.len(), 256);
        assert_eq!(s.rows().count(), 10);
        assert!(s.rows().all(|(_, c)| c.len() == 256));
    }

    #[test]
    fn header_ids_label_cpus_with_gaps() {
        let s = parse("  CPU0 CPU2 CPU5\n  HI: 1 2 3\nTIMER:4 5 6\n").unwrap();
        assert_eq!(s.cpus, [0, 2, 5]);
        assert_eq!(totals(&s), [("hi", 6), ("timer", 15)]);
    }

    #[test]
    fn unknown_rows_are_skipped_and_old_name_maps() {
        let s = parse("CPU0 CPU1\nNEW_ONE: 1 2\nBLOCK_IOPOLL: 3 4\n").unwrap();
        assert_eq!(s.rows.len(), 1);
        assert_eq!(s.rows[0].vector.kind, "IRQ_POLL");
        assert_eq!(s.rows().next().unwrap().1, [3, 4]);
        assert!(parse("CPU0\nNEW_ONE: x\n").is_err());
    }

    #[test]
    fn malformed() {
        let err = |s: &str| parse(s).unwrap_err();
        assert_eq!(err("").line, 1);
        assert_eq!(err("\n").line, 1);
        assert!(err("CPU0 CPU1 7\n").msg.contains("\"7\""));
        assert!(err("CPU1 CPU0\n").msg.contains("ascend"));
        assert!(err("CPU0 CPU0\n").msg.contains("ascend"));
        assert!(err("CPU99999\n").msg.contains("maximum"));
        let missing = err("CPU0 CPU1\nHI: 1 2\nTIMER: 1\n");
        assert_eq!(missing.line, 3);
        assert!(
            missing.msg.contains("1 counts for 2 CPUs"),
            "{}",
            missing.msg
        );
        let extra = err("CPU0 CPU1\nHI: 1 2 3\n");
        assert_eq!(extra.line, 2);
        assert!(extra.msg.contains("3 counts for 2 CPUs"));
        let overflow = err("CPU0\nHI: 18446744073709551616\n");
        assert_eq!(overflow.line, 2);
        assert!(overflow.msg.contains("HI"));
        assert!(
            err("CPU0 CPU1\nHI: 18446744073709551615 1\n")
                .msg
                .contains("overflows")
        );
        assert!(err("CPU0\nHI 1\n").msg.contains("NAME: counts"));
        assert!(err("CPU0\n: 1\n").msg.contains("invalid softirq name"));
        assert!(err("CPU0\nHI: 1\nHI: 2\n").msg.contains("duplicate"));
        assert!(err("CPU0\nHI: -1\n").msg.contains("HI"));
        assert_eq!(
            err("\x01garbage here\n%%% not a kernel file %%%\n:::\n").line,
            1
        );
        let half = &FIXTURE[..FIXTURE.len() / 2];
        assert!(parse(half).is_err(), "a row cut short must not parse");
    }

    fn collect(procfs: &Path) -> String {
        let mut c = build(&Settings::with_roots(procfs, "/nonexistent"));
        let mut buf = Vec::new();
        let mut enc = Encoder::new(&mut buf, Format::PrometheusText);
        c.collect(&mut enc).unwrap();
        String::from_utf8(buf).unwrap()
    }

    #[test]
    fn collector_on_captured_fixture() {
        let out = collect(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proc"));
        for line in [
            "# HELP node_softirqs_functions_total Softirq counts per CPU.",
            "# TYPE node_softirqs_functions_total counter",
            "node_softirqs_functions_total{cpu=\"0\",type=\"NET_RX\"} 1878",
            "node_softirqs_functions_total{cpu=\"1\",type=\"BLOCK\"} 65213",
            "node_softirqs_functions_total{cpu=\"1\",type=\"IRQ_POLL\"} 0",
            "# HELP node_softirqs_total Number of softirq calls.",
            "# TYPE node_softirqs_total counter",
            "node_softirqs_total{vector=\"net_rx\"} 4732",
            "node_softirqs_total{vector=\"block_iopoll\"} 0",
            "node_softirqs_total{vector=\"rcu\"} 24501",
        ] {
            assert!(out.lines().any(|l| l == line), "missing {line:?} in\n{out}");
        }
        let count = |p: &str| out.lines().filter(|l| l.starts_with(p)).count();
        assert_eq!(count("node_softirqs_functions_total{"), 20);
        assert_eq!(count("node_softirqs_total{"), 10);
    }

    #[test]
    fn collector_absent_file_emits_nothing() {
        assert_eq!(collect(Path::new("/nonexistent-usescope")), "");
    }
}
