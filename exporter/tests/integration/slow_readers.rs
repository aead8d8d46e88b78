//! Slow readers of a large page, against the real binary: memory is bounded
//! by `--web.max-requests`, not by clients.
//!
//! The review's attack: on a host with thousands of interfaces (a page of
//! megabytes), readers that request /metrics and never read took 182 MB
//! with 40 of them, 524 MB over three waves, and 432 MB stayed after they
//! left, because the request's permit was released before its body was
//! written and freed pages stayed in glibc's heap.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::FromRawFd;
use std::time::{Duration, Instant};

use crate::common::Daemon;

const MAX_REQUESTS: usize = 10;
const INTERFACES: usize = 8000;

/// The fixture procfs with `INTERFACES` interfaces in net/dev.
fn tree_with_many_interfaces() -> tempfile::TempDir {
    let tree = crate::common::copy_tree(&crate::common::fixture("proc"));
    let mut dev = String::from(
        "Inter-|   Receive                                                |  Transmit\n \
         face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n",
    );
    for i in 0..INTERFACES {
        dev.push_str(&format!(
            "veth{i:08x}: {i} 11 12 13 14 15 16 17 {i} 21 22 23 24 25 26 27\n"
        ));
    }
    std::fs::write(tree.path().join("net/dev"), dev).unwrap();
    tree
}

fn vm_kb(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field}"))
}

/// A client bound to `from` with the smallest receive buffer, so that the
/// daemon cannot push a large page into socket buffers and be done.
fn slow_reader(from: Ipv4Addr, to: SocketAddr) -> TcpStream {
    // SAFETY: plain socket calls on an fd we own; the sockaddr structs are
    // fully initialised before use.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let small: libc::c_int = 1;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &small as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as u32,
        );
        let sin = |ip: Ipv4Addr, port: u16| libc::sockaddr_in {
            sin_family: libc::AF_INET as u16,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(ip).to_be(),
            },
            sin_zero: [0; 8],
        };
        let len = std::mem::size_of::<libc::sockaddr_in>() as u32;
        let local = sin(from, 0);
        assert_eq!(
            libc::bind(fd, &local as *const _ as *const libc::sockaddr, len),
            0
        );
        let SocketAddr::V4(to) = to else {
            panic!("IPv4 only")
        };
        let remote = sin(*to.ip(), to.port());
        assert_eq!(
            libc::connect(fd, &remote as *const _ as *const libc::sockaddr, len),
            0,
            "connect: {}",
            std::io::Error::last_os_error()
        );
        let mut s = TcpStream::from_raw_fd(fd);
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: usescope\r\n\r\n")
            .unwrap();
        s
    }
}

/// The status code, from the first bytes only: the body stays unread.
fn status_of(s: &mut TcpStream) -> u16 {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut head = [0u8; 12];
    s.read_exact(&mut head).expect("a status line");
    std::str::from_utf8(&head[9..12]).unwrap().parse().unwrap()
}

/// Samples VmRSS (kB) for `for_how_long`, returning the peak.
fn peak_rss_kb(pid: u32, for_how_long: Duration) -> u64 {
    let end = Instant::now() + for_how_long;
    let mut peak = 0;
    while Instant::now() < end {
        peak = peak.max(vm_kb(pid, "VmRSS:"));
        std::thread::sleep(Duration::from_millis(20));
    }
    peak
}

fn page_bytes(d: &Daemon) -> u64 {
    d.scrape().len() as u64
}

#[test]
fn slow_readers_hold_at_most_max_requests_pages() {
    let tree_dir = tree_with_many_interfaces();
    let tree = tree_dir.path();
    let d = Daemon::start(&[
        &format!("--path.procfs={}", tree.display()),
        &format!("--web.max-requests={MAX_REQUESTS}"),
        "--no-probe.runqlat",
        "--no-probe.cachestat",
        "--no-probe.drops",
    ]);
    let pid = d.child.id();
    let page = page_bytes(&d);
    assert!(
        page > 6 << 20,
        "the page is only {page} bytes; socket buffers would absorb it"
    );
    for _ in 0..3 {
        page_bytes(&d);
    }
    let baseline_kb = vm_kb(pid, "VmRSS:");
    let page_kb = page / 1024;

    // Wave 1 takes every permit and holds it while its bodies are unread.
    // Each reader has an address of its own: one address may hold only its
    // share of the permits (--web.max-requests-per-peer; hostile_requests.rs).
    let mut held: Vec<TcpStream> = (0..MAX_REQUESTS)
        .map(|i| slow_reader(Ipv4Addr::new(127, 0, 1, i as u8 + 1), d.addr))
        .collect();
    for s in &mut held {
        assert_eq!(status_of(s), 200);
    }
    let mut peak = peak_rss_kb(pid, Duration::from_millis(500));
    // Waves 2 and 3, from other addresses: no permit is left, so each gets
    // 503 at once and costs no page.
    for wave in [2u8, 3] {
        let mut more: Vec<TcpStream> = (0..MAX_REQUESTS)
            .map(|i| slow_reader(Ipv4Addr::new(127, 0, wave, i as u8 + 1), d.addr))
            .collect();
        for s in &mut more {
            assert_eq!(
                status_of(s),
                503,
                "a permit was free while wave 1 held its bodies"
            );
        }
        peak = peak.max(peak_rss_kb(pid, Duration::from_millis(500)));
        held.extend(more);
    }
    let bound_kb = baseline_kb + MAX_REQUESTS as u64 * page_kb + 16 * 1024;
    assert!(
        peak <= bound_kb,
        "peak RSS {peak} kB over baseline {baseline_kb} kB + {MAX_REQUESTS} x {page_kb} kB pages"
    );

    drop(held);
    // Once they are gone the pages go back to the kernel (a fixed malloc
    // mmap threshold), and a scrape works again.
    let end = Instant::now() + Duration::from_secs(5);
    let near_kb = baseline_kb + 2 * page_kb + 8 * 1024;
    let mut now_kb = vm_kb(pid, "VmRSS:");
    while now_kb > near_kb && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
        now_kb = vm_kb(pid, "VmRSS:");
    }
    assert!(
        now_kb <= near_kb,
        "RSS {now_kb} kB after the readers left; baseline {baseline_kb} kB, page {page_kb} kB"
    );
    assert!(page_bytes(&d) > 6 << 20);
    eprintln!(
        "slow readers: page {page_kb} kB, baseline {baseline_kb} kB, peak {peak} kB (bound {bound_kb} kB), after {now_kb} kB"
    );
    assert!(d.stop().success());
}
