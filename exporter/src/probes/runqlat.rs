//! Run-queue latency: `usescope_runqueue_latency_seconds`, a histogram of
//! the time from a task becoming runnable (wakeup, or switched out while
//! still runnable) to it running, plus `usescope_runqueue_latency_missed_total`.
//!
//! Buckets are log2 from 1 µs to 2^24 µs (16.8 s): `le = 1e-6 * 2^k`, and a
//! value goes into the first bucket with `le >= v` (ceil, unlike bcc's
//! floor), so every `le` is a true upper bound. `_sum` is exact: the kernel
//! adds nanoseconds into a per-CPU u64.

use super::layout::{
    RUNQLAT_BUCKETS, RUNQLAT_MISSED_WORD, RUNQLAT_OVERFLOW, RUNQLAT_SUM_WORD, RunqlatHist,
};
use super::loader::{self, Kind, Mode, ProbeError};
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
    "Switch-ins not measured because no start time was recorded (task runnable since before attach, or evicted from the bounded start map).",
);

pub const MODES: &[Mode] = &[
    Mode {
        name: "tp_btf",
        kind: Kind::BtfTracePoint,
        programs: &[
            ("us_rq_wake_btf", "sched_wakeup"),
            ("us_rq_wknew_btf", "sched_wakeup_new"),
            ("us_rq_swtch_btf", "sched_switch"),
        ],
    },
    Mode {
        name: "raw_tp",
        kind: Kind::RawTracePoint,
        programs: &[
            ("us_rq_wake_raw", "sched_wakeup"),
            ("us_rq_wknew_raw", "sched_wakeup_new"),
            ("us_rq_swtch_raw", "sched_switch"),
        ],
    },
];

/// The bucket of a latency in nanoseconds: the smallest k with
/// 1 µs · 2^k >= ns, or [`RUNQLAT_OVERFLOW`] past 2^24 µs. Mirrors
/// `bucket_of` in ebpf-probes/runqlat.bpf.c.
pub fn bucket_of(ns: u64) -> usize {
    let us = ns.div_ceil(1000);
    if us <= 1 {
        return 0;
    }
    let k = (64 - (us - 1).leading_zeros()) as usize;
    if k < RUNQLAT_BUCKETS {
        k
    } else {
        RUNQLAT_OVERFLOW
    }
}

/// Upper bound of bucket k in seconds.
pub fn le_of(k: usize) -> f64 {
    (1u64 << k) as f64 / 1e6
}

/// The per-CPU map the collector reads, and its value.
pub const MAP: &str = "us_rq_hist";
pub const VALUE_SIZE: usize = size_of::<RunqlatHist>();

/// In the probe loader process: load and attach.
pub fn load(kernel: &Kernel, settings: &ProbeSettings) -> Result<Loaded, ProbeError> {
    let max_tasks = settings.runqlat_max_tasks;
    loader::load_and_attach(loader::RUNQLAT_OBJ, &kernel.btf, MODES, |l| {
        l.map_max_entries("us_rq_start", max_tasks);
    })
}

/// In the daemon: the collector over the handed-over histogram map.
pub fn collector(
    hist: PerCpuStruct,
    _names: Vec<String>,
    settings: &ProbeSettings,
) -> Box<dyn Collector> {
    Box::new(RunqlatCollector {
        hist,
        per_cpu: settings.runqlat_per_cpu,
        slots: [0; RUNQLAT_BUCKETS + 1],
        buckets: Vec::with_capacity(RUNQLAT_BUCKETS),
    })
}

struct RunqlatCollector {
    hist: PerCpuStruct,
    per_cpu: bool,
    /// Per-bucket counts being summed, reused across scrapes.
    slots: [u64; RUNQLAT_BUCKETS + 1],
    /// (le, cumulative count) handed to the encoder, reused.
    buckets: Vec<(f64, u64)>,
}

/// Encodes per-bucket counts and a nanosecond sum as one histogram series.
fn write(
    enc: &mut Encoder,
    buckets: &mut Vec<(f64, u64)>,
    slots: &[u64; RUNQLAT_BUCKETS + 1],
    labels: &[(&str, &str)],
    sum_ns: u64,
) {
    buckets.clear();
    let mut cumulative = 0u64;
    for (k, n) in slots[..RUNQLAT_BUCKETS].iter().enumerate() {
        cumulative = cumulative.wrapping_add(*n);
        buckets.push((le_of(k), cumulative));
    }
    let count = cumulative.wrapping_add(slots[RUNQLAT_OVERFLOW]);
    enc.histogram(&LATENCY, labels, buckets, sum_ns as f64 / 1e9, count);
}

fn add_cpu(slots: &mut [u64; RUNQLAT_BUCKETS + 1], cpu: &[u64]) {
    for (s, v) in slots.iter_mut().zip(cpu) {
        *s = s.wrapping_add(*v);
    }
}

impl Collector for RunqlatCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.hist
            .read()
            .map_err(|e| CollectError::other("bpf map us_rq_hist", e.to_string()))?;
        enc.family(&LATENCY);
        let mut sum_ns = 0u64;
        self.slots = [0; RUNQLAT_BUCKETS + 1];
        for (i, cpu) in self.hist.cpus().enumerate() {
            let cpu_sum = cpu.get(RUNQLAT_SUM_WORD).copied().unwrap_or(0);
            if self.per_cpu {
                self.slots = [0; RUNQLAT_BUCKETS + 1];
                add_cpu(&mut self.slots, cpu);
                let mut label = [0u8; 20];
                let labels = [("cpu", u64_label(i as u64, &mut label))];
                write(enc, &mut self.buckets, &self.slots, &labels, cpu_sum);
            } else {
                add_cpu(&mut self.slots, cpu);
                sum_ns = sum_ns.wrapping_add(cpu_sum);
            }
        }
        if !self.per_cpu {
            write(enc, &mut self.buckets, &self.slots, &[], sum_ns);
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
    fn buckets_are_true_upper_bounds() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1), 0);
        assert_eq!(bucket_of(1000), 0, "exactly 1 µs is in le=1e-6");
        assert_eq!(bucket_of(1001), 1);
        assert_eq!(bucket_of(2000), 1);
        assert_eq!(bucket_of(2001), 2);
        assert_eq!(bucket_of(3_000), 2);
        assert_eq!(bucket_of(4_000), 2);
        assert_eq!(bucket_of(4_001), 3);
        // 2^24 µs = 16.777216 s is the last finite bucket.
        let top = (1u64 << 24) * 1000;
        assert_eq!(bucket_of(top), 24);
        assert_eq!(bucket_of(top + 1), RUNQLAT_OVERFLOW);
        assert_eq!(bucket_of(u64::MAX), RUNQLAT_OVERFLOW);
        // Every value is <= its bucket's le and > the previous le.
        for ns in [
            1u64,
            999,
            1000,
            1001,
            123_456,
            7_999_999,
            10_000_000_000,
            top,
        ] {
            let k = bucket_of(ns);
            let v = ns as f64 / 1e9;
            assert!(v <= le_of(k) + 1e-15, "{ns} ns > le {}", le_of(k));
            if k > 0 {
                assert!(v > le_of(k - 1), "{ns} ns <= previous le {}", le_of(k - 1));
            }
        }
    }

    #[test]
    fn le_values() {
        assert_eq!(le_of(0), 1e-6);
        assert_eq!(le_of(1), 2e-6);
        assert_eq!(le_of(10), 0.001024);
        assert_eq!(le_of(24), 16.777216);
    }
}
