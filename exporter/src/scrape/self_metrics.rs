//! The daemon's own metrics: `process_*` (as Prometheus client libraries
//! name them), `usescope_build_info` and, unless
//! `--no-compat.node-exporter-build-info`, `node_exporter_build_info`
//! (see [`NODE_EXPORTER_BUILD_INFO`]). These always read the real
//! `/proc/self`, never `--path.procfs`: they describe this process.

use std::fs::File;
use std::path::Path;

use crate::kernel::parse::fields;
use crate::kernel::source::{Read, SourceFile};
use crate::scrape::exposition::{Desc, Encoder};

const CPU: Desc = Desc::counter(
    "process_cpu_seconds_total",
    "Total user and system CPU time spent in seconds.",
);
const OPEN_FDS: Desc = Desc::gauge("process_open_fds", "Number of open file descriptors.");
const MAX_FDS: Desc = Desc::gauge(
    "process_max_fds",
    "Maximum number of open file descriptors.",
);
const VSIZE: Desc = Desc::gauge(
    "process_virtual_memory_bytes",
    "Virtual memory size in bytes.",
);
const VSIZE_MAX: Desc = Desc::gauge(
    "process_virtual_memory_max_bytes",
    "Maximum amount of virtual memory available in bytes.",
);
const RSS: Desc = Desc::gauge(
    "process_resident_memory_bytes",
    "Resident memory size in bytes.",
);
const START: Desc = Desc::gauge(
    "process_start_time_seconds",
    "Start time of the process since unix epoch in seconds.",
);
const BUILD_INFO: Desc = Desc::gauge(
    "usescope_build_info",
    "A metric with a constant '1' value labeled by version, revision and rustversion from which usescope was built.",
);

/// node_exporter's build info (client_golang's version collector), which
/// the node mixin's "USE Method / Node" dashboard lists its `$instance`
/// variable from: without it that dashboard shows no hosts. usescope fills
/// node_exporter's label set with its own build: `version` and `revision`
/// are usescope's, `branch` the git branch it was built from, `goversion`
/// the compiler (`rustc1.95.0`, in Go's `go1.x` shape), `goos`/`goarch` in
/// Go's spelling, and `tags` is `usescope`, which tells the two apart in a
/// query without adding a label node_exporter does not have.
/// docs/collectors/system.md explains the default.
const NODE_EXPORTER_BUILD_INFO: Desc = Desc::gauge(
    "node_exporter_build_info",
    "A metric with a constant '1' value labeled by version, revision, branch, goversion from which node_exporter was built, and the goos and goarch for the build.",
);

/// The running architecture as Go's GOARCH spells it.
pub fn goarch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "x86" => "386",
        "aarch64" => "arm64",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "loongarch64" => "loong64",
        "mips64" if cfg!(target_endian = "little") => "mips64le",
        "mips" if cfg!(target_endian = "little") => "mipsle",
        other => other,
    }
}

pub struct SelfMetrics {
    /// Whether `node_exporter_build_info` is written.
    node_exporter_build_info: bool,
    stat: SourceFile,
    fds: FdCounter,
    clk_tck: f64,
    page_size: f64,
    boot_time: f64,
}

/// Fields of /proc/self/stat that the process metrics need.
#[derive(Debug, PartialEq)]
pub struct ProcSelfStat {
    pub utime_ticks: u64,
    pub stime_ticks: u64,
    pub start_ticks: u64,
    pub vsize_bytes: u64,
    pub rss_pages: u64,
}

/// Parses /proc/PID/stat. The command name may contain spaces and
/// parentheses, so fields are counted from the last `)`.
pub fn parse_proc_self_stat(s: &str) -> Option<ProcSelfStat> {
    let rest = &s[s.rfind(')')? + 1..];
    // After ')': field 3 (state) is the first; `nth` counts from the
    // field after the last one taken.
    let mut f = fields(rest);
    let mut next = |skip: usize| f.nth(skip).and_then(|t| t.parse::<u64>().ok());
    let utime_ticks = next(14 - 3)?;
    let stime_ticks = next(0)?;
    let start_ticks = next(22 - 16)?;
    let vsize_bytes = next(0)?;
    let rss_pages = next(0)?;
    Some(ProcSelfStat {
        utime_ticks,
        stime_ticks,
        start_ticks,
        vsize_bytes,
        rss_pages,
    })
}

impl SelfMetrics {
    pub fn new() -> SelfMetrics {
        // SAFETY: sysconf has no preconditions.
        let clk_tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as f64;
        let boot_time = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("btime "))
                    .and_then(|v| v.trim().parse::<f64>().ok())
            })
            .unwrap_or(0.0);
        SelfMetrics {
            node_exporter_build_info: true,
            stat: SourceFile::new(Path::new("/proc"), "self/stat"),
            fds: FdCounter::open(),
            clk_tck,
            page_size,
            boot_time,
        }
    }

    /// Turns `node_exporter_build_info` on or off (on by default).
    pub fn with_node_exporter_build_info(mut self, on: bool) -> SelfMetrics {
        self.node_exporter_build_info = on;
        self
    }

    pub fn write(&mut self, enc: &mut Encoder) {
        if let Ok(Read::Text(s)) = self.stat.read()
            && let Some(st) = parse_proc_self_stat(s)
        {
            let cpu = (st.utime_ticks + st.stime_ticks) as f64 / self.clk_tck;
            enc.family(&CPU);
            enc.sample(&CPU, &[], cpu);
            enc.family(&VSIZE);
            enc.sample(&VSIZE, &[], st.vsize_bytes);
            enc.family(&RSS);
            enc.sample(&RSS, &[], st.rss_pages as f64 * self.page_size);
            enc.family(&START);
            enc.sample(
                &START,
                &[],
                self.boot_time + st.start_ticks as f64 / self.clk_tck,
            );
        }
        if let Some(n) = self.fds.count() {
            enc.family(&OPEN_FDS);
            enc.sample(&OPEN_FDS, &[], n);
        }
        enc.family(&MAX_FDS);
        enc.sample(&MAX_FDS, &[], rlimit(libc::RLIMIT_NOFILE));
        enc.family(&VSIZE_MAX);
        enc.sample(&VSIZE_MAX, &[], rlimit(libc::RLIMIT_AS));
        enc.family(&BUILD_INFO);
        enc.sample(
            &BUILD_INFO,
            &[
                ("version", env!("CARGO_PKG_VERSION")),
                ("revision", env!("USESCOPE_GIT_REVISION")),
                ("rustversion", env!("USESCOPE_RUSTC_VERSION")),
            ],
            1u64,
        );
        if self.node_exporter_build_info {
            let d = &NODE_EXPORTER_BUILD_INFO;
            enc.family(d);
            enc.sample(
                d,
                &[
                    ("branch", env!("USESCOPE_GIT_BRANCH")),
                    ("goarch", goarch()),
                    ("goos", std::env::consts::OS),
                    (
                        "goversion",
                        concat!("rustc", env!("USESCOPE_RUSTC_VERSION")),
                    ),
                    ("revision", env!("USESCOPE_GIT_REVISION")),
                    ("tags", "usescope"),
                    ("version", env!("CARGO_PKG_VERSION")),
                ],
                1u64,
            );
        }
    }
}

impl Default for SelfMetrics {
    fn default() -> Self {
        SelfMetrics::new()
    }
}

/// Counts this process's open fds, the number a listing of
/// `/proc/self/fd` gives, without listing it (a dentry lookup per fd: with
/// the ~150 descriptors usescope keeps, 110–140 µs on the development VM).
///
/// Since Linux 6.2, stat() of a `/proc/PID/fd` directory reports the open
/// fd count as its size (one bitmap count in the kernel: 4.6 µs cold against
/// 13.5 µs for the poll below, by bench/cold-costs; BENCHMARKS.md). The directory is opened once,
/// at start-up, before `--runtime.user` makes the process non-dumpable, and
/// counted with fstat().
///
/// Older kernels report size 0 there, and then the count comes from one
/// `poll(2)` over every slot of the fd table, asking for no events: the
/// kernel answers POLLNVAL for a slot that holds no file, so the count is
/// the slots without it. An `O_PATH` descriptor counts as closed to poll;
/// usescope opens none.
///
/// The table's size is `FDSize` in `/proc/self/status`. The kernel hands
/// out the lowest free number, so the table grows only once its top is in
/// use: the size is read again when an fd in the top quarter is open, and
/// every [`RECHECK_EVERY`] counts in case something placed an fd high on
/// purpose. The status file is opened at start-up too.
struct FdCounter {
    /// `/proc/self/fd`, for its size; `None` once the kernel reports 0.
    fd_dir: Option<File>,
    status: Option<File>,
    table: usize,
    polls: Vec<libc::pollfd>,
    counts: u32,
    buf: Vec<u8>,
}

/// Counts between two reads of `FDSize`.
const RECHECK_EVERY: u32 = 64;

impl FdCounter {
    fn open() -> FdCounter {
        FdCounter {
            fd_dir: File::open("/proc/self/fd").ok(),
            status: File::open("/proc/self/status").ok(),
            table: 0,
            polls: Vec::new(),
            counts: 0,
            buf: vec![0; 4096],
        }
    }

    fn count(&mut self) -> Option<u64> {
        if let Some(dir) = &self.fd_dir {
            // At least this directory's own descriptor is open, so 0 means
            // a kernel that does not report the count.
            match dir.metadata().map(|m| m.len()) {
                Ok(n) if n > 0 => return Some(n),
                _ => self.fd_dir = None,
            }
        }
        self.count_by_poll()
    }

    fn count_by_poll(&mut self) -> Option<u64> {
        if self.counts.is_multiple_of(RECHECK_EVERY) {
            self.table = self.table_size()?;
        }
        self.counts = self.counts.wrapping_add(1);
        loop {
            let (open, highest) = self.poll_table()?;
            if highest.is_some_and(|h| h >= self.table - self.table / 4) {
                let size = self.table_size()?;
                if size > self.table {
                    self.table = size;
                    continue;
                }
            }
            return Some(open);
        }
    }

    /// (open fds, the highest open fd) among the first `table` slots.
    fn poll_table(&mut self) -> Option<(u64, Option<usize>)> {
        // poll() refuses more entries than RLIMIT_NOFILE allows, and no fd
        // at or above the soft limit can be opened.
        let n = self.table.min(rlimit(libc::RLIMIT_NOFILE) as usize);
        self.polls.clear();
        self.polls.extend((0..n).map(|fd| libc::pollfd {
            fd: fd as libc::c_int,
            events: 0,
            revents: 0,
        }));
        // SAFETY: poll reads and writes the `n` entries we own; timeout 0
        // returns at once without waiting on any of them.
        if unsafe { libc::poll(self.polls.as_mut_ptr(), n as libc::nfds_t, 0) } < 0 {
            return None;
        }
        let mut open = 0;
        let mut highest = None;
        for (fd, p) in self.polls.iter().enumerate() {
            if p.revents & libc::POLLNVAL == 0 {
                open += 1;
                highest = Some(fd);
            }
        }
        Some((open, highest))
    }

    /// `FDSize` from /proc/self/status.
    fn table_size(&mut self) -> Option<usize> {
        use std::os::unix::fs::FileExt;
        let f = self.status.as_ref()?;
        let n = f.read_at(&mut self.buf, 0).ok()?;
        let text = std::str::from_utf8(&self.buf[..n]).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("FDSize:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|&v| v > 0)
    }
}

/// The soft limit as a float; RLIM_INFINITY becomes 2^64 as client_golang reports it.
fn rlimit(resource: libc::__rlimit_resource_t) -> f64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(resource, &mut lim) } != 0 {
        return 0.0;
    }
    lim.rlim_cur as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_comm_with_spaces_and_parens() {
        let s = "123 (a b) c) S 1 2 3 4 5 6 7 8 9 10 250 30 0 0 20 0 1 0 500 1048576 300 18446744073709551615 0";
        let st = parse_proc_self_stat(s).unwrap();
        assert_eq!(st.utime_ticks, 250);
        assert_eq!(st.stime_ticks, 30);
        assert_eq!(st.start_ticks, 500);
        assert_eq!(st.vsize_bytes, 1048576);
        assert_eq!(st.rss_pages, 300);
        assert!(parse_proc_self_stat("garbage").is_none());
        assert!(parse_proc_self_stat("1 (x) S 1").is_none());
    }

    /// The fd-counting tests change the process's fd table themselves (the
    /// growth test opens files by the hundred), so they take turns; other
    /// tests' opens are what the retries below are for.
    static FD_TABLE: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn fd_table_turn() -> std::sync::MutexGuard<'static, ()> {
        FD_TABLE.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `attempt` held at least once in 200 tries, 1 ms apart after
    /// a failed one: other tests in this process open and close files at
    /// any moment (hundreds at once under `cargo test`), so an exact
    /// comparison needs a quiet moment, not a single try.
    fn in_a_quiet_moment(mut attempt: impl FnMut() -> bool) -> bool {
        (0..200).any(|_| {
            attempt() || {
                std::thread::sleep(std::time::Duration::from_millis(1));
                false
            }
        })
    }

    /// A counter that counts by poll, as on kernels before 6.2.
    fn poll_counter() -> FdCounter {
        FdCounter {
            fd_dir: None,
            ..FdCounter::open()
        }
    }

    #[test]
    fn counts_open_fds_like_read_dir() {
        let _turn = fd_table_turn();
        for (method, mut c) in [("stat", FdCounter::open()), ("poll", poll_counter())] {
            // An attempt counts only if nothing else changed meanwhile.
            let exact = in_a_quiet_moment(|| {
                // read_dir also counts the directory fd it holds while listing.
                let listed = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
                let before = c.count().unwrap();
                let extra: Vec<File> = (0..5)
                    .map(|_| File::open("/proc/self/stat").unwrap())
                    .collect();
                let with_extra = c.count().unwrap();
                drop(extra);
                let after = c.count().unwrap();
                listed == before + 1 && with_extra == before + 5 && after == before
            });
            assert!(exact, "{method}: no attempt matched read_dir's count");
        }
    }

    /// On 6.2 and later the count is the size of /proc/self/fd, not a poll.
    #[test]
    fn counts_by_stat_on_kernels_that_report_it() {
        let _turn = fd_table_turn();
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut parts = release.trim().split(['.', '-']);
        let major: u32 = parts.next().unwrap().parse().unwrap();
        let minor: u32 = parts.next().unwrap().parse().unwrap();
        let mut c = FdCounter::open();
        c.count().unwrap();
        assert_eq!(
            c.fd_dir.is_some(),
            (major, minor) >= (6, 2),
            "kernel {release}"
        );
    }

    /// The kernel hands out the lowest free fd, so opening many files grows
    /// the table from the top: one counter, kept across the growth, must
    /// still match read_dir at every step, as must a fresh counter after an
    /// fd was placed far above the table on purpose (dup2).
    #[test]
    fn follows_the_fd_table_as_it_grows() {
        let _turn = fd_table_turn();
        let mut c = poll_counter();
        let first_table = c.table_size().unwrap();
        let exact = |c: &mut FdCounter| {
            in_a_quiet_moment(|| {
                let listed = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
                let counted = c.count().unwrap();
                let listed_again = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
                listed == counted + 1 && listed_again == listed
            })
        };
        let mut held = Vec::new();
        while c.table_size().unwrap() <= first_table * 2 {
            held.extend((0..40).map(|_| File::open("/proc/self/stat").unwrap()));
            assert!(
                exact(&mut c),
                "count differs from read_dir at {} held",
                held.len()
            );
        }
        drop(held);
        assert!(exact(&mut c));

        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        let f = File::open("/proc/self/stat").unwrap();
        let high = (c.table_size().unwrap() * 4) as libc::c_int;
        // SAFETY: dup2 onto a number this test owns; the OwnedFd closes it.
        let rc = unsafe { libc::dup2(f.as_raw_fd(), high) };
        assert_eq!(rc, high, "dup2: {}", std::io::Error::last_os_error());
        // SAFETY: `high` is a descriptor dup2 has just opened for us.
        let _high = unsafe { OwnedFd::from_raw_fd(high) };
        assert!(exact(&mut poll_counter()), "an fd at {high} was missed");
        assert!(
            exact(&mut FdCounter::open()),
            "stat: an fd at {high} was missed"
        );
    }
}
