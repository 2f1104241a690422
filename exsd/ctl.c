/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exsd's control channel: a Unix SOCK_SEQPACKET listener, one client per
 * connection, every client named by SO_PEERCRED. Each message is checked
 * (size, version, shape, order) before it is used; a client that breaks
 * the protocol is dropped, and no client can make exsd block (out.c sends
 * without waiting and queues the rest). ctl.c decides every reply to a
 * request: the handlers below it (cm.c, observe.c) return a result and
 * ctl.c answers with it. A client that takes none of its queued output for
 * EXSD_STALL_MS is dropped (a busy client is not a dead one). A client
 * must say Hello within hello_timeout_ms. Out of descriptors, exsd stops
 * accepting for EXSD_ACCEPT_RETRY_MS or until a client leaves, rather
 * than spin.
 * A dropped client's rdmacm ids are disconnected and destroyed.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <systemd/sd-daemon.h>

#include "exsd.h"

#define STR_(x) #x
#define STR(x) STR_(x)

static void accept_resume(void);

void client_drop(struct client *c, const char *why)
{
	exsd_log(LOG_INFO, "client %u (%s, pid %d) gone: %s", c->id, c->comm, (int)c->pid, why);
	c->monitor = false;
	c->failed = true; /* nothing more is sent to it */
	cm_client_gone(c);
	for (struct ep *e = c->eps; e; e = e->next)
		if (e->state == EP_ESTABLISHED || e->state == EP_LISTENING)
			view_event(e, "close", ESRCH); /* its process is gone */
	while (c->eps)
		ep_free(c->eps);
	observe_client_gone(c);
	*c->pprev = c->next;
	if (c->next)
		c->next->pprev = c->pprev;
	exsd.nclients--;
	limits_client_gone(c->u);
	out_free(c);
	event_free(c->ev);
	event_free(c->wev);
	event_free(c->timer);
	close(c->fd);
	free(c);
	accept_resume(); /* a descriptor is free again */
}

static void reply_bound(struct client *c, uint32_t seq, uint32_t port)
{
	ExsCtl__Msg m;
	ExsCtl__BindReply br = EXS_CTL__BIND_REPLY__INIT;

	out_msg_init(&m);
	m.seq = seq;
	br.port = port;
	m.body_case = EXS_CTL__MSG__BODY_BIND_REPLY;
	m.bind_reply = &br;
	out_send(c, &m);
}

/* Returns false when the client must be dropped. */
static bool dispatch(struct client *c, ExsCtl__Msg *m)
{
	int ret;

	if (!c->hello && m->body_case != EXS_CTL__MSG__BODY_HELLO) {
		out_error(c, m->seq, EPROTO, "hello first");
		return false;
	}
	switch (m->body_case) {
	case EXS_CTL__MSG__BODY_HELLO: {
		ExsCtl__Msg r;
		ExsCtl__HelloReply hr = EXS_CTL__HELLO_REPLY__INIT;
		ExsCtl__SocketDefaults sd = EXS_CTL__SOCKET_DEFAULTS__INIT;

		if (c->hello) {
			out_error(c, m->seq, EPROTO, "hello twice");
			return false;
		}
		c->hello = true;
		evtimer_del(c->timer);
		c->observer = m->hello->observer;
		c->rebuild = m->hello->rebuild;
		c->low_ports = c->uid == 0 || proc_has_cap(c->pid, CAP_NET_BIND_SERVICE);
		out_msg_init(&r);
		r.seq = m->seq;
		hr.client_id = c->id;
		sd.credits = exsd.conf.credits;
		sd.sp_max = exsd.conf.sp_max;
		sd.inline_max = exsd.conf.inline_max;
		sd.stream_buffer = exsd.conf.stream_buffer;
		sd.busy_poll_us = exsd.conf.busy_poll_us;
		hr.defaults = &sd;
		hr.adopt = true;
		hr.early = true;
		r.body_case = EXS_CTL__MSG__BODY_HELLO_REPLY;
		r.hello_reply = &hr;
		out_send(c, &r);
		return true;
	}
	case EXS_CTL__MSG__BODY_BIND:
		ret = cm_bind(c, m->bind);
		if (ret < 0)
			out_error(c, m->seq, -ret, NULL);
		else
			reply_bound(c, m->seq, (uint32_t)ret);
		return true;
	case EXS_CTL__MSG__BODY_LISTEN:
		ret = cm_listen(c, m->listen);
		if (ret)
			out_error(c, m->seq, -ret, NULL);
		else
			out_ok(c, m->seq);
		return true;
	case EXS_CTL__MSG__BODY_CONNECT:
		ret = cm_connect(c, m->connect);
		if (ret)
			out_conn_error(c, m->connect->sock, -ret);
		return true;
	case EXS_CTL__MSG__BODY_QP_READY:
		ret = cm_qp_ready(c, m->qp_ready);
		if (ret)
			out_conn_error(c, m->qp_ready->sock, -ret == EINVAL ? ECONNABORTED : -ret);
		return true;
	case EXS_CTL__MSG__BODY_REJECT:
		cm_reject(c, m->reject);
		return true;
	case EXS_CTL__MSG__BODY_CLOSE:
		cm_close_sock(c, m->close);
		return true;
	case EXS_CTL__MSG__BODY_ADOPT:
		ret = cm_adopt(c, m->adopt);
		if (ret)
			out_error(c, m->seq, -ret, NULL);
		else
			out_ok(c, m->seq);
		return true;
	case EXS_CTL__MSG__BODY_QUERY:
		ret = observe_query(c, m->seq, m->query);
		if (ret)
			out_error(c, m->seq, -ret, NULL);
		return true;
	case EXS_CTL__MSG__BODY_STATS_REPLY:
		observe_stats_reply(c, m->seq, m->stats_reply);
		return true;
	case EXS_CTL__MSG__BODY_MONITOR:
		observe_monitor(c);
		out_ok(c, m->seq);
		return true;
	case EXS_CTL__MSG__BODY_DISCONNECT: {
		struct ep *e;

		ret = observe_disconnect(c, m->disconnect, &e);
		if (ret) {
			out_error(c, m->seq, -ret, NULL);
			return true;
		}
		cm_abort(e, ECONNABORTED);
		out_ok(c, m->seq);
		return true;
	}
	default:
		out_error(c, m->seq, EOPNOTSUPP, "not a request");
		return false;
	}
}

static void on_client(evutil_socket_t fd, short what, void *arg)
{
	struct client *c = arg;
	uint8_t buf[EXS_CTL_MAX_MSG];
	ExsCtl__Msg *m;
	ssize_t n;
	bool keep;

	(void)what;
	if (c->failed) {
		client_drop(c, c->why);
		return;
	}
	n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		client_drop(c, n == 0 ? "closed" : strerror(errno));
		return;
	}
	if (n > (ssize_t)sizeof(buf)) {
		out_error(c, 0, EMSGSIZE, "message too large");
		client_drop(c, "oversized message");
		return;
	}
	m = exs_ctl__msg__unpack(NULL, (size_t)n, buf);
	if (!m) {
		out_error(c, 0, EBADMSG, "undecodable message");
		client_drop(c, "undecodable message");
		return;
	}
	if (m->version != EXS_CTL_VERSION) {
		out_error(c, m->seq, EPROTONOSUPPORT,
			  "control protocol version " STR(EXS_CTL_VERSION) " only");
		exs_ctl__msg__free_unpacked(m, NULL);
		client_drop(c, "protocol version mismatch");
		return;
	}
	keep = dispatch(c, m);
	exs_ctl__msg__free_unpacked(m, NULL);
	if (!keep)
		client_drop(c, "protocol violation");
}

static void on_client_timer(evutil_socket_t fd, short what, void *arg)
{
	struct client *c = arg;
	uint64_t idle;

	(void)fd;
	(void)what;
	if (!c->hello) {
		client_drop(c, "no hello in time");
		return;
	}
	if (!c->paused)
		return;
	idle = now_ms() - c->progress_ms;
	if (idle >= EXSD_STALL_MS) {
		exsd_log(LOG_WARNING, "client %u (%s, pid %d): took none of its %zu queued bytes in %u ms",
			 c->id, c->comm, (int)c->pid, c->outq_bytes, EXSD_STALL_MS);
		client_drop(c, "stalled");
		return;
	}
	out_timer(c, EXSD_STALL_MS - idle);
}

/* Out of descriptors: stop accepting until a client leaves or a while has
 * passed, instead of being called again at once for the same failure. */
static void accept_pause(int err)
{
	if (!exsd.accept_paused && exsd.accept_refusals == 0)
		exsd_log(LOG_WARNING, "cannot accept clients (%s), serving %u: trying again every %u ms "
			 "or when one leaves", strerror(err), exsd.nclients, EXSD_ACCEPT_RETRY_MS);
	exsd.accept_refusals++;
	exsd.accept_paused = true;
	event_del(exsd.listen_ev);
	evtimer_add(exsd.accept_retry, &(struct timeval){ .tv_usec = EXSD_ACCEPT_RETRY_MS * 1000 });
}

static void accept_resume(void)
{
	if (!exsd.accept_paused)
		return;
	exsd.accept_paused = false;
	evtimer_del(exsd.accept_retry);
	event_add(exsd.listen_ev, NULL);
}

static void on_accept_retry(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	accept_resume();
}

/* Refuse a client with a reason it can read, then close it. */
static void refuse(int fd, uid_t uid, int err, const char *why)
{
	ExsCtl__Msg m;
	ExsCtl__Error e = EXS_CTL__ERROR__INIT;
	uint8_t buf[256];

	exsd_log(LOG_WARNING, "refusing a client of uid %u: %s", (unsigned)uid, why);
	out_msg_init(&m);
	e.err = err;
	e.text = (char *)why;
	m.body_case = EXS_CTL__MSG__BODY_ERROR;
	m.error = &e;
	if (exs_ctl__msg__get_packed_size(&m) <= sizeof(buf))
		(void)!send(fd, buf, exs_ctl__msg__pack(&m, buf), MSG_DONTWAIT | MSG_NOSIGNAL);
	/* a Unix socket closed with unread input resets the peer, whose next
	 * recv then fails before it reads the reason: take its Hello first */
	while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
		;
	close(fd);
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	struct uid_use *u = NULL;
	struct client *c;
	char path[64];
	FILE *f;
	int fd, ret, sz = 1 << 20;

	(void)what;
	(void)arg;
	fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (fd < 0) {
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
			accept_pause(errno);
		return;
	}
	if (exsd.accept_refusals) {
		exsd_log(LOG_NOTICE, "accepting clients again, after %u refusals", exsd.accept_refusals);
		exsd.accept_refusals = 0;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len)) {
		refuse(fd, (uid_t)-1, EACCES, "no credentials");
		return;
	}
	ret = limits_admit_client(cred.uid, &u);
	if (ret) {
		refuse(fd, cred.uid, -ret, ret == -EUSERS ? "too many clients" : strerror(-ret));
		return;
	}
	/* more than wmem_max only with CAP_NET_ADMIN; the queue does the rest */
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)))
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	c = calloc(1, sizeof(*c));
	if (!c) {
		limits_client_gone(u);
		close(fd);
		return;
	}
	c->fd = fd;
	c->u = u;
	c->pid = cred.pid;
	c->uid = cred.uid;
	c->id = ++exsd.next_client;
	c->created_ms = now_ms();
	c->outq_tail = &c->outq;
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)cred.pid);
	if ((f = fopen(path, "r"))) {
		if (fgets(c->comm, sizeof(c->comm), f))
			c->comm[strcspn(c->comm, "\n")] = 0;
		fclose(f);
	}
	c->ev = event_new(exsd.base, fd, EV_READ | EV_PERSIST, on_client, c);
	c->wev = event_new(exsd.base, fd, EV_WRITE | EV_PERSIST, out_on_writable, c);
	c->timer = evtimer_new(exsd.base, on_client_timer, c);
	if (!c->ev || !c->wev || !c->timer || event_add(c->ev, NULL)) {
		if (c->ev)
			event_free(c->ev);
		if (c->wev)
			event_free(c->wev);
		if (c->timer)
			event_free(c->timer);
		limits_client_gone(u);
		close(fd);
		free(c);
		return;
	}
	out_timer(c, exsd.conf.hello_timeout_ms);
	c->next = exsd.clients;
	c->pprev = &exsd.clients;
	if (c->next)
		c->next->pprev = &c->next;
	exsd.clients = c;
	exsd.nclients++;
	exsd_log(LOG_INFO, "client %u: pid %d uid %u (%s)", c->id, (int)c->pid, (unsigned)c->uid, c->comm);
}

static int mkdir_parent(const char *path)
{
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char *slash;

	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0;
	*slash = 0;
	if (mkdir(dir, 0755) && errno != EEXIST)
		return -errno;
	return 0;
}

int ctl_listen(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	mode_t old;
	int fd, n;

	n = sd_listen_fds(1);
	if (n == 1 && sd_is_socket_unix(SD_LISTEN_FDS_START, SOCK_SEQPACKET, 1, NULL, 0) > 0) {
		fd = SD_LISTEN_FDS_START;
		exsd_log(LOG_INFO, "control socket from systemd (fd %d)", fd);
	} else {
		if (n > 0)
			exsd_log(LOG_WARNING, "ignoring %d unexpected socket(s) from systemd", n);
		if (strlen(exsd.socket_path) >= sizeof(sa.sun_path))
			return -ENAMETOOLONG;
		strcpy(sa.sun_path, exsd.socket_path);
		if (mkdir_parent(exsd.socket_path))
			return -errno;
		fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		unlink(exsd.socket_path);
		/* any local user may use EXS; exsd checks each request itself */
		old = umask(0111);
		n = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
		umask(old);
		if (n || listen(fd, 128)) {
			n = -errno;
			close(fd);
			return n;
		}
		exsd.own_socket = true;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	exsd.listen_fd = fd;
	exsd.listen_ev = event_new(exsd.base, fd, EV_READ | EV_PERSIST, on_accept, NULL);
	exsd.accept_retry = evtimer_new(exsd.base, on_accept_retry, NULL);
	if (!exsd.listen_ev || !exsd.accept_retry || event_add(exsd.listen_ev, NULL))
		return -ENOMEM;
	return 0;
}

void ctl_shutdown(void)
{
	while (exsd.clients)
		client_drop(exsd.clients, "exsd stopping");
	if (exsd.accept_retry)
		event_free(exsd.accept_retry);
	exsd.accept_retry = NULL;
	exsd.accept_paused = false; /* client_drop must not re-arm the listener */
	if (exsd.listen_ev)
		event_free(exsd.listen_ev);
	if (exsd.listen_fd >= 0)
		close(exsd.listen_fd);
	if (exsd.own_socket)
		unlink(exsd.socket_path);
}
