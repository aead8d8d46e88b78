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

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::common::node_exporter::{
    Family, Pair, assert_none, differences_within, families, parse, run_both,
};
use crate::common::{Daemon, fixture};

/// How far apart node_exporter's and usescope's reads of a family may be:
/// on a fixture tree only the clock moves; on the live host the clock
/// state and the CPU counters move between the two reads too.
fn tolerance(live: bool) -> impl Fn(&str) -> f64 {
    move |family: &str| match family {
        "node_time_seconds" => 5.0,
        _ if !live => 0.0,
        "node_timex_offset_seconds" | "node_timex_pps_jitter_seconds" => 0.01,
        "node_timex_maxerror_seconds" | "node_timex_estimated_error_seconds" => 0.1,
        "node_timex_frequency_adjustment_ratio" => 1e-5,
        f if f.starts_with("node_cpu_seconds_total") || f.starts_with("node_cpu_guest") => 10.0,
        _ => 0.0,
    }
}

/// Both exporters on `roots` with `flags` (node_exporter also with
/// `ne_extra`), compared on this file's families.
fn compare(
    ne: &Path,
    roots: &[String],
    flags: &[&str],
    ne_extra: &[&str],
    live: bool,
) -> (Pair, BTreeSet<String>) {
    let mut args = roots.to_vec();
    args.extend(flags.iter().map(|s| s.to_string()));
    let pair = run_both(ne, &args, ne_extra);
    // A comparison of nothing would pass: the flags must select something.
    assert!(
        families(&pair.node_exporter).keys().any(|n| ours(n)),
        "no family of this file selected by {args:?}"
    );
    let diffs = differences_within(&pair, ours, tolerance(live));
    (pair, diffs)
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
    let Some(ne) = crate::common::node_exporter() else {
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
    let (pair, diffs) = compare(&ne, &r, &flags, &[], false);
    assert_none("captured tree", &diffs);
    let u = &pair.usescope;
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
    let Some(ne) = crate::common::node_exporter() else {
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
    let (pair, diffs) = compare(&ne, &r, &flags, &["--collector.cpufreq"], false);
    assert_none("two-socket tree", &diffs);
    let u = &pair.usescope;
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
    let (pair, diffs) = compare(
        &ne,
        &r,
        &["--collector.cpu", "--no-collector.cpu.guest"],
        &[],
        false,
    );
    assert!(
        !pair.node_exporter.contains("node_cpu_guest_seconds_total")
            && !pair.usescope.contains("node_cpu_guest_seconds_total")
    );
    assert_none("two-socket tree, no guest", &diffs);
}

#[test]
fn os_release_with_quotes_and_escapes() {
    let Some(ne) = crate::common::node_exporter() else {
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
    let (pair, diffs) = compare(&ne, &r, &["--collector.os"], &[], false);
    assert_none("os-release edge cases", &diffs);
    let u = &pair.usescope;
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
    let Some(ne) = crate::common::node_exporter() else {
        return;
    };
    let r = roots(Path::new("/proc"), Path::new("/sys"), Path::new("/"));
    let flags: Vec<&str> = ALL_SYSTEM
        .iter()
        .copied()
        .filter(|f| *f != "--collector.processes")
        .collect();
    let (pair, diffs) = compare(&ne, &r, &flags, &[], true);
    assert_none("live host", &diffs);
    let u = &pair.usescope;
    for f in [
        "node_timex_sync_status",
        "node_time_seconds",
        "node_os_info",
    ] {
        assert!(u.contains(&format!("# TYPE {f} ")), "{f} missing");
    }
    // The live process table changes between two reads: compare the
    // families, types, HELP and label names only.
    let (pair, _) = compare(&ne, &r, &["--collector.processes"], &[], true);
    let (n, u) = (parse(&pair.node_exporter), parse(&pair.usescope));
    for (name, nf) in n.iter().filter(|(k, _)| k.starts_with("node_processes_")) {
        let uf = u.get(name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!((&nf.kind, &nf.help), (&uf.kind, &uf.help), "{name}");
        let names = |f: &Family| -> BTreeSet<String> {
            f.series
                .keys()
                .flat_map(|l| l.iter().map(|(k, _)| k.clone()))
                .collect()
        };
        assert_eq!(names(nf), names(uf), "{name}");
    }
}

#[test]
fn node_exporter_build_info_has_node_exporters_labels() {
    let Some(ne) = crate::common::node_exporter() else {
        return;
    };
    let r = roots(&fixture("proc"), &fixture("sys"), &fixture("rootfs"));
    let (pair, _) = compare(&ne, &r, &["--collector.time"], &[], false);
    let (n, u) = (parse(&pair.node_exporter), parse(&pair.usescope));
    let (nf, uf) = (
        &n["node_exporter_build_info"],
        &u["node_exporter_build_info"],
    );
    assert_eq!((&nf.kind, &nf.help), (&uf.kind, &uf.help));
    let labels = |f: &Family| -> BTreeMap<String, String> {
        assert_eq!(f.series.len(), 1);
        f.series.keys().next().unwrap().iter().cloned().collect()
    };
    let (theirs, ours) = (labels(nf), labels(uf));
    assert_eq!(
        theirs.keys().collect::<Vec<_>>(),
        ours.keys().collect::<Vec<_>>()
    );
    assert_eq!(ours["tags"], "usescope");
    assert_eq!(ours["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(ours["goos"], theirs["goos"]);
    assert_eq!(ours["goarch"], theirs["goarch"]);
    // And it can be turned off.
    let d = Daemon::start(&[
        "--collector.disable-defaults",
        "--no-compat.node-exporter-build-info",
        "--no-probe.runqlat",
        "--no-probe.cachestat",
        "--no-probe.drops",
    ]);
    assert!(!d.scrape().contains("node_exporter_build_info"));
    assert!(d.stop().success());
}

/// The comparison itself: every kind of difference is reported.
#[test]
fn comparison_reports_differences() {
    let a = "# HELP node_x_a A.\n# TYPE node_x_a gauge\nnode_x_a{l=\"1\"} 1\nnode_x_a{l=\"2\"} 2\n\
             # HELP node_x_b B.\n# TYPE node_x_b counter\nnode_x_b 3\n";
    let pair = |b: &str| Pair {
        node_exporter: a.to_string(),
        usescope: b.to_string(),
    };
    let ours = |n: &str| n.starts_with("node_x_");
    assert!(differences_within(&pair(a), ours, |_| 0.0).is_empty());
    let cases = [
        (
            a.replace("node_x_a{l=\"2\"} 2", "node_x_a{l=\"2\"} 2.5"),
            "~ node_x_a{l=\"2\"} 2 vs 2.5",
        ),
        (a.replace("l=\"2\"", "l=\"3\""), "+ node_x_a{l=\"3\"}"),
        (a.replace("l=\"2\"", "l=\"3\""), "- node_x_a{l=\"2\"}"),
        (
            a.replace("# TYPE node_x_b counter", "# TYPE node_x_b gauge"),
            "~ family node_x_b",
        ),
        (a.replace("B.", "B"), "~ family node_x_b"),
        (a.replace("node_x_b", "node_x_c"), "+ node_x_c{}"),
        (
            a.to_string() + "node_x_a{l=\"1\"} 1\n",
            "1 duplicate series in usescope",
        ),
        (a.replace("node_x_b 3\n", ""), "- node_x_b{}"),
        (
            a.to_string() + "# HELP node_x_d D.\n# TYPE node_x_d gauge\n",
            "+ family node_x_d (no series)",
        ),
    ];
    for (b, want) in cases {
        let d = differences_within(&pair(&b), ours, |_| 0.0);
        assert!(d.iter().any(|l| l.contains(want)), "{want}: {d:?}");
    }
    // A tolerance admits a value that moved, and only that far.
    let moved = a.replace("node_x_b 3", "node_x_b 3.5");
    assert!(differences_within(&pair(&moved), ours, |_| 0.5).is_empty());
    assert!(!differences_within(&pair(&moved), ours, |_| 0.4).is_empty());
    let esc = "# HELP node_x_e E.\n# TYPE node_x_e gauge\nnode_x_e{v=\"a \\\"q\\\" \\\\ \\n\"} 1\n";
    let labels = parse(esc)["node_x_e"].series.keys().next().unwrap().clone();
    assert_eq!(labels, vec![("v".to_string(), "a \"q\" \\ \n".to_string())]);
}
