/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs_devfull: what libexs does in a process that already uses a device
 * when the device's tables fill up (exs_devhog fills them).
 *
 *   exs_devfull ADDR PORT
 * Connects to itself on PORT (a SOCK_STREAM pair), prints "ready", then
 * for each line it reads on standard input tries, and prints one line each:
 *   connect ERR MS   a new connection to its own listener (and its accept)
 *   mregister ERR    exs_mregister of one page (deregistered again)
 *   send ERR         an exs_send of 64 KiB, unregistered (registered for
 *                    the call, when it meets its receive), on the first
 *                    connection; "pending" when it was taken (unless the
 *                    one of an earlier line is still pending)
 *   recv ERR         an exs_recv of 64 KiB, unregistered (its advert
 *                    registers the buffer), on the accepted end
 *   moved ERR ERR    when the receive was taken: the send's and the
 *                    receive's events
 * ERR is "ok" or the errno's name (ENOBUFS, ENOMEM, ...; "none" when no
 * event came within 10 s), then "checked". Exit 0 at the end of input
 * (the results are for the script to judge), 1 if the pair failed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <exs.h>

#define BIG 65536

static struct sockaddr_in sa = { .sin_family = AF_INET };
static exs_qhandle_t q;

static const char *name(int e)
{
	static char other[32];

	switch (e) {
	case 0: return "ok";
	case -1: return "none";
	case ENOBUFS: return "ENOBUFS";
	case ENOMEM: return "ENOMEM";
	case EINVAL: return "EINVAL";
	case EIO: return "EIO";
	case ECONNREFUSED: return "ECONNREFUSED";
	case ECONNRESET: return "ECONNRESET";
	case ETIMEDOUT: return "ETIMEDOUT";
	default:
		snprintf(other, sizeof(other), "errno%d", e);
		return other;
	}
}

static long ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* The events of a send (if *se is -1) and a receive, 10 s at most: their
 * errnos in *se and *re (-1 if none came) */
static void moved(int *se, int *re)
{
	struct timeval tmo = { 10, 0 };
	exs_event_t ev;

	while ((*se == -1 || *re == -1) && exs_qdequeue(q, &ev, 1, &tmo) == 1) {
		if (ev.exs_evt_type == EXS_EVT_SEND)
			*se = ev.exs_evt_errno;
		if (ev.exs_evt_type == EXS_EVT_RECV)
			*re = ev.exs_evt_errno;
	}
}

/* A connection to the listener: the connect's errno and the accepted
 * socket (-1 if none); the accept stays posted while none came. */
static int connect_one(int lfd, int *ret_cfd, int *ret_afd, long *ret_ms)
{
	static struct exs_acceptaddr aa;
	static bool posted;
	struct timespec t0;
	exs_event_t ev;
	int fd = exs_socket(AF_INET, SOCK_STREAM, 0), err;

	*ret_afd = -1;
	if (!posted && exs_accept(lfd, &aa, 1, 0, q))
		return errno;
	posted = true;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (fd < 0)
		return errno;
	if (exs_connect(fd, (struct sockaddr *)&sa, sizeof(sa), 0, NULL, q, NULL)) {
		err = errno;
	} else {
		struct timeval tmo = { 10, 0 };

		err = -1;
		while ((err == -1 || (!err && *ret_afd < 0)) && exs_qdequeue(q, &ev, 1, &tmo) == 1) {
			if (ev.exs_evt_type == EXS_EVT_CONNECT)
				err = ev.exs_evt_errno;
			if (ev.exs_evt_type == EXS_EVT_ACCEPT && !ev.exs_evt_errno) {
				*ret_afd = ev.exs_evt_union.exs_evt_accept.exs_evt_new_socket;
				posted = false;
			}
		}
	}
	*ret_ms = ms_since(&t0);
	if (err)
		exs_blocking_close(fd);
	*ret_cfd = err ? -1 : fd;
	return err;
}

int main(int argc, char **argv)
{
	static char sbuf[BIG], rbuf[BIG], page[4096] __attribute__((aligned(4096)));
	int lfd, cfd, afd, cfd2, afd2, err;
	bool send_pending = false;
	char line[64];
	exs_mhandle_t mh;
	long ms;

	if (argc != 3 || inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1) {
		fprintf(stderr, "usage: exs_devfull ADDR PORT\n");
		return 2;
	}
	sa.sin_port = htons((uint16_t)atoi(argv[2]));
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (exs_init(EXS_VERSION1) || (q = exs_qcreate(64)) == EXS_QHANDLE_INVALID ||
	    (lfd = exs_socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
	    exs_bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || exs_listen(lfd, 8)) {
		printf("set-up: %s\n", strerror(errno));
		return 1;
	}
	err = connect_one(lfd, &cfd, &afd, &ms);
	if (err || afd < 0) {
		printf("first connect: %s\n", name(err));
		return 1;
	}
	printf("ready\n");
	while (fgets(line, sizeof(line), stdin)) {
		err = connect_one(lfd, &cfd2, &afd2, &ms);
		printf("connect %s %ld\n", name(err), ms);
		if (cfd2 >= 0)
			exs_blocking_close(cfd2);
		if (afd2 >= 0)
			exs_blocking_close(afd2);
		mh = exs_mregister(page, sizeof(page), 0);
		printf("mregister %s\n", name(mh == EXS_MHANDLE_INVALID ? errno : 0));
		if (mh != EXS_MHANDLE_INVALID)
			exs_mderegister(mh, 0);
		if (!send_pending) {
			err = exs_send(cfd, sbuf, BIG, 0, q, NULL, EXS_MHANDLE_UNREGISTERED) ? errno : 0;
			send_pending = !err;
			printf("send %s\n", err ? name(err) : "pending");
		}
		err = exs_recv(afd, rbuf, BIG, 0, q, NULL, EXS_MHANDLE_UNREGISTERED) ? errno : 0;
		printf("recv %s\n", name(err));
		if (!err) {
			int se = send_pending ? -1 : -2, re = -1;

			moved(&se, &re);
			printf("moved %s %s\n", se == -2 ? "nosend" : name(se), name(re));
			send_pending = false;
		}
		printf("checked\n");
	}
	return 0;
}
