/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Limits that libexs and exsd must agree on, defined once for both, and the
 * check of an errno that crosses the control channel or the CM (a peer may
 * send any integer: only a positive value below 4096 is taken as one).
 */
#ifndef EXS_LIMITS_H
#define EXS_LIMITS_H
#include <stdbool.h>

#define EXS_LIMIT_CREDITS 1024	/* flow-control credits of one connection */
#define EXS_LIMIT_BACKLOG 4096	/* connection requests one listener holds */

static inline bool exs_is_errno(long v)
{
	return v > 0 && v < 4096;
}
#endif
