//! Directory listings by getdents64 into a reused buffer: no allocation
//! per entry, names as the kernel gives them (bytes, not necessarily
//! UTF-8), and the inode and type that come with each for free.

use std::io;
use std::os::fd::RawFd;

/// One entry of a listing. `name` has no NUL; `d_type` is `DT_UNKNOWN` on
/// filesystems that do not fill it in.
pub struct Dirent<'a> {
    pub name: &'a [u8],
    pub ino: u64,
    pub d_type: u8,
}

impl Dirent<'_> {
    /// `.` or `..`.
    pub fn is_dot(&self) -> bool {
        self.name == b"." || self.name == b".."
    }
}

/// Lists the directory open at `fd` from its start (it is rewound first),
/// calling `each` for every entry, `.` and `..` included, until it returns
/// false. `buf` is grown to at least `min_buf` bytes and reused.
pub fn for_each(
    fd: RawFd,
    buf: &mut Vec<u8>,
    min_buf: usize,
    mut each: impl FnMut(Dirent<'_>) -> bool,
) -> io::Result<()> {
    if buf.len() < min_buf {
        buf.resize(min_buf, 0);
    }
    // SAFETY: lseek on a descriptor the caller holds; directories on every
    // Linux filesystem accept SEEK_SET 0 to restart the listing.
    if unsafe { libc::lseek(fd, 0, libc::SEEK_SET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    loop {
        // SAFETY: getdents64 writes at most buf.len() bytes into buf.
        let got = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
        if got < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if got == 0 {
            return Ok(());
        }
        let mut rest = &buf[..got as usize];
        // struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2),
        // d_type (1), then the NUL-terminated name.
        while rest.len() > 19 {
            let reclen = usize::from(u16::from_ne_bytes([rest[16], rest[17]]));
            if reclen <= 19 || reclen > rest.len() {
                break;
            }
            let mut ino = [0u8; 8];
            ino.copy_from_slice(&rest[..8]);
            let name = &rest[19..reclen];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            let entry = Dirent {
                name,
                ino: u64::from_ne_bytes(ino),
                d_type: rest[18],
            };
            if !each(entry) {
                return Ok(());
            }
            rest = &rest[reclen..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn lists_every_entry_with_its_inode_and_type_and_stops_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "").unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let long = "n".repeat(255);
        std::fs::write(dir.path().join(&long), "").unwrap();
        let f = std::fs::File::open(dir.path()).unwrap();
        let mut buf = Vec::new();
        let mut seen = Vec::new();
        // A buffer too small for all of them at once: several getdents.
        for_each(f.as_raw_fd(), &mut buf, 300, |e| {
            seen.push((
                String::from_utf8(e.name.to_vec()).unwrap(),
                e.ino,
                e.d_type,
                e.is_dot(),
            ));
            true
        })
        .unwrap();
        seen.sort();
        let names: Vec<&str> = seen.iter().map(|s| s.0.as_str()).collect();
        assert_eq!(names, [".", "..", "d", "f", long.as_str()]);
        let f_entry = seen.iter().find(|s| s.0 == "f").unwrap();
        assert_eq!(
            f_entry.1,
            std::fs::metadata(dir.path().join("f")).unwrap().ino()
        );
        assert!(seen.iter().filter(|s| s.3).count() == 2);
        let mut n = 0;
        for_each(f.as_raw_fd(), &mut buf, 300, |_| {
            n += 1;
            n < 2
        })
        .unwrap();
        assert_eq!(n, 2, "stopped when asked");
    }
}
