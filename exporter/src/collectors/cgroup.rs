//! `<sysfs>/fs/cgroup` → `usescope_cgroup_*`: CPU, CFS throttling, memory,
//! PSI, I/O and pids of each selected cgroup, on cgroup v1, v2 and hybrid
//! hosts (docs/collectors/cgroup.md has the families, their cAdvisor
//! names, the flags and the measured cost). Off by default.
//!
//! Its cardinality is bounded by design:
//! - **Selection** (`--collector.cgroup.select`, a regex over the path
//!   below the hierarchy's root, e.g. `/system.slice/ssh.service`): by
//!   default systemd services and scopes and Docker, containerd, CRI-O,
//!   Podman and Kubernetes containers. The topmost matching cgroups are
//!   selected; the walk does not go below them ([`walk`]).
//! - **A cap** (`--collector.cgroup.max`): beyond it, cgroups are folded
//!   into `cgroup="other"`, and which ones keep series of their own is
//!   stable across scrapes ([`fold`]).
//! - **A bounded walk** (`--collector.cgroup.max-walk` directories,
//!   `--collector.cgroup.max-depth` levels), reported by
//!   `usescope_cgroup_walk_limit_reached` and a warning.
//!
//! A cgroup that goes away while it is read (ENODEV from a kept
//! descriptor, ENOENT with its directory gone) is left out of that scrape,
//! silently, and forgotten with its descriptors; anything else that cannot
//! be read or parsed fails the collector, naming the file. Each figure is
//! hierarchical (a cgroup's counters include its descendants'), as the
//! kernel reports it; the topmost selection keeps sums over cgroups from
//! counting anything twice.
//!
//! Per-scrape cost grows with the cgroups selected (all are read, folded
//! ones too, so that `other` adds up): 12-15 files each on v1, 11 on v2.
//! Descriptors are kept within the budget in `read.rs`.

mod fold;
mod hierarchy;
pub mod parse;
mod read;
mod walk;

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

use regex::Regex;

use crate::collectors::{Flag, FlagKind, Parser, Settings, Source, Spec};
use crate::kernel::absence::{Epoch, Stamp};
use crate::kernel::cgroup_path;
use crate::kernel::error::{CollectError, ParseError};
use crate::kernel::parse::parse_fresh;
use crate::kernel::psi::{self, Psi};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder, Value as Sample};

use fold::{Before, Candidate};
use hierarchy::{File, Hierarchy, MAX_HIERARCHIES};
use parse::{Blkio, Dev, IoStat, Key, Keyed, Value};
use read::{Failed, Got, Reader, Slot};
use walk::{Limits, Walker};

use crate::kernel::cgroup_path::SELECT_FLAG as SELECT;
const MAX: &str = "collector.cgroup.max";
const MAX_WALK: &str = "collector.cgroup.max-walk";
const MAX_DEPTH: &str = "collector.cgroup.max-depth";

pub use crate::kernel::cgroup_path::DEFAULT_SELECT;

/// The fixture cgroup, captured on a v1 host (hybrid: PSI from `unified`).
macro_rules! fixture {
    ($hierarchy:literal, $file:literal) => {
        concat!(
            "fs/cgroup/",
            $hierarchy,
            "/system.slice/usescope-capture.service/",
            $file
        )
    };
}

pub const SPEC: Spec = Spec {
    name: "cgroup",
    default_enabled: false,
    help: "Per-cgroup CPU, CFS throttling, memory, PSI, I/O and pids from <sysfs>/fs/cgroup (v1, v2, hybrid), bounded by --collector.cgroup.select and --collector.cgroup.max",
    flags: &[
        Flag {
            name: SELECT,
            help: "Regexp over a cgroup's path below its hierarchy's root (/system.slice/ssh.service); the topmost matching cgroups are reported. Default: systemd services and scopes, Docker, containerd, CRI-O, Podman and Kubernetes containers",
            default: Some(DEFAULT_SELECT),
            kind: FlagKind::Regex,
            conflicts_with: None,
        },
        Flag {
            name: MAX,
            help: "Most cgroups with series of their own; the rest are summed into cgroup=\"other\" (the busiest by CPU keep their series)",
            default: Some("200"),
            kind: FlagKind::Integer,
            conflicts_with: None,
        },
        Flag {
            name: MAX_WALK,
            help: "Most cgroup directories examined per scrape, over all hierarchies; the walk stops there (usescope_cgroup_walk_limit_reached)",
            default: Some("10000"),
            kind: FlagKind::Integer,
            conflicts_with: None,
        },
        Flag {
            name: MAX_DEPTH,
            help: "Deepest level below a hierarchy's root that the walk examines",
            default: Some("32"),
            kind: FlagKind::Integer,
            conflicts_with: None,
        },
    ],
    build,
    sources: &[
        Source::sys(fixture!("cpuacct", "cpuacct.usage"), "cgroup_value"),
        Source::sys(fixture!("cpuacct", "cpuacct.stat"), "cgroup_keyed"),
        Source::sys(fixture!("cpu", "cpu.stat"), "cgroup_keyed"),
        Source::sys(fixture!("memory", "memory.usage_in_bytes"), "cgroup_value"),
        Source::sys(fixture!("memory", "memory.limit_in_bytes"), "cgroup_value"),
        Source::sys(fixture!("memory", "memory.stat"), "cgroup_keyed"),
        Source::sys(fixture!("memory", "memory.failcnt"), "cgroup_value"),
        Source::sys(fixture!("memory", "memory.oom_control"), "cgroup_keyed"),
        Source::sys(
            fixture!("blkio", "blkio.throttle.io_service_bytes_recursive"),
            "cgroup_blkio",
        ),
        Source::sys(
            fixture!("blkio", "blkio.throttle.io_serviced_recursive"),
            "cgroup_blkio",
        ),
        Source::sys(fixture!("pids", "pids.current"), "cgroup_value"),
        Source::sys(fixture!("pids", "pids.max"), "cgroup_value"),
        Source::sys(fixture!("unified", "cpu.pressure"), "cgroup_pressure"),
        Source::sys(fixture!("unified", "memory.pressure"), "cgroup_pressure"),
        Source::sys(fixture!("unified", "io.pressure"), "cgroup_pressure"),
    ],
    parsers: &[
        Parser::numeric("cgroup_keyed", |t| {
            parse_fresh(t, parse::parse_keyed_into).map(drop)
        }),
        Parser::numeric("cgroup_value", |t| {
            parse_fresh(t, parse::parse_value_into).map(drop)
        }),
        Parser::numeric("cgroup_blkio", |t| {
            parse_fresh(t, parse::parse_blkio_into).map(drop)
        }),
        Parser::numeric("cgroup_pressure", |t| {
            parse_fresh(t, psi::parse_into).map(drop)
        }),
    ],
};

/// Counters, kept in their kernel unit turned into nanoseconds for times.
#[derive(Clone, Copy)]
enum C {
    CpuUsage,
    CpuUser,
    CpuSystem,
    CfsPeriods,
    CfsThrottledPeriods,
    CfsThrottledTime,
    LimitHits,
    Ooms,
    OomKills,
    CpuSome,
    CpuFull,
    MemorySome,
    MemoryFull,
    IoSome,
    IoFull,
}
const NC: usize = 15;

#[derive(Clone, Copy)]
enum G {
    MemUsage,
    WorkingSet,
    MemLimit,
    Pids,
    PidsLimit,
}
const NG: usize = 5;

#[derive(Clone, Copy)]
enum Of {
    Counter(C),
    Gauge(G),
}

/// One family of per-cgroup values; `seconds`: kept in nanoseconds.
struct Family {
    desc: Desc,
    of: Of,
    seconds: bool,
}

const fn counter(name: &'static str, help: &'static str, c: C, seconds: bool) -> Family {
    Family {
        desc: Desc::counter(name, help),
        of: Of::Counter(c),
        seconds,
    }
}

const fn gauge(name: &'static str, help: &'static str, g: G) -> Family {
    Family {
        desc: Desc::gauge(name, help),
        of: Of::Gauge(g),
        seconds: false,
    }
}

const FAMILIES: [Family; NC + NG] = [
    counter(
        "usescope_cgroup_cpu_usage_seconds_total",
        "CPU time of the cgroup, in seconds (v1 cpuacct.usage, v2 cpu.stat usage_usec).",
        C::CpuUsage,
        true,
    ),
    counter(
        "usescope_cgroup_cpu_user_seconds_total",
        "CPU time of the cgroup in user mode, in seconds (v1 cpuacct.stat user, v2 cpu.stat user_usec).",
        C::CpuUser,
        true,
    ),
    counter(
        "usescope_cgroup_cpu_system_seconds_total",
        "CPU time of the cgroup in kernel mode, in seconds (v1 cpuacct.stat system, v2 cpu.stat system_usec).",
        C::CpuSystem,
        true,
    ),
    counter(
        "usescope_cgroup_cpu_cfs_periods_total",
        "CFS enforcement periods in which the cgroup ran (cpu.stat nr_periods).",
        C::CfsPeriods,
        false,
    ),
    counter(
        "usescope_cgroup_cpu_cfs_throttled_periods_total",
        "CFS enforcement periods in which the cgroup used up its quota and was throttled (cpu.stat nr_throttled).",
        C::CfsThrottledPeriods,
        false,
    ),
    counter(
        "usescope_cgroup_cpu_cfs_throttled_seconds_total",
        "Time the cgroup spent throttled by its CFS quota, in seconds (v1 cpu.stat throttled_time, v2 throttled_usec).",
        C::CfsThrottledTime,
        true,
    ),
    gauge(
        "usescope_cgroup_memory_usage_bytes",
        "Memory charged to the cgroup, page cache included (v1 memory.usage_in_bytes, v2 memory.current).",
        G::MemUsage,
    ),
    gauge(
        "usescope_cgroup_memory_working_set_bytes",
        "Memory usage less inactive file pages, at least 0 (cAdvisor's working set; v1 total_inactive_file, v2 inactive_file of memory.stat).",
        G::WorkingSet,
    ),
    gauge(
        "usescope_cgroup_memory_limit_bytes",
        "The cgroup's memory limit (v1 memory.limit_in_bytes, v2 memory.max); absent when there is none.",
        G::MemLimit,
    ),
    counter(
        "usescope_cgroup_memory_limit_hits_total",
        "Times the cgroup's memory usage hit its limit (v1 memory.failcnt, v2 memory.events max).",
        C::LimitHits,
        false,
    ),
    counter(
        "usescope_cgroup_memory_oom_total",
        "Times the cgroup's memory limit was reached and the OOM killer invoked (v2 memory.events oom).",
        C::Ooms,
        false,
    ),
    counter(
        "usescope_cgroup_memory_oom_kills_total",
        "Processes of the cgroup killed by the OOM killer (v1 memory.oom_control oom_kill, v2 memory.events oom_kill).",
        C::OomKills,
        false,
    ),
    counter(
        "usescope_cgroup_pressure_cpu_waiting_seconds_total",
        "Time in seconds that tasks of the cgroup waited for CPU (cpu.pressure some total, cgroup v2).",
        C::CpuSome,
        true,
    ),
    counter(
        "usescope_cgroup_pressure_cpu_stalled_seconds_total",
        "Time in seconds no task of the cgroup could run for lack of CPU (cpu.pressure full total, cgroup v2).",
        C::CpuFull,
        true,
    ),
    counter(
        "usescope_cgroup_pressure_memory_waiting_seconds_total",
        "Time in seconds that tasks of the cgroup waited for memory (memory.pressure some total, cgroup v2).",
        C::MemorySome,
        true,
    ),
    counter(
        "usescope_cgroup_pressure_memory_stalled_seconds_total",
        "Time in seconds no task of the cgroup could make progress for lack of memory (memory.pressure full total, cgroup v2).",
        C::MemoryFull,
        true,
    ),
    counter(
        "usescope_cgroup_pressure_io_waiting_seconds_total",
        "Time in seconds that tasks of the cgroup waited for I/O (io.pressure some total, cgroup v2).",
        C::IoSome,
        true,
    ),
    counter(
        "usescope_cgroup_pressure_io_stalled_seconds_total",
        "Time in seconds no task of the cgroup could make progress for waiting on I/O (io.pressure full total, cgroup v2).",
        C::IoFull,
        true,
    ),
    gauge(
        "usescope_cgroup_pids",
        "Tasks (processes and threads) in the cgroup (pids.current).",
        G::Pids,
    ),
    gauge(
        "usescope_cgroup_pids_limit",
        "The cgroup's limit on tasks (pids.max); absent when there is none.",
        G::PidsLimit,
    ),
];

/// The per-device I/O families: bytes read and written, reads and writes.
const IO_FAMILIES: [Desc; 4] = [
    Desc::counter(
        "usescope_cgroup_io_read_bytes_total",
        "Bytes the cgroup read from the device (v1 blkio.throttle.io_service_bytes_recursive Read, v2 io.stat rbytes).",
    ),
    Desc::counter(
        "usescope_cgroup_io_written_bytes_total",
        "Bytes the cgroup wrote to the device (v1 blkio.throttle.io_service_bytes_recursive Write, v2 io.stat wbytes).",
    ),
    Desc::counter(
        "usescope_cgroup_io_reads_total",
        "Read operations the cgroup issued to the device (v1 blkio.throttle.io_serviced_recursive Read, v2 io.stat rios).",
    ),
    Desc::counter(
        "usescope_cgroup_io_writes_total",
        "Write operations the cgroup issued to the device (v1 blkio.throttle.io_serviced_recursive Write, v2 io.stat wios).",
    ),
];

const SEEN: Desc = Desc::gauge(
    "usescope_cgroup_seen",
    "Cgroups the last walk selected (--collector.cgroup.select), those folded into cgroup=\"other\" included.",
);
const FOLDED: Desc = Desc::gauge(
    "usescope_cgroup_folded",
    "Selected cgroups summed into cgroup=\"other\" at the last scrape (beyond --collector.cgroup.max, or a path too long to be a label).",
);
const WALKED: Desc = Desc::gauge(
    "usescope_cgroup_walked_directories",
    "Cgroup directories the last scrape examined, over all hierarchies.",
);
const LIMIT_REACHED: Desc = Desc::gauge(
    "usescope_cgroup_walk_limit_reached",
    "Whether the last walk stopped at --collector.cgroup.max-walk, or left out cgroups below --collector.cgroup.max-depth.",
);
const KEPT_FILES: Desc = Desc::gauge(
    "usescope_cgroup_kept_files",
    "Cgroup file descriptors kept open between scrapes (at most a sixteenth of the open-files limit, and 1024).",
);
const VANISHED: Desc = Desc::counter(
    "usescope_cgroup_vanished_total",
    "Selected cgroups that went away while they were read; each is left out of that scrape.",
);

/// Most devices with series of their own per cgroup; the rest are summed
/// into `device="other"`.
const MAX_DEVICES: usize = 64;
const OTHER_DEV: Dev = (u32::MAX, u32::MAX);

/// One device's I/O counters: read bytes, written bytes, reads, writes.
#[derive(Debug, Default, Clone, Copy)]
struct Io {
    dev: Dev,
    v: [u64; 4],
}

/// What was read of one cgroup at this scrape.
#[derive(Debug, Default, Clone)]
struct Values {
    c: [Option<u64>; NC],
    g: [Option<u64>; NG],
    /// `memory.stat`'s inactive file pages, for the working set.
    inactive_file: Option<u64>,
    io: Vec<Io>,
}

impl Values {
    fn clear(&mut self) {
        self.c = [None; NC];
        self.g = [None; NG];
        self.inactive_file = None;
        self.io.clear();
    }

    /// Adds one device's figures into `io`: `at` 0 for bytes, 2 for
    /// operations.
    fn add_io(&mut self, dev: Dev, at: usize, pair: [u64; 2]) {
        let row = match self.io.iter().position(|r| r.dev == dev) {
            Some(i) => &mut self.io[i],
            None if self.io.len() < MAX_DEVICES => {
                self.io.push(Io { dev, v: [0; 4] });
                self.io.last_mut().expect("just pushed")
            }
            None => match self.io.iter().position(|r| r.dev == OTHER_DEV) {
                Some(i) => &mut self.io[i],
                None => {
                    self.io.push(Io {
                        dev: OTHER_DEV,
                        v: [0; 4],
                    });
                    self.io.last_mut().expect("just pushed")
                }
            },
        };
        row.v[at] = row.v[at].saturating_add(pair[0]);
        row.v[at + 1] = row.v[at + 1].saturating_add(pair[1]);
    }
}

/// One selected cgroup, kept across scrapes while the walk finds it.
struct Record {
    /// Its raw path below the hierarchies' roots.
    key: Box<[u8]>,
    label: Box<str>,
    container_id: Box<str>,
    pod_uid: Box<str>,
    /// The scrape that last found it.
    seen: u64,
    /// Hierarchies (bits) that found it at this scrape.
    found_in: u8,
    /// Its directory's inode in each hierarchy (0: not known).
    ino: [u64; MAX_HIERARCHIES],
    /// One per file of each hierarchy, at [`CgroupCollector::offsets`].
    slots: Vec<Slot>,
    /// It went away while it was read at this scrape.
    gone: bool,
    /// New to the collector at this scrape (or recreated).
    fresh: bool,
    /// It has its own series at this scrape, and had at the last.
    member: bool,
    was_member: bool,
    score: f64,
    now: Values,
    last: Values,
}

/// `other`'s counters ([`fold`]), and which it has ever had.
#[derive(Default)]
struct Other {
    c: [Option<u64>; NC],
    io: Vec<Io>,
}

pub struct CgroupCollector {
    root: PathBuf,
    sysfs: PathBuf,
    select: Regex,
    max: usize,
    max_walk: usize,
    max_depth: usize,
    ns_per_tick: u64,
    v1_unlimited: u64,
    hierarchies: Vec<Hierarchy>,
    /// Where each hierarchy's slots start in a record's.
    offsets: Vec<usize>,
    discovered: Stamp,
    walker: Walker,
    reader: Reader,
    records: Vec<Record>,
    index: HashMap<Box<[u8]>, usize>,
    scrape: u64,
    last_scrape_at: Option<Instant>,
    other: Other,
    devices: DeviceNames,
    vanished: u64,
    limited: bool,
    // Reused per scrape.
    label: String,
    keyed: Keyed,
    value: Value,
    blkio: Blkio,
    io_stat: IoStat,
    psi: Psi,
    order: Vec<usize>,
    cands: Vec<Candidate>,
    keep: Vec<bool>,
    scratch: Vec<usize>,
    eligible: Vec<usize>,
    members: Vec<usize>,
    folded_now: Vec<usize>,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    let int =
        |flag, default: i64, max: i64| s.integer(flag).unwrap_or(default).clamp(0, max) as usize;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page = u64::try_from(page).ok().filter(|&p| p > 0).unwrap_or(4096);
    Box::new(CgroupCollector {
        root: s.sysfs.join("fs/cgroup"),
        sysfs: s.sysfs.clone(),
        select: s
            .regex(SELECT)
            .cloned()
            .unwrap_or_else(|| Regex::new(DEFAULT_SELECT).expect("the default compiles")),
        max: int(MAX, 200, 1_000_000),
        max_walk: int(MAX_WALK, 10_000, 100_000_000),
        max_depth: int(MAX_DEPTH, 32, 4096),
        ns_per_tick: 1_000_000_000 / u64::try_from(hz).ok().filter(|&h| h > 0).unwrap_or(100),
        // PAGE_COUNTER_MAX pages: what v1 shows for "no limit".
        v1_unlimited: (i64::MAX as u64 / page) * page,
        hierarchies: Vec::new(),
        offsets: Vec::new(),
        discovered: Stamp::default(),
        walker: Walker::default(),
        reader: Reader::default(),
        records: Vec::new(),
        index: HashMap::new(),
        scrape: 0,
        last_scrape_at: None,
        other: Other::default(),
        devices: DeviceNames::default(),
        vanished: 0,
        limited: false,
        label: String::new(),
        keyed: Keyed::default(),
        value: Value::default(),
        blkio: Blkio::default(),
        io_stat: IoStat::default(),
        psi: Psi::default(),
        order: Vec::new(),
        cands: Vec::new(),
        keep: Vec::new(),
        scratch: Vec::new(),
        eligible: Vec::new(),
        members: Vec::new(),
        folded_now: Vec::new(),
    })
}

impl Collector for CgroupCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.scrape += 1;
        let now = Instant::now();
        let elapsed = self
            .last_scrape_at
            .map(|t| now.saturating_duration_since(t));
        self.last_scrape_at = Some(now);
        self.refresh_hierarchies()?;
        if self.hierarchies.is_empty() {
            return Ok(());
        }
        let mut limits = Limits {
            max_walk: self.max_walk,
            max_depth: self.max_depth,
            ..Limits::default()
        };
        for h in 0..self.hierarchies.len() {
            self.walk_one(h, &mut limits)?;
        }
        self.forget_the_unseen();
        self.finish_values(elapsed);
        self.choose_members();
        self.fold();
        self.log_limits(&limits);
        self.devices.refresh(&self.sysfs);
        for &i in &self.members {
            for io in &self.records[i].now.io {
                self.devices.resolve(io.dev, &self.sysfs);
            }
        }
        for io in &self.other.io {
            self.devices.resolve(io.dev, &self.sysfs);
        }
        self.encode(enc, &limits);
        for &i in &self.order {
            let r = &mut self.records[i];
            std::mem::swap(&mut r.last, &mut r.now);
            r.fresh = false;
        }
        self.reader.release_large_buffer();
        Ok(())
    }
}

impl CgroupCollector {
    /// Looks for the hierarchies again when a mount may have changed them
    /// (always, outside a real sysfs); a change starts over.
    fn refresh_hierarchies(&mut self) -> Result<(), CollectError> {
        if self.discovered.holds() {
            return Ok(());
        }
        let looked = Epoch::now();
        let found = hierarchy::discover(&self.root).map_err(|e| CollectError::io(&self.root, e))?;
        self.discovered = Stamp::of(looked, &self.root);
        let same = found.len() == self.hierarchies.len()
            && found
                .iter()
                .zip(&self.hierarchies)
                .all(|(a, b)| a.same_as(b));
        if same {
            return Ok(());
        }
        self.records.clear();
        self.index.clear();
        self.hierarchies = found;
        self.offsets.clear();
        let mut at = 0;
        for h in &self.hierarchies {
            self.offsets.push(at);
            at += h.files.len();
        }
        Ok(())
    }

    /// Walks hierarchy `h`, reading its files of each selected cgroup.
    fn walk_one(&mut self, h: usize, limits: &mut Limits) -> Result<(), CollectError> {
        let Self {
            hierarchies,
            offsets,
            walker,
            reader,
            records,
            index,
            select,
            label,
            scrape,
            vanished,
            keyed,
            value,
            blkio,
            io_stat,
            psi,
            ns_per_tick,
            v1_unlimited,
            ..
        } = self;
        let hier = &hierarchies[h];
        let offset = offsets[h];
        let mut parsers = Parsers {
            keyed,
            value,
            blkio,
            io_stat,
            psi,
            ns_per_tick: *ns_per_tick,
            v1_unlimited: *v1_unlimited,
        };
        let slots_per_record = hierarchies.iter().map(|h| h.files.len()).sum::<usize>();
        walker.walk(
            hier.fd.as_fd(),
            limits,
            |f| {
                cgroup_path::escape_into(f.path, label);
                if !select.is_match(label) {
                    return Ok(false);
                }
                let i = match index.get(f.path) {
                    Some(&i) => i,
                    None => {
                        let (container_id, pod_uid) = cgroup_path::workload_ids(label);
                        records.push(Record {
                            key: f.path.into(),
                            label: label.as_str().into(),
                            container_id: container_id.into(),
                            pod_uid: pod_uid.into(),
                            seen: 0,
                            found_in: 0,
                            ino: [0; MAX_HIERARCHIES],
                            slots: (0..slots_per_record).map(|_| Slot::default()).collect(),
                            gone: false,
                            fresh: true,
                            member: false,
                            was_member: false,
                            score: 0.0,
                            now: Values::default(),
                            last: Values::default(),
                        });
                        index.insert(f.path.into(), records.len() - 1);
                        records.len() - 1
                    }
                };
                let r = &mut records[i];
                if r.seen != *scrape {
                    r.seen = *scrape;
                    r.found_in = 0;
                    r.gone = false;
                    r.now.clear();
                }
                r.found_in |= 1 << h;
                if r.ino[h] != f.ino {
                    // Another cgroup by the same name: what was kept
                    // belongs to the one that went away.
                    if r.ino[h] != 0 {
                        r.fresh = true;
                    }
                    r.ino[h] = f.ino;
                    for s in &mut r.slots[offset..offset + hier.files.len()] {
                        *s = Slot::default();
                    }
                }
                if r.gone {
                    return Ok(true);
                }
                for (k, &file) in hier.files.iter().enumerate() {
                    let got = reader.read(
                        &mut r.slots[offset + k],
                        f.parent,
                        f.name,
                        file.name(),
                        hier.kernel,
                    );
                    let path = || file_path(hier, f.path, file);
                    match got {
                        Ok(Got::Text) => parsers
                            .store(hier, file, reader.text(), &mut r.now)
                            .map_err(|e| CollectError::from_parse(&path(), e))?,
                        Ok(Got::Absent) => {}
                        Ok(Got::Gone) => {
                            r.gone = true;
                            *vanished += 1;
                            break;
                        }
                        Err(Failed::Io(e)) => return Err(CollectError::io(&path(), e)),
                        Err(Failed::Utf8 { line }) => {
                            return Err(CollectError::parse(&path(), line, "not valid UTF-8"));
                        }
                    }
                }
                Ok(true)
            },
            |p, e| CollectError::io(&dir_path(hier, p), e),
        )
    }

    /// Forgets the cgroups this scrape did not find, or found gone, with
    /// their descriptors; drops what is kept in hierarchies that no longer
    /// hold a cgroup.
    fn forget_the_unseen(&mut self) {
        let mut i = 0;
        while i < self.records.len() {
            let r = &self.records[i];
            if r.seen == self.scrape && !r.gone {
                i += 1;
                continue;
            }
            let r = self.records.swap_remove(i);
            self.index.remove(&r.key);
            if let Some(moved) = self.records.get(i)
                && let Some(at) = self.index.get_mut(&moved.key)
            {
                *at = i;
            }
        }
        if self.records.len() < self.records.capacity() / 4 {
            self.records.shrink_to_fit();
            self.index.shrink_to_fit();
        }
        for r in &mut self.records {
            for (h, hier) in self.hierarchies.iter().enumerate() {
                if r.found_in & (1 << h) == 0 && r.ino[h] != 0 {
                    r.ino[h] = 0;
                    let at = self.offsets[h];
                    for s in &mut r.slots[at..at + hier.files.len()] {
                        *s = Slot::default();
                    }
                }
            }
        }
    }

    /// The working set, the CPU scores, and the label order.
    fn finish_values(&mut self, elapsed: Option<std::time::Duration>) {
        let decay = elapsed.map_or(1.0, fold::decay);
        for r in &mut self.records {
            if let (Some(usage), Some(inactive)) =
                (r.now.g[G::MemUsage as usize], r.now.inactive_file)
            {
                r.now.g[G::WorkingSet as usize] = Some(usage.saturating_sub(inactive));
            }
            let cpu = |v: &Values| v.c[C::CpuUsage as usize].map(|ns| ns as f64 / 1e9);
            r.score = if r.fresh {
                cpu(&r.now).unwrap_or(0.0)
            } else {
                let used = match (cpu(&r.now), cpu(&r.last)) {
                    (Some(now), Some(last)) if now >= last => now - last,
                    (Some(now), _) => now,
                    (None, _) => 0.0,
                };
                r.score * decay + used
            };
        }
        self.order.clear();
        self.order.extend(0..self.records.len());
        let records = &self.records;
        self.order
            .sort_unstable_by(|&a, &b| records[a].label.cmp(&records[b].label));
    }

    /// Which cgroups keep series of their own.
    fn choose_members(&mut self) {
        // Candidates in label order; a label too long, or the same as the
        // one before it (two raw names escaping alike), is not one.
        self.cands.clear();
        self.scratch.clear();
        let mut previous: Option<&str> = None;
        let mut eligible = std::mem::take(&mut self.eligible);
        eligible.clear();
        for &i in &self.order {
            let r = &self.records[i];
            let ok = r.label.len() <= cgroup_path::MAX_LABEL_BYTES && previous != Some(&*r.label);
            previous = Some(&r.label);
            if ok {
                eligible.push(i);
                self.cands.push(Candidate {
                    score: r.score,
                    member: r.member,
                });
            }
        }
        let mut keep = std::mem::take(&mut self.keep);
        let mut scratch = std::mem::take(&mut self.scratch);
        fold::choose(&self.cands, self.max, &mut keep, &mut scratch);
        for r in &mut self.records {
            r.was_member = r.member;
            r.member = false;
        }
        for (k, &i) in eligible.iter().enumerate() {
            self.records[i].member = keep[k];
        }
        self.keep = keep;
        self.scratch = scratch;
        self.eligible = eligible;
        self.members.clear();
        self.folded_now.clear();
        for &i in &self.order {
            if self.records[i].member {
                self.members.push(i);
            } else {
                self.folded_now.push(i);
            }
        }
    }

    /// Adds the folded cgroups into `other` ([`fold`]).
    fn fold(&mut self) {
        for &i in &self.folded_now {
            let r = &self.records[i];
            let before = if r.fresh {
                Before::New
            } else if r.was_member {
                Before::Member
            } else {
                Before::Folded
            };
            for k in 0..NC {
                if let Some(v) = r.now.c[k] {
                    let add = fold::increase(v, r.last.c[k], before);
                    let acc = self.other.c[k].get_or_insert(0);
                    *acc = acc.saturating_add(add);
                }
            }
            for io in &r.now.io {
                let last = r.last.io.iter().find(|l| l.dev == io.dev);
                let dev = match self.other.io.iter().position(|o| o.dev == io.dev) {
                    Some(d) => d,
                    None if self.other.io.len() < 4 * MAX_DEVICES => {
                        self.other.io.push(Io {
                            dev: io.dev,
                            v: [0; 4],
                        });
                        self.other.io.len() - 1
                    }
                    None => match self.other.io.iter().position(|o| o.dev == OTHER_DEV) {
                        Some(d) => d,
                        None => {
                            self.other.io.push(Io {
                                dev: OTHER_DEV,
                                v: [0; 4],
                            });
                            self.other.io.len() - 1
                        }
                    },
                };
                for k in 0..4 {
                    let add = fold::increase(io.v[k], last.map(|l| l.v[k]), before);
                    let acc = &mut self.other.io[dev].v[k];
                    *acc = acc.saturating_add(add);
                }
            }
        }
    }

    fn log_limits(&mut self, limits: &Limits) {
        let limited = limits.walk_limited || limits.depth_limited;
        if limited && !self.limited {
            tracing::warn!(
                root = %self.root.display(),
                walked = limits.walked,
                max_walk = self.max_walk,
                stopped_at_max_walk = limits.walk_limited,
                deeper_than_max_depth = limits.depth_limited,
                max_depth = self.max_depth,
                "cgroup walk limited; cgroups beyond the limits are not reported"
            );
        } else if !limited && self.limited {
            tracing::info!(root = %self.root.display(), "cgroup walk within its limits again");
        }
        self.limited = limited;
    }

    fn encode(&self, enc: &mut Encoder, limits: &Limits) {
        let other_active = !self.folded_now.is_empty();
        const OTHER: [(&str, &str); 3] =
            [("cgroup", "other"), ("container_id", ""), ("pod_uid", "")];
        for fam in &FAMILIES {
            let value = |v: &Values| match fam.of {
                Of::Counter(c) => v.c[c as usize],
                Of::Gauge(g) => v.g[g as usize],
            };
            let other = if other_active {
                match fam.of {
                    Of::Counter(c) => self.other.c[c as usize],
                    Of::Gauge(g) => self
                        .folded_now
                        .iter()
                        .filter_map(|&i| self.records[i].now.g[g as usize])
                        .reduce(u64::saturating_add),
                }
            } else {
                None
            };
            let any = other.is_some()
                || self
                    .members
                    .iter()
                    .any(|&i| value(&self.records[i].now).is_some());
            if !any {
                continue;
            }
            let sample = |n: u64| -> Sample {
                if fam.seconds {
                    Sample::F64(n as f64 / 1e9)
                } else {
                    Sample::U64(n)
                }
            };
            enc.family(&fam.desc);
            for &i in &self.members {
                let r = &self.records[i];
                if let Some(v) = value(&r.now) {
                    enc.sample(&fam.desc, &labels(r), sample(v));
                }
            }
            if let Some(v) = other {
                enc.sample(&fam.desc, &OTHER, sample(v));
            }
        }
        for (k, desc) in IO_FAMILIES.iter().enumerate() {
            let other = other_active && !self.other.io.is_empty();
            if !other
                && self
                    .members
                    .iter()
                    .all(|&i| self.records[i].now.io.is_empty())
            {
                continue;
            }
            enc.family(desc);
            for &i in &self.members {
                let r = &self.records[i];
                let [a, b, c] = labels(r);
                for io in &r.now.io {
                    enc.sample(
                        desc,
                        &[a, b, c, ("device", self.devices.name(io.dev))],
                        io.v[k],
                    );
                }
            }
            if other {
                for io in &self.other.io {
                    let [a, b, c] = OTHER;
                    enc.sample(
                        desc,
                        &[a, b, c, ("device", self.devices.name(io.dev))],
                        io.v[k],
                    );
                }
            }
        }
        enc.family(&SEEN);
        enc.sample(&SEEN, &[], self.records.len() as u64);
        enc.family(&FOLDED);
        enc.sample(&FOLDED, &[], self.folded_now.len() as u64);
        enc.family(&WALKED);
        enc.sample(&WALKED, &[], limits.walked as u64);
        enc.family(&LIMIT_REACHED);
        enc.sample(
            &LIMIT_REACHED,
            &[("limit", "max-walk")],
            u64::from(limits.walk_limited),
        );
        enc.sample(
            &LIMIT_REACHED,
            &[("limit", "max-depth")],
            u64::from(limits.depth_limited),
        );
        enc.family(&KEPT_FILES);
        enc.sample(&KEPT_FILES, &[], read::kept() as u64);
        enc.family(&VANISHED);
        enc.sample(&VANISHED, &[], self.vanished);
    }
}

/// A cgroup's labels.
fn labels(r: &Record) -> [(&'static str, &str); 3] {
    [
        ("cgroup", &r.label),
        ("container_id", &r.container_id),
        ("pod_uid", &r.pod_uid),
    ]
}

/// The parsers' reused outputs, and how their values are stored.
struct Parsers<'a> {
    keyed: &'a mut Keyed,
    value: &'a mut Value,
    blkio: &'a mut Blkio,
    io_stat: &'a mut IoStat,
    psi: &'a mut Psi,
    ns_per_tick: u64,
    v1_unlimited: u64,
}

impl Parsers<'_> {
    /// Parses `text`, the content of `file`, into `v`.
    fn store(
        &mut self,
        hier: &Hierarchy,
        file: File,
        text: &str,
        v: &mut Values,
    ) -> Result<(), ParseError> {
        let set_c = |v: &mut Values, c: C, n: u64| v.c[c as usize] = Some(n);
        match file {
            File::CpuacctUsage => set_c(v, C::CpuUsage, self.number(text)?),
            File::CpuacctStat => {
                parse::parse_keyed_into(text, self.keyed)?;
                let k = &*self.keyed;
                set_c(
                    v,
                    C::CpuUser,
                    k.require(Key::User)?.saturating_mul(self.ns_per_tick),
                );
                set_c(
                    v,
                    C::CpuSystem,
                    k.require(Key::System)?.saturating_mul(self.ns_per_tick),
                );
            }
            File::CpuStatV1 => {
                parse::parse_keyed_into(text, self.keyed)?;
                let k = &*self.keyed;
                set_c(v, C::CfsPeriods, k.require(Key::NrPeriods)?);
                set_c(v, C::CfsThrottledPeriods, k.require(Key::NrThrottled)?);
                set_c(v, C::CfsThrottledTime, k.require(Key::ThrottledTime)?);
            }
            File::CpuStatV2 => {
                parse::parse_keyed_into(text, self.keyed)?;
                let k = &*self.keyed;
                let us = |n: u64| n.saturating_mul(1000);
                if hier.v2_cpu_usage {
                    set_c(v, C::CpuUsage, us(k.require(Key::UsageUsec)?));
                    set_c(v, C::CpuUser, us(k.require(Key::UserUsec)?));
                    set_c(v, C::CpuSystem, us(k.require(Key::SystemUsec)?));
                }
                // Present only where the cpu controller is enabled.
                if hier.v2_cfs
                    && let (Some(p), Some(t), Some(time)) = (
                        k.get(Key::NrPeriods),
                        k.get(Key::NrThrottled),
                        k.get(Key::ThrottledUsec),
                    )
                {
                    set_c(v, C::CfsPeriods, p);
                    set_c(v, C::CfsThrottledPeriods, t);
                    set_c(v, C::CfsThrottledTime, us(time));
                }
            }
            File::MemUsage | File::MemCurrent => {
                v.g[G::MemUsage as usize] = Some(self.number(text)?)
            }
            File::MemLimit => {
                let n = self.number(text)?;
                v.g[G::MemLimit as usize] = (n < self.v1_unlimited).then_some(n);
            }
            File::MemMax => {
                parse::parse_value_into(text, self.value)?;
                v.g[G::MemLimit as usize] = self.value.number();
            }
            File::MemStatV1 | File::MemStatV2 => {
                parse::parse_keyed_into(text, self.keyed)?;
                let key = if file == File::MemStatV1 {
                    Key::TotalInactiveFile
                } else {
                    Key::InactiveFile
                };
                v.inactive_file = Some(self.keyed.require(key)?);
            }
            File::MemFailcnt => set_c(v, C::LimitHits, self.number(text)?),
            File::MemOomControl => {
                parse::parse_keyed_into(text, self.keyed)?;
                // Linux 4.13+.
                if let Some(n) = self.keyed.get(Key::OomKill) {
                    set_c(v, C::OomKills, n);
                }
            }
            File::MemEvents => {
                parse::parse_keyed_into(text, self.keyed)?;
                let k = &*self.keyed;
                set_c(v, C::LimitHits, k.require(Key::Max)?);
                set_c(v, C::Ooms, k.require(Key::Oom)?);
                if let Some(n) = k.get(Key::OomKill) {
                    set_c(v, C::OomKills, n);
                }
            }
            File::BlkioBytes
            | File::BlkioBytesRecursive
            | File::BlkioIos
            | File::BlkioIosRecursive => {
                parse::parse_blkio_into(text, self.blkio)?;
                let at = if matches!(file, File::BlkioBytes | File::BlkioBytesRecursive) {
                    0
                } else {
                    2
                };
                for d in &self.blkio.devices {
                    v.add_io(d.dev, at, [d.read, d.write]);
                }
            }
            File::IoStat => {
                parse::parse_io_stat_into(text, self.io_stat)?;
                for d in &self.io_stat.devices {
                    v.add_io(d.dev, 0, [d.rbytes, d.wbytes]);
                    v.add_io(d.dev, 2, [d.rios, d.wios]);
                }
            }
            File::PidsCurrent => v.g[G::Pids as usize] = Some(self.number(text)?),
            File::PidsMax => {
                parse::parse_value_into(text, self.value)?;
                v.g[G::PidsLimit as usize] = self.value.number();
            }
            File::CpuPressure | File::MemoryPressure | File::IoPressure => {
                psi::parse_into(text, self.psi)?;
                let (some, full, full_required) = match file {
                    File::CpuPressure => (C::CpuSome, C::CpuFull, false),
                    File::MemoryPressure => (C::MemorySome, C::MemoryFull, true),
                    _ => (C::IoSome, C::IoFull, true),
                };
                let end = || ParseError::new(text.lines().count() + 1, "no `some` line");
                let s = self.psi.some_total_us.ok_or_else(end)?;
                set_c(v, some, s.saturating_mul(1000));
                match self.psi.full_total_us {
                    Some(f) => set_c(v, full, f.saturating_mul(1000)),
                    // A cgroup's cpu.pressure has "full" since Linux 5.13.
                    None if full_required => {
                        return Err(ParseError::new(text.lines().count() + 1, "no `full` line"));
                    }
                    None => {}
                }
            }
        }
        Ok(())
    }

    /// A one-value file that must hold a number, not `max`.
    fn number(&mut self, text: &str) -> Result<u64, ParseError> {
        parse::parse_value_into(text, self.value)?;
        self.value
            .number()
            .ok_or_else(|| ParseError::new(1, "`max` where a number belongs"))
    }
}

/// The file's path, for an error: the hierarchy's directory, the cgroup's
/// path (invalid UTF-8 escaped) and the file.
fn file_path(hier: &Hierarchy, path: &[u8], file: File) -> PathBuf {
    dir_path(hier, path).join(file.name())
}

fn dir_path(hier: &Hierarchy, path: &[u8]) -> PathBuf {
    let mut label = String::new();
    cgroup_path::escape_into(path, &mut label);
    hier.dir.join(label.trim_start_matches('/'))
}

/// Device names for `MAJ:MIN`, as `<sysfs>/dev/block/MAJ:MIN` links to
/// them (`vda`, `sda1`, `dm-0`, the names of /proc/diskstats and
/// node_exporter's `device` label); `MAJ:MIN` where there is none.
/// Looked up again when a uevent or a mount may have changed them.
#[derive(Default)]
struct DeviceNames {
    names: HashMap<Dev, Box<str>>,
    at: Stamp,
}

impl DeviceNames {
    /// Forgets the names unless nothing could have changed them.
    fn refresh(&mut self, sysfs: &Path) {
        if !self.at.holds() {
            self.names.clear();
            self.at = Stamp::of(Epoch::now(), &sysfs.join("dev/block"));
        }
    }

    fn resolve(&mut self, dev: Dev, sysfs: &Path) {
        if self.names.contains_key(&dev) {
            return;
        }
        let name = if dev == OTHER_DEV {
            "other".to_string()
        } else {
            let (major, minor) = dev;
            std::fs::read_link(sysfs.join(format!("dev/block/{major}:{minor}")))
                .ok()
                .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
                .unwrap_or_else(|| format!("{major}:{minor}"))
        };
        self.names.insert(dev, name.into());
    }

    fn name(&self, dev: Dev) -> &str {
        self.names.get(&dev).map_or("", |n| n)
    }
}

#[cfg(test)]
mod tests;
