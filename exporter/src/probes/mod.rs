//! eBPF probes (run-queue latency, page cache, packet drops, block I/O
//! latency, softirqs, reclaim stalls), loaded with aya. Each probe becomes a
//! [`crate::scrape::collector::Collector`] that reads its per-CPU map at scrape
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
//!   [`biolatency`], [`softirq`], [`reclaim`]): its `SPEC` (name, default,
//!   modes, map, flags, metrics; registered by one line in `registry!`
//!   below), its loading and its collector (docs/adding-a-probe.md);
//! - [`log2_hist`]: the latency buckets runqlat, biolatency, softirq and
//!   reclaim share;
//! - [`status`]: `usescope_probe_up`/`_info` and per-program BPF statistics;
//! - [`btf`]: reads enums from kernel BTF, to name drop reasons;
//! - [`sys`]: the few `bpf(2)` calls made without aya.
//!
//! Probes degrade, the daemon does not: a probe that cannot load logs one
//! warning naming the cause and reports `usescope_probe_up{probe} 0`.

pub mod btf;
pub mod cgroup_counts;
pub mod cgroup_ids;
pub mod fd_passing;
pub mod layout;
pub mod loader;
pub mod loader_process;
pub mod log2_hist;
pub mod percpu;
pub mod status;
pub mod sys;

use std::os::fd::OwnedFd;

use aya::Ebpf;
use clap::{Arg, ArgAction, ArgMatches, Command};

use crate::scrape::collector::{Collector, Scraper};
use crate::scrape::exposition::Desc;
use loader::{Mode, ProbeError};
use status::{ProbeStatus, StatsCollector, StatusCollector};

/// Declares each probe module and lists its `SPEC` in [`ALL`], in the same
/// order: registering a probe is one line here (docs/adding-a-probe.md).
macro_rules! registry {
    ($($module:ident),* $(,)?) => {
        $(pub mod $module;)*

        /// Every probe, toggled by `--[no-]probe.NAME`, in the order they
        /// load and their collectors write.
        pub const ALL: &[ProbeSpec] = &[$($module::SPEC),*];
    };
}

registry! {
    runqlat,
    cachestat,
    drops,
    biolatency,
    softirq,
    reclaim,
    exits,
    tasks,
    tcpretrans,
    tcpconnect,
    oomkill,
}

/// Everything about one probe, declared beside its code as `pub const
/// SPEC` and registered by one line in the `registry!` list above. Its
/// kernel side is `ebpf-probes/*.bpf.c`, which build.rs finds by itself.
pub struct ProbeSpec {
    /// `--probe.NAME`, and the `probe` label of `usescope_probe_*`.
    pub name: &'static str,
    /// One line for `--help`.
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
    /// The probe's own options, `--probe.NAME.*`.
    pub flags: &'static [ProbeFlag],
    /// The metric families its collector writes (probe-specific ones; the
    /// `usescope_probe_*` status families are common). The registry's tests
    /// check them against the naming rules and docs/probes.md,
    /// tests/probes.rs against a real scrape.
    pub metrics: &'static [&'static Desc],
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

/// A probe option, `--probe.NAME.OPTION`. cli.rs makes the clap argument
/// (and checks the value there, so a bad one stops start-up with one
/// line); the probe reads the value from [`ProbeSettings`] by `name`.
pub struct ProbeFlag {
    /// The whole flag without dashes: `probe.NAME.OPTION`.
    pub name: &'static str,
    pub help: &'static str,
    pub kind: ProbeFlagKind,
    /// The value when the flag is not given (shown in `--help`); None:
    /// unset. Never set for [`ProbeFlagKind::Bool`].
    pub default: Option<&'static str>,
    /// The value's placeholder in `--help` (`<PID>`); None: the flag's name.
    pub value_name: Option<&'static str>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeFlagKind {
    /// A switch: `--NAME` turns it on; off unless given.
    Bool,
    /// A number of at least `min`.
    U32 { min: u32 },
    /// One of these words.
    Choice(&'static [&'static str]),
}

/// A probe flag's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeFlagValue {
    Bool(bool),
    U32(u32),
    /// One of the [`ProbeFlagKind::Choice`] words.
    Choice(&'static str),
}

impl ProbeFlagValue {
    /// `raw` as a value of `flag` (what clap checks on the command line;
    /// here for defaults and tests).
    pub fn parse(flag: &ProbeFlag, raw: &str) -> Result<ProbeFlagValue, String> {
        match flag.kind {
            ProbeFlagKind::Bool => match raw {
                "true" => Ok(ProbeFlagValue::Bool(true)),
                "false" => Ok(ProbeFlagValue::Bool(false)),
                _ => Err(format!("{raw:?} is not true or false")),
            },
            ProbeFlagKind::U32 { min } => match raw.parse::<u32>() {
                Ok(n) if n >= min => Ok(ProbeFlagValue::U32(n)),
                _ => Err(format!(
                    "{raw:?} is not a number from {min} to {}",
                    u32::MAX
                )),
            },
            ProbeFlagKind::Choice(words) => words
                .iter()
                .find(|w| **w == raw)
                .map(|w| ProbeFlagValue::Choice(w))
                .ok_or_else(|| format!("{raw:?} is not one of {}", words.join(", "))),
        }
    }
}

/// Which probes run, and the values of the probe flags.
#[derive(Debug, Clone)]
pub struct ProbeSettings {
    pub enabled: Vec<&'static str>,
    /// `--[no-]probe.bpf-stats`: the kernel's per-program run-time
    /// statistics (off by default: they cost every BPF program on the host).
    pub bpf_stats: bool,
    /// `--probe.histogram.bucket-factor`: which of the kernel's log2 bucket
    /// bounds every probe histogram writes.
    pub histogram: log2_hist::Resolution,
    /// `--collector.cgroup.select`: which cgroups a per-cgroup probe view
    /// labels, so its series carry the cgroup collector's labels for the
    /// same cgroup (None: the collector's default).
    pub cgroup_select: Option<regex::Regex>,
    /// Flag name → value, for every registered probe flag that has one.
    flags: Vec<(&'static str, ProbeFlagValue)>,
}

/// No probe enabled, every flag at its default.
impl Default for ProbeSettings {
    fn default() -> ProbeSettings {
        let mut s = ProbeSettings {
            enabled: Vec::new(),
            bpf_stats: false,
            histogram: log2_hist::Resolution::default(),
            cgroup_select: None,
            flags: Vec::new(),
        };
        for flag in ALL.iter().flat_map(|p| p.flags) {
            let value = match (flag.kind, flag.default) {
                (ProbeFlagKind::Bool, _) => Some(ProbeFlagValue::Bool(false)),
                (_, Some(d)) => Some(
                    ProbeFlagValue::parse(flag, d)
                        .unwrap_or_else(|e| panic!("default of --{}: {e}", flag.name)),
                ),
                (_, None) => None,
            };
            s.set(flag.name, value);
        }
        s
    }
}

impl ProbeSettings {
    /// Sets (or with `None` clears) a flag's value.
    pub fn set(&mut self, flag: &'static str, value: Option<ProbeFlagValue>) {
        self.flags.retain(|(name, _)| *name != flag);
        if let Some(v) = value {
            self.flags.push((flag, v));
        }
    }

    pub fn flag(&self, flag: &str) -> Option<ProbeFlagValue> {
        self.flags.iter().find(|(n, _)| *n == flag).map(|&(_, v)| v)
    }

    /// The cgroups a per-cgroup view labels: `--collector.cgroup.select`,
    /// else the cgroup collector's default.
    pub fn cgroup_selection(&self) -> regex::Regex {
        self.cgroup_select.clone().unwrap_or_else(|| {
            regex::Regex::new(crate::kernel::cgroup_path::DEFAULT_SELECT)
                .expect("the default selection compiles")
        })
    }

    /// A [`ProbeFlagKind::Bool`] flag's value; false when unset.
    pub fn switch(&self, flag: &str) -> bool {
        self.flag(flag) == Some(ProbeFlagValue::Bool(true))
    }

    /// A [`ProbeFlagKind::U32`] flag's value.
    pub fn number(&self, flag: &str) -> Option<u32> {
        match self.flag(flag) {
            Some(ProbeFlagValue::U32(n)) => Some(n),
            _ => None,
        }
    }

    /// A [`ProbeFlagKind::Choice`] flag's value.
    pub fn choice(&self, flag: &str) -> Option<&'static str> {
        match self.flag(flag) {
            Some(ProbeFlagValue::Choice(w)) => Some(w),
            _ => None,
        }
    }
}

/// The flags of all probes together (each probe's own `--probe.NAME.*`
/// come from its spec, in cli.rs).
pub fn add_args(cmd: Command) -> Command {
    cmd.arg(
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
        Arg::new(log2_hist::FACTOR_FLAG)
            .long(log2_hist::FACTOR_FLAG)
            .value_parser(clap::builder::PossibleValuesParser::new(log2_hist::FACTORS))
            .default_value(log2_hist::DEFAULT_FACTOR)
            .help("Ratio between neighbouring bucket bounds of every probe histogram (runqlat, biolatency, softirq, reclaim): 2 writes all 25 of the kernel's log2 buckets (1 µs … 16.8 s, 28 series per histogram), 4 every second bound (15 series), 8 every third (11), 16 every fourth (9). Merged when written: counts stay exact, 8.192 ms is always a bound"),
    )
    .arg(
        Arg::new(loader_process::FLAG)
            .long(loader_process::FLAG)
            .action(ArgAction::SetTrue)
            .hide(true),
    )
}

/// The probe settings from parsed arguments: `enabled`, the global flags
/// (`--probe.bpf-stats`, `--probe.histogram.bucket-factor`), the cgroup
/// collector's selection and every registered probe flag (given, or at its
/// default).
pub fn settings_from(
    m: &ArgMatches,
    enabled: Vec<&'static str>,
    cgroup_select: Option<regex::Regex>,
) -> ProbeSettings {
    let mut s = ProbeSettings {
        enabled,
        cgroup_select,
        bpf_stats: m.get_flag("probe.bpf-stats"),
        histogram: m
            .get_one::<String>(log2_hist::FACTOR_FLAG)
            .and_then(|f| log2_hist::Resolution::from_factor(f))
            .unwrap_or_default(),
        ..ProbeSettings::default()
    };
    for flag in ALL.iter().flat_map(|p| p.flags) {
        let value = match flag.kind {
            ProbeFlagKind::Bool => Some(ProbeFlagValue::Bool(m.get_flag(flag.name))),
            ProbeFlagKind::U32 { .. } => {
                m.get_one::<u32>(flag.name).map(|&n| ProbeFlagValue::U32(n))
            }
            ProbeFlagKind::Choice(words) => m
                .get_one::<String>(flag.name)
                .and_then(|v| words.iter().find(|w| **w == v.as_str()))
                .map(|w| ProbeFlagValue::Choice(w)),
        };
        s.set(flag.name, value);
    }
    s
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
    /// One fd per attached program (and any link the probe made itself, such
    /// as an iterator); closing it detaches the program.
    pub links: Vec<OwnedFd>,
    /// Names the collector needs (drop reasons; the tasks iterator link's id);
    /// empty for other probes.
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
    if !programs.is_empty() {
        // Recursion misses are always counted; run time and runs only
        // while the kernel's statistics are on.
        let collector = StatsCollector::new(programs, stats.is_some());
        scraper.add("probe_stats", Box::new(collector));
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
            tracing::warn!(error = %e, "BPF run-time statistics unavailable (needs CAP_SYS_ADMIN); usescope_bpf_program_run_seconds_total and usescope_bpf_program_runs_total not exported");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::scrape::exposition::MetricType;
    use runqlat::RunqlatSource;

    /// Properties every registered probe must have: a new probe is checked
    /// by registering it.
    #[test]
    fn every_probe_is_declared_consistently() {
        let docs = include_str!("../../../docs/probes.md");
        let mut names = BTreeSet::new();
        let mut metrics = BTreeSet::new();
        for p in ALL {
            assert!(names.insert(p.name), "{} registered twice", p.name);
            assert_eq!(p.collector, format!("probe_{}", p.name));
            assert!(!p.help.is_empty() && !p.modes.is_empty() && !p.map.is_empty());
            assert!(
                docs.contains(&format!("\n## {}\n", p.name)),
                "docs/probes.md has no section `## {}`",
                p.name
            );
            for flag in p.flags {
                let prefix = format!("probe.{}.", p.name);
                assert!(
                    flag.name.starts_with(&prefix),
                    "{} outside {prefix}",
                    flag.name
                );
                assert!(
                    docs.contains(&format!("--{}", flag.name)),
                    "docs/probes.md does not mention --{}",
                    flag.name
                );
                assert!(flag.kind != ProbeFlagKind::Bool || flag.default.is_none());
                if let Some(d) = flag.default {
                    ProbeFlagValue::parse(flag, d).unwrap();
                }
            }
            assert!(!p.metrics.is_empty(), "{} declares no metrics", p.name);
            for m in p.metrics {
                assert!(metrics.insert(m.name), "{} written by two probes", m.name);
                assert!(
                    m.name.starts_with("usescope_")
                        && m.name
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                    "{}",
                    m.name
                );
                // Prometheus' conventions, as promtool checks them.
                assert_eq!(
                    m.name.ends_with("_total"),
                    m.kind == MetricType::Counter,
                    "{}: counters, and only counters, end in _total",
                    m.name
                );
                assert!(
                    docs.contains(m.name),
                    "docs/probes.md does not name {}",
                    m.name
                );
            }
        }
    }

    #[test]
    fn the_shared_histogram_flag_is_documented() {
        let docs = include_str!("../../../docs/probes.md");
        assert!(docs.contains(&format!("--{}", log2_hist::FACTOR_FLAG)));
        let help = crate::cli::command().render_long_help().to_string();
        assert!(help.contains(&format!("--{}", log2_hist::FACTOR_FLAG)));
        assert!(help.contains(&format!("[default: {}]", log2_hist::DEFAULT_FACTOR)));
    }

    #[test]
    fn defaults_and_generic_values() {
        let s = ProbeSettings::default();
        assert!(s.enabled.is_empty() && !s.bpf_stats);
        assert!(!s.switch(runqlat::PER_CPU));
        assert_eq!(s.number(runqlat::MAX_TASKS), Some(10240));
        assert_eq!(s.number(runqlat::PID), None, "no default: unset");
        assert_eq!(s.choice(runqlat::SOURCE), Some("auto"));
        // A getter of another kind sees nothing.
        assert_eq!(s.number(runqlat::SOURCE), None);
        let flag = &runqlat::SPEC.flags[1];
        assert_eq!(flag.name, runqlat::MAX_TASKS);
        assert_eq!(ProbeFlagValue::parse(flag, "7"), Ok(ProbeFlagValue::U32(7)));
        assert!(ProbeFlagValue::parse(flag, "0").is_err());
    }

    #[test]
    fn flags() {
        let c = crate::cli::parse(["usescope"]).unwrap();
        assert!(!c.probes.switch(runqlat::PER_CPU));
        assert_eq!(c.probes.number(runqlat::MAX_TASKS), Some(10240));
        assert!(!c.probes.switch(drops::PROTOCOL_LABEL));
        assert!(!c.probes.bpf_stats, "opt-in");
        assert_eq!(c.probes.histogram, log2_hist::Resolution::default());
        assert_eq!(runqlat::source(&c.probes), RunqlatSource::Auto);
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
        assert!(c.probes.switch(runqlat::PER_CPU));
        assert_eq!(c.probes.number(runqlat::MAX_TASKS), Some(64));
        assert!(c.probes.switch(drops::PROTOCOL_LABEL));
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
        assert_eq!(runqlat::source(&c.probes), RunqlatSource::LruHash);
        let c = crate::cli::parse(["usescope", "--probe.runqlat.source=task-storage"]).unwrap();
        assert_eq!(runqlat::source(&c.probes), RunqlatSource::TaskStorage);
        assert_eq!(c.probes.number(runqlat::PID), None, "every task by default");
        let c = crate::cli::parse(["usescope", "--probe.runqlat.pid=42"]).unwrap();
        assert_eq!(c.probes.number(runqlat::PID), Some(42));
        let c = crate::cli::parse(["usescope", "--probe.cachestat.pid=7"]).unwrap();
        assert_eq!(c.probes.number(cachestat::PID), Some(7));
        assert!(crate::cli::parse(["usescope", "--probe.cachestat.pid=0"]).is_err());
        assert!(crate::cli::parse(["usescope", "--probe.runqlat.pid=0"]).is_err());
        assert!(crate::cli::parse(["usescope", "--probe.runqlat.source=hash"]).is_err());
        for f in log2_hist::FACTORS {
            let c =
                crate::cli::parse(["usescope", &format!("--probe.histogram.bucket-factor={f}")])
                    .unwrap();
            assert_eq!(
                Some(c.probes.histogram),
                log2_hist::Resolution::from_factor(f)
            );
        }
        assert!(crate::cli::parse(["usescope", "--probe.histogram.bucket-factor=3"]).is_err());
        let c =
            crate::cli::parse(["usescope", "--probe.bpf-stats", "--no-probe.bpf-stats"]).unwrap();
        assert!(!c.probes.bpf_stats, "the last one wins");
        assert!(crate::cli::parse(["usescope", "--probe.runqlat.max-tasks=0"]).is_err());
    }
}
