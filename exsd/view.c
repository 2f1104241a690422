/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * What an observer (exsctl) sees of one socket, and the monitor events:
 * one SockInfo, filled for a given observer, serves both the answers to
 * queries (observe.c) and the events cm.c reports as connections change.
 * Access rule, as ss(8): the owner and the counters of another uid's
 * socket are shown only to root and to that uid.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "exsd.h"

static uint64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint32_t fmt_addr(char *buf, size_t len, const struct sockaddr *sa)
{
	char a[INET6_ADDRSTRLEN] = "";
	uint16_t port = 0;

	if (sa && sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const void *)sa;

		inet_ntop(AF_INET, &s4->sin_addr, a, sizeof(a));
		port = ntohs(s4->sin_port);
		snprintf(buf, len, "%s:%u", a, port);
	} else if (sa && sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const void *)sa;

		inet_ntop(AF_INET6, &s6->sin6_addr, a, sizeof(a));
		port = ntohs(s6->sin6_port);
		snprintf(buf, len, "[%s]:%u", a, port);
	} else {
		snprintf(buf, len, "-");
	}
	return port;
}

bool view_may_see(const struct client *observer, const struct client *owner)
{
	return observer->uid == 0 || observer->uid == owner->uid;
}

void view_fill_info(ExsCtl__SockInfo *i, struct info_buf *b, const struct ep *e,
		      const struct client *observer)
{
	bool up = e->state != EP_BOUND && e->state != EP_LISTENING;

	exs_ctl__sock_info__init(i);
	i->id = e->sock_id;
	i->local_port = fmt_addr(b->local, sizeof(b->local), ep_local_addr(e));
	i->peer_port = up ? fmt_addr(b->peer, sizeof(b->peer), ep_peer_addr(e)) : 0;
	if (!up)
		snprintf(b->peer, sizeof(b->peer), "-");
	i->local = b->local;
	i->peer = b->peer;
	i->type = e->type == SOCK_STREAM ? "stream" : "seqpacket";
	i->state = (char *)ep_state_name(e->state);
	i->device = e->adopted ? (char *)e->adopted_dev
		    : e->id && e->id->verbs ? (char *)ibv_get_device_name(e->id->verbs->device) : "-";
	/* from the device, not e->iwarp: that is set for connections only
	 * (adopted ones are never iWARP: cm_adopt) */
	i->transport = e->adopted ? "IB/RoCE" : !e->id || !e->id->verbs ? "-"
		       : e->id->verbs->device->transport_type == IBV_TRANSPORT_IWARP ? "iWARP" : "IB/RoCE";
	i->uid = e->c->uid;
	i->age_ms = now_ms() - e->created_ms;
	i->backlog = e->backlog;
	i->pending = e->pending;
	i->credits = e->state == EP_ESTABLISHED ? e->agreed.credits : 0;
	if (!view_may_see(observer, e->c)) {
		i->hidden = true;
		i->pid = -1;
		i->comm = "";
		return;
	}
	i->pid = e->c->pid;
	i->comm = (char *)e->c->comm;
	i->live = e->stats.live;
	i->send_credits_used = e->stats.send_used;
	i->recv_credits_used = e->stats.recv_used;
	i->peer_adverts = e->stats.peer_adverts;
	i->sends_queued = e->stats.sends_queued;
	i->bytes_sent = e->stats.bytes_sent;
	i->bytes_received = e->stats.bytes_received;
	i->sends = e->stats.sends;
	i->receives = e->stats.receives;
	i->errors = e->stats.errors;
}

/* Whether any observer takes monitor events (exsctl monitor). */
bool view_watched(void)
{
	for (const struct client *o = exsd.clients; o; o = o->next)
		if (o->monitor)
			return true;
	return false;
}

void view_event(struct ep *e, const char *event, int err)
{
	for (struct client *o = exsd.clients; o; o = o->next) {
		ExsCtl__Msg m;
		ExsCtl__MonitorEvent me = EXS_CTL__MONITOR_EVENT__INIT;
		ExsCtl__SockInfo info;
		struct info_buf b;

		if (!o->monitor)
			continue;
		view_fill_info(&info, &b, e, o);
		out_msg_init(&m);
		me.time_ms = wall_ms();
		me.event = (char *)event;
		me.sock = &info;
		me.error = err ? strerror(err) : "";
		m.body_case = EXS_CTL__MSG__BODY_MONITOR_EVENT;
		m.monitor_event = &me;
		out_send(o, &m);
	}
}
