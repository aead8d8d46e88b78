//! Self metrics of the probes.
//!
//! - [`StatusCollector`] (collector `probes`): `usescope_probe_up{probe}`
//!   and `usescope_probe_info{probe,mode}` for every enabled probe, loaded
//!   or not, so a dashboard can tell "no drops" from "not measuring drops".
//! - [`StatsCollector`] (collector `probe_stats`): the kernel's per-program
//!   recursion misses, i.e. the events a probe lost, always; and with
//!   `--probe.bpf-stats` its run time and run count (BPF_ENABLE_STATS),
//!   i.e. what the probes cost.

use std::os::fd::{AsFd, OwnedFd};

use super::sys;
use crate::kernel::error::CollectError;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

const UP: Desc = Desc::gauge(
    "usescope_probe_up",
    "Whether the eBPF probe is loaded and attached (1) or failed to load (0; the log says why).",
);
const INFO: Desc = Desc::gauge(
    "usescope_probe_info",
    "Which hook mode each eBPF probe runs in (tp_btf, or a variant such as tp_btf+sched_info or tp_btf_rx_sk, else raw_tp; none when down).",
);
const RUN_SECONDS: Desc = Desc::counter(
    "usescope_bpf_program_run_seconds_total",
    "Time the kernel spent running this eBPF program (kernel BPF run-time statistics).",
);
const RUNS: Desc = Desc::counter(
    "usescope_bpf_program_runs_total",
    "Number of times the kernel ran this eBPF program (kernel BPF run-time statistics).",
);
const RECURSION_MISSES: Desc = Desc::counter(
    "usescope_bpf_program_recursion_misses_total",
    "Times the kernel skipped one of this probe's eBPF programs because it was already running on the same CPU: events the probe did not count (kernel 5.12+; always counted).",
);

/// One enabled probe: its name and, if it attached, its mode.
pub struct ProbeStatus {
    pub probe: &'static str,
    pub mode: Option<&'static str>,
}

pub struct StatusCollector {
    pub probes: Vec<ProbeStatus>,
}

impl Collector for StatusCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        enc.family(&UP);
        for p in &self.probes {
            enc.sample(&UP, &[("probe", p.probe)], u64::from(p.mode.is_some()));
        }
        enc.family(&INFO);
        for p in &self.probes {
            let mode = p.mode.unwrap_or("none");
            enc.sample(&INFO, &[("mode", mode), ("probe", p.probe)], 1u64);
        }
        Ok(())
    }
}

/// One attached program as the daemon holds it: its fd, handed over by
/// the loader process.
pub struct Program {
    pub probe: &'static str,
    pub name: &'static str,
    pub fd: OwnedFd,
}

/// Reads `bpf_prog_info` of each attached program through the fd usescope
/// holds (works after privileges are dropped).
pub struct StatsCollector {
    programs: Vec<Program>,
    /// What the kernel counts of each program, reused so each family can be
    /// written whole after every program's info has been read.
    rows: Vec<sys::ProgStats>,
    /// Whether BPF_ENABLE_STATS is on, so run time and runs mean something
    /// (without it the kernel leaves them 0, which would read as "never
    /// ran").
    run_stats: bool,
}

impl StatsCollector {
    pub fn new(programs: Vec<Program>, run_stats: bool) -> StatsCollector {
        StatsCollector {
            programs,
            rows: Vec::new(),
            run_stats,
        }
    }
}

impl Collector for StatsCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.rows.clear();
        for p in &self.programs {
            let stats = sys::prog_run_stats(p.fd.as_fd())
                .map_err(|e| CollectError::other("bpf program info", format!("{}: {e}", p.name)))?;
            self.rows.push(stats);
        }
        if self.run_stats {
            enc.family(&RUN_SECONDS);
            for (p, s) in self.programs.iter().zip(&self.rows) {
                let labels = [("probe", p.probe), ("program", p.name)];
                enc.sample(&RUN_SECONDS, &labels, s.run_ns as f64 / 1e9);
            }
            enc.family(&RUNS);
            for (p, s) in self.programs.iter().zip(&self.rows) {
                enc.sample(&RUNS, &[("probe", p.probe), ("program", p.name)], s.runs);
            }
        }
        // One series per probe, not per program: what matters is that a
        // probe lost events, and the default probes hold 11 programs.
        enc.family(&RECURSION_MISSES);
        let mut i = 0;
        while let Some(first) = self.programs.get(i) {
            let mut misses = 0;
            while let Some(s) = self
                .rows
                .get(i)
                .filter(|_| self.programs[i].probe == first.probe)
            {
                misses += s.recursion_misses;
                i += 1;
            }
            enc.sample(&RECURSION_MISSES, &[("probe", first.probe)], misses);
        }
        Ok(())
    }
}
