/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs_many: many EXS connections set up at once, then held, so that exsctl
 * can be checked against them.
 *
 *   exs_many server ADDR PORT N   accepts N connections
 *   exs_many client ADDR PORT N   N sockets connect concurrently (asynchronous
 *                                 exs_connect, all started before any completes)
 * Prints "ready N" once all N are up (or the failures), then holds them
 * until SIGTERM. Exit 0 if all N came up.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <exs.h>

#define MANY_MAX 4096

static int connect_all(const struct sockaddr_in *sa, int n)
{
	exs_qhandle_t q = exs_qcreate(n);
	exs_event_t ev;
	int up = 0;

	if (q == EXS_QHANDLE_INVALID)
		return 0;
	for (int i = 0; i < n; i++) {
		int fd = exs_socket(AF_INET, SOCK_SEQPACKET, 0);

		if (fd < 0 || exs_connect(fd, (const struct sockaddr *)sa, sizeof(*sa), 0, NULL, q,
					  (void *)(long)fd)) {
			printf("connect %d: %s\n", i, strerror(errno));
			return up;
		}
	}
	for (int i = 0; i < n; i++) {
		if (exs_qdequeue(q, &ev, 1, NULL) != 1)
			break;
		if (ev.exs_evt_type != EXS_EVT_CONNECT || ev.exs_evt_errno)
			printf("connect event %d: type %d, %s\n", i, ev.exs_evt_type,
			       strerror(ev.exs_evt_errno));
		else
			up++;
	}
	return up;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int n, up = 0, lfd, sig;
	sigset_t set;

	n = argc == 5 ? atoi(argv[4]) : 0;
	if (n <= 0 || n > MANY_MAX || inet_pton(AF_INET, argv[2], &sa.sin_addr) != 1) {
		fprintf(stderr, "usage: exs_many server|client ADDR PORT N (N <= %d)\n", MANY_MAX);
		return 2;
	}
	sa.sin_port = htons((uint16_t)atoi(argv[3]));
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (exs_init(EXS_VERSION1)) {
		printf("exs_init: %s\n", strerror(errno));
		return 1;
	}
	if (!strcmp(argv[1], "server")) {
		lfd = exs_socket(AF_INET, SOCK_SEQPACKET, 0);
		if (lfd < 0 || exs_bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || exs_listen(lfd, n)) {
			printf("listen: %s\n", strerror(errno));
			return 1;
		}
		printf("listening\n");
		while (up < n && exs_blocking_accept(lfd, NULL, NULL) >= 0)
			up++;
	} else {
		up = connect_all(&sa, n);
	}
	printf("ready %d of %d\n", up, n);
	sigwait(&set, &sig);
	return up == n ? 0 : 1;
}
