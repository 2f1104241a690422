/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * One established connection (proto/exs_wire.h): its state machine (one
 * enum per direction and one for the link, each changed only through its
 * setter) and its data path: adverts, credits, placement by RDMA
 * WRITE_WITH_IMM (or WRITE + DONE on iWARP), FIN, RDSHUT and ABORT, and the
 * completions that turn into user events. Every resource is sized at
 * set-up from the credit count, so nothing here allocates per operation
 * (an exs_sendmsg/exs_recvmsg op brings its element list and bounce
 * buffer from api.c; they are freed here when the op ends).
 * It knows nothing of sockets: what the socket layer needs, it reads
 * through the queries at the end. Called with exs_g.lock held.
 */
#include <arpa/inet.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "exs_int.h"

/* local only, on a held copy of the peer's ADVERT: partly filled for a
 * MSG_WAITALL receive, waiting for the peer's MORE before the next piece */
#define ADV_HELD 0x8000
/* WR_MARK: a data WR signalled only to say how far the data WRs got;
 * WR_EMARK: an EAGER SEND signalled only to say how far those got (its
 * slot field is the count, eager_sig) */
enum { WR_RECV = 1, WR_CTL = 2, WR_WRITE = 3, WR_EAGER = 4, WR_READ = 5, WR_MARK = 6, WR_EMARK = 7 };
/* a work request's wr_id: its connection's id (cq.c), what it is, which
 * slot or op of the connection's (0xffff: none), and on a signalled send
 * WR how many data WRs had been posted with it (post_send); its
 * completion finds the connection by the id in a CQ that other
 * connections share */
#define WR_ID(c, kind, i) ((uint64_t)(c)->id << 36 | (uint64_t)(kind) << 32 | ((i) & 0xffffu))
#define WR_CONN(wr_id) ((uint32_t)((wr_id) >> 36))
#define WR_KIND(wr_id) ((uint32_t)((wr_id) >> 32) & 0xf)
#define WR_IDX(wr_id) ((uint32_t)(wr_id) & 0xffffu)
#define WR_DQ(wr_id) ((uint16_t)((wr_id) >> 16))
#define WR_NONE 0xffffu

static void untouch(struct exs_conn *c);
static int place_persist(struct exs_conn *c);
static void issue_reads(struct exs_conn *c);
static int persist_start(struct exs_conn *c, const struct exs_op *t);
static int unpersist(struct exs_conn *c, bool recv);
static void zone_give(struct exs_conn *c, struct exs_op *op, size_t n);

static const char *const tx_names[] = {
	[EXS_TX_OPEN] = "open",		  [EXS_TX_REFUSED] = "refused",
	[EXS_TX_SHUTTING] = "shutting",	  [EXS_TX_FIN_SENT] = "fin-sent",
	[EXS_TX_ABORT_SENT] = "abort-sent", [EXS_TX_DONE] = "done",
};
static const char *const rx_names[] = {
	[EXS_RX_OPEN] = "open", [EXS_RX_SHUT] = "shut",
	[EXS_RX_SHUT_DONE] = "shut-done", [EXS_RX_EOF] = "eof",
};
static const char *const link_names[] = {
	[EXS_LINK_SETUP] = "setup", [EXS_LINK_UP] = "up", [EXS_LINK_PROBING] = "probing",
	[EXS_LINK_RESET] = "reset",
};
static const char *const unadv_names[] = {
	[EXS_UNADV_NONE] = "none", [EXS_UNADV_ASKED] = "asked", [EXS_UNADV_FILLED] = "filled",
};

static const char *const pst_names[] = {
	[EXS_PST_NONE] = "none", [EXS_PST_ACTIVE] = "active", [EXS_PST_ENDING] = "ending",
};
static const char *const pst_whose[] = {
	[EXS_PST_OWN_SEND] = "own persistent send", [EXS_PST_OWN_RECV] = "own persistent receive",
	[EXS_PST_PEER_SEND] = "peer's persistent send",
	[EXS_PST_PEER_RECV] = "peer's persistent receive",
};

static void set_pst(struct exs_conn *c, int which, enum exs_pst_state st)
{
	if (EXS_DEBUG_ON() && c->pst[which] != st)
		exs_debug("fd %d %s: %s -> %s", c->fd, pst_whose[which], pst_names[c->pst[which]],
			  pst_names[st]);
	c->pst[which] = st;
}

static void set_tx(struct exs_conn *c, enum exs_tx_state st)
{
	if (EXS_DEBUG_ON() && c->tx != st)
		exs_debug("fd %d send: %s -> %s", c->fd, tx_names[c->tx], tx_names[st]);
	c->tx = st;
}

static void set_rx(struct exs_conn *c, enum exs_rx_state st)
{
	if (EXS_DEBUG_ON() && c->rx != st)
		exs_debug("fd %d receive: %s -> %s", c->fd, rx_names[c->rx], rx_names[st]);
	c->rx = st;
}

static void set_unadv(struct exs_conn *c, enum exs_unadv_state st, uint32_t slot)
{
	if (EXS_DEBUG_ON() && c->unadv != st)
		exs_debug("fd %d unadvert (slot %u): %s -> %s", c->fd, slot, unadv_names[c->unadv],
			  unadv_names[st]);
	c->unadv = st;
	c->unadv_slot = slot;
}

static void set_link(struct exs_conn *c, enum exs_link_state st)
{
	if (c->link == st)
		return;
	if (EXS_DEBUG_ON())
		exs_debug("fd %d link: %s -> %s", c->fd, link_names[c->link], link_names[st]);
	if (c->link == EXS_LINK_PROBING)
		EXS_COUNT(exs_g.nprobing, -1);
	if (st == EXS_LINK_PROBING) {
		EXS_COUNT(exs_g.nprobing, 1);
		exs_progress_wake(); /* it ticks while anyone probes */
	}
	c->link = st;
}

int exs_conn_create(int fd, int type, const char *devname, bool iwarp,
		    const struct exs_conn_cfg *cfg, uint32_t owner, struct exs_conn **ret_conn)
{
	int err = ENODEV, ret;
	struct exs_dev *d = exs_dev_get(devname, &err);

	if (!d)
		return -err;
	ret = exs_conn_build(d, type, iwarp, cfg, ret_conn);
	if (!ret)
		exs_conn_adopt(*ret_conn, fd, owner, cfg);
	return ret;
}

/* A socket takes connection `c` (new, or a spare built before it was
 * needed): its completions are the socket's from now on. */
void exs_conn_adopt(struct exs_conn *c, int fd, uint32_t owner, const struct exs_conn_cfg *cfg)
{
	c->fd = fd;
	c->owner = owner;
	c->n_polls0 = c->scq->n_polls;
	c->n_arms0 = c->scq->n_arms;
	c->nodelay = cfg->nodelay;
	if (cfg->busy_poll) {
		c->busy_poll = true;
		EXS_COUNT(exs_g.nbusypoll, 1);
		exs_progress_wake();
	}
}

int exs_conn_build(struct exs_dev *dev, int type, bool iwarp, const struct exs_conn_cfg *cfg,
		   struct exs_conn **ret_conn)
{
	uint32_t credits = cfg->credits;
	struct exs_conn *c;
	struct ibv_qp_init_attr qa = { 0 };
	const char *what = "memory";
	int err = ENOMEM;
	uint32_t i;
	size_t n;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->fd = -1;
	c->seq = type == SOCK_SEQPACKET;
	c->dev = dev;
	c->iwarp = iwarp;
	/* §7.3: the wish, lowered silently to what the device takes */
	c->inline_max = cfg->inline_max < 0 || cfg->inline_max > c->dev->max_inline ?
				c->dev->max_inline : (uint32_t)cfg->inline_max;
	c->alloc = c->credits = credits;
	/* a placement's writes: one per max_msg_sz bytes, and one more
	 * wherever a gathered send's elements outnumber the write's SGEs */
	c->max_sge = c->dev->attr.max_sge < 1 ? 1 :
		     c->dev->attr.max_sge > EXS_IOV_MAX ? EXS_IOV_MAX : (uint32_t)c->dev->attr.max_sge;
	c->max_writes = c->dev->max_chunks + (EXS_IOV_MAX + c->max_sge - 1) / c->max_sge - 1;
	/* what the wire protocol keeps posted (exs_wire.h part 2), and the
	 * batch that repost() holds back */
	c->nrecv = 3 * credits + EXS_WIRE_SPARE + EXS_RECV_BATCH;
	c->nsend = 4 * credits + EXS_WIRE_SPARE; /* adverts, DONEs, MOREs, READ_DONEs */
	c->rsz = c->esz = sizeof(struct exs_wire_msg);
	/* §7.2 (SEQPACKET) and §7.6 (STREAM): room for C eager messages that
	 * come before their receives; a chunk of the stream buffer is what
	 * both sides offered, up to what one EAGER carries */
	if (c->seq && cfg->sp_max)
		c->sp_cap = cfg->sp_max > EXS_WIRE_EAGER_MAX ? EXS_WIRE_EAGER_MAX : cfg->sp_max;
	else if (!c->seq && cfg->stream_buf)
		c->sp_cap = cfg->stream_buf > EXS_WIRE_EAGER_MAX ? EXS_WIRE_EAGER_MAX : cfg->stream_buf;
	if (c->sp_cap) {
		c->nrecv += credits;
		c->esz = (uint32_t)sizeof(struct exs_wire_eager) + c->sp_cap;
		if (c->esz > c->rsz)
			c->rsz = c->esz;
		c->rsz = (c->rsz + 7) & ~7u;
		c->pool = malloc((size_t)credits * c->sp_cap);
		c->pool_len = calloc(credits, sizeof(uint32_t));
		if (!c->pool || !c->pool_len)
			goto fail;
	}
	n = (size_t)c->nrecv * c->rsz + c->nsend * sizeof(*c->msg) +
	    (c->sp_cap ? (size_t)credits * c->esz : 0);
	/* pages of its own: after ibv_fork_init a registered page is left out
	 * of a child, and must not hold the allocator's data (guide §11.3.2) */
	c->mem = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (c->mem == MAP_FAILED) {
		c->mem = NULL;
		goto fail;
	}
	c->mem_len = n;
	c->rbuf = c->mem;
	c->msg = (struct exs_wire_msg *)(c->rbuf + (size_t)c->nrecv * c->rsz);
	c->ebuf = (char *)(c->msg + c->nsend);
	c->rfifo = calloc(credits, sizeof(uint32_t));
	c->ctl_op = calloc(c->nsend, sizeof(int32_t));
	c->held = calloc(c->nsend, sizeof(uint32_t));
	c->rop = calloc(credits, sizeof(*c->rop));
	c->rfree = calloc(credits, sizeof(uint32_t));
	c->sop = calloc(credits, sizeof(*c->sop));
	c->sfree = calloc(credits, sizeof(uint32_t));
	c->sfifo = calloc(credits, sizeof(uint32_t));
	c->ads = calloc(credits, sizeof(*c->ads));
	if (!c->rfifo || !c->ctl_op || !c->held || !c->rop || !c->rfree || !c->sop ||
	    !c->sfree || !c->sfifo || !c->ads)
		goto fail;
	c->nctl_free = c->nsend;
	for (i = 0; i < credits; i++) {
		c->rfree[c->nrfree++] = credits - 1 - i;
		c->sfree[c->nsfree++] = credits - 1 - i;
	}
	what = "ibv_reg_mr";
	c->mem_mr = exs_verbs_reg_mr(c->dev, c->mem, n, IBV_ACCESS_LOCAL_WRITE);
	if (!c->mem_mr)
		goto fail_errno;
	qa.qp_type = IBV_QPT_RC;
	/* control messages, C eager SENDs, and the data WRs: room for C
	 * one-write sends and EXS_MAX_READS one-READ receives in flight,
	 * and for the largest placement; one that finds no room waits for
	 * a completion (dq_room). Sized for the worst case of every credit
	 * instead, an rxe QP's send queue took 1 MiB (1,024 WQEs of 1 KiB) */
	c->dq_max = credits + c->max_writes + EXS_MAX_READS;
	qa.cap.max_send_wr = c->nsend + c->dq_max + (c->sp_cap ? credits : 0) + 4;
	qa.cap.max_recv_wr = c->nrecv;
	/* room in a shared CQ for every WR a flush of both queues returns */
	what = "a shared CQ";
	c->cq_need = qa.cap.max_send_wr + qa.cap.max_recv_wr + 8;
	c->scq = exs_cq_reserve(c->dev, c->cq_need, &err);
	if (!c->scq)
		goto fail;
	qa.send_cq = qa.recv_cq = c->scq->cq;
	qa.cap.max_send_sge = c->max_sge;
	qa.cap.max_recv_sge = 1;
	qa.cap.max_inline_data = c->inline_max;
	what = "ibv_create_qp";
	c->qp = exs_verbs_create_qp(c->dev, &qa);
	if (!c->qp)
		goto fail_errno;
	/* last: from here on only exs_g.lock's holder destroys it, so the
	 * poller (which holds that lock) may follow the id to it */
	what = "a connection id";
	c->id = exs_cq_id_new(c, &err);
	if (!c->id)
		goto fail;
	*ret_conn = c;
	return 0;
fail_errno:
	err = errno ? errno : EIO;
fail:
	if (EXS_DEBUG_ON())
		exs_debug("%s: cannot build a connection (%u credits, %u send WRs): %s: %s",
			  dev->name, credits, qa.cap.max_send_wr, what, strerror(err));
	exs_conn_destroy(c);
	return -err;
}

/* ---- exs_sendmsg/exs_recvmsg elements (struct exs_seg) */

/* Let go of the elements' registrations for this call, and of their
 * explicit registrations' references if `refs` (taken by op_start). */
static void segs_release(struct exs_op *op, bool refs)
{
	uint32_t i;

	for (i = 0; i < op->nseg; i++) {
		struct exs_seg *g = &op->seg[i];

		if (g->tmp_mr)
			ibv_dereg_mr(g->tmp_mr);
		g->tmp_mr = NULL;
		if (refs && g->mreg && g->mreg->refs)
			g->mreg->refs--;
	}
}

int exs_conn_segs_new(struct exs_op *op, const struct exs_seg *seg, uint32_t n)
{
	op->seg = malloc(n * sizeof(*seg));
	if (!op->seg)
		return -ENOMEM;
	memcpy(op->seg, seg, n * sizeof(*seg));
	op->nseg = n;
	if (op->kind == EXS_EVT_RECV) {
		op->buf = mmap(NULL, op->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);
		if (op->buf == MAP_FAILED) {
			op->buf = NULL;
			free(op->seg);
			op->seg = NULL;
			op->nseg = 0;
			return -ENOMEM;
		}
	}
	return 0;
}

/* An ended (or refused) op's elements and bounce buffer go. */
void exs_conn_segs_free(struct exs_op *op)
{
	if (!op->nseg)
		return;
	segs_release(op, false);
	free(op->seg);
	if (op->kind == EXS_EVT_RECV)
		munmap(op->buf, op->len);
	op->seg = NULL;
	op->nseg = 0;
}

/* Copy n bytes between the op's elements, from byte `off` of them on, and
 * `p`: out of them (a send's gather) or into them (a receive's scatter). */
static void segs_copy(const struct exs_op *op, size_t off, char *p, size_t n, bool into)
{
	uint32_t i;

	for (i = 0; i < op->nseg && off >= op->seg[i].len; i++)
		off -= op->seg[i].len;
	for (; i < op->nseg && n; i++, off = 0) {
		size_t k = op->seg[i].len - off < n ? op->seg[i].len - off : n;

		if (into)
			memcpy(op->seg[i].addr + off, p, k);
		else
			memcpy(p, op->seg[i].addr + off, k);
		p += k;
		n -= k;
	}
}

/* Copy n bytes of a send from its byte `off` on to `dst`. */
static void op_gather(const struct exs_op *op, size_t off, char *dst, size_t n)
{
	if (op->nseg)
		segs_copy(op, off, dst, n, false);
	else
		memcpy(dst, op->buf + off, n);
}

/* The SGEs of at most `len` bytes of a send from its byte `off` on, at
 * most `max` of them: how many, and in *ret_len the bytes they hold. */
static int op_sges(const struct exs_op *op, size_t off, uint32_t len, struct ibv_sge *sge,
		   uint32_t max, uint32_t *ret_len)
{
	uint32_t i, n = 0, got = 0;

	if (!op->nseg) {
		sge[0] = (struct ibv_sge){ .addr = (uintptr_t)op->lbuf + off, .length = len,
					   .lkey = op->lkey };
		*ret_len = len;
		return 1;
	}
	for (i = 0; i < op->nseg && off >= op->seg[i].len; i++)
		off -= op->seg[i].len;
	for (; i < op->nseg && got < len && n < max; i++, off = 0) {
		size_t k = op->seg[i].len - off;

		if (k > len - got)
			k = len - got;
		sge[n++] = (struct ibv_sge){ .addr = (uintptr_t)op->seg[i].addr + off,
					     .length = (uint32_t)k, .lkey = op->seg[i].lkey };
		got += (uint32_t)k;
	}
	*ret_len = got;
	return (int)n;
}

/* send-side coalescing (the open chunk, below) */
static int uncork(struct exs_conn *c);
static void cork_drop(struct exs_conn *c);
static void touch(struct exs_conn *c);

void exs_conn_destroy(struct exs_conn *c)
{
	uint32_t i;

	if (!c)
		return;
	if (EXS_DEBUG_ON())
		exs_debug("fd %d: %" PRIu64 " sends, %" PRIu64 " receives; %" PRIu64 " send WRs (%" PRIu64
			  " signalled), %" PRIu64 " receive WRs, %" PRIu64 " completions, %" PRIu64
			  " CQ polls, %" PRIu64 " CQ arms, %" PRIu64 " waits for send queue room, %" PRIu64
			  " sends coalesced, %" PRIu64 " copied through a zone",
			  c->fd, c->sends, c->recvs, c->n_send_wr, c->n_signalled, c->n_recv_wr,
			  c->n_cqe, c->scq ? c->scq->n_polls - c->n_polls0 : 0,
			  c->scq ? c->scq->n_arms - c->n_arms0 : 0, c->n_dq_waits, c->n_corked, c->n_zoned);
	exs_cq_id_free(c->id); /* its completions still in the CQ name nobody */
	untouch(c);
	cork_drop(c);
	if (c->link == EXS_LINK_PROBING)
		EXS_COUNT(exs_g.nprobing, -1);
	if (c->busy_poll)
		EXS_COUNT(exs_g.nbusypoll, -1);
	for (i = 0; i < c->alloc && c->rop && c->sop; i++) {
		if (c->rop[i].tmp_mr)
			ibv_dereg_mr(c->rop[i].tmp_mr);
		if (c->sop[i].tmp_mr)
			ibv_dereg_mr(c->sop[i].tmp_mr);
		exs_conn_segs_free(&c->rop[i]);
		exs_conn_segs_free(&c->sop[i]);
	}
	if (c->qp)
		exs_verbs_destroy_qp(c->qp, c->iwarp);
	for (i = 0; i < c->alloc && c->rop && c->sop; i++) {
		/* a persistent block's MR goes after the QP that the peer used */
		if (c->rop[i].pmr)
			ibv_dereg_mr(c->rop[i].pmr);
		if (c->sop[i].pmr)
			ibv_dereg_mr(c->sop[i].pmr);
	}
	if (c->scq)
		/* a built connection (it has its id) goes only under exs_g.lock */
		exs_cq_release(c->scq, c->cq_need, c->qp != NULL, c->id != 0);
	exs_zone_free(&c->zone[0]);
	exs_zone_free(&c->zone[1]);
	if (c->mem_mr)
		ibv_dereg_mr(c->mem_mr);
	if (c->mem)
		munmap(c->mem, c->mem_len);
	free(c->stash);
	free(c->pool);
	free(c->pool_len);
	free(c->rfifo);
	free(c->ctl_op);
	free(c->held);
	free(c->rop);
	free(c->rfree);
	free(c->sop);
	free(c->sfree);
	free(c->sfifo);
	free(c->ads);
	free(c);
}

/* The receive WR of buffer i (its SGE: *sge), alone in its list. */
static void recv_wr(struct exs_conn *c, uint32_t i, struct ibv_sge *sge, struct ibv_recv_wr *wr)
{
	*sge = (struct ibv_sge){ .addr = (uintptr_t)(c->rbuf + (size_t)i * c->rsz),
				 .length = c->rsz,
				 .lkey = c->mem_mr->lkey };
	*wr = (struct ibv_recv_wr){ .wr_id = WR_ID(c, WR_RECV, i), .sg_list = sge, .num_sge = 1 };
}

static int post_recv(struct exs_conn *c, uint32_t i)
{
	struct ibv_sge sge;
	struct ibv_recv_wr wr;

	recv_wr(c, i, &sge, &wr);
	c->n_recv_wr++;
	return exs_verbs_post_recv(c->qp, &wr);
}

/* Receive buffer i is free again. It goes back to the device with the
 * next EXS_RECV_BATCH - 1 others, in one post: the EXS_RECV_BATCH extra
 * buffers keep what the wire protocol counts on posted meanwhile. */
static int repost(struct exs_conn *c, uint32_t i)
{
	struct ibv_sge sge[EXS_RECV_BATCH];
	struct ibv_recv_wr wr[EXS_RECV_BATCH];
	uint32_t k;

	c->repost[c->nrepost++] = i;
	if (c->nrepost < EXS_RECV_BATCH)
		return 0;
	for (k = 0; k < EXS_RECV_BATCH; k++) {
		recv_wr(c, c->repost[k], &sge[k], &wr[k]);
		if (k)
			wr[k - 1].next = &wr[k];
	}
	c->nrepost = 0;
	c->n_recv_wr += EXS_RECV_BATCH;
	return exs_verbs_post_recv(c->qp, wr);
}

int exs_conn_modify(struct exs_conn *c, const ExsCtl__QpAttr *a)
{
	struct ibv_qp_attr attr;
	int mask, ret;
	uint32_t i;

	ret = exs_qpattr_to_ibv(a, &attr, &mask);
	if (ret)
		return ret;
	if (attr.qp_state == IBV_QPS_INIT) {
		/* rdmacm grants no remote access on the active side; EXS places
		 * data in both directions, so both ends need remote write, and
		 * remote read for the peer's reads of a persistent send (an MR
		 * with remote read exists only over such a block) */
		attr.qp_access_flags |= IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					IBV_ACCESS_REMOTE_READ;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	ret = exs_verbs_modify_qp(c->qp, &attr, mask, c->iwarp);
	if (ret)
		return ret;
	if (attr.qp_state == IBV_QPS_INIT)
		for (i = 0; i < c->nrecv; i++)
			if ((ret = post_recv(c, i)))
				return ret;
	return 0;
}

/* Every send WR goes through here: on iWARP the post may transmit from the
 * calling thread (verbs.c keeps a dead peer's SIGPIPE from this process).
 * An open chunk goes first: what follows it in the stream, or a FIN, RTS
 * or credit that must not pass it. */
static int post_send(struct exs_conn *c, struct ibv_send_wr *wr)
{
	bool data = wr->opcode == IBV_WR_RDMA_WRITE || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ||
		    wr->opcode == IBV_WR_RDMA_READ;
	int ret;

	if (c->ck_len && (ret = uncork(c)))
		return ret;

	/* the data WRs' room in the send queue (dq_room): a completion says
	 * how many of them had been posted with its WR, and all those are
	 * done (a send queue completes in order); one in every quarter of
	 * the room asks for a completion, so unsignalled ones never fill it */
	if (data && !(wr->send_flags & IBV_SEND_SIGNALED) &&
	    (uint16_t)(c->dq_posted + 1 - c->dq_signalled) >= c->dq_max / 4) {
		wr->send_flags |= IBV_SEND_SIGNALED;
		wr->wr_id = WR_ID(c, WR_MARK, WR_NONE);
	}
	if (wr->send_flags & IBV_SEND_SIGNALED)
		wr->wr_id = (wr->wr_id & ~(0xffffull << 16)) |
			    (uint64_t)(uint16_t)(c->dq_posted + data) << 16;
	ret = exs_verbs_post_send(c->qp, wr, c->iwarp);
	if (!ret) {
		c->dq_posted += data;
		if (wr->send_flags & IBV_SEND_SIGNALED)
			c->dq_signalled = c->dq_posted;
		c->n_send_wr++;
		c->n_signalled += !!(wr->send_flags & IBV_SEND_SIGNALED);
	}
	if (ret && EXS_DEBUG_ON())
		exs_debug("fd %d: ibv_post_send (opcode %d, %u bytes, flags %#x): %s", c->fd,
			  wr->opcode, wr->sg_list ? wr->sg_list->length : 0, wr->send_flags,
			  strerror(-ret));
	return ret;
}

/* The eager credits owed to the peer, which every message carries. */
static uint16_t take_owed(struct exs_conn *c)
{
	uint16_t n = c->owed > UINT16_MAX ? UINT16_MAX : (uint16_t)c->owed;

	c->owed -= n;
	return n;
}

/* SEND the control message in send slot i. Only a DONE or another
 * message whose completion ends a send, a FIN or ABORT (the close waits
 * for it), one in every quarter of the slots, and every one while fewer
 * than a quarter are free (to free those before it) ask for a completion:
 * each completion costs a wake-up of whoever sleeps on the CQ. */
static int post_slot(struct exs_conn *c, uint32_t i)
{
	struct exs_wire_msg *m = &c->msg[i];
	struct ibv_sge sge;
	struct ibv_send_wr wr;
	bool sig = m->type == EXS_WIRE_DONE || c->ctl_op[i] >= 0 || m->type == EXS_WIRE_FIN ||
		   m->type == EXS_WIRE_ABORT || c->ctl_unsig + 1 >= c->nsend / 4 ||
		   c->nctl_free < c->nsend / 4;
	int ret;

	m->credits = take_owed(c);
	sge = (struct ibv_sge){ .addr = (uintptr_t)m, .length = sizeof(*m), .lkey = c->mem_mr->lkey };
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = WR_ID(c, WR_CTL, i);
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = sig ? IBV_SEND_SIGNALED : 0;
	if (sizeof(*m) <= c->inline_max)
		wr.send_flags |= IBV_SEND_INLINE;
	if ((ret = post_send(c, &wr)))
		return ret;
	c->ctl_unsig = sig ? 0 : c->ctl_unsig + 1;
	return 0;
}

/* Control send slot i completed: it and every slot before it are free.
 * false if i is not in use (a stale or foreign completion). */
static bool ctl_done(struct exs_conn *c, uint32_t i)
{
	uint32_t used = c->nsend - c->nctl_free, k;

	if (i >= c->nsend || (k = (i + c->nsend - c->ctl_head) % c->nsend) >= used)
		return false;
	c->ctl_head = (i + 1) % c->nsend;
	c->nctl_free += k + 1;
	return true;
}

/* SEND one control message built from `t`; `op` is the send operation its
 * completion finishes, or -1. Before the peer's HELLO (passive iWARP) it
 * waits in its slot and goes out, in order, when HELLO arrives. */
static int post_ctl(struct exs_conn *c, struct exs_wire_msg t, int32_t op)
{
	struct exs_wire_msg *m;
	uint32_t i;
	int ret;

	if (!c->nctl_free)
		return -ENOBUFS;
	i = (c->ctl_head + c->nsend - c->nctl_free--) % c->nsend;
	m = &c->msg[i];
	*m = t;
	m->version = EXS_WIRE_VERSION;
	c->ctl_op[i] = op;
	if (c->await_hello) {
		c->held[c->nheld++] = i;
		return 0;
	}
	ret = post_slot(c, i);
	if (ret)
		c->nctl_free++; /* the newest slot: given back */
	return ret;
}

static int post_ctl_type(struct exs_conn *c, uint8_t type)
{
	return post_ctl(c, (struct exs_wire_msg){ .type = type }, -1);
}

/* Passive iWARP: MPA lets the initiator send first, so nothing goes out
 * before the peer's HELLO. */
void exs_conn_await_hello(struct exs_conn *c)
{
	c->await_hello = true;
}

/* Passive iWARP: the peer's HELLO came; what waited for it goes now. */
static int on_hello(struct exs_conn *c)
{
	uint32_t i;
	int ret;

	c->await_hello = false;
	for (i = 0; i < c->nheld; i++)
		if ((ret = post_slot(c, c->held[i])))
			return ret;
	c->nheld = 0;
	return 0;
}

/* exsd says the CM exchange is over, with the negotiated credits (which
 * never exceed what this side allocated) and small-packet size. The active
 * iWARP side sends its HELLO now: the passive side waits for it before it
 * sends anything (and may have had it already: the peer can be quicker
 * than exsd's word, so "active" is the caller's to say, not await_hello's). */
int exs_conn_establish(struct exs_conn *c, uint32_t credits, uint32_t sp_max, uint32_t stream_buf,
		       bool active)
{
	if (credits == 0 || credits > c->alloc || sp_max > EXS_MAX_SP_MAX)
		return -EPROTO;
	c->credits = credits;
	/* §7.2: small messages when both offered them (the peer's offer may
	 * be below ours, never above: exsd takes the minimum) */
	if (c->seq && c->sp_cap && sp_max) {
		c->sp_max = sp_max < c->sp_cap ? sp_max : c->sp_cap;
		c->ecredits = credits;
	}
	/* §7.6: the stream buffer, likewise (the same rule on both sides
	 * gives the same chunk, which fits both sides' receive buffers) */
	if (!c->seq && c->sp_cap && stream_buf) {
		c->sb_chunk = stream_buf < c->sp_cap ? stream_buf : c->sp_cap;
		c->ecredits = credits;
	}
	if (c->link == EXS_LINK_SETUP)
		set_link(c, EXS_LINK_UP);
	if (c->iwarp && active)
		return post_ctl_type(c, EXS_WIRE_HELLO);
	return 0;
}

/* The event that reports `op`. */
static void op_event(const struct exs_conn *c, const struct exs_op *op, int err, size_t len,
		     size_t lost, exs_event_t *ev)
{
	memset(ev, 0, sizeof(*ev));
	ev->exs_evt_errno = err;
	ev->exs_evt_socket = c->fd;
	ev->exs_evt_ahandle = op->ah;
	ev->exs_evt_type = op->kind;
	ev->exs_evt_union.exs_evt_xfer.exs_evt_buffer = op->msg ? (void *)op->msg : op->buf;
	ev->exs_evt_union.exs_evt_xfer.exs_evt_mhandle = op->user_mh;
	ev->exs_evt_union.exs_evt_xfer.exs_evt_length = len;
	ev->exs_evt_union.exs_evt_xfer.exs_evt_amount_lost = lost;
}

/* An ended operation lets go of its queue: with its event, unless it
 * succeeded unsignalled. */
static void op_report(const struct exs_op *op, int err, const exs_event_t *ev)
{
	if (!op->q)
		return;
	if ((op->flags & EXS_UNSIGNALED) && !err)
		exs_queue_unref(op->q);
	else
		exs_queue_post(op->q, ev);
}

static void op_complete(struct exs_conn *c, struct exs_op *op, int err, size_t len, size_t lost)
{
	exs_event_t ev;
	bool is_send = op->kind == EXS_EVT_SEND;

	op_event(c, op, err, len, lost, &ev);
	zone_give(c, op, err ? 0 : len);
	if (op->tmp_mr)
		ibv_dereg_mr(op->tmp_mr);
	if (op->pmr)
		ibv_dereg_mr(op->pmr);
	if (op->mreg && op->mreg->refs)
		op->mreg->refs--;
	if (op->nseg && !is_send && !err)
		segs_copy(op, 0, op->buf, len, true); /* out of the bounce buffer */
	segs_release(op, true);
	exs_conn_segs_free(op);
	op_report(op, err, &ev);
	if (err) {
		c->errors++;
	} else if (is_send) {
		c->bytes_sent += len;
		c->sends++;
	} else {
		c->bytes_rcvd += len;
		c->recvs++;
	}
	memset(op, 0, sizeof(*op));
	if (is_send)
		c->sfree[c->nsfree++] = (uint32_t)(op - c->sop);
	else if (c->unadv == EXS_UNADV_ASKED && (uint32_t)(op - c->rop) == c->unadv_slot)
		set_unadv(c, EXS_UNADV_FILLED, c->unadv_slot); /* the peer's ACK frees the slot */
	else
		c->rfree[c->nrfree++] = (uint32_t)(op - c->rop);
	exs_g_wake();
}

/* The peer writes nothing more (FIN, RDSHUT_ACK, reset): a slot kept for
 * an UNADVERT_ACK is free now, and that ACK, if it comes, is ignored. */
static void unadv_release(struct exs_conn *c)
{
	if (c->unadv == EXS_UNADV_FILLED)
		c->rfree[c->nrfree++] = c->unadv_slot;
	if (c->unadv != EXS_UNADV_NONE)
		set_unadv(c, EXS_UNADV_NONE, c->unadv_slot);
}

void exs_conn_fail_all(struct exs_conn *c, int err)
{
	uint32_t i;

	c->sf_count = 0;
	c->ad_count = 0;
	c->rf_count = 0;
	/* small messages that came before the peer's FIN are its data: they
	 * wait in the pool for the receives that come after the break, and
	 * the EOF follows them. A reset before the FIN loses them, as TCP's
	 * does (ECONNRESET). */
	if (c->rx != EXS_RX_EOF)
		c->pool_count = 0;
	for (i = 0; i < EXS_PST_N; i++)
		set_pst(c, (int)i, EXS_PST_NONE);
	c->reads_out = c->rd_left = c->rd_unacked = c->rd_owed = 0;
	for (i = 0; i < c->alloc; i++) {
		if (c->sop[i].kind)
			op_complete(c, &c->sop[i], err, 0, 0);
		if (c->rop[i].kind)
			op_complete(c, &c->rop[i], err, 0, 0);
	}
	unadv_release(c);
}

/* The connection is broken (or the peer misbehaved): flush what is posted
 * and fail every operation with `err`. */
void exs_conn_break(struct exs_conn *c, int err)
{
	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_ERR };

	if (c->link == EXS_LINK_RESET)
		return;
	if (EXS_DEBUG_ON())
		exs_debug("fd %d broken: %s", c->fd, strerror(err));
	set_link(c, EXS_LINK_RESET);
	cork_drop(c);
	exs_verbs_modify_qp(c->qp, &qa, IBV_QP_STATE, c->iwarp);
	exs_conn_fail_all(c, err);
}

/* The peer broke the wire protocol (proto/exs_wire.h): say how, end it. */
static void proto_error(struct exs_conn *c, const char *why, unsigned a, unsigned b)
{
	if (EXS_DEBUG_ON())
		exs_debug("fd %d: protocol error: %s (%u, %u)", c->fd, why, a, b);
	exs_conn_break(c, EPROTO);
}

static bool sends_idle(const struct exs_conn *c)
{
	return c->nsfree == c->alloc;
}

/* SHUT_WR or close: the FIN goes once every started send is placed. */
static void maybe_fin(struct exs_conn *c)
{
	if (c->tx != EXS_TX_SHUTTING || c->link == EXS_LINK_RESET || !sends_idle(c))
		return;
	if (post_ctl_type(c, EXS_WIRE_FIN))
		exs_conn_break(c, ECONNRESET);
	else
		set_tx(c, EXS_TX_FIN_SENT);
}

/* Give the peer back its eager credits when no other message will carry
 * them soon: once half of them are owed. */
static void maybe_credit(struct exs_conn *c)
{
	uint32_t half = c->credits / 2 ? c->credits / 2 : 1;

	if (c->owed < half || c->link == EXS_LINK_RESET)
		return;
	if (post_ctl_type(c, EXS_WIRE_CREDIT))
		exs_conn_break(c, ECONNRESET);
}

/* A gathered send's elements, made usable by the device as op_mem does
 * for one buffer; on failure none is left registered. */
static int segs_mem(struct exs_conn *c, struct exs_op *op)
{
	uint32_t i;

	for (i = 0; i < op->nseg; i++) {
		struct exs_seg *g = &op->seg[i];
		struct ibv_mr *mr;

		g->lkey = 0;
		if (!g->mreg && op->len <= c->inline_max)
			continue; /* every write of it goes inline */
		if (g->mreg)
			mr = exs_mreg_mr(g->mreg, c->dev);
		else
			mr = g->tmp_mr = exs_verbs_reg_mr(c->dev, g->addr, g->len, 0);
		if (!mr) {
			int err = errno ? errno : ENOMEM;

			segs_release(op, false);
			return -err;
		}
		g->lkey = mr->lkey;
	}
	op->has_mem = true;
	return 0;
}

/* A registration of op's buffer (lbuf) alone, for this operation: let go
 * when it completes (op_complete) or never starts (op_unstart). */
static int reg_alone(struct exs_conn *c, struct exs_op *op, int access)
{
	op->tmp_mr = exs_verbs_reg_mr(c->dev, op->lbuf, op->len, access);
	if (!op->tmp_mr)
		return -(errno ? errno : ENOMEM);
	op->rkey = op->tmp_mr->rkey;
	return 0;
}

/* An unregistered operation of up to EXS_ZONE_MAX bytes goes through a
 * run of its connection's copy zone (zone.c) if there is room: a send is
 * copied in now, a receive keeps what it already holds (a STREAM receive
 * may have taken buffered bytes) and is copied out when it completes. Not
 * an exs_sendmsg/exs_recvmsg's elements, nor a persistent block. */
static bool zone_take(struct exs_conn *c, struct exs_op *op, bool send)
{
	struct exs_zone *z = &c->zone[!send];
	int page;

	if (op->nseg || (op->flags & EXS_PERSISTENT))
		return false;
	page = exs_zone_take(z, c->dev, op->len,
			     send ? 0 : IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (page < 0)
		return false;
	op->zpage = page + 1;
	op->lbuf = exs_zone_addr(z, page);
	op->lkey = z->mr->lkey;
	op->rkey = z->mr->rkey;
	memcpy(op->lbuf, op->buf, send ? op->len : op->done);
	c->n_zoned++;
	return true;
}

/* A zoned operation's run goes back, after a receive's data went from it
 * to the caller's buffer (n bytes; 0 when it failed). */
static void zone_give(struct exs_conn *c, struct exs_op *op, size_t n)
{
	bool send = op->kind == EXS_EVT_SEND;

	if (!op->zpage)
		return;
	if (!send && n)
		memcpy(op->buf, op->lbuf, n);
	exs_zone_give(&c->zone[!send], op->zpage - 1, op->len);
	op->zpage = 0;
	op->lbuf = op->buf;
}

/* Make an operation's buffer usable by the device: its registration, or
 * for an unregistered one, inline (a send the device copies when it is
 * posted, §7.3), a run of a copy zone, or a registration for this call
 * alone. */
static int op_mem(struct exs_conn *c, struct exs_op *op)
{
	bool send = op->kind == EXS_EVT_SEND;

	if (op->has_mem)
		return 0;
	if (op->nseg && send)
		return segs_mem(c, op); /* a receive's elements wait for the bounce */
	if (op->mreg) {
		struct ibv_mr *mr = exs_mreg_mr(op->mreg, c->dev);

		if (!mr)
			return -(errno ? errno : ENOMEM);
		op->lkey = mr->lkey;
		op->rkey = mr->rkey;
	} else if (send && op->len <= c->inline_max) {
		op->lkey = 0;
	} else if (!zone_take(c, op, send)) {
		int ret = reg_alone(c, op, send ? 0 : IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);

		if (ret)
			return ret;
		op->lkey = op->tmp_mr->lkey;
	}
	op->has_mem = true;
	return 0;
}

/* The reference an operation holds on its queue until it reports (the
 * caller's, or one of its own), and the busy-poll mark. */
static void op_queue_ref(const struct exs_conn *c, const struct exs_op *op)
{
	if (op->q && !op->q_held)
		exs_queue_ref(op->q);
	if (op->q && c->busy_poll)
		exs_queue_mark_busy(op->q);
}

/* A small message (§7.2) needs no memory of the device's: the library
 * copies it, into its eager buffers (send) or out of its receive buffers
 * (receive), unless the receive is advertised after all (RTS). */
static bool small(const struct exs_conn *c, const struct exs_op *op)
{
	return c->sp_max && op->len <= c->sp_max;
}

/* Take the references an operation holds until it completes, and its
 * memory unless it is a small message. */
static int op_start(struct exs_conn *c, struct exs_op *op)
{
	int ret;

	op->lbuf = op->buf;
	if (op->mreg || !small(c, op)) {
		if ((ret = op_mem(c, op)))
			return ret;
	}
	if (op->mreg)
		op->mreg->refs++;
	for (uint32_t i = 0; i < op->nseg; i++)
		if (op->seg[i].mreg)
			op->seg[i].mreg->refs++;
	op_queue_ref(c, op);
	return 0;
}

/* Undo op_start for an operation that never started. */
static void op_unstart(struct exs_conn *c, struct exs_op *op)
{
	zone_give(c, op, 0);
	if (op->q && !op->q_held) /* a held one is still the caller's */
		exs_queue_unref(op->q);
	if (op->tmp_mr)
		ibv_dereg_mr(op->tmp_mr);
	if (op->mreg && op->mreg->refs)
		op->mreg->refs--;
	segs_release(op, true); /* the elements themselves stay the caller's */
	memset(op, 0, sizeof(*op));
}

#ifdef EXS_TEST_HOSTILE
/*
 * Only in tests/apps' exs_guard_hostile, never in libexs: a peer that
 * writes where it was not invited, to show the device refuses it
 * (tests/integration/harden.sh). EXS_TEST_HOSTILE=past writes just past
 * each advert; =stale writes into the previous advert, whose receive has
 * completed. Up to 64 bytes of the send's first element.
 */
static void hostile_write(struct exs_conn *c, const struct exs_wire_msg *ad,
			  const struct ibv_sge *first)
{
	static struct exs_wire_msg prev;
	const char *mode = getenv("EXS_TEST_HOSTILE");
	struct ibv_sge sge = *first;
	struct ibv_send_wr wr;

	memset(&wr, 0, sizeof(wr));
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	sge.length = sge.length < 64 ? sge.length : 64;
	if (mode && !strcmp(mode, "past")) {
		wr.wr.rdma.remote_addr = ad->addr + ad->len;
		wr.wr.rdma.rkey = ad->rkey;
	} else if (mode && !strcmp(mode, "stale") && prev.len) {
		wr.wr.rdma.remote_addr = prev.addr;
		wr.wr.rdma.rkey = prev.rkey;
	} else {
		wr.num_sge = 0;
	}
	if (wr.num_sge && sge.length)
		post_send(c, &wr);
	prev = *ad;
}
#endif

/* The data WRs that n bytes of op take at most: one per max_msg_sz
 * bytes, and a write one more wherever its elements fill a WR's SGEs. */
static uint32_t data_wrs(const struct exs_conn *c, const struct exs_op *op, size_t n, bool read)
{
	size_t k = (n + c->dev->max_msg_sz - 1) / c->dev->max_msg_sz;

	if (!read && op->nseg > c->max_sge)
		k += op->nseg / c->max_sge;
	return k ? (uint32_t)k : 1;
}

/* Room for k more data WRs in the send queue; if not, the caller waits
 * for a completion to make it (on_wc). An empty queue takes any. */
static bool dq_room(struct exs_conn *c, uint32_t k)
{
	uint32_t out = (uint16_t)(c->dq_posted - c->dq_done);

	if (!out || out + k <= c->dq_max)
		return true;
	c->dq_wait = true;
	c->n_dq_waits++;
	return false;
}

/* Place the first pending send (or the next piece of it) in the first
 * advert: RDMA WRITE_WITH_IMM, or WRITE + DONE. 0; 1 to wait for room
 * in the send queue; or -errno from the post (the connection is then
 * broken). */
static int place(struct exs_conn *c)
{
	uint32_t oi = c->sfifo[c->sf_head];
	struct exs_op *op = &c->sop[oi];
	struct exs_wire_msg *ad = &c->ads[c->ad_head];
	size_t left = op->len - op->done;
	uint32_t n = left < ad->len ? (uint32_t)left : ad->len;
	bool last = c->seq || op->done + n == op->len;
	struct ibv_sge sge[EXS_IOV_MAX];
	uint32_t off = 0, chunk;
	bool imm;
	int ret = 0, nsge;

	if (!dq_room(c, data_wrs(c, op, n, false)))
		return 1;
	if ((ret = op_mem(c, op)))
		return ret;
	/* a write gathers up to max_sge elements and max_msg_sz bytes. The
	 * receiver learns the length from the IMM write's byte_len, so a
	 * piece that takes several writes goes in DONE mode */
	nsge = op_sges(op, op->done, n < c->dev->max_msg_sz ? n : c->dev->max_msg_sz, sge,
		       c->max_sge, &chunk);
	imm = !c->iwarp && (!c->seq || n == op->len) && chunk == n;
#ifdef EXS_TEST_HOSTILE
	hostile_write(c, ad, &sge[0]);
#endif
	for (;;) {
		struct ibv_send_wr wr;

		memset(&wr, 0, sizeof(wr));
		wr.wr_id = WR_ID(c, WR_WRITE, oi);
		wr.sg_list = sge;
		wr.num_sge = nsge;
		wr.wr.rdma.remote_addr = ad->addr + off;
		wr.wr.rdma.rkey = ad->rkey;
		if (imm && off + chunk == n) {
			wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
			wr.imm_data = htonl(ad->slot);
			wr.send_flags = last ? IBV_SEND_SIGNALED : 0;
		} else {
			wr.opcode = IBV_WR_RDMA_WRITE;
		}
		if (chunk <= c->inline_max)
			wr.send_flags |= IBV_SEND_INLINE;
		ret = post_send(c, &wr);
		off += chunk;
		if (ret || off == n)
			break;
		nsge = op_sges(op, op->done + off,
			       n - off < c->dev->max_msg_sz ? n - off : c->dev->max_msg_sz, sge,
			       c->max_sge, &chunk);
	}
	if (!ret && !imm)
		ret = post_ctl(c, (struct exs_wire_msg){ .type = EXS_WIRE_DONE,
			.slot = ad->slot, .len = n, .lost = c->seq ? (uint32_t)(op->len - n) : 0 },
			last ? (int32_t)oi : -1);
	op->done += n;
	if (!c->seq && (ad->flags & EXS_WIRE_ADV_WAITALL) && n < ad->len) {
		/* MSG_WAITALL: the advert stays first in line for what the
		 * next send brings, so the stream keeps its order; the
		 * peer's MORE releases it (one piece in flight per advert
		 * keeps its receive queue within 2C + spare) */
		ad->addr += n;
		ad->len -= n;
		ad->flags |= ADV_HELD;
	} else {
		c->ad_head = (c->ad_head + 1) % c->alloc;
		c->ad_count--;
	}
	if (last) {
		c->sf_head = (c->sf_head + 1) % c->alloc;
		c->sf_count--;
		c->tx_msn++;
	}
	return ret;
}

/* An EAGER SEND's wr_id and signalling. It asks for a completion when its
 * send ends with it (op `oi`), and otherwise one in every quarter of the
 * eager slots does, so the unsignalled ones never fill them (eager_room):
 * a completion per message cost the device a CQE and the poller its
 * processing, and bought nothing, as the peer's credit frees the buffer. */
static void eager_sig(struct exs_conn *c, struct ibv_send_wr *wr, uint32_t oi)
{
	uint16_t n = (uint16_t)(c->e_posted + 1);
	uint32_t quarter = c->alloc / 4 ? c->alloc / 4 : 1;

	if (oi != WR_NONE) {
		c->sop[oi].e_mark = n;
		wr->wr_id = WR_ID(c, WR_EAGER, oi);
	} else if ((uint16_t)(n - c->e_signalled) >= quarter) {
		wr->wr_id = WR_ID(c, WR_EMARK, n);
	} else {
		wr->wr_id = WR_ID(c, WR_EAGER, WR_NONE);
		return;
	}
	wr->send_flags |= IBV_SEND_SIGNALED;
}

/* An EAGER SEND went: count it (eager_sig). */
static void eager_posted(struct exs_conn *c, const struct ibv_send_wr *wr)
{
	c->e_posted++;
	if (wr->send_flags & IBV_SEND_SIGNALED)
		c->e_signalled = c->e_posted;
}

/* SEND an EAGER message gathered from sge[0..n), inline if `in`, for
 * send `oi` (eager_sig); it takes an eager credit. Its header carries
 * `credits`, taken from c->owed and given back if the post fails. */
static int post_eager(struct exs_conn *c, struct ibv_sge *sge, int n, bool in, uint32_t oi,
		      uint16_t credits)
{
	struct ibv_send_wr wr = { .sg_list = sge, .num_sge = n, .opcode = IBV_WR_SEND,
				  .send_flags = in ? IBV_SEND_INLINE : 0 };
	int ret;

	eager_sig(c, &wr, oi);
	if ((ret = post_send(c, &wr))) {
		c->owed += credits;
		return ret;
	}
	eager_posted(c, &wr);
	c->ecredits--;
	return 0;
}

/* The eager send buffers are a ring of alloc, used in turn by the EAGER
 * SENDs that carry a copy (send_eager, post_chunk; send_now's inline SEND
 * takes none). Buffer e_next is free: its last SEND came at least alloc
 * EAGER SENDs ago, and eager_room keeps fewer than alloc outstanding (a
 * send queue completes in order). */
static char *ebuf_next(const struct exs_conn *c)
{
	return c->ebuf + (size_t)c->e_next * c->esz;
}

static void ebuf_advance(struct exs_conn *c)
{
	c->e_next = (c->e_next + 1) % c->alloc; /* wraps at alloc, whatever alloc is */
}

/* SEND the first pending send as an EAGER message (§7.2), copied into the
 * next eager buffer of the ring: its data are the library's once copied,
 * so the send completes now, inline or not. (In a buffer of the send's
 * own slot, kept until its SEND completed, a non-inline one waited for
 * the peer's acknowledgement and cost a completion each.) */
static int send_eager(struct exs_conn *c)
{
	uint32_t oi = c->sfifo[c->sf_head];
	struct exs_op *op = &c->sop[oi];
	char *b = ebuf_next(c);
	struct exs_wire_eager h = { .version = EXS_WIRE_VERSION, .type = EXS_WIRE_EAGER,
				    .seq = c->tx_msn };
	uint32_t len = (uint32_t)(sizeof(h) + op->len);
	bool in = len <= c->inline_max;
	struct ibv_sge sge = { .addr = (uintptr_t)b, .length = len, .lkey = c->mem_mr->lkey };
	int ret;

	h.credits = take_owed(c);
	memcpy(b, &h, sizeof(h));
	op_gather(op, 0, b + sizeof(h), op->len);
	if ((ret = post_eager(c, &sge, 1, in, WR_NONE, h.credits)))
		return ret;
	ebuf_advance(c);
	c->tx_msn++;
	c->sf_head = (c->sf_head + 1) % c->alloc;
	c->sf_count--;
	op_complete(c, op, 0, op->len, 0);
	return 0;
}

/* STREAM with a stream buffer (§7.6): SEND eager buffer e_next, which
 * holds n bytes of the stream after its header, as the next chunk into
 * the peer's buffer (free again: the peer returned its credit, so the
 * device is done with it). `oi`: the send its completion ends, or
 * WR_NONE. */
static int post_chunk(struct exs_conn *c, uint32_t n, uint32_t oi)
{
	char *b = ebuf_next(c);
	struct exs_wire_eager h = { .version = EXS_WIRE_VERSION, .type = EXS_WIRE_EAGER,
				    .seq = c->e_tx };
	uint32_t len = (uint32_t)sizeof(h) + n;
	struct ibv_sge sge = { .addr = (uintptr_t)b, .length = len, .lkey = c->mem_mr->lkey };
	int ret;

	h.credits = take_owed(c);
	memcpy(b, &h, sizeof(h));
	if ((ret = post_eager(c, &sge, 1, len <= c->inline_max, oi, h.credits)))
		return ret;
	c->e_tx++;
	ebuf_advance(c);
	c->rts_out = false; /* the peer stops advertising on its own */
	return 0;
}

/*
 * The open chunk (send-side coalescing, the guide's "send-side Nagle
 * buffer" of §7.6): a small send that follows the connection's last send
 * with no wait in between (exs_g.idle_gen unchanged) is copied after the
 * sends before it into eager buffer e_next, and completes there; the chunk
 * goes when it is full or holds EXS_CORK_MSGS sends, before anything else
 * this connection posts (post_send), when an application thread comes to
 * a wait or finds nothing to take (exs_conn_uncork_all), and at the
 * progress thread's next millisecond tick otherwise. A send after a wait
 * goes at once, so a request and its reply never wait for the tick;
 * EXS_FD_NODELAY turns it off. While a chunk is open no advert is held
 * (one that comes first sends the chunk, which makes it stale).
 */
static struct exs_conn *corked; /* connections with an open chunk (exs_g.lock) */

static void cork_unlink(struct exs_conn *c)
{
	struct exs_conn **p;

	for (p = &corked; *p && *p != c; p = &(*p)->ck_next)
		;
	if (*p) {
		*p = c->ck_next;
		EXS_COUNT(exs_g.ncorked, -1);
	}
	c->ck_next = NULL;
}

/* The connection broke, or goes: what the open chunk holds never will.
 * (uncork: it is closed before it goes.) */
static void cork_drop(struct exs_conn *c)
{
	if (c->ck_len) {
		c->ck_len = 0;
		c->ck_msgs = 0;
		cork_unlink(c);
	}
}

/* the open chunk, if any, goes now */
static int uncork(struct exs_conn *c)
{
	uint32_t n = c->ck_len;

	if (!n)
		return 0;
	cork_drop(c);
	return post_chunk(c, n, WR_NONE);
}

/* uncork, or break the connection if the chunk cannot go (touched, for
 * its socket to see); true if it broke */
static bool uncork_or_break(struct exs_conn *c)
{
	if (!uncork(c))
		return false;
	exs_conn_break(c, ECONNRESET);
	touch(c);
	return true;
}

/* Lock held: every open chunk goes (a thread waits, or the tick came). */
void exs_conn_uncork_all(void)
{
	while (corked)
		uncork_or_break(corked);
}

void exs_conn_set_nodelay(struct exs_conn *c, bool on)
{
	c->nodelay = on;
	if (on)
		uncork_or_break(c);
}

/* May the first pending send, which has eager room, open a chunk: a small
 * whole send on a connection without EXS_FD_NODELAY, after whose last send
 * no thread came to a wait. */
static bool may_cork(const struct exs_conn *c, const struct exs_op *op)
{
	return !c->nodelay && c->streaming && op->done == 0 && op->len && op->len < c->sb_chunk &&
	       c->send_gen == __atomic_load_n(&exs_g.idle_gen, __ATOMIC_RELAXED);
}

/* May the first pending send join the open chunk: whole, and room left. */
static bool may_join(const struct exs_conn *c, const struct exs_op *op)
{
	return op->done == 0 && op->len && op->len <= c->sb_chunk - c->ck_len &&
	       c->ck_msgs < EXS_CORK_MSGS;
}

/* The first pending send goes into the open chunk (opened if need be) and
 * completes: its bytes are the library's now. The chunk goes if full. */
static int cork_add(struct exs_conn *c)
{
	uint32_t oi = c->sfifo[c->sf_head];
	struct exs_op *op = &c->sop[oi];
	char *b = ebuf_next(c) + sizeof(struct exs_wire_eager);

	op_gather(op, 0, b + c->ck_len, op->len);
	if (!c->ck_len) {
		c->ck_next = corked;
		corked = c;
		/* the progress thread's tick sends it if nobody else does */
		__atomic_add_fetch(&exs_g.ncorked, 1, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(&exs_g.deaf, __ATOMIC_SEQ_CST))
			exs_progress_wake();
	}
	c->ck_len += (uint32_t)op->len;
	c->ck_msgs++;
	c->n_corked++;
	op->done = op->len;
	c->sf_head = (c->sf_head + 1) % c->alloc;
	c->sf_count--;
	op_complete(c, op, 0, op->len, 0);
	if (c->ck_len == c->sb_chunk || c->ck_msgs >= EXS_CORK_MSGS)
		return uncork(c);
	return 0;
}

/* STREAM with a stream buffer (§7.6): SEND the next chunk of the first
 * pending send as an EAGER message into the peer's buffer, copied into the
 * next eager send buffer of the ring. The send completes when its
 * last byte is copied, or, if its first bytes were placed into an advert
 * (unsignalled RDMA WRITEs the device may not have read yet), when the
 * chunk's SEND completes: the send queue completes in order (fuzz_peer:
 * the buffer was handed back, and deregistered, before its writes ran).
 * No chunk is open. */
static int send_chunk(struct exs_conn *c)
{
	uint32_t oi = c->sfifo[c->sf_head];
	struct exs_op *op = &c->sop[oi];
	bool written = op->done > 0; /* a send's one chunk is its last piece */
	char *b = ebuf_next(c);
	size_t left = op->len - op->done;
	uint32_t n = left < c->sb_chunk ? (uint32_t)left : c->sb_chunk;
	int ret;

	op_gather(op, op->done, b + sizeof(struct exs_wire_eager), n);
	if ((ret = post_chunk(c, n, written ? oi : WR_NONE)))
		return ret;
	op->done += n;
	if (op->done == op->len) {
		c->sf_head = (c->sf_head + 1) % c->alloc;
		c->sf_count--;
		if (!written)
			op_complete(c, op, 0, op->len, 0);
	}
	return 0;
}

/* SEQPACKET: the k-th message fills the k-th receive. Adverts numbered
 * below the next message are stale (EAGER filled them). */
static void drop_stale_adverts(struct exs_conn *c)
{
	while (c->ad_count && (int32_t)(c->ads[c->ad_head].seq - c->tx_msn) < 0) {
		c->ad_head = (c->ad_head + 1) % c->alloc;
		c->ad_count--;
	}
}

/* May an EAGER message (a small send, or a stream-buffer chunk) go now:
 * an eager credit, a free eager slot, and the peer's hello seen. */
static bool eager_room(const struct exs_conn *c)
{
	return c->ecredits && (uint16_t)(c->e_posted - c->e_done) < c->alloc && !c->await_hello;
}

/* SEQPACKET: the first pending send goes EAGER if small, into its own
 * receive's advert if that is here, or else asks for that advert (RTS).
 * 1 to go on, 0 to wait, -errno when a post failed. */
static int send_one_seq(struct exs_conn *c)
{
	struct exs_op *op = &c->sop[c->sfifo[c->sf_head]];

	int ret;

	if (c->pst[EXS_PST_PEER_RECV] == EXS_PST_ACTIVE) {
		ret = place_persist(c); /* part 6: into the peer's block */
		return ret > 0 ? 0 : ret ?: 1;
	}
	drop_stale_adverts(c);
	if (small(c, op) && !op->mreg) {
		if (!eager_room(c))
			return 0;
		return send_eager(c) ?: 1;
	}
	if (c->ad_count && c->ads[c->ad_head].seq == c->tx_msn) {
		ret = place(c);
		return ret > 0 ? 0 : ret ?: 1;
	}
	if (small(c, op)) { /* registered: either way will do */
		if (!eager_room(c))
			return 0;
		return send_eager(c) ?: 1;
	}
	if (!op->rts && c->sp_max) {
		op->rts = true;
		return post_ctl(c, (struct exs_wire_msg){ .type = EXS_WIRE_RTS, .seq = c->tx_msn },
				-1);
	}
	return 0;
}

/*
 * SEQPACKET: a small unregistered send that nothing is queued before, and
 * that goes inline, is sent from the caller's buffer at once and completes
 * here: what send_eager() would do with it, without a send slot, the
 * queue's walk (match) or a copy into an eager buffer (an inline WR's
 * data are copied by the post; its SGEs' keys are not checked). Sent:
 * 0; 1 when it does not qualify (or the post failed: the queued way
 * then fails it as it fails any other).
 */
static int send_now(struct exs_conn *c, const struct exs_op *t)
{
	struct exs_wire_eager h = { .version = EXS_WIRE_VERSION, .type = EXS_WIRE_EAGER };
	struct ibv_sge sge[2];
	exs_event_t ev;

	if (!c->seq || c->link != EXS_LINK_UP || c->sf_count || t->mreg || t->nseg ||
	    t->sendfile || t->at_off || !small(c, t) || sizeof(h) + t->len > c->inline_max ||
	    c->max_sge < 2 || c->pst[EXS_PST_PEER_RECV] == EXS_PST_ACTIVE || !eager_room(c))
		return 1;
	drop_stale_adverts(c); /* as match() would: adverts for filled receives */
	h.seq = c->tx_msn;
	h.credits = take_owed(c);
	sge[0] = (struct ibv_sge){ .addr = (uintptr_t)&h, .length = sizeof(h) };
	sge[1] = (struct ibv_sge){ .addr = (uintptr_t)t->buf, .length = (uint32_t)t->len };
	if (post_eager(c, sge, 2, true, WR_NONE, h.credits))
		return 1;
	c->tx_msn++;
	c->bytes_sent += t->len;
	c->sends++;
	op_queue_ref(c, t);
	op_event(c, t, 0, t->len, 0, &ev);
	ev.exs_evt_type = EXS_EVT_SEND;
	op_report(t, 0, &ev);
	return 0;
}

/* STREAM with no advert held: the first pending send goes into the peer's
 * stream buffer (§7.6) if what is left of it fits one chunk; a longer one
 * waits for an advert, placed without a copy, and asks for it with an RTS
 * (once: the peer then advertises every receive until our next chunk).
 * 1 to go on, 0 to wait, -errno when a post failed. */
static int send_one_stream(struct exs_conn *c)
{
	const struct exs_op *op = &c->sop[c->sfifo[c->sf_head]];
	int ret;

	if (!c->sb_chunk || c->await_hello)
		return 0;
	if (op->len - op->done > c->sb_chunk) {
		/* the open chunk goes before the RTS, which counts it; the
		 * RTS takes an eager credit too, which bounds how many
		 * the peer must have receive buffers for */
		if ((ret = uncork(c)))
			return ret;
		if (c->rts_out || !c->ecredits)
			return 0;
		ret = post_ctl(c, (struct exs_wire_msg){ .type = EXS_WIRE_RTS, .seq = c->e_tx }, -1);
		if (ret)
			return ret;
		c->ecredits--;
		c->rts_out = true;
		return 0;
	}
	if (c->ck_len) {
		if (may_join(c, op))
			return cork_add(c) ?: 1;
		if ((ret = uncork(c)))
			return ret;
	}
	if (!eager_room(c))
		return 0;
	if (may_cork(c, op))
		return cork_add(c) ?: 1;
	return send_chunk(c) ?: 1;
}

/*
 * Send what can go, oldest first. SEQPACKET: one send fills one receive
 * and the rest is reported lost. STREAM: a send spills over as many
 * adverts as it needs and loses nothing.
 */
static void match(struct exs_conn *c)
{
	int ret = 0;

	if (c->seq)
		drop_stale_adverts(c);
	while (c->sf_count && c->link != EXS_LINK_RESET) {
		if (c->seq) {
			if ((ret = send_one_seq(c)) <= 0)
				break;
		} else if (c->ad_count) {
			if (c->ads[c->ad_head].flags & ADV_HELD)
				break;
			if ((ret = place(c)))
				break;
		} else {
			if ((ret = send_one_stream(c)) <= 0)
				break;
		}
	}
	if (ret < 0)
		exs_conn_break(c, ECONNRESET);
}

static int credits_in_use(uint32_t alloc, uint32_t nfree)
{
	return (int)(alloc - nfree);
}

/* The key an advert of receive `op` gives the peer: the region's own, or
 * for a region registered with EXS_MRF_ADVERT_ONLY a registration of the
 * receive's buffer alone, made at its first advert and let go when it
 * completes (op_complete), so a peer reaches nothing else of the region
 * and nothing once the receive is over (as unregistered memory's
 * registration for the call already is the buffer alone). */
static int advert_mem(struct exs_conn *c, struct exs_op *op)
{
	int ret = op_mem(c, op);

	if (ret || !op->mreg || !(op->mreg->flags & EXS_MRF_ADVERT_ONLY) || op->tmp_mr)
		return ret;
	return reg_alone(c, op, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
}

/* Tell the peer where receive `op` (in slot `slot`) wants its data. */
static int advertise(struct exs_conn *c, struct exs_op *op, uint32_t slot)
{
	int ret = advert_mem(c, op);

	if (ret)
		return ret;
	op->advertised = true;
	/* what it still lacks (a STREAM receive may hold buffered data) */
	return post_ctl(c, (struct exs_wire_msg){ .type = EXS_WIRE_ADVERT, .slot = (uint16_t)slot,
			.addr = (uintptr_t)op->lbuf + op->done, .rkey = op->rkey,
			.len = (uint32_t)(op->len - op->done), .seq = c->seq ? op->seq : c->e_rx,
			.flags = (!c->seq && (op->flags & MSG_WAITALL)) ? EXS_WIRE_ADV_WAITALL : 0 },
			-1);
}

/* A small message for the first waiting receive, from the wire or from
 * the pool: copied into its buffer (SEQPACKET: the excess is lost). */
static void deliver_small(struct exs_conn *c, struct exs_op *op, const char *data, uint32_t len)
{
	size_t n = len < op->len ? len : op->len;

	memcpy(op->lbuf, data, n);
	c->owed++;
	op_complete(c, op, 0, n, len - n);
}

/* SEQPACKET: the oldest kept small message fills receive `op`. */
static void deliver_pooled(struct exs_conn *c, struct exs_op *op)
{
	uint32_t i = c->pool_head;

	c->pool_head = (c->pool_head + 1) % c->alloc;
	c->pool_count--;
	deliver_small(c, op, c->pool + (size_t)i * c->sp_cap, c->pool_len[i]);
	maybe_credit(c);
}

/* STREAM (§7.6): copy buffered bytes from the pool into `op` after what it
 * holds, as many as it takes; an emptied pool entry's credit is owed. */
static void take_pool(struct exs_conn *c, struct exs_op *op)
{
	while (c->pool_count && op->done < op->len) {
		uint32_t i = c->pool_head, avail = c->pool_len[i] - c->pool_off;
		size_t k = op->len - op->done < avail ? op->len - op->done : avail;

		memcpy(op->lbuf + op->done, c->pool + (size_t)i * c->sp_cap + c->pool_off, k);
		op->done += k;
		c->pool_off += (uint32_t)k;
		if (c->pool_off == c->pool_len[i]) {
			c->pool_head = (c->pool_head + 1) % c->alloc;
			c->pool_count--;
			c->pool_off = 0;
			c->owed++;
		}
	}
}

/* STREAM: a receive that is done (not MSG_WAITALL, or full) completes. */
static bool stream_recv_done(const struct exs_op *op)
{
	return op->done && (!(op->flags & MSG_WAITALL) || op->done == op->len);
}

/* Take waiting receive `slot` out of the receive FIFO, keeping the order
 * of the others; false if it is not there. */
static bool rfifo_remove(struct exs_conn *c, uint32_t slot)
{
	uint32_t k, kept = 0;

	for (k = 0; k < c->rf_count; k++) {
		uint32_t s = c->rfifo[(c->rf_head + k) % c->alloc];

		if (s != slot)
			c->rfifo[(c->rf_head + kept++) % c->alloc] = s;
	}
	if (kept == c->rf_count)
		return false;
	c->rf_count = kept;
	return true;
}

/* exs_cancel of a receive nobody can write into: it ends now, with the
 * bytes it holds (errno 0) or ECANCELED if none. */
static void cancel_recv_now(struct exs_conn *c, struct exs_op *op)
{
	rfifo_remove(c, (uint32_t)(op - c->rop));
	op_complete(c, op, op->done ? 0 : ECANCELED, op->done, 0);
}

/* STREAM (§7.6): a receive whose cancel waits and whose advert a chunk
 * made void has no advert the peer may use: it ends now. Done before the
 * chunk is copied and before the others are advertised again, so that
 * neither reaches it. */
static void drop_cancelled_waiting(struct exs_conn *c)
{
	uint32_t k = 0;

	while (k < c->rf_count) {
		struct exs_op *op = &c->rop[c->rfifo[(c->rf_head + k) % c->alloc]];

		if (op->cancelling && !op->advertised)
			cancel_recv_now(c, op);
		else
			k++;
	}
}

/* STREAM (§7.6): advertise the waiting receives that have no (good)
 * advert, oldest first, so that adverts keep the receives' order: one that
 * lacks at most a chunk only when the peer asked (RTS), as its data comes
 * in chunks otherwise, and none after it. Stops, to go on from the next
 * progress, when control send slots run short. */
static void advertise_waiting(struct exs_conn *c)
{
	uint32_t k;

	drop_cancelled_waiting(c);
	for (k = 0; k < c->rf_count; k++) {
		uint32_t slot = c->rfifo[(c->rf_head + k) % c->alloc];
		struct exs_op *op = &c->rop[slot];
		int ret;

		if (op->advertised)
			continue;
		if (!c->ad_wanted && op->len - op->done <= c->sb_chunk)
			break;
		if (c->nctl_free < 2) {
			c->readvertise = true;
			return;
		}
		if ((ret = advertise(c, op, slot))) {
			if (EXS_DEBUG_ON())
				exs_debug("fd %d: cannot advertise a receive: %s", c->fd, strerror(-ret));
			exs_conn_break(c, ECONNRESET);
			return;
		}
	}
	c->readvertise = false;
}

int exs_conn_recv(struct exs_conn *c, const struct exs_op *t)
{
	struct exs_op *op;
	uint32_t slot;
	int ret;

	if (exs_conn_reset_before_eof(c))
		return -ECONNRESET;
	if (t->flags & EXS_PERSISTENT)
		return persist_start(c, t);
	if (c->pst[EXS_PST_OWN_RECV] != EXS_PST_NONE)
		return -EBUSY; /* our persistent receive takes every send */
	if (t->at_off && (c->pst[EXS_PST_PEER_SEND] != EXS_PST_ACTIVE ||
			  t->roff > c->blk[0].len || t->len > c->blk[0].len - t->roff))
		return -EINVAL; /* beyond the peer's block, or none */
	if (credits_in_use(c->alloc, c->nrfree) >= (int)c->credits || !c->nrfree)
		return -EBUSY;
	slot = c->rfree[c->nrfree - 1];
	op = &c->rop[slot];
	*op = *t;
	op->kind = EXS_EVT_RECV;
	if ((ret = op_start(c, op))) {
		memset(op, 0, sizeof(*op));
		return ret;
	}
	c->nrfree--;
	if (c->seq && c->pst[EXS_PST_PEER_SEND] != EXS_PST_NONE) {
		/* part 6: read from the peer's block, after what came before */
		if (c->pool_count && !op->at_off) {
			deliver_pooled(c, op);
			return 0;
		}
		if (c->rx != EXS_RX_OPEN) {
			op_complete(c, op, 0, 0, 0);
			return 0;
		}
		c->rfifo[(c->rf_head + c->rf_count++) % c->alloc] = slot;
		issue_reads(c);
		return 0;
	}
	if (c->seq) {
		op->seq = c->rx_rsn++;
		if (c->pool_count) {
			deliver_pooled(c, op); /* its message came first (§7.2) */
			return 0;
		}
	} else if (c->sb_chunk && c->pool_count && !c->rf_count) {
		/* §7.6: buffered bytes first */
		take_pool(c, op);
		maybe_credit(c);
		if (stream_recv_done(op)) {
			op_complete(c, op, 0, op->done, 0);
			return 0;
		}
	}
	if (c->rx != EXS_RX_OPEN) {
		/* after the peer's FIN, or our SHUT_RD, every receive is an EOF
		 * (guide §5.2, §4.5), or what it holds */
		op_complete(c, op, 0, op->done, 0);
		return 0;
	}
	if (c->seq || c->sb_chunk)
		c->rfifo[(c->rf_head + c->rf_count++) % c->alloc] = slot;
	if (c->sb_chunk) {
		/* after the older ones, whose adverts may be due again */
		advertise_waiting(c); /* a failure there fails `op` by its event */
		return 0;
	}
	if (small(c, op) && !(c->rts_pending && c->rts_seq == op->seq))
		return 0; /* quiet: the peer sends it EAGER, or an RTS */
	c->rts_pending = false;
	ret = advertise(c, op, slot);
	if (ret) {
		if (c->seq)
			c->rx_rsn--;
		if (c->seq || c->sb_chunk)
			c->rf_count--;
		op_unstart(c, op);
		c->rfree[c->nrfree++] = slot;
		if (ret != -ENOBUFS && ret != -ENOMEM && ret != -EFAULT) {
			exs_conn_break(c, ECONNRESET); /* the QP is dead */
			return -ECONNRESET;
		}
		return ret;
	}
	return 0;
}

int exs_conn_send(struct exs_conn *c, const struct exs_op *t)
{
	uint32_t oi;
	unsigned gen;
	int ret;

	if (c->link == EXS_LINK_RESET)
		return -ECONNRESET;
	if (c->tx != EXS_TX_OPEN)
		return -EPIPE;
	if (t->len > (size_t)c->dev->max_msg_sz * c->dev->max_chunks)
		return -EMSGSIZE;
	if (t->flags & EXS_PERSISTENT)
		return persist_start(c, t);
	if (c->pst[EXS_PST_OWN_SEND] != EXS_PST_NONE)
		return -EBUSY; /* our persistent send is what the peer receives */
	if (t->at_off && (c->pst[EXS_PST_PEER_RECV] != EXS_PST_ACTIVE ||
			  t->roff > c->blk[1].len || t->len > c->blk[1].len - t->roff))
		return -EINVAL; /* beyond the peer's block, or none */
	if (credits_in_use(c->alloc, c->nsfree) >= (int)c->credits || !c->nsfree)
		return -EBUSY;
	gen = __atomic_load_n(&exs_g.idle_gen, __ATOMIC_RELAXED);
	c->streaming = c->send_gen == gen; /* no wait since the last send: may coalesce */
	c->send_gen = gen;
	if (!send_now(c, t))
		return 0;
	oi = c->sfree[c->nsfree - 1];
	c->sop[oi] = *t;
	c->sop[oi].kind = EXS_EVT_SEND;
	if ((ret = op_start(c, &c->sop[oi]))) {
		memset(&c->sop[oi], 0, sizeof(c->sop[oi]));
		return ret;
	}
	c->nsfree--;
	c->sfifo[(c->sf_head + c->sf_count) % c->alloc] = oi;
	c->sf_count++;
	match(c);
	return 0;
}

void exs_conn_shut_wr(struct exs_conn *c)
{
	/* a persistent send ends first: the FIN waits for its UNPERSIST_ACK */
	if (c->pst[EXS_PST_OWN_SEND] == EXS_PST_ACTIVE && c->link != EXS_LINK_RESET &&
	    unpersist(c, false))
		exs_conn_break(c, ECONNRESET);
	if (c->tx == EXS_TX_OPEN || c->tx == EXS_TX_REFUSED)
		set_tx(c, EXS_TX_SHUTTING);
	maybe_fin(c);
}

/* The abort is over: with the QP in error the device neither reads nor
 * writes the operations' buffers any more, so they may end. */
static void abort_finish(struct exs_conn *c)
{
	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_ERR };

	exs_verbs_modify_qp(c->qp, &qa, IBV_QP_STATE, c->iwarp);
	exs_conn_fail_all(c, c->abort_err ? c->abort_err : ECONNABORTED);
}

/* An abortive close: what is started fails with ECONNABORTED, the peer
 * gets an ABORT in place of the FIN, and nothing more is taken from it.
 * Nothing more is placed either, but the writes of a send already placed
 * are still the device's, and the peer may still be writing into an
 * advertised receive: the operations end when the ABORT has completed
 * (RC ordering: every write before it is done; then the QP goes to
 * error), not at once (fuzz_peer: the device read a send's buffer after
 * its ECONNABORTED had deregistered it). */
void exs_conn_abort(struct exs_conn *c)
{
	bool was_reset = c->link == EXS_LINK_RESET;

	set_link(c, EXS_LINK_RESET);
	c->sf_count = 0;
	c->ad_count = 0;
	/* before the peer's HELLO nothing went out: no ABORT to wait for */
	if (!was_reset && c->tx < EXS_TX_FIN_SENT && !c->await_hello &&
	    !post_ctl_type(c, EXS_WIRE_ABORT)) {
		set_tx(c, EXS_TX_ABORT_SENT);
		return;
	}
	set_tx(c, EXS_TX_DONE);
	abort_finish(c);
}

/* A closing socket's deadline passed: abort what was never placed, or
 * stop waiting for a FIN/ABORT completion that never came. */
void exs_conn_give_up(struct exs_conn *c)
{
	if (c->tx < EXS_TX_FIN_SENT) {
		exs_conn_abort(c);
	} else {
		set_tx(c, EXS_TX_DONE);
		abort_finish(c);
	}
	/* a persistent receive's UNPERSIST_ACK is not waited for either */
	if (c->pst[EXS_PST_OWN_RECV] == EXS_PST_ENDING)
		set_pst(c, EXS_PST_OWN_RECV, EXS_PST_NONE);
}

/* Data arrived for receive `slot`. A STREAM receive with MSG_WAITALL
 * completes only when full (or at EOF); any other at once. */
static void complete_slot(struct exs_conn *c, uint32_t slot, size_t len, size_t lost)
{
	struct exs_op *op;

	if (slot >= c->alloc || c->rop[slot].kind != EXS_EVT_RECV ||
	    len > c->rop[slot].len - c->rop[slot].done) {
		proto_error(c, "data for no receive, or too much (slot, length)", slot, (unsigned)len);
		return;
	}
	op = &c->rop[slot];
	if (c->seq) {
		/* the k-th message fills the k-th receive */
		if (!c->rf_count || c->rfifo[c->rf_head] != slot || !op->advertised) {
			proto_error(c, "data out of order (slot, waiting receives)", slot,
				    c->rf_count);
			return;
		}
		c->rf_head = (c->rf_head + 1) % c->alloc;
		c->rf_count--;
		c->rx_msn++;
	}
	if (!c->seq && c->sb_chunk && (!c->rf_count || c->rfifo[c->rf_head] != slot ||
					!op->advertised)) {
		/* the peer wrote into a receive whose advert was stale */
		proto_error(c, "stream data out of order (slot, waiting receives)", slot, c->rf_count);
		return;
	}
	op->done += len;
	if (!c->seq && (op->flags & MSG_WAITALL) && op->done < op->len) {
		if (c->unadv == EXS_UNADV_ASKED && c->unadv_slot == slot)
			return; /* the peer drops the held advert: no MORE (UNADVERT) */
		if (post_ctl(c, (struct exs_wire_msg){ .type = EXS_WIRE_MORE, .slot = slot }, -1))
			exs_conn_break(c, ECONNRESET);
		return;
	}
	if (!c->seq && c->sb_chunk) {
		c->rf_head = (c->rf_head + 1) % c->alloc;
		c->rf_count--;
	}
	op_complete(c, op, 0, op->done, lost);
}

/* No more data will come for the receives still waiting: they complete
 * with what they hold, which is an EOF (length 0, errno 0) if nothing. */
static void end_receives(struct exs_conn *c)
{
	uint32_t i;

	c->rf_count = 0;
	c->rd_left = 0;
	/* our persistent receive ends too (EOF): the peer writes no more */
	set_pst(c, EXS_PST_OWN_RECV, EXS_PST_NONE);
	for (i = 0; i < c->alloc; i++)
		if (c->rop[i].kind && !c->rop[i].reading) /* a READ's completion ends it */
			op_complete(c, &c->rop[i], 0, (c->rop[i].flags & EXS_PERSISTENT) ? 0 :
				    c->rop[i].done, 0);
	unadv_release(c);
}

/* SHUT_RD (guide §4.5): take no new data; the peer fails its sends with
 * EPIPE and answers RDSHUT_ACK, after which it writes nothing more. */
void exs_conn_shut_rd(struct exs_conn *c)
{
	if (c->rx != EXS_RX_OPEN)
		return;
	if (c->link == EXS_LINK_RESET) {
		set_rx(c, EXS_RX_SHUT_DONE);
		return;
	}
	set_rx(c, EXS_RX_SHUT);
	c->owed += c->pool_count; /* what came before the shut is dropped */
	c->pool_count = 0;
	c->pool_off = 0;
	if (post_ctl_type(c, EXS_WIRE_RDSHUT))
		exs_conn_break(c, ECONNRESET);
}

/* exsd lost the CM connection. What the peer sent before (data, FIN) is in
 * the CQ: take it first, so a graceful close is not mistaken for a reset.
 * Without a FIN the peer may be alive and only its exsd restarted: on
 * RoCE/IB the QP lives in the application, so ask the peer itself (PING)
 * before failing anything. An iWARP connection is the CM endpoint's: it
 * ended with it. EXS_CM_ABORTED: exsd ended the connection on purpose
 * (exsctl disconnect): it ends here as by an abortive close, the peer
 * told in-band (ABORT: it ends at once, even if it has just had our answer
 * to a PING of its own), and the operations here end with ECONNRESET, as
 * exsctl(8) says both ends see. EXS_CM_PEER_GONE: exsd saw the peer's
 * process die: nobody would answer a PING or take an ABORT. */
void exs_conn_cm_lost(struct exs_conn *c, enum exs_cm_loss why)
{
	exs_conn_poll(c); /* the others it touched are the caller's to settle */
	exs_conn_progress(c);
	if (c->link != EXS_LINK_UP)
		return;
	if (EXS_DEBUG_ON())
		exs_debug("fd %d: exsd lost the CM connection (%s)", c->fd,
			  why == EXS_CM_ABORTED ? "exsctl disconnect" : why == EXS_CM_PEER_GONE ? "peer process gone" : "asking the peer");
	if (why == EXS_CM_ABORTED) {
		c->abort_err = ECONNRESET;
		exs_conn_abort(c);
		return;
	}
	if (c->iwarp || c->rx == EXS_RX_EOF || why == EXS_CM_PEER_GONE) {
		exs_conn_break(c, ECONNRESET);
		return;
	}
	if (post_ctl_type(c, EXS_WIRE_PING)) {
		exs_conn_break(c, ECONNRESET);
		return;
	}
	c->probe_deadline_ms = exs_now_ms() + EXS_PROBE_MS;
	set_link(c, EXS_LINK_PROBING);
}

void exs_conn_tick(struct exs_conn *c, uint64_t now)
{
	if (c->link == EXS_LINK_PROBING && now >= c->probe_deadline_ms)
		exs_conn_break(c, ECONNRESET); /* no answer: the peer is gone */
}

/* The peer shut its read side: what we have not placed never will be. */
static void peer_shut_rd(struct exs_conn *c)
{
	int32_t placing = -1;

	if (c->tx == EXS_TX_OPEN)
		set_tx(c, EXS_TX_REFUSED);
	c->ad_count = 0;
	while (c->sf_count) {
		uint32_t oi = c->sfifo[c->sf_head];

		/* the oldest send may be placed in part: its writes are the
		 * device's until the ACK after them completes (fuzz_peer: its
		 * buffer was deregistered before they ran) */
		if (c->sop[oi].done)
			placing = (int32_t)oi;
		else
			op_complete(c, &c->sop[oi], EPIPE, 0, 0);
		c->sf_head = (c->sf_head + 1) % c->alloc;
		c->sf_count--;
	}
	if (post_ctl(c, (struct exs_wire_msg){ .type = EXS_WIRE_RDSHUT_ACK }, placing))
		exs_conn_break(c, ECONNRESET);
}

/* Eager credits the peer gives back, carried by any message: false (and
 * the connection broken) if more than it ever had. */
static bool got_credits(struct exs_conn *c, uint32_t n)
{
	if (!n)
		return true;
	if ((!c->sp_max && !c->sb_chunk) || c->ecredits + n > c->credits) {
		proto_error(c, "credits beyond the eager messages sent (credits, returned)",
			    c->ecredits, n);
		return false;
	}
	c->ecredits += n;
	match(c);
	return true;
}

/* STREAM (proto/exs_wire.h part 4): the peer has a send longer than a
 * chunk and no advert. Advertise every waiting receive, and every one
 * posted until its next chunk; its credit comes back at once. */
static void on_stream_rts(struct exs_conn *c, uint32_t seq)
{
	if (!c->sb_chunk || seq != c->e_rx || c->ad_wanted) {
		proto_error(c, "stream RTS out of place (seq, chunks arrived)", seq, c->e_rx);
		return;
	}
	c->owed++;
	c->ad_wanted = true;
	if (c->rx != EXS_RX_OPEN)
		return; /* shut: its RDSHUT is on the way */
	advertise_waiting(c);
}

/* The peer has a message too long for EAGER for receive `seq`, the next
 * one: advertise that receive, whatever its size, now or when posted. */
static void on_rts(struct exs_conn *c, uint32_t seq)
{
	struct exs_op *op;
	uint32_t slot;
	int ret;

	if (!c->seq) {
		on_stream_rts(c, seq);
		return;
	}
	if (!c->sp_cap || seq != c->rx_msn || c->rts_pending) {
		proto_error(c, "RTS out of order (seq, next message)", seq, c->rx_msn);
		return;
	}
	if (c->pst[EXS_PST_OWN_RECV] != EXS_PST_NONE)
		return; /* part 6: the peer writes that send into our block */
	if (c->rx != EXS_RX_OPEN)
		return; /* shut: its RDSHUT is on the way */
	if (!c->rf_count) {
		c->rts_pending = true;
		c->rts_seq = seq;
		return;
	}
	slot = c->rfifo[c->rf_head];
	op = &c->rop[slot];
	if (op->advertised)
		return; /* the advert is on its way */
	if ((ret = advertise(c, op, slot))) {
		if (EXS_DEBUG_ON())
			exs_debug("fd %d: cannot advertise a receive: %s", c->fd, strerror(-ret));
		exs_conn_break(c, ECONNRESET);
	}
}

/* exs_cancel: send the UNADVERT of the next receive whose cancel waits, if
 * none is out; one without a live advert ends at once. */
static void unadvertise_next(struct exs_conn *c)
{
	uint32_t i;

	for (i = 0; i < c->alloc && c->unadv == EXS_UNADV_NONE; i++) {
		struct exs_op *op = &c->rop[i];

		if (op->kind != EXS_EVT_RECV || !op->cancelling)
			continue;
		if (!op->advertised) {
			cancel_recv_now(c, op);
			continue;
		}
		if (post_ctl(c, (struct exs_wire_msg){ .type = EXS_WIRE_UNADVERT, .slot = (uint16_t)i },
			     -1)) {
			exs_conn_break(c, ECONNRESET);
			return;
		}
		set_unadv(c, EXS_UNADV_ASKED, i);
	}
}

/* The peer cancels its receive `slot`: drop its advert if we hold it (a
 * held one too: its MORE will not come) and say so. What we placed there
 * went before this ACK. */
static void on_unadvert(struct exs_conn *c, uint16_t slot)
{
	uint32_t k, kept = 0;

	if (c->seq || slot >= c->alloc) {
		proto_error(c, "UNADVERT on SEQPACKET or of no slot (slot, 0)", slot, 0);
		return;
	}
	for (k = 0; k < c->ad_count; k++) {
		struct exs_wire_msg a = c->ads[(c->ad_head + k) % c->alloc];

		if (a.slot != slot)
			c->ads[(c->ad_head + kept++) % c->alloc] = a;
	}
	c->ad_count = kept;
	if (post_ctl(c, (struct exs_wire_msg){ .type = EXS_WIRE_UNADVERT_ACK, .slot = slot }, -1)) {
		exs_conn_break(c, ECONNRESET);
		return;
	}
	match(c); /* a held advert dropped lets the next one be used */
}

/* The peer writes no more into receive `slot`: it ends with what it got
 * (ECANCELED if nothing), or, if data ended it meanwhile, its slot is free. */
static void on_unadvert_ack(struct exs_conn *c, uint16_t slot)
{
	struct exs_op *op;

	if (c->unadv == EXS_UNADV_NONE || slot != c->unadv_slot) {
		if (c->rx == EXS_RX_OPEN)
			proto_error(c, "UNADVERT_ACK unasked (slot, state)", slot, c->unadv);
		return; /* after a FIN or RDSHUT_ACK the wait was given up */
	}
	if (c->unadv == EXS_UNADV_FILLED) {
		c->rfree[c->nrfree++] = slot;
		set_unadv(c, EXS_UNADV_NONE, slot);
	} else {
		op = &c->rop[slot];
		set_unadv(c, EXS_UNADV_NONE, slot);
		cancel_recv_now(c, op);
	}
	unadvertise_next(c);
}

/* STREAM (§7.6, proto/exs_wire.h part 4): an EAGER chunk. The peer had no
 * advert when it sent it, so every waiting receive's advert is stale: the
 * chunk fills the waiting receives in order, the rest waits in the pool,
 * and receives still waiting are advertised again for what they lack. */
static void on_chunk(struct exs_conn *c, const struct exs_wire_eager *h, const char *d, uint32_t len)
{
	uint32_t used = 0, k;

	if (h->version != EXS_WIRE_VERSION || c->await_hello || !c->sb_chunk || len > c->sb_chunk ||
	    !len || h->seq != c->e_rx) {
		proto_error(c, "stream chunk out of place (seq, length)", h->seq, len);
		return;
	}
	c->e_rx++;
	c->ad_wanted = false; /* the peer is sending chunks again */
	if (c->rx != EXS_RX_OPEN) {
		c->owed++; /* shut: dropped */
		return;
	}
	for (k = 0; k < c->rf_count; k++)
		c->rop[c->rfifo[(c->rf_head + k) % c->alloc]].advertised = false;
	drop_cancelled_waiting(c);
	while (used < len && c->rf_count) {
		struct exs_op *op = &c->rop[c->rfifo[c->rf_head]];
		size_t n = op->len - op->done < len - used ? op->len - op->done : len - used;

		memcpy(op->lbuf + op->done, d + used, n);
		op->done += n;
		used += (uint32_t)n;
		if (!stream_recv_done(op))
			break;
		c->rf_head = (c->rf_head + 1) % c->alloc;
		c->rf_count--;
		op_complete(c, op, 0, op->done, 0);
	}
	if (used == len) {
		c->owed++;
	} else if (c->pool_count < c->alloc) {
		uint32_t i = (c->pool_head + c->pool_count++) % c->alloc;

		memcpy(c->pool + (size_t)i * c->sp_cap, d + used, len - used);
		c->pool_len[i] = len - used;
	} else {
		proto_error(c, "stream chunk beyond the credits (chunks held, length)", c->pool_count, len);
		return;
	}
	/* the receives still waiting are advertised again when the peer asks
	 * (RTS) or a receive is posted: not per chunk, where a run of small
	 * sends would cost an advert each for every waiting receive */
}

/* An EAGER message (proto/exs_wire.h part 3): into the first waiting
 * receive, or the pool until there is one. Sends nothing: the caller
 * reposts the buffer first. */
static void on_eager(struct exs_conn *c, const char *p, uint32_t n)
{
	struct exs_wire_eager h;
	uint32_t len = n - (uint32_t)sizeof(h);

	memcpy(&h, p, sizeof(h));
	if (!c->seq) {
		on_chunk(c, &h, p + sizeof(h), len);
		return;
	}
	if (h.version != EXS_WIRE_VERSION || c->await_hello || !c->sp_cap || len > c->sp_cap ||
	    h.seq != c->rx_msn) {
		proto_error(c, "EAGER out of place (seq, length)", h.seq, len);
		return;
	}
	c->rx_msn++;
	if (c->rx != EXS_RX_OPEN) {
		c->owed++; /* shut: dropped */
	} else if (c->pst[EXS_PST_OWN_RECV] != EXS_PST_NONE) {
		/* part 6: sent before the peer knew of our persistent receive:
		 * it lands where the peer's write would have put it */
		struct exs_op *op = &c->rop[c->pst_op[1]];

		memcpy(op->buf, p + sizeof(h), len < op->len ? len : op->len);
		c->owed++;
	} else if (c->rf_count) {
		struct exs_op *op = &c->rop[c->rfifo[c->rf_head]];

		c->rf_head = (c->rf_head + 1) % c->alloc;
		c->rf_count--;
		deliver_small(c, op, p + sizeof(h), len);
	} else if (c->pool_count < c->alloc) {
		uint32_t i = (c->pool_head + c->pool_count++) % c->alloc;

		memcpy(c->pool + (size_t)i * c->sp_cap, p + sizeof(h), len);
		c->pool_len[i] = len;
	} else {
		proto_error(c, "EAGER beyond the credits (messages held, length)", c->pool_count,
			    len);
	}
}

/* ---- persistent transfers (proto/exs_wire.h part 6) */

/* Post the RDMA WRITEs (a send's bytes 0..n) or READs (into a receive's
 * buffer) of n bytes at raddr, one per max_msg_sz bytes; the last asks for
 * the completion that ends the op. */
static int post_rdma(struct exs_conn *c, struct exs_op *op, uint64_t wr_id, bool read, uint32_t n,
		     uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge[EXS_IOV_MAX];
	uint32_t off = 0, chunk;
	int ret = 0, nsge;

	do {
		uint32_t want = n - off < c->dev->max_msg_sz ? n - off : c->dev->max_msg_sz;
		struct ibv_send_wr wr;

		if (read) {
			sge[0] = (struct ibv_sge){ .addr = (uintptr_t)op->lbuf + off, .length = want,
						   .lkey = op->lkey };
			nsge = 1;
			chunk = want;
		} else {
			nsge = op_sges(op, off, want, sge, c->max_sge, &chunk);
		}
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = wr_id;
		wr.sg_list = sge;
		wr.num_sge = nsge;
		wr.opcode = read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
		wr.wr.rdma.remote_addr = raddr + off;
		wr.wr.rdma.rkey = rkey;
		off += chunk;
		if (off == n)
			wr.send_flags = IBV_SEND_SIGNALED;
		if (!read && chunk <= c->inline_max)
			wr.send_flags |= IBV_SEND_INLINE;
		ret = post_send(c, &wr);
	} while (!ret && off < n && chunk);
	return ret;
}

/* The peer's persistent receive is in effect: the first pending send goes
 * into its block (exs_send_offset's at its offset), as much as fits; the
 * send completes when the write does. 0, 1 to wait for room in the send
 * queue, or -errno. */
static int place_persist(struct exs_conn *c)
{
	uint32_t oi = c->sfifo[c->sf_head];
	struct exs_op *op = &c->sop[oi];
	const struct exs_wire_msg *b = &c->blk[1];
	uint64_t off = op->at_off ? op->roff : 0;
	uint32_t n = op->len < b->len - off ? (uint32_t)op->len : (uint32_t)(b->len - off);
	int ret;

	if (!dq_room(c, data_wrs(c, op, n, false)))
		return 1;
	if ((ret = op_mem(c, op)))
		return ret;
	c->sf_head = (c->sf_head + 1) % c->alloc;
	c->sf_count--;
	op->pwrite = true;
	op->done = n;
	return post_rdma(c, op, WR_ID(c, WR_WRITE, oi), false, n, b->addr + off, b->rkey);
}

/* The peer's persistent send is in effect (or its UNPERSIST came and
 * rd_left receives are still to be read): READ it into the waiting
 * receives, oldest first, at most EXS_MAX_READS at once and as many as
 * the READ_DONE window allows. */
static void issue_reads(struct exs_conn *c)
{
	const struct exs_wire_msg *b = &c->blk[0];
	bool notify = b->flags & EXS_WIRE_PST_NOTIFY;
	size_t most = (size_t)c->dev->max_msg_sz * c->dev->max_chunks;

	while (c->rf_count && c->link != EXS_LINK_RESET &&
	       (c->pst[EXS_PST_PEER_SEND] == EXS_PST_ACTIVE ||
		(c->pst[EXS_PST_PEER_SEND] == EXS_PST_ENDING && c->rd_left))) {
		uint32_t slot = c->rfifo[c->rf_head];
		struct exs_op *op = &c->rop[slot];
		uint64_t off = op->at_off ? op->roff : 0;
		size_t n = op->len < b->len - off ? op->len : b->len - off;
		int ret;

		if (notify && c->rd_unacked >= c->credits)
			return; /* READ_CREDIT lets the next go */
		if (c->reads_out >= EXS_MAX_READS)
			return; /* a READ's completion lets the next go */
		if (!dq_room(c, data_wrs(c, op, n < most ? n : most, true)))
			return; /* likewise */
		c->rf_head = (c->rf_head + 1) % c->alloc;
		c->rf_count--;
		if (c->pst[EXS_PST_PEER_SEND] == EXS_PST_ENDING)
			c->rd_left--;
		if ((ret = op_mem(c, op))) {
			op_complete(c, op, -ret, 0, 0);
			continue;
		}
		op->reading = true;
		op->done = n < most ? n : most;
		c->reads_out++;
		c->rd_unacked += notify;
		if (post_rdma(c, op, WR_ID(c, WR_READ, slot), true, (uint32_t)op->done, b->addr + off,
			      b->rkey)) {
			exs_conn_break(c, ECONNRESET);
			return;
		}
	}
}

/* The peer's UNPERSIST came and our READs are over: say so, and number and
 * advertise the receives that wait, as part 3 does. */
static void finish_peer_send(struct exs_conn *c)
{
	uint32_t k;

	if (post_ctl(c, (struct exs_wire_msg){ .type = EXS_WIRE_UNPERSIST_ACK }, -1)) {
		exs_conn_break(c, ECONNRESET);
		return;
	}
	set_pst(c, EXS_PST_PEER_SEND, EXS_PST_NONE);
	c->rx_rsn = c->rx_msn - c->pool_count;
	for (k = 0; k < c->rf_count; k++) {
		uint32_t slot = c->rfifo[(c->rf_head + k) % c->alloc];
		struct exs_op *op = &c->rop[slot];

		op->seq = c->rx_rsn++;
		if (!small(c, op) && advertise(c, op, slot)) {
			exs_conn_break(c, ECONNRESET);
			return;
		}
	}
}

/* A READ of the peer's block completed: its receive too. */
static void on_read(struct exs_conn *c, struct exs_op *op)
{
	uint32_t n = (uint32_t)op->done;

	op->reading = false;
	c->reads_out--;
	if ((c->blk[0].flags & EXS_WIRE_PST_NOTIFY) &&
	    post_ctl(c, (struct exs_wire_msg){ .type = EXS_WIRE_READ_DONE, .len = n }, -1)) {
		exs_conn_break(c, ECONNRESET);
		return;
	}
	op_complete(c, op, 0, n, 0);
	if (c->pst[EXS_PST_PEER_SEND] == EXS_PST_ENDING && !c->rd_left && !c->reads_out)
		finish_peer_send(c);
	else
		issue_reads(c);
}

/* exs_send/exs_recv with EXS_PERSISTENT: only on SOCK_SEQPACKET, only one
 * per direction (ours or the peer's), and only when nothing else of that
 * direction is under way. The block gets an MR of its own (remote read for
 * a send, remote write for a receive) that lives as long as the op. */
static int persist_start(struct exs_conn *c, const struct exs_op *t)
{
	bool recv = t->kind == EXS_EVT_RECV;
	int own = recv ? EXS_PST_OWN_RECV : EXS_PST_OWN_SEND;
	int other = recv ? EXS_PST_PEER_SEND : EXS_PST_PEER_RECV;
	struct exs_op *op;
	uint32_t i;
	int ret;

	if (!c->seq)
		return -EOPNOTSUPP;
	if (recv && c->rx != EXS_RX_OPEN)
		return -EPIPE;
	if (c->pst[own] != EXS_PST_NONE || c->pst[other] != EXS_PST_NONE)
		return -EBUSY;
	if (recv ? c->nrfree != c->alloc || c->pool_count : !sends_idle(c))
		return -EBUSY;
	i = recv ? c->rfree[c->nrfree - 1] : c->sfree[c->nsfree - 1];
	op = recv ? &c->rop[i] : &c->sop[i];
	*op = *t;
	op->has_mem = true; /* its MR is pmr */
	if ((ret = op_start(c, op))) {
		memset(op, 0, sizeof(*op));
		return ret;
	}
	op->pmr = exs_verbs_reg_mr(c->dev, op->buf, op->len,
				   recv ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE :
					  IBV_ACCESS_REMOTE_READ);
	if (!op->pmr) {
		ret = -(errno ? errno : ENOMEM);
		op_unstart(c, op);
		return ret;
	}
	ret = post_ctl(c, (struct exs_wire_msg){ .type = EXS_WIRE_PERSIST,
		.flags = recv ? EXS_WIRE_PST_RECV : (t->flags & EXS_READ_NOTIFY) ? EXS_WIRE_PST_NOTIFY : 0,
		.addr = (uintptr_t)op->buf, .rkey = op->pmr->rkey, .len = (uint32_t)op->len }, -1);
	if (ret) {
		ibv_dereg_mr(op->pmr);
		op->pmr = NULL;
		op_unstart(c, op);
		if (ret == -ENOBUFS)
			return -EBUSY;
		exs_conn_break(c, ECONNRESET);
		return -ECONNRESET;
	}
	if (recv) {
		c->nrfree--;
		c->rts_pending = false; /* the peer writes that send into the block */
	} else {
		c->nsfree--;
		c->ad_count = 0; /* the peer reads instead */
	}
	c->pst_op[recv] = i;
	c->pst_refused[recv] = false;
	set_pst(c, own, EXS_PST_ACTIVE);
	return 0;
}

/* exs_cancel or close of our persistent send or receive: the peer lets go
 * of the block (UNPERSIST_ACK) before the op ends. */
static int unpersist(struct exs_conn *c, bool recv)
{
	int ret = post_ctl(c, (struct exs_wire_msg){ .type = EXS_WIRE_UNPERSIST,
				 .flags = recv ? EXS_WIRE_PST_RECV : 0 }, -1);

	if (ret)
		return ret;
	set_pst(c, recv ? EXS_PST_OWN_RECV : EXS_PST_OWN_SEND, EXS_PST_ENDING);
	return 0;
}

void exs_conn_unpersist_all(struct exs_conn *c)
{
	if (c->link == EXS_LINK_RESET)
		return;
	if ((c->pst[EXS_PST_OWN_SEND] == EXS_PST_ACTIVE && unpersist(c, false)) ||
	    (c->pst[EXS_PST_OWN_RECV] == EXS_PST_ACTIVE && unpersist(c, true)))
		exs_conn_break(c, ECONNRESET);
}

/* The peer's PERSIST: its send's block for our receives to read, or its
 * receive's block for our sends to write. One that crossed our own for the
 * same direction is refused (both are). */
static void on_persist(struct exs_conn *c, const struct exs_wire_msg *m)
{
	bool recv = m->flags & EXS_WIRE_PST_RECV;
	uint32_t k;

	if (!c->seq || !m->len || (m->flags & ~(EXS_WIRE_PST_RECV | EXS_WIRE_PST_NOTIFY)) ||
	    (recv && (m->flags & EXS_WIRE_PST_NOTIFY)) ||
	    c->pst[recv ? EXS_PST_PEER_RECV : EXS_PST_PEER_SEND] != EXS_PST_NONE) {
		proto_error(c, "PERSIST out of place (flags, length)", m->flags, m->len);
		return;
	}
	if (c->pst[recv ? EXS_PST_OWN_SEND : EXS_PST_OWN_RECV] != EXS_PST_NONE) {
		if (post_ctl(c, (struct exs_wire_msg){ .type = EXS_WIRE_REFUSE,
				 .flags = recv ? EXS_WIRE_PST_RECV : 0 }, -1))
			exs_conn_break(c, ECONNRESET);
		return;
	}
	c->blk[recv] = *m;
	set_pst(c, recv ? EXS_PST_PEER_RECV : EXS_PST_PEER_SEND, EXS_PST_ACTIVE);
	if (recv) {
		match(c); /* waiting sends go into it */
		return;
	}
	/* the waiting receives are read; their adverts are void */
	c->rts_pending = false;
	c->rx_rsn = c->rx_msn - c->pool_count;
	c->rd_unacked = 0;
	for (k = 0; k < c->rf_count; k++)
		c->rop[c->rfifo[(c->rf_head + k) % c->alloc]].advertised = false;
	issue_reads(c);
}

/* The peer ends its persistent send or receive: answered once nothing of
 * ours touches its block; at once for one we refused. */
static void on_unpersist(struct exs_conn *c, uint16_t flags)
{
	bool recv = flags & EXS_WIRE_PST_RECV;

	if ((flags & ~EXS_WIRE_PST_RECV) ||
	    (!recv && c->pst[EXS_PST_PEER_SEND] == EXS_PST_ENDING)) {
		proto_error(c, "UNPERSIST out of place (flags, state)", flags,
			    c->pst[EXS_PST_PEER_SEND]);
		return;
	}
	if (recv || c->pst[EXS_PST_PEER_SEND] == EXS_PST_NONE) {
		/* our writes went before this ACK (RC order) */
		if (recv)
			set_pst(c, EXS_PST_PEER_RECV, EXS_PST_NONE);
		if (post_ctl(c, (struct exs_wire_msg){ .type = EXS_WIRE_UNPERSIST_ACK,
				 .flags = flags }, -1))
			exs_conn_break(c, ECONNRESET);
		return;
	}
	/* receives already waiting are still read; later ones wait for sends */
	set_pst(c, EXS_PST_PEER_SEND, EXS_PST_ENDING);
	c->rd_left = c->rf_count;
	if (!c->reads_out && !c->rd_left)
		finish_peer_send(c);
	else
		issue_reads(c);
}

/* UNPERSIST_ACK (the peer let go of our block: the op ends, ECANCELED), or
 * REFUSE (our PERSIST crossed the peer's: EBUSY, at once if we did not
 * cancel meanwhile, else with the ACK). */
static void on_unpersist_ack(struct exs_conn *c, uint16_t flags, bool refuse)
{
	bool recv = flags & EXS_WIRE_PST_RECV;
	int w = recv ? EXS_PST_OWN_RECV : EXS_PST_OWN_SEND;
	struct exs_op *op = recv ? &c->rop[c->pst_op[1]] : &c->sop[c->pst_op[0]];
	int err;

	if (c->pst[w] == EXS_PST_NONE && c->rx != EXS_RX_OPEN && recv)
		return; /* the peer's FIN ended it already */
	if ((flags & ~EXS_WIRE_PST_RECV) || c->pst[w] == EXS_PST_NONE ||
	    (!refuse && c->pst[w] != EXS_PST_ENDING)) {
		proto_error(c, "UNPERSIST_ACK or REFUSE unasked (flags, state)", flags, c->pst[w]);
		return;
	}
	if (refuse && c->pst[w] == EXS_PST_ENDING) {
		c->pst_refused[recv] = true;
		return;
	}
	err = refuse || c->pst_refused[recv] ? EBUSY : ECANCELED;
	set_pst(c, w, EXS_PST_NONE);
	c->pst_refused[recv] = false;
	if (recv)
		c->rx_rsn = c->rx_msn - c->pool_count;
	else
		c->rd_owed = 0;
	op_complete(c, op, err, 0, 0);
	if (!recv)
		maybe_fin(c);
}

/* EXS_READ_NOTIFY: the peer read our block; the send stays in effect. */
static void on_read_done(struct exs_conn *c, uint32_t len)
{
	struct exs_op *op = &c->sop[c->pst_op[0]];
	uint32_t half = c->credits / 2 ? c->credits / 2 : 1;
	exs_event_t ev;

	if (c->pst[EXS_PST_OWN_SEND] == EXS_PST_NONE || !(op->flags & EXS_READ_NOTIFY) ||
	    len > op->len || c->rd_owed >= c->credits) {
		proto_error(c, "READ_DONE unasked or too long (length, owed)", len, c->rd_owed);
		return;
	}
	op_event(c, op, 0, len, 0, &ev);
	exs_queue_post(op->q, &ev);
	c->bytes_sent += len;
	if (++c->rd_owed >= half) {
		if (post_ctl(c, (struct exs_wire_msg){ .type = EXS_WIRE_READ_CREDIT,
				 .len = c->rd_owed }, -1)) {
			exs_conn_break(c, ECONNRESET);
			return;
		}
		c->rd_owed = 0;
	}
}

static void on_message(struct exs_conn *c, const struct exs_wire_msg *m)
{
	if (m->version != EXS_WIRE_VERSION || c->await_hello != (m->type == EXS_WIRE_HELLO)) {
		proto_error(c, "version, or HELLO out of place (version, type)", m->version, m->type);
		return;
	}
	if (!got_credits(c, m->credits))
		return;
	switch (m->type) {
	case EXS_WIRE_ADVERT:
		if (c->pst[EXS_PST_OWN_SEND] != EXS_PST_NONE)
			break; /* part 6: the peer reads our block instead */
		if (c->seq)
			drop_stale_adverts(c);
		/* STREAM: an advert made before our last chunk arrived there is
		 * stale (that chunk went into its receive); we only send chunks
		 * while we hold no advert, so one that is queued stays good.
		 * An open chunk goes now, as it would have without coalescing:
		 * the advert was made before it arrived. */
		if (uncork_or_break(c))
			return;
		if (c->sb_chunk && m->seq != c->e_tx)
			break;
		if (c->ad_count == c->alloc || !m->len || (m->flags & ADV_HELD)) {
			proto_error(c, "advert beyond the credits, empty or held (adverts, length)",
				    c->ad_count, m->len);
			return;
		}
		c->ads[(c->ad_head + c->ad_count) % c->alloc] = *m;
		c->ad_count++;
		match(c);
		break;
	case EXS_WIRE_DONE:
		complete_slot(c, m->slot, m->len, c->seq ? m->lost : 0);
		break;
	case EXS_WIRE_FIN:
		if (c->rx == EXS_RX_OPEN)
			set_rx(c, EXS_RX_EOF);
		else if (c->rx == EXS_RX_SHUT)
			set_rx(c, EXS_RX_SHUT_DONE);
		end_receives(c);
		break;
	case EXS_WIRE_MORE:
		if (!c->ad_count || c->ads[c->ad_head].slot != m->slot ||
		    !(c->ads[c->ad_head].flags & ADV_HELD)) {
			proto_error(c, "MORE for no held advert (adverts, slot)", c->ad_count, m->slot);
			return;
		}
		c->ads[c->ad_head].flags &= (uint16_t)~ADV_HELD;
		match(c);
		break;
	case EXS_WIRE_RDSHUT:
		peer_shut_rd(c);
		break;
	case EXS_WIRE_PING:
		if (post_ctl_type(c, EXS_WIRE_PONG))
			exs_conn_break(c, ECONNRESET);
		break;
	case EXS_WIRE_PONG:
		if (c->link == EXS_LINK_PROBING)
			set_link(c, EXS_LINK_UP);
		break;
	case EXS_WIRE_RDSHUT_ACK:
		if (c->rx != EXS_RX_SHUT && c->rx != EXS_RX_SHUT_DONE) {
			proto_error(c, "RDSHUT_ACK unasked (receive state, 0)", c->rx, 0);
			return;
		}
		set_rx(c, EXS_RX_SHUT_DONE);
		end_receives(c);
		break;
	case EXS_WIRE_ABORT:
		if (EXS_DEBUG_ON())
			exs_debug("fd %d: the peer aborted", c->fd);
		exs_conn_break(c, ECONNRESET);
		break;
	case EXS_WIRE_HELLO:
		if (on_hello(c))
			exs_conn_break(c, ECONNRESET);
		match(c); /* EAGER messages waited for it too */
		break;
	case EXS_WIRE_RTS:
		on_rts(c, m->seq);
		break;
	case EXS_WIRE_CREDIT:
		break;
	case EXS_WIRE_UNADVERT:
		on_unadvert(c, m->slot);
		break;
	case EXS_WIRE_UNADVERT_ACK:
		on_unadvert_ack(c, m->slot);
		break;
	case EXS_WIRE_PERSIST:
		on_persist(c, m);
		break;
	case EXS_WIRE_UNPERSIST:
		on_unpersist(c, m->flags);
		break;
	case EXS_WIRE_UNPERSIST_ACK:
	case EXS_WIRE_REFUSE:
		on_unpersist_ack(c, m->flags, m->type == EXS_WIRE_REFUSE);
		break;
	case EXS_WIRE_READ_DONE:
		on_read_done(c, m->len);
		break;
	case EXS_WIRE_READ_CREDIT:
		if (m->len > c->rd_unacked || !m->len) {
			proto_error(c, "READ_CREDIT beyond the READ_DONEs sent (credits, sent)", m->len,
				    c->rd_unacked);
			return;
		}
		c->rd_unacked -= m->len;
		issue_reads(c);
		break;
	default:
		proto_error(c, "unknown message type (type, 0)", m->type, 0);
	}
}

static void fin_completed(struct exs_conn *c)
{
	bool aborted = c->tx == EXS_TX_ABORT_SENT;

	if (c->tx == EXS_TX_FIN_SENT || aborted)
		set_tx(c, EXS_TX_DONE);
	if (aborted)
		abort_finish(c); /* what exs_conn_abort left to the ABORT */
}

static void on_wc(struct exs_conn *c, const struct ibv_wc *wc)
{
	uint32_t kind = WR_KIND(wc->wr_id), i = WR_IDX(wc->wr_id);
	struct exs_wire_msg m;
	uint16_t credits;
	bool eager;
	char *p;

	if (wc->status != IBV_WC_SUCCESS) {
		if (EXS_DEBUG_ON() && c->link != EXS_LINK_RESET)
			exs_debug("fd %d completion error: %s (wr kind %u, opcode %d, vendor %#x)",
				  c->fd, ibv_wc_status_str(wc->status), kind, wc->opcode,
				  wc->vendor_err);
		if (kind == WR_CTL && ctl_done(c, i) &&
		    (c->msg[i].type == EXS_WIRE_FIN || c->msg[i].type == EXS_WIRE_ABORT))
			fin_completed(c);
		exs_conn_break(c, ECONNRESET);
		return;
	}
	if (kind != WR_RECV)
		c->dq_done = WR_DQ(wc->wr_id); /* every data WR posted before it is done */
	switch (kind) {
	case WR_MARK:
		break;
	case WR_RECV:
		if (i >= c->nrecv || c->link == EXS_LINK_RESET)
			break;
		/* Repost before acting on it: what we send in answer lets the peer
		 * send again, and iWARP has no RNR retry to cover an empty queue
		 * (repost() holds a batch back, beyond what the peer may use). */
		p = c->rbuf + (size_t)i * c->rsz;
		eager = wc->opcode == IBV_WC_RECV && wc->byte_len >= sizeof(struct exs_wire_eager) &&
			wc->byte_len <= c->rsz && p[1] == EXS_WIRE_EAGER;
		if (eager) {
			memcpy(&credits, p + 2, sizeof(credits));
			on_eager(c, p, wc->byte_len);
		} else {
			memcpy(&m, p, sizeof(m));
		}
		if (repost(c, i)) {
			exs_conn_break(c, ECONNRESET);
			break;
		}
		if (eager)
			got_credits(c, credits);
		else if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM)
			complete_slot(c, ntohl(wc->imm_data), wc->byte_len, 0);
		else if (wc->byte_len == sizeof(m))
			on_message(c, &m);
		else
			proto_error(c, "message of the wrong size (bytes, opcode)", wc->byte_len,
				    wc->opcode);
		break;
	case WR_EAGER:
		if (i < c->alloc && c->sop[i].kind == EXS_EVT_SEND) {
			c->e_done = c->sop[i].e_mark;
			op_complete(c, &c->sop[i], 0, c->sop[i].len, 0);
		}
		match(c);
		break;
	case WR_EMARK:
		c->e_done = (uint16_t)i;
		match(c);
		break;
	case WR_WRITE:
		if (i < c->alloc && c->sop[i].kind == EXS_EVT_SEND)
			op_complete(c, &c->sop[i], 0,
				    c->sop[i].pwrite ? c->sop[i].done : c->sop[i].len, 0);
		break;
	case WR_READ:
		if (i < c->alloc && c->rop[i].kind == EXS_EVT_RECV && c->rop[i].reading)
			on_read(c, &c->rop[i]);
		break;
	case WR_CTL:
		if (!ctl_done(c, i))
			break;
		m = c->msg[i];
		if (c->ctl_op[i] >= 0 && c->sop[c->ctl_op[i]].kind == EXS_EVT_SEND)
			op_complete(c, &c->sop[c->ctl_op[i]], m.type == EXS_WIRE_DONE ? 0 : EPIPE,
				    m.type == EXS_WIRE_DONE ? c->sop[c->ctl_op[i]].len : 0, 0);
		if (m.type == EXS_WIRE_FIN || m.type == EXS_WIRE_ABORT)
			fin_completed(c);
		break;
	}
	if (c->dq_wait && c->link != EXS_LINK_RESET) { /* room came */
		c->dq_wait = false;
		match(c);
		issue_reads(c);
	}
}

/* ---- completions, from the CQs that a device's connections share */

/* connections with completions taken whose follow-up is not done yet
 * (exs_g.lock) */
static struct exs_conn *touched;

static void touch(struct exs_conn *c)
{
	if (c->touched)
		return;
	c->touched = true;
	c->touched_next = touched;
	touched = c;
}

static void untouch(struct exs_conn *c)
{
	struct exs_conn **p;

	if (!c->touched)
		return;
	for (p = &touched; *p != c; p = &(*p)->touched_next)
		;
	*p = c->touched_next;
	c->touched = false;
}

struct exs_conn *exs_conn_touched(void)
{
	struct exs_conn *c = touched;

	if (c) {
		touched = c->touched_next;
		c->touched = false;
	}
	return c;
}

/* What came while it was set up, in the order it came. */
static void unstash(struct exs_conn *c)
{
	uint32_t i, n = c->nstash;

	c->nstash = 0;
	for (i = 0; i < n; i++) {
		on_wc(c, &c->stash[i]);
		c->n_cqe++;
	}
}

static void dispatch(const struct ibv_wc *wc)
{
	struct exs_conn *c = exs_cq_id_get(WR_CONN(wc->wr_id));

	if (!c)
		return; /* a gone connection's last completions */
	touch(c);
	/* The peer may send as soon as its side is established, before exsd
	 * has told us the set-up that says how to read it (a stream-buffer
	 * chunk before sb_chunk is known was a protocol error and reset the
	 * new connection): what came waits until exs_conn_establish. At most
	 * one completion per WR posted: nrecv receives, nsend control sends. */
	if (c->link == EXS_LINK_SETUP) {
		uint32_t cap = c->nrecv + c->nsend;

		if (!c->stash && !(c->stash = calloc(cap, sizeof(*c->stash)))) {
			exs_conn_break(c, ENOMEM);
			return;
		}
		if (c->nstash == cap) {
			proto_error(c, "completions before set-up (count, status)", c->nstash,
				    wc->status);
			return;
		}
		c->stash[c->nstash++] = *wc;
		return;
	}
	if (c->nstash)
		unstash(c);
	on_wc(c, wc);
	c->n_cqe++;
}

void exs_conn_poll_cq(struct exs_scq *q)
{
	struct ibv_wc wc[16];
	int n, i;

	do {
		n = exs_cq_poll(q, 16, wc);
		for (i = 0; i < n; i++)
			dispatch(&wc[i]);
	} while (n == 16);
	if (n >= 0)
		exs_cq_drained(q); /* polled empty: no gone connection's are left */
}

void exs_conn_poll(struct exs_conn *c)
{
	touch(c); /* what it has to do may not wait for a completion */
	exs_conn_poll_cq(c->scq);
}

void exs_conn_poll_all(void)
{
	struct exs_scq *q;
	int i;

	/* a spare's builder may push a CQ in front meanwhile (cq.c) */
	for (i = 0; i < exs_g.ndevs; i++)
		for (q = __atomic_load_n(&exs_g.devs[i]->scqs, __ATOMIC_ACQUIRE); q; q = q->next)
			exs_conn_poll_cq(q);
}

bool exs_conn_arm_all(void)
{
	struct exs_scq *q;
	bool any = false;
	int i;

	for (i = 0; i < exs_g.ndevs; i++)
		for (q = __atomic_load_n(&exs_g.devs[i]->scqs, __ATOMIC_ACQUIRE); q; q = q->next)
			if (!q->armed) {
				exs_cq_arm(q);
				any = true;
			}
	return any;
}

/* What a connection's completions leave to do. */
void exs_conn_progress(struct exs_conn *c)
{
	if (c->link == EXS_LINK_SETUP)
		return;
	if (c->nstash)
		unstash(c);
	if (c->readvertise && c->link != EXS_LINK_RESET)
		advertise_waiting(c);
	maybe_credit(c);
	maybe_fin(c);
}

/* ---- exs_cancel (exs_cancel(3)) */

/* A send nothing of which has gone: it ends with ECANCELED. Anything
 * placed or handed to the device, or a SEQPACKET send whose RTS went (the
 * peer numbers its receives by it), is under way: EBUSY. */
static int cancel_send(struct exs_conn *c, struct exs_op *op)
{
	uint32_t oi = (uint32_t)(op - c->sop), k, kept = 0;

	if (op->flags & EXS_PERSISTENT) {
		if (c->pst[EXS_PST_OWN_SEND] != EXS_PST_ACTIVE)
			return -EALREADY;
		return unpersist(c, false);
	}
	if (op->done || op->rts)
		return -EBUSY;
	for (k = 0; k < c->sf_count; k++) {
		uint32_t i = c->sfifo[(c->sf_head + k) % c->alloc];

		if (i != oi)
			c->sfifo[(c->sf_head + kept++) % c->alloc] = i;
	}
	if (kept == c->sf_count)
		return -EBUSY; /* posted, its completion pending */
	c->sf_count = kept;
	op_complete(c, op, ECANCELED, 0, 0);
	return 0;
}

/* SEQPACKET: a quiet receive (not advertised) may go if no later one is
 * advertised: the later ones take its number and those after it, which
 * the peer never saw. */
static int cancel_seq_recv(struct exs_conn *c, struct exs_op *op)
{
	uint32_t k, slot = (uint32_t)(op - c->rop), at = c->rf_count;

	for (k = 0; k < c->rf_count; k++) {
		struct exs_op *o = &c->rop[c->rfifo[(c->rf_head + k) % c->alloc]];

		if (c->rfifo[(c->rf_head + k) % c->alloc] == slot)
			at = k;
		if (k >= at && o->advertised)
			return -EBUSY;
	}
	if (at == c->rf_count)
		return -EBUSY;
	for (k = at + 1; k < c->rf_count; k++)
		c->rop[c->rfifo[(c->rf_head + k) % c->alloc]].seq--;
	c->rx_rsn--;
	cancel_recv_now(c, op);
	return 0;
}

/* A receive while the peer's persistent send is in effect (part 6): one
 * whose READ is out is under way (EBUSY); a waiting one goes (they are not
 * numbered meanwhile). */
static int cancel_read_recv(struct exs_conn *c, struct exs_op *op)
{
	uint32_t k, slot = (uint32_t)(op - c->rop);

	if (op->reading)
		return -EBUSY;
	for (k = 0; k < c->rf_count && c->rfifo[(c->rf_head + k) % c->alloc] != slot; k++)
		;
	if (k == c->rf_count)
		return -EBUSY;
	if (c->pst[EXS_PST_PEER_SEND] == EXS_PST_ENDING && k < c->rd_left)
		c->rd_left--;
	cancel_recv_now(c, op);
	return 0;
}

static int cancel_recv(struct exs_conn *c, struct exs_op *op)
{
	if (op->cancelling)
		return -EALREADY;
	if (op->flags & EXS_PERSISTENT) {
		if (c->pst[EXS_PST_OWN_RECV] != EXS_PST_ACTIVE)
			return -EALREADY;
		return unpersist(c, true);
	}
	if (c->seq && c->pst[EXS_PST_PEER_SEND] != EXS_PST_NONE)
		return cancel_read_recv(c, op);
	if (c->seq)
		return cancel_seq_recv(c, op);
	if (!op->advertised) {
		cancel_recv_now(c, op);
		return 0;
	}
	op->cancelling = true;
	unadvertise_next(c);
	return 0;
}

/* The most telling of two results: one cancel done or started beats a
 * cancel already under way, which beats one under way by itself. */
static int cancel_rank(int ret)
{
	return ret == 0 ? 3 : ret == -EALREADY ? 2 : ret == -EBUSY ? 1 : 0;
}

int exs_conn_cancel(struct exs_conn *c, exs_ahandle_t ah, int what)
{
	int ret = -ENOENT, r;
	uint32_t i;

	if (c->link == EXS_LINK_RESET)
		return -ENOENT; /* everything started has ended */
	for (i = 0; i < c->alloc; i++) {
		r = -ENOENT;
		if ((what & EXS_CANCEL_SEND) && c->sop[i].kind == EXS_EVT_SEND && c->sop[i].ah == ah)
			r = cancel_send(c, &c->sop[i]);
		if (cancel_rank(r) > cancel_rank(ret))
			ret = r;
		r = -ENOENT;
		if ((what & EXS_CANCEL_RECV) && c->rop[i].kind == EXS_EVT_RECV && c->rop[i].ah == ah)
			r = cancel_recv(c, &c->rop[i]);
		if (cancel_rank(r) > cancel_rank(ret))
			ret = r;
	}
	match(c);    /* the next send may go now */
	maybe_fin(c); /* the last send waiting for a FIN ended */
	return ret;
}

/* ---- what the socket layer reads */

/* §7.6: the stream buffer really obtained, in bytes (0: none) */
uint32_t exs_conn_stream_buf(const struct exs_conn *c)
{
	return c->sb_chunk * c->credits;
}

bool exs_conn_wr_done(const struct exs_conn *c)
{
	return c->tx == EXS_TX_DONE;
}

bool exs_conn_rd_done(const struct exs_conn *c)
{
	return c->rx == EXS_RX_SHUT_DONE || c->rx == EXS_RX_EOF;
}

/* Broken before the peer's FIN (or before our SHUT_RD completed): a
 * receive gets ECONNRESET rather than EOF. */
bool exs_conn_reset_before_eof(const struct exs_conn *c)
{
	return c->link == EXS_LINK_RESET && !exs_conn_rd_done(c);
}

/* Nothing more will happen on it: the FIN or ABORT is done, or it broke
 * (an abort still waits for its ABORT to leave). */
bool exs_conn_finished(const struct exs_conn *c)
{
	/* a persistent receive ending (close) waits for the peer to let go
	 * of its buffer: deregistered under the peer's writes, the buffer
	 * would break the connection, and the receive end ECONNABORTED */
	if (c->link != EXS_LINK_RESET && c->pst[EXS_PST_OWN_RECV] == EXS_PST_ENDING)
		return false;
	return c->tx == EXS_TX_DONE || (c->link == EXS_LINK_RESET && c->tx != EXS_TX_ABORT_SENT);
}

/* exs_poll's POLLOUT: a send started now is taken, not refused with EBUSY,
 * EPIPE or ECONNRESET. */
bool exs_conn_send_ready(const struct exs_conn *c)
{
	return c->link != EXS_LINK_RESET && c->tx == EXS_TX_OPEN && c->nsfree &&
	       c->pst[EXS_PST_OWN_SEND] == EXS_PST_NONE &&
	       credits_in_use(c->alloc, c->nsfree) < (int)c->credits;
}

/* exs_poll's POLLIN: a receive started now completes without waiting for
 * the peer: a small message (or the peer's RTS for one) or bytes of the
 * stream buffer (§7.6) wait, or it ends at once with EOF or ECONNRESET.
 * Without a stream buffer a stream's data only ever lands in receives
 * already posted, so such a stream is readable only at its end. */
bool exs_conn_recv_ready(const struct exs_conn *c)
{
	return c->pool_count > 0 || (c->seq && c->rts_pending) || c->rx != EXS_RX_OPEN ||
	       c->link == EXS_LINK_RESET || c->pst[EXS_PST_PEER_SEND] == EXS_PST_ACTIVE;
}

void exs_conn_stats(const struct exs_conn *c, ExsCtl__SockStats *x)
{
	x->send_credits_used = c->alloc - c->nsfree;
	x->recv_credits_used = c->alloc - c->nrfree;
	x->peer_adverts = c->ad_count;
	x->sends_queued = c->sf_count;
	x->bytes_sent = c->bytes_sent;
	x->bytes_received = c->bytes_rcvd;
	x->sends = c->sends;
	x->receives = c->recvs;
	x->errors = c->errors;
}
