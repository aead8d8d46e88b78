//! Packet drops by kernel drop reason: `usescope_skb_drops_total{reason}`
//! (plus `protocol` with `--probe.drops.protocol-label`).
//!
//! The kernel side counts reason *numbers* into a per-CPU hash keyed by
//! (slot, protocol), with an entry only for keys that have dropped (layout
//! in `ebpf-probes/usescope.h`), so a scrape copies the reasons in use,
//! not every possible one. The numbers differ between kernel
//! versions (NETFILTER_DROP is 12 on 6.18 and 8 on older kernels), so the
//! names are resolved once at start-up from the running kernel's BTF:
//! `enum skb_drop_reason` for core reasons, `enum skb_drop_reason_subsys`
//! plus the owning module's BTF for subsystem reasons (`subsys << 16 | code`).

use super::btf::{Btf, Enum, find_enum};
use super::layout::{
    DROPS_CORE_SLOTS, DROPS_OVERFLOW_SLOT, DROPS_PROTO_NAMES, DROPS_PROTOS, DROPS_SLOTS,
    DROPS_SUBSYS_CODES, DROPS_SUBSYS_MAX, DROPS_SUBSYS_SHIFT,
};
use super::loader::{self, Kind, Mode, ProbeError};
use super::percpu::PerCpuHash;
use super::{Kernel, Loaded, ProbeSettings};
use crate::collector::Collector;
use crate::error::CollectError;
use crate::exposition::{Desc, Encoder};

pub const COLLECTOR: &str = "probe_drops";

const DROPS: Desc = Desc::counter(
    "usescope_skb_drops_total",
    "Packets the kernel freed as dropped (skb:kfree_skb), by drop reason named from the running kernel's BTF.",
);

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

/// The per-CPU hash the collector reads: key [`DropsKey`](super::layout::DropsKey), value one u64.
pub const MAP: &str = "us_drops";
const VALUE_SIZE: usize = size_of::<u64>();

/// Protocol rows the probe keeps: 1 without --probe.drops.protocol-label
/// (the kernel side folds every drop into protocol 0).
pub fn protocols(settings: &ProbeSettings) -> usize {
    if settings.drops_protocol_label {
        DROPS_PROTOS
    } else {
        1
    }
}

/// In the probe loader process: name the reasons, load and attach. The
/// names travel to the daemon with the fds, so it never reads BTF.
pub fn load(kernel: &Kernel, settings: &ProbeSettings) -> Result<Loaded, ProbeError> {
    let names = resolve_names(kernel)?;
    let protocol_label = u8::from(settings.drops_protocol_label);
    // Room for every key the program can make, so an insert never fails.
    let keys = (DROPS_SLOTS * protocols(settings)) as u32;
    let loaded = loader::load_and_attach(loader::DROPS_OBJ, &kernel.btf, MODES, |l| {
        l.override_global("protocol_label", &protocol_label, true);
        l.map_max_entries(MAP, keys);
    })?;
    Ok(Loaded { names, ..loaded })
}

/// In the daemon: the collector over the handed-over counters map, naming
/// slots with the loader's reason names.
pub fn collector(
    map: std::os::fd::OwnedFd,
    names: Vec<String>,
    settings: &ProbeSettings,
) -> Result<Box<dyn Collector>, String> {
    Ok(Box::new(DropsCollector::new(map, names, settings)?))
}

pub struct DropsCollector {
    counts: PerCpuHash,
    names: Vec<String>,
    /// Whether samples carry the `protocol` label.
    protocol_label: bool,
    /// (key, sum over CPUs) of the last read, reused across scrapes.
    totals: Vec<(u64, u64)>,
}

impl DropsCollector {
    pub fn new(
        map: std::os::fd::OwnedFd,
        names: Vec<String>,
        settings: &ProbeSettings,
    ) -> Result<DropsCollector, String> {
        Ok(DropsCollector {
            counts: PerCpuHash::from_fd(MAP, map, VALUE_SIZE)?,
            names,
            protocol_label: settings.drops_protocol_label,
            totals: Vec::new(),
        })
    }

    /// The keys the last scrape read, as (protocol index, slot): only
    /// those that dropped at least once since the probe was loaded.
    pub fn keys_read(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.totals.iter().map(|&(key, _)| split_key(key))
    }
}

/// (protocol index, slot) of a map key ([`DropsKey`](super::layout::DropsKey): slot in the low
/// 32 bits, protocol in the high 32).
pub fn split_key(key: u64) -> (usize, usize) {
    ((key >> 32) as usize, (key & 0xffff_ffff) as usize)
}

/// Sums each entry's per-CPU counts into `out` as (key, total), ordered by
/// key, i.e. by protocol and then slot, so the output order is stable.
pub fn totals<'a>(
    entries: impl Iterator<Item = (u64, std::slice::ChunksExact<'a, u64>)>,
    out: &mut Vec<(u64, u64)>,
) {
    out.clear();
    out.extend(entries.map(|(key, cpus)| {
        let total = cpus
            .map(|c| c.first().copied().unwrap_or(0))
            .fold(0u64, u64::wrapping_add);
        (key, total)
    }));
    out.sort_unstable_by_key(|&(key, _)| key);
}

impl Collector for DropsCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.counts
            .read()
            .map_err(|e| CollectError::other("bpf map us_drops", e.to_string()))?;
        totals(self.counts.entries(), &mut self.totals);
        enc.family(&DROPS);
        for &(key, count) in &self.totals {
            let (proto, slot) = split_key(key);
            // Keys come from our own program, so both are in range; a key
            // that is not is skipped rather than trusted.
            let (Some(name), Some(protocol)) =
                (self.names.get(slot), DROPS_PROTO_NAMES.get(proto))
            else {
                continue;
            };
            if self.protocol_label {
                enc.sample(&DROPS, &[("protocol", protocol), ("reason", name)], count);
            } else {
                enc.sample(&DROPS, &[("reason", name)], count);
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

    /// Per-CPU values of one entry: `cpus` words of one u64 each.
    fn per_cpu(values: &[u64]) -> std::slice::ChunksExact<'_, u64> {
        values.chunks_exact(1)
    }

    #[test]
    fn totals_sum_cpus_and_order_by_protocol_then_slot() {
        let ipv4_no_socket = 1u64 << 32 | 3;
        let other_netfilter = 12u64;
        let other_no_socket = 3u64;
        let (a, b, c) = ([5, 7], [0, 1], [u64::MAX, 2]);
        let mut out = vec![(99, 99)];
        totals(
            [
                (ipv4_no_socket, per_cpu(&a)),
                (other_netfilter, per_cpu(&b)),
                (other_no_socket, per_cpu(&c)),
            ]
            .into_iter(),
            &mut out,
        );
        assert_eq!(
            out,
            [(other_no_socket, 1), (other_netfilter, 1), (ipv4_no_socket, 12)],
            "sums wrap like the kernel's counters, stale rows are cleared"
        );
        assert_eq!(split_key(ipv4_no_socket), (1, 3));
        assert_eq!(split_key(other_netfilter), (0, 12));
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
