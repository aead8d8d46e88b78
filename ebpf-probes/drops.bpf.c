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

char LICENSE[] SEC("license") = "GPL";

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_ARP 0x0806

/* --probe.drops.protocol-label; off keeps every drop in protocol 0, so
 * only protocol-0 entries ever exist and user space reads nothing else. */
const volatile bool protocol_label = false;

/*
 * One per-CPU counter per (slot, protocol) that has dropped at least once:
 * a scrape copies (entries in use) x (CPUs) x 8 bytes, not every slot of
 * every protocol. The hash is preallocated (tracing programs on kernels
 * before 6.1 may only use preallocated hashes) and sized by the loader to
 * every possible key (DROPS_SLOTS x protocols), so an insert never fails
 * for lack of room.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, DROPS_SLOTS * DROPS_PROTOS);
	__type(key, struct drops_key);
	__type(value, u64);
} us_drops SEC(".maps");

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
	struct drops_key key = { .slot = slot_of(reason) };
	u64 one = 1, *c;

	if (protocol_label)
		key.proto = proto_of(skb, direct);
	c = bpf_map_lookup_elem(&us_drops, &key);
	if (c) {
		(*c)++;
		return;
	}
	/* The first drop of this key on any CPU creates the entry, with 1 on
	 * this CPU and 0 on the others. If another CPU created it since our
	 * lookup, NOEXIST fails and we count into the entry it made. */
	if (bpf_map_update_elem(&us_drops, &key, &one, BPF_NOEXIST) == 0)
		return;
	c = bpf_map_lookup_elem(&us_drops, &key);
	if (c)
		(*c)++;
}

/* Only the first three arguments: rx_sk was added in 6.11, and reading an
 * argument the running kernel lacks fails verification. */
SEC("tp_btf/kfree_skb")
int BPF_PROG(us_drops_btf, struct sk_buff *skb, void *location,
	     enum skb_drop_reason reason)
{
	count_drop(skb, reason, true);
	return 0;
}

SEC("raw_tp/kfree_skb")
int BPF_PROG(us_drops_raw, struct sk_buff *skb, void *location,
	     enum skb_drop_reason reason)
{
	count_drop(skb, reason, false);
	return 0;
}
