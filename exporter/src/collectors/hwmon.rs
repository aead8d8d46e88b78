//! /sys/class/hwmon → `node_hwmon_*`: node_exporter's hwmon collector
//! (collector/hwmon_linux.go), names, HELP texts, units and chip naming
//! included.
//!
//! Every `hwmonN` directory (and its `device/`, where older drivers put
//! the attributes) holds files named `TYPE[N][_PROPERTY]` (kernel
//! Documentation/hwmon/sysfs-interface.rst): `temp1_input` in
//! millidegrees, `in0_input` in millivolts, `fan1_input` in RPM,
//! `power1_input` in microwatts, `curr1_input` in milliamperes,
//! `energy1_input` in microjoules, `humidity1_input` in milli-percent,
//! `temp1_label` a name. Each readable numeric attribute of a known type
//! becomes a sample; the family name comes from the type and the property
//! (`node_hwmon_temp_celsius`, `node_hwmon_temp_max_celsius`,
//! `node_hwmon_fan_min_rpm`, ...), labelled `chip` and `sensor`.
//!
//! The chip name is the device the hwmon directory belongs to
//! (`platform_coretemp_0`, `pci0000:00_0000:00:18_3`), else its `name`
//! file, else the directory name; chips that share a name get the `name`
//! file's content or the directory name appended, as in node_exporter.
//!
//! An attribute that cannot be read (absent, EIO, not a regular file) or
//! is not a number is left out, as node_exporter leaves it out. A chip
//! directory that cannot be listed fails the collector, unless the chip
//! went away since class/hwmon was listed (a USB sensor unplugged, a
//! driver unbound): that chip is left out (node_exporter fails).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use regex::Regex;

use crate::collectors::sysfs::{
    DeviceError, Families, ignored, io_error, read_attribute, read_raw, settle,
};
use crate::collectors::{Flag, FlagKind, Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError};
use crate::kernel::go_compat::go_parse_float;
use crate::kernel::source::DirListing;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Encoder, MetricType};

pub const CHIP_INCLUDE: &str = "collector.hwmon.chip-include";
pub const CHIP_EXCLUDE: &str = "collector.hwmon.chip-exclude";
pub const SENSOR_INCLUDE: &str = "collector.hwmon.sensor-include";
pub const SENSOR_EXCLUDE: &str = "collector.hwmon.sensor-exclude";

const fn regex_flag(name: &'static str, help: &'static str) -> Flag {
    Flag {
        name,
        help,
        default: None,
        kind: FlagKind::Regex,
        conflicts_with: None,
    }
}

pub const SPEC: Spec = Spec {
    name: "hwmon",
    default_enabled: true,
    help: "Hardware monitoring chips (temperatures, voltages, fans, power) from /sys/class/hwmon",
    flags: &[
        regex_flag(
            CHIP_INCLUDE,
            "Regexp of hwmon chip to include (mutually exclusive to device-exclude).",
        ),
        regex_flag(
            CHIP_EXCLUDE,
            "Regexp of hwmon chip to exclude (mutually exclusive to device-include).",
        ),
        regex_flag(
            SENSOR_INCLUDE,
            "Regexp of hwmon sensor to include (mutually exclusive to sensor-exclude).",
        ),
        regex_flag(
            SENSOR_EXCLUDE,
            "Regexp of hwmon sensor to exclude (mutually exclusive to sensor-include).",
        ),
    ],
    build,
    sources: &[
        Source::sys("class/hwmon/hwmon0/temp1_input", "hwmon_value"),
        Source::sys("class/hwmon/hwmon1/in0_input", "hwmon_value"),
        Source::sys("class/hwmon/hwmon1/fan1_input", "hwmon_value"),
    ],
    parsers: &[Parser::text("hwmon_value", |t| {
        let mut v = 0.0;
        parse_into(t, &mut v)
    })],
};

/// The sensor types node_exporter exports.
const SENSOR_TYPES: &[&str] = &[
    "vrm",
    "beep_enable",
    "update_interval",
    "in",
    "cpu",
    "fan",
    "pwm",
    "temp",
    "curr",
    "power",
    "energy",
    "humidity",
    "intrusion",
    "freq",
];

/// A numeric attribute as node_exporter reads it: newlines trimmed, then
/// Go's ParseFloat.
pub fn parse_into(text: &str, out: &mut f64) -> Result<(), ParseError> {
    let t = text.trim_matches('\n');
    *out = go_parse_float(t)
        .ok_or_else(|| ParseError::new(1, format!("expected a number, got {t:?}")))?;
    Ok(())
}

/// node_exporter's `cleanMetricName`: lower case, `[^a-z0-9:_]` → `_`,
/// underscores trimmed.
pub fn clean_name(name: &str) -> String {
    let mapped: String = name
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == ':' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    mapped.trim_matches('_').to_string()
}

fn filename_format() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"^(?P<type>[^0-9]+)(?P<id>[0-9]*)?(_(?P<property>.+))?$").expect("valid")
    })
}

/// `temp1_input` → (`temp`, 1, `input`); node_exporter's
/// `explodeSensorFilename`.
pub fn explode(filename: &str) -> Option<(String, u64, String)> {
    let caps = filename_format().captures(filename)?;
    let kind = caps.name("type").map_or("", |m| m.as_str()).to_string();
    let prop = caps.name("property").map_or("", |m| m.as_str()).to_string();
    let num = match caps.name("id").map(|m| m.as_str()) {
        Some(id) if !id.is_empty() => id.parse::<i64>().ok()?.max(0) as u64,
        _ => 0,
    };
    Some((kind, num, prop))
}

/// One sample a sensor's element becomes.
#[derive(Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub help: String,
    pub kind: MetricType,
    pub value: f64,
}

/// What the `element` (property) of a sensor of `sensor_type` becomes, as
/// node_exporter maps it; `has_plain` says whether the sensor also has an
/// attribute without property (which renames `_input`). `None` for the
/// elements node_exporter handles elsewhere (label, freq).
pub fn element_sample(
    sensor_type: &str,
    element: &str,
    value: f64,
    has_plain: bool,
) -> Option<Sample> {
    let mut name = format!("node_hwmon_{sensor_type}");
    if element == "input" {
        if has_plain {
            name.push_str("_input");
        }
    } else if !element.is_empty() {
        name.push('_');
        name.push_str(&clean_name(element));
    }
    let gauge = |name: String, help: String, value: f64| {
        Some(Sample {
            name,
            help,
            kind: MetricType::Gauge,
            value,
        })
    };
    if element == "fault" || element == "alarm" {
        return gauge(
            name,
            format!("Hardware sensor {element} status ({sensor_type})"),
            value,
        );
    }
    if element == "beep" {
        return gauge(
            format!("{name}_enabled"),
            "Hardware monitor sensor has beeping enabled".into(),
            value,
        );
    }
    match sensor_type {
        "in" | "cpu" => gauge(
            format!("{name}_volts"),
            format!("Hardware monitor for voltage ({element})"),
            value * 0.001,
        ),
        "temp" if element != "type" => gauge(
            format!("{name}_celsius"),
            format!(
                "Hardware monitor for temperature ({})",
                if element.is_empty() { "input" } else { element }
            ),
            value * 0.001,
        ),
        "curr" => gauge(
            format!("{name}_amps"),
            format!("Hardware monitor for current ({element})"),
            value * 0.001,
        ),
        "energy" => Some(Sample {
            name: format!("{name}_joule_total"),
            help: format!("Hardware monitor for joules used so far ({element})"),
            kind: MetricType::Counter,
            value: value / 1000000.0,
        }),
        "power" if element == "accuracy" => gauge(
            name,
            "Hardware monitor power meter accuracy, as a ratio".into(),
            value / 1000000.0,
        ),
        "power"
            if matches!(
                element,
                "average_interval" | "average_interval_min" | "average_interval_max"
            ) =>
        {
            gauge(
                format!("{name}_seconds"),
                format!("Hardware monitor power usage update interval ({element})"),
                value * 0.001,
            )
        }
        "power" => gauge(
            format!("{name}_watt"),
            format!("Hardware monitor for power usage in watts ({element})"),
            value / 1000000.0,
        ),
        "humidity" => gauge(
            name,
            format!(
                "Hardware monitor for humidity, as a ratio (multiply with 100.0 to get the humidity as a percentage) ({element})"
            ),
            value / 1000000.0,
        ),
        "fan" if matches!(element, "input" | "min" | "max" | "target") => gauge(
            format!("{name}_rpm"),
            format!("Hardware monitor for fan revolutions per minute ({element})"),
            value,
        ),
        "freq" if element == "input" => None,
        _ => gauge(
            name,
            format!("Hardware monitor {sensor_type} element {element}"),
            value,
        ),
    }
}

/// A sensor's attributes: property → raw text (newlines trimmed).
type Sensors = BTreeMap<String, BTreeMap<String, String>>;

/// node_exporter's `collectSensorData`: every readable attribute of a
/// known sensor type in `dir`.
fn collect_sensor_data(dir: &Path, data: &mut Sensors) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let Ok(entry) = entry else { continue };
        let Ok(filename) = entry.file_name().into_string() else {
            continue;
        };
        let Some((kind, num, prop)) = explode(&filename) else {
            continue;
        };
        if !SENSOR_TYPES.contains(&kind.as_str()) {
            continue;
        }
        let Ok(raw) = read_raw(&entry.path()) else {
            continue;
        };
        let value = String::from_utf8_lossy(&raw).trim_matches('\n').to_string();
        data.entry(format!("{kind}{num}"))
            .or_default()
            .insert(prop, value);
    }
    Ok(())
}

fn read_name_file(dir: &Path) -> Option<String> {
    read_attribute(&dir.join("name")).ok()
}

/// node_exporter's `hwmonName`: the device, else the `name` file, else
/// the directory.
fn chip_base_name(dir: &Path) -> Option<String> {
    if let Ok(dev) = std::fs::canonicalize(dir.join("device")) {
        let name = clean_name(&dev.file_name()?.to_string_lossy());
        let kind = dev
            .parent()
            .and_then(Path::file_name)
            .map(|n| clean_name(&n.to_string_lossy()))
            .unwrap_or_default();
        if !kind.is_empty() && !name.is_empty() {
            return Some(format!("{kind}_{name}"));
        }
        if !name.is_empty() {
            return Some(name);
        }
    }
    if let Some(raw) = read_name_file(dir).filter(|r| !r.is_empty()) {
        let n = clean_name(&raw);
        if !n.is_empty() {
            return Some(n);
        }
    }
    let real = std::fs::canonicalize(dir).ok()?;
    let n = clean_name(&real.file_name()?.to_string_lossy());
    (!n.is_empty()).then_some(n)
}

pub struct HwmonCollector {
    class: PathBuf,
    chip_include: Option<Regex>,
    chip_exclude: Option<Regex>,
    sensor_include: Option<Regex>,
    sensor_exclude: Option<Regex>,
    listing: DirListing,
    families: Families,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(HwmonCollector {
        class: s.sysfs.join("class/hwmon"),
        listing: DirListing::of_devices(),
        chip_include: s.regex(CHIP_INCLUDE).cloned(),
        chip_exclude: s.regex(CHIP_EXCLUDE).cloned(),
        sensor_include: s.regex(SENSOR_INCLUDE).cloned(),
        sensor_exclude: s.regex(SENSOR_EXCLUDE).cloned(),
        families: Families::default(),
    })
}

impl HwmonCollector {
    fn chip(&mut self, dir: &Path, chip: &str) -> Result<(), DeviceError> {
        let mut data = Sensors::new();
        collect_sensor_data(dir, &mut data).map_err(|e| io_error(dir, e))?;
        let device = dir.join("device");
        if std::fs::metadata(&device).is_ok() {
            collect_sensor_data(&device, &mut data).map_err(|e| io_error(&device, e))?;
        }
        let f = &mut self.families;
        if let Some(raw) = read_name_file(dir).filter(|r| !r.is_empty()) {
            let n = clean_name(&raw);
            if !n.is_empty() {
                f.push(
                    "node_hwmon_chip_names",
                    "Annotation metric for human-readable chip names",
                    MetricType::Gauge,
                    &[("chip", chip), ("chip_name", &n)],
                    1.0,
                );
            }
        }
        for (sensor, props) in &data {
            if ignored(
                self.sensor_include.as_ref(),
                self.sensor_exclude.as_ref(),
                &format!("{chip};{sensor}"),
            ) {
                continue;
            }
            let sensor_type = explode(sensor).map(|e| e.0).unwrap_or_default();
            let labels = [("chip", chip), ("sensor", sensor.as_str())];
            if let Some(label) = props.get("label") {
                f.push(
                    "node_hwmon_sensor_label",
                    "Label for given chip and sensor",
                    MetricType::Gauge,
                    &[("chip", chip), ("sensor", sensor), ("label", label)],
                    1.0,
                );
            }
            let plain = props.get("");
            match sensor_type.as_str() {
                "beep_enable" => {
                    let on = plain.is_some_and(|v| v == "1");
                    f.push(
                        "node_hwmon_beep_enabled",
                        "Hardware beep enabled",
                        MetricType::Gauge,
                        &labels,
                        if on { 1.0 } else { 0.0 },
                    );
                    continue;
                }
                "vrm" | "update_interval" => {
                    if let Some(v) = plain.and_then(|v| go_parse_float(v)) {
                        let (name, help, v) = if sensor_type == "vrm" {
                            (
                                "node_hwmon_voltage_regulator_version",
                                "Hardware voltage regulator",
                                v,
                            )
                        } else {
                            (
                                "node_hwmon_update_interval_seconds",
                                "Hardware monitor update interval",
                                v * 0.001,
                            )
                        };
                        f.push(name, help, MetricType::Gauge, &labels, v);
                    }
                    continue;
                }
                _ => {}
            }
            for (element, raw) in props {
                if element == "label" {
                    continue;
                }
                let Some(value) = go_parse_float(raw) else {
                    continue;
                };
                if sensor_type == "freq" && element == "input" {
                    if let Some(label) = props.get("label") {
                        let mut name = "node_hwmon_freq".to_string();
                        if plain.is_some() {
                            name.push_str("_input");
                        }
                        name.push_str("_freq_mhz");
                        f.push(
                            name,
                            "Hardware monitor for GPU frequency in MHz",
                            MetricType::Gauge,
                            &[("chip", chip), ("sensor", &clean_name(label))],
                            value / 1000000.0,
                        );
                    }
                    continue;
                }
                if let Some(s) = element_sample(&sensor_type, element, value, plain.is_some()) {
                    f.push(s.name, s.help, s.kind, &labels, s.value);
                }
            }
        }
        Ok(())
    }
}

impl Collector for HwmonCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.families.clear();
        if !self.listing.read(&self.class)? {
            return Ok(());
        }
        let names = self.listing.entries().iter().map(|e| e.name.clone());
        // (dir, base name, name file)
        let mut chips = Vec::new();
        let mut chip_counts: HashMap<String, usize> = HashMap::new();
        let mut name_counts: HashMap<(String, String), usize> = HashMap::new();
        for n in names {
            let dir = self.class.join(&n);
            if !std::fs::metadata(&dir).is_ok_and(|m| m.is_dir()) {
                continue;
            }
            let Some(base) = chip_base_name(&dir) else {
                continue;
            };
            let name_file = read_name_file(&dir)
                .map(|s| s.trim().to_string())
                .unwrap_or_default();
            *chip_counts.entry(base.clone()).or_default() += 1;
            *name_counts
                .entry((base.clone(), name_file.clone()))
                .or_default() += 1;
            chips.push((dir, n, base, name_file));
        }
        let mut last_err = None;
        for (dir, dir_name, base, name_file) in chips {
            let mut chip = base.clone();
            if chip_counts[&base] > 1 {
                let mut suffix = clean_name(&name_file);
                if suffix.is_empty() || name_counts[&(base.clone(), name_file)] > 1 {
                    suffix = clean_name(&dir_name);
                }
                chip = format!("{base}_{suffix}");
            }
            if ignored(
                self.chip_include.as_ref(),
                self.chip_exclude.as_ref(),
                &chip,
            ) {
                continue;
            }
            let mark = self.families.len();
            let read = self.chip(&dir, &chip);
            if let Err(e) = settle(&mut self.families, mark, &dir, read) {
                last_err = Some(e);
            }
        }
        if let Some(e) = last_err {
            self.families.clear();
            return Err(e);
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
    fn filenames() {
        let e = explode;
        assert_eq!(e("temp1_input"), Some(("temp".into(), 1, "input".into())));
        assert_eq!(e("in0_max"), Some(("in".into(), 0, "max".into())));
        assert_eq!(e("pwm1"), Some(("pwm".into(), 1, "".into())));
        assert_eq!(e("beep_enable"), Some(("beep_enable".into(), 0, "".into())));
        assert_eq!(
            e("power1_average_interval"),
            Some(("power".into(), 1, "average_interval".into()))
        );
        assert_eq!(
            e("temp01_crit_alarm"),
            Some(("temp".into(), 1, "crit_alarm".into()))
        );
        assert_eq!(e("1abc"), None);
    }

    #[test]
    fn names_and_units() {
        let s = |t, e, v, p| element_sample(t, e, v, p).unwrap();
        let t = s("temp", "input", 42000.0, false);
        assert_eq!(t.name, "node_hwmon_temp_celsius");
        assert_eq!(t.help, "Hardware monitor for temperature (input)");
        assert_eq!(t.value, 42.0);
        assert_eq!(
            s("temp", "input", 1.0, true).name,
            "node_hwmon_temp_input_celsius"
        );
        assert_eq!(
            s("temp", "", 1.0, true).help,
            "Hardware monitor for temperature (input)"
        );
        assert_eq!(
            s("temp", "crit_alarm", 1.0, false).name,
            "node_hwmon_temp_crit_alarm_celsius"
        );
        assert_eq!(s("temp", "type", 4.0, false).name, "node_hwmon_temp_type");
        assert_eq!(s("in", "input", 1144.0, false).value, 1144.0 * 0.001);
        assert_eq!(
            s("fan", "target", 2000.0, false).name,
            "node_hwmon_fan_target_rpm"
        );
        assert_eq!(s("fan", "pulses", 2.0, false).name, "node_hwmon_fan_pulses");
        assert_eq!(
            s("fan", "alarm", 0.0, false).help,
            "Hardware sensor alarm status (fan)"
        );
        let e = s("energy", "input", 2_000_000.0, false);
        assert_eq!(
            (e.name.as_str(), e.kind, e.value),
            ("node_hwmon_energy_joule_total", MetricType::Counter, 2.0)
        );
        assert_eq!(
            s("power", "average_interval", 1000.0, false).name,
            "node_hwmon_power_average_interval_seconds"
        );
        assert_eq!(s("power", "accuracy", 500000.0, false).value, 0.5);
        assert_eq!(
            s("curr", "input", 2500.0, false).name,
            "node_hwmon_curr_amps"
        );
        assert_eq!(
            s("pwm", "enable", 2.0, false).help,
            "Hardware monitor pwm element enable"
        );
        assert_eq!(clean_name("Package id 0\n"), "package_id_0");
        assert_eq!(clean_name("coretemp.0"), "coretemp_0");
    }

    #[test]
    fn values() {
        let mut v = 0.0;
        parse_into("42000\n", &mut v).unwrap();
        assert_eq!(v, 42000.0);
        assert!(parse_into("x\n", &mut v).is_err());
        assert!(parse_into(" 1\n", &mut v).is_err());
    }

    #[test]
    fn collector_on_fixture() {
        let s = Settings::with_roots("/nonexistent", fixture("sys"));
        let out = render(build(&s).as_mut()).unwrap();
        let has = |l: &str| assert!(out.contains(l), "missing {l:?} in\n{out}");
        has("node_hwmon_chip_names{chip=\"platform_coretemp_0\",chip_name=\"coretemp\"} 1\n");
        has("node_hwmon_temp_celsius{chip=\"platform_coretemp_0\",sensor=\"temp1\"} 55\n");
        has(
            "node_hwmon_sensor_label{chip=\"platform_coretemp_0\",label=\"Package id 0\",sensor=\"temp1\"} 1\n",
        );
        // A chip with a name file only, and one with nothing but its directory.
        has("node_hwmon_in_volts{chip=\"nct6779\",sensor=\"in0\"} 1.1440000000000001\n");
        has("node_hwmon_temp_celsius{chip=\"hwmon2\",sensor=\"temp1\"} 40\n");
        // Two chips of one device, told apart by their directories.
        has("node_hwmon_temp_celsius{chip=\"nvme_nvme0_hwmon4\",sensor=\"temp1\"} 38.85\n");
        has("node_hwmon_temp_celsius{chip=\"nvme_nvme0_hwmon5\",sensor=\"temp1\"} 41.85\n");
        // Attributes under device/ (older drivers).
        has("node_hwmon_temp_celsius{chip=\"i2c_0_0_0048\",sensor=\"temp1\"} 26.5\n");
        // An unreadable attribute and a missing one are left out.
        assert!(!out.contains("sensor=\"temp3\""), "{out}");
        has("node_hwmon_fan_min_rpm{chip=\"nct6779\",sensor=\"fan3\"} 300\n");
        assert!(
            !out.contains("node_hwmon_fan_rpm{chip=\"nct6779\",sensor=\"fan3\"}"),
            "{out}"
        );
        let again = render(build(&s).as_mut()).unwrap();
        assert_eq!(out, again);
    }

    #[test]
    fn filters() {
        let mut s = Settings::with_roots("/nonexistent", fixture("sys"));
        s.set(
            CHIP_INCLUDE,
            Some(FlagValue::Regex(Regex::new("^nct").unwrap())),
        );
        s.set(
            SENSOR_EXCLUDE,
            Some(FlagValue::Regex(Regex::new(";fan").unwrap())),
        );
        let out = render(build(&s).as_mut()).unwrap();
        assert!(out.contains("chip=\"nct6779\""));
        assert!(!out.contains("coretemp"));
        assert!(!out.contains("sensor=\"fan1\""));
        let absent = Settings::with_roots("/nonexistent", "/nonexistent-usescope");
        assert_eq!(render(build(&absent).as_mut()).unwrap(), "");
    }

    /// A chip unbound after class/hwmon was listed: listing its directory
    /// fails with ENOENT, and the chip is left out, with nothing pushed. A
    /// chip entry that is there but is not a directory still fails.
    #[test]
    fn a_chip_that_went_away_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let class = dir.path().join("class/hwmon");
        gone_device(&class, "hwmon9");
        std::fs::write(class.join("hwmon8"), "").unwrap();
        let s = Settings::with_roots("/nonexistent", dir.path());
        let mut c = HwmonCollector {
            class: class.clone(),
            chip_include: None,
            chip_exclude: None,
            sensor_include: None,
            sensor_exclude: None,
            listing: DirListing::of_devices(),
            families: Families::default(),
        };
        let gone = class.join("hwmon9");
        let read = c.chip(&gone, "hwmon9");
        assert!(matches!(read, Err(DeviceError::Vanishing(..))), "{read:?}");
        settle(&mut c.families, 0, &gone, read).unwrap();
        assert!(c.families.is_empty());
        let file = class.join("hwmon8");
        let read = c.chip(&file, "hwmon8");
        assert!(settle(&mut c.families, 0, &file, read).is_err());
        // The collector skips both (neither is a directory when listed).
        assert_eq!(render(build(&s).as_mut()).unwrap(), "");
    }
}
