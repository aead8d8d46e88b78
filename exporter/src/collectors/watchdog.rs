//! /sys/class/watchdog → `node_watchdog_*`: node_exporter's watchdog
//! collector (collector/watchdog.go, procfs sysfs/class_watchdog.go).
//!
//! Each device `watchdogN` may have (kernel
//! Documentation/ABI/testing/sysfs-class-watchdog; the watchdog core
//! hides what the driver does not support): the integers `bootstatus`,
//! `fw_version`, `nowayout`, `timeleft`, `timeout`, `pretimeout` and
//! `access_cs0`, each its own gauge, and the strings `options`,
//! `identity`, `state`, `status` and `pretimeout_governor`, the labels of
//! `node_watchdog_info`. A missing attribute is left out (a missing string
//! is an empty label). An integer that does not parse fails the collector
//! naming the file, as it fails node_exporter's. A device that went away
//! while it was read (ENODEV, or its directory gone) is left out.
//!
//! Reading the attributes never touches /dev/watchdog, so it cannot arm a
//! watchdog. Without watchdog devices a scrape costs one directory read.

use std::io;
use std::path::Path;

use crate::collectors::sysfs::{DeviceError, Families, io_error, read_trimmed, settle};
use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError};
use crate::kernel::parse::{go_i64_field, parse_fresh, single_field};
use crate::kernel::source::Dir;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Encoder, MetricType};

pub const SPEC: Spec = Spec {
    name: "watchdog",
    default_enabled: true,
    help: "Watchdog timers' timeouts, time left and state from /sys/class/watchdog",
    flags: &[],
    build,
    sources: &[
        Source::sys("class/watchdog/watchdog0/timeout", "watchdog_int"),
        Source::sys("class/watchdog/watchdog0/bootstatus", "watchdog_int"),
    ],
    parsers: &[Parser::numeric("watchdog_int", |t| {
        parse_fresh(t, parse_into).map(drop)
    })],
};

/// The integer attributes: (file, family, HELP).
const INTEGERS: &[(&str, &str, &str)] = &[
    (
        "bootstatus",
        "node_watchdog_bootstatus",
        "Value of /sys/class/watchdog/<watchdog>/bootstatus",
    ),
    (
        "fw_version",
        "node_watchdog_fw_version",
        "Value of /sys/class/watchdog/<watchdog>/fw_version",
    ),
    (
        "nowayout",
        "node_watchdog_nowayout",
        "Value of /sys/class/watchdog/<watchdog>/nowayout",
    ),
    (
        "timeleft",
        "node_watchdog_timeleft_seconds",
        "Value of /sys/class/watchdog/<watchdog>/timeleft",
    ),
    (
        "timeout",
        "node_watchdog_timeout_seconds",
        "Value of /sys/class/watchdog/<watchdog>/timeout",
    ),
    (
        "pretimeout",
        "node_watchdog_pretimeout_seconds",
        "Value of /sys/class/watchdog/<watchdog>/pretimeout",
    ),
    (
        "access_cs0",
        "node_watchdog_access_cs0",
        "Value of /sys/class/watchdog/<watchdog>/access_cs0",
    ),
];

/// The string attributes, each a label of `node_watchdog_info`.
const STRINGS: &[&str] = &[
    "options",
    "identity",
    "state",
    "status",
    "pretimeout_governor",
];
const INFO: &str = "node_watchdog_info";
const INFO_HELP: &str = "Info of /sys/class/watchdog/<watchdog>";

/// One integer attribute, as procfs reads it (Go's base-0 `ParseInt`:
/// `status` is hexadecimal with `0x`, the rest decimal).
pub fn parse_into(text: &str, out: &mut i64) -> Result<(), ParseError> {
    let tok = single_field(text).ok_or_else(|| ParseError::new(1, "expected one integer"))?;
    *out = go_i64_field(tok, 1, "value")?;
    Ok(())
}

/// An attribute's trimmed text; `None` when the device does not have it
/// (absent) or does not report it now (EINVAL, EOPNOTSUPP, EACCES).
fn attribute(path: &Path) -> Result<Option<String>, DeviceError> {
    match read_trimmed(path) {
        Ok(t) => Ok(Some(t)),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied
            ) || matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP)) =>
        {
            Ok(None)
        }
        Err(e) => Err(io_error(path, e)),
    }
}

pub struct WatchdogCollector {
    class: Dir,
    families: Families,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(WatchdogCollector {
        class: Dir::new(&s.sysfs, "class/watchdog").of_devices(),
        families: Families::default(),
    })
}

impl WatchdogCollector {
    fn read_device(&mut self, name: &str) -> Result<(), CollectError> {
        let dir = self.class.path().join(name);
        let mark = self.families.len();
        let read = self.read_device_in(&dir, name);
        settle(&mut self.families, mark, &dir, read)
    }

    fn read_device_in(&mut self, dir: &Path, name: &str) -> Result<(), DeviceError> {
        for (file, family, help) in INTEGERS {
            let path = dir.join(file);
            if let Some(text) = attribute(&path)? {
                let mut v = 0;
                parse_into(&text, &mut v).map_err(|e| CollectError::from_parse(&path, e))?;
                self.families.push(
                    *family,
                    *help,
                    MetricType::Gauge,
                    &[("name", name)],
                    v as f64,
                );
            }
        }
        let mut values: [String; 5] = Default::default();
        for (value, file) in values.iter_mut().zip(STRINGS) {
            *value = attribute(&dir.join(file))?.unwrap_or_default();
        }
        let mut labels: Vec<(&'static str, &str)> = vec![("name", name)];
        labels.extend(STRINGS.iter().zip(&values).map(|(l, v)| (*l, v.as_str())));
        self.families
            .push(INFO, INFO_HELP, MetricType::Gauge, &labels, 1.0);
        Ok(())
    }
}

impl Collector for WatchdogCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.families.clear();
        let read = self
            .class
            .sorted_names()
            .and_then(|names| names.iter().try_for_each(|n| self.read_device(n)));
        self.families.write_or_discard(enc, read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::{fixture, render};

    #[test]
    fn integers() {
        assert_eq!(parse_fresh("60\n", parse_into).unwrap(), 60);
        assert_eq!(parse_fresh("0x8000\n", parse_into).unwrap(), 0x8000);
        assert!(parse_fresh("", parse_into).is_err());
        assert!(parse_fresh("sixty\n", parse_into).is_err());
        assert!(parse_fresh("1 2\n", parse_into).is_err());
    }

    #[test]
    fn collector_on_fixture() {
        let s = Settings::with_roots("/nonexistent", fixture("sys"));
        let out = render(build(&s).as_mut()).unwrap();
        for l in [
            "# HELP node_watchdog_timeout_seconds Value of /sys/class/watchdog/<watchdog>/timeout\n",
            "node_watchdog_timeout_seconds{name=\"watchdog0\"} 60\n",
            "node_watchdog_timeleft_seconds{name=\"watchdog0\"} 45\n",
            "node_watchdog_bootstatus{name=\"watchdog0\"} 1\n",
            "node_watchdog_info{identity=\"iTCO_wdt\",name=\"watchdog0\",options=\"0x8380\",pretimeout_governor=\"noop\",state=\"active\",status=\"0x8000\"} 1\n",
            // watchdog1 (softdog, stopped) has no timeleft, status or
            // pretimeout_governor: empty labels, no series.
            "node_watchdog_info{identity=\"Software Watchdog\",name=\"watchdog1\",options=\"0x8180\",pretimeout_governor=\"\",state=\"inactive\",status=\"\"} 1\n",
        ] {
            assert!(out.contains(l), "missing {l:?} in\n{out}");
        }
        assert!(!out.contains("node_watchdog_timeleft_seconds{name=\"watchdog1\"}"));
    }

    #[test]
    fn no_devices_write_nothing() {
        let s = Settings::with_roots("/nonexistent", "/nonexistent-usescope");
        assert_eq!(render(build(&s).as_mut()).unwrap(), "");
    }

    #[test]
    fn a_bad_integer_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let wd = dir.path().join("class/watchdog/watchdog0");
        std::fs::create_dir_all(&wd).unwrap();
        std::fs::write(wd.join("timeout"), "soon\n").unwrap();
        let s = Settings::with_roots("/nonexistent", dir.path());
        let e = render(build(&s).as_mut()).unwrap_err();
        assert!(e.file.ends_with("watchdog0/timeout"), "{e}");
    }
}
