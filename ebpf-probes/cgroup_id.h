/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A task's cgroup id in the hierarchy a probe reads: the v1 hierarchy of
 * one controller (runqlat: cpu; oomkill: memory) on v1 and hybrid hosts,
 * or the v2 (default) hierarchy. User space chooses at load time from what
 * is mounted and sets the probe's `cgroup_by` global
 * (exporter/src/probes/cgroup_ids.rs). The id is the cgroup's kernfs id,
 * its directory's inode number, which user space resolves to a path.
 */
#ifndef USESCOPE_CGROUP_ID_H
#define USESCOPE_CGROUP_ID_H

#define CGROUP_BY_NONE 0
#define CGROUP_BY_V1 1
#define CGROUP_BY_V2 2

/* v1: true for the hierarchy of controller `subsys` (a CO-RE relocated
 * enum cgroup_subsys_id value, bpf_core_enum_value in the caller), false
 * for the default hierarchy. direct: a BTF-typed pointer (tp_btf) read in
 * place, else through bpf_probe_read_kernel; a compile-time constant. */
static __always_inline u64 task_cgroup_id_in(struct task_struct *t, bool v1,
					     int subsys, const bool direct)
{
	if (v1) {
		if (direct)
			return t->cgroups->subsys[subsys]->cgroup->kn->id;
		return BPF_CORE_READ(t, cgroups, subsys[subsys], cgroup, kn, id);
	}
	if (direct)
		return t->cgroups->dfl_cgrp->kn->id;
	return BPF_CORE_READ(t, cgroups, dfl_cgrp, kn, id);
}

/* Adds one to `id`'s count in a hash cgroup id -> u64 (oomkill's kills,
 * tasks' execs): an atomic add on an existing entry, a BPF_NOEXIST insert
 * for a new one. False when the hash is full: the caller counts that in
 * its map_full counter. */
static __always_inline bool cgroup_count_add(void *map, u64 id)
{
	u64 one = 1, *n = bpf_map_lookup_elem(map, &id);

	if (!n) {
		if (!bpf_map_update_elem(map, &id, &one, BPF_NOEXIST))
			return true;
		/* Full, or another CPU added the id first. */
		n = bpf_map_lookup_elem(map, &id);
		if (!n)
			return false;
	}
	__sync_fetch_and_add(n, 1);
	return true;
}

#endif
