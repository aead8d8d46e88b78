//! Changing the host for a test, as root: running a command that must
//! succeed, and guards that undo a network interface, a network namespace
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
