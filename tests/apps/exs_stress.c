/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs_stress: N threads of one process share a few connected socket pairs
 * (SOCK_SEQPACKET and SOCK_STREAM, both ends in this process) and a few
 * event queues, and for SECS seconds concurrently
 *   - post sends and receives (registered and unregistered buffers) to
 *     random shared queues, and dequeue events from them;
 *   - cancel their own outstanding operations (exs_cancel);
 *   - close a pair (async or EXS_BLOCK, lingering or EXS_DONTLINGER) and
 *     connect a new one in its place (exs_accept + exs_connect);
 *   - create a queue, post to it a receive that cannot complete (on a
 *     quiet STREAM pair nobody sends on) and a send, check exs_qdelete
 *     refuses it (EBUSY), cancel both, drain it, delete it, and check the
 *     deleted handle is refused (EINVAL).
 * Every started operation must complete exactly once, with an event of
 * its kind, socket and buffer and an errno exs_send(3), exs_close(3),
 * exs_cancel(3) document; every failure to start must carry a documented
 * errno. A watchdog ends the run (exit 3, with the state) when a thread
 * makes no progress for WATCHDOG seconds. At the end every socket is
 * closed and every queue drained: posted and completed counts per kind
 * must be equal.
 *
 *   exs_stress ADDR PORT [-t THREADS] [-d SECS] [-p PAIRS] [-w WATCHDOG]
 *   -t 1..64 (default 8)   -d 1..3600 (default 60)
 *   -p pairs of each type, 1..8 (default 2)   -w 10..600 s (default 60)
 * Listens on PORT (SEQPACKET) and PORT+1 (STREAM). Prints one summary line;
 * exit 0 only if nothing was lost, duplicated, undocumented or hung.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <exs.h>

#define MAXTHREADS 64
#define SLOTS 64	  /* operations a thread may have outstanding */
#define DATA_SLOTS 48	  /* of which sends and receives */
#define SLOTBUF 16384	  /* each slot's buffer */
#define NQ 3		  /* shared queues */
#define MAXPAIRS 16

enum kind { K_SEND, K_RECV, K_CLOSE, K_ACCEPT, K_CONNECT, NKIND };
static const char *const kname[NKIND] = { "send", "recv", "close", "accept", "connect" };
static const int kevt[NKIND] = { EXS_EVT_SEND, EXS_EVT_RECV, EXS_EVT_CLOSE, EXS_EVT_ACCEPT,
				 EXS_EVT_CONNECT };
/* event errnos counted (anything else is bad) */
enum { E_OK, E_RESET, E_ABORTED, E_PIPE, E_CANCELED, NERR };
static const char *const ename[NERR] = { "0", "ECONNRESET", "ECONNABORTED", "EPIPE",
					 "ECANCELED" };

enum { S_FREE, S_POSTED, S_DONE };
struct slot {
	int state; /* atomic */
	unsigned gen; /* atomic: part of the ahandle, so a stale event is seen */
	int kind, fd, newfd, err;
	size_t len;
	exs_qhandle_t q;
	char *buf;
};

struct worker {
	int id;
	pthread_t tid;
	uint64_t rng;
	struct slot slot[SLOTS];
	char *area;
	exs_mhandle_t mh;
	long beat; /* atomic: seconds (monotonic) of the last progress */
	const char *phase; /* atomic: what it does now, for the watchdog */
};

struct pair {
	int type;
	int fd[2]; /* atomic: -1 while closing */
	int busy; /* atomic: a thread is closing and reconnecting it */
};

static struct worker wk[MAXTHREADS + 1]; /* the last one is main's */
static int nthreads = 8, npairs;
static struct pair pairs[MAXPAIRS], quiet;
static int lfd[2];
static exs_qhandle_t sq[NQ], aq[2];
static pthread_mutex_t reconnect_lock[2] = { PTHREAD_MUTEX_INITIALIZER,
					     PTHREAD_MUTEX_INITIALIZER };
static struct sockaddr_in addr[2];
static int stop, watchdog_secs = 60;
/* counters, all atomic */
static long posted[NKIND], completed[NKIND], evterr[NKIND][NERR], bad;
static long startfail[5], cancels[5], qdel_busy, qdel_ok, reconnects, blocking_closes;
static long connect_failed;
static const int startfail_errno[5] = { EBADF, ENOTCONN, EBUSY, EPIPE, ECONNRESET };
static const int cancel_errno[5] = { 0, ENOENT, EBUSY, EALREADY, EBADF };

#define ADD(x, n) __atomic_add_fetch(&(x), (n), __ATOMIC_RELAXED)
#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELEASE)

static long now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec;
}

static void badf(const char *fmt, ...)
{
	va_list ap;

	ADD(bad, 1);
	va_start(ap, fmt);
	fprintf(stderr, "exs_stress: BAD: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static uint64_t rnd(struct worker *w)
{
	uint64_t x = w->rng;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return w->rng = x;
}

static void beat(struct worker *w, const char *phase)
{
	STORE(w->beat, now_s());
	STORE(w->phase, phase);
}

static exs_ahandle_t ahandle_of(struct worker *w, int i)
{
	return (exs_ahandle_t)(((uintptr_t)w->slot[i].gen << 16) | ((uintptr_t)w->id << 8) |
			       (uintptr_t)i);
}

/* a free slot (a done one is freed here: only its owner frees), or -1 */
static int slot_get(struct worker *w, int limit)
{
	int used = 0, fr = -1;

	for (int i = 0; i < SLOTS; i++) {
		int st = LOAD(w->slot[i].state);

		if (st == S_DONE)
			STORE(w->slot[i].state, st = S_FREE);
		if (st == S_POSTED)
			used++;
		else if (fr < 0)
			fr = i;
	}
	return used < limit ? fr : -1;
}

/* Before the call that starts the operation: its event may come before
 * the call returns. */
static void slot_arm(struct worker *w, int i, int kind, int fd, exs_qhandle_t q, size_t len)
{
	struct slot *s = &w->slot[i];

	s->kind = kind;
	s->fd = fd;
	s->q = q;
	s->len = len;
	s->newfd = -1;
	STORE(s->gen, s->gen + 1 == 0 ? 1 : s->gen + 1);
	STORE(s->state, S_POSTED);
	ADD(posted[kind], 1);
}

/* The call failed to start it: no event will come. */
static void slot_unarm(struct worker *w, int i)
{
	ADD(posted[w->slot[i].kind], -1);
	STORE(w->slot[i].state, S_FREE);
}

static void start_failed(const char *what, int fd, int err)
{
	for (int k = 0; k < 5; k++)
		if (err == startfail_errno[k]) {
			ADD(startfail[k], 1);
			return;
		}
	badf("%s on socket %d failed to start: %s", what, fd, strerror(err));
}

static int err_index(int e)
{
	switch (e) {
	case 0: return E_OK;
	case ECONNRESET: return E_RESET;
	case ECONNABORTED: return E_ABORTED;
	case EPIPE: return E_PIPE;
	case ECANCELED: return E_CANCELED;
	}
	return -1;
}

static bool errno_documented(int kind, int e)
{
	int x = err_index(e);

	if (kind == K_CONNECT)
		return true; /* judged by connect_pair */
	if (x < 0)
		return false;
	switch (kind) {
	case K_SEND: return true;
	case K_RECV: return x != E_PIPE;
	case K_ACCEPT: return x == E_OK || x == E_CANCELED; /* end_accept */
	default: return x == E_OK; /* close */
	}
}

/* One event: find its operation by the ahandle and complete it, once. */
static void handle_event(struct worker *self, const exs_event_t *ev)
{
	uintptr_t h = (uintptr_t)ev->exs_evt_ahandle;
	unsigned gen = (unsigned)(h >> 16);
	int t = (int)((h >> 8) & 0xff), i = (int)(h & 0xff);
	struct slot *s;
	int expect = S_POSTED, kind;

	if (t > nthreads || i >= SLOTS) {
		badf("event type %d socket %d with unknown ahandle %#lx", ev->exs_evt_type,
		     ev->exs_evt_socket, (unsigned long)h);
		return;
	}
	s = &wk[t].slot[i];
	if (LOAD(s->gen) != gen || LOAD(s->state) != S_POSTED) {
		badf("event type %d socket %d errno %d: its operation (thread %d slot %d gen %u) "
		     "is not outstanding (duplicate or stale event)",
		     ev->exs_evt_type, ev->exs_evt_socket, ev->exs_evt_errno, t, i, gen);
		return;
	}
	kind = s->kind; /* s is its owner's again once it is S_DONE */
	if (ev->exs_evt_type != kevt[s->kind] || ev->exs_evt_socket != s->fd)
		badf("%s on socket %d completed as event type %d on socket %d", kname[s->kind],
		     s->fd, ev->exs_evt_type, ev->exs_evt_socket);
	if (!errno_documented(s->kind, ev->exs_evt_errno))
		badf("%s on socket %d: event errno %d (%s) is not documented", kname[s->kind],
		     s->fd, ev->exs_evt_errno, strerror(ev->exs_evt_errno));
	else if (err_index(ev->exs_evt_errno) >= 0)
		ADD(evterr[s->kind][err_index(ev->exs_evt_errno)], 1);
	if (s->kind == K_SEND || s->kind == K_RECV) {
		const struct exs_evt_xfer *x = &ev->exs_evt_union.exs_evt_xfer;

		if (x->exs_evt_buffer != s->buf || x->exs_evt_length > s->len ||
		    (s->kind == K_SEND && !ev->exs_evt_errno && x->exs_evt_length != s->len))
			badf("%s on socket %d: buffer %p length %zu (posted %p, %zu)",
			     kname[s->kind], s->fd, x->exs_evt_buffer, x->exs_evt_length, s->buf,
			     s->len);
	}
	s->err = ev->exs_evt_errno;
	if (s->kind == K_ACCEPT)
		s->newfd = ev->exs_evt_errno ? -1 : ev->exs_evt_union.exs_evt_accept.exs_evt_new_socket;
	if (!__atomic_compare_exchange_n(&s->state, &expect, S_DONE, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE)) {
		badf("%s completed twice at once", kname[kind]);
		return;
	}
	ADD(completed[kind], 1);
	if (self)
		beat(self, "handling events");
}

/* dequeue up to 16 events of q; the count taken, or -1 (EINVAL: bad) */
static int drain(struct worker *w, exs_qhandle_t q, long usec)
{
	exs_event_t ev[16];
	struct timeval tv = { usec / 1000000, usec % 1000000 };
	int n = exs_qdequeue(q, ev, 16, &tv);

	if (n < 0) {
		badf("exs_qdequeue of a live queue: %s", strerror(errno));
		return -1;
	}
	for (int k = 0; k < n; k++)
		handle_event(w, &ev[k]);
	return n;
}

static void post_xfer(struct worker *w, int kind, int fd, int i, exs_qhandle_t q, size_t len)
{
	exs_mhandle_t mh = rnd(w) & 1 ? w->mh : EXS_MHANDLE_UNREGISTERED;
	exs_ahandle_t ah;
	ssize_t r;

	slot_arm(w, i, kind, fd, q, len);
	ah = ahandle_of(w, i);
	if (kind == K_SEND)
		r = exs_send(fd, w->slot[i].buf, len, 0, q, ah, mh);
	else
		r = exs_recv(fd, w->slot[i].buf, len, 0, q, ah, mh);
	if (r < 0) {
		int e = errno;

		slot_unarm(w, i);
		start_failed(kname[kind], fd, e);
	}
}

/* cancel slot i's operation (-1: a random slot's, if outstanding) */
static void try_cancel(struct worker *w, int i)
{
	int r;

	if (i < 0)
		i = (int)(rnd(w) % SLOTS);
	struct slot *s = &w->slot[i];

	if (LOAD(s->state) != S_POSTED || (s->kind != K_SEND && s->kind != K_RECV))
		return;
	r = exs_cancel(s->fd, ahandle_of(w, i), 0) ? errno : 0;
	for (int k = 0; k < 5; k++)
		if (r == cancel_errno[k]) {
			ADD(cancels[k], 1);
			return;
		}
	badf("exs_cancel of a %s on socket %d: %s", kname[s->kind], s->fd, strerror(r));
}

/* a slot for a close, accept or connect: the data operations leave
 * SLOTS - DATA_SLOTS, but a thread's closes may be lingering */
static int slot_wait(struct worker *w)
{
	int i;

	while ((i = slot_get(w, SLOTS)) < 0)
		for (int k = 0; k < NQ; k++)
			drain(w, sq[k], 1000);
	return i;
}

/* wait for slot i's event in the private queue q (handling all of q's) */
static bool await(struct worker *w, exs_qhandle_t q, int i)
{
	while (LOAD(w->slot[i].state) == S_POSTED)
		if (drain(w, q, 100000) < 0)
			return false;
	return true;
}

/* an errno a connect's event may carry (exs_connect(3)) without a bug */
static bool connect_errno_documented(int e)
{
	return e == ECONNREFUSED || e == ETIMEDOUT || e == ECONNRESET || e == EAGAIN;
}

/* end the accept of slot ia: cancelled, or completed meanwhile (its new
 * socket is closed); one being set up (EBUSY) ends either way soon */
static void end_accept(struct worker *w, int t, int ia)
{
	while (LOAD(w->slot[ia].state) == S_POSTED) {
		if (exs_cancel(lfd[t], ahandle_of(w, ia), EXS_CANCEL_ACCEPT) == 0 ||
		    errno == ENOENT)
			break;
		if (errno != EBUSY) {
			badf("exs_cancel of an accept: %s", strerror(errno));
			break;
		}
		drain(w, aq[t], 100000);
	}
	await(w, aq[t], ia);
	if (w->slot[ia].newfd >= 0)
		exs_close(w->slot[ia].newfd, EXS_BLOCK | EXS_DONTLINGER, NULL, NULL);
	STORE(w->slot[ia].state, S_FREE);
}

/* A connected pair of type `type`: one accept, then connects until one
 * succeeds (at most 5, each counted: harden.sh wants none to fail). */
static bool connect_pair(struct worker *w, int type, int *a, int *b)
{
	int t = type == SOCK_STREAM, ia, ic, fd = -1, e;
	struct exs_acceptaddr av = { 0 };

	pthread_mutex_lock(&reconnect_lock[t]);
	beat(w, "reconnecting");
	ia = slot_wait(w);
	slot_arm(w, ia, K_ACCEPT, lfd[t], aq[t], 0);
	av.exs_ahandle = ahandle_of(w, ia);
	if (exs_accept(lfd[t], &av, 1, 0, aq[t])) {
		badf("exs_accept: %s", strerror(errno));
		slot_unarm(w, ia);
		pthread_mutex_unlock(&reconnect_lock[t]);
		return false;
	}
	for (int attempt = 0; attempt < 5 && fd < 0; attempt++) {
		fd = exs_socket(AF_INET, type, 0);
		if (fd < 0) {
			badf("exs_socket: %s", strerror(errno));
			break;
		}
		ic = slot_wait(w);
		slot_arm(w, ic, K_CONNECT, fd, aq[t], 0);
		if (exs_connect(fd, (struct sockaddr *)&addr[t], sizeof(addr[t]), 0, NULL, aq[t],
				ahandle_of(w, ic))) {
			badf("exs_connect: %s", strerror(errno));
			slot_unarm(w, ic);
			e = -1;
		} else {
			await(w, aq[t], ic);
			e = w->slot[ic].err;
			STORE(w->slot[ic].state, S_FREE);
		}
		if (e) {
			if (e > 0) {
				ADD(connect_failed, 1);
				fprintf(stderr, "exs_stress: a %s connect failed: %s%s\n",
					t ? "stream" : "seqpacket", strerror(e),
					attempt < 4 ? ", trying again" : "");
				usleep(100000);
			}
			if (e > 0 && !connect_errno_documented(e))
				badf("connect: %s", strerror(e));
			exs_close(fd, EXS_BLOCK, NULL, NULL);
			fd = -1;
			if (e < 0 || !connect_errno_documented(e))
				break;
		}
	}
	if (fd < 0) {
		end_accept(w, t, ia);
		pthread_mutex_unlock(&reconnect_lock[t]);
		return false;
	}
	await(w, aq[t], ia);
	*a = fd;
	*b = w->slot[ia].newfd;
	STORE(w->slot[ia].state, S_FREE);
	ADD(reconnects, 1);
	pthread_mutex_unlock(&reconnect_lock[t]);
	return *b >= 0;
}

/* close one end: async (an event of ours) or EXS_BLOCK */
static void close_end(struct worker *w, int fd, int flags)
{
	int i;

	if (fd < 0) /* a reconnect failed (counted as bad) */
		return;
	if (flags & EXS_BLOCK) {
		if (exs_close(fd, flags, NULL, NULL))
			badf("exs_close(%d, %#x): %s", fd, flags, strerror(errno));
		ADD(blocking_closes, 1);
		return;
	}
	exs_qhandle_t q = sq[rnd(w) % NQ];

	i = slot_wait(w);
	slot_arm(w, i, K_CLOSE, fd, q, 0);
	if (exs_close(fd, flags, q, ahandle_of(w, i))) {
		badf("exs_close(%d, %#x): %s", fd, flags, strerror(errno));
		slot_unarm(w, i);
	}
}

static void close_and_reconnect(struct worker *w, struct pair *p)
{
	static const int aflags[3] = { 0, EXS_DONTLINGER, EXS_DONTLINGER | EXS_BLOCK };
	int zero = 0, a, b;

	if (!__atomic_compare_exchange_n(&p->busy, &zero, 1, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		return;
	beat(w, "closing a pair");
	a = __atomic_exchange_n(&p->fd[0], -1, __ATOMIC_ACQ_REL);
	b = __atomic_exchange_n(&p->fd[1], -1, __ATOMIC_ACQ_REL);
	/* a graceful close only asynchronously: its sends may linger for the
	 * peer's receives; the other end's abort ends that at once */
	close_end(w, a, aflags[rnd(w) % 3]);
	close_end(w, b, EXS_DONTLINGER | (rnd(w) & 1 ? EXS_BLOCK : 0));
	if (connect_pair(w, p->type, &a, &b)) {
		STORE(p->fd[0], a);
		STORE(p->fd[1], b);
	}
	STORE(p->busy, 0);
}

/* a private queue with a receive that cannot complete: exs_qdelete must
 * refuse it until the receive is cancelled and its event taken */
static void queue_round(struct worker *w)
{
	exs_qhandle_t q = exs_qcreate(1 + (int)(rnd(w) % 8));
	struct pair *p = &pairs[rnd(w) % (unsigned)npairs];
	int ir, is = -1, fd = LOAD(p->fd[rnd(w) & 1]), r;
	exs_event_t ev;

	if (q == EXS_QHANDLE_INVALID) {
		badf("exs_qcreate: %s", strerror(errno));
		return;
	}
	beat(w, "deleting a queue");
	ir = slot_get(w, SLOTS);
	if (ir < 0)
		goto del;
	post_xfer(w, K_RECV, quiet.fd[0], ir, q, 1 + rnd(w) % SLOTBUF);
	if (LOAD(w->slot[ir].state) != S_POSTED)
		goto del; /* ENOBUFS: counted */
	is = slot_get(w, SLOTS);
	if (is >= 0 && fd >= 0)
		post_xfer(w, K_SEND, fd, is, q, 1 + rnd(w) % SLOTBUF);
	if (exs_qdelete(q) == 0) {
		badf("exs_qdelete of a queue with a receive outstanding succeeded");
		return; /* its events are lost: the counts will say so too */
	}
	if (errno != EBUSY)
		badf("exs_qdelete of a queue with a receive outstanding: %s (not EBUSY)",
		     strerror(errno));
	ADD(qdel_busy, 1);
	if (exs_cancel(quiet.fd[0], ahandle_of(w, ir), EXS_CANCEL_RECV) && errno != EALREADY)
		badf("exs_cancel of a receive on the quiet pair: %s", strerror(errno));
	if (is >= 0)
		try_cancel(w, is);
	await(w, q, ir);
	if (is >= 0)
		await(w, q, is);
del:
	if (exs_qdelete(q)) {
		badf("exs_qdelete of a drained queue: %s", strerror(errno));
		return;
	}
	ADD(qdel_ok, 1);
	/* the handle stays invalid */
	if (exs_qdequeue(q, &ev, 1, &(struct timeval){ 0 }) != -1 || errno != EINVAL)
		badf("exs_qdequeue of a deleted queue: not EINVAL");
	r = (int)exs_recv(quiet.fd[0], w->slot[0].buf, 1, 0, q, NULL, EXS_MHANDLE_UNREGISTERED);
	if (r != -1 || errno != EINVAL)
		badf("exs_recv naming a deleted queue: not EINVAL");
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	while (!LOAD(stop)) {
		unsigned r = (unsigned)(rnd(w) % 100);
		struct pair *p = &pairs[rnd(w) % (unsigned)npairs];
		int side = (int)(rnd(w) & 1), fd = LOAD(p->fd[side]), i;

		beat(w, "running");
		if (r < 60 && (i = slot_get(w, DATA_SLOTS)) >= 0 && fd >= 0) {
			post_xfer(w, r < 30 ? K_SEND : K_RECV, fd, i, sq[rnd(w) % NQ],
				  r < 30 ? 1 + rnd(w) % SLOTBUF : SLOTBUF);
		} else if (r < 85) {
			drain(w, sq[rnd(w) % NQ], rnd(w) & 1 ? 0 : 1000);
		} else if (r < 92) {
			try_cancel(w, -1);
		} else if (r < 96) {
			close_and_reconnect(w, p);
		} else {
			queue_round(w);
		}
	}
	STORE(w->phase, "done");
	return NULL;
}

static void *watchdog_main(void *arg)
{
	(void)arg;
	for (;;) {
		sleep(1);
		for (int t = 0; t <= nthreads; t++) {
			const char *ph = LOAD(wk[t].phase);

			if (!ph || !strcmp(ph, "done") || now_s() - LOAD(wk[t].beat) < watchdog_secs)
				continue;
			fprintf(stderr, "exs_stress: HANG: thread %d no progress for %d s (%s)\n", t,
				watchdog_secs, ph);
			for (int k = 0; k < NKIND; k++)
				fprintf(stderr, "  %s: posted %ld completed %ld\n", kname[k],
					LOAD(posted[k]), LOAD(completed[k]));
			for (int u = 0; u <= nthreads; u++)
				for (int i = 0; i < SLOTS; i++)
					if (LOAD(wk[u].slot[i].state) == S_POSTED)
						fprintf(stderr, "  outstanding: thread %d slot %d: %s on "
							"socket %d\n", u, i, kname[wk[u].slot[i].kind],
							wk[u].slot[i].fd);
			for (int k = 0; k < npairs; k++)
				fprintf(stderr, "  pair %d (%s): %d %d\n", k,
					pairs[k].type == SOCK_STREAM ? "stream" : "seqpacket",
					LOAD(pairs[k].fd[0]), LOAD(pairs[k].fd[1]));
			_exit(3);
		}
	}
	return NULL;
}

static long outstanding(void)
{
	long n = 0;

	for (int k = 0; k < NKIND; k++)
		n += LOAD(posted[k]) - LOAD(completed[k]);
	return n;
}

static int listener(int type, int port, struct sockaddr_in *sa)
{
	int fd = exs_socket(AF_INET, type, 0);

	sa->sin_port = htons((uint16_t)port);
	if (fd < 0 || exs_bind(fd, (struct sockaddr *)sa, sizeof(*sa)) || exs_listen(fd, 16)) {
		fprintf(stderr, "exs_stress: listener on port %d: %s\n", port, strerror(errno));
		exit(1);
	}
	return fd;
}

static int usage(void)
{
	fprintf(stderr, "usage: exs_stress ADDR PORT [-t THREADS] [-d SECS] [-p PAIRS] "
			"[-w WATCHDOG]\n");
	return 2;
}

int main(int argc, char **argv)
{
	struct worker *m;
	int secs = 60, per_type = 2, port, opt;
	pthread_t wd;
	long t0;

	while ((opt = getopt(argc, argv, "t:d:p:w:")) != -1) {
		int v = atoi(optarg);

		switch (opt) {
		case 't': if (v < 1 || v > MAXTHREADS) return usage(); nthreads = v; break;
		case 'd': if (v < 1 || v > 3600) return usage(); secs = v; break;
		case 'p': if (v < 1 || v > MAXPAIRS / 2) return usage(); per_type = v; break;
		case 'w': if (v < 10 || v > 600) return usage(); watchdog_secs = v; break;
		default: return usage();
		}
	}
	if (argc - optind != 2)
		return usage();
	addr[0].sin_family = AF_INET;
	if (inet_pton(AF_INET, argv[optind], &addr[0].sin_addr) != 1)
		return usage();
	port = atoi(argv[optind + 1]);
	if (port < 1 || port > 65534)
		return usage();
	addr[1] = addr[0];
	if (exs_init(EXS_VERSION1)) {
		perror("exs_init");
		return 1;
	}
	/* main's slots are those of worker index nthreads (the ahandle's
	 * thread field); move it there */
	m = &wk[nthreads];
	for (int t = 0; t <= nthreads; t++) {
		struct worker *w = &wk[t];

		w->id = t;
		w->rng = 0x9e3779b97f4a7c15ull * (uint64_t)(t + 1) ^ (uint64_t)time(NULL);
		w->area = aligned_alloc(4096, SLOTS * SLOTBUF);
		if (!w->area)
			return 1;
		memset(w->area, 0, SLOTS * SLOTBUF);
		w->mh = exs_mregister(w->area, SLOTS * SLOTBUF, 0);
		if (w->mh == EXS_MHANDLE_INVALID) {
			perror("exs_mregister");
			return 1;
		}
		for (int i = 0; i < SLOTS; i++)
			w->slot[i].buf = w->area + (size_t)i * SLOTBUF;
	}
	for (int i = 0; i < NQ; i++)
		if ((sq[i] = exs_qcreate(256)) == EXS_QHANDLE_INVALID)
			return perror("exs_qcreate"), 1;
	for (int i = 0; i < 2; i++)
		if ((aq[i] = exs_qcreate(4)) == EXS_QHANDLE_INVALID)
			return perror("exs_qcreate"), 1;
	lfd[0] = listener(SOCK_SEQPACKET, port, &addr[0]);
	lfd[1] = listener(SOCK_STREAM, port + 1, &addr[1]);
	npairs = 2 * per_type;
	beat(m, "connecting");
	pthread_create(&wd, NULL, watchdog_main, NULL);
	for (int k = 0; k < npairs; k++) {
		pairs[k].type = k % 2 ? SOCK_STREAM : SOCK_SEQPACKET;
		if (!connect_pair(m, pairs[k].type, &pairs[k].fd[0], &pairs[k].fd[1]))
			return fprintf(stderr, "exs_stress: the first connections failed\n"), 1;
	}
	quiet.type = SOCK_STREAM;
	if (!connect_pair(m, SOCK_STREAM, &quiet.fd[0], &quiet.fd[1]))
		return fprintf(stderr, "exs_stress: the quiet connection failed\n"), 1;
	t0 = now_s();
	for (int t = 0; t < nthreads; t++)
		pthread_create(&wk[t].tid, NULL, worker_main, &wk[t]);
	while (now_s() - t0 < secs) {
		beat(m, "timing the run");
		sleep(1);
	}
	STORE(stop, 1);
	/* the end: close every pair (once no thread is reconnecting it), so
	 * that whatever waits on them ends, then every operation must have
	 * had its event */
	beat(m, "closing everything");
	for (int k = 0; k < npairs; k++) {
		int zero = 0;

		while (!__atomic_compare_exchange_n(&pairs[k].busy, &zero, 1, false,
						    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			zero = 0;
			usleep(1000);
		}
		close_end(m, __atomic_exchange_n(&pairs[k].fd[0], -1, __ATOMIC_ACQ_REL), 0);
		close_end(m, __atomic_exchange_n(&pairs[k].fd[1], -1, __ATOMIC_ACQ_REL),
			  EXS_DONTLINGER);
	}
	beat(m, "joining the threads");
	for (int t = 0; t < nthreads; t++)
		pthread_join(wk[t].tid, NULL);
	close_end(m, quiet.fd[0], 0);
	close_end(m, quiet.fd[1], 0);
	beat(m, "draining");
	while (outstanding() > 0)
		for (int i = 0; i < NQ; i++)
			drain(m, sq[i], 10000);
	/* nothing more may come: a late event would be a duplicate */
	for (int i = 0; i < NQ; i++)
		while (drain(m, sq[i], 200000) > 0)
			;
	for (int t = 0; t < 2; t++)
		if (exs_close(lfd[t], EXS_BLOCK, NULL, NULL))
			badf("exs_close of a listener: %s", strerror(errno));
	for (int i = 0; i < NQ; i++)
		if (exs_qdelete(sq[i]))
			badf("exs_qdelete of a drained shared queue: %s", strerror(errno));
	for (int i = 0; i < 2; i++)
		if (exs_qdelete(aq[i]))
			badf("exs_qdelete of an accept queue: %s", strerror(errno));
	STORE(m->phase, "done");

	printf("exs_stress: %d threads, %d s, %d pairs + 1 quiet:", nthreads, secs, npairs);
	for (int k = 0; k < NKIND; k++) {
		printf(" %s %ld/%ld (", kname[k], completed[k], posted[k]);
		for (int e = 0; e < NERR; e++)
			if (evterr[k][e])
				printf("%s%s %ld", e ? " " : "", ename[e], evterr[k][e]);
		printf(");");
		if (completed[k] != posted[k])
			badf("%s: %ld posted, %ld completed", kname[k], posted[k], completed[k]);
	}
	printf(" refused to start: EBADF %ld ENOTCONN %ld EBUSY %ld EPIPE %ld ECONNRESET %ld;",
	       startfail[0], startfail[1], startfail[2], startfail[3], startfail[4]);
	printf(" exs_cancel: 0 %ld ENOENT %ld EBUSY %ld EALREADY %ld EBADF %ld;", cancels[0],
	       cancels[1], cancels[2], cancels[3], cancels[4]);
	printf(" qdelete EBUSY %ld then 0 %ld; %ld connections (%ld connects failed and were "
	       "retried), %ld blocking closes; %ld bad\n",
	       qdel_busy, qdel_ok, reconnects, connect_failed, blocking_closes, bad);
	return bad ? 1 : 0;
}
