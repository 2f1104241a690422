/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * echo-async-implicit - an EXS echo client in asynchronous mode with
 * implicit memory registration, the style of the programmer's guide §10.4.
 *
 *   echo-async-implicit [-t stream|seqpacket] [-r ROUNDS] [-d DEPTH] ADDR PORT
 *
 * Every EXS call here only starts an operation and returns at once; its
 * result arrives later as an event on a queue, taken with exs_qdequeue().
 * So the client keeps DEPTH sends and DEPTH receives (default 4) in flight
 * and fills the next message, or checks the last echo, while data moves:
 * see async_step() in common.h. The buffers are plain memory
 * (EXS_MHANDLE_UNREGISTERED): the library registers each one for the
 * duration of each operation.
 */
#include "common.h"

int main(int argc, char **argv)
{
	struct opts o;
	struct echo_async e;
	exs_qhandle_t mgmt_q, xfer_q;
	char *out, *in;
	double t0;
	int fd;

	parse_args(argc, argv, "rd", " [-r ROUNDS] [-d DEPTH]", &o);
	fd = client_socket(&o);		/* exs_init(), exs_socket() */
	/* one queue for connect and close, one for the data transfers */
	mgmt_q = exs_qcreate(1);
	xfer_q = exs_qcreate(2 * o.depth);
	if (mgmt_q == EXS_QHANDLE_INVALID || xfer_q == EXS_QHANDLE_INVALID)
		die(&o, "exs_qcreate");

	t0 = now();
	if (exs_connect(fd, (struct sockaddr *)&o.addr, o.addrlen, 0, NULL, mgmt_q, NULL) < 0)
		die(&o, "exs_connect");
	/* ... while the connection is set up, the program goes on ... */
	out = malloc((size_t)o.depth * MAX_MSG);
	in = malloc((size_t)o.depth * MAX_MSG);
	if (!out || !in)
		die(&o, "malloc");
	async_init(&e, &o, out, in);
	/* ... and collects the result when it needs the connection */
	wait_event(&o, mgmt_q, EXS_EVT_CONNECT, "exs_connect (event)");

	while (!async_done(&e))
		async_step(&e, fd, xfer_q, EXS_MHANDLE_UNREGISTERED, EXS_MHANDLE_UNREGISTERED);

	/* nothing is in flight on xfer_q any more, so it may go */
	if (exs_qdelete(xfer_q) < 0)
		die(&o, "exs_qdelete");
	async_close(&o, fd, mgmt_q);	/* exs_close(), its event, exs_qdelete() */
	print_summary(&o, e.nmsgs, e.back, now() - t0);
	free(out);
	free(in);
	return 0;
}
