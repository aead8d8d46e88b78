// SPDX-License-Identifier: GPL-2.0-only
/*
 * exits: the CPU time of tasks that have ended, so that short-lived
 * processes, which top and pidstat never see running, still show: per
 * task, once, its se.sum_exec_runtime (user and system time, ns), and a
 * count of tasks and of thread-group leaders (processes).
 *
 * The hook is sched_process_free, not sched_process_exit: at exit the
 * scheduler has not yet brought the task's run time up to date (it does
 * so at each tick, 4 ms at HZ=250, at a wakeup on its CPU and at the
 * task's last switch), and 5 ms children measured 19-29 % short there.
 * At free the task has switched out for the last time, its parent has
 * reaped it and an RCU grace period has passed: the sum is final, as in
 * its parent's RUSAGE_CHILDREN, and arrives a few milliseconds later.
 *
 * One program run and one per-CPU array entry per task; no map keyed by
 * task, nothing to evict. The kernel does not nest a program on one CPU
 * (it skips the run), so the plain increments of this CPU's entry do not
 * race.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "usescope.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct exits_counts);
} us_exits SEC(".maps");

/* direct: a BTF-typed pointer (tp_btf) read in place; otherwise through
 * bpf_probe_read_kernel. A compile-time constant in each caller. Both are
 * CO-RE relocated against the running kernel's task_struct. */
static __always_inline void count_exit(struct task_struct *p, const bool direct)
{
	struct exits_counts *c;
	u32 zero = 0;
	u64 runtime;
	int pid, tgid;

	c = bpf_map_lookup_elem(&us_exits, &zero);
	if (!c)
		return;
	if (direct) {
		runtime = p->se.sum_exec_runtime;
		pid = p->pid;
		tgid = p->tgid;
	} else {
		runtime = BPF_CORE_READ(p, se.sum_exec_runtime);
		pid = BPF_CORE_READ(p, pid);
		tgid = BPF_CORE_READ(p, tgid);
	}
	c->cpu_ns += runtime;
	c->tasks++;
	if (pid == tgid)
		c->processes++;
}

SEC("tp_btf/sched_process_free")
int BPF_PROG(us_exits_btf, struct task_struct *p)
{
	count_exit(p, true);
	return 0;
}

SEC("raw_tp/sched_process_free")
int BPF_PROG(us_exits_raw, struct task_struct *p)
{
	count_exit(p, false);
	return 0;
}
