//! Which hierarchies are mounted under the cgroup root, and which files
//! each one supplies.
//!
//! - **v2** (unified): the root itself holds `cgroup.controllers`. Every
//!   figure comes from it.
//! - **v1** and **hybrid**: the root is a directory of mounts, one per
//!   hierarchy, named after their controllers as systemd, cgroupfs-mount
//!   and container runtimes name them (`cpu,cpuacct`, `memory`, `blkio`,
//!   `pids`; links such as `cpu` → `cpu,cpuacct` are not followed); a
//!   subdirectory holding `cgroup.controllers` (`unified`) is a v2
//!   hierarchy. Each kind of figure comes from the v1 hierarchy that has
//!   its controller, else from the v2 one; PSI only exists on v2.
//!
//! Each v1 controller is used from the first hierarchy (by name) that has
//! it. At most [`MAX_ROOT_ENTRIES`] entries of the root are looked at.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::walk::{list_dirs, open_dir_at, stat_at, stat_fd};
use crate::kernel::fs_kind::{is_cgroup_fs_magic, magic_of_fd};

/// Most entries of the cgroup root examined: a v1 host has about a dozen.
pub const MAX_ROOT_ENTRIES: usize = 64;

/// Hierarchies used at most: one per kind of figure (CPU usage, CFS,
/// memory, I/O, pids, PSI).
pub const MAX_HIERARCHIES: usize = 6;

/// A file the collector reads in each selected cgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum File {
    CpuacctUsage,
    CpuacctStat,
    CpuStatV1,
    CpuStatV2,
    MemUsage,
    MemLimit,
    MemStatV1,
    MemFailcnt,
    MemOomControl,
    MemCurrent,
    MemMax,
    MemStatV2,
    MemEvents,
    BlkioBytes,
    BlkioIos,
    BlkioBytesRecursive,
    BlkioIosRecursive,
    IoStat,
    PidsCurrent,
    PidsMax,
    CpuPressure,
    MemoryPressure,
    IoPressure,
}

impl File {
    pub fn name(self) -> &'static str {
        match self {
            File::CpuacctUsage => "cpuacct.usage",
            File::CpuacctStat => "cpuacct.stat",
            File::CpuStatV1 | File::CpuStatV2 => "cpu.stat",
            File::MemUsage => "memory.usage_in_bytes",
            File::MemLimit => "memory.limit_in_bytes",
            File::MemStatV1 | File::MemStatV2 => "memory.stat",
            File::MemFailcnt => "memory.failcnt",
            File::MemOomControl => "memory.oom_control",
            File::MemCurrent => "memory.current",
            File::MemMax => "memory.max",
            File::MemEvents => "memory.events",
            File::BlkioBytes => "blkio.throttle.io_service_bytes",
            File::BlkioIos => "blkio.throttle.io_serviced",
            File::BlkioBytesRecursive => "blkio.throttle.io_service_bytes_recursive",
            File::BlkioIosRecursive => "blkio.throttle.io_serviced_recursive",
            File::IoStat => "io.stat",
            File::PidsCurrent => "pids.current",
            File::PidsMax => "pids.max",
            File::CpuPressure => "cpu.pressure",
            File::MemoryPressure => "memory.pressure",
            File::IoPressure => "io.pressure",
        }
    }
}

/// One mounted hierarchy the collector reads.
#[derive(Debug)]
pub struct Hierarchy {
    /// Its directory's name under the root (`memory`, `cpu,cpuacct`,
    /// `unified`); empty for a v2 root.
    pub name: String,
    pub dir: PathBuf,
    pub fd: OwnedFd,
    /// Its root directory's inode: a remount is another hierarchy.
    pub ino: u64,
    /// A real cgroup filesystem (statfs), not a tree of ordinary files.
    pub kernel: bool,
    pub files: Vec<File>,
    /// v2 `cpu.stat` supplies CPU usage (no v1 cpuacct) and CFS figures
    /// (no v1 cpu).
    pub v2_cpu_usage: bool,
    pub v2_cfs: bool,
}

impl Hierarchy {
    /// The same mount as `other` (then its kept state stays valid).
    pub fn same_as(&self, other: &Hierarchy) -> bool {
        self.name == other.name && self.ino == other.ino && self.files == other.files
    }
}

struct Candidate {
    name: String,
    fd: OwnedFd,
    v2: bool,
}

fn c<'a>(name: &[u8], buf: &'a mut Vec<u8>) -> Option<&'a CStr> {
    buf.clear();
    buf.extend_from_slice(name);
    buf.push(0);
    CStr::from_bytes_with_nul(buf).ok()
}

fn is_file(dir: BorrowedFd<'_>, name: &CStr) -> bool {
    stat_at(dir, name).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG)
}

/// The hierarchies under `root`, in name order; none if `root` does not
/// exist (no cgroup filesystem: the collector then writes nothing).
pub fn discover(root: &Path) -> io::Result<Vec<Hierarchy>> {
    // O_DIRECTORY and O_NONBLOCK: a FIFO put in its place fails at once
    // (ENOTDIR) instead of blocking the scrape.
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(root);
    let root_fd = match opened {
        Ok(f) => OwnedFd::from(f),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
            return Ok(Vec::new());
        }
        Err(e) => return Err(e),
    };
    let mut buf = Vec::new();
    let mut candidates = Vec::new();
    if is_file(root_fd.as_fd(), c"cgroup.controllers") {
        candidates.push(Candidate {
            name: String::new(),
            fd: root_fd,
            v2: true,
        });
    } else {
        let mut names = Vec::new();
        list_dirs(root_fd.as_fd(), &mut buf, |name, _| {
            if let Ok(n) = std::str::from_utf8(name) {
                names.push(n.to_string());
            }
            names.len() < MAX_ROOT_ENTRIES
        })?;
        names.sort();
        for name in names {
            let Some(cname) = c(name.as_bytes(), &mut buf) else {
                continue;
            };
            let fd = match open_dir_at(root_fd.as_fd(), cname) {
                Ok(fd) => fd,
                // Gone, or a link swapped in: not a hierarchy.
                Err(_) => continue,
            };
            let v2 = is_file(fd.as_fd(), c"cgroup.controllers");
            candidates.push(Candidate { name, fd, v2 });
        }
    }
    let v1_with = |controller: &str| {
        candidates
            .iter()
            .position(|c| !c.v2 && c.name.split(',').any(|n| n == controller))
    };
    let cpuacct = v1_with("cpuacct");
    let cpu = v1_with("cpu");
    let memory = v1_with("memory");
    let blkio = v1_with("blkio");
    let pids = v1_with("pids");
    let v2 = candidates.iter().position(|c| c.v2);
    let mut out = Vec::new();
    for (i, cand) in candidates.into_iter().enumerate() {
        let mut files = Vec::new();
        let (mut v2_cpu_usage, mut v2_cfs) = (false, false);
        if Some(i) == cpuacct {
            files.extend([File::CpuacctUsage, File::CpuacctStat]);
        }
        if Some(i) == cpu {
            files.push(File::CpuStatV1);
        }
        if Some(i) == memory {
            files.extend([
                File::MemUsage,
                File::MemLimit,
                File::MemStatV1,
                File::MemFailcnt,
                File::MemOomControl,
            ]);
        }
        if Some(i) == blkio {
            // The recursive files (Linux 4.17+, like every other figure
            // here) count the cgroup's descendants too.
            if is_file(
                cand.fd.as_fd(),
                c"blkio.throttle.io_service_bytes_recursive",
            ) {
                files.extend([File::BlkioBytesRecursive, File::BlkioIosRecursive]);
            } else {
                files.extend([File::BlkioBytes, File::BlkioIos]);
            }
        }
        if Some(i) == pids {
            files.extend([File::PidsCurrent, File::PidsMax]);
        }
        if Some(i) == v2 {
            v2_cpu_usage = cpuacct.is_none();
            v2_cfs = cpu.is_none();
            if v2_cpu_usage || v2_cfs {
                files.push(File::CpuStatV2);
            }
            if memory.is_none() {
                files.extend([
                    File::MemCurrent,
                    File::MemMax,
                    File::MemStatV2,
                    File::MemEvents,
                ]);
            }
            if blkio.is_none() {
                files.push(File::IoStat);
            }
            if pids.is_none() {
                files.extend([File::PidsCurrent, File::PidsMax]);
            }
            files.extend([File::CpuPressure, File::MemoryPressure, File::IoPressure]);
        }
        if files.is_empty() {
            continue;
        }
        let st = stat_fd(cand.fd.as_fd())?;
        out.push(Hierarchy {
            dir: if cand.name.is_empty() {
                root.to_path_buf()
            } else {
                root.join(&cand.name)
            },
            name: cand.name,
            ino: st.st_ino,
            kernel: magic_of_fd(cand.fd.as_fd()).is_some_and(is_cgroup_fs_magic),
            fd: cand.fd,
            files,
            v2_cpu_usage,
            v2_cfs,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(dirs: &[&str], files: &[&str]) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        for d in dirs {
            std::fs::create_dir_all(t.path().join(d)).unwrap();
        }
        for f in files {
            std::fs::write(t.path().join(f), "").unwrap();
        }
        t
    }

    /// Name, whether v2 (only v2 has PSI), files.
    fn summary(hs: &[Hierarchy]) -> Vec<(String, bool, Vec<&'static str>)> {
        hs.iter()
            .map(|h| {
                let v2 = h.files.contains(&File::CpuPressure);
                (
                    h.name.clone(),
                    v2,
                    h.files.iter().map(|f| f.name()).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn hybrid_v1_with_unified() {
        let t = tree(
            &[
                "cpu,cpuacct",
                "memory",
                "blkio",
                "pids",
                "systemd",
                "unified",
                "devices",
            ],
            &[
                "unified/cgroup.controllers",
                "blkio/blkio.throttle.io_service_bytes_recursive",
            ],
        );
        std::os::unix::fs::symlink("cpu,cpuacct", t.path().join("cpu")).unwrap();
        let hs = discover(t.path()).unwrap();
        assert_eq!(
            summary(&hs),
            [
                (
                    "blkio".to_string(),
                    false,
                    vec![
                        "blkio.throttle.io_service_bytes_recursive",
                        "blkio.throttle.io_serviced_recursive"
                    ]
                ),
                (
                    "cpu,cpuacct".to_string(),
                    false,
                    vec!["cpuacct.usage", "cpuacct.stat", "cpu.stat"]
                ),
                (
                    "memory".to_string(),
                    false,
                    vec![
                        "memory.usage_in_bytes",
                        "memory.limit_in_bytes",
                        "memory.stat",
                        "memory.failcnt",
                        "memory.oom_control"
                    ]
                ),
                ("pids".to_string(), false, vec!["pids.current", "pids.max"]),
                (
                    "unified".to_string(),
                    true,
                    vec!["cpu.pressure", "memory.pressure", "io.pressure"]
                ),
            ]
        );
        assert!(hs.iter().all(|h| !h.kernel));
    }

    #[test]
    fn pure_v2_and_v1_without_some_controllers() {
        let t = tree(&["system.slice"], &["cgroup.controllers"]);
        let hs = discover(t.path()).unwrap();
        assert_eq!(hs.len(), 1);
        assert_eq!(hs[0].dir, t.path());
        assert!(hs[0].v2_cpu_usage && hs[0].v2_cfs);
        assert_eq!(
            hs[0].files.iter().map(|f| f.name()).collect::<Vec<_>>(),
            [
                "cpu.stat",
                "memory.current",
                "memory.max",
                "memory.stat",
                "memory.events",
                "io.stat",
                "pids.current",
                "pids.max",
                "cpu.pressure",
                "memory.pressure",
                "io.pressure"
            ]
        );
        // Hybrid with cpu and cpuacct apart, pids on v2, no recursive blkio.
        let t = tree(
            &["cpu", "cpuacct", "memory", "blkio", "unified"],
            &["unified/cgroup.controllers"],
        );
        let hs = discover(t.path()).unwrap();
        let unified = hs.iter().find(|h| h.name == "unified").unwrap();
        assert!(!unified.v2_cpu_usage && !unified.v2_cfs);
        assert_eq!(
            unified.files.iter().map(|f| f.name()).collect::<Vec<_>>(),
            [
                "pids.current",
                "pids.max",
                "cpu.pressure",
                "memory.pressure",
                "io.pressure"
            ]
        );
        let blkio = hs.iter().find(|h| h.name == "blkio").unwrap();
        assert_eq!(blkio.files, [File::BlkioBytes, File::BlkioIos]);
        // No cgroup filesystem at all, or a FIFO in its place (at once).
        assert!(discover(&t.path().join("none")).unwrap().is_empty());
        let fifo = t.path().join("fifo");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        assert!(discover(&fifo).unwrap().is_empty());
    }
}
