//! Whether a few ordinary files may have changed since the last look,
//! from inotify watches on their directories.
//!
//! The os collector stat()ed os-release at every scrape to learn that it had
//! not changed: a walk of `/etc/os-release`, its symbolic link and
//! `/usr/lib/os-release`, 11 µs of a cold scrape on the development VM
//! (BENCHMARKS.md). With the directories watched, a scrape asks with one
//! read() that fails with EAGAIN.
//!
//! A directory watch reports what happens to the names in it: a file
//! written in place, replaced by a rename, created, deleted, its
//! attributes changed. It also reports the directory itself going away,
//! and the queue overflowing. Each of those answers "changed"; so does a
//! read that fails. What it cannot see is a mount over a watched directory
//! or a symbolic link higher up the path moving: callers also check the
//! absence epoch, which moves with every mount (absence.rs).

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const MASK: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_MODIFY
    | libc::IN_ATTRIB
    | libc::IN_CLOSE_WRITE
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_ONLYDIR;

/// Events about a watch itself: it no longer sees what it saw.
const LOST: u32 = libc::IN_Q_OVERFLOW
    | libc::IN_IGNORED
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_UNMOUNT;

/// `struct inotify_event` without its name: wd, mask, cookie, len.
const EVENT_HEADER: usize = 16;

pub struct FileWatch {
    fd: OwnedFd,
    names: Vec<OsString>,
    buf: Vec<u8>,
}

impl FileWatch {
    /// Watches the directory of each of `files` for changes to that name.
    /// An error (no inotify, a directory that is not there, the watch
    /// limit reached) means the caller must look at the files itself.
    pub fn new(files: &[&Path]) -> io::Result<FileWatch> {
        // SAFETY: plain inotify_init1; the descriptor is owned below.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut names = Vec::new();
        for file in files {
            let (Some(dir), Some(name)) = (file.parent(), file.file_name()) else {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "no directory"));
            };
            let dir = CString::new(dir.as_os_str().as_bytes())?;
            // SAFETY: a NUL-terminated path; the fd is ours.
            let wd = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), dir.as_ptr(), MASK) };
            if wd < 0 {
                return Err(io::Error::last_os_error());
            }
            names.push(name.to_os_string());
        }
        Ok(FileWatch {
            fd,
            names,
            buf: vec![0; 4096],
        })
    }

    /// Whether any of the files may have changed since the watch was made
    /// or last asked. Reads every queued event.
    pub fn changed(&mut self) -> bool {
        let mut changed = false;
        loop {
            // SAFETY: the buffer is ours, with its length.
            let n = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                )
            };
            if n < 0 {
                match io::Error::last_os_error().raw_os_error() {
                    Some(libc::EAGAIN) => return changed,
                    Some(libc::EINTR) => continue,
                    _ => return true,
                }
            }
            if n == 0 {
                return true;
            }
            changed |= events_touch(&self.buf[..n as usize], &self.names);
        }
    }
}

/// Whether a buffer of inotify events names one of `names` or reports a
/// lost watch. A malformed buffer counts as a change.
pub fn events_touch(mut data: &[u8], names: &[OsString]) -> bool {
    let mut touched = false;
    while !data.is_empty() {
        if data.len() < EVENT_HEADER {
            return true;
        }
        let mask = u32::from_ne_bytes([data[4], data[5], data[6], data[7]]);
        let len = u32::from_ne_bytes([data[12], data[13], data[14], data[15]]) as usize;
        let Some(name) = data.get(EVENT_HEADER..EVENT_HEADER + len) else {
            return true;
        };
        // The name is padded with NULs to the event's length.
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        let name = OsStr::from_bytes(&name[..end]);
        touched |= mask & LOST != 0 || names.iter().any(|n| n == name);
        data = &data[EVENT_HEADER + len..];
    }
    touched
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(mask: u32, name: &str) -> Vec<u8> {
        let len = name.len().div_ceil(16) * 16;
        let mut e = vec![0u8; EVENT_HEADER + len];
        e[4..8].copy_from_slice(&mask.to_ne_bytes());
        e[12..16].copy_from_slice(&(len as u32).to_ne_bytes());
        e[EVENT_HEADER..EVENT_HEADER + name.len()].copy_from_slice(name.as_bytes());
        e
    }

    #[test]
    fn events_on_other_names_are_not_changes() {
        let names = [OsString::from("os-release")];
        let mut d = event(libc::IN_MODIFY, "resolv.conf");
        d.extend(event(libc::IN_CREATE, "os-release.dpkg-new"));
        assert!(!events_touch(&d, &names));
        d.extend(event(libc::IN_MOVED_TO, "os-release"));
        assert!(events_touch(&d, &names));
        assert!(events_touch(&event(libc::IN_Q_OVERFLOW, ""), &names));
        assert!(events_touch(&event(libc::IN_IGNORED, ""), &names));
        assert!(events_touch(&event(libc::IN_MODIFY, "x")[..10], &names));
        let mut cut = event(libc::IN_MODIFY, "x");
        cut[12..16].copy_from_slice(&99u32.to_ne_bytes());
        assert!(events_touch(&cut, &names));
    }

    /// The real kernel: a write in place, a rename over the file, a new
    /// file under another name (no change), the directory removed.
    #[test]
    fn live_inotify() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("os-release");
        std::fs::write(&file, "ID=a\n").unwrap();
        let mut w = FileWatch::new(&[&file]).unwrap();
        assert!(!w.changed());
        std::fs::write(dir.path().join("other"), "x").unwrap();
        assert!(!w.changed(), "another name in the directory");
        std::fs::write(&file, "ID=b\n").unwrap();
        assert!(w.changed());
        assert!(!w.changed(), "asked twice");
        let new = dir.path().join("os-release.new");
        std::fs::write(&new, "ID=c\n").unwrap();
        std::fs::rename(&new, &file).unwrap();
        assert!(w.changed(), "renamed over");
        std::fs::remove_dir_all(dir.path()).unwrap();
        assert!(w.changed(), "directory gone");
        assert!(FileWatch::new(&[&file]).is_err());
    }
}
