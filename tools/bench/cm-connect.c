/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * cm-connect: the reference for exs-perf connect. Times raw rdmacm
 * connections (resolve address and route, create a QP, connect, wait for
 * ESTABLISHED) with no broker in between, the way rping sets one up.
 *
 *   cm-connect [-c CREDITS] [-i INLINE] server ADDR PORT    accepts until killed
 *   cm-connect [-c CREDITS] [-i INLINE] client ADDR PORT N  prints connects/s,
 *                                                            median and mean
 *
 * Each side builds what libexs builds per connection (libexs/conn.c,
 * exs_conn_create), so the ratio compares like with like: with C credits
 * (default 32, as exs.conf) a CQ of nrecv + nsend + C + 8 entries on a
 * completion channel, armed; a QP with max_recv_wr = nrecv = 2C + 7 and
 * max_send_wr = nsend + C * max_chunks + 4 where nsend = 3C + 7 and
 * max_chunks = min(16, ceil((2^31 - 1) / the port's max_msg_sz)); a
 * registered array of nrecv + nsend 32-byte wire messages; and nrecv
 * receives posted before the connection is up. -i sets max_inline_data.
 */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type t)
{
	struct rdma_cm_event *ev;

	if (rdma_get_cm_event(ch, &ev)) {
		perror("rdma_get_cm_event");
		exit(1);
	}
	if (ev->event != t) {
		fprintf(stderr, "cm-connect: got %s, wanted %s\n", rdma_event_str(ev->event), rdma_event_str(t));
		exit(1);
	}
	return ev;
}

#define WIRE_MSG 32 /* sizeof(struct exs_wire_msg) */
#define WIRE_SPARE 7 /* EXS_WIRE_SPARE */
#define MAX_CHUNKS 16 /* EXS_MAX_CHUNKS */

static uint32_t credits = 32, inline_max;

/* what libexs allocates per connection, besides its bookkeeping arrays */
struct conn {
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	char *msg;
};

static void fail(const char *what)
{
	perror(what);
	exit(1);
}

static void make_qp(struct rdma_cm_id *id, struct conn *c)
{
	static struct ibv_comp_channel *chan; /* libexs: one per device */
	static struct ibv_pd *pd;             /* libexs: one per device */
	static uint32_t max_chunks;
	uint32_t nrecv = 2 * credits + WIRE_SPARE, nsend = 3 * credits + WIRE_SPARE;
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC };

	if (!pd) {
		struct ibv_port_attr pa;
		uint64_t msg;

		if (ibv_query_port(id->verbs, id->port_num ? id->port_num : 1, &pa))
			fail("ibv_query_port");
		msg = pa.max_msg_sz ? pa.max_msg_sz : 1;
		max_chunks = (uint32_t)((INT32_MAX + msg - 1) / msg);
		if (max_chunks > MAX_CHUNKS)
			max_chunks = MAX_CHUNKS;
		pd = ibv_alloc_pd(id->verbs);
		chan = ibv_create_comp_channel(id->verbs);
		if (!pd || !chan)
			fail("ibv_alloc_pd/ibv_create_comp_channel");
	}
	c->msg = calloc(nrecv + nsend, WIRE_MSG);
	if (!c->msg)
		fail("calloc");
	c->mr = ibv_reg_mr(pd, c->msg, (size_t)(nrecv + nsend) * WIRE_MSG, IBV_ACCESS_LOCAL_WRITE);
	c->cq = ibv_create_cq(id->verbs, (int)(nrecv + nsend + credits + 8), NULL, chan, 0);
	if (!c->mr || !c->cq || ibv_req_notify_cq(c->cq, 0))
		fail("ibv_reg_mr/ibv_create_cq");
	qa.send_cq = qa.recv_cq = c->cq;
	qa.cap.max_send_wr = nsend + credits * max_chunks + 4;
	qa.cap.max_recv_wr = nrecv;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	qa.cap.max_inline_data = inline_max;
	if (rdma_create_qp(id, pd, &qa))
		fail("rdma_create_qp");
	for (uint32_t i = 0; i < nrecv; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)(c->msg + (size_t)i * WIRE_MSG), .length = WIRE_MSG,
				       .lkey = c->mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;

		if (ibv_post_recv(id->qp, &wr, &bad))
			fail("ibv_post_recv");
	}
}

static void free_qp(struct rdma_cm_id *id, struct conn *c)
{
	rdma_destroy_qp(id);
	ibv_destroy_cq(c->cq);
	ibv_dereg_mr(c->mr);
	free(c->msg);
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in sa = { .sin_family = AF_INET };
	struct rdma_conn_param p = { .responder_resources = 1, .initiator_depth = 1, .retry_count = 7,
				     .rnr_retry_count = 7 };
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	int o;

	while ((o = getopt(argc, argv, "c:i:")) != -1) {
		if (o == 'c')
			credits = (uint32_t)atoi(optarg);
		else if (o == 'i')
			inline_max = (uint32_t)atoi(optarg);
		else
			goto usage;
	}
	argc -= optind - 1;
	argv += optind - 1;
	if (argc < 4 || !ch || !credits || credits > 1024 || inet_pton(AF_INET, argv[2], &sa.sin_addr) != 1)
		goto usage;
	sa.sin_port = htons((uint16_t)atoi(argv[3]));
	if (!strcmp(argv[1], "server")) {
		if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) || rdma_bind_addr(id, (struct sockaddr *)&sa) ||
		    rdma_listen(id, 64)) {
			perror("listen");
			return 1;
		}
		printf("listening\n");
		fflush(stdout);
		while (!rdma_get_cm_event(ch, &ev)) {
			struct rdma_cm_id *cid = ev->id;

			switch (ev->event) {
			case RDMA_CM_EVENT_CONNECT_REQUEST:
				cid->context = calloc(1, sizeof(struct conn));
				if (!cid->context)
					fail("calloc");
				make_qp(cid, cid->context);
				if (rdma_accept(cid, &p))
					fail("rdma_accept");
				rdma_ack_cm_event(ev);
				break;
			case RDMA_CM_EVENT_DISCONNECTED:
				rdma_ack_cm_event(ev);
				free_qp(cid, cid->context);
				free(cid->context);
				rdma_destroy_id(cid);
				break;
			default:
				rdma_ack_cm_event(ev);
			}
		}
		return 0;
	}
	int n = argc > 4 ? atoi(argv[4]) : 100;
	double *t = calloc((size_t)n, sizeof(*t)), t0 = now();

	if (n < 1)
		goto usage;
	for (int i = 0; i < n; i++) {
		struct conn c;
		double s = now();

		if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) ||
		    rdma_resolve_addr(id, NULL, (struct sockaddr *)&sa, 2000)) {
			perror("resolve");
			return 1;
		}
		rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
		if (rdma_resolve_route(id, 2000)) {
			perror("route");
			return 1;
		}
		rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
		make_qp(id, &c);
		if (rdma_connect(id, &p)) {
			perror("rdma_connect");
			return 1;
		}
		rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ESTABLISHED));
		t[i] = now() - s;
		rdma_disconnect(id);
		rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_DISCONNECTED));
		free_qp(id, &c);
		rdma_destroy_id(id);
	}
	double total = now() - t0;

	double mean = 0;

	for (int i = 0; i < n; i++)
		mean += t[i] / n;
	qsort(t, (size_t)n, sizeof(*t), cmp_d);
	printf("cm-connect: %d connects, %.1f connects/s, median %.1f us, min %.1f us, mean %.1f us\n", n,
	       n / total, t[n / 2] * 1e6, t[0] * 1e6, mean * 1e6);
	return 0;
usage:
	fprintf(stderr, "usage: cm-connect [-c CREDITS] [-i INLINE] server|client ADDR PORT [N]\n");
	return 2;
}
