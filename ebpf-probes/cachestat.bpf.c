// SPDX-License-Identifier: GPL-2.0-only
/*
 * Page cache, from the reader's point of view: how many pages readers asked
 * for (demand accesses), how many of those were not in the cache and had to
 * be brought in (misses), how many pages readahead brought in on speculation
 * (readahead), and pages dirtied by writes. Tracepoints only (no kprobes or
 * fentry needed).
 *
 * Demand accesses:
 * - read(): mm_filemap_get_pages reports [index, last_index] from the read
 *   length and fires again for every batch of the same read with the same
 *   last_index and an advancing index. The range is clamped to the file
 *   size and each read is counted once.
 * - mmap: a fault on a page that fault-around did not map fires
 *   mm_filemap_fault (one page); fault-around fires mm_filemap_map_pages with
 *   its window [start, end] (up to 16 pages, clamped to the file). Pages of
 *   a window count as accessed. Repeats are recognised: the window that
 *   follows a fault contains the faulted page (counted once); fault-around
 *   runs again over the same window when a page in it was skipped (a
 *   readahead marker, or I/O still in flight), and those pages were counted
 *   with the window the first time. Since 6.18 fault-around maps large
 *   folios whole, beyond the window it reports: the window is widened to
 *   the folios at its ends. A folio mapped by one PMD entry fires nothing,
 *   and a fault that maps a whole folio reports one page: those are
 *   undercounted (docs/probes.md).
 *
 * Misses and readahead, from mm_filemap_add_to_page_cache (folio-weighted):
 * before pages are added for a reader, the kernel announces what the reader
 * needs: page_cache_sync_ra and page_cache_async_ra carry [index, index +
 * req_count) of a read(), mm_filemap_fault the faulting page. Added pages
 * inside that demand range are misses; the rest, when page_cache_ra_order or
 * page_cache_ra_unbounded announced them, are readahead. Pages added with
 * neither (writes that create pages) are not counted: they were not read.
 *
 * All of this needs per-thread state (a read or a fault can sleep and move to
 * another CPU between its events), kept in task-local storage.
 *
 * tp_btf handlers read kernel memory directly; the raw_tp copies use
 * bpf_probe_read_kernel (`direct` is a compile-time constant in each).
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "usescope.h"
#include "cgroup_id.h"
#include "cgroup_slot.h"

char LICENSE[] SEC("license") = "GPL";

/* Set by user space from sysconf(_SC_PAGESIZE). */
const volatile u32 page_shift = 12;
/* --probe.cachestat.pid: count only this process (0: every process). */
const volatile u32 only_tgid = 0;

/* Entry 0: the host's counts; entry 1: those of the cgroups that found
 * us_cs_cg full (--probe.cachestat.per-cgroup), which user space adds to
 * cgroup="other". */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, struct cachestat_counts);
} us_cs_counts SEC(".maps");

/*
 * --probe.cachestat.per-cgroup: accesses and misses also go to the
 * reading task's memory cgroup (the v1 memory hierarchy where mounted,
 * else cgroup2: a missed page is charged to the reader's memcg), in a
 * per-CPU array indexed by the cgroup's slot (cgroup_slot.h). The task's
 * (cgroup id, slot) is cached in its struct reader, so the hash is looked
 * up only when the task changed cgroups. cgroup_by 0 compiles it out.
 * The three maps have --probe.cachestat.max-cgroups entries.
 */
#define CS_OVERFLOW_KEY 1

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1); /* --probe.cachestat.max-cgroups */
	__type(key, u32);
	__type(value, struct cachestat_counts);
} us_cs_cg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, u64);
	__type(value, u32);
} us_cs_cg_slot SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_QUEUE);
	__uint(max_entries, 1);
	__type(value, u32);
} us_cs_cg_free SEC(".maps");

const volatile u32 cgroup_by = CGROUP_BY_NONE;
const volatile u32 cgroup_slots = 1;
u32 cgroup_slots_used = 0;

#define NO_PAGE ((u64)-1)

/* What one thread is doing to the page cache. Mappings are address_space
 * pointers, used only as identities. */
struct reader {
	/* read(): the last get_pages range, to recognise follow-up batches */
	u64 read_mapping;
	u64 read_index;
	u64 read_last;
	/* pages being added now: the reader needs [demand_first, demand_last];
	 * readahead announced [ra_first, ra_last] (first > last: none) */
	u64 add_mapping;
	u64 demand_first;
	u64 demand_last;
	u64 ra_first;
	u64 ra_last;
	/* mmap: the last faulted page (fault_mapping 0: none since the last
	 * window) and the last fault-around window */
	u64 fault_mapping;
	u64 fault_index;
	u64 win_mapping;
	u64 win_first;
	u64 win_last;
	/* --probe.cachestat.per-cgroup: the memory cgroup and its slot */
	struct cg_slot_cache cg;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct reader);
} us_cs_reader SEC(".maps");

static __always_inline struct cachestat_counts *counts(void)
{
	u32 zero = 0;

	return bpf_map_lookup_elem(&us_cs_counts, &zero);
}

static __always_inline bool filtered_out(void)
{
	return only_tgid && (u32)(bpf_get_current_pid_tgid() >> 32) != only_tgid;
}

/* The current thread's state, created on its first page-cache event. A new
 * slot is zeroed: mappings 0 match nothing, and fault_index 0 is only read
 * together with fault_mapping. */
static __always_inline struct reader *reader(void)
{
	return bpf_task_storage_get(&us_cs_reader, bpf_get_current_task_btf(), 0,
				    BPF_LOCAL_STORAGE_GET_F_CREATE);
}

/* The counts of the current task's memory cgroup (the overflow entry when
 * us_cs_cg is full), or NULL with the flag off. */
static __always_inline struct cachestat_counts *cg_counts(struct reader *r,
							  const bool direct)
{
	struct task_struct *t;
	u32 s, key = CS_OVERFLOW_KEY;
	u64 id;

	if (cgroup_by == CGROUP_BY_NONE)
		return NULL;
	t = bpf_get_current_task_btf();
	id = task_cgroup_id_in(t, cgroup_by == CGROUP_BY_V1,
			       bpf_core_enum_value(enum cgroup_subsys_id,
						   memory_cgrp_id),
			       direct);
	if (r->cg.valid && r->cg.id == id)
		return bpf_map_lookup_elem(&us_cs_cg, &r->cg.slot);
	if (!cgroup_slot_in(&us_cs_cg_slot, &us_cs_cg_free, &cgroup_slots_used,
			    cgroup_slots, id, &s))
		return bpf_map_lookup_elem(&us_cs_counts, &key);
	r->cg.id = id;
	r->cg.slot = s;
	r->cg.valid = 1;
	return bpf_map_lookup_elem(&us_cs_cg, &s);
}

static __always_inline void forget_adds(struct reader *r)
{
	r->add_mapping = 0;
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

/* The page cache's xarray (include/linux/xarray.h): entries with low bits
 * 10 are internal; above 4096 they point at a node (+2), below 63 << 2 they
 * are siblings naming the slot of a multi-slot entry (a large folio). */
#define XA_CHUNK_MASK 63
#define XA_MAX_LEVELS 6 /* 64^6 pages: far beyond any file */
#define xa_is_internal(e) (((u64)(e) & 3) == 2)
#define xa_is_node(e) (xa_is_internal(e) && (u64)(e) > 4096)
#define xa_is_sibling(e) (xa_is_internal(e) && (u64)(e) < (XA_CHUNK_MASK << 2))

/* The folio caching page `index` of `mapping`, or NULL: xa_load() by hand.
 * The callers run inside the RCU read section that protects the walk. */
static __always_inline struct folio *cached_folio(struct address_space *mapping,
						  u64 index)
{
	void *entry = BPF_CORE_READ(mapping, i_pages.xa_head);
	struct xa_node *node;
	u8 shift = 0;
	u32 slot;
	int level;

	for (level = 0; level < XA_MAX_LEVELS; level++) {
		if (!xa_is_node(entry))
			break;
		node = (struct xa_node *)((u64)entry - 2);
		shift = BPF_CORE_READ(node, shift);
		if (level == 0 && (index >> shift) > XA_CHUNK_MASK)
			return NULL; /* beyond what the tree holds */
		slot = (index >> shift) & XA_CHUNK_MASK;
		entry = NULL;
		bpf_probe_read_kernel(&entry, sizeof(entry), &node->slots[slot]);
		if (xa_is_sibling(entry)) {
			slot = ((u64)entry >> 2) & XA_CHUNK_MASK;
			entry = NULL;
			bpf_probe_read_kernel(&entry, sizeof(entry),
					      &node->slots[slot]);
		}
	}
	/* NULL, a shadow (value) entry of an evicted page, or a node too
	 * deep: no folio. */
	if (!entry || ((u64)entry & 3))
		return NULL;
	return entry;
}

static __always_inline u64 last_page_of(struct address_space *mapping,
					const bool direct)
{
	s64 size = direct ? mapping->host->i_size :
			    BPF_CORE_READ(mapping, host, i_size);

	return size > 0 ? ((u64)size - 1) >> page_shift : NO_PAGE;
}

static __always_inline void on_get_pages(struct address_space *mapping,
					 u64 index, u64 last_index,
					 const bool direct)
{
	struct cachestat_counts *c;
	struct reader *r;
	u64 last_page;

	if (filtered_out())
		return;
	c = counts();
	r = reader();
	if (!c || !r)
		return;
	/* This batch's pages are in: later adds belong to someone else. */
	forget_adds(r);
	if (r->read_mapping == (u64)mapping && r->read_last == last_index &&
	    index > r->read_index) {
		/* Next batch of the same read(): its pages were counted. */
		r->read_index = index;
		return;
	}
	r->read_mapping = (u64)mapping;
	r->read_index = index;
	r->read_last = last_index;

	last_page = last_page_of(mapping, direct);
	if (last_page == NO_PAGE)
		return;
	if (last_index > last_page)
		last_index = last_page;
	if (index > last_index)
		return;
	c->accesses += last_index - index + 1;
	c = cg_counts(r, direct);
	if (c)
		c->accesses += last_index - index + 1;
}

/* page_cache_sync_ra / page_cache_async_ra: a reader needs [index, index +
 * req_count). Inside a fault (announced with the faulting page as index)
 * the reader needs only that page: mmap readahead asks for ra_pages. */
static __always_inline void on_demand(struct inode *host, u64 index,
				      u64 req_count, const bool direct)
{
	struct address_space *mapping;
	struct reader *r;

	if (filtered_out())
		return;
	r = reader();
	if (!r)
		return;
	mapping = direct ? host->i_mapping : BPF_CORE_READ(host, i_mapping);
	r->add_mapping = (u64)mapping;
	r->demand_first = index;
	/* (A read() that starts at the page this thread's unfinished fault
	 * was on is taken for the fault: one page of demand.) */
	if (r->fault_mapping == (u64)mapping && r->fault_index == index)
		r->demand_last = index;
	else
		r->demand_last = req_count ? index + req_count - 1 : index;
	r->ra_first = 1;
	r->ra_last = 0;
}

/* page_cache_ra_order / page_cache_ra_unbounded: pages [first, first + n)
 * are about to be added on speculation (except the demanded ones). */
static __always_inline void on_readahead(struct inode *host, u64 first, u64 n,
					 const bool direct)
{
	struct address_space *mapping;
	struct reader *r;

	if (filtered_out() || !n)
		return;
	r = reader();
	if (!r)
		return;
	mapping = direct ? host->i_mapping : BPF_CORE_READ(host, i_mapping);
	if (r->add_mapping != (u64)mapping) {
		/* Readahead nobody announced a demand for (fadvise WILLNEED,
		 * readahead(2), madvise): all speculative. */
		r->add_mapping = (u64)mapping;
		r->demand_first = 1;
		r->demand_last = 0;
	}
	r->ra_first = first;
	r->ra_last = first + n - 1;
}

static __always_inline void on_add(struct folio *folio, const bool direct)
{
	struct cachestat_counts *c;
	struct reader *r;
	u64 mapping, first, last, pages, lo, hi, demanded = 0;

	if (filtered_out())
		return;
	c = counts();
	r = bpf_task_storage_get(&us_cs_reader, bpf_get_current_task_btf(), 0, 0);
	if (!c || !r)
		return;
	mapping = direct ? (u64)folio->mapping : (u64)BPF_CORE_READ(folio, mapping);
	if (!r->add_mapping || r->add_mapping != mapping)
		return;
	first = direct ? folio->index : BPF_CORE_READ(folio, index);
	pages = folio_pages(folio, direct);
	last = first + pages - 1;
	lo = first > r->demand_first ? first : r->demand_first;
	hi = last < r->demand_last ? last : r->demand_last;
	if (lo <= hi)
		demanded = hi - lo + 1;
	c->misses += demanded;
	if (first >= r->ra_first && first <= r->ra_last)
		c->readahead += pages - demanded;
	if (demanded) {
		c = cg_counts(r, direct);
		if (c)
			c->misses += demanded;
	}
}

static __always_inline void on_fault(struct address_space *mapping, u64 index,
				     const bool direct)
{
	struct cachestat_counts *c;
	struct reader *r;
	bool in_window;

	if (filtered_out())
		return;
	c = counts();
	r = reader();
	if (!c || !r)
		return;
	in_window = r->win_mapping == (u64)mapping && index >= r->win_first &&
		    index <= r->win_last;
	/* A retry of the same fault (FAULT_FLAG_TRIED), or a page of the
	 * last window, was counted already. */
	if (!(r->fault_mapping == (u64)mapping && r->fault_index == index) &&
	    !in_window) {
		c->accesses += 1;
		c = cg_counts(r, direct);
		if (c)
			c->accesses += 1;
	}
	r->fault_mapping = (u64)mapping;
	r->fault_index = index;
	/* Until readahead says otherwise, the reader needs this one page. */
	r->add_mapping = (u64)mapping;
	r->demand_first = index;
	r->demand_last = index;
	r->ra_first = 1;
	r->ra_last = 0;
}

/* Whether the file's page cache may hold large folios: its largest folio
 * order (6.10+) is above 0. Kernels without the field: assume it may. */
static __always_inline bool may_have_large_folios(struct address_space *mapping)
{
	u64 flags, shift, bits;

	if (!bpf_core_enum_value_exists(enum mapping_flags, AS_FOLIO_ORDER_MAX))
		return true;
	shift = bpf_core_enum_value(enum mapping_flags, AS_FOLIO_ORDER_MAX);
	bits = bpf_core_enum_value(enum mapping_flags, AS_FOLIO_ORDER_BITS);
	flags = BPF_CORE_READ(mapping, flags);
	return (flags >> shift) & ((1UL << bits) - 1);
}

static __always_inline void on_map_pages(struct address_space *mapping,
					 u64 first, u64 last, const bool direct)
{
	struct cachestat_counts *c;
	struct folio *folio;
	struct reader *r;
	u64 pages, edge, end, last_page;

	if (filtered_out() || last < first)
		return;
	c = counts();
	r = reader();
	if (!c || !r)
		return;
	forget_adds(r);
	/* Since 6.18 fault-around maps a large folio whole when it fits the
	 * VMA and page table, past the window it reports: widen the window
	 * to the folios at its ends (a folio inside it adds nothing). The
	 * xarray walks cost ~250 ns each: only for files that can have large
	 * folios, and once when one folio covers both ends. */
	if (may_have_large_folios(mapping)) {
		folio = cached_folio(mapping, last);
		if (folio) {
			edge = BPF_CORE_READ(folio, index);
			end = edge + folio_pages(folio, false) - 1;
			last_page = last_page_of(mapping, false);
			if (end > last_page)
				end = last_page;
			if (end > last)
				last = end;
			if (edge > first)
				folio = cached_folio(mapping, first);
			if (folio) {
				edge = BPF_CORE_READ(folio, index);
				if (edge < first)
					first = edge;
			}
		}
	}
	/* The same window again: its pages were counted the first time. */
	if (r->win_mapping == (u64)mapping && r->win_first == first &&
	    r->win_last == last)
		return;
	pages = last - first + 1;
	if (r->fault_mapping == (u64)mapping && r->fault_index >= first &&
	    r->fault_index <= last)
		pages -= 1; /* the faulted page, counted by the fault */
	c->accesses += pages;
	c = cg_counts(r, direct);
	if (c)
		c->accesses += pages;
	r->win_mapping = (u64)mapping;
	r->win_first = first;
	r->win_last = last;
	/* The fault is over. */
	r->fault_mapping = 0;
}

static __always_inline void on_dirty(struct folio *folio, const bool direct)
{
	struct cachestat_counts *c;

	if (filtered_out())
		return;
	c = counts();
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

SEC("tp_btf/page_cache_sync_ra")
int BPF_PROG(us_cs_sync_ra_btf, struct inode *host, unsigned long index,
	     struct file_ra_state *ra, unsigned long req_count)
{
	on_demand(host, index, req_count, true);
	return 0;
}

SEC("tp_btf/page_cache_async_ra")
int BPF_PROG(us_cs_async_ra_btf, struct inode *host, unsigned long index,
	     struct file_ra_state *ra, unsigned long req_count)
{
	on_demand(host, index, req_count, true);
	return 0;
}

SEC("tp_btf/page_cache_ra_order")
int BPF_PROG(us_cs_ra_order_btf, struct inode *host, unsigned long index,
	     struct file_ra_state *ra)
{
	on_readahead(host, index, ra->size, true);
	return 0;
}

SEC("tp_btf/page_cache_ra_unbounded")
int BPF_PROG(us_cs_ra_unbounded_btf, struct inode *host, unsigned long index,
	     unsigned long nr_to_read)
{
	on_readahead(host, index, nr_to_read, true);
	return 0;
}

SEC("tp_btf/mm_filemap_add_to_page_cache")
int BPF_PROG(us_cs_add_btf, struct folio *folio)
{
	on_add(folio, true);
	return 0;
}

SEC("tp_btf/mm_filemap_fault")
int BPF_PROG(us_cs_fault_btf, struct address_space *mapping, unsigned long index)
{
	on_fault(mapping, index, true);
	return 0;
}

SEC("tp_btf/mm_filemap_map_pages")
int BPF_PROG(us_cs_map_btf, struct address_space *mapping, unsigned long first,
	     unsigned long last)
{
	on_map_pages(mapping, first, last, true);
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

SEC("raw_tp/page_cache_sync_ra")
int BPF_PROG(us_cs_sync_ra_raw, struct inode *host, unsigned long index,
	     struct file_ra_state *ra, unsigned long req_count)
{
	on_demand(host, index, req_count, false);
	return 0;
}

SEC("raw_tp/page_cache_async_ra")
int BPF_PROG(us_cs_async_ra_raw, struct inode *host, unsigned long index,
	     struct file_ra_state *ra, unsigned long req_count)
{
	on_demand(host, index, req_count, false);
	return 0;
}

SEC("raw_tp/page_cache_ra_order")
int BPF_PROG(us_cs_ra_order_raw, struct inode *host, unsigned long index,
	     struct file_ra_state *ra)
{
	on_readahead(host, index, BPF_CORE_READ(ra, size), false);
	return 0;
}

SEC("raw_tp/page_cache_ra_unbounded")
int BPF_PROG(us_cs_ra_unbounded_raw, struct inode *host, unsigned long index,
	     unsigned long nr_to_read)
{
	on_readahead(host, index, nr_to_read, false);
	return 0;
}

SEC("raw_tp/mm_filemap_add_to_page_cache")
int BPF_PROG(us_cs_add_raw, struct folio *folio)
{
	on_add(folio, false);
	return 0;
}

SEC("raw_tp/mm_filemap_fault")
int BPF_PROG(us_cs_fault_raw, struct address_space *mapping, unsigned long index)
{
	on_fault(mapping, index, false);
	return 0;
}

SEC("raw_tp/mm_filemap_map_pages")
int BPF_PROG(us_cs_map_raw, struct address_space *mapping, unsigned long first,
	     unsigned long last)
{
	on_map_pages(mapping, first, last, false);
	return 0;
}

SEC("raw_tp/writeback_dirty_folio")
int BPF_PROG(us_cs_dirty_raw, struct folio *folio)
{
	on_dirty(folio, false);
	return 0;
}
