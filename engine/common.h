/* SPDX-License-Identifier: MIT */
/*
 * What the sender, the user-space receiver and the XDP sink agree on: the
 * stamp every packet carries, the latency histogram's buckets and the
 * receiver's counters. Included by BPF and user-space code alike, so it uses
 * only fixed-width types and no loops.
 */
#ifndef FWB_COMMON_H
#define FWB_COMMON_H

#ifdef __BPF__
#include <linux/types.h>
#else
#include <linux/types.h>
#include <stdint.h>
#endif

/*
 * The stamp: the first 18 bytes of UDP payload, little-endian. 18 bytes is
 * all a 64-byte frame has over IPv4 (64 - 4 FCS - 14 Ethernet - 20 IP - 8 UDP).
 * The cookie names the trial, so packets still in flight from an earlier trial
 * are counted apart; the stream is the sender thread, and sequence numbers
 * run per stream; sched_ns is the CLOCK_MONOTONIC time the packet was due.
 */
struct fwb_stamp {
	__u32 cookie;
	__u16 stream;
	__u32 seq;
	__u64 sched_ns;
} __attribute__((packed));

#define FWB_STAMP_LEN 18
#define FWB_MAX_STREAMS 64

/*
 * Log-linear histogram (HDR style): values below 2^SUB_BITS ns are exact;
 * above, every power of two is split into 2^SUB_BITS buckets, so a bucket is
 * at most 1/128 = 0.78 % of its lower edge wide (reported at its midpoint:
 * within 0.4 %). The top bucket collects everything from 2^43 ns (2.4 h) up.
 */
#define FWB_SUB_BITS 7
#define FWB_SUB_COUNT (1U << FWB_SUB_BITS)
#define FWB_MAX_EXP 42
#define FWB_HIST_BUCKETS ((FWB_MAX_EXP - FWB_SUB_BITS + 2) * FWB_SUB_COUNT)

/* floor(log2(v)) for v > 0, by halving, without loops or clz (BPF has none). */
static inline __u32 fwb_log2(__u64 v)
{
	__u32 r = 0;

	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) { r += 1; }
	return r;
}

static inline __u32 fwb_hist_index(__u64 v)
{
	__u32 e;

	if (v < FWB_SUB_COUNT)
		return (__u32)v;
	e = fwb_log2(v);
	if (e > FWB_MAX_EXP)
		return FWB_HIST_BUCKETS - 1;
	return (e - FWB_SUB_BITS + 1) * FWB_SUB_COUNT +
	       (__u32)((v >> (e - FWB_SUB_BITS)) - FWB_SUB_COUNT);
}

/*
 * A receiver's counters for the armed trial. `received` counts distinct
 * packets with the armed cookie; copies go to `duplicated`, packets of other
 * trials to `stale`, UDP to the engine port without a valid stamp to `malformed`.
 */
struct fwb_counters {
	__u64 received;
	__u64 duplicated;
	__u64 reordered;
	__u64 late;
	__u64 stale;
	__u64 malformed;
	__u64 early;		/* arrived before its scheduled time: clock trouble */
	__u64 lat_sum_ns;
	__u64 lat_min_ns;
	__u64 lat_max_ns;
	__u64 first_ns;		/* arrival time of the first and last packet */
	__u64 last_ns;
	__u64 bytes;		/* frame bytes (Ethernet, no FCS) of received packets */
};

/* The duplicate detector: one bit per (stream, seq), wrapping. 2^27 packets. */
#define FWB_SEEN_WORDS (1U << 21)
#define FWB_SEEN_MASK ((FWB_SEEN_WORDS * 64ULL) - 1)

static inline __u64 fwb_seen_bit(__u32 stream, __u32 seq)
{
	return ((__u64)seq * FWB_MAX_STREAMS + stream) & FWB_SEEN_MASK;
}

#endif
