//! Page cache: `usescope_page_cache_accesses_total` (pages read() asked
//! for), `usescope_page_cache_misses_total` (pages added to the cache) and
//! `usescope_page_cache_dirtied_total`, from the filemap and writeback
//! tracepoints. Hit ratio = 1 - rate(misses) / rate(accesses); see
//! docs/probes.md for what readahead and writes do to it.

use super::layout::{
    CACHESTAT_ACCESSES_WORD, CACHESTAT_DIRTIED_WORD, CACHESTAT_MISSES_WORD, CachestatCounts,
};
use super::loader::{self, Kind, Mode, ProbeError};
use super::percpu::PerCpuStruct;
use super::{Kernel, Loaded, ProbeSettings};
use crate::collector::Collector;
use crate::error::CollectError;
use crate::exposition::{Desc, Encoder};

pub const COLLECTOR: &str = "probe_cachestat";

const ACCESSES: Desc = Desc::counter(
    "usescope_page_cache_accesses_total",
    "Pages requested from the page cache by reads (filemap:mm_filemap_get_pages, clamped to the file size, each read counted once).",
);
const MISSES: Desc = Desc::counter(
    "usescope_page_cache_misses_total",
    "Pages added to the page cache (filemap:mm_filemap_add_to_page_cache), i.e. misses, including readahead.",
);
const DIRTIED: Desc = Desc::counter(
    "usescope_page_cache_dirtied_total",
    "Page-cache pages dirtied by writes (writeback:writeback_dirty_folio).",
);

pub const MODES: &[Mode] = &[
    Mode {
        name: "tp_btf",
        kind: Kind::BtfTracePoint,
        programs: &[
            ("us_cs_get_btf", "mm_filemap_get_pages"),
            ("us_cs_add_btf", "mm_filemap_add_to_page_cache"),
            ("us_cs_dirty_btf", "writeback_dirty_folio"),
        ],
    },
    Mode {
        name: "raw_tp",
        kind: Kind::RawTracePoint,
        programs: &[
            ("us_cs_get_raw", "mm_filemap_get_pages"),
            ("us_cs_add_raw", "mm_filemap_add_to_page_cache"),
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
pub fn load(kernel: &Kernel, _settings: &ProbeSettings) -> Result<Loaded, ProbeError> {
    let shift = page_shift();
    loader::load_and_attach(loader::CACHESTAT_OBJ, &kernel.btf, MODES, |l| {
        l.override_global("page_shift", &shift, true);
    })
}

/// In the daemon: the collector over the handed-over counters map.
pub fn collector(
    map: std::os::fd::OwnedFd,
    _names: Vec<String>,
    _settings: &ProbeSettings,
) -> Result<Box<dyn Collector>, String> {
    let counts = PerCpuStruct::from_fd(MAP, map, VALUE_SIZE)?;
    Ok(Box::new(CachestatCollector { counts }))
}

struct CachestatCollector {
    counts: PerCpuStruct,
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
        ] {
            enc.family(desc);
            enc.sample(desc, &[], self.counts.sum(word));
        }
        Ok(())
    }
}
