//! /sys/class/power_supply → `node_power_supply_*` and
//! `node_power_supply_info{…}`: node_exporter's powersupplyclass collector
//! (collector/powersupplyclass{,_linux}.go, procfs
//! sysfs/class_power_supply.go), with its
//! `--collector.powersupply.ignored-supplies` flag.
//!
//! Each supply (`AC`, `BAT0`, `ucsi-source-psy-USBC000:001`, ...) is a
//! directory of attribute files (kernel
//! Documentation/ABI/testing/sysfs-class-power). As procfs does, every
//! regular file in it is read (one read of at most 128 bytes, trimmed); a
//! file that is absent or answers ENODEV, EOPNOTSUPP or EINVAL is left
//! out, any other read error fails the collector. A supply whose directory
//! is gone when it is read (unplugged since class/power_supply was listed)
//! is left out, where node_exporter fails the collector. The files procfs knows
//! as integers are parsed as Go's `ParseInt(s, 0, 64)` reads them
//! (decimal, `0x`, `0o`, `0b`, a leading `0` for octal, `_` between
//! digits); one that does not parse fails the collector, naming the file.
//! Integers are exported as they are (`capacity`, `online`, ...), in
//! µA/µV/µWh/µAh/µW divided by 1e6 (`current_ampere`, `voltage_volt`,
//! `energy_watthour`, ...), or in tenths of °C divided by 10
//! (`temp_celsius`, ...); the text files become the labels of
//! `node_power_supply_info` (the empty ones left out, invalid UTF-8
//! replaced as Go's `strings.ToValidUTF8` does).
//!
//! Supplies whose name matches `--collector.powersupply.ignored-supplies`
//! (default `^$`, unanchored as Go's `MatchString`) are read, as procfs
//! reads them, but not exported.
//!
//! Differences from node_exporter: no `class/power_supply` directory means
//! no series and success (node_exporter: "no data", success 0), usescope's
//! rule for a missing source.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use regex::Regex;

use crate::collectors::sysfs::{DeviceError, Families, io_error, read_raw};
use crate::collectors::{Flag, FlagKind, Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError, excerpt};
use crate::kernel::parse::parse_fresh;
use crate::kernel::source::DirListing;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Encoder, MetricType};

pub const IGNORED: &str = "collector.powersupply.ignored-supplies";

pub const SPEC: Spec = Spec {
    name: "powersupplyclass",
    default_enabled: true,
    help: "Power supplies (AC adapters, batteries, USB) from /sys/class/power_supply",
    flags: &[Flag {
        name: IGNORED,
        help: "Regexp of power supplies to ignore for powersupplyclass collector.",
        default: Some("^$"),
        kind: FlagKind::Regex,
        conflicts_with: None,
    }],
    build,
    sources: &[
        Source::sys("class/power_supply/AC/online", "power_supply_int"),
        Source::sys("class/power_supply/BAT0/capacity", "power_supply_int"),
        Source::sys("class/power_supply/BAT0/energy_now", "power_supply_int"),
        Source::sys("class/power_supply/BAT0/voltage_now", "power_supply_int"),
        Source::sys("class/power_supply/BAT0/power_now", "power_supply_int"),
    ],
    parsers: &[Parser::numeric("power_supply_int", |t| {
        parse_fresh(t, parse_into).map(drop)
    })],
};

#[derive(Clone, Copy)]
enum Scale {
    /// As it is.
    One,
    /// Micro-units → units.
    Micro,
    /// Tenths of a degree → degrees.
    Deci,
}

/// The integer files node_exporter exports: file, metric name after
/// `node_power_supply_`, scale.
const NUMERIC: &[(&str, &str, Scale)] = &[
    ("authentic", "authentic", Scale::One),
    ("calibrate", "calibrate", Scale::One),
    ("capacity", "capacity", Scale::One),
    ("capacity_alert_max", "capacity_alert_max", Scale::One),
    ("capacity_alert_min", "capacity_alert_min", Scale::One),
    ("cycle_count", "cyclecount", Scale::One),
    ("online", "online", Scale::One),
    ("present", "present", Scale::One),
    ("time_to_empty_now", "time_to_empty_seconds", Scale::One),
    ("time_to_full_now", "time_to_full_seconds", Scale::One),
    ("current_boot", "current_boot", Scale::Micro),
    ("current_max", "current_max", Scale::Micro),
    ("current_now", "current_ampere", Scale::Micro),
    ("energy_empty", "energy_empty", Scale::Micro),
    ("energy_empty_design", "energy_empty_design", Scale::Micro),
    ("energy_full", "energy_full", Scale::Micro),
    ("energy_full_design", "energy_full_design", Scale::Micro),
    ("energy_now", "energy_watthour", Scale::Micro),
    ("voltage_boot", "voltage_boot", Scale::Micro),
    ("voltage_max", "voltage_max", Scale::Micro),
    ("voltage_max_design", "voltage_max_design", Scale::Micro),
    ("voltage_min", "voltage_min", Scale::Micro),
    ("voltage_min_design", "voltage_min_design", Scale::Micro),
    ("voltage_now", "voltage_volt", Scale::Micro),
    ("voltage_ocv", "voltage_ocv", Scale::Micro),
    ("charge_control_limit", "charge_control_limit", Scale::Micro),
    (
        "charge_control_limit_max",
        "charge_control_limit_max",
        Scale::Micro,
    ),
    ("charge_counter", "charge_counter", Scale::Micro),
    ("charge_empty", "charge_empty", Scale::Micro),
    ("charge_empty_design", "charge_empty_design", Scale::Micro),
    ("charge_full", "charge_full", Scale::Micro),
    ("charge_full_design", "charge_full_design", Scale::Micro),
    ("charge_now", "charge_ampere", Scale::Micro),
    ("charge_term_current", "charge_term_current", Scale::Micro),
    (
        "constant_charge_current",
        "constant_charge_current",
        Scale::Micro,
    ),
    (
        "constant_charge_current_max",
        "constant_charge_current_max",
        Scale::Micro,
    ),
    (
        "constant_charge_voltage",
        "constant_charge_voltage",
        Scale::Micro,
    ),
    (
        "constant_charge_voltage_max",
        "constant_charge_voltage_max",
        Scale::Micro,
    ),
    ("precharge_current", "precharge_current", Scale::Micro),
    ("input_current_limit", "input_current_limit", Scale::Micro),
    ("power_now", "power_watt", Scale::Micro),
    ("temp", "temp_celsius", Scale::Deci),
    ("temp_alert_max", "temp_alert_max_celsius", Scale::Deci),
    ("temp_alert_min", "temp_alert_min_celsius", Scale::Deci),
    ("temp_ambient", "temp_ambient_celsius", Scale::Deci),
    ("temp_ambient_max", "temp_ambient_max_celsius", Scale::Deci),
    ("temp_ambient_min", "temp_ambient_min_celsius", Scale::Deci),
    ("temp_max", "temp_max_celsius", Scale::Deci),
    ("temp_min", "temp_min_celsius", Scale::Deci),
];

/// Integer files procfs parses (so a bad value fails) but node_exporter
/// does not export.
const PARSED_ONLY: &[&str] = &[
    "charge_avg",
    "current_avg",
    "energy_avg",
    "power_avg",
    "time_to_empty_avg",
    "time_to_full_avg",
    "voltage_avg",
];

/// Text files → labels of `node_power_supply_info` (besides
/// `power_supply`, the supply's name).
const TEXT: &[&str] = &[
    "capacity_level",
    "charge_type",
    "health",
    "manufacturer",
    "model_name",
    "serial_number",
    "status",
    "technology",
    "type",
    "usb_type",
    "scope",
];

const INFO: &str = "node_power_supply_info";
const INFO_HELP: &str = "info of /sys/class/power_supply/<power_supply>.";

/// Go's `strconv.ParseInt(s, 0, 64)`: an optional sign, then decimal,
/// `0x`/`0o`/`0b` with their digits, or a leading `0` for octal;
/// underscores only between digits (or after the prefix).
pub fn go_parse_int(s: &str) -> Option<i64> {
    let (neg, body) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let b = body.as_bytes();
    if b.is_empty() {
        return None;
    }
    let (radix, digits) = match b {
        [b'0', p, _, ..] if p.eq_ignore_ascii_case(&b'x') => (16, &b[2..]),
        [b'0', p, _, ..] if p.eq_ignore_ascii_case(&b'o') => (8, &b[2..]),
        [b'0', p, _, ..] if p.eq_ignore_ascii_case(&b'b') => (2, &b[2..]),
        [b'0', ..] => (8, &b[1..]),
        _ => (10, b),
    };
    let mut n: u64 = 0;
    let mut underscores = false;
    for &c in digits {
        if c == b'_' {
            underscores = true;
            continue;
        }
        let d = (c as char).to_digit(radix)?;
        n = n.checked_mul(u64::from(radix))?.checked_add(u64::from(d))?;
    }
    if underscores && !underscore_ok(body) {
        return None;
    }
    if neg {
        if n > 1 << 63 {
            return None;
        }
        Some((n as i64).wrapping_neg())
    } else {
        i64::try_from(n).ok()
    }
}

/// Go's `underscoreOK` (sign already removed): each `_` follows a digit
/// or the base prefix and is followed by a digit.
fn underscore_ok(s: &str) -> bool {
    let b = s.as_bytes();
    let mut saw = b'^';
    let mut i = 0;
    let mut hex = false;
    if b.len() >= 2 && b[0] == b'0' && matches!(b[1].to_ascii_lowercase(), b'b' | b'o' | b'x') {
        i = 2;
        saw = b'0';
        hex = b[1].eq_ignore_ascii_case(&b'x');
    }
    while i < b.len() {
        let c = b[i];
        i += 1;
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = b'0';
            continue;
        }
        if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
            continue;
        }
        if saw == b'_' {
            return false;
        }
        saw = b'!';
    }
    saw != b'_'
}

/// One integer attribute as procfs reads it: whitespace trimmed, then
/// `ParseInt(s, 0, 64)`.
pub fn parse_into(text: &str, out: &mut i64) -> Result<(), ParseError> {
    let t = text.trim();
    *out = go_parse_int(t)
        .ok_or_else(|| ParseError::new(1, format!("value: not an integer: {}", excerpt(t))))?;
    Ok(())
}

/// Go's `strings.ToValidUTF8(s, "\u{FFFD}")`: each run of invalid bytes
/// becomes one replacement character.
fn to_valid_utf8(raw: &[u8]) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut in_invalid = false;
    for chunk in raw.utf8_chunks() {
        if !chunk.valid().is_empty() {
            out.push_str(chunk.valid());
            in_invalid = false;
        }
        if !chunk.invalid().is_empty() {
            if !in_invalid {
                out.push('\u{FFFD}');
            }
            in_invalid = true;
        }
    }
    out
}

/// procfs' `SysReadFile` trimming (`bytes.TrimSpace`) on raw bytes.
fn trim_bytes(raw: &[u8]) -> &[u8] {
    raw.trim_ascii()
}

pub struct PowerSupplyCollector {
    class: PathBuf,
    ignored: Option<Regex>,
    listing: DirListing,
    families: Families,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(PowerSupplyCollector {
        class: s.sysfs.join("class/power_supply"),
        ignored: s.regex(IGNORED).cloned(),
        listing: DirListing::of_devices(),
        families: Families::default(),
    })
}

/// One supply's values, as procfs gathers them.
#[derive(Default)]
struct Supply {
    numbers: Vec<(&'static str, Scale, i64)>,
    texts: Vec<(&'static str, String)>,
}

fn read_supply(dir: &Path, out: &mut Supply) -> Result<(), DeviceError> {
    out.numbers.clear();
    out.texts.clear();
    let entries = std::fs::read_dir(dir).map_err(|e| io_error(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io_error(dir, e))?;
        if !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = entry.path();
        let raw = match read_raw(&path) {
            Ok(raw) => raw,
            Err(e)
                if e.kind() == ErrorKind::NotFound
                    || e.kind() == ErrorKind::InvalidInput
                    || matches!(
                        e.raw_os_error(),
                        Some(libc::ENODEV | libc::EOPNOTSUPP | libc::EINVAL)
                    ) =>
            {
                continue;
            }
            Err(e) => return Err(io_error(&path, e)),
        };
        if let Some(&(_, metric, scale)) = NUMERIC.iter().find(|(f, _, _)| *f == name) {
            let mut v = 0;
            parse_into(&String::from_utf8_lossy(&raw), &mut v)
                .map_err(|e| CollectError::from_parse(&path, e))?;
            out.numbers.push((metric, scale, v));
        } else if PARSED_ONLY.contains(&name) {
            let mut v = 0;
            parse_into(&String::from_utf8_lossy(&raw), &mut v)
                .map_err(|e| CollectError::from_parse(&path, e))?;
        } else if let Some(&label) = TEXT.iter().find(|f| **f == name) {
            out.texts.push((label, to_valid_utf8(trim_bytes(&raw))));
        }
    }
    Ok(())
}

impl Collector for PowerSupplyCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.families.clear();
        if !self.listing.read(&self.class)? {
            return Ok(());
        }
        let mut supply = Supply::default();
        let mut help = String::new();
        for entry in self.listing.entries() {
            let name = &entry.name;
            let dir = self.class.join(name);
            if let Err(e) = read_supply(&dir, &mut supply) {
                // Unplugged since class/power_supply was listed: left out.
                e.settle(&dir)?;
                continue;
            }
            if self.ignored.as_ref().is_some_and(|r| r.is_match(name)) {
                continue;
            }
            let labels = [("power_supply", name.as_str())];
            for &(metric, scale, v) in &supply.numbers {
                let value = match scale {
                    Scale::One => v as f64,
                    Scale::Micro => v as f64 / 1e6,
                    Scale::Deci => v as f64 / 10.0,
                };
                help.clear();
                help.push_str(metric);
                help.push_str(" value of /sys/class/power_supply/<power_supply>.");
                self.families.push(
                    format!("node_power_supply_{metric}"),
                    help.as_str(),
                    MetricType::Gauge,
                    &labels,
                    value,
                );
            }
            let mut info: Vec<(&'static str, &str)> = vec![("power_supply", name.as_str())];
            info.extend(
                supply
                    .texts
                    .iter()
                    .filter(|(_, v)| !v.is_empty())
                    .map(|(k, v)| (*k, v.as_str())),
            );
            self.families
                .push(INFO, INFO_HELP, MetricType::Gauge, &info, 1.0);
        }
        self.families.write(enc);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::FlagValue;
    use crate::collectors::sysfs::gone_device;
    use crate::collectors::test_support::{fixture, render};

    #[test]
    fn go_parse_int_matches_go() {
        for (s, v) in [
            ("0", 0),
            ("98", 98),
            ("-1", -1),
            ("+5", 5),
            ("0x1f", 31),
            ("0X1F", 31),
            ("017", 15),
            ("0o17", 15),
            ("0b101", 5),
            ("1_000", 1000),
            ("0x_1", 1),
            ("-9223372036854775808", i64::MIN),
            ("9223372036854775807", i64::MAX),
        ] {
            assert_eq!(go_parse_int(s), Some(v), "{s}");
        }
        for s in [
            "",
            "-",
            "0x",
            "08",
            "1__0",
            "_1",
            "1_",
            "1.5",
            " 1",
            "x",
            "9223372036854775808",
            "-9223372036854775809",
            "18446744073709551616",
            "0b2",
        ] {
            assert_eq!(go_parse_int(s), None, "{s:?}");
        }
        assert_eq!(parse_fresh(" 42\n", parse_into).unwrap(), 42);
        let e = parse_fresh("4 2\n", parse_into).unwrap_err();
        assert_eq!(e.line, 1);
    }

    #[test]
    fn invalid_utf8_runs_become_one_replacement() {
        assert_eq!(to_valid_utf8(b"a\xff\xfeb\xc3"), "a\u{FFFD}b\u{FFFD}");
        assert_eq!(to_valid_utf8("ok é".as_bytes()), "ok é");
    }

    const EXPECTED: &str = "\
# HELP node_power_supply_capacity capacity value of /sys/class/power_supply/<power_supply>.
# TYPE node_power_supply_capacity gauge
node_power_supply_capacity{power_supply=\"BAT0\"} 98
# HELP node_power_supply_cyclecount cyclecount value of /sys/class/power_supply/<power_supply>.
# TYPE node_power_supply_cyclecount gauge
node_power_supply_cyclecount{power_supply=\"BAT0\"} 0
# HELP node_power_supply_energy_full energy_full value of /sys/class/power_supply/<power_supply>.
# TYPE node_power_supply_energy_full gauge
node_power_supply_energy_full{power_supply=\"BAT0\"} 50.06
# HELP node_power_supply_energy_full_design energy_full_design value of /sys/class/power_supply/<power_supply>.
# TYPE node_power_supply_energy_full_design gauge
node_power_supply_energy_full_design{power_supply=\"BAT0\"} 47.52
# HELP node_power_supply_energy_watthour energy_watthour value of /sys/class/power_supply/<power_supply>.
# TYPE node_power_supply_energy_watthour gauge
node_power_supply_energy_watthour{power_supply=\"BAT0\"} 49.45
# HELP node_power_supply_info info of /sys/class/power_supply/<power_supply>.
# TYPE node_power_supply_info gauge
node_power_supply_info{power_supply=\"AC\",type=\"Mains\"} 1
node_power_supply_info{capacity_level=\"Normal\",manufacturer=\"LGC\",model_name=\"LNV-45N1\",power_supply=\"BAT0\",serial_number=\"38109\",status=\"Discharging\",technology=\"Li-ion\",type=\"Battery\"} 1
# HELP node_power_supply_online online value of /sys/class/power_supply/<power_supply>.
# TYPE node_power_supply_online gauge
node_power_supply_online{power_supply=\"AC\"} 1
# HELP node_power_supply_power_watt power_watt value of /sys/class/power_supply/<power_supply>.
# TYPE node_power_supply_power_watt gauge
node_power_supply_power_watt{power_supply=\"BAT0\"} 4.83
# HELP node_power_supply_present present value of /sys/class/power_supply/<power_supply>.
# TYPE node_power_supply_present gauge
node_power_supply_present{power_supply=\"BAT0\"} 1
# HELP node_power_supply_voltage_min_design voltage_min_design value of /sys/class/power_supply/<power_supply>.
# TYPE node_power_supply_voltage_min_design gauge
node_power_supply_voltage_min_design{power_supply=\"BAT0\"} 10.8
# HELP node_power_supply_voltage_volt voltage_volt value of /sys/class/power_supply/<power_supply>.
# TYPE node_power_supply_voltage_volt gauge
node_power_supply_voltage_volt{power_supply=\"BAT0\"} 12.229
";

    #[test]
    fn collector_on_fixture() {
        let s = Settings::with_roots("/nonexistent", fixture("sys"));
        assert_eq!(render(build(&s).as_mut()).unwrap(), EXPECTED);
        let absent = Settings::with_roots("/nonexistent", "/nonexistent-usescope");
        assert_eq!(render(build(&absent).as_mut()).unwrap(), "");
    }

    #[test]
    fn ignored_supplies_and_errors() {
        let mut s = Settings::with_roots("/nonexistent", fixture("sys"));
        s.set(
            IGNORED,
            Some(FlagValue::parse(FlagKind::Regex, "BAT").unwrap()),
        );
        let out = render(build(&s).as_mut()).unwrap();
        assert!(!out.contains("BAT0"), "{out}");
        assert!(
            out.contains("node_power_supply_online{power_supply=\"AC\"} 1\n"),
            "{out}"
        );

        let dir = tempfile::tempdir().unwrap();
        let bat = dir.path().join("class/power_supply/BAT1");
        std::fs::create_dir_all(&bat).unwrap();
        std::fs::write(bat.join("temp"), "255\n").unwrap();
        std::fs::write(bat.join("status"), "Charging\n").unwrap();
        std::fs::write(bat.join("health"), "\n").unwrap();
        let mut s = Settings::with_roots("/nonexistent", dir.path());
        let out = render(build(&s).as_mut()).unwrap();
        assert!(
            out.contains("node_power_supply_temp_celsius{power_supply=\"BAT1\"} 25.5\n"),
            "{out}"
        );
        assert!(
            out.contains("node_power_supply_info{power_supply=\"BAT1\",status=\"Charging\"} 1\n"),
            "{out}"
        );
        // A bad integer fails the collector, naming the file, even in an
        // ignored supply (procfs reads it before the filter).
        std::fs::write(bat.join("voltage_avg"), "high\n").unwrap();
        s.set(
            IGNORED,
            Some(FlagValue::parse(FlagKind::Regex, "BAT1").unwrap()),
        );
        let e = render(build(&s).as_mut()).unwrap_err();
        assert!(e.file.ends_with("BAT1/voltage_avg"), "{e}");
    }

    /// A supply unplugged after class/power_supply was listed (its entry
    /// names a directory that is gone) is left out; one whose entry cannot
    /// be listed while it is there still fails the collector.
    #[test]
    fn a_supply_that_went_away_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let class = dir.path().join("class/power_supply");
        std::fs::create_dir_all(class.join("AC")).unwrap();
        std::fs::write(class.join("AC/online"), "1\n").unwrap();
        gone_device(&class, "BAT9");
        let s = Settings::with_roots("/nonexistent", dir.path());
        let out = render(build(&s).as_mut()).unwrap();
        assert!(
            out.contains("node_power_supply_online{power_supply=\"AC\"} 1\n"),
            "{out}"
        );
        assert!(!out.contains("BAT9"), "{out}");
        std::fs::remove_file(class.join("BAT9")).unwrap();
        std::fs::write(class.join("BAT9"), "").unwrap();
        let e = render(build(&s).as_mut()).unwrap_err();
        assert!(e.file.ends_with("power_supply/BAT9"), "{e}");
    }
}
