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
 * Cost: a hash lookup per wait would double the probe's (about 60 ns
 * here), so the histograms are a per-CPU array indexed by a small slot
 * number, a plain hash maps cgroup id -> slot (read-only once a cgroup
 * has its slot, so no cache line bounces between CPUs), and the design
 * that keeps task storage anyway (run_delay) caches each task's slot. A
 * cgroup's first wait takes a slot: one user space has freed (the queue)
 * or, until all have been handed out, the next never used. With none
 * left, the wait goes into entry 1 of us_rq_hist (entry 0 is the host
 * histogram), which user space adds to cgroup="other", so the per-cgroup
 * histograms still add up to the host one. User space frees the slots of
 * cgroups that have gone: it deletes the id, zeroes the slot's
 * histogram, then queues the slot (no task can still be in the cgroup).
 * All three maps have --probe.runqlat.max-cgroups entries.
 */
#ifndef USESCOPE_RUNQLAT_CGROUP_H
#define USESCOPE_RUNQLAT_CGROUP_H

#include "cgroup_id.h"
#include "cgroup_slot.h"

#define RQ_CGROUP_NONE CGROUP_BY_NONE
#define RQ_CGROUP_V1_CPU CGROUP_BY_V1
#define RQ_CGROUP_V2 CGROUP_BY_V2

/* Entry of us_rq_hist for the waits of cgroups that found us_rq_cg full. */
#define RQ_HIST_OVERFLOW_KEY 1

/* slot -> the histogram of the cgroup holding the slot */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1); /* --probe.runqlat.max-cgroups, set by user space */
	__type(key, u32);
	__type(value, struct runqlat_hist);
} us_rq_cg SEC(".maps");

/* cgroup id -> slot */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, u64);
	__type(value, u32);
} us_rq_cg_slot SEC(".maps");

/* slots user space has freed */
struct {
	__uint(type, BPF_MAP_TYPE_QUEUE);
	__uint(max_entries, 1);
	__type(value, u32);
} us_rq_cg_free SEC(".maps");

const volatile u32 cgroup_by = RQ_CGROUP_NONE;
/* = max_entries of the three maps */
const volatile u32 cgroup_slots = 1;
/* Slots below this have been handed out at least once. */
u32 cgroup_slots_used = 0;

static __always_inline u64 task_cgroup_id(struct task_struct *t, const bool direct)
{
	return task_cgroup_id_in(t, cgroup_by == RQ_CGROUP_V1_CPU,
				 bpf_core_enum_value(enum cgroup_subsys_id, cpu_cgrp_id),
				 direct);
}

/* The slot of cgroup `id`, given one on its first wait; false when none
 * is left (cgroup_slot.h). */
static __always_inline bool cgroup_slot(u64 id, u32 *out)
{
	return cgroup_slot_in(&us_rq_cg_slot, &us_rq_cg_free, &cgroup_slots_used,
			      cgroup_slots, id, out);
}

/* Task storage where the design has one caches the task's slot. */
#define rq_cg_cache cg_slot_cache

static __always_inline void cgroup_add(struct runqlat_hist *h, u32 b, u64 wait)
{
	u32 overflow = RQ_HIST_OVERFLOW_KEY;

	if (!h)
		h = bpf_map_lookup_elem(&us_rq_hist, &overflow);
	if (!h)
		return;
	h->slots[b]++;
	h->sum_ns += wait;
}

/* Adds one wait of task t, already in bucket b, to its cgroup's histogram
 * (or, with no slot left, to the overflow histogram). `c`: the task's
 * cache, or NULL. */
static __always_inline void cgroup_account(struct task_struct *t, u32 b,
					   u64 wait, struct rq_cg_cache *c,
					   const bool direct)
{
	u64 id;
	u32 s;

	if (cgroup_by == RQ_CGROUP_NONE)
		return;
	id = task_cgroup_id(t, direct);
	if (c && c->valid && c->id == id) {
		s = c->slot;
	} else {
		if (!cgroup_slot(id, &s)) {
			cgroup_add(NULL, b, wait);
			return;
		}
		if (c) {
			c->id = id;
			c->slot = s;
			c->valid = 1;
		}
	}
	cgroup_add(bpf_map_lookup_elem(&us_rq_cg, &s), b, wait);
}

#endif
