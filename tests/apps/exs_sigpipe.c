/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs_sigpipe: senders whose peer (or exsd) dies mid-transfer must end with
 * an errno, never be killed by SIGPIPE (siw transmits from the sender's own
 * system calls). SIGPIPE keeps its default action here: a death shows.
 *
 *   exs_sigpipe sink ADDR PORT N
 *       accepts N connections and keeps a receive posted on each; prints
 *       "receiving N" once all N delivered data. Runs until killed.
 *   exs_sigpipe senders ADDR PORT N
 *       forks N processes; each connects (retrying the EPERM/ECONNREFUSED
 *       a loaded siw set-up may give), prints "sending", sends until a
 *       send fails, then closes (which talks to exsd) and exits 0.
 *       Prints "senders N sigpipe K signalled S failed F" and exits 0 if
 *       every sender ended with an errno (K, S and F are 0).
 *   exs_sigpipe senders ADDR PORT N ign
 *       the same, but each sender ignores SIGPIPE for its first send
 *       (libexs then skips its guard, verbs.c) and restores the default
 *       action after it: from then on it must be guarded again.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <exs.h>

#define N_MAX 64
#define MSG (64 * 1024)

static int sink(const struct sockaddr_in *sa, int n)
{
	static char buf[N_MAX][MSG];
	exs_qhandle_t q = exs_qcreate(2 * N_MAX);
	bool seen[N_MAX] = { false };
	int lfd, fds[N_MAX], got = 0;
	exs_event_t ev;

	lfd = exs_socket(AF_INET, SOCK_STREAM, 0);
	if (q == EXS_QHANDLE_INVALID || lfd < 0 ||
	    exs_bind(lfd, (const struct sockaddr *)sa, sizeof(*sa)) || exs_listen(lfd, n)) {
		printf("listen: %s\n", strerror(errno));
		return 1;
	}
	printf("listening\n");
	for (int i = 0; i < n; i++) {
		fds[i] = exs_blocking_accept(lfd, NULL, NULL);
		if (fds[i] < 0 || exs_recv(fds[i], buf[i], MSG, 0, q, (void *)(long)i,
					   EXS_MHANDLE_UNREGISTERED) < 0) {
			printf("accept %d: %s\n", i, strerror(errno));
			return 1;
		}
	}
	for (;;) {
		long i;

		if (exs_qdequeue(q, &ev, 1, NULL) != 1)
			return 1;
		i = (long)ev.exs_evt_ahandle;
		if (ev.exs_evt_errno || !ev.exs_evt_union.exs_evt_xfer.exs_evt_length)
			continue; /* that sender is gone */
		if (!seen[i] && (seen[i] = true) && ++got == n)
			printf("receiving %d\n", n);
		exs_recv(fds[i], buf[i], MSG, 0, q, (void *)i, EXS_MHANDLE_UNREGISTERED);
	}
}

/* one sender process: 0 once a send failed, 1 if it could not start */
static int sender(const struct sockaddr_in *sa, bool ign_first)
{
	static char buf[MSG];
	int fd = -1, tries, sent = 0;

	for (tries = 0; tries < 50; tries++) {
		fd = exs_socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0)
			return 1;
		if (!exs_blocking_connect(fd, (const struct sockaddr *)sa, sizeof(*sa)))
			break;
		if (errno != EPERM && errno != ECONNREFUSED) {
			printf("connect: %s\n", strerror(errno));
			return 1;
		}
		exs_close(fd, EXS_BLOCK, NULL, NULL);
		fd = -1;
		usleep(100000);
	}
	if (fd < 0) {
		printf("connect: gave up\n");
		return 1;
	}
	if (ign_first)
		signal(SIGPIPE, SIG_IGN);
	printf("sending\n");
	while (exs_blocking_send(fd, buf, sizeof(buf), 0, EXS_MHANDLE_UNREGISTERED) == sizeof(buf))
		if (ign_first && ++sent == 1)
			signal(SIGPIPE, SIG_DFL); /* the sink dies after every first send */
	printf("send: %s\n", strerror(errno));
	/* more calls after the failure: each may transmit or talk to exsd */
	exs_blocking_send(fd, buf, sizeof(buf), 0, EXS_MHANDLE_UNREGISTERED);
	exs_close(fd, EXS_BLOCK, NULL, NULL);
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int n, st, pipes = 0, sigs = 0, failed = 0;
	pid_t pid;

	n = argc == 5 || argc == 6 ? atoi(argv[4]) : 0;
	if (n <= 0 || n > N_MAX || inet_pton(AF_INET, argv[2], &sa.sin_addr) != 1 ||
	    (argc == 6 && strcmp(argv[5], "ign"))) {
		fprintf(stderr, "usage: exs_sigpipe sink|senders ADDR PORT N [ign] (N <= %d)\n", N_MAX);
		return 2;
	}
	sa.sin_port = htons((uint16_t)atoi(argv[3]));
	signal(SIGPIPE, SIG_DFL);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(argv[1], "sink")) {
		if (exs_init(EXS_VERSION1))
			return 1;
		return sink(&sa, n);
	}
	for (int i = 0; i < n; i++) {
		pid = fork();
		if (pid < 0)
			return 1;
		if (!pid)
			_exit(exs_init(EXS_VERSION1) ? 1 : sender(&sa, argc == 6));
	}
	while ((pid = wait(&st)) > 0) {
		if (WIFSIGNALED(st) && WTERMSIG(st) == SIGPIPE)
			pipes++;
		else if (WIFSIGNALED(st) && ++sigs)
			printf("sender %d: killed by signal %d (%s)\n", (int)pid, WTERMSIG(st),
			       strsignal(WTERMSIG(st)));
		else if (WEXITSTATUS(st))
			failed++;
	}
	printf("senders %d sigpipe %d signalled %d failed %d\n", n, pipes, sigs, failed);
	return pipes || sigs || failed;
}
