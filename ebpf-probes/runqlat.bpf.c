// SPDX-License-Identifier: GPL-2.0-only
/*
 * Run-queue latency: the time from a task becoming runnable (woken, or
 * switched out while still runnable) to it running on a CPU.
 *
 * Where the runnable-since time is kept is chosen at build time; build.rs
 * compiles this file twice (the second object is the build variant declared
 * by the usescope-build-variant line below):
 * - runqlat.bpf.o: task-local storage (BPF_MAP_TYPE_TASK_STORAGE), one
 *   slot hanging off each task_struct. No hashing, no eviction, and the
 *   kernel frees the slot with the task, so PID churn costs nothing. Needs
 *   BTF-typed task pointers, so only the tp_btf programs exist here.
 * - runqlat_lru.bpf.o (-DRUNQLAT_START_LRU): a bounded LRU hash keyed by
 *   pid, for kernels that refuse task storage or tracing programs. It
 *   costs more per event, holds exited pids until they are evicted, and
 *   when runnable tasks outnumber its entries, evicted starts are counted
 *   as missed. Both tp_btf
 *   and raw_tp copies of the handlers (raw_tp reads every field through
 *   bpf_probe_read_kernel; the `direct` flag is a compile-time constant in
 *   each copy, so the other branch is compiled out).
 * User space loads one object and one set of programs.
 */
// usescope-build-variant: runqlat_lru -DRUNQLAT_START_LRU
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "usescope.h"
#include "log2_hist.h"

char LICENSE[] SEC("license") = "GPL";

#define TASK_RUNNING 0

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	/* 0: every wait; 1: the waits of cgroups that found us_rq_cg full */
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, struct runqlat_hist);
} us_rq_hist SEC(".maps");

#include "runqlat_cgroup.h"

/* Kernels before 5.14 call the field `state`. */
struct task_struct___o {
	volatile long int state;
} __attribute__((preserve_access_index));

static __always_inline long task_state(struct task_struct *t, const bool direct)
{
	if (bpf_core_field_exists(t->__state))
		return direct ? t->__state : BPF_CORE_READ(t, __state);
	return BPF_CORE_READ((struct task_struct___o *)t, state);
}

static __always_inline u32 task_pid(struct task_struct *t, const bool direct)
{
	return direct ? t->pid : BPF_CORE_READ(t, pid);
}

/* --probe.runqlat.pid: only this process's tasks (0: every task). */
const volatile u32 target_tgid = 0;

static __always_inline bool wanted(struct task_struct *t, const bool direct)
{
	return !target_tgid ||
	       (direct ? t->tgid : BPF_CORE_READ(t, tgid)) == target_tgid;
}

#ifndef RUNQLAT_START_LRU

/* task -> ktime of becoming runnable. Created on the task's first wakeup
 * or preemption, freed by the kernel when the task exits. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, u64);
} us_rq_start SEC(".maps");

static __always_inline void mark_runnable(struct task_struct *t, u64 now,
					  const bool direct)
{
	u64 *start;

	if (!task_pid(t, direct) || !wanted(t, direct)) /* idle, or filtered */
		return;
	start = bpf_task_storage_get(&us_rq_start, t, 0,
				     BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (start)
		*start = now;
}

static __always_inline u64 *start_of(struct task_struct *t, const bool direct)
{
	return bpf_task_storage_get(&us_rq_start, t, 0, 0);
}

#else /* RUNQLAT_START_LRU */

/* pid -> ktime of becoming runnable. The only shared (non-per-CPU) map:
 * wakeup and switch-in often happen on different CPUs. LRU so a full map
 * evicts old entries instead of refusing new ones; max_entries is set by
 * user space from --probe.runqlat.max-tasks. One LRU list shared by all
 * CPUs (not BPF_F_NO_COMMON_LRU, which would split max-tasks into small
 * per-CPU lists that a burst of wakeups on one CPU could exhaust); its lock
 * is only taken when a task is seen for the first time (see below). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 10240);
	__type(key, u32);
	__type(value, u64);
} us_rq_start SEC(".maps");

/* Entries are reused rather than deleted: a value of 0 means "no start
 * recorded" (consumed by a switch-in). Writing into an existing entry is a
 * lookup and a store; an update or delete of an LRU hash takes a bucket
 * lock and recycles a node, several times the cost on this hot path. The
 * lookup also marks the entry used, so active tasks are not evicted. */
static __always_inline void mark_runnable(struct task_struct *t, u64 now,
					  const bool direct)
{
	u32 pid = task_pid(t, direct);
	u64 *start;

	if (!pid || !wanted(t, direct)) /* idle, or filtered */
		return;
	start = bpf_map_lookup_elem(&us_rq_start, &pid);
	if (start)
		*start = now;
	else
		bpf_map_update_elem(&us_rq_start, &pid, &now, BPF_ANY);
}

static __always_inline u64 *start_of(struct task_struct *t, const bool direct)
{
	u32 pid = task_pid(t, direct);

	return bpf_map_lookup_elem(&us_rq_start, &pid);
}

#endif /* RUNQLAT_START_LRU */

static __always_inline void on_switch(bool preempt, struct task_struct *prev,
				      struct task_struct *next, const bool direct)
{
	struct runqlat_hist *h;
	u32 zero = 0, b;
	u64 *start, delta;
	/* One clock read serves both tasks: prev stops running at the very
	 * instant next starts. */
	u64 now = bpf_ktime_get_ns();

	if (preempt || task_state(prev, direct) == TASK_RUNNING)
		mark_runnable(prev, now, direct);

	if (!task_pid(next, direct) || !wanted(next, direct))
		return;
	h = bpf_map_lookup_elem(&us_rq_hist, &zero);
	if (!h)
		return;
	start = start_of(next, direct);
	if (!start || !*start) {
		h->missed++;
		return;
	}
	delta = now - *start;
	*start = 0;
	if ((s64)delta < 0)
		return;
	b = bucket_of(delta);
	h->slots[b]++;
	h->sum_ns += delta;
	cgroup_account(next, b, delta, NULL, direct);
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(us_rq_wake_btf, struct task_struct *p)
{
	mark_runnable(p, bpf_ktime_get_ns(), true);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(us_rq_wknew_btf, struct task_struct *p)
{
	mark_runnable(p, bpf_ktime_get_ns(), true);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(us_rq_swtch_btf, bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	on_switch(preempt, prev, next, true);
	return 0;
}

#ifdef RUNQLAT_START_LRU
SEC("raw_tp/sched_wakeup")
int BPF_PROG(us_rq_wake_raw, struct task_struct *p)
{
	mark_runnable(p, bpf_ktime_get_ns(), false);
	return 0;
}

SEC("raw_tp/sched_wakeup_new")
int BPF_PROG(us_rq_wknew_raw, struct task_struct *p)
{
	mark_runnable(p, bpf_ktime_get_ns(), false);
	return 0;
}

SEC("raw_tp/sched_switch")
int BPF_PROG(us_rq_swtch_raw, bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	on_switch(preempt, prev, next, false);
	return 0;
}
#endif
