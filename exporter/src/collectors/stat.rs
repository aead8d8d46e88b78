//! /proc/stat → node_exporter's `stat` collector (collector/stat_linux.go):
//! `node_intr_total`, `node_context_switches_total`, `node_forks_total`,
//! `node_boot_time_seconds`, `node_procs_running` and `node_procs_blocked`.
//!
//! The per-CPU lines are node_exporter's `cpu` collector, [`super::cpu`].
//! Both read the file once per scrape between them through
//! [`crate::kernel::proc_stat`], which validates the whole file, as
//! procfs's `Stat()` does for both of node_exporter's.
//!
//! The `softirq` line is not exported here: the softirqs collector derives
//! `node_softirqs_total{vector}` from /proc/softirqs, which has the same
//! numbers without /proc/stat's 32-bit per-vector wrap.

use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::CollectError;
use crate::kernel::parse::parse_fresh;
use crate::kernel::proc_stat::{Shared, lock, parse_into};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

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

    /// The cpu and stat collectors built from one Settings read /proc/stat
    /// once per scrape: within a scrape the second sees what the first
    /// read, the next scrape reads again, a failed read is read again by
    /// the other, and outside a scraper every collect reads.
    #[test]
    fn one_read_per_scrape_for_cpu_and_stat() {
        use crate::scrape::exposition::Format;
        let dir = tempfile::tempdir().unwrap();
        let stat_path = dir.path().join("stat");
        let with_ctxt = |n: u64| FIXTURE.replace("ctxt 390823", &format!("ctxt {n}"));
        std::fs::write(&stat_path, with_ctxt(1)).unwrap();
        let s = Settings::with_roots(dir.path(), "/nonexistent");
        let mut cpu = crate::collectors::cpu::build(&s);
        let mut stat = build(&s);
        let scrape = |n: u64,
                      cpu: &mut Box<dyn Collector>,
                      stat: &mut Box<dyn Collector>,
                      between: &dyn Fn()| {
            let mut buf = Vec::new();
            let mut enc = Encoder::for_scrape(&mut buf, Format::PrometheusText, n);
            let cpu_ok = cpu.collect(&mut enc).is_ok();
            between();
            let stat_result = stat
                .collect(&mut enc)
                .map(|()| String::from_utf8(buf).unwrap());
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
        assert_eq!(
            ctxt(&out.unwrap()),
            "1",
            "stat read again within the scrape"
        );
        let (_, out) = scrape(2, &mut cpu, &mut stat, &|| {});
        assert_eq!(
            ctxt(&out.unwrap()),
            "2",
            "the next scrape did not read again"
        );

        std::fs::write(&stat_path, "garbage\n").unwrap();
        let (ok, out) = scrape(3, &mut cpu, &mut stat, &|| write(4));
        assert!(!ok, "cpu parsed garbage");
        assert_eq!(
            ctxt(&out.unwrap()),
            "4",
            "after cpu's failed read, stat did not read"
        );

        write(5);
        assert!(
            render(stat.as_mut())
                .unwrap()
                .contains("node_context_switches_total 5\n")
        );
        write(6);
        assert!(
            render(stat.as_mut())
                .unwrap()
                .contains("node_context_switches_total 6\n")
        );
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
