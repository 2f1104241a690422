/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * echo-sync-explicit - an EXS echo client in synchronous mode with explicit
 * memory registration, the style of the programmer's guide §10.3.
 *
 *   echo-sync-explicit [-t stream|seqpacket] [-r ROUNDS] ADDR PORT
 *
 * The conversation of echo-sync-implicit, one step further: the two
 * buffers are registered once with exs_mregister() and every transfer
 * names its registration, so no call pays for registering memory. The
 * calls still wait for their completion (exs_blocking_send/_recv).
 */
#include "common.h"

int main(int argc, char **argv)
{
	struct opts o;
	exs_mhandle_t out_mh, in_mh;
	void *out, *in;
	uint64_t pos = 0;
	double t0;
	int fd, i;

	parse_args(argc, argv, "r", " [-r ROUNDS]", &o);
	fd = client_socket(&o);		/* exs_init(), exs_socket() */
	t0 = now();
	if (exs_blocking_connect(fd, (struct sockaddr *)&o.addr, o.addrlen) < 0)
		die(&o, "exs_blocking_connect");

	/*
	 * Registered memory stays pinned until it is deregistered.
	 * Cache-line alignment lets the adapter move whole lines (guide §8.3).
	 * The outgoing buffer is only ever sent from, and EXS_MRF_RECV_DISABLE
	 * says so; the incoming one takes the default (send and receive).
	 */
	if (posix_memalign(&out, 64, MAX_MSG) || posix_memalign(&in, 64, MAX_MSG))
		fail(&o, "posix_memalign failed");
	out_mh = exs_mregister(out, MAX_MSG, EXS_MRF_RECV_DISABLE);
	if (out_mh == EXS_MHANDLE_INVALID)
		die(&o, "exs_mregister (out)");
	in_mh = exs_mregister(in, MAX_MSG, 0);
	if (in_mh == EXS_MHANDLE_INVALID)
		die(&o, "exs_mregister (in)");

	for (i = 0; i < o.rounds * (int)NSIZES; i++) {
		size_t len = msg_size(i), got = 0;
		ssize_t n;

		pattern_fill(out, len, pos);
		n = exs_blocking_send(fd, out, len, 0, out_mh);
		check_sent(&o, n, len, "exs_blocking_send");
		/* any buffer inside a registered area may be used: here the
		 * rest of `in`, while a stream echo comes back in pieces */
		do {
			n = exs_blocking_recv(fd, (char *)in + got, recv_ask(&o, len, got), 0, in_mh);
			check_received(&o, n, len, "exs_blocking_recv");
			got += (size_t)n;
		} while (got < len);
		pattern_check(&o, in, len, pos);
		pos += len;
	}

	if (exs_blocking_close(fd) < 0)
		die(&o, "exs_blocking_close");
	/* deregister only when no transfer uses the memory any more */
	if (exs_mderegister(out_mh, 0) < 0 || exs_mderegister(in_mh, 0) < 0)
		die(&o, "exs_mderegister");
	print_summary(&o, i, pos, now() - t0);
	free(out);
	free(in);
	return 0;
}
