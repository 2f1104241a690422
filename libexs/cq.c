/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Completions: the CQs that the connections of one device share, and the
 * ids that say whose a completion is.
 *
 * A connection reserves room in one of its device's CQs for every
 * completion its two queues can hold at once, so a shared CQ never
 * overflows (an overflow is a CQ error that would fail every connection on
 * it). A CQ holds EXS_SCQ_ENTRIES (fewer if the device allows fewer), so
 * polling 1,000 connections is one poll, not 1,000.
 *
 * Every work request carries its connection's id (conn.c's WR_ID). A
 * connection that goes may leave completions in the CQ: they name an id
 * that resolves to nothing and are dropped. Its room counts as taken
 * ("stale") until the CQ has next been polled empty, which is when the
 * last of them is known to be gone. A freed id's slot is reused last
 * (FIFO), with a new generation, so a stale completion never reaches the
 * slot's next owner.
 *
 * The lists, counts and id table are guarded by their own lock: a spare
 * connection is built without exs_g.lock (spare.c). Polling, arming and
 * looking ids up run under exs_g.lock; an id resolves to a connection
 * that only exs_g.lock's holder can destroy.
 */
#include <stdlib.h>

#include "exs_int.h"

#define SLOT_BITS 18 /* at most 2^18 connections per process at once */
#define GEN_MASK ((1u << (EXS_CONN_ID_BITS - SLOT_BITS)) - 1)
#define CHUNK 1024
#define NCHUNKS ((1u << SLOT_BITS) / CHUNK)

static pthread_mutex_t cq_lock = PTHREAD_MUTEX_INITIALIZER;

/* slot -> object and its generation, in chunks that never move (read
 * without cq_lock, so atomically) */
struct chunk {
	void *obj[CHUNK];
	uint32_t gen[CHUNK];
};
static struct chunk *chunks[NCHUNKS];
static uint32_t nslots;	      /* slots that exist */
static uint32_t *fifo;	      /* free slots, oldest first: a ring of nslots */
static uint32_t fifo_head, fifo_count;

/* cq_lock held: CHUNK more slots, all free */
static int grow(void)
{
	uint32_t c = nslots / CHUNK, i, *f;
	struct chunk *k;

	if (c == NCHUNKS)
		return -EMFILE;
	k = calloc(1, sizeof(*k));
	f = malloc((nslots + CHUNK) * sizeof(uint32_t));
	if (!k || !f) {
		free(k);
		free(f);
		return -ENOMEM;
	}
	__atomic_store_n(&chunks[c], k, __ATOMIC_RELEASE);
	/* the ring, unwrapped, then the new slots after the old free ones */
	for (i = 0; i < fifo_count; i++)
		f[i] = fifo[(fifo_head + i) % nslots];
	for (i = 0; i < CHUNK; i++)
		f[fifo_count + i] = nslots + i;
	free(fifo);
	fifo = f;
	fifo_head = 0;
	fifo_count += CHUNK;
	nslots += CHUNK;
	return 0;
}

uint32_t exs_cq_id_new(void *obj, int *ret_err)
{
	uint32_t slot, gen;
	struct chunk *k;
	int ret = 0;

	pthread_mutex_lock(&cq_lock);
	if (!fifo_count)
		ret = grow();
	if (ret) {
		pthread_mutex_unlock(&cq_lock);
		*ret_err = -ret;
		return 0;
	}
	slot = fifo[fifo_head];
	fifo_head = (fifo_head + 1) % nslots;
	fifo_count--;
	k = chunks[slot / CHUNK];
	/* generation 0 is never used: id 0 names nothing */
	gen = (k->gen[slot % CHUNK] + 1) & GEN_MASK;
	gen = gen ? gen : 1;
	__atomic_store_n(&k->gen[slot % CHUNK], gen, __ATOMIC_RELAXED);
	__atomic_store_n(&k->obj[slot % CHUNK], obj, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&cq_lock);
	return gen << SLOT_BITS | slot;
}

void *exs_cq_id_get(uint32_t id)
{
	uint32_t slot = id & ((1u << SLOT_BITS) - 1);
	struct chunk *k;

	if (!id || id >> EXS_CONN_ID_BITS)
		return NULL;
	k = __atomic_load_n(&chunks[slot / CHUNK], __ATOMIC_ACQUIRE);
	if (!k || __atomic_load_n(&k->gen[slot % CHUNK], __ATOMIC_RELAXED) != id >> SLOT_BITS)
		return NULL;
	return __atomic_load_n(&k->obj[slot % CHUNK], __ATOMIC_ACQUIRE);
}

void exs_cq_id_free(uint32_t id)
{
	uint32_t slot = id & ((1u << SLOT_BITS) - 1);

	if (!id)
		return;
	pthread_mutex_lock(&cq_lock);
	__atomic_store_n(&chunks[slot / CHUNK]->obj[slot % CHUNK], NULL, __ATOMIC_RELEASE);
	fifo[(fifo_head + fifo_count) % nslots] = slot;
	fifo_count++;
	pthread_mutex_unlock(&cq_lock);
}

/* ---- shared CQs */

static struct exs_scq *scq_new(struct exs_dev *d, uint32_t need, int *ret_err)
{
	uint32_t n = EXS_SCQ_ENTRIES;
	struct exs_scq *q;

	if (d->attr.max_cqe > 0 && n > (uint32_t)d->attr.max_cqe)
		n = (uint32_t)d->attr.max_cqe;
	if (need > n) {
		*ret_err = ENOMEM; /* more than one CQ of the device holds */
		return NULL;
	}
	q = calloc(1, sizeof(*q));
	if (!q) {
		*ret_err = ENOMEM;
		return NULL;
	}
	q->cq = exs_verbs_create_cq(d, (int)n, q, d->chan);
	if (!q->cq || ibv_req_notify_cq(q->cq, 0)) {
		*ret_err = errno ? errno : EIO;
		if (q->cq)
			ibv_destroy_cq(q->cq);
		free(q);
		return NULL;
	}
	q->dev = d;
	q->cap = n;
	q->armed = true;
	q->next = d->scqs;
	/* pushed in front: a poller walking the list without cq_lock sees it
	 * whole or not at all */
	__atomic_store_n(&d->scqs, q, __ATOMIC_RELEASE);
	return q;
}

struct exs_scq *exs_cq_reserve(struct exs_dev *d, uint32_t need, int *ret_err)
{
	struct exs_scq *q;

	pthread_mutex_lock(&cq_lock);
	for (q = d->scqs; q; q = q->next)
		if (q->cap - q->used - q->stale >= need)
			break;
	if (!q)
		q = scq_new(d, need, ret_err);
	if (q) {
		q->used += need;
		q->nconn++;
	}
	pthread_mutex_unlock(&cq_lock);
	return q;
}

void exs_cq_release(struct exs_scq *q, uint32_t need, bool stale, bool locked)
{
	struct exs_scq **p;

	pthread_mutex_lock(&cq_lock);
	q->used -= need;
	if (stale) /* read without the lock by exs_cq_drained */
		__atomic_store_n(&q->stale, q->stale + need, __ATOMIC_RELAXED);
	q->nconn--;
	/* an empty CQ goes, unless it is the device's last one; only under
	 * exs_g.lock, which every poller holds while it walks the list */
	if (locked && !q->nconn && (q != q->dev->scqs || q->next)) {
		for (p = &q->dev->scqs; *p != q; p = &(*p)->next)
			;
		*p = q->next;
		if (!q->armed)
			EXS_COUNT(exs_g.ndisarmed, -1);
		ibv_destroy_cq(q->cq);
		free(q);
	}
	pthread_mutex_unlock(&cq_lock);
}

/* Called after every poll that found the CQ empty, a busy poll's every
 * turn included: the lock only when there is stale room to forget. A
 * connection whose room turns stale meanwhile goes under exs_g.lock, which
 * the poller holds, so none is missed or forgotten too early. */
void exs_cq_drained(struct exs_scq *q)
{
	if (!__atomic_load_n(&q->stale, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&cq_lock);
	__atomic_store_n(&q->stale, 0, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&cq_lock);
}

struct exs_scq *exs_cq_of(struct exs_dev *d, struct ibv_cq *cq)
{
	struct exs_scq *q;

	pthread_mutex_lock(&cq_lock);
	for (q = d->scqs; q && q->cq != cq; q = q->next)
		;
	pthread_mutex_unlock(&cq_lock);
	return q;
}

void exs_cq_arm(struct exs_scq *q)
{
	if (q->armed)
		return;
	ibv_req_notify_cq(q->cq, 0);
	q->n_arms++;
	q->armed = true;
	EXS_COUNT(exs_g.ndisarmed, -1);
}

void exs_cq_disarmed(struct exs_scq *q)
{
	if (!q->armed)
		return;
	q->armed = false;
	EXS_COUNT(exs_g.ndisarmed, 1);
}

int exs_cq_poll(struct exs_scq *q, int n, struct ibv_wc *wc)
{
	n = ibv_poll_cq(q->cq, n, wc);
	q->n_polls++;
	return n;
}
