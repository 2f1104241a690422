/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The progress thread: one per process, started by exs_init(). It sleeps
 * in epoll on the exsd channel and on each device's completion channel,
 * and hands exsd's messages to broker.c and completions to sock.c, which
 * turn them into state changes and user events. It takes exs_g.lock only
 * while it processes.
 */
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "exs_int.h"

int exs_progress_add_fd(int fd, void *tag)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = tag };

	/* tag NULL = the exsd channel; otherwise a struct exs_dev */
	if (!tag)
		ev.data.u64 = (uint64_t)(uint32_t)fd | (1ull << 63);
	return epoll_ctl(exs_g.epfd, EPOLL_CTL_ADD, fd, &ev) ? -errno : 0;
}

void exs_progress_del_fd(int fd)
{
	epoll_ctl(exs_g.epfd, EPOLL_CTL_DEL, fd, NULL);
}

/* the spins begun when the progress thread last looked (its own) */
static unsigned seen_gen;

/* Waits that application threads came to, counted without the lock: each
 * spin begun (spin_gen) and each wait that found its events there (looks).
 * A change means somebody polls the CQs, or would have. */
static unsigned waits_begun(void)
{
	return __atomic_load_n(&exs_g.spin_gen, __ATOMIC_RELAXED) +
	       __atomic_load_n(&exs_g.looks, __ATOMIC_RELAXED);
}

/* Lock held: an application thread polls the CQs in its wait, or came to
 * a wait since the progress thread last looked (a spin, or a LOOK: a wait
 * that found its events there because this thread had just taken them,
 * and that would have polled for them otherwise); `look` makes this the
 * look. */
static bool spun_lately(bool look)
{
	unsigned gen = waits_begun();
	bool spun = __atomic_load_n(&exs_g.spinners, __ATOMIC_RELAXED) || gen != seen_gen;

	if (look)
		seen_gen = gen;
	return spun;
}

/* Lock held: an application thread polls the CQs in its wait, or began to
 * since the progress thread last looked, and none sleeps waiting for a
 * CQ's event: a CQ that raised one may stay quiet. */
static bool polled_by_waiters(void)
{
	return !__atomic_load_n(&exs_g.sleepers, __ATOMIC_SEQ_CST) && spun_lately(false);
}

/* Lock held: every CQ raises its event again; what came meanwhile is taken. */
void exs_progress_arm(void)
{
	if (exs_g.ndisarmed && exs_conn_arm_all())
		exs_sock_progress_all();
}

static void dev_input(struct exs_dev *d)
{
	struct ibv_cq *cq;
	void *ctx;

	while (!ibv_get_cq_event(d->chan, &cq, &ctx)) {
		struct exs_scq *q;

		ibv_ack_cq_events(cq, 1);
		pthread_mutex_lock(&exs_g.lock);
		/* a CQ whose last connection went is gone: check it is still one */
		q = exs_cq_of(d, cq);
		if (q) {
			exs_cq_disarmed(q);
			/* a thread that polls in its wait takes the next ones */
			if (!polled_by_waiters())
				exs_cq_arm(q);
			exs_sock_progress_cq(q);
		}
		pthread_mutex_unlock(&exs_g.lock);
	}
}

/* The exsd channel is readable: dispatch what it brings. */
static void ctl_input(int fd)
{
	uint8_t buf[EXS_CTL_MAX_MSG];
	ExsCtl__Msg *m;
	ssize_t n;
	int ret;

	do {
		n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		pthread_mutex_lock(&exs_g.lock);
		ret = exs_ctl_take(fd, buf, n, &m);
		if (ret > 0) {
			exs_broker_input(m);
			/* completions it took on the way; pollers: a connection
			 * request, say */
			exs_sock_settle();
		}
		pthread_mutex_unlock(&exs_g.lock);
	} while (ret >= 0 && fd == __atomic_load_n(&exs_g.ctl_fd, __ATOMIC_RELAXED));
}

void exs_debug(const char *fmt, ...)
{
	struct exs_nopipe g;
	char line[256];
	va_list ap;
	int n;

	n = snprintf(line, sizeof(line), "libexs[%d]: ", (int)getpid());
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	n = (int)strlen(line);
	line[n++] = '\n';
	/* stderr may be a pipe or the journal's socket, and gone */
	exs_nopipe_begin(&g);
	if (write(STDERR_FILENO, line, (size_t)n) < 0) {
		/* nowhere else to say it */
	}
	exs_nopipe_end(&g);
}

uint64_t exs_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void exs_progress_wake(void)
{
	uint64_t one = 1;

	if (write(exs_g.wakefd, &one, sizeof(one)) < 0) {
		/* the counter is full: the thread is awake anyway */
	}
}

/* A thread came to a wait, or found nothing to take: counted before the
 * lock is taken, so a send after the count is not coalesced (conn.c's
 * may_cork) and one before it is sent by uncork_all. true: a chunk is open. */
static bool idle_count(void)
{
	__atomic_add_fetch(&exs_g.idle_gen, 1, __ATOMIC_SEQ_CST);
	return __atomic_load_n(&exs_g.ncorked, __ATOMIC_SEQ_CST);
}

/* Lock held: every open chunk goes; what that ends is reported. */
static void uncork_all(void)
{
	exs_conn_uncork_all();
	exs_sock_settle();
}

/*
 * An application thread waiting for events polls the CQs itself
 * (EXS_WAIT_ADAPTIVE, EXS_WAIT_BUSY_POLL): BEGIN, ONCE per poll, END. While
 * threads poll, CQ events are not re-armed: the progress thread would only
 * wake to find the CQ drained. A waiter about to sleep re-arms them (ARM),
 * and the progress thread takes them back within EXS_REARM_US when nobody
 * polls, for the completions that no thread waits for.
 */
void exs_progress_poll(int phase)
{

	switch (phase) {
	case EXS_POLL_BEGIN:
		__atomic_add_fetch(&exs_g.spinners, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&exs_g.spin_gen, 1, __ATOMIC_RELAXED);
		return;
	case EXS_POLL_END:
		__atomic_sub_fetch(&exs_g.spinners, 1, __ATOMIC_RELAXED);
		return;
	case EXS_POLL_ARM:
		/* counted without the lock, and AWAKE likewise: the progress
		 * thread may hold it for seconds (a siw QP's destroy), and a
		 * waiter whose event has come must not wait for that. A re-arm
		 * the counting races past is made up within EXS_REARM_US. */
		__atomic_add_fetch(&exs_g.sleepers, 1, __ATOMIC_SEQ_CST);
		if (!__atomic_load_n(&exs_g.ndisarmed, __ATOMIC_SEQ_CST))
			return;
		pthread_mutex_lock(&exs_g.lock);
		exs_progress_arm();
		pthread_mutex_unlock(&exs_g.lock);
		return;
	case EXS_POLL_LOOK:
		__atomic_add_fetch(&exs_g.looks, 1, __ATOMIC_RELAXED);
		return;
	case EXS_POLL_AWAKE:
		__atomic_sub_fetch(&exs_g.sleepers, 1, __ATOMIC_SEQ_CST);
		return;
	case EXS_POLL_IDLE:
		if (idle_count()) {
			pthread_mutex_lock(&exs_g.lock);
			uncork_all();
			pthread_mutex_unlock(&exs_g.lock);
		}
		return;
	default:
		break;
	}
	if (pthread_mutex_trylock(&exs_g.lock))
		return; /* someone is at it already */
	exs_sock_progress_all();
	pthread_mutex_unlock(&exs_g.lock);
}

void exs_progress_idle(void)
{
	if (idle_count())
		uncork_all();
}

/* EXS_F_SETCOMPTHREADCPU (guide §7.4): the progress thread is the
 * completion thread of every connection in the process, so the pinning is
 * the process's. Returns the old CPU (INT_MAX: not pinned) or -errno. */
int exs_progress_pin(int cpu)
{
	cpu_set_t set;
	int old = exs_g.comp_cpu, ret;

	if (cpu != INT_MAX && (cpu < 0 || cpu >= CPU_SETSIZE))
		return -EINVAL;
	CPU_ZERO(&set);
	if (cpu == INT_MAX) {
		if (sched_getaffinity(0, sizeof(set), &set)) /* the process's own CPUs */
			return -errno;
	} else {
		CPU_SET(cpu, &set);
	}
	ret = pthread_setaffinity_np(exs_g.thread, sizeof(set), &set);
	if (ret)
		return -ret; /* EINVAL: no such CPU online or allowed */
	exs_g.comp_cpu = cpu;
	return old;
}

/* EXS_FD_BUSYPOLL connections (guide §7.5): poll the CQs (shared: the
 * others' completions come with theirs). */
static void busy_poll(void)
{
	pthread_mutex_lock(&exs_g.lock);
	exs_sock_progress_all();
	pthread_mutex_unlock(&exs_g.lock);
}

static bool ticking(void)
{
	return __atomic_load_n(&exs_g.nclosing, __ATOMIC_RELAXED) ||
	       __atomic_load_n(&exs_g.nprobing, __ATOMIC_RELAXED);
}

/*
 * While application threads keep waiting (polling the CQs themselves), the
 * progress thread has nothing to do but look again later, and each look
 * wakes it: where the waiters' threads fill the CPUs, that wake-up takes a
 * CPU from one of them (in a 2-CPU guest a ping-pong's waiter was preempted
 * once per look, 500 times a second, and the round trips that met one took
 * hundreds of microseconds). So each whole look or quiet sleep (since
 * `since`) after which waiters were found makes the next one twice as long,
 * up to EXS_QUIET_MAX_MS; one that found none starts again from the
 * shortest.
 */
static int longer(int ms, uint64_t since, uint64_t now)
{
	if (now - since < (uint64_t)ms) /* woken early: not a whole one */
		return ms;
	return ms * 2 < EXS_QUIET_MAX_MS ? ms * 2 : EXS_QUIET_MAX_MS;
}

static void *progress_main(void *arg)
{
	struct epoll_event ev[16];
	uint64_t v, quiet_since = 0, uncorked_ms = 0;
	unsigned looked = 0;
	/* busy: when the look under way began (0: polling); its time left */
	uint64_t look_ms = 0;
	int look_len = EXS_BUSY_ASIDE_MS, look_left = EXS_BUSY_ASIDE_MS;
	/* how long it sleeps between two checks while CQs are disarmed */
	int quiet_ms = EXS_REARM_US / 1000;
	int n, i;

	(void)arg;
	for (;;) {
		bool busy = __atomic_load_n(&exs_g.nbusypoll, __ATOMIC_RELAXED), polling = busy;
		bool disarmed = __atomic_load_n(&exs_g.ndisarmed, __ATOMIC_RELAXED);

		if (!disarmed) /* re-armed meanwhile (a waiter that slept): start short */
			quiet_ms = EXS_REARM_US / 1000;

		if (busy) {
			/* An application thread polls in its wait, or came to
			 * one since the last look and found its events there
			 * (taken by this thread's poll, as it would be again): it
			 * takes the completions itself, and a second poller would
			 * only contend for exs_g.lock and for a CPU that a
			 * ping-pong's two waiters need on a small machine. It
			 * looks again in EXS_BUSY_ASIDE_MS (longer while waiters
			 * keep coming: longer()) and polls once a
			 * whole look found no waiter: a 1 ms look took over
			 * whenever both waiters were off their CPUs for that long,
			 * and then kept them off. A waiter asleep armed the CQs
			 * (EXS_POLL_ARM), so their events wake this thread: its
			 * polls would only keep a CPU from the one that wakes
			 * the sleeper (a blocking call's wait took 1-8 ms).
			 * A CQ's event that wakes it early ends no look: judged
			 * over the few microseconds since, every early wake-up
			 * found no waiter and polled (a third busy thread on a
			 * ping-pong's two CPUs, about one poll and yield per
			 * round trip). */
			unsigned l = waits_begun();
			uint64_t now;

			if (__atomic_load_n(&exs_g.spinners, __ATOMIC_RELAXED) || l != looked ||
			    __atomic_load_n(&exs_g.sleepers, __ATOMIC_SEQ_CST)) {
				polling = false;
				now = exs_now_ms();
				if (look_ms)
					look_len = longer(look_len, look_ms, now);
				look_ms = now; /* a new look */
				look_left = look_len;
			} else if (look_ms && (now = exs_now_ms()) - look_ms < (uint64_t)look_len) {
				polling = false; /* the look goes on */
				look_left = (int)(look_len - (int)(now - look_ms));
			} else {
				look_ms = 0;
				look_len = EXS_BUSY_ASIDE_MS;
			}
			looked = l;
		}
		bool corked = __atomic_load_n(&exs_g.ncorked, __ATOMIC_SEQ_CST);
		/* tick while sockets close or probe their peer: no deadline is
		 * missed; every millisecond while a chunk is open (conn.c's
		 * cork_add): no coalesced send waits longer. A chunk opened
		 * while this thread sleeps longer wakes it (deaf). */
		int tmo = polling ? 0 : corked ? 1 : busy ? look_left
			  : disarmed ? quiet_ms : ticking() ? 100 : -1;

		if (tmo < 0 || tmo > 1) {
			__atomic_store_n(&exs_g.deaf, true, __ATOMIC_SEQ_CST);
			if (__atomic_load_n(&exs_g.ncorked, __ATOMIC_SEQ_CST))
				corked = true, tmo = 1;
		}
		n = epoll_wait(exs_g.epfd, ev, 16, tmo);
		__atomic_store_n(&exs_g.deaf, false, __ATOMIC_RELAXED);
		if (polling) {
			busy_poll();
			/* where pollers outnumber CPUs, the peer's or the
			 * application's thread runs now, not at the next tick */
			sched_yield();
		}
		for (i = 0; i < n; i++) {
			if (ev[i].data.u64 & (1ull << 63))
				ctl_input((int)(uint32_t)ev[i].data.u64);
			else if (ev[i].data.ptr == &exs_g.wakefd) {
				if (read(exs_g.wakefd, &v, sizeof(v)) < 0)
					continue;
			} else if (ev[i].data.ptr)
				dev_input(ev[i].data.ptr);
		}
		if (disarmed && !polling) { /* nobody may be polling them: take them back */
			uint64_t now = exs_now_ms();

			pthread_mutex_lock(&exs_g.lock);
			if (spun_lately(true)) {
				quiet_ms = longer(quiet_ms, quiet_since, now);
				quiet_since = now;
			} else if (__atomic_load_n(&exs_g.sleepers, __ATOMIC_SEQ_CST) ||
				   now - quiet_since >= EXS_REARM_US / 1000) {
				exs_progress_arm();
				quiet_ms = EXS_REARM_US / 1000;
			}
			pthread_mutex_unlock(&exs_g.lock);
		}
		if (corked) {
			uint64_t now = exs_now_ms();

			if (now != uncorked_ms) {
				uncorked_ms = now;
				pthread_mutex_lock(&exs_g.lock);
				uncork_all();
				pthread_mutex_unlock(&exs_g.lock);
			}
		}
		if (ticking() || __atomic_load_n(&exs_g.ctl_lost, __ATOMIC_RELAXED)) {
			pthread_mutex_lock(&exs_g.lock);
			if (exs_g.ctl_lost) {
				exs_g.ctl_lost = false;
				exs_broker_ctl_lost();
			}
			exs_sock_tick(exs_now_ms());
			pthread_mutex_unlock(&exs_g.lock);
		}
	}
	return NULL;
}

int exs_progress_start(void)
{
	int ret;

	struct epoll_event wev = { .events = EPOLLIN, .data.ptr = &exs_g.wakefd };

	exs_g.epfd = epoll_create1(EPOLL_CLOEXEC);
	if (exs_g.epfd < 0)
		return -errno;
	exs_g.wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (exs_g.wakefd < 0 || epoll_ctl(exs_g.epfd, EPOLL_CTL_ADD, exs_g.wakefd, &wev))
		return -errno;
	ret = exs_thread_start(&exs_g.thread, progress_main, NULL, "exs-progress");
	if (ret) {
		close(exs_g.epfd);
		exs_g.epfd = -1;
		return -ret;
	}
	return 0;
}
