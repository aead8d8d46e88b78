//! /proc/net/rpc/nfsd → `node_nfsd_*`, the kernel NFS server's counters,
//! node_exporter's nfsd collector (collector/nfsd_linux.go, parsed there by
//! procfs's `nfs.ParseServerRPCStats`).
//!
//! The file exists once the kernel NFS server (module `nfsd`) is loaded;
//! without it the collector emits nothing and succeeds, looking the file up
//! again only after a uevent or a mount (absence.rs). For the USE method: `server_threads` is the server's
//! capacity, `rpc_errors_total` (bad format, bad authentication, bad
//! client) its errors, and `requests_total` by operation its load.

use crate::collectors::single_file;
use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::ParseError;
use crate::kernel::parse::parse_fresh;
use crate::kernel::rpc_stats::{V2_PROCEDURES, V3_PROCEDURES, counted, each_line, fixed};
use crate::kernel::source::SourceFile;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const SPEC: Spec = Spec {
    name: "nfsd",
    default_enabled: true,
    help: "NFS server RPC statistics from /proc/net/rpc/nfsd",
    flags: &[],
    build,
    sources: &[Source::proc("net/rpc/nfsd", "nfsd")],
    parsers: &[Parser::numeric("nfsd", |t| {
        parse_fresh(t, parse_into).map(drop)
    })],
};

const CACHE_HITS: Desc = Desc::counter(
    "node_nfsd_reply_cache_hits_total",
    "Total number of NFSd Reply Cache hits (client lost server response).",
);
const CACHE_MISSES: Desc = Desc::counter(
    "node_nfsd_reply_cache_misses_total",
    "Total number of NFSd Reply Cache an operation that requires caching (idempotent).",
);
const CACHE_NOCACHE: Desc = Desc::counter(
    "node_nfsd_reply_cache_nocache_total",
    "Total number of NFSd Reply Cache non-idempotent operations (rename/delete/…).",
);
const STALE_HANDLES: Desc = Desc::counter(
    "node_nfsd_file_handles_stale_total",
    "Total number of NFSd stale file handles",
);
const BYTES_READ: Desc = Desc::counter("node_nfsd_disk_bytes_read_total", "Total NFSd bytes read.");
const BYTES_WRITTEN: Desc = Desc::counter(
    "node_nfsd_disk_bytes_written_total",
    "Total NFSd bytes written.",
);
const THREADS: Desc = Desc::gauge(
    "node_nfsd_server_threads",
    "Total number of NFSd kernel threads that are running.",
);
const RA_SIZE: Desc = Desc::gauge(
    "node_nfsd_read_ahead_cache_size_blocks",
    "How large the read ahead cache is in blocks.",
);
const RA_NOT_FOUND: Desc = Desc::counter(
    "node_nfsd_read_ahead_cache_not_found_total",
    "Total number of NFSd read ahead cache not found.",
);
const PACKETS: Desc = Desc::counter(
    "node_nfsd_packets_total",
    "Total NFSd network packets (sent+received) by protocol type.",
);
const CONNECTIONS: Desc = Desc::counter(
    "node_nfsd_connections_total",
    "Total number of NFSd TCP connections.",
);
const RPC_ERRORS: Desc = Desc::counter(
    "node_nfsd_rpc_errors_total",
    "Total number of NFSd RPC errors by error type.",
);
const RPCS: Desc = Desc::counter("node_nfsd_server_rpcs_total", "Total number of NFSd RPCs.");
const REQUESTS: Desc = Desc::counter(
    "node_nfsd_requests_total",
    "Total number NFSd Requests by method and protocol.",
);

/// NFSv4 operations by number (RFC 7530/8881 `OP_*`, the position in
/// `proc4ops`) up to RELEASE_LOCKOWNER (39), with node_exporter's names;
/// `""` for those it does not report (0-2 are unused, PUTPUBFH and
/// PUTROOTFH it leaves out).
const V4_OPERATIONS: [&str; 40] = [
    "",
    "",
    "",
    "Access",
    "Close",
    "Commit",
    "Create",
    "DelegPurge",
    "DelegReturn",
    "GetAttr",
    "GetFH",
    "Link",
    "Lock",
    "Lockt",
    "Locku",
    "Lookup",
    "LookupRoot",
    "Nverify",
    "Open",
    "OpenAttr",
    "OpenConfirm",
    "OpenDgrd",
    "PutFH",
    "",
    "",
    "Read",
    "ReadDir",
    "ReadLink",
    "Remove",
    "Rename",
    "Renew",
    "RestoreFH",
    "SaveFH",
    "SecInfo",
    "SetAttr",
    "SetClientID",
    "SetClientIDConfirm",
    "Verify",
    "Write",
    "RelLockOwner",
];

/// The server's counters; lines the file lacks are 0.
#[derive(Debug, PartialEq, Eq)]
pub struct ServerStats {
    /// `rc`: reply cache hits, misses, uncached (non-idempotent) replies.
    pub reply_cache: [u64; 3],
    /// `fh`: stale file handles, then four the kernel always writes as 0.
    pub file_handles: [u64; 5],
    /// `io`: bytes read, bytes written.
    pub io: [u64; 2],
    /// `th`: the number of server threads.
    pub threads: u64,
    /// `ra`: cache size, ten histogram buckets, not found (all 0 since the
    /// read-ahead cache was removed in Linux 5.x; the line stays).
    pub read_ahead: [u64; 12],
    /// `net`: packets, UDP packets, TCP packets, TCP connections.
    pub net: [u64; 4],
    /// `rpc`: calls, bad calls, of which bad format, bad auth, bad client.
    pub rpc: [u64; 5],
    pub v2: [u64; 18],
    pub v3: [u64; 22],
    /// `proc4`: NULL and COMPOUND calls (not exported).
    pub v4: [u64; 2],
    pub v4_ops: [u64; 40],
    /// `wdeleg_getattr`: GETATTRs answered from a write delegation.
    pub wdeleg_getattr: u64,
}

impl Default for ServerStats {
    fn default() -> ServerStats {
        ServerStats {
            reply_cache: [0; 3],
            file_handles: [0; 5],
            io: [0; 2],
            threads: 0,
            read_ahead: [0; 12],
            net: [0; 4],
            rpc: [0; 5],
            v2: [0; 18],
            v3: [0; 22],
            v4: [0; 2],
            v4_ops: [0; 40],
            wdeleg_getattr: 0,
        }
    }
}

/// The keys of /proc/net/rpc/nfsd; `net` and `rpc` first, which [`each_line`] requires.
const KEYS: [&str; 12] = [
    "net",
    "rpc",
    "rc",
    "fh",
    "io",
    "th",
    "ra",
    "proc2",
    "proc3",
    "proc4",
    "proc4ops",
    "wdeleg_getattr",
];

/// Parses /proc/net/rpc/nfsd. Every line is a known key (node_exporter
/// fails on any other, and so does this), at most once; `net` and `rpc`,
/// which the kernel always writes, must be there. Of `th` only the thread
/// count is read: the rest is a histogram the kernel stopped keeping (all
/// `0.000`), which node_exporter skips too.
pub fn parse_into(s: &str, out: &mut ServerStats) -> Result<(), ParseError> {
    *out = ServerStats::default();
    each_line(s, "NFSd", &KEYS, |key, n, f| match key {
        "net" => fixed(f, n, key, &mut out.net),
        "rpc" => fixed(f, n, key, &mut out.rpc),
        "rc" => fixed(f, n, key, &mut out.reply_cache),
        "fh" => fixed(f, n, key, &mut out.file_handles),
        "io" => fixed(f, n, key, &mut out.io),
        "th" => {
            let mut first_two = [0; 2];
            let mut two = f.take(2);
            fixed(&mut two, n, key, &mut first_two).map_err(|_| {
                ParseError::new(n, "th: expected the thread count and a second number")
            })?;
            out.threads = first_two[0];
            Ok(())
        }
        "ra" => fixed(f, n, key, &mut out.read_ahead),
        "proc2" => counted(f, n, key, 18, &mut out.v2).map(|_| ()),
        "proc3" => counted(f, n, key, 22, &mut out.v3).map(|_| ()),
        "proc4" => {
            let count = counted(f, n, key, 2, &mut out.v4)?;
            if count != 2 {
                return Err(ParseError::new(
                    n,
                    format!("proc4: {count} procedures, expected 2 (NULL and COMPOUND)"),
                ));
            }
            Ok(())
        }
        "proc4ops" => counted(f, n, key, 39, &mut out.v4_ops).map(|_| ()),
        _ => {
            let mut one = [0];
            fixed(f, n, key, &mut one)?;
            out.wdeleg_getattr = one[0];
            Ok(())
        }
    })
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    single_file::boxed(
        SourceFile::new(&s.procfs, "net/rpc/nfsd"),
        parse_into,
        write,
    )
}

/// The families of one read of the file.
fn write(parsed: &ServerStats, enc: &mut Encoder) {
    let p = &parsed;
    for (desc, v) in [
        (&CACHE_HITS, p.reply_cache[0]),
        (&CACHE_MISSES, p.reply_cache[1]),
        (&CACHE_NOCACHE, p.reply_cache[2]),
        (&STALE_HANDLES, p.file_handles[0]),
        (&BYTES_READ, p.io[0]),
        (&BYTES_WRITTEN, p.io[1]),
        (&THREADS, p.threads),
        (&RA_SIZE, p.read_ahead[0]),
        (&RA_NOT_FOUND, p.read_ahead[11]),
    ] {
        enc.family(desc);
        enc.sample(desc, &[], v);
    }
    enc.family(&PACKETS);
    enc.sample(&PACKETS, &[("proto", "udp")], p.net[1]);
    enc.sample(&PACKETS, &[("proto", "tcp")], p.net[2]);
    enc.family(&CONNECTIONS);
    enc.sample(&CONNECTIONS, &[], p.net[3]);
    enc.family(&RPC_ERRORS);
    for (error, v) in [("fmt", p.rpc[2]), ("auth", p.rpc[3]), ("cInt", p.rpc[4])] {
        enc.sample(&RPC_ERRORS, &[("error", error)], v);
    }
    enc.family(&RPCS);
    enc.sample(&RPCS, &[], p.rpc[0]);
    enc.family(&REQUESTS);
    // node_exporter leaves out NULL, the RPC ping, of v2 and v3.
    let versions: [(&str, &[&str], &[u64]); 3] = [
        ("2", &V2_PROCEDURES[1..], &p.v2[1..]),
        ("3", &V3_PROCEDURES[1..], &p.v3[1..]),
        ("4", &V4_OPERATIONS, &p.v4_ops),
    ];
    for (proto, names, values) in versions {
        for (method, v) in names.iter().zip(values) {
            if !method.is_empty() {
                enc.sample(&REQUESTS, &[("proto", proto), ("method", method)], *v);
            }
        }
    }
    enc.sample(
        &REQUESTS,
        &[("proto", "4"), ("method", "WdelegGetattr")],
        p.wdeleg_getattr,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::{fixture, render};

    fn parse(s: &str) -> Result<ServerStats, ParseError> {
        parse_fresh(s, parse_into)
    }

    #[test]
    fn parses_the_fixture() {
        let text = std::fs::read_to_string(fixture("proc").join("net/rpc/nfsd")).unwrap();
        let p = parse(&text).unwrap();
        assert_eq!(p.reply_cache, [0, 51205, 1893]);
        assert_eq!(p.threads, 8);
        // A server with RPC errors: 13 bad calls, 5 + 6 + 2 by kind.
        assert_eq!(p.rpc, [58409, 13, 5, 6, 2]);
        assert_eq!(p.v2, [0; 18], "no proc2 line (a kernel without NFSv2)");
        assert_eq!(p.v4, [2, 50810]);
        // The fixture's proc4ops has 76 operations; 0-39 are kept.
        assert_eq!(p.v4_ops[3], 9120, "ACCESS");
        assert_eq!(p.v4_ops[22], 50812, "PUTFH");
        assert_eq!(p.wdeleg_getattr, 4);
    }

    #[test]
    fn malformed() {
        let ok = "net 1 0 1 1\nrpc 1 0 0 0 0\n";
        assert!(parse(ok).is_ok());
        let e = parse(&format!("{ok}th 8\n")).unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.msg.contains("th:"), "{e}");
        assert!(parse(&format!("{ok}th x 0 0.000\n")).is_err());
        let e = parse(&format!("{ok}proc4 3 1 2 3\n")).unwrap_err();
        assert!(e.msg.contains("expected 2"), "{e}");
        let e = parse(&format!("{ok}proc4ops 2 1 2\n")).unwrap_err();
        assert!(e.msg.contains("at least 39"), "{e}");
        assert!(parse(&format!("{ok}ra 32 0 0\n")).is_err());
        assert!(parse(&format!("{ok}wdeleg_getattr\n")).is_err());
        assert!(parse(&format!("{ok}wdeleg_getattr 1 2\n")).is_err());
        let e = parse(&format!("{ok}xprt 1\n")).unwrap_err();
        assert!(e.msg.contains("unknown NFSd metric line"), "{e}");
        assert_eq!(
            parse("rc 0 0 0\nrpc 1 0 0 0 0\n").unwrap_err().msg,
            "no \"net\" line"
        );
        assert!(parse("net 1 0 1 1\nrpc 1 0 0 0 18446744073709551616\n").is_err());
    }

    #[test]
    fn collector_on_fixture() {
        let s = Settings::with_roots(fixture("proc"), "/nonexistent");
        let out = render(build(&s).as_mut()).unwrap();
        for line in [
            "node_nfsd_reply_cache_nocache_total 1893\n",
            "# HELP node_nfsd_file_handles_stale_total Total number of NFSd stale file handles\n",
            "node_nfsd_server_threads 8\n",
            "node_nfsd_packets_total{proto=\"tcp\"} 58422\n",
            "node_nfsd_rpc_errors_total{error=\"fmt\"} 5\n",
            "node_nfsd_rpc_errors_total{error=\"auth\"} 6\n",
            "node_nfsd_rpc_errors_total{error=\"cInt\"} 2\n",
            "node_nfsd_requests_total{proto=\"3\",method=\"GetAttr\"} 1211\n",
            "node_nfsd_requests_total{proto=\"4\",method=\"PutFH\"} 50812\n",
            "node_nfsd_requests_total{proto=\"4\",method=\"WdelegGetattr\"} 4\n",
        ] {
            assert!(out.contains(line), "{line} in\n{out}");
        }
        let requests = out
            .lines()
            .filter(|l| l.starts_with("node_nfsd_requests_total{"));
        assert_eq!(requests.count(), 17 + 21 + 35 + 1);
        let absent = Settings::with_roots("/nonexistent-usescope", "/nonexistent");
        assert_eq!(render(build(&absent).as_mut()).unwrap(), "");
    }
}
