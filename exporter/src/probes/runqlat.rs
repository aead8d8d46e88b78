//! Run-queue latency: `usescope_runqueue_latency_seconds`, a histogram of
//! the time from a task becoming runnable (wakeup, or switched out while
//! still runnable) to it running, plus `usescope_runqueue_latency_missed_total`.
//! Buckets: see [`super::log2_hist`].
//!
//! The runnable-since time of each task is kept in task-local storage
//! where the kernel allows it (no hashing, freed with the task, so PID
//! churn loses nothing), else in a bounded LRU hash keyed by pid, which
//! evicts under churn. Two objects are built from one C source for this
//! (ebpf-probes/runqlat.bpf.c), and the mode name says which one runs:
//! `usescope_probe_info{probe="runqlat",mode="tp_btf+task_storage"}`.

use super::layout::{LOG2_HIST_BUCKETS, RUNQLAT_MISSED_WORD, RUNQLAT_SUM_WORD, RunqlatHist};
use super::loader::{self, Kind, Mode, ProbeError};
use super::log2_hist::{self, Slots};
use super::percpu::PerCpuStruct;
use super::{Kernel, Loaded, ProbeSettings};
use crate::collector::Collector;
use crate::error::CollectError;
use crate::exposition::{Desc, Encoder, u64_label};

pub const COLLECTOR: &str = "probe_runqlat";

const LATENCY: Desc = Desc::histogram(
    "usescope_runqueue_latency_seconds",
    "Time tasks spent runnable on a run queue before running (from wakeup or preemption to switch-in).",
);
const MISSED: Desc = Desc::counter(
    "usescope_runqueue_latency_missed_total",
    "Switch-ins not measured because no start time was recorded (task runnable since before attach, or evicted from the LRU start map of the lru_hash modes).",
);

const BTF_PROGRAMS: &[(&str, &str)] = &[
    ("us_rq_wake_btf", "sched_wakeup"),
    ("us_rq_wknew_btf", "sched_wakeup_new"),
    ("us_rq_swtch_btf", "sched_switch"),
];

/// The modes, best first. The first is in the task-storage object
/// ([`loader::RUNQLAT_OBJ`]), the others in the LRU one
/// ([`loader::RUNQLAT_LRU_OBJ`]); see [`load`].
pub const MODES: &[Mode] = &[
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
const TASK_STORAGE_MODES: &[Mode] = MODES.split_at(1).0;
const LRU_MODES: &[Mode] = MODES.split_at(1).1;

/// The per-CPU map the collector reads, and its value.
pub const MAP: &str = "us_rq_hist";
const VALUE_SIZE: usize = size_of::<RunqlatHist>();

/// In the probe loader process: load and attach, on task storage unless
/// the kernel refuses it (map type or helper unknown, no tracing programs)
/// or `--probe.runqlat.start-map=lru-hash` asks for the LRU hash.
pub fn load(kernel: &Kernel, settings: &ProbeSettings) -> Result<Loaded, ProbeError> {
    let max_tasks = settings.runqlat_max_tasks;
    let lru = || {
        loader::load_and_attach(loader::RUNQLAT_LRU_OBJ, &kernel.btf, LRU_MODES, |l| {
            l.map_max_entries("us_rq_start", max_tasks);
        })
    };
    if settings.runqlat_lru_start_map {
        return lru();
    }
    // aya 0.14 creates the task-storage map like any other but has no
    // wrapper type for it; without this it would refuse the object.
    let task_storage =
        loader::load_and_attach(loader::RUNQLAT_OBJ, &kernel.btf, TASK_STORAGE_MODES, |l| {
            l.allow_unsupported_maps();
        });
    match task_storage {
        Ok(loaded) => Ok(loaded),
        Err(task_storage) => {
            tracing::info!(probe = "runqlat", cause = %task_storage, "task storage refused; falling back to the LRU hash start map");
            lru().map_err(|e| ProbeError(format!("{}; {}", task_storage.0, e.0)))
        }
    }
}

/// In the daemon: the collector over the handed-over histogram map.
pub fn collector(
    map: std::os::fd::OwnedFd,
    _names: Vec<String>,
    settings: &ProbeSettings,
) -> Result<Box<dyn Collector>, String> {
    Ok(Box::new(RunqlatCollector {
        hist: PerCpuStruct::from_fd(MAP, map, VALUE_SIZE)?,
        per_cpu: settings.runqlat_per_cpu,
        slots: [0; LOG2_HIST_BUCKETS + 1],
        buckets: Vec::with_capacity(LOG2_HIST_BUCKETS),
    }))
}

struct RunqlatCollector {
    hist: PerCpuStruct,
    per_cpu: bool,
    /// Per-bucket counts being summed, reused across scrapes.
    slots: Slots,
    /// (le, cumulative count) handed to the encoder, reused.
    buckets: Vec<(f64, u64)>,
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_storage_is_tried_first_and_lru_modes_follow() {
        assert_eq!(TASK_STORAGE_MODES.len(), 1);
        assert!(TASK_STORAGE_MODES[0].name.ends_with("+task_storage"));
        assert!(LRU_MODES.iter().all(|m| m.name.ends_with("+lru_hash")));
        assert_eq!(TASK_STORAGE_MODES.len() + LRU_MODES.len(), MODES.len());
    }
}
