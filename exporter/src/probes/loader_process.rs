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
//! the probes down with a warning that says so; the daemon serves on.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use aya::maps::Map;
use rustix::net::sockopt::{Timeout, set_socket_timeout};
use rustix::net::{AddressFamily, SocketFlags, SocketType, socketpair};
use serde::{Deserialize, Serialize};

use super::loader::{Mode, ProbeError};
use super::status::Program;
use super::{ALL, Kernel, Loaded, ProbeSettings, ProbeSpec, fd_passing};
use crate::collector::Collector;

/// The hidden flag (and clap id) that makes `usescope` the loader.
pub const FLAG: &str = "internal.probe-loader";

/// How long the daemon waits for the loader's report. Loading takes well
/// under a second; the verifier is bounded, so only a wedged child hits this.
pub const TIMEOUT: Duration = Duration::from_secs(60);

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
        Ok(()) => ExitCode::SUCCESS,
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
    set_socket_timeout(&ours, Timeout::Recv, Some(TIMEOUT))
        .map_err(|e| failed("setting the socket timeout", &e))?;
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
    let received = fd_passing::recv(&ours);
    if received.is_err() {
        // Timed out or broken: it will not report any more. Only ever our
        // own child, by its handle.
        let _ = child.kill();
    }
    let status = child.wait();
    let pid = child.id();
    let (bytes, fds) = received.map_err(|e| failed(&format!("pid {pid}: receiving"), &e))?;
    if bytes.is_empty() {
        let how = status.map_or_else(|e| e.to_string(), |s| s.to_string());
        return Err(ProbeError(format!(
            "probe loader process (pid {pid}) ended without reporting ({how}); \
             its own error, if any, is logged above"
        )));
    }
    let report = serde_json::from_slice(&bytes)
        .map_err(|e| failed(&format!("pid {pid}: malformed report"), &e))?;
    Ok((report, fds))
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
        if handed.links.len() != mode.programs.len() {
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
