//! Cgroup ids as the probes' kernel sides read them, and the labels the
//! per-cgroup probe views write for them (runqlat's per-cgroup histograms,
//! oomkill's kills per cgroup).
//!
//! A probe reads a task's cgroup in one hierarchy: a v1 controller's where
//! it is mounted, else the v2 (unified) one, chosen at load time
//! ([`Hierarchy::find`]) and told to the kernel side in its `cgroup_by`
//! global (ebpf-probes/cgroup_id.h). A cgroup's kernfs id is its
//! directory's inode number, so user space resolves ids by walking that
//! hierarchy ([`Resolver`]), bounded by [`MAX_WALK`] directories and
//! [`MAX_DEPTH`] levels.
//!
//! Labels ([`label_of`]): an id's series is its topmost ancestor-or-self
//! that the cgroup collector's selection (`--collector.cgroup.select`)
//! matches, so a probe's series has the `cgroup` label of the cgroup
//! collector's series for the same cgroup; None means `cgroup="other"`.

use std::collections::HashMap;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};

use regex::Regex;

use crate::kernel::cgroup_path::{MAX_LABEL_BYTES, escape_into};
use crate::kernel::mountinfo;

/// Most directories one walk of the hierarchy examines.
pub const MAX_WALK: usize = 10_000;
/// Deepest level below the hierarchy's root a walk examines.
pub const MAX_DEPTH: usize = 32;

/// `cgroup_by` values (ebpf-probes/cgroup_id.h): the v1 hierarchy of the
/// probe's controller, or the v2 one.
pub const BY_V1: u32 = 1;
pub const BY_V2: u32 = 2;

/// The hierarchy whose cgroup ids the kernel side reads, and the value of
/// its `cgroup_by` global.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    pub by: u32,
    pub root: PathBuf,
}

impl Hierarchy {
    /// From /proc/self/mountinfo: the v1 hierarchy with `controller`
    /// (`cpu`, `memory`) if one is mounted (v1 and hybrid hosts), else a
    /// cgroup2 mount.
    pub fn find(controller: &str) -> Result<Hierarchy, String> {
        let text = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
        Self::from_mountinfo(&text, controller).ok_or_else(|| {
            format!("no cgroup hierarchy with the {controller} controller and no cgroup2 mount in /proc/self/mountinfo")
        })
    }

    /// The cgroup2 (default) hierarchy, also on hybrid hosts: where a
    /// socket's cgroup lives (drops with `--probe.drops.per-cgroup`).
    pub fn find_v2() -> Result<Hierarchy, String> {
        let text = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
        let mut mounts = Vec::new();
        mountinfo::parse_into(&text, &mut mounts)
            .map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
        mounts
            .iter()
            .find(|m| m.fs_type == "cgroup2")
            .map(|m| Hierarchy {
                by: BY_V2,
                root: PathBuf::from(
                    String::from_utf8_lossy(&mountinfo::unescape(m.mount_point)).into_owned(),
                ),
            })
            .ok_or_else(|| "no cgroup2 mount in /proc/self/mountinfo".to_string())
    }

    pub fn from_mountinfo(text: &str, controller: &str) -> Option<Hierarchy> {
        let mut mounts = Vec::new();
        mountinfo::parse_into(text, &mut mounts).ok()?;
        let root = |m: &mountinfo::Mount| {
            PathBuf::from(String::from_utf8_lossy(&mountinfo::unescape(m.mount_point)).into_owned())
        };
        let v1 = mounts
            .iter()
            .find(|m| m.fs_type == "cgroup" && m.super_options.split(',').any(|o| o == controller));
        if let Some(m) = v1 {
            return Some(Hierarchy {
                by: BY_V1,
                root: root(m),
            });
        }
        mounts
            .iter()
            .find(|m| m.fs_type == "cgroup2")
            .map(|m| Hierarchy {
                by: BY_V2,
                root: root(m),
            })
    }

    /// What travels to the daemon in `Loaded::names` (after the map ids).
    pub fn to_names(&self) -> [String; 2] {
        [self.by.to_string(), self.root.display().to_string()]
    }

    pub fn from_names(by: &str, root: &str) -> Result<Hierarchy, String> {
        match by.parse() {
            Ok(by @ (BY_V1 | BY_V2)) => Ok(Hierarchy {
                by,
                root: PathBuf::from(root),
            }),
            _ => Err(format!(
                "the probe loader sent an unknown cgroup hierarchy kind {by:?}"
            )),
        }
    }
}

/// Cgroup id (directory inode) → path below the root, from bounded walks.
pub struct Resolver {
    root: PathBuf,
    paths: HashMap<u64, Vec<u8>>,
    /// Whether the last walk stopped at a bound (then an unknown id may be
    /// a live cgroup it did not reach).
    limited: bool,
}

impl Resolver {
    pub fn new(root: PathBuf) -> Resolver {
        Resolver {
            root,
            paths: HashMap::new(),
            limited: false,
        }
    }

    /// Walks the hierarchy again, depth first, links not followed.
    pub fn refresh(&mut self) {
        use std::os::unix::ffi::OsStrExt;
        self.paths.clear();
        self.limited = false;
        let Ok(meta) = std::fs::metadata(&self.root) else {
            return;
        };
        self.paths.insert(meta.ino(), b"/".to_vec());
        let mut stack: Vec<(PathBuf, Vec<u8>, usize)> = vec![(self.root.clone(), Vec::new(), 0)];
        let mut walked = 1;
        while let Some((dir, rel, depth)) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue; // gone mid-walk
            };
            for e in entries.flatten() {
                if !e.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                if walked >= MAX_WALK || depth + 1 > MAX_DEPTH {
                    self.limited = true;
                    continue;
                }
                walked += 1;
                let mut path = rel.clone();
                path.push(b'/');
                path.extend_from_slice(e.file_name().as_bytes());
                self.paths.insert(e.ino(), path.clone());
                stack.push((e.path(), path, depth + 1));
            }
        }
    }

    pub fn get(&self, id: u64) -> Option<&[u8]> {
        self.paths.get(&id).map(Vec::as_slice)
    }

    /// Whether the last walk stopped at a bound.
    pub fn limited(&self) -> bool {
        self.limited
    }

    /// Whether the cgroup `id` resolved to `path` still exists.
    pub fn alive(&self, id: u64, path: &[u8]) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let rel = Path::new(std::ffi::OsStr::from_bytes(
            path.strip_prefix(b"/").unwrap_or(path),
        ));
        std::fs::symlink_metadata(self.root.join(rel)).is_ok_and(|m| m.ino() == id)
    }
}

/// The label an id's events are summed under: the topmost selected
/// ancestor-or-self of its path, or None for `other`.
pub fn label_of(path: &[u8], select: &Regex) -> Option<String> {
    let mut label = String::new();
    let mut end = 0;
    while end < path.len() {
        end = path[end + 1..]
            .iter()
            .position(|&c| c == b'/')
            .map_or(path.len(), |i| end + 1 + i);
        escape_into(&path[..end], &mut label);
        if select.is_match(&label) {
            return (label.len() <= MAX_LABEL_BYTES).then_some(label);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::cgroup_path::DEFAULT_SELECT;

    #[test]
    fn v1_controller_hierarchy_is_preferred_to_cgroup2() {
        let text = "\
30 25 0:26 / /sys/fs/cgroup/unified rw,relatime shared:4 - cgroup2 cgroup2 rw
31 25 0:27 / /sys/fs/cgroup/cpu rw,relatime shared:5 - cgroup cgroup rw,cpu
32 25 0:28 / /sys/fs/cgroup/cpuacct rw,relatime shared:6 - cgroup cgroup rw,cpuacct
33 25 0:29 / /sys/fs/cgroup/memory rw,relatime shared:7 - cgroup cgroup rw,memory
";
        let h = Hierarchy::from_mountinfo(text, "cpu").unwrap();
        assert_eq!((h.by, h.root), (BY_V1, PathBuf::from("/sys/fs/cgroup/cpu")));
        let h = Hierarchy::from_mountinfo(text, "memory").unwrap();
        assert_eq!(
            (h.by, h.root),
            (BY_V1, PathBuf::from("/sys/fs/cgroup/memory"))
        );
        let joint = "31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n";
        let h = Hierarchy::from_mountinfo(joint, "cpu").unwrap();
        assert_eq!(h.root, PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"));
        // cpuacct alone or cpuset is not `cpu`; no memory v1: cgroup2.
        let v2 = "\
32 25 0:28 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct
33 25 0:29 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset
24 1 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate
";
        for controller in ["cpu", "memory"] {
            let h = Hierarchy::from_mountinfo(v2, controller).unwrap();
            assert_eq!((h.by, h.root), (BY_V2, PathBuf::from("/sys/fs/cgroup")));
        }
        assert_eq!(
            Hierarchy::from_mountinfo("24 1 0:22 / / rw - ext4 /dev/sda rw\n", "cpu"),
            None
        );
        let escaped =
            Hierarchy::from_mountinfo("30 25 0:26 / /a\\040b rw - cgroup cgroup rw,cpu\n", "cpu");
        assert_eq!(escaped.unwrap().root, PathBuf::from("/a b"));
        assert!(Hierarchy::from_names("3", "/x").is_err());
        let h = Hierarchy::from_names("2", "/sys/fs/cgroup").unwrap();
        assert_eq!(h.to_names(), ["2".to_string(), "/sys/fs/cgroup".into()]);
    }

    #[test]
    fn label_is_the_topmost_selected_ancestor() {
        let re = Regex::new(DEFAULT_SELECT).unwrap();
        assert_eq!(label_of(b"/", &re), None);
        assert_eq!(label_of(b"/user.slice", &re), None);
        assert_eq!(
            label_of(b"/system.slice/ssh.service", &re).as_deref(),
            Some("/system.slice/ssh.service")
        );
        assert_eq!(
            label_of(b"/system.slice/a.service/child/x.scope", &re).as_deref(),
            Some("/system.slice/a.service")
        );
        let long = format!("/{}.scope", "a".repeat(MAX_LABEL_BYTES));
        assert_eq!(label_of(long.as_bytes(), &re), None);
    }
}
