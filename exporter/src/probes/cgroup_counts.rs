//! Event counts by cgroup, for the probes whose kernel side adds events
//! into a bounded hash cgroup id → count (oomkill's kills by the victim's
//! memory cgroup, tasks' execs by the cpu cgroup with
//! `--probe.tasks.per-cgroup`), written as one counter family labelled as
//! the cgroup collector labels its series (`cgroup`, `container_id`,
//! `pod_uid`) plus a `…_folded_total{reason}` self-metric.
//!
//! Each scrape reads every entry of the hash. An id seen for the first time
//! is resolved to a path ([`Resolver`], one walk of the hierarchy at most
//! per scrape) and summed under its topmost selected ancestor-or-self
//! ([`label_of`], `--collector.cgroup.select`), else `cgroup="other"`; a
//! series grows by the growth of the entries summed into it, so it never
//! goes down. Folded into `other` although possibly selected, and counted
//! by reason: `map_full` and `no_cgroup` (the kernel side's per-CPU
//! counters, passed to [`CgroupCounts::write`]), `series_limit` (a new
//! label set past the cap), `unresolved` (the cgroup had gone before a
//! scrape named it: its id is an inode number, nothing maps it back). So
//! the series add up to the host total.
//!
//! An entry whose count did not grow since the last scrape is checked for
//! its cgroup (one `stat`): a cgroup that has gone has no task left, its
//! count is final, and its entry is deleted to make room. What happens to
//! its series is the probe's choice ([`OnGone`]).

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::os::fd::AsFd;

use aya::maps::{Map, MapData, MapType};
use regex::Regex;

use super::Loaded;
use super::cgroup_ids::{Hierarchy, Resolver, label_of};
use super::loader::ProbeError;
use super::sys;
use crate::kernel::cgroup_path::workload_ids;
use crate::scrape::exposition::{Desc, Encoder};

/// What becomes of a label's series once every cgroup summed into it has
/// gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnGone {
    /// It stays for the daemon's life (oomkill: the workload that was
    /// killed is what a page needs, also after its container was
    /// replaced). Bounded by the series cap only.
    Keep,
    /// It disappears and its count is added to `cgroup="other"` and to
    /// `folded_total{reason="gone"}` (tasks' execs: cgroups churn, and a
    /// busy host would otherwise keep a series per container ever run).
    FoldIntoOther,
}

/// In the probe loader: what the daemon needs to open the hash `map`, its
/// id then the hierarchy, for [`CgroupCounts::open`].
pub fn loader_names(
    loaded: &Loaded,
    map: &str,
    hierarchy: &Hierarchy,
) -> Result<Vec<String>, ProbeError> {
    let Some(Map::HashMap(m)) = loaded.ebpf.map(map) else {
        return Err(ProbeError(format!("map {map} missing from the object")));
    };
    let id = sys::map_id(m.fd().as_fd()).map_err(|e| ProbeError(format!("map {map}: {e}")))?;
    let mut names = vec![id.to_string()];
    names.extend(hierarchy.to_names());
    Ok(names)
}

/// The daemon's side: the hash, the resolver and the counts it keeps.
pub struct CgroupCounts {
    /// The hash, checked to have 8-byte keys and values.
    map: MapData,
    resolver: Resolver,
    tally: Tally,
    counts: &'static Desc,
    folded: &'static Desc,
    /// Scratch: (id, count) read this scrape.
    seen: Vec<(u64, u64)>,
}

impl CgroupCounts {
    /// Opens the hash `map_name` by the id in `names` ([`loader_names`]),
    /// before privileges are dropped; at most `max_series` label sets.
    pub fn open(
        names: &[String],
        map_name: &str,
        select: Regex,
        max_series: usize,
        on_gone: OnGone,
        (counts, folded): (&'static Desc, &'static Desc),
    ) -> Result<CgroupCounts, String> {
        let [id, by, root] = names else {
            return Err(format!("the probe loader sent {names:?} for {map_name}"));
        };
        let id: u32 = id
            .parse()
            .map_err(|_| format!("map {map_name}: bad id {id:?}"))?;
        let fd = sys::map_fd_by_id(id).map_err(|e| format!("map {map_name} (id {id}): {e}"))?;
        let map = MapData::from_fd(fd).map_err(|e| format!("map {map_name}: {e}"))?;
        let info = map
            .info()
            .map_err(|e| format!("map {map_name}: reading map info: {e}"))?;
        // The unsafe lookups in `read` rely on these sizes.
        if !matches!(info.map_type(), Ok(MapType::Hash))
            || info.key_size() != 8
            || info.value_size() != 8
        {
            return Err(format!(
                "map {map_name} is not a hash of 8-byte keys and values"
            ));
        }
        let hierarchy = Hierarchy::from_names(by, root)?;
        let mut resolver = Resolver::new(hierarchy.root);
        resolver.refresh();
        Ok(CgroupCounts {
            map,
            resolver,
            tally: Tally::new(select, max_series, on_gone),
            counts,
            folded,
            seen: Vec::new(),
        })
    }

    /// Reads every entry into the counts, and deletes the entries of
    /// cgroups that have gone.
    pub fn read(&mut self) -> io::Result<()> {
        let fd = self.map.fd().as_fd();
        self.seen.clear();
        let mut prev = None;
        // SAFETY (both): the map has 8-byte keys and values (checked in
        // `open`).
        while let Some(id) = unsafe { sys::next_key(fd, prev.as_ref()) }? {
            prev = Some(id);
            if let Some(n) = unsafe { sys::lookup_u64::<u64>(fd, id) }? {
                self.seen.push((id, n));
            }
        }
        let mut refreshed = false;
        for &(id, n) in &self.seen {
            let idle = self.tally.ids.get(&id).is_some_and(|t| t.last == n);
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
            // A cgroup still counting has tasks; an idle one may be gone.
            let gone = match &tracked.path {
                Some(p) => idle && !self.resolver.alive(id, p),
                None => tracked.fold == Fold::Unresolved && !self.resolver.limited(),
            };
            if gone {
                // SAFETY: 8-byte keys (checked in `open`).
                unsafe { sys::delete_u64_key(fd, id) }?;
                self.tally.forget(id);
            }
        }
        let seen = &self.seen;
        self.tally.retain(|id| seen.iter().any(|&(s, _)| s == id));
        Ok(())
    }

    /// Writes both families: the kernel side's `map_full` and `no_cgroup`
    /// counts are in `other` too.
    pub fn write(&self, enc: &mut Encoder, map_full: u64, no_cgroup: u64) {
        let t = &self.tally;
        enc.family(self.counts);
        for (label, s) in &t.series {
            let labels = [
                ("cgroup", label.as_str()),
                ("container_id", s.container_id.as_str()),
                ("pod_uid", s.pod_uid.as_str()),
            ];
            enc.sample(self.counts, &labels, s.count);
        }
        let other = t.other.wrapping_add(map_full).wrapping_add(no_cgroup);
        let labels = [("cgroup", "other"), ("container_id", ""), ("pod_uid", "")];
        enc.sample(self.counts, &labels, other);
        enc.family(self.folded);
        if t.on_gone == OnGone::FoldIntoOther {
            enc.sample(self.folded, &[("reason", "gone")], t.gone);
        }
        for (reason, n) in [
            ("map_full", map_full),
            ("no_cgroup", no_cgroup),
            ("series_limit", t.series_limit),
            ("unresolved", t.unresolved),
        ] {
            enc.sample(self.folded, &[("reason", reason)], n);
        }
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

/// Where an id's count is summed.
#[derive(Debug, PartialEq, Eq)]
enum Fold {
    Series(String),
    /// No selected ancestor, or past the walk's bounds.
    Other,
    /// Gone before it was resolved.
    Unresolved,
    /// A new label set past the cap.
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
    count: u64,
    container_id: String,
    pod_uid: String,
    /// Ids summed into it that are still in the map.
    ids: usize,
}

/// The per-label counts user space keeps, so they outlive the map entries
/// they came from.
struct Tally {
    select: Regex,
    max_series: usize,
    on_gone: OnGone,
    ids: HashMap<u64, Tracked>,
    series: BTreeMap<String, Series>,
    /// Counts of ids folded into `other` (not the kernel's own overflow).
    other: u64,
    unresolved: u64,
    series_limit: u64,
    /// Counts of series removed with their last cgroup ([`OnGone::FoldIntoOther`]).
    gone: u64,
}

impl Tally {
    fn new(select: Regex, max_series: usize, on_gone: OnGone) -> Tally {
        Tally {
            select,
            max_series,
            on_gone,
            ids: HashMap::new(),
            series: BTreeMap::new(),
            other: 0,
            unresolved: 0,
            series_limit: 0,
            gone: 0,
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
            if let Fold::Series(l) = &fold {
                self.series.get_mut(l).expect("made in fold_of").ids += 1;
            }
            self.ids.insert(
                id,
                Tracked {
                    fold,
                    path,
                    last: 0,
                },
            );
        }
        let t = self.ids.get_mut(&id).expect("inserted above");
        let inc = n.wrapping_sub(t.last);
        t.last = n;
        match &t.fold {
            Fold::Series(l) => {
                let s = self.series.get_mut(l).expect("made in fold_of");
                s.count = s.count.wrapping_add(inc);
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
                container_id,
                pod_uid,
                ..Series::default()
            };
            self.series.insert(label.clone(), s);
        }
        Fold::Series(label)
    }

    /// Drops an id whose map entry was deleted; its count stays counted,
    /// under its label or (the label's last id, [`OnGone::FoldIntoOther`])
    /// in `other`.
    fn forget(&mut self, id: u64) {
        let Some(Tracked {
            fold: Fold::Series(label),
            ..
        }) = self.ids.remove(&id)
        else {
            return;
        };
        let s = self.series.get_mut(&label).expect("made in fold_of");
        s.ids -= 1;
        if s.ids == 0 && self.on_gone == OnGone::FoldIntoOther {
            let n = s.count;
            self.series.remove(&label);
            self.other = self.other.wrapping_add(n);
            self.gone = self.gone.wrapping_add(n);
        }
    }

    /// Forgets the ids `keep` says are no longer in the map.
    fn retain(&mut self, keep: impl Fn(u64) -> bool) {
        let drop: Vec<u64> = self.ids.keys().copied().filter(|&id| !keep(id)).collect();
        for id in drop {
            self.forget(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::cgroup_path::DEFAULT_SELECT;

    fn tally(max: usize, on_gone: OnGone) -> Tally {
        Tally::new(Regex::new(DEFAULT_SELECT).unwrap(), max, on_gone)
    }

    fn path(p: &str) -> impl FnOnce() -> Resolved {
        let p = p.as_bytes().to_vec();
        move || Resolved::Path(p)
    }

    #[test]
    fn counts_are_summed_by_label_and_outlive_their_ids() {
        let mut t = tally(10, OnGone::Keep);
        t.add(7, 2, path("/system.slice/a.service/x"));
        t.add(8, 1, path("/system.slice/a.service"));
        t.add(9, 3, path("/user.slice"));
        assert_eq!(t.series["/system.slice/a.service"].count, 3);
        assert_eq!(t.other, 3);
        // Growth only; a known id is not resolved again.
        t.add(7, 5, || unreachable!());
        assert_eq!(t.series["/system.slice/a.service"].count, 6);
        // Its cgroup gone and entry deleted: the series keeps the count,
        // and a new entry for the same id counts from zero.
        t.forget(7);
        t.retain(|id| id != 8);
        assert_eq!(t.ids.len(), 1);
        assert_eq!(t.series["/system.slice/a.service"].count, 6);
        t.add(7, 1, path("/system.slice/a.service/x"));
        assert_eq!(t.series["/system.slice/a.service"].count, 7);
        assert_eq!(t.gone, 0);
    }

    #[test]
    fn a_series_folds_into_other_with_its_last_cgroup() {
        let mut t = tally(10, OnGone::FoldIntoOther);
        t.add(7, 2, path("/system.slice/a.service/x"));
        t.add(8, 1, path("/system.slice/a.service"));
        t.add(9, 3, path("/user.slice"));
        // A child gone: the label still has a cgroup, the series stays
        // whole.
        t.forget(7);
        assert_eq!(t.series["/system.slice/a.service"].count, 3);
        assert_eq!((t.other, t.gone), (3, 0));
        // The last one gone: the series goes, other takes its count, so
        // the sum over series is unchanged.
        t.retain(|id| id != 8);
        assert!(t.series.is_empty());
        assert_eq!((t.other, t.gone), (6, 3));
        // An unselected cgroup gone leaves its count where it was.
        t.forget(9);
        assert_eq!((t.other, t.gone), (6, 3));
        // The label comes back from zero with a new cgroup.
        t.add(10, 4, path("/system.slice/a.service"));
        assert_eq!(t.series["/system.slice/a.service"].count, 4);
    }

    #[test]
    fn folds_are_counted_by_reason() {
        let mut t = tally(1, OnGone::Keep);
        t.add(1, 2, path("/a.scope"));
        t.add(2, 3, path("/b.scope"));
        t.add(3, 4, || Resolved::Gone);
        t.add(4, 5, || Resolved::Unreached);
        assert_eq!(t.series.len(), 1);
        assert_eq!(t.series["/a.scope"].count, 2);
        assert_eq!((t.series_limit, t.unresolved, t.other), (3, 4, 12));
        // Another cgroup with a label already written is not past the bound.
        t.add(5, 1, path("/a.scope/child"));
        assert_eq!(t.series["/a.scope"].count, 3);
    }

    #[test]
    fn workload_ids_come_with_the_label() {
        let id = "0123456789abcdef".repeat(4);
        let mut t = tally(4, OnGone::Keep);
        t.add(1, 1, path(&format!("/docker/{id}")));
        let s = &t.series[&format!("/docker/{id}")];
        assert_eq!(
            (s.container_id.as_str(), s.pod_uid.as_str()),
            (id.as_str(), "")
        );
    }
}
