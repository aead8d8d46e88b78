//! /sys/class/scsi_tape → `node_tape_*`: node_exporter's tapestats
//! collector (collector/tapestats_linux.go, procfs sysfs/class_scsitape.go).
//!
//! Each SCSI tape drive `stN` (the rewinding node; `nstN` and the mode
//! nodes `stNa`, `stNl`, `stNm` are the same drive and are skipped) has
//! `stats/` (kernel Documentation/scsi/st.rst, "Sysfs and Statistics"):
//! counts of reads, writes and other commands, bytes, residuals, I/Os in
//! flight, and the time spent in each in nanoseconds, exported in seconds.
//! A counter file that is absent counts 0, as in procfs; one that does not
//! parse fails the collector naming the file (node_exporter panics on it).
//! A drive that went away while it was read (ENODEV, or its directory
//! gone) is left out.
//!
//! `--collector.tapestats.ignored-devices` (default `^$`) leaves drives
//! out by name. Without tape drives a scrape looks the class up
//! only after a uevent or a mount (absence.rs).

use std::io;
use std::path::Path;

use regex::Regex;

use crate::collectors::sysfs::{DeviceError, Families, io_error, read_trimmed, settle};
use crate::collectors::{Flag, FlagKind, Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError};
use crate::kernel::parse::{go_u64_field, parse_fresh, single_field};
use crate::kernel::source::{Dir, Vanished};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Encoder, MetricType};

pub const IGNORED: &str = "collector.tapestats.ignored-devices";

pub const SPEC: Spec = Spec {
    name: "tapestats",
    default_enabled: true,
    help: "SCSI tape drive I/O counts, bytes and times from /sys/class/scsi_tape",
    flags: &[Flag {
        name: IGNORED,
        help: "Regexp of devices to ignore for tapestats.",
        default: Some("^$"),
        kind: FlagKind::Regex,
        conflicts_with: None,
    }],
    build,
    sources: &[
        Source::sys(
            "class/scsi_tape/st0/stats/read_byte_cnt",
            "tapestats_counter",
        ),
        Source::sys("class/scsi_tape/st0/stats/io_ns", "tapestats_counter"),
    ],
    parsers: &[Parser::numeric("tapestats_counter", |t| {
        parse_fresh(t, parse_into).map(drop)
    })],
};

/// How a stats file is exported.
enum Kind {
    Gauge,
    Counter,
    /// Nanoseconds, exported as seconds.
    Nanoseconds,
}

/// (file in stats/, family, HELP, kind), in node_exporter's order.
const STATS: &[(&str, &str, &str, Kind)] = &[
    (
        "in_flight",
        "node_tape_io_now",
        "The number of I/Os currently outstanding to this device.",
        Kind::Gauge,
    ),
    (
        "io_ns",
        "node_tape_io_time_seconds_total",
        "The amount of time spent waiting for all I/O to complete (including read and write). This includes tape movement commands such as seeking between file or set marks and implicit tape movement such as when rewind on close tape devices are used.",
        Kind::Nanoseconds,
    ),
    (
        "other_cnt",
        "node_tape_io_others_total",
        "The number of I/Os issued to the tape drive other than read or write commands. The time taken to complete these commands uses the following calculation io_time_seconds_total-read_time_seconds_total-write_time_seconds_total",
        Kind::Counter,
    ),
    (
        "read_byte_cnt",
        "node_tape_read_bytes_total",
        "The number of bytes read from the tape drive.",
        Kind::Counter,
    ),
    (
        "read_cnt",
        "node_tape_reads_completed_total",
        "The number of read requests issued to the tape drive.",
        Kind::Counter,
    ),
    (
        "read_ns",
        "node_tape_read_time_seconds_total",
        "The amount of time spent waiting for read requests to complete.",
        Kind::Nanoseconds,
    ),
    (
        "resid_cnt",
        "node_tape_residual_total",
        "The number of times during a read or write we found the residual amount to be non-zero. This should mean that a program is issuing a read larger thean the block size on tape. For write not all data made it to tape.",
        Kind::Counter,
    ),
    (
        "write_byte_cnt",
        "node_tape_written_bytes_total",
        "The number of bytes written to the tape drive.",
        Kind::Counter,
    ),
    (
        "write_cnt",
        "node_tape_writes_completed_total",
        "The number of write requests issued to the tape drive.",
        Kind::Counter,
    ),
    (
        "write_ns",
        "node_tape_write_time_seconds_total",
        "The amount of time spent waiting for write requests to complete.",
        Kind::Nanoseconds,
    ),
];

/// One counter (procfs' `PUInt64`: Go's base-0 unsigned integer).
pub fn parse_into(text: &str, out: &mut u64) -> Result<(), ParseError> {
    let tok = single_field(text).ok_or_else(|| ParseError::new(1, "expected one number"))?;
    *out = go_u64_field(tok, 1, "counter")?;
    Ok(())
}

/// `st` followed by digits only: the drive's rewinding node.
fn is_drive(name: &str) -> bool {
    name.strip_prefix("st")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

pub struct TapestatsCollector {
    class: Dir,
    ignored: Option<Regex>,
    families: Families,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(TapestatsCollector {
        class: Dir::new(&s.sysfs, "class/scsi_tape").of_devices(),
        ignored: s.regex(IGNORED).cloned(),
        families: Families::default(),
    })
}

impl TapestatsCollector {
    fn read_drive(&mut self, name: &str) -> Result<(), CollectError> {
        let dir = self.class.path().join(name);
        let mark = self.families.len();
        let read = self.read_drive_in(&dir, name);
        settle(&mut self.families, mark, &dir, read)
    }

    fn read_drive_in(&mut self, dir: &Path, name: &str) -> Result<(), DeviceError> {
        let stats = dir.join("stats");
        if !stats.is_dir() {
            // Gone with the drive, or never there (an error).
            let e = CollectError::other(&stats, "no stats directory");
            return Err(DeviceError::Vanishing(e, Vanished::NotFound));
        }
        for (file, family, help, kind) in STATS {
            let path = stats.join(file);
            let v = match read_trimmed(&path) {
                Ok(text) => {
                    let mut v = 0;
                    parse_into(&text, &mut v).map_err(|e| CollectError::from_parse(&path, e))?;
                    v
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
                Err(e) => return Err(io_error(&path, e)),
            };
            let (kind, value) = match kind {
                Kind::Gauge => (MetricType::Gauge, v as f64),
                Kind::Counter => (MetricType::Counter, v as f64),
                // node_exporter multiplies by 1e-9 (not a division by
                // 1e9, which can differ in the last bit).
                Kind::Nanoseconds => (MetricType::Counter, v as f64 * 0.000000001),
            };
            self.families
                .push(*family, *help, kind, &[("device", name)], value);
        }
        Ok(())
    }
}

impl Collector for TapestatsCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.families.clear();
        let read = self.class.sorted_names().and_then(|names| {
            names.iter().filter(|n| is_drive(n)).try_for_each(|n| {
                if self.ignored.as_ref().is_some_and(|r| r.is_match(n)) {
                    return Ok(());
                }
                self.read_drive(n)
            })
        });
        self.families.write_or_discard(enc, read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::FlagValue;
    use crate::collectors::sysfs::gone_device;
    use crate::collectors::test_support::{fixture, render};

    #[test]
    fn drives_and_counters() {
        assert!(is_drive("st0") && is_drive("st12"));
        for not in ["nst0", "st0a", "st0l", "st", "sta"] {
            assert!(!is_drive(not), "{not}");
        }
        assert_eq!(parse_fresh("5\n", parse_into).unwrap(), 5);
        assert!(parse_fresh("-5\n", parse_into).is_err());
        assert!(parse_fresh("five\n", parse_into).is_err());
    }

    #[test]
    fn collector_on_fixture() {
        let s = Settings::with_roots("/nonexistent", fixture("sys"));
        let out = render(build(&s).as_mut()).unwrap();
        for l in [
            "node_tape_io_now{device=\"st0\"} 1\n",
            "node_tape_io_time_seconds_total{device=\"st0\"} 9247.01108772\n",
            "node_tape_read_bytes_total{device=\"st0\"} 979\n",
            "node_tape_written_bytes_total{device=\"st0\"} 1496246784000\n",
            // st1 has no resid_cnt: 0, as in procfs.
            "node_tape_residual_total{device=\"st1\"} 0\n",
        ] {
            assert!(out.contains(l), "missing {l:?} in\n{out}");
        }
        assert!(!out.contains("nst0") && !out.contains("st0a"), "{out}");

        let mut s = Settings::with_roots("/nonexistent", fixture("sys"));
        s.set(
            IGNORED,
            Some(FlagValue::parse(FlagKind::Regex, "^st1$").unwrap()),
        );
        let out = render(build(&s).as_mut()).unwrap();
        assert!(!out.contains("st1") && out.contains("st0"), "{out}");
    }

    #[test]
    fn no_tapes_write_nothing() {
        let s = Settings::with_roots("/nonexistent", "/nonexistent-usescope");
        assert_eq!(render(build(&s).as_mut()).unwrap(), "");
    }

    #[test]
    fn a_bad_counter_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let stats = dir.path().join("class/scsi_tape/st4/stats");
        std::fs::create_dir_all(&stats).unwrap();
        std::fs::write(stats.join("write_cnt"), "x\n").unwrap();
        let s = Settings::with_roots("/nonexistent", dir.path());
        let e = render(build(&s).as_mut()).unwrap_err();
        assert!(e.file.ends_with("st4/stats/write_cnt"), "{e}");
        std::fs::remove_dir_all(&stats).unwrap();
        let e = render(build(&s).as_mut()).unwrap_err();
        assert!(e.file.ends_with("st4/stats"), "{e}");
    }

    /// A drive removed after class/scsi_tape was listed is left out (a
    /// drive that is there without `stats/` fails: see above).
    #[test]
    fn a_drive_that_went_away_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let class = dir.path().join("class/scsi_tape");
        std::fs::create_dir_all(class.join("st0/stats")).unwrap();
        std::fs::write(class.join("st0/stats/write_cnt"), "3\n").unwrap();
        gone_device(&class, "st9");
        let s = Settings::with_roots("/nonexistent", dir.path());
        let out = render(build(&s).as_mut()).unwrap();
        assert!(
            out.contains("node_tape_writes_completed_total{device=\"st0\"} 3\n"),
            "{out}"
        );
        assert!(!out.contains("st9"), "{out}");
    }
}
