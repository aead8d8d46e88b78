//! TCP sockets of the daemon's network namespace as the kernel's socket
//! diagnostics (NETLINK_SOCK_DIAG, inet_diag) report them, for two
//! incidents /proc shows badly:
//!
//! - **SYN floods**: request sockets in SYN_RECV
//!   (`usescope_tcp_syn_recv_sockets`) and the fullest listening port's
//!   SYN queue against its backlog (`usescope_tcp_syn_queue_fullest_ratio`).
//!   Past the backlog the kernel answers with SYN cookies
//!   (`node_netstat_TcpExt_SyncookiesSent`); a flood that stays below it
//!   shows only here.
//! - **Ephemeral port exhaustion**: `ip_local_port_range`
//!   (`usescope_tcp_local_port_range_ports`) against the sockets holding a
//!   local port in it. connect() may reuse a local port toward another
//!   destination, so it runs out per destination:
//!   `usescope_tcp_ephemeral_ports_used_max` is the most such sockets
//!   sharing one (local address, remote address, remote port). At the
//!   range's size the next connect() there fails with EADDRNOTAVAIL
//!   (counted by the tcpconnect probe).
//!
//! Why netlink and not /proc/net/tcp: /proc/net/tcp formats ~150 bytes per
//! socket, every socket, on every read (100 000 sockets: 15 MB of text).
//! inet_diag takes a state mask, so asking for SYN_RECV and LISTEN returns
//! only those, and a bytecode filter on the local port (`S_GE`/`S_LE`)
//! makes the kernel return only sockets whose port is in the range. The
//! kernel still walks its hash table, without formatting what it skips.
//! Request sockets never change state through `inet_sock_set_state`, so a
//! gauge kept by a tracepoint would not see them.
//!
//! Four dumps per scrape (SYN_RECV and LISTEN together, then the port
//! range; IPv4 and IPv6 each), read into one kept buffer. A dump that takes
//! longer than `--collector.tcpsockets.timeout` is cut short: the port
//! gauges then count what was read (a lower bound) and
//! `usescope_tcp_sockets_scan_complete` is 0.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::collectors::{Flag, FlagKind, Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError};
use crate::kernel::parse::{fields, lines, next_field, parse_fresh, u64_field};
use crate::kernel::source::SourceFile;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const SPEC: Spec = Spec {
    name: "tcpsockets",
    default_enabled: false,
    help: "TCP SYN_RECV sockets against listen backlogs, and ephemeral ports in use against ip_local_port_range, from netlink socket diagnostics (inet_diag)",
    flags: &[Flag {
        name: TIMEOUT,
        help: "Longest a scrape spends reading the socket table; a larger table is counted in part (usescope_tcp_sockets_scan_complete 0)",
        default: Some("1s"),
        kind: FlagKind::Duration,
        conflicts_with: None,
    }],
    build,
    sources: &[Source::proc(
        "sys/net/ipv4/ip_local_port_range",
        "tcpsockets_port_range",
    )],
    parsers: &[Parser::numeric("tcpsockets_port_range", |t| {
        parse_fresh(t, parse_port_range_into).map(drop)
    })],
};

/// `--collector.tcpsockets.timeout`.
pub const TIMEOUT: &str = "collector.tcpsockets.timeout";

const SYN_RECV: Desc = Desc::gauge(
    "usescope_tcp_syn_recv_sockets",
    "TCP request sockets in SYN_RECV (handshakes begun, not completed) in the daemon's network namespace.",
);
const SYN_QUEUE: Desc = Desc::gauge(
    "usescope_tcp_syn_queue_fullest_ratio",
    "SYN_RECV sockets of the listening port whose SYN queue is fullest, divided by its listen backlog (summed over its listeners); past 1 the kernel sends SYN cookies.",
);
const RANGE: Desc = Desc::gauge(
    "usescope_tcp_local_port_range_ports",
    "Ports in net.ipv4.ip_local_port_range, the ephemeral ports connect() picks from.",
);
const USED_MAX: Desc = Desc::gauge(
    "usescope_tcp_ephemeral_ports_used_max",
    "Most TCP sockets with a local port in ip_local_port_range toward one destination (same local address, remote address and port): at the range's size the next connect() there fails with EADDRNOTAVAIL.",
);
const IN_USE: Desc = Desc::gauge(
    "usescope_tcp_ephemeral_ports_in_use",
    "Distinct local ports in ip_local_port_range held by TCP sockets (any state but LISTEN and CLOSE).",
);
const COMPLETE: Desc = Desc::gauge(
    "usescope_tcp_sockets_scan_complete",
    "1 if this scrape read the whole socket table, 0 if it stopped at --collector.tcpsockets.timeout (the counts are then lower bounds).",
);

/// `ip_local_port_range`: two ports, the first at most the second.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    pub low: u16,
    pub high: u16,
}

impl PortRange {
    pub fn ports(self) -> u32 {
        u32::from(self.high) - u32::from(self.low) + 1
    }
}

/// Parses `32768\t60999\n`.
pub fn parse_port_range_into(s: &str, out: &mut PortRange) -> Result<(), ParseError> {
    let mut lines = lines(s);
    let line = lines
        .next()
        .ok_or_else(|| ParseError::new(1, "empty file"))?;
    let mut f = fields(line);
    let mut port = |what| -> Result<u16, ParseError> {
        let v = u64_field(next_field(&mut f, 1, what)?, 1, what)?;
        u16::try_from(v).map_err(|_| ParseError::new(1, format!("{what} {v} is not a port")))
    };
    let (low, high) = (port("low")?, port("high")?);
    if let Some(extra) = f.next() {
        return Err(ParseError::new(
            1,
            format!("unexpected extra field {extra:?}"),
        ));
    }
    if lines.next().is_some() {
        return Err(ParseError::new(2, "expected a single line"));
    }
    if low > high {
        return Err(ParseError::new(
            1,
            format!("low port {low} above high port {high}"),
        ));
    }
    *out = PortRange { low, high };
    Ok(())
}

// --- netlink socket diagnostics -------------------------------------------

const NETLINK_SOCK_DIAG: i32 = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_HDRLEN: usize = 16;
const INET_DIAG_REQ_BYTECODE: u16 = 1;
const INET_DIAG_BC_S_GE: u8 = 2;
const INET_DIAG_BC_S_LE: u8 = 3;
/// struct inet_diag_msg: family, state, timer, retrans, the socket id (48
/// bytes), expires, rqueue, wqueue, uid, inode.
const DIAG_MSG_LEN: usize = 72;

/// The kernel's TCP state numbers (stable: `ss` and /proc/net/tcp print them).
const TCP_SYN_RECV: u8 = 3;
const TCP_LISTEN: u8 = 10;
const SYN_RECV_AND_LISTEN: u32 = 1 << TCP_SYN_RECV | 1 << TCP_LISTEN;
/// States whose socket holds its local port in the established hash:
/// ESTABLISHED, SYN_SENT, FIN_WAIT1, FIN_WAIT2, TIME_WAIT, CLOSE_WAIT,
/// LAST_ACK, CLOSING.
const CONNECTED: u32 = 1 << 1 | 1 << 2 | 1 << 4 | 1 << 5 | 1 << 6 | 1 << 8 | 1 << 9 | 1 << 11;

/// One socket as inet_diag reports it (the fields used here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiagSocket {
    pub family: u8,
    pub state: u8,
    pub sport: u16,
    pub dport: u16,
    pub src: [u8; 16],
    pub dst: [u8; 16],
    /// For a listener: its accept queue and its backlog
    /// (sk_ack_backlog, sk_max_ack_backlog).
    pub rqueue: u32,
    pub wqueue: u32,
}

/// What one buffer of a dump held.
#[derive(Debug, PartialEq, Eq)]
pub enum Chunk {
    /// More messages follow.
    More,
    /// NLMSG_DONE: the dump is complete.
    Done,
}

/// Parses one buffer of a netlink dump reply, calling `each` per socket.
/// Malformed messages are errors (never a panic); `seq` must match.
pub fn parse_chunk(
    buf: &[u8],
    seq: u32,
    mut each: impl FnMut(&DiagSocket),
) -> Result<Chunk, String> {
    let mut at = 0;
    while at < buf.len() {
        let rest = &buf[at..];
        if rest.len() < NLMSG_HDRLEN {
            return Err(format!(
                "{} bytes left, short of a netlink header",
                rest.len()
            ));
        }
        let len = u32::from_ne_bytes(rest[0..4].try_into().unwrap_or_default()) as usize;
        let kind = u16::from_ne_bytes(rest[4..6].try_into().unwrap_or_default());
        let msg_seq = u32::from_ne_bytes(rest[8..12].try_into().unwrap_or_default());
        if len < NLMSG_HDRLEN || len > rest.len() {
            return Err(format!(
                "netlink message length {len} with {} bytes left",
                rest.len()
            ));
        }
        if msg_seq != seq {
            return Err(format!("reply to request {msg_seq}, expected {seq}"));
        }
        let body = &rest[NLMSG_HDRLEN..len];
        match kind {
            NLMSG_DONE => return Ok(Chunk::Done),
            NLMSG_ERROR => {
                let errno = body
                    .get(0..4)
                    .map(|b| i32::from_ne_bytes(b.try_into().unwrap_or_default()))
                    .unwrap_or(0);
                return Err(format!(
                    "the kernel refused the dump: {}",
                    io::Error::from_raw_os_error(-errno)
                ));
            }
            SOCK_DIAG_BY_FAMILY => {
                if body.len() < DIAG_MSG_LEN {
                    return Err(format!("inet_diag message of {} bytes", body.len()));
                }
                let u32_at =
                    |i: usize| u32::from_ne_bytes(body[i..i + 4].try_into().unwrap_or_default());
                let mut src = [0; 16];
                let mut dst = [0; 16];
                src.copy_from_slice(&body[8..24]);
                dst.copy_from_slice(&body[24..40]);
                each(&DiagSocket {
                    family: body[0],
                    state: body[1],
                    sport: u16::from_be_bytes([body[4], body[5]]),
                    dport: u16::from_be_bytes([body[6], body[7]]),
                    src,
                    dst,
                    rqueue: u32_at(56),
                    wqueue: u32_at(60),
                });
            }
            other => return Err(format!("unexpected netlink message type {other}")),
        }
        // Messages are 4-byte aligned; the last one may end the buffer.
        at += len.next_multiple_of(4).min(rest.len());
    }
    Ok(Chunk::More)
}

/// The request: nlmsghdr, inet_diag_req_v2, and for a port range the
/// bytecode `sport >= low && sport <= high`.
fn request(seq: u32, family: u8, states: u32, range: Option<PortRange>) -> Vec<u8> {
    let bytecode_len = if range.is_some() { 4 + 16 } else { 0 };
    let len = NLMSG_HDRLEN + 56 + bytecode_len;
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    // inet_diag_req_v2: family, protocol, ext, pad, states, sockid (48).
    m.extend_from_slice(&[family, libc::IPPROTO_TCP as u8, 0, 0]);
    m.extend_from_slice(&states.to_ne_bytes());
    m.extend_from_slice(&[0; 48]);
    if let Some(r) = range {
        m.extend_from_slice(&(bytecode_len as u16).to_ne_bytes());
        m.extend_from_slice(&INET_DIAG_REQ_BYTECODE.to_ne_bytes());
        // Each comparison is two ops: (code, yes, no) and (0, 0, port). A
        // jump that lands exactly on the end accepts, past it (len + 4)
        // rejects: S_GE true goes on to S_LE, whose true ends.
        for (code, no, port) in [
            (INET_DIAG_BC_S_GE, 20u16, r.low),
            (INET_DIAG_BC_S_LE, 12, r.high),
        ] {
            m.extend_from_slice(&[code, 8]);
            m.extend_from_slice(&no.to_ne_bytes());
            m.extend_from_slice(&[0, 0]);
            m.extend_from_slice(&port.to_ne_bytes());
        }
    }
    m
}

/// A NETLINK_SOCK_DIAG socket in the daemon's network namespace, kept
/// between scrapes, and its receive buffer.
struct SockDiag {
    fd: OwnedFd,
    buf: Vec<u8>,
    seq: u32,
}

/// Why a dump stopped.
enum Dumped {
    Complete,
    /// The deadline passed first; the socket holds the rest and must go.
    Cut,
}

impl SockDiag {
    fn open() -> io::Result<SockDiag> {
        // SAFETY: socket(2) with constant arguments; the fd is owned at once.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                NETLINK_SOCK_DIAG,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh fd nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // A receive that waits longer than this is a kernel that stopped
        // answering: the scrape gives up instead of hanging.
        let tv = libc::timeval {
            tv_sec: 2,
            tv_usec: 0,
        };
        // SAFETY: setsockopt with a timeval of the size passed.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                size_of::<libc::timeval>() as u32,
            );
        }
        Ok(SockDiag {
            fd,
            buf: vec![0; 64 << 10],
            seq: 0,
        })
    }

    /// Dumps TCP sockets of `family` in `states` (and in `range`), calling
    /// `each` per socket, until the kernel says done or `deadline` passes.
    fn dump(
        &mut self,
        family: u8,
        states: u32,
        range: Option<PortRange>,
        deadline: Instant,
        mut each: impl FnMut(&DiagSocket),
    ) -> io::Result<Dumped> {
        self.seq = self.seq.wrapping_add(1);
        let req = request(self.seq, family, states, range);
        // SAFETY: a sockaddr_nl for the kernel (pid 0), zeroed, and the
        // request buffer with its length.
        let sent = unsafe {
            let mut to: libc::sockaddr_nl = std::mem::zeroed();
            to.nl_family = libc::AF_NETLINK as u16;
            libc::sendto(
                self.fd.as_raw_fd(),
                req.as_ptr().cast(),
                req.len(),
                0,
                (&to as *const libc::sockaddr_nl).cast(),
                size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        loop {
            if Instant::now() > deadline {
                return Ok(Dumped::Cut);
            }
            // SAFETY: recv into our buffer, at most its length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    0,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let chunk = parse_chunk(&self.buf[..n as usize], self.seq, &mut each)
                .map_err(io::Error::other)?;
            if chunk == Chunk::Done {
                return Ok(Dumped::Complete);
            }
        }
    }
}

// --- the collector ----------------------------------------------------------

/// IPv4-mapped IPv6 addresses as IPv4: a v6 socket connected to
/// ::ffff:a.b.c.d competes with v4 sockets for the same 4-tuples.
fn canonical(family: u8, addr: [u8; 16]) -> [u8; 16] {
    if family == libc::AF_INET6 as u8 && addr[..10] == [0; 10] && addr[10..12] == [0xff, 0xff] {
        let mut v4 = [0; 16];
        v4[..4].copy_from_slice(&addr[12..16]);
        v4
    } else {
        addr
    }
}

/// One destination's key for the port count: local address, remote
/// address, remote port.
type Destination = ([u8; 16], [u8; 16], u16);

#[derive(Default)]
struct Counts {
    syn_recv: u64,
    /// Per local port: request sockets, and the listeners' backlog.
    syn_by_port: HashMap<u16, u64>,
    backlog_by_port: HashMap<u16, u64>,
    /// Sockets per destination with a local port in the range.
    by_destination: HashMap<Destination, u32>,
    /// Bit p - low: a socket holds port p.
    ports: Vec<u64>,
    complete: bool,
}

impl Counts {
    fn clear(&mut self, range: PortRange) {
        self.syn_recv = 0;
        self.syn_by_port.clear();
        self.backlog_by_port.clear();
        self.by_destination.clear();
        self.ports.clear();
        self.ports.resize((range.ports() as usize).div_ceil(64), 0);
        self.complete = true;
    }

    /// The fullest listening port's SYN_RECV count over its backlog (no
    /// port label: which port it is would churn series; `ss` tells).
    fn fullest(&self) -> Option<f64> {
        self.backlog_by_port
            .iter()
            .map(|(port, &backlog)| {
                let queued = self.syn_by_port.get(port).copied().unwrap_or(0);
                // listen(fd, 0) has a backlog of 0: one request fills it.
                queued as f64 / backlog.max(1) as f64
            })
            .max_by(f64::total_cmp)
    }
}

pub struct TcpSocketsCollector {
    range_file: SourceFile,
    range: PortRange,
    diag: Option<SockDiag>,
    timeout: Duration,
    counts: Counts,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    let timeout = s.duration(TIMEOUT).unwrap_or(Duration::from_secs(1));
    Box::new(TcpSocketsCollector {
        range_file: SourceFile::small(&s.procfs, "sys/net/ipv4/ip_local_port_range"),
        range: PortRange::default(),
        diag: None,
        timeout,
        counts: Counts::default(),
    })
}

impl TcpSocketsCollector {
    /// Reads the socket table into `counts`. A socket error drops the
    /// netlink socket (a new one next scrape) and fails the collector.
    fn read_sockets(&mut self, range: Option<PortRange>) -> io::Result<()> {
        let deadline = Instant::now() + self.timeout;
        if self.diag.is_none() {
            self.diag = Some(SockDiag::open()?);
        }
        let (diag, c) = (
            self.diag.as_mut().unwrap_or_else(|| unreachable!()),
            &mut self.counts,
        );
        let mut result = Ok(());
        for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
            let listeners = diag.dump(family, SYN_RECV_AND_LISTEN, None, deadline, |s| {
                if s.state == TCP_LISTEN {
                    *c.backlog_by_port.entry(s.sport).or_default() += u64::from(s.wqueue);
                } else {
                    c.syn_recv += 1;
                    *c.syn_by_port.entry(s.sport).or_default() += 1;
                }
            });
            let ports = match (listeners, range) {
                (Ok(Dumped::Complete), Some(r)) => {
                    diag.dump(family, CONNECTED, Some(r), deadline, |s| {
                        let key = (
                            canonical(s.family, s.src),
                            canonical(s.family, s.dst),
                            s.dport,
                        );
                        *c.by_destination.entry(key).or_default() += 1;
                        let bit = usize::from(s.sport.wrapping_sub(r.low));
                        if let Some(w) = c.ports.get_mut(bit / 64) {
                            *w |= 1 << (bit % 64);
                        }
                    })
                }
                (other, _) => other,
            };
            match ports {
                Ok(Dumped::Complete) => {}
                Ok(Dumped::Cut) => {
                    c.complete = false;
                    break;
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if result.is_err() || !c.complete {
            // The socket may still hold the rest of a dump.
            self.diag = None;
        }
        result
    }
}

impl Collector for TcpSocketsCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let range = &mut self.range;
        let range = match self
            .range_file
            .parse_with(|t| parse_port_range_into(t, range))?
        {
            Some(()) => Some(self.range),
            None => None,
        };
        self.counts.clear(range.unwrap_or_default());
        self.read_sockets(range).map_err(|e| {
            CollectError::other("netlink NETLINK_SOCK_DIAG (inet_diag)", e.to_string())
        })?;
        let c = &self.counts;
        enc.family(&SYN_RECV);
        enc.sample(&SYN_RECV, &[], c.syn_recv);
        if let Some(ratio) = c.fullest() {
            enc.family(&SYN_QUEUE);
            enc.sample(&SYN_QUEUE, &[], ratio);
        }
        if let Some(r) = range {
            enc.family(&RANGE);
            enc.sample(&RANGE, &[], u64::from(r.ports()));
            enc.family(&USED_MAX);
            let used_max = c.by_destination.values().copied().max().unwrap_or(0);
            enc.sample(&USED_MAX, &[], u64::from(used_max));
            enc.family(&IN_USE);
            enc.sample(
                &IN_USE,
                &[],
                c.ports
                    .iter()
                    .map(|w| u64::from(w.count_ones()))
                    .sum::<u64>(),
            );
        }
        enc.family(&COMPLETE);
        enc.sample(&COMPLETE, &[], u64::from(c.complete));
        // Give back what a burst of sockets grew the table to.
        let table = &mut self.counts.by_destination;
        if table.capacity() > 4096 && table.capacity() > 4 * table.len() {
            table.shrink_to(2 * table.len());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<PortRange, ParseError> {
        parse_fresh(s, parse_port_range_into)
    }

    #[test]
    fn port_range() {
        assert_eq!(
            parse("32768\t60999\n").unwrap(),
            PortRange {
                low: 32768,
                high: 60999
            }
        );
        assert_eq!(parse("40000\t40000\n").unwrap().ports(), 1, "one port");
        assert_eq!(parse("1\t65535\n").unwrap().ports(), 65535);
        for (bad, why) in [
            ("", "empty"),
            ("5 4\n", "above"),
            ("1 65536\n", "not a port"),
            ("1\n", "high"),
            ("1 2 3\n", "extra"),
            ("1 2\n3 4\n", "single line"),
            ("a 2\n", "low"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.msg.contains(why), "{bad:?}: {e}");
        }
    }

    /// A reply as the kernel writes it: two sockets, then DONE.
    fn reply(seq: u32) -> Vec<u8> {
        let mut out = Vec::new();
        for (state, sport, wqueue) in [(TCP_LISTEN, 8080u16, 256u32), (TCP_SYN_RECV, 8080, 0)] {
            let mut body = vec![0u8; DIAG_MSG_LEN + 8];
            body[0] = libc::AF_INET as u8;
            body[1] = state;
            body[4..6].copy_from_slice(&sport.to_be_bytes());
            body[8..12].copy_from_slice(&[127, 0, 0, 1]);
            body[60..64].copy_from_slice(&wqueue.to_ne_bytes());
            let len = (NLMSG_HDRLEN + body.len()) as u32;
            out.extend_from_slice(&len.to_ne_bytes());
            out.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
            out.extend_from_slice(&0u16.to_ne_bytes());
            out.extend_from_slice(&seq.to_ne_bytes());
            out.extend_from_slice(&0u32.to_ne_bytes());
            out.extend_from_slice(&body);
        }
        out.extend_from_slice(&20u32.to_ne_bytes());
        out.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        out.extend_from_slice(&[0; 2]);
        out.extend_from_slice(&seq.to_ne_bytes());
        out.extend_from_slice(&[0; 8]);
        out
    }

    #[test]
    fn parses_a_dump() {
        let mut seen = Vec::new();
        assert_eq!(
            parse_chunk(&reply(7), 7, |s| seen.push(*s)),
            Ok(Chunk::Done)
        );
        assert_eq!(seen.len(), 2);
        assert_eq!(
            (seen[0].state, seen[0].sport, seen[0].wqueue),
            (TCP_LISTEN, 8080, 256)
        );
        assert_eq!(&seen[1].src[..4], &[127, 0, 0, 1]);
        assert!(
            parse_chunk(&reply(7), 8, |_| {})
                .unwrap_err()
                .contains("expected 8")
        );
    }

    /// Every truncation and every single-byte change of a reply is an
    /// error or a parse, never a panic.
    #[test]
    fn malformed_replies_never_panic() {
        let good = reply(1);
        for cut in 0..good.len() {
            let _ = parse_chunk(&good[..cut], 1, |_| {});
        }
        for i in 0..good.len() {
            for v in [0u8, 1, 0x7f, 0xff] {
                let mut bad = good.clone();
                bad[i] = v;
                let _ = parse_chunk(&bad, 1, |_| {});
            }
        }
        let mut err = reply(1);
        err[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        err[16..20].copy_from_slice(&(-libc::EINVAL).to_ne_bytes());
        assert!(
            parse_chunk(&err, 1, |_| {})
                .unwrap_err()
                .contains("refused")
        );
    }

    #[test]
    fn bytecode_is_what_ss_sends() {
        let r = request(
            1,
            2,
            CONNECTED,
            Some(PortRange {
                low: 1000,
                high: 2000,
            }),
        );
        assert_eq!(r.len(), 16 + 56 + 20);
        let bc = &r[16 + 56 + 4..];
        assert_eq!(&bc[0..4], &[INET_DIAG_BC_S_GE, 8, 20, 0]);
        assert_eq!(u16::from_ne_bytes([bc[6], bc[7]]), 1000);
        assert_eq!(&bc[8..12], &[INET_DIAG_BC_S_LE, 8, 12, 0]);
        assert_eq!(u16::from_ne_bytes([bc[14], bc[15]]), 2000);
    }

    #[test]
    fn mapped_addresses_count_as_ipv4() {
        let mut mapped = [0; 16];
        mapped[10] = 0xff;
        mapped[11] = 0xff;
        mapped[12..].copy_from_slice(&[10, 0, 0, 1]);
        let mut v4 = [0; 16];
        v4[..4].copy_from_slice(&[10, 0, 0, 1]);
        assert_eq!(canonical(libc::AF_INET6 as u8, mapped), v4);
        assert_eq!(canonical(libc::AF_INET as u8, v4), v4);
    }

    #[test]
    fn fullest_port() {
        let mut c = Counts::default();
        c.clear(PortRange { low: 1, high: 1 });
        assert_eq!(c.fullest(), None, "no listener, no ratio");
        c.backlog_by_port.insert(80, 256);
        c.backlog_by_port.insert(22, 0);
        c.syn_by_port.insert(80, 193);
        assert_eq!(c.fullest(), Some(193.0 / 256.0));
        c.syn_by_port.insert(22, 1);
        assert_eq!(c.fullest(), Some(1.0));
    }
}
