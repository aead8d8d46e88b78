//! The /proc collectors: one module per kernel source, each a pure parser
//! (`parse(&str) -> Result<T, ParseError>`) plus a [`Collector`] that reads
//! the file at scrape time and encodes node_exporter-compatible families.
//!
//! [`ALL`] is the registry: the name used in `--collector.NAME`, whether it
//! is on by default, and how to build it from the [`Settings`].

use std::path::PathBuf;

use crate::collector::Collector;

pub mod conntrack;
pub mod diskstats;
pub mod dynamic;
pub mod interrupts;
pub mod loadavg;
pub mod meminfo;
pub mod netdev;
pub mod netstat;
pub mod pressure;
pub mod schedstat;
pub mod sockstat;
pub mod softirqs;
pub mod softnet;
pub mod stat;
pub mod uname;
pub mod vmstat;
pub mod zoneinfo;

/// Settings the collectors are built from (paths and per-collector knobs).
#[derive(Clone, Debug)]
pub struct Settings {
    pub procfs: PathBuf,
    pub sysfs: PathBuf,
    /// `--collector.diskstats.device-exclude`
    pub diskstats_device_exclude: String,
    /// `--collector.netdev.device-include` / `-exclude` (at most one).
    pub netdev_devices: Option<netdev::DeviceFilter>,
}

impl Settings {
    pub fn with_roots(procfs: impl Into<PathBuf>, sysfs: impl Into<PathBuf>) -> Settings {
        Settings {
            procfs: procfs.into(),
            sysfs: sysfs.into(),
            diskstats_device_exclude: diskstats::DEFAULT_DEVICE_EXCLUDE.to_string(),
            netdev_devices: None,
        }
    }
}

/// How a registered collector is built. Building must not fail: a source
/// that cannot be read shows up as a failed scrape, not a startup error.
pub type Build = fn(&Settings) -> Box<dyn Collector>;

pub struct Spec {
    pub name: &'static str,
    pub default_enabled: bool,
    pub help: &'static str,
    pub build: Build,
}

/// Every collector, in output order.
pub const ALL: &[Spec] = &[
    Spec {
        name: "stat",
        default_enabled: true,
        help: "CPU time per mode, interrupts, context switches, forks and procs from /proc/stat",
        build: stat::build,
    },
    Spec {
        name: "softirqs",
        default_enabled: true,
        help: "Softirq counts per CPU and type from /proc/softirqs",
        build: softirqs::build,
    },
    Spec {
        name: "loadavg",
        default_enabled: true,
        help: "Load averages from /proc/loadavg",
        build: loadavg::build,
    },
    Spec {
        name: "meminfo",
        default_enabled: true,
        help: "Memory statistics from /proc/meminfo",
        build: meminfo::build,
    },
    Spec {
        name: "vmstat",
        default_enabled: true,
        help: "Paging, reclaim and compaction counters from /proc/vmstat",
        build: vmstat::build,
    },
    Spec {
        name: "zoneinfo",
        default_enabled: true,
        help: "Free pages and watermarks per NUMA node and zone from /proc/zoneinfo",
        build: zoneinfo::build,
    },
    Spec {
        name: "pressure",
        default_enabled: true,
        help: "Pressure stall information from /proc/pressure",
        build: pressure::build,
    },
    Spec {
        name: "diskstats",
        default_enabled: true,
        help: "Disk I/O statistics from /proc/diskstats",
        build: diskstats::build,
    },
    Spec {
        name: "netdev",
        default_enabled: true,
        help: "Network interface statistics from /proc/net/dev",
        build: netdev::build,
    },
    Spec {
        name: "netstat",
        default_enabled: true,
        help: "Protocol statistics from /proc/net/netstat, snmp and snmp6",
        build: netstat::build,
    },
    Spec {
        name: "sockstat",
        default_enabled: true,
        help: "Socket statistics from /proc/net/sockstat and sockstat6",
        build: sockstat::build,
    },
    Spec {
        name: "softnet",
        default_enabled: true,
        help: "Per-CPU packet processing statistics from /proc/net/softnet_stat",
        build: softnet::build,
    },
    Spec {
        name: "conntrack",
        default_enabled: true,
        help: "Connection tracking table use and statistics",
        build: conntrack::build,
    },
    Spec {
        name: "schedstat",
        default_enabled: true,
        help: "Per-CPU scheduler statistics from /proc/schedstat",
        build: schedstat::build,
    },
    Spec {
        name: "interrupts",
        default_enabled: false,
        help: "Interrupt counts per CPU and line from /proc/interrupts (high cardinality)",
        build: interrupts::build,
    },
    Spec {
        name: "uname",
        default_enabled: true,
        help: "Kernel identity (node_uname_info)",
        build: uname::build,
    },
];

pub fn find(name: &str) -> Option<&'static Spec> {
    ALL.iter().find(|s| s.name == name)
}

/// Helpers shared by the collectors' unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use crate::collector::Collector;
    use crate::error::CollectError;
    use crate::exposition::{Encoder, Format};

    /// One `collect` into a fresh buffer, as Prometheus text.
    pub fn render(c: &mut dyn Collector) -> Result<String, CollectError> {
        let mut buf = Vec::new();
        let mut enc = Encoder::new(&mut buf, Format::PrometheusText);
        c.collect(&mut enc)?;
        Ok(String::from_utf8(buf).expect("the encoder writes UTF-8"))
    }
}
