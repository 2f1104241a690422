/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * libFuzzer target: everything a remote peer can send to libexs, against
 * libexs's real sources (api.c, sock.c, conn.c, verbs.c, ...) on the fake
 * verbs device of fake_verbs.c, with no exsd: the harness builds each
 * connection as broker.c does once exsd has brokered it (exs_conn_create,
 * the QP's INIT/RTR/RTS, exs_conn_establish with set-up values of the
 * input's choice: what the peer's private data made exsd negotiate).
 *
 * The input is a header (socket type, iWARP, passive, offered and
 * negotiated credits, sp_max, stream_buf) and then a script, one op byte
 * and its fields each, interleaving the application (exs_recv, exs_send
 * of various sizes and flags, exs_cancel, exs_shutdown, exs_close,
 * exs_qdequeue) with the peer: taking what libexs posted (in order),
 * wire messages of every type with any fields (ADVERT, DONE, FIN, ABORT,
 * RDSHUT, MORE, PING, HELLO, EAGER, RTS, CREDIT, UNADVERT, ..., any
 * version), raw SENDs of any length, RDMA writes into libexs's adverts or
 * anywhere with any immediate, a transport failure, exsd's word that the
 * CM connection dropped, and the clock.
 *
 * Checked (abort() on a violation, for libFuzzer to report), besides
 * ASan/UBSan/LeakSanitizer and the fake's own checks (fake_verbs.c):
 *   - every operation the application started completes exactly once, with
 *     an errno a peer may cause (ECONNRESET, ECONNABORTED, EPIPE, ...) and
 *     no more bytes than asked: once the input is over the socket is
 *     closed and, the clock run forward, gone with every event posted;
 *   - libexs writes only into a window the peer advertised and has not
 *     seen acknowledged (DONE, WRITE_WITH_IMM, UNADVERT_ACK), and nothing
 *     after its FIN, ABORT or RDSHUT_ACK; every SEND it makes is a whole
 *     wire message of the current version or an EAGER;
 *   - nothing of the connection is left in the fake device, and a fresh
 *     connection then does a clean round trip (a receive filled by a
 *     WRITE_WITH_IMM, a send placed into the peer's advert, FIN both ways).
 */
#include <arpa/inet.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exs_int.h"
#include "fake_verbs.h"
#include "fuzz_input.h"

#define MAX_OPS 64
#define MAX_STEPS 256
#define NADS 32
#define NWIN (MAX_STEPS + 1) /* each step sends one advert at most: never full */

/* FUZZ_PEER_TRACE set: each step is written to stderr (to read a finding) */
static bool trace;

#define TRACE(...) (trace ? (void)fprintf(stderr, "fuzz_peer: " __VA_ARGS__) : (void)0)

static __attribute__((noreturn)) void fail(const char *what)
{
	fprintf(stderr, "fuzz_peer: %s\n", what);
	abort();
}

/* ---- the peer's view of one connection */

struct win {
	uint64_t addr;
	uint32_t len, rkey, used;
	uint32_t at; /* the peer's messages sent before it */
	uint16_t slot;
	bool waitall, live;
};

struct peer {
	int fd;
	struct exs_wire_msg ads[NADS]; /* libexs's adverts, newest last */
	unsigned nads;
	struct win win[NWIN]; /* the peer's own adverts */
	unsigned nwin;
	uint32_t nmsg; /* messages the peer sent */
	struct { /* the peer's UNADVERTs not yet answered, oldest first */
		uint16_t slot;
		uint32_t at;
	} unadv[NWIN];
	unsigned nunadv;
	bool over;	 /* libexs sent FIN, ABORT or RDSHUT_ACK: no more writes */
	uint32_t chunks; /* EAGERs from libexs */
	uint32_t sends;	 /* SENDs from libexs */
};

/* libexs says it placed n bytes in the peer's advert `slot` (IMM or
 * DONE): the oldest live window of that slot (libexs takes adverts in
 * order) is used up, or for a WAITALL one when it is full. An advert
 * libexs dropped (a stale one) may take the blame instead: that only
 * leaves the right window open, lenient, never a false alarm. */
static void win_close(struct peer *p, uint16_t slot, uint32_t n)
{
	for (unsigned i = 0; i < p->nwin; i++) {
		struct win *w = &p->win[i];

		if (!w->live || w->slot != slot)
			continue;
		w->used += n < w->len - w->used ? n : w->len - w->used;
		if (!w->waitall || w->used == w->len)
			w->live = false;
		return;
	}
}

static void win_open(struct peer *p, const struct exs_wire_msg *m)
{
	struct win *w;

	if (p->nwin == NWIN)
		fail("the harness's window list is full");
	w = &p->win[p->nwin++];
	*w = (struct win){ .addr = m->addr, .len = m->len, .rkey = m->rkey, .at = p->nmsg,
			   .slot = m->slot, .waitall = m->flags & EXS_WIRE_ADV_WAITALL, .live = true };
}

/* The peer sends an UNADVERT for `slot`. */
static void unadv_note(struct peer *p, uint16_t slot)
{
	if (p->nunadv == NWIN)
		return;
	p->unadv[p->nunadv].slot = slot;
	p->unadv[p->nunadv++].at = p->nmsg;
}

static bool in_window(const struct peer *p, const struct fv_wr *wr)
{
	for (unsigned i = 0; i < p->nwin; i++) {
		const struct win *w = &p->win[i];

		if (w->live && w->rkey == wr->rkey && wr->raddr >= w->addr &&
		    wr->len <= w->len && wr->raddr - w->addr <= w->len - wr->len)
			return true;
	}
	return false;
}

/* What libexs posted reaches the peer (fake_verbs.c's fv_take). */
static int peer_take(void *arg, const struct fv_wr *wr)
{
	struct peer *p = arg;
	struct exs_wire_msg m;

	TRACE("  WR opcode %d, %u bytes, at %#" PRIx64 " rkey %#x imm %#x\n", wr->opcode, wr->len,
	      wr->raddr, wr->rkey, wr->imm);
	if (wr->opcode != IBV_WR_SEND) {
		if (p->over)
			fail("an RDMA write after FIN, ABORT or RDSHUT_ACK");
		if (!in_window(p, wr))
			fail("an RDMA write outside every window the peer advertised");
		if (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
			win_close(p, (uint16_t)ntohl(wr->imm), wr->len);
		return 0;
	}
	p->sends++;
	if (wr->len >= sizeof(struct exs_wire_eager) && wr->data[1] == EXS_WIRE_EAGER) {
		if (wr->data[0] != EXS_WIRE_VERSION)
			fail("an EAGER of another wire version");
		p->chunks++;
		return 0;
	}
	if (wr->len != sizeof(m))
		fail("a SEND that is neither a wire message nor an EAGER");
	memcpy(&m, wr->data, sizeof(m));
	TRACE("  libexs sent type %u slot %u len %u seq %u\n", m.type, m.slot, m.len, m.seq);
	if (m.version != EXS_WIRE_VERSION || !m.type || m.type > EXS_WIRE_READ_CREDIT)
		fail("a wire message of another version or an unknown type");
	switch (m.type) {
	case EXS_WIRE_ADVERT:
		if (p->nads == NADS) {
			memmove(p->ads, p->ads + 1, (NADS - 1) * sizeof(m));
			p->nads--;
		}
		p->ads[p->nads++] = m;
		break;
	case EXS_WIRE_DONE:
		if (p->over)
			fail("a DONE after FIN, ABORT or RDSHUT_ACK");
		win_close(p, m.slot, m.len);
		break;
	case EXS_WIRE_UNADVERT_ACK:
		/* libexs answers every UNADVERT in order, even one for no
		 * advert: the ACK ends a window only if it came before its
		 * UNADVERT */
		for (unsigned i = 0; i < p->nunadv; i++) {
			if (p->unadv[i].slot != m.slot)
				continue;
			for (unsigned j = 0; j < p->nwin; j++)
				if (p->win[j].live && p->win[j].slot == m.slot &&
				    p->win[j].at < p->unadv[i].at) {
					p->win[j].live = false;
					break;
				}
			memmove(&p->unadv[i], &p->unadv[i + 1],
				(p->nunadv - i - 1) * sizeof(p->unadv[0]));
			p->nunadv--;
			break;
		}
		break;
	case EXS_WIRE_FIN:
	case EXS_WIRE_ABORT:
	case EXS_WIRE_RDSHUT_ACK:
		p->over = true;
		break;
	default:
		break;
	}
	return 0;
}

/* ---- the application's operations */

struct app_op {
	int kind; /* EXS_EVT_*; 0: free */
	int fd;
	bool done;
	char *buf;
	size_t len;
};

static struct app_op ops[MAX_OPS + 1]; /* the last: finish()'s close */
static unsigned nops, op_cap;
static exs_qhandle_t qh = EXS_QHANDLE_INVALID;

static int start_op(int kind, int fd, size_t len)
{
	struct app_op *o;

	if (nops >= op_cap)
		return -1;
	o = &ops[nops];
	*o = (struct app_op){ .kind = kind, .fd = fd, .len = len };
	if (len && !(o->buf = malloc(len)))
		fail("out of memory");
	if (kind == EXS_EVT_SEND)
		for (size_t i = 0; i < len; i++)
			o->buf[i] = (char)(i * 7 + 3);
	return (int)nops++;
}

static exs_ahandle_t ah_of(int i)
{
	return (exs_ahandle_t)(uintptr_t)(i + 1);
}

/* The call refused op i: it will have no event. */
static void op_refused(int i)
{
	free(ops[i].buf);
	ops[i].buf = NULL;
	ops[i].done = true;
}

static bool peer_errno(int e)
{
	return !e || e == ECONNRESET || e == ECONNABORTED || e == ECANCELED || e == EPIPE ||
	       e == EPROTO || e == EMSGSIZE;
}

static void check_event(const exs_event_t *ev)
{
	uintptr_t a = (uintptr_t)ev->exs_evt_ahandle;
	struct app_op *o;

	if (!a || a > nops)
		fail("an event for no operation started");
	o = &ops[a - 1];
	if (o->done)
		fail("an operation completed twice");
	if (o->kind != ev->exs_evt_type || o->fd != ev->exs_evt_socket)
		fail("an event of the wrong type or socket");
	if (!peer_errno(ev->exs_evt_errno)) {
		fprintf(stderr, "errno %d\n", ev->exs_evt_errno);
		fail("an errno a peer should not cause");
	}
	if ((o->kind == EXS_EVT_RECV || o->kind == EXS_EVT_SEND) &&
	    (ev->exs_evt_union.exs_evt_xfer.exs_evt_length > o->len ||
	     ev->exs_evt_union.exs_evt_xfer.exs_evt_buffer != o->buf))
		fail("a transfer event with more bytes than asked or another buffer");
	o->done = true;
	free(o->buf);
	o->buf = NULL;
}

static int dequeue_all(void)
{
	struct timeval zero = { 0, 0 };
	exs_event_t ev[16];
	int n, total = 0;

	while ((n = exs_qdequeue(qh, ev, 16, &zero)) > 0) {
		for (int i = 0; i < n; i++)
			check_event(&ev[i]);
		total += n;
	}
	if (n < 0)
		fail("exs_qdequeue failed");
	return total;
}

/* Nothing left in the device but the shared CQs libexs keeps (the last of
 * each device stays for the next connection: cq.c), with no room taken. */
static bool device_clean(void)
{
	unsigned kept = 0;

	for (int i = 0; i < exs_g.ndevs; i++)
		for (struct exs_scq *q = exs_g.devs[i]->scqs; q; q = q->next) {
			if (q->nconn || q->used)
				return false;
			kept++;
		}
	return fv_live() == kept;
}

/* ---- the connection under the peer's hands */

static struct exs_conn *conn_of(int fd)
{
	struct exs_sock *s = exs_sock_get(fd);

	return s && s->conn && (s->state == EXS_S_CONNECTED || s->state == EXS_S_CLOSING) ?
		       s->conn : NULL;
}

/* every completion in the (shared) CQs, as the progress thread takes them */
static void pump_locked(void)
{
	exs_sock_progress_all();
}

static void pump(void)
{
	pthread_mutex_lock(&exs_g.lock);
	pump_locked();
	pthread_mutex_unlock(&exs_g.lock);
}

static void modify(struct exs_conn *c, int state)
{
	ExsCtl__QpAttr a = EXS_CTL__QP_ATTR__INIT;

	a.mask = IBV_QP_STATE;
	a.qp_state = (uint32_t)state;
	if (exs_conn_modify(c, &a))
		fail("exs_conn_modify on the fake device failed");
}

static bool sockets_left(void)
{
	bool any;

	pthread_mutex_lock(&exs_g.lock);
	any = exs_g.sock_list != NULL;
	pthread_mutex_unlock(&exs_g.lock);
	return any;
}

struct setup {
	int type;
	bool iwarp, passive;
	struct exs_conn_cfg cfg;
	uint32_t credits, sp_max, stream_buf; /* negotiated (the peer's doing) */
};

/* A socket connected as broker.c connects one; -1 if the set-up values
 * were refused (then the socket is closed again). */
static int conn_open(const struct setup *su)
{
	int fd = exs_socket(AF_INET, su->type, 0);
	struct exs_sock *s;
	int ret;

	if (fd < 0)
		fail("exs_socket failed");
	pthread_mutex_lock(&exs_g.lock);
	s = exs_sock_get(fd);
	ret = exs_conn_create(fd, su->type, "fake0", su->iwarp, &su->cfg, s->id, &s->conn);
	if (ret)
		fail("exs_conn_create on the fake device failed");
	modify(s->conn, IBV_QPS_INIT);
	modify(s->conn, IBV_QPS_RTR);
	modify(s->conn, IBV_QPS_RTS);
	if (su->iwarp && su->passive)
		exs_conn_await_hello(s->conn);
	ret = exs_conn_establish(s->conn, su->credits, su->sp_max, su->stream_buf, !su->passive);
	if (ret) {
		struct exs_conn *c = s->conn;

		if (ret != -EPROTO && ret != -ENOBUFS)
			fail("exs_conn_establish failed with an unexpected errno");
		s->conn = NULL;
		exs_conn_destroy(c);
		pthread_mutex_unlock(&exs_g.lock);
		if ((ret = start_op(EXS_EVT_CLOSE, fd, 0)) < 0 || exs_close(fd, 0, qh, ah_of(ret)))
			fail("exs_close of an unconnected socket failed");
		dequeue_all();
		if (!ops[ret].done || sockets_left())
			fail("an unconnected socket's close did not finish");
		return -1;
	}
	exs_sock_set_state(s, EXS_S_CONNECTED);
	exs_sock_progress(s);
	pthread_mutex_unlock(&exs_g.lock);
	return fd;
}

/* The peer takes everything libexs posted, and the library catches up. */
static void peer_drain(struct peer *p)
{
	pthread_mutex_lock(&exs_g.lock);
	for (int round = 0; round < 64; round++) {
		struct exs_conn *c;
		bool took = false;

		pump_locked();
		c = conn_of(p->fd);
		while (c && fv_take(c->qp, peer_take, p))
			took = true;
		if (!took)
			break;
	}
	pump_locked();
	pthread_mutex_unlock(&exs_g.lock);
}

/* ---- the script */

static uint8_t pattern[65536];

static void peer_msg(struct peer *p, struct exs_conn *c, const struct exs_wire_msg *m)
{
	TRACE("peer sends v%u type %u slot %u addr %#" PRIx64 " rkey %#x len %u seq %u flags %#x\n",
	      m->version, m->type, m->slot, m->addr, m->rkey, m->len, m->seq, m->flags);
	if (m->type == EXS_WIRE_ADVERT)
		win_open(p, m);
	if (m->type == EXS_WIRE_UNADVERT)
		unadv_note(p, m->slot);
	if (fv_peer_send(c->qp, m, sizeof(*m)))
		p->nmsg++;
}

static size_t xfer_len(struct in *in)
{
	uint8_t k = u8(in);

	switch (k & 3) {
	case 0:
		return k >> 2; /* 0..63 */
	case 1:
		return u16(in) % 5000;
	case 2:
		return 4090 + u8(in) % 16;
	default:
		return u16(in) + (size_t)(k >> 6) * 16384; /* up to ~113 KiB */
	}
}

static void step(struct in *in, struct peer *p)
{
	uint8_t op = u8(in);
	struct exs_conn *c;
	struct exs_wire_msg m;
	int i, ret;

	switch (op % 16) {
	case 0: /* exs_recv */
	case 1: { /* exs_send */
		int kind = op % 16 ? EXS_EVT_SEND : EXS_EVT_RECV;
		size_t len = xfer_len(in);
		int flags = u8(in) & 1 ? MSG_WAITALL : 0;

		if (kind == EXS_EVT_SEND)
			flags = 0;
		if ((i = start_op(kind, p->fd, len)) < 0)
			return;
		ret = kind == EXS_EVT_SEND ?
			      (int)exs_send(p->fd, ops[i].buf, len, flags, qh, ah_of(i),
					    EXS_MHANDLE_UNREGISTERED) :
			      (int)exs_recv(p->fd, ops[i].buf, len, flags, qh, ah_of(i),
					    EXS_MHANDLE_UNREGISTERED);
		TRACE("op %d: exs_%s(%zu, flags %#x) = %d\n", i,
		      kind == EXS_EVT_SEND ? "send" : "recv", len, flags, ret);
		if (ret < 0)
			op_refused(i);
		return;
	}
	case 2: /* exs_cancel */
		i = nops ? (int)(u8(in) % nops) : 0;
		ret = exs_cancel(p->fd, ah_of(i), u8(in) & 1 ? EXS_CANCEL_SEND : EXS_CANCEL_RECV);
		TRACE("exs_cancel(op %d) = %d\n", i, ret);
		return;
	case 3: { /* exs_shutdown */
		static const int how[] = { SHUT_RD, SHUT_WR, SHUT_RDWR };

		if ((i = start_op(EXS_EVT_SHUTDOWN, p->fd, 0)) < 0)
			return;
		if (exs_shutdown(p->fd, how[u8(in) % 3], 0, qh, ah_of(i)))
			op_refused(i);
		return;
	}
	case 4: /* exs_close */
		if ((i = start_op(EXS_EVT_CLOSE, p->fd, 0)) < 0)
			return;
		if (exs_close(p->fd, u8(in) & 1 ? EXS_DONTLINGER : 0, qh, ah_of(i)))
			op_refused(i);
		return;
	case 5:
		dequeue_all();
		return;
	case 6:
		pump();
		return;
	default:
		break;
	}
	/* the peer's turn, and the clock's */
	pthread_mutex_lock(&exs_g.lock);
	c = conn_of(p->fd);
	if (!c) {
		pthread_mutex_unlock(&exs_g.lock);
		return;
	}
	memset(&m, 0, sizeof(m));
	m.version = EXS_WIRE_VERSION;
	switch (op % 16) {
	case 7: /* take what libexs posted */
		for (int n = 1 + u8(in) % 8; n && fv_take(c->qp, peer_take, p); n--)
			TRACE("peer took a WR\n");
		break;
	case 8: { /* any wire message */
		uint8_t k = u8(in);

		m.type = u8(in) % 17;
		if (k & 1)
			m.version = u8(in);
		m.credits = (uint16_t)(k & 2 ? u16(in) : 0);
		m.flags = (uint16_t)(k & 4 ? u16(in) : 0);
		m.slot = (uint16_t)(k & 8 ? u16(in) : u8(in) % 8);
		if (k & 16) {
			m.addr = u32(in);
			m.addr |= (uint64_t)u32(in) << 32;
		} else {
			m.addr = (uintptr_t)fv_peer_mem + u16(in) % sizeof(fv_peer_mem);
		}
		m.rkey = k & 32 ? u32(in) : FV_PEER_RKEY;
		m.len = k & 64 ? u32(in) : u16(in);
		m.lost = k & 128 ? u32(in) : 0;
		m.seq = u8(in) & 1 ? u32(in) : u8(in);
		peer_msg(p, c, &m);
		break;
	}
	case 9: { /* an advert the peer can honour */
		uint32_t off = u16(in) % sizeof(fv_peer_mem);

		m.type = EXS_WIRE_ADVERT;
		m.slot = u8(in) % 8;
		m.addr = (uintptr_t)fv_peer_mem + off;
		m.rkey = FV_PEER_RKEY;
		m.len = 1 + u16(in) % (uint32_t)(sizeof(fv_peer_mem) - off);
		m.flags = u8(in) & 1 ? EXS_WIRE_ADV_WAITALL : 0;
		/* SEQPACKET: the receive's number; STREAM: the chunks taken */
		m.seq = c->seq ? u8(in) % 16 : p->chunks + u8(in) % 3 - 1;
		peer_msg(p, c, &m);
		break;
	}
	case 10: { /* EAGER */
		uint8_t buf[sizeof(struct exs_wire_eager) + 4200];
		struct exs_wire_eager e = { .version = EXS_WIRE_VERSION, .type = EXS_WIRE_EAGER };
		uint32_t len = u16(in) % 4200;

		e.credits = (uint16_t)(u8(in) % 4);
		e.seq = u8(in) & 1 ? u32(in) : u8(in) % 16;
		memcpy(buf, &e, sizeof(e));
		memcpy(buf + sizeof(e), pattern, len);
		fv_peer_send(c->qp, buf, (uint32_t)sizeof(e) + len);
		break;
	}
	case 11: { /* an RDMA write into one of libexs's adverts (or near it) */
		uint8_t k = u8(in);
		struct exs_wire_msg ad = { 0 };
		uint32_t len, rkey, imm;
		uint64_t addr;

		if (p->nads)
			ad = p->ads[p->nads - 1 - u8(in) % p->nads];
		len = k & 1 ? u32(in) % (sizeof(pattern) + 1) : ad.len;
		addr = ad.addr + (k & 2 ? (uint64_t)(int8_t)u8(in) : 0);
		rkey = k & 4 ? u32(in) : ad.rkey;
		imm = k & 16 ? u32(in) : htonl(ad.slot);
		if (len > sizeof(pattern))
			len = sizeof(pattern);
		TRACE("peer writes %u bytes at %#" PRIx64 " rkey %#x%s imm %#x\n", len, addr, rkey,
		      k & 8 ? "" : " with", imm);
		fv_peer_write(c->qp, addr, rkey, pattern, len, !(k & 8), imm);
		if (k & 8) { /* DONE mode */
			m.type = EXS_WIRE_DONE;
			m.slot = ad.slot;
			m.len = k & 32 ? u32(in) : len;
			m.lost = k & 64 ? u32(in) : 0;
			peer_msg(p, c, &m);
		}
		break;
	}
	case 12: { /* a SEND of any bytes */
		uint8_t buf[64];
		uint32_t len = u8(in) % sizeof(buf);

		for (uint32_t j = 0; j < len; j++)
			buf[j] = u8(in);
		memcpy(&m, buf, sizeof(m));
		if (len == sizeof(m) && m.type == EXS_WIRE_ADVERT)
			win_open(p, &m); /* an advert all the same */
		if (len == sizeof(m) && m.type == EXS_WIRE_UNADVERT)
			unadv_note(p, m.slot);
		TRACE("peer sends %u raw bytes\n", len);
		if (fv_peer_send(c->qp, buf, len))
			p->nmsg++;
		break;
	}
	case 13: /* the transport gives up */
		fv_qp_fail(c->qp, u8(in) & 1 ? IBV_WC_RETRY_EXC_ERR : IBV_WC_REM_ACCESS_ERR);
		break;
	case 14: /* exsd: the CM connection is gone */
		exs_conn_cm_lost(c, (enum exs_cm_loss)(u8(in) % 3));
		break;
	case 15: /* the clock */
		exs_sock_tick(exs_now_ms() + (uint64_t)u16(in) * 10);
		break;
	}
	pthread_mutex_unlock(&exs_g.lock);
}

/* The input is over: close, let the clock run out, and every operation
 * must have ended. */
static void finish(struct peer *p)
{
	int i, round;

	op_cap = MAX_OPS + 1;
	if ((i = start_op(EXS_EVT_CLOSE, p->fd, 0)) >= 0 &&
	    exs_close(p->fd, 0, qh, ah_of(i)))
		op_refused(i); /* closed already */
	for (round = 0; round < 8 && sockets_left(); round++) {
		peer_drain(p);
		pthread_mutex_lock(&exs_g.lock);
		exs_sock_tick(exs_now_ms() + 3600 * 1000ull * (uint64_t)(round + 1));
		pthread_mutex_unlock(&exs_g.lock);
		dequeue_all();
	}
	if (sockets_left())
		fail("a socket still there after its close and an hour of ticks");
	dequeue_all();
	for (unsigned k = 0; k < nops; k++)
		if (!ops[k].done)
			fail("an operation that never completed");
	if (!device_clean())
		fail("QPs, CQs or memory regions left in the device");
}

/* A fresh connection still does a clean round trip. */
static void round_trip(void)
{
	struct setup su = { .type = SOCK_STREAM, .cfg = { .credits = 4, .inline_max = -1 },
			    .credits = 4 };
	struct peer p = { 0 };
	struct exs_wire_msg adv = { .version = EXS_WIRE_VERSION, .type = EXS_WIRE_ADVERT,
				    .addr = (uintptr_t)fv_peer_mem, .rkey = FV_PEER_RKEY,
				    .len = 50 };
	struct exs_conn *c;
	int r, s;

	nops = 0;
	op_cap = MAX_OPS;
	p.fd = conn_open(&su);
	if (p.fd < 0)
		fail("a clean set-up refused");
	r = start_op(EXS_EVT_RECV, p.fd, 100);
	s = start_op(EXS_EVT_SEND, p.fd, 50);
	if (exs_recv(p.fd, ops[r].buf, 100, 0, qh, ah_of(r), EXS_MHANDLE_UNREGISTERED) < 0)
		fail("exs_recv on a fresh connection refused");
	peer_drain(&p);
	if (!p.nads)
		fail("no advert for a receive on a fresh connection");
	pthread_mutex_lock(&exs_g.lock);
	c = conn_of(p.fd);
	if (!c || !fv_peer_write(c->qp, p.ads[0].addr, p.ads[0].rkey, pattern, 100, true,
				 htonl(p.ads[0].slot)))
		fail("the peer cannot write into a fresh connection's advert");
	peer_msg(&p, c, &adv);
	pthread_mutex_unlock(&exs_g.lock);
	memset(fv_peer_mem, 0, 50);
	if (exs_send(p.fd, ops[s].buf, 50, 0, qh, ah_of(s), EXS_MHANDLE_UNREGISTERED) < 0)
		fail("exs_send on a fresh connection refused");
	peer_drain(&p);
	if (memcmp(ops[s].buf, fv_peer_mem, 50))
		fail("a fresh connection's send did not land in the peer's advert");
	pump();
	dequeue_all();
	if (!ops[r].done || !ops[s].done)
		fail("a fresh connection's round trip did not complete");
	/* FIN both ways: the close completes without the clock */
	pthread_mutex_lock(&exs_g.lock);
	c = conn_of(p.fd);
	peer_msg(&p, c, &(struct exs_wire_msg){ .version = EXS_WIRE_VERSION, .type = EXS_WIRE_FIN });
	pthread_mutex_unlock(&exs_g.lock);
	r = start_op(EXS_EVT_CLOSE, p.fd, 0);
	if (exs_close(p.fd, 0, qh, ah_of(r)))
		fail("exs_close of a fresh connection refused");
	peer_drain(&p);
	dequeue_all();
	if (!ops[r].done || sockets_left() || !device_clean())
		fail("a fresh connection's clean close did not finish");
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	trace = getenv("FUZZ_PEER_TRACE") != NULL;
	setenv("EXS_SOCKET", "/nonexistent/exsd.sock", 1); /* no exsd: built-in defaults */
	if (exs_init(EXS_VERSION1))
		fail("exs_init");
	qh = exs_qcreate(4 * MAX_OPS);
	if (qh == EXS_QHANDLE_INVALID)
		fail("exs_qcreate");
	for (size_t i = 0; i < sizeof(pattern); i++)
		pattern[i] = (uint8_t)(i * 13 + 1);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct in in = { data, size };
	struct peer p = { 0 };
	struct setup su = { 0 };
	uint8_t k = u8(&in);
	int steps;

	su.type = k & 1 ? SOCK_SEQPACKET : SOCK_STREAM;
	su.iwarp = k & 2;
	su.passive = k & 4;
	su.cfg.credits = 1 + u8(&in) % 16;
	su.cfg.inline_max = k & 8 ? -1 : u8(&in);
	su.cfg.sp_max = su.type == SOCK_SEQPACKET ? u16(&in) % 5000 : 0;
	su.cfg.stream_buf = su.type == SOCK_STREAM ? u16(&in) % 9000 : 0;
	/* what the peer's set-up made of it: below the offer, or anything */
	su.credits = k & 16 ? u8(&in) : 1 + u8(&in) % su.cfg.credits;
	su.sp_max = k & 32 ? u32(&in) : u16(&in) % 5000;
	su.stream_buf = k & 64 ? u32(&in) : u16(&in) % 9000;
	nops = 0;
	op_cap = MAX_OPS;
	p.fd = conn_open(&su);
	if (p.fd >= 0) {
		for (steps = 0; steps < MAX_STEPS && in.n; steps++)
			step(&in, &p);
		finish(&p);
	}
	round_trip();
	return 0;
}
