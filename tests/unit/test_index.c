/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* exsd's lookups (exsd/index.c, included for its tables) with many entries,
 * and port_pick skipping the ports exsd holds (exsd/ports.c). */
#include "check_main.h"
#include <errno.h>
#include <stdlib.h>

#include "../../exsd/index.c"

#define NCLIENTS 4
#define NEPS 20000

static struct client clients[NCLIENTS];
static struct ep *eps;

static void fill(void)
{
	eps = calloc(NEPS, sizeof(*eps));
	ck_assert_ptr_nonnull(eps);
	for (int i = 0; i < NCLIENTS; i++)
		clients[i].id = (uint32_t)i + 1;
	for (uint32_t i = 0; i < NEPS; i++) {
		struct ep *e = &eps[i];

		e->c = &clients[i % NCLIENTS];
		e->sock_id = i + 1;
		index_add_id(e);
		/* libexs fds repeat across clients: the key is (client, sock) */
		e->sock = i / NCLIENTS + 3;
		e->has_sock = true;
		index_add_sock(e);
		if (i % 2) {
			e->passive = true;
			e->req = 100000 + i;
			index_add_req(e);
		}
	}
}

START_TEST(many_entries)
{
	fill();
	for (uint32_t i = 0; i < NEPS; i++) {
		struct ep *e = &eps[i];
		struct client *other = &clients[(i + 1) % NCLIENTS];

		ck_assert_ptr_eq(index_id(i + 1), e);
		ck_assert_ptr_eq(index_sock(e->c, e->sock), e);
		ck_assert_ptr_null(index_sock(other, e->sock + NEPS));
		if (i % 2) {
			ck_assert_ptr_eq(index_req(e->c, e->req), e);
			ck_assert_ptr_null(index_req(other, e->req));
		} else {
			ck_assert_ptr_null(index_req(e->c, 100000 + i));
		}
	}
	/* the tables grew with their contents: chains stay short */
	ck_assert_uint_ge((size_t)1 << by_id.bits, NEPS / 2);
	ck_assert_uint_ge((size_t)1 << by_sock.bits, NEPS / 2);
	for (uint32_t b = 0; b < 1u << by_sock.bits; b++) {
		unsigned len = 0;

		for (struct hnode *h = by_sock.b[b]; h; h = h->next)
			len++;
		ck_assert_uint_le(len, 16);
	}
	/* remove every third; the rest are still found, the removed are not */
	for (uint32_t i = 0; i < NEPS; i += 3)
		index_del(&eps[i]);
	ck_assert_uint_eq(by_id.n, NEPS - (NEPS + 2) / 3);
	for (uint32_t i = 0; i < NEPS; i++) {
		struct ep *e = &eps[i];
		bool gone = i % 3 == 0;

		ck_assert_ptr_eq(index_id(i + 1), gone ? NULL : e);
		ck_assert_ptr_eq(index_sock(e->c, e->sock), gone ? NULL : e);
		if (i % 2)
			ck_assert_ptr_eq(index_req(e->c, e->req), gone ? NULL : e);
	}
	/* a dead ep is not found; a socket that changes its fd moves */
	eps[1].dead = true;
	ck_assert_ptr_null(index_id(2));
	ck_assert_ptr_null(index_sock(eps[1].c, eps[1].sock));
	eps[2].sock = 7777777;
	index_add_sock(&eps[2]);
	ck_assert_ptr_eq(index_sock(eps[2].c, 7777777), &eps[2]);
	ck_assert_ptr_null(index_sock(eps[2].c, 2 / NCLIENTS + 3));
	index_del_sock(&eps[2]);
	ck_assert_ptr_null(index_sock(eps[2].c, 7777777));
	ck_assert_ptr_eq(index_id(3), &eps[2]);
	free(eps);
}
END_TEST

static unsigned tries;

static int count_bind(void *arg, uint16_t port)
{
	(void)arg;
	(void)port;
	tries++;
	return 0;
}

START_TEST(held_ports_skipped)
{
	uint32_t cursor = 0;

	for (uint16_t p = 50000; p < 51000; p++)
		index_hold_port(p);
	ck_assert(index_port_held(50500));
	ck_assert(!index_port_held(51000));
	/* a thousand held ports cost no system call */
	ck_assert_int_eq(port_pick(50000, 51999, &cursor, count_bind, NULL), 51000);
	ck_assert_uint_eq(tries, 1);
	index_release_port(50001);
	cursor = 0;
	ck_assert_int_eq(port_pick(50000, 51999, &cursor, count_bind, NULL), 50001);
	/* every port held: EADDRNOTAVAIL without a try */
	tries = 0;
	ck_assert_int_eq(port_pick(50002, 50999, &cursor, count_bind, NULL), -EADDRNOTAVAIL);
	ck_assert_uint_eq(tries, 0);
}
END_TEST

int main(void)
{
	const TTest *const tests[] = { many_entries, held_ports_skipped, NULL };

	return run_tests("index", 30, tests);
}
