//! /sys/class/nvme → `node_nvme_info` and `node_nvme_namespace_*`:
//! node_exporter's nvme collector (collector/nvme_linux.go, procfs
//! sysfs/class_nvme.go).
//!
//! Each controller `nvmeN` has `firmware_rev`, `model`, `serial`, `state`
//! and `cntlid` (text); each namespace directory `nvmeNnM` has `nuse` and
//! `size` (blocks), `queue/logical_block_size` and optionally `ana_state`.
//! As in node_exporter, a controller attribute or a namespace count that
//! cannot be read fails the collector; a count that is not a number counts
//! as 0; sizes are blocks × logical block size. A controller or namespace
//! that went away since it was listed (hot-removed, detached) is left out
//! instead.

use std::path::Path;
use std::sync::OnceLock;

use regex::Regex;

use crate::collectors::sysfs::{DeviceError, Families, io_error, read_trimmed, settle};
use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError};
use crate::kernel::parse::{parse_fresh, single_field, u64_field};
use crate::kernel::source::Dir;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Encoder, MetricType};

pub const SPEC: Spec = Spec {
    name: "nvme",
    default_enabled: true,
    help: "NVMe controllers and namespaces from /sys/class/nvme",
    flags: &[],
    build,
    sources: &[Source::sys("class/nvme/nvme0/nvme0n1/size", "nvme_blocks")],
    parsers: &[Parser::numeric("nvme_blocks", |t| {
        parse_fresh(t, parse_into).map(drop)
    })],
};

const INFO: (&str, &str) = (
    "node_nvme_info",
    "Non-numeric data from /sys/class/nvme/<device>, value is always 1.",
);
const NS_INFO: (&str, &str) = (
    "node_nvme_namespace_info",
    "Information about NVMe namespaces. Value is always 1",
);
const NS_CAPACITY: (&str, &str) = (
    "node_nvme_namespace_capacity_bytes",
    "Capacity of the NVMe namespace in bytes. Computed as namespace_size * namespace_logical_block_size",
);
const NS_SIZE: (&str, &str) = (
    "node_nvme_namespace_size_bytes",
    "Size of the NVMe namespace in bytes. Available in /sys/class/nvme/<device>/<namespace>/size",
);
const NS_USED: (&str, &str) = (
    "node_nvme_namespace_used_bytes",
    "Used space of the NVMe namespace in bytes. Available in /sys/class/nvme/<device>/<namespace>/nuse",
);
const NS_BLOCK: (&str, &str) = (
    "node_nvme_namespace_logical_block_size_bytes",
    "Logical block size of the NVMe namespace in bytes. Usually 4Kb. Available in /sys/class/nvme/<device>/<namespace>/queue/logical_block_size",
);

/// One unsigned number (a block count or size).
pub fn parse_into(text: &str, out: &mut u64) -> Result<(), ParseError> {
    let tok = single_field(text).ok_or_else(|| ParseError::new(1, "expected one number"))?;
    *out = u64_field(tok, 1, "blocks")?;
    Ok(())
}

fn namespace_pattern() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"nvme\d+n(\d+)").expect("valid"))
}

fn attr(path: &Path) -> Result<String, DeviceError> {
    read_trimmed(path).map_err(|e| io_error(path, e))
}

/// A count as procfs reads it: unreadable fails, unparsable is 0.
fn blocks(path: &Path) -> Result<u64, DeviceError> {
    let text = attr(path)?;
    Ok(parse_fresh(&text, parse_into).unwrap_or(0))
}

pub struct NvmeCollector {
    class: Dir,
    families: Families,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(NvmeCollector {
        class: Dir::new(&s.sysfs, "class/nvme").of_devices(),
        families: Families::default(),
    })
}

impl NvmeCollector {
    fn read(&mut self, devices: Vec<String>) -> Result<(), CollectError> {
        for dev in devices {
            let dir = self.class.path().join(&dev);
            let mark = self.families.len();
            let read = read_controller(&mut self.families, &dir, &dev);
            settle(&mut self.families, mark, &dir, read)?;
        }
        Ok(())
    }
}

/// One controller and its namespaces.
fn read_controller(f: &mut Families, dir: &Path, dev: &str) -> Result<(), DeviceError> {
    let mut push = |(name, help): (&str, &str), labels: &[(&'static str, &str)], v: f64| {
        f.push(name, help, MetricType::Gauge, labels, v);
    };
    let firmware = attr(&dir.join("firmware_rev"))?;
    let model = attr(&dir.join("model"))?;
    let serial = attr(&dir.join("serial"))?;
    let state = attr(&dir.join("state"))?;
    let cntlid = attr(&dir.join("cntlid"))?;
    push(
        INFO,
        &[
            ("device", dev),
            ("firmware_revision", &firmware),
            ("model", &model),
            ("serial", &serial),
            ("state", &state),
            ("cntlid", &cntlid),
        ],
        1.0,
    );
    let entries = Dir::at(dir.to_path_buf()).sorted_names()?;
    for entry in entries {
        let Some(nsid) = namespace_pattern()
            .captures(&entry)
            .and_then(|c| c.get(1))
            .map(|m| m.as_str().to_string())
        else {
            continue;
        };
        let ns = dir.join(&entry);
        let counts = (|| {
            let used = blocks(&ns.join("nuse"))?;
            let size = blocks(&ns.join("size"))?;
            Ok::<_, DeviceError>((used, size, blocks(&ns.join("queue/logical_block_size"))?))
        })();
        let (used, size, block) = match counts {
            Ok(c) => c,
            // A namespace detached since the controller was listed.
            Err(e) => {
                e.settle(&ns)?;
                continue;
            }
        };
        let ana = read_trimmed(&ns.join("ana_state")).unwrap_or_else(|_| "unknown".into());
        let labels = [("device", dev), ("nsid", nsid.as_str())];
        push(
            NS_INFO,
            &[("device", dev), ("nsid", &nsid), ("ana_state", &ana)],
            1.0,
        );
        let bytes = |n: u64| n.wrapping_mul(block) as f64;
        push(NS_CAPACITY, &labels, bytes(size));
        push(NS_SIZE, &labels, bytes(size));
        push(NS_USED, &labels, bytes(used));
        push(NS_BLOCK, &labels, block as f64);
    }
    Ok(())
}

impl Collector for NvmeCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.families.clear();
        let read = self
            .class
            .sorted_names()
            .and_then(|devices| self.read(devices));
        self.families.write_or_discard(enc, read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::sysfs::gone_device;
    use crate::collectors::test_support::{fixture, render};

    #[test]
    fn numbers() {
        assert_eq!(parse_fresh("1953525168\n", parse_into).unwrap(), 1953525168);
        assert!(parse_fresh("x\n", parse_into).is_err());
    }

    #[test]
    fn collector_on_fixture() {
        let s = Settings::with_roots("/nonexistent", fixture("sys"));
        let out = render(build(&s).as_mut()).unwrap();
        for l in [
            "node_nvme_info{cntlid=\"1\",device=\"nvme0\",firmware_revision=\"2B2QEXM7\",model=\"Samsung SSD 970 EVO Plus 1TB\",serial=\"S4EWNX0R123456\",state=\"live\"} 1\n",
            "node_nvme_namespace_info{ana_state=\"unknown\",device=\"nvme0\",nsid=\"1\"} 1\n",
            "node_nvme_namespace_logical_block_size_bytes{device=\"nvme0\",nsid=\"1\"} 512\n",
            "node_nvme_namespace_size_bytes{device=\"nvme0\",nsid=\"1\"} 1000204886016\n",
            "node_nvme_namespace_used_bytes{device=\"nvme0\",nsid=\"1\"} 409600000\n",
        ] {
            assert!(out.contains(l), "missing {l:?} in\n{out}");
        }
        let absent = Settings::with_roots("/nonexistent", "/nonexistent-usescope");
        assert_eq!(render(build(&absent).as_mut()).unwrap(), "");
    }

    /// A controller hot-removed, or a namespace detached, after the listing
    /// named it is left out; a controller that is there without its
    /// `model` still fails the collector, as in node_exporter.
    #[test]
    fn a_controller_or_namespace_that_went_away_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let class = dir.path().join("class/nvme");
        let ctl = class.join("nvme0");
        std::fs::create_dir_all(ctl.join("nvme0n1/queue")).unwrap();
        for (f, v) in [
            ("firmware_rev", "1"),
            ("model", "m"),
            ("serial", "s"),
            ("state", "live"),
            ("cntlid", "1"),
        ] {
            std::fs::write(ctl.join(f), v).unwrap();
        }
        for (f, v) in [
            ("nuse", "1"),
            ("size", "2"),
            ("queue/logical_block_size", "512"),
        ] {
            std::fs::write(ctl.join("nvme0n1").join(f), v).unwrap();
        }
        gone_device(&class, "nvme9");
        gone_device(&ctl, "nvme0n2");
        let s = Settings::with_roots("/nonexistent", dir.path());
        let out = render(build(&s).as_mut()).unwrap();
        assert!(
            out.contains("node_nvme_namespace_size_bytes{device=\"nvme0\",nsid=\"1\"} 1024\n"),
            "{out}"
        );
        assert!(
            out.contains("node_nvme_info{cntlid=\"1\",device=\"nvme0\""),
            "{out}"
        );
        assert!(
            !out.contains("nvme9") && !out.contains("nsid=\"2\""),
            "{out}"
        );
        std::fs::remove_file(ctl.join("model")).unwrap();
        let e = render(build(&s).as_mut()).unwrap_err();
        assert!(e.file.ends_with("nvme0/model"), "{e}");
    }
}
