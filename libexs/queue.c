/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Event queues (guide §2.1, §11.2.6): a ring of exs_event_t per queue,
 * pre-sized to the depth asked for and grown only when a caller outruns it.
 * The public handle names one life of a queue (handle.c): a deleted queue's
 * handle is refused with EINVAL for ever. Queue objects are never returned
 * to the allocator, since a waiter or a started operation may still hold
 * one; the next exs_qcreate on the same slot reuses it under a new handle.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "exs_int.h"


void (*exs_queue_poll_hook)(int phase);

static struct exs_htab qtab = EXS_HTAB_INIT;

struct exs_queue *exs_queue_get(exs_qhandle_t h)
{
	struct exs_queue *q = exs_htab_get(&qtab, (uintptr_t)h, NULL);

	return q && __atomic_load_n(&q->live, __ATOMIC_ACQUIRE) ? q : NULL;
}

/* The queue named by h, locked, or NULL if h names no live queue. */
static struct exs_queue *lock_handle(exs_qhandle_t h)
{
	struct exs_queue *q = exs_htab_get(&qtab, (uintptr_t)h, NULL);

	if (!q)
		return NULL;
	pthread_mutex_lock(&q->lock);
	if (q->h == h && q->live)
		return q;
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

int exs_queue_hold(exs_qhandle_t h, struct exs_queue **ret_q)
{
	struct exs_queue *q = lock_handle(h);

	if (!q)
		return -EINVAL;
	q->refs++;
	pthread_mutex_unlock(&q->lock);
	*ret_q = q;
	return 0;
}

struct exs_queue *exs_queue_new(int depth)
{
	struct exs_queue *q;
	exs_event_t *ev;
	uint32_t idx;
	void *obj;
	int err;

	if (depth <= 0 || depth > EXS_MAX_QDEPTH) {
		errno = EINVAL;
		return NULL;
	}
	ev = calloc((size_t)depth, sizeof(*ev));
	if (!ev) {
		errno = ENOMEM;
		return NULL;
	}
	err = exs_htab_alloc(&qtab, &idx, &obj);
	if (err) {
		free(ev);
		errno = -err;
		return NULL;
	}
	q = obj;
	if (!q) {
		q = calloc(1, sizeof(*q));
		if (!q) {
			free(ev);
			exs_htab_release(&qtab, idx, NULL);
			errno = ENOMEM;
			return NULL;
		}
		pthread_mutex_init(&q->lock, NULL);
		pthread_condattr_t ca;
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&q->cond, &ca);
		pthread_condattr_destroy(&ca);
	}
	pthread_mutex_lock(&q->lock); /* a waiter of its last life may still look */
	q->idx = idx;
	q->ev = ev;
	q->cap = (unsigned)depth;
	q->head = q->count = q->refs = 0;
	q->spin_us = EXS_SPIN_START_US;
	q->wait = EXS_WAIT_ADAPTIVE;
	__atomic_store_n(&q->busy, false, __ATOMIC_RELAXED);
	q->sig = 0;
	q->used = false;
	q->efd = -1;
	q->h = (exs_qhandle_t)exs_htab_publish(&qtab, idx, q);
	__atomic_store_n(&q->live, true, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&q->lock);
	return q;
}

int exs_queue_delete(exs_qhandle_t h)
{
	struct exs_queue *q = lock_handle(h);

	if (!q)
		return -EINVAL;
	if (q->refs) {
		pthread_mutex_unlock(&q->lock);
		return -EBUSY;
	}
	exs_htab_kill(&qtab, (uintptr_t)h);
	__atomic_store_n(&q->live, false, __ATOMIC_RELEASE);
	__atomic_add_fetch(&q->posts, 1, __ATOMIC_RELEASE);
	free(q->ev);
	q->ev = NULL;
	q->cap = q->count = 0;
	if (q->efd >= 0)
		close(q->efd);
	q->efd = -1;
	pthread_cond_broadcast(&q->cond); /* waiters see their handle gone */
	pthread_mutex_unlock(&q->lock);
	exs_htab_release(&qtab, q->idx, q);
	return 0;
}

void exs_queue_ref(struct exs_queue *q)
{
	pthread_mutex_lock(&q->lock);
	q->refs++;
	pthread_mutex_unlock(&q->lock);
}

/*
 * Guide §7.5: a busy-polling completion thread never gives up the CPU, so
 * a completion reaches its queue without a wake-up. Here the waiter polls
 * in that thread's stead (the progress thread steps aside while one
 * does), so a waiter that gave up and slept would bring the wake-up back,
 * twice over: the CQ's event wakes the progress thread, which then wakes
 * the waiter. Where an adaptive wait's events take longer than its
 * ceiling (a 32 KiB ping-pong on rxe: 2-4 ms round trips), every wait
 * slept, and the ping-pong took 1.6-2.4 times as long as with waits that
 * spun it out (in a 2-CPU TCG guest). So once a busy-poll socket's
 * operation names a queue, its adaptive waits spin for their whole
 * length, as EXS_WAIT_BUSY_POLL's do; EXS_WAIT_NOTIFY still never spins.
 */
void exs_queue_mark_busy(struct exs_queue *q)
{
	/* atomic: the operation that marks it holds no lock of q */
	__atomic_store_n(&q->busy, true, __ATOMIC_RELAXED);
}

void exs_queue_unref(struct exs_queue *q)
{
	pthread_mutex_lock(&q->lock);
	if (q->refs)
		q->refs--;
	pthread_mutex_unlock(&q->lock);
}

/* Resize the ring to hold `depth` events; never below what is waiting. */
static int resize(struct exs_queue *q, unsigned depth)
{
	exs_event_t *n;

	if (depth < q->count)
		return -EBUSY;
	n = calloc(depth, sizeof(*n));
	if (!n)
		return -ENOMEM;
	for (unsigned i = 0; i < q->count; i++)
		n[i] = q->ev[(q->head + i) % q->cap];
	free(q->ev);
	q->ev = n;
	q->head = 0;
	q->cap = depth;
	return 0;
}

/*
 * exs_qfd: the eventfd is readable exactly while events wait. Its counter
 * goes to 1 when the first event comes and back to 0 when the last is
 * dequeued (q->lock held for both, so they cannot cross).
 */
static void efd_signal(struct exs_queue *q)
{
	uint64_t one = 1;

	if (q->efd >= 0 && write(q->efd, &one, sizeof(one)) < 0) {
		/* EAGAIN only: the counter is far from full, it is set already */
	}
}

static void efd_drain(struct exs_queue *q)
{
	uint64_t v;

	if (q->efd >= 0 && read(q->efd, &v, sizeof(v)) < 0) {
		/* EAGAIN: nothing was signalled */
	}
}

int exs_queue_fd(exs_qhandle_t h)
{
	struct exs_queue *q = lock_handle(h);
	int ret;

	if (!q)
		return -EINVAL;
	if (q->efd < 0) {
		q->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (q->efd < 0) {
			ret = -errno;
			pthread_mutex_unlock(&q->lock);
			return ret;
		}
		if (q->count)
			efd_signal(q);
	}
	ret = q->efd;
	pthread_mutex_unlock(&q->lock);
	return ret;
}

/* Post an event; drops the reference of the operation that posts it. */
void exs_queue_post(struct exs_queue *q, const exs_event_t *ev)
{
	int sig = 0;

	pthread_mutex_lock(&q->lock);
	if (!q->live)
		goto out;
	q->used = true;
	if (q->count == q->cap && resize(q, q->cap * 2))
		goto out; /* out of memory: nothing sane left to do, the event is lost */
	q->ev[(q->head + q->count) % q->cap] = *ev;
	q->count++;
	__atomic_add_fetch(&q->posts, 1, __ATOMIC_RELEASE);
	if (q->count == 1)
		efd_signal(q);
	sig = q->sig;
	if (q->sleeping)
		pthread_cond_broadcast(&q->cond);
out:
	if (q->refs)
		q->refs--;
	pthread_mutex_unlock(&q->lock);
	if (sig)
		kill(getpid(), sig);
}

int exs_queue_modify(exs_qhandle_t h, int attr, int value)
{
	struct exs_queue *q = lock_handle(h);
	int ret = 0;

	if (!q)
		return -EINVAL;
	if (attr == EXS_QATTR_SIGNAL) {
		if (value < 0 || value >= NSIG || value == SIGKILL || value == SIGSTOP)
			ret = -EINVAL;
		else
			q->sig = value;
	} else if (attr == EXS_QATTR_EVENTS) {
		if (value <= 0 || value > EXS_MAX_QDEPTH)
			ret = -EINVAL;
		else
			ret = resize(q, (unsigned)value);
	} else if (attr == EXS_QATTR_WAIT) {
		if (value != EXS_WAIT_ADAPTIVE && value != EXS_WAIT_BUSY_POLL &&
		    value != EXS_WAIT_NOTIFY)
			ret = -EINVAL;
		else if (q->used || q->refs)
			ret = -EBUSY; /* guide §11.2.7: only before the first use */
		else
			q->wait = value;
	} else {
		ret = -EINVAL;
	}
	pthread_mutex_unlock(&q->lock);
	return ret;
}

int exs_queue_status(exs_qhandle_t h, int attr, int *value)
{
	struct exs_queue *q = lock_handle(h);
	int ret = 0;

	if (!q)
		return -EINVAL;
	if (attr == EXS_QATTR_SIGNAL)
		*value = q->sig;
	else if (attr == EXS_QATTR_EVENTS)
		*value = (int)q->count;
	else if (attr == EXS_QATTR_WAIT)
		*value = q->wait;
	else
		ret = -EINVAL;
	pthread_mutex_unlock(&q->lock);
	return ret;
}

/* ---- thread cancellation (exs_int.h) */

/* initial-exec: every public call reads them, and the default model for
 * a shared library's thread variables is a __tls_get_addr call each */
#define EXS_TLS __thread __attribute__((tls_model("initial-exec")))
static EXS_TLS unsigned nocancel_depth; /* nested public calls */
static EXS_TLS int caller_state, caller_type; /* what the outermost call found */

int exs_nocancel_enter(void)
{
	if (nocancel_depth++ == 0)
		pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &caller_state);
	return 0;
}

void exs_nocancel_leave(int *unused)
{
	(void)unused;
	if (nocancel_depth && --nocancel_depth == 0)
		pthread_setcancelstate(caller_state, NULL);
}

/* Deferred, whatever type the caller chose: an asynchronous cancel in a
 * condition wait would be undefined. */
bool exs_cancel_open(void)
{
	if (!nocancel_depth || caller_state != PTHREAD_CANCEL_ENABLE)
		return false;
	pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, &caller_type);
	pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
	return true;
}

void exs_cancel_close(bool opened)
{
	if (!opened)
		return;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
	pthread_setcanceltype(caller_type, NULL);
}

static int wait_point(pthread_cond_t *cond, pthread_mutex_t *m, const struct timespec *deadline,
		      void (*cleanup)(void *), void *arg)
{
	volatile int r = 0;

	pthread_cleanup_push(cleanup, arg);
	if (deadline)
		r = pthread_cond_timedwait(cond, m, deadline);
	else
		pthread_cond_wait(cond, m);
	pthread_cleanup_pop(0);
	return r;
}

int exs_cond_wait(pthread_cond_t *cond, pthread_mutex_t *m, const struct timespec *deadline,
		  bool cancellable, void (*cleanup)(void *), void *arg)
{
	bool open = cancellable && exs_cancel_open();
	int r = wait_point(cond, m, deadline, cleanup, arg);

	exs_cancel_close(open);
	return r;
}

/* A thread waiting on exs_g.cond is cancelled: it waits no more. */
struct g_wait {
	void (*cleanup)(void *);
	void *arg;
};

static void g_wait_cancelled(void *arg)
{
	struct g_wait *w = arg;

	exs_g.cond_waiters--;
	if (w->cleanup)
		w->cleanup(w->arg);
}

int exs_g_wait(const struct timespec *deadline, bool cancellable, void (*cleanup)(void *),
	       void *arg)
{
	struct g_wait w = { cleanup, arg };
	int r;

	exs_g.cond_waiters++;
	r = exs_cond_wait(&exs_g.cond, &exs_g.lock, deadline, cancellable, g_wait_cancelled, &w);
	exs_g.cond_waiters--;
	return r;
}

static void deadline_after(struct timespec *ts, const struct timeval *tmo)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += tmo->tv_sec + tmo->tv_usec / 1000000;
	ts->tv_nsec += (tmo->tv_usec % 1000000) * 1000;
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
}

/*
 * count > 0: wait for at least one event, return up to count.
 * count < 0: wait until at least -count events are there, return -count.
 * Returns the number of events, 0 on timeout, or -errno.
 */
static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* Whether its waits' spin budget follows how long they take. */
static bool adapts(const struct exs_queue *q)
{
	return q->wait == EXS_WAIT_ADAPTIVE && !__atomic_load_n(&q->busy, __ATOMIC_RELAXED);
}

/* Whether its waits spin for their whole length. */
static bool spins_whole(const struct exs_queue *q)
{
	return q->wait == EXS_WAIT_BUSY_POLL ||
	       (q->wait == EXS_WAIT_ADAPTIVE && __atomic_load_n(&q->busy, __ATOMIC_RELAXED));
}

/* Whether a wait for events with this timeout polls the CQs (spin). */
static bool spins(const struct exs_queue *q, const struct timeval *tmo)
{
	if (q->wait == EXS_WAIT_NOTIFY || !exs_queue_poll_hook)
		return false;
	return spins_whole(q) || !tmo || tmo->tv_sec || tmo->tv_usec >= (long)q->spin_us;
}

/* A spinning waiter is cancelled: it polls no more. */
static void cancel_spin(void *arg)
{
	(void)arg;
	exs_queue_poll_hook(EXS_POLL_END);
}

/* A cancellation point inside a spin, the queue's lock not held: a wait
 * that never sleeps (EXS_WAIT_BUSY_POLL, a busy-poll socket's queue) has
 * no other. */
static void spin_cancel_point(void)
{
	if (!exs_cancel_open())
		return;
	pthread_cleanup_push(cancel_spin, NULL);
	pthread_testcancel();
	pthread_cleanup_pop(0);
	exs_cancel_close(true);
}

/*
 * Adaptive waiting (EXS_WAIT_ADAPTIVE, guide §11.2.7): before sleeping,
 * poll the completion queues from this thread for up to q->spin_us. The
 * budget follows how long waits really take (exs_spin_budget: up to
 * exs.conf's busy_poll_us). EXS_WAIT_BUSY_POLL, and a queue a busy-poll
 * socket posts to (exs_queue_mark_busy), spin for the whole timeout;
 * EXS_WAIT_NOTIFY never spins. Called when spins(q, tmo), with q->lock
 * held; returns with it held. *t0: the spin's origin, read at its first
 * clock check (left 0 when it never checks). `cancellable`: a
 * cancellation point every EXS_SPIN_CLOCK_EVERY polls.
 *
 * The clock is read as seldom as the budget allows: where the clocksource
 * has no vDSO path (a TCG guest), each reading is a system call, and a
 * ping-pong's wait is over in a few dozen polls. It is read after 16 polls
 * (the origin), then after twice as many each time, at most
 * EXS_SPIN_CLOCK_EVERY apart; a wait caught within 16 polls reads it not
 * at all, and a spin with no end (busy poll, no timeout) never reads it.
 * The budget counts from the origin, and so does the wait that
 * exs_spin_budget adapts it to: both leave out the same 16 polls.
 */
static void spin(struct exs_queue *q, exs_qhandle_t h, unsigned want, const struct timeval *tmo,
		 uint64_t *t0, bool cancellable)
{
	uint64_t end = UINT64_MAX, budget = q->spin_us;
	unsigned next = 16, seen = __atomic_load_n(&q->posts, __ATOMIC_ACQUIRE);

	if (spins_whole(q)) /* spin for the whole wait */
		budget = tmo ? (uint64_t)tmo->tv_sec * 1000000 + (uint64_t)tmo->tv_usec : UINT64_MAX;
	pthread_mutex_unlock(&q->lock);
	/* nothing to take: coalesced sends go (said here, where the lock is
	 * let go anyway, not at a second unlock on the way to every spin) */
	exs_queue_poll_hook(EXS_POLL_IDLE);
	exs_queue_poll_hook(EXS_POLL_BEGIN);
	for (unsigned i = 1;; i++) {
		bool clock = i == next && budget != UINT64_MAX;

		exs_queue_poll_hook(EXS_POLL_ONCE);
		/* the queue's lock only when a post (or the deletion) came,
		 * or the clock is due: taking it on every poll was two more
		 * locked instructions per poll, and a poll's length is the
		 * delay between a completion and its waiter's return */
		if (clock || __atomic_load_n(&q->posts, __ATOMIC_ACQUIRE) != seen) {
			pthread_mutex_lock(&q->lock);
			if (q->h != h || !q->live || q->count >= want)
				break;
			seen = __atomic_load_n(&q->posts, __ATOMIC_ACQUIRE);
			if (clock) {
				uint64_t now = now_us();

				next += next < EXS_SPIN_CLOCK_EVERY ? next : EXS_SPIN_CLOCK_EVERY;
				if (!*t0)
					*t0 = now;
				if (end == UINT64_MAX)
					end = *t0 + budget;
				if (now >= end)
					break;
			}
			pthread_mutex_unlock(&q->lock);
		}
		if (cancellable && !(i % EXS_SPIN_CLOCK_EVERY))
			spin_cancel_point();
	}
	/* with the lock held: END only counts, and a found event is taken
	 * without letting go of the lock and taking it again */
	exs_queue_poll_hook(EXS_POLL_END);
}

/* A wait that the ceiling could have caught spinning sets the budget to
 * twice that wait (at most the ceiling), so the next one like it is caught;
 * a longer wait halves it. The wait measured includes the sleep, whose
 * hand-offs can cost more than the data took: judged against half the
 * ceiling instead, a round trip of 0.5-1 ms that is half hand-off never
 * gets the spin that would halve it, and the budget flips with the size. */
unsigned exs_spin_budget(unsigned spin_us, uint64_t waited_us, unsigned ceiling_us)
{
	if (waited_us < ceiling_us)
		spin_us = waited_us * 2 > spin_us ? (unsigned)(waited_us * 2) : spin_us;
	else
		spin_us /= 2;
	if (spin_us < EXS_SPIN_MIN_US)
		spin_us = EXS_SPIN_MIN_US;
	return spin_us > ceiling_us ? ceiling_us : spin_us;
}

/* A waiter asleep on q->cond is cancelled: it sleeps no more. */
static void cancel_sleep(void *arg)
{
	struct exs_queue *q = arg;

	q->sleeping--;
	pthread_mutex_unlock(&q->lock);
}

/* The same, for a waiter that armed the CQs before it slept. */
static void cancel_awake(void *arg)
{
	cancel_sleep(arg);
	exs_queue_poll_hook(EXS_POLL_AWAKE);
}

int exs_queue_dequeue(exs_qhandle_t h, exs_event_t *ev, int count, const struct timeval *tmo,
		      bool cancellable)
{
	struct exs_queue *q;
	unsigned want = count < 0 ? (unsigned)-(long)count : 1;
	unsigned max = count < 0 ? want : (unsigned)count;
	struct timespec deadline;
	bool spun = false, armed = false;
	int n = 0;

	uint64_t t0 = 0;

	if (tmo)
		deadline_after(&deadline, tmo);
	q = lock_handle(h);
	if (!q)
		return -EINVAL;
	q->used = true;
	for (;;) {
		if (q->h != h || !q->live) { /* deleted while we waited */
			n = -EINVAL;
			goto out;
		}
		if (q->count >= want) {
			if (!spun && spins(q, tmo)) /* a poller all the same */
				exs_queue_poll_hook(EXS_POLL_LOOK);
			/* t0 unread: caught within 16 polls, the budget stands */
			if (spun && t0 && adapts(q))
				q->spin_us = exs_spin_budget(q->spin_us, now_us() - t0,
							     exs_g.defaults.busy_poll_us);
			break;
		}
		if (!spun) {
			spun = true;
			if (spins(q, tmo)) {
				spin(q, h, want, tmo, &t0, cancellable); /* says IDLE first */
			} else if (exs_queue_poll_hook) { /* nothing to take: coalesced sends go */
				pthread_mutex_unlock(&q->lock);
				exs_queue_poll_hook(EXS_POLL_IDLE);
				pthread_mutex_lock(&q->lock);
			}
			continue;
		}
		if (tmo && tmo->tv_sec == 0 && tmo->tv_usec == 0)
			goto out;
		if (!armed && exs_queue_poll_hook) {
			/* about to sleep: every CQ must raise its event again, or
			 * the completion this waits for might wake nobody */
			armed = true;
			/* the budget's adaptation needs the wait's length */
			if (!t0 && adapts(q))
				t0 = now_us();
			pthread_mutex_unlock(&q->lock);
			exs_queue_poll_hook(EXS_POLL_ARM);
			pthread_mutex_lock(&q->lock);
			continue;
		}
		q->sleeping++;
		int r = exs_cond_wait(&q->cond, &q->lock, tmo ? &deadline : NULL, cancellable,
				      armed ? cancel_awake : cancel_sleep, q);

		q->sleeping--;
		if (r == ETIMEDOUT && q->count < want)
			goto out;
	}
	while (q->count && (unsigned)n < max) {
		ev[n++] = q->ev[q->head];
		q->head = (q->head + 1) % q->cap;
		q->count--;
	}
	if (n && !q->count)
		efd_drain(q);
out:
	pthread_mutex_unlock(&q->lock);
	if (armed)
		exs_queue_poll_hook(EXS_POLL_AWAKE);
	return n;
}
