/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * echo-async-explicit - an EXS echo client in asynchronous mode with
 * explicit memory registration, the style of the programmer's guide §10.5:
 * the full use of EXS.
 *
 *   echo-async-explicit [-t stream|seqpacket] [-r ROUNDS] [-d DEPTH] ADDR PORT
 *
 * The conversation of echo-async-implicit (DEPTH sends and DEPTH receives
 * in flight, results as events on a queue), with the buffers registered
 * once up front by exs_mregister(): each transfer names its registration,
 * and no operation pays for registering memory.
 */
#include "common.h"

int main(int argc, char **argv)
{
	struct opts o;
	struct echo_async e;
	exs_qhandle_t mgmt_q, xfer_q;
	exs_mhandle_t out_mh, in_mh;
	void *out, *in;
	size_t area;
	double t0;
	int fd;

	parse_args(argc, argv, "rd", " [-r ROUNDS] [-d DEPTH]", &o);
	fd = client_socket(&o);		/* exs_init(), exs_socket() */
	mgmt_q = exs_qcreate(1);	/* connect and close */
	if (mgmt_q == EXS_QHANDLE_INVALID)
		die(&o, "exs_qcreate");
	t0 = now();
	if (exs_connect(fd, (struct sockaddr *)&o.addr, o.addrlen, 0, NULL, mgmt_q, NULL) < 0)
		die(&o, "exs_connect");

	/*
	 * While the connection is set up: one registration for all outgoing
	 * buffers (send only) and one for all incoming ones. A transfer may
	 * use any part of a registered area. Cache-line aligned (guide §8.3).
	 */
	area = (size_t)o.depth * MAX_MSG;
	if (posix_memalign(&out, 64, area) || posix_memalign(&in, 64, area))
		fail(&o, "posix_memalign failed");
	out_mh = exs_mregister(out, area, EXS_MRF_RECV_DISABLE);
	in_mh = exs_mregister(in, area, 0);
	if (out_mh == EXS_MHANDLE_INVALID || in_mh == EXS_MHANDLE_INVALID)
		die(&o, "exs_mregister");
	async_init(&e, &o, out, in);
	xfer_q = exs_qcreate(2 * o.depth);	/* the data transfers */
	if (xfer_q == EXS_QHANDLE_INVALID)
		die(&o, "exs_qcreate");
	wait_event(&o, mgmt_q, EXS_EVT_CONNECT, "exs_connect (event)");

	while (!async_done(&e))
		async_step(&e, fd, xfer_q, out_mh, in_mh);

	/* the order of guide §10.5: queue, registrations, then the close */
	if (exs_qdelete(xfer_q) < 0)
		die(&o, "exs_qdelete");
	if (exs_mderegister(out_mh, 0) < 0 || exs_mderegister(in_mh, 0) < 0)
		die(&o, "exs_mderegister");
	async_close(&o, fd, mgmt_q);	/* exs_close(), its event, exs_qdelete() */
	print_summary(&o, e.nmsgs, e.back, now() - t0);
	free(out);
	free(in);
	return 0;
}
