// SPDX-License-Identifier: MIT
/*
 * fwbench-bpf: load the eBPF firewall (filter.bpf.c) onto an interface, read
 * back what the kernel holds, or run packets through it without traffic.
 *
 *   fwbench-bpf load --hook xdp|tc --mode linear|set --ifname IF
 *                    [--local ADDR]... [--xdp-mode native|generic]
 *                    [--room N]  < RULES
 *   fwbench-bpf dump --hook xdp|tc --ifname IF
 *   fwbench-bpf update --hook xdp|tc --ifname IF  < CHANGES
 *   fwbench-bpf test-run --hook xdp|tc --mode linear|set --rules FILE
 *                    [--local ADDR]...  < PACKETS (one hex frame per line)
 *
 * RULES has one line per rule, in order: `set|rule DADDR PROTO PORT` (PROTO as
 * a number, PORT the ICMP type for ICMP). Each line gets the next counter
 * slot; `set` lines go into the hash (set mode only), `rule` lines into the
 * array scanned in order. The attachment outlives this process; the kernel
 * keeps program and maps while they are attached, so `dump` finds them again
 * from the interface, with no pinning and nothing left behind once detached.
 * `--room N` sizes the set and the counters for N more set elements than the
 * rules hold, so that `update` can add them in place: CHANGES has one line per
 * element, `add DADDR PROTO PORT SLOT` (SLOT: its counter slot, past the drop
 * slot) or `del DADDR PROTO PORT`, applied in order, each atomic for the packets
 * that meet the set (one map update).
 * Output is one JSON line; errors are one line on stderr, exit 2 for bad
 * input, 1 when the kernel refuses.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <linux/if_link.h>
#include <linux/pkt_cls.h>
#include <net/if.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "filter.h"
#include "filter.skel.h"
#include "json.h"
#include "util.h"

#define TC_HANDLE 1
#define TC_PRIO 1

struct line {
	int in_set;
	struct fwb_key key;
};

struct opts {
	const char *hook, *mode, *ifname, *rules_path;
	__u32 local[FWB_MAX_LOCAL];
	int nlocal;
	__u32 xdp_flags;
	__u32 room;		/* set elements `update` may add */
};

static const struct option long_opts[] = {
	{ "hook", required_argument, NULL, 'H' },
	{ "mode", required_argument, NULL, 'm' },
	{ "ifname", required_argument, NULL, 'i' },
	{ "local", required_argument, NULL, 'l' },
	{ "rules", required_argument, NULL, 'r' },
	{ "xdp-mode", required_argument, NULL, 'x' },
	{ "room", required_argument, NULL, 'R' },
	{ 0 }
};

static const char usage[] =
"usage: fwbench-bpf load --hook xdp|tc --mode linear|set --ifname IF [--local ADDR]...\n"
"                        [--xdp-mode native|generic] [--room N] < RULES\n"
"       fwbench-bpf dump --hook xdp|tc --ifname IF\n"
"       fwbench-bpf update --hook xdp|tc --ifname IF < CHANGES\n"
"       fwbench-bpf test-run --hook xdp|tc --mode linear|set --rules FILE\n"
"                        [--local ADDR]... < PACKETS\n";

static int is_xdp(const struct opts *o)
{
	return strcmp(o->hook, "xdp") == 0;
}

static void parse_opts(int argc, char **argv, struct opts *o)
{
	int c;

	memset(o, 0, sizeof(*o));
	o->xdp_flags = XDP_FLAGS_DRV_MODE;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "", long_opts, NULL)) != -1) {
		switch (c) {
		case 'H': o->hook = optarg; break;
		case 'm': o->mode = optarg; break;
		case 'i': o->ifname = optarg; break;
		case 'r': o->rules_path = optarg; break;
		case 'l':
			if (o->nlocal == FWB_MAX_LOCAL)
				usage_error("at most %d --local addresses", FWB_MAX_LOCAL);
			if (inet_pton(AF_INET, optarg, &o->local[o->nlocal++]) != 1)
				usage_error("--local: not an IPv4 address: %s", optarg);
			break;
		case 'R':
			o->room = parse_u64("room", optarg, 0, 1 << 24);
			break;
		case 'x':
			if (strcmp(optarg, "native") == 0)
				o->xdp_flags = XDP_FLAGS_DRV_MODE;
			else if (strcmp(optarg, "generic") == 0)
				o->xdp_flags = XDP_FLAGS_SKB_MODE;
			else
				usage_error("--xdp-mode: native or generic, not %s", optarg);
			break;
		default:
			usage_error("unknown or incomplete option %s", argv[optind - 1]);
		}
	}
	if (optind != argc)
		usage_error("unexpected argument %s", argv[optind]);
	if (!o->hook || (strcmp(o->hook, "xdp") && strcmp(o->hook, "tc")))
		usage_error("--hook: xdp or tc");
	if (o->mode && strcmp(o->mode, "linear") && strcmp(o->mode, "set"))
		usage_error("--mode: linear or set, not %s", o->mode);
}

static double ms_since(uint64_t t0)
{
	return (now_ns() - t0) / 1e6;
}

/* Read `set|rule DADDR PROTO PORT` lines; NULL when out of memory. */
static struct line *read_rules(FILE *f, size_t *n)
{
	size_t cap = 1024, len = 0, lineno = 0;
	struct line *v = malloc(cap * sizeof(*v)), *more;
	char buf[256], kind[8], addr[64];
	unsigned proto, port;

	if (!v)
		goto out;
	while (fgets(buf, sizeof(buf), f)) {
		lineno++;
		if (buf[0] == '\n' || buf[0] == '#')
			continue;
		if (sscanf(buf, "%7s %63s %u %u", kind, addr, &proto,
			   &port) != 4 ||
		    (strcmp(kind, "set") && strcmp(kind, "rule")) ||
		    proto > 255 || port > 65535)
			usage_error("rules line %zu: expected "
				    "`set|rule DADDR PROTO PORT`", lineno);
		if (len == cap) {
			more = realloc(v, 2 * cap * sizeof(*v));
			if (!more)
				goto out;
			v = more;
			cap *= 2;
		}
		memset(&v[len], 0, sizeof(v[len]));
		v[len].in_set = kind[0] == 's';
		if (inet_pton(AF_INET, addr, &v[len].key.daddr) != 1)
			usage_error("rules line %zu: not an IPv4 address: %s",
				    lineno, addr);
		v[len].key.proto = proto;
		v[len].key.port = port;
		len++;
	}
	*n = len;
	return v;
out:
	note("out of memory after %zu rules", len);
	free(v);
	return NULL;
}

static int quiet_libbpf(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	return level == LIBBPF_WARN ? vfprintf(stderr, fmt, ap) : 0;
}

struct loaded {
	struct fwb_filter *skel;
	struct bpf_program *prog;
	size_t n_rules, n_chunks, n_set, slots;
	double open_ms, load_ms, fill_ms;
};

/* The lines into the maps: `set` lines into the hash, the rest in chunks. */
static int fill_maps(const struct loaded *L, const struct line *lines,
		     size_t n)
{
	int rules_fd = bpf_map__fd(L->skel->maps.rules);
	int set_fd = bpf_map__fd(L->skel->maps.set);
	struct fwb_chunk chunk;
	__u32 idx = 0, slot;
	int err = 0;

	memset(&chunk, 0, sizeof(chunk));
	for (slot = 0; slot < n; slot++) {
		if (lines[slot].in_set) {
			/* First occurrence wins, as in a chain. */
			err = bpf_map_update_elem(set_fd, &lines[slot].key,
						  &slot, BPF_NOEXIST);
			if (err && err != -EEXIST) {
				note("set update: %s", strerror(-err));
				goto out;
			}
			continue;
		}
		memcpy(&chunk.keys[idx % FWB_CHUNK], &lines[slot].key, 8);
		chunk.ids[idx % FWB_CHUNK] = slot;
		if (++idx % FWB_CHUNK == 0 || idx == L->n_rules) {
			__u32 c = (idx - 1) / FWB_CHUNK;

			err = bpf_map_update_elem(rules_fd, &c, &chunk,
						  BPF_ANY);
			if (err) {
				note("rules update: %s", strerror(-err));
				goto out;
			}
			memset(&chunk, 0, sizeof(chunk));
		}
	}
	err = 0;
out:
	return err;
}

/*
 * Open, size, load into the kernel and fill the maps; nothing attached yet.
 * On failure L->skel is NULL, and the reason on stderr.
 */
static int load_filter(const struct opts *o, const struct line *lines,
		       size_t n, struct loaded *L)
{
	int set_mode = strcmp(o->mode, "set") == 0;
	struct fwb_filter *skel;
	uint64_t t0;
	size_t i;
	int err = -1;

	memset(L, 0, sizeof(*L));
	for (i = 0; i < n; i++) {
		if (lines[i].in_set && !set_mode)
			usage_error("rules line %zu: `set` needs --mode set",
				    i + 1);
		if (lines[i].in_set)
			L->n_set++;
		else
			L->n_rules++;
	}
	/* One per line, the default drop's, and one per element of room. */
	L->slots = n + 1 + o->room;
	L->n_chunks = (L->n_rules + FWB_CHUNK - 1) / FWB_CHUNK;

	t0 = now_ns();
	libbpf_set_print(quiet_libbpf);
	L->skel = fwb_filter__open();
	if (!L->skel) {
		note("cannot open the filter program: %s", strerror(errno));
		goto out;
	}
	skel = L->skel;
	skel->rodata->mode = set_mode ? FWB_SET : FWB_LINEAR;
	skel->rodata->nr_rules = L->n_rules;
	skel->rodata->nr_chunks = L->n_chunks;
	skel->rodata->drop_slot = n;
	for (i = 0; i < (size_t)o->nlocal; i++)
		skel->rodata->local_addrs[i] = o->local[i];
	bpf_map__set_max_entries(skel->maps.rules,
				 L->n_chunks ? L->n_chunks : 1);
	bpf_map__set_max_entries(skel->maps.set,
				 L->n_set + o->room ? L->n_set + o->room : 1);
	bpf_map__set_max_entries(skel->maps.counters, L->slots);
	L->prog = is_xdp(o) ? skel->progs.fwb_xdp_filter :
			      skel->progs.fwb_tc_filter;
	bpf_program__set_autoload(is_xdp(o) ? skel->progs.fwb_tc_filter :
					      skel->progs.fwb_xdp_filter,
				  false);
	L->open_ms = ms_since(t0);

	t0 = now_ns();
	err = fwb_filter__load(skel);
	if (err) {
		note("the kernel refused the %s filter: %s", o->hook,
		     strerror(-err));
		goto out;
	}
	L->load_ms = ms_since(t0);

	t0 = now_ns();
	err = fill_maps(L, lines, n);
	if (err)
		goto out;
	L->fill_ms = ms_since(t0);
out:
	if (err) {
		fwb_filter__destroy(L->skel);
		L->skel = NULL;
	}
	return err;
}

static void json_loaded(struct json *j, const struct loaded *L)
{
	struct bpf_prog_info info = { 0 };
	__u32 len = sizeof(info);

	bpf_obj_get_info_by_fd(bpf_program__fd(L->prog), &info, &len);
	json_u64(j, "prog_id", info.id);
	json_u64(j, "rules", L->n_rules);
	json_u64(j, "set", L->n_set);
	json_num(j, "open_ms", L->open_ms);
	json_num(j, "load_ms", L->load_ms);
	json_num(j, "fill_ms", L->fill_ms);
}

static int cmd_load(int argc, char **argv)
{
	struct opts o;
	struct loaded L = { 0 };
	struct line *lines = NULL;
	struct json j;
	uint64_t t0;
	size_t n;
	int ifindex, err, ret = EXIT_RUNTIME;

	parse_opts(argc, argv, &o);
	if (!o.mode || !o.ifname)
		usage_error("load needs --mode and --ifname");
	if (o.room && strcmp(o.mode, "set"))
		usage_error("--room: the set's, so set mode only");
	ifindex = if_index_or_die(o.ifname);
	lines = read_rules(stdin, &n);
	if (!lines || load_filter(&o, lines, n, &L))
		goto out;

	t0 = now_ns();
	if (is_xdp(&o)) {
		err = bpf_xdp_attach(ifindex, bpf_program__fd(L.prog),
				     o.xdp_flags, NULL);
		if (err) {
			note("cannot attach XDP to %s: %s", o.ifname,
			     strerror(-err));
			goto out;
		}
	} else {
		LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex,
			    .attach_point = BPF_TC_INGRESS);
		LIBBPF_OPTS(bpf_tc_opts, tco, .handle = TC_HANDLE,
			    .priority = TC_PRIO,
			    .prog_fd = bpf_program__fd(L.prog),
			    .flags = BPF_TC_F_REPLACE);

		err = bpf_tc_hook_create(&hook);
		if (err && err != -EEXIST) {
			note("cannot create clsact on %s: %s", o.ifname,
			     strerror(-err));
			goto out;
		}
		err = bpf_tc_attach(&hook, &tco);
		if (err) {
			note("cannot attach tc filter to %s: %s", o.ifname,
			     strerror(-err));
			goto out;
		}
	}
	json_begin(&j, stdout);
	json_str(&j, "hook", o.hook);
	json_str(&j, "mode", o.mode);
	json_str(&j, "ifname", o.ifname);
	json_loaded(&j, &L);
	json_num(&j, "attach_ms", ms_since(t0));
	json_str(&j, "libbpf", libbpf_version_string());
	json_end(&j);
	ret = 0;
out:
	/* Attached programs hold their maps; this process may go. */
	fwb_filter__destroy(L.skel);
	free(lines);
	return ret;
}

/* The program attached to IF at the hook into *id, or -1 with a note. */
static int attached_prog(const struct opts *o, __u32 *id)
{
	int ifindex = if_index_or_die(o->ifname);
	int err;

	*id = 0;
	if (is_xdp(o)) {
		err = bpf_xdp_query_id(ifindex, 0, id);
	} else {
		LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex,
			    .attach_point = BPF_TC_INGRESS);
		LIBBPF_OPTS(bpf_tc_opts, tco, .handle = TC_HANDLE,
			    .priority = TC_PRIO);

		err = bpf_tc_query(&hook, &tco);
		*id = err ? 0 : tco.prog_id;
		if (err == -ENOENT || err == -EINVAL)
			err = 0;
	}
	if (err) {
		note("cannot query %s on %s: %s", o->hook, o->ifname,
		     strerror(-err));
		goto out;
	}
	if (!*id) {
		note("no %s program on %s", o->hook, o->ifname);
		err = -ENOENT;
	}
out:
	return err ? -1 : 0;
}

static void addr_str(__u32 a, char *buf)
{
	inet_ntop(AF_INET, &a, buf, INET_ADDRSTRLEN);
}

/* The counters as [[packets, bytes], ...] by slot; -1 when out of memory. */
static int json_counters(struct json *j, int fd, __u32 slots)
{
	int ncpu = libbpf_num_possible_cpus();
	struct fwb_count *v = calloc(ncpu, sizeof(*v));
	__u32 k;

	if (!v) {
		note("out of memory for the counters of %d CPUs", ncpu);
		return -1;
	}
	json_arr(j, "counters");
	for (k = 0; k < slots; k++) {
		__u64 p = 0, b = 0;

		if (bpf_map_lookup_elem(fd, &k, v) == 0)
			for (int c = 0; c < ncpu; c++) {
				p += v[c].packets;
				b += v[c].bytes;
			}
		json_arr(j, NULL);
		json_u64(j, NULL, p);
		json_u64(j, NULL, b);
		json_close_arr(j);
	}
	json_close_arr(j);
	free(v);
	return 0;
}

#define MAX_MAPS 16

/* fwbench's filter as attached at a hook: the program and its maps, open. */
struct attached {
	struct bpf_prog_info info;
	__u32 map_ids[MAX_MAPS];
	int prog_fd, map_fds[MAX_MAPS];
	int rules_fd, set_fd, cnt_fd, ro_fd;
	__u32 cnt_slots, set_max, ro_size;
};

static void close_attached(struct attached *a)
{
	for (int i = 0; i < MAX_MAPS; i++)
		if (a->map_fds[i] >= 0)
			close(a->map_fds[i]);
	if (a->prog_fd >= 0)
		close(a->prog_fd);
}

/* Open the program at o's hook on o's interface and find its maps by name. */
static int open_attached(const struct opts *o, struct attached *a)
{
	__u32 len = sizeof(a->info), prog_id, i;

	memset(a, 0, sizeof(*a));
	a->prog_fd = a->rules_fd = a->set_fd = a->cnt_fd = a->ro_fd = -1;
	for (i = 0; i < MAX_MAPS; i++)
		a->map_fds[i] = -1;
	if (attached_prog(o, &prog_id))
		return -1;
	a->prog_fd = bpf_prog_get_fd_by_id(prog_id);
	if (a->prog_fd < 0) {
		note("cannot open the attached program: %s", strerror(errno));
		return -1;
	}
	a->info.nr_map_ids = MAX_MAPS;
	a->info.map_ids = (__u64)(unsigned long)a->map_ids;
	if (bpf_obj_get_info_by_fd(a->prog_fd, &a->info, &len)) {
		note("cannot read the program's info: %s", strerror(errno));
		return -1;
	}
	for (i = 0; i < a->info.nr_map_ids && i < MAX_MAPS; i++) {
		struct bpf_map_info mi = { 0 };
		__u32 ml = sizeof(mi);
		int fd = bpf_map_get_fd_by_id(a->map_ids[i]);

		a->map_fds[i] = fd;
		if (fd < 0 || bpf_obj_get_info_by_fd(fd, &mi, &ml)) {
			note("cannot open map %u: %s", a->map_ids[i],
			     strerror(errno));
			return -1;
		}
		if (strcmp(mi.name, "rules") == 0)
			a->rules_fd = fd;
		else if (strcmp(mi.name, "set") == 0)
			a->set_fd = fd, a->set_max = mi.max_entries;
		else if (strcmp(mi.name, "counters") == 0)
			a->cnt_fd = fd, a->cnt_slots = mi.max_entries;
		else if (strstr(mi.name, ".rodata"))
			a->ro_fd = fd, a->ro_size = mi.value_size;
	}
	if (a->rules_fd < 0 || a->set_fd < 0 || a->cnt_fd < 0 || a->ro_fd < 0 ||
	    a->ro_size != sizeof(struct fwb_filter__rodata)) {
		note("the program on %s is not fwbench's filter (%s)", o->ifname,
		     a->info.name);
		return -1;
	}
	return 0;
}

/* The kernel's own charge for a map (its fdinfo's memlock), 0 when unknown. */
static uint64_t map_memlock(int fd)
{
	char path[64], line[128];
	unsigned long long v = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	f = fopen(path, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "memlock: %llu", &v) == 1)
			break;
	fclose(f);
	return v;
}

static int cmd_dump(int argc, char **argv)
{
	struct opts o;
	struct attached a;
	int ret = EXIT_RUNTIME, rules_fd, set_fd;
	__u32 zero = 0, id, i;
	char tag[2 * BPF_TAG_SIZE + 1], addr[INET_ADDRSTRLEN];
	struct fwb_filter__rodata ro;
	struct fwb_chunk chunk;
	struct fwb_key k, *prev = NULL;
	struct bpf_prog_info info;
	struct json j;

	parse_opts(argc, argv, &o);
	if (!o.ifname)
		usage_error("dump needs --ifname");
	if (open_attached(&o, &a))
		goto out;
	info = a.info;
	rules_fd = a.rules_fd;
	set_fd = a.set_fd;
	if (bpf_map_lookup_elem(a.ro_fd, &zero, &ro)) {
		note("cannot read the filter's settings: %s", strerror(errno));
		goto out;
	}
	for (i = 0; i < BPF_TAG_SIZE; i++)
		sprintf(tag + 2 * i, "%02x", info.tag[i]);
	json_begin(&j, stdout);
	json_obj(&j, "prog");
	json_u64(&j, "id", info.id);
	json_str(&j, "name", info.name);
	json_str(&j, "tag", tag);
	json_u64(&j, "xlated_len", info.xlated_prog_len);
	json_u64(&j, "jited_len", info.jited_prog_len);
	json_close_obj(&j);
	/* maps: {name: bytes the kernel charges for it} */
	json_obj(&j, "map_memlock");
	for (i = 0; i < a.info.nr_map_ids && i < MAX_MAPS; i++) {
		struct bpf_map_info mi = { 0 };
		__u32 ml = sizeof(mi);

		if (!bpf_obj_get_info_by_fd(a.map_fds[i], &mi, &ml))
			json_u64(&j, mi.name, map_memlock(a.map_fds[i]));
	}
	json_close_obj(&j);
	json_str(&j, "mode", ro.mode == FWB_SET ? "set" : "linear");
	json_u64(&j, "drop_slot", ro.drop_slot);
	json_arr(&j, "local");
	for (i = 0; i < FWB_MAX_LOCAL; i++)
		if (ro.local_addrs[i]) {
			addr_str(ro.local_addrs[i], addr);
			json_str(&j, NULL, addr);
		}
	json_close_arr(&j);
	/* rules: [slot, daddr, proto, port] in scan order */
	json_arr(&j, "rules");
	for (i = 0; i < ro.nr_rules; i++) {
		__u32 c = i / FWB_CHUNK;
		struct fwb_key rk;

		if (i % FWB_CHUNK == 0 &&
		    bpf_map_lookup_elem(rules_fd, &c, &chunk)) {
			note("cannot read rules %u: %s", i, strerror(errno));
			goto out;
		}
		memcpy(&rk, &chunk.keys[i % FWB_CHUNK], sizeof(rk));
		addr_str(rk.daddr, addr);
		json_arr(&j, NULL);
		json_u64(&j, NULL, chunk.ids[i % FWB_CHUNK]);
		json_str(&j, NULL, addr);
		json_u64(&j, NULL, rk.proto);
		json_u64(&j, NULL, rk.port);
		json_close_arr(&j);
	}
	json_close_arr(&j);
	/* set: [slot, daddr, proto, port], hash order */
	json_arr(&j, "set");
	while (bpf_map_get_next_key(set_fd, prev, &k) == 0) {
		if (bpf_map_lookup_elem(set_fd, &k, &id) == 0) {
			addr_str(k.daddr, addr);
			json_arr(&j, NULL);
			json_u64(&j, NULL, id);
			json_str(&j, NULL, addr);
			json_u64(&j, NULL, k.proto);
			json_u64(&j, NULL, k.port);
			json_close_arr(&j);
		}
		prev = &k;
	}
	json_close_arr(&j);
	if (json_counters(&j, a.cnt_fd, a.cnt_slots))
		goto out;
	json_end(&j);
	ret = 0;
out:
	close_attached(&a);
	return ret;
}

/* `add DADDR PROTO PORT SLOT` or `del DADDR PROTO PORT` into *key, *slot. */
static int parse_change(const char *buf, size_t lineno, struct fwb_key *key,
			__u32 *slot)
{
	char op[8], addr[64];
	unsigned proto, port, s = 0;
	int n = sscanf(buf, "%7s %63s %u %u %u", op, addr, &proto, &port, &s);
	int add = strcmp(op, "add") == 0;

	if (n < 4 || (!add && strcmp(op, "del")) || (add && n != 5) ||
	    (!add && n != 4) || proto > 255 || port > 65535)
		usage_error("changes line %zu: expected `add DADDR PROTO PORT SLOT` "
			    "or `del DADDR PROTO PORT`", lineno);
	memset(key, 0, sizeof(*key));
	if (inet_pton(AF_INET, addr, &key->daddr) != 1)
		usage_error("changes line %zu: not an IPv4 address: %s", lineno, addr);
	key->proto = proto;
	key->port = port;
	*slot = s;
	return add;
}

static int cmd_update(int argc, char **argv)
{
	struct opts o;
	struct attached a;
	struct fwb_filter__rodata ro;
	struct fwb_key key;
	char buf[256];
	size_t lineno = 0, added = 0, deleted = 0;
	__u32 zero = 0, slot;
	uint64_t t0 = now_ns();
	struct json j;
	int ret = EXIT_RUNTIME, err;

	parse_opts(argc, argv, &o);
	if (!o.ifname)
		usage_error("update needs --ifname");
	if (open_attached(&o, &a))
		goto out;
	if (bpf_map_lookup_elem(a.ro_fd, &zero, &ro)) {
		note("cannot read the filter's settings: %s", strerror(errno));
		goto out;
	}
	if (ro.mode != FWB_SET) {
		note("the filter on %s is in linear mode: its rules are read-only "
		     "data the verifier checked; change them by loading anew", o.ifname);
		goto out;
	}
	while (fgets(buf, sizeof(buf), stdin)) {
		lineno++;
		if (buf[0] == '\n' || buf[0] == '#')
			continue;
		if (parse_change(buf, lineno, &key, &slot)) {
			if (slot <= ro.drop_slot || slot >= a.cnt_slots) {
				note("changes line %zu: slot %u is not one of the room's "
				     "(%u..%u)", lineno, slot, ro.drop_slot + 1,
				     a.cnt_slots - 1);
				goto out;
			}
			err = bpf_map_update_elem(a.set_fd, &key, &slot, BPF_NOEXIST);
			if (err) {
				note("changes line %zu: %s", lineno,
				     errno == E2BIG ? "the set is full: load it with "
				     "--room for more" : errno == EEXIST ?
				     "already in the set" : strerror(errno));
				goto out;
			}
			added++;
		} else {
			if (bpf_map_delete_elem(a.set_fd, &key)) {
				note("changes line %zu: %s", lineno, errno == ENOENT ?
				     "not in the set" : strerror(errno));
				goto out;
			}
			deleted++;
		}
	}
	json_begin(&j, stdout);
	json_u64(&j, "added", added);
	json_u64(&j, "deleted", deleted);
	json_u64(&j, "set_max", a.set_max);
	json_num(&j, "update_ms", ms_since(t0));
	json_end(&j);
	ret = 0;
out:
	close_attached(&a);
	return ret;
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* BPF_PROG_RUN's buffers: a line of hex, its packet, what comes back. */
struct run_bufs {
	char line[65536];
	unsigned char pkt[32768], out[32768 + 256];
};

static int cmd_test_run(int argc, char **argv)
{
	struct opts o;
	struct loaded L = { 0 };
	struct line *lines = NULL;
	struct run_bufs *b = NULL;
	FILE *rf;
	size_t n, lineno = 0;
	struct json j;
	int ret = EXIT_RUNTIME;

	parse_opts(argc, argv, &o);
	if (!o.mode || !o.rules_path)
		usage_error("test-run needs --mode and --rules");
	rf = fopen(o.rules_path, "r");
	if (!rf)
		usage_error("cannot open %s: %s", o.rules_path, strerror(errno));
	lines = read_rules(rf, &n);
	fclose(rf);
	if (!lines)
		goto out;
	b = malloc(sizeof(*b));
	if (!b) {
		note("out of memory for the packet buffers");
		goto out;
	}
	if (load_filter(&o, lines, n, &L))
		goto out;

	json_begin(&j, stdout);
	json_str(&j, "hook", o.hook);
	json_str(&j, "mode", o.mode);
	json_loaded(&j, &L);
	json_arr(&j, "verdicts");
	while (fgets(b->line, sizeof(b->line), stdin)) {
		size_t len = 0, i;
		int err;

		lineno++;
		for (i = 0; b->line[i] && b->line[i] != '\n'; i += 2) {
			int hi = hexval(b->line[i]);
			int lo = hexval(b->line[i + 1]);

			if (hi < 0 || lo < 0 || len == sizeof(b->pkt))
				usage_error("packets line %zu: expected an even "
					    "run of hex digits", lineno);
			b->pkt[len++] = hi << 4 | lo;
		}
		LIBBPF_OPTS(bpf_test_run_opts, t, .data_in = b->pkt,
			    .data_size_in = len, .data_out = b->out,
			    .data_size_out = sizeof(b->out), .repeat = 1);
		err = bpf_prog_test_run_opts(bpf_program__fd(L.prog), &t);
		if (err) {
			note("BPF_PROG_RUN on packet %zu: %s", lineno,
			     strerror(-err));
			goto out;
		}
		json_u64(&j, NULL, t.retval);
	}
	json_close_arr(&j);
	if (json_counters(&j, bpf_map__fd(L.skel->maps.counters), L.slots))
		goto out;
	json_end(&j);
	ret = 0;
out:
	fwb_filter__destroy(L.skel);
	free(b);
	free(lines);
	return ret;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		usage_error("no command: load, dump, update or test-run (--help for usage)");
	if (strcmp(argv[1], "load") == 0)
		return cmd_load(argc - 1, argv + 1);
	if (strcmp(argv[1], "dump") == 0)
		return cmd_dump(argc - 1, argv + 1);
	if (strcmp(argv[1], "update") == 0)
		return cmd_update(argc - 1, argv + 1);
	if (strcmp(argv[1], "test-run") == 0)
		return cmd_test_run(argc - 1, argv + 1);
	if (strcmp(argv[1], "--version") == 0) {
		printf("libbpf %s\n", libbpf_version_string());
		return 0;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		fputs(usage, stdout);
		return 0;
	}
	usage_error("unknown command %s (load, dump, update, test-run)", argv[1]);
}
