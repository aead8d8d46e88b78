//! /sys/class/powercap → `node_rapl_<zone>_joules_total`: node_exporter's
//! rapl collector (collector/rapl_linux.go, procfs sysfs/class_powercap.go).
//!
//! Every directory of class/powercap with a `name` file is a RAPL zone
//! (kernel Documentation/power/powercap/powercap.rst): `intel-rapl:0`
//! (`package-0`), its subzones `intel-rapl:0:0` (`core`), `dram`, `psys`,
//! and the MMIO interface's `intel-rapl-mmio:0`. Its `energy_uj` is a
//! counter of microjoules, exported in joules.
//!
//! Zone labels are procfs' (`getIndexAndName`): a name ending in `-N`
//! (`package-1`) gives the index N and the name before the dash; a name
//! without one (`dram`) is indexed by how often that name has been seen.
//! `path` is the zone's directory under `--path.sysfs`. By default each
//! zone name is its own family, `node_rapl_package_joules_total{index,path}`;
//! with `--collector.rapl.enable-zone-label` all are one family,
//! `node_rapl_joules_total{index,path,rapl_zone}`.
//!
//! `energy_uj` is readable by root only on current kernels (a side channel,
//! CVE-2020-8694). When it cannot be read for lack of permission the
//! collector writes nothing, as node_exporter does. `max_energy_range_uj`
//! must be an unsigned integer (procfs fails without it), unless its zone
//! went away since the listing (ENODEV, or its directory gone): that zone
//! is left out. Without powercap
//! a scrape looks the class up only after a uevent or a mount (absence.rs).

use std::io;
use std::path::{Path, PathBuf};

use crate::collectors::sysfs::{
    DeviceError, Families, io_error, read_attribute, sanitize_metric_name,
};
use crate::collectors::{Flag, FlagKind, Parser, Settings, Source, Spec};
use crate::kernel::absence;
use crate::kernel::error::{CollectError, ParseError};
use crate::kernel::parse::{parse_fresh, u64_sysctl_into};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Encoder, MetricType};

pub const ZONE_LABEL: &str = "collector.rapl.enable-zone-label";

pub const SPEC: Spec = Spec {
    name: "rapl",
    default_enabled: true,
    help: "RAPL energy counters (CPU package, cores, DRAM) from /sys/class/powercap",
    flags: &[Flag {
        name: ZONE_LABEL,
        // node_exporter 1.12.1's help text, kept as it is.
        help: "Enables service unit metric unit_start_time_seconds",
        default: Some("false"),
        kind: FlagKind::Bool,
        conflicts_with: None,
    }],
    build,
    sources: &[
        Source::sys("class/powercap/intel-rapl:0/energy_uj", "rapl_uint"),
        Source::sys(
            "class/powercap/intel-rapl:0/max_energy_range_uj",
            "rapl_uint",
        ),
    ],
    parsers: &[Parser::numeric("rapl_uint", |t| {
        parse_fresh(t, parse_into).map(drop)
    })],
};

const JOULES: &str = "node_rapl_joules_total";
const JOULES_HELP: &str = "Current RAPL value in joules";

/// One unsigned integer (procfs' `ReadUintFromFile`: trimmed, decimal).
/// (the same rule as a one-number sysctl).
pub fn parse_into(text: &str, out: &mut u64) -> Result<(), ParseError> {
    u64_sysctl_into(text, out)
}

/// procfs' `getIndexAndName`: `(index, name)` of a zone whose `name` file
/// says `raw`, given how often each name has been seen (updated).
fn index_and_name(seen: &mut Vec<(String, usize)>, raw: &str) -> (usize, String) {
    let (index, name) = match raw.split('-').collect::<Vec<_>>()[..] {
        [name, n] if let Ok(i) = n.parse::<usize>() => (Some(i), name),
        _ => (None, raw),
    };
    let count = seen.iter().find(|(n, _)| n == name).map_or(0, |(_, c)| *c);
    let index = index.unwrap_or(count);
    match seen.iter_mut().find(|(n, _)| n == name) {
        Some(entry) => entry.1 = index + 1,
        None => seen.push((name.to_string(), index + 1)),
    }
    (index, name.to_string())
}

fn read_uint(path: &Path) -> Result<u64, io::Error> {
    let text = read_attribute(path)?;
    let mut v = 0;
    parse_into(&text, &mut v).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok(v)
}

fn error(path: &Path, e: io::Error) -> DeviceError {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<ParseError>())
    {
        Some(pe) => CollectError::from_parse(path, pe.clone()).into(),
        None => io_error(path, e),
    }
}

pub struct RaplCollector {
    class: PathBuf,
    /// That `class` was absent (no powercap), until something may have added it.
    presence: absence::Memo,
    zone_label: bool,
    families: Families,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(RaplCollector {
        class: s.sysfs.join("class/powercap"),
        presence: absence::Memo::default(),
        zone_label: s.switch(ZONE_LABEL),
        families: Families::default(),
    })
}

impl RaplCollector {
    /// Reads every zone; `Ok(false)`: a permission error, no data.
    fn read(&mut self) -> Result<bool, CollectError> {
        if matches!(self.presence.exists(&self.class), Ok(false)) {
            return Ok(true);
        }
        let mut dirs: Vec<String> = match std::fs::read_dir(&self.class) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return Ok(false),
            Err(e) => return Err(CollectError::io(&self.class, e)),
        };
        // os.ReadDir's order: by name.
        dirs.sort();
        let mut seen = Vec::new();
        for dir in &dirs {
            let zone = self.class.join(dir);
            let Ok(raw) = read_attribute(&zone.join("name")) else {
                continue; // not a zone (the control type `intel-rapl`)
            };
            let (index, name) = index_and_name(&mut seen, raw.trim());
            // A zone that went away since the listing (its driver
            // unloaded) is left out.
            let range = zone.join("max_energy_range_uj");
            if let Err(e) = read_uint(&range) {
                error(&range, e).settle(&zone)?;
                continue;
            }
            let energy = zone.join("energy_uj");
            let microjoules = match read_uint(&energy) {
                Ok(v) => v,
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return Ok(false),
                Err(e) => {
                    error(&energy, e).settle(&zone)?;
                    continue;
                }
            };
            let index = index.to_string();
            let path = zone.to_string_lossy();
            let joules = microjoules as f64 / 1e6;
            if self.zone_label {
                let labels = [
                    ("index", index.as_str()),
                    ("path", &path),
                    ("rapl_zone", &name),
                ];
                self.families
                    .push(JOULES, JOULES_HELP, MetricType::Counter, &labels, joules);
            } else {
                let family = format!("node_rapl_{}_joules_total", sanitize_metric_name(&name));
                let help = format!("Current RAPL {name} value in joules");
                let labels = [("index", index.as_str()), ("path", &path)];
                self.families
                    .push(family, help, MetricType::Counter, &labels, joules);
            }
        }
        Ok(true)
    }
}

impl Collector for RaplCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.families.clear();
        // Ok(false): no permission, no data (written as nothing).
        let read = self.read().map(|readable| {
            if !readable {
                self.families.clear();
            }
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
    fn zone_indexes_as_procfs_gives_them() {
        let mut seen = Vec::new();
        let mut f = |n| index_and_name(&mut seen, n);
        assert_eq!(f("package-0"), (0, "package".into()));
        assert_eq!(f("core"), (0, "core".into()));
        assert_eq!(f("dram"), (0, "dram".into()));
        assert_eq!(f("package-1"), (1, "package".into()));
        assert_eq!(f("dram"), (1, "dram".into()));
        assert_eq!(f("package"), (2, "package".into()));
        assert_eq!(f("a-b-c"), (0, "a-b-c".into()));
        assert_eq!(f("x-y"), (0, "x-y".into()));
    }

    #[test]
    fn collector_on_fixture() {
        let sys = fixture("sys");
        let s = Settings::with_roots("/nonexistent", &sys);
        let out = render(build(&s).as_mut()).unwrap();
        let p = sys.join("class/powercap").display().to_string();
        for l in [
            "# HELP node_rapl_package_joules_total Current RAPL package value in joules\n"
                .to_string(),
            "# TYPE node_rapl_package_joules_total counter\n".to_string(),
            format!(
                "node_rapl_package_joules_total{{index=\"0\",path=\"{p}/intel-rapl:0\"}} 240422.366267\n"
            ),
            format!(
                "node_rapl_package_joules_total{{index=\"1\",path=\"{p}/intel-rapl:1\"}} 130558.998914\n"
            ),
            format!(
                "node_rapl_package_joules_total{{index=\"0\",path=\"{p}/intel-rapl-mmio:0\"}} 24.5\n"
            ),
            format!(
                "node_rapl_dram_joules_total{{index=\"0\",path=\"{p}/intel-rapl:0:1\"}} 24468.409791\n"
            ),
            format!(
                "node_rapl_dram_joules_total{{index=\"1\",path=\"{p}/intel-rapl:1:1\"}} 22116.153056\n"
            ),
            format!(
                "node_rapl_core_joules_total{{index=\"0\",path=\"{p}/intel-rapl:0:0\"}} 118821.284256\n"
            ),
        ] {
            assert!(out.contains(&l), "missing {l:?} in\n{out}");
        }

        let mut s = Settings::with_roots("/nonexistent", &sys);
        s.set(ZONE_LABEL, Some(FlagValue::Bool(true)));
        let out = render(build(&s).as_mut()).unwrap();
        assert!(out.starts_with("# HELP node_rapl_joules_total Current RAPL value in joules\n# TYPE node_rapl_joules_total counter\n"), "{out}");
        assert!(out.contains(&format!("node_rapl_joules_total{{index=\"0\",path=\"{p}/intel-rapl:0:1\",rapl_zone=\"dram\"}} 24468.409791\n")), "{out}");
        assert!(!out.contains("node_rapl_package_joules_total"));
    }

    #[test]
    fn no_powercap_writes_nothing() {
        let s = Settings::with_roots("/nonexistent", "/nonexistent-usescope");
        assert_eq!(render(build(&s).as_mut()).unwrap(), "");
    }

    #[test]
    fn a_bad_counter_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let zone = dir.path().join("class/powercap/intel-rapl:0");
        std::fs::create_dir_all(&zone).unwrap();
        std::fs::write(zone.join("name"), "package-0\n").unwrap();
        std::fs::write(zone.join("max_energy_range_uj"), "262143328850\n").unwrap();
        std::fs::write(zone.join("energy_uj"), "lots\n").unwrap();
        let s = Settings::with_roots("/nonexistent", dir.path());
        let e = render(build(&s).as_mut()).unwrap_err();
        assert!(e.file.ends_with("intel-rapl:0/energy_uj"), "{e}");
        assert_eq!(e.line, Some(1));
        std::fs::write(zone.join("energy_uj"), "5\n").unwrap();
        std::fs::remove_file(zone.join("max_energy_range_uj")).unwrap();
        let e = render(build(&s).as_mut()).unwrap_err();
        assert!(e.file.ends_with("intel-rapl:0/max_energy_range_uj"), "{e}");
    }
}
