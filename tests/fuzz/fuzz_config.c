/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * libFuzzer target: the exs.conf parser (exsd/config.c) through
 * config_load(), as exsd reads a file. Besides the sanitizers it checks
 * that a file accepted gives a configuration inside the documented bounds
 * and that what `exsd -p` prints of it (config_print) reads back to the
 * same configuration.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "exsd.h"

struct exsd exsd;
void exsd_log(int level, const char *fmt, ...)
{
	(void)level;
	(void)fmt;
}

static int fd_in, fd_out;
static char path_in[64], path_out[64];
static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fd_in = memfd_create("exs.conf", MFD_CLOEXEC);
	fd_out = memfd_create("printed", MFD_CLOEXEC);
	devnull = fopen("/dev/null", "w");
	if (fd_in < 0 || fd_out < 0 || !devnull)
		abort();
	snprintf(path_in, sizeof(path_in), "/proc/self/fd/%d", fd_in);
	snprintf(path_out, sizeof(path_out), "/proc/self/fd/%d", fd_out);
	return 0;
}

static void put(int fd, const void *p, size_t n)
{
	if (ftruncate(fd, 0) || pwrite(fd, p, n, 0) != (ssize_t)n)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct exsd_config a, b;
	char *text = NULL;
	size_t len = 0;
	FILE *f;

	put(fd_in, data, size);
	config_defaults(&a);
	if (config_load(&a, path_in, true, devnull))
		return 0;
	if (a.port_lo > a.port_hi || a.port_lo == 0 || a.port_hi > 65535 || !a.credits ||
	    a.credits > 1024 || !a.max_clients || !a.max_sockets || !a.socket[0] ||
	    a.log_level < LOG_ERR || a.log_level > LOG_DEBUG) {
		fprintf(stderr, "accepted a configuration out of bounds\n");
		abort();
	}
	f = open_memstream(&text, &len);
	if (!f)
		abort();
	config_print(&a, f);
	fclose(f);
	put(fd_out, text, len);
	free(text);
	config_defaults(&b);
	if (config_load(&b, path_out, true, devnull) || memcmp(&a, &b, sizeof(a))) {
		fprintf(stderr, "what config_print wrote does not read back the same\n");
		abort();
	}
	return 0;
}
