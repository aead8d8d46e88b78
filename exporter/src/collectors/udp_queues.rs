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
//!
//! **A table with no sockets is not read.** Reading /proc/net/udp walks
//! every slot of the UDP hash table (16,384 here) from the start, and
//! twice: once for the lines and once more to find that there are no
//! more. That is 10–33 µs a walk on the development VM (the day's memory
//! speed decides), however few sockets there are: 40–130 µs a scrape for
//! the two files, up to a tenth of a cold scrape. The kernel counts the sockets of each table as it hashes and
//! unhashes them, and /proc/net/sockstat shows the count (`UDP: inuse N`;
//! sockstat6 has `UDP6:`), for the same network namespace and the same
//! family that udp and udp6 list. So when the count is 0 the table would
//! list no socket, the queues are 0, and the walk is skipped. Only on a
//! real procfs, where the two files come from the same kernel (a fixture
//! tree's sockstat need not agree with its udp), and only once the table
//! has been read and found present. Whatever goes wrong with the count
//! (missing, unparsable) means reading the table, as before. The count is
//! a sum of per-CPU counters read one after another, so a socket that
//! another socket replaces during the read can be missed, for that scrape.

use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError, excerpt};
use crate::kernel::parse::{fields, lines, parse_fresh, u64_field};
use crate::kernel::sockstat;
use crate::kernel::source::SourceFile;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

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
            format!(
                "expected the \"sl local_address ...\" header, found {}",
                excerpt(header)
            ),
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
        let sl = f[0].strip_suffix(':').ok_or_else(|| {
            ParseError::new(n, format!("sl: expected N:, found {}", excerpt(f[0])))
        })?;
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
    u64::from_str_radix(tok, 16).map_err(|e| ParseError::new(line, format!("{what}: {e}")))
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

/// One address family: its socket table and the kernel's count of it.
struct Family {
    ip: &'static str,
    table: SourceFile,
    /// sockstat or sockstat6 and the protocol whose `inuse` counts the
    /// table's sockets; only on a real procfs (see the module comment).
    count: Option<(SourceFile, &'static str)>,
    /// Whether the table was there when it was last read.
    listed: bool,
    queues: Queues,
    /// Reads of the table, for the tests of the shortcut.
    #[cfg(test)]
    table_reads: u64,
}

impl Family {
    fn new(
        s: &Settings,
        ip: &'static str,
        table: &str,
        sockstat: &str,
        proto: &'static str,
    ) -> Family {
        let real = crate::kernel::fs_kind::is_procfs(&s.procfs);
        Family {
            ip,
            table: SourceFile::new(&s.procfs, table),
            count: real.then(|| (SourceFile::new(&s.procfs, sockstat), proto)),
            listed: false,
            queues: Queues::default(),
            #[cfg(test)]
            table_reads: 0,
        }
    }

    /// Reads the queues, or knows them to be 0. False: the table is absent.
    fn read(&mut self) -> Result<bool, CollectError> {
        if self.listed && self.counted_none() {
            self.queues = Queues::default();
            return Ok(true);
        }
        #[cfg(test)]
        {
            self.table_reads += 1;
        }
        let queues = &mut self.queues;
        self.listed = self.table.parse_with(|t| parse_into(t, queues))?.is_some();
        Ok(self.listed)
    }

    /// Whether the kernel counts no socket in the table now.
    fn counted_none(&mut self) -> bool {
        let Some((file, proto)) = self.count.as_mut() else {
            return false;
        };
        let proto = *proto;
        matches!(
            file.parse_with(|t| Ok(sockstat::inuse(t, proto))),
            Ok(Some(Some(0)))
        )
    }
}

pub struct UdpQueuesCollector {
    families: [Family; 2],
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(UdpQueuesCollector {
        families: [
            Family::new(s, "v4", UDP, "net/sockstat", "UDP"),
            Family::new(s, "v6", UDP6, "net/sockstat6", "UDP6"),
        ],
    })
}

impl Collector for UdpQueuesCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let mut present = [false; 2];
        for (family, present) in self.families.iter_mut().zip(&mut present) {
            *present = family.read()?;
        }
        if present == [false, false] {
            return Ok(());
        }
        enc.family(&QUEUES);
        for (f, _) in self.families.iter().zip(present).filter(|(_, p)| *p) {
            enc.sample(&QUEUES, &[("ip", f.ip), ("queue", "tx")], f.queues.tx);
            enc.sample(&QUEUES, &[("ip", f.ip), ("queue", "rx")], f.queues.rx);
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
        let e = parse(&format!(
            "{HEADER}{}\n",
            line.replace("0000000A:", "0000000A")
        ))
        .unwrap_err();
        assert!(e.msg.contains("tx_queue:rx_queue"), "{}", e.msg);
        let e = parse(&format!(
            "{HEADER}{}\n",
            line.replace(":00000100", ":0000010G")
        ))
        .unwrap_err();
        assert!(e.msg.contains("rx_queue"), "{}", e.msg);
        let e = parse(&format!(
            "{HEADER}{}\n",
            line.replace("0100007F:", "0100007:")
        ))
        .unwrap_err();
        assert!(e.msg.contains("local_address"), "{}", e.msg);
        let e = parse(&format!(
            "{HEADER}{}\n",
            line.replace(" 7 2 ", " 99999999999999999999 2 ")
        ))
        .unwrap_err();
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
        assert!(
            out.contains("node_udp_queues{ip=\"v6\",queue=\"rx\"} 0\n"),
            "{out}"
        );
        assert!(!out.contains("v4"), "{out}");
        std::fs::write(dir.path().join("net/udp"), "x\n").unwrap();
        let e = render(c.as_mut()).unwrap_err();
        assert_eq!(e.file, dir.path().join("net/udp"));
    }

    /// A fixture tree's sockstat counts no UDP socket while its udp lists
    /// three: the count is trusted only on a real procfs.
    #[test]
    fn count_ignored_off_procfs() {
        let s = Settings::with_roots(fixture("proc"), "/nonexistent");
        let mut c = UdpQueuesCollector {
            families: [
                Family::new(&s, "v4", UDP, "net/sockstat", "UDP"),
                Family::new(&s, "v6", UDP6, "net/sockstat6", "UDP6"),
            ],
        };
        for _ in 0..2 {
            assert!(
                render(&mut c)
                    .unwrap()
                    .contains("{ip=\"v4\",queue=\"rx\"} 2496\n")
            );
        }
        assert_eq!(c.families.map(|f| f.table_reads), [2, 2]);
    }

    /// In a network namespace of its own (no socket but ours), on the live
    /// kernel: the tables are not read while sockstat counts no socket,
    /// and are read, with the queue the socket itself reports
    /// (SO_MEMINFO), once there is one. Needs CAP_SYS_ADMIN for unshare.
    #[test]
    fn empty_tables_are_not_read() {
        if !crate::test_skip::unless_root("to unshare a network namespace") {
            return;
        }
        std::thread::spawn(|| {
            // SAFETY: unshare only changes this thread's namespaces.
            let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
            assert_eq!(
                rc,
                0,
                "unshare(CLONE_NEWNET): {}",
                std::io::Error::last_os_error()
            );
            loopback_up();
            // /proc/thread-self/net is this thread's namespace.
            let s = Settings::with_roots("/proc/thread-self", "/sys");
            let mut c = UdpQueuesCollector {
                families: [
                    Family::new(&s, "v4", UDP, "net/sockstat", "UDP"),
                    Family::new(&s, "v6", UDP6, "net/sockstat6", "UDP6"),
                ],
            };
            // Without IPv6 there is no udp6 to read or to skip.
            let v6 = std::path::Path::new("/proc/thread-self/net/udp6").exists();
            let reads = |c: &UdpQueuesCollector| {
                let [v4, v6_reads] = c.families.each_ref().map(|f| f.table_reads);
                (v4, v6.then_some(v6_reads))
            };
            let out = render(&mut c).unwrap();
            assert!(out.contains("{ip=\"v4\",queue=\"rx\"} 0\n"), "{out}");
            assert_eq!(
                reads(&c),
                (1, v6.then_some(1)),
                "the first scrape reads both tables"
            );
            assert_eq!(render(&mut c).unwrap(), out);
            assert_eq!(reads(&c), (1, v6.then_some(1)), "no socket: no table read");

            let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            sock.send_to(&[7; 300], sock.local_addr().unwrap()).unwrap();
            let rmem = rmem_alloc(&sock);
            assert!(rmem >= 300, "SO_MEMINFO rmem_alloc {rmem}");
            let out = render(&mut c).unwrap();
            assert_eq!(
                reads(&c),
                (2, v6.then_some(1)),
                "one IPv4 socket: the IPv4 table is read"
            );
            assert!(
                out.contains(&format!("{{ip=\"v4\",queue=\"rx\"}} {rmem}\n")),
                "{out}"
            );

            drop(sock);
            let out = render(&mut c).unwrap();
            assert!(out.contains("{ip=\"v4\",queue=\"rx\"} 0\n"), "{out}");
            assert_eq!(
                reads(&c),
                (2, v6.then_some(1)),
                "the socket closed: no table read"
            );
        })
        .join()
        .unwrap();
    }

    /// Sets `lo` up in the current network namespace.
    fn loopback_up() {
        let sock = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&sock);
        // SAFETY: an ifreq is plain data; the ioctls read and write it.
        unsafe {
            let mut req: libc::ifreq = std::mem::zeroed();
            for (d, s) in req.ifr_name.iter_mut().zip(b"lo") {
                *d = *s as libc::c_char;
            }
            assert_eq!(libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req), 0);
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            assert_eq!(libc::ioctl(fd, libc::SIOCSIFFLAGS, &req), 0);
        }
    }

    /// The bytes queued on `sock` for reading, as the socket reports them.
    fn rmem_alloc(sock: &std::net::UdpSocket) -> u32 {
        let mut info = [0u32; 9];
        let mut len = std::mem::size_of_val(&info) as libc::socklen_t;
        // SAFETY: the kernel writes at most `len` bytes into `info`.
        let rc = unsafe {
            libc::getsockopt(
                std::os::fd::AsRawFd::as_raw_fd(sock),
                libc::SOL_SOCKET,
                libc::SO_MEMINFO,
                info.as_mut_ptr().cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0, "SO_MEMINFO: {}", std::io::Error::last_os_error());
        info[0]
    }
}
