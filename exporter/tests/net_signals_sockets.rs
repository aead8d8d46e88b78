//! The tcpsockets collector (inet_diag) against the kernel's own socket
//! table as /proc/net/tcp prints it, in network namespaces of the test's
//! own with the daemon running inside (`ip netns exec`), scraped from a
//! thread in the same namespace.
//!
//! - SYN_RECV: a client namespace whose SYN-ACKs are dropped on the way
//!   back leaves request sockets at the listener; their count and the
//!   listener's SYN queue against its backlog must equal /proc/net/tcp's
//!   state-03 rows, below the backlog and past it (when the kernel sends
//!   SYN cookies, which netstat must show too).
//! - Ephemeral ports: a 10-port `ip_local_port_range`, connections held
//!   and in TIME_WAIT toward two listeners; the most sockets toward one
//!   destination and the distinct ports in use must equal what
//!   /proc/net/tcp says, up to the range's end, where connect() fails.
//! - Bad input: 100 000 sockets, with the range wide and then one port;
//!   a scrape stays within its deadline, and a collector timeout cuts a
//!   read short and says so; sockets and the namespace's name vanishing
//!   while scrapes run cost nothing.
//!
//! Needs root, `ip` and `nft`; skips otherwise, and fails under
//! USESCOPE_REQUIRE_BPF=1 / CI=true.

mod common;
#[path = "net_signals/netns.rs"]
mod netns;

use std::collections::{HashMap, HashSet};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Daemon, http_get, sample, skip};
use netns::{Netns, veth};

/// The daemon inside `ns`, with only the collectors under test.
fn daemon_in(ns: &Netns, extra: &[&str]) -> Daemon {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &ns.name]).arg(common::bin());
    let mut args = vec![
        "--collector.disable-defaults",
        "--collector.tcpsockets",
        "--collector.netstat",
        "--no-probe.runqlat",
        "--no-probe.cachestat",
        "--no-probe.drops",
    ];
    args.extend_from_slice(extra);
    Daemon::try_start_with(cmd, &args).unwrap()
}

/// A scrape of `d` (listening inside `ns`) from a thread in `ns`, and how
/// long it took.
fn scrape_in(ns: &Netns, d: &Daemon) -> (String, Duration) {
    let addr = d.addr;
    ns.run(move || {
        let t = Instant::now();
        let r = http_get(addr, "/metrics", &[]);
        assert_eq!(r.status, 200, "{}", r.text());
        (r.text(), t.elapsed())
    })
}

/// GET /metrics from a local port of our choosing (IPv4 loopback), so
/// the scrape's own connection stays out of the port range under test.
fn scrape_from_port(ns: &Netns, d: &Daemon, source_port: u16) -> String {
    use std::io::{Read, Write};
    use std::os::fd::FromRawFd;
    let port = d.addr.port();
    ns.run(move || {
        let sin = |p: u16| libc::sockaddr_in {
            sin_family: libc::AF_INET as u16,
            sin_port: p.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
            },
            sin_zero: [0; 8],
        };
        let len = size_of::<libc::sockaddr_in>() as u32;
        // SAFETY: a socket of our own, bound and connected with valid
        // sockaddr_in structs of the size passed, then owned by the stream.
        let mut c = unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            assert!(fd >= 0);
            let from = sin(source_port);
            let to = sin(port);
            assert_eq!(
                libc::bind(fd, (&from as *const libc::sockaddr_in).cast(), len),
                0,
                "bind {source_port}: {}",
                std::io::Error::last_os_error()
            );
            assert_eq!(
                libc::connect(fd, (&to as *const libc::sockaddr_in).cast(), len),
                0
            );
            TcpStream::from_raw_fd(fd)
        };
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        c.read_to_string(&mut text).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(!head.to_ascii_lowercase().contains("chunked"), "{head}");
        body.to_string()
    })
}

fn value(expo: &str, series: &str) -> f64 {
    sample(expo, series).unwrap_or_else(|| panic!("no {series} in:\n{expo}"))
}

/// A row of /proc/net/tcp or tcp6: local address and port, remote address
/// and port, state (hex, as printed).
#[derive(Debug)]
struct Row {
    local: String,
    lport: u16,
    remote: String,
    rport: u16,
    state: u8,
}

fn proc_tcp(ns: &Netns) -> Vec<Row> {
    let mut rows = Vec::new();
    for file in ["tcp", "tcp6"] {
        for line in ns.proc_net(file).lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (l, r) = (
                f[1].rsplit_once(':').unwrap(),
                f[2].rsplit_once(':').unwrap(),
            );
            rows.push(Row {
                local: l.0.to_string(),
                lport: u16::from_str_radix(l.1, 16).unwrap(),
                remote: r.0.to_string(),
                rport: u16::from_str_radix(r.1, 16).unwrap(),
                state: u8::from_str_radix(f[3], 16).unwrap(),
            });
        }
    }
    rows
}

/// listen(2) again with another backlog (std listens with 128).
fn set_backlog(l: &TcpListener, backlog: i32) {
    // SAFETY: listen on a socket we own.
    assert_eq!(unsafe { libc::listen(l.as_raw_fd(), backlog) }, 0);
}

const DROP_SYNACK: &str = "table inet usescope_synack {
  chain input {
    type filter hook input priority 0;
    tcp sport 8080 tcp flags & (syn | ack) == syn | ack drop
  }
}
";

#[test]
fn syn_recv_sockets_and_the_syn_queue_match_proc_net_tcp() {
    if !skip::unless_root("network namespaces and nft need root") {
        return;
    }
    let (client, server) = (Netns::new(), Netns::new());
    let (_, ip_server) = veth(&client, &server, 72);
    client.nft(DROP_SYNACK);
    let at: SocketAddr = format!("{ip_server}:8080").parse().unwrap();
    let listener = server.run(move || {
        let l = TcpListener::bind(at).unwrap();
        set_backlog(&l, 8);
        l
    });
    let d = daemon_in(&server, &[]);
    let syn_recv = |ns: &Netns| proc_tcp(ns).iter().filter(|r| r.state == 3).count() as f64;
    let cookies = |ns: &Netns| ns.counter("TcpExt", "SyncookiesSent") as f64;

    let (expo, _) = scrape_in(&server, &d);
    assert_eq!(value(&expo, "usescope_tcp_syn_recv_sockets"), 0.0);
    assert_eq!(value(&expo, "usescope_tcp_syn_queue_fullest_ratio"), 0.0);

    // Handshakes that never complete: each connect() gives up at once,
    // and its SYN-ACKs are dropped before they could draw a reset.
    let connect = |n: usize| {
        client.run(move || {
            for _ in 0..n {
                let _ = TcpStream::connect_timeout(&at, Duration::from_millis(20));
            }
        })
    };
    connect(6);
    std::thread::sleep(Duration::from_millis(100));
    let (expo, _) = scrape_in(&server, &d);
    let kernel = syn_recv(&server);
    eprintln!("below the backlog: /proc/net/tcp {kernel} in SYN_RECV; scrape:\n{expo}");
    assert_eq!(kernel, 6.0);
    assert_eq!(value(&expo, "usescope_tcp_syn_recv_sockets"), kernel);
    assert_eq!(
        value(&expo, "usescope_tcp_syn_queue_fullest_ratio"),
        kernel / 8.0
    );
    assert_eq!(cookies(&server), 0.0);

    // Past the backlog: the queue stops growing and SYN cookies go out.
    connect(20);
    std::thread::sleep(Duration::from_millis(100));
    let (expo, _) = scrape_in(&server, &d);
    let kernel = syn_recv(&server);
    eprintln!(
        "past the backlog: /proc/net/tcp {kernel} in SYN_RECV, SyncookiesSent {}",
        cookies(&server)
    );
    assert!((8.0..26.0).contains(&kernel), "{kernel}");
    assert_eq!(value(&expo, "usescope_tcp_syn_recv_sockets"), kernel);
    assert_eq!(
        value(&expo, "usescope_tcp_syn_queue_fullest_ratio"),
        kernel / 8.0
    );
    assert!(cookies(&server) > 0.0);
    assert_eq!(
        value(&expo, "node_netstat_TcpExt_SyncookiesSent"),
        cookies(&server)
    );
    assert_eq!(value(&expo, "usescope_tcp_sockets_scan_complete"), 1.0);
    drop(listener);
}

/// What /proc/net/tcp says of local ports in `low..=high` (states that
/// hold one: not LISTEN 0A, not CLOSE 07): the most sockets toward one
/// (local address, remote address, remote port), and distinct ports.
fn ports_oracle(ns: &Netns, low: u16, high: u16) -> (f64, f64) {
    let mut per_destination: HashMap<(String, String, u16), u32> = HashMap::new();
    let mut ports = HashSet::new();
    for r in proc_tcp(ns) {
        if (low..=high).contains(&r.lport) && r.state != 0x0a && r.state != 0x07 {
            *per_destination
                .entry((r.local, r.remote, r.rport))
                .or_default() += 1;
            ports.insert(r.lport);
        }
    }
    (
        per_destination.values().copied().max().unwrap_or(0) as f64,
        ports.len() as f64,
    )
}

#[test]
fn ephemeral_ports_match_proc_net_tcp_up_to_exhaustion() {
    if !skip::unless_root("network namespaces need root") {
        return;
    }
    let ns = Netns::new();
    // The daemon takes its listening port from the wide default range
    // first; its scrapes come from ports chosen below 40000.
    let d = daemon_in(&ns, &[]);
    ns.sysctl("net/ipv4/ip_local_port_range", "40000 40009");
    let next_source = std::cell::Cell::new(30000u16);
    let check = |what: &str| {
        next_source.set(next_source.get() + 1);
        let expo = scrape_from_port(&ns, &d, next_source.get());
        let (used_max, in_use) = ports_oracle(&ns, 40000, 40009);
        eprintln!("{what}: /proc/net/tcp most toward one destination {used_max}, ports {in_use}");
        assert_eq!(value(&expo, "usescope_tcp_local_port_range_ports"), 10.0);
        assert_eq!(
            value(&expo, "usescope_tcp_ephemeral_ports_used_max"),
            used_max,
            "{what}"
        );
        assert_eq!(
            value(&expo, "usescope_tcp_ephemeral_ports_in_use"),
            in_use,
            "{what}"
        );
        used_max
    };
    assert_eq!(check("idle"), 0.0);

    let (kept, result) = ns.run(|| {
        let a = TcpListener::bind("127.0.0.1:9000").unwrap();
        let b = TcpListener::bind("127.0.0.1:9001").unwrap();
        let mut kept = vec![];
        for _ in 0..7 {
            kept.push(TcpStream::connect("127.0.0.1:9000").unwrap());
            kept.push(a.accept().unwrap().0);
        }
        // Closed by the client first: TIME_WAIT on the client's port.
        for _ in 0..3 {
            let c = TcpStream::connect("127.0.0.1:9001").unwrap();
            let s = b.accept().unwrap().0;
            drop(c);
            drop(s);
        }
        (vec![(a, b)], kept)
    });
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(check("7 held, 3 in TIME_WAIT"), 7.0);

    // To the end of the range: 10 toward one listener, then EADDRNOTAVAIL.
    let more = ns.run(|| {
        let mut more = vec![];
        for _ in 0..3 {
            more.push(TcpStream::connect("127.0.0.1:9000").unwrap());
        }
        let e = TcpStream::connect("127.0.0.1:9000").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EADDRNOTAVAIL), "{e}");
        more
    });
    assert_eq!(check("exhausted"), 10.0);
    drop((kept, result, more));
}

/// `n` client sockets left in TIME_WAIT in `ns` (no file descriptor
/// each: this machine allows a process 20 000), made by two threads, each
/// toward five listeners of its own on 127.0.0.1 (ports 9100-9109).
fn time_wait_sockets(ns: &Netns, n: usize) {
    // Without this, connect() recycles loopback TIME_WAIT sockets.
    ns.sysctl("net/ipv4/tcp_tw_reuse", "0");
    ns.sysctl("net/ipv4/tcp_max_tw_buckets", "262144");
    let makers: Vec<_> = [9100u16, 9105]
        .into_iter()
        .map(|first| {
            ns.spawn(move || {
                let listeners: Vec<TcpListener> = (first..first + 5)
                    .map(|p| TcpListener::bind(("127.0.0.1", p)).unwrap())
                    .collect();
                for i in 0..n / 2 {
                    let l = &listeners[i % listeners.len()];
                    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
                    let s = l.accept().unwrap().0;
                    // The client closes first: its side waits in TIME_WAIT.
                    drop(c);
                    drop(s);
                }
            })
        })
        .collect();
    for m in makers {
        m.join().unwrap();
    }
}

#[test]
fn a_hundred_thousand_sockets_and_a_one_port_range_stay_within_the_deadline() {
    if !skip::unless_root("network namespaces need root") {
        return;
    }
    let ns = Netns::new();
    ns.sysctl("net/ipv4/ip_local_port_range", "10000 60999");
    let t = Instant::now();
    time_wait_sockets(&ns, 100_000);
    let made = t.elapsed();
    let d = daemon_in(&ns, &[]);
    let cut = daemon_in(&ns, &["--collector.tcpsockets.timeout=20ms"]);
    let mut source = 5000;
    let mut timed = |d: &Daemon| {
        source += 1;
        let t = Instant::now();
        let expo = scrape_from_port(&ns, d, source);
        (expo, t.elapsed())
    };
    let sockets = proc_tcp(&ns).len();
    assert!(sockets >= 100_000, "{sockets} sockets");

    let (expo, took) = timed(&d);
    let (used_max, in_use) = ports_oracle(&ns, 10000, 60999);
    eprintln!(
        "{sockets} sockets (made in {made:?}); wide range: scrape {took:?}, \
         oracle most {used_max} ports {in_use}"
    );
    assert_eq!(value(&expo, "usescope_tcp_sockets_scan_complete"), 1.0);
    // TIME_WAIT lasts 60 s, so the sockets made in the last seconds stand
    // still between the scrape and the oracle's read.
    assert_eq!(
        value(&expo, "usescope_tcp_ephemeral_ports_used_max"),
        used_max
    );
    assert_eq!(value(&expo, "usescope_tcp_ephemeral_ports_in_use"), in_use);
    assert!(
        took < Duration::from_secs(3),
        "a scrape of 100 000 sockets took {took:?}"
    );

    ns.sysctl("net/ipv4/ip_local_port_range", "60000 60000");
    let (expo, took) = timed(&d);
    let (used_max, in_use) = ports_oracle(&ns, 60000, 60000);
    eprintln!("one port: scrape {took:?}, oracle most {used_max} ports {in_use}");
    assert_eq!(value(&expo, "usescope_tcp_local_port_range_ports"), 1.0);
    assert_eq!(
        value(&expo, "usescope_tcp_ephemeral_ports_used_max"),
        used_max
    );
    assert_eq!(value(&expo, "usescope_tcp_ephemeral_ports_in_use"), in_use);
    assert!(took < Duration::from_secs(1), "{took:?}");

    // A collector timeout shorter than the read: cut short, said so, and
    // the next scrape reads again on a fresh socket.
    ns.sysctl("net/ipv4/ip_local_port_range", "10000 60999");
    for round in 0..2 {
        let (expo, took) = timed(&cut);
        eprintln!("20 ms timeout, round {round}: scrape {took:?}");
        assert_eq!(value(&expo, "usescope_tcp_sockets_scan_complete"), 0.0);
        assert_eq!(
            value(
                &expo,
                "node_scrape_collector_success{collector=\"tcpsockets\"}"
            ),
            1.0
        );
        assert!(took < Duration::from_secs(1), "{took:?}");
    }
}

#[test]
fn sockets_and_the_namespace_vanishing_mid_read_cost_nothing() {
    if !skip::unless_root("network namespaces need root") {
        return;
    }
    let ns = Netns::new();
    ns.sysctl("net/ipv4/ip_local_port_range", "10000 60999");
    let d = daemon_in(&ns, &[]);
    // 9 000 connections held open (18 000 descriptors: the limit here is
    // 20 000), to be reset all at once mid-scrape.
    let held = ns.run(|| {
        let l = TcpListener::bind("127.0.0.1:9200").unwrap();
        let mut held = Vec::new();
        for _ in 0..9_000 {
            held.push(TcpStream::connect("127.0.0.1:9200").unwrap());
            held.push(l.accept().unwrap().0);
        }
        (l, held)
    });
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let addr = d.addr;
    let scraper = {
        let stop = stop.clone();
        ns.spawn(move || {
            let mut results = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let r = http_get(addr, "/metrics", &[]);
                results.push((r.status, r.text()));
            }
            results
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    // Reset every connection (SO_LINGER 0: gone at once, no TIME_WAIT)
    // and remove the namespace's name while scrapes run; the namespace
    // itself lives on in the daemon and the scraper.
    let (l, held) = held;
    for s in &held {
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: setsockopt on a socket we own with a linger struct of
        // the size passed.
        let rc = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&linger as *const libc::linger).cast(),
                size_of::<libc::linger>() as u32,
            )
        };
        assert_eq!(rc, 0);
    }
    drop(held);
    drop(l);
    Command::new("ip")
        .args(["netns", "del", &ns.name])
        .status()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let results = scraper.join().unwrap();
    eprintln!(
        "{} scrapes while the sockets and the name went",
        results.len()
    );
    assert!(results.len() >= 3);
    // Each scrape's own connection holds a port of the range, and stays
    // in TIME_WAIT after it.
    let scrapes = results.len() as f64 + 1.0;
    let mut last = f64::NAN;
    for (status, text) in &results {
        assert_eq!(*status, 200);
        assert_eq!(
            value(
                text,
                "node_scrape_collector_success{collector=\"tcpsockets\"}"
            ),
            1.0,
            "{text}"
        );
        last = value(text, "usescope_tcp_ephemeral_ports_in_use");
        assert!((0.0..=9_000.0 + scrapes).contains(&last), "{last}");
    }
    assert!(
        last <= scrapes,
        "the last scrape still counts {last} ports, not only its scrapes'"
    );
}
