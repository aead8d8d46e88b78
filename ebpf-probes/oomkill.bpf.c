// SPDX-License-Identifier: GPL-2.0-only
/*
 * oomkill: OOM victims, host-wide and by the victim's memory cgroup, so a
 * page leads to the workload that was killed even after its cgroup has
 * gone (a restarted container gets a new one) or when the cgroup
 * collector does not select it.
 *
 * The hook is oom:mark_victim, which the kernel fires once per victim
 * (TIF_MEMDIE is set just before, so never twice for one task), for the
 * global and the memcg OOM killer alike, with the victim's task_struct
 * since Linux 6.8 (before, only its pid: the programs then fail to load,
 * tp_btf at verification; raw_tp reads no cgroup and counts no_cgroup).
 * The victim's task lock is held there, so its cgroups are stable.
 *
 * Which cgroup: the victim's in the memory controller's v1 hierarchy where
 * it is mounted, else in the default (v2) one; user space sets cgroup_by.
 *
 * Cost per event is irrelevant (OOM kills are rare): a plain hash with an
 * atomic add, no per-CPU values. The hash has --probe.oomkill.max-cgroups
 * entries; a kill whose cgroup finds it full is counted in map_full. User
 * space deletes the entries of cgroups that have gone.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "usescope.h"
#include "cgroup_id.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct oomkill_counts);
} us_oom SEC(".maps");

/* cgroup id -> kills */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1); /* --probe.oomkill.max-cgroups, set by user space */
	__type(key, u64);
	__type(value, u64);
} us_oom_cg SEC(".maps");

const volatile u32 cgroup_by = CGROUP_BY_V1;

static __always_inline void count_kill(struct task_struct *t, const bool direct)
{
	struct oomkill_counts *c;
	u64 id;
	u32 zero = 0;

	c = bpf_map_lookup_elem(&us_oom, &zero);
	if (!c)
		return;
	c->kills++;
	id = task_cgroup_id_in(t, cgroup_by == CGROUP_BY_V1,
			       bpf_core_enum_value(enum cgroup_subsys_id, memory_cgrp_id),
			       direct);
	/* kernfs ids start at 1: 0 is a failed read. */
	if (!id) {
		c->no_cgroup++;
		return;
	}
	if (!cgroup_count_add(&us_oom_cg, id))
		c->map_full++;
}

SEC("tp_btf/mark_victim")
int BPF_PROG(us_oom_btf, struct task_struct *t)
{
	count_kill(t, true);
	return 0;
}

SEC("raw_tp/mark_victim")
int BPF_PROG(us_oom_raw, struct task_struct *t)
{
	count_kill(t, false);
	return 0;
}
