//! Softirqs: `usescope_softirq_seconds_total{cpu,vector}` (time in each
//! vector's handler), `usescope_softirq_entries_total{cpu,vector}` (handler
//! runs, the same events /proc/softirqs counts) and
//! `usescope_softirq_latency_seconds{vector}` (a histogram of the time from
//! the first raise to the handler's entry, summed over CPUs; buckets: see
//! [`super::log2_hist`]).
//!
//! Off by default (`--probe.softirq`): a busy network host runs hundreds of
//! thousands of softirqs a second, each costing three program runs.

use std::os::fd::OwnedFd;

use super::layout::{
    LOG2_HIST_BUCKETS, SOFTIRQ_ENTRIES_WORD, SOFTIRQ_LATENCY_SLOTS_WORD, SOFTIRQ_LATENCY_SUM_WORD,
    SOFTIRQ_TIME_WORD, SOFTIRQ_VECS, SoftirqCounts,
};
use super::loader::{self, Kind, Mode, ProbeError};
use super::log2_hist::{self, Buckets, Slots};
use super::percpu::PerCpuStruct;
use super::{Kernel, Loaded, ProbeSettings, ProbeSpec};
use crate::kernel::error::CollectError;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder, u64_label};

pub const SPEC: ProbeSpec = ProbeSpec {
    name: "softirq",
    help: "Softirq time and entries per CPU and vector, raise-to-entry latency histogram (softirq tracepoints); off by default: three program runs per softirq",
    default_enabled: false,
    collector: "probe_softirq",
    modes: MODES,
    map: MAP,
    flags: &[],
    metrics: &[&SECONDS, &ENTRIES, &LATENCY],
    load,
    build: collector,
};

/// The vectors in kernel order (`enum { HI_SOFTIRQ, ... }`), named as the
/// rows of /proc/softirqs. The order has been fixed since 4.5.
pub const VECTOR_NAMES: [&str; SOFTIRQ_VECS] = [
    "HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU",
];

const SECONDS: Desc = Desc::counter(
    "usescope_softirq_seconds_total",
    "Time spent in softirq handlers, per CPU and vector (softirq_entry to softirq_exit).",
);
const ENTRIES: Desc = Desc::counter(
    "usescope_softirq_entries_total",
    "Softirq handler runs, per CPU and vector (softirq_entry; what /proc/softirqs counts).",
);
const LATENCY: Desc = Desc::histogram(
    "usescope_softirq_latency_seconds",
    "Time from a softirq's first raise to its handler's entry, per vector (softirq_raise to softirq_entry).",
);

pub const MODES: &[Mode] = &[
    Mode {
        name: "tp_btf",
        kind: Kind::BtfTracePoint,
        programs: &[
            ("us_si_raise_btf", "softirq_raise"),
            ("us_si_entry_btf", "softirq_entry"),
            ("us_si_exit_btf", "softirq_exit"),
        ],
    },
    Mode {
        name: "raw_tp",
        kind: Kind::RawTracePoint,
        programs: &[
            ("us_si_raise_raw", "softirq_raise"),
            ("us_si_entry_raw", "softirq_entry"),
            ("us_si_exit_raw", "softirq_exit"),
        ],
    },
];

pub const MAP: &str = "us_softirq";
const VALUE_SIZE: usize = size_of::<SoftirqCounts>();

/// In the probe loader process: load and attach.
pub fn load(kernel: &Kernel, _settings: &ProbeSettings) -> Result<Loaded, ProbeError> {
    loader::load_and_attach("softirq", &kernel.btf, MODES, |_| {})
}

/// In the daemon: the collector over the handed-over map.
pub fn collector(
    map: OwnedFd,
    _names: Vec<String>,
    settings: &ProbeSettings,
) -> Result<Box<dyn Collector>, String> {
    Ok(Box::new(SoftirqCollector {
        counts: PerCpuStruct::from_fd(MAP, map, VALUE_SIZE)?,
        slots: [[0; LOG2_HIST_BUCKETS + 1]; SOFTIRQ_VECS],
        buckets: Buckets::new(settings.histogram),
    }))
}

struct SoftirqCollector {
    counts: PerCpuStruct,
    /// Latency slots per vector, summed over CPUs; reused.
    slots: [Slots; SOFTIRQ_VECS],
    buckets: Buckets,
}

impl Collector for SoftirqCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.counts
            .read()
            .map_err(|e| CollectError::other("bpf map us_softirq", e.to_string()))?;
        let word = |cpu: &[u64], i: usize| cpu.get(i).copied().unwrap_or(0);
        // Per CPU and vector, only where the vector ran since attach.
        for (desc, base) in [
            (&SECONDS, SOFTIRQ_TIME_WORD),
            (&ENTRIES, SOFTIRQ_ENTRIES_WORD),
        ] {
            enc.family(desc);
            for (i, cpu) in self.counts.cpus().enumerate() {
                let mut label = [0u8; 20];
                let cpu_label = u64_label(i as u64, &mut label);
                for (v, name) in VECTOR_NAMES.iter().enumerate() {
                    if word(cpu, SOFTIRQ_ENTRIES_WORD + v) == 0 {
                        continue;
                    }
                    let labels = [("cpu", cpu_label), ("vector", *name)];
                    let value = word(cpu, base + v);
                    if base == SOFTIRQ_TIME_WORD {
                        enc.sample(desc, &labels, value as f64 / 1e9);
                    } else {
                        enc.sample(desc, &labels, value);
                    }
                }
            }
        }
        self.slots = [[0; LOG2_HIST_BUCKETS + 1]; SOFTIRQ_VECS];
        let mut sums = [0u64; SOFTIRQ_VECS];
        for cpu in self.counts.cpus() {
            for (v, slots) in self.slots.iter_mut().enumerate() {
                let start = SOFTIRQ_LATENCY_SLOTS_WORD + v * (LOG2_HIST_BUCKETS + 1);
                log2_hist::add_cpu(slots, cpu.get(start..).unwrap_or(&[]));
                sums[v] = sums[v].wrapping_add(word(cpu, SOFTIRQ_LATENCY_SUM_WORD + v));
            }
        }
        enc.family(&LATENCY);
        for (v, name) in VECTOR_NAMES.iter().enumerate() {
            if self.slots[v].iter().all(|&n| n == 0) {
                continue;
            }
            let labels = [("vector", *name)];
            log2_hist::write(
                enc,
                &LATENCY,
                &mut self.buckets,
                &self.slots[v],
                &labels,
                sums[v],
            );
        }
        Ok(())
    }
}
