//! The log2 latency histogram shared by the histogram probes (runqlat,
//! biolatency): buckets from 1 µs to 2^24 µs (16.8 s), `le = 1e-6 * 2^k`.
//! A value goes into the first bucket with `le >= v` (ceil, unlike bcc's
//! floor), so every `le` is a true upper bound. `_sum` is exact: the kernel
//! adds nanoseconds into a per-CPU u64. The kernel side is
//! ebpf-probes/log2_hist.h.

use super::layout::{LOG2_HIST_BUCKETS, LOG2_HIST_OVERFLOW};
use crate::exposition::{Desc, Encoder};

/// Per-bucket counts: the finite buckets, then the overflow slot.
pub type Slots = [u64; LOG2_HIST_BUCKETS + 1];

/// The bucket of a latency in nanoseconds: the smallest k with
/// 1 µs · 2^k >= ns, or [`LOG2_HIST_OVERFLOW`] past 2^24 µs. Mirrors
/// `bucket_of` in ebpf-probes/log2_hist.h.
pub fn bucket_of(ns: u64) -> usize {
    let us = ns.div_ceil(1000);
    if us <= 1 {
        return 0;
    }
    let k = (64 - (us - 1).leading_zeros()) as usize;
    if k < LOG2_HIST_BUCKETS {
        k
    } else {
        LOG2_HIST_OVERFLOW
    }
}

/// Upper bound of bucket k in seconds.
pub fn le_of(k: usize) -> f64 {
    (1u64 << k) as f64 / 1e6
}

/// Adds one CPU's slots (the first words of its value) into `slots`.
pub fn add_cpu(slots: &mut Slots, cpu: &[u64]) {
    for (s, v) in slots.iter_mut().zip(cpu) {
        *s = s.wrapping_add(*v);
    }
}

/// Encodes per-bucket counts and a nanosecond sum as one histogram series.
/// `buckets` is scratch space kept by the caller, so nothing is allocated
/// per scrape.
pub fn write(
    enc: &mut Encoder,
    desc: &Desc,
    buckets: &mut Vec<(f64, u64)>,
    slots: &Slots,
    labels: &[(&str, &str)],
    sum_ns: u64,
) {
    buckets.clear();
    let mut cumulative = 0u64;
    for (k, n) in slots[..LOG2_HIST_BUCKETS].iter().enumerate() {
        cumulative = cumulative.wrapping_add(*n);
        buckets.push((le_of(k), cumulative));
    }
    let count = cumulative.wrapping_add(slots[LOG2_HIST_OVERFLOW]);
    enc.histogram(desc, labels, buckets, sum_ns as f64 / 1e9, count);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_true_upper_bounds() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1), 0);
        assert_eq!(bucket_of(1000), 0, "exactly 1 µs is in le=1e-6");
        assert_eq!(bucket_of(1001), 1);
        assert_eq!(bucket_of(2000), 1);
        assert_eq!(bucket_of(2001), 2);
        assert_eq!(bucket_of(3_000), 2);
        assert_eq!(bucket_of(4_000), 2);
        assert_eq!(bucket_of(4_001), 3);
        // 2^24 µs = 16.777216 s is the last finite bucket.
        let top = (1u64 << 24) * 1000;
        assert_eq!(bucket_of(top), 24);
        assert_eq!(bucket_of(top + 1), LOG2_HIST_OVERFLOW);
        assert_eq!(bucket_of(u64::MAX), LOG2_HIST_OVERFLOW);
        // Every value is <= its bucket's le and > the previous le.
        for ns in [
            1u64,
            999,
            1000,
            1001,
            123_456,
            7_999_999,
            10_000_000_000,
            top,
        ] {
            let k = bucket_of(ns);
            let v = ns as f64 / 1e9;
            assert!(v <= le_of(k) + 1e-15, "{ns} ns > le {}", le_of(k));
            if k > 0 {
                assert!(v > le_of(k - 1), "{ns} ns <= previous le {}", le_of(k - 1));
            }
        }
    }

    #[test]
    fn le_values() {
        assert_eq!(le_of(0), 1e-6);
        assert_eq!(le_of(1), 2e-6);
        assert_eq!(le_of(10), 0.001024);
        assert_eq!(le_of(24), 16.777216);
    }
}
