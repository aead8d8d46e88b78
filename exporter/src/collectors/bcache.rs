//! /sys/fs/bcache → `node_bcache_*`: node_exporter's bcache collector
//! (collector/bcache_linux.go, procfs bcache/get.go).
//!
//! Each cache set is a directory named by its UUID (`fs/bcache/*-*` under
//! `--path.sysfs`; kernel Documentation/admin-guide/bcache.rst) with
//! btree and journal figures (and `internal/`), one `bdevN` per backing
//! device (dirty data, `writeback_rate_debug`, `stats_total/`) and one
//! `cacheN` per cache device (I/O errors, bytes written, and with
//! `--collector.bcache.priorityStats` the `priority_stats` table, which
//! the kernel computes by walking every bucket: expensive, so off).
//!
//! Values are bcache's "human" numbers (`bch_hprint`: `1.2G`, where the
//! digit after the point is tenths of 1024) or plain integers, read as
//! procfs' `dehumanize` reads them. A value file that is absent counts 0,
//! as in procfs; one that does not parse fails the collector naming the
//! file. A cache set stopped while it is read (ENODEV, or its directory
//! gone) is left out. Without bcache a scrape looks the directory up only
//! after a uevent or a mount (absence.rs).

use std::path::Path;

use crate::collectors::sysfs::{
    DeviceError, Families, read_parsed, read_parsed_if_present, settle,
};
use crate::collectors::{Flag, FlagKind, Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError, excerpt};
use crate::kernel::parse::{lines, parse_fresh};
use crate::kernel::source::Dir;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Encoder, MetricType};

pub const PRIORITY_STATS: &str = "collector.bcache.priorityStats";

pub const SPEC: Spec = Spec {
    name: "bcache",
    default_enabled: true,
    help: "bcache cache sets, backing and cache devices from /sys/fs/bcache",
    flags: &[Flag {
        name: PRIORITY_STATS,
        help: "Expose expensive priority stats.",
        default: Some("false"),
        kind: FlagKind::Bool,
        conflicts_with: None,
    }],
    build,
    sources: &[
        Source::sys(
            "fs/bcache/deaddd54-c735-46d5-868e-f331c5fd7c74/btree_cache_size",
            "bcache_value",
        ),
        Source::sys(
            "fs/bcache/deaddd54-c735-46d5-868e-f331c5fd7c74/bdev0/stats_total/cache_hits",
            "bcache_value",
        ),
        Source::sys(
            "fs/bcache/deaddd54-c735-46d5-868e-f331c5fd7c74/bdev0/writeback_rate_debug",
            "bcache_writeback_rate_debug",
        ),
        Source::sys(
            "fs/bcache/deaddd54-c735-46d5-868e-f331c5fd7c74/cache0/priority_stats",
            "bcache_priority_stats",
        )
        .read_with(PRIORITY_STATS),
    ],
    parsers: &[
        Parser::numeric("bcache_value", |t| {
            parse_fresh(t, parse_value_into).map(drop)
        }),
        Parser::numeric("bcache_writeback_rate_debug", |t| {
            parse_fresh(t, parse_writeback_rate_debug_into).map(drop)
        }),
        Parser::numeric("bcache_priority_stats", |t| {
            parse_fresh(t, parse_priority_stats_into).map(drop)
        }),
    ],
};

/// procfs' `dehumanize`: a plain number, or `bch_hprint`'s `I.Fu` with a
/// unit `k`, `M`, `G`, `T`, `P`, `E`, `Z` or `Y` (powers of 1024) whose
/// fraction digit is read as procfs reads it (`F / 10.24`).
fn dehumanize(tok: &str, line: usize) -> Result<u64, ParseError> {
    let bad = |why: &str| ParseError::new(line, format!("invalid value {}: {why}", excerpt(tok)));
    let Some(&last) = tok.as_bytes().last() else {
        return Err(bad("empty"));
    };
    let float = |s: &str| -> Result<f64, ParseError> {
        let v: f64 = s.parse().map_err(|_| bad("not a number"))?;
        if v.is_finite() && v >= 0.0 {
            Ok(v)
        } else {
            Err(bad("not a non-negative number"))
        }
    };
    if last <= b'9' {
        let v = float(tok)?;
        if v >= u64::MAX as f64 {
            return Err(bad("out of range"));
        }
        return Ok(v as u64);
    }
    let power = match last {
        b'k' => 1,
        b'M' => 2,
        b'G' => 3,
        b'T' => 4,
        b'P' => 5,
        b'E' => 6,
        b'Z' => 7,
        b'Y' => 8,
        _ => return Err(bad("unknown unit")),
    };
    let number = &tok[..tok.len() - 1];
    let mantissa = match number.split_once('.') {
        None => float(number)?,
        Some((int, frac)) if !frac.contains('.') => float(int)? + float(frac)? / 10.24,
        Some(_) => return Err(bad("two decimal points")),
    };
    let bytes = mantissa * 1024f64.powi(power);
    if bytes >= u64::MAX as f64 {
        return Err(bad("out of range"));
    }
    Ok(bytes as u64)
}

/// [`dehumanize`] with an optional leading `-` (procfs' `dehumanizeSigned`).
fn dehumanize_signed(tok: &str, line: usize) -> Result<i64, ParseError> {
    match tok.strip_prefix('-') {
        Some(rest) => Ok((dehumanize(rest, line)? as i64).wrapping_neg()),
        None => Ok(dehumanize(tok, line)? as i64),
    }
}

/// One value file: its text without the final newline, [`dehumanize`]d.
pub fn parse_value_into(text: &str, out: &mut u64) -> Result<(), ParseError> {
    let value = text.strip_suffix('\n').unwrap_or(text);
    *out = dehumanize(value, 1)?;
    Ok(())
}

/// What `node_bcache_*` uses of a backing device's `writeback_rate_debug`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct WritebackRateDebug {
    pub rate: u64,
    pub target: u64,
    pub proportional: i64,
    pub integral: i64,
    pub change: i64,
}

/// `writeback_rate_debug`: `key:\tvalue` lines (`rate:\t\t1.1M/sec`,
/// `proportional:\t-23.5k`, `next io:\t-4ms`). Lines procfs does not know
/// are ignored; a known one whose value does not parse is an error.
pub fn parse_writeback_rate_debug_into(
    text: &str,
    out: &mut WritebackRateDebug,
) -> Result<(), ParseError> {
    *out = WritebackRateDebug::default();
    // The exported keys must all be there (procfs reads a missing one as
    // 0; the kernel always writes them).
    for key in ["rate:", "target:", "proportional:", "integral:", "change:"] {
        if !lines(text).any(|l| l.starts_with(key)) {
            return Err(ParseError::new(1, format!("no '{key}' line")));
        }
    }
    for (i, line) in lines(text).enumerate() {
        let n = i + 1;
        let last = || {
            line.split_ascii_whitespace()
                .last()
                .ok_or_else(|| ParseError::new(n, "no value"))
        };
        if line.starts_with("rate:") {
            out.rate = dehumanize(last()?.trim_end_matches("/sec"), n)?;
        } else if line.starts_with("dirty:") {
            dehumanize(last()?, n)?;
        } else if line.starts_with("target:") {
            out.target = dehumanize(last()?, n)?;
        } else if line.starts_with("proportional:") {
            out.proportional = dehumanize_signed(last()?, n)?;
        } else if line.starts_with("integral:") {
            out.integral = dehumanize_signed(last()?, n)?;
        } else if line.starts_with("change:") {
            out.change = dehumanize_signed(last()?.trim_end_matches("/sec"), n)?;
        } else if line.starts_with("next io:") {
            let v = last()?.trim_end_matches("ms");
            v.parse::<i64>().map_err(|_| {
                ParseError::new(n, format!("next io: invalid integer {}", excerpt(v)))
            })?;
        }
    }
    Ok(())
}

/// What `node_bcache_priority_stats_*` uses of `priority_stats`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PriorityStats {
    pub unused_percent: u64,
    pub metadata_percent: u64,
}

/// `priority_stats`: `Unused:\t\t99%`, `Metadata:\t0%` and other lines
/// (Clean, Dirty, Average, Sectors per Q, Quantiles) that are not used.
pub fn parse_priority_stats_into(text: &str, out: &mut PriorityStats) -> Result<(), ParseError> {
    *out = PriorityStats::default();
    for (i, line) in lines(text).enumerate() {
        let n = i + 1;
        let field = if line.starts_with("Unused:") {
            &mut out.unused_percent
        } else if line.starts_with("Metadata:") {
            &mut out.metadata_percent
        } else if let Some(rest) = line
            .strip_prefix("Average:")
            .or_else(|| line.strip_prefix("Sectors per Q:"))
        {
            // Not exported, but numbers the kernel writes: checked, so a
            // corrupted file is noticed (procfs ignores these lines).
            crate::kernel::parse::u64_field(rest.trim(), n, "priority_stats value")?;
            continue;
        } else {
            continue;
        };
        let v = line
            .split_ascii_whitespace()
            .last()
            .ok_or_else(|| ParseError::new(n, "no value"))?
            .trim_end_matches('%');
        *field = v
            .parse()
            .map_err(|_| ParseError::new(n, format!("invalid percentage {}", excerpt(v))))?;
    }
    if !lines(text).any(|l| l.starts_with("Unused:"))
        || !lines(text).any(|l| l.starts_with("Metadata:"))
    {
        return Err(ParseError::new(1, "no 'Unused:' or 'Metadata:' line"));
    }
    Ok(())
}

/// A value file; absent counts 0, as in procfs.
fn value(path: &Path) -> Result<u64, DeviceError> {
    Ok(read_parsed_if_present(path, parse_value_into)?.unwrap_or(0))
}

/// The entries of `dir` whose name is `prefix` followed by a digit (Go's
/// `prefix[0-9]*` glob), sorted.
fn numbered(dir: &Path, prefix: &str) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .map(|it| {
            it.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    n.strip_prefix(prefix)
                        .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// The cache-set figures: (file, family, HELP, type).
const SET_VALUES: &[(&str, &str, &str, MetricType)] = &[
    (
        "average_key_size",
        "average_key_size_sectors",
        "Average data per key in the btree (sectors).",
        MetricType::Gauge,
    ),
    (
        "btree_cache_size",
        "btree_cache_size_bytes",
        "Amount of memory currently used by the btree cache.",
        MetricType::Gauge,
    ),
    (
        "cache_available_percent",
        "cache_available_percent",
        "Percentage of cache device without dirty data, usable for writeback (may contain clean cached data).",
        MetricType::Gauge,
    ),
    ("congested", "congested", "Congestion.", MetricType::Gauge),
    (
        "root_usage_percent",
        "root_usage_percent",
        "Percentage of the root btree node in use (tree depth increases if too high).",
        MetricType::Gauge,
    ),
    (
        "tree_depth",
        "tree_depth",
        "Depth of the btree.",
        MetricType::Gauge,
    ),
    (
        "internal/active_journal_entries",
        "active_journal_entries",
        "Number of journal entries that are newer than the index.",
        MetricType::Gauge,
    ),
    (
        "internal/btree_nodes",
        "btree_nodes",
        "Total nodes in the btree.",
        MetricType::Gauge,
    ),
    (
        "internal/cache_read_races",
        "cache_read_races_total",
        "Counts instances where while data was being read from the cache, the bucket was reused and invalidated - i.e. where the pointer was stale after the read completed.",
        MetricType::Counter,
    ),
];
const BTREE_READ: (&str, &str, &str) = (
    "internal/btree_read_average_duration_us",
    "btree_read_average_duration_seconds",
    "Average btree read duration.",
);

/// A backing device's `stats_total/`: (file, family, HELP).
const PERIOD_STATS: &[(&str, &str, &str)] = &[
    (
        "bypassed",
        "bypassed_bytes_total",
        "Amount of IO (both reads and writes) that has bypassed the cache.",
    ),
    (
        "cache_hits",
        "cache_hits_total",
        "Hits counted per individual IO as bcache sees them.",
    ),
    (
        "cache_misses",
        "cache_misses_total",
        "Misses counted per individual IO as bcache sees them.",
    ),
    (
        "cache_bypass_hits",
        "cache_bypass_hits_total",
        "Hits for IO intended to skip the cache.",
    ),
    (
        "cache_bypass_misses",
        "cache_bypass_misses_total",
        "Misses for IO intended to skip the cache.",
    ),
    (
        "cache_miss_collisions",
        "cache_miss_collisions_total",
        "Instances where data insertion from cache miss raced with write (data already present).",
    ),
];
const READAHEADS: (&str, &str, &str) = (
    "cache_readaheads",
    "cache_readaheads_total",
    "Count of times readahead occurred.",
);

pub struct BcacheCollector {
    root: Dir,
    priority_stats: bool,
    families: Families,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(BcacheCollector {
        root: Dir::new(&s.sysfs, "fs/bcache"),
        priority_stats: s.switch(PRIORITY_STATS),
        families: Families::default(),
    })
}

impl BcacheCollector {
    fn push(
        &mut self,
        family: &str,
        help: &str,
        kind: MetricType,
        labels: &[(&'static str, &str)],
        v: f64,
    ) {
        self.families
            .push(format!("node_bcache_{family}"), help, kind, labels, v);
    }

    fn read_set(&mut self, uuid: &str) -> Result<(), CollectError> {
        let dir = self.root.path().join(uuid);
        let mark = self.families.len();
        let read = self.read_set_in(&dir, uuid);
        settle(&mut self.families, mark, &dir, read)
    }

    fn read_set_in(&mut self, dir: &Path, uuid: &str) -> Result<(), DeviceError> {
        let set = [("uuid", uuid)];
        for (file, family, help, kind) in SET_VALUES {
            let v = value(&dir.join(file))?;
            self.push(family, help, *kind, &set, v as f64);
        }
        // procfs stores the microseconds in a field named nanoseconds, and
        // node_exporter scales that by 1e-9: kept, for equal values.
        let v = value(&dir.join(BTREE_READ.0))?;
        self.push(
            BTREE_READ.1,
            BTREE_READ.2,
            MetricType::Gauge,
            &set,
            v as f64 * 1e-9,
        );

        for bdev in numbered(dir, "bdev") {
            let bdir = dir.join(&bdev);
            let labels = [("uuid", uuid), ("backing_device", bdev.as_str())];
            let dirty = value(&bdir.join("dirty_data"))?;
            let wrd = read_parsed(
                &bdir.join("writeback_rate_debug"),
                parse_writeback_rate_debug_into,
            )?;
            let gauges: [(&str, &str, f64); 6] = [
                (
                    "dirty_data_bytes",
                    "Amount of dirty data for this backing device in the cache.",
                    dirty as f64,
                ),
                (
                    "dirty_target_bytes",
                    "Current dirty data target threshold for this backing device in bytes.",
                    wrd.target as f64,
                ),
                (
                    "writeback_rate",
                    "Current writeback rate for this backing device in bytes.",
                    wrd.rate as f64,
                ),
                (
                    "writeback_rate_proportional_term",
                    "Current result of proportional controller, part of writeback rate",
                    wrd.proportional as f64,
                ),
                (
                    "writeback_rate_integral_term",
                    "Current result of integral controller, part of writeback rate",
                    wrd.integral as f64,
                ),
                (
                    "writeback_change",
                    "Last writeback rate change step for this backing device.",
                    wrd.change as f64,
                ),
            ];
            for (family, help, v) in gauges {
                self.push(family, help, MetricType::Gauge, &labels, v);
            }
            let stats = bdir.join("stats_total");
            for (file, family, help) in PERIOD_STATS {
                let v = value(&stats.join(file))?;
                self.push(family, help, MetricType::Counter, &labels, v as f64);
            }
            // Written only when not zero, as node_exporter writes it.
            let readaheads = value(&stats.join(READAHEADS.0))?;
            if readaheads != 0 {
                self.push(
                    READAHEADS.1,
                    READAHEADS.2,
                    MetricType::Counter,
                    &labels,
                    readaheads as f64,
                );
            }
        }

        for cache in numbered(dir, "cache") {
            let cdir = dir.join(&cache);
            let labels = [("uuid", uuid), ("cache_device", cache.as_str())];
            let v = value(&cdir.join("io_errors"))?;
            self.push(
                "io_errors",
                "Number of errors that have occurred, decayed by io_error_halflife.",
                MetricType::Gauge,
                &labels,
                v as f64,
            );
            let v = value(&cdir.join("metadata_written"))?;
            self.push(
                "metadata_written_bytes_total",
                "Sum of all non data writes (btree writes and all other metadata).",
                MetricType::Counter,
                &labels,
                v as f64,
            );
            let v = value(&cdir.join("written"))?;
            self.push(
                "written_bytes_total",
                "Sum of all data that has been written to the cache.",
                MetricType::Counter,
                &labels,
                v as f64,
            );
            if self.priority_stats {
                let p = read_parsed(&cdir.join("priority_stats"), parse_priority_stats_into)?;
                self.push(
                    "priority_stats_unused_percent",
                    "The percentage of the cache that doesn't contain any data.",
                    MetricType::Gauge,
                    &labels,
                    p.unused_percent as f64,
                );
                self.push(
                    "priority_stats_metadata_percent",
                    "Bcache's metadata overhead.",
                    MetricType::Gauge,
                    &labels,
                    p.metadata_percent as f64,
                );
            }
        }
        Ok(())
    }
}

impl Collector for BcacheCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.families.clear();
        let read = self.root.sorted_names().and_then(|names| {
            names
                .iter()
                // Go's `*-*` glob: cache-set UUIDs (not `register`).
                .filter(|n| n.contains('-'))
                .try_for_each(|n| self.read_set(n))
        });
        self.families.write_or_discard(enc, read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::FlagValue;
    use crate::collectors::test_support::{fixture, render};

    #[test]
    fn human_numbers_as_procfs_reads_them() {
        let d = |t| dehumanize(t, 1).unwrap();
        assert_eq!(d("0"), 0);
        assert_eq!(d("512"), 512);
        assert_eq!(d("1.5k"), 1524); // (1 + 5/10.24) × 1024, truncated
        assert_eq!(d("2k"), 2048);
        assert_eq!(d("1.1M"), 1_150_976);
        assert_eq!(d("3.9G"), 4_164_943_872);
        for bad in [
            "",
            "k",
            "1.2.3k",
            "1.5x",
            "abc",
            "-1",
            "1e999",
            "99999999999999999999999",
            "16.0E",
        ] {
            assert!(dehumanize(bad, 1).is_err(), "{bad:?}");
        }
        assert_eq!(dehumanize_signed("-23.5k", 1).unwrap(), -24_052);
        assert_eq!(parse_fresh("15\n", parse_value_into).unwrap(), 15);
    }

    #[test]
    fn writeback_rate_debug() {
        let text = "rate:\t\t1.1M/sec\ndirty:\t\t20.4G\ntarget:\t\t20.4G\nproportional:\t-23.5k\nintegral:\t0.0k\nchange:\t\t-1.2k/sec\nnext io:\t-5ms\n";
        assert_eq!(
            parse_fresh(text, parse_writeback_rate_debug_into).unwrap(),
            WritebackRateDebug {
                rate: 1_150_976,
                target: 21_894_266_880,
                proportional: -24_052,
                integral: 0,
                change: -1_224,
            }
        );
        let e = parse_fresh(
            &text.replace("1.1M/sec", "fast"),
            parse_writeback_rate_debug_into,
        )
        .unwrap_err();
        assert_eq!(e.line, 1);
        let e = parse_fresh(
            &text.replace("-5ms", "soonms"),
            parse_writeback_rate_debug_into,
        )
        .unwrap_err();
        assert_eq!(e.line, 7);
        assert!(parse_fresh("garbage\n", parse_writeback_rate_debug_into).is_err());
    }

    #[test]
    fn priority_stats() {
        let text = "Unused:\t\t99%\nClean:\t\t0%\nDirty:\t\t0%\nMetadata:\t1%\nAverage:\t0\nSectors per Q:\t24576\nQuantiles:\t[0 0 0]\n";
        assert_eq!(
            parse_fresh(text, parse_priority_stats_into).unwrap(),
            PriorityStats {
                unused_percent: 99,
                metadata_percent: 1
            }
        );
        assert!(parse_fresh("Unused:\tmost%\n", parse_priority_stats_into).is_err());
        assert!(parse_fresh("garbage\n", parse_priority_stats_into).is_err());
        assert!(
            parse_fresh(
                &text.replace("Average:\t0", "Average:\t99999999999999999999"),
                parse_priority_stats_into
            )
            .is_err()
        );
    }

    #[test]
    fn collector_on_fixture() {
        let mut s = Settings::with_roots("/nonexistent", fixture("sys"));
        let out = render(build(&s).as_mut()).unwrap();
        let u = "deaddd54-c735-46d5-868e-f331c5fd7c74";
        for l in [
            format!("node_bcache_btree_cache_size_bytes{{uuid=\"{u}\"}} 3145728\n"),
            format!("node_bcache_cache_hits_total{{backing_device=\"bdev0\",uuid=\"{u}\"}} 1432\n"),
            format!("node_bcache_dirty_data_bytes{{backing_device=\"bdev0\",uuid=\"{u}\"}} 1524\n"),
            format!(
                "node_bcache_writeback_rate_proportional_term{{backing_device=\"bdev0\",uuid=\"{u}\"}} -24052\n"
            ),
            format!(
                "node_bcache_written_bytes_total{{cache_device=\"cache0\",uuid=\"{u}\"}} 4164943872\n"
            ),
            format!(
                "node_bcache_btree_read_average_duration_seconds{{uuid=\"{u}\"}} 0.0000014560000000000001\n"
            ),
        ] {
            assert!(out.contains(&l), "missing {l:?} in\n{out}");
        }
        // bdev1 has no readaheads: no series.
        assert!(!out.contains("node_bcache_cache_readaheads_total{backing_device=\"bdev1\""));
        assert!(!out.contains("priority_stats"));
        s.set(PRIORITY_STATS, Some(FlagValue::Bool(true)));
        let out = render(build(&s).as_mut()).unwrap();
        assert!(out.contains(&format!(
            "node_bcache_priority_stats_unused_percent{{cache_device=\"cache0\",uuid=\"{u}\"}} 71\n"
        )), "{out}");
    }

    #[test]
    fn no_bcache_writes_nothing() {
        let s = Settings::with_roots("/nonexistent", "/nonexistent-usescope");
        assert_eq!(render(build(&s).as_mut()).unwrap(), "");
    }

    #[test]
    fn a_bad_value_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let set = dir.path().join("fs/bcache/1-2");
        std::fs::create_dir_all(&set).unwrap();
        std::fs::write(set.join("tree_depth"), "deep\n").unwrap();
        let s = Settings::with_roots("/nonexistent", dir.path());
        let e = render(build(&s).as_mut()).unwrap_err();
        assert!(e.file.ends_with("1-2/tree_depth"), "{e}");
        assert_eq!(e.line, Some(1));
    }
}
