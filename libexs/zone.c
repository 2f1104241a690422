/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * zone.c: a connection's copy zones. An unregistered send or receive
 * (EXS_MHANDLE_UNREGISTERED) that the small-packet path does not take
 * needs memory the device knows. Registering its buffer for the one call
 * costs an ibv_reg_mr and an ibv_dereg_mr on each side, which pin and
 * unpin its pages: for 32 KiB in the test guest that took longer than the
 * transfer (a one-way time of 1.8-2.0 ms unregistered against 0.56-1.4 ms
 * registered). Up to EXS_ZONE_MAX bytes, such an operation is copied
 * instead, through a run of pages of a zone that is registered once, at
 * its first use: a send is copied in when it starts, a receive out when
 * it completes.
 *
 * A connection has two zones, one for sends (local access only) and one
 * for receives (remote write: its adverts point into it). The receive
 * zone is the connection's own, so a peer that writes outside what it was
 * advertised reaches at most that connection's copies of its own data,
 * never the application's memory. When a zone cannot be made (the
 * memlock limit) or is full, the operation registers its buffer as before.
 * A zone stays pinned while its connection lasts, so all of a process's
 * zones together pin at most a quarter of RLIMIT_MEMLOCK: the rest stays
 * the application's, for its own registrations.
 *
 * Only conn.c calls these, under exs_g.lock (exs_zone_free also when a
 * connection that was never built goes).
 */
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "exs_int.h"

#define ZONE_LEN ((size_t)EXS_ZONE_PAGES * EXS_ZONE_PAGE)

/* the pages of a run of n bytes */
static unsigned pages(size_t n)
{
	return (unsigned)((n + EXS_ZONE_PAGE - 1) / EXS_ZONE_PAGE);
}

static size_t pinned; /* by all zones of the process (atomic: see exs_zone_free) */

/* Would one more zone stay within its share of RLIMIT_MEMLOCK? The limit
 * is read once: a process seldom changes it, and this runs per transfer. */
static bool within_share(void)
{
	static rlim_t share;
	struct rlimit rl;

	if (!share)
		share = getrlimit(RLIMIT_MEMLOCK, &rl) || rl.rlim_cur == RLIM_INFINITY ?
				RLIM_INFINITY : rl.rlim_cur / 4 + 1;
	return share == RLIM_INFINITY || __atomic_load_n(&pinned, __ATOMIC_RELAXED) + ZONE_LEN < share;
}

static int make(struct exs_zone *z, struct exs_dev *d, int access)
{
	size_t len = ZONE_LEN;

	/* pages of its own: a registered page must not hold the allocator's
	 * data (guide §11.3.2) */
	z->mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (z->mem == MAP_FAILED) {
		z->mem = NULL;
		return -1;
	}
	z->mr = exs_verbs_reg_mr(d, z->mem, len, access);
	if (!z->mr) {
		munmap(z->mem, len);
		z->mem = NULL;
		return -1;
	}
	__atomic_add_fetch(&pinned, len, __ATOMIC_RELAXED);
	return 0;
}

int exs_zone_take(struct exs_zone *z, struct exs_dev *d, size_t n, int access)
{
	unsigned k = pages(n), i;
	uint64_t run;

	if (!n || n > EXS_ZONE_MAX || z->failed)
		return -1;
	if (!z->mem && !within_share())
		return -1; /* perhaps later, when other connections have gone */
	if (!z->mem && make(z, d, access)) {
		/* not again for this connection: each try pins and fails */
		z->failed = true;
		if (EXS_DEBUG_ON())
			exs_debug("copy zone: cannot register %zu KiB, unregistered transfers register each call",
				  ZONE_LEN / 1024);
		return -1;
	}
	run = (1ull << k) - 1; /* k <= EXS_ZONE_MAX / EXS_ZONE_PAGE < 64 */
	for (i = 0; i + k <= EXS_ZONE_PAGES; i++)
		if (!(z->used & (run << i))) {
			z->used |= run << i;
			return (int)i;
		}
	return -1;
}

char *exs_zone_addr(const struct exs_zone *z, int page)
{
	return z->mem + (size_t)page * EXS_ZONE_PAGE;
}

void exs_zone_give(struct exs_zone *z, int page, size_t n)
{
	unsigned k = pages(n);

	z->used &= ~(((1ull << k) - 1) << page);
}

void exs_zone_free(struct exs_zone *z)
{
	if (z->mr) {
		ibv_dereg_mr(z->mr);
		/* a connection that never got built may go without exs_g.lock */
		__atomic_sub_fetch(&pinned, ZONE_LEN, __ATOMIC_RELAXED);
	}
	if (z->mem)
		munmap(z->mem, ZONE_LEN);
	memset(z, 0, sizeof(*z));
}
