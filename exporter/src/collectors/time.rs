//! System time, time zone and clocksource → node_exporter's time collector
//! (collector/time.go, time_linux.go; procfs `sysfs.ClockSources`):
//! `node_time_seconds`, `node_time_zone_offset_seconds{time_zone}`,
//! `node_time_clocksource_available_info{clocksource,device}` and
//! `node_time_clocksource_current_info{clocksource,device}`.
//!
//! The time comes from the system clock and the zone from the C library's
//! local time (`TZ`, else /etc/localtime, read once, as Go reads it once):
//! the process's own, not `--path.rootfs`'s, as in node_exporter. The node
//! mixin's dashboards take their `$cluster` variable from
//! `node_time_seconds`.
//!
//! Clocksources are read from every `clocksource[0-9]*` directory under
//! `<sysfs>/devices/system/clocksource` (the kernel creates one,
//! `clocksource0`). As in node_exporter, the `device` label is the
//! directory's position in the name-sorted list, not the number in its name.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError, excerpt};
use crate::kernel::parse::{fields, lines};
use crate::kernel::source::{Dir, SourceFile};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder, u64_label};

pub const SPEC: Spec = Spec {
    name: "time",
    default_enabled: true,
    help: "System time, time zone offset and clocksources (/sys/devices/system/clocksource)",
    flags: &[],
    build,
    sources: &[
        Source::sys(
            "devices/system/clocksource/clocksource0/available_clocksource",
            "clocksource_available",
        ),
        Source::sys(
            "devices/system/clocksource/clocksource0/current_clocksource",
            "clocksource_current",
        ),
    ],
    parsers: &[
        Parser::text("clocksource_available", |t| {
            parse_available_into(t, &mut Vec::new())
        }),
        Parser::text("clocksource_current", |t| parse_current_into(t, &mut "")),
    ],
};

const NOW: Desc = Desc::gauge(
    "node_time_seconds",
    "System time in seconds since epoch (1970).",
);
const ZONE: Desc = Desc::gauge(
    "node_time_zone_offset_seconds",
    "System time zone offset in seconds.",
);
const AVAILABLE: Desc = Desc::gauge(
    "node_time_clocksource_available_info",
    "Available clocksources read from '/sys/devices/system/clocksource'.",
);
const CURRENT: Desc = Desc::gauge(
    "node_time_clocksource_current_info",
    "Current clocksource read from '/sys/devices/system/clocksource'.",
);

const CLOCKSOURCE_DIR: &str = "devices/system/clocksource";

/// One line, its whitespace-separated names (`tsc hpet acpi_pm \n`). An
/// empty list is valid (node_exporter then emits no available series).
pub fn parse_available_into<'t>(s: &'t str, out: &mut Vec<&'t str>) -> Result<(), ParseError> {
    out.clear();
    out.extend(available(s)?);
    Ok(())
}

/// [`parse_available_into`]'s names, without collecting them.
fn available(s: &str) -> Result<impl Iterator<Item = &str>, ParseError> {
    let mut it = lines(s);
    let first = it.next().unwrap_or("");
    single_line(it)?;
    Ok(fields(first))
}

/// One line holding one name (`tsc\n`).
pub fn parse_current_into<'t>(s: &'t str, out: &mut &'t str) -> Result<(), ParseError> {
    let mut it = lines(s);
    let mut f = fields(it.next().unwrap_or(""));
    *out = f
        .next()
        .ok_or_else(|| ParseError::new(1, "empty file: no current clocksource"))?;
    if let Some(extra) = f.next() {
        return Err(ParseError::new(
            1,
            format!(
                "expected one clocksource name, found another: {}",
                excerpt(extra)
            ),
        ));
    }
    single_line(it)
}

fn single_line<'t>(mut rest: impl Iterator<Item = &'t str>) -> Result<(), ParseError> {
    match rest.next() {
        None => Ok(()),
        Some(_) => Err(ParseError::new(2, "expected a single line")),
    }
}

/// The local time zone's abbreviation and offset east of UTC at `secs`,
/// as Go's `time.Now().Zone()` gives them.
fn local_zone(secs: i64, name: &mut String) -> Option<i64> {
    let t: libc::time_t = secs;
    // SAFETY: tm is plain C data; all-zero is a valid value.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: localtime_r writes only into the struct we own.
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        return None;
    }
    name.clear();
    if !tm.tm_zone.is_null() {
        // SAFETY: tm_zone points at a NUL-terminated string in the C
        // library's time zone data, which lives for the process.
        let zone = unsafe { std::ffi::CStr::from_ptr(tm.tm_zone) };
        name.push_str(&zone.to_string_lossy());
    }
    Some(tm.tm_gmtoff)
}

/// One `clocksourceN` directory's two files and what they held at the
/// last read (Strings reused across scrapes).
struct Device {
    name: String,
    available: SourceFile,
    current: SourceFile,
    /// `names[..count]` are the available clocksources; `None` if the file
    /// is absent.
    names: Vec<String>,
    count: Option<usize>,
    current_name: Option<String>,
}

pub struct TimeCollector {
    sysfs: PathBuf,
    dir: Dir,
    /// Names listed at this scrape, sorted; `listed[..count]` is valid
    /// (the Strings are reused).
    listed: Vec<String>,
    devices: Vec<Device>,
    zone: String,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(TimeCollector {
        sysfs: s.sysfs.clone(),
        dir: Dir::new(&s.sysfs, CLOCKSOURCE_DIR).of_devices(),
        listed: Vec::new(),
        devices: Vec::new(),
        zone: String::new(),
    })
}

/// `clocksource[0-9]*`, the glob node_exporter lists.
fn is_clocksource(name: &str) -> bool {
    name.strip_prefix("clocksource")
        .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
}

/// Overwrites `slots[..n]` with `items`, reusing the Strings; returns n.
fn store<'a>(slots: &mut Vec<String>, items: impl Iterator<Item = &'a str>) -> usize {
    let mut n = 0;
    for item in items {
        match slots.get_mut(n) {
            Some(s) => {
                s.clear();
                s.push_str(item);
            }
            None => slots.push(item.to_string()),
        }
        n += 1;
    }
    n
}

impl TimeCollector {
    /// Lists the clocksource directories and rebuilds the device list if
    /// it changed (it never does on a running kernel).
    fn refresh_devices(&mut self) -> Result<(), CollectError> {
        let mut count = 0;
        let listed = &mut self.listed;
        let present = self.dir.list(|name| {
            if is_clocksource(name) {
                count += store_at(listed, count, name);
            }
        })?;
        if !present {
            count = 0;
        }
        let listed = &mut self.listed[..count];
        listed.sort_unstable();
        let same = listed.len() == self.devices.len()
            && listed.iter().zip(&self.devices).all(|(a, d)| *a == d.name);
        if !same {
            self.devices = listed
                .iter()
                .map(|name| device(&self.sysfs, name))
                .collect();
        }
        Ok(())
    }
}

/// Writes `item` into `slots[at]` (reusing the String); returns 1.
fn store_at(slots: &mut Vec<String>, at: usize, item: &str) -> usize {
    match slots.get_mut(at) {
        Some(s) => {
            s.clear();
            s.push_str(item);
        }
        None => slots.push(item.to_string()),
    }
    1
}

fn device(sysfs: &Path, name: &str) -> Device {
    let dir = sysfs.join(CLOCKSOURCE_DIR).join(name);
    Device {
        name: name.to_string(),
        available: SourceFile::small(&dir, "available_clocksource"),
        current: SourceFile::small(&dir, "current_clocksource"),
        names: Vec::new(),
        count: None,
        current_name: None,
    }
}

impl Device {
    /// Reads and parses both files into the device's slots.
    fn read(&mut self) -> Result<(), CollectError> {
        let names = &mut self.names;
        self.count = self
            .available
            .parse_with(|t| Ok(store(names, available(t)?)))?;
        let slot = &mut self.current_name;
        let present = self.current.parse_with(|t| {
            let mut name = "";
            parse_current_into(t, &mut name)?;
            let s = slot.get_or_insert_with(String::new);
            s.clear();
            s.push_str(name);
            Ok(())
        })?;
        if present.is_none() {
            self.current_name = None;
        }
        Ok(())
    }
}

impl Collector for TimeCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_err(|e| CollectError::other("system clock", e.to_string()))?;
        let offset = local_zone(now.as_secs() as i64, &mut self.zone)
            .ok_or_else(|| CollectError::other("localtime_r(3)", "no local time"))?;
        self.refresh_devices()?;
        // Every file is parsed before anything is written.
        for d in &mut self.devices {
            d.read()?;
        }
        enc.family(&NOW);
        enc.sample(&NOW, &[], now.as_nanos() as f64 / 1e9);
        enc.family(&ZONE);
        enc.sample(&ZONE, &[("time_zone", &self.zone)], offset);
        let mut b = [0u8; 20];
        if self.devices.iter().any(|d| d.count.is_some_and(|n| n > 0)) {
            enc.family(&AVAILABLE);
            for (i, d) in self.devices.iter().enumerate() {
                let device = u64_label(i as u64, &mut b);
                for name in &d.names[..d.count.unwrap_or(0)] {
                    enc.sample(
                        &AVAILABLE,
                        &[("clocksource", name), ("device", device)],
                        1u64,
                    );
                }
            }
        }
        if self.devices.iter().any(|d| d.current_name.is_some()) {
            enc.family(&CURRENT);
            for (i, d) in self.devices.iter().enumerate() {
                let device = u64_label(i as u64, &mut b);
                if let Some(name) = &d.current_name {
                    enc.sample(&CURRENT, &[("clocksource", name), ("device", device)], 1u64);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::{fixture, render};

    fn available_of(s: &str) -> Result<Vec<&str>, ParseError> {
        let mut v = Vec::new();
        parse_available_into(s, &mut v).map(|()| v)
    }

    fn current_of(s: &str) -> Result<&str, ParseError> {
        let mut v = "";
        parse_current_into(s, &mut v).map(|()| v)
    }

    #[test]
    fn parses_clocksource_files() {
        assert_eq!(
            available_of("tsc kvm-clock \n").unwrap(),
            ["tsc", "kvm-clock"]
        );
        assert_eq!(available_of("\n").unwrap(), Vec::<&str>::new());
        assert_eq!(available_of("").unwrap(), Vec::<&str>::new());
        assert_eq!(available_of("tsc\nhpet\n").unwrap_err().line, 2);
        assert_eq!(current_of("tsc\n").unwrap(), "tsc");
        assert_eq!(current_of("  tsc").unwrap(), "tsc");
        assert_eq!(current_of("").unwrap_err().line, 1);
        assert!(current_of("tsc hpet\n").unwrap_err().msg.contains("hpet"));
        assert_eq!(current_of("tsc\nx\n").unwrap_err().line, 2);
    }

    fn settings(sysfs: &Path) -> Settings {
        Settings::with_roots("/nonexistent", sysfs)
    }

    #[test]
    fn collector_on_fixture() {
        let out = render(build(&settings(&fixture("sys"))).as_mut()).unwrap();
        let mut lines = out.lines();
        assert_eq!(
            lines.next(),
            Some("# HELP node_time_seconds System time in seconds since epoch (1970).")
        );
        let now: f64 = out
            .lines()
            .find_map(|l| l.strip_prefix("node_time_seconds "))
            .unwrap()
            .parse()
            .unwrap();
        let real = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!((real - now).abs() < 5.0, "{now} vs {real}");
        assert!(out.contains(
            "# TYPE node_time_zone_offset_seconds gauge\nnode_time_zone_offset_seconds{time_zone=\""
        ));
        assert!(out.ends_with(
            "# HELP node_time_clocksource_available_info Available clocksources read from '/sys/devices/system/clocksource'.\n\
             # TYPE node_time_clocksource_available_info gauge\n\
             node_time_clocksource_available_info{clocksource=\"tsc\",device=\"0\"} 1\n\
             node_time_clocksource_available_info{clocksource=\"kvm-clock\",device=\"0\"} 1\n\
             # HELP node_time_clocksource_current_info Current clocksource read from '/sys/devices/system/clocksource'.\n\
             # TYPE node_time_clocksource_current_info gauge\n\
             node_time_clocksource_current_info{clocksource=\"tsc\",device=\"0\"} 1\n"
        ), "{out}");
    }

    #[test]
    fn zone_is_the_c_librarys() {
        let mut name = String::new();
        // 2024-07-01: summer time where there is one.
        let off = local_zone(1_719_792_000, &mut name).unwrap();
        assert!(off.abs() <= 14 * 3600, "{off}");
        assert!(!name.is_empty());
    }

    #[test]
    fn devices_are_numbered_in_name_order_and_files_may_be_absent() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join(CLOCKSOURCE_DIR);
        for (name, avail, cur) in [
            ("clocksource0", Some("tsc hpet\n"), Some("tsc\n")),
            ("clocksource10", Some("x10\n"), Some("x10\n")),
            ("clocksource2", None, Some("x2\n")),
            ("clocksourcex", Some("no\n"), Some("no\n")),
        ] {
            std::fs::create_dir_all(base.join(name)).unwrap();
            if let Some(a) = avail {
                std::fs::write(base.join(name).join("available_clocksource"), a).unwrap();
            }
            if let Some(c) = cur {
                std::fs::write(base.join(name).join("current_clocksource"), c).unwrap();
            }
        }
        let mut c = build(&settings(dir.path()));
        let out = render(c.as_mut()).unwrap();
        // Glob order: clocksource0, clocksource10, clocksource2.
        assert!(
            out.contains(
                "node_time_clocksource_current_info{clocksource=\"x10\",device=\"1\"} 1\n"
            ),
            "{out}"
        );
        assert!(
            out.contains("node_time_clocksource_current_info{clocksource=\"x2\",device=\"2\"} 1\n"),
            "{out}"
        );
        assert!(!out.contains("\"no\""), "{out}");
        assert_eq!(
            out.matches("node_time_clocksource_available_info{").count(),
            3
        );
        // A corrupt file fails the collector, naming it.
        std::fs::write(base.join("clocksource2/current_clocksource"), "a b\n").unwrap();
        let e = render(c.as_mut()).unwrap_err();
        assert_eq!(e.file, base.join("clocksource2/current_clocksource"));
        // No clocksource directory: time and zone only.
        let out = render(build(&settings(Path::new("/nonexistent-usescope"))).as_mut()).unwrap();
        assert!(!out.contains("clocksource"));
        assert!(out.contains("node_time_seconds "));
    }
}
