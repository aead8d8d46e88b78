//! /sys/class/fc_host → `node_fibrechannel_*`: node_exporter's
//! fibrechannel collector (collector/fibrechannel_linux.go, procfs
//! sysfs/class_fibrechannel.go).
//!
//! Each Fibre Channel host adapter port (`host0`) has string attributes,
//! the labels of `node_fibrechannel_info` (`port_id`, `port_name` and
//! `fabric_name` lose their `0x`), and `statistics/`, whose counters the
//! kernel (scsi_transport_fc) prints in hexadecimal (`0x1f`). A counter of
//! `0xffffffffffffffff` is one the HBA firmware does not implement and
//! has no series, as in node_exporter. A missing attribute is an empty
//! label; a missing counter has no series (node_exporter dereferences a
//! nil pointer and crashes there). A port that went away while it was
//! read (ENODEV, or its directory gone) is left out of the scrape. Without
//! FC a scrape looks the class up only after a uevent or a mount
//! (absence.rs).

use std::io;
use std::path::Path;

use crate::collectors::sysfs::{DeviceError, Families, io_error, read_trimmed, settle};
use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError};
use crate::kernel::parse::{go_u64_field, parse_fresh, single_field};
use crate::kernel::source::Dir;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Encoder, MetricType};

pub const SPEC: Spec = Spec {
    name: "fibrechannel",
    default_enabled: true,
    help: "Fibre Channel host port state and link error counters from /sys/class/fc_host",
    flags: &[],
    build,
    sources: &[
        Source::sys(
            "class/fc_host/host0/statistics/link_failure_count",
            "fibrechannel_counter",
        ),
        Source::sys(
            "class/fc_host/host0/statistics/rx_frames",
            "fibrechannel_counter",
        ),
    ],
    parsers: &[Parser::numeric("fibrechannel_counter", |t| {
        parse_fresh(t, parse_into).map(drop)
    })],
};

const INFO: &str = "node_fibrechannel_info";
const INFO_HELP: &str = "Non-numeric data from /sys/class/fc_host/<host>, value is always 1.";

/// (label, file, strip a leading `0x`), in node_exporter's label order.
const ATTRIBUTES: &[(&str, &str, bool)] = &[
    ("speed", "speed", false),
    ("port_state", "port_state", false),
    ("port_type", "port_type", false),
    ("port_id", "port_id", true),
    ("port_name", "port_name", true),
    ("fabric_name", "fabric_name", true),
    ("symbolic_name", "symbolic_name", false),
    ("supported_classes", "supported_classes", false),
    ("supported_speeds", "supported_speeds", false),
    ("dev_loss_tmo", "dev_loss_tmo", false),
];

/// (file in statistics/, family, HELP).
const COUNTERS: &[(&str, &str, &str)] = &[
    (
        "dumped_frames",
        "node_fibrechannel_dumped_frames_total",
        "Number of dumped frames",
    ),
    (
        "error_frames",
        "node_fibrechannel_error_frames_total",
        "Number of errors in frames",
    ),
    (
        "invalid_crc_count",
        "node_fibrechannel_invalid_crc_total",
        "Invalid Cyclic Redundancy Check count",
    ),
    (
        "rx_frames",
        "node_fibrechannel_rx_frames_total",
        "Number of frames received",
    ),
    (
        "rx_words",
        "node_fibrechannel_rx_words_total",
        "Number of words received by host port",
    ),
    (
        "tx_frames",
        "node_fibrechannel_tx_frames_total",
        "Number of frames transmitted by host port",
    ),
    (
        "tx_words",
        "node_fibrechannel_tx_words_total",
        "Number of words transmitted by host port",
    ),
    (
        "seconds_since_last_reset",
        "node_fibrechannel_seconds_since_last_reset_total",
        "Number of seconds since last host port reset",
    ),
    (
        "invalid_tx_word_count",
        "node_fibrechannel_invalid_tx_words_total",
        "Number of invalid words transmitted by host port",
    ),
    (
        "link_failure_count",
        "node_fibrechannel_link_failure_total",
        "Number of times the host port link has failed",
    ),
    (
        "loss_of_sync_count",
        "node_fibrechannel_loss_of_sync_total",
        "Number of failures on either bit or transmission word boundaries",
    ),
    (
        "loss_of_signal_count",
        "node_fibrechannel_loss_of_signal_total",
        "Number of times signal has been lost",
    ),
    (
        "nos_count",
        "node_fibrechannel_nos_total",
        "Number Not_Operational Primitive Sequence received by host port",
    ),
    (
        "fcp_packet_aborts",
        "node_fibrechannel_fcp_packet_aborts_total",
        "Number of aborted packets",
    ),
];

/// One counter: Go's base-0 unsigned integer (`0x1f` as the kernel
/// prints it, or decimal).
pub fn parse_into(text: &str, out: &mut u64) -> Result<(), ParseError> {
    let tok = single_field(text).ok_or_else(|| ParseError::new(1, "expected one number"))?;
    *out = go_u64_field(tok, 1, "counter")?;
    Ok(())
}

pub struct FibreChannelCollector {
    class: Dir,
    families: Families,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(FibreChannelCollector {
        class: Dir::new(&s.sysfs, "class/fc_host").of_devices(),
        families: Families::default(),
    })
}

impl FibreChannelCollector {
    fn read_host(&mut self, host: &str) -> Result<(), CollectError> {
        let dir = self.class.path().join(host);
        let mark = self.families.len();
        let read = self.read_host_in(&dir, host);
        settle(&mut self.families, mark, &dir, read)
    }

    fn read_host_in(&mut self, dir: &Path, host: &str) -> Result<(), DeviceError> {
        let mut values: Vec<String> = Vec::with_capacity(ATTRIBUTES.len());
        for (_, file, strip) in ATTRIBUTES {
            let path = dir.join(file);
            let v = match read_trimmed(&path) {
                Ok(v) if *strip && v.len() > 2 => v[2..].to_string(),
                Ok(v) => v,
                Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
                Err(e) => return Err(io_error(&path, e)),
            };
            values.push(v);
        }
        let mut labels: Vec<(&'static str, &str)> = vec![("fc_host", host)];
        labels.extend(
            ATTRIBUTES
                .iter()
                .zip(&values)
                .map(|((l, _, _), v)| (*l, v.as_str())),
        );
        self.families
            .push(INFO, INFO_HELP, MetricType::Gauge, &labels, 1.0);

        let stats = dir.join("statistics");
        for (file, family, help) in COUNTERS {
            let path = stats.join(file);
            let text = match read_trimmed(&path) {
                Ok(t) => t,
                Err(e)
                    if e.kind() == io::ErrorKind::NotFound
                        || matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP)) =>
                {
                    continue;
                }
                Err(e) => return Err(io_error(&path, e)),
            };
            let mut v = 0;
            parse_into(&text, &mut v).map_err(|e| CollectError::from_parse(&path, e))?;
            // All ones: not implemented by the HBA firmware.
            if v != u64::MAX {
                self.families.push(
                    *family,
                    *help,
                    MetricType::Counter,
                    &[("fc_host", host)],
                    v as f64,
                );
            }
        }
        Ok(())
    }
}

impl Collector for FibreChannelCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.families.clear();
        let read = self
            .class
            .sorted_names()
            .and_then(|hosts| hosts.iter().try_for_each(|h| self.read_host(h)));
        self.families.write_or_discard(enc, read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::{fixture, render};

    #[test]
    fn counters_are_hex_or_decimal() {
        assert_eq!(parse_fresh("0x1f\n", parse_into).unwrap(), 31);
        assert_eq!(parse_fresh("12\n", parse_into).unwrap(), 12);
        assert_eq!(
            parse_fresh("0xffffffffffffffff\n", parse_into).unwrap(),
            u64::MAX
        );
        assert!(parse_fresh("0x\n", parse_into).is_err());
        assert!(parse_fresh("0x10000000000000000\n", parse_into).is_err());
        assert!(parse_fresh("", parse_into).is_err());
    }

    #[test]
    fn collector_on_fixture() {
        let s = Settings::with_roots("/nonexistent", fixture("sys"));
        let out = render(build(&s).as_mut()).unwrap();
        for l in [
            "node_fibrechannel_info{dev_loss_tmo=\"30\",fabric_name=\"100000051e0c8a01\",fc_host=\"host0\",port_id=\"010a00\",port_name=\"10000000c9a1b2c3\",port_state=\"Online\",port_type=\"NPort (fabric via point-to-point)\",speed=\"16 Gbit\",supported_classes=\"Class 3\",supported_speeds=\"4 Gbit, 8 Gbit, 16 Gbit\",symbolic_name=\"Emulex LPe16002B-M6 FV12.8.340.8 DV14.0.0.4 HN:db01 OS:Linux\"} 1\n",
            "node_fibrechannel_rx_frames_total{fc_host=\"host0\"} 2766045\n",
            "node_fibrechannel_link_failure_total{fc_host=\"host0\"} 2\n",
            // host1: a port whose link is down.
            "node_fibrechannel_loss_of_signal_total{fc_host=\"host1\"} 17\n",
        ] {
            assert!(out.contains(l), "missing {l:?} in\n{out}");
        }
        // Not implemented by host1's firmware (all ones).
        assert!(!out.contains("node_fibrechannel_dumped_frames_total{fc_host=\"host1\"}"));
        assert!(out.contains("node_fibrechannel_dumped_frames_total{fc_host=\"host0\"}"));
    }

    #[test]
    fn no_fc_writes_nothing() {
        let s = Settings::with_roots("/nonexistent", "/nonexistent-usescope");
        assert_eq!(render(build(&s).as_mut()).unwrap(), "");
    }

    #[test]
    fn a_bad_counter_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let stats = dir.path().join("class/fc_host/host3/statistics");
        std::fs::create_dir_all(&stats).unwrap();
        std::fs::write(stats.join("nos_count"), "0xZZ\n").unwrap();
        let s = Settings::with_roots("/nonexistent", dir.path());
        let e = render(build(&s).as_mut()).unwrap_err();
        assert!(e.file.ends_with("statistics/nos_count"), "{e}");
    }
}
