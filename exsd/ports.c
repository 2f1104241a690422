/*
 * Port policy: exsd picks ephemeral ports itself, from [ports] ephemeral
 * in exs.conf, rather than leaving them to rdmacm (whose range is the
 * kernel's and cannot be configured per service); and a port below 1024
 * is for root or a client with CAP_NET_BIND_SERVICE only.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exsd.h"

/*
 * Try ports of [lo, hi] with try_bind, starting after the last one given
 * out (*cursor), until one binds: the port, or -EADDRNOTAVAIL when every
 * port is in use. Any error but EADDRINUSE ends the search at once.
 */
int port_pick(uint32_t lo, uint32_t hi, uint32_t *cursor,
	      int (*try_bind)(void *arg, uint16_t port), void *arg)
{
	uint32_t n = hi - lo + 1, port;

	if (lo == 0 || lo > hi || hi > 65535)
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++) {
		port = *cursor < lo || *cursor >= hi ? lo : *cursor + 1;
		*cursor = port;
		int ret = try_bind(arg, (uint16_t)port);

		if (ret == 0)
			return (int)port;
		if (ret != -EADDRINUSE)
			return ret;
	}
	return -EADDRNOTAVAIL;
}

/* The CapEff mask from a /proc/PID/status text. */
int cap_eff_parse(FILE *f, uint64_t *ret)
{
	char line[256];

	while (fgets(line, sizeof(line), f)) {
		char *end;

		if (strncmp(line, "CapEff:", 7))
			continue;
		errno = 0;
		*ret = strtoull(line + 7, &end, 16);
		if (errno || end == line + 7 || (*end && *end != '\n'))
			return -EINVAL;
		return 0;
	}
	return -ENOENT;
}

/* Whether process pid has capability cap in its effective set. */
bool proc_has_cap(pid_t pid, unsigned cap)
{
	char path[64];
	uint64_t eff = 0;
	FILE *f;
	int ret;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	ret = cap_eff_parse(f, &eff);
	fclose(f);
	return !ret && cap < 64 && (eff >> cap & 1);
}
