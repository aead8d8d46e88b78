//! Whether the mount table may have changed since the filesystem collector
//! last read it, so that an unchanged one is not read at every scrape.
//!
//! mountinfo is the dearest file a scrape reads: the kernel formats every
//! mount's paths and options, 38 µs here with warm caches and 83 µs cold
//! for 22 mounts (BENCHMARKS.md), and the text is nearly always the same as
//! the last time. What it shows changes in these ways, each with a signal:
//!
//! - **A mount, unmount, move or remount** in the mount namespace of the
//!   file read: poll() reports POLLPRI on that very mountinfo file (`/proc/1`
//!   or `/proc/self`), which is kept open for it.
//! - **A superblock turning read-only or back** without a mount event in
//!   that namespace (a filesystem's error handling, as btrfs's or older
//!   ext4's; a remount from another mount namespace): statfs, which runs at
//!   every scrape anyway, reports the superblock's and the mount's flags
//!   (`ST_RDONLY` is either's read-only bit), so the collector compares each
//!   mount's `f_flags` with the last scrape's and reads the table again
//!   when one moved ([`FilesystemCollector`](super::filesystem)).
//! - **ext4's `emergency_ro`** (Linux 6.15+: after an error under
//!   `errors=remount-ro`, ext4 marks the superblock `emergency_ro` in its
//!   options instead of setting it read-only, so statfs still says
//!   read-write): the error first raises `/sys/fs/ext4/<dev>/errors_count`,
//!   which is read at every scrape for each ext4 superblock. The counter is
//!   raised a few instructions before the mark is set, so after it moves the
//!   table is read at that scrape and at the next.
//! - **Anything else** (a directory above a mount point renamed, which
//!   changes the path mountinfo prints): the absence epoch
//!   ([`crate::kernel::absence`]) moves at least every 5 minutes, on every uevent and
//!   on mounts in the daemon's own namespace, and the table is read again
//!   then.
//!
//! The table is read at every scrape, as before, when any signal is
//! missing: procfs or sysfs is not the live kernel's (a fixture tree), the
//! mountinfo file cannot be polled, an ext4 superblock has no readable
//! `errors_count` (or there are more than 64 to watch), or a mount did not
//! answer statfs (its flags are unknown).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::kernel::absence::{self, Epoch};
use crate::kernel::fs_kind::{is_procfs, is_sysfs};

/// Beyond this many ext4 superblocks, watching their error counters (one
/// descriptor and one read each per scrape) would cost more than reading
/// mountinfo, which is then read at every scrape.
const MAX_EXT4_COUNTERS: usize = 64;

/// The mountinfo files the collector may read, kept open to be polled.
pub struct MountChanges {
    /// `<procfs>/1/mountinfo` and `<procfs>/self/mountinfo`, opened before
    /// the first read so that no event falls between a read and the open.
    /// None outside a live procfs.
    polled: Option<[Option<File>; 2]>,
    /// `<sysfs>/fs/ext4`, when sysfs is the live kernel's.
    ext4_root: Option<PathBuf>,
    /// Each ext4 superblock's `errors_count` and its last value.
    ext4_errors: Vec<(File, u64)>,
    /// When the table was last read; None: read it at the next scrape.
    read_at: Option<Epoch>,
    /// Which file that read came from: the one polled.
    table: Table,
    /// Read again at the next scrape whatever the signals say.
    again: bool,
    buf: [u8; 24],
}

/// Which of the two files a read came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    Pid1,
    OwnProcess,
}

impl MountChanges {
    pub fn new(procfs: &Path, sysfs: &Path) -> MountChanges {
        let polled = is_procfs(procfs).then(|| {
            [
                File::open(procfs.join("1/mountinfo")).ok(),
                File::open(procfs.join("self/mountinfo")).ok(),
            ]
        });
        MountChanges {
            polled,
            ext4_root: is_sysfs(sysfs).then(|| sysfs.join("fs/ext4")),
            ext4_errors: Vec::new(),
            read_at: None,
            table: Table::Pid1,
            again: false,
            buf: [0; 24],
        }
    }

    /// Whether the table must be read at this scrape. Drains the mount
    /// event of the file last read, so call it once per scrape.
    pub fn must_read(&mut self) -> bool {
        // Every check runs (none is skipped by an earlier answer): each
        // one also takes in its signal, so that it is not reported again.
        let mounted = self.mount_event();
        let errors = self.ext4_errors_moved();
        let epoch = !self.read_at.is_some_and(Epoch::unmoved);
        let again = std::mem::take(&mut self.again);
        if errors {
            // The mark follows the counter: look once more next scrape.
            self.again = true;
        }
        mounted || errors || epoch || again
    }

    /// `table` was read and parsed at this scrape, starting at `started`
    /// (the epoch taken before the read). `ext4_mounted`: whether any
    /// reported mount is an ext2/3/4 filesystem, whose `emergency_ro` only
    /// its error counter announces.
    pub fn was_read(&mut self, table: Table, started: Epoch, ext4_mounted: bool) {
        self.table = table;
        let watched = self.open_ext4_counters();
        // Without every counter to watch, read at every scrape.
        self.read_at = (watched || !ext4_mounted).then_some(started);
    }

    /// The table could not be read or parsed, or a mount's flags are
    /// unknown: read it at the next scrape.
    pub fn read_next_time(&mut self) {
        self.read_at = None;
    }

    /// A mount event on the file last read; true when there is no file.
    fn mount_event(&self) -> bool {
        match &self.polled {
            Some(files) => files[self.table as usize]
                .as_ref()
                .is_none_or(absence::mount_event),
            None => true,
        }
    }

    /// Whether any ext4 superblock's error counter moved (or could not be
    /// read) since the last look.
    fn ext4_errors_moved(&mut self) -> bool {
        let mut moved = false;
        for (file, last) in &mut self.ext4_errors {
            match read_counter(file, &mut self.buf) {
                Some(n) if n == *last => {}
                Some(n) => {
                    *last = n;
                    moved = true;
                }
                None => moved = true,
            }
        }
        moved
    }

    /// Opens the `errors_count` of every ext4 superblock now mounted
    /// (their directories come and go with mounts, which make the table be
    /// read, and so this be called, again). False when some counter cannot
    /// be watched: no live sysfs, an unreadable directory or counter, or
    /// more superblocks than [`MAX_EXT4_COUNTERS`].
    fn open_ext4_counters(&mut self) -> bool {
        self.ext4_errors.clear();
        let Some(root) = &self.ext4_root else {
            return false;
        };
        let Ok(dir) = std::fs::read_dir(root) else {
            return false;
        };
        for entry in dir {
            let Ok(entry) = entry else {
                return false;
            };
            if entry.file_name() == "features" {
                continue;
            }
            if self.ext4_errors.len() == MAX_EXT4_COUNTERS {
                self.ext4_errors.clear();
                return false;
            }
            let counter = File::open(entry.path().join("errors_count"))
                .ok()
                .and_then(|f| Some((read_counter(&f, &mut self.buf)?, f)));
            let Some((n, file)) = counter else {
                self.ext4_errors.clear();
                return false;
            };
            self.ext4_errors.push((file, n));
        }
        true
    }
}

/// A decimal counter file ("3\n").
fn read_counter(file: &File, buf: &mut [u8; 24]) -> Option<u64> {
    let n = file.read_at(buf, 0).ok()?;
    std::str::from_utf8(&buf[..n]).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_a_live_kernel_the_table_is_read_every_time() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = MountChanges::new(dir.path(), dir.path());
        for _ in 0..3 {
            assert!(c.must_read());
            c.was_read(Table::Pid1, Epoch::now(), false);
        }
    }

    #[test]
    fn a_failed_read_or_an_unknown_flag_is_read_again() {
        let mut c = MountChanges::new(Path::new("/proc"), Path::new("/sys"));
        assert!(c.must_read(), "never read yet");
        c.read_next_time();
        assert!(c.must_read());
    }

    fn with_ext4_root(root: &Path) -> MountChanges {
        let mut c = MountChanges::new(root, root);
        c.ext4_root = Some(root.to_path_buf());
        c
    }

    fn superblock(root: &Path, name: &str, count: &str) {
        std::fs::create_dir_all(root.join(name)).unwrap();
        std::fs::write(root.join(name).join("errors_count"), count).unwrap();
    }

    #[test]
    fn ext4_error_counters() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("features")).unwrap();
        superblock(root, "sda1", "0\n");
        superblock(root, "dm-3", "4\n");
        let mut c = with_ext4_root(root);
        assert!(c.open_ext4_counters());
        assert_eq!(c.ext4_errors.len(), 2, "features/ is not a superblock");
        assert!(!c.ext4_errors_moved());
        std::fs::write(root.join("dm-3/errors_count"), "5\n").unwrap();
        assert!(c.ext4_errors_moved(), "an error on dm-3");
        assert!(!c.ext4_errors_moved(), "seen once");
        std::fs::write(root.join("sda1/errors_count"), "garbage").unwrap();
        assert!(
            c.ext4_errors_moved(),
            "an unreadable counter counts as moved"
        );

        // A superblock without a readable counter: nothing is watched.
        std::fs::create_dir(root.join("sdz")).unwrap();
        assert!(!c.open_ext4_counters());
        assert!(c.ext4_errors.is_empty());
    }

    #[test]
    fn too_many_ext4_superblocks_are_not_watched() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..=MAX_EXT4_COUNTERS {
            superblock(dir.path(), &format!("loop{i}"), "0\n");
        }
        let mut c = with_ext4_root(dir.path());
        assert!(!c.open_ext4_counters());
        assert!(c.ext4_errors.is_empty());
        std::fs::remove_dir_all(dir.path().join("loop0")).unwrap();
        assert!(c.open_ext4_counters(), "exactly the maximum");
    }

    #[test]
    fn counters_parse() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("errors_count");
        let mut buf = [0; 24];
        std::fs::write(&p, "17\n").unwrap();
        assert_eq!(read_counter(&File::open(&p).unwrap(), &mut buf), Some(17));
        std::fs::write(&p, "x\n").unwrap();
        assert_eq!(read_counter(&File::open(&p).unwrap(), &mut buf), None);
    }
}
