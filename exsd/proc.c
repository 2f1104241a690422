/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * What exsd reads of a client process in /proc: its effective capabilities
 * (ports below 1024) and, for a thread the kernel names as a QP's owner,
 * whether it is one of the client's threads (QP ownership).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exsd.h"

/* The numeric field `key` ("Key:\tvalue") of a /proc/PID/status text:
 * 0, -ENOENT when it is absent, -EINVAL when its value is not a number. */
int proc_status_parse(FILE *f, const char *key, int base, uint64_t *ret)
{
	size_t klen = strlen(key);
	char line[256];

	while (fgets(line, sizeof(line), f)) {
		char *end;

		if (strncmp(line, key, klen) || line[klen] != ':')
			continue;
		errno = 0;
		*ret = strtoull(line + klen + 1, &end, base);
		if (errno || end == line + klen + 1 || (*end && *end != '\n'))
			return -EINVAL;
		return 0;
	}
	return -ENOENT;
}

int proc_status_field(pid_t pid, const char *key, int base, uint64_t *ret)
{
	char path[64];
	FILE *f;
	int err;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	err = proc_status_parse(f, key, base, ret);
	fclose(f);
	return err;
}

/* Whether process pid has capability cap in its effective set. */
bool proc_has_cap(pid_t pid, unsigned cap)
{
	uint64_t eff = 0;

	return !proc_status_field(pid, "CapEff", 16, &eff) && cap < 64 && (eff >> cap & 1);
}

/* Whether task `tid` is a thread of process `pid`: one path lookup, where
 * /proc/TID/status has the kernel format some fifty fields. */
bool proc_is_thread_of(pid_t pid, pid_t tid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/task/%d", (int)pid, (int)tid);
	return !access(path, F_OK);
}
