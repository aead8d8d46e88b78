//! A memory cgroup made by a test, with a limit, on whichever hierarchy the
//! host mounts the memory controller on: cgroup v1 (`memory.limit_in_bytes`,
//! `memory.failcnt`) or v2 (`memory.max`, the `max` line of
//! `memory.events`). Removed when dropped, also when the test panics.
//!
//! Its oracle, [`MemCgroup::limit_hits`], is the kernel's own count of
//! charges that hit the limit: v2 raises the `max` event once per reclaim
//! the limit causes; v1's failcnt counts failed charges (measured equal to
//! the reclaims under a page-cache workload; docs/probes.md, "reclaim").

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

pub struct MemCgroup {
    dir: PathBuf,
    v1: bool,
}

/// Where the memory controller is mounted and whether it is cgroup v1.
fn memory_hierarchy() -> Option<(PathBuf, bool)> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    for line in mounts.lines() {
        let (left, right) = line.split_once(" - ")?;
        let mount_point = left.split(' ').nth(4)?;
        let mut fields = right.split(' ');
        let fstype = fields.next()?;
        let options = fields.nth(1).unwrap_or("");
        if fstype == "cgroup" && options.split(',').any(|o| o == "memory") {
            return Some((PathBuf::from(mount_point), true));
        }
        if fstype == "cgroup2" {
            let controllers =
                std::fs::read_to_string(Path::new(mount_point).join("cgroup.controllers"))
                    .unwrap_or_default();
            if controllers.split_whitespace().any(|c| c == "memory") {
                return Some((PathBuf::from(mount_point), false));
            }
        }
    }
    None
}

impl MemCgroup {
    /// A new cgroup named `name` directly under the memory hierarchy's
    /// root, limited to `limit` bytes; Err says why not.
    pub fn create(name: &str, limit: u64) -> Result<MemCgroup, String> {
        let (root, v1) =
            memory_hierarchy().ok_or("no memory cgroup controller mounted (v1 or v2)")?;
        if !v1 {
            // Children get the memory controller only if the root passes
            // it down (systemd hosts do already).
            let subtree = root.join("cgroup.subtree_control");
            let on = std::fs::read_to_string(&subtree).unwrap_or_default();
            if !on.split_whitespace().any(|c| c == "memory") {
                std::fs::write(&subtree, "+memory")
                    .map_err(|e| format!("enabling memory in {}: {e}", subtree.display()))?;
            }
        }
        let dir = root.join(name);
        std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        let cg = MemCgroup { dir, v1 };
        let limit_file = if v1 {
            "memory.limit_in_bytes"
        } else {
            "memory.max"
        };
        std::fs::write(cg.dir.join(limit_file), limit.to_string())
            .map_err(|e| format!("writing {limit_file}: {e}"))?;
        Ok(cg)
    }

    pub fn is_v1(&self) -> bool {
        self.v1
    }

    /// Runs `cmd` (a shell command line) inside the cgroup and waits.
    pub fn run(&self, cmd: &str) -> ExitStatus {
        let procs = self.dir.join("cgroup.procs");
        Command::new("sh")
            .arg("-c")
            .arg(format!("echo $$ > '{}' && exec {cmd}", procs.display()))
            .stdin(Stdio::null())
            .status()
            .unwrap()
    }

    /// The kernel's count of limit hits in this cgroup (see the module doc).
    pub fn limit_hits(&self) -> u64 {
        if self.v1 {
            read_number(&self.dir.join("memory.failcnt"))
        } else {
            events_max(&self.dir.join("memory.events"))
        }
    }

    /// The kernel's count of OOM kills in this cgroup: v1's `oom_kill` line
    /// of memory.oom_control, v2's of memory.events.
    pub fn oom_kills(&self) -> u64 {
        let file = if self.v1 {
            "memory.oom_control"
        } else {
            "memory.events"
        };
        std::fs::read_to_string(self.dir.join(file))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The same count summed over every memory cgroup on the host: the
    /// oracle for a host-wide probe, since other cgroups (containers, other
    /// tests) may hit their limits at the same time.
    pub fn limit_hits_host_wide(&self) -> u64 {
        let root = self.dir.parent().unwrap();
        if self.v1 {
            // failcnt is counted where the limit was hit, once per hit.
            let mut total = 0;
            let mut stack = vec![root.to_path_buf()];
            while let Some(dir) = stack.pop() {
                total += read_number(&dir.join("memory.failcnt"));
                for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        stack.push(e.path());
                    }
                }
            }
            total
        } else {
            // A top-level cgroup's events include its whole subtree's.
            std::fs::read_dir(root)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| events_max(&e.path().join("memory.events")))
                .sum()
        }
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        // Every process run() started has been waited for, so the cgroup
        // is empty; a kernel that still counts a dying task gets a moment.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        eprintln!("could not remove the test cgroup {}", self.dir.display());
    }
}

fn read_number(path: &Path) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// The `max N` line of a v2 `memory.events` file.
fn events_max(path: &Path) -> u64 {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("max ")?.trim().parse().ok())
        .unwrap_or(0)
}
