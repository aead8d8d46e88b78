//! connect() calls that found no free local port:
//! `usescope_tcp_connect_no_local_port_total`, the EADDRNOTAVAIL of
//! ephemeral port exhaustion, in every network namespace.
//!
//! No /proc file counts these: the failed connect() returns the error to
//! the application and the kernel keeps no counter. The port use that
//! leads to it is the `tcpsockets` collector's
//! (`usescope_tcp_ephemeral_ports_used_max`); this is the moment it ran
//! out. The kernel side's comment says why a state change tells it.

use std::mem::offset_of;
use std::os::fd::OwnedFd;

use super::layout::{TcpconnectCounts, word};
use super::loader::{self, Kind, Mode, ProbeError};
use super::percpu::{self, PerCpuStruct};
use super::{Kernel, Loaded, ProbeFlag, ProbeFlagKind, ProbeSettings, ProbeSpec};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const SPEC: ProbeSpec = ProbeSpec {
    name: "tcpconnect",
    help: "TCP connect() calls that failed with EADDRNOTAVAIL because no local port was free, in every network namespace (inet_sock_set_state)",
    default_enabled: false,
    collector: "probe_tcpconnect",
    modes: MODES,
    map: MAP,
    flags: &[ProbeFlag {
        name: NETNS,
        help: "Count only the network namespace with this inode number (`stat -L -c %i /proc/PID/ns/net`); default: every namespace",
        kind: ProbeFlagKind::U32 { min: 1 },
        default: None,
        value_name: Some("INODE"),
    }],
    metrics: &[&NO_PORT],
    load,
    build: collector,
};

/// `--probe.tcpconnect.netns`: one network namespace only (unset: all).
pub const NETNS: &str = "probe.tcpconnect.netns";

const NO_PORT: Desc = Desc::counter(
    "usescope_tcp_connect_no_local_port_total",
    "TCP connect() calls that failed with EADDRNOTAVAIL because every port of ip_local_port_range was in use toward that destination, in every network namespace.",
);

pub const MODES: &[Mode] = &[
    Mode {
        name: "tp_btf",
        kind: Kind::BtfTracePoint,
        programs: &[("us_tcpconnect_btf", "inet_sock_set_state")],
    },
    Mode {
        name: "raw_tp",
        kind: Kind::RawTracePoint,
        programs: &[("us_tcpconnect_raw", "inet_sock_set_state")],
    },
];

/// The per-CPU array the collector reads, and its value.
pub const MAP: &str = "us_tcpconnect";
const VALUE_SIZE: usize = size_of::<TcpconnectCounts>();
const NO_PORT_WORD: usize = word(offset_of!(TcpconnectCounts, no_port));

/// In the probe loader process: load and attach.
pub fn load(kernel: &Kernel, settings: &ProbeSettings) -> Result<Loaded, ProbeError> {
    let only_netns = settings.number(NETNS).unwrap_or(0);
    loader::load_and_attach("tcpconnect", &kernel.btf, MODES, |l| {
        l.override_global("only_netns", &only_netns, true);
    })
}

/// In the daemon: the collector over the handed-over counters map.
pub fn collector(
    map: OwnedFd,
    _names: Vec<String>,
    _settings: &ProbeSettings,
) -> Result<Box<dyn Collector>, String> {
    percpu::counters_collector(MAP, map, VALUE_SIZE, write)
}

/// The families of the counters, summed over CPUs.
fn write(counts: &PerCpuStruct, enc: &mut Encoder) {
    enc.family(&NO_PORT);
    enc.sample(&NO_PORT, &[], counts.sum(NO_PORT_WORD));
}
