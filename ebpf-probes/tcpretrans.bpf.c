// SPDX-License-Identifier: GPL-2.0-only
/*
 * tcpretrans: TCP segments retransmitted, by kind. Two tracepoints:
 *
 * - tcp_retransmit_skb (sk, skb, err) fires at the end of
 *   __tcp_retransmit_skb, which every retransmission of a full socket goes
 *   through: the RTO timer's, the recovery queue's and the tail loss
 *   probe's. Only err == 0 is counted: the kernel sent the segment. The
 *   skb's pcount (tcp_gso_segs) is then the number of segments sent, the
 *   number RetransSegs added.
 * - tcp_retransmit_synack (listener, req) fires once per SYN-ACK a
 *   listener retransmitted for a request socket (only when it was sent).
 *
 * The kind is read from the socket at the time of the retransmission:
 * - syn: the segment carries SYN (a connect()'s SYN);
 * - timeout: the socket is in the Loss state (icsk_ca_state TCP_CA_Loss),
 *   entered when the retransmission timer fires: the RTO's own
 *   retransmission and the slow-start retransmissions that follow it
 *   (TcpExt TCPTimeouts and TCPSlowStartRetrans);
 * - loss_probe: the loss-probe timer is the one pending
 *   (icsk_pending == ICSK_TIME_LOSS_PROBE) outside Recovery and Loss: the
 *   tail loss probe re-sending the last segment (TcpExt TCPLossProbes,
 *   which also counts probes that sent new data instead);
 * - fast: everything else, i.e. the recovery queue outside the Loss state
 *   (fast retransmit, RACK; TcpExt TCPFastRetrans).
 *
 * One per-CPU array entry; the kernel does not nest a program on one CPU,
 * so the plain increments do not race.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "usescope.h"

char LICENSE[] SEC("license") = "GPL";

/* The kernel's own #defines (inet_connection_sock and tcp headers), so not
 * in BTF; they have not changed since they were introduced. */
#define ICSK_TIME_LOSS_PROBE 5
#define TCP_CA_RECOVERY 3
#define TCP_CA_LOSS 4
#define TCPHDR_SYN 0x02

/* --probe.tcpretrans.netns: count only the network namespace with this
 * inode number (0: every namespace). */
const volatile u32 only_netns = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct tcpretrans_counts);
} us_tcpretrans SEC(".maps");

static __always_inline bool other_netns(const struct sock *sk)
{
	return only_netns && BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum) != only_netns;
}

static __always_inline void add(u32 kind, u64 segs)
{
	struct tcpretrans_counts *c;
	u32 zero = 0;

	c = bpf_map_lookup_elem(&us_tcpretrans, &zero);
	if (c && kind < TCPRETRANS_KINDS)
		c->segs[kind] += segs;
}

/* direct: the tp_btf programs, whose arguments are BTF-typed pointers the
 * verifier lets them read in place (the socket's connection fields after
 * bpf_skc_to_tcp_sock has typed it as a tcp_sock); otherwise through
 * bpf_probe_read_kernel. A compile-time constant in each caller. */
static __always_inline void count_skb(const struct sock *sk, const struct sk_buff *skb, int err,
				      const bool direct)
{
	const struct inet_connection_sock *icsk;
	const struct tcp_skb_cb *cb;
	u32 kind, ca_state, pending;
	u16 segs, flags;

	if (err || other_netns(sk))
		return;
	cb = (const void *)&skb->cb[0];
	if (direct) {
		struct tcp_sock *tp = bpf_skc_to_tcp_sock((void *)sk);

		if (!tp)
			return;
		icsk = &tp->inet_conn;
		segs = cb->tcp_gso_segs;
		flags = cb->tcp_flags;
		ca_state = BPF_CORE_READ_BITFIELD(icsk, icsk_ca_state);
		pending = icsk->icsk_pending;
	} else {
		icsk = (const void *)sk;
		segs = BPF_CORE_READ(cb, tcp_gso_segs);
		flags = BPF_CORE_READ(cb, tcp_flags);
		ca_state = BPF_CORE_READ_BITFIELD_PROBED(icsk, icsk_ca_state);
		pending = BPF_CORE_READ(icsk, icsk_pending);
	}
	if (flags & TCPHDR_SYN)
		kind = TCPRETRANS_SYN;
	else if (ca_state == TCP_CA_LOSS)
		kind = TCPRETRANS_TIMEOUT;
	else if (ca_state < TCP_CA_RECOVERY && pending == ICSK_TIME_LOSS_PROBE)
		kind = TCPRETRANS_LOSS_PROBE;
	else
		kind = TCPRETRANS_FAST;
	/* A sent skb has at least one segment; 0 would be a misread. */
	add(kind, segs ? segs : 1);
}

static __always_inline void count_synack(const struct sock *listener)
{
	if (!other_netns(listener))
		add(TCPRETRANS_SYNACK, 1);
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(us_tcpretrans_skb_btf, const struct sock *sk, const struct sk_buff *skb, int err)
{
	count_skb(sk, skb, err, true);
	return 0;
}

SEC("tp_btf/tcp_retransmit_synack")
int BPF_PROG(us_tcpretrans_synack_btf, const struct sock *sk, const struct request_sock *req)
{
	count_synack(sk);
	return 0;
}

SEC("raw_tp/tcp_retransmit_skb")
int BPF_PROG(us_tcpretrans_skb_raw, const struct sock *sk, const struct sk_buff *skb, int err)
{
	count_skb(sk, skb, err, false);
	return 0;
}

SEC("raw_tp/tcp_retransmit_synack")
int BPF_PROG(us_tcpretrans_synack_raw, const struct sock *sk, const struct request_sock *req)
{
	count_synack(sk);
	return 0;
}
