/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Handle tables: what turns a public queue or registration handle into its
 * object. A handle is not a pointer but a slot index and that slot's
 * generation (exs_int.h, EXS_H_*); deleting the object ends the generation,
 * so the old handle names nothing ever after, even when the slot and its
 * object serve the next exs_qcreate/exs_mregister. A slot whose generation
 * would wrap is retired instead of reused: a handle never comes back.
 *
 * Objects stay in their slot for the life of the process (queue waiters and
 * started operations may still hold a pointer to a deleted one), so looking
 * up needs no lock: the chunks never move and slot states are atomics.
 * Allocation and release take the table's own lock.
 */
#include <stdlib.h>

#include "exs_int.h"

static struct exs_hslot *slot_at(struct exs_htab *t, uint32_t idx)
{
	struct exs_hslot *c;

	if (idx >= EXS_HTAB_CHUNK * EXS_HTAB_CHUNKS)
		return NULL;
	c = __atomic_load_n(&t->chunk[idx / EXS_HTAB_CHUNK], __ATOMIC_ACQUIRE);
	return c ? &c[idx % EXS_HTAB_CHUNK] : NULL;
}

int exs_htab_alloc(struct exs_htab *t, uint32_t *ret_idx, void **ret_obj)
{
	struct exs_hslot *s;
	uint32_t idx;
	int ret = 0;

	pthread_mutex_lock(&t->lock);
	if (t->nfree) {
		idx = t->free[--t->nfree];
	} else if (t->used < EXS_HTAB_CHUNK * EXS_HTAB_CHUNKS) {
		uint32_t *nf;

		idx = t->used;
		if (!t->chunk[idx / EXS_HTAB_CHUNK]) {
			struct exs_hslot *c = calloc(EXS_HTAB_CHUNK, sizeof(*c));

			/* room for every slot of the new chunk on the free list */
			nf = c ? realloc(t->free, (size_t)(idx + EXS_HTAB_CHUNK) * sizeof(*nf)) : NULL;
			if (!nf) {
				free(c);
				ret = -ENOMEM;
				goto out;
			}
			t->free = nf;
			__atomic_store_n(&t->chunk[idx / EXS_HTAB_CHUNK], c, __ATOMIC_RELEASE);
		}
		t->used++;
	} else {
		ret = -ENOMEM;
		goto out;
	}
	s = slot_at(t, idx);
	*ret_idx = idx;
	*ret_obj = __atomic_load_n(&s->obj, __ATOMIC_RELAXED);
out:
	pthread_mutex_unlock(&t->lock);
	return ret;
}

uintptr_t exs_htab_publish(struct exs_htab *t, uint32_t idx, void *obj)
{
	struct exs_hslot *s = slot_at(t, idx);
	uint32_t state = s->state + 1; /* free slots are even, live ones odd */

	__atomic_store_n(&s->obj, obj, __ATOMIC_RELAXED);
	__atomic_store_n(&s->state, state, __ATOMIC_RELEASE);
	return ((uintptr_t)state << EXS_H_IDX_BITS) | (idx + 1);
}

void exs_htab_release(struct exs_htab *t, uint32_t idx, void *obj)
{
	struct exs_hslot *s = slot_at(t, idx);

	pthread_mutex_lock(&t->lock);
	__atomic_store_n(&s->obj, obj, __ATOMIC_RELAXED);
	/* the next generation must still fit a handle: else retire the slot */
	if (s->state < EXS_H_STATE_MAX - 1)
		t->free[t->nfree++] = idx;
	pthread_mutex_unlock(&t->lock);
}

void *exs_htab_get(struct exs_htab *t, uintptr_t h, uint32_t *ret_idx)
{
	uint32_t idx = (uint32_t)(h & EXS_H_IDX_MASK) - 1;
	uint32_t state = (uint32_t)(h >> EXS_H_IDX_BITS);
	struct exs_hslot *s;

	if (!(h & EXS_H_IDX_MASK) || !(state & 1) || !(s = slot_at(t, idx)) ||
	    __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != state)
		return NULL;
	if (ret_idx)
		*ret_idx = idx;
	return __atomic_load_n(&s->obj, __ATOMIC_RELAXED);
}

bool exs_htab_kill(struct exs_htab *t, uintptr_t h)
{
	uint32_t idx, state = (uint32_t)(h >> EXS_H_IDX_BITS);
	struct exs_hslot *s;

	if (!exs_htab_get(t, h, &idx))
		return false;
	s = slot_at(t, idx);
	return __atomic_compare_exchange_n(&s->state, &state, state + 1, false, __ATOMIC_ACQ_REL,
					   __ATOMIC_ACQUIRE);
}
