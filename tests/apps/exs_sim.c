// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * exs_sim: seed 000 §4.2's simulation and its remote display, over one
 * SOCK_SEQPACKET connection. The server ("simulation") shares a block of
 * records by one persistent send and rewrites them without pause; each
 * record carries a sequence number, values derived from it, and a
 * checksum of both. The client ("display") samples single records (and
 * now and then the whole block) with exs_recv_offset for a few seconds.
 *
 *   exs_sim server ADDR PORT [-t SECS]
 *   exs_sim client ADDR PORT [-t SECS] [-r SECS]
 *
 * A sample whose checksum matches must be whole: its values are those of
 * its sequence number, and a record's sequence numbers never go back;
 * those must hold, and the numbers must advance over the run. A torn
 * sample (the READ met a record being rewritten: checksum wrong) is
 * counted and reported, not failed (seed: the reader must be impervious
 * to inconsistencies). The client then sends its counts as one normal
 * message (the other direction), and the server cancels its persistent
 * send, which must end with ECANCELED; the client's exs_recv_offset then
 * fails with EINVAL. Exit 0 when all that holds.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <exs.h>

#define NREC 256
#define NVAL 12
#define WAIT_S 20

struct rec {
	volatile uint64_t seq;
	volatile uint32_t val[NVAL];
	volatile uint64_t sum;
};
_Static_assert(sizeof(struct rec) == 64, "a record is 64 bytes");

static uint32_t val_of(uint64_t seq, unsigned r, unsigned i)
{
	return (uint32_t)(seq * 2654435761u) ^ (r << 16) ^ (i * 40503u);
}

static uint64_t sum_of(uint64_t seq, const volatile uint32_t *v)
{
	uint64_t h = 1469598103934665603ull ^ seq;

	for (unsigned i = 0; i < NVAL; i++)
		h = (h ^ v[i]) * 1099511628211ull;
	return h;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
	printf("FAIL %s: %s\n", what, strerror(errno));
	exit(1);
}

static void update(struct rec *b, unsigned r)
{
	uint64_t s = b[r].seq + 1;

	b[r].seq = s;
	for (unsigned i = 0; i < NVAL; i++)
		b[r].val[i] = val_of(s, r, i);
	b[r].sum = sum_of(s, b[r].val);
}

struct counts {
	uint64_t samples, torn, whole, bad, back, advanced;
};

static int server(struct sockaddr_in *sa, double secs)
{
	static struct rec blk[NREC];
	struct counts k;
	exs_qhandle_t q = exs_qcreate(64);
	exs_mhandle_t mh = exs_mregister(blk, sizeof(blk), 0);
	exs_event_t ev;
	struct timeval poll0 = { 0, 0 };
	uint64_t sweeps = 0;
	double t0;
	int lfd = exs_socket(AF_INET, SOCK_SEQPACKET, 0), fd;

	if (!q || !mh || lfd < 0 || exs_bind(lfd, (struct sockaddr *)sa, sizeof(*sa)) ||
	    exs_listen(lfd, 1))
		die("listen");
	for (unsigned r = 0; r < NREC; r++)
		update(blk, r);
	printf("listening\n");
	fflush(stdout);
	fd = exs_blocking_accept(lfd, NULL, NULL);
	if (fd < 0)
		die("accept");
	printf("connected\n");
	exs_blocking_close(lfd);
	if (exs_send(fd, blk, sizeof(blk), EXS_PERSISTENT, q, (void *)1, mh))
		die("persistent send");
	if (exs_recv(fd, &k, sizeof(k), 0, q, (void *)2, EXS_MHANDLE_UNREGISTERED))
		die("receive of the counts");
	t0 = now();
	/* the simulation: every record rewritten, sweep after sweep, until
	 * the display's counts come (or far too long has passed) */
	for (;;) {
		for (unsigned r = 0; r < NREC; r++)
			update(blk, r);
		sweeps++;
		if (exs_qdequeue(q, &ev, 1, &poll0) == 1)
			break;
		if (now() - t0 > secs + WAIT_S) {
			printf("FAIL the display's counts never came\n");
			return 1;
		}
	}
	if (ev.exs_evt_type != EXS_EVT_RECV || ev.exs_evt_errno ||
	    ev.exs_evt_union.exs_evt_xfer.exs_evt_length != sizeof(k)) {
		printf("FAIL the counts: event type %d errno %d\n", ev.exs_evt_type, ev.exs_evt_errno);
		return 1;
	}
	printf("simulation: %llu sweeps of %d records in %.1f s (%.0f record updates/s)\n",
	       (unsigned long long)sweeps, NREC, now() - t0, sweeps * NREC / (now() - t0));
	if (exs_cancel(fd, (void *)1, EXS_CANCEL_SEND))
		die("cancel");
	struct timeval tmo = { WAIT_S, 0 };
	if (exs_qdequeue(q, &ev, 1, &tmo) != 1 || ev.exs_evt_type != EXS_EVT_SEND ||
	    ev.exs_evt_errno != ECANCELED) {
		printf("FAIL the persistent send did not end with ECANCELED\n");
		return 1;
	}
	printf("persistent send ended: ECANCELED\n");
	exs_blocking_close(fd);
	exs_mderegister(mh, 0);
	exs_qdelete(q);
	return 0;
}

/* one sample of n records from record r: counted, and checked */
static void check(const struct rec *s, unsigned r, unsigned n, uint64_t *last, struct counts *k)
{
	for (unsigned j = 0; j < n; j++, r++) {
		const struct rec *x = &s[j];

		k->samples++;
		if (x->sum != sum_of(x->seq, x->val)) {
			k->torn++;
			continue;
		}
		k->whole++;
		for (unsigned i = 0; i < NVAL; i++)
			if (x->val[i] != val_of(x->seq, r, i)) {
				k->bad++;
				break;
			}
		if (x->seq < last[r])
			k->back++;
		else if (x->seq > last[r] && last[r])
			k->advanced++;
		last[r] = x->seq;
	}
}

static int client(struct sockaddr_in *sa, double secs, double retry)
{
	static struct rec s[NREC];
	static uint64_t last[NREC];
	struct counts k = { 0 };
	exs_mhandle_t mh = exs_mregister(s, sizeof(s), 0);
	unsigned seed = 12345, whole_reads = 0;
	double t0 = now(), t;
	int fd;

	for (;;) {
		fd = exs_socket(AF_INET, SOCK_SEQPACKET, 0);
		if (fd < 0)
			die("socket");
		if (!exs_blocking_connect(fd, (struct sockaddr *)sa, sizeof(*sa)))
			break;
		if (errno != ECONNREFUSED || now() - t0 > retry)
			die("connect");
		exs_blocking_close(fd);
		usleep(200 * 1000);
	}
	/* a plain receive waits for the persistent send and reads all of it */
	if (exs_blocking_recv(fd, s, sizeof(s), 0, mh) != (ssize_t)sizeof(s))
		die("the first read of the block");
	check(s, 0, NREC, last, &k);
	t0 = now();
	while ((t = now()) - t0 < secs) {
		unsigned r;

		seed = seed * 1103515245u + 12345u;
		r = (seed >> 8) % NREC;
		if ((seed >> 4) % 64 == 0) {
			if (exs_blocking_recv(fd, s, sizeof(s), 0, mh) != (ssize_t)sizeof(s))
				die("a read of the block");
			check(s, 0, NREC, last, &k);
			whole_reads++;
		} else {
			if (exs_recv_offset(fd, s, sizeof(*s), EXS_BLOCK, (off_t)r * sizeof(*s), NULL,
					    NULL, mh) != (ssize_t)sizeof(*s))
				die("exs_recv_offset");
			check(s, r, 1, last, &k);
		}
	}
	t = now() - t0;
	printf("display: %llu record samples (%u whole-block reads) in %.1f s, %.0f reads/s\n",
	       (unsigned long long)k.samples, whole_reads, t,
	       (k.samples - (uint64_t)whole_reads * NREC + whole_reads) / t);
	printf("display: %llu whole, %llu torn (%.3f%%), %llu inconsistent, %llu went back, "
	       "%llu advanced\n", (unsigned long long)k.whole, (unsigned long long)k.torn,
	       k.samples ? 100.0 * k.torn / k.samples : 0.0, (unsigned long long)k.bad,
	       (unsigned long long)k.back, (unsigned long long)k.advanced);
	if (exs_blocking_send(fd, &k, sizeof(k), 0, EXS_MHANDLE_UNREGISTERED) != sizeof(k))
		die("send of the counts");
	/* the server cancels: reads go on until it has, then fail EINVAL */
	for (t0 = now();;) {
		ssize_t n = exs_recv_offset(fd, s, sizeof(*s), EXS_BLOCK, 0, NULL, NULL, mh);

		if (n == -1 && errno == EINVAL)
			break;
		if (n != (ssize_t)sizeof(*s) || now() - t0 > WAIT_S)
			die("exs_recv_offset after the counts");
	}
	printf("display: the persistent send ended (exs_recv_offset: EINVAL)\n");
	exs_blocking_close(fd);
	exs_mderegister(mh, 0);
	if (k.bad || k.back || !k.advanced || k.samples < 100) {
		printf("FAIL a checksummed sample was inconsistent, went back, or nothing advanced\n");
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	double secs = 3, retry = 0;
	int o;

	if (argc < 4 || inet_pton(AF_INET, argv[2], &sa.sin_addr) != 1 || atoi(argv[3]) <= 0) {
		fprintf(stderr, "usage: exs_sim server|client ADDR PORT [-t SECS] [-r SECS]\n");
		return 2;
	}
	sa.sin_port = htons((uint16_t)atoi(argv[3]));
	optind = 4;
	while ((o = getopt(argc, argv, "t:r:")) != -1) {
		if (o == 't')
			secs = atof(optarg);
		else if (o == 'r')
			retry = atof(optarg);
		else
			return 2;
	}
	if (secs <= 0 || secs > 600 || retry < 0 || retry > 600) {
		fprintf(stderr, "exs_sim: -t and -r take 0..600 s\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (exs_init(EXS_VERSION))
		die("exs_init");
	return strcmp(argv[1], "server") ? client(&sa, secs, retry) : server(&sa, secs);
}
