//! Workloads for the probe-overhead benchmark. Each prints the CPU time
//! (user + system, all threads) of its measured part in nanoseconds on
//! stdout. CPU time rather than wall time: the probes' work runs in the
//! workload's own syscalls and scheduler transitions, and CPU time is not
//! inflated by other processes competing for the machine.
//!
//!   workload pingpong N        N round trips between two threads over pipes
//!   workload udp N             N UDP datagrams to a closed port on 127.0.0.1
//!   workload udpfull N         N UDP datagrams to a socket that never reads
//!                              (dropped with a socket once its buffer is full)
//!   workload warm FILE N       N 4 KiB preads of a cached file
//!   workload cold FILE         evict FILE from the page cache, read it once
//!   workload mmap FILE N       map a cached FILE N times, one byte read per page
//!   workload direct FILE N     N 4 KiB O_DIRECT preads of FILE (block I/O)
//!   workload fork N            N children forked, each exiting at once, reaped
//!                              (CPU time of the workload and its children)
//!
//! Built with plain `rustc -O` (std only) by run.sh.

use std::fs::File;
use std::io::{Read, Write};
use std::net::UdpSocket;
use std::os::unix::fs::FileExt;
use std::os::unix::io::{AsRawFd, FromRawFd};

#[repr(C)]
#[derive(Default)]
struct Timeval {
    sec: i64,
    usec: i64,
}

/// struct rusage: two timevals, then 14 longs we do not read.
#[repr(C)]
#[derive(Default)]
struct Rusage {
    utime: Timeval,
    stime: Timeval,
    rest: [i64; 14],
}

const RUSAGE_SELF: i32 = 0;
const RUSAGE_CHILDREN: i32 = -1;

unsafe extern "C" {
    fn getrusage(who: i32, usage: *mut Rusage) -> i32;
    fn fork() -> i32;
    fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
    fn _exit(status: i32) -> !;
    fn execv(path: *const u8, argv: *const *const u8) -> i32;
    fn pipe(fds: *mut i32) -> i32;
    fn posix_fadvise(fd: i32, offset: i64, len: i64, advice: i32) -> i32;
    fn mmap(addr: *mut u8, len: usize, prot: i32, flags: i32, fd: i32, off: i64) -> *mut u8;
    fn munmap(addr: *mut u8, len: usize) -> i32;
}

const PROT_READ: i32 = 1;
const MAP_SHARED: i32 = 1;

const POSIX_FADV_DONTNEED: i32 = 4;

/// CPU time so far of this process (all threads) or of its reaped
/// children, in nanoseconds.
fn rusage_ns(who: i32) -> u128 {
    let mut u = Rusage::default();
    // SAFETY: getrusage fills the struct we pass.
    assert_eq!(unsafe { getrusage(who, &mut u) }, 0);
    let ns = |t: &Timeval| t.sec as u128 * 1_000_000_000 + t.usec as u128 * 1000;
    ns(&u.utime) + ns(&u.stime)
}

/// Process CPU time so far (all threads), in nanoseconds.
fn cpu_ns() -> u128 {
    rusage_ns(RUSAGE_SELF)
}

/// A CPU-time stopwatch, named like Instant for readability below.
struct Instant(u128);

impl Instant {
    fn now() -> Instant {
        Instant(cpu_ns())
    }
    fn elapsed(&self) -> Elapsed {
        Elapsed(cpu_ns() - self.0)
    }
}

struct Elapsed(u128);

impl Elapsed {
    fn as_nanos(&self) -> u128 {
        self.0
    }
}

fn pipe_pair() -> (File, File) {
    let mut fds = [0i32; 2];
    // SAFETY: pipe writes two fds into the array.
    assert_eq!(unsafe { pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the fds are fresh and owned by the returned Files.
    unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) }
}

fn pingpong(n: u64) -> u128 {
    let (mut a_rx, mut a_tx) = pipe_pair();
    let (mut b_rx, mut b_tx) = pipe_pair();
    let peer = std::thread::spawn(move || {
        let mut b = [0u8; 1];
        for _ in 0..n {
            a_rx.read_exact(&mut b).unwrap();
            b_tx.write_all(&b).unwrap();
        }
    });
    let mut b = [0u8; 1];
    let start = Instant::now();
    for _ in 0..n {
        a_tx.write_all(&b).unwrap();
        b_rx.read_exact(&mut b).unwrap();
    }
    peer.join().unwrap();
    // After the join, so the peer thread's CPU time is included.
    start.elapsed().as_nanos()
}

fn udp(n: u64) -> u128 {
    let closed = UdpSocket::bind("127.0.0.1:0").unwrap();
    let target = closed.local_addr().unwrap();
    drop(closed);
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let start = Instant::now();
    for _ in 0..n {
        let _ = s.send_to(b"x", target);
    }
    start.elapsed().as_nanos()
}

fn udp_full(n: u64) -> u128 {
    // Never read: past its default receive buffer (a few hundred small
    // datagrams) every datagram is dropped on the receive path, with this
    // socket (drops' per-cgroup path reads its cgroup).
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let target = rx.local_addr().unwrap();
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let start = Instant::now();
    for _ in 0..n {
        let _ = s.send_to(b"x", target);
    }
    let ns = start.elapsed().as_nanos();
    drop(rx);
    ns
}

fn warm(path: &str, n: u64) -> u128 {
    let f = File::open(path).unwrap();
    let len = f.metadata().unwrap().len();
    let pages = (len / 4096).max(1);
    let mut buf = [0u8; 4096];
    for p in 0..pages {
        f.read_at(&mut buf, p * 4096).unwrap();
    }
    let start = Instant::now();
    for i in 0..n {
        f.read_at(&mut buf, (i % pages) * 4096).unwrap();
    }
    start.elapsed().as_nanos()
}

fn cold(path: &str) -> u128 {
    let mut f = File::open(path).unwrap();
    // SAFETY: valid fd; drops the file's clean pages from the cache.
    assert_eq!(unsafe { posix_fadvise(f.as_raw_fd(), 0, 0, POSIX_FADV_DONTNEED) }, 0);
    let mut buf = vec![0u8; 1 << 20];
    let start = Instant::now();
    while f.read(&mut buf).unwrap() > 0 {}
    start.elapsed().as_nanos()
}

/// Page faults of file mappings: each pass maps the (cached) file afresh
/// and reads one byte per page, so every page is mapped by fault-around or
/// a fault again.
fn mapped(path: &str, n: u64) -> u128 {
    let f = File::open(path).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    let mut buf = vec![0u8; 1 << 20];
    while (&f).read(&mut buf).unwrap() > 0 {}
    let start = Instant::now();
    let mut sum = 0u64;
    for _ in 0..n {
        // SAFETY: a fresh read-only mapping of an open file of `len`
        // bytes, read within bounds, unmapped below.
        unsafe {
            let m = mmap(std::ptr::null_mut(), len, PROT_READ, MAP_SHARED, f.as_raw_fd(), 0);
            assert!(!m.is_null() && m as isize != -1);
            for off in (0..len).step_by(4096) {
                sum += std::ptr::read_volatile(m.add(off)) as u64;
            }
            assert_eq!(munmap(m, len), 0);
        }
    }
    std::hint::black_box(sum);
    start.elapsed().as_nanos()
}

/// O_DIRECT on x86_64 and aarch64 Linux (std has no libc constants).
const O_DIRECT: i32 = 0o40000;

fn direct(path: &str, n: u64) -> u128 {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_DIRECT)
        .open(path)
        .unwrap();
    let blocks = (f.metadata().unwrap().len() / 4096).max(1);
    let layout = std::alloc::Layout::from_size_align(4096, 4096).unwrap();
    // SAFETY: a non-zero-sized layout; freed below with the same layout.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    assert!(!ptr.is_null());
    // SAFETY: ptr is valid for 4096 bytes until dealloc.
    let buf = unsafe { std::slice::from_raw_parts_mut(ptr, 4096) };
    let start = Instant::now();
    for i in 0..n {
        f.read_exact_at(buf, (i.wrapping_mul(2_654_435_761) % blocks) * 4096)
            .unwrap();
    }
    let ns = start.elapsed().as_nanos();
    // SAFETY: allocated above with this layout.
    unsafe { std::alloc::dealloc(ptr, layout) };
    ns
}

/// N short-lived children: fork, exit at once, reaped. Their own CPU time
/// (the exit path, where the exits probe's tracepoint fires, or the free
/// that follows it) counts too.
fn forks(n: u64) -> u128 {
    let start = rusage_ns(RUSAGE_SELF) + rusage_ns(RUSAGE_CHILDREN);
    for _ in 0..n {
        // SAFETY: the child only calls _exit.
        let pid = unsafe { fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: ends the child at once.
            unsafe { _exit(0) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        assert_eq!(unsafe { waitpid(pid, &mut status, 0) }, pid);
    }
    rusage_ns(RUSAGE_SELF) + rusage_ns(RUSAGE_CHILDREN) - start
}

/// N programs started: fork, exec /bin/true, reaped (the tasks probe's
/// sched_process_exec fires once each).
fn execs(n: u64) -> u128 {
    let path = c"/bin/true".as_ptr().cast::<u8>();
    let argv = [path, std::ptr::null()];
    let start = rusage_ns(RUSAGE_SELF) + rusage_ns(RUSAGE_CHILDREN);
    for _ in 0..n {
        // SAFETY: the child only calls execv and _exit.
        let pid = unsafe { fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: a NUL-terminated path and a null-terminated argv.
            unsafe {
                execv(path, argv.as_ptr());
                _exit(127)
            };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        assert_eq!(unsafe { waitpid(pid, &mut status, 0) }, pid);
        assert_eq!(status, 0, "/bin/true failed");
    }
    rusage_ns(RUSAGE_SELF) + rusage_ns(RUSAGE_CHILDREN) - start
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let num = |i: usize| arg(i).parse::<u64>().expect("a count");
    let ns = match arg(1) {
        "pingpong" => pingpong(num(2)),
        "udp" => udp(num(2)),
        "udpfull" => udp_full(num(2)),
        "warm" => warm(arg(2), num(3)),
        "cold" => cold(arg(2)),
        "mmap" => mapped(arg(2), num(3)),
        "direct" => direct(arg(2), num(3)),
        "fork" => forks(num(2)),
        "exec" => execs(num(2)),
        other => {
            eprintln!("unknown workload {other:?}");
            std::process::exit(2);
        }
    };
    println!("{ns}");
}
