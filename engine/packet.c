// SPDX-License-Identifier: MIT
/*
 * Building the sender's frames: a template per run, then per frame the flow,
 * the stamp and the checksums. Over IPv4 the UDP checksum is 0: none
 * (RFC 768); over IPv6 it is required (RFC 8200), so it is computed per frame
 * from the headers, the stamp and the text's sum computed once.
 */
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <netinet/ip.h>
#include <netinet/ip6.h>
#include <netinet/udp.h>
#include <string.h>
#include "packet.h"

/*
 * The text starts at an even offset from the UDP header, so its 16-bit words
 * line up with the checksum's and its sum can be added as computed alone.
 */
_Static_assert((sizeof(struct udphdr) + FWB_STAMP_LEN) % 2 == 0,
	       "payload text must start on a 16-bit boundary");

uint16_t csum_fold(uint32_t sum)
{
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

uint32_t csum_add(uint32_t sum, const void *buf, size_t len)
{
	const uint16_t *p = buf;

	for (; len > 1; len -= 2)
		sum += *p++;
	if (len)
		sum += *(const uint8_t *)p;
	return sum;
}

size_t frame_l3_len(int family)
{
	return family == AF_INET ? sizeof(struct iphdr) :
				   sizeof(struct ip6_hdr);
}

size_t frame_min_size(int family)
{
	size_t min = 4 + ETH_HLEN + frame_l3_len(family) +
		     sizeof(struct udphdr) + FWB_STAMP_LEN;

	return min < 64 ? 64 : min;
}

size_t frame_payload_len(const struct frame_spec *f)
{
	return f->wire_len - ETH_HLEN - frame_l3_len(f->src.family) -
	       sizeof(struct udphdr);
}

void frame_prepare(struct frame_spec *f)
{
	f->text_sum = f->text_len ? csum_add(0, f->text, f->text_len) : 0;
}

void frame_template(const struct frame_spec *f, uint8_t *frame)
{
	struct ethhdr *eth = (void *)frame;
	struct udphdr *udp = (void *)(frame + ETH_HLEN +
				      frame_l3_len(f->src.family));
	size_t ulen = sizeof(*udp) + frame_payload_len(f);

	memset(frame, 0, f->wire_len);
	memcpy(eth->h_dest, f->dst_mac, 6);
	memcpy(eth->h_source, f->src_mac, 6);
	if (f->src.family == AF_INET) {
		struct iphdr *ip = (void *)(frame + ETH_HLEN);

		eth->h_proto = htons(ETH_P_IP);
		ip->version = 4;
		ip->ihl = 5;
		ip->tot_len = htons(sizeof(*ip) + ulen);
		ip->frag_off = htons(IP_DF);
		ip->ttl = 64;
		ip->protocol = IPPROTO_UDP;
	} else {
		struct ip6_hdr *ip6 = (void *)(frame + ETH_HLEN);

		eth->h_proto = htons(ETH_P_IPV6);
		ip6->ip6_flow = htonl(6U << 28);
		ip6->ip6_plen = htons(ulen);
		ip6->ip6_nxt = IPPROTO_UDP;
		ip6->ip6_hlim = 64;
	}
	udp->len = htons(ulen);
	if (f->text_len)
		memcpy((uint8_t *)(udp + 1) + FWB_STAMP_LEN, f->text,
		       f->text_len);
}

/*
 * base + off in the low 32 bits (the span was checked), written as an address
 * of the frame's family.
 */
static void set_addr(const struct bench_addr *base, uint64_t off, int family,
		     void *dst)
{
	if (family == AF_INET) {
		uint32_t v = htonl(ntohl(base->v4.s_addr) + (uint32_t)off);

		memcpy(dst, &v, 4);
	} else {
		struct in6_addr a = base->v6;
		uint32_t low;

		memcpy(&low, &a.s6_addr[12], 4);
		low = htonl(ntohl(low) + (uint32_t)off);
		memcpy(&a.s6_addr[12], &low, 4);
		memcpy(dst, &a, 16);
	}
}

/*
 * The payload after the stamp is the same in every frame (the text, then
 * zeros), so the IPv6 checksum needs only the pseudo-header, the UDP header,
 * the stamp and the text's sum.
 */
void frame_fill(const struct frame_spec *f, uint8_t *frame, uint64_t n,
		const struct fwb_stamp *st)
{
	uint64_t si = n % f->src_count;
	uint64_t pi = (n / f->src_count) % f->sport_count;
	uint64_t di = (n / f->src_count / f->sport_count) % f->dst_count;
	struct udphdr *udp = (void *)(frame + ETH_HLEN +
				      frame_l3_len(f->src.family));

	udp->source = htons(f->sport + pi);
	udp->dest = htons(f->dport);
	udp->check = 0;
	memcpy(udp + 1, st, FWB_STAMP_LEN);
	if (f->src.family == AF_INET) {
		struct iphdr *ip = (void *)(frame + ETH_HLEN);

		set_addr(&f->src, si, AF_INET, &ip->saddr);
		set_addr(&f->dst, di, AF_INET, &ip->daddr);
		ip->id = htons((uint16_t)n);
		ip->check = 0;
		ip->check = csum_fold(csum_add(0, ip, sizeof(*ip)));
	} else {
		struct ip6_hdr *ip6 = (void *)(frame + ETH_HLEN);
		uint32_t sum = 0, len = ntohs(udp->len);

		set_addr(&f->src, si, AF_INET6, &ip6->ip6_src);
		set_addr(&f->dst, di, AF_INET6, &ip6->ip6_dst);
		sum = csum_add(sum, &ip6->ip6_src, 32);
		sum += htons(len >> 16) + htons(len & 0xffff);
		sum += htons(IPPROTO_UDP);
		sum = csum_add(sum, udp, sizeof(*udp) + FWB_STAMP_LEN);
		sum += f->text_sum;
		udp->check = csum_fold(sum);
		if (!udp->check)	/* 0 means none, which IPv6 forbids */
			udp->check = 0xffff;
	}
}
