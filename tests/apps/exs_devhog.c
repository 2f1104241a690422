/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs_devhog: fills one table of an RDMA device with raw verbs objects, as
 * small as the device takes, to find its limit and to hold it while other
 * processes run into it.
 *
 *   exs_devhog DEV qp|cq|mr|pd [MAX]
 * Makes objects of that kind until one is refused (or MAX are made), prints
 *   reached N KIND errno E (NAME: text) in MS ms, memavail -KB kB
 * (E 0 when MAX stopped it, -1 for a refusal without an errno), then "ready", and holds them until SIGTERM
 * comes or, when its standard input is a pipe, that pipe closes; then
 * frees them and prints
 * "freed N in MS ms". Each SIGUSR1 while it holds them frees the newest
 * one and prints "freed one, holding N" (room for exactly one more). A QP has one send and one receive WR on one shared
 * CQ; an MR is one page, registered again and again (each registration
 * pins it once: raise RLIMIT_MEMLOCK). Each QP and CQ is a mapping of the
 * process: raise vm.max_map_count past twice the device's limit. On siw a
 * CQ of 32,768 entries is made first and kept, as libexs does (siw_guard()
 * in libexs/verbs.c: libsiw refuses a queue the kernel maps at page 144,
 * without an errno).
 * Exit status: 0 when it reached a limit (or MAX), 1 when it failed before.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#include <infiniband/verbs.h>

static volatile sig_atomic_t stop, free_one;

static void on_sig(int sig)
{
	if (sig == SIGUSR1)
		free_one = 1;
	else
		stop = 1;
}

static void destroy(int kind, void *o)
{
	if (kind == 'q')
		ibv_destroy_qp(o);
	else if (kind == 'c')
		ibv_destroy_cq(o);
	else if (kind == 'm')
		ibv_dereg_mr(o);
	else
		ibv_dealloc_pd(o);
}

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000;
}

static long memavail_kb(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[128];
	long kb = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

static const char *errname(int e)
{
	switch (e) {
	case 0: return "none";
	case -1: return "NOERRNO";
	case EINVAL: return "EINVAL";
	case ENOMEM: return "ENOMEM";
	case ENOSPC: return "ENOSPC";
	case EAGAIN: return "EAGAIN";
	case EMFILE: return "EMFILE";
	case ENOBUFS: return "ENOBUFS";
	case EFAULT: return "EFAULT";
	default: return "other";
	}
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_pd *pd;
	struct ibv_cq *cq = NULL, *guard = NULL;
	struct ibv_device_attr attr;
	struct sigaction sa = { .sa_handler = on_sig };
	struct pollfd pfd = { .fd = 0, .events = POLLIN };
	void **obj = NULL, *page = NULL;
	size_t n = 0, cap = 0, max = 4000000, i;
	long t0, t, mem0;
	int kind, nd, err = 0;
	struct stat st;
	char c;

	if (argc < 3) {
		fprintf(stderr, "usage: exs_devhog DEV qp|cq|mr|pd [MAX]\n");
		return 2;
	}
	kind = !strcmp(argv[2], "qp") ? 'q' : !strcmp(argv[2], "cq") ? 'c' :
	       !strcmp(argv[2], "mr") ? 'm' : !strcmp(argv[2], "pd") ? 'p' : 0;
	if (!kind) {
		fprintf(stderr, "exs_devhog: kind is qp, cq, mr or pd\n");
		return 2;
	}
	if (argc > 3)
		max = strtoul(argv[3], NULL, 0);
	setvbuf(stdout, NULL, _IOLBF, 0);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	list = ibv_get_device_list(&nd);
	for (i = 0; list && i < (size_t)nd && !ctx; i++)
		if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
			ctx = ibv_open_device(list[i]);
	if (!ctx) {
		fprintf(stderr, "exs_devhog: cannot open %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	if (!ibv_query_device(ctx, &attr) && attr.vendor_id == 0x626d74 /* siw */)
		guard = ibv_create_cq(ctx, 32768, NULL, NULL, 0);
	pd = ibv_alloc_pd(ctx);
	if (kind == 'q')
		cq = ibv_create_cq(ctx, 2, NULL, NULL, 0);
	page = aligned_alloc(4096, 4096);
	if (!pd || (kind == 'q' && !cq) || !page) {
		fprintf(stderr, "exs_devhog: set-up on %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	memset(page, 0, 4096);
	mem0 = memavail_kb();
	t0 = now_ms();
	while (n < max && !stop) {
		void *o;

		if (n == cap) {
			void **p = realloc(obj, (cap = cap ? cap * 2 : 4096) * sizeof(*obj));

			if (!p) {
				err = ENOMEM;
				fprintf(stderr, "exs_devhog: out of memory for the list\n");
				break;
			}
			obj = p;
		}
		errno = 0;
		if (kind == 'q') {
			struct ibv_qp_init_attr qa = {
				.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				.cap = { .max_send_wr = 1, .max_recv_wr = 1,
					 .max_send_sge = 1, .max_recv_sge = 1 },
			};

			o = ibv_create_qp(pd, &qa);
		} else if (kind == 'c') {
			o = ibv_create_cq(ctx, 1, NULL, NULL, 0);
		} else if (kind == 'm') {
			o = ibv_reg_mr(pd, page, 4096, IBV_ACCESS_LOCAL_WRITE);
		} else {
			o = ibv_alloc_pd(ctx);
		}
		if (!o) {
			err = errno ? errno : -1;
			break;
		}
		obj[n++] = o;
		if (n % 10000 == 0)
			fprintf(stderr, "exs_devhog: %zu %s in %ld ms\n", n, argv[2], now_ms() - t0);
	}
	t = now_ms() - t0;
	printf("reached %zu %s errno %d (%s: %s) in %ld ms, memavail -%ld kB\n", n, argv[2], err,
	       errname(err), err > 0 ? strerror(err) : err ? "refused, errno not set" : "MAX made",
	       t, mem0 - memavail_kb());
	printf("ready\n");
	if (fstat(0, &st) || !S_ISFIFO(st.st_mode))
		pfd.fd = -1; /* poll() then only sleeps */
	while (!stop) {
		if (poll(&pfd, 1, 1000) > 0 && read(0, &c, 1) <= 0)
			break;
		if (free_one && n) {
			destroy(kind, obj[--n]);
			printf("freed one, holding %zu\n", n);
		}
		free_one = 0;
	}
	t0 = now_ms();
	for (i = n; i-- > 0;)
		destroy(kind, obj[i]);
	printf("freed %zu in %ld ms\n", n, now_ms() - t0);
	if (cq)
		ibv_destroy_cq(cq);
	if (guard)
		ibv_destroy_cq(guard);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	free(obj);
	free(page);
	return n > 0 || !err ? 0 : 1;
}
