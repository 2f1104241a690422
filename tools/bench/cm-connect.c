/*
 * cm-connect: the reference for exs-perf connect. Times raw rdmacm
 * connections (resolve address and route, create a QP, connect, wait for
 * ESTABLISHED) with no broker in between, the way rping sets one up.
 *
 *   cm-connect server ADDR PORT       accepts until killed
 *   cm-connect client ADDR PORT N     prints connects/s and the median time
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

static void make_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
						.max_recv_sge = 1 } };

	if (rdma_create_qp(id, NULL, &qa)) {
		perror("rdma_create_qp");
		exit(1);
	}
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

	if (argc < 4 || !ch || inet_pton(AF_INET, argv[2], &sa.sin_addr) != 1) {
		fprintf(stderr, "usage: cm-connect server|client ADDR PORT [N]\n");
		return 2;
	}
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
				make_qp(cid);
				rdma_accept(cid, &p);
				rdma_ack_cm_event(ev);
				break;
			case RDMA_CM_EVENT_DISCONNECTED:
				rdma_ack_cm_event(ev);
				rdma_destroy_qp(cid);
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

	for (int i = 0; i < n; i++) {
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
		make_qp(id);
		if (rdma_connect(id, &p)) {
			perror("rdma_connect");
			return 1;
		}
		rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ESTABLISHED));
		t[i] = now() - s;
		rdma_disconnect(id);
		rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_DISCONNECTED));
		rdma_destroy_qp(id);
		rdma_destroy_id(id);
	}
	double total = now() - t0;

	qsort(t, (size_t)n, sizeof(*t), cmp_d);
	printf("cm-connect: %d connects, %.1f connects/s, median %.1f us, min %.1f us\n", n, n / total,
	       t[n / 2] * 1e6, t[0] * 1e6);
	return 0;
}
