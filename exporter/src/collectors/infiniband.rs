//! /sys/class/infiniband → `node_infiniband_*`: node_exporter's infiniband
//! collector (collector/infiniband_linux.go, procfs
//! sysfs/class_infiniband.go).
//!
//! Each device (`mlx5_0`) has `fw_ver` (required), `board_id` and
//! `hca_type`, and `ports/N/` with `link_layer`, `state` and `phys_state`
//! (`4: ACTIVE`), `rate` (`100 Gb/sec (4X EDR)`) and three counter
//! directories: `counters/` (the IB port counters; the `*_data` ones count
//! 4-byte words, exported in bytes), `counters_ext/` (the 64-bit "legacy"
//! ones) and `hw_counters/` (driver counters such as mlx5's RoCE ones).
//! A counter file that cannot be read now (EACCES, EINVAL, EOPNOTSUPP) or
//! says `N/A (no PMA)` is left out, as procfs leaves it out; files of
//! unknown counters are read but not exported. A device that went away
//! while it was read (ENODEV, or its directory gone) is left out of the
//! scrape, where node_exporter fails the collector.
//!
//! `--collector.infiniband.device-include` / `device-exclude` filter
//! devices by name. Without InfiniBand a scrape looks the class up
//! only after a uevent or a mount (absence.rs).

use std::io;
use std::path::Path;

use regex::Regex;

use crate::scrape::collector::Collector;

use crate::collectors::sysfs::{
    DeviceError, Families, ignored, io_error, read_attribute, read_parsed, read_trimmed, settle,
};
use crate::collectors::{Flag, FlagKind, Parser, Settings, Source, Spec};
use crate::kernel::error::excerpt;
use crate::kernel::error::{CollectError, ParseError};
use crate::kernel::parse::{go_u64_field, parse_fresh, u64_field};
use crate::kernel::source::Dir;
use crate::scrape::exposition::{Encoder, MetricType};

pub const INCLUDE: &str = "collector.infiniband.device-include";
pub const EXCLUDE: &str = "collector.infiniband.device-exclude";

pub const SPEC: Spec = Spec {
    name: "infiniband",
    default_enabled: true,
    help: "InfiniBand and RoCE port state, rate and counters from /sys/class/infiniband",
    flags: &[
        Flag {
            name: INCLUDE,
            help: "Regexp of infiniband devices to include (mutually exclusive to device-exclude).",
            default: None,
            kind: FlagKind::Regex,
            conflicts_with: None,
        },
        Flag {
            name: EXCLUDE,
            help: "Regexp of infiniband devices to exclude (mutually exclusive to device-include).",
            default: None,
            kind: FlagKind::Regex,
            conflicts_with: None,
        },
    ],
    build,
    sources: &[
        Source::sys("class/infiniband/mlx4_0/ports/1/state", "infiniband_state"),
        Source::sys(
            "class/infiniband/mlx4_0/ports/1/phys_state",
            "infiniband_state",
        ),
        Source::sys("class/infiniband/mlx4_0/ports/1/rate", "infiniband_rate"),
        Source::sys(
            "class/infiniband/mlx4_0/ports/1/counters/port_rcv_data",
            "infiniband_counter",
        ),
        Source::sys(
            "class/infiniband/mlx4_0/ports/1/counters_ext/port_xmit_data_64",
            "infiniband_counter",
        ),
        Source::sys(
            "class/infiniband/mlx5_0/ports/1/hw_counters/out_of_buffer",
            "infiniband_counter",
        ),
    ],
    parsers: &[
        Parser::text("infiniband_state", |t| {
            parse_fresh(t, parse_state_into).map(drop)
        }),
        Parser::numeric("infiniband_rate", |t| {
            parse_fresh(t, parse_rate_into).map(drop)
        }),
        Parser::numeric("infiniband_counter", |t| {
            parse_fresh(t, parse_counter_into).map(drop)
        }),
    ],
};

const INFO: &str = "node_infiniband_info";
const INFO_HELP: &str = "Non-numeric data from /sys/class/infiniband/<device>, value is always 1.";

/// A port attribute: the file, the family (after `node_infiniband_`) and
/// its HELP.
struct Counter {
    file: &'static str,
    metric: &'static str,
    help: &'static str,
}

const fn c(file: &'static str, metric: &'static str, help: &'static str) -> Counter {
    Counter { file, metric, help }
}

/// `counters/`: the IB port counters. The `*_data` ones are 4-byte words.
const PORT_COUNTERS: &[Counter] = &[
    c(
        "excessive_buffer_overrun_errors",
        "excessive_buffer_overrun_errors_total",
        "Number of times that OverrunErrors consecutive flow control update periods occurred, each having at least one overrun error.",
    ),
    c(
        "link_downed",
        "link_downed_total",
        "Number of times the link failed to recover from an error state and went down",
    ),
    c(
        "link_error_recovery",
        "link_error_recovery_total",
        "Number of times the link successfully recovered from an error state",
    ),
    c(
        "local_link_integrity_errors",
        "local_link_integrity_errors_total",
        "Number of times that the count of local physical errors exceeded the threshold specified by LocalPhyErrors.",
    ),
    c(
        "multicast_rcv_packets",
        "multicast_packets_received_total",
        "Number of multicast packets received (including errors)",
    ),
    c(
        "multicast_xmit_packets",
        "multicast_packets_transmitted_total",
        "Number of multicast packets transmitted (including errors)",
    ),
    c(
        "port_rcv_constraint_errors",
        "port_constraint_errors_received_total",
        "Number of packets received on the switch physical port that are discarded",
    ),
    c(
        "port_rcv_data",
        "port_data_received_bytes_total",
        "Number of data octets received on all links",
    ),
    c(
        "port_rcv_discards",
        "port_discards_received_total",
        "Number of inbound packets discarded by the port because the port is down or congested",
    ),
    c(
        "port_rcv_errors",
        "port_errors_received_total",
        "Number of packets containing an error that were received on this port",
    ),
    c(
        "port_rcv_packets",
        "port_packets_received_total",
        "Number of packets received on all VLs by this port (including errors)",
    ),
    c(
        "port_rcv_remote_physical_errors",
        "port_receive_remote_physical_errors_total",
        "Number of packets marked with the EBP (End of Bad Packet) delimiter received on the port.",
    ),
    c(
        "port_rcv_switch_relay_errors",
        "port_receive_switch_relay_errors_total",
        "Number of packets that could not be forwarded by the switch.",
    ),
    c(
        "port_xmit_constraint_errors",
        "port_constraint_errors_transmitted_total",
        "Number of packets not transmitted from the switch physical port",
    ),
    c(
        "port_xmit_data",
        "port_data_transmitted_bytes_total",
        "Number of data octets transmitted on all links",
    ),
    c(
        "port_xmit_discards",
        "port_discards_transmitted_total",
        "Number of outbound packets discarded by the port because the port is down or congested",
    ),
    c(
        "port_xmit_packets",
        "port_packets_transmitted_total",
        "Number of packets transmitted on all VLs from this port (including errors)",
    ),
    c(
        "port_xmit_wait",
        "port_transmit_wait_total",
        "Number of ticks during which the port had data to transmit but no data was sent during the entire tick",
    ),
    c(
        "symbol_error",
        "symbol_error_total",
        "Number of minor link errors detected on one or more physical lanes.",
    ),
    c(
        "unicast_rcv_packets",
        "unicast_packets_received_total",
        "Number of unicast packets received (including errors)",
    ),
    c(
        "unicast_xmit_packets",
        "unicast_packets_transmitted_total",
        "Number of unicast packets transmitted (including errors)",
    ),
    c(
        "VL15_dropped",
        "vl15_dropped_total",
        "Number of incoming VL15 packets dropped due to resource limitations.",
    ),
];

/// `counters_ext/`: the 64-bit ones ("legacy" in node_exporter's names).
const EXT_COUNTERS: &[Counter] = &[
    c(
        "port_multicast_rcv_packets",
        "legacy_multicast_packets_received_total",
        "Number of multicast packets received",
    ),
    c(
        "port_multicast_xmit_packets",
        "legacy_multicast_packets_transmitted_total",
        "Number of multicast packets transmitted",
    ),
    c(
        "port_rcv_data_64",
        "legacy_data_received_bytes_total",
        "Number of data octets received on all links",
    ),
    c(
        "port_rcv_packets_64",
        "legacy_packets_received_total",
        "Number of data packets received on all links",
    ),
    c(
        "port_unicast_rcv_packets",
        "legacy_unicast_packets_received_total",
        "Number of unicast packets received",
    ),
    c(
        "port_unicast_xmit_packets",
        "legacy_unicast_packets_transmitted_total",
        "Number of unicast packets transmitted",
    ),
    c(
        "port_xmit_data_64",
        "legacy_data_transmitted_bytes_total",
        "Number of data octets transmitted on all links",
    ),
    c(
        "port_xmit_packets_64",
        "legacy_packets_transmitted_total",
        "Number of data packets received on all links",
    ),
];

/// `hw_counters/`: the driver's (mlx5) counters. `lifespan` (ms) is a
/// gauge in seconds.
const HW_COUNTERS: &[Counter] = &[
    c(
        "duplicate_request",
        "duplicate_requests_packets_total",
        "The number of received packets. A duplicate request is a request that had been previously executed.",
    ),
    c(
        "implied_nak_seq_err",
        "implied_nak_seq_errors_total",
        "The number of time the requested decided an ACK. with a PSN larger than the expected PSN for an RDMA read or response.",
    ),
    c(
        "lifespan",
        "lifespan_seconds",
        "The maximum period in ms which defines the aging of the counter reads. Two consecutive reads within this period might return the same values.",
    ),
    c(
        "local_ack_timeout_err",
        "local_ack_timeout_errors_total",
        "The number of times QP's ack timer expired for RC, XRC, DCT QPs at the sender side. The QP retry limit was not exceed, therefore it is still recoverable error.",
    ),
    c(
        "np_cnp_sent",
        "np_cnp_packets_sent_total",
        "The number of CNP packets sent by the Notification Point when it noticed congestion experienced in the RoCEv2 IP header (ECN bits). The counters was added in MLNX_OFED 4.1",
    ),
    c(
        "np_ecn_marked_roce_packets",
        "np_ecn_marked_roce_packets_received_total",
        "The number of RoCEv2 packets received by the notification point which were marked for experiencing the congestion (ECN bits where '11' on the ingress RoCE traffic) . The counters was added in MLNX_OFED 4.1",
    ),
    c(
        "out_of_buffer",
        "out_of_buffer_drops_total",
        "The number of drops occurred due to lack of WQE for the associated QPs.",
    ),
    c(
        "out_of_sequence",
        "out_of_sequence_packets_received_total",
        "The number of out of sequence packets received.",
    ),
    c(
        "packet_seq_err",
        "packet_sequence_errors_total",
        "The number of received NAK sequence error packets. The QP retry limit was not exceeded.",
    ),
    c(
        "req_cqe_error",
        "req_cqes_errors_total",
        "The number of times requester detected CQEs completed with errors. The counters was added in MLNX_OFED 4.1",
    ),
    c(
        "req_cqe_flush_error",
        "req_cqes_flush_errors_total",
        "The number of times requester detected CQEs completed with flushed errors. The counters was added in MLNX_OFED 4.1",
    ),
    c(
        "req_remote_access_errors",
        "req_remote_access_errors_total",
        "The number of times requester detected remote access errors. The counters was added in MLNX_OFED 4.1",
    ),
    c(
        "req_remote_invalid_request",
        "req_remote_invalid_request_errors_total",
        "The number of times requester detected remote invalid request errors. The counters was added in MLNX_OFED 4.1",
    ),
    c(
        "resp_cqe_error",
        "resp_cqes_errors_total",
        "The number of times responder detected CQEs completed with errors. The counters was added in MLNX_OFED 4.1",
    ),
    c(
        "resp_cqe_flush_error",
        "resp_cqes_flush_errors_total",
        "The number of times responder detected CQEs completed with flushed errors. The counters was added in MLNX_OFED 4.1",
    ),
    c(
        "resp_local_length_error",
        "resp_local_length_errors_total",
        "The number of times responder detected local length errors. The counters was added in MLNX_OFED 4.1",
    ),
    c(
        "resp_remote_access_errors",
        "resp_remote_access_errors_total",
        "The number of times responder detected remote access errors. The counters was added in MLNX_OFED 4.1",
    ),
    c(
        "rnr_nak_retry_err",
        "rnr_nak_retry_packets_received_total",
        "The number of received RNR NAK packets. The QP retry limit was not exceeded.",
    ),
    c(
        "roce_adp_retrans",
        "roce_adp_retransmits_total",
        "The number of adaptive retransmissions for RoCE traffic. The counter was added in MLNX_OFED rev 5.0-1.0.0.0 and kernel v5.6.0",
    ),
    c(
        "roce_adp_retrans_to",
        "roce_adp_retransmits_timeout_total",
        "The number of times RoCE traffic reached timeout due to adaptive retransmission. The counter was added in MLNX_OFED rev 5.0-1.0.0.0 and kernel v5.6.0",
    ),
    c(
        "roce_slow_restart",
        "roce_slow_restart_used_total",
        "The number of times RoCE slow restart was used. The counter was added in MLNX_OFED rev 5.0-1.0.0.0 and kernel v5.6.0",
    ),
    c(
        "roce_slow_restart_cnps",
        "roce_slow_restart_cnps_total",
        "The number of times RoCE slow restart generated CNP packets. The counter was added in MLNX_OFED rev 5.0-1.0.0.0 and kernel v5.6.0",
    ),
    c(
        "roce_slow_restart_trans",
        "roce_slow_restart_total",
        "The number of times RoCE slow restart changed state to slow restart. The counter was added in MLNX_OFED rev 5.0-1.0.0.0 and kernel v5.6.0",
    ),
    c(
        "rp_cnp_handled",
        "rp_cnp_packets_handled_total",
        "The number of CNP packets handled by the Reaction Point HCA to throttle the transmission rate. The counters was added in MLNX_OFED 4.1",
    ),
    c(
        "rp_cnp_ignored",
        "rp_cnp_ignored_packets_received_total",
        "The number of CNP packets received and ignored by the Reaction Point HCA. This counter should not raise if RoCE Congestion Control was enabled in the network. If this counter raise, verify that ECN was enabled on the adapter.",
    ),
    c(
        "rx_atomic_requests",
        "rx_atomic_requests_total",
        "The number of received ATOMIC request for the associated QPs.",
    ),
    c(
        "rx_dct_connect",
        "rx_dct_connect_requests_total",
        "The number of received connection requests for the associated DCTs.",
    ),
    c(
        "rx_icrc_encapsulated",
        "rx_icrc_encapsulated_errors_total",
        "The number of RoCE packets with ICRC errors. This counter was added in MLNX_OFED 4.4 and kernel 4.19",
    ),
    c(
        "rx_read_requests",
        "rx_read_requests_total",
        "The number of received READ requests for the associated QPs.",
    ),
    c(
        "rx_write_requests",
        "rx_write_requests_total",
        "The number of received WRITE requests for the associated QPs.",
    ),
];

const STATE_HELP: &str = "State of the InfiniBand port (0: no change, 1: down, 2: init, 3: armed, 4: active, 5: act defer)";
const PHYS_STATE_HELP: &str = "Physical state of the InfiniBand port (0: no change, 1: sleep, 2: polling, 3: disable, 4: shift, 5: link up, 6: link error recover, 7: phytest)";
const RATE_HELP: &str = "Maximum signal transfer rate";

/// `state` / `phys_state`: `ID: NAME` (`4: ACTIVE`, `5: LinkUp`); `out`
/// is the ID (procfs' `parseState`: exactly one colon, ID a 32-bit
/// decimal).
pub fn parse_state_into(text: &str, out: &mut u64) -> Result<(), ParseError> {
    let mut parts = text.split(':');
    let (Some(id), Some(_name), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(ParseError::new(
            1,
            format!("expected 'ID: NAME', got {}", excerpt(text)),
        ));
    };
    let id = u64_field(id.trim(), 1, "state id")?;
    if id > u64::from(u32::MAX) {
        return Err(ParseError::new(1, format!("state id {id} out of range")));
    }
    *out = id;
    Ok(())
}

/// `rate`: `100 Gb/sec (4X EDR)`; `out` is bytes per second. procfs
/// parses the number before the first space as a 32-bit float and
/// multiplies it by 125,000,000 (Gb/s → bytes/s).
pub fn parse_rate_into(text: &str, out: &mut u64) -> Result<(), ParseError> {
    let Some((number, _unit)) = text.split_once(' ') else {
        return Err(ParseError::new(
            1,
            format!("expected 'N Gb/sec ...', got {}", excerpt(text)),
        ));
    };
    let value: f32 = number
        .trim()
        .parse()
        .map_err(|_| ParseError::new(1, format!("rate: invalid number {}", excerpt(number))))?;
    if !value.is_finite() || value < 0.0 {
        return Err(ParseError::new(
            1,
            format!("rate: {} is not a rate", excerpt(number)),
        ));
    }
    // Go converts the float64 product to uint64 (truncating); a rate past
    // u64::MAX bytes/s cannot come from the kernel.
    let bytes = f64::from(value) * 125_000_000.0;
    if bytes >= u64::MAX as f64 {
        return Err(ParseError::new(
            1,
            format!("rate: {} is out of range", excerpt(number)),
        ));
    }
    *out = bytes as u64;
    Ok(())
}

/// One counter: Go's base-0 unsigned integer; `None` when the port has no
/// performance-management agent (`N/A (no PMA)`).
pub fn parse_counter_into(text: &str, out: &mut Option<u64>) -> Result<(), ParseError> {
    let value = text.trim();
    match go_u64_field(value, 1, "counter") {
        Ok(v) => *out = Some(v),
        Err(_) if value.contains("N/A (no PMA)") => *out = None,
        Err(e) => return Err(e),
    }
    Ok(())
}

fn required(path: &Path) -> Result<String, DeviceError> {
    read_attribute(path).map_err(|e| io_error(path, e))
}

/// An optional string attribute: empty when absent.
fn optional(path: &Path) -> Result<String, DeviceError> {
    match read_trimmed(path) {
        Ok(v) => Ok(v),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(io_error(path, e)),
    }
}

/// Errors procfs takes as "this counter is not reported now".
fn unavailable(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied
    ) || matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP))
}

/// The regular files of `dir` (none if it does not exist).
fn regular_files(dir: &Path) -> Result<Vec<String>, DeviceError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error(dir, e)),
    };
    let mut out = Vec::new();
    for e in entries {
        let e = e.map_err(|e| io_error(dir, e))?;
        if e.file_type().is_ok_and(|t| t.is_file()) {
            out.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    out.sort();
    Ok(out)
}

pub struct InfiniBandCollector {
    class: Dir,
    include: Option<Regex>,
    exclude: Option<Regex>,
    families: Families,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(InfiniBandCollector {
        class: Dir::new(&s.sysfs, "class/infiniband").of_devices(),
        include: s.regex(INCLUDE).cloned(),
        exclude: s.regex(EXCLUDE).cloned(),
        families: Families::default(),
    })
}

impl InfiniBandCollector {
    fn read_device(&mut self, name: &str) -> Result<(), CollectError> {
        let dir = self.class.path().join(name);
        let mark = self.families.len();
        let read = self.read_device_in(&dir, name);
        settle(&mut self.families, mark, &dir, read)
    }

    fn read_device_in(&mut self, dir: &Path, name: &str) -> Result<(), DeviceError> {
        let firmware = required(&dir.join("fw_ver"))?;
        let board = optional(&dir.join("board_id"))?;
        let hca = optional(&dir.join("hca_type"))?;
        let ports_dir = dir.join("ports");
        let mut ports: Vec<String> = std::fs::read_dir(&ports_dir)
            .and_then(|it| {
                it.map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
                    .collect()
            })
            .map_err(|e| io_error(&ports_dir, e))?;
        ports.sort();
        for port in &ports {
            self.read_port(name, &ports_dir.join(port), port)?;
        }
        let labels = [
            ("device", name),
            ("board_id", board.as_str()),
            ("firmware_version", firmware.trim()),
            ("hca_type", hca.as_str()),
        ];
        self.families
            .push(INFO, INFO_HELP, MetricType::Gauge, &labels, 1.0);
        Ok(())
    }

    fn read_port(&mut self, device: &str, dir: &Path, port: &str) -> Result<(), DeviceError> {
        let number = port
            .parse::<u32>()
            .map_err(|_| CollectError::other(dir, "port directory is not a number"))?
            .to_string();
        required(&dir.join("link_layer"))?;
        let state = read_parsed(&dir.join("state"), parse_state_into)?;
        let phys = read_parsed(&dir.join("phys_state"), parse_state_into)?;
        let rate = read_parsed(&dir.join("rate"), parse_rate_into)?;
        let labels = [("device", device), ("port", number.as_str())];
        let f = &mut self.families;
        let mut gauge = |metric: &str, help: &str, v: f64| {
            f.push(
                format!("node_infiniband_{metric}"),
                help,
                MetricType::Gauge,
                &labels,
                v,
            );
        };
        gauge("state_id", STATE_HELP, state as f64);
        gauge("physical_state_id", PHYS_STATE_HELP, phys as f64);
        gauge("rate_bytes_per_second", RATE_HELP, rate as f64);

        // counters/ only if present; counters_ext/ is read with it.
        if dir.join("counters").exists() {
            self.read_counters(&dir.join("counters"), PORT_COUNTERS, &labels)?;
            self.read_counters(&dir.join("counters_ext"), EXT_COUNTERS, &labels)?;
        }
        self.read_counters(&dir.join("hw_counters"), HW_COUNTERS, &labels)?;
        Ok(())
    }

    fn read_counters(
        &mut self,
        dir: &Path,
        table: &[Counter],
        labels: &[(&'static str, &str)],
    ) -> Result<(), DeviceError> {
        for file in regular_files(dir)? {
            let path = dir.join(&file);
            let text = match read_trimmed(&path) {
                Ok(t) => t,
                Err(e) if unavailable(&e) => continue,
                Err(e) => return Err(io_error(&path, e)),
            };
            let Some(counter) = table.iter().find(|c| c.file == file) else {
                continue;
            };
            let mut value = None;
            parse_counter_into(&text, &mut value)
                .map_err(|e| CollectError::from_parse(&path, e))?;
            let Some(v) = value else { continue };
            let name = format!("node_infiniband_{}", counter.metric);
            if counter.file == "lifespan" {
                self.families.push(
                    name,
                    counter.help,
                    MetricType::Gauge,
                    labels,
                    (v / 1000) as f64,
                );
                continue;
            }
            // The data counters count 4-byte words (Go's multiply wraps).
            let v = if counter.file.contains("_data") {
                v.wrapping_mul(4)
            } else {
                v
            };
            self.families
                .push(name, counter.help, MetricType::Counter, labels, v as f64);
        }
        Ok(())
    }
}

impl Collector for InfiniBandCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.families.clear();
        let read = self.class.sorted_names().and_then(|names| {
            names.iter().try_for_each(|n| {
                if ignored(self.include.as_ref(), self.exclude.as_ref(), n) {
                    return Ok(());
                }
                self.read_device(n)
            })
        });
        self.families.write_or_discard(enc, read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::FlagValue;
    use crate::collectors::sysfs::gone_device;
    use crate::collectors::test_support::{fixture, render};

    #[test]
    fn states() {
        assert_eq!(parse_fresh("4: ACTIVE\n", parse_state_into).unwrap(), 4);
        assert_eq!(parse_fresh("5: LinkUp\n", parse_state_into).unwrap(), 5);
        assert!(parse_fresh("ACTIVE\n", parse_state_into).is_err());
        assert!(parse_fresh("4: A: B\n", parse_state_into).is_err());
        assert!(parse_fresh("x: ACTIVE\n", parse_state_into).is_err());
        assert!(parse_fresh("4294967296: X\n", parse_state_into).is_err());
    }

    #[test]
    fn rates() {
        let r = |t| parse_fresh(t, parse_rate_into);
        assert_eq!(r("100 Gb/sec (4X EDR)\n").unwrap(), 12_500_000_000);
        assert_eq!(r("2.5 Gb/sec (1X SDR)\n").unwrap(), 312_500_000);
        assert_eq!(r("56 Gb/sec (4X FDR)\n").unwrap(), 7_000_000_000);
        assert!(r("fast\n").is_err());
        assert!(r("x Gb/sec\n").is_err());
        assert!(r("-1 Gb/sec\n").is_err());
        assert!(r("99999999999999999999999 Gb/sec\n").is_err());
    }

    #[test]
    fn counters() {
        let c = |t| parse_fresh(t, parse_counter_into);
        assert_eq!(c("42\n").unwrap(), Some(42));
        assert_eq!(c("N/A (no PMA)\n").unwrap(), None);
        assert!(c("many\n").is_err());
        assert!(c("18446744073709551616\n").is_err());
    }

    #[test]
    fn collector_on_fixture() {
        let s = Settings::with_roots("/nonexistent", fixture("sys"));
        let out = render(build(&s).as_mut()).unwrap();
        for l in [
            "node_infiniband_info{board_id=\"SM_1141000001000\",device=\"mlx4_0\",firmware_version=\"2.31.5050\",hca_type=\"MT4099\"} 1\n",
            "node_infiniband_state_id{device=\"mlx4_0\",port=\"1\"} 4\n",
            "node_infiniband_rate_bytes_per_second{device=\"mlx4_0\",port=\"1\"} 5000000000\n",
            // 4-byte words, in bytes.
            "node_infiniband_port_data_received_bytes_total{device=\"mlx4_0\",port=\"1\"} 8884894436\n",
            "node_infiniband_legacy_data_transmitted_bytes_total{device=\"mlx4_0\",port=\"1\"} 12\n",
            // Port 2 is down, without a PMA.
            "node_infiniband_state_id{device=\"mlx4_0\",port=\"2\"} 1\n",
            "node_infiniband_out_of_buffer_drops_total{device=\"mlx5_0\",port=\"1\"} 7\n",
            "node_infiniband_lifespan_seconds{device=\"mlx5_0\",port=\"1\"} 0\n",
        ] {
            assert!(out.contains(l), "missing {l:?} in\n{out}");
        }
        assert!(!out.contains("node_infiniband_symbol_error_total{device=\"mlx4_0\",port=\"2\"}"));

        let mut s = Settings::with_roots("/nonexistent", fixture("sys"));
        s.set(
            EXCLUDE,
            Some(FlagValue::parse(FlagKind::Regex, "^mlx4").unwrap()),
        );
        let out = render(build(&s).as_mut()).unwrap();
        assert!(!out.contains("mlx4_0") && out.contains("mlx5_0"), "{out}");
    }

    #[test]
    fn no_infiniband_writes_nothing() {
        let s = Settings::with_roots("/nonexistent", "/nonexistent-usescope");
        assert_eq!(render(build(&s).as_mut()).unwrap(), "");
    }

    #[test]
    fn a_bad_state_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let port = dir.path().join("class/infiniband/hfi1_0/ports/1");
        std::fs::create_dir_all(&port).unwrap();
        std::fs::write(
            dir.path().join("class/infiniband/hfi1_0/fw_ver"),
            "1.27.0\n",
        )
        .unwrap();
        std::fs::write(port.join("link_layer"), "InfiniBand\n").unwrap();
        std::fs::write(port.join("state"), "ACTIVE\n").unwrap();
        let s = Settings::with_roots("/nonexistent", dir.path());
        let e = render(build(&s).as_mut()).unwrap_err();
        assert!(e.file.ends_with("ports/1/state"), "{e}");
    }

    /// A device removed after class/infiniband was listed is left out; one
    /// that is there without `fw_ver` still fails, as in node_exporter.
    #[test]
    fn a_device_that_went_away_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let class = dir.path().join("class/infiniband");
        let port = class.join("mlx5_0/ports/1");
        std::fs::create_dir_all(&port).unwrap();
        std::fs::write(class.join("mlx5_0/fw_ver"), "16.35.2000\n").unwrap();
        for (f, v) in [
            ("link_layer", "Ethernet"),
            ("state", "4: ACTIVE"),
            ("phys_state", "5: LinkUp"),
            ("rate", "100 Gb/sec (4X EDR)"),
        ] {
            std::fs::write(port.join(f), format!("{v}\n")).unwrap();
        }
        gone_device(&class, "mlx5_9");
        let s = Settings::with_roots("/nonexistent", dir.path());
        let out = render(build(&s).as_mut()).unwrap();
        assert!(
            out.contains("node_infiniband_state_id{device=\"mlx5_0\",port=\"1\"} 4\n"),
            "{out}"
        );
        assert!(!out.contains("mlx5_9"), "{out}");
        std::fs::remove_file(class.join("mlx5_0/fw_ver")).unwrap();
        let e = render(build(&s).as_mut()).unwrap_err();
        assert!(e.file.ends_with("mlx5_0/fw_ver"), "{e}");
    }
}
