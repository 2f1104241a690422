/*
 * exsd's control channel: a Unix SOCK_SEQPACKET listener, one client per
 * connection, every client named by SO_PEERCRED. Each message is checked
 * (size, version, shape, order) before it is used; a client that breaks
 * the protocol is dropped, and no client can make exsd block: replies are
 * sent without waiting, and a client that does not read is dropped.
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
#include <unistd.h>
#include <systemd/sd-daemon.h>

#include "exsd.h"

void ctl_msg_init(ExsCtl__Msg *m)
{
	exs_ctl__msg__init(m);
	m->version = EXS_CTL_VERSION;
}

void ctl_send(struct client *c, ExsCtl__Msg *m)
{
	uint8_t buf[EXS_CTL_MAX_MSG];
	size_t n = exs_ctl__msg__get_packed_size(m);

	if (c->fd < 0)
		return;
	if (n > sizeof(buf)) {
		exsd_log(LOG_ERR, "client %u: reply of %zu bytes too large, dropped", c->id, n);
		return;
	}
	exs_ctl__msg__pack(m, buf);
	if (send(c->fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)n) {
		/* never wait for a client: one that cannot take a message is gone */
		exsd_log(LOG_WARNING, "client %u (%s): send failed (%m), dropping it", c->id, c->comm);
		shutdown(c->fd, SHUT_RDWR); /* the read event will drop it */
	}
}

void ctl_reply_error(struct client *c, uint32_t seq, int err, const char *text)
{
	ExsCtl__Msg m;
	ExsCtl__Error e = EXS_CTL__ERROR__INIT;

	ctl_msg_init(&m);
	m.seq = seq;
	e.err = err;
	e.text = (char *)(text ? text : strerror(err));
	m.body_case = EXS_CTL__MSG__BODY_ERROR;
	m.error = &e;
	ctl_send(c, &m);
}

void ctl_reply_ok(struct client *c, uint32_t seq)
{
	ExsCtl__Msg m;
	ExsCtl__Ok ok = EXS_CTL__OK__INIT;

	ctl_msg_init(&m);
	m.seq = seq;
	m.body_case = EXS_CTL__MSG__BODY_OK;
	m.ok = &ok;
	ctl_send(c, &m);
}

void client_drop(struct client *c, const char *why)
{
	struct client **p;

	exsd_log(LOG_INFO, "client %u (%s, pid %d) gone: %s", c->id, c->comm, (int)c->pid, why);
	c->monitor = false;
	for (struct ep *e = c->eps; e; e = e->next)
		if (e->state == EP_ESTABLISHED || e->state == EP_LISTENING)
			observe_event(e, "close", ESRCH); /* its process is gone */
	while (c->eps)
		ep_free(c->eps);
	observe_client_gone(c);
	for (p = &exsd.clients; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	exsd.nclients--;
	event_free(c->ev);
	close(c->fd);
	free(c);
}

/* Tell a client that its socket `sock` has no connection (any more). */
void ctl_send_conn_error(struct client *c, uint32_t sock, int err)
{
	ExsCtl__Msg m;
	ExsCtl__ConnError ce = EXS_CTL__CONN_ERROR__INIT;

	ctl_msg_init(&m);
	ce.sock = sock;
	ce.err = err;
	m.body_case = EXS_CTL__MSG__BODY_CONN_ERROR;
	m.conn_error = &ce;
	ctl_send(c, &m);
}

/* Returns false when the client must be dropped. */
static bool dispatch(struct client *c, ExsCtl__Msg *m)
{
	int ret;

	if (!c->hello && m->body_case != EXS_CTL__MSG__BODY_HELLO) {
		ctl_reply_error(c, m->seq, EPROTO, "hello first");
		return false;
	}
	switch (m->body_case) {
	case EXS_CTL__MSG__BODY_HELLO: {
		ExsCtl__Msg r;
		ExsCtl__HelloReply hr = EXS_CTL__HELLO_REPLY__INIT;
		ExsCtl__SocketDefaults sd = EXS_CTL__SOCKET_DEFAULTS__INIT;

		if (c->hello) {
			ctl_reply_error(c, m->seq, EPROTO, "hello twice");
			return false;
		}
		c->hello = true;
		c->observer = m->hello->observer;
		c->low_ports = c->uid == 0 || proc_has_cap(c->pid, CAP_NET_BIND_SERVICE);
		ctl_msg_init(&r);
		r.seq = m->seq;
		hr.client_id = c->id;
		sd.credits = exsd.conf.credits;
		sd.sp_max = exsd.conf.sp_max;
		sd.inline_max = exsd.conf.inline_max;
		sd.stream_buffer = exsd.conf.stream_buffer;
		sd.busy_poll_us = exsd.conf.busy_poll_us;
		hr.defaults = &sd;
		r.body_case = EXS_CTL__MSG__BODY_HELLO_REPLY;
		r.hello_reply = &hr;
		ctl_send(c, &r);
		return true;
	}
	case EXS_CTL__MSG__BODY_BIND:
		ret = cm_bind(c, m->seq, m->bind);
		if (ret)
			ctl_reply_error(c, m->seq, -ret, NULL);
		return true;
	case EXS_CTL__MSG__BODY_LISTEN:
		ret = cm_listen(c, m->seq, m->listen);
		if (ret)
			ctl_reply_error(c, m->seq, -ret, NULL);
		return true;
	case EXS_CTL__MSG__BODY_CONNECT:
		ret = cm_connect(c, m->connect);
		if (ret)
			ctl_send_conn_error(c, m->connect->sock, -ret);
		return true;
	case EXS_CTL__MSG__BODY_QP_READY:
		ret = cm_qp_ready(c, m->qp_ready);
		if (ret)
			ctl_send_conn_error(c, m->qp_ready->sock, -ret == EINVAL ? ECONNABORTED : -ret);
		return true;
	case EXS_CTL__MSG__BODY_REJECT:
		cm_reject(c, m->reject);
		return true;
	case EXS_CTL__MSG__BODY_CLOSE:
		cm_close_sock(c, m->close);
		return true;
	case EXS_CTL__MSG__BODY_QUERY:
		ret = observe_query(c, m->seq, m->query);
		if (ret)
			ctl_reply_error(c, m->seq, -ret, NULL);
		return true;
	case EXS_CTL__MSG__BODY_STATS_REPLY:
		observe_stats_reply(c, m->seq, m->stats_reply);
		return true;
	case EXS_CTL__MSG__BODY_MONITOR:
		observe_monitor(c, m->seq);
		return true;
	case EXS_CTL__MSG__BODY_DISCONNECT:
		ret = observe_disconnect(c, m->seq, m->disconnect);
		if (ret)
			ctl_reply_error(c, m->seq, -ret, NULL);
		return true;
	default:
		ctl_reply_error(c, m->seq, EOPNOTSUPP, "not a request");
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
	n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		client_drop(c, n == 0 ? "closed" : strerror(errno));
		return;
	}
	if (n > (ssize_t)sizeof(buf)) {
		ctl_reply_error(c, 0, EMSGSIZE, "message too large");
		client_drop(c, "oversized message");
		return;
	}
	m = exs_ctl__msg__unpack(NULL, (size_t)n, buf);
	if (!m) {
		ctl_reply_error(c, 0, EBADMSG, "undecodable message");
		client_drop(c, "undecodable message");
		return;
	}
	if (m->version != EXS_CTL_VERSION) {
		ctl_reply_error(c, m->seq, EPROTONOSUPPORT, "control protocol version 2 only");
		exs_ctl__msg__free_unpacked(m, NULL);
		client_drop(c, "protocol version mismatch");
		return;
	}
	keep = dispatch(c, m);
	exs_ctl__msg__free_unpacked(m, NULL);
	if (!keep)
		client_drop(c, "protocol violation");
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	struct client *c;
	char path[64];
	FILE *f;
	int fd, sz = 1 << 20;

	(void)what;
	(void)arg;
	fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (fd < 0)
		return;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) || exsd.nclients >= exsd.conf.max_clients) {
		exsd_log(LOG_WARNING, "refusing a client: %s",
			 exsd.nclients >= exsd.conf.max_clients ? "too many clients" : "no credentials");
		close(fd);
		return;
	}
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return;
	}
	c->fd = fd;
	c->pid = cred.pid;
	c->uid = cred.uid;
	c->id = ++exsd.next_client;
	c->created_ms = now_ms();
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)cred.pid);
	if ((f = fopen(path, "r"))) {
		if (fgets(c->comm, sizeof(c->comm), f))
			c->comm[strcspn(c->comm, "\n")] = 0;
		fclose(f);
	}
	c->ev = event_new(exsd.base, fd, EV_READ | EV_PERSIST, on_client, c);
	if (!c->ev || event_add(c->ev, NULL)) {
		close(fd);
		free(c);
		return;
	}
	c->next = exsd.clients;
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
	if (!exsd.listen_ev || event_add(exsd.listen_ev, NULL))
		return -ENOMEM;
	return 0;
}

void ctl_shutdown(void)
{
	while (exsd.clients)
		client_drop(exsd.clients, "exsd stopping");
	if (exsd.listen_ev)
		event_free(exsd.listen_ev);
	if (exsd.listen_fd >= 0)
		close(exsd.listen_fd);
	if (exsd.own_socket)
		unlink(exsd.socket_path);
}
