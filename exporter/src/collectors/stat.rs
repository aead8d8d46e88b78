//! /proc/stat → node_exporter's `stat` collector (collector/stat_linux.go):
//! `node_intr_total`, `node_context_switches_total`, `node_forks_total`,
//! `node_boot_time_seconds`, `node_procs_running` and `node_procs_blocked`.
//!
//! The per-CPU lines are node_exporter's `cpu` collector, [`super::cpu`],
//! which reads the same file with this module's [`parse_into`]; both
//! collectors validate the whole file, as procfs's `Stat()` does for both
//! of node_exporter's.
//!
//! The `softirq` line is not exported here: the softirqs collector derives
//! `node_softirqs_total{vector}` from /proc/softirqs, which has the same
//! numbers without /proc/stat's 32-bit per-vector wrap.

use crate::collector::Collector;
use crate::collectors::{Parser, Settings, Source, Spec};
use crate::error::{CollectError, ParseError};
use crate::exposition::{Desc, Encoder};
use crate::parse::{cpu_id, fields, lines, next_field, parse_fresh, u64_field};
use crate::source::SourceFile;

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

pub const SPEC: Spec = Spec {
    name: "stat",
    default_enabled: true,
    help: "Interrupts, context switches, forks, boot time and procs from /proc/stat",
    flags: &[],
    build,
    sources: &[Source::proc("stat", "stat")],
    parsers: &[Parser::numeric("stat", |t| {
        parse_fresh(t, parse_into).map(drop)
    })],
};

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

/// /proc/stat for the cpu and stat collectors, which both report from it:
/// read and parsed by whichever of them runs first in a scrape, and
/// handed to the other as it was (node_exporter reads it twice). The
/// kernel's side of one read is most of its cost: show_stat sums every
/// CPU's counters and walks every interrupt.
pub struct SharedStat {
    file: SourceFile,
    parsed: Stat,
    /// The scrape whose read `parsed` holds. A failed read sets nothing:
    /// the other collector then reads again and reports its own error.
    read_in: Option<u64>,
    /// Whether that read found the file.
    present: bool,
}

pub type Shared = Arc<Mutex<SharedStat>>;

impl std::fmt::Debug for SharedStat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedStat")
            .field("path", &self.file.path())
            .field("read_in", &self.read_in)
            .finish()
    }
}

impl SharedStat {
    pub fn at(procfs: &Path) -> Shared {
        Arc::new(Mutex::new(SharedStat {
            file: SourceFile::new(procfs, "stat"),
            parsed: Stat::default(),
            read_in: None,
            present: false,
        }))
    }

    /// Scrape `scrape`'s parse of the file (read now unless another
    /// collector did in this scrape; always, outside a scraper), or None
    /// when the file is absent.
    pub fn get(&mut self, scrape: Option<u64>) -> Result<Option<&Stat>, CollectError> {
        if scrape.is_none() || scrape != self.read_in {
            self.read_in = None;
            let parsed = &mut self.parsed;
            self.present = self.file.parse_with(|t| parse_into(t, parsed))?.is_some();
            self.read_in = scrape;
        }
        Ok(self.present.then_some(&self.parsed))
    }
}

/// Locks a shared /proc/stat; a collector that panicked while holding it
/// left a parse that the next read replaces.
pub fn lock(s: &Shared) -> MutexGuard<'_, SharedStat> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

pub struct StatCollector {
    stat: Shared,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(StatCollector {
        stat: s.shared_stat(),
    })
}

impl Collector for StatCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let mut shared = lock(&self.stat);
        let Some(p) = shared.get(enc.scrape())? else {
            return Ok(());
        };
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::{fixture, render};

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

    /// The cpu and stat collectors built from one Settings read /proc/stat
    /// once per scrape: within a scrape the second sees what the first
    /// read, the next scrape reads again, a failed read is read again by
    /// the other, and outside a scraper every collect reads.
    #[test]
    fn one_read_per_scrape_for_cpu_and_stat() {
        use crate::exposition::Format;
        let dir = tempfile::tempdir().unwrap();
        let stat_path = dir.path().join("stat");
        let with_ctxt = |n: u64| FIXTURE.replace("ctxt 390823", &format!("ctxt {n}"));
        std::fs::write(&stat_path, with_ctxt(1)).unwrap();
        let s = Settings::with_roots(dir.path(), "/nonexistent");
        let mut cpu = crate::collectors::cpu::build(&s);
        let mut stat = build(&s);
        let scrape = |n: u64, cpu: &mut Box<dyn Collector>, stat: &mut Box<dyn Collector>, between: &dyn Fn()| {
            let mut buf = Vec::new();
            let mut enc = Encoder::for_scrape(&mut buf, Format::PrometheusText, n);
            let cpu_ok = cpu.collect(&mut enc).is_ok();
            between();
            let stat_result = stat.collect(&mut enc).map(|()| String::from_utf8(buf).unwrap());
            (cpu_ok, stat_result)
        };
        let ctxt = |out: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix("node_context_switches_total "))
                .unwrap()
                .to_string()
        };
        let write = |n: u64| std::fs::write(&stat_path, with_ctxt(n)).unwrap();
        let (ok, out) = scrape(1, &mut cpu, &mut stat, &|| write(2));
        assert!(ok);
        assert_eq!(ctxt(&out.unwrap()), "1", "stat read again within the scrape");
        let (_, out) = scrape(2, &mut cpu, &mut stat, &|| {});
        assert_eq!(ctxt(&out.unwrap()), "2", "the next scrape did not read again");

        std::fs::write(&stat_path, "garbage\n").unwrap();
        let (ok, out) = scrape(3, &mut cpu, &mut stat, &|| write(4));
        assert!(!ok, "cpu parsed garbage");
        assert_eq!(ctxt(&out.unwrap()), "4", "after cpu's failed read, stat did not read");

        write(5);
        assert!(render(stat.as_mut()).unwrap().contains("node_context_switches_total 5\n"));
        write(6);
        assert!(render(stat.as_mut()).unwrap().contains("node_context_switches_total 6\n"));
    }

    #[test]
    fn collector_on_captured_fixture() {
        let s = Settings::with_roots(fixture("proc"), "/nonexistent");
        let out = render(build(&s).as_mut()).unwrap();
        assert_eq!(
            out,
            "# HELP node_intr_total Total number of interrupts serviced.\n\
             # TYPE node_intr_total counter\n\
             node_intr_total 204121\n\
             # HELP node_context_switches_total Total number of context switches.\n\
             # TYPE node_context_switches_total counter\n\
             node_context_switches_total 390823\n\
             # HELP node_forks_total Total number of forks.\n\
             # TYPE node_forks_total counter\n\
             node_forks_total 6069\n\
             # HELP node_boot_time_seconds Node boot time, in unixtime.\n\
             # TYPE node_boot_time_seconds gauge\n\
             node_boot_time_seconds 1795236114\n\
             # HELP node_procs_running Number of processes in runnable state.\n\
             # TYPE node_procs_running gauge\n\
             node_procs_running 1\n\
             # HELP node_procs_blocked Number of processes blocked waiting for I/O to complete.\n\
             # TYPE node_procs_blocked gauge\n\
             node_procs_blocked 0\n"
        );
        let absent = Settings::with_roots("/nonexistent-usescope", "/nonexistent");
        assert_eq!(render(build(&absent).as_mut()).unwrap(), "");
    }
}
