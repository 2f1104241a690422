/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* exs_sendmsg's gather and exs_recvmsg's scatter (libexs/conn.c, included
 * for its statics): how a piece of a send of many elements is cut into
 * RDMA writes of at most max_sge SGEs, and the copies between elements
 * and a linear buffer. No device: SGEs are only built, never posted. */
#include "check_main.h"
#include <stdlib.h>

#include "../../libexs/conn.c"

#define N 64

static char mem[N * 200];
static struct exs_seg seg[N];

/* 64 elements of odd sizes 1..195, 5 bytes apart */
static struct exs_op gathered(void)
{
	struct exs_op op = { .kind = EXS_EVT_SEND, .seg = seg, .nseg = N };
	size_t off = 0;

	for (int i = 0; i < N; i++) {
		seg[i] = (struct exs_seg){ .addr = mem + off, .len = (size_t)(i * 37 % 98) * 2 + 1,
					   .lkey = 100u + (uint32_t)i };
		off += seg[i].len + 5;
		op.len += seg[i].len;
	}
	return op;
}

/* cut [from, from + n) into writes of at most max SGEs and `cap` bytes,
 * as place() does: every byte once, in order, with its element's lkey */
static unsigned cut(const struct exs_op *op, size_t from, uint32_t n, uint32_t max, uint32_t cap)
{
	struct ibv_sge sge[EXS_IOV_MAX];
	size_t pos = from;
	uint32_t off = 0, got;
	unsigned writes = 0;

	while (off < n) {
		int k = op_sges(op, from + off, n - off < cap ? n - off : cap, sge, max, &got);
		uint32_t sum = 0;

		ck_assert_int_ge(k, 1);
		ck_assert_int_le(k, (int)max);
		ck_assert_uint_le(got, cap);
		for (int j = 0; j < k; j++) {
			size_t e = 0, at = pos;

			while (at >= seg[e].len) /* the element byte `pos` is in */
				at -= seg[e++].len;
			ck_assert_ptr_eq((char *)(uintptr_t)sge[j].addr, seg[e].addr + at);
			ck_assert_uint_eq(sge[j].lkey, seg[e].lkey);
			ck_assert_uint_le(sge[j].length, seg[e].len - at);
			pos += sge[j].length;
			sum += sge[j].length;
		}
		ck_assert_uint_eq(sum, got);
		off += got;
		writes++;
	}
	ck_assert_uint_eq(pos, from + n);
	return writes;
}

START_TEST(gather_splits_by_sge_limit)
{
	struct exs_op op = gathered();
	uint32_t len = (uint32_t)op.len;

	ck_assert_uint_eq(cut(&op, 0, len, 64, UINT32_MAX), 1);
	ck_assert_uint_eq(cut(&op, 0, len, 32, UINT32_MAX), 2);  /* rxe */
	ck_assert_uint_eq(cut(&op, 0, len, 6, UINT32_MAX), 11);  /* siw */
	ck_assert_uint_eq(cut(&op, 0, len, 1, UINT32_MAX), 64);
	/* a piece from inside an element to inside another (STREAM adverts) */
	cut(&op, 100, len - 250, 6, UINT32_MAX);
	/* byte limits too (max_msg_sz): within the bound the send queue has */
	unsigned w = cut(&op, 0, len, 6, 1000);
	ck_assert_uint_le(w, (len + 999) / 1000 + (N + 5) / 6 - 1 + 1);
}
END_TEST

START_TEST(one_buffer_is_one_sge)
{
	char buf[100];
	struct exs_op op = { .kind = EXS_EVT_SEND, .buf = buf, .lbuf = buf, .len = 100, .lkey = 7 };
	struct ibv_sge sge[1];
	uint32_t got;

	ck_assert_int_eq(op_sges(&op, 10, 50, sge, 1, &got), 1);
	ck_assert_uint_eq(got, 50);
	ck_assert_ptr_eq((char *)(uintptr_t)sge[0].addr, buf + 10);
	ck_assert_uint_eq(sge[0].lkey, 7);
}
END_TEST

START_TEST(copies_keep_order_and_gaps)
{
	struct exs_op op = gathered();
	char *lin = malloc(op.len), *back = malloc(op.len);

	ck_assert_ptr_nonnull(lin);
	ck_assert_ptr_nonnull(back);
	memset(mem, 0x5a, sizeof(mem));
	for (size_t i = 0; i < op.len; i++)
		lin[i] = (char)(i * 13 + i / 7);
	segs_copy(&op, 0, lin, op.len, true);
	for (int i = 0; i + 1 < N; i++)
		ck_assert_int_eq(seg[i].addr[seg[i].len], 0x5a);
	op_gather(&op, 0, back, op.len);
	ck_assert_mem_eq(back, lin, op.len);
	op_gather(&op, 777, back, 1000); /* a chunk from the middle */
	ck_assert_mem_eq(back, lin + 777, 1000);
	free(lin);
	free(back);
}
END_TEST

/* place() against a QP whose post_send only records: the writes a piece
 * of 64 elements takes, and its DONE (held: the connection waits for
 * HELLO, so control messages stay in their slots) */
static struct ibv_sge posted[256][EXS_IOV_MAX];
static struct ibv_send_wr wrs[256];
static int nwr;

static int record(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	(void)qp;
	(void)bad;
	ck_assert_int_lt(nwr, 256);
	wrs[nwr] = *wr;
	memcpy(posted[nwr], wr->sg_list, (size_t)wr->num_sge * sizeof(*wr->sg_list));
	nwr++;
	return 0;
}

static void placed(uint32_t max_sge, uint32_t max_msg_sz, bool iwarp, uint32_t adlen,
		   unsigned want_writes)
{
	static struct ibv_context ctx;
	struct ibv_qp qp = { .context = &ctx };
	struct exs_dev dev = { .max_msg_sz = max_msg_sz };
	struct exs_wire_msg msgs[4], ad = { .type = EXS_WIRE_ADVERT, .slot = 3, .addr = 1 << 20,
					    .rkey = 9, .len = adlen };
	int32_t ctl_op[4];
	uint32_t held[4], sfifo[1] = { 0 };
	struct exs_op op = gathered();
	struct exs_conn c = { .dev = &dev, .qp = &qp, .iwarp = iwarp, .max_sge = max_sge,
			      .alloc = 1, .credits = 1, .sop = &op, .sfifo = sfifo, .sf_count = 1,
			      .ads = &ad, .ad_count = 1, .nsend = 4, .nctl_free = 4, .msg = msgs,
			      .ctl_op = ctl_op, .held = held, .await_hello = true,
			      .link = EXS_LINK_UP };
	uint32_t n = adlen < op.len ? adlen : (uint32_t)op.len;
	uint64_t at = ad.addr;
	size_t pos = 0;

	ctx.ops.post_send = record;
	op.has_mem = true;
	nwr = 0;
	ck_assert_int_eq(place(&c), 0);
	ck_assert_int_eq(nwr, (int)want_writes);
	for (int w = 0; w < nwr; w++) {
		uint32_t bytes = 0;

		ck_assert_int_le(wrs[w].num_sge, (int)max_sge);
		ck_assert_uint_eq(wrs[w].wr.rdma.remote_addr, at);
		for (int j = 0; j < wrs[w].num_sge; j++)
			bytes += posted[w][j].length;
		ck_assert_uint_le(bytes, max_msg_sz);
		at += bytes;
		pos += bytes;
		/* one write alone may carry the length in its immediate */
		ck_assert_int_eq(wrs[w].opcode, nwr == 1 && !iwarp ? IBV_WR_RDMA_WRITE_WITH_IMM :
								     IBV_WR_RDMA_WRITE);
	}
	ck_assert_uint_eq(pos, n);
	ck_assert_uint_eq(op.done, n);
	if (nwr == 1 && !iwarp) {
		ck_assert_uint_eq(c.nheld, 0);
	} else {
		ck_assert_uint_eq(c.nheld, 1);
		ck_assert_int_eq(msgs[held[0]].type, EXS_WIRE_DONE);
		ck_assert_uint_eq(msgs[held[0]].len, n);
	}
}

START_TEST(place_cuts_a_piece_into_writes)
{
	uint32_t len = (uint32_t)gathered().len;

	placed(64, UINT32_MAX, false, len, 1);	     /* one write, IMM */
	placed(32, UINT32_MAX, false, len, 2);	     /* rxe: DONE */
	placed(6, UINT32_MAX, true, len, 11);	     /* siw */
	placed(6, UINT32_MAX, true, len + 100, 11); /* an advert larger than the send */
	placed(64, 1000, false, len, (len + 999) / 1000);
	placed(6, UINT32_MAX, false, 600, 2);	     /* a STREAM piece: 600 bytes, 8 elements */
}
END_TEST

int main(void)
{
	const TTest *const tests[] = { gather_splits_by_sge_limit, one_buffer_is_one_sge,
				       copies_keep_order_and_gaps, place_cuts_a_piece_into_writes,
				       NULL };

	return run_tests("sg", 20, tests);
}
