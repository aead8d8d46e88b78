//! Block I/O latency: `usescope_block_io_latency_seconds{device,op}`, a
//! histogram of the time from a request's issue to the driver
//! (block:block_rq_issue) to its completion (block:block_rq_complete), per
//! disk and op group (read, write, discard, flush, grouped as
//! /proc/diskstats groups them). Buckets: see [`super::log2_hist`].
//!
//! The kernel side keys its per-CPU histograms by (dev_t, op group) in a
//! per-CPU hash, since only it sees which disks do I/O. The collector names
//! each dev_t from `/sys/dev/block/MAJ:MIN/uevent` (readable without
//! privileges), caching the names; a disk that is gone keeps its
//! histogram under `MAJ:MIN`.
//!
//! `--probe.biolatency.per-cgroup` adds a histogram per cgroup and op
//! ([`cgroup`]), bounded by `--probe.biolatency.max-cgroups`.
//!
//! Off by default (`--probe.biolatency`): every I/O costs two program runs
//! with a hash lookup each (about 0.4 µs in the programs here), which on a
//! host doing hundreds of thousands of I/Os a second is a measurable share
//! of a CPU, for an operator to choose.

use std::collections::HashMap;
use std::os::fd::OwnedFd;

use super::layout::{BIOLAT_OP_NAMES, BIOLAT_SUM_WORD, BiolatHist, LOG2_HIST_BUCKETS};
use super::loader::{self, Kind, Mode, ProbeError};
use super::log2_hist::{self, Buckets, Slots};
use super::percpu::PerCpuHash;
use super::{Kernel, Loaded, ProbeFlag, ProbeFlagKind, ProbeSettings, ProbeSpec};
use crate::kernel::error::CollectError;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

#[path = "biolatency_cgroup.rs"]
pub mod cgroup;

pub const SPEC: ProbeSpec = ProbeSpec {
    name: "biolatency",
    help: "Block I/O latency histogram per disk and op (block_rq_issue/complete tracepoints); off by default: two program runs with hash lookups per I/O",
    default_enabled: false,
    collector: "probe_biolatency",
    modes: MODES,
    map: MAP,
    flags: &[
        ProbeFlag {
            name: PER_CGROUP,
            help: "Also a block I/O latency histogram per cgroup and op (usescope_cgroup_block_io_latency_seconds; the cgroup the I/O is charged to, no device label), cgroups labelled and selected as the cgroup collector does",
            kind: ProbeFlagKind::Bool,
            default: None,
            value_name: None,
        },
        ProbeFlag {
            name: MAX_CGROUPS,
            help: "Most cgroups the per-cgroup block I/O map holds (--probe.biolatency.per-cgroup); the I/O of cgroups past it is counted in cgroup=\"other\" and usescope_cgroup_block_io_latency_folded_total{reason=\"map_full\"}",
            kind: ProbeFlagKind::U32 { min: 1 },
            default: Some("256"),
            value_name: None,
        },
    ],
    metrics: &[&LATENCY, &cgroup::LATENCY, &cgroup::FOLDED],
    load,
    build: collector,
};

const LATENCY: Desc = Desc::histogram(
    "usescope_block_io_latency_seconds",
    "Block I/O service time, from issue to the driver to completion (block_rq_issue to block_rq_complete), per disk and op (read, write, discard, flush as /proc/diskstats groups them).",
);

pub const MODES: &[Mode] = &[
    Mode {
        name: "tp_btf",
        kind: Kind::BtfTracePoint,
        programs: &[
            ("us_bio_issue_btf", "block_rq_issue"),
            ("us_bio_done_btf", "block_rq_complete"),
        ],
    },
    Mode {
        name: "raw_tp",
        kind: Kind::RawTracePoint,
        programs: &[
            ("us_bio_issue_raw", "block_rq_issue"),
            ("us_bio_done_raw", "block_rq_complete"),
        ],
    },
];

/// The per-CPU hash the collector reads.
pub const MAP: &str = "us_bio_hist";
const VALUE_SIZE: usize = size_of::<BiolatHist>();

/// The kernel's internal dev_t: 12 bits of major above 20 of minor.
const MINOR_BITS: u32 = 20;

/// `--probe.biolatency.per-cgroup`: a histogram per cgroup too.
pub const PER_CGROUP: &str = "probe.biolatency.per-cgroup";
/// `--probe.biolatency.max-cgroups`: entries of the per-cgroup map.
pub const MAX_CGROUPS: &str = "probe.biolatency.max-cgroups";
const DEFAULT_MAX_CGROUPS: u32 = 256;

/// In the probe loader process: load and attach. With
/// `--probe.biolatency.per-cgroup`, reads cgroup ids in the v1 blkio
/// hierarchy where it is mounted, else in cgroup2, and sends the daemon
/// the ids of the per-cgroup maps and the hierarchy; without it the kernel
/// side compiles its per-cgroup code out (cgroup_by 0).
pub fn load(kernel: &Kernel, settings: &ProbeSettings) -> Result<Loaded, ProbeError> {
    let hierarchy = if settings.switch(PER_CGROUP) {
        Some(cgroup::Hierarchy::find("blkio").map_err(ProbeError)?)
    } else {
        None
    };
    let by = hierarchy.as_ref().map_or(0u32, |h| h.by);
    let max = match hierarchy {
        Some(_) => settings.number(MAX_CGROUPS).unwrap_or(DEFAULT_MAX_CGROUPS),
        None => 1,
    };
    let mut loaded = loader::load_and_attach("biolatency", &kernel.btf, MODES, |l| {
        l.override_global("cgroup_by", &by, true);
        l.map_max_entries(cgroup::MAP, max);
    })?;
    if let Some(h) = hierarchy {
        use aya::maps::Map;
        use std::os::fd::AsFd;
        let mut names = Vec::new();
        for name in [cgroup::MAP, cgroup::FOLD_MAP] {
            let map = match loaded.ebpf.map(name) {
                Some(Map::PerCpuHashMap(m) | Map::PerCpuArray(m)) => m,
                _ => return Err(ProbeError(format!("map {name} missing from the object"))),
            };
            let id = super::sys::map_id(map.fd().as_fd())
                .map_err(|e| ProbeError(format!("map {name}: {e}")))?;
            names.push(id.to_string());
        }
        names.extend(h.to_names());
        loaded.names = names;
    }
    Ok(loaded)
}

/// In the daemon: the collector over the handed-over histogram map.
pub fn collector(
    map: OwnedFd,
    names: Vec<String>,
    settings: &ProbeSettings,
) -> Result<Box<dyn Collector>, String> {
    let cgroups = if names.is_empty() {
        None
    } else {
        Some(cgroup::CgroupHist::new(
            &names,
            Buckets::new(settings.histogram),
            settings.cgroup_selection(),
        )?)
    };
    Ok(Box::new(BiolatencyCollector {
        cgroups,
        hists: PerCpuHash::from_fd(MAP, map, VALUE_SIZE)?,
        sysfs: "/sys".into(),
        names: HashMap::new(),
        series: Vec::new(),
        buckets: Buckets::new(settings.histogram),
    }))
}

/// (dev_t, op group) split from the map key, the layout of `struct
/// biolat_key` (dev in the low word on little-endian hosts).
fn split_key(key: u64) -> (u32, u32) {
    let bytes = key.to_ne_bytes();
    let dev = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let op = u32::from_ne_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    (dev, op)
}

/// `major:minor` of a kernel dev_t.
fn major_minor(dev: u32) -> String {
    format!("{}:{}", dev >> MINOR_BITS, dev & ((1 << MINOR_BITS) - 1))
}

/// The `DEVNAME=` line of a sysfs `uevent` file.
fn devname(uevent: &str) -> Option<&str> {
    uevent
        .lines()
        .find_map(|l| l.strip_prefix("DEVNAME="))
        .map(str::trim)
        .filter(|n| !n.is_empty())
}

struct BiolatencyCollector {
    hists: PerCpuHash,
    /// `--probe.biolatency.per-cgroup`.
    cgroups: Option<cgroup::CgroupHist>,
    sysfs: std::path::PathBuf,
    /// dev_t → disk name, for disks whose uevent named them.
    names: HashMap<u32, String>,
    /// (dev_t, op group, summed slots, summed ns) per key, reused.
    series: Vec<(u32, u32, Slots, u64)>,
    buckets: Buckets,
}

impl BiolatencyCollector {
    /// Names `dev` from sysfs unless already named. A disk sysfs does not
    /// name (gone, or sysfs not mounted) is looked up again next scrape.
    fn learn_name(&mut self, dev: u32) {
        if self.names.contains_key(&dev) {
            return;
        }
        let path = self
            .sysfs
            .join(format!("dev/block/{}/uevent", major_minor(dev)));
        if let Some(n) = std::fs::read_to_string(&path)
            .ok()
            .as_deref()
            .and_then(devname)
        {
            self.names.insert(dev, n.to_string());
        }
    }
}

impl Collector for BiolatencyCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.hists
            .read()
            .map_err(|e| CollectError::other("bpf map us_bio_hist", e.to_string()))?;
        self.series.clear();
        for (key, cpus) in self.hists.entries() {
            let (dev, op) = split_key(key);
            if op as usize >= BIOLAT_OP_NAMES.len() {
                continue;
            }
            let mut slots = [0; LOG2_HIST_BUCKETS + 1];
            let mut sum_ns = 0u64;
            for cpu in cpus {
                log2_hist::add_cpu(&mut slots, cpu);
                sum_ns = sum_ns.wrapping_add(cpu.get(BIOLAT_SUM_WORD).copied().unwrap_or(0));
            }
            self.series.push((dev, op, slots, sum_ns));
        }
        self.series
            .sort_unstable_by_key(|&(dev, op, _, _)| (dev, op));
        for i in 0..self.series.len() {
            self.learn_name(self.series[i].0);
        }
        enc.family(&LATENCY);
        for &(dev, op, ref slots, sum_ns) in &self.series {
            let unnamed;
            let device = match self.names.get(&dev) {
                Some(n) => n.as_str(),
                None => {
                    unnamed = major_minor(dev);
                    unnamed.as_str()
                }
            };
            let labels = [("device", device), ("op", BIOLAT_OP_NAMES[op as usize])];
            log2_hist::write(enc, &LATENCY, &mut self.buckets, slots, &labels, sum_ns);
        }
        match &mut self.cgroups {
            Some(c) => c.collect(enc)?,
            // Declared families are always written (tests/probes.rs).
            None => {
                enc.family(&cgroup::LATENCY);
                enc.family(&cgroup::FOLDED);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_as_the_c_struct_lays_them_out() {
        // struct biolat_key { __u32 dev; __u32 op; } in memory order.
        let mut bytes = [0u8; 8];
        bytes[..4].copy_from_slice(&((7u32 << MINOR_BITS) | 3).to_ne_bytes());
        bytes[4..].copy_from_slice(&1u32.to_ne_bytes());
        let (dev, op) = split_key(u64::from_ne_bytes(bytes));
        assert_eq!(major_minor(dev), "7:3");
        assert_eq!(BIOLAT_OP_NAMES[op as usize], "write");
    }

    #[test]
    fn devname_from_uevent() {
        assert_eq!(
            devname("MAJOR=7\nMINOR=0\nDEVNAME=loop0\nDEVTYPE=disk\n"),
            Some("loop0")
        );
        assert_eq!(devname("MAJOR=7\nDEVNAME=\n"), None);
        assert_eq!(devname(""), None);
    }
}
