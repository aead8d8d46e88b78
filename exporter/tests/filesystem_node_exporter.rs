//! The filesystem collector against node_exporter itself (the oracle), on
//! the same input: both run side by side with only the filesystem
//! collector, and every `node_filesystem_*` series must be there in both,
//! with the same labels and values.
//!
//! - The live host, with `--path.rootfs=/` and with a rootfs that is a
//!   symlink to `/` (the join of rootfs and mount point). Free space and
//!   free inodes move between two reads, so usescope is scraped before and
//!   after node_exporter and node_exporter's value must lie between the two
//!   (give or take 0.5% of the size); everything else must be equal.
//! - The captured fixture and node_exporter's own fixture tree (from the Go
//!   module cache, when present: escaped mount points, ro options, autofs),
//!   with an absent rootfs (every statfs fails: exact equality) and, for
//!   node_exporter's, with `/`.
//!
//! node_exporter is /root/go/bin/node_exporter, ~/go/bin/node_exporter or
//! `$NODE_EXPORTER` (scripts/compat-node-exporter.sh installs it). Without
//! it the test prints a skip line, or fails under USESCOPE_REQUIRE_BPF=1.
//!
//! FUSE mounts are excluded on both sides: other tests on the same machine
//! mount hangfs, on which node_exporter's first scrape would block.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Daemon, fixture, http_get};

/// node_exporter 1.12's default fs-types-exclude, plus FUSE.
const FS_TYPES_EXCLUDE: &str = "^(autofs|binfmt_misc|bpf|cgroup2?|configfs|debugfs|devpts|devtmpfs|fusectl|hugetlbfs|iso9660|mqueue|nsfs|overlay|proc|procfs|pstore|rpc_pipefs|securityfs|selinuxfs|squashfs|erofs|sysfs|tracefs|fuse|fuse\\..+)$";

/// node_exporter's own fixture procfs, from the Go module cache.
fn node_exporter_fixture() -> Option<PathBuf> {
    let cache = std::env::var_os("GOMODCACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join("go/pkg/mod")))?;
    let p = cache.join("github.com/prometheus/node_exporter@v1.12.1/collector/fixtures/proc");
    p.join("1/mountinfo").is_file().then_some(p)
}

/// A node_exporter child, killed on drop.
struct NodeExporter {
    child: Child,
    addr: std::net::SocketAddr,
}

impl NodeExporter {
    fn start(bin: &Path, args: &[String]) -> NodeExporter {
        let addr = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let child = Command::new(bin)
            .arg(format!("--web.listen-address={addr}"))
            .arg("--collector.disable-defaults")
            .arg("--collector.filesystem")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start node_exporter");
        let ne = NodeExporter { child, addr };
        let end = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(ne.addr).is_err() {
            assert!(Instant::now() < end, "node_exporter did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        ne
    }

    fn scrape(&self) -> String {
        let r = http_get(self.addr, "/metrics", &[]);
        assert_eq!(r.status, 200);
        r.text()
    }
}

impl Drop for NodeExporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn usescope(args: &[String]) -> Daemon {
    let mut all: Vec<&str> = vec![
        "--collector.disable-defaults",
        "--collector.filesystem",
        "--no-probe.runqlat",
        "--no-probe.cachestat",
        "--no-probe.drops",
    ];
    all.extend(args.iter().map(String::as_str));
    Daemon::start(&all)
}

/// `node_filesystem_*` series (name and labels, as written) → value.
/// Both write labels sorted by name, so the series strings compare as they
/// are.
fn series(expo: &str) -> BTreeMap<String, f64> {
    expo.lines()
        .filter(|l| l.starts_with("node_filesystem_"))
        .map(|l| {
            let (s, v) = l.rsplit_once(' ').unwrap();
            (s.to_string(), v.parse().unwrap())
        })
        .collect()
}

/// The `# HELP` and `# TYPE` lines of the `node_filesystem_*` families.
fn headers(expo: &str) -> Vec<&str> {
    expo.lines()
        .filter(|l| {
            l.strip_prefix("# HELP ")
                .or_else(|| l.strip_prefix("# TYPE "))
                .is_some_and(|r| r.starts_with("node_filesystem_"))
        })
        .collect()
}

fn mount_point(series: &str) -> &str {
    series
        .split("mountpoint=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or("")
}

/// Families whose value moves between two reads.
fn volatile(series: &str) -> bool {
    ["_free_bytes{", "_avail_bytes{", "_files_free{"]
        .iter()
        .any(|f| series.contains(f))
}

/// The size the slack of a volatile value is taken from.
fn size_of(all: &BTreeMap<String, f64>, series: &str) -> f64 {
    let base = if series.contains("_files_free{") {
        series.replacen("_files_free{", "_files{", 1)
    } else {
        let name_end = series.find('{').unwrap();
        format!("node_filesystem_size_bytes{}", &series[name_end..])
    };
    all.get(&base).copied().unwrap_or(0.0)
}

/// usescope, node_exporter, usescope again: the same series, equal values
/// except the volatile ones, which node_exporter must have between
/// usescope's two (± 0.5% of the size). Series of mount points that came
/// or went between the scrapes (other tests' mounts) are left out.
fn compare_live(what: &str, ne_bin: &Path, args: &[String]) -> usize {
    let d = usescope(args);
    let ne = NodeExporter::start(ne_bin, args);
    let (ours_text, theirs_text) = (d.scrape(), ne.scrape());
    assert_eq!(
        headers(&ours_text),
        headers(&theirs_text),
        "{what}: HELP and TYPE lines (left usescope, right node_exporter)"
    );
    let before = series(&ours_text);
    let theirs = series(&theirs_text);
    let after = series(&d.scrape());
    let mounts = |m: &BTreeMap<String, f64>| -> BTreeSet<String> {
        m.keys().map(|s| mount_point(s).to_string()).collect()
    };
    let stable: BTreeSet<String> = mounts(&before)
        .intersection(&mounts(&theirs))
        .cloned()
        .collect::<BTreeSet<_>>()
        .intersection(&mounts(&after))
        .cloned()
        .collect();
    let keep = |m: &BTreeMap<String, f64>| -> BTreeMap<String, f64> {
        m.iter()
            .filter(|(s, _)| stable.contains(mount_point(s)))
            .map(|(s, v)| (s.clone(), *v))
            .collect()
    };
    let (before, theirs, after) = (keep(&before), keep(&theirs), keep(&after));
    let ours: BTreeSet<&String> = before.keys().collect();
    let want: BTreeSet<&String> = theirs.keys().collect();
    assert_eq!(
        ours, want,
        "{what}: series differ (left usescope, right node_exporter)"
    );
    let mut bad = Vec::new();
    for (s, &v) in &theirs {
        let (a, b) = (before[s], after.get(s).copied().unwrap_or(before[s]));
        let ok = if volatile(s) {
            let slack = 0.005 * size_of(&theirs, s);
            v >= a.min(b) - slack && v <= a.max(b) + slack
        } else {
            v == a
        };
        if !ok {
            bad.push(format!("{s}: node_exporter {v}, usescope {a} then {b}"));
        }
    }
    assert!(bad.is_empty(), "{what}: values differ:\n{}", bad.join("\n"));
    assert!(!theirs.is_empty(), "{what}: no series at all");
    theirs.len()
}

/// Both once on a fixture tree with an absent rootfs: exactly equal.
fn compare_exact(what: &str, ne_bin: &Path, args: &[String]) -> usize {
    let d = usescope(args);
    let ne = NodeExporter::start(ne_bin, args);
    let ours = series(&d.scrape());
    let theirs = series(&ne.scrape());
    assert_eq!(ours, theirs, "{what} (left usescope, right node_exporter)");
    assert!(!theirs.is_empty(), "{what}: no series at all");
    theirs.len()
}

#[test]
fn same_series_and_values_as_node_exporter() {
    let Some(ne) = common::node_exporter() else {
        return;
    };
    let types = format!("--collector.filesystem.fs-types-exclude={FS_TYPES_EXCLUDE}");
    let absent = format!("--path.rootfs={}", common::ABSENT_ROOTFS);

    let n = compare_live("live host", &ne, std::slice::from_ref(&types));
    assert!(n >= 9, "live host: only {n} series (no mount reported?)");

    // A rootfs that is not `/` but leads there: the same statfs results
    // through rootfs + mount point.
    let link_dir = tempfile::tempdir().unwrap();
    let link = link_dir.path().join("host");
    std::os::unix::fs::symlink("/", &link).unwrap();
    let rootfs = format!("--path.rootfs={}", link.display());
    compare_live(
        "live host, rootfs a symlink to /",
        &ne,
        &[types.clone(), rootfs],
    );

    let captured = format!("--path.procfs={}", fixture("proc").display());
    compare_exact(
        "captured fixture, absent rootfs",
        &ne,
        &[captured, absent.clone()],
    );

    let tree = node_exporter_fixture();
    if common::skip::unless_met(
        tree.is_some(),
        "node_exporter's fixture tree in the Go module cache (go mod download github.com/prometheus/node_exporter@v1.12.1)",
    ) && let Some(tree) = tree
    {
        let procfs = format!("--path.procfs={}", tree.display());
        let n = compare_exact(
            "node_exporter's fixture, absent rootfs",
            &ne,
            &[procfs.clone(), absent],
        );
        assert!(n >= 16, "{n}");
        compare_live("node_exporter's fixture, rootfs /", &ne, &[procfs]);
    }
}
