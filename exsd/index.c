/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exsd's lookups: every ep by its exsctl id, a client's sockets by their
 * libexs fd, passive requests by their request id, an established
 * connection's other end on this host by their address pair; the ephemeral ports
 * exsd has handed out, as a bitmap; the names of ep states. Hash tables
 * chained through the ep itself, doubled as they fill, so that a lookup
 * costs the same with ten connections as with ten thousand. Adding never
 * fails: a table that cannot grow keeps working with longer chains. It
 * owns no ep (cm.c creates and frees them) and calls nothing of exsd's.
 */
#include <netinet/in.h>
#include <stddef.h>
#include <string.h>
#include <stdlib.h>

#include "exsd.h"

struct htab {
	struct hnode **b;
	uint32_t bits;
	size_t n;
	struct hnode *b0[1u << EXSD_HASH_BITS0];
};

static struct htab by_id, by_sock, by_req, by_pair;
static uint64_t eph_held[65536 / 64];

static uint32_t slot(uint64_t key, uint32_t bits)
{
	return (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> (64 - bits));
}

static void grow(struct htab *t)
{
	uint32_t bits = t->bits + 1, nb = 1u << t->bits;
	struct hnode **b = calloc((size_t)1 << bits, sizeof(*b));

	if (!b)
		return; /* longer chains, still correct */
	for (uint32_t i = 0; i < nb; i++)
		for (struct hnode *h = t->b[i], *next; h; h = next) {
			next = h->next;
			h->next = b[slot(h->key, bits)];
			b[slot(h->key, bits)] = h;
		}
	if (t->b != t->b0)
		free(t->b);
	t->b = b;
	t->bits = bits;
}

static void hadd(struct htab *t, struct hnode *h, uint64_t key)
{
	if (!t->b) {
		t->b = t->b0;
		t->bits = EXSD_HASH_BITS0;
	}
	if (t->n >= (size_t)1 << t->bits && t->bits < 28)
		grow(t);
	h->key = key;
	h->next = t->b[slot(key, t->bits)];
	t->b[slot(key, t->bits)] = h;
	h->linked = true;
	t->n++;
}

static void hdel(struct htab *t, struct hnode *h)
{
	struct hnode **p;

	if (!h->linked)
		return;
	for (p = &t->b[slot(h->key, t->bits)]; *p; p = &(*p)->next)
		if (*p == h) {
			*p = h->next;
			break;
		}
	h->linked = false;
	t->n--;
}

static struct hnode *hfirst(const struct htab *t, uint64_t key)
{
	struct hnode *h;

	if (!t->b)
		return NULL;
	for (h = t->b[slot(key, t->bits)]; h && h->key != key; h = h->next)
		;
	return h;
}

static struct hnode *hnext(struct hnode *h)
{
	uint64_t key = h->key;

	for (h = h->next; h && h->key != key; h = h->next)
		;
	return h;
}

#define EP_OF(h, member) ((struct ep *)((char *)(h) - offsetof(struct ep, member)))

static uint64_t sock_key(const struct client *c, uint32_t sock)
{
	return (uint64_t)c->id << 32 | sock;
}

void index_add_id(struct ep *e)
{
	hadd(&by_id, &e->by_id, e->sock_id);
}

void index_add_sock(struct ep *e)
{
	hdel(&by_sock, &e->by_sock);
	hadd(&by_sock, &e->by_sock, sock_key(e->c, e->sock));
}

void index_del_sock(struct ep *e)
{
	hdel(&by_sock, &e->by_sock);
}

void index_add_req(struct ep *e)
{
	hadd(&by_req, &e->by_req, e->req);
}

void index_del(struct ep *e)
{
	hdel(&by_id, &e->by_id);
	hdel(&by_sock, &e->by_sock);
	hdel(&by_req, &e->by_req);
	hdel(&by_pair, &e->by_pair);
}

struct ep *index_id(uint32_t sock_id)
{
	for (struct hnode *h = hfirst(&by_id, sock_id); h; h = hnext(h))
		if (!EP_OF(h, by_id)->dead)
			return EP_OF(h, by_id);
	return NULL;
}

struct ep *index_sock(const struct client *c, uint32_t sock)
{
	for (struct hnode *h = hfirst(&by_sock, sock_key(c, sock)); h; h = hnext(h)) {
		struct ep *e = EP_OF(h, by_sock);

		if (e->c == c && e->has_sock && e->sock == sock && !e->dead)
			return e;
	}
	return NULL;
}

struct ep *index_req(const struct client *c, uint32_t req)
{
	for (struct hnode *h = hfirst(&by_req, req); h; h = hnext(h)) {
		struct ep *e = EP_OF(h, by_req);

		if (e->c == c && e->passive && e->req == req && !e->dead)
			return e;
	}
	return NULL;
}

static bool same_addr(const struct sockaddr *a, const struct sockaddr *b)
{
	const struct sockaddr_in *a4 = (const void *)a, *b4 = (const void *)b;
	const struct sockaddr_in6 *a6 = (const void *)a, *b6 = (const void *)b;

	if (!a || !b || a->sa_family != b->sa_family)
		return false;
	if (a->sa_family == AF_INET)
		return a4->sin_port == b4->sin_port && a4->sin_addr.s_addr == b4->sin_addr.s_addr;
	return a->sa_family == AF_INET6 && a6->sin6_port == b6->sin6_port &&
	       !memcmp(&a6->sin6_addr, &b6->sin6_addr, sizeof(a6->sin6_addr));
}

static uint64_t addr_key(const struct sockaddr *a)
{
	const struct sockaddr_in *a4 = (const void *)a;
	const struct sockaddr_in6 *a6 = (const void *)a;
	uint64_t k[2];

	if (!a)
		return 0;
	if (a->sa_family == AF_INET)
		return (uint64_t)a4->sin_addr.s_addr << 16 | a4->sin_port;
	if (a->sa_family != AF_INET6)
		return 0;
	memcpy(k, &a6->sin6_addr, sizeof(k));
	return (k[0] ^ k[1] * 0x9E3779B97F4A7C15ull) + a6->sin6_port;
}

/* The same for both ends of a connection: the twin's addresses are e's
 * the other way round. */
static uint64_t pair_key(const struct ep *e)
{
	return addr_key(ep_local_addr(e)) + addr_key(ep_peer_addr(e));
}

void index_add_pair(struct ep *e)
{
	hdel(&by_pair, &e->by_pair);
	hadd(&by_pair, &e->by_pair, pair_key(e));
}

struct ep *index_twin(const struct ep *e)
{
	for (struct hnode *h = hfirst(&by_pair, pair_key(e)); h; h = hnext(h)) {
		struct ep *o = EP_OF(h, by_pair);

		if (o != e && o->state == EP_ESTABLISHED && !o->dead &&
		    same_addr(ep_local_addr(o), ep_peer_addr(e)) &&
		    same_addr(ep_peer_addr(o), ep_local_addr(e)))
			return o;
	}
	return NULL;
}

void index_hold_port(uint16_t port)
{
	eph_held[port / 64] |= 1ull << (port % 64);
}

void index_release_port(uint16_t port)
{
	eph_held[port / 64] &= ~(1ull << (port % 64));
}

bool index_port_held(uint16_t port)
{
	return eph_held[port / 64] >> (port % 64) & 1;
}

/* an ep state's name, for the log and exsctl */
static const char *const ep_states[] = {
	[EP_BOUND] = "bound",
	[EP_LISTENING] = "listening",
	[EP_RESOLVING_ADDR] = "resolving-addr",
	[EP_RESOLVING_ROUTE] = "resolving-route",
	[EP_WAIT_QP] = "wait-qp",
	[EP_CONNECTING] = "connecting",
	[EP_WAIT_RTR] = "wait-rtr",
	[EP_REQUESTED] = "requested",
	[EP_ACCEPTING] = "accepting",
	[EP_ESTABLISHED] = "established",
};

const char *ep_state_name(enum ep_state s)
{
	return s <= EP_ESTABLISHED ? ep_states[s] : "?";
}
