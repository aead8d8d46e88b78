//! The process table: `usescope_process_execs_total` (successful execs,
//! sched_process_exec) and `usescope_zombie_processes` (processes that
//! have exited and that their parent has not reaped), without walking
//! /proc.
//!
//! A zombie holds a PID until it is reaped; a parent that never waits
//! piles them up until fork fails. top counts them by reading every
//! /proc/PID/stat, which a scrape should not do on a host with many
//! processes (the processes collector does, off by default). Here the
//! kernel side counts leaders entering sched_process_exit and leaving at
//! sched_process_free; the gauge is the difference, exact but for the
//! few milliseconds a leader spends inside do_exit or waiting for its RCU
//! grace period after being reaped (ebpf-probes/tasks.bpf.c says why each
//! free matches exactly one exit, also for processes that had exited
//! before the probe was attached: [`seed`] marks those by walking the
//! tasks once, in the kernel, with a BPF task iterator).
//!
//! The exec count is what a 10× jump alert compares (a fork storm shows
//! in `node_forks_total`; a shell script spawning a program per line
//! shows in both). Off by default (`--probe.tasks`), like the other probes
//! added after the first three: per process, the exec, exit and free
//! programs cost about 0.2, 0.5 and 0.1 µs (BENCHMARKS.md), over the
//! 100 ns per-event target though under 1 % of the ~100 µs a fork, exec
//! and exit cost. tp_btf only: the seeding iterator needs BTF and a 5.8
//! kernel, tp_btf 5.5.

use std::io::Read;
use std::mem::offset_of;
use std::os::fd::OwnedFd;

use aya::maps::Array;
use aya::programs::Iter;
use aya::{Btf, Ebpf};

use super::layout::{TasksCounts, word};
use super::loader::{self, Kind, Mode, ProbeError, describe};
use super::percpu::PerCpuStruct;
use super::{Kernel, Loaded, ProbeSettings, ProbeSpec};
use crate::collector::Collector;
use crate::error::CollectError;
use crate::exposition::{Desc, Encoder};

pub const SPEC: ProbeSpec = ProbeSpec {
    name: "tasks",
    help: "Execs, and zombie processes (exited, not yet reaped) counted without walking /proc (sched_process_exec, _exit, _free); off by default: about 0.8 µs per process started and ended",
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
    "Processes that have exited and not yet been reaped by their parent (zombies), each holding a PID; counted from the scheduler's tracepoints, including for a few milliseconds each processes still exiting or just reaped.",
);

pub const MODES: &[Mode] = &[Mode {
    name: "tp_btf",
    kind: Kind::BtfTracePoint,
    programs: &[
        ("us_tasks_exec", "sched_process_exec"),
        ("us_tasks_exit", "sched_process_exit"),
        ("us_tasks_free", "sched_process_free"),
    ],
}];

/// The per-CPU array the collector reads, and its value.
pub const MAP: &str = "us_tasks";
const SINCE_MAP: &str = "us_tasks_since";
const SEED_PROGRAM: &str = "us_tasks_seed";
const VALUE_SIZE: usize = size_of::<TasksCounts>();
const EXECS_WORD: usize = word(offset_of!(TasksCounts, execs));
const EXITED_WORD: usize = word(offset_of!(TasksCounts, exited));
const FREED_WORD: usize = word(offset_of!(TasksCounts, freed));
const REPLACED_WORD: usize = word(offset_of!(TasksCounts, replaced));

/// In the probe loader process: load, attach, then seed.
pub fn load(kernel: &Kernel, _settings: &ProbeSettings) -> Result<Loaded, ProbeError> {
    let mut loaded = loader::load_and_attach("tasks", &kernel.btf, MODES, |_| {})?;
    seed(&mut loaded.ebpf, &kernel.btf)?;
    Ok(loaded)
}

/// Once the three programs are attached: tells them when (tasks started
/// since need no mark), then runs the task iterator that marks and counts
/// the processes already exiting or exited. The iterator program is
/// unloaded when the loader process exits.
fn seed(ebpf: &mut Ebpf, btf: &Btf) -> Result<(), ProbeError> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the timespec it is given. task_struct's
    // start_time is CLOCK_MONOTONIC in ns (ktime_get_ns).
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
        return Err(describe("clock_gettime", &std::io::Error::last_os_error()));
    }
    let now = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    let map = ebpf
        .map_mut(SINCE_MAP)
        .ok_or_else(|| ProbeError(format!("map {SINCE_MAP} missing from the object")))?;
    let mut since: Array<_, u64> =
        Array::try_from(map).map_err(|e| describe(&format!("map {SINCE_MAP}"), &e))?;
    since
        .set(0, now, 0)
        .map_err(|e| describe(&format!("setting {SINCE_MAP}"), &e))?;

    let what = format!("{SEED_PROGRAM} (iter/task)");
    let prog: &mut Iter = ebpf
        .program_mut(SEED_PROGRAM)
        .ok_or_else(|| ProbeError(format!("program {SEED_PROGRAM} missing from the object")))?
        .try_into()
        .map_err(|e| describe(&what, &e))?;
    prog.load("task", btf).map_err(|e| describe(&what, &e))?;
    let id = prog.attach().map_err(|e| describe(&what, &e))?;
    let link = prog.take_link(id).map_err(|e| describe(&what, &e))?;
    let mut walk = link.into_file().map_err(|e| describe(&what, &e))?;
    // Reading the iterator runs the program over every task; it prints
    // nothing.
    walk.read_to_end(&mut Vec::new())
        .map_err(|e| describe(&format!("running {what}"), &e))?;
    Ok(())
}

/// In the daemon: the collector over the handed-over counters map.
pub fn collector(
    map: OwnedFd,
    _names: Vec<String>,
    _settings: &ProbeSettings,
) -> Result<Box<dyn Collector>, String> {
    Ok(Box::new(TasksCollector {
        counts: PerCpuStruct::from_fd(MAP, map, VALUE_SIZE)?,
    }))
}

struct TasksCollector {
    counts: PerCpuStruct,
}

impl Collector for TasksCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.counts
            .read()
            .map_err(|e| CollectError::other("bpf map us_tasks", e.to_string()))?;
        enc.family(&EXECS);
        enc.sample(&EXECS, &[], self.counts.sum(EXECS_WORD));
        // The CPUs are copied one after another: a free counted on a CPU
        // copied after the one its exit was counted on can be seen alone.
        let gone = self.counts.sum(FREED_WORD) + self.counts.sum(REPLACED_WORD);
        let zombies = self.counts.sum(EXITED_WORD).saturating_sub(gone);
        enc.family(&ZOMBIES);
        enc.sample(&ZOMBIES, &[], zombies);
        Ok(())
    }
}
