//! `promtool check metrics` (Prometheus' own linter, Debian package
//! `prometheus`) on a live scrape of this machine's real /proc, in both
//! exposition formats' text form.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::common::Daemon;

fn promtool_available() -> bool {
    let runs = Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    crate::common::skip::unless_met(
        runs,
        "promtool (Debian package prometheus; scripts/setup.sh installs it)",
    )
}

#[test]
fn promtool_check_metrics_on_real_proc() {
    if !promtool_available() {
        return;
    }
    // Probes on when we may load them, so their families are linted too.
    let d = Daemon::start(&["--collector.interrupts"]);
    let expo = d.scrape();
    assert!(
        expo.contains("node_cpu_seconds_total{"),
        "no CPU metrics on the real /proc"
    );
    lint(&expo);
}

/// The sysfs collectors on the fixture tree (this machine has no hwmon or
/// thermal zones) and the textfile collector re-encoding the good fixture
/// files: histograms, summaries, escapes, NaN and infinities.
#[test]
fn promtool_check_metrics_on_hardware_and_textfile_fixtures() {
    if !promtool_available() {
        return;
    }
    let f = crate::common::fixture;
    let d = Daemon::start(&[
        &format!("--path.sysfs={}", f("sys").display()),
        &format!("--path.udev.data={}", f("udev").display()),
        &format!(
            "--collector.textfile.directory={}",
            f("textfile/good").display()
        ),
        "--no-probe.runqlat",
        "--no-probe.cachestat",
        "--no-probe.drops",
    ]);
    let expo = d.scrape();
    for family in [
        "node_hwmon_temp_celsius",
        "node_thermal_zone_temp",
        "app_request_duration_seconds_bucket",
        "app_rpc_seconds_count",
    ] {
        assert!(expo.contains(family), "{family} missing");
    }
    lint(&expo);
}

/// promtool check metrics on `expo`: it must parse, and every lint problem
/// must be one of node_exporter's own (see below).
fn lint(expo: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(expo.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Exit 3 means "lint problems", listed one per line; anything else
    // non-zero is a parse error of the exposition itself.
    let code = out.status.code();
    assert!(
        code == Some(0) || code == Some(3),
        "promtool could not parse the exposition (exit {code:?}):\n{report}"
    );
    let problems: Vec<&str> = report
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| !node_exporter_camel_case(l) && !node_exporter_bits(l))
        .collect();
    assert!(
        problems.is_empty(),
        "promtool lint problems:\n{}",
        problems.join("\n")
    );
}

/// node_exporter counts entropy in bits (`node_entropy_available_bits`),
/// which promtool's base-unit rule rejects; compatibility keeps the names.
fn node_exporter_bits(problem: &str) -> bool {
    problem.starts_with("node_entropy_")
        && problem.ends_with("use base unit \"bytes\" instead of \"bits\"")
}

/// node_exporter itself fails promtool's snake_case rule for names it
/// derives from kernel field names (`node_memory_MemTotal_bytes`,
/// `node_netstat_TcpExt_ListenOverflows`). Compatibility fixes those names,
/// so that one rule is accepted for exactly those families and nothing else.
fn node_exporter_camel_case(problem: &str) -> bool {
    const KERNEL_NAMED: &[&str] = &[
        "node_memory_",
        "node_netstat_",
        "node_vmstat_",
        "node_sockstat_",
        "node_softirqs_",
        "node_interrupts_",
    ];
    problem.ends_with("metric names should be written in 'snake_case' not 'camelCase'")
        && KERNEL_NAMED.iter().any(|p| problem.starts_with(p))
}
