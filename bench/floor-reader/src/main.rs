//! The floor: what reading usescope's /proc files costs the kernel and a
//! process that does nothing else (no parsing, no encoding, no HTTP).
//!
//! usage: floor-reader [--reopen] [--procfs /proc] ITERATIONS
//! Prints CPU microseconds per iteration (user, system, total) measured with
//! getrusage(RUSAGE_SELF), so it is comparable with the utime+stime that the
//! benchmark reads for the exporters.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// The files usescope's default collectors read on one scrape.
const FILES: &[&str] = &[
    "stat",
    "softirqs",
    "loadavg",
    "meminfo",
    "vmstat",
    "zoneinfo",
    "pressure/cpu",
    "pressure/io",
    "pressure/memory",
    "pressure/irq",
    "diskstats",
    "net/dev",
    "net/netstat",
    "net/snmp",
    "net/snmp6",
    "net/sockstat",
    "net/sockstat6",
    "net/softnet_stat",
    "net/stat/nf_conntrack",
    "sys/net/netfilter/nf_conntrack_count",
    "sys/net/netfilter/nf_conntrack_max",
    "schedstat",
    "sys/kernel/ostype",
    "sys/kernel/osrelease",
    "sys/kernel/version",
    "sys/kernel/hostname",
    "sys/kernel/domainname",
];

fn cpu_us() -> (f64, f64) {
    // SAFETY: getrusage writes into the struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    (us(ru.ru_utime), us(ru.ru_stime))
}

fn read_all(f: &File, buf: &mut Vec<u8>) -> usize {
    let mut off = 0;
    loop {
        if buf.len() < off + 16384 {
            buf.resize(off + 16384, 0);
        }
        match f.read_at(&mut buf[off..], off as u64) {
            Ok(0) | Err(_) => return off,
            Ok(n) => off += n,
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let reopen = args.iter().any(|a| a == "--reopen");
    let procfs = args
        .windows(2)
        .find(|w| w[0] == "--procfs")
        .map_or("/proc".to_string(), |w| w[1].clone());
    let iterations: u64 = args
        .iter()
        .rev()
        .find_map(|a| a.parse().ok())
        .unwrap_or(1000);
    let paths: Vec<_> = FILES
        .iter()
        .map(|f| Path::new(&procfs).join(f))
        .filter(|p| p.exists())
        .collect();
    let kept: Vec<File> = paths.iter().filter_map(|p| File::open(p).ok()).collect();
    let mut buf = Vec::new();
    let mut bytes = 0;
    let (u0, s0) = cpu_us();
    for _ in 0..iterations {
        if reopen {
            for p in &paths {
                if let Ok(f) = File::open(p) {
                    bytes += read_all(&f, &mut buf);
                }
            }
        } else {
            for f in &kept {
                bytes += read_all(f, &mut buf);
            }
        }
    }
    let (u1, s1) = cpu_us();
    let n = iterations as f64;
    println!(
        "files={} iterations={} bytes_per_iteration={} user_us={:.1} system_us={:.1} cpu_us={:.1}",
        paths.len(),
        iterations,
        bytes / iterations.max(1) as usize,
        (u1 - u0) / n,
        (s1 - s0) / n,
        (u1 - u0 + s1 - s0) / n
    );
}
