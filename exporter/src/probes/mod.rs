//! eBPF probes (run-queue latency, page cache, packet drops), loaded with
//! aya. Each probe becomes a [`crate::collector::Collector`] that reads its
//! per-CPU maps at scrape time.
//!
//! Where things are:
//! - kernel side: `ebpf-probes/*.bpf.c` (C, CO-RE), map layouts in
//!   `ebpf-probes/usescope.h`, mirrored in [`layout`];
//! - [`loader`]: the embedded objects and run-time hook selection;
//! - one module per probe ([`runqlat`], [`cachestat`], [`drops`]): its
//!   modes (program, tracepoint), its start-up and its collector;
//! - [`status`]: `usescope_probe_up`/`_info` and per-program BPF statistics;
//! - [`btf`]: reads enums from kernel BTF, to name drop reasons.
//!
//! Probes degrade, the daemon does not: a probe that cannot load logs one
//! warning naming the cause and reports `usescope_probe_up{probe} 0`.

pub mod btf;
pub mod cachestat;
pub mod drops;
pub mod layout;
pub mod loader;
pub mod percpu;
pub mod runqlat;
pub mod status;

use std::os::fd::OwnedFd;
use std::sync::Arc;

use aya::Ebpf;
use clap::{Arg, ArgAction, ArgMatches, Command, value_parser};

use crate::collector::{Collector, Scraper};
use loader::{Mode, ProbeError};
use status::{ProbeStatus, StatsCollector, StatusCollector};

pub struct ProbeSpec {
    pub name: &'static str,
    pub help: &'static str,
    /// Scraper name of the probe's collector (`node_scrape_collector_*`).
    pub collector: &'static str,
    pub attach: fn(&Kernel, &ProbeSettings) -> Result<Attached, ProbeError>,
}

/// Every probe; each is enabled unless `--no-probe.NAME` is given.
pub const ALL: &[ProbeSpec] = &[
    ProbeSpec {
        name: "runqlat",
        help: "Run-queue latency histogram (sched tracepoints)",
        collector: runqlat::COLLECTOR,
        attach: runqlat::attach,
    },
    ProbeSpec {
        name: "cachestat",
        help: "Page-cache accesses, misses and dirtied pages (filemap tracepoints)",
        collector: cachestat::COLLECTOR,
        attach: cachestat::attach,
    },
    ProbeSpec {
        name: "drops",
        help: "Packet drops by kernel drop reason (skb:kfree_skb)",
        collector: drops::COLLECTOR,
        attach: drops::attach,
    },
];

pub const DEFAULT_RUNQLAT_MAX_TASKS: u32 = 10240;

#[derive(Debug, Clone)]
pub struct ProbeSettings {
    pub enabled: Vec<&'static str>,
    /// `--probe.runqlat.per-cpu`: a `cpu` label on the latency histogram.
    pub runqlat_per_cpu: bool,
    /// `--probe.runqlat.max-tasks`: entries of the LRU start-time map.
    pub runqlat_max_tasks: u32,
    /// `--probe.drops.protocol-label`: a `protocol` label on drops.
    pub drops_protocol_label: bool,
    /// `--[no-]probe.bpf-stats`: the kernel's per-program run-time
    /// statistics (on by default).
    pub bpf_stats: bool,
}

impl Default for ProbeSettings {
    fn default() -> ProbeSettings {
        ProbeSettings {
            enabled: Vec::new(),
            runqlat_per_cpu: false,
            runqlat_max_tasks: DEFAULT_RUNQLAT_MAX_TASKS,
            drops_protocol_label: false,
            bpf_stats: true,
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
            .help("Size of the runqlat start-time map (LRU): runnable tasks tracked at once"),
    )
    .arg(
        Arg::new("probe.drops.protocol-label")
            .long("probe.drops.protocol-label")
            .action(ArgAction::SetTrue)
            .help("Add a protocol label (ipv4, ipv6, arp, other) to usescope_skb_drops_total"),
    )
    .arg(
        Arg::new("probe.bpf-stats")
            .long("probe.bpf-stats")
            .action(ArgAction::SetTrue)
            .overrides_with("no-probe.bpf-stats")
            .help("Export usescope_bpf_program_* by enabling the kernel's BPF run-time statistics (default: enabled). They cost every BPF program on the host two clock reads per run; --no-probe.bpf-stats turns them off"),
    )
    .arg(
        Arg::new("no-probe.bpf-stats")
            .long("no-probe.bpf-stats")
            .action(ArgAction::SetTrue)
            .overrides_with("probe.bpf-stats")
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
        drops_protocol_label: m.get_flag("probe.drops.protocol-label"),
        bpf_stats: !m.get_flag("no-probe.bpf-stats"),
    }
}

/// The running kernel's BTF: the raw bytes (for our enum reader) and aya's
/// parse of it (for CO-RE relocations and tp_btf attach ids).
pub struct Kernel {
    pub btf_bytes: Vec<u8>,
    pub btf: aya::Btf,
}

const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

impl Kernel {
    fn open() -> Result<Kernel, ProbeError> {
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

/// A probe that loaded: its object (programs, links, remaining maps), the
/// mode it runs in, and its collector (which owns the maps it reads).
pub struct Attached {
    pub mode: &'static Mode,
    pub ebpf: Ebpf,
    pub collector: Box<dyn Collector>,
}

/// What stays loaded for the daemon's lifetime.
pub struct Loaded {
    pub probe: &'static str,
    pub mode: &'static Mode,
    pub ebpf: Ebpf,
}

/// Owns every loaded program and link; dropping it detaches them. Fields
/// drop in order: programs first, then the statistics fd.
pub struct Probes {
    _loaded: Arc<Vec<Loaded>>,
    _stats: Option<OwnedFd>,
}

/// Loads and attaches the enabled probes and registers their collectors.
/// Returns a guard whose drop detaches everything.
pub fn attach(settings: &ProbeSettings, scraper: &mut Scraper) -> Probes {
    let enabled: Vec<&ProbeSpec> = ALL
        .iter()
        .filter(|p| settings.enabled.contains(&p.name))
        .collect();
    let mut statuses = Vec::new();
    let mut loaded = Vec::new();
    let kernel = if enabled.is_empty() {
        Err(ProbeError("no probes enabled".into()))
    } else {
        raise_memlock_limit();
        Kernel::open()
    };
    for spec in enabled {
        match kernel
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|k| (spec.attach)(k, settings))
        {
            Ok(a) => {
                tracing::info!(probe = spec.name, mode = a.mode.name, "probe attached");
                scraper.add(spec.collector, a.collector);
                statuses.push(ProbeStatus {
                    probe: spec.name,
                    mode: Some(a.mode.name),
                });
                loaded.push(Loaded {
                    probe: spec.name,
                    mode: a.mode,
                    ebpf: a.ebpf,
                });
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
    if !statuses.is_empty() {
        scraper.add("probes", Box::new(StatusCollector { probes: statuses }));
    }
    let loaded = Arc::new(loaded);
    let stats = if loaded.is_empty() {
        None
    } else {
        enable_stats()
    };
    if stats.is_some() {
        scraper.add("probe_stats", Box::new(StatsCollector::new(loaded.clone())));
    }
    Probes {
        _loaded: loaded,
        _stats: stats,
    }
}

/// Turns on the kernel's per-program run-time statistics for as long as the
/// returned fd lives. They cost every BPF program on the host two clock
/// reads per run, which is why the kernel keeps them off by default (and
/// why `--no-probe.bpf-stats` exists).
fn enable_stats() -> Option<OwnedFd> {
    match aya::sys::enable_stats(aya::sys::Stats::RunTime) {
        Ok(fd) => Some(fd),
        Err(e) => {
            tracing::warn!(error = %e, "BPF run-time statistics unavailable (needs CAP_SYS_ADMIN); usescope_bpf_program_* not exported");
            None
        }
    }
}

/// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK; lift it so the
/// maps fit. Newer kernels use memory cgroups and ignore it.
fn raise_memlock_limit() {
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads a valid rlimit struct; failure (not root)
    // leaves the limit as it was, which is fine on 5.11+.
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) };
}

#[cfg(test)]
mod tests {
    #[test]
    fn flags() {
        let c = crate::cli::parse(["usescope"]).unwrap();
        assert!(!c.probes.runqlat_per_cpu);
        assert_eq!(c.probes.runqlat_max_tasks, 10240);
        assert!(!c.probes.drops_protocol_label);
        assert!(c.probes.bpf_stats);
        assert_eq!(c.probes.enabled, ["runqlat", "cachestat", "drops"]);
        let c = crate::cli::parse([
            "usescope",
            "--probe.runqlat.per-cpu",
            "--probe.runqlat.max-tasks=64",
            "--probe.drops.protocol-label",
            "--no-probe.cachestat",
            "--no-probe.bpf-stats",
        ])
        .unwrap();
        assert!(!c.probes.bpf_stats);
        assert!(c.probes.runqlat_per_cpu);
        assert_eq!(c.probes.runqlat_max_tasks, 64);
        assert!(c.probes.drops_protocol_label);
        assert_eq!(c.probes.enabled, ["runqlat", "drops"]);
        assert!(crate::cli::parse(["usescope", "--probe.runqlat.max-tasks=0"]).is_err());
    }
}
