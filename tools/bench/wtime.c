// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * wtime: an LD_PRELOAD library for tools/bench/account's critical-path
 * table. It timestamps, with the TSC (one clock for every process in the
 * guest), the three moments of a ping-pong's turn that a program shows
 * from outside:
 *   W  every write() to a character device, start and end: on rxe and siw
 *      the verbs post's doorbell, the one system call of a small send;
 *   R  an exs_qdequeue() that returns a receive's event;
 *   S  an exs_send() call;
 *   P  the return of a CQ poll that took a receive's completion: when the
 *      program (libexs, or perftest itself) learned that a message came.
 *      ibv_poll_cq is inline (it calls the context's poll_cq), so wtime
 *      wraps ibv_create_cq and puts its own poll_cq in the context's ops.
 * R and S exist only in programs that call libexs; perftest shows W and P.
 * It also wraps close(), to forget a descriptor's kind.
 * At exit it writes "$EXS_WTIME_OUT.PID": a line "tick_ns N", then one
 * line per record, "W start end", "R t", "S t" or "P t", in ticks (each kind
 * in the order recorded: threads may interleave).
 * tools/bench/timeline pairs one side's records with the other's.
 */

#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include <exs.h>
#include <infiniband/verbs.h>
#include <pthread.h>

#define WT_MAX (1u << 18) /* records of each kind kept; later ones are dropped */
#define WT_FDS 1024	  /* descriptors whose kind is remembered */
#define WT_CTXS 16	  /* device contexts whose poll_cq is wrapped */

struct wt_rec {
	uint64_t a, b;
};

static struct wt_rec w_rec[WT_MAX];
static uint64_t r_rec[WT_MAX], s_rec[WT_MAX], p_rec[WT_MAX];
static unsigned n_w, n_r, n_s, n_p;

/* one moment into rec (n counts them; threads take slots atomically) */
static void stamp(uint64_t *rec, unsigned *n)
{
	unsigned i = __atomic_fetch_add(n, 1, __ATOMIC_RELAXED);

	if (i < WT_MAX)
		rec[i] = __rdtsc();
}
static uint64_t tsc0;
static struct timespec ts0;
/* per descriptor: 0 not looked at yet, 1 a character device, 2 other */
static unsigned char fd_kind[WT_FDS];

/* each wrapped context and its provider's poll_cq; entries are published
 * whole (count last, under ctx_lock) and never removed */
typedef int (*poll_fn)(struct ibv_cq *, int, struct ibv_wc *);
static struct {
	struct ibv_context *ctx;
	poll_fn poll;
} ctxs[WT_CTXS];
static unsigned n_ctxs;
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;

static ssize_t (*real_write)(int, const void *, size_t);
static int (*real_qdequeue)(exs_qhandle_t, exs_event_t *, int, struct timeval *);
static ssize_t (*real_send)(int, const void *, size_t, int, exs_qhandle_t, exs_ahandle_t,
			    exs_mhandle_t);

__attribute__((constructor)) static void wt_init(void)
{
	real_write = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
	clock_gettime(CLOCK_MONOTONIC, &ts0);
	tsc0 = __rdtsc();
}

static bool is_chardev(int fd)
{
	struct stat st;

	if (fd < 0 || fd >= WT_FDS)
		return false;
	if (!fd_kind[fd]) /* close() forgets it: the number may come back as another file */
		fd_kind[fd] = fstat(fd, &st) == 0 && S_ISCHR(st.st_mode) ? 1 : 2;
	return fd_kind[fd] == 1;
}

ssize_t write(int fd, const void *buf, size_t len)
{
	uint64_t a;
	ssize_t ret;
	unsigned i;

	if (!real_write) /* called before wt_init, by another constructor */
		real_write = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
	if (!is_chardev(fd))
		return real_write(fd, buf, len);
	a = __rdtsc();
	ret = real_write(fd, buf, len);
	i = __atomic_fetch_add(&n_w, 1, __ATOMIC_RELAXED); /* the progress thread posts too */
	if (i < WT_MAX)
		w_rec[i] = (struct wt_rec){ a, __rdtsc() };
	return ret;
}

int close(int fd)
{
	static int (*real_close)(int);

	if (!real_close)
		real_close = (int (*)(int))dlsym(RTLD_NEXT, "close");
	if (fd >= 0 && fd < WT_FDS)
		fd_kind[fd] = 0;
	return real_close(fd);
}

int exs_qdequeue(exs_qhandle_t q, exs_event_t *ev, int count, struct timeval *timeout)
{
	int ret;

	if (!real_qdequeue)
		real_qdequeue = (int (*)(exs_qhandle_t, exs_event_t *, int, struct timeval *))
			dlsym(RTLD_NEXT, "exs_qdequeue");
	ret = real_qdequeue(q, ev, count, timeout);
	if (ret >= 1 && ev->exs_evt_type == EXS_EVT_RECV)
		stamp(r_rec, &n_r);
	return ret;
}

ssize_t exs_send(int fd, const void *buf, size_t len, int flags, exs_qhandle_t q,
		 exs_ahandle_t ah, exs_mhandle_t mh)
{
	if (!real_send)
		real_send = (ssize_t(*)(int, const void *, size_t, int, exs_qhandle_t,
					exs_ahandle_t, exs_mhandle_t))dlsym(RTLD_NEXT, "exs_send");
	stamp(s_rec, &n_s);
	return real_send(fd, buf, len, flags, q, ah, mh);
}

static int wt_poll(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	unsigned i, k = __atomic_load_n(&n_ctxs, __ATOMIC_ACQUIRE);
	poll_fn poll = NULL;
	int ret, j;

	/* the newest entry first: a context freed and made again at the same
	 * address has a newer one */
	for (i = k; i-- > 0 && !poll;)
		if (ctxs[i].ctx == cq->context)
			poll = ctxs[i].poll;
	if (!poll)
		return -1;
	ret = poll(cq, n, wc);
	for (j = 0; j < ret; j++)
		if (wc[j].opcode & IBV_WC_RECV) {
			stamp(p_rec, &n_p);
			break;
		}
	return ret;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_ctx,
			     struct ibv_comp_channel *chan, int vector)
{
	static struct ibv_cq *(*real_create)(struct ibv_context *, int, void *,
					     struct ibv_comp_channel *, int);
	struct ibv_cq *cq;

	if (!real_create)
		real_create = (struct ibv_cq * (*)(struct ibv_context *, int, void *,
						   struct ibv_comp_channel *, int))
			dlsym(RTLD_NEXT, "ibv_create_cq");
	cq = real_create(ctx, cqe, cq_ctx, chan, vector);
	if (!cq)
		return cq;
	pthread_mutex_lock(&ctx_lock);
	if (ctx->ops.poll_cq != wt_poll && n_ctxs < WT_CTXS) {
		ctxs[n_ctxs].ctx = ctx;
		ctxs[n_ctxs].poll = ctx->ops.poll_cq;
		__atomic_store_n(&n_ctxs, n_ctxs + 1, __ATOMIC_RELEASE);
		ctx->ops.poll_cq = wt_poll;
	}
	pthread_mutex_unlock(&ctx_lock);
	return cq;
}

/* the n moments of one kind recorded into rec, a line "KIND t" each */
static void dump(FILE *f, char kind, const uint64_t *rec, unsigned n)
{
	for (unsigned i = 0; i < n && i < WT_MAX; i++)
		fprintf(f, "%c %llu\n", kind, (unsigned long long)rec[i]);
}

__attribute__((destructor)) static void wt_fini(void)
{
	const char *base = getenv("EXS_WTIME_OUT");
	struct timespec ts1;
	uint64_t tsc1;
	char path[4096];
	FILE *f;
	unsigned i, nw = n_w < WT_MAX ? n_w : WT_MAX;

	clock_gettime(CLOCK_MONOTONIC, &ts1);
	tsc1 = __rdtsc();
	if (!base || tsc1 == tsc0 ||
	    snprintf(path, sizeof(path), "%s.%d", base, (int)getpid()) >= (int)sizeof(path))
		return;
	f = fopen(path, "w");
	if (!f)
		return;
	fprintf(f, "tick_ns %.9f\n",
		((double)(ts1.tv_sec - ts0.tv_sec) * 1e9 + (double)(ts1.tv_nsec - ts0.tv_nsec)) /
			(double)(tsc1 - tsc0));
	for (i = 0; i < nw; i++)
		fprintf(f, "W %llu %llu\n", (unsigned long long)w_rec[i].a,
			(unsigned long long)w_rec[i].b);
	dump(f, 'R', r_rec, n_r);
	dump(f, 'S', s_rec, n_s);
	dump(f, 'P', p_rec, n_p);
	fclose(f);
}
