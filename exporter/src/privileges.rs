//! Least privilege after start-up.
//!
//! usescope needs privileges only to load and attach its BPF programs (and to
//! bind a port below 1024). Once that is done, every later operation works on
//! descriptors it already holds (BPF maps, program info, the stats fd, kept
//! /proc fds) or on world-readable files. So after attaching, the daemon:
//!
//! 1. empties its capability bounding set (no way back, even through exec);
//! 2. optionally switches to `--runtime.user` (groups, gid, then uid);
//! 3. clears its effective, permitted, inheritable and ambient capabilities;
//! 4. sets `no_new_privs`.
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
        .unwrap_or(40)
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

/// Drops everything; see the module docs. Returns what was done, for the log.
pub fn drop_after_attach(runtime_user: Option<&str>) -> Result<String, String> {
    let target = runtime_user.map(lookup_user).transpose()?;
    // SAFETY: prctl/setgroups/setgid/setuid/syscall are called with valid
    // arguments and have no memory-safety preconditions beyond that.
    unsafe {
        for cap in 0..=last_cap() {
            // EINVAL for caps this kernel does not know; EPERM when we lack
            // CAP_SETPCAP (not root): then the bounding set stays as it was.
            libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0);
        }
        if let Some((name, uid, gid)) = &target {
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
    Ok(match target {
        Some((name, uid, gid)) => {
            format!("running as {name} (uid {uid}, gid {gid}) with no capabilities")
        }
        None => "running with no capabilities".to_string(),
    })
}

/// Resolves a user name (or a numeric uid) to (name, uid, primary gid).
fn lookup_user(user: &str) -> Result<(String, u32, u32), String> {
    let c = CString::new(user).map_err(|_| format!("--runtime.user {user:?}: invalid name"))?;
    // SAFETY: getpwnam/getpwuid return a pointer into static storage or
    // null; we copy the fields out immediately. Start-up is single-threaded
    // with respect to these calls.
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
}
