//! /proc/schedstat → `node_schedstat_running_seconds_total{cpu}`,
//! `node_schedstat_waiting_seconds_total{cpu}` and
//! `node_schedstat_timeslices_total{cpu}`, as node_exporter's schedstat
//! collector (through procfs) reads them.
//!
//! The waiting time is run-queue latency summed over all tasks: its rate
//! per CPU is the CPU-saturation signal of the USE method, the cheap
//! counterpart of the runqlat probe's histogram.
//!
//! The file exists only on kernels built with CONFIG_SCHEDSTATS; where it
//! is absent the collector emits nothing and still succeeds.

use crate::collectors::single_file;
use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::{ParseError, excerpt};
use crate::kernel::parse::{cpu_id, fields, lines, next_field, parse_fresh, u64_field};
use crate::kernel::source::SourceFile;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder, Value, u64_label};

pub const SPEC: Spec = Spec {
    name: "schedstat",
    default_enabled: true,
    help: "Per-CPU scheduler statistics from /proc/schedstat",
    flags: &[],
    build,
    sources: &[Source::proc("schedstat", "schedstat")],
    parsers: &[Parser::numeric("schedstat", |t| {
        parse_fresh(t, parse_into).map(drop)
    })],
};

const RUNNING: Desc = Desc::counter(
    "node_schedstat_running_seconds_total",
    "Number of seconds CPU spent running a process.",
);
const WAITING: Desc = Desc::counter(
    "node_schedstat_waiting_seconds_total",
    "Number of seconds spent by processing waiting for this CPU.",
);
const TIMESLICES: Desc = Desc::counter(
    "node_schedstat_timeslices_total",
    "Number of timeslices executed by CPU.",
);

/// Version 15 (Linux 2.6.25) introduced today's `cpuN` line of nine
/// fields; versions 16 and 17 changed only the `domain` lines.
pub const MIN_VERSION: u64 = 15;

/// The nine fields of a `cpuN` line, in kernel order; the exporter uses the
/// last three.
const CPU_FIELDS: [&str; 9] = [
    "yld_count",
    "legacy",
    "sched_count",
    "sched_goidle",
    "ttwu_count",
    "ttwu_local",
    "rq_cpu_time",
    "run_delay",
    "pcount",
];

const NS_PER_SECOND: f64 = 1e9;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedCpu {
    pub cpu: u32,
    /// Time spent running tasks (rq_cpu_time), nanoseconds.
    pub running_ns: u64,
    /// Time tasks waited on the run queue (run_delay), nanoseconds.
    pub waiting_ns: u64,
    /// Timeslices run (pcount).
    pub timeslices: u64,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Schedstat {
    pub version: u64,
    /// Per-CPU rows in file order (online CPUs, ascending ids).
    pub cpus: Vec<SchedCpu>,
}

/// Parses /proc/schedstat into `out`, reusing its Vec. On error `out` holds
/// partial data.
///
/// The first line must be `version N` with N ≥ [`MIN_VERSION`]. `cpuN`
/// lines need all nine fields; more are ignored, as procfs's regex does.
/// `domain` lines (a bitmask and dozens of counters per CPU and domain) and
/// unknown lines are skipped unparsed.
pub fn parse_into(s: &str, out: &mut Schedstat) -> Result<(), ParseError> {
    out.cpus.clear();
    let mut lines = lines(s);
    out.version = parse_version(lines.next().unwrap_or(""))?;
    for (i, line) in lines.enumerate() {
        let n = i + 2;
        let mut f = fields(line);
        let Some(id) = f.next().and_then(|k| k.strip_prefix("cpu")) else {
            continue;
        };
        let row = parse_cpu(id, f, n)?;
        if let Some(last) = out.cpus.last()
            && row.cpu <= last.cpu
        {
            return Err(ParseError::new(
                n,
                format!("cpu{} after cpu{}: CPU ids must ascend", row.cpu, last.cpu),
            ));
        }
        out.cpus.push(row);
    }
    Ok(())
}

fn parse_version(line: &str) -> Result<u64, ParseError> {
    let mut f = fields(line);
    if f.next() != Some("version") {
        return Err(ParseError::new(
            1,
            format!("expected `version N`, found {}", excerpt(line)),
        ));
    }
    let v = u64_field(next_field(&mut f, 1, "version")?, 1, "version")?;
    if v < MIN_VERSION {
        return Err(ParseError::new(
            1,
            format!("schedstat version {v} unsupported (need {MIN_VERSION} or later)"),
        ));
    }
    Ok(v)
}

fn parse_cpu<'a>(
    id: &str,
    mut f: impl Iterator<Item = &'a str>,
    n: usize,
) -> Result<SchedCpu, ParseError> {
    let id = cpu_id(id, n)?;
    let mut v = [0u64; 9];
    for (slot, name) in v.iter_mut().zip(CPU_FIELDS) {
        *slot = u64_field(next_field(&mut f, n, name)?, n, name)?;
    }
    let [.., running_ns, waiting_ns, timeslices] = v;
    Ok(SchedCpu {
        cpu: id,
        running_ns,
        waiting_ns,
        timeslices,
    })
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    single_file::boxed(SourceFile::new(&s.procfs, "schedstat"), parse_into, write)
}

/// The families of one read of the file.
fn write(parsed: &Schedstat, enc: &mut Encoder) {
    let cpus = &parsed.cpus;
    family(enc, &RUNNING, cpus, |c| seconds(c.running_ns));
    family(enc, &WAITING, cpus, |c| seconds(c.waiting_ns));
    family(enc, &TIMESLICES, cpus, |c| Value::U64(c.timeslices));
}

fn seconds(ns: u64) -> Value {
    Value::F64(ns as f64 / NS_PER_SECOND)
}

/// Writes one family with a sample per CPU.
fn family(enc: &mut Encoder, desc: &Desc, cpus: &[SchedCpu], value: impl Fn(&SchedCpu) -> Value) {
    let mut b = [0u8; 20];
    enc.family(desc);
    for c in cpus {
        let cpu = u64_label(u64::from(c.cpu), &mut b);
        enc.sample(desc, &[("cpu", cpu)], value(c));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scrape::exposition::Format;
    use std::path::Path;

    fn parse(s: &str) -> Result<Schedstat, ParseError> {
        parse_fresh(s, parse_into)
    }

    /// A version-15 file in the kernel's layout: two online CPUs (0 and 2,
    /// CPU 1 offline), each followed by its scheduling-domain lines.
    const V15: &str = "version 15
timestamp 4295000000
cpu0 0 0 123 45 678 90 1500000000 250000000 4242
domain0 00000005 10 9 1 0 0 0 0 9 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
domain1 00000005 3 3 0 0 0 0 0 3 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
cpu2 0 0 321 54 876 9 3000000001 5 7
domain0 00000005 10 9 1 0 0 0 0 9 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
";
    const LARGE: &str = include_str!("../../tests/fixtures/large/schedstat");

    #[test]
    fn parses_version_15() {
        let s = parse(V15).unwrap();
        assert_eq!(s.version, 15);
        assert_eq!(
            s.cpus,
            [
                SchedCpu {
                    cpu: 0,
                    running_ns: 1_500_000_000,
                    waiting_ns: 250_000_000,
                    timeslices: 4242
                },
                SchedCpu {
                    cpu: 2,
                    running_ns: 3_000_000_001,
                    waiting_ns: 5,
                    timeslices: 7
                },
            ]
        );
    }

    #[test]
    fn parses_large_host() {
        let s = parse(LARGE).unwrap();
        assert_eq!(s.cpus.len(), 256);
        assert_eq!(s.cpus[0].running_ns, 1177461534619);
        assert_eq!(s.cpus[0].waiting_ns, 797667025875);
        assert_eq!(s.cpus[0].timeslices, 96970146);
    }

    #[test]
    fn newer_versions_and_extra_fields() {
        let s = parse("version 17\ncpu0 1 2 3 4 5 6 7 8 9 10 11\n").unwrap();
        assert_eq!(
            (s.version, s.cpus[0].running_ns, s.cpus[0].timeslices),
            (17, 7, 9)
        );
    }

    #[test]
    fn malformed() {
        let err = |s: &str| parse(s).unwrap_err();
        assert_eq!(err("").line, 1);
        assert!(err("").msg.contains("version"));
        assert!(err("version 14\n").msg.contains("unsupported"));
        assert!(err("version\n").msg.contains("missing field version"));
        assert!(
            err("version 99999999999999999999\n")
                .msg
                .contains("version")
        );
        let short = err("version 15\ncpu0 1 2 3 4 5 6 7 8\n");
        assert_eq!(short.line, 2);
        assert!(short.msg.contains("pcount"), "{}", short.msg);
        let overflow = err("version 15\ncpu0 0 0 0 0 0 0 18446744073709551616 0 0\n");
        assert_eq!(overflow.line, 2);
        assert!(overflow.msg.contains("rq_cpu_time"));
        assert!(
            err("version 15\ncpuX 1 2 3 4 5 6 7 8 9\n")
                .msg
                .contains("cpu id")
        );
        assert!(
            err("version 15\ncpu1 1 2 3 4 5 6 7 8 9\ncpu1 1 2 3 4 5 6 7 8 9\n")
                .msg
                .contains("ascend")
        );
        assert!(
            err("version 15\ncpu99999 1 2 3 4 5 6 7 8 9\n")
                .msg
                .contains("maximum")
        );
        assert_eq!(
            err("\x01garbage here\n%%% not a kernel file %%%\n:::\n").line,
            1
        );
        let cut = &V15[..V15.find("cpu2").unwrap() + 12];
        assert!(parse(cut).is_err(), "a cpu line cut short must not parse");
    }

    fn collect(procfs: &Path) -> String {
        let mut c = build(&Settings::with_roots(procfs, "/nonexistent"));
        let mut buf = Vec::new();
        let mut enc = Encoder::new(&mut buf, Format::PrometheusText);
        c.collect(&mut enc).unwrap();
        String::from_utf8(buf).unwrap()
    }

    fn temp_tree() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn collector_on_synthetic_version_15() {
        let temp = temp_tree();
        let dir = temp.path();
        std::fs::write(dir.join("schedstat"), V15).unwrap();
        let out = collect(dir);
        for line in [
            "# HELP node_schedstat_running_seconds_total Number of seconds CPU spent running a process.",
            "# TYPE node_schedstat_running_seconds_total counter",
            "node_schedstat_running_seconds_total{cpu=\"0\"} 1.5",
            "node_schedstat_running_seconds_total{cpu=\"2\"} 3.000000001",
            "# HELP node_schedstat_waiting_seconds_total Number of seconds spent by processing waiting for this CPU.",
            "node_schedstat_waiting_seconds_total{cpu=\"0\"} 0.25",
            "node_schedstat_waiting_seconds_total{cpu=\"2\"} 5e-9",
            "# TYPE node_schedstat_timeslices_total counter",
            "node_schedstat_timeslices_total{cpu=\"0\"} 4242",
            "node_schedstat_timeslices_total{cpu=\"2\"} 7",
        ] {
            assert!(out.lines().any(|l| l == line), "missing {line:?} in\n{out}");
        }
        assert!(!out.contains("cpu=\"1\""));
    }

    /// This machine's kernel has no /proc/schedstat, like the captured tree.
    #[test]
    fn collector_on_captured_fixture_without_schedstat() {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proc");
        assert!(!fixture.join("schedstat").exists());
        assert_eq!(collect(&fixture), "");
    }
}
