/*
 * The data path of one connection (proto/exs_wire.h): adverts, credits,
 * placement by RDMA WRITE_WITH_IMM (or WRITE + DONE on iWARP), FIN and
 * ABORT, and the completions that turn into user events. Every resource is
 * sized at connection set-up from the credit count, so nothing here
 * allocates per operation. Called with exs_g.lock held.
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "exs_int.h"

enum { WR_RECV = 1, WR_CTL = 2, WR_WRITE = 3 };
/* local only, on a held copy of the peer's ADVERT: partly filled for a
 * MSG_WAITALL receive, waiting for the peer's MORE before the next piece */
#define ADV_HELD 0x8000
#define WR_ID(kind, i) (((uint64_t)(kind) << 32) | (uint32_t)(i))

static uint32_t ctl_slot_msg(const struct exs_conn *c, uint32_t i)
{
	return c->nrecv + i;
}

int exs_conn_create(struct exs_sock *s, const char *devname, bool iwarp, uint32_t credits)
{
	struct exs_conn *c;
	struct ibv_qp_init_attr qa;
	int err = ENOMEM;
	uint32_t i;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->dev = exs_dev_get(devname, &err);
	if (!c->dev) {
		free(c);
		return -err;
	}
	err = ENOMEM;
	c->iwarp = iwarp;
	c->alloc = c->credits = credits;
	c->nrecv = 2 * credits + EXS_WIRE_SPARE;
	c->nsend = 3 * credits + EXS_WIRE_SPARE; /* adverts, DONEs, MOREs */
	c->msg = calloc(c->nrecv + c->nsend, sizeof(*c->msg));
	c->ctl_free = calloc(c->nsend, sizeof(uint32_t));
	c->ctl_op = calloc(c->nsend, sizeof(int32_t));
	c->held = calloc(c->nsend, sizeof(uint32_t));
	c->rop = calloc(credits, sizeof(*c->rop));
	c->rfree = calloc(credits, sizeof(uint32_t));
	c->sop = calloc(credits, sizeof(*c->sop));
	c->sfree = calloc(credits, sizeof(uint32_t));
	c->sfifo = calloc(credits, sizeof(uint32_t));
	c->ads = calloc(credits, sizeof(*c->ads));
	if (!c->msg || !c->ctl_free || !c->ctl_op || !c->held || !c->rop || !c->rfree || !c->sop ||
	    !c->sfree || !c->sfifo || !c->ads)
		goto fail;
	for (i = 0; i < c->nsend; i++)
		c->ctl_free[c->nctl_free++] = c->nsend - 1 - i;
	for (i = 0; i < credits; i++) {
		c->rfree[c->nrfree++] = credits - 1 - i;
		c->sfree[c->nsfree++] = credits - 1 - i;
	}
	c->msg_mr = ibv_reg_mr(c->dev->pd, c->msg, (c->nrecv + c->nsend) * sizeof(*c->msg),
			       IBV_ACCESS_LOCAL_WRITE);
	if (!c->msg_mr)
		goto fail_errno;
	c->cq = ibv_create_cq(c->dev->ctx, (int)(c->nrecv + c->nsend + credits + 8),
			      (void *)(uintptr_t)s->id, c->dev->chan, 0);
	if (!c->cq)
		goto fail_errno;
	if (ibv_req_notify_cq(c->cq, 0))
		goto fail_errno;
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = qa.recv_cq = c->cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = c->nsend + credits * c->dev->max_chunks + 4;
	qa.cap.max_recv_wr = c->nrecv;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	c->qp = ibv_create_qp(c->dev->pd, &qa);
	if (!c->qp)
		goto fail_errno;
	c->owner = s; /* and it is on exs_g.conns */
	c->next = exs_g.conns;
	if (c->next)
		c->next->prev = c;
	exs_g.conns = c;
	s->conn = c;
	return 0;
fail_errno:
	err = errno ? errno : EIO;
fail:
	s->conn = c;
	exs_conn_destroy(c);
	s->conn = NULL;
	return -err;
}

void exs_conn_destroy(struct exs_conn *c)
{
	uint32_t i;

	if (!c)
		return;
	if (c->probing)
		exs_g.nprobing--;
	if (c->owner) {
		if (c->prev)
			c->prev->next = c->next;
		else
			exs_g.conns = c->next;
		if (c->next)
			c->next->prev = c->prev;
	}
	for (i = 0; i < c->alloc && c->rop && c->sop; i++) {
		if (c->rop[i].tmp_mr)
			ibv_dereg_mr(c->rop[i].tmp_mr);
		if (c->sop[i].tmp_mr)
			ibv_dereg_mr(c->sop[i].tmp_mr);
	}
	if (c->qp)
		ibv_destroy_qp(c->qp);
	if (c->cq)
		ibv_destroy_cq(c->cq);
	if (c->msg_mr)
		ibv_dereg_mr(c->msg_mr);
	free(c->msg);
	free(c->ctl_free);
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

static int post_recv(struct exs_conn *c, uint32_t i)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)&c->msg[i],
		.length = sizeof(c->msg[i]),
		.lkey = c->msg_mr->lkey,
	};
	struct ibv_recv_wr wr = { .wr_id = WR_ID(WR_RECV, i), .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad;

	return -ibv_post_recv(c->qp, &wr, &bad);
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
		 * data in both directions, so both ends need remote write */
		attr.qp_access_flags |= IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	ret = ibv_modify_qp(c->qp, &attr, mask);
	if (ret)
		return -ret;
	if (attr.qp_state == IBV_QPS_INIT)
		for (i = 0; i < c->nrecv; i++)
			if ((ret = post_recv(c, i)))
				return ret;
	return 0;
}

/* SEND the control message in send slot i. */
static int post_slot(struct exs_conn *c, uint32_t i)
{
	struct exs_wire_msg *m = &c->msg[ctl_slot_msg(c, i)];
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad;

	sge = (struct ibv_sge){ .addr = (uintptr_t)m, .length = sizeof(*m), .lkey = c->msg_mr->lkey };
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = WR_ID(WR_CTL, i);
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	return -ibv_post_send(c->qp, &wr, &bad);
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
	i = c->ctl_free[--c->nctl_free];
	m = &c->msg[ctl_slot_msg(c, i)];
	*m = t;
	m->version = EXS_WIRE_VERSION;
	c->ctl_op[i] = op;
	if (c->await_hello) {
		c->held[c->nheld++] = i;
		return 0;
	}
	ret = post_slot(c, i);
	if (ret)
		c->ctl_free[c->nctl_free++] = i;
	return ret;
}

static int post_ctl_type(struct exs_conn *c, uint8_t type)
{
	return post_ctl(c, (struct exs_wire_msg){ .type = type }, -1);
}

/* Active iWARP, once established: the first message, before any other. */
int exs_conn_hello(struct exs_conn *c)
{
	return post_ctl_type(c, EXS_WIRE_HELLO);
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

void exs_op_complete(struct exs_sock *s, struct exs_op *op, int err, size_t len, size_t lost)
{
	exs_event_t ev;
	struct exs_conn *c = s->conn;
	bool is_send = op->kind == EXS_EVT_SEND;

	memset(&ev, 0, sizeof(ev));
	ev.exs_evt_errno = err;
	ev.exs_evt_socket = s->fd;
	ev.exs_evt_ahandle = op->ah;
	ev.exs_evt_type = op->kind;
	ev.exs_evt_union.exs_evt_xfer.exs_evt_buffer = op->buf;
	ev.exs_evt_union.exs_evt_xfer.exs_evt_mhandle = op->user_mh;
	ev.exs_evt_union.exs_evt_xfer.exs_evt_length = len;
	ev.exs_evt_union.exs_evt_xfer.exs_evt_amount_lost = lost;
	if (op->tmp_mr)
		ibv_dereg_mr(op->tmp_mr);
	if (op->mreg && op->mreg->refs)
		op->mreg->refs--;
	if (op->q) {
		if ((op->flags & EXS_UNSIGNALED) && !err)
			exs_queue_unref(op->q);
		else
			exs_queue_post(op->q, &ev);
	}
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
	else
		c->rfree[c->nrfree++] = (uint32_t)(op - c->rop);
	pthread_cond_broadcast(&exs_g.cond);
}

/*
 * Pair pending sends with the peer's adverts, oldest first. SEQPACKET: one
 * send fills one advert and the rest is reported lost. STREAM: a send
 * spills over as many adverts as it needs and loses nothing.
 */
static void match(struct exs_sock *s)
{
	struct exs_conn *c = s->conn;
	bool seq = s->type == SOCK_SEQPACKET;

	while (c->sf_count && c->ad_count && !c->reset && !(c->ads[c->ad_head].flags & ADV_HELD)) {
		uint32_t oi = c->sfifo[c->sf_head];
		struct exs_op *op = &c->sop[oi];
		struct exs_wire_msg *ad = &c->ads[c->ad_head];
		size_t left = op->len - op->done;
		uint32_t n = left < ad->len ? (uint32_t)left : ad->len;
		bool last = seq || op->done + n == op->len;
		/* the receiver learns the length from the IMM write's byte_len, so
		 * a piece above max_msg_sz (several writes) goes in DONE mode */
		bool imm = !c->iwarp && (!seq || n == op->len) && n <= c->dev->max_msg_sz;
		uint32_t off = 0, chunk;
		int ret = 0;

		do {
			struct ibv_sge sge;
			struct ibv_send_wr wr, *bad;

			chunk = n - off < c->dev->max_msg_sz ? n - off : c->dev->max_msg_sz;
			sge = (struct ibv_sge){ .addr = (uintptr_t)op->buf + op->done + off,
						.length = chunk, .lkey = op->lkey };
			memset(&wr, 0, sizeof(wr));
			wr.wr_id = WR_ID(WR_WRITE, oi);
			wr.sg_list = &sge;
			wr.num_sge = 1;
			wr.wr.rdma.remote_addr = ad->addr + off;
			wr.wr.rdma.rkey = ad->rkey;
			if (imm && off + chunk == n) {
				wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
				wr.imm_data = htonl(ad->slot);
				wr.send_flags = last ? IBV_SEND_SIGNALED : 0;
			} else {
				wr.opcode = IBV_WR_RDMA_WRITE;
			}
			ret = ibv_post_send(c->qp, &wr, &bad);
			off += chunk;
		} while (!ret && off < n);
		if (!ret && !imm)
			ret = -post_ctl(c, (struct exs_wire_msg){ .type = EXS_WIRE_DONE,
				.slot = ad->slot, .len = n, .lost = seq ? op->len - n : 0 },
				last ? (int32_t)oi : -1);
		op->done += n;
		if (!seq && (ad->flags & EXS_WIRE_ADV_WAITALL) && n < ad->len) {
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
		}
		if (ret) {
			exs_sock_conn_broken(s, ECONNRESET);
			return;
		}
	}
}

static int credits_in_use(uint32_t alloc, uint32_t nfree)
{
	return (int)(alloc - nfree);
}

int exs_conn_recv(struct exs_sock *s, struct exs_op *t)
{
	struct exs_conn *c = s->conn;
	struct exs_op *op;
	uint32_t slot;
	int ret;

	if (c->reset && !c->fin_rcvd)
		return -ECONNRESET;
	if (credits_in_use(c->alloc, c->nrfree) >= (int)c->credits || !c->nrfree)
		return -EBUSY;
	slot = c->rfree[--c->nrfree];
	op = &c->rop[slot];
	*op = *t;
	op->kind = EXS_EVT_RECV;
	if (c->fin_rcvd || c->rd_shut) {
		/* after the peer's FIN, or our SHUT_RD, every receive is an EOF
		 * (guide §5.2, §4.5) */
		exs_op_complete(s, op, 0, 0, 0);
		return 0;
	}
	ret = post_ctl(c, (struct exs_wire_msg){ .type = EXS_WIRE_ADVERT, .slot = slot,
			.addr = (uintptr_t)op->buf, .rkey = op->rkey, .len = (uint32_t)op->len,
			.flags = (s->type == SOCK_STREAM && (op->flags & MSG_WAITALL)) ?
				 EXS_WIRE_ADV_WAITALL : 0 }, -1);
	if (ret) {
		memset(op, 0, sizeof(*op));
		c->rfree[c->nrfree++] = slot;
		return ret;
	}
	return 0;
}

int exs_conn_send(struct exs_sock *s, struct exs_op *t)
{
	struct exs_conn *c = s->conn;
	uint32_t oi;

	if (c->reset)
		return -ECONNRESET;
	if (c->fin_posted || c->wr_shut || c->peer_rd_shut)
		return -EPIPE;
	if (t->len > (size_t)c->dev->max_msg_sz * c->dev->max_chunks)
		return -EMSGSIZE;
	if (credits_in_use(c->alloc, c->nsfree) >= (int)c->credits || !c->nsfree)
		return -EBUSY;
	oi = c->sfree[--c->nsfree];
	c->sop[oi] = *t;
	c->sop[oi].kind = EXS_EVT_SEND;
	c->sfifo[(c->sf_head + c->sf_count) % c->alloc] = oi;
	c->sf_count++;
	match(s);
	return 0;
}

bool exs_conn_sends_idle(const struct exs_conn *c)
{
	return c->nsfree == c->alloc;
}

int exs_conn_post_fin(struct exs_sock *s)
{
	struct exs_conn *c = s->conn;
	int ret;

	if (c->fin_posted)
		return 0;
	ret = post_ctl_type(c, EXS_WIRE_FIN);
	if (!ret)
		c->fin_posted = true;
	return ret;
}

void exs_conn_fail_all(struct exs_sock *s, int err)
{
	struct exs_conn *c = s->conn;
	uint32_t i;

	c->sf_count = 0;
	c->ad_count = 0;
	for (i = 0; i < c->alloc; i++) {
		if (c->sop[i].kind)
			exs_op_complete(s, &c->sop[i], err, 0, 0);
		if (c->rop[i].kind)
			exs_op_complete(s, &c->rop[i], err, 0, 0);
	}
}

void exs_conn_abort(struct exs_sock *s)
{
	struct exs_conn *c = s->conn;

	exs_conn_fail_all(s, ECONNABORTED);
	c->aborting = true;
	/* before the peer's HELLO nothing went out: no ABORT to wait for */
	if (!c->reset && !c->fin_posted && !c->await_hello && !post_ctl_type(c, EXS_WIRE_ABORT))
		c->fin_posted = true;
	else
		c->fin_done = true;
	c->reset = true; /* take nothing more from the peer */
}

/* Data arrived for receive `slot`. A STREAM receive with MSG_WAITALL
 * completes only when full (or at EOF); any other at once. */
static void complete_slot(struct exs_sock *s, uint32_t slot, size_t len, size_t lost)
{
	struct exs_conn *c = s->conn;
	struct exs_op *op;

	if (slot >= c->alloc || c->rop[slot].kind != EXS_EVT_RECV ||
	    len > c->rop[slot].len - c->rop[slot].done) {
		exs_sock_conn_broken(s, EPROTO);
		return;
	}
	op = &c->rop[slot];
	op->done += len;
	if (s->type == SOCK_STREAM && (op->flags & MSG_WAITALL) && op->done < op->len) {
		if (post_ctl(c, (struct exs_wire_msg){ .type = EXS_WIRE_MORE, .slot = slot }, -1))
			exs_sock_conn_broken(s, ECONNRESET);
		return;
	}
	exs_op_complete(s, op, 0, op->done, lost);
}

/* No more data will come for the receives still waiting: they complete
 * with what they hold, which is an EOF (length 0, errno 0) if nothing. */
static void end_receives(struct exs_sock *s)
{
	struct exs_conn *c = s->conn;
	uint32_t i;

	for (i = 0; i < c->alloc; i++)
		if (c->rop[i].kind)
			exs_op_complete(s, &c->rop[i], 0, c->rop[i].done, 0);
}

/* SHUT_RD (guide §4.5): take no new data; the peer fails its sends with
 * EPIPE and answers RDSHUT_ACK, after which it writes nothing more. */
int exs_conn_shut_rd(struct exs_sock *s)
{
	struct exs_conn *c = s->conn;

	c->rd_shut = true;
	if (c->fin_rcvd || c->reset) {
		c->rd_shut_acked = true;
		return 0;
	}
	return post_ctl_type(c, EXS_WIRE_RDSHUT);
}

/* Ask the peer whether it is still there (see on_conn_error in sock.c). */
void exs_conn_probe(struct exs_sock *s)
{
	struct exs_conn *c = s->conn;

	if (c->probing)
		return;
	if (post_ctl_type(c, EXS_WIRE_PING)) {
		exs_sock_conn_broken(s, ECONNRESET);
		return;
	}
	c->probing = true;
	c->probe_deadline_ms = exs_now_ms() + EXS_PROBE_MS;
	exs_g.nprobing++;
	exs_progress_wake();
}

void exs_conn_probe_tick(struct exs_sock *s, uint64_t now)
{
	struct exs_conn *c = s->conn;

	if (!c->probing || (now < c->probe_deadline_ms && !c->reset))
		return;
	c->probing = false;
	exs_g.nprobing--;
	exs_sock_conn_broken(s, ECONNRESET); /* no answer: the peer is gone */
}

/* The peer shut its read side: what we have not placed never will be. */
static void peer_shut_rd(struct exs_sock *s)
{
	struct exs_conn *c = s->conn;

	c->peer_rd_shut = true;
	c->ad_count = 0;
	while (c->sf_count) {
		exs_op_complete(s, &c->sop[c->sfifo[c->sf_head]], EPIPE, 0, 0);
		c->sf_head = (c->sf_head + 1) % c->alloc;
		c->sf_count--;
	}
	if (post_ctl_type(c, EXS_WIRE_RDSHUT_ACK))
		exs_sock_conn_broken(s, ECONNRESET);
}

static void on_message(struct exs_sock *s, const struct exs_wire_msg *m)
{
	struct exs_conn *c = s->conn;

	if (m->version != EXS_WIRE_VERSION || c->await_hello != (m->type == EXS_WIRE_HELLO)) {
		exs_sock_conn_broken(s, EPROTO);
		return;
	}
	switch (m->type) {
	case EXS_WIRE_ADVERT:
		if (c->ad_count == c->alloc || !m->len) {
			exs_sock_conn_broken(s, EPROTO);
			return;
		}
		c->ads[(c->ad_head + c->ad_count) % c->alloc] = *m;
		c->ad_count++;
		match(s);
		break;
	case EXS_WIRE_DONE:
		complete_slot(s, m->slot, m->len, s->type == SOCK_SEQPACKET ? m->lost : 0);
		break;
	case EXS_WIRE_FIN:
		c->fin_rcvd = true;
		end_receives(s);
		break;
	case EXS_WIRE_MORE:
		if (!c->ad_count || c->ads[c->ad_head].slot != m->slot ||
		    !(c->ads[c->ad_head].flags & ADV_HELD)) {
			exs_sock_conn_broken(s, EPROTO);
			return;
		}
		c->ads[c->ad_head].flags &= (uint16_t)~ADV_HELD;
		match(s);
		break;
	case EXS_WIRE_RDSHUT:
		peer_shut_rd(s);
		break;
	case EXS_WIRE_PING:
		if (post_ctl_type(c, EXS_WIRE_PONG))
			exs_sock_conn_broken(s, ECONNRESET);
		break;
	case EXS_WIRE_PONG:
		if (c->probing) {
			c->probing = false;
			exs_g.nprobing--;
		}
		break;
	case EXS_WIRE_RDSHUT_ACK:
		if (!c->rd_shut) {
			exs_sock_conn_broken(s, EPROTO);
			return;
		}
		c->rd_shut_acked = true;
		end_receives(s);
		break;
	case EXS_WIRE_ABORT:
		exs_sock_conn_broken(s, ECONNRESET);
		break;
	case EXS_WIRE_HELLO:
		if (on_hello(c))
			exs_sock_conn_broken(s, ECONNRESET);
		break;
	default:
		exs_sock_conn_broken(s, EPROTO);
	}
}

static void on_wc(struct exs_sock *s, const struct ibv_wc *wc)
{
	struct exs_conn *c = s->conn;
	uint32_t kind = (uint32_t)(wc->wr_id >> 32), i = (uint32_t)wc->wr_id;
	struct exs_wire_msg m;

	if (wc->status != IBV_WC_SUCCESS) {
		if (kind == WR_CTL && i < c->nsend) {
			c->ctl_free[c->nctl_free++] = i;
			if (c->msg[ctl_slot_msg(c, i)].type == EXS_WIRE_FIN ||
			    c->msg[ctl_slot_msg(c, i)].type == EXS_WIRE_ABORT)
				c->fin_done = true;
		}
		if (!c->reset)
			exs_sock_conn_broken(s, ECONNRESET);
		return;
	}
	switch (kind) {
	case WR_RECV:
		if (i >= c->nrecv || c->reset)
			break;
		/* Repost before acting on it: what we send in answer lets the peer
		 * send again, and iWARP has no RNR retry to cover an empty queue. */
		m = c->msg[i];
		if (post_recv(c, i)) {
			exs_sock_conn_broken(s, ECONNRESET);
			break;
		}
		if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM)
			complete_slot(s, ntohl(wc->imm_data), wc->byte_len, 0);
		else if (wc->byte_len == sizeof(m))
			on_message(s, &m);
		else
			exs_sock_conn_broken(s, EPROTO);
		break;
	case WR_WRITE:
		if (i < c->alloc && c->sop[i].kind == EXS_EVT_SEND)
			exs_op_complete(s, &c->sop[i], 0, c->sop[i].len, 0);
		break;
	case WR_CTL:
		if (i >= c->nsend)
			break;
		c->ctl_free[c->nctl_free++] = i;
		m = c->msg[ctl_slot_msg(c, i)];
		if (m.type == EXS_WIRE_DONE && c->ctl_op[i] >= 0 &&
		    c->sop[c->ctl_op[i]].kind == EXS_EVT_SEND)
			exs_op_complete(s, &c->sop[c->ctl_op[i]], 0, c->sop[c->ctl_op[i]].len, 0);
		if (m.type == EXS_WIRE_FIN || m.type == EXS_WIRE_ABORT)
			c->fin_done = true;
		break;
	}
}

/* Drain the connection's CQ. The caller re-armed notification first, and
 * calls exs_sock_maybe_finish_close() afterwards: nothing here frees `s`. */
void exs_conn_progress(struct exs_sock *s)
{
	struct ibv_wc wc[16];
	int n, i;

	while (s->conn && (n = ibv_poll_cq(s->conn->cq, 16, wc)) > 0)
		for (i = 0; i < n && s->conn; i++)
			on_wc(s, &wc[i]);
}
