//! node_exporter and usescope on the same fixture trees: the same families
//! (HELP and TYPE), label sets and values for textfile, hwmon,
//! thermal_zone, edac, nvme, cpufreq, powersupplyclass and diskstats' udev
//! families. The differences that remain
//! are listed here, each with its reason, and asserted exactly: a new
//! difference fails, and so does one that went away.
//!
//! Needs node_exporter 1.12.1 (`common::node_exporter`; scripts/setup.sh
//! installs it). Without it the tests skip through common/skip.rs, or
//! fail in CI (`USESCOPE_REQUIRE_BPF=1` or `CI=true`).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Daemon, fixture, http_get};

/// node_exporter on a free loopback port, killed on drop.
struct NodeExporter(Child, std::net::SocketAddr);

impl NodeExporter {
    fn start(bin: &Path, args: &[String]) -> NodeExporter {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let child = Command::new(bin)
            .arg(format!("--web.listen-address={addr}"))
            .arg("--collector.disable-defaults")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start node_exporter");
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "node_exporter did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        NodeExporter(child, addr)
    }

    fn scrape(&self) -> String {
        let r = http_get(self.1, "/metrics", &[]);
        assert_eq!(r.status, 200);
        r.text()
    }
}

impl Drop for NodeExporter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An exposition as families (name → (HELP, TYPE)) and samples
/// (`name{sorted labels}` → value), without the families that are each
/// exporter's own.
#[derive(Default, Debug)]
struct Parsed {
    families: BTreeMap<String, (String, String)>,
    samples: BTreeMap<String, f64>,
}

fn own(name: &str) -> bool {
    [
        "go_",
        "promhttp_",
        "process_",
        "usescope_",
        "node_scrape_collector_",
        "node_exporter_",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// A small reader of the text format as both exporters write it (label
/// values may hold escaped quotes, never a raw newline).
fn parse(text: &str) -> Parsed {
    let mut p = Parsed::default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            if !own(name) {
                p.families.entry(name.into()).or_default().0 = help.into();
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, t) = rest.split_once(' ').unwrap();
            if !own(name) {
                p.families.entry(name.into()).or_default().1 = t.into();
            }
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, l.strip_suffix('}').unwrap()),
            None => (series, ""),
        };
        if own(name) {
            continue;
        }
        let mut pairs = Vec::new();
        let mut rest = labels;
        while !rest.is_empty() {
            let (k, after) = rest.split_once("=\"").unwrap();
            let mut end = 0;
            let b = after.as_bytes();
            while b[end] != b'"' {
                end += if b[end] == b'\\' { 2 } else { 1 };
            }
            let mut v = after[..end].to_string();
            // le/quantile are numbers: compare them as numbers.
            if k == "le" || k == "quantile" {
                v = format!("{:?}", parse_value(&v));
            }
            pairs.push(format!("{k}=\"{v}\""));
            rest = after[end + 1..].trim_start_matches(',');
        }
        pairs.sort();
        p.samples
            .insert(format!("{name}{{{}}}", pairs.join(",")), parse_value(value));
    }
    p
}

fn parse_value(v: &str) -> f64 {
    match v {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().unwrap(),
    }
}

/// Everything that differs, one line each: `- ...` only node_exporter's,
/// `+ ...` only usescope's, `~ ...` both with other values or HELP/TYPE.
fn differences(ne: &Parsed, us: &Parsed, keep: impl Fn(&str) -> bool) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (k, v) in &ne.samples {
        if !keep(k) {
            continue;
        }
        match us.samples.get(k) {
            None => {
                out.insert(format!("- {k}"));
            }
            Some(u) if !(u == v || (u.is_nan() && v.is_nan())) => {
                out.insert(format!("~ {k} {v} vs {u}"));
            }
            Some(_) => {}
        }
    }
    for k in us.samples.keys() {
        if keep(k) && !ne.samples.contains_key(k) {
            out.insert(format!("+ {k}"));
        }
    }
    for (name, nf) in &ne.families {
        if let Some(uf) = us.families.get(name)
            && keep(name)
            && nf != uf
        {
            out.insert(format!("~ family {name}: {nf:?} vs {uf:?}"));
        }
    }
    out
}

fn both(ne_bin: &Path, args: &[String]) -> (Parsed, Parsed) {
    let ne = NodeExporter::start(ne_bin, args);
    let mut us_args: Vec<&str> = vec![
        "--collector.disable-defaults",
        "--no-probe.runqlat",
        "--no-probe.cachestat",
        "--no-probe.drops",
    ];
    us_args.extend(args.iter().map(String::as_str));
    let us = Daemon::start(&us_args);
    let (a, b) = (parse(&ne.scrape()), parse(&us.scrape()));
    assert!(us.stop().success());
    (a, b)
}

fn set(lines: &[&str]) -> BTreeSet<String> {
    lines.iter().map(|s| s.to_string()).collect()
}

#[test]
fn sysfs_collectors_match_node_exporter() {
    let Some(ne) = common::node_exporter() else {
        return;
    };
    let args = vec![
        format!("--path.sysfs={}", fixture("sys").display()),
        "--collector.hwmon".to_string(),
        "--collector.thermal_zone".to_string(),
    ];
    let (n, u) = both(&ne, &args);
    assert!(
        n.samples
            .keys()
            .any(|k| k.starts_with("node_hwmon_temp_celsius{"))
    );
    assert!(n.families.len() > 30, "{:?}", n.families.keys());
    assert_eq!(
        differences(&n, &u, |_| true),
        set(&[
            // thermal_zone2's temp cannot be read: node_exporter exports
            // 0 °C for it, usescope leaves the zone out.
            "- node_thermal_zone_temp{type=\"broken\",zone=\"2\"}",
        ])
    );
}

#[test]
fn hwmon_filters_match_node_exporter() {
    let Some(ne) = common::node_exporter() else {
        return;
    };
    let args = vec![
        format!("--path.sysfs={}", fixture("sys").display()),
        "--collector.hwmon".to_string(),
        "--collector.hwmon.chip-exclude=^nvme".to_string(),
        "--collector.hwmon.sensor-include=;(temp|in)[0-9]".to_string(),
    ];
    let (n, u) = both(&ne, &args);
    assert!(!n.samples.keys().any(|k| k.contains("nvme")));
    assert_eq!(differences(&n, &u, |_| true), BTreeSet::new());
}

#[test]
fn disk_udev_info_matches_node_exporter() {
    let Some(ne) = common::node_exporter() else {
        return;
    };
    let proc_dir = common::copy_tree(&fixture("proc"));
    let proc = proc_dir.path();
    std::fs::write(
        proc.join("diskstats"),
        "   8       0 sda 1 2 3 4 5 6 7 8 9 10 11\n 252       1 dm-1 1 2 3 4 5 6 7 8 9 10 11\n 254       0 vda 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17\n",
    )
    .unwrap();
    let sys_dir = common::temp_dir();
    let sys_root = sys_dir.path();
    common::copy_dir(&fixture("sys/block"), &sys_root.join("block"));
    std::fs::create_dir_all(sys_root.join("block/sda/queue")).unwrap();
    std::fs::write(sys_root.join("block/sda/queue/rotational"), "1\n").unwrap();
    let args = vec![
        format!("--path.procfs={}", proc.display()),
        format!("--path.sysfs={}", sys_root.display()),
        format!("--path.udev.data={}", fixture("udev").display()),
        "--collector.diskstats".to_string(),
    ];
    let (n, u) = both(&ne, &args);
    assert!(
        n.samples
            .keys()
            .any(|k| k.starts_with("node_disk_device_mapper_info{"))
    );
    assert!(
        n.samples
            .keys()
            .any(|k| k.starts_with("node_disk_ata_write_cache{"))
    );
    assert_eq!(differences(&n, &u, |_| true), BTreeSet::new());
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
    let Some(ne) = common::node_exporter() else {
        return;
    };
    let (n, u) = both(&ne, &textfile_args("good"));
    assert!(n.samples.len() > 20, "{:?}", n.samples);
    assert_eq!(n.samples.get("node_textfile_scrape_error{}"), Some(&0.0));
    assert_eq!(differences(&n, &u, |_| true), BTreeSet::new());
}

#[test]
fn textfile_bad_files_differences_are_the_listed_ones() {
    let Some(ne) = common::node_exporter() else {
        return;
    };
    let (n, u) = both(&ne, &textfile_args("bad"));
    let dir = fixture("textfile/bad");
    let d = dir.display();
    assert_eq!(u.samples.get("node_textfile_scrape_error{}"), Some(&1.0));
    assert_eq!(n.samples.get("node_textfile_scrape_error{}"), Some(&1.0));
    assert_eq!(
        differences(&n, &u, |_| true),
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
    let Some(ne) = common::node_exporter() else {
        return;
    };
    let (n, u) = both(&ne, &textfile_args("conflict"));
    let dir = fixture("textfile/conflict");
    let d = dir.display();
    let mtime = |f: &str| format!("- node_textfile_mtime_seconds{{file=\"{d}/{f}\"}}");
    assert_eq!(
        differences(&n, &u, |_| true),
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
    let Some(ne) = common::node_exporter() else {
        return;
    };
    let args = vec![
        format!("--path.sysfs={}", fixture("sys").display()),
        "--collector.cpufreq".to_string(),
        "--collector.powersupplyclass".to_string(),
    ];
    let (n, u) = both(&ne, &args);
    assert!(
        n.samples
            .contains_key("node_cpu_scaling_governor{cpu=\"0\",governor=\"schedutil\"}")
    );
    assert!(
        n.samples
            .contains_key("node_cpu_frequency_avg_hertz{cpu=\"1\"}")
    );
    assert!(
        n.samples
            .contains_key("node_power_supply_online{power_supply=\"AC\"}")
    );
    assert!(
        n.samples
            .keys()
            .any(|k| k.starts_with("node_power_supply_info{"))
    );
    assert_eq!(differences(&n, &u, |_| true), BTreeSet::new());

    let args = vec![
        format!("--path.sysfs={}", fixture("sys").display()),
        "--collector.powersupplyclass".to_string(),
        "--collector.powersupply.ignored-supplies=^BAT".to_string(),
    ];
    let (n, u) = both(&ne, &args);
    assert!(!n.samples.keys().any(|k| k.contains("BAT0")));
    assert!(
        n.samples
            .contains_key("node_power_supply_online{power_supply=\"AC\"}")
    );
    assert_eq!(differences(&n, &u, |_| true), BTreeSet::new());
}

/// `node_cpu_frequency_hertz` is both cpu's (/proc/cpuinfo, with
/// `--collector.cpu.info`) and cpufreq's. node_exporter keeps whichever
/// arrives first and drops the other; usescope writes cpu's and leaves
/// cpufreq's out. Either way: one family, written once.
#[test]
fn cpu_frequency_family_is_written_once() {
    let Some(ne) = common::node_exporter() else {
        return;
    };
    let args = [
        format!("--path.procfs={}", fixture("proc").display()),
        format!("--path.sysfs={}", fixture("sys").display()),
        "--collector.cpu".to_string(),
        "--collector.cpu.info".to_string(),
        "--collector.cpufreq".to_string(),
    ];
    let ne = NodeExporter::start(&ne, &args);
    let mut us_args = vec![
        "--collector.disable-defaults",
        "--no-probe.runqlat",
        "--no-probe.cachestat",
        "--no-probe.drops",
    ];
    us_args.extend(args.iter().map(String::as_str));
    let us = Daemon::start(&us_args);
    for (who, text) in [("node_exporter", ne.scrape()), ("usescope", us.scrape())] {
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
    let text = us.scrape();
    assert!(
        text.contains(
            "# HELP node_cpu_frequency_hertz CPU frequency in hertz from /proc/cpuinfo.\n"
        ),
        "{text}"
    );
    assert!(us.stop().success());
}

/// node_exporter and usescope with only `collector` on, over the sysfs
/// fixture tree: the differences (expected to be none).
fn sysfs_collector_differences(
    ne: &Path,
    collector: &str,
    extra: &[&str],
) -> (Parsed, BTreeSet<String>) {
    let mut args = vec![
        format!("--path.sysfs={}", fixture("sys").display()),
        format!("--collector.{collector}"),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let (n, u) = both(ne, &args);
    let d = differences(&n, &u, |_| true);
    (n, d)
}

#[test]
fn dmi_matches_node_exporter() {
    let Some(ne) = common::node_exporter() else {
        return;
    };
    let (n, d) = sysfs_collector_differences(&ne, "dmi", &[]);
    assert!(
        n.samples
            .keys()
            .any(|k| k.starts_with("node_dmi_info{") && k.contains("product_serial=\"9XK2F73\"")),
        "{:?}",
        n.samples
    );
    assert_eq!(d, BTreeSet::new());
}

/// Started as an unprivileged user, usescope leaves out the DMI files only
/// root may read (serials, product_uuid), without failing, as
/// node_exporter does; the rest are reported.
#[test]
fn dmi_leaves_out_root_only_strings_when_not_root() {
    use std::os::unix::fs::PermissionsExt;
    if !common::skip::unless_root("to run usescope as another user") {
        return;
    }
    let tmp = common::temp_dir();
    let root = tmp.path().join("root");
    common::copy_dir(&fixture("sys/class/dmi"), &root.join("class/dmi"));
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
        .arg(common::bin());
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
        common::sample(&expo, "node_scrape_collector_success{collector=\"dmi\"}"),
        Some(1.0)
    );
    assert!(d.stop().success());
}

#[test]
fn watchdog_matches_node_exporter() {
    let Some(ne) = common::node_exporter() else {
        return;
    };
    let (n, d) = sysfs_collector_differences(&ne, "watchdog", &[]);
    assert!(
        n.samples
            .contains_key("node_watchdog_timeleft_seconds{name=\"watchdog0\"}")
    );
    assert!(n.samples.keys().any(|k| k.contains("Software Watchdog")));
    assert_eq!(d, BTreeSet::new());
}

#[test]
fn rapl_matches_node_exporter_with_and_without_zone_label() {
    let Some(ne) = common::node_exporter() else {
        return;
    };
    let (n, d) = sysfs_collector_differences(&ne, "rapl", &[]);
    assert!(n.families.contains_key("node_rapl_dram_joules_total"));
    assert!(n.families.contains_key("node_rapl_package_joules_total"));
    assert_eq!(d, BTreeSet::new());
    let (n, d) = sysfs_collector_differences(&ne, "rapl", &["--collector.rapl.enable-zone-label"]);
    assert!(n.samples.keys().any(|k| k.contains("rapl_zone=\"core\"")));
    assert_eq!(d, BTreeSet::new());
}

#[test]
fn dmmultipath_matches_node_exporter() {
    let Some(ne) = common::node_exporter() else {
        return;
    };
    let (n, d) = sysfs_collector_differences(&ne, "dmmultipath", &[]);
    assert!(n.samples.contains_key(
        "node_dmmultipath_device_paths_failed{device=\"mpathb\",sysfs_name=\"dm-1\"}"
    ));
    assert_eq!(d, BTreeSet::new());
}

#[test]
fn infiniband_matches_node_exporter() {
    let Some(ne) = common::node_exporter() else {
        return;
    };
    let (n, d) = sysfs_collector_differences(&ne, "infiniband", &[]);
    assert!(
        n.samples
            .contains_key("node_infiniband_rx_write_requests_total{device=\"mlx5_0\",port=\"1\"}")
    );
    assert!(
        n.samples
            .contains_key("node_infiniband_state_id{device=\"mlx4_0\",port=\"2\"}")
    );
    assert_eq!(d, BTreeSet::new());
    let (n, d) = sysfs_collector_differences(
        &ne,
        "infiniband",
        &["--collector.infiniband.device-include=^mlx5"],
    );
    assert!(!n.samples.keys().any(|k| k.contains("mlx4_0")));
    assert_eq!(d, BTreeSet::new());
}

#[test]
fn fibrechannel_matches_node_exporter() {
    let Some(ne) = common::node_exporter() else {
        return;
    };
    let (n, d) = sysfs_collector_differences(&ne, "fibrechannel", &[]);
    assert!(
        n.samples
            .contains_key("node_fibrechannel_loss_of_signal_total{fc_host=\"host1\"}")
    );
    assert!(
        !n.samples
            .contains_key("node_fibrechannel_nos_total{fc_host=\"host0\"}")
    );
    assert_eq!(d, BTreeSet::new());
}

#[test]
fn tapestats_matches_node_exporter() {
    let Some(ne) = common::node_exporter() else {
        return;
    };
    let (n, d) = sysfs_collector_differences(&ne, "tapestats", &[]);
    assert!(
        n.samples
            .contains_key("node_tape_write_time_seconds_total{device=\"st0\"}")
    );
    assert_eq!(d, BTreeSet::new());
    let (n, d) = sysfs_collector_differences(
        &ne,
        "tapestats",
        &["--collector.tapestats.ignored-devices=^st0$"],
    );
    assert!(!n.samples.keys().any(|k| k.contains("\"st0\"")));
    assert_eq!(d, BTreeSet::new());
}

#[test]
fn bcache_matches_node_exporter_with_and_without_priority_stats() {
    let Some(ne) = common::node_exporter() else {
        return;
    };
    let (n, d) = sysfs_collector_differences(&ne, "bcache", &[]);
    assert!(
        n.families
            .contains_key("node_bcache_writeback_rate_proportional_term")
    );
    assert!(
        n.families
            .contains_key("node_bcache_cache_readaheads_total")
    );
    assert_eq!(d, BTreeSet::new());
    let (n, d) = sysfs_collector_differences(&ne, "bcache", &["--collector.bcache.priorityStats"]);
    assert!(
        n.families
            .contains_key("node_bcache_priority_stats_unused_percent")
    );
    assert_eq!(d, BTreeSet::new());
}

#[test]
fn bcachefs_matches_node_exporter() {
    let Some(ne) = common::node_exporter() else {
        return;
    };
    let (n, d) = sysfs_collector_differences(&ne, "bcachefs", &[]);
    assert!(
        n.families
            .contains_key("node_bcachefs_device_io_done_bytes_total")
    );
    assert!(n.families.contains_key("node_bcachefs_write_super_total"));
    assert_eq!(d, BTreeSet::new());
}
