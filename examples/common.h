/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * common.h - the small helpers the EXS echo examples share: command-line
 * parsing, the list of message sizes, the byte pattern that lets a client
 * check every byte of the echo, error reporting, and the transfer loop of
 * the two asynchronous clients (async_step), which differ only in the
 * memory handles they pass it, as the guide's §10.4 and §10.5 do.
 */
#ifndef EXS_EXAMPLES_COMMON_H
#define EXS_EXAMPLES_COMMON_H

#include <errno.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <exs.h>

/* The largest message a client sends, and so the server's buffer size. */
#define MAX_MSG (1024 * 1024)

/* The most operations an async client keeps in flight each way: at most
 * the flow-control credits a connection has by default (guide §6, §7.1). */
#define MAX_DEPTH 32

/* The sizes one round of messages goes through: 1 byte to 1 MiB, with the
 * sizes just around powers of two, where off-by-one errors hide. */
static const size_t msg_sizes[] = {
	1, 2, 3, 17, 63, 64, 65, 511, 1000, 1024, 4095, 4096, 4097, 9000,
	65535, 65536, 65537, 100000, 262144, 500000, 1000000, 1048575, 1048576, 7,
};
#define NSIZES (sizeof(msg_sizes) / sizeof(msg_sizes[0]))

/* What the command line asked for. */
struct opts {
	const char *prog;
	struct sockaddr_storage addr;	/* server address and port */
	socklen_t addrlen;
	int family;			/* AF_INET or AF_INET6 */
	int type;			/* SOCK_STREAM or SOCK_SEQPACKET */
	int rounds;			/* clients: times through msg_sizes */
	int depth;			/* async clients: messages in flight */
	int conns;			/* server: exit after this many (0: never) */
};

/* Report a failed call with errno's message and exit non-zero. */
static inline __attribute__((noreturn)) void die(const struct opts *o, const char *call)
{
	fprintf(stderr, "%s: %s: %s\n", o->prog, call, strerror(errno));
	exit(1);
}

/* Report something that went wrong without errno, and exit non-zero. */
static inline __attribute__((noreturn)) void fail(const struct opts *o, const char *what)
{
	fprintf(stderr, "%s: %s\n", o->prog, what);
	exit(1);
}

static inline __attribute__((noreturn)) void usage(const struct opts *o, const char *extra)
{
	fprintf(stderr, "usage: %s [-t stream|seqpacket]%s ADDR PORT\n", o->prog, extra);
	exit(2);
}

/*
 * Parse "[-t stream|seqpacket] [-r ROUNDS] [-d DEPTH] [-n CONNS] ADDR PORT".
 * Only the letters in `letters` (a subset of "rdn") are accepted.
 */
static inline void parse_args(int argc, char **argv, const char *letters, const char *extra,
			      struct opts *o)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *ai;
	int c, err;

	memset(o, 0, sizeof(*o));
	o->prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	o->type = SOCK_STREAM;
	o->rounds = 1;
	o->depth = 4;
	while ((c = getopt(argc, argv, "t:r:d:n:")) != -1) {
		if (c != 't' && (c == '?' || !strchr(letters, c)))
			usage(o, extra);
		switch (c) {
		case 't':
			if (!strcmp(optarg, "stream"))
				o->type = SOCK_STREAM;
			else if (!strcmp(optarg, "seqpacket"))
				o->type = SOCK_SEQPACKET;
			else
				usage(o, extra);
			break;
		case 'r':
			o->rounds = atoi(optarg);
			break;
		case 'd':
			o->depth = atoi(optarg);
			break;
		case 'n':
			o->conns = atoi(optarg);
			break;
		}
	}
	if (argc - optind != 2 || o->rounds < 1 || o->depth < 1 || o->depth > MAX_DEPTH || o->conns < 0)
		usage(o, extra);
	/* EXS sockets take ordinary socket addresses, so getaddrinfo() fills them */
	err = getaddrinfo(argv[optind], argv[optind + 1], &hints, &ai);
	if (err) {
		fprintf(stderr, "%s: %s port %s: %s\n", o->prog, argv[optind], argv[optind + 1],
			gai_strerror(err));
		exit(2);
	}
	memcpy(&o->addr, ai->ai_addr, ai->ai_addrlen);
	o->addrlen = ai->ai_addrlen;
	o->family = ai->ai_family;
	freeaddrinfo(ai);
}

static inline const char *type_name(int type)
{
	return type == SOCK_SEQPACKET ? "SOCK_SEQPACKET" : "SOCK_STREAM";
}

/* The size of message number i (0, 1, 2, ... over all rounds). */
static inline size_t msg_size(int i)
{
	return msg_sizes[(size_t)i % NSIZES];
}

/*
 * The byte at offset `pos` of everything a client sends over its
 * connection. It depends on the whole offset, so a byte that arrives at
 * the wrong place, twice or not at all shows up as a mismatch.
 */
static inline unsigned char pattern_byte(uint64_t pos)
{
	return (unsigned char)(((pos + 1) * 0x9e3779b97f4a7c15ull) >> 56);
}

static inline void pattern_fill(char *buf, size_t len, uint64_t pos)
{
	for (size_t k = 0; k < len; k++)
		buf[k] = (char)pattern_byte(pos + k);
}

/* Check len bytes that should be the pattern from `pos` on; exits on a mismatch. */
static inline void pattern_check(const struct opts *o, const char *buf, size_t len, uint64_t pos)
{
	for (size_t k = 0; k < len; k++) {
		if ((unsigned char)buf[k] != pattern_byte(pos + k)) {
			fprintf(stderr, "%s: echo differs at byte %llu: got 0x%02x, sent 0x%02x\n",
				o->prog, (unsigned long long)(pos + k), (unsigned char)buf[k],
				pattern_byte(pos + k));
			exit(1);
		}
	}
}

static inline double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The one line every client prints when all of the echo matched. */
static inline void print_summary(const struct opts *o, int msgs, uint64_t bytes, double secs)
{
	printf("%s: OK: %d messages, %llu bytes echoed and verified (%s, %.3f s)\n", o->prog, msgs,
	       (unsigned long long)bytes, type_name(o->type), secs);
}

/* exs_init() once, before any other EXS call; then the client's socket. */
static inline int client_socket(const struct opts *o)
{
	int fd;

	if (exs_init(EXS_VERSION1) < 0)
		die(o, "exs_init");
	fd = exs_socket(o->family, o->type, 0);
	if (fd < 0)
		die(o, "exs_socket");
	return fd;
}

/* A synchronous send must have sent all of the message. */
static inline void check_sent(const struct opts *o, ssize_t n, size_t len, const char *call)
{
	if (n < 0)
		die(o, call);
	if ((size_t)n != len)
		fail(o, "a send sent less than asked");
}

/*
 * How much a synchronous client asks for when `got` bytes of a len-byte
 * echo are back. SOCK_STREAM may hand the echo back in pieces, so the
 * client reads until all of it is there, never asking for more than is
 * still due. SOCK_SEQPACKET keeps message boundaries: one read gets the
 * whole message, given room for the largest one.
 */
static inline size_t recv_ask(const struct opts *o, size_t len, size_t got)
{
	return o->type == SOCK_SEQPACKET ? MAX_MSG : len - got;
}

/* A synchronous receive returns bytes; 0 means the peer closed. */
static inline void check_received(const struct opts *o, ssize_t n, size_t len, const char *call)
{
	if (n < 0)
		die(o, call);
	if (n == 0)
		fail(o, "server closed the connection early");
	if (o->type == SOCK_SEQPACKET && (size_t)n != len)
		fail(o, "echoed message has the wrong length");
}

/*
 * ---- The transfer loop of the asynchronous clients (guide §10.4, §10.5)
 *
 * An asynchronous client keeps up to `depth` sends and `depth` receives in
 * flight, each in its own buffer (a slot). The slot is the ahandle of the
 * operation, so a completion event leads straight back to its buffer.
 */
struct slot {
	char *buf;	/* MAX_MSG bytes of its own */
	size_t len;	/* bytes sent, or bytes asked for */
	bool busy;	/* an operation on it is in flight */
};

struct echo_async {
	const struct opts *o;
	int nmsgs;
	uint64_t total;		/* bytes the client sends, and so expects back */
	struct slot out[MAX_DEPTH], in[MAX_DEPTH];
	int sent;		/* messages whose send has started */
	uint64_t sent_bytes;	/* pattern offset of the next message to send */
	int sends_busy;
	int recvs;		/* receives started */
	uint64_t unasked;	/* STREAM: bytes due that no started receive covers */
	int recvs_done;		/* receives that completed */
	uint64_t back;		/* bytes back and verified */
};

/* Set up the slots over two areas of depth * MAX_MSG bytes each. */
static inline void async_init(struct echo_async *e, const struct opts *o, char *out_area,
			      char *in_area)
{
	memset(e, 0, sizeof(*e));
	e->o = o;
	e->nmsgs = o->rounds * (int)NSIZES;
	for (int i = 0; i < e->nmsgs; i++)
		e->total += msg_size(i);
	e->unasked = e->total;
	for (int k = 0; k < o->depth; k++) {
		e->out[k].buf = out_area + (size_t)k * MAX_MSG;
		e->in[k].buf = in_area + (size_t)k * MAX_MSG;
	}
}

static inline struct slot *free_slot(struct slot *s, int depth)
{
	for (int k = 0; k < depth; k++)
		if (!s[k].busy)
			return &s[k];
	return NULL;
}

/*
 * The next receive to start, or NULL. SOCK_SEQPACKET: one receive per
 * message, each with room for the largest message, so a message that
 * came back too long would show. SOCK_STREAM: the echo may come back in
 * pieces of any size, so receives ask for the bytes still due, never
 * more: no receive is left waiting once everything is back.
 */
static inline struct slot *async_next_recv(struct echo_async *e)
{
	struct slot *s = free_slot(e->in, e->o->depth);

	if (!s)
		return NULL;
	if (e->o->type == SOCK_SEQPACKET) {
		if (e->recvs == e->nmsgs)
			return NULL;
		s->len = MAX_MSG;
	} else {
		if (!e->unasked)
			return NULL;
		s->len = e->unasked < MAX_MSG ? e->unasked : MAX_MSG;
		e->unasked -= s->len;
	}
	s->busy = true;
	e->recvs++;
	return s;
}

/* The next message to send, filled with its pattern, or NULL. */
static inline struct slot *async_next_send(struct echo_async *e)
{
	struct slot *s = free_slot(e->out, e->o->depth);

	if (!s || e->sent == e->nmsgs)
		return NULL;
	s->len = msg_size(e->sent);
	pattern_fill(s->buf, s->len, e->sent_bytes);
	s->busy = true;
	e->sent++;
	e->sent_bytes += s->len;
	e->sends_busy++;
	return s;
}

/*
 * Take one completion event. exs_evt_errno is the operation's own result
 * (0: success); exs_evt_length is how many bytes moved; a receive that
 * completes with errno 0 and length 0 means the peer closed. Receives
 * complete in the order they were started, so each one carries the next
 * bytes of the echo.
 */
static inline void async_complete(struct echo_async *e, const exs_event_t *ev)
{
	const struct exs_evt_xfer *x = &ev->exs_evt_union.exs_evt_xfer;
	struct slot *s = ev->exs_evt_ahandle;

	s->busy = false;
	if (ev->exs_evt_errno) {
		errno = ev->exs_evt_errno;
		die(e->o, ev->exs_evt_type == EXS_EVT_SEND ? "exs_send (event)" : "exs_recv (event)");
	}
	if (ev->exs_evt_type == EXS_EVT_SEND) {
		if (x->exs_evt_length != s->len)
			fail(e->o, "a send completed with the wrong length");
		e->sends_busy--;
		return;
	}
	if (ev->exs_evt_type != EXS_EVT_RECV)
		fail(e->o, "unexpected event type");
	if (x->exs_evt_length == 0)
		fail(e->o, "server closed the connection early");
	if (e->o->type == SOCK_SEQPACKET) {
		if (x->exs_evt_length != msg_size(e->recvs_done) || x->exs_evt_amount_lost)
			fail(e->o, "echoed message has the wrong length");
	} else {
		/* a short piece: what it did not fill is still due */
		e->unasked += s->len - x->exs_evt_length;
	}
	pattern_check(e->o, s->buf, x->exs_evt_length, e->back);
	e->back += x->exs_evt_length;
	e->recvs_done++;
}

static inline bool async_done(const struct echo_async *e)
{
	return e->back == e->total && !e->sends_busy;
}

/*
 * One turn of an asynchronous client's transfer loop: start every receive
 * and send there is a free buffer for (receives first, so each echo finds
 * its receive waiting), then wait for at least one of them to finish and
 * take all that have. While the operations run, the client's own work
 * (filling the next message, checking the last echo) goes on.
 * out_mh/in_mh: the registrations of the two areas, or
 * EXS_MHANDLE_UNREGISTERED for plain memory.
 */
static inline void async_step(struct echo_async *e, int fd, exs_qhandle_t q,
			      exs_mhandle_t out_mh, exs_mhandle_t in_mh)
{
	struct timeval tmo = { .tv_sec = 60 };
	exs_event_t ev[2 * MAX_DEPTH];
	struct slot *s;
	int n, k;

	while ((s = async_next_recv(e)))
		if (exs_recv(fd, s->buf, s->len, 0, q, s, in_mh) < 0)
			die(e->o, "exs_recv");
	while ((s = async_next_send(e)))
		if (exs_send(fd, s->buf, s->len, 0, q, s, out_mh) < 0)
			die(e->o, "exs_send");

	n = exs_qdequeue(q, ev, 2 * e->o->depth, &tmo);
	if (n < 0)
		die(e->o, "exs_qdequeue");
	if (n == 0)
		fail(e->o, "no transfer finished within 60 s");
	for (k = 0; k < n; k++)
		async_complete(e, &ev[k]);
}

/* Wait for the one event of a management operation (connect, close). */
static inline void wait_event(const struct opts *o, exs_qhandle_t q, int type, const char *call)
{
	struct timeval tmo = { .tv_sec = 60 };
	exs_event_t ev;
	int n;

	n = exs_qdequeue(q, &ev, 1, &tmo);
	if (n < 0)
		die(o, "exs_qdequeue");
	if (n == 0)
		fail(o, "no event within 60 s");
	if (ev.exs_evt_type != type)
		fail(o, "unexpected event type");
	if (ev.exs_evt_errno) {
		errno = ev.exs_evt_errno;
		die(o, call);
	}
}

/*
 * The end of an asynchronous client: exs_close() starts the close (pending
 * sends still go out first), its EXS_EVT_CLOSE event says it is done, and
 * then the management queue has nothing in flight and may go too.
 */
static inline void async_close(const struct opts *o, int fd, exs_qhandle_t mgmt_q)
{
	if (exs_close(fd, 0, mgmt_q, NULL) < 0)
		die(o, "exs_close");
	wait_event(o, mgmt_q, EXS_EVT_CLOSE, "exs_close (event)");
	if (exs_qdelete(mgmt_q) < 0)
		die(o, "exs_qdelete");
}

#endif
