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
 * trials to `stale`, UDP to the engine port without a valid stamp to
 * `malformed`, and packets too far behind their stream to tell a copy from a
 * first arrival to `out_of_window` (see below): neither received nor copies.
 */
struct fwb_counters {
	__u64 received;
	__u64 duplicated;
	__u64 reordered;
	__u64 late;
	__u64 stale;
	__u64 malformed;
	__u64 early;		/* arrived before its scheduled time: clock trouble */
	__u64 out_of_window;
	__u64 lat_sum_ns;
	__u64 lat_min_ns;
	__u64 lat_max_ns;
	__u64 first_ns;		/* arrival time of the first and last packet */
	__u64 last_ns;
	__u64 bytes;		/* frame bytes (Ethernet, no FCS) of received packets */
	__u64 reflected;	/* sent back to their source (the sink's reflect mode) */
};

/*
 * The sink's time series (the update experiment's view of a trial): for each of
 * the first FWB_SERIES_STREAMS streams, per slot of scheduled send time
 * (slot k holds packets due in [base + k * slot_ns, base + (k + 1) * slot_ns)),
 * the distinct packets received, their latency sum and maximum. Indexed by when
 * a packet was due, not when it arrived, so a slot short of what was sent in it
 * is that slot's loss. Packets due before the base or past the last slot are
 * counted in the stream's span only.
 */
#define FWB_SERIES_STREAMS 2
#define FWB_SERIES_SLOTS 32768

struct fwb_series_slot {
	__u64 packets;
	__u64 lat_sum_ns;
	__u64 lat_max_ns;
};

/*
 * Per series stream, over the whole armed trial: the earliest and latest
 * scheduled time among packets received (when a flow began and stopped
 * passing), the earliest arrival (a bound on when it began), and the longest
 * gap between two arrivals, with the arrival that ended it.
 */
struct fwb_span {
	__u64 received;
	__u64 first_sched_ns;
	__u64 last_sched_ns;
	__u64 last_arrival_ns;
	__u64 max_gap_ns;
	__u64 max_gap_end_ns;
	__u64 outside;		/* due before the base or past the last slot */
	__u64 first_arrival_ns;	/* the earliest arrival (the sink's clock) */
};

/*
 * Duplicates and reordering, for any trial length and rate. Per stream, a
 * window of the FWB_WINDOW_WORDS 64-bit words of sequence numbers that ends
 * at the word of the highest number seen (FWB_WINDOW numbers, less up to 63
 * of the newest word), kept in a ring of slots: a slot holds one word's bits
 * and a tag naming that word, and is cleared when a newer word claims it.
 * Memory and work per packet stay constant however long the trial runs. A
 * packet behind the window cannot be told from a copy: it is counted as out
 * of window, never guessed.
 *
 * The stamp carries 32 bits of sequence number; receivers extend it to 64
 * bits as RTP does, to the value nearest the stream's highest, so a stream
 * may run past 2^32 packets while reordering stays far below 2^31.
 */
#define FWB_WINDOW_WORD_BITS 12
#define FWB_WINDOW_WORDS (1U << FWB_WINDOW_WORD_BITS)
#define FWB_WINDOW (FWB_WINDOW_WORDS * 64ULL)	/* 262,144 */
#define FWB_WINDOW_SLOTS (FWB_MAX_STREAMS * FWB_WINDOW_WORDS)

struct fwb_slot {
	__u64 tag;	/* 1 + the word (sequence number / 64) held; 0 = none */
	__u64 bits;
};

enum fwb_seq_class {
	FWB_SEQ_NEW,		/* first copy, the stream's highest so far */
	FWB_SEQ_REORDERED,	/* first copy, behind the stream's highest */
	FWB_SEQ_DUPLICATE,
	FWB_SEQ_OUT_OF_WINDOW,	/* too far behind to tell */
};

/*
 * The 64-bit sequence number of wire number `seq` on a stream whose highest
 * so far is `next` - 1 (`next` 0: nothing yet). Returns 0, or -1 when the
 * nearest value would lie before sequence number 0.
 */
static inline int fwb_seq_extend(__u64 next, __u32 seq, __u64 *ext)
{
	__u64 ref;
	__s32 d;

	if (!next) {
		*ext = seq;
		return 0;
	}
	ref = next - 1;
	d = (__s32)(seq - (__u32)ref);
	if (d < 0 && (__u64)(-(__s64)d) > ref)
		return -1;
	*ext = ref + (__s64)d;
	return 0;
}

/* Which of the FWB_WINDOW_SLOTS slots holds `ext` of `stream`. */
static inline __u32 fwb_slot_index(__u32 stream, __u64 ext)
{
	return (stream & (FWB_MAX_STREAMS - 1)) * FWB_WINDOW_WORDS +
	       (__u32)((ext >> 6) & (FWB_WINDOW_WORDS - 1));
}

/*
 * Classify `ext` on a stream (its `next`, and the slot fwb_slot_index()
 * names) and record it. Callers serialise per stream: one receive queue, or
 * a lock.
 */
static inline enum fwb_seq_class fwb_seq_mark(struct fwb_slot *slot,
					      __u64 *next, __u64 ext)
{
	__u64 word = ext >> 6, bit = 1ULL << (ext & 63);

	if (*next && word + FWB_WINDOW_WORDS <= (*next - 1) >> 6)
		return FWB_SEQ_OUT_OF_WINDOW;
	if (slot->tag != word + 1) {
		if (slot->tag > word + 1)	/* claimed by a newer word */
			return FWB_SEQ_OUT_OF_WINDOW;
		slot->tag = word + 1;
		slot->bits = 0;
	}
	if (slot->bits & bit)
		return FWB_SEQ_DUPLICATE;
	slot->bits |= bit;
	if (ext < *next)
		return FWB_SEQ_REORDERED;
	*next = ext + 1;
	return FWB_SEQ_NEW;
}

#endif
