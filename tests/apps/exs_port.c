/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs_port: binds one EXS socket and says what happened.
 *
 *   exs_port ADDR PORT [hold]
 * Prints "bound PORT" or "error ERRNO (text)" on one line; with "hold", a
 * bound socket listens and is kept until SIGTERM. Exit 0 if bound.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <exs.h>

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	sigset_t set;
	int fd, sig;

	if (argc < 3 || argc > 4 || inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1) {
		fprintf(stderr, "usage: exs_port ADDR PORT [hold]\n");
		return 2;
	}
	sa.sin_port = htons((uint16_t)atoi(argv[2]));
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (exs_init(EXS_VERSION1) || (fd = exs_socket(AF_INET, SOCK_SEQPACKET, 0)) < 0) {
		printf("error %d (%s) before bind\n", errno, strerror(errno));
		return 1;
	}
	if (exs_bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    (argc == 4 && exs_listen(fd, 1))) {
		printf("error %d (%s)\n", errno, strerror(errno));
		return 1;
	}
	printf("bound %s\n", argv[2]);
	if (argc == 4)
		sigwait(&set, &sig);
	exs_blocking_close(fd);
	return 0;
}
