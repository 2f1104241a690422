/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The public EXS calls (include/exs.h): argument checks, the errno each
 * failure gets, the EXS_BLOCK / EXS_CREDIT_WAIT waiting, and nothing else.
 * Socket, set-up and connection logic lives in sock.c, broker.c and conn.c.
 */
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exs_int.h"

struct exs_global exs_g = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.ctl_fd = -1,
	.epfd = -1,
	.defaults = { .credits = EXS_DEFAULT_CREDITS, .sp_max = EXS_DEFAULT_SP_MAX,
		      .inline_max = EXS_MAX_INLINE,
		      .busy_poll_us = EXS_SPIN_MAX_US },
	.comp_cpu = INT_MAX,
};

#define LOCK() pthread_mutex_lock(&exs_g.lock)
#define UNLOCK() pthread_mutex_unlock(&exs_g.lock)

static int fail_unlock(int neg)
{
	UNLOCK();
	return exs_err(-neg);
}

/*
 * Guide §11.3.2: EXS is not usable in a child after fork() without exec.
 * The child shares the parent's exsd channel and device contexts and has
 * no progress thread; a call there could only disturb the parent's
 * connections, so every call refuses with ENOTSUP. Set in the child by
 * pthread_atfork, read without a lock (nothing else runs in the child).
 */
static bool forked_child;

static void on_fork_child(void)
{
	forked_child = true;
}

static bool in_child(void)
{
	return __builtin_expect(forked_child, 0);
}

int exs_init(int version)
{
	EXS_NOCANCEL;
	pthread_condattr_t ca;
	const char *path;
	int ret;

	if (in_child())
		return exs_err(ENOTSUP);
	if (version != EXS_VERSION1)
		return exs_err(EINVAL);
	LOCK();
	if (exs_g.inited) {
		UNLOCK();
		return 0;
	}
	/* before any verbs resource: registered pages stay out of a child
	 * (a no-op where the kernel copies pinned pages at fork) */
	if (!getenv("EXS_FORK_UNSAFE")) {
		ret = ibv_fork_init();
		if (ret)
			return fail_unlock(-ret);
	}
	if (pthread_atfork(NULL, NULL, on_fork_child))
		return fail_unlock(-ENOMEM);
	exs_g.socks = calloc(EXS_MAX_SOCKETS, sizeof(*exs_g.socks));
	if (!exs_g.socks)
		return fail_unlock(-ENOMEM);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&exs_g.cond, &ca);
	pthread_condattr_destroy(&ca);
	exs_g.debug = getenv("EXS_DEBUG") && *getenv("EXS_DEBUG");
	path = getenv("EXS_SOCKET");
	exs_g.ctl_path = path && *path ? strdup(path) : EXS_CTL_DEFAULT_SOCKET;
	exs_queue_poll_hook = exs_progress_poll;
	ret = exs_progress_start();
	if (ret) {
		free(exs_g.socks);
		exs_g.socks = NULL;
		return fail_unlock(ret);
	}
	exs_g.inited = true;
	UNLOCK();
	return 0;
}

static bool inited(void)
{
	return __atomic_load_n(&exs_g.inited, __ATOMIC_ACQUIRE);
}

/* 0, or why no call may be made now: in a forked child (ENOTSUP, guide
 * §11.3.2), or before exs_init (EINVAL) */
static int unusable(void)
{
	return in_child() ? ENOTSUP : !inited() ? EINVAL : 0;
}

/* ---- queues */

exs_qhandle_t exs_qcreate(int depth)
{
	EXS_NOCANCEL;
	if (in_child() || !inited()) {
		errno = in_child() ? ENOTSUP : EINVAL;
		return EXS_QHANDLE_INVALID;
	}
	struct exs_queue *q = exs_queue_new(depth);

	return q ? q->h : EXS_QHANDLE_INVALID;
}

int exs_qdelete(exs_qhandle_t q)
{
	EXS_NOCANCEL;
	int ret;

	if (unusable())
		return exs_err(unusable());
	ret = exs_queue_delete(q);
	return ret ? exs_err(-ret) : 0;
}

static bool timeval_ok(const struct timeval *t)
{
	return !t || (t->tv_sec >= 0 && t->tv_usec >= 0 && t->tv_usec < 1000000 &&
		      t->tv_sec < INT_MAX / 1000);
}

int exs_qdequeue(exs_qhandle_t q, exs_event_t *ev, int count, struct timeval *timeout)
{
	EXS_NOCANCEL;
	int ret;

	if (in_child())
		return exs_err(ENOTSUP);
	if (!inited() || !ev || count == 0 || count < -EXS_MAX_QDEPTH ||
	    !timeval_ok(timeout))
		return exs_err(EINVAL);
	ret = exs_queue_dequeue(q, ev, count, timeout, true);
	return ret < 0 ? exs_err(-ret) : ret;
}

/* Attribute values are ints (guide §11.2.7-11.2.8; see exs.h). */
int exs_qmodify(exs_qhandle_t q, int attr, const void *value)
{
	EXS_NOCANCEL;
	int ret;

	if (in_child())
		return exs_err(ENOTSUP);
	if (!inited() || !value)
		return exs_err(EINVAL);
	ret = exs_queue_modify(q, attr, *(const int *)value);
	return ret ? exs_err(-ret) : 0;
}

int exs_qstatus(exs_qhandle_t q, int attr, void *value)
{
	EXS_NOCANCEL;
	int ret;

	if (in_child())
		return exs_err(ENOTSUP);
	if (!inited() || !value)
		return exs_err(EINVAL);
	ret = exs_queue_status(q, attr, value);
	return ret ? exs_err(-ret) : 0;
}

int exs_qfd(exs_qhandle_t q)
{
	EXS_NOCANCEL;
	int ret;

	if (unusable())
		return exs_err(unusable());
	ret = exs_queue_fd(q);
	return ret < 0 ? exs_err(-ret) : ret;
}

/* ---- registration */

/* The registration flags libexs keeps (the others are accepted, ignored). */
#define MREG_KEPT (EXS_MRF_RECV_DISABLE | EXS_MRF_ADVERT_ONLY)

/* The registration flags a caller may pass. */
static int mreg_known_flags(void)
{
	int known = MREG_KEPT;

#ifndef EXS_DISABLE_DEPRECATED
	known |= EXS_ACCESS_ALL;
#endif
	return known;
}

exs_mhandle_t exs_mregister(void *address, size_t length, int flags)
{
	EXS_NOCANCEL;
	struct exs_mreg *m;
	int i, err = 0;

	if (in_child()) {
		errno = ENOTSUP;
		return EXS_MHANDLE_INVALID;
	}
	if (!inited() || !address || !length || length > EXS_MAX_XFER * 2 ||
	    (flags & ~mreg_known_flags()) ||
	    (uintptr_t)address + length < (uintptr_t)address) {
		errno = EINVAL;
		return EXS_MHANDLE_INVALID;
	}
	m = exs_mreg_new(address, length, flags & MREG_KEPT);
	if (!m) {
		errno = ENOMEM;
		return EXS_MHANDLE_INVALID;
	}
	/*
	 * Pin it now on the devices this process already uses; a device it
	 * starts to use later gets it at the first transfer there. Pinning on
	 * every device of the host would count the pages once per device
	 * against RLIMIT_MEMLOCK (which siw enforces even for root).
	 */
	LOCK();
	for (i = 0; i < exs_g.ndevs && !err; i++)
		if (!exs_mreg_mr(m, exs_g.devs[i]))
			err = errno ? errno : ENOMEM;
	if (err) {
		exs_mreg_delete(m);
		UNLOCK();
		errno = err;
		return EXS_MHANDLE_INVALID;
	}
	UNLOCK();
	return m->h;
}

int exs_mderegister(exs_mhandle_t mh, int flags)
{
	EXS_NOCANCEL;
	int ret;

	struct exs_mreg *m;

	if (in_child())
		return exs_err(ENOTSUP);
	if (!inited() || flags)
		return exs_err(EINVAL);
	LOCK();
	m = exs_mreg_get(mh);
	ret = m ? exs_mreg_delete(m) : -EINVAL;
	UNLOCK();
	return ret ? exs_err(-ret) : 0;
}

int exs_mmodify(exs_mhandle_t mh, size_t length, int flags)
{
	EXS_NOCANCEL;
	struct exs_mreg *m;
	int ret;

	if (in_child())
		return exs_err(ENOTSUP);
	if (!inited() || !length || length > EXS_MAX_XFER * 2 || (flags & ~mreg_known_flags()))
		return exs_err(EINVAL);
	LOCK();
	m = exs_mreg_get(mh);
	if (!m)
		return fail_unlock(-EINVAL);
	if ((uintptr_t)m->addr + length < (uintptr_t)m->addr)
		return fail_unlock(-EINVAL);
	ret = exs_mreg_modify(m, length, flags & MREG_KEPT);
	UNLOCK();
	return ret ? exs_err(-ret) : 0;
}

/* ---- sockets */

int exs_socket(int domain, int type, int protocol)
{
	EXS_NOCANCEL;
	struct exs_sock *s;
	int fd;

	if (unusable())
		return exs_err(unusable());
	if (domain != AF_INET && domain != AF_INET6)
		return exs_err(EAFNOSUPPORT);
	if (type != SOCK_STREAM && type != SOCK_SEQPACKET)
		return exs_err(ESOCKTNOSUPPORT);
	if (protocol != 0 && protocol != IPPROTO_TCP && protocol != IPPROTO_SCTP)
		return exs_err(EPROTONOSUPPORT);
	LOCK();
	exs_ctl_ensure(); /* for exsd's socket defaults; without exsd, the built-in ones */
	s = exs_sock_alloc(domain, type);
	if (!s)
		return fail_unlock(-(errno ? errno : ENOMEM));
	fd = s->fd;
	UNLOCK();
	return fd;
}

/* Look up a usable socket and take the lock; NULL (errno set) otherwise. */
static struct exs_sock *sock_lock(int fd)
{
	struct exs_sock *s;

	if (in_child() || !inited()) {
		errno = in_child() ? ENOTSUP : EINVAL;
		return NULL;
	}
	LOCK();
	s = exs_sock_get(fd);
	if (!s || s->state == EXS_S_ACCEPTING || s->state == EXS_S_CLOSING || s->close_deferred) {
		UNLOCK();
		errno = EBADF;
		return NULL;
	}
	return s;
}

static int check_addr(const struct exs_sock *s, const struct sockaddr *a, socklen_t len)
{
	if (!a)
		return -EINVAL;
	if (len < sizeof(sa_family_t))
		return -EINVAL;
	if (a->sa_family != s->domain)
		return -EAFNOSUPPORT;
	if ((a->sa_family == AF_INET && len < sizeof(struct sockaddr_in)) ||
	    (a->sa_family == AF_INET6 && len < sizeof(struct sockaddr_in6)))
		return -EINVAL;
	return 0;
}

static socklen_t addr_len(int domain)
{
	return domain == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

int exs_bind(int fd, const struct sockaddr *address, socklen_t addrlen)
{
	EXS_NOCANCEL;
	struct exs_sock *s = sock_lock(fd);
	int ret;

	if (!s)
		return -1;
	ret = check_addr(s, address, addrlen);
	if (!ret)
		ret = exs_broker_bind(s, address, addr_len(s->domain));
	return ret ? fail_unlock(ret) : (UNLOCK(), 0);
}

int exs_listen(int fd, int backlog)
{
	EXS_NOCANCEL;
	struct exs_sock *s = sock_lock(fd);
	int ret;

	if (!s)
		return -1;
	ret = exs_broker_listen(s, backlog);
	return ret ? fail_unlock(ret) : (UNLOCK(), 0);
}

/*
 * EXS_BLOCK: the call runs asynchronously on a private queue and waits for
 * its one event there. block_begin() picks the queue: a private one, or the
 * caller's, held (a reference: it cannot be deleted, and its slot serve a
 * new queue, while the call starts an operation on it), -1/EINVAL if the
 * handle names no live queue (NULL allowed when null_ok). block_end() lets
 * go of it and turns a start error or the event into the call's result:
 * -1/errno, or the event (ret_ev) for the caller to read.
 */
static int block_begin(int flags, exs_qhandle_t qh, bool null_ok, struct exs_queue **ret_q,
		       struct exs_queue **ret_pq)
{
	*ret_q = *ret_pq = NULL;
	if (in_child()) /* before any lock: one may have been held at fork */
		return exs_err(ENOTSUP);
	if (!(flags & EXS_BLOCK)) {
		if ((qh || !null_ok) && exs_queue_hold(qh, ret_q))
			return exs_err(EINVAL);
		return 0;
	}
	*ret_pq = exs_queue_new(1);
	if (!*ret_pq)
		return -1;
	*ret_q = *ret_pq;
	return 0;
}

/* Returns 1 with *ret_ev filled when a blocking call succeeded, 0 when an
 * asynchronous one started, -1 (errno set) on failure. */
static int block_end(struct exs_queue *q, struct exs_queue *pq, int ret, exs_event_t *ret_ev)
{
	int n;

	if (!pq && q)
		exs_queue_unref(q); /* the operation holds its own reference */
	if (ret) {
		if (pq)
			exs_queue_delete(pq->h);
		return exs_err(-ret);
	}
	if (!pq)
		return 0;
	n = exs_queue_dequeue(pq->h, ret_ev, 1, NULL, false);
	exs_queue_delete(pq->h);
	if (n != 1)
		return exs_err(EIO);
	if (ret_ev->exs_evt_errno)
		return exs_err(ret_ev->exs_evt_errno);
	return 1;
}

int exs_accept(int fd, struct exs_acceptaddr *vec, int count, int flags, exs_qhandle_t qh)
{
	EXS_NOCANCEL;
	struct exs_accept_slot slots[16], *sl = slots;
	struct exs_queue *q, *pq;
	struct exs_sock *s;
	exs_event_t ev;
	int i, ret;

	if (!vec || count <= 0 || count > EXS_MAX_BACKLOG || (flags & ~EXS_BLOCK) ||
	    ((flags & EXS_BLOCK) && count != 1))
		return exs_err(EINVAL);
	if (block_begin(flags, qh, false, &q, &pq))
		return -1;
	if (count > 16 && !(sl = calloc((size_t)count, sizeof(*sl))))
		return block_end(q, pq, -ENOMEM, &ev);
	for (i = 0; i < count; i++)
		sl[i] = (struct exs_accept_slot){ .aa = vec[i], .q = q };
	s = sock_lock(fd);
	ret = s ? exs_broker_accept(s, sl, count) : -errno;
	if (s)
		UNLOCK();
	if (sl != slots)
		free(sl);
	ret = block_end(q, pq, ret, &ev);
	if (ret <= 0)
		return ret;
	if (vec[0].exs_addr)
		vec[0].exs_addrlen = ev.exs_evt_union.exs_evt_accept.exs_evt_addrlen;
	return ev.exs_evt_union.exs_evt_accept.exs_evt_new_socket;
}

int exs_blocking_accept(int fd, struct sockaddr *peer_address, socklen_t *peer_addrlen)
{
	EXS_NOCANCEL;
	struct exs_acceptaddr aa = { .exs_addr = peer_address };
	int ret;

	if (peer_address && !peer_addrlen)
		return exs_err(EINVAL);
	if (peer_address)
		aa.exs_addrlen = *peer_addrlen;
	ret = exs_accept(fd, &aa, 1, EXS_BLOCK, NULL);
	if (ret >= 0 && peer_address)
		*peer_addrlen = aa.exs_addrlen;
	return ret;
}

int exs_connect(int fd, const struct sockaddr *addr, socklen_t addrlen, int flags,
		struct timeval *timeout, exs_qhandle_t qh, exs_ahandle_t ah)
{
	EXS_NOCANCEL;
	struct exs_queue *q, *pq;
	struct exs_sock *s;
	exs_event_t ev;
	int ret;

	if ((flags & ~EXS_BLOCK) || !timeval_ok(timeout))
		return exs_err(EINVAL);
	if (block_begin(flags, qh, false, &q, &pq))
		return -1;
	s = sock_lock(fd);
	if (!s) {
		ret = -errno;
	} else {
		ret = check_addr(s, addr, addrlen);
		if (!ret)
			ret = exs_broker_connect(s, addr, addr_len(s->domain), timeout, q, ah);
		UNLOCK();
	}
	return block_end(q, pq, ret, &ev) < 0 ? -1 : 0;
}

int exs_blocking_connect(int fd, const struct sockaddr *addr, socklen_t addrlen)
{
	EXS_NOCANCEL;
	return exs_connect(fd, addr, addrlen, EXS_BLOCK, NULL, NULL, NULL);
}

int exs_close(int fd, int flags, exs_qhandle_t qh, exs_ahandle_t ah)
{
	EXS_NOCANCEL;
	struct exs_queue *q, *pq;
	struct exs_sock *s;
	exs_event_t ev;
	int ret;

	if (flags & ~(EXS_BLOCK | EXS_DONTLINGER))
		return exs_err(EINVAL);
	if (block_begin(flags, qh, false, &q, &pq))
		return -1;
	s = sock_lock(fd);
	ret = s ? exs_sock_close(s, flags, q, ah) : -errno;
	if (s)
		UNLOCK();
	return block_end(q, pq, ret, &ev) < 0 ? -1 : 0;
}

int exs_blocking_close(int fd)
{
	EXS_NOCANCEL;
	return exs_close(fd, EXS_BLOCK, NULL, NULL);
}

int exs_shutdown(int fd, int how, int flags, exs_qhandle_t qh, exs_ahandle_t ah)
{
	EXS_NOCANCEL;
	static const int dirs[] = { [SHUT_RD] = EXS_DIR_RD, [SHUT_WR] = EXS_DIR_WR,
				    [SHUT_RDWR] = EXS_DIR_RD | EXS_DIR_WR };
	struct exs_queue *q, *pq;
	struct exs_sock *s;
	exs_event_t ev;
	int ret;

	if (how < SHUT_RD || how > SHUT_RDWR || (flags & ~EXS_BLOCK))
		return exs_err(EINVAL);
	if (block_begin(flags, qh, false, &q, &pq))
		return -1;
	s = sock_lock(fd);
	ret = s ? exs_sock_shutdown(s, dirs[how], q, ah) : -errno;
	if (s)
		UNLOCK();
	return block_end(q, pq, ret, &ev) < 0 ? -1 : 0;
}

/* ---- data */

/* A thread cancelled in its credit wait (guide §11.3.1): nothing was
 * started, so what block_end would undo is undone here. */
struct xfer_wait {
	struct exs_queue *q, *pq;
	struct exs_op *op;
};

static void xfer_cancelled(void *arg)
{
	struct xfer_wait *w = arg;

	UNLOCK();
	exs_conn_segs_free(w->op);
	block_end(w->q, w->pq, -ECANCELED, NULL);
}

/* The op's registrations, from mh (one buffer) or mh[i] for element i;
 * a receive's elements are checked only: its bounce buffer is what the
 * device writes (lock held). */
static int xfer_mem(struct exs_op *op, const exs_mhandle_t *mh)
{
	struct exs_mreg *m;
	uint32_t i;
	int ret;

	if (!op->nseg)
		return exs_mreg_covering(mh[0], op->buf, op->len, op->kind, &op->mreg);
	for (i = 0; i < op->nseg; i++) {
		struct exs_seg *g = &op->seg[i];

		if ((ret = exs_mreg_covering(mh[i], g->addr, g->len, op->kind, &m)))
			return ret;
		g->mreg = op->kind == EXS_EVT_SEND ? m : NULL;
	}
	return 0;
}

/* Flags, length and queue of a send or receive: 0 or an errno. A
 * persistent one (exs(7)) takes no other flag but EXS_READ_NOTIFY (a
 * send's) and reports to a queue: it has no end to wait for. */
static int xfer_args(int kind, size_t len, int flags, exs_qhandle_t qh, bool persist_ok)
{
	int allowed = EXS_BLOCK | EXS_CREDIT_WAIT | EXS_DONTWAIT | EXS_UNSIGNALED;

	if (kind == EXS_EVT_RECV)
		allowed |= MSG_WAITALL;
	if (flags & EXS_PERSISTENT)
		allowed = EXS_PERSISTENT | (kind == EXS_EVT_SEND ? EXS_READ_NOTIFY : 0);
	if (!len || (flags & ~allowed) || ((flags & EXS_PERSISTENT) && (!persist_ok || !qh)))
		return EINVAL;
	if (len > EXS_MAX_XFER)
		return EMSGSIZE;
	if (!(flags & EXS_BLOCK) && !qh && !(flags & EXS_UNSIGNALED))
		return EINVAL;
	return 0;
}

/* Start `op` (kind, buf/len or elements, flags, ah filled; arguments
 * checked) on fd, waiting for a credit if its flags say so, and with
 * EXS_BLOCK for its event (*ret_ev). mh: the registration of each element
 * (one for a single buffer). Returns as block_end does; the op's elements
 * are conn.c's once it started, freed here if it did not. */
static int xfer_run(int fd, struct exs_op *op, exs_qhandle_t qh, const exs_mhandle_t *mh,
		    exs_event_t *ret_ev)
{
	struct exs_queue *q, *pq;
	struct exs_sock *s;
	uint32_t id;
	int ret;

	if (block_begin(op->flags, qh, true, &q, &pq)) {
		exs_conn_segs_free(op);
		return -1;
	}
	if (pq)
		op->flags &= ~EXS_UNSIGNALED;
	op->q = q;
	op->q_held = q && !pq; /* block_begin's reference: the op's once it starts */
	s = sock_lock(fd);
	if (!s) {
		ret = -errno;
		goto out_noloc;
	}
	if ((ret = xfer_mem(op, mh)))
		goto out;
	id = s->id; /* the fd may be closed and reused while we wait for a credit */
	for (;;) {
		ret = exs_sock_xfer(s, op);
		if (ret != -EBUSY || !(op->flags & (EXS_CREDIT_WAIT | EXS_BLOCK)))
			break;
		exs_progress_idle(); /* coalesced sends go: the peer's credits may wait for them */
		exs_progress_arm(); /* the completion that frees a credit must wake us */
		struct xfer_wait w = { q, pq, op };

		exs_g_wait(NULL, true, xfer_cancelled, &w);
		if (exs_sock_by_id(id) != s || s->state != EXS_S_CONNECTED) {
			ret = -ECONNRESET;
			break;
		}
	}
out:
	UNLOCK();
out_noloc:
	if (ret)
		exs_conn_segs_free(op); /* not started: still ours */
	else if (op->q_held)
		q = NULL; /* started: the reference is the op's */
	return block_end(q, pq, ret, ret_ev);
}

/* off < 0: a plain send or receive; else exs_send_offset/exs_recv_offset */
static ssize_t xfer(int kind, int fd, void *buf, size_t len, int flags, exs_qhandle_t qh,
		    exs_ahandle_t ah, exs_mhandle_t mh, off_t off)
{
	struct exs_op op = { .kind = kind, .flags = flags, .ah = ah, .buf = buf, .len = len,
			     .user_mh = mh, .at_off = off >= 0, .roff = off >= 0 ? (uint64_t)off : 0 };
	exs_event_t ev;
	int ret;

	if (!buf)
		return exs_err(EINVAL);
	if ((ret = xfer_args(kind, len, flags, qh, off < 0)))
		return exs_err(ret);
	ret = xfer_run(fd, &op, qh, &mh, &ev);
	if (ret <= 0)
		return ret;
	return (ssize_t)ev.exs_evt_union.exs_evt_xfer.exs_evt_length;
}

ssize_t exs_send(int fd, const void *buf, size_t len, int flags, exs_qhandle_t q,
		 exs_ahandle_t ah, exs_mhandle_t mh)
{
	EXS_NOCANCEL;
	return xfer(EXS_EVT_SEND, fd, (void *)buf, len, flags, q, ah, mh, -1);
}

ssize_t exs_recv(int fd, void *buf, size_t len, int flags, exs_qhandle_t q, exs_ahandle_t ah,
		 exs_mhandle_t mh)
{
	EXS_NOCANCEL;
	return xfer(EXS_EVT_RECV, fd, buf, len, flags, q, ah, mh, -1);
}

/* exs_send_offset(3): the offset is checked against the peer's block by
 * conn.c; a negative one is no offset at all */
ssize_t exs_send_offset(int fd, const void *buf, size_t len, int flags, off_t offset,
			exs_qhandle_t q, exs_ahandle_t ah, exs_mhandle_t mh)
{
	EXS_NOCANCEL;
	if (offset < 0)
		return exs_err(EINVAL);
	return xfer(EXS_EVT_SEND, fd, (void *)buf, len, flags, q, ah, mh, offset);
}

ssize_t exs_recv_offset(int fd, void *buf, size_t len, int flags, off_t offset, exs_qhandle_t q,
			exs_ahandle_t ah, exs_mhandle_t mh)
{
	EXS_NOCANCEL;
	if (offset < 0)
		return exs_err(EINVAL);
	return xfer(EXS_EVT_RECV, fd, buf, len, flags, q, ah, mh, offset);
}

/*
 * exs_sendmsg/exs_recvmsg (exs_sendmsg(3)): the msghdr's checks, then one
 * op. Empty elements are left out; one left is a plain exs_send/exs_recv
 * of it. More go as elements: a send's are gathered by the device, a
 * receive lands in a bounce buffer scattered over them when it completes.
 */
static ssize_t xfer_msg(int kind, int fd, const struct msghdr *msg, int flags, exs_qhandle_t qh,
			exs_ahandle_t ah, const exs_mhandle_t *mhandles)
{
	exs_mhandle_t mh[EXS_IOV_MAX];
	struct exs_seg seg[EXS_IOV_MAX];
	struct exs_op op;
	exs_event_t ev;
	uint32_t n = 0;
	size_t i, total = 0;
	int ret;

	if (!msg || (msg->msg_iovlen && !msg->msg_iov))
		return exs_err(EINVAL);
	if (!msg->msg_iovlen || msg->msg_iovlen > EXS_IOV_MAX) /* POSIX: EMSGSIZE */
		return exs_err(EMSGSIZE);
	if (msg->msg_control || msg->msg_controllen)
		return exs_err(EINVAL);
	if (kind == EXS_EVT_SEND && (msg->msg_name || msg->msg_namelen))
		return exs_err(EISCONN); /* connection-mode: the peer is the destination */
	for (i = 0; i < msg->msg_iovlen; i++) {
		const struct iovec *v = &msg->msg_iov[i];

		if (!v->iov_len)
			continue;
		if (!v->iov_base)
			return exs_err(EINVAL);
		if (v->iov_len > EXS_MAX_XFER - total)
			return exs_err(EMSGSIZE);
		total += v->iov_len;
		seg[n] = (struct exs_seg){ .addr = v->iov_base, .len = v->iov_len };
		mh[n++] = mhandles ? mhandles[i] : EXS_MHANDLE_UNREGISTERED;
	}
	if ((ret = xfer_args(kind, total, flags, qh, false)))
		return exs_err(ret);
	op = (struct exs_op){ .kind = kind, .flags = flags, .ah = ah, .len = total, .msg = msg,
			      .user_mh = EXS_MHANDLE_UNREGISTERED };
	if (n == 1)
		op.buf = seg[0].addr;
	else if (exs_conn_segs_new(&op, seg, n))
		return exs_err(ENOMEM);
	ret = xfer_run(fd, &op, qh, mh, &ev);
	if (ret <= 0)
		return ret;
	if (kind == EXS_EVT_RECV && ev.exs_evt_union.exs_evt_xfer.exs_evt_amount_lost)
		((struct msghdr *)msg)->msg_flags |= MSG_TRUNC;
	return (ssize_t)ev.exs_evt_union.exs_evt_xfer.exs_evt_length;
}

ssize_t exs_sendmsg(int fd, const struct msghdr *msg, int flags, exs_qhandle_t q,
		    exs_ahandle_t ah, const exs_mhandle_t *mhandles)
{
	EXS_NOCANCEL;
	return xfer_msg(EXS_EVT_SEND, fd, msg, flags, q, ah, mhandles);
}

ssize_t exs_recvmsg(int fd, struct msghdr *msg, int flags, exs_qhandle_t q, exs_ahandle_t ah,
		    const exs_mhandle_t *mhandles)
{
	EXS_NOCANCEL;
	if (msg) {
		/* a connected socket's peer has no address to report (as
		 * TCP's recvmsg) and nothing is truncated until it is */
		msg->msg_namelen = 0;
		msg->msg_flags = 0;
	}
	return xfer_msg(EXS_EVT_RECV, fd, msg, flags, q, ah, mhandles);
}

/*
 * exs_sendfile (exs_sendfile(3)): flags and queue as exs_send's, the
 * elements checked and their files opened (sendfile.c), then the socket.
 */
ssize_t exs_sendfile(int fd, const struct exs_sendfilevec *sendvec, int sendvec_cnt, int flags,
		     exs_qhandle_t qh, exs_ahandle_t ah)
{
	EXS_NOCANCEL;
	int allowed = EXS_BLOCK | EXS_CREDIT_WAIT | EXS_DONTWAIT | EXS_UNSIGNALED;
	struct exs_queue *q = NULL;
	struct exs_sock *s;
	struct exs_sf *sf;
	ssize_t n;
	int ret;

	if (in_child())
		return exs_err(ENOTSUP);
	if (!inited() || (flags & ~allowed))
		return exs_err(EINVAL);
	if (!(flags & EXS_BLOCK) && !qh && !(flags & EXS_UNSIGNALED))
		return exs_err(EINVAL);
	if ((ret = exs_sf_new(sendvec, sendvec_cnt, flags, &sf)))
		return exs_err(-ret);
	if (!(flags & EXS_BLOCK) && qh && exs_queue_hold(qh, &q)) {
		exs_sf_free(sf);
		return exs_err(EINVAL);
	}
	s = sock_lock(fd);
	if (!s) {
		ret = -errno;
	} else {
		ret = exs_sf_begin(sf, s, q, ah);
		UNLOCK();
	}
	if (ret) {
		if (q)
			exs_queue_unref(q);
		exs_sf_free(sf);
		return exs_err(-ret);
	}
	n = exs_sf_start(sf);
	return n < 0 ? exs_err((int)-n) : n;
}

ssize_t exs_blocking_send(int fd, const void *buf, size_t len, int flags, exs_mhandle_t mh)
{
	EXS_NOCANCEL;
	return exs_send(fd, buf, len, flags | EXS_BLOCK, NULL, NULL, mh);
}

ssize_t exs_blocking_recv(int fd, void *buf, size_t len, int flags, exs_mhandle_t mh)
{
	EXS_NOCANCEL;
	return exs_recv(fd, buf, len, flags | EXS_BLOCK, NULL, NULL, mh);
}

ssize_t exs_write(int fd, const void *buf, size_t len)
{
	EXS_NOCANCEL;
	return exs_send(fd, buf, len, EXS_BLOCK, NULL, NULL, EXS_MHANDLE_UNREGISTERED);
}

ssize_t exs_read(int fd, void *buf, size_t len)
{
	EXS_NOCANCEL;
	return exs_recv(fd, buf, len, EXS_BLOCK, NULL, NULL, EXS_MHANDLE_UNREGISTERED);
}

/* ---- readiness */

/* Lock held: fill every revents; how many are nonzero. */
static int poll_scan(struct pollfd *fds, nfds_t n)
{
	int ready = 0;

	for (nfds_t i = 0; i < n; i++) {
		struct exs_sock *s;

		fds[i].revents = 0;
		if (fds[i].fd < 0)
			continue; /* poll(2): ignored */
		s = exs_sock_get(fds[i].fd);
		if (!s || s->state == EXS_S_FREE || s->state == EXS_S_ACCEPTING ||
		    s->state == EXS_S_CLOSING || s->close_deferred)
			fds[i].revents = POLLNVAL;
		else
			fds[i].revents = exs_sock_poll(s, fds[i].events);
		if (fds[i].revents)
			ready++;
	}
	return ready;
}

static void poll_cancelled(void *unused)
{
	(void)unused;
	exs_g.pollers--;
	UNLOCK();
}

int exs_poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	EXS_NOCANCEL;
	struct timespec deadline;
	int ready;

	if (in_child())
		return exs_err(ENOTSUP);
	if (!inited() || (!fds && nfds) || nfds > EXS_MAX_SOCKETS)
		return exs_err(EINVAL);
	if (timeout > 0) {
		clock_gettime(CLOCK_MONOTONIC, &deadline);
		deadline.tv_sec += timeout / 1000;
		deadline.tv_nsec += (long)(timeout % 1000) * 1000000;
		if (deadline.tv_nsec >= 1000000000) {
			deadline.tv_sec++;
			deadline.tv_nsec -= 1000000000;
		}
	}
	LOCK();
	exs_g.pollers++;
	for (;;) {
		ready = poll_scan(fds, nfds);
		if (ready)
			break;
		exs_progress_idle(); /* nothing ready: coalesced sends go */
		if (timeout == 0)
			break;
		exs_progress_arm(); /* the completion that makes one ready must wake us */
		ready = poll_scan(fds, nfds); /* arming took what had come */
		if (ready)
			break;
		if (exs_g_wait(timeout < 0 ? NULL : &deadline, true, poll_cancelled, NULL) ==
		    ETIMEDOUT) {
			ready = poll_scan(fds, nfds);
			break;
		}
	}
	exs_g.pollers--;
	UNLOCK();
	return ready;
}

/* ---- tuning (guide §7) */

static bool fcntl_takes_arg(int cmd)
{
	return cmd == EXS_F_SETFD || cmd == EXS_F_SETFLOWCONTROLCREDITS ||
	       cmd == EXS_F_SETSPMAXSIZE || cmd == EXS_F_SETINLINEMAXSIZE ||
	       cmd == EXS_F_SETCOMPTHREADCPU || cmd == EXS_F_SETSTREAMBUFSIZE;
}

int exs_fcntl(int fd, int cmd, ...)
{
	EXS_NOCANCEL;
	struct exs_sock *s;
	va_list ap;
	int arg = 0, ret;

	if (fcntl_takes_arg(cmd)) { /* the get commands pass none: read none */
		va_start(ap, cmd);
		arg = va_arg(ap, int);
		va_end(ap);
	}
	s = sock_lock(fd);
	if (!s)
		return -1;
	ret = exs_sock_fcntl(s, cmd, arg);
	return ret < 0 ? fail_unlock(ret) : (UNLOCK(), ret);
}

/* ---- exs_cancel (exs_cancel(3)) */

int exs_cancel(int fd, exs_ahandle_t ah, int flags)
{
	EXS_NOCANCEL;
	struct exs_sock *s;
	int ret;

	if (flags & ~EXS_CANCEL_ANY)
		return exs_err(EINVAL);
	s = sock_lock(fd);
	if (!s)
		return -1;
	ret = exs_sock_cancel(s, ah, flags ? flags : EXS_CANCEL_ANY);
	return ret < 0 ? fail_unlock(ret) : (UNLOCK(), 0);
}
