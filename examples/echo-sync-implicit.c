/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * echo-sync-implicit - an EXS echo client in synchronous mode with implicit
 * memory registration, the style of the programmer's guide §10.2.
 *
 *   echo-sync-implicit [-t stream|seqpacket] [-r ROUNDS] ADDR PORT
 *
 * It sends messages of 1 byte to 1 MiB to an echo server (exs-echo-server),
 * reads each one back and checks every byte. This is the first step from
 * ordinary sockets to EXS: a socket program with exs_ names. Every call
 * waits for its completion, and the buffers are plain malloc() memory:
 * exs_write() and exs_read() register them for the duration of each call
 * (EXS_MHANDLE_UNREGISTERED), which is simple but costs a registration
 * per call.
 */
#include "common.h"

int main(int argc, char **argv)
{
	struct opts o;
	char *out, *in;
	uint64_t pos = 0;
	double t0;
	int fd, i, nmsgs;

	parse_args(argc, argv, "r", " [-r ROUNDS]", &o);
	nmsgs = o.rounds * (int)NSIZES;
	fd = client_socket(&o);		/* exs_init(), exs_socket() */
	t0 = now();
	if (exs_blocking_connect(fd, (struct sockaddr *)&o.addr, o.addrlen) < 0)
		die(&o, "exs_blocking_connect");
	out = malloc(MAX_MSG);
	in = malloc(MAX_MSG);
	if (!out || !in)
		die(&o, "malloc");

	for (i = 0; i < nmsgs; i++) {
		size_t len = msg_size(i), got;
		ssize_t n;

		pattern_fill(out, len, pos);
		/* returns once the whole message is in the server's buffer */
		check_sent(&o, exs_write(fd, out, len), len, "exs_write");
		/* a stream echo may come back in pieces: read until it is all here */
		for (got = 0; got < len; got += (size_t)n) {
			n = exs_read(fd, in + got, recv_ask(&o, len, got));
			check_received(&o, n, len, "exs_read");
		}
		pattern_check(&o, in, len, pos);
		pos += len;
	}

	/* a graceful close: the server's next read sees end-of-file */
	if (exs_blocking_close(fd) < 0)
		die(&o, "exs_blocking_close");
	print_summary(&o, nmsgs, pos, now() - t0);
	free(out);
	free(in);
	return 0;
}
