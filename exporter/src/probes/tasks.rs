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

use std::io::Read;
use std::mem::offset_of;
use std::os::fd::{AsFd, OwnedFd};

use aya::programs::Iter;

use super::layout::{TasksCounts, word};
use super::loader::{self, Kind, Mode, ProbeError, describe};
use super::percpu::PerCpuStruct;
use super::{Kernel, Loaded, ProbeSettings, ProbeSpec, sys};
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
    flags: &[],
    metrics: &[&EXECS, &ZOMBIES],
    load,
    build: collector,
};

const EXECS: Desc = Desc::counter(
    "usescope_process_execs_total",
    "Successful execs (execve, execveat): programs started.",
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
const ITER_PROGRAM: &str = "us_tasks_zombies";
const VALUE_SIZE: usize = size_of::<TasksCounts>();
const EXECS_WORD: usize = word(offset_of!(TasksCounts, execs));

/// In the probe loader process: load and attach the exec program, then
/// the iterator. Its link travels with the others (the daemon keeps it
/// open); its id travels as the one name, for the collector to open its
/// own fd of it.
pub fn load(kernel: &Kernel, _settings: &ProbeSettings) -> Result<Loaded, ProbeError> {
    let mut loaded = loader::load_and_attach("tasks", &kernel.btf, MODES, |_| {})?;
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
    Ok(loaded)
}

/// In the daemon (before privileges are dropped): the collector over the
/// counters map and the iterator link named by id.
pub fn collector(
    map: OwnedFd,
    names: Vec<String>,
    _settings: &ProbeSettings,
) -> Result<Box<dyn Collector>, String> {
    let id: u32 = names
        .first()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("the probe loader sent no iterator link id ({names:?})"))?;
    let link = sys::link_fd_by_id(id).map_err(|e| format!("iterator link {id}: {e}"))?;
    Ok(Box::new(TasksCollector {
        counts: PerCpuStruct::from_fd(MAP, map, VALUE_SIZE)?,
        link,
        walk: Vec::new(),
    }))
}

struct TasksCollector {
    counts: PerCpuStruct,
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
        self.counts
            .read()
            .map_err(|e| CollectError::other("bpf map us_tasks", e.to_string()))?;
        let zombies = self.zombies().map_err(|e| {
            CollectError::other("bpf task iterator us_tasks_zombies", e.to_string())
        })?;
        enc.family(&EXECS);
        enc.sample(&EXECS, &[], self.counts.sum(EXECS_WORD));
        enc.family(&ZOMBIES);
        enc.sample(&ZOMBIES, &[], zombies as u64);
        Ok(())
    }
}
