/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs_guard: what a peer can reach in a receiver's registered region.
 *
 *   exs_guard server ADDR PORT [-n N] [-S BYTES] [-t seqpacket|stream] [-a]
 *       One exs_mregister region: guard | slot A | guard | slot B | guard
 *       (guards 4 KiB of 0xa5). Message i is received into slot i % 2,
 *       then 1 byte goes back. After each receive it checks the guards and
 *       the other slot, whose message completed earlier: nothing may have
 *       changed. -a registers with EXS_MRF_ADVERT_ONLY.
 *   exs_guard client ADDR PORT [-n N] [-S BYTES] [-t ...]
 *       Sends N messages of BYTES (message i: every byte i + 1), each after
 *       the previous one's reply. Built as exs_guard_hostile, its libexs
 *       writes where it was not invited (EXS_TEST_HOSTILE=past|stale).
 *
 * The server prints "exs_guard: server: K of N messages intact, then
 * <how it ended>; guards and completed buffers unchanged" and exits 0, or
 * names the first changed byte and exits 1. The client exits 0 if all N
 * went, 3 if the connection failed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <exs.h>

#define GUARD 4096
#define GUARD_BYTE 0xa5

static void die(const char *what)
{
	fprintf(stderr, "exs_guard: %s: %s\n", what, strerror(errno));
	exit(2);
}

/* The first byte of b[0..n) that is not v, or -1. */
static long differs(const uint8_t *b, size_t n, uint8_t v)
{
	for (size_t k = 0; k < n; k++)
		if (b[k] != v)
			return (long)k;
	return -1;
}

static int serve(int fd, int n, size_t sz, int flags, uint8_t *reg)
{
	uint8_t *slot[2] = { reg + GUARD, reg + 2 * GUARD + sz };
	const uint8_t *guard[3] = { reg, reg + GUARD + sz, reg + 2 * GUARD + 2 * sz };
	exs_mhandle_t mh = exs_mregister(reg, 3 * GUARD + 2 * sz, flags);
	uint8_t ack = 1;
	int i, end = 0;

	if (mh == EXS_MHANDLE_INVALID)
		die("exs_mregister");
	for (i = 0; i < n; i++) {
		uint8_t *b = slot[i % 2];
		ssize_t r = exs_recv(fd, b, sz, EXS_BLOCK | MSG_WAITALL, NULL, NULL, mh);
		long bad;

		if (r <= 0) {
			end = r < 0 ? errno : 0;
			break;
		}
		for (int g = 0; g < 3; g++) {
			if ((bad = differs(guard[g], GUARD, GUARD_BYTE)) >= 0) {
				printf("exs_guard: server: message %d: guard %d changed at byte %ld "
				       "(0x%02x): a peer wrote outside the advertised buffer\n",
				       i, g, bad, guard[g][bad]);
				return 1;
			}
		}
		if ((size_t)r != sz || (bad = differs(b, sz, (uint8_t)(i + 1))) >= 0) {
			printf("exs_guard: server: message %d: %zd bytes, byte %ld wrong\n", i, r,
			       (size_t)r != sz ? -1L : bad);
			return 1;
		}
		if (i && (bad = differs(slot[(i + 1) % 2], sz, (uint8_t)i)) >= 0) {
			printf("exs_guard: server: message %d's buffer changed at byte %ld after "
			       "it completed: a peer wrote into a finished receive\n", i - 1, bad);
			return 1;
		}
		if (exs_send(fd, &ack, 1, EXS_BLOCK, NULL, NULL, EXS_MHANDLE_UNREGISTERED) != 1) {
			end = errno;
			i++;
			break;
		}
	}
	printf("exs_guard: server: %d of %d messages intact, then %s; guards and completed "
	       "buffers unchanged\n", i, n, i == n ? "the end" : end ? strerror(end) : "EOF");
	return 0;
}

static int send_all(int fd, int n, size_t sz)
{
	uint8_t *b = aligned_alloc(4096, (sz + 4095) & ~(size_t)4095), ack;
	exs_mhandle_t mh;

	if (!b)
		die("malloc");
	mh = exs_mregister(b, sz, EXS_MRF_RECV_DISABLE);
	if (mh == EXS_MHANDLE_INVALID)
		die("exs_mregister");
	for (int i = 0; i < n; i++) {
		memset(b, i + 1, sz);
		ssize_t r = exs_send(fd, b, sz, EXS_BLOCK, NULL, NULL, mh);

		if (r == (ssize_t)sz)
			r = exs_recv(fd, &ack, 1, EXS_BLOCK, NULL, NULL, EXS_MHANDLE_UNREGISTERED);
		if (r != 1) {
			printf("exs_guard: client: message %d: %s\n", i, r ? strerror(errno) : "EOF");
			return 3;
		}
	}
	printf("exs_guard: client: %d messages of %zu bytes sent\n", n, sz);
	return 0;
}

int main(int argc, char **argv)
{
	int n = 20, type = SOCK_SEQPACKET, flags = 0, o, fd, ret;
	size_t sz = 8192;
	struct sockaddr_in sa = { .sin_family = AF_INET };

	if (argc < 4 || (strcmp(argv[1], "server") && strcmp(argv[1], "client")) ||
	    inet_pton(AF_INET, argv[2], &sa.sin_addr) != 1)
		goto usage;
	sa.sin_port = htons((uint16_t)atoi(argv[3]));
	optind = 4;
	while ((o = getopt(argc, argv, "n:S:t:a")) != -1) {
		switch (o) {
		case 'n': n = atoi(optarg); break;
		case 'S': sz = strtoul(optarg, NULL, 0); break;
		case 't': type = !strcmp(optarg, "stream") ? SOCK_STREAM : SOCK_SEQPACKET; break;
		case 'a': flags = EXS_MRF_ADVERT_ONLY; break;
		default: goto usage;
		}
	}
	if (n <= 0 || n > 1000000 || sz < 64 || sz > (64u << 20))
		goto usage;
	if (exs_init(EXS_VERSION1))
		die("exs_init");
	if (!strcmp(argv[1], "server")) {
		uint8_t *reg = aligned_alloc(4096, 3 * GUARD + 2 * ((sz + 4095) & ~(size_t)4095));
		int lfd = exs_socket(AF_INET, type, 0);

		if (!reg)
			die("malloc");
		memset(reg, GUARD_BYTE, 3 * GUARD + 2 * sz);
		if (lfd < 0 || exs_bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || exs_listen(lfd, 1))
			die("listen");
		printf("exs_guard: listening\n");
		fflush(stdout);
		if ((fd = exs_blocking_accept(lfd, NULL, NULL)) < 0)
			die("exs_blocking_accept");
		ret = serve(fd, n, sz, flags, reg);
	} else {
		fd = exs_socket(AF_INET, type, 0);
		if (fd < 0 || exs_connect(fd, (struct sockaddr *)&sa, sizeof(sa), EXS_BLOCK, NULL, NULL,
					  NULL))
			die("exs_connect");
		ret = send_all(fd, n, sz);
	}
	fflush(stdout);
	exs_blocking_close(fd);
	return ret;
usage:
	fprintf(stderr, "usage: exs_guard server|client ADDR PORT [-n N] [-S BYTES] "
			"[-t seqpacket|stream] [-a]\n");
	return 2;
}
