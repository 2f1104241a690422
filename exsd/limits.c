/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Per-uid limits: how many control connections, EXS sockets and ports
 * (bound by exsd for a client) each local user holds, so that one
 * unprivileged user cannot take what everyone needs. Root (uid 0) is held
 * to none of them, and the last [limits] reserved_clients places of
 * max_clients are for root alone. The counts live in a hash table keyed by
 * uid; an entry goes when its uid holds nothing. Nothing here logs.
 */
#include <errno.h>
#include <stdlib.h>

#include "exsd.h"

#define UID_BUCKETS 256		/* a power of two */

static struct uid_use *buckets[UID_BUCKETS];

static struct uid_use **bucket(uid_t uid)
{
	uint32_t h = (uint32_t)uid * 2654435761u; /* Knuth's multiplicative hash */

	return &buckets[h >> 24 & (UID_BUCKETS - 1)];
}

struct uid_use *uid_use_get(uid_t uid)
{
	struct uid_use **b = bucket(uid), *u;

	for (u = *b; u; u = u->next)
		if (u->uid == uid)
			return u;
	u = calloc(1, sizeof(*u));
	if (!u)
		return NULL;
	u->uid = uid;
	u->next = *b;
	*b = u;
	return u;
}

/* Forget u if its uid holds nothing any more. */
void uid_use_put(struct uid_use *u)
{
	struct uid_use **p;

	if (!u || u->clients || u->sockets || u->ports)
		return;
	for (p = bucket(u->uid); *p; p = &(*p)->next)
		if (*p == u) {
			*p = u->next;
			free(u);
			return;
		}
}

/* -EUSERS: exsd is full (for this uid); the entry to keep in the client. */
int limits_admit_client(uid_t uid, struct uid_use **ret)
{
	const struct exsd_config *c = &exsd.conf;
	unsigned room = c->max_clients;
	struct uid_use *u;

	if (uid != 0)
		room = c->reserved_clients < room ? room - c->reserved_clients : 0;
	if (exsd.nclients >= room)
		return -EUSERS;
	u = uid_use_get(uid);
	if (!u)
		return -ENOMEM;
	if (uid != 0 && u->clients >= c->max_clients_per_uid) {
		uid_use_put(u);
		return -EUSERS;
	}
	u->clients++;
	*ret = u;
	return 0;
}

void limits_client_gone(struct uid_use *u)
{
	u->clients--;
	uid_use_put(u);
}

/* -ENOBUFS, as for a client at max_sockets_per_client. */
int limits_take_socket(struct uid_use *u)
{
	if (u->uid != 0 && u->sockets >= exsd.conf.max_sockets_per_uid)
		return -ENOBUFS;
	u->sockets++;
	return 0;
}

void limits_put_socket(struct uid_use *u)
{
	u->sockets--;
}

/* -EADDRNOTAVAIL, as when the ephemeral range has no free port. */
int limits_take_port(struct uid_use *u)
{
	if (u->uid != 0 && u->ports >= exsd.conf.max_ports_per_uid)
		return -EADDRNOTAVAIL;
	u->ports++;
	return 0;
}

void limits_put_port(struct uid_use *u)
{
	u->ports--;
}
