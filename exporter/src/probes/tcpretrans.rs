//! TCP retransmissions: `usescope_tcp_retransmitted_segments_total{kind}`,
//! segments the kernel retransmitted, by why, in every network namespace.
//!
//! /proc/net/snmp's RetransSegs (node_netstat_Tcp_RetransSegs) counts the
//! same segments, but only in the daemon's own network namespace, and in
//! one number. The probe sees every namespace (containers included) and
//! splits them: `timeout` (after the retransmission timer fired: the path
//! is silent), `fast` (fast recovery: some segments got through),
//! `loss_probe` (a tail loss probe), `syn` and `synack` (handshakes that
//! are not answered). The kernel side's comment says how each is told.

use std::mem::offset_of;
use std::os::fd::OwnedFd;

use super::layout::{
    TCPRETRANS_FAST, TCPRETRANS_KINDS, TCPRETRANS_LOSS_PROBE, TCPRETRANS_SYN, TCPRETRANS_SYNACK,
    TCPRETRANS_TIMEOUT, TcpretransCounts, word,
};
use super::loader::{self, Kind, Mode, ProbeError};
use super::percpu::{self, PerCpuStruct};
use super::{Kernel, Loaded, ProbeFlag, ProbeFlagKind, ProbeSettings, ProbeSpec};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const SPEC: ProbeSpec = ProbeSpec {
    name: "tcpretrans",
    help: "TCP segments retransmitted, by kind (timeout, fast, loss_probe, syn, synack), in every network namespace (tcp_retransmit_skb, tcp_retransmit_synack)",
    default_enabled: false,
    collector: "probe_tcpretrans",
    modes: MODES,
    map: MAP,
    flags: &[ProbeFlag {
        name: NETNS,
        help: "Count only the network namespace with this inode number (`stat -L -c %i /proc/PID/ns/net`); default: every namespace",
        kind: ProbeFlagKind::U32 { min: 1 },
        default: None,
        value_name: Some("INODE"),
    }],
    metrics: &[&SEGMENTS],
    load,
    build: collector,
};

/// `--probe.tcpretrans.netns`: one network namespace only (unset: all).
pub const NETNS: &str = "probe.tcpretrans.netns";

const SEGMENTS: Desc = Desc::counter(
    "usescope_tcp_retransmitted_segments_total",
    "TCP segments retransmitted, in every network namespace, by kind: timeout (in the Loss state after a retransmission timeout), fast (fast recovery), loss_probe (tail loss probe), syn, synack.",
);

/// `kind` label values by TCPRETRANS_* index.
pub const KIND_NAMES: [&str; TCPRETRANS_KINDS] = {
    let mut names = [""; TCPRETRANS_KINDS];
    names[TCPRETRANS_TIMEOUT] = "timeout";
    names[TCPRETRANS_FAST] = "fast";
    names[TCPRETRANS_LOSS_PROBE] = "loss_probe";
    names[TCPRETRANS_SYN] = "syn";
    names[TCPRETRANS_SYNACK] = "synack";
    names
};

pub const MODES: &[Mode] = &[
    Mode {
        name: "tp_btf",
        kind: Kind::BtfTracePoint,
        programs: &[
            ("us_tcpretrans_skb_btf", "tcp_retransmit_skb"),
            ("us_tcpretrans_synack_btf", "tcp_retransmit_synack"),
        ],
    },
    Mode {
        name: "raw_tp",
        kind: Kind::RawTracePoint,
        programs: &[
            ("us_tcpretrans_skb_raw", "tcp_retransmit_skb"),
            ("us_tcpretrans_synack_raw", "tcp_retransmit_synack"),
        ],
    },
];

/// The per-CPU array the collector reads, and its value.
pub const MAP: &str = "us_tcpretrans";
const VALUE_SIZE: usize = size_of::<TcpretransCounts>();
const SEGS_WORD: usize = word(offset_of!(TcpretransCounts, segs));

/// In the probe loader process: load and attach.
pub fn load(kernel: &Kernel, settings: &ProbeSettings) -> Result<Loaded, ProbeError> {
    let only_netns = settings.number(NETNS).unwrap_or(0);
    loader::load_and_attach("tcpretrans", &kernel.btf, MODES, |l| {
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
    enc.family(&SEGMENTS);
    for (i, kind) in KIND_NAMES.iter().enumerate() {
        enc.sample(&SEGMENTS, &[("kind", kind)], counts.sum(SEGS_WORD + i));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_distinct_name() {
        let mut names = KIND_NAMES.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), TCPRETRANS_KINDS);
        assert!(!names.contains(&""));
    }
}
