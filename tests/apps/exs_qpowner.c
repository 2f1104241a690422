/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs_qpowner: exsd's question to the kernel (exsd/qpown.c) on its own, so
 * that both of its forms can be checked against `rdma res show qp`.
 *
 *   exs_qpowner DEVICE QPN PORT
 * PORT 1 (or another port) asks for the one QP; PORT 0 makes qp_owner()
 * dump the device's QPs. Prints "owner PID" (the creating thread, 0 for
 * none) or "error ERRNO (text)". Exit 0 if an owner was found.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exsd.h"

void exsd_log(int level, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "<%d>", level);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int main(int argc, char **argv)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	int index = -1, ret;
	pid_t pid = 0;

	if (argc != 4) {
		fprintf(stderr, "usage: exs_qpowner DEVICE QPN PORT\n");
		return 2;
	}
	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
			index = ibv_get_device_index(list[i]);
	if (index < 0) {
		printf("error: no device %s\n", argv[1]);
		return 1;
	}
	ret = qp_owner((uint32_t)index, (uint32_t)strtoul(argv[3], NULL, 0),
		       (uint32_t)strtoul(argv[2], NULL, 0), &pid);
	if (ret) {
		printf("error %d (%s)\n", -ret, strerror(-ret));
		return 1;
	}
	printf("owner %d\n", (int)pid);
	return 0;
}
