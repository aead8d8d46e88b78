//! The probe loader process: loads and attaches the probes in a child, so
//! the daemon never holds aya's parse of the kernel BTF.
//!
//! Why a process: aya's `EbpfLoader::new()` parses the kernel's 5.5 MB BTF
//! every time (tens of MB of heap for a moment), and a daemon that did
//! that itself would carry the high-water mark, and the heap fragments,
//! for life. The child takes that peak instead and then exits.
//!
//! The exchange, at start-up, before the daemon drops privileges:
//! 1. the daemon runs `/proc/self/exe --internal.probe-loader ARGS...` with
//!    its own arguments (so the child sees the same probe flags and log
//!    format) and one end of a seqpacket socket as the child's stdin;
//! 2. the child loads and attaches every enabled probe, then sends one
//!    message: a JSON [`Report`] and, as SCM_RIGHTS, each attached probe's
//!    map fd, program fds and link fds, which the report names by index;
//! 3. the child exits; the kernel objects live on because the daemon now
//!    holds fds to them. [`Handed::adopt`] turns them into collectors.
//!
//! A child that crashes, hangs (past [`TIMEOUT`]) or sends garbage takes
//! the probes down with a warning that says so; the daemon serves on. One
//! that reports but does not exit by then is killed and reaped, and the
//! probes it handed over are kept. A SIGTERM or SIGINT ends the wait at
//! once: the child is killed and the daemon goes on to exit.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use aya::maps::Map;
use rustix::net::{AddressFamily, SocketFlags, SocketType, socketpair};
use serde::{Deserialize, Serialize};

use super::loader::{Mode, ProbeError};
use super::status::Program;
use super::{ALL, Kernel, Loaded, ProbeSettings, ProbeSpec, fd_passing};
use crate::scrape::collector::Collector;

/// The hidden flag (and clap id) that makes `usescope` the loader.
pub const FLAG: &str = "internal.probe-loader";

/// How long the daemon waits for the loader: its report and its exit
/// after it, together. Loading takes well under a second; the verifier is
/// bounded, so only a wedged child hits this.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// How long a SIGKILLed loader gets to die before it is left unreaped
/// (only a child stuck in an uninterruptible wait takes more than an instant).
const KILL_GRACE: Duration = Duration::from_secs(2);

/// How often to look again where there is no fd to wait on (no pidfd
/// before Linux 5.3).
const TICK: Duration = Duration::from_millis(10);

/// Debug builds only (what the integration tests run): with this set, the
/// loader stops itself (SIGSTOP) right after the hand-over, still holding
/// its copies of the fds, as a wedged or traced loader would; the test
/// checks that the daemon does not wait for it past [`TIMEOUT`].
#[cfg(debug_assertions)]
pub const STOP_AFTER_HAND_OVER: &str = "USESCOPE_TEST_LOADER_STOP_AFTER_HAND_OVER";

/// The running binary, even if its file was replaced since it started.
const SELF_EXE: &str = "/proc/self/exe";

/// What the loader sends: one entry per enabled probe.
#[derive(Serialize, Deserialize, Debug)]
struct Report {
    probes: Vec<ProbeReport>,
}

#[derive(Serialize, Deserialize, Debug)]
struct ProbeReport {
    probe: String,
    /// The attached probe, or why it could not attach.
    outcome: Result<HandedProbe, String>,
}

/// An attached probe; numbers are indexes into the message's fds.
#[derive(Serialize, Deserialize, Debug, Clone)]
struct HandedProbe {
    mode: String,
    map: usize,
    programs: Vec<(String, usize)>,
    links: Vec<usize>,
    names: Vec<String>,
}

// ---- the loader process ----

/// The loader's `main`: load the enabled probes, send the report and the
/// fds on stdin (the daemon's socket), exit.
pub fn main(settings: &ProbeSettings) -> ExitCode {
    raise_memlock_limit();
    let kernel = Kernel::open();
    let mut fds = Vec::new();
    let mut probes = Vec::new();
    for spec in ALL.iter().filter(|p| settings.enabled.contains(&p.name)) {
        let outcome = kernel
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|k| (spec.load)(k, settings))
            .and_then(|loaded| hand_over(spec, loaded, &mut fds))
            .map_err(|e| e.0);
        probes.push(ProbeReport {
            probe: spec.name.to_string(),
            outcome,
        });
    }
    drop(kernel);
    let bytes = match serde_json::to_vec(&Report { probes }) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("usescope probe loader: encoding the report: {e}");
            return ExitCode::FAILURE;
        }
    };
    let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(AsFd::as_fd).collect();
    match fd_passing::send(std::io::stdin(), &bytes, &borrowed) {
        Ok(()) => {
            #[cfg(debug_assertions)]
            if std::env::var_os(STOP_AFTER_HAND_OVER).is_some() {
                // SAFETY: raise has no preconditions; SIGSTOP cannot be
                // caught or blocked, so this stops here until SIGCONT or SIGKILL.
                unsafe { libc::raise(libc::SIGSTOP) };
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("usescope probe loader: sending to the daemon on stdin: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Duplicates the fds the daemon needs out of `loaded` into `fds` and
/// describes them by index. On error `fds` is as it was, and dropping
/// `loaded` detaches the probe.
fn hand_over(
    spec: &ProbeSpec,
    loaded: Loaded,
    fds: &mut Vec<OwnedFd>,
) -> Result<HandedProbe, ProbeError> {
    let before = fds.len();
    let handed = push_fds(spec, loaded, fds);
    if handed.is_err() {
        fds.truncate(before);
    }
    handed
}

fn push_fds(
    spec: &ProbeSpec,
    loaded: Loaded,
    fds: &mut Vec<OwnedFd>,
) -> Result<HandedProbe, ProbeError> {
    let mut push_dup = |what: &str, fd: BorrowedFd<'_>| {
        let fd = fd
            .try_clone_to_owned()
            .map_err(|e| ProbeError(format!("duplicating the fd of {what}: {e}")))?;
        fds.push(fd);
        Ok::<usize, ProbeError>(fds.len() - 1)
    };
    let map = match loaded.ebpf.map(spec.map) {
        Some(Map::PerCpuArray(m) | Map::PerCpuHashMap(m)) => m,
        _ => {
            return Err(ProbeError(format!(
                "map {} missing from the object or not a per-CPU map",
                spec.map
            )));
        }
    };
    let map = push_dup(spec.map, map.fd().as_fd())?;
    let mut programs = Vec::new();
    for &(name, _) in loaded.mode.programs {
        let prog = loaded
            .ebpf
            .program(name)
            .ok_or_else(|| ProbeError(format!("program {name} missing from the object")))?;
        let fd = prog
            .fd()
            .map_err(|e| ProbeError(format!("program {name}: {e}")))?;
        programs.push((name.to_string(), push_dup(name, fd.as_fd())?));
    }
    let links = loaded
        .links
        .into_iter()
        .map(|link| {
            fds.push(link);
            fds.len() - 1
        })
        .collect();
    Ok(HandedProbe {
        mode: loaded.mode.name.to_string(),
        map,
        programs,
        links,
        names: loaded.names,
    })
}

/// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK; lift it so the
/// maps fit. Newer kernels use memory cgroups and ignore it.
fn raise_memlock_limit() {
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads a valid rlimit struct; failure (not root)
    // leaves the limit as it was, which is fine on 5.11+.
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) };
}

// ---- the daemon ----

/// The loader's report and fds, as the daemon received them.
pub struct Handed {
    /// The per-probe reports, or why there are none.
    reports: Result<Vec<ProbeReport>, ProbeError>,
    /// Each fd is taken by the probe the report assigns it to.
    fds: Vec<Option<OwnedFd>>,
}

/// An attached probe as the daemon holds it.
pub struct Adopted {
    pub mode: &'static Mode,
    pub collector: Box<dyn Collector>,
    /// Closing these detaches the programs.
    pub links: Vec<OwnedFd>,
    pub programs: Vec<Program>,
}

/// Runs the loader process and waits for its report.
pub fn run() -> Handed {
    match spawn_and_receive() {
        Ok((report, fds)) => Handed {
            reports: Ok(report.probes),
            fds: fds.into_iter().map(Some).collect(),
        },
        Err(e) => Handed {
            reports: Err(e),
            fds: Vec::new(),
        },
    }
}

fn spawn_and_receive() -> Result<(Report, Vec<OwnedFd>), ProbeError> {
    let failed = |what: &str, e: &dyn std::fmt::Display| {
        ProbeError(format!("probe loader process: {what}: {e}"))
    };
    let (ours, theirs) = socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| failed("creating its socket", &e))?;
    let stop = StopSignals::watch();
    // One deadline for the report and the exit after it: start-up never
    // waits for the loader longer than TIMEOUT.
    let deadline = Instant::now() + TIMEOUT;
    // The Command (and with it our copy of the child's end) is dropped at
    // the end of this block, so a child that dies reads as end-of-file.
    let mut child = {
        let mut cmd = Command::new(SELF_EXE);
        cmd.arg(format!("--{FLAG}"))
            .args(std::env::args_os().skip(1))
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::null());
        cmd.spawn()
            .map_err(|e| failed(&format!("starting {SELF_EXE}"), &e))?
    };
    let pid = child.id();
    let interrupted = |sig: &str| {
        ProbeError(format!(
            "start-up interrupted by {sig} while waiting for the probe loader process \
             (pid {pid}), which was killed (SIGKILL)"
        ))
    };
    // Readable (a message, or end-of-file) means recv does not block.
    let received = match poll_until(Some(ours.as_fd()), Some(&stop), deadline) {
        Waited::Ready => {
            fd_passing::recv(&ours).map_err(|e| failed(&format!("pid {pid}: receiving"), &e))
        }
        Waited::Late => Err(ProbeError(format!(
            "probe loader process (pid {pid}) sent nothing within {} s and was killed (SIGKILL)",
            TIMEOUT.as_secs()
        ))),
        Waited::Stopped(sig) => Err(interrupted(sig)),
    };
    let status = match &received {
        // It will not report any more. Only ever our own child, by its handle.
        Err(_) => kill_and_reap(&mut child),
        Ok((bytes, _)) => match wait_exit(&mut child, Some(&stop), deadline) {
            // The status wait_exit saw (Child keeps it).
            Waited::Ready => child.try_wait().ok().flatten(),
            Waited::Late => {
                let status = kill_and_reap(&mut child);
                // The message arrived whole (one seqpacket, not truncated)
                // and adopt checks every fd with the kernel; the exit adds
                // nothing to that, so the probes are kept. The child's
                // copies of the links are closed now: only ours remain.
                if !bytes.is_empty() {
                    tracing::warn!(
                        pid,
                        timeout_s = TIMEOUT.as_secs(),
                        "probe loader process handed its probes over but did not exit; \
                         killed it (SIGKILL) and reaped it; the probes it handed over are used"
                    );
                }
                status
            }
            Waited::Stopped(sig) => {
                kill_and_reap(&mut child);
                // What it handed over is closed here: we are about to exit.
                return Err(interrupted(sig));
            }
        },
    };
    let (bytes, fds) = received?;
    if bytes.is_empty() {
        let how = status.map_or_else(|| "not reaped".to_string(), |s| s.to_string());
        return Err(ProbeError(format!(
            "probe loader process (pid {pid}) ended without reporting ({how}); \
             its own error, if any, is logged above"
        )));
    }
    let report = serde_json::from_slice(&bytes)
        .map_err(|e| failed(&format!("pid {pid}: malformed report"), &e))?;
    Ok((report, fds))
}

/// How a wait for the loader ended.
enum Waited {
    /// What was waited for happened (or, without an fd, a tick passed).
    Ready,
    /// The deadline passed first.
    Late,
    /// SIGTERM or SIGINT is pending: the daemon is to stop.
    Stopped(&'static str),
}

/// Waits until `child` has exited (not reaping it), the deadline passes or
/// a stop signal is pending.
fn wait_exit(child: &mut Child, stop: Option<&StopSignals>, deadline: Instant) -> Waited {
    // A pidfd turns readable when the process exits.
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1;
    // the pid is our unreaped child, so it cannot name another process.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id(), 0) };
    // SAFETY: a new fd that nothing else owns.
    let pidfd = (pidfd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(pidfd as i32) });
    loop {
        if !matches!(child.try_wait(), Ok(None)) {
            return Waited::Ready;
        }
        match poll_until(pidfd.as_ref().map(AsFd::as_fd), stop, deadline) {
            Waited::Ready => continue,
            other => return other,
        }
    }
}

/// SIGKILLs our child (by its handle) and reaps it, waiting at most
/// [`KILL_GRACE`]. Its exit status, if it was reaped.
fn kill_and_reap(child: &mut Child) -> Option<ExitStatus> {
    let _ = child.kill();
    let reaped = match wait_exit(child, None, Instant::now() + KILL_GRACE) {
        Waited::Ready => child.try_wait().ok().flatten(),
        _ => None,
    };
    if reaped.is_none() {
        tracing::warn!(
            pid = child.id(),
            "probe loader process did not die within {} s of SIGKILL; left unreaped",
            KILL_GRACE.as_secs()
        );
    }
    reaped
}

/// Waits until `fd` is readable (or hung up), a stop signal is pending or
/// `deadline` passes. Without `fd`, or without the signalfd to wake on,
/// it looks again every [`TICK`] (without `fd`, each tick is `Ready`).
fn poll_until(fd: Option<BorrowedFd<'_>>, stop: Option<&StopSignals>, deadline: Instant) -> Waited {
    let signalfd = stop.and_then(|s| s.fd.as_ref());
    let tick = fd.is_none() || (stop.is_some() && signalfd.is_none());
    loop {
        if let Some(sig) = stop.and_then(|_| StopSignals::pending()) {
            return Waited::Stopped(sig);
        }
        let now = Instant::now();
        if now >= deadline {
            return Waited::Late;
        }
        let wait = if tick {
            TICK.min(deadline - now)
        } else {
            deadline - now
        };
        let pollfd = |fd: Option<i32>| libc::pollfd {
            fd: fd.unwrap_or(-1), // poll skips negative fds
            events: libc::POLLIN,
            revents: 0,
        };
        let mut fds = [
            pollfd(fd.map(|f| f.as_raw_fd())),
            pollfd(signalfd.map(AsRawFd::as_raw_fd)),
        ];
        let timeout = libc::timespec {
            tv_sec: wait.as_secs() as libc::time_t,
            tv_nsec: wait.subsec_nanos() as libc::c_long,
        };
        // SAFETY: two valid pollfds, a valid timespec, no signal mask.
        let n = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, &timeout, std::ptr::null()) };
        if n < 0 {
            // Not expected (the signals are held); a failed poll must not
            // end the wait early or spin: look again after a tick.
            std::thread::sleep(TICK.min(wait));
            continue;
        }
        if fds[0].revents != 0 || (fd.is_none() && n == 0) {
            return Waited::Ready;
        }
    }
}

/// SIGTERM and SIGINT, which main.rs holds pending during start-up. A
/// signalfd turns readable while one is pending; polling it does not take
/// the signal, so main still handles it once its handlers exist.
struct StopSignals {
    fd: Option<OwnedFd>,
}

impl StopSignals {
    fn set() -> libc::sigset_t {
        // SAFETY: sigset operations on a zeroed set we own.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::sigaddset(&mut set, libc::SIGINT);
            set
        }
    }

    /// Without the signalfd (none left, say), [`poll_until`] looks at the
    /// pending set every tick instead.
    fn watch() -> StopSignals {
        // SAFETY: signalfd reads the set and returns a new fd or -1.
        let fd =
            unsafe { libc::signalfd(-1, &Self::set(), libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
        StopSignals {
            // SAFETY: a new fd that nothing else owns.
            fd: (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) }),
        }
    }

    /// The stop signal pending for this thread or the process, if any.
    fn pending() -> Option<&'static str> {
        // SAFETY: sigpending fills a set we own; sigismember reads it.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            if libc::sigpending(&mut set) != 0 {
                return None;
            }
            [(libc::SIGTERM, "SIGTERM"), (libc::SIGINT, "SIGINT")]
                .into_iter()
                .find(|&(sig, _)| libc::sigismember(&set, sig) == 1)
                .map(|(_, name)| name)
        }
    }
}

impl Handed {
    /// Turns `spec`'s part of the report into its collector, links and
    /// programs, or says why the probe is down.
    pub fn adopt(
        &mut self,
        spec: &'static ProbeSpec,
        settings: &ProbeSettings,
    ) -> Result<Adopted, ProbeError> {
        let reports = self.reports.as_ref().map_err(Clone::clone)?;
        let handed = reports
            .iter()
            .find(|r| r.probe == spec.name)
            .ok_or_else(|| ProbeError("the probe loader did not report on this probe".into()))?
            .outcome
            .clone()
            .map_err(ProbeError)?;
        let mode = spec
            .modes
            .iter()
            .find(|m| m.name == handed.mode)
            .ok_or_else(|| {
                ProbeError(format!(
                    "probe loader reported unknown mode {}",
                    handed.mode
                ))
            })?;
        let map = self.take(handed.map)?;
        let mut programs = Vec::new();
        for &(name, _) in mode.programs {
            let index = handed
                .programs
                .iter()
                .find(|(n, _)| n == name)
                .map(|&(_, i)| i)
                .ok_or_else(|| ProbeError(format!("probe loader sent no fd for {name}")))?;
            programs.push(Program {
                probe: spec.name,
                name,
                fd: self.take(index)?,
            });
        }
        // One link per program of the mode, and possibly more that the
        // probe made itself (tasks' iterator link), kept alive the same way.
        if handed.links.len() < mode.programs.len() {
            return Err(ProbeError(format!(
                "probe loader sent {} links for {} programs",
                handed.links.len(),
                mode.programs.len()
            )));
        }
        let links = handed
            .links
            .iter()
            .map(|&i| self.take(i))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Adopted {
            mode,
            collector: (spec.build)(map, handed.names, settings).map_err(ProbeError)?,
            links,
            programs,
        })
    }

    fn take(&mut self, index: usize) -> Result<OwnedFd, ProbeError> {
        self.fds
            .get_mut(index)
            .and_then(Option::take)
            .ok_or_else(|| {
                ProbeError(format!(
                    "probe loader report names fd #{index}, which did not arrive or is taken"
                ))
            })
    }
}
