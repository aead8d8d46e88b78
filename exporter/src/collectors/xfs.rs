//! /sys/fs/xfs/DEVICE/stats/stats → `node_xfs_*{device}`, the runtime
//! statistics of each mounted XFS filesystem, node_exporter's xfs collector
//! (collector/xfs_linux.go, parsed there by procfs's `xfs.ParseStats`).
//!
//! Every mounted XFS filesystem has a directory under /sys/fs/xfs named
//! after its block device (`sda1`, `dm-0`, `loop0`); /sys/fs/xfs/stats is
//! the sum over all of them, which node_exporter does not read and neither
//! does this. With XFS built in but nothing mounted, a scrape lists a
//! directory of one entry; without XFS, nothing (the absence is
//! remembered until a uevent or a mount: absence.rs).
//!
//! The file's lines are a key and the counters of that group
//! (`extent_alloc 181 4302 1 1`); the kernel sums 32-bit per-CPU counters
//! into a 32-bit value, so a value past u32::MAX cannot come from it and,
//! as in node_exporter, fails the collector. node_exporter exports eight
//! of the groups; the others are checked and left out.

use std::path::{Path, PathBuf};

use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError, excerpt};
use crate::kernel::parse::{fields, lines, parse_fresh, u64_field};
use crate::kernel::source::{Dir, SourceFile};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const SPEC: Spec = Spec {
    name: "xfs",
    default_enabled: true,
    help: "XFS runtime statistics of each mounted filesystem from /sys/fs/xfs",
    flags: &[],
    build,
    sources: &[Source::sys("fs/xfs/loop0/stats/stats", "xfs")],
    parsers: &[Parser::numeric("xfs", |t| {
        parse_fresh(t, parse_into).map(drop)
    })],
};

/// The groups node_exporter exports, with the number of counters the
/// kernel writes for each (`vnodes` has 8 since Linux 3.x, 7 before).
const GROUPS: [(&str, usize); 8] = [
    ("extent_alloc", 4),
    ("abt", 4),
    ("blk_map", 7),
    ("bmbt", 4),
    ("dir", 4),
    ("ig", 7),
    ("rw", 2),
    ("vnodes", 8),
];
const VNODES: usize = 7;

/// Groups whose counters are 64-bit (byte counts): checked as u64.
const WIDE_GROUPS: [&str; 2] = ["xpc", "defer_relog"];

/// One exported family: its group in [`GROUPS`], the counter's position in
/// the line, and node_exporter's name and HELP.
struct Metric {
    group: usize,
    index: usize,
    desc: Desc,
}

const fn m(group: usize, index: usize, name: &'static str, help: &'static str) -> Metric {
    Metric {
        group,
        index,
        desc: Desc::counter(name, help),
    }
}

/// node_exporter's families, in its order.
const METRICS: [Metric; 39] = [
    m(
        0,
        0,
        "node_xfs_extent_allocation_extents_allocated_total",
        "Number of extents allocated for a filesystem.",
    ),
    m(
        0,
        1,
        "node_xfs_extent_allocation_blocks_allocated_total",
        "Number of blocks allocated for a filesystem.",
    ),
    m(
        0,
        2,
        "node_xfs_extent_allocation_extents_freed_total",
        "Number of extents freed for a filesystem.",
    ),
    m(
        0,
        3,
        "node_xfs_extent_allocation_blocks_freed_total",
        "Number of blocks freed for a filesystem.",
    ),
    m(
        1,
        0,
        "node_xfs_allocation_btree_lookups_total",
        "Number of allocation B-tree lookups for a filesystem.",
    ),
    m(
        1,
        1,
        "node_xfs_allocation_btree_compares_total",
        "Number of allocation B-tree compares for a filesystem.",
    ),
    m(
        1,
        2,
        "node_xfs_allocation_btree_records_inserted_total",
        "Number of allocation B-tree records inserted for a filesystem.",
    ),
    m(
        1,
        3,
        "node_xfs_allocation_btree_records_deleted_total",
        "Number of allocation B-tree records deleted for a filesystem.",
    ),
    m(
        2,
        0,
        "node_xfs_block_mapping_reads_total",
        "Number of block map for read operations for a filesystem.",
    ),
    m(
        2,
        1,
        "node_xfs_block_mapping_writes_total",
        "Number of block map for write operations for a filesystem.",
    ),
    m(
        2,
        2,
        "node_xfs_block_mapping_unmaps_total",
        "Number of block unmaps (deletes) for a filesystem.",
    ),
    m(
        2,
        3,
        "node_xfs_block_mapping_extent_list_insertions_total",
        "Number of extent list insertions for a filesystem.",
    ),
    m(
        2,
        4,
        "node_xfs_block_mapping_extent_list_deletions_total",
        "Number of extent list deletions for a filesystem.",
    ),
    m(
        2,
        5,
        "node_xfs_block_mapping_extent_list_lookups_total",
        "Number of extent list lookups for a filesystem.",
    ),
    m(
        2,
        6,
        "node_xfs_block_mapping_extent_list_compares_total",
        "Number of extent list compares for a filesystem.",
    ),
    m(
        3,
        0,
        "node_xfs_block_map_btree_lookups_total",
        "Number of block map B-tree lookups for a filesystem.",
    ),
    m(
        3,
        1,
        "node_xfs_block_map_btree_compares_total",
        "Number of block map B-tree compares for a filesystem.",
    ),
    m(
        3,
        2,
        "node_xfs_block_map_btree_records_inserted_total",
        "Number of block map B-tree records inserted for a filesystem.",
    ),
    m(
        3,
        3,
        "node_xfs_block_map_btree_records_deleted_total",
        "Number of block map B-tree records deleted for a filesystem.",
    ),
    m(
        4,
        0,
        "node_xfs_directory_operation_lookup_total",
        "Number of file name directory lookups which miss the operating systems directory name lookup cache.",
    ),
    m(
        4,
        1,
        "node_xfs_directory_operation_create_total",
        "Number of times a new directory entry was created for a filesystem.",
    ),
    m(
        4,
        2,
        "node_xfs_directory_operation_remove_total",
        "Number of times an existing directory entry was created for a filesystem.",
    ),
    m(
        4,
        3,
        "node_xfs_directory_operation_getdents_total",
        "Number of times the directory getdents operation was performed for a filesystem.",
    ),
    m(
        5,
        0,
        "node_xfs_inode_operation_attempts_total",
        "Number of times the OS looked for an XFS inode in the inode cache.",
    ),
    m(
        5,
        1,
        "node_xfs_inode_operation_found_total",
        "Number of times the OS looked for and found an XFS inode in the inode cache.",
    ),
    m(
        5,
        2,
        "node_xfs_inode_operation_recycled_total",
        "Number of times the OS found an XFS inode in the cache, but could not use it as it was being recycled.",
    ),
    m(
        5,
        3,
        "node_xfs_inode_operation_missed_total",
        "Number of times the OS looked for an XFS inode in the cache, but did not find it.",
    ),
    m(
        5,
        4,
        "node_xfs_inode_operation_duplicates_total",
        "Number of times the OS tried to add a missing XFS inode to the inode cache, but found it had already been added by another process.",
    ),
    m(
        5,
        5,
        "node_xfs_inode_operation_reclaims_total",
        "Number of times the OS reclaimed an XFS inode from the inode cache to free memory for another purpose.",
    ),
    m(
        5,
        6,
        "node_xfs_inode_operation_attribute_changes_total",
        "Number of times the OS explicitly changed the attributes of an XFS inode.",
    ),
    // `rw` is writes, then reads.
    m(
        6,
        1,
        "node_xfs_read_calls_total",
        "Number of read(2) system calls made to files in a filesystem.",
    ),
    m(
        6,
        0,
        "node_xfs_write_calls_total",
        "Number of write(2) system calls made to files in a filesystem.",
    ),
    m(
        VNODES,
        0,
        "node_xfs_vnode_active_total",
        "Number of vnodes not on free lists for a filesystem.",
    ),
    m(
        VNODES,
        1,
        "node_xfs_vnode_allocate_total",
        "Number of times vn_alloc called for a filesystem.",
    ),
    m(
        VNODES,
        2,
        "node_xfs_vnode_get_total",
        "Number of times vn_get called for a filesystem.",
    ),
    m(
        VNODES,
        3,
        "node_xfs_vnode_hold_total",
        "Number of times vn_hold called for a filesystem.",
    ),
    m(
        VNODES,
        4,
        "node_xfs_vnode_release_total",
        "Number of times vn_rele called for a filesystem.",
    ),
    m(
        VNODES,
        5,
        "node_xfs_vnode_reclaim_total",
        "Number of times vn_reclaim called for a filesystem.",
    ),
    m(
        VNODES,
        6,
        "node_xfs_vnode_remove_total",
        "Number of times vn_remove called for a filesystem.",
    ),
];

/// The counters of the exported groups, by [`GROUPS`] position.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct XfsStats {
    pub groups: [[u32; 8]; 8],
}

/// Parses one stats file. Each exported group must appear once, with the
/// kernel's number of counters; every other line is a key and counters
/// that must be 32-bit (64-bit for `xpc`, `defer_relog` and `gc xpc`).
pub fn parse_into(s: &str, out: &mut XfsStats) -> Result<(), ParseError> {
    *out = XfsStats::default();
    let mut seen = [false; 8];
    let mut last = 0;
    for (i, line) in lines(s).enumerate() {
        let n = i + 1;
        last = n;
        let mut f = fields(line);
        let key = f.next().ok_or_else(|| ParseError::new(n, "empty line"))?;
        if let Some(g) = GROUPS.iter().position(|(k, _)| *k == key) {
            if std::mem::replace(&mut seen[g], true) {
                return Err(ParseError::new(n, format!("a second {key:?} line")));
            }
            let want = GROUPS[g].1;
            let mut count = 0;
            for tok in f {
                if count == want {
                    return Err(ParseError::new(
                        n,
                        format!("{key}: more than {want} values (extra {})", excerpt(tok)),
                    ));
                }
                out.groups[g][count] = u32_field(tok, n, key)?;
                count += 1;
            }
            // vnodes had 7 counters before Linux 3.x.
            if count != want && !(g == VNODES && count == 7) {
                return Err(ParseError::new(
                    n,
                    format!("{key}: {count} values, expected {want}"),
                ));
            }
            continue;
        }
        // `gc xpc` (zoned filesystems) names its group in two words.
        let mut wide = WIDE_GROUPS.contains(&key);
        if key == "gc" && f.clone().next() == Some("xpc") {
            f.next();
            wide = true;
        }
        let mut count = 0;
        for tok in f {
            if wide {
                u64_field(tok, n, key)?;
            } else {
                u32_field(tok, n, key)?;
            }
            count += 1;
        }
        if count == 0 {
            return Err(ParseError::new(n, format!("{key}: no values")));
        }
    }
    if let Some(g) = seen.iter().position(|s| !s) {
        return Err(ParseError::new(
            last + 1,
            format!("no {:?} line", GROUPS[g].0),
        ));
    }
    Ok(())
}

fn u32_field(tok: &str, n: usize, what: &str) -> Result<u32, ParseError> {
    let v = u64_field(tok, n, what)?;
    u32::try_from(v).map_err(|_| {
        ParseError::new(
            n,
            format!("{what}: {v} does not fit the kernel's 32-bit counter"),
        )
    })
}

/// A mounted filesystem's stats file, kept while it is listed.
struct Device {
    name: String,
    file: SourceFile,
    stats: XfsStats,
    /// Read this scrape (listed, and the file was there).
    present: bool,
}

pub struct XfsCollector {
    root: PathBuf,
    dir: Dir,
    names: Vec<String>,
    /// Sorted by name.
    devices: Vec<Device>,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(XfsCollector {
        root: s.sysfs.join("fs/xfs"),
        dir: Dir::new(&s.sysfs, "fs/xfs"),
        names: Vec::new(),
        devices: Vec::new(),
    })
}

impl XfsCollector {
    /// The device entry for `name`, created (with its file) when new.
    fn device(devices: &mut Vec<Device>, root: &Path, name: &str) -> usize {
        match devices.binary_search_by(|d| d.name.as_str().cmp(name)) {
            Ok(i) => i,
            Err(i) => {
                devices.insert(
                    i,
                    Device {
                        name: name.to_string(),
                        file: SourceFile::new(root, &format!("{name}/stats/stats")),
                        stats: XfsStats::default(),
                        present: false,
                    },
                );
                i
            }
        }
    }
}

impl Collector for XfsCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let names = &mut self.names;
        names.clear();
        let listed = self.dir.list(|name| {
            // The sum over all filesystems, not a device.
            if name != "stats" {
                names.push(name.to_string());
            }
        })?;
        if !listed {
            self.devices.clear();
            return Ok(()); // no XFS in this kernel
        }
        for d in &mut self.devices {
            d.present = false;
        }
        for name in &self.names {
            let i = Self::device(&mut self.devices, &self.root, name);
            let d = &mut self.devices[i];
            let stats = &mut d.stats;
            // A directory without stats/stats (unmounted during the scrape,
            // or not a filesystem) is left out, as node_exporter's glob does;
            // so is one unmounted while its file was open (ENODEV).
            d.present = match d.file.parse_with(|t| parse_into(t, stats)) {
                Ok(read) => read.is_some(),
                Err(_) if d.file.device_gone() => false,
                Err(e) => return Err(e),
            };
        }
        self.devices.retain(|d| d.present);
        if self.devices.is_empty() {
            return Ok(());
        }
        for metric in &METRICS {
            enc.family(&metric.desc);
            for d in &self.devices {
                let v = d.stats.groups[metric.group][metric.index];
                enc.sample(&metric.desc, &[("device", &d.name)], u64::from(v));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::{fixture, render};

    fn parse(s: &str) -> Result<XfsStats, ParseError> {
        parse_fresh(s, parse_into)
    }

    fn fixture_text(device: &str) -> String {
        std::fs::read_to_string(fixture("sys").join(format!("fs/xfs/{device}/stats/stats")))
            .unwrap()
    }

    #[test]
    fn parses_a_6_18_filesystem() {
        let p = parse(&fixture_text("loop0")).unwrap();
        assert_eq!(p.groups[0][..4], [181, 4302, 1, 1], "extent_alloc");
        assert_eq!(p.groups[6][..2], [4800, 68], "rw: writes, reads");
        assert_eq!(p.groups[VNODES], [208, 0, 0, 0, 29, 29, 29, 0]);
    }

    #[test]
    fn older_vnodes_line_has_seven() {
        let text = fixture_text("sdb1").replace(
            "vnodes 4294967295 0 0 0 84 84 84 0",
            "vnodes 62 0 0 0 84 84 84",
        );
        assert_eq!(
            parse(&text).unwrap().groups[VNODES][..7],
            [62, 0, 0, 0, 84, 84, 84]
        );
    }

    #[test]
    fn malformed() {
        let text = fixture_text("sdb1");
        let e = parse(&text.replace("rw 3306 2431", "rw 3306")).unwrap_err();
        assert_eq!((e.line, e.msg.as_str()), (11, "rw: 1 values, expected 2"));
        let e = parse(&text.replace("rw 3306 2431", "rw 3306 4294967296")).unwrap_err();
        assert!(e.msg.contains("32-bit"), "{e}");
        // 64-bit groups take 64-bit numbers, but not more.
        assert!(parse(&text.replace("xpc 17383424", "xpc 4294967296")).is_ok());
        assert!(parse(&text.replace("xpc 17383424", "xpc 18446744073709551616")).is_err());
        assert!(parse(&text.replace("trans 0 284 0", "trans 0 x 0")).is_err());
        assert!(parse(&text.replace("trans 0 284 0", "trans")).is_err());
        assert!(parse(&format!("{text}gc xpc 4294967296 0 0\n")).is_ok());
        assert!(parse(&format!("{text}gc 4294967296\n")).is_err());
        let e = parse(&text.replace("dir 185 88 87 134\n", "")).unwrap_err();
        assert_eq!(e.msg, "no \"dir\" line");
        let e = parse(&format!("{text}abt 0 0 0 0\n")).unwrap_err();
        assert!(e.msg.contains("second"), "{e}");
        assert!(parse("").is_err());
    }

    #[test]
    fn collector_on_fixture() {
        let s = Settings::with_roots("/nonexistent", fixture("sys"));
        let out = render(build(&s).as_mut()).unwrap();
        assert!(out.starts_with(
            "# HELP node_xfs_extent_allocation_extents_allocated_total Number of extents allocated for a filesystem.\n\
             # TYPE node_xfs_extent_allocation_extents_allocated_total counter\n\
             node_xfs_extent_allocation_extents_allocated_total{device=\"loop0\"} 181\n\
             node_xfs_extent_allocation_extents_allocated_total{device=\"sdb1\"} 92\n"
        ), "{out}");
        assert!(out.contains("node_xfs_read_calls_total{device=\"loop0\"} 68\n"));
        assert!(out.contains("node_xfs_vnode_active_total{device=\"sdb1\"} 4294967295\n"));
        // /sys/fs/xfs/stats is the sum, not a device.
        assert!(!out.contains("device=\"stats\""));
        assert_eq!(out.matches("# TYPE").count(), 39);
        let absent = Settings::with_roots("/nonexistent", "/nonexistent-usescope");
        assert_eq!(render(build(&absent).as_mut()).unwrap(), "");
    }

    #[test]
    fn filesystems_come_and_go() {
        let dir = tempfile::tempdir().unwrap();
        let xfs = dir.path().join("fs/xfs");
        std::fs::create_dir_all(xfs.join("stats")).unwrap();
        let mut c = build(&Settings::with_roots("/nonexistent", dir.path()));
        // XFS in the kernel, nothing mounted.
        assert_eq!(render(c.as_mut()).unwrap(), "");
        std::fs::create_dir_all(xfs.join("dm-0/stats")).unwrap();
        std::fs::write(xfs.join("dm-0/stats/stats"), fixture_text("sdb1")).unwrap();
        assert!(
            render(c.as_mut())
                .unwrap()
                .contains("{device=\"dm-0\"} 92\n")
        );
        std::fs::write(xfs.join("dm-0/stats/stats"), "extent_alloc x\n").unwrap();
        let e = render(c.as_mut()).unwrap_err();
        assert_eq!(e.file, xfs.join("dm-0/stats/stats"));
        std::fs::remove_dir_all(xfs.join("dm-0")).unwrap();
        assert_eq!(render(c.as_mut()).unwrap(), "");
    }
}
