/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The channel to exsd (proto/exs_control.proto). Opened lazily by the
 * first call that needs exsd and reopened after exsd went away; while exsd
 * is unreachable such calls fail with ENETDOWN at once. Requests wait for
 * their reply (matched by seq) at most EXS_CTL_TIMEOUT_MS, releasing
 * exs_g.lock meanwhile; events are handed back to the progress thread,
 * which dispatches them (broker.c). Called with exs_g.lock held.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "exs_int.h"
#include "exs_limits.h"

/* libexs's own limits are exsd's */
_Static_assert(EXS_MAX_CREDITS == EXS_LIMIT_CREDITS, "credits limit differs from exsd's");
_Static_assert(EXS_MAX_BACKLOG == EXS_LIMIT_BACKLOG, "backlog limit differs from exsd's");

struct waiter {
	uint32_t seq;
	bool done;
	int err;
	ExsCtl__Msg *reply;
	struct waiter *next;
};
static struct waiter *waiters;

void exs_ctl_msg_init(ExsCtl__Msg *m)
{
	exs_ctl__msg__init(m);
	m->version = EXS_CTL_VERSION;
}

static int ctl_write(ExsCtl__Msg *m)
{
	uint8_t buf[EXS_CTL_MAX_MSG];
	size_t n = exs_ctl__msg__get_packed_size(m);

	if (n > sizeof(buf))
		return -EMSGSIZE;
	exs_ctl__msg__pack(m, buf);
	if (send(exs_g.ctl_fd, buf, n, MSG_NOSIGNAL) != (ssize_t)n)
		return -ENETDOWN;
	return 0;
}

/* The channel dropped: every waiting call fails with ENETDOWN, and the
 * progress thread tells broker.c (which this file never calls). */
static void ctl_lost(void)
{
	struct waiter *w;

	if (exs_g.ctl_fd < 0)
		return;
	exs_progress_del_fd(exs_g.ctl_fd);
	close(exs_g.ctl_fd);
	exs_g.ctl_fd = -1;
	for (w = waiters; w; w = w->next) {
		w->done = true;
		w->err = ENETDOWN;
	}
	exs_g.ctl_lost = true;
	exs_progress_wake();
	pthread_cond_broadcast(&exs_g.cond);
}

static int wait_reply(struct waiter *w)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += EXS_CTL_TIMEOUT_MS / 1000;
	w->next = waiters;
	waiters = w;
	exs_g.cond_waiters++;
	while (!w->done)
		if (pthread_cond_timedwait(&exs_g.cond, &exs_g.lock, &ts) == ETIMEDOUT && !w->done) {
			w->done = true;
			w->err = ETIMEDOUT;
		}
	exs_g.cond_waiters--;
	for (struct waiter **p = &waiters; *p; p = &(*p)->next)
		if (*p == w) {
			*p = w->next;
			break;
		}
	return -w->err;
}

/* exsd's defaults for new sockets, where they are sane; else ours stay. */
static void take_defaults(const ExsCtl__SocketDefaults *d)
{
	if (!d)
		return; /* an exsd from before SocketDefaults */
	if (d->credits >= 1 && d->credits <= EXS_MAX_CREDITS)
		exs_g.defaults.credits = d->credits;
	if (d->sp_max <= EXS_MAX_SP_MAX)
		exs_g.defaults.sp_max = d->sp_max;
	if (d->inline_max <= EXS_MAX_INLINE)
		exs_g.defaults.inline_max = d->inline_max;
	if (d->stream_buffer <= EXS_MAX_STREAM_BUF)
		exs_g.defaults.stream_buffer = d->stream_buffer;
	if (d->busy_poll_us <= EXS_MAX_BUSY_POLL_US)
		exs_g.defaults.busy_poll_us = d->busy_poll_us;
}

static int ctl_open(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	ExsCtl__Msg m, *reply = NULL;
	ExsCtl__Hello hello = EXS_CTL__HELLO__INIT;
	char comm[32] = "";
	FILE *f;
	int fd, ret;

	if (strlen(exs_g.ctl_path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, exs_g.ctl_path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		int err = errno;
		static bool hinted;

		close(fd);
		if (EXS_DEBUG_ON() && !hinted) { /* once per process: the reason behind ENETDOWN */
			hinted = true;
			exs_debug("cannot reach exsd at %s: %s; calls that need it fail with ENETDOWN "
				  "(is exsd running? see exs(7), ENETDOWN AND EXSD)",
				  exs_g.ctl_path, strerror(err));
		}
		return -ENETDOWN;
	}
	exs_g.ctl_fd = fd;
	ret = exs_progress_add_fd(fd, NULL);
	if (ret) {
		close(fd);
		exs_g.ctl_fd = -1;
		return ret;
	}
	f = fopen("/proc/self/comm", "r");
	if (f) {
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = 0;
		fclose(f);
	}
	exs_ctl_msg_init(&m);
	hello.pid = (uint32_t)getpid();
	hello.comm = comm;
	hello.rebuild = true; /* broker.c takes Rebuild */
	m.body_case = EXS_CTL__MSG__BODY_HELLO;
	m.hello = &hello;
	m.seq = ++exs_g.ctl_seq;
	struct waiter w = { .seq = m.seq };
	ret = ctl_write(&m);
	if (!ret)
		ret = wait_reply(&w);
	reply = w.reply;
	if (!ret && (!reply || reply->body_case != EXS_CTL__MSG__BODY_HELLO_REPLY))
		ret = -EPROTO;
	if (!ret) {
		take_defaults(reply->hello_reply->defaults);
		exs_g.ctl_adopt = reply->hello_reply->adopt;
		exs_g.ctl_early = reply->hello_reply->early;
	}
	if (reply)
		exs_ctl__msg__free_unpacked(reply, NULL);
	if (ret) {
		ctl_lost();
		return ret == -ETIMEDOUT ? -ETIMEDOUT : -ENETDOWN;
	}
	return 0;
}

/* Open the channel if it is down. Never from the progress thread, which
 * would then wait for a reply that only it can read. */
int exs_ctl_ensure(void)
{
	return exs_g.ctl_fd >= 0 ? 0 : ctl_open();
}

/* Fire and forget, on the channel as it is (no reopening). Events and
 * answers to exsd's own requests: m->seq is the caller's. */
int exs_ctl_send(ExsCtl__Msg *m)
{
	int ret;

	if (exs_g.ctl_fd < 0)
		return -ENETDOWN;
	ret = ctl_write(m);
	if (ret)
		ctl_lost();
	return ret;
}

/*
 * An errno that came over the channel reaches the application, and a
 * ConnError may carry what the peer put in its reject: only the errnos a
 * set-up or an exsd request can really fail with pass (a peer could name
 * ENOEXEC or 4000 otherwise).
 */
int exs_ctl_errno(int err, int fallback)
{
	static const int known[] = {
		EPERM, ENOENT, EIO, ENOMEM, EACCES, EBUSY, EINVAL, ENFILE, EMFILE,
		ENOSPC, ENODEV, ERANGE, EAGAIN, ENAMETOOLONG, EMSGSIZE, EPROTO,
		EBADMSG, EPROTONOSUPPORT, EAFNOSUPPORT, EOPNOTSUPP, EADDRINUSE,
		EADDRNOTAVAIL, ENETDOWN, ENETUNREACH, ECONNABORTED, ECONNRESET,
		ENOBUFS, EISCONN, ENOTCONN, ETIMEDOUT, ECONNREFUSED, EHOSTDOWN,
		EHOSTUNREACH, EALREADY, EINPROGRESS, EUSERS, ESRCH,
	};
	size_t i;

	for (i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (err == known[i])
			return err;
	return fallback;
}

/* A request and its reply; an Error reply becomes -err. */
int exs_ctl_call(ExsCtl__Msg *req, ExsCtl__Msg **ret_reply)
{
	struct waiter w = { 0 };
	int ret = exs_ctl_ensure();

	if (ret)
		return ret;
	req->seq = w.seq = ++exs_g.ctl_seq ? exs_g.ctl_seq : ++exs_g.ctl_seq;
	ret = ctl_write(req);
	if (ret) {
		ctl_lost();
		return ret;
	}
	ret = wait_reply(&w);
	if (ret) {
		if (w.reply)
			exs_ctl__msg__free_unpacked(w.reply, NULL);
		return ret;
	}
	if (w.reply->body_case == EXS_CTL__MSG__BODY_ERROR) {
		ret = -exs_ctl_errno(w.reply->error->err, EIO);
		exs_ctl__msg__free_unpacked(w.reply, NULL);
		return ret;
	}
	if (ret_reply)
		*ret_reply = w.reply;
	else
		exs_ctl__msg__free_unpacked(w.reply, NULL);
	return 0;
}

/*
 * Progress thread, lock held: `n` bytes read from the channel `fd` into
 * `buf`. A reply goes to its waiter (0); an event or exsd's own request is
 * handed back in *ret_msg for the caller to dispatch (1); a dropped or
 * garbled channel is closed (-ENETDOWN).
 */
int exs_ctl_take(int fd, const uint8_t *buf, ssize_t n, ExsCtl__Msg **ret_msg)
{
	ExsCtl__Msg *m = NULL;
	struct waiter *w;

	if (fd != exs_g.ctl_fd)
		return 0; /* a channel already replaced */
	if (n > 0 && n <= EXS_CTL_MAX_MSG)
		m = exs_ctl__msg__unpack(NULL, (size_t)n, buf);
	if (!m || m->version != EXS_CTL_VERSION) {
		/* exsd went away or spoke nonsense: drop the channel */
		if (m)
			exs_ctl__msg__free_unpacked(m, NULL);
		ctl_lost();
		return -ENETDOWN;
	}
	if (m->body_case != EXS_CTL__MSG__BODY_STATS_REQUEST && m->seq) {
		for (w = waiters; w; w = w->next)
			if (w->seq == m->seq && !w->done) {
				w->reply = m;
				w->done = true;
				pthread_cond_broadcast(&exs_g.cond);
				return 0;
			}
	}
	*ret_msg = m;
	return 1;
}
