/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* QP attributes through the control protocol (proto/exs_qpattr.c). */
#include "check_main.h"
#include <stdlib.h>
#include <string.h>

#include "exs_qpattr.h"

START_TEST(round_trip)
{
	struct ibv_qp_attr a, b;
	ExsCtl__QpAttr m, *u;
	uint8_t gid[16], buf[512];
	size_t n;
	int mask;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = 0x123456;
	a.rq_psn = 0xabcdef;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.grh.sgid_index = 1;
	for (int i = 0; i < 16; i++)
		a.ah_attr.grh.dgid.raw[i] = (uint8_t)(0xf0 + i);
	exs_qpattr_from_ibv(&a, 0x129181, &m, gid);
	n = exs_ctl__qp_attr__get_packed_size(&m);
	ck_assert(n < sizeof(buf));
	exs_ctl__qp_attr__pack(&m, buf);
	u = exs_ctl__qp_attr__unpack(NULL, n, buf);
	ck_assert_ptr_nonnull(u);
	ck_assert_int_eq(exs_qpattr_to_ibv(u, &b, &mask), 0);
	ck_assert_int_eq(mask, 0x129181);
	ck_assert_int_eq(b.qp_state, IBV_QPS_RTR);
	ck_assert_int_eq(b.path_mtu, IBV_MTU_1024);
	ck_assert_uint_eq(b.dest_qp_num, 0x123456);
	ck_assert_uint_eq(b.rq_psn, 0xabcdef);
	ck_assert_uint_eq(b.min_rnr_timer, 12);
	ck_assert_uint_eq(b.ah_attr.grh.hop_limit, 64);
	ck_assert_mem_eq(b.ah_attr.grh.dgid.raw, a.ah_attr.grh.dgid.raw, 16);
	exs_ctl__qp_attr__free_unpacked(u, NULL);
}
END_TEST

START_TEST(refuses_bad_fields)
{
	ExsCtl__QpAttr m = EXS_CTL__QP_ATTR__INIT;
	struct ibv_qp_attr a;
	uint8_t gid[5] = { 0 };
	int mask;

	m.grh_dgid.data = gid;
	m.grh_dgid.len = 5;
	ck_assert_int_eq(exs_qpattr_to_ibv(&m, &a, &mask), -EINVAL);
	m.grh_dgid.len = 0;
	m.qp_state = 99;
	ck_assert_int_eq(exs_qpattr_to_ibv(&m, &a, &mask), -EINVAL);
}
END_TEST

int main(void)
{
	const TTest *const tests[] = { round_trip, refuses_bad_fields, NULL };

	return run_tests("qpattr", 10, tests);
}
