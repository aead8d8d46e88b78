//! Command line, in Prometheus exporter conventions (`--web.listen-address`,
//! `--collector.NAME` / `--no-collector.NAME`, ...).
//!
//! Built with clap's builder API because the collector and probe flags are
//! generated from the registries ([`crate::collectors::ALL`],
//! [`crate::probes::ALL`]) rather than written out one by one: each
//! collector's `--collector.NAME` toggle and its own `--collector.NAME.*`
//! options come from its `SPEC`, and likewise each probe's `--probe.NAME`
//! and `--probe.NAME.*` from its own.

use std::net::{SocketAddr, ToSocketAddrs};

use clap::{Arg, ArgAction, ArgMatches, Command, value_parser};

use crate::collectors::{self, FlagValue, Settings};
use crate::kernel::cgroup_path::SELECT_FLAG as CGROUP_SELECT;
use crate::probes::{self, ProbeSettings};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Logfmt,
    Json,
}

#[derive(Debug)]
pub struct Config {
    pub listen_address: String,
    pub telemetry_path: String,
    /// 0 means unlimited.
    pub max_requests: usize,
    /// `--web.max-requests-per-peer`: a quarter of `max_requests` unless
    /// given; 0 means unlimited.
    pub max_requests_per_peer: usize,
    /// `--web.max-connections` and `--web.max-connections-per-peer`.
    pub max_connections: usize,
    pub max_connections_per_peer: usize,
    /// `--web.scrape-timeout`: the longest a request waits for its scrape.
    pub scrape_timeout: std::time::Duration,
    pub settings: Settings,
    pub collectors: Vec<&'static str>,
    pub probes: ProbeSettings,
    pub log_level: String,
    pub log_format: LogFormat,
    /// `--web.config.file`: TLS, basic auth and headers (exporter-toolkit format).
    pub web_config_file: Option<std::path::PathBuf>,
    /// `--runtime.user`: switch to this user after the probes attach.
    pub runtime_user: Option<String>,
    /// `--[no-]compat.node-exporter-build-info`: write node_exporter's
    /// build-info metric (on by default; docs/collectors/system.md).
    pub node_exporter_build_info: bool,
    /// Hidden `--internal.probe-loader`: this process is the short-lived
    /// probe loader the daemon started (see probes/loader_process.rs).
    pub probe_loader: bool,
}

pub fn command() -> Command {
    let mut cmd = Command::new("usescope")
        .version(env!("CARGO_PKG_VERSION"))
        .long_version(concat!(
            env!("CARGO_PKG_VERSION"),
            " (revision ",
            env!("USESCOPE_GIT_REVISION"),
            ", rustc ",
            env!("USESCOPE_RUSTC_VERSION"),
            ")"
        ))
        .about("Linux USE-method exporter for Prometheus: /proc collectors plus eBPF probes")
        .arg(
            Arg::new("web.listen-address")
                .long("web.listen-address")
                .default_value(":9200")
                .help("Address on which to expose metrics and web interface"),
        )
        .arg(
            Arg::new("web.telemetry-path")
                .long("web.telemetry-path")
                .default_value("/metrics")
                .value_parser(telemetry_path)
                .help("Path under which to expose metrics"),
        )
        .arg(
            Arg::new("web.max-requests")
                .long("web.max-requests")
                .default_value("40")
                .value_parser(value_parser!(usize))
                .help("Maximum number of parallel scrape requests; beyond it a scrape gets 503. 0 disables the limit"),
        )
        .arg(
            Arg::new("web.max-requests-per-peer")
                .long("web.max-requests-per-peer")
                .value_parser(value_parser!(usize))
                .help("Most of those requests one IPv4 address or IPv6 /64 may hold at once (beyond it a scrape gets 429), so that a client that never reads its pages cannot take every slot. Default: a quarter of --web.max-requests, at least 1. 0 disables the limit"),
        )
        .arg(
            Arg::new("web.max-connections")
                .long("web.max-connections")
                .default_value("1024")
                .value_parser(value_parser!(u64).range(1..))
                .help("Most open connections in all; beyond it new ones are closed at once. Lowered at start to fit the open-file limit"),
        )
        .arg(
            Arg::new("web.max-connections-per-peer")
                .long("web.max-connections-per-peer")
                .default_value("64")
                .value_parser(value_parser!(u64).range(1..))
                .help("Most open connections from one IPv4 address or IPv6 /64, so that one client cannot take every connection"),
        )
        .arg(
            Arg::new("web.scrape-timeout")
                .long("web.scrape-timeout")
                .default_value("10s")
                .value_parser(seconds)
                .help("Longest a scrape may take before its request gets 503 (a read that never returns, e.g. a hung mount, cannot hold it longer; the collector stuck in it is skipped until it returns). Prometheus' X-Prometheus-Scrape-Timeout-Seconds lowers it"),
        )
        .arg(
            Arg::new("web.config.file")
                .long("web.config.file")
                .help("Path to a configuration file that can enable TLS or authentication (exporter-toolkit format); SIGHUP reloads it"),
        )
        .arg(
            Arg::new("runtime.user")
                .long("runtime.user")
                .help("After the probes attach, switch to this user (name or uid); all capabilities are dropped either way"),
        )
        .arg(
            Arg::new("path.procfs")
                .long("path.procfs")
                .default_value("/proc")
                .help("procfs mountpoint"),
        )
        .arg(
            Arg::new("path.sysfs")
                .long("path.sysfs")
                .default_value("/sys")
                .help("sysfs mountpoint"),
        )
        .arg(
            Arg::new("path.udev.data")
                .long("path.udev.data")
                .default_value("/run/udev/data")
                .help("udev data path"),
        )
        .arg(
            Arg::new("path.rootfs")
                .long("path.rootfs")
                .default_value("/")
                .help("rootfs mountpoint: where the host's / is mounted when running in a container (e.g. /host); the filesystem collector stats mount points under it and strips it from their label"),
        )
        .arg(
            Arg::new("collector.disable-defaults")
                .long("collector.disable-defaults")
                .action(ArgAction::SetTrue)
                .help("Set all collectors to disabled by default; enable them with --collector.NAME"),
        )
        .arg(
            Arg::new("compat.node-exporter-build-info")
                .long("compat.node-exporter-build-info")
                .action(ArgAction::SetTrue)
                .overrides_with_all(["compat.node-exporter-build-info", "no-compat.node-exporter-build-info"])
                .help("Write node_exporter_build_info (usescope's build, tags=\"usescope\"), which the node mixin's dashboards list hosts from (default: on; --no-compat.node-exporter-build-info turns it off)"),
        )
        .arg(
            Arg::new("no-compat.node-exporter-build-info")
                .long("no-compat.node-exporter-build-info")
                .action(ArgAction::SetTrue)
                .overrides_with_all(["compat.node-exporter-build-info", "no-compat.node-exporter-build-info"])
                .hide(true),
        )
        .arg(
            Arg::new("log.level")
                .long("log.level")
                .default_value("info")
                .value_parser(["debug", "info", "warn", "error"])
                .help("Only log messages with the given severity or above"),
        )
        .arg(
            Arg::new("log.format")
                .long("log.format")
                .default_value("logfmt")
                .value_parser(["logfmt", "json"])
                .help("Output format of log messages"),
        );
    for spec in collectors::ALL {
        cmd = add_toggle(cmd, "collector", spec.name, spec.help, spec.default_enabled);
        for flag in spec.flags {
            cmd = match flag.kind {
                collectors::FlagKind::Bool => add_switch(cmd, flag),
                _ => cmd.arg(collector_flag(flag)),
            };
        }
    }
    for spec in probes::ALL {
        cmd = add_toggle(cmd, "probe", spec.name, spec.help, spec.default_enabled);
    }
    for flag in probes::ALL.iter().flat_map(|spec| spec.flags) {
        cmd = cmd.arg(probe_flag(flag));
    }
    probes::add_args(cmd)
}

/// A probe's own option, as its spec declares it; clap checks the value
/// (range, choice), so a bad one stops start-up with one line.
fn probe_flag(flag: &'static probes::ProbeFlag) -> Arg {
    let arg = Arg::new(flag.name).long(flag.name).help(flag.help);
    let arg = match flag.kind {
        probes::ProbeFlagKind::Bool => arg.action(ArgAction::SetTrue),
        probes::ProbeFlagKind::U32 { min } => {
            arg.value_parser(value_parser!(u32).range(i64::from(min)..))
        }
        probes::ProbeFlagKind::Choice(words) => arg.value_parser(
            clap::builder::PossibleValuesParser::new(words.iter().copied()),
        ),
    };
    let arg = match flag.default {
        Some(d) => arg.default_value(d),
        None => arg,
    };
    match flag.value_name {
        Some(v) => arg.value_name(v),
        None => arg,
    }
}

/// A collector's own option, as its spec declares it. The value is parsed
/// (a regex compiled) here, so a bad one stops start-up with one line
/// instead of failing its collector on every scrape.
fn collector_flag(flag: &'static collectors::Flag) -> Arg {
    let kind = flag.kind;
    let mut arg = Arg::new(flag.name)
        .long(flag.name)
        .value_parser(move |raw: &str| FlagValue::parse(kind, raw))
        .help(flag.help);
    if let Some(d) = flag.default {
        arg = arg.default_value(d);
    }
    if let Some(other) = flag.conflicts_with {
        arg = arg.conflicts_with(other);
    }
    if kind == collectors::FlagKind::TextList {
        arg = arg.action(ArgAction::Append);
    }
    arg
}

/// A collector's bool option as kingpin spells it: `--NAME` and a hidden
/// `--no-NAME`; the last one given wins.
fn add_switch(cmd: Command, flag: &'static collectors::Flag) -> Command {
    let off: &'static str = Box::leak(format!("no-{}", flag.name).into_boxed_str());
    let help: &'static str = Box::leak(
        format!(
            "{} (default: {}; --no-{} to clear)",
            flag.help,
            flag.default.unwrap_or("false"),
            flag.name
        )
        .into_boxed_str(),
    );
    cmd.arg(
        Arg::new(flag.name)
            .long(flag.name)
            .action(ArgAction::SetTrue)
            .overrides_with_all([flag.name, off])
            .help(help),
    )
    .arg(
        Arg::new(off)
            .long(off)
            .action(ArgAction::SetTrue)
            .overrides_with_all([flag.name, off])
            .hide(true),
    )
}

/// Adds `--KIND.NAME` and `--no-KIND.NAME`; the last one given wins.
fn add_toggle(cmd: Command, kind: &str, name: &str, help: &str, default: bool) -> Command {
    let on: &'static str = Box::leak(format!("{kind}.{name}").into_boxed_str());
    let off: &'static str = Box::leak(format!("no-{kind}.{name}").into_boxed_str());
    let help: &'static str = Box::leak(
        format!(
            "Enable the {name} {kind} (default: {}). {help}",
            if default { "enabled" } else { "disabled" }
        )
        .into_boxed_str(),
    );
    cmd.arg(
        Arg::new(on)
            .long(on)
            .action(ArgAction::SetTrue)
            // Overriding itself too lets a flag repeat (wrappers append flags).
            .overrides_with_all([on, off])
            .help(help),
    )
    .arg(
        Arg::new(off)
            .long(off)
            .action(ArgAction::SetTrue)
            .overrides_with_all([on, off])
            .hide(true),
    )
}

fn toggled(m: &ArgMatches, kind: &str, name: &str, default: bool) -> bool {
    if m.get_flag(&format!("{kind}.{name}")) {
        true
    } else if m.get_flag(&format!("no-{kind}.{name}")) {
        false
    } else {
        default
    }
}

/// Parses arguments. An error is one line, ready to print.
pub fn parse<I, T>(args: I) -> Result<Config, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let m = command().try_get_matches_from(args)?;
    let s = |k: &str| m.get_one::<String>(k).cloned().unwrap_or_default();
    let defaults_off = m.get_flag("collector.disable-defaults");
    let collectors = collectors::ALL
        .iter()
        .filter(|c| toggled(&m, "collector", c.name, c.default_enabled && !defaults_off))
        .map(|c| c.name)
        .collect();
    let mut settings = Settings::with_roots(s("path.procfs"), s("path.sysfs"));
    settings.udev = Some(s("path.udev.data").into());
    settings.rootfs = s("path.rootfs").into();
    for flag in collectors::ALL.iter().flat_map(|spec| spec.flags) {
        let value = match flag.kind {
            // Every occurrence, in order, as one list.
            collectors::FlagKind::TextList => m.get_many::<FlagValue>(flag.name).map(|vs| {
                FlagValue::TextList(
                    vs.flat_map(|v| match v {
                        FlagValue::TextList(t) => t.clone(),
                        _ => Vec::new(),
                    })
                    .collect(),
                )
            }),
            collectors::FlagKind::Bool => {
                let on = if m.get_flag(flag.name) {
                    true
                } else if m.get_flag(&format!("no-{}", flag.name)) {
                    false
                } else {
                    flag.default == Some("true")
                };
                Some(FlagValue::Bool(on))
            }
            _ => m.get_one::<FlagValue>(flag.name).cloned(),
        };
        settings.set(flag.name, value);
    }
    let enabled_probes = probes::ALL
        .iter()
        .filter(|p| toggled(&m, "probe", p.name, p.default_enabled))
        .map(|p| p.name)
        .collect();
    let max_requests = m
        .get_one::<usize>("web.max-requests")
        .copied()
        .unwrap_or(40);
    Ok(Config {
        listen_address: s("web.listen-address"),
        telemetry_path: s("web.telemetry-path"),
        max_requests,
        max_requests_per_peer: m
            .get_one::<usize>("web.max-requests-per-peer")
            .copied()
            .unwrap_or((max_requests / 4).max(1) * usize::from(max_requests > 0)),
        max_connections: m
            .get_one::<u64>("web.max-connections")
            .map_or(1024, |&n| n as usize),
        max_connections_per_peer: m
            .get_one::<u64>("web.max-connections-per-peer")
            .map_or(64, |&n| n as usize),
        scrape_timeout: m
            .get_one::<std::time::Duration>("web.scrape-timeout")
            .copied()
            .unwrap_or(std::time::Duration::from_secs(10)),
        probes: probes::settings_from(&m, enabled_probes, settings.regex(CGROUP_SELECT).cloned()),
        settings,
        collectors,
        runtime_user: m.get_one::<String>("runtime.user").cloned(),
        probe_loader: m.get_flag(probes::loader_process::FLAG),
        node_exporter_build_info: !m.get_flag("no-compat.node-exporter-build-info"),
        web_config_file: m.get_one::<String>("web.config.file").map(Into::into),
        log_level: s("log.level"),
        log_format: if s("log.format") == "json" {
            LogFormat::Json
        } else {
            LogFormat::Logfmt
        },
    })
}

/// A duration in Prometheus' style: `10s`, `500ms`, `2m`, or bare seconds.
fn seconds(v: &str) -> Result<std::time::Duration, String> {
    let (number, unit) = match v.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => v.split_at(i),
        None => (v, "s"),
    };
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        _ => return Err(format!("unknown unit {unit:?} (use ms, s or m)")),
    };
    let n: f64 = number
        .parse()
        .map_err(|_| format!("{v:?} is not a duration like 10s or 500ms"))?;
    let d = n * scale;
    if !(0.01..=3600.0).contains(&d) {
        return Err(format!("{v:?} is outside 10ms..1h"));
    }
    Ok(std::time::Duration::from_secs_f64(d))
}

/// `--web.telemetry-path` must be a path of its own: absolute, and not one
/// of the routes the landing page and health checks already use.
fn telemetry_path(p: &str) -> Result<String, String> {
    if !p.starts_with('/') {
        return Err(format!("{p:?} must start with '/'"));
    }
    if matches!(p, "/" | "/-/healthy" | "/-/ready") {
        return Err(format!("{p:?} is already served by usescope"));
    }
    if p.contains(['{', '}', '*', ':']) {
        return Err(format!(
            "{p:?} contains a route pattern character ({{ }} * :)"
        ));
    }
    Ok(p.to_string())
}

/// Resolves `--web.listen-address`. `:PORT` means every IPv4 interface,
/// as in Go's net.Listen.
pub fn resolve_listen_address(addr: &str) -> Result<SocketAddr, String> {
    let full = if addr.starts_with(':') {
        format!("0.0.0.0{addr}")
    } else {
        addr.to_string()
    };
    full.to_socket_addrs()
        .map_err(|e| format!("invalid --web.listen-address {addr:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("invalid --web.listen-address {addr:?}: resolves to no address"))
}

/// Reduces clap's multi-line error to its first line.
pub fn one_line(e: &clap::Error) -> String {
    e.to_string()
        .lines()
        .next()
        .unwrap_or("invalid arguments")
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let c = parse(["usescope"]).unwrap();
        assert_eq!(c.listen_address, ":9200");
        assert_eq!(c.telemetry_path, "/metrics");
        assert_eq!(c.max_requests, 40);
        assert_eq!(c.max_requests_per_peer, 10);
        assert_eq!(c.scrape_timeout, std::time::Duration::from_secs(10));
        assert_eq!((c.max_connections, c.max_connections_per_peer), (1024, 64));
        assert!(c.collectors.contains(&"stat"));
        assert!(!c.collectors.contains(&"interrupts"));
    }

    #[test]
    fn toggles_last_wins() {
        let c = parse(["usescope", "--collector.interrupts", "--no-collector.stat"]).unwrap();
        assert!(c.collectors.contains(&"interrupts"));
        assert!(!c.collectors.contains(&"stat"));
        let c = parse(["usescope", "--no-collector.stat", "--collector.stat"]).unwrap();
        assert!(c.collectors.contains(&"stat"));
        let c = parse([
            "usescope",
            "--collector.interrupts",
            "--collector.interrupts",
        ])
        .unwrap();
        assert!(c.collectors.contains(&"interrupts"));
        let c = parse([
            "usescope",
            "--collector.disable-defaults",
            "--collector.loadavg",
        ])
        .unwrap();
        assert_eq!(c.collectors, vec!["loadavg"]);
    }

    #[test]
    fn bad_flag_is_one_line() {
        let e = parse(["usescope", "--bogus"]).unwrap_err();
        let line = one_line(&e);
        assert!(line.contains("--bogus"), "{line}");
        let e = parse(["usescope", "--web.max-requests", "x"]).unwrap_err();
        assert!(one_line(&e).contains("web.max-requests"));
    }

    #[test]
    fn scrape_timeout_takes_prometheus_durations() {
        let t = |v: &str| {
            parse(["usescope".to_string(), format!("--web.scrape-timeout={v}")])
                .map(|c| c.scrape_timeout)
        };
        assert_eq!(t("500ms").unwrap(), std::time::Duration::from_millis(500));
        assert_eq!(t("2m").unwrap(), std::time::Duration::from_secs(120));
        assert_eq!(t("3").unwrap(), std::time::Duration::from_secs(3));
        for bad in ["0s", "-1s", "1h", "ten", "5x"] {
            let e = t(bad).unwrap_err();
            assert!(one_line(&e).contains("web.scrape-timeout"), "{bad}: {e}");
        }
    }

    #[test]
    fn telemetry_path_is_validated() {
        for bad in ["/", "metrics", "/-/ready", "/-/healthy", "/m/{x}", "/*rest"] {
            let e = parse(["usescope", "--web.telemetry-path", bad]).unwrap_err();
            assert!(
                one_line(&e).contains("web.telemetry-path"),
                "{bad}: {}",
                one_line(&e)
            );
        }
        assert_eq!(
            parse(["usescope", "--web.telemetry-path=/probe/metrics"])
                .unwrap()
                .telemetry_path,
            "/probe/metrics"
        );
    }

    #[test]
    fn bad_regex_is_a_flag_error() {
        let e = parse(["usescope", "--collector.diskstats.device-exclude", "("]).unwrap_err();
        let line = one_line(&e);
        assert!(
            line.contains("device-exclude") && line.contains("unclosed group"),
            "{line}"
        );
    }

    #[test]
    fn netdev_device_filters() {
        use collectors::netdev::{EXCLUDE, INCLUDE};
        let c = parse(["usescope"]).unwrap();
        assert!(c.settings.regex(INCLUDE).is_none());
        assert!(c.settings.regex(EXCLUDE).is_none());
        let c = parse(["usescope", "--collector.netdev.device-exclude=^veth"]).unwrap();
        assert_eq!(c.settings.regex(EXCLUDE).unwrap().as_str(), "^veth");
        assert!(c.settings.regex(INCLUDE).is_none());
        let c = parse(["usescope", "--collector.netdev.device-include=^eth"]).unwrap();
        assert_eq!(c.settings.regex(INCLUDE).unwrap().as_str(), "^eth");
        let both = parse([
            "usescope",
            "--collector.netdev.device-include=^eth",
            "--collector.netdev.device-exclude=^veth",
        ]);
        assert!(one_line(&both.unwrap_err()).contains("cannot be used with"));
        let bad = parse(["usescope", "--collector.netdev.device-exclude=("]).unwrap_err();
        assert!(one_line(&bad).contains("unclosed group"));
    }

    #[test]
    fn diskstats_exclude_defaults_and_overrides() {
        use collectors::diskstats::{DEFAULT_DEVICE_EXCLUDE, DEVICE_EXCLUDE};
        let c = parse(["usescope"]).unwrap();
        assert_eq!(
            c.settings.regex(DEVICE_EXCLUDE).unwrap().as_str(),
            DEFAULT_DEVICE_EXCLUDE
        );
        let c = parse(["usescope", "--collector.diskstats.device-exclude=^x$"]).unwrap();
        assert_eq!(c.settings.regex(DEVICE_EXCLUDE).unwrap().as_str(), "^x$");
    }

    #[test]
    fn filesystem_flags() {
        use collectors::filesystem::*;
        let c = parse(["usescope"]).unwrap();
        assert_eq!(c.settings.rootfs, std::path::PathBuf::from("/"));
        assert_eq!(
            c.settings.duration(MOUNT_TIMEOUT),
            Some(std::time::Duration::from_secs(5))
        );
        assert_eq!(c.settings.integer(STAT_WORKERS), Some(4));
        assert_eq!(
            c.settings.regex(MOUNT_POINTS_EXCLUDE).unwrap().as_str(),
            DEFAULT_MOUNT_POINTS_EXCLUDE
        );
        assert_eq!(
            c.settings.regex(FS_TYPES_EXCLUDE).unwrap().as_str(),
            DEFAULT_FS_TYPES_EXCLUDE
        );
        assert!(c.collectors.contains(&"filesystem"));
        let c = parse([
            "usescope",
            "--path.rootfs=/host",
            "--collector.filesystem.mount-timeout=1m30s",
            "--collector.filesystem.stat-workers=8",
            "--collector.filesystem.mount-points-include=^/data",
        ])
        .unwrap();
        assert_eq!(c.settings.rootfs, std::path::PathBuf::from("/host"));
        assert_eq!(
            c.settings.duration(MOUNT_TIMEOUT),
            Some(std::time::Duration::from_secs(90))
        );
        assert_eq!(c.settings.integer(STAT_WORKERS), Some(8));
        assert_eq!(
            c.settings.regex(MOUNT_POINTS_INCLUDE).unwrap().as_str(),
            "^/data"
        );
        let t = |v: &str| {
            parse([
                "usescope".to_string(),
                format!("--collector.filesystem.mount-timeout={v}"),
            ])
            .map(|c| c.settings.duration(MOUNT_TIMEOUT).unwrap())
        };
        assert_eq!(t("500ms").unwrap(), std::time::Duration::from_millis(500));
        assert_eq!(t("1.5s").unwrap(), std::time::Duration::from_millis(1500));
        for bad in ["5", "0s", "-1s", "5x", "", "2d", "25h"] {
            let e = t(bad).unwrap_err();
            assert!(one_line(&e).contains("mount-timeout"), "{bad}: {e}");
        }
        let e = parse(["usescope", "--collector.filesystem.stat-workers=many"]).unwrap_err();
        assert!(one_line(&e).contains("stat-workers"), "{}", one_line(&e));
        // Exclude and include of one kind exclude each other, as in
        // node_exporter; the default exclude does not count.
        for (a, b) in [
            ("mount-points-exclude=^/x", "mount-points-include=^/y"),
            ("fs-types-exclude=^x$", "fs-types-include=^y$"),
        ] {
            let e = parse([
                "usescope".to_string(),
                format!("--collector.filesystem.{a}"),
                format!("--collector.filesystem.{b}"),
            ])
            .unwrap_err();
            assert!(
                one_line(&e).contains("cannot be used with"),
                "{}",
                one_line(&e)
            );
        }
        assert!(parse(["usescope", "--collector.filesystem.fs-types-include=^ext4$"]).is_ok());
    }

    /// `--help` is generated from the registry: every collector's toggle
    /// and every flag it declares are there.
    #[test]
    fn help_lists_every_registered_collector_and_flag() {
        let help = command().render_long_help().to_string();
        for spec in collectors::ALL {
            let toggle = format!("--collector.{}", spec.name);
            assert!(help.contains(&toggle), "{toggle} missing from --help");
            assert!(help.contains(spec.help), "{}'s help missing", spec.name);
            for flag in spec.flags {
                assert!(
                    help.contains(&format!("--{}", flag.name)),
                    "--{} missing from --help",
                    flag.name
                );
            }
        }
    }

    /// Likewise every registered probe's toggle and flags, with the
    /// defaults clap shows.
    #[test]
    fn help_lists_every_registered_probe_and_flag() {
        let help = command().render_long_help().to_string();
        for spec in probes::ALL {
            let toggle = format!("--probe.{}", spec.name);
            assert!(help.contains(&toggle), "{toggle} missing from --help");
            assert!(help.contains(spec.help), "{}'s help missing", spec.name);
            for flag in spec.flags {
                assert!(
                    help.contains(&format!("--{}", flag.name)),
                    "--{}",
                    flag.name
                );
                assert!(help.contains(flag.help), "--{}'s help missing", flag.name);
                if let Some(d) = flag.default {
                    assert!(help.contains(&format!("[default: {d}]")), "--{}", flag.name);
                }
            }
        }
    }

    #[test]
    fn bool_flags_are_kingpin_style() {
        use collectors::cpu::{GUEST, INFO};
        let c = parse(["usescope"]).unwrap();
        assert!(c.settings.switch(GUEST));
        assert!(!c.settings.switch(INFO));
        let c = parse([
            "usescope",
            "--no-collector.cpu.guest",
            "--collector.cpu.info",
        ])
        .unwrap();
        assert!(!c.settings.switch(GUEST));
        assert!(c.settings.switch(INFO));
        // Last one wins; no `=value` form, as in kingpin.
        let c = parse([
            "usescope",
            "--collector.cpu.info",
            "--no-collector.cpu.info",
        ])
        .unwrap();
        assert!(!c.settings.switch(INFO));
        assert!(parse(["usescope", "--collector.cpu.guest=false"]).is_err());
        // The collector toggle is separate from its options.
        let c = parse(["usescope", "--no-collector.cpu"]).unwrap();
        assert!(!c.collectors.contains(&"cpu"));
        assert!(c.collectors.contains(&"stat"));
        let c = parse(["usescope", "--collector.processes"]).unwrap();
        assert!(c.collectors.contains(&"processes"));
    }

    #[test]
    fn rootfs_and_build_info_flags() {
        let c = parse(["usescope"]).unwrap();
        assert_eq!(c.settings.rootfs, std::path::Path::new("/"));
        assert!(c.node_exporter_build_info);
        let c = parse([
            "usescope",
            "--path.rootfs=/host",
            "--no-compat.node-exporter-build-info",
        ])
        .unwrap();
        assert_eq!(c.settings.rootfs, std::path::Path::new("/host"));
        assert!(!c.node_exporter_build_info);
    }

    #[test]
    fn listen_address() {
        assert_eq!(resolve_listen_address(":9200").unwrap().port(), 9200);
        assert!(resolve_listen_address("127.0.0.1:0").is_ok());
        assert!(resolve_listen_address("nope").is_err());
    }
}
