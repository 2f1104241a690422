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

/* One line, one write: stderr is unbuffered (and the journal's stream
 * under systemd); a longer line is cut at EXSD_LOG_MAX bytes. */
#define EXSD_LOG_MAX 1024

void exsd_log(int level, const char *fmt, ...)
{
	char line[EXSD_LOG_MAX];
	va_list ap;
	int saved = errno, n, m;

	if (level > exsd.conf.log_level)
		return;
	n = exsd.log_prefix ? snprintf(line, sizeof(line), "<%d>", level)
			    : snprintf(line, sizeof(line), "exsd: ");
	va_start(ap, fmt);
	errno = saved; /* for %m */
	m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		m = 0;
	n += m < (int)(sizeof(line) - (size_t)n - 1) ? m : (int)(sizeof(line) - (size_t)n - 2);
	line[n++] = '\n';
	fwrite(line, 1, (size_t)n, stderr);
	errno = saved;
}

uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}
