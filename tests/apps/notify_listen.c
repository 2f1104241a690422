/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * notify_listen PATH SECS: be systemd's NOTIFY_SOCKET for a test. Binds a
 * Unix datagram socket at PATH and prints each message it gets (its
 * assignments one per line) until SECS have passed or SIGTERM.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct pollfd p = { .events = POLLIN };
	char buf[4096];
	time_t end;

	if (argc != 3 || strlen(argv[1]) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "usage: notify_listen PATH SECS\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	strcpy(sa.sun_path, argv[1]);
	unlink(argv[1]);
	p.fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (p.fd < 0 || bind(p.fd, (struct sockaddr *)&sa, sizeof(sa))) {
		perror("notify_listen");
		return 1;
	}
	end = time(NULL) + atoi(argv[2]);
	while (time(NULL) < end) {
		ssize_t n;

		if (poll(&p, 1, 200) <= 0)
			continue;
		n = recv(p.fd, buf, sizeof(buf) - 1, 0);
		if (n <= 0)
			continue;
		buf[n] = 0;
		printf("%s%s", buf, buf[n - 1] == '\n' ? "" : "\n");
	}
	unlink(argv[1]);
	return 0;
}
