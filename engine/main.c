// SPDX-License-Identifier: MIT
/* fwbench-engine: the traffic engine's entry point. JSON on stdout, words on stderr. */
#include <string.h>
#include "engine.h"

static const char usage[] =
"usage: fwbench-engine {send|sink|recv|echo|echo-server|spin|accept|connect} [options]\n"
"       (each takes --help)\n"
"  send  paced or open-throttle UDP frames with sequence numbers and send times\n"
"  sink  count, time-stamp and drop them in XDP on the receiving interface\n"
"  recv  the same in user space (and --reflect them back for round trips)\n"
"  echo  n clients, a socket each, each sending a message, awaiting its echo\n"
"  echo-server  echoes them (--server threads or epoll), validating each\n"
"  spin  soak one CPU at the lowest priority, counting the rounds it gets\n"
"  accept  accept TCP connections on many ports, counting them by endpoint\n"
"  connect  open TCP connections at a fixed rate, timing each handshake\n";

int main(int argc, char **argv)
{
	if (argc < 2)
		usage_error("no mode given (send, sink, recv, echo, echo-server, spin, "
			    "accept or connect; --help for more)");
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(usage, stdout);
		return 0;
	}
	if (!strcmp(argv[1], "send"))
		return cmd_send(argc - 1, argv + 1);
	if (!strcmp(argv[1], "sink"))
		return cmd_sink(argc - 1, argv + 1);
	if (!strcmp(argv[1], "recv"))
		return cmd_recv(argc - 1, argv + 1);
	if (!strcmp(argv[1], "echo"))
		return cmd_echo(argc - 1, argv + 1);
	if (!strcmp(argv[1], "echo-server"))
		return cmd_echo_server(argc - 1, argv + 1);
	if (!strcmp(argv[1], "spin"))
		return cmd_spin(argc - 1, argv + 1);
	if (!strcmp(argv[1], "accept"))
		return cmd_accept(argc - 1, argv + 1);
	if (!strcmp(argv[1], "connect"))
		return cmd_connect(argc - 1, argv + 1);
	usage_error("unknown mode %s (send, sink, recv, echo, echo-server, spin, "
		    "accept or connect)", argv[1]);
}
