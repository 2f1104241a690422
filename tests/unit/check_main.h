/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The main() every Check unit test shares: one suite, one case, fork mode. */
#ifndef CHECK_MAIN_H
#define CHECK_MAIN_H
#include <check.h>
#include <stdlib.h>

static inline int run_tests(const char *name, int timeout, const TTest *const *tests)
{
	Suite *s = suite_create(name);
	TCase *tc = tcase_create(name);
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, timeout);
	for (; *tests; tests++)
		tcase_add_test(tc, *tests);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_set_fork_status(sr, CK_FORK);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
#endif
