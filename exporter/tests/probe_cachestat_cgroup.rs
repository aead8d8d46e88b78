//! `--probe.cachestat.per-cgroup` on the real kernel: page-cache accesses
//! and misses per memory cgroup (the v1 `memory` hierarchy where it is
//! mounted, else cgroup2, as the probe chooses), in cgroups the test makes.
//!
//! A reader (a forked copy of the test, [`Reader`], one 4 KiB pread() per
//! page) runs in each of two memory cgroups, moved in before it reads:
//! one cold (the file's pages
//! dropped with POSIX_FADV_DONTNEED), one warm. The file is on an ext4 of
//! its own on a loop device whose readahead is off (read_ahead_kb 0), so a
//! reader's misses are exactly the pages it reads that were not resident.
//! Oracles:
//! - each cgroup's accesses = the pages its reader asked for;
//! - each cgroup's misses = the pages mincore(2) found not resident just
//!   before the reader ran (nothing else reads the file meanwhile);
//! - the sums over cgroups (with `other`) equal the host counters of the
//!   same scrape, up to the pages the host's other readers touched between
//!   the collector's read of the host map and of the per-cgroup maps (a few
//!   milliseconds; the slack is [`SLACK`]);
//! - a removed cgroup's series ends, its counts move to `other` (the sums
//!   never go down) and its slot is freed (its id leaves us_cs_cg_slot);
//! - with `--probe.cachestat.max-cgroups=1` a reader past the cap is
//!   counted in `other` and in the overflow counter.
//!
//! Needs root and BPF (skips otherwise; fails under USESCOPE_REQUIRE_BPF=1
//! or CI=true). Host-wide probes, so the tests run one at a time.

mod common;

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::bpf_objects::probe_up;
use common::loop_mount::LoopMount;
use common::{Daemon, can_run_bpf, sample};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const ACCESSES: &str = "usescope_cgroup_page_cache_accesses_total";
const MISSES: &str = "usescope_cgroup_page_cache_misses_total";
const OVERFLOW: &str = "usescope_cgroup_page_cache_overflow_accesses_total";
/// Pages each reader reads (16 MiB of 4 KiB pages).
const READS: u64 = 4096;
/// Pages the host's other readers may touch between the collector's two
/// map reads within one scrape.
const SLACK: f64 = 2000.0;

/// The hierarchy the probe reads: the v1 one with the memory controller,
/// else the cgroup2 mount (as `Hierarchy::find` in the probe).
fn memory_root() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut v2 = None;
    for line in text.lines() {
        let (left, right) = line.split_once(" - ")?;
        let mount = left.split(' ').nth(4)?;
        let mut r = right.split(' ');
        let (fstype, options) = (r.next()?, r.nth(1).unwrap_or(""));
        if fstype == "cgroup" && options.split(',').any(|o| o == "memory") {
            return Some(PathBuf::from(mount));
        }
        if fstype == "cgroup2" && v2.is_none() {
            v2 = Some(PathBuf::from(mount));
        }
    }
    v2
}

/// A memory cgroup named `*.scope` so the default selection picks it;
/// removed on drop, also when the test fails.
struct MemCgroup {
    dir: PathBuf,
    label: String,
}

impl MemCgroup {
    fn create(tag: &str) -> MemCgroup {
        let root = memory_root().expect("no memory cgroup hierarchy mounted");
        let name = format!("usescope-test-{}-{tag}.scope", std::process::id());
        let dir = root.join(&name);
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        MemCgroup {
            dir,
            label: format!("/{name}"),
        }
    }

    /// Has a reader read `pages` pages of `file` with 4 KiB pread()s
    /// inside the cgroup, and returns what `before` (run just before the
    /// reader is let go) returned. See [`Reader`].
    fn read<T>(&self, file: &Path, pages: u64, before: impl FnOnce() -> T) -> T {
        let r = Reader::start(file, pages);
        std::fs::write(self.dir.join("cgroup.procs"), r.pid.to_string()).unwrap();
        let t = before();
        r.run();
        t
    }

    fn id(&self) -> u64 {
        std::fs::metadata(&self.dir).unwrap().ino()
    }

    fn remove(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::remove_dir(&self.dir).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        if self.dir.exists() {
            self.remove();
        }
    }
}

/// A forked copy of the test that preads a file inside a cgroup and
/// nothing else there. A new process (sh, dd) would fault its binary's and
/// libraries' pages in after joining, and those are page-cache accesses of
/// the cgroup too; so the child runs its whole read loop once on a
/// one-page file first (its code pages are then mapped), is moved into the
/// cgroup by the test while it waits on a pipe, reads, reports, and is
/// killed with SIGKILL while waiting again (an exit with no user code).
/// Between fork and kill it only makes system calls, on memory allocated
/// before the fork.
struct Reader {
    pid: libc::pid_t,
    go: libc::c_int,
    done: libc::c_int,
}

/// The child's read loop: `pages` 4 KiB preads of `fd` from offset 0.
#[inline(never)]
fn pread_pages(fd: libc::c_int, buf: &mut [u8], pages: u64) {
    for i in 0..pages {
        // SAFETY: buf holds 4096 bytes.
        unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), 4096, (i * 4096) as libc::off_t) };
    }
}

impl Reader {
    fn start(file: &Path, pages: u64) -> Reader {
        let warm = file.with_file_name("warm-up.bin");
        std::fs::write(&warm, [1u8; 4096]).unwrap();
        let data = File::open(file).unwrap();
        let warm = File::open(&warm).unwrap();
        let mut buf = vec![0u8; 4096];
        let (mut go, mut done) = ([0; 2], [0; 2]);
        // SAFETY: plain pipe(2)s.
        assert_eq!(unsafe { libc::pipe(go.as_mut_ptr()) }, 0);
        assert_eq!(unsafe { libc::pipe(done.as_mut_ptr()) }, 0);
        // SAFETY: the child makes only system calls on memory that exists
        // (no allocation, no locks) until it is killed.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let mut b = [0u8; 1];
            pread_pages(warm.as_raw_fd(), &mut buf, pages);
            // SAFETY: (all) pipe fds made above; b is one byte.
            unsafe {
                libc::write(done[1], b.as_ptr().cast(), 1);
                libc::read(go[0], b.as_mut_ptr().cast(), 1);
            }
            pread_pages(data.as_raw_fd(), &mut buf, pages);
            unsafe {
                libc::write(done[1], b.as_ptr().cast(), 1);
                loop {
                    libc::read(go[0], b.as_mut_ptr().cast(), 1);
                }
            }
        }
        // SAFETY: closing the ends the parent does not use.
        unsafe {
            libc::close(go[0]);
            libc::close(done[1]);
        }
        let r = Reader {
            pid,
            go: go[1],
            done: done[0],
        };
        r.wait_done();
        r
    }

    fn wait_done(&self) {
        let mut p = libc::pollfd {
            fd: self.done,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd; a bounded wait.
        let n = unsafe { libc::poll(&mut p, 1, 60_000) };
        assert_eq!(n, 1, "reader {} did not answer in 60 s", self.pid);
        let mut b = [0u8; 1];
        // SAFETY: one byte into b.
        assert_eq!(
            unsafe { libc::read(self.done, b.as_mut_ptr().cast(), 1) },
            1
        );
    }

    /// Lets the reader read, and waits until it has.
    fn run(&self) {
        let b = [0u8; 1];
        // SAFETY: one byte from b.
        assert_eq!(unsafe { libc::write(self.go, b.as_ptr().cast(), 1) }, 1);
        self.wait_done();
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        // SAFETY: the child this test forked, killed and reaped once.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
            libc::close(self.go);
            libc::close(self.done);
        }
    }
}

/// The test file on its own ext4 with readahead off, and a read-only
/// mapping of it that only mincore looks at.
struct Disk {
    file: File,
    path: PathBuf,
    map: *mut libc::c_void,
    len: usize,
    /// Last: unmounted after the file is closed and unmapped.
    _mount: LoopMount,
}

impl Drop for Disk {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.map, self.len) };
    }
}

impl Disk {
    fn new() -> Option<Disk> {
        // ext4 with verity keeps folios at one page, as in probe_cachestat.
        let mount = LoopMount::new("ext4", &["mkfs.ext4", "-q", "-F", "-O", "verity"], 64)?;
        let ra = format!("/sys/block/{}/queue/read_ahead_kb", mount.device);
        std::fs::write(&ra, "0").unwrap_or_else(|e| panic!("{ra}: {e}"));
        let path = mount.mnt().join("data.bin");
        let len = (READS as usize) * 4096;
        {
            let mut f = File::create(&path).unwrap();
            let chunk: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
            for _ in 0..len / chunk.len() {
                f.write_all(&chunk).unwrap();
            }
            f.sync_all().unwrap();
        }
        let file = File::open(&path).unwrap();
        // SAFETY: a fresh shared read-only mapping of `len` bytes of an
        // open file; unmapped in Drop; never touched, only mincore'd.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        Some(Disk {
            file,
            path,
            map,
            len,
            _mount: mount,
        })
    }

    fn evict(&self) {
        // SAFETY: valid fd; the pages are clean (fsynced).
        let r =
            unsafe { libc::posix_fadvise(self.file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(r, 0);
    }

    /// Pages of the file in the page cache now.
    fn resident(&self) -> u64 {
        let mut vec = vec![0u8; self.len / 4096];
        // SAFETY: the whole mapping; one byte per page.
        let r = unsafe { libc::mincore(self.map, self.len, vec.as_mut_ptr()) };
        assert_eq!(r, 0, "mincore: {}", std::io::Error::last_os_error());
        vec.iter().filter(|&&v| v & 1 == 1).count() as u64
    }
}

fn start(extra: &[&str]) -> Option<Daemon> {
    if !can_run_bpf() {
        return None;
    }
    let mut args = vec![
        "--collector.disable-defaults",
        "--no-probe.runqlat",
        "--no-probe.drops",
        "--probe.cachestat.per-cgroup",
    ];
    args.extend(extra);
    let d = Daemon::start(&args);
    let expo = d.scrape();
    probe_up(&d, &expo, "cachestat").then_some(d)
}

fn of(expo: &str, family: &str, label: &str) -> f64 {
    sample(
        expo,
        &format!("{family}{{cgroup=\"{label}\",container_id=\"\",pod_uid=\"\"}}"),
    )
    .unwrap_or(0.0)
}

/// Sum of a family over its series.
fn total(expo: &str, family: &str) -> f64 {
    expo.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

fn assert_sums(expo: &str) {
    for (family, host) in [
        (ACCESSES, "usescope_page_cache_accesses_total"),
        (MISSES, "usescope_page_cache_misses_total"),
    ] {
        let (sum, host) = (total(expo, family), sample(expo, host).unwrap());
        eprintln!("{family}: sum over cgroups {sum}, host {host}");
        assert!(
            (sum - host).abs() <= SLACK,
            "{family}: sum over cgroups {sum} != host {host}"
        );
    }
}

/// Whether the probe's slot hash holds cgroup id `id` (bpftool).
fn slot_held(id: u64) -> bool {
    let out = Command::new("bpftool")
        .args(["-j", "map", "dump", "name", "us_cs_cg_slot"])
        .output()
        .expect("bpftool");
    let text = String::from_utf8_lossy(&out.stdout);
    // bpftool prints keys as byte arrays; compare the little-endian bytes.
    let bytes: Vec<String> = id
        .to_le_bytes()
        .iter()
        .map(|b| format!("\"0x{b:02x}\""))
        .collect();
    text.contains(&format!("[{}]", bytes.join(",")))
}

#[test]
fn per_cgroup_counts_match_mincore_and_add_up_to_the_host() {
    let _g = serial();
    let Some(disk) = Disk::new() else { return };
    let Some(d) = start(&[]) else { return };
    let cold = MemCgroup::create("a");
    let warm = MemCgroup::create("b");

    disk.evict();
    let resident_cold = cold.read(&disk.path, READS, || disk.resident());
    // Warm: every page read once (by the test, in its own cgroup).
    std::fs::read(&disk.path).unwrap();
    let resident_warm = warm.read(&disk.path, READS, || disk.resident());

    let expo = d.scrape();
    let (a_acc, a_miss) = (
        of(&expo, ACCESSES, &cold.label),
        of(&expo, MISSES, &cold.label),
    );
    let (b_acc, b_miss) = (
        of(&expo, ACCESSES, &warm.label),
        of(&expo, MISSES, &warm.label),
    );
    eprintln!(
        "cold {}: accesses {a_acc} misses {a_miss} (read {READS}, resident before {resident_cold}); \
         warm {}: accesses {b_acc} misses {b_miss} (read {READS}, resident before {resident_warm})",
        cold.label, warm.label
    );
    assert_eq!(a_acc, READS as f64, "cold cgroup's accesses");
    assert_eq!(
        a_miss,
        (READS - resident_cold) as f64,
        "cold cgroup's misses"
    );
    assert_eq!(b_acc, READS as f64, "warm cgroup's accesses");
    assert_eq!(
        b_miss,
        (READS - resident_warm) as f64,
        "warm cgroup's misses"
    );
    assert_sums(&expo);

    // Removed: the series ends, its counts move to other, the slot is freed.
    let id = cold.id();
    assert!(slot_held(id), "cgroup {id} has no slot in us_cs_cg_slot");
    let other_before = of(&expo, ACCESSES, "other");
    cold.remove();
    let expo2 = d.scrape();
    let expo2 = if of(&expo2, ACCESSES, &cold.label) > 0.0 {
        d.scrape()
    } else {
        expo2
    };
    assert_eq!(
        of(&expo2, ACCESSES, &cold.label),
        0.0,
        "removed cgroup's series is still there"
    );
    assert!(
        of(&expo2, ACCESSES, "other") >= other_before + READS as f64,
        "the removed cgroup's accesses did not move to other"
    );
    assert!(!slot_held(id), "removed cgroup {id} still holds a slot");
    assert!(
        total(&expo2, ACCESSES) >= total(&expo, ACCESSES),
        "sum over cgroups went down"
    );
    assert_sums(&expo2);
}

#[test]
fn past_the_cap_reads_go_to_other_and_count_as_overflow() {
    let _g = serial();
    let Some(disk) = Disk::new() else { return };
    let Some(d) = start(&["--probe.cachestat.max-cgroups=1"]) else {
        return;
    };
    let a = MemCgroup::create("capa");
    let b = MemCgroup::create("capb");
    let before = d.scrape();
    a.read(&disk.path, READS, || ());
    b.read(&disk.path, READS, || ());
    let expo = d.scrape();
    let own = of(&expo, ACCESSES, &a.label) + of(&expo, ACCESSES, &b.label);
    let overflow = sample(&expo, OVERFLOW).unwrap() - sample(&before, OVERFLOW).unwrap();
    eprintln!("max-cgroups=1: own series {own}, overflow +{overflow}");
    // One slot: at most one of the two readers has it (another cgroup of
    // the host may have taken it first).
    assert!(own <= READS as f64, "two cgroups got series with one slot");
    // The one without a series (or both) overflowed.
    assert!(
        overflow >= 2.0 * READS as f64 - own,
        "overflow rose by {overflow}"
    );
    assert!(
        of(&expo, ACCESSES, "other") >= overflow,
        "other lacks the overflowed accesses"
    );
    assert_sums(&expo);
}
