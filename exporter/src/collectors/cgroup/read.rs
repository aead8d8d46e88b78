//! Reading one file of one cgroup: through a kept descriptor (`pread` at
//! 0) while the process-wide budget allows, else opened relative to the
//! descriptor of the cgroup's parent directory, which the walk holds (no
//! path is ever longer than `NAME/FILE`, however deep the cgroup).
//!
//! Measured on the development VM (v1, 200 cgroups): an open, read and
//! close of a cgroup file costs 14-22 µs, a `pread` on a kept descriptor
//! 2-2.5 µs (`memory.stat` 20 µs either way: the kernel sums the
//! statistics). Each kept descriptor pins a kernfs open file and its
//! seq_file buffer, about 4-5 KiB of kernel memory, so they are kept only
//! up to [`KEPT`], and only on a real cgroup filesystem: elsewhere
//! (a fixture tree) a file may be replaced, and a kept descriptor would go
//! on reading the old one.
//!
//! What a read accepts, since the tree may be anything: regular files only
//! (on a tree that is not a cgroupfs the type is checked before the open,
//! which is non-blocking and does not follow links, and on every open with
//! fstat after it), at most [`MAX_FILE_BYTES`], valid UTF-8 (kernel cgroup
//! files are ASCII; anything else is an error naming the line).

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::kernel::fd_budget::{Budget, Unit};

/// Most bytes read from one cgroup file. The largest real ones are the v1
/// blkio files at six lines per device (about 200 bytes a device): 1 MiB
/// is thousands of devices.
pub const MAX_FILE_BYTES: usize = 1 << 20;

/// How long a file found absent (its controller not enabled for the
/// cgroup: v2's io.stat under a systemd service without IOAccounting) is
/// not looked up again on a real cgroupfs. Enabling a controller adds the
/// files to existing cgroups, so absence is not remembered for good.
pub const ABSENT_RECHECK: Duration = Duration::from_secs(30);

/// Descriptors kept open at once: 1024, or a sixteenth of the soft
/// open-files limit if that is less (the daemon raises it to the hard
/// limit at start). 1024 pin about 5 MiB of kernel memory and cover the
/// 12-15 files of 70-85 v1 cgroups; the rest are opened at every scrape.
static KEPT: Budget = Budget::new(16, 1024);

/// Descriptors kept now, process-wide.
pub fn kept() -> usize {
    KEPT.kept()
}

/// A kept descriptor, counted against [`KEPT`] until dropped.
#[derive(Debug)]
pub struct Kept {
    fd: OwnedFd,
    _unit: Unit,
}

impl Kept {
    fn try_keep(fd: OwnedFd) -> Option<Kept> {
        KEPT.take().map(|unit| Kept { fd, _unit: unit })
    }
}

/// The state of one file of one cgroup between scrapes.
#[derive(Debug, Default)]
pub struct Slot {
    kept: Option<Kept>,
    /// Found absent at this time (real cgroupfs only).
    absent_at: Option<Instant>,
}

/// What a read found.
pub enum Got {
    /// The text is in [`Reader::text`].
    Text,
    /// The file is not there, but the cgroup is: its controller or feature
    /// is off (or PSI is disabled: EOPNOTSUPP). No series, no error.
    Absent,
    /// The cgroup went away (ENODEV from a kept descriptor, ENOENT with its
    /// directory gone): it is left out of this scrape.
    Gone,
}

/// Reads files into one reused buffer.
#[derive(Default)]
pub struct Reader {
    buf: Vec<u8>,
    len: usize,
    /// `NAME/FILE\0`, reused.
    rel: Vec<u8>,
}

/// A read error, for the caller to name the file.
pub enum Failed {
    Io(io::Error),
    /// Not valid UTF-8 from this 1-based line on.
    Utf8 {
        line: usize,
    },
}

impl From<io::Error> for Failed {
    fn from(e: io::Error) -> Failed {
        Failed::Io(e)
    }
}

impl Reader {
    /// Reads `file` of the cgroup directory `name` in `parent` (`.` for
    /// the hierarchy's root), through `slot`. `kernel`: the hierarchy is a
    /// real cgroup filesystem.
    pub fn read(
        &mut self,
        slot: &mut Slot,
        parent: BorrowedFd<'_>,
        name: &[u8],
        file: &str,
        kernel: bool,
    ) -> Result<Got, Failed> {
        self.len = 0;
        if let Some(k) = &slot.kept {
            match self.pread_all(k.fd.as_raw_fd(), true) {
                Ok(()) => return self.checked(),
                Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {
                    slot.kept = None;
                    return Ok(Got::Gone);
                }
                // Anything else: read it afresh below.
                Err(_) => slot.kept = None,
            }
        }
        if let Some(at) = slot.absent_at {
            if at.elapsed() < ABSENT_RECHECK {
                return Ok(Got::Absent);
            }
            slot.absent_at = None;
        }
        self.rel.clear();
        self.rel.extend_from_slice(name);
        self.rel.push(b'/');
        self.rel.extend_from_slice(file.as_bytes());
        self.rel.push(0);
        let rel = CStr::from_bytes_with_nul(&self.rel)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the name"))?;
        let fd = match open_regular_at(parent, rel, kernel) {
            Ok(fd) => fd,
            Err(e) => {
                return match e.raw_os_error() {
                    Some(libc::ENOENT | libc::ENOTDIR) => {
                        if dir_exists(parent, &self.rel[..name.len()]) {
                            if kernel {
                                slot.absent_at = Some(Instant::now());
                            }
                            Ok(Got::Absent)
                        } else {
                            Ok(Got::Gone)
                        }
                    }
                    Some(libc::ENODEV) => Ok(Got::Gone),
                    Some(libc::EOPNOTSUPP) => Ok(Got::Absent),
                    _ => Err(Failed::Io(e)),
                };
            }
        };
        match self.pread_all(fd.as_raw_fd(), kernel) {
            Ok(()) => {}
            Err(e) => {
                return match e.raw_os_error() {
                    Some(libc::ENODEV) => Ok(Got::Gone),
                    // PSI files exist but refuse reads when booted psi=0.
                    Some(libc::EOPNOTSUPP) => Ok(Got::Absent),
                    _ => Err(Failed::Io(e)),
                };
            }
        }
        if kernel {
            slot.kept = Kept::try_keep(fd);
        }
        self.checked()
    }

    /// The text of the last successful read.
    pub fn text(&self) -> &str {
        // Checked by `checked` after every read that returns Got::Text.
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }

    fn checked(&self) -> Result<Got, Failed> {
        match std::str::from_utf8(&self.buf[..self.len]) {
            Ok(_) => Ok(Got::Text),
            Err(e) => Err(Failed::Utf8 {
                line: 1 + memchr::memchr_iter(b'\n', &self.buf[..e.valid_up_to()]).count(),
            }),
        }
    }

    /// Reads the whole file from offset 0. On a kernel file a short read
    /// is the end (a seq_file fills the request unless it has no more).
    fn pread_all(&mut self, fd: i32, short_is_eof: bool) -> io::Result<()> {
        if self.buf.len() < 16 << 10 {
            self.buf.resize(16 << 10, 0);
        }
        let mut filled = 0;
        loop {
            if filled == self.buf.len() {
                if self.buf.len() > MAX_FILE_BYTES {
                    return Err(io::Error::new(
                        io::ErrorKind::FileTooLarge,
                        format!(
                            "is larger than the {} KiB cap on a cgroup file; not read past it",
                            MAX_FILE_BYTES >> 10
                        ),
                    ));
                }
                let grown = (self.buf.len() * 2).min(MAX_FILE_BYTES + 1);
                self.buf.resize(grown, 0);
            }
            let want = self.buf.len() - filled;
            // SAFETY: pread writes at most `want` bytes into our buffer,
            // from `filled` on; the descriptor is open for the call.
            let n = unsafe {
                libc::pread(
                    fd,
                    self.buf[filled..].as_mut_ptr().cast(),
                    want,
                    filled as libc::off_t,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let n = n as usize;
            filled += n;
            if n == 0 || (short_is_eof && n < want) {
                self.len = filled;
                return Ok(());
            }
        }
    }

    /// Gives back a read buffer that one large file grew, once files are
    /// small again.
    pub fn release_large_buffer(&mut self) {
        if self.buf.len() > 64 << 10 {
            self.buf = Vec::new();
        }
    }
}

/// Opens `rel` under `parent` for reading, if it is a regular file: not
/// following a link in its last component, non-blocking (a FIFO swapped in
/// after the check does not block the open), checked with fstat after
/// the open. `kernel`: on a real cgroupfs, which holds only directories
/// and regular files, the check before the open is skipped.
fn open_regular_at(parent: BorrowedFd<'_>, rel: &CStr, kernel: bool) -> io::Result<OwnedFd> {
    if !kernel {
        check_regular(stat_at(parent, rel)?)?;
    }
    // SAFETY: a NUL-terminated relative path and a directory fd we borrow.
    let fd = unsafe {
        libc::openat(
            parent.as_raw_fd(),
            rel.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_NOCTTY,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: openat returned a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: fstat writes into the struct we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    check_regular(st.st_mode)?;
    Ok(fd)
}

/// fstatat without following a last-component link.
pub fn stat_at(parent: BorrowedFd<'_>, rel: &CStr) -> io::Result<libc::mode_t> {
    // SAFETY: stat is plain C data; all-zero is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path relative to a directory fd we borrow.
    let rc = unsafe {
        libc::fstatat(
            parent.as_raw_fd(),
            rel.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.st_mode)
}

/// Whether the directory `name` (raw bytes, no NUL) is still in `parent`.
fn dir_exists(parent: BorrowedFd<'_>, name: &[u8]) -> bool {
    let mut c = Vec::with_capacity(name.len() + 1);
    c.extend_from_slice(name);
    c.push(0);
    CStr::from_bytes_with_nul(&c)
        .ok()
        .and_then(|c| stat_at(parent, c).ok())
        .is_some_and(|mode| mode & libc::S_IFMT == libc::S_IFDIR)
}

fn check_regular(mode: libc::mode_t) -> io::Result<()> {
    let what = match mode & libc::S_IFMT {
        libc::S_IFREG => return Ok(()),
        libc::S_IFIFO => "is a FIFO, not a regular file",
        libc::S_IFCHR => "is a character device, not a regular file",
        libc::S_IFBLK => "is a block device, not a regular file",
        libc::S_IFSOCK => "is a socket, not a regular file",
        libc::S_IFDIR => "is a directory, not a regular file",
        libc::S_IFLNK => "is a symbolic link, not a regular file",
        _ => "is not a regular file",
    };
    Err(io::Error::new(io::ErrorKind::InvalidInput, what))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn dir(path: &std::path::Path) -> OwnedFd {
        OwnedFd::from(std::fs::File::open(path).unwrap())
    }

    fn read(r: &mut Reader, parent: &OwnedFd, name: &str, file: &str) -> Result<Got, Failed> {
        r.read(
            &mut Slot::default(),
            parent.as_fd(),
            name.as_bytes(),
            file,
            false,
        )
    }

    fn io_error(g: Result<Got, Failed>) -> String {
        match g {
            Err(Failed::Io(e)) => e.to_string(),
            _ => panic!("expected an I/O error"),
        }
    }

    #[test]
    fn text_absent_and_gone() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("cg")).unwrap();
        std::fs::write(t.path().join("cg/memory.current"), "4096\n").unwrap();
        let parent = dir(t.path());
        let mut r = Reader::default();
        assert!(matches!(
            read(&mut r, &parent, "cg", "memory.current"),
            Ok(Got::Text)
        ));
        assert_eq!(r.text(), "4096\n");
        assert!(matches!(
            read(&mut r, &parent, "cg", "io.stat"),
            Ok(Got::Absent)
        ));
        assert!(matches!(
            read(&mut r, &parent, "gone", "io.stat"),
            Ok(Got::Gone)
        ));
        // Nothing is kept outside a cgroupfs.
        assert_eq!(kept(), kept());
    }

    #[test]
    fn only_regular_files_capped_and_utf8() {
        let t = tempfile::tempdir().unwrap();
        let cg = t.path().join("cg");
        std::fs::create_dir(&cg).unwrap();
        let fifo =
            std::ffi::CString::new(cg.join("cpu.stat").as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        std::os::unix::fs::symlink("/dev/zero", cg.join("memory.stat")).unwrap();
        std::fs::create_dir(cg.join("pids.max")).unwrap();
        let big = std::fs::File::create(cg.join("io.stat")).unwrap();
        big.set_len(MAX_FILE_BYTES as u64 + 1).unwrap();
        std::fs::write(cg.join("memory.events"), b"max 1\noom \xff\n").unwrap();
        let parent = dir(t.path());
        let mut r = Reader::default();
        let e = io_error(read(&mut r, &parent, "cg", "cpu.stat"));
        assert!(e.contains("FIFO"), "{e}");
        let e = io_error(read(&mut r, &parent, "cg", "memory.stat"));
        assert!(e.contains("symbolic link"), "{e}");
        let e = io_error(read(&mut r, &parent, "cg", "pids.max"));
        assert!(e.contains("directory"), "{e}");
        let e = io_error(read(&mut r, &parent, "cg", "io.stat"));
        assert!(e.contains("1024 KiB cap"), "{e}");
        assert!(matches!(
            read(&mut r, &parent, "cg", "memory.events"),
            Err(Failed::Utf8 { line: 2 })
        ));
        r.release_large_buffer();
        assert_eq!(r.buf.capacity(), 0);
    }
}
