/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Port policy: exsd picks ephemeral ports itself, from [ports] ephemeral
 * in exs.conf, rather than leaving them to rdmacm (whose range is the
 * kernel's and cannot be configured per service). A port below 1024 is
 * for root or a client with CAP_NET_BIND_SERVICE only (proc_has_cap).
 */
#include <errno.h>

#include "exsd.h"

/*
 * Try ports of [lo, hi] with try_bind, starting after the last one given
 * out (*cursor), until one binds: the port, or -EADDRNOTAVAIL when every
 * port is in use. Ports exsd already holds (index.c's bitmap) are skipped
 * without a system call. Any error but EADDRINUSE ends the search at once.
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
		if (index_port_held((uint16_t)port))
			continue;
		int ret = try_bind(arg, (uint16_t)port);

		if (ret == 0)
			return (int)port;
		if (ret != -EADDRINUSE)
			return ret;
	}
	return -EADDRNOTAVAIL;
}
