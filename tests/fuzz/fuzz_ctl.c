/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * libFuzzer target: exsd's control protocol end to end. exsd's real ctl.c,
 * cm.c, observe.c, negotiate.c and config.c run in this process on their
 * libevent loop and listen on a real Unix socket; the input is a script of
 * clients connecting (with a uid of the script's choice: SO_PEERCRED is
 * rewritten), sending raw frames or well-formed messages of every type,
 * stopping to read, leaving, rdmacm events that the fake rdmacm
 * (fake_rdmacm.c) only delivers where a kernel could, and an endpoint's
 * deadline passing.
 *
 * After each input every client leaves; then exsd must hold no client, no
 * endpoint, no rdmacm id, and still answer a fresh client's Hello with its
 * HelloReply. accept4 may fail as the kernel lets it when descriptors or
 * memory run out (the input says when); exsd then stops accepting for
 * EXSD_ACCEPT_RETRY_MS, and that time passes when the input says so or
 * when the input ends. Connections made meanwhile wait in the listen
 * backlog, each to be accepted and read to its end: "settled" is when no
 * client, no waiting connection and no pause are left. LeakSanitizer
 * (libFuzzer -detect_leaks) checks the memory.
 * Not faked: everything in exsd but its QP-owner query (qpown.c, which asks
 * the kernel's RDMA netlink): qp_check_owner() here says yes or no by the
 * QP number.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "exsd.h"
#include "fake_rdmacm.h"
#include "fuzz_input.h"

#define MAX_CLIENTS 4

struct fclient {
	int fd;
	bool reading;
	uint32_t conns[4]; /* ConnRequest.conn seen, for QpReady/Reject */
	unsigned nconns;
};

static struct fclient cl[MAX_CLIENTS];
static uid_t next_uid;
static int accept_errno; /* the next accept4 fails with it */
static char sock_path[108];

/* ---- what exsd gets from outside this harness */

int __real_getsockopt(int fd, int level, int name, void *val, socklen_t *len);
int __wrap_getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	int ret = __real_getsockopt(fd, level, name, val, len);

	if (!ret && level == SOL_SOCKET && name == SO_PEERCRED)
		((struct ucred *)val)->uid = next_uid;
	return ret;
}

int __real_accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags);
int __wrap_accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	if (accept_errno) {
		errno = accept_errno;
		accept_errno = 0;
		return -1;
	}
	return __real_accept4(fd, sa, len, flags);
}

/* QPs whose number is a multiple of 4 are refused; of those, one of 8 as
 * a tracker that cannot be asked (-EIO, never rebuilt) */
static int owner_check(uint32_t qpn)
{
	return qpn % 4 ? 0 : qpn % 32 ? -EPERM : -EIO;
}

int qp_check_owner(struct client *c, uint32_t sock, struct rdma_cm_id *id, uint32_t qpn, bool retry)
{
	(void)c;
	(void)sock;
	(void)id;
	(void)retry;
	return owner_check(qpn);
}

int qp_check_owner_on(struct client *c, uint32_t sock, const char *dev, int index, uint32_t port,
		      uint32_t qpn, bool retry)
{
	(void)c;
	(void)sock;
	(void)dev;
	(void)index;
	(void)port;
	(void)retry;
	return owner_check(qpn);
}

/* ---- driving exsd */

static void drain(struct fclient *c)
{
	uint8_t buf[EXS_CTL_MAX_MSG];
	ssize_t n;

	while (c->fd >= 0 && (n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
		ExsCtl__Msg *m = exs_ctl__msg__unpack(NULL, (size_t)n, buf);

		if (!m)
			abort(); /* exsd sent something that does not decode */
		if (m->body_case == EXS_CTL__MSG__BODY_CONN_REQUEST && c->nconns < 4)
			c->conns[c->nconns++] = m->conn_request->conn;
		exs_ctl__msg__free_unpacked(m, NULL);
	}
}

static void pump(void)
{
	for (int round = 0; round < 2; round++) {
		event_base_loop(exsd.base, EVLOOP_NONBLOCK);
		for (int i = 0; i < MAX_CLIENTS; i++)
			if (cl[i].reading)
				drain(&cl[i]);
	}
}

/* Whether a connection waits in exsd's listen backlog. */
static bool backlog_waits(void)
{
	struct pollfd p = { .fd = exsd.listen_fd, .events = POLLIN };

	return poll(&p, 1, 0) == 1;
}

static void dump_state(const char *why)
{
	fprintf(stderr, "%s: clients %u established %u ids %u, accept %s, backlog %s\n", why,
		exsd.nclients, exsd.nestablished, fake_live_ids,
		exsd.accept_paused ? "paused" : "on", backlog_waits() ? "waiting" : "empty");
	for (struct client *c = exsd.clients; c; c = c->next) {
		fprintf(stderr, "  client %u uid %u hello %d paused %d failed %d outq %zu eps %u\n",
			c->id, (unsigned)c->uid, c->hello, c->paused, c->failed, c->outq_bytes,
			c->neps);
		for (struct ep *e = c->eps; e; e = e->next)
			fprintf(stderr, "    sock %u %s\n", e->sock, ep_state_name(e->state));
	}
}

/* With every client gone, exsd ends what they left: time passes for a
 * paused accept, waiting connections are accepted, each is read to its
 * end (one message per turn of the loop). Bounded: a socket holds at most
 * a few thousand messages. */
static void settle(void)
{
	for (int turn = 0; turn < 20000; turn++) {
		if (!exsd.clients && !exsd.accept_paused && !backlog_waits())
			return;
		if (exsd.accept_paused)
			event_active(exsd.accept_retry, EV_TIMEOUT, 1);
		event_base_loop(exsd.base, EVLOOP_NONBLOCK);
	}
	dump_state("exsd did not settle");
	abort();
}

static int client_open(uid_t uid)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		abort();
	strcpy(sa.sun_path, sock_path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
		abort();
	next_uid = uid;
	pump(); /* exsd accepts it now, under this uid */
	return fd;
}

static void client_close(struct fclient *c)
{
	if (c->fd >= 0)
		close(c->fd);
	*c = (struct fclient){ .fd = -1 };
}

static void send_msg(struct fclient *c, ExsCtl__Msg *m)
{
	uint8_t buf[EXS_CTL_MAX_MSG];
	size_t n = exs_ctl__msg__get_packed_size(m);

	if (n > sizeof(buf))
		return;
	exs_ctl__msg__pack(m, buf);
	(void)send(c->fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
}

static void addr_of(struct in *in, struct sockaddr_in6 *ss, ProtobufCBinaryData *b)
{
	static const uint16_t ports[] = { 0, 7471, 80, 49152, 65535 };
	uint8_t k = u8(in);
	uint16_t port = k & 8 ? (uint16_t)u16(in) : ports[(k >> 4) % 5];

	memset(ss, 0, sizeof(*ss));
	if (k & 1) {
		ss->sin6_family = AF_INET6;
		ss->sin6_port = htons(port);
		ss->sin6_addr.s6_addr[15] = 1;
		b->len = sizeof(struct sockaddr_in6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)ss;

		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		s4->sin_addr.s_addr = htonl(0xc6120001);
		b->len = sizeof(*s4);
	}
	if (k & 2) /* a wrong length or family now and then */
		b->len = u8(in) % sizeof(*ss);
	if (k & 4)
		ss->sin6_family = u8(in);
	b->data = (uint8_t *)ss;
}

static ExsCtl__Setup *setup_of(struct in *in, ExsCtl__Setup *s)
{
	uint8_t k = u8(in);

	if (k & 1)
		return NULL;
	exs_ctl__setup__init(s);
	s->credits = k & 2 ? u16(in) : 1 + u8(in) % 64;
	s->sp_max = k & 4 ? u32(in) : 0;
	s->stream_buf = k & 8 ? u32(in) : 0;
	return s;
}

/* One well-formed message of a type the script picks. */
static void structured(struct fclient *c, struct in *in)
{
	ExsCtl__Msg m;
	ExsCtl__Hello hello = EXS_CTL__HELLO__INIT;
	ExsCtl__Bind bind = EXS_CTL__BIND__INIT;
	ExsCtl__Listen listen_ = EXS_CTL__LISTEN__INIT;
	ExsCtl__Connect conn = EXS_CTL__CONNECT__INIT;
	ExsCtl__EarlyQp early = EXS_CTL__EARLY_QP__INIT;
	ExsCtl__QpAttr einit = EXS_CTL__QP_ATTR__INIT;
	ExsCtl__QpReady qr = EXS_CTL__QP_READY__INIT;
	ExsCtl__Reject rej = EXS_CTL__REJECT__INIT;
	ExsCtl__Close cls = EXS_CTL__CLOSE__INIT;
	ExsCtl__Query q = EXS_CTL__QUERY__INIT;
	ExsCtl__StatsReply sr = EXS_CTL__STATS_REPLY__INIT;
	ExsCtl__SockStats ss[3], *ssp[3] = { &ss[0], &ss[1], &ss[2] };
	ExsCtl__Monitor mon = EXS_CTL__MONITOR__INIT;
	ExsCtl__Disconnect dis = EXS_CTL__DISCONNECT__INIT;
	ExsCtl__Ok ok = EXS_CTL__OK__INIT;
	ExsCtl__Adopt adopt = EXS_CTL__ADOPT__INIT;
	struct sockaddr_in6 sa2;
	ExsCtl__Setup setup;
	struct sockaddr_in6 sa;
	uint8_t k = u8(in), v = u8(in);

	out_msg_init(&m);
	if (v & 0x80)
		m.version = v & 0x7f;
	m.seq = u8(in);
	switch (k % 13) {
	case 0:
		hello.observer = v & 1;
		hello.rebuild = v & 2; /* exsd asks it for another refused QP */
		hello.pid = u32(in);
		hello.comm = "fuzz";
		m.body_case = EXS_CTL__MSG__BODY_HELLO;
		m.hello = &hello;
		break;
	case 1:
		bind.sock = u8(in) % 8;
		addr_of(in, &sa, &bind.addr);
		bind.type = v & 1 ? SOCK_STREAM : v & 2 ? u8(in) : SOCK_SEQPACKET;
		m.body_case = EXS_CTL__MSG__BODY_BIND;
		m.bind = &bind;
		break;
	case 2:
		listen_.sock = u8(in) % 8;
		listen_.backlog = v & 1 ? u32(in) : u8(in);
		m.body_case = EXS_CTL__MSG__BODY_LISTEN;
		m.listen = &listen_;
		break;
	case 3:
		conn.sock = u8(in) % 8;
		addr_of(in, &sa, &conn.addr);
		conn.setup = setup_of(in, &setup);
		conn.timeout_ms = v & 1 ? u32(in) : 0;
		conn.type = v & 2 ? SOCK_STREAM : SOCK_SEQPACKET;
		if (v & 4) { /* Connect.early: the fake's own INIT, or one field off */
			uint8_t e = u8(in);

			early.device = e & 1 ? "siw0" : e & 2 ? "mlx5_9" : "rxe0";
			early.port_num = e & 4 ? 2 : 1;
			early.qpn = u32(in);
			early.init = e & 8 ? NULL : &einit;
			einit.mask = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
			einit.qp_state = IBV_QPS_INIT;
			einit.port_num = 1;
			einit.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
			einit.pkey_index = e & 16 ? 1 : 0;
			conn.early = &early;
		}
		m.body_case = EXS_CTL__MSG__BODY_CONNECT;
		m.connect = &conn;
		break;
	case 4: {
		uint8_t w = u8(in);

		qr.sock = u8(in) % 8;
		qr.qpn = u32(in);
		if (w & 1)
			qr.conn = c->nconns ? c->conns[(w >> 1) % c->nconns] : u8(in);
		qr.setup = setup_of(in, &setup);
		m.body_case = EXS_CTL__MSG__BODY_QP_READY;
		m.qp_ready = &qr;
		break;
	}
	case 5:
		rej.conn = c->nconns && (v & 1) ? c->conns[u8(in) % c->nconns] : u8(in);
		rej.err = (int32_t)u32(in);
		m.body_case = EXS_CTL__MSG__BODY_REJECT;
		m.reject = &rej;
		break;
	case 6:
		cls.sock = u8(in) % 8;
		m.body_case = EXS_CTL__MSG__BODY_CLOSE;
		m.close = &cls;
		break;
	case 7:
		q.what = u8(in) % 8;
		m.body_case = EXS_CTL__MSG__BODY_QUERY;
		m.query = &q;
		break;
	case 8:
		sr.n_socks = v % 4;
		for (size_t i = 0; i < sr.n_socks; i++) {
			exs_ctl__sock_stats__init(&ss[i]);
			ss[i].sock = u8(in) % 8;
			ss[i].send_credits_used = u32(in);
			ss[i].bytes_sent = (uint64_t)u32(in) << 20;
		}
		sr.socks = ssp;
		sr.more = v & 4;
		m.body_case = EXS_CTL__MSG__BODY_STATS_REPLY;
		m.stats_reply = &sr;
		break;
	case 9:
		m.body_case = EXS_CTL__MSG__BODY_MONITOR;
		m.monitor = &mon;
		break;
	case 10:
		dis.id = u8(in);
		m.body_case = EXS_CTL__MSG__BODY_DISCONNECT;
		m.disconnect = &dis;
		break;
	case 11: /* a connection from before a restart */
		adopt.sock = u8(in) % 8;
		adopt.type = v & 1 ? SOCK_STREAM : SOCK_SEQPACKET;
		adopt.qpn = u32(in);
		adopt.device = v & 2 ? "siw0" : v & 4 ? "mlx5_0" : "rxe0";
		addr_of(in, &sa, &adopt.local_addr);
		addr_of(in, &sa2, &adopt.peer_addr);
		adopt.passive = v & 8;
		adopt.agreed = setup_of(in, &setup);
		m.body_case = EXS_CTL__MSG__BODY_ADOPT;
		m.adopt = &adopt;
		break;
	default: /* a message only exsd sends */
		m.body_case = EXS_CTL__MSG__BODY_OK;
		m.ok = &ok;
		break;
	}
	send_msg(c, &m);
}

static void cm_event(struct in *in)
{
	uint8_t which = u8(in), pick = u8(in), k = u8(in);
	int status = (int8_t)u8(in);
	uint8_t pd[64];
	size_t len = 0;

	if (k & 2) { /* a set-up message as a peer's exsd would send it */
		struct exs_wire_setup w = { .credits = 1 + u8(in) % 64 };

		if (k & 4)
			w.credits = u16(in);
		w.sp_max = k & 8 ? u32(in) : 0;
		setup_encode((struct exs_wire_setup *)pd, k & 16 ? EXS_WIRE_SETUP_RESPONSE
								: EXS_WIRE_SETUP_REQUEST, &w);
		len = sizeof(struct exs_wire_setup);
		if (k & 32)
			pd[u8(in) % len] ^= u8(in);
	} else if (k & 4) {
		struct exs_wire_reject r;

		reject_encode(&r, (int)u16(in));
		memcpy(pd, &r, sizeof(r));
		len = sizeof(r);
	} else {
		len = u8(in) % sizeof(pd);
		for (size_t i = 0; i < len; i++)
			pd[i] = u8(in);
	}
	unsigned n = fake_cm_ids();
	if (n)
		fake_cm_deliver(which % n, pick, status, k & 1, pd, len);
}

/* ---- libFuzzer */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static char dir[] = "/tmp/exsd-fuzz-XXXXXX";
	char err[128];

	(void)argc;
	(void)argv;
	if (!mkdtemp(dir))
		abort();
	snprintf(sock_path, sizeof(sock_path), "%s/exsd.sock", dir);
	config_defaults(&exsd.conf);
	if (config_set(&exsd.conf, "daemon", "socket", sock_path, err, sizeof(err)))
		abort();
	exsd.conf.log_level = getenv("EXSD_FUZZ_LOG") ? LOG_DEBUG : 0;
	exsd.socket_path = exsd.conf.socket;
	exsd.port_cursor = exsd.conf.port_lo;
	exsd.listen_fd = -1;
	exsd.base = event_base_new();
	if (!exsd.base || cm_open() || ctl_listen())
		abort();
	for (int i = 0; i < MAX_CLIENTS; i++)
		cl[i].fd = -1;
	return 0;
}

/* exsd back to nothing, and serving: a fresh client's Hello is answered */
static void check_idle_and_serving(void)
{
	uint8_t buf[EXS_CTL_MAX_MSG];
	struct fclient c = { .fd = -1 };
	ExsCtl__Msg m, *r;
	ExsCtl__Hello h = EXS_CTL__HELLO__INIT;
	ssize_t n;

	settle();
	if (exsd.clients || exsd.nclients || exsd.nestablished || fake_live_ids) {
		dump_state("exsd kept state after every client left");
		abort();
	}
	c.fd = client_open(1000);
	out_msg_init(&m);
	m.seq = 77;
	m.body_case = EXS_CTL__MSG__BODY_HELLO;
	m.hello = &h;
	send_msg(&c, &m);
	pump();
	n = recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
	r = n > 0 ? exs_ctl__msg__unpack(NULL, (size_t)n, buf) : NULL;
	if (!r || r->body_case != EXS_CTL__MSG__BODY_HELLO_REPLY || r->seq != 77) {
		dump_state("a fresh client's Hello was not answered");
		abort();
	}
	exs_ctl__msg__free_unpacked(r, NULL);
	client_close(&c);
	settle();
	if (exsd.nclients) {
		dump_state("exsd counts a client it does not hold");
		abort();
	}
}

/* Time passes for one endpoint: its armed timer (connect or request
 * deadline) fires now; with none, for a paused accept. */
static void fire_timer(unsigned which)
{
	unsigned n = 0;

	for (struct client *c = exsd.clients; c; c = c->next)
		for (struct ep *e = c->eps; e; e = e->next)
			if (e->timer && evtimer_pending(e->timer, NULL) && n++ == which) {
				event_active(e->timer, EV_TIMEOUT, 1);
				return;
			}
	if (exsd.accept_paused)
		event_active(exsd.accept_retry, EV_TIMEOUT, 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct in in = { data, size };

	while (in.n) {
		uint8_t op = u8(&in), k = u8(&in) % MAX_CLIENTS;
		struct fclient *c = &cl[k];

		switch (op % 10) {
		case 0: /* a client comes */
			if (c->fd < 0) {
				static const uid_t uids[] = { 0, 1000, 1001 };

				c->fd = client_open(uids[u8(&in) % 3]);
				c->reading = true;
			}
			break;
		case 1: { /* a raw frame */
			uint8_t buf[EXS_CTL_MAX_MSG + 8];
			size_t len = u16(&in) % sizeof(buf);

			if (len > in.n)
				len = in.n;
			memcpy(buf, in.p, len);
			in.p += len;
			in.n -= len;
			if (c->fd >= 0)
				(void)send(c->fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
			break;
		}
		case 2:
		case 3:
		case 4: /* a well-formed message: the likeliest step */
			if (c->fd >= 0)
				structured(c, &in);
			else
				u8(&in);
			break;
		case 5:
			cm_event(&in);
			break;
		case 6:
			if (u8(&in) & 1)
				client_close(c);
			else
				c->reading = !c->reading;
			break;
		case 7:
			fake_cm_fail_next(u8(&in), u8(&in));
			break;
		case 8:
			fire_timer(k);
			break;
		case 9: { /* the kernel refuses exsd's next accept4 */
			static const int errs[] = { EMFILE, ENFILE, ENOBUFS, ENOMEM };

			accept_errno = errs[u8(&in) % 4];
			break;
		}
		}
		pump();
	}
	for (int i = 0; i < MAX_CLIENTS; i++)
		client_close(&cl[i]);
	accept_errno = 0;
	check_idle_and_serving();
	fake_cm_reset();
	return 0;
}
