//! Which filesystem a path or descriptor is on (statfs's `f_type`).
//!
//! The daemon behaves differently on the live kernel than on a fixture
//! tree: it polls mountinfo and uevent_seqnum only on a real procfs and
//! sysfs, trusts a cgroup directory only on a cgroup mount, and refuses a
//! source file that is not on procfs or sysfs where it must be.

use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub const PROC_SUPER_MAGIC: i64 = 0x9fa0;
pub const SYSFS_MAGIC: i64 = 0x6265_6572;
pub const CGROUP_SUPER_MAGIC: i64 = 0x0027_e0eb;
pub const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// Whether `path` is on a real sysfs mount: the live kernel's files, not
/// a fixture tree.
pub fn is_sysfs(path: &Path) -> bool {
    magic_of_path(path) == Some(SYSFS_MAGIC)
}

/// Whether `path` is on a real procfs mount.
pub fn is_procfs(path: &Path) -> bool {
    magic_of_path(path) == Some(PROC_SUPER_MAGIC)
}

/// Whether a statfs `f_type` is procfs's or sysfs's.
pub fn is_kernel_fs_magic(magic: i64) -> bool {
    magic == PROC_SUPER_MAGIC || magic == SYSFS_MAGIC
}

/// Whether a statfs `f_type` is a cgroup (v1) or cgroup2 mount's.
pub fn is_cgroup_fs_magic(magic: i64) -> bool {
    magic == CGROUP_SUPER_MAGIC || magic == CGROUP2_SUPER_MAGIC
}

/// statfs's `f_type` of the filesystem holding `path`.
pub fn magic_of_path(path: &Path) -> Option<i64> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statfs is plain C data; all-zero is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a struct we own.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    (rc == 0).then_some(st.f_type as i64)
}

/// fstatfs's `f_type` of the filesystem holding an open descriptor.
pub fn magic_of_fd(fd: BorrowedFd<'_>) -> Option<i64> {
    // SAFETY: statfs is plain C data; all-zero is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs writes into the struct we own; the fd is borrowed
    // for the call.
    let rc = unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) };
    (rc == 0).then_some(st.f_type as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn tells_procfs_from_an_ordinary_directory() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!is_procfs(dir.path()));
        assert!(!is_sysfs(dir.path()));
        assert_eq!(magic_of_path(Path::new("/no/such/path")), None);
        let f = std::fs::File::open(dir.path()).unwrap();
        assert_eq!(magic_of_fd(f.as_fd()), magic_of_path(dir.path()));
        if crate::test_skip::unless_met(Path::new("/proc/self").exists(), "procfs at /proc") {
            assert!(is_procfs(Path::new("/proc")));
        }
    }
}
