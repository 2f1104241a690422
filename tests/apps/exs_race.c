/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs_race: exs_close from one thread while another thread's exs_bind or
 * exs_listen on the same socket waits for exsd's reply (the library lock is
 * released during that wait). Each round binds the same ADDR:PORT, so a
 * binding that a racing close failed to hand back to exsd shows as an
 * EADDRINUSE that never clears; under ASan a socket freed under the
 * waiting call shows as a use-after-free.
 *
 *   exs_race ADDR PORT ROUNDS
 * Prints one line of counts; exit 0 when every call ended in success or
 * EBADF (closed under it) and every port came back within 2 s (a few
 * rounds met one for a moment in the guest: counted, not failed).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <exs.h>

static int shared_fd = -1; /* the socket either thread may close: CAS owns it */
static int stop; /* atomic: the racer polls it */
static exs_qhandle_t closeq;
static long closed_by_racer, transient;

/* Take the socket if nobody else has; true: the caller must close it. */
static bool take(int fd)
{
	return __atomic_compare_exchange_n(&shared_fd, &fd, -1, false, __ATOMIC_ACQ_REL,
					   __ATOMIC_ACQUIRE);
}

static void *racer(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		int fd = __atomic_load_n(&shared_fd, __ATOMIC_ACQUIRE);

		if (fd >= 0 && take(fd)) {
			if (exs_close(fd, 0, closeq, NULL) == 0)
				closed_by_racer++;
			else
				fprintf(stderr, "racer: exs_close(%d): %s\n", fd, strerror(errno));
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	long ok = 0, ebadf = 0, bad = 0, rounds;
	pthread_t t;
	exs_event_t ev[64];

	rounds = argc == 4 ? atol(argv[3]) : 0;
	if (rounds <= 0 || inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1) {
		fprintf(stderr, "usage: exs_race ADDR PORT ROUNDS\n");
		return 2;
	}
	sa.sin_port = htons((uint16_t)atoi(argv[2]));
	if (exs_init(EXS_VERSION1) || (closeq = exs_qcreate(1024)) == EXS_QHANDLE_INVALID) {
		perror("exs_init");
		return 1;
	}
	pthread_create(&t, NULL, racer, NULL);
	for (long i = 0; i < rounds; i++) {
		int fd = exs_socket(AF_INET, SOCK_SEQPACKET, 0), ret;
		bool listen = i % 2;

		if (fd < 0) {
			perror("exs_socket");
			bad++;
			break;
		}
		__atomic_store_n(&shared_fd, fd, __ATOMIC_RELEASE);
		ret = exs_bind(fd, (struct sockaddr *)&sa, sizeof(sa));
		/* a binding handed back a moment ago may take the kernel a moment
		 * to release; a leaked one never goes (wait up to 2 s) */
		for (int t = 0; ret && errno == EADDRINUSE && t < 100; t++) {
			if (!t)
				transient++;
			usleep(20000);
			ret = exs_bind(fd, (struct sockaddr *)&sa, sizeof(sa));
		}
		if (!ret && listen)
			ret = exs_listen(fd, 4);
		if (!ret || errno == EBADF) {
			ret ? ebadf++ : ok++;
		} else {
			fprintf(stderr, "round %ld: %s: %s\n", i, listen ? "bind+listen" : "bind",
				strerror(errno));
			bad++;
		}
		if (take(fd) && exs_close(fd, EXS_BLOCK, NULL, NULL))
			fprintf(stderr, "round %ld: exs_close: %s\n", i, strerror(errno)), bad++;
		while (exs_qdequeue(closeq, ev, -64, &(struct timeval){ 0 }) > 0)
			;
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	pthread_join(t, NULL);
	printf("exs_race: %ld rounds, %ld calls succeeded, %ld failed with EBADF (closed "
	       "under them), %ld closes by the racer, %ld binds met a port still in use and "
	       "got it within 2 s, %ld bad\n",
	       rounds, ok, ebadf, closed_by_racer, transient, bad);
	return bad ? 1 : 0;
}
