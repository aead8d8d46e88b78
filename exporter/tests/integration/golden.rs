//! Golden end-to-end test, node_exporter's habit: run the real binary on the
//! captured fixture tree, scrape it over HTTP, and diff the whole exposition
//! against the checked-in expected output.
//!
//! Regenerate after an intended change with
//! `USESCOPE_UPDATE_GOLDEN=1 cargo test --test golden` and review the diff.

use std::path::Path;

use crate::common::{Daemon, fixture};

/// Lines whose values depend on the running process, not on the fixture.
/// Probe families are excluded: probes are off here, and their own tests
/// cover them against the live kernel. The clock, the time zone and
/// adjtimex(2) are the running host's (compat_system.rs checks them).
/// node_exporter's default `--collector.filesystem.mount-points-exclude`.
const NE_DEFAULT_MOUNT_EXCLUDE: &str =
    "^/(dev|proc|run/credentials/.+|sys|var/lib/docker/.+|var/lib/containers/storage/.+)($|/)";

fn stable(line: &str) -> bool {
    !(line.contains("process_")
        || line.contains("node_scrape_collector_duration_seconds")
        || line.contains("usescope_build_info")
        || line.contains("node_exporter_build_info")
        || line.contains("node_time_seconds")
        || line.contains("node_time_zone_offset_seconds")
        || line.contains("node_timex_")
        || line.contains("usescope_probe")
        || line.contains("usescope_bpf_"))
}

fn scrape_fixture(tree: &Path, extra: &[&str]) -> String {
    let mut args = vec![
        format!("--path.procfs={}", tree.display()),
        format!("--path.sysfs={}", fixture("sys").display()),
        format!("--path.udev.data={}", fixture("udev").display()),
        // os-release comes from the fixture rootfs. The filesystem
        // collector statfs()es the fixture's mount points under it: all but
        // `/` are absent there, deterministically, and `/` (the fixture
        // directory itself, whose free space moves) is left out. Its values
        // are tested against node_exporter on the live host instead
        // (filesystem_node_exporter.rs).
        format!("--path.rootfs={}", fixture("rootfs").display()),
        format!("--collector.filesystem.mount-points-exclude=^/$|{NE_DEFAULT_MOUNT_EXCLUDE}"),
        "--collector.interrupts".to_string(),
        "--no-probe.runqlat".to_string(),
        "--no-probe.cachestat".to_string(),
        "--no-probe.drops".to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let d = Daemon::start(&refs);
    let expo = d.scrape();
    assert!(d.stop().success());
    expo
}

fn check_golden(name: &str, actual: &str) {
    let path = fixture("golden").join(name);
    if std::env::var("USESCOPE_UPDATE_GOLDEN").is_ok_and(|v| v == "1") {
        std::fs::write(&path, actual).unwrap();
        eprintln!("updated {}", path.display());
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with USESCOPE_UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    if expected != actual {
        let exp: Vec<&str> = expected.lines().collect();
        let act: Vec<&str> = actual.lines().collect();
        let missing: Vec<_> = exp.iter().filter(|l| !act.contains(l)).take(20).collect();
        let extra: Vec<_> = act.iter().filter(|l| !exp.contains(l)).take(20).collect();
        panic!(
            "{name} differs from the golden file.\nmissing (first 20): {missing:#?}\nunexpected (first 20): {extra:#?}\n(order may differ too; USESCOPE_UPDATE_GOLDEN=1 regenerates)"
        );
    }
}

#[test]
fn captured_tree_matches_golden() {
    let expo = scrape_fixture(&fixture("proc"), &[]);
    // Labels that hold a sysfs path (rapl's `path`) name the checkout:
    // the golden file has `$SYSFS` there instead.
    let sysfs = fixture("sys").display().to_string();
    let stable: String = expo
        .lines()
        .filter(|l| stable(l))
        .map(|l| format!("{}\n", l.replace(&sysfs, "$SYSFS")))
        .collect();
    check_golden("proc.prom", &stable);
}

#[test]
fn openmetrics_golden() {
    let tree = fixture("proc");
    let d = Daemon::start(&[
        &format!("--path.procfs={}", tree.display()),
        "--collector.disable-defaults",
        "--collector.loadavg",
        "--collector.netdev",
        "--no-probe.runqlat",
        "--no-probe.cachestat",
        "--no-probe.drops",
    ]);
    let r = d.get_with(
        "/metrics",
        &[("Accept", "application/openmetrics-text; version=1.0.0")],
    );
    let stable: String = r
        .text()
        .lines()
        .filter(|l| stable(l))
        .map(|l| format!("{l}\n"))
        .collect();
    check_golden("proc.openmetrics", &stable);
}

#[test]
fn large_host_every_collector_succeeds() {
    let off_by_default: Vec<String> = usescope::collectors::ALL
        .iter()
        .filter(|s| !s.default_enabled)
        .map(|s| format!("--collector.{}", s.name))
        .chain(["--collector.cpu.info".to_string()])
        .collect();
    let refs: Vec<&str> = off_by_default.iter().map(String::as_str).collect();
    let expo = scrape_fixture(&fixture("large"), &refs);
    for spec in usescope::collectors::ALL {
        assert_eq!(
            crate::common::sample(
                &expo,
                &format!(
                    "node_scrape_collector_success{{collector=\"{}\"}}",
                    spec.name
                )
            ),
            Some(1.0),
            "collector {} failed on the large host",
            spec.name
        );
    }
    let count = |prefix: &str| expo.lines().filter(|l| l.starts_with(prefix)).count();
    assert_eq!(count("node_cpu_seconds_total{"), 256 * 8);
    assert_eq!(count("node_cpu_info{"), 256);
    assert_eq!(count("node_softirqs_functions_total{"), 256 * 10);
    assert_eq!(count("node_disk_reads_completed_total{"), 1000);
    assert_eq!(count("node_softnet_processed_total{"), 256);
    assert_eq!(count("node_schedstat_running_seconds_total{"), 256);
    let nodes: std::collections::BTreeSet<&str> = expo
        .lines()
        .filter(|l| l.starts_with("node_zoneinfo_min_pages{"))
        .filter_map(|l| l.split("node=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(nodes.len(), 4, "NUMA nodes seen: {nodes:?}");
}
