//! `--probe.runqlat.per-cgroup`: `usescope_cgroup_runqueue_latency_seconds`,
//! the run-queue latency histogram of each cgroup, labelled as the cgroup
//! collector labels its series (`cgroup`, `container_id`, `pod_uid`).
//!
//! The kernel side (ebpf-probes/runqlat_cgroup.h) keeps a histogram per
//! slot of a per-CPU array, and a hash from the waiting task's cgroup id
//! to its slot, in one hierarchy: the v1 `cpu` controller's where it is
//! mounted, else the v2 (unified) one, chosen here at load time
//! ([`Hierarchy::find`]). A cgroup's kernfs id is its directory's inode
//! number, so user space resolves ids by walking that hierarchy
//! ([`Resolver`]): once at start, again when an id is unknown (at most once
//! per scrape), bounded by [`MAX_WALK`] directories and [`MAX_DEPTH`]
//! levels.
//!
//! Labels: an id's series is its topmost ancestor-or-self that the cgroup
//! collector's selection (`--collector.cgroup.select`, default
//! [`DEFAULT_SELECT`]) matches, so a series
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
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};

use regex::Regex;

use crate::kernel::cgroup_path::{DEFAULT_SELECT, MAX_LABEL_BYTES, escape_into, workload_ids};
use crate::kernel::error::CollectError;
use crate::kernel::mountinfo;
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
/// Most directories one walk of the hierarchy examines.
pub const MAX_WALK: usize = 10_000;
/// Deepest level below the hierarchy's root a walk examines.
pub const MAX_DEPTH: usize = 32;

pub const LATENCY: Desc = Desc::histogram(
    "usescope_cgroup_runqueue_latency_seconds",
    "Time the tasks of each cgroup spent runnable on a run queue before running (--probe.runqlat.per-cgroup; cgroup=\"other\" sums unselected cgroups and those past --probe.runqlat.max-cgroups).",
);
pub const OVERFLOW: Desc = Desc::counter(
    "usescope_cgroup_runqueue_latency_overflow_total",
    "Waits of cgroups that found the per-cgroup map full (--probe.runqlat.max-cgroups), counted in cgroup=\"other\".",
);

/// The hierarchy whose cgroup ids the kernel side reads, and the value of
/// its `cgroup_by` global.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    pub by: u32,
    pub root: PathBuf,
}

/// `cgroup_by` values (runqlat_cgroup.h).
pub const BY_V1_CPU: u32 = 1;
pub const BY_V2: u32 = 2;

impl Hierarchy {
    /// From /proc/self/mountinfo: the v1 hierarchy with the `cpu`
    /// controller if one is mounted (v1 and hybrid hosts), else a cgroup2
    /// mount.
    pub fn find() -> Result<Hierarchy, String> {
        let text = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
        Self::from_mountinfo(&text)
            .ok_or_else(|| "no cgroup hierarchy with the cpu controller and no cgroup2 mount in /proc/self/mountinfo".to_string())
    }

    fn from_mountinfo(text: &str) -> Option<Hierarchy> {
        let mut mounts = Vec::new();
        mountinfo::parse_into(text, &mut mounts).ok()?;
        let root = |m: &mountinfo::Mount| {
            PathBuf::from(String::from_utf8_lossy(&mountinfo::unescape(m.mount_point)).into_owned())
        };
        let cpu_v1 = mounts
            .iter()
            .find(|m| m.fs_type == "cgroup" && m.super_options.split(',').any(|o| o == "cpu"));
        if let Some(m) = cpu_v1 {
            return Some(Hierarchy {
                by: BY_V1_CPU,
                root: root(m),
            });
        }
        mounts
            .iter()
            .find(|m| m.fs_type == "cgroup2")
            .map(|m| Hierarchy {
                by: BY_V2,
                root: root(m),
            })
    }

    /// What travels to the daemon in `Loaded::names` (after the map ids).
    pub fn to_names(&self) -> [String; 2] {
        [self.by.to_string(), self.root.display().to_string()]
    }

    fn from_names(by: &str, root: &str) -> Result<Hierarchy, String> {
        match by.parse() {
            Ok(by @ (BY_V1_CPU | BY_V2)) => Ok(Hierarchy {
                by,
                root: PathBuf::from(root),
            }),
            _ => Err(format!(
                "the probe loader sent an unknown cgroup hierarchy kind {by:?}"
            )),
        }
    }
}

/// Cgroup id (directory inode) → path below the root, from bounded walks.
pub struct Resolver {
    root: PathBuf,
    paths: HashMap<u64, Vec<u8>>,
    /// Whether the last walk stopped at a bound (then an unknown id may be
    /// a live cgroup it did not reach).
    limited: bool,
}

impl Resolver {
    pub fn new(root: PathBuf) -> Resolver {
        Resolver {
            root,
            paths: HashMap::new(),
            limited: false,
        }
    }

    /// Walks the hierarchy again, depth first, links not followed.
    pub fn refresh(&mut self) {
        use std::os::unix::ffi::OsStrExt;
        self.paths.clear();
        self.limited = false;
        let Ok(meta) = std::fs::metadata(&self.root) else {
            return;
        };
        self.paths.insert(meta.ino(), b"/".to_vec());
        let mut stack: Vec<(PathBuf, Vec<u8>, usize)> = vec![(self.root.clone(), Vec::new(), 0)];
        let mut walked = 1;
        while let Some((dir, rel, depth)) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue; // gone mid-walk
            };
            for e in entries.flatten() {
                if !e.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                if walked >= MAX_WALK || depth + 1 > MAX_DEPTH {
                    self.limited = true;
                    continue;
                }
                walked += 1;
                let mut path = rel.clone();
                path.push(b'/');
                path.extend_from_slice(e.file_name().as_bytes());
                self.paths.insert(e.ino(), path.clone());
                stack.push((e.path(), path, depth + 1));
            }
        }
    }

    pub fn get(&self, id: u64) -> Option<&[u8]> {
        self.paths.get(&id).map(Vec::as_slice)
    }

    /// Whether the cgroup `id` resolved to `path` still exists.
    fn alive(&self, id: u64, path: &[u8]) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let rel = Path::new(std::ffi::OsStr::from_bytes(
            path.strip_prefix(b"/").unwrap_or(path),
        ));
        std::fs::symlink_metadata(self.root.join(rel)).is_ok_and(|m| m.ino() == id)
    }
}

/// The label an id's waits are summed under: the topmost selected
/// ancestor-or-self of its path, or None for `other`.
fn label_of(path: &[u8], select: &Regex) -> Option<String> {
    let mut label = String::new();
    let mut end = 0;
    while end < path.len() {
        end = path[end + 1..]
            .iter()
            .position(|&c| c == b'/')
            .map_or(path.len(), |i| end + 1 + i);
        escape_into(&path[..end], &mut label);
        if select.is_match(&label) {
            return (label.len() <= MAX_LABEL_BYTES).then_some(label);
        }
    }
    None
}

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
    /// host histogram's resolution; `select` the cgroup collector's
    /// `--collector.cgroup.select` (None: its default).
    pub fn new(
        names: &[String],
        hist: OwnedFd,
        buckets: Buckets,
        select: Option<Regex>,
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
            select: match select {
                Some(r) => r,
                None => Regex::new(DEFAULT_SELECT).map_err(|e| e.to_string())?,
            },
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
                unsafe { sys::lookup_u64_u32(self.slots.as_fd(), id) }.map_err(err)?
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
                    None if self.resolver.limited => Vec::new(),
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
    fn v1_cpu_hierarchy_is_preferred_to_cgroup2() {
        let text = "\
30 25 0:26 / /sys/fs/cgroup/unified rw,relatime shared:4 - cgroup2 cgroup2 rw
31 25 0:27 / /sys/fs/cgroup/cpu rw,relatime shared:5 - cgroup cgroup rw,cpu
32 25 0:28 / /sys/fs/cgroup/cpuacct rw,relatime shared:6 - cgroup cgroup rw,cpuacct
";
        let h = Hierarchy::from_mountinfo(text).unwrap();
        assert_eq!(
            (h.by, h.root),
            (BY_V1_CPU, PathBuf::from("/sys/fs/cgroup/cpu"))
        );
        let joint = "31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n";
        let h = Hierarchy::from_mountinfo(joint).unwrap();
        assert_eq!(h.root, PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"));
        // cpuacct alone or cpuset is not `cpu`.
        let v2 = "\
32 25 0:28 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct
33 25 0:29 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset
24 1 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate
";
        let h = Hierarchy::from_mountinfo(v2).unwrap();
        assert_eq!((h.by, h.root), (BY_V2, PathBuf::from("/sys/fs/cgroup")));
        assert_eq!(
            Hierarchy::from_mountinfo("24 1 0:22 / / rw - ext4 /dev/sda rw\n"),
            None
        );
        let escaped = Hierarchy::from_mountinfo("30 25 0:26 / /a\\040b rw - cgroup cgroup rw,cpu\n");
        assert_eq!(escaped.unwrap().root, PathBuf::from("/a b"));
    }

    #[test]
    fn label_is_the_topmost_selected_ancestor() {
        let re = Regex::new(DEFAULT_SELECT).unwrap();
        assert_eq!(label_of(b"/", &re), None);
        assert_eq!(label_of(b"/user.slice", &re), None);
        assert_eq!(
            label_of(b"/system.slice/ssh.service", &re).as_deref(),
            Some("/system.slice/ssh.service")
        );
        assert_eq!(
            label_of(b"/system.slice/a.service/child/x.scope", &re).as_deref(),
            Some("/system.slice/a.service")
        );
        let long = format!("/{}.scope", "a".repeat(MAX_LABEL_BYTES));
        assert_eq!(label_of(long.as_bytes(), &re), None);
    }

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
