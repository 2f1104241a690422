/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs_exhaust: libexs when a resource runs out, in one process connected
 * to itself (run it under `ulimit -l 1024` on siw, which counts pinned
 * pages even for root).
 *
 *   exs_exhaust ADDR PORT
 *       memlock: exs_mregister of 16 MiB fails with ENOMEM, 64 KiB works;
 *       qdepth:  a queue of depth 1 takes 2 x 200 transfer events, none lost
 *                (posted as far as the credits allow, EBUSY past them);
 *       emfile:  exs_socket fails with EMFILE once 65,536 are open.
 * Prints "PASS name ..." or "FAIL name ..." per case; exit 0 if all passed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <exs.h>

#define NMSG 200
#define BIG (16u << 20)

static int failed;

static void result(bool ok, const char *name, const char *fmt, int a, int b)
{
	printf("%s %s ", ok ? "PASS" : "FAIL", name);
	printf(fmt, a, b);
	printf("\n");
	failed += !ok;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	static char sbuf[NMSG], rbuf[NMSG];
	exs_qhandle_t q;
	exs_mhandle_t mh;
	exs_event_t ev;
	int lfd, cfd, afd, n, sends = 0, recvs = 0, bad = 0, err, pr = 0, ps = 0, peak = 0,
	    stalls = 0;
	char *big;

	if (argc != 3 || inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1) {
		fprintf(stderr, "usage: exs_exhaust ADDR PORT\n");
		return 2;
	}
	sa.sin_port = htons((uint16_t)atoi(argv[2]));
	setvbuf(stdout, NULL, _IOLBF, 0);
	q = exs_init(EXS_VERSION1) ? EXS_QHANDLE_INVALID : exs_qcreate(1);
	lfd = exs_socket(AF_INET, SOCK_STREAM, 0);
	cfd = exs_socket(AF_INET, SOCK_STREAM, 0);
	if (q == EXS_QHANDLE_INVALID || lfd < 0 || cfd < 0 ||
	    exs_bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || exs_listen(lfd, 1) ||
	    exs_connect(cfd, (struct sockaddr *)&sa, sizeof(sa), 0, NULL, q, NULL) ||
	    (afd = exs_blocking_accept(lfd, NULL, NULL)) < 0 || exs_qdequeue(q, &ev, 1, NULL) != 1 ||
	    ev.exs_evt_errno) {
		printf("FAIL setup: %s\n", strerror(errno));
		return 1;
	}

	/* memlock: the device is in use now, so registration pins at once */
	big = calloc(1, BIG);
	errno = 0;
	mh = big ? exs_mregister(big, BIG, 0) : EXS_MHANDLE_INVALID;
	err = errno;
	result(mh == EXS_MHANDLE_INVALID && err == ENOMEM, "memlock",
	       "16 MiB past RLIMIT_MEMLOCK: %d (ENOMEM is %d)", err, ENOMEM);
	mh = exs_mregister(sbuf, sizeof(sbuf), 0);
	result(mh != EXS_MHANDLE_INVALID && !exs_mderegister(mh, 0), "memlock",
	       "a small region still registers (%d, %d)", 0, 0);
	free(big);

	/*
	 * qdepth: the queue grows past its depth of 1; every event arrives.
	 * Each round posts receives and sends until the credits run out (the
	 * guide's EBUSY), lets their completions pile up undequeued, then
	 * takes them all at once; the bytes must arrive in order.
	 */
	for (int i = 0; i < NMSG; i++)
		sbuf[i] = (char)(i + 1);
	while (!bad && sends + recvs < 2 * NMSG) {
		static exs_event_t evs[2 * NMSG];
		struct timeval tmo = { 0, 300000 };
		int got;

		for (; pr < NMSG && !exs_recv(afd, rbuf + pr, 1, 0, q, NULL,
					      EXS_MHANDLE_UNREGISTERED); pr++)
			;
		if (pr < NMSG && errno != EBUSY)
			bad++, printf("qdepth: recv %d: %s\n", pr, strerror(errno));
		for (; ps < NMSG && !exs_send(cfd, sbuf + ps, 1, 0, q, NULL,
					      EXS_MHANDLE_UNREGISTERED); ps++)
			;
		if (ps < NMSG && errno != EBUSY)
			bad++, printf("qdepth: send %d: %s\n", ps, strerror(errno));
		/* completions pile up undequeued, then all are taken at once; a
		 * receive completes only once its send was posted (a later round) */
		usleep(200000);
		got = 0;
		while ((n = exs_qdequeue(q, evs, 2 * NMSG, &tmo)) > 0) {
			peak = n > peak ? n : peak;
			got += n;
			for (int i = 0; i < n; i++) {
				bad += evs[i].exs_evt_errno != 0;
				sends += evs[i].exs_evt_type == EXS_EVT_SEND;
				recvs += evs[i].exs_evt_type == EXS_EVT_RECV;
			}
		}
		if (n < 0)
			bad++, printf("qdepth: dequeue: %s\n", strerror(errno));
		if (!got && ++stalls == 20)
			bad++, printf("qdepth: no event in 20 rounds at %d/%d posted\n", pr, ps);
	}
	bad += memcmp(sbuf, rbuf, NMSG) != 0;
	result(!bad && sends == NMSG && recvs == NMSG && peak > 1, "qdepth",
	       "depth 1, got %d send and %d receive events of 200 each, bytes in order",
	       sends, recvs);
	printf("qdepth: at most %d events taken at once from the queue of depth 1\n", peak);

	/* emfile: the socket table is full at 65,536 */
	for (n = 3; exs_socket(AF_INET, SOCK_STREAM, 0) >= 0; n++)
		;
	err = errno;
	result(err == EMFILE && n == 65536, "emfile", "exs_socket failed with %d after %d open",
	       err, n);
	return failed ? 1 : 0;
}
