//! /sys/block/dm-* → `node_dmmultipath_*`: node_exporter's dmmultipath
//! collector (collector/dmmultipath_linux.go, procfs
//! blockdevice/dm_multipath.go).
//!
//! A device-mapper device is a multipath map when its `dm/uuid` starts
//! with `mpath-` (multipathd names them so; LVM's are `LVM-...`). For each:
//! its `dm/name`, `dm/suspended` (0 or 1), `size` (512-byte sectors), and
//! its paths, the entries of `slaves/`, each with the SCSI or NVMe state
//! in `/sys/block/<path>/device/state`. A path is active when that state
//! is `running` (SCSI) or `live` (NVMe); anything else (`offline`,
//! `blocked`, `transport-offline`, `connecting`) counts as failed.
//!
//! A `dm-*` without `dm/uuid` is not a device-mapper device and is
//! skipped, as procfs skips it. Any other file that is missing or not a
//! number fails the collector naming the file, unless its map or path
//! went away since it was listed (ENODEV, or its directory gone): that
//! map, or that path, is left out. Without dm devices a scrape
//! costs one listing of /sys/block (kept open, rewound), and none while no
//! uevent has been sent since the last ([`Dir::of_devices`]).

use std::io;
use std::path::{Path, PathBuf};

use crate::collectors::sysfs::{DeviceError, Families, io_error, read_trimmed, settle};
use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError};
use crate::kernel::parse::{parse_fresh, u64_sysctl_into};
use crate::kernel::source::Dir;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Encoder, MetricType};

pub const SPEC: Spec = Spec {
    name: "dmmultipath",
    default_enabled: true,
    help: "Device-mapper multipath maps and the state of their paths from /sys/block/dm-*",
    flags: &[],
    build,
    sources: &[
        Source::sys("block/dm-0/dm/suspended", "dmmultipath_uint"),
        Source::sys("block/dm-0/size", "dmmultipath_uint"),
    ],
    parsers: &[Parser::numeric("dmmultipath_uint", |t| {
        parse_fresh(t, parse_into).map(drop)
    })],
};

const INFO: (&str, &str) = (
    "node_dmmultipath_device_info",
    "Non-numeric information about a DM-multipath device.",
);
const ACTIVE: (&str, &str) = (
    "node_dmmultipath_device_active",
    "Whether the multipath device-mapper device is active (1) or suspended (0).",
);
const SIZE: (&str, &str) = (
    "node_dmmultipath_device_size_bytes",
    "Size of the multipath device in bytes, read from /sys/block/<dm>/size.",
);
const PATHS: (&str, &str) = (
    "node_dmmultipath_device_paths",
    "Number of paths for a multipath device.",
);
const PATHS_ACTIVE: (&str, &str) = (
    "node_dmmultipath_device_paths_active",
    "Number of paths in active state (SCSI running or NVMe live) for a multipath device.",
);
const PATHS_FAILED: (&str, &str) = (
    "node_dmmultipath_device_paths_failed",
    "Number of paths not in active state for a multipath device.",
);
const PATH_STATE: (&str, &str) = (
    "node_dmmultipath_path_state",
    "Reports the underlying device state for a multipath path, as read from /sys/block/<dev>/device/state.",
);

const SECTOR_BYTES: u64 = 512;

/// One unsigned integer (procfs' `ReadUintFromFile`).
/// (the same rule as a one-number sysctl).
pub fn parse_into(text: &str, out: &mut u64) -> Result<(), ParseError> {
    u64_sysctl_into(text, out)
}

/// A path is usable: SCSI `running` or NVMe `live`.
fn is_active(state: &str) -> bool {
    state == "running" || state == "live"
}

fn text(path: &Path) -> Result<String, DeviceError> {
    read_trimmed(path).map_err(|e| io_error(path, e))
}

fn number(path: &Path) -> Result<u64, DeviceError> {
    let t = text(path)?;
    let mut v = 0;
    parse_into(&t, &mut v).map_err(|e| CollectError::from_parse(path, e))?;
    Ok(v)
}

pub struct DmMultipathCollector {
    block: PathBuf,
    listing: Dir,
    dm_devices: Vec<String>,
    families: Families,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(DmMultipathCollector {
        block: s.sysfs.join("block"),
        listing: Dir::new(&s.sysfs, "block").of_devices(),
        dm_devices: Vec::new(),
        families: Families::default(),
    })
}

impl DmMultipathCollector {
    fn read_map(&mut self, dm: &str) -> Result<(), CollectError> {
        let dir = self.block.join(dm);
        let mark = self.families.len();
        let read = self.read_map_in(&dir, dm);
        settle(&mut self.families, mark, &dir, read)
    }

    fn read_map_in(&mut self, dir: &Path, dm: &str) -> Result<(), DeviceError> {
        let uuid = match read_trimmed(&dir.join("dm/uuid")) {
            Ok(u) => u,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_error(&dir.join("dm/uuid"), e)),
        };
        if !uuid.starts_with("mpath-") {
            return Ok(());
        }
        let name = text(&dir.join("dm/name"))?;
        let suspended = number(&dir.join("dm/suspended"))? == 1;
        let bytes = number(&dir.join("size"))?.saturating_mul(SECTOR_BYTES);

        let slaves = dir.join("slaves");
        let mut paths: Vec<String> = match std::fs::read_dir(&slaves) {
            Ok(entries) => entries
                .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect::<Result<_, _>>()
                .map_err(|e| io_error(&slaves, e))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io_error(&slaves, e)),
        };
        paths.sort();
        let (mut active, mut failed) = (0u64, 0u64);
        let mut states = Vec::with_capacity(paths.len());
        for path in &paths {
            let device = self.block.join(path);
            match text(&device.join("device/state")) {
                Ok(state) => states.push((path.as_str(), state)),
                // A path removed since `slaves/` was listed: not counted.
                Err(e) => e.settle(&device)?,
            }
        }
        for (path, state) in &states {
            if is_active(state) {
                active += 1;
            } else {
                failed += 1;
            }
            self.families.push(
                PATH_STATE.0,
                PATH_STATE.1,
                MetricType::Gauge,
                &[("device", &name), ("path", path), ("state", state)],
                1.0,
            );
        }

        let f = &mut self.families;
        let labels = [("device", name.as_str()), ("sysfs_name", dm)];
        let mut gauge = |(n, h): (&str, &str), v: f64| f.push(n, h, MetricType::Gauge, &labels, v);
        gauge(ACTIVE, if suspended { 0.0 } else { 1.0 });
        gauge(SIZE, bytes as f64);
        gauge(PATHS, states.len() as f64);
        gauge(PATHS_ACTIVE, active as f64);
        gauge(PATHS_FAILED, failed as f64);
        f.push(
            INFO.0,
            INFO.1,
            MetricType::Gauge,
            &[("device", &name), ("sysfs_name", dm), ("uuid", &uuid)],
            1.0,
        );
        Ok(())
    }
}

impl Collector for DmMultipathCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.families.clear();
        let mut dm = std::mem::take(&mut self.dm_devices);
        dm.clear();
        let listed = self.listing.list(|name| {
            if name.starts_with("dm-") {
                dm.push(name.to_string());
            }
        });
        let read = listed.and_then(|_| dm.iter().try_for_each(|d| self.read_map(d)));
        self.dm_devices = dm;
        self.families.write_or_discard(enc, read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::{fixture, render};

    #[test]
    fn numbers() {
        assert_eq!(parse_fresh("1\n", parse_into).unwrap(), 1);
        assert!(parse_fresh("yes\n", parse_into).is_err());
        assert!(parse_fresh("", parse_into).is_err());
    }

    #[test]
    fn collector_on_fixture() {
        let s = Settings::with_roots("/nonexistent", fixture("sys"));
        let out = render(build(&s).as_mut()).unwrap();
        for l in [
            "node_dmmultipath_device_info{device=\"mpatha\",sysfs_name=\"dm-0\",uuid=\"mpath-3600508b400105e210000900000490000\"} 1\n",
            "node_dmmultipath_device_active{device=\"mpatha\",sysfs_name=\"dm-0\"} 1\n",
            "node_dmmultipath_device_size_bytes{device=\"mpatha\",sysfs_name=\"dm-0\"} 107374182400\n",
            "node_dmmultipath_device_paths{device=\"mpatha\",sysfs_name=\"dm-0\"} 2\n",
            "node_dmmultipath_device_paths_active{device=\"mpatha\",sysfs_name=\"dm-0\"} 2\n",
            // mpathb: one path offline.
            "node_dmmultipath_device_paths_failed{device=\"mpathb\",sysfs_name=\"dm-1\"} 1\n",
            "node_dmmultipath_path_state{device=\"mpathb\",path=\"sde\",state=\"offline\"} 1\n",
            // mpathc: suspended, NVMe paths.
            "node_dmmultipath_device_active{device=\"mpathc\",sysfs_name=\"dm-3\"} 0\n",
            "node_dmmultipath_path_state{device=\"mpathc\",path=\"nvme1n1\",state=\"live\"} 1\n",
            "node_dmmultipath_path_state{device=\"mpathc\",path=\"nvme2n1\",state=\"connecting\"} 1\n",
        ] {
            assert!(out.contains(l), "missing {l:?} in\n{out}");
        }
        // dm-2 is an LVM volume, not a multipath map.
        assert!(!out.contains("dm-2"), "{out}");
    }

    #[test]
    fn no_device_mapper_writes_nothing() {
        let s = Settings::with_roots("/nonexistent", "/nonexistent-usescope");
        assert_eq!(render(build(&s).as_mut()).unwrap(), "");
    }

    #[test]
    fn a_missing_path_state_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let dm = dir.path().join("block/dm-7");
        std::fs::create_dir_all(dm.join("dm")).unwrap();
        std::fs::create_dir_all(dm.join("slaves/sdz")).unwrap();
        std::fs::write(dm.join("dm/uuid"), "mpath-1\n").unwrap();
        std::fs::write(dm.join("dm/name"), "mpathz\n").unwrap();
        std::fs::write(dm.join("dm/suspended"), "0\n").unwrap();
        std::fs::write(dm.join("size"), "8\n").unwrap();
        // The path's device is there, without a state.
        std::fs::create_dir_all(dir.path().join("block/sdz/device")).unwrap();
        let s = Settings::with_roots("/nonexistent", dir.path());
        let e = render(build(&s).as_mut()).unwrap_err();
        assert!(e.file.ends_with("block/sdz/device/state"), "{e}");
        // Removed since `slaves/` named it: that path alone is left out.
        std::fs::remove_dir_all(dir.path().join("block/sdz")).unwrap();
        let out = render(build(&s).as_mut()).unwrap();
        assert!(
            out.contains(
                "node_dmmultipath_device_paths{device=\"mpathz\",sysfs_name=\"dm-7\"} 0\n"
            ),
            "{out}"
        );
        assert!(!out.contains("sdz"), "{out}");
    }
}
