/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * What every exsd file may use: the daemon's one global, the logger and
 * the clock. It calls nothing else of exsd's.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "exsd.h"

struct exsd exsd = { .listen_fd = -1, .conf.log_level = LOG_INFO };

void exsd_log(int level, const char *fmt, ...)
{
	va_list ap;
	int saved = errno;

	if (level > exsd.conf.log_level)
		return;
	if (exsd.log_prefix)
		fprintf(stderr, "<%d>", level);
	else
		fprintf(stderr, "exsd: ");
	va_start(ap, fmt);
	errno = saved;
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}
