//! `--probe.cachestat.per-cgroup`: `usescope_cgroup_page_cache_accesses_total`
//! and `usescope_cgroup_page_cache_misses_total`, the page-cache accesses
//! and misses of each reading task's memory cgroup, labelled as the cgroup
//! collector labels its series (`cgroup`, `container_id`, `pod_uid`).
//!
//! The kernel side (ebpf-probes/cachestat.bpf.c, slots from
//! ebpf-probes/cgroup_slot.h, shared with runqlat) keeps the counts per
//! slot of a per-CPU array and a hash from cgroup id to slot, in the v1
//! `memory` hierarchy where it is mounted, else the v2 one. Ids resolve,
//! label and fold into `cgroup="other"` as runqlat's per-cgroup histograms
//! do ([`crate::probes::cgroup_ids`]): unselected cgroups, ids past the
//! walk's bounds and the counts of cgroups that found the map full (entry
//! 1 of us_cs_counts) go to `other`, so the series add up to the host
//! counters. A series grows by the increases of the ids summed into it, so
//! it never goes down when a child cgroup ends; a series whose last cgroup
//! has gone ends and its counts move to `other`, so the sums over cgroups
//! never go down. The slots of cgroups that have gone are freed (id
//! deleted, counts zeroed, slot queued for reuse).

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};

use regex::Regex;

use crate::kernel::cgroup_path::workload_ids;
use crate::kernel::error::CollectError;
pub use crate::probes::cgroup_ids::Hierarchy;
use crate::probes::cgroup_ids::{Resolver, label_of};
use crate::probes::layout::{CACHESTAT_ACCESSES_WORD, CACHESTAT_MISSES_WORD, CachestatCounts};
use crate::probes::percpu::PerCpuStruct;
use crate::probes::sys;
use crate::scrape::exposition::{Desc, Encoder};

/// The per-CPU array of per-cgroup counts, by slot.
pub const MAP: &str = "us_cs_cg";
/// The hash cgroup id -> slot.
pub const SLOT_MAP: &str = "us_cs_cg_slot";
/// The queue of freed slots.
pub const FREE_MAP: &str = "us_cs_cg_free";
/// Entry of us_cs_counts holding the counts of cgroups that found the map
/// full (CS_OVERFLOW_KEY in cachestat.bpf.c).
const OVERFLOW_KEY: u32 = 1;

pub const ACCESSES: Desc = Desc::counter(
    "usescope_cgroup_page_cache_accesses_total",
    "Pages the tasks of each memory cgroup asked the page cache for (--probe.cachestat.per-cgroup; cgroup=\"other\" sums unselected cgroups and those past --probe.cachestat.max-cgroups).",
);
pub const MISSES: Desc = Desc::counter(
    "usescope_cgroup_page_cache_misses_total",
    "Pages the tasks of each memory cgroup asked for that were not in the page cache (--probe.cachestat.per-cgroup; cgroup=\"other\" as for accesses).",
);
pub const OVERFLOW: Desc = Desc::counter(
    "usescope_cgroup_page_cache_overflow_accesses_total",
    "Page-cache accesses of cgroups that found the per-cgroup map full (--probe.cachestat.max-cgroups), counted in cgroup=\"other\".",
);

/// Accesses, misses.
type Counts = [u64; 2];

fn counts(m: &PerCpuStruct) -> Counts {
    [m.sum(CACHESTAT_ACCESSES_WORD), m.sum(CACHESTAT_MISSES_WORD)]
}

fn add(to: &mut Counts, now: &Counts, last: &Counts) {
    for i in 0..2 {
        to[i] = to[i].wrapping_add(now[i].wrapping_sub(last[i]));
    }
}

#[derive(Default)]
struct Series {
    counts: Counts,
    container_id: String,
    pod_uid: String,
    /// Entries summed into it that were in the map at the last read.
    entries: usize,
}

struct Entry {
    slot: u32,
    /// None: folded into `other`.
    label: Option<String>,
    path: Vec<u8>,
    last: Counts,
}

/// The per-cgroup part of cachestat's collector.
pub struct CgroupCounts {
    counts: PerCpuStruct,
    slots: OwnedFd,
    free: OwnedFd,
    /// Zeroes, one value per possible CPU, to clear a freed slot.
    zeroes: Vec<u64>,
    overflow: PerCpuStruct,
    overflow_last: Counts,
    resolver: Resolver,
    select: Regex,
    entries: HashMap<u64, Entry>,
    series: HashMap<String, Series>,
    other: Counts,
    /// Scratch, reused.
    keys: Vec<u64>,
    order: Vec<String>,
}

impl CgroupCounts {
    /// In the daemon, before privileges are dropped: `names` is what
    /// `load` sent (the ids of [`MAP`], [`SLOT_MAP`] and [`FREE_MAP`],
    /// hierarchy kind, root); `host` a new fd of us_cs_counts; `select`
    /// the cgroups that get series of their own.
    pub fn new(names: &[String], host: OwnedFd, select: Regex) -> Result<CgroupCounts, String> {
        let [counts, slots, free, by, root] = names else {
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
        let value = size_of::<CachestatCounts>();
        let counts = PerCpuStruct::from_fd(MAP, open(MAP, counts)?, value)?;
        let zeroes = vec![0; counts.cpus().len() * value / 8];
        let mut resolver = Resolver::new(hierarchy.root);
        resolver.refresh();
        Ok(CgroupCounts {
            counts,
            slots: open(SLOT_MAP, slots)?,
            free: open(FREE_MAP, free)?,
            zeroes,
            overflow: PerCpuStruct::from_fd(super::MAP, host, value)?,
            overflow_last: [0; 2],
            resolver,
            select,
            entries: HashMap::new(),
            series: HashMap::new(),
            other: [0; 2],
            keys: Vec::new(),
            order: Vec::new(),
        })
    }

    pub fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let err = |e: std::io::Error| CollectError::other("bpf map us_cs_cg", e.to_string());
        self.overflow.read_entry(OVERFLOW_KEY).map_err(err)?;
        let now = counts(&self.overflow);
        add(&mut self.other, &now, &self.overflow_last);
        self.overflow_last = now;

        for s in self.series.values_mut() {
            s.entries = 0;
        }
        self.keys.clear();
        let mut refreshed = false;
        let mut dead = Vec::new();
        let mut prev = None;
        let mut cur = Vec::new();
        // SAFETY (both): SLOT_MAP has 8-byte keys and 4-byte values
        // (cachestat.bpf.c; the kernel refuses other sizes at load).
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
            self.counts.read_entry(slot).map_err(err)?;
            let now = counts(&self.counts);
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
                        // Gone before its first scrape: still counted.
                        add(&mut self.other, &now, &[0; 2]);
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
                        last: [0; 2],
                    },
                );
            }
            let e = self.entries.get_mut(&id).expect("inserted above");
            // Counts that stopped growing may belong to a cgroup that has
            // gone; growing ones have readers, so it has not.
            if now == e.last && !e.path.is_empty() && !self.resolver.alive(id, &e.path) {
                dead.push((id, slot));
                self.entries.remove(&id);
                continue;
            }
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
                    add(&mut s.counts, &now, &e.last);
                }
                None => add(&mut self.other, &now, &e.last),
            }
            e.last = now;
        }
        for (id, slot) in dead {
            self.free_slot(id, slot).map_err(err)?;
            self.entries.remove(&id);
        }
        let keys = &self.keys;
        self.entries.retain(|id, _| keys.contains(id));
        // A series whose last cgroup has gone ends; its counts move to
        // `other`, so the sums over cgroups still equal the host counters
        // and never go down.
        let other = &mut self.other;
        self.series.retain(|_, s| {
            if s.entries == 0 {
                add(other, &s.counts, &[0; 2]);
            }
            s.entries > 0
        });

        self.order.clear();
        self.order.extend(self.series.keys().cloned());
        self.order.sort();
        for (desc, i) in [(&ACCESSES, 0), (&MISSES, 1)] {
            enc.family(desc);
            for l in &self.order {
                let s = &self.series[l];
                let labels = [
                    ("cgroup", l.as_str()),
                    ("container_id", s.container_id.as_str()),
                    ("pod_uid", s.pod_uid.as_str()),
                ];
                enc.sample(desc, &labels, s.counts[i]);
            }
            let labels = [("cgroup", "other"), ("container_id", ""), ("pod_uid", "")];
            enc.sample(desc, &labels, self.other[i]);
        }
        enc.family(&OVERFLOW);
        enc.sample(&OVERFLOW, &[], self.overflow_last[0]);
        Ok(())
    }

    /// Frees the slot of a cgroup that has gone: no task is left to add to
    /// it, so once the id is deleted the counts can be zeroed and the slot
    /// handed to the next new cgroup.
    fn free_slot(&mut self, id: u64, slot: u32) -> std::io::Result<()> {
        // SAFETY: SLOT_MAP has 8-byte keys; MAP is a per-CPU array with
        // u32 keys whose values `zeroes` covers for every possible CPU;
        // FREE_MAP a queue of u32.
        unsafe {
            if !sys::delete_u64_key(self.slots.as_fd(), id)? {
                return Ok(());
            }
            sys::update(self.counts.fd(), Some(&slot), self.zeroes.as_slice())?;
            sys::update::<u32, u32>(self.free.as_fd(), None, &slot)
        }
    }
}
