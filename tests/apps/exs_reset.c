/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs_reset: a transfer whose sender is killed, seen from the receiver.
 *
 *   exs_reset sink ADDR PORT DEPTH SIZE
 *       accepts one connection and keeps DEPTH receives of SIZE posted;
 *       prints "receiving" after the first message. Once a receive fails,
 *       it waits (5 s at most) for every pending one and prints the
 *       CLOCK_REALTIME of the first and last failure: "reset ERRNO first NS
 *       last NS pending K failed F". Exit 0 if all K failed with ECONNRESET
 *       (a re-post that exs_recv refuses at once counts as a failed receive).
 *   exs_reset source ADDR PORT LPORT SIZE
 *       binds local port LPORT, connects and sends messages of SIZE until
 *       killed; prints "sending pid PID" once connected.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <exs.h>

#define DEPTH_MAX 256
#define SIZE_MAX_ (16u << 20)

static void __attribute__((noreturn)) die(const char *what)
{
	printf("exs_reset: %s: %s\n", what, strerror(errno));
	exit(1);
}

static long long realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static int source(int fd, const struct sockaddr_in *sa, uint16_t lport, size_t size)
{
	struct sockaddr_in me = *sa;
	char *buf = calloc(1, size);
	exs_mhandle_t mh;

	me.sin_port = htons(lport);
	if (!buf || exs_bind(fd, (struct sockaddr *)&me, sizeof(me)))
		die("bind");
	if (exs_blocking_connect(fd, (const struct sockaddr *)sa, sizeof(*sa)))
		die("connect");
	mh = exs_mregister(buf, size, 0);
	if (mh == EXS_MHANDLE_INVALID)
		die("exs_mregister");
	printf("sending pid %d\n", (int)getpid());
	for (;;)
		if (exs_blocking_send(fd, buf, size, 0, mh) != (ssize_t)size)
			die("send");
}

static int sink(int lfd, int depth, size_t size)
{
	exs_qhandle_t q = exs_qcreate(depth);
	char *buf = calloc((size_t)depth, size);
	long long first = 0, last = 0;
	int fd, pending = 0, failed = 0, err = 0, got = 0;
	exs_mhandle_t mh;
	exs_event_t ev;
	struct timeval tv = { .tv_sec = 5 };

	if (q == EXS_QHANDLE_INVALID || !buf || exs_listen(lfd, 1))
		die("listen");
	printf("listening\n");
	fd = exs_blocking_accept(lfd, NULL, NULL);
	mh = fd < 0 ? EXS_MHANDLE_INVALID : exs_mregister(buf, (size_t)depth * size, 0);
	if (mh == EXS_MHANDLE_INVALID)
		die("accept");
	for (long i = 0; i < depth; i++, pending++)
		if (exs_recv(fd, buf + i * size, size, 0, q, (void *)i, mh) < 0)
			die("exs_recv");
	while (pending > 0 && exs_qdequeue(q, &ev, 1, err ? &tv : NULL) == 1) {
		long i = (long)ev.exs_evt_ahandle;

		int e = ev.exs_evt_errno;

		pending--;
		if (!e) {
			if (!got++)
				printf("receiving\n");
			if (exs_recv(fd, buf + i * size, size, 0, q, (void *)i, mh) == 0) {
				pending++;
				continue;
			}
			/* a message that completed just before the reset: its
			 * receive's re-post is refused at once, which is that
			 * receive's failure. Its event may come after another
			 * receive's ECONNRESET (the events of messages that
			 * completed before the reset wait in the queue while the
			 * reset is found), so this holds after `err` too. */
			e = errno;
		}
		last = realtime_ns();
		if (!err) {
			first = last;
			err = e;
		}
		failed += e == ECONNRESET;
	}
	printf("reset %d (%s) first %lld last %lld pending %d failed %d after %d messages\n", err,
	       strerror(err), first, last, depth, failed, got);
	return err == ECONNRESET && failed == depth && pending == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	unsigned long size = argc == 6 ? strtoul(argv[5], NULL, 0) : 0;
	int arg4 = argc == 6 ? atoi(argv[4]) : 0, fd;

	if (size == 0 || size > SIZE_MAX_ || inet_pton(AF_INET, argv[2], &sa.sin_addr) != 1) {
		fprintf(stderr, "usage: exs_reset sink ADDR PORT DEPTH SIZE | source ADDR PORT LPORT SIZE\n");
		return 2;
	}
	sa.sin_port = htons((uint16_t)atoi(argv[3]));
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (exs_init(EXS_VERSION1) || (fd = exs_socket(AF_INET, SOCK_SEQPACKET, 0)) < 0)
		die("exs_socket");
	if (!strcmp(argv[1], "source") && arg4 > 0 && arg4 < 65536)
		return source(fd, &sa, (uint16_t)arg4, size);
	if (!strcmp(argv[1], "sink") && arg4 > 0 && arg4 <= DEPTH_MAX) {
		if (exs_bind(fd, (struct sockaddr *)&sa, sizeof(sa)))
			die("bind");
		return sink(fd, arg4, size);
	}
	fprintf(stderr, "exs_reset: bad arguments\n");
	return 2;
}
