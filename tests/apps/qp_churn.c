/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * qp_churn: another process that makes and destroys queue pairs as fast as
 * it can, so that EXS's QPs are made while others are being destroyed.
 *
 *   qp_churn DEVICE SECS
 *
 * Holds 4 RC QPs on DEVICE and, for SECS seconds (1..3600), destroys the
 * oldest and makes a new one, again and again. Prints "qp_churn: ready"
 * once the first 4 exist and, at the end, how many it made. Exit 0, or 2
 * when the device cannot be opened or a QP not made.
 *
 * Why: in Linux 6.1 a QP's number is freed by the driver's destroy before
 * the QP leaves the kernel's resource tracker, and siw gives the lowest
 * free number at once; a QP made in between gets that number and is never
 * tracked, so exsd's ownership check cannot find it (see exsd/qpown.c and
 * Rebuild in proto/exs_control.proto).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

#define HELD 4

static void die(const char *what)
{
	fprintf(stderr, "qp_churn: %s: %s\n", what, strerror(errno));
	exit(2);
}

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr a;
	struct ibv_qp *qp;

	memset(&a, 0, sizeof(a));
	a.send_cq = cq;
	a.recv_cq = cq;
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = 4;
	a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	qp = ibv_create_qp(pd, &a);
	if (!qp)
		die("ibv_create_qp");
	return qp;
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_qp *held[HELD];
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct timespec now;
	unsigned long made = 0;
	time_t end;
	long secs;
	int i, n;

	if (argc != 3 || (secs = strtol(argv[2], NULL, 10)) < 1 || secs > 3600) {
		fprintf(stderr, "usage: qp_churn DEVICE SECS (1..3600)\n");
		return 2;
	}
	list = ibv_get_device_list(&n);
	for (i = 0; list && i < n && !ctx; i++)
		if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
			ctx = ibv_open_device(list[i]);
	if (!ctx)
		die(argv[1]);
	pd = ibv_alloc_pd(ctx);
	cq = pd ? ibv_create_cq(ctx, 4 * HELD * 2, NULL, NULL, 0) : NULL;
	if (!cq)
		die("ibv_alloc_pd/ibv_create_cq");
	for (i = 0; i < HELD; i++, made++)
		held[i] = make_qp(pd, cq);
	printf("qp_churn: ready\n");
	fflush(stdout);
	clock_gettime(CLOCK_MONOTONIC, &now);
	end = now.tv_sec + secs;
	for (i = 0; now.tv_sec < end; i = (i + 1) % HELD, made++) {
		if (ibv_destroy_qp(held[i]))
			die("ibv_destroy_qp");
		held[i] = make_qp(pd, cq);
		clock_gettime(CLOCK_MONOTONIC, &now);
	}
	for (i = 0; i < HELD; i++)
		ibv_destroy_qp(held[i]);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	printf("qp_churn: made %lu QPs in %ld s\n", made, secs);
	return 0;
}
