//! Exited tasks: `usescope_exited_tasks_cpu_seconds_total` (the CPU time,
//! user and system, of every task that has ended, added once as it goes),
//! `usescope_exited_processes_total` and `usescope_exited_tasks_total`.
//!
//! Host CPU time that no running process accounts for is the signature of
//! short-lived processes (a build, a crash-looping helper, a script forking
//! per line): top and pidstat sample the processes alive at the moment and
//! never see them, while node_cpu_seconds_total shows the CPUs busy.
//! rate(usescope_exited_tasks_cpu_seconds_total) is that CPU time.
//!
//! A task is counted when the kernel frees it (sched_process_free), a few
//! milliseconds after its parent reaps it, with its final run time; why not
//! at sched_process_exit: ebpf-probes/exits.bpf.c. Off by default
//! (`--probe.exits`), like the other probes added after the first three:
//! about 0.2 µs per task in the program (BENCHMARKS.md), which is little
//! next to the ~100 µs a fork and exit cost, but over the 100 ns target.

use std::mem::offset_of;
use std::os::fd::OwnedFd;

use super::layout::{ExitsCounts, word};
use super::loader::{self, Kind, Mode, ProbeError};
use super::percpu::{self, PerCpuStruct};
use super::{Kernel, Loaded, ProbeSettings, ProbeSpec};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const SPEC: ProbeSpec = ProbeSpec {
    name: "exits",
    help: "CPU time of tasks that have exited, and how many processes and tasks exited, so short-lived processes show (sched_process_free); off by default: about 0.2 µs per task that ends",
    default_enabled: false,
    collector: "probe_exits",
    modes: MODES,
    map: MAP,
    flags: &[],
    metrics: &[&CPU, &PROCESSES, &TASKS],
    load,
    build: collector,
};

const CPU: Desc = Desc::counter(
    "usescope_exited_tasks_cpu_seconds_total",
    "CPU time (user and system) of tasks that have exited, each added once, when the kernel frees the task after its reaping: what short-lived processes used, which per-process tools never see.",
);
const PROCESSES: Desc = Desc::counter(
    "usescope_exited_processes_total",
    "Processes (thread-group leaders) that have exited and been reaped.",
);
const TASKS: Desc = Desc::counter(
    "usescope_exited_tasks_total",
    "Tasks (processes and threads) that have exited and been freed.",
);

pub const MODES: &[Mode] = &[
    Mode {
        name: "tp_btf",
        kind: Kind::BtfTracePoint,
        programs: &[("us_exits_btf", "sched_process_free")],
    },
    Mode {
        name: "raw_tp",
        kind: Kind::RawTracePoint,
        programs: &[("us_exits_raw", "sched_process_free")],
    },
];

/// The per-CPU array the collector reads, and its value.
pub const MAP: &str = "us_exits";
const VALUE_SIZE: usize = size_of::<ExitsCounts>();
const CPU_NS_WORD: usize = word(offset_of!(ExitsCounts, cpu_ns));
const PROCESSES_WORD: usize = word(offset_of!(ExitsCounts, processes));
const TASKS_WORD: usize = word(offset_of!(ExitsCounts, tasks));

/// In the probe loader process: load and attach.
pub fn load(kernel: &Kernel, _settings: &ProbeSettings) -> Result<Loaded, ProbeError> {
    loader::load_and_attach("exits", &kernel.btf, MODES, |_| {})
}

/// In the daemon: the collector over the handed-over counters map.
pub fn collector(
    map: OwnedFd,
    _names: Vec<String>,
    _settings: &ProbeSettings,
) -> Result<Box<dyn Collector>, String> {
    percpu::counters_collector(MAP, map, VALUE_SIZE, write)
}

/// The families of the counters, summed over CPUs.
fn write(counts: &PerCpuStruct, enc: &mut Encoder) {
    enc.family(&CPU);
    enc.sample(&CPU, &[], counts.sum(CPU_NS_WORD) as f64 / 1e9);
    enc.family(&PROCESSES);
    enc.sample(&PROCESSES, &[], counts.sum(PROCESSES_WORD));
    enc.family(&TASKS);
    enc.sample(&TASKS, &[], counts.sum(TASKS_WORD));
}
