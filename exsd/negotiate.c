/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The EXS setup negotiation (guide §6.2, §7; proto/exs_wire.h part 1): the
 * encoding of setup requests, responses and rejects in CM private data,
 * and the rule that both sides use the minimum of what each offered.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include "exsd.h"

/* v in host order -> w as it goes on the wire */
void setup_encode(struct exs_wire_setup *w, uint8_t kind, const struct exs_wire_setup *v)
{
	memset(w, 0, sizeof(*w));
	w->magic = htons(EXS_WIRE_MAGIC);
	w->version = EXS_WIRE_VERSION;
	w->kind = kind;
	w->credits = htonl(v->credits);
	w->sp_max = htonl(v->sp_max);
	w->stream_buf = htonl(v->stream_buf);
	w->wait_ms = htonl(v->wait_ms);
}

void setup_from_msg(struct exs_wire_setup *w, const ExsCtl__Setup *m)
{
	memset(w, 0, sizeof(*w));
	w->credits = m->credits;
	w->sp_max = m->sp_max;
	w->stream_buf = m->stream_buf;
}

void setup_to_msg(ExsCtl__Setup *m, const struct exs_wire_setup *w)
{
	m->credits = w->credits;
	m->sp_max = w->sp_max;
	m->stream_buf = w->stream_buf;
}

/* A response may only lower what was offered. */
bool setup_within(const struct exs_wire_setup *resp, const struct exs_wire_setup *offer)
{
	return resp->credits <= offer->credits && resp->sp_max <= offer->sp_max &&
	       resp->stream_buf <= offer->stream_buf;
}

/* Decode into host order. -EPROTO: not EXS; -EPROTONOSUPPORT: other version. */
int setup_decode(const void *pd, size_t len, uint8_t kind, struct exs_wire_setup *ret)
{
	struct exs_wire_setup w;

	if (!pd || len < sizeof(w))
		return -EPROTO;
	memcpy(&w, pd, sizeof(w));
	if (ntohs(w.magic) != EXS_WIRE_MAGIC)
		return -EPROTO;
	if (w.version != EXS_WIRE_VERSION)
		return -EPROTONOSUPPORT;
	if (w.kind != kind)
		return -EPROTO;
	w.magic = EXS_WIRE_MAGIC;
	w.credits = ntohl(w.credits);
	w.sp_max = ntohl(w.sp_max);
	w.stream_buf = ntohl(w.stream_buf);
	w.wait_ms = ntohl(w.wait_ms);
	if (w.credits == 0 || w.credits > EXS_LIMIT_CREDITS)
		return -EPROTO;
	*ret = w;
	return 0;
}

void setup_agree(const struct exs_wire_setup *a, const struct exs_wire_setup *b,
		 struct exs_wire_setup *ret)
{
	*ret = *a;
	ret->credits = a->credits < b->credits ? a->credits : b->credits;
	ret->sp_max = a->sp_max < b->sp_max ? a->sp_max : b->sp_max;
	ret->stream_buf = a->stream_buf < b->stream_buf ? a->stream_buf : b->stream_buf;
	ret->wait_ms = 0; /* a request's alone */
}

void reject_encode(struct exs_wire_reject *r, int err)
{
	r->magic = htons(EXS_WIRE_MAGIC);
	r->version = EXS_WIRE_VERSION;
	r->kind = EXS_WIRE_SETUP_REJECT;
	r->err = (int32_t)htonl((uint32_t)err);
}

/* The errno an EXS reject carries, or ECONNREFUSED for any other reject. */
int reject_decode(const void *pd, size_t len)
{
	struct exs_wire_reject r;
	int err;

	if (!pd || len < sizeof(r))
		return ECONNREFUSED;
	memcpy(&r, pd, sizeof(r));
	if (ntohs(r.magic) != EXS_WIRE_MAGIC || r.kind != EXS_WIRE_SETUP_REJECT)
		return ECONNREFUSED;
	err = (int)ntohl((uint32_t)r.err);
	return exs_is_errno(err) ? err : ECONNREFUSED;
}
