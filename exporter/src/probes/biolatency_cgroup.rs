//! `--probe.biolatency.per-cgroup`: `usescope_cgroup_block_io_latency_seconds`,
//! the block I/O latency histogram of each cgroup per op group (no
//! `device` label, to bound the series), labelled as the cgroup collector
//! labels its series (`cgroup`, `container_id`, `pod_uid`).
//!
//! The cgroup of a request is the one its I/O is charged to, the blkcg of
//! its bio (ebpf-probes/biolatency.bpf.c): the v1 `blkio` hierarchy's
//! cgroup where that is mounted, else the v2 one ([`Hierarchy::find`]); on
//! v2, the nearest ancestor with the `io` controller enabled. The kernel
//! side keeps a per-CPU hash from cgroup id to one histogram per op group,
//! of at most `--probe.biolatency.max-cgroups` entries, and a two-entry
//! array of what it could not put there: requests of cgroups that found the
//! hash full (`map_full`) and requests without a cgroup (`no_cgroup`: no
//! bio, as the flush requests the block layer makes itself, or no blkg).
//!
//! Labels ([`label_of`]): an id's series is its topmost ancestor-or-self
//! that `--collector.cgroup.select` matches; unselected ids, ids past the
//! resolver's bounds and the two folds are summed into `cgroup="other"`,
//! so the histograms add up to the host's `usescope_block_io_latency_seconds`
//! summed over devices (`usescope_cgroup_block_io_latency_folded_total`
//! counts the folds by reason).
//!
//! As in runqlat's per-cgroup view, each series grows by the increases of
//! the ids summed into it, so its counts never go down. The entries of
//! cgroups that have gone (found when a histogram stopped growing and the
//! directory no longer has its inode) are deleted from the map; a series
//! disappears with its last cgroup. An id already gone when first seen
//! (I/O completing after its cgroup was removed) cannot be named: its
//! counts go to `other`, its entry is deleted.

use std::collections::HashMap;

use regex::Regex;

use crate::kernel::cgroup_path::workload_ids;
use crate::kernel::error::CollectError;
pub use crate::probes::cgroup_ids::Hierarchy;
use crate::probes::cgroup_ids::{Resolver, label_of};
use crate::probes::layout::{
    BIOLAT_FOLD_MAP_FULL, BIOLAT_FOLD_NO_CGROUP, BIOLAT_FOLDS, BIOLAT_OP_NAMES, BIOLAT_OPS,
    BiolatCgHist, LOG2_HIST_BUCKETS, word,
};
use crate::probes::log2_hist::{self, Buckets, Slots};
use crate::probes::percpu::{PerCpuHash, PerCpuStruct};
use crate::probes::sys;
use crate::scrape::exposition::{Desc, Encoder};

/// The per-CPU hash cgroup id -> histograms.
pub const MAP: &str = "us_bio_cg";
/// The per-CPU array of folded histograms (BIOLAT_FOLD_*).
pub const FOLD_MAP: &str = "us_bio_cg_fold";

const SLOTS_WORD: usize = word(std::mem::offset_of!(BiolatCgHist, slots));
const SUM_WORD: usize = word(std::mem::offset_of!(BiolatCgHist, sum_ns));
/// `reason` label values by BIOLAT_FOLD_* index.
const FOLD_REASONS: [(usize, &str); BIOLAT_FOLDS] = [
    (BIOLAT_FOLD_MAP_FULL, "map_full"),
    (BIOLAT_FOLD_NO_CGROUP, "no_cgroup"),
];

pub const LATENCY: Desc = Desc::histogram(
    "usescope_cgroup_block_io_latency_seconds",
    "Block I/O service time (issue to completion) of the requests charged to each cgroup (the blkcg of the request's bio), per op (--probe.biolatency.per-cgroup; cgroup=\"other\" sums unselected cgroups and what usescope_cgroup_block_io_latency_folded_total counts).",
);
pub const FOLDED: Desc = Desc::counter(
    "usescope_cgroup_block_io_latency_folded_total",
    "Block I/O requests counted in cgroup=\"other\" of usescope_cgroup_block_io_latency_seconds although their cgroup may be selected: map_full (the kernel's map held --probe.biolatency.max-cgroups cgroups), no_cgroup (no bio or blkg: flush requests the block layer makes itself).",
);

/// Histograms per op group.
#[derive(Clone, Copy, Default)]
struct Hists {
    slots: [Slots; BIOLAT_OPS],
    sum_ns: [u64; BIOLAT_OPS],
}

impl Hists {
    /// One entry's histograms, summed over CPUs.
    fn of<'a>(cpus: impl Iterator<Item = &'a [u64]>) -> Hists {
        let mut h = Hists::default();
        for cpu in cpus {
            for op in 0..BIOLAT_OPS {
                let start = SLOTS_WORD + op * (LOG2_HIST_BUCKETS + 1);
                log2_hist::add_cpu(&mut h.slots[op], cpu.get(start..).unwrap_or(&[]));
                let sum = cpu.get(SUM_WORD + op).copied().unwrap_or(0);
                h.sum_ns[op] = h.sum_ns[op].wrapping_add(sum);
            }
        }
        h
    }

    fn add(&mut self, other: &Hists) {
        for op in 0..BIOLAT_OPS {
            for (a, b) in self.slots[op].iter_mut().zip(&other.slots[op]) {
                *a = a.wrapping_add(*b);
            }
            self.sum_ns[op] = self.sum_ns[op].wrapping_add(other.sum_ns[op]);
        }
    }

    /// What `self` grew by since `last`.
    fn since(&self, last: &Hists) -> Hists {
        let mut d = Hists::default();
        for op in 0..BIOLAT_OPS {
            for (k, v) in d.slots[op].iter_mut().enumerate() {
                *v = self.slots[op][k].wrapping_sub(last.slots[op][k]);
            }
            d.sum_ns[op] = self.sum_ns[op].wrapping_sub(last.sum_ns[op]);
        }
        d
    }

    fn count(&self, op: usize) -> u64 {
        self.slots[op].iter().fold(0u64, |a, b| a.wrapping_add(*b))
    }
}

#[derive(Default)]
struct Series {
    hists: Hists,
    container_id: String,
    pod_uid: String,
    /// Entries summed into it that were in the map at the last read.
    entries: usize,
}

struct Entry {
    /// None: summed into `other`.
    label: Option<String>,
    path: Vec<u8>,
    last: Hists,
}

/// The per-cgroup part of biolatency's collector.
pub struct CgroupHist {
    hists: PerCpuHash,
    folds: PerCpuStruct,
    resolver: Resolver,
    select: Regex,
    entries: HashMap<u64, Entry>,
    series: HashMap<String, Series>,
    other: Series,
    fold_last: [Hists; BIOLAT_FOLDS],
    /// Scratch, reused.
    order: Vec<String>,
    buckets: Buckets,
}

impl CgroupHist {
    /// In the daemon, before privileges are dropped: `names` is what
    /// `load` sent (the ids of [`MAP`] and [`FOLD_MAP`], hierarchy kind,
    /// root); `select` the cgroups that get series of their own
    /// (`--collector.cgroup.select`).
    pub fn new(names: &[String], buckets: Buckets, select: Regex) -> Result<CgroupHist, String> {
        let [hists, folds, by, root] = names else {
            return Err(format!(
                "the probe loader sent {names:?} for the per-cgroup maps"
            ));
        };
        let open = |name: &str, id: &str| {
            let id: u32 = id
                .parse()
                .map_err(|_| format!("map {name}: bad id {id:?}"))?;
            sys::map_fd_by_id(id).map_err(|e| format!("map {name} (id {id}): {e}"))
        };
        let hierarchy = Hierarchy::from_names(by, root)?;
        let size = size_of::<BiolatCgHist>();
        let mut resolver = Resolver::new(hierarchy.root);
        resolver.refresh();
        Ok(CgroupHist {
            hists: PerCpuHash::from_fd(MAP, open(MAP, hists)?, size)?,
            folds: PerCpuStruct::from_fd(FOLD_MAP, open(FOLD_MAP, folds)?, size)?,
            resolver,
            select,
            entries: HashMap::new(),
            series: HashMap::new(),
            other: Series::default(),
            fold_last: [Hists::default(); BIOLAT_FOLDS],
            order: Vec::new(),
            buckets,
        })
    }

    pub fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let err = |e: std::io::Error| CollectError::other("bpf map us_bio_cg", e.to_string());
        let mut folded = [0u64; BIOLAT_FOLDS];
        for (i, last) in self.fold_last.iter_mut().enumerate() {
            self.folds.read_entry(i as u32).map_err(err)?;
            let now = Hists::of(self.folds.cpus());
            self.other.hists.add(&now.since(last));
            folded[i] = (0..BIOLAT_OPS).fold(0u64, |a, op| a.wrapping_add(now.count(op)));
            *last = now;
        }

        self.hists.read().map_err(err)?;
        for s in self.series.values_mut() {
            s.entries = 0;
        }
        let mut refreshed = false;
        let mut dead = Vec::new();
        let mut seen = Vec::new();
        for (id, cpus) in self.hists.entries() {
            let now = Hists::of(cpus);
            if !self.entries.contains_key(&id) {
                if self.resolver.get(id).is_none() && !refreshed {
                    self.resolver.refresh();
                    refreshed = true;
                }
                let path = match self.resolver.get(id) {
                    Some(p) => p.to_vec(),
                    // Past the walk's bounds: counted, in `other`.
                    None if self.resolver.limited() => Vec::new(),
                    // Gone before any scrape named it: counted in `other`.
                    None => {
                        self.other.hists.add(&now);
                        dead.push(id);
                        continue;
                    }
                };
                let label = if path.is_empty() {
                    None
                } else {
                    label_of(&path, &self.select)
                };
                let last = Hists::default();
                self.entries.insert(id, Entry { label, path, last });
            }
            let e = self.entries.get_mut(&id).expect("inserted above");
            let inc = now.since(&e.last);
            // An entry that stopped growing may be of a cgroup that has
            // gone; one that grows is still charged I/O. A request still
            // in flight when it is deleted makes a new entry, which the
            // branch above counts in `other`.
            let idle = (0..BIOLAT_OPS).all(|op| inc.count(op) == 0);
            if idle && !e.path.is_empty() && !self.resolver.alive(id, &e.path) {
                dead.push(id);
                self.entries.remove(&id);
                continue;
            }
            e.last = now;
            seen.push(id);
            match &e.label {
                Some(l) => {
                    let s = self.series.entry(l.clone()).or_insert_with(|| {
                        let (container_id, pod_uid) = workload_ids(l);
                        Series {
                            container_id,
                            pod_uid,
                            ..Series::default()
                        }
                    });
                    s.entries += 1;
                    s.hists.add(&inc);
                }
                None => self.other.hists.add(&inc),
            }
        }
        for id in dead {
            // SAFETY: MAP has 8-byte keys (checked in PerCpuHash::from_fd).
            unsafe { sys::delete_u64_key(self.hists.fd(), id) }.map_err(err)?;
        }
        // Entries the kernel no longer has: forget them; a series without
        // entries has ended.
        self.entries.retain(|id, _| seen.contains(id));
        self.series.retain(|_, s| s.entries > 0);

        enc.family(&LATENCY);
        self.order.clear();
        self.order.extend(self.series.keys().cloned());
        self.order.sort();
        for l in &self.order {
            let s = &self.series[l];
            write(enc, &mut self.buckets, l, s);
        }
        write(enc, &mut self.buckets, "other", &self.other);
        enc.family(&FOLDED);
        for (i, reason) in FOLD_REASONS {
            enc.sample(&FOLDED, &[("reason", reason)], folded[i]);
        }
        Ok(())
    }
}

/// A series' histograms, one per op group that has had I/O (a cgroup that
/// never discards writes no discard series).
fn write(enc: &mut Encoder, buckets: &mut Buckets, cgroup: &str, s: &Series) {
    for (op, name) in BIOLAT_OP_NAMES.iter().enumerate() {
        if s.hists.count(op) == 0 {
            continue;
        }
        let labels = [
            ("cgroup", cgroup),
            ("container_id", s.container_id.as_str()),
            ("pod_uid", s.pod_uid.as_str()),
            ("op", name),
        ];
        log2_hist::write(
            enc,
            &LATENCY,
            buckets,
            &s.hists.slots[op],
            &labels,
            s.hists.sum_ns[op],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_read_per_op_from_the_c_layout() {
        // Two CPUs' values of struct biolat_cg_hist, as words.
        let words = size_of::<BiolatCgHist>() / 8;
        let mut cpu = vec![0u64; words];
        cpu[SLOTS_WORD + (LOG2_HIST_BUCKETS + 1) + 3] = 2; // write, bucket 3
        cpu[SUM_WORD + 1] = 500;
        cpu[SLOTS_WORD + LOG2_HIST_BUCKETS] = 1; // read, +Inf
        let h = Hists::of([cpu.as_slice(), cpu.as_slice()].into_iter());
        assert_eq!((h.count(0), h.count(1), h.count(2)), (2, 4, 0));
        assert_eq!((h.slots[1][3], h.sum_ns[1]), (4, 1000));
        let d = h.since(&Hists::of([cpu.as_slice()].into_iter()));
        assert_eq!((d.count(1), d.sum_ns[1]), (2, 500));
    }

    #[test]
    fn fold_reasons_follow_the_header() {
        assert_eq!(FOLD_REASONS.map(|(i, _)| i), [0, 1]);
        assert_eq!(BIOLAT_FOLD_MAP_FULL, 0);
        assert_eq!(BIOLAT_FOLD_NO_CGROUP, 1);
    }
}
