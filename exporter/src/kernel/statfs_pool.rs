//! statfs(2) off the scrape path, for the filesystem collector.
//!
//! A statfs() on a mount whose server is gone (a dead NFS server, a stopped
//! FUSE daemon) does not return, and no signal short of killing the process
//! ends it. So the calls run on a few threads of their own, and a scrape
//! waits for their answers for at most `--collector.filesystem.mount-timeout`:
//!
//! - `--collector.filesystem.stat-workers` threads (node_exporter's default
//!   4) take the calls from a queue; they are started on the first scrape
//!   and then wait for work between scrapes.
//! - A call that takes longer than [`slow_after`] (a tenth of the timeout,
//!   at most 100 ms) no longer counts as a worker: while calls are queued,
//!   the scrape starts another thread in its place, so a few hanging mounts
//!   cannot starve the healthy ones behind them.
//! - A mount whose call is still running when the scrape's deadline comes
//!   is reported as timed out, and while that call is in flight no new call
//!   is made on the mount: later scrapes report it timed out at once, as
//!   node_exporter's stuck-mount list does. When the call finally returns,
//!   its thread logs it, and the next scrape calls statfs again.
//! - Threads are bounded: at most `stat-workers` + [`MAX_STUCK_THREADS`].
//!   When all of them sit in calls that did not answer by an earlier
//!   deadline, nothing more can be called; the mounts still queued are
//!   reported at once as [`Outcome::Saturated`] instead of waiting, until a
//!   stuck call returns and frees its thread. A host with a thousand hung
//!   mounts therefore costs 36 threads (64 KiB of stack each), not a
//!   thousand.
//!
//! A thread blocked in a hung call cannot be reclaimed; it ends when the
//! call returns or the process exits (a stopped FUSE server's requests wait
//! killably, so exit is prompt; see tests/filesystem_hung.rs).

use std::collections::VecDeque;
use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Threads that may sit in slow or stuck calls beyond the workers.
pub const MAX_STUCK_THREADS: usize = 32;

/// Stack of a statfs thread: it runs one system call at a time.
const STACK_BYTES: usize = 64 * 1024;

/// What statfs() said about one mount point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    /// `f_bsize`: node_exporter multiplies the block counts by it.
    pub bsize: i64,
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    /// `f_flags`: the mount's and the superblock's flags (`ST_RDONLY` is
    /// set when either is read-only); the filesystem collector watches it
    /// for changes that come without a mount event.
    pub flags: u64,
}

/// One mount point's result in one scrape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Outcome {
    /// Not asked (yet).
    Pending,
    Stats(Stats),
    /// statfs() failed with this errno.
    Error(i32),
    /// The call did not return by the deadline, or an earlier call on the
    /// same mount point is still in flight.
    Timeout,
    /// Every thread the bound allows is stuck in an earlier call, so this
    /// mount point was not asked.
    Saturated,
}

struct Job {
    scrape: u64,
    index: usize,
    path: Arc<CStr>,
}

/// A call in flight.
struct Call {
    id: u64,
    path: Arc<CStr>,
    started: Instant,
    scrape: u64,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    /// Every statfs thread alive: idle, calling, or stuck.
    threads: usize,
    /// Threads waiting for work (some may have been woken already).
    idle: usize,
    calls: Vec<Call>,
    next_call: u64,
    /// The scrape in progress; answers to others are dropped.
    scrape: u64,
    /// Its answers, and how many are still to come.
    answers: Vec<(usize, Result<Stats, i32>)>,
    outstanding: usize,
    closed: bool,
}

/// What a thread calls: [`statfs`], or a stand-in in tests.
pub type CallFn = fn(&CStr) -> Result<Stats, i32>;

struct Shared {
    state: Mutex<State>,
    /// Workers wait here for jobs.
    work: Condvar,
    /// The scrape waits here for the last answer.
    answered: Condvar,
    workers: usize,
    timeout: Duration,
    call: CallFn,
    /// Where paths are resolved: another mount namespace's root directory
    /// ([`StatfsPool::in_root`]), or this process's root when `None`.
    root: Option<OwnedFd>,
}

pub struct StatfsPool {
    shared: Arc<Shared>,
    max_threads: usize,
    /// Whether the last scrape found the pool saturated (logged once).
    saturated: bool,
}

/// How long a call may take before its thread stops counting as a worker.
pub fn slow_after(timeout: Duration) -> Duration {
    (timeout / 10).clamp(Duration::from_millis(1), Duration::from_millis(100))
}

impl StatfsPool {
    /// `workers` threads (at least one), each call given `timeout`. No
    /// thread is started until the first call.
    pub fn new(workers: usize, timeout: Duration) -> StatfsPool {
        StatfsPool::with_call(workers, timeout, statfs)
    }

    /// A pool that resolves every path under `root`, an open directory
    /// (`/proc/1/root` of a daemon in a mount namespace of its own), as if
    /// it were `/` ([`statfs_in_root`]): the mounts of the table read from
    /// PID 1 are then stat'ed in PID 1's namespace, also those mounted
    /// after start.
    pub fn in_root(workers: usize, timeout: Duration, root: OwnedFd) -> StatfsPool {
        let mut pool = StatfsPool::new(workers, timeout);
        match Arc::get_mut(&mut pool.shared) {
            Some(shared) => shared.root = Some(root),
            None => unreachable!("no thread holds a new pool"),
        }
        pool
    }

    /// A pool whose threads run `call` instead of statfs (tests).
    pub fn with_call(workers: usize, timeout: Duration, call: CallFn) -> StatfsPool {
        let workers = workers.max(1);
        StatfsPool {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                work: Condvar::new(),
                answered: Condvar::new(),
                workers,
                timeout,
                call,
                root: None,
            }),
            max_threads: workers + MAX_STUCK_THREADS,
            saturated: false,
        }
    }

    /// Calls statfs on `paths[i]` for each `i` in `order` and writes
    /// `out[i]`; `out` is resized to `paths.len()`, and entries not in
    /// `order` stay [`Outcome::Pending`]. Returns within the timeout.
    ///
    /// One thread is woken and works through the queue, so a scrape of
    /// healthy mounts costs two wake-ups (there and back); more threads are
    /// woken or started only while calls are slow.
    pub fn stat_all(&mut self, paths: &[Arc<CStr>], order: &[usize], out: &mut Vec<Outcome>) {
        let start = Instant::now();
        let deadline = start + self.shared.timeout;
        let slow = slow_after(self.shared.timeout);
        out.clear();
        out.resize(paths.len(), Outcome::Pending);
        let mut st = lock(&self.shared.state);
        st.scrape += 1;
        let scrape = st.scrape;
        st.answers.clear();
        for &i in order {
            let path = &paths[i];
            // Never a second call on a mount point whose last one has not
            // returned: it would only hang another thread.
            if st.calls.iter().any(|c| c.path == *path) {
                out[i] = Outcome::Timeout;
            } else {
                st.queue.push_back(Job {
                    scrape,
                    index: i,
                    path: path.clone(),
                });
                st.outstanding += 1;
            }
        }
        let mut saturated = false;
        let mut first = true;
        while st.outstanding > 0 {
            let (wake, stop) = self.top_up(&mut st, scrape, slow, first);
            first = false;
            if wake > 0 {
                // Woken while we hold the lock, a worker would only block
                // on it again: a second sleep and wake-up per scrape.
                drop(st);
                for _ in 0..wake {
                    self.shared.work.notify_one();
                }
                st = lock(&self.shared.state);
                if st.outstanding == 0 {
                    break;
                }
            }
            if stop {
                saturated = true;
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            st = self
                .shared
                .answered
                .wait_timeout(st, (deadline - now).min(slow))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        for (i, result) in st.answers.drain(..) {
            out[i] = match result {
                Ok(s) => Outcome::Stats(s),
                Err(e) => Outcome::Error(e),
            };
        }
        if st.outstanding > 0 {
            // What is still queued is not called any more; what a thread
            // has taken is reported timed out, and while the call hangs, the
            // next scrapes skip the mount.
            st.queue.retain(|j| j.scrape != scrape);
            st.outstanding = 0;
            for &i in order {
                if out[i] == Outcome::Pending {
                    let called = st.calls.iter().any(|c| c.path == paths[i]);
                    out[i] = if saturated && !called {
                        Outcome::Saturated
                    } else {
                        Outcome::Timeout
                    };
                }
            }
        }
        // Late answers to this scrape are dropped from now on.
        st.scrape += 1;
        drop(st);
        if saturated != self.saturated {
            if saturated {
                tracing::warn!(
                    threads = self.max_threads,
                    "every statfs thread is stuck in a mount that does not answer; \
                     other mount points are reported with device_error 1 until one returns"
                );
            } else {
                tracing::info!("statfs threads available again");
            }
            self.saturated = saturated;
        }
    }

    /// Gets threads working on the queue: on the first call one, later
    /// (once per `slow` tick) as many as it takes to have `workers` threads
    /// that are not in a call older than `slow`, within the bound. Starts
    /// the threads it needs, and returns how many idle ones the caller is
    /// to wake once it has released the lock, and whether nothing queued
    /// can run in this scrape: every thread the bound allows is in a call
    /// from an earlier scrape or older than the timeout.
    fn top_up(&self, st: &mut State, scrape: u64, slow: Duration, first: bool) -> (usize, bool) {
        if st.queue.is_empty() {
            return (0, false);
        }
        let now = Instant::now();
        let mut fresh = 0;
        let mut stuck = 0;
        for c in &st.calls {
            let age = now.saturating_duration_since(c.started);
            if age < slow {
                fresh += 1;
            }
            if c.scrape != scrape || age >= self.shared.timeout {
                stuck += 1;
            }
        }
        let want = if first { 1 } else { self.shared.workers };
        let mut working = fresh;
        let mut woken = 0;
        let mut wake = 0;
        while working < want && woken < st.queue.len() {
            if woken < st.idle {
                wake += 1;
            } else if st.threads < self.max_threads && self.spawn() {
                st.threads += 1;
                st.idle += 1; // until it takes a job
            } else {
                break;
            }
            woken += 1;
            working += 1;
        }
        let stop =
            st.idle == 0 && fresh == 0 && st.threads >= self.max_threads && stuck == st.calls.len();
        (wake, stop)
    }

    fn spawn(&self) -> bool {
        let shared = self.shared.clone();
        std::thread::Builder::new()
            .name("statfs".into())
            .stack_size(STACK_BYTES)
            .spawn(move || worker(&shared))
            .map_err(|e| tracing::warn!(error = %e, "could not start a statfs thread"))
            .is_ok()
    }

    /// Threads alive and calls in flight, for tests and logs.
    pub fn threads_and_calls(&self) -> (usize, usize) {
        let st = lock(&self.shared.state);
        (st.threads, st.calls.len())
    }
}

impl Drop for StatfsPool {
    /// Idle threads exit; a thread in a call exits when the call returns.
    /// Nothing waits for them.
    fn drop(&mut self) {
        lock(&self.shared.state).closed = true;
        self.shared.work.notify_all();
    }
}

fn worker(shared: &Shared) {
    let mut st = lock(&shared.state);
    // The spawner counted this thread as idle until it takes a job.
    loop {
        if st.closed {
            st.idle -= 1;
            st.threads -= 1;
            return;
        }
        let Some(job) = st.queue.pop_front() else {
            st = shared.work.wait(st).unwrap_or_else(|p| p.into_inner());
            continue;
        };
        st.idle -= 1;
        let id = st.next_call;
        st.next_call += 1;
        let started = Instant::now();
        st.calls.push(Call {
            id,
            path: job.path.clone(),
            started,
            scrape: job.scrape,
        });
        drop(st);
        let result = match &shared.root {
            Some(root) => statfs_in_root(root.as_fd(), &job.path),
            None => (shared.call)(&job.path),
        };
        let took = started.elapsed();
        st = lock(&shared.state);
        if let Some(at) = st.calls.iter().position(|c| c.id == id) {
            st.calls.swap_remove(at);
        }
        if took >= shared.timeout {
            tracing::info!(
                path = %job.path.to_string_lossy(),
                seconds = took.as_secs_f64(),
                "statfs returned after the mount timeout; the mount point is stat'ed again from the next scrape"
            );
        }
        if job.scrape == st.scrape {
            st.answers.push((job.index, result));
            st.outstanding -= 1;
            if st.outstanding == 0 {
                // Outside the lock, which the woken scrape takes first.
                drop(st);
                shared.answered.notify_one();
                st = lock(&shared.state);
            }
        }
        // `workers` threads outside a call stay; threads started in place
        // of hung calls leave once those return.
        if st.threads - st.calls.len() > shared.workers || st.closed {
            st.threads -= 1;
            return;
        }
        st.idle += 1;
    }
}

/// statfs(2), retried on EINTR; the error is the errno. Called through
/// the C library's statvfs(), which is that one system call with its
/// result copied: the libc crate's `struct statfs` hides `f_flags`, and
/// statvfs's `f_flag` is the same value. (The field types differ between
/// architectures, hence the casts.)
pub fn statfs(path: &CStr) -> Result<Stats, i32> {
    // SAFETY: a NUL-terminated path and a buffer of the right type.
    statvfs_retried(|buf| unsafe { libc::statvfs(path.as_ptr(), buf) })
}

/// [`statfs`] of `path` resolved with `root` as `/` (openat2's
/// RESOLVE_IN_ROOT: `..` and absolute links stay under it; no magic
/// links), through an O_PATH descriptor, so no file is opened for reading.
pub fn statfs_in_root(root: BorrowedFd<'_>, path: &CStr) -> Result<Stats, i32> {
    // SAFETY: open_how is plain data; all-zero is a valid value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    let fd = loop {
        // SAFETY: a valid directory fd, a NUL-terminated path, and an
        // open_how of the size passed.
        let r = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                root.as_raw_fd(),
                path.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if r >= 0 {
            // SAFETY: openat2 returned a new descriptor that we own.
            break unsafe { OwnedFd::from_raw_fd(r as RawFd) };
        }
        let e = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        if e != libc::EINTR {
            return Err(e);
        }
    };
    fstatfs(fd.as_fd())
}

/// [`statfs`] of an open descriptor (fstatvfs: the same system call's
/// result with `f_flag`).
fn fstatfs(fd: BorrowedFd<'_>) -> Result<Stats, i32> {
    // SAFETY: a valid descriptor and a buffer of the right type.
    statvfs_retried(|buf| unsafe { libc::fstatvfs(fd.as_raw_fd(), buf) })
}

/// Runs `call` (statvfs or fstatvfs into the buffer given) until it is
/// not interrupted: the stats, or the errno.
fn statvfs_retried(call: impl Fn(*mut libc::statvfs) -> libc::c_int) -> Result<Stats, i32> {
    loop {
        let mut buf = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
        if call(buf.as_mut_ptr()) == 0 {
            // SAFETY: the call filled it (and it was zeroed before).
            let s = unsafe { buf.assume_init() };
            return Ok(stats_of(&s));
        }
        let e = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        if e != libc::EINTR {
            return Err(e);
        }
    }
}

#[allow(clippy::unnecessary_cast)]
fn stats_of(s: &libc::statvfs) -> Stats {
    Stats {
        bsize: s.f_bsize as i64,
        blocks: s.f_blocks as u64,
        bfree: s.f_bfree as u64,
        bavail: s.f_bavail as u64,
        files: s.f_files as u64,
        ffree: s.f_ffree as u64,
        flags: s.f_flag as u64,
    }
}

/// The pool's lock is never held across a system call.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    /// Released hang groups: a path `/hang-G/...` blocks until `G` is here.
    static RELEASED: Mutex<Vec<String>> = Mutex::new(Vec::new());
    static RELEASE: Condvar = Condvar::new();

    const HEALTHY: Stats = Stats {
        bsize: 4096,
        blocks: 10,
        bfree: 5,
        bavail: 4,
        files: 100,
        ffree: 50,
        flags: 0,
    };

    /// A statfs that answers at once, except on `/hang-G/...` paths, which
    /// block until group G is released, and `/enoent/...`.
    fn fake(path: &CStr) -> Result<Stats, i32> {
        let p = path.to_str().unwrap();
        if p.starts_with("/enoent/") {
            return Err(libc::ENOENT);
        }
        if let Some(rest) = p.strip_prefix("/hang-") {
            let group = rest.split('/').next().unwrap().to_string();
            let mut released = lock(&RELEASED);
            while !released.contains(&group) {
                released = RELEASE.wait(released).unwrap();
            }
            return Err(libc::EIO);
        }
        Ok(HEALTHY)
    }

    fn release(group: &str) {
        lock(&RELEASED).push(group.to_string());
        RELEASE.notify_all();
    }

    fn paths(list: &[String]) -> Vec<Arc<CStr>> {
        list.iter()
            .map(|p| Arc::from(CString::new(p.as_str()).unwrap()))
            .collect()
    }

    fn all(n: usize) -> Vec<usize> {
        (0..n).collect()
    }

    /// Waits until the pool is back to `threads` threads and no calls.
    fn settles(pool: &StatfsPool, threads: usize) {
        let end = Instant::now() + Duration::from_secs(5);
        while pool.threads_and_calls() != (threads, 0) {
            assert!(
                Instant::now() < end,
                "pool did not settle: {:?}",
                pool.threads_and_calls()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn answers_errors_and_lazy_threads() {
        let mut pool = StatfsPool::with_call(4, Duration::from_secs(5), fake);
        assert_eq!(pool.threads_and_calls(), (0, 0), "no thread before a call");
        let p = paths(&["/a".into(), "/enoent/b".into(), "/c".into()]);
        let mut out = Vec::new();
        pool.stat_all(&p, &[0, 1], &mut out);
        assert_eq!(
            out,
            [
                Outcome::Stats(HEALTHY),
                Outcome::Error(libc::ENOENT),
                Outcome::Pending
            ]
        );
        assert!(pool.threads_and_calls().0 <= 4);
    }

    /// A few hung mounts: the scrape answers at the deadline with every
    /// healthy mount, the hung ones are skipped at once afterwards, and all
    /// comes back when the calls return.
    #[test]
    fn hung_mounts_cost_the_timeout_once_then_nothing() {
        let timeout = Duration::from_millis(300);
        let mut pool = StatfsPool::with_call(2, timeout, fake);
        // Hung mounts first: healthy ones must not starve behind them.
        let mut list: Vec<String> = (0..6).map(|i| format!("/hang-few/{i}")).collect();
        list.extend((0..5).map(|i| format!("/ok{i}")));
        let p = paths(&list);
        let mut out = Vec::new();
        let t = Instant::now();
        pool.stat_all(&p, &all(p.len()), &mut out);
        let took = t.elapsed();
        assert!(took >= timeout && took < timeout * 3, "{took:?}");
        assert!(out[..6].iter().all(|o| *o == Outcome::Timeout), "{out:?}");
        assert!(
            out[6..].iter().all(|o| *o == Outcome::Stats(HEALTHY)),
            "{out:?}"
        );
        let (threads, calls) = pool.threads_and_calls();
        assert!(
            calls == 6 && threads <= 2 + 6,
            "{threads} threads, {calls} calls"
        );
        for _ in 0..3 {
            let t = Instant::now();
            pool.stat_all(&p, &all(p.len()), &mut out);
            assert!(t.elapsed() < timeout / 2, "{:?}", t.elapsed());
            assert!(out[..6].iter().all(|o| *o == Outcome::Timeout));
            assert!(out[6..].iter().all(|o| *o == Outcome::Stats(HEALTHY)));
            let (threads, calls) = pool.threads_and_calls();
            assert_eq!(calls, 6, "no new call on a hung mount");
            assert!(threads <= 2 + 6, "{threads} threads");
        }
        release("few");
        settles(&pool, 2);
        pool.stat_all(&p, &all(p.len()), &mut out);
        assert!(out[..6].iter().all(|o| *o == Outcome::Error(libc::EIO)));
    }

    /// More hung mounts than the bound: threads stop at workers + 32, the
    /// mounts nobody can call are reported at once, and the scrape after
    /// does not wait.
    #[test]
    fn thread_bound_holds_with_many_hung_mounts() {
        let timeout = Duration::from_millis(400);
        let mut pool = StatfsPool::with_call(4, timeout, fake);
        let mut list: Vec<String> = (0..100).map(|i| format!("/hang-many/{i}")).collect();
        list.extend((0..3).map(|i| format!("/ok{i}")));
        let p = paths(&list);
        let mut out = Vec::new();
        // Threads are added a few per tick while calls hang, so filling the
        // bound may take more than one scrape on a loaded machine.
        let max = 4 + MAX_STUCK_THREADS;
        for _ in 0..6 {
            let t = Instant::now();
            pool.stat_all(&p, &all(p.len()), &mut out);
            let took = t.elapsed();
            assert!(took < timeout * 3, "{took:?}");
            let (threads, calls) = pool.threads_and_calls();
            assert!(threads <= max, "{threads} threads");
            // Threads woken just before the deadline may not have taken
            // their job yet: at most `workers` are not in a hung call.
            assert!(calls + 4 >= threads, "{threads} threads, {calls} calls");
            if out.contains(&Outcome::Saturated) {
                break;
            }
            assert!(out.iter().all(|o| *o == Outcome::Timeout), "{out:?}");
        }
        assert!(
            out.contains(&Outcome::Saturated),
            "never saturated: {out:?}"
        );
        // The scrape that fills the bound may wait out its deadline (its own
        // calls count as stuck only then); the scrape after must not wait.
        let t = Instant::now();
        pool.stat_all(&p, &all(p.len()), &mut out);
        let took = t.elapsed();
        assert!(took < timeout / 2, "saturated scrape waited {took:?}");
        assert_eq!(pool.threads_and_calls().0, max);
        let count = |want: Outcome| out.iter().filter(|o| **o == want).count();
        assert_eq!(count(Outcome::Timeout), 36, "{out:?}");
        assert_eq!(count(Outcome::Saturated), 103 - 36, "{out:?}");
        release("many");
        settles(&pool, 4);
        pool.stat_all(&p, &all(p.len()), &mut out);
        assert!(out[100..].iter().all(|o| *o == Outcome::Stats(HEALTHY)));
    }

    #[test]
    fn idle_threads_leave_when_the_pool_is_dropped() {
        let mut pool = StatfsPool::with_call(3, Duration::from_secs(1), fake);
        let p = paths(&["/a".into(), "/b".into(), "/c".into(), "/d".into()]);
        pool.stat_all(&p, &all(4), &mut Vec::new());
        let shared = pool.shared.clone();
        drop(pool);
        let end = Instant::now() + Duration::from_secs(5);
        while lock(&shared.state).threads > 0 {
            assert!(Instant::now() < end, "threads did not leave");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Paths resolve under the root given, `..` and absolute links
    /// included: `/` is the root directory itself, never this process's.
    #[test]
    fn statfs_in_root_stays_under_it() {
        let dir = tempfile::tempdir().unwrap();
        // A name only the root given has: found there, absolute, through
        // `..` above the root and through an absolute link, never in this
        // process's own `/`.
        let marker = format!("usescope-marker-{}", std::process::id());
        std::fs::create_dir(dir.path().join(&marker)).unwrap();
        std::os::unix::fs::symlink("/../..", dir.path().join("up")).unwrap();
        let root = OwnedFd::from(std::fs::File::open(dir.path()).unwrap());
        let c = |p: String| std::ffi::CString::new(p).unwrap();
        assert_eq!(statfs(&c(format!("/{marker}"))), Err(libc::ENOENT));
        for p in [
            format!("/{marker}"),
            marker.clone(),
            format!("/../../{marker}"),
            format!("/up/{marker}"),
        ] {
            assert!(statfs_in_root(root.as_fd(), &c(p.clone())).is_ok(), "{p}");
        }
        assert_eq!(
            statfs_in_root(root.as_fd(), c"/nonexistent"),
            Err(libc::ENOENT)
        );
    }

    #[test]
    fn real_statfs() {
        let s = statfs(c"/").unwrap();
        assert!(s.blocks > 0 && s.bsize > 0);
        assert_eq!(statfs(c"/nonexistent-usescope"), Err(libc::ENOENT));
    }
}
