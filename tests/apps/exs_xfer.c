/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs_xfer: moves N messages of pseudo-random sizes in both directions over
 * one EXS connection and checks every byte. Both ends derive sizes and
 * contents from the same seed, so nothing but the data crosses the wire.
 *
 *   exs_xfer server ADDR PORT [options]     (accepts one connection)
 *   exs_xfer client ADDR PORT [options]
 *   -n N     messages each way (default 1000)   -M BYTES  largest (default 1 MiB)
 *   -s SEED  (default 1)   -t seqpacket|stream   -u  unregistered buffers
 *   -r SECS  client: retry refused connects for this long (default 0)
 *   -g SEGS  send each message by exs_sendmsg in SEGS elements (1..EXS_IOV_MAX,
 *            fewer for a message shorter than SEGS bytes): more than the
 *            device's SGE limit (EXS_F_GETSGEMAX) tests the split into writes
 * Exit 0 only if every message arrived intact; prints one summary line.
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

static uint64_t rng(uint64_t *s)
{
	/* splitmix64 */
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* log-uniform in [1, max]: as many tiny messages as huge ones */
static size_t msg_size(uint64_t seed, int dir, int i, size_t max)
{
	uint64_t s = seed * 1000003u + (uint64_t)dir * 7919u + (uint64_t)i;
	int bits = 0;

	while ((1ull << bits) < max)
		bits++;
	size_t n = (size_t)(rng(&s) % (1ull << (rng(&s) % (uint64_t)(bits + 1)))) + 1;
	return n > max ? max : n;
}

static uint8_t byte_at(uint64_t seed, int dir, int i, size_t off)
{
	uint64_t x = (seed << 20) ^ ((uint64_t)dir << 60) ^ ((uint64_t)i << 32) ^ off;

	x *= 0x9e3779b97f4a7c15ull;
	return (uint8_t)(x >> 56);
}

static void fill(uint8_t *b, size_t n, uint64_t seed, int dir, int i)
{
	for (size_t k = 0; k < n; k++)
		b[k] = byte_at(seed, dir, i, k);
}

static long verify(const uint8_t *b, size_t n, uint64_t seed, int dir, int i)
{
	for (size_t k = 0; k < n; k++)
		if (b[k] != byte_at(seed, dir, i, k))
			return (long)k;
	return -1;
}

static void die(const char *what)
{
	fprintf(stderr, "exs_xfer: %s: %s\n", what, strerror(errno));
	exit(1);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* the message as up to `segs` elements of near-equal size, one exs_sendmsg
 * (the iovec and handles live until its event: static, one send at a time) */
static int send_gathered(int fd, uint8_t *buf, size_t len, int segs, exs_qhandle_t q,
			 exs_mhandle_t mh)
{
	static struct iovec iov[EXS_IOV_MAX];
	static exs_mhandle_t mhs[EXS_IOV_MAX];
	static struct msghdr msg;
	size_t k = len < (size_t)segs ? len : (size_t)segs, off = 0;

	for (size_t i = 0; i < k; i++) {
		size_t part = len / k + (i < len % k);

		iov[i].iov_base = buf + off;
		iov[i].iov_len = part;
		mhs[i] = mh;
		off += part;
	}
	memset(&msg, 0, sizeof(msg));
	msg.msg_iov = iov;
	msg.msg_iovlen = k;
	return exs_sendmsg(fd, &msg, 0, q, (void *)2, mhs) ? -1 : 0;
}

int main(int argc, char **argv)
{
	int n = 1000, type = SOCK_SEQPACKET, unreg = 0, segs = 0, o, fd, lfd = -1, server;
	size_t max = 1 << 20;
	uint64_t seed = 1, sent = 0, rcvd = 0;
	double retry = 0, t0;
	struct sockaddr_in sa = { .sin_family = AF_INET };
	exs_mhandle_t smh = EXS_MHANDLE_UNREGISTERED, rmh = EXS_MHANDLE_UNREGISTERED;
	exs_qhandle_t q;
	uint8_t *sbuf, *rbuf;

	if (argc < 4)
		goto usage;
	server = !strcmp(argv[1], "server");
	if (!server && strcmp(argv[1], "client"))
		goto usage;
	if (inet_pton(AF_INET, argv[2], &sa.sin_addr) != 1)
		goto usage;
	sa.sin_port = htons((uint16_t)atoi(argv[3]));
	optind = 4;
	while ((o = getopt(argc, argv, "n:M:s:t:ur:g:")) != -1) {
		switch (o) {
		case 'n': n = atoi(optarg); break;
		case 'M': max = strtoul(optarg, NULL, 0); break;
		case 's': seed = strtoull(optarg, NULL, 0); break;
		case 't': type = !strcmp(optarg, "stream") ? SOCK_STREAM : SOCK_SEQPACKET; break;
		case 'u': unreg = 1; break;
		case 'r': retry = atof(optarg); break;
		case 'g': segs = atoi(optarg); break;
		default: goto usage;
		}
	}
	if (n <= 0 || max == 0 || segs < 0 || segs > EXS_IOV_MAX)
		goto usage;

	if (exs_init(EXS_VERSION1))
		die("exs_init");
	sbuf = aligned_alloc(64, (max + 63) & ~(size_t)63);
	rbuf = aligned_alloc(64, (max + 63) & ~(size_t)63);
	if (!sbuf || !rbuf)
		die("malloc");
	q = exs_qcreate(4);
	if (!q)
		die("exs_qcreate");
	if (server) {
		struct sockaddr_in peer;
		socklen_t plen = sizeof(peer);

		lfd = exs_socket(AF_INET, type, 0);
		if (lfd < 0 || exs_bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || exs_listen(lfd, 4))
			die("listen");
		printf("exs_xfer: listening on %s:%s\n", argv[2], argv[3]);
		fflush(stdout);
		fd = exs_blocking_accept(lfd, (struct sockaddr *)&peer, &plen);
		if (fd < 0)
			die("exs_blocking_accept");
	} else {
		double end = now() + retry;

		for (;;) {
			fd = exs_socket(AF_INET, type, 0);
			if (fd < 0)
				die("exs_socket");
			if (!exs_connect(fd, (struct sockaddr *)&sa, sizeof(sa), EXS_BLOCK, NULL, NULL, NULL))
				break;
			if (errno != ECONNREFUSED || now() > end)
				die("exs_connect");
			exs_blocking_close(fd);
			usleep(200000);
		}
	}
	printf("exs_xfer: connected\n");
	if (segs)
		printf("exs_xfer: %d elements per send, device gathers %d per RDMA write\n", segs,
		       exs_fcntl(fd, EXS_F_GETSGEMAX));
	fflush(stdout);
	if (!unreg) {
		smh = exs_mregister(sbuf, max, EXS_MRF_RECV_DISABLE);
		rmh = exs_mregister(rbuf, max, 0);
		if (smh == EXS_MHANDLE_INVALID || rmh == EXS_MHANDLE_INVALID)
			die("exs_mregister");
	}

	t0 = now();
	int out_dir = server ? 1 : 0, in_dir = server ? 0 : 1;
	for (int i = 0; i < n; i++) {
		size_t slen = msg_size(seed, out_dir, i, max);
		size_t rlen = msg_size(seed, in_dir, i, max);
		size_t got = 0;
		exs_event_t ev[2];
		int pending = 2;

		fill(sbuf, slen, seed, out_dir, i);
		/* the receive goes first, so both directions move at once */
		if (exs_recv(fd, rbuf, max, 0, q, (void *)1, rmh))
			die("exs_recv");
		if (segs && send_gathered(fd, sbuf, slen, segs, q, smh))
			die("exs_sendmsg");
		if (!segs && exs_send(fd, sbuf, slen, 0, q, (void *)2, smh))
			die("exs_send");
		while (pending) {
			struct timeval stall = { 60, 0 };
			int k = exs_qdequeue(q, ev, 2, &stall);

			if (k < 0)
				die("exs_qdequeue");
			if (k == 0) {
				fprintf(stderr, "exs_xfer: message %d: no event for 60 s, %d pending\n", i, pending);
				return 3;
			}
			for (int j = 0; j < k; j++, pending--) {
				struct exs_evt_xfer *x = &ev[j].exs_evt_union.exs_evt_xfer;

				if (ev[j].exs_evt_errno) {
					errno = ev[j].exs_evt_errno;
					fprintf(stderr, "exs_xfer: message %d: %s failed\n", i,
						ev[j].exs_evt_type == EXS_EVT_SEND ? "send" : "recv");
					die("event");
				}
				if (ev[j].exs_evt_type == EXS_EVT_SEND) {
					if (x->exs_evt_length != slen) {
						fprintf(stderr, "exs_xfer: message %d: sent %zu of %zu\n", i,
							x->exs_evt_length, slen);
						return 1;
					}
					sent += slen;
				} else {
					got = x->exs_evt_length;
					if (x->exs_evt_amount_lost) {
						fprintf(stderr, "exs_xfer: message %d: %zu bytes lost\n", i,
							x->exs_evt_amount_lost);
						return 1;
					}
				}
			}
		}
		/* STREAM may split a message over receives; gather the rest */
		while (got < rlen && type == SOCK_STREAM) {
			ssize_t r = exs_recv(fd, rbuf + got, max - got, EXS_BLOCK, NULL, NULL, rmh);

			if (r <= 0)
				die("exs_recv (rest)");
			got += (size_t)r;
		}
		if (got != rlen) {
			fprintf(stderr, "exs_xfer: message %d: got %zu bytes, expected %zu\n", i, got, rlen);
			return 1;
		}
		long bad = verify(rbuf, rlen, seed, in_dir, i);
		if (bad >= 0) {
			fprintf(stderr, "exs_xfer: message %d: byte %ld of %zu is wrong\n", i, bad, rlen);
			return 1;
		}
		rcvd += rlen;
	}
	double dt = now() - t0;

	/* orderly end: both sides close; the peer's FIN ends its receives */
	if (exs_blocking_close(fd))
		die("exs_blocking_close");
	if (lfd >= 0 && exs_blocking_close(lfd))
		die("exs_blocking_close (listener)");
	if (!unreg && (exs_mderegister(smh, 0) || exs_mderegister(rmh, 0)))
		die("exs_mderegister");
	if (exs_qdelete(q))
		die("exs_qdelete");
	free(sbuf);
	free(rbuf);
	printf("exs_xfer: %s %s %s%s: %d messages each way, %llu bytes sent, %llu bytes received "
	       "and verified, %.2f s, %.1f MB/s\n",
	       server ? "server" : "client", type == SOCK_STREAM ? "stream" : "seqpacket",
	       unreg ? "unregistered" : "registered", segs ? " gathered" : "", n, (unsigned long long)sent,
	       (unsigned long long)rcvd, dt, (double)(sent + rcvd) / dt / 1e6);
	return 0;
usage:
	fprintf(stderr, "usage: exs_xfer server|client ADDR PORT [-n N] [-M BYTES] [-s SEED] "
			"[-t seqpacket|stream] [-u] [-r SECS] [-g SEGS]\n");
	return 2;
}
