// SPDX-License-Identifier: MIT
/*
 * The CPU soaker: a loop of fixed work pinned to one CPU at the lowest
 * priority there is (SCHED_IDLE), publishing how many rounds it has done.
 *
 * It measures what the CPU had left over. Softirq work (forwarding, netfilter,
 * XDP) and every other task take the CPU from it, so over a window
 *     busy = window - rounds / idle_rate
 * where idle_rate is the rounds per second it does on a quiet CPU, measured in
 * the same run. This kernel accounts CPU time by ticks (/proc/stat resolves a
 * 1 s trial to about 1 %) and cannot charge softirq time to the work it did;
 * the soaker resolves microseconds, and its idle rate is a calibration workload
 * that shows the machine's drift (steal, frequency, other tenants) round by
 * round.
 *
 * The count lives in a 64-byte file mapped shared, so a reader samples it
 * without a system call on this CPU: magic, the soaker's pid, the CPU, rounds.
 * With --control a thread on the other CPUs answers `read` on stdin with the
 * count and its own CLOCK_MONOTONIC time, taken together: the way to read a
 * soaker on another host (over SSH), where no file can be mapped. --bpf-stats
 * keeps the kernel's BPF run-time statistics on while the soaker runs
 * (BPF_ENABLE_STATS: scoped to this process, no system setting changed).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include "engine.h"

#define SPIN_MAGIC 0x4e495053424d5746ULL	/* "FWMBSPIN" */
#define SPIN_ROUND 256	/* empty iterations per published round */

struct spin_page {
	uint64_t magic;
	uint64_t pid;
	uint64_t cpu;
	uint64_t rounds;	/* written by the soaker only, read anywhere */
	uint64_t pad[4];
};

static const struct option spin_opts[] = {
	{ "cpu", required_argument, NULL, 'c' },
	{ "file", required_argument, NULL, 'f' },
	{ "control", no_argument, NULL, 'C' },
	{ "bpf-stats", no_argument, NULL, 'b' },
	{ "help", no_argument, NULL, 'h' },
	{ 0 }
};

static const char spin_usage[] =
"usage: fwbench-engine spin --cpu N (--file PATH | --control) [--bpf-stats]\n"
"  Spins on CPU N at SCHED_IDLE until killed (or its parent ends), counting\n"
"  rounds of fixed work into the 64-byte file PATH, which it creates and which\n"
"  must not exist (magic, pid, cpu, rounds: little-endian u64s). Prints one\n"
"  JSON line once it runs. --control: answers\n"
"  `read` on stdin with {\"rounds\", \"t_ns\"} (CLOCK_MONOTONIC) from a thread\n"
"  on the other CPUs, and ends at `quit` or the end of stdin. --bpf-stats: BPF\n"
"  run-time statistics on while it runs.\n";

/* The --control thread: read the count and the clock together, on request. */
static void *control_main(void *arg)
{
	const struct spin_page *pg = arg;
	char line[64];
	struct json j;

	while (fgets(line, sizeof(line), stdin)) {
		if (!strncmp(line, "quit", 4))
			break;
		json_begin(&j, stdout);
		if (!strncmp(line, "read", 4)) {
			json_u64(&j, "rounds", __atomic_load_n(&pg->rounds, __ATOMIC_RELAXED));
			json_u64(&j, "t_ns", now_ns());
		} else {
			json_str(&j, "error", "unknown command (read | quit)");
		}
		json_end(&j);
	}
	exit(0);
}

/* The control thread runs anywhere but on the soaked CPU (where it would be
 * counted as busy), if there is anywhere else. */
static void start_control(struct spin_page *pg, long cpu)
{
	cpu_set_t others;
	pthread_t tid;
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	int err;

	CPU_ZERO(&others);
	for (long c = 0; c < n && c < CPU_SETSIZE; c++)
		if (c != cpu)
			CPU_SET(c, &others);
	err = pthread_create(&tid, NULL, control_main, pg);
	if (err)
		runtime_error("spin: cannot start the control thread: %s", strerror(err));
	if (CPU_COUNT(&others))
		pthread_setaffinity_np(tid, sizeof(others), &others);
}

int cmd_spin(int argc, char **argv)
{
	struct sched_param sp = { 0 };
	static struct spin_page private_page;
	struct spin_page *pg = &private_page;
	const char *file = NULL;
	bool control = false, bpf_stats = false;
	long cpu = -1;
	int opt, fd;
	struct json j;

	while ((opt = getopt_long(argc, argv, "", spin_opts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			cpu = (long)parse_u64("--cpu", optarg, 0, 1023);
			break;
		case 'f':
			file = optarg;
			break;
		case 'C':
			control = true;
			break;
		case 'b':
			bpf_stats = true;
			break;
		case 'h':
			fputs(spin_usage, stdout);
			return 0;
		default:
			usage_error("spin: unknown option (--help)");
		}
	}
	if (cpu < 0 || (!file && !control))
		usage_error("spin: --cpu and --file or --control are required");
	/* A soaker outliving whoever reads it would eat a CPU for nothing. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() == 1)
		runtime_error("spin: the parent is gone");
	if (bpf_stats && bpf_enable_stats(BPF_STATS_RUN_TIME) < 0)
		runtime_error("spin: BPF run-time statistics cannot be enabled: %s",
			      strerror(errno));
	pin_to_cpu((int)cpu);
	if (sched_setscheduler(0, SCHED_IDLE, &sp))
		runtime_error("spin: cannot run at SCHED_IDLE: %s",
			      strerror(errno));
	if (file) {
		/* A new file only: a path that exists is someone's, never replaced. */
		fd = open(file, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0 || ftruncate(fd, sizeof(*pg)))
			runtime_error("spin: cannot create %s: %s", file,
				      strerror(errno));
		pg = mmap(NULL, sizeof(*pg), PROT_READ | PROT_WRITE, MAP_SHARED,
			  fd, 0);
		if (pg == MAP_FAILED)
			runtime_error("spin: cannot map %s: %s", file,
				      strerror(errno));
		close(fd);
	}
	pg->pid = (uint64_t)getpid();
	pg->cpu = (uint64_t)cpu;
	__atomic_store_n(&pg->magic, SPIN_MAGIC, __ATOMIC_RELEASE);

	json_begin(&j, stdout);
	json_str(&j, "mode", "spin");
	json_u64(&j, "cpu", (uint64_t)cpu);
	json_u64(&j, "pid", (uint64_t)getpid());
	json_u64(&j, "round_iterations", SPIN_ROUND);
	json_bool(&j, "bpf_stats", bpf_stats);
	json_end(&j);
	fflush(stdout);
	if (control)
		start_control(pg, cpu);

	for (uint64_t rounds = 1;; rounds++) {
		for (int k = 0; k < SPIN_ROUND; k++)
			__asm__ __volatile__("" ::: "memory");
		__atomic_store_n(&pg->rounds, rounds, __ATOMIC_RELAXED);
	}
}
