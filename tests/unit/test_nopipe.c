/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* libexs/verbs.c's SIGPIPE guard around iWARP posts (exs_nopipe_begin/end):
 * a SIGPIPE raised inside it (as siw's TCP send raises one at a dead
 * peer) is taken back, one the application already had pending stays,
 * the thread's mask and errno come out as they went in. SIGPIPE keeps its
 * default action: an escape kills the test. No device needed. */
#include "check_main.h"
#include <errno.h>
#include <pthread.h>
#include <signal.h>

#include "exs_int.h"

static bool pipe_pending(void)
{
	sigset_t p;

	sigpending(&p);
	return sigismember(&p, SIGPIPE);
}

static bool pipe_blocked(void)
{
	sigset_t m;

	pthread_sigmask(SIG_BLOCK, NULL, &m);
	return sigismember(&m, SIGPIPE);
}

static void block_pipe(int how)
{
	sigset_t s;

	sigemptyset(&s);
	sigaddset(&s, SIGPIPE);
	pthread_sigmask(how, &s, NULL);
}

/* the application leaves SIGPIPE unblocked: the one the call raises is taken back */
START_TEST(raised_unblocked)
{
	struct exs_nopipe g;

	signal(SIGPIPE, SIG_DFL);
	block_pipe(SIG_UNBLOCK);
	exs_nopipe_begin(&g);
	ck_assert(pipe_blocked());
	pthread_kill(pthread_self(), SIGPIPE);
	ck_assert(pipe_pending());
	errno = EXDEV;
	exs_nopipe_end(&g);
	ck_assert_int_eq(errno, EXDEV);
	ck_assert(!pipe_pending());
	ck_assert(!pipe_blocked());
}
END_TEST

/* nothing raised: the mask comes back, errno stays */
START_TEST(quiet_unblocked)
{
	struct exs_nopipe g;

	signal(SIGPIPE, SIG_DFL);
	block_pipe(SIG_UNBLOCK);
	exs_nopipe_begin(&g);
	errno = ENOTCONN;
	exs_nopipe_end(&g);
	ck_assert_int_eq(errno, ENOTCONN);
	ck_assert(!pipe_blocked());
	ck_assert(!pipe_pending());
}
END_TEST

/* the application blocks SIGPIPE: one the call raises is taken back, its
 * mask stays blocked */
START_TEST(raised_blocked)
{
	struct exs_nopipe g;

	signal(SIGPIPE, SIG_DFL);
	block_pipe(SIG_BLOCK);
	exs_nopipe_begin(&g);
	pthread_kill(pthread_self(), SIGPIPE);
	exs_nopipe_end(&g);
	ck_assert(!pipe_pending());
	ck_assert(pipe_blocked());
}
END_TEST

/* the application blocks SIGPIPE and has one pending: it stays theirs */
START_TEST(pending_stays)
{
	struct exs_nopipe g;

	signal(SIGPIPE, SIG_DFL);
	block_pipe(SIG_BLOCK);
	pthread_kill(pthread_self(), SIGPIPE);
	exs_nopipe_begin(&g);
	exs_nopipe_end(&g);
	ck_assert(pipe_pending());
	ck_assert(pipe_blocked());
}
END_TEST

int main(void)
{
	const TTest *const tests[] = { raised_unblocked, quiet_unblocked, raised_blocked,
				       pending_stays, NULL };

	return run_tests("nopipe", 10, tests);
}
