/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * EXS sockets: the fd table and each socket's life cycle (guide §4): its
 * state, its close and shutdown, and the events they post. The set-up that
 * exsd brokers is broker.c's; the data path is the connection's (conn.c).
 * Everything here runs with exs_g.lock held.
 */
#include <poll.h>
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

void exs_sock_set_state(struct exs_sock *s, enum exs_sock_state st)
{
	if (EXS_DEBUG_ON() && s->state != st)
		exs_debug("fd %d: %s -> %s", s->fd, state_names[s->state], state_names[st]);
	if (st == EXS_S_CLOSING && s->state != EXS_S_CLOSING)
		EXS_COUNT(exs_g.nclosing, 1);
	else if (s->state == EXS_S_CLOSING && st != EXS_S_CLOSING)
		EXS_COUNT(exs_g.nclosing, -1);
	s->state = st;
	pthread_cond_broadcast(&exs_g.cond);
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

/* ---- free fds: bit i of fd_free[w] is fd w*64+i; bit w of fd_free_sum[w/64]
 * says fd_free[w] has a free fd. Lowest free fd first, as open(2) does. */

static void fd_mark(int fd, bool free_)
{
	unsigned w = (unsigned)fd / 64, b = (unsigned)fd % 64;

	if (free_) {
		exs_g.fd_free[w] |= 1ull << b;
		exs_g.fd_free_sum[w / 64] |= 1ull << (w % 64);
	} else {
		exs_g.fd_free[w] &= ~(1ull << b);
		if (!exs_g.fd_free[w])
			exs_g.fd_free_sum[w / 64] &= ~(1ull << (w % 64));
	}
}

static int fd_take(void)
{
	unsigned i, w;
	int fd;

	if (!exs_g.fd_free) {
		exs_g.fd_free = malloc(EXS_MAX_SOCKETS / 8);
		if (!exs_g.fd_free)
			return -ENOMEM;
		memset(exs_g.fd_free, 0xff, EXS_MAX_SOCKETS / 8);
		memset(exs_g.fd_free_sum, 0xff, sizeof(exs_g.fd_free_sum));
	}
	for (i = 0; i < sizeof(exs_g.fd_free_sum) / sizeof(exs_g.fd_free_sum[0]); i++)
		if (exs_g.fd_free_sum[i])
			break;
	if (i == sizeof(exs_g.fd_free_sum) / sizeof(exs_g.fd_free_sum[0]))
		return -EMFILE;
	w = i * 64 + (unsigned)__builtin_ctzll(exs_g.fd_free_sum[i]);
	fd = (int)(w * 64 + (unsigned)__builtin_ctzll(exs_g.fd_free[w]));
	fd_mark(fd, false);
	return fd;
}

static uint32_t generation;

/* A new name for exsd: what it still sends about the old one misses. */
static void new_id(struct exs_sock *s)
{
	generation = (generation + 1) & 0x7fff;
	s->id = (generation << 16) | (uint32_t)s->fd;
}

struct exs_sock *exs_sock_alloc(int domain, int type)
{
	struct exs_sock *s;
	int fd;

	s = calloc(1, sizeof(*s));
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	fd = fd_take();
	if (fd < 0) {
		free(s);
		errno = -fd;
		return NULL;
	}
	s->fd = fd;
	new_id(s);
	s->state = EXS_S_NEW;
	s->domain = domain;
	s->type = type;
	s->cfg_credits = exs_g.defaults.credits;
	s->cfg_sp_max = exs_g.defaults.sp_max;
	s->cfg_stream_buf = exs_g.defaults.stream_buffer;
	s->cfg_inline = exs_g.defaults.inline_max;
	s->fd_flags = s->cfg_stream_buf ? 0 : EXS_FD_NODELAY;
	s->listener_fd = -1;
	s->next = exs_g.sock_list;
	if (s->next)
		s->next->prev = s;
	exs_g.sock_list = s;
	exs_g.socks[fd] = s;
	return s;
}

void exs_sock_free(struct exs_sock *s)
{
	uint32_t i;

	if (s->state == EXS_S_CLOSING)
		EXS_COUNT(exs_g.nclosing, -1);
	exs_conn_destroy(s->conn);
	for (i = 0; i < s->req_count; i++)
		exs_ctl__msg__free_unpacked(s->reqs[(s->req_head + i) % s->backlog], NULL);
	free(s->reqs);
	free(s->acc);
	if (s->prev)
		s->prev->next = s->next;
	else
		exs_g.sock_list = s->next;
	if (s->next)
		s->next->prev = s->prev;
	exs_g.socks[s->fd] = NULL;
	fd_mark(s->fd, true);
	free(s);
	pthread_cond_broadcast(&exs_g.cond);
}

void exs_sock_post(struct exs_queue *q, int fd, int type, exs_ahandle_t ah, int err)
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

void exs_sock_tell_exsd_close(struct exs_sock *s)
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

/* Refuse connection request `req` (exsd's id for it) with `err`. */
void exs_sock_reject(uint32_t req, int err)
{
	ExsCtl__Msg m;
	ExsCtl__Reject r = EXS_CTL__REJECT__INIT;

	exs_ctl_msg_init(&m);
	r.conn = req;
	r.err = err;
	m.body_case = EXS_CTL__MSG__BODY_REJECT;
	m.reject = &r;
	exs_ctl_send(&m);
}

/* An active connect ended before it was established. */
void exs_sock_connect_failed(struct exs_sock *s, int err)
{
	struct exs_conn *c = s->conn;

	s->conn = NULL;
	/* exsd dropped its CM id, and with it any binding: start over */
	s->known_to_exsd = false;
	s->local_len = 0;
	exs_sock_set_state(s, EXS_S_NEW);
	/* the caller learns first: destroying a QP can take seconds (siw) */
	exs_sock_post(s->op_q, s->fd, EXS_EVT_CONNECT, s->op_ah, err);
	s->op_q = NULL;
	exs_conn_destroy(c);
}

int exs_sock_xfer(struct exs_sock *s, const struct exs_op *op)
{
	if (s->state != EXS_S_CONNECTED)
		return -ENOTCONN;
	if (op->kind == EXS_EVT_SEND && s->sendfile && !op->sendfile)
		return -EBUSY; /* after the running exs_sendfile, as after a credit */
	return op->kind == EXS_EVT_SEND ? exs_conn_send(s->conn, op) : exs_conn_recv(s->conn, op);
}

/* Completions arrived on the socket's connection (progress thread or a
 * polling caller). May free `s`. */
/* Every connection that completions touched does what they leave to do,
 * and its socket what follows (a close that may finish now). */
void exs_sock_settle(void)
{
	struct exs_conn *c;

	while ((c = exs_conn_touched())) {
		struct exs_sock *s = exs_sock_by_id(c->owner);

		exs_conn_progress(c);
		if (s && s->conn == c)
			exs_sock_maybe_finish_close(s);
	}
	exs_sock_wake_pollers();
}

/* s's completions, and those of the connections sharing its CQ */
void exs_sock_progress(struct exs_sock *s)
{
	if (!s->conn)
		return;
	exs_conn_poll(s->conn);
	exs_sock_settle();
}

/* every device's completions */
void exs_sock_progress_all(void)
{
	exs_conn_poll_all();
	exs_sock_settle();
}

/* one shared CQ's completions, after its event */
void exs_sock_progress_cq(struct exs_scq *q)
{
	exs_conn_poll_cq(q);
	exs_sock_settle();
}

/* ---- readiness (exs_poll) */

/* Threads in exs_poll wait on exs_g.cond: what the progress thread took
 * may have made a socket ready. Only when one waits: progress runs often. */
void exs_sock_wake_pollers(void)
{
	if (exs_g.pollers)
		pthread_cond_broadcast(&exs_g.cond);
}

/* The revents of s for `events`, as poll(2) reports them: POLLERR and
 * POLLHUP whether asked for or not. */
short exs_sock_poll(struct exs_sock *s, short events)
{
	struct exs_conn *c = s->conn;
	short r = 0;

	switch (s->state) {
	case EXS_S_LISTENING:
		if (s->req_count)
			r |= POLLIN;
		break;
	case EXS_S_NEW:
	case EXS_S_BOUND:
		r |= POLLHUP; /* like an unconnected TCP socket: nothing will come */
		break;
	case EXS_S_CONNECTED:
		if (!c)
			break;
		if (exs_conn_recv_ready(c))
			r |= POLLIN;
		if (exs_conn_send_ready(c) && !s->sendfile)
			r |= POLLOUT;
		if (c->link == EXS_LINK_RESET)
			r |= POLLERR | POLLHUP;
		else if (exs_conn_rd_done(c) && c->tx != EXS_TX_OPEN)
			r |= POLLHUP;
		break;
	default:
		break;
	}
	return (short)(r & (events | POLLERR | POLLHUP));
}

/* ---- shutdown (guide §4.5) */

static void shut_post(struct exs_sock *s, struct exs_shut_op *op, int err)
{
	exs_sock_post(op->q, s->fd, EXS_EVT_SHUTDOWN, op->ah, err);
	op->dirs = 0;
}

/* Complete the shutdowns that the connection's state has finished; a
 * broken connection completes what is left with ECONNRESET. */
static void shut_check(struct exs_sock *s)
{
	struct exs_conn *c = s->conn;
	int i;

	if (!c || (!s->shut[0].dirs && !s->shut[1].dirs))
		return;
	if ((s->shut_started & EXS_DIR_WR) && exs_conn_wr_done(c))
		s->shut_done |= EXS_DIR_WR;
	if ((s->shut_started & EXS_DIR_RD) && exs_conn_rd_done(c))
		s->shut_done |= EXS_DIR_RD;
	for (i = 0; i < 2; i++) {
		struct exs_shut_op *op = &s->shut[i];

		if (!op->dirs)
			continue;
		if (!(op->dirs & ~s->shut_done))
			shut_post(s, op, 0);
		else if (c->link == EXS_LINK_RESET)
			shut_post(s, op, ECONNRESET);
	}
}

int exs_sock_shutdown(struct exs_sock *s, int dirs, struct exs_queue *q, exs_ahandle_t ah)
{
	struct exs_shut_op *op;

	if (s->state != EXS_S_CONNECTED)
		return -ENOTCONN;
	if (exs_conn_reset_before_eof(s->conn))
		return -ECONNRESET;
	if (dirs & s->shut_started & ~s->shut_done)
		return -EBUSY;
	op = s->shut[0].dirs ? &s->shut[1] : &s->shut[0];
	*op = (struct exs_shut_op){ .q = q, .ah = ah, .dirs = dirs };
	exs_queue_ref(q);
	if ((dirs & EXS_DIR_RD) && !(s->shut_started & EXS_DIR_RD))
		exs_conn_shut_rd(s->conn);
	if ((dirs & EXS_DIR_WR) && !(s->shut_started & EXS_DIR_WR))
		exs_conn_shut_wr(s->conn); /* FIN once the sends already started are placed */
	s->shut_started |= dirs;
	shut_check(s); /* a direction already shut: a no-op, its event now */
	return 0;
}

/* ---- closing */

static void finish_close(struct exs_sock *s)
{
	struct exs_queue *q = s->close_q;
	exs_ahandle_t ah = s->close_ah;
	int fd = s->fd;

	for (int i = 0; i < 2; i++)
		if (s->shut[i].dirs)
			shut_post(s, &s->shut[i], ECONNABORTED);
	exs_sock_tell_exsd_close(s);
	exs_sock_free(s);
	exs_sock_post(q, fd, EXS_EVT_CLOSE, ah, 0);
}

/* May free `s`. */
void exs_sock_maybe_finish_close(struct exs_sock *s)
{
	struct exs_conn *c = s->conn;

	shut_check(s);
	if (s->state != EXS_S_CLOSING)
		return;
	if (!s->fin_deadline_set && c->tx >= EXS_TX_FIN_SENT) {
		/* the FIN (or ABORT) is out: it has this long to complete */
		s->fin_deadline_set = true;
		s->close_deadline_ms = exs_now_ms() + EXS_FIN_MS;
	}
	if (exs_conn_finished(c)) {
		exs_conn_fail_all(c, ECONNABORTED);
		finish_close(s);
	}
}

/* Progress thread, every tick while sockets close or probe: nothing lingers
 * forever, and a peer that does not answer its PING is gone. */
void exs_sock_tick(uint64_t now)
{
	struct exs_sock *s, *next;

	for (s = exs_g.sock_list; s; s = next) {
		next = s->next; /* maybe_finish_close may free s */
		if (!s->conn)
			continue;
		exs_conn_tick(s->conn, now);
		if (s->state == EXS_S_CLOSING && now >= s->close_deadline_ms) {
			/* sends the peer never asked for are aborted, and say so; a
			 * FIN that never completed is given up on */
			exs_conn_give_up(s->conn);
			s->fin_deadline_set = false;
		}
		exs_sock_maybe_finish_close(s);
	}
	exs_sock_wake_pollers(); /* a PING given up on: reset */
}

/* Every accept waiting on listener s ends with `err`. */
void exs_sock_fail_accepts(struct exs_sock *s, int err)
{
	while (s->acc_count) {
		struct exs_accept_slot *a = &s->acc[s->acc_head];

		s->acc_head = (s->acc_head + 1) % s->acc_cap;
		s->acc_count--;
		exs_sock_post(a->q, s->fd, EXS_EVT_ACCEPT, a->aa.exs_ahandle, err);
	}
}

static void close_listener(struct exs_sock *s)
{
	exs_sock_fail_accepts(s, ECONNABORTED);
	while (s->req_count) {
		ExsCtl__Msg *rm = s->reqs[s->req_head];

		exs_sock_reject(rm->conn_request->conn, ECONNREFUSED);
		exs_ctl__msg__free_unpacked(rm, NULL);
		s->req_head = (s->req_head + 1) % s->backlog;
		s->req_count--;
	}
}

static void close_now(struct exs_sock *s, int flags)
{
	switch (s->state) {
	case EXS_S_LISTENING:
		close_listener(s);
		finish_close(s);
		break;
	case EXS_S_CONNECTING:
		exs_sock_tell_exsd_close(s);
		exs_sock_connect_failed(s, ECONNABORTED);
		finish_close(s);
		break;
	case EXS_S_CONNECTED:
		exs_sock_set_state(s, EXS_S_CLOSING);
		s->close_deadline_ms =
			exs_now_ms() + ((flags & EXS_DONTLINGER) ? EXS_FIN_MS : EXS_LINGER_MS);
		exs_progress_wake();
		if (flags & EXS_DONTLINGER) {
			exs_conn_abort(s->conn);
		} else {
			exs_conn_unpersist_all(s->conn); /* the peer lets go of our blocks */
			exs_conn_shut_wr(s->conn);
		}
		exs_sock_maybe_finish_close(s);
		break;
	default:
		finish_close(s);
		break;
	}
}

/*
 * While a call to exsd on this socket waits for its reply (the lock is
 * released then, see exs_ctl_call), the socket is busy: a close from
 * another thread is deferred until the call returns, so the caller's
 * socket never vanishes under it.
 */
void exs_sock_busy(struct exs_sock *s)
{
	s->busy++;
}

/* The call returned. True when a close came meanwhile: it has run now
 * (`s` may be gone) and the call must fail with EBADF. */
bool exs_sock_unbusy(struct exs_sock *s)
{
	if (--s->busy || !s->close_deferred)
		return false;
	s->close_deferred = false;
	close_now(s, s->close_flags);
	return true;
}

int exs_sock_close(struct exs_sock *s, int flags, struct exs_queue *q, exs_ahandle_t ah)
{
	if (s->state == EXS_S_CLOSING || s->state == EXS_S_ACCEPTING || s->close_deferred)
		return -EBADF;
	s->close_q = q;
	s->close_ah = ah;
	exs_queue_ref(q);
	if (s->busy) {
		s->close_deferred = true;
		s->close_flags = flags;
		return 0;
	}
	close_now(s, flags);
	return 0;
}

/* ---- exs_cancel (exs_cancel(3)) */

/* Pending accepts of listener `s` with ahandle `ah` end with ECANCELED;
 * the others keep their order. One whose connection is being set up
 * (a socket ACCEPTING for it) is under way: EBUSY. */
static int cancel_accepts(struct exs_sock *s, exs_ahandle_t ah)
{
	uint32_t i, kept = 0, n = s->acc_count;
	struct exs_sock *ns;

	for (i = 0; i < n; i++) {
		struct exs_accept_slot a = s->acc[(s->acc_head + i) % s->acc_cap];

		if (a.aa.exs_ahandle == ah)
			exs_sock_post(a.q, s->fd, EXS_EVT_ACCEPT, ah, ECANCELED);
		else
			s->acc[(s->acc_head + kept++) % s->acc_cap] = a;
	}
	s->acc_count = kept;
	if (kept < n)
		return 0;
	for (ns = exs_g.sock_list; ns; ns = ns->next)
		if (ns->state == EXS_S_ACCEPTING && ns->listener_id == s->id &&
		    ns->accepted_by.aa.exs_ahandle == ah)
			return -EBUSY;
	return -ENOENT;
}

/* A connect not yet established: exsd forgets it (and with it the CM id:
 * the peer's exsd sees the request go, or drops it at the end of the wait
 * the request carried), the socket is unconnected again. */
static int cancel_connect(struct exs_sock *s, exs_ahandle_t ah)
{
	if (s->op_ah != ah || !s->op_q)
		return -ENOENT;
	exs_sock_tell_exsd_close(s);
	exs_sock_connect_failed(s, ECANCELED);
	/* exsd may have sent events of the connect before it read the close:
	 * they must not reach the socket's next connect */
	new_id(s);
	return 0;
}

/* -errno: ENOENT when no started operation of the kinds in `what`
 * (EXS_CANCEL_*) has ahandle `ah`. */
int exs_sock_cancel(struct exs_sock *s, exs_ahandle_t ah, int what)
{
	switch (s->state) {
	case EXS_S_LISTENING:
		return (what & EXS_CANCEL_ACCEPT) ? cancel_accepts(s, ah) : -ENOENT;
	case EXS_S_CONNECTING:
		return (what & EXS_CANCEL_CONNECT) ? cancel_connect(s, ah) : -ENOENT;
	case EXS_S_CONNECTED: {
		int ret = exs_conn_cancel(s->conn, ah, what);

		exs_sock_progress(s); /* a FIN may be due; pollers may care */
		return ret;
	}
	default:
		return -ENOENT;
	}
}

/* ---- tuning (guide §7) */

static bool before_connect(const struct exs_sock *s)
{
	return s->state == EXS_S_NEW || s->state == EXS_S_BOUND || s->state == EXS_S_LISTENING;
}

/* Set *field to `arg` before connect/accept; returns the old value. */
static int set_before_connect(const struct exs_sock *s, uint32_t *field, int arg, int64_t lo,
			      int64_t hi)
{
	int old = (int)*field;

	if (arg < lo || arg > hi)
		return -EINVAL;
	if (!before_connect(s))
		return -EISCONN;
	*field = (uint32_t)arg;
	return old;
}

/* exs_fcntl (guide §7): the command's result (>= 0), or -errno. */
int exs_sock_fcntl(struct exs_sock *s, int cmd, int arg)
{
	struct exs_conn *c = s->state == EXS_S_CONNECTED ? s->conn : NULL;
	int old;

	switch (cmd) {
	case EXS_F_GETFLOWCONTROLCREDITS:
		return (int)(c ? c->credits : s->cfg_credits);
	case EXS_F_SETFLOWCONTROLCREDITS:
		return set_before_connect(s, &s->cfg_credits, arg, 1, EXS_MAX_CREDITS);
	case EXS_F_GETSPMAXSIZE:
		return (int)(c ? c->sp_max : s->cfg_sp_max);
	case EXS_F_SETSPMAXSIZE:
		return set_before_connect(s, &s->cfg_sp_max, arg, 0, EXS_MAX_SP_MAX);
	case EXS_F_GETINLINEMAXSIZE:
		if (c)
			return (int)c->inline_max;
		return (int)(s->cfg_inline < 0 ? EXS_MAX_INLINE : s->cfg_inline);
	case EXS_F_SETINLINEMAXSIZE:
		if (arg < 0)
			return -EINVAL;
		if (!before_connect(s))
			return -EISCONN;
		old = (int)(s->cfg_inline < 0 ? EXS_MAX_INLINE : s->cfg_inline);
		s->cfg_inline = arg > EXS_MAX_INLINE ? EXS_MAX_INLINE : arg;
		return old;
	case EXS_F_SETCOMPTHREADCPU:
		return exs_progress_pin(arg);
	case EXS_F_GETSTREAMBUFSIZE:
		/* on a connection: the buffer really obtained (0: none) */
		return (int)(c ? exs_conn_stream_buf(c) : s->cfg_stream_buf);
	case EXS_F_SETSTREAMBUFSIZE:
		old = set_before_connect(s, &s->cfg_stream_buf, arg, 0, EXS_MAX_STREAM_BUF);
		if (old >= 0 && arg == 0)
			s->fd_flags |= EXS_FD_NODELAY;
		else if (old >= 0)
			s->fd_flags &= ~EXS_FD_NODELAY;
		return old;
	case EXS_F_GETSGEMAX:
		/* the device's, known once a connection has one */
		return c ? (int)c->max_sge : -ENOTCONN;
	case EXS_F_GETFD:
		return s->fd_flags;
	case EXS_F_SETFD:
		if (arg & ~(EXS_FD_BUSYPOLL | EXS_FD_NODELAY))
			return -EINVAL;
		if (!before_connect(s) && ((arg ^ s->fd_flags) & EXS_FD_BUSYPOLL))
			return -EISCONN; /* chosen when the connection is made */
		old = s->fd_flags;
		s->fd_flags = arg;
		if (s->conn) /* NODELAY: an open chunk goes now */
			exs_conn_set_nodelay(s->conn, arg & EXS_FD_NODELAY);
		return old;
	default:
		return -EINVAL;
	}
}
