/*
 * EXS sockets: the fd table and each socket's life cycle (guide §4),
 * including the connection set-up that exsd brokers (DESIGN: user-managed
 * QPs). Everything here runs with exs_g.lock held; it posts connect,
 * accept and close events, and leaves data transfer to conn.c.
 */
#include <stdlib.h>
#include <string.h>

#include "exs_int.h"

static const char *const state_names[] = {
	[EXS_S_FREE] = "free",		 [EXS_S_NEW] = "new",
	[EXS_S_BOUND] = "bound",	 [EXS_S_LISTENING] = "listening",
	[EXS_S_CONNECTING] = "connecting", [EXS_S_ACCEPTING] = "accepting",
	[EXS_S_CONNECTED] = "connected", [EXS_S_CLOSING] = "closing",
};

const char *exs_sock_state_name(enum exs_sock_state s)
{
	return s <= EXS_S_CLOSING ? state_names[s] : "?";
}

struct exs_sock *exs_sock_get(int fd)
{
	if (fd < 0 || fd >= EXS_MAX_SOCKETS || !exs_g.socks)
		return NULL;
	return exs_g.socks[fd];
}

/*
 * exsd names a socket by its id: the fd and a generation. An fd is reused
 * once closed, and exsd may still report on the connection that had it;
 * the generation keeps such a late event from hitting the new socket.
 */
struct exs_sock *exs_sock_by_id(uint32_t id)
{
	struct exs_sock *s = exs_sock_get((int)(id & 0xffff));

	return s && s->id == id ? s : NULL;
}

struct exs_sock *exs_sock_alloc(int domain, int type)
{
	static uint32_t generation;
	struct exs_sock *s;
	int fd;

	for (fd = 0; fd < EXS_MAX_SOCKETS && exs_g.socks[fd]; fd++)
		;
	if (fd == EXS_MAX_SOCKETS) {
		errno = EMFILE;
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->fd = fd;
	generation = (generation + 1) & 0x7fff;
	s->id = (generation << 16) | (uint32_t)fd;
	s->state = EXS_S_NEW;
	s->domain = domain;
	s->type = type;
	s->cfg_credits = exs_g.defaults.credits;
	s->cfg_sp_max = exs_g.defaults.sp_max;
	s->cfg_stream_buf = exs_g.defaults.stream_buffer;
	s->listener_fd = -1;
	exs_g.socks[fd] = s;
	return s;
}

void exs_sock_free(struct exs_sock *s)
{
	uint32_t i;

	exs_conn_destroy(s->conn);
	for (i = 0; i < s->req_count; i++)
		exs_ctl__msg__free_unpacked(
			s->reqs[(s->req_head + i) % s->backlog], NULL);
	free(s->reqs);
	free(s->acc);
	exs_g.socks[s->fd] = NULL;
	free(s);
	pthread_cond_broadcast(&exs_g.cond);
}

static void set_state(struct exs_sock *s, enum exs_sock_state st)
{
	s->state = st;
	pthread_cond_broadcast(&exs_g.cond);
}

static void copy_addr(struct sockaddr_storage *dst, socklen_t *len, const ProtobufCBinaryData *b)
{
	size_t n = b->len < sizeof(*dst) ? b->len : sizeof(*dst);

	memset(dst, 0, sizeof(*dst));
	memcpy(dst, b->data, n);
	*len = (socklen_t)n;
}

static void tell_exsd_close(struct exs_sock *s)
{
	ExsCtl__Msg m;
	ExsCtl__Close c = EXS_CTL__CLOSE__INIT;

	if (!s->known_to_exsd)
		return;
	s->known_to_exsd = false;
	if (exs_g.ctl_fd < 0)
		return; /* exsd forgot everything of ours when the channel dropped */
	exs_ctl_msg_init(&m);
	c.sock = s->id;
	m.body_case = EXS_CTL__MSG__BODY_CLOSE;
	m.close = &c;
	exs_ctl_send(&m);
}

static void post_simple(struct exs_queue *q, int fd, int type, exs_ahandle_t ah, int err)
{
	exs_event_t ev;

	if (!q)
		return;
	memset(&ev, 0, sizeof(ev));
	ev.exs_evt_errno = err;
	ev.exs_evt_socket = fd;
	ev.exs_evt_ahandle = ah;
	ev.exs_evt_type = type;
	exs_queue_post(q, &ev);
}

/* What this socket offers in the setup negotiation (guide §6.2). */
static void offer(const struct exs_sock *s, ExsCtl__Setup *su)
{
	su->credits = s->cfg_credits;
	su->sp_max = s->cfg_sp_max;
	su->stream_buf = s->cfg_stream_buf;
}

/* ---- listening and accepting */

int exs_sock_bind(struct exs_sock *s, const struct sockaddr *a, socklen_t len)
{
	ExsCtl__Msg m, *r = NULL;
	ExsCtl__Bind b = EXS_CTL__BIND__INIT;
	int ret;

	if (s->state != EXS_S_NEW)
		return -EINVAL;
	exs_ctl_msg_init(&m);
	b.sock = s->id;
	b.addr.data = (uint8_t *)a;
	b.addr.len = len;
	b.type = (uint32_t)s->type;
	m.body_case = EXS_CTL__MSG__BODY_BIND;
	m.bind = &b;
	ret = exs_ctl_call(&m, &r);
	if (ret)
		return ret;
	s->known_to_exsd = true;
	memcpy(&s->local, a, len);
	s->local_len = len;
	if (r->body_case == EXS_CTL__MSG__BODY_BIND_REPLY)
		((struct sockaddr_in *)&s->local)->sin_port = htons((uint16_t)r->bind_reply->port);
	exs_ctl__msg__free_unpacked(r, NULL);
	set_state(s, EXS_S_BOUND);
	return 0;
}

int exs_sock_listen(struct exs_sock *s, int backlog)
{
	ExsCtl__Msg m;
	ExsCtl__Listen l = EXS_CTL__LISTEN__INIT;
	int ret;

	if (s->state == EXS_S_NEW) {
		/* like listen(2): an unbound socket gets the wildcard and a free port */
		struct sockaddr_storage any = { .ss_family = (sa_family_t)s->domain };

		ret = exs_sock_bind(s, (struct sockaddr *)&any,
				   s->domain == AF_INET ? sizeof(struct sockaddr_in)
							: sizeof(struct sockaddr_in6));
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
	exs_ctl_msg_init(&m);
	l.sock = s->id;
	l.backlog = (uint32_t)backlog;
	m.body_case = EXS_CTL__MSG__BODY_LISTEN;
	m.listen = &l;
	ret = exs_ctl_call(&m, NULL);
	if (ret)
		return ret;
	set_state(s, EXS_S_LISTENING);
	return 0;
}

static void reject(uint32_t conn, int err)
{
	ExsCtl__Msg m;
	ExsCtl__Reject r = EXS_CTL__REJECT__INIT;

	exs_ctl_msg_init(&m);
	r.conn = conn;
	r.err = err;
	m.body_case = EXS_CTL__MSG__BODY_REJECT;
	m.reject = &r;
	exs_ctl_send(&m);
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

static int send_qp_ready(struct exs_sock *s, uint32_t conn, bool with_setup)
{
	ExsCtl__Msg m;
	ExsCtl__QpReady q = EXS_CTL__QP_READY__INIT;
	ExsCtl__Setup su = EXS_CTL__SETUP__INIT;

	exs_ctl_msg_init(&m);
	q.sock = s->id;
	q.qpn = s->conn->qp->qp_num;
	q.conn = conn;
	if (with_setup) {
		offer(s, &su);
		q.setup = &su;
	}
	m.body_case = EXS_CTL__MSG__BODY_QP_READY;
	m.qp_ready = &q;
	return exs_ctl_send(&m);
}

/* Pair pending accepts with pending connection requests. */
static void try_accept(struct exs_sock *ls)
{
	while (ls->acc_count && ls->req_count) {
		struct exs_accept_slot slot = ls->acc[ls->acc_head];
		ExsCtl__Msg *rm = ls->reqs[ls->req_head];
		ExsCtl__ConnRequest *rq = rm->conn_request;
		struct exs_sock *ns;
		int ret;

		ls->acc_head = (ls->acc_head + 1) % ls->acc_cap;
		ls->acc_count--;
		ls->req_head = (ls->req_head + 1) % ls->backlog;
		ls->req_count--;
		ns = exs_sock_alloc(ls->domain, ls->type);
		ret = ns ? 0 : -(errno ? errno : ENOMEM);
		if (ns) {
			ns->state = EXS_S_ACCEPTING;
			ns->listener_fd = ls->fd;
			ns->listener_id = ls->id;
			ns->accepted_by = slot;
			ns->cfg_credits = ls->cfg_credits;
			ns->cfg_sp_max = ls->cfg_sp_max;
			ns->cfg_stream_buf = ls->cfg_stream_buf;
			ns->known_to_exsd = true;
			copy_addr(&ns->peer, &ns->peer_len, &rq->peer_addr);
			copy_addr(&ns->local, &ns->local_len, &rq->local_addr);
			ret = exs_conn_create(ns, rq->device, rq->iwarp, ns->cfg_credits);
			if (!ret)
				ns->conn->await_hello = rq->iwarp; /* MPA: the initiator sends first */
			if (!ret)
				ret = apply_attrs(ns->conn, rq->n_attrs, rq->attrs);
			if (!ret)
				ret = send_qp_ready(ns, rq->conn, true);
		}
		if (ret) {
			reject(rq->conn, -ret);
			if (ns) {
				ns->known_to_exsd = false;
				exs_sock_free(ns);
			}
			/* the accept keeps waiting for the next request */
			ls->acc_head = (ls->acc_head + ls->acc_cap - 1) % ls->acc_cap;
			ls->acc[ls->acc_head] = slot;
			ls->acc_count++;
		}
		exs_ctl__msg__free_unpacked(rm, NULL);
	}
}

int exs_sock_accept(struct exs_sock *s, struct exs_accept_slot *slots, int n)
{
	int i;

	if (s->state != EXS_S_LISTENING)
		return -EINVAL;
	if (!s->known_to_exsd)
		return -ENETDOWN; /* its exsd went away (see exs_sock_ctl_lost) */
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

int exs_sock_connect(struct exs_sock *s, const struct sockaddr *a, socklen_t len,
		     const struct timeval *tmo, struct exs_queue *q, exs_ahandle_t ah, int *done)
{
	ExsCtl__Msg m;
	ExsCtl__Connect c = EXS_CTL__CONNECT__INIT;
	ExsCtl__Setup su = EXS_CTL__SETUP__INIT;
	int ret;

	(void)done;
	switch (s->state) {
	case EXS_S_NEW:
	case EXS_S_BOUND:
		break;
	case EXS_S_CONNECTING:
		return -EALREADY;
	case EXS_S_CONNECTED:
		return -EISCONN;
	default:
		return -EINVAL;
	}
	exs_ctl_msg_init(&m);
	c.sock = s->id;
	c.addr.data = (uint8_t *)a;
	c.addr.len = len;
	c.type = (uint32_t)s->type;
	offer(s, &su);
	c.setup = &su;
	if (tmo)
		c.timeout_ms = (uint32_t)(tmo->tv_sec * 1000 + tmo->tv_usec / 1000) ?: 1;
	m.body_case = EXS_CTL__MSG__BODY_CONNECT;
	m.connect = &c;
	ret = exs_ctl_ensure();
	if (!ret)
		ret = exs_ctl_send(&m);
	if (ret)
		return ret;
	s->known_to_exsd = true;
	memcpy(&s->peer, a, len);
	s->peer_len = len;
	s->op_q = q;
	s->op_ah = ah;
	exs_queue_ref(q);
	set_state(s, EXS_S_CONNECTING);
	return 0;
}

static void connect_failed(struct exs_sock *s, int err)
{
	exs_conn_destroy(s->conn);
	s->conn = NULL;
	/* exsd dropped its CM id, and with it any binding: start over */
	s->known_to_exsd = false;
	s->local_len = 0;
	set_state(s, EXS_S_NEW);
	post_simple(s->op_q, s->fd, EXS_EVT_CONNECT, s->op_ah, err);
	s->op_q = NULL;
}

static void established(struct exs_sock *s, ExsCtl__Established *e)
{
	uint32_t cr = e->setup ? e->setup->credits : 0;

	if (!s->conn || cr == 0 || cr > s->conn->alloc) {
		tell_exsd_close(s);
		if (s->state == EXS_S_CONNECTING)
			connect_failed(s, EPROTO);
		return;
	}
	s->conn->credits = cr;
	if (e->peer_addr.len)
		copy_addr(&s->peer, &s->peer_len, &e->peer_addr);
	if (e->local_addr.len)
		copy_addr(&s->local, &s->local_len, &e->local_addr);
	if (s->state == EXS_S_CONNECTING) {
		/* iWARP: the passive side waits for this before it sends */
		if (s->conn->iwarp && exs_conn_hello(s->conn)) {
			tell_exsd_close(s);
			connect_failed(s, ECONNRESET);
			return;
		}
		set_state(s, EXS_S_CONNECTED);
		post_simple(s->op_q, s->fd, EXS_EVT_CONNECT, s->op_ah, 0);
		s->op_q = NULL;
	} else if (s->state == EXS_S_ACCEPTING) {
		set_state(s, EXS_S_CONNECTED);
		accept_done(s);
	}
	/* data that arrived before this point waits in the CQ */
	exs_conn_progress(s);
}

void exs_sock_conn_broken(struct exs_sock *s, int err)
{
	struct exs_conn *c = s->conn;
	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_ERR };

	if (!c || c->reset)
		return;
	c->reset = true;
	ibv_modify_qp(c->qp, &qa, IBV_QP_STATE); /* flush what is posted */
	exs_conn_fail_all(s, err);
}

static void requeue_accept(struct exs_sock *ns)
{
	struct exs_sock *ls = exs_sock_by_id(ns->listener_id);

	if (ls && ls->state == EXS_S_LISTENING && ls->acc_count < ls->acc_cap) {
		ls->acc_head = (ls->acc_head + ls->acc_cap - 1) % ls->acc_cap;
		ls->acc[ls->acc_head] = ns->accepted_by;
		ls->acc_count++;
	} else {
		post_simple(ns->accepted_by.q, ns->listener_fd, EXS_EVT_ACCEPT,
			    ns->accepted_by.aa.exs_ahandle, ECONNABORTED);
	}
	ns->known_to_exsd = false;
	exs_sock_free(ns);
}

static void on_conn_error(struct exs_sock *s, int err)
{
	if (err <= 0 || err >= 4096)
		err = EIO;
	s->known_to_exsd = false; /* exsd has dropped its CM id */
	switch (s->state) {
	case EXS_S_CONNECTING:
		connect_failed(s, err);
		break;
	case EXS_S_ACCEPTING:
		requeue_accept(s);
		break;
	case EXS_S_CONNECTED:
	case EXS_S_CLOSING:
		/* A CM disconnect only says the peer's exsd dropped the connection.
		 * What the peer sent before it (data, FIN) is in our CQ: take it
		 * first, so a graceful close is not mistaken for a reset. Without
		 * a FIN the peer may be alive and only its exsd restarted: on
		 * RoCE/IB the QPs live in the applications, so ask the peer
		 * itself (PING) before failing anything. An iWARP connection is
		 * the CM endpoint's: it ended with it. */
		exs_conn_progress(s);
		if (s->conn && !s->conn->iwarp && !s->conn->fin_rcvd && !s->conn->reset)
			exs_conn_probe(s);
		else if (s->conn)
			exs_sock_conn_broken(s, ECONNRESET);
		exs_sock_maybe_finish_close(s);
		break;
	default:
		break;
	}
}

static void conn_request(ExsCtl__Msg *m, bool *kept)
{
	ExsCtl__ConnRequest *rq = m->conn_request;
	struct exs_sock *ls = exs_sock_by_id(rq->sock);

	if (!ls || ls->state != EXS_S_LISTENING || ls->req_count == ls->backlog) {
		reject(rq->conn, ECONNREFUSED);
		return;
	}
	ls->reqs[(ls->req_head + ls->req_count) % ls->backlog] = m;
	ls->req_count++;
	*kept = true;
	try_accept(ls);
}

/* Active side: the QP took the step exsd asked for (or failed to). */
static void qp_step_done(struct exs_sock *s, int ret)
{
	if (!ret)
		ret = send_qp_ready(s, 0, false);
	if (ret) {
		tell_exsd_close(s);
		connect_failed(s, -ret);
	}
}

/* An event from exsd. Returns true when it kept `m`. */
bool exs_sock_event(ExsCtl__Msg *m)
{
	struct exs_sock *s;
	bool kept = false;
	int ret;

	switch (m->body_case) {
	case EXS_CTL__MSG__BODY_CONN_REQUEST:
		conn_request(m, &kept);
		break;
	case EXS_CTL__MSG__BODY_ROUTE:
		s = exs_sock_by_id(m->route->sock);
		if (s && s->state == EXS_S_CONNECTING && !s->conn) {
			ret = exs_conn_create(s, m->route->device, m->route->iwarp, s->cfg_credits);
			if (!ret && m->route->init)
				ret = exs_conn_modify(s->conn, m->route->init);
			qp_step_done(s, ret);
		}
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
		if (s)
			on_conn_error(s, m->conn_error->err);
		break;
	default:
		break; /* unknown events from a newer exsd are ignored */
	}
	return kept;
}

/* The channel to exsd dropped: exsd has forgotten our sockets. */
void exs_sock_ctl_lost(void)
{
	int fd;

	for (fd = 0; fd < EXS_MAX_SOCKETS; fd++) {
		struct exs_sock *s = exs_g.socks[fd];

		if (!s || !s->known_to_exsd)
			continue;
		s->known_to_exsd = false;
		if (s->state == EXS_S_CONNECTING)
			connect_failed(s, ENETDOWN);
		else if (s->state == EXS_S_ACCEPTING)
			requeue_accept(s);
	}
	/* A listener lives in exsd: the accepts waiting on it end with ENETDOWN
	 * (the next exsd knows nothing of it). Connections keep going. A pass
	 * of its own, after the one above: requeue_accept() may have given a
	 * listener back an accept it had already handed out. */
	for (fd = 0; fd < EXS_MAX_SOCKETS; fd++) {
		struct exs_sock *s = exs_g.socks[fd];

		if (!s || s->state != EXS_S_LISTENING)
			continue;
		while (s->acc_count) {
			struct exs_accept_slot *a = &s->acc[s->acc_head];

			s->acc_head = (s->acc_head + 1) % s->acc_cap;
			s->acc_count--;
			post_simple(a->q, s->fd, EXS_EVT_ACCEPT, a->aa.exs_ahandle, ENETDOWN);
		}
	}
}

/* ---- live counters for exsctl, asked for by exsd */

void exs_sock_stats(uint32_t seq)
{
	ExsCtl__SockStats st[EXS_CTL_STATS_BATCH], *sp[EXS_CTL_STATS_BATCH];
	ExsCtl__StatsReply r = EXS_CTL__STATS_REPLY__INIT;
	ExsCtl__Msg m;
	struct exs_conn *c;
	size_t n = 0;

	exs_ctl_msg_init(&m);
	m.seq = seq;
	m.body_case = EXS_CTL__MSG__BODY_STATS_REPLY;
	m.stats_reply = &r;
	r.socks = sp;
	for (c = exs_g.conns; c; c = c->next) {
		struct exs_sock *s = c->owner;
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
		x->send_credits_used = c->alloc - c->nsfree;
		x->recv_credits_used = c->alloc - c->nrfree;
		x->peer_adverts = c->ad_count;
		x->sends_queued = c->sf_count;
		x->bytes_sent = c->bytes_sent;
		x->bytes_received = c->bytes_rcvd;
		x->sends = c->sends;
		x->receives = c->recvs;
		x->errors = c->errors;
		sp[n++] = x;
	}
	r.n_socks = n;
	r.more = false;
	exs_ctl_send(&m);
}

/* ---- shutdown (guide §4.5) */

static void shut_post(struct exs_sock *s, struct exs_shut_op *op, int err)
{
	post_simple(op->q, s->fd, EXS_EVT_SHUTDOWN, op->ah, err);
	op->dirs = 0;
}

/* Move started directions on and complete the operations they finish; a
 * broken connection completes what is left with ECONNRESET. */
static void shut_check(struct exs_sock *s)
{
	struct exs_conn *c = s->conn;
	int i;

	if (!c || (!s->shut[0].dirs && !s->shut[1].dirs))
		return;
	if (c->wr_shut && !c->fin_posted && !c->reset && exs_conn_sends_idle(c) &&
	    exs_conn_post_fin(s))
		exs_sock_conn_broken(s, ECONNRESET);
	if (c->wr_shut && c->fin_done)
		s->shut_done |= EXS_DIR_WR;
	if (c->rd_shut && (c->rd_shut_acked || c->fin_rcvd))
		s->shut_done |= EXS_DIR_RD;
	for (i = 0; i < 2; i++) {
		struct exs_shut_op *op = &s->shut[i];

		if (!op->dirs)
			continue;
		if (!(op->dirs & ~s->shut_done))
			shut_post(s, op, 0);
		else if (c->reset)
			shut_post(s, op, ECONNRESET);
	}
}

int exs_sock_shutdown(struct exs_sock *s, int dirs, struct exs_queue *q, exs_ahandle_t ah)
{
	struct exs_conn *c = s->conn;
	struct exs_shut_op *op;
	int ret = 0;

	if (s->state != EXS_S_CONNECTED)
		return -ENOTCONN;
	if (c->reset && !c->fin_rcvd)
		return -ECONNRESET;
	if (dirs & s->shut_started & ~s->shut_done)
		return -EBUSY;
	op = s->shut[0].dirs ? &s->shut[1] : &s->shut[0];
	*op = (struct exs_shut_op){ .q = q, .ah = ah, .dirs = dirs };
	exs_queue_ref(q);
	if ((dirs & EXS_DIR_RD) && !(s->shut_started & EXS_DIR_RD))
		ret = exs_conn_shut_rd(s);
	if ((dirs & EXS_DIR_WR) && !(s->shut_started & EXS_DIR_WR))
		c->wr_shut = true; /* FIN once the sends already started are placed */
	s->shut_started |= dirs;
	if (ret)
		exs_sock_conn_broken(s, ECONNRESET);
	shut_check(s); /* a direction already shut: a no-op, its event now */
	return 0;
}

/* ---- closing */

static void finish_close(struct exs_sock *s)
{
	struct exs_queue *q = s->close_q;
	exs_ahandle_t ah = s->close_ah;
	int fd = s->fd;

	if (s->state == EXS_S_CLOSING)
		exs_g.nclosing--;
	for (int i = 0; i < 2; i++)
		if (s->shut[i].dirs)
			shut_post(s, &s->shut[i], ECONNABORTED);

	tell_exsd_close(s);
	exs_sock_free(s);
	post_simple(q, fd, EXS_EVT_CLOSE, ah, 0);
}

void exs_sock_maybe_finish_close(struct exs_sock *s)
{
	struct exs_conn *c = s->conn;

	shut_check(s);
	if (s->state != EXS_S_CLOSING)
		return;
	if (!c->fin_posted && !c->reset && exs_conn_sends_idle(c)) {
		if (exs_conn_post_fin(s))
			exs_sock_conn_broken(s, ECONNRESET);
		else
			s->close_deadline_ms = exs_now_ms() + EXS_FIN_MS;
	}
	/* A broken connection has nothing left to deliver; an abort waits for
	 * its ABORT to leave (or for the deadline). */
	if (c->fin_done || (c->reset && !c->aborting)) {
		exs_conn_fail_all(s, ECONNABORTED);
		finish_close(s);
	}
}

/* Progress thread, every tick while sockets close or probe: nothing lingers
 * forever, and a peer that does not answer its PING is gone. */
void exs_sock_tick(uint64_t now)
{
	struct exs_conn *c, *next;

	/* a closing socket is a connected one: it is on exs_g.conns */
	for (c = exs_g.conns; c; c = next) {
		struct exs_sock *s = c->owner;

		next = c->next; /* maybe_finish_close may free c */
		if (c->probing) {
			exs_conn_probe_tick(s, now);
			exs_sock_maybe_finish_close(s);
			continue;
		}
		if (s->state != EXS_S_CLOSING || now < s->close_deadline_ms)
			continue;
		if (!s->conn->fin_posted) {
			/* sends the peer never asked for: give up on them, and say so */
			exs_conn_abort(s);
			s->close_deadline_ms = now + EXS_FIN_MS;
		} else {
			s->conn->fin_done = true; /* the FIN/ABORT never completed */
		}
		exs_sock_maybe_finish_close(s);
	}
}

int exs_sock_close(struct exs_sock *s, int flags, struct exs_queue *q, exs_ahandle_t ah, int *done)
{
	uint32_t i;

	(void)done;
	if (s->state == EXS_S_CLOSING || s->state == EXS_S_ACCEPTING)
		return -EBADF;
	s->close_q = q;
	s->close_ah = ah;
	exs_queue_ref(q);
	switch (s->state) {
	case EXS_S_LISTENING:
		for (i = 0; i < s->acc_count; i++) {
			struct exs_accept_slot *a = &s->acc[(s->acc_head + i) % s->acc_cap];

			post_simple(a->q, s->fd, EXS_EVT_ACCEPT, a->aa.exs_ahandle, ECONNABORTED);
		}
		s->acc_count = 0;
		while (s->req_count) {
			ExsCtl__Msg *rm = s->reqs[s->req_head];

			reject(rm->conn_request->conn, ECONNREFUSED);
			exs_ctl__msg__free_unpacked(rm, NULL);
			s->req_head = (s->req_head + 1) % s->backlog;
			s->req_count--;
		}
		finish_close(s);
		return 0;
	case EXS_S_CONNECTING:
		tell_exsd_close(s);
		connect_failed(s, ECONNABORTED);
		finish_close(s);
		return 0;
	case EXS_S_CONNECTED:
		set_state(s, EXS_S_CLOSING);
		exs_g.nclosing++;
		s->close_deadline_ms = exs_now_ms() + ((flags & EXS_DONTLINGER) ? EXS_FIN_MS : EXS_LINGER_MS);
		exs_progress_wake();
		if (flags & EXS_DONTLINGER)
			exs_conn_abort(s);
		exs_sock_maybe_finish_close(s);
		return 0;
	default:
		finish_close(s);
		return 0;
	}
}
