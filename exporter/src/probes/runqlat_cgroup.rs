//! `--probe.runqlat.per-cgroup`: `usescope_cgroup_runqueue_latency_seconds`,
//! the run-queue latency histogram of each cgroup, labelled as the cgroup
//! collector labels its series (`cgroup`, `container_id`, `pod_uid`).
//!
//! The kernel side (ebpf-probes/runqlat_cgroup.h) keeps a histogram per
//! slot of a per-CPU array, and a hash from the waiting task's cgroup id
//! to its slot, in one hierarchy: the v1 `cpu` controller's where it is
//! mounted, else the v2 (unified) one, chosen at load time
//! ([`Hierarchy::find`]). A cgroup's kernfs id is its directory's inode
//! number, so user space resolves ids by walking that hierarchy
//! ([`Resolver`], shared with oomkill in [`crate::probes::cgroup_ids`]):
//! once at start, again when an id is unknown (at most once per scrape).
//!
//! Labels: an id's series is its topmost ancestor-or-self that the cgroup
//! collector's selection (`--collector.cgroup.select`, default
//! [`DEFAULT_SELECT`](crate::kernel::cgroup_path::DEFAULT_SELECT)) matches, so a series
//! here has the `cgroup` label of the cgroup collector's series for the
//! same cgroup; ids with no selected ancestor, ids past the walk's bounds
//! and the waits of cgroups that found the map full are summed into
//! `cgroup="other"`. So the histograms add up to the host's
//! `usescope_runqueue_latency_seconds`.
//!
//! Each series grows by the increases of the ids summed into it, so its
//! counts never go down when a child cgroup ends and its entry is deleted.
//! The slots of cgroups that have gone (found when a histogram stopped
//! growing and the directory no longer has its inode) are freed: id
//! deleted, histogram zeroed, slot queued for the kernel side to reuse. A
//! series disappears with its last cgroup.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};

use regex::Regex;

pub use crate::probes::cgroup_ids::Hierarchy;
use crate::kernel::cgroup_path::workload_ids;
use crate::kernel::error::CollectError;
use crate::probes::cgroup_ids::{Resolver, label_of};
use crate::probes::layout::{LOG2_HIST_BUCKETS, RUNQLAT_SUM_WORD, RunqlatHist};
use crate::probes::log2_hist::{self, Buckets, Slots};
use crate::probes::percpu::PerCpuStruct;
use crate::probes::sys;
use crate::scrape::exposition::{Desc, Encoder};

/// The per-CPU array of per-cgroup histograms, by slot.
pub const MAP: &str = "us_rq_cg";
/// The hash cgroup id -> slot.
pub const SLOT_MAP: &str = "us_rq_cg_slot";
/// The queue of freed slots.
pub const FREE_MAP: &str = "us_rq_cg_free";
/// Entry of us_rq_hist holding the waits of cgroups that found the map
/// full (RQ_HIST_OVERFLOW_KEY in runqlat_cgroup.h).
const OVERFLOW_KEY: u32 = 1;

pub const LATENCY: Desc = Desc::histogram(
    "usescope_cgroup_runqueue_latency_seconds",
    "Time the tasks of each cgroup spent runnable on a run queue before running (--probe.runqlat.per-cgroup; cgroup=\"other\" sums unselected cgroups and those past --probe.runqlat.max-cgroups).",
);
pub const OVERFLOW: Desc = Desc::counter(
    "usescope_cgroup_runqueue_latency_overflow_total",
    "Waits of cgroups that found the per-cgroup map full (--probe.runqlat.max-cgroups), counted in cgroup=\"other\".",
);

#[derive(Default)]
struct Series {
    slots: Slots,
    sum_ns: u64,
    container_id: String,
    pod_uid: String,
    /// Entries summed into it that were in the map at the last read.
    entries: usize,
}

impl Series {
    fn add(&mut self, slots: &Slots, sum_ns: u64) {
        for (a, b) in self.slots.iter_mut().zip(slots) {
            *a = a.wrapping_add(*b);
        }
        self.sum_ns = self.sum_ns.wrapping_add(sum_ns);
    }
}

struct Entry {
    slot: u32,
    /// None: folded into `other`.
    label: Option<String>,
    path: Vec<u8>,
    last: Slots,
    last_sum: u64,
}

/// The per-cgroup part of runqlat's collector.
pub struct CgroupHist {
    hists: PerCpuStruct,
    slots: OwnedFd,
    free: OwnedFd,
    /// Zeroes, one histogram per possible CPU, to clear a freed slot.
    zeroes: Vec<u64>,
    overflow: PerCpuStruct,
    resolver: Resolver,
    select: Regex,
    entries: HashMap<u64, Entry>,
    series: HashMap<String, Series>,
    other: Series,
    overflow_last: Slots,
    overflow_sum_last: u64,
    overflow_total: u64,
    /// Scratch, reused.
    keys: Vec<u64>,
    order: Vec<String>,
    buckets: Buckets,
}

impl CgroupHist {
    /// In the daemon, before privileges are dropped: `names` is what
    /// `load` sent (the ids of [`MAP`], [`SLOT_MAP`] and [`FREE_MAP`],
    /// hierarchy kind, root); `hist` a new fd of us_rq_hist; `buckets` the
    /// host histogram's resolution; `select` the cgroups that get series
    /// of their own (`--collector.cgroup.select`).
    pub fn new(
        names: &[String],
        hist: OwnedFd,
        buckets: Buckets,
        select: Regex,
    ) -> Result<CgroupHist, String> {
        let [hists, slots, free, by, root] = names else {
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
        let hists = PerCpuStruct::from_fd(MAP, open(MAP, hists)?, size_of::<RunqlatHist>())?;
        let zeroes = vec![0; hists.cpus().len() * size_of::<RunqlatHist>() / 8];
        let mut resolver = Resolver::new(hierarchy.root);
        resolver.refresh();
        Ok(CgroupHist {
            hists,
            slots: open(SLOT_MAP, slots)?,
            free: open(FREE_MAP, free)?,
            zeroes,
            overflow: PerCpuStruct::from_fd(super::MAP, hist, size_of::<RunqlatHist>())?,
            resolver,
            select,
            entries: HashMap::new(),
            series: HashMap::new(),
            other: Series::default(),
            overflow_last: [0; LOG2_HIST_BUCKETS + 1],
            overflow_sum_last: 0,
            overflow_total: 0,
            keys: Vec::new(),
            order: Vec::new(),
            buckets,
        })
    }

    pub fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let err = |e: std::io::Error| CollectError::other("bpf map us_rq_cg", e.to_string());
        self.overflow.read_entry(OVERFLOW_KEY).map_err(err)?;
        let (slots, sum) = totals(self.overflow.cpus());
        let (inc, inc_sum) = increase(&slots, sum, &self.overflow_last, self.overflow_sum_last);
        self.other.add(&inc, inc_sum);
        self.overflow_total = slots.iter().fold(0u64, |a, b| a.wrapping_add(*b));
        (self.overflow_last, self.overflow_sum_last) = (slots, sum);

        for s in self.series.values_mut() {
            s.entries = 0;
        }
        self.keys.clear();
        let mut refreshed = false;
        let mut dead = Vec::new();
        let mut prev = None;
        let mut cur = Vec::new();
        // SAFETY (both): SLOT_MAP has 8-byte keys and 4-byte values
        // (runqlat_cgroup.h; the kernel refuses other sizes at load).
        while let Some(id) =
            unsafe { sys::next_key(self.slots.as_fd(), prev.as_ref()) }.map_err(err)?
        {
            prev = Some(id);
            if let Some(slot) =
                unsafe { sys::lookup_u64::<u32>(self.slots.as_fd(), id) }.map_err(err)?
            {
                cur.push((id, slot));
            }
        }
        for (id, slot) in cur {
            self.hists.read_entry(slot).map_err(err)?;
            let (slots, sum) = totals(self.hists.cpus());
            if self.entries.get(&id).is_some_and(|e| e.slot != slot) {
                self.entries.remove(&id);
            }
            if !self.entries.contains_key(&id) {
                if self.resolver.get(id).is_none() && !refreshed {
                    self.resolver.refresh();
                    refreshed = true;
                }
                let path = match self.resolver.get(id) {
                    Some(p) => p.to_vec(),
                    // Past the walk's bounds: counted, in `other`.
                    None if self.resolver.limited() => Vec::new(),
                    None => {
                        dead.push((id, slot));
                        continue;
                    }
                };
                let label = if path.is_empty() {
                    None
                } else {
                    label_of(&path, &self.select)
                };
                self.entries.insert(
                    id,
                    Entry {
                        slot,
                        label,
                        path,
                        last: [0; LOG2_HIST_BUCKETS + 1],
                        last_sum: 0,
                    },
                );
            }
            let e = self.entries.get_mut(&id).expect("inserted above");
            // A histogram that stopped growing may belong to a cgroup that
            // has gone; one that grows has tasks, so it has not.
            if sum == e.last_sum && !e.path.is_empty() && !self.resolver.alive(id, &e.path) {
                dead.push((id, slot));
                self.entries.remove(&id);
                continue;
            }
            let (inc, inc_sum) = increase(&slots, sum, &e.last, e.last_sum);
            (e.last, e.last_sum) = (slots, sum);
            self.keys.push(id);
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
                    s.add(&inc, inc_sum);
                }
                None => self.other.add(&inc, inc_sum),
            }
        }
        for (id, slot) in dead {
            self.free_slot(id, slot).map_err(err)?;
            self.entries.remove(&id);
        }
        // Entries the kernel no longer has (deleted above at an earlier
        // scrape): forget them; a series without entries has ended.
        let keys = &self.keys;
        self.entries.retain(|id, _| keys.contains(id));
        self.series.retain(|_, s| s.entries > 0);

        enc.family(&LATENCY);
        self.order.clear();
        self.order.extend(self.series.keys().cloned());
        self.order.sort();
        for l in &self.order {
            let s = &self.series[l];
            let labels = [
                ("cgroup", l.as_str()),
                ("container_id", s.container_id.as_str()),
                ("pod_uid", s.pod_uid.as_str()),
            ];
            log2_hist::write(
                enc,
                &LATENCY,
                &mut self.buckets,
                &s.slots,
                &labels,
                s.sum_ns,
            );
        }
        let labels = [("cgroup", "other"), ("container_id", ""), ("pod_uid", "")];
        log2_hist::write(
            enc,
            &LATENCY,
            &mut self.buckets,
            &self.other.slots,
            &labels,
            self.other.sum_ns,
        );
        enc.family(&OVERFLOW);
        enc.sample(&OVERFLOW, &[], self.overflow_total);
        Ok(())
    }
}

impl CgroupHist {
    /// Frees the slot of a cgroup that has gone: no task is left to add to
    /// it, so once the id is deleted the histogram can be zeroed and the
    /// slot handed to the next new cgroup.
    fn free_slot(&mut self, id: u64, slot: u32) -> std::io::Result<()> {
        // SAFETY: SLOT_MAP has 8-byte keys; MAP is a per-CPU array with
        // u32 keys whose values `zeroes` covers for every possible CPU;
        // FREE_MAP a queue of u32.
        unsafe {
            if !sys::delete_u64_key(self.slots.as_fd(), id)? {
                return Ok(());
            }
            sys::update(self.hists.fd(), Some(&slot), self.zeroes.as_slice())?;
            sys::update::<u32, u32>(self.free.as_fd(), None, &slot)
        }
    }
}

/// One entry's slots and nanosecond sum, over CPUs.
fn totals<'a>(cpus: impl Iterator<Item = &'a [u64]>) -> (Slots, u64) {
    let mut slots = [0; LOG2_HIST_BUCKETS + 1];
    let mut sum = 0u64;
    for cpu in cpus {
        log2_hist::add_cpu(&mut slots, cpu);
        sum = sum.wrapping_add(cpu.get(RUNQLAT_SUM_WORD).copied().unwrap_or(0));
    }
    (slots, sum)
}

/// What an entry grew by since the last read.
fn increase(now: &Slots, sum: u64, last: &Slots, last_sum: u64) -> (Slots, u64) {
    let mut inc = [0; LOG2_HIST_BUCKETS + 1];
    for (i, d) in inc.iter_mut().enumerate() {
        *d = now[i].wrapping_sub(last[i]);
    }
    (inc, sum.wrapping_sub(last_sum))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn increases_wrap() {
        let mut now = [0; LOG2_HIST_BUCKETS + 1];
        let mut last = [0; LOG2_HIST_BUCKETS + 1];
        now[3] = 5;
        last[3] = 2;
        let (inc, s) = increase(&now, 10, &last, 4);
        assert_eq!((inc[3], s), (3, 6));
    }
}
