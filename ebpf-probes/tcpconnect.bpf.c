// SPDX-License-Identifier: GPL-2.0-only
/*
 * tcpconnect: connect() calls that failed for want of a local port.
 *
 * tcp_v4_connect and tcp_v6_connect move the socket to SYN_SENT before
 * they search ip_local_port_range for a free port (inet_hash_connect);
 * when the search finds none they return EADDRNOTAVAIL and move the
 * socket back to CLOSE. Only after a port was found do they pick the
 * initial sequence number (write_seq, never 0 after that: tcp_disconnect
 * keeps it non-zero too) and send the SYN. Every other way out of
 * SYN_SENT (refused, timed out, closed by the application) comes later,
 * with write_seq set; the local port tells nothing, because the move to
 * CLOSE releases an autobound port before the tracepoint fires. So a
 * SYN_SENT -> CLOSE transition of a TCP socket whose write_seq is 0
 * (sock:inet_sock_set_state) is one connect() that failed in the port
 * search, i.e. with EADDRNOTAVAIL. Not counted: a connect() again on a
 * socket that connected before (its write_seq is kept), and one whose
 * route fails for the new port, which is counted (docs/probes.md).
 *
 * syscalls:sys_exit_connect would see the errno itself, but it exists
 * only with CONFIG_FTRACE_SYSCALLS, cannot be attached as a raw
 * tracepoint, and fires for every connect(); inet_sock_set_state is a
 * real tracepoint on every kernel since 4.16.
 *
 * The program runs on every state change of every TCP, SCTP and MPTCP
 * socket and returns after two comparisons for all but SYN_SENT -> CLOSE.
 * One per-CPU array entry; no nesting on one CPU.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "usescope.h"

char LICENSE[] SEC("license") = "GPL";

/* The kernel's TCP state numbers and IPPROTO_TCP: stable ABI values. */
#define TCP_SYN_SENT_STATE 2
#define TCP_CLOSE_STATE 7
#define IPPROTO_TCP_NUM 6

/* --probe.tcpconnect.netns: count only the network namespace with this
 * inode number (0: every namespace). */
const volatile u32 only_netns = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct tcpconnect_counts);
} us_tcpconnect SEC(".maps");

static __always_inline void count(const struct sock *sk, int oldstate, int newstate)
{
	struct tcpconnect_counts *c;
	u32 zero = 0;

	if (oldstate != TCP_SYN_SENT_STATE || newstate != TCP_CLOSE_STATE)
		return;
	if (BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP_NUM ||
	    BPF_CORE_READ((const struct tcp_sock *)sk, write_seq))
		return;
	if (only_netns && BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum) != only_netns)
		return;
	c = bpf_map_lookup_elem(&us_tcpconnect, &zero);
	if (c)
		c->no_port++;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(us_tcpconnect_btf, const struct sock *sk, const int oldstate, const int newstate)
{
	count(sk, oldstate, newstate);
	return 0;
}

SEC("raw_tp/inet_sock_set_state")
int BPF_PROG(us_tcpconnect_raw, const struct sock *sk, const int oldstate, const int newstate)
{
	count(sk, oldstate, newstate);
	return 0;
}
