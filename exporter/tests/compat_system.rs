//! node_exporter compatibility of the system collectors (cpu, time, timex,
//! kernel_hung, os, processes): node_exporter v1.12 and usescope run side
//! by side on the same input, and for every family these collectors emit
//! the two expositions must agree on the family set, the type, the HELP
//! text, the label sets and the values.
//!
//! Inputs: the captured fixture tree (proc/, sys/, rootfs/), the
//! hand-written 2-socket tree with `--collector.cpu.info` and both include
//! filters, a rootfs holding only the hand-written usr/lib/os-release
//! (quotes, escapes, comments), and the live host (time, timex, os,
//! kernel_hung, cpu), where values that move between the two reads are
//! compared with a tolerance.
//!
//! node_exporter is `$NODE_EXPORTER`, else `~/go/bin/node_exporter`
//! (scripts/compat-node-exporter.sh installs it). Without it the tests
//! skip through common/skip.rs, and fail in CI (`USESCOPE_REQUIRE_BPF=1`
//! or `CI=true`), where a missing oracle is a failure.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Daemon, fixture, http_get};

/// A node_exporter process on a loopback port, killed (by its own pid) on
/// drop.
struct NodeExporter {
    child: Child,
    addr: SocketAddr,
}

impl NodeExporter {
    fn start(bin: &Path, args: &[String]) -> NodeExporter {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let child = Command::new(bin)
            .arg(format!("--web.listen-address={addr}"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn node_exporter");
        let ne = NodeExporter { child, addr };
        let end = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(addr).is_err() {
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

type Labels = BTreeMap<String, String>;

#[derive(Debug, Default)]
struct Family {
    kind: String,
    help: String,
    samples: Vec<(Labels, f64)>,
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c == '\\' {
            match it.next() {
                Some('n') => out.push('\n'),
                Some(o) => out.push(o),
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Families of a text exposition: type, HELP, samples with their labels.
fn parse(expo: &str) -> BTreeMap<String, Family> {
    let mut fams: BTreeMap<String, Family> = BTreeMap::new();
    for line in expo.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            fams.entry(name.to_string()).or_default().help = unescape(help);
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            fams.entry(name.to_string()).or_default().kind = kind.to_string();
        } else if !line.is_empty() && !line.starts_with('#') {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (n, parse_labels(l.strip_suffix('}').unwrap())),
                None => (series, Labels::new()),
            };
            let v: f64 = value.parse().unwrap_or_else(|_| panic!("value in {line}"));
            fams.entry(name.to_string())
                .or_default()
                .samples
                .push((labels, v));
        }
    }
    fams
}

fn parse_labels(s: &str) -> Labels {
    let mut out = Labels::new();
    let mut rest = s;
    while !rest.is_empty() {
        let (name, after) = rest.split_once("=\"").unwrap();
        let mut end = 0;
        let b = after.as_bytes();
        while b[end] != b'"' {
            end += if b[end] == b'\\' { 2 } else { 1 };
        }
        out.insert(name.to_string(), unescape(&after[..end]));
        rest = after[end + 1..].trim_start_matches(',');
    }
    out
}

/// How far apart two reads of a family may be.
fn tolerance(family: &str) -> f64 {
    match family {
        "node_time_seconds" => 5.0,
        "node_timex_offset_seconds" | "node_timex_pps_jitter_seconds" => 0.01,
        "node_timex_maxerror_seconds" | "node_timex_estimated_error_seconds" => 0.1,
        "node_timex_frequency_adjustment_ratio" => 1e-5,
        // Live counters move between the two scrapes.
        f if f.starts_with("node_cpu_seconds_total") || f.starts_with("node_cpu_guest") => 10.0,
        _ => 0.0,
    }
}

/// Compares the `wanted` families of node_exporter's (`ne`) and usescope's
/// (`us`) expositions; returns one line per difference.
fn compare(ne: &str, us: &str, wanted: impl Fn(&str) -> bool, live: bool) -> Vec<String> {
    let (ne, us) = (parse(ne), parse(us));
    let names: BTreeSet<&String> = ne.keys().chain(us.keys()).filter(|n| wanted(n)).collect();
    let mut diffs = Vec::new();
    assert!(!names.is_empty(), "no family selected");
    for name in names {
        let (Some(n), Some(u)) = (ne.get(name), us.get(name)) else {
            diffs.push(format!(
                "{name}: only in {}",
                if ne.contains_key(name) {
                    "node_exporter"
                } else {
                    "usescope"
                }
            ));
            continue;
        };
        if n.kind != u.kind {
            diffs.push(format!("{name}: type {} vs {}", n.kind, u.kind));
        }
        if n.help != u.help {
            diffs.push(format!("{name}: HELP {:?} vs {:?}", n.help, u.help));
        }
        let by_labels =
            |f: &Family| -> BTreeMap<Labels, f64> { f.samples.iter().cloned().collect() };
        let (nl, ul) = (by_labels(n), by_labels(u));
        if nl.len() != n.samples.len() || ul.len() != u.samples.len() {
            diffs.push(format!("{name}: duplicate series"));
        }
        let nk: BTreeSet<&Labels> = nl.keys().collect();
        let uk: BTreeSet<&Labels> = ul.keys().collect();
        if nk != uk {
            diffs.push(format!(
                "{name}: label sets differ: only node_exporter {:?}, only usescope {:?}",
                nk.difference(&uk).take(3).collect::<Vec<_>>(),
                uk.difference(&nk).take(3).collect::<Vec<_>>()
            ));
            continue;
        }
        let tol = if live { tolerance(name) } else { 0.0 };
        let tol = if name == "node_time_seconds" {
            5.0
        } else {
            tol
        };
        for (labels, nv) in &nl {
            let uv = ul[labels];
            let same = nv == &uv
                || (nv.is_nan() && uv.is_nan())
                || (nv - uv).abs() <= tol
                || (nv - uv).abs() <= 1e-12 * nv.abs();
            if !same {
                diffs.push(format!(
                    "{name}{labels:?}: node_exporter {nv} vs usescope {uv}"
                ));
            }
        }
    }
    diffs
}

const NO_PROBES: [&str; 3] = [
    "--no-probe.runqlat",
    "--no-probe.cachestat",
    "--no-probe.drops",
];

/// Scrapes node_exporter and usescope with the same roots and collector
/// flags (usescope additionally gets `us_extra`), back to back.
fn both(ne_bin: &Path, roots: &[String], flags: &[&str], ne_extra: &[&str]) -> (String, String) {
    let mut ne_args: Vec<String> = roots.to_vec();
    ne_args.push("--collector.disable-defaults".into());
    ne_args.extend(flags.iter().chain(ne_extra).map(|s| s.to_string()));
    let ne = NodeExporter::start(ne_bin, &ne_args);
    let mut us_args: Vec<String> = roots.to_vec();
    us_args.push("--collector.disable-defaults".into());
    us_args.extend(flags.iter().chain(&NO_PROBES).map(|s| s.to_string()));
    let refs: Vec<&str> = us_args.iter().map(String::as_str).collect();
    let us = Daemon::start(&refs);
    let (n, u) = (ne.scrape(), us.scrape());
    assert!(us.stop().success());
    (n, u)
}

fn roots(procfs: &Path, sysfs: &Path, rootfs: &Path) -> Vec<String> {
    vec![
        format!("--path.procfs={}", procfs.display()),
        format!("--path.sysfs={}", sysfs.display()),
        format!("--path.rootfs={}", rootfs.display()),
    ]
}

fn ours(name: &str) -> bool {
    const PREFIXES: [&str; 6] = [
        "node_cpu_",
        "node_time_",
        "node_timex_",
        "node_kernel_hung_",
        "node_os_",
        "node_processes_",
    ];
    // node_exporter's cpufreq collector (enabled only so that its cpu
    // collector emits node_cpu_frequency_hertz) is not under test.
    let cpufreq = name.starts_with("node_cpu_scaling_")
        || name.starts_with("node_cpu_frequency_m")
        || name == "node_cpu_frequency_hertz_total";
    PREFIXES.iter().any(|p| name.starts_with(p)) && !cpufreq
}

fn assert_same(what: &str, diffs: Vec<String>) {
    assert!(
        diffs.is_empty(),
        "{what}: {} differences from node_exporter:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
}

const ALL_SYSTEM: [&str; 6] = [
    "--collector.cpu",
    "--collector.time",
    "--collector.timex",
    "--collector.kernel_hung",
    "--collector.os",
    "--collector.processes",
];

#[test]
fn captured_fixture_tree() {
    let Some(ne) = common::node_exporter() else {
        return;
    };
    let r = roots(&fixture("proc"), &fixture("sys"), &fixture("rootfs"));
    let flags = [
        "--collector.cpu",
        "--collector.time",
        "--collector.kernel_hung",
        "--collector.os",
        "--collector.processes",
    ];
    let (n, u) = both(&ne, &r, &flags, &[]);
    let diffs = compare(&n, &u, ours, false);
    assert_same("captured tree", diffs);
    // Everything these collectors emit on the tree was compared.
    for f in [
        "node_cpu_seconds_total",
        "node_cpu_guest_seconds_total",
        "node_cpu_core_throttles_total",
        "node_kernel_hung_tasks_total",
        "node_os_info",
        "node_processes_threads_state",
        "node_time_clocksource_current_info",
        "node_time_zone_offset_seconds",
    ] {
        assert!(u.contains(&format!("# TYPE {f} ")), "{f} missing");
    }
}

#[test]
fn two_socket_host_with_cpu_info() {
    let Some(ne) = common::node_exporter() else {
        return;
    };
    let tree = fixture("two-socket");
    let r = roots(&tree.join("proc"), &tree.join("sys"), &fixture("rootfs"));
    let flags = [
        "--collector.cpu",
        "--collector.cpu.info",
        "--collector.cpu.info.flags-include=^(avx512.*|vmx|ht)$",
        "--collector.cpu.info.bugs-include=spectre",
    ];
    // node_exporter emits node_cpu_frequency_hertz only with its cpufreq
    // collector on (its default); usescope with cpu.info.
    let (n, u) = both(&ne, &r, &flags, &["--collector.cpufreq"]);
    assert_same("two-socket tree", compare(&n, &u, ours, false));
    for f in [
        "node_cpu_info",
        "node_cpu_frequency_hertz",
        "node_cpu_flag_info",
        "node_cpu_bug_info",
        "node_cpu_isolated",
        "node_cpu_package_throttles_total",
        "node_cpu_online",
    ] {
        assert!(u.contains(&format!("# TYPE {f} ")), "{f} missing");
    }
    // --no-collector.cpu.guest drops the family in both.
    let (n, u) = both(
        &ne,
        &r,
        &["--collector.cpu", "--no-collector.cpu.guest"],
        &[],
    );
    assert!(
        !n.contains("node_cpu_guest_seconds_total") && !u.contains("node_cpu_guest_seconds_total")
    );
    assert_same("two-socket tree, no guest", compare(&n, &u, ours, false));
}

#[test]
fn os_release_with_quotes_and_escapes() {
    let Some(ne) = common::node_exporter() else {
        return;
    };
    let rootfs = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(rootfs.path().join("usr/lib")).unwrap();
    std::fs::copy(
        fixture("rootfs").join("usr/lib/os-release"),
        rootfs.path().join("usr/lib/os-release"),
    )
    .unwrap();
    let r = roots(&fixture("proc"), &fixture("sys"), rootfs.path());
    let (n, u) = both(&ne, &r, &["--collector.os"], &[]);
    assert_same("os-release edge cases", compare(&n, &u, ours, false));
    assert!(
        u.contains("pretty_name=\"Edge Linux 9.4 (Café 😀) \\\\ back/slash\""),
        "{u}"
    );
    assert!(
        u.contains("node_os_support_end_timestamp_seconds 1969574400"),
        "{u}"
    );
}

#[test]
fn live_host() {
    let Some(ne) = common::node_exporter() else {
        return;
    };
    let r = roots(Path::new("/proc"), Path::new("/sys"), Path::new("/"));
    let flags: Vec<&str> = ALL_SYSTEM
        .iter()
        .copied()
        .filter(|f| *f != "--collector.processes")
        .collect();
    let (n, u) = both(&ne, &r, &flags, &[]);
    assert_same("live host", compare(&n, &u, ours, true));
    for f in [
        "node_timex_sync_status",
        "node_time_seconds",
        "node_os_info",
    ] {
        assert!(u.contains(&format!("# TYPE {f} ")), "{f} missing");
    }
    // The live process table changes between two reads: compare the
    // families, types, HELP and label names only.
    let (n, u) = both(&ne, &r, &["--collector.processes"], &[]);
    let (n, u) = (parse(&n), parse(&u));
    for (name, nf) in n.iter().filter(|(k, _)| k.starts_with("node_processes_")) {
        let uf = u.get(name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!((&nf.kind, &nf.help), (&uf.kind, &uf.help), "{name}");
        let names = |f: &Family| -> BTreeSet<String> {
            f.samples
                .iter()
                .flat_map(|(l, _)| l.keys().cloned())
                .collect()
        };
        assert_eq!(names(nf), names(uf), "{name}");
    }
}

#[test]
fn node_exporter_build_info_has_node_exporters_labels() {
    let Some(ne) = common::node_exporter() else {
        return;
    };
    let r = roots(&fixture("proc"), &fixture("sys"), &fixture("rootfs"));
    let (n, u) = both(&ne, &r, &["--collector.time"], &[]);
    let (n, u) = (parse(&n), parse(&u));
    let (nf, uf) = (
        &n["node_exporter_build_info"],
        &u["node_exporter_build_info"],
    );
    assert_eq!((&nf.kind, &nf.help), (&uf.kind, &uf.help));
    let keys = |f: &Family| f.samples[0].0.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(nf), keys(uf));
    let labels = &uf.samples[0].0;
    assert_eq!(labels["tags"], "usescope");
    assert_eq!(labels["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(labels["goos"], nf.samples[0].0["goos"]);
    assert_eq!(labels["goarch"], nf.samples[0].0["goarch"]);
    // And it can be turned off.
    let d = Daemon::start(&[
        "--collector.disable-defaults",
        "--no-compat.node-exporter-build-info",
        NO_PROBES[0],
        NO_PROBES[1],
        NO_PROBES[2],
    ]);
    assert!(!d.scrape().contains("node_exporter_build_info"));
    assert!(d.stop().success());
}

/// The comparison itself: every kind of difference is reported.
#[test]
fn comparison_reports_differences() {
    let a = "# HELP node_x_a A.\n# TYPE node_x_a gauge\nnode_x_a{l=\"1\"} 1\nnode_x_a{l=\"2\"} 2\n\
             # HELP node_x_b B.\n# TYPE node_x_b counter\nnode_x_b 3\n";
    assert!(compare(a, a, |n| n.starts_with("node_x_"), false).is_empty());
    let cases = [
        (
            a.replace("node_x_a{l=\"2\"} 2", "node_x_a{l=\"2\"} 2.5"),
            "usescope 2.5",
        ),
        (a.replace("l=\"2\"", "l=\"3\""), "label sets differ"),
        (
            a.replace("# TYPE node_x_b counter", "# TYPE node_x_b gauge"),
            "type",
        ),
        (a.replace("B.", "B"), "HELP"),
        (a.replace("node_x_b", "node_x_c"), "only in"),
        (
            a.replace("\\\"1\\\"", "\"1\"") + "node_x_a{l=\"1\"} 1\n",
            "duplicate",
        ),
    ];
    for (b, want) in cases {
        let d = compare(a, &b, |n| n.starts_with("node_x_"), false);
        assert!(d.iter().any(|l| l.contains(want)), "{want}: {d:?}");
    }
    let esc = "# HELP node_x_e E.\n# TYPE node_x_e gauge\nnode_x_e{v=\"a \\\"q\\\" \\\\ \\n\"} 1\n";
    assert_eq!(parse(esc)["node_x_e"].samples[0].0["v"], "a \"q\" \\ \n");
}
