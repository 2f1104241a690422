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
 *   -B BYTES bulk: the client sends BYTES (K/M/G suffixes) to the server in
 *            messages of -M bytes (the last one shorter), -d of them in
 *            flight (default 4); the server checks every byte against a
 *            pattern of the stream offset, sees the EOF after the last, and
 *            prints progress each GiB and the GiB and Gb/s it verified
 * Exit 0 only if every message arrived intact; prints one summary line.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
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
 * (the iovec and handles live until its event: static, one set per send
 * in flight, `slot` of at most 64) */
static int send_gathered(int fd, uint8_t *buf, size_t len, int segs, exs_qhandle_t q, void *ah,
			 exs_mhandle_t mh, int slot)
{
	static struct iovec iov[64][EXS_IOV_MAX];
	static exs_mhandle_t mhs[64][EXS_IOV_MAX];
	static struct msghdr msg[64];
	size_t k = len < (size_t)segs ? len : (size_t)segs, off = 0;

	for (size_t i = 0; i < k; i++) {
		size_t part = len / k + (i < len % k);

		iov[slot][i].iov_base = buf + off;
		iov[slot][i].iov_len = part;
		mhs[slot][i] = mh;
		off += part;
	}
	memset(&msg[slot], 0, sizeof(msg[slot]));
	msg[slot].msg_iov = iov[slot];
	msg[slot].msg_iovlen = k;
	return exs_sendmsg(fd, &msg[slot], 0, q, ah, mhs[slot]) ? -1 : 0;
}

/* ---- bulk (-B): one direction, fixed-size messages, several in flight.
 * The byte at stream offset o is byte o % 8 of word(o / 8): a check of 8
 * bytes at a time, and a byte misplaced anywhere in the stream shows. */
static uint64_t word(uint64_t seed, uint64_t w)
{
	uint64_t x = (w + 1) * 0x9e3779b97f4a7c15ull ^ seed;

	return x ^ (x >> 29);
}

static uint8_t bulk_byte(uint64_t seed, uint64_t o)
{
	return (uint8_t)(word(seed, o / 8) >> (8 * (o % 8)));
}

static void bulk_fill(uint8_t *b, size_t n, uint64_t seed, uint64_t off)
{
	size_t k = 0;

	for (; k < n && (off + k) % 8; k++)
		b[k] = bulk_byte(seed, off + k);
	for (; k + 8 <= n; k += 8) {
		uint64_t w = word(seed, (off + k) / 8);

		memcpy(b + k, &w, 8); /* little-endian: byte o % 8 of the word */
	}
	for (; k < n; k++)
		b[k] = bulk_byte(seed, off + k);
}

/* the first wrong byte's index, or -1 */
static long bulk_verify(const uint8_t *b, size_t n, uint64_t seed, uint64_t off)
{
	size_t k = 0;

	for (; k < n && (off + k) % 8; k++)
		if (b[k] != bulk_byte(seed, off + k))
			return (long)k;
	for (; k + 8 <= n; k += 8) {
		uint64_t w = word(seed, (off + k) / 8), got;

		memcpy(&got, b + k, 8);
		if (got != w)
			break; /* the byte loop below names it */
	}
	for (; k < n; k++)
		if (b[k] != bulk_byte(seed, off + k))
			return (long)k;
	return -1;
}

static exs_event_t bulk_event(exs_qhandle_t q, uint64_t at)
{
	struct timeval stall = { 60, 0 };
	exs_event_t ev;
	int k = exs_qdequeue(q, &ev, 1, &stall);

	if (k < 0)
		die("exs_qdequeue");
	if (k == 0) {
		fprintf(stderr, "exs_xfer: bulk: no event for 60 s at byte %" PRIu64 "\n", at);
		exit(3);
	}
	if (ev.exs_evt_errno) {
		errno = ev.exs_evt_errno;
		die(ev.exs_evt_type == EXS_EVT_SEND ? "bulk send" : "bulk recv");
	}
	return ev;
}

/* the client: `total` bytes in messages of `max`, `depth` in flight */
/* send b[i]'s len bytes: one buffer, or `segs` elements (-g) */
static void bulk_post(int fd, exs_qhandle_t q, uint8_t **b, exs_mhandle_t *mh, int i, size_t len,
		      int segs)
{
	if (segs ? send_gathered(fd, b[i], len, segs, q, (void *)(intptr_t)i, mh[i], i)
		 : exs_send(fd, b[i], len, 0, q, (void *)(intptr_t)i, mh[i]))
		die(segs ? "exs_sendmsg" : "exs_send");
}

static void bulk_send(int fd, exs_qhandle_t q, uint8_t **b, exs_mhandle_t *mh, int depth, size_t max,
		      uint64_t total, uint64_t seed, int segs)
{
	uint64_t off = 0, done = 0;
	int out = 0;

	for (int i = 0; i < depth && off < total; i++, out++) {
		size_t len = total - off < max ? (size_t)(total - off) : max;

		bulk_fill(b[i], len, seed, off);
		bulk_post(fd, q, b, mh, i, len, segs);
		off += len;
	}
	while (out) {
		exs_event_t ev = bulk_event(q, done);
		int i = (int)(intptr_t)ev.exs_evt_ahandle;

		done += ev.exs_evt_union.exs_evt_xfer.exs_evt_length;
		out--;
		if (off < total) {
			size_t len = total - off < max ? (size_t)(total - off) : max;

			bulk_fill(b[i], len, seed, off);
			bulk_post(fd, q, b, mh, i, len, segs);
			off += len;
			out++;
		}
	}
	if (done != total) {
		fprintf(stderr, "exs_xfer: bulk: %" PRIu64 " bytes sent of %" PRIu64 "\n", done, total);
		exit(1);
	}
}

/* the server: receives are matched in the order they were started (exs(7)),
 * each checked at the stream offset it continues; then the EOF */
static void bulk_recv(int fd, exs_qhandle_t q, uint8_t **b, exs_mhandle_t *mh, int depth, size_t max,
		      uint64_t total, uint64_t seed, int type, double t0)
{
	uint64_t got = 0, next_gib = 1ull << 30;
	int posted = 0, head = 0;

	for (int i = 0; i < depth && (uint64_t)posted * max < total; i++, posted++)
		if (exs_recv(fd, b[i], max, 0, q, (void *)(intptr_t)i, mh[i]))
			die("exs_recv");
	while (got < total) {
		exs_event_t ev = bulk_event(q, got);
		int i = (int)(intptr_t)ev.exs_evt_ahandle;
		size_t len = ev.exs_evt_union.exs_evt_xfer.exs_evt_length;
		size_t want = total - got < max ? (size_t)(total - got) : max;
		long bad;

		if (i != head) {
			fprintf(stderr, "exs_xfer: bulk: receive %d completed before %d\n", i, head);
			exit(1);
		}
		head = (head + 1) % depth;
		if (len == 0 || len > want || (type == SOCK_SEQPACKET && len != want)) {
			fprintf(stderr, "exs_xfer: bulk: a receive of %zu bytes at byte %" PRIu64
				", expected %zu\n", len, got, want);
			exit(1);
		}
		bad = bulk_verify(b[i], len, seed, got);
		if (bad >= 0) {
			fprintf(stderr, "exs_xfer: bulk: byte %" PRIu64 " is wrong\n", got + (uint64_t)bad);
			exit(1);
		}
		got += len;
		posted--;
		if (got + (uint64_t)posted * max < total) {
			if (exs_recv(fd, b[i], max, 0, q, (void *)(intptr_t)i, mh[i]))
				die("exs_recv");
			posted++;
		}
		if (got >= next_gib) {
			printf("exs_xfer: %" PRIu64 " GiB verified, %.1f s\n", next_gib >> 30, now() - t0);
			fflush(stdout);
			next_gib += 1ull << 30;
		}
	}
	/* the client's close ends the stream: no byte more than `total` */
	ssize_t r = exs_recv(fd, b[0], max, EXS_BLOCK, NULL, NULL, mh[0]);

	if (r != 0) {
		fprintf(stderr, "exs_xfer: bulk: after %" PRIu64 " bytes, %zd more instead of EOF\n", got, r);
		exit(1);
	}
}

/* -B: the connection set up, bulk transfer one way; exit status as main's */
static int bulk(int fd, exs_qhandle_t q, int server, int type, int depth, size_t max, uint64_t total, uint64_t seed, int unreg,
		int segs)
{
	uint8_t *b[64];
	exs_mhandle_t mh[64];
	double t0, dt;

	for (int i = 0; i < depth; i++) {
		b[i] = aligned_alloc(4096, (max + 4095) & ~(size_t)4095);
		if (!b[i])
			die("malloc");
		mh[i] = unreg ? EXS_MHANDLE_UNREGISTERED
			      : exs_mregister(b[i], max, server ? 0 : EXS_MRF_RECV_DISABLE);
		if (mh[i] == EXS_MHANDLE_INVALID)
			die("exs_mregister");
	}
	t0 = now();
	if (server)
		bulk_recv(fd, q, b, mh, depth, max, total, seed, type, t0);
	else
		bulk_send(fd, q, b, mh, depth, max, total, seed, segs);
	dt = now() - t0;
	if (exs_blocking_close(fd))
		die("exs_blocking_close");
	for (int i = 0; i < depth; i++) {
		if (!unreg && exs_mderegister(mh[i], 0))
			die("exs_mderegister");
		free(b[i]);
	}
	printf("exs_xfer: %s %s bulk: %" PRIu64 " bytes (%.2f GiB) %s in %zu-byte messages, %d in flight, "
	       "%.1f s, %.3f Gb/s\n",
	       server ? "server" : "client", type == SOCK_STREAM ? "stream" : "seqpacket", total,
	       (double)total / (1 << 30), server ? "received and verified" : "sent", max, depth, dt,
	       (double)total * 8 / dt / 1e9);
	return 0;
}

int main(int argc, char **argv)
{
	int n = 1000, type = SOCK_SEQPACKET, unreg = 0, segs = 0, depth = 4, o, fd, lfd = -1, server;
	size_t max = 1 << 20;
	uint64_t seed = 1, sent = 0, rcvd = 0, total = 0;
	char *end;
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
	while ((o = getopt(argc, argv, "n:M:s:t:ur:g:B:d:")) != -1) {
		switch (o) {
		case 'n': n = atoi(optarg); break;
		case 'M': max = strtoul(optarg, NULL, 0); break;
		case 's': seed = strtoull(optarg, NULL, 0); break;
		case 't': type = !strcmp(optarg, "stream") ? SOCK_STREAM : SOCK_SEQPACKET; break;
		case 'u': unreg = 1; break;
		case 'r': retry = atof(optarg); break;
		case 'g': segs = atoi(optarg); break;
		case 'B':
			total = strtoull(optarg, &end, 0);
			total <<= *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
			break;
		case 'd': depth = atoi(optarg); break;
		default: goto usage;
		}
	}
	if (n <= 0 || max == 0 || max > 1ul << 30 || segs < 0 || segs > EXS_IOV_MAX || depth < 1 || depth > 64)
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
	if (total) {
		if (lfd >= 0 && exs_blocking_close(lfd))
			die("exs_blocking_close (listener)");
		return bulk(fd, q, server, type, depth, max, total, seed, unreg, segs);
	}
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
		if (segs && send_gathered(fd, sbuf, slen, segs, q, (void *)2, smh, 0))
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
			"[-t seqpacket|stream] [-u] [-r SECS] [-g SEGS] [-B BYTES [-d DEPTH]]\n");
	return 2;
}
