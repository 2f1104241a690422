/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * A fake verbs device for fuzzing libexs's data path (fuzz_peer.c):
 * link-time definitions of the libibverbs calls libexs makes (and the
 * context ops behind the inline ibv_post_send, ibv_post_recv, ibv_poll_cq
 * and ibv_req_notify_cq), so libexs's real verbs.c and conn.c run against
 * one device "fake0" whose QPs behave like RC QPs towards a peer that the
 * harness plays:
 *   - send WRs wait in the send queue until the peer takes them (fv_take),
 *     in order; a signalled one then completes; the data is gathered when
 *     it is taken (not when posted, unless inline), from memory registered
 *     under the SGE's lkey: anything else is a libexs bug and aborts;
 *   - the peer's SENDs and WRITE_WITH_IMMs take the oldest posted receive
 *     and complete it with the byte length (and the immediate); a SEND
 *     longer than the receive is a local length error;
 *   - a write outside a registration of its rkey with remote write access
 *     is a remote access error, as is one of libexs's writes outside the
 *     peer's memory; any error moves the QP to the error state, which
 *     flushes every outstanding WR in order (signalled or not), and a WR
 *     posted in the error state completes at once, flushed;
 *   - a CQ never holds more than it was created for: an overrun aborts.
 * Nothing here runs on its own: no completion event is ever raised, so
 * only an explicit poll (the harness's, or a waiting caller's) sees them.
 * This is a fuzzing tool, never evidence that a feature works.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "fake_verbs.h"

#define FV_MAX_SGE 4
#define FV_MAX_INLINE 256
#define FV_MAX_WR 16384
#define FV_MAX_MSG 16384 /* max_msg_sz: a send above it goes in several writes */

uint8_t fv_peer_mem[65536];

struct fv_mr {
	struct ibv_mr mr;
	struct fv_mr *next;
};

struct fv_cq {
	struct ibv_cq cq;
	struct ibv_wc *wc;
	unsigned cap, head, n;
};

struct fv_swr {
	uint64_t wr_id;
	enum ibv_wr_opcode opcode;
	unsigned flags;
	uint32_t imm, rkey;
	uint64_t raddr;
	int nsge;
	struct ibv_sge sge[FV_MAX_SGE];
	uint8_t *inl; /* inline: the data as posted */
	uint32_t inl_len;
};

struct fv_rwr {
	uint64_t wr_id;
	int nsge;
	struct ibv_sge sge[FV_MAX_SGE];
};

struct fv_qp {
	struct ibv_qp qp;
	struct fv_swr *sq;
	unsigned sq_cap, sq_head, sq_n;
	struct fv_rwr *rq;
	unsigned rq_cap, rq_head, rq_n;
	uint32_t max_send_sge, max_recv_sge, max_inline;
	bool sig_all;
};

static struct fv_mr *mrs;
static unsigned live, next_key = 0x100, next_qpn = 0x20;
static struct ibv_device fake_dev;
static uint8_t gather_buf[FV_MAX_MSG];

unsigned fv_live(void)
{
	return live;
}

static __attribute__((noreturn)) void bug(const char *what)
{
	fprintf(stderr, "fake_verbs: %s\n", what);
	abort();
}

/* ---- completions */

static void cq_push(struct ibv_cq *ibcq, const struct ibv_wc *wc)
{
	struct fv_cq *cq = (struct fv_cq *)ibcq;

	if (cq->n == cq->cap)
		bug("CQ overrun: more completions outstanding than the CQ was created for");
	cq->wc[(cq->head + cq->n++) % cq->cap] = *wc;
}

static int fv_poll_cq(struct ibv_cq *ibcq, int num, struct ibv_wc *wc)
{
	struct fv_cq *cq = (struct fv_cq *)ibcq;
	int i;

	for (i = 0; i < num && cq->n; i++) {
		wc[i] = cq->wc[cq->head];
		cq->head = (cq->head + 1) % cq->cap;
		cq->n--;
	}
	return i;
}

static int fv_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	(void)cq;
	(void)solicited_only;
	return 0;
}

static void complete(struct fv_qp *q, struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status st,
		     enum ibv_wc_opcode op, uint32_t len)
{
	struct ibv_wc wc = { .wr_id = wr_id, .status = st, .opcode = op, .byte_len = len,
			     .qp_num = q->qp.qp_num };

	cq_push(cq, &wc);
}

static enum ibv_wc_opcode send_wc_opcode(enum ibv_wr_opcode op)
{
	return op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM ? IBV_WC_RDMA_WRITE :
									     IBV_WC_SEND;
}

/* The QP breaks: every outstanding WR completes, flushed, in order. */
static void qp_error(struct fv_qp *q)
{
	q->qp.state = IBV_QPS_ERR;
	for (; q->sq_n; q->sq_n--, q->sq_head = (q->sq_head + 1) % q->sq_cap) {
		struct fv_swr *w = &q->sq[q->sq_head];

		complete(q, q->qp.send_cq, w->wr_id, IBV_WC_WR_FLUSH_ERR,
			 send_wc_opcode(w->opcode), 0);
		free(w->inl);
		w->inl = NULL;
	}
	for (; q->rq_n; q->rq_n--, q->rq_head = (q->rq_head + 1) % q->rq_cap)
		complete(q, q->qp.recv_cq, q->rq[q->rq_head].wr_id, IBV_WC_WR_FLUSH_ERR,
			 IBV_WC_RECV, 0);
}

void fv_qp_fail(struct ibv_qp *qp, enum ibv_wc_status status)
{
	struct fv_qp *q = (struct fv_qp *)qp;

	if (qp->state == IBV_QPS_ERR || qp->state == IBV_QPS_RESET)
		return;
	/* the oldest send WR is the one the transport gave up on */
	if (q->sq_n) {
		struct fv_swr *w = &q->sq[q->sq_head];

		complete(q, qp->send_cq, w->wr_id, status, send_wc_opcode(w->opcode), 0);
		free(w->inl);
		w->inl = NULL;
		q->sq_head = (q->sq_head + 1) % q->sq_cap;
		q->sq_n--;
	}
	qp_error(q);
}

/* ---- memory */

static struct fv_mr *mr_find(uint32_t key, uint64_t addr, uint64_t len, int access)
{
	struct fv_mr *m;

	for (m = mrs; m; m = m->next)
		if (m->mr.lkey == key && addr >= (uintptr_t)m->mr.addr &&
		    len <= m->mr.length && addr - (uintptr_t)m->mr.addr <= m->mr.length - len &&
		    (m->mr.handle & (uint32_t)access) == (uint32_t)access)
			return m;
	return NULL;
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				unsigned int access)
{
	struct fv_mr *m = calloc(1, sizeof(*m));

	(void)iova;
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = length;
	m->mr.handle = access; /* the fake keeps the access flags here */
	m->mr.lkey = m->mr.rkey = next_key++;
	m->next = mrs;
	mrs = m;
	live++;
	return &m->mr;
}

struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned)access);
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	struct fv_mr **p;

	for (p = &mrs; *p; p = &(*p)->next)
		if (&(*p)->mr == mr) {
			struct fv_mr *m = *p;

			*p = m->next;
			free(m);
			live--;
			return 0;
		}
	bug("ibv_dereg_mr of a region not registered (twice?)");
}

/* ---- device, PD, channel */

int ibv_fork_init(void)
{
	return 0;
}

struct ibv_device **ibv_get_device_list(int *num)
{
	struct ibv_device **l = calloc(2, sizeof(*l));

	if (!l)
		return NULL;
	snprintf(fake_dev.name, sizeof(fake_dev.name), "fake0");
	l[0] = &fake_dev;
	if (num)
		*num = 1;
	return l;
}

void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

const char *ibv_get_device_name(struct ibv_device *device)
{
	return device->name;
}

/* no kernel device: libexs asks RDMA netlink nothing about it */
int ibv_get_device_index(struct ibv_device *device)
{
	(void)device;
	return -1;
}

static int fv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
static int fv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct ibv_context *ctx = calloc(1, sizeof(*ctx));

	if (!ctx)
		return NULL;
	ctx->device = device;
	ctx->cmd_fd = ctx->async_fd = -1;
	ctx->num_comp_vectors = 1;
	ctx->ops.poll_cq = fv_poll_cq;
	ctx->ops.req_notify_cq = fv_req_notify_cq;
	ctx->ops.post_send = fv_post_send;
	ctx->ops.post_recv = fv_post_recv;
	return ctx;
}

int ibv_close_device(struct ibv_context *ctx)
{
	free(ctx);
	return 0;
}

int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *a)
{
	(void)ctx;
	memset(a, 0, sizeof(*a));
	a->max_qp_wr = FV_MAX_WR;
	a->max_sge = FV_MAX_SGE;
	a->max_cqe = 4 * FV_MAX_WR;
	a->phys_port_cnt = 1;
	return 0;
}

/* the compat symbol the inline ibv_query_port falls back to */
int (ibv_query_port)(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *pa)
{
	struct ibv_port_attr *a = (struct ibv_port_attr *)pa;

	(void)ctx;
	if (port != 1)
		return EINVAL;
	a->state = IBV_PORT_ACTIVE;
	a->max_msg_sz = FV_MAX_MSG;
	return 0;
}

struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
	struct ibv_pd *pd = calloc(1, sizeof(*pd));

	if (pd)
		pd->context = ctx;
	return pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
	free(pd);
	return 0;
}

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx)
{
	struct ibv_comp_channel *ch = calloc(1, sizeof(*ch));

	if (!ch)
		return NULL;
	ch->context = ctx;
	ch->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); /* never readable */
	if (ch->fd < 0) {
		free(ch);
		return NULL;
	}
	return ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	close(ch->fd);
	free(ch);
	return 0;
}

int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **ctx)
{
	(void)ch;
	(void)cq;
	(void)ctx;
	errno = EAGAIN;
	return -1;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
	(void)cq;
	(void)n;
}

const char *ibv_wc_status_str(enum ibv_wc_status status)
{
	(void)status;
	return "fake completion error";
}

/* ---- CQ and QP */

struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_ctx,
			     struct ibv_comp_channel *ch, int vector)
{
	struct fv_cq *cq;

	(void)vector;
	if (cqe < 1 || cqe > 4 * FV_MAX_WR) {
		errno = EINVAL;
		return NULL;
	}
	cq = calloc(1, sizeof(*cq));
	if (!cq || !(cq->wc = calloc((size_t)cqe, sizeof(*cq->wc)))) {
		free(cq);
		errno = ENOMEM;
		return NULL;
	}
	cq->cap = (unsigned)cqe;
	cq->cq.context = ctx;
	cq->cq.channel = ch;
	cq->cq.cq_context = cq_ctx;
	cq->cq.cqe = cqe;
	live++;
	return &cq->cq;
}

int ibv_destroy_cq(struct ibv_cq *ibcq)
{
	struct fv_cq *cq = (struct fv_cq *)ibcq;

	free(cq->wc);
	free(cq);
	live--;
	return 0;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
	struct fv_qp *q;

	if (a->qp_type != IBV_QPT_RC || !a->send_cq || !a->recv_cq || !a->cap.max_send_wr ||
	    a->cap.max_send_wr > FV_MAX_WR || !a->cap.max_recv_wr || a->cap.max_recv_wr > FV_MAX_WR ||
	    a->cap.max_send_sge > FV_MAX_SGE || a->cap.max_recv_sge > FV_MAX_SGE ||
	    a->cap.max_inline_data > FV_MAX_INLINE) {
		errno = EINVAL;
		return NULL;
	}
	q = calloc(1, sizeof(*q));
	if (!q)
		goto nomem;
	q->sq = calloc(a->cap.max_send_wr, sizeof(*q->sq));
	q->rq = calloc(a->cap.max_recv_wr, sizeof(*q->rq));
	if (!q->sq || !q->rq) {
		free(q->sq);
		free(q->rq);
		free(q);
		goto nomem;
	}
	q->sq_cap = a->cap.max_send_wr;
	q->rq_cap = a->cap.max_recv_wr;
	q->max_send_sge = a->cap.max_send_sge;
	q->max_recv_sge = a->cap.max_recv_sge;
	q->max_inline = a->cap.max_inline_data;
	q->sig_all = a->sq_sig_all;
	q->qp.context = pd->context;
	q->qp.qp_context = a->qp_context;
	q->qp.pd = pd;
	q->qp.send_cq = a->send_cq;
	q->qp.recv_cq = a->recv_cq;
	q->qp.qp_num = next_qpn++;
	q->qp.state = IBV_QPS_RESET;
	q->qp.qp_type = IBV_QPT_RC;
	live++;
	return &q->qp;
nomem:
	errno = ENOMEM;
	return NULL;
}

static void drop_queues(struct fv_qp *q)
{
	for (; q->sq_n; q->sq_n--, q->sq_head = (q->sq_head + 1) % q->sq_cap) {
		free(q->sq[q->sq_head].inl);
		q->sq[q->sq_head].inl = NULL;
	}
	q->rq_n = 0;
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct fv_qp *q = (struct fv_qp *)qp;

	drop_queues(q);
	free(q->sq);
	free(q->rq);
	free(q);
	live--;
	return 0;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	struct fv_qp *q = (struct fv_qp *)qp;

	if (!(mask & IBV_QP_STATE))
		return 0;
	if (attr->qp_state > IBV_QPS_ERR)
		return EINVAL;
	if (attr->qp_state == IBV_QPS_ERR) {
		if (qp->state != IBV_QPS_ERR)
			qp_error(q);
		return 0;
	}
	if (attr->qp_state == IBV_QPS_RESET)
		drop_queues(q);
	qp->state = attr->qp_state;
	return 0;
}

/* ---- posting */

static int fv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct fv_qp *q = (struct fv_qp *)qp;

	for (; wr; wr = wr->next) {
		struct fv_swr *w;
		uint32_t total = 0;
		int i;

		*bad = wr;
		if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_ERR)
			return EINVAL;
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->max_send_sge)
			return EINVAL;
		if (wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_RDMA_WRITE &&
		    wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM)
			return EINVAL;
		for (i = 0; i < wr->num_sge; i++)
			total += wr->sg_list[i].length;
		if ((wr->send_flags & IBV_SEND_INLINE) && total > q->max_inline)
			return EINVAL;
		if (q->sq_n == q->sq_cap)
			return ENOMEM;
		if (qp->state == IBV_QPS_ERR) {
			complete(q, qp->send_cq, wr->wr_id, IBV_WC_WR_FLUSH_ERR,
				 send_wc_opcode(wr->opcode), 0);
			continue;
		}
		w = &q->sq[(q->sq_head + q->sq_n) % q->sq_cap];
		memset(w, 0, sizeof(*w));
		w->wr_id = wr->wr_id;
		w->opcode = wr->opcode;
		w->flags = wr->send_flags;
		w->imm = wr->imm_data;
		w->raddr = wr->wr.rdma.remote_addr;
		w->rkey = wr->wr.rdma.rkey;
		w->nsge = wr->num_sge;
		memcpy(w->sge, wr->sg_list, (size_t)wr->num_sge * sizeof(*wr->sg_list));
		if (wr->send_flags & IBV_SEND_INLINE) {
			uint32_t off = 0;

			w->inl = malloc(total ? total : 1);
			if (!w->inl)
				return ENOMEM;
			for (i = 0; i < wr->num_sge; i++) {
				memcpy(w->inl + off, (void *)(uintptr_t)wr->sg_list[i].addr,
				       wr->sg_list[i].length);
				off += wr->sg_list[i].length;
			}
			w->inl_len = total;
		}
		q->sq_n++;
	}
	*bad = NULL;
	return 0;
}

static int fv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct fv_qp *q = (struct fv_qp *)qp;

	for (; wr; wr = wr->next) {
		struct fv_rwr *r;

		*bad = wr;
		if (qp->state == IBV_QPS_RESET)
			return EINVAL;
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->max_recv_sge)
			return EINVAL;
		if (q->rq_n == q->rq_cap)
			return ENOMEM;
		if (qp->state == IBV_QPS_ERR) {
			complete(q, qp->recv_cq, wr->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0);
			continue;
		}
		r = &q->rq[(q->rq_head + q->rq_n++) % q->rq_cap];
		r->wr_id = wr->wr_id;
		r->nsge = wr->num_sge;
		memcpy(r->sge, wr->sg_list, (size_t)wr->num_sge * sizeof(*wr->sg_list));
	}
	*bad = NULL;
	return 0;
}

/* ---- the peer's side */

unsigned fv_sq_pending(struct ibv_qp *qp)
{
	return ((struct fv_qp *)qp)->sq_n;
}

/* The bytes of send WR w, from registered memory (or its inline copy). */
static uint32_t gather(const struct fv_swr *w)
{
	uint32_t off = 0;
	int i;

	if (w->flags & IBV_SEND_INLINE) {
		memcpy(gather_buf, w->inl, w->inl_len);
		return w->inl_len;
	}
	for (i = 0; i < w->nsge; i++) {
		const struct ibv_sge *s = &w->sge[i];

		if (s->length > sizeof(gather_buf) - off)
			bug("a send WR longer than the port's max_msg_sz");
		if (!mr_find(s->lkey, s->addr, s->length, 0)) {
			fprintf(stderr, "fake_verbs: opcode %d, SGE %d of %d: %#" PRIx64 " +%u lkey %#x\n",
				w->opcode, i, w->nsge, s->addr, s->length, s->lkey);
			bug("a send WR's SGE outside the registration of its lkey");
		}
		memcpy(gather_buf + off, (void *)(uintptr_t)s->addr, s->length);
		off += s->length;
	}
	return off;
}

bool fv_take(struct ibv_qp *qp, fv_peer_fn fn, void *arg)
{
	struct fv_qp *q = (struct fv_qp *)qp;
	struct fv_swr *w;
	struct fv_wr v;
	int st;

	if (qp->state != IBV_QPS_RTS || !q->sq_n)
		return false;
	w = &q->sq[q->sq_head];
	v = (struct fv_wr){ .opcode = w->opcode, .data = gather_buf, .raddr = w->raddr,
			    .rkey = w->rkey, .imm = w->imm };
	v.len = gather(w);
	st = fn(arg, &v);
	if (!st && w->opcode != IBV_WR_SEND) {
		if (w->rkey != FV_PEER_RKEY || w->raddr < (uintptr_t)fv_peer_mem ||
		    v.len > sizeof(fv_peer_mem) ||
		    w->raddr - (uintptr_t)fv_peer_mem > sizeof(fv_peer_mem) - v.len)
			st = IBV_WC_REM_ACCESS_ERR;
		else
			memcpy((void *)(uintptr_t)w->raddr, gather_buf, v.len);
	}
	if (st) {
		fv_qp_fail(qp, (enum ibv_wc_status)st);
		return true;
	}
	if (q->sig_all || (w->flags & IBV_SEND_SIGNALED))
		complete(q, qp->send_cq, w->wr_id, IBV_WC_SUCCESS, send_wc_opcode(w->opcode), v.len);
	free(w->inl);
	w->inl = NULL;
	q->sq_head = (q->sq_head + 1) % q->sq_cap;
	q->sq_n--;
	return true;
}

static bool can_receive(const struct ibv_qp *qp)
{
	return qp->state == IBV_QPS_RTR || qp->state == IBV_QPS_RTS;
}

bool fv_peer_send(struct ibv_qp *qp, const void *data, uint32_t len)
{
	struct fv_qp *q = (struct fv_qp *)qp;
	struct fv_rwr *r;
	uint32_t off = 0, room = 0;
	int i;

	if (!can_receive(qp) || !q->rq_n)
		return false;
	r = &q->rq[q->rq_head];
	for (i = 0; i < r->nsge; i++)
		room += r->sge[i].length;
	q->rq_head = (q->rq_head + 1) % q->rq_cap;
	q->rq_n--;
	if (len > room) {
		complete(q, qp->recv_cq, r->wr_id, IBV_WC_LOC_LEN_ERR, IBV_WC_RECV, 0);
		qp_error(q);
		return true;
	}
	for (i = 0; i < r->nsge && off < len; i++) {
		uint32_t k = r->sge[i].length < len - off ? r->sge[i].length : len - off;

		if (!mr_find(r->sge[i].lkey, r->sge[i].addr, k, IBV_ACCESS_LOCAL_WRITE))
			bug("a receive WR's SGE outside a writable registration of its lkey");
		memcpy((void *)(uintptr_t)r->sge[i].addr, (const uint8_t *)data + off, k);
		off += k;
	}
	complete(q, qp->recv_cq, r->wr_id, IBV_WC_SUCCESS, IBV_WC_RECV, len);
	return true;
}

bool fv_peer_write(struct ibv_qp *qp, uint64_t addr, uint32_t rkey, const void *data,
		   uint32_t len, bool with_imm, uint32_t imm)
{
	struct fv_qp *q = (struct fv_qp *)qp;
	struct ibv_wc wc;
	struct fv_rwr *r;

	if (!can_receive(qp) || (with_imm && !q->rq_n))
		return false;
	if (len && !mr_find(rkey, addr, len, IBV_ACCESS_REMOTE_WRITE)) {
		qp_error(q); /* the responder's remote access error */
		return true;
	}
	if (len)
		memcpy((void *)(uintptr_t)addr, data, len);
	if (!with_imm)
		return true;
	r = &q->rq[q->rq_head];
	q->rq_head = (q->rq_head + 1) % q->rq_cap;
	q->rq_n--;
	wc = (struct ibv_wc){ .wr_id = r->wr_id, .status = IBV_WC_SUCCESS,
			      .opcode = IBV_WC_RECV_RDMA_WITH_IMM, .byte_len = len,
			      .imm_data = imm, .wc_flags = IBV_WC_WITH_IMM, .qp_num = qp->qp_num };
	cq_push(qp->recv_cq, &wc);
	return true;
}
