/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs_early: connects in turn to two addresses (two devices), so that each
 * connect offers exsd the QP of the device its process was routed to last
 * (exs_control.proto, Connect.early): taken when the route leads there
 * again, destroyed and rebuilt for the route when it does not.
 *
 *   exs_early server ADDR_A ADDR_B PORT N   listens on both; serves N connects
 *   exs_early client ADDR_A ADDR_B PORT PATTERN
 *       PATTERN: A and B, one connect each to that address (e.g. AABBA)
 * Each connect carries one checked message each way, then closes; the
 * client waits 200 ms after each close, time for its next spare to be
 * built. Prints "listening", then one line per connect; exit 0 if every
 * message came back intact.
 */
#include <arpa/inet.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <exs.h>

#define MSG 1000

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void addr_of(const char *ip, const char *port, struct sockaddr_in *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)atoi(port));
	if (inet_pton(AF_INET, ip, &sa->sin_addr) != 1) {
		fprintf(stderr, "exs_early: bad address %s\n", ip);
		exit(2);
	}
}

static void fill(unsigned char *b, int seed)
{
	for (int i = 0; i < MSG; i++)
		b[i] = (unsigned char)(seed * 31 + i * 7);
}

static int serve(struct sockaddr_in sa[2], int n)
{
	struct exs_acceptaddr a = { NULL, 0, NULL };
	exs_qhandle_t q = exs_qcreate(8);
	int lfd[2];

	if (q == EXS_QHANDLE_INVALID)
		die("exs_qcreate");
	for (int i = 0; i < 2; i++) {
		lfd[i] = exs_socket(AF_INET, SOCK_SEQPACKET, 0);
		if (lfd[i] < 0 || exs_bind(lfd[i], (struct sockaddr *)&sa[i], sizeof(sa[i])) ||
		    exs_listen(lfd[i], 4) || exs_accept(lfd[i], &a, 1, 0, q))
			die("listen");
	}
	printf("listening\n");
	fflush(stdout);
	for (int k = 0; k < n; k++) {
		unsigned char buf[MSG];
		exs_event_t ev;
		int fd;

		if (exs_qdequeue(q, &ev, 1, NULL) != 1 || ev.exs_evt_type != EXS_EVT_ACCEPT ||
		    ev.exs_evt_errno)
			die("accept event");
		fd = ev.exs_evt_union.exs_evt_accept.exs_evt_new_socket;
		for (int i = 0; i < 2; i++)
			if (ev.exs_evt_socket == lfd[i] && exs_accept(lfd[i], &a, 1, 0, q))
				die("exs_accept");
		if (exs_blocking_recv(fd, buf, sizeof(buf), 0, EXS_MHANDLE_UNREGISTERED) != MSG ||
		    exs_blocking_send(fd, buf, MSG, 0, EXS_MHANDLE_UNREGISTERED) != MSG)
			die("echo");
		exs_blocking_close(fd);
	}
	return 0;
}

static int client(struct sockaddr_in sa[2], const char *pattern)
{
	int bad = 0;

	for (int k = 0; pattern[k]; k++) {
		unsigned char out[MSG], in[MSG];
		int which = pattern[k] == 'B', fd = exs_socket(AF_INET, SOCK_SEQPACKET, 0);
		bool ok;

		fill(out, k);
		memset(in, 0, sizeof(in));
		if (fd < 0 || exs_blocking_connect(fd, (struct sockaddr *)&sa[which], sizeof(sa[which])))
			die("exs_connect");
		ok = exs_blocking_send(fd, out, MSG, 0, EXS_MHANDLE_UNREGISTERED) == MSG &&
		     exs_blocking_recv(fd, in, sizeof(in), 0, EXS_MHANDLE_UNREGISTERED) == MSG &&
		     !memcmp(in, out, MSG);
		printf("%s connect %d to %c: %d bytes each way\n", ok ? "ok  " : "FAIL", k + 1,
		       pattern[k], MSG);
		bad += !ok;
		exs_blocking_close(fd);
		usleep(200000);
	}
	return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa[2];

	if (argc != 6 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
		fprintf(stderr, "usage: see the head of exs_early.c\n");
		return 2;
	}
	if (exs_init(EXS_VERSION1))
		die("exs_init");
	addr_of(argv[2], argv[4], &sa[0]);
	addr_of(argv[3], argv[4], &sa[1]);
	if (!strcmp(argv[1], "server"))
		return serve(sa, atoi(argv[5]));
	if (strspn(argv[5], "AB") != strlen(argv[5]))
		return 2;
	return client(sa, argv[5]);
}
