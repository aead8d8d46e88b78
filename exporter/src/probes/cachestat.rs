//! Page cache as readers see it: `usescope_page_cache_accesses_total`
//! (pages readers asked for, through read() or mmap),
//! `usescope_page_cache_misses_total` (those that were not in the cache),
//! `usescope_page_cache_readahead_pages_total` (pages readahead brought in
//! before anyone asked) and `usescope_page_cache_dirtied_total`, from the
//! filemap, readahead and writeback tracepoints. Hit ratio = 1 -
//! rate(misses) / rate(accesses); docs/probes.md says what it counts and
//! what it cannot see. The kernel side's comment explains the bookkeeping.
//!
//! `--probe.cachestat.per-cgroup` adds accesses and misses per memory
//! cgroup ([`cgroup`]), bounded by `--probe.cachestat.max-cgroups`.

use super::layout::{
    CACHESTAT_ACCESSES_WORD, CACHESTAT_DIRTIED_WORD, CACHESTAT_MISSES_WORD,
    CACHESTAT_READAHEAD_WORD, CachestatCounts,
};
use super::loader::{self, Kind, Mode, ProbeError};
use super::percpu::PerCpuStruct;
use super::{Kernel, Loaded, ProbeFlag, ProbeFlagKind, ProbeSettings, ProbeSpec};
use crate::kernel::error::CollectError;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

#[path = "cachestat_cgroup.rs"]
pub mod cgroup;

pub const SPEC: ProbeSpec = ProbeSpec {
    name: "cachestat",
    help: "Page-cache accesses, misses and dirtied pages (filemap tracepoints)",
    default_enabled: true,
    collector: "probe_cachestat",
    modes: MODES,
    map: MAP,
    flags: &[
        ProbeFlag {
            name: PID,
            help: "Count the page-cache use of this one process only (its pid as the host sees it); default: every process",
            kind: ProbeFlagKind::U32 { min: 1 },
            default: None,
            value_name: Some("PID"),
        },
        ProbeFlag {
            name: PER_CGROUP,
            help: "Also page-cache accesses and misses per memory cgroup of the reader (usescope_cgroup_page_cache_accesses_total, _misses_total), cgroups labelled and selected as the cgroup collector does",
            kind: ProbeFlagKind::Bool,
            default: None,
            value_name: None,
        },
        ProbeFlag {
            name: MAX_CGROUPS,
            help: "Most cgroups the per-cgroup page-cache map holds (--probe.cachestat.per-cgroup); the counts of the cgroups past it go to cgroup=\"other\" and usescope_cgroup_page_cache_overflow_accesses_total",
            kind: ProbeFlagKind::U32 { min: 1 },
            default: Some("256"),
            value_name: None,
        },
    ],
    metrics: &[
        &ACCESSES,
        &MISSES,
        &READAHEAD,
        &DIRTIED,
        &cgroup::ACCESSES,
        &cgroup::MISSES,
        &cgroup::OVERFLOW,
    ],
    load,
    build: collector,
};

/// `--probe.cachestat.pid`: count one process's page-cache use only
/// (unset: every process).
pub const PID: &str = "probe.cachestat.pid";
/// `--probe.cachestat.per-cgroup`: accesses and misses per memory cgroup.
pub const PER_CGROUP: &str = "probe.cachestat.per-cgroup";
/// `--probe.cachestat.max-cgroups`: entries of the per-cgroup maps.
pub const MAX_CGROUPS: &str = "probe.cachestat.max-cgroups";
const DEFAULT_MAX_CGROUPS: u32 = 256;

const ACCESSES: Desc = Desc::counter(
    "usescope_page_cache_accesses_total",
    "Pages readers asked the page cache for: read() ranges clamped to the file size, and pages mapped by mmap faults and fault-around.",
);
const MISSES: Desc = Desc::counter(
    "usescope_page_cache_misses_total",
    "Pages readers asked for that were not in the page cache and had to be read in (readahead pages not counted).",
);
const READAHEAD: Desc = Desc::counter(
    "usescope_page_cache_readahead_pages_total",
    "Pages readahead added to the page cache beyond what readers asked for.",
);
const DIRTIED: Desc = Desc::counter(
    "usescope_page_cache_dirtied_total",
    "Page-cache pages dirtied by writes (writeback:writeback_dirty_folio).",
);

/// Nine hooks, as tp_btf programs or, where tp_btf is refused, raw_tp
/// copies of the same handlers.
pub const MODES: &[Mode] = &[
    Mode {
        name: "tp_btf",
        kind: Kind::BtfTracePoint,
        programs: &[
            ("us_cs_get_btf", "mm_filemap_get_pages"),
            ("us_cs_sync_ra_btf", "page_cache_sync_ra"),
            ("us_cs_async_ra_btf", "page_cache_async_ra"),
            ("us_cs_ra_order_btf", "page_cache_ra_order"),
            ("us_cs_ra_unbounded_btf", "page_cache_ra_unbounded"),
            ("us_cs_add_btf", "mm_filemap_add_to_page_cache"),
            ("us_cs_fault_btf", "mm_filemap_fault"),
            ("us_cs_map_btf", "mm_filemap_map_pages"),
            ("us_cs_dirty_btf", "writeback_dirty_folio"),
        ],
    },
    Mode {
        name: "raw_tp",
        kind: Kind::RawTracePoint,
        programs: &[
            ("us_cs_get_raw", "mm_filemap_get_pages"),
            ("us_cs_sync_ra_raw", "page_cache_sync_ra"),
            ("us_cs_async_ra_raw", "page_cache_async_ra"),
            ("us_cs_ra_order_raw", "page_cache_ra_order"),
            ("us_cs_ra_unbounded_raw", "page_cache_ra_unbounded"),
            ("us_cs_add_raw", "mm_filemap_add_to_page_cache"),
            ("us_cs_fault_raw", "mm_filemap_fault"),
            ("us_cs_map_raw", "mm_filemap_map_pages"),
            ("us_cs_dirty_raw", "writeback_dirty_folio"),
        ],
    },
];

/// log2 of the page size, for the kernel side's byte → page conversion.
fn page_shift() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        (size as u64).trailing_zeros()
    } else {
        12
    }
}

/// The per-CPU map the collector reads, and its value.
pub const MAP: &str = "us_cs_counts";
const VALUE_SIZE: usize = size_of::<CachestatCounts>();

/// In the probe loader process: load and attach.
pub fn load(kernel: &Kernel, settings: &ProbeSettings) -> Result<Loaded, ProbeError> {
    let shift = page_shift();
    let only_tgid = settings.number(PID).unwrap_or(0);
    // The memory hierarchy (a missed page is charged to the reader's
    // memcg), chosen once from what is mounted; without the flag the
    // kernel side compiles its per-cgroup code out.
    let hierarchy = if settings.switch(PER_CGROUP) {
        Some(cgroup::Hierarchy::find("memory").map_err(ProbeError)?)
    } else {
        None
    };
    let cgroup_by = hierarchy.as_ref().map_or(0u32, |h| h.by);
    let max_cgroups = match hierarchy {
        Some(_) => settings.number(MAX_CGROUPS).unwrap_or(DEFAULT_MAX_CGROUPS),
        None => 1,
    };
    let mut loaded = loader::load_and_attach("cachestat", &kernel.btf, MODES, |l| {
        l.override_global("page_shift", &shift, true);
        l.override_global("only_tgid", &only_tgid, true);
        l.override_global("cgroup_by", &cgroup_by, true);
        l.override_global("cgroup_slots", &max_cgroups, true);
        for map in [cgroup::MAP, cgroup::SLOT_MAP, cgroup::FREE_MAP] {
            l.map_max_entries(map, max_cgroups);
        }
        // aya 0.14 has no wrapper type for the per-thread task storage
        // map; without this it would refuse the object.
        l.allow_unsupported_maps();
    })?;
    if let Some(h) = &hierarchy {
        loaded.names = cgroup_names(&loaded, h)?;
    }
    Ok(loaded)
}

/// What the daemon needs to open the per-cgroup maps: their ids (the
/// daemon opens its own fds by id), then the hierarchy.
fn cgroup_names(loaded: &Loaded, h: &cgroup::Hierarchy) -> Result<Vec<String>, ProbeError> {
    use aya::maps::Map;
    use std::os::fd::AsFd;
    let mut names = Vec::new();
    for name in [cgroup::MAP, cgroup::SLOT_MAP, cgroup::FREE_MAP] {
        let map = match loaded.ebpf.map(name) {
            Some(Map::PerCpuArray(m) | Map::HashMap(m) | Map::Queue(m)) => m,
            _ => return Err(ProbeError(format!("map {name} missing from the object"))),
        };
        let id = super::sys::map_id(map.fd().as_fd())
            .map_err(|e| ProbeError(format!("map {name}: {e}")))?;
        names.push(id.to_string());
    }
    names.extend(h.to_names());
    Ok(names)
}

/// In the daemon: the collector over the handed-over counters map.
pub fn collector(
    map: std::os::fd::OwnedFd,
    names: Vec<String>,
    settings: &ProbeSettings,
) -> Result<Box<dyn Collector>, String> {
    let cgroups = if names.is_empty() {
        None
    } else {
        let host = map
            .try_clone()
            .map_err(|e| format!("duplicating the fd of {MAP}: {e}"))?;
        Some(cgroup::CgroupCounts::new(
            &names,
            host,
            settings.cgroup_selection(),
        )?)
    };
    let counts = PerCpuStruct::from_fd(MAP, map, VALUE_SIZE)?;
    Ok(Box::new(CachestatCollector { counts, cgroups }))
}

struct CachestatCollector {
    counts: PerCpuStruct,
    /// `--probe.cachestat.per-cgroup`.
    cgroups: Option<cgroup::CgroupCounts>,
}

impl Collector for CachestatCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.counts
            .read()
            .map_err(|e| CollectError::other("bpf map us_cs_counts", e.to_string()))?;
        for (desc, word) in [
            (&ACCESSES, CACHESTAT_ACCESSES_WORD),
            (&MISSES, CACHESTAT_MISSES_WORD),
            (&DIRTIED, CACHESTAT_DIRTIED_WORD),
            (&READAHEAD, CACHESTAT_READAHEAD_WORD),
        ] {
            enc.family(desc);
            enc.sample(desc, &[], self.counts.sum(word));
        }
        if let Some(c) = &mut self.cgroups {
            c.collect(enc)?;
        }
        Ok(())
    }
}
