/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs_hold: opens one EXS connection, moves a known amount of data, then
 * holds it open so that exsctl can be checked against what happened.
 *
 *   exs_hold server|client ADDR PORT [-t seqpacket|stream] [-n N] [-z BYTES] [-c CREDITS]
 * The client sends N messages of BYTES and then receives N; the server the
 * other way round. Then it prints "ready"; SIGUSR1 closes the connection
 * (prints "closed"), SIGTERM exits.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <exs.h>

static void die(const char *what)
{
	fprintf(stderr, "exs_hold: %s: %s\n", what, strerror(errno));
	exit(1);
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int type = SOCK_SEQPACKET, n = 5, credits = 0, server, fd, lfd = -1, o, sig;
	size_t size = 1000;
	sigset_t set;
	char *buf;
	exs_mhandle_t mh;

	if (argc < 4 || inet_pton(AF_INET, argv[2], &sa.sin_addr) != 1) {
		fprintf(stderr, "usage: exs_hold server|client ADDR PORT [-t type] [-n N] [-z BYTES] [-c CREDITS]\n");
		return 2;
	}
	server = !strcmp(argv[1], "server");
	sa.sin_port = htons((uint16_t)atoi(argv[3]));
	optind = 4;
	while ((o = getopt(argc, argv, "t:n:z:c:")) != -1) {
		switch (o) {
		case 't': type = !strcmp(optarg, "stream") ? SOCK_STREAM : SOCK_SEQPACKET; break;
		case 'n': n = atoi(optarg); break;
		case 'z': size = strtoul(optarg, NULL, 0); break;
		case 'c': credits = atoi(optarg); break;
		default: return 2;
		}
	}
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (exs_init(EXS_VERSION1))
		die("exs_init");
	buf = calloc(1, size);
	fd = exs_socket(AF_INET, type, 0);
	if (!buf || fd < 0)
		die("exs_socket");
	if (credits > 0 && exs_fcntl(fd, EXS_F_SETFLOWCONTROLCREDITS, credits) < 0)
		die("exs_fcntl");
	if (server) {
		lfd = fd;
		if (exs_bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || exs_listen(lfd, 2))
			die("listen");
		printf("listening pid %d\n", (int)getpid());
		fd = exs_blocking_accept(lfd, NULL, NULL);
		if (fd < 0)
			die("exs_blocking_accept");
	} else if (exs_blocking_connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		die("exs_blocking_connect");
	}
	mh = exs_mregister(buf, size, 0);
	if (mh == EXS_MHANDLE_INVALID)
		die("exs_mregister");
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < n; i++) {
			bool sending = (pass == 0) != server;
			ssize_t r = sending ? exs_blocking_send(fd, buf, size, 0, mh)
					    : exs_blocking_recv(fd, buf, size, 0, mh);

			if (r != (ssize_t)size)
				die(sending ? "send" : "recv");
		}
	printf("ready pid %d\n", (int)getpid());
	for (;;) {
		if (sigwait(&set, &sig))
			continue;
		if (sig == SIGTERM)
			return 0;
		if (fd >= 0) {
			int ret = exs_blocking_close(fd);

			printf("closed %s\n", ret ? strerror(errno) : "ok");
			fd = -1;
		}
	}
}
