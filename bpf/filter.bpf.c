// SPDX-License-Identifier: GPL-2.0
/*
 * An eBPF firewall over fwbench's policy model, for XDP and for tc (cls_bpf,
 * direct action), on the firewall's client-facing interface. It stands in for
 * the FORWARD chain's client-side rules and nothing else:
 *
 *  - not IPv4, or addressed to the firewall itself (one of local_addrs, or
 *    multicast/broadcast): pass, as INPUT (policy ACCEPT) and ip6tables
 *    (empty) would;
 *  - otherwise the first rule whose (daddr, proto, dport | ICMP type) equals
 *    the packet's accepts it: XDP_PASS / TC_ACT_OK, so the kernel forwards it
 *    as usual; no match drops it (FORWARD policy DROP);
 *  - a packet without the L4 header a rule needs (a non-first fragment, a
 *    truncated header) matches no rule, as with iptables' tcp/udp/icmp
 *    matches.
 *
 * Linear mode scans the `rules` array in order with bpf_loop, FWB_CHUNK rules
 * per element (first match wins, like an iptables chain). Set mode looks the key up in the `set` hash
 * (like ipset hash:ip,port) and then scans `rules`, which then holds only the
 * auxiliary rules. Every rule has a per-CPU counter; the last slot counts
 * drops.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "filter.h"

const volatile __u32 mode = FWB_LINEAR;
const volatile __u32 nr_rules;		/* rules to scan */
const volatile __u32 nr_chunks;		/* elements of `rules` holding them */
const volatile __u32 drop_slot;		/* counter slot of the default drop */
const volatile __u32 local_addrs[FWB_MAX_LOCAL];	/* network order, 0 = none */

/* Sizes are set by the loader before load. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fwb_chunk);
} rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct fwb_key);
	__type(value, __u32);
} set SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fwb_count);
} counters SEC(".maps");

enum { VERDICT_PASS, VERDICT_DROP, VERDICT_FILTER };

struct scan {
	__u64 key;
	__u32 hit;
	int found;
};

static __always_inline __u64 key64(const struct fwb_key *k)
{
	return *(const __u64 *)k;
}

static int scan_chunk(__u32 i, void *ctx)
{
	struct scan *s = ctx;
	struct fwb_chunk *c = bpf_map_lookup_elem(&rules, &i);

	if (!c)
		return 1;
#pragma unroll
	for (int j = 0; j < FWB_CHUNK; j++) {
		if (c->keys[j] == s->key) {
			s->hit = c->ids[j];
			s->found = 1;
			return 1;
		}
	}
	return 0;
}

static __always_inline void count(__u32 slot, __u64 len)
{
	struct fwb_count *c = bpf_map_lookup_elem(&counters, &slot);

	if (c) {
		c->packets++;
		c->bytes += len;
	}
}

static __always_inline int is_local(__u32 daddr)
{
	/* 224.0.0.0/4 multicast and 240.0.0.0/4 incl. 255.255.255.255 */
	if ((bpf_ntohl(daddr) >> 28) >= 14)
		return 1;
#pragma unroll
	for (int i = 0; i < FWB_MAX_LOCAL; i++)
		if (local_addrs[i] && local_addrs[i] == daddr)
			return 1;
	return 0;
}

/* Fill *k from the packet; VERDICT_PASS for what the filter does not judge. */
static __always_inline int parse(void *data, void *end, struct fwb_key *k)
{
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	__u8 *l4;
	__u32 ihl;

	if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return VERDICT_PASS;
	if ((void *)(ip + 1) > end)
		return VERDICT_DROP;	/* claims IPv4, has no header */
	if (is_local(ip->daddr))
		return VERDICT_PASS;
	k->daddr = ip->daddr;
	k->proto = ip->protocol;
	k->port = 0;
	k->pad = 0;
	ihl = ip->ihl * 4;
	if (ihl < sizeof(*ip))
		return VERDICT_DROP;
	if (ip->frag_off & bpf_htons(0x1fff)) {
		k->proto = 0;		/* no L4 header: no rule can match */
		return VERDICT_FILTER;
	}
	l4 = (__u8 *)ip + ihl;
	switch (ip->protocol) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
		if (l4 + 4 > (__u8 *)end)
			k->proto = 0;
		else
			k->port = ((__u16)l4[2] << 8) | l4[3];
		break;
	case IPPROTO_ICMP:
		if (l4 + 2 > (__u8 *)end)
			k->proto = 0;
		else
			k->port = l4[0];
		break;
	default:
		k->proto = 0;
	}
	return VERDICT_FILTER;
}

static __always_inline int classify(void *data, void *end, __u64 len)
{
	struct fwb_key k;
	struct scan s = { 0 };
	int v = parse(data, end, &k);

	if (v != VERDICT_FILTER)
		return v;
	if (k.proto == 0)
		goto drop;
	if (mode == FWB_SET) {
		__u32 *id = bpf_map_lookup_elem(&set, &k);

		if (id) {
			count(*id, len);
			return VERDICT_PASS;
		}
	}
	s.key = key64(&k);
	bpf_loop(nr_chunks, scan_chunk, &s, 0);
	if (s.found) {
		count(s.hit, len);
		return VERDICT_PASS;
	}
drop:
	count(drop_slot, len);
	return VERDICT_DROP;
}

SEC("xdp")
int fwb_xdp_filter(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;

	return classify(data, end, end - data) == VERDICT_DROP ? XDP_DROP : XDP_PASS;
}

SEC("tc")
int fwb_tc_filter(struct __sk_buff *skb)
{
	/* Headers up to a 60-byte IPv4 header plus 4 bytes of L4 in the linear part. */
	if ((long)skb->data_end - (long)skb->data < ETH_HLEN + 64)
		bpf_skb_pull_data(skb, ETH_HLEN + 64);
	return classify((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len)
		== VERDICT_DROP ? TC_ACT_SHOT : TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
