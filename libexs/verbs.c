/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Verbs devices and memory registrations. A device is opened the first
 * time exsd routes a connection over it (exsd names it), with one PD and
 * one completion channel per device for the whole process. A user
 * registration (exs_mregister) is device-independent: it is registered
 * with a device lazily, on its first use there, and kept until
 * exs_mderegister. Called with exs_g.lock held unless noted.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/netlink.h>
#include <rdma/rdma_netlink.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "exs_int.h"

/*
 * ---- a device's tables. A device keeps at most max_qp QPs, max_cq CQs,
 * max_mr MRs and max_pd PDs (ibv_query_device), counted over every
 * process of the host. One that is full refuses the next with an errno
 * that does not say so: in the guest's Linux 6.1, siw says ENOMEM (as it
 * does for memory), rxe EINVAL for a PD and ENOMEM for an MR (its tables
 * of QPs and CQs hold a million, more than a few GiB of memory make). So
 * a refusal is checked against the kernel's count of the device's objects
 * (the RDMA netlink resource summary, `rdma resource show`, which any user
 * may read): a full table is ENOBUFS, with one line under EXS_DEBUG;
 * anything else keeps the driver's errno. Asked only after a refusal (a
 * few seconds under TCG with a million MRs: the kernel counts them).
 */
static const char *const tab_name[] = {
	[EXS_TAB_PD] = "pd", [EXS_TAB_CQ] = "cq", [EXS_TAB_QP] = "qp", [EXS_TAB_MR] = "mr",
};

/* The summary's count of `name` in netlink attributes [a, a + len) */
static int64_t summary_count(const char *a, size_t len, int want, const char *name)
{
	while (len >= NLA_HDRLEN) {
		const struct nlattr *na = (const struct nlattr *)a;
		size_t alen = na->nla_len, step = NLA_ALIGN(alen);
		int type = na->nla_type & NLA_TYPE_MASK;
		const char *body = a + NLA_HDRLEN;

		if (alen < NLA_HDRLEN || alen > len)
			return -1;
		if (type == want && want == RDMA_NLDEV_ATTR_RES_SUMMARY) {
			return summary_count(body, alen - NLA_HDRLEN,
					     RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY, name);
		} else if (type == want) { /* an entry: its name, its count */
			const char *b = body, *end = a + alen, *ename = NULL;
			int64_t cur = -1;

			while (end - b >= NLA_HDRLEN) {
				const struct nlattr *e = (const struct nlattr *)b;

				if (e->nla_len < NLA_HDRLEN || e->nla_len > end - b)
					break;
				if (e->nla_type == RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY_NAME)
					ename = b + NLA_HDRLEN;
				else if (e->nla_type == RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY_CURR &&
					 e->nla_len == NLA_HDRLEN + sizeof(uint64_t))
					memcpy(&cur, b + NLA_HDRLEN, sizeof(cur));
				b += NLA_ALIGN(e->nla_len);
			}
			if (ename && cur >= 0 &&
			    !strncmp(ename, name, (size_t)(end - ename)))
				return cur;
		}
		if (step >= len)
			break;
		a += step;
		len -= step;
	}
	return -1;
}

/* How many objects of a kind the device holds now, or -1 if unknown */
static int64_t dev_count(const struct exs_dev *d, enum exs_dev_table t)
{
	struct {
		struct nlmsghdr h;
		struct nlattr a;
		uint32_t index;
	} req = {
		.h = { .nlmsg_len = sizeof(req), .nlmsg_flags = NLM_F_REQUEST, .nlmsg_seq = 1,
		       .nlmsg_type = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_RES_GET) },
		.a = { .nla_len = NLA_HDRLEN + sizeof(uint32_t), .nla_type = RDMA_NLDEV_ATTR_DEV_INDEX },
		.index = (uint32_t)d->kindex,
	};
	struct timeval tv = { .tv_sec = 1 };
	union {
		struct nlmsghdr h;
		char b[8192];
	} rep;
	int64_t n = -1;
	ssize_t len;
	int fd;

	if (d->kindex < 0)
		return -1;
	fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_RDMA);
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (send(fd, &req, sizeof(req), 0) == (ssize_t)sizeof(req)) {
		len = recv(fd, &rep, sizeof(rep), 0);
		if (len >= (ssize_t)NLMSG_HDRLEN && NLMSG_OK(&rep.h, (size_t)len) &&
		    rep.h.nlmsg_type != NLMSG_ERROR)
			n = summary_count(NLMSG_DATA(&rep.h), rep.h.nlmsg_len - NLMSG_HDRLEN,
					  RDMA_NLDEV_ATTR_RES_SUMMARY, tab_name[t]);
	}
	close(fd);
	return n;
}

int exs_dev_refused(const struct exs_dev *d, enum exs_dev_table t, int err)
{
	const int max[] = {
		[EXS_TAB_PD] = d->attr.max_pd, [EXS_TAB_CQ] = d->attr.max_cq,
		[EXS_TAB_QP] = d->attr.max_qp, [EXS_TAB_MR] = d->attr.max_mr,
	};
	int64_t n = dev_count(d, t);

	/* one short counts as full: rxe refuses its MR table's last entry
	 * (524,286 of max_mr 524,287 in the guest), and siw counts a
	 * destroyed QP until its last reference goes, after the tracker
	 * let it go (a listener at the limit saw 102,399 of 102,400) */
	if (max[t] <= 0 || n < 0 || n + 1 < max[t])
		return err;
	if (EXS_DEBUG_ON())
		exs_debug("%s: the device's table of %ss is full (%" PRId64 " of max_%s %d): "
			  "ENOBUFS, not the driver's %s", d->name, tab_name[t], n, tab_name[t],
			  max[t], strerror(err));
	return ENOBUFS;
}

struct ibv_qp *exs_verbs_create_qp(struct exs_dev *d, struct ibv_qp_init_attr *qa)
{
	struct ibv_qp *qp;

	/* errno cleared: a provider may fail without setting it (libsiw
	 * does, for a CQ and a QP alike: siw_guard()) */
	errno = 0;
	qp = ibv_create_qp(d->pd, qa);
	if (!qp)
		errno = exs_dev_refused(d, EXS_TAB_QP, errno ? errno : EIO);
	return qp;
}

struct ibv_cq *exs_verbs_create_cq(struct exs_dev *d, int n, void *ctx,
				   struct ibv_comp_channel *chan)
{
	struct ibv_cq *cq;

	errno = 0;
	cq = ibv_create_cq(d->ctx, n, ctx, chan, 0);
	if (!cq)
		errno = exs_dev_refused(d, EXS_TAB_CQ, errno ? errno : EIO);
	return cq;
}

struct ibv_mr *exs_verbs_reg_mr(struct exs_dev *d, void *addr, size_t len, int access)
{
	struct ibv_mr *mr;

	errno = 0;
	mr = ibv_reg_mr(d->pd, addr, len, access);
	if (!mr)
		errno = exs_dev_refused(d, EXS_TAB_MR, errno ? errno : ENOMEM);
	return mr;
}

/* Is a QP with this much inline data what the device takes? Only a QP
 * without inline data asks the kernel's count when refused: the binary
 * search's refusals are the inline size's, and each would cost a netlink
 * round trip on the process's first connect over the device. */
static bool inline_ok(struct exs_dev *d, struct ibv_cq *cq, uint32_t n)
{
	struct ibv_qp_init_attr qa = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
			 .max_recv_sge = 1, .max_inline_data = n },
	};
	struct ibv_qp *qp = n ? ibv_create_qp(d->pd, &qa) : exs_verbs_create_qp(d, &qa);

	if (!qp)
		return false;
	ibv_destroy_qp(qp);
	return true;
}

/*
 * §7.3: the largest inline size the device accepts, found by asking it
 * (providers refuse a QP whose max_inline_data is above their limit; the
 * device attributes do not say the limit). A binary search, once per
 * device. A device that makes no QP at all (its table of QPs or CQs is
 * full) is not opened: -errno, so that a later connect asks again instead
 * of keeping an inline size of 0 for the life of the process.
 */
static int probe_inline(struct exs_dev *d)
{
	struct ibv_cq *cq = exs_verbs_create_cq(d, 2, NULL, NULL);
	uint32_t lo = 0, hi = EXS_MAX_INLINE;
	int err;

	if (!cq)
		return -errno;
	if (!inline_ok(d, cq, 0)) {
		err = errno;
		ibv_destroy_cq(cq);
		return -err;
	}
	if (inline_ok(d, cq, hi))
		lo = hi;
	while (hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (inline_ok(d, cq, mid))
			lo = mid;
		else
			hi = mid;
	}
	ibv_destroy_cq(cq);
	d->max_inline = lo;
	return 0;
}

/*
 * libsiw (rdma-core) takes the mmap key 0x90000 for "no key"
 * (SIW_INVAL_UOBJ_KEY), but keys are byte offsets into the context's mmap
 * space, handed out first-fit by page. So a CQ, SQ or RQ that the kernel
 * places at page 144 is refused by libsiw after the kernel made it
 * (ibv_create_cq/qp return NULL, errno untouched), and so is every later
 * one placed there, for the life of the context: a process with a few
 * connections could make no more (found by exs_stress; 145 one-page CQs
 * show it). A CQ made first and kept for the device's life spans pages
 * 0 to at least 256 (32,768 entries of 32 bytes), so no queue can start at
 * page 144. It costs 1 MiB of kernel memory per process on an siw device.
 */
#define SIW_VENDOR_ID 0x626d74 /* "bmt" */
#define SIW_GUARD_CQES 32768

static void siw_guard(struct exs_dev *d)
{
	int n = SIW_GUARD_CQES;

	if (d->attr.vendor_id != SIW_VENDOR_ID)
		return;
	if (d->attr.max_cqe > 0 && n > d->attr.max_cqe)
		n = d->attr.max_cqe;
	d->guard_cq = ibv_create_cq(d->ctx, n, NULL, NULL, 0);
	if (!d->guard_cq && EXS_DEBUG_ON())
		exs_debug("%s: no guard CQ of %d entries: %s", d->name, n, strerror(errno));
}

/*
 * A device keeps three descriptors of the process (its command file, its
 * async event file, the completion channel). Out of descriptors, rdma-core
 * fails ibv_open_device with an errno that does not say so (ENOSYS in the
 * guest), so they are looked for first: 0, or EMFILE (ENFILE).
 */
#define DEV_FDS 3

static int dev_fds_free(void)
{
	int fd[DEV_FDS], i, n, err = 0;

	for (n = 0; n < DEV_FDS; n++) {
		fd[n] = fcntl(exs_g.wakefd, F_DUPFD_CLOEXEC, 0);
		if (fd[n] < 0) {
			err = errno;
			break;
		}
	}
	for (i = 0; i < n; i++)
		close(fd[i]);
	return err;
}

struct exs_dev *exs_dev_get(const char *name, int *ret_err)
{
	struct ibv_device **list;
	struct exs_dev *d = NULL;
	struct ibv_port_attr pa;
	int n, i, err = ENODEV;

	for (i = 0; i < exs_g.ndevs; i++)
		if (!strcmp(exs_g.devs[i]->name, name))
			return exs_g.devs[i];
	if (exs_g.ndevs == EXS_MAX_DEVS) {
		*ret_err = ENOSPC;
		return NULL;
	}
	err = dev_fds_free();
	if (err) {
		*ret_err = err;
		return NULL;
	}
	err = ENODEV;
	list = ibv_get_device_list(&n);
	if (!list) {
		*ret_err = errno ? errno : ENODEV;
		return NULL;
	}
	for (i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			break;
	if (i == n)
		goto out;
	d = calloc(1, sizeof(*d));
	if (!d) {
		err = ENOMEM;
		goto out;
	}
	snprintf(d->name, sizeof(d->name), "%s", name);
	d->ctx = ibv_open_device(list[i]);
	if (!d->ctx)
		goto fail;
	if (ibv_query_device(d->ctx, &d->attr) || ibv_query_port(d->ctx, 1, &pa))
		goto fail;
	siw_guard(d); /* first, while the context's mmap space is empty */
	d->max_msg_sz = pa.max_msg_sz ? pa.max_msg_sz : 1;
	/* a message above max_msg_sz goes as several writes (rxe: 8 MiB);
	 * at most EXS_MAX_CHUNKS, and the send queue is sized for them */
	d->max_chunks = (unsigned)((EXS_MAX_XFER + d->max_msg_sz - 1) / d->max_msg_sz);
	if (d->max_chunks > EXS_MAX_CHUNKS)
		d->max_chunks = EXS_MAX_CHUNKS;
	d->kindex = ibv_get_device_index(list[i]);
	errno = 0;
	d->pd = ibv_alloc_pd(d->ctx);
	if (!d->pd) {
		err = exs_dev_refused(d, EXS_TAB_PD, errno ? errno : ENOMEM);
		goto fail;
	}
	d->chan = ibv_create_comp_channel(d->ctx);
	if (!d->chan)
		goto fail;
	err = -probe_inline(d);
	if (err)
		goto fail;
	fcntl(d->chan->fd, F_SETFL, fcntl(d->chan->fd, F_GETFL) | O_NONBLOCK);
	d->index = exs_g.ndevs;
	err = -exs_progress_add_fd(d->chan->fd, d);
	if (err)
		goto fail;
	exs_g.devs[exs_g.ndevs++] = d;
	ibv_free_device_list(list);
	return d;
fail:
	if (!err || err == ENODEV)
		err = errno ? errno : EIO;
	if (d->chan)
		ibv_destroy_comp_channel(d->chan);
	if (d->pd)
		ibv_dealloc_pd(d->pd);
	if (d->guard_cq)
		ibv_destroy_cq(d->guard_cq);
	if (d->ctx)
		ibv_close_device(d->ctx);
	free(d);
	d = NULL;
out:
	ibv_free_device_list(list);
	*ret_err = err;
	return NULL;
}

/*
 * ---- registrations. The handle names one registration (handle.c), so a
 * stale exs_mderegister or transfer finds nothing (EINVAL) instead of the
 * region registered next. Objects stay in their slot (see queue.c); lookups
 * and deletion run under exs_g.lock, creation before it.
 */
static struct exs_htab mtab = EXS_HTAB_INIT;

struct exs_mreg *exs_mreg_get(exs_mhandle_t h)
{
	return h == EXS_MHANDLE_UNREGISTERED ? NULL : exs_htab_get(&mtab, (uintptr_t)h, NULL);
}

struct exs_mreg *exs_mreg_new(void *addr, size_t len, int flags)
{
	struct exs_mreg *m;
	uint32_t idx;
	void *obj;
	int err = exs_htab_alloc(&mtab, &idx, &obj);

	if (err) {
		errno = -err;
		return NULL;
	}
	m = obj;
	if (!m && !(m = malloc(sizeof(*m)))) {
		exs_htab_release(&mtab, idx, NULL);
		errno = ENOMEM;
		return NULL;
	}
	memset(m, 0, sizeof(*m));
	m->idx = idx;
	m->addr = addr;
	m->len = len;
	m->flags = flags;
	m->h = (exs_mhandle_t)exs_htab_publish(&mtab, idx, m);
	return m;
}

int exs_mreg_covering(exs_mhandle_t mh, const char *p, size_t len, int kind,
		      struct exs_mreg **ret_m)
{
	struct exs_mreg *m;

	if (mh == EXS_MHANDLE_UNREGISTERED) {
		*ret_m = NULL;
		return 0;
	}
	m = exs_mreg_get(mh);
	if (!m || p < m->addr || p + len > m->addr + m->len ||
	    (kind == EXS_EVT_RECV && (m->flags & EXS_MRF_RECV_DISABLE)))
		return -EINVAL;
	*ret_m = m;
	return 0;
}

int exs_mreg_delete(struct exs_mreg *m)
{
	int i;

	if (m->refs)
		return -EBUSY;
	if (!exs_htab_kill(&mtab, (uintptr_t)m->h))
		return -EINVAL;
	for (i = 0; i < EXS_MAX_DEVS; i++)
		if (m->mr[i])
			ibv_dereg_mr(m->mr[i]);
	memset(m->mr, 0, sizeof(m->mr));
	exs_htab_release(&mtab, m->idx, m);
	return 0;
}

/* A region's own registration: remote write unless EXS_MRF_ADVERT_ONLY,
 * with which each advert registers its receive's buffer (conn.c) and the
 * region's key lets a peer reach nothing. */
static int mreg_access(int flags)
{
	if (flags & EXS_MRF_RECV_DISABLE)
		return 0;
	return IBV_ACCESS_LOCAL_WRITE | (flags & EXS_MRF_ADVERT_ONLY ? 0 : IBV_ACCESS_REMOTE_WRITE);
}

struct ibv_mr *exs_mreg_mr(struct exs_mreg *m, struct exs_dev *d)
{
	if (!m->mr[d->index])
		m->mr[d->index] = exs_verbs_reg_mr(d, m->addr, m->len, mreg_access(m->flags));
	return m->mr[d->index];
}

/*
 * exs_mmodify: a new length (same start) and flags. Every device that has
 * the region pinned pins the new range first, so a failure leaves the old
 * registration whole; only then are the old ones let go. Not while an
 * operation uses it: its keys are the old ones.
 */
int exs_mreg_modify(struct exs_mreg *m, size_t len, int flags)
{
	struct ibv_mr *n[EXS_MAX_DEVS] = { 0 };
	int i, err = 0;

	if (m->refs)
		return -EBUSY;
	if (len == m->len && mreg_access(flags) == mreg_access(m->flags)) {
		m->flags = flags;
		return 0;
	}
	for (i = 0; i < EXS_MAX_DEVS && !err; i++) {
		if (!m->mr[i])
			continue;
		n[i] = exs_verbs_reg_mr(exs_g.devs[i], m->addr, len, mreg_access(flags));
		if (!n[i])
			err = -errno;
	}
	for (i = 0; i < EXS_MAX_DEVS; i++) {
		struct ibv_mr *gone = err ? n[i] : m->mr[i];

		if (gone)
			ibv_dereg_mr(gone);
		if (!err)
			m->mr[i] = n[i];
	}
	if (err)
		return err;
	m->len = len;
	m->flags = flags;
	return 0;
}

/* A post's result as -errno. Providers disagree on the sign (the verbs
 * documentation says a positive errno; siw has been seen to return a
 * negative one once its QP is dead), and -1 means "see errno". */
static int post_ret(int r)
{
	if (!r)
		return 0;
	if (r == -1)
		r = errno ? errno : EIO;
	return r < 0 ? r : -r;
}

/*
 * An application that ignores SIGPIPE, as most network programs do, needs
 * no guard: the kernel discards a SIGPIPE for an ignored signal as it is
 * raised. Asking whether it is ignored (sigaction) is one system call in
 * place of the guard's three, so it is asked whenever the last answer was
 * yes; after a no, the guard runs without asking and asks again every
 * PIPE_RECHECK guards, so that a program that starts ignoring SIGPIPE
 * later is noticed, and one that stops is always guarded. (A thread that
 * ignores SIGPIPE and also blocks it would keep a raised one pending;
 * delivered later, it is ignored.)
 */
#define PIPE_RECHECK 64
static bool pipe_ign = true;   /* the last answer (atomic); true: ask first */
static unsigned pipe_unasked; /* guards since (atomic) */

static bool pipe_ignored(void)
{
	struct sigaction sa;
	bool ign;

	if (!__atomic_load_n(&pipe_ign, __ATOMIC_RELAXED) &&
	    __atomic_add_fetch(&pipe_unasked, 1, __ATOMIC_RELAXED) % PIPE_RECHECK)
		return false;
	ign = !sigaction(SIGPIPE, NULL, &sa) && !(sa.sa_flags & SA_SIGINFO) &&
	      sa.sa_handler == SIG_IGN;
	__atomic_store_n(&pipe_ign, ign, __ATOMIC_RELAXED);
	return ign;
}

/*
 * siw transmits on a TCP socket from the calling thread's system call,
 * without MSG_NOSIGNAL: a post_send (data), and a modify to ERR or a
 * destroy of a QP that owes the peer a TERMINATE. After the peer died that
 * raises SIGPIPE, which would kill an application that never asked for it.
 * The guard blocks SIGPIPE around such a call and takes back one that the
 * call raised; one that was already pending stays for the application.
 *
 * It runs around every post on iWARP, so it makes as few system calls as
 * it can (each is the better part of a microsecond, more in a TCG guest):
 * a SIGPIPE for a thread that did not block it would have been delivered,
 * so only a thread that blocks SIGPIPE itself is asked what is pending,
 * and its mask needs no restoring; sigtimedwait() with no wait both looks
 * for the one the call raised and takes it back. Three calls where there
 * were four: block, take back, restore.
 */
void exs_nopipe_begin(struct exs_nopipe *g)
{
	sigset_t pending;

	g->ignored = pipe_ignored();
	if (g->ignored)
		return;
	sigemptyset(&g->pipe);
	sigaddset(&g->pipe, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &g->pipe, &g->old);
	g->was_blocked = sigismember(&g->old, SIGPIPE);
	g->was_pending = false;
	if (g->was_blocked) {
		sigpending(&pending);
		g->was_pending = sigismember(&pending, SIGPIPE);
	}
}

void exs_nopipe_end(struct exs_nopipe *g)
{
	static const struct timespec zero;
	int e = errno;

	if (g->ignored)
		return;
	if (!g->was_pending)
		sigtimedwait(&g->pipe, NULL, &zero); /* EAGAIN: the call raised none */
	if (!g->was_blocked)
		pthread_sigmask(SIG_SETMASK, &g->old, NULL);
	errno = e;
}

int exs_verbs_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr)
{
	struct ibv_recv_wr *bad;

	return post_ret(ibv_post_recv(qp, wr, &bad));
}

int exs_verbs_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, bool guard)
{
	struct exs_nopipe g;
	struct ibv_send_wr *bad;
	int ret;

	if (!guard)
		return post_ret(ibv_post_send(qp, wr, &bad));
	exs_nopipe_begin(&g);
	ret = post_ret(ibv_post_send(qp, wr, &bad));
	exs_nopipe_end(&g);
	return ret;
}

/* ibv_modify_qp, as -errno, guarded on iWARP (see exs_nopipe_begin) */
int exs_verbs_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, bool guard)
{
	struct exs_nopipe g;
	int ret;

	if (!guard)
		return -ibv_modify_qp(qp, attr, mask);
	exs_nopipe_begin(&g);
	ret = -ibv_modify_qp(qp, attr, mask);
	exs_nopipe_end(&g);
	return ret;
}

void exs_verbs_destroy_qp(struct ibv_qp *qp, bool guard)
{
	struct exs_nopipe g;

	if (!guard) {
		ibv_destroy_qp(qp);
		return;
	}
	exs_nopipe_begin(&g);
	ibv_destroy_qp(qp);
	exs_nopipe_end(&g);
}
