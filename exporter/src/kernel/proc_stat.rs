//! /proc/stat, parsed: per-CPU ticks and the system-wide counters. The
//! cpu and stat collectors both report from it and share one read per
//! scrape ([`SharedStat`]).

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::kernel::error::{CollectError, ParseError};
use crate::kernel::parse::{cpu_id, fields, lines, next_field, u64_field};
use crate::kernel::source::SourceFile;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::parse::parse_fresh;

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
}
