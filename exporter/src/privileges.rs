//! Least privilege after start-up.
//!
//! usescope needs privileges only to load and attach its BPF programs (and to
//! bind a port below 1024). Once that is done, every later operation works on
//! descriptors it already holds (BPF maps, program info, the stats fd, kept
//! /proc fds) or on world-readable files. So after attaching, the daemon:
//!
//! 1. empties its capability bounding set (no way back, even through exec);
//! 2. optionally switches to `--runtime.user` (groups, gid, then uid);
//!    skipped when the process already runs as that user, and skipped with
//!    a warning when it lacks CAP_SETUID/CAP_SETGID (a container started
//!    with no capabilities at all must still serve its /proc metrics);
//! 3. clears its effective, permitted, inheritable and ambient capabilities;
//! 4. sets `no_new_privs`;
//! 5. reads its own status back and fails start-up if any capability is left.
//!
//! **All of this is per thread** in the kernel (capabilities, the bounding
//! set and no_new_privs are thread attributes; only glibc's setuid is
//! broadcast to every thread). So it must run while the process has exactly
//! one thread: main.rs calls it before the async runtime starts its workers,
//! and [`drop_after_attach`] refuses to run if another thread exists. Threads
//! created afterwards inherit the dropped state.
//!
//! The capabilities needed *before* this point are documented in
//! docs/deployment.md: CAP_BPF and CAP_PERFMON to load and attach tracing
//! programs, CAP_SYS_ADMIN only for the kernel's BPF run-time statistics
//! (BPF_ENABLE_STATS, with --probe.bpf-stats), CAP_SETUID/CAP_SETGID/CAP_SETPCAP to drop privileges.

use std::ffi::CString;

/// Capabilities are numbered 0..=CAP_LAST_CAP; the kernel tells us the last.
fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63)
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
const PR_CAP_AMBIENT: i32 = 47;
const PR_CAP_AMBIENT_CLEAR_ALL: u64 = 4;

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// What [`drop_after_attach`] left behind, read back from the kernel.
#[derive(Debug)]
pub struct Dropped {
    /// The user we switched to (or already were), if any.
    pub user: Option<(String, u32, u32)>,
    /// Why `--runtime.user` could not be honoured, if it could not.
    pub user_not_switched: Option<String>,
    /// The real uid after the drop (0 when no `--runtime.user` was given
    /// and we started as root).
    pub uid: u32,
    /// Whether the bounding set could be emptied. Without CAP_SETPCAP it
    /// stays as it was; harmless with no_new_privs and no capabilities
    /// (nothing can be gained through exec), but worth saying.
    pub bounding_set_emptied: bool,
}

impl Dropped {
    /// One log line that says exactly what happened.
    pub fn describe(&self) -> String {
        let who = match &self.user {
            Some((name, uid, gid)) => format!("running as {name} (uid {uid}, gid {gid})"),
            None => format!("running as uid {}", self.uid),
        };
        let bnd = if self.bounding_set_emptied {
            "bounding set empty"
        } else {
            "bounding set unchanged (no CAP_SETPCAP to drop it)"
        };
        let mut line = format!("{who} with no capabilities ({bnd}, no_new_privs on every thread)");
        if let Some(why) = &self.user_not_switched {
            line.push_str(&format!("; {why}"));
        }
        line
    }
}

/// Drops everything; see the module docs.
pub fn drop_after_attach(runtime_user: Option<&str>) -> Result<Dropped, String> {
    let threads = thread_count().map_err(|e| format!("counting threads: {e}"))?;
    if threads != 1 {
        // A thread that already exists would keep every capability.
        return Err(format!(
            "{threads} threads exist; privileges must be dropped while the process has one"
        ));
    }
    let mut target = runtime_user.map(lookup_user).transpose()?;
    let mut user_not_switched = None;
    if let Some((name, uid, gid)) = &target
        && needs_switch(*uid, *gid)
        && !has_setuid_and_setgid()?
    {
        user_not_switched = Some(format!(
            "--runtime.user {name} not applied: switching to uid {uid} needs CAP_SETUID and \
             CAP_SETGID at start-up, and this process lacks one or both (give them, or start it as \
             that user); a flaw in usescope would act with this uid's file access"
        ));
        target = None;
    }
    let mut bounding_set_emptied = true;
    // SAFETY: prctl/setgroups/setgid/setuid/syscall are called with valid
    // arguments and have no memory-safety preconditions beyond that.
    unsafe {
        for cap in 0..=last_cap() {
            if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) != 0 {
                match errno().raw_os_error() {
                    // A capability this kernel does not know: nothing to drop.
                    Some(libc::EINVAL) => {}
                    // No CAP_SETPCAP (not started as root): checked below.
                    Some(libc::EPERM) => bounding_set_emptied = false,
                    _ => return Err(format!("prctl(PR_CAPBSET_DROP, {cap}): {}", errno())),
                }
            }
        }
        if let Some((name, uid, gid)) = &target
            && needs_switch(*uid, *gid)
        {
            if libc::setgroups(0, std::ptr::null()) != 0 {
                return Err(format!("--runtime.user {name}: setgroups: {}", errno()));
            }
            if libc::setgid(*gid) != 0 {
                return Err(format!("--runtime.user {name}: setgid({gid}): {}", errno()));
            }
            if libc::setuid(*uid) != 0 {
                return Err(format!("--runtime.user {name}: setuid({uid}): {}", errno()));
            }
        }
        // Fails only on kernels without ambient capabilities (< 4.3), which
        // then have none to clear.
        libc::prctl(
            PR_CAP_AMBIENT,
            PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        );
        let mut header = CapHeader {
            version: LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [CapData::default(); 2];
        if libc::syscall(
            libc::SYS_capset,
            &mut header as *mut CapHeader,
            data.as_ptr(),
        ) != 0
        {
            return Err(format!("capset: {}", errno()));
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(format!("prctl(PR_SET_NO_NEW_PRIVS): {}", errno()));
        }
    }
    verify_dropped(bounding_set_emptied)?;
    Ok(Dropped {
        user: target,
        user_not_switched,
        // SAFETY: getuid cannot fail.
        uid: unsafe { libc::getuid() },
        bounding_set_emptied,
    })
}

/// Reads /proc/thread-self/status back: the kernel's word, not ours.
fn verify_dropped(bounding_set_emptied: bool) -> Result<(), String> {
    let status = std::fs::read_to_string("/proc/thread-self/status")
        .map_err(|e| format!("reading /proc/thread-self/status to verify the drop: {e}"))?;
    let mut fields = vec!["CapEff", "CapPrm", "CapInh", "CapAmb"];
    if bounding_set_emptied {
        fields.push("CapBnd");
    }
    for field in fields {
        let value = status_field(&status, field)
            .ok_or_else(|| format!("no {field} in /proc/thread-self/status"))?;
        if !value.trim_start_matches('0').is_empty() {
            return Err(format!("{field} is {value} after dropping privileges"));
        }
    }
    if status_field(&status, "NoNewPrivs") != Some("1") {
        return Err("NoNewPrivs is not 1 after setting it".into());
    }
    Ok(())
}

/// Whether the process is not yet exactly `uid`/`gid`, with no
/// supplementary group but `gid` itself (which runc adds). Already being
/// that user is not an error even without capabilities (`docker run --user
/// 65534:65534 --cap-drop ALL`), but calling setgroups would be: it needs
/// CAP_SETGID even when nothing changes.
fn needs_switch(uid: u32, gid: u32) -> bool {
    let (mut r, mut e, mut s) = (0, 0, 0);
    let (mut rg, mut eg, mut sg) = (0, 0, 0);
    let mut groups = [0 as libc::gid_t; 64];
    // SAFETY: getresuid/getresgid write to the locals; getgroups writes at
    // most groups.len() entries and returns how many (-1 if there are more).
    let n = unsafe {
        libc::getresuid(&mut r, &mut e, &mut s);
        libc::getresgid(&mut rg, &mut eg, &mut sg);
        libc::getgroups(groups.len() as libc::c_int, groups.as_mut_ptr())
    };
    let other_groups = usize::try_from(n).map_or(true, |n| groups[..n].iter().any(|&g| g != gid));
    [r, e, s] != [uid; 3] || [rg, eg, sg] != [gid; 3] || other_groups
}

/// Whether CAP_SETUID and CAP_SETGID are both effective, per the kernel.
fn has_setuid_and_setgid() -> Result<bool, String> {
    let status = std::fs::read_to_string("/proc/thread-self/status")
        .map_err(|e| format!("reading /proc/thread-self/status: {e}"))?;
    let eff = status_field(&status, "CapEff")
        .and_then(|v| u64::from_str_radix(v, 16).ok())
        .ok_or("no readable CapEff in /proc/thread-self/status")?;
    const CAP_SETGID: u32 = 6;
    const CAP_SETUID: u32 = 7;
    let wanted = (1u64 << CAP_SETUID) | (1u64 << CAP_SETGID);
    Ok(eff & wanted == wanted)
}

fn status_field<'a>(status: &'a str, field: &str) -> Option<&'a str> {
    status.lines().find_map(|l| {
        l.strip_prefix(field)
            .and_then(|r| r.strip_prefix(':'))
            .map(str::trim)
    })
}

fn thread_count() -> std::io::Result<usize> {
    Ok(std::fs::read_dir("/proc/self/task")?.count())
}

/// Raises the soft limit on open files to the hard limit, as Go programs
/// (node_exporter among them) do at start. systemd and many containers set
/// the soft limit to 1024, which a few hundred held connections would
/// exhaust; the hard limit is what the operator actually allowed.
pub fn raise_fd_limit() -> Result<u64, String> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write/read the struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return Err(format!("getrlimit(RLIMIT_NOFILE): {}", errno()));
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
                return Err(format!(
                    "setrlimit(RLIMIT_NOFILE, {}): {}",
                    lim.rlim_max,
                    errno()
                ));
            }
        }
    }
    Ok(lim.rlim_max)
}

/// Resolves a user name (or a numeric uid) to (name, uid, primary gid).
fn lookup_user(user: &str) -> Result<(String, u32, u32), String> {
    let c = CString::new(user).map_err(|_| format!("--runtime.user {user:?}: invalid name"))?;
    // SAFETY: getpwnam/getpwuid return a pointer into static storage or
    // null; we copy the fields out immediately. Start-up is single-threaded.
    unsafe {
        let mut pw = libc::getpwnam(c.as_ptr());
        if pw.is_null()
            && let Ok(uid) = user.parse::<u32>()
        {
            pw = libc::getpwuid(uid);
        }
        if pw.is_null() {
            return Err(format!("--runtime.user {user:?}: no such user"));
        }
        Ok((user.to_string(), (*pw).pw_uid, (*pw).pw_gid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_user_is_a_clear_error() {
        let e = lookup_user("no-such-user-usescope").unwrap_err();
        assert!(e.contains("no such user"), "{e}");
        assert_eq!(lookup_user("root").unwrap().1, 0);
    }

    #[test]
    fn refuses_to_drop_with_other_threads_alive() {
        // The test harness runs tests on threads, so this process has more
        // than one: the drop must refuse rather than leave them privileged.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || rx.recv());
        let e = drop_after_attach(None).unwrap_err();
        assert!(e.contains("threads exist"), "{e}");
        drop(tx);
        let _ = t.join();
    }

    #[test]
    fn status_fields_are_found_exactly() {
        let s = "CapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\nNoNewPrivs:\t1\n";
        assert_eq!(status_field(s, "CapEff"), Some("000001ffffffffff"));
        assert_eq!(status_field(s, "CapBnd"), None);
        assert_eq!(status_field(s, "NoNewPrivs"), Some("1"));
    }
}
