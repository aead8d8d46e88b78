//! node_exporter compatibility of the network-filesystem, storage and IPVS
//! collectors: nfs, nfsd, ipvs, xfs. Each test runs node_exporter
//! (v1.12.1, see `common::node_exporter`) and usescope on the same tree,
//! with only that collector enabled, and asserts the same families (name,
//! type, HELP), label sets and values: on the checked-in fixture tree and
//! on edge cases written here (older kernels, a service without backends,
//! a server with RPC errors, node_exporter's own fixture layouts).

mod common;

use std::path::Path;

use common::fixture;
use common::node_exporter::{self, Pair, assert_same, scrape_both, success};

/// A temporary procfs (or sysfs) root holding only the files a test writes.
struct Tree(tempfile::TempDir);

impl Tree {
    fn new() -> Tree {
        Tree(tempfile::tempdir().unwrap())
    }
    fn write(&self, rel: &str, text: &str) -> &Tree {
        let p = self.0.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
        self
    }
    fn path(&self) -> &Path {
        self.0.path()
    }
}

fn on(bin: &Path, procfs: &Path, flags: &[&str]) -> Pair {
    scrape_both(bin, procfs, Path::new("/nonexistent-usescope-sys"), flags)
}

#[test]
fn nfs_client() {
    let Some(bin) = node_exporter::find() else {
        return;
    };
    // The fixture: a 6.x kernel without NFSv2 (no proc2 line) and 69 NFSv4
    // operations (more than the 59 node_exporter names).
    let us = assert_same(&on(&bin, &fixture("proc"), &["--collector.nfs"]), "nfs");
    assert_eq!(us["node_nfs_requests_total"].series.len(), 18 + 22 + 59);
    assert_eq!(
        us["node_nfs_rpc_retransmissions_total"].series[&vec![]],
        57.0
    );

    // node_exporter's own fixture layout: an older kernel with proc2 and
    // 48 NFSv4 operations (the rest are 0).
    let older = Tree::new();
    older.write(
        "net/rpc/nfs",
        "net 70 70 69 45\nrpc 1218785755 374636 1218815394\n\
         proc2 18 16 57 74 52 71 73 45 86 0 52 83 61 17 53 50 23 70 82\n\
         proc3 22 0 1061909262 48906 4077635 117661341 5 29391916 2570425 2993289 590 0 0 7815 15 1130 0 3983 92385 13332 2 1 23729\n\
         proc4 48 98 51 54 83 85 23 24 1 28 73 68 83 12 84 39 68 59 58 88 29 74 69 96 21 84 15 53 86 54 66 56 97 36 49 32 85 81 11 58 32 67 13 28 35 1 90 26 0\n",
    );
    assert_same(&on(&bin, older.path(), &["--collector.nfs"]), "nfs");

    // No NFS client: neither emits anything; node_exporter reports "no
    // data" as a failure, usescope as success (docs/node-exporter-compat.md).
    assert_absent(&bin, "nfs");
}

/// Without the source file neither exporter emits a series; usescope's
/// collector succeeds, node_exporter's reports "no data" (success 0).
fn assert_absent(bin: &Path, collector: &str) {
    let none = Tree::new();
    none.write("stat", "");
    let pair = on(bin, none.path(), &[&format!("--collector.{collector}")]);
    assert!(node_exporter::differences(&pair, |_| true).is_empty());
    assert!(node_exporter::families(&pair.usescope).is_empty());
    assert_eq!(success(&pair.node_exporter, collector), Some(0.0));
    assert_eq!(success(&pair.usescope, collector), Some(1.0));
}

#[test]
fn nfs_client_broken_file_fails_both() {
    let Some(bin) = node_exporter::find() else {
        return;
    };
    let t = Tree::new();
    t.write(
        "net/rpc/nfs",
        "net 70 70 69 45\nrpc 1 2 3\nproc3 5 1 2 3 4 5\n",
    );
    let pair = on(&bin, t.path(), &["--collector.nfs"]);
    assert_eq!(success(&pair.node_exporter, "nfs"), Some(0.0));
    assert_eq!(success(&pair.usescope, "nfs"), Some(0.0));
}

#[test]
fn nfs_server() {
    let Some(bin) = node_exporter::find() else {
        return;
    };
    // The fixture: a 6.x server with RPC errors of all three kinds, 76
    // NFSv4 operations and wdeleg_getattr.
    let us = assert_same(&on(&bin, &fixture("proc"), &["--collector.nfsd"]), "nfsd");
    let errors = &us["node_nfsd_rpc_errors_total"].series;
    let by_kind = |k: &str| errors[&vec![("error".to_string(), k.to_string())]];
    assert_eq!(
        (by_kind("fmt"), by_kind("auth"), by_kind("cInt")),
        (5.0, 6.0, 2.0)
    );

    // node_exporter's own fixture layout: proc2, 72 operations.
    let older = Tree::new();
    older.write(
        "net/rpc/nfsd",
        "rc 0 6 18622\nfh 0 0 0 0 0\nio 157286400 72864\n\
         th 8 0 0.000 0.000 0.000 0.000 0.000 0.000 0.000 0.000 0.000 0.000\n\
         ra 32 0 0 0 0 0 0 0 0 0 0 0\nnet 972 55 917 1\nrpc 18628 3 1 2 0\n\
         proc2 18 2 69 0 0 4410 0 0 0 0 0 0 0 0 0 0 0 99 2\n\
         proc3 22 2 112 0 2719 111 0 0 0 0 0 0 0 0 0 0 0 27 216 0 2 1 0\n\
         proc4 2 2 10853\n\
         proc4ops 72 0 0 0 1098 2 0 0 0 0 8179 5896 0 0 0 0 5900 0 0 2 0 2 0 9609 0 2 150 1272 0 0 0 1236 0 0 0 0 3 3 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n\
         wdeleg_getattr 15\n",
    );
    assert_same(&on(&bin, older.path(), &["--collector.nfsd"]), "nfsd");

    // A 2.5-era server: 39 operations, no RELEASE_LOCKOWNER (reported 0),
    // and none of the lines a newer kernel adds.
    let oldest = Tree::new();
    let ops39 = vec!["1"; 39].join(" ");
    oldest.write(
        "net/rpc/nfsd",
        &format!("net 5 0 5 1\nrpc 5 0 0 0 0\nproc4ops 39 {ops39}\n"),
    );
    assert_same(&on(&bin, oldest.path(), &["--collector.nfsd"]), "nfsd");
    assert_absent(&bin, "nfsd");
}

#[test]
fn ipvs() {
    let Some(bin) = node_exporter::find() else {
        return;
    };
    // The fixture: kube-proxy-like services (TCP, UDP, a persistent one, an
    // FWM one, an IPv6 one), a drained backend (weight 0) and a service
    // without backends, which has no series in either.
    let us = assert_same(&on(&bin, &fixture("proc"), &["--collector.ipvs"]), "ipvs");
    assert_eq!(us["node_ipvs_backend_weight"].series.len(), 9);
    for labels in [
        "proto",
        "local_address,local_port",
        "",
        "remote_port,proto,local_mark",
    ] {
        let flag = format!("--collector.ipvs.backend-labels={labels}");
        let pair = on(&bin, &fixture("proc"), &["--collector.ipvs", &flag]);
        assert_same(&pair, "ipvs");
    }

    // node_exporter's own fixture.
    let theirs = Tree::new();
    theirs
        .write(
            "net/ip_vs",
            "IP Virtual Server version 1.2.1 (size=4096)\n\
             Prot LocalAddress:Port Scheduler Flags\n\
             \x20 -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n\
             TCP  C0A80016:0CEA wlc  \n\
             \x20 -> C0A85216:0CEA      Tunnel  100    248        2         \n\
             \x20 -> C0A85318:0CEA      Tunnel  100    248        2         \n\
             \x20 -> C0A85315:0CEA      Tunnel  100    248        1         \n\
             TCP  C0A80039:0CEA wlc  \n\
             \x20 -> C0A85416:0CEA      Tunnel  0      0          0         \n\
             \x20 -> C0A85215:0CEA      Tunnel  100    1499       0         \n\
             \x20 -> C0A83215:0CEA      Tunnel  100    1498       0         \n\
             TCP  C0A80037:0CEA wlc  \n\
             \x20 -> C0A8321A:0CEA      Tunnel  0      0          0         \n\
             \x20 -> C0A83120:0CEA      Tunnel  100    0          0         \n\
             FWM  10001000 wlc   \n\
             \x20 -> C0A8321A:0CEA      Tunnel  20     64         1         \n\
             \x20 -> C0A83120:0CEA      Tunnel  100    321        5         \n",
        )
        .write(
            "net/ip_vs_stats",
            &std::fs::read_to_string(fixture("proc").join("net/ip_vs_stats")).unwrap(),
        );
    assert_same(&on(&bin, theirs.path(), &["--collector.ipvs"]), "ipvs");
    let pair = on(
        &bin,
        theirs.path(),
        &[
            "--collector.ipvs",
            "--collector.ipvs.backend-labels=local_port",
        ],
    );
    assert_same(&pair, "ipvs");
    assert_absent(&bin, "ipvs");
}

/// Known difference: node_exporter (procfs) does not know SCTP services and
/// counts their backends under the service before them; usescope labels
/// them `proto="SCTP"` with their own address (docs/collectors/ipvs.md).
#[test]
fn ipvs_sctp_service_is_its_own() {
    let Some(bin) = node_exporter::find() else {
        return;
    };
    let t = Tree::new();
    t.write(
        "net/ip_vs",
        "IP Virtual Server version 1.2.1 (size=4096)\n\
         Prot LocalAddress:Port Scheduler Flags\n\
         \x20 -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n\
         TCP  0A600001:01BB rr \n\
         \x20 -> C0A8010A:192B      Masq    1      12         40        \n\
         SCTP 0A600002:0B59 rr \n\
         \x20 -> 0AF40009:0B59      Masq    1      3          0         \n",
    )
    .write(
        "net/ip_vs_stats",
        &std::fs::read_to_string(fixture("proc").join("net/ip_vs_stats")).unwrap(),
    );
    let pair = on(&bin, t.path(), &["--collector.ipvs"]);
    let diffs = node_exporter::differences(&pair, |_| true);
    let sctp_backend = "remote_address=\"10.244.0.9\"";
    // node_exporter: the SCTP backend under 10.96.0.1:443/TCP; usescope:
    // under 10.96.0.2:2905/SCTP. Three families, two series each.
    assert_eq!(diffs.len(), 6, "{diffs:#?}");
    assert!(diffs.iter().all(|d| d.contains(sctp_backend)), "{diffs:#?}");
    let under = |side: &str, proto: &str| {
        diffs
            .iter()
            .filter(|d| d.starts_with(side) && d.contains(proto))
            .count()
    };
    assert_eq!(under("- ", "proto=\"TCP\""), 3, "{diffs:#?}");
    assert_eq!(under("+ ", "proto=\"SCTP\""), 3, "{diffs:#?}");
    assert!(pair.usescope.contains("proto=\"SCTP\""));
    assert!(!pair.node_exporter.contains("proto=\"SCTP\""));
}

#[test]
fn xfs_fixture() {
    let Some(bin) = node_exporter::find() else {
        return;
    };
    // loop0 captured from a 6.18 kernel, sdb1 in an older layout with a
    // counter at u32::MAX; /sys/fs/xfs/stats (the sum) is no device.
    let pair = scrape_both(
        &bin,
        &fixture("proc"),
        &fixture("sys"),
        &["--collector.xfs"],
    );
    let us = assert_same(&pair, "xfs");
    assert_eq!(us.len(), 39);
    assert_eq!(us["node_xfs_read_calls_total"].series.len(), 2);
}

/// A real XFS filesystem on a loop device, mounted for the test and
/// unmounted when dropped.
struct LoopMount {
    dir: tempfile::TempDir,
    device: String,
}

impl LoopMount {
    /// `mkfs` (`mkfs.xfs -q -f`, ...) an image of `mib` MiB and mount it;
    /// `None` after a skip (a failure in CI, through `common::skip`) when
    /// this host cannot.
    fn new(fstype: &str, mkfs: &[&str], mib: u64) -> Option<LoopMount> {
        let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
        let has_fs = filesystems
            .lines()
            .any(|l| l.split_whitespace().last() == Some(fstype));
        if !common::skip::unless_met(has_fs, &format!("a kernel with {fstype}"))
            || !common::skip::unless_root("to mount a loop device")
        {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("fs.img");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        std::fs::File::create(&image)
            .unwrap()
            .set_len(mib << 20)
            .unwrap();
        let run = |cmd: &str, args: &[&std::ffi::OsStr]| {
            std::process::Command::new(cmd)
                .args(args)
                .output()
                .map_err(|e| format!("{cmd}: {e}"))
                .and_then(|o| {
                    o.status.success().then_some(o.stdout).ok_or_else(|| {
                        format!("{cmd} failed: {}", String::from_utf8_lossy(&o.stderr))
                    })
                })
        };
        let mut args: Vec<&std::ffi::OsStr> = mkfs[1..].iter().map(|a| a.as_ref()).collect();
        args.push(image.as_os_str());
        if let Err(e) = run(mkfs[0], &args) {
            common::skip::unless_met(false, &format!("{e} (scripts/setup.sh installs it)"));
            return None;
        }
        if let Err(e) = run(
            "mount",
            &[
                "-o".as_ref(),
                "loop".as_ref(),
                image.as_os_str(),
                mnt.as_os_str(),
            ],
        ) {
            common::skip::unless_met(false, &e);
            return None;
        }
        let source = run(
            "findmnt",
            &[
                "-n".as_ref(),
                "-o".as_ref(),
                "SOURCE".as_ref(),
                mnt.as_os_str(),
            ],
        )
        .expect("findmnt");
        let source = String::from_utf8(source).unwrap();
        let device = source.trim().trim_start_matches("/dev/").to_string();
        Some(LoopMount { dir, device })
    }

    fn mnt(&self) -> std::path::PathBuf {
        self.dir.path().join("mnt")
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.mnt())
            .status();
    }
}

/// Some files written, read, renamed and removed, then synced.
fn workload(root: &Path) {
    for i in 0..60u32 {
        let d = root.join(format!("d{}", i % 5));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(format!("f{i}")), vec![b'x'; (i as usize + 1) * 1500]).unwrap();
    }
    for i in (0..60u32).step_by(3) {
        let f = root.join(format!("d{}/f{i}", i % 5));
        std::fs::read(&f).unwrap();
        std::fs::rename(&f, root.join(format!("d{}/g{i}", i % 5))).unwrap();
    }
    std::fs::remove_dir_all(root.join("d2")).unwrap();
    std::process::Command::new("sync").status().unwrap();
}

/// The kernel's own counters for one XFS device: `key` → values.
fn xfs_counters(device: &str) -> std::collections::BTreeMap<String, Vec<u64>> {
    let text = std::fs::read_to_string(format!("/sys/fs/xfs/{device}/stats/stats")).unwrap();
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let key = f.next()?.to_string();
            Some((key, f.filter_map(|v| v.parse().ok()).collect()))
        })
        .collect()
}

#[test]
fn xfs_on_a_real_loop_device() {
    let Some(bin) = node_exporter::find() else {
        return;
    };
    let Some(m) = LoopMount::new("xfs", &["mkfs.xfs", "-q", "-f"], 320) else {
        return;
    };
    workload(&m.mnt());
    let before = xfs_counters(&m.device);
    let pair = scrape_both(
        &bin,
        Path::new("/proc"),
        Path::new("/sys"),
        &["--collector.xfs"],
    );
    let after = xfs_counters(&m.device);
    // Same families, types, HELP and label sets; values checked below.
    let (ne, us) = (
        node_exporter::families(&pair.node_exporter),
        node_exporter::families(&pair.usescope),
    );
    assert_eq!(ne.keys().collect::<Vec<_>>(), us.keys().collect::<Vec<_>>());
    for (name, a) in &ne {
        let b = &us[name];
        assert_eq!((&a.kind, &a.help), (&b.kind, &b.help), "{name}");
        assert_eq!(
            a.series.keys().collect::<Vec<_>>(),
            b.series.keys().collect::<Vec<_>>(),
            "{name}"
        );
    }
    assert_eq!(success(&pair.usescope, "xfs"), Some(1.0));
    // Each of our device's values, in both exporters, lies between the
    // kernel's counters read just before and just after the scrapes.
    let ours = vec![("device".to_string(), m.device.clone())];
    let oracle = [
        (
            "node_xfs_extent_allocation_extents_allocated_total",
            "extent_alloc",
            0,
        ),
        (
            "node_xfs_extent_allocation_blocks_allocated_total",
            "extent_alloc",
            1,
        ),
        ("node_xfs_block_mapping_writes_total", "blk_map", 1),
        ("node_xfs_directory_operation_create_total", "dir", 1),
        ("node_xfs_directory_operation_remove_total", "dir", 2),
        ("node_xfs_inode_operation_attempts_total", "ig", 0),
        ("node_xfs_read_calls_total", "rw", 1),
        ("node_xfs_write_calls_total", "rw", 0),
        ("node_xfs_vnode_active_total", "vnodes", 0),
        ("node_xfs_vnode_remove_total", "vnodes", 6),
    ];
    for (family, key, i) in oracle {
        let (lo, hi) = (before[key][i] as f64, after[key][i] as f64);
        for (who, fams) in [("node_exporter", &ne), ("usescope", &us)] {
            let v = fams[family].series[&ours];
            assert!(
                lo <= v && v <= hi,
                "{who} {family} = {v}, kernel {lo}..{hi}"
            );
        }
    }
    // The workload shows: 60 files created, some removed, writes counted.
    assert!(us["node_xfs_write_calls_total"].series[&ours] >= 60.0);
    assert!(us["node_xfs_directory_operation_create_total"].series[&ours] >= 65.0);
    assert!(us["node_xfs_directory_operation_remove_total"].series[&ours] >= 12.0);
}

#[test]
fn zfs() {
    let Some(bin) = node_exporter::find() else {
        return;
    };
    // The fixture: every module kstat node_exporter reads (with an int64
    // row and a row name with dashes), pool tank in the older layout with
    // `io` and two datasets, pool backup DEGRADED with a dataset whose
    // name has a space.
    let us = assert_same(&on(&bin, &fixture("proc"), &["--collector.zfs"]), "zfs");
    let state = &us["node_zfs_zpool_state"].series;
    let key = |pool: &str, st: &str| {
        vec![
            ("state".to_string(), st.to_string()),
            ("zpool".to_string(), pool.to_string()),
        ]
    };
    assert_eq!(state[&key("backup", "degraded")], 1.0);
    assert_eq!(state[&key("backup", "online")], 0.0);
    assert_eq!(state[&key("tank", "online")], 1.0);
    assert_eq!(state.len(), 14);
    assert!(us.contains_key("node_zfs_fm_erpt_dropped"));
    assert!(us.contains_key("node_zfs_zpool_nread"));

    // A ZFS 2.x host: pools without `io`, a pool being exported (its
    // directory without files), a state node_exporter does not list.
    let t = Tree::new();
    for f in ["arcstats", "zil", "dmu_tx"] {
        let rel = format!("spl/kstat/zfs/{f}");
        t.write(
            &rel,
            &std::fs::read_to_string(fixture("proc").join(&rel)).unwrap(),
        );
    }
    let objset =
        std::fs::read_to_string(fixture("proc").join("spl/kstat/zfs/tank/objset-0x8a")).unwrap();
    t.write("spl/kstat/zfs/fast/objset-0x10", &objset)
        .write("spl/kstat/zfs/fast/state", "FAULTED\n")
        .write("spl/kstat/zfs/odd/state", "UNKNOWN\n");
    std::fs::create_dir_all(t.path().join("spl/kstat/zfs/leaving")).unwrap();
    let us = assert_same(&on(&bin, t.path(), &["--collector.zfs"]), "zfs");
    let state = &us["node_zfs_zpool_state"].series;
    assert_eq!(state[&key("fast", "faulted")], 1.0);
    assert_eq!(
        state.values().sum::<f64>(),
        1.0,
        "UNKNOWN is none of the seven"
    );
    assert!(!us.contains_key("node_zfs_zpool_nread"));

    // No ZFS module.
    assert_absent(&bin, "zfs");
}

#[test]
fn btrfs_fixture() {
    let Some(bin) = node_exporter::find() else {
        return;
    };
    // One filesystem captured from a real 400 MiB btrfs on Linux 6.18
    // (single data, dup metadata), one hand-written raid1 over two
    // devices without commit_stats (before Linux 6.0) and an empty label.
    // No mount answers the ioctls here, so both report sysfs sizes.
    let pair = scrape_both(
        &bin,
        &fixture("proc"),
        &fixture("sys"),
        &[
            "--collector.btrfs",
            "--path.rootfs=/nonexistent-usescope-rootfs",
        ],
    );
    let us = assert_same(&pair, "btrfs");
    assert_eq!(us["node_btrfs_info"].series.len(), 2);
    assert_eq!(us["node_btrfs_device_size_bytes"].series.len(), 3);
}

#[test]
fn btrfs_on_a_real_loop_device() {
    let Some(bin) = node_exporter::find() else {
        return;
    };
    let Some(m) = LoopMount::new("btrfs", &["mkfs.btrfs", "-q", "-f", "-L", "usescope"], 400)
    else {
        return;
    };
    workload(&m.mnt());
    let pair = scrape_both(
        &bin,
        Path::new("/proc"),
        Path::new("/sys"),
        &["--collector.btrfs"],
    );
    // Commits happen in the background (every 30 s): compared apart.
    let commit = |n: &str| n.contains("commit");
    node_exporter::assert_none(
        "btrfs on a loop device",
        &node_exporter::differences(&pair, |n| !commit(n)),
    );
    assert_eq!(success(&pair.usescope, "btrfs"), Some(1.0));
    let us = node_exporter::families(&pair.usescope);
    // The ioctl path: per-device error counters, labelled with the
    // device's btrfs uuid, as `btrfs device stats` reports them.
    let errors = &us["node_btrfs_device_errors_total"].series;
    assert_eq!(errors.len(), 5, "{errors:?}");
    let stats = std::process::Command::new("btrfs")
        .args(["device", "stats"])
        .arg(m.mnt())
        .output()
        .expect("btrfs device stats");
    let stats = String::from_utf8(stats.stdout).unwrap();
    for (kind, key) in [
        ("write", "write_io_errs"),
        ("read", "read_io_errs"),
        ("flush", "flush_io_errs"),
        ("corruption", "corruption_errs"),
        ("generation", "generation_errs"),
    ] {
        let kernel: f64 = stats
            .lines()
            .find(|l| l.contains(&format!(".{key}")))
            .and_then(|l| l.split_whitespace().last()?.parse().ok())
            .unwrap_or_else(|| panic!("{key} in {stats}"));
        let ours = errors
            .iter()
            .find(|(labels, _)| labels.iter().any(|(k, v)| k == "type" && v == kind))
            .map(|(_, v)| *v)
            .unwrap();
        assert_eq!(ours, kernel, "{kind}");
    }
    let size = &us["node_btrfs_device_size_bytes"].series;
    let (labels, bytes) = size.iter().next().unwrap();
    assert_eq!(*bytes, (400u64 << 20) as f64);
    assert!(labels.iter().any(|(k, v)| k == "device" && *v == m.device));
    let used = &us["node_btrfs_used_bytes"].series;
    let data_used: f64 = used
        .iter()
        .filter(|(l, _)| {
            l.iter()
                .any(|(k, v)| k == "block_group_type" && v == "data")
        })
        .map(|(_, v)| v)
        .sum();
    assert!(
        data_used >= 60.0 * 1500.0,
        "the workload's data: {data_used}"
    );
}
