//! /proc/net/ip_vs_stats and /proc/net/ip_vs → `node_ipvs_*`, the Linux
//! IP Virtual Server (the load balancer behind kube-proxy's IPVS mode),
//! node_exporter's ipvs collector (collector/ipvs_linux.go, parsed there by
//! procfs's `IPVSStats` and `IPVSBackendStatus`).
//!
//! Totals come from ip_vs_stats; per backend (a real server behind a
//! virtual service) the active and inactive connections and the weight
//! come from ip_vs. A weight of 0 is a drained backend; a service with no
//! backend lines has no series at all, as in node_exporter.
//!
//! `--collector.ipvs.backend-labels` picks the backend labels; backends
//! whose chosen labels are equal are summed, as node_exporter sums them.
//!
//! Without the ip_vs module there is no ip_vs_stats: no series, one failed
//! open per scrape.

use std::cmp::Ordering;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::collectors::{Flag, FlagKind, Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError, excerpt};
use crate::kernel::parse::{fields, hex_u64_field, is_blank, lines, parse_fresh, u64_field};
use crate::kernel::source::SourceFile;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

const BACKEND_LABELS_FLAG: &str = "collector.ipvs.backend-labels";

/// node_exporter's backend labels, in its order.
const LABELS: [&str; 6] = [
    "local_address",
    "local_port",
    "remote_address",
    "remote_port",
    "proto",
    "local_mark",
];

pub const SPEC: Spec = Spec {
    name: "ipvs",
    default_enabled: true,
    help: "IPVS connection totals and per-backend connections and weights from /proc/net/ip_vs*",
    flags: &[Flag {
        name: BACKEND_LABELS_FLAG,
        help: "Comma separated list for IPVS backend stats labels.",
        default: Some("local_address,local_port,remote_address,remote_port,proto,local_mark"),
        kind: FlagKind::Subset(&LABELS),
        conflicts_with: None,
    }],
    build,
    sources: &[
        Source::proc("net/ip_vs_stats", "ipvs_stats"),
        Source::proc("net/ip_vs", "ipvs_backends"),
    ],
    parsers: &[
        Parser::numeric("ipvs_stats", |t| parse_fresh(t, parse_stats_into).map(drop)),
        Parser::numeric("ipvs_backends", |t| {
            parse_fresh(t, parse_backends_into).map(drop)
        }),
    ],
};

const CONNECTIONS: Desc = Desc::counter(
    "node_ipvs_connections_total",
    "The total number of connections made.",
);
const IN_PACKETS: Desc = Desc::counter(
    "node_ipvs_incoming_packets_total",
    "The total number of incoming packets.",
);
const OUT_PACKETS: Desc = Desc::counter(
    "node_ipvs_outgoing_packets_total",
    "The total number of outgoing packets.",
);
const IN_BYTES: Desc = Desc::counter(
    "node_ipvs_incoming_bytes_total",
    "The total amount of incoming data.",
);
const OUT_BYTES: Desc = Desc::counter(
    "node_ipvs_outgoing_bytes_total",
    "The total amount of outgoing data.",
);
const ACTIVE: Desc = Desc::gauge(
    "node_ipvs_backend_connections_active",
    "The current active connections by local and remote address.",
);
const INACTIVE: Desc = Desc::gauge(
    "node_ipvs_backend_connections_inactive",
    "The current inactive connections by local and remote address.",
);
const WEIGHT: Desc = Desc::gauge(
    "node_ipvs_backend_weight",
    "The current backend weight by local and remote address.",
);

/// ip_vs_stats' totals: connections, incoming and outgoing packets,
/// incoming and outgoing bytes.
pub type Totals = [u64; 5];

/// Parses /proc/net/ip_vs_stats (ip_vs_stats_show): two header lines, the
/// five totals in hex, a blank line, the rates' header and the five rates
/// per second in hex (checked, not exported, as in node_exporter).
pub fn parse_stats_into(s: &str, out: &mut Totals) -> Result<(), ParseError> {
    let mut rates = [0; 5];
    let mut n = 0;
    for (i, line) in lines(s).enumerate() {
        n = i + 1;
        let first = fields(line).next();
        match n {
            1 => expect_header(first, "Total", n)?,
            2 => expect_header(first, "Conns", n)?,
            3 => five_hex(line, n, out)?,
            4 if is_blank(line) => {}
            4 => return Err(ParseError::new(n, "expected a blank line")),
            5 => expect_header(first, "Conns/s", n)?,
            6 => five_hex(line, n, &mut rates)?,
            _ => return Err(ParseError::new(n, "unexpected line after the rates")),
        }
    }
    if n < 6 {
        return Err(ParseError::new(n + 1, "file ends early: expected 6 lines"));
    }
    Ok(())
}

fn expect_header(first: Option<&str>, word: &str, line: usize) -> Result<(), ParseError> {
    match first {
        Some(w) if w == word => Ok(()),
        other => Err(ParseError::new(
            line,
            format!(
                "expected a header starting {word:?}, found {}",
                excerpt(other.unwrap_or(""))
            ),
        )),
    }
}

fn five_hex(line: &str, n: usize, out: &mut [u64; 5]) -> Result<(), ParseError> {
    const WHAT: [&str; 5] = [
        "connections",
        "incoming packets",
        "outgoing packets",
        "incoming bytes",
        "outgoing bytes",
    ];
    let mut f = fields(line);
    for (slot, what) in out.iter_mut().zip(WHAT) {
        let tok = f
            .next()
            .ok_or_else(|| ParseError::new(n, format!("missing field {what}")))?;
        *slot = hex_u64_field(tok, n, what)?;
    }
    match f.next() {
        None => Ok(()),
        Some(extra) => Err(ParseError::new(
            n,
            format!("unexpected extra field {}", excerpt(extra)),
        )),
    }
}

/// A service or backend address; FWM services have none (label `""`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Addr {
    #[default]
    None,
    V4(Ipv4Addr),
    V6(Ipv6Addr),
}

impl Addr {
    /// Writes the address as Go's `net.IP.String` does (node_exporter's
    /// label): dotted IPv4, RFC 5952 IPv6. An IPv4-mapped IPv6 address is
    /// stored as [`Addr::V4`], which Go prints the same way.
    fn write(self, out: &mut String) {
        out.clear();
        // Writing to a String cannot fail.
        let _ = match self {
            Addr::None => Ok(()),
            Addr::V4(a) => write!(out, "{a}"),
            Addr::V6(a) => write!(out, "{a}"),
        };
    }
}

/// One backend line with the service it belongs to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Backend {
    /// `TCP`, `UDP`, `SCTP` or `FWM`.
    pub proto: &'static str,
    pub local_address: Addr,
    pub local_port: u16,
    /// The firewall mark of an FWM service, as the kernel prints it.
    pub local_mark: Option<u32>,
    pub remote_address: Addr,
    pub remote_port: u16,
    pub weight: u64,
    pub active: u64,
    pub inactive: u64,
}

const PROTOCOLS: [&str; 4] = ["TCP", "UDP", "SCTP", "FWM"];

/// Parses /proc/net/ip_vs (ip_vs_info_seq_show): three header lines, then
/// each virtual service (`TCP  0A600001:01BB rr`, `FWM  00000064 wlc`,
/// IPv6 as `[...]:PORT`, optional flags after the scheduler) followed by
/// its backends (`  -> ADDR:PORT  Forward Weight ActiveConn InActConn`).
/// A service without backends adds nothing.
pub fn parse_backends_into(s: &str, out: &mut Vec<Backend>) -> Result<(), ParseError> {
    out.clear();
    let mut service: Option<Backend> = None;
    for (i, line) in lines(s).enumerate() {
        let n = i + 1;
        let mut f = fields(line);
        let Some(first) = f.next() else {
            return Err(ParseError::new(n, "empty line"));
        };
        let second = f.next();
        if first == "IP" || first == "Prot" || second == Some("RemoteAddress:Port") {
            if n > 3 {
                return Err(ParseError::new(n, "a header line after the first three"));
            }
            continue;
        }
        if first == "->" {
            let Some(svc) = service else {
                return Err(ParseError::new(n, "a backend before any service"));
            };
            let (remote_address, remote_port) = address_port(second, n)?;
            let _forward = f
                .next()
                .ok_or_else(|| ParseError::new(n, "missing field forward"))?;
            let mut number = |what| {
                let tok = f
                    .next()
                    .ok_or_else(|| ParseError::new(n, format!("missing field {what}")))?;
                u64_field(tok, n, what)
            };
            let backend = Backend {
                remote_address,
                remote_port,
                weight: number("weight")?,
                active: number("active connections")?,
                inactive: number("inactive connections")?,
                ..svc
            };
            if let Some(extra) = f.next() {
                return Err(ParseError::new(
                    n,
                    format!("unexpected extra field {}", excerpt(extra)),
                ));
            }
            out.push(backend);
            continue;
        }
        let Some(proto) = PROTOCOLS.iter().find(|p| **p == first) else {
            return Err(ParseError::new(
                n,
                format!("expected a service or a backend, found {}", excerpt(first)),
            ));
        };
        let mut svc = Backend {
            proto,
            ..Backend::default()
        };
        if *proto == "FWM" {
            svc.local_mark = Some(mark(second, n)?);
        } else {
            (svc.local_address, svc.local_port) = address_port(second, n)?;
        }
        // The scheduler and optional flags (`persistent 360 FFFFFFFF`,
        // `ops`) follow; node_exporter reads neither.
        if f.next().is_none() {
            return Err(ParseError::new(n, "missing field scheduler"));
        }
        service = Some(svc);
    }
    Ok(())
}

/// An FWM service's mark: eight upper-case hex digits (`%08X`), so that
/// printing it back gives node_exporter's label, the text itself.
fn mark(tok: Option<&str>, n: usize) -> Result<u32, ParseError> {
    let tok = tok.ok_or_else(|| ParseError::new(n, "missing field mark"))?;
    if tok.len() != 8
        || !tok
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b))
    {
        return Err(ParseError::new(
            n,
            format!("mark: expected 8 hex digits, found {}", excerpt(tok)),
        ));
    }
    u32::from_str_radix(tok, 16).map_err(|e| ParseError::new(n, format!("mark: {e}")))
}

/// `C0A80016:0CEA` (IPv4 in hex) or `[2001:0db8:...:0001]:0050` (IPv6 as
/// the kernel's `%pI6`, eight groups of four digits), port in hex.
fn address_port(tok: Option<&str>, n: usize) -> Result<(Addr, u16), ParseError> {
    let tok = tok.ok_or_else(|| ParseError::new(n, "missing field address:port"))?;
    let bad = || ParseError::new(n, format!("invalid address:port {}", excerpt(tok)));
    let (addr, port) = tok.rsplit_once(':').ok_or_else(bad)?;
    if port.len() != 4 {
        return Err(bad());
    }
    let port = u16::from_str_radix(port, 16).map_err(|_| bad())?;
    let addr = if let Some(v6) = addr.strip_prefix('[').and_then(|a| a.strip_suffix(']')) {
        if v6.len() != 39 {
            return Err(bad());
        }
        let a: Ipv6Addr = v6.parse().map_err(|_| bad())?;
        match a.to_ipv4_mapped() {
            Some(v4) => Addr::V4(v4),
            None => Addr::V6(a),
        }
    } else {
        if addr.len() != 8 {
            return Err(bad());
        }
        Addr::V4(Ipv4Addr::from(
            u32::from_str_radix(addr, 16).map_err(|_| bad())?,
        ))
    };
    Ok((addr, port))
}

/// Which of [`LABELS`] are on, from the flag.
#[derive(Clone, Copy, Debug, Default)]
struct Chosen([bool; 6]);

impl Chosen {
    fn from_flag(names: &[String]) -> Chosen {
        let mut on = [false; 6];
        for (slot, label) in on.iter_mut().zip(LABELS) {
            *slot = names.iter().any(|n| n == label);
        }
        Chosen(on)
    }

    /// `b` with the labels that are off blanked, so that backends whose
    /// chosen labels agree compare equal.
    fn key(self, b: &Backend) -> Backend {
        let [la, lp, ra, rp, proto, mark] = self.0;
        Backend {
            local_address: if la { b.local_address } else { Addr::None },
            local_port: if lp { b.local_port } else { 0 },
            remote_address: if ra { b.remote_address } else { Addr::None },
            remote_port: if rp { b.remote_port } else { 0 },
            proto: if proto { b.proto } else { "" },
            local_mark: if mark { b.local_mark } else { None },
            ..*b
        }
    }
}

fn compare_labels(a: &Backend, b: &Backend) -> Ordering {
    (
        a.local_address,
        a.local_port,
        a.remote_address,
        a.remote_port,
        a.proto,
        a.local_mark,
    )
        .cmp(&(
            b.local_address,
            b.local_port,
            b.remote_address,
            b.remote_port,
            b.proto,
            b.local_mark,
        ))
}

pub struct IpvsCollector {
    stats_file: SourceFile,
    backends_file: SourceFile,
    totals: Totals,
    backends: Vec<Backend>,
    chosen: Chosen,
    /// Label text, reused: two addresses, two ports, the mark.
    text: [String; 5],
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(IpvsCollector {
        stats_file: SourceFile::new(&s.procfs, "net/ip_vs_stats"),
        backends_file: SourceFile::new(&s.procfs, "net/ip_vs"),
        totals: [0; 5],
        backends: Vec::new(),
        chosen: Chosen::from_flag(s.texts(BACKEND_LABELS_FLAG)),
        text: Default::default(),
    })
}

impl IpvsCollector {
    /// Blanks the labels that are off and sums backends whose labels are
    /// then equal, leaving them sorted by label.
    fn sum_by_chosen_labels(&mut self) {
        let chosen = self.chosen;
        for b in &mut self.backends {
            *b = chosen.key(b);
        }
        self.backends.sort_by(compare_labels);
        self.backends.dedup_by(|later, kept| {
            if compare_labels(later, kept) != Ordering::Equal {
                return false;
            }
            kept.weight = kept.weight.saturating_add(later.weight);
            kept.active = kept.active.saturating_add(later.active);
            kept.inactive = kept.inactive.saturating_add(later.inactive);
            true
        });
    }

    fn write_backends(&mut self, enc: &mut Encoder, desc: &Desc, value: fn(&Backend) -> u64) {
        enc.family(desc);
        let [local, local_port, remote, remote_port, mark] = &mut self.text;
        for b in &self.backends {
            b.local_address.write(local);
            b.remote_address.write(remote);
            for (text, port) in [
                (&mut *local_port, b.local_port),
                (&mut *remote_port, b.remote_port),
            ] {
                text.clear();
                let _ = write!(text, "{port}");
            }
            mark.clear();
            if let Some(m) = b.local_mark {
                let _ = write!(mark, "{m:08X}");
            }
            let all: [(&str, &str); 6] = [
                (LABELS[0], local),
                (LABELS[1], local_port),
                (LABELS[2], remote),
                (LABELS[3], remote_port),
                (LABELS[4], b.proto),
                (LABELS[5], mark),
            ];
            let mut labels: [(&str, &str); 6] = [("", ""); 6];
            let mut k = 0;
            for (pair, on) in all.into_iter().zip(self.chosen.0) {
                if on {
                    labels[k] = pair;
                    k += 1;
                }
            }
            enc.sample(desc, &labels[..k], value(b));
        }
    }
}

impl Collector for IpvsCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let totals = &mut self.totals;
        if self
            .stats_file
            .parse_with(|t| parse_stats_into(t, totals))?
            .is_none()
        {
            return Ok(()); // no ip_vs module
        }
        let backends = &mut self.backends;
        if self
            .backends_file
            .parse_with(|t| parse_backends_into(t, backends))?
            .is_none()
        {
            self.backends.clear();
        }
        for (desc, v) in [
            &CONNECTIONS,
            &IN_PACKETS,
            &OUT_PACKETS,
            &IN_BYTES,
            &OUT_BYTES,
        ]
        .into_iter()
        .zip(self.totals)
        {
            enc.family(desc);
            enc.sample(desc, &[], v);
        }
        if self.backends.is_empty() {
            return Ok(());
        }
        self.sum_by_chosen_labels();
        self.write_backends(enc, &ACTIVE, |b| b.active);
        self.write_backends(enc, &INACTIVE, |b| b.inactive);
        self.write_backends(enc, &WEIGHT, |b| b.weight);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::FlagValue;
    use crate::collectors::test_support::{fixture, render};

    const STATS: &str = "   Total Incoming Outgoing         Incoming         Outgoing\n   Conns  Packets  Packets            Bytes            Bytes\n 16AA370 E33656E5        0     51D8C8883AB3                0\n\n Conns/s   Pkts/s   Pkts/s          Bytes/s          Bytes/s\n       4    1FB3C        0          1282A8F                0\n";

    #[test]
    fn stats() {
        let t = parse_fresh(STATS, parse_stats_into).unwrap();
        assert_eq!(t, [23_765_872, 3_811_989_221, 0, 89_991_519_156_915, 0]);
        let cut = STATS.lines().take(3).collect::<Vec<_>>().join("\n");
        assert_eq!(parse_fresh(&cut, parse_stats_into).unwrap_err().line, 4);
        let bad = STATS.replace("E33656E5", "E33656G5");
        assert_eq!(parse_fresh(&bad, parse_stats_into).unwrap_err().line, 3);
        let more = STATS.replace(" 16AA370", " 16AA370 1");
        assert!(
            parse_fresh(&more, parse_stats_into)
                .unwrap_err()
                .msg
                .contains("extra")
        );
        let over = STATS.replace("51D8C8883AB3", "10000000000000000");
        assert!(parse_fresh(&over, parse_stats_into).is_err());
        assert!(parse_fresh("", parse_stats_into).is_err());
    }

    #[test]
    fn backends_of_the_fixture() {
        let text = std::fs::read_to_string(fixture("proc").join("net/ip_vs")).unwrap();
        let b = parse_fresh(&text, parse_backends_into).unwrap();
        assert_eq!(b.len(), 9);
        assert_eq!(
            b[0],
            Backend {
                proto: "TCP",
                local_address: Addr::V4(Ipv4Addr::new(10, 96, 0, 1)),
                local_port: 443,
                local_mark: None,
                remote_address: Addr::V4(Ipv4Addr::new(192, 168, 1, 10)),
                remote_port: 6443,
                weight: 1,
                active: 12,
                inactive: 40,
            }
        );
        // The service 10.96.45.7:80 has no backends: nothing for it.
        assert!(
            !b.iter()
                .any(|b| b.local_address == Addr::V4(Ipv4Addr::new(10, 96, 45, 7)))
        );
        let fwm = b.iter().find(|b| b.proto == "FWM").unwrap();
        assert_eq!((fwm.local_mark, fwm.local_address), (Some(100), Addr::None));
        assert!(b.iter().any(|b| matches!(b.remote_address, Addr::V6(_))));
    }

    #[test]
    fn malformed_backends() {
        let head = "IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n";
        let parse = |body: &str| parse_fresh(&format!("{head}{body}"), parse_backends_into);
        assert!(parse("TCP  0A600001:01BB rr\n  -> 0A000001:0050 Masq 1 0 0\n").is_ok());
        let e = parse("  -> 0A000001:0050 Masq 1 0 0\n").unwrap_err();
        assert_eq!(
            (e.line, e.msg.as_str()),
            (4, "a backend before any service")
        );
        let e = parse("TCP  0A600001:01BB rr\n  -> 0A000001:0050 Masq 1 0\n").unwrap_err();
        assert_eq!(e.line, 5);
        assert!(e.msg.contains("inactive"), "{e}");
        assert!(parse("TCP  0A600001:1BB rr\n").is_err());
        assert!(parse("TCP  0A60001:01BB rr\n").is_err());
        assert!(parse("TCP  [fd00::1]:0050 rr\n").is_err());
        assert!(
            parse("TCP  0A600001:01BB\n")
                .unwrap_err()
                .msg
                .contains("scheduler")
        );
        assert!(parse("FWM  64 wlc\n").unwrap_err().msg.contains("mark"));
        assert!(parse("FWM  0000006a wlc\n").is_err(), "lower-case hex");
        assert!(
            parse("ICMP 0A600001:01BB rr\n")
                .unwrap_err()
                .msg
                .contains("expected a service")
        );
        assert!(parse("x\n").is_err());
        assert!(parse("\n").is_err());
        let e = parse("TCP  0A600001:01BB rr\n  -> 0A000001:0050 Masq 1 0 18446744073709551616\n");
        assert!(e.is_err());
    }

    #[test]
    fn addresses_print_as_go_does() {
        let text = |tok: &str| {
            let mut s = String::new();
            address_port(Some(tok), 1).unwrap().0.write(&mut s);
            s
        };
        assert_eq!(text("C0A80016:0CEA"), "192.168.0.22");
        assert_eq!(
            text("[fd00:0000:0000:0000:0000:0000:0000:000a]:0050"),
            "fd00::a"
        );
        assert_eq!(
            text("[2001:0db8:0000:0001:0000:0000:0000:0001]:0050"),
            "2001:db8:0:1::1"
        );
        assert_eq!(
            text("[2001:0db8:0000:0001:0001:0001:0001:0001]:0050"),
            "2001:db8:0:1:1:1:1:1"
        );
        assert_eq!(
            text("[0000:0000:0000:0000:0000:ffff:c0a8:0001]:0050"),
            "192.168.0.1"
        );
    }

    fn collector(labels: &str) -> Box<dyn Collector> {
        let mut s = Settings::with_roots(fixture("proc"), "/nonexistent");
        let v = FlagValue::parse(FlagKind::Subset(&LABELS), labels).unwrap();
        s.set(BACKEND_LABELS_FLAG, Some(v));
        build(&s)
    }

    #[test]
    fn collector_on_fixture() {
        let s = Settings::with_roots(fixture("proc"), "/nonexistent");
        let out = render(build(&s).as_mut()).unwrap();
        for line in [
            "node_ipvs_connections_total 23765872\n",
            "node_ipvs_incoming_bytes_total 89991519156915\n",
            "node_ipvs_backend_connections_active{local_address=\"10.96.0.1\",local_port=\"443\",remote_address=\"192.168.1.10\",remote_port=\"6443\",proto=\"TCP\",local_mark=\"\"} 12\n",
            "node_ipvs_backend_weight{local_address=\"\",local_port=\"0\",remote_address=\"10.244.1.7\",remote_port=\"8080\",proto=\"FWM\",local_mark=\"00000064\"} 0\n",
            "node_ipvs_backend_connections_inactive{local_address=\"fd00::a\",local_port=\"80\",remote_address=\"fd00:1::5\",remote_port=\"8080\",proto=\"TCP\",local_mark=\"\"} 3\n",
        ] {
            assert!(out.contains(line), "{line} in\n{out}");
        }
        assert_eq!(out.matches("node_ipvs_backend_weight{").count(), 9);
        assert_eq!(render(build(&s).as_mut()).unwrap(), out);
        let absent = Settings::with_roots("/nonexistent-usescope", "/nonexistent");
        assert_eq!(render(build(&absent).as_mut()).unwrap(), "");
    }

    #[test]
    fn fewer_labels_sum_the_backends() {
        let out = render(collector("proto").as_mut()).unwrap();
        let weights: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("node_ipvs_backend_weight"))
            .collect();
        assert_eq!(
            weights,
            [
                "node_ipvs_backend_weight{proto=\"FWM\"} 100",
                "node_ipvs_backend_weight{proto=\"TCP\"} 4",
                "node_ipvs_backend_weight{proto=\"UDP\"} 2",
            ]
        );
        let out = render(collector("").as_mut()).unwrap();
        assert!(out.contains("node_ipvs_backend_weight 106\n"), "{out}");
    }

    #[test]
    fn backend_labels_flag() {
        let parse = |raw| FlagValue::parse(FlagKind::Subset(&LABELS), raw);
        match parse("proto,,local_address,proto").unwrap() {
            FlagValue::TextList(v) => assert_eq!(v, ["local_address", "proto"]),
            other => panic!("{other:?}"),
        }
        let e = parse("proto,zone,cluster").unwrap_err();
        assert!(e.contains("\"cluster, zone\""), "{e}");
    }
}
