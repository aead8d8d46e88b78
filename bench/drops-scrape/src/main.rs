//! Scrape cost of the drops probe for 2, 64 and 256 CPUs, before and after
//! the per-CPU hash (BENCHMARKS.md, "drops' scrape cost at scale").
//!
//! usage: drops-scrape [SCRAPES]   (root: it creates BPF maps; default 201)
//!
//! What one scrape of the probe's map costs is (a) the bpf(2) lookups,
//! in which the kernel copies every CPU's value into one buffer and out to
//! user space, and (b) summing the CPUs in user space. This machine has
//! few CPUs, so larger ones are simulated, and only this is simulated: a
//! *plain* BPF map whose value is `cpus` times the per-CPU value stands in
//! for the per-CPU map. The kernel then copies the same number of bytes
//! with the same syscalls (one memcpy of the whole value instead of one per
//! CPU), and usescope's own readers (`PerCpuStruct`, `PerCpuCounters`) read
//! it into the same buffers and yield the same per-CPU chunks. Each
//! configuration also runs on a real per-CPU map at this machine's CPU
//! count, to show how close the stand-in is.
//!
//! - before: one array entry of DROPS_PROTOS x DROPS_SLOTS u64 per CPU
//!   (15 392 bytes), read whole, summed over all four protocol rows (the
//!   collector's loop before this change, copied below);
//! - after: the per-CPU array of u64 counters with its in-use bitmap, read
//!   by usescope's own `drops::InUseReader` (the collector's reader): one
//!   batch lookup of the bitmap words, then one lookup per counter in use.
//!
//! Time is this thread's CPU time (user + system, CLOCK_THREAD_CPUTIME_ID),
//! so other processes on a shared machine add little; median of SCRAPES.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::Duration;

use usescope::probes::drops::InUseReader;
use usescope::probes::layout::{DROPS_PROTOS, DROPS_SLOTS, DROPS_USED_WORDS};
use usescope::probes::percpu::{PerCpuCounters, PerCpuStruct};

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;

/// The value of the old per-CPU array: every slot of every protocol.
const OLD_VALUE: usize = DROPS_PROTOS * DROPS_SLOTS * 8;

#[repr(C)]
struct CreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    _zero: [u32; 27],
}

#[repr(C)]
struct ElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

fn bpf<T>(cmd: libc::c_long, attr: &T) -> io::Result<libc::c_long> {
    // SAFETY: every caller passes the bpf_attr member `cmd` reads, with
    // pointers into buffers that outlive the call and are as large as the
    // map's key and value.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *const T, size_of::<T>()) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn create(map_type: u32, key_size: u32, value_size: usize, max_entries: u32) -> OwnedFd {
    let attr = CreateAttr {
        map_type,
        key_size,
        value_size: value_size as u32,
        max_entries,
        map_flags: 0,
        _zero: [0; 27],
    };
    let fd = bpf(BPF_MAP_CREATE, &attr).unwrap_or_else(|e| {
        panic!("BPF_MAP_CREATE type {map_type}, value {value_size} B (root?): {e}")
    });
    // SAFETY: a new fd nothing else owns.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

/// Writes `value` (as large as the map's value, times CPUs for per-CPU maps).
fn update<K>(map: &OwnedFd, key: &K, value: &[u64]) {
    use std::os::fd::AsRawFd;
    let attr = ElemAttr {
        map_fd: map.as_raw_fd() as u32,
        _pad: 0,
        key: key as *const K as u64,
        value: value.as_ptr() as u64,
        flags: 0,
    };
    bpf(BPF_MAP_UPDATE_ELEM, &attr).expect("BPF_MAP_UPDATE_ELEM");
}

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Median thread CPU time of `scrapes` calls of `scrape`, after a warm-up.
fn median(scrapes: usize, mut scrape: impl FnMut()) -> Duration {
    for _ in 0..10 {
        scrape();
    }
    let mut t: Vec<Duration> = (0..scrapes)
        .map(|_| {
            let start = thread_cpu();
            scrape();
            thread_cpu() - start
        })
        .collect();
    t.sort_unstable();
    t[t.len() / 2]
}

/// The old collector's sum (exporter/src/probes/drops.rs before the per-CPU
/// hash): every word of every CPU, all four protocol rows.
fn old_sum(counts: &PerCpuStruct, sums: &mut [u64]) {
    sums.fill(0);
    for cpu in counts.cpus() {
        for (sum, v) in sums.iter_mut().zip(cpu) {
            *sum = sum.wrapping_add(*v);
        }
    }
}

/// Counters in use: `n` reasons spread over the slots, no two adjacent;
/// in protocol 0's row, or in ipv4's (row 1) with the protocol label.
fn counters(n: usize, protocol_label: bool) -> impl Iterator<Item = usize> {
    let row = if protocol_label { DROPS_SLOTS } else { 0 };
    (0..n).map(move |slot| row + slot * 3 % DROPS_SLOTS)
}

struct Row {
    cpus: usize,
    what: String,
    real: bool,
    time: Duration,
    bytes: usize,
    syscalls: usize,
}

fn before(cpus: usize, real: bool, scrapes: usize) -> Row {
    let mut counts = if real {
        let fd = create(BPF_MAP_TYPE_PERCPU_ARRAY, 4, OLD_VALUE, 1);
        update(&fd, &0u32, &vec![1u64; OLD_VALUE / 8 * cpus]);
        PerCpuStruct::from_fd("old drops", fd, OLD_VALUE).unwrap()
    } else {
        let fd = create(BPF_MAP_TYPE_ARRAY, 4, OLD_VALUE * cpus, 1);
        update(&fd, &0u32, &vec![1u64; OLD_VALUE / 8 * cpus]);
        PerCpuStruct::simulated("old drops", fd, OLD_VALUE, cpus).unwrap()
    };
    let mut sums = vec![0u64; DROPS_PROTOS * DROPS_SLOTS];
    let time = median(scrapes, || {
        counts.read().expect("lookup");
        old_sum(&counts, &mut sums);
    });
    assert_eq!(sums[0], cpus as u64, "every CPU summed");
    Row {
        cpus,
        what: "before: per-CPU array, all 4 protocol rows".into(),
        real,
        time,
        bytes: OLD_VALUE * cpus,
        syscalls: 1,
    }
}

/// The map after the change, with `in_use` reasons dropped on every CPU,
/// sized and read as the probe does with or without
/// --probe.drops.protocol-label.
fn after(cpus: usize, in_use: usize, protocol_label: bool, real: bool, scrapes: usize) -> Row {
    let protocols = if protocol_label { DROPS_PROTOS } else { 1 };
    let entries = (DROPS_USED_WORDS + protocols * DROPS_SLOTS) as u32;
    let fd = if real {
        create(BPF_MAP_TYPE_PERCPU_ARRAY, 4, 8, entries)
    } else {
        create(BPF_MAP_TYPE_ARRAY, 4, 8 * cpus, entries)
    };
    let mut bitmap = vec![0u64; DROPS_USED_WORDS];
    for counter in counters(in_use, protocol_label) {
        bitmap[counter / 64] |= 1 << (counter % 64);
        update(
            &fd,
            &((DROPS_USED_WORDS + counter) as u32),
            &vec![1u64; cpus],
        );
    }
    for (w, bits) in bitmap.iter().enumerate() {
        update(&fd, &(w as u32), &vec![*bits; cpus]);
    }
    let counts = if real {
        PerCpuCounters::from_fd("drops", fd).unwrap()
    } else {
        PerCpuCounters::simulated("drops", fd, cpus).unwrap()
    };
    let mut reader = InUseReader::new(counts, protocols).unwrap();
    let time = median(scrapes, || reader.read().expect("lookup"));
    let totals: Vec<_> = reader.totals().collect();
    assert_eq!(totals.len(), in_use);
    assert!(
        totals.iter().all(|&(_, _, t)| t == cpus as u64),
        "every CPU summed"
    );
    reader.take_bytes_read();
    reader.read().unwrap();
    Row {
        cpus,
        what: format!(
            "after: bitmap + counters, {in_use} reasons in use{}",
            if protocol_label {
                ", protocol label"
            } else {
                ""
            }
        ),
        real,
        time,
        bytes: reader.take_bytes_read(),
        // One batch lookup of the bitmap, one lookup per counter in use.
        syscalls: 1 + in_use,
    }
}

fn main() {
    let scrapes = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("SCRAPES: a number"))
        .unwrap_or(201);
    let here = usescope::probes::percpu::possible_cpus().expect("possible CPUs");
    let mut rows = Vec::new();
    for cpus in [2, 64, 256] {
        rows.push(before(cpus, false, scrapes));
        for in_use in [8, 64] {
            rows.push(after(cpus, in_use, false, false, scrapes));
        }
        rows.push(after(cpus, 8, true, false, scrapes));
    }
    // The stand-in against the real per-CPU maps, at this machine's size.
    rows.push(before(here, true, scrapes));
    for in_use in [8, 64] {
        rows.push(after(here, in_use, false, true, scrapes));
    }
    println!("{scrapes} scrapes per row, median thread CPU time (user + system)\n");
    println!(
        "| CPUs | map | per-CPU map | bytes copied per scrape | bpf(2) calls | µs per scrape |"
    );
    println!("|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {} | {} | {} | {:.1} |",
            r.cpus,
            r.what,
            if r.real { "real" } else { "simulated" },
            r.bytes,
            r.syscalls,
            r.time.as_secs_f64() * 1e6
        );
    }
}
