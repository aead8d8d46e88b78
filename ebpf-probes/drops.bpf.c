// SPDX-License-Identifier: GPL-2.0-only
/*
 * Packet drops by kernel drop reason, from skb:kfree_skb. Reason numbers
 * differ between kernels; user space names them from the running kernel's
 * BTF, so this side only counts numbers.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "usescope.h"
#include "cgroup_id.h"

char LICENSE[] SEC("license") = "GPL";

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_ARP 0x0806

/* --probe.drops.protocol-label; off keeps every drop in protocol 0, so
 * only protocol-0 counters are ever used and user space reads no others. */
const volatile bool protocol_label = false;

/* Bitmap words, then one counter per (protocol, slot): see usescope.h.
 * The loader shrinks it to protocol 0's counters without the label. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DROPS_USED_WORDS + DROPS_KEYS);
	__type(key, u32);
	__type(value, u64);
} us_drops SEC(".maps");

/* --probe.drops.per-cgroup: off, the verifier drops the per-cgroup code
 * and the programs cost what they did without it. */
const volatile bool per_cgroup = false;
/* The index in us_drops of the no_cgroup counter, map_full after it: past
 * the counters, set by the loader (which grows the map by two). */
const volatile u32 cg_counters = 0;

/* cgroup id -> drops */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1); /* --probe.drops.max-cgroups, set by user space */
	__type(key, u64);
	__type(value, u64);
} us_drops_cg SEC(".maps");

static __always_inline u32 slot_of(u32 reason)
{
	u32 subsys = reason >> DROPS_SUBSYS_SHIFT;
	u32 code = reason & ((1 << DROPS_SUBSYS_SHIFT) - 1);

	if (subsys == 0)
		return code < DROPS_CORE_SLOTS ? code : DROPS_OVERFLOW_SLOT;
	if (subsys <= DROPS_SUBSYS_MAX && code < DROPS_SUBSYS_CODES)
		return DROPS_CORE_SLOTS + (subsys - 1) * DROPS_SUBSYS_CODES + code;
	return DROPS_OVERFLOW_SLOT;
}

static __always_inline u32 proto_of(struct sk_buff *skb, const bool direct)
{
	switch (bpf_ntohs(direct ? skb->protocol : BPF_CORE_READ(skb, protocol))) {
	case ETH_P_IP:
		return DROPS_PROTO_IPV4;
	case ETH_P_IPV6:
		return DROPS_PROTO_IPV6;
	case ETH_P_ARP:
		return DROPS_PROTO_ARP;
	default:
		return DROPS_PROTO_OTHER;
	}
}

/* `direct`: tp_btf may read kernel memory directly; raw_tp must use
 * bpf_probe_read_kernel. A compile-time constant in each caller. */
static __always_inline void count_drop(struct sk_buff *skb, u32 reason,
				       const bool direct)
{
	u32 proto = 0, i, key, word;
	u64 *c, *used;

	if (protocol_label)
		proto = proto_of(skb, direct);
	i = proto * DROPS_SLOTS + slot_of(reason);
	if (i >= DROPS_KEYS)
		return;
	key = DROPS_USED_WORDS + i;
	c = bpf_map_lookup_elem(&us_drops, &key);
	if (!c)
		return;
	/* The first drop of this counter on this CPU marks it in use. The
	 * program does not nest on one CPU, so plain read-modify-writes of
	 * this CPU's values are safe. The count is stored before the bit; a
	 * reader that still sees the bit first (weakly ordered CPUs) reads a
	 * zero, which the collector does not export. */
	if ((*c)++ != 0)
		return;
	word = i / 64;
	used = bpf_map_lookup_elem(&us_drops, &word);
	if (used)
		*used |= 1ULL << (i % 64);
}

/* The socket's cgroup2 cgroup (set when the socket was created,
 * cgroup_sk_alloc), counted in us_drops_cg. A drop without a socket is not
 * counted by cgroup. A socket whose cgroup is unreadable, or a full hash,
 * counts in the per-CPU counters at cg_counters (no_cgroup) and
 * cg_counters + 1 (map_full) of us_drops. */
static __always_inline void count_cgroup(struct sock *sk, const bool direct)
{
	u32 key = cg_counters;
	u64 id = 0, *c;

	if (!sk)
		return;
	if (bpf_core_field_exists(sk->sk_cgrp_data.cgroup)) {
		if (direct)
			id = sk->sk_cgrp_data.cgroup->kn->id;
		else
			id = BPF_CORE_READ(sk, sk_cgrp_data.cgroup, kn, id);
	}
	/* kernfs ids start at 1: 0 is a failed read. */
	if (id) {
		if (cgroup_count_add(&us_drops_cg, id))
			return;
		key++;
	}
	c = bpf_map_lookup_elem(&us_drops, &key);
	if (c)
		(*c)++;
}

/* Linux 6.11+ (--probe.drops.per-cgroup only): the fourth argument rx_sk
 * is the receiving socket of a receive-path drop, where skb->sk is still
 * NULL; else skb->sk, the sending socket. Reading an argument the running
 * kernel lacks fails verification, so the loader falls back to the
 * three-argument program below on older kernels. */
SEC("tp_btf/kfree_skb")
int BPF_PROG(us_drops_btf_sk, struct sk_buff *skb, void *location,
	     enum skb_drop_reason reason, struct sock *rx_sk)
{
	count_drop(skb, reason, true);
	if (per_cgroup)
		count_cgroup(rx_sk ?: skb->sk, true);
	return 0;
}

/* Only the first three arguments: rx_sk was added in 6.11. Per cgroup it
 * sees skb->sk only: transmit-path drops. */
SEC("tp_btf/kfree_skb")
int BPF_PROG(us_drops_btf, struct sk_buff *skb, void *location,
	     enum skb_drop_reason reason)
{
	count_drop(skb, reason, true);
	if (per_cgroup)
		count_cgroup(skb->sk, true);
	return 0;
}

SEC("raw_tp/kfree_skb")
int BPF_PROG(us_drops_raw, struct sk_buff *skb, void *location,
	     enum skb_drop_reason reason)
{
	count_drop(skb, reason, false);
	if (per_cgroup)
		count_cgroup(BPF_CORE_READ(skb, sk), false);
	return 0;
}
