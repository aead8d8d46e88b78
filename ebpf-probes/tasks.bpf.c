// SPDX-License-Identifier: GPL-2.0-only
/*
 * tasks: the process table's two moving parts that /proc only shows by a
 * walk of every /proc/PID: execs (sched_process_exec) and zombies, the
 * processes that have exited and that their parent has not reaped yet.
 *
 * Zombies are counted as thread-group leaders that have passed
 * sched_process_exit (exited) and not yet sched_process_free (freed);
 * the gauge is the difference. Free comes an RCU grace period after the
 * parent's wait() released the task, so the gauge also holds, for a few
 * milliseconds each, leaders still inside do_exit and leaders released
 * but not yet freed; a process whose parent ignores SIGCHLD passes
 * through that way too. Threads other than the leader are never zombies
 * in /proc's sense (the kernel reaps them as they exit) and cost two
 * loads here.
 *
 * Each free must match exactly one exit, also for processes that exited
 * before the probe was attached. Tasks started after the loader attached
 * (start_time >= us_tasks_since[0], set by the loader just after
 * attaching) were necessarily seen exiting: for them the leader test
 * alone decides, with no per-task state. An older leader is counted
 * through us_tasks_marks, keyed by its task_struct's address: inserted
 * once (BPF_NOEXIST) either by the exit program or by the seeding
 * iterator (iter/task, run once by the loader after attaching: it inserts
 * the leaders already exiting or exited), and only a free that finds it
 * counts. Until the loader sets us_tasks_since, every task takes this
 * path. A hash, not task-local storage: the storage helpers give up
 * (return NULL) when any program on the CPU is inside task storage, as
 * runqlat or cachestat often are when the free's softirq arrives, and a
 * lost free would be a zombie counted for ever; a hash lookup takes no
 * lock, and its updates run with interrupts off, so none interleave.
 *
 * A non-leader thread that execs takes over the leader's PID (de_thread):
 * the old leader, already counted at its exit, is then freed under the
 * exec'ing thread's old PID and fails the leader test, so exec counts its
 * free in its place (replaced; old_pid != pid). It copies the old
 * leader's start_time, so both agree on which path the old leader took.
 *
 * Each counter is written from one context: free runs in an RCU callback
 * (softirq) and may interrupt exit or exec on the same CPU. The iterator
 * is preemptible and adds atomically.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "usescope.h"

char LICENSE[] SEC("license") = "GPL";

#define PF_EXITING 0x00000004
/* older leaders that may exit while counted: more than a host runs */
#define TASKS_MARKS (1 << 18)

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct tasks_counts);
} us_tasks SEC(".maps");

/* [0]: CLOCK_MONOTONIC ns at which the loader had attached; 0 until then */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} us_tasks_since SEC(".maps");

/* older leaders counted at exit or by the seed: task_struct address -> 1 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, TASKS_MARKS);
	__type(key, u64);
	__type(value, u64);
} us_tasks_marks SEC(".maps");

static __always_inline struct tasks_counts *counts(void)
{
	u32 zero = 0;

	return bpf_map_lookup_elem(&us_tasks, &zero);
}

/* Started after the loader attached: seen exiting for certain. */
static __always_inline bool started_since_attach(struct task_struct *p)
{
	u32 zero = 0;
	u64 *since = bpf_map_lookup_elem(&us_tasks_since, &zero);

	return since && *since && p->start_time >= *since;
}

/* Marks an older leader once; true if this call marked it. A full map
 * leaves it uncounted at both ends. */
static __always_inline bool mark(struct task_struct *p)
{
	u64 key = (u64)p, one = 1;

	return bpf_map_update_elem(&us_tasks_marks, &key, &one, BPF_NOEXIST) == 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(us_tasks_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	struct tasks_counts *c = counts();

	if (!c)
		return 0;
	c->execs++;
	/* the old leader was released by de_thread under another PID */
	if (old_pid != p->pid && started_since_attach(p))
		c->replaced++;
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(us_tasks_exit, struct task_struct *p, bool group_dead)
{
	struct tasks_counts *c;

	if (p->pid != p->tgid)
		return 0;
	c = counts();
	if (!c)
		return 0;
	if (started_since_attach(p) || mark(p))
		c->exited++;
	return 0;
}

SEC("tp_btf/sched_process_free")
int BPF_PROG(us_tasks_free, struct task_struct *p)
{
	struct tasks_counts *c;
	u64 key;

	if (started_since_attach(p)) {
		if (p->pid != p->tgid)
			return 0;
	} else {
		key = (u64)p;
		if (!bpf_map_lookup_elem(&us_tasks_marks, &key))
			return 0;
		/* a failed delete leaves an entry no newer task can match */
		bpf_map_delete_elem(&us_tasks_marks, &key);
	}
	c = counts();
	if (c)
		c->freed++;
	return 0;
}

/* Run once by the loader after attaching: the older leaders already past
 * sched_process_exit (exiting, zombie, or released and awaiting free). */
SEC("iter/task")
int us_tasks_seed(struct bpf_iter__task *ctx)
{
	struct task_struct *t = ctx->task;
	struct tasks_counts *c;

	if (!t || t->pid != t->tgid || started_since_attach(t))
		return 0;
	if (!(t->flags & PF_EXITING) && !t->exit_state)
		return 0;
	if (!mark(t))
		return 0;
	c = counts();
	if (c)
		__sync_fetch_and_add(&c->exited, 1);
	return 0;
}
