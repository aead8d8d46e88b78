//! /proc/stat → node_exporter's `cpu` and `stat` collectors in one:
//! `node_cpu_seconds_total{cpu,mode}`, `node_cpu_guest_seconds_total{cpu,mode}`,
//! `node_intr_total`, `node_context_switches_total`, `node_forks_total`,
//! `node_boot_time_seconds`, `node_procs_running` and `node_procs_blocked`.
//!
//! The per-CPU counters go through the same clamp as node_exporter's
//! `updateCPUStats` (collector/cpu_linux.go): the kernel's idle and iowait
//! can step backwards (NO_HZ accounting, a CPU coming back from hotplug),
//! and a counter that goes backwards looks like a reset to `rate()`, which
//! then reports a huge spike. So the collector remembers each CPU's last
//! emitted values and never emits less, unless idle fell by 3 s or more, which
//! node_exporter takes as a hotplug reset and starts that CPU afresh.
//!
//! The `softirq` line is not exported here: the softirqs collector derives
//! `node_softirqs_total{vector}` from /proc/softirqs, which has the same
//! numbers without /proc/stat's 32-bit per-vector wrap.

use crate::collector::Collector;
use crate::collectors::{Parser, Settings, Source, Spec};
use crate::error::{CollectError, ParseError};
use crate::exposition::{Desc, Encoder, u64_label};
use crate::parse::{cpu_id, fields, lines, next_field, parse_fresh, u64_field};
use crate::source::SourceFile;

pub const SPEC: Spec = Spec {
    name: "stat",
    default_enabled: true,
    help: "CPU time per mode, interrupts, context switches, forks and procs from /proc/stat",
    flags: &[],
    build,
    sources: &[Source::proc("stat", "stat")],
    parsers: &[Parser::numeric("stat", check)],
};

/// The registry's entry point: parses, then runs the clamp the collector
/// runs, each CPU against itself and against the first.
fn check(text: &str) -> Result<(), ParseError> {
    let parsed = parse_fresh(text, parse_into)?;
    let first = parsed.cpus.first().map(|(_, t)| *t);
    for (_, ticks) in &parsed.cpus {
        std::hint::black_box(clamp(Some(ticks), ticks));
        std::hint::black_box(clamp(first.as_ref(), ticks));
    }
    Ok(())
}

const CPU: Desc = Desc::counter(
    "node_cpu_seconds_total",
    "Seconds the CPUs spent in each mode.",
);
const CPU_GUEST: Desc = Desc::counter(
    "node_cpu_guest_seconds_total",
    "Seconds the CPUs spent in guests (VMs) for each mode.",
);
const INTR: Desc = Desc::counter("node_intr_total", "Total number of interrupts serviced.");
const CTXT: Desc = Desc::counter(
    "node_context_switches_total",
    "Total number of context switches.",
);
const FORKS: Desc = Desc::counter("node_forks_total", "Total number of forks.");
const BTIME: Desc = Desc::gauge("node_boot_time_seconds", "Node boot time, in unixtime.");
const PROCS_RUNNING: Desc = Desc::gauge(
    "node_procs_running",
    "Number of processes in runnable state.",
);
const PROCS_BLOCKED: Desc = Desc::gauge(
    "node_procs_blocked",
    "Number of processes blocked waiting for I/O to complete.",
);

/// Clock ticks per second of the `cpu` lines. node_exporter (through
/// procfs) assumes 100, which is the kernel's fixed USER_HZ on every
/// architecture it exports to user space.
pub const USER_HZ: u64 = 100;

/// node_exporter's `jumpBackSeconds`: an idle counter that falls this far
/// means the CPU was replugged, not that accounting jittered.
const JUMP_BACK_TICKS: u64 = 3 * USER_HZ;

/// Columns of a `cpuN` line, in kernel order. Kernels before 2.6.11 lack
/// steal, before 2.6.24 guest, before 2.6.33 guest_nice: a missing column
/// reads as 0, as procfs's `Sscanf` leaves it.
pub const COLUMNS: [&str; 10] = [
    "user",
    "nice",
    "system",
    "idle",
    "iowait",
    "irq",
    "softirq",
    "steal",
    "guest",
    "guest_nice",
];
/// The first columns a line must have; anything shorter is not /proc/stat.
const MIN_COLUMNS: usize = 4;
const IDLE: usize = 3;
/// `node_cpu_seconds_total` covers the first eight columns; guest time is
/// already included in user and nice, so it gets its own family.
const MODES: usize = 8;
const GUEST: usize = 8;
const GUEST_NICE: usize = 9;

/// One CPU's counters in USER_HZ ticks, indexed like [`COLUMNS`].
pub type CpuTicks = [u64; 10];

#[derive(Debug, Default, Clone, PartialEq)]
pub struct Stat {
    /// Per-CPU rows in file order: the id from the `cpuN` label (offline
    /// CPUs leave gaps) and its ticks.
    pub cpus: Vec<(u32, CpuTicks)>,
    pub intr: u64,
    pub context_switches: u64,
    pub forks: u64,
    pub boot_time: u64,
    pub procs_running: u64,
    pub procs_blocked: u64,
}

/// Parses /proc/stat into `out`, reusing its CPU Vec. On error `out` holds
/// partial data and must not be used.
///
/// Every line the exporter needs must be present: they have been in every
/// kernel since 2.6, so a file without them is not /proc/stat. Unknown
/// lines are skipped for newer kernels. Only the first number of `intr` is
/// read: the per-IRQ columns that follow can run to thousands.
pub fn parse_into(s: &str, out: &mut Stat) -> Result<(), ParseError> {
    out.cpus.clear();
    let mut intr = None;
    let mut ctxt = None;
    let mut forks = None;
    let mut btime = None;
    let mut running = None;
    let mut blocked = None;
    let mut line_count = 0;
    for (i, line) in lines(s).enumerate() {
        let n = i + 1;
        line_count = n;
        let mut f = fields(line);
        let Some(key) = f.next() else { continue };
        let slot = match key {
            "cpu" => {
                // The all-CPU sum is not exported (PromQL can sum), but it
                // is validated like the rest.
                cpu_ticks(f, n)?;
                continue;
            }
            "intr" => &mut intr,
            "ctxt" => &mut ctxt,
            "processes" => &mut forks,
            "btime" => &mut btime,
            "procs_running" => &mut running,
            "procs_blocked" => &mut blocked,
            _ => {
                if let Some(id) = key.strip_prefix("cpu") {
                    push_cpu(out, id, f, n)?;
                }
                continue;
            }
        };
        *slot = Some(u64_field(next_field(&mut f, n, key)?, n, key)?);
    }
    let end = line_count + 1;
    let need = |v: Option<u64>, key: &str| {
        v.ok_or_else(|| ParseError::new(end, format!("missing `{key}` line")))
    };
    if out.cpus.is_empty() {
        return Err(ParseError::new(end, "no per-CPU `cpuN` lines"));
    }
    out.intr = need(intr, "intr")?;
    out.context_switches = need(ctxt, "ctxt")?;
    out.forks = need(forks, "processes")?;
    out.boot_time = need(btime, "btime")?;
    out.procs_running = need(running, "procs_running")?;
    out.procs_blocked = need(blocked, "procs_blocked")?;
    Ok(())
}

/// Adds one `cpuN` row. The kernel prints online CPUs in ascending order, so
/// anything else (a duplicate, a shuffled file) is corrupt input.
fn push_cpu<'a>(
    out: &mut Stat,
    id: &str,
    fields: impl Iterator<Item = &'a str>,
    n: usize,
) -> Result<(), ParseError> {
    let id = cpu_id(id, n)?;
    if let Some(&(last, _)) = out.cpus.last()
        && id <= last
    {
        return Err(ParseError::new(
            n,
            format!("cpu{id} after cpu{last}: CPU ids must ascend"),
        ));
    }
    out.cpus.push((id, cpu_ticks(fields, n)?));
    Ok(())
}

/// Reads up to ten tick columns; columns past the tenth are ignored, as
/// procfs does, so a future kernel's extra column does not break parsing.
fn cpu_ticks<'a>(fields: impl Iterator<Item = &'a str>, n: usize) -> Result<CpuTicks, ParseError> {
    let mut ticks = CpuTicks::default();
    let mut found = 0;
    for ((slot, name), tok) in ticks.iter_mut().zip(COLUMNS).zip(fields) {
        *slot = u64_field(tok, n, name)?;
        found += 1;
    }
    if found < MIN_COLUMNS {
        return Err(ParseError::new(
            n,
            format!(
                "cpu line has {found} columns, needs at least {MIN_COLUMNS} (user nice system idle)"
            ),
        ));
    }
    Ok(ticks)
}

/// node_exporter's `updateCPUStats` for one CPU: `prev` is what was emitted
/// last time (None for a CPU not seen at the previous scrape).
///
/// If idle fell by [`JUMP_BACK_TICKS`] or more, the CPU is taken as
/// replugged and starts from `new`; otherwise every column is the larger of
/// old and new, so no emitted counter ever decreases.
pub fn clamp(prev: Option<&CpuTicks>, new: &CpuTicks) -> CpuTicks {
    let mut out = prev.copied().unwrap_or_default();
    let jumped = out[IDLE].saturating_sub(new[IDLE]) >= JUMP_BACK_TICKS;
    if jumped {
        out = CpuTicks::default();
    }
    for (o, &n) in out.iter_mut().zip(new) {
        *o = (*o).max(n);
    }
    out
}

/// The last emitted values of one CPU.
#[derive(Clone, Copy, Default)]
struct Last {
    /// Number of the successful scrape that last saw this CPU; a CPU missing
    /// from the previous scrape went offline and starts afresh, as
    /// node_exporter drops offline CPUs from its cache.
    seen: u64,
    ticks: CpuTicks,
}

pub struct StatCollector {
    file: SourceFile,
    parsed: Stat,
    /// Indexed by CPU id; reused across scrapes.
    last: Vec<Last>,
    /// Successful scrapes so far; `Last::seen` refers to it.
    scrapes: u64,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(StatCollector {
        file: SourceFile::new(&s.procfs, "stat"),
        parsed: Stat::default(),
        last: Vec::new(),
        scrapes: 0,
    })
}

impl StatCollector {
    /// Replaces each parsed CPU's ticks with the clamped values and records
    /// them for the next scrape.
    fn apply_clamp(&mut self) {
        let prev_scrape = self.scrapes;
        self.scrapes += 1;
        for (id, ticks) in &mut self.parsed.cpus {
            let idx = *id as usize;
            if self.last.len() <= idx {
                self.last.resize(idx + 1, Last::default());
            }
            let Some(last) = self.last.get_mut(idx) else {
                continue;
            };
            let prev = (prev_scrape > 0 && last.seen == prev_scrape).then_some(&last.ticks);
            let clamped = clamp(prev, ticks);
            if clamped != *ticks {
                tracing::debug!(cpu = *id, reported = ?ticks, emitted = ?clamped, "CPU counter jumped backwards; keeping the previous value");
            }
            *last = Last {
                seen: self.scrapes,
                ticks: clamped,
            };
            *ticks = clamped;
        }
    }

    fn encode(&self, enc: &mut Encoder) {
        let mut b = [0u8; 20];
        enc.family(&CPU);
        for (id, ticks) in &self.parsed.cpus {
            let cpu = u64_label(u64::from(*id), &mut b);
            for (mode, &t) in COLUMNS.iter().zip(ticks).take(MODES) {
                enc.sample(&CPU, &[("cpu", cpu), ("mode", mode)], seconds(t));
            }
        }
        enc.family(&CPU_GUEST);
        for (id, ticks) in &self.parsed.cpus {
            let cpu = u64_label(u64::from(*id), &mut b);
            for (mode, col) in [("user", GUEST), ("nice", GUEST_NICE)] {
                let t = ticks.get(col).copied().unwrap_or(0);
                enc.sample(&CPU_GUEST, &[("cpu", cpu), ("mode", mode)], seconds(t));
            }
        }
        let p = &self.parsed;
        for (desc, v) in [
            (&INTR, p.intr),
            (&CTXT, p.context_switches),
            (&FORKS, p.forks),
            (&BTIME, p.boot_time),
            (&PROCS_RUNNING, p.procs_running),
            (&PROCS_BLOCKED, p.procs_blocked),
        ] {
            enc.family(desc);
            enc.sample(desc, &[], v);
        }
    }
}

fn seconds(ticks: u64) -> f64 {
    ticks as f64 / USER_HZ as f64
}

impl Collector for StatCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        // Parse fully before touching the clamp state, so a corrupt read
        // leaves the remembered values as they were.
        let parsed = &mut self.parsed;
        if self.file.parse_with(|t| parse_into(t, parsed))?.is_none() {
            return Ok(());
        }
        self.apply_clamp();
        self.encode(enc);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exposition::Format;
    use proptest::prelude::*;
    use std::path::{Path, PathBuf};

    const FIXTURE: &str = include_str!("../../tests/fixtures/proc/stat");

    fn parse(s: &str) -> Result<Stat, ParseError> {
        parse_fresh(s, parse_into)
    }
    const LARGE: &str = include_str!("../../tests/fixtures/large/stat");

    fn tail() -> &'static str {
        "intr 5 0 0\nctxt 6\nbtime 7\nprocesses 8\nprocs_running 1\nprocs_blocked 0\n"
    }

    #[test]
    fn parses_captured_fixture() {
        let s = parse(FIXTURE).unwrap();
        assert_eq!(
            s.cpus,
            vec![
                (0, [2792, 0, 1008, 36221, 27, 0, 8, 2, 0, 0]),
                (1, [3405, 0, 1813, 34504, 307, 0, 35, 8, 0, 0]),
            ]
        );
        assert_eq!(s.intr, 204121);
        assert_eq!(s.context_switches, 390823);
        assert_eq!(s.boot_time, 1795236114);
        assert_eq!(s.forks, 6069);
        assert_eq!((s.procs_running, s.procs_blocked), (1, 0));
    }

    #[test]
    fn parses_large_host() {
        let s = parse(LARGE).unwrap();
        assert_eq!(s.cpus.len(), 256);
        assert_eq!(s.cpus.last().map(|c| c.0), Some(255));
    }

    #[test]
    fn cpu_id_comes_from_label_not_row() {
        let s = parse(&format!("cpu0 1 2 3 4\ncpu3 5 6 7 8\n{}", tail())).unwrap();
        assert_eq!(s.cpus.iter().map(|c| c.0).collect::<Vec<_>>(), [0, 3]);
    }

    #[test]
    fn old_kernel_columns_read_as_zero() {
        let s = parse(&format!("cpu0 1 2 3 4\ncpu1 1 2 3 4 5 6 7\n{}", tail())).unwrap();
        assert_eq!(s.cpus[0].1, [1, 2, 3, 4, 0, 0, 0, 0, 0, 0]);
        assert_eq!(s.cpus[1].1, [1, 2, 3, 4, 5, 6, 7, 0, 0, 0]);
    }

    #[test]
    fn extra_columns_are_ignored() {
        let s = parse(&format!("cpu0 1 2 3 4 5 6 7 8 9 10 11 12\n{}", tail())).unwrap();
        assert_eq!(s.cpus[0].1, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    }

    #[test]
    fn malformed() {
        let err = |s: &str| parse(s).unwrap_err();
        assert_eq!(err("").line, 1);
        assert!(err("").msg.contains("cpuN"));
        let short = err(&format!("cpu0 1 2 3\n{}", tail()));
        assert_eq!(short.line, 1);
        assert!(short.msg.contains("3 columns"), "{}", short.msg);
        let short_total = err(&format!("cpu 1 2\ncpu0 1 2 3 4\n{}", tail()));
        assert_eq!(short_total.line, 1);
        let overflow = err(&format!(
            "cpu0 1 2 3 4\ncpu1 1 18446744073709551616 3 4\n{}",
            tail()
        ));
        assert_eq!(overflow.line, 2);
        assert!(overflow.msg.contains("nice"), "{}", overflow.msg);
        let ctxt = err("cpu0 1 2 3 4\nintr 1\nctxt 99999999999999999999\n");
        assert_eq!(ctxt.line, 3);
        assert!(ctxt.msg.contains("ctxt"));
        assert!(err("cpu0 1 2 3 4\nintr 1\n").msg.contains("ctxt"));
        assert!(
            err("cpu0 1 2 3 4\nctxt\n")
                .msg
                .contains("missing field ctxt")
        );
        assert!(
            err(&format!("cpuX 1 2 3 4\n{}", tail()))
                .msg
                .contains("cpu id")
        );
        assert!(
            err(&format!("cpu0 1 x 3 4\n{}", tail()))
                .msg
                .contains("nice")
        );
        let dup = err(&format!("cpu1 1 2 3 4\ncpu1 1 2 3 4\n{}", tail()));
        assert_eq!(dup.line, 2);
        assert!(
            err(&format!("cpu70000 1 2 3 4\n{}", tail()))
                .msg
                .contains("maximum")
        );
        assert!(err("garbage here\n%%% not a kernel file %%%\n:::\n").line == 4);
        // Truncated in the middle of the file: the tail lines are missing.
        let half = &FIXTURE[..FIXTURE.len() / 2];
        assert!(parse(half).is_err());
    }

    #[test]
    fn clamp_keeps_small_backward_steps_and_resets_on_hotplug() {
        let old: CpuTicks = [100, 0, 50, 10_000, 40, 0, 5, 0, 0, 0];
        let mut dip = old;
        dip[IDLE] = 9_999;
        dip[4] = 39;
        dip[0] = 101;
        let c = clamp(Some(&old), &dip);
        assert_eq!(c[IDLE], 10_000, "idle must not go backwards");
        assert_eq!(c[4], 40, "iowait must not go backwards");
        assert_eq!(c[0], 101, "forward steps pass through");
        let mut replug = old;
        replug[IDLE] = 10_000 - JUMP_BACK_TICKS;
        replug[0] = 3;
        assert_eq!(clamp(Some(&old), &replug), replug);
        let mut almost = old;
        almost[IDLE] = 10_000 - JUMP_BACK_TICKS + 1;
        assert_eq!(clamp(Some(&old), &almost)[IDLE], 10_000);
        assert_eq!(clamp(None, &dip), dip);
    }

    fn temp_tree(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "usescope-stat-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn collect(c: &mut dyn Collector) -> String {
        let mut buf = Vec::new();
        let mut enc = Encoder::new(&mut buf, Format::PrometheusText);
        c.collect(&mut enc).unwrap();
        String::from_utf8(buf).unwrap()
    }

    fn build_on(procfs: &Path) -> Box<dyn Collector> {
        build(&Settings::with_roots(procfs, "/nonexistent"))
    }

    #[test]
    fn collector_on_captured_fixture() {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proc");
        let out = collect(build_on(&fixture).as_mut());
        for line in [
            "# HELP node_cpu_seconds_total Seconds the CPUs spent in each mode.",
            "# TYPE node_cpu_seconds_total counter",
            "node_cpu_seconds_total{cpu=\"0\",mode=\"user\"} 27.92",
            "node_cpu_seconds_total{cpu=\"0\",mode=\"idle\"} 362.21",
            "node_cpu_seconds_total{cpu=\"1\",mode=\"iowait\"} 3.07",
            "node_cpu_seconds_total{cpu=\"1\",mode=\"steal\"} 0.08",
            "node_cpu_guest_seconds_total{cpu=\"1\",mode=\"nice\"} 0",
            "# TYPE node_intr_total counter",
            "node_intr_total 204121",
            "node_context_switches_total 390823",
            "node_forks_total 6069",
            "# TYPE node_boot_time_seconds gauge",
            "node_boot_time_seconds 1795236114",
            "node_procs_running 1",
            "node_procs_blocked 0",
        ] {
            assert!(out.lines().any(|l| l == line), "missing {line:?} in\n{out}");
        }
        assert_eq!(
            out.lines()
                .filter(|l| l.starts_with("node_cpu_seconds_total{"))
                .count(),
            16
        );
    }

    #[test]
    fn collector_absent_file_emits_nothing() {
        let mut c = build_on(Path::new("/nonexistent-usescope"));
        assert_eq!(collect(c.as_mut()), "");
    }

    fn value(out: &str, series: &str) -> Option<f64> {
        out.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    /// Rewrites the stat file between collects, as the kernel would between
    /// scrapes, and checks node_exporter's clamp and offline handling.
    #[test]
    fn collector_clamps_across_scrapes() {
        let dir = temp_tree("clamp");
        let file = dir.join("stat");
        let write = |cpus: &str| std::fs::write(&file, format!("{cpus}{}", tail())).unwrap();
        let mut c = build_on(&dir);
        let idle = |out: &str, cpu: u32| {
            value(
                out,
                &format!("node_cpu_seconds_total{{cpu=\"{cpu}\",mode=\"idle\"}}"),
            )
        };
        let iowait = |out: &str, cpu: u32| {
            value(
                out,
                &format!("node_cpu_seconds_total{{cpu=\"{cpu}\",mode=\"iowait\"}}"),
            )
        };

        write("cpu0 100 0 50 10000 40\ncpu2 100 0 50 20000 40\n");
        let first = collect(c.as_mut());
        assert_eq!(idle(&first, 0), Some(100.0));

        // Idle and iowait dip a little: the previous values stay.
        write("cpu0 101 0 50 9990 35\ncpu2 100 0 50 20000 40\n");
        let second = collect(c.as_mut());
        assert_eq!(idle(&second, 0), Some(100.0));
        assert_eq!(iowait(&second, 0), Some(0.4));
        assert_eq!(
            value(&second, "node_cpu_seconds_total{cpu=\"0\",mode=\"user\"}"),
            Some(1.01)
        );

        // Idle falls by 3 s or more: a replugged CPU, taken as reported.
        write("cpu0 5 0 1 9600 1\ncpu2 100 0 50 20000 40\n");
        let third = collect(c.as_mut());
        assert_eq!(idle(&third, 0), Some(96.0));
        assert_eq!(iowait(&third, 0), Some(0.01));

        // cpu2 goes offline: its series disappear.
        write("cpu0 5 0 1 9700 1\n");
        let fourth = collect(c.as_mut());
        assert_eq!(idle(&fourth, 2), None);

        // It comes back with a lower idle: it starts afresh, no clamp.
        write("cpu0 5 0 1 9800 1\ncpu2 1 0 1 19990 2\n");
        let fifth = collect(c.as_mut());
        assert_eq!(idle(&fifth, 2), Some(199.9));
        assert_eq!(iowait(&fifth, 2), Some(0.02));

        // A corrupt read fails and leaves the remembered values alone.
        std::fs::write(&file, "cpu0 garbage\n").unwrap();
        let mut buf = Vec::new();
        let mut enc = Encoder::new(&mut buf, Format::PrometheusText);
        let e = c.collect(&mut enc).unwrap_err();
        assert_eq!(e.line, Some(1));
        assert_eq!(e.file, file);
        write("cpu0 5 0 1 9790 1\ncpu2 1 0 1 19990 2\n");
        assert_eq!(idle(&collect(c.as_mut()), 0), Some(98.0));
        std::fs::remove_dir_all(dir).unwrap();
    }

    proptest! {
        #[test]
        fn clamped_counters_never_decrease(
            a in proptest::array::uniform10(0u64..1_000_000),
            b in proptest::array::uniform10(0u64..1_000_000),
        ) {
            let c = clamp(Some(&a), &b);
            if a[IDLE].saturating_sub(b[IDLE]) < JUMP_BACK_TICKS {
                for (x, y) in c.iter().zip(a) {
                    prop_assert!(*x >= y);
                }
            } else {
                prop_assert_eq!(c, b);
            }
        }
    }
}
