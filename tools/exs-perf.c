/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs-perf: EXS throughput, latency and connection-rate measurements, in
 * the manner of perftest. Run the same command on both ends, with the
 * server's address on the client:
 *
 *   exs-perf [options] blast|pingpong|connect|psample|ptrans            (server)
 *   exs-perf [options] blast|pingpong|connect|psample|ptrans ADDRESS    (client)
 *
 * psample: the server shares a block of SIZE bytes by a persistent send
 * (exs(7), Persistent transfers); the client reads it N times, one
 * receive at a time: reads/s, Gb/s and each read's latency (not halved).
 * ptrans: seed 000 §4.2's double-buffered transaction over two sockets,
 * each side a persistent send with EXS_READ_NOTIFY of one buffer: the
 * client changes A, waits for the notify that the server read A, reads B;
 * the server reads A, changes B, waits for the notify that B was read.
 * Latency: one client round (change A .. B read); Gb/s: the payload of
 * one direction (SIZE per round), as seed 000 §5 counts it.
 *
 *   -p PORT      (default 18515)
 *   -s SIZES     list "1,64,4096" or range "1:16M" (powers of two in it);
 *                K/M/G suffixes
 *   -d DEPTHS    operations in flight, list (blast; default 1); connect: D > 1
 *                starts D connects at once per round, against D accepts
 *                at once, and msgs/s is the listener's accept rate
 *   -t TYPE      seqpacket (default) or stream
 *   -u           unregistered buffers (EXS_MHANDLE_UNREGISTERED)
 *   -B BYTES     blast: bytes per point (default 32M); -n N overrides
 *   -T SECONDS   blast: after an untimed warm-up that measures the rate,
 *                send min(BYTES, SECONDS at that rate) per point
 *   -n N         iterations per point (pingpong default 2000, connect 200)
 *   -c           check every byte (never on by default: it costs time)
 *   -C           CSV output (one header line, one line per point)
 *   --sp N       small packets (guide 7.2): EXS_F_SETSPMAXSIZE N and
 *                unregistered buffers
 *   --inline N   EXS_F_SETINLINEMAXSIZE N (guide 7.3)
 *   --busy-poll  EXS_FD_BUSYPOLL by the guide's 7.5 idiom
 *   --sbuf N     stream buffer (guide 7.6): EXS_F_SETSTREAMBUFSIZE N
 *   --advert-only buffers registered with EXS_MRF_ADVERT_ONLY: each
 *                advertised receive registered alone, for its advert
 *   --phases     pingpong: each side times its calls (three more clock reads
 *                per round trip, four on the server) and prints on stderr the median time
 *                inside exs_recv, inside exs_send and in its waits, and
 *                how many round trips (client) or turns (server) took
 *                over 100 us, by the phase that took longest
 * The fcntl options go on the socket before connect or listen, on both
 * ends; when the library refuses one (or <exs.h> lacks the name) exs-perf
 * prints "exs-perf: unsupported: ..." and exits 3.
 *
 * The server prints "exs-perf: ready" on stderr once it listens. The client
 * prints one row per point. The timed window is the one perftest uses: from
 * the first post to the last completion, with buffers allocated and
 * registered before it. Blast is timed at the sender; pingpong per round
 * trip (one-way = round trip / 2; min, median, mean, p99, p99.9), after 16
 * untimed round trips (PP_WARMUP) that take a process's one-time costs
 * out of the window. CPU % is
 * user + system time of each process (all its threads) over the same
 * window, from getrusage(2); the server's comes back in its reply.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <exs.h>

enum mode { BLAST = 1, PINGPONG, CONNECT, PSAMPLE, PTRANS };
#define MAX_CONNECT_DEPTH 256 /* connect: connects started at once */

/* what the client tells the server before each point, and the answer */
struct hdr {
	uint32_t magic, mode, size, depth, count, check, unreg, last;
	double server_cpu, server_secs;
	uint64_t errors, pad[2];
};
#define HDR_MAGIC 0x45585046u

static int type = SOCK_SEQPACKET, unreg, check, csv, busy_poll, mreg_flags, phases;
static long sp_max = -1, inline_max = -1, sbuf = -1; /* -1: leave the library's default */
static uint64_t blast_bytes = 32 << 20;
static double min_secs; /* -T: 0 = the count comes from -B alone */
static int count_opt;

static void die(const char *what)
{
	fprintf(stderr, "exs-perf: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* The harness tells "this library cannot do that mode" from a failure. */
static void unsupported(const char *what, int err)
{
	fprintf(stderr, "exs-perf: unsupported: %s: %s\n", what, strerror(err));
	exit(3);
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

/* a measured window: wall and CPU time at its start, then its lengths */
struct win {
	double t, c;
};

static void win_open(struct win *w)
{
	w->c = cpu_secs();
	w->t = now();
}

static void win_close(struct win *w)
{
	w->t = now() - w->t;
	w->c = cpu_secs() - w->c;
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

/* The §7 options, on a socket before connect or listen (an accepted
 * socket inherits them from its listener). */
static void set_opt(int fd, int cmd, const char *name, int v)
{
	if (v >= 0 && exs_fcntl(fd, cmd, v) < 0)
		unsupported(name, errno);
}

static void tune(int fd)
{
	set_opt(fd, EXS_F_SETSPMAXSIZE, "EXS_F_SETSPMAXSIZE", sp_max);
	set_opt(fd, EXS_F_SETINLINEMAXSIZE, "EXS_F_SETINLINEMAXSIZE", inline_max);
	set_opt(fd, EXS_F_SETSTREAMBUFSIZE, "EXS_F_SETSTREAMBUFSIZE", sbuf);
	if (busy_poll) {
		int fl = exs_fcntl(fd, EXS_F_GETFD, 0);

		if (fl < 0 || exs_fcntl(fd, EXS_F_SETFD, fl | EXS_FD_BUSYPOLL) < 0)
			unsupported("EXS_F_SETFD EXS_FD_BUSYPOLL", errno);
	}
}

/* what the connection ended up with, for the raw logs */
static void show_tuning(int fd)
{
	fprintf(stderr, "exs-perf: connected: sp_max %d, inline_max %d, stream buffer %d, fd flags %d\n",
		exs_fcntl(fd, EXS_F_GETSPMAXSIZE, 0), exs_fcntl(fd, EXS_F_GETINLINEMAXSIZE, 0),
		exs_fcntl(fd, EXS_F_GETSTREAMBUFSIZE, 0), exs_fcntl(fd, EXS_F_GETFD, 0));
}

static const char *variant(void)
{
	static char v[32];

	snprintf(v, sizeof(v), "%s%s%s%s", sp_max >= 0 ? "+sp" : "", inline_max >= 0 ? "+inline" : "",
		 sbuf >= 0 ? "+sbuf" : "", busy_poll ? "+busy" : "");
	return v[0] ? v + 1 : "default";
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
		B->mh[i] = unreg ? EXS_MHANDLE_UNREGISTERED : exs_mregister(B->b[i], size, mreg_flags);
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

/* ---- blast: the client sends, the server receives; each is timed from
 * its first post to its last completion */

static uint64_t blast_recv(int fd, exs_qhandle_t q, const struct hdr *h, struct bufs *B, struct win *w)
{
	uint64_t want = (uint64_t)h->size * h->count, got = 0, errors = 0;
	uint32_t msg = 0;
	int posted = 0; /* receives out: a STREAM one may bring less than its size */

	win_open(w);
	for (int i = 0; i < (int)h->depth && (uint64_t)posted * h->size < want; i++, posted++)
		if (exs_recv(fd, B->b[i], h->size, 0, q, (void *)(intptr_t)i, B->mh[i]))
			die("exs_recv");
	while (got < want) {
		exs_event_t ev = wait_one(q);
		int i = (int)(intptr_t)ev.exs_evt_ahandle;
		size_t len = ev.exs_evt_union.exs_evt_xfer.exs_evt_length;

		if (h->check)
			for (size_t k = 0; k < len; k++)
				errors += B->b[i][k] != (char)pat(msg, k);
		msg++;
		got += len;
		posted--;
		if (got + (uint64_t)posted * h->size < want) {
			if (exs_recv(fd, B->b[i], h->size, 0, q, (void *)(intptr_t)i, B->mh[i]))
				die("exs_recv");
			posted++;
		}
	}
	win_close(w);
	return errors;
}

static void fill(char *b, const struct hdr *h, uint32_t msg)
{
	if (h->check)
		for (size_t k = 0; k < h->size; k++)
			b[k] = (char)pat(msg, k);
}

static void blast_send(int fd, exs_qhandle_t q, const struct hdr *h, struct bufs *B, struct win *w)
{
	uint32_t sent = 0, done = 0;

	fill(B->b[0], h, 0); /* checked runs time the pattern too, unchecked ones nothing */
	win_open(w);
	for (int i = 0; i < (int)h->depth && sent < h->count; i++, sent++) {
		if (i)
			fill(B->b[i], h, sent);
		if (exs_send(fd, B->b[i], h->size, 0, q, (void *)(intptr_t)i, B->mh[i]))
			die("exs_send");
	}
	while (done < h->count) {
		exs_event_t ev = wait_one(q);
		int i = (int)(intptr_t)ev.exs_evt_ahandle;

		done++;
		if (sent < h->count) {
			fill(B->b[i], h, sent);
			if (exs_send(fd, B->b[i], h->size, 0, q, (void *)(intptr_t)i, B->mh[i]))
				die("exs_send");
			sent++;
		}
	}
	win_close(w);
}

/* ---- pingpong */

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* --phases: where each round trip's time went, on this side: inside
 * exs_recv, inside exs_send, and in the waits (exs_qdequeue) */
enum { PH_RECV, PH_SEND, PH_WAIT, PH_N };

/* the median of v[0..n) (sorts it) */
static double median(double *v, uint32_t n)
{
	qsort(v, n, sizeof(*v), cmp_d);
	return n ? v[n / 2] : 0;
}

/* Print one side's phases (seconds in ph[i][k]) on stderr: the median of
 * each, and the round trips (client) or turns (server) over 100 us, by
 * the phase that took longest. */
static void phases_report(double (*ph)[PH_N], uint32_t n, bool client)
{
	static const char *const name[PH_N] = { "exs_recv", "exs_send", "waits" };
	uint32_t over = 0, longest[PH_N] = { 0 };
	double *v = malloc(n * sizeof(*v)), med[PH_N];

	if (!v)
		die("malloc");
	for (uint32_t i = 0; i < n; i++) {
		int m = 0;

		if (ph[i][PH_RECV] + ph[i][PH_SEND] + ph[i][PH_WAIT] < 100e-6)
			continue;
		over++;
		for (int k = 1; k < PH_N; k++)
			m = ph[i][k] > ph[i][m] ? k : m;
		longest[m]++;
	}
	for (int k = 0; k < PH_N; k++) {
		for (uint32_t i = 0; i < n; i++)
			v[i] = ph[i][k];
		med[k] = median(v, n) * 1e6;
	}
	fprintf(stderr,
		"exs-perf: phases (%s, %u): median us %s %.2f %s %.2f %s %.2f; over 100 us %u, "
		"longest in %s %u %s %u %s %u\n",
		client ? "client" : "server", n, name[0], med[0], name[1], med[1], name[2], med[2],
		over, name[0], longest[0], name[1], longest[1], name[2], longest[2]);
	free(v);
}

/* Round trips before the timed ones: a process's first transfers pay
 * one-time costs that are no round trip's (in a TCG guest every new code
 * path is translated: the first exs_recv and exs_send took 10-200 ms
 * between them, and a 1,000-round-trip defaults mean was 3-4 us longer
 * with them in the window). rstream starts its clock after one untimed
 * exchange; perftest leaves out its two slowest samples. */
#define PP_WARMUP 16

/* Post the round trip's receive into B->b[1] (a STREAM receive waits for
 * the whole message: the stream buffer may bring it in several pieces) */
static void pp_recv(int fd, exs_qhandle_t q, const struct hdr *h, struct bufs *B)
{
	if (exs_recv(fd, B->b[1], h->size, type == SOCK_STREAM ? MSG_WAITALL : 0, q, (void *)1,
		     B->mh[1]))
		die("exs_recv");
}

/*
 * One side's send of a round trip, and the receive of the next message
 * if `recv`. With `late` (SOCK_STREAM, and SEQPACKET up to the negotiated
 * small packets) the receive is posted after the send, so the post runs
 * while the message travels and the peer turns it round; a message that
 * comes first waits in a small packet or the stream buffer, or for the
 * advert that follows this side's message. Posted first it was inside
 * every turn (2-3 us of a 25 us one-way on rxe). A larger SEQPACKET
 * message needs its advert before the peer can send: that receive goes
 * first (posted after, 8 % slower on siw at 4 KiB). With ph, stores the
 * time inside exs_recv and exs_send since t0, and returns when it ended.
 */
static double pp_send(int fd, exs_qhandle_t q, const struct hdr *h, struct bufs *B, bool recv,
		      bool late, double t0, double *ph)
{
	double t1 = 0, t2 = 0, t3 = 0;

	if (recv && !late)
		pp_recv(fd, q, h, B);
	if (ph)
		t1 = now();
	if (exs_send(fd, B->b[0], h->size, 0, q, (void *)0, B->mh[0]))
		die("exs_send");
	if (ph)
		t2 = now();
	if (recv && late)
		pp_recv(fd, q, h, B);
	if (ph) {
		t3 = now();
		ph[PH_RECV] = t1 - t0 + t3 - t2;
		ph[PH_SEND] = t2 - t1;
	}
	return t3;
}

/* n round trips on fd, timed or not (late: see pp_send): the client
 * stores each in rtt[i] (the server passes NULL), each side its phases in
 * ph (if not NULL). sends_out carries the server's unreported echoes from
 * call to call. */
static void pp_rounds(int fd, exs_qhandle_t q, const struct hdr *h, bool client, struct bufs *B,
		      uint32_t n, bool timed, bool late, double *rtt, double (*ph)[PH_N],
		      int *sends_out)
{
	for (uint32_t i = 0; i < n; i++) {
		double t0 = timed ? now() : 0, t1 = 0;
		double *p = ph ? ph[i] : NULL;

		if (client) {
			t1 = pp_send(fd, q, h, B, true, late, t0, p);
			wait_one(q);
			wait_one(q);
			double t2 = timed ? now() : 0;

			if (rtt)
				rtt[i] = t2 - t0;
			if (p)
				p[PH_WAIT] = t2 - t1;
		} else {
			/* the next ping may come before the last echo's completion */
			while (wait_one(q).exs_evt_type != EXS_EVT_RECV)
				(*sends_out)--;
			if (p) {
				t1 = now();
				p[PH_WAIT] = t1 - t0;
			}
			/* the next round trip's receive; after the last, none (the
			 * untimed rounds are followed by the timed ones) */
			pp_send(fd, q, h, B, i + 1 < n || !timed, late, t1, p);
			(*sends_out)++;
		}
	}
}

static void pingpong(int fd, exs_qhandle_t q, const struct hdr *h, bool client, struct bufs *B, double *rtt,
		     struct win *w)
{
	uint32_t n = h->count, warm = n ? PP_WARMUP : 0;
	int sends_out = 0;
	double (*ph)[PH_N] = NULL;
	int sp = exs_fcntl(fd, EXS_F_GETSPMAXSIZE, 0); /* negotiated; -1: none */
	bool late = type == SOCK_STREAM || (sp > 0 && h->size <= (uint32_t)sp);

	if (phases && n && !(ph = calloc(n, sizeof(*ph))))
		die("calloc");
	/* B->b[0]: out, B->b[1]: in; the server's first receive is posted
	 * before the first round trip, untimed or not */
	if (!client && n)
		pp_recv(fd, q, h, B);
	pp_rounds(fd, q, h, client, B, warm, false, late, NULL, NULL, &sends_out);
	win_open(w);
	pp_rounds(fd, q, h, client, B, n, true, late, rtt, ph, &sends_out);
	while (sends_out-- > 0)
		wait_one(q);
	win_close(w);
	if (ph) {
		phases_report(ph, n, client);
		free(ph);
	}
}

/* ---- persistent transfers (exs(7)) */

/* the next event, which must be of `type` at fd */
static exs_event_t wait_for(exs_qhandle_t q, int fd, int type)
{
	exs_event_t ev = wait_one(q);

	if (ev.exs_evt_type != type || ev.exs_evt_socket != fd) {
		errno = EPROTO;
		die("an event out of turn");
	}
	return ev;
}

/* end our persistent send `ah` on fd: cancel, its last event ECANCELED
 * (read-notify events of reads still under way come first) */
static void unpersist(int fd, exs_qhandle_t q, void *ah)
{
	exs_event_t ev;

	if (exs_cancel(fd, ah, EXS_CANCEL_SEND))
		die("exs_cancel");
	do {
		if (exs_qdequeue(q, &ev, 1, NULL) != 1 || ev.exs_evt_type != EXS_EVT_SEND ||
		    ev.exs_evt_ahandle != ah)
			die("cancel of the persistent send");
	} while (!ev.exs_evt_errno);
	if (ev.exs_evt_errno != ECANCELED)
		die("cancel of the persistent send");
}

/* the client: until the peer's persistent send is gone, reads go on */
static void await_unpersist(int fd, struct bufs *B)
{
	for (;;) {
		ssize_t n = exs_recv_offset(fd, B->b[0], 1, EXS_BLOCK, 0, NULL, NULL, B->mh[0]);

		if (n == -1 && errno == EINVAL)
			return;
		if (n != 1)
			die("exs_recv_offset");
	}
}

static void psample(int fd, exs_qhandle_t q, const struct hdr *h, bool client, struct bufs *B, double *lat,
		    struct win *w)
{
	char done = 1;

	win_open(w);
	if (!client) { /* B->b[0]: the block; the client's "done" in B->b[1] */
		if (exs_send(fd, B->b[0], h->size, EXS_PERSISTENT, q, (void *)2, B->mh[0]) ||
		    exs_recv(fd, B->b[1], 1, 0, q, (void *)1, EXS_MHANDLE_UNREGISTERED))
			die("persistent send");
		wait_for(q, fd, EXS_EVT_RECV);
		win_close(w);
		unpersist(fd, q, (void *)2);
		return;
	}
	for (uint32_t i = 0; i < h->count; i++) {
		double t0 = now();

		if (exs_recv(fd, B->b[0], h->size, 0, q, (void *)1, B->mh[0]))
			die("exs_recv");
		wait_for(q, fd, EXS_EVT_RECV);
		lat[i] = now() - t0;
	}
	win_close(w);
	if (exs_send(fd, &done, 1, EXS_BLOCK, NULL, NULL, EXS_MHANDLE_UNREGISTERED) != 1)
		die("exs_send");
	await_unpersist(fd, B);
}

/* B->b[0]: our shared buffer, B->b[1]: where the peer's is read into */
static void ptrans(int fd, int lfd, exs_qhandle_t q, const struct sockaddr_in *sa, const struct hdr *h,
		   bool client, struct bufs *B, double *lat, struct win *w)
{
	/* the client shares A on fd, the server B on a second socket */
	int fd2 = client ? exs_socket(AF_INET, type, 0) : exs_blocking_accept(lfd, NULL, NULL);
	int mine = client ? fd : fd2, peers = client ? fd2 : fd;

	if (fd2 < 0 || (client && exs_blocking_connect(fd2, (const struct sockaddr *)sa, sizeof(*sa))))
		die("the second connection");
	if (exs_send(mine, B->b[0], h->size, EXS_PERSISTENT | EXS_READ_NOTIFY, q, (void *)3, B->mh[0]))
		die("persistent send");
	win_open(w);
	for (uint32_t i = 0; i < h->count; i++) {
		double t0 = now();

		if (client) {
			B->b[0][0] = (char)i; /* a new request */
			wait_for(q, mine, EXS_EVT_SEND); /* the server read A: B is ready */
			if (exs_recv(peers, B->b[1], h->size, 0, q, (void *)1, B->mh[1]))
				die("exs_recv");
			wait_for(q, peers, EXS_EVT_RECV);
			lat[i] = now() - t0;
		} else {
			if (exs_recv(peers, B->b[1], h->size, 0, q, (void *)1, B->mh[1]))
				die("exs_recv");
			wait_for(q, peers, EXS_EVT_RECV);
			B->b[0][0] = B->b[1][0]; /* the answer */
			wait_for(q, mine, EXS_EVT_SEND); /* the client read B */
		}
	}
	win_close(w);
	unpersist(mine, q, (void *)3);
	if (client) /* the server's block must be let go of before the close */
		await_unpersist(peers, B);
	if (exs_blocking_close(fd2))
		die("close of the second connection");
}

/* ---- connect */

/* One event from q, or die. */
static void next_event(exs_qhandle_t q, exs_event_t *ev, const char *what)
{
	struct timeval stall = { 120, 0 };

	if (exs_qdequeue(q, ev, 1, &stall) != 1)
		die(what);
	if (ev->exs_evt_errno) {
		errno = ev->exs_evt_errno;
		die(what);
	}
}

/* Depth 1: one blocking accept at a time. Depth D: D accepts started at
 * once, and one more as each completes; accepted sockets are closed
 * without waiting (their close events are taken as they come). */
static void connect_server(int lfd, exs_qhandle_t q, const struct hdr *h, struct win *w)
{
	uint32_t posted = 0, accepted = 0, closed = 0;

	win_open(w);
	if (h->depth <= 1) {
		for (uint32_t i = 0; i < h->count; i++) {
			int fd = exs_blocking_accept(lfd, NULL, NULL);

			if (fd < 0 || exs_blocking_close(fd))
				die("accept/close");
		}
		win_close(w);
		return;
	}
	while (closed < h->count) {
		exs_event_t ev;

		for (; posted < h->count && posted - accepted < h->depth; posted++) {
			struct exs_acceptaddr a = { NULL, 0, NULL };

			if (exs_accept(lfd, &a, 1, 0, q))
				die("exs_accept");
		}
		next_event(q, &ev, "accept/close event");
		if (ev.exs_evt_type == EXS_EVT_ACCEPT) {
			accepted++;
			if (exs_close(ev.exs_evt_union.exs_evt_accept.exs_evt_new_socket, 0, q, NULL))
				die("exs_close");
		} else {
			closed++;
		}
	}
	win_close(w);
}

/* Depth D > 1: rounds of D connects started at once (D clients arriving
 * together at one listener). t[i] is connect i's own time; the window
 * covers each round from its first connect to its last completion, so
 * count / window is the listener's accept rate. Closes are outside it. */
static void connect_burst(const struct sockaddr_in *sa, exs_qhandle_t q, const struct hdr *h,
			  double *t, struct win *w)
{
	int fds[MAX_CONNECT_DEPTH];
	double t0[MAX_CONNECT_DEPTH];
	struct win round;

	w->t = w->c = 0;
	for (uint32_t done = 0; done < h->count;) {
		uint32_t k = h->count - done < h->depth ? h->count - done : h->depth;

		win_open(&round);
		for (uint32_t j = 0; j < k; j++) {
			if ((fds[j] = exs_socket(AF_INET, type, 0)) < 0)
				die("exs_socket");
			tune(fds[j]);
			t0[j] = now();
			if (exs_connect(fds[j], (const struct sockaddr *)sa, sizeof(*sa), 0, NULL, q,
					(exs_ahandle_t)(uintptr_t)j))
				die("exs_connect");
		}
		for (uint32_t got = 0; got < k; got++) {
			exs_event_t ev;
			uint32_t j;

			next_event(q, &ev, "connect event");
			j = (uint32_t)(uintptr_t)ev.exs_evt_ahandle;
			t[done + j] = now() - t0[j];
		}
		win_close(&round);
		w->t += round.t;
		w->c += round.c;
		for (uint32_t j = 0; j < k; j++)
			if (exs_blocking_close(fds[j]))
				die("exs_close");
		done += k;
	}
}

static void connect_client(const struct sockaddr_in *sa, const struct hdr *h, double *t, struct win *w)
{
	win_open(w);
	for (uint32_t i = 0; i < h->count; i++) {
		int fd = exs_socket(AF_INET, type, 0);
		double t0 = now();

		if (fd < 0)
			die("exs_socket");
		tune(fd);
		if (exs_blocking_connect(fd, (const struct sockaddr *)sa, sizeof(*sa)))
			die("exs_connect");
		t[i] = now() - t0;
		if (exs_blocking_close(fd))
			die("exs_close");
	}
	win_close(w);
}

static void usage(FILE *f)
{
	fputs("usage: exs-perf [OPTIONS] blast|pingpong|connect|psample|ptrans          (server)\n"
	      "       exs-perf [OPTIONS] blast|pingpong|connect|psample|ptrans ADDRESS  (client)\n"
	      "  -p PORT      (default 18515)\n"
	      "  -s SIZES     list \"1,64,4096\" or range \"1:16M\" (powers of two in it); K/M/G\n"
	      "  -d DEPTHS    operations in flight, list (blast; connect: D at once; default 1)\n"
	      "  -t TYPE      seqpacket (default) or stream\n"
	      "  -u           unregistered buffers (EXS_MHANDLE_UNREGISTERED)\n"
	      "  -B BYTES     blast: bytes per point (default 32M); -n N overrides\n"
	      "  -T SECONDS   blast: at most SECONDS per point, at the rate of a warm-up\n"
	      "  -n N         iterations per point (pingpong default 2000, connect 200)\n"
	      "  -c           check every byte\n"
	      "  -C           CSV output\n"
	      "  --sp N       small packets (guide 7.2), unregistered buffers\n"
	      "  --inline N   EXS_F_SETINLINEMAXSIZE N (guide 7.3)\n"
	      "  --busy-poll  EXS_FD_BUSYPOLL (guide 7.5)\n"
	      "  --sbuf N     EXS_F_SETSTREAMBUFSIZE N (guide 7.6; with -t stream)\n"
	      "  --advert-only register with EXS_MRF_ADVERT_ONLY (a registration per advert)\n"
	      "  --phases     pingpong: time inside exs_recv, exs_send and the waits (stderr)\n"
	      "  -h, --help   this text;  --version  print the version\n", f);
}

static const char *mode_name(int m)
{
	return m == BLAST ? "blast" : m == PINGPONG ? "pingpong" : m == PSAMPLE ? "psample"
	       : m == PTRANS ? "ptrans" : "connect";
}

/* One point on either side. The client returns the server's reply. */
static struct hdr run_point(int fd, int lfd, exs_qhandle_t q, const struct sockaddr_in *sa, struct hdr h,
			    bool client, double *lat, struct win *w)
{
	struct bufs B = { 0 };
	struct hdr r;
	uint64_t errors = 0;

	if (h.mode == BLAST)
		bufs_get(&B, (int)h.depth, h.size);
	else if (h.mode == PINGPONG || h.mode == PSAMPLE || h.mode == PTRANS)
		bufs_get(&B, 2, h.size);
	if (h.mode == BLAST && client)
		blast_send(fd, q, &h, &B, w);
	else if (h.mode == BLAST)
		errors = blast_recv(fd, q, &h, &B, w);
	else if (h.mode == PINGPONG)
		pingpong(fd, q, &h, client, &B, lat, w);
	else if (h.mode == PSAMPLE)
		psample(fd, q, &h, client, &B, lat, w);
	else if (h.mode == PTRANS)
		ptrans(fd, lfd, q, sa, &h, client, &B, lat, w);
	else if (client && h.depth > 1)
		connect_burst(sa, q, &h, lat, w);
	else if (client)
		connect_client(sa, &h, lat, w);
	else
		connect_server(lfd, q, &h, w);
	if (B.n)
		bufs_put(&B);
	r = h;
	if (!client) { /* the server's result closes the point: it has received all */
		r.server_cpu = w->t > 0 ? 100 * w->c / w->t : 0;
		r.server_secs = w->t;
		r.errors = errors;
		if (exs_write(fd, &r, sizeof(r)) != sizeof(r))
			die("send result");
		return r;
	}
	if (exs_read(fd, &r, sizeof(r)) != sizeof(r) || r.magic != HDR_MAGIC)
		die("receive result");
	return r;
}

static uint32_t blast_count(uint64_t size)
{
	uint64_t n = blast_bytes / size;

	return (uint32_t)(n < 16 ? 16 : n > 20000 ? 20000 : n);
}

static void report(const struct hdr *h, const struct hdr *r, double *lat, const struct win *w)
{
	double secs = w->t, cpu = secs > 0 ? 100 * w->c / secs : 0;
	double gbps = 0, mps = h->count / secs, lmin = 0, lmed = 0, lmean = 0, l99 = 0, l999 = 0;

	/* ptrans: the payload of one direction, as seed 000 §5 counts it */
	if (h->mode == BLAST || h->mode == PSAMPLE || h->mode == PTRANS)
		gbps = (double)h->size * h->count * 8 / secs / 1e9;
	if (h->mode != BLAST) {
		/* pingpong: one-way latency = round trip / 2 */
		double f = h->mode == PINGPONG ? 0.5e6 : 1e6;

		for (uint32_t i = 0; i < h->count; i++)
			lmean += lat[i];
		lmean = lmean / h->count * f;
		lmed = median(lat, h->count) * f; /* sorts lat */
		lmin = lat[0] * f;
		l99 = lat[(size_t)(h->count * 0.99)] * f;
		l999 = lat[(size_t)(h->count * 0.999)] * f;
	}
	if (csv)
		printf("exs,%s,%s,%s,%s,%u,%u,%u,%.4f,%.6g,%.1f,%.2f,%.2f,%.2f,%.2f,%.2f,%.1f,%.1f,%llu\n",
		       mode_name((int)h->mode), type == SOCK_STREAM ? "stream" : "seqpacket", unreg ? "no" : "yes",
		       variant(), h->size, h->depth, h->count, secs, gbps, mps, lmin, lmed, lmean, l99, l999, cpu,
		       r->server_cpu, (unsigned long long)r->errors);
	else
		printf("%-9s %-9s %-14s %9u %5u %7u %10.4f %12.1f %9.2f %9.2f %9.2f %9.2f %7.1f %7.1f%s\n",
		       mode_name((int)h->mode), type == SOCK_STREAM ? "stream" : "seqpacket", variant(), h->size,
		       h->depth, h->count, gbps, mps, lmin, lmed, lmean, l99, cpu, r->server_cpu,
		       r->errors ? "  DATA ERRORS" : "");
	fflush(stdout);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "sp", required_argument, NULL, 'S' },
		{ "inline", required_argument, NULL, 'I' },
		{ "busy-poll", no_argument, NULL, 'P' },
		{ "sbuf", required_argument, NULL, 'F' },
		{ "advert-only", no_argument, NULL, 'X' },
		{ "phases", no_argument, NULL, 'Q' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t sizes[64] = { 65536 }, depths[16] = { 1 };
	int nsizes = 1, ndepths = 1, port = 18515, o, mode, fd, lfd = -1;
	bool client;
	struct sockaddr_in sa = { .sin_family = AF_INET };
	exs_qhandle_t q;

	const char *bad = NULL;

	argv[0] = program_invocation_short_name; /* getopt's messages name it */
	while ((o = getopt_long(argc, argv, "p:s:d:t:uB:T:n:cCh", longopts, NULL)) != -1) {
		switch (o) {
		case 'p': port = atoi(optarg); break;
		case 's': nsizes = parse_list(optarg, sizes, 64); break;
		case 'd': ndepths = parse_list(optarg, depths, 16); break;
		case 't': type = !strcmp(optarg, "stream") ? SOCK_STREAM : SOCK_SEQPACKET; break;
		case 'u': unreg = 1; break;
		case 'B': blast_bytes = parse_size(optarg); break;
		case 'T': min_secs = atof(optarg); break;
		case 'n': count_opt = atoi(optarg); break;
		case 'c': check = 1; break;
		case 'C': csv = 1; break;
		case 'S': sp_max = atol(optarg); unreg = 1; break;
		case 'I': inline_max = atol(optarg); break;
		case 'P': busy_poll = 1; break;
		case 'F': sbuf = atol(optarg); break;
		case 'X': mreg_flags = EXS_MRF_ADVERT_ONLY; break;
		case 'Q': phases = 1; break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("exs-perf (EXS) %s\n", EXS_VERSION_STRING); return 0;
		default: goto usage_error; /* getopt said what */
		}
	}
	if (optind >= argc) {
		bad = "no mode given";
		goto usage_error;
	}
	mode = !strcmp(argv[optind], "blast") ? BLAST : !strcmp(argv[optind], "pingpong") ? PINGPONG
	       : !strcmp(argv[optind], "connect") ? CONNECT : !strcmp(argv[optind], "psample") ? PSAMPLE
	       : !strcmp(argv[optind], "ptrans") ? PTRANS : 0;
	bad = !mode ? "unknown mode (blast, pingpong, connect, psample or ptrans)"
	      : optind + 2 < argc ? "too many arguments"
	      : nsizes < 1 ? "bad -s SIZES" : ndepths < 1 ? "bad -d DEPTHS"
	      : sp_max < -1 || inline_max < -1 || sbuf < -1 ? "bad --sp, --inline or --sbuf"
	      : min_secs < 0 ? "bad -T SECONDS" : !blast_bytes ? "bad -B BYTES" : NULL;
	client = optind + 1 < argc;
	sa.sin_port = htons((uint16_t)port);
	if (!bad && client && inet_pton(AF_INET, argv[optind + 1], &sa.sin_addr) != 1)
		bad = "not an IPv4 address";
	for (int i = 0; i < nsizes && !bad; i++)
		if (!sizes[i] || sizes[i] > (1u << 30))
			bad = "sizes are 1 to 1G";
	for (int i = 0; i < ndepths && !bad; i++)
		if (!depths[i] || depths[i] > (mode == CONNECT ? MAX_CONNECT_DEPTH : 32))
			bad = "depths are 1 to 32 (connect: 1 to 256)";
	if (bad)
		goto usage_error;
	/* as a network program does: a peer that goes is an errno, not a
	 * signal, and on iWARP libexs's SIGPIPE guard around each post is
	 * then one system call, not three (exs(7)) */
	signal(SIGPIPE, SIG_IGN);
	if (exs_init(EXS_VERSION1))
		die("exs_init");
	q = exs_qcreate(64);
	if (!q)
		die("exs_qcreate");
	if (client) {
		double end = now() + 30;

		for (;;) { /* the server may still be starting */
			fd = exs_socket(AF_INET, type, 0);
			if (fd < 0)
				die("exs_socket");
			tune(fd);
			if (!exs_blocking_connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
				break;
			if (errno != ECONNREFUSED || now() > end)
				die("exs_connect");
			exs_blocking_close(fd);
			usleep(100000);
		}
	} else {
		lfd = exs_socket(AF_INET, type, 0);
		if (lfd < 0)
			die("exs_socket");
		tune(lfd);
		if (exs_bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || exs_listen(lfd, 64))
			die("listen");
		fprintf(stderr, "exs-perf: ready\n");
		fd = exs_blocking_accept(lfd, NULL, NULL);
		if (fd < 0)
			die("exs_blocking_accept");
	}
	if (sp_max >= 0 || inline_max >= 0 || busy_poll)
		show_tuning(fd);
	if (csv && client)
		printf("tool,mode,type,registered,variant,size,depth,count,seconds,gbps,msgs_per_s,lat_min_us,"
		       "lat_median_us,lat_mean_us,lat_p99_us,lat_p999_us,cpu_client_pct,cpu_server_pct,errors\n");
	else if (client)
		printf("%-9s %-9s %-14s %9s %5s %7s %10s %12s %9s %9s %9s %9s %7s %7s\n", "mode", "type", "variant",
		       "size", "depth", "count", "Gb/s", "msgs/s", "min_us", "med_us", "mean_us", "p99_us", "cpu_c%",
		       "cpu_s%");
	while (!client) { /* the client says which points, and which is the last */
		struct hdr h = { .magic = HDR_MAGIC };
		struct win w;

		xchg_hdr(fd, &h, false);
		if (h.mode != (uint32_t)mode)
			die("the client runs another mode");
		check = (int)h.check;
		run_point(fd, lfd, q, &sa, h, false, NULL, &w);
		if (h.last)
			goto done;
	}
	for (int si = 0; si < nsizes; si++)
		for (int di = 0; di < (mode == BLAST || mode == CONNECT ? ndepths : 1); di++) {
			struct hdr h = { .magic = HDR_MAGIC, .mode = (uint32_t)mode }, r;
			struct win w;
			double *lat = NULL;

			h.size = (uint32_t)sizes[si];
			h.depth = (uint32_t)depths[di];
			h.check = (uint32_t)check;
			h.unreg = (uint32_t)unreg;
			if (count_opt > 0)
				h.count = (uint32_t)count_opt;
			else if (mode == BLAST)
				h.count = blast_count(h.size);
			else
				h.count = mode == CONNECT ? 200 : 2000;
			if (mode == BLAST && min_secs > 0 && count_opt <= 0) {
				/* an untimed warm-up, long enough to measure the rate */
				struct hdr p = h;
				uint64_t n = (2u << 20) / h.size, want = (blast_bytes + h.size - 1) / h.size;
				double rate;

				p.count = (uint32_t)(n < 2 ? 2 : n > 1000 ? 1000 : n);
				xchg_hdr(fd, &p, true);
				run_point(fd, lfd, q, &sa, p, true, NULL, &w);
				rate = p.count / w.t;
				n = (uint64_t)(min_secs * rate) + 1;
				n = n < want ? n : want;
				h.count = (uint32_t)(n < 5 ? 5 : n > 10000000 ? 10000000 : n);
			}
			h.last = si == nsizes - 1 && di == (mode == BLAST || mode == CONNECT ? ndepths : 1) - 1;
			if (mode != BLAST)
				lat = calloc(h.count, sizeof(*lat));
			xchg_hdr(fd, &h, true);
			r = run_point(fd, lfd, q, &sa, h, true, lat, &w);
			report(&h, &r, lat, &w);
			free(lat);
			if (r.errors) {
				fprintf(stderr, "exs-perf: %llu bytes differ\n", (unsigned long long)r.errors);
				return 1;
			}
		}
done:
	exs_blocking_close(fd);
	if (lfd >= 0)
		exs_blocking_close(lfd);
	exs_qdelete(q);
	return 0;
usage_error:
	if (bad)
		fprintf(stderr, "exs-perf: %s\n", bad);
	fputs("Try 'exs-perf --help'.\n", stderr);
	return 2;
}
