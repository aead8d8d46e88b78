//! /sys/devices/system/cpu/cpuN/cpufreq → `node_cpu_frequency_hertz`,
//! `node_cpu_frequency_{avg,min,max}_hertz`,
//! `node_cpu_scaling_frequency{,_min,_max}_hertz` and
//! `node_cpu_scaling_governor{cpu,governor}`: node_exporter's cpufreq
//! collector (collector/cpufreq_linux.go, procfs sysfs/system_cpu.go's
//! `SystemCpufreq`).
//!
//! As procfs does: the CPUs are `devices/system/cpu/cpu[0-9]*`, less those
//! listed in `devices/system/cpu/offline`; a CPU without a `cpufreq`
//! directory (usually a link to `../cpufreq/policyN`) is skipped. The
//! frequency files are kHz, exported in Hz; each one that is absent or not
//! readable (permission: `cpuinfo_cur_freq` is root's) is left out, any
//! other error or a value that is not an unsigned integer fails the
//! collector, naming the file. `scaling_available_governors`,
//! `scaling_driver`, `scaling_governor`, `related_cpus` and
//! `scaling_setspeed` must be readable, or the collector fails (procfs
//! reads them all); with a governor set, every available governor is a
//! series, 1 for the current one. A CPU that went away while it was read
//! (taken offline after `offline` was read: EBUSY from its policy;
//! hot-removed: ENODEV, or its directory gone) is left out of the scrape,
//! where node_exporter fails the collector.
//!
//! `node_cpu_frequency_hertz` is also the cpu collector's family (from
//! /proc/cpuinfo, with `--collector.cpu.info`). node_exporter then has
//! two families of one name with different HELP, and its registry drops
//! whichever arrives second. usescope writes one: the cpu collector's,
//! written first, and this collector leaves its own out of that scrape.
//!
//! Differences from node_exporter: an absent `offline` file reads as "no
//! CPU offline" only when no CPU directory exists (no series, success;
//! node_exporter fails), else it fails as node_exporter does; the
//! `stats/` files (time_in_state, trans_table, total_trans), which procfs
//! parses and node_exporter does not export, are not read.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::collectors::sysfs::{DeviceError, Families, io_error, read_raw, read_trimmed, settle};
use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::absence;
use crate::kernel::error::{CollectError, ParseError, excerpt};
use crate::kernel::parse::parse_cpu_range_into;
use crate::kernel::parse::{parse_fresh, single_field};
use crate::kernel::source::{DirListing, Read, SourceFile, Vanished};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Encoder, MetricType};

pub const SPEC: Spec = Spec {
    name: "cpufreq",
    default_enabled: true,
    help: "CPU frequencies and scaling governors from /sys/devices/system/cpu/cpuN/cpufreq",
    flags: &[],
    build,
    sources: &[
        Source::sys("devices/system/cpu/offline", "cpufreq_offline"),
        Source::sys(
            "devices/system/cpu/cpu0/cpufreq/cpuinfo_cur_freq",
            "cpufreq_khz",
        ),
        Source::sys(
            "devices/system/cpu/cpu0/cpufreq/cpuinfo_min_freq",
            "cpufreq_khz",
        ),
        Source::sys(
            "devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq",
            "cpufreq_khz",
        ),
        Source::sys(
            "devices/system/cpu/cpu0/cpufreq/cpuinfo_transition_latency",
            "cpufreq_khz",
        ),
        Source::sys(
            "devices/system/cpu/cpu0/cpufreq/scaling_cur_freq",
            "cpufreq_khz",
        ),
        Source::sys(
            "devices/system/cpu/cpu0/cpufreq/scaling_min_freq",
            "cpufreq_khz",
        ),
        Source::sys(
            "devices/system/cpu/cpu0/cpufreq/scaling_max_freq",
            "cpufreq_khz",
        ),
        Source::sys(
            "devices/system/cpu/cpu1/cpufreq/cpuinfo_avg_freq",
            "cpufreq_khz",
        ),
    ],
    parsers: &[
        Parser::numeric("cpufreq_khz", |t| parse_fresh(t, parse_into).map(drop)),
        Parser::numeric("cpufreq_offline", |t| {
            parse_cpu_range_into(t, &mut Vec::new())
        }),
    ],
};

/// The integer files procfs reads, in its order, with the family each
/// one becomes (`None`: read, not exported).
const UINT_FILES: &[(&str, Option<(&str, &str)>)] = &[
    (
        "cpuinfo_cur_freq",
        Some((FREQ, "Current CPU thread frequency in hertz.")),
    ),
    (
        "cpuinfo_avg_freq",
        Some((
            "node_cpu_frequency_avg_hertz",
            "Average CPU thread frequency in hertz.",
        )),
    ),
    (
        "cpuinfo_max_freq",
        Some((
            "node_cpu_frequency_max_hertz",
            "Maximum CPU thread frequency in hertz.",
        )),
    ),
    (
        "cpuinfo_min_freq",
        Some((
            "node_cpu_frequency_min_hertz",
            "Minimum CPU thread frequency in hertz.",
        )),
    ),
    ("cpuinfo_transition_latency", None),
    (
        "scaling_cur_freq",
        Some((
            "node_cpu_scaling_frequency_hertz",
            "Current scaled CPU thread frequency in hertz.",
        )),
    ),
    (
        "scaling_max_freq",
        Some((
            "node_cpu_scaling_frequency_max_hertz",
            "Maximum scaled CPU thread frequency in hertz.",
        )),
    ),
    (
        "scaling_min_freq",
        Some((
            "node_cpu_scaling_frequency_min_hertz",
            "Minimum scaled CPU thread frequency in hertz.",
        )),
    ),
];

const FREQ: &str = "node_cpu_frequency_hertz";
const GOVERNOR: &str = "node_cpu_scaling_governor";
const GOVERNOR_HELP: &str = "Current enabled CPU frequency governor.";

/// The text files procfs reads (and fails on if it cannot).
const STRING_FILES: &[&str] = &[
    "scaling_available_governors",
    "scaling_driver",
    "scaling_governor",
    "related_cpus",
    "scaling_setspeed",
];

/// One unsigned integer, surrounding whitespace allowed (procfs'
/// `ReadUintFromFile`: TrimSpace, then ParseUint).
pub fn parse_into(text: &str, out: &mut u64) -> Result<(), ParseError> {
    let tok = single_field(text).ok_or_else(|| ParseError::new(1, "expected one integer"))?;
    *out = tok
        .parse::<u64>()
        .ok()
        .filter(|_| !tok.starts_with('+'))
        .ok_or_else(|| {
            ParseError::new(
                1,
                format!("frequency: not an unsigned integer: {}", excerpt(tok)),
            )
        })?;
    Ok(())
}

pub struct CpufreqCollector {
    cpu_dir: PathBuf,
    listing: DirListing,
    offline_file: SourceFile,
    offline: Vec<u32>,
    /// Per CPU directory name: that its `cpufreq` was absent (no driver).
    freq_absent: std::collections::HashMap<String, absence::Memo>,
    families: Families,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(CpufreqCollector {
        cpu_dir: s.sysfs.join("devices/system/cpu"),
        listing: DirListing::of_devices(),
        offline_file: SourceFile::small(&s.sysfs, "devices/system/cpu/offline"),
        offline: Vec::new(),
        freq_absent: Default::default(),
        families: Families::default(),
    })
}

/// An integer attribute: `Ok(None)` if absent or not permitted, an error
/// naming the file for any other failure.
fn uint_attr(path: &Path) -> Result<Option<u64>, DeviceError> {
    let text = match read_trimmed(path) {
        Ok(t) => t,
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::PermissionDenied) => {
            return Ok(None);
        }
        Err(e) => return Err(freq_error(path, e)),
    };
    let mut v = 0;
    parse_into(&text, &mut v).map_err(|e| CollectError::from_parse(path, e))?;
    Ok(Some(v))
}

/// An error reading a file of a CPU's `cpufreq`: cpufreq answers EBUSY
/// for every file of a policy whose CPUs have all gone offline, which a
/// CPU taken offline after `offline` was read meets, so that counts as
/// the CPU gone, with ENODEV and the rest ([`io_error`]).
fn freq_error(path: &Path, e: std::io::Error) -> DeviceError {
    if e.raw_os_error() == Some(libc::EBUSY) {
        return DeviceError::Vanishing(CollectError::io(path, e), Vanished::NoDevice);
    }
    io_error(path, e)
}

impl CpufreqCollector {
    /// `cpu[0-9]*` under the cpu directory, less the offline ones, with
    /// their numbers. The directory and `offline` keep their descriptors
    /// between scrapes.
    fn cpus(&mut self) -> Result<Vec<(PathBuf, String)>, CollectError> {
        if !self.listing.read(&self.cpu_dir)? {
            self.offline.clear();
            return Ok(Vec::new());
        }
        match self.offline_file.read()? {
            Read::Text(text) => parse_cpu_range_into(text, &mut self.offline)
                .map_err(|e| self.offline_file.parse_error(e))?,
            Read::Absent if self.listing.numbered("cpu").next().is_none() => {
                self.offline.clear();
            }
            Read::Absent => {
                return Err(CollectError::io(
                    self.offline_file.path(),
                    std::io::Error::from(ErrorKind::NotFound),
                ));
            }
        }
        let mut out = Vec::new();
        for (entry, name) in self.listing.numbered("cpu") {
            let path = self.cpu_dir.join(&entry.name);
            if !self.offline.is_empty() {
                let id: u32 = name.parse().map_err(|_| {
                    CollectError::other(&path, format!("cpu number {}", excerpt(name)))
                })?;
                if self.offline.binary_search(&id).is_ok() {
                    continue;
                }
            }
            out.push((path, name.to_string()));
        }
        Ok(out)
    }
}

/// One CPU's `cpufreq` directory. `freq_taken`: whether the cpu
/// collector wrote the frequency family first (looked for once).
fn read_cpu(
    families: &mut Families,
    freq_dir: &Path,
    cpu: &str,
    freq_taken: &mut Option<bool>,
    enc: &Encoder,
) -> Result<(), DeviceError> {
    let labels = [("cpu", cpu)];
    for (file, family) in UINT_FILES {
        let Some(khz) = uint_attr(&freq_dir.join(file))? else {
            continue;
        };
        match family {
            Some((name, _))
                if *name == FREQ
                    && *freq_taken.get_or_insert_with(|| {
                        memchr::memmem::find(
                            enc.written(),
                            format!("# TYPE {FREQ} gauge\n").as_bytes(),
                        )
                        .is_some()
                    }) => {}
            Some((name, help)) => families.push(
                *name,
                *help,
                MetricType::Gauge,
                &labels,
                khz as f64 * 1000.0,
            ),
            None => {}
        }
    }
    let mut strings: [String; 5] = Default::default();
    for (file, out) in STRING_FILES.iter().zip(strings.iter_mut()) {
        let path = freq_dir.join(file);
        let raw = read_raw(&path).map_err(|e| freq_error(&path, e))?;
        *out = String::from_utf8_lossy(&raw).trim().to_string();
    }
    let [available, _, governor, _, _] = &strings;
    if !governor.is_empty() {
        for g in available.split(' ') {
            families.push(
                GOVERNOR,
                GOVERNOR_HELP,
                MetricType::Gauge,
                &[("cpu", cpu), ("governor", g)],
                if g == governor { 1.0 } else { 0.0 },
            );
        }
    }
    Ok(())
}

impl Collector for CpufreqCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.families.clear();
        // The cpu collector's /proc/cpuinfo family of the same name, when
        // already written in this scrape, wins (see the module doc). Looked
        // for only when there is a frequency to write: on a host without
        // cpufreq (most VMs) the scrape's output is not scanned at all.
        let mut freq_taken = None;
        for (dir, cpu) in self.cpus()? {
            let freq_dir = dir.join("cpufreq");
            let memo = self.freq_absent.entry(cpu.clone()).or_default();
            if !memo
                .exists(&freq_dir)
                .map_err(|e| CollectError::io(&freq_dir, e))?
            {
                continue;
            }
            let mark = self.families.len();
            let read = read_cpu(&mut self.families, &freq_dir, &cpu, &mut freq_taken, enc);
            settle(&mut self.families, mark, &freq_dir, read)?;
        }
        self.families.write(enc);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::{fixture, render};
    use crate::scrape::exposition::Format;

    #[test]
    fn integers() {
        assert_eq!(parse_fresh("1800000\n", parse_into).unwrap(), 1_800_000);
        assert_eq!(parse_fresh(" 0 \n", parse_into).unwrap(), 0);
        for bad in [
            "",
            "\n",
            "1 2\n",
            "-1\n",
            "+1\n",
            "1.5\n",
            "18446744073709551616\n",
        ] {
            let e = parse_fresh(bad, parse_into).unwrap_err();
            assert_eq!(e.line, 1, "{bad:?}: {e}");
        }
    }

    const EXPECTED: &str = "\
# HELP node_cpu_frequency_avg_hertz Average CPU thread frequency in hertz.
# TYPE node_cpu_frequency_avg_hertz gauge
node_cpu_frequency_avg_hertz{cpu=\"1\"} 2398765000
# HELP node_cpu_frequency_hertz Current CPU thread frequency in hertz.
# TYPE node_cpu_frequency_hertz gauge
node_cpu_frequency_hertz{cpu=\"0\"} 1800000000
# HELP node_cpu_frequency_max_hertz Maximum CPU thread frequency in hertz.
# TYPE node_cpu_frequency_max_hertz gauge
node_cpu_frequency_max_hertz{cpu=\"0\"} 3600000000
node_cpu_frequency_max_hertz{cpu=\"1\"} 4700000000
# HELP node_cpu_frequency_min_hertz Minimum CPU thread frequency in hertz.
# TYPE node_cpu_frequency_min_hertz gauge
node_cpu_frequency_min_hertz{cpu=\"0\"} 800000000
node_cpu_frequency_min_hertz{cpu=\"1\"} 400000000
# HELP node_cpu_scaling_frequency_hertz Current scaled CPU thread frequency in hertz.
# TYPE node_cpu_scaling_frequency_hertz gauge
node_cpu_scaling_frequency_hertz{cpu=\"0\"} 1799998000
node_cpu_scaling_frequency_hertz{cpu=\"1\"} 2400012000
# HELP node_cpu_scaling_frequency_max_hertz Maximum scaled CPU thread frequency in hertz.
# TYPE node_cpu_scaling_frequency_max_hertz gauge
node_cpu_scaling_frequency_max_hertz{cpu=\"0\"} 3600000000
node_cpu_scaling_frequency_max_hertz{cpu=\"1\"} 4700000000
# HELP node_cpu_scaling_frequency_min_hertz Minimum scaled CPU thread frequency in hertz.
# TYPE node_cpu_scaling_frequency_min_hertz gauge
node_cpu_scaling_frequency_min_hertz{cpu=\"0\"} 800000000
node_cpu_scaling_frequency_min_hertz{cpu=\"1\"} 400000000
# HELP node_cpu_scaling_governor Current enabled CPU frequency governor.
# TYPE node_cpu_scaling_governor gauge
node_cpu_scaling_governor{cpu=\"0\",governor=\"conservative\"} 0
node_cpu_scaling_governor{cpu=\"0\",governor=\"ondemand\"} 0
node_cpu_scaling_governor{cpu=\"0\",governor=\"performance\"} 0
node_cpu_scaling_governor{cpu=\"0\",governor=\"powersave\"} 0
node_cpu_scaling_governor{cpu=\"0\",governor=\"schedutil\"} 1
node_cpu_scaling_governor{cpu=\"0\",governor=\"userspace\"} 0
node_cpu_scaling_governor{cpu=\"1\",governor=\"performance\"} 0
node_cpu_scaling_governor{cpu=\"1\",governor=\"powersave\"} 1
";

    #[test]
    fn collector_on_fixture() {
        let s = Settings::with_roots("/nonexistent", fixture("sys"));
        assert_eq!(render(build(&s).as_mut()).unwrap(), EXPECTED);
        let absent = Settings::with_roots("/nonexistent", "/nonexistent-usescope");
        assert_eq!(render(build(&absent).as_mut()).unwrap(), "");
    }

    #[test]
    fn cpu_collectors_frequency_wins() {
        let s = Settings::with_roots("/nonexistent", fixture("sys"));
        let mut buf =
            b"# HELP node_cpu_frequency_hertz CPU frequency in hertz from /proc/cpuinfo.\n\
                        # TYPE node_cpu_frequency_hertz gauge\n"
                .to_vec();
        let before = buf.len();
        build(&s)
            .collect(&mut Encoder::new(&mut buf, Format::PrometheusText))
            .unwrap();
        let out = String::from_utf8(buf[before..].to_vec()).unwrap();
        assert!(!out.contains("node_cpu_frequency_hertz"), "{out}");
        assert!(
            out.contains("node_cpu_frequency_max_hertz{cpu=\"0\"}"),
            "{out}"
        );
    }

    #[test]
    fn offline_cpus_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let cpu = dir.path().join("devices/system/cpu");
        for n in [0, 1] {
            let f = cpu.join(format!("cpu{n}/cpufreq"));
            std::fs::create_dir_all(&f).unwrap();
            for file in STRING_FILES {
                std::fs::write(f.join(file), "x\n").unwrap();
            }
            std::fs::write(f.join("scaling_cur_freq"), "1000\n").unwrap();
        }
        std::fs::create_dir_all(cpu.join("cpu2")).unwrap(); // no cpufreq
        std::fs::write(cpu.join("offline"), "1\n").unwrap();
        let s = Settings::with_roots("/nonexistent", dir.path());
        let out = render(build(&s).as_mut()).unwrap();
        assert!(
            out.contains("node_cpu_scaling_frequency_hertz{cpu=\"0\"} 1000000\n"),
            "{out}"
        );
        assert!(!out.contains("cpu=\"1\""), "{out}");
        // available "x", current "x": one series.
        assert!(
            out.contains("node_cpu_scaling_governor{cpu=\"0\",governor=\"x\"} 1\n"),
            "{out}"
        );
        // A bad value fails, naming the file.
        std::fs::write(cpu.join("cpu0/cpufreq/scaling_cur_freq"), "fast\n").unwrap();
        let e = render(build(&s).as_mut()).unwrap_err();
        assert!(e.file.ends_with("cpu0/cpufreq/scaling_cur_freq"), "{e}");
        std::fs::write(cpu.join("cpu0/cpufreq/scaling_cur_freq"), "1000\n").unwrap();
        // A missing governor file fails, as in procfs.
        std::fs::remove_file(cpu.join("cpu0/cpufreq/scaling_setspeed")).unwrap();
        let e = render(build(&s).as_mut()).unwrap_err();
        assert!(e.file.ends_with("cpu0/cpufreq/scaling_setspeed"), "{e}");
        // A bad offline list fails; an absent one too, when CPUs exist.
        std::fs::write(cpu.join("offline"), "a-b\n").unwrap();
        let e = render(build(&s).as_mut()).unwrap_err();
        assert!(e.file.ends_with("offline"), "{e}");
        std::fs::remove_file(cpu.join("offline")).unwrap();
        assert!(render(build(&s).as_mut()).is_err());
    }

    /// A CPU taken offline after `offline` was read (its policy answers
    /// EBUSY) or hot-removed (its `cpufreq` gone) is left out; a file that
    /// is missing from a CPU that is there still fails.
    #[test]
    fn a_cpu_that_went_away_is_left_out() {
        let ebusy = freq_error(
            Path::new("x"),
            std::io::Error::from_raw_os_error(libc::EBUSY),
        );
        assert!(matches!(
            ebusy,
            DeviceError::Vanishing(_, Vanished::NoDevice)
        ));
        let dir = tempfile::tempdir().unwrap();
        let freq = dir.path().join("cpu1/cpufreq");
        let enc_buf = &mut Vec::new();
        let enc = Encoder::new(enc_buf, Format::PrometheusText);
        let mut families = Families::default();
        let read = read_cpu(&mut families, &freq, "1", &mut None, &enc);
        settle(&mut families, 0, &freq, read).unwrap();
        assert!(families.is_empty());
        std::fs::create_dir_all(&freq).unwrap();
        let read = read_cpu(&mut families, &freq, "1", &mut None, &enc);
        let e = settle(&mut families, 0, &freq, read).unwrap_err();
        assert!(
            e.file.ends_with("cpufreq/scaling_available_governors"),
            "{e}"
        );
    }
}
