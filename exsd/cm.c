/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * rdmacm for exsd: one rdma_cm_id per EXS socket that exsd knows of, and
 * the connection set-up with user-managed QPs (DESIGN "How a connection is
 * brokered"). The QP belongs to the client; exsd passes the client the
 * attributes rdma_init_qp_attr() gives and the peer's QP number travels in
 * the CM exchange. Every state change goes through ep_set_state().
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <stdio.h>

#include "exsd.h"
#include "exs_qpattr.h"

#define EXS_RD_DEPTH 16 /* RDMA READs in flight per connection and direction, at most */


static void ep_set_state(struct ep *e, enum ep_state s)
{
	exsd_log(LOG_DEBUG, "client %u sock %u req %u: %s -> %s", e->c->id, e->sock, e->req,
		 ep_state_name(e->state), ep_state_name(s));
	exsd.nestablished += (s == EP_ESTABLISHED) - (e->state == EP_ESTABLISHED);
	e->state = s;
	if (s == EP_ESTABLISHED)
		index_add_pair(e); /* its addresses are known now */
}

static struct ep *ep_new(struct client *c)
{
	struct ep *e;

	if (c->neps >= exsd.conf.max_sockets || limits_take_socket(c->u))
		return NULL;
	e = calloc(1, sizeof(*e));
	if (!e) {
		limits_put_socket(c->u);
		return NULL;
	}
	e->c = c;
	e->sock_id = ++exsd.next_ep;
	index_add_id(e);
	e->created_ms = now_ms();
	e->type = SOCK_SEQPACKET;
	e->next = c->eps;
	c->eps = e;
	c->neps++;
	return e;
}

struct ep *ep_find(struct client *c, uint32_t sock)
{
	return index_sock(c, sock);
}

struct ep *ep_find_req(struct client *c, uint32_t req)
{
	return index_req(c, req);
}

/* The ep now stands for the client's socket `sock`. */
static void ep_set_sock(struct ep *e, uint32_t sock)
{
	e->sock = sock;
	e->has_sock = true;
	index_add_sock(e);
}

/* Unlink and destroy; never from inside a CM event that names e->id. */
void ep_free(struct ep *e)
{
	struct ep **p;

	for (p = &e->c->eps; *p; p = &(*p)->next)
		if (*p == e) {
			*p = e->next;
			break;
		}
	e->c->neps--;
	index_del(e);
	limits_put_socket(e->c->u);
	if (e->holds_port)
		limits_put_port(e->c->u);
	if (e->eph_port)
		index_release_port(e->eph_port);
	if (e->backlog) /* a listener: its requests lose it */
		for (struct ep *o = e->c->eps; o; o = o->next)
			if (o->listener == e)
				o->listener = NULL;
	if (e->listener && e->listener->pending)
		e->listener->pending--;
	if (e->timer)
		event_free(e->timer);
	if (e->state == EP_ESTABLISHED)
		exsd.nestablished--;
	if (e->id) {
		if (e->state == EP_ESTABLISHED || e->state == EP_ACCEPTING ||
		    e->state == EP_CONNECTING || e->state == EP_WAIT_RTR)
			rdma_disconnect(e->id);
		rdma_destroy_id(e->id);
	}
	free(e);
}

/*
 * Whether the client's process is exiting or gone. A killed process tears
 * down its QPs (and so its connections) while it exits, before its control
 * socket closes; by then the kernel has already dropped its memory, which
 * /proc shows as an empty cmdline.
 */
static bool owner_gone(const struct client *c)
{
	char path[64], buf[8];
	FILE *f;
	bool gone;

	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)c->pid);
	f = fopen(path, "r");
	if (!f)
		return true;
	gone = fread(buf, 1, sizeof(buf), f) == 0;
	fclose(f);
	return gone;
}

/* The connection is over for exsd: tell the client, free once acked. */
static void ep_fail(struct ep *e, int err)
{
	if (e->state == EP_ESTABLISHED && err == ECONNRESET) {
		/* which of the two only a monitor learns: asking /proc costs
		 * four system calls at every connection's end */
		if (view_watched()) {
			bool gone = owner_gone(e->c); /* the CM saw its process die first */

			view_event(e, gone ? "close" : "disconnect", gone ? ESRCH : 0);
		}
		exsd_log(LOG_INFO, "client %u (%s) sock %u: disconnected by the peer", e->c->id,
			 e->c->comm, e->sock);
	} else {
		view_event(e, "error", err);
		exsd_log(LOG_INFO, "client %u (%s) sock %u: connection %s: %s", e->c->id, e->c->comm,
			 e->sock, e->state == EP_ESTABLISHED ? "ended" : "failed", strerror(err));
	}
	if (e->has_sock)
		out_conn_error(e->c, e->sock, err);
	else if (e->state == EP_REQUESTED && e->listener)
		out_request_gone(e->c, e->listener->sock, e->req, err);
	e->dead = true;
}

static void fill_addr(ProtobufCBinaryData *b, struct sockaddr *sa)
{
	b->data = (uint8_t *)sa;
	b->len = !sa ? 0 : sa->sa_family == AF_INET ? sizeof(struct sockaddr_in)
			 : sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : 0;
}

static int qp_attr(struct rdma_cm_id *id, enum ibv_qp_state st, ExsCtl__QpAttr *m, uint8_t *gid)
{
	struct ibv_qp_attr a;
	int mask = 0;

	memset(&a, 0, sizeof(a));
	a.qp_state = st;
	if (rdma_init_qp_attr(id, &a, &mask))
		return -errno;
	exs_qpattr_from_ibv(&a, mask, m, gid);
	return 0;
}

static bool is_iwarp(struct rdma_cm_id *id)
{
	return id->verbs && id->verbs->device->transport_type == IBV_TRANSPORT_IWARP;
}

/* The attributes an accepting QP is given before its QpReady: INIT, and on
 * IB/RoCE also RTR and RTS (it must reach RTS before rdma_accept). The
 * count, or -errno. */
static int accept_attrs(struct ep *e, ExsCtl__QpAttr a[3], uint8_t gid[3][16])
{
	int ret = qp_attr(e->id, IBV_QPS_INIT, &a[0], gid[0]);

	if (ret || e->iwarp)
		return ret ? ret : 1;
	ret = qp_attr(e->id, IBV_QPS_RTR, &a[1], gid[1]);
	if (!ret)
		ret = qp_attr(e->id, IBV_QPS_RTS, &a[2], gid[2]);
	return ret ? ret : 3;
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct ep *e = arg;

	(void)fd;
	(void)what;
	if (e->state == EP_ESTABLISHED || e->state == EP_LISTENING || e->state == EP_BOUND)
		return;
	if (e->state == EP_REQUESTED) { /* its connecting side has given up */
		struct exs_wire_reject r;

		reject_encode(&r, ETIMEDOUT);
		rdma_reject(e->id, &r, sizeof(r));
	}
	ep_fail(e, ETIMEDOUT);
	ep_free(e);
}

static void arm_timer(struct ep *e, uint32_t ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	if (!e->timer)
		e->timer = evtimer_new(exsd.base, on_timeout, e);
	if (e->timer)
		evtimer_add(e->timer, &tv);
}

/* An active connect without a deadline of its own entered a step: waiting
 * for the peer to accept is not timed (the CM's retries bound a dead path),
 * the others get connect_timeout_ms. */
static void arm_step_timer(struct ep *e)
{
	if (e->timeout_ms)
		return;
	if (e->state == EP_CONNECTING) {
		if (e->timer)
			evtimer_del(e->timer);
	} else {
		arm_timer(e, exsd.conf.connect_timeout_ms);
	}
}

/* ---- requests from clients */

static int check_sockaddr(const ProtobufCBinaryData *b)
{
	const struct sockaddr *sa = (const void *)b->data;

	if (b->len == sizeof(struct sockaddr_in) && sa->sa_family == AF_INET)
		return 0;
	if (b->len == sizeof(struct sockaddr_in6) && sa->sa_family == AF_INET6)
		return 0;
	return -EINVAL;
}

static int create_id(struct ep *e)
{
	if (rdma_create_id(exsd.cm, &e->id, e, RDMA_PS_TCP))
		return -errno;
	return 0;
}

struct bind_try {
	struct rdma_cm_id *id;
	struct sockaddr_storage *ss;
};

static int try_bind(void *arg, uint16_t port)
{
	struct bind_try *t = arg;

	((struct sockaddr_in *)t->ss)->sin_port = htons(port); /* sin6_port: same place */
	return rdma_bind_addr(t->id, (struct sockaddr *)t->ss) ? -errno : 0;
}

/* Bind e->id to ss; port 0: to a free port of [ports] ephemeral. */
static int bind_id(struct ep *e, struct sockaddr_storage *ss)
{
	struct bind_try t = { e->id, ss };
	int ret = limits_take_port(e->c->u);

	if (ret)
		return ret;
	if (((struct sockaddr_in *)ss)->sin_port)
		ret = rdma_bind_addr(e->id, (struct sockaddr *)ss) ? -errno : 0;
	else
		ret = port_pick(exsd.conf.port_lo, exsd.conf.port_hi, &exsd.port_cursor, try_bind, &t);
	if (ret < 0) {
		limits_put_port(e->c->u);
		return ret;
	}
	if (ret > 0) {
		e->eph_port = (uint16_t)ret;
		index_hold_port(e->eph_port);
	}
	e->holds_port = true;
	return 0;
}

static unsigned listeners(const struct client *c)
{
	unsigned n = 0;

	for (const struct ep *e = c->eps; e; e = e->next)
		n += e->state == EP_LISTENING && !e->dead;
	return n;
}

/* The port bound (host order), or -errno. */
int cm_bind(struct client *c, ExsCtl__Bind *b)
{
	struct sockaddr_storage ss;
	struct ep *e;
	uint16_t port;
	int ret;

	if (check_sockaddr(&b->addr))
		return -EINVAL;
	if (ep_find(c, b->sock))
		return -EINVAL;
	memcpy(&ss, b->addr.data, b->addr.len);
	port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	if (port && port < 1024 && !c->low_ports)
		return -EACCES;
	e = ep_new(c);
	if (!e)
		return -ENOBUFS;
	ep_set_sock(e, b->sock);
	e->type = b->type == SOCK_STREAM ? SOCK_STREAM : SOCK_SEQPACKET;
	ret = create_id(e);
	if (!ret)
		ret = bind_id(e, &ss);
	if (ret) {
		ep_free(e);
		return ret;
	}
	ep_set_state(e, EP_BOUND);
	port = ntohs(rdma_get_src_port(e->id));
	exsd_log(LOG_DEBUG, "client %u sock %u bound to port %u", c->id, e->sock, port);
	return port;
}

int cm_listen(struct client *c, ExsCtl__Listen *l)
{
	struct ep *e = ep_find(c, l->sock);

	if (!e || e->state != EP_BOUND)
		return -EINVAL;
	if (l->backlog == 0 || l->backlog > EXS_LIMIT_BACKLOG)
		return -EINVAL;
	if (listeners(c) >= exsd.conf.max_listeners)
		return -ENOBUFS;
	/* like somaxconn: a larger backlog is cut to the limit */
	e->backlog = l->backlog < exsd.conf.max_pending ? l->backlog : exsd.conf.max_pending;
	/* exsd refuses what is beyond the socket's backlog itself, at once
	 * and with a reason (conn_request); the kernel's queue, which may
	 * drop a request and leave the peer to retry for seconds, gets room
	 * for every request exsd could be holding */
	if (rdma_listen(e->id, (int)exsd.conf.max_pending))
		return -errno;
	ep_set_state(e, EP_LISTENING);
	view_event(e, "listen", 0);
	return 0;
}

int cm_connect(struct client *c, ExsCtl__Connect *m)
{
	struct ep *e = ep_find(c, m->sock);
	struct sockaddr_storage dst, src;
	int ret;

	if (check_sockaddr(&m->addr) || !m->setup || !m->setup->credits ||
	    m->setup->credits > EXS_LIMIT_CREDITS)
		return -EINVAL;
	if (m->early && (!m->early->device || !m->early->init ||
			 strlen(m->early->device) >= sizeof(e->early_dev)))
		return -EINVAL;
	if (e && e->state != EP_BOUND)
		return -EISCONN;
	if (!e) {
		e = ep_new(c);
		if (!e)
			return -ENOBUFS;
		ep_set_sock(e, m->sock);
		memcpy(&dst, m->addr.data, m->addr.len);
		/* unbound: a wildcard address and a port of ours, as a bind(0) */
		memset(&src, 0, sizeof(src));
		src.ss_family = dst.ss_family;
		if (!(ret = create_id(e)))
			ret = bind_id(e, &src);
		if (ret) {
			ep_free(e);
			return ret;
		}
	}
	memcpy(&dst, m->addr.data, m->addr.len);
	e->type = m->type == SOCK_STREAM ? SOCK_STREAM : SOCK_SEQPACKET;
	setup_from_msg(&e->offer, m->setup);
	e->early = m->early != NULL;
	if (e->early) {
		snprintf(e->early_dev, sizeof(e->early_dev), "%s", m->early->device);
		e->early_port = m->early->port_num;
		e->early_qpn = m->early->qpn;
		exs_qpattr_scalars(&e->early_init, m->early->init);
	}
	/* the caller's deadline bounds the whole connect; without one, only
	 * the steps that do not wait for the peer's application are bounded
	 * (arm_step_timer) and a queued request waits until it is accepted */
	e->timeout_ms = m->timeout_ms;
	e->deadline_ms = m->timeout_ms ? now_ms() + m->timeout_ms : 0;
	arm_timer(e, m->timeout_ms ? m->timeout_ms : exsd.conf.connect_timeout_ms);
	if (rdma_resolve_addr(e->id, NULL, (struct sockaddr *)&dst, EXSD_RESOLVE_MS)) {
		ret = -errno;
		ep_fail(e, -ret);
		ep_free(e);
		return 0; /* reported as a connect event */
	}
	ep_set_state(e, EP_RESOLVING_ADDR);
	return 0;
}

static void send_established(struct ep *e)
{
	ExsCtl__Msg m;
	ExsCtl__Established es = EXS_CTL__ESTABLISHED__INIT;
	ExsCtl__Setup su = EXS_CTL__SETUP__INIT;

	out_msg_init(&m);
	es.sock = e->sock;
	setup_to_msg(&su, &e->agreed);
	es.setup = &su;
	fill_addr(&es.peer_addr, rdma_get_peer_addr(e->id));
	fill_addr(&es.local_addr, rdma_get_local_addr(e->id));
	m.body_case = EXS_CTL__MSG__BODY_ESTABLISHED;
	m.established = &es;
	out_send(e->c, &m);
	ep_set_state(e, EP_ESTABLISHED);
	if (e->timer)
		evtimer_del(e->timer);
	view_event(e, e->passive ? "accept" : "connect", 0);
	exsd_log(LOG_INFO, "client %u (%s) sock %u: established on %s (%s), credits %u",
		 e->c->id, e->c->comm, e->sock, ibv_get_device_name(e->id->verbs->device),
		 e->iwarp ? "iWARP" : "IB/RoCE", e->agreed.credits);
}

/* What each device allows of EXS_RD_DEPTH, asked once per device (a
 * system call on every connect and two on every accept before): keyed by
 * the verbs context and the device's name, forgotten when a device goes
 * (its context may be freed, and the address given to another; a device
 * removed with no connection on it reports nothing here, hence the name
 * too). NULL verbs: a free slot. */
#define RD_LIMITS 16
static struct {
	struct ibv_context *verbs;
	char name[IBV_SYSFS_NAME_MAX];
	int limit;
} rd_limits[RD_LIMITS];

static int rd_limit(struct ibv_context *verbs)
{
	const char *name = ibv_get_device_name(verbs->device);
	struct ibv_device_attr a;
	int i, d = EXS_RD_DEPTH;

	for (i = 0; i < RD_LIMITS && rd_limits[i].verbs; i++)
		if (rd_limits[i].verbs == verbs && !strcmp(rd_limits[i].name, name))
			return rd_limits[i].limit;
	if (ibv_query_device(verbs, &a))
		return 1; /* not remembered: asked again next time */
	if (a.max_qp_rd_atom < d)
		d = a.max_qp_rd_atom;
	if (a.max_qp_init_rd_atom < d)
		d = a.max_qp_init_rd_atom;
	if (i == RD_LIMITS) /* full: the newest is kept, as a stale one may linger */
		i = RD_LIMITS - 1;
	rd_limits[i].verbs = verbs;
	snprintf(rd_limits[i].name, sizeof(rd_limits[i].name), "%s", name);
	rd_limits[i].limit = d;
	return d;
}

/* RDMA READs one side may have in flight (persistent sends, proto/exs_wire.h
 * part 6): EXS_RD_DEPTH, lowered to what the device and `peer` allow; at
 * least 1. */
static uint8_t rd_depth(struct rdma_cm_id *id, uint8_t peer)
{
	int d = rd_limit(id->verbs);

	if (peer < d)
		d = peer;
	return (uint8_t)(d < 1 ? 1 : d);
}

/* Whether e's client may be asked for another QP (Rebuild). */
static bool may_rebuild(const struct ep *e)
{
	return e->c->rebuild && e->rebuilds < EXSD_QP_REBUILDS;
}

/*
 * The QP that e's client named in QpReady (for socket `sock`, passive
 * request `conn`) failed the ownership check in a way Linux 6.1's QP-number
 * race can cause: ask the client for another, with the attributes the
 * first one was given (exs_control.proto, Rebuild). 0, or -errno when the
 * attributes cannot be had.
 */
static int ask_rebuild(struct ep *e, uint32_t sock, uint32_t conn)
{
	ExsCtl__Msg m;
	ExsCtl__Rebuild r = EXS_CTL__REBUILD__INIT;
	ExsCtl__QpAttr a[3], *ap[3] = { &a[0], &a[1], &a[2] };
	uint8_t gid[3][16];
	int n = conn ? accept_attrs(e, a, gid) : qp_attr(e->id, IBV_QPS_INIT, &a[0], gid[0]);

	if (n < 0)
		return n;
	e->rebuilds++;
	out_msg_init(&m);
	r.sock = sock;
	r.conn = conn;
	r.n_attrs = conn ? (size_t)n : 1;
	r.attrs = ap;
	m.body_case = EXS_CTL__MSG__BODY_REBUILD;
	m.rebuild = &r;
	out_send(e->c, &m);
	return 0;
}

/* What rdma_connect and rdma_accept are given for QP `qpn`, with the
 * setup message `w` (filled later) as private data. */
static void conn_param(struct rdma_conn_param *p, uint32_t qpn, struct exs_wire_setup *w)
{
	memset(p, 0, sizeof(*p));
	p->retry_count = 7;
	p->rnr_retry_count = 7;
	p->qp_num = qpn;
	p->private_data = w;
	p->private_data_len = sizeof(*w);
}

/*
 * The active side's QP `qpn` is ready (QpReady, or Connect.early taken):
 * if it is the client's, connect. On failure e is failed (e->dead), for
 * the caller to free; a QP refused in a way the kernel can cause makes
 * exsd ask for another (Rebuild), and e waits for it.
 */
static void connect_qp(struct ep *e, uint32_t qpn)
{
	struct rdma_conn_param p;
	struct exs_wire_setup w;
	bool retry = may_rebuild(e);
	int ret;

	ret = qp_check_owner(e->c, e->sock, e->id, qpn, retry);
	if (ret == -EPERM && retry && !ask_rebuild(e, e->sock, 0))
		return;
	if (ret) {
		ep_fail(e, EPERM);
		return;
	}
	conn_param(&p, qpn, &w);
	/* the peer's exsd drops the request when we give up (exs_wire.h) */
	e->offer.wait_ms = !e->deadline_ms ? 0
			   : e->deadline_ms > now_ms() + 1 ? (uint32_t)(e->deadline_ms - now_ms()) : 1;
	setup_encode(&w, EXS_WIRE_SETUP_REQUEST, &e->offer);
	p.responder_resources = p.initiator_depth = rd_depth(e->id, UINT8_MAX);
	if (rdma_connect(e->id, &p)) {
		ep_fail(e, errno);
		return;
	}
	ep_set_state(e, EP_CONNECTING);
	arm_step_timer(e);
}

int cm_qp_ready(struct client *c, ExsCtl__QpReady *m)
{
	struct rdma_conn_param p;
	struct exs_wire_setup w;
	struct ep *e;
	bool retry;
	int ret;

	conn_param(&p, m->qpn, &w);
	if (m->conn) {
		/* passive: the client accepts request `conn` as socket `sock` */
		struct exs_wire_setup mine = { 0 };

		e = ep_find_req(c, m->conn);
		if (!e || e->state != EP_REQUESTED || !m->setup || !m->setup->credits ||
		    m->setup->credits > EXS_LIMIT_CREDITS || ep_find(c, m->sock))
			return -EINVAL;
		retry = may_rebuild(e);
		ret = qp_check_owner(c, m->sock, e->id, m->qpn, retry);
		if (ret) {
			if (ret == -EPERM && retry && !ask_rebuild(e, m->sock, m->conn))
				return 0; /* the request stays; the QP comes again */
			/* the peer is refused; the client's accept goes on waiting */
			cm_reject(c, &(ExsCtl__Reject){ .conn = m->conn, .err = ECONNREFUSED });
			return -EPERM;
		}
		setup_from_msg(&mine, m->setup);
		setup_agree(&e->offer, &mine, &e->agreed);
		/* the RDMA READs of persistent sends: no deeper than the
		 * connecting side asked for (its QP's attributes are made of it) */
		p.responder_resources = rd_depth(e->id, e->peer_rd_out);
		p.initiator_depth = rd_depth(e->id, e->peer_rd_in);
		setup_encode(&w, EXS_WIRE_SETUP_RESPONSE, &e->agreed);
		ep_set_sock(e, m->sock);
		if (e->timer) /* accepted in time: the connecting side's wait is over */
			evtimer_del(e->timer);
		if (e->listener && e->listener->pending)
			e->listener->pending--;
		e->listener = NULL;
		if (rdma_accept(e->id, &p)) {
			ep_fail(e, errno);
			ep_free(e);
			return 0;
		}
		ep_set_state(e, EP_ACCEPTING);
		return 0;
	}
	e = ep_find(c, m->sock);
	if (!e)
		return -EINVAL;
	if (e->state == EP_WAIT_QP) {
		connect_qp(e, m->qpn);
		if (e->dead)
			ep_free(e);
		return 0;
	}
	if (e->state == EP_WAIT_RTR) {
		if (rdma_establish(e->id)) {
			ep_fail(e, errno);
			ep_free(e);
			return 0;
		}
		send_established(e);
		return 0;
	}
	return -EINVAL;
}

int cm_reject(struct client *c, ExsCtl__Reject *m)
{
	struct exs_wire_reject r;
	struct ep *e = ep_find_req(c, m->conn);

	if (!e || e->state != EP_REQUESTED)
		return -EINVAL;
	reject_encode(&r, exs_is_errno(m->err) ? m->err : ECONNREFUSED);
	rdma_reject(e->id, &r, sizeof(r));
	e->has_sock = false;
	index_del_sock(e);
	ep_free(e);
	return 0;
}

/* Client c goes, and its connections with it. When its process is gone
 * (not merely dropped by exsd, which leaves its QPs working), the other
 * end of each, when on this host, learns at once: ConnError ESRCH makes
 * its libexs end the connection (ECONNRESET), where the CM's disconnect
 * alone would have it ask the dead peer in-band and wait a second for no
 * answer (IB/RoCE; an iWARP connection ends with the CM's anyway). */
void cm_client_gone(struct client *c)
{
	if (!owner_gone(c))
		return;
	for (struct ep *e = c->eps; e; e = e->next) {
		struct ep *t = e->state == EP_ESTABLISHED ? index_twin(e) : NULL;

		if (t && t->has_sock && t->c != c)
			out_conn_error(t->c, t->sock, ESRCH);
	}
}

/* exsctl disconnect (observe_disconnect chose e): the client learns that
 * its connection is gone (ECONNABORTED: its libexs ends it at once), and
 * the id goes, which tells the peer. An adopted connection has no id: its
 * other end learns alike when it is adopted here too, else from its own
 * transport (its libexs fails it when a send or probe gets no answer). */
void cm_abort(struct ep *e, int err)
{
	struct ep *twin = e->adopted ? index_twin(e) : NULL;

	if (twin) {
		view_event(twin, "close", err);
		if (twin->has_sock)
			out_conn_error(twin->c, twin->sock, err);
		ep_free(twin);
	}
	if (e->has_sock)
		out_conn_error(e->c, e->sock, err);
	ep_free(e);
}

/* Copies a checked address (check_sockaddr) into ss. */
static void take_addr(struct sockaddr_storage *ss, const ProtobufCBinaryData *b)
{
	memset(ss, 0, sizeof(*ss));
	memcpy(ss, b->data, b->len);
}

/* A connection its client had before this exsd started (proto: Adopt). */
int cm_adopt(struct client *c, ExsCtl__Adopt *m)
{
	struct ibv_device **list;
	bool iwarp = false;
	int n = 0, k, index = -1;
	struct ep *e;

	if (check_sockaddr(&m->local_addr) || check_sockaddr(&m->peer_addr) || !m->agreed ||
	    !m->agreed->credits || m->agreed->credits > EXS_LIMIT_CREDITS || !m->device ||
	    strlen(m->device) >= sizeof(e->adopted_dev))
		return -EINVAL;
	if (ep_find(c, m->sock))
		return -EINVAL;
	list = ibv_get_device_list(&n);
	for (k = 0; list && k < n; k++)
		if (!strcmp(ibv_get_device_name(list[k]), m->device)) {
			index = ibv_get_device_index(list[k]);
			iwarp = list[k]->transport_type == IBV_TRANSPORT_IWARP;
		}
	if (list)
		ibv_free_device_list(list);
	if (index < 0)
		return -ENODEV;
	if (iwarp)
		return -EOPNOTSUPP; /* an iWARP connection ended with its CM endpoint */
	if (qp_check_owner_on(c, m->sock, m->device, index, 0, m->qpn, false))
		return -EPERM;
	e = ep_new(c);
	if (!e)
		return -ENOBUFS;
	ep_set_sock(e, m->sock);
	e->type = m->type == SOCK_STREAM ? SOCK_STREAM : SOCK_SEQPACKET;
	e->passive = m->passive;
	e->adopted = true;
	snprintf(e->adopted_dev, sizeof(e->adopted_dev), "%s", m->device);
	take_addr(&e->adopted_local, &m->local_addr);
	take_addr(&e->adopted_peer, &m->peer_addr);
	setup_from_msg(&e->agreed, m->agreed);
	ep_set_state(e, EP_ESTABLISHED);
	view_event(e, "adopt", 0);
	exsd_log(LOG_INFO, "client %u (%s) sock %u: connection on %s from before exsd's restart adopted",
		 c->id, c->comm, e->sock, e->adopted_dev);
	return 0;
}

int cm_close_sock(struct client *c, ExsCtl__Close *m)
{
	struct ep *e = ep_find(c, m->sock);

	if (!e)
		return 0; /* already gone on our side: closing is idempotent */
	if (e->state == EP_ESTABLISHED || e->state == EP_LISTENING)
		view_event(e, "close", 0);
	if (e->state != EP_LISTENING) {
		ep_free(e);
		return 0;
	}
	/* requests not yet accepted die with their listener */
	for (struct ep *o = c->eps; o; o = o->next)
		if (o->listener == e && o->state == EP_REQUESTED && !o->dead) {
			struct exs_wire_reject r;

			reject_encode(&r, ECONNREFUSED);
			rdma_reject(o->id, &r, sizeof(r));
			o->dead = true;
		}
	ep_free(e);
	for (struct ep *o = c->eps, *n; o; o = n) {
		n = o->next;
		if (o->dead)
			ep_free(o);
	}
	return 0;
}

/* ---- rdmacm events */

/* Whether INIT attributes `a` (exsd's) and `b` (the client's early QP's)
 * are the same: each the few fields rdma_init_qp_attr gives an RC QP. */
static bool same_init(const ExsCtl__QpAttr *a, const ExsCtl__QpAttr *b)
{
	const uint32_t known = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			       IBV_QP_QKEY;

	return a->mask == b->mask && !(a->mask & ~known) && a->qp_state == b->qp_state &&
	       a->qp_access_flags == b->qp_access_flags && a->pkey_index == b->pkey_index &&
	       a->port_num == b->port_num && a->qkey == b->qkey;
}

static void on_route(struct ep *e)
{
	ExsCtl__Msg m;
	ExsCtl__Route r = EXS_CTL__ROUTE__INIT;
	ExsCtl__QpAttr init;
	uint8_t gid[16];
	int ret;

	e->iwarp = is_iwarp(e->id);
	ret = qp_attr(e->id, IBV_QPS_INIT, &init, gid);
	if (ret) {
		ep_fail(e, -ret);
		return;
	}
	if (e->early) {
		const char *dev = ibv_get_device_name(e->id->verbs->device);

		if (!strcmp(dev, e->early_dev) && e->early_port == e->id->port_num &&
		    same_init(&init, &e->early_init)) {
			exsd_log(LOG_DEBUG, "client %u sock %u: QP %u given early", e->c->id, e->sock,
				 e->early_qpn);
			ep_set_state(e, EP_WAIT_QP);
			connect_qp(e, e->early_qpn);
			return;
		}
		exsd_log(LOG_DEBUG, "client %u sock %u: QP %u on %s port %u given early, the route is %s port %u",
			 e->c->id, e->sock, e->early_qpn, e->early_dev, e->early_port, dev,
			 (unsigned)e->id->port_num);
	}
	out_msg_init(&m);
	r.sock = e->sock;
	r.device = (char *)ibv_get_device_name(e->id->verbs->device);
	r.port_num = e->id->port_num;
	r.iwarp = e->iwarp;
	r.init = &init;
	fill_addr(&r.local_addr, rdma_get_local_addr(e->id));
	m.body_case = EXS_CTL__MSG__BODY_ROUTE;
	m.route = &r;
	ep_set_state(e, EP_WAIT_QP);
	out_send(e->c, &m);
}

static void on_connect_response(struct ep *e, struct rdma_cm_event *ev)
{
	ExsCtl__Msg m;
	ExsCtl__Rtr r = EXS_CTL__RTR__INIT;
	ExsCtl__QpAttr a[2], *ap[2] = { &a[0], &a[1] };
	uint8_t gid[2][16];
	struct exs_wire_setup resp;
	int ret;

	ret = setup_decode(ev->param.conn.private_data, ev->param.conn.private_data_len,
			   EXS_WIRE_SETUP_RESPONSE, &resp);
	if (!ret && !setup_within(&resp, &e->offer))
		ret = -EPROTO;
	if (!ret)
		ret = qp_attr(e->id, IBV_QPS_RTR, &a[0], gid[0]);
	if (!ret)
		ret = qp_attr(e->id, IBV_QPS_RTS, &a[1], gid[1]);
	if (ret) {
		rdma_reject(e->id, NULL, 0);
		ep_fail(e, -ret);
		return;
	}
	e->agreed = resp;
	out_msg_init(&m);
	r.sock = e->sock;
	r.n_attrs = 2;
	r.attrs = ap;
	m.body_case = EXS_CTL__MSG__BODY_RTR;
	m.rtr = &r;
	ep_set_state(e, EP_WAIT_RTR);
	arm_step_timer(e);
	out_send(e->c, &m);
}

static void on_established(struct ep *e, struct rdma_cm_event *ev)
{
	struct exs_wire_setup resp;
	int ret;

	if (e->state == EP_ACCEPTING) {
		send_established(e);
		return;
	}
	if (e->state != EP_CONNECTING)
		return; /* active IB/RoCE: already announced after rdma_establish */
	/* active iWARP: no CONNECT_RESPONSE; the answer comes with this event */
	ret = setup_decode(ev->param.conn.private_data, ev->param.conn.private_data_len,
			   EXS_WIRE_SETUP_RESPONSE, &resp);
	if (!ret && !setup_within(&resp, &e->offer))
		ret = -EPROTO;
	if (ret) {
		ep_fail(e, -ret);
		return;
	}
	e->agreed = resp;
	send_established(e);
}

static void on_request(struct ep *l, struct rdma_cm_event *ev)
{
	struct rdma_cm_id *id = ev->id;
	struct exs_wire_setup req;
	struct exs_wire_reject rj;
	ExsCtl__Msg m;
	ExsCtl__ConnRequest cr = EXS_CTL__CONN_REQUEST__INIT;
	ExsCtl__Setup su = EXS_CTL__SETUP__INIT;
	ExsCtl__QpAttr a[3], *ap[3] = { &a[0], &a[1], &a[2] };
	uint8_t gid[3][16];
	struct ep *e = NULL;
	int ret, n = 0;

	ret = setup_decode(ev->param.conn.private_data, ev->param.conn.private_data_len,
			   EXS_WIRE_SETUP_REQUEST, &req);
	if (!ret && l->pending >= l->backlog)
		ret = -ECONNREFUSED;
	if (!ret && !(e = ep_new(l->c)))
		ret = -ECONNREFUSED;
	if (!ret) {
		e->id = id;
		id->context = e;
		e->passive = true;
		e->type = l->type;
		e->iwarp = is_iwarp(id);
		e->req = ++exsd.next_req ? exsd.next_req : ++exsd.next_req;
		index_add_req(e);
		e->listener = l;
		e->offer = req;
		e->peer_rd_in = ev->param.conn.responder_resources;
		e->peer_rd_out = ev->param.conn.initiator_depth;
		l->pending++;
		n = accept_attrs(e, a, gid);
		ret = n < 0 ? n : 0;
	}
	if (ret) {
		exsd_log(LOG_INFO, "connection request to client %u sock %u refused: %s", l->c->id,
			 l->sock, strerror(-ret));
		reject_encode(&rj, -ret == EPROTO ? ECONNREFUSED : -ret);
		rdma_reject(id, &rj, sizeof(rj));
		if (e) {
			e->dead = true; /* freed after the ack; the id with it */
		} else {
			id->context = NULL; /* destroyed after the ack */
		}
		return;
	}
	out_msg_init(&m);
	cr.sock = l->sock;
	cr.conn = e->req;
	cr.device = (char *)ibv_get_device_name(id->verbs->device);
	cr.port_num = id->port_num;
	cr.iwarp = e->iwarp;
	cr.n_attrs = (size_t)n;
	cr.attrs = ap;
	setup_to_msg(&su, &req);
	cr.peer_setup = &su;
	fill_addr(&cr.peer_addr, rdma_get_peer_addr(id));
	fill_addr(&cr.local_addr, rdma_get_local_addr(id));
	m.body_case = EXS_CTL__MSG__BODY_CONN_REQUEST;
	m.conn_request = &cr;
	/* the request waits in the listener's backlog until it is accepted
	 * or its connecting side gives up: at the end of the wait it asked
	 * for (on_timeout), as no transport tells us (exs_wire.h part 1) */
	ep_set_state(e, EP_REQUESTED);
	if (req.wait_ms)
		arm_timer(e, req.wait_ms);
	out_send(l->c, &m);
}

static int cm_status_errno(int status, int dflt)
{
	return exs_is_errno(-(long)status) ? -status : dflt;
}

static void on_cm_event(struct rdma_cm_event *ev, struct rdma_cm_id **ret_destroy)
{
	struct ep *e = ev->id->context;

	exsd_log(LOG_DEBUG, "cm event %s status %d", rdma_event_str(ev->event), ev->status);
	if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
		struct ep *l = ev->listen_id->context;

		ev->id->context = NULL;
		if (!l || l->dead || l->state != EP_LISTENING) {
			rdma_reject(ev->id, NULL, 0);
			*ret_destroy = ev->id;
			return;
		}
		on_request(l, ev);
		if (!ev->id->context)
			*ret_destroy = ev->id;
		return;
	}
	if (!e || e->dead)
		return;
	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (rdma_resolve_route(e->id, EXSD_RESOLVE_MS))
			ep_fail(e, errno);
		else
			ep_set_state(e, EP_RESOLVING_ROUTE);
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		on_route(e);
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
		ep_fail(e, cm_status_errno(ev->status, EHOSTUNREACH));
		break;
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
		if (e->state == EP_CONNECTING)
			on_connect_response(e, ev);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		on_established(e, ev);
		break;
	case RDMA_CM_EVENT_REJECTED:
		ep_fail(e, reject_decode(ev->param.conn.private_data, ev->param.conn.private_data_len));
		break;
	case RDMA_CM_EVENT_CONNECT_ERROR:
		ep_fail(e, cm_status_errno(ev->status, ECONNABORTED));
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		/* A peer that connects and closes at once can have its DREQ
		 * overtake our ESTABLISHED: for it the connection was up (and its
		 * data and FIN may already be in our client's CQ), so the accept
		 * completes before the disconnect is reported. */
		if (e->state == EP_ACCEPTING)
			send_established(e);
		ep_fail(e, ECONNRESET);
		break;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		memset(rd_limits, 0, sizeof(rd_limits));
		ep_fail(e, ENODEV);
		break;
	default:
		break;
	}
}

static void on_cm_readable(evutil_socket_t fd, short what, void *arg)
{
	struct rdma_cm_event *ev;

	(void)fd;
	(void)what;
	(void)arg;
	while (!rdma_get_cm_event(exsd.cm, &ev)) {
		struct rdma_cm_id *destroy = NULL;
		struct ep *e;

		on_cm_event(ev, &destroy);
		e = ev->event == RDMA_CM_EVENT_CONNECT_REQUEST ? ev->id->context : ev->id->context;
		rdma_ack_cm_event(ev);
		if (destroy)
			rdma_destroy_id(destroy);
		else if (e && e->dead)
			ep_free(e);
	}
}

int cm_open(void)
{
	exsd.cm = rdma_create_event_channel();
	if (!exsd.cm)
		return -errno;
	fcntl(exsd.cm->fd, F_SETFL, fcntl(exsd.cm->fd, F_GETFL) | O_NONBLOCK);
	exsd.cm_ev = event_new(exsd.base, exsd.cm->fd, EV_READ | EV_PERSIST, on_cm_readable, NULL);
	if (!exsd.cm_ev || event_add(exsd.cm_ev, NULL))
		return -ENOMEM;
	return 0;
}

void cm_close(void)
{
	if (exsd.cm_ev)
		event_free(exsd.cm_ev);
	if (exsd.cm)
		rdma_destroy_event_channel(exsd.cm);
}
