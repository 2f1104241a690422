/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The fake verbs of the hostile-peer fuzzer (fake_verbs.c). */
#ifndef FAKE_VERBS_H
#define FAKE_VERBS_H
#include <stdbool.h>
#include <stdint.h>
#include <infiniband/verbs.h>

/* What the peer sees of the oldest send WR of a QP (fv_take). */
struct fv_wr {
	enum ibv_wr_opcode opcode;
	const uint8_t *data; /* gathered bytes */
	uint32_t len;
	uint64_t raddr; /* RDMA writes */
	uint32_t rkey;
	uint32_t imm; /* WRITE_WITH_IMM, as posted (network order) */
};

/* The peer's verdict on an RDMA write it was handed: 0 or a WC status. */
typedef int (*fv_peer_fn)(void *arg, const struct fv_wr *wr);

/* The peer's own memory, which libexs's RDMA writes may reach. */
#define FV_PEER_RKEY 0x7e000001u
extern uint8_t fv_peer_mem[65536];

/* Execute the oldest send WR of qp towards the peer (fn sees it first);
 * false if there is none. */
bool fv_take(struct ibv_qp *qp, fv_peer_fn fn, void *arg);
unsigned fv_sq_pending(struct ibv_qp *qp);
/* The peer SENDs len bytes: they fill the oldest posted receive. False if
 * there is none or the QP does not take it (nothing happened). */
bool fv_peer_send(struct ibv_qp *qp, const void *data, uint32_t len);
/* The peer RDMA-writes len bytes at addr/rkey (with an immediate, which
 * takes a receive, if with_imm). An address outside a registration of
 * that rkey with remote write access is a remote access error: the QP
 * goes to error and flushes every outstanding WR. */
bool fv_peer_write(struct ibv_qp *qp, uint64_t addr, uint32_t rkey, const void *data,
		   uint32_t len, bool with_imm, uint32_t imm);
/* The connection breaks (retry exceeded, say): error and flush. */
void fv_qp_fail(struct ibv_qp *qp, enum ibv_wc_status status);
/* QPs, CQs and memory regions created and not destroyed. */
unsigned fv_live(void);
#endif
