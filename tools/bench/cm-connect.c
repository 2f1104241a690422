/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * cm-connect: the reference for exs-perf connect. Times raw rdmacm
 * connections (resolve address and route, create a QP, connect, wait for
 * ESTABLISHED) with no broker in between, the way rping sets one up.
 *
 *   cm-connect [-c CREDITS] [-i INLINE] server ADDR PORT    accepts until killed
 *   cm-connect [-c CREDITS] [-i INLINE] client ADDR PORT N [D]
 *       N connects; prints connects/s, median, min and mean. D > 1: rounds
 *       of D connects started at once (D clients arriving together), and
 *       connects/s is N over the rounds' time from first start to last
 *       ESTABLISHED (the listener's accept rate); disconnects are outside.
 *
 * Each side builds what libexs builds per connection for a SOCK_SEQPACKET
 * socket with the defaults (libexs/conn.c, exs_conn_create; exs.conf's
 * credits C = 32 and sp_max 1024), so the ratio compares like with like:
 * nrecv = 3C + 20 + 8 + C receives of 8 + 1024 bytes (rounded to 8) posted
 * before the connection is up, nsend = 4C + 20 control slots of 32 bytes
 * and C eager buffers, all in one registered mapping; a QP with
 * max_recv_wr = nrecv, max_send_wr = nsend + C * max_writes +
 * 16 * max_chunks + C + 4 (max_chunks = min(16, ceil((2^31 - 1) / the
 * port's max_msg_sz)), max_writes = max_chunks + ceil(64 / max_sge) - 1,
 * max_sge = min(64, the device's)), max_send_sge = max_sge, and the
 * largest max_inline_data the device takes (found by asking it, as
 * libexs does; -i sets it instead); a CQ of max_send_wr + max_recv_wr + 8
 * entries on a completion channel, armed.
 */
#include <arpa/inet.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
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
#define WIRE_SPARE 20 /* EXS_WIRE_SPARE */
#define RECV_BATCH 8 /* EXS_RECV_BATCH */
#define MAX_CHUNKS 16 /* EXS_MAX_CHUNKS */
#define MAX_READS 16 /* EXS_MAX_READS */
#define IOV_MAX_EXS 64 /* EXS_IOV_MAX */
#define MAX_INLINE 4096 /* EXS_MAX_INLINE */
#define EAGER_SZ ((8 + 1024 + 7) & ~7u) /* struct exs_wire_eager + sp_max 1024 */
#define MAX_DEPTH 256

static uint32_t credits = 32;
static int64_t inline_max = -1; /* -1: the largest the device takes */

/* what libexs allocates per connection, besides its bookkeeping arrays */
struct conn {
	struct rdma_cm_id *id;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	char *mem;
	size_t len;
	double t0;
	bool up;
};

static void fail(const char *what)
{
	perror(what);
	exit(1);
}

/* Does the device take a QP with n bytes of inline data? */
static bool inline_ok(struct ibv_pd *pd, struct ibv_cq *cq, uint32_t n)
{
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
						.max_recv_sge = 1, .max_inline_data = n } };
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);

	if (qp)
		ibv_destroy_qp(qp);
	return qp != NULL;
}

static void make_qp(struct rdma_cm_id *id, struct conn *c)
{
	static struct ibv_comp_channel *chan; /* libexs: one per device */
	static struct ibv_pd *pd;             /* libexs: one per device */
	static uint32_t max_chunks, max_sge, max_inline;
	uint32_t nrecv = 4 * credits + WIRE_SPARE + RECV_BATCH, nsend = 4 * credits + WIRE_SPARE, max_writes;
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC };

	if (!pd) {
		struct ibv_port_attr pa;
		struct ibv_device_attr da;
		struct ibv_cq *cq;
		uint64_t msg;

		if (ibv_query_port(id->verbs, id->port_num ? id->port_num : 1, &pa) ||
		    ibv_query_device(id->verbs, &da))
			fail("ibv_query_port/ibv_query_device");
		msg = pa.max_msg_sz ? pa.max_msg_sz : 1;
		max_chunks = (uint32_t)((INT32_MAX + msg - 1) / msg);
		if (max_chunks > MAX_CHUNKS)
			max_chunks = MAX_CHUNKS;
		max_sge = da.max_sge < 1 ? 1 : da.max_sge > IOV_MAX_EXS ? IOV_MAX_EXS : (uint32_t)da.max_sge;
		pd = ibv_alloc_pd(id->verbs);
		chan = ibv_create_comp_channel(id->verbs);
		cq = ibv_create_cq(id->verbs, 2, NULL, NULL, 0);
		if (!pd || !chan || !cq)
			fail("ibv_alloc_pd/ibv_create_comp_channel");
		if (inline_max >= 0) {
			max_inline = (uint32_t)inline_max;
		} else { /* a binary search of what the device takes */
			uint32_t lo = 0, hi = MAX_INLINE;

			if (inline_ok(pd, cq, hi))
				lo = hi;
			while (hi - lo > 1) {
				uint32_t mid = lo + (hi - lo) / 2;

				*(inline_ok(pd, cq, mid) ? &lo : &hi) = mid;
			}
			max_inline = lo;
		}
		ibv_destroy_cq(cq);
	}
	max_writes = max_chunks + (IOV_MAX_EXS + max_sge - 1) / max_sge - 1;
	c->len = (size_t)nrecv * EAGER_SZ + (size_t)nsend * WIRE_MSG + (size_t)credits * EAGER_SZ;
	c->mem = mmap(NULL, c->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (c->mem == MAP_FAILED)
		fail("mmap");
	c->mr = ibv_reg_mr(pd, c->mem, c->len, IBV_ACCESS_LOCAL_WRITE);
	qa.cap.max_send_wr = nsend + credits * max_writes + MAX_READS * max_chunks + credits + 4;
	qa.cap.max_recv_wr = nrecv;
	c->cq = ibv_create_cq(id->verbs, (int)(qa.cap.max_send_wr + qa.cap.max_recv_wr + 8), NULL, chan, 0);
	if (!c->mr || !c->cq || ibv_req_notify_cq(c->cq, 0))
		fail("ibv_reg_mr/ibv_create_cq");
	qa.send_cq = qa.recv_cq = c->cq;
	qa.cap.max_send_sge = max_sge;
	qa.cap.max_recv_sge = 1;
	qa.cap.max_inline_data = max_inline;
	if (rdma_create_qp(id, pd, &qa))
		fail("rdma_create_qp");
	for (uint32_t i = 0; i < nrecv; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)(c->mem + (size_t)i * EAGER_SZ), .length = EAGER_SZ,
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
	munmap(c->mem, c->len);
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
			inline_max = atoi(optarg);
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
	int n = argc > 4 ? atoi(argv[4]) : 100, depth = argc > 5 ? atoi(argv[5]) : 1;
	double *t = calloc(n > 0 ? (size_t)n : 1, sizeof(*t)), total = 0, mean = 0;
	static struct conn cs[MAX_DEPTH];

	if (n < 1 || depth < 1 || depth > MAX_DEPTH || !t)
		goto usage;
	for (int done = 0; done < n;) {
		int k = n - done < depth ? n - done : depth, up = 0;
		double r0 = now();

		/* k connects at once; each id's events drive it on */
		for (int j = 0; j < k; j++) {
			cs[j] = (struct conn){ .t0 = now() };
			if (rdma_create_id(ch, &cs[j].id, &cs[j], RDMA_PS_TCP) ||
			    rdma_resolve_addr(cs[j].id, NULL, (struct sockaddr *)&sa, 2000))
				fail("resolve");
		}
		while (up < k) {
			struct conn *c;

			if (rdma_get_cm_event(ch, &ev))
				fail("rdma_get_cm_event");
			c = ev->id->context;
			switch (ev->event) {
			case RDMA_CM_EVENT_ADDR_RESOLVED:
				if (rdma_resolve_route(c->id, 2000))
					fail("route");
				break;
			case RDMA_CM_EVENT_ROUTE_RESOLVED:
				make_qp(c->id, c);
				if (rdma_connect(c->id, &p))
					fail("rdma_connect");
				break;
			case RDMA_CM_EVENT_ESTABLISHED:
				t[done + (c - cs)] = now() - c->t0;
				c->up = true;
				up++;
				break;
			default:
				fprintf(stderr, "cm-connect: unexpected %s\n", rdma_event_str(ev->event));
				exit(1);
			}
			rdma_ack_cm_event(ev);
		}
		total += now() - r0;
		for (int j = 0; j < k; j++)
			rdma_disconnect(cs[j].id);
		for (int j = 0; j < k; j++)
			rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_DISCONNECTED));
		for (int j = 0; j < k; j++) {
			free_qp(cs[j].id, &cs[j]);
			rdma_destroy_id(cs[j].id);
		}
		done += k;
	}
	for (int i = 0; i < n; i++)
		mean += t[i] / n;
	qsort(t, (size_t)n, sizeof(*t), cmp_d);
	printf("cm-connect: %d connects, %.1f connects/s, median %.1f us, min %.1f us, mean %.1f us"
	       " (%d at once)\n", n, n / total, t[n / 2] * 1e6, t[0] * 1e6, mean * 1e6, depth);
	return 0;
usage:
	fprintf(stderr, "usage: cm-connect [-c CREDITS] [-i INLINE] server|client ADDR PORT [N [D]]\n");
	return 2;
}
