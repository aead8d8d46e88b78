//! Changing the host for a test, as root: running a command that must
//! succeed, a process's I/O counters, and guards that undo a network interface, a network namespace
//! or a mount when the test ends, pass or fail.

use std::path::PathBuf;
use std::process::Command;

/// Runs `cmd args`, failing the test with its stderr unless it succeeds.
pub fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A counter of `/proc/PID/io` (`syscr`, `rchar`, ...).
pub fn proc_io(pid: u32, field: &str) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(": "))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/io"))
        .parse()
        .unwrap()
}

/// The least a scrape of `d` moves one of its `/proc/PID/io` counters, of
/// five scrapes: activity elsewhere on the host (a notification, a mount)
/// makes a scrape do more, never less, so the least is the quiet cost.
pub fn quietest_scrape(d: &super::Daemon, field: &str) -> u64 {
    let pid = d.child.id();
    (0..5)
        .map(|_| {
            let before = proc_io(pid, field);
            d.scrape();
            proc_io(pid, field) - before
        })
        .min()
        .unwrap()
}

/// Deletes a network interface (and a veth's peer with it).
pub struct DeleteLink(pub String);

impl Drop for DeleteLink {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.0]).output();
    }
}

/// Deletes a named network namespace (`ip netns add`).
pub struct DeleteNetns(pub String);

impl Drop for DeleteNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

/// Unmounts lazily. Declare inner mounts last, so they are dropped, and
/// unmounted, first.
pub struct Unmount(pub PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}
