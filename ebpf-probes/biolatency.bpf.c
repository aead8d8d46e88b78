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
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "usescope.h"
#include "log2_hist.h"

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
	u32 flags;

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
	h->slots[bucket_of(delta)]++;
	h->sum_ns += delta;
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
