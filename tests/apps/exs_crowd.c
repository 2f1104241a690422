/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs_crowd: many control connections, or much traffic on one, to check
 * how exsd shares itself out. Speaks the control protocol directly.
 *
 *   exs_crowd idle N SECS    N connections that never say Hello: prints
 *                            "kept K of N" (those exsd did not close at
 *                            once), then "all closed after MS ms" once exsd
 *                            dropped the rest, or "K still open" after SECS
 *   exs_crowd hello N        connections with a Hello each until exsd stops
 *                            answering (3 s) or N: "served K of N", then held
 *                            until SIGTERM
 *   exs_crowd flood N        one client sends up to N config queries without
 *                            reading, until exsd stops taking them for 1 s:
 *                            "sent S"; then reads: "answered A of S in order"
 *                            (exit 0 if A = S and exsd kept the client)
 *   exs_crowd stall N        the same, never reading: "dropped after MS ms"
 *                            once exsd closes the connection (60 s at most)
 *   exs_crowd ports ADDR N   one client binds sockets to ADDR port 0 until
 *                            exsd refuses or N: "bound K, then error E (text)"
 *                            or "bound K", then holds them until SIGTERM
 * EXS_SOCKET names exsd's socket (default EXS_CTL_DEFAULT_SOCKET).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "exs_control.h"

#define CROWD_MAX 100000

static uint64_t ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A connected control socket, or -1 with errno. */
static int ctl_open(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *path = getenv("EXS_SOCKET");
	int fd;

	if (!path || !*path)
		path = EXS_CTL_DEFAULT_SOCKET;
	if (strlen(path) >= sizeof(sa.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		int err = errno;

		close(fd);
		errno = err;
		return -1;
	}
	return fd;
}

/* 1 sent, 0 the socket is full, -1 error. */
static int send_msg(int fd, ExsCtl__Msg *m, uint32_t seq)
{
	uint8_t buf[EXS_CTL_MAX_MSG];
	size_t n;

	m->version = EXS_CTL_VERSION;
	m->seq = seq;
	n = exs_ctl__msg__pack(m, buf);
	if (send(fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)n)
		return 1;
	return errno == EAGAIN ? 0 : -1;
}

/* The next message within ms; NULL at EOF (*closed) or time-out. */
static ExsCtl__Msg *recv_msg(int fd, int ms, bool *closed)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	uint8_t buf[EXS_CTL_MAX_MSG];
	ssize_t n;

	*closed = false;
	if (poll(&p, 1, ms) != 1)
		return NULL;
	n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
	if (n <= 0) {
		*closed = n == 0 || errno != EAGAIN;
		return NULL;
	}
	return exs_ctl__msg__unpack(NULL, (size_t)n, buf);
}

static bool hello(int fd, int ms)
{
	ExsCtl__Msg m = EXS_CTL__MSG__INIT, *r;
	ExsCtl__Hello h = EXS_CTL__HELLO__INIT;
	bool closed, ok;

	h.pid = (uint32_t)getpid();
	h.comm = "exs_crowd";
	m.body_case = EXS_CTL__MSG__BODY_HELLO;
	m.hello = &h;
	if (send_msg(fd, &m, 1) != 1)
		return false;
	r = recv_msg(fd, ms, &closed);
	ok = r && r->body_case == EXS_CTL__MSG__BODY_HELLO_REPLY;
	if (r && !ok && r->body_case == EXS_CTL__MSG__BODY_ERROR)
		printf("refused: %s (errno %u)\n", r->error->text, r->error->err);
	if (r)
		exs_ctl__msg__free_unpacked(r, NULL);
	return ok;
}

/* Whether exsd has closed fd (reading and dropping what it sent). */
static bool closed_by_exsd(int fd)
{
	bool closed;
	ExsCtl__Msg *m;

	while ((m = recv_msg(fd, 0, &closed)))
		exs_ctl__msg__free_unpacked(m, NULL);
	return closed;
}

static int idle(int n, int secs)
{
	int *fds = calloc((size_t)n, sizeof(int)), kept = 0, open = 0;
	uint64_t t0;

	if (!fds)
		return 1;
	for (int i = 0; i < n; i++)
		if ((fds[i] = ctl_open()) < 0) {
			printf("connect %d: %s\n", i, strerror(errno));
			n = i;
			break;
		}
	t0 = ms_now();
	usleep(300 * 1000);
	for (int i = 0; i < n; i++)
		if (!closed_by_exsd(fds[i]))
			kept++;
	printf("kept %d of %d\n", kept, n);
	fflush(stdout);
	while (ms_now() - t0 < (uint64_t)secs * 1000) {
		open = 0;
		for (int i = 0; i < n; i++)
			if (fds[i] >= 0 && closed_by_exsd(fds[i])) {
				close(fds[i]);
				fds[i] = -1;
			} else if (fds[i] >= 0) {
				open++;
			}
		if (!open) {
			printf("all closed after %llu ms\n", (unsigned long long)(ms_now() - t0));
			return 0;
		}
		usleep(50 * 1000);
	}
	printf("%d still open after %d s\n", open, secs);
	return 1;
}

static void hold(void)
{
	sigset_t set;
	int sig;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	fflush(stdout);
	sigwait(&set, &sig);
}

static int hello_many(int n)
{
	int served = 0;

	for (; served < n; served++) {
		int fd = ctl_open();

		if (fd < 0) {
			printf("connect %d: %s\n", served, strerror(errno));
			break;
		}
		if (!hello(fd, 3000)) {
			printf("no hello reply for connection %d\n", served);
			close(fd);
			break;
		}
	}
	printf("served %d of %d\n", served, n);
	hold();
	return 0;
}

static int ports(const char *ip, unsigned n)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int fd = ctl_open(), err = 0;
	unsigned bound = 0;

	if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1)
		return 2;
	if (fd < 0 || !hello(fd, 3000)) {
		printf("no client\n");
		return 1;
	}
	while (bound < n) {
		ExsCtl__Msg m = EXS_CTL__MSG__INIT, *r;
		ExsCtl__Bind b = EXS_CTL__BIND__INIT;
		bool closed;

		b.sock = bound + 100;
		b.addr.data = (uint8_t *)&sa;
		b.addr.len = sizeof(sa);
		b.type = SOCK_SEQPACKET;
		m.body_case = EXS_CTL__MSG__BODY_BIND;
		m.bind = &b;
		if (send_msg(fd, &m, bound + 2) != 1 || !(r = recv_msg(fd, 5000, &closed))) {
			printf("no answer to bind %u\n", bound);
			return 1;
		}
		err = r->body_case == EXS_CTL__MSG__BODY_BIND_REPLY ? 0
		      : r->body_case == EXS_CTL__MSG__BODY_ERROR ? (int)r->error->err : -1;
		exs_ctl__msg__free_unpacked(r, NULL);
		if (err)
			break;
		bound++;
	}
	if (err)
		printf("bound %u, then error %d (%s)\n", bound, err, err > 0 ? strerror(err) : "?");
	else
		printf("bound %u\n", bound);
	hold();
	return 0;
}

/* Config queries without reading, until exsd has taken none for 1 s. */
static unsigned flood(int fd, unsigned n)
{
	ExsCtl__Msg m = EXS_CTL__MSG__INIT;
	ExsCtl__Query q = EXS_CTL__QUERY__INIT;
	uint64_t last = ms_now();
	unsigned sent = 0;

	q.what = EXS_CTL__QUERY__WHAT__CONFIG;
	m.body_case = EXS_CTL__MSG__BODY_QUERY;
	m.query = &q;
	while (sent < n && ms_now() - last < 1000) {
		int r = send_msg(fd, &m, sent + 2);

		if (r < 0) {
			printf("send %u: %s\n", sent, strerror(errno));
			break;
		}
		if (r) {
			sent++;
			last = ms_now();
		} else {
			usleep(10 * 1000);
		}
	}
	printf("sent %u\n", sent);
	fflush(stdout);
	return sent;
}

static int flood_read(unsigned n)
{
	int fd = ctl_open();
	unsigned sent, answered = 0;
	bool closed = false, in_order = true;
	ExsCtl__Msg *r;

	if (fd < 0 || !hello(fd, 3000)) {
		printf("no client\n");
		return 1;
	}
	sent = flood(fd, n);
	while (answered < sent && (r = recv_msg(fd, 5000, &closed))) {
		if (r->body_case != EXS_CTL__MSG__BODY_QUERY_REPLY || r->seq != answered + 2)
			in_order = false;
		answered++;
		exs_ctl__msg__free_unpacked(r, NULL);
	}
	if (answered == sent)
		closed = closed_by_exsd(fd);
	printf("answered %u of %u%s%s\n", answered, sent, in_order ? " in order" : " out of order",
	       closed ? ", then closed by exsd" : "");
	return answered == sent && in_order && !closed ? 0 : 1;
}

static int stall(unsigned n)
{
	int fd = ctl_open();
	uint64_t t0;

	if (fd < 0 || !hello(fd, 3000)) {
		printf("no client\n");
		return 1;
	}
	flood(fd, n);
	t0 = ms_now();
	while (ms_now() - t0 < 60000) {
		struct pollfd p = { .fd = fd, .events = 0 };

		/* POLLHUP: exsd shut the connection down; nothing is read */
		if (poll(&p, 1, 50) == 1 && (p.revents & POLLHUP)) {
			printf("dropped after %llu ms\n", (unsigned long long)(ms_now() - t0));
			return 0;
		}
	}
	printf("not dropped in 60 s\n");
	return 1;
}

/* argv[i] as a count 1..CROWD_MAX, or 0 */
static unsigned count(int argc, char **argv, int i)
{
	long n = i < argc ? strtol(argv[i], NULL, 10) : 0;

	return n > 0 && n <= CROWD_MAX ? (unsigned)n : 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	unsigned n = count(argc, argv, 2);

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(mode, "idle") && argc == 4 && n)
		return idle((int)n, atoi(argv[3]));
	if (!strcmp(mode, "hello") && argc == 3 && n)
		return hello_many((int)n);
	if (!strcmp(mode, "flood") && argc == 3 && n)
		return flood_read(n);
	if (!strcmp(mode, "stall") && argc == 3 && n)
		return stall(n);
	if (!strcmp(mode, "ports") && argc == 4 && (n = count(argc, argv, 3)))
		return ports(argv[2], n);
	fprintf(stderr, "usage: exs_crowd idle N SECS | hello N | flood N | stall N | ports ADDR N\n");
	return 2;
}
