//! /sys/class/thermal → `node_thermal_zone_temp`, `node_cooling_device_cur_state`
//! and `node_cooling_device_max_state`: node_exporter's thermal_zone
//! collector (collector/thermal_zone_linux.go, procfs sysfs/class_thermal.go
//! and class_cooling_device.go).
//!
//! Each `thermal_zoneN` has `type` (text) and `temp` (millidegrees
//! Celsius, a signed integer); each `cooling_deviceN` has `type`,
//! `cur_state` and `max_state` (integers). A zone whose `temp` cannot be
//! read (some drivers answer EIO or EAGAIN) is left out; node_exporter
//! exports 0 °C for it. A cooling device with an unreadable attribute is
//! left out, as node_exporter leaves it out. A value that is not an
//! integer fails the collector, naming the file.

use std::path::{Path, PathBuf};

use crate::collectors::sysfs::{Families, read_trimmed};
use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError};
use crate::kernel::parse::{i64_field, parse_fresh, single_field};
use crate::kernel::source::DirListing;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Encoder, MetricType};

pub const SPEC: Spec = Spec {
    name: "thermal_zone",
    default_enabled: true,
    help: "Thermal zone temperatures and cooling device states from /sys/class/thermal",
    flags: &[],
    build,
    sources: &[
        Source::sys("class/thermal/thermal_zone0/temp", "thermal_int"),
        Source::sys("class/thermal/cooling_device0/cur_state", "thermal_int"),
        Source::sys("class/thermal/cooling_device0/max_state", "thermal_int"),
    ],
    parsers: &[Parser::numeric("thermal_int", |t| {
        parse_fresh(t, parse_into).map(drop)
    })],
};

const TEMP: &str = "node_thermal_zone_temp";
const TEMP_HELP: &str = "Zone temperature in Celsius";
const CUR: &str = "node_cooling_device_cur_state";
const CUR_HELP: &str = "Current throttle state of the cooling device";
const MAX: &str = "node_cooling_device_max_state";
const MAX_HELP: &str = "Maximum throttle state of the cooling device";

/// One signed integer, surrounding whitespace allowed (procfs trims it).
pub fn parse_into(text: &str, out: &mut i64) -> Result<(), ParseError> {
    let tok = single_field(text).ok_or_else(|| ParseError::new(1, "expected one integer"))?;
    *out = i64_field(tok, 1, "value")?;
    Ok(())
}

pub struct ThermalZoneCollector {
    class: PathBuf,
    listing: DirListing,
    families: Families,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(ThermalZoneCollector {
        class: s.sysfs.join("class/thermal"),
        listing: DirListing::of_devices(),
        families: Families::default(),
    })
}

/// Reads an integer attribute: `Ok(None)` if it cannot be read, an error
/// naming the file if it is not an integer.
fn int_attr(path: &Path) -> Result<Option<i64>, CollectError> {
    let Ok(text) = read_trimmed(path) else {
        return Ok(None);
    };
    let mut v = 0;
    parse_into(&text, &mut v).map_err(|e| CollectError::from_parse(path, e))?;
    Ok(Some(v))
}

impl Collector for ThermalZoneCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.families.clear();
        if !self.listing.read(&self.class)? {
            return Ok(());
        }
        for (entry, zone) in self.listing.numbered("thermal_zone") {
            let dir = self.class.join(&entry.name);
            let kind = read_trimmed(&dir.join("type")).unwrap_or_default();
            if let Some(t) = int_attr(&dir.join("temp"))? {
                self.families.push(
                    TEMP,
                    TEMP_HELP,
                    MetricType::Gauge,
                    &[("zone", zone), ("type", &kind)],
                    t as f64 / 1000.0,
                );
            }
        }
        for (entry, name) in self.listing.numbered("cooling_device") {
            let dir = self.class.join(&entry.name);
            let Ok(kind) = read_trimmed(&dir.join("type")) else {
                continue;
            };
            let (Some(max), Some(cur)) = (
                int_attr(&dir.join("max_state"))?,
                int_attr(&dir.join("cur_state"))?,
            ) else {
                continue;
            };
            let labels = [("name", name), ("type", kind.as_str())];
            self.families
                .push(CUR, CUR_HELP, MetricType::Gauge, &labels, cur as f64);
            self.families
                .push(MAX, MAX_HELP, MetricType::Gauge, &labels, max as f64);
        }
        self.families.write(enc);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::{fixture, render};

    #[test]
    fn integers() {
        assert_eq!(parse_fresh("42000\n", parse_into).unwrap(), 42000);
        assert_eq!(parse_fresh(" -5000 \n", parse_into).unwrap(), -5000);
        assert!(parse_fresh("", parse_into).is_err());
        assert!(parse_fresh("1 2\n", parse_into).is_err());
        assert!(parse_fresh("4.2\n", parse_into).is_err());
        assert!(parse_fresh("99999999999999999999\n", parse_into).is_err());
    }

    #[test]
    fn collector_on_fixture() {
        let s = Settings::with_roots("/nonexistent", fixture("sys"));
        let out = render(build(&s).as_mut()).unwrap();
        assert_eq!(
            out,
            "# HELP node_cooling_device_cur_state Current throttle state of the cooling device\n\
             # TYPE node_cooling_device_cur_state gauge\n\
             node_cooling_device_cur_state{name=\"0\",type=\"Processor\"} 0\n\
             node_cooling_device_cur_state{name=\"1\",type=\"intel_powerclamp\"} 5\n\
             # HELP node_cooling_device_max_state Maximum throttle state of the cooling device\n\
             # TYPE node_cooling_device_max_state gauge\n\
             node_cooling_device_max_state{name=\"0\",type=\"Processor\"} 3\n\
             node_cooling_device_max_state{name=\"1\",type=\"intel_powerclamp\"} 50\n\
             # HELP node_thermal_zone_temp Zone temperature in Celsius\n\
             # TYPE node_thermal_zone_temp gauge\n\
             node_thermal_zone_temp{type=\"acpitz\",zone=\"1\"} -4.5\n\
             node_thermal_zone_temp{type=\"bcm2835_thermal\",zone=\"0\"} 49.925\n"
        );
        let absent = Settings::with_roots("/nonexistent", "/nonexistent-usescope");
        assert_eq!(render(build(&absent).as_mut()).unwrap(), "");
    }

    #[test]
    fn bad_values_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let z = dir.path().join("class/thermal/thermal_zone3");
        std::fs::create_dir_all(&z).unwrap();
        std::fs::write(z.join("type"), "x\n").unwrap();
        std::fs::write(z.join("temp"), "hot\n").unwrap();
        let s = Settings::with_roots("/nonexistent", dir.path());
        let e = render(build(&s).as_mut()).unwrap_err();
        assert!(e.file.ends_with("thermal_zone3/temp"), "{e}");
        // Unreadable (here: absent) temperature: the zone is left out.
        std::fs::remove_file(z.join("temp")).unwrap();
        assert_eq!(render(build(&s).as_mut()).unwrap(), "");
    }
}
