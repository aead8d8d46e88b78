//! /sys/devices/system/edac/mc → `node_edac_*`: node_exporter's edac
//! collector (collector/edac_linux.go): corrected and uncorrected memory
//! errors per memory controller, chip-select row and channel.
//!
//! Each `mcN` has `ce_count`, `ue_count` and the errors that could not be
//! placed (`ce_noinfo_count`, `ue_noinfo_count`, exported as
//! `csrow="unknown"`); each `csrowN` has `ce_count`, `ue_count` and per
//! channel `chN_ce_count`, `chN_ue_count` and `chN_dimm_label`. A missing
//! or non-numeric count fails the collector naming the file, as in
//! node_exporter; a missing `chN_ue_count` only drops that sample. A
//! controller that went away while it was read (its driver unloaded:
//! ENODEV, or its directory gone) is left out.

use std::path::{Path, PathBuf};

use crate::collectors::sysfs::{DeviceError, Families, read_attribute, read_parsed, settle};
use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::absence;
use crate::kernel::error::{CollectError, ParseError};
use crate::kernel::go_compat::glob;
use crate::kernel::parse::{parse_fresh, single_field, u64_field};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Encoder, MetricType};

pub const SPEC: Spec = Spec {
    name: "edac",
    default_enabled: true,
    help: "Memory controller error counts (EDAC) from /sys/devices/system/edac/mc",
    flags: &[],
    build,
    sources: &[
        Source::sys("devices/system/edac/mc/mc0/ce_count", "edac_count"),
        Source::sys(
            "devices/system/edac/mc/mc0/csrow0/ch0_ce_count",
            "edac_count",
        ),
    ],
    parsers: &[Parser::numeric("edac_count", |t| {
        parse_fresh(t, parse_into).map(drop)
    })],
};

const CE: (&str, &str) = (
    "node_edac_correctable_errors_total",
    "Total correctable memory errors.",
);
const UE: (&str, &str) = (
    "node_edac_uncorrectable_errors_total",
    "Total uncorrectable memory errors.",
);
const CSROW_CE: (&str, &str) = (
    "node_edac_csrow_correctable_errors_total",
    "Total correctable memory errors for this csrow.",
);
const CSROW_UE: (&str, &str) = (
    "node_edac_csrow_uncorrectable_errors_total",
    "Total uncorrectable memory errors for this csrow.",
);
const CHANNEL_CE: (&str, &str) = (
    "node_edac_channel_correctable_errors_total",
    "Total correctable memory errors for this channel.",
);
const CHANNEL_UE: (&str, &str) = (
    "node_edac_channel_uncorrectable_errors_total",
    "Total uncorrectable memory errors for this channel.",
);

/// One unsigned count, surrounding whitespace allowed (node_exporter
/// trims it).
pub fn parse_into(text: &str, out: &mut u64) -> Result<(), ParseError> {
    let tok = single_field(text).ok_or_else(|| ParseError::new(1, "expected one number"))?;
    *out = u64_field(tok, 1, "count")?;
    Ok(())
}

fn count(path: &Path) -> Result<u64, DeviceError> {
    read_parsed(path, parse_into)
}

/// node_exporter's `edacDimmLabel`.
fn dimm_label(csrow: &Path, channel: &str) -> String {
    match read_attribute(&csrow.join(format!("ch{channel}_dimm_label"))) {
        Ok(l) => l
            .trim()
            .replace('#', "")
            .replace("csrow", "_csrow")
            .replace("channel", "_channel"),
        Err(_) => "unknown".to_string(),
    }
}

/// The digits after `prefix` in the last path element.
fn number(path: &str, prefix: &str) -> String {
    Path::new(path)
        .file_name()
        .map(|n| n.to_string_lossy())
        .and_then(|n| n.strip_prefix(prefix).map(str::to_string))
        .unwrap_or_default()
}

pub struct EdacCollector {
    mc: PathBuf,
    /// That `mc` was absent (no EDAC), until something may have added it.
    presence: absence::Memo,
    families: Families,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(EdacCollector {
        mc: s.sysfs.join("devices/system/edac/mc"),
        presence: absence::Memo::default(),
        families: Families::default(),
    })
}

impl EdacCollector {
    fn read(&mut self) -> Result<(), CollectError> {
        if matches!(self.presence.exists(&self.mc), Ok(false)) {
            return Ok(());
        }
        for mc in glob(&format!("{}/mc[0-9]*", self.mc.display())).unwrap_or_default() {
            let mark = self.families.len();
            let read = read_controller(&mut self.families, &mc);
            settle(&mut self.families, mark, Path::new(&mc), read)?;
        }
        Ok(())
    }
}

/// One memory controller, `mc` its directory.
fn read_controller(f: &mut Families, mc: &str) -> Result<(), DeviceError> {
    let mut push = |(name, help): (&str, &str), labels: &[(&'static str, &str)], v: u64| {
        f.push(name, help, MetricType::Counter, labels, v as f64);
    };
    let ctl = number(mc, "mc");
    let dir = Path::new(mc);
    push(CE, &[("controller", &ctl)], count(&dir.join("ce_count"))?);
    let v = count(&dir.join("ce_noinfo_count"))?;
    push(CSROW_CE, &[("controller", &ctl), ("csrow", "unknown")], v);
    push(UE, &[("controller", &ctl)], count(&dir.join("ue_count"))?);
    let v = count(&dir.join("ue_noinfo_count"))?;
    push(CSROW_UE, &[("controller", &ctl), ("csrow", "unknown")], v);
    for csrow in glob(&format!("{mc}/csrow[0-9]*")).unwrap_or_default() {
        let row = number(&csrow, "csrow");
        let cdir = Path::new(&csrow);
        let labels = [("controller", ctl.as_str()), ("csrow", row.as_str())];
        push(CSROW_CE, &labels, count(&cdir.join("ce_count"))?);
        push(CSROW_UE, &labels, count(&cdir.join("ue_count"))?);
        for ch_file in glob(&format!("{csrow}/ch*_ce_count")).unwrap_or_default() {
            let base = number(&ch_file, "ch");
            let Some(ch) = base
                .strip_suffix("_ce_count")
                .filter(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()))
            else {
                continue;
            };
            let label = dimm_label(cdir, ch);
            let labels = [
                ("controller", ctl.as_str()),
                ("csrow", row.as_str()),
                ("channel", ch),
                ("dimm_label", label.as_str()),
            ];
            push(CHANNEL_CE, &labels, count(Path::new(&ch_file))?);
            if let Ok(v) = count(&cdir.join(format!("ch{ch}_ue_count"))) {
                push(CHANNEL_UE, &labels, v);
            }
        }
    }
    Ok(())
}

impl Collector for EdacCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.families.clear();
        let read = self.read();
        self.families.write_or_discard(enc, read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::sysfs::gone_device;
    use crate::collectors::test_support::{fixture, render};

    #[test]
    fn counts() {
        assert_eq!(parse_fresh("5\n", parse_into).unwrap(), 5);
        assert!(parse_fresh("-1\n", parse_into).is_err());
        assert!(parse_fresh("", parse_into).is_err());
        assert!(parse_fresh("18446744073709551616\n", parse_into).is_err());
    }

    #[test]
    fn collector_on_fixture() {
        let s = Settings::with_roots("/nonexistent", fixture("sys"));
        let out = render(build(&s).as_mut()).unwrap();
        for l in [
            "node_edac_correctable_errors_total{controller=\"0\"} 3\n",
            "node_edac_csrow_correctable_errors_total{controller=\"0\",csrow=\"unknown\"} 1\n",
            "node_edac_csrow_uncorrectable_errors_total{controller=\"0\",csrow=\"0\"} 0\n",
            "node_edac_channel_correctable_errors_total{channel=\"0\",controller=\"0\",csrow=\"0\",dimm_label=\"CPU_SrcID0_Ha0_Channel0_DIMM0\"} 2\n",
            // No ch1_dimm_label, no ch1_ue_count.
            "node_edac_channel_correctable_errors_total{channel=\"1\",controller=\"0\",csrow=\"0\",dimm_label=\"unknown\"} 0\n",
        ] {
            assert!(out.contains(l), "missing {l:?} in\n{out}");
        }
        assert!(!out.contains("node_edac_channel_uncorrectable_errors_total{channel=\"1\""));
        let absent = Settings::with_roots("/nonexistent", "/nonexistent-usescope");
        assert_eq!(render(build(&absent).as_mut()).unwrap(), "");
    }

    #[test]
    fn a_bad_count_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let mc = dir.path().join("devices/system/edac/mc/mc1");
        std::fs::create_dir_all(&mc).unwrap();
        std::fs::write(mc.join("ce_count"), "x\n").unwrap();
        let s = Settings::with_roots("/nonexistent", dir.path());
        let e = render(build(&s).as_mut()).unwrap_err();
        assert!(e.file.ends_with("mc1/ce_count"), "{e}");
    }

    /// A memory controller removed after the listing (its driver unloaded)
    /// is left out; one that is there without `ce_count` still fails.
    #[test]
    fn a_controller_that_went_away_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let mc = dir.path().join("devices/system/edac/mc");
        std::fs::create_dir_all(mc.join("mc0")).unwrap();
        for f in ["ce_count", "ce_noinfo_count", "ue_count", "ue_noinfo_count"] {
            std::fs::write(mc.join("mc0").join(f), "2\n").unwrap();
        }
        gone_device(&mc, "mc9");
        let s = Settings::with_roots("/nonexistent", dir.path());
        let out = render(build(&s).as_mut()).unwrap();
        assert!(
            out.contains("node_edac_correctable_errors_total{controller=\"0\"} 2\n"),
            "{out}"
        );
        assert!(!out.contains("controller=\"9\""), "{out}");
        std::fs::remove_file(mc.join("mc0/ce_count")).unwrap();
        let e = render(build(&s).as_mut()).unwrap_err();
        assert!(e.file.ends_with("mc0/ce_count"), "{e}");
    }
}
