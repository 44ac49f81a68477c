// SPDX-License-Identifier: GPL-2.0
/*
 * The earliest drops the kernel offers, for the drop-position experiment
 * (seed 002, extended): every IPv4 UDP packet is dropped and counted, the rest
 * passes. One program for XDP, one for tc (cls_bpf, direct action), the same
 * match as `iptables -t raw -I PREROUTING -p udp -j DROP`. Loaded by iproute2
 * (`ip link set dev X xdpdrv obj drop.bpf.o sec xdp`, `tc filter add dev X
 * ingress bpf da obj drop.bpf.o sec tc`), so it has no loader of its own.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} fwb_drops SEC(".maps");

static __always_inline int is_udp4(void *data, void *end)
{
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);

	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return 0;
	return ip->protocol == IPPROTO_UDP;
}

static __always_inline void count(void)
{
	__u32 k = 0;
	__u64 *n = bpf_map_lookup_elem(&fwb_drops, &k);

	if (n)
		*n += 1;
}

SEC("xdp")
int fwb_xdp_drop(struct xdp_md *ctx)
{
	if (!is_udp4((void *)(long)ctx->data, (void *)(long)ctx->data_end))
		return XDP_PASS;
	count();
	return XDP_DROP;
}

SEC("tc")
int fwb_tc_drop(struct __sk_buff *skb)
{
	if (!is_udp4((void *)(long)skb->data, (void *)(long)skb->data_end))
		return TC_ACT_OK;
	count();
	return TC_ACT_SHOT;
}

char LICENSE[] SEC("license") = "GPL";
