//! Self metrics of the probes.
//!
//! - [`StatusCollector`] (collector `probes`): `usescope_probe_up{probe}`
//!   and `usescope_probe_info{probe,mode}` for every enabled probe, loaded
//!   or not, so a dashboard can tell "no drops" from "not measuring drops".
//! - [`StatsCollector`] (collector `probe_stats`): the kernel's per-program
//!   run time and run count (BPF_ENABLE_STATS), i.e. what the probes cost.

use std::sync::Arc;

use super::Loaded;
use crate::collector::Collector;
use crate::error::CollectError;
use crate::exposition::{Desc, Encoder};

const UP: Desc = Desc::gauge(
    "usescope_probe_up",
    "Whether the eBPF probe is loaded and attached (1) or failed to load (0; the log says why).",
);
const INFO: Desc = Desc::gauge(
    "usescope_probe_info",
    "Which hook mode each eBPF probe runs in (tp_btf, raw_tp; none when down).",
);
const RUN_SECONDS: Desc = Desc::counter(
    "usescope_bpf_program_run_seconds_total",
    "Time the kernel spent running this eBPF program (kernel BPF run-time statistics).",
);
const RUNS: Desc = Desc::counter(
    "usescope_bpf_program_runs_total",
    "Number of times the kernel ran this eBPF program (kernel BPF run-time statistics).",
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

/// Reads `bpf_prog_info` of each attached program through the fd usescope
/// holds (works after privileges are dropped).
pub struct StatsCollector {
    pub loaded: Arc<Vec<Loaded>>,
    /// (probe, program, run ns, runs), reused so each family can be written
    /// whole after every program's info has been read.
    rows: Vec<(&'static str, &'static str, u64, u64)>,
}

impl StatsCollector {
    pub fn new(loaded: Arc<Vec<Loaded>>) -> StatsCollector {
        StatsCollector {
            loaded,
            rows: Vec::new(),
        }
    }
}

impl Collector for StatsCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.rows.clear();
        for l in self.loaded.iter() {
            for &(program, _) in l.mode.programs {
                let info = l
                    .ebpf
                    .program(program)
                    .ok_or_else(|| {
                        CollectError::other("bpf program info", format!("{program} missing"))
                    })?
                    .info()
                    .map_err(|e| {
                        CollectError::other("bpf program info", format!("{program}: {e}"))
                    })?;
                let ns = u64::try_from(info.run_time().as_nanos()).unwrap_or(u64::MAX);
                self.rows.push((l.probe, program, ns, info.run_count()));
            }
        }
        enc.family(&RUN_SECONDS);
        for &(probe, program, ns, _) in &self.rows {
            let labels = [("probe", probe), ("program", program)];
            enc.sample(&RUN_SECONDS, &labels, ns as f64 / 1e9);
        }
        enc.family(&RUNS);
        for &(probe, program, _, runs) in &self.rows {
            enc.sample(&RUNS, &[("probe", probe), ("program", program)], runs);
        }
        Ok(())
    }
}
