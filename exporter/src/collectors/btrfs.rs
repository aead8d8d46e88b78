//! /sys/fs/btrfs/UUID and the btrfs device ioctls → `node_btrfs_*`,
//! node_exporter's btrfs collector (collector/btrfs_linux.go, sysfs read
//! there by procfs's `btrfs.FS.Stats`).
//!
//! From sysfs, per filesystem: its label, the global reserve, commit
//! statistics, and per block group type (data, metadata, system) the
//! reserved bytes and, per layout (`single`, `dup`, `raid1`, ...), the
//! used and allocated bytes and the allocation ratio.
//!
//! Per device, as node_exporter does: where a mount point of the
//! filesystem (from PID 1's mountinfo, under `--path.rootfs`) answers the
//! btrfs ioctls (`btrfs_ioctl.rs`), its size, unused bytes and error
//! counters (`node_btrfs_device_errors_total{type}`, the counters of
//! `btrfs device stats`: a failing disk shows here first), labelled with
//! `device` and `btrfs_dev_uuid`; otherwise its size from sysfs, labelled
//! with `device` only.
//!
//! With btrfs built in but nothing mounted, a scrape lists one directory
//! of one entry (`features`); without btrfs, nothing (the absence is
//! remembered until a uevent or a mount: absence.rs).
//! mountinfo is read only when a btrfs filesystem is there. A filesystem
//! unmounted while it is read (ENODEV from its files, or its directory
//! gone) is left out of that scrape.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::collectors::sysfs::{DeviceError, DeviceFile};
use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::btrfs_ioctl::{self, Device as IoctlDevice};
use crate::kernel::error::{CollectError, ParseError, excerpt};
use crate::kernel::mountinfo::{self, Mount};
use crate::kernel::parse::{fields, lines, parse_fresh, u64_field, u64_sysctl_into};
use crate::kernel::source::{DirListing, SourceFile};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const SPEC: Spec = Spec {
    name: "btrfs",
    default_enabled: true,
    help: "Btrfs allocation, commits and per-device size and errors from /sys/fs/btrfs and ioctls",
    flags: &[],
    build,
    sources: &[
        Source::sys(
            "fs/btrfs/8f0c0009-c7d7-48f3-830e-996233393f1f/label",
            "btrfs_text",
        ),
        Source::sys(
            "fs/btrfs/8f0c0009-c7d7-48f3-830e-996233393f1f/metadata_uuid",
            "btrfs_text",
        ),
        Source::sys(
            "fs/btrfs/8f0c0009-c7d7-48f3-830e-996233393f1f/commit_stats",
            "btrfs_commit_stats",
        ),
        Source::sys(
            "fs/btrfs/8f0c0009-c7d7-48f3-830e-996233393f1f/allocation/global_rsv_size",
            "btrfs_value",
        ),
        Source::sys(
            "fs/btrfs/8f0c0009-c7d7-48f3-830e-996233393f1f/allocation/data/bytes_reserved",
            "btrfs_value",
        ),
        Source::sys(
            "fs/btrfs/8f0c0009-c7d7-48f3-830e-996233393f1f/allocation/data/single/total_bytes",
            "btrfs_value",
        ),
        Source::sys(
            "fs/btrfs/8f0c0009-c7d7-48f3-830e-996233393f1f/allocation/data/single/used_bytes",
            "btrfs_value",
        ),
        Source::sys(
            "fs/btrfs/8f0c0009-c7d7-48f3-830e-996233393f1f/devices/loop0/size",
            "btrfs_value",
        ),
    ],
    parsers: &[
        Parser::text("btrfs_text", |t| parse_fresh(t, parse_text_into).map(drop)),
        Parser::numeric("btrfs_value", |t| parse_fresh(t, u64_sysctl_into).map(drop)),
        Parser::numeric("btrfs_commit_stats", |t| {
            parse_fresh(t, parse_commit_stats_into).map(drop)
        }),
    ],
};

const INFO: Desc = Desc::gauge("node_btrfs_info", "Filesystem information");
const GLOBAL_RSV: Desc = Desc::gauge(
    "node_btrfs_global_rsv_size_bytes",
    "Size of global reserve.",
);
const COMMITS: Desc = Desc::counter(
    "node_btrfs_commits_total",
    "The total number of commits that have occurred.",
);
const LAST_COMMIT: Desc = Desc::gauge(
    "node_btrfs_last_commit_seconds",
    "Duration of the most recent commit, in seconds.",
);
const MAX_COMMIT: Desc = Desc::gauge(
    "node_btrfs_max_commit_seconds",
    "Duration of the slowest commit, in seconds.",
);
const COMMIT_SECONDS: Desc = Desc::counter(
    "node_btrfs_commit_seconds_total",
    "Sum of the duration of all commits, in seconds.",
);
const RESERVED: Desc = Desc::gauge(
    "node_btrfs_reserved_bytes",
    "Amount of space reserved for a data type",
);
const USED: Desc = Desc::gauge(
    "node_btrfs_used_bytes",
    "Amount of used space by a layout/data type",
);
const SIZE: Desc = Desc::gauge(
    "node_btrfs_size_bytes",
    "Amount of space allocated for a layout/data type",
);
const RATIO: Desc = Desc::gauge(
    "node_btrfs_allocation_ratio",
    "Data allocation ratio for a layout/data type",
);
const DEVICE_SIZE: Desc = Desc::gauge(
    "node_btrfs_device_size_bytes",
    "Size of a device that is part of the filesystem.",
);
const DEVICE_UNUSED: Desc = Desc::gauge(
    "node_btrfs_device_unused_bytes",
    "Unused bytes unused on a device that is part of the filesystem.",
);
const DEVICE_ERRORS: Desc = Desc::counter(
    "node_btrfs_device_errors_total",
    "Errors reported for the device",
);
const ERROR_TYPES: [&str; 5] = ["write", "read", "flush", "corruption", "generation"];
const GROUPS: [&str; 3] = ["data", "metadata", "system"];

/// A one-line text attribute (label, metadata_uuid), trimmed as procfs
/// trims it. The label may be empty.
pub fn parse_text_into(s: &str, out: &mut String) -> Result<(), ParseError> {
    let mut it = lines(s);
    let first = it.next().unwrap_or("");
    if it.next().is_some() {
        return Err(ParseError::new(2, "expected a single line"));
    }
    out.clear();
    out.push_str(first.trim());
    Ok(())
}

/// commit_stats: `commits N`, `cur_commit_ms N`, `last_commit_ms N`,
/// `max_commit_ms N`, `total_commit_ms N`, one pair per line (other keys
/// are read and ignored, as procfs does).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CommitStats {
    pub commits: u64,
    pub last_ms: u64,
    pub max_ms: u64,
    pub total_ms: u64,
}

pub fn parse_commit_stats_into(s: &str, out: &mut CommitStats) -> Result<(), ParseError> {
    *out = CommitStats::default();
    for (i, line) in lines(s).enumerate() {
        let n = i + 1;
        let mut f = fields(line);
        let (Some(key), Some(value), None) = (f.next(), f.next(), f.next()) else {
            return Err(ParseError::new(
                n,
                format!("expected KEY VALUE, found {}", excerpt(line)),
            ));
        };
        let v = u64_field(value, n, key)?;
        match key {
            "commits" => out.commits = v,
            "last_commit_ms" => out.last_ms = v,
            "max_commit_ms" => out.max_ms = v,
            "total_commit_ms" => out.total_ms = v,
            _ => {}
        }
    }
    Ok(())
}

/// procfs's allocation ratio of a layout: how many bytes of disk one byte
/// of data takes (0 for a layout it does not know).
fn ratio(layout: &str, devices: usize) -> f64 {
    let n = devices as f64;
    match layout {
        "single" | "raid0" => 1.0,
        "dup" | "raid1" | "raid10" => 2.0,
        "raid1c3" => 3.0,
        "raid1c4" => 4.0,
        "raid5" => n / (n - 1.0),
        "raid6" => n / (n - 2.0),
        _ => 0.0,
    }
}

/// A number attribute read at every scrape; absent is 0 (as procfs).
struct Value {
    file: SourceFile,
    value: u64,
}

impl Value {
    fn new(dir: &Path, rel: &str) -> Value {
        Value {
            file: SourceFile::attribute(dir, rel),
            value: 0,
        }
    }

    fn read(&mut self) -> Result<u64, DeviceError> {
        let v = &mut self.value;
        if self.file.device_parse(|t| u64_sysctl_into(t, v))?.is_none() {
            *v = 0;
        }
        Ok(*v)
    }
}

struct Layout {
    name: String,
    total: Value,
    used: Value,
}

struct Group {
    reserved: Value,
    listing: DirListing,
    /// Sorted by name; this scrape's are the first `len`.
    layouts: Vec<Layout>,
}

struct Named {
    name: String,
    size: Value,
}

/// One filesystem's sysfs directory.
struct Filesystem {
    dir_name: String,
    dir: PathBuf,
    label_file: SourceFile,
    uuid_file: SourceFile,
    label: String,
    uuid: String,
    global_rsv: Value,
    commit_file: SourceFile,
    commits: CommitStats,
    groups: [Group; 3],
    devices_listing: DirListing,
    devices: Vec<Named>,
    /// The ioctl view of the devices, when a mount point answered.
    ioctl: Option<Vec<IoctlDevice>>,
    present: bool,
}

impl Filesystem {
    fn new(root: &Path, dir_name: &str) -> Filesystem {
        let dir = root.join(dir_name);
        let group = |g: &str| Group {
            reserved: Value::new(&dir, &format!("allocation/{g}/bytes_reserved")),
            listing: DirListing::default(),
            layouts: Vec::new(),
        };
        Filesystem {
            dir_name: dir_name.to_string(),
            label_file: SourceFile::attribute(&dir, "label"),
            uuid_file: SourceFile::attribute(&dir, "metadata_uuid"),
            label: String::new(),
            uuid: String::new(),
            global_rsv: Value::new(&dir, "allocation/global_rsv_size"),
            commit_file: SourceFile::new(&dir, "commit_stats"),
            commits: CommitStats::default(),
            groups: [group("data"), group("metadata"), group("system")],
            devices_listing: DirListing::default(),
            devices: Vec::new(),
            ioctl: None,
            present: false,
            dir,
        }
    }

    fn read(&mut self) -> Result<(), DeviceError> {
        let label = &mut self.label;
        if self
            .label_file
            .device_parse(|t| parse_text_into(t, label))?
            .is_none()
        {
            label.clear();
        }
        let uuid = &mut self.uuid;
        if self
            .uuid_file
            .device_parse(|t| parse_text_into(t, uuid))?
            .is_none()
            || uuid.is_empty()
        {
            uuid.clear();
            uuid.push_str(&self.dir_name);
        }
        self.global_rsv.read()?;
        let commits = &mut self.commits;
        if self
            .commit_file
            .device_parse(|t| parse_commit_stats_into(t, commits))?
            .is_none()
        {
            *commits = CommitStats::default(); // before Linux 6.0
        }
        for (g, name) in self.groups.iter_mut().zip(GROUPS) {
            g.reserved.read()?;
            let dir = self.dir.join("allocation").join(name);
            g.listing.read(&dir)?;
            let mut keep = std::mem::take(&mut g.layouts);
            for e in g.listing.entries().iter().filter(|e| !e.is_file) {
                let layout = match keep.iter().position(|l| l.name == e.name) {
                    Some(i) => keep.swap_remove(i),
                    None => Layout {
                        name: e.name.clone(),
                        total: Value::new(&dir, &format!("{}/total_bytes", e.name)),
                        used: Value::new(&dir, &format!("{}/used_bytes", e.name)),
                    },
                };
                g.layouts.push(layout);
            }
            for l in &mut g.layouts {
                l.total.read()?;
                l.used.read()?;
            }
        }
        let devices_dir = self.dir.join("devices");
        self.devices_listing.read(&devices_dir)?;
        let mut keep = std::mem::take(&mut self.devices);
        for e in self.devices_listing.entries() {
            let d = match keep.iter().position(|d| d.name == e.name) {
                Some(i) => keep.swap_remove(i),
                None => Named {
                    name: e.name.clone(),
                    size: Value::new(&devices_dir, &format!("{}/size", e.name)),
                },
            };
            self.devices.push(d);
        }
        for d in &mut self.devices {
            d.size.read()?;
        }
        Ok(())
    }
}

pub struct BtrfsCollector {
    root: PathBuf,
    rootfs: PathBuf,
    listing: DirListing,
    /// Sorted by directory name.
    filesystems: Vec<Filesystem>,
    mountinfo: SourceFile,
    mountinfo_self: SourceFile,
    mounts: Vec<Mount<'static>>,
    /// Scratch for the ioctl reads.
    devices: Vec<IoctlDevice>,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(BtrfsCollector {
        root: s.sysfs.join("fs/btrfs"),
        rootfs: s.rootfs.clone(),
        listing: DirListing::default(),
        filesystems: Vec::new(),
        mountinfo: SourceFile::new(&s.procfs, "1/mountinfo"),
        mountinfo_self: SourceFile::new(&s.procfs, "self/mountinfo"),
        mounts: Vec::new(),
        devices: Vec::new(),
    })
}

impl BtrfsCollector {
    /// For every filesystem, the ioctl view of its devices through the
    /// first of its mount points that answers. A mount point that cannot
    /// be opened or does not answer is skipped (node_exporter logs it at
    /// debug level); the sysfs sizes are reported instead.
    fn read_ioctls(&mut self) {
        for fs in &mut self.filesystems {
            fs.ioctl = None;
        }
        let (filesystems, rootfs, devices) =
            (&mut self.filesystems, &self.rootfs, &mut self.devices);
        let store = &mut self.mounts;
        let mut each = |text: &str| -> Result<(), ParseError> {
            let mut mounts: Vec<Mount<'_>> = crate::kernel::parse::recycle(std::mem::take(store));
            mountinfo::parse_into(text, &mut mounts)?;
            // A filesystem mounted at several places (subvolumes, bind
            // mounts) is asked once.
            let mut done: Vec<&str> = Vec::new();
            for m in mounts.iter().filter(|m| m.fs_type == "btrfs") {
                if done.contains(&m.source) {
                    continue;
                }
                let raw = mountinfo::unescape(m.mount_point);
                let relative = Path::new(std::ffi::OsStr::from_bytes(&raw));
                let point = rootfs.join(relative.strip_prefix("/").unwrap_or(relative));
                let Ok(fsid) = btrfs_ioctl::read(&point, devices) else {
                    continue;
                };
                done.push(m.source);
                if let Some(fs) = filesystems
                    .iter_mut()
                    .find(|f| f.uuid == fsid && f.ioctl.is_none())
                {
                    fs.ioctl = Some(devices.clone());
                }
            }
            drop(done);
            *store = crate::kernel::parse::recycle(mounts);
            Ok(())
        };
        // mountinfo is the filesystem collector's source; a bad one fails
        // that collector, and here only costs the ioctl view (node_exporter
        // falls back the same way).
        let read = match self.mountinfo.parse_with(&mut each) {
            Ok(None) => self.mountinfo_self.parse_with(&mut each),
            other => other,
        };
        if let Err(e) = read {
            tracing::debug!(error = %e, "btrfs: no device ioctls this scrape");
            for fs in &mut self.filesystems {
                fs.ioctl = None;
            }
        }
    }
}

impl Collector for BtrfsCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        if !self.listing.read(&self.root)? {
            self.filesystems.clear();
            return Ok(()); // no btrfs in this kernel
        }
        for f in &mut self.filesystems {
            f.present = false;
        }
        // procfs's glob `fs/btrfs/*-*`: the filesystems' uuids, not `features`.
        for e in self
            .listing
            .entries()
            .iter()
            .filter(|e| e.name.contains('-'))
        {
            let i = match self
                .filesystems
                .binary_search_by(|f| f.dir_name.cmp(&e.name))
            {
                Ok(i) => i,
                Err(i) => {
                    self.filesystems
                        .insert(i, Filesystem::new(&self.root, &e.name));
                    i
                }
            };
            let fs = &mut self.filesystems[i];
            // One unmounted while it is read is left out.
            match fs.read() {
                Ok(()) => fs.present = true,
                Err(e) => e.settle(&fs.dir)?,
            }
        }
        self.filesystems.retain(|f| f.present);
        if self.filesystems.is_empty() {
            return Ok(());
        }
        self.read_ioctls();

        let all = &self.filesystems;
        enc.family(&INFO);
        for f in all {
            enc.sample(&INFO, &[("uuid", &f.uuid), ("label", &f.label)], 1u64);
        }
        enc.family(&GLOBAL_RSV);
        for f in all {
            enc.sample(&GLOBAL_RSV, &[("uuid", &f.uuid)], f.global_rsv.value);
        }
        enc.family(&COMMITS);
        for f in all {
            enc.sample(&COMMITS, &[("uuid", &f.uuid)], f.commits.commits);
        }
        for (desc, ms) in [
            (
                &LAST_COMMIT,
                (|c: &CommitStats| c.last_ms) as fn(&CommitStats) -> u64,
            ),
            (&MAX_COMMIT, |c| c.max_ms),
            (&COMMIT_SECONDS, |c| c.total_ms),
        ] {
            enc.family(desc);
            for f in all {
                enc.sample(desc, &[("uuid", &f.uuid)], ms(&f.commits) as f64 / 1000.0);
            }
        }
        enc.family(&RESERVED);
        for f in all {
            for (g, name) in f.groups.iter().zip(GROUPS) {
                enc.sample(
                    &RESERVED,
                    &[("uuid", &f.uuid), ("block_group_type", name)],
                    g.reserved.value,
                );
            }
        }
        for desc in [&USED, &SIZE, &RATIO] {
            enc.family(desc);
            for f in all {
                for (g, name) in f.groups.iter().zip(GROUPS) {
                    for l in &g.layouts {
                        let labels = [
                            ("uuid", f.uuid.as_str()),
                            ("block_group_type", name),
                            ("mode", l.name.as_str()),
                        ];
                        match desc.name {
                            "node_btrfs_used_bytes" => enc.sample(desc, &labels, l.used.value),
                            "node_btrfs_size_bytes" => enc.sample(desc, &labels, l.total.value),
                            _ => enc.sample(desc, &labels, ratio(&l.name, f.devices.len())),
                        }
                    }
                }
            }
        }
        enc.family(&DEVICE_SIZE);
        for f in all {
            match &f.ioctl {
                Some(devs) => {
                    for d in devs {
                        let labels = [
                            ("uuid", f.uuid.as_str()),
                            ("device", &d.name),
                            ("btrfs_dev_uuid", &d.uuid),
                        ];
                        enc.sample(&DEVICE_SIZE, &labels, d.total_bytes);
                    }
                }
                None => {
                    for d in &f.devices {
                        let labels = [("uuid", f.uuid.as_str()), ("device", &d.name)];
                        // sysfs counts 512-byte sectors.
                        enc.sample(&DEVICE_SIZE, &labels, d.size.value.saturating_mul(512));
                    }
                }
            }
        }
        let with_ioctl = || all.iter().filter_map(|f| Some((f, f.ioctl.as_ref()?)));
        if with_ioctl().next().is_some() {
            enc.family(&DEVICE_UNUSED);
            for (f, devs) in with_ioctl() {
                for d in devs {
                    let labels = [
                        ("uuid", f.uuid.as_str()),
                        ("device", &d.name),
                        ("btrfs_dev_uuid", &d.uuid),
                    ];
                    enc.sample(
                        &DEVICE_UNUSED,
                        &labels,
                        d.total_bytes.saturating_sub(d.bytes_used),
                    );
                }
            }
            enc.family(&DEVICE_ERRORS);
            for (f, devs) in with_ioctl() {
                for d in devs {
                    for (t, v) in ERROR_TYPES.iter().zip(d.errors) {
                        let labels = [
                            ("uuid", f.uuid.as_str()),
                            ("type", t),
                            ("device", &d.name),
                            ("btrfs_dev_uuid", &d.uuid),
                        ];
                        enc.sample(&DEVICE_ERRORS, &labels, v);
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::{fixture, render};

    #[test]
    fn commit_stats() {
        let c = parse_fresh(
            "commits 12\ncur_commit_ms 0\nlast_commit_ms 5\nmax_commit_ms 31\ntotal_commit_ms 140\n",
            parse_commit_stats_into,
        )
        .unwrap();
        assert_eq!(
            c,
            CommitStats {
                commits: 12,
                last_ms: 5,
                max_ms: 31,
                total_ms: 140
            }
        );
        assert_eq!(
            parse_fresh("commits\n", parse_commit_stats_into)
                .unwrap_err()
                .line,
            1
        );
        assert!(parse_fresh("commits 1 2\n", parse_commit_stats_into).is_err());
        assert!(parse_fresh("commits x\n", parse_commit_stats_into).is_err());
    }

    #[test]
    fn text_and_ratio() {
        assert_eq!(
            parse_fresh("my label \n", parse_text_into).unwrap(),
            "my label"
        );
        assert_eq!(parse_fresh("\n", parse_text_into).unwrap(), "");
        assert!(parse_fresh("a\nb\n", parse_text_into).is_err());
        assert_eq!(ratio("raid5", 3), 1.5);
        assert_eq!(ratio("raid6", 4), 2.0);
        assert_eq!(ratio("raid1c3", 3), 3.0);
        assert_eq!(ratio("weird", 3), 0.0);
    }

    #[test]
    fn collector_on_fixture() {
        let mut s = Settings::with_roots(fixture("proc"), fixture("sys"));
        s.rootfs = PathBuf::from("/nonexistent-usescope-rootfs");
        let out = render(build(&s).as_mut()).unwrap();
        // The filesystem captured from a real btrfs.
        let uuid = "8f0c0009-c7d7-48f3-830e-996233393f1f";
        for line in [
            format!("node_btrfs_info{{uuid=\"{uuid}\",label=\"mylabel\"}} 1\n"),
            format!(
                "node_btrfs_allocation_ratio{{uuid=\"{uuid}\",block_group_type=\"metadata\",mode=\"dup\"}} 2\n"
            ),
            format!("node_btrfs_device_size_bytes{{uuid=\"{uuid}\",device=\"loop0\"}} 419430400\n"),
            format!("node_btrfs_last_commit_seconds{{uuid=\"{uuid}\"}} 0.005\n"),
        ] {
            assert!(out.contains(&line), "{line} in\n{out}");
        }
        // The raid1 filesystem over two devices, without commit_stats.
        assert!(
            out.contains("block_group_type=\"data\",mode=\"raid1\"} 2\n"),
            "{out}"
        );
        assert!(
            !out.contains("node_btrfs_device_errors_total"),
            "no mount answers here"
        );
        assert_eq!(render(build(&s).as_mut()).unwrap(), out);
        let absent = Settings::with_roots("/nonexistent", "/nonexistent-usescope");
        assert_eq!(render(build(&absent).as_mut()).unwrap(), "");
    }
}
