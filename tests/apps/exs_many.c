/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs_many: many EXS connections set up at once, then held, so that exsctl
 * can be checked against them.
 *
 *   exs_many server ADDR PORT N   accepts N connections
 *   exs_many client ADDR PORT N   N sockets connect concurrently (asynchronous
 *                                 exs_connect, all started before any completes)
 * Prints "ready N" once all N are up (or the failures), then holds them
 * until SIGTERM. Exit 0 if all N came up.
 *
 *   exs_many client ADDR PORT N SECS   then, on SIGUSR1 (so that several
 *            clients start together), traffic for SECS seconds: rounds
 *            of one message (1 B to 16 KiB, pseudo-random) on every
 *            connection, each echoed and every byte of the echo checked;
 *            a line per minute; then closes all. Exit 0 only if all came
 *            back intact (3 if no event came for 60 s)
 *   exs_many client ADDR PORT N SECS W   the same with at most W connects in
 *            flight (siw gives up on a request not accepted within ~10 s)
 *   exs_many server ADDR PORT N SECS   echoes every message on its N
 *            connections until each one's EOF, then exits 0 (the first
 *            message may take however long; then 60 s without an event
 *            is exit 3)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <exs.h>

#define MANY_MAX 4096
#define MSG_MAX 16384

/* the fds of the connections that came up, in the order they did */
static int fds[MANY_MAX];

/* n connects, at most `window` in flight (n: all started before any
 * completes) */
static int connect_all(const struct sockaddr_in *sa, int n, int window)
{
	exs_qhandle_t q = exs_qcreate(window);
	exs_event_t ev;
	int up = 0, started = 0;

	if (q == EXS_QHANDLE_INVALID)
		return 0;
	for (int i = 0; i < n; i++) {
		for (; started < n && started - i < window; started++) {
			int fd = exs_socket(AF_INET, SOCK_SEQPACKET, 0);

			if (fd < 0 || exs_connect(fd, (const struct sockaddr *)sa, sizeof(*sa), 0, NULL, q,
						  (void *)(long)fd)) {
				printf("connect %d: %s\n", started, strerror(errno));
				return up;
			}
		}
		if (exs_qdequeue(q, &ev, 1, NULL) != 1)
			break;
		if (ev.exs_evt_type != EXS_EVT_CONNECT || ev.exs_evt_errno)
			printf("connect event %d: type %d, %s\n", i, ev.exs_evt_type,
			       strerror(ev.exs_evt_errno));
		else
			fds[up++] = (int)(long)ev.exs_evt_ahandle;
	}
	return up;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t mix(uint64_t x)
{
	x *= 0x9e3779b97f4a7c15ull;
	return x ^ (x >> 31);
}

/* connection i's message in round r: its size (log-uniform) and bytes */
static size_t msg_len(int i, uint64_t r)
{
	uint64_t x = mix(((uint64_t)i << 40) ^ r ^ 0x5a5a);

	return (size_t)(x % (1ull << (x >> 32) % 15)) + 1; /* 1 .. 2^14 = MSG_MAX */
}

static uint8_t msg_byte(int i, uint64_t r, size_t k)
{
	return (uint8_t)(mix(((uint64_t)i << 44) ^ (r << 20) ^ k) >> 56);
}

/* one event, or exit 3 after 60 s without one */
/* the next event; `patient`: however long it takes (a server before its
 * client starts the traffic, which may hold its connections idle first) */
static exs_event_t next_event(exs_qhandle_t q, const char *who, bool patient)
{
	struct timeval stall = { 60, 0 };
	exs_event_t ev;
	int k = exs_qdequeue(q, &ev, 1, patient ? NULL : &stall);

	if (k != 1) {
		printf("%s: %s\n", who, k ? strerror(errno) : "no event for 60 s");
		exit(3);
	}
	return ev;
}

static exs_mhandle_t reg(uint8_t **buf, size_t len)
{
	exs_mhandle_t mh;

	*buf = aligned_alloc(4096, len);
	mh = *buf ? exs_mregister(*buf, len, 0) : EXS_MHANDLE_INVALID;
	if (mh == EXS_MHANDLE_INVALID) {
		printf("buffers: %s\n", strerror(errno));
		exit(1);
	}
	return mh;
}

/* the client: rounds on all n connections until `secs` are over */
static int ping_all(int n, double secs)
{
	uint8_t *out, *in;
	exs_mhandle_t omh = reg(&out, (size_t)n * MSG_MAX), imh = reg(&in, (size_t)n * MSG_MAX);
	exs_qhandle_t q = exs_qcreate(2 * n);
	double t0 = now(), minute = 60;
	uint64_t r = 0, bytes = 0;

	if (q == EXS_QHANDLE_INVALID)
		return 1;
	for (; now() - t0 < secs; r++) {
		for (int i = 0; i < n; i++) {
			size_t len = msg_len(i, r);
			uint8_t *o = out + (size_t)i * MSG_MAX;

			for (size_t k = 0; k < len; k++)
				o[k] = msg_byte(i, r, k);
			if (exs_recv(fds[i], in + (size_t)i * MSG_MAX, MSG_MAX, 0, q, (void *)(long)(2 * i + 1), imh) ||
			    exs_send(fds[i], o, len, 0, q, (void *)(long)(2 * i), omh)) {
				printf("round %llu, connection %d: %s\n", (unsigned long long)r, i, strerror(errno));
				return 1;
			}
		}
		for (int e = 0; e < 2 * n; e++) {
			exs_event_t ev = next_event(q, "client", false);
			int i = (int)((long)ev.exs_evt_ahandle / 2);
			size_t len = msg_len(i, r), got = ev.exs_evt_union.exs_evt_xfer.exs_evt_length;
			const uint8_t *b = in + (size_t)i * MSG_MAX;

			if (ev.exs_evt_errno || got != len) {
				printf("round %llu, connection %d: %s of %zu bytes: %zu, %s\n", (unsigned long long)r, i,
				       (long)ev.exs_evt_ahandle & 1 ? "echo" : "send", len, got,
				       strerror(ev.exs_evt_errno));
				return 1;
			}
			if (!((long)ev.exs_evt_ahandle & 1))
				continue;
			for (size_t k = 0; k < len; k++)
				if (b[k] != msg_byte(i, r, k)) {
					printf("round %llu, connection %d: byte %zu of %zu is wrong\n",
					       (unsigned long long)r, i, k, len);
					return 1;
				}
			bytes += len;
		}
		if (now() - t0 >= minute) {
			printf("minute %d: %llu rounds, %llu bytes echoed and checked\n", (int)(minute / 60),
			       (unsigned long long)r + 1, (unsigned long long)bytes);
			minute += 60;
		}
	}
	double dt = now() - t0;

	for (int i = 0; i < n; i++)
		if (exs_blocking_close(fds[i])) {
			printf("close %d: %s\n", i, strerror(errno));
			return 1;
		}
	printf("traffic: %d connections, %llu rounds, %llu messages each way, %llu bytes echoed and checked, "
	       "%.1f s, %.0f round trips/s\n",
	       n, (unsigned long long)r, (unsigned long long)r * (uint64_t)n, (unsigned long long)bytes, dt,
	       (double)r * n / dt);
	return 0;
}

/* the server: echo each message from where it arrived; the next receive
 * on that connection once the echo's send is done; until every EOF */
static int echo_all(int n)
{
	uint8_t *buf;
	exs_mhandle_t mh = reg(&buf, (size_t)n * MSG_MAX);
	exs_qhandle_t q = exs_qcreate(2 * n);
	uint64_t msgs = 0, bytes = 0;
	int open = n;

	if (q == EXS_QHANDLE_INVALID)
		return 1;
	for (int i = 0; i < n; i++)
		if (exs_recv(fds[i], buf + (size_t)i * MSG_MAX, MSG_MAX, 0, q, (void *)(long)(2 * i + 1), mh)) {
			printf("recv %d: %s\n", i, strerror(errno));
			return 1;
		}
	while (open) {
		exs_event_t ev = next_event(q, "server", msgs == 0);
		int i = (int)((long)ev.exs_evt_ahandle / 2), is_recv = (long)ev.exs_evt_ahandle & 1;
		size_t len = ev.exs_evt_union.exs_evt_xfer.exs_evt_length;
		uint8_t *b = buf + (size_t)i * MSG_MAX;

		if (ev.exs_evt_errno) {
			printf("connection %d: %s: %s\n", i, is_recv ? "recv" : "echo", strerror(ev.exs_evt_errno));
			return 1;
		}
		if (is_recv && len == 0) { /* EOF */
			if (exs_blocking_close(fds[i])) {
				printf("close %d: %s\n", i, strerror(errno));
				return 1;
			}
			open--;
		} else if (is_recv) {
			msgs++;
			bytes += len;
			if (exs_send(fds[i], b, len, 0, q, (void *)(long)(2 * i), mh)) {
				printf("echo %d: %s\n", i, strerror(errno));
				return 1;
			}
		} else if (exs_recv(fds[i], b, MSG_MAX, 0, q, (void *)(long)(2 * i + 1), mh)) {
			printf("recv %d: %s\n", i, strerror(errno));
			return 1;
		}
	}
	printf("echoed %llu messages, %llu bytes, on %d connections\n", (unsigned long long)msgs,
	       (unsigned long long)bytes, n);
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int n, up = 0, lfd, sig, fd, window;
	double secs = argc >= 6 ? atof(argv[5]) : 0;
	sigset_t set;

	n = argc >= 5 && argc <= 7 ? atoi(argv[4]) : 0;
	window = argc == 7 ? atoi(argv[6]) : n;
	if (n <= 0 || n > MANY_MAX || inet_pton(AF_INET, argv[2], &sa.sin_addr) != 1 || secs < 0 ||
	    (argc >= 6 && secs == 0) || window <= 0 || window > n) {
		fprintf(stderr, "usage: exs_many server|client ADDR PORT N [SECS [WINDOW]] (N <= %d)\n", MANY_MAX);
		return 2;
	}
	sa.sin_port = htons((uint16_t)atoi(argv[3]));
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, NULL);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (exs_init(EXS_VERSION1)) {
		printf("exs_init: %s\n", strerror(errno));
		return 1;
	}
	if (!strcmp(argv[1], "server")) {
		lfd = exs_socket(AF_INET, SOCK_SEQPACKET, 0);
		if (lfd < 0 || exs_bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || exs_listen(lfd, n)) {
			printf("listen: %s\n", strerror(errno));
			return 1;
		}
		printf("listening\n");
		while (up < n && (fd = exs_blocking_accept(lfd, NULL, NULL)) >= 0)
			fds[up++] = fd;
	} else {
		up = connect_all(&sa, n, window);
	}
	printf("ready %d of %d\n", up, n);
	if (secs > 0 && up == n && argv[1][0] == 's')
		return echo_all(n);
	if (secs > 0 && up == n) {
		sigwait(&set, &sig);
		return sig == SIGUSR1 ? ping_all(n, secs) : 1;
	}
	sigwait(&set, &sig);
	return up == n ? 0 : 1;
}
