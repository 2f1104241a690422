/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs_conform: the conformance suite. One check per behaviour the
 * programmer's guide documents (or this implementation chose where it is
 * silent: README "errno choices"), each naming the guide section it checks,
 * run against the real exsd over one RDMA device.
 *
 *   exs_conform ADDR PORT     ADDR: this host's address on the device;
 *                             PORT: first of the ~40 ports the checks use
 *
 * Prints "PASS [§N] what" or "FAIL [§N] what: detail" per check and ends
 * with "N passed, N failed"; exit 0 only if nothing failed. Every wait is
 * bounded (10 s), so a missing event is a FAIL, never a hang.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

#include <exs.h>

#define UNREG EXS_MHANDLE_UNREGISTERED
#define WAIT_S 10

static int passed, failed;
static struct in_addr host;
static uint16_t next_port;

static void report(bool ok, const char *sec, const char *fmt, ...)
{
	va_list ap;

	printf("%s [§%s] ", ok ? "PASS" : "FAIL", sec);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
	if (ok)
		passed++;
	else
		failed++;
}

/* a call that must fail with -1 and errno `want` */
static void expect_err(const char *sec, const char *what, long ret, int want)
{
	int e = errno;

	if (ret == -1 && e == want)
		report(true, sec, "%s: -1 %s", what, strerror(want));
	else
		report(false, sec, "%s: returned %ld (%s), wanted -1 %s", what, ret,
		       ret == -1 ? strerror(e) : "-", strerror(want));
}

static void expect_ok(const char *sec, const char *what, long ret)
{
	if (ret >= 0)
		report(true, sec, "%s", what);
	else
		report(false, sec, "%s: -1 %s", what, strerror(errno));
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static struct sockaddr_in addr_of(uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr = host };

	return sa;
}

/* one event within `ms`, or a zeroed event with type 0 */
static exs_event_t next_event(exs_qhandle_t q, int ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
	exs_event_t ev;

	if (exs_qdequeue(q, &ev, 1, &tv) != 1)
		memset(&ev, 0, sizeof(ev));
	return ev;
}

static bool event_is(const exs_event_t *ev, int type, int fd, void *ah, int err)
{
	return ev->exs_evt_type == type && ev->exs_evt_socket == fd && ev->exs_evt_ahandle == ah &&
	       ev->exs_evt_errno == err;
}

static size_t ev_len(const exs_event_t *ev)
{
	return ev->exs_evt_union.exs_evt_xfer.exs_evt_length;
}

/* when set, applied to both ends before connect/listen (guide §7 checks):
 * `active` tells the connecting end from the listener; non-zero fails */
static int (*tune)(int fd, bool active);

static int listener(int type, uint16_t port, int backlog, int credits)
{
	struct sockaddr_in sa = addr_of(port);
	int fd = exs_socket(AF_INET, type, 0);

	if (fd < 0)
		return -1;
	if ((credits && exs_fcntl(fd, EXS_F_SETFLOWCONTROLCREDITS, credits) < 0) ||
	    (tune && tune(fd, false)) ||
	    exs_bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    exs_listen(fd, backlog)) {
		exs_blocking_close(fd);
		return -1;
	}
	return fd;
}

/* a connected pair: *a the active end, *b the accepted one */
static bool make_pair(int type, int credits_a, int credits_b, int *a, int *b)
{
	uint16_t port = next_port++;
	struct sockaddr_in sa = addr_of(port), peer;
	struct exs_acceptaddr aa = { (struct sockaddr *)&peer, sizeof(peer), NULL };
	exs_qhandle_t q = exs_qcreate(2);
	exs_event_t ev;
	int lfd = listener(type, port, 4, credits_b);

	*a = *b = -1;
	if (lfd < 0 || !q || exs_accept(lfd, &aa, 1, 0, q))
		goto out;
	*a = exs_socket(AF_INET, type, 0);
	if (*a < 0 || (credits_a && exs_fcntl(*a, EXS_F_SETFLOWCONTROLCREDITS, credits_a) < 0) ||
	    (tune && tune(*a, true)) ||
	    exs_connect(*a, (struct sockaddr *)&sa, sizeof(sa), EXS_BLOCK, NULL, NULL, NULL))
		goto out;
	ev = next_event(q, WAIT_S * 1000);
	if (ev.exs_evt_type == EXS_EVT_ACCEPT && !ev.exs_evt_errno)
		*b = ev.exs_evt_union.exs_evt_accept.exs_evt_new_socket;
out:
	if (lfd >= 0)
		exs_blocking_close(lfd);
	if (q)
		exs_qdelete(q);
	if (*b < 0) {
		printf("  (pair on port %u failed: %s)\n", port, strerror(errno));
		if (*a >= 0)
			exs_blocking_close(*a);
		return false;
	}
	return true;
}

static void fill(char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (char)(seed + i * 7 + i / 251);
}

static bool same(const char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (char)(seed + i * 7 + i / 251))
			return false;
	return true;
}

/* ---- §2.1, §11.2.6-11.2.8: event queues */

static volatile sig_atomic_t signals;
static void on_signal(int sig)
{
	(void)sig;
	signals++;
}

static void queues(void)
{
	exs_qhandle_t q = exs_qcreate(4), dq;
	exs_event_t ev[4];
	struct timeval zero = { 0, 0 }, short_tv = { 0, 50000 };
	int v, a, b;
	double t;
	char buf[64];

	expect_err("2.1.1", "exs_qcreate(0)", exs_qcreate(0) ? 0 : -1, EINVAL);
	expect_err("2.1.1", "exs_qcreate(-1)", exs_qcreate(-1) ? 0 : -1, EINVAL);
	expect_err("2.1.3", "exs_qdequeue count 0", exs_qdequeue(q, ev, 0, &zero), EINVAL);
	expect_err("2.1.3", "exs_qdequeue NULL vector", exs_qdequeue(q, NULL, 1, &zero), EINVAL);
	expect_err("2.1.3", "exs_qdequeue NULL queue", exs_qdequeue(NULL, ev, 1, &zero), EINVAL);
	report(exs_qdequeue(q, ev, 1, &zero) == 0, "2.1.3", "zero timeout polls: returns 0");
	t = now();
	v = exs_qdequeue(q, ev, 1, &short_tv);
	t = now() - t;
	report(v == 0 && t >= 0.045 && t < 2, "2.1.3", "50 ms timeout returns 0 after %.0f ms", t * 1e3);

	/* attributes: the wait type only before first use */
	v = -1;
	report(!exs_qstatus(q, EXS_QATTR_WAIT, &v) && v == EXS_WAIT_ADAPTIVE, "11.2.7",
	       "default wait type EXS_WAIT_ADAPTIVE");
	expect_err("11.2.7", "EXS_QATTR_WAIT after the queue was used",
		   exs_qmodify(q, EXS_QATTR_WAIT, &(int){ EXS_WAIT_NOTIFY }), EBUSY);
	expect_err("11.2.7", "unknown attribute", exs_qmodify(q, 99, &(int){ 0 }), EINVAL);
	expect_err("11.2.8", "exs_qstatus NULL value", exs_qstatus(q, EXS_QATTR_EVENTS, NULL), EINVAL);
	dq = exs_qcreate(1);
	report(!exs_qmodify(dq, EXS_QATTR_WAIT, &(int){ EXS_WAIT_BUSY_POLL }) &&
	       !exs_qstatus(dq, EXS_QATTR_WAIT, &v) && v == EXS_WAIT_BUSY_POLL, "11.2.7",
	       "EXS_WAIT_BUSY_POLL set before first use, read back by exs_qstatus");
	expect_err("11.2.7", "bad wait type", exs_qmodify(dq, EXS_QATTR_WAIT, &(int){ 7 }), EINVAL);
	t = now();
	v = exs_qdequeue(dq, ev, 1, &short_tv);
	report(v == 0 && now() - t >= 0.045, "11.2.7", "busy-polling queue still honours its timeout");
	exs_qdelete(dq);

	/* events, depth, signal, negative counts: on a real connection */
	if (!make_pair(SOCK_SEQPACKET, 0, 0, &a, &b)) {
		report(false, "2.1", "connection for the queue checks");
		exs_qdelete(q);
		return;
	}
	signal(SIGUSR1, on_signal);
	report(!exs_qmodify(q, EXS_QATTR_SIGNAL, &(int){ SIGUSR1 }), "11.2.7", "EXS_QATTR_SIGNAL set");
	expect_err("11.2.7", "EXS_QATTR_SIGNAL SIGKILL", exs_qmodify(q, EXS_QATTR_SIGNAL, &(int){ SIGKILL }), EINVAL);
	report(!exs_qmodify(q, EXS_QATTR_EVENTS, &(int){ 16 }), "11.2.7", "EXS_QATTR_EVENTS resizes the depth");
	for (int i = 0; i < 3; i++)
		exs_recv(b, buf + i * 8, 8, 0, q, (void *)(long)(i + 1), UNREG);
	for (int i = 0; i < 3; i++)
		exs_send(a, "abcdefgh", 8, EXS_BLOCK, NULL, NULL, UNREG);
	struct timeval ten = { WAIT_S, 0 };
	v = exs_qdequeue(q, ev, -3, &ten);
	report(v == 3 && ev[0].exs_evt_ahandle == (void *)1 && ev[2].exs_evt_ahandle == (void *)3,
	       "2.1.3", "count -3 waits for and returns all 3 events, in order (got %d)", v);
	report(signals >= 1, "11.2.7", "EXS_QATTR_SIGNAL raised when events are posted (%d caught)", (int)signals);
	exs_qmodify(q, EXS_QATTR_SIGNAL, &(int){ 0 });
	signal(SIGUSR1, SIG_DFL);

	/* qdelete: refused while an operation holds the queue; drops events */
	exs_recv(b, buf, 8, 0, q, NULL, UNREG);
	expect_err("2.1.2", "exs_qdelete with a receive pending on it", exs_qdelete(q), EBUSY);
	exs_send(a, "x", 1, EXS_BLOCK, NULL, NULL, UNREG);
	t = now();
	while (exs_qstatus(q, EXS_QATTR_EVENTS, &v) == 0 && v < 1 && now() - t < WAIT_S)
		usleep(1000);
	report(v == 1, "11.2.8", "EXS_QATTR_EVENTS counts the waiting event");
	expect_ok("2.1.2", "exs_qdelete with an undequeued event (dropped)", exs_qdelete(q));
	expect_err("2.1.2", "exs_qdequeue on a deleted queue", exs_qdequeue(q, ev, 1, &zero), EINVAL);
	expect_err("2.1.2", "exs_qdelete twice", exs_qdelete(q), EINVAL);
	expect_err("2.1.2", "exs_recv on a deleted queue", exs_recv(b, buf, 8, 0, q, NULL, UNREG), EINVAL);
	/* the library may reuse a deleted queue's memory, never its handle */
	exs_qhandle_t q2 = exs_qcreate(4);
	report(q2 && q2 != q, "2.1.2", "exs_qcreate after exs_qdelete gives a new handle");
	expect_err("2.1.2", "the deleted handle after a new exs_qcreate", exs_qdequeue(q, ev, 1, &zero), EINVAL);
	expect_err("2.1.2", "exs_qdelete of it", exs_qdelete(q), EINVAL);
	exs_recv(b, buf, 8, 0, q2, (void *)7, UNREG);
	exs_send(a, "y", 1, EXS_BLOCK, NULL, NULL, UNREG);
	ev[0] = next_event(q2, WAIT_S * 1000);
	report(event_is(&ev[0], EXS_EVT_RECV, b, (void *)7, 0), "2.1.2", "the new queue gets its events");
	exs_qdelete(q2);
	exs_blocking_close(a);
	exs_blocking_close(b);
}

/* ---- §2.2, §8: registration */

/* §8.2: unregistered sends and receives in flight together, 8 of each,
 * 3 rounds: up to 64 KiB libexs copies them through pages it registered
 * once (zone.c), which hold 4 of 64 KiB at a time, so the rest register
 * their buffers as before; the data must come out the same either way. */
static bool unregistered_rounds(int a, int b, int type, size_t len)
{
	enum { N = 8 };
	exs_qhandle_t q = exs_qcreate(4 * N);
	char *in[N], *out[N];
	bool ok = q != EXS_QHANDLE_INVALID;
	int i, k, round;

	for (i = 0; i < N; i++) {
		in[i] = malloc(len);
		out[i] = malloc(len);
		ok = ok && in[i] && out[i];
	}
	for (round = 0; ok && round < 3; round++) {
		int got = 0;

		for (i = 0; i < N; i++) {
			memset(in[i], 0, len);
			fill(out[i], len, (unsigned)(round * N + i));
			ok = ok && !exs_recv(b, in[i], len, type == SOCK_STREAM ? MSG_WAITALL : 0, q,
					     (void *)(intptr_t)i, UNREG);
		}
		for (i = 0; ok && i < N; i++)
			ok = !exs_send(a, out[i], len, 0, q, (void *)(intptr_t)(N + i), UNREG);
		for (k = 0; ok && k < 2 * N; k++) {
			exs_event_t ev = next_event(q, WAIT_S * 1000);

			ok = !ev.exs_evt_errno && ev_len(&ev) == len &&
			     (ev.exs_evt_type == EXS_EVT_SEND || ev.exs_evt_type == EXS_EVT_RECV);
			got += ok && ev.exs_evt_type == EXS_EVT_RECV;
		}
		ok = ok && got == N;
		for (i = 0; ok && i < N; i++)
			ok = same(in[i], len, (unsigned)(round * N + i));
	}
	for (i = 0; i < N; i++) {
		free(in[i]);
		free(out[i]);
	}
	if (q != EXS_QHANDLE_INVALID)
		exs_qdelete(q);
	return ok;
}

static void registration(void)
{
	static char region[1 << 16];
	char outside[64];
	exs_mhandle_t mh, rd;
	exs_qhandle_t q = exs_qcreate(4);
	exs_event_t ev;
	int a, b;

	expect_err("8.1", "exs_mregister NULL", exs_mregister(NULL, 64, 0) ? 0 : -1, EINVAL);
	expect_err("8.1", "exs_mregister length 0", exs_mregister(region, 0, 0) ? 0 : -1, EINVAL);
	expect_err("8.1", "exs_mregister unknown flag", exs_mregister(region, 64, 0x4000) ? 0 : -1, EINVAL);
	mh = exs_mregister(region, sizeof(region), 0);
	rd = exs_mregister(region, 4096, EXS_MRF_RECV_DISABLE);
	report(mh != EXS_MHANDLE_INVALID && rd != EXS_MHANDLE_INVALID, "8.1", "exs_mregister");
	if (!make_pair(SOCK_STREAM, 0, 0, &a, &b))
		{ report(false, "8", "connection for the registration checks"); return; }
	expect_err("8.1", "buffer outside its region", exs_send(a, outside, 64, 0, q, NULL, mh), EINVAL);
	expect_err("8.1", "buffer running past its region's end",
		   exs_send(a, region + sizeof(region) - 8, 64, 0, q, NULL, mh), EINVAL);
	expect_err("8.1", "EXS_MRF_RECV_DISABLE region refused for exs_recv",
		   exs_recv(b, region, 64, 0, q, NULL, rd), EINVAL);
	expect_err("8.1", "EXS_MHANDLE_INVALID", exs_send(a, region, 64, 0, q, NULL, EXS_MHANDLE_INVALID), EINVAL);

	/* explicit: recv into the region, send from the RECV_DISABLE one */
	fill(region, 4096, 3);
	exs_recv(b, region + 8192, 4096, 0, q, (void *)1, mh);
	expect_err("8.1", "exs_mderegister while a receive uses it", exs_mderegister(mh, 0), EBUSY);
	exs_send(a, region, 4096, 0, q, (void *)2, rd);
	bool got_r = false, got_s = false;
	for (int i = 0; i < 2; i++) {
		ev = next_event(q, WAIT_S * 1000);
		if (event_is(&ev, EXS_EVT_RECV, b, (void *)1, 0))
			got_r = ev_len(&ev) == 4096 && ev.exs_evt_union.exs_evt_xfer.exs_evt_mhandle == mh &&
				ev.exs_evt_union.exs_evt_xfer.exs_evt_buffer == region + 8192;
		if (event_is(&ev, EXS_EVT_SEND, a, (void *)2, 0))
			got_s = ev_len(&ev) == 4096 && ev.exs_evt_union.exs_evt_xfer.exs_evt_mhandle == rd;
	}
	report(got_r && got_s && same(region + 8192, 4096, 3), "8.1",
	       "explicit registration: events carry buffer, mhandle, length; data intact");
	/* implicit */
	char *ib = malloc(100000), *ob = malloc(100000);
	fill(ob, 100000, 9);
	exs_recv(b, ib, 100000, MSG_WAITALL, q, NULL, UNREG);
	exs_send(a, ob, 100000, 0, q, NULL, UNREG);
	int ok = 0;
	for (int i = 0; i < 2; i++) {
		ev = next_event(q, WAIT_S * 1000);
		ok += !ev.exs_evt_errno && ev_len(&ev) == 100000;
	}
	report(ok == 2 && same(ib, 100000, 9), "8.2", "implicit registration (EXS_MHANDLE_UNREGISTERED)");
	free(ib);
	free(ob);
	static const size_t ulen[] = { 4097, 20000, 65536, 65537 };
	int sa, sb;
	bool seq_pair = make_pair(SOCK_SEQPACKET, 0, 0, &sa, &sb);

	for (size_t u = 0; u < sizeof(ulen) / sizeof(ulen[0]); u++) {
		report(unregistered_rounds(a, b, SOCK_STREAM, ulen[u]) &&
		       unregistered_rounds(b, a, SOCK_STREAM, ulen[u]), "8.2",
		       "STREAM: 8 unregistered %zu B sends and receives at once, 3 rounds, both ways", ulen[u]);
		report(seq_pair && unregistered_rounds(sa, sb, SOCK_SEQPACKET, ulen[u]) &&
		       unregistered_rounds(sb, sa, SOCK_SEQPACKET, ulen[u]), "8.2",
		       "SEQPACKET: 8 unregistered %zu B sends and receives at once, 3 rounds, both ways",
		       ulen[u]);
	}
	if (seq_pair) {
		exs_blocking_close(sa);
		exs_blocking_close(sb);
	}
	expect_ok("8.1", "exs_mderegister once idle", exs_mderegister(mh, 0));
	exs_mderegister(rd, 0);
	expect_err("8.1", "exs_mderegister twice", exs_mderegister(mh, 0), EINVAL);
	expect_err("8.1", "a deregistered handle", exs_send(a, region, 64, 0, q, NULL, mh), EINVAL);
	/* a stale second exs_mderegister leaves the next registration alone */
	exs_mhandle_t m3 = exs_mregister(region, 4096, 0);
	report(m3 != EXS_MHANDLE_INVALID && m3 != mh && m3 != rd, "8.1", "a new registration gets a new handle");
	expect_err("8.1", "exs_mderegister of the old handle after a new exs_mregister",
		   exs_mderegister(mh, 0), EINVAL);
	fill(region + 2048, 512, 5);
	exs_recv(b, region, 512, MSG_WAITALL, q, (void *)3, m3);
	long m3s = exs_blocking_send(a, region + 2048, 512, 0, m3);
	ev = next_event(q, WAIT_S * 1000);
	report(m3s == 512 && event_is(&ev, EXS_EVT_RECV, b, (void *)3, 0) && ev_len(&ev) == 512 &&
	       same(region, 512, 5), "8.1", "... which still moves data");
	expect_ok("8.1", "exs_mderegister of the new one", exs_mderegister(m3, 0));
	exs_blocking_close(a);
	exs_blocking_close(b);
	exs_qdelete(q);
}

/* ---- §3, §4.1: environment and sockets */

static void sockets(void)
{
	char buf[16];
	int fd, fd2;

	expect_err("3", "exs_init with an unknown version", exs_init(99), EINVAL);
	expect_ok("3", "exs_init(EXS_VERSION) again", exs_init(EXS_VERSION));
	expect_err("4.1", "exs_socket PF_UNIX", exs_socket(PF_UNIX, SOCK_STREAM, 0), EAFNOSUPPORT);
	expect_err("4.1", "exs_socket SOCK_DGRAM", exs_socket(PF_INET, SOCK_DGRAM, 0), ESOCKTNOSUPPORT);
	expect_err("4.1", "exs_socket protocol 17", exs_socket(PF_INET, SOCK_STREAM, 17), EPROTONOSUPPORT);
	fd = exs_socket(PF_INET6, SOCK_SEQPACKET, 0);
	expect_ok("4.1", "exs_socket PF_INET6 SOCK_SEQPACKET", fd);
	exs_blocking_close(fd);
	fd = exs_socket(PF_INET, SOCK_STREAM, 0);
	expect_err("5.2", "exs_recv before connect", exs_recv(fd, buf, 16, EXS_BLOCK, NULL, NULL, UNREG), ENOTCONN);
	expect_err("5.1", "exs_send before connect", exs_send(fd, buf, 16, EXS_BLOCK, NULL, NULL, UNREG), ENOTCONN);
	expect_err("4.5", "exs_shutdown before connect", exs_shutdown(fd, SHUT_WR, EXS_BLOCK, NULL, NULL), ENOTCONN);
	expect_err("4.3.2", "exs_accept on a socket not listening",
		   exs_accept(fd, &(struct exs_acceptaddr){ 0 }, 1, EXS_BLOCK, NULL), EINVAL);
	expect_err("4.1", "bad fd -1", exs_send(-1, buf, 1, EXS_BLOCK, NULL, NULL, UNREG), EBADF);
	expect_err("4.1", "bad fd 1000000", exs_close(1000000, EXS_BLOCK, NULL, NULL), EBADF);
	exs_blocking_close(fd);
	expect_err("4.4", "a closed fd", exs_send(fd, buf, 1, EXS_BLOCK, NULL, NULL, UNREG), EBADF);
	expect_err("4.4", "exs_close twice", exs_blocking_close(fd), EBADF);
	fd = exs_socket(PF_INET, SOCK_STREAM, 0);
	fd2 = exs_socket(PF_INET, SOCK_STREAM, 0);
	report(fd >= 0 && fd2 >= 0 && fd != fd2, "4.4", "a live fd is never handed out again");
	exs_blocking_close(fd);
	exs_blocking_close(fd2);
}

/* ---- §4.2, §4.3, §9.3, §9.4: connections */

static void connections(void)
{
	uint16_t port = next_port++, port2 = next_port++;
	struct sockaddr_in sa = addr_of(port), peers[2];
	struct exs_acceptaddr av[2] = { { (struct sockaddr *)&peers[0], sizeof(peers[0]), (void *)11 },
					{ (struct sockaddr *)&peers[1], sizeof(peers[1]), (void *)12 } };
	exs_qhandle_t q = exs_qcreate(8);
	exs_event_t ev;
	int lfd, l2, c[4], n_ok = 0, n_ref = 0, i;
	bool refused[4] = { false };

	lfd = listener(SOCK_STREAM, port, 2, 0);
	expect_ok("4.3.1", "exs_bind + exs_listen", lfd);
	l2 = exs_socket(AF_INET, SOCK_STREAM, 0);
	expect_err("4.3.1", "exs_bind to a port in use", exs_bind(l2, (struct sockaddr *)&sa, sizeof(sa)), EADDRINUSE);
	expect_err("4.3.1", "exs_bind NULL address", exs_bind(l2, NULL, sizeof(sa)), EINVAL);
	expect_err("4.3.1", "exs_listen on a listening socket", exs_listen(lfd, 4), EINVAL);
	exs_blocking_close(l2);

	/* backlog 2, nobody accepting: two connects wait, the rest are refused */
	for (i = 0; i < 4; i++) {
		c[i] = exs_socket(AF_INET, SOCK_STREAM, 0);
		exs_connect(c[i], (struct sockaddr *)&sa, sizeof(sa), 0, NULL, q, (void *)(long)i);
	}
	/* a refusal may take a while (exsd and the peer's CM are in the
	 * way, slower still under ASan): wait up to 20 s for both */
	int other = 0, other_errno = 0;
	double end = now() + 20;
	while (n_ref < 2 && now() < end) {
		ev = next_event(q, 1000);
		if (ev.exs_evt_type == EXS_EVT_CONNECT && ev.exs_evt_errno == ECONNREFUSED) {
			n_ref++;
			refused[(long)ev.exs_evt_ahandle & 3] = true;
		} else if (ev.exs_evt_type) {
			other++;
			other_errno = ev.exs_evt_errno;
		}
	}
	ev = next_event(q, 1000); /* the two within the backlog still wait */
	report(n_ref == 2 && !other && !ev.exs_evt_type, "4.3.1",
	       "backlog 2: 2 of 4 connects refused (ECONNREFUSED), the others wait (%d refused; "
	       "%d other events, errno %d; then event type %d errno %d)",
	       n_ref, other, other_errno, ev.exs_evt_type, ev.exs_evt_errno);
	/* an accept vector of two takes the two waiting connections */
	expect_ok("4.3.2", "exs_accept with an address vector of 2", exs_accept(lfd, av, 2, 0, q));
	int acc = 0, conn = 0, nfd[2] = { -1, -1 };
	for (i = 0; i < 4 && (acc < 2 || conn < 2); i++) {
		ev = next_event(q, WAIT_S * 1000);
		if (ev.exs_evt_type == EXS_EVT_ACCEPT && !ev.exs_evt_errno && ev.exs_evt_socket == lfd &&
		    ev.exs_evt_ahandle == (void *)(long)(11 + acc) &&
		    ev.exs_evt_union.exs_evt_accept.exs_evt_addr == av[acc].exs_addr &&
		    ev.exs_evt_union.exs_evt_accept.exs_evt_addrlen == sizeof(struct sockaddr_in) &&
		    peers[acc].sin_family == AF_INET && peers[acc].sin_addr.s_addr == host.s_addr &&
		    peers[acc].sin_port != 0 && ev.exs_evt_union.exs_evt_accept.exs_evt_new_socket >= 0) {
			nfd[acc] = ev.exs_evt_union.exs_evt_accept.exs_evt_new_socket;
			acc++;
		}
		if (ev.exs_evt_type == EXS_EVT_CONNECT && !ev.exs_evt_errno)
			conn++;
	}
	report(acc == 2 && conn == 2, "4.3.2",
	       "one EXS_EVT_ACCEPT per connection, every field filled (%d accepts, %d connects)", acc, conn);
	n_ok = 0;
	for (i = 0; i < 4; i++) {
		if (refused[i])
			continue; /* unbound again: a connect would wait for an accept */
		int r = exs_connect(c[i], (struct sockaddr *)&sa, sizeof(sa), EXS_BLOCK, NULL, NULL, NULL);
		n_ok += r == -1 && errno == EISCONN;
	}
	report(n_ok == 2, "4.2", "exs_connect on a connected socket: EISCONN (%d of 2)", n_ok);
	for (i = 0; i < 4; i++)
		exs_blocking_close(c[i]);
	for (i = 0; i < 2; i++)
		if (nfd[i] >= 0)
			exs_blocking_close(nfd[i]);

	/* synchronous forms (§9.3, §9.4) with an asynchronous close (§4.4) */
	l2 = listener(SOCK_SEQPACKET, port2, 1, 0);
	int cl = exs_socket(AF_INET, SOCK_SEQPACKET, 0);
	struct sockaddr_in s2 = addr_of(port2), pa;
	exs_connect(cl, (struct sockaddr *)&s2, sizeof(s2), 0, NULL, q, (void *)21);
	struct exs_acceptaddr one = { (struct sockaddr *)&pa, sizeof(pa), NULL };
	int af = exs_accept(l2, &one, 1, EXS_BLOCK, NULL);
	report(af >= 0 && pa.sin_addr.s_addr == host.s_addr, "9.4", "exs_accept with EXS_BLOCK returns the new fd and fills the address");
	ev = next_event(q, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_CONNECT, cl, (void *)21, 0), "4.2", "asynchronous exs_connect: EXS_EVT_CONNECT with its ahandle");
	expect_ok("4.4", "asynchronous exs_close started", exs_close(cl, 0, q, (void *)22));
	ev = next_event(q, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_CLOSE, cl, (void *)22, 0), "4.4", "EXS_EVT_CLOSE with its ahandle");
	exs_blocking_close(af);
	int c3 = exs_socket(AF_INET, SOCK_SEQPACKET, 0);
	socklen_t plen = sizeof(pa);
	exs_connect(c3, (struct sockaddr *)&s2, sizeof(s2), 0, NULL, q, NULL);
	af = exs_blocking_accept(l2, (struct sockaddr *)&pa, &plen);
	report(af >= 0 && plen == sizeof(pa), "9.4", "exs_blocking_accept");
	ev = next_event(q, WAIT_S * 1000);
	exs_blocking_close(af);
	exs_blocking_close(c3);
	exs_blocking_close(l2);
	exs_blocking_close(lfd);
	exs_qdelete(q);
}

/* ---- §5, §9.1-9.2, §11.2.9: data */

struct later {
	int fd;
	char *buf;
	size_t len;
	int delay_ms;
	int count; /* sends: how many pieces of len */
	bool plain; /* sends: exs_write rather than exs_blocking_send */
};

static void *send_pieces(void *arg)
{
	struct later *l = arg;

	usleep((useconds_t)l->delay_ms * 1000);
	for (int i = 0; i < l->count; i++)
		if ((l->plain ? exs_write(l->fd, l->buf + i * l->len, l->len)
			      : exs_blocking_send(l->fd, l->buf + i * l->len, l->len, 0, UNREG)) != (long)l->len)
			break;
	return NULL;
}

static void seqpacket(void)
{
	exs_qhandle_t q = exs_qcreate(8);
	char big[300], small[100], rb[500];
	exs_event_t ev;
	int a, b;

	if (!make_pair(SOCK_SEQPACKET, 0, 0, &a, &b))
		{ report(false, "5", "SEQPACKET connection"); return; }
	fill(big, sizeof(big), 1);
	exs_recv(b, rb, sizeof(rb), 0, q, (void *)1, UNREG);
	exs_send(a, big, 200, 0, q, (void *)2, UNREG);
	ev = next_event(q, WAIT_S * 1000);
	exs_event_t ev2 = next_event(q, WAIT_S * 1000);
	if (ev.exs_evt_type == EXS_EVT_SEND) {
		exs_event_t t = ev;
		ev = ev2;
		ev2 = t;
	}
	report(event_is(&ev, EXS_EVT_RECV, b, (void *)1, 0) && ev_len(&ev) == 200 &&
	       !ev.exs_evt_union.exs_evt_xfer.exs_evt_amount_lost && same(rb, 200, 1) &&
	       ev.exs_evt_union.exs_evt_xfer.exs_evt_buffer == rb, "5.4.1",
	       "larger receive buffer: exact length, nothing lost, buffer in the event");
	report(event_is(&ev2, EXS_EVT_SEND, a, (void *)2, 0) && ev_len(&ev2) == 200, "5.1",
	       "EXS_EVT_SEND with length and ahandle");
	exs_recv(b, small, sizeof(small), 0, q, NULL, UNREG);
	exs_send(a, big, 300, EXS_BLOCK, NULL, NULL, UNREG);
	ev = next_event(q, WAIT_S * 1000);
	report(ev.exs_evt_type == EXS_EVT_RECV && ev_len(&ev) == 100 &&
	       ev.exs_evt_union.exs_evt_xfer.exs_evt_amount_lost == 200 && same(small, 100, 1),
	       "5.4.2", "smaller receive buffer: 100 delivered, exs_evt_amount_lost 200");
	/* MSG_WAITALL has no effect on SEQPACKET */
	exs_recv(b, rb, sizeof(rb), MSG_WAITALL, q, NULL, UNREG);
	exs_send(a, big, 10, EXS_BLOCK, NULL, NULL, UNREG);
	ev = next_event(q, WAIT_S * 1000);
	report(ev.exs_evt_type == EXS_EVT_RECV && ev_len(&ev) == 10, "5.2", "SEQPACKET ignores MSG_WAITALL");
	/* §9.1, §9.2 */
	struct later w = { a, big, 50, 0, 1, true };
	pthread_t th;
	pthread_create(&th, NULL, send_pieces, &w);
	long r2 = exs_read(b, rb, sizeof(rb));
	pthread_join(th, NULL);
	report(r2 == 50 && same(rb, 50, 1), "9.1", "exs_write in one thread, exs_read in another: 50 B");
	exs_blocking_close(a);
	exs_blocking_close(b);
	exs_qdelete(q);
}

static void *recv_later(void *arg)
{
	struct later *l = arg;

	usleep((useconds_t)l->delay_ms * 1000);
	exs_recv(l->fd, l->buf, l->len, EXS_UNSIGNALED, NULL, NULL, UNREG);
	return NULL;
}

static void stream(void)
{
	exs_qhandle_t q = exs_qcreate(64);
	static char out[1 << 20], in[1 << 20];
	exs_event_t ev;
	int a, b, i, n;

	if (!make_pair(SOCK_STREAM, 4, 4, &a, &b))
		{ report(false, "5", "STREAM connection"); return; }
	fill(out, sizeof(out), 5);
	/* a send longer than the receive: spills over, nothing lost */
	exs_recv(b, in, 600, 0, q, (void *)1, UNREG);
	exs_recv(b, in + 600, 600, 0, q, (void *)2, UNREG);
	exs_send(a, out, 1000, EXS_BLOCK, NULL, NULL, UNREG);
	size_t got = 0, lost = 0;
	for (i = 0; i < 2; i++) {
		ev = next_event(q, WAIT_S * 1000);
		got += ev_len(&ev);
		lost += ev.exs_evt_union.exs_evt_xfer.exs_evt_amount_lost;
	}
	report(got == 1000 && !lost && same(in, 600, 5) && !memcmp(in + 600, out + 600, 400), "5.4.2",
	       "STREAM: 1000 B over receives of 600 + 600 arrive whole, nothing lost");
	/* MSG_WAITALL: ten sends fill one receive, in order */
	exs_recv(b, in, 10000, MSG_WAITALL, q, (void *)3, UNREG);
	exs_recv(b, in + 10000, 500, 0, q, (void *)4, UNREG);
	for (i = 0; i < 10; i++)
		exs_send(a, out + i * 1000, 1000, EXS_BLOCK, NULL, NULL, UNREG);
	ev = next_event(q, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_RECV, b, (void *)3, 0) && ev_len(&ev) == 10000 &&
	       !memcmp(in, out, 10000), "5.2", "MSG_WAITALL: 10 sends of 1000 fill one 10000 B receive");
	exs_send(a, out + 10000, 500, EXS_BLOCK, NULL, NULL, UNREG);
	ev = next_event(q, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_RECV, b, (void *)4, 0) && ev_len(&ev) == 500 &&
	       !memcmp(in + 10000, out + 10000, 500), "5.2", "the receive after it gets the next bytes (order kept)");
	/* §9.2: a blocking MSG_WAITALL receive gathers 50 blocking sends of 20 */
	struct later sl = { a, out, 20, 0, 50, false };
	pthread_t th;
	pthread_create(&th, NULL, send_pieces, &sl);
	long r = exs_blocking_recv(b, in, 1000, MSG_WAITALL, UNREG);
	pthread_join(th, NULL);
	report(r == 1000 && !memcmp(in, out, 1000), "9.2", "exs_blocking_recv MSG_WAITALL gathers 50 sends of 20 (%ld)", r);

	/* §6.1 credits: 4 negotiated; a fifth send is EBUSY, CREDIT_WAIT waits */
	n = exs_fcntl(a, EXS_F_GETFLOWCONTROLCREDITS);
	report(n == 4, "6.2", "credits 4 and 4 offered: %d", n);
	for (i = 0; i < 4; i++)
		exs_send(a, out, 100, 0, q, (void *)(long)(100 + i), UNREG);
	expect_err("6.1", "a fifth send with no credit left", exs_send(a, out, 100, 0, q, NULL, UNREG), EBUSY);
	struct later l = { b, in, 500, 300, 1, false };
	pthread_create(&th, NULL, recv_later, &l);
	double t = now();
	int rc = (int)exs_send(a, out, 100, EXS_CREDIT_WAIT, q, (void *)104, UNREG);
	t = now() - t;
	report(rc == 0 && t > 0.2, "11.2.9", "EXS_CREDIT_WAIT waits for a credit (%.0f ms) and starts", t * 1e3);
	pthread_join(th, NULL);
	/* The unsignalled receive took the first send; four more take the
	 * rest. Its credit comes back only when its data has been seen here,
	 * which may be after the sender's completion: wait for credits. */
	int started = 0, sends = 0, recvs = 0;
	for (i = 0; i < 4; i++)
		started += !exs_recv(b, in + 500 + i * 100, 100, EXS_CREDIT_WAIT, q,
				     (void *)(long)(110 + i), UNREG);
	exs_event_t seen[9];
	for (i = 0; i < 9; i++) {
		ev = seen[i] = next_event(q, WAIT_S * 1000);
		sends += ev.exs_evt_type == EXS_EVT_SEND && !ev.exs_evt_errno;
		recvs += ev.exs_evt_type == EXS_EVT_RECV && !ev.exs_evt_errno && ev_len(&ev) == 100;
	}
	if (started != 4 || sends != 5 || recvs != 4)
		for (i = 0; i < 9; i++)
			printf("  event %d: type %d ahandle %ld errno %d length %zu\n", i,
			       seen[i].exs_evt_type, (long)seen[i].exs_evt_ahandle,
			       seen[i].exs_evt_errno, ev_len(&seen[i]));
	report(started == 4 && sends == 5 && recvs == 4 && !next_event(q, 200).exs_evt_type, "11.2.9",
	       "EXS_UNSIGNALLED receive with a NULL queue completes without an event (%d sends, %d receives)",
	       sends, recvs);
	expect_err("6.1", "exs_fcntl SETFLOWCONTROLCREDITS after connect",
		   exs_fcntl(a, EXS_F_SETFLOWCONTROLCREDITS, 8), EISCONN);

	/* many outstanding operations */
	int okr = 0, oks = 0;
	for (i = 0; i < 4; i++)
		exs_recv(b, in + i * 4096, 4096, MSG_WAITALL | EXS_CREDIT_WAIT, q, (void *)(long)(200 + i), UNREG);
	for (i = 0; i < 4; i++)
		exs_send(a, out + i * 4096, 4096, 0, q, (void *)(long)(300 + i), UNREG);
	for (i = 0; i < 8; i++) {
		ev = next_event(q, WAIT_S * 1000);
		okr += ev.exs_evt_type == EXS_EVT_RECV && !ev.exs_evt_errno && ev_len(&ev) == 4096;
		oks += ev.exs_evt_type == EXS_EVT_SEND && !ev.exs_evt_errno;
	}
	report(okr == 4 && oks == 4 && !memcmp(in, out, 4 * 4096), "5.3", "4 receives and 4 sends outstanding at once");

	/* bad input on a live connection */
	expect_err("5.1", "NULL send buffer", exs_send(a, NULL, 10, 0, q, NULL, UNREG), EINVAL);
	expect_err("5.1", "send length 0", exs_send(a, out, 0, 0, q, NULL, UNREG), EINVAL);
	expect_err("5.1", "unknown send flag", exs_send(a, out, 10, 0x40, q, NULL, UNREG), EINVAL);
	expect_err("5.2", "MSG_WAITALL on exs_send", exs_send(a, out, 10, MSG_WAITALL, q, NULL, UNREG), EINVAL);
	expect_err("5.1", "NULL queue without EXS_BLOCK", exs_send(a, out, 10, 0, NULL, NULL, UNREG), EINVAL);
	expect_err("5.1", "send above 2^31-1", exs_send(a, out, (size_t)1 << 32, 0, q, NULL, UNREG), EMSGSIZE);
	/* a blocking 1 MiB round trip checks the connection is still sound */
	exs_recv(b, in, sizeof(in), MSG_WAITALL, q, NULL, UNREG);
	r = exs_blocking_send(a, out, sizeof(out), 0, UNREG);
	ev = next_event(q, WAIT_S * 1000);
	report(r == (long)sizeof(out) && ev_len(&ev) == sizeof(out) && !memcmp(in, out, sizeof(out)), "9.1",
	       "1 MiB exs_blocking_send into a MSG_WAITALL receive");
	exs_blocking_close(a);
	exs_blocking_close(b);
	exs_qdelete(q);
}

/* ---- exs_sendmsg, exs_recvmsg: scatter/gather (exs_sendmsg(3)) */

#define SG_MAX EXS_IOV_MAX

/* a message in n elements that lie apart (3 bytes between them) in one
 * region, registered; every other element's mhandle names it if `mixed`,
 * the rest are unregistered */
struct sg {
	struct iovec iov[SG_MAX];
	exs_mhandle_t mh[SG_MAX];
	struct msghdr m;
	char *base;
	exs_mhandle_t reg;
	size_t total;
};

static bool sg_make(struct sg *g, const size_t *len, int n, bool mixed)
{
	size_t cap = 0, off = 0;
	int i;

	memset(g, 0, sizeof(*g));
	for (i = 0; i < n; i++)
		cap += len[i] + 3;
	g->base = malloc(cap);
	g->reg = g->base ? exs_mregister(g->base, cap, 0) : NULL;
	if (!g->reg) {
		free(g->base);
		return false;
	}
	for (i = 0; i < n; i++) {
		g->iov[i] = (struct iovec){ g->base + off, len[i] };
		g->mh[i] = mixed && i % 2 == 0 ? g->reg : UNREG;
		off += len[i] + 3;
		g->total += len[i];
	}
	memset(g->base, 0x5a, cap);
	g->m.msg_iov = g->iov;
	g->m.msg_iovlen = (size_t)n;
	return true;
}

static void sg_free(struct sg *g)
{
	exs_mderegister(g->reg, 0);
	free(g->base);
}

/* copy between the elements, in order, and p (total bytes) */
static void sg_copy(struct sg *g, char *p, bool into)
{
	for (size_t i = 0; i < g->m.msg_iovlen; i++) {
		if (into)
			memcpy(g->iov[i].iov_base, p, g->iov[i].iov_len);
		else
			memcpy(p, g->iov[i].iov_base, g->iov[i].iov_len);
		p += g->iov[i].iov_len;
	}
}

/* the elements hold the first n bytes of the pattern `seed`, and the gaps
 * between them are untouched */
static bool sg_holds(struct sg *g, size_t n, unsigned seed)
{
	char *lin = malloc(g->total);
	bool ok = lin != NULL;

	if (ok) {
		sg_copy(g, lin, false);
		ok = same(lin, n, seed);
	}
	for (size_t i = 0; ok && i + 1 < g->m.msg_iovlen; i++) {
		const char *gap = (char *)g->iov[i].iov_base + g->iov[i].iov_len;

		ok = gap[0] == 0x5a && gap[1] == 0x5a && gap[2] == 0x5a;
	}
	free(lin);
	return ok;
}

static void sg_fill(struct sg *g, unsigned seed)
{
	char *lin = malloc(g->total);

	if (!lin)
		return;
	fill(lin, g->total, seed);
	sg_copy(g, lin, true);
	free(lin);
}

/* n odd sizes, a few of them above a page, summing to `total` when it is
 * not 0 (the last takes what is left) */
static int sg_sizes(size_t *len, int n, unsigned seed, size_t total)
{
	size_t sum = 0;
	int i;

	for (i = 0; i < n; i++) {
		len[i] = ((i * 37 + seed) % 97) * 2 + 1;
		if ((i + seed) % 16 == 5)
			len[i] += 4096;
		if (total && (i == n - 1 || sum + len[i] >= total)) {
			len[i] = total - sum;
			return i + 1;
		}
		sum += len[i];
	}
	return n;
}

static void sg_args(int a, exs_qhandle_t q)
{
	char buf[64];
	struct iovec iov[SG_MAX + 1], empty = { buf, 0 };
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = 2 }, z = m;
	exs_mhandle_t mh[2] = { UNREG, UNREG };
	exs_mhandle_t reg = exs_mregister(buf, 16, 0);
	int u = exs_socket(AF_INET, SOCK_STREAM, 0);

	for (int i = 0; i <= SG_MAX; i++)
		iov[i] = (struct iovec){ buf + i % 32, 2 };
	expect_err("sg", "exs_sendmsg(NULL msg)", exs_sendmsg(a, NULL, 0, q, NULL, NULL), EINVAL);
	expect_err("sg", "exs_recvmsg(NULL msg)", exs_recvmsg(a, NULL, 0, q, NULL, NULL), EINVAL);
	m.msg_iovlen = 0;
	expect_err("sg", "exs_sendmsg with msg_iovlen 0", exs_sendmsg(a, &m, 0, q, NULL, NULL),
		   EMSGSIZE);
	m.msg_iovlen = SG_MAX + 1;
	expect_err("sg", "exs_sendmsg with EXS_IOV_MAX + 1 elements",
		   exs_sendmsg(a, &m, 0, q, NULL, NULL), EMSGSIZE);
	expect_err("sg", "exs_recvmsg with EXS_IOV_MAX + 1 elements",
		   exs_recvmsg(a, &m, 0, q, NULL, NULL), EMSGSIZE);
	m.msg_iovlen = 2;
	m.msg_iov = NULL;
	expect_err("sg", "exs_sendmsg with msg_iov NULL", exs_sendmsg(a, &m, 0, q, NULL, NULL),
		   EINVAL);
	m.msg_iov = &empty;
	m.msg_iovlen = 1;
	expect_err("sg", "exs_sendmsg of 0 bytes", exs_sendmsg(a, &m, 0, q, NULL, NULL), EINVAL);
	m = z;
	m.msg_control = buf;
	m.msg_controllen = 8;
	expect_err("sg", "exs_sendmsg with control data", exs_sendmsg(a, &m, 0, q, NULL, NULL),
		   EINVAL);
	expect_err("sg", "exs_recvmsg with a control buffer", exs_recvmsg(a, &m, 0, q, NULL, NULL),
		   EINVAL);
	m = z;
	m.msg_name = buf;
	m.msg_namelen = sizeof(struct sockaddr_in);
	expect_err("sg", "exs_sendmsg with a destination on a connected socket",
		   exs_sendmsg(a, &m, 0, q, NULL, NULL), EISCONN);
	m = z;
	iov[1].iov_base = NULL;
	expect_err("sg", "exs_sendmsg with a NULL element", exs_sendmsg(a, &m, 0, q, NULL, NULL),
		   EINVAL);
	iov[1] = (struct iovec){ buf, (size_t)INT32_MAX };
	expect_err("sg", "exs_sendmsg of more than 2^31-1 bytes in all",
		   exs_sendmsg(a, &m, 0, q, NULL, NULL), EMSGSIZE);
	iov[1] = (struct iovec){ buf + 32, 2 };
	expect_err("sg", "exs_sendmsg with an unknown flag", exs_sendmsg(a, &m, 0x4, q, NULL, NULL),
		   EINVAL);
	expect_err("sg", "exs_sendmsg with MSG_WAITALL",
		   exs_sendmsg(a, &m, MSG_WAITALL, q, NULL, NULL), EINVAL);
	expect_err("sg", "exs_sendmsg without a queue", exs_sendmsg(a, &m, 0, NULL, NULL, NULL),
		   EINVAL);
	mh[1] = reg; /* 16 bytes at buf: not buf + 32 */
	expect_err("sg", "exs_sendmsg with an mhandle not holding its element",
		   exs_sendmsg(a, &m, 0, q, NULL, mh), EINVAL);
	expect_err("sg", "exs_recvmsg with an mhandle not holding its element",
		   exs_recvmsg(a, &m, 0, q, NULL, mh), EINVAL);
	expect_err("sg", "exs_sendmsg on a socket not connected", exs_sendmsg(u, &m, 0, q, NULL, NULL),
		   ENOTCONN);
	expect_err("sg", "exs_recvmsg on a bad fd", exs_recvmsg(-1, &m, 0, q, NULL, NULL), EBADF);
	expect_err("sg", "EXS_F_GETSGEMAX on a socket not connected",
		   exs_fcntl(u, EXS_F_GETSGEMAX), ENOTCONN);
	exs_blocking_close(u);
	exs_mderegister(reg, 0);
}

/* One message of `ns` elements from a to b, received by exs_recv (rn 0) or
 * by exs_recvmsg into rn elements; the receive is posted first, or last. */
static bool sg_one(int type, int a, int b, exs_qhandle_t q, int ns, int rn, bool recv_first,
		   unsigned seed, const char **why)
{
	size_t sl[SG_MAX], rl[SG_MAX];
	struct sg s, r;
	char *rb = NULL;
	exs_event_t ev;
	int wa = type == SOCK_STREAM ? MSG_WAITALL : 0;
	long n;
	bool ok = false;

	*why = "set-up";
	if (!sg_make(&s, sl, sg_sizes(sl, ns, seed, 0), true))
		return false;
	if (rn) {
		rn = sg_sizes(rl, rn, seed + 11, s.total);
		if (!sg_make(&r, rl, rn, true)) {
			sg_free(&s);
			return false;
		}
	} else if (!(rb = malloc(s.total))) {
		sg_free(&s);
		return false;
	}
	sg_fill(&s, seed);
	if (recv_first) {
		n = rn ? exs_recvmsg(b, &r.m, wa, q, (void *)1, r.mh) :
			 exs_recv(b, rb, s.total, wa, q, (void *)1, UNREG);
		n = n ? n : exs_sendmsg(a, &s.m, EXS_BLOCK, NULL, NULL, s.mh);
		ev = next_event(q, WAIT_S * 1000);
		*why = "receive";
		if (n != (long)s.total || !event_is(&ev, EXS_EVT_RECV, b, (void *)1, 0) ||
		    ev_len(&ev) != s.total ||
		    ev.exs_evt_union.exs_evt_xfer.exs_evt_buffer != (rn ? (void *)&r.m : rb))
			goto out;
	} else {
		n = exs_sendmsg(a, &s.m, 0, q, (void *)2, s.mh);
		n = n ? n : rn ? exs_recvmsg(b, &r.m, wa | EXS_BLOCK, NULL, NULL, r.mh) :
				 exs_recv(b, rb, s.total, wa | EXS_BLOCK, NULL, NULL, UNREG);
		ev = next_event(q, WAIT_S * 1000);
		*why = "send";
		if (n != (long)s.total || !event_is(&ev, EXS_EVT_SEND, a, (void *)2, 0) ||
		    ev_len(&ev) != s.total || ev.exs_evt_union.exs_evt_xfer.exs_evt_buffer != &s.m)
			goto out;
	}
	*why = "data";
	ok = rn ? sg_holds(&r, s.total, seed) : same(rb, s.total, seed);
out:
	sg_free(&s);
	if (rn)
		sg_free(&r);
	free(rb);
	return ok;
}

static void scatter_gather(void)
{
	static const int types[] = { SOCK_STREAM, SOCK_SEQPACKET };
	exs_qhandle_t q = exs_qcreate(8);
	const char *why;
	int a, b, sge;
	bool ok;

	for (int t = 0; t < 2; t++) {
		const char *tn = types[t] == SOCK_STREAM ? "STREAM" : "SEQPACKET";

		if (!make_pair(types[t], 0, 0, &a, &b)) {
			report(false, "sg", "%s connection", tn);
			continue;
		}
		if (t == 0)
			sg_args(a, q);
		sge = exs_fcntl(a, EXS_F_GETSGEMAX);
		report(sge >= 1 && sge <= EXS_IOV_MAX && sge == exs_fcntl(b, EXS_F_GETSGEMAX), "sg",
		       "%s: EXS_F_GETSGEMAX on both ends: %d", tn, sge);
		/* sg_one before report: `why` is read only once it is set */
		ok = sg_one(types[t], a, b, q, SG_MAX, 0, true, 3, &why);
		report(ok, "sg", "%s: 64 odd-sized elements (device SGE limit %d), half registered, "
		       "into one exs_recv: every byte (%s)", tn, sge, why);
		ok = sg_one(types[t], a, b, q, SG_MAX, 7, false, 4, &why);
		report(ok, "sg", "%s: 64 elements sent before an exs_recvmsg into 7 others: every "
		       "byte, gaps untouched (%s)", tn, why);
		ok = sg_one(types[t], a, b, q, 40, SG_MAX, true, 5, &why);
		report(ok, "sg", "%s: 40 elements into an exs_recvmsg of 64 posted first: every byte "
		       "(%s)", tn, why);
		ok = sg_one(types[t], a, b, q, 3, 2, false, 6, &why);
		report(ok, "sg", "%s: a small message of 3 elements into 2 (copied or inline): every "
		       "byte (%s)", tn, why);
		ok = sg_one(types[t], a, b, q, 1, 1, true, 7, &why);
		report(ok, "sg", "%s: one element each way, as exs_send/exs_recv (%s)", tn, why);
		if (types[t] == SOCK_SEQPACKET) {
			/* a message longer than the elements: what fits, the rest lost */
			char sb[300], r1[25], r2[15];
			struct iovec si[2] = { { sb, 100 }, { sb + 100, 200 } };
			struct iovec ri[2] = { { r1, sizeof(r1) }, { r2, sizeof(r2) } };
			struct msghdr sm = { .msg_iov = si, .msg_iovlen = 2 };
			struct msghdr rm = { .msg_iov = ri, .msg_iovlen = 2 };
			char lin[40];
			long n;
			exs_event_t ev;

			fill(sb, sizeof(sb), 8);
			n = exs_sendmsg(a, &sm, 0, q, (void *)3, NULL);
			n = n ? n : exs_recvmsg(b, &rm, EXS_BLOCK, NULL, NULL, NULL);
			ev = next_event(q, WAIT_S * 1000);
			memcpy(lin, r1, sizeof(r1));
			memcpy(lin + sizeof(r1), r2, sizeof(r2));
			report(n == 40 && (rm.msg_flags & MSG_TRUNC) && same(lin, 40, 8) &&
			       event_is(&ev, EXS_EVT_SEND, a, (void *)3, 0) && ev_len(&ev) == 300,
			       "sg", "SEQPACKET: 300 B into 40 B of elements: 40 B, MSG_TRUNC, send "
			       "reports 300");
			n = exs_sendmsg(a, &sm, 0, q, (void *)4, NULL);
			n = n ? n : exs_recvmsg(b, &rm, 0, q, (void *)5, NULL);
			exs_event_t e1 = next_event(q, WAIT_S * 1000), e2 = next_event(q, WAIT_S * 1000);
			if (e1.exs_evt_type == EXS_EVT_SEND)
				e1 = e2;
			report(!n && event_is(&e1, EXS_EVT_RECV, b, (void *)5, 0) && ev_len(&e1) == 40 &&
			       e1.exs_evt_union.exs_evt_xfer.exs_evt_amount_lost == 260, "sg",
			       "SEQPACKET: the asynchronous exs_recvmsg reports 260 B lost");
			/* a small message (§7.2): gathered into one EAGER SEND */
			si[0].iov_len = 10;
			si[1].iov_len = 30;
			ri[0].iov_len = 25;
			n = exs_sendmsg(a, &sm, EXS_BLOCK, NULL, NULL, NULL);
			n = n == 40 ? exs_recvmsg(b, &rm, EXS_BLOCK, NULL, NULL, NULL) : -1;
			memcpy(lin, r1, 25);
			memcpy(lin + 25, r2, 15);
			report(n == 40 && !(rm.msg_flags & MSG_TRUNC) && same(lin, 10, 8) &&
			       !memcmp(lin + 10, sb + 100, 30), "sg",
			       "SEQPACKET: 10 + 30 B sent eagerly (before any receive) into 25 + 15 B");
		}
		exs_blocking_close(a);
		exs_blocking_close(b);
	}
	exs_qdelete(q);
}

/* ---- §11.2.11: exs_sendfile (exs_sendfile(3)) */

#define SF_FILE (1u << 20) /* a file of 1 MiB of known bytes (small: siw counts
			    * what is pinned against RLIMIT_MEMLOCK) */
#define SF_RECV ((void *)0x5f)

/* the events of a receive (SF_RECV) and of an exs_sendfile or exs_send,
 * in either order, each within WAIT_S; false if one did not come */
static bool sf_events(exs_qhandle_t q, exs_event_t *ret_send, exs_event_t *ret_recv)
{
	memset(ret_send, 0, sizeof(*ret_send));
	memset(ret_recv, 0, sizeof(*ret_recv));
	for (int i = 0; i < 2; i++) {
		exs_event_t ev = next_event(q, WAIT_S * 1000);

		if (ev.exs_evt_type == EXS_EVT_RECV)
			*ret_recv = ev;
		else if (ev.exs_evt_type)
			*ret_send = ev;
		else
			return false;
	}
	return true;
}

/* a temporary file holding `len` bytes of `data` (NULL: a hole of len
 * bytes); its descriptor, open for reading and writing, or -1 */
static int sf_tmpfile(char *path, const char *data, size_t len)
{
	int fd;

	strcpy(path, "/tmp/exs_conform_sf.XXXXXX");
	fd = mkstemp(path);
	if (fd < 0)
		return -1;
	if ((data ? pwrite(fd, data, len, 0) != (ssize_t)len : ftruncate(fd, (off_t)len) != 0)) {
		close(fd);
		unlink(path);
		return -1;
	}
	return fd;
}

static char sf_why[96]; /* what went wrong in the last sf_one */

/* one asynchronous exs_sendfile of v[0..n) into a MSG_WAITALL receive of
 * `want` bytes posted first on b: its event names ah, the vector and the
 * total, and b got exactly `expect` */
static bool sf_one(int a, int b, exs_qhandle_t q, const struct exs_sendfilevec *v, int n,
		   const char *expect, size_t want, char *rb, void *ah)
{
	exs_event_t es, er;
	long r = exs_recv(b, rb, want, MSG_WAITALL, q, SF_RECV, UNREG);

	r = r ? r : exs_sendfile(a, v, n, 0, q, ah);
	if (r) {
		snprintf(sf_why, sizeof(sf_why), "start: %s", strerror(errno));
		return false;
	}
	if (!sf_events(q, &es, &er)) {
		snprintf(sf_why, sizeof(sf_why), "events: send %d (%s), recv %d", es.exs_evt_type,
			 strerror(es.exs_evt_errno), er.exs_evt_type);
		return false;
	}
	snprintf(sf_why, sizeof(sf_why), "sendfile: %s, %zu B; recv: %s, %zu B",
		 strerror(es.exs_evt_errno), ev_len(&es), strerror(er.exs_evt_errno), ev_len(&er));
	return event_is(&es, EXS_EVT_SENDFILE, a, ah, 0) && ev_len(&es) == want &&
	       es.exs_evt_union.exs_evt_xfer.exs_evt_buffer == (void *)v && !er.exs_evt_errno &&
	       ev_len(&er) == want && !memcmp(rb, expect, want);
}

struct sf_pipe {
	int fd;
	const char *p;
	size_t n;
};

static void *sf_pipe_writer(void *arg)
{
	struct sf_pipe *w = arg;
	size_t done = 0;

	while (done < w->n) {
		ssize_t k = write(w->fd, w->p + done, w->n - done);

		if (k <= 0)
			break;
		done += (size_t)k;
	}
	close(w->fd);
	return NULL;
}

static void sf_bad_args(int a, int seq, int fresh, int file, const char *path, exs_qhandle_t q)
{
	struct exs_sendfilevec v[EXS_SENDVEC_MAX + 1], one = { .exs_sfv_type = EXS_SFV_FD,
		.exs_sfv_u.exs_fd = file, .exs_sfv_off = 0, .exs_sfv_len = 10 };
	int wfd = open(path, O_WRONLY);

	for (int i = 0; i <= EXS_SENDVEC_MAX; i++)
		v[i] = one;
	expect_err("11.2.11", "exs_sendfile: sendvec_cnt 0", exs_sendfile(a, v, 0, 0, q, NULL), EINVAL);
	expect_err("11.2.11", "exs_sendfile: sendvec_cnt EXS_SENDVEC_MAX + 1",
		   exs_sendfile(a, v, EXS_SENDVEC_MAX + 1, 0, q, NULL), EINVAL);
	expect_err("11.2.11", "exs_sendfile: NULL sendvec", exs_sendfile(a, NULL, 1, 0, q, NULL),
		   EINVAL);
	v[0].exs_sfv_u.exs_fd = -1;
	expect_err("11.2.11", "exs_sendfile: fd -1", exs_sendfile(a, v, 1, 0, q, NULL), EBADF);
	v[0].exs_sfv_u.exs_fd = 1000000;
	expect_err("11.2.11", "exs_sendfile: a closed fd", exs_sendfile(a, v, 1, 0, q, NULL), EBADF);
	v[0].exs_sfv_u.exs_fd = wfd;
	expect_err("11.2.11", "exs_sendfile: a write-only fd", exs_sendfile(a, v, 1, 0, q, NULL),
		   EBADF);
	v[0] = one;
	v[0].exs_sfv_type = EXS_SFV_PATH;
	v[0].exs_sfv_u.exs_pathv = "/nonexistent/exs_sendfile";
	expect_err("11.2.11", "exs_sendfile: a missing path", exs_sendfile(a, v, 1, 0, q, NULL),
		   ENOENT);
	v[0].exs_sfv_u.exs_pathv = "/tmp";
	expect_err("11.2.11", "exs_sendfile: a directory", exs_sendfile(a, v, 1, 0, q, NULL), EISDIR);
	v[0] = one;
	v[0].exs_sfv_off = SF_FILE;
	v[0].exs_sfv_len = 1;
	expect_err("11.2.11", "exs_sendfile: offset at EOF (range checked up front)",
		   exs_sendfile(a, v, 1, 0, q, NULL), EINVAL);
	v[0].exs_sfv_off = SF_FILE - 10;
	v[0].exs_sfv_len = 11;
	expect_err("11.2.11", "exs_sendfile: length 1 B past EOF", exs_sendfile(a, v, 1, 0, q, NULL),
		   EINVAL);
	v[0].exs_sfv_off = -1;
	v[0].exs_sfv_len = 1;
	expect_err("11.2.11", "exs_sendfile: negative offset", exs_sendfile(a, v, 1, 0, q, NULL),
		   EINVAL);
	v[0].exs_sfv_off = INT64_MAX;
	v[0].exs_sfv_len = 2;
	expect_err("11.2.11", "exs_sendfile: offset + length overflows",
		   exs_sendfile(a, v, 1, 0, q, NULL), EINVAL);
	v[0] = one;
	v[1] = one;
	v[1].exs_sfv_len = 0;
	expect_err("11.2.11", "exs_sendfile: a second element of 0 bytes",
		   exs_sendfile(a, v, 2, 0, q, NULL), EINVAL);
	v[1] = one;
	v[1].exs_sfv_type = 99;
	expect_err("11.2.11", "exs_sendfile: an unknown exs_sfv_type", exs_sendfile(a, v, 2, 0, q, NULL),
		   EINVAL);
	v[1].exs_sfv_type = EXS_SFV_IOV;
	v[1].exs_sfv_u.exs_iov.exs_base = NULL;
	expect_err("11.2.11", "exs_sendfile: exs_iov of NULL", exs_sendfile(a, v, 2, 0, q, NULL),
		   EINVAL);
	v[1].exs_sfv_u.exs_iov.exs_base = path;
	v[1].exs_sfv_u.exs_iov.exs_mhandle = (exs_mhandle_t)path;
	expect_err("11.2.11", "exs_sendfile: exs_iov with a handle naming nothing",
		   exs_sendfile(a, v, 2, EXS_BLOCK, NULL, NULL), EINVAL);
	expect_err("11.2.11", "exs_sendfile: unknown flags", exs_sendfile(a, &one, 1, 0x4, q, NULL),
		   EINVAL);
	expect_err("11.2.11", "exs_sendfile: MSG_WAITALL", exs_sendfile(a, &one, 1, MSG_WAITALL, q,
		   NULL), EINVAL);
	expect_err("11.2.11", "exs_sendfile: no queue, no EXS_BLOCK",
		   exs_sendfile(a, &one, 1, 0, NULL, NULL), EINVAL);
	expect_err("11.2.11", "exs_sendfile: an unconnected socket",
		   exs_sendfile(fresh, &one, 1, 0, q, NULL), ENOTCONN);
	expect_err("11.2.11", "exs_sendfile: SOCK_SEQPACKET (one message per call is not promised)",
		   exs_sendfile(seq, &one, 1, 0, q, NULL), EOPNOTSUPP);
	expect_err("11.2.11", "exs_sendfile: not an EXS socket",
		   exs_sendfile(54321, &one, 1, 0, q, NULL), EBADF);
	/* the pipe's offset must be 0: it is read from where it is */
	int pf[2];

	if (pipe(pf) == 0) {
		one.exs_sfv_u.exs_fd = pf[0];
		one.exs_sfv_off = 5;
		expect_err("11.2.11", "exs_sendfile: a pipe at offset 5",
			   exs_sendfile(a, &one, 1, 0, q, NULL), ESPIPE);
		close(pf[0]);
		close(pf[1]);
	}
	if (wfd >= 0)
		close(wfd);
	report(!next_event(q, 100).exs_evt_type, "11.2.11",
	       "exs_sendfile: failed calls leave no event behind");
}

/* kB of this process's memory pinned by RDMA registrations (VmPin), or -1 */
static long vm_pinned(void)
{
	char line[128];
	long kb = -1;
	FILE *f = fopen("/proc/self/status", "r");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmPin: %ld", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

static void sendfiles(void)
{
	long pinned = vm_pinned();
	exs_qhandle_t q = exs_qcreate(8);
	size_t rlen = 2 * SF_FILE + 4096;
	char *data = malloc(SF_FILE), *mem = malloc(1 << 20), *exp = malloc(rlen),
	     *rb = malloc(rlen), path[64], spath[64];
	struct exs_sendfilevec v[8];
	int a, b, seq_a, seq_b, fresh, file, sfd;
	exs_mhandle_t mh;
	exs_event_t ev = { 0 }, er = { 0 };
	size_t n;
	long r;

	if (!data || !mem || !exp || !rb || !make_pair(SOCK_STREAM, 0, 0, &a, &b)) {
		report(false, "11.2.11", "exs_sendfile: set-up (memory, a STREAM pair)");
		return;
	}
	fill(data, SF_FILE, 21);
	fill(mem, 1 << 20, 22);
	file = sf_tmpfile(path, data, SF_FILE);
	mh = exs_mregister(mem, 1 << 20, 0);
	if (file < 0 || mh == EXS_MHANDLE_INVALID) {
		report(false, "11.2.11", "exs_sendfile: a 1 MiB file, a registration: %s",
		       strerror(errno));
		return;
	}

	/* one fd element: the whole file, mapped */
	v[0] = (struct exs_sendfilevec){ EXS_SFV_FD, { .exs_fd = file }, 0, SF_FILE };
	report(sf_one(a, b, q, v, 1, data, SF_FILE, rb, (void *)1), "11.2.11",
	       "exs_sendfile: an fd element of 1 MiB: EXS_EVT_SENDFILE with the total, every "
	       "byte (%s)", sf_why);
	/* one path element, at an odd offset */
	v[0] = (struct exs_sendfilevec){ EXS_SFV_PATH, { .exs_pathv = path }, 1001, 70001 };
	report(sf_one(a, b, q, v, 1, data + 1001, 70001, rb, (void *)2), "11.2.11",
	       "exs_sendfile: an exs_pathv element at offset 1001, 70001 B (%s)", sf_why);
	/* memory: registered and not */
	v[0] = (struct exs_sendfilevec){ EXS_SFV_IOV, { .exs_iov = { mem, mh } }, 5, 300000 };
	v[1] = (struct exs_sendfilevec){ EXS_SFV_IOV, { .exs_iov = { data, UNREG } }, 0, 100 };
	memcpy(exp, mem + 5, 300000);
	memcpy(exp + 300000, data, 100);
	report(sf_one(a, b, q, v, 2, exp, 300100, rb, (void *)3), "11.2.11",
	       "exs_sendfile: exs_iov elements, one registered (300000 B), one not (100 B) (%s)",
	       sf_why);
	/* every kind, several of each, in order; the same file twice */
	v[0] = (struct exs_sendfilevec){ EXS_SFV_FD, { .exs_fd = file }, 7, 100000 };
	v[1] = (struct exs_sendfilevec){ EXS_SFV_IOV, { .exs_iov = { mem, mh } }, 0, 4096 };
	v[2] = (struct exs_sendfilevec){ EXS_SFV_PATH, { .exs_pathv = path }, SF_FILE - 20000, 20000 };
	v[3] = (struct exs_sendfilevec){ EXS_SFV_IOV, { .exs_iov = { data + 9, UNREG } }, 1, 3 };
	v[4] = (struct exs_sendfilevec){ EXS_SFV_FD, { .exs_fd = file }, 0, SF_FILE };
	n = 0;
	memcpy(exp + n, data + 7, 100000), n += 100000;
	memcpy(exp + n, mem, 4096), n += 4096;
	memcpy(exp + n, data + SF_FILE - 20000, 20000), n += 20000;
	memcpy(exp + n, data + 10, 3), n += 3;
	memcpy(exp + n, data, SF_FILE), n += SF_FILE;
	report(sf_one(a, b, q, v, 5, exp, n, rb, (void *)4), "11.2.11",
	       "exs_sendfile: 5 elements (fd, iov, path, iov, fd) in one call arrive in order, %zu B "
	       "(%s)", n, sf_why);
	/* a sparse file: its holes read as zeros */
	sfd = sf_tmpfile(spath, NULL, 1 << 20);
	if (sfd >= 0 && pwrite(sfd, "hole", 4, 300000) == 4 && pwrite(sfd, "end", 3, (1 << 20) - 3) == 3) {
		memset(exp, 0, 1 << 20);
		memcpy(exp + 300000, "hole", 4);
		memcpy(exp + (1 << 20) - 3, "end", 3);
		v[0] = (struct exs_sendfilevec){ EXS_SFV_FD, { .exs_fd = sfd }, 0, 1 << 20 };
		report(sf_one(a, b, q, v, 1, exp, 1 << 20, rb, (void *)5), "11.2.11",
		       "exs_sendfile: a sparse file of 1 MiB (7 B of data): zeros for its holes (%s)",
		       sf_why);
	} else {
		report(false, "11.2.11", "exs_sendfile: a sparse file: %s", strerror(errno));
	}
	/* a pipe cannot be mapped: it is copied, read from where it is */
	int pf[2];
	pthread_t t;
	struct sf_pipe w = { -1, data, 1000000 };

	if (pipe(pf) == 0) {
		w.fd = pf[1];
		pthread_create(&t, NULL, sf_pipe_writer, &w);
		v[0] = (struct exs_sendfilevec){ EXS_SFV_FD, { .exs_fd = pf[0] }, 0, 1000000 };
		report(sf_one(a, b, q, v, 1, data, 1000000, rb, (void *)6), "11.2.11",
		       "exs_sendfile: 1000000 B from a pipe (the bounded copy) (%s)", sf_why);
		pthread_join(t, NULL);
		close(pf[0]);
	}
	/* a pipe that ends early: what it had is sent, the event says ENODATA */
	if (pipe(pf) == 0) {
		w = (struct sf_pipe){ pf[1], data, 1000 };
		pthread_create(&t, NULL, sf_pipe_writer, &w);
		v[0] = (struct exs_sendfilevec){ EXS_SFV_FD, { .exs_fd = pf[0] }, 0, 5000 };
		r = exs_recv(b, rb, 1000, MSG_WAITALL, q, SF_RECV, UNREG);
		r = r ? r : exs_sendfile(a, v, 1, 0, q, (void *)7);
		r = r ? r : !sf_events(q, &ev, &er);
		report(!r && event_is(&ev, EXS_EVT_SENDFILE, a, (void *)7, ENODATA) && ev_len(&ev) == 1000 &&
		       ev_len(&er) == 1000 && !memcmp(rb, data, 1000), "11.2.11",
		       "exs_sendfile: a pipe that ends after 1000 of 5000 B: 1000 B sent, ENODATA "
		       "(%s)", strerror(ev.exs_evt_errno));
		pthread_join(t, NULL);
		close(pf[0]);
	}
	/* EXS_BLOCK returns the total; the receive is posted first */
	v[0] = (struct exs_sendfilevec){ EXS_SFV_PATH, { .exs_pathv = path }, 0, SF_FILE };
	r = exs_recv(b, rb, SF_FILE, MSG_WAITALL, q, (void *)8, UNREG);
	r = r ? r : exs_sendfile(a, v, 1, EXS_BLOCK, NULL, NULL);
	ev = next_event(q, WAIT_S * 1000);
	report(r == SF_FILE && event_is(&ev, EXS_EVT_RECV, b, (void *)8, 0) && ev_len(&ev) == SF_FILE &&
	       !memcmp(rb, data, SF_FILE), "11.2.11", "exs_sendfile: EXS_BLOCK returns %ld", r);
	/* the stream keeps the calls' order: an exs_send started while the
	 * sendfile runs (EXS_CREDIT_WAIT waits for it) comes after its bytes */
	v[0] = (struct exs_sendfilevec){ EXS_SFV_FD, { .exs_fd = file }, 0, SF_FILE };
	r = exs_sendfile(a, v, 1, EXS_UNSIGNALED, q, (void *)9); /* no receive yet: it runs */
	expect_err("11.2.11", "exs_send while an exs_sendfile runs, without EXS_CREDIT_WAIT",
		   exs_send(a, mem, 1000, 0, q, (void *)10, mh), EBUSY);
	r = r ? r : exs_recv(b, rb, SF_FILE + 1000, MSG_WAITALL, q, SF_RECV, UNREG);
	r = r ? r : exs_send(a, mem, 1000, EXS_CREDIT_WAIT, q, (void *)10, mh);
	r = r ? r : !sf_events(q, &ev, &er);
	report(!r && event_is(&ev, EXS_EVT_SEND, a, (void *)10, 0) && ev_len(&er) == SF_FILE + 1000 &&
	       !memcmp(rb, data, SF_FILE) && !memcmp(rb + SF_FILE, mem, 1000) &&
	       !next_event(q, 100).exs_evt_type, "11.2.11",
	       "exs_sendfile: EXS_UNSIGNALED (no event), then an exs_send: in the calls' order");

	seq_a = seq_b = -1;
	fresh = exs_socket(AF_INET, SOCK_STREAM, 0);
	if (!make_pair(SOCK_SEQPACKET, 0, 0, &seq_a, &seq_b))
		report(false, "11.2.11", "exs_sendfile: a SEQPACKET pair");
	sf_bad_args(a, seq_a, fresh, file, path, q);

	/* the peer goes away mid-transfer: the event comes with an errno, the
	 * mappings and the opened file let go of (ASan and exsctl tell) */
	v[0] = (struct exs_sendfilevec){ EXS_SFV_PATH, { .exs_pathv = path }, 0, SF_FILE };
	v[1] = v[0];
	r = exs_recv(b, rb, 100000, MSG_WAITALL, q, SF_RECV, UNREG);
	r = r ? r : exs_sendfile(a, v, 2, 0, q, (void *)11);
	ev = next_event(q, WAIT_S * 1000); /* the receive */
	r = r ? r : ev.exs_evt_type != EXS_EVT_RECV;
	r = r ? r : exs_close(b, EXS_BLOCK | EXS_DONTLINGER, NULL, NULL); /* a reset */
	ev = next_event(q, WAIT_S * 1000);
	report(!r && event_is(&ev, EXS_EVT_SENDFILE, a, (void *)11, ev.exs_evt_errno) &&
	       ev.exs_evt_errno && ev_len(&ev) < 2 * SF_FILE, "11.2.11",
	       "exs_sendfile: the peer resets after reading 100000 of %u B: the event says %s "
	       "after %zu B", 2 * SF_FILE, strerror(ev.exs_evt_errno), ev_len(&ev));
	exs_blocking_close(a);
	exs_blocking_close(fresh);
	if (seq_a >= 0) {
		exs_blocking_close(seq_a);
		exs_blocking_close(seq_b);
	}
	exs_mderegister(mh, 0);
	close(file);
	unlink(path);
	if (sfd >= 0) {
		close(sfd);
		unlink(spath);
	}
	exs_qdelete(q);
	free(data);
	free(mem);
	free(exp);
	free(rb);
	/* every window, bounce buffer and zero buffer let go of its pages */
	long now_pinned = vm_pinned();

	report(pinned >= 0 && now_pinned <= pinned, "11.2.11",
	       "exs_sendfile: nothing left pinned after the section (VmPin %ld kB, before %ld kB)",
	       now_pinned, pinned);
}

/* ---- §4.4, §4.5: closing and half-closing */

static void closing(void)
{
	exs_qhandle_t q = exs_qcreate(16);
	char out[256], in[256];
	exs_event_t ev;
	int a, b;

	fill(out, sizeof(out), 7);
	/* lingering close: data sent before it arrives, then EOF */
	if (!make_pair(SOCK_STREAM, 0, 0, &a, &b))
		{ report(false, "4.4", "connection"); return; }
	exs_send(a, out, 100, 0, q, NULL, UNREG);
	exs_close(a, 0, q, (void *)1);
	exs_recv(b, in, sizeof(in), 0, q, (void *)2, UNREG);
	exs_recv(b, in + 128, 100, 0, q, (void *)3, UNREG);
	int got = 0, eof = 0, closed = 0;
	for (int i = 0; i < 4; i++) {
		ev = next_event(q, WAIT_S * 1000);
		got += ev.exs_evt_ahandle == (void *)2 && ev_len(&ev) == 100 && same(in, 100, 7);
		eof += ev.exs_evt_ahandle == (void *)3 && !ev.exs_evt_errno && ev_len(&ev) == 0;
		closed += ev.exs_evt_type == EXS_EVT_CLOSE && !ev.exs_evt_errno;
	}
	report(got && eof && closed, "4.4", "lingering close delivers the data, then EOF (errno 0, length 0) at the peer");
	ev = (exs_event_t){ 0 };
	exs_recv(b, in, 10, 0, q, NULL, UNREG);
	ev = next_event(q, WAIT_S * 1000);
	report(ev.exs_evt_type == EXS_EVT_RECV && !ev.exs_evt_errno && !ev_len(&ev), "5.2", "every receive after EOF is an EOF event");
	exs_blocking_close(b);

	/* a socket number is reused only after its close completed; the old
	 * socket's events keep it, and come first in their queue (exs.h) */
	if (!make_pair(SOCK_STREAM, 0, 0, &a, &b))
		{ report(false, "4.4", "connection"); return; }
	exs_qhandle_t qo = exs_qcreate(8);
	int held[8], nheld = 0, n, reused = -1;
	exs_recv(a, in, 10, 0, qo, (void *)20, UNREG);
	exs_close(a, 0, qo, (void *)21);
	n = exs_socket(AF_INET, SOCK_STREAM, 0);
	int v = 0;
	exs_qstatus(qo, EXS_QATTR_EVENTS, &v);
	report(n != a || v == 2, "4.4", "the number of a closing socket is not given out before its EXS_EVT_CLOSE");
	exs_blocking_close(n);
	double t = now();
	while (exs_qstatus(qo, EXS_QATTR_EVENTS, &v) == 0 && v < 2 && now() - t < WAIT_S)
		usleep(1000);
	while (nheld < 8 && (n = exs_socket(AF_INET, SOCK_STREAM, 0)) >= 0 && n != a)
		held[nheld++] = n;
	if (n == a) {
		reused = n;
		exs_close(n, 0, qo, (void *)22); /* unconnected: its EXS_EVT_CLOSE at once */
	}
	while (nheld)
		exs_blocking_close(held[--nheld]);
	exs_event_t e3[3];
	struct timeval tv3 = { WAIT_S, 0 };
	n = exs_qdequeue(qo, e3, -3, &tv3);
	report(reused == a && n == 3 && event_is(&e3[0], EXS_EVT_RECV, a, (void *)20, ECONNABORTED) &&
	       event_is(&e3[1], EXS_EVT_CLOSE, a, (void *)21, 0) &&
	       event_is(&e3[2], EXS_EVT_CLOSE, a, (void *)22, 0), "4.4",
	       "a reused number: the old socket's events (its receive ECONNABORTED, its close) before the new socket's, told apart by ahandle");
	exs_qdelete(qo);
	exs_blocking_close(b);

	/* abortive close: the peer's operations fail with ECONNRESET */
	if (!make_pair(SOCK_SEQPACKET, 0, 0, &a, &b))
		{ report(false, "4.4", "connection"); return; }
	exs_recv(b, in, 10, 0, q, (void *)4, UNREG);
	expect_ok("4.4", "exs_close EXS_DONTLINGER", exs_close(a, EXS_DONTLINGER | EXS_BLOCK, NULL, NULL));
	ev = next_event(q, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_RECV, b, (void *)4, ECONNRESET), "4.4", "EXS_DONTLINGER: the peer's pending receive fails with ECONNRESET");
	expect_err("5.2", "exs_recv after the abort", exs_recv(b, in, 10, 0, q, NULL, UNREG), ECONNRESET);
	exs_blocking_close(b);

	/* half-close */
	if (!make_pair(SOCK_STREAM, 0, 0, &a, &b))
		{ report(false, "4.5", "connection"); return; }
	expect_err("4.5", "exs_shutdown bad how", exs_shutdown(a, 7, 0, q, NULL), EINVAL);
	expect_err("4.5", "exs_shutdown unknown flag", exs_shutdown(a, SHUT_WR, 0x40, q, NULL), EINVAL);
	expect_err("4.5", "exs_shutdown NULL queue without EXS_BLOCK", exs_shutdown(a, SHUT_WR, 0, NULL, NULL), EINVAL);
	/* SHUT_WR with a send still unmatched: outstanding until it is placed */
	exs_send(a, out, 50, 0, q, (void *)5, UNREG);
	expect_ok("4.5", "exs_shutdown SHUT_WR", exs_shutdown(a, SHUT_WR, 0, q, (void *)6));
	expect_err("4.5", "a second SHUT_WR while the first is outstanding", exs_shutdown(a, SHUT_WR, 0, q, NULL), EBUSY);
	expect_err("4.5", "exs_send after SHUT_WR", exs_send(a, out, 10, 0, q, NULL, UNREG), EPIPE);
	ev = next_event(q, 300);
	report(!ev.exs_evt_type, "4.5", "SHUT_WR waits while its earlier send has no receive");
	exs_recv(b, in, 100, 0, q, (void *)7, UNREG);
	int sent = 0, shut = 0, data = 0;
	for (int i = 0; i < 3; i++) {
		ev = next_event(q, WAIT_S * 1000);
		sent += event_is(&ev, EXS_EVT_SEND, a, (void *)5, 0);
		shut += event_is(&ev, EXS_EVT_SHUTDOWN, a, (void *)6, 0);
		data += event_is(&ev, EXS_EVT_RECV, b, (void *)7, 0) && ev_len(&ev) == 50;
	}
	report(sent && shut && data, "4.5", "then the send completes, the data arrives and EXS_EVT_SHUTDOWN follows");
	exs_recv(b, in, 100, 0, q, (void *)8, UNREG);
	ev = next_event(q, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_RECV, b, (void *)8, 0) && !ev_len(&ev), "4.5", "the peer reads EOF after SHUT_WR");
	exs_recv(a, in, 64, MSG_WAITALL, q, (void *)12, UNREG);
	long w = exs_blocking_send(b, out, 64, 0, UNREG);
	ev = next_event(q, WAIT_S * 1000);
	report(w == 64 && event_is(&ev, EXS_EVT_RECV, a, (void *)12, 0) && ev_len(&ev) == 64 &&
	       same(in, 64, 7), "4.5", "the other direction still carries data");
	expect_ok("4.5", "SHUT_WR again: a no-op", exs_shutdown(a, SHUT_WR, 0, q, (void *)9));
	ev = next_event(q, 1000);
	report(event_is(&ev, EXS_EVT_SHUTDOWN, a, (void *)9, 0), "4.5", "... with its event at once");
	exs_blocking_close(a);
	exs_blocking_close(b);
	/* SHUT_RD on b: its receives end, a's sends fail with EPIPE */
	if (!make_pair(SOCK_STREAM, 0, 0, &a, &b)) {
		report(false, "4.5", "connection");
		return;
	}
	exs_recv(b, in, 100, 0, q, (void *)10, UNREG);
	expect_ok("4.5", "exs_shutdown SHUT_RD with EXS_BLOCK", exs_shutdown(b, SHUT_RD, EXS_BLOCK, NULL, NULL));
	ev = next_event(q, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_RECV, b, (void *)10, 0) && !ev_len(&ev), "4.5",
	       "SHUT_RD ends the waiting receive with EOF");
	exs_recv(b, in, 100, 0, q, (void *)11, UNREG);
	ev = next_event(q, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_RECV, b, (void *)11, 0) && !ev_len(&ev), "4.5", "receives after SHUT_RD are EOFs");
	expect_err("4.5", "the peer's exs_send after SHUT_RD", exs_send(a, out, 10, EXS_BLOCK, NULL, NULL, UNREG), EPIPE);
	expect_ok("4.5", "exs_shutdown SHUT_RDWR on b", exs_shutdown(b, SHUT_RDWR, EXS_BLOCK, NULL, NULL));
	expect_err("4.5", "exs_send after SHUT_RDWR", exs_send(b, out, 10, EXS_BLOCK, NULL, NULL, UNREG), EPIPE);
	int f2 = exs_socket(AF_INET, SOCK_STREAM, 0);
	report(f2 != b, "4.5", "the fd stays taken after SHUT_RDWR, until exs_close");
	exs_blocking_close(f2);
	expect_ok("4.4", "exs_blocking_close after SHUT_RDWR", exs_blocking_close(b));
	expect_ok("4.4", "exs_blocking_close", exs_blocking_close(a));
	exs_qdelete(q);
}

static void on_alarm(int sig)
{
	static const char m[] = "FAIL [§-] the suite did not finish in 240 s (the check after the last line hung)\n";

	(void)sig;
	if (write(1, m, sizeof(m) - 1) < 0)
		_exit(3);
	_exit(1);
}

/* ---- §7: tuning */

static int sp_a, sp_b, inl_a, inl_b, fdflags_a, sb_a, sb_b;

static int tune_sp(int fd, bool active)
{
	return exs_fcntl(fd, EXS_F_SETSPMAXSIZE, active ? sp_a : sp_b) < 0;
}

static int tune_inline(int fd, bool active)
{
	int v = active ? inl_a : inl_b;

	return v >= 0 && exs_fcntl(fd, EXS_F_SETINLINEMAXSIZE, v) < 0;
}

/* A receive on rfd waited for while sfd sends 100 ms later: the waiting
 * thread's CPU time over the wait's length (-1: no such event). */
static double wait_cpu(int rfd, int sfd)
{
	static char out[64], in[64];
	struct later l = { sfd, out, sizeof(out), 100, 1, false };
	exs_qhandle_t q = exs_qcreate(2);
	struct timespec c0, c1;
	exs_event_t ev;
	pthread_t th;
	double t;

	if (!q || exs_recv(rfd, in, sizeof(in), 0, q, NULL, UNREG)) {
		exs_qdelete(q);
		return -1;
	}
	pthread_create(&th, NULL, send_pieces, &l);
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
	t = now();
	ev = next_event(q, WAIT_S * 1000);
	t = now() - t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
	pthread_join(th, NULL);
	exs_qdelete(q);
	if (!event_is(&ev, EXS_EVT_RECV, rfd, NULL, 0) || t <= 0)
		return -1;
	return ((double)(c1.tv_sec - c0.tv_sec) + (c1.tv_nsec - c0.tv_nsec) / 1e9) / t;
}

static int tune_busypoll(int fd, bool active)
{
	if (!active)
		return 0;
	return exs_fcntl(fd, EXS_F_SETFD, exs_fcntl(fd, EXS_F_GETFD, 0) | fdflags_a) < 0;
}

/* n SEQPACKET messages of sizes cycling over `sizes`, each checked; the
 * receives are as large as `rlen` (a smaller one reports the rest lost) */
static bool exchange(int a, int b, const size_t *sizes, int nsizes, int n, size_t rlen, bool reg)
{
	static char sbuf[1 << 17], rbuf[1 << 17];
	exs_mhandle_t smh = UNREG, rmh = UNREG;
	exs_qhandle_t q = exs_qcreate(4);
	bool ok = q != EXS_QHANDLE_INVALID;

	if (reg) {
		smh = exs_mregister(sbuf, sizeof(sbuf), 0);
		rmh = exs_mregister(rbuf, sizeof(rbuf), 0);
		ok = ok && smh != EXS_MHANDLE_INVALID && rmh != EXS_MHANDLE_INVALID;
	}
	for (int i = 0; ok && i < n; i++) {
		size_t len = sizes[i % nsizes], want = len < rlen ? len : rlen;
		exs_event_t ev;

		memset(rbuf, 0, rlen);
		fill(sbuf, len, (unsigned)i);
		ok = exs_recv(b, rbuf, rlen, 0, q, NULL, rmh) == 0 &&
		     exs_send(a, sbuf, len, EXS_BLOCK, NULL, NULL, smh) == (ssize_t)len;
		ev = next_event(q, WAIT_S * 1000);
		ok = ok && ev.exs_evt_type == EXS_EVT_RECV && !ev.exs_evt_errno &&
		     ev_len(&ev) == want &&
		     ev.exs_evt_union.exs_evt_xfer.exs_evt_amount_lost == len - want &&
		     same(rbuf, want, (unsigned)i);
		if (!ok)
			printf("  (message %d of %zu B into %zu B: type %d errno %d len %zu)\n", i, len,
			       rlen, ev.exs_evt_type, ev.exs_evt_errno, ev_len(&ev));
	}
	if (reg) {
		exs_mderegister(smh, 0);
		exs_mderegister(rmh, 0);
	}
	if (q)
		exs_qdelete(q);
	return ok;
}

/* Small sends that complete when posted (inline): the events they owe
 * and no more. An EXS_UNSIGNALED one reports nothing; an asynchronous
 * one reports its socket, ahandle, buffer and length; an exs_sendmsg of
 * one element names the msghdr as its buffer. The peer gets all three,
 * in order, checked. */
static bool small_send_events(int a, int b)
{
	static char out[3][64], in[3][64];
	exs_qhandle_t qa = exs_qcreate(8), qb = exs_qcreate(8);
	struct iovec v = { .iov_base = out[2], .iov_len = 30 };
	struct msghdr m = { .msg_iov = &v, .msg_iovlen = 1 };
	const size_t len[3] = { 10, 20, 30 };
	exs_event_t ev;
	bool ok = qa != EXS_QHANDLE_INVALID && qb != EXS_QHANDLE_INVALID;

	for (int i = 0; ok && i < 3; i++) {
		fill(out[i], len[i], 900u + (unsigned)i);
		ok = exs_recv(b, in[i], sizeof(in[i]), 0, qb, (void *)(intptr_t)(i + 1), UNREG) == 0;
	}
	ok = ok && exs_send(a, out[0], len[0], EXS_UNSIGNALED, NULL, NULL, UNREG) == 0 &&
	     exs_send(a, out[1], len[1], 0, qa, (void *)7, UNREG) == 0 &&
	     exs_sendmsg(a, &m, 0, qa, (void *)8, NULL) == 0;
	ev = next_event(qa, WAIT_S * 1000);
	ok = ok && event_is(&ev, EXS_EVT_SEND, a, (void *)7, 0) && ev_len(&ev) == len[1] &&
	     ev.exs_evt_union.exs_evt_xfer.exs_evt_buffer == out[1];
	ev = next_event(qa, WAIT_S * 1000);
	ok = ok && event_is(&ev, EXS_EVT_SEND, a, (void *)8, 0) && ev_len(&ev) == len[2] &&
	     ev.exs_evt_union.exs_evt_xfer.exs_evt_buffer == (void *)&m;
	for (int i = 0; ok && i < 3; i++) {
		ev = next_event(qb, WAIT_S * 1000);
		ok = event_is(&ev, EXS_EVT_RECV, b, (void *)(intptr_t)(i + 1), 0) &&
		     ev_len(&ev) == len[i] && same(in[i], len[i], 900u + (unsigned)i);
	}
	ev = next_event(qa, 200);
	ok = ok && ev.exs_evt_type == 0; /* nothing for the unsignalled send */
	if (qa)
		exs_qdelete(qa);
	if (qb)
		exs_qdelete(qb);
	return ok;
}

/* n SEQPACKET messages sent before any receive is posted (so they wait
 * in the library's buffers, or for their receive's advert), then n
 * receives of `rlen` B: every message in order, every byte checked */
static bool exchange_early(int a, int b, const size_t *sizes, int nsizes, int n, size_t rlen)
{
	static char sbuf[24][1 << 17], rbuf[24][8192];
	exs_qhandle_t qs = exs_qcreate(64), qr = exs_qcreate(64);
	bool ok = qs != EXS_QHANDLE_INVALID && qr != EXS_QHANDLE_INVALID && n <= 24 &&
		  rlen <= sizeof(rbuf[0]);
	int i, got = 0;

	for (i = 0; i < nsizes; i++)
		ok = ok && sizes[i] <= sizeof(sbuf[0]);
	for (i = 0; ok && i < n; i++) {
		fill(sbuf[i], sizes[i % nsizes], (unsigned)i + 7);
		ok = exs_send(a, sbuf[i], sizes[i % nsizes], 0, qs, NULL, UNREG) == 0;
	}
	for (i = 0; ok && i < n; i++) {
		memset(rbuf[i], 0, rlen);
		ok = exs_recv(b, rbuf[i], rlen, 0, qr, (void *)(intptr_t)i, UNREG) == 0;
	}
	for (i = 0; ok && i < n; i++) {
		size_t len = sizes[i % nsizes], want = len < rlen ? len : rlen;
		exs_event_t ev = next_event(qr, WAIT_S * 1000);

		ok = ev.exs_evt_type == EXS_EVT_RECV && !ev.exs_evt_errno &&
		     ev.exs_evt_ahandle == (void *)(intptr_t)i && ev_len(&ev) == want &&
		     ev.exs_evt_union.exs_evt_xfer.exs_evt_amount_lost == len - want &&
		     same(rbuf[i], want, (unsigned)i + 7);
		if (!ok)
			printf("  (message %d of %zu B into %zu B: type %d errno %d len %zu ah %p)\n",
			       i, len, rlen, ev.exs_evt_type, ev.exs_evt_errno, ev_len(&ev),
			       ev.exs_evt_ahandle);
	}
	while (ok && got < n) {
		exs_event_t ev = next_event(qs, WAIT_S * 1000);

		ok = ev.exs_evt_type == EXS_EVT_SEND && !ev.exs_evt_errno;
		got++;
	}
	exs_qdelete(qs);
	exs_qdelete(qr);
	return ok;
}

/* exs(7), "A send waits for the peer's receive": a message of at most the
 * small-packet size completes with no receive posted at the peer (a
 * blocking send returns), while the peer holds fewer than `credits` (4
 * here) of them; the one past those, and a message over the small-packet
 * size, wait for the peer's receives. Then all six arrive, in order. */
static bool sends_before_receives(int a, int b)
{
	static char sbuf[6][2048], rbuf[6][2048];
	exs_qhandle_t qs = exs_qcreate(16), qr = exs_qcreate(16);
	bool ok = qs != EXS_QHANDLE_INVALID && qr != EXS_QHANDLE_INVALID;
	exs_event_t ev;
	int i;

	for (i = 0; ok && i < 6; i++)
		fill(sbuf[i], i == 5 ? 2000 : 100, (unsigned)i + 11);
	for (i = 0; ok && i < 4; i++)
		ok = exs_blocking_send(a, sbuf[i], 100, 0, UNREG) == 100;
	if (!ok)
		printf("  (blocking small send %d of 4 failed: %s)\n", i, strerror(errno));
	ok = ok && exs_send(a, sbuf[4], 100, 0, qs, (void *)4, UNREG) == 0 &&
	     exs_send(a, sbuf[5], 2000, 0, qs, (void *)5, UNREG) == 0;
	if (ok && (ev = next_event(qs, 300)).exs_evt_type) {
		printf("  (send %p completed before any receive: errno %d)\n", ev.exs_evt_ahandle,
		       ev.exs_evt_errno);
		ok = false;
	}
	for (i = 0; ok && i < 6; i++)
		ok = exs_recv(b, rbuf[i], sizeof(rbuf[i]), 0, qr, (void *)(intptr_t)i, UNREG) == 0;
	for (i = 0; ok && i < 6; i++) {
		size_t want = i == 5 ? 2000 : 100;

		ev = next_event(qr, WAIT_S * 1000);
		ok = event_is(&ev, EXS_EVT_RECV, b, (void *)(intptr_t)i, 0) && ev_len(&ev) == want &&
		     same(rbuf[i], want, (unsigned)i + 11);
		if (!ok)
			printf("  (receive %d: type %d errno %d len %zu)\n", i, ev.exs_evt_type,
			       ev.exs_evt_errno, ev_len(&ev));
	}
	for (i = 4; ok && i < 6; i++) {
		ev = next_event(qs, WAIT_S * 1000);
		ok = event_is(&ev, EXS_EVT_SEND, a, (void *)(intptr_t)i, 0);
	}
	exs_qdelete(qs);
	exs_qdelete(qr);
	return ok;
}

/* `a` sends n small messages and closes before `b` posts a receive; `b`
 * posts its receives only after exsd has told it the connection ended
 * (a second is ample in the guest). Every message must still be read,
 * in order, then an EOF: data sent before a graceful close is never lost,
 * even when it came eagerly, ahead of its receive. */
static bool read_after_close(int a, int b, int n)
{
	static char sbuf[16][64], rbuf[16][64];
	exs_qhandle_t qs = exs_qcreate(64), qr = exs_qcreate(64);
	bool ok = qs != EXS_QHANDLE_INVALID && qr != EXS_QHANDLE_INVALID && n < 16;
	exs_event_t ev;
	int i;

	for (i = 0; ok && i < n; i++) {
		fill(sbuf[i], 48, (unsigned)i + 3);
		ok = exs_send(a, sbuf[i], 48, 0, qs, NULL, UNREG) == 0;
	}
	for (i = 0; ok && i < n; i++)
		ok = next_event(qs, WAIT_S * 1000).exs_evt_type == EXS_EVT_SEND;
	ok = ok && exs_blocking_close(a) == 0;
	usleep(1000 * 1000);
	for (i = 0; ok && i <= n; i++) {
		memset(rbuf[i], 0, sizeof(rbuf[i]));
		ok = exs_recv(b, rbuf[i], sizeof(rbuf[i]), 0, qr, (void *)(intptr_t)i, UNREG) == 0;
		if (!ok)
			printf("  (receive %d refused: %s)\n", i, strerror(errno));
		ev = ok ? next_event(qr, WAIT_S * 1000) : (exs_event_t){ 0 };
		ok = ok && ev.exs_evt_type == EXS_EVT_RECV && !ev.exs_evt_errno &&
		     (i < n ? ev_len(&ev) == 48 && same(rbuf[i], 48, (unsigned)i + 3) : ev_len(&ev) == 0);
		if (!ok)
			printf("  (receive %d of %d: type %d errno %d len %zu)\n", i, n, ev.exs_evt_type,
			       ev.exs_evt_errno, ev_len(&ev));
	}
	exs_qdelete(qs);
	exs_qdelete(qr);
	return ok;
}

static int tune_sb(int fd, bool active)
{
	return exs_fcntl(fd, EXS_F_SETSTREAMBUFSIZE, active ? sb_a : sb_b) < 0;
}

/* STREAM: `total` bytes from `a` in sends of `sizes` (all started before
 * `b` posts a receive when `early`, else a few at a time), read by `b` in
 * receives of `rlen` (MSG_WAITALL when `waitall`) until all have come:
 * the stream arrives whole and in order, every byte checked */
static bool stream_flow(int a, int b, const size_t *sizes, int nsizes, size_t total, size_t rlen,
			bool waitall, bool early)
{
	static char sbuf[1 << 18], rbuf[1 << 18];
	static size_t slen[2048];
	static unsigned char pat_[1 << 18];
	exs_qhandle_t qs = exs_qcreate(256), qr = exs_qcreate(256);
	bool ok = qs != EXS_QHANDLE_INVALID && qr != EXS_QHANDLE_INVALID && total <= sizeof(sbuf) &&
		  rlen * 4 <= sizeof(rbuf);
	size_t sent = 0, got = 0, k;
	int ns = 0, nsent = 0, sends_done = 0, recvs_out = 0, waited = 0, i; /* waited: ms */
	char *rb[4];

	for (k = 0; k < total; k++)
		pat_[k] = sbuf[k] = (char)(k * 7 + k / 251);
	for (i = 0; i < 4; i++)
		rb[i] = rbuf + (size_t)i * rlen;
	/* the sends, cut from the one buffer */
	for (; sent < total && ns < 2048; ns++) {
		slen[ns] = sizes[ns % nsizes] < total - sent ? sizes[ns % nsizes] : total - sent;
		sent += slen[ns];
	}
	ok = ok && sent == total;
	sent = 0;
	while (ok && early && nsent < ns && nsent < 24) {
		ok = exs_send(a, sbuf + sent, slen[nsent], 0, qs, NULL, UNREG) == 0;
		sent += slen[nsent++];
	}
	for (i = 0; ok && i < 4; i++, recvs_out++)
		ok = exs_recv(b, rb[i], rlen, waitall ? MSG_WAITALL : 0, qr, (void *)(intptr_t)i, UNREG) == 0;
	while (ok && got < total) {
		exs_event_t ev;

		while (ok && sends_done < nsent && exs_qdequeue(qs, &ev, 1, &(struct timeval){ 0, 0 }) == 1) {
			ok = ev.exs_evt_type == EXS_EVT_SEND && !ev.exs_evt_errno;
			sends_done++;
		}
		while (ok && nsent < ns && nsent - sends_done < 8) {
			ok = exs_send(a, sbuf + sent, slen[nsent], 0, qs, NULL, UNREG) == 0;
			sent += slen[nsent++];
		}
		/* A MSG_WAITALL receive may need sends not started yet, which
		 * wait for the completions of those out: wait for the receive
		 * in short steps, taking completions and starting sends
		 * between them (one long wait here waited for itself when the
		 * last completions came just after the loop above looked) */
		ev = next_event(qr, 10);
		if (ok && !ev.exs_evt_type && (waited += 10) < WAIT_S * 1000)
			continue;
		waited = 0;
		i = (int)(intptr_t)ev.exs_evt_ahandle;
		ok = ok && ev.exs_evt_type == EXS_EVT_RECV && !ev.exs_evt_errno && i >= 0 && i < 4 &&
		     ev_len(&ev) > 0 && got + ev_len(&ev) <= total &&
		     (!waitall || ev_len(&ev) == (rlen < total - got ? rlen : total - got)) &&
		     !memcmp(rb[i], pat_ + got, ev_len(&ev));
		if (!ok) {
			printf("  (after %zu of %zu B: type %d errno %d len %zu into %zu B)\n", got, total,
			       ev.exs_evt_type, ev.exs_evt_errno, ev_len(&ev), rlen);
			break;
		}
		got += ev_len(&ev);
		recvs_out--;
		/* repost only while more is due than the receives out can take */
		if (total - got > (size_t)recvs_out * rlen) {
			ok = exs_recv(b, rb[i], rlen, waitall ? MSG_WAITALL : 0, qr, (void *)(intptr_t)i,
				      UNREG) == 0;
			recvs_out++;
		}
	}
	while (ok && sends_done < nsent) {
		exs_event_t ev = next_event(qs, WAIT_S * 1000);

		ok = ev.exs_evt_type == EXS_EVT_SEND && !ev.exs_evt_errno;
		sends_done++;
	}
	ok = ok && nsent == ns;
	exs_qdelete(qs);
	exs_qdelete(qr);
	return ok;
}

/* STREAM with a stream buffer: two 1 B sends back to back (the second may
 * wait in an open chunk, coalescing), then no EXS call for 100 ms. The
 * progress thread's tick has sent both by then: one receive, started with
 * nothing else waited for, takes both at once. */
static bool coalesced_tick(int a, int b)
{
	exs_qhandle_t q = exs_qcreate(8);
	char in[64];
	exs_event_t ev;
	size_t got = 0;
	int k, recvs = 0;
	bool ok = q != EXS_QHANDLE_INVALID && !exs_send(a, "x", 1, 0, q, NULL, UNREG) &&
		  !exs_send(a, "y", 1, 0, q, NULL, UNREG);

	usleep(100 * 1000);
	ok = ok && !exs_recv(b, in, sizeof(in), 0, q, (void *)1, UNREG);
	/* three events that need no waiting: a wait would send the chunk */
	for (k = 0; ok && k < 3 && exs_qdequeue(q, &ev, 1, &(struct timeval){ 0, 0 }) == 1; k++)
		if (ev.exs_evt_type == EXS_EVT_RECV) {
			recvs++;
			got = ev.exs_evt_errno ? 0 : ev_len(&ev);
		}
	if (ok && (recvs != 1 || got != 2))
		printf("  (receive events %d, last took %zu B)\n", recvs, got);
	ok = ok && recvs == 1 && got == 2 && !memcmp(in, "xy", 2);
	/* whatever is left comes with a wait */
	while (q != EXS_QHANDLE_INVALID && k++ < 3 && next_event(q, WAIT_S * 1000).exs_evt_type)
		;
	exs_qdelete(q);
	return ok;
}

/* STREAM with a stream buffer: 24 1 B sends back to back, then SHUT_WR
 * at once: every byte arrives, in order, before the end of the stream
 * (an open chunk goes before the FIN). Fewer than the buffer's 32 chunks,
 * so that the sends never wait for the receives, which start after them,
 * however few are coalesced: a chunk holds its credit until the peer reads
 * it, and an EXS_CREDIT_WAIT send beyond 32 chunks waits for one (300 hung
 * on siw0 when a slow guest coalesced too few, and 48 hung once under ASan
 * when the progress thread's tick sent nearly every send alone). */
static bool coalesced_then_fin(int a, int b)
{
	enum { N = 24 };
	exs_qhandle_t q = exs_qcreate(512);
	char in[512], want[N];
	size_t got = 0;
	int k, n = 0;
	bool ok = q != EXS_QHANDLE_INVALID, eof = false;

	for (k = 0; k < N; k++)
		want[k] = (char)(k * 13 + 1);
	for (k = 0; ok && k < N; k++)
		ok = !exs_send(a, &want[k], 1, EXS_CREDIT_WAIT, q, NULL, UNREG);
	ok = ok && !exs_shutdown(a, SHUT_WR, 0, q, NULL);
	while (ok && !eof) {
		exs_event_t ev = { 0 };

		ok = !exs_recv(b, in + got, sizeof(in) - got, 0, q, (void *)2, UNREG);
		while (ok) {
			ev = next_event(q, WAIT_S * 1000);
			if (ev.exs_evt_type == EXS_EVT_RECV)
				break;
			ok = ev.exs_evt_type == EXS_EVT_SEND || ev.exs_evt_type == EXS_EVT_SHUTDOWN;
			n++;
		}
		ok = ok && !ev.exs_evt_errno;
		eof = ok && ev_len(&ev) == 0;
		got += ok ? ev_len(&ev) : 0;
		ok = ok && got <= N;
	}
	while (ok && n < N + 1)
		n += next_event(q, WAIT_S * 1000).exs_evt_type != 0;
	exs_qdelete(q);
	if (got != N || memcmp(in, want, N))
		printf("  (%zu of %d B before the end%s)\n", got, N,
		       got == N ? ", out of order" : "");
	return ok && got == N && !memcmp(in, want, N);
}

/* STREAM with a stream buffer: 10 B sent to no receive wait at `b`, so
 * exs_poll says POLLIN, and a receive started then gets them */
static bool buffered_readable(int a, int b)
{
	static const char msg[10] = "buffered!";
	char in[64];
	exs_qhandle_t q = exs_qcreate(4);
	struct pollfd p = { .fd = b, .events = POLLIN };
	exs_event_t ev[2];
	const exs_event_t *r;
	int n;

	if (q == EXS_QHANDLE_INVALID || exs_send(a, msg, sizeof(msg), 0, q, NULL, UNREG))
		return false;
	n = exs_poll(&p, 1, WAIT_S * 1000);
	exs_recv(b, in, sizeof(in), 0, q, (void *)1, UNREG);
	ev[0] = next_event(q, WAIT_S * 1000);
	ev[1] = next_event(q, WAIT_S * 1000);
	r = ev[0].exs_evt_type == EXS_EVT_RECV ? &ev[0] : &ev[1];
	exs_qdelete(q);
	return n == 1 && (p.revents & POLLIN) && r->exs_evt_type == EXS_EVT_RECV && !r->exs_evt_errno &&
	       ev_len(r) == sizeof(msg) && !memcmp(in, msg, sizeof(msg));
}

/* STREAM with a stream buffer: a send longer than a chunk is not copied
 * into it; it waits, not complete and not readable at `b`, until `b`'s
 * receive is there to be placed into, then arrives whole */
static bool long_send_waits(int a, int b)
{
	static char out[20000], in[20000];
	exs_qhandle_t q = exs_qcreate(4);
	struct pollfd p = { .fd = b, .events = POLLIN };
	exs_event_t ev[2];
	int n, waiting;

	fill(out, sizeof(out), 41);
	if (q == EXS_QHANDLE_INVALID || exs_send(a, out, sizeof(out), 0, q, NULL, UNREG))
		return false;
	n = exs_poll(&p, 1, 300);
	waiting = exs_qdequeue(q, ev, 1, &(struct timeval){ 0, 0 });
	exs_recv(b, in, sizeof(in), MSG_WAITALL, q, (void *)1, UNREG);
	ev[0] = next_event(q, WAIT_S * 1000);
	ev[1] = next_event(q, WAIT_S * 1000);
	exs_qdelete(q);
	if (n != 0 || waiting != 0)
		printf("  (before the receive: poll %d, send events %d)\n", n, waiting);
	return n == 0 && waiting == 0 && ev[0].exs_evt_type + ev[1].exs_evt_type == EXS_EVT_SEND + EXS_EVT_RECV &&
	       !ev[0].exs_evt_errno && !ev[1].exs_evt_errno && same(in, sizeof(in), 41);
}

/* STREAM with a stream buffer, `n` times: the connecting side writes the
 * moment its connect returns, before the accept's event is taken, so the
 * chunk may reach the accepting side before exsd has told it the set-up
 * (it was read as a protocol error there and both ends got ECONNRESET:
 * 2 of 42 bench runs on rxe); each write must arrive whole */
static bool early_chunks(int n)
{
	int ok = 0;

	for (int i = 0; i < n; i++) {
		uint16_t port = next_port++;
		struct sockaddr_in sa = addr_of(port);
		struct exs_acceptaddr aa = { NULL, 0, NULL };
		exs_qhandle_t q = exs_qcreate(2);
		int lfd = listener(SOCK_STREAM, port, 4, 0), a = exs_socket(AF_INET, SOCK_STREAM, 0), b = -1;
		char out[16], in[16] = { 0 };
		exs_event_t ev;

		fill(out, sizeof(out), (unsigned)i);
		if (lfd >= 0 && q && a >= 0 && !exs_accept(lfd, &aa, 1, 0, q) && !tune_sb(a, true) &&
		    !exs_connect(a, (struct sockaddr *)&sa, sizeof(sa), EXS_BLOCK, NULL, NULL, NULL) &&
		    exs_write(a, out, sizeof(out)) == (ssize_t)sizeof(out)) {
			ev = next_event(q, WAIT_S * 1000);
			if (ev.exs_evt_type == EXS_EVT_ACCEPT && !ev.exs_evt_errno)
				b = ev.exs_evt_union.exs_evt_accept.exs_evt_new_socket;
			if (b >= 0 && exs_blocking_recv(b, in, sizeof(in), MSG_WAITALL, UNREG) == (ssize_t)sizeof(in) &&
			    same(in, sizeof(in), (unsigned)i))
				ok++;
			else
				printf("  (pair %d: accept errno %d, %s)\n", i, ev.exs_evt_errno, strerror(errno));
		}
		if (b >= 0)
			exs_blocking_close(b);
		if (a >= 0)
			exs_blocking_close(a);
		if (lfd >= 0)
			exs_blocking_close(lfd);
		if (q)
			exs_qdelete(q);
	}
	return ok == n;
}

static void tuning(void)
{
	static const size_t small[] = { 1, 7, 64, 100, 128 }, mixed[] = { 3, 128, 4000, 90, 70000 };
	int fd = exs_socket(AF_INET, SOCK_SEQPACKET, 0), sfd = exs_socket(AF_INET, SOCK_STREAM, 0);
	int a, b, v, dev_max;

	/* §7.2 small packets: the setting, its bounds, the negotiated minimum */
	report(exs_fcntl(fd, EXS_F_GETSPMAXSIZE) == 1024, "7.2", "small-packet size defaults to 1024");
	expect_err("7.2", "EXS_F_SETSPMAXSIZE -1", exs_fcntl(fd, EXS_F_SETSPMAXSIZE, -1), EINVAL);
	expect_err("7.2", "EXS_F_SETSPMAXSIZE above 65536", exs_fcntl(fd, EXS_F_SETSPMAXSIZE, 65537),
		   EINVAL);
	report(exs_fcntl(fd, EXS_F_SETSPMAXSIZE, 300) == 1024 && exs_fcntl(fd, EXS_F_GETSPMAXSIZE) == 300,
	       "7.2", "EXS_F_SETSPMAXSIZE returns the old value; GET reads the new one");
	sp_a = 256, sp_b = 128, tune = tune_sp;
	if (make_pair(SOCK_SEQPACKET, 0, 0, &a, &b)) {
		report(exs_fcntl(a, EXS_F_GETSPMAXSIZE) == 128 && exs_fcntl(b, EXS_F_GETSPMAXSIZE) == 128,
		       "7.2", "after connect both ends read the negotiated minimum, 128 (got %d, %d)",
		       exs_fcntl(a, EXS_F_GETSPMAXSIZE), exs_fcntl(b, EXS_F_GETSPMAXSIZE));
		expect_err("7.2", "EXS_F_SETSPMAXSIZE on a connected socket",
			   exs_fcntl(a, EXS_F_SETSPMAXSIZE, 64), EISCONN);
		report(exchange(a, b, small, 5, 300, 128, false), "7.2",
		       "300 unregistered small packets (1-128 B) through the library buffers, every byte checked");
		report(exchange(a, b, mixed, 5, 50, 70000, false), "7.2",
		       "small packets mixed with larger unregistered messages, in order, checked");
		report(exchange(a, b, mixed, 5, 20, 64, false), "7.2",
		       "a small-packet receive of 64 B reports the rest of a larger message lost");
		report(exchange(a, b, small, 5, 40, 128, true), "7.2",
		       "registered buffers at small sizes, checked");
		report(small_send_events(a, b), "7.2",
		       "small sends: EXS_UNSIGNALED reports nothing, an asynchronous one its fd, "
		       "ahandle, buffer and length, exs_sendmsg its msghdr; all arrive in order");
		for (v = 0; v < 4; v++)
			if (!exchange_early(a, b, small, 5, 24, 128))
				break;
		report(v == 4, "7.2",
		       "4 x 24 small packets sent before their receives: held, in order, checked");
		report(exchange_early(a, b, mixed, 5, 20, 4096), "7.2",
		       "small and large messages sent before their receives (large: RTS), checked");
		report(exchange_early(a, b, mixed, 5, 20, 100), "7.2",
		       "the same into 100 B receives: the rest of each reported lost");
		exs_blocking_close(b);
		exs_blocking_close(a);
	} else {
		report(false, "7.2", "connection with small packets");
	}
	if (make_pair(SOCK_SEQPACKET, 0, 0, &a, &b)) {
		report(read_after_close(a, b, 8), "7.2",
		       "8 small packets sent, then close: all read after the close reached the peer, then EOF");
		exs_blocking_close(b);
	} else {
		report(false, "7.2", "connection with small packets");
	}
	if (make_pair(SOCK_SEQPACKET, 4, 4, &a, &b)) {
		report(sends_before_receives(a, b), "7.2",
		       "4 credits: 4 blocking small sends return with no receive posted; a 5th "
		       "and a 2000 B one wait for receives; all six arrive in order, checked");
		exs_blocking_close(a);
		exs_blocking_close(b);
	} else {
		report(false, "7.2", "connection with small packets and 4 credits");
	}
	/* one side offering 0 turns small packets off: every message then
	 * waits for its receive's advertisement */
	sp_a = 0, sp_b = 256;
	if (make_pair(SOCK_SEQPACKET, 0, 0, &a, &b)) {
		report(exs_fcntl(a, EXS_F_GETSPMAXSIZE) == 0 && exs_fcntl(b, EXS_F_GETSPMAXSIZE) == 0,
		       "7.2", "an offer of 0 turns small packets off at both ends (got %d, %d)",
		       exs_fcntl(a, EXS_F_GETSPMAXSIZE), exs_fcntl(b, EXS_F_GETSPMAXSIZE));
		report(exchange(a, b, mixed, 5, 20, 70000, false), "7.2",
		       "without small packets: small and large messages in order, checked");
		report(exchange_early(a, b, small, 5, 24, 128), "7.2",
		       "without small packets: sends before their receives wait for them, checked");
		exs_blocking_close(a);
		exs_blocking_close(b);
	} else {
		report(false, "7.2", "connection without small packets");
	}
	tune = NULL;

	/* §7.3 inline: the wish, lowered silently to what the device takes */
	report(exs_fcntl(fd, EXS_F_GETINLINEMAXSIZE) > 0, "7.3",
	       "inline size defaults to the largest the device takes (before connect: %d)",
	       exs_fcntl(fd, EXS_F_GETINLINEMAXSIZE));
	expect_err("7.3", "EXS_F_SETINLINEMAXSIZE -1", exs_fcntl(fd, EXS_F_SETINLINEMAXSIZE, -1), EINVAL);
	inl_a = -1, inl_b = -1, tune = tune_inline;
	dev_max = -1;
	if (make_pair(SOCK_SEQPACKET, 0, 0, &a, &b)) {
		dev_max = exs_fcntl(a, EXS_F_GETINLINEMAXSIZE);
		report(dev_max > 0, "7.3", "connected: the device's inline limit is %d B", dev_max);
		expect_err("7.3", "EXS_F_SETINLINEMAXSIZE on a connected socket",
			   exs_fcntl(a, EXS_F_SETINLINEMAXSIZE, 8), EISCONN);
		exs_blocking_close(a);
		exs_blocking_close(b);
	}
	inl_a = 1 << 20, inl_b = 16;
	if (make_pair(SOCK_SEQPACKET, 0, 0, &a, &b)) {
		v = exs_fcntl(a, EXS_F_GETINLINEMAXSIZE);
		report(v == dev_max, "7.3", "a wish above the device's limit is lowered to it silently (%d)", v);
		v = exs_fcntl(b, EXS_F_GETINLINEMAXSIZE);
		report(v == 16, "7.3", "a wish within it is kept: 16 (got %d); not negotiated with the peer", v);
		report(exchange(a, b, small, 5, 100, 128, false) && exchange(b, a, small, 5, 100, 128, false),
		       "7.3", "inline sends both ways at 1-128 B, every byte checked");
		exs_blocking_close(a);
		exs_blocking_close(b);
	} else {
		report(false, "7.3", "connection with inline sizes set");
	}
	inl_a = 0, inl_b = 0;
	if (make_pair(SOCK_SEQPACKET, 0, 0, &a, &b)) {
		report(exs_fcntl(a, EXS_F_GETINLINEMAXSIZE) == 0 && exchange(a, b, small, 5, 40, 128, false),
		       "7.3", "inline size 0 turns it off; transfers still checked");
		exs_blocking_close(a);
		exs_blocking_close(b);
	}
	tune = NULL;

	/* §7.4 the completion thread's CPU */
	v = exs_fcntl(fd, EXS_F_SETCOMPTHREADCPU, 0);
	report(v == INT_MAX || v == 0, "7.4", "EXS_F_SETCOMPTHREADCPU 0 returns the old CPU (%d, INT_MAX = not pinned)", v);
	report(exs_fcntl(fd, EXS_F_SETCOMPTHREADCPU, INT_MAX) == 0, "7.4",
	       "EXS_F_SETCOMPTHREADCPU INT_MAX unpins, returning 0");
	expect_err("7.4", "EXS_F_SETCOMPTHREADCPU -2", exs_fcntl(fd, EXS_F_SETCOMPTHREADCPU, -2), EINVAL);
	expect_err("7.4", "EXS_F_SETCOMPTHREADCPU on a CPU that does not exist",
		   exs_fcntl(fd, EXS_F_SETCOMPTHREADCPU, 1000), EINVAL);

	/* §7.5 busy polling, with the guide's idiom */
	v = exs_fcntl(fd, EXS_F_GETFD, 0);
	report(v == EXS_FD_NODELAY, "7.5", "EXS_F_GETFD default: EXS_FD_NODELAY only (no stream buffer), got %#x", v);
	report(exs_fcntl(fd, EXS_F_SETFD, exs_fcntl(fd, EXS_F_GETFD, 0) | EXS_FD_BUSYPOLL) == v &&
	       exs_fcntl(fd, EXS_F_GETFD, 0) == (v | EXS_FD_BUSYPOLL), "7.5",
	       "SETFD(GETFD | EXS_FD_BUSYPOLL) returns the old flags and sets only that flag");
	expect_err("7.5", "EXS_F_SETFD with an unknown flag", exs_fcntl(fd, EXS_F_SETFD, 0x100), EINVAL);
	fdflags_a = EXS_FD_BUSYPOLL, tune = tune_busypoll;
	if (make_pair(SOCK_SEQPACKET, 0, 0, &a, &b)) {
		report(exs_fcntl(a, EXS_F_GETFD, 0) & EXS_FD_BUSYPOLL, "7.5", "busy polling kept after connect");
		report(exchange(a, b, mixed, 5, 40, 70000, false) && exchange(b, a, mixed, 5, 40, 70000, false),
		       "7.5", "a busy-polled connection moves data both ways, checked");
		/* the waiter polls in a busy-polling completion thread's stead:
		 * it must not sleep either (then the CQ's event would wake the
		 * progress thread, which would wake it). Adaptive waits sleep
		 * after 1 ms at most, so a busy one's CPU is most of the wait. */
		double busy = wait_cpu(a, b), adaptive = wait_cpu(b, a);
		report(busy > 0.5, "7.5", "a wait on a queue a busy-polled socket's receive posts to polls "
		       "through a 100 ms pause (thread CPU %.0f %% of it)", busy * 100);
		report(adaptive >= 0 && adaptive < 0.5, "11.2.7",
		       "one on a queue only the other end's receive posts to sleeps (CPU %.0f %%)", adaptive * 100);
		expect_err("7.5", "EXS_FD_BUSYPOLL cleared on a connected socket",
			   exs_fcntl(a, EXS_F_SETFD, exs_fcntl(a, EXS_F_GETFD, 0) & ~EXS_FD_BUSYPOLL), EISCONN);
		exs_blocking_close(a);
		exs_blocking_close(b);
	} else {
		report(false, "7.5", "connection with busy polling");
	}
	tune = NULL;

	/* §7.6 the stream buffer: the setting */
	report(exs_fcntl(sfd, EXS_F_GETSTREAMBUFSIZE) == 0, "7.6", "stream buffer size defaults to exs.conf's (0)");
	expect_err("7.6", "EXS_F_SETSTREAMBUFSIZE -1", exs_fcntl(sfd, EXS_F_SETSTREAMBUFSIZE, -1), EINVAL);
	report(exs_fcntl(sfd, EXS_F_SETSTREAMBUFSIZE, 1 << 20) == 0 &&
	       !(exs_fcntl(sfd, EXS_F_GETFD, 0) & EXS_FD_NODELAY), "7.6",
	       "a stream buffer size clears EXS_FD_NODELAY");
	report(exs_fcntl(sfd, EXS_F_SETSTREAMBUFSIZE, 0) == 1 << 20 &&
	       (exs_fcntl(sfd, EXS_F_GETFD, 0) & EXS_FD_NODELAY), "7.6",
	       "size 0 turns the buffer off and sets EXS_FD_NODELAY, returning the old size");
	/* §7.6 the buffer itself: chunks of min(negotiated size, 4096) B, one
	 * per credit; data goes into it when no receive is advertised */
	sb_a = 1 << 16, sb_b = 8192, tune = tune_sb;
	if (make_pair(SOCK_STREAM, 0, 0, &a, &b)) {
		static const size_t sz[] = { 1, 100, 4096, 70000, 13, 9000, 3 }, tiny[] = { 1, 2, 3, 5 },
				    big[] = { 1 << 16 }, mixed[] = { 1, 1 << 16, 2, 30000 };

		report(exs_fcntl(a, EXS_F_GETSTREAMBUFSIZE) == 32 * 4096 &&
		       exs_fcntl(b, EXS_F_GETSTREAMBUFSIZE) == 32 * 4096, "7.6",
		       "after connect both ends read the buffer obtained, 32 credits x 4096 B (got %d, %d)",
		       exs_fcntl(a, EXS_F_GETSTREAMBUFSIZE), exs_fcntl(b, EXS_F_GETSTREAMBUFSIZE));
		expect_err("7.6", "EXS_F_SETSTREAMBUFSIZE on a connected socket",
			   exs_fcntl(a, EXS_F_SETSTREAMBUFSIZE, 0), EISCONN);
		report(buffered_readable(a, b), "7.6",
		       "bytes waiting in the stream buffer make it readable (exs_poll POLLIN); a receive takes them");
		report(stream_flow(a, b, sz, 7, 200000, 5000, false, true), "7.6",
		       "sends before receives: 200,000 B through the buffer and adverts, in order, checked");
		report(stream_flow(a, b, sz, 7, 200000, 3000, false, false), "7.6",
		       "sends and receives interleaved: 200,000 B, in order, checked");
		report(stream_flow(a, b, tiny, 4, 3000, 64, false, true), "7.6",
		       "3,000 B in 1-5 B sends, read in 64 B receives, checked");
		report(stream_flow(a, b, sz, 7, 160000, 20000, true, true), "7.6",
		       "MSG_WAITALL receives filled from the buffer and by placement: each full, checked");
		report(stream_flow(b, a, sz, 7, 100000, 777, false, true), "7.6",
		       "the other way, 100,000 B in 777 B receives, checked");
		report(early_chunks(30), "7.6",
		       "30 connections written to the moment they connect: every first chunk arrives");
		report(long_send_waits(a, b), "7.6",
		       "a send longer than a chunk waits for the receive and is placed, not copied");
		report(stream_flow(a, b, big, 1, 1 << 18, 1 << 16, true, false), "7.6",
		       "64 KiB sends into 64 KiB MSG_WAITALL receives, checked");
		report(stream_flow(a, b, mixed, 4, 240000, 1 << 16, false, true), "7.6",
		       "1 B, 64 KiB, 2 B, 30,000 B sends in turn (chunks and placement), checked");
		report(stream_flow(a, b, mixed, 4, 1 << 18, 1 << 16, true, false), "7.6",
		       "the same, 256 KiB into 64 KiB MSG_WAITALL receives, checked");
		report(coalesced_tick(a, b), "7.6",
		       "small sends coalesced in a chunk go within the progress thread's tick, with no wait");
		report(exs_fcntl(a, EXS_F_SETFD, exs_fcntl(a, EXS_F_GETFD, 0) | EXS_FD_NODELAY) == 0 &&
		       exs_fcntl(a, EXS_F_GETFD, 0) == EXS_FD_NODELAY &&
		       stream_flow(a, b, tiny, 4, 3000, 64, false, true), "7.6",
		       "EXS_FD_NODELAY set after connect (no coalescing): 3,000 B in 1-5 B sends, checked");
		report(exs_fcntl(a, EXS_F_SETFD, 0) == EXS_FD_NODELAY && exs_fcntl(a, EXS_F_GETFD, 0) == 0,
		       "7.6", "EXS_FD_NODELAY cleared again");
		report(coalesced_then_fin(a, b), "7.6",
		       "24 1 B sends then SHUT_WR at once: all 24 B, in order, before the end of stream");
		exs_blocking_close(b);
		exs_blocking_close(a);
	} else {
		report(false, "7.6", "connection with a stream buffer");
	}
	sb_a = 1 << 16, sb_b = 0;
	if (make_pair(SOCK_STREAM, 0, 0, &a, &b)) {
		report(exs_fcntl(a, EXS_F_GETSTREAMBUFSIZE) == 0 && exs_fcntl(b, EXS_F_GETSTREAMBUFSIZE) == 0,
		       "7.6", "one side offering 0: no buffer at either end (got %d, %d)",
		       exs_fcntl(a, EXS_F_GETSTREAMBUFSIZE), exs_fcntl(b, EXS_F_GETSTREAMBUFSIZE));
		exs_blocking_close(b);
		exs_blocking_close(a);
	} else {
		report(false, "7.6", "connection without a stream buffer");
	}
	tune = NULL;
	expect_err("7.x", "an unknown exs_fcntl command", exs_fcntl(fd, 99, 0), EINVAL);
	exs_blocking_close(fd);
	exs_blocking_close(sfd);
}

/* ---- ES-API exs_poll and a queue's file descriptor (exs_poll(3), exs_qfd) */

struct delayed_send {
	int fd;
	char *buf;
	size_t len;
};

static void *send_after_200ms(void *arg)
{
	struct delayed_send *d = arg;

	usleep(200000);
	exs_send(d->fd, d->buf, d->len, EXS_BLOCK, NULL, NULL, UNREG);
	return NULL;
}

static short revents1(int fd, short events, int ms)
{
	struct pollfd p = { .fd = fd, .events = events };

	return exs_poll(&p, 1, ms) == 1 ? p.revents : 0;
}

static void polling(void)
{
	static char buf[8192], rb[8192];
	struct pollfd p[2] = { { .fd = -1, .events = POLLIN } };
	exs_qhandle_t q = exs_qcreate(4);
	int fd = exs_socket(AF_INET, SOCK_SEQPACKET, 0), a, b, qfd, ep;
	struct delayed_send d;
	struct epoll_event ee = { .events = EPOLLIN };
	pthread_t th;
	exs_event_t ev;
	double t;
	short r;
	int n_ev = 0;

	expect_err("poll", "exs_poll NULL with nfds 1", exs_poll(NULL, 1, 0), EINVAL);
	expect_err("poll", "exs_poll nfds above 65536", exs_poll(p, 65537, 0), EINVAL);
	report(exs_poll(p, 1, 0) == 0 && p[0].revents == 0, "poll", "a negative fd is ignored");
	p[0] = (struct pollfd){ .fd = 60000, .events = POLLIN };
	report(exs_poll(p, 1, 0) == 1 && p[0].revents == POLLNVAL, "poll",
	       "an fd that is no EXS socket: POLLNVAL");
	report(revents1(fd, POLLIN | POLLOUT, 0) == POLLHUP, "poll",
	       "an unconnected socket: POLLHUP only");
	t = now();
	p[0] = (struct pollfd){ .fd = -1 };
	int n0 = exs_poll(p, 1, 150);
	t = now() - t;
	report(n0 == 0 && t >= 0.14 && t < 2, "poll", "nothing ready: returns 0 after the timeout (%.3f s)", t);
	exs_blocking_close(fd);
	report(revents1(fd, POLLIN, 0) == POLLNVAL, "poll", "a closed socket: POLLNVAL");

	/* a listener is readable while a connection request waits */
	uint16_t port = next_port++;
	struct sockaddr_in sa = addr_of(port);
	int lfd = listener(SOCK_STREAM, port, 4, 0);
	report(lfd >= 0 && revents1(lfd, POLLIN, 0) == 0, "poll", "listener without request: not readable");
	a = exs_socket(AF_INET, SOCK_STREAM, 0);
	exs_connect(a, (struct sockaddr *)&sa, sizeof(sa), 0, NULL, q, (void *)1);
	report(revents1(lfd, POLLIN, WAIT_S * 1000) == POLLIN, "poll",
	       "a connection request makes the listener readable (POLLIN)");
	b = exs_blocking_accept(lfd, NULL, NULL);
	ev = next_event(q, WAIT_S * 1000);
	report(b >= 0 && event_is(&ev, EXS_EVT_CONNECT, a, (void *)1, 0) &&
	       revents1(lfd, POLLIN, 0) == 0, "poll", "accepted: the listener is not readable again");
	exs_blocking_close(lfd);
	/* a stream is writable; readable only at its end */
	report(revents1(a, POLLIN | POLLOUT, 0) == POLLOUT, "poll", "connected stream: POLLOUT, no POLLIN");
	exs_shutdown(a, SHUT_WR, EXS_BLOCK, NULL, NULL);
	r = revents1(b, POLLIN, WAIT_S * 1000);
	report(r == POLLIN && exs_recv(b, rb, 10, EXS_BLOCK, NULL, NULL, UNREG) == 0, "poll",
	       "the peer's FIN: POLLIN, and the receive is the EOF (revents %#x)", r);
	exs_blocking_close(a);
	exs_blocking_close(b);
	if (make_pair(SOCK_STREAM, 0, 0, &a, &b)) {
		exs_close(a, EXS_DONTLINGER, q, NULL);
		next_event(q, WAIT_S * 1000);
		r = revents1(b, POLLOUT, WAIT_S * 1000);
		report((r & (POLLERR | POLLHUP)) == (POLLERR | POLLHUP) && !(r & POLLOUT), "poll",
		       "the peer's abortive close: POLLERR|POLLHUP unasked, no POLLOUT (revents %#x)", r);
		exs_blocking_close(b);
	} else {
		report(false, "poll", "STREAM connection for the abort");
	}

	/* SEQPACKET with small packets: a message that waits for its receive */
	sp_a = sp_b = 256, tune = tune_sp;
	if (make_pair(SOCK_SEQPACKET, 0, 0, &a, &b)) {
		report(revents1(b, POLLIN, 0) == 0, "poll", "SEQPACKET, nothing sent: not readable");
		fill(buf, sizeof(buf), 3);
		exs_send(a, buf, 100, EXS_BLOCK, NULL, NULL, UNREG);
		r = revents1(b, POLLIN, WAIT_S * 1000);
		report(r == POLLIN && exs_recv(b, rb, sizeof(rb), EXS_BLOCK, NULL, NULL, UNREG) == 100 &&
		       same(rb, 100, 3) && revents1(b, POLLIN, 0) == 0, "poll",
		       "an eager message before its receive: POLLIN; received, not readable again");
		exs_send(a, buf, 5000, 0, q, (void *)2, UNREG);
		r = revents1(b, POLLIN, WAIT_S * 1000);
		report(r == POLLIN && exs_recv(b, rb, sizeof(rb), EXS_BLOCK, NULL, NULL, UNREG) == 5000 &&
		       same(rb, 5000, 3), "poll", "a large message's request-to-send: POLLIN");
		ev = next_event(q, WAIT_S * 1000);
		d = (struct delayed_send){ a, buf, 64 };
		pthread_create(&th, NULL, send_after_200ms, &d);
		t = now();
		p[0] = (struct pollfd){ .fd = a, .events = POLLIN };
		p[1] = (struct pollfd){ .fd = b, .events = POLLIN };
		int n = exs_poll(p, 2, WAIT_S * 1000);
		t = now() - t;
		pthread_join(th, NULL);
		report(n == 1 && p[0].revents == 0 && p[1].revents == POLLIN && t >= 0.15, "poll",
		       "a sleeping exs_poll wakes when the message comes (%.3f s)", t);
		exs_recv(b, rb, sizeof(rb), EXS_BLOCK, NULL, NULL, UNREG);
		exs_blocking_close(a);
		exs_blocking_close(b);
	} else {
		report(false, "poll", "SEQPACKET connection with small packets");
	}
	tune = NULL;
	/* POLLOUT goes while every credit is taken (by a send above sp_max,
	 * 1024, which waits for its receive's advert: an eager one is done
	 * once posted) */
	if (make_pair(SOCK_SEQPACKET, 1, 1, &a, &b)) {
		exs_send(a, buf, 3000, 0, q, (void *)3, UNREG);
		report(revents1(a, POLLOUT, 0) == 0, "poll", "the one credit taken: not writable");
		exs_recv(b, rb, sizeof(rb), 0, q, (void *)4, UNREG);
		r = revents1(a, POLLOUT, WAIT_S * 1000);
		report(r == POLLOUT, "poll", "the send placed: POLLOUT again (revents %#x)", r);
		next_event(q, WAIT_S * 1000);
		next_event(q, WAIT_S * 1000);
		exs_blocking_close(a);
		exs_blocking_close(b);
	} else {
		report(false, "poll", "SEQPACKET connection with 1 credit");
	}

	/* exs_qfd */
	errno = 0;
	expect_err("qfd", "exs_qfd of no queue", exs_qfd(EXS_QHANDLE_INVALID), EINVAL);
	qfd = exs_qfd(q);
	report(qfd >= 0 && exs_qfd(q) == qfd, "qfd", "exs_qfd: one descriptor per queue");
	struct pollfd kp = { .fd = qfd, .events = POLLIN };
	report(poll(&kp, 1, 0) == 0, "qfd", "empty queue: its fd is not readable");
	ep = epoll_create1(0);
	ee.data.fd = qfd;
	epoll_ctl(ep, EPOLL_CTL_ADD, qfd, &ee);
	fd = exs_socket(AF_INET, SOCK_STREAM, 0);
	exs_close(fd, 0, q, (void *)5);
	report(epoll_wait(ep, &ee, 1, WAIT_S * 1000) == 1 && ee.data.fd == qfd, "qfd",
	       "an event posted: epoll reports the queue's fd readable");
	report(poll(&kp, 1, 0) == 1 && exs_qdequeue(q, &ev, 1, NULL) == 1 &&
	       event_is(&ev, EXS_EVT_CLOSE, fd, (void *)5, 0) && poll(&kp, 1, 0) == 0, "qfd",
	       "readable while the event waits, not once it is dequeued");
	close(ep);
	exs_qdelete(q);
	expect_err("qfd", "the fd after exs_qdelete is closed", fcntl(qfd, F_GETFD), EBADF);
	q = exs_qcreate(4);
	exs_close(exs_socket(AF_INET, SOCK_STREAM, 0), 0, q, NULL);
	t = now();
	while (exs_qstatus(q, EXS_QATTR_EVENTS, &n_ev) == 0 && !n_ev && now() - t < WAIT_S)
		usleep(1000);
	qfd = exs_qfd(q);
	kp.fd = qfd;
	report(n_ev == 1 && poll(&kp, 1, 0) == 1, "qfd", "asked for while an event waits: readable at once");
	exs_qdelete(q);
}

/* ---- ES-API exs_mmodify */

static void modifying(void)
{
	static char sb[16384], rb[16384];
	exs_qhandle_t q = exs_qcreate(4);
	exs_mhandle_t mh = exs_mregister(rb, 4096, 0), gone = exs_mregister(sb, 64, 0);
	exs_event_t ev;
	int a, b;

	exs_mderegister(gone, 0);
	expect_err("mmodify", "exs_mmodify of no registration",
		   exs_mmodify(EXS_MHANDLE_INVALID, 100, 0), EINVAL);
	expect_err("mmodify", "exs_mmodify of a deregistered handle", exs_mmodify(gone, 100, 0), EINVAL);
	expect_err("mmodify", "exs_mmodify length 0", exs_mmodify(mh, 0, 0), EINVAL);
	expect_err("mmodify", "exs_mmodify unknown flag", exs_mmodify(mh, 4096, 0x100), EINVAL);
	expect_err("mmodify", "exs_mmodify length above the bound",
		   exs_mmodify(mh, SIZE_MAX - 10, 0), EINVAL);
	if (!make_pair(SOCK_SEQPACKET, 0, 0, &a, &b)) {
		report(false, "mmodify", "SEQPACKET connection");
		return;
	}
	fill(sb, sizeof(sb), 9);
	expect_err("mmodify", "a receive beyond the 4096 B registered",
		   exs_recv(b, rb, 8192, 0, q, NULL, mh), EINVAL);
	expect_ok("mmodify", "exs_mmodify grows it to 16384 B", exs_mmodify(mh, sizeof(rb), 0));
	exs_recv(b, rb, sizeof(rb), 0, q, (void *)1, mh);
	expect_err("mmodify", "a registration in use by a receive: EBUSY",
		   exs_mmodify(mh, 100, 0), EBUSY);
	exs_send(a, sb, 12000, EXS_BLOCK, NULL, NULL, UNREG);
	ev = next_event(q, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_RECV, b, (void *)1, 0) && ev_len(&ev) == 12000 &&
	       ev.exs_evt_union.exs_evt_xfer.exs_evt_mhandle == mh && same(rb, 12000, 9), "mmodify",
	       "12000 B received into the grown registration, checked");
	expect_ok("mmodify", "exs_mmodify sets EXS_MRF_RECV_DISABLE",
		  exs_mmodify(mh, sizeof(rb), EXS_MRF_RECV_DISABLE));
	expect_err("mmodify", "then a receive into it is refused",
		   exs_recv(b, rb, 100, 0, q, NULL, mh), EINVAL);
	exs_recv(a, sb, sizeof(sb), 0, q, (void *)2, UNREG);
	report(exs_send(b, rb, 12000, EXS_BLOCK, NULL, NULL, mh) == 12000 &&
	       (ev = next_event(q, WAIT_S * 1000), event_is(&ev, EXS_EVT_RECV, a, (void *)2, 0)) &&
	       ev_len(&ev) == 12000 && same(sb, 12000, 9), "mmodify",
	       "a send from it still works, checked");
	expect_ok("mmodify", "exs_mmodify shrinks it to 100 B and allows receives again",
		  exs_mmodify(mh, 100, 0));
	expect_err("mmodify", "a receive of 200 B into the 100 B left",
		   exs_recv(b, rb, 200, 0, q, NULL, mh), EINVAL);
	exs_recv(b, rb, 100, 0, q, (void *)3, mh);
	exs_send(a, sb, 100, EXS_BLOCK, NULL, NULL, UNREG);
	ev = next_event(q, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_RECV, b, (void *)3, 0) && ev_len(&ev) == 100 && same(rb, 100, 9),
	       "mmodify", "100 B received into the shrunk registration");
	exs_blocking_close(a);
	exs_blocking_close(b);
	expect_ok("mmodify", "exs_mderegister after exs_mmodify", exs_mderegister(mh, 0));
	exs_qdelete(q);
}

/* ---- guide §11.3.2: fork */

/* one checked SEQPACKET message a -> b through registered buffers */
static bool one_message(int a, int b, char *sb, exs_mhandle_t smh, char *rb, exs_mhandle_t rmh,
			size_t len, unsigned seed)
{
	exs_qhandle_t q = exs_qcreate(2);
	exs_event_t ev;
	bool ok;

	fill(sb, len, seed);
	memset(rb, 0, len);
	exs_recv(b, rb, len, 0, q, NULL, rmh);
	ok = exs_send(a, sb, len, EXS_BLOCK, NULL, NULL, smh) == (ssize_t)len;
	ev = next_event(q, WAIT_S * 1000);
	exs_qdelete(q);
	return ok && ev.exs_evt_type == EXS_EVT_RECV && !ev.exs_evt_errno && ev_len(&ev) == len &&
	       same(rb, len, seed);
}

static void forking(void)
{
	/* registered memory on pages of its own: after ibv_fork_init the
	 * child has none of a registered page (ibv_fork_init(3)) */
	char *sb = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *rb = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	exs_mhandle_t smh = exs_mregister(sb, 65536, 0), rmh = exs_mregister(rb, 65536, 0);
	int a, b, status = -1;
	pid_t pid;

	if (!make_pair(SOCK_SEQPACKET, 0, 0, &a, &b)) {
		report(false, "11.3.2", "SEQPACKET connection");
		return;
	}
	report(one_message(a, b, sb, smh, rb, rmh, 40000, 21), "11.3.2", "before fork: 40000 B, checked");
	int steps[2] = { -1, -1 };
	char step = 0;
	if (pipe(steps))
		steps[0] = steps[1] = -1;
	pid = fork();
	if (pid == 0) {
		/* the child: every call refuses, none touches the parent's state;
		 * exit code = the first check that failed */
		int code = 0;
		struct timeval zero = { 0, 0 };
		exs_event_t ev;

		errno = 0;
		if (write(steps[1], "s", 1) < 0)
			_exit(2);
		if (exs_send(a, sb, 100, EXS_BLOCK, NULL, NULL, smh) != -1 || errno != ENOTSUP)
			code = 10;
		else if (exs_recv(b, rb, 100, 0, NULL, NULL, UNREG) != -1 || errno != EINVAL)
			code = 11; /* no queue: its own argument error first */
		else if (exs_blocking_recv(b, rb, 100, 0, rmh) != -1 || errno != ENOTSUP)
			code = 12;
		else if (exs_qcreate(4) != EXS_QHANDLE_INVALID || errno != ENOTSUP)
			code = 13;
		else if (exs_mregister(sb, 64, 0) != EXS_MHANDLE_INVALID || errno != ENOTSUP)
			code = 14;
		else if (exs_init(EXS_VERSION) != -1 || errno != ENOTSUP)
			code = 15;
		else if (exs_socket(AF_INET, SOCK_STREAM, 0) != -1 || errno != ENOTSUP)
			code = 16;
		else if (exs_blocking_close(a) != -1 || errno != ENOTSUP)
			code = 17;
		else if (exs_qdequeue((exs_qhandle_t)1, &ev, 1, &zero) != -1 || errno != ENOTSUP)
			code = 18;
		else if (exs_fcntl(a, EXS_F_GETFD) != -1 || errno != ENOTSUP)
			code = 19;
		else if (exs_poll(NULL, 0, 0) != -1 || errno != ENOTSUP)
			code = 20;
		if (write(steps[1], "e", 1) < 0)
			_exit(2);
		_exit(code);
	}
	if (pid > 0)
		waitpid(pid, &status, 0);
	close(steps[1]);
	while (read(steps[0], &step, 1) == 1 && step != 'e')
		;
	close(steps[0]);
	report(pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "11.3.2",
	       "a child after fork: every EXS call fails with ENOTSUP (exit %d, signal %d, reached '%c')",
	       WIFEXITED(status) ? WEXITSTATUS(status) : -1,
	       WIFSIGNALED(status) ? WTERMSIG(status) : 0, step ? step : '-');
	bool ok = true;
	for (unsigned i = 0; i < 20 && ok; i++)
		ok = one_message(a, b, sb, smh, rb, rmh, 1000 + i * 3000, 30 + i);
	report(ok, "11.3.2", "after fork the parent goes on: 20 messages, 1000 to 58000 B, checked");
	report(one_message(b, a, rb, rmh, sb, smh, 65536, 77), "11.3.2",
	       "and the other way: 65536 B, checked");
	exs_blocking_close(a);
	exs_blocking_close(b);
	exs_mderegister(smh, 0);
	exs_mderegister(rmh, 0);
	munmap(sb, 65536);
	munmap(rb, 65536);
}

/* ---- guide §11.3.1: thread cancellation */

enum { B_DEQUEUE, B_DEQUEUE_TMO, B_CREDIT_WAIT, B_BLOCKING_SEND, B_POLL, B_DISABLED };
struct blocked {
	int kind;
	exs_qhandle_t q;
	int fd;
	char *buf;
};

static void *block_in(void *arg)
{
	struct blocked *b = arg;
	struct timeval long_tv = { 60, 0 }, short_tv = { 0, 300000 };
	struct pollfd p = { .fd = b->fd, .events = POLLIN };
	exs_event_t ev;
	int old;

	switch (b->kind) {
	case B_DEQUEUE:
		exs_qdequeue(b->q, &ev, 1, NULL);
		break;
	case B_DEQUEUE_TMO:
		exs_qdequeue(b->q, &ev, 1, &long_tv);
		break;
	case B_CREDIT_WAIT:
		exs_send(b->fd, b->buf, 1000, EXS_CREDIT_WAIT, b->q, NULL, UNREG);
		break;
	case B_BLOCKING_SEND:
		exs_blocking_send(b->fd, b->buf, 1000, 0, UNREG);
		break;
	case B_POLL:
		exs_poll(&p, 1, -1);
		break;
	case B_DISABLED:
		pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
		exs_qdequeue(b->q, &ev, 1, &short_tv);
		break;
	}
	return (void *)1;
}

/* start a thread blocked as `kind`, cancel it after 200 ms: what join saw */
static void *cancel_blocked(struct blocked *b)
{
	struct timespec ts;
	pthread_t th;
	void *res = NULL;

	if (pthread_create(&th, NULL, block_in, b))
		return NULL;
	usleep(200000);
	pthread_cancel(th);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 5;
	if (pthread_timedjoin_np(th, &res, &ts)) {
		printf("  (the thread did not end in 5 s; the suite cannot go on)\n");
		_exit(1);
	}
	return res;
}

static bool close_event_comes(exs_qhandle_t q)
{
	int fd = exs_socket(AF_INET, SOCK_STREAM, 0);
	exs_event_t ev;

	exs_close(fd, 0, q, (void *)9);
	ev = next_event(q, WAIT_S * 1000);
	return event_is(&ev, EXS_EVT_CLOSE, fd, (void *)9, 0);
}

static void cancelling(void)
{
	static char sb[4096], rb[4096];
	exs_qhandle_t q = exs_qcreate(8);
	struct blocked b = { .q = q };
	exs_event_t ev;
	int a, c;

	b.kind = B_DEQUEUE;
	report(cancel_blocked(&b) == PTHREAD_CANCELED && close_event_comes(q), "11.3.1",
	       "a thread cancelled in exs_qdequeue without timeout ends; the queue works after");
	b.kind = B_DEQUEUE_TMO;
	report(cancel_blocked(&b) == PTHREAD_CANCELED && close_event_comes(q), "11.3.1",
	       "a thread cancelled in exs_qdequeue with a timeout ends; the queue works after");
	b.kind = B_DISABLED;
	report(cancel_blocked(&b) == (void *)1, "11.3.1",
	       "with cancellation disabled by the caller, exs_qdequeue is not cancelled");
	/* a wait that polls and never sleeps has cancellation points of its
	 * own (before, such a thread never ended) */
	exs_qhandle_t bq = exs_qcreate(8);
	struct blocked bb = { .q = bq, .kind = B_DEQUEUE };
	report(bq && !exs_qmodify(bq, EXS_QATTR_WAIT, &(int){ EXS_WAIT_BUSY_POLL }) &&
	       cancel_blocked(&bb) == PTHREAD_CANCELED && close_event_comes(bq) && close_event_comes(q),
	       "11.3.1", "a thread cancelled in an EXS_WAIT_BUSY_POLL exs_qdequeue ends; both queues work after");
	exs_qdelete(bq);
	if (!make_pair(SOCK_SEQPACKET, 1, 1, &a, &c)) {
		report(false, "11.3.1", "SEQPACKET connection with 1 credit");
		exs_qdelete(q);
		return;
	}
	fill(sb, sizeof(sb), 5);
	/* above sp_max (1024): it waits for its receive's advert */
	exs_send(a, sb, 3000, 0, q, (void *)1, UNREG); /* takes the one credit */
	b.fd = a, b.buf = sb;
	b.kind = B_CREDIT_WAIT;
	report(cancel_blocked(&b) == PTHREAD_CANCELED, "11.3.1",
	       "a thread cancelled in an EXS_CREDIT_WAIT send ends");
	b.kind = B_BLOCKING_SEND;
	report(cancel_blocked(&b) == PTHREAD_CANCELED, "11.3.1",
	       "a thread cancelled in exs_blocking_send's credit wait ends");
	/* POLLIN on `a`, which has nothing coming (`c` is readable: the
	 * peer's request-to-send for the 3000 B message waits there) */
	b.fd = a, b.kind = B_POLL;
	report(cancel_blocked(&b) == PTHREAD_CANCELED, "11.3.1", "a thread cancelled in exs_poll ends");
	exs_recv(c, rb, sizeof(rb), 0, q, (void *)2, UNREG);
	exs_event_t e1 = next_event(q, WAIT_S * 1000), e2 = next_event(q, WAIT_S * 1000);
	report(e1.exs_evt_type + e2.exs_evt_type == EXS_EVT_SEND + EXS_EVT_RECV && !e1.exs_evt_errno &&
	       !e2.exs_evt_errno && same(rb, 3000, 5), "11.3.1",
	       "after the cancels the first send is received, checked: no lock left held");
	exs_recv(c, rb, sizeof(rb), 0, q, (void *)3, UNREG);
	report(exs_blocking_send(a, sb, 2000, 0, UNREG) == 2000 &&
	       (ev = next_event(q, WAIT_S * 1000), ev.exs_evt_type == EXS_EVT_RECV) && ev_len(&ev) == 2000,
	       "11.3.1", "and a new blocking send works");
	struct pollfd p = { .fd = a, .events = POLLOUT };
	report(exs_poll(&p, 1, WAIT_S * 1000) == 1 && p.revents == POLLOUT, "11.3.1",
	       "exs_poll works after a cancelled exs_poll");
	exs_blocking_close(a);
	exs_blocking_close(c);
	expect_ok("11.3.1", "exs_qdelete: the cancelled send let go of the queue", exs_qdelete(q));
}

/* ---- exs_cancel (exs_cancel(3)): the standard's call UNH left out */

#define AH(n) ((void *)(uintptr_t)(n))

/* `len` B of `seed` from `from` into `rb` at `to`, every byte checked */
static bool carries(int from, int to, exs_qhandle_t q, char *rb, size_t len, unsigned seed)
{
	static char sb[8192];
	exs_event_t ev;

	memset(rb, 0, len);
	fill(sb, len, seed);
	if (exs_recv(to, rb, len, MSG_WAITALL, q, AH(seed), UNREG) ||
	    exs_send(from, sb, len, EXS_BLOCK, NULL, NULL, UNREG) != (ssize_t)len)
		return false;
	ev = next_event(q, WAIT_S * 1000);
	return event_is(&ev, EXS_EVT_RECV, to, AH(seed), 0) && ev_len(&ev) == len && same(rb, len, seed);
}

/* both ways, several sizes: the connection is whole after a cancel */
static bool still_carries(int a, int b, exs_qhandle_t q, char *rb, unsigned seed)
{
	return carries(a, b, q, rb, 3000, seed) && carries(b, a, q, rb, 100, seed + 1) &&
	       carries(a, b, q, rb, 4096, seed + 2) && carries(b, a, q, rb, 4096, seed + 3);
}

/* a pair for one of the cancel checks, or a FAIL and the queue deleted */
static bool cancel_pair(int type, const char *what, exs_qhandle_t q, int *a, int *b)
{
	if (make_pair(type, 0, 0, a, b))
		return true;
	report(false, "cancel", "%s: connection", what);
	exs_qdelete(q);
	return false;
}

/* A STREAM receive pending with its advert out: cancelled, the peer lets
 * go of the advert, and its buffer is the caller's again. */
static void cancel_stream_recv(const char *what)
{
	static char rb[4096], rb2[4096], sb[8192];
	exs_qhandle_t q = exs_qcreate(16);
	exs_event_t ev;
	int a, b, r;

	if (!cancel_pair(SOCK_STREAM, what, q, &a, &b))
		return;
	memset(rb, 0x5a, sizeof(rb));
	exs_recv(b, rb, sizeof(rb), 0, q, AH(10), UNREG);
	expect_err("cancel", "the pending receive named as a send: ENOENT",
		   exs_cancel(b, AH(10), EXS_CANCEL_SEND), ENOENT);
	expect_ok("cancel", "exs_cancel of a pending receive (advertised)",
		  exs_cancel(b, AH(10), EXS_CANCEL_RECV));
	r = exs_cancel(b, AH(10), 0);
	report(r == -1 && (errno == EALREADY || errno == ENOENT), "cancel",
	       "%s: cancelling it again: -1 EALREADY (under way) or ENOENT (done)", what);
	ev = next_event(q, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_RECV, b, AH(10), ECANCELED) && ev_len(&ev) == 0, "cancel",
	       "%s: its event says ECANCELED, length 0 (got type %d errno %d len %zu)", what,
	       ev.exs_evt_type, ev.exs_evt_errno, ev_len(&ev));
	/* its buffer is not written after the event: data goes elsewhere */
	fill(sb, 4000, 11);
	exs_recv(b, rb2, sizeof(rb2), MSG_WAITALL, q, AH(11), UNREG);
	exs_send(a, sb, 4000, EXS_BLOCK, NULL, NULL, UNREG);
	exs_send(a, sb + 4000, 96, EXS_BLOCK, NULL, NULL, UNREG);
	ev = next_event(q, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_RECV, b, AH(11), 0) && ev_len(&ev) == 4096 &&
	       same(rb2, 4000, 11) && rb[0] == 0x5a &&
	       memcmp(rb, rb + 1, sizeof(rb) - 1) == 0, "cancel",
	       "%s: the next receive gets the next bytes, checked; the cancelled buffer untouched",
	       what);
	report(still_carries(a, b, q, rb, 12), "cancel",
	       "%s: its buffer reused for other receives; data both ways, checked", what);
	/* MSG_WAITALL with part of it placed: those bytes are reported */
	fill(sb, 1000, 13);
	exs_recv(b, rb, sizeof(rb), MSG_WAITALL, q, AH(14), UNREG);
	exs_send(a, sb, 1000, 0, q, AH(13), UNREG);
	ev = next_event(q, WAIT_S * 1000);
	/* the send's event may come before the bytes reach the receiver (a
	 * stream-buffer chunk completes when posted); a cancel then would win
	 * and the bytes go to the next receive: let them land */
	usleep(200 * 1000);
	expect_ok("cancel", "exs_cancel of a MSG_WAITALL receive holding 1000 B",
		  ev.exs_evt_type == EXS_EVT_SEND ? exs_cancel(b, AH(14), 0) : -1);
	ev = next_event(q, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_RECV, b, AH(14), 0) && ev_len(&ev) == 1000 && same(rb, 1000, 13),
	       "cancel", "%s: it completes with the 1000 B it holds, errno 0, checked (got errno %d len %zu)",
	       what, ev.exs_evt_errno, ev_len(&ev));
	report(still_carries(a, b, q, rb, 15), "cancel",
	       "%s: after it, data both ways, checked", what);
	exs_blocking_close(a);
	exs_blocking_close(b);
	exs_qdelete(q);
}

struct blocked_recv {
	int fd;
	char *buf;
	ssize_t ret;
	int err;
};

static void *recv_blocking(void *arg)
{
	struct blocked_recv *r = arg;

	r->ret = exs_recv(r->fd, r->buf, 4096, EXS_BLOCK, NULL, AH(70), UNREG);
	r->err = errno;
	return NULL;
}

/* Another thread ends a blocking receive by its ahandle. */
static void cancel_blocking_recv(void)
{
	static char rb[4096];
	exs_qhandle_t q = exs_qcreate(16);
	struct blocked_recv r = { .buf = rb };
	pthread_t th;
	int a, b;

	if (!cancel_pair(SOCK_STREAM, "STREAM", q, &a, &b))
		return;
	r.fd = b;
	pthread_create(&th, NULL, recv_blocking, &r);
	usleep(200 * 1000);
	expect_ok("cancel", "exs_cancel of another thread's EXS_BLOCK receive",
		  exs_cancel(b, AH(70), EXS_CANCEL_RECV));
	pthread_join(th, NULL);
	report(r.ret == -1 && r.err == ECANCELED, "cancel",
	       "that exs_recv returns -1 ECANCELED (got %zd, %s)", r.ret, strerror(r.err));
	report(still_carries(a, b, q, rb, 71), "cancel", "after it, data both ways, checked");
	exs_blocking_close(a);
	exs_blocking_close(b);
	exs_qdelete(q);
}

static void cancel_seq_recv(void)
{
	static char rb[4096], rb2[256], sb[4096];
	exs_qhandle_t q = exs_qcreate(16);
	exs_event_t ev;
	int a, b;

	if (!cancel_pair(SOCK_SEQPACKET, "SEQPACKET", q, &a, &b))
		return;
	/* 200 B is at most sp_max (1024): not advertised */
	exs_recv(b, rb, 200, 0, q, AH(30), UNREG);
	exs_recv(b, rb2, 200, 0, q, AH(31), UNREG);
	expect_ok("cancel", "exs_cancel of a pending SEQPACKET receive (not advertised)",
		  exs_cancel(b, AH(30), 0));
	ev = next_event(q, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_RECV, b, AH(30), ECANCELED), "cancel",
	       "its event says ECANCELED");
	fill(sb, 150, 32);
	exs_send(a, sb, 150, EXS_BLOCK, NULL, NULL, UNREG);
	ev = next_event(q, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_RECV, b, AH(31), 0) && ev_len(&ev) == 150 && same(rb2, 150, 32),
	       "cancel", "the next message fills the next receive, checked");
	exs_recv(b, rb, sizeof(rb), 0, q, AH(33), UNREG); /* advertised */
	expect_err("cancel", "an advertised SEQPACKET receive: EBUSY (it is numbered)",
		   exs_cancel(b, AH(33), 0), EBUSY);
	fill(sb, 3000, 34);
	exs_send(a, sb, 3000, EXS_BLOCK, NULL, NULL, UNREG);
	ev = next_event(q, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_RECV, b, AH(33), 0) && ev_len(&ev) == 3000 && same(rb, 3000, 34),
	       "cancel", "and it completes normally, checked");
	report(still_carries(a, b, q, rb, 35), "cancel", "SEQPACKET: data both ways, checked");
	exs_blocking_close(a);
	exs_blocking_close(b);
	exs_qdelete(q);
}

static void cancel_send(void)
{
	static char rb[4096], sb[4096];
	exs_qhandle_t q = exs_qcreate(16);
	exs_event_t ev;
	int a, b;

	if (!cancel_pair(SOCK_STREAM, "STREAM", q, &a, &b))
		return;
	fill(sb, sizeof(sb), 40);
	exs_send(a, sb, 2000, 0, q, AH(40), UNREG); /* no receive: it waits */
	expect_ok("cancel", "exs_cancel of a send waiting for the peer's receive",
		  exs_cancel(a, AH(40), EXS_CANCEL_SEND));
	ev = next_event(q, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_SEND, a, AH(40), ECANCELED), "cancel",
	       "its event says ECANCELED");
	report(carries(a, b, q, rb, 1500, 41), "cancel",
	       "the next send's bytes are the first to arrive, checked");
	/* 1000 B of 3000 placed: the rest cannot be taken back */
	memset(rb, 0, sizeof(rb));
	exs_recv(b, rb, 1000, MSG_WAITALL, q, AH(43), UNREG);
	exs_send(a, sb, 3000, 0, q, AH(42), UNREG);
	ev = next_event(q, WAIT_S * 1000);
	expect_err("cancel", "a send partly placed: EBUSY",
		   ev.exs_evt_type == EXS_EVT_RECV ? exs_cancel(a, AH(42), 0) : 0, EBUSY);
	exs_recv(b, rb + 1000, 2000, MSG_WAITALL, q, AH(44), UNREG);
	exs_event_t e1 = next_event(q, WAIT_S * 1000), e2 = next_event(q, WAIT_S * 1000);
	report(e1.exs_evt_type + e2.exs_evt_type == EXS_EVT_SEND + EXS_EVT_RECV && !e1.exs_evt_errno &&
	       !e2.exs_evt_errno && same(rb, 3000, 40), "cancel",
	       "and it completes normally, all 3000 B checked");
	expect_err("cancel", "a send that completed: ENOENT", exs_cancel(a, AH(42), 0), ENOENT);
	report(still_carries(a, b, q, rb, 45), "cancel", "after the send cancels, data both ways");
	exs_blocking_close(a);
	exs_blocking_close(b);
	exs_qdelete(q);
}

static void cancel_accept_connect(void)
{
	uint16_t port = next_port++;
	struct sockaddr_in sa = addr_of(port);
	struct exs_acceptaddr aa[2] = { { NULL, 0, AH(50) }, { NULL, 0, AH(51) } };
	struct timeval tmo = { .tv_sec = WAIT_S };
	exs_qhandle_t q = exs_qcreate(16);
	int lfd = listener(SOCK_STREAM, port, 4, 0), a, n = -1;
	exs_event_t ev;

	expect_ok("cancel", "two accepts pending", exs_accept(lfd, aa, 2, 0, q));
	expect_ok("cancel", "exs_cancel of the first", exs_cancel(lfd, AH(50), EXS_CANCEL_ACCEPT));
	ev = next_event(q, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_ACCEPT, lfd, AH(50), ECANCELED), "cancel",
	       "its event says ECANCELED");
	expect_err("cancel", "an unknown ahandle on a listener: ENOENT", exs_cancel(lfd, AH(52), 0),
		   ENOENT);
	a = exs_socket(AF_INET, SOCK_STREAM, 0);
	expect_ok("cancel", "a connect after it",
		  exs_connect(a, (struct sockaddr *)&sa, sizeof(sa), EXS_BLOCK, &tmo, NULL, NULL));
	ev = next_event(q, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_ACCEPT, lfd, AH(51), 0), "cancel",
	       "is accepted by the second accept");
	if (ev.exs_evt_type == EXS_EVT_ACCEPT && !ev.exs_evt_errno)
		n = ev.exs_evt_union.exs_evt_accept.exs_evt_new_socket;
	if (n >= 0)
		exs_blocking_close(n);
	exs_blocking_close(a);
	/* a connect nobody accepts */
	a = exs_socket(AF_INET, SOCK_STREAM, 0);
	exs_connect(a, (struct sockaddr *)&sa, sizeof(sa), 0, NULL, q, AH(60));
	usleep(300 * 1000);
	expect_err("cancel", "the connect named as a receive: ENOENT",
		   exs_cancel(a, AH(60), EXS_CANCEL_RECV), ENOENT);
	expect_ok("cancel", "exs_cancel of a connect to a listener that never accepts",
		  exs_cancel(a, AH(60), EXS_CANCEL_CONNECT));
	ev = next_event(q, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_CONNECT, a, AH(60), ECANCELED), "cancel",
	       "its event says ECANCELED (got type %d errno %d)", ev.exs_evt_type, ev.exs_evt_errno);
	/* the socket may connect again; two accepts, as the first may meet
	 * the request of the cancelled connect, which its exsd still holds */
	aa[0].exs_ahandle = AH(61);
	aa[1].exs_ahandle = AH(62);
	exs_accept(lfd, aa, 2, 0, q);
	report(exs_connect(a, (struct sockaddr *)&sa, sizeof(sa), EXS_BLOCK, &tmo, NULL, NULL) == 0,
	       "cancel", "the same socket connects again after the cancel");
	for (int i = 0; i < 2; i++) { /* the accept that took it */
		ev = next_event(q, WAIT_S * 1000);
		if (ev.exs_evt_type == EXS_EVT_ACCEPT && !ev.exs_evt_errno) {
			exs_blocking_close(ev.exs_evt_union.exs_evt_accept.exs_evt_new_socket);
			break;
		}
	}
	exs_blocking_close(a);
	exs_blocking_close(lfd);
	exs_qdelete(q); /* accept events left in it go with it */
}

static void cancel_calls(void)
{
	int fd = exs_socket(AF_INET, SOCK_STREAM, 0);

	expect_err("cancel", "exs_cancel of fd -1: EBADF", exs_cancel(-1, AH(1), 0), EBADF);
	expect_err("cancel", "exs_cancel of an fd never opened: EBADF", exs_cancel(4000, AH(1), 0),
		   EBADF);
	expect_err("cancel", "exs_cancel with an unknown flag: EINVAL", exs_cancel(fd, AH(1), 0x100),
		   EINVAL);
	expect_err("cancel", "exs_cancel of nothing started: ENOENT", exs_cancel(fd, AH(1), 0), ENOENT);
	exs_blocking_close(fd);
	cancel_stream_recv("STREAM");
	sb_a = sb_b = 65536;
	tune = tune_sb;
	cancel_stream_recv("STREAM with stream buffer");
	tune = NULL;
	cancel_blocking_recv();
	cancel_seq_recv();
	cancel_send();
	cancel_accept_connect();
}

/* ---- persistent transfers and offsets (seed 000 §4.2-4.4, exs(7)) */

#define PB 8192 /* the persistent block */

/* `n` receives of `len` B at b of a's block (at `off` if >= 0), each
 * checked against `seed` at that offset; true if all complete in time */
static bool reads_block(int b, exs_qhandle_t q, char *rb, size_t len, off_t off, size_t want,
			unsigned seed, int n)
{
	for (int i = 0; i < n; i++) {
		static char ref[2 * PB];
		exs_event_t ev;
		ssize_t r;

		memset(rb, 0, len);
		r = off < 0 ? exs_recv(b, rb, len, 0, q, AH(100 + i), UNREG) :
			      exs_recv_offset(b, rb, len, 0, off, q, AH(100 + i), UNREG);
		ev = next_event(q, WAIT_S * 1000);
		fill(ref, PB, seed);
		if (r || !event_is(&ev, EXS_EVT_RECV, b, AH(100 + i), 0) || ev_len(&ev) != want ||
		    memcmp(rb, ref + (off < 0 ? 0 : off), want))
			return false;
	}
	return true;
}

/* events of type `type` for `ah` at fd within `ms`, counted (others are
 * counted in *other) */
static int count_events(exs_qhandle_t q, int fd, void *ah, int ms, int *other)
{
	int n = 0;

	for (;;) {
		exs_event_t ev = next_event(q, ms);

		if (!ev.exs_evt_type)
			return n;
		if (event_is(&ev, EXS_EVT_SEND, fd, ah, 0))
			n++;
		else
			(*other)++;
	}
}

static void persistent_send(void)
{
	static char blk[PB], rb[2 * PB], sb[4096];
	exs_qhandle_t q = exs_qcreate(64), qa = exs_qcreate(64);
	exs_mhandle_t mh = exs_mregister(blk, sizeof(blk), 0);
	exs_event_t ev;
	int a, b, other = 0;

	if (!make_pair(SOCK_SEQPACKET, 0, 0, &a, &b)) {
		report(false, "4.2", "persistent send: connection");
		return;
	}
	expect_err("4.4", "exs_recv_offset with no persistent send of the peer: EINVAL",
		   exs_recv_offset(b, rb, 100, 0, 0, q, AH(1), UNREG), EINVAL);
	expect_err("4.4", "exs_send_offset with no persistent receive of the peer: EINVAL",
		   exs_send_offset(a, sb, 100, 0, 0, q, AH(1), UNREG), EINVAL);
	expect_err("4.2", "EXS_PERSISTENT with EXS_BLOCK: EINVAL",
		   exs_send(a, blk, PB, EXS_PERSISTENT | EXS_BLOCK, qa, AH(2), mh), EINVAL);
	expect_err("4.2", "EXS_PERSISTENT without a queue: EINVAL",
		   exs_send(a, blk, PB, EXS_PERSISTENT, NULL, AH(2), mh), EINVAL);
	expect_err("4.2", "EXS_READ_NOTIFY without EXS_PERSISTENT: EINVAL",
		   exs_send(a, blk, PB, EXS_READ_NOTIFY, qa, AH(2), mh), EINVAL);
	expect_err("4.2", "EXS_READ_NOTIFY on a receive: EINVAL",
		   exs_recv(b, rb, PB, EXS_PERSISTENT | EXS_READ_NOTIFY, q, AH(2), UNREG), EINVAL);
	expect_err("4.4", "exs_send_offset with EXS_PERSISTENT: EINVAL",
		   exs_send_offset(a, blk, PB, EXS_PERSISTENT, 0, qa, AH(2), mh), EINVAL);
	expect_err("4.4", "a negative offset: EINVAL",
		   exs_recv_offset(b, rb, 100, 0, -1, q, AH(2), UNREG), EINVAL);
	/* a receive the device refuses (a read-only buffer) keeps no
	 * reference to its queue: the queue can be deleted after */
	exs_qhandle_t qx = exs_qcreate(4);
	char *ro = mmap(NULL, PB, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (qx && ro != MAP_FAILED) {
		ssize_t r = exs_recv(b, ro, PB, EXS_PERSISTENT, qx, AH(9), UNREG);
		int e = errno;

		report(r == -1, "4.2", "EXS_PERSISTENT receive into a read-only buffer fails (%d, errno %d)",
		       (int)r, e);
		expect_ok("2.1.2", "exs_qdelete of the refused receive's queue", exs_qdelete(qx));
	} else {
		report(false, "4.2", "read-only buffer and queue for the refused receive");
	}
	if (ro != MAP_FAILED)
		munmap(ro, PB);
	fill(blk, PB, 7);
	expect_ok("4.2", "exs_send EXS_PERSISTENT of a registered 8 KiB block",
		  exs_send(a, blk, PB, EXS_PERSISTENT, qa, AH(3), mh));
	report(reads_block(b, q, rb, PB, -1, PB, 7, 3), "4.2",
	       "three receives of the peer each read the whole block, checked");
	report(reads_block(b, q, rb, 1000, -1, 1000, 7, 2), "4.2",
	       "a shorter receive reads the block's start, checked");
	report(reads_block(b, q, rb, 2 * PB, -1, PB, 7, 1), "4.2",
	       "a longer receive reads the block (length = block), checked");
	fill(blk, PB, 8); /* the sender changes its memory only */
	report(reads_block(b, q, rb, PB, -1, PB, 8, 2), "4.2",
	       "after the sender changed its block, receives read the new values");
	report(reads_block(b, q, rb, 500, 1000, 500, 8, 2), "4.4",
	       "exs_recv_offset reads [1000, 1500) of the block, checked");
	report(reads_block(b, q, rb, 192, PB - 192, 192, 8, 1), "4.4",
	       "exs_recv_offset of the block's last bytes, checked");
	expect_err("4.4", "exs_recv_offset past the block's end: EINVAL",
		   exs_recv_offset(b, rb, 500, 0, PB - 499, q, AH(4), UNREG), EINVAL);
	expect_err("4.4", "exs_recv_offset at an offset beyond the block: EINVAL",
		   exs_recv_offset(b, rb, 1, 0, PB + 1, q, AH(4), UNREG), EINVAL);
	expect_err("4.2", "a normal send while the persistent send is in effect: EBUSY",
		   exs_send(a, sb, 100, 0, qa, AH(5), UNREG), EBUSY);
	expect_err("4.2", "a second persistent send: EBUSY",
		   exs_send(a, blk, PB, EXS_PERSISTENT, qa, AH(5), mh), EBUSY);
	expect_err("4.3", "a persistent receive against the peer's persistent send: EBUSY",
		   exs_recv(b, rb, PB, EXS_PERSISTENT, q, AH(5), UNREG), EBUSY);
	report(count_events(qa, a, AH(3), 100, &other) == 0 && !other, "4.2",
	       "the sender got no event for the reads (no EXS_READ_NOTIFY)");
	expect_ok("4.2", "exs_cancel of the persistent send", exs_cancel(a, AH(3), EXS_CANCEL_SEND));
	ev = next_event(qa, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_SEND, a, AH(3), ECANCELED), "4.2",
	       "its event says ECANCELED (got type %d errno %d)", ev.exs_evt_type, ev.exs_evt_errno);
	expect_err("4.2", "exs_cancel of it again: ENOENT", exs_cancel(a, AH(3), 0), ENOENT);
	expect_err("4.4", "exs_recv_offset after the cancel: EINVAL",
		   exs_recv_offset(b, rb, 100, 0, 0, q, AH(6), UNREG), EINVAL);
	/* a receive after the cancel waits for the peer's next send */
	memset(rb, 0, sizeof(rb));
	exs_recv(b, rb, sizeof(rb), 0, q, AH(7), UNREG);
	ev = next_event(q, 200);
	report(!ev.exs_evt_type, "4.2", "a receive after the cancel waits (no event in 200 ms)");
	fill(sb, 3000, 9);
	exs_send(a, sb, 3000, EXS_BLOCK, NULL, NULL, UNREG);
	ev = next_event(q, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_RECV, b, AH(7), 0) && ev_len(&ev) == 3000 && same(rb, 3000, 9),
	       "4.2", "and takes the peer's next normal send, checked");
	report(still_carries(a, b, q, rb, 10), "4.2", "after the persistent send, data both ways");

	/* read-notify: one event per read, the send stays in effect */
	fill(blk, PB, 11);
	expect_ok("4.2", "exs_send EXS_PERSISTENT | EXS_READ_NOTIFY (unregistered block)",
		  exs_send(a, blk, PB, EXS_PERSISTENT | EXS_READ_NOTIFY, qa, AH(12), UNREG));
	report(reads_block(b, q, rb, PB, -1, PB, 11, 5) && reads_block(b, q, rb, 100, 50, 100, 11, 2),
	       "4.2", "the peer reads it 7 times (5 whole, 2 at an offset), checked");
	other = 0;
	int n = count_events(qa, a, AH(12), 500, &other);
	report(n == 7 && !other, "4.2", "the sender got 7 read-notify events, errno 0 (got %d, %d other)",
	       n, other);
	expect_ok("4.2", "exs_cancel of the read-notify send", exs_cancel(a, AH(12), 0));
	ev = next_event(qa, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_SEND, a, AH(12), ECANCELED), "4.2",
	       "its final event says ECANCELED");

	/* a pending receive is read when the persistent send comes */
	memset(rb, 0, sizeof(rb));
	exs_recv(b, rb, PB, 0, q, AH(13), UNREG);
	fill(blk, PB, 14);
	exs_send(a, blk, PB, EXS_PERSISTENT, qa, AH(15), mh);
	ev = next_event(q, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_RECV, b, AH(13), 0) && ev_len(&ev) == PB && same(rb, PB, 14),
	       "4.2", "a receive waiting before the persistent send reads it, checked");
	/* the close ends it: the peer's next receive is an EOF */
	exs_blocking_close(a);
	ev = next_event(qa, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_SEND, a, AH(15), ECANCELED), "4.2",
	       "the close ends the persistent send (ECANCELED)");
	exs_recv(b, rb, PB, 0, q, AH(16), UNREG);
	ev = next_event(q, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_RECV, b, AH(16), 0) && ev_len(&ev) == 0, "4.2",
	       "after the sender's close the peer's receive is an EOF");
	exs_blocking_close(b);
	exs_mderegister(mh, 0);
	exs_qdelete(q);
	exs_qdelete(qa);
}

static void persistent_recv(void)
{
	static char blk[4096], sb[4096], rb[4096];
	exs_qhandle_t q = exs_qcreate(64), qa = exs_qcreate(64);
	exs_event_t ev;
	bool ok = true;
	int a, b, fd;

	fd = exs_socket(AF_INET, SOCK_STREAM, 0);
	if (make_pair(SOCK_STREAM, 0, 0, &a, &b)) {
		expect_err("4.2", "EXS_PERSISTENT on SOCK_STREAM: EOPNOTSUPP",
			   exs_send(a, sb, 100, EXS_PERSISTENT, qa, AH(1), UNREG), EOPNOTSUPP);
		exs_blocking_close(a);
		exs_blocking_close(b);
	}
	expect_err("4.2", "EXS_PERSISTENT on an unconnected socket: ENOTCONN",
		   exs_send(fd, sb, 100, EXS_PERSISTENT, qa, AH(1), UNREG), ENOTCONN);
	exs_blocking_close(fd);
	if (!make_pair(SOCK_SEQPACKET, 0, 0, &a, &b)) {
		report(false, "4.3", "persistent receive: connection");
		return;
	}
	memset(blk, 0, sizeof(blk));
	expect_ok("4.3", "exs_recv EXS_PERSISTENT of a 4 KiB buffer",
		  exs_recv(b, blk, sizeof(blk), EXS_PERSISTENT, q, AH(20), UNREG));
	/* a small send (EAGER, maybe before the peer knew) and long ones */
	for (int i = 0; i < 4 && ok; i++) {
		size_t len = i == 0 ? 100 : i == 3 ? 4096 : 3000;

		fill(sb, len, 21 + i);
		ok = exs_send(a, sb, len, EXS_BLOCK, NULL, NULL, UNREG) == (ssize_t)len;
		for (int t = 0; t < 100 && !same(blk, len, 21 + i); t++)
			usleep(1000); /* an EAGER one is copied by the peer's library */
		ok = ok && same(blk, len, 21 + i);
	}
	report(ok, "4.3", "four sends (100 B to 4 KiB) each land in the persistent receive, checked");
	ev = next_event(q, 100);
	report(!ev.exs_evt_type, "4.3", "the receiver got no event for them");
	fill(sb, 50, 30);
	ok = exs_send_offset(a, sb, 50, EXS_BLOCK, 1000, NULL, NULL, UNREG) == 50;
	fill(rb, 4096, 24);
	memcpy(rb + 1000, sb, 50);
	report(ok && !memcmp(blk, rb, 4096), "4.4",
	       "exs_send_offset writes [1000, 1050) of the peer's buffer and nothing else, checked");
	expect_err("4.4", "exs_send_offset past the buffer's end: EINVAL",
		   exs_send_offset(a, sb, 100, 0, 4000, qa, AH(21), UNREG), EINVAL);
	fill(sb, 4096, 31);
	ok = exs_send(a, sb, 4096, EXS_BLOCK, NULL, NULL, UNREG) == 4096 && same(blk, 4096, 31);
	report(ok, "4.3", "a send as long as the buffer fills it, checked");
	expect_err("4.3", "a normal receive while the persistent receive is in effect: EBUSY",
		   exs_recv(b, rb, 100, 0, q, AH(22), UNREG), EBUSY);
	expect_err("4.3", "a persistent send against the peer's persistent receive: EBUSY",
		   exs_send(a, sb, 100, EXS_PERSISTENT, qa, AH(22), UNREG), EBUSY);
	expect_ok("4.3", "exs_cancel of the persistent receive", exs_cancel(b, AH(20), 0));
	ev = next_event(q, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_RECV, b, AH(20), ECANCELED), "4.3",
	       "its event says ECANCELED (got type %d errno %d)", ev.exs_evt_type, ev.exs_evt_errno);
	expect_err("4.4", "exs_send_offset after the cancel: EINVAL",
		   exs_send_offset(a, sb, 10, 0, 0, qa, AH(23), UNREG), EINVAL);
	report(still_carries(a, b, q, rb, 32), "4.3", "after the persistent receive, data both ways");

	/* both at once: refused, locally or by the peer (both EBUSY) */
	int ra = (int)exs_send(a, sb, 4096, EXS_PERSISTENT, qa, AH(24), UNREG);
	int rb_ = (int)exs_recv(b, blk, 4096, EXS_PERSISTENT, q, AH(25), UNREG);
	exs_event_t e1 = next_event(qa, 1000), e2 = next_event(q, 1000);
	bool crossed = !ra && !rb_ && event_is(&e1, EXS_EVT_SEND, a, AH(24), EBUSY) &&
		       event_is(&e2, EXS_EVT_RECV, b, AH(25), EBUSY);
	bool local = !ra && rb_ == -1 && errno == EBUSY && !e1.exs_evt_type;
	report(crossed || local, "4.3",
	       "a persistent send and receive for one direction at once: one refused with EBUSY (%s)",
	       crossed ? "crossed: both" : "locally");
	if (local) {
		exs_cancel(a, AH(24), 0);
		e1 = next_event(qa, WAIT_S * 1000);
	}
	report(still_carries(a, b, q, rb, 33), "4.3", "then data both ways");
	/* the close ends a persistent receive once the peer let go of it */
	exs_recv(b, blk, sizeof(blk), EXS_PERSISTENT, q, AH(26), UNREG);
	fill(sb, 3000, 34);
	ok = exs_send(a, sb, 3000, EXS_BLOCK, NULL, NULL, UNREG) == 3000 && same(blk, 3000, 34);
	report(ok, "4.3", "a second persistent receive takes the peer's send, checked");
	exs_blocking_close(b);
	ev = next_event(q, WAIT_S * 1000);
	report(event_is(&ev, EXS_EVT_RECV, b, AH(26), ECANCELED), "4.3",
	       "the close ends the persistent receive with ECANCELED (got errno %d)", ev.exs_evt_errno);
	exs_blocking_close(a);
	exs_qdelete(q);
	exs_qdelete(qa);
}

static void persistent(void)
{
	persistent_send();
	persistent_recv();
}

int main(int argc, char **argv)
{
	double t0 = now();

	if (argc != 3 || inet_pton(AF_INET, argv[1], &host) != 1 || atoi(argv[2]) <= 0) {
		fprintf(stderr, "usage: exs_conform ADDR PORT\n");
		return 2;
	}
	next_port = (uint16_t)atoi(argv[2]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGALRM, on_alarm);
	alarm(240);
	if (exs_init(EXS_VERSION)) {
		printf("FAIL [§3] exs_init: %s\n", strerror(errno));
		return 1;
	}
	queues();
	registration();
	sockets();
	connections();
	seqpacket();
	stream();
	scatter_gather();
	sendfiles();
	closing();
	tuning();
	polling();
	modifying();
	forking();
	cancelling();
	cancel_calls();
	persistent();
	printf("%d passed, %d failed (%.1f s)\n", passed, failed, now() - t0);
	return failed ? 1 : 0;
}
