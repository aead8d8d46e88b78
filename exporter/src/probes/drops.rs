//! Packet drops by kernel drop reason: `usescope_skb_drops_total{reason}`
//! (plus `protocol` with `--probe.drops.protocol-label`).
//!
//! The kernel side counts reason *numbers* into a bounded per-CPU array of
//! counters, one per (protocol, slot), and marks in a per-CPU bitmap which
//! counters it has touched (layout in `ebpf-probes/usescope.h`). A scrape
//! reads the bitmap, then only the counters in use: with 256 CPUs that is
//! about 16 KB plus 2 KB per reason seen, where reading every counter
//! was 3.9 MB. The numbers differ between kernel
//! versions (NETFILTER_DROP is 12 on 6.18 and 8 on older kernels), so the
//! names are resolved once at start-up from the running kernel's BTF:
//! `enum skb_drop_reason` for core reasons, `enum skb_drop_reason_subsys`
//! plus the owning module's BTF for subsystem reasons (`subsys << 16 | code`).
//!
//! `--probe.drops.per-cgroup` adds `usescope_cgroup_skb_drops_total`: the
//! drops of packets that have a socket, by the socket's cgroup2 cgroup (the
//! receiving socket, the tracepoint's `rx_sk`, on Linux 6.11+; else
//! `skb->sk`, which is only set on the transmit path), through
//! [`cgroup_counts`] with [`OnGone::FoldIntoOther`] as tasks' execs. No
//! `reason` label, to bound series at one per cgroup. Drops without a
//! socket (forwarded, early-dropped packets) are not in that family, so
//! its sum is the host's drops that had a socket, not all drops.

use super::btf::{Btf, Enum, find_enum};
use std::os::fd::OwnedFd;

use super::cgroup_counts::{self, CgroupCounts, OnGone};
use super::cgroup_ids::Hierarchy;

use super::layout::{
    DROPS_CORE_SLOTS, DROPS_OVERFLOW_SLOT, DROPS_PROTO_NAMES, DROPS_PROTOS, DROPS_SLOTS,
    DROPS_SUBSYS_CODES, DROPS_SUBSYS_MAX, DROPS_SUBSYS_SHIFT, DROPS_USED_WORDS,
};
use super::loader::{self, Kind, Mode, ProbeError};
use super::percpu::PerCpuCounters;
use super::{Kernel, Loaded, ProbeFlag, ProbeFlagKind, ProbeSettings, ProbeSpec};
use crate::kernel::error::CollectError;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const SPEC: ProbeSpec = ProbeSpec {
    name: "drops",
    help: "Packet drops by kernel drop reason (skb:kfree_skb)",
    default_enabled: true,
    collector: "probe_drops",
    modes: ALL_MODES,
    map: MAP,
    flags: &[
        ProbeFlag {
            name: PROTOCOL_LABEL,
            help: "Add a protocol label (ipv4, ipv6, arp, other) to usescope_skb_drops_total",
            kind: ProbeFlagKind::Bool,
            default: None,
            value_name: None,
        },
        ProbeFlag {
            name: PER_CGROUP,
            help: "Also count drops of packets with a socket by the socket's cgroup2 cgroup (usescope_cgroup_skb_drops_total, no reason label), labelled and selected as the cgroup collector does; a removed cgroup's series goes and its drops move to cgroup=\"other\"",
            kind: ProbeFlagKind::Bool,
            default: None,
            value_name: None,
        },
        ProbeFlag {
            name: MAX_CGROUPS,
            help: "Most cgroups the per-cgroup drops map holds at once, and most cgroup label sets written (--probe.drops.per-cgroup); drops past either are counted in cgroup=\"other\" and usescope_cgroup_skb_drops_folded_total",
            kind: ProbeFlagKind::U32 { min: 1 },
            default: Some("1024"),
            value_name: None,
        },
    ],
    metrics: &[&DROPS, &CGROUP_DROPS, &FOLDED],
    load,
    build: collector,
};

/// `--probe.drops.protocol-label`: a `protocol` label on drops.
pub const PROTOCOL_LABEL: &str = "probe.drops.protocol-label";

/// `--probe.drops.per-cgroup`: drops by the socket's cgroup too.
pub const PER_CGROUP: &str = "probe.drops.per-cgroup";
/// `--probe.drops.max-cgroups`: entries of the per-cgroup map.
pub const MAX_CGROUPS: &str = "probe.drops.max-cgroups";
const DEFAULT_MAX_CGROUPS: u32 = 1024;
/// The hash cgroup id -> drops.
pub const CGROUP_MAP: &str = "us_drops_cg";

const CGROUP_DROPS: Desc = Desc::counter(
    "usescope_cgroup_skb_drops_total",
    "Dropped packets that had a socket, by the socket's cgroup2 cgroup (--probe.drops.per-cgroup), all reasons; cgroup=\"other\": unselected cgroups, removed ones, and the drops usescope_cgroup_skb_drops_folded_total counts. Drops without a socket are not counted here.",
);
const FOLDED: Desc = Desc::counter(
    "usescope_cgroup_skb_drops_folded_total",
    "Drops counted in cgroup=\"other\" although their cgroup may be selected: gone (the series of removed cgroups), map_full (the kernel's map held --probe.drops.max-cgroups cgroups), series_limit (as many label sets written), unresolved (the cgroup had gone before a scrape named it), no_cgroup (the socket's cgroup was unreadable).",
);

const DROPS: Desc = Desc::counter(
    "usescope_skb_drops_total",
    "Packets the kernel freed as dropped (skb:kfree_skb), by drop reason named from the running kernel's BTF.",
);

/// Every mode the daemon may be told of: with `--probe.drops.per-cgroup`
/// first `tp_btf_rx_sk`, the program that reads the tracepoint's `rx_sk`
/// (Linux 6.11+), then [`MODES`], whose programs see `skb->sk` only.
const ALL_MODES: &[Mode] = &[
    Mode {
        name: "tp_btf_rx_sk",
        kind: Kind::BtfTracePoint,
        programs: &[("us_drops_btf_sk", "kfree_skb")],
    },
    Mode {
        name: "tp_btf",
        kind: Kind::BtfTracePoint,
        programs: &[("us_drops_btf", "kfree_skb")],
    },
    Mode {
        name: "raw_tp",
        kind: Kind::RawTracePoint,
        programs: &[("us_drops_raw", "kfree_skb")],
    },
];

/// The modes without `--probe.drops.per-cgroup`.
pub const MODES: &[Mode] = &[
    Mode {
        name: "tp_btf",
        kind: Kind::BtfTracePoint,
        programs: &[("us_drops_btf", "kfree_skb")],
    },
    Mode {
        name: "raw_tp",
        kind: Kind::RawTracePoint,
        programs: &[("us_drops_raw", "kfree_skb")],
    },
];

/// Label for the slot that collects every reason the array cannot hold.
pub const OUT_OF_RANGE: &str = "OUT_OF_RANGE";

/// The reason number a slot counts; None for the overflow slot.
pub fn slot_reason(slot: usize) -> Option<u64> {
    if slot < DROPS_CORE_SLOTS {
        return Some(slot as u64);
    }
    if slot >= DROPS_OVERFLOW_SLOT {
        return None;
    }
    let rel = slot - DROPS_CORE_SLOTS;
    let subsys = (rel / DROPS_SUBSYS_CODES + 1) as u64;
    let code = (rel % DROPS_SUBSYS_CODES) as u64;
    Some(subsys << DROPS_SUBSYS_SHIFT | code)
}

/// The name of every slot, from the kernel's enums:
/// - `core`: `enum skb_drop_reason` (prefix `SKB_DROP_REASON_` stripped);
/// - `modules`: enums from module BTF; a member whose value has a
///   subsystem in its high bits names that subsystem reason.
///
/// Numbers without a name become `UNKNOWN_<n>`.
pub fn reason_names(core: Option<&Enum>, modules: &[Enum]) -> Vec<String> {
    let mut names: Vec<String> = (0..DROPS_SLOTS)
        .map(|slot| match slot_reason(slot) {
            Some(n) => format!("UNKNOWN_{n}"),
            None => OUT_OF_RANGE.to_string(),
        })
        .collect();
    for (name, value) in core.iter().flat_map(|e| e.members.iter()) {
        let short = name
            .strip_prefix("SKB_DROP_REASON_")
            .or_else(|| name.strip_prefix("SKB_"))
            .unwrap_or(name);
        // MAX and SUBSYS_MASK are bounds, not reasons.
        if short == "MAX" || short == "SUBSYS_MASK" {
            continue;
        }
        if *value < DROPS_CORE_SLOTS as u64 {
            names[*value as usize] = short.to_string();
        }
    }
    for (name, value) in modules.iter().flat_map(|e| e.members.iter()) {
        let subsys = (value >> DROPS_SUBSYS_SHIFT) as usize;
        let code = (value & ((1 << DROPS_SUBSYS_SHIFT) - 1)) as usize;
        if name.starts_with("__") || subsys == 0 || subsys > DROPS_SUBSYS_MAX {
            continue;
        }
        if code < DROPS_SUBSYS_CODES {
            names[DROPS_CORE_SLOTS + (subsys - 1) * DROPS_SUBSYS_CODES + code] = name.to_string();
        }
    }
    names
}

/// Subsystem names from `enum skb_drop_reason_subsys`, lowercased, paired
/// with the module that would define their reasons (the first word:
/// SKB_DROP_REASON_SUBSYS_MAC80211_UNUSABLE → "mac80211").
pub fn subsystem_modules<'a>(subsys: Option<&Enum<'a>>) -> Vec<String> {
    subsys
        .iter()
        .flat_map(|e| e.members.iter())
        .filter(|(_, v)| *v >= 1 && *v <= DROPS_SUBSYS_MAX as u64)
        .filter_map(|(n, _)| n.strip_prefix("SKB_DROP_REASON_SUBSYS_"))
        .filter(|n| *n != "NUM")
        .filter_map(|n| n.split('_').next())
        .map(str::to_ascii_lowercase)
        .collect()
}

/// Resolves slot names from /sys/kernel/btf: vmlinux, then the BTF of the
/// modules that own subsystem reasons, if loaded. A module loaded later
/// keeps `UNKNOWN_<n>` names until usescope restarts.
fn resolve_names(kernel: &Kernel) -> Result<Vec<String>, ProbeError> {
    let vmlinux = Btf::parse(&kernel.btf_bytes)
        .map_err(|e| ProbeError(format!("reading /sys/kernel/btf/vmlinux: {e}")))?;
    let enums = vmlinux
        .enums()
        .map_err(|e| ProbeError(format!("reading /sys/kernel/btf/vmlinux: {e}")))?;
    let core = find_enum(&enums, "skb_drop_reason");
    if core.is_none() {
        return Err(ProbeError(
            "the kernel's BTF has no enum skb_drop_reason (kernel older than 5.17?)".into(),
        ));
    }
    let mut module_enums = Vec::new();
    let module_bytes: Vec<Vec<u8>> = subsystem_modules(find_enum(&enums, "skb_drop_reason_subsys"))
        .iter()
        .filter_map(|m| std::fs::read(format!("/sys/kernel/btf/{m}")).ok())
        .collect();
    for bytes in &module_bytes {
        match Btf::parse_split(bytes, Some(&vmlinux)).and_then(|b| b.enums()) {
            Ok(e) => module_enums.extend(e),
            Err(e) => tracing::info!(error = %e, "skipping unreadable module BTF for drop reasons"),
        }
    }
    Ok(reason_names(core, &module_enums))
}

/// The per-CPU array the collector reads: the in-use bitmap, then the
/// counters (layout in `ebpf-probes/usescope.h`).
pub const MAP: &str = "us_drops";

/// Protocol rows the probe keeps: 1 without --probe.drops.protocol-label
/// (the kernel side folds every drop into protocol 0).
pub fn protocols(settings: &ProbeSettings) -> usize {
    if settings.switch(PROTOCOL_LABEL) {
        DROPS_PROTOS
    } else {
        1
    }
}

/// In the probe loader process: name the reasons, load and attach. The
/// names travel to the daemon with the fds, so it never reads BTF.
pub fn load(kernel: &Kernel, settings: &ProbeSettings) -> Result<Loaded, ProbeError> {
    let names = resolve_names(kernel)?;
    let protocol_label = u8::from(settings.switch(PROTOCOL_LABEL));
    // The bitmap and the counters of the protocol rows kept; without the
    // label that is a quarter of the kernel memory.
    let keys = (DROPS_USED_WORDS + DROPS_SLOTS * protocols(settings)) as u32;
    // Without the flag per_cgroup stays false and the verifier drops the
    // per-cgroup code; the map keeps one entry and us_drops its size.
    let hierarchy = if settings.switch(PER_CGROUP) {
        Some(Hierarchy::find_v2().map_err(ProbeError)?)
    } else {
        None
    };
    let per_cgroup = u8::from(hierarchy.is_some());
    let (max, extra, modes) = match hierarchy {
        Some(_) => (
            settings.number(MAX_CGROUPS).unwrap_or(DEFAULT_MAX_CGROUPS),
            2,
            ALL_MODES,
        ),
        None => (1, 0, MODES),
    };
    let loaded = loader::load_and_attach("drops", &kernel.btf, modes, |l| {
        l.override_global("protocol_label", &protocol_label, true);
        l.override_global("per_cgroup", &per_cgroup, true);
        l.override_global("cg_counters", &keys, true);
        l.map_max_entries(MAP, keys + extra);
        l.map_max_entries(CGROUP_MAP, max);
    })?;
    let mut names = names;
    if let Some(h) = &hierarchy {
        names.extend(cgroup_counts::loader_names(&loaded, CGROUP_MAP, h)?);
    }
    Ok(Loaded { names, ..loaded })
}

/// In the daemon: the collector over the handed-over counters map, naming
/// slots with the loader's reason names.
pub fn collector(
    map: OwnedFd,
    names: Vec<String>,
    settings: &ProbeSettings,
) -> Result<Box<dyn Collector>, String> {
    Ok(Box::new(DropsCollector::new(map, names, settings)?))
}

/// Reads the counters in use: the bitmap words of the protocol rows kept
/// (one batch lookup), then the counters whose bit some CPU set, one batch
/// lookup per run of adjacent ones. Counters nothing has dropped into are
/// never copied. A bit past the rows kept (the kernel side never sets one)
/// is ignored.
pub struct InUseReader {
    counts: PerCpuCounters,
    /// Counters in the rows kept: `protocols * DROPS_SLOTS`.
    counters: usize,
    /// The bitmap, OR-ed over CPUs.
    used: Vec<u64>,
    /// (counter, sum over CPUs) of the last read, by counter.
    totals: Vec<(usize, u64)>,
}

impl InUseReader {
    /// `counts` is the us_drops map (or a stand-in of another CPU count,
    /// see bench/drops-scrape); `protocols` the rows the probe keeps.
    pub fn new(counts: PerCpuCounters, protocols: usize) -> Result<InUseReader, String> {
        let counters = protocols * DROPS_SLOTS;
        let needed = DROPS_USED_WORDS + counters;
        if (counts.max_entries() as usize) < needed {
            return Err(format!(
                "map {MAP} has {} entries, {needed} expected by usescope \
                 (ebpf-probes/usescope.h and probes/layout.rs disagree)",
                counts.max_entries()
            ));
        }
        Ok(InUseReader {
            counts,
            counters,
            used: Vec::new(),
            totals: Vec::new(),
        })
    }

    pub fn read(&mut self) -> std::io::Result<()> {
        let words = self.counters.div_ceil(64);
        self.used.clear();
        self.used.extend(
            self.counts
                .read_range(0, words as u32)?
                .map(|per_cpu| per_cpu.iter().fold(0, |all, cpu| all | cpu)),
        );
        self.totals.clear();
        let mut in_use = BitIter::new(&self.used).take_while(|&c| c < self.counters);
        let mut next = in_use.next();
        while let Some(first) = next {
            // A run of adjacent counters in use is one batch lookup.
            let mut end = first + 1;
            next = in_use.next();
            while next == Some(end) {
                end += 1;
                next = in_use.next();
            }
            let sums = self
                .counts
                .read_range((DROPS_USED_WORDS + first) as u32, (end - first) as u32)?
                .map(|per_cpu| per_cpu.iter().fold(0u64, |s, v| s.wrapping_add(*v)));
            self.totals.extend((first..end).zip(sums));
        }
        Ok(())
    }

    /// (protocol index, slot, total) of every counter the last read found
    /// in use, ordered by protocol, then slot.
    pub fn totals(&self) -> impl Iterator<Item = (usize, usize, u64)> + '_ {
        self.totals
            .iter()
            .map(|&(c, total)| (c / DROPS_SLOTS, c % DROPS_SLOTS, total))
    }

    /// The sums over CPUs of the `N` counters past the rows kept (the
    /// per-cgroup no_cgroup and map_full counters).
    pub fn past_rows<const N: usize>(&mut self) -> std::io::Result<[u64; N]> {
        let first = (DROPS_USED_WORDS + self.counters) as u32;
        let mut out = [0u64; N];
        for (o, per_cpu) in out.iter_mut().zip(self.counts.read_range(first, N as u32)?) {
            *o = per_cpu.iter().fold(0u64, |s, v| s.wrapping_add(*v));
        }
        Ok(out)
    }

    /// Value bytes the kernel copied out since the last call.
    pub fn take_bytes_read(&mut self) -> usize {
        self.counts.take_bytes_read()
    }
}

/// The positions of the set bits of a bitmap of u64 words, ascending.
struct BitIter<'a> {
    words: &'a [u64],
    word: usize,
    bits: u64,
}

impl<'a> BitIter<'a> {
    fn new(words: &'a [u64]) -> BitIter<'a> {
        BitIter {
            words,
            word: 0,
            bits: words.first().copied().unwrap_or(0),
        }
    }
}

impl Iterator for BitIter<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        while self.bits == 0 {
            self.word += 1;
            self.bits = *self.words.get(self.word)?;
        }
        let bit = self.bits.trailing_zeros() as usize;
        self.bits &= self.bits - 1;
        Some(self.word * 64 + bit)
    }
}

pub struct DropsCollector {
    reader: InUseReader,
    names: Vec<String>,
    /// Whether samples carry the `protocol` label.
    protocol_label: bool,
    /// `--probe.drops.per-cgroup`: drops by cgroup, from [`CGROUP_MAP`].
    cgroups: Option<CgroupCounts>,
}

impl DropsCollector {
    pub fn new(
        map: OwnedFd,
        names: Vec<String>,
        settings: &ProbeSettings,
    ) -> Result<DropsCollector, String> {
        let counts = PerCpuCounters::from_fd(MAP, map)?;
        // The reason names, then the per-cgroup map's id and hierarchy.
        let mut names = names;
        let cg = names.split_off(DROPS_SLOTS.min(names.len()));
        let cgroups = match &cg[..] {
            [] => None,
            cg => {
                let max = settings.number(MAX_CGROUPS).unwrap_or(DEFAULT_MAX_CGROUPS);
                Some(CgroupCounts::open(
                    cg,
                    CGROUP_MAP,
                    settings.cgroup_selection(),
                    max as usize,
                    OnGone::FoldIntoOther,
                    (&CGROUP_DROPS, &FOLDED),
                )?)
            }
        };
        Ok(DropsCollector {
            reader: InUseReader::new(counts, protocols(settings))?,
            names,
            protocol_label: settings.switch(PROTOCOL_LABEL),
            cgroups,
        })
    }

    /// What the last scrape read (for tests: which counters, how many bytes).
    pub fn reader(&mut self) -> &mut InUseReader {
        &mut self.reader
    }
}

impl Collector for DropsCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let err = |e: std::io::Error| CollectError::other("bpf map us_drops", e.to_string());
        // The host counts first: the per-cgroup counts, read after, may
        // hold the drops of that moment too, never fewer.
        self.reader.read().map_err(err)?;
        let [no_cgroup, map_full] = match &mut self.cgroups {
            Some(c) => {
                c.read().map_err(err)?;
                self.reader.past_rows().map_err(err)?
            }
            None => [0, 0],
        };
        enc.family(&DROPS);
        // Only non-zero reasons are exported; a zero is a counter whose
        // bit was seen before its first count (see drops.bpf.c).
        for (proto, slot, count) in self.reader.totals().filter(|&(_, _, c)| c > 0) {
            let (Some(name), Some(protocol)) = (self.names.get(slot), DROPS_PROTO_NAMES.get(proto))
            else {
                continue;
            };
            if self.protocol_label {
                enc.sample(&DROPS, &[("protocol", protocol), ("reason", name)], count);
            } else {
                enc.sample(&DROPS, &[("reason", name)], count);
            }
        }
        match &self.cgroups {
            Some(c) => c.write(enc, map_full, no_cgroup),
            // Declared families are always written (tests/probes.rs).
            None => {
                enc.family(&CGROUP_DROPS);
                enc.family(&FOLDED);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e<'a>(name: &'a str, members: &[(&'a str, u64)]) -> Enum<'a> {
        Enum {
            name,
            members: members.to_vec(),
        }
    }

    /// The reader over a real per-CPU array written by hand: runs of
    /// adjacent counters, a counter only one CPU touched, a bit past the
    /// rows kept; sums against what was written, bytes against what was
    /// asked for.
    #[test]
    fn reader_reads_exactly_the_marked_counters() {
        use crate::probes::sys::test_maps;
        use std::os::fd::AsFd;
        let entries = (DROPS_USED_WORDS + DROPS_SLOTS) as u32;
        let Some(map) = test_maps::percpu_u64_array_or_skip(entries) else {
            return;
        };
        let cpus = crate::probes::percpu::possible_cpus().unwrap();
        // CPU 0 used counters 3, 4, 5 and 12; the last CPU 4 and 480; a
        // bit for counter 481 (past protocol 0's row) is ignored.
        let mut used = vec![vec![0u64; cpus]; DROPS_USED_WORDS];
        for c in [3, 4, 5, 12] {
            used[c / 64][0] |= 1 << (c % 64);
        }
        for c in [4, 480, 481] {
            used[c / 64][cpus - 1] |= 1 << (c % 64);
        }
        for (w, per_cpu) in used.iter().enumerate() {
            test_maps::update(map.as_fd(), w as u32, per_cpu).unwrap();
        }
        let count = |c: usize, cpu: usize| (c * 10 + cpu + 1) as u64;
        for c in [3, 4, 5, 12, 480] {
            let per_cpu: Vec<u64> = (0..cpus).map(|cpu| count(c, cpu)).collect();
            test_maps::update(map.as_fd(), (DROPS_USED_WORDS + c) as u32, &per_cpu).unwrap();
        }
        // Set, but no bit: must not be read.
        let unmarked = vec![7u64; cpus];
        test_maps::update(map.as_fd(), (DROPS_USED_WORDS + 6) as u32, &unmarked).unwrap();

        let counts = PerCpuCounters::from_fd(MAP, map).unwrap();
        let mut reader = InUseReader::new(counts, 1).unwrap();
        reader.read().unwrap();
        let want: Vec<(usize, usize, u64)> = [3, 4, 5, 12, 480]
            .iter()
            .map(|&c| (0, c, (0..cpus).map(|cpu| count(c, cpu)).sum()))
            .collect();
        assert_eq!(reader.totals().collect::<Vec<_>>(), want);
        // 8 bitmap words for one row, then the five counters.
        assert_eq!(reader.take_bytes_read(), (8 + 5) * cpus * 8);
    }

    #[test]
    fn bit_positions_ascend_across_words() {
        let words = [0b1011, 0, 1 << 63 | 1];
        let set: Vec<usize> = BitIter::new(&words).collect();
        assert_eq!(set, [0, 1, 3, 128, 191]);
        assert_eq!(BitIter::new(&[]).next(), None);
        assert_eq!(BitIter::new(&[0, 0]).next(), None);
    }

    #[test]
    fn slots_map_to_reason_numbers() {
        assert_eq!(slot_reason(0), Some(0));
        assert_eq!(slot_reason(255), Some(255));
        assert_eq!(slot_reason(256), Some(1 << 16));
        assert_eq!(slot_reason(256 + 33), Some(2 << 16 | 1));
        assert_eq!(slot_reason(DROPS_OVERFLOW_SLOT - 1), Some(7 << 16 | 31));
        assert_eq!(slot_reason(DROPS_OVERFLOW_SLOT), None);
    }

    #[test]
    fn names_from_enums_with_unknown_fallback() {
        let core = e(
            "skb_drop_reason",
            &[
                ("SKB_NOT_DROPPED_YET", 0),
                ("SKB_DROP_REASON_NO_SOCKET", 3),
                ("SKB_DROP_REASON_NETFILTER_DROP", 12),
                ("SKB_DROP_REASON_MAX", 128),
                ("SKB_DROP_REASON_SUBSYS_MASK", 0xffff_0000),
            ],
        );
        let ovs = e(
            "ovs_drop_reason",
            &[
                ("__OVS_DROP_REASON", 2 << 16),
                ("OVS_DROP_LAST_ACTION", 2 << 16 | 1),
            ],
        );
        let names = reason_names(Some(&core), &[ovs]);
        assert_eq!(names.len(), DROPS_SLOTS);
        assert_eq!(names[3], "NO_SOCKET");
        assert_eq!(names[12], "NETFILTER_DROP");
        assert_eq!(names[0], "NOT_DROPPED_YET");
        assert_eq!(names[128], "UNKNOWN_128");
        assert_eq!(names[4], "UNKNOWN_4");
        assert_eq!(names[256 + 32 + 1], "OVS_DROP_LAST_ACTION");
        assert_eq!(names[256 + 32], format!("UNKNOWN_{}", 2 << 16));
        assert_eq!(names[DROPS_OVERFLOW_SLOT], OUT_OF_RANGE);
        // No enum at all: everything is UNKNOWN_<n>.
        assert_eq!(reason_names(None, &[])[3], "UNKNOWN_3");
    }

    #[test]
    fn subsystem_modules_from_enum() {
        let s = e(
            "skb_drop_reason_subsys",
            &[
                ("SKB_DROP_REASON_SUBSYS_CORE", 0),
                ("SKB_DROP_REASON_SUBSYS_MAC80211_UNUSABLE", 1),
                ("SKB_DROP_REASON_SUBSYS_OPENVSWITCH", 2),
                ("SKB_DROP_REASON_SUBSYS_NUM", 3),
            ],
        );
        assert_eq!(subsystem_modules(Some(&s)), ["mac80211", "openvswitch"]);
        assert!(subsystem_modules(None).is_empty());
    }

    #[test]
    fn running_kernel_names() {
        let bytes = std::fs::read("/sys/kernel/btf/vmlinux");
        let needs = "/sys/kernel/btf/vmlinux (a kernel with CONFIG_DEBUG_INFO_BTF)";
        if !crate::test_skip::unless_met(bytes.is_ok(), needs) {
            return;
        }
        let bytes = bytes.unwrap();
        let btf = Btf::parse(&bytes).unwrap();
        let enums = btf.enums().unwrap();
        let names = reason_names(find_enum(&enums, "skb_drop_reason"), &[]);
        let slot = |n: &str| names.iter().position(|x| x == n);
        assert!(slot("NO_SOCKET").is_some());
        assert!(slot("NETFILTER_DROP").is_some());
        // The tracepoint's own table agrees with our BTF-derived numbering.
        if let Ok(fmt) = std::fs::read_to_string("/sys/kernel/tracing/events/skb/kfree_skb/format")
        {
            for name in ["NO_SOCKET", "NETFILTER_DROP"] {
                let n = slot(name).unwrap();
                assert!(
                    fmt.contains(&format!("{{ {n}, \"{name}\" }}")),
                    "{name} = {n}"
                );
            }
        }
        // A number this kernel does not define.
        assert_eq!(
            names[DROPS_CORE_SLOTS - 1],
            format!("UNKNOWN_{}", DROPS_CORE_SLOTS - 1)
        );
    }
}
