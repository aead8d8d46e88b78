//! Rust mirrors of the map values in `ebpf-probes/usescope.h`.
//!
//! User space never casts map bytes to these structs: it reads the per-CPU
//! value as `u64` words and indexes them with the word offsets derived here
//! (`offset_of!`), so a layout mismatch cannot cause undefined behaviour. The
//! loader also checks each map's value size against `size_of` at load time,
//! and the tests below check every constant against the C header.

use std::mem::{offset_of, size_of};

pub const LOG2_HIST_BUCKETS: usize = 25;
pub const LOG2_HIST_OVERFLOW: usize = LOG2_HIST_BUCKETS;

#[repr(C)]
pub struct RunqlatHist {
    pub slots: [u64; LOG2_HIST_BUCKETS + 1],
    pub sum_ns: u64,
    pub missed: u64,
}

/// `op` label values by op group (BIOLAT_OP_* in the header).
pub const BIOLAT_OP_NAMES: [&str; 4] = ["read", "write", "discard", "flush"];

/// The per-CPU hash key: `dev` (kernel dev_t, major << 20 | minor) in the
/// low 32 bits and `op` in the high 32 bits of one little-endian u64.
#[repr(C)]
pub struct BiolatKey {
    pub dev: u32,
    pub op: u32,
}

#[repr(C)]
pub struct BiolatHist {
    pub slots: [u64; LOG2_HIST_BUCKETS + 1],
    pub sum_ns: u64,
}

pub const SOFTIRQ_VECS: usize = 10;

#[repr(C)]
pub struct SoftirqCounts {
    pub entries: [u64; SOFTIRQ_VECS],
    pub time_ns: [u64; SOFTIRQ_VECS],
    pub latency_slots: [[u64; LOG2_HIST_BUCKETS + 1]; SOFTIRQ_VECS],
    pub latency_sum_ns: [u64; SOFTIRQ_VECS],
    pub entered_at: [u64; SOFTIRQ_VECS],
    pub raised_at: [u64; SOFTIRQ_VECS],
}

/// Stall kinds (RECLAIM_KIND_* in the header), in index order.
pub const RECLAIM_KINDS: usize = 3;

#[repr(C)]
pub struct ReclaimHists {
    pub slots: [[u64; LOG2_HIST_BUCKETS + 1]; RECLAIM_KINDS],
    pub sum_ns: [u64; RECLAIM_KINDS],
}

#[repr(C)]
pub struct CachestatCounts {
    pub accesses: u64,
    pub misses: u64,
    pub dirtied: u64,
}

pub const DROPS_CORE_SLOTS: usize = 256;
pub const DROPS_SUBSYS_SHIFT: u32 = 16;
pub const DROPS_SUBSYS_MAX: usize = 7;
pub const DROPS_SUBSYS_CODES: usize = 32;
pub const DROPS_OVERFLOW_SLOT: usize = DROPS_CORE_SLOTS + DROPS_SUBSYS_MAX * DROPS_SUBSYS_CODES;
pub const DROPS_SLOTS: usize = DROPS_OVERFLOW_SLOT + 1;
pub const DROPS_PROTOS: usize = 4;
/// `protocol` label values by protocol index (DROPS_PROTO_* in the header).
pub const DROPS_PROTO_NAMES: [&str; DROPS_PROTOS] = ["other", "ipv4", "ipv6", "arp"];

/// Counters of the drops map: one per (protocol, slot), counter
/// `proto * DROPS_SLOTS + slot` at key `DROPS_USED_WORDS + counter`.
pub const DROPS_KEYS: usize = DROPS_PROTOS * DROPS_SLOTS;
/// Keys `0..DROPS_USED_WORDS` of the drops map: per CPU, the bitmap of the
/// counters that CPU has touched.
pub const DROPS_USED_WORDS: usize = DROPS_KEYS.div_ceil(64);

/// Word index of a field, for reading a value as `&[u64]`.
pub const fn word(byte_offset: usize) -> usize {
    byte_offset / size_of::<u64>()
}

pub const RUNQLAT_SUM_WORD: usize = word(offset_of!(RunqlatHist, sum_ns));
pub const RUNQLAT_MISSED_WORD: usize = word(offset_of!(RunqlatHist, missed));
pub const SOFTIRQ_ENTRIES_WORD: usize = word(offset_of!(SoftirqCounts, entries));
pub const SOFTIRQ_TIME_WORD: usize = word(offset_of!(SoftirqCounts, time_ns));
pub const SOFTIRQ_LATENCY_SLOTS_WORD: usize = word(offset_of!(SoftirqCounts, latency_slots));
pub const SOFTIRQ_LATENCY_SUM_WORD: usize = word(offset_of!(SoftirqCounts, latency_sum_ns));
pub const RECLAIM_SLOTS_WORD: usize = word(offset_of!(ReclaimHists, slots));
pub const RECLAIM_SUM_WORD: usize = word(offset_of!(ReclaimHists, sum_ns));
pub const BIOLAT_SUM_WORD: usize = word(offset_of!(BiolatHist, sum_ns));
pub const CACHESTAT_ACCESSES_WORD: usize = word(offset_of!(CachestatCounts, accesses));
pub const CACHESTAT_MISSES_WORD: usize = word(offset_of!(CachestatCounts, misses));
pub const CACHESTAT_DIRTIED_WORD: usize = word(offset_of!(CachestatCounts, dirtied));

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = include_str!("../../../ebpf-probes/usescope.h");

    /// Evaluates a `#define` from the header: a number, another define, or
    /// `(A + B * C)` built from those.
    fn define(name: &str) -> usize {
        let line = HEADER
            .lines()
            .find_map(|l| {
                l.strip_prefix("#define ")?
                    .strip_prefix(name)?
                    .strip_prefix(' ')
            })
            .unwrap_or_else(|| panic!("no #define {name} in usescope.h"));
        eval(line.trim().trim_start_matches('(').trim_end_matches(')'))
    }

    /// The fields of `struct NAME` in the header whose type is `ty`, in
    /// declaration order (every field of these structs has one type).
    fn fields_of(name: &str, ty: &str) -> Vec<&'static str> {
        HEADER
            .split(&format!("struct {name} {{"))
            .nth(1)
            .unwrap_or_else(|| panic!("no struct {name} in usescope.h"))
            .split("};")
            .next()
            .unwrap()
            .lines()
            .filter_map(|l| l.trim().strip_prefix(ty)?.strip_prefix(' '))
            .collect()
    }

    fn eval(expr: &str) -> usize {
        if let Some((a, b)) = expr.split_once(" + ") {
            return eval(a) + eval(b);
        }
        if let Some((a, b)) = expr.split_once(" * ") {
            return eval(a) * eval(b);
        }
        expr.parse().unwrap_or_else(|_| define(expr))
    }

    #[test]
    fn constants_match_the_c_header() {
        assert_eq!(define("LOG2_HIST_BUCKETS"), LOG2_HIST_BUCKETS);
        assert_eq!(define("LOG2_HIST_OVERFLOW"), LOG2_HIST_OVERFLOW);
        for (i, name) in BIOLAT_OP_NAMES.iter().enumerate() {
            assert_eq!(
                define(&format!("BIOLAT_OP_{}", name.to_ascii_uppercase())),
                i
            );
        }
        assert_eq!(define("BIOLAT_OPS"), BIOLAT_OP_NAMES.len());
        assert_eq!(define("SOFTIRQ_VECS"), SOFTIRQ_VECS);
        assert_eq!(define("RECLAIM_KINDS"), RECLAIM_KINDS);
        for (i, kind) in ["GLOBAL", "MEMCG", "COMPACTION"].iter().enumerate() {
            assert_eq!(define(&format!("RECLAIM_KIND_{kind}")), i);
        }
        assert_eq!(define("DROPS_CORE_SLOTS"), DROPS_CORE_SLOTS);
        assert_eq!(define("DROPS_SUBSYS_SHIFT"), DROPS_SUBSYS_SHIFT as usize);
        assert_eq!(define("DROPS_SUBSYS_MAX"), DROPS_SUBSYS_MAX);
        assert_eq!(define("DROPS_SUBSYS_CODES"), DROPS_SUBSYS_CODES);
        assert_eq!(define("DROPS_OVERFLOW_SLOT"), DROPS_OVERFLOW_SLOT);
        assert_eq!(define("DROPS_SLOTS"), DROPS_SLOTS);
        assert_eq!(define("DROPS_PROTOS"), DROPS_PROTOS);
        assert_eq!(define("DROPS_KEYS"), DROPS_KEYS);
        assert_eq!(define("DROPS_USED_WORDS"), DROPS_USED_WORDS);
        for (i, name) in ["OTHER", "IPV4", "IPV6", "ARP"].iter().enumerate() {
            assert_eq!(define(&format!("DROPS_PROTO_{name}")), i);
            assert_eq!(DROPS_PROTO_NAMES[i], name.to_ascii_lowercase());
        }
    }

    #[test]
    fn struct_sizes_match_the_c_header() {
        // Every C struct is a sequence of __u64 in declaration order.
        assert_eq!(size_of::<RunqlatHist>(), (LOG2_HIST_BUCKETS + 1 + 2) * 8);
        assert_eq!(size_of::<BiolatHist>(), (LOG2_HIST_BUCKETS + 1 + 1) * 8);
        assert_eq!(size_of::<BiolatKey>(), 8);
        assert_eq!(
            size_of::<SoftirqCounts>(),
            SOFTIRQ_VECS * (LOG2_HIST_BUCKETS + 1 + 5) * 8
        );
        assert_eq!(
            (
                SOFTIRQ_ENTRIES_WORD,
                SOFTIRQ_TIME_WORD,
                SOFTIRQ_LATENCY_SLOTS_WORD,
                SOFTIRQ_LATENCY_SUM_WORD
            ),
            (
                0,
                SOFTIRQ_VECS,
                2 * SOFTIRQ_VECS,
                (LOG2_HIST_BUCKETS + 3) * SOFTIRQ_VECS
            )
        );
        assert_eq!(
            fields_of("softirq_counts", "__u64"),
            [
                "entries[SOFTIRQ_VECS];",
                "time_ns[SOFTIRQ_VECS];",
                "latency_slots[SOFTIRQ_VECS][LOG2_HIST_BUCKETS + 1];",
                "latency_sum_ns[SOFTIRQ_VECS];",
                "entered_at[SOFTIRQ_VECS];",
                "raised_at[SOFTIRQ_VECS];"
            ]
        );
        assert_eq!(BIOLAT_SUM_WORD, LOG2_HIST_BUCKETS + 1);
        assert_eq!(
            size_of::<ReclaimHists>(),
            RECLAIM_KINDS * (LOG2_HIST_BUCKETS + 2) * 8
        );
        assert_eq!(
            (RECLAIM_SLOTS_WORD, RECLAIM_SUM_WORD),
            (0, RECLAIM_KINDS * (LOG2_HIST_BUCKETS + 1))
        );
        assert_eq!(
            fields_of("reclaim_hists", "__u64"),
            [
                "slots[RECLAIM_KINDS][LOG2_HIST_BUCKETS + 1];",
                "sum_ns[RECLAIM_KINDS];"
            ]
        );
        assert_eq!(size_of::<CachestatCounts>(), 3 * 8);
        assert_eq!(RUNQLAT_SUM_WORD, LOG2_HIST_BUCKETS + 1);
        assert_eq!(RUNQLAT_MISSED_WORD, LOG2_HIST_BUCKETS + 2);
        assert_eq!(
            (
                CACHESTAT_ACCESSES_WORD,
                CACHESTAT_MISSES_WORD,
                CACHESTAT_DIRTIED_WORD
            ),
            (0, 1, 2)
        );
        // The field order in the header is the order mirrored here.
        assert_eq!(
            fields_of("runqlat_hist", "__u64"),
            ["slots[LOG2_HIST_BUCKETS + 1];", "sum_ns;", "missed;"]
        );
        assert_eq!(
            fields_of("biolat_hist", "__u64"),
            ["slots[LOG2_HIST_BUCKETS + 1];", "sum_ns;"]
        );
        assert_eq!(fields_of("biolat_key", "__u32"), ["dev;", "op;"]);
        assert_eq!(
            fields_of("cachestat_counts", "__u64"),
            ["accesses;", "misses;", "dirtied;"]
        );
    }
}
