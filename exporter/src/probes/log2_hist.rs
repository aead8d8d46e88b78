//! The log2 latency histogram shared by the histogram probes (runqlat,
//! biolatency, softirq, reclaim): buckets from 1 µs to 2^24 µs (16.8 s),
//! `le = 1e-6 * 2^k`. A value goes into the first bucket with `le >= v`
//! (ceil, unlike bcc's floor), so every `le` is a true upper bound. `_sum`
//! is exact: the kernel adds nanoseconds into a per-CPU u64. The kernel
//! side is ebpf-probes/log2_hist.h.
//!
//! `--probe.histogram.bucket-factor` trades buckets for series at encode
//! time ([`Resolution`]): the kernel keeps all 25 buckets, and a coarser
//! histogram writes a subset of their bounds, each with the exact
//! cumulative count of everything at or below it. `_sum`, `_count` and
//! `+Inf` do not change.

use super::layout::{LOG2_HIST_BUCKETS, LOG2_HIST_OVERFLOW};
use crate::scrape::exposition::{Desc, Encoder};

/// Per-bucket counts: the finite buckets, then the overflow slot.
pub type Slots = [u64; LOG2_HIST_BUCKETS + 1];

/// `--probe.histogram.bucket-factor`: the ratio between neighbouring
/// bucket bounds of every probe histogram.
pub const FACTOR_FLAG: &str = "probe.histogram.bucket-factor";
/// Its values: 2 is every kernel bucket, 4 every second bound, 8 every
/// third, 16 every fourth.
pub const FACTORS: [&str; 4] = ["2", "4", "8", "16"];
/// 4: the run-queue histogram in 15 series instead of 28, which with the
/// default probes is the difference that matters on a small host's series
/// budget (docs/fleet.md, "Series budget per host"); the bounds around
/// CPUSaturated's 10 ms threshold stay (see [`ANCHOR`]).
pub const DEFAULT_FACTOR: &str = "4";

/// The bound every resolution keeps: k = 13, 8.192 ms, the bound just
/// below the 10 ms threshold of the CPUSaturated run-queue alert
/// (alerts/usescope-alerts.yml). Keeping it means the alert's bucket starts
/// where it does at full resolution, so no p99 at or below 8.192 ms can
/// fire it at any resolution.
const ANCHOR: usize = 13;

/// Which kernel bucket bounds a histogram writes: every `step`-th, counted
/// from [`ANCHOR`] both ways.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolution {
    step: usize,
}

impl Resolution {
    /// Every kernel bucket.
    pub const FULL: Resolution = Resolution { step: 1 };

    /// The resolution of a [`FACTORS`] value (None for anything else).
    pub fn from_factor(factor: &str) -> Option<Resolution> {
        let step = FACTORS.iter().position(|f| *f == factor)? + 1;
        Some(Resolution { step })
    }

    /// Whether kernel bucket `k` is written as a bound of its own.
    pub fn keeps(self, k: usize) -> bool {
        k.abs_diff(ANCHOR).is_multiple_of(self.step)
    }

    /// Series per histogram: the bounds kept, `+Inf`, `_sum` and `_count`.
    pub fn series(self) -> usize {
        (0..LOG2_HIST_BUCKETS).filter(|&k| self.keeps(k)).count() + 3
    }
}

impl Default for Resolution {
    fn default() -> Resolution {
        Resolution::from_factor(DEFAULT_FACTOR).expect("DEFAULT_FACTOR is one of FACTORS")
    }
}

/// A probe collector's histogram writer: the resolution and the (le,
/// cumulative count) scratch handed to the encoder, kept between scrapes so
/// nothing is allocated per scrape.
pub struct Buckets {
    resolution: Resolution,
    scratch: Vec<(f64, u64)>,
}

impl Buckets {
    pub fn new(resolution: Resolution) -> Buckets {
        Buckets {
            resolution,
            scratch: Vec::with_capacity(LOG2_HIST_BUCKETS),
        }
    }
}

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

/// Encodes per-bucket counts and a nanosecond sum as one histogram series,
/// at `buckets`' resolution: a kept bound's count is the cumulative count
/// of every kernel bucket up to it, so merging loses resolution, never
/// counts.
pub fn write(
    enc: &mut Encoder,
    desc: &Desc,
    buckets: &mut Buckets,
    slots: &Slots,
    labels: &[(&str, &str)],
    sum_ns: u64,
) {
    buckets.scratch.clear();
    let mut cumulative = 0u64;
    for (k, n) in slots[..LOG2_HIST_BUCKETS].iter().enumerate() {
        cumulative = cumulative.wrapping_add(*n);
        if buckets.resolution.keeps(k) {
            buckets.scratch.push((le_of(k), cumulative));
        }
    }
    let count = cumulative.wrapping_add(slots[LOG2_HIST_OVERFLOW]);
    enc.histogram(desc, labels, &buckets.scratch, sum_ns as f64 / 1e9, count);
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

    const TEST_HIST: Desc = Desc::histogram("test_latency_seconds", "Test.");

    /// The exposition of one histogram at `resolution`: (le, cumulative)
    /// per bucket line, `+Inf` as infinity, then `_sum` and `_count`.
    fn encode(resolution: Resolution, slots: &Slots, sum_ns: u64) -> (Vec<(f64, u64)>, String) {
        let mut buf = Vec::new();
        let mut enc = Encoder::new(&mut buf, crate::scrape::exposition::Format::PrometheusText);
        enc.family(&TEST_HIST);
        let mut b = Buckets::new(resolution);
        write(
            &mut enc,
            &TEST_HIST,
            &mut b,
            slots,
            &[("kind", "x")],
            sum_ns,
        );
        let text = String::from_utf8(buf).unwrap();
        let mut buckets = Vec::new();
        let mut rest = String::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            match line.strip_prefix("test_latency_seconds_bucket{kind=\"x\",le=\"") {
                Some(b) => {
                    let (le, n) = b.split_once("\"} ").unwrap();
                    let le = if le == "+Inf" {
                        f64::INFINITY
                    } else {
                        le.parse().unwrap()
                    };
                    buckets.push((le, n.parse().unwrap()));
                }
                None => rest.push_str(&format!("{line}\n")),
            }
        }
        (buckets, rest)
    }

    #[test]
    fn resolutions_keep_every_step_th_bound_from_8_ms() {
        let kept = |r: Resolution| -> Vec<usize> {
            (0..LOG2_HIST_BUCKETS).filter(|&k| r.keeps(k)).collect()
        };
        let r = |f| Resolution::from_factor(f).unwrap();
        assert_eq!(kept(Resolution::FULL), (0..25).collect::<Vec<_>>());
        assert_eq!(r("2"), Resolution::FULL);
        assert_eq!(kept(r("4")), (1..25).step_by(2).collect::<Vec<_>>());
        assert_eq!(kept(r("8")), [1, 4, 7, 10, 13, 16, 19, 22]);
        assert_eq!(kept(r("16")), [1, 5, 9, 13, 17, 21]);
        assert_eq!(le_of(ANCHOR), 0.008192);
        for f in FACTORS {
            assert!(r(f).keeps(ANCHOR), "factor {f} drops 8.192 ms");
        }
        // Series per histogram, what docs/fleet.md and docs/probes.md quote.
        let series: Vec<usize> = FACTORS.iter().map(|f| r(f).series()).collect();
        assert_eq!(series, [28, 15, 11, 9]);
        assert_eq!(Resolution::default(), r("4"));
        assert_eq!(Resolution::from_factor("3"), None);
        assert_eq!(Resolution::from_factor("32"), None);
    }

    #[test]
    fn merged_buckets_are_the_exact_cumulative_counts_of_the_fine_ones() {
        // A different count in every kernel bucket (so a bound off by one
        // bucket shows), and 7 past the last one.
        let mut slots: Slots = [0; LOG2_HIST_BUCKETS + 1];
        for (k, s) in slots[..LOG2_HIST_BUCKETS].iter_mut().enumerate() {
            *s = 1 << (k % 11) | k as u64;
        }
        slots[LOG2_HIST_OVERFLOW] = 7;
        let total: u64 = slots.iter().sum();
        let sum_ns = 123_456_789_012;
        let (fine, fine_rest) = encode(Resolution::FULL, &slots, sum_ns);
        assert_eq!(fine.len(), 26);
        for f in FACTORS {
            let r = Resolution::from_factor(f).unwrap();
            let (merged, rest) = encode(r, &slots, sum_ns);
            assert_eq!(merged.len() + 2, r.series(), "factor {f}");
            assert_eq!(
                merged.last(),
                Some(&(f64::INFINITY, total)),
                "+Inf counts everything, overflow too"
            );
            assert_eq!(rest, fine_rest, "factor {f}: _sum and _count unchanged");
            assert!(rest.contains("test_latency_seconds_count{kind=\"x\"} "));
            let mut previous = 0;
            for &(le, n) in &merged[..merged.len() - 1] {
                // Each merged bound is a kernel bound, with the count of
                // every kernel bucket up to it.
                let k = (0..LOG2_HIST_BUCKETS).find(|&k| le_of(k) == le).unwrap();
                assert!(r.keeps(k));
                assert_eq!(n, slots[..=k].iter().sum::<u64>(), "factor {f}, le {le}");
                assert_eq!(Some(&(le, n)), fine.iter().find(|b| b.0 == le));
                assert!(n >= previous, "cumulative");
                previous = n;
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
