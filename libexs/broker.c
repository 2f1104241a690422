/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The library's half of the connection set-up that exsd brokers (DESIGN:
 * user-managed QPs): bind, listen, connect and accept as requests to exsd,
 * and exsd's events (route, QP attributes, establishment, errors,
 * connection requests) and requests (live counters). It builds a socket's
 * connection (conn.c) and hands it over once established; it never touches
 * the data path. Everything here runs with exs_g.lock held; a request that
 * waits for exsd's reply releases it (exs_ctl_call), so the socket is
 * marked busy meanwhile (sock.c) and looked at again afterwards. When exsd
 * goes away, a thread of its own (exs-rejoin) makes the listeners and the
 * IB/RoCE connections known to the next exsd.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exs_int.h"

static void copy_addr(struct sockaddr_storage *dst, socklen_t *len, const ProtobufCBinaryData *b)
{
	size_t n = b->len < sizeof(*dst) ? b->len : sizeof(*dst);

	memset(dst, 0, sizeof(*dst));
	memcpy(dst, b->data, n);
	*len = (socklen_t)n;
}

/* What this socket offers in the setup negotiation (guide §6.2). */
static void offer(const struct exs_sock *s, ExsCtl__Setup *su)
{
	su->credits = s->cfg_credits;
	su->sp_max = s->cfg_sp_max;
	su->stream_buf = s->cfg_stream_buf;
}

/* exs_ctl_call for socket `s`, which stays valid across the wait. */
static int call(struct exs_sock *s, ExsCtl__Msg *m, ExsCtl__Msg **ret_reply)
{
	int ret;

	exs_sock_busy(s);
	ret = exs_ctl_call(m, ret_reply);
	return ret;
}

/* After call(): -EBADF when the socket was closed meanwhile (the close has
 * run now; `s` is gone), else `ret`. */
static int call_end(struct exs_sock *s, int ret, ExsCtl__Msg **reply)
{
	if (!exs_sock_unbusy(s))
		return ret;
	if (reply && *reply) {
		exs_ctl__msg__free_unpacked(*reply, NULL);
		*reply = NULL;
	}
	return -EBADF;
}

/* ---- listening and accepting */

/* Bind `s` to `a` in exsd; the port it chose (a wildcard port) in *port,
 * else 0. -EBADF: the socket was closed meanwhile and is gone. */
static int bind_req(struct exs_sock *s, const struct sockaddr *a, socklen_t len, uint32_t *port)
{
	ExsCtl__Msg m, *r = NULL;
	ExsCtl__Bind b = EXS_CTL__BIND__INIT;
	int ret;

	exs_ctl_msg_init(&m);
	b.sock = s->id;
	b.addr.data = (uint8_t *)a;
	b.addr.len = len;
	b.type = (uint32_t)s->type;
	m.body_case = EXS_CTL__MSG__BODY_BIND;
	m.bind = &b;
	ret = call(s, &m, &r);
	if (!ret)
		s->known_to_exsd = true; /* a close meanwhile must tell exsd */
	ret = call_end(s, ret, &r);
	if (ret)
		return ret;
	*port = r->body_case == EXS_CTL__MSG__BODY_BIND_REPLY ? r->bind_reply->port : 0;
	exs_ctl__msg__free_unpacked(r, NULL);
	return 0;
}

/* Listen on bound `s` in exsd; it is EXS_S_LISTENING once exsd agrees.
 * -EBADF: the socket was closed meanwhile and is gone. */
static int listen_req(struct exs_sock *s, uint32_t backlog)
{
	ExsCtl__Msg m;
	ExsCtl__Listen l = EXS_CTL__LISTEN__INIT;
	int ret;

	exs_ctl_msg_init(&m);
	l.sock = s->id;
	l.backlog = backlog;
	m.body_case = EXS_CTL__MSG__BODY_LISTEN;
	m.listen = &l;
	ret = call(s, &m, NULL);
	if (!ret && s->state != EXS_S_LISTENING)
		exs_sock_set_state(s, EXS_S_LISTENING);
	return call_end(s, ret, NULL);
}

int exs_broker_bind(struct exs_sock *s, const struct sockaddr *a, socklen_t len)
{
	uint32_t port;
	int ret;

	if (s->state != EXS_S_NEW || s->busy)
		return -EINVAL;
	ret = bind_req(s, a, len, &port);
	if (ret)
		return ret;
	memcpy(&s->local, a, len);
	s->local_len = len;
	if (port) /* sin_port and sin6_port lie alike */
		((struct sockaddr_in *)&s->local)->sin_port = htons((uint16_t)port);
	exs_sock_set_state(s, EXS_S_BOUND);
	return 0;
}

int exs_broker_listen(struct exs_sock *s, int backlog)
{
	uint32_t port;
	int ret;

	if (s->busy)
		return -EINVAL;
	if (s->state == EXS_S_NEW) {
		/* like listen(2): an unbound socket gets the wildcard and a free port */
		struct sockaddr_storage any = { .ss_family = (sa_family_t)s->domain };

		ret = exs_broker_bind(s, (struct sockaddr *)&any,
				      s->domain == AF_INET ? sizeof(struct sockaddr_in)
							   : sizeof(struct sockaddr_in6));
		if (ret)
			return ret;
	} else if (s->state == EXS_S_BOUND && !s->known_to_exsd) {
		/* bound with an exsd that has gone since: bind again with this one */
		ret = bind_req(s, (struct sockaddr *)&s->local, s->local_len, &port);
		if (ret)
			return ret;
	}
	if (s->state != EXS_S_BOUND)
		return s->state == EXS_S_LISTENING ? -EINVAL : -EISCONN;
	if (backlog <= 0)
		backlog = 1;
	if (backlog > EXS_MAX_BACKLOG)
		backlog = EXS_MAX_BACKLOG;
	s->reqs = calloc((size_t)backlog, sizeof(*s->reqs));
	s->acc = calloc(EXS_MAX_BACKLOG, sizeof(*s->acc));
	if (!s->reqs || !s->acc) {
		free(s->reqs);
		free(s->acc);
		s->reqs = NULL;
		s->acc = NULL;
		return -ENOMEM;
	}
	s->backlog = (uint32_t)backlog;
	s->acc_cap = EXS_MAX_BACKLOG;
	ret = listen_req(s, s->backlog);
	if (ret && ret != -EBADF) { /* a later listen allocates again */
		free(s->reqs);
		free(s->acc);
		s->reqs = NULL;
		s->acc = NULL;
	}
	return ret;
}

static int apply_attrs(struct exs_conn *c, size_t n, ExsCtl__QpAttr **attrs)
{
	size_t i;
	int ret;

	for (i = 0; i < n; i++)
		if ((ret = exs_conn_modify(c, attrs[i])))
			return ret;
	return 0;
}

static int send_qp_ready(struct exs_sock *s, uint32_t req, bool with_setup)
{
	ExsCtl__Msg m;
	ExsCtl__QpReady q = EXS_CTL__QP_READY__INIT;
	ExsCtl__Setup su = EXS_CTL__SETUP__INIT;

	exs_ctl_msg_init(&m);
	q.sock = s->id;
	q.qpn = s->conn->qp->qp_num;
	q.conn = req;
	if (with_setup) {
		offer(s, &su);
		q.setup = &su;
	}
	m.body_case = EXS_CTL__MSG__BODY_QP_READY;
	m.qp_ready = &q;
	return exs_ctl_send(&m);
}

static struct exs_conn_cfg sock_cfg(const struct exs_sock *s)
{
	return (struct exs_conn_cfg){
		.credits = s->cfg_credits,
		.sp_max = s->cfg_sp_max,
		.stream_buf = s->cfg_stream_buf,
		.inline_max = s->cfg_inline,
		.busy_poll = s->fd_flags & EXS_FD_BUSYPOLL,
		.nodelay = s->fd_flags & EXS_FD_NODELAY,
	};
}

/* s's connection over device `dev`: a spare if there is one (`spare`),
 * else a new one */
static int new_conn(struct exs_sock *s, const char *dev, bool iwarp, bool spare)
{
	struct exs_conn_cfg cfg = sock_cfg(s);

	if (!spare)
		return exs_conn_create(s->fd, s->type, dev, iwarp, &cfg, s->id, &s->conn);
	return exs_spare_take(s->fd, s->type, dev, iwarp, &cfg, s->id, &s->conn);
}

/* The passive side of connection request `rq` on a new socket for `ls`. */
static int accept_one(struct exs_sock *ls, const ExsCtl__ConnRequest *rq,
		      const struct exs_accept_slot *slot)
{
	struct exs_sock *ns = exs_sock_alloc(ls->domain, ls->type);
	int ret;

	if (!ns)
		return -(errno ? errno : ENOMEM);
	exs_sock_set_state(ns, EXS_S_ACCEPTING);
	ns->listener_fd = ls->fd;
	ns->listener_id = ls->id;
	ns->accepted_by = *slot;
	ns->cfg_credits = ls->cfg_credits;
	ns->cfg_sp_max = ls->cfg_sp_max;
	ns->cfg_stream_buf = ls->cfg_stream_buf;
	ns->cfg_inline = ls->cfg_inline;
	ns->fd_flags = ls->fd_flags;
	ns->known_to_exsd = true;
	copy_addr(&ns->peer, &ns->peer_len, &rq->peer_addr);
	copy_addr(&ns->local, &ns->local_len, &rq->local_addr);
	ret = new_conn(ns, rq->device, rq->iwarp, true);
	if (!ret && rq->iwarp)
		exs_conn_await_hello(ns->conn); /* MPA: the initiator sends first */
	if (!ret && (ret = apply_attrs(ns->conn, rq->n_attrs, rq->attrs)) && EXS_DEBUG_ON())
		exs_debug("fd %d: the QP attributes of a request: %s", ns->fd, strerror(-ret));
	if (!ret)
		ret = send_qp_ready(ns, rq->conn, true);
	if (ret) {
		ns->known_to_exsd = false;
		exs_sock_free(ns);
	}
	return ret;
}

/* Pair pending accepts with pending connection requests. */
static void try_accept(struct exs_sock *ls)
{
	while (ls->acc_count && ls->req_count) {
		struct exs_accept_slot slot = ls->acc[ls->acc_head];
		ExsCtl__Msg *rm = ls->reqs[ls->req_head];
		int ret;

		ls->acc_head = (ls->acc_head + 1) % ls->acc_cap;
		ls->acc_count--;
		ls->req_head = (ls->req_head + 1) % ls->backlog;
		ls->req_count--;
		ret = accept_one(ls, rm->conn_request, &slot);
		if (ret) {
			if (EXS_DEBUG_ON())
				exs_debug("fd %d: cannot take a connection request: %s", ls->fd,
					  strerror(-ret));
			/* what this process lacked (memory, descriptors) is
			 * its own: the peer is refused (exs_accept(3)) */
			exs_sock_reject(rm->conn_request->conn, ECONNREFUSED);
			/* the accept keeps waiting for the next request */
			ls->acc_head = (ls->acc_head + ls->acc_cap - 1) % ls->acc_cap;
			ls->acc[ls->acc_head] = slot;
			ls->acc_count++;
		}
		exs_ctl__msg__free_unpacked(rm, NULL);
	}
}

int exs_broker_accept(struct exs_sock *s, struct exs_accept_slot *slots, int n)
{
	int i;

	if (s->state != EXS_S_LISTENING)
		return -EINVAL;
	if (s->listen_err)
		return -s->listen_err; /* the next exsd refused it (rejoin_main) */
	if (!s->known_to_exsd && !s->rejoin)
		return -ENETDOWN;
	if (s->acc_count + (uint32_t)n > s->acc_cap)
		return -ENOBUFS;
	for (i = 0; i < n; i++) {
		s->acc[(s->acc_head + s->acc_count) % s->acc_cap] = slots[i];
		s->acc_count++;
		exs_queue_ref(slots[i].q);
	}
	try_accept(s);
	return 0;
}

static void accept_done(struct exs_sock *ns)
{
	struct exs_accept_slot *a = &ns->accepted_by;
	exs_event_t ev;

	memset(&ev, 0, sizeof(ev));
	ev.exs_evt_socket = ns->listener_fd;
	ev.exs_evt_ahandle = a->aa.exs_ahandle;
	ev.exs_evt_type = EXS_EVT_ACCEPT;
	ev.exs_evt_union.exs_evt_accept.exs_evt_new_socket = ns->fd;
	ev.exs_evt_union.exs_evt_accept.exs_evt_addr = a->aa.exs_addr;
	if (a->aa.exs_addr && a->aa.exs_addrlen) {
		socklen_t n = a->aa.exs_addrlen < ns->peer_len ? a->aa.exs_addrlen : ns->peer_len;

		memcpy(a->aa.exs_addr, &ns->peer, n);
		ev.exs_evt_union.exs_evt_accept.exs_evt_addrlen = ns->peer_len;
	}
	exs_queue_post(a->q, &ev);
}

/* ---- connecting */

/* The early QP is not used: exsd routed s elsewhere, or never heard of it. */
static void drop_early(struct exs_sock *s)
{
	if (!s->early)
		return;
	s->early = false;
	exs_conn_destroy(s->conn);
	s->conn = NULL;
}

/* A QP for s before its route is known (exs_control.proto, Connect.early):
 * a spare of the device its kind was routed to last, in INIT with its
 * receives posted. 0 and `eq` filled, or -errno and no QP. */
static int take_early(struct exs_sock *s, ExsCtl__EarlyQp *eq, ExsCtl__QpAttr *init)
{
	struct exs_conn_cfg cfg = sock_cfg(s);
	uint32_t port;
	int ret;

	ret = exs_spare_take_early(s->fd, s->type, &cfg, s->id, &s->conn, &port, init);
	if (ret)
		return ret;
	s->early = true;
	ret = exs_conn_modify(s->conn, init);
	if (ret) {
		drop_early(s);
		return ret;
	}
	eq->device = s->conn->dev->name;
	eq->port_num = port;
	eq->qpn = s->conn->qp->qp_num;
	eq->init = init;
	return 0;
}

int exs_broker_connect(struct exs_sock *s, const struct sockaddr *a, socklen_t len,
		       const struct timeval *tmo, struct exs_queue *q, exs_ahandle_t ah)
{
	ExsCtl__Msg m;
	ExsCtl__Connect c = EXS_CTL__CONNECT__INIT;
	ExsCtl__Setup su = EXS_CTL__SETUP__INIT;
	ExsCtl__EarlyQp eq = EXS_CTL__EARLY_QP__INIT;
	ExsCtl__QpAttr init;
	int ret;

	switch (s->state) {
	case EXS_S_NEW:
	case EXS_S_BOUND:
		if (s->busy)
			return -EALREADY;
		break;
	case EXS_S_CONNECTING:
		return -EALREADY;
	case EXS_S_CONNECTED:
		return -EISCONN;
	default:
		return -EINVAL;
	}
	exs_sock_busy(s);
	ret = exs_ctl_ensure(); /* may wait for exsd's HelloReply */
	ret = call_end(s, ret, NULL);
	if (ret)
		return ret;
	exs_ctl_msg_init(&m);
	c.sock = s->id;
	c.addr.data = (uint8_t *)a;
	c.addr.len = len;
	c.type = (uint32_t)s->type;
	offer(s, &su);
	c.setup = &su;
	if (tmo)
		c.timeout_ms = (uint32_t)(tmo->tv_sec * 1000 + tmo->tv_usec / 1000) ?: 1;
	s->early = false;
	if (exs_g.ctl_early && !s->conn && !take_early(s, &eq, &init))
		c.early = &eq;
	m.body_case = EXS_CTL__MSG__BODY_CONNECT;
	m.connect = &c;
	ret = exs_ctl_send(&m);
	if (ret) {
		drop_early(s);
		return ret;
	}
	s->known_to_exsd = true;
	memcpy(&s->peer, a, len);
	s->peer_len = len;
	s->op_q = q;
	s->op_ah = ah;
	exs_queue_ref(q);
	exs_sock_set_state(s, EXS_S_CONNECTING);
	return 0;
}

/* A passive socket whose set-up failed: its accept goes back to the
 * listener (or fails if the listener is gone). */
static void requeue_accept(struct exs_sock *ns)
{
	struct exs_sock *ls = exs_sock_by_id(ns->listener_id);

	if (ls && ls->state == EXS_S_LISTENING && ls->acc_count < ls->acc_cap) {
		ls->acc_head = (ls->acc_head + ls->acc_cap - 1) % ls->acc_cap;
		ls->acc[ls->acc_head] = ns->accepted_by;
		ls->acc_count++;
	} else {
		exs_sock_post(ns->accepted_by.q, ns->listener_fd, EXS_EVT_ACCEPT,
			      ns->accepted_by.aa.exs_ahandle, ECONNABORTED);
	}
	ns->known_to_exsd = false;
	exs_sock_free(ns);
}

static void established(struct exs_sock *s, ExsCtl__Established *e)
{
	int ret = s->conn && e->setup ?
			  exs_conn_establish(s->conn, e->setup->credits, e->setup->sp_max,
					     e->setup->stream_buf,
					     s->state == EXS_S_CONNECTING) : -EPROTO;

	if (ret) {
		exs_sock_tell_exsd_close(s);
		if (s->state == EXS_S_CONNECTING)
			exs_sock_connect_failed(s, ret == -EPROTO ? EPROTO : ECONNRESET);
		else
			requeue_accept(s);
		return;
	}
	if (e->peer_addr.len)
		copy_addr(&s->peer, &s->peer_len, &e->peer_addr);
	if (e->local_addr.len)
		copy_addr(&s->local, &s->local_len, &e->local_addr);
	if (s->state == EXS_S_CONNECTING) {
		exs_sock_set_state(s, EXS_S_CONNECTED);
		exs_sock_post(s->op_q, s->fd, EXS_EVT_CONNECT, s->op_ah, 0);
		s->op_q = NULL;
	} else {
		exs_sock_set_state(s, EXS_S_CONNECTED);
		accept_done(s);
	}
	/* data that arrived before this point waits (conn.c's stash) */
	exs_sock_progress(s);
}

static void on_conn_error(struct exs_sock *s, int err)
{
	err = exs_ctl_errno(err, ECONNREFUSED);
	s->known_to_exsd = false; /* exsd has dropped its CM id */
	switch (s->state) {
	case EXS_S_CONNECTING:
		exs_sock_connect_failed(s, err);
		break;
	case EXS_S_ACCEPTING:
		requeue_accept(s);
		break;
	case EXS_S_CONNECTED:
	case EXS_S_CLOSING: /* exsd's cm_abort (exsctl disconnect), cm_client_gone */
		exs_conn_cm_lost(s->conn, err == ECONNABORTED ? EXS_CM_ABORTED
					  : err == ESRCH	 ? EXS_CM_PEER_GONE
								 : EXS_CM_LOST);
		exs_sock_maybe_finish_close(s);
		break;
	default:
		break;
	}
}

static bool conn_request(ExsCtl__Msg *m)
{
	ExsCtl__ConnRequest *rq = m->conn_request;
	struct exs_sock *ls = exs_sock_by_id(rq->sock);

	if (!ls || ls->state != EXS_S_LISTENING || ls->req_count == ls->backlog) {
		exs_sock_reject(rq->conn, ECONNREFUSED);
		return false;
	}
	ls->reqs[(ls->req_head + ls->req_count) % ls->backlog] = m;
	ls->req_count++;
	try_accept(ls);
	return true;
}

/* Connection request `conn`, queued on listener `ls`, died before an
 * accept took it (its connecting side gave up): take it out of the queue,
 * keeping the others in order, so that no accept waits on it. */
static void request_gone(struct exs_sock *ls, uint32_t conn)
{
	uint32_t i, kept = 0;

	if (ls->state != EXS_S_LISTENING)
		return;
	for (i = 0; i < ls->req_count; i++) {
		ExsCtl__Msg *rm = ls->reqs[(ls->req_head + i) % ls->backlog];

		if (rm->conn_request->conn == conn)
			exs_ctl__msg__free_unpacked(rm, NULL);
		else
			ls->reqs[(ls->req_head + kept++) % ls->backlog] = rm;
	}
	ls->req_count = kept;
}

/* Active side: the QP took the step exsd asked for (or failed to). */
static void qp_step_done(struct exs_sock *s, int ret)
{
	if (!ret)
		ret = send_qp_ready(s, 0, false);
	if (ret) {
		exs_sock_tell_exsd_close(s);
		exs_sock_connect_failed(s, -ret);
	}
}

/*
 * exsd's ownership check did not find s's QP given to this process, which
 * Linux 6.1's QP-number race can do (exs_control.proto, Rebuild): build
 * another connection while the refused one still holds its QP number,
 * give it the same attributes, let the refused one go, and name the new QP.
 */
static void rebuild(struct exs_sock *s, const ExsCtl__Rebuild *r)
{
	struct exs_conn *old = s->conn;
	bool passive = s->state == EXS_S_ACCEPTING;
	int ret;

	if (EXS_DEBUG_ON())
		exs_debug("fd %d: exsd did not find QP %u in the kernel's tracker: building another",
			  s->fd, old->qp->qp_num);
	s->conn = NULL;
	s->early = false; /* exsd took it, and asks for another */
	ret = new_conn(s, old->dev->name, old->iwarp, false);
	if (!ret && passive && old->iwarp)
		exs_conn_await_hello(s->conn);
	if (!ret)
		ret = apply_attrs(s->conn, r->n_attrs, r->attrs);
	exs_conn_destroy(old);
	if (!ret)
		ret = send_qp_ready(s, r->conn, passive);
	if (!ret)
		return;
	if (!passive) {
		qp_step_done(s, ret);
		return;
	}
	exs_sock_reject(r->conn, ECONNREFUSED); /* as accept_one does */
	requeue_accept(s);
}

/* ---- live counters for exsctl, asked for by exsd */

static void stats(uint32_t seq)
{
	ExsCtl__SockStats st[EXS_CTL_STATS_BATCH], *sp[EXS_CTL_STATS_BATCH];
	ExsCtl__StatsReply r = EXS_CTL__STATS_REPLY__INIT;
	ExsCtl__Msg m;
	struct exs_sock *s;
	size_t n = 0;

	exs_ctl_msg_init(&m);
	m.seq = seq;
	m.body_case = EXS_CTL__MSG__BODY_STATS_REPLY;
	m.stats_reply = &r;
	r.socks = sp;
	for (s = exs_g.sock_list; s; s = s->next) {
		ExsCtl__SockStats *x = &st[n];

		if (s->state != EXS_S_CONNECTED && s->state != EXS_S_CLOSING)
			continue;
		if (n == EXS_CTL_STATS_BATCH) {
			r.n_socks = n;
			r.more = true;
			exs_ctl_send(&m);
			n = 0;
			x = &st[0];
		}
		exs_ctl__sock_stats__init(x);
		x->sock = s->id;
		exs_conn_stats(s->conn, x);
		sp[n++] = x;
	}
	r.n_socks = n;
	r.more = false;
	exs_ctl_send(&m);
}

/* An event or request from exsd (progress thread). Takes `m`. */
void exs_broker_input(ExsCtl__Msg *m)
{
	struct exs_sock *s;
	int ret;

	switch (m->body_case) {
	case EXS_CTL__MSG__BODY_STATS_REQUEST:
		stats(m->seq); /* exsd's own request: its seq is not one of ours */
		break;
	case EXS_CTL__MSG__BODY_CONN_REQUEST:
		if (conn_request(m))
			return; /* kept until accepted */
		break;
	case EXS_CTL__MSG__BODY_ROUTE:
		s = exs_sock_by_id(m->route->sock);
		if (s && s->state == EXS_S_CONNECTING && (!s->conn || s->early)) {
			struct exs_conn *early = s->early ? s->conn : NULL;

			/* exsd did not take the early QP: a new one for this
			 * route is built while the early one still holds its
			 * number (the QP-number race of Rebuild) */
			s->conn = NULL;
			s->early = false;
			ret = new_conn(s, m->route->device, m->route->iwarp, true);
			if (!ret && m->route->init)
				ret = exs_conn_modify(s->conn, m->route->init);
			if (!ret && m->route->init)
				exs_spare_routed(s->type, m->route->device, m->route->port_num,
						 m->route->init);
			if (early)
				exs_conn_destroy(early);
			qp_step_done(s, ret);
		}
		break;
	case EXS_CTL__MSG__BODY_REBUILD:
		s = exs_sock_by_id(m->rebuild->sock);
		if (s && s->conn &&
		    (s->state == EXS_S_CONNECTING ? !m->rebuild->conn : s->state == EXS_S_ACCEPTING))
			rebuild(s, m->rebuild);
		break;
	case EXS_CTL__MSG__BODY_RTR:
		s = exs_sock_by_id(m->rtr->sock);
		if (s && s->state == EXS_S_CONNECTING && s->conn)
			qp_step_done(s, apply_attrs(s->conn, m->rtr->n_attrs, m->rtr->attrs));
		break;
	case EXS_CTL__MSG__BODY_ESTABLISHED:
		s = exs_sock_by_id(m->established->sock);
		if (s && (s->state == EXS_S_CONNECTING || s->state == EXS_S_ACCEPTING))
			established(s, m->established);
		break;
	case EXS_CTL__MSG__BODY_CONN_ERROR:
		s = exs_sock_by_id(m->conn_error->sock);
		if (s && m->conn_error->conn)
			request_gone(s, m->conn_error->conn);
		else if (s)
			on_conn_error(s, m->conn_error->err);
		break;
	default:
		break; /* unknown events from a newer exsd are ignored */
	}
	exs_ctl__msg__free_unpacked(m, NULL);
}

/* ---- exsd went away */

#define REJOIN_FIRST_MS 10	/* the first retry while exsd is not back */
#define REJOIN_MAX_MS 1000	/* and the longest wait between two */

/* A listener the next exsd refused: its waiting accepts end with `err`,
 * and so do later ones. */
static void listener_failed(struct exs_sock *s, int err)
{
	s->rejoin = false;
	s->listen_err = err;
	if (EXS_DEBUG_ON())
		exs_debug("fd %d: exsd refused to listen again: %s", s->fd, strerror(err));
	exs_sock_fail_accepts(s, err);
}

/* Tell the new exsd of established connection s (proto: Adopt). */
static int adopt_req(struct exs_sock *s)
{
	ExsCtl__Msg m;
	ExsCtl__Adopt a = EXS_CTL__ADOPT__INIT;
	ExsCtl__Setup su = EXS_CTL__SETUP__INIT;
	int ret;

	exs_ctl_msg_init(&m);
	a.sock = s->id;
	a.type = (uint32_t)s->type;
	a.qpn = s->conn->qp->qp_num;
	a.device = s->conn->dev->name;
	a.local_addr.data = (uint8_t *)&s->local;
	a.local_addr.len = s->local_len;
	a.peer_addr.data = (uint8_t *)&s->peer;
	a.peer_addr.len = s->peer_len;
	a.passive = s->listener_fd >= 0;
	su.credits = s->conn->credits;
	su.sp_max = s->conn->sp_max;
	su.stream_buf = exs_conn_stream_buf(s->conn);
	a.agreed = &su;
	m.body_case = EXS_CTL__MSG__BODY_ADOPT;
	m.adopt = &a;
	ret = call(s, &m, NULL);
	if (!ret)
		s->known_to_exsd = true; /* its close is exsd's to see again */
	return call_end(s, ret, NULL);
}

/* Made known to the next exsd: a listener (bound and listening again at
 * its address and port) or an IB/RoCE connection (adopted). */
static int rejoin(struct exs_sock *s)
{
	uint32_t port;
	int ret;

	if (s->state == EXS_S_LISTENING) {
		ret = bind_req(s, (struct sockaddr *)&s->local, s->local_len, &port);
		return ret ? ret : listen_req(s, s->backlog);
	}
	ret = exs_ctl_ensure();
	if (ret)
		return ret;
	return exs_g.ctl_adopt ? adopt_req(s) : -EOPNOTSUPP;
}

static struct exs_sock *to_rejoin(void)
{
	struct exs_sock *s;

	for (s = exs_g.sock_list; s; s = s->next)
		if (s->rejoin && (s->state == EXS_S_LISTENING ||
				  (s->state == EXS_S_CONNECTED && s->conn)))
			return s;
	return NULL;
}

/*
 * exs-rejoin: make every listener and IB/RoCE connection known to the exsd
 * that comes back, so that a server waiting in accept across a restart of
 * exsd goes on accepting, and exsctl lists the connections. Retries while
 * exsd is unreachable, every REJOIN_FIRST_MS doubling up to REJOIN_MAX_MS;
 * ends when nothing waits (closed sockets do not).
 */
static void *rejoin_main(void *arg)
{
	unsigned wait_ms = REJOIN_FIRST_MS;
	struct exs_sock *s;

	(void)arg;
	pthread_mutex_lock(&exs_g.lock);
	while ((s = to_rejoin())) {
		bool listener = s->state == EXS_S_LISTENING;
		int ret = rejoin(s);

		if (ret == -EBADF)
			continue; /* closed meanwhile, and gone */
		if (ret == -ENETDOWN || ret == -ETIMEDOUT) { /* not back yet */
			pthread_mutex_unlock(&exs_g.lock);
			usleep(wait_ms * 1000);
			wait_ms = wait_ms * 2 > REJOIN_MAX_MS ? REJOIN_MAX_MS : wait_ms * 2;
			pthread_mutex_lock(&exs_g.lock);
			continue;
		}
		wait_ms = REJOIN_FIRST_MS;
		if (ret && listener) {
			listener_failed(s, -ret);
			continue;
		}
		/* a connection the new exsd does not take keeps going, unlisted */
		s->rejoin = false;
		if (EXS_DEBUG_ON())
			exs_debug("fd %d: %s the new exsd%s%s", s->fd,
				  listener ? "listening again with" : "connection made known to",
				  ret ? ": " : "", ret ? strerror(-ret) : "");
	}
	exs_g.rejoining = false;
	pthread_mutex_unlock(&exs_g.lock);
	return NULL;
}

/* The channel to exsd dropped: exsd has forgotten our sockets. */
void exs_broker_ctl_lost(void)
{
	struct exs_sock *s, *next;
	bool any = false;

	exs_g.ctl_adopt = false; /* the next exsd says */
	for (s = exs_g.sock_list; s; s = next) {
		next = s->next; /* requeue_accept frees s */
		if (!s->known_to_exsd)
			continue;
		s->known_to_exsd = false;
		if (s->state == EXS_S_CONNECTING)
			exs_sock_connect_failed(s, ENETDOWN);
		else if (s->state == EXS_S_ACCEPTING)
			requeue_accept(s);
		else if (s->state == EXS_S_CONNECTED && s->conn && !s->conn->iwarp)
			any = s->rejoin = true; /* its QP is ours: it goes on */
	}
	/* A listener lives in exsd: the connection requests it had died with
	 * that exsd, and it is listed again with the next one; its accepts
	 * keep waiting. A pass of its own, after the one above:
	 * requeue_accept() may have given a listener back an accept it had
	 * already handed out. */
	for (s = exs_g.sock_list; s; s = s->next) {
		if (s->state != EXS_S_LISTENING || s->listen_err)
			continue;
		while (s->req_count) {
			exs_ctl__msg__free_unpacked(s->reqs[s->req_head], NULL);
			s->req_head = (s->req_head + 1) % s->backlog;
			s->req_count--;
		}
		any = s->rejoin = true;
	}
	if (any && !exs_g.rejoining) {
		pthread_t t;

		exs_g.rejoining = !exs_thread_start(&t, rejoin_main, NULL, "exs-rejoin");
		if (!exs_g.rejoining) /* no thread: the old way, accepts end */
			for (s = exs_g.sock_list; s; s = s->next)
				if (s->state == EXS_S_LISTENING && s->rejoin)
					listener_failed(s, ENETDOWN);
	}
}
