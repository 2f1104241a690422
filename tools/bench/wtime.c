// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * wtime: an LD_PRELOAD library for tools/bench/account's critical-path
 * table. It timestamps, with the TSC (one clock for every process in the
 * guest), the three moments of a ping-pong's turn that a program shows
 * from outside:
 *   W  every write() to a character device, start and end: on rxe and siw
 *      the verbs post's doorbell, the one system call of a small send;
 *   R  an exs_qdequeue() that returns a receive's event;
 *   S  an exs_send() call.
 * R and S exist only in programs that call libexs; perftest shows W only.
 * It also wraps close(), to forget a descriptor's kind.
 * At exit it writes "$EXS_WTIME_OUT.PID": a line "tick_ns N", then one
 * line per record, "W start end", "R t" or "S t", in ticks (each kind
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

#define WT_MAX (1u << 18) /* records of each kind kept; later ones are dropped */
#define WT_FDS 1024	  /* descriptors whose kind is remembered */

struct wt_rec {
	uint64_t a, b;
};

static struct wt_rec w_rec[WT_MAX];
static uint64_t r_rec[WT_MAX], s_rec[WT_MAX];
static unsigned n_w, n_r, n_s;
static uint64_t tsc0;
static struct timespec ts0;
/* per descriptor: 0 not looked at yet, 1 a character device, 2 other */
static unsigned char fd_kind[WT_FDS];

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
	if (ret >= 1 && ev->exs_evt_type == EXS_EVT_RECV) {
		unsigned i = __atomic_fetch_add(&n_r, 1, __ATOMIC_RELAXED);

		if (i < WT_MAX)
			r_rec[i] = __rdtsc();
	}
	return ret;
}

ssize_t exs_send(int fd, const void *buf, size_t len, int flags, exs_qhandle_t q,
		 exs_ahandle_t ah, exs_mhandle_t mh)
{
	if (!real_send)
		real_send = (ssize_t(*)(int, const void *, size_t, int, exs_qhandle_t,
					exs_ahandle_t, exs_mhandle_t))dlsym(RTLD_NEXT, "exs_send");
	unsigned i = __atomic_fetch_add(&n_s, 1, __ATOMIC_RELAXED);

	if (i < WT_MAX)
		s_rec[i] = __rdtsc();
	return real_send(fd, buf, len, flags, q, ah, mh);
}

__attribute__((destructor)) static void wt_fini(void)
{
	const char *base = getenv("EXS_WTIME_OUT");
	struct timespec ts1;
	uint64_t tsc1;
	char path[4096];
	FILE *f;
	unsigned i, nw = n_w < WT_MAX ? n_w : WT_MAX, nr = n_r < WT_MAX ? n_r : WT_MAX;
	unsigned ns = n_s < WT_MAX ? n_s : WT_MAX;

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
	for (i = 0; i < nr; i++)
		fprintf(f, "R %llu\n", (unsigned long long)r_rec[i]);
	for (i = 0; i < ns; i++)
		fprintf(f, "S %llu\n", (unsigned long long)s_rec[i]);
	fclose(f);
}
