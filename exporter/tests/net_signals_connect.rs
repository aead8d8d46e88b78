//! The tcpconnect probe against the errors connect() itself returned.
//!
//! In a network namespace of the test's own with `ip_local_port_range`
//! cut to two ports, two connections to a listener (IPv4, then IPv6) use
//! both ports toward it; every further connect() to it fails with
//! EADDRNOTAVAIL, which the test counts as it gets them. Around them, in
//! the same namespace, connect() calls that leave SYN_SENT another way,
//! which must not count: refused (a closed port), timed out (its SYNs
//! dropped by nft), and closed by the application while connecting. The
//! probe, restricted to the namespace (`--probe.tcpconnect.netns`), must
//! count exactly the EADDRNOTAVAIL failures.
//!
//! Needs root, BPF, `ip` and `nft`; skips otherwise, and fails under
//! USESCOPE_REQUIRE_BPF=1 / CI=true.

mod common;
#[path = "net_signals/netns.rs"]
mod netns;

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use common::bpf_objects::probe_up;
use common::{Daemon, can_run_bpf, sample, skip};
use netns::Netns;

const SERIES: &str = "usescope_tcp_connect_no_local_port_total";

fn probe(d: &Daemon) -> u64 {
    sample(&d.scrape(), SERIES).unwrap_or_else(|| panic!("no {SERIES}")) as u64
}

/// Starts a non-blocking connect() to `to` (IPv4) and closes the socket
/// at once, while it is still in SYN_SENT.
fn abandoned_connect(to: std::net::SocketAddrV4) {
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as u16,
        sin_port: to.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*to.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: a socket of our own, closed here; `sin` is a valid
    // sockaddr_in of the size passed.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0);
        assert!(fd >= 0, "{}", std::io::Error::last_os_error());
        let rc = libc::connect(
            fd,
            (&sin as *const libc::sockaddr_in).cast(),
            size_of::<libc::sockaddr_in>() as u32,
        );
        let e = std::io::Error::last_os_error();
        libc::close(fd);
        assert!(
            rc == -1 && e.raw_os_error() == Some(libc::EINPROGRESS),
            "{e}"
        );
    }
}

#[test]
fn counts_exactly_the_connects_that_found_no_port() {
    if !skip::unless_root("network namespaces, nft and BPF need root")
        || !skip::unless_met(can_run_bpf(), "BPF (root and a kernel with BTF)")
    {
        return;
    }
    let ns = Netns::new();
    ns.sysctl("net/ipv4/ip_local_port_range", "40000 40001");
    ns.nft("table inet usescope_nosyn {\n  chain input {\n    type filter hook input priority 0;\n    tcp dport 7002 tcp flags & syn == syn drop\n  }\n}\n");
    let d = Daemon::start(&[
        "--collector.disable-defaults",
        "--collector.loadavg",
        "--no-probe.runqlat",
        "--no-probe.cachestat",
        "--no-probe.drops",
        "--probe.tcpconnect",
        &format!("--probe.tcpconnect.netns={}", ns.inode()),
    ]);
    let expo = d.scrape();
    assert!(probe_up(&d, &expo, "tcpconnect"), "{expo}");
    let before = probe(&d);

    let (failed, others) = ns.run(|| {
        let mut held = Vec::new();
        let mut listeners = Vec::new();
        let mut failed = 0u64;
        let mut others = 0u32;
        for target in ["127.0.0.1:7000", "[::1]:7000"] {
            let at: SocketAddr = target.parse().unwrap();
            let listener = TcpListener::bind(at).unwrap();
            // Both ports of the range, toward this listener.
            for _ in 0..2 {
                held.push(TcpStream::connect(at).unwrap());
                held.push(listener.accept().unwrap().0);
            }
            for _ in 0..20 {
                match TcpStream::connect(at) {
                    Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) => failed += 1,
                    other => panic!("a third connection to {at} with two ports: {other:?}"),
                }
            }
            listeners.push(listener);
        }
        // Refused: the same two ports toward another (closed) port are free.
        for _ in 0..5 {
            let e = TcpStream::connect("127.0.0.1:7001").unwrap_err();
            assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
            others += 1;
        }
        // Timed out: the SYNs are dropped.
        let to: SocketAddr = "127.0.0.1:7002".parse().unwrap();
        let e = TcpStream::connect_timeout(&to, Duration::from_millis(300)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
        others += 1;
        // Closed while connecting.
        for _ in 0..5 {
            abandoned_connect("127.0.0.1:7002".parse().unwrap());
            others += 1;
        }
        drop((held, listeners));
        (failed, others)
    });
    std::thread::sleep(Duration::from_millis(200));
    let counted = probe(&d) - before;
    eprintln!(
        "EADDRNOTAVAIL seen by connect(): {failed}; probe: {counted}; other failures: {}",
        others
    );
    assert_eq!(failed, 40);
    assert_eq!(
        counted, failed,
        "the probe counts exactly the connect() calls that failed with EADDRNOTAVAIL, none of the {} other SYN_SENT -> CLOSE",
        others
    );
}
