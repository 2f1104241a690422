/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The setup negotiation in CM private data (exsd/negotiate.c). */
#include <arpa/inet.h>
#include "check_main.h"
#include <stdlib.h>
#include <string.h>

#include "exsd.h"

START_TEST(round_trip_and_minimum)
{
	struct exs_wire_setup w, a, b = { .credits = 8, .sp_max = 512, .stream_buf = 65536 }, agreed;

	setup_encode(&w, EXS_WIRE_SETUP_REQUEST,
		     &(struct exs_wire_setup){ .credits = 32, .sp_max = 100, .stream_buf = 1 << 20,
					       .wait_ms = 2000 });
	ck_assert_int_eq(setup_decode(&w, sizeof(w), EXS_WIRE_SETUP_REQUEST, &a), 0);
	ck_assert_uint_eq(a.wait_ms, 2000);
	ck_assert_uint_eq(a.credits, 32);
	ck_assert_uint_eq(a.sp_max, 100);
	ck_assert_uint_eq(a.stream_buf, 1 << 20);
	setup_agree(&a, &b, &agreed);
	ck_assert_uint_eq(agreed.credits, 8);
	ck_assert_uint_eq(agreed.sp_max, 100);
	ck_assert_uint_eq(agreed.stream_buf, 65536);
	ck_assert_uint_eq(agreed.wait_ms, 0); /* the connecting side's wait is not answered */
	/* a response may only lower each value */
	ck_assert(setup_within(&agreed, &a));
	ck_assert(!setup_within(&a, &agreed));
	/* CM private data arrives zero-padded to the transport's size */
	uint8_t pad[56] = { 0 };
	memcpy(pad, &w, sizeof(w));
	ck_assert_int_eq(setup_decode(pad, sizeof(pad), EXS_WIRE_SETUP_REQUEST, &a), 0);
}
END_TEST

START_TEST(refusals)
{
	struct exs_wire_setup w, out;

	setup_encode(&w, EXS_WIRE_SETUP_REQUEST, &(struct exs_wire_setup){ .credits = 32 });
	ck_assert_int_eq(setup_decode(NULL, 0, EXS_WIRE_SETUP_REQUEST, &out), -EPROTO);
	ck_assert_int_eq(setup_decode(&w, sizeof(w) - 1, EXS_WIRE_SETUP_REQUEST, &out), -EPROTO);
	ck_assert_int_eq(setup_decode(&w, sizeof(w), EXS_WIRE_SETUP_RESPONSE, &out), -EPROTO);
	w.version = EXS_WIRE_VERSION + 1;
	ck_assert_int_eq(setup_decode(&w, sizeof(w), EXS_WIRE_SETUP_REQUEST, &out), -EPROTONOSUPPORT);
	setup_encode(&w, EXS_WIRE_SETUP_REQUEST, &(struct exs_wire_setup){ .credits = 0 });
	ck_assert_int_eq(setup_decode(&w, sizeof(w), EXS_WIRE_SETUP_REQUEST, &out), -EPROTO);
	setup_encode(&w, EXS_WIRE_SETUP_REQUEST,
		     &(struct exs_wire_setup){ .credits = EXS_LIMIT_CREDITS + 1 });
	ck_assert_int_eq(setup_decode(&w, sizeof(w), EXS_WIRE_SETUP_REQUEST, &out), -EPROTO);
	w.magic = 0;
	ck_assert_int_eq(setup_decode(&w, sizeof(w), EXS_WIRE_SETUP_REQUEST, &out), -EPROTO);
}
END_TEST

START_TEST(rejects)
{
	struct exs_wire_reject r;
	uint8_t foreign[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };

	reject_encode(&r, EPROTONOSUPPORT);
	ck_assert_int_eq(reject_decode(&r, sizeof(r)), EPROTONOSUPPORT);
	ck_assert_int_eq(reject_decode(foreign, sizeof(foreign)), ECONNREFUSED);
	ck_assert_int_eq(reject_decode(NULL, 0), ECONNREFUSED);
	reject_encode(&r, -5);
	ck_assert_int_eq(reject_decode(&r, sizeof(r)), ECONNREFUSED);
}
END_TEST

int main(void)
{
	const TTest *const tests[] = { round_trip_and_minimum, refusals, rejects, NULL };

	return run_tests("negotiate", 10, tests);
}
