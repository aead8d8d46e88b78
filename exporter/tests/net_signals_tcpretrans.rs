//! The tcpretrans probe against the kernel's own counters.
//!
//! Two network namespaces of the test's own joined by a veth pair; a TCP
//! sender in A, its receiver in B, and in B an nftables rule that drops a
//! share of the data segments (`numgen random`): real loss, recovered by
//! the real stack. The daemon runs the probe restricted to A
//! (`--probe.tcpretrans.netns`), so retransmissions elsewhere on a shared
//! host do not count, and each kind must equal the counters A's kernel
//! keeps in /proc/net/snmp and /proc/net/netstat over the same phase:
//!
//! - all kinds together: `Tcp RetransSegs` less `TCPRetransFail`
//!   (RetransSegs also counts segments whose transmission then failed
//!   locally, the probe only sent ones);
//! - `fast`: `TCPFastRetrans`;
//! - `timeout`: `TCPTimeouts` (one RTO retransmission each) plus
//!   `TCPSlowStartRetrans` (the Loss state's other retransmissions);
//! - `loss_probe`: at most `TCPLossProbes` (which also counts probes that
//!   sent new data), and exactly what the sum leaves once the other kinds
//!   equal their counters;
//! - `syn` and `synack`: `TCPSynRetrans`, each in a phase of its own.
//!
//! Needs root, BPF, `ip` and `nft`; skips otherwise, and fails under
//! USESCOPE_REQUIRE_BPF=1 / CI=true.

mod common;
#[path = "net_signals/netns.rs"]
mod netns;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use common::bpf_objects::probe_up;
use common::{Daemon, can_run_bpf, recursion_misses, sample, skip};
use netns::{Netns, veth};

const KINDS: [&str; 5] = ["timeout", "fast", "loss_probe", "syn", "synack"];

/// The kernel's counters of one namespace that the kinds are held to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
struct Kernel {
    retrans_segs: u64,
    retrans_fail: u64,
    fast: u64,
    slow_start: u64,
    timeouts: u64,
    loss_probes: u64,
    syn: u64,
}

impl Kernel {
    fn read(ns: &Netns) -> Kernel {
        let snmp = ns.proc_net("snmp");
        let netstat = ns.proc_net("netstat");
        let ext = |name| netns::netstat_counter(&netstat, "TcpExt", name);
        Kernel {
            retrans_segs: netns::netstat_counter(&snmp, "Tcp", "RetransSegs"),
            retrans_fail: ext("TCPRetransFail"),
            fast: ext("TCPFastRetrans"),
            slow_start: ext("TCPSlowStartRetrans"),
            timeouts: ext("TCPTimeouts"),
            loss_probes: ext("TCPLossProbes"),
            syn: ext("TCPSynRetrans"),
        }
    }

    fn minus(self, o: Kernel) -> Kernel {
        Kernel {
            retrans_segs: self.retrans_segs - o.retrans_segs,
            retrans_fail: self.retrans_fail - o.retrans_fail,
            fast: self.fast - o.fast,
            slow_start: self.slow_start - o.slow_start,
            timeouts: self.timeouts - o.timeouts,
            loss_probes: self.loss_probes - o.loss_probes,
            syn: self.syn - o.syn,
        }
    }
}

/// The probe's counters by kind, in KINDS order.
fn probe(d: &Daemon) -> [u64; 5] {
    let expo = d.scrape();
    KINDS.map(|k| {
        let series = format!("usescope_tcp_retransmitted_segments_total{{kind=\"{k}\"}}");
        sample(&expo, &series).unwrap_or_else(|| panic!("no {series}")) as u64
    })
}

/// Kernel and probe read once nothing moves any more: kernel, probe,
/// kernel again, until both kernel reads agree (a timer may still fire
/// just after a phase ends).
fn settled(d: &Daemon, ns: &Netns) -> (Kernel, [u64; 5]) {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let k1 = Kernel::read(ns);
        let p = probe(d);
        let k2 = Kernel::read(ns);
        if k1 == k2 || Instant::now() > end {
            return (k2, p);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A receiver in `ns` on `addr` for one connection: reads until EOF, then
/// closes. Returns the bytes read.
fn receiver(ns: &Netns, addr: SocketAddr) -> std::thread::JoinHandle<u64> {
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = ns.spawn(move || {
        let listener = TcpListener::bind(addr).unwrap();
        tx.send(()).unwrap();
        let (mut c, _) = listener.accept().unwrap();
        let mut buf = vec![0; 1 << 16];
        let mut total = 0;
        loop {
            match c.read(&mut buf) {
                Ok(0) => return total,
                Ok(n) => total += n as u64,
                Err(e) => panic!("receiver: {e}"),
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
    handle
}

/// Sends `messages` of `size` bytes to `addr` from `ns`, `gap` apart,
/// then closes its side and waits for the receiver's close: everything
/// sent has been acknowledged when it returns.
fn sender(ns: &Netns, addr: SocketAddr, size: usize, messages: usize, gap: Duration) {
    ns.run(move || {
        let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).unwrap();
        let msg = vec![b'x'; size];
        for _ in 0..messages {
            c.write_all(&msg).unwrap();
            if !gap.is_zero() {
                std::thread::sleep(gap);
            }
        }
        c.shutdown(Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        c.read_to_end(&mut rest).unwrap();
    });
}

/// The probe's count against the kernel's: equal, unless the kernel
/// skipped runs of the program (`misses`, recursion on one CPU: another
/// namespace's retransmission in a softirq while the program ran in
/// process context), each of which loses one skb of at most 64 segments.
#[track_caller]
fn agree(what: &str, probe: u64, kernel: u64, misses: u64) {
    agree_unless(what, probe, kernel, misses, false);
}

/// As [`agree`], but the kernel's counter may exceed the probe's when
/// `failed`: TCPTimeouts and TCPSynRetrans count a retransmission before
/// it is sent, so one that failed locally (TCPRetransFail) is in them.
#[track_caller]
fn agree_unless(what: &str, probe: u64, kernel: u64, misses: u64, failed: bool) {
    if failed {
        assert!(probe <= kernel, "{what}: probe {probe}, kernel {kernel}");
        return;
    }
    if misses == 0 {
        assert_eq!(probe, kernel, "{what}");
    } else {
        assert!(
            probe <= kernel && kernel - probe <= 64 * misses,
            "{what}: probe {probe}, kernel {kernel}, {misses} runs skipped"
        );
    }
}

/// One phase: the kernel's and the probe's increments over `work`, and
/// the runs the kernel skipped.
fn phase(d: &Daemon, ns: &Netns, name: &str, work: impl FnOnce()) -> (Kernel, [u64; 5], u64) {
    let misses0 = recursion_misses(d);
    let (k0, p0) = settled(d, ns);
    work();
    let (k1, p1) = settled(d, ns);
    let misses = recursion_misses(d) - misses0;
    let k = k1.minus(k0);
    let p: [u64; 5] = std::array::from_fn(|i| p1[i] - p0[i]);
    eprintln!(
        "{name}: kernel {k:?}; probe {}; runs skipped {misses}",
        KINDS
            .iter()
            .zip(p)
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    // RetransSegs counts a segment before its transmission; one that then
    // fails locally (a full queue on a busy host) is in TCPRetransFail too,
    // and not in the probe, which counts what was sent.
    agree(
        &format!("{name}: all kinds together against RetransSegs - TCPRetransFail"),
        p.iter().sum::<u64>(),
        k.retrans_segs - k.retrans_fail,
        misses,
    );
    agree(
        &format!("{name}: fast against TCPFastRetrans"),
        p[1],
        k.fast,
        misses,
    );
    (k, p, misses)
}

/// The two tests take turns: each one's lossy stream would load the CPUs
/// the other's retransmissions are timed and counted on.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

const LOSS: &str = "table inet usescope_loss {
  chain input {
    type filter hook input priority 0;
    tcp dport 5001 meta length > 100 numgen random mod 100 < 5 counter drop
  }
}
";

const DARK: &str = "table inet usescope_dark {
  chain input {
    type filter hook input priority -10;
    tcp dport 5001 meta length > 100 drop
  }
}
";

#[test]
fn each_kind_matches_the_kernels_counters() {
    if !skip::unless_root("network namespaces, nft and BPF need root")
        || !skip::unless_met(can_run_bpf(), "BPF (root and a kernel with BTF)")
    {
        return;
    }
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (a, b) = (Netns::new(), Netns::new());
    let (ip_a, ip_b) = veth(&a, &b, 71);
    b.nft(LOSS);
    let inode = a.inode().to_string();
    let d = Daemon::start(&[
        "--collector.disable-defaults",
        "--collector.loadavg",
        "--no-probe.runqlat",
        "--no-probe.cachestat",
        "--no-probe.drops",
        "--probe.tcpretrans",
        &format!("--probe.tcpretrans.netns={inode}"),
    ]);
    let expo = d.scrape();
    assert!(probe_up(&d, &expo, "tcpretrans"), "{expo}");
    let data: SocketAddr = format!("{ip_b}:5001").parse().unwrap();

    // Bulk: 16 MiB through 5% loss, cwnd-limited: fast recovery.
    let (k, p, m) = phase(&d, &a, "bulk", || {
        let r = receiver(&b, data);
        sender(&a, data, 1 << 20, 16, Duration::ZERO);
        assert_eq!(r.join().unwrap(), 16 << 20);
    });
    assert!(p[1] > 0, "bulk through 5% loss must fast-retransmit");
    agree_unless(
        "bulk: timeout",
        p[0],
        k.timeouts + k.slow_start,
        m,
        k.retrans_fail > 0,
    );
    assert!(p[2] <= k.loss_probes, "bulk: loss_probe");
    agree_unless(
        "bulk: syn and synack",
        p[3] + p[4],
        k.syn,
        m,
        k.retrans_fail > 0,
    );

    // Two-segment messages 10 ms apart: each ends in a tail, and with two
    // segments out the loss-probe timer is short (a lone segment waits
    // for TCP_RTO_MIN instead). A lost tail is re-sent by a loss probe.
    // TCPLossProbes also counts probes that sent new data instead (data
    // left unsent by a small window or TCP small queues), so it bounds
    // loss_probe from above; what pins loss_probe exactly is the rest:
    // the sum, fast, timeout and syn each equal their counters.
    let (k, p, m) = phase(&d, &a, "tails", || {
        let r = receiver(&b, data);
        sender(&a, data, 2000, 300, Duration::from_millis(10));
        assert_eq!(r.join().unwrap(), 600_000);
    });
    assert!(p[2] > 0, "tails through 5% loss must send loss probes");
    assert!(p[2] <= k.loss_probes, "tails: loss_probe");
    agree_unless(
        "tails: timeout",
        p[0],
        k.timeouts + k.slow_start,
        m,
        k.retrans_fail > 0,
    );
    agree_unless(
        "tails: syn and synack",
        p[3] + p[4],
        k.syn,
        m,
        k.retrans_fail > 0,
    );

    // The path goes dark for 1.2 s mid-stream: retransmission timeouts.
    let (k, p, m) = phase(&d, &a, "blackout", || {
        let r = receiver(&b, data);
        let b_name = b.name.clone();
        let dark = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            netns::nft_in(&b_name, DARK);
            std::thread::sleep(Duration::from_millis(1200));
            netns::nft_in(&b_name, "delete table inet usescope_dark\n");
        });
        sender(&a, data, 1000, 250, Duration::from_millis(10));
        dark.join().unwrap();
        assert_eq!(r.join().unwrap(), 250_000);
    });
    assert!(p[0] > 0, "a dark path must time out");
    agree_unless(
        "blackout: timeout",
        p[0],
        k.timeouts + k.slow_start,
        m,
        k.retrans_fail > 0,
    );
    assert!(p[2] <= k.loss_probes, "blackout: loss_probe");
    agree_unless(
        "blackout: syn and synack",
        p[3] + p[4],
        k.syn,
        m,
        k.retrans_fail > 0,
    );

    // SYNs dropped: the connect()'s SYN is retransmitted (at 1 s and 3 s).
    b.nft("table inet usescope_nosyn {\n  chain input {\n    type filter hook input priority 0;\n    tcp dport 5002 tcp flags & syn == syn drop\n  }\n}\n");
    let (k, p, m) = phase(&d, &a, "syn", || {
        let to: SocketAddr = format!("{ip_b}:5002").parse().unwrap();
        let e = a.run(move || TcpStream::connect_timeout(&to, Duration::from_millis(3500)));
        assert!(e.is_err(), "the SYNs were dropped: {e:?}");
    });
    assert!(p[3] >= 2, "two SYN retransmissions in 3.5 s");
    agree_unless("syn: TCPSynRetrans", p[3], k.syn, m, k.retrans_fail > 0);
    assert_eq!(p[4], 0, "syn: no SYN-ACK");

    // SYN-ACKs dropped on their way back: A's listener retransmits them.
    b.nft("table inet usescope_nosynack {\n  chain input {\n    type filter hook input priority 0;\n    tcp sport 5003 tcp flags & syn == syn drop\n  }\n}\n");
    let (k, p, m) = phase(&d, &a, "synack", || {
        let at: SocketAddr = format!("{ip_a}:5003").parse().unwrap();
        let listener = a.run(move || TcpListener::bind(at).unwrap());
        let e = b.run(move || TcpStream::connect_timeout(&at, Duration::from_millis(3500)));
        assert!(e.is_err(), "the SYN-ACKs were dropped: {e:?}");
        // Closing the listener drops its request sockets: no more
        // SYN-ACKs once the phase ends.
        drop(listener);
    });
    assert!(p[4] >= 1, "the listener must retransmit its SYN-ACK");
    agree_unless("synack: TCPSynRetrans", p[4], k.syn, m, k.retrans_fail > 0);
    assert_eq!(p[3], 0, "synack: no SYN");
}

/// The receiver's namespace vanishes mid-stream: its name removed, its
/// last socket closed, so the kernel destroys it and the veth pair with
/// it. Two daemons, one counting the sender's namespace and one the
/// vanished receiver's, keep answering every scrape with counters that
/// never go back, and the sender's still equals its kernel's counters
/// (the retransmissions into the vanished link fail before they count).
#[test]
fn a_namespace_vanishing_mid_stream_costs_nothing() {
    if !skip::unless_root("network namespaces, nft and BPF need root")
        || !skip::unless_met(can_run_bpf(), "BPF (root and a kernel with BTF)")
    {
        return;
    }
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (a, b) = (Netns::new(), Netns::new());
    let (_, ip_b) = veth(&a, &b, 74);
    b.nft(LOSS);
    let start = |inode: u64| {
        Daemon::start(&[
            "--collector.disable-defaults",
            "--collector.loadavg",
            "--no-probe.runqlat",
            "--no-probe.cachestat",
            "--no-probe.drops",
            "--probe.tcpretrans",
            &format!("--probe.tcpretrans.netns={inode}"),
        ])
    };
    let (sender_d, receiver_d) = (start(a.inode()), start(b.inode()));
    let data: SocketAddr = format!("{ip_b}:5001").parse().unwrap();
    let misses0 = recursion_misses(&sender_d);
    let k0 = Kernel::read(&a);
    let p0 = probe(&sender_d);
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let receiver = b.spawn(move || {
        let listener = TcpListener::bind(data).unwrap();
        let (mut c, _) = listener.accept().unwrap();
        c.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let mut buf = vec![0; 1 << 16];
        // Reads until told to go; then its sockets close with it.
        while rx.try_recv().is_err() {
            let _ = c.read(&mut buf);
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    let sender = a.spawn(move || {
        let mut c = TcpStream::connect_timeout(&data, Duration::from_secs(5)).unwrap();
        c.set_write_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let end = Instant::now() + Duration::from_secs(3);
        let chunk = vec![b'x'; 64 << 10];
        while Instant::now() < end {
            let _ = c.write(&chunk);
        }
    });
    let mut scrapes = Vec::new();
    let t = Instant::now();
    let mut gone = false;
    while t.elapsed() < Duration::from_secs(4) {
        if !gone && t.elapsed() > Duration::from_secs(1) {
            // Gone: the name, then the last thread and socket inside.
            netns::run("ip", &["netns", "del", &b.name]);
            tx.send(()).unwrap();
            gone = true;
        }
        scrapes.push((probe(&sender_d), probe(&receiver_d)));
        std::thread::sleep(Duration::from_millis(50));
    }
    receiver.join().unwrap();
    sender.join().unwrap();
    let (k1, p1) = settled(&sender_d, &a);
    let misses = recursion_misses(&sender_d) - misses0;
    let k = k1.minus(k0);
    let total: u64 = p1.iter().sum::<u64>() - p0.iter().sum::<u64>();
    eprintln!(
        "{} scrapes; sender: probe +{total}, kernel {k:?}, runs skipped {misses}; receiver's daemon last {:?}",
        scrapes.len(),
        scrapes.last()
    );
    for pair in scrapes.windows(2) {
        for (i, (x, y)) in pair[0].0.iter().zip(&pair[1].0).enumerate() {
            assert!(y >= x, "the sender's {} went back: {x} -> {y}", KINDS[i]);
        }
        for (x, y) in pair[0].1.iter().zip(&pair[1].1) {
            assert!(y >= x, "the receiver's counters went back: {x} -> {y}");
        }
    }
    assert!(total > 0, "the stream through loss retransmitted");
    agree(
        "sender: all kinds against RetransSegs - TCPRetransFail",
        total,
        k.retrans_segs - k.retrans_fail,
        misses,
    );
    // The vanished namespace is gone for good (/run/netns has no name).
    assert!(!std::path::Path::new(&format!("/run/netns/{}", b.name)).exists());
}
