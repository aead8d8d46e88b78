//! eBPF probes (run-queue latency, page cache, packet drops, block I/O
//! latency, softirqs, reclaim stalls), loaded with aya. Each probe becomes a
//! [`crate::collector::Collector`] that reads its per-CPU map at scrape
//! time.
//!
//! Loading happens in a short-lived child process, not in the daemon:
//! aya parses the kernel's 5.5 MB BTF once per object (tens of MB of heap),
//! and the daemon's peak RSS would keep that high-water mark for life. The
//! child loads and attaches, then hands the daemon one fd per map it
//! reads, per program and per link over a unix socket, and exits
//! ([`loader_process`]). A loader that crashes takes only the probes down.
//!
//! Where things are:
//! - kernel side: `ebpf-probes/*.bpf.c` (C, CO-RE), map layouts in
//!   `ebpf-probes/usescope.h`, mirrored in [`layout`];
//! - [`loader_process`]: the child's main, its report, and the daemon's
//!   side that adopts the fds ([`attach`] below wires them to collectors);
//! - [`fd_passing`]: one message of bytes plus fds (SCM_RIGHTS);
//! - [`loader`]: the embedded objects and run-time hook selection;
//! - one module per probe ([`runqlat`], [`cachestat`], [`drops`],
//!   [`biolatency`], [`softirq`], [`reclaim`]): its modes (program, tracepoint), its loading and its
//!   collector;
//! - [`log2_hist`]: the latency buckets runqlat, biolatency, softirq and
//!   reclaim share;
//! - [`status`]: `usescope_probe_up`/`_info` and per-program BPF statistics;
//! - [`btf`]: reads enums from kernel BTF, to name drop reasons;
//! - [`sys`]: the few `bpf(2)` calls made without aya.
//!
//! Probes degrade, the daemon does not: a probe that cannot load logs one
//! warning naming the cause and reports `usescope_probe_up{probe} 0`.

pub mod biolatency;
pub mod btf;
pub mod cachestat;
pub mod drops;
pub mod fd_passing;
pub mod layout;
pub mod loader;
pub mod loader_process;
pub mod log2_hist;
pub mod percpu;
pub mod reclaim;
pub mod runqlat;
pub mod softirq;
pub mod status;
pub mod sys;

use std::os::fd::OwnedFd;

use aya::Ebpf;
use clap::{Arg, ArgAction, ArgMatches, Command, value_parser};

use crate::collector::{Collector, Scraper};
use loader::{Mode, ProbeError};
use status::{ProbeStatus, StatsCollector, StatusCollector};

pub struct ProbeSpec {
    pub name: &'static str,
    pub help: &'static str,
    /// Whether the probe runs unless `--no-probe.NAME` is given (otherwise
    /// only with `--probe.NAME`).
    pub default_enabled: bool,
    /// Scraper name of the probe's collector (`node_scrape_collector_*`).
    pub collector: &'static str,
    /// The hook modes, in order of preference.
    pub modes: &'static [Mode],
    /// The per-CPU map (array or hash) the collector reads.
    pub map: &'static str,
    /// In the loader process: load and attach.
    pub load: fn(&Kernel, &ProbeSettings) -> Result<Loaded, ProbeError>,
    /// In the daemon: the collector over the handed-over map's fd, with
    /// the names the loader resolved (drop reasons; empty for other
    /// probes), or why the map is not what the probe expects.
    pub build: BuildCollector,
}

/// A probe's collector constructor (see [`ProbeSpec::build`]).
pub type BuildCollector =
    fn(OwnedFd, Vec<String>, &ProbeSettings) -> Result<Box<dyn Collector>, String>;

/// Every probe, toggled by `--[no-]probe.NAME`.
pub const ALL: &[ProbeSpec] = &[
    ProbeSpec {
        name: "runqlat",
        help: "Run-queue latency histogram (sched tracepoints)",
        default_enabled: true,
        collector: runqlat::COLLECTOR,
        modes: runqlat::MODES,
        map: runqlat::MAP,
        load: runqlat::load,
        build: runqlat::collector,
    },
    ProbeSpec {
        name: "cachestat",
        help: "Page-cache accesses, misses and dirtied pages (filemap tracepoints)",
        default_enabled: true,
        collector: cachestat::COLLECTOR,
        modes: cachestat::MODES,
        map: cachestat::MAP,
        load: cachestat::load,
        build: cachestat::collector,
    },
    ProbeSpec {
        name: "drops",
        help: "Packet drops by kernel drop reason (skb:kfree_skb)",
        default_enabled: true,
        collector: drops::COLLECTOR,
        modes: drops::MODES,
        map: drops::MAP,
        load: drops::load,
        build: drops::collector,
    },
    ProbeSpec {
        name: "biolatency",
        help: "Block I/O latency histogram per disk and op (block_rq_issue/complete tracepoints); off by default: two program runs with hash lookups per I/O",
        default_enabled: false,
        collector: biolatency::COLLECTOR,
        modes: biolatency::MODES,
        map: biolatency::MAP,
        load: biolatency::load,
        build: biolatency::collector,
    },
    ProbeSpec {
        name: "softirq",
        help: "Softirq time and entries per CPU and vector, raise-to-entry latency histogram (softirq tracepoints); off by default: three program runs per softirq",
        default_enabled: false,
        collector: softirq::COLLECTOR,
        modes: softirq::MODES,
        map: softirq::MAP,
        load: softirq::load,
        build: softirq::collector,
    },
    ProbeSpec {
        name: "reclaim",
        help: "Direct-reclaim (global, memcg) and compaction stall latency histograms (vmscan and compaction tracepoints); off by default, though it only runs when a task stalls",
        default_enabled: false,
        collector: reclaim::COLLECTOR,
        modes: reclaim::MODES,
        map: reclaim::MAP,
        load: reclaim::load,
        build: reclaim::collector,
    },
];

pub const DEFAULT_RUNQLAT_MAX_TASKS: u32 = 10240;

/// `--probe.runqlat.source`: where runqlat's latencies come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunqlatSource {
    /// The scheduler's run_delay where the kernel keeps it, else wakeups
    /// with task storage, else wakeups with the LRU hash.
    Auto,
    /// Timed from wakeups, start times in task-local storage (else the
    /// LRU hash).
    TaskStorage,
    /// Timed from wakeups, start times in the LRU hash.
    LruHash,
}

#[derive(Debug, Clone)]
pub struct ProbeSettings {
    pub enabled: Vec<&'static str>,
    /// `--probe.runqlat.per-cpu`: a `cpu` label on the latency histogram.
    pub runqlat_per_cpu: bool,
    /// `--probe.runqlat.max-tasks`: entries of the LRU start-time map.
    pub runqlat_max_tasks: u32,
    /// `--probe.runqlat.source`: which design runqlat loads (the others
    /// are fallbacks; forcing one compares them).
    pub runqlat_source: RunqlatSource,
    /// `--probe.runqlat.pid`: only this process's tasks (0: all).
    pub runqlat_pid: u32,
    /// `--probe.drops.protocol-label`: a `protocol` label on drops.
    pub drops_protocol_label: bool,
    /// `--probe.cachestat.pid`: count one process's page-cache use only
    /// (0: every process).
    pub cachestat_pid: u32,
    /// `--[no-]probe.bpf-stats`: the kernel's per-program run-time
    /// statistics (off by default: they cost every BPF program on the host).
    pub bpf_stats: bool,
}

impl Default for ProbeSettings {
    fn default() -> ProbeSettings {
        ProbeSettings {
            enabled: Vec::new(),
            runqlat_per_cpu: false,
            runqlat_max_tasks: DEFAULT_RUNQLAT_MAX_TASKS,
            runqlat_source: RunqlatSource::Auto,
            runqlat_pid: 0,
            drops_protocol_label: false,
            cachestat_pid: 0,
            bpf_stats: false,
        }
    }
}

/// Probe-specific flags.
pub fn add_args(cmd: Command) -> Command {
    cmd.arg(
        Arg::new("probe.runqlat.per-cpu")
            .long("probe.runqlat.per-cpu")
            .action(ArgAction::SetTrue)
            .help("Add a cpu label to the run-queue latency histogram (one histogram per CPU)"),
    )
    .arg(
        Arg::new("probe.runqlat.max-tasks")
            .long("probe.runqlat.max-tasks")
            .default_value("10240")
            .value_parser(value_parser!(u32).range(1..))
            .help("Size of the runqlat start-time map when it is the LRU hash (kernels without sched_info and task storage, or --probe.runqlat.source=lru-hash): runnable tasks tracked at once"),
    )
    .arg(
        Arg::new("probe.runqlat.source")
            .long("probe.runqlat.source")
            .default_value("auto")
            .value_parser(["auto", "task-storage", "lru-hash"])
            .help("Where runqlat's latencies come from: auto (the scheduler's own run_delay where the kernel keeps it, else timed from wakeups with task-local storage, else with an LRU hash), task-storage or lru-hash (timed from wakeups, to compare)"),
    )
    .arg(
        Arg::new("probe.runqlat.pid")
            .long("probe.runqlat.pid")
            .value_name("PID")
            .value_parser(value_parser!(u32).range(1..))
            .help("Measure the run-queue latency of this one process's threads only (its pid as the host sees it), as bcc's runqlat -p; default: every task"),
    )
    .arg(
        Arg::new("probe.drops.protocol-label")
            .long("probe.drops.protocol-label")
            .action(ArgAction::SetTrue)
            .help("Add a protocol label (ipv4, ipv6, arp, other) to usescope_skb_drops_total"),
    )
    .arg(
        Arg::new("probe.cachestat.pid")
            .long("probe.cachestat.pid")
            .value_name("PID")
            .value_parser(value_parser!(u32).range(1..))
            .help("Count the page-cache use of this one process only (its pid as the host sees it); default: every process"),
    )
    .arg(
        Arg::new("probe.bpf-stats")
            .long("probe.bpf-stats")
            .action(ArgAction::SetTrue)
            .overrides_with("no-probe.bpf-stats")
            .help("Export usescope_bpf_program_* by enabling the kernel's BPF run-time statistics (default: disabled). Needs CAP_SYS_ADMIN, and while on, every BPF program on the host, not only usescope's, pays two clock reads per run"),
    )
    .arg(
        Arg::new("no-probe.bpf-stats")
            .long("no-probe.bpf-stats")
            .action(ArgAction::SetTrue)
            .overrides_with("probe.bpf-stats")
            .hide(true),
    )
    .arg(
        Arg::new(loader_process::FLAG)
            .long(loader_process::FLAG)
            .action(ArgAction::SetTrue)
            .hide(true),
    )
}

pub fn settings_from(m: &ArgMatches, enabled: Vec<&'static str>) -> ProbeSettings {
    ProbeSettings {
        enabled,
        runqlat_per_cpu: m.get_flag("probe.runqlat.per-cpu"),
        runqlat_max_tasks: m
            .get_one::<u32>("probe.runqlat.max-tasks")
            .copied()
            .unwrap_or(DEFAULT_RUNQLAT_MAX_TASKS),
        runqlat_source: match m
            .get_one::<String>("probe.runqlat.source")
            .map(String::as_str)
        {
            Some("task-storage") => RunqlatSource::TaskStorage,
            Some("lru-hash") => RunqlatSource::LruHash,
            _ => RunqlatSource::Auto,
        },
        runqlat_pid: m.get_one::<u32>("probe.runqlat.pid").copied().unwrap_or(0),
        drops_protocol_label: m.get_flag("probe.drops.protocol-label"),
        cachestat_pid: m
            .get_one::<u32>("probe.cachestat.pid")
            .copied()
            .unwrap_or(0),
        bpf_stats: m.get_flag("probe.bpf-stats"),
    }
}

/// The running kernel's BTF, read in the loader process: the raw bytes
/// (for our enum reader) and aya's parse of it (for CO-RE relocations and
/// tp_btf attach ids).
pub struct Kernel {
    pub btf_bytes: Vec<u8>,
    pub btf: aya::Btf,
}

const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

impl Kernel {
    pub fn open() -> Result<Kernel, ProbeError> {
        let no_btf = |e: &dyn std::fmt::Display| {
            ProbeError(format!(
                "kernel BTF unavailable at {VMLINUX_BTF}: {e} (needs CONFIG_DEBUG_INFO_BTF=y)"
            ))
        };
        let btf_bytes = std::fs::read(VMLINUX_BTF).map_err(|e| no_btf(&e))?;
        let btf =
            aya::Btf::parse(&btf_bytes, aya::Endianness::default()).map_err(|e| no_btf(&e))?;
        Ok(Kernel { btf_bytes, btf })
    }
}

/// In the loader process: a probe whose programs are attached, until its
/// fds have been handed to the daemon.
pub struct Loaded {
    pub mode: &'static Mode,
    /// Programs and maps; the program and map fds are duplicated from here.
    pub ebpf: Ebpf,
    /// One fd per attached program; closing it detaches the program.
    pub links: Vec<OwnedFd>,
    /// Names the collector needs (drop reasons); empty for other probes.
    pub names: Vec<String>,
}

/// In the daemon: what keeps the probes attached. Dropping it closes the
/// links (detaching every program), then the statistics fd.
pub struct Probes {
    _links: Vec<OwnedFd>,
    _stats: Option<OwnedFd>,
}

/// Runs the loader process for the enabled probes, registers a collector
/// for each probe it attached and the status collectors for all of them.
/// Returns a guard whose drop detaches everything.
pub fn attach(settings: &ProbeSettings, scraper: &mut Scraper) -> Probes {
    let enabled: Vec<&'static ProbeSpec> = ALL
        .iter()
        .filter(|p| settings.enabled.contains(&p.name))
        .collect();
    if enabled.is_empty() {
        return Probes {
            _links: Vec::new(),
            _stats: None,
        };
    }
    let mut handed = loader_process::run();
    let mut statuses = Vec::new();
    let mut links = Vec::new();
    let mut programs = Vec::new();
    for spec in enabled {
        match handed.adopt(spec, settings) {
            Ok(a) => {
                tracing::info!(probe = spec.name, mode = a.mode.name, "probe attached");
                scraper.add(spec.collector, a.collector);
                statuses.push(ProbeStatus {
                    probe: spec.name,
                    mode: Some(a.mode.name),
                });
                links.extend(a.links);
                programs.extend(a.programs);
            }
            Err(e) => {
                tracing::warn!(probe = spec.name, cause = %e, "probe disabled");
                statuses.push(ProbeStatus {
                    probe: spec.name,
                    mode: None,
                });
            }
        }
    }
    scraper.add("probes", Box::new(StatusCollector { probes: statuses }));
    let stats = if programs.is_empty() || !settings.bpf_stats {
        None
    } else {
        enable_stats()
    };
    if stats.is_some() {
        scraper.add("probe_stats", Box::new(StatsCollector::new(programs)));
    }
    Probes {
        _links: links,
        _stats: stats,
    }
}

/// Turns on the kernel's per-program run-time statistics for as long as the
/// returned fd lives. They cost every BPF program on the host two clock
/// reads per run, which is why the kernel keeps them off by default (and
/// why `--probe.bpf-stats` is opt-in).
fn enable_stats() -> Option<OwnedFd> {
    match aya::sys::enable_stats(aya::sys::Stats::RunTime) {
        Ok(fd) => Some(fd),
        Err(e) => {
            tracing::warn!(error = %e, "BPF run-time statistics unavailable (needs CAP_SYS_ADMIN); usescope_bpf_program_* not exported");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RunqlatSource;

    #[test]
    fn flags() {
        let c = crate::cli::parse(["usescope"]).unwrap();
        assert!(!c.probes.runqlat_per_cpu);
        assert_eq!(c.probes.runqlat_max_tasks, 10240);
        assert!(!c.probes.drops_protocol_label);
        assert!(!c.probes.bpf_stats, "opt-in");
        assert_eq!(c.probes.runqlat_source, RunqlatSource::Auto);
        assert_eq!(c.probes.enabled, ["runqlat", "cachestat", "drops"]);
        let c = crate::cli::parse([
            "usescope",
            "--probe.runqlat.per-cpu",
            "--probe.runqlat.max-tasks=64",
            "--probe.drops.protocol-label",
            "--no-probe.cachestat",
            "--probe.bpf-stats",
        ])
        .unwrap();
        assert!(c.probes.bpf_stats);
        assert!(c.probes.runqlat_per_cpu);
        assert_eq!(c.probes.runqlat_max_tasks, 64);
        assert!(c.probes.drops_protocol_label);
        assert_eq!(c.probes.enabled, ["runqlat", "drops"]);
        let c = crate::cli::parse([
            "usescope",
            "--probe.biolatency",
            "--probe.softirq",
            "--probe.reclaim",
            "--probe.runqlat.source=lru-hash",
        ])
        .unwrap();
        assert_eq!(
            c.probes.enabled,
            [
                "runqlat",
                "cachestat",
                "drops",
                "biolatency",
                "softirq",
                "reclaim"
            ]
        );
        assert_eq!(c.probes.runqlat_source, RunqlatSource::LruHash);
        let c = crate::cli::parse(["usescope", "--probe.runqlat.source=task-storage"]).unwrap();
        assert_eq!(c.probes.runqlat_source, RunqlatSource::TaskStorage);
        assert_eq!(c.probes.runqlat_pid, 0, "every task by default");
        let c = crate::cli::parse(["usescope", "--probe.runqlat.pid=42"]).unwrap();
        assert_eq!(c.probes.runqlat_pid, 42);
        assert!(crate::cli::parse(["usescope", "--probe.runqlat.pid=0"]).is_err());
        assert!(crate::cli::parse(["usescope", "--probe.runqlat.source=hash"]).is_err());
        let c =
            crate::cli::parse(["usescope", "--probe.bpf-stats", "--no-probe.bpf-stats"]).unwrap();
        assert!(!c.probes.bpf_stats, "the last one wins");
        assert!(crate::cli::parse(["usescope", "--probe.runqlat.max-tasks=0"]).is_err());
    }
}
