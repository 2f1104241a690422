/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs_sfxfer: one exs_sendfile of a whole file across an EXS connection,
 * the receiver checking what arrived against the file's checksum, and
 * optionally the same number of bytes by exs_send from one registered
 * buffer, for comparison.
 *
 *   exs_sfxfer make FILE BYTES SEED   a sparse file: holes, and 1 MiB of
 *                                     pseudo-random data at 0, 1/3, 1/2 + 12345
 *                                     and the last MiB (the last byte included)
 *   exs_sfxfer sum FILE               prints "sum HEX BYTES"
 *   exs_sfxfer recv ADDR PORT BYTES [-c BYTES]
 *   exs_sfxfer send ADDR PORT FILE [-c BYTES] [-r SECS]
 *
 * The sum is a 64-bit running hash of the stream in 8-byte words (FNV-style
 * multiply per word, so order and position count). Each side prints one
 * line per phase: bytes, seconds, MB/s and (receiver) the sum. Exit 0 only
 * if everything was transferred (the script compares the sums).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <exs.h>

#define CHUNK ((size_t)8 << 20) /* receive and read unit: a multiple of 8 */

struct sum {
	uint64_t h, n;
};

static void sum_add(struct sum *s, const char *p, size_t len)
{
	size_t i = 0;
	uint64_t w;

	/* every chunk but the last is a multiple of 8: words never straddle */
	for (; i + 8 <= len; i += 8) {
		memcpy(&w, p + i, 8);
		s->h = (s->h ^ w) * 0x100000001b3ull;
		s->h ^= s->h >> 29;
	}
	for (; i < len; i++)
		s->h = (s->h ^ (uint8_t)p[i]) * 0x100000001b3ull;
	s->n += len;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t rng(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static int make(const char *path, unsigned long long size, uint64_t seed)
{
	const size_t piece = 1 << 20;
	unsigned long long at[4] = { 0, size / 3, size / 2 + 12345, size - piece };
	char *buf = malloc(piece);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	if (!buf || fd < 0 || size < 4 * piece || ftruncate(fd, (off_t)size)) {
		perror("make");
		return 1;
	}
	for (int k = 0; k < 4; k++) {
		for (size_t i = 0; i < piece; i += 8) {
			uint64_t w = rng(&seed);

			memcpy(buf + i, &w, 8);
		}
		if (pwrite(fd, buf, piece, (off_t)at[k]) != (ssize_t)piece) {
			perror("pwrite");
			return 1;
		}
	}
	close(fd);
	free(buf);
	return 0;
}

static int file_sum(const char *path)
{
	char *buf = malloc(CHUNK);
	struct sum s = { 0, 0 };
	int fd = open(path, O_RDONLY);
	ssize_t n;

	if (!buf || fd < 0) {
		perror(path);
		return 1;
	}
	/* full chunks (read loops until one is full or the file ends) */
	for (;;) {
		size_t got = 0;

		while (got < CHUNK && (n = read(fd, buf + got, CHUNK - got)) > 0)
			got += (size_t)n;
		if (!got)
			break;
		sum_add(&s, buf, got);
		if (got < CHUNK)
			break;
	}
	printf("sum %016llx %llu\n", (unsigned long long)s.h, (unsigned long long)s.n);
	return 0;
}

static int connect_to(const char *addr, int port, int retry_s)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	double end = now() + retry_s;
	int fd;

	inet_pton(AF_INET, addr, &sa.sin_addr);
	for (;;) {
		fd = exs_socket(AF_INET, SOCK_STREAM, 0);
		if (fd >= 0 && !exs_blocking_connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
			return fd;
		int e = errno;

		if (fd >= 0)
			exs_blocking_close(fd);
		if (e != ECONNREFUSED || now() > end) {
			fprintf(stderr, "connect: %s\n", strerror(e));
			return -1;
		}
		usleep(300000);
	}
}

static int accept_on(const char *addr, int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int l = exs_socket(AF_INET, SOCK_STREAM, 0), fd;

	inet_pton(AF_INET, addr, &sa.sin_addr);
	if (l < 0 || exs_bind(l, (struct sockaddr *)&sa, sizeof(sa)) || exs_listen(l, 1)) {
		perror("listen");
		return -1;
	}
	printf("listening\n");
	fflush(stdout);
	fd = exs_blocking_accept(l, NULL, NULL);
	exs_blocking_close(l);
	return fd;
}

static void report(const char *what, unsigned long long n, double t, const struct sum *s)
{
	printf("%s %llu B in %.2f s: %.1f MB/s", what, n, t, t > 0 ? n / t / 1e6 : 0.0);
	if (s)
		printf(" sum %016llx", (unsigned long long)s->h);
	putchar('\n');
	fflush(stdout);
}

static int recv_side(const char *addr, int port, unsigned long long total,
		     unsigned long long cmp)
{
	char *buf = mmap(NULL, CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	exs_mhandle_t mh = buf == MAP_FAILED ? EXS_MHANDLE_INVALID : exs_mregister(buf, CHUNK, 0);
	struct sum s = { 0, 0 };
	int fd = accept_on(addr, port);
	double t0;

	if (fd < 0 || mh == EXS_MHANDLE_INVALID) {
		perror("recv set-up");
		return 1;
	}
	for (int phase = 0; phase < (cmp ? 2 : 1); phase++) {
		unsigned long long want = phase ? cmp : total, got = 0;

		t0 = now();
		while (got < want) {
			size_t n = want - got < CHUNK ? (size_t)(want - got) : CHUNK;
			ssize_t r = exs_recv(fd, buf, n, MSG_WAITALL | EXS_BLOCK, NULL, NULL, mh);

			if (r != (ssize_t)n) {
				fprintf(stderr, "recv after %llu B: %zd %s\n", got, r, strerror(errno));
				return 1;
			}
			if (!phase)
				sum_add(&s, buf, n);
			got += n;
		}
		report(phase ? "recv exs_send" : "recv exs_sendfile", got, now() - t0,
		       phase ? NULL : &s);
	}
	exs_blocking_close(fd);
	return 0;
}

static int send_side(const char *addr, int port, const char *path, unsigned long long cmp,
		     int retry_s)
{
	struct exs_sendfilevec v = { .exs_sfv_type = EXS_SFV_PATH };
	struct stat st;
	int fd;
	double t0;
	ssize_t r;

	if (stat(path, &st)) {
		perror(path);
		return 1;
	}
	v.exs_sfv_u.exs_pathv = path;
	v.exs_sfv_len = (size_t)st.st_size;
	fd = connect_to(addr, port, retry_s);
	if (fd < 0)
		return 1;
	t0 = now();
	r = exs_sendfile(fd, &v, 1, EXS_BLOCK, NULL, NULL);
	if (r != (ssize_t)st.st_size) {
		fprintf(stderr, "exs_sendfile: %zd %s\n", r, strerror(errno));
		return 1;
	}
	report("send exs_sendfile", (unsigned long long)r, now() - t0, NULL);
	if (cmp) {
		/* the same amount by exs_send from one registered buffer of
		 * 16 MiB (the sendfile window), 4 sends in flight */
		const size_t win = 16 << 20;
		char *buf = mmap(NULL, win, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		exs_mhandle_t mh;
		exs_qhandle_t q = exs_qcreate(8);
		unsigned long long sent = 0, done = 0;
		int inflight = 0;
		exs_event_t ev;

		if (buf == MAP_FAILED || !q) {
			perror("cmp set-up");
			return 1;
		}
		memset(buf, 0x5a, win);
		mh = exs_mregister(buf, win, 0);
		if (mh == EXS_MHANDLE_INVALID) {
			perror("exs_mregister");
			return 1;
		}
		t0 = now();
		while (done < cmp) {
			if (sent < cmp && inflight < 4) {
				size_t n = cmp - sent < win ? (size_t)(cmp - sent) : win;

				if (exs_send(fd, buf, n, EXS_CREDIT_WAIT, q, NULL, mh)) {
					perror("exs_send");
					return 1;
				}
				sent += n;
				inflight++;
				continue;
			}
			if (exs_qdequeue(q, &ev, 1, NULL) != 1 || ev.exs_evt_errno) {
				fprintf(stderr, "send event: %s\n", strerror(ev.exs_evt_errno));
				return 1;
			}
			done += ev.exs_evt_union.exs_evt_xfer.exs_evt_length;
			inflight--;
		}
		report("send exs_send", done, now() - t0, NULL);
		exs_mderegister(mh, 0);
		exs_qdelete(q);
	}
	exs_blocking_close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	unsigned long long cmp = 0;
	int retry = 0, opt;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 5 && !strcmp(argv[1], "make"))
		return make(argv[2], strtoull(argv[3], NULL, 0), strtoull(argv[4], NULL, 0));
	if (argc == 3 && !strcmp(argv[1], "sum"))
		return file_sum(argv[2]);
	if (argc < 5 || (strcmp(argv[1], "recv") && strcmp(argv[1], "send")))
		goto usage;
	optind = 5;
	while ((opt = getopt(argc, argv, "c:r:")) != -1) {
		if (opt == 'c')
			cmp = strtoull(optarg, NULL, 0);
		else if (opt == 'r')
			retry = atoi(optarg);
		else
			goto usage;
	}
	if (exs_init(EXS_VERSION)) {
		perror("exs_init");
		return 1;
	}
	if (!strcmp(argv[1], "recv"))
		return recv_side(argv[2], atoi(argv[3]), strtoull(argv[4], NULL, 0), cmp);
	return send_side(argv[2], atoi(argv[3]), argv[4], cmp, retry);
usage:
	fprintf(stderr, "usage: exs_sfxfer make FILE BYTES SEED | sum FILE |\n"
			"       recv ADDR PORT BYTES [-c BYTES] | send ADDR PORT FILE [-c BYTES] [-r SECS]\n");
	return 2;
}
