//! Every process's /proc/[pid]/stat → node_exporter's processes collector
//! (collector/processes_linux.go), off by default as there:
//! `node_processes_threads`, `node_processes_max_threads`,
//! `node_processes_state{state}`, `node_processes_threads_state{thread_state}`,
//! `node_processes_pids` and `node_processes_max_processes`.
//!
//! It is the one collector whose work grows with the workload: one
//! /proc/[pid]/stat per process, and for each multi-threaded process a
//! listing of /proc/[pid]/task and one stat per thread. The walk is kept
//! cheap and bounded:
//! - no allocation per process: names come from `getdents64` into a reused
//!   buffer, files are opened with `openat` relative to the procfs root and
//!   read into one reused buffer;
//! - a single-threaded process (the kernel's own `num_threads` says so; all
//!   kernel threads and most daemons) is not listed: its only task is the
//!   process itself, whose state node_exporter would count again, so the
//!   result is the same without the two extra system calls;
//! - at most [`MAX_TASKS`] (the kernel's PID_MAX_LIMIT) stat files per
//!   scrape; past that the scrape fails rather than run on.
//!
//! Measured cost is in docs/collectors/system.md.
//!
//! A process or thread that exits between the listing and the read
//! (ENOENT, ESRCH) is skipped, as node_exporter skips it. A stat file that
//! is there but not in the kernel's format fails the collector, naming it.

use std::ffi::CStr;
use std::fs::File;
use std::io::{self, ErrorKind};
use std::os::fd::{AsFd, AsRawFd, FromRawFd};
use std::path::PathBuf;

use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError, excerpt};
use crate::kernel::fs_kind::{PROC_SUPER_MAGIC, magic_of_fd};
use crate::kernel::parse::{parse_fresh, u64_sysctl_into};
use crate::kernel::source::{SourceFile, list_fd, open_dir};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const SPEC: Spec = Spec {
    name: "processes",
    default_enabled: false,
    help: "Processes and threads by state from every /proc/[pid]/stat (walks all tasks), and the pid/thread limits",
    flags: &[],
    build,
    sources: &[
        Source::proc("sys/kernel/threads-max", "processes_limit"),
        Source::proc("sys/kernel/pid_max", "processes_limit"),
        Source::proc("3001/stat", "pid_stat"),
    ],
    parsers: &[
        Parser::numeric("processes_limit", |t| {
            parse_fresh(t, u64_sysctl_into).map(drop)
        }),
        Parser::numeric("pid_stat", |t| {
            parse_pid_stat_into(t, &mut PidStat::default())
        }),
    ],
};

const THREADS: Desc = Desc::gauge("node_processes_threads", "Allocated threads in system");
const MAX_THREADS: Desc = Desc::gauge(
    "node_processes_max_threads",
    "Limit of threads in the system",
);
const STATE: Desc = Desc::gauge("node_processes_state", "Number of processes in each state.");
const THREADS_STATE: Desc = Desc::gauge(
    "node_processes_threads_state",
    "Number of threads in each state.",
);
const PIDS: Desc = Desc::gauge("node_processes_pids", "Number of PIDs");
const MAX_PROCESSES: Desc = Desc::gauge("node_processes_max_processes", "Number of max PIDs limit");

/// Most stat files read in one scrape: Linux's PID_MAX_LIMIT, the most
/// tasks a kernel can have. A tree with more is not a procfs.
pub const MAX_TASKS: usize = 4 << 20;

/// Largest stat file read. A real one is under 1 KiB (the command name is
/// at most 64 bytes).
const MAX_STAT_BYTES: usize = 64 << 10;

/// What the collector uses of one /proc/[pid]/stat.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PidStat<'t> {
    /// Field 3, `R`, `S`, `D`, `Z`, `I`, …
    pub state: &'t str,
    /// Field 20.
    pub num_threads: i64,
}

/// Kinds of the fields procfs's `Proc.Stat()` scans after the state:
/// `i` signed, `u` unsigned (fields 4 to 44 of proc(5)).
const KINDS: &[u8; 41] = b"iiiiiuuuuuuuiiiiiiuuiuuuuuuuuuuuuuiuuuuui";
const NUM_THREADS: usize = 16;

/// Parses /proc/[pid]/stat as procfs does: the command name is between the
/// first `(` and the last `)` (it may hold spaces and parentheses); after
/// `) ` come the state and 41 numbers, each of the type procfs scans it as;
/// fields after those (newer kernels add some) are ignored. The pid before
/// the name must be a number too.
pub fn parse_pid_stat_into<'t>(s: &'t str, out: &mut PidStat<'t>) -> Result<(), ParseError> {
    let b = s.as_bytes();
    let bad = |m: String| ParseError::new(1, m);
    let (Some(l), Some(r)) = (memchr::memchr(b'(', b), memchr::memrchr(b')', b)) else {
        return Err(bad(format!("no (command) in {}", excerpt(s))));
    };
    if r < l || r + 2 > b.len() {
        return Err(bad("malformed (command)".into()));
    }
    let pid = s[..l].trim();
    if pid.is_empty() || !pid.bytes().all(|c| c.is_ascii_digit()) || pid.len() > 19 {
        return Err(bad(format!("pid: not a number: {}", excerpt(pid))));
    }
    // procfs skips the one byte after ')' (a space).
    let rest = s
        .get(r + 2..)
        .ok_or_else(|| bad("malformed text after (command)".into()))?;
    let mut f = rest.split_ascii_whitespace();
    let state = f.next().ok_or_else(|| bad("missing field state".into()))?;
    let mut threads = 0;
    for (i, &kind) in KINDS.iter().enumerate() {
        let field = i + 4;
        let tok = f
            .next()
            .ok_or_else(|| bad(format!("missing field {field}")))?;
        let v = if kind == b'i' {
            tok.parse::<i64>().ok()
        } else {
            tok.parse::<u64>().ok().map(|v| v as i64)
        };
        let Some(v) = v else {
            return Err(bad(format!(
                "field {field}: not {} integer: {}",
                if kind == b'i' { "an" } else { "an unsigned" },
                excerpt(tok)
            )));
        };
        if i == NUM_THREADS {
            threads = v;
        }
    }
    *out = PidStat {
        state,
        num_threads: threads,
    };
    Ok(())
}

/// A count per state, the states' Strings kept across scrapes.
#[derive(Default)]
struct Counts(Vec<(String, u64)>);

impl Counts {
    fn reset(&mut self) {
        // Only a corrupt tree produces many distinct states; forget them.
        if self.0.len() > 64 {
            self.0.clear();
        }
        for (_, n) in &mut self.0 {
            *n = 0;
        }
    }

    fn add(&mut self, state: &str) {
        match self.0.iter_mut().find(|(s, _)| s == state) {
            Some((_, n)) => *n += 1,
            None => self.0.push((state.to_string(), 1)),
        }
    }

    fn encode(&mut self, enc: &mut Encoder, desc: &Desc, label: &str) {
        self.0.sort_unstable();
        enc.family(desc);
        for (state, n) in &self.0 {
            if *n > 0 {
                enc.sample(desc, &[(label, state)], *n);
            }
        }
    }
}

/// Whether an I/O error means the task has gone (it exited meanwhile).
fn vanished(e: &io::Error) -> bool {
    e.kind() == ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
}

/// The scratch state of one walk.
struct Walk {
    root: File,
    /// Whether `root` is a real procfs (the type of what openat returns is
    /// then known; elsewhere each file is checked to be a regular file).
    kernel: bool,
    read_buf: Vec<u8>,
    /// `PID/task/TID/stat\0`, built in place.
    path: Vec<u8>,
    tasks_read: usize,
}

impl Walk {
    /// Reads `PID/stat` or `PID/task/TID/stat` whole into `read_buf`;
    /// returns its length.
    fn read_task(&mut self, pid: u32, tid: Option<u32>) -> io::Result<usize> {
        use std::io::Write;
        self.tasks_read += 1;
        if self.tasks_read > MAX_TASKS {
            return Err(io::Error::other(format!(
                "more than {MAX_TASKS} tasks; walk stopped"
            )));
        }
        self.path.clear();
        let _ = match tid {
            Some(t) => write!(self.path, "{pid}/task/{t}/stat\0"),
            None => write!(self.path, "{pid}/stat\0"),
        };
        // SAFETY: a valid directory fd and a NUL-terminated relative path
        // (digits and slashes, so no NUL before the end).
        let fd = unsafe {
            libc::openat(
                self.root.as_raw_fd(),
                self.path.as_ptr().cast(),
                libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd was just opened and is owned by nobody else.
        let file = unsafe { File::from_raw_fd(fd) };
        if !self.kernel && !file.metadata()?.file_type().is_file() {
            return Err(io::Error::new(
                ErrorKind::InvalidInput,
                "is not a regular file",
            ));
        }
        if self.read_buf.len() < 4096 {
            self.read_buf.resize(4096, 0);
        }
        let mut n = 0;
        loop {
            if n == self.read_buf.len() {
                if n >= MAX_STAT_BYTES {
                    return Err(io::Error::new(
                        ErrorKind::FileTooLarge,
                        format!("is larger than {MAX_STAT_BYTES} bytes"),
                    ));
                }
                self.read_buf.resize(n * 2, 0);
            }
            // SAFETY: reads into the initialised tail of our buffer.
            let got = unsafe {
                libc::read(
                    file.as_raw_fd(),
                    self.read_buf[n..].as_mut_ptr().cast(),
                    self.read_buf.len() - n,
                )
            };
            match got {
                0 => return Ok(n),
                // procfs generates a stat file whole at the first read, so
                // a read that does not fill the buffer is the end there.
                g if g > 0 && self.kernel && (g as usize) < self.read_buf.len() - n => {
                    return Ok(n + g as usize);
                }
                g if g > 0 => n += g as usize,
                _ => {
                    let e = io::Error::last_os_error();
                    if e.kind() != ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
    }
}

/// A task's state, copied out of the read buffer (at most 16 bytes; the
/// kernel's is one letter).
#[derive(Clone, Copy)]
struct State {
    bytes: [u8; 16],
    len: usize,
}

impl State {
    fn new(s: &str) -> State {
        let mut len = s.len().min(16);
        while !s.is_char_boundary(len) {
            len -= 1;
        }
        let mut bytes = [0u8; 16];
        bytes[..len].copy_from_slice(&s.as_bytes()[..len]);
        State { bytes, len }
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or("?")
    }
}

pub struct ProcessesCollector {
    procfs: PathBuf,
    threads_max: SourceFile,
    pid_max: SourceFile,
    pids: Vec<u32>,
    tids: Vec<u32>,
    dir_buf: Vec<u8>,
    read_buf: Vec<u8>,
    path: Vec<u8>,
    states: Counts,
    thread_states: Counts,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(ProcessesCollector {
        procfs: s.procfs.clone(),
        threads_max: SourceFile::small(&s.procfs, "sys/kernel/threads-max"),
        pid_max: SourceFile::small(&s.procfs, "sys/kernel/pid_max"),
        pids: Vec::new(),
        tids: Vec::new(),
        dir_buf: Vec::new(),
        read_buf: Vec::new(),
        path: Vec::new(),
        states: Counts::default(),
        thread_states: Counts::default(),
    })
}

/// A directory entry that names a task: all digits, fits a pid.
fn task_id(name: &str) -> Option<u32> {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    name.parse().ok()
}

/// Totals of one walk.
#[derive(Default)]
struct Totals {
    pids: u64,
    threads: i64,
}

impl ProcessesCollector {
    fn walk(&mut self) -> Result<Option<Totals>, CollectError> {
        let root = match open_dir(&self.procfs) {
            Ok(f) => f,
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
                return Ok(None);
            }
            Err(e) => return Err(CollectError::io(&self.procfs, e)),
        };
        self.pids.clear();
        let pids = &mut self.pids;
        list_fd(root.as_raw_fd(), &mut self.dir_buf, |n| {
            pids.extend(task_id(n))
        })
        .map_err(|e| CollectError::io(&self.procfs, e))?;
        let kernel = magic_of_fd(root.as_fd()) == Some(PROC_SUPER_MAGIC);
        let mut w = Walk {
            root,
            kernel,
            read_buf: std::mem::take(&mut self.read_buf),
            path: std::mem::take(&mut self.path),
            tasks_read: 0,
        };
        let result = self.walk_pids(&mut w);
        self.read_buf = w.read_buf;
        self.path = w.path;
        result.map(Some)
    }

    fn walk_pids(&mut self, w: &mut Walk) -> Result<Totals, CollectError> {
        self.states.reset();
        self.thread_states.reset();
        let mut totals = Totals::default();
        for i in 0..self.pids.len() {
            let pid = self.pids[i];
            let Some((state, threads)) = self.read_stat(w, pid, None)? else {
                continue;
            };
            totals.pids += 1;
            totals.threads += threads;
            self.states.add(state.as_str());
            if threads == 1 {
                // Its only task is itself (see the module documentation).
                self.thread_states.add(state.as_str());
                continue;
            }
            self.walk_threads(w, pid, state)?;
        }
        Ok(totals)
    }

    /// node_exporter's `getThreadStates`: the process's own task counts
    /// with the process's state, every other with its own stat.
    fn walk_threads(&mut self, w: &mut Walk, pid: u32, own: State) -> Result<(), CollectError> {
        let task_dir = || self.procfs.join(format!("{pid}/task"));
        let mut buf = [0u8; 32];
        let len = {
            use std::io::Write;
            let mut c = io::Cursor::new(&mut buf[..]);
            let _ = write!(c, "{pid}/task\0");
            c.position() as usize
        };
        let Ok(rel) = CStr::from_bytes_with_nul(&buf[..len]) else {
            return Ok(());
        };
        // SAFETY: a valid directory fd and a NUL-terminated relative path.
        let fd = unsafe {
            libc::openat(
                w.root.as_raw_fd(),
                rel.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = io::Error::last_os_error();
            if vanished(&e) {
                return Ok(());
            }
            return Err(CollectError::io(&task_dir(), e));
        }
        // SAFETY: fd was just opened and is owned by nobody else.
        let dir = unsafe { File::from_raw_fd(fd) };
        self.tids.clear();
        let tids = &mut self.tids;
        if let Err(e) = list_fd(dir.as_raw_fd(), &mut self.dir_buf, |n| {
            tids.extend(task_id(n))
        }) {
            if vanished(&e) {
                return Ok(());
            }
            return Err(CollectError::io(&task_dir(), e));
        }
        drop(dir);
        for i in 0..self.tids.len() {
            let tid = self.tids[i];
            if tid == pid {
                self.thread_states.add(own.as_str());
                continue;
            }
            if let Some((state, _)) = self.read_stat(w, pid, Some(tid))? {
                self.thread_states.add(state.as_str());
            }
        }
        Ok(())
    }

    /// Reads and parses one stat file: the task's state and
    /// `num_threads`. `None`: the task has gone.
    fn read_stat(
        &self,
        w: &mut Walk,
        pid: u32,
        tid: Option<u32>,
    ) -> Result<Option<(State, i64)>, CollectError> {
        let path = || {
            let rel = match tid {
                Some(t) => format!("{pid}/task/{t}/stat"),
                None => format!("{pid}/stat"),
            };
            self.procfs.join(rel)
        };
        let len = match w.read_task(pid, tid) {
            Ok(n) => n,
            Err(e) if vanished(&e) => return Ok(None),
            Err(e) => return Err(CollectError::io(&path(), e)),
        };
        // The command name may be any bytes; only what follows it is
        // parsed, and that is ASCII.
        let text = String::from_utf8_lossy(&w.read_buf[..len]);
        let mut st = PidStat::default();
        parse_pid_stat_into(&text, &mut st).map_err(|e| CollectError::from_parse(&path(), e))?;
        Ok(Some((State::new(st.state), st.num_threads)))
    }
}

impl Collector for ProcessesCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let mut threads_max = 0;
        let have_threads_max = self
            .threads_max
            .parse_with(|t| u64_sysctl_into(t, &mut threads_max))?
            .is_some();
        let mut pid_max = 0;
        let have_pid_max = self
            .pid_max
            .parse_with(|t| u64_sysctl_into(t, &mut pid_max))?
            .is_some();
        let Some(totals) = self.walk()? else {
            return Ok(());
        };
        enc.family(&THREADS);
        enc.sample(&THREADS, &[], totals.threads);
        if have_threads_max {
            enc.family(&MAX_THREADS);
            enc.sample(&MAX_THREADS, &[], threads_max);
        }
        self.states.encode(enc, &STATE, "state");
        self.thread_states
            .encode(enc, &THREADS_STATE, "thread_state");
        enc.family(&PIDS);
        enc.sample(&PIDS, &[], totals.pids);
        if have_pid_max {
            enc.family(&MAX_PROCESSES);
            enc.sample(&MAX_PROCESSES, &[], pid_max);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::{fixture, render};

    fn parse(s: &str) -> Result<PidStat<'_>, ParseError> {
        let mut p = PidStat::default();
        parse_pid_stat_into(s, &mut p).map(|()| p)
    }

    const KTHREAD: &str = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 24 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n";

    #[test]
    fn parses_stat_lines() {
        assert_eq!(
            parse(KTHREAD).unwrap(),
            PidStat {
                state: "S",
                num_threads: 1
            }
        );
        let evil = "4001 (evil) R 1 (x y) S 1 4001 4001 0 -1 4194560 120 0 0 0 7 3 0 0 20 0 2 0 354800 12345678 600 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
        assert_eq!(parse(evil).unwrap().state, "S");
        assert_eq!(parse(evil).unwrap().num_threads, 2);
        // Older kernels stop at field 44; newer add fields after.
        let short: String = KTHREAD.split(' ').take(44).collect::<Vec<_>>().join(" ");
        assert!(parse(&short).is_ok());
        assert!(parse(&format!("{} 7 8 9\n", KTHREAD.trim_end())).is_ok());
    }

    #[test]
    fn malformed() {
        assert!(parse("").unwrap_err().msg.contains("(command)"));
        assert!(parse("1 (x)").unwrap_err().msg.contains("malformed"));
        assert!(parse(")x( S").is_err());
        assert!(parse("x (a) S 1").unwrap_err().msg.contains("pid"));
        let cut: String = KTHREAD.split(' ').take(30).collect::<Vec<_>>().join(" ");
        assert!(parse(&cut).unwrap_err().msg.contains("missing field"));
        // field 6 (flags) is unsigned; field 4 (ppid) signed.
        let neg = KTHREAD.replacen(" 2129984 ", " -5 ", 1);
        assert!(
            parse(&neg).unwrap_err().msg.contains("field 9"),
            "{:?}",
            parse(&neg)
        );
        let over = KTHREAD.replacen("18446744073709551615", "18446744073709551616", 1);
        assert!(parse(&over).is_err());
        assert!(parse("2 (k)é S 0").is_err());
    }

    fn scrape(procfs: &std::path::Path) -> Result<String, CollectError> {
        render(build(&Settings::with_roots(procfs, "/nonexistent")).as_mut())
    }

    #[test]
    fn collector_on_fixture() {
        // 3001: 13 threads (12 S, 1 own); 3002 kthreadd S; 3010 kworker I;
        // 4000 zombie; 4001 evil comm, 2 threads (own S + one R), a task
        // directory without stat (exited) and 4005 without stat.
        assert_eq!(
            scrape(&fixture("proc")).unwrap(),
            "# HELP node_processes_threads Allocated threads in system\n\
             # TYPE node_processes_threads gauge\n\
             node_processes_threads 18\n\
             # HELP node_processes_max_threads Limit of threads in the system\n\
             # TYPE node_processes_max_threads gauge\n\
             node_processes_max_threads 192730\n\
             # HELP node_processes_state Number of processes in each state.\n\
             # TYPE node_processes_state gauge\n\
             node_processes_state{state=\"I\"} 1\n\
             node_processes_state{state=\"S\"} 3\n\
             node_processes_state{state=\"Z\"} 1\n\
             # HELP node_processes_threads_state Number of threads in each state.\n\
             # TYPE node_processes_threads_state gauge\n\
             node_processes_threads_state{thread_state=\"I\"} 1\n\
             node_processes_threads_state{thread_state=\"R\"} 1\n\
             node_processes_threads_state{thread_state=\"S\"} 15\n\
             node_processes_threads_state{thread_state=\"Z\"} 1\n\
             # HELP node_processes_pids Number of PIDs\n\
             # TYPE node_processes_pids gauge\n\
             node_processes_pids 5\n\
             # HELP node_processes_max_processes Number of max PIDs limit\n\
             # TYPE node_processes_max_processes gauge\n\
             node_processes_max_processes 32768\n"
        );
        assert_eq!(
            scrape(std::path::Path::new("/nonexistent-usescope")).unwrap(),
            ""
        );
    }

    #[test]
    fn corrupt_stat_fails_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("7/task/8")).unwrap();
        std::fs::write(
            dir.path().join("7/stat"),
            KTHREAD.replacen(
                "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1",
                "7 (a) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 2",
                1,
            ),
        )
        .unwrap();
        std::fs::write(dir.path().join("7/task/8/stat"), "8 (a) S x\n").unwrap();
        let e = scrape(dir.path()).unwrap_err();
        assert_eq!(e.file, dir.path().join("7/task/8/stat"));
        // Not a regular file: refused, not read.
        std::fs::remove_file(dir.path().join("7/task/8/stat")).unwrap();
        std::fs::create_dir(dir.path().join("7/task/8/stat")).unwrap();
        let e = scrape(dir.path()).unwrap_err();
        assert!(e.to_string().contains("8/stat"), "{e}");
    }

    #[test]
    fn live_proc_walk_counts_this_process() {
        let out = scrape(std::path::Path::new("/proc")).unwrap();
        let v = |name: &str| -> f64 {
            out.lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .unwrap()
                .parse()
                .unwrap()
        };
        assert!(v("node_processes_pids") >= 1.0);
        assert!(v("node_processes_threads") >= v("node_processes_pids"));
        let per_state: f64 = out
            .lines()
            .filter(|l| l.starts_with("node_processes_threads_state{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        // Threads come and go between the reads; roughly equal.
        let threads = v("node_processes_threads");
        assert!(
            (per_state - threads).abs() <= threads * 0.2 + 8.0,
            "{per_state} vs {threads}"
        );
    }
}
