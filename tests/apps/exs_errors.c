/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs_errors: the errno cases that need a real exsd (or its absence).
 *   exs_errors refused ADDR PORT   connect where nothing listens: ECONNREFUSED
 *   exs_errors noexsd ADDR PORT    exsd not running: every call that needs
 *                                  it fails at once with ENETDOWN
 * Prints one line per check: "ok ..." or "FAIL ...". Exit 0 if all ok.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <exs.h>

static int failures;

static void expect(const char *what, int ret, int want_errno, double secs)
{
	if (ret == -1 && errno == want_errno) {
		printf("ok   %s: -1, %s (%.3f s)\n", what, strerror(errno), secs);
	} else {
		printf("FAIL %s: returned %d, errno %s; wanted -1, %s\n", what, ret,
		       ret == -1 ? strerror(errno) : "-", strerror(want_errno));
		failures++;
	}
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	exs_qhandle_t q;
	exs_event_t ev;
	double t;
	int fd, ret;

	if (argc != 4 || inet_pton(AF_INET, argv[2], &sa.sin_addr) != 1) {
		fprintf(stderr, "usage: exs_errors refused|noexsd ADDR PORT\n");
		return 2;
	}
	sa.sin_port = htons((uint16_t)atoi(argv[3]));
	if (exs_init(EXS_VERSION1)) {
		printf("FAIL exs_init: %s\n", strerror(errno));
		return 1;
	}
	fd = exs_socket(AF_INET, SOCK_SEQPACKET, 0);
	if (fd < 0) {
		printf("FAIL exs_socket: %s\n", strerror(errno));
		return 1;
	}
	if (!strcmp(argv[1], "refused")) {
		t = now();
		ret = exs_connect(fd, (struct sockaddr *)&sa, sizeof(sa), EXS_BLOCK, NULL, NULL, NULL);
		expect("blocking exs_connect to a port nobody listens on", ret, ECONNREFUSED, now() - t);
		/* the asynchronous form reports it in the event */
		q = exs_qcreate(1);
		t = now();
		ret = exs_connect(fd, (struct sockaddr *)&sa, sizeof(sa), 0, NULL, q, (void *)7);
		if (ret) {
			printf("FAIL async exs_connect did not start: %s\n", strerror(errno));
			failures++;
		} else if (exs_qdequeue(q, &ev, 1, NULL) != 1 || ev.exs_evt_type != EXS_EVT_CONNECT ||
			   ev.exs_evt_ahandle != (void *)7) {
			printf("FAIL async exs_connect: no EXS_EVT_CONNECT event\n");
			failures++;
		} else {
			errno = ev.exs_evt_errno;
			expect("async exs_connect event", ev.exs_evt_errno ? -1 : 0, ECONNREFUSED, now() - t);
		}
		if (exs_qdelete(q)) {
			printf("FAIL exs_qdelete after the connect event: %s\n", strerror(errno));
			failures++;
		}
	} else if (!strcmp(argv[1], "noexsd")) {
		t = now();
		ret = exs_connect(fd, (struct sockaddr *)&sa, sizeof(sa), EXS_BLOCK, NULL, NULL, NULL);
		expect("exs_connect without exsd", ret, ENETDOWN, now() - t);
		t = now();
		ret = exs_bind(fd, (struct sockaddr *)&sa, sizeof(sa));
		expect("exs_bind without exsd", ret, ENETDOWN, now() - t);
		t = now();
		ret = exs_listen(fd, 1);
		expect("exs_listen without exsd", ret, ENETDOWN, now() - t);
	} else {
		return 2;
	}
	exs_blocking_close(fd);
	printf("%s\n", failures ? "exs_errors: FAILED" : "exs_errors: all ok");
	return failures ? 1 : 0;
}
