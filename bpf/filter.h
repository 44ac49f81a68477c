/* SPDX-License-Identifier: MIT */
/* What the eBPF filter and its loader share: the rule key and the modes. */
#ifndef FWB_FILTER_H
#define FWB_FILTER_H

#define FWB_MAX_LOCAL 8		/* the firewall's own addresses, passed to INPUT */

enum fwb_mode {
	FWB_LINEAR = 0,		/* every rule in the array, scanned in order */
	FWB_SET = 1,		/* entries in a hash; aux rules in the array after it */
};

/*
 * What a rule matches: destination address (network order), protocol and
 * destination port (host order; the ICMP type for ICMP). 8 bytes, pad zero,
 * so one 64-bit compare decides a rule.
 */
struct fwb_key {
	__u32 daddr;
	__u16 port;
	__u8 proto;
	__u8 pad;
};

/*
 * The scanned rules, FWB_CHUNK to a map element: one map lookup per chunk,
 * then an unrolled run of 64-bit compares. Unused slots are zero, which no
 * packet's key equals (a key reaching the scan has a nonzero protocol).
 */
#define FWB_CHUNK 32

struct fwb_chunk {
	__u64 keys[FWB_CHUNK];	/* struct fwb_key, as one word */
	__u32 ids[FWB_CHUNK];	/* counter slot of each rule */
};

struct fwb_count {
	__u64 packets;
	__u64 bytes;
};

#endif
