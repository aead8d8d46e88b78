/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * --probe.runqlat.per-cgroup: each measured wait also goes into a
 * histogram of the waiting task's cgroup, keyed by the cgroup's kernfs id
 * (which is its directory's inode number: user space resolves it to a
 * path).
 *
 * Which cgroup: on a v1 or hybrid host, the task's cgroup in the hierarchy
 * of the `cpu` controller (bpf_get_current_cgroup_id reads the v2 one, and
 * only of the current task); on a v2-only host, its cgroup in the default
 * hierarchy. User space picks one at load time from what is mounted
 * (cgroup_by); 0 compiles the whole thing out, so the flag costs nothing
 * when off.
 *
 * The map is a per-CPU hash bounded by --probe.runqlat.max-cgroups: no
 * shared counters, and one lookup per wait. A cgroup that finds it full
 * goes into entry 1 of us_rq_hist (entry 0 is the host histogram), which
 * user space adds to cgroup="other", so the per-cgroup histograms still
 * add up to the host one. User space deletes the entries of cgroups that
 * have gone.
 */
#ifndef USESCOPE_RUNQLAT_CGROUP_H
#define USESCOPE_RUNQLAT_CGROUP_H

#define RQ_CGROUP_NONE 0
#define RQ_CGROUP_V1_CPU 1
#define RQ_CGROUP_V2 2

/* Entry of us_rq_hist for the waits of cgroups that found us_rq_cg full. */
#define RQ_HIST_OVERFLOW_KEY 1

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1); /* --probe.runqlat.max-cgroups, set by user space */
	__type(key, u64);
	__type(value, struct runqlat_hist);
} us_rq_cg SEC(".maps");

const volatile u32 cgroup_by = RQ_CGROUP_NONE;

static __always_inline u64 task_cgroup_id(struct task_struct *t, const bool direct)
{
	if (cgroup_by == RQ_CGROUP_V1_CPU) {
		const int cpu = bpf_core_enum_value(enum cgroup_subsys_id, cpu_cgrp_id);

		if (direct)
			return t->cgroups->subsys[cpu]->cgroup->kn->id;
		return BPF_CORE_READ(t, cgroups, subsys[cpu], cgroup, kn, id);
	}
	if (direct)
		return t->cgroups->dfl_cgrp->kn->id;
	return BPF_CORE_READ(t, cgroups, dfl_cgrp, kn, id);
}

/* Adds one wait of task t, already in bucket b, to its cgroup's histogram. */
static __always_inline void cgroup_account(struct task_struct *t, u32 b,
					   u64 wait, const bool direct)
{
	struct runqlat_hist *h;
	u32 overflow = RQ_HIST_OVERFLOW_KEY;
	u64 id;

	if (cgroup_by == RQ_CGROUP_NONE)
		return;
	id = task_cgroup_id(t, direct);
	h = bpf_map_lookup_elem(&us_rq_cg, &id);
	if (!h) {
		/* First wait of this cgroup since it was added (or since user
		 * space deleted it): the only time the bucket lock is taken. */
		struct runqlat_hist zero = {};

		bpf_map_update_elem(&us_rq_cg, &id, &zero, BPF_NOEXIST);
		h = bpf_map_lookup_elem(&us_rq_cg, &id);
		if (!h) /* full */
			h = bpf_map_lookup_elem(&us_rq_hist, &overflow);
		if (!h)
			return;
	}
	h->slots[b]++;
	h->sum_ns += wait;
}

#endif
