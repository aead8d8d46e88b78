//! OOM kills: `usescope_oom_kills_total` (every victim of the global or a
//! memory cgroup's OOM killer) and `usescope_cgroup_oom_kills_total`, the
//! same by the victim's memory cgroup, labelled as the cgroup collector
//! labels its series (`cgroup`, `container_id`, `pod_uid`).
//!
//! The cgroup collector's `usescope_cgroup_memory_oom_kills_total` reads
//! memory.events / memory.oom_control, so it only has cgroups that still
//! exist and are selected: a container killed and restarted gets a new
//! cgroup, and the old one's kills vanish with it. Here the kernel side
//! (ebpf-probes/oomkill.bpf.c) counts each victim (oom:mark_victim) by its
//! cgroup id in a bounded hash, and user space keeps the counts.
//!
//! Labels: ids are resolved to paths ([`Resolver`]) when a scrape first
//! sees them, and summed under their topmost selected ancestor-or-self
//! ([`label_of`], `--collector.cgroup.select`), else `cgroup="other"`. A
//! cgroup removed after that keeps its kills under its label for the
//! daemon's life: its map entry is deleted, the series stays. An id whose
//! cgroup is already gone when a scrape first sees it cannot be named any
//! more (the id is an inode number, nothing maps it back): its kills are in
//! `other`, counted in `usescope_cgroup_oom_kills_folded_total{reason=
//! "unresolved"}`. At most `--probe.oomkill.max-cgroups` label sets are
//! written; a new one past that goes to `other` too (`reason=
//! "series_limit"`), as do the kills of cgroups that found the kernel's map
//! full (`map_full`) or whose cgroup the program could not read
//! (`no_cgroup`). So the per-cgroup series add up to the host total.
//!
//! Off by default (`--probe.oomkill`), like every probe added after the
//! first three; its cost per event does not matter, OOM kills being rare.

use std::collections::{BTreeMap, HashMap};
use std::mem::offset_of;
use std::os::fd::{AsFd, OwnedFd};

use aya::maps::{MapData, MapType};
use regex::Regex;

use super::cgroup_ids::{Hierarchy, Resolver, label_of};
use super::layout::{OomkillCounts, word};
use super::loader::{self, Kind, Mode, ProbeError};
use super::percpu::PerCpuStruct;
use super::{Kernel, Loaded, ProbeFlag, ProbeFlagKind, ProbeSettings, ProbeSpec, sys};
use crate::kernel::cgroup_path::workload_ids;
use crate::kernel::error::CollectError;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const SPEC: ProbeSpec = ProbeSpec {
    name: "oomkill",
    help: "OOM kills, host-wide and by the victim's memory cgroup, kept after the cgroup has gone (oom:mark_victim, Linux 6.8+); off by default",
    default_enabled: false,
    collector: "probe_oomkill",
    modes: MODES,
    map: MAP,
    flags: &[ProbeFlag {
        name: MAX_CGROUPS,
        help: "Most cgroups the OOM kill map holds at once, and most cgroup label sets usescope_cgroup_oom_kills_total writes; kills past either are counted in cgroup=\"other\" and usescope_cgroup_oom_kills_folded_total",
        kind: ProbeFlagKind::U32 { min: 1 },
        default: Some("1024"),
        value_name: None,
    }],
    metrics: &[&KILLS, &CGROUP_KILLS, &FOLDED],
    load,
    build: collector,
};

/// `--probe.oomkill.max-cgroups`.
pub const MAX_CGROUPS: &str = "probe.oomkill.max-cgroups";
const DEFAULT_MAX_CGROUPS: u32 = 1024;

const KILLS: Desc = Desc::counter(
    "usescope_oom_kills_total",
    "OOM killer victims (global and memory cgroup OOM), each counted once (oom:mark_victim).",
);
const CGROUP_KILLS: Desc = Desc::counter(
    "usescope_cgroup_oom_kills_total",
    "OOM killer victims by the victim's memory cgroup, kept after the cgroup has gone (cgroup=\"other\": unselected cgroups, and the kills usescope_cgroup_oom_kills_folded_total counts).",
);
const FOLDED: Desc = Desc::counter(
    "usescope_cgroup_oom_kills_folded_total",
    "OOM kills counted in cgroup=\"other\" although their cgroup may be selected: map_full (the kernel's map held --probe.oomkill.max-cgroups cgroups), series_limit (as many label sets written), unresolved (the cgroup had gone before a scrape named it), no_cgroup (the victim's cgroup was unreadable).",
);

pub const MODES: &[Mode] = &[
    Mode {
        name: "tp_btf",
        kind: Kind::BtfTracePoint,
        programs: &[("us_oom_btf", "mark_victim")],
    },
    Mode {
        name: "raw_tp",
        kind: Kind::RawTracePoint,
        programs: &[("us_oom_raw", "mark_victim")],
    },
];

/// The per-CPU array of host counts, and its value.
pub const MAP: &str = "us_oom";
/// The hash cgroup id -> kills.
pub const CGROUP_MAP: &str = "us_oom_cg";
const VALUE_SIZE: usize = size_of::<OomkillCounts>();
const KILLS_WORD: usize = word(offset_of!(OomkillCounts, kills));
const MAP_FULL_WORD: usize = word(offset_of!(OomkillCounts, map_full));
const NO_CGROUP_WORD: usize = word(offset_of!(OomkillCounts, no_cgroup));

/// In the probe loader process: load and attach, reading cgroup ids in the
/// v1 memory hierarchy where it is mounted, else in cgroup2. Sends the
/// daemon the id of [`CGROUP_MAP`] and the hierarchy.
pub fn load(kernel: &Kernel, settings: &ProbeSettings) -> Result<Loaded, ProbeError> {
    load_modes(kernel, settings, MODES)
}

/// [`load`] with a choice of modes (tests load the raw_tp one alone).
pub fn load_modes(
    kernel: &Kernel,
    settings: &ProbeSettings,
    modes: &'static [Mode],
) -> Result<Loaded, ProbeError> {
    let hierarchy = Hierarchy::find("memory").map_err(ProbeError)?;
    let max = settings
        .number(MAX_CGROUPS)
        .unwrap_or(DEFAULT_MAX_CGROUPS);
    let by = hierarchy.by;
    let mut loaded = loader::load_and_attach("oomkill", &kernel.btf, modes, |l| {
        l.override_global("cgroup_by", &by, true);
        l.map_max_entries(CGROUP_MAP, max);
    })?;
    let map = match loaded.ebpf.map(CGROUP_MAP) {
        Some(aya::maps::Map::HashMap(m)) => m,
        _ => {
            return Err(ProbeError(format!(
                "map {CGROUP_MAP} missing from the object"
            )));
        }
    };
    let id = sys::map_id(map.fd().as_fd())
        .map_err(|e| ProbeError(format!("map {CGROUP_MAP}: {e}")))?;
    loaded.names = vec![id.to_string()];
    loaded.names.extend(hierarchy.to_names());
    Ok(loaded)
}

/// In the daemon, before privileges are dropped: the collector over the
/// handed-over counts, with [`CGROUP_MAP`] opened by the id in `names`.
pub fn collector(
    map: OwnedFd,
    names: Vec<String>,
    settings: &ProbeSettings,
) -> Result<Box<dyn Collector>, String> {
    let [id, by, root] = names.as_slice() else {
        return Err(format!("the probe loader sent {names:?} for {CGROUP_MAP}"));
    };
    let id: u32 = id
        .parse()
        .map_err(|_| format!("map {CGROUP_MAP}: bad id {id:?}"))?;
    let fd = sys::map_fd_by_id(id).map_err(|e| format!("map {CGROUP_MAP} (id {id}): {e}"))?;
    let cgroups = MapData::from_fd(fd).map_err(|e| format!("map {CGROUP_MAP}: {e}"))?;
    let info = cgroups
        .info()
        .map_err(|e| format!("map {CGROUP_MAP}: reading map info: {e}"))?;
    // The unsafe lookups below rely on these sizes.
    if !matches!(info.map_type(), Ok(MapType::Hash)) || info.key_size() != 8 || info.value_size() != 8
    {
        return Err(format!(
            "map {CGROUP_MAP} is not a hash of 8-byte keys and values"
        ));
    }
    let hierarchy = Hierarchy::from_names(by, root)?;
    let mut resolver = Resolver::new(hierarchy.root);
    resolver.refresh();
    let select = settings.cgroup_selection();
    let max = settings.number(MAX_CGROUPS).unwrap_or(DEFAULT_MAX_CGROUPS);
    Ok(Box::new(OomkillCollector {
        counts: PerCpuStruct::from_fd(MAP, map, VALUE_SIZE)?,
        cgroups,
        resolver,
        tally: Tally::new(select, max as usize),
        seen: Vec::new(),
    }))
}

struct OomkillCollector {
    counts: PerCpuStruct,
    /// [`CGROUP_MAP`], checked to have 8-byte keys and values.
    cgroups: MapData,
    resolver: Resolver,
    tally: Tally,
    /// Scratch: (id, kills) read this scrape.
    seen: Vec<(u64, u64)>,
}

impl Collector for OomkillCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let err = |e: std::io::Error| CollectError::other("bpf map us_oom", e.to_string());
        self.counts.read().map_err(err)?;
        let fd = self.cgroups.fd().as_fd();
        self.seen.clear();
        let mut prev = None;
        // SAFETY (both): CGROUP_MAP has 8-byte keys and values (checked in
        // `collector`).
        while let Some(id) = unsafe { sys::next_key(fd, prev.as_ref()) }.map_err(err)? {
            prev = Some(id);
            if let Some(n) = unsafe { sys::lookup_u64_u64(fd, id) }.map_err(err)? {
                self.seen.push((id, n));
            }
        }
        let mut refreshed = false;
        for &(id, n) in &self.seen {
            let resolver = &mut self.resolver;
            let tracked = self.tally.add(id, n, || {
                if resolver.get(id).is_none() && !refreshed {
                    resolver.refresh();
                    refreshed = true;
                }
                match resolver.get(id) {
                    Some(p) => Resolved::Path(p.to_vec()),
                    // Past the walk's bounds: it may be alive.
                    None if resolver.limited() => Resolved::Unreached,
                    None => Resolved::Gone,
                }
            });
            // A cgroup that has gone has no task left to kill: its count
            // is final, so its entry makes room for others.
            let gone = match &tracked.path {
                Some(p) => !self.resolver.alive(id, p),
                None => tracked.fold == Fold::Unresolved && !self.resolver.limited(),
            };
            if gone {
                // SAFETY: 8-byte keys (checked in `collector`).
                unsafe { sys::delete_u64_key(fd, id) }.map_err(err)?;
                self.tally.forget(id);
            }
        }
        let seen = &self.seen;
        self.tally.retain(|id| seen.iter().any(|&(s, _)| s == id));

        let map_full = self.counts.sum(MAP_FULL_WORD);
        let no_cgroup = self.counts.sum(NO_CGROUP_WORD);
        enc.family(&KILLS);
        enc.sample(&KILLS, &[], self.counts.sum(KILLS_WORD));
        enc.family(&CGROUP_KILLS);
        for (label, s) in &self.tally.series {
            let labels = [
                ("cgroup", label.as_str()),
                ("container_id", s.container_id.as_str()),
                ("pod_uid", s.pod_uid.as_str()),
            ];
            enc.sample(&CGROUP_KILLS, &labels, s.kills);
        }
        let other = self
            .tally
            .other
            .wrapping_add(map_full)
            .wrapping_add(no_cgroup);
        let labels = [("cgroup", "other"), ("container_id", ""), ("pod_uid", "")];
        enc.sample(&CGROUP_KILLS, &labels, other);
        enc.family(&FOLDED);
        for (reason, n) in [
            ("map_full", map_full),
            ("no_cgroup", no_cgroup),
            ("series_limit", self.tally.series_limit),
            ("unresolved", self.tally.unresolved),
        ] {
            enc.sample(&FOLDED, &[("reason", reason)], n);
        }
        Ok(())
    }
}

/// What a scrape found for an id it had not seen.
enum Resolved {
    Path(Vec<u8>),
    /// Not found, and the walk stopped at a bound.
    Unreached,
    /// Not found in a whole walk: removed.
    Gone,
}

/// Where an id's kills are summed.
#[derive(Debug, PartialEq, Eq)]
enum Fold {
    Series(String),
    /// No selected ancestor, or past the walk's bounds.
    Other,
    /// Gone before it was resolved.
    Unresolved,
    /// A new label set past --probe.oomkill.max-cgroups.
    SeriesLimit,
}

struct Tracked {
    fold: Fold,
    /// Its path when resolved.
    path: Option<Vec<u8>>,
    /// Its map entry's count at the last scrape.
    last: u64,
}

#[derive(Default)]
struct Series {
    kills: u64,
    container_id: String,
    pod_uid: String,
}

/// The per-cgroup counts user space keeps, so they outlive the map entries
/// (and the cgroups) they came from.
struct Tally {
    select: Regex,
    max_series: usize,
    ids: HashMap<u64, Tracked>,
    series: BTreeMap<String, Series>,
    /// Kills of ids folded into `other` (not the kernel's own overflow).
    other: u64,
    unresolved: u64,
    series_limit: u64,
}

impl Tally {
    fn new(select: Regex, max_series: usize) -> Tally {
        Tally {
            select,
            max_series,
            ids: HashMap::new(),
            series: BTreeMap::new(),
            other: 0,
            unresolved: 0,
            series_limit: 0,
        }
    }

    /// Adds what the map entry of `id`, now `n`, grew by; `resolve` names
    /// an id not seen before.
    fn add(&mut self, id: u64, n: u64, resolve: impl FnOnce() -> Resolved) -> &Tracked {
        if !self.ids.contains_key(&id) {
            let (fold, path) = match resolve() {
                Resolved::Path(p) => (self.fold_of(&p), Some(p)),
                Resolved::Unreached => (Fold::Other, None),
                Resolved::Gone => (Fold::Unresolved, None),
            };
            self.ids.insert(id, Tracked { fold, path, last: 0 });
        }
        let t = self.ids.get_mut(&id).expect("inserted above");
        let inc = n.wrapping_sub(t.last);
        t.last = n;
        match &t.fold {
            Fold::Series(l) => {
                let s = self.series.get_mut(l).expect("made in fold_of");
                s.kills = s.kills.wrapping_add(inc);
            }
            Fold::Other => self.other = self.other.wrapping_add(inc),
            Fold::Unresolved => {
                self.other = self.other.wrapping_add(inc);
                self.unresolved = self.unresolved.wrapping_add(inc);
            }
            Fold::SeriesLimit => {
                self.other = self.other.wrapping_add(inc);
                self.series_limit = self.series_limit.wrapping_add(inc);
            }
        }
        t
    }

    /// The series of a new id's path, made here if it is new and within
    /// the bound.
    fn fold_of(&mut self, path: &[u8]) -> Fold {
        let Some(label) = label_of(path, &self.select) else {
            return Fold::Other;
        };
        if !self.series.contains_key(&label) {
            if self.series.len() >= self.max_series {
                return Fold::SeriesLimit;
            }
            let (container_id, pod_uid) = workload_ids(&label);
            let s = Series {
                kills: 0,
                container_id,
                pod_uid,
            };
            self.series.insert(label.clone(), s);
        }
        Fold::Series(label)
    }

    /// Drops an id whose map entry was deleted; its kills stay counted.
    fn forget(&mut self, id: u64) {
        self.ids.remove(&id);
    }

    /// Keeps only the ids `keep` says are still in the map.
    fn retain(&mut self, keep: impl Fn(u64) -> bool) {
        self.ids.retain(|id, _| keep(*id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::cgroup_path::DEFAULT_SELECT;

    fn tally(max: usize) -> Tally {
        Tally::new(Regex::new(DEFAULT_SELECT).unwrap(), max)
    }

    fn path(p: &str) -> impl FnOnce() -> Resolved {
        let p = p.as_bytes().to_vec();
        move || Resolved::Path(p)
    }

    #[test]
    fn kills_are_summed_by_label_and_outlive_their_ids() {
        let mut t = tally(10);
        t.add(7, 2, path("/system.slice/a.service/x"));
        t.add(8, 1, path("/system.slice/a.service"));
        t.add(9, 3, path("/user.slice"));
        assert_eq!(t.series["/system.slice/a.service"].kills, 3);
        assert_eq!(t.other, 3);
        // Growth only; a known id is not resolved again.
        t.add(7, 5, || unreachable!());
        assert_eq!(t.series["/system.slice/a.service"].kills, 6);
        // Its cgroup gone and entry deleted: the series keeps the kills,
        // and a new entry for the same id counts from zero.
        t.forget(7);
        t.retain(|id| id != 8);
        assert_eq!(t.ids.len(), 1);
        assert_eq!(t.series["/system.slice/a.service"].kills, 6);
        t.add(7, 1, path("/system.slice/a.service/x"));
        assert_eq!(t.series["/system.slice/a.service"].kills, 7);
    }

    #[test]
    fn folds_are_counted_by_reason() {
        let mut t = tally(1);
        t.add(1, 2, path("/a.scope"));
        t.add(2, 3, path("/b.scope"));
        t.add(3, 4, || Resolved::Gone);
        t.add(4, 5, || Resolved::Unreached);
        assert_eq!(t.series.len(), 1);
        assert_eq!(t.series["/a.scope"].kills, 2);
        assert_eq!((t.series_limit, t.unresolved, t.other), (3, 4, 12));
        // Another cgroup with a label already written is not past the bound.
        t.add(5, 1, path("/a.scope/child"));
        assert_eq!(t.series["/a.scope"].kills, 3);
    }

    #[test]
    fn workload_ids_come_with_the_label() {
        let id = "0123456789abcdef".repeat(4);
        let mut t = tally(4);
        t.add(1, 1, path(&format!("/docker/{id}")));
        let s = &t.series[&format!("/docker/{id}")];
        assert_eq!((s.container_id.as_str(), s.pod_uid.as_str()), (id.as_str(), ""));
    }
}
