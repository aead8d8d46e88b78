// SPDX-License-Identifier: GPL-2.0-only
/*
 * Page-cache accesses, misses and dirtied pages from the filemap and
 * writeback tracepoints (no kprobes or fentry needed).
 *
 * accesses: mm_filemap_get_pages reports the range a read() asked for,
 *   [index, last_index], taken from the read length, not the file size, and
 *   fires again for every batch of one read with the same last_index and an
 *   advancing index. We clamp the range to the file size and count each
 *   read's range once.
 * misses:   mm_filemap_add_to_page_cache, weighted by the folio's pages.
 * dirtied:  writeback_dirty_folio, weighted by the folio's pages.
 *
 * tp_btf handlers read kernel memory directly; the raw_tp copies use
 * bpf_probe_read_kernel (`direct` is a compile-time constant in each).
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "usescope.h"

char LICENSE[] SEC("license") = "GPL";

/* Set by user space from sysconf(_SC_PAGESIZE). */
const volatile u32 page_shift = 12;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct cachestat_counts);
} us_cs_counts SEC(".maps");

/* The last get_pages range seen on this CPU, to recognise the follow-up
 * batches of the same read(). */
struct read_state {
	u64 mapping;
	u64 index;
	u64 last_index;
	u32 tid;
	u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct read_state);
} us_cs_read SEC(".maps");

static __always_inline struct cachestat_counts *counts(void)
{
	u32 zero = 0;

	return bpf_map_lookup_elem(&us_cs_counts, &zero);
}

/* folio_nr_pages(): 1 << order, where the order of a large folio (PG_head
 * set) sits in the low byte of _flags_1. */
static __always_inline u64 folio_pages(struct folio *folio, const bool direct)
{
	u64 flags = 0, flags_1 = 0;

	if (direct)
		flags = *(u64 *)&folio->flags;
	else
		bpf_core_read(&flags, sizeof(flags), &folio->flags);
	if (!(flags & (1UL << bpf_core_enum_value(enum pageflags, PG_head))))
		return 1;
	if (!bpf_core_field_exists(folio->_flags_1))
		return 1;
	flags_1 = direct ? folio->_flags_1 : BPF_CORE_READ(folio, _flags_1);
	return 1UL << (flags_1 & 0x1f);
}

static __always_inline void on_get_pages(struct address_space *mapping,
					 u64 index, u64 last_index,
					 const bool direct)
{
	struct cachestat_counts *c = counts();
	struct read_state *st;
	u32 zero = 0, tid = (u32)bpf_get_current_pid_tgid();
	s64 size;
	u64 last_page;

	st = bpf_map_lookup_elem(&us_cs_read, &zero);
	if (!c || !st)
		return;
	if (st->mapping == (u64)mapping && st->last_index == last_index &&
	    st->tid == tid && index > st->index) {
		/* Next batch of the same read(): its pages were counted. */
		st->index = index;
		return;
	}
	st->mapping = (u64)mapping;
	st->index = index;
	st->last_index = last_index;
	st->tid = tid;

	size = direct ? mapping->host->i_size : BPF_CORE_READ(mapping, host, i_size);
	if (size <= 0)
		return;
	last_page = ((u64)size - 1) >> page_shift;
	if (last_index > last_page)
		last_index = last_page;
	if (index > last_index)
		return;
	c->accesses += last_index - index + 1;
}

static __always_inline void on_add(struct folio *folio, const bool direct)
{
	struct cachestat_counts *c = counts();

	if (c)
		c->misses += folio_pages(folio, direct);
}

static __always_inline void on_dirty(struct folio *folio, const bool direct)
{
	struct cachestat_counts *c = counts();

	if (c)
		c->dirtied += folio_pages(folio, direct);
}

SEC("tp_btf/mm_filemap_get_pages")
int BPF_PROG(us_cs_get_btf, struct address_space *mapping, unsigned long index,
	     unsigned long last_index)
{
	on_get_pages(mapping, index, last_index, true);
	return 0;
}

SEC("tp_btf/mm_filemap_add_to_page_cache")
int BPF_PROG(us_cs_add_btf, struct folio *folio)
{
	on_add(folio, true);
	return 0;
}

SEC("tp_btf/writeback_dirty_folio")
int BPF_PROG(us_cs_dirty_btf, struct folio *folio)
{
	on_dirty(folio, true);
	return 0;
}

SEC("raw_tp/mm_filemap_get_pages")
int BPF_PROG(us_cs_get_raw, struct address_space *mapping, unsigned long index,
	     unsigned long last_index)
{
	on_get_pages(mapping, index, last_index, false);
	return 0;
}

SEC("raw_tp/mm_filemap_add_to_page_cache")
int BPF_PROG(us_cs_add_raw, struct folio *folio)
{
	on_add(folio, false);
	return 0;
}

SEC("raw_tp/writeback_dirty_folio")
int BPF_PROG(us_cs_dirty_raw, struct folio *folio)
{
	on_dirty(folio, false);
	return 0;
}
