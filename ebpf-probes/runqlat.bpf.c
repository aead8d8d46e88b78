// SPDX-License-Identifier: GPL-2.0-only
/*
 * Run-queue latency: the time from a task becoming runnable (woken, or
 * switched out while still runnable) to it running on a CPU.
 *
 * Two copies of the three handlers: tp_btf (BTF-typed arguments read
 * directly, cheapest) and raw_tp (for kernels that refuse tracing programs;
 * every read goes through bpf_probe_read_kernel). User space loads only one
 * set; both share the maps. The `direct` flag is a compile-time constant in
 * each copy, so the other branch is compiled out.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "usescope.h"

char LICENSE[] SEC("license") = "GPL";

#define TASK_RUNNING 0

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

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct runqlat_hist);
} us_rq_hist SEC(".maps");

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

static __always_inline u32 floor_log2(u64 v)
{
	u32 r = 0, shift;

	shift = (v > 0xFFFFFFFF) << 5; v >>= shift; r |= shift;
	shift = (v > 0xFFFF) << 4; v >>= shift; r |= shift;
	shift = (v > 0xFF) << 3; v >>= shift; r |= shift;
	shift = (v > 0xF) << 2; v >>= shift; r |= shift;
	shift = (v > 0x3) << 1; v >>= shift; r |= shift;
	r |= (v >> 1);
	return r;
}

/* Smallest k with 1us * 2^k >= ns (ceil, so `le` is a true upper bound);
 * mirrored by probes::runqlat::bucket_of in user space. */
static __always_inline u32 bucket_of(u64 ns)
{
	u64 us = (ns + 999) / 1000;
	u32 k;

	if (us <= 1)
		return 0;
	k = floor_log2(us - 1) + 1;
	return k < RUNQLAT_BUCKETS ? k : RUNQLAT_OVERFLOW;
}

/* Entries are reused rather than deleted: a value of 0 means "no start
 * recorded" (consumed by a switch-in). Writing into an existing entry is a
 * lookup and a store; an update or delete of an LRU hash takes a bucket
 * lock and recycles a node, several times the cost on this hot path. The
 * lookup also marks the entry used, so active tasks are not evicted. */
static __always_inline void mark_runnable(u32 pid, u64 now)
{
	u64 *start;

	if (!pid) /* the idle task */
		return;
	start = bpf_map_lookup_elem(&us_rq_start, &pid);
	if (start)
		*start = now;
	else
		bpf_map_update_elem(&us_rq_start, &pid, &now, BPF_ANY);
}

static __always_inline void on_switch(bool preempt, struct task_struct *prev,
				      struct task_struct *next, const bool direct)
{
	struct runqlat_hist *h;
	u32 zero = 0, pid;
	u64 *start, delta;
	/* One clock read serves both tasks: prev stops running at the very
	 * instant next starts. */
	u64 now = bpf_ktime_get_ns();

	if (preempt || task_state(prev, direct) == TASK_RUNNING)
		mark_runnable(task_pid(prev, direct), now);

	pid = task_pid(next, direct);
	if (!pid)
		return;
	h = bpf_map_lookup_elem(&us_rq_hist, &zero);
	if (!h)
		return;
	start = bpf_map_lookup_elem(&us_rq_start, &pid);
	if (!start || !*start) {
		h->missed++;
		return;
	}
	delta = now - *start;
	*start = 0;
	if ((s64)delta < 0)
		return;
	h->slots[bucket_of(delta)]++;
	h->sum_ns += delta;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(us_rq_wake_btf, struct task_struct *p)
{
	mark_runnable(task_pid(p, true), bpf_ktime_get_ns());
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(us_rq_wknew_btf, struct task_struct *p)
{
	mark_runnable(task_pid(p, true), bpf_ktime_get_ns());
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(us_rq_swtch_btf, bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	on_switch(preempt, prev, next, true);
	return 0;
}

SEC("raw_tp/sched_wakeup")
int BPF_PROG(us_rq_wake_raw, struct task_struct *p)
{
	mark_runnable(task_pid(p, false), bpf_ktime_get_ns());
	return 0;
}

SEC("raw_tp/sched_wakeup_new")
int BPF_PROG(us_rq_wknew_raw, struct task_struct *p)
{
	mark_runnable(task_pid(p, false), bpf_ktime_get_ns());
	return 0;
}

SEC("raw_tp/sched_switch")
int BPF_PROG(us_rq_swtch_raw, bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	on_switch(preempt, prev, next, false);
	return 0;
}
