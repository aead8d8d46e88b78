//! /proc/1/mountinfo + statfs(2) → the `node_filesystem_*` families, as
//! node_exporter 1.12's filesystem collector writes them.
//!
//! - The mounts are PID 1's (`/proc/1/mountinfo`), or, when that is absent
//!   (procfs mounted with `hidepid`), this process's (`/proc/self/mountinfo`).
//!   The line format is procfs's (Go) reading of it: fields split on single
//!   spaces, at least ten, the `-` separator fourth from the end.
//! - Mount points are stat'ed under `--path.rootfs` and reported without
//!   that prefix, so a container with the host's `/` at `/host` reports
//!   `/`, `/boot`, ... as node_exporter does.
//! - Mounts whose mount point or type matches the exclude flags (or does not
//!   match the include flags) are skipped; duplicates by label (the same
//!   device mounted twice on one mount point) are reported once.
//! - statfs runs on the threads of a [`StatfsPool`], never on the scrape's:
//!   a scrape waits at most `--collector.filesystem.mount-timeout` for the
//!   answers, and a mount that has not answered is reported with
//!   `device_error` 1 (label `device_error="mountpoint timeout"`) and not
//!   called again until its stuck call returns. See statfs_pool.rs.
//! - `readonly` comes from the mount and superblock options (`ro`, or the
//!   superblock's `emergency_ro`), as in node_exporter 1.12, not from statfs.
//!
//! mountinfo is read only when the mount table may have changed: a mount
//! event, a mount's statfs flags moving, an ext4 error counter moving, or
//! the absence epoch moving (see mount_changes.rs for why these cover what
//! the collector reports). The mount list is rebuilt (labels, filters,
//! duplicates) only when the text read differs from the last.

use std::collections::HashSet;
use std::ffi::{CStr, CString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use regex::Regex;

use crate::collectors::{Flag, FlagKind, Parser, Settings, Source, Spec};
use crate::kernel::absence::Epoch;
use crate::kernel::error::CollectError;
use crate::kernel::fs_kind::is_procfs;
use crate::kernel::mount_changes::{MountChanges, Table};
use crate::kernel::mountinfo::{Mount, has_option, parse_into, unescape};
use crate::kernel::parse::recycle;
use crate::kernel::source::{Read, SourceFile};
use crate::kernel::statfs_pool::{Outcome, StatfsPool, Stats};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder, Value};

pub const MOUNT_POINTS_EXCLUDE: &str = "collector.filesystem.mount-points-exclude";
pub const MOUNT_POINTS_INCLUDE: &str = "collector.filesystem.mount-points-include";
pub const FS_TYPES_EXCLUDE: &str = "collector.filesystem.fs-types-exclude";
pub const FS_TYPES_INCLUDE: &str = "collector.filesystem.fs-types-include";
pub const MOUNT_TIMEOUT: &str = "collector.filesystem.mount-timeout";
pub const STAT_WORKERS: &str = "collector.filesystem.stat-workers";

/// node_exporter 1.12's `defMountPointsExcluded` (Linux).
pub const DEFAULT_MOUNT_POINTS_EXCLUDE: &str =
    "^/(dev|proc|run/credentials/.+|sys|var/lib/docker/.+|var/lib/containers/storage/.+)($|/)";
/// node_exporter 1.12's `defFSTypesExcluded` (Linux).
pub const DEFAULT_FS_TYPES_EXCLUDE: &str = "^(autofs|binfmt_misc|bpf|cgroup2?|configfs|debugfs|devpts|devtmpfs|fusectl|hugetlbfs|iso9660|mqueue|nsfs|overlay|proc|procfs|pstore|rpc_pipefs|securityfs|selinuxfs|squashfs|erofs|sysfs|tracefs)$";

/// The `device_error` label of a mount that did not answer in time.
pub const TIMEOUT_LABEL: &str = "mountpoint timeout";
/// The `device_error` label of a mount not asked because every statfs
/// thread the bound allows is stuck (usescope only; see statfs_pool.rs).
pub const SATURATED_LABEL: &str = "too many stuck mounts";

pub const SPEC: Spec = Spec {
    name: "filesystem",
    default_enabled: true,
    help: "Filesystem size, free space and inodes: statfs of each mount in /proc/1/mountinfo, under --path.rootfs",
    flags: &[
        Flag {
            name: MOUNT_POINTS_EXCLUDE,
            help: "Regexp of mount points to exclude for filesystem collector. (mutually exclusive to mount-points-include)",
            default: Some(DEFAULT_MOUNT_POINTS_EXCLUDE),
            kind: FlagKind::Regex,
            conflicts_with: Some(MOUNT_POINTS_INCLUDE),
        },
        Flag {
            name: MOUNT_POINTS_INCLUDE,
            help: "Regexp of mount points to include for filesystem collector. (mutually exclusive to mount-points-exclude)",
            default: None,
            kind: FlagKind::Regex,
            conflicts_with: Some(MOUNT_POINTS_EXCLUDE),
        },
        Flag {
            name: FS_TYPES_EXCLUDE,
            help: "Regexp of filesystem types to exclude for filesystem collector. (mutually exclusive to fs-types-include)",
            default: Some(DEFAULT_FS_TYPES_EXCLUDE),
            kind: FlagKind::Regex,
            conflicts_with: Some(FS_TYPES_INCLUDE),
        },
        Flag {
            name: FS_TYPES_INCLUDE,
            help: "Regexp of filesystem types to include for filesystem collector. (mutually exclusive to fs-types-exclude)",
            default: None,
            kind: FlagKind::Regex,
            conflicts_with: Some(FS_TYPES_EXCLUDE),
        },
        Flag {
            name: MOUNT_TIMEOUT,
            help: "how long to wait for a mount to respond before marking it as stale (a scrape waits at most this long for statfs; a stale mount reports device_error 1 and is not stat'ed again until its call returns)",
            default: Some("5s"),
            kind: FlagKind::Duration,
            conflicts_with: None,
        },
        Flag {
            name: STAT_WORKERS,
            help: "how many stat calls to process simultaneously (threads; up to 32 more stand in for calls that hang)",
            default: Some("4"),
            kind: FlagKind::Integer,
            conflicts_with: None,
        },
    ],
    build,
    sources: &[Source::proc("1/mountinfo", "mountinfo")],
    parsers: &[Parser::numeric("mountinfo", |t| {
        parse_into(t, &mut Vec::new())
    })],
};

const AVAIL: Desc = Desc::gauge(
    "node_filesystem_avail_bytes",
    "Filesystem space available to non-root users in bytes.",
);
const DEVICE_ERROR: Desc = Desc::gauge(
    "node_filesystem_device_error",
    "Whether an error occurred while getting statistics for the given device.",
);
const FILES: Desc = Desc::gauge("node_filesystem_files", "Filesystem total file nodes.");
const FILES_FREE: Desc = Desc::gauge(
    "node_filesystem_files_free",
    "Filesystem total free file nodes.",
);
const FREE: Desc = Desc::gauge(
    "node_filesystem_free_bytes",
    "Filesystem free space in bytes.",
);
const MOUNT_INFO: Desc = Desc::gauge(
    "node_filesystem_mount_info",
    "Filesystem mount information.",
);
// node_exporter 1.12 writes this on Linux too, always 0 (its value is only
// filled in on macOS).
const PURGEABLE: Desc = Desc::gauge(
    "node_filesystem_purgeable_bytes",
    "Filesystem space available including purgeable space (MacOS specific).",
);
const READONLY: Desc = Desc::gauge("node_filesystem_readonly", "Filesystem read-only status.");
const SIZE: Desc = Desc::gauge("node_filesystem_size_bytes", "Filesystem size in bytes.");

/// The mount point as node_exporter labels it: only `\040` and `\011` are
/// turned back into a space and a tab (fstab(5)'s escapes), in that order.
pub fn label_mount_point(raw: &str) -> String {
    raw.replace("\\040", " ").replace("\\011", "\t")
}

/// `--path.rootfs`, as node_exporter uses it.
struct Rootfs {
    /// As given: node_exporter strips exactly this string.
    prefix: String,
    bytes: Vec<u8>,
}

impl Rootfs {
    fn new(s: &Settings) -> Rootfs {
        Rootfs {
            prefix: s.rootfs.to_string_lossy().into_owned(),
            bytes: s.rootfs.as_os_str().as_bytes().to_vec(),
        }
    }

    /// node_exporter's `rootfsStripPrefix`: the mount point without the
    /// rootfs prefix, `/` if nothing is left; unchanged when rootfs is `/`.
    fn strip<'a>(&self, mount_point: &'a str) -> std::borrow::Cow<'a, str> {
        if self.prefix == "/" {
            return mount_point.into();
        }
        match mount_point.strip_prefix(self.prefix.as_str()) {
            Some("") => "/".into(),
            Some(rest) => rest.into(),
            None => mount_point.into(),
        }
    }

    /// The path statfs is called on for a mount point as mountinfo writes
    /// it: node_exporter's `rootfsFilePath(rootfsStripPrefix(mount point))`,
    /// that is Go's `filepath.Join(rootfs, stripped)`, but from the fully
    /// unescaped mount point (see [`unescape`]).
    fn path_of(&self, raw_mount_point: &str) -> Vec<u8> {
        let unescaped = unescape(raw_mount_point);
        let stripped: &[u8] = if self.prefix == "/" {
            &unescaped
        } else {
            match unescaped.strip_prefix(self.prefix.as_bytes()) {
                Some(b"") => b"/",
                Some(rest) => rest,
                None => &unescaped,
            }
        };
        let mut joined = self.bytes.clone();
        joined.push(b'/');
        joined.extend_from_slice(stripped);
        clean(&joined)
    }
}

/// Go's `path.Clean` on bytes: one slash between elements, no `.`
/// elements, `..` applied lexically, no trailing slash.
fn clean(path: &[u8]) -> Vec<u8> {
    let rooted = path.first() == Some(&b'/');
    let mut parts: Vec<&[u8]> = Vec::new();
    for part in path.split(|&b| b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => {
                if parts.last().is_some_and(|p| *p != b"..") {
                    parts.pop();
                } else if !rooted {
                    parts.push(part);
                }
            }
            _ => parts.push(part),
        }
    }
    let mut out = Vec::with_capacity(path.len());
    if rooted {
        out.push(b'/');
    }
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            out.push(b'/');
        }
        out.extend_from_slice(p);
    }
    if out.is_empty() {
        out.push(b'.');
    }
    out
}

/// An include or exclude regexp (node_exporter's `deviceFilter`).
struct Filter {
    exclude: Option<Regex>,
    include: Option<Regex>,
}

impl Filter {
    /// The include flag, when given, replaces the exclude one: cli.rs lets
    /// only one of them be set on the command line, so the exclude here is
    /// then its default, which node_exporter drops too.
    fn new(s: &Settings, exclude: &str, include: &str) -> Filter {
        let include = s.regex(include).cloned();
        Filter {
            exclude: if include.is_some() {
                None
            } else {
                s.regex(exclude).cloned()
            },
            include,
        }
    }

    fn ignored(&self, name: &str) -> bool {
        self.exclude.as_ref().is_some_and(|re| re.is_match(name))
            || self.include.as_ref().is_some_and(|re| !re.is_match(name))
    }
}

/// A mount that is reported, with its labels.
struct Entry {
    device: String,
    mount_point: String,
    fs_type: String,
    major: String,
    minor: String,
    /// From the mount and superblock options.
    readonly: bool,
    /// The path cannot be passed to statfs (a NUL byte): EINVAL, as Go's.
    bad_path: bool,
    /// Whether statfs answered in the last scrape: such mounts are asked
    /// first, so newly hung ones queue behind them.
    answered: bool,
    /// Whether the last scrape reported it timed out (logged on change).
    timed_out: bool,
    /// The last statfs errno and its text, the `device_error` label.
    errno: i32,
    error_text: String,
    /// statfs's `f_flags` at the last scrape that answered.
    flags: Option<u64>,
}

impl Entry {
    /// The `device_error` label for this scrape's outcome.
    fn error_label(&self, o: Outcome) -> &str {
        match o {
            Outcome::Error(_) => &self.error_text,
            Outcome::Timeout => TIMEOUT_LABEL,
            Outcome::Saturated => SATURATED_LABEL,
            Outcome::Stats(_) | Outcome::Pending => "",
        }
    }
}

pub struct FilesystemCollector {
    primary: SourceFile,
    fallback: SourceFile,
    rootfs: Rootfs,
    mount_points: Filter,
    fs_types: Filter,
    pool: StatfsPool,
    timeout: Duration,
    /// Whether mountinfo must be read at this scrape.
    changes: MountChanges,
    /// The mountinfo text the entries were built from.
    built_from: String,
    entries: Vec<Entry>,
    /// `entries[i]`'s statfs path.
    paths: Vec<Arc<CStr>>,
    /// Reused per scrape.
    order: Vec<usize>,
    outcomes: Vec<Outcome>,
    /// Kept empty between scrapes; only its allocation is reused.
    mounts: Vec<Mount<'static>>,
}

/// PID 1's root directory, opened now (before privileges are dropped: a
/// later open needs ptrace access to PID 1), when this daemon runs in a
/// mount namespace other than PID 1's (`ip netns exec`, `unshare -m`, a
/// container given the host's PIDs but not its `/`). The table is PID 1's,
/// so its mount points must be resolved in PID 1's namespace: in this
/// one, a mount the host made after start is not there, and statfs would
/// answer for the filesystem beneath it. None when the namespaces are the
/// same, `--path.rootfs` is set (node_exporter's way for a container with
/// the host's `/` mounted in it), or procfs is not the live kernel's.
fn pid1_root(s: &Settings) -> Option<OwnedFd> {
    if s.rootfs != Path::new("/") || !is_procfs(&s.procfs) {
        return None;
    }
    let ns = |pid: &str| std::fs::metadata(s.procfs.join(pid).join("ns/mnt")).map(|m| m.ino());
    match (ns("self"), ns("1")) {
        (Ok(own), Ok(pid1)) if own == pid1 => return None,
        (Ok(_), Ok(_)) => {}
        // Without ptrace access to PID 1 its namespace cannot be told,
        // nor entered: statfs stays in this namespace.
        (_, Err(e)) | (Err(e), _) => {
            tracing::debug!(error = %e, "cannot compare mount namespaces with PID 1");
            return None;
        }
    }
    let root = s.procfs.join("1/root");
    match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(&root)
    {
        Ok(f) => {
            tracing::info!(
                root = %root.display(),
                "this process runs in a mount namespace other than PID 1's: mount points are stat'ed in PID 1's"
            );
            Some(f.into())
        }
        Err(e) => {
            tracing::warn!(
                root = %root.display(),
                error = %e,
                "this process runs in a mount namespace other than PID 1's and cannot open PID 1's root: mount points are stat'ed in this namespace, where a mount made after start reports the filesystem beneath it"
            );
            None
        }
    }
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    let timeout = s.duration(MOUNT_TIMEOUT).unwrap_or(Duration::from_secs(5));
    // node_exporter uses max(stat-workers, 1).
    let workers = s.integer(STAT_WORKERS).unwrap_or(4).clamp(1, 1024) as usize;
    Box::new(FilesystemCollector {
        primary: SourceFile::new(&s.procfs, "1/mountinfo"),
        fallback: SourceFile::new(&s.procfs, "self/mountinfo"),
        rootfs: Rootfs::new(s),
        mount_points: Filter::new(s, MOUNT_POINTS_EXCLUDE, MOUNT_POINTS_INCLUDE),
        fs_types: Filter::new(s, FS_TYPES_EXCLUDE, FS_TYPES_INCLUDE),
        pool: match pid1_root(s) {
            Some(root) => StatfsPool::in_root(workers, timeout, root),
            None => StatfsPool::new(workers, timeout),
        },
        timeout,
        changes: MountChanges::new(&s.procfs, &s.sysfs),
        built_from: String::new(),
        entries: Vec::new(),
        paths: Vec::new(),
        order: Vec::new(),
        outcomes: Vec::new(),
        mounts: Vec::new(),
    })
}

/// The reported mounts of freshly parsed mountinfo, in its order: labels,
/// filters, duplicates dropped (node_exporter reports a label set once),
/// and the path statfs is called on.
fn entries_of(
    mounts: &[Mount],
    rootfs: &Rootfs,
    mount_points: &Filter,
    fs_types: &Filter,
    entries: &mut Vec<Entry>,
    paths: &mut Vec<Arc<CStr>>,
) {
    // What the last scrapes learnt about a mount carries over, so that a
    // change elsewhere in the table neither logs a stuck mount again nor
    // forgets which mounts answered.
    let mut before: std::collections::HashMap<(String, String, String), Entry> = entries
        .drain(..)
        .map(|e| {
            (
                (e.device.clone(), e.mount_point.clone(), e.fs_type.clone()),
                e,
            )
        })
        .collect();
    paths.clear();
    let mut seen = HashSet::new();
    for m in mounts {
        let mount_point = rootfs.strip(&label_mount_point(m.mount_point)).into_owned();
        if mount_points.ignored(&mount_point) {
            tracing::debug!(mountpoint = %mount_point, "ignoring mount point");
            continue;
        }
        if fs_types.ignored(m.fs_type) {
            tracing::debug!(fstype = m.fs_type, "ignoring fs type");
            continue;
        }
        // One series per exported label set: two mounts on one mount point
        // with the same device and type (a remount stacked on itself, a
        // second /dev/shm) would otherwise write the same series twice,
        // which Prometheus counts as a duplicate sample. node_exporter's
        // client library drops the second one the same way.
        if !seen.insert((m.source, mount_point.clone(), m.fs_type)) {
            continue;
        }
        let (path, bad_path) = match CString::new(rootfs.path_of(m.mount_point)) {
            Ok(c) => (c, false),
            Err(_) => (CString::default(), true),
        };
        paths.push(Arc::from(path));
        let old = before.remove(&(
            m.source.to_string(),
            mount_point.clone(),
            m.fs_type.to_string(),
        ));
        entries.push(Entry {
            device: m.source.to_string(),
            mount_point,
            fs_type: m.fs_type.to_string(),
            major: m.major.to_string(),
            minor: m.minor.to_string(),
            readonly: has_option(m.options, "ro")
                || has_option(m.super_options, "ro")
                || has_option(m.super_options, "emergency_ro"),
            bad_path,
            answered: old.as_ref().is_none_or(|o| o.answered),
            timed_out: old.as_ref().is_some_and(|o| o.timed_out),
            errno: old.as_ref().map_or(0, |o| o.errno),
            flags: old.as_ref().and_then(|o| o.flags),
            error_text: old.map(|o| o.error_text).unwrap_or_default(),
        });
    }
}

impl FilesystemCollector {
    /// Asks statfs about every entry, those that answered last time first.
    /// Says whether a mount's flags moved since the last scrape, and
    /// whether some mount's flags are unknown (it did not answer).
    fn stat_entries(&mut self) -> FlagNews {
        let mut news = FlagNews::default();
        self.order.clear();
        for pass in [true, false] {
            for (i, e) in self.entries.iter().enumerate() {
                if e.answered == pass && !e.bad_path {
                    self.order.push(i);
                }
            }
        }
        self.pool
            .stat_all(&self.paths, &self.order, &mut self.outcomes);
        for (e, o) in self.entries.iter_mut().zip(self.outcomes.iter_mut()) {
            if e.bad_path {
                *o = Outcome::Error(libc::EINVAL);
            }
            if let Outcome::Error(errno) = *o
                && errno != e.errno
            {
                e.errno = errno;
                e.error_text = errno_text(errno);
            }
            match *o {
                Outcome::Stats(st) => {
                    news.moved |= e.flags.is_some_and(|f| f != st.flags);
                    e.flags = Some(st.flags);
                }
                _ => {
                    news.unknown = true;
                    e.flags = None;
                }
            }
            e.answered = matches!(o, Outcome::Stats(_) | Outcome::Error(_));
            let timed_out = *o == Outcome::Timeout;
            if timed_out && !e.timed_out {
                tracing::warn!(
                    mountpoint = %e.mount_point,
                    timeout = ?self.timeout,
                    "statfs did not answer within the mount timeout; reporting device_error 1, and not calling it again until that call returns"
                );
            } else if e.timed_out && e.answered {
                tracing::info!(mountpoint = %e.mount_point, "mount point answers statfs again");
            }
            e.timed_out = timed_out;
        }
        news
    }

    /// Writes the families in node_exporter's (sorted) order.
    fn emit(&self, enc: &mut Encoder) {
        if self.entries.is_empty() {
            return;
        }
        let rows = || self.entries.iter().zip(self.outcomes.iter().copied());
        let any_stats = rows().any(|(_, o)| matches!(o, Outcome::Stats(_)));
        let stats_family = |enc: &mut Encoder, desc: &Desc, value: fn(&Stats) -> Value| {
            if !any_stats {
                return;
            }
            enc.family(desc);
            for (e, o) in rows() {
                if let Outcome::Stats(s) = o {
                    enc.sample(desc, &labels(e, o), value(&s));
                }
            }
        };
        stats_family(enc, &AVAIL, |s| bytes(s, s.bavail));
        enc.family(&DEVICE_ERROR);
        for (e, o) in rows() {
            let failed = !matches!(o, Outcome::Stats(_));
            enc.sample(&DEVICE_ERROR, &labels(e, o), u64::from(failed));
        }
        stats_family(enc, &FILES, |s| s.files.into());
        stats_family(enc, &FILES_FREE, |s| s.ffree.into());
        stats_family(enc, &FREE, |s| bytes(s, s.bfree));
        if any_stats {
            enc.family(&MOUNT_INFO);
            for (e, o) in rows() {
                if let Outcome::Stats(_) = o {
                    let l = [
                        ("device", e.device.as_str()),
                        ("major", e.major.as_str()),
                        ("minor", e.minor.as_str()),
                        ("mountpoint", e.mount_point.as_str()),
                    ];
                    enc.sample(&MOUNT_INFO, &l, 1u64);
                }
            }
        }
        stats_family(enc, &PURGEABLE, |_| 0u64.into());
        enc.family(&READONLY);
        for (e, o) in rows() {
            // node_exporter reports a stuck mount as not read-only.
            let stuck = matches!(o, Outcome::Timeout | Outcome::Saturated);
            enc.sample(&READONLY, &labels(e, o), u64::from(e.readonly && !stuck));
        }
        stats_family(enc, &SIZE, |s| bytes(s, s.blocks));
    }
}

/// The labels of every family but `mount_info`, in node_exporter's order.
fn labels(e: &Entry, o: Outcome) -> [(&'static str, &str); 4] {
    [
        ("device", e.device.as_str()),
        ("device_error", e.error_label(o)),
        ("fstype", e.fs_type.as_str()),
        ("mountpoint", e.mount_point.as_str()),
    ]
}

/// Blocks × `f_bsize`, in floating point as node_exporter computes it.
fn bytes(s: &Stats, blocks: u64) -> Value {
    (blocks as f64 * s.bsize as f64).into()
}

impl Collector for FilesystemCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let fresh = self.changes.must_read();
        if fresh {
            self.read_table()?;
        }
        let mut news = self.stat_entries();
        if news.moved && !fresh {
            // A mount's flags moved without a mount event: a superblock
            // turned read-only or back (mount_changes.rs).
            self.read_table()?;
            news = self.stat_entries();
        }
        if news.unknown {
            self.changes.read_next_time();
        }
        self.emit(enc);
        Ok(())
    }
}

/// What statfs's flags said at one scrape.
#[derive(Default)]
struct FlagNews {
    /// A mount's flags differ from the last scrape's.
    moved: bool,
    /// A mount did not answer, so a change of its flags would go unseen.
    unknown: bool,
}

impl FilesystemCollector {
    /// Reads mountinfo, and rebuilds the entries when its text changed.
    fn read_table(&mut self) -> Result<(), CollectError> {
        // Until this read succeeds, the next scrape reads again.
        self.changes.read_next_time();
        let started = Epoch::now();
        // /proc/1 is hidden under hidepid=2 (ENOENT): node_exporter then
        // reads this process's mounts. Any other failure is an error.
        let (text, primary) = match self.primary.read()? {
            Read::Text(t) => (t, true),
            Read::Absent => match self.fallback.read()? {
                Read::Text(t) => (t, false),
                Read::Absent => {
                    return Err(CollectError::other(
                        self.primary.path(),
                        format!("absent, and so is {}", self.fallback.path().display()),
                    ));
                }
            },
        };
        if text != self.built_from {
            let mut mounts = recycle(std::mem::take(&mut self.mounts));
            let parsed = parse_into(text, &mut mounts);
            if parsed.is_ok() {
                entries_of(
                    &mounts,
                    &self.rootfs,
                    &self.mount_points,
                    &self.fs_types,
                    &mut self.entries,
                    &mut self.paths,
                );
                self.built_from.clear();
                self.built_from.push_str(text);
            }
            self.mounts = recycle(mounts);
            if let Err(e) = parsed {
                // Built again from the next good text, whatever it is.
                self.built_from.clear();
                self.entries.clear();
                let file = if primary {
                    &self.primary
                } else {
                    &self.fallback
                };
                return Err(file.parse_error(e));
            }
        }
        let ext4 = self
            .entries
            .iter()
            .any(|e| matches!(e.fs_type.as_str(), "ext2" | "ext3" | "ext4"));
        let table = if primary {
            Table::Pid1
        } else {
            Table::OwnProcess
        };
        self.changes.was_read(table, started, ext4);
        Ok(())
    }
}

/// What Go prints for an errno (`err.Error()` of a `syscall.Errno`), which
/// node_exporter puts in the `device_error` label: the C library's message
/// with its first letter in lower case ("no such file or directory"), except
/// where the message starts with an acronym ("RFS specific error").
pub fn errno_text(errno: i32) -> String {
    let full = std::io::Error::from_raw_os_error(errno).to_string();
    let msg = full
        .strip_suffix(&format!(" (os error {errno})"))
        .unwrap_or(&full);
    let mut chars = msg.chars();
    match (chars.next(), chars.next()) {
        (Some(first), Some(second))
            if first.is_ascii_uppercase() && !second.is_ascii_uppercase() =>
        {
            let mut out = String::with_capacity(msg.len());
            out.push(first.to_ascii_lowercase());
            out.push_str(&msg[1..]);
            out
        }
        _ => msg.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::collectors::FlagValue;
    use crate::collectors::test_support::{fixture, render};

    #[test]
    fn labels_paths_and_options() {
        assert_eq!(
            label_mount_point("/a\\040b\\011c\\134d\\012e"),
            "/a b\tc\\134d\\012e"
        );
        assert_eq!(unescape("/a\\040b\\011c\\134d\\012e"), b"/a b\tc\\d\ne");
        assert_eq!(unescape("/a\\04"), b"/a\\04");
        assert_eq!(unescape("/a\\400"), b"/a\\400");
        assert!(has_option("rw,ro", "ro"));
        assert!(has_option("ro=,x", "ro"));
        assert!(!has_option("rw,errors=remount-ro", "ro"));
        assert!(!has_option("ro,ro=1", "ro"), "the last one decides");
        assert!(has_option("rw,emergency_ro", "emergency_ro"));
        assert_eq!(clean(b"/host//a/./b/../c/"), b"/host/a/c");
        assert_eq!(clean(b"/../x"), b"/x");
        assert_eq!(clean(b"rel/../../x"), b"../x");
        assert_eq!(clean(b""), b".");
        let mut s = Settings::with_roots("/proc", "/sys");
        let root = Rootfs::new(&s);
        assert_eq!(root.strip("/boot"), "/boot");
        assert_eq!(root.path_of("/a\\134b"), b"/a\\b");
        s.rootfs = "/host".into();
        let host = Rootfs::new(&s);
        assert_eq!(host.strip("/host"), "/");
        assert_eq!(host.strip("/host/boot"), "/boot");
        assert_eq!(host.strip("/boot"), "/boot");
        // node_exporter strips the bare string prefix, slash or not.
        assert_eq!(host.strip("/hostile"), "ile");
        assert_eq!(host.path_of("/host/boot"), b"/host/boot");
        assert_eq!(host.path_of("/boot"), b"/host/boot");
        assert_eq!(host.path_of("/"), b"/host");
        assert_eq!(host.path_of("/host"), b"/host");
    }

    #[test]
    fn errno_text_is_gos() {
        assert_eq!(errno_text(libc::ENOENT), "no such file or directory");
        assert_eq!(errno_text(libc::EACCES), "permission denied");
        assert_eq!(errno_text(libc::EIO), "input/output error");
        assert_eq!(
            errno_text(libc::ENOTCONN),
            "transport endpoint is not connected"
        );
        assert_eq!(errno_text(libc::ESTALE), "stale file handle");
        assert_eq!(errno_text(libc::EDOTDOT), "RFS specific error");
    }

    /// A procfs root holding `1/mountinfo` (and `self/mountinfo` when
    /// given), and a rootfs with the named directories; removed on drop.
    struct Trees {
        dir: tempfile::TempDir,
    }

    impl Trees {
        fn new(one: Option<&str>, own: Option<&str>, dirs: &[&str]) -> Trees {
            let dir = tempfile::tempdir().unwrap();
            for (rel, text) in [("proc/1/mountinfo", one), ("proc/self/mountinfo", own)] {
                if let Some(t) = text {
                    let p = dir.path().join(rel);
                    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                    std::fs::write(p, t).unwrap();
                }
            }
            for d in dirs {
                std::fs::create_dir_all(dir.path().join("root").join(d)).unwrap();
            }
            Trees { dir }
        }

        fn settings(&self) -> Settings {
            let mut s = Settings::with_roots(self.dir.path().join("proc"), "/nonexistent");
            s.rootfs = self.dir.path().join("root");
            s
        }
    }

    /// The samples of `family`, as `{labels} value` strings.
    fn samples(out: &str, family: &str) -> Vec<String> {
        out.lines()
            .filter_map(|l| l.strip_prefix(family)?.strip_prefix('{'))
            .map(|l| format!("{{{l}"))
            .collect()
    }

    const TABLE: &str = "\
1 0 8:1 / / rw,relatime - ext4 /dev/sda1 rw
2 1 0:5 / /proc rw - proc proc rw
3 1 0:6 / /dev/shm rw - tmpfs tmpfs rw
4 1 8:2 / /data rw - xfs /dev/sda2 rw
5 1 8:2 / /data rw - xfs /dev/sda2 ro
6 1 8:1 /srv /with\\040space ro,relatime - ext4 /dev/sda1 rw
7 1 0:7 / /gone rw - tmpfs tmpfs rw
8 1 0:8 / /cg rw - cgroup2 cgroup2 rw
9 1 0:9 / /ro-sb rw - ext4 /dev/sdb rw,emergency_ro
";

    #[test]
    fn collects_labels_filters_duplicates_and_errors() {
        let t = Trees::new(Some(TABLE), None, &["data", "with space", "ro-sb"]);
        let mut c = build(&t.settings());
        let out = render(c.as_mut()).unwrap();
        let errors = samples(&out, "node_filesystem_device_error");
        assert_eq!(
            errors,
            [
                "{device=\"/dev/sda1\",device_error=\"\",fstype=\"ext4\",mountpoint=\"/\"} 0",
                "{device=\"/dev/sda2\",device_error=\"\",fstype=\"xfs\",mountpoint=\"/data\"} 0",
                "{device=\"/dev/sda1\",device_error=\"\",fstype=\"ext4\",mountpoint=\"/with space\"} 0",
                "{device=\"tmpfs\",device_error=\"no such file or directory\",fstype=\"tmpfs\",mountpoint=\"/gone\"} 1",
                "{device=\"/dev/sdb\",device_error=\"\",fstype=\"ext4\",mountpoint=\"/ro-sb\"} 0",
            ],
            "/proc and /dev/shm excluded by mount point, cgroup2 by type, the second /data is a duplicate:\n{out}"
        );
        let ro: Vec<String> = samples(&out, "node_filesystem_readonly")
            .iter()
            .map(|s| s.rsplit(' ').next().unwrap().to_string())
            .collect();
        assert_eq!(ro, ["0", "0", "1", "0", "1"]);
        // statfs of the rootfs directories: the temporary directory's
        // filesystem, whatever it is.
        let want = crate::kernel::statfs_pool::statfs(
            &CString::new(t.dir.path().join("root").as_os_str().as_bytes()).unwrap(),
        )
        .unwrap();
        let size = samples(&out, "node_filesystem_size_bytes");
        assert_eq!(size.len(), 4, "no size for the failed mount:\n{out}");
        let expected =
            crate::scrape::exposition::Value::from(want.blocks as f64 * want.bsize as f64);
        let mut buf = Vec::new();
        if let crate::scrape::exposition::Value::F64(f) = expected {
            crate::scrape::exposition::write_float(&mut buf, f);
        }
        let want_size = String::from_utf8(buf).unwrap();
        assert!(
            size[1].ends_with(&format!(" {want_size}")),
            "{size:?} vs {want_size}"
        );
        assert_eq!(
            samples(&out, "node_filesystem_mount_info")[1],
            "{device=\"/dev/sda2\",major=\"8\",minor=\"2\",mountpoint=\"/data\"} 1"
        );
        assert_eq!(samples(&out, "node_filesystem_purgeable_bytes").len(), 4);
        // Families in node_exporter's sorted order, each once.
        let families: Vec<&str> = out
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| l.split(' ').next().unwrap())
            .collect();
        let mut sorted = families.clone();
        sorted.sort();
        assert_eq!(families, sorted);
        assert_eq!(families.len(), 9);
    }

    #[test]
    fn rootfs_prefix_is_stripped_from_labels() {
        // A container without the host's PID namespace sees the host's
        // mounts under the rootfs path in its own table.
        let t = Trees::new(None, None, &["boot"]);
        let root = t.dir.path().join("root");
        let table = format!(
            "1 0 8:1 / {r} rw - ext4 /dev/sda1 rw\n2 1 8:2 / {r}/boot rw - ext4 /dev/sda2 rw\n3 1 8:3 / /boot rw - ext4 /dev/sda3 rw\n",
            r = root.display()
        );
        std::fs::create_dir_all(t.dir.path().join("proc/1")).unwrap();
        std::fs::write(t.dir.path().join("proc/1/mountinfo"), table).unwrap();
        let out = render(build(&t.settings()).as_mut()).unwrap();
        let errors = samples(&out, "node_filesystem_device_error");
        assert_eq!(errors.len(), 3, "{out}");
        assert!(errors[0].contains("mountpoint=\"/\"} 0"), "{errors:?}");
        assert!(errors[1].contains("mountpoint=\"/boot\"} 0"), "{errors:?}");
        // The host's own view (hostPID): /boot is stat'ed as ROOTFS/boot.
        assert!(errors[2].contains("mountpoint=\"/boot\"} 0"), "{errors:?}");
    }

    #[test]
    fn falls_back_to_self_when_pid_1_is_hidden() {
        let own = "1 0 8:1 / / rw - ext4 /dev/own rw\n";
        let t = Trees::new(None, Some(own), &[]);
        let out = render(build(&t.settings()).as_mut()).unwrap();
        assert!(out.contains("device=\"/dev/own\""), "{out}");
        let t = Trees::new(Some("1 0 8:1 / / rw - ext4 /dev/init rw\n"), Some(own), &[]);
        let out = render(build(&t.settings()).as_mut()).unwrap();
        assert!(out.contains("device=\"/dev/init\"") && !out.contains("/dev/own"));
        // Neither: an error naming the file, as node_exporter's.
        let t = Trees::new(None, None, &[]);
        let e = render(build(&t.settings()).as_mut()).unwrap_err();
        assert!(e.file.ends_with("1/mountinfo"), "{e}");
        // A bad fallback names the fallback.
        let t = Trees::new(None, Some("garbage\n"), &[]);
        let e = render(build(&t.settings()).as_mut()).unwrap_err();
        assert!(
            e.file.ends_with("self/mountinfo") && e.line == Some(1),
            "{e}"
        );
    }

    #[test]
    fn include_flags_replace_the_excludes() {
        let t = Trees::new(Some(TABLE), None, &["data"]);
        let mut s = t.settings();
        let re = |r: &str| Some(FlagValue::Regex(Regex::new(r).unwrap()));
        s.set(MOUNT_POINTS_INCLUDE, re("^/(proc|data)$"));
        s.set(FS_TYPES_INCLUDE, re("^(proc|xfs)$"));
        let out = render(build(&s).as_mut()).unwrap();
        let errors = samples(&out, "node_filesystem_device_error");
        assert_eq!(errors.len(), 2, "{out}");
        assert!(errors[0].contains("mountpoint=\"/proc\""));
        assert!(errors[1].contains("mountpoint=\"/data\""));
    }

    #[test]
    fn table_changes_are_seen_and_a_bad_table_fails() {
        let t = Trees::new(Some(TABLE), None, &["data"]);
        let mut c = build(&t.settings());
        let first = render(c.as_mut()).unwrap();
        assert!(first.contains("mountpoint=\"/data\""));
        let path = t.dir.path().join("proc/1/mountinfo");
        std::fs::write(&path, "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n").unwrap();
        let second = render(c.as_mut()).unwrap();
        assert!(!second.contains("/data"), "{second}");
        std::fs::write(&path, "1 0 8:1 / / rw - ext4\n").unwrap();
        let e = render(c.as_mut()).unwrap_err();
        assert_eq!((e.file.as_path(), e.line), (path.as_path(), Some(1)));
        std::fs::write(&path, TABLE).unwrap();
        // The same series again (free space may have moved meanwhile).
        let names = |out: &str| -> Vec<String> {
            out.lines()
                .map(|l| l.rsplit_once(' ').map_or(l, |(s, _)| s).to_string())
                .collect()
        };
        let again = render(c.as_mut()).unwrap();
        assert_eq!(names(&again), names(&first));
        assert_eq!(
            samples(&again, "node_filesystem_device_error"),
            samples(&first, "node_filesystem_device_error")
        );
    }

    #[test]
    fn captured_fixture_with_an_absent_rootfs() {
        // What the golden test sees: every mount fails with ENOENT.
        let mut s = Settings::with_roots(fixture("proc"), "/nonexistent");
        s.rootfs = Path::new("/nonexistent/usescope-rootfs").into();
        let out = render(build(&s).as_mut()).unwrap();
        let errors = samples(&out, "node_filesystem_device_error");
        assert!(!errors.is_empty());
        assert!(
            errors
                .iter()
                .all(|l| l.contains("no such file or directory") && l.ends_with(" 1"))
        );
        assert!(!out.contains("node_filesystem_size_bytes"));
        assert!(!out.contains("mountpoint=\"/proc\""), "excluded by default");
        assert!(!out.contains("fstype=\"nsfs\""), "excluded by default");
    }
}
