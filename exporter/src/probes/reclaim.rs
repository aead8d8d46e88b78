//! Reclaim and compaction stalls: `usescope_direct_reclaim_seconds{kind}`
//! (how long an allocating task spent reclaiming memory, `kind` = `global`
//! when the host ran short, `memcg` when its memory cgroup hit its limit)
//! and `usescope_compaction_stall_seconds` (how long an allocating task
//! spent compacting one zone). Buckets: see [`super::log2_hist`].
//!
//! `global` counts the same calls as /proc/vmstat's `allocstall_*`;
//! `memcg` is what a container at its memory limit feels, which allocstall
//! does not count (docs/probes.md, "reclaim").
//!
//! Off by default (`--probe.reclaim`), like the other probes added after
//! the first three. Its hooks fire only when a task stalls, so its cost is
//! per stall, not per page or per allocation.

use std::os::fd::OwnedFd;

use super::layout::{
    LOG2_HIST_BUCKETS, RECLAIM_KINDS, RECLAIM_SLOTS_WORD, RECLAIM_SUM_WORD, ReclaimHists,
};
use super::loader::{self, Kind, Mode, ProbeError};
use super::log2_hist::{self, Buckets, Slots};
use super::percpu::PerCpuStruct;
use super::{Kernel, Loaded, ProbeSettings, ProbeSpec};
use crate::kernel::error::CollectError;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const SPEC: ProbeSpec = ProbeSpec {
    name: "reclaim",
    help: "Direct-reclaim (global, memcg) and compaction stall latency histograms (vmscan and compaction tracepoints); off by default, though it only runs when a task stalls",
    default_enabled: false,
    collector: "probe_reclaim",
    modes: MODES,
    map: MAP,
    flags: &[],
    metrics: &[&RECLAIM, &COMPACTION],
    load,
    build: collector,
};

const RECLAIM: Desc = Desc::histogram(
    "usescope_direct_reclaim_seconds",
    "Time allocating tasks spent in direct reclaim, per stall: kind=global when the host ran short (mm_vmscan_direct_reclaim_begin to _end, what allocstall counts), kind=memcg when a memory cgroup hit its limit (mm_vmscan_memcg_reclaim_begin to _end).",
);
const COMPACTION: Desc = Desc::histogram(
    "usescope_compaction_stall_seconds",
    "Time allocating tasks spent compacting memory, per zone compacted (mm_compaction_begin to _end of direct compaction; kcompactd is not counted).",
);

/// The `kind` label of each reclaim histogram (RECLAIM_KIND_GLOBAL and
/// _MEMCG), and the index of the compaction histogram.
const RECLAIM_KIND_NAMES: [&str; 2] = ["global", "memcg"];
const COMPACTION_KIND: usize = 2;

pub const MODES: &[Mode] = &[
    Mode {
        name: "tp_btf",
        kind: Kind::BtfTracePoint,
        programs: &[
            ("us_dr_end_btf", "mm_vmscan_direct_reclaim_end"),
            ("us_dr_beg_btf", "mm_vmscan_direct_reclaim_begin"),
            ("us_mcg_end_btf", "mm_vmscan_memcg_reclaim_end"),
            ("us_mcg_beg_btf", "mm_vmscan_memcg_reclaim_begin"),
            ("us_cmp_end_btf", "mm_compaction_end"),
            ("us_cmp_beg_btf", "mm_compaction_begin"),
        ],
    },
    Mode {
        name: "raw_tp",
        kind: Kind::RawTracePoint,
        programs: &[
            ("us_dr_end_raw", "mm_vmscan_direct_reclaim_end"),
            ("us_dr_beg_raw", "mm_vmscan_direct_reclaim_begin"),
            ("us_mcg_end_raw", "mm_vmscan_memcg_reclaim_end"),
            ("us_mcg_beg_raw", "mm_vmscan_memcg_reclaim_begin"),
            ("us_cmp_end_raw", "mm_compaction_end"),
            ("us_cmp_beg_raw", "mm_compaction_begin"),
        ],
    },
];

pub const MAP: &str = "us_reclaim";
const VALUE_SIZE: usize = size_of::<ReclaimHists>();

/// In the probe loader process: load and attach. Each end program is
/// attached before its begin, so no begin is recorded without its end.
pub fn load(kernel: &Kernel, _settings: &ProbeSettings) -> Result<Loaded, ProbeError> {
    loader::load_and_attach("reclaim", &kernel.btf, MODES, |_| {})
}

/// In the daemon: the collector over the handed-over map.
pub fn collector(
    map: OwnedFd,
    _names: Vec<String>,
    settings: &ProbeSettings,
) -> Result<Box<dyn Collector>, String> {
    Ok(Box::new(ReclaimCollector {
        hists: PerCpuStruct::from_fd(MAP, map, VALUE_SIZE)?,
        buckets: Buckets::new(settings.histogram),
    }))
}

struct ReclaimCollector {
    hists: PerCpuStruct,
    buckets: Buckets,
}

impl Collector for ReclaimCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.hists
            .read()
            .map_err(|e| CollectError::other("bpf map us_reclaim", e.to_string()))?;
        // Summed over CPUs. Every series is written, zero or not: a host
        // that never stalls should show 0, not nothing.
        let mut slots: [Slots; RECLAIM_KINDS] = [[0; LOG2_HIST_BUCKETS + 1]; RECLAIM_KINDS];
        for cpu in self.hists.cpus() {
            for (kind, s) in slots.iter_mut().enumerate() {
                let start = RECLAIM_SLOTS_WORD + kind * (LOG2_HIST_BUCKETS + 1);
                log2_hist::add_cpu(s, cpu.get(start..).unwrap_or(&[]));
            }
        }
        let sum = |kind: usize| self.hists.sum(RECLAIM_SUM_WORD + kind);
        enc.family(&RECLAIM);
        for (kind, name) in RECLAIM_KIND_NAMES.iter().enumerate() {
            let sum_ns = sum(kind);
            log2_hist::write(
                enc,
                &RECLAIM,
                &mut self.buckets,
                &slots[kind],
                &[("kind", name)],
                sum_ns,
            );
        }
        let sum_ns = sum(COMPACTION_KIND);
        enc.family(&COMPACTION);
        log2_hist::write(
            enc,
            &COMPACTION,
            &mut self.buckets,
            &slots[COMPACTION_KIND],
            &[],
            sum_ns,
        );
        Ok(())
    }
}
