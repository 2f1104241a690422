/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs_conf: what exsd's configuration does to a client, for config.sh.
 *
 *   exs_conf defaults                  prints "credits=N sp_max=M" of a new socket
 *   exs_conf bind ADDR PORT N [listen] binds N sockets to ADDR:PORT (listening
 *                                      on each with "listen"), one line each:
 *                                      "bind I: ok" or "bind I: error E (text)";
 *                                      then "ready pid P" and waits for SIGTERM
 */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <exs.h>

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
	if (argc < 5 || strcmp(argv[1], "bind") || inet_pton(AF_INET, argv[2], &sa.sin_addr) != 1) {
		fprintf(stderr, "usage: exs_conf defaults | bind ADDR PORT N [listen]\n");
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
