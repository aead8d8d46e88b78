//! Cross-check against an independent parser: the `procfs` crate.
//!
//! Each source is read ONCE into a string (the live /proc of the machine
//! running the test, then the captured `proc` and synthetic `large` fixture
//! trees) and that same string goes through usescope's parser and
//! procfs-core's. Every value both expose must be exactly equal. Where
//! procfs differs on purpose or lacks a field, the comment at the check
//! says so; nothing else is skipped.
//!
//! Field names of procfs's wide structs (Meminfo, Snmp, Snmp6) are matched
//! through their Debug output, normalized with the kernel names to
//! lowercase letters and digits (`Active(anon)` ~ `active_anon`), so a
//! field procfs adds later is compared without touching this file.

use std::collections::HashMap;
use std::fs;
use std::io::Cursor;
use std::path::{Path, PathBuf};

use procfs::net::{InterfaceDeviceStatus, Snmp, Snmp6};
use procfs::{DiskStats, FromBufRead, FromBufReadSI, FromRead, KernelStats, LoadAverage};
use procfs::{Meminfo, VmStat, current_system_info};
use usescope::collectors::{diskstats, loadavg, meminfo, netdev, netstat, vmstat};
use usescope::kernel::parse::parse_fresh;
use usescope::kernel::proc_stat;
use usescope::scrape::exposition::Value;

/// A parser's whole output as a Vec, panicking with `ctx` on an error.
fn all<'t, T>(
    text: &'t str,
    ctx: &str,
    parse_into: fn(&'t str, &mut Vec<T>) -> Result<(), usescope::kernel::error::ParseError>,
) -> Vec<T> {
    let mut out = Vec::new();
    parse_into(text, &mut out).unwrap_or_else(|e| panic!("{ctx}: usescope: {e}"));
    out
}

/// The trees every source is checked on: live, captured, synthetic.
fn trees() -> Vec<PathBuf> {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    vec![
        PathBuf::from("/proc"),
        fixtures.join("proc"),
        fixtures.join("large"),
    ]
}

/// Runs `check` on `rel` in each tree where it exists, passing the text
/// read once and a context string for messages. Returns how many trees ran.
fn each_tree(rel: &str, check: impl Fn(&str, &str)) -> usize {
    let mut ran = 0;
    for tree in trees() {
        let path = tree.join(rel);
        let Ok(text) = fs::read_to_string(&path) else {
            continue;
        };
        check(&text, &path.display().to_string());
        ran += 1;
    }
    ran
}

/// Lowercase letters and digits only: `Active(anon)`, `active_anon` and
/// `ActiveAnon` compare equal.
fn norm(name: &str) -> String {
    name.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// `Type { a: 1, b: Some(2), c: None, d: Forwarding }` → {norm(a): "1", …},
/// `Some(x)` unwrapped and `None` left out. procfs-core is built without
/// serde here, so Debug is the only generic view of its field names.
fn debug_fields(debug: &str) -> HashMap<String, String> {
    let body = debug
        .split_once(" { ")
        .and_then(|(_, rest)| rest.strip_suffix(" }"))
        .unwrap_or_else(|| panic!("unexpected Debug shape: {debug}"));
    body.split(", ")
        .filter_map(|kv| {
            let (k, v) = kv.split_once(": ")?;
            let v = v
                .strip_prefix("Some(")
                .and_then(|v| v.strip_suffix(')'))
                .unwrap_or(v);
            (v != "None").then(|| (norm(k), v.to_string()))
        })
        .collect()
}

fn value_string(v: Value) -> String {
    match v {
        Value::U64(v) => v.to_string(),
        Value::I64(v) => v.to_string(),
        Value::F64(v) => panic!("snmp counter parsed as float {v}"),
    }
}

#[test]
fn stat_matches_procfs() {
    let ran = each_tree("stat", |text, ctx| {
        let ours = parse_fresh(text, proc_stat::parse_into)
            .unwrap_or_else(|e| panic!("{ctx}: usescope: {e}"));
        let theirs = KernelStats::from_buf_read(Cursor::new(text), current_system_info())
            .unwrap_or_else(|e| panic!("{ctx}: procfs: {e}"));
        assert_eq!(ours.cpus.len(), theirs.cpu_time.len(), "{ctx}: CPU rows");
        for ((id, ticks), cpu) in ours.cpus.iter().zip(&theirs.cpu_time) {
            // procfs leaves columns an old kernel lacks as None; usescope
            // reads them as 0, like node_exporter.
            let their_ticks = [
                cpu.user,
                cpu.nice,
                cpu.system,
                cpu.idle,
                cpu.iowait.unwrap_or(0),
                cpu.irq.unwrap_or(0),
                cpu.softirq.unwrap_or(0),
                cpu.steal.unwrap_or(0),
                cpu.guest.unwrap_or(0),
                cpu.guest_nice.unwrap_or(0),
            ];
            for (mode, (a, b)) in proc_stat::COLUMNS.iter().zip(ticks.iter().zip(their_ticks)) {
                assert_eq!(*a, b, "{ctx}: cpu{id} {mode}");
            }
        }
        // procfs has no `intr` field, so the interrupt total is not
        // cross-checked here (it is covered by stat's unit tests).
        assert_eq!(ours.context_switches, theirs.ctxt, "{ctx}: ctxt");
        assert_eq!(ours.forks, theirs.processes, "{ctx}: processes");
        assert_eq!(ours.boot_time, theirs.btime, "{ctx}: btime");
        let running = theirs.procs_running.map(u64::from);
        let blocked = theirs.procs_blocked.map(u64::from);
        assert_eq!(Some(ours.procs_running), running, "{ctx}: procs_running");
        assert_eq!(Some(ours.procs_blocked), blocked, "{ctx}: procs_blocked");
    });
    assert_eq!(ran, 3);
}

#[test]
fn loadavg_matches_procfs() {
    let ran = each_tree("loadavg", |text, ctx| {
        let ours = parse_fresh(text, loadavg::parse_into)
            .unwrap_or_else(|e| panic!("{ctx}: usescope: {e}"));
        let theirs = LoadAverage::from_read(Cursor::new(text))
            .unwrap_or_else(|e| panic!("{ctx}: procfs: {e}"));
        // procfs parses into f32, usescope into f64, so the comparison is
        // at f32 precision: ours rounded to f32 equals the decimal rounded
        // straight to f32 for the kernel's two-decimal values.
        assert_eq!(ours.one as f32, theirs.one, "{ctx}: 1m");
        assert_eq!(ours.five as f32, theirs.five, "{ctx}: 5m");
        assert_eq!(ours.fifteen as f32, theirs.fifteen, "{ctx}: 15m");
    });
    assert_eq!(ran, 3);
}

#[test]
fn meminfo_matches_procfs() {
    let ran = each_tree("meminfo", |text, ctx| {
        let ours = parse_fresh(text, meminfo::parse_into)
            .unwrap_or_else(|e| panic!("{ctx}: usescope: {e}"));
        let theirs = Meminfo::from_buf_read(Cursor::new(text))
            .unwrap_or_else(|e| panic!("{ctx}: procfs: {e}"));
        let theirs = debug_fields(&format!("{theirs:?}"));
        let mut compared = 0;
        for key in text
            .lines()
            .filter_map(|l| l.split_once(':').map(|(k, _)| k))
        {
            let (Some(a), Some(b)) = (ours.get(key), theirs.get(&norm(key))) else {
                continue;
            };
            assert_eq!(a.to_string(), *b, "{ctx}: {key}");
            compared += 1;
        }
        assert!(
            compared >= 20,
            "{ctx}: only {compared} meminfo fields in common"
        );
    });
    assert_eq!(ran, 3);
}

#[test]
fn vmstat_matches_procfs() {
    let ran = each_tree("vmstat", |text, ctx| {
        let theirs = VmStat::from_buf_read(Cursor::new(text))
            .unwrap_or_else(|e| panic!("{ctx}: procfs: {e}"));
        let mut n = 0;
        for f in all(text, ctx, vmstat::parse_into) {
            let b = theirs
                .0
                .get(f.name)
                .unwrap_or_else(|| panic!("{ctx}: procfs lacks {}", f.name));
            assert_eq!(i64::try_from(f.value).ok(), Some(*b), "{ctx}: {}", f.name);
            n += 1;
        }
        assert_eq!(n, theirs.0.len(), "{ctx}: field count");
    });
    assert_eq!(ran, 3);
}

#[test]
fn diskstats_matches_procfs() {
    let ran = each_tree("diskstats", |text, ctx| {
        let theirs = DiskStats::from_buf_read(Cursor::new(text))
            .unwrap_or_else(|e| panic!("{ctx}: procfs: {e}"))
            .0;
        let ours = all(text, ctx, diskstats::parse_into);
        assert_eq!(ours.len(), theirs.len(), "{ctx}: devices");
        for (a, b) in ours.iter().zip(&theirs) {
            let dev = format!("{ctx}: {}", b.name);
            assert_eq!(a.name, b.name, "{ctx}: device order");
            assert_eq!(
                i64::try_from(a.major).ok(),
                Some(i64::from(b.major)),
                "{dev} major"
            );
            assert_eq!(
                i64::try_from(a.minor).ok(),
                Some(i64::from(b.minor)),
                "{dev} minor"
            );
            let theirs = [
                Some(b.reads),
                Some(b.merged),
                Some(b.sectors_read),
                Some(b.time_reading),
                Some(b.writes),
                Some(b.writes_merged),
                Some(b.sectors_written),
                Some(b.time_writing),
                Some(b.in_progress),
                Some(b.time_in_progress),
                Some(b.weighted_time_in_progress),
                b.discards,
                b.discards_merged,
                b.sectors_discarded,
                b.time_discarding,
                b.flushes,
                b.time_flushing,
            ];
            for (i, want) in theirs.iter().enumerate() {
                let got = (i < a.count).then(|| a.stats[i]);
                assert_eq!(got, *want, "{dev} column {}", i + 4);
            }
        }
    });
    assert_eq!(ran, 3);
}

#[test]
fn netdev_matches_procfs() {
    let ran = each_tree("net/dev", |text, ctx| {
        let theirs = InterfaceDeviceStatus::from_buf_read(Cursor::new(text))
            .unwrap_or_else(|e| panic!("{ctx}: procfs: {e}"))
            .0;
        let mut n = 0;
        for a in all(text, ctx, netdev::parse_into) {
            let b = theirs
                .get(a.name)
                .unwrap_or_else(|| panic!("{ctx}: procfs lacks {}", a.name));
            let want = [
                b.recv_bytes,
                b.recv_packets,
                b.recv_errs,
                b.recv_drop,
                b.recv_fifo,
                b.recv_frame,
                b.recv_compressed,
                b.recv_multicast,
                b.sent_bytes,
                b.sent_packets,
                b.sent_errs,
                b.sent_drop,
                b.sent_fifo,
                b.sent_colls,
                b.sent_carrier,
                b.sent_compressed,
            ];
            assert_eq!(a.values, want, "{ctx}: {}", a.name);
            n += 1;
        }
        assert_eq!(n, theirs.len(), "{ctx}: interfaces");
    });
    assert_eq!(ran, 3);
}

/// procfs turns `Ip: Forwarding` and `Tcp: RtoAlgorithm` into enums; their
/// Debug names map back to the kernel's numbers (RFC 1213 values).
const SNMP_ENUMS: [(&str, &str); 6] = [
    ("Forwarding", "1"),
    ("NotForwarding", "2"),
    ("Other", "1"),
    ("Constant", "2"),
    ("Rsre", "3"),
    ("Vanj", "4"),
];

#[test]
fn snmp_matches_procfs() {
    let ran = each_tree("net/snmp", |text, ctx| {
        let theirs =
            Snmp::from_buf_read(Cursor::new(text)).unwrap_or_else(|e| panic!("{ctx}: procfs: {e}"));
        let theirs = debug_fields(&format!("{theirs:?}"));
        let mut ours = HashMap::new();
        for s in all(text, ctx, netstat::parse_into) {
            for (name, value) in s.fields() {
                let v = netstat::number(value, s.line, name)
                    .unwrap_or_else(|e| panic!("{ctx}: usescope: {e}"));
                ours.insert(norm(&format!("{}{name}", s.proto)), value_string(v));
            }
        }
        for (key, want) in &theirs {
            let want = SNMP_ENUMS
                .iter()
                .find(|(name, _)| name == want)
                .map_or(want.as_str(), |(_, number)| number);
            let got = ours
                .get(key)
                .unwrap_or_else(|| panic!("{ctx}: usescope lacks {key}"));
            assert_eq!(got, want, "{ctx}: {key}");
        }
        assert!(
            theirs.len() > 60,
            "{ctx}: only {} snmp fields",
            theirs.len()
        );
    });
    assert_eq!(ran, 3);
}

/// procfs field names that are not the kernel's: (procfs, kernel), both
/// normalized. procfs spells `Icmp6InParmProblems` without the final `s`.
const SNMP6_RENAMED: [(&str, &str); 1] = [("icmpinparmproblem", "icmpinparmproblems")];

#[test]
fn snmp6_matches_procfs() {
    let ran = each_tree("net/snmp6", |text, ctx| {
        let theirs = Snmp6::from_buf_read(Cursor::new(text))
            .unwrap_or_else(|e| panic!("{ctx}: procfs: {e}"));
        let theirs = debug_fields(&format!("{theirs:?}"));
        // procfs drops the `6` from its field names (`Ip6InReceives` is
        // `ip_in_receives`), so it is dropped from usescope's too.
        let ours: HashMap<String, String> = all(text, ctx, netstat::parse_snmp6_into)
            .into_iter()
            .map(|f| (norm(&f.name.replace('6', "")), value_string(f.value)))
            .collect();
        for (key, want) in &theirs {
            let kernel = SNMP6_RENAMED
                .iter()
                .find(|(procfs, _)| procfs == key)
                .map_or(key.as_str(), |(_, kernel)| kernel);
            let got = ours
                .get(kernel)
                .unwrap_or_else(|| panic!("{ctx}: usescope lacks {key}"));
            assert_eq!(got, want, "{ctx}: {key}");
        }
        assert!(
            theirs.len() > 50,
            "{ctx}: only {} snmp6 fields",
            theirs.len()
        );
    });
    assert_eq!(ran, 3);
}

/// mountinfo: the live /proc/self/mountinfo and /proc/1/mountinfo, and both
/// fixture trees. procfs differs on purpose in one place: it reads the
/// source `none` as no source, where procfs (Go) and node_exporter keep the
/// string.
#[test]
fn mountinfo_matches_procfs() {
    use procfs::process::MountInfos;
    use usescope::kernel::mountinfo;
    let mut ran = 0;
    for rel in ["self/mountinfo", "1/mountinfo"] {
        ran += each_tree(rel, |text, ctx| {
            let ours = all(text, ctx, mountinfo::parse_into);
            let theirs = MountInfos::from_buf_read(Cursor::new(text))
                .unwrap_or_else(|e| panic!("{ctx}: procfs: {e}"));
            assert_eq!(ours.len(), theirs.0.len(), "{ctx}: mounts");
            for (o, t) in ours.iter().zip(&theirs.0) {
                let line = format!("{ctx}: mount {}", o.mount_id);
                assert_eq!(o.mount_id, t.mnt_id as u64, "{line}");
                assert_eq!(o.parent_id, t.pid as u64, "{line}");
                assert_eq!(format!("{}:{}", o.major, o.minor), t.majmin, "{line}");
                assert_eq!(o.root, t.root, "{line}");
                assert_eq!(Path::new(o.mount_point), t.mount_point, "{line}");
                assert_eq!(o.fs_type, t.fs_type, "{line}");
                let source = (!matches!(o.source, "none" | "")).then_some(o.source);
                assert_eq!(source, t.mount_source.as_deref(), "{line}");
                let keys = |opts: &str| -> std::collections::BTreeSet<String> {
                    opts.split(',')
                        .map(|o| o.split('=').next().unwrap().to_string())
                        .collect()
                };
                let their_keys = |m: &HashMap<String, Option<String>>| m.keys().cloned().collect();
                assert_eq!(keys(o.options), their_keys(&t.mount_options), "{line}");
                assert_eq!(
                    keys(o.super_options),
                    their_keys(&t.super_options),
                    "{line}"
                );
            }
        });
    }
    assert!(ran >= 3, "mountinfo checked on {ran} trees");
}
