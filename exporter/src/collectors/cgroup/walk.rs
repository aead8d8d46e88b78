//! The bounded walk of one hierarchy: which cgroups are selected.
//!
//! Depth first from the hierarchy's root, every directory opened relative
//! to its parent's descriptor (so depth and name length never make a path
//! too long to open), links never followed. A directory the callback
//! selects is not descended into: a selection is the topmost cgroups that
//! match, so no selected cgroup contains another and sums over them count
//! nothing twice (cgroup counters include their descendants). A directory
//! that is not selected is descended into only if it has subdirectories:
//! a directory's link count is two plus its subdirectories on kernfs (and
//! tmpfs, ext4), so one fstatat spares opening and listing a leaf (3-4 µs
//! against 15-30 µs on the development VM).
//!
//! Bounds, shared by the walks of one scrape ([`Limits`]): at most
//! `max_walk` directories examined (each costs a stat, an open or the
//! reads of a selected cgroup), none deeper than `max_depth` below the
//! root, and never more names held than could still be examined.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::kernel::dirents;

/// What bounds the walks of one scrape, and what they ran into.
#[derive(Debug, Default, Clone)]
pub struct Limits {
    pub max_walk: usize,
    pub max_depth: usize,
    /// Directories examined so far in this scrape.
    pub walked: usize,
    /// A walk stopped at `max_walk`.
    pub walk_limited: bool,
    /// A directory had subdirectories deeper than `max_depth`.
    pub depth_limited: bool,
}

impl Limits {
    fn remaining(&self) -> usize {
        self.max_walk.saturating_sub(self.walked)
    }
}

/// A directory the walk found, handed to the callback.
pub struct Found<'a> {
    /// Its path below the hierarchy's root (`/` for the root itself),
    /// raw bytes.
    pub path: &'a [u8],
    /// Its parent's descriptor, and its name there (`.` for the root).
    pub parent: BorrowedFd<'a>,
    pub name: &'a [u8],
    pub ino: u64,
}

/// One directory being walked: its descriptor and its subdirectories.
#[derive(Default)]
struct Level {
    fd: Option<OwnedFd>,
    /// The subdirectories' names, back to back, each ending at `ends[i].0`,
    /// with their inode numbers.
    names: Vec<u8>,
    ends: Vec<(usize, u64)>,
    next: usize,
    /// The length of the walker's path for this directory.
    path_len: usize,
}

impl Level {
    fn entry(&self, i: usize) -> (&[u8], u64) {
        let start = if i == 0 { 0 } else { self.ends[i - 1].0 };
        let (end, ino) = self.ends[i];
        (&self.names[start..end], ino)
    }
}

/// Reused across scrapes: one [`Level`] per depth, the getdents buffer
/// and the path.
#[derive(Default)]
pub struct Walker {
    levels: Vec<Level>,
    dents: Vec<u8>,
    path: Vec<u8>,
    name: Vec<u8>,
    /// The examined name with a NUL, for the calls that take one.
    cname: Vec<u8>,
}

/// Whether a walk error means the directory went away under us.
fn vanished(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT | libc::ENOTDIR | libc::ENODEV | libc::ELOOP)
    )
}

impl Walker {
    /// Walks the hierarchy whose root is open at `root`. `found` is called
    /// for every directory examined and returns whether it is selected
    /// (then it is not descended into). Errors: the directory that could
    /// not be listed (relative path) and why; a directory that vanished
    /// mid-walk is skipped.
    pub fn walk<E>(
        &mut self,
        root: BorrowedFd<'_>,
        limits: &mut Limits,
        mut found: impl FnMut(&Found<'_>) -> Result<bool, E>,
        mut failed: impl FnMut(&[u8], io::Error) -> E,
    ) -> Result<(), E> {
        self.path.clear();
        self.path.push(b'/');
        if limits.remaining() == 0 {
            limits.walk_limited = true;
            return Ok(());
        }
        limits.walked += 1;
        let root_ino = stat_fd(root).map(|s| s.st_ino).unwrap_or(0);
        let selected = found(&Found {
            path: &self.path,
            parent: root,
            name: b".",
            ino: root_ino,
        })?;
        if selected {
            return Ok(());
        }
        let dup = dup_fd(root).map_err(|e| failed(b"/", e))?;
        if self.levels.is_empty() {
            self.levels.push(Level::default());
        }
        let mut pending = 0;
        match self.list(0, dup, limits, pending) {
            Ok(n) => pending += n,
            Err(e) => return Err(failed(b"/", e)),
        }
        let mut depth = 0;
        loop {
            let level = &mut self.levels[depth];
            if level.next == level.ends.len() {
                level.fd = None;
                if depth == 0 {
                    return Ok(());
                }
                depth -= 1;
                let len = self.levels[depth].path_len;
                self.path.truncate(len);
                continue;
            }
            if limits.remaining() == 0 {
                limits.walk_limited = true;
                for l in &mut self.levels[..=depth] {
                    l.fd = None;
                }
                return Ok(());
            }
            let i = level.next;
            level.next += 1;
            pending -= 1;
            limits.walked += 1;
            let (name, ino) = level.entry(i);
            self.name.clear();
            self.name.extend_from_slice(name);
            let base = level.path_len;
            self.path.truncate(base);
            if base > 1 {
                self.path.push(b'/');
            }
            self.path.extend_from_slice(&self.name);
            let parent = level.fd.as_ref().expect("a level being walked is open");
            let selected = found(&Found {
                path: &self.path,
                parent: parent.as_fd(),
                name: &self.name,
                ino,
            })?;
            if selected {
                continue;
            }
            let child_depth = depth + 1;
            let cname = c_name(&mut self.cname, &self.name);
            // A leaf (link count 2) has nothing to walk.
            let st = match stat_at(parent.as_fd(), cname) {
                Ok(st) => st,
                Err(e) if vanished(&e) => continue,
                Err(e) => {
                    let path = self.path.clone();
                    return Err(failed(&path, e));
                }
            };
            if st.st_mode & libc::S_IFMT != libc::S_IFDIR || st.st_nlink == 2 {
                continue;
            }
            if child_depth >= limits.max_depth {
                limits.depth_limited = true;
                continue;
            }
            let fd = match open_dir_at(parent.as_fd(), cname) {
                Ok(fd) => fd,
                Err(e) if vanished(&e) => continue,
                Err(e) => {
                    let path = self.path.clone();
                    return Err(failed(&path, e));
                }
            };
            if self.levels.len() == child_depth {
                self.levels.push(Level::default());
            }
            self.levels[child_depth].path_len = self.path.len();
            match self.list(child_depth, fd, limits, pending) {
                Ok(n) => pending += n,
                Err(e) if vanished(&e) => continue,
                Err(e) => {
                    let path = self.path.clone();
                    return Err(failed(&path, e));
                }
            }
            depth = child_depth;
        }
    }

    /// Lists the subdirectories of `fd` into `levels[depth]`, keeping at
    /// most as many as the walk may still examine beyond the `pending`
    /// names other levels hold. Returns how many it kept.
    fn list(
        &mut self,
        depth: usize,
        fd: OwnedFd,
        limits: &mut Limits,
        pending: usize,
    ) -> io::Result<usize> {
        let room = limits.remaining().saturating_sub(pending);
        let level = &mut self.levels[depth];
        level.names.clear();
        level.ends.clear();
        level.next = 0;
        if depth == 0 {
            level.path_len = 1;
        }
        let mut more = false;
        list_dirs(fd.as_fd(), &mut self.dents, |name, ino| {
            if level.ends.len() == room {
                more = true;
                return false;
            }
            level.names.extend_from_slice(name);
            level.ends.push((level.names.len(), ino));
            true
        })?;
        if more {
            limits.walk_limited = true;
        }
        level.fd = Some(fd);
        Ok(level.ends.len())
    }
}

/// `name` with a NUL, in `buf`.
fn c_name<'a>(buf: &'a mut Vec<u8>, name: &[u8]) -> &'a CStr {
    buf.clear();
    buf.extend_from_slice(name);
    buf.push(0);
    // A name from getdents has no NUL inside.
    CStr::from_bytes_with_nul(buf).unwrap_or(c".")
}

/// Lists the directory open at `fd` from its start, calling `each` with
/// the raw name and inode of every subdirectory (not `.`, `..`, files or
/// links) until it returns false. Names are bytes: a cgroup's name need
/// not be UTF-8.
pub fn list_dirs(
    fd: BorrowedFd<'_>,
    buf: &mut Vec<u8>,
    mut each: impl FnMut(&[u8], u64) -> bool,
) -> io::Result<()> {
    dirents::for_each(fd.as_raw_fd(), buf, 32 << 10, |e| {
        let is_dir = match e.d_type {
            libc::DT_DIR => true,
            libc::DT_UNKNOWN => {
                let mut c = e.name.to_vec();
                c.push(0);
                CStr::from_bytes_with_nul(&c)
                    .ok()
                    .and_then(|c| stat_at(fd, c).ok())
                    .is_some_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
            }
            _ => false,
        };
        !is_dir || e.is_dot() || each(e.name, e.ino)
    })
}

/// fstatat without following a last-component link.
pub fn stat_at(parent: BorrowedFd<'_>, name: &CStr) -> io::Result<libc::stat> {
    // SAFETY: stat is plain C data; all-zero is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated name relative to a directory fd we borrow.
    let rc = unsafe {
        libc::fstatat(
            parent.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

pub fn stat_fd(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    // SAFETY: as in stat_at.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into the struct we own.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// Opens the directory `name` in `parent`, not following a link.
pub fn open_dir_at(parent: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated name relative to a directory fd we borrow.
    let fd = unsafe {
        libc::openat(
            parent.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY
                | libc::O_DIRECTORY
                | libc::O_NOFOLLOW
                | libc::O_CLOEXEC
                | libc::O_NONBLOCK,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn dup_fd(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    fd.try_clone_to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn root(p: &Path) -> OwnedFd {
        OwnedFd::from(std::fs::File::open(p).unwrap())
    }

    /// The paths selected by `select`, in walk order, and the limits.
    fn walk(p: &Path, select: &str, max_walk: usize, max_depth: usize) -> (Vec<String>, Limits) {
        let re = regex::Regex::new(select).unwrap();
        let fd = root(p);
        let mut limits = Limits {
            max_walk,
            max_depth,
            ..Limits::default()
        };
        let mut out = Vec::new();
        Walker::default()
            .walk(
                fd.as_fd(),
                &mut limits,
                |f| {
                    let s = String::from_utf8_lossy(f.path).into_owned();
                    let hit = re.is_match(&s);
                    if hit {
                        out.push(s);
                    }
                    Ok::<bool, String>(hit)
                },
                |p, e| format!("{}: {e}", String::from_utf8_lossy(p)),
            )
            .unwrap();
        out.sort();
        (out, limits)
    }

    fn mkdirs(base: &Path, paths: &[&str]) {
        for p in paths {
            std::fs::create_dir_all(base.join(p)).unwrap();
        }
    }

    #[test]
    fn topmost_matches_only_and_links_not_followed() {
        let t = tempfile::tempdir().unwrap();
        mkdirs(
            t.path(),
            &[
                "system.slice/a.service/inner.service",
                "system.slice/b.service",
                "user.slice/user-1000.slice/user@1000.service/app.slice/x.service",
                "kubepods/burstable/podX/ctr",
            ],
        );
        std::os::unix::fs::symlink("system.slice", t.path().join("alias.service")).unwrap();
        std::fs::write(t.path().join("system.slice/file.service"), "").unwrap();
        let (got, limits) = walk(t.path(), r"\.service$|/ctr$", 1000, 32);
        assert_eq!(
            got,
            [
                "/kubepods/burstable/podX/ctr",
                "/system.slice/a.service",
                "/system.slice/b.service",
                "/user.slice/user-1000.slice/user@1000.service",
            ]
        );
        assert!(!limits.walk_limited && !limits.depth_limited);
        // The root itself may be selected, and then nothing else is.
        let (got, _) = walk(t.path(), "^/$", 1000, 32);
        assert_eq!(got, ["/"]);
    }

    #[test]
    fn bounded_by_walk_and_depth() {
        let t = tempfile::tempdir().unwrap();
        let names: Vec<String> = (0..50).map(|i| format!("many/c{i}")).collect();
        mkdirs(
            t.path(),
            &names.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        mkdirs(t.path(), &["a/b/c/d/e/f/g"]);
        let (got, limits) = walk(t.path(), "/c[0-9]+$|/g$", 20, 32);
        assert!(limits.walk_limited);
        assert_eq!(limits.walked, 20);
        assert!(got.len() < 20, "{got:?}");
        let (got, limits) = walk(t.path(), "/g$", 1000, 4);
        assert!(limits.depth_limited && !limits.walk_limited);
        assert!(got.is_empty());
        let (got, limits) = walk(t.path(), "/g$", 1000, 8);
        assert_eq!(got, ["/a/b/c/d/e/f/g"]);
        assert!(!limits.depth_limited);
    }

    #[test]
    fn names_are_bytes() {
        use std::os::unix::ffi::OsStrExt;
        let t = tempfile::tempdir().unwrap();
        let bad = std::ffi::OsStr::from_bytes(b"bad\xff.service");
        std::fs::create_dir(t.path().join(bad)).unwrap();
        std::fs::create_dir(t.path().join("new\nline.service")).unwrap();
        let (got, _) = walk(t.path(), r"\.service$", 1000, 32);
        assert_eq!(got, ["/bad\u{fffd}.service", "/new\nline.service"]);
    }
}
