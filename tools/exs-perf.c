/*
 * exs-perf: EXS throughput, latency and connection-rate measurements, in
 * the manner of perftest. Run the same command on both ends, with the
 * server's address on the client:
 *
 *   exs-perf [options] blast|pingpong|connect            (server)
 *   exs-perf [options] blast|pingpong|connect ADDRESS    (client)
 *
 *   -p PORT      (default 18515)
 *   -s SIZES     list "1,64,4096" or range "1:16M" (powers of two in it);
 *                K/M/G suffixes
 *   -d DEPTHS    operations in flight, list (blast; default 1)
 *   -t TYPE      seqpacket (default) or stream
 *   -u           unregistered buffers (EXS_MHANDLE_UNREGISTERED)
 *   -B BYTES     blast: bytes per point (default 32M); -n N overrides
 *   -n N         iterations per point (pingpong default 2000, connect 200)
 *   -c           check every byte (never on by default: it costs time)
 *   -C           CSV output (one header line, one line per point)
 * The client prints one row per point; the server prints nothing but
 * errors. CPU % is user + system time of each process over the point's
 * wall time (100 = one core busy), from getrusage(2); the server's comes
 * back in its reply.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <exs.h>

enum mode { BLAST = 1, PINGPONG, CONNECT };

/* what the client tells the server before each point, and the answer */
struct hdr {
	uint32_t magic, mode, size, depth, count, check, unreg, last;
	double server_cpu, server_secs;
	uint64_t errors, pad[2];
};
#define HDR_MAGIC 0x45585046u

static int type = SOCK_SEQPACKET, unreg, check, csv;
static uint64_t blast_bytes = 32 << 20;
static int count_opt;

static void die(const char *what)
{
	fprintf(stderr, "exs-perf: %s: %s\n", what, strerror(errno));
	exit(1);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu_secs(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6;
}

static uint64_t parse_size(const char *s)
{
	char *e;
	uint64_t v = strtoull(s, &e, 10);

	switch (*e) {
	case 'k': case 'K': v <<= 10; break;
	case 'm': case 'M': v <<= 20; break;
	case 'g': case 'G': v <<= 30; break;
	}
	return v;
}

static int parse_list(const char *arg, uint64_t *out, int max)
{
	char buf[512], *tok, *save;
	int n = 0;

	snprintf(buf, sizeof(buf), "%s", arg);
	for (tok = strtok_r(buf, ",", &save); tok && n < max; tok = strtok_r(NULL, ",", &save)) {
		char *colon = strchr(tok, ':');

		if (colon) {
			*colon = 0;
			for (uint64_t v = parse_size(tok); v && v <= parse_size(colon + 1) && n < max; v *= 2)
				out[n++] = v;
		} else {
			out[n++] = parse_size(tok);
		}
	}
	return n;
}

static uint8_t pat(uint32_t msg, size_t k)
{
	return (uint8_t)(msg * 131u + k * 7u + 1u);
}

/* The client sends the point's header; the server echoes it back. */
static void xchg_hdr(int fd, struct hdr *h, bool client)
{
	struct hdr in;

	if (client && exs_write(fd, h, sizeof(*h)) != sizeof(*h))
		die("send header");
	if (exs_read(fd, &in, sizeof(in)) != sizeof(in) || in.magic != HDR_MAGIC)
		die("receive header");
	if (!client && exs_write(fd, &in, sizeof(in)) != sizeof(in))
		die("send header");
	if (client && memcmp(&in, h, sizeof(in)))
		die("the server did not echo the header");
	*h = in;
}

struct bufs {
	char **b;
	exs_mhandle_t *mh;
	int n;
};

static void bufs_get(struct bufs *B, int n, size_t size)
{
	B->n = n;
	B->b = calloc((size_t)n, sizeof(*B->b));
	B->mh = calloc((size_t)n, sizeof(*B->mh));
	for (int i = 0; i < n; i++) {
		B->b[i] = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);
		if (!B->b[i])
			die("buffer");
		memset(B->b[i], 0, size);
		B->mh[i] = unreg ? EXS_MHANDLE_UNREGISTERED : exs_mregister(B->b[i], size, 0);
		if (B->mh[i] == EXS_MHANDLE_INVALID)
			die("exs_mregister");
	}
}

static void bufs_put(struct bufs *B)
{
	for (int i = 0; i < B->n; i++) {
		if (!unreg)
			exs_mderegister(B->mh[i], 0);
		free(B->b[i]);
	}
	free(B->b);
	free(B->mh);
}

static exs_event_t wait_one(exs_qhandle_t q)
{
	exs_event_t ev;

	if (exs_qdequeue(q, &ev, 1, NULL) != 1)
		die("exs_qdequeue");
	if (ev.exs_evt_errno) {
		errno = ev.exs_evt_errno;
		die(ev.exs_evt_type == EXS_EVT_SEND ? "send" : "recv");
	}
	return ev;
}

/* ---- blast: the client sends, the server receives */

static uint64_t blast_recv(int fd, exs_qhandle_t q, const struct hdr *h)
{
	struct bufs B;
	uint64_t want = (uint64_t)h->size * h->count, got = 0, errors = 0;
	uint32_t msg = 0;
	int posted = 0;

	bufs_get(&B, (int)h->depth, h->size);
	for (int i = 0; i < (int)h->depth && (uint64_t)posted * h->size < want; i++, posted++)
		if (exs_recv(fd, B.b[i], h->size, 0, q, (void *)(intptr_t)i, B.mh[i]))
			die("exs_recv");
	while (got < want) {
		exs_event_t ev = wait_one(q);
		int i = (int)(intptr_t)ev.exs_evt_ahandle;
		size_t len = ev.exs_evt_union.exs_evt_xfer.exs_evt_length;

		if (h->check)
			for (size_t k = 0; k < len; k++)
				errors += B.b[i][k] != (char)pat(msg, k);
		msg++;
		got += len;
		if ((uint64_t)posted * h->size < want) {
			if (exs_recv(fd, B.b[i], h->size, 0, q, (void *)(intptr_t)i, B.mh[i]))
				die("exs_recv");
			posted++;
		}
	}
	bufs_put(&B);
	return errors;
}

static void blast_send(int fd, exs_qhandle_t q, const struct hdr *h)
{
	struct bufs B;
	uint32_t sent = 0, done = 0;

	bufs_get(&B, (int)h->depth, h->size);
	for (int i = 0; i < (int)h->depth && sent < h->count; i++, sent++) {
		if (h->check)
			for (size_t k = 0; k < h->size; k++)
				B.b[i][k] = (char)pat(sent, k);
		if (exs_send(fd, B.b[i], h->size, 0, q, (void *)(intptr_t)i, B.mh[i]))
			die("exs_send");
	}
	while (done < h->count) {
		exs_event_t ev = wait_one(q);
		int i = (int)(intptr_t)ev.exs_evt_ahandle;

		done++;
		if (sent < h->count) {
			if (h->check)
				for (size_t k = 0; k < h->size; k++)
					B.b[i][k] = (char)pat(sent, k);
			if (exs_send(fd, B.b[i], h->size, 0, q, (void *)(intptr_t)i, B.mh[i]))
				die("exs_send");
			sent++;
		}
	}
	bufs_put(&B);
}

/* ---- pingpong */

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static void pingpong(int fd, exs_qhandle_t q, const struct hdr *h, bool client, double *rtt)
{
	struct bufs B;
	uint32_t n = h->count;
	int sends_out = 0;

	bufs_get(&B, 2, h->size); /* 0: out, 1: in */
	if (!client && exs_recv(fd, B.b[1], h->size, 0, q, (void *)1, B.mh[1]))
		die("exs_recv");
	for (uint32_t i = 0; i < n; i++) {
		double t0 = now();

		if (client) {
			if (exs_recv(fd, B.b[1], h->size, 0, q, (void *)1, B.mh[1]) ||
			    exs_send(fd, B.b[0], h->size, 0, q, (void *)0, B.mh[0]))
				die("exs_send/exs_recv");
			wait_one(q);
			wait_one(q);
			rtt[i] = now() - t0;
		} else {
			/* the next ping may come before the last echo's completion */
			while (wait_one(q).exs_evt_type != EXS_EVT_RECV)
				sends_out--;
			if (i + 1 < n && exs_recv(fd, B.b[1], h->size, 0, q, (void *)1, B.mh[1]))
				die("exs_recv");
			if (exs_send(fd, B.b[0], h->size, 0, q, (void *)0, B.mh[0]))
				die("exs_send");
			sends_out++;
		}
	}
	while (sends_out-- > 0)
		wait_one(q);
	bufs_put(&B);
}

/* ---- connect */

static void connect_server(int lfd, const struct hdr *h)
{
	for (uint32_t i = 0; i < h->count; i++) {
		int fd = exs_blocking_accept(lfd, NULL, NULL);

		if (fd < 0 || exs_blocking_close(fd))
			die("accept/close");
	}
}

static void connect_client(const struct sockaddr_in *sa, const struct hdr *h, double *t)
{
	for (uint32_t i = 0; i < h->count; i++) {
		int fd = exs_socket(AF_INET, type, 0);
		double t0 = now();

		if (fd < 0 || exs_blocking_connect(fd, (const struct sockaddr *)sa, sizeof(*sa)))
			die("exs_connect");
		t[i] = now() - t0;
		if (exs_blocking_close(fd))
			die("exs_close");
	}
}

static const char *mode_name(int m)
{
	return m == BLAST ? "blast" : m == PINGPONG ? "pingpong" : "connect";
}

int main(int argc, char **argv)
{
	uint64_t sizes[64] = { 65536 }, depths[16] = { 1 };
	int nsizes = 1, ndepths = 1, port = 18515, o, mode, fd, lfd = -1;
	bool client;
	struct sockaddr_in sa = { .sin_family = AF_INET };
	exs_qhandle_t q;

	while ((o = getopt(argc, argv, "p:s:d:t:uB:n:cC")) != -1) {
		switch (o) {
		case 'p': port = atoi(optarg); break;
		case 's': nsizes = parse_list(optarg, sizes, 64); break;
		case 'd': ndepths = parse_list(optarg, depths, 16); break;
		case 't': type = !strcmp(optarg, "stream") ? SOCK_STREAM : SOCK_SEQPACKET; break;
		case 'u': unreg = 1; break;
		case 'B': blast_bytes = parse_size(optarg); break;
		case 'n': count_opt = atoi(optarg); break;
		case 'c': check = 1; break;
		case 'C': csv = 1; break;
		default: goto usage;
		}
	}
	if (optind >= argc)
		goto usage;
	mode = !strcmp(argv[optind], "blast") ? BLAST : !strcmp(argv[optind], "pingpong") ? PINGPONG
	       : !strcmp(argv[optind], "connect") ? CONNECT : 0;
	if (!mode || nsizes < 1 || ndepths < 1)
		goto usage;
	client = optind + 1 < argc;
	sa.sin_port = htons((uint16_t)port);
	if (client && inet_pton(AF_INET, argv[optind + 1], &sa.sin_addr) != 1)
		goto usage;
	for (int i = 0; i < nsizes; i++)
		if (!sizes[i] || sizes[i] > (1u << 30))
			goto usage;
	for (int i = 0; i < ndepths; i++)
		if (!depths[i] || depths[i] > 32)
			goto usage;
	if (exs_init(EXS_VERSION1))
		die("exs_init");
	q = exs_qcreate(64);
	if (!q)
		die("exs_qcreate");
	if (client) {
		double end = now() + 30;

		for (;;) { /* the server may still be starting */
			fd = exs_socket(AF_INET, type, 0);
			if (fd >= 0 && !exs_blocking_connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
				break;
			if (fd < 0 || errno != ECONNREFUSED || now() > end)
				die("exs_connect");
			exs_blocking_close(fd);
			usleep(100000);
		}
	} else {
		lfd = exs_socket(AF_INET, type, 0);
		if (lfd < 0 || exs_bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || exs_listen(lfd, 64))
			die("listen");
		fd = exs_blocking_accept(lfd, NULL, NULL);
		if (fd < 0)
			die("exs_blocking_accept");
	}
	if (csv && client)
		printf("tool,mode,type,registered,size,depth,count,seconds,gbps,msgs_per_s,lat_min_us,"
		       "lat_median_us,lat_p99_us,lat_p999_us,cpu_client_pct,cpu_server_pct,errors\n");
	else if (client)
		printf("%-9s %-9s %9s %5s %7s %10s %12s %9s %9s %9s %9s %7s %7s\n", "mode", "type", "size",
		       "depth", "count", "Gb/s", "msgs/s", "min_us", "med_us", "p99_us", "p999_us", "cpu_c%",
		       "cpu_s%");
	for (int si = 0; si < nsizes; si++)
		for (int di = 0; di < (mode == BLAST ? ndepths : 1); di++) {
			struct hdr h = { .magic = HDR_MAGIC, .mode = (uint32_t)mode };
			double t0, t1, c0, c1, *lat = NULL;
			uint64_t errors = 0;

			if (client) {
				h.size = (uint32_t)sizes[si];
				h.depth = (uint32_t)depths[di];
				h.check = (uint32_t)check;
				h.unreg = (uint32_t)unreg;
				h.last = si == nsizes - 1 && di == (mode == BLAST ? ndepths : 1) - 1;
				if (count_opt > 0)
					h.count = (uint32_t)count_opt;
				else if (mode == BLAST)
					h.count = (uint32_t)(blast_bytes / h.size < 16 ? 16
							   : blast_bytes / h.size > 20000 ? 20000
							   : blast_bytes / h.size);
				else
					h.count = mode == PINGPONG ? 2000 : 200;
				xchg_hdr(fd, &h, true);
			} else {
				xchg_hdr(fd, &h, false);
				if (h.mode != (uint32_t)mode)
					die("the client runs another mode");
				check = (int)h.check;
			}
			if (mode != BLAST)
				lat = calloc(h.count, sizeof(*lat));
			c0 = cpu_secs();
			t0 = now();
			if (mode == BLAST && client)
				blast_send(fd, q, &h);
			else if (mode == BLAST)
				errors = blast_recv(fd, q, &h);
			else if (mode == PINGPONG)
				pingpong(fd, q, &h, client, lat);
			else if (client)
				connect_client(&sa, &h, lat);
			else
				connect_server(lfd, &h);
			/* the server's result closes the point: it has received all */
			struct hdr r = h;
			if (!client) {
				t1 = now();
				c1 = cpu_secs();
				r.server_cpu = 100 * (c1 - c0) / (t1 - t0);
				r.server_secs = t1 - t0;
				r.errors = errors;
				if (exs_write(fd, &r, sizeof(r)) != sizeof(r))
					die("send result");
				free(lat);
				if (h.last)
					break;
				continue;
			}
			if (exs_read(fd, &r, sizeof(r)) != sizeof(r) || r.magic != HDR_MAGIC)
				die("receive result");
			t1 = now();
			c1 = cpu_secs();
			double secs = t1 - t0, cpu = 100 * (c1 - c0) / secs;
			double gbps = 0, mps = 0, lmin = 0, lmed = 0, l99 = 0, l999 = 0;
			if (mode == BLAST) {
				gbps = (double)h.size * h.count * 8 / secs / 1e9;
				mps = h.count / secs;
			} else {
				/* pingpong: one-way latency = round trip / 2 */
				double f = mode == PINGPONG ? 0.5e6 : 1e6;

				qsort(lat, h.count, sizeof(*lat), cmp_d);
				lmin = lat[0] * f;
				lmed = lat[h.count / 2] * f;
				l99 = lat[(size_t)(h.count * 0.99)] * f;
				l999 = lat[(size_t)(h.count * 0.999)] * f;
				mps = h.count / secs;
			}
			if (csv)
				printf("exs,%s,%s,%s,%u,%u,%u,%.4f,%.6g,%.1f,%.2f,%.2f,%.2f,%.2f,%.1f,%.1f,%llu\n",
				       mode_name(mode), type == SOCK_STREAM ? "stream" : "seqpacket",
				       unreg ? "no" : "yes", h.size, h.depth, h.count, secs, gbps, mps, lmin, lmed,
				       l99, l999, cpu, r.server_cpu, (unsigned long long)r.errors);
			else
				printf("%-9s %-9s %9u %5u %7u %10.4f %12.1f %9.2f %9.2f %9.2f %9.2f %7.1f %7.1f%s\n",
				       mode_name(mode), type == SOCK_STREAM ? "stream" : "seqpacket", h.size,
				       h.depth, h.count, gbps, mps, lmin, lmed, l99, l999, cpu, r.server_cpu,
				       r.errors ? "  DATA ERRORS" : "");
			fflush(stdout);
			free(lat);
			if (r.errors) {
				fprintf(stderr, "exs-perf: %llu bytes differ\n", (unsigned long long)r.errors);
				return 1;
			}
		}
	exs_blocking_close(fd);
	if (lfd >= 0)
		exs_blocking_close(lfd);
	exs_qdelete(q);
	return 0;
usage:
	fprintf(stderr, "usage: exs-perf [-p PORT] [-s SIZES] [-d DEPTHS] [-t seqpacket|stream] [-u] "
			"[-B BYTES] [-n N] [-c] [-C] blast|pingpong|connect [ADDRESS]\n");
	return 2;
}
