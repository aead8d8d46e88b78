// SPDX-License-Identifier: GPL-2.0-only
/*
 * Run-queue latency from the scheduler's own accounting: one program, on
 * sched_switch only, and nothing to lose.
 *
 * With CONFIG_SCHED_INFO (selected by TASK_DELAY_ACCT and SCHEDSTATS, so
 * on in most distribution kernels) the scheduler keeps, in every task,
 * sched_info.run_delay: the total time the task has spent runnable on a
 * run queue, waiting for a CPU (from enqueue at wakeup, or from being
 * switched out while still runnable, to switch-in; /proc/PID/schedstat's
 * second field). It is brought up to date when the task arrives on a CPU,
 * and a wait interrupted by a migration is added in parts, so the growth of
 * run_delay from one switch-out of a task to its next is exactly the one
 * wait that preceded the run in between.
 *
 * So at each switch-out (the `prev` of sched_switch), the wait is
 * run_delay now minus run_delay at the task's previous switch-out, kept in
 * task-local storage. No wakeup hooks (half the program runs of the
 * wakeup-based design in runqlat.bpf.c), no clock read, and no start time
 * that a missed or nested event could lose. A task's first switch-out
 * after attach has no previous value: if it has run only once in its life
 * (sched_info.pcount == 1, a task born after attach), its whole run_delay
 * is that one wait; otherwise (a task older than the probe) the wait is
 * counted as missed.
 *
 * The wait is reported when the task stops running rather than when it
 * starts: a sample lands in the histogram one run later than in the
 * wakeup design, which matters only to a task that runs for longer than
 * a scrape interval without ever being switched out.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "usescope.h"
#include "log2_hist.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	/* 0: every wait; 1: the waits of cgroups that found us_rq_cg full */
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, struct runqlat_hist);
} us_rq_hist SEC(".maps");

#include "runqlat_cgroup.h"

/* task -> its run_delay at its last switch-out (and, with
 * --probe.runqlat.per-cgroup, its cgroup's slot). Freed with the task. */
struct rq_seen {
	u64 delay;
	struct rq_cg_cache cg;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct rq_seen);
} us_rq_delay SEC(".maps");

/* --probe.runqlat.pid: only this process's tasks (0: every task). */
const volatile u32 target_tgid = 0;

SEC("tp_btf/sched_switch")
int BPF_PROG(us_rq_delay_btf, bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	struct runqlat_hist *h;
	struct rq_seen *seen;
	u64 delay, wait;
	u32 zero = 0, b;

	if (!prev->pid || (target_tgid && prev->tgid != target_tgid))
		return 0; /* the idle task, or filtered */
	h = bpf_map_lookup_elem(&us_rq_hist, &zero);
	if (!h)
		return 0;
	delay = prev->sched_info.run_delay;
	seen = bpf_task_storage_get(&us_rq_delay, prev, 0, 0);
	if (seen) {
		wait = delay - seen->delay;
		seen->delay = delay;
	} else {
		seen = bpf_task_storage_get(&us_rq_delay, prev, 0,
					    BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (seen)
			seen->delay = delay;
		if (prev->sched_info.pcount != 1) {
			h->missed++;
			return 0;
		}
		wait = delay;
	}
	if ((s64)wait < 0)
		return 0;
	b = bucket_of(wait);
	h->slots[b]++;
	h->sum_ns += wait;
	cgroup_account(prev, b, wait, seen ? &seen->cg : NULL, true);
	return 0;
}
