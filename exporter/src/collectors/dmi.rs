//! /sys/class/dmi/id → `node_dmi_info`: node_exporter's dmi collector
//! (collector/dmi.go, procfs sysfs/class_dmi.go).
//!
//! One series with a label per DMI string the firmware provides (BIOS,
//! board, chassis, product, vendor). The strings cannot change before the
//! next boot, so, as node_exporter does, they are read once, when the
//! collector is built; a scrape then costs nothing but the encoding.
//!
//! That read happens at start-up, before usescope drops its privileges
//! (privileges.rs). The serial numbers and `product_uuid` are readable by
//! root only: started as root, usescope reports them, as node_exporter run
//! as root does; started as another user, those files are left out without
//! an error (procfs skips EACCES the same way). A file that is absent is
//! left out too. Any other failure to read one, or a value that is not one
//! line, is kept and reported by every scrape as the collector's failure,
//! naming the file.

use std::io;
use std::path::Path;

use crate::collectors::sysfs::read_raw;
use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError};
use crate::kernel::parse::parse_fresh;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Encoder, MetricType, Value};

pub const SPEC: Spec = Spec {
    name: "dmi",
    default_enabled: true,
    help: "Firmware, board, chassis and product strings (DMI) from /sys/class/dmi/id, read once at start-up",
    flags: &[],
    build,
    sources: &[Source::sys("class/dmi/id/product_name", "dmi_string")],
    parsers: &[Parser::text("dmi_string", |t| {
        parse_fresh(t, parse_into).map(drop)
    })],
};

const INFO: &str = "node_dmi_info";
const INFO_HELP: &str = "A metric with a constant '1' value labeled by bios_date, bios_release, bios_vendor, bios_version, \
board_asset_tag, board_name, board_serial, board_vendor, board_version, chassis_asset_tag, \
chassis_serial, chassis_vendor, chassis_version, product_family, product_name, product_serial, \
product_sku, product_uuid, product_version, system_vendor if provided by DMI.";

/// (file in class/dmi/id, label), sorted by label: the order the client
/// library writes them in.
const STRINGS: &[(&str, &str)] = &[
    ("bios_date", "bios_date"),
    ("bios_release", "bios_release"),
    ("bios_vendor", "bios_vendor"),
    ("bios_version", "bios_version"),
    ("board_asset_tag", "board_asset_tag"),
    ("board_name", "board_name"),
    ("board_serial", "board_serial"),
    ("board_vendor", "board_vendor"),
    ("board_version", "board_version"),
    ("chassis_asset_tag", "chassis_asset_tag"),
    ("chassis_serial", "chassis_serial"),
    ("chassis_vendor", "chassis_vendor"),
    ("chassis_version", "chassis_version"),
    ("product_family", "product_family"),
    ("product_name", "product_name"),
    ("product_serial", "product_serial"),
    ("product_sku", "product_sku"),
    ("product_uuid", "product_uuid"),
    ("product_version", "product_version"),
    ("sys_vendor", "system_vendor"),
];

/// One DMI string: the attribute's text with surrounding whitespace
/// trimmed (procfs' `SysReadFile`). The kernel writes each as one line;
/// text spanning several lines is not a DMI attribute.
pub fn parse_into(text: &str, out: &mut String) -> Result<(), ParseError> {
    let value = text.trim();
    if let Some(at) = value.find(['\n', '\r']) {
        let line = 1 + text[..text.len() - text.trim_start().len() + at]
            .matches('\n')
            .count();
        return Err(ParseError::new(line + 1, "a DMI string is one line"));
    }
    out.clear();
    out.push_str(value);
    Ok(())
}

/// Go's `strings.ToValidUTF8(s, "\uFFFD")`: each run of invalid bytes
/// becomes one replacement character (Rust's lossy conversion writes one
/// per invalid sequence).
fn to_valid_utf8(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    let mut rest = bytes;
    let mut in_bad_run = false;
    while !rest.is_empty() {
        match std::str::from_utf8(rest) {
            Ok(s) => {
                out.push_str(s);
                break;
            }
            Err(e) => {
                let (good, bad) = rest.split_at(e.valid_up_to());
                // `good` was just validated.
                let good = std::str::from_utf8(good).unwrap_or_default();
                if !good.is_empty() {
                    in_bad_run = false;
                    out.push_str(good);
                }
                if !in_bad_run {
                    out.push('\u{FFFD}');
                    in_bad_run = true;
                }
                let skip = e.error_len().unwrap_or(bad.len());
                rest = &bad[skip..];
            }
        }
    }
    out
}

/// Reads one DMI string: `Ok(None)` when the file is absent or only root
/// may read it.
fn read_string(path: &Path) -> Result<Option<String>, CollectError> {
    let raw = match read_raw(path) {
        Ok(raw) => raw,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied
            ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(CollectError::io(path, e)),
    };
    let text = to_valid_utf8(&raw);
    let mut value = String::new();
    parse_into(&text, &mut value).map_err(|e| CollectError::from_parse(path, e))?;
    Ok(Some(value))
}

/// Every string the firmware provides, as (label, value), in label order.
fn read_all(dir: &Path) -> Result<Vec<(&'static str, String)>, CollectError> {
    let mut out = Vec::new();
    for (file, label) in STRINGS {
        if let Some(v) = read_string(&dir.join(file))? {
            out.push((*label, v));
        }
    }
    Ok(out)
}

pub struct DmiCollector {
    /// What the start-up read found, or why it failed (reported again by
    /// every scrape): the strings do not change until the next boot.
    read: Result<Vec<(&'static str, String)>, CollectError>,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(DmiCollector {
        read: read_all(&s.sysfs.join("class/dmi/id")),
    })
}

impl Collector for DmiCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let strings = match &self.read {
            Ok(s) => s,
            Err(e) => {
                return Err(match e.line {
                    Some(line) => CollectError::parse(&e.file, line, e.cause.clone()),
                    None => CollectError::other(&e.file, e.cause.clone()),
                });
            }
        };
        if strings.is_empty() {
            // No DMI on this platform.
            return Ok(());
        }
        let labels: Vec<(&str, &str)> = strings.iter().map(|(l, v)| (*l, v.as_str())).collect();
        enc.family_named(INFO, INFO_HELP, true, MetricType::Gauge);
        enc.sample_named(INFO, "", &labels, None, Value::U64(1));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::{fixture, render};

    #[test]
    fn one_trimmed_line() {
        assert_eq!(
            parse_fresh("  PowerEdge R640 \n", parse_into).unwrap(),
            "PowerEdge R640"
        );
        assert_eq!(parse_fresh("\n", parse_into).unwrap(), "");
        let e = parse_fresh("a\nb\n", parse_into).unwrap_err();
        assert_eq!(e.line, 2);
    }

    #[test]
    fn invalid_utf8_runs_become_one_replacement_as_in_go() {
        assert_eq!(to_valid_utf8(b"ok"), "ok");
        assert_eq!(to_valid_utf8(b"a\xff\xfeb"), "a\u{FFFD}b");
        assert_eq!(to_valid_utf8(b"\xffa\xff"), "\u{FFFD}a\u{FFFD}");
        assert_eq!(to_valid_utf8("é".as_bytes()), "é");
    }

    #[test]
    fn collector_on_fixture() {
        let s = Settings::with_roots("/nonexistent", fixture("sys"));
        let out = render(build(&s).as_mut()).unwrap();
        assert!(out.starts_with(
            "# HELP node_dmi_info A metric with a constant '1' value labeled by bios_date,"
        ));
        assert!(out.contains("# TYPE node_dmi_info gauge\n"));
        let series = out
            .lines()
            .find(|l| l.starts_with("node_dmi_info{"))
            .unwrap();
        assert!(series.ends_with("} 1"), "{series}");
        for l in [
            "bios_vendor=\"Dell Inc.\"",
            "board_asset_tag=\"\"",
            "product_name=\"PowerEdge R640\"",
            "product_serial=\"9XK2F73\"",
            "system_vendor=\"Dell Inc.\"",
            // Invalid UTF-8 in the fixture's chassis_version.
            "chassis_version=\"rev \u{FFFD}A\"",
        ] {
            assert!(series.contains(l), "missing {l} in {series}");
        }
        // chassis_type, modalias and uevent are not labels.
        assert!(!series.contains("chassis_type"));
        // No product_sku file in the fixture: no label.
        assert!(!series.contains("product_sku"));
    }

    #[test]
    fn no_dmi_writes_nothing() {
        let s = Settings::with_roots("/nonexistent", "/nonexistent-usescope");
        assert_eq!(render(build(&s).as_mut()).unwrap(), "");
    }

    #[test]
    fn a_bad_string_fails_every_scrape_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let id = dir.path().join("class/dmi/id");
        std::fs::create_dir_all(&id).unwrap();
        std::fs::write(id.join("bios_vendor"), "x\n").unwrap();
        std::fs::write(id.join("board_name"), "one\ntwo\n").unwrap();
        let s = Settings::with_roots("/nonexistent", dir.path());
        let mut c = build(&s);
        for _ in 0..2 {
            let e = render(c.as_mut()).unwrap_err();
            assert!(e.file.ends_with("class/dmi/id/board_name"), "{e}");
            assert_eq!(e.line, Some(2));
        }
        // A directory where a string should be: an I/O error, named.
        std::fs::remove_file(id.join("board_name")).unwrap();
        std::fs::create_dir(id.join("board_name")).unwrap();
        let e = render(build(&s).as_mut()).unwrap_err();
        assert!(e.file.ends_with("class/dmi/id/board_name"), "{e}");
    }
}
