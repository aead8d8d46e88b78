// SPDX-License-Identifier: GPL-2.0-only
/*
 * tasks: the process table's two moving parts that /proc shows only
 * through a walk of every /proc/PID: execs (sched_process_exec, one
 * per-CPU counter) and zombies, the processes that have exited and that
 * their parent has not reaped.
 *
 * Zombies are counted at scrape time by a task iterator (iter/task): the
 * daemon reads it, the kernel runs us_tasks_zombies over every task, and
 * the program writes one byte per thread-group leader in EXIT_ZOMBIE,
 * which is what /proc/PID/stat shows as state Z. The count is therefore
 * the one ps and top would show at that moment, with no per-event cost.
 * Counting leaders at sched_process_exit and again at sched_process_free
 * instead was tried: on Linux 6.18 about 1 % of short-lived processes had
 * no sched_process_free for minutes after their reaping, so that gauge
 * drifted upward on a busy host (docs/probes.md).
 *
 * --probe.tasks.per-cgroup also counts execs by the task's cgroup in the
 * cpu controller's hierarchy (v1 where mounted, else v2; user space sets
 * cgroup_by), where the CPU short-lived processes burn is accounted: a
 * hash cgroup id -> execs with --probe.tasks.max-cgroups entries, an atomic
 * add on an existing entry, a BPF_NOEXIST insert for a new one, and the
 * per-CPU map_full counter when the hash is full. User space deletes the
 * entries of cgroups that have gone. Without the flag cgroup_by is
 * CGROUP_BY_NONE, a read-only global, so the verifier drops that code and
 * the program costs what it did before.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "usescope.h"
#include "cgroup_id.h"

char LICENSE[] SEC("license") = "GPL";

/* include/linux/sched.h */
#define EXIT_ZOMBIE 0x00000020

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct tasks_counts);
} us_tasks SEC(".maps");

/* cgroup id -> execs */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1); /* --probe.tasks.max-cgroups, set by user space */
	__type(key, u64);
	__type(value, u64);
} us_tasks_cg SEC(".maps");

const volatile u32 cgroup_by = CGROUP_BY_NONE;

SEC("tp_btf/sched_process_exec")
int BPF_PROG(us_tasks_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	u32 zero = 0;
	struct tasks_counts *c = bpf_map_lookup_elem(&us_tasks, &zero);
	u64 id;

	if (!c)
		return 0;
	c->execs++;
	if (cgroup_by == CGROUP_BY_NONE)
		return 0;
	id = task_cgroup_id_in(p, cgroup_by == CGROUP_BY_V1,
			       bpf_core_enum_value(enum cgroup_subsys_id, cpu_cgrp_id), true);
	/* kernfs ids start at 1: 0 is a failed read. */
	if (!id) {
		c->no_cgroup++;
		return 0;
	}
	if (!cgroup_count_add(&us_tasks_cg, id))
		c->map_full++;
	return 0;
}

SEC("iter/task")
int us_tasks_zombies(struct bpf_iter__task *ctx)
{
	struct task_struct *t = ctx->task;
	char z = 'Z';

	if (t && t->pid == t->tgid && t->exit_state == EXIT_ZOMBIE)
		bpf_seq_write(ctx->meta->seq, &z, 1);
	return 0;
}
