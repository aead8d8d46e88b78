//! node_exporter's cpu collector (collector/cpu_linux.go), under its name,
//! so `--collector.cpu` / `--no-collector.cpu` and its flags work as there:
//!
//! - /proc/stat → `node_cpu_seconds_total{cpu,mode}` and, with
//!   `--collector.cpu.guest` (default on), `node_cpu_guest_seconds_total{cpu,mode}`;
//! - with `--collector.cpu.info` (default off; implied by either include
//!   flag), /proc/cpuinfo → `node_cpu_info{…}`, `node_cpu_frequency_hertz`,
//!   and `node_cpu_flag_info{flag}` / `node_cpu_bug_info{bug}` for the first
//!   CPU's flags and bugs matching `--collector.cpu.info.flags-include` /
//!   `--collector.cpu.info.bugs-include` (none without the flag);
//! - sysfs → `node_cpu_isolated{cpu}` (devices/system/cpu/isolated),
//!   `node_cpu_package_throttles_total{package}` and
//!   `node_cpu_core_throttles_total{package,core}` (cpuN/thermal_throttle,
//!   Intel only), `node_cpu_online{cpu}` (cpuN/online; nothing when the
//!   first CPU has no `online` file, as on x86 where cpu0 cannot go offline).
//!
//! The per-CPU counters go through node_exporter's clamp (`updateCPUStats`):
//! the kernel's idle and iowait can step backwards (NO_HZ accounting, a CPU
//! coming back from hotplug), and a counter that goes backwards looks like
//! a reset to `rate()`, which then reports a huge spike. So the collector
//! remembers each CPU's last emitted values and never emits less, unless
//! idle fell by 3 s or more, which node_exporter takes as a hotplug reset
//! and starts that CPU afresh.
//!
//! /proc/stat is also read by the `stat` collector (interrupts, context
//! switches, forks, boot time, procs), as node_exporter's two collectors
//! each read it; [`super::proc_stat::parse_into`] parses it for both.
//!
//! Differences from node_exporter: `node_cpu_frequency_hertz` comes with
//! `--collector.cpu.info` alone (node_exporter also wants its cpufreq
//! collector enabled, which it is by default); the cpufreq collector then
//! leaves its family of the same name out (see cpufreq.rs); a
//! `cpuN/online` file holding anything but 0 or 1 fails the collector
//! instead of reading as offline; isolated CPUs are read at every scrape,
//! not once at start-up. /proc/cpuinfo is parsed with procfs's x86 rules on
//! every architecture.

use std::path::Path;

use crate::collectors::{Flag, FlagKind, Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError, excerpt};
use crate::kernel::parse::{
    MAX_CPU_ID, fields, lines, parse_cpu_range_into, parse_fresh, recycle, u64_sysctl_into,
};
use crate::kernel::proc_stat::{self, Stat};
use crate::kernel::source::{Dir, Read, SourceFile};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder, u64_label};

pub const GUEST: &str = "collector.cpu.guest";
pub const INFO: &str = "collector.cpu.info";
pub const FLAGS_INCLUDE: &str = "collector.cpu.info.flags-include";
pub const BUGS_INCLUDE: &str = "collector.cpu.info.bugs-include";

pub const SPEC: Spec = Spec {
    name: "cpu",
    default_enabled: true,
    help: "CPU time per mode from /proc/stat; CPU info, isolation, thermal throttles and online state",
    flags: &[
        Flag {
            name: GUEST,
            help: "Enables metric node_cpu_guest_seconds_total",
            default: Some("true"),
            kind: FlagKind::Bool,
            conflicts_with: None,
        },
        Flag {
            name: INFO,
            help: "Enables metric cpu_info",
            default: Some("false"),
            kind: FlagKind::Bool,
            conflicts_with: None,
        },
        Flag {
            name: FLAGS_INCLUDE,
            help: "Filter the `flags` field in cpuInfo with a value that must be a regular expression",
            default: None,
            kind: FlagKind::Regex,
            conflicts_with: None,
        },
        Flag {
            name: BUGS_INCLUDE,
            help: "Filter the `bugs` field in cpuInfo with a value that must be a regular expression",
            default: None,
            kind: FlagKind::Regex,
            conflicts_with: None,
        },
    ],
    build,
    sources: &[
        Source::proc("stat", "cpu_stat"),
        Source::proc("cpuinfo", "cpuinfo").read_with(INFO),
        Source::sys("devices/system/cpu/isolated", "cpu_range"),
        Source::sys(
            "devices/system/cpu/cpu0/topology/physical_package_id",
            "cpu_sysfs_number",
        ),
        Source::sys(
            "devices/system/cpu/cpu0/topology/core_id",
            "cpu_sysfs_number",
        ),
        Source::sys(
            "devices/system/cpu/cpu0/thermal_throttle/core_throttle_count",
            "cpu_sysfs_number",
        ),
        Source::sys(
            "devices/system/cpu/cpu0/thermal_throttle/package_throttle_count",
            "cpu_sysfs_number",
        ),
        Source::sys("devices/system/cpu/cpu1/online", "cpu_online"),
    ],
    parsers: &[
        Parser::numeric("cpu_stat", check_stat),
        Parser::text("cpuinfo", check_cpuinfo),
        Parser::numeric("cpu_range", |t| parse_cpu_range_into(t, &mut Vec::new())),
        Parser::numeric("cpu_sysfs_number", |t| {
            parse_fresh(t, u64_sysctl_into).map(drop)
        }),
        Parser::numeric("cpu_online", |t| {
            parse_fresh(t, parse_online_into).map(drop)
        }),
    ],
};

/// The registry's entry point for /proc/stat: parses, then runs the clamp
/// the collector runs, each CPU against itself and against the first.
fn check_stat(text: &str) -> Result<(), ParseError> {
    let parsed = parse_fresh(text, proc_stat::parse_into)?;
    let first = parsed.cpus.first().map(|(_, t)| *t);
    for (_, ticks) in &parsed.cpus {
        std::hint::black_box(clamp(Some(ticks), ticks));
        std::hint::black_box(clamp(first.as_ref(), ticks));
    }
    Ok(())
}

/// The registry's entry point for /proc/cpuinfo: parses, then computes
/// what the collector emits (labels, frequency, the first CPU's flags).
fn check_cpuinfo(text: &str) -> Result<(), ParseError> {
    let mut rows = Vec::new();
    parse_cpuinfo_into(text, &mut rows)?;
    let mut b = [0u8; 20];
    for r in &rows {
        std::hint::black_box((u64_label(u64::from(r.processor), &mut b), r.mhz * 1e6));
    }
    if let Some(first) = rows.first() {
        std::hint::black_box(fields(first.flags).chain(fields(first.bugs)).count());
    }
    Ok(())
}

const CPU_SECONDS: Desc = Desc::counter(
    "node_cpu_seconds_total",
    "Seconds the CPUs spent in each mode.",
);
const CPU_GUEST: Desc = Desc::counter(
    "node_cpu_guest_seconds_total",
    "Seconds the CPUs spent in guests (VMs) for each mode.",
);
const CPU_INFO: Desc = Desc::gauge("node_cpu_info", "CPU information from /proc/cpuinfo.");
const FREQUENCY: Desc = Desc::gauge(
    "node_cpu_frequency_hertz",
    "CPU frequency in hertz from /proc/cpuinfo.",
);
const FLAG_INFO: Desc = Desc::gauge(
    "node_cpu_flag_info",
    "The `flags` field of CPU information from /proc/cpuinfo taken from the first core.",
);
const BUG_INFO: Desc = Desc::gauge(
    "node_cpu_bug_info",
    "The `bugs` field of CPU information from /proc/cpuinfo taken from the first core.",
);
const ISOLATED: Desc = Desc::gauge(
    "node_cpu_isolated",
    "Whether each core is isolated, information from /sys/devices/system/cpu/isolated.",
);
const PACKAGE_THROTTLES: Desc = Desc::counter(
    "node_cpu_package_throttles_total",
    "Number of times this CPU package has been throttled.",
);
const CORE_THROTTLES: Desc = Desc::counter(
    "node_cpu_core_throttles_total",
    "Number of times this CPU core has been throttled.",
);
const ONLINE: Desc = Desc::gauge(
    "node_cpu_online",
    "CPUs that are online and being scheduled.",
);

/// Clock ticks per second of the `cpu` lines. node_exporter (through
/// procfs) assumes 100, which is the kernel's fixed USER_HZ on every
/// architecture it exports to user space.
pub const USER_HZ: u64 = 100;

/// node_exporter's `jumpBackSeconds`: an idle counter that falls this far
/// means the CPU was replugged, not that accounting jittered.
const JUMP_BACK_TICKS: u64 = 3 * USER_HZ;

const IDLE: usize = 3;
/// `node_cpu_seconds_total` covers the first eight columns; guest time is
/// already included in user and nice, so it gets its own family.
const MODES: usize = 8;
const GUEST_COL: usize = 8;
const GUEST_NICE_COL: usize = 9;

/// node_exporter's `updateCPUStats` for one CPU: `prev` is what was emitted
/// last time (None for a CPU not seen at the previous scrape).
///
/// If idle fell by [`JUMP_BACK_TICKS`] or more, the CPU is taken as
/// replugged and starts from `new`; otherwise every column is the larger of
/// old and new, so no emitted counter ever decreases.
pub fn clamp(prev: Option<&proc_stat::CpuTicks>, new: &proc_stat::CpuTicks) -> proc_stat::CpuTicks {
    let mut out = prev.copied().unwrap_or_default();
    let jumped = out[IDLE].saturating_sub(new[IDLE]) >= JUMP_BACK_TICKS;
    if jumped {
        out = proc_stat::CpuTicks::default();
    }
    for (o, &n) in out.iter_mut().zip(new) {
        *o = (*o).max(n);
    }
    out
}

/// One processor of /proc/cpuinfo: what `node_cpu_info` and friends use.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct CpuInfo<'t> {
    pub processor: u32,
    pub vendor: &'t str,
    pub family: &'t str,
    pub model: &'t str,
    pub model_name: &'t str,
    pub stepping: &'t str,
    pub microcode: &'t str,
    pub mhz: f64,
    pub cache_size: &'t str,
    pub physical_id: &'t str,
    pub core_id: &'t str,
    /// The raw `flags` / `bugs` values; whitespace-separated names.
    pub flags: &'t str,
    pub bugs: &'t str,
}

/// Go's `strconv.ParseUint(s, 0, 32)`: decimal, `0x` hex, `0o`/`0` octal,
/// `0b` binary (underscores, which Go allows after a prefix, are not).
fn go_uint32(s: &str) -> Option<u32> {
    let lower = |p: &str| s.get(..2).is_some_and(|h| h.eq_ignore_ascii_case(p));
    let (digits, radix) = if lower("0x") {
        (&s[2..], 16)
    } else if lower("0b") {
        (&s[2..], 2)
    } else if lower("0o") {
        (&s[2..], 8)
    } else if s.len() > 1 && s.starts_with('0') {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u32::from_str_radix(digits, radix).ok()
}

fn uint_field(v: &str, n: usize, key: &str) -> Result<u32, ParseError> {
    go_uint32(v).ok_or_else(|| {
        ParseError::new(n, format!("{key}: invalid unsigned integer {}", excerpt(v)))
    })
}

fn float_field(v: &str, n: usize, key: &str) -> Result<f64, ParseError> {
    v.parse::<f64>()
        .map_err(|e| ParseError::new(n, format!("{key}: invalid number {}: {e}", excerpt(v))))
}

/// Parses /proc/cpuinfo as procfs's `parseCPUInfoX86` does: the first
/// non-blank line must be `processor : N`; after it, each `key : value`
/// line sets a field of the current processor and each `processor` line
/// starts the next. The numeric fields procfs parses (processor, siblings,
/// cpu cores, cpuid level, clflush size, cache_alignment as Go unsigned
/// literals; cpu MHz and bogomips as floats) must be numbers; other lines
/// are skipped.
pub fn parse_cpuinfo_into<'t>(s: &'t str, out: &mut Vec<CpuInfo<'t>>) -> Result<(), ParseError> {
    out.clear();
    for (i, line) in lines(s).enumerate() {
        let n = i + 1;
        if out.is_empty() {
            if line.trim().is_empty() {
                continue;
            }
            if !line.starts_with("processor") || !line.contains(':') {
                return Err(ParseError::new(
                    n,
                    format!(
                        "expected the first line to be `processor : N`, got {}",
                        excerpt(line)
                    ),
                ));
            }
            let (_, v) = line.split_once(": ").ok_or_else(|| {
                ParseError::new(n, format!("processor: no value in {}", excerpt(line)))
            })?;
            out.push(CpuInfo {
                processor: uint_field(v, n, "processor")?,
                ..CpuInfo::default()
            });
            continue;
        }
        if !line.contains(':') {
            continue;
        }
        let Some((key, v)) = line.split_once(": ") else {
            continue;
        };
        let key = key.trim();
        if key == "processor" {
            out.push(CpuInfo {
                processor: uint_field(v, n, key)?,
                ..CpuInfo::default()
            });
            continue;
        }
        let Some(cpu) = out.last_mut() else {
            continue;
        };
        match key {
            "vendor" | "vendor_id" => cpu.vendor = v,
            "cpu family" => cpu.family = v,
            "model" => cpu.model = v,
            "model name" => cpu.model_name = v,
            "stepping" => cpu.stepping = v,
            "microcode" => cpu.microcode = v,
            "cpu MHz" => cpu.mhz = float_field(v, n, key)?,
            "cache size" => cpu.cache_size = v,
            "physical id" => cpu.physical_id = v,
            "core id" => cpu.core_id = v,
            "flags" => cpu.flags = v,
            "bugs" => cpu.bugs = v,
            "siblings" | "cpu cores" | "cpuid level" | "clflush size" | "cache_alignment" => {
                uint_field(v, n, key)?;
            }
            "bogomips" => {
                float_field(v, n, key)?;
            }
            _ => {}
        }
    }
    if out.is_empty() {
        return Err(ParseError::new(1, "no `processor` line"));
    }
    Ok(())
}

/// cpuN/online: `1` or `0`.
pub fn parse_online_into(s: &str, out: &mut bool) -> Result<(), ParseError> {
    let mut v = 0;
    u64_sysctl_into(s, &mut v)?;
    *out = match v {
        0 => false,
        1 => true,
        _ => return Err(ParseError::new(1, format!("expected 0 or 1, got {v}"))),
    };
    Ok(())
}

/// The last emitted values of one CPU.
#[derive(Clone, Copy, Default)]
struct Last {
    /// Number of the successful scrape that last saw this CPU; a CPU missing
    /// from the previous scrape went offline and starts afresh, as
    /// node_exporter drops offline CPUs from its cache.
    seen: u64,
    ticks: proc_stat::CpuTicks,
}

/// One `devices/system/cpu/cpuN` directory's attributes, reopened at each
/// read (see [`SourceFile::unkept_attribute`]).
struct SysCpu {
    id: u32,
    package_id: SourceFile,
    core_id: SourceFile,
    core_throttles: SourceFile,
    package_throttles: SourceFile,
    online: SourceFile,
    /// (package, core), once read: a logical CPU's place in the hardware
    /// does not change while its directory exists. Read again until it
    /// succeeds (an offline CPU has no topology).
    topology: Option<(u64, u64)>,
    /// The scrape before which `thermal_throttle/` is not looked for again:
    /// it exists only on CPUs with thermal monitoring (Intel), so on every
    /// other host each CPU would cost two failed opens per scrape.
    throttle_recheck: u64,
}

/// Scrapes between two looks for an absent `thermal_throttle/`.
const THROTTLE_RECHECK_SCRAPES: u64 = 64;

impl SysCpu {
    fn new(sysfs: &Path, id: u32, on_sysfs: bool) -> SysCpu {
        let dir = sysfs.join(format!("devices/system/cpu/cpu{id}"));
        let f = |rel: &str| SourceFile::unkept_attribute(&dir, rel, on_sysfs);
        SysCpu {
            id,
            package_id: f("topology/physical_package_id"),
            core_id: f("topology/core_id"),
            core_throttles: f("thermal_throttle/core_throttle_count"),
            package_throttles: f("thermal_throttle/package_throttle_count"),
            online: f("online"),
            topology: None,
            throttle_recheck: 0,
        }
    }

    /// node_exporter reads package and core at every scrape and skips the
    /// CPU on any failure; the values are kept here once read.
    fn topology(&mut self) -> Option<(u64, u64)> {
        if self.topology.is_none() {
            let package = read_uint(&mut self.package_id)?;
            let core = read_uint(&mut self.core_id)?;
            self.topology = Some((package, core));
        }
        self.topology
    }
}

/// node_exporter's `readUintFromFile`, whose every failure (absent, not a
/// number, `-1` on some ARM topologies) makes it skip the value.
fn read_uint(f: &mut SourceFile) -> Option<u64> {
    match f.read() {
        Ok(Read::Text(t)) => {
            let mut v = 0;
            u64_sysctl_into(t, &mut v).ok().map(|()| v)
        }
        _ => None,
    }
}

pub struct CpuCollector {
    guest: bool,
    info: bool,
    flags_include: Option<regex::Regex>,
    bugs_include: Option<regex::Regex>,
    sysfs: std::path::PathBuf,
    /// `sysfs` is a real sysfs mount (cheaper attribute reads).
    on_sysfs: bool,
    stat: proc_stat::Shared,
    parsed: Stat,
    /// Indexed by CPU id; reused across scrapes.
    last: Vec<Last>,
    /// Successful scrapes so far; `Last::seen` refers to it.
    scrapes: u64,
    /// Calls of `collect`, the clock of `SysCpu::throttle_recheck`.
    collects: u64,
    cpuinfo_file: SourceFile,
    cpuinfo_path: std::path::PathBuf,
    /// Always empty between scrapes; recycled for the cpuinfo rows.
    cpuinfo_rows: Vec<CpuInfo<'static>>,
    isolated_file: SourceFile,
    isolated: Vec<u32>,
    cpu_dir: Dir,
    /// Listed cpuN directories, sorted by name as node_exporter's glob.
    sys_cpus: Vec<SysCpu>,
    listed: Vec<u32>,
    /// (package, throttles) and (package, core, throttles) of this scrape.
    package_throttles: Vec<(u64, u64)>,
    core_throttles: Vec<(u64, u64, u64)>,
    /// (cpu, online) of this scrape; empty when the first CPU has no
    /// `online` file.
    online: Vec<(u32, bool)>,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    let flags_include = s.regex(FLAGS_INCLUDE).cloned();
    let bugs_include = s.regex(BUGS_INCLUDE).cloned();
    let info = s.switch(INFO) || flags_include.is_some() || bugs_include.is_some();
    if info && !s.switch(INFO) {
        tracing::info!(
            "--collector.cpu.info has been set to `true` because you set the following flags, like --collector.cpu.info.flags-include and --collector.cpu.info.bugs-include"
        );
    }
    Box::new(CpuCollector {
        guest: s.switch(GUEST),
        info,
        flags_include,
        bugs_include,
        sysfs: s.sysfs.clone(),
        on_sysfs: crate::kernel::fs_kind::is_sysfs(&s.sysfs),
        stat: s.shared_stat(),
        parsed: Stat::default(),
        last: Vec::new(),
        scrapes: 0,
        collects: 0,
        cpuinfo_file: SourceFile::new(&s.procfs, "cpuinfo"),
        cpuinfo_path: s.procfs.join("cpuinfo"),
        cpuinfo_rows: Vec::new(),
        isolated_file: SourceFile::small(&s.sysfs, "devices/system/cpu/isolated"),
        isolated: Vec::new(),
        cpu_dir: Dir::new(&s.sysfs, "devices/system/cpu").of_devices(),
        sys_cpus: Vec::new(),
        listed: Vec::new(),
        package_throttles: Vec::new(),
        core_throttles: Vec::new(),
        online: Vec::new(),
    })
}

/// `cpu` followed by digits: the CPU directories of devices/system/cpu.
fn cpu_dir_id(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("cpu")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits
        .parse::<u64>()
        .ok()
        .filter(|&v| v <= MAX_CPU_ID)
        .map(|v| v as u32)
}

impl CpuCollector {
    /// Replaces each parsed CPU's ticks with the clamped values and records
    /// them for the next scrape.
    fn apply_clamp(&mut self) {
        let prev_scrape = self.scrapes;
        self.scrapes += 1;
        for (id, ticks) in &mut self.parsed.cpus {
            let idx = *id as usize;
            if self.last.len() <= idx {
                self.last.resize(idx + 1, Last::default());
            }
            let Some(last) = self.last.get_mut(idx) else {
                continue;
            };
            let prev = (prev_scrape > 0 && last.seen == prev_scrape).then_some(&last.ticks);
            let clamped = clamp(prev, ticks);
            if clamped != *ticks {
                tracing::debug!(cpu = *id, reported = ?ticks, emitted = ?clamped, "CPU counter jumped backwards; keeping the previous value");
            }
            *last = Last {
                seen: self.scrapes,
                ticks: clamped,
            };
            *ticks = clamped;
        }
    }

    /// Lists devices/system/cpu and keeps `sys_cpus` in node_exporter's
    /// glob order (by name: cpu0, cpu1, cpu10, cpu2, …).
    fn refresh_sys_cpus(&mut self) -> Result<(), CollectError> {
        let listed = &mut self.listed;
        listed.clear();
        if !self.cpu_dir.list(|name| listed.extend(cpu_dir_id(name)))? {
            listed.clear();
        }
        let mut b1 = [0u8; 20];
        let mut b2 = [0u8; 20];
        listed.sort_unstable_by(|a, b| {
            u64_label(u64::from(*a), &mut b1).cmp(u64_label(u64::from(*b), &mut b2))
        });
        if listed.len() != self.sys_cpus.len()
            || listed.iter().zip(&self.sys_cpus).any(|(a, c)| *a != c.id)
        {
            // Kept entries keep their cached topology.
            let mut old = std::mem::take(&mut self.sys_cpus);
            self.sys_cpus = listed
                .iter()
                .map(|&id| match old.iter().position(|c| c.id == id) {
                    Some(i) => old.swap_remove(i),
                    None => SysCpu::new(&self.sysfs, id, self.on_sysfs),
                })
                .collect();
        }
        Ok(())
    }

    /// node_exporter's `updateThermalThrottle`: per CPU, its package and
    /// core; each core's and each package's count read from the first CPU
    /// (in name order) that has it. Failures skip, as there.
    fn read_throttles(&mut self) {
        self.package_throttles.clear();
        self.core_throttles.clear();
        self.collects += 1;
        let scrape = self.collects;
        for cpu in &mut self.sys_cpus {
            let Some((package, core)) = cpu.topology() else {
                continue;
            };
            if cpu.throttle_recheck > scrape {
                continue;
            }
            if !self
                .core_throttles
                .iter()
                .any(|&(p, c, _)| p == package && c == core)
            {
                match cpu.core_throttles.read() {
                    Ok(Read::Absent) => {
                        cpu.throttle_recheck = scrape + THROTTLE_RECHECK_SCRAPES;
                        continue;
                    }
                    Ok(Read::Text(t)) => {
                        let mut n = 0;
                        if u64_sysctl_into(t, &mut n).is_ok() {
                            self.core_throttles.push((package, core, n));
                        }
                    }
                    Err(_) => {}
                }
            }
            if !self.package_throttles.iter().any(|&(p, _)| p == package)
                && let Some(n) = read_uint(&mut cpu.package_throttles)
            {
                self.package_throttles.push((package, n));
            }
        }
        self.package_throttles.sort_unstable();
        self.core_throttles.sort_unstable();
    }

    /// node_exporter's `updateOnline`: nothing if the first CPU has no
    /// `online` file; otherwise each CPU's state, an absent file reading
    /// as offline.
    fn read_online(&mut self) -> Result<(), CollectError> {
        self.online.clear();
        let mut first = true;
        for cpu in &mut self.sys_cpus {
            let mut on = false;
            let present = match cpu.online.parse_with(|t| parse_online_into(t, &mut on)) {
                Ok(read) => read.is_some(),
                // Hot-removed since the listing: left out.
                Err(_) if cpu.online.device_gone() => continue,
                Err(e) => return Err(e),
            };
            if first && !present {
                return Ok(());
            }
            first = false;
            self.online.push((cpu.id, present && on));
        }
        self.online.sort_unstable();
        Ok(())
    }
}

fn seconds(ticks: u64) -> f64 {
    ticks as f64 / USER_HZ as f64
}

impl Collector for CpuCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        // Everything is read and parsed before the clamp state changes or
        // anything is written.
        let have_stat = match proc_stat::lock(&self.stat).get(enc.scrape())? {
            Some(s) => {
                self.parsed.clone_from(s);
                true
            }
            None => false,
        };
        let isolated = &mut self.isolated;
        if self
            .isolated_file
            .parse_with(|t| parse_cpu_range_into(t, isolated))?
            .is_none()
        {
            self.isolated.clear();
        }
        self.refresh_sys_cpus()?;
        self.read_throttles();
        self.read_online()?;
        let mut rows: Vec<CpuInfo> = recycle(std::mem::take(&mut self.cpuinfo_rows));
        if self.info {
            match self.cpuinfo_file.read()? {
                Read::Text(t) => {
                    if let Err(e) = parse_cpuinfo_into(t, &mut rows) {
                        // The text borrows the file; rebuild the error from
                        // its path (the line numbers are the file's unless
                        // a non-UTF-8 line was dropped, never on a kernel).
                        let e = CollectError::from_parse(&self.cpuinfo_path, e);
                        self.cpuinfo_rows = recycle(rows);
                        return Err(e);
                    }
                }
                Read::Absent => {}
            }
        }

        if !rows.is_empty() {
            encode_info(
                enc,
                &rows,
                self.flags_include.as_ref(),
                self.bugs_include.as_ref(),
            );
        }
        self.cpuinfo_rows = recycle(rows);
        if have_stat {
            self.apply_clamp();
            self.encode_stat(enc);
        }
        self.encode_sys(enc);
        Ok(())
    }
}

impl CpuCollector {
    fn encode_stat(&self, enc: &mut Encoder) {
        let mut b = [0u8; 20];
        enc.family(&CPU_SECONDS);
        for (id, ticks) in &self.parsed.cpus {
            let cpu = u64_label(u64::from(*id), &mut b);
            for (mode, &t) in proc_stat::COLUMNS.iter().zip(ticks).take(MODES) {
                enc.sample(&CPU_SECONDS, &[("cpu", cpu), ("mode", mode)], seconds(t));
            }
        }
        if self.guest {
            enc.family(&CPU_GUEST);
            for (id, ticks) in &self.parsed.cpus {
                let cpu = u64_label(u64::from(*id), &mut b);
                for (mode, col) in [("user", GUEST_COL), ("nice", GUEST_NICE_COL)] {
                    let t = ticks.get(col).copied().unwrap_or(0);
                    enc.sample(&CPU_GUEST, &[("cpu", cpu), ("mode", mode)], seconds(t));
                }
            }
        }
    }

    fn encode_sys(&self, enc: &mut Encoder) {
        let mut b = [0u8; 20];
        let mut b2 = [0u8; 20];
        if !self.isolated.is_empty() {
            enc.family(&ISOLATED);
            for &id in &self.isolated {
                enc.sample(
                    &ISOLATED,
                    &[("cpu", u64_label(u64::from(id), &mut b))],
                    1u64,
                );
            }
        }
        if !self.package_throttles.is_empty() {
            enc.family(&PACKAGE_THROTTLES);
            for &(p, n) in &self.package_throttles {
                enc.sample(&PACKAGE_THROTTLES, &[("package", u64_label(p, &mut b))], n);
            }
        }
        if !self.core_throttles.is_empty() {
            enc.family(&CORE_THROTTLES);
            for &(p, c, n) in &self.core_throttles {
                enc.sample(
                    &CORE_THROTTLES,
                    &[
                        ("core", u64_label(c, &mut b2)),
                        ("package", u64_label(p, &mut b)),
                    ],
                    n,
                );
            }
        }
        if !self.online.is_empty() {
            enc.family(&ONLINE);
            for &(id, on) in &self.online {
                enc.sample(
                    &ONLINE,
                    &[("cpu", u64_label(u64::from(id), &mut b))],
                    u64::from(on),
                );
            }
        }
    }
}

/// `node_cpu_info`, `node_cpu_frequency_hertz` and the first CPU's
/// included flags and bugs.
fn encode_info(
    enc: &mut Encoder,
    rows: &[CpuInfo],
    flags: Option<&regex::Regex>,
    bugs: Option<&regex::Regex>,
) {
    let mut b = [0u8; 20];
    enc.family(&CPU_INFO);
    for r in rows {
        let cpu = u64_label(u64::from(r.processor), &mut b);
        enc.sample(
            &CPU_INFO,
            &[
                ("cachesize", r.cache_size),
                ("core", r.core_id),
                ("cpu", cpu),
                ("family", r.family),
                ("microcode", r.microcode),
                ("model", r.model),
                ("model_name", r.model_name),
                ("package", r.physical_id),
                ("stepping", r.stepping),
                ("vendor", r.vendor),
            ],
            1u64,
        );
    }
    enc.family(&FREQUENCY);
    for r in rows {
        let cpu = u64_label(u64::from(r.processor), &mut b);
        enc.sample(
            &FREQUENCY,
            &[
                ("core", r.core_id),
                ("cpu", cpu),
                ("package", r.physical_id),
            ],
            r.mhz * 1e6,
        );
    }
    let Some(first) = rows.first() else {
        return;
    };
    for (desc, label, list, filter) in [
        (&FLAG_INFO, "flag", first.flags, flags),
        (&BUG_INFO, "bug", first.bugs, bugs),
    ] {
        let Some(re) = filter else {
            continue;
        };
        let mut matching = fields(list).filter(|f| re.is_match(f)).peekable();
        if matching.peek().is_none() {
            continue;
        }
        enc.family(desc);
        for f in matching {
            enc.sample(desc, &[(label, f)], 1u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::FlagValue;
    use crate::collectors::test_support::{fixture, render};
    use crate::scrape::exposition::Format;
    use proptest::prelude::*;
    use std::path::Path;

    fn tail() -> &'static str {
        "intr 5 0 0\nctxt 6\nbtime 7\nprocesses 8\nprocs_running 1\nprocs_blocked 0\n"
    }

    #[test]
    fn clamp_keeps_small_backward_steps_and_resets_on_hotplug() {
        let old: proc_stat::CpuTicks = [100, 0, 50, 10_000, 40, 0, 5, 0, 0, 0];
        let mut dip = old;
        dip[IDLE] = 9_999;
        dip[4] = 39;
        dip[0] = 101;
        let c = clamp(Some(&old), &dip);
        assert_eq!(c[IDLE], 10_000, "idle must not go backwards");
        assert_eq!(c[4], 40, "iowait must not go backwards");
        assert_eq!(c[0], 101, "forward steps pass through");
        let mut replug = old;
        replug[IDLE] = 10_000 - JUMP_BACK_TICKS;
        replug[0] = 3;
        assert_eq!(clamp(Some(&old), &replug), replug);
        let mut almost = old;
        almost[IDLE] = 10_000 - JUMP_BACK_TICKS + 1;
        assert_eq!(clamp(Some(&old), &almost)[IDLE], 10_000);
        assert_eq!(clamp(None, &dip), dip);
    }

    fn temp_tree() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    fn collect(c: &mut dyn Collector) -> String {
        let mut buf = Vec::new();
        let mut enc = Encoder::new(&mut buf, Format::PrometheusText);
        c.collect(&mut enc).unwrap();
        String::from_utf8(buf).unwrap()
    }

    fn build_on(procfs: &Path) -> Box<dyn Collector> {
        build(&Settings::with_roots(procfs, "/nonexistent"))
    }

    #[test]
    fn collector_on_captured_fixture() {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proc");
        let out = collect(build_on(&fixture).as_mut());
        for line in [
            "# HELP node_cpu_seconds_total Seconds the CPUs spent in each mode.",
            "# TYPE node_cpu_seconds_total counter",
            "node_cpu_seconds_total{cpu=\"0\",mode=\"user\"} 27.92",
            "node_cpu_seconds_total{cpu=\"0\",mode=\"idle\"} 362.21",
            "node_cpu_seconds_total{cpu=\"1\",mode=\"iowait\"} 3.07",
            "node_cpu_seconds_total{cpu=\"1\",mode=\"steal\"} 0.08",
            "node_cpu_guest_seconds_total{cpu=\"1\",mode=\"nice\"} 0",
        ] {
            assert!(out.lines().any(|l| l == line), "missing {line:?} in\n{out}");
        }
        assert_eq!(
            out.lines()
                .filter(|l| l.starts_with("node_cpu_seconds_total{"))
                .count(),
            16
        );
    }

    #[test]
    fn collector_absent_file_emits_nothing() {
        let mut c = build_on(Path::new("/nonexistent-usescope"));
        assert_eq!(collect(c.as_mut()), "");
    }

    fn value(out: &str, series: &str) -> Option<f64> {
        out.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    /// Rewrites the stat file between collects, as the kernel would between
    /// scrapes, and checks node_exporter's clamp and offline handling.
    #[test]
    fn collector_clamps_across_scrapes() {
        let temp = temp_tree();
        let dir = temp.path();
        let file = dir.join("stat");
        let write = |cpus: &str| std::fs::write(&file, format!("{cpus}{}", tail())).unwrap();
        let mut c = build_on(dir);
        let idle = |out: &str, cpu: u32| {
            value(
                out,
                &format!("node_cpu_seconds_total{{cpu=\"{cpu}\",mode=\"idle\"}}"),
            )
        };
        let iowait = |out: &str, cpu: u32| {
            value(
                out,
                &format!("node_cpu_seconds_total{{cpu=\"{cpu}\",mode=\"iowait\"}}"),
            )
        };

        write("cpu0 100 0 50 10000 40\ncpu2 100 0 50 20000 40\n");
        let first = collect(c.as_mut());
        assert_eq!(idle(&first, 0), Some(100.0));

        // Idle and iowait dip a little: the previous values stay.
        write("cpu0 101 0 50 9990 35\ncpu2 100 0 50 20000 40\n");
        let second = collect(c.as_mut());
        assert_eq!(idle(&second, 0), Some(100.0));
        assert_eq!(iowait(&second, 0), Some(0.4));
        assert_eq!(
            value(&second, "node_cpu_seconds_total{cpu=\"0\",mode=\"user\"}"),
            Some(1.01)
        );

        // Idle falls by 3 s or more: a replugged CPU, taken as reported.
        write("cpu0 5 0 1 9600 1\ncpu2 100 0 50 20000 40\n");
        let third = collect(c.as_mut());
        assert_eq!(idle(&third, 0), Some(96.0));
        assert_eq!(iowait(&third, 0), Some(0.01));

        // cpu2 goes offline: its series disappear.
        write("cpu0 5 0 1 9700 1\n");
        let fourth = collect(c.as_mut());
        assert_eq!(idle(&fourth, 2), None);

        // It comes back with a lower idle: it starts afresh, no clamp.
        write("cpu0 5 0 1 9800 1\ncpu2 1 0 1 19990 2\n");
        let fifth = collect(c.as_mut());
        assert_eq!(idle(&fifth, 2), Some(199.9));
        assert_eq!(iowait(&fifth, 2), Some(0.02));

        // A corrupt read fails and leaves the remembered values alone.
        std::fs::write(&file, "cpu0 garbage\n").unwrap();
        let mut buf = Vec::new();
        let mut enc = Encoder::new(&mut buf, Format::PrometheusText);
        let e = c.collect(&mut enc).unwrap_err();
        assert_eq!(e.line, Some(1));
        assert_eq!(e.file, file);
        write("cpu0 5 0 1 9790 1\ncpu2 1 0 1 19990 2\n");
        assert_eq!(idle(&collect(c.as_mut()), 0), Some(98.0));
    }

    proptest! {
        #[test]
        fn clamped_counters_never_decrease(
            a in proptest::array::uniform10(0u64..1_000_000),
            b in proptest::array::uniform10(0u64..1_000_000),
        ) {
            let c = clamp(Some(&a), &b);
            if a[IDLE].saturating_sub(b[IDLE]) < JUMP_BACK_TICKS {
                for (x, y) in c.iter().zip(a) {
                    prop_assert!(*x >= y);
                }
            } else {
                prop_assert_eq!(c, b);
            }
        }
    }

    fn two_socket(info: bool, flags: Option<&str>, bugs: Option<&str>) -> Settings {
        let mut s = Settings::with_roots(
            fixture("two-socket").join("proc"),
            fixture("two-socket").join("sys"),
        );
        s.set(INFO, Some(FlagValue::Bool(info)));
        for (flag, v) in [(FLAGS_INCLUDE, flags), (BUGS_INCLUDE, bugs)] {
            s.set(
                flag,
                v.map(|v| FlagValue::parse(FlagKind::Regex, v).unwrap()),
            );
        }
        s
    }

    fn lines_of<'a>(out: &'a str, family: &str) -> Vec<&'a str> {
        out.lines()
            .filter(|l| {
                l.starts_with(&format!("{family}{{")) || l.starts_with(&format!("{family} "))
            })
            .collect()
    }

    #[test]
    fn go_unsigned_literals() {
        assert_eq!(go_uint32("17"), Some(17));
        assert_eq!(go_uint32("0"), Some(0));
        assert_eq!(go_uint32("0x1f"), Some(31));
        assert_eq!(go_uint32("010"), Some(8));
        assert_eq!(go_uint32("0b101"), Some(5));
        assert_eq!(go_uint32("0o17"), Some(15));
        for bad in ["", "+1", "-1", "0x", "08", "4294967296", "1_0", " 1"] {
            assert_eq!(go_uint32(bad), None, "{bad}");
        }
    }

    #[test]
    fn parses_cpuinfo_fixtures() {
        let text = std::fs::read_to_string(fixture("proc").join("cpuinfo")).unwrap();
        let mut rows = Vec::new();
        parse_cpuinfo_into(&text, &mut rows).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].processor, 1);
        assert_eq!(rows[0].vendor, "AuthenticAMD");
        assert_eq!(rows[0].model_name, "AMD EPYC");
        assert_eq!(rows[0].cache_size, "1024 KB");
        assert!(fields(rows[0].bugs).any(|b| b == "srso"));
        let text = std::fs::read_to_string(fixture("two-socket").join("proc/cpuinfo")).unwrap();
        parse_cpuinfo_into(&text, &mut rows).unwrap();
        assert_eq!(rows.len(), 7);
        assert_eq!(
            rows.iter()
                .map(|r| (r.physical_id, r.core_id))
                .collect::<Vec<_>>()[..4],
            [("0", "0"), ("1", "0"), ("0", "4"), ("1", "4")]
        );
        assert_eq!(rows[1].mhz, 3900.012);
    }

    #[test]
    fn cpuinfo_malformed() {
        let parse = |s: &str| {
            let mut rows = Vec::new();
            parse_cpuinfo_into(s, &mut rows).map(|()| rows.len())
        };
        assert_eq!(parse("\n\nprocessor\t: 0\nvendor_id\t: X\n").unwrap(), 1);
        assert!(parse("").unwrap_err().msg.contains("processor"));
        assert_eq!(
            parse("vendor_id\t: X\nprocessor\t: 0\n").unwrap_err().line,
            1
        );
        assert!(parse("processor:0\n").unwrap_err().msg.contains("no value"));
        let e = parse("processor\t: 0\ncpu MHz\t\t: fast\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.msg.contains("cpu MHz"), "{}", e.msg);
        assert!(
            parse("processor\t: 0\nsiblings\t: -2\n")
                .unwrap_err()
                .msg
                .contains("siblings")
        );
        assert!(parse("processor\t: 0\nprocessor\t: x\n").is_err());
        // Lines without ": " and unknown keys are skipped, as procfs does.
        assert_eq!(
            parse("processor\t: 0\npower management:\nTLB size\t: 3\n").unwrap(),
            1
        );
    }

    #[test]
    fn online_values() {
        let parse = |s: &str| parse_fresh(s, parse_online_into);
        assert!(parse("1\n").unwrap());
        assert!(!parse("0\n").unwrap());
        assert!(parse("2\n").is_err());
        assert!(parse("").is_err());
    }

    #[test]
    fn two_socket_host_with_info() {
        let out = render(
            build(&two_socket(
                true,
                Some("^(avx512f|vmx|ht)$"),
                Some("^spectre"),
            ))
            .as_mut(),
        )
        .unwrap();
        assert_eq!(lines_of(&out, "node_cpu_info").len(), 7);
        assert!(out.contains(
            "node_cpu_info{cachesize=\"28160 KB\",core=\"4\",cpu=\"3\",family=\"6\",microcode=\"0x5003604\",model=\"85\",model_name=\"Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz\",package=\"1\",stepping=\"7\",vendor=\"GenuineIntel\"} 1\n"
        ), "{out}");
        assert!(
            out.contains(
                "node_cpu_frequency_hertz{core=\"0\",cpu=\"1\",package=\"1\"} 3900012000\n"
            ),
            "{out}"
        );
        assert_eq!(
            lines_of(&out, "node_cpu_flag_info"),
            [
                "node_cpu_flag_info{flag=\"ht\"} 1",
                "node_cpu_flag_info{flag=\"vmx\"} 1",
                "node_cpu_flag_info{flag=\"avx512f\"} 1",
            ]
        );
        assert_eq!(
            lines_of(&out, "node_cpu_bug_info"),
            [
                "node_cpu_bug_info{bug=\"spectre_v1\"} 1",
                "node_cpu_bug_info{bug=\"spectre_v2\"} 1"
            ]
        );
        assert_eq!(lines_of(&out, "node_cpu_seconds_total").len(), 7 * 8);
        assert!(out.contains("node_cpu_guest_seconds_total{cpu=\"6\",mode=\"user\"} 10.6\n"));
        assert_eq!(
            lines_of(&out, "node_cpu_isolated"),
            [
                "node_cpu_isolated{cpu=\"2\"} 1",
                "node_cpu_isolated{cpu=\"3\"} 1",
                "node_cpu_isolated{cpu=\"6\"} 1",
            ]
        );
        assert_eq!(
            lines_of(&out, "node_cpu_package_throttles_total"),
            [
                "node_cpu_package_throttles_total{package=\"0\"} 42",
                "node_cpu_package_throttles_total{package=\"1\"} 7",
            ]
        );
        assert_eq!(
            lines_of(&out, "node_cpu_core_throttles_total"),
            [
                "node_cpu_core_throttles_total{core=\"0\",package=\"0\"} 17",
                "node_cpu_core_throttles_total{core=\"4\",package=\"0\"} 3",
                "node_cpu_core_throttles_total{core=\"0\",package=\"1\"} 0",
                "node_cpu_core_throttles_total{core=\"4\",package=\"1\"} 250",
            ]
        );
        let online = lines_of(&out, "node_cpu_online");
        assert_eq!(online.len(), 8);
        assert_eq!(online[7], "node_cpu_online{cpu=\"7\"} 0");
        assert_eq!(online[0], "node_cpu_online{cpu=\"0\"} 1");
        // node_exporter's order: info families, then stat, then sysfs.
        let at = |f: &str| out.find(&format!("# TYPE {f} ")).unwrap();
        assert!(at("node_cpu_info") < at("node_cpu_seconds_total"));
        assert!(at("node_cpu_guest_seconds_total") < at("node_cpu_isolated"));
        assert!(at("node_cpu_core_throttles_total") < at("node_cpu_online"));
    }

    #[test]
    fn flags_follow_node_exporter_defaults() {
        // Default: no cpuinfo, guest on.
        let out = render(build(&two_socket(false, None, None)).as_mut()).unwrap();
        assert!(!out.contains("node_cpu_info"));
        assert!(!out.contains("node_cpu_frequency_hertz"));
        assert!(out.contains("# TYPE node_cpu_guest_seconds_total counter"));
        // An include flag turns info on; without one no flag/bug series.
        let out = render(build(&two_socket(false, Some("^ht$"), None)).as_mut()).unwrap();
        assert!(out.contains("node_cpu_info{"));
        assert!(out.contains("node_cpu_flag_info{flag=\"ht\"} 1"));
        assert!(!out.contains("node_cpu_bug_info"));
        let out = render(build(&two_socket(true, None, None)).as_mut()).unwrap();
        assert!(!out.contains("node_cpu_flag_info"));
        // --no-collector.cpu.guest.
        let mut s = two_socket(false, None, None);
        s.set(GUEST, Some(FlagValue::Bool(false)));
        let out = render(build(&s).as_mut()).unwrap();
        assert!(!out.contains("node_cpu_guest_seconds_total"));
        assert!(out.contains("node_cpu_seconds_total{"));
    }

    #[test]
    fn broken_cpuinfo_fails_only_with_info() {
        let temp = temp_tree();
        let dir = temp.path();
        std::fs::copy(fixture("proc").join("stat"), dir.join("stat")).unwrap();
        std::fs::write(dir.join("cpuinfo"), "processor\t: 0\ncpu MHz\t\t: x\n").unwrap();
        let mut s = Settings::with_roots(dir, "/nonexistent");
        assert!(render(build(&s).as_mut()).is_ok());
        s.set(INFO, Some(FlagValue::Bool(true)));
        let e = render(build(&s).as_mut()).unwrap_err();
        assert_eq!(e.file, dir.join("cpuinfo"));
        assert_eq!(e.line, Some(2));
    }

    #[test]
    fn host_without_cpu0_online_and_no_sysfs() {
        // The captured VM: cpu0 has no `online`, so no node_cpu_online at
        // all (node_exporter's rule); thermal_throttle is hand-written.
        let s = Settings::with_roots(fixture("proc"), fixture("sys"));
        let out = render(build(&s).as_mut()).unwrap();
        assert!(!out.contains("node_cpu_online"), "{out}");
        assert!(!out.contains("node_cpu_isolated"), "{out}");
        assert!(out.contains("node_cpu_package_throttles_total{package=\"0\"} 12\n"));
        assert!(out.contains("node_cpu_core_throttles_total{core=\"1\",package=\"0\"} 5\n"));
        let s = Settings::with_roots(fixture("proc"), "/nonexistent-usescope");
        let out = render(build(&s).as_mut()).unwrap();
        assert!(!out.contains("throttles"));
    }

    #[test]
    fn topology_is_kept_and_absent_throttles_are_looked_for_again() {
        let dir = tempfile::tempdir().unwrap();
        let cpu0 = dir.path().join("devices/system/cpu/cpu0");
        std::fs::create_dir_all(cpu0.join("topology")).unwrap();
        std::fs::write(cpu0.join("topology/physical_package_id"), "0\n").unwrap();
        std::fs::write(cpu0.join("topology/core_id"), "0\n").unwrap();
        let mut c = build(&Settings::with_roots("/nonexistent", dir.path()));
        assert!(!render(c.as_mut()).unwrap().contains("throttles"));
        std::fs::create_dir_all(cpu0.join("thermal_throttle")).unwrap();
        std::fs::write(cpu0.join("thermal_throttle/core_throttle_count"), "9\n").unwrap();
        std::fs::write(cpu0.join("thermal_throttle/package_throttle_count"), "4\n").unwrap();
        // The topology files may go; the values were read.
        std::fs::remove_dir_all(cpu0.join("topology")).unwrap();
        let seen = (0..THROTTLE_RECHECK_SCRAPES + 1)
            .map(|_| render(c.as_mut()).unwrap())
            .position(|out| {
                out.contains("node_cpu_core_throttles_total{core=\"0\",package=\"0\"} 9")
            });
        assert_eq!(seen, Some(THROTTLE_RECHECK_SCRAPES as usize - 1));
        // A new collector (a CPU seen afresh) needs its topology.
        let out =
            render(build(&Settings::with_roots("/nonexistent", dir.path())).as_mut()).unwrap();
        assert!(!out.contains("throttles"), "{out}");
    }
}
