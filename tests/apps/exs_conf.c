/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs_conf: what exsd's configuration does to a client, for config.sh.
 *
 *   exs_conf defaults                  prints "credits=N sp_max=M" of a new socket
 *   exs_conf bind ADDR PORT N [listen] binds N sockets to ADDR:PORT (listening
 *                                      on each with "listen"), one line each:
 *                                      "bind I: ok" or "bind I: error E (text)";
 *                                      then "ready pid P" and waits for SIGTERM
 *   exs_conf connect ADDR PORT MS      one blocking exs_connect with a timeout of
 *                                      MS ms (-1: NULL); prints "connect: ok T" or
 *                                      "connect: error E T", T its milliseconds
 *   exs_conf accept ADDR PORT MS       listens, prints "ready pid P", accepts
 *                                      one connection after MS ms and prints
 *                                      "accept: ok" or "accept: error E"
 */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <exs.h>

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000;
}

static int connect_or_accept(bool active, struct sockaddr_in *sa, long ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
	int fd = exs_socket(AF_INET, SOCK_SEQPACKET, 0), nfd, ret;
	long t0;

	if (fd < 0)
		return 1;
	if (active) {
		t0 = now_ms();
		ret = exs_connect(fd, (struct sockaddr *)sa, sizeof(*sa), EXS_BLOCK,
				  ms < 0 ? NULL : &tv, NULL, NULL);
		if (ret)
			printf("connect: error %d %ld\n", errno, now_ms() - t0);
		else
			printf("connect: ok %ld\n", now_ms() - t0);
		return ret ? 1 : 0;
	}
	if (exs_bind(fd, (struct sockaddr *)sa, sizeof(*sa)) || exs_listen(fd, 8)) {
		printf("listen: error %d\n", errno);
		return 1;
	}
	printf("ready pid %d\n", (int)getpid());
	if (ms > 0)
		nanosleep(&(struct timespec){ .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000 },
			  NULL);
	nfd = exs_blocking_accept(fd, NULL, NULL);
	if (nfd < 0)
		printf("accept: error %d\n", errno);
	else
		printf("accept: ok\n");
	return nfd < 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	sigset_t set;
	int fd, n, sig;
	bool listening;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (exs_init(EXS_VERSION1))
		return 1;
	if (argc == 2 && !strcmp(argv[1], "defaults")) {
		fd = exs_socket(AF_INET, SOCK_SEQPACKET, 0);
		if (fd < 0)
			return 1;
		printf("credits=%d sp_max=%d\n", exs_fcntl(fd, EXS_F_GETFLOWCONTROLCREDITS, 0),
		       exs_fcntl(fd, EXS_F_GETSPMAXSIZE, 0));
		return 0;
	}
	if (argc == 5 && (!strcmp(argv[1], "connect") || !strcmp(argv[1], "accept")) &&
	    inet_pton(AF_INET, argv[2], &sa.sin_addr) == 1) {
		sa.sin_port = htons((uint16_t)atoi(argv[3]));
		return connect_or_accept(argv[1][0] == 'c', &sa, atol(argv[4]));
	}
	if (argc < 5 || strcmp(argv[1], "bind") || inet_pton(AF_INET, argv[2], &sa.sin_addr) != 1) {
		fprintf(stderr, "usage: exs_conf defaults | bind ADDR PORT N [listen] |\n"
				"       connect ADDR PORT MS | accept ADDR PORT MS\n");
		return 2;
	}
	sa.sin_port = htons((uint16_t)atoi(argv[3]));
	n = atoi(argv[4]);
	listening = argc > 5 && !strcmp(argv[5], "listen");
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	for (int i = 0; i < n && i < 64; i++) {
		fd = exs_socket(AF_INET, SOCK_SEQPACKET, 0);
		if (fd < 0 || exs_bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
		    (listening && exs_listen(fd, 8)))
			printf("bind %d: error %d (%s)\n", i, errno, strerror(errno));
		else
			printf("bind %d: ok\n", i);
	}
	printf("ready pid %d\n", (int)getpid());
	while (sigwait(&set, &sig))
		;
	return 0;
}
