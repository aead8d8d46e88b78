//! Run-queue latency: `usescope_runqueue_latency_seconds`, a histogram of
//! the time from a task becoming runnable (wakeup, or switched out while
//! still runnable) to it running, plus `usescope_runqueue_latency_missed_total`.
//! Buckets: see [`super::log2_hist`].
//!
//! Three designs, best first; the mode name says which one runs
//! (`usescope_probe_info{probe="runqlat",mode="tp_btf+sched_info"}`):
//! - `tp_btf+sched_info` (ebpf-probes/runqlat_delay.bpf.c): the growth of
//!   the scheduler's own per-task run_delay between a task's switch-outs.
//!   One program, on sched_switch only, with nothing to lose; needs
//!   CONFIG_SCHED_INFO.
//! - `tp_btf+task_storage` (runqlat.bpf.c): timed from wakeups and
//!   preemptions to switch-in, the start time in task-local storage (no
//!   hashing, freed with the task, so PID churn loses nothing).
//! - `tp_btf+lru_hash`, `raw_tp+lru_hash` (runqlat.bpf.c built with
//!   RUNQLAT_START_LRU): the same with a bounded LRU hash keyed by pid,
//!   which evicts under churn, for kernels that refuse task storage.
//!
//! `--probe.runqlat.per-cgroup` adds a histogram per cgroup
//! ([`cgroup`], in every mode), bounded by `--probe.runqlat.max-cgroups`.

use super::layout::{LOG2_HIST_BUCKETS, RUNQLAT_MISSED_WORD, RUNQLAT_SUM_WORD, RunqlatHist};
use super::loader::{self, Kind, Mode, ProbeError};
use super::log2_hist::{self, Buckets, Slots};
use super::percpu::PerCpuStruct;
use super::{Kernel, Loaded, ProbeFlag, ProbeFlagKind, ProbeSettings, ProbeSpec};
use crate::kernel::error::CollectError;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder, u64_label};

#[path = "runqlat_cgroup.rs"]
pub mod cgroup;

pub const SPEC: ProbeSpec = ProbeSpec {
    name: "runqlat",
    help: "Run-queue latency histogram (sched tracepoints)",
    default_enabled: true,
    collector: "probe_runqlat",
    modes: MODES,
    map: MAP,
    flags: &[
        ProbeFlag {
            name: PER_CPU,
            help: "Add a cpu label to the run-queue latency histogram (one histogram per CPU)",
            kind: ProbeFlagKind::Bool,
            default: None,
            value_name: None,
        },
        ProbeFlag {
            name: MAX_TASKS,
            help: "Size of the runqlat start-time map when it is the LRU hash (kernels without sched_info and task storage, or --probe.runqlat.source=lru-hash): runnable tasks tracked at once",
            kind: ProbeFlagKind::U32 { min: 1 },
            default: Some("10240"),
            value_name: None,
        },
        ProbeFlag {
            name: SOURCE,
            help: "Where runqlat's latencies come from: auto (the scheduler's own run_delay where the kernel keeps it, else timed from wakeups with task-local storage, else with an LRU hash), task-storage or lru-hash (timed from wakeups, to compare)",
            kind: ProbeFlagKind::Choice(&["auto", "task-storage", "lru-hash"]),
            default: Some("auto"),
            value_name: None,
        },
        ProbeFlag {
            name: PID,
            help: "Measure the run-queue latency of this one process's threads only (its pid as the host sees it), as bcc's runqlat -p; default: every task",
            kind: ProbeFlagKind::U32 { min: 1 },
            default: None,
            value_name: Some("PID"),
        },
        ProbeFlag {
            name: PER_CGROUP,
            help: "Also a run-queue latency histogram per cgroup (usescope_cgroup_runqueue_latency_seconds), cgroups labelled and selected as the cgroup collector does by default; about 40 ns more per wait",
            kind: ProbeFlagKind::Bool,
            default: None,
            value_name: None,
        },
        ProbeFlag {
            name: MAX_CGROUPS,
            help: "Most cgroups the per-cgroup histogram map holds (--probe.runqlat.per-cgroup); waits of the cgroups past it are counted in cgroup=\"other\" and usescope_cgroup_runqueue_latency_overflow_total",
            kind: ProbeFlagKind::U32 { min: 1 },
            default: Some("256"),
            value_name: None,
        },
    ],
    metrics: &[&LATENCY, &MISSED, &cgroup::LATENCY, &cgroup::OVERFLOW],
    load,
    build: collector,
};

/// `--probe.runqlat.per-cpu`: a `cpu` label on the latency histogram.
pub const PER_CPU: &str = "probe.runqlat.per-cpu";
/// `--probe.runqlat.max-tasks`: entries of the LRU start-time map.
pub const MAX_TASKS: &str = "probe.runqlat.max-tasks";
/// `--probe.runqlat.source`: which design runqlat loads (the others are
/// fallbacks; forcing one compares them).
pub const SOURCE: &str = "probe.runqlat.source";
/// `--probe.runqlat.pid`: only this process's tasks (unset: all).
pub const PID: &str = "probe.runqlat.pid";
/// `--probe.runqlat.per-cgroup`: a histogram per cgroup too.
pub const PER_CGROUP: &str = "probe.runqlat.per-cgroup";
/// `--probe.runqlat.max-cgroups`: entries of the per-cgroup map.
pub const MAX_CGROUPS: &str = "probe.runqlat.max-cgroups";
const DEFAULT_MAX_CGROUPS: u32 = 256;

const DEFAULT_MAX_TASKS: u32 = 10240;

/// `--probe.runqlat.source`: where runqlat's latencies come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunqlatSource {
    /// The scheduler's run_delay where the kernel keeps it, else wakeups
    /// with task storage, else wakeups with the LRU hash.
    Auto,
    /// Timed from wakeups, start times in task-local storage (else the
    /// LRU hash).
    TaskStorage,
    /// Timed from wakeups, start times in the LRU hash.
    LruHash,
}

/// The design `--probe.runqlat.source` asks for.
pub fn source(settings: &ProbeSettings) -> RunqlatSource {
    match settings.choice(SOURCE) {
        Some("task-storage") => RunqlatSource::TaskStorage,
        Some("lru-hash") => RunqlatSource::LruHash,
        _ => RunqlatSource::Auto,
    }
}

const LATENCY: Desc = Desc::histogram(
    "usescope_runqueue_latency_seconds",
    "Time tasks spent runnable on a run queue before running (from wakeup or preemption to switch-in).",
);
const MISSED: Desc = Desc::counter(
    "usescope_runqueue_latency_missed_total",
    "Waits not measured: a task's first run after attach when it is older than the probe, or a switch-in without a recorded start (evicted from the LRU start map of the lru_hash modes).",
);

const BTF_PROGRAMS: &[(&str, &str)] = &[
    ("us_rq_wake_btf", "sched_wakeup"),
    ("us_rq_wknew_btf", "sched_wakeup_new"),
    ("us_rq_swtch_btf", "sched_switch"),
];

/// The modes, best first. The first is in the run_delay object
/// (`runqlat_delay`), the second in the task-storage one (`runqlat`), the
/// others in the LRU one (`runqlat_lru`, a build variant of
/// runqlat.bpf.c); see [`load`].
pub const MODES: &[Mode] = &[
    Mode {
        name: "tp_btf+sched_info",
        kind: Kind::BtfTracePoint,
        programs: &[("us_rq_delay_btf", "sched_switch")],
    },
    Mode {
        name: "tp_btf+task_storage",
        kind: Kind::BtfTracePoint,
        programs: BTF_PROGRAMS,
    },
    Mode {
        name: "tp_btf+lru_hash",
        kind: Kind::BtfTracePoint,
        programs: BTF_PROGRAMS,
    },
    Mode {
        name: "raw_tp+lru_hash",
        kind: Kind::RawTracePoint,
        programs: &[
            ("us_rq_wake_raw", "sched_wakeup"),
            ("us_rq_wknew_raw", "sched_wakeup_new"),
            ("us_rq_swtch_raw", "sched_switch"),
        ],
    },
];
const SCHED_INFO_MODES: &[Mode] = MODES.split_at(1).0;
const TASK_STORAGE_MODES: &[Mode] = MODES.split_at(2).0.split_at(1).1;
const LRU_MODES: &[Mode] = MODES.split_at(2).1;

/// The per-CPU map the collector reads, and its value.
pub const MAP: &str = "us_rq_hist";
const VALUE_SIZE: usize = size_of::<RunqlatHist>();

/// In the probe loader process: load and attach the best design the
/// kernel takes ([`MODES`] order), or the one `--probe.runqlat.source`
/// forces. Each fallback logs why the better one was refused.
pub fn load(kernel: &Kernel, settings: &ProbeSettings) -> Result<Loaded, ProbeError> {
    let max_tasks = settings.number(MAX_TASKS).unwrap_or(DEFAULT_MAX_TASKS);
    let pid = settings.number(PID).unwrap_or(0);
    // The hierarchy is chosen once, here, from what is mounted; without
    // the flag the kernel side compiles its per-cgroup code out.
    let hierarchy = if settings.switch(PER_CGROUP) {
        Some(cgroup::Hierarchy::find("cpu").map_err(ProbeError)?)
    } else {
        None
    };
    let cgroup_by = hierarchy.as_ref().map_or(0u32, |h| h.by);
    let max_cgroups = match hierarchy {
        Some(_) => settings.number(MAX_CGROUPS).unwrap_or(DEFAULT_MAX_CGROUPS),
        None => 1,
    };
    fn configure<'a>(l: &mut aya::EbpfLoader<'a>, pid: &'a u32, by: &'a u32, max: &'a u32) {
        l.override_global("target_tgid", pid, true);
        l.override_global("cgroup_by", by, true);
        l.override_global("cgroup_slots", max, true);
        for map in [cgroup::MAP, cgroup::SLOT_MAP, cgroup::FREE_MAP] {
            l.map_max_entries(map, *max);
        }
    }
    let lru = || {
        loader::load_and_attach("runqlat_lru", &kernel.btf, LRU_MODES, |l| {
            l.map_max_entries("us_rq_start", max_tasks);
            configure(l, &pid, &cgroup_by, &max_cgroups);
        })
    };
    // aya 0.14 creates a task-storage map like any other but has no
    // wrapper type for it; without this it would refuse the object.
    let task_storage = || {
        loader::load_and_attach("runqlat", &kernel.btf, TASK_STORAGE_MODES, |l| {
            l.allow_unsupported_maps();
            configure(l, &pid, &cgroup_by, &max_cgroups);
        })
    };
    let sched_info = || {
        sched_info_kept()?;
        loader::load_and_attach("runqlat_delay", &kernel.btf, SCHED_INFO_MODES, |l| {
            l.allow_unsupported_maps();
            configure(l, &pid, &cgroup_by, &max_cgroups);
        })
    };
    let first: &[&dyn Fn() -> Result<Loaded, ProbeError>] = match source(settings) {
        RunqlatSource::Auto => &[&sched_info, &task_storage, &lru],
        RunqlatSource::TaskStorage => &[&task_storage, &lru],
        RunqlatSource::LruHash => &[&lru],
    };
    let mut refused: Vec<String> = Vec::new();
    for attempt in first {
        match attempt() {
            Ok(mut loaded) => {
                if let Some(h) = &hierarchy {
                    loaded.names = cgroup_names(&loaded, h)?;
                }
                return Ok(loaded);
            }
            Err(e) => {
                tracing::info!(probe = "runqlat", cause = %e, "design refused; trying the next one");
                refused.push(e.0);
            }
        }
    }
    Err(ProbeError(refused.join("; ")))
}

/// What the daemon needs to open the per-cgroup map: its id (the daemon
/// opens its own fd by id, as tasks does its iterator link), then the
/// hierarchy.
fn cgroup_names(loaded: &Loaded, h: &cgroup::Hierarchy) -> Result<Vec<String>, ProbeError> {
    use aya::maps::Map;
    use std::os::fd::AsFd;
    let mut names = Vec::new();
    for name in [cgroup::MAP, cgroup::SLOT_MAP, cgroup::FREE_MAP] {
        let map = match loaded.ebpf.map(name) {
            Some(Map::PerCpuArray(m) | Map::HashMap(m) | Map::Queue(m)) => m,
            _ => return Err(ProbeError(format!("map {name} missing from the object"))),
        };
        let id = super::sys::map_id(map.fd().as_fd())
            .map_err(|e| ProbeError(format!("map {name}: {e}")))?;
        names.push(id.to_string());
    }
    names.extend(h.to_names());
    Ok(names)
}

/// Whether the scheduler keeps `sched_info` up to date. The field exists
/// with CONFIG_SCHED_INFO, but before Linux 5.14 the kernel updated it
/// only while delay accounting was on (`nodelayacct` turns it off), and
/// then /proc/PID/schedstat reads `0 0 0`: a running process that has
/// never arrived on a CPU means the accounting is off, and the design
/// would report every wait as 0.
fn sched_info_kept() -> Result<(), ProbeError> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat")
        .map_err(|e| ProbeError(format!("/proc/thread-self/schedstat: {e}")))?;
    match text.split_whitespace().nth(2).map(str::parse::<u64>) {
        Some(Ok(arrivals)) if arrivals > 0 => Ok(()),
        _ => Err(ProbeError(format!(
            "the scheduler keeps no run-queue accounting (/proc/thread-self/schedstat reads {:?})",
            text.trim()
        ))),
    }
}

/// In the daemon: the collector over the handed-over histogram map.
pub fn collector(
    map: std::os::fd::OwnedFd,
    names: Vec<String>,
    settings: &ProbeSettings,
) -> Result<Box<dyn Collector>, String> {
    let cgroups = if names.is_empty() {
        None
    } else {
        let hist = map
            .try_clone()
            .map_err(|e| format!("duplicating the fd of {MAP}: {e}"))?;
        Some(cgroup::CgroupHist::new(
            &names,
            hist,
            Buckets::new(settings.histogram),
            settings.cgroup_selection(),
        )?)
    };
    Ok(Box::new(RunqlatCollector {
        cgroups,
        hist: PerCpuStruct::from_fd(MAP, map, VALUE_SIZE)?,
        per_cpu: settings.switch(PER_CPU),
        slots: [0; LOG2_HIST_BUCKETS + 1],
        buckets: Buckets::new(settings.histogram),
    }))
}

struct RunqlatCollector {
    hist: PerCpuStruct,
    /// `--probe.runqlat.per-cgroup`.
    cgroups: Option<cgroup::CgroupHist>,
    per_cpu: bool,
    /// Per-bucket counts being summed, reused across scrapes.
    slots: Slots,
    /// The histogram writer (--probe.histogram.bucket-factor), reused.
    buckets: Buckets,
}

impl Collector for RunqlatCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.hist
            .read()
            .map_err(|e| CollectError::other("bpf map us_rq_hist", e.to_string()))?;
        enc.family(&LATENCY);
        let mut sum_ns = 0u64;
        self.slots = [0; LOG2_HIST_BUCKETS + 1];
        for (i, cpu) in self.hist.cpus().enumerate() {
            let cpu_sum = cpu.get(RUNQLAT_SUM_WORD).copied().unwrap_or(0);
            if self.per_cpu {
                self.slots = [0; LOG2_HIST_BUCKETS + 1];
                log2_hist::add_cpu(&mut self.slots, cpu);
                let mut label = [0u8; 20];
                let labels = [("cpu", u64_label(i as u64, &mut label))];
                log2_hist::write(
                    enc,
                    &LATENCY,
                    &mut self.buckets,
                    &self.slots,
                    &labels,
                    cpu_sum,
                );
            } else {
                log2_hist::add_cpu(&mut self.slots, cpu);
                sum_ns = sum_ns.wrapping_add(cpu_sum);
            }
        }
        if !self.per_cpu {
            log2_hist::write(enc, &LATENCY, &mut self.buckets, &self.slots, &[], sum_ns);
        }
        enc.family(&MISSED);
        enc.sample(&MISSED, &[], self.hist.sum(RUNQLAT_MISSED_WORD));
        match &mut self.cgroups {
            Some(c) => c.collect(enc)?,
            // Declared families are always written (tests/probes.rs).
            None => {
                enc.family(&cgroup::LATENCY);
                enc.family(&cgroup::OVERFLOW);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sched_info_is_tried_first_then_task_storage_then_lru() {
        assert_eq!(SCHED_INFO_MODES.len(), 1);
        assert!(SCHED_INFO_MODES[0].name.ends_with("+sched_info"));
        assert_eq!(TASK_STORAGE_MODES.len(), 1);
        assert!(TASK_STORAGE_MODES[0].name.ends_with("+task_storage"));
        assert!(LRU_MODES.iter().all(|m| m.name.ends_with("+lru_hash")));
        assert_eq!(
            SCHED_INFO_MODES.len() + TASK_STORAGE_MODES.len() + LRU_MODES.len(),
            MODES.len()
        );
    }
}
