//! Bad input, end to end: each /proc and sysfs file a collector reads is
//! corrupted in a copy of the captured trees while the real daemon serves
//! it. The files
//! and their owners come from the collector registry (each spec's
//! `sources`), so a registered collector is fault-tested without an edit.
//!
//! For every file and every corruption:
//! - the scrape still answers 200 and nothing panics;
//! - the owning collector either parses it or reports success 0 and logs
//!   the file (and line, where there is one) — garbage must fail, and so
//!   must u64 overflow where the format's values are numbers;
//! - invalid UTF-8 need not fail: SourceFile drops the bad line, warns
//!   with the file and the line, and the parser gets the rest. If the
//!   collector does fail, the log names the file and a line;
//! - every other collector's output is byte-for-byte unchanged;
//! - once the file is repaired, the next scrape succeeds again.
//!
//! Deleting a file models a kernel without the feature: success stays 1
//! and the collector's series disappear, then come back.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::common::{Daemon, copy_dir, fixture};
use usescope::collectors::{ALL, Root};

/// A file a collector reads: root, path under it, owner, whether its
/// values are numbers.
struct File {
    root: Root,
    path: &'static str,
    collector: &'static str,
    numeric: bool,
}

/// Every source of every registered collector.
fn files() -> Vec<File> {
    let mut out = Vec::new();
    for spec in ALL {
        // Textfile and udev sources are read through their own settings (a
        // directory, the udev database); their collectors' tests cover them.
        for s in spec
            .sources
            .iter()
            .filter(|s| matches!(s.root, Root::Procfs | Root::Sysfs))
        {
            let parser = spec.parsers.iter().find(|p| p.name == s.parser);
            out.push(File {
                root: s.root,
                path: s.path,
                collector: spec.name,
                numeric: parser.is_some_and(|p| p.numeric),
            });
        }
    }
    out
}

/// Collectors that read their files as bytes, not through SourceFile's
/// line-by-line UTF-8 check: a /proc/[pid]/stat command name may be any
/// bytes, so nothing is dropped and nothing is logged for invalid UTF-8.
const RAW_BYTES: &[&str] = &["processes"];

/// What a corruption requires of the owning collector.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Parsing it or failing are both fine.
    Either,
    /// It must fail.
    Fail,
    /// It must fail if the format's values are numbers (and the corruption
    /// changed anything).
    FailIfNumeric,
    /// Either, but a failure must name a line.
    EitherNamingALine,
}

/// A corruption of a file's bytes, and what the collector must do with it.
struct Variant {
    name: &'static str,
    expect: Expect,
    apply: fn(&[u8]) -> Vec<u8>,
}

fn lines_map(b: &[u8], f: impl Fn(usize, &str) -> String) -> Vec<u8> {
    let s = String::from_utf8_lossy(b);
    let mut out = String::new();
    for (i, l) in s.lines().enumerate() {
        out.push_str(&f(i, l));
        out.push('\n');
    }
    out.into_bytes()
}

/// Replaces the first whitespace-delimited number (or the number of a
/// `key=number` token, as in PSI files) with a value past u64::MAX, keeping
/// every separator as it was.
fn overflow_first_number(b: &[u8]) -> Vec<u8> {
    let s = String::from_utf8_lossy(b);
    let mut start = 0;
    for tok in s.split_inclusive(char::is_whitespace) {
        let word = tok.trim_end_matches(char::is_whitespace);
        let digits_at = word.find('=').map_or(0, |i| i + 1);
        let digits = &word[digits_at..];
        if !digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit()) {
            let at = start + digits_at;
            let mut out = s[..at].to_string();
            out.push_str("99999999999999999999999");
            out.push_str(&s[at + digits.len()..]);
            return out.into_bytes();
        }
        start += tok.len();
    }
    s.into_owned().into_bytes()
}

const VARIANTS: &[Variant] = &[
    Variant {
        name: "garbage",
        expect: Expect::Fail,
        apply: |_| b"\x01garbage here\n%%% not a kernel file %%%\n:::\n".to_vec(),
    },
    Variant {
        name: "invalid-utf8",
        expect: Expect::EitherNamingALine,
        apply: |b| {
            let mut v = b.to_vec();
            let at = v.iter().position(|&c| c == b'\n').map_or(0, |p| p + 1);
            v.splice(at..at, [0xff, 0xfe, b' ']);
            v
        },
    },
    Variant {
        name: "u64-overflow",
        expect: Expect::FailIfNumeric,
        apply: overflow_first_number,
    },
    Variant {
        name: "empty",
        expect: Expect::Either,
        apply: |_| Vec::new(),
    },
    Variant {
        name: "truncated",
        expect: Expect::Either,
        apply: |b| b[..b.len() / 2].to_vec(),
    },
    Variant {
        name: "missing-column",
        expect: Expect::Either,
        apply: |b| {
            lines_map(b, |i, l| {
                if i == 1 {
                    l.rsplit_once(' ')
                        .map_or(String::new(), |(a, _)| a.to_string())
                } else {
                    l.to_string()
                }
            })
        },
    },
    Variant {
        name: "extra-column",
        expect: Expect::Either,
        apply: |b| lines_map(b, |_, l| format!("{l} 7")),
    },
];

/// Lines that legitimately differ between two scrapes of a static tree.
fn volatile(line: &str) -> bool {
    let family = family_of(line);
    family.starts_with("process_")
        || family.starts_with("node_timex_")
        || family == "node_time_seconds"
        || family == "node_exporter_build_info"
        || family.starts_with("node_scrape_collector_")
        || family.starts_with("usescope_probe")
        || family.starts_with("usescope_bpf_")
        || family == "usescope_build_info"
}

/// Families read from the running kernel rather than the tree, so they
/// move between two scrapes of one tree: tcpsockets asks inet_diag for the
/// daemon's own sockets. They are still a collector's own families.
fn from_running_kernel(line: &str) -> bool {
    family_of(line).starts_with("usescope_tcp_")
}

/// The exposition without volatile lines and without `owned` families.
fn others(expo: &str, owned: &BTreeSet<String>) -> Vec<String> {
    expo.lines()
        .filter(|l| !volatile(l) && !from_running_kernel(l))
        .filter(|l| !owned.contains(family_of(l)))
        .map(str::to_string)
        .collect()
}

/// Families two collectors write, each when the other has not: cpu's
/// `node_cpu_frequency_hertz` (/proc/cpuinfo, with `--collector.cpu.info`)
/// and cpufreq's (sysfs). When one fails, the other's is still written.
const WRITTEN_BY_TWO: &[&str] = &["node_cpu_frequency_hertz"];

fn family_of(line: &str) -> &str {
    let l = line
        .strip_prefix("# HELP ")
        .or_else(|| line.strip_prefix("# TYPE "))
        .unwrap_or(line);
    let end = l.find(['{', ' ']).unwrap_or(l.len());
    &l[..end]
}

/// Whether a log line after the first `skip` matches, waiting up to 2 s
/// for the log reader to catch up.
fn logged_since(d: &Daemon, skip: usize, matches: impl Fn(&str) -> bool) -> bool {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        if d.log().iter().skip(skip).any(|l| matches(l)) {
            return true;
        }
        if std::time::Instant::now() > end {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn success(expo: &str, collector: &str) -> Option<f64> {
    crate::common::sample(
        expo,
        &format!("node_scrape_collector_success{{collector=\"{collector}\"}}"),
    )
}

const NO_PROBES: &[&str] = &[
    "--no-probe.runqlat",
    "--no-probe.cachestat",
    "--no-probe.drops",
];

/// Collectors that, as node_exporter does, skip one unreadable sensor or
/// namespace attribute and report the rest: a corrupted attribute costs
/// its series, not the collector (their unit tests check which).
/// cpu: node_exporter skips an unreadable throttle count too, and a
/// CPU's topology is read once and kept, so a later corruption of it is
/// not seen (docs/collectors/system.md).
/// dmi: its strings are read once, at start-up, as node_exporter reads
/// them (docs/collectors/dmi.md); a later corruption is not seen.
const SKIP_BAD_ATTRIBUTES: &[&str] = &["hwmon", "nvme", "cpu", "dmi"];

/// The sysfs copy that goes with a procfs copy: `sys` next to it.
fn sys_of(tree: &Path) -> PathBuf {
    tree.with_file_name("sys")
}

/// Where a source is in the copies.
fn path_of(tree: &Path, f: &File) -> PathBuf {
    match f.root {
        Root::Procfs => tree.join(f.path),
        Root::Sysfs => sys_of(tree).join(f.path),
        Root::Textfile | Root::Udev | Root::Rootfs => {
            unreachable!("files() keeps procfs and sysfs sources")
        }
    }
}

/// A copy of the captured tree, plus the synthetic tree's file for every
/// source the capture host lacked (schedstat, pressure/irq), and next to
/// it a copy of the sysfs tree (see [`sys_of`]); both removed when the
/// returned guard drops.
fn tree_with_every_source() -> (tempfile::TempDir, PathBuf) {
    let dir = crate::common::temp_dir();
    let tree = dir.path().join("proc");
    copy_dir(&fixture("proc"), &tree);
    copy_dir(&fixture("sys"), &sys_of(&tree));
    for f in files().iter().filter(|f| f.root == Root::Procfs) {
        let (dest, large) = (tree.join(f.path), fixture("large").join(f.path));
        if !dest.exists() && large.exists() {
            std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
            std::fs::copy(large, dest).unwrap();
        }
    }
    (dir, tree)
}

/// `--collector.NAME` for every collector that is off by default, and
/// every flag without which a collector skips one of its files.
fn every_collector() -> Vec<String> {
    ALL.iter()
        .filter(|s| !s.default_enabled)
        .map(|s| format!("--collector.{}", s.name))
        .chain(read_with_flags(None))
        .collect()
}

/// `--FLAG` for each source (of `collector`, or of all) read only with it.
fn read_with_flags(collector: Option<&str>) -> Vec<String> {
    let mut flags: Vec<String> = ALL
        .iter()
        .filter(|s| collector.is_none_or(|c| c == s.name))
        .flat_map(|s| s.sources.iter().filter_map(|src| src.read_with))
        .map(|f| format!("--{f}"))
        .collect();
    flags.dedup();
    flags
}

fn start(tree: &Path, extra: &[&str]) -> Daemon {
    let mut args = vec![
        format!("--path.procfs={}", tree.display()),
        format!("--path.sysfs={}", sys_of(tree).display()),
        // The same filesystem output on every scrape (see ABSENT_ROOTFS).
        format!("--path.rootfs={}", crate::common::ABSENT_ROOTFS),
    ];
    args.extend(NO_PROBES.iter().map(|s| s.to_string()));
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    Daemon::start(&refs)
}

/// Families a collector emits on the intact tree.
fn owned_families(tree: &Path, collector: &str) -> BTreeSet<String> {
    let mut args = vec![
        "--collector.disable-defaults".to_string(),
        format!("--collector.{collector}"),
    ];
    args.extend(read_with_flags(Some(collector)));
    let d = start(tree, &args.iter().map(String::as_str).collect::<Vec<_>>());
    let expo = d.scrape();
    expo.lines()
        .filter(|l| !volatile(l))
        .map(|l| family_of(l).to_string())
        .filter(|f| !f.is_empty())
        .collect()
}

#[test]
fn every_file_every_corruption() {
    let (_dir, tree) = tree_with_every_source();
    let all = every_collector();
    let daemon = start(&tree, &all.iter().map(String::as_str).collect::<Vec<_>>());
    let baseline = daemon.scrape();
    let mut failures = Vec::new();
    let mut owned_by = BTreeMap::new();
    for f in files() {
        let (file, collector, numeric) = (f.path, f.collector, f.numeric);
        let path = path_of(&tree, &f);
        let Ok(original) = std::fs::read(&path) else {
            failures.push(format!(
                "{file} ({collector}): no fixture in proc/, large/ or sys/"
            ));
            continue;
        };
        let owned = owned_by
            .entry(collector)
            .or_insert_with(|| owned_families(&tree, collector))
            .clone();
        assert!(
            !owned.is_empty(),
            "{collector} emits nothing on the fixture"
        );
        // A file two collectors read (/proc/stat: cpu and stat, as in
        // node_exporter) takes both down; neither counts as "another".
        let mut shared = owned.clone();
        for other in files()
            .iter()
            .filter(|f| f.path == file && f.collector != collector)
        {
            shared.extend(
                owned_by
                    .entry(other.collector)
                    .or_insert_with(|| owned_families(&tree, other.collector))
                    .iter()
                    .cloned(),
            );
        }
        assert_eq!(
            success(&baseline, collector),
            Some(1.0),
            "{collector} fails on the intact fixture"
        );
        let base_others = others(&baseline, &shared);
        for v in VARIANTS {
            let corrupted = (v.apply)(&original);
            let must_fail = !SKIP_BAD_ATTRIBUTES.contains(&collector)
                && match v.expect {
                    Expect::Fail => true,
                    Expect::FailIfNumeric => numeric && corrupted != original,
                    Expect::Either | Expect::EitherNamingALine => false,
                };
            std::fs::write(&path, &corrupted).unwrap();
            let logged = daemon.log().len();
            let r = daemon.get("/metrics");
            let case = format!("{file} / {}", v.name);
            if r.status != 200 {
                failures.push(format!("{case}: status {}", r.status));
                std::fs::write(&path, &original).unwrap();
                continue;
            }
            let expo = r.text();
            let ok = success(&expo, collector);
            if must_fail && ok != Some(0.0) {
                failures.push(format!("{case}: expected success 0, got {ok:?}"));
            }
            if ok == Some(0.0) {
                let emitted: Vec<&str> = expo
                    .lines()
                    .filter(|l| {
                        !volatile(l)
                            && owned.contains(family_of(l))
                            && !WRITTEN_BY_TWO.contains(&family_of(l))
                    })
                    .collect();
                // conntrack's stat file and sysctls are separate families of
                // one collector: a failure drops all of them.
                if !emitted.is_empty() {
                    failures.push(format!(
                        "{case}: failed collector still emitted {:?}",
                        &emitted[..emitted.len().min(3)]
                    ));
                }
                let needle = path.display().to_string();
                // A one-value sysfs attribute has no line worth naming.
                let line_needed = v.expect == Expect::EitherNamingALine && f.root == Root::Procfs;
                // Only this scrape's lines: the repair in between made the
                // failure new again, so it is logged at warn.
                if !logged_since(&daemon, logged, |l| {
                    l.contains(&needle)
                        && l.contains("collector failed")
                        && (!line_needed || l.contains("line="))
                }) {
                    failures.push(format!(
                        "{case}: no log line naming {needle}{}",
                        if line_needed { " and a line" } else { "" }
                    ));
                }
            }
            // Multi-line /proc files go through SourceFile's per-line UTF-8
            // check; sysfs attributes are one value, read whole, and some
            // collectors read raw bytes.
            if v.expect == Expect::EitherNamingALine
                && f.root == Root::Procfs
                && !RAW_BYTES.contains(&collector)
            {
                let needle = path.display().to_string();
                if !logged_since(&daemon, logged, |l| {
                    l.contains(&needle) && l.contains("line 2 is not valid UTF-8; skipped")
                }) {
                    failures.push(format!("{case}: no warning naming {needle} and its line"));
                }
            }
            if others(&expo, &shared) != base_others {
                failures.push(format!("{case}: another collector's output changed"));
            }
            std::fs::write(&path, &original).unwrap();
            let repaired = daemon.scrape();
            if success(&repaired, collector) != Some(1.0) {
                failures.push(format!("{case}: repaired file did not recover"));
            }
        }
    }
    let log = daemon.log();
    if let Some(p) = log.iter().find(|l| l.contains("panicked")) {
        failures.push(format!("panic in log: {p}"));
    }
    assert!(
        failures.is_empty(),
        "{} problems:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn garbage_log_names_file_and_line() {
    let (_dir, tree) = tree_with_every_source();
    std::fs::write(tree.join("loadavg"), "0.1 0.2 zz 1/2 3\n").unwrap();
    let d = start(&tree, &[]);
    let expo = d.scrape();
    assert_eq!(success(&expo, "loadavg"), Some(0.0));
    let line = d
        .wait_for_log("collector failed", std::time::Duration::from_secs(5))
        .expect("a warning");
    assert!(line.contains("collector=loadavg"), "{line}");
    assert!(
        line.contains(&tree.join("loadavg").display().to_string()),
        "{line}"
    );
    assert!(line.contains("line=1"), "{line}");
    assert!(line.contains("zz"), "{line}");
}

#[test]
fn absent_file_is_not_a_failure_and_comes_back() {
    let (_dir, tree) = tree_with_every_source();
    let d = start(&tree, &[]);
    let before = d.scrape();
    assert!(crate::common::sample(&before, "node_nf_conntrack_entries_limit").is_some());
    let moved = tree.join("conntrack-away");
    std::fs::create_dir_all(&moved).unwrap();
    let ct = tree.join("sys/net/netfilter");
    let stat = tree.join("net/stat/nf_conntrack");
    std::fs::rename(&ct, moved.join("netfilter")).unwrap();
    std::fs::rename(&stat, moved.join("nf_conntrack")).unwrap();
    let gone = d.scrape();
    assert_eq!(success(&gone, "conntrack"), Some(1.0));
    assert!(
        !gone.contains("node_nf_conntrack"),
        "series remain after module unload"
    );
    assert!(
        d.wait_for_log("source absent", std::time::Duration::from_secs(5))
            .is_some()
    );
    std::fs::rename(moved.join("netfilter"), &ct).unwrap();
    std::fs::rename(moved.join("nf_conntrack"), &stat).unwrap();
    let back = d.scrape();
    assert_eq!(success(&back, "conntrack"), Some(1.0));
    assert!(crate::common::sample(&back, "node_nf_conntrack_entries_limit").is_some());
}
