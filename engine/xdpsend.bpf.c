// SPDX-License-Identifier: GPL-2.0
/*
 * The XDP sender's program, run by BPF_PROG_RUN with BPF_F_TEST_XDP_LIVE_FRAMES
 * (xdpsend.c): every run takes a frame from the kernel's page pool, which was
 * filled once with the frame template, writes this packet's flow headers, stamp
 * and checksums into it, and returns XDP_TX, which sends it out of the
 * interface the run names (to its veth peer). Nothing is attached anywhere.
 *
 * It also paces: a frame not yet due, or past the stream's quota or deadline,
 * is dropped at once, so the run's iterations are the wait and the schedule
 * holds to a fraction of a microsecond without a system call per packet
 * (measured here: a run of more than one frame costs 17-25 ms to start and
 * end, so runs must be long). The stamp carries the due time, the lag (send
 * time - due time) goes to a histogram.
 *
 * The frames are those of `send` over AF_PACKET, byte for byte: packet i of
 * stream s is flow n = i * threads + s, whose headers user space computed
 * (frame_fill with a zero stamp) into the flow table at n % flows; here the
 * IPv4 identification (n's low 16 bits) and the stamp are written, and the
 * checksums adjusted for them (RFC 1624).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "common.h"
#include "xdpsend.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);		/* set to the flow count at load */
	__type(key, __u32);
	__type(value, struct xdpsend_hdr);
} flows SEC(".maps");

struct xdpsend_stream streams[XDPSEND_MAX_STREAMS];
__u32 cpu_stream[XDPSEND_MAX_CPUS];	/* CPU -> stream + 1; 0: not a sender's */
const volatile __u32 hdr_len = 42;	/* 42 (IPv4) or 62 (IPv6) */
const volatile __u32 threads = 1;
const volatile __u64 nflows = 1;

static __always_inline __u32 fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return sum;
}

static __always_inline void record_lag(struct xdpsend_stream *st, __u64 lag)
{
	__u32 b = fwb_hist_index(lag);

	if (b < FWB_HIST_BUCKETS)
		st->lag_hist[b]++;
	st->lag_sum += lag;
	if (lag > st->lag_max)
		st->lag_max = lag;
	if (!st->lag_min || lag < st->lag_min)
		st->lag_min = lag ? lag : 1;
}

SEC("xdp")
int fwb_xdpsend(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct xdpsend_stream *st;
	struct xdpsend_hdr *h;
	struct fwb_stamp *stamp;
	__u32 cpu = bpf_get_smp_processor_id(), slot, key;
	__u64 i, n, now, due;

	if (cpu >= XDPSEND_MAX_CPUS)
		return XDP_ABORTED;
	slot = cpu_stream[cpu];
	if (slot == 0 || slot > XDPSEND_MAX_STREAMS)
		return XDP_ABORTED;
	st = &streams[slot - 1];
	if (st->hold)
		return XDP_DROP;
	i = st->sent;
	now = bpf_ktime_get_ns();
	if (i >= st->quota || (st->deadline && now >= st->deadline))
		return XDP_DROP;
	due = st->interval_q16 ? st->t0 + ((i * st->interval_q16) >> 16) : now;
	if (now < due)
		return XDP_DROP;	/* not yet: this iteration is the wait */
	n = i * threads + st->stream;
	if (hdr_len == XDPSEND_HDR4) {
		__u16 *id, *check;
		__u32 sum;

		if (data + XDPSEND_HDR4 + FWB_STAMP_LEN > end)
			return XDP_ABORTED;
		/* Every frame, even with one flow: a page comes back from the
		 * receiving side as it left it there (forwarded: new MACs, TTL). */
		key = (__u32)(n % nflows);
		h = bpf_map_lookup_elem(&flows, &key);
		if (!h)
			return XDP_ABORTED;
		__builtin_memcpy(data, h->bytes, XDPSEND_HDR4);
		/* IPv4: identification at 14 + 4, header checksum at 14 + 10. */
		id = data + 18;
		check = data + 24;
		sum = (__u16)~*check + (__u16)~*id;
		*id = __builtin_bswap16((__u16)n);
		sum += *id;
		*check = ~fold(sum);
		stamp = data + XDPSEND_HDR4;
	} else {
		if (data + XDPSEND_HDR6 + FWB_STAMP_LEN > end)
			return XDP_ABORTED;
		key = (__u32)(n % nflows);
		h = bpf_map_lookup_elem(&flows, &key);
		if (!h)
			return XDP_ABORTED;
		__builtin_memcpy(data, h->bytes, XDPSEND_HDR6);
		stamp = data + XDPSEND_HDR6;
	}
	stamp->cookie = st->cookie;
	stamp->stream = (__u16)st->stream;
	stamp->seq = (__u32)(st->seq_start + i);
	stamp->sched_ns = due;

	if (hdr_len == XDPSEND_HDR6) {
		/* The table's UDP checksum covers a zero stamp: add this one. */
		__u16 *w = (void *)stamp, *check = data + XDPSEND_HDR6 - 2;
		__u32 sum = (__u16)~*check;

#pragma unroll
		for (int k = 0; k < FWB_STAMP_LEN / 2; k++)
			sum += w[k];
		*check = ~fold(sum);
		if (!*check)		/* 0 means none, which IPv6 forbids */
			*check = 0xffff;
	}
	st->sent = i + 1;
	st->last_ns = now;
	if (st->interval_q16)	/* at open throttle every lag is 0: counted by the driver */
		record_lag(st, now - due);
	return XDP_TX;
}

char LICENSE[] SEC("license") = "GPL";
