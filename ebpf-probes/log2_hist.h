/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * The log2 latency buckets shared by the histogram probes (runqlat,
 * biolatency): bucket k counts latencies v with 1us*2^(k-1) < v <= 1us*2^k,
 * so the Prometheus upper bound le = 1e-6 * 2^k is a true upper bound.
 * Mirrored by probes::log2_hist::bucket_of in user space.
 */
#ifndef USESCOPE_LOG2_HIST_H
#define USESCOPE_LOG2_HIST_H

#include "usescope.h"

static __always_inline __u32 floor_log2(__u64 v)
{
	__u32 r = 0, shift;

	shift = (v > 0xFFFFFFFF) << 5; v >>= shift; r |= shift;
	shift = (v > 0xFFFF) << 4; v >>= shift; r |= shift;
	shift = (v > 0xFF) << 3; v >>= shift; r |= shift;
	shift = (v > 0xF) << 2; v >>= shift; r |= shift;
	shift = (v > 0x3) << 1; v >>= shift; r |= shift;
	r |= (v >> 1);
	return r;
}

/* Smallest k with 1us * 2^k >= ns (ceil, so `le` is a true upper bound);
 * LOG2_HIST_OVERFLOW past 2^(LOG2_HIST_BUCKETS-1) us. */
static __always_inline __u32 bucket_of(__u64 ns)
{
	__u64 us = (ns + 999) / 1000;
	__u32 k;

	if (us <= 1)
		return 0;
	k = floor_log2(us - 1) + 1;
	return k < LOG2_HIST_BUCKETS ? k : LOG2_HIST_OVERFLOW;
}

#endif
