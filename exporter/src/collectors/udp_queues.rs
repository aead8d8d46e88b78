//! /proc/net/udp and /proc/net/udp6 → `node_udp_queues{ip,queue}`,
//! node_exporter's udp_queues collector (collector/udp_queues_linux.go,
//! prometheus/procfs net_ip_socket.go).
//!
//! Each socket line carries the bytes queued in the kernel for it,
//! `tx_queue:rx_queue` in hex; the collector sums them over every socket.
//! A receive queue that keeps growing is the saturation signal of the USE
//! method for UDP: an application that cannot keep up, and drops
//! (`node_netstat_Udp_RcvbufErrors`) soon after.
//!
//! Each file is handled on its own: a kernel without IPv6 has no udp6, and
//! then only the `ip="v4"` series are exported. node_exporter reports the
//! collector as failed (no data) only when both are missing; usescope
//! exports nothing then and succeeds, as for every absent source.

use crate::collector::Collector;
use crate::collectors::{Parser, Settings, Source, Spec};
use crate::error::{CollectError, ParseError, excerpt};
use crate::exposition::{Desc, Encoder};
use crate::parse::{fields, lines, parse_fresh, u64_field};
use crate::source::SourceFile;

const UDP: &str = "net/udp";
const UDP6: &str = "net/udp6";

pub const SPEC: Spec = Spec {
    name: "udp_queues",
    default_enabled: true,
    help: "Bytes queued on UDP sockets from /proc/net/udp and /proc/net/udp6",
    flags: &[],
    build,
    sources: &[
        Source::proc(UDP, "udp_queues"),
        Source::proc(UDP6, "udp_queues"),
    ],
    parsers: &[Parser::numeric("udp_queues", |t| {
        parse_fresh(t, parse_into).map(drop)
    })],
};

const QUEUES: Desc = Desc::gauge(
    "node_udp_queues",
    "Number of allocated memory in the kernel for UDP datagrams in bytes.",
);

/// The sums over every socket of one file.
#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
pub struct Queues {
    pub tx: u64,
    pub rx: u64,
    pub sockets: u64,
}

/// Fields of a socket line: `sl local rem st tx:rx tr:when retrnsmt uid
/// timeout inode ref pointer drops` (udp4_format_sock, udp6_sock_seq_show).
const FIELDS: usize = 13;

/// Parses the header line and every socket line. Besides the queues, the
/// fields prometheus/procfs checks are checked (slot, addresses, state,
/// uid, inode, drops), so a file that is not a UDP socket table fails.
pub fn parse_into(s: &str, out: &mut Queues) -> Result<(), ParseError> {
    *out = Queues::default();
    let mut lines = lines(s);
    let header = lines
        .next()
        .ok_or_else(|| ParseError::new(1, "empty file"))?;
    if fields(header).next() != Some("sl") || !header.contains("tx_queue rx_queue") {
        return Err(ParseError::new(
            1,
            format!("expected the \"sl local_address ...\" header, found {}", excerpt(header)),
        ));
    }
    for (i, line) in lines.enumerate() {
        let n = i + 2;
        let mut f = [""; FIELDS];
        let mut count = 0;
        for tok in fields(line) {
            if let Some(slot) = f.get_mut(count) {
                *slot = tok;
            }
            count += 1;
        }
        if count != FIELDS {
            return Err(ParseError::new(
                n,
                format!("{count} fields, {FIELDS} expected"),
            ));
        }
        let sl = f[0]
            .strip_suffix(':')
            .ok_or_else(|| ParseError::new(n, format!("sl: expected N:, found {}", excerpt(f[0]))))?;
        u64_field(sl, n, "sl")?;
        address(f[1], n, "local_address")?;
        address(f[2], n, "rem_address")?;
        hex(f[3], n, "st")?;
        let (tx, rx) = f[4].split_once(':').ok_or_else(|| {
            ParseError::new(n, format!("tx_queue:rx_queue: no ':' in {}", excerpt(f[4])))
        })?;
        let (tx, rx) = (hex(tx, n, "tx_queue")?, hex(rx, n, "rx_queue")?);
        u64_field(f[7], n, "uid")?;
        u64_field(f[9], n, "inode")?;
        u64_field(f[12], n, "drops")?;
        out.tx = out
            .tx
            .checked_add(tx)
            .ok_or_else(|| ParseError::new(n, "tx_queue: the sum overflows"))?;
        out.rx = out
            .rx
            .checked_add(rx)
            .ok_or_else(|| ParseError::new(n, "rx_queue: the sum overflows"))?;
        out.sockets += 1;
    }
    Ok(())
}

/// A hex field as the kernel prints it (`%08X`, `%02X`).
fn hex(tok: &str, line: usize, what: &str) -> Result<u64, ParseError> {
    if tok.is_empty() || tok.len() > 16 || !tok.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ParseError::new(
            line,
            format!("{what}: invalid hex number {}", excerpt(tok)),
        ));
    }
    u64::from_str_radix(tok, 16)
        .map_err(|e| ParseError::new(line, format!("{what}: {e}")))
}

/// `0100007F:C504`: an IPv4 (8 hex digits) or IPv6 (32) address and a
/// hex port.
fn address(tok: &str, line: usize, what: &str) -> Result<(), ParseError> {
    let (ip, port) = tok
        .split_once(':')
        .ok_or_else(|| ParseError::new(line, format!("{what}: no ':' in {}", excerpt(tok))))?;
    if !(ip.len() == 8 || ip.len() == 32) || !ip.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ParseError::new(
            line,
            format!("{what}: invalid address {}", excerpt(ip)),
        ));
    }
    hex(port, line, what).map(drop)
}

pub struct UdpQueuesCollector {
    files: [(SourceFile, &'static str, Queues); 2],
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(UdpQueuesCollector {
        files: [
            (SourceFile::new(&s.procfs, UDP), "v4", Queues::default()),
            (SourceFile::new(&s.procfs, UDP6), "v6", Queues::default()),
        ],
    })
}

impl Collector for UdpQueuesCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let mut present = [false; 2];
        for ((file, _, parsed), present) in self.files.iter_mut().zip(&mut present) {
            *present = file.parse_with(|t| parse_into(t, parsed))?.is_some();
        }
        if present == [false, false] {
            return Ok(());
        }
        enc.family(&QUEUES);
        for ((_, ip, q), _) in self.files.iter().zip(present).filter(|(_, p)| *p) {
            enc.sample(&QUEUES, &[("ip", ip), ("queue", "tx")], q.tx);
            enc.sample(&QUEUES, &[("ip", ip), ("queue", "rx")], q.rx);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::{fixture, render};

    fn parse(s: &str) -> Result<Queues, ParseError> {
        parse_fresh(s, parse_into)
    }

    const HEADER: &str = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops            \n";

    #[test]
    fn captured_files() {
        let v4 = include_str!("../../tests/fixtures/proc/net/udp");
        assert_eq!(
            parse(v4).unwrap(),
            Queues {
                tx: 0,
                rx: 0x9c0,
                sockets: 3
            }
        );
        let v6 = include_str!("../../tests/fixtures/proc/net/udp6");
        assert_eq!(
            parse(v6).unwrap(),
            Queues {
                tx: 0,
                rx: 0x500,
                sockets: 3
            }
        );
        assert_eq!(parse(HEADER).unwrap(), Queues::default());
    }

    #[test]
    fn sums_both_queues() {
        let s = format!(
            "{HEADER} 1: 0100007F:0035 00000000:0000 07 0000000A:00000100 00:00000000 00000000   101        0 7 2 0000000000000000 0\n\
             2: 00000000:0044 00000000:0000 07 00000001:00000001 00:00000000 00000000     0        0 8 2 0000000000000000 5\n"
        );
        assert_eq!(
            parse(&s).unwrap(),
            Queues {
                tx: 11,
                rx: 0x101,
                sockets: 2
            }
        );
    }

    #[test]
    fn malformed() {
        assert_eq!(parse("").unwrap_err().line, 1);
        assert!(parse("garbage\n").unwrap_err().msg.contains("header"));
        let line = " 1: 0100007F:0035 00000000:0000 07 0000000A:00000100 00:00000000 00000000   101        0 7 2 0000000000000000 0";
        let e = parse(&format!("{HEADER}{line} 9\n")).unwrap_err();
        assert_eq!((e.line, e.msg.as_str()), (2, "14 fields, 13 expected"));
        let e = parse(&format!("{HEADER}{}\n", line.replace("0000000A:", "0000000A"))).unwrap_err();
        assert!(e.msg.contains("tx_queue:rx_queue"), "{}", e.msg);
        let e = parse(&format!("{HEADER}{}\n", line.replace(":00000100", ":0000010G"))).unwrap_err();
        assert!(e.msg.contains("rx_queue"), "{}", e.msg);
        let e = parse(&format!("{HEADER}{}\n", line.replace("0100007F:", "0100007:"))).unwrap_err();
        assert!(e.msg.contains("local_address"), "{}", e.msg);
        let e = parse(&format!("{HEADER}{}\n", line.replace(" 7 2 ", " 99999999999999999999 2 "))).unwrap_err();
        assert!(e.msg.contains("inode"), "{}", e.msg);
        let e = parse(&format!("{HEADER}{}\n", line.replace(" 1:", " 1"))).unwrap_err();
        assert!(e.msg.contains("sl"), "{}", e.msg);
    }

    #[test]
    fn collector_on_fixture() {
        let s = Settings::with_roots(fixture("proc"), "/nonexistent");
        assert_eq!(
            render(build(&s).as_mut()).unwrap(),
            "# HELP node_udp_queues Number of allocated memory in the kernel for UDP datagrams in bytes.\n\
             # TYPE node_udp_queues gauge\n\
             node_udp_queues{ip=\"v4\",queue=\"tx\"} 0\n\
             node_udp_queues{ip=\"v4\",queue=\"rx\"} 2496\n\
             node_udp_queues{ip=\"v6\",queue=\"tx\"} 0\n\
             node_udp_queues{ip=\"v6\",queue=\"rx\"} 1280\n"
        );
    }

    #[test]
    fn each_file_on_its_own() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("net")).unwrap();
        let mut c = build(&Settings::with_roots(dir.path(), "/nonexistent"));
        assert_eq!(render(c.as_mut()).unwrap(), "");
        std::fs::write(dir.path().join("net/udp6"), HEADER).unwrap();
        let out = render(c.as_mut()).unwrap();
        assert!(out.contains("node_udp_queues{ip=\"v6\",queue=\"rx\"} 0\n"), "{out}");
        assert!(!out.contains("v4"), "{out}");
        std::fs::write(dir.path().join("net/udp"), "x\n").unwrap();
        let e = render(c.as_mut()).unwrap_err();
        assert_eq!(e.file, dir.path().join("net/udp"));
    }
}
