/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The fake rdmacm of the control-protocol fuzzer (fake_rdmacm.c). */
#ifndef FAKE_RDMACM_H
#define FAKE_RDMACM_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <rdma/rdma_cma.h>

enum fake_state {
	FS_IDLE, FS_BOUND, FS_LISTEN, FS_ADDR_QUERY, FS_ADDR_RESOLVED, FS_ROUTE_QUERY,
	FS_ROUTE_RESOLVED, FS_CONNECT, FS_RESP_RCVD, FS_REQ_RCVD, FS_ACCEPT, FS_CONNECTED,
	FS_DISCONNECT, FS_REJECTED, FS_DEAD, FS_DESTROYED,
};

/* calls fake_cm_fail_next() can make fail once */
#define FAKE_CREATE_ID 1u
#define FAKE_BIND 2u
#define FAKE_LISTEN 4u
#define FAKE_RESOLVE 8u
#define FAKE_INIT_QP_ATTR 16u
#define FAKE_CONNECT 32u
#define FAKE_ACCEPT 64u
#define FAKE_ESTABLISH 128u

extern unsigned fake_live_ids; /* ids created and not destroyed */
void fake_cm_fail_next(unsigned calls, int err);
unsigned fake_cm_ids(void); /* ids that may get an event now */
/* Queue an event for the which-th such id, of a kind its state allows
 * (pick chooses among them); false if there is none. */
bool fake_cm_deliver(unsigned which, unsigned pick, int status, bool iwarp, const uint8_t *pd,
		     size_t pdlen);
void fake_cm_reset(void);
#endif
