/* SPDX-License-Identifier: MIT */
/*
 * The length of each (sequence, layer) page table as a policy can see it,
 * for the policies that keep the newest pages of every table (streaming,
 * h2o): a table's top is one past the largest page index among its
 * resident pages and those that were resident since the table was last
 * empty in the tier, and its count the resident pages. Entries are made by
 * the first page of a table and dropped with its last, so the map holds
 * the tables with pages in the tier, however many sequences come and go.
 *
 * Open addressing with linear probing over 16-byte entries, grown (x2)
 * when half full. Growth happens on an insert, which cannot fail: when
 * memory is short the table stays as it is, and a page that finds no room
 * is not tracked (kvwin_add returns 0: the policy then treats it as a page
 * of unknown position). A page whose seq, layer or index is KVT_REF_NONE
 * is never tracked.
 */
#ifndef KVT_PAGER_POLICY_WINDOW_H
#define KVT_PAGER_POLICY_WINDOW_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "pager/policy.h"

#define KVWIN_EMPTY UINT64_MAX		/* (KVT_REF_NONE, KVT_REF_NONE): never a table */

struct kvwin_ent {
	uint64_t id;			/* seq << 32 | layer, or KVWIN_EMPTY */
	uint32_t top;			/* one past the largest index seen */
	uint32_t count;			/* resident pages of the table */
};

struct kvwin {
	struct kvwin_ent *t;		/* (mask + 1) entries */
	size_t mask, n;			/* n: entries in use */
};

static inline size_t kvwin_hash(uint64_t id, size_t mask)
{
	id ^= id >> 31;
	id *= 0x9e3779b97f4a7c15ull;
	id ^= id >> 29;
	return (size_t)id & mask;
}

static inline int kvwin_alloc(struct kvwin *w, size_t size)
{
	w->t = malloc(size * sizeof(*w->t));
	if (!w->t)
		return -ENOMEM;
	for (size_t i = 0; i < size; i++)
		w->t[i].id = KVWIN_EMPTY;
	w->mask = size - 1;
	w->n = 0;
	return 0;
}

static inline int kvwin_init(struct kvwin *w)
{
	return kvwin_alloc(w, 64);
}

static inline void kvwin_destroy(struct kvwin *w)
{
	free(w->t);
}

/* The slot of id, or of the empty entry where it would go. */
static inline size_t kvwin_slot(const struct kvwin *w, uint64_t id)
{
	size_t h = kvwin_hash(id, w->mask);

	while (w->t[h].id != id && w->t[h].id != KVWIN_EMPTY)
		h = (h + 1) & w->mask;
	return h;
}

static inline int kvwin_known(const struct kvt_ref *r)
{
	return r->seq != KVT_REF_NONE && r->layer != KVT_REF_NONE && r->index != KVT_REF_NONE;
}

/* Double the table; on failure keep the old one. */
static inline void kvwin_grow(struct kvwin *w)
{
	struct kvwin old = *w;

	if (kvwin_alloc(w, 2 * (old.mask + 1))) {
		*w = old;
		return;
	}
	for (size_t i = 0; i <= old.mask; i++)
		if (old.t[i].id != KVWIN_EMPTY) {
			w->t[kvwin_slot(w, old.t[i].id)] = old.t[i];
			w->n++;
		}
	free(old.t);
}

/* A page of r's table entered the tier. Returns 1 when it is tracked. */
static inline int kvwin_add(struct kvwin *w, const struct kvt_ref *r)
{
	uint64_t id = (uint64_t)r->seq << 32 | r->layer;
	size_t h;

	if (!kvwin_known(r))
		return 0;
	if (2 * (w->n + 1) > w->mask + 1)
		kvwin_grow(w);
	h = kvwin_slot(w, id);
	if (w->t[h].id == KVWIN_EMPTY) {
		if (w->n + 1 > w->mask)		/* keep one slot empty: probes end */
			return 0;
		w->t[h] = (struct kvwin_ent){ .id = id };
		w->n++;
	}
	w->t[h].count++;
	if (r->index >= w->t[h].top)
		w->t[h].top = r->index + 1;
	return 1;
}

/* A tracked page of (seq, layer) left the tier. */
static inline void kvwin_del(struct kvwin *w, uint32_t seq, uint32_t layer)
{
	size_t h = kvwin_slot(w, (uint64_t)seq << 32 | layer), j;

	if (w->t[h].id == KVWIN_EMPTY || --w->t[h].count)
		return;
	w->n--;
	for (j = h;;) {			/* backward-shift deletion */
		size_t home;

		j = (j + 1) & w->mask;
		if (w->t[j].id == KVWIN_EMPTY)
			break;
		home = kvwin_hash(w->t[j].id, w->mask);
		if ((j > h && (home <= h || home > j)) || (j < h && home <= h && home > j)) {
			w->t[h] = w->t[j];
			h = j;
		}
	}
	w->t[h].id = KVWIN_EMPTY;
}

/* One past the largest index of (seq, layer) seen, 0 when untracked. */
static inline uint32_t kvwin_top(const struct kvwin *w, uint32_t seq, uint32_t layer)
{
	size_t h = kvwin_slot(w, (uint64_t)seq << 32 | layer);

	return w->t[h].id == KVWIN_EMPTY ? 0 : w->t[h].top;
}

#endif
