/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs_ctlraw: speaks exsd's control protocol directly, as a misbehaving
 * libexs could, to check that exsd refuses what it must and survives.
 *
 *   exs_ctlraw foreign-connect ADDR PORT QPN  connect; answer Route with QP QPN
 *                                             (another process's): ConnError EPERM
 *   exs_ctlraw foreign-early ADDR PORT QPN    learn the route from one connect, then
 *                                             offer QP QPN in Connect.early with that
 *                                             route's device, port and INIT: exsd
 *                                             takes it (no Route) and ConnError EPERM
 *   exs_ctlraw own-connect ADDR PORT          the same with a QP of its own, where
 *                                             nothing listens: ConnError, not EPERM
 *   exs_ctlraw foreign-accept ADDR PORT QPN N listen; accept N requests with QP
 *                                             QPN: each ConnError EPERM
 *   exs_ctlraw bind-race ADDR PORT ROUNDS     two clients bind one port at once,
 *                                             ports PORT..: one EADDRINUSE a round
 *   exs_ctlraw bad KIND                       one malformed or misplaced message:
 *       truncated oversized garbage version order hello-twice not-request
 *       empty (each must end the client, with an Error where exsd can send one)
 *       unknown-sock big-addr (an error reply; the client is served on)
 * Prints one line per check, "ok ..." or "FAIL ..."; exit 0 if all ok.
 * EXS_SOCKET names exsd's socket (default EXS_CTL_DEFAULT_SOCKET).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "exs_control.h"
#include "exs_qpattr.h"

#define WAIT_MS 10000
#define RACE_MAX 1000

static int failures;
static uint32_t next_seq;

static void check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(bool ok, const char *fmt, ...)
{
	va_list ap;

	printf("%s ", ok ? "ok  " : "FAIL");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	failures += !ok;
}

/* An errno as the checks print it: -1 is "no answer". */
static const char *err_name(int err)
{
	return err > 0 ? strerror(err) : err < 0 ? "no answer" : "none";
}

static int ctl_open(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *path = getenv("EXS_SOCKET");
	int fd;

	if (!path || !*path)
		path = EXS_CTL_DEFAULT_SOCKET;
	if (strlen(path) >= sizeof(sa.sun_path))
		exit(2);
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		printf("FAIL connect to %s: %s\n", path, strerror(errno));
		exit(1);
	}
	return fd;
}

static void send_raw(int fd, const void *buf, size_t n)
{
	if (send(fd, buf, n, MSG_NOSIGNAL) != (ssize_t)n) {
		printf("FAIL send of %zu bytes: %s\n", n, strerror(errno));
		exit(1);
	}
}

/* Packs m with version `version` into buf (EXS_CTL_MAX_MSG bytes); returns its size. */
static size_t pack(ExsCtl__Msg *m, uint32_t version, uint8_t *buf)
{
	size_t n;

	m->version = version;
	m->seq = ++next_seq;
	n = exs_ctl__msg__get_packed_size(m);
	if (n > EXS_CTL_MAX_MSG) {
		printf("FAIL message of %zu bytes\n", n);
		exit(1);
	}
	return exs_ctl__msg__pack(m, buf);
}

static void send_msg(int fd, ExsCtl__Msg *m)
{
	uint8_t buf[EXS_CTL_MAX_MSG];

	send_raw(fd, buf, pack(m, EXS_CTL_VERSION, buf));
}

/* The next message; NULL with *closed set at EOF, or after WAIT_MS. */
static ExsCtl__Msg *recv_msg(int fd, bool *closed)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	uint8_t buf[EXS_CTL_MAX_MSG];
	ExsCtl__Msg *m;
	ssize_t n;

	*closed = false;
	for (;;) {
		if (poll(&p, 1, WAIT_MS) != 1)
			return NULL;
		n = recv(fd, buf, sizeof(buf), MSG_TRUNC);
		if (n <= 0 || n > (ssize_t)sizeof(buf)) {
			*closed = n <= 0;
			return NULL;
		}
		m = exs_ctl__msg__unpack(NULL, (size_t)n, buf);
		if (!m || m->body_case != EXS_CTL__MSG__BODY_STATS_REQUEST)
			return m;
		exs_ctl__msg__free_unpacked(m, NULL); /* live counters: not asked for here */
	}
}

/* The next message, which must be a `body`: exits otherwise. */
static ExsCtl__Msg *expect_msg(int fd, ExsCtl__Msg__BodyCase body, const char *what)
{
	ExsCtl__Msg *r;
	bool closed;

	r = recv_msg(fd, &closed);
	if (!r || r->body_case != body) {
		printf("FAIL %s: not answered as expected\n", what);
		exit(1);
	}
	return r;
}

static void hello(int fd)
{
	ExsCtl__Msg m = EXS_CTL__MSG__INIT;
	ExsCtl__Hello h = EXS_CTL__HELLO__INIT;

	h.pid = (uint32_t)getpid();
	h.comm = "exs_ctlraw";
	m.body_case = EXS_CTL__MSG__BODY_HELLO;
	m.hello = &h;
	send_msg(fd, &m);
	exs_ctl__msg__free_unpacked(expect_msg(fd, EXS_CTL__MSG__BODY_HELLO_REPLY, "hello"), NULL);
}

static void parse_addr(const char *ip, const char *port, struct sockaddr_in *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)atoi(port));
	if (inet_pton(AF_INET, ip, &sa->sin_addr) != 1) {
		fprintf(stderr, "exs_ctlraw: bad address %s\n", ip);
		exit(2);
	}
}

static void send_bind(int fd, uint32_t sock, struct sockaddr_in *sa)
{
	ExsCtl__Msg m = EXS_CTL__MSG__INIT;
	ExsCtl__Bind b = EXS_CTL__BIND__INIT;

	b.sock = sock;
	b.addr.data = (uint8_t *)sa;
	b.addr.len = sizeof(*sa);
	b.type = SOCK_SEQPACKET;
	m.body_case = EXS_CTL__MSG__BODY_BIND;
	m.bind = &b;
	send_msg(fd, &m);
}

static void send_qp_ready(int fd, uint32_t sock, uint32_t conn, uint32_t qpn)
{
	ExsCtl__Msg m = EXS_CTL__MSG__INIT;
	ExsCtl__QpReady q = EXS_CTL__QP_READY__INIT;
	ExsCtl__Setup su = EXS_CTL__SETUP__INIT;

	q.sock = sock;
	q.qpn = qpn;
	q.conn = conn;
	su.credits = 8;
	su.sp_max = 4096;
	q.setup = conn ? &su : NULL;
	m.body_case = EXS_CTL__MSG__BODY_QP_READY;
	m.qp_ready = &q;
	send_msg(fd, &m);
}

/*
 * Reads until an Error or a ConnError (its errno), skipping other events;
 * -1 when none came. *closed: exsd closed the connection after it.
 */
static int wait_error(int fd, bool *closed, uint32_t *sock)
{
	ExsCtl__Msg *m;
	int err = -1;

	while ((m = recv_msg(fd, closed))) {
		if (m->body_case == EXS_CTL__MSG__BODY_ERROR)
			err = m->error->err;
		else if (m->body_case == EXS_CTL__MSG__BODY_CONN_ERROR) {
			err = m->conn_error->err;
			if (sock)
				*sock = m->conn_error->sock;
		}
		exs_ctl__msg__free_unpacked(m, NULL);
		if (err >= 0)
			break;
	}
	return err;
}

/* Whether exsd closes the connection within WAIT_MS (nothing else may come). */
static bool wait_closed(int fd)
{
	bool closed;
	ExsCtl__Msg *m;

	while ((m = recv_msg(fd, &closed)))
		exs_ctl__msg__free_unpacked(m, NULL);
	return closed;
}

/* ---- QP ownership */

/* A QP of our own on `device`, in INIT as exsd asked; its number. */
static uint32_t own_qp(const char *device, const ExsCtl__QpAttr *init)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC };
	struct ibv_context *ctx = NULL;
	struct ibv_qp_attr a;
	struct ibv_pd *pd;
	struct ibv_qp *qp;
	int mask;

	for (int i = 0; list && list[i] && !ctx; i++)
		if (!strcmp(ibv_get_device_name(list[i]), device))
			ctx = ibv_open_device(list[i]);
	pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 1;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	qa.send_cq = qa.recv_cq = ctx ? ibv_create_cq(ctx, 4, NULL, NULL, 0) : NULL;
	qp = pd && qa.send_cq ? ibv_create_qp(pd, &qa) : NULL;
	if (!qp || !init || exs_qpattr_to_ibv(init, &a, &mask) || ibv_modify_qp(qp, &a, mask)) {
		printf("FAIL a QP of our own on %s: %s\n", device, strerror(errno));
		exit(1);
	}
	return qp->qp_num;	/* kept until exit */
}

/* A Connect of SOCK_SEQPACKET socket `sock` to `sa`, in m */
static void connect_msg(ExsCtl__Msg *m, ExsCtl__Connect *c, ExsCtl__Setup *su,
			struct sockaddr_in *sa, uint32_t sock)
{
	c->sock = sock;
	c->addr.data = (uint8_t *)sa;
	c->addr.len = sizeof(*sa);
	su->credits = 8;
	su->sp_max = 4096;
	c->setup = su;
	c->type = SOCK_SEQPACKET;
	m->body_case = EXS_CTL__MSG__BODY_CONNECT;
	m->connect = c;
}

static int qp_connect(const char *ip, const char *port, long qpn)
{
	ExsCtl__Msg m = EXS_CTL__MSG__INIT, *r;
	ExsCtl__Connect c = EXS_CTL__CONNECT__INIT;
	ExsCtl__Setup su = EXS_CTL__SETUP__INIT;
	struct sockaddr_in sa;
	uint32_t sock = 7;
	bool closed;
	int fd = ctl_open(), err;

	hello(fd);
	parse_addr(ip, port, &sa);
	connect_msg(&m, &c, &su, &sa, sock);
	send_msg(fd, &m);
	r = expect_msg(fd, EXS_CTL__MSG__BODY_ROUTE, "connect");
	if (qpn < 0)
		qpn = own_qp(r->route->device, r->route->init);
	printf("route on %s; answering with QP %ld\n", r->route->device, qpn);
	exs_ctl__msg__free_unpacked(r, NULL);
	send_qp_ready(fd, sock, 0, (uint32_t)qpn);
	err = wait_error(fd, &closed, NULL);
	close(fd);
	return err;
}

/* Connect.early naming `qpn` on the device, port and INIT of a route
 * learnt first: the first message after it must be a ConnError, not a
 * Route; its errno is returned. */
static int early_connect(const char *ip, const char *port, uint32_t qpn)
{
	ExsCtl__Msg m = EXS_CTL__MSG__INIT, *r, *route;
	ExsCtl__Connect c = EXS_CTL__CONNECT__INIT;
	ExsCtl__Setup su = EXS_CTL__SETUP__INIT;
	ExsCtl__EarlyQp eq = EXS_CTL__EARLY_QP__INIT;
	struct sockaddr_in sa;
	bool closed;
	int fd = ctl_open(), err = -1;

	hello(fd);
	parse_addr(ip, port, &sa);
	connect_msg(&m, &c, &su, &sa, 7);
	send_msg(fd, &m);
	route = expect_msg(fd, EXS_CTL__MSG__BODY_ROUTE, "connect");
	close(fd); /* that connect ends with its client */
	fd = ctl_open();
	hello(fd);
	eq.device = route->route->device;
	eq.port_num = route->route->port_num;
	eq.qpn = qpn;
	eq.init = route->route->init;
	c.sock = 8;
	c.early = &eq;
	send_msg(fd, &m);
	printf("route on %s port %u; offering QP %u early\n", eq.device, eq.port_num, qpn);
	r = recv_msg(fd, &closed);
	if (r && r->body_case == EXS_CTL__MSG__BODY_CONN_ERROR)
		err = r->conn_error->err;
	check(r && r->body_case != EXS_CTL__MSG__BODY_ROUTE,
	      "foreign-early: exsd took the early QP (no Route): message %d", r ? (int)r->body_case : -1);
	if (r)
		exs_ctl__msg__free_unpacked(r, NULL);
	exs_ctl__msg__free_unpacked(route, NULL);
	close(fd);
	return err;
}

static void foreign_accept(const char *ip, const char *port, uint32_t qpn, int n)
{
	ExsCtl__Msg m = EXS_CTL__MSG__INIT, *r;
	ExsCtl__Listen l = EXS_CTL__LISTEN__INIT;
	struct sockaddr_in sa;
	bool closed;
	int fd = ctl_open();

	hello(fd);
	parse_addr(ip, port, &sa);
	send_bind(fd, 1, &sa);
	exs_ctl__msg__free_unpacked(expect_msg(fd, EXS_CTL__MSG__BODY_BIND_REPLY, "bind"), NULL);
	l.sock = 1;
	l.backlog = 4;
	m.body_case = EXS_CTL__MSG__BODY_LISTEN;
	m.listen = &l;
	send_msg(fd, &m);
	exs_ctl__msg__free_unpacked(expect_msg(fd, EXS_CTL__MSG__BODY_OK, "listen"), NULL);
	printf("listening\n");
	fflush(stdout);
	for (int i = 0; i < n; i++) {
		uint32_t sock = 0, conn;
		int err;

		r = expect_msg(fd, EXS_CTL__MSG__BODY_CONN_REQUEST, "a connection request");
		conn = r->conn_request->conn;
		exs_ctl__msg__free_unpacked(r, NULL);
		send_qp_ready(fd, 100 + (uint32_t)i, conn, qpn);
		err = wait_error(fd, &closed, &sock);
		check(err == EPERM && sock == 100 + (uint32_t)i,
		      "foreign-accept: request %d accepted with another process's QP: ConnError %s",
		      i + 1, err_name(err));
	}
	close(fd);
}

/* ---- two clients, one port */

static int bind_result(int fd)
{
	ExsCtl__Msg *r;
	bool closed;
	int err;

	r = recv_msg(fd, &closed);
	if (!r)
		return -1;
	err = r->body_case == EXS_CTL__MSG__BODY_BIND_REPLY ? 0
	      : r->body_case == EXS_CTL__MSG__BODY_ERROR ? r->error->err : -1;
	exs_ctl__msg__free_unpacked(r, NULL);
	return err;
}

static void bind_race(const char *ip, const char *port, int rounds)
{
	int fd[2] = { ctl_open(), ctl_open() }, wins[2] = { 0, 0 }, good = 0;
	struct sockaddr_in sa;

	hello(fd[0]);
	hello(fd[1]);
	parse_addr(ip, port, &sa);
	for (int i = 0; i < rounds; i++) {
		int first = i & 1, err[2];

		/* both requests are on their way before exsd answers either */
		send_bind(fd[first], (uint32_t)i + 1, &sa);
		send_bind(fd[!first], (uint32_t)i + 1, &sa);
		err[0] = bind_result(fd[0]);
		err[1] = bind_result(fd[1]);
		if ((!err[0] && err[1] == EADDRINUSE) || (err[0] == EADDRINUSE && !err[1])) {
			good++;
			wins[err[0] ? 1 : 0]++;
		} else {
			printf("round %d, port %u: results %d and %d\n", i, ntohs(sa.sin_port), err[0], err[1]);
		}
		sa.sin_port = htons((uint16_t)(ntohs(sa.sin_port) + 1));
	}
	printf("%s bind-race: %d of %d rounds had one bind and one EADDRINUSE (wins %d and %d)\n",
	       good == rounds ? "ok  " : "FAIL", good, rounds, wins[0], wins[1]);
	failures += good != rounds;
	close(fd[0]);
	close(fd[1]);
}

/* ---- malformed and misplaced messages */

static void hello_msg(ExsCtl__Msg *m, ExsCtl__Hello *h, char *comm)
{
	exs_ctl__msg__init(m);
	exs_ctl__hello__init(h);
	h->comm = comm;
	m->body_case = EXS_CTL__MSG__BODY_HELLO;
	m->hello = h;
}

/* Sends one bad message of `kind`; returns the errno expected, 0 for none. */
static int send_bad(int fd, const char *kind, bool *dropped)
{
	uint8_t buf[EXS_CTL_MAX_MSG + 512];
	char comm[201];
	ExsCtl__Msg m;
	ExsCtl__Hello h;
	size_t n;

	memset(comm, 'x', sizeof(comm) - 1);
	comm[sizeof(comm) - 1] = 0;
	hello_msg(&m, &h, comm);
	*dropped = true;
	if (!strcmp(kind, "truncated")) {
		n = pack(&m, EXS_CTL_VERSION, buf);
		send_raw(fd, buf, n / 2); /* cut inside the comm string */
		return EBADMSG;
	}
	if (!strcmp(kind, "oversized")) {
		memset(buf, 0, sizeof(buf));
		n = pack(&m, EXS_CTL_VERSION, buf);
		send_raw(fd, buf, EXS_CTL_MAX_MSG + 100);
		return EMSGSIZE;
	}
	if (!strcmp(kind, "garbage")) {
		for (n = 0; n < 300; n++)
			buf[n] = (uint8_t)(0xff - n % 7);
		send_raw(fd, buf, 300);
		return EBADMSG;
	}
	if (!strcmp(kind, "version")) {
		send_raw(fd, buf, pack(&m, EXS_CTL_VERSION + 1, buf));
		return EPROTONOSUPPORT;
	}
	if (!strcmp(kind, "empty")) {
		send_raw(fd, buf, 0);
		return 0;
	}
	if (!strcmp(kind, "order")) {
		send_qp_ready(fd, 5, 0, 1234);
		return EPROTO;
	}
	if (!strcmp(kind, "not-request")) {
		ExsCtl__HelloReply hr = EXS_CTL__HELLO_REPLY__INIT;

		hello(fd);
		m.body_case = EXS_CTL__MSG__BODY_HELLO_REPLY;
		m.hello_reply = &hr;
		send_msg(fd, &m);
		return EOPNOTSUPP;
	}
	hello(fd);
	if (!strcmp(kind, "hello-twice")) {
		send_msg(fd, &m);
		return EPROTO;
	}
	*dropped = false;
	if (!strcmp(kind, "unknown-sock")) {
		send_qp_ready(fd, 4242, 0, 1234);
		return ECONNABORTED;
	}
	if (!strcmp(kind, "big-addr")) {
		ExsCtl__Bind b = EXS_CTL__BIND__INIT;

		memset(buf, 2, 1000);
		b.sock = 3;
		b.addr.data = buf;
		b.addr.len = 1000;
		m.body_case = EXS_CTL__MSG__BODY_BIND;
		m.bind = &b;
		send_msg(fd, &m);
		return EINVAL;
	}
	fprintf(stderr, "exs_ctlraw: unknown kind %s\n", kind);
	exit(2);
}

static void bad(const char *kind)
{
	int fd = ctl_open(), want, err;
	bool dropped, closed = false;
	char what[64];

	want = send_bad(fd, kind, &dropped);
	snprintf(what, sizeof(what), "bad %s", kind);
	err = want ? wait_error(fd, &closed, NULL) : 0;
	check(err == want, "%s: exsd answered %s (expected %s)", what, err_name(err), err_name(want));
	if (dropped) {
		check(closed || wait_closed(fd), "%s: exsd closed the connection", what);
	} else {
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

		/* the client is still served: a bind of an ephemeral port works */
		send_bind(fd, 9, &sa);
		err = bind_result(fd);
		check(err >= 0, "%s: still served afterwards (a Bind answered: %s)", what,
		      err ? err_name(err) : "bound");
	}
	close(fd);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	int err;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(mode, "foreign-connect") && argc == 5) {
		err = qp_connect(argv[2], argv[3], strtol(argv[4], NULL, 0));
		check(err == EPERM, "%s: connecting with a QP not our own: ConnError %s",
		      mode, err_name(err));
	} else if (!strcmp(mode, "foreign-early") && argc == 5) {
		err = early_connect(argv[2], argv[3], (uint32_t)strtoul(argv[4], NULL, 0));
		check(err == EPERM, "%s: offering a QP not our own early: ConnError %s", mode,
		      err_name(err));
	} else if (!strcmp(mode, "own-connect") && argc == 4) {
		err = qp_connect(argv[2], argv[3], -1);
		check(err > 0 && err != EPERM, "%s: a QP of our own passes; nobody listens: ConnError %s",
		      mode, err_name(err));
	} else if (!strcmp(mode, "foreign-accept") && argc == 6) {
		foreign_accept(argv[2], argv[3], (uint32_t)strtoul(argv[4], NULL, 0), atoi(argv[5]));
	} else if (!strcmp(mode, "bind-race") && argc == 5 && atoi(argv[4]) > 0 &&
		   atoi(argv[4]) <= RACE_MAX) {
		bind_race(argv[2], argv[3], atoi(argv[4]));
	} else if (!strcmp(mode, "bad") && argc == 3) {
		bad(argv[2]);
	} else {
		fprintf(stderr, "usage: see the head of exs_ctlraw.c\n");
		return 2;
	}
	return failures ? 1 : 0;
}
