//! /proc/net/rpc/nfs → `node_nfs_*`, the NFS client's RPC counters,
//! node_exporter's nfs collector (collector/nfs_linux.go, parsed there by
//! procfs's `nfs.ParseClientRPCStats`).
//!
//! The file exists once the kernel's NFS client (module `nfs`) is loaded;
//! without it the collector emits nothing and succeeds, looking the file up
//! again only after a uevent or a mount (absence.rs). Retransmissions over RPCs is the client's error rate: a
//! server or network that drops requests shows here before anything
//! times out.
//!
//! Every procedure of NFSv2, v3 and v4 is reported, 0 where the kernel has
//! no `procN` line (a kernel built without NFSv2), as node_exporter does.

use crate::collectors::single_file;
use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::ParseError;
use crate::kernel::parse::parse_fresh;
use crate::kernel::rpc_stats::{V2_PROCEDURES, V3_PROCEDURES, counted, each_line, fixed};
use crate::kernel::source::SourceFile;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const SPEC: Spec = Spec {
    name: "nfs",
    default_enabled: true,
    help: "NFS client RPC statistics from /proc/net/rpc/nfs",
    flags: &[],
    build,
    sources: &[Source::proc("net/rpc/nfs", "nfs")],
    parsers: &[Parser::numeric("nfs", |t| {
        parse_fresh(t, parse_into).map(drop)
    })],
};

const PACKETS: Desc = Desc::counter(
    "node_nfs_packets_total",
    "Total NFSd network packets (sent+received) by protocol type.",
);
const CONNECTIONS: Desc = Desc::counter(
    "node_nfs_connections_total",
    "Total number of NFSd TCP connections.",
);
const RPCS: Desc = Desc::counter("node_nfs_rpcs_total", "Total number of RPCs performed.");
const RETRANSMISSIONS: Desc = Desc::counter(
    "node_nfs_rpc_retransmissions_total",
    "Number of RPC transmissions performed.",
);
const AUTH_REFRESHES: Desc = Desc::counter(
    "node_nfs_rpc_authentication_refreshes_total",
    "Number of RPC authentication refreshes performed.",
);
const REQUESTS: Desc = Desc::counter(
    "node_nfs_requests_total",
    "Number of NFS procedures invoked.",
);

/// NFSv4 client operations as procfs names them, by position in `proc4`.
/// (procfs has GetDeviceInfo before LayoutGet, the kernel the other way
/// round; node_exporter's labels follow procfs, so these do too.)
pub const V4_PROCEDURES: [&str; 59] = [
    "Null",
    "Read",
    "Write",
    "Commit",
    "Open",
    "OpenConfirm",
    "OpenNoattr",
    "OpenDowngrade",
    "Close",
    "Setattr",
    "FsInfo",
    "Renew",
    "SetClientID",
    "SetClientIDConfirm",
    "Lock",
    "Lockt",
    "Locku",
    "Access",
    "Getattr",
    "Lookup",
    "LookupRoot",
    "Remove",
    "Rename",
    "Link",
    "Symlink",
    "Create",
    "Pathconf",
    "StatFs",
    "ReadLink",
    "ReadDir",
    "ServerCaps",
    "DelegReturn",
    "GetACL",
    "SetACL",
    "FsLocations",
    "ReleaseLockowner",
    "Secinfo",
    "FsidPresent",
    "ExchangeID",
    "CreateSession",
    "DestroySession",
    "Sequence",
    "GetLeaseTime",
    "ReclaimComplete",
    "GetDeviceInfo",
    "LayoutGet",
    "LayoutCommit",
    "LayoutReturn",
    "SecinfoNoName",
    "TestStateID",
    "FreeStateID",
    "GetDeviceList",
    "BindConnToSession",
    "DestroyClientID",
    "Seek",
    "Allocate",
    "DeAllocate",
    "LayoutStats",
    "Clone",
];

/// The client's counters; procedures a line lacks are 0.
#[derive(Debug, PartialEq, Eq)]
pub struct ClientStats {
    /// `net`: packets, UDP packets, TCP packets, TCP connections.
    pub net: [u64; 4],
    /// `rpc`: calls, retransmissions, authentication refreshes.
    pub rpc: [u64; 3],
    pub v2: [u64; 18],
    pub v3: [u64; 22],
    pub v4: [u64; 59],
}

impl Default for ClientStats {
    fn default() -> ClientStats {
        ClientStats {
            net: [0; 4],
            rpc: [0; 3],
            v2: [0; 18],
            v3: [0; 22],
            v4: [0; 59],
        }
    }
}

/// The keys of /proc/net/rpc/nfs; `net` and `rpc` first, which [`each_line`] requires.
const KEYS: [&str; 5] = ["net", "rpc", "proc2", "proc3", "proc4"];

/// Parses /proc/net/rpc/nfs. Every line is a known key (node_exporter
/// fails on any other, and so does this), at most once; `net` and `rpc`,
/// which the kernel always writes, must be there.
pub fn parse_into(s: &str, out: &mut ClientStats) -> Result<(), ParseError> {
    *out = ClientStats::default();
    each_line(s, "NFS", &KEYS, |key, n, f| match key {
        "net" => fixed(f, n, key, &mut out.net),
        "rpc" => fixed(f, n, key, &mut out.rpc),
        "proc2" => counted(f, n, key, 18, &mut out.v2).map(|_| ()),
        "proc3" => counted(f, n, key, 22, &mut out.v3).map(|_| ()),
        _ => counted(f, n, key, 0, &mut out.v4).map(|_| ()),
    })
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    single_file::boxed(SourceFile::new(&s.procfs, "net/rpc/nfs"), parse_into, write)
}

/// The families of one read of the file.
fn write(parsed: &ClientStats, enc: &mut Encoder) {
    let p = &parsed;
    enc.family(&PACKETS);
    enc.sample(&PACKETS, &[("protocol", "udp")], p.net[1]);
    enc.sample(&PACKETS, &[("protocol", "tcp")], p.net[2]);
    for (desc, v) in [
        (&CONNECTIONS, p.net[3]),
        (&RPCS, p.rpc[0]),
        (&RETRANSMISSIONS, p.rpc[1]),
        (&AUTH_REFRESHES, p.rpc[2]),
    ] {
        enc.family(desc);
        enc.sample(desc, &[], v);
    }
    enc.family(&REQUESTS);
    let versions: [(&str, &[&str], &[u64]); 3] = [
        ("2", &V2_PROCEDURES, &p.v2),
        ("3", &V3_PROCEDURES, &p.v3),
        ("4", &V4_PROCEDURES, &p.v4),
    ];
    for (proto, names, values) in versions {
        for (method, v) in names.iter().zip(values) {
            enc.sample(&REQUESTS, &[("proto", proto), ("method", method)], *v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::{fixture, render};

    fn parse(s: &str) -> Result<ClientStats, ParseError> {
        parse_fresh(s, parse_into)
    }

    #[test]
    fn parses_the_fixture() {
        let text = std::fs::read_to_string(fixture("proc").join("net/rpc/nfs")).unwrap();
        let p = parse(&text).unwrap();
        assert_eq!(p.net, [3_204_019, 0, 3_204_019, 1_291]);
        assert_eq!(p.rpc, [3_203_996, 57, 3_202_912]);
        // No proc2 line (a kernel without NFSv2): zeros.
        assert_eq!(p.v2, [0; 18]);
        assert_eq!(
            p.v3[V3_PROCEDURES.iter().position(|m| *m == "GetAttr").unwrap()],
            7
        );
        // The fixture's proc4 has 69 values; the first 59 are named.
        assert_eq!(p.v4[1], 1_298_113, "Read");
        assert_eq!(p.v4[58], 4, "Clone");
    }

    #[test]
    fn older_kernels_have_fewer_v4_operations() {
        let p = parse("net 1 1 0 0\nrpc 5 0 0\nproc4 3 1 2 3\n").unwrap();
        assert_eq!(&p.v4[..4], &[1, 2, 3, 0]);
        assert_eq!(p.v4[3..], [0; 56]);
    }

    #[test]
    fn malformed() {
        let ok = "net 1 1 0 0\nrpc 5 0 0\n";
        assert!(parse(ok).is_ok());
        let e = parse("net 1 1 0 0\nrpc 5 0 0\nnfs4 2 1 1\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.msg.contains("unknown NFS metric line"), "{e}");
        assert_eq!(parse("net 1 1 0 0\nrpc 5 0\n").unwrap_err().line, 2);
        let e = parse(&format!("{ok}proc3 2 1 1\n")).unwrap_err();
        assert!(e.msg.contains("at least 22"), "{e}");
        let e = parse(&format!("{ok}proc4 4 1 1\n")).unwrap_err();
        assert!(e.msg.contains("says 4 procedures but has 2"), "{e}");
        let e = parse(&format!("{ok}rpc 1 1 1\n")).unwrap_err();
        assert_eq!((e.line, e.msg.as_str()), (3, "a second \"rpc\" line"));
        let e = parse("net 1 1 0 0\n").unwrap_err();
        assert_eq!((e.line, e.msg.as_str()), (2, "no \"rpc\" line"));
        assert!(parse("").is_err());
        assert_eq!(parse("net 1 1 0 0\n\nrpc 5 0 0\n").unwrap_err().line, 2);
        assert!(parse("net 1 1 0 18446744073709551616\nrpc 5 0 0\n").is_err());
        assert!(parse("net 1 -1 0 0\nrpc 5 0 0\n").is_err());
    }

    #[test]
    fn collector_on_fixture() {
        let s = Settings::with_roots(fixture("proc"), "/nonexistent");
        let out = render(build(&s).as_mut()).unwrap();
        assert!(out.starts_with(
            "# HELP node_nfs_packets_total Total NFSd network packets (sent+received) by protocol type.\n\
             # TYPE node_nfs_packets_total counter\n\
             node_nfs_packets_total{protocol=\"udp\"} 0\n\
             node_nfs_packets_total{protocol=\"tcp\"} 3204019\n"
        ), "{out}");
        assert!(
            out.contains("node_nfs_rpc_retransmissions_total 57\n"),
            "{out}"
        );
        assert!(out.contains("node_nfs_requests_total{proto=\"2\",method=\"Null\"} 0\n"));
        assert!(out.contains("node_nfs_requests_total{proto=\"4\",method=\"Read\"} 1298113\n"));
        let requests = out
            .lines()
            .filter(|l| l.starts_with("node_nfs_requests_total{"));
        assert_eq!(requests.count(), 18 + 22 + 59);
        let absent = Settings::with_roots("/nonexistent-usescope", "/nonexistent");
        assert_eq!(render(build(&absent).as_mut()).unwrap(), "");
    }
}
