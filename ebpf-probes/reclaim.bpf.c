// SPDX-License-Identifier: GPL-2.0-only
/*
 * Reclaim and compaction stalls: how long an allocating task is held up
 * reclaiming memory or compacting it, as log2 histograms per stall kind.
 *
 * - RECLAIM_KIND_GLOBAL: direct reclaim because the host ran short
 *   (mm_vmscan_direct_reclaim_begin/end: try_to_free_pages, the calls
 *   /proc/vmstat's allocstall_* count);
 * - RECLAIM_KIND_MEMCG: reclaim because a memory cgroup hit its limit
 *   (mm_vmscan_memcg_reclaim_begin/end: try_to_free_mem_cgroup_pages,
 *   which allocstall does not count);
 * - RECLAIM_KIND_COMPACTION: one zone compacted by an allocating task
 *   (mm_compaction_begin/end with cc->direct_compaction set; kcompactd and
 *   writes to /proc/sys/vm/compact_memory are not stalls and are left out).
 *
 * Begin and end run in the stalled task, but it may migrate between CPUs
 * while it reclaims, so the start time goes into the one shared map, keyed
 * by thread and kind. Stalls are rare (they are what on-call alerts on),
 * so a hash update and delete per stall is cheap. The histograms are
 * per-CPU. Both tp_btf and raw_tp copies of every program.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "usescope.h"
#include "log2_hist.h"

char LICENSE[] SEC("license") = "GPL";

/* (thread id << 8 | kind) -> ktime of the stall's begin. A task stalls in
 * one kind at a time, and reclaim does not nest (it runs with PF_MEMALLOC),
 * so the map holds at most one entry per stalled thread. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, u64);
	__type(value, u64);
} us_reclaim_start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct reclaim_hists);
} us_reclaim SEC(".maps");

static __always_inline u64 start_key(u32 kind)
{
	return (bpf_get_current_pid_tgid() & 0xffffffff) << 8 | kind;
}

static __always_inline void on_begin(u32 kind)
{
	u64 key = start_key(kind), now = bpf_ktime_get_ns();

	bpf_map_update_elem(&us_reclaim_start, &key, &now, BPF_ANY);
}

static __always_inline void on_end(u32 kind)
{
	u64 key = start_key(kind), delta, *start;
	struct reclaim_hists *h;
	u32 zero = 0;

	start = bpf_map_lookup_elem(&us_reclaim_start, &key);
	if (!start)
		return; /* began before attach */
	delta = bpf_ktime_get_ns() - *start;
	bpf_map_delete_elem(&us_reclaim_start, &key);
	h = bpf_map_lookup_elem(&us_reclaim, &zero);
	if (!h || kind >= RECLAIM_KINDS || (s64)delta < 0)
		return;
	h->slots[kind][bucket_of(delta)]++;
	h->sum_ns[kind] += delta;
}

SEC("tp_btf/mm_vmscan_direct_reclaim_begin")
int BPF_PROG(us_dr_beg_btf) { on_begin(RECLAIM_KIND_GLOBAL); return 0; }

SEC("tp_btf/mm_vmscan_direct_reclaim_end")
int BPF_PROG(us_dr_end_btf) { on_end(RECLAIM_KIND_GLOBAL); return 0; }

SEC("tp_btf/mm_vmscan_memcg_reclaim_begin")
int BPF_PROG(us_mcg_beg_btf) { on_begin(RECLAIM_KIND_MEMCG); return 0; }

SEC("tp_btf/mm_vmscan_memcg_reclaim_end")
int BPF_PROG(us_mcg_end_btf) { on_end(RECLAIM_KIND_MEMCG); return 0; }

SEC("tp_btf/mm_compaction_begin")
int BPF_PROG(us_cmp_beg_btf, struct compact_control *cc)
{
	if (cc->direct_compaction)
		on_begin(RECLAIM_KIND_COMPACTION);
	return 0;
}

SEC("tp_btf/mm_compaction_end")
int BPF_PROG(us_cmp_end_btf, struct compact_control *cc)
{
	if (cc->direct_compaction)
		on_end(RECLAIM_KIND_COMPACTION);
	return 0;
}

SEC("raw_tp/mm_vmscan_direct_reclaim_begin")
int BPF_PROG(us_dr_beg_raw) { on_begin(RECLAIM_KIND_GLOBAL); return 0; }

SEC("raw_tp/mm_vmscan_direct_reclaim_end")
int BPF_PROG(us_dr_end_raw) { on_end(RECLAIM_KIND_GLOBAL); return 0; }

SEC("raw_tp/mm_vmscan_memcg_reclaim_begin")
int BPF_PROG(us_mcg_beg_raw) { on_begin(RECLAIM_KIND_MEMCG); return 0; }

SEC("raw_tp/mm_vmscan_memcg_reclaim_end")
int BPF_PROG(us_mcg_end_raw) { on_end(RECLAIM_KIND_MEMCG); return 0; }

SEC("raw_tp/mm_compaction_begin")
int BPF_PROG(us_cmp_beg_raw, struct compact_control *cc)
{
	if (BPF_CORE_READ(cc, direct_compaction))
		on_begin(RECLAIM_KIND_COMPACTION);
	return 0;
}

SEC("raw_tp/mm_compaction_end")
int BPF_PROG(us_cmp_end_raw, struct compact_control *cc)
{
	if (BPF_CORE_READ(cc, direct_compaction))
		on_end(RECLAIM_KIND_COMPACTION);
	return 0;
}
