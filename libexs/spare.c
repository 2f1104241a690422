/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Spare connections: a queue pair, its CQ and its registered control
 * memory, built before a connect or accept needs them (issue 12: building
 * them took a third of a connect's time, on both sides, on the critical
 * path). After a socket of a type has connected on a device with a given
 * configuration (credits, small-message and stream-buffer sizes, inline
 * size), one spare of that kind is kept: the next connect or accept of
 * the same kind takes it at once and a builder thread makes the next one,
 * outside exs_g.lock. A socket of another configuration builds its own, as
 * before. EXS_SPARE_QPS=0 in the environment turns spares off.
 *
 * On iWARP too. Linux 6.1 frees a QP's number in the driver's destroy and
 * takes the QP out of the resource tracker only after, and siw gives the
 * lowest free number at once, so a QP made in between (by any process) is
 * never tracked and exsd's ownership check refuses it ("QP 9 on siw0 does
 * not exist"). Spares make creates overlap destroys far more often: the
 * connect benchmark on siw failed 3 of 6 rounds with them, so they were
 * off on iWARP until exsd learnt to ask for another QP instead of failing
 * (Rebuild in exs_control.proto; broker.c builds it without a spare).
 *
 * A connect need not wait for its route to take a spare: each kind keeps
 * the port and INIT attributes of the latest route a connect of it got
 * (exs_spare_routed), and the next connect of that type and configuration
 * takes the spare of the kind routed last, moves it to INIT and offers it
 * in its Connect (exs_spare_take_early; exs_control.proto, Connect.early).
 *
 * A spare is an ordinary connection that no socket has adopted yet
 * (exs_conn_adopt): its CQ reports to nobody and nothing is posted on it.
 * It is made by this process's builder thread, which exsd's ownership
 * check accepts as the process's (qpown.c maps a thread to its process).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "exs_int.h"

#define SPARE_KINDS (EXS_MAX_DEVS * 2) /* a device's SEQPACKET and STREAM */

struct spare {
	struct exs_dev *dev;	/* NULL: a free slot */
	int type;
	bool iwarp;
	struct exs_conn_cfg cfg; /* busy_poll not part of it */
	struct exs_conn *conn;	/* the spare, or NULL */
	bool wanted;		/* the builder is to make one */
	bool failed;		/* building one failed: no more of this kind */
	/* the latest route a connect of this kind got (exs_spare_routed) */
	uint64_t routed;	/* its stamp (routes counts them); 0: none */
	uint32_t port;
	ExsCtl__QpAttr init;	/* its scalars only */
};

static struct spare spares[SPARE_KINDS]; /* exs_g.lock */
static uint64_t routes; /* exs_g.lock */
static pthread_cond_t spare_cond = PTHREAD_COND_INITIALIZER;
static bool builder_started;
static int spares_on = -1; /* from EXS_SPARE_QPS, read once */

static bool cfg_same(const struct exs_conn_cfg *a, const struct exs_conn_cfg *b)
{
	return a->credits == b->credits && a->sp_max == b->sp_max &&
	       a->stream_buf == b->stream_buf && a->inline_max == b->inline_max;
}

static void *builder_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&exs_g.lock);
	for (;;) {
		struct spare *k = NULL, want;
		struct exs_conn *c = NULL;
		int i, ret;

		for (i = 0; i < SPARE_KINDS && !k; i++)
			if (spares[i].dev && spares[i].wanted && !spares[i].conn)
				k = &spares[i];
		if (!k) {
			pthread_cond_wait(&spare_cond, &exs_g.lock);
			continue;
		}
		k->wanted = false;
		want = *k;
		pthread_mutex_unlock(&exs_g.lock);
		ret = exs_conn_build(want.dev, want.type, want.iwarp, &want.cfg, &c);
		pthread_mutex_lock(&exs_g.lock);
		if (ret) {
			k->failed = true; /* the next connect of this kind builds, and says why */
			if (EXS_DEBUG_ON())
				exs_debug("spare connection on %s: %s", want.dev->name, strerror(-ret));
		} else if (k->conn || k->dev != want.dev || k->type != want.type ||
			   !cfg_same(&k->cfg, &want.cfg)) {
			exs_conn_destroy(c); /* wanted no more in this form */
		} else {
			k->conn = c;
		}
	}
	return NULL;
}

static bool enabled(void)
{
	if (spares_on < 0) {
		const char *e = getenv("EXS_SPARE_QPS");

		spares_on = !(e && !strcmp(e, "0"));
	}
	return spares_on;
}

static void want(struct spare *k)
{
	pthread_t t;

	k->wanted = true;
	if (!builder_started) {
		builder_started = !exs_thread_start(&t, builder_main, NULL, "exs-spare");
		if (!builder_started) {
			k->failed = true;
			return;
		}
	}
	pthread_cond_signal(&spare_cond);
}

/* Kind k's spare, adopted by socket `fd`; another of the kind is wanted. */
static struct exs_conn *adopt(struct spare *k, int fd, uint32_t owner, const struct exs_conn_cfg *cfg)
{
	struct exs_conn *c = k->conn;

	k->conn = NULL;
	exs_conn_adopt(c, fd, owner, cfg);
	want(k);
	return c;
}

/* Like exs_conn_create, but a spare of the same kind is taken when there
 * is one; either way another of that kind is wanted. exs_g.lock held. */
int exs_spare_take(int fd, int type, const char *devname, bool iwarp,
		   const struct exs_conn_cfg *cfg, uint32_t owner, struct exs_conn **ret_conn)
{
	struct spare *k = NULL, *free_slot = NULL;
	int i;

	if (!enabled())
		return exs_conn_create(fd, type, devname, iwarp, cfg, owner, ret_conn);
	for (i = 0; i < SPARE_KINDS; i++) {
		if (!spares[i].dev)
			free_slot = free_slot ? free_slot : &spares[i];
		else if (spares[i].type == type && !strcmp(spares[i].dev->name, devname))
			k = &spares[i];
	}
	if (k && k->conn && k->iwarp == iwarp && cfg_same(&k->cfg, cfg)) {
		*ret_conn = adopt(k, fd, owner, cfg);
		return 0;
	}
	i = exs_conn_create(fd, type, devname, iwarp, cfg, owner, ret_conn);
	if (i)
		return i;
	if (!k && !free_slot)
		return 0;
	if (!k) {
		k = free_slot;
		k->dev = (*ret_conn)->dev;
		k->type = type;
	}
	if (k->conn) { /* of another configuration: the newest one is kept */
		exs_conn_destroy(k->conn);
		k->conn = NULL;
	}
	if (k->iwarp != iwarp || !cfg_same(&k->cfg, cfg))
		k->routed = 0;
	k->iwarp = iwarp;
	k->cfg = *cfg;
	k->cfg.busy_poll = false;
	if (!k->failed)
		want(k);
	return 0;
}

void exs_spare_routed(int type, const char *dev, uint32_t port, const ExsCtl__QpAttr *init)
{
	for (int i = 0; i < SPARE_KINDS; i++) {
		struct spare *k = &spares[i];

		if (k->dev && k->type == type && !strcmp(k->dev->name, dev)) {
			k->routed = ++routes;
			k->port = port;
			exs_qpattr_scalars(&k->init, init);
			return;
		}
	}
}

int exs_spare_take_early(int fd, int type, const struct exs_conn_cfg *cfg, uint32_t owner,
			 struct exs_conn **ret_conn, uint32_t *port, ExsCtl__QpAttr *init)
{
	struct spare *k = NULL;

	for (int i = 0; i < SPARE_KINDS; i++)
		if (spares[i].dev && spares[i].type == type && spares[i].routed &&
		    cfg_same(&spares[i].cfg, cfg) && (!k || spares[i].routed > k->routed))
			k = &spares[i];
	if (!k || !k->conn)
		return -ENOENT;
	*ret_conn = adopt(k, fd, owner, cfg);
	*port = k->port;
	*init = k->init;
	return 0;
}
