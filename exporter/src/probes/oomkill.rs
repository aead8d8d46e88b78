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
//! Labels ([`cgroup_counts`], shared with tasks' execs per cgroup): ids
//! are resolved to paths when a scrape first sees them, and summed under
//! their topmost selected ancestor-or-self (`--collector.cgroup.select`),
//! else `cgroup="other"`. A
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

use std::mem::offset_of;
use std::os::fd::OwnedFd;

use super::cgroup_counts::{self, CgroupCounts, OnGone};
use super::cgroup_ids::Hierarchy;
use super::layout::{OomkillCounts, word};
use super::loader::{self, Kind, Mode, ProbeError};
use super::percpu::PerCpuStruct;
use super::{Kernel, Loaded, ProbeFlag, ProbeFlagKind, ProbeSettings, ProbeSpec};
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
    let max = settings.number(MAX_CGROUPS).unwrap_or(DEFAULT_MAX_CGROUPS);
    let by = hierarchy.by;
    let mut loaded = loader::load_and_attach("oomkill", &kernel.btf, modes, |l| {
        l.override_global("cgroup_by", &by, true);
        l.map_max_entries(CGROUP_MAP, max);
    })?;
    loaded.names = cgroup_counts::loader_names(&loaded, CGROUP_MAP, &hierarchy)?;
    Ok(loaded)
}

/// In the daemon, before privileges are dropped: the collector over the
/// handed-over counts, with [`CGROUP_MAP`] opened by the id in `names`.
pub fn collector(
    map: OwnedFd,
    names: Vec<String>,
    settings: &ProbeSettings,
) -> Result<Box<dyn Collector>, String> {
    let max = settings.number(MAX_CGROUPS).unwrap_or(DEFAULT_MAX_CGROUPS);
    let cgroups = CgroupCounts::open(
        &names,
        CGROUP_MAP,
        settings.cgroup_selection(),
        max as usize,
        OnGone::Keep,
        (&CGROUP_KILLS, &FOLDED),
    )?;
    Ok(Box::new(OomkillCollector {
        counts: PerCpuStruct::from_fd(MAP, map, VALUE_SIZE)?,
        cgroups,
    }))
}

struct OomkillCollector {
    counts: PerCpuStruct,
    /// Kills by cgroup, from [`CGROUP_MAP`].
    cgroups: CgroupCounts,
}

impl Collector for OomkillCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let err = |e: std::io::Error| CollectError::other("bpf map us_oom", e.to_string());
        self.counts.read().map_err(err)?;
        self.cgroups.read().map_err(err)?;
        enc.family(&KILLS);
        enc.sample(&KILLS, &[], self.counts.sum(KILLS_WORD));
        self.cgroups.write(
            enc,
            self.counts.sum(MAP_FULL_WORD),
            self.counts.sum(NO_CGROUP_WORD),
        );
        Ok(())
    }
}
