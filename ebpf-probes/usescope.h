/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * The map layouts shared by the eBPF programs and usescope's user space.
 *
 * Every counter lives in a per-CPU array with ONE entry whose value is a
 * whole struct: user space reads all of a probe's counters for all CPUs with
 * a single BPF_MAP_LOOKUP_ELEM at scrape time, and the kernel side needs no
 * atomics. exporter/src/probes/layout.rs mirrors these structs with
 * #[repr(C)] and a test checks that the sizes agree.
 */
#ifndef USESCOPE_H
#define USESCOPE_H

/*
 * runqlat: bucket k counts latencies v with 1us*2^(k-1) < v <= 1us*2^k,
 * i.e. the Prometheus upper bound le = 1e-6 * 2^k is a true upper bound.
 * k runs 0..RUNQLAT_BUCKETS-1 (1us .. 2^24us = 16.8s); slower wake-ups land
 * in the overflow slot, which only the +Inf bucket counts.
 */
#define RUNQLAT_BUCKETS 25
#define RUNQLAT_OVERFLOW RUNQLAT_BUCKETS

struct runqlat_hist {
	__u64 slots[RUNQLAT_BUCKETS + 1];
	/* The count is the sum of the slots: a separate counter could be read
	 * between its update and the slot's, and break monotonic buckets. */
	__u64 sum_ns;
	/* switch-ins without a recorded start (runnable before attach, or
	 * the start map evicted the entry): skipped, never guessed. */
	__u64 missed;
};

/* cachestat: pages, not calls. */
struct cachestat_counts {
	__u64 accesses;
	__u64 misses;
	__u64 dirtied;
};

/*
 * drops: slot = reason number for core reasons below DROPS_CORE_SLOTS;
 * subsystem reasons (subsys << 16 | code) with subsys 1..DROPS_SUBSYS_MAX
 * and code < DROPS_SUBSYS_CODES get their own slots after those; anything
 * else is counted in DROPS_OVERFLOW_SLOT, so the map never grows.
 */
#define DROPS_CORE_SLOTS 256
#define DROPS_SUBSYS_SHIFT 16
#define DROPS_SUBSYS_MAX 7
#define DROPS_SUBSYS_CODES 32
#define DROPS_OVERFLOW_SLOT (DROPS_CORE_SLOTS + DROPS_SUBSYS_MAX * DROPS_SUBSYS_CODES)
#define DROPS_SLOTS (DROPS_OVERFLOW_SLOT + 1)

/* protocol index (only used with --probe.drops.protocol-label) */
#define DROPS_PROTO_OTHER 0
#define DROPS_PROTO_IPV4 1
#define DROPS_PROTO_IPV6 2
#define DROPS_PROTO_ARP 3
#define DROPS_PROTOS 4

struct drops_counts {
	__u64 count[DROPS_PROTOS][DROPS_SLOTS];
};

#endif
