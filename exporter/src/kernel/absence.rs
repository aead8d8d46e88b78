//! Remembering that a kernel file is absent, until the kernel could have
//! created it.
//!
//! Most hosts lack most optional sources (no md RAID, no IPVS, no NFS, no
//! InfiniBand, no ZFS), and a scrape used to look each of them up again:
//! 21 failed path walks on the development VM, 5–17 µs each with a cold
//! cache, a tenth of the scrape (BENCHMARKS.md). A file in procfs or sysfs does not appear on its
//! own, though. It appears when a module is loaded, a device or class is
//! registered, a CPU comes online, or something is mounted; the first four
//! send a kernel uevent, which advances the global counter in
//! `/sys/kernel/uevent_seqnum` (a module's uevent is sent after its init
//! function has created its files), and a mount is an event on
//! `/proc/self/mountinfo` that poll() reports.
//!
//! So the [`Watch`] reads that counter and polls mountinfo once per scrape,
//! and advances a process-wide epoch when either moved. A [`Memo`] records
//! the epoch at which its path was absent; while the epoch stays the same,
//! the path is still absent and is not looked up. The epoch also advances
//! at least every [`RECHECK_AT_LEAST_EVERY`], so an appearance that neither
//! signal covers is seen within that time at worst.
//!
//! The same signals cover a directory of devices (`class/net`,
//! `/sys/block`, `devices/system/cpu`): the kernel adds, removes, renames
//! or moves a device's entry there before it sends that device's uevent,
//! so a listing taken in one epoch is still the directory's content while
//! the epoch stays the same. `source::Dir::of_devices` reuses it
//! then ([`Stamp`]).
//!
//! Only paths under a `--path.procfs` or `--path.sysfs` root that is a real
//! procfs or sysfs are remembered. A fixture tree (or any ordinary
//! directory) can gain a file at any moment without telling anyone, so
//! there every read looks the path up, as before. Without a
//! readable counter nothing is remembered either: the epoch then advances
//! at every scrape.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The longest an absent path goes without a fresh lookup.
pub const RECHECK_AT_LEAST_EVERY: Duration = Duration::from_secs(300);

/// 0 until a [`Watch`] exists: nothing is remembered then (unit tests and
/// tools that run collectors without a scraper).
static EPOCH: AtomicU64 = AtomicU64::new(0);

fn current() -> u64 {
    EPOCH.load(Ordering::Acquire)
}

/// The epoch when a lookup started (one atomic load). It is taken before
/// the lookup: one taken after could carry an epoch that a concurrent
/// scrape advanced for the very uevent that changed the path, and so hide
/// the change until the next uevent.
#[derive(Debug, Clone, Copy)]
pub struct Epoch(u64);

impl Epoch {
    pub fn now() -> Epoch {
        Epoch(current())
    }

    /// No mount, uevent or 5-minute tick since this epoch was taken. Never
    /// true before a [`Watch`] exists.
    pub fn unmoved(self) -> bool {
        self.0 != 0 && self.0 == current()
    }
}

/// When something was seen at a path: it still holds while the epoch has
/// not moved. Nothing seen outside a real procfs or sysfs root (or before a
/// [`Watch`] exists) is ever taken to hold.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stamp(Option<u64>);

impl Stamp {
    /// What a lookup of `path` that started at `started` saw.
    pub fn of(started: Epoch, path: &Path) -> Stamp {
        Stamp((started.0 != 0 && under_kernel_root(path)).then_some(started.0))
    }

    /// Nothing could have changed it since.
    pub fn holds(&self) -> bool {
        self.0.is_some_and(|at| at == current())
    }
}

/// Per-path memory of an absence. Reads call [`Memo::still_absent`] before
/// looking the path up and [`Memo::absent`] when the lookup found nothing.
#[derive(Debug, Default)]
pub struct Memo {
    absent_at: Stamp,
}

impl Memo {
    /// The path was absent and nothing since could have created it.
    pub fn still_absent(&self) -> bool {
        self.absent_at.holds()
    }

    /// A lookup of `path` that started at `looked_up` found nothing
    /// (ENOENT or ENOTDIR).
    pub fn absent(&mut self, looked_up: Epoch, path: &Path) {
        self.absent_at = Stamp::of(looked_up, path);
    }

    /// The path was found.
    pub fn present(&mut self) {
        self.absent_at = Stamp::default();
    }

    /// Whether `path` exists (stat), without a lookup while it is known to
    /// be absent. Errors other than ENOENT and ENOTDIR are returned.
    pub fn exists(&mut self, path: &Path) -> std::io::Result<bool> {
        if self.still_absent() {
            return Ok(false);
        }
        let looked_up = Epoch::now();
        match std::fs::metadata(path) {
            Ok(_) => {
                self.present();
                Ok(true)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                self.absent(looked_up, path);
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}

/// The configured procfs and sysfs roots that are a real procfs or sysfs
/// (checked once, by [`Watch::new`]).
static KERNEL_ROOTS: RwLock<Vec<PathBuf>> = RwLock::new(Vec::new());

/// Whether `path` lies under a real procfs or sysfs root. Decided by the
/// path, not by a statfs() of its ancestors: a statfs on a stuck FUSE
/// mount would not return.
fn under_kernel_root(path: &Path) -> bool {
    KERNEL_ROOTS
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|root| path.starts_with(root))
}

fn add_kernel_root(root: &Path) {
    let mut roots = KERNEL_ROOTS.write().unwrap_or_else(|e| e.into_inner());
    if !roots.iter().any(|r| r == root) {
        roots.push(root.to_path_buf());
    }
}

/// For unit tests elsewhere in the crate: treats `root` (a temporary
/// directory) as a kernel root and moves the epoch, as a uevent would.
#[cfg(test)]
pub(crate) fn pretend_kernel_root_and_advance(root: &Path) {
    add_kernel_root(root);
    EPOCH.fetch_add(1, Ordering::AcqRel);
}

/// The two signals that something may have appeared.
pub struct Watch {
    /// `<sysfs>/kernel/uevent_seqnum`, when sysfs is real.
    seqnum: Option<File>,
    /// `<procfs>/self/mountinfo`, polled for POLLPRI.
    mounts: Option<File>,
    last_seqnum: Option<u64>,
    last_advance: Instant,
    buf: [u8; 32],
}

impl Watch {
    /// Opens both signals under the configured roots and starts the epoch.
    /// Either may be missing; without the counter, nothing is remembered.
    pub fn new(procfs: &Path, sysfs: &Path) -> Watch {
        let real_sysfs = crate::kernel::fs_kind::is_sysfs(sysfs);
        let real_procfs = crate::kernel::fs_kind::is_procfs(procfs);
        let seqnum = real_sysfs
            .then(|| File::open(sysfs.join("kernel/uevent_seqnum")).ok())
            .flatten();
        let mounts = real_procfs
            .then(|| File::open(procfs.join("self/mountinfo")).ok())
            .flatten();
        if real_sysfs {
            add_kernel_root(sysfs);
        }
        if real_procfs {
            add_kernel_root(procfs);
        }
        if seqnum.is_none() {
            tracing::debug!(
                "no readable {}/kernel/uevent_seqnum: absent sources are looked up at every scrape",
                sysfs.display()
            );
        }
        EPOCH.fetch_add(1, Ordering::AcqRel);
        Watch {
            seqnum,
            mounts,
            last_seqnum: None,
            last_advance: Instant::now(),
            buf: [0; 32],
        }
    }

    /// Called at the start of every scrape: advances the epoch if a uevent
    /// was sent, the mount table changed, the counter cannot be read, or
    /// [`RECHECK_AT_LEAST_EVERY`] has passed.
    pub fn refresh(&mut self) {
        self.refresh_at(Instant::now());
    }

    fn refresh_at(&mut self, now: Instant) {
        let seqnum = self.read_seqnum();
        let mounted = self.mount_table_changed();
        let unchanged = seqnum.is_some() && seqnum == self.last_seqnum;
        let overdue = now.saturating_duration_since(self.last_advance) >= RECHECK_AT_LEAST_EVERY;
        if !unchanged || mounted || overdue {
            EPOCH.fetch_add(1, Ordering::AcqRel);
            self.last_advance = now;
        }
        self.last_seqnum = seqnum;
    }

    fn read_seqnum(&mut self) -> Option<u64> {
        let n = self.seqnum.as_ref()?.read_at(&mut self.buf, 0).ok()?;
        std::str::from_utf8(&self.buf[..n])
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    fn mount_table_changed(&self) -> bool {
        self.mounts.as_ref().is_some_and(mount_event)
    }
}

/// POLLPRI on an open mountinfo file: its mount namespace changed since the
/// last poll of this open file (the kernel clears the mark as it reports
/// it). A failed poll counts as a change.
pub fn mount_event(mountinfo: &File) -> bool {
    let mut p = libc::pollfd {
        fd: mountinfo.as_raw_fd(),
        events: libc::POLLPRI,
        revents: 0,
    };
    // SAFETY: one pollfd we own; timeout 0 does not block.
    let rc = unsafe { libc::poll(&mut p, 1, 0) };
    rc != 0 && (rc < 0 || p.revents & (libc::POLLPRI | libc::POLLERR | libc::POLLNVAL) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test, not several: the epoch is process-wide, and a Watch made
    /// by a test running in parallel would move it.
    #[test]
    fn remembers_kernel_paths_only_and_forgets_when_the_epoch_moves() {
        let mut watch = Watch::new(Path::new("/proc"), Path::new("/sys"));
        let dir = tempfile::tempdir().unwrap();
        let mut ordinary = Memo::default();
        ordinary.absent(Epoch::now(), &dir.path().join("a/b"));
        assert!(!ordinary.still_absent());

        let mut kernel = Memo::default();
        kernel.absent(Epoch::now(), Path::new("/proc/no-such-source/x"));
        assert!(kernel.still_absent());
        // A fresh Watch sees the counter for the first time: it advances.
        watch.refresh();
        assert!(!kernel.still_absent());
        kernel.absent(Epoch::now(), Path::new("/proc/no-such-source/x"));
        kernel.present();
        assert!(!kernel.still_absent());

        // Without an event the memo holds (retried: a uevent from elsewhere
        // on the host may land in any one attempt) until the recheck is
        // due, and then it is forgotten whatever happened.
        let start = Instant::now();
        let held = (0..10).any(|_| {
            kernel.absent(Epoch::now(), Path::new("/proc/no-such-source/x"));
            watch.refresh_at(start);
            kernel.still_absent()
        });
        assert!(held, "the memo never held across a quiet refresh");
        kernel.absent(Epoch::now(), Path::new("/proc/no-such-source/x"));
        watch.refresh_at(start + RECHECK_AT_LEAST_EVERY);
        assert!(
            !kernel.still_absent(),
            "still remembered after the recheck was due"
        );
    }
}
