/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Event queues (libexs/queue.c): order, growth, timeouts, negative counts,
 * deletion rules, stale handles and many threads. */
#include "check_main.h"
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "exs_int.h"

static exs_event_t mk(int i)
{
	exs_event_t e = { 0 };

	e.exs_evt_socket = i;
	e.exs_evt_type = EXS_EVT_SEND;
	return e;
}

START_TEST(order_and_growth)
{
	struct exs_queue *q = exs_queue_new(2);
	exs_event_t ev[64];
	int i, n;

	ck_assert_ptr_nonnull(q);
	for (i = 0; i < 50; i++) {
		exs_queue_ref(q);
		exs_event_t e = mk(i);
		exs_queue_post(q, &e);
	}
	ck_assert_uint_eq(q->refs, 0);
	n = exs_queue_dequeue(q->h, ev, 64, NULL, false);
	ck_assert_int_eq(n, 50);
	for (i = 0; i < 50; i++)
		ck_assert_int_eq(ev[i].exs_evt_socket, i);
	ck_assert_int_eq(exs_queue_delete(q->h), 0);
}
END_TEST

START_TEST(timeout_and_poll)
{
	struct exs_queue *q = exs_queue_new(1);
	struct timeval zero = { 0, 0 }, tenth = { 0, 100000 };
	struct timespec a, b;
	exs_event_t ev;

	ck_assert_int_eq(exs_queue_dequeue(q->h, &ev, 1, &zero, false), 0);
	clock_gettime(CLOCK_MONOTONIC, &a);
	ck_assert_int_eq(exs_queue_dequeue(q->h, &ev, 1, &tenth, false), 0);
	clock_gettime(CLOCK_MONOTONIC, &b);
	double dt = (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
	ck_assert(dt >= 0.099);
	ck_assert(dt < 2.0);
	exs_queue_delete(q->h);
}
END_TEST

struct poster {
	struct exs_queue *q;
	int n, base;
};

static void *post_n(void *arg)
{
	struct poster *p = arg;

	for (int i = 0; i < p->n; i++) {
		exs_event_t e = mk(p->base + i);

		exs_queue_ref(p->q);
		exs_queue_post(p->q, &e);
		if (i % 7 == 0)
			usleep(100);
	}
	return NULL;
}

START_TEST(negative_count_waits_for_n)
{
	struct exs_queue *q = exs_queue_new(4);
	struct poster p = { q, 5, 0 };
	pthread_t t;
	exs_event_t ev[5];

	pthread_create(&t, NULL, post_n, &p);
	ck_assert_int_eq(exs_queue_dequeue(q->h, ev, -5, NULL, false), 5);
	pthread_join(t, NULL);
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(ev[i].exs_evt_socket, i);
	exs_queue_delete(q->h);
}
END_TEST

START_TEST(delete_rules)
{
	struct exs_queue *q = exs_queue_new(1);
	exs_event_t e = mk(1), out;

	exs_queue_ref(q); /* an operation started on it */
	ck_assert_int_eq(exs_queue_delete(q->h), -EBUSY);
	exs_queue_post(q, &e); /* it completed: undequeued events are dropped */
	exs_qhandle_t h = q->h;
	ck_assert_int_eq(exs_queue_delete(h), 0);
	ck_assert_ptr_null(exs_queue_get(h));
	ck_assert_int_eq(exs_queue_dequeue(h, &out, 1, NULL, false), -EINVAL);
	ck_assert_int_eq(exs_queue_delete(h), -EINVAL);
}
END_TEST

/* A thread waiting (up to 5 s) on a queue, as a public call's thread:
 * cancellable if the test says so. */
struct sleeper {
	exs_qhandle_t h;
	bool cancellable;
	int ret;
};

static void *sleep_on_queue(void *arg)
{
	struct sleeper *w = arg;
	struct timeval tv = { 5, 0 };
	exs_event_t ev;

	exs_nocancel_enter(); /* as EXS_NOCANCEL in a public call */
	w->ret = exs_queue_dequeue(w->h, &ev, 1, &tv, w->cancellable);
	exs_nocancel_leave(NULL);
	return NULL;
}

/*
 * A queue deleted while a thread waits on it, its object then reused for
 * the next queue: the waiter ends with EINVAL and does not take the new
 * queue's events; the old handle names nothing, the new one works.
 */
START_TEST(stale_handles)
{
	struct exs_queue *q = exs_queue_new(2), *q2;
	struct sleeper w = { q->h, false, 1 };
	exs_qhandle_t old = q->h;
	exs_event_t e = mk(7), out;
	pthread_t t;
	int v;

	pthread_create(&t, NULL, sleep_on_queue, &w);
	usleep(100000);
	ck_assert_int_eq(exs_queue_delete(old), 0);
	q2 = exs_queue_new(2);
	ck_assert_ptr_eq(q2, q); /* the same object, a new life */
	ck_assert_ptr_ne(q2->h, old);
	exs_queue_ref(q2);
	exs_queue_post(q2, &e);
	pthread_join(t, NULL);
	ck_assert_int_eq(w.ret, -EINVAL);
	ck_assert_ptr_null(exs_queue_get(old));
	ck_assert_ptr_eq(exs_queue_get(q2->h), q2);
	ck_assert_int_eq(exs_queue_status(old, EXS_QATTR_EVENTS, &v), -EINVAL);
	ck_assert_int_eq(exs_queue_modify(old, EXS_QATTR_SIGNAL, 0), -EINVAL);
	ck_assert_int_eq(exs_queue_status(q2->h, EXS_QATTR_EVENTS, &v), 0);
	ck_assert_int_eq(v, 1);
	ck_assert_int_eq(exs_queue_dequeue(q2->h, &out, 1, NULL, false), 1);
	ck_assert_int_eq(out.exs_evt_socket, 7);
	ck_assert_int_eq(exs_queue_delete(q2->h), 0);
	/* never a handle: no object is touched */
	ck_assert_ptr_null(exs_queue_get(NULL));
	ck_assert_ptr_null(exs_queue_get((exs_qhandle_t)&v));
	ck_assert_ptr_null(exs_queue_get((exs_qhandle_t)~(uintptr_t)0));
}
END_TEST

/* a call holds the queue it starts an operation on: it cannot be deleted
 * (and its slot reused) in between; a stale handle cannot be held */
START_TEST(hold)
{
	struct exs_queue *q = exs_queue_new(1), *got = NULL;
	exs_qhandle_t h = q->h;

	ck_assert_int_eq(exs_queue_hold(h, &got), 0);
	ck_assert_ptr_eq(got, q);
	ck_assert_int_eq(exs_queue_delete(h), -EBUSY);
	exs_queue_unref(q);
	ck_assert_int_eq(exs_queue_delete(h), 0);
	got = NULL;
	ck_assert_int_eq(exs_queue_hold(h, &got), -EINVAL);
	ck_assert_ptr_null(got);
	q = exs_queue_new(1); /* the same object again, a new life */
	ck_assert_int_eq(exs_queue_hold(h, &got), -EINVAL);
	ck_assert_uint_eq(q->refs, 0);
	ck_assert_int_eq(exs_queue_delete(q->h), 0);
}
END_TEST

/* a slot whose generation would wrap is retired, never reused */
START_TEST(generation_wrap_retires)
{
	struct exs_htab t = EXS_HTAB_INIT;
	uint32_t idx, idx2;
	void *obj;
	int x;

	ck_assert_int_eq(exs_htab_alloc(&t, &idx, &obj), 0);
	t.chunk[0][idx].state = EXS_H_STATE_MAX - 5; /* two lives left */
	uintptr_t h = exs_htab_publish(&t, idx, &x);
	ck_assert_ptr_eq(exs_htab_get(&t, h, NULL), &x);
	ck_assert(exs_htab_kill(&t, h));
	ck_assert(!exs_htab_kill(&t, h));
	exs_htab_release(&t, idx, &x);
	ck_assert_int_eq(exs_htab_alloc(&t, &idx2, &obj), 0);
	ck_assert_uint_eq(idx2, idx);
	uintptr_t h2 = exs_htab_publish(&t, idx, &x);
	ck_assert(h2 != h && h2 != ~(uintptr_t)0);
	ck_assert(exs_htab_kill(&t, h2));
	exs_htab_release(&t, idx, &x); /* the last life: retired */
	ck_assert_int_eq(exs_htab_alloc(&t, &idx2, &obj), 0);
	ck_assert_uint_ne(idx2, idx);
	ck_assert_ptr_null(exs_htab_get(&t, h, NULL));
	ck_assert_ptr_null(exs_htab_get(&t, h2, NULL));
	free(t.chunk[0]); /* a table of the library lives as long as the process */
	free(t.free);
}
END_TEST

struct taker {
	struct exs_queue *q;
	int got;
};

static void *take_all(void *arg)
{
	struct taker *t = arg;
	struct timeval tv = { 0, 200000 };
	exs_event_t ev[8];
	int n;

	while ((n = exs_queue_dequeue(t->q->h, ev, 8, &tv, false)) > 0)
		t->got += n;
	return NULL;
}

START_TEST(many_threads)
{
	struct exs_queue *q = exs_queue_new(8);
	struct poster p[4];
	struct taker k[3];
	pthread_t pt[4], kt[3];
	int i, total = 0;

	for (i = 0; i < 3; i++) {
		k[i] = (struct taker){ q, 0 };
		pthread_create(&kt[i], NULL, take_all, &k[i]);
	}
	for (i = 0; i < 4; i++) {
		p[i] = (struct poster){ q, 2500, i * 10000 };
		pthread_create(&pt[i], NULL, post_n, &p[i]);
	}
	for (i = 0; i < 4; i++)
		pthread_join(pt[i], NULL);
	for (i = 0; i < 3; i++) {
		pthread_join(kt[i], NULL);
		total += k[i].got;
	}
	ck_assert_int_eq(total, 10000);
	exs_queue_delete(q->h);
}
END_TEST

START_TEST(bounds)
{
	ck_assert_ptr_null(exs_queue_new(0));
	ck_assert_ptr_null(exs_queue_new(-3));
	ck_assert_ptr_null(exs_queue_new(EXS_MAX_QDEPTH + 1));
}
END_TEST

/* The adaptive wait's budget: a round trip the ceiling (1000 us) could
 * catch raises it, even one of 600-900 us that a sleep made slow; a wait
 * past the ceiling halves it; it stays within 5 us..the ceiling. */
START_TEST(spin_budget)
{
	unsigned b = 50;

	b = exs_spin_budget(b, 800, 1000); /* slept: 800 us */
	ck_assert_uint_eq(b, 1000);
	b = exs_spin_budget(b, 200, 1000); /* now caught spinning at 200 */
	ck_assert_uint_eq(b, 1000);
	b = exs_spin_budget(b, 5000, 1000); /* traffic stopped */
	ck_assert_uint_eq(b, 500);
	ck_assert_uint_eq(exs_spin_budget(b, 100, 1000), 500);
	ck_assert_uint_eq(exs_spin_budget(6, 1u << 30, 1000), EXS_SPIN_MIN_US);
	ck_assert_uint_eq(exs_spin_budget(50, 0, 1000), 50);
	ck_assert_uint_eq(exs_spin_budget(50, 10, 0), 0); /* busy_poll_us = 0: no spin */
}
END_TEST

/* What a wait tells the poll hook (progress.c): a wait that would spin
 * but finds its events there says LOOK (a busy-polling progress thread
 * then leaves the polling to it); one that spins says BEGIN..END; a wait
 * that never spins (a zero timeout under the adaptive budget, or
 * EXS_WAIT_NOTIFY) says neither. Every wait that finds nothing, even with
 * a zero timeout, says IDLE once (coalesced sends go), and one that finds
 * its events does not. */
static unsigned phases[EXS_POLL_IDLE + 1];

static void count_phase(int phase)
{
	phases[phase]++;
}

START_TEST(poll_hook_phases)
{
	struct exs_queue *q = exs_queue_new(4);
	struct timeval zero = { 0, 0 }, ms = { 0, 1000 };
	void (*saved)(int) = exs_queue_poll_hook;
	exs_event_t e = mk(1), out;

	exs_queue_poll_hook = count_phase;
	exs_queue_ref(q);
	exs_queue_post(q, &e);
	ck_assert_int_eq(exs_queue_dequeue(q->h, &out, 1, NULL, false), 1);
	ck_assert_uint_eq(phases[EXS_POLL_LOOK], 1);
	ck_assert_uint_eq(phases[EXS_POLL_BEGIN], 0);

	exs_queue_ref(q);
	exs_queue_post(q, &e);
	ck_assert_int_eq(exs_queue_dequeue(q->h, &out, 1, &zero, false), 1);
	ck_assert_uint_eq(phases[EXS_POLL_LOOK], 1);
	ck_assert_uint_eq(phases[EXS_POLL_IDLE], 0);

	ck_assert_int_eq(exs_queue_dequeue(q->h, &out, 1, &ms, false), 0);
	ck_assert_uint_eq(phases[EXS_POLL_LOOK], 1);
	ck_assert_uint_eq(phases[EXS_POLL_BEGIN], 1);
	ck_assert_uint_eq(phases[EXS_POLL_END], 1);
	ck_assert_uint_gt(phases[EXS_POLL_ONCE], 0);
	ck_assert_uint_eq(phases[EXS_POLL_IDLE], 1);

	ck_assert_int_eq(exs_queue_dequeue(q->h, &out, 1, &zero, false), 0);
	ck_assert_uint_eq(phases[EXS_POLL_IDLE], 2);
	ck_assert_uint_eq(phases[EXS_POLL_BEGIN], 1);

	q->wait = EXS_WAIT_NOTIFY;
	exs_queue_ref(q);
	exs_queue_post(q, &e);
	ck_assert_int_eq(exs_queue_dequeue(q->h, &out, 1, NULL, false), 1);
	ck_assert_uint_eq(phases[EXS_POLL_LOOK], 1);
	ck_assert_uint_eq(phases[EXS_POLL_BEGIN], 1);
	ck_assert_uint_eq(phases[EXS_POLL_IDLE], 2);
	exs_queue_poll_hook = saved;
	exs_queue_delete(q->h);
}
END_TEST

/* *count, read under `lock`, once it is `want` or after 2 s */
static unsigned count_becomes(pthread_mutex_t *lock, const unsigned *count, unsigned want)
{
	unsigned v = 0;

	for (int i = 0; i < 2000; i++) {
		pthread_mutex_lock(lock);
		v = *count;
		pthread_mutex_unlock(lock);
		if (v == want)
			break;
		usleep(1000);
	}
	return v;
}

static unsigned sleeping_becomes(struct exs_queue *q, unsigned want)
{
	return count_becomes(&q->lock, &q->sleeping, want);
}

/*
 * A post wakes a queue's sleepers only when it counts some (q->sleeping):
 * a sleeping waiter is counted, woken by a post and uncounted; one that
 * is cancelled in its sleep uncounts itself and lets go of the lock, so
 * the next sleeper is still woken.
 */
START_TEST(sleepers_counted)
{
	struct exs_queue *q = exs_queue_new(2);
	struct sleeper a = { q->h, true, 7 }, b = { q->h, false, 7 };
	exs_event_t e = mk(3);
	pthread_t t;

	q->wait = EXS_WAIT_NOTIFY; /* sleeps at once, whatever the hook */
	pthread_create(&t, NULL, sleep_on_queue, &a);
	ck_assert_uint_eq(sleeping_becomes(q, 1), 1);
	pthread_cancel(t);
	pthread_join(t, NULL);
	ck_assert_uint_eq(sleeping_becomes(q, 0), 0);
	ck_assert_int_eq(pthread_mutex_trylock(&q->lock), 0);
	pthread_mutex_unlock(&q->lock);

	pthread_create(&t, NULL, sleep_on_queue, &b);
	ck_assert_uint_eq(sleeping_becomes(q, 1), 1);
	exs_queue_ref(q);
	exs_queue_post(q, &e);
	pthread_join(t, NULL);
	ck_assert_int_eq(b.ret, 1);
	ck_assert_uint_eq(q->sleeping, 0);
	ck_assert_int_eq(exs_queue_delete(q->h), 0);
}
END_TEST

/* A waiter on exs_g.cond, as xfer_run's credit wait: cancellable */
static void g_unlock(void *arg)
{
	(void)arg;
	pthread_mutex_unlock(&exs_g.lock);
}

static bool g_woken;

static void *wait_on_g(void *arg)
{
	bool cancellable = arg != NULL;

	exs_nocancel_enter();
	pthread_mutex_lock(&exs_g.lock);
	while (!g_woken)
		exs_g_wait(NULL, cancellable, g_unlock, NULL);
	pthread_mutex_unlock(&exs_g.lock);
	exs_nocancel_leave(NULL);
	return NULL;
}

static unsigned g_waiters_become(unsigned want)
{
	return count_becomes(&exs_g.lock, &exs_g.cond_waiters, want);
}

/* exs_g_wait counts its waiters (exs_g_wake wakes only when there are),
 * and a cancelled one uncounts itself and lets go of exs_g.lock */
START_TEST(g_waiters_counted)
{
	pthread_t t;

	pthread_mutex_lock(&exs_g.lock);
	exs_g_wake(); /* nobody waits: nothing to do */
	pthread_mutex_unlock(&exs_g.lock);
	pthread_create(&t, NULL, wait_on_g, (void *)1);
	ck_assert_uint_eq(g_waiters_become(1), 1);
	pthread_cancel(t);
	pthread_join(t, NULL);
	ck_assert_uint_eq(g_waiters_become(0), 0);

	pthread_create(&t, NULL, wait_on_g, NULL);
	ck_assert_uint_eq(g_waiters_become(1), 1);
	pthread_mutex_lock(&exs_g.lock);
	g_woken = true;
	exs_g_wake();
	pthread_mutex_unlock(&exs_g.lock);
	pthread_join(t, NULL);
	ck_assert_uint_eq(g_waiters_become(0), 0);
}
END_TEST

int main(void)
{
	const TTest *const tests[] = { order_and_growth, timeout_and_poll, negative_count_waits_for_n, delete_rules, stale_handles, hold, generation_wrap_retires, many_threads, bounds, spin_budget, poll_hook_phases, sleepers_counted, g_waiters_counted, NULL };

	return run_tests("queue", 30, tests);
}
