/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exsctl's queries: exsd's sockets, clients, devices and configuration,
 * live counters gathered from each libexs on demand, and the one action an
 * observer may take (Disconnect). Anyone may list; what each observer sees
 * of a socket is view.c's (as ss(8): owner and counters of another uid's
 * socket only to root); only root or the owner may disconnect.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exsd.h"

#define QUERY_STATS_MS 500
#define REPLY_BATCH 12

struct query {
	uint32_t id;
	struct client *observer;
	uint32_t seq;
	ExsCtl__Query__What what;
	uint32_t *waiting; /* ids of clients whose StatsReply is due */
	unsigned nwaiting;
	struct event *timer;
	struct query *next;
};

static bool wanted(const struct ep *e, ExsCtl__Query__What what)
{
	if (e->dead)
		return false;
	switch (what) {
	case EXS_CTL__QUERY__WHAT__CONNS:
		return e->has_sock && e->state != EP_BOUND && e->state != EP_LISTENING;
	case EXS_CTL__QUERY__WHAT__LISTENERS:
		return e->state == EP_LISTENING;
	case EXS_CTL__QUERY__WHAT__PORTS:
		return e->state == EP_BOUND || e->state == EP_LISTENING || e->state == EP_ESTABLISHED;
	default:
		return false;
	}
}

static void send_reply(struct client *o, uint32_t seq, ExsCtl__QueryReply *r, bool more)
{
	ExsCtl__Msg m;

	out_msg_init(&m);
	m.seq = seq;
	r->more = more;
	m.body_case = EXS_CTL__MSG__BODY_QUERY_REPLY;
	m.query_reply = r;
	out_send(o, &m);
}

static void reply_socks(struct client *o, uint32_t seq, ExsCtl__Query__What what)
{
	ExsCtl__QueryReply r = EXS_CTL__QUERY_REPLY__INIT;
	ExsCtl__SockInfo info[REPLY_BATCH], *ip[REPLY_BATCH];
	struct info_buf bufs[REPLY_BATCH];
	size_t n = 0;

	r.socks = ip;
	for (struct client *c = exsd.clients; c; c = c->next)
		for (struct ep *e = c->eps; e; e = e->next) {
			if (!wanted(e, what))
				continue;
			if (n == REPLY_BATCH) {
				r.n_socks = n;
				send_reply(o, seq, &r, true);
				n = 0;
			}
			view_fill_info(&info[n], &bufs[n], e, o);
			ip[n] = &info[n];
			n++;
		}
	r.n_socks = n;
	send_reply(o, seq, &r, false);
}

static void reply_clients(struct client *o, uint32_t seq)
{
	ExsCtl__QueryReply r = EXS_CTL__QUERY_REPLY__INIT;
	ExsCtl__ClientInfo info[REPLY_BATCH], *ip[REPLY_BATCH];
	size_t n = 0;

	r.clients = ip;
	for (struct client *c = exsd.clients; c; c = c->next) {
		ExsCtl__ClientInfo *i = &info[n];

		if (n == REPLY_BATCH) {
			r.n_clients = n;
			send_reply(o, seq, &r, true);
			n = 0;
			i = &info[0];
		}
		exs_ctl__client_info__init(i);
		i->id = c->id;
		i->uid = c->uid;
		i->observer = c->observer;
		i->age_ms = now_ms() - c->created_ms;
		i->pid = view_may_see(o, c) ? c->pid : -1;
		i->comm = view_may_see(o, c) ? c->comm : "";
		for (struct ep *e = c->eps; e; e = e->next) {
			i->sockets++;
			i->listeners += e->state == EP_LISTENING;
			i->connections += e->state == EP_ESTABLISHED;
		}
		ip[n++] = i;
	}
	r.n_clients = n;
	send_reply(o, seq, &r, false);
}

static void reply_devices(struct client *o, uint32_t seq)
{
	ExsCtl__QueryReply r = EXS_CTL__QUERY_REPLY__INIT;
	ExsCtl__DeviceInfo info[REPLY_BATCH], *ip[REPLY_BATCH];
	struct ibv_device **list;
	size_t n = 0;
	int nd = 0;

	r.devices = ip;
	list = ibv_get_device_list(&nd);
	for (int k = 0; list && k < nd && n < REPLY_BATCH; k++) {
		struct ibv_context *ctx = ibv_open_device(list[k]);
		struct ibv_port_attr pa;
		ExsCtl__DeviceInfo *i = &info[n];

		exs_ctl__device_info__init(i);
		i->name = (char *)ibv_get_device_name(list[k]);
		i->transport = list[k]->transport_type == IBV_TRANSPORT_IWARP ? "iWARP" : "IB/RoCE";
		i->port = 1;
		i->state = "?";
		if (ctx && !ibv_query_port(ctx, 1, &pa)) {
			i->state = (char *)ibv_port_state_str(pa.state);
			i->active_mtu = 128u << pa.active_mtu;
			i->max_msg_sz = pa.max_msg_sz;
		}
		if (ctx)
			ibv_close_device(ctx);
		ip[n++] = i;
	}
	r.n_devices = n;
	send_reply(o, seq, &r, false);
	if (list)
		ibv_free_device_list(list);
}

/* Every exs.conf key as "section.key", then the protocol versions. */
static void reply_config(struct client *o, uint32_t seq)
{
	enum { N = 24 };
	ExsCtl__QueryReply r = EXS_CTL__QUERY_REPLY__INIT;
	ExsCtl__ConfigItem it[N], *ip[N];
	char k[N][48], v[N][EXSD_CONFIG_VALUE_MAX];
	const char *sec, *name;
	size_t n = 0;

	for (; n < N - 2 && !config_get(&exsd.conf, n, &sec, &name, v[n], sizeof(v[n])); n++)
		snprintf(k[n], sizeof(k[n]), "%s.%s", sec, name);
	snprintf(k[n], sizeof(k[n]), "control_protocol");
	snprintf(v[n++], sizeof(v[0]), "%d", EXS_CTL_VERSION);
	snprintf(k[n], sizeof(k[n]), "wire_protocol");
	snprintf(v[n++], sizeof(v[0]), "%d", EXS_WIRE_VERSION);
	for (size_t i = 0; i < n; i++) {
		exs_ctl__config_item__init(&it[i]);
		it[i].key = k[i];
		it[i].value = v[i];
		ip[i] = &it[i];
	}
	r.config = ip;
	r.n_config = n;
	send_reply(o, seq, &r, false);
}

/* ---- connections: first gather live counters from every libexs */

static void query_finish(struct query *q)
{
	struct query **p;

	for (p = &exsd.queries; *p; p = &(*p)->next)
		if (*p == q) {
			*p = q->next;
			break;
		}
	if (q->observer)
		reply_socks(q->observer, q->seq, q->what);
	event_free(q->timer);
	free(q->waiting);
	free(q);
}

static void on_query_timeout(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	query_finish(arg); /* whoever did not answer keeps stale counters (live = false) */
}

int observe_query(struct client *o, uint32_t seq, ExsCtl__Query *qm)
{
	struct timeval tv = { 0, QUERY_STATS_MS * 1000 };
	struct query *q;

	switch (qm->what) {
	case EXS_CTL__QUERY__WHAT__CLIENTS:
		reply_clients(o, seq);
		return 0;
	case EXS_CTL__QUERY__WHAT__DEVICES:
		reply_devices(o, seq);
		return 0;
	case EXS_CTL__QUERY__WHAT__CONFIG:
		reply_config(o, seq);
		return 0;
	case EXS_CTL__QUERY__WHAT__LISTENERS:
	case EXS_CTL__QUERY__WHAT__PORTS:
		reply_socks(o, seq, qm->what);
		return 0;
	case EXS_CTL__QUERY__WHAT__CONNS:
		break;
	default:
		return -EINVAL;
	}
	q = calloc(1, sizeof(*q));
	if (!q || !(q->waiting = calloc(exsd.nclients + 1, sizeof(uint32_t)))) {
		free(q);
		return -ENOMEM;
	}
	q->id = ++exsd.next_ep; /* any unique number will do as the seq */
	q->observer = o;
	q->seq = seq;
	q->what = qm->what;
	q->timer = evtimer_new(exsd.base, on_query_timeout, q);
	q->next = exsd.queries;
	exsd.queries = q;
	for (struct client *c = exsd.clients; c; c = c->next) {
		bool any = false;
		ExsCtl__Msg m;
		ExsCtl__StatsRequest sr = EXS_CTL__STATS_REQUEST__INIT;

		for (struct ep *e = c->eps; e; e = e->next)
			if (e->state == EP_ESTABLISHED && view_may_see(o, c)) {
				e->stats.live = false;
				any = true;
			}
		if (!any)
			continue;
		out_msg_init(&m);
		m.seq = q->id;
		m.body_case = EXS_CTL__MSG__BODY_STATS_REQUEST;
		m.stats_request = &sr;
		q->waiting[q->nwaiting++] = c->id;
		out_send(c, &m);
	}
	if (!q->nwaiting)
		query_finish(q);
	else
		evtimer_add(q->timer, &tv);
	return 0;
}

static void query_done_with(struct query *q, uint32_t client_id)
{
	for (unsigned k = 0; k < q->nwaiting; k++)
		if (q->waiting[k] == client_id) {
			q->waiting[k] = q->waiting[--q->nwaiting];
			break;
		}
	if (!q->nwaiting)
		query_finish(q);
}

void observe_stats_reply(struct client *c, uint32_t seq, ExsCtl__StatsReply *r)
{
	struct query *q;

	for (size_t k = 0; k < r->n_socks; k++) {
		ExsCtl__SockStats *s = r->socks[k];
		struct ep *e = index_sock(c, s->sock);

		if (!e)
			continue;
		e->stats = (struct ep_stats){
			.live = true,
			.send_used = s->send_credits_used,
			.recv_used = s->recv_credits_used,
			.peer_adverts = s->peer_adverts,
			.sends_queued = s->sends_queued,
			.bytes_sent = s->bytes_sent,
			.bytes_received = s->bytes_received,
			.sends = s->sends,
			.receives = s->receives,
			.errors = s->errors,
		};
	}
	if (r->more)
		return;
	for (q = exsd.queries; q; q = q->next)
		if (q->id == seq) {
			query_done_with(q, c->id);
			return;
		}
}

/* A client left: it answers no query, and asks none. */
void observe_client_gone(struct client *c)
{
	struct query *q, *next;

	for (q = exsd.queries; q; q = next) {
		next = q->next;
		if (q->observer == c)
			q->observer = NULL;
		query_done_with(q, c->id);
	}
}

/* exsctl disconnect: the socket that `o` may end, in *ret (cm_abort ends it) */
int observe_disconnect(struct client *o, ExsCtl__Disconnect *d, struct ep **ret)
{
	struct ep *e = index_id(d->id);
	struct client *c;

	if (!e)
		return -ENOENT;
	c = e->c;
	if (!view_may_see(o, c))
		return -EPERM;
	exsd_log(LOG_NOTICE, "client %u (uid %u) disconnects socket %u of client %u (%s)", o->id,
		 (unsigned)o->uid, e->sock_id, c->id, c->comm);
	view_event(e, "close", ECONNABORTED);
	*ret = e;
	return 0;
}

void observe_monitor(struct client *o)
{
	o->monitor = true;
}
