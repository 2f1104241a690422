/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs_exhaust: libexs when a resource runs out, in one process connected
 * to itself (run it under `ulimit -l 1024`: siw counts pinned pages even
 * for root, rxe only for a user without CAP_IPC_LOCK).
 *
 *   exs_exhaust ADDR PORT [CASE]...   (default: memlock qdepth emfile)
 *       memlock:  exs_mregister of 16 MiB fails with ENOMEM, 64 KiB works;
 *       implicit: exs_send, exs_recv, exs_sendmsg, exs_recvmsg and
 *                 persistent ones of 4 MiB with EXS_MHANDLE_UNREGISTERED fail
 *                 at once with ENOMEM and post no event; a small transfer
 *                 works afterwards (uses PORT+1 for a SOCK_SEQPACKET pair);
 *       qdepth:   a queue of depth 1 takes 2 x 200 transfer events, none lost
 *                 (posted as far as the credits allow, EBUSY past them);
 *       emfile:   exs_socket fails with EMFILE once 65,536 are open;
 *       regions:  exs_mregister of 64-byte regions, each pinning a page,
 *                 until RLIMIT_MEMLOCK: ENOMEM; a connect then fails with
 *                 ENOMEM (its own registration); after 64 are deregistered,
 *                 both work again (no spare connections: EXS_SPARE_QPS=0);
 *       nofile:   alone, under `ulimit -n` (a server child on PORT): a
 *                 process out of descriptors before it first uses the device
 *                 fails its connect with EMFILE; a server out of them
 *                 refuses the request (the client sees ECONNREFUSED) and its
 *                 accept keeps waiting; with a few descriptors free both
 *                 work, and later connections need none.
 * Prints "PASS name ..." or "FAIL name ..." per check; exit 0 if all passed.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <exs.h>

#define NMSG 200
#define BIG (16u << 20)
#define IMPLICIT (4u << 20)
#define MR_MAX 4096	/* pages: 16 MiB */
#define NOFILE_MAX 4096

static int failed;
static struct sockaddr_in sa = { .sin_family = AF_INET };

static void result(bool ok, const char *name, const char *fmt, int a, int b)
{
	printf("%s %s ", ok ? "PASS" : "FAIL", name);
	printf(fmt, a, b);
	printf("\n");
	failed += !ok;
}

static long ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

static struct sockaddr_in port_plus(int k)
{
	struct sockaddr_in a = sa;

	a.sin_port = htons((uint16_t)(ntohs(sa.sin_port) + k));
	return a;
}

/* A connection of this process to itself: *cfd connects to a listener
 * (kept in *lfd) at PORT + k, *afd is its accepted end. */
static bool pair(int type, int k, exs_qhandle_t q, int *lfd, int *cfd, int *afd)
{
	struct sockaddr_in a = port_plus(k);
	exs_event_t ev;

	*lfd = exs_socket(AF_INET, type, 0);
	*cfd = exs_socket(AF_INET, type, 0);
	if (*lfd < 0 || *cfd < 0 || exs_bind(*lfd, (struct sockaddr *)&a, sizeof(a)) ||
	    exs_listen(*lfd, 4) ||
	    exs_connect(*cfd, (struct sockaddr *)&a, sizeof(a), 0, NULL, q, NULL) ||
	    (*afd = exs_blocking_accept(*lfd, NULL, NULL)) < 0 ||
	    exs_qdequeue(q, &ev, 1, NULL) != 1 || ev.exs_evt_errno) {
		printf("FAIL setup: %s\n", strerror(errno));
		return false;
	}
	return true;
}

/* The events waiting in q (for up to ms), counted; their errnos in *errs. */
static int drain(exs_qhandle_t q, int ms, int *errs)
{
	struct timeval tmo = { ms / 1000, ms % 1000 * 1000 };
	exs_event_t ev[8];
	int n, got = 0;

	*errs = 0;
	while ((n = exs_qdequeue(q, ev, 8, &tmo)) > 0) {
		for (int i = 0; i < n; i++)
			*errs += ev[i].exs_evt_errno != 0;
		got += n;
		tmo = (struct timeval){ 0, 100000 };
	}
	return got;
}

/* One byte each way on a connection: both events arrive without an errno. */
static bool small_xfer(int from, int to, exs_qhandle_t q)
{
	static char s = 'x', r;
	int errs;

	r = 0;
	if (exs_recv(to, &r, 1, 0, q, NULL, EXS_MHANDLE_UNREGISTERED) ||
	    exs_send(from, &s, 1, 0, q, NULL, EXS_MHANDLE_UNREGISTERED))
		return false;
	return drain(q, 5000, &errs) == 2 && !errs && r == 'x';
}

static void memlock(void)
{
	char *big = calloc(1, BIG);
	static char small[65536];
	exs_mhandle_t mh;
	int err;

	/* the device is in use now, so registration pins at once */
	errno = 0;
	mh = big ? exs_mregister(big, BIG, 0) : EXS_MHANDLE_INVALID;
	err = errno;
	result(mh == EXS_MHANDLE_INVALID && err == ENOMEM, "memlock",
	       "16 MiB past RLIMIT_MEMLOCK: %d (ENOMEM is %d)", err, ENOMEM);
	mh = exs_mregister(small, sizeof(small), 0);
	result(mh != EXS_MHANDLE_INVALID && !exs_mderegister(mh, 0), "memlock",
	       "a small region still registers (%d, %d)", 0, 0);
	free(big);
}

/* One implicit registration past RLIMIT_MEMLOCK: -1, ENOMEM, at once. */
static void implicit_one(const char *what, int ret, int err, const struct timespec *t0)
{
	long ms = ms_since(t0);
	char name[64];

	snprintf(name, sizeof(name), "implicit %s", what);
	result(ret == -1 && err == ENOMEM && ms < 2000, name,
	       "of 4 MiB unregistered: errno %d (ENOMEM is 12) after %d ms", err, (int)ms);
}

static void implicit(int cfd, int afd, exs_qhandle_t q)
{
	char *big = calloc(1, IMPLICIT);
	exs_mhandle_t un[2] = { EXS_MHANDLE_UNREGISTERED, EXS_MHANDLE_UNREGISTERED };
	struct iovec iov[2];
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = 2 };
	struct timespec t0;
	int lfd, pc, pa, ret, errs, got;

	if (!big || !pair(SOCK_SEQPACKET, 1, q, &lfd, &pc, &pa)) {
		failed++;
		return;
	}
	iov[0] = (struct iovec){ big, IMPLICIT / 2 };
	iov[1] = (struct iovec){ big + IMPLICIT / 2, IMPLICIT / 2 };
#define TRY(what, call)                                \
	do {                                           \
		clock_gettime(CLOCK_MONOTONIC, &t0);   \
		errno = 0;                             \
		ret = (int)(call);                     \
		implicit_one(what, ret, errno, &t0);   \
	} while (0)
	TRY("exs_send", exs_send(cfd, big, IMPLICIT, 0, q, NULL, EXS_MHANDLE_UNREGISTERED));
	TRY("exs_recv", exs_recv(afd, big, IMPLICIT, 0, q, NULL, EXS_MHANDLE_UNREGISTERED));
	TRY("exs_sendmsg", exs_sendmsg(cfd, &msg, 0, q, NULL, un));
	TRY("exs_recvmsg", exs_recvmsg(afd, &msg, 0, q, NULL, un));
	TRY("persistent send",
	    exs_send(pc, big, IMPLICIT, EXS_PERSISTENT, q, NULL, EXS_MHANDLE_UNREGISTERED));
	TRY("persistent recv",
	    exs_recv(pa, big, IMPLICIT, EXS_PERSISTENT, q, NULL, EXS_MHANDLE_UNREGISTERED));
#undef TRY
	got = drain(q, 300, &errs);
	result(got == 0, "implicit", "no event follows a refused call (%d came, %d with an errno)",
	       got, errs);
	result(small_xfer(cfd, afd, q), "implicit",
	       "SOCK_STREAM: a 1-byte send and receive complete afterwards (%d, %d)", 0, 0);
	result(small_xfer(pc, pa, q), "implicit",
	       "SOCK_SEQPACKET: a 1-byte send and receive complete afterwards (%d, %d)", 0, 0);
	exs_blocking_close(pc);
	exs_blocking_close(pa);
	exs_blocking_close(lfd);
	free(big);
}

/*
 * qdepth: the queue grows past its depth of 1; every event arrives.
 * Each round posts receives and sends until the credits run out (the
 * guide's EBUSY), lets their completions pile up undequeued, then
 * takes them all at once; the bytes must arrive in order.
 */
static void qdepth(int cfd, int afd, exs_qhandle_t q)
{
	static char sbuf[NMSG], rbuf[NMSG];
	int n = 0, sends = 0, recvs = 0, bad = 0, pr = 0, ps = 0, peak = 0, stalls = 0;

	for (int i = 0; i < NMSG; i++)
		sbuf[i] = (char)(i + 1);
	while (!bad && sends + recvs < 2 * NMSG) {
		static exs_event_t evs[2 * NMSG];
		struct timeval tmo = { 0, 300000 };
		int got;

		for (; pr < NMSG && !exs_recv(afd, rbuf + pr, 1, 0, q, NULL,
					      EXS_MHANDLE_UNREGISTERED); pr++)
			;
		if (pr < NMSG && errno != EBUSY)
			bad++, printf("qdepth: recv %d: %s\n", pr, strerror(errno));
		for (; ps < NMSG && !exs_send(cfd, sbuf + ps, 1, 0, q, NULL,
					      EXS_MHANDLE_UNREGISTERED); ps++)
			;
		if (ps < NMSG && errno != EBUSY)
			bad++, printf("qdepth: send %d: %s\n", ps, strerror(errno));
		/* completions pile up undequeued, then all are taken at once; a
		 * receive completes only once its send was posted (a later round) */
		usleep(200000);
		got = 0;
		while ((n = exs_qdequeue(q, evs, 2 * NMSG, &tmo)) > 0) {
			peak = n > peak ? n : peak;
			got += n;
			for (int i = 0; i < n; i++) {
				bad += evs[i].exs_evt_errno != 0;
				sends += evs[i].exs_evt_type == EXS_EVT_SEND;
				recvs += evs[i].exs_evt_type == EXS_EVT_RECV;
			}
		}
		if (n < 0)
			bad++, printf("qdepth: dequeue: %s\n", strerror(errno));
		if (!got && ++stalls == 20)
			bad++, printf("qdepth: no event in 20 rounds at %d/%d posted\n", pr, ps);
	}
	bad += memcmp(sbuf, rbuf, NMSG) != 0;
	result(!bad && sends == NMSG && recvs == NMSG && peak > 1, "qdepth",
	       "depth 1, got %d send and %d receive events of 200 each, bytes in order",
	       sends, recvs);
	printf("qdepth: at most %d events taken at once from the queue of depth 1\n", peak);
}

/* emfile: the socket table is full at 65,536 (this process's sockets are
 * the lowest numbers, so it counts from the next free one) */
static void emfile(void)
{
	int n, err, first = exs_socket(AF_INET, SOCK_STREAM, 0);

	for (n = first + 1; exs_socket(AF_INET, SOCK_STREAM, 0) >= 0; n++)
		;
	err = errno;
	result(first >= 0 && err == EMFILE && n == 65536, "emfile",
	       "exs_socket failed with %d after %d open", err, n);
}

/* A connect to the listener at PORT + k, its event's errno (or -1 for
 * none within 10 s); the time it took in *ms. */
static int connect_errno(int fd, int k, exs_qhandle_t q, long *ms)
{
	struct sockaddr_in a = port_plus(k);
	struct timeval tmo = { 10, 0 };
	struct timespec t0;
	exs_event_t ev;
	int err;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (exs_connect(fd, (struct sockaddr *)&a, sizeof(a), 0, NULL, q, NULL))
		err = errno;
	else
		err = exs_qdequeue(q, &ev, 1, &tmo) == 1 ? ev.exs_evt_errno : -1;
	*ms = ms_since(&t0);
	return err;
}

/* A connect to the listener lfd (at PORT + k) with an accept posted on it:
 * the connect event's errno (-1 for none within 10 s) and the time it
 * took; *afd the accepted socket if it worked. */
static int connect_accept(int lfd, int k, exs_qhandle_t q, long *ms, int *afd)
{
	static struct exs_acceptaddr aa;
	struct sockaddr_in a = port_plus(k);
	struct timeval tmo = { 10, 0 };
	struct timespec t0;
	exs_event_t ev;
	int fd = exs_socket(AF_INET, SOCK_STREAM, 0), err = -1;
	static bool posted;

	*afd = -1;
	if (!posted && exs_accept(lfd, &aa, 1, 0, q))
		return errno;
	posted = true;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (fd < 0 || exs_connect(fd, (struct sockaddr *)&a, sizeof(a), 0, NULL, q, NULL))
		return errno;
	while ((err == -1 || (!err && *afd < 0)) && exs_qdequeue(q, &ev, 1, &tmo) == 1) {
		if (ev.exs_evt_type == EXS_EVT_CONNECT)
			err = ev.exs_evt_errno;
		if (ev.exs_evt_type == EXS_EVT_ACCEPT && !ev.exs_evt_errno) {
			*afd = ev.exs_evt_union.exs_evt_accept.exs_evt_new_socket;
			posted = false;
		}
	}
	*ms = ms_since(&t0);
	if (err == 0 && *afd >= 0 && small_xfer(fd, *afd, q))
		return 0;
	return err ? err : -2;
}

/*
 * regions: many small registrations, each pinning its page once more,
 * until RLIMIT_MEMLOCK stops them (the devices' max_mr, 524,287 on rxe and
 * 1,024,000 on siw, is out of reach in the guest); then a connect, whose
 * own registration fails. 64 deregistered, both work again.
 */
static void regions(exs_qhandle_t q)
{
	static char page[4096] __attribute__((aligned(4096)));
	static exs_mhandle_t mh[MR_MAX];
	struct sockaddr_in a = port_plus(2);
	struct timespec t0;
	long ms = 0;
	int n, err, lfd, afd, i;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (n = 0; n < MR_MAX; n++) {
		errno = 0;
		mh[n] = exs_mregister(page + n % 64 * 64, 64, 0);
		if (mh[n] == EXS_MHANDLE_INVALID)
			break;
	}
	err = errno;
	printf("regions: %d registered in %ld ms, then errno %d (%s)\n", n, ms_since(&t0), err,
	       strerror(err));
	result(n < MR_MAX && err == ENOMEM, "regions",
	       "exs_mregister of 64 bytes number %d fails with errno %d (ENOMEM)", n + 1, err);
	lfd = exs_socket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0 || exs_bind(lfd, (struct sockaddr *)&a, sizeof(a)) || exs_listen(lfd, 4)) {
		printf("FAIL regions: listener: %s\n", strerror(errno));
		failed++;
		return;
	}
	err = connect_accept(lfd, 2, q, &ms, &afd);
	result(err == ENOMEM && ms < 5000, "regions",
	       "then a connect fails with errno %d (ENOMEM) after %d ms", err, (int)ms);
	for (i = 0; i < 64 && n > 0; i++)
		exs_mderegister(mh[--n], 0);
	errno = 0;
	mh[n] = exs_mregister(page, 64, 0);
	result(mh[n] != EXS_MHANDLE_INVALID, "regions",
	       "64 deregistered, a region registers again (errno %d, %d)", errno, 0);
	n += mh[n] != EXS_MHANDLE_INVALID;
	err = connect_accept(lfd, 2, q, &ms, &afd);
	result(!err, "regions", "and a connect works and carries data (errno %d, %d ms)", err,
	       (int)ms);
	for (i = err = 0; i < n; i++)
		err += exs_mderegister(mh[i], 0) != 0;
	result(!err, "regions", "all %d deregistered (%d failed)", n, err);
}

/* ---- nofile: a server child and this process as client */

static int fill_fds(int *fds)
{
	int n = 0;

	while (n < NOFILE_MAX && (fds[n] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
		n++;
	return n;
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n - 3; /* . .. and the DIR's own */
}

static char cmd_wait(int rfd)
{
	char c = 0;

	return read(rfd, &c, 1) == 1 ? c : 0;
}

/* The server: listens at PORT, runs out of descriptors, keeps an accept
 * posted; 'f' frees 8 descriptors; "accepted" or "accept failed" per
 * event on the way back ('a' or 'x'); 'q' ends it. */
static int nofile_server(int rfd, int wfd)
{
	static int fds[NOFILE_MAX];
	struct exs_acceptaddr aa = { 0 };
	struct pollfd pf[2];
	exs_qhandle_t q;
	int lfd, n;

	if (exs_init(EXS_VERSION1) || (q = exs_qcreate(8)) == EXS_QHANDLE_INVALID ||
	    (lfd = exs_socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
	    exs_bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || exs_listen(lfd, 4) ||
	    exs_accept(lfd, &aa, 1, 0, q)) {
		printf("server: setup: %s\n", strerror(errno));
		return 1;
	}
	pf[0] = (struct pollfd){ .fd = rfd, .events = POLLIN };
	pf[1] = (struct pollfd){ .fd = exs_qfd(q), .events = POLLIN };
	printf("server: listening, %d descriptors in use\n", count_fds());
	n = fill_fds(fds);
	if (write(wfd, "r", 1) != 1)
		return 1;
	for (;;) {
		exs_event_t ev;
		char c;

		if (poll(pf, 2, 60000) <= 0)
			return 1;
		if (pf[1].revents && exs_qdequeue(q, &ev, 1, &(struct timeval){ 0 }) == 1) {
			c = ev.exs_evt_errno ? 'x' : 'a';
			if (!ev.exs_evt_errno)
				exs_accept(lfd, &aa, 1, 0, q);
			if (write(wfd, &c, 1) != 1)
				return 1;
		}
		if (!pf[0].revents)
			continue;
		c = cmd_wait(rfd);
		if (c == 'f')
			for (int i = 0; i < 8 && n > 0; i++)
				close(fds[--n]);
		else
			return 0;
	}
}

static void nofile(void)
{
	static int fds[NOFILE_MAX];
	int c2s[2], s2c[2], n, err, fd, before, after, up = 0;
	exs_qhandle_t q;
	pid_t pid;
	long ms;
	char c;

	if (pipe2(c2s, O_CLOEXEC) || pipe2(s2c, O_CLOEXEC) || (pid = fork()) < 0) {
		printf("FAIL nofile: fork: %s\n", strerror(errno));
		failed++;
		return;
	}
	if (pid == 0)
		_exit(nofile_server(c2s[0], s2c[1]));
	if (cmd_wait(s2c[0]) != 'r' || exs_init(EXS_VERSION1) ||
	    (q = exs_qcreate(8)) == EXS_QHANDLE_INVALID ||
	    (fd = exs_socket(AF_INET, SOCK_STREAM, 0)) < 0) {
		printf("FAIL nofile: client setup: %s\n", strerror(errno));
		failed++;
		kill(pid, SIGKILL);
		return;
	}
	/* this process, out of descriptors before its first connection */
	n = fill_fds(fds);
	err = connect_errno(fd, 0, q, &ms);
	result(err == EMFILE && ms < 5000, "nofile",
	       "a client out of descriptors: its first connect fails with errno %d (EMFILE) "
	       "after %d ms", err, (int)ms);
	for (int i = 0; i < 8; i++)
		close(fds[--n]);
	/* the server, out of descriptors when the request comes */
	err = connect_errno(fd, 0, q, &ms);
	result(err == ECONNREFUSED && ms < 5000, "nofile",
	       "a server out of descriptors refuses: the connect fails with errno %d "
	       "(ECONNREFUSED) after %d ms", err, (int)ms);
	c = 0;
	{
		struct pollfd pf = { .fd = s2c[0], .events = POLLIN };

		if (poll(&pf, 1, 500) == 1)
			c = cmd_wait(s2c[0]);
	}
	result(c == 0, "nofile", "the server's accept kept waiting (no accept event: %d, %d)", c,
	       0);
	if (write(c2s[1], "f", 1) != 1)
		failed++;
	usleep(100000);
	err = connect_errno(fd, 0, q, &ms);
	c = err ? 0 : cmd_wait(s2c[0]);
	result(!err && c == 'a', "nofile",
	       "with 8 descriptors free on both sides, the connect works (errno %d, %d ms)", err,
	       (int)ms);
	/* later connections take no descriptor: all of them work while this
	 * process has none free */
	while (n > 0)
		close(fds[--n]);
	before = count_fds();
	n = fill_fds(fds);
	for (int i = 0; i < 4; i++) {
		int s = exs_socket(AF_INET, SOCK_STREAM, 0);

		err = s < 0 ? errno : connect_errno(s, 0, q, &ms);
		up += !err && cmd_wait(s2c[0]) == 'a';
	}
	while (n > 0)
		close(fds[--n]);
	after = count_fds();
	printf("nofile: %d descriptors in use with 1 connection, %d with 5\n", before, after);
	result(up == 4, "nofile",
	       "with no descriptor free, %d of 4 more connects work (errno of the last %d)", up,
	       err);
	if (write(c2s[1], "q", 1) != 1)
		failed++;
	waitpid(pid, NULL, 0);
}

int main(int argc, char **argv)
{
	static const char *const dflt[] = { "memlock", "qdepth", "emfile" };
	const char *const *cases = dflt;
	int ncases = 3, lfd, cfd, afd;
	exs_qhandle_t q;

	if (argc < 3 || inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1) {
		fprintf(stderr, "usage: exs_exhaust ADDR PORT [memlock|implicit|qdepth|emfile|"
				"regions|nofile]...\n");
		return 2;
	}
	sa.sin_port = htons((uint16_t)atoi(argv[2]));
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc > 3) {
		cases = (const char *const *)argv + 3;
		ncases = argc - 3;
	}
	if (ncases == 1 && !strcmp(cases[0], "nofile")) {
		nofile();
		return failed ? 1 : 0;
	}
	/* no spare connection: it would hold pinned pages, and take the place
	 * of a connect that must fail (regions) */
	setenv("EXS_SPARE_QPS", "0", 1);
	q = exs_init(EXS_VERSION1) ? EXS_QHANDLE_INVALID : exs_qcreate(1);
	if (q == EXS_QHANDLE_INVALID || !pair(SOCK_STREAM, 0, q, &lfd, &cfd, &afd))
		return 1;
	for (int i = 0; i < ncases; i++) {
		if (!strcmp(cases[i], "memlock"))
			memlock();
		else if (!strcmp(cases[i], "implicit"))
			implicit(cfd, afd, q);
		else if (!strcmp(cases[i], "qdepth"))
			qdepth(cfd, afd, q);
		else if (!strcmp(cases[i], "emfile"))
			emfile();
		else if (!strcmp(cases[i], "regions"))
			regions(q);
		else {
			fprintf(stderr, "exs_exhaust: unknown case %s (nofile goes alone)\n",
				cases[i]);
			return 2;
		}
	}
	return failed ? 1 : 0;
}
