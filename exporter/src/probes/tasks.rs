//! The process table: `usescope_process_execs_total` (successful execs,
//! sched_process_exec) and `usescope_zombie_processes` (processes that
//! have exited and that their parent has not reaped), without reading
//! /proc/PID.
//!
//! A zombie holds a PID until it is reaped; a parent that never waits
//! piles them up until fork fails. top counts them by reading every
//! /proc/PID/stat, thousands of opens and reads on a busy host (the
//! processes collector does, off by default). Here the kernel walks its
//! own task list: each scrape creates an iterator from the `iter/task`
//! link and reads it, and the program writes one byte per thread-group
//! leader in `EXIT_ZOMBIE`, the state /proc shows as `Z`, so the gauge is
//! exactly what ps would count at that moment (ebpf-probes/tasks.bpf.c
//! says why not count exits and frees at their tracepoints).
//!
//! The exec count is what a 10× jump alert compares (a fork storm shows
//! in `node_forks_total`; a shell script spawning a program per line
//! shows in both). Off by default (`--probe.tasks`), like the other probes
//! added after the first three: the exec program costs 0.2–0.4 µs per exec
//! (BENCHMARKS.md), over the 100 ns per-event target though well under
//! 0.1 % of an exec, and the walk costs each scrape about 0.3 µs per task
//! on the host. tp_btf only (iterators need BTF and Linux 5.8).
//!
//! `--probe.tasks.per-cgroup` adds `usescope_cgroup_process_execs_total`,
//! the execs by the task's cgroup in the cpu controller's hierarchy (where
//! the CPU short-lived processes burn is accounted), labelled as the
//! cgroup collector labels its series, through [`cgroup_counts`] (shared
//! with oomkill). Unlike oomkill's, a series goes with the last cgroup
//! summed into it and its count moves to `cgroup="other"`
//! ([`OnGone::FoldIntoOther`]): execs are frequent and containers short
//! lived, so keeping every series ever seen would grow without bound,
//! while the sum over cgroups stays the host total and never goes down.

use std::io::Read;
use std::mem::offset_of;
use std::os::fd::{AsFd, OwnedFd};

use aya::programs::Iter;

use super::cgroup_counts::{self, CgroupCounts, OnGone};
use super::cgroup_ids::Hierarchy;
use super::layout::{TasksCounts, word};
use super::loader::{self, Kind, Mode, ProbeError, describe};
use super::percpu::PerCpuStruct;
use super::{Kernel, Loaded, ProbeFlag, ProbeFlagKind, ProbeSettings, ProbeSpec, sys};
use crate::kernel::error::CollectError;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const SPEC: ProbeSpec = ProbeSpec {
    name: "tasks",
    help: "Execs (sched_process_exec), and zombie processes (exited, not yet reaped) counted by a kernel task iterator at scrape time instead of a walk of /proc; off by default: about 0.3 µs per exec",
    default_enabled: false,
    collector: "probe_tasks",
    modes: MODES,
    map: MAP,
    flags: &[
        ProbeFlag {
            name: PER_CGROUP,
            help: "Also count execs by the task's cpu cgroup (usescope_cgroup_process_execs_total), labelled and selected as the cgroup collector does; a removed cgroup's series goes and its execs move to cgroup=\"other\"; about 0.25 µs more per exec",
            kind: ProbeFlagKind::Bool,
            default: None,
            value_name: None,
        },
        ProbeFlag {
            name: MAX_CGROUPS,
            help: "Most cgroups the per-cgroup exec map holds at once, and most cgroup label sets written (--probe.tasks.per-cgroup); execs past either are counted in cgroup=\"other\" and usescope_cgroup_process_execs_folded_total",
            kind: ProbeFlagKind::U32 { min: 1 },
            default: Some("1024"),
            value_name: None,
        },
    ],
    metrics: &[&EXECS, &ZOMBIES, &CGROUP_EXECS, &FOLDED],
    load,
    build: collector,
};

const EXECS: Desc = Desc::counter(
    "usescope_process_execs_total",
    "Successful execs (execve, execveat): programs started.",
);
/// `--probe.tasks.per-cgroup`: execs by cgroup too.
pub const PER_CGROUP: &str = "probe.tasks.per-cgroup";
/// `--probe.tasks.max-cgroups`: entries of the per-cgroup map.
pub const MAX_CGROUPS: &str = "probe.tasks.max-cgroups";
const DEFAULT_MAX_CGROUPS: u32 = 1024;

const CGROUP_EXECS: Desc = Desc::counter(
    "usescope_cgroup_process_execs_total",
    "Successful execs by the task's cpu cgroup (--probe.tasks.per-cgroup); cgroup=\"other\": unselected cgroups, removed ones, and the execs usescope_cgroup_process_execs_folded_total counts.",
);
const FOLDED: Desc = Desc::counter(
    "usescope_cgroup_process_execs_folded_total",
    "Execs counted in cgroup=\"other\" although their cgroup may be selected: gone (the series of removed cgroups), map_full (the kernel's map held --probe.tasks.max-cgroups cgroups), series_limit (as many label sets written), unresolved (the cgroup had gone before a scrape named it), no_cgroup (the task's cgroup was unreadable).",
);
const ZOMBIES: Desc = Desc::gauge(
    "usescope_zombie_processes",
    "Processes that have exited and not yet been reaped by their parent (state Z), each holding a PID; counted by a kernel task iterator at scrape time.",
);

pub const MODES: &[Mode] = &[Mode {
    name: "tp_btf",
    kind: Kind::BtfTracePoint,
    programs: &[("us_tasks_exec", "sched_process_exec")],
}];

/// The per-CPU array the collector reads, and its value.
pub const MAP: &str = "us_tasks";
/// The hash cgroup id -> execs.
pub const CGROUP_MAP: &str = "us_tasks_cg";
const ITER_PROGRAM: &str = "us_tasks_zombies";
const VALUE_SIZE: usize = size_of::<TasksCounts>();
const EXECS_WORD: usize = word(offset_of!(TasksCounts, execs));
const MAP_FULL_WORD: usize = word(offset_of!(TasksCounts, map_full));
const NO_CGROUP_WORD: usize = word(offset_of!(TasksCounts, no_cgroup));

/// In the probe loader process: load and attach the exec program, then
/// the iterator. Its link travels with the others (the daemon keeps it
/// open); its id travels as the one name, for the collector to open its
/// own fd of it. With `--probe.tasks.per-cgroup` the per-cgroup map's
/// id and the cpu hierarchy follow it.
pub fn load(kernel: &Kernel, settings: &ProbeSettings) -> Result<Loaded, ProbeError> {
    // Without the flag cgroup_by stays CGROUP_BY_NONE and the verifier
    // drops the per-cgroup code.
    let hierarchy = if settings.switch(PER_CGROUP) {
        Some(Hierarchy::find("cpu").map_err(ProbeError)?)
    } else {
        None
    };
    let by = hierarchy.as_ref().map_or(0u32, |h| h.by);
    let max = match hierarchy {
        Some(_) => settings.number(MAX_CGROUPS).unwrap_or(DEFAULT_MAX_CGROUPS),
        None => 1,
    };
    let mut loaded = loader::load_and_attach("tasks", &kernel.btf, MODES, |l| {
        l.override_global("cgroup_by", &by, true);
        l.map_max_entries(CGROUP_MAP, max);
    })?;
    let what = format!("{ITER_PROGRAM} (iter/task)");
    let prog: &mut Iter = loaded
        .ebpf
        .program_mut(ITER_PROGRAM)
        .ok_or_else(|| ProbeError(format!("program {ITER_PROGRAM} missing from the object")))?
        .try_into()
        .map_err(|e| describe(&what, &e))?;
    prog.load("task", &kernel.btf)
        .map_err(|e| describe(&what, &e))?;
    let fd = prog.fd().map_err(|e| describe(&what, &e))?;
    let link = sys::iter_link_create(fd.as_fd())
        .map_err(|e| describe(&format!("attaching {what}"), &e))?;
    let id = sys::link_id(link.as_fd()).map_err(|e| describe(&what, &e))?;
    loaded.links.push(link);
    loaded.names = vec![id.to_string()];
    if let Some(h) = &hierarchy {
        loaded
            .names
            .extend(cgroup_counts::loader_names(&loaded, CGROUP_MAP, h)?);
    }
    Ok(loaded)
}

/// In the daemon (before privileges are dropped): the collector over the
/// counters map and the iterator link named by id.
pub fn collector(
    map: OwnedFd,
    names: Vec<String>,
    settings: &ProbeSettings,
) -> Result<Box<dyn Collector>, String> {
    let id: u32 = names
        .first()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("the probe loader sent no iterator link id ({names:?})"))?;
    let link = sys::link_fd_by_id(id).map_err(|e| format!("iterator link {id}: {e}"))?;
    let cgroups = match &names[1..] {
        [] => None,
        cg => {
            let max = settings.number(MAX_CGROUPS).unwrap_or(DEFAULT_MAX_CGROUPS);
            Some(CgroupCounts::open(
                cg,
                CGROUP_MAP,
                settings.cgroup_selection(),
                max as usize,
                OnGone::FoldIntoOther,
                (&CGROUP_EXECS, &FOLDED),
            )?)
        }
    };
    Ok(Box::new(TasksCollector {
        counts: PerCpuStruct::from_fd(MAP, map, VALUE_SIZE)?,
        cgroups,
        link,
        walk: Vec::new(),
    }))
}

struct TasksCollector {
    counts: PerCpuStruct,
    /// `--probe.tasks.per-cgroup`: execs by cgroup, from [`CGROUP_MAP`].
    cgroups: Option<CgroupCounts>,
    link: OwnedFd,
    /// What the last walk wrote (one byte per zombie), kept for the next.
    walk: Vec<u8>,
}

impl TasksCollector {
    /// Runs the iterator: the kernel walks every task and the program
    /// writes one byte per zombie process.
    fn zombies(&mut self) -> std::io::Result<usize> {
        let iter = sys::iter_create(self.link.as_fd())?;
        self.walk.clear();
        std::fs::File::from(iter).read_to_end(&mut self.walk)?;
        let n = self.walk.len();
        // A walk of a host with many zombies leaves no large buffer behind.
        self.walk.shrink_to(4096);
        Ok(n)
    }
}

impl Collector for TasksCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let err = |e: std::io::Error| CollectError::other("bpf map us_tasks", e.to_string());
        // The host count first: the per-cgroup counts, read after, may
        // hold the execs of that moment too, never fewer.
        self.counts.read().map_err(err)?;
        if let Some(c) = &mut self.cgroups {
            c.read().map_err(err)?;
        }
        let zombies = self.zombies().map_err(|e| {
            CollectError::other("bpf task iterator us_tasks_zombies", e.to_string())
        })?;
        enc.family(&EXECS);
        enc.sample(&EXECS, &[], self.counts.sum(EXECS_WORD));
        enc.family(&ZOMBIES);
        enc.sample(&ZOMBIES, &[], zombies as u64);
        match &self.cgroups {
            Some(c) => c.write(
                enc,
                self.counts.sum(MAP_FULL_WORD),
                self.counts.sum(NO_CGROUP_WORD),
            ),
            // Declared families are always written (tests/probes.rs).
            None => {
                enc.family(&CGROUP_EXECS);
                enc.family(&FOLDED);
            }
        }
        Ok(())
    }
}
