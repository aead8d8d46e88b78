/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * The map layouts shared by the eBPF programs and usescope's user space.
 *
 * Most counters live in a per-CPU array with ONE entry whose value is a
 * whole struct: user space reads all of a probe's counters for all CPUs with
 * a single BPF_MAP_LOOKUP_ELEM at scrape time, and the kernel side needs no
 * atomics. biolatency's keys (devices) are only known to the kernel side, so
 * it uses a per-CPU hash; drops has many possible keys of which few are
 * used, so it keeps a bitmap of those beside its counters (below).
 *
 * exporter/build.rs generates the Rust mirror of this file (every #define as
 * a constant, every struct as a #[repr(C)] struct) and has clang check its
 * reading, so keep to the C it reads (exporter/build/header.rs): defines of
 * integer expressions (+ - * / and parentheses), structs of __u64 and __u32
 * fields and arrays, comments and _Static_assert.
 */
#ifndef USESCOPE_H
#define USESCOPE_H

/*
 * Latency histograms (runqlat, biolatency): bucket k counts latencies v with
 * 1us*2^(k-1) < v <= 1us*2^k, i.e. the Prometheus upper bound
 * le = 1e-6 * 2^k is a true upper bound. k runs 0..LOG2_HIST_BUCKETS-1
 * (1us .. 2^24us = 16.8s); slower ones land in the overflow slot, which
 * only the +Inf bucket counts. log2_hist.h computes the bucket.
 */
#define LOG2_HIST_BUCKETS 25
#define LOG2_HIST_OVERFLOW LOG2_HIST_BUCKETS

struct runqlat_hist {
	__u64 slots[LOG2_HIST_BUCKETS + 1];
	/* The count is the sum of the slots: a separate counter could be read
	 * between its update and the slot's, and break monotonic buckets. */
	__u64 sum_ns;
	/* switch-ins without a recorded start (runnable before attach, or
	 * the LRU start map evicted the entry): skipped, never guessed. */
	__u64 missed;
};

/*
 * biolatency: one per-CPU hash entry per (device, op group). The device is
 * the kernel's dev_t of the whole disk (major << 20 | minor); the op group
 * is diskstats' (BIOLAT_OP_*), so counts compare with /proc/diskstats.
 */
#define BIOLAT_OP_READ 0
#define BIOLAT_OP_WRITE 1
#define BIOLAT_OP_DISCARD 2
#define BIOLAT_OP_FLUSH 3
#define BIOLAT_OPS 4

struct biolat_key {
	__u32 dev;
	__u32 op;
};

struct biolat_hist {
	__u64 slots[LOG2_HIST_BUCKETS + 1];
	__u64 sum_ns;
};

/*
 * --probe.biolatency.per-cgroup: one per-CPU hash entry per cgroup id (the
 * blkcg the request's I/O is charged to), a histogram per op group, and a
 * two-entry per-CPU array of the same for what is folded into
 * cgroup="other": requests of cgroups that found the hash full, and those
 * with no cgroup (no bio, as flush requests, or no blkg).
 */
#define BIOLAT_FOLD_MAP_FULL 0
#define BIOLAT_FOLD_NO_CGROUP 1
#define BIOLAT_FOLDS 2

struct biolat_cg_hist {
	__u64 slots[BIOLAT_OPS][LOG2_HIST_BUCKETS + 1];
	__u64 sum_ns[BIOLAT_OPS];
};

/*
 * softirq: per CPU, per vector (HI, TIMER, ... RCU: the rows of
 * /proc/softirqs). Everything is per-CPU: a softirq is raised for, and
 * runs on, the CPU that raised it, and does not nest on one CPU.
 */
#define SOFTIRQ_VECS 10

struct softirq_counts {
	/* handler runs (softirq_entry) and the time spent in them */
	__u64 entries[SOFTIRQ_VECS];
	__u64 time_ns[SOFTIRQ_VECS];
	/* latency from the first raise to the handler's entry */
	__u64 latency_slots[SOFTIRQ_VECS][LOG2_HIST_BUCKETS + 1];
	__u64 latency_sum_ns[SOFTIRQ_VECS];
	/* scratch of the kernel side, not exported: ktime of the running
	 * handler's entry, and of the first raise not yet handled (0: none) */
	__u64 entered_at[SOFTIRQ_VECS];
	__u64 raised_at[SOFTIRQ_VECS];
};

/*
 * reclaim: one latency histogram per stall kind (RECLAIM_KIND_*), per CPU:
 * direct reclaim because the host ran short, reclaim because a memory
 * cgroup hit its limit, and a zone compacted by an allocating task.
 */
#define RECLAIM_KIND_GLOBAL 0
#define RECLAIM_KIND_MEMCG 1
#define RECLAIM_KIND_COMPACTION 2
#define RECLAIM_KINDS 3

struct reclaim_hists {
	__u64 slots[RECLAIM_KINDS][LOG2_HIST_BUCKETS + 1];
	__u64 sum_ns[RECLAIM_KINDS];
};

/* cachestat: pages, not calls. accesses and misses are demand reads
 * (read() and mmap); readahead counts pages brought in on speculation. */
struct cachestat_counts {
	__u64 accesses;
	__u64 misses;
	__u64 dirtied;
	__u64 readahead;
};

/*
 * exits: what tasks that have ended had cost, added once per task as it
 * goes, so a process too short-lived for top or a scrape still shows.
 */
struct exits_counts {
	/* the task's se.sum_exec_runtime: its CPU time, user and system, ns */
	__u64 cpu_ns;
	/* thread-group leaders (processes), and all tasks */
	__u64 processes;
	__u64 tasks;
};

/*
 * tasks: successful execs (zombies are counted by a task iterator at
 * scrape time, with no counter here).
 */
struct tasks_counts {
	__u64 execs;
	/* --probe.tasks.per-cgroup: execs whose cgroup found us_tasks_cg full,
	 * and whose cgroup id read 0 */
	__u64 map_full;
	__u64 no_cgroup;
};

/*
 * drops: slot = reason number for core reasons below DROPS_CORE_SLOTS;
 * subsystem reasons (subsys << 16 | code) with subsys 1..DROPS_SUBSYS_MAX
 * and code < DROPS_SUBSYS_CODES get their own slots after those; anything
 * else is counted in DROPS_OVERFLOW_SLOT, so the key space is bounded.
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

/*
 * us_drops is a per-CPU array of __u64. Counter i = proto * DROPS_SLOTS +
 * slot lives at key DROPS_USED_WORDS + i. Keys 0..DROPS_USED_WORDS-1 hold
 * each CPU's bitmap of the counters it has touched (bit i % 64 of word
 * i / 64), set on a counter's first increment on that CPU, so a scrape
 * reads the bitmap and then only the counters in use.
 */
#define DROPS_KEYS (DROPS_PROTOS * DROPS_SLOTS)
#define DROPS_USED_WORDS 31
_Static_assert(DROPS_USED_WORDS * 64 >= DROPS_KEYS, "bitmap covers every counter");

/*
 * tcpretrans: TCP segments retransmitted, by kind, in every network
 * namespace (or one, --probe.tcpretrans.netns). Segments, as /proc/net/snmp's
 * RetransSegs counts them (a TSO skb of n segments counts n); the kinds
 * split them the way TcpExt's counters do (docs/probes.md).
 */
#define TCPRETRANS_TIMEOUT 0
#define TCPRETRANS_FAST 1
#define TCPRETRANS_LOSS_PROBE 2
#define TCPRETRANS_SYN 3
#define TCPRETRANS_SYNACK 4
#define TCPRETRANS_KINDS 5

struct tcpretrans_counts {
	__u64 segs[TCPRETRANS_KINDS];
};

/*
 * tcpconnect: connect() calls on TCP sockets that failed because no local
 * port was free (EADDRNOTAVAIL from the kernel's port search).
 */
struct tcpconnect_counts {
	__u64 no_port;
};

/*
 * oomkill: OOM victims (oom:mark_victim), host-wide; the kills of each
 * victim's memory cgroup are in the hash us_oom_cg (cgroup id -> kills).
 * map_full: kills whose cgroup found us_oom_cg full; no_cgroup: kills
 * whose victim's cgroup could not be read (id 0). Both are in kills.
 */
struct oomkill_counts {
	__u64 kills;
	__u64 map_full;
	__u64 no_cgroup;
};

#endif
