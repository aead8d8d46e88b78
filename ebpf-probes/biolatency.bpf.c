// SPDX-License-Identifier: GPL-2.0-only
/*
 * Block I/O latency: the time from a request being issued to the device
 * driver (block_rq_issue) to its completion (block_rq_complete), per disk
 * and diskstats op group. This is the device's service time, without the
 * time the request waited in the I/O scheduler before issue (diskstats'
 * time fields include that wait).
 *
 * Issue and completion may run on different CPUs, so the issue time goes
 * into the one shared map, a hash keyed by the request's address;
 * everything else is per-CPU. The program pair exists twice: tp_btf
 * (fields read directly) and raw_tp (through bpf_probe_read_kernel).
 * Both need the 5.11+ tracepoint arguments (no request_queue first).
 *
 * --probe.biolatency.per-cgroup (cgroup_by != 0) also adds each completed
 * request to a histogram of the cgroup its I/O is charged to: the blkcg of
 * its bio (rq->bio->bi_blkg->blkcg), which is what blk-throttle and
 * blkio.throttle.io_serviced account to, also for I/O a kworker or the
 * loop driver issues on a cgroup's behalf and I/O completed in interrupt
 * context (where the current task says nothing). It is read at completion:
 * block_rq_complete fires before the request's bios are ended
 * (blk_update_request, blk_complete_request), and requests only merge
 * bios of one blkg, so the first bio speaks for the request; the issue
 * path stays as it was. With the flag off, cgroup_by is 0 and the code
 * compiles out.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "usescope.h"
#include "log2_hist.h"
#include "cgroup_id.h"

char LICENSE[] SEC("license") = "GPL";

/* request address -> ktime of issue, 0 once completed. Request structs
 * are allocated once per tag and reused for every I/O, so entries are
 * written in place and never deleted: after the first I/O on each tag,
 * issue and completion are a lookup and a store, with no bucket lock. An
 * update or delete takes the lock, and when it collides with a nested
 * run (an interrupt completing I/O on the same CPU) the kernel refuses it
 * with EBUSY, losing that I/O. LRU, so requests of removed devices or tags
 * beyond max_entries are evicted instead of filling the map. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, u64);
	__type(value, u64);
} us_bio_start SEC(".maps");

/* (disk, op group) -> histogram. Not preallocated: a per-CPU hash
 * preallocates max_entries values per CPU, 56 MB at 256 CPUs. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1024);
	__type(key, struct biolat_key);
	__type(value, struct biolat_hist);
} us_bio_hist SEC(".maps");

/* cgroup id -> histograms per op group (--probe.biolatency.per-cgroup).
 * max_entries is --probe.biolatency.max-cgroups, set by user space, which
 * deletes the entries of cgroups that are gone. Not preallocated, as
 * us_bio_hist: at most max_entries * possible CPUs * 864 bytes. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, u64);
	__type(value, struct biolat_cg_hist);
} us_bio_cg SEC(".maps");

/* BIOLAT_FOLD_* -> what went to cgroup="other" in the kernel */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BIOLAT_FOLDS);
	__type(key, u32);
	__type(value, struct biolat_cg_hist);
} us_bio_cg_fold SEC(".maps");

/* CGROUP_BY_V1 (the blkio hierarchy's ids) or CGROUP_BY_V2: which one only
 * matters to user space, which resolves the ids; 0: no per-cgroup view. */
const volatile u32 cgroup_by = CGROUP_BY_NONE;

/* A new entry's value: too big (864 bytes) for the 512-byte stack. */
struct biolat_cg_hist us_bio_cg_zero = {};

#define MINORBITS 20
#define REQ_OP_BITS 8

/* Kernels before 5.17 keep the disk in the request itself. */
struct request___o {
	struct gendisk *rq_disk;
} __attribute__((preserve_access_index));

static __always_inline struct gendisk *disk_of(struct request *rq,
					       const bool direct)
{
	if (bpf_core_field_exists(((struct request___o *)rq)->rq_disk))
		return BPF_CORE_READ((struct request___o *)rq, rq_disk);
	return direct ? rq->q->disk : BPF_CORE_READ(rq, q, disk);
}

/* diskstats' grouping (op_stat_group, plus flushes): discard, flush,
 * other writes (write, write zeroes, zone ops with odd numbers), and reads.
 * Returns BIOLAT_OPS for passthrough commands, which diskstats skips. */
static __always_inline u32 op_group(u32 cmd_flags)
{
	u32 op = cmd_flags & ((1 << REQ_OP_BITS) - 1);

	if (op >= REQ_OP_DRV_IN)
		return BIOLAT_OPS;
	if (op == REQ_OP_DISCARD)
		return BIOLAT_OP_DISCARD;
	if (op == REQ_OP_FLUSH)
		return BIOLAT_OP_FLUSH;
	return (op & 1) ? BIOLAT_OP_WRITE : BIOLAT_OP_READ;
}

/* The id of the cgroup the request's I/O is charged to; 0 with no bio
 * (flush requests), no blkg, or no blk-cgroup in the kernel. */
static __always_inline u64 rq_cgroup_id(struct request *rq, const bool direct)
{
	struct blkcg_gq *blkg;
	struct bio *bio;

	if (!bpf_core_field_exists(struct bio, bi_blkg))
		return 0;
	bio = direct ? rq->bio : BPF_CORE_READ(rq, bio);
	if (!bio)
		return 0;
	blkg = direct ? bio->bi_blkg : BPF_CORE_READ(bio, bi_blkg);
	if (!blkg)
		return 0;
	if (direct)
		return blkg->blkcg->css.cgroup->kn->id;
	return BPF_CORE_READ(blkg, blkcg, css.cgroup, kn, id);
}

/* Adds one request of op group `op`, in bucket b, to its cgroup's
 * histogram, or to a fold entry (cgroup="other"). */
static __always_inline void cgroup_account(struct request *rq, u32 op, u32 b,
					   u64 delta, const bool direct)
{
	struct biolat_cg_hist *h;
	u32 fold;
	u64 id;

	if (cgroup_by == CGROUP_BY_NONE)
		return;
	id = rq_cgroup_id(rq, direct);
	if (!id) {
		fold = BIOLAT_FOLD_NO_CGROUP;
		goto folded;
	}
	h = bpf_map_lookup_elem(&us_bio_cg, &id);
	if (!h) {
		/* Fails when the map is full (or another CPU added it). */
		bpf_map_update_elem(&us_bio_cg, &id, &us_bio_cg_zero, BPF_NOEXIST);
		h = bpf_map_lookup_elem(&us_bio_cg, &id);
	}
	if (h)
		goto add;
	fold = BIOLAT_FOLD_MAP_FULL;
folded:
	h = bpf_map_lookup_elem(&us_bio_cg_fold, &fold);
	if (!h)
		return;
add:
	if (op >= BIOLAT_OPS || b > LOG2_HIST_OVERFLOW)
		return;
	h->slots[op][b]++;
	h->sum_ns[op] += delta;
}

static __always_inline void on_issue(struct request *rq)
{
	u64 key = (u64)rq, *start;
	u64 now = bpf_ktime_get_ns();

	start = bpf_map_lookup_elem(&us_bio_start, &key);
	if (start)
		*start = now;
	else
		bpf_map_update_elem(&us_bio_start, &key, &now, BPF_ANY);
}

static __always_inline void on_complete(struct request *rq, const bool direct)
{
	u64 key = (u64)rq, delta, *start;
	struct biolat_key hkey;
	struct biolat_hist *h;
	struct gendisk *disk;
	u32 flags, b;

	start = bpf_map_lookup_elem(&us_bio_start, &key);
	if (!start || !*start)
		return; /* issued before attach, or a later partial completion */
	delta = bpf_ktime_get_ns() - *start;
	*start = 0;
	if ((s64)delta < 0)
		return;
	flags = direct ? rq->cmd_flags : BPF_CORE_READ(rq, cmd_flags);
	hkey.op = op_group(flags);
	if (hkey.op >= BIOLAT_OPS)
		return;
	disk = disk_of(rq, direct);
	if (!disk)
		return;
	hkey.dev = (BPF_CORE_READ(disk, major) << MINORBITS) |
		   BPF_CORE_READ(disk, first_minor);
	h = bpf_map_lookup_elem(&us_bio_hist, &hkey);
	if (!h) {
		struct biolat_hist zero = {};

		bpf_map_update_elem(&us_bio_hist, &hkey, &zero, BPF_NOEXIST);
		h = bpf_map_lookup_elem(&us_bio_hist, &hkey);
		if (!h)
			return;
	}
	b = bucket_of(delta);
	h->slots[b]++;
	h->sum_ns += delta;
	cgroup_account(rq, hkey.op, b, delta, direct);
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(us_bio_issue_btf, struct request *rq)
{
	on_issue(rq);
	return 0;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(us_bio_done_btf, struct request *rq, blk_status_t error,
	     unsigned int nr_bytes)
{
	on_complete(rq, true);
	return 0;
}

SEC("raw_tp/block_rq_issue")
int BPF_PROG(us_bio_issue_raw, struct request *rq)
{
	on_issue(rq);
	return 0;
}

SEC("raw_tp/block_rq_complete")
int BPF_PROG(us_bio_done_raw, struct request *rq, blk_status_t error,
	     unsigned int nr_bytes)
{
	on_complete(rq, false);
	return 0;
}
