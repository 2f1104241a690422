/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs-echo-server - an EXS server that sends every message it receives
 * back to its sender, for any number of clients at once.
 *
 *   exs-echo-server [-t stream|seqpacket] [-n CONNS] ADDR PORT
 *
 * It listens on ADDR PORT and serves each connection until the client
 * closes it; with -n it exits after CONNS connections have come and gone
 * (status 0 if every one of them ended cleanly), otherwise it runs until
 * killed. Messages may be up to 1 MiB (MAX_MSG); a SOCK_SEQPACKET message
 * larger than that would be cut short, and the connection is dropped.
 *
 * One thread serves everything, asynchronously: exs_accept(), exs_recv(),
 * exs_send() and exs_close() only start operations, and all of their
 * completion events arrive on one event queue. The loop takes each event
 * and starts whatever comes next for that connection. Each connection
 * owns one buffer, registered once (exs_mregister), and goes round:
 *
 *   receive into the buffer -> send those bytes back -> receive again ...
 *
 * until a receive completes with length 0: the client closed its end.
 */
#include <arpa/inet.h>

#include "common.h"

/* Accepts kept pending: how many clients can be taken on at once. */
#define ACCEPT_SLOTS 8

struct conn {
	int fd;
	char peer[INET6_ADDRSTRLEN + 8];	/* "address:port", for messages */
	void *buf;				/* MAX_MSG bytes */
	exs_mhandle_t mh;			/* its registration */
	unsigned long msgs;			/* messages (or pieces) echoed */
	uint64_t bytes;
	bool failed;
};

static struct opts o;
static exs_qhandle_t q;			/* the one queue for every event */
static int lfd;				/* the listening socket */
static struct exs_acceptaddr slots[ACCEPT_SLOTS];
static struct sockaddr_storage peers[ACCEPT_SLOTS];
static int accepts_pending, accepted, finished, failures;
static uint64_t total_bytes;

/* Offer one accept slot; the client it takes will fill in its address. */
static void post_accept(struct exs_acceptaddr *a)
{
	struct sockaddr_storage *peer = &peers[a - slots];

	a->exs_addr = (struct sockaddr *)peer;
	a->exs_addrlen = sizeof(*peer);
	a->exs_ahandle = a;	/* the event hands it back: which slot it was */
	if (exs_accept(lfd, a, 1, 0, q) < 0)
		die(&o, "exs_accept");
	accepts_pending++;
}

/* Start closing; the EXS_EVT_CLOSE event finishes the connection. */
static void close_conn(struct conn *c)
{
	if (exs_close(c->fd, 0, q, c) < 0)
		die(&o, "exs_close");
}

/* A transfer on this connection failed: say so and drop it. */
static void conn_failed(struct conn *c, const char *call, int err)
{
	fprintf(stderr, "%s: %s: %s: %s\n", o.prog, c->peer, call, strerror(err));
	c->failed = true;
	close_conn(c);
}

static void post_recv(struct conn *c)
{
	/* room for the largest message; the event says how much came */
	if (exs_recv(c->fd, c->buf, MAX_MSG, 0, q, c, c->mh) < 0)
		conn_failed(c, "exs_recv", errno);
}

static void on_accept(const exs_event_t *ev)
{
	struct exs_acceptaddr *a = ev->exs_evt_ahandle;
	const struct sockaddr *sa = a->exs_addr;
	char host[INET6_ADDRSTRLEN] = "?";
	struct conn *c;
	int port = 0;

	accepts_pending--;
	if (ev->exs_evt_errno) {
		errno = ev->exs_evt_errno;
		die(&o, "exs_accept (event)");
	}
	accepted++;
	/* take on more clients while fewer than -n have come */
	if (!o.conns || accepted + accepts_pending < o.conns)
		post_accept(a);

	c = calloc(1, sizeof(*c));
	if (!c || posix_memalign(&c->buf, 64, MAX_MSG))
		fail(&o, "out of memory");
	c->fd = ev->exs_evt_union.exs_evt_accept.exs_evt_new_socket;
	if (sa->sa_family == AF_INET) {
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, host, sizeof(host));
		port = ntohs(((const struct sockaddr_in *)sa)->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, host, sizeof(host));
		port = ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	}
	snprintf(c->peer, sizeof(c->peer), "%s:%d", host, port);
	c->mh = exs_mregister(c->buf, MAX_MSG, 0);
	if (c->mh == EXS_MHANDLE_INVALID)
		die(&o, "exs_mregister");
	post_recv(c);
}

static void on_recv(struct conn *c, const exs_event_t *ev)
{
	const struct exs_evt_xfer *x = &ev->exs_evt_union.exs_evt_xfer;

	if (ev->exs_evt_errno) {
		conn_failed(c, "exs_recv (event)", ev->exs_evt_errno);
	} else if (x->exs_evt_length == 0) {
		close_conn(c);		/* end of file: the client is done */
	} else if (x->exs_evt_amount_lost) {
		conn_failed(c, "exs_recv (event)", EMSGSIZE);
	} else if (exs_send(c->fd, c->buf, x->exs_evt_length, 0, q, c, c->mh) < 0) {
		conn_failed(c, "exs_send", errno);
	}
}

static void on_send(struct conn *c, const exs_event_t *ev)
{
	const struct exs_evt_xfer *x = &ev->exs_evt_union.exs_evt_xfer;

	if (ev->exs_evt_errno) {
		conn_failed(c, "exs_send (event)", ev->exs_evt_errno);
		return;
	}
	c->msgs++;
	c->bytes += x->exs_evt_length;
	post_recv(c);		/* the buffer is free again */
}

static void on_close(struct conn *c, const exs_event_t *ev)
{
	if (ev->exs_evt_errno) {
		fprintf(stderr, "%s: %s: exs_close (event): %s\n", o.prog, c->peer,
			strerror(ev->exs_evt_errno));
		c->failed = true;
	}
	printf("%s: %s: %s after %lu messages, %llu bytes echoed\n", o.prog, c->peer,
	       c->failed ? "FAILED" : "closed", c->msgs, (unsigned long long)c->bytes);
	fflush(stdout);
	/* every operation on the connection has completed: the memory may go */
	if (exs_mderegister(c->mh, 0))
		die(&o, "exs_mderegister");
	free(c->buf);
	finished++;
	failures += c->failed;
	total_bytes += c->bytes;
	free(c);
}

int main(int argc, char **argv)
{
	exs_event_t ev[16];
	bool listening = true;
	int i, n;

	parse_args(argc, argv, "n", " [-n CONNS]", &o);
	if (exs_init(EXS_VERSION1) < 0)
		die(&o, "exs_init");
	lfd = exs_socket(o.family, o.type, 0);
	if (lfd < 0)
		die(&o, "exs_socket");
	if (exs_bind(lfd, (struct sockaddr *)&o.addr, o.addrlen) < 0)
		die(&o, "exs_bind");
	if (exs_listen(lfd, 16) < 0)
		die(&o, "exs_listen");
	q = exs_qcreate(64);
	if (q == EXS_QHANDLE_INVALID)
		die(&o, "exs_qcreate");
	for (i = 0; i < ACCEPT_SLOTS && (!o.conns || i < o.conns); i++)
		post_accept(&slots[i]);
	printf("%s: listening (%s)%s\n", o.prog, type_name(o.type),
	       o.conns ? ", will exit after -n connections" : "");
	fflush(stdout);

	while (listening) {
		n = exs_qdequeue(q, ev, 16, NULL);	/* NULL: wait as long as it takes */
		if (n < 0)
			die(&o, "exs_qdequeue");
		for (i = 0; i < n; i++) {
			switch (ev[i].exs_evt_type) {
			case EXS_EVT_ACCEPT:
				on_accept(&ev[i]);
				break;
			case EXS_EVT_RECV:
				on_recv(ev[i].exs_evt_ahandle, &ev[i]);
				break;
			case EXS_EVT_SEND:
				on_send(ev[i].exs_evt_ahandle, &ev[i]);
				break;
			case EXS_EVT_CLOSE:
				if (!ev[i].exs_evt_ahandle) {
					listening = false;	/* the listener's own */
					break;
				}
				on_close(ev[i].exs_evt_ahandle, &ev[i]);
				/* the last of -n connections: stop listening */
				if (o.conns && finished == o.conns &&
				    exs_close(lfd, 0, q, NULL) < 0)
					die(&o, "exs_close (listener)");
				break;
			default:
				fail(&o, "unexpected event type");
			}
		}
	}

	if (exs_qdelete(q) < 0)
		die(&o, "exs_qdelete");
	printf("%s: served %d connections, %llu bytes echoed, %d failed\n", o.prog, finished,
	       (unsigned long long)total_bytes, failures);
	return failures ? 1 : 0;
}
