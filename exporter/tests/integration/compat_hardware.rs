//! node_exporter and usescope on the same fixture trees: the same families
//! (HELP and TYPE), label sets and values for textfile, hwmon,
//! thermal_zone, edac, nvme, cpufreq, powersupplyclass and diskstats' udev
//! families. The differences that remain
//! are listed here, each with its reason, and asserted exactly: a new
//! difference fails, and so does one that went away.
//!
//! Needs node_exporter 1.12.1 (`crate::common::node_exporter`; scripts/setup.sh
//! installs it). Without it the tests skip through common/skip.rs, or
//! fail in CI (`USESCOPE_REQUIRE_BPF=1` or `CI=true`).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use crate::common::node_exporter::{Pair, differences, families, run_both, samples};
use crate::common::{Daemon, fixture};

/// Both exporters with `--collector.disable-defaults` and `args`.
fn both(ne_bin: &Path, args: &[String]) -> Pair {
    run_both(ne_bin, args, &[])
}

fn set(lines: &[&str]) -> BTreeSet<String> {
    lines.iter().map(|s| s.to_string()).collect()
}

#[test]
fn sysfs_collectors_match_node_exporter() {
    let Some(ne) = crate::common::node_exporter() else {
        return;
    };
    let args = vec![
        format!("--path.sysfs={}", fixture("sys").display()),
        "--collector.hwmon".to_string(),
        "--collector.thermal_zone".to_string(),
    ];
    let pair = both(&ne, &args);
    let n = samples(&pair.node_exporter);
    assert!(n.keys().any(|k| k.starts_with("node_hwmon_temp_celsius{")));
    assert!(
        families(&pair.node_exporter).len() > 30,
        "{:?}",
        families(&pair.node_exporter).keys()
    );
    assert_eq!(
        differences(&pair, |_| true),
        set(&[
            // thermal_zone2's temp cannot be read: node_exporter exports
            // 0 °C for it, usescope leaves the zone out.
            "- node_thermal_zone_temp{type=\"broken\",zone=\"2\"}",
        ])
    );
}

#[test]
fn hwmon_filters_match_node_exporter() {
    let Some(ne) = crate::common::node_exporter() else {
        return;
    };
    let args = vec![
        format!("--path.sysfs={}", fixture("sys").display()),
        "--collector.hwmon".to_string(),
        "--collector.hwmon.chip-exclude=^nvme".to_string(),
        "--collector.hwmon.sensor-include=;(temp|in)[0-9]".to_string(),
    ];
    let pair = both(&ne, &args);
    let n = samples(&pair.node_exporter);
    assert!(!n.keys().any(|k| k.contains("nvme")));
    assert_eq!(differences(&pair, |_| true), BTreeSet::new());
}

#[test]
fn disk_udev_info_matches_node_exporter() {
    let Some(ne) = crate::common::node_exporter() else {
        return;
    };
    let proc_dir = crate::common::copy_tree(&fixture("proc"));
    let proc = proc_dir.path();
    std::fs::write(
        proc.join("diskstats"),
        "   8       0 sda 1 2 3 4 5 6 7 8 9 10 11\n 252       1 dm-1 1 2 3 4 5 6 7 8 9 10 11\n 254       0 vda 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17\n",
    )
    .unwrap();
    let sys_dir = crate::common::temp_dir();
    let sys_root = sys_dir.path();
    crate::common::copy_dir(&fixture("sys/block"), &sys_root.join("block"));
    std::fs::create_dir_all(sys_root.join("block/sda/queue")).unwrap();
    std::fs::write(sys_root.join("block/sda/queue/rotational"), "1\n").unwrap();
    let args = vec![
        format!("--path.procfs={}", proc.display()),
        format!("--path.sysfs={}", sys_root.display()),
        format!("--path.udev.data={}", fixture("udev").display()),
        "--collector.diskstats".to_string(),
    ];
    let pair = both(&ne, &args);
    let n = samples(&pair.node_exporter);
    assert!(
        n.keys()
            .any(|k| k.starts_with("node_disk_device_mapper_info{"))
    );
    assert!(
        n.keys()
            .any(|k| k.starts_with("node_disk_ata_write_cache{"))
    );
    assert_eq!(differences(&pair, |_| true), BTreeSet::new());
    // device-include: only what it matches, the default exclude aside.
    let mut args = args;
    args.push("--collector.diskstats.device-include=^(sda|vda)$".to_string());
    let pair = both(&ne, &args);
    let n = samples(&pair.node_exporter);
    assert!(n.keys().any(|k| k.contains("device=\"sda\"")));
    assert!(
        !n.keys().any(|k| k.contains("dm-1")),
        "node_exporter kept dm-1"
    );
    assert_eq!(differences(&pair, |_| true), BTreeSet::new());
}

fn textfile_args(dir: &str) -> Vec<String> {
    vec![
        "--collector.textfile".to_string(),
        format!(
            "--collector.textfile.directory={}",
            fixture("textfile").join(dir).display()
        ),
    ]
}

#[test]
fn textfile_good_files_match_node_exporter() {
    let Some(ne) = crate::common::node_exporter() else {
        return;
    };
    let pair = both(&ne, &textfile_args("good"));
    let n = samples(&pair.node_exporter);
    assert!(n.len() > 20, "{:?}", n);
    assert_eq!(n.get("node_textfile_scrape_error{}"), Some(&0.0));
    assert_eq!(differences(&pair, |_| true), BTreeSet::new());
}

#[test]
fn textfile_bad_files_differences_are_the_listed_ones() {
    let Some(ne) = crate::common::node_exporter() else {
        return;
    };
    let pair = both(&ne, &textfile_args("bad"));
    let (n, u) = (samples(&pair.node_exporter), samples(&pair.usescope));
    let dir = fixture("textfile/bad");
    let d = dir.display();
    assert_eq!(u.get("node_textfile_scrape_error{}"), Some(&1.0));
    assert_eq!(n.get("node_textfile_scrape_error{}"), Some(&1.0));
    assert_eq!(
        differences(&pair, |_| true),
        set(&[
            // dup.prom repeats a series. node_exporter keeps the first
            // sample and drops the second at gather time (a log line, no
            // scrape_error); usescope skips the file.
            "- dup_value{a=\"1\"}",
            &format!("- node_textfile_mtime_seconds{{file=\"{d}/dup.prom\"}}"),
            // reserved.prom redefines process_cpu_seconds_total.
            // node_exporter drops the clashing sample at gather time and
            // still counts the file as read; usescope skips the file.
            &format!("- node_textfile_mtime_seconds{{file=\"{d}/reserved.prom\"}}"),
        ])
    );
}

#[test]
fn textfile_conflict_differences_are_the_listed_ones() {
    let Some(ne) = crate::common::node_exporter() else {
        return;
    };
    let pair = both(&ne, &textfile_args("conflict"));
    let dir = fixture("textfile/conflict");
    let d = dir.display();
    let mtime = |f: &str| format!("- node_textfile_mtime_seconds{{file=\"{d}/{f}\"}}");
    assert_eq!(
        differences(&pair, |_| true),
        set(&[
            // node_exporter takes each file's other families and drops
            // only the conflicting samples (at gather time, without
            // scrape_error for type, series and suffix conflicts);
            // usescope skips a conflicting file whole.
            "- b_other{}",
            &mtime("b_type.prom"),
            &mtime("d_series.prom"),
            &mtime("e_suffix.prom"),
            &mtime("z_help.prom"),
            // f_more.prom adds a series to shared_total without a HELP of
            // its own. node_exporter gives it the HELP "Metric read from
            // ..." and then drops it for differing from a_first's HELP;
            // usescope merges it under a_first's HELP.
            "+ shared_total{job=\"f\"}",
        ])
    );
}

#[test]
fn cpufreq_and_power_supply_match_node_exporter() {
    let Some(ne) = crate::common::node_exporter() else {
        return;
    };
    let args = vec![
        format!("--path.sysfs={}", fixture("sys").display()),
        "--collector.cpufreq".to_string(),
        "--collector.powersupplyclass".to_string(),
    ];
    let pair = both(&ne, &args);
    let n = samples(&pair.node_exporter);
    assert!(n.contains_key("node_cpu_scaling_governor{cpu=\"0\",governor=\"schedutil\"}"));
    assert!(n.contains_key("node_cpu_frequency_avg_hertz{cpu=\"1\"}"));
    assert!(n.contains_key("node_power_supply_online{power_supply=\"AC\"}"));
    assert!(n.keys().any(|k| k.starts_with("node_power_supply_info{")));
    assert_eq!(differences(&pair, |_| true), BTreeSet::new());

    let args = vec![
        format!("--path.sysfs={}", fixture("sys").display()),
        "--collector.powersupplyclass".to_string(),
        "--collector.powersupply.ignored-supplies=^BAT".to_string(),
    ];
    let pair = both(&ne, &args);
    let n = samples(&pair.node_exporter);
    assert!(!n.keys().any(|k| k.contains("BAT0")));
    assert!(n.contains_key("node_power_supply_online{power_supply=\"AC\"}"));
    assert_eq!(differences(&pair, |_| true), BTreeSet::new());
}

/// `node_cpu_frequency_hertz` is both cpu's (/proc/cpuinfo, with
/// `--collector.cpu.info`) and cpufreq's. node_exporter keeps whichever
/// arrives first and drops the other; usescope writes cpu's and leaves
/// cpufreq's out. Either way: one family, written once.
#[test]
fn cpu_frequency_family_is_written_once() {
    let Some(ne) = crate::common::node_exporter() else {
        return;
    };
    let args = [
        format!("--path.procfs={}", fixture("proc").display()),
        format!("--path.sysfs={}", fixture("sys").display()),
        "--collector.cpu".to_string(),
        "--collector.cpu.info".to_string(),
        "--collector.cpufreq".to_string(),
    ];
    let pair = run_both(&ne, &args, &[]);
    for (who, text) in [
        ("node_exporter", &pair.node_exporter),
        ("usescope", &pair.usescope),
    ] {
        let types = text
            .lines()
            .filter(|l| *l == "# TYPE node_cpu_frequency_hertz gauge")
            .count();
        assert_eq!(types, 1, "{who}:\n{text}");
        assert!(
            text.contains("node_cpu_frequency_max_hertz{cpu=\"0\"}"),
            "{who}"
        );
    }
    assert!(
        pair.usescope.contains(
            "# HELP node_cpu_frequency_hertz CPU frequency in hertz from /proc/cpuinfo.\n"
        ),
        "{}",
        pair.usescope
    );
}

/// node_exporter and usescope with only `collector` on, over the sysfs
/// fixture tree: the differences (expected to be none).
fn sysfs_collector_differences(
    ne: &Path,
    collector: &str,
    extra: &[&str],
) -> (Pair, BTreeSet<String>) {
    let mut args = vec![
        format!("--path.sysfs={}", fixture("sys").display()),
        format!("--collector.{collector}"),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let pair = both(ne, &args);
    let d = differences(&pair, |_| true);
    (pair, d)
}

#[test]
fn dmi_matches_node_exporter() {
    let Some(ne) = crate::common::node_exporter() else {
        return;
    };
    let (pair, d) = sysfs_collector_differences(&ne, "dmi", &[]);
    let n = samples(&pair.node_exporter);
    assert!(
        n.keys()
            .any(|k| k.starts_with("node_dmi_info{") && k.contains("product_serial=\"9XK2F73\"")),
        "{:?}",
        n
    );
    assert_eq!(d, BTreeSet::new());
}

/// Started as an unprivileged user, usescope leaves out the DMI files only
/// root may read (serials, product_uuid), without failing, as
/// node_exporter does; the rest are reported.
#[test]
fn dmi_leaves_out_root_only_strings_when_not_root() {
    use std::os::unix::fs::PermissionsExt;
    if !crate::common::skip::unless_root("to run usescope as another user") {
        return;
    }
    let tmp = crate::common::temp_dir();
    let root = tmp.path().join("root");
    crate::common::copy_dir(&fixture("sys/class/dmi"), &root.join("class/dmi"));
    let id = root.join("class/dmi/id");
    for dir in [&root, &root.join("class"), &root.join("class/dmi"), &id] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    for e in std::fs::read_dir(&id).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let mode = if name.ends_with("_serial") || name == "product_uuid" {
            0o400
        } else {
            0o444
        };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(crate::common::bin());
    let sysfs = format!("--path.sysfs={}", root.display());
    let d = Daemon::try_start_with(
        cmd,
        &[
            &sysfs,
            "--collector.disable-defaults",
            "--collector.dmi",
            "--no-probe.runqlat",
            "--no-probe.cachestat",
            "--no-probe.drops",
        ],
    )
    .expect("usescope as uid 65534");
    let expo = d.scrape();
    let series = expo
        .lines()
        .find(|l| l.starts_with("node_dmi_info{"))
        .unwrap_or_else(|| panic!("no node_dmi_info:\n{expo}"));
    for gone in [
        "board_serial",
        "chassis_serial",
        "product_serial",
        "product_uuid",
    ] {
        assert!(!series.contains(gone), "{gone} in {series}");
    }
    assert!(
        series.contains("product_name=\"PowerEdge R640\""),
        "{series}"
    );
    assert_eq!(
        crate::common::sample(&expo, "node_scrape_collector_success{collector=\"dmi\"}"),
        Some(1.0)
    );
    assert!(d.stop().success());
}

/// One sysfs collector against node_exporter over the fixture tree, with
/// `flags`: no difference at all, and the node_exporter side shows what
/// the case is about (so a comparison of nothing cannot pass).
struct Case {
    collector: &'static str,
    flags: &'static [&'static str],
    /// Family names node_exporter writes, or text one of its series
    /// contains (a whole `name{labels}`, or a label pair).
    present: &'static [&'static str],
    /// Text no series of node_exporter's contains (a filtered device).
    absent: &'static [&'static str],
}

const CASES: &[Case] = &[
    Case {
        collector: "watchdog",
        flags: &[],
        present: &[
            r#"node_watchdog_timeleft_seconds{name="watchdog0"}"#,
            "Software Watchdog",
        ],
        absent: &[],
    },
    Case {
        collector: "rapl",
        flags: &[],
        present: &[
            "node_rapl_dram_joules_total",
            "node_rapl_package_joules_total",
        ],
        absent: &[],
    },
    Case {
        collector: "rapl",
        flags: &["--collector.rapl.enable-zone-label"],
        present: &[r#"rapl_zone="core""#],
        absent: &[],
    },
    Case {
        collector: "dmmultipath",
        flags: &[],
        present: &[r#"node_dmmultipath_device_paths_failed{device="mpathb",sysfs_name="dm-1"}"#],
        absent: &[],
    },
    Case {
        collector: "infiniband",
        flags: &[],
        present: &[
            r#"node_infiniband_rx_write_requests_total{device="mlx5_0",port="1"}"#,
            r#"node_infiniband_state_id{device="mlx4_0",port="2"}"#,
        ],
        absent: &[],
    },
    Case {
        collector: "infiniband",
        flags: &["--collector.infiniband.device-include=^mlx5"],
        present: &[r#"node_infiniband_rx_write_requests_total{device="mlx5_0",port="1"}"#],
        absent: &["mlx4_0"],
    },
    Case {
        collector: "fibrechannel",
        flags: &[],
        present: &[r#"node_fibrechannel_loss_of_signal_total{fc_host="host1"}"#],
        absent: &[r#"node_fibrechannel_nos_total{fc_host="host0"}"#],
    },
    Case {
        collector: "tapestats",
        flags: &[],
        present: &[r#"node_tape_write_time_seconds_total{device="st0"}"#],
        absent: &[],
    },
    Case {
        collector: "tapestats",
        flags: &["--collector.tapestats.ignored-devices=^st0$"],
        present: &[],
        absent: &[r#""st0""#],
    },
    Case {
        collector: "bcache",
        flags: &[],
        present: &[
            "node_bcache_writeback_rate_proportional_term",
            "node_bcache_cache_readaheads_total",
        ],
        absent: &["node_bcache_priority_stats_unused_percent"],
    },
    Case {
        collector: "bcache",
        flags: &["--collector.bcache.priorityStats"],
        present: &["node_bcache_priority_stats_unused_percent"],
        absent: &[],
    },
    Case {
        collector: "bcachefs",
        flags: &[],
        present: &[
            "node_bcachefs_device_io_done_bytes_total",
            "node_bcachefs_write_super_total",
        ],
        absent: &[],
    },
];

#[test]
fn sysfs_collectors_match_node_exporter_one_by_one() {
    let Some(ne) = crate::common::node_exporter() else {
        return;
    };
    let mut failures = Vec::new();
    for case in CASES {
        let what = format!("{} {:?}", case.collector, case.flags);
        let (pair, d) = sysfs_collector_differences(&ne, case.collector, case.flags);
        let fams = families(&pair.node_exporter);
        let n = samples(&pair.node_exporter);
        if !d.is_empty() {
            failures.push(format!("{what}: differences {d:?}"));
        }
        for p in case.present {
            let there = fams.contains_key(*p) || n.keys().any(|k| k.contains(p));
            if !there {
                failures.push(format!("{what}: node_exporter has no {p}"));
            }
        }
        for a in case.absent {
            if n.keys().any(|k| k.contains(a)) {
                failures.push(format!("{what}: node_exporter still has {a}"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
