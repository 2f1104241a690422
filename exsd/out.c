/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Everything exsd says to a client: replies, connection events, exsctl's
 * answers and monitor events are packed, framed and sent here, in order,
 * without ever blocking. What a client's socket cannot take yet waits in
 * the client's output queue, bounded in bytes; while that holds more than
 * EXSD_OUTQ_HIGH, exsd reads no more requests from the client (ctl.c finds
 * its read event deleted), and a client whose queue would pass
 * EXSD_OUTQ_MAX, or whose socket fails, is marked failed: its read event
 * fires and ctl.c drops it. The files that answer (ctl.c, cm.c,
 * observe.c, view.c) call down to this one; it calls nothing of theirs.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "exsd.h"

void out_msg_init(ExsCtl__Msg *m)
{
	exs_ctl__msg__init(m);
	m->version = EXS_CTL_VERSION;
}

void out_timer(struct client *c, uint64_t ms)
{
	struct timeval tv = { .tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000 * 1000) };

	evtimer_add(c->timer, &tv);
}

/* The client is beyond help: shut it down; its read event drops it. */
static void out_fail(struct client *c, const char *why)
{
	if (c->failed)
		return;
	exsd_log(LOG_WARNING, "client %u (%s, pid %d): %s, dropping it", c->id, c->comm, (int)c->pid, why);
	c->failed = true;
	c->why = why;
	shutdown(c->fd, SHUT_RDWR);
	event_active(c->ev, EV_READ, 0);
}

void out_free(struct client *c)
{
	while (c->outq) {
		struct frame *f = c->outq;

		c->outq = f->next;
		free(f);
	}
	c->outq_tail = &c->outq;
	c->outq_bytes = 0;
}

static void pause_reading(struct client *c)
{
	if (c->paused)
		return;
	c->paused = true;
	event_del(c->ev);
	c->progress_ms = now_ms();
	out_timer(c, EXSD_STALL_MS);
	exsd_log(LOG_DEBUG, "client %u: %zu bytes queued, not reading its requests", c->id, c->outq_bytes);
}

static void resume_reading(struct client *c)
{
	if (!c->paused)
		return;
	c->paused = false;
	evtimer_del(c->timer);
	event_add(c->ev, NULL);
	exsd_log(LOG_DEBUG, "client %u: %zu bytes queued, reading again", c->id, c->outq_bytes);
}

/* Send what the socket takes: 0, or -errno when the client is gone. */
static int outq_flush(struct client *c)
{
	while (c->outq) {
		struct frame *f = c->outq;

		if (send(c->fd, f->data, f->len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN ? 0 : -errno;
		}
		c->outq = f->next;
		c->outq_bytes -= f->len;
		free(f);
		c->progress_ms = now_ms();
	}
	c->outq_tail = &c->outq;
	return 0;
}

void out_on_writable(evutil_socket_t fd, short what, void *arg)
{
	struct client *c = arg;
	int ret;

	(void)fd;
	(void)what;
	ret = outq_flush(c);
	if (ret) {
		out_free(c);
		out_fail(c, "send failed");
		return;
	}
	if (!c->outq)
		event_del(c->wev);
	if (c->outq_bytes <= EXSD_OUTQ_LOW)
		resume_reading(c);
}

void out_send(struct client *c, ExsCtl__Msg *m)
{
	uint8_t buf[EXS_CTL_MAX_MSG];
	size_t n = exs_ctl__msg__get_packed_size(m);
	struct frame *f;

	if (c->fd < 0 || c->failed)
		return;
	if (n > sizeof(buf)) {
		exsd_log(LOG_ERR, "client %u: reply of %zu bytes too large, dropped", c->id, n);
		return;
	}
	exs_ctl__msg__pack(m, buf);
	if (!c->outq) {
		if (send(c->fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)n)
			return;
		if (errno != EAGAIN && errno != EINTR) {
			out_fail(c, "send failed");
			return;
		}
	}
	/* busy: queue it behind the others, in order */
	if (c->outq_bytes + n > EXSD_OUTQ_MAX) {
		out_free(c);
		out_fail(c, "output queue full");
		return;
	}
	f = malloc(sizeof(*f) + n);
	if (!f) {
		out_free(c);
		out_fail(c, "out of memory for its output");
		return;
	}
	f->next = NULL;
	f->len = n;
	memcpy(f->data, buf, n);
	*c->outq_tail = f;
	c->outq_tail = &f->next;
	c->outq_bytes += n;
	event_add(c->wev, NULL);
	if (c->outq_bytes > EXSD_OUTQ_HIGH)
		pause_reading(c);
}

void out_error(struct client *c, uint32_t seq, int err, const char *text)
{
	ExsCtl__Msg m;
	ExsCtl__Error e = EXS_CTL__ERROR__INIT;

	out_msg_init(&m);
	m.seq = seq;
	e.err = err;
	e.text = (char *)(text ? text : strerror(err));
	m.body_case = EXS_CTL__MSG__BODY_ERROR;
	m.error = &e;
	out_send(c, &m);
}

void out_ok(struct client *c, uint32_t seq)
{
	ExsCtl__Msg m;
	ExsCtl__Ok ok = EXS_CTL__OK__INIT;

	out_msg_init(&m);
	m.seq = seq;
	m.body_case = EXS_CTL__MSG__BODY_OK;
	m.ok = &ok;
	out_send(c, &m);
}

/* ConnError for socket `sock`, or (req != 0) for request `req` queued on
 * listener `sock`. */
static void send_conn_error(struct client *c, uint32_t sock, uint32_t req, int err)
{
	ExsCtl__Msg m;
	ExsCtl__ConnError ce = EXS_CTL__CONN_ERROR__INIT;

	out_msg_init(&m);
	ce.sock = sock;
	ce.conn = req;
	ce.err = err;
	m.body_case = EXS_CTL__MSG__BODY_CONN_ERROR;
	m.conn_error = &ce;
	out_send(c, &m);
}

/* Tell a client that its socket `sock` has no connection (any more). */
void out_conn_error(struct client *c, uint32_t sock, int err)
{
	send_conn_error(c, sock, 0, err);
}

/* Tell a client that connection request `req`, queued on its listener
 * `listener` and not yet accepted, is over: its accept must not take it. */
void out_request_gone(struct client *c, uint32_t listener, uint32_t req, int err)
{
	send_conn_error(c, listener, req, err);
}

