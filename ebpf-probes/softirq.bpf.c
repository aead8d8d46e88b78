// SPDX-License-Identifier: GPL-2.0-only
/*
 * Softirq time and latency, per CPU and vector: time spent in each
 * vector's handler (softirq_entry to softirq_exit), how often it ran, and
 * the latency from the first raise (softirq_raise) to the handler's entry.
 *
 * All of it is per-CPU, without a shared map or atomics: a softirq is
 * raised on the CPU that will run it, and handlers do not nest on one CPU.
 * A raise that is already pending is not timed again: the latency is that
 * of the oldest raise the entry serves. Both tp_btf and raw_tp copies; the
 * argument is a plain number either way.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "usescope.h"
#include "log2_hist.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct softirq_counts);
} us_softirq SEC(".maps");

static __always_inline struct softirq_counts *counts(void)
{
	u32 zero = 0;

	return bpf_map_lookup_elem(&us_softirq, &zero);
}

static __always_inline void on_raise(u32 vec)
{
	struct softirq_counts *c = counts();

	if (!c || vec >= SOFTIRQ_VECS)
		return;
	if (!c->raised_at[vec])
		c->raised_at[vec] = bpf_ktime_get_ns();
}

static __always_inline void on_entry(u32 vec)
{
	struct softirq_counts *c = counts();
	u64 now = bpf_ktime_get_ns(), raised, delta;

	if (!c || vec >= SOFTIRQ_VECS)
		return;
	c->entries[vec]++;
	c->entered_at[vec] = now;
	raised = c->raised_at[vec];
	if (!raised)
		return;
	c->raised_at[vec] = 0;
	delta = now - raised;
	if ((s64)delta < 0)
		return;
	c->latency_slots[vec][bucket_of(delta)]++;
	c->latency_sum_ns[vec] += delta;
}

static __always_inline void on_exit(u32 vec)
{
	struct softirq_counts *c = counts();
	u64 entered;

	if (!c || vec >= SOFTIRQ_VECS)
		return;
	entered = c->entered_at[vec];
	if (!entered) /* entered before attach */
		return;
	c->entered_at[vec] = 0;
	c->time_ns[vec] += bpf_ktime_get_ns() - entered;
}

SEC("tp_btf/softirq_raise")
int BPF_PROG(us_si_raise_btf, unsigned int vec) { on_raise(vec); return 0; }

SEC("tp_btf/softirq_entry")
int BPF_PROG(us_si_entry_btf, unsigned int vec) { on_entry(vec); return 0; }

SEC("tp_btf/softirq_exit")
int BPF_PROG(us_si_exit_btf, unsigned int vec) { on_exit(vec); return 0; }

SEC("raw_tp/softirq_raise")
int BPF_PROG(us_si_raise_raw, unsigned int vec) { on_raise(vec); return 0; }

SEC("raw_tp/softirq_entry")
int BPF_PROG(us_si_entry_raw, unsigned int vec) { on_entry(vec); return 0; }

SEC("raw_tp/softirq_exit")
int BPF_PROG(us_si_exit_raw, unsigned int vec) { on_exit(vec); return 0; }
