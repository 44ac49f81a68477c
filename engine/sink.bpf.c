// SPDX-License-Identifier: GPL-2.0
/*
 * The kernel-side sink: on the server's interface, count and time-stamp every
 * engine packet with the clock the sender used (bpf_ktime_get_ns() is
 * CLOCK_MONOTONIC) and drop it, so no user-space receiver sits on the
 * measured path. Everything else (ARP, ping, iperf3) passes untouched.
 *
 * Round trips, for hosts on separate clocks: on the server, `reflect_every`
 * (a power of two, 0 = off) sends every packet whose sequence number is a
 * multiple of it back where it came from with XDP_TX, addresses and ports
 * swapped (so every checksum still holds); on the sending host a second sink
 * with `match_source` counts the packets coming back *from* the engine ports,
 * and its latency is the round trip against the sender's own schedule.
 * Sampling by sequence number picks packets by when they were due, never by
 * how late they are, and keeps the return load a small share of the load.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "common.h"

const volatile __u16 engine_port = 9;	/* UDP destination port, set at load */
const volatile __u16 port_count = 1;	/* ports engine_port.. counted */
const volatile __u64 late_ns = 1000000000ULL;
const volatile __u8 match_source = 0;	/* 1: ports are source ports */
/*
 * 1: reflect with a redirect to the receiving interface instead of XDP_TX.
 * veth needs it: its XDP_TX wakes the peer only when the peer has an XDP
 * program (not just NAPI, as GRO gives it), so reflected frames would wait in
 * the peer's ring for unrelated traffic; a redirect's flush always wakes it.
 */
const volatile __u8 reflect_redirect = 0;

/* Written by user space when a trial is armed; 0 = disarmed. */
volatile __u32 cookie;
volatile __u32 reflect_every;	/* likewise: a power of two; 0 = reflect none */

struct fwb_counters counters;
__u64 hist[FWB_HIST_BUCKETS];
__u64 next_seq[FWB_MAX_STREAMS];	/* per stream: highest seen + 1 (common.h) */

/* The time series (common.h), written by user space before arming; 0 = none. */
volatile __u64 series_base_ns;
volatile __u64 series_slot_ns;
struct fwb_span spans[FWB_SERIES_STREAMS];

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, FWB_SERIES_STREAMS * FWB_SERIES_SLOTS);
	__type(key, __u32);
	__type(value, struct fwb_series_slot);
} series SEC(".maps");

/* The duplicate and reorder window of every stream (common.h). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, FWB_WINDOW_SLOTS);
	__type(key, __u32);
	__type(value, struct fwb_slot);
} window SEC(".maps");

static __always_inline struct udphdr *engine_udp(void *data, void *end)
{
	struct ethhdr *eth = data;
	struct udphdr *udp;

	if ((void *)(eth + 1) > end)
		return NULL;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > end || ip->protocol != IPPROTO_UDP ||
		    ip->ihl != 5 || (ip->frag_off & bpf_htons(0x3fff)))
			return NULL;
		udp = (void *)(ip + 1);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > end || ip6->nexthdr != IPPROTO_UDP)
			return NULL;
		udp = (void *)(ip6 + 1);
	} else {
		return NULL;
	}
	if ((void *)(udp + 1) > end)
		return NULL;
	if ((__u16)(bpf_ntohs(match_source ? udp->source : udp->dest) - engine_port) >=
	    port_count)
		return NULL;
	return udp;
}

/* Send a packet engine_udp() accepted back to its source. */
static __always_inline int reflect(struct xdp_md *ctx, void *data, void *end,
				   struct udphdr *udp)
{
	struct ethhdr *eth = data;
	__u8 mac[ETH_ALEN];
	__be16 port;

	if ((void *)(eth + 1) > end || (void *)(udp + 1) > end)
		return XDP_DROP;
	__builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, mac, ETH_ALEN);
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		__be32 a;

		if ((void *)(ip + 1) > end)
			return XDP_DROP;
		a = ip->saddr;
		ip->saddr = ip->daddr;
		ip->daddr = a;
	} else {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		struct in6_addr a;

		if ((void *)(ip6 + 1) > end)
			return XDP_DROP;
		a = ip6->saddr;
		ip6->saddr = ip6->daddr;
		ip6->daddr = a;
	}
	port = udp->source;
	udp->source = udp->dest;
	udp->dest = port;
	if (reflect_redirect)
		return bpf_redirect(ctx->ingress_ifindex, 0);
	return XDP_TX;
}

/* A received packet into its stream's span and series slot (common.h). */
static __always_inline void series_add(__u16 stream, __u64 sched, __u64 now,
				       __u64 lat)
{
	__u64 base = series_base_ns, width = series_slot_ns, k;
	struct fwb_series_slot *slot;
	struct fwb_span *span;
	__u32 key;

	if (!width || stream >= FWB_SERIES_STREAMS)
		return;
	span = &spans[stream];
	span->received++;
	if (!span->first_sched_ns || sched < span->first_sched_ns)
		span->first_sched_ns = sched;
	if (sched > span->last_sched_ns)
		span->last_sched_ns = sched;
	if (span->last_arrival_ns && now - span->last_arrival_ns > span->max_gap_ns) {
		span->max_gap_ns = now - span->last_arrival_ns;
		span->max_gap_end_ns = now;
	}
	span->last_arrival_ns = now;
	if (!span->first_arrival_ns || now < span->first_arrival_ns)
		span->first_arrival_ns = now;
	k = sched >= base ? (sched - base) / width : FWB_SERIES_SLOTS;
	if (k >= FWB_SERIES_SLOTS) {
		span->outside++;
		return;
	}
	key = stream * FWB_SERIES_SLOTS + (__u32)k;
	slot = bpf_map_lookup_elem(&series, &key);
	if (!slot)
		return;
	slot->packets++;
	slot->lat_sum_ns += lat;
	if (lat > slot->lat_max_ns)
		slot->lat_max_ns = lat;
}

SEC("xdp")
int fwb_sink(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct udphdr *udp = engine_udp(data, end);
	struct fwb_stamp st;
	struct fwb_slot *slot;
	__u64 now, lat, ext, *next;
	__u32 key, idx, every, armed = cookie;

	if (!udp)
		return XDP_PASS;
	now = bpf_ktime_get_ns();
	if ((void *)(udp + 1) + FWB_STAMP_LEN > end) {
		__sync_fetch_and_add(&counters.malformed, 1);
		return XDP_DROP;
	}
	__builtin_memcpy(&st, udp + 1, FWB_STAMP_LEN);
	if (!armed || st.cookie != armed) {
		__sync_fetch_and_add(&counters.stale, 1);
		return XDP_DROP;
	}
	if (st.stream >= FWB_MAX_STREAMS) {
		__sync_fetch_and_add(&counters.malformed, 1);
		return XDP_DROP;
	}

	/* One receive queue: packets of a trial arrive here one at a time. */
	next = &next_seq[st.stream & (FWB_MAX_STREAMS - 1)];
	if (fwb_seq_extend(*next, st.seq, &ext)) {
		__sync_fetch_and_add(&counters.out_of_window, 1);
		return XDP_DROP;
	}
	key = fwb_slot_index(st.stream, ext);
	slot = bpf_map_lookup_elem(&window, &key);
	if (!slot)
		return XDP_DROP;
	switch (fwb_seq_mark(slot, next, ext)) {
	case FWB_SEQ_DUPLICATE:
		__sync_fetch_and_add(&counters.duplicated, 1);
		return XDP_DROP;
	case FWB_SEQ_OUT_OF_WINDOW:
		__sync_fetch_and_add(&counters.out_of_window, 1);
		return XDP_DROP;
	case FWB_SEQ_REORDERED:
		__sync_fetch_and_add(&counters.reordered, 1);
		break;
	default:
		break;
	}

	if (now < st.sched_ns) {
		__sync_fetch_and_add(&counters.early, 1);
		lat = 0;
	} else {
		lat = now - st.sched_ns;
	}
	if (lat > late_ns)
		__sync_fetch_and_add(&counters.late, 1);
	idx = fwb_hist_index(lat);
	if (idx < FWB_HIST_BUCKETS)
		__sync_fetch_and_add(&hist[idx], 1);
	__sync_fetch_and_add(&counters.received, 1);
	__sync_fetch_and_add(&counters.lat_sum_ns, lat);
	__sync_fetch_and_add(&counters.bytes, (__u64)(end - data));
	if (!counters.first_ns)
		counters.first_ns = now;
	counters.last_ns = now;
	if (lat > counters.lat_max_ns)
		counters.lat_max_ns = lat;
	if (!counters.lat_min_ns || lat < counters.lat_min_ns)
		counters.lat_min_ns = lat ? lat : 1;
	series_add(st.stream, st.sched_ns, now, lat);
	every = reflect_every;
	if (every && !(ext & (every - 1))) {
		__sync_fetch_and_add(&counters.reflected, 1);
		return reflect(ctx, data, end, udp);
	}
	return XDP_DROP;
}

char LICENSE[] SEC("license") = "GPL";
