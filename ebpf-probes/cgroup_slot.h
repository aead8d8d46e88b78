/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The slot allocator of the per-cgroup counters (runqlat_cgroup.h,
 * cachestat.bpf.c): a per-CPU array of counters indexed by a small slot,
 * a hash cgroup id -> slot (read-only once a cgroup has its slot, so no
 * cache line bounces between CPUs), and a queue of the slots user space
 * freed (cgroups that have gone). Each probe passes its own maps.
 */
#ifndef USESCOPE_CGROUP_SLOT_H
#define USESCOPE_CGROUP_SLOT_H

/* The slot of cgroup `id` in `slot_map`, given one on its first event: one
 * user space has freed (`free_map`) or, until all `slots` have been
 * handed out, the next never used (`*used` counts those); false when none
 * is left. */
static __always_inline bool cgroup_slot_in(void *slot_map, void *free_map,
					   u32 *used, u32 slots, u64 id,
					   u32 *out)
{
	u32 *slot = bpf_map_lookup_elem(slot_map, &id);
	u32 s;

	if (slot) {
		*out = *slot;
		return true;
	}
	if (bpf_map_pop_elem(free_map, &s)) {
		/* The check first, so a full map stops the count near the
		 * end instead of letting it wrap to slots in use. */
		if (*used >= slots)
			return false;
		s = __sync_fetch_and_add(used, 1);
		if (s >= slots)
			return false;
	}
	if (bpf_map_update_elem(slot_map, &id, &s, BPF_NOEXIST)) {
		/* Another CPU gave this cgroup a slot first: give ours back. */
		bpf_map_push_elem(free_map, &s, 0);
		slot = bpf_map_lookup_elem(slot_map, &id);
		if (!slot)
			return false;
		s = *slot;
	}
	*out = s;
	return true;
}

/* A task's cgroup and slot at its last event, kept in the probe's task
 * storage: the hash lookup (about 60 ns, most of the per-cgroup cost) is
 * then only made when the task changed cgroups. The slot stays valid
 * while the task is in the cgroup: user space frees only the slots of
 * cgroups that are gone. */
struct cg_slot_cache {
	u64 id;
	u32 slot;
	u32 valid;
};

#endif
