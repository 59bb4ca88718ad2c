/* SPDX-License-Identifier: MIT */
/*
 * Sequences: handles (pager tag, generation, slot), a page table per
 * layer, appends into the tail page (pinned in the fast tier until it is
 * sealed), attention scores for the policies, fork (shared pages,
 * refcounted, never copied once sealed), park and resume (every page
 * demoted, then brought back), close; and kvt_pager_drain, which empties
 * a tier through the same jobs as park.
 *
 * A stale or foreign handle is refused (kvt_seq_get): -ESTALE or
 * -EINVAL, never another sequence's data. Takes p->lock; park, resume and
 * drain wait for the migration thread without it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pager/internal.h"

/* ---------------------------------------------------------------------
 * Sequences
 */

struct seq *kvt_seq_get(struct kvt_pager *p, kvt_seq_t h, int *err)
{
	uint32_t slot = (uint32_t)(h & 0xffffff), gen = (uint32_t)(h >> 24) & 0xffffff;
	struct seq *s;

	if ((uint16_t)(h >> 48) != p->tag || slot >= p->nseqs) {
		*err = -EINVAL;
		return NULL;
	}
	s = p->seqs[slot];
	if (!s->open || s->gen != gen) {
		*err = -ESTALE;
		return NULL;
	}
	return s;
}

/* Recompute wants_scores after a tier's policy changed (lock held, or
 * before the pager runs). */
void kvt_scores_update(struct kvt_pager *p)
{
	int w = 0;

	for (int ti = 0; ti < KVT_NTIERS; ti++)
		w |= p->t[ti].pol && p->t[ti].pol->on_score;
	__atomic_store_n(&p->wants_scores, w, __ATOMIC_RELAXED);
}

KVT_API int kvt_pager_wants_scores(const struct kvt_pager *p)
{
	return p ? __atomic_load_n(&p->wants_scores, __ATOMIC_RELAXED) : 0;
}

KVT_API int kvt_seq_score(struct kvt_pager *p, kvt_seq_t h, unsigned layer,
			  const float *mass, unsigned n)
{
	int r = 0;

	if (!p || (n && !mass))
		return -EINVAL;
	pthread_mutex_lock(&p->lock);
	struct seq *s = kvt_seq_get(p, h, &r);
	if (s && (layer >= p->cfg.n_layers || n > s->lt[layer].n))
		r = -EINVAL;
	uint64_t tnow = p->rec ? now_ns() : 0;
	for (unsigned i = 0; s && !r && i < n; i++) {
		uint32_t slot = s->lt[layer].pg[i];
		struct page *pg = &p->pages[slot];
		struct kvt_ref ref = ref_of(p, slot);

		ref.score = mass[i];
		TRACE(p, tnow, KVT_EV_SCORE, slot, pg->state == P_LOST ? -1 : pg->top, -1,
		      (uint32_t)p->page_bytes, 0, mass[i]);
		for (int ti = 0; ti < KVT_NTIERS; ti++) {
			struct tier *t = &p->t[ti];
			if (pg->frame[ti] != NO_FRAME && t->pol->on_score)
				t->pol->on_score(t->pst, &ref, meta_of(t, pg->frame[ti]));
		}
	}
	pthread_mutex_unlock(&p->lock);
	return r;
}

static kvt_seq_t seq_handle(const struct kvt_pager *p, uint32_t slot)
{
	return (uint64_t)p->tag << 48 | (uint64_t)(p->seqs[slot]->gen & 0xffffff) << 24 | slot;
}

static int seq_new(struct kvt_pager *p, uint32_t *slot)
{
	struct seq *s;
	uint32_t i = p->free_seq;

	if (i != NO_PAGE) {
		s = p->seqs[i];
		p->free_seq = s->next_free;
	} else {
		if (p->nseqs >= 0xffffff)
			return -EMFILE;
		struct seq **v = realloc(p->seqs, (p->nseqs + 1) * sizeof(*v));
		if (!v)
			return -ENOMEM;
		p->seqs = v;
		s = calloc(1, sizeof(*s));
		if (!s)
			return -ENOMEM;
		i = p->nseqs++;
		p->seqs[i] = s;
	}
	s->lt = calloc(p->cfg.n_layers, sizeof(*s->lt));
	if (!s->lt) {
		s->next_free = p->free_seq;
		p->free_seq = i;
		return -ENOMEM;
	}
	s->open = 1;
	s->parked = 0;
	s->batches = 0;
	p->open_seqs++;
	*slot = i;
	return 0;
}

static void seq_free(struct kvt_pager *p, uint32_t i)
{
	struct seq *s = p->seqs[i];
	for (unsigned l = 0; l < p->cfg.n_layers; l++) {
		struct layer_tab *lt = &s->lt[l];
		for (uint32_t k = 0; k < lt->n; k++)
			kvt_page_unref(p, lt->pg[k]);
		free(lt->pg);
	}
	free(s->lt);
	s->lt = NULL;
	s->open = 0;
	s->gen = (s->gen + 1) & 0xffffff;
	s->next_free = p->free_seq;
	p->free_seq = i;
	p->open_seqs--;
	p->events++;
	pthread_cond_signal(&p->work);
	if (p->t[KVT_TIER_FAST].waiters)
		pthread_cond_broadcast(&p->done);
}

static int lt_push(struct layer_tab *lt, uint32_t slot)
{
	if (lt->n == lt->cap) {
		uint32_t cap = lt->cap ? lt->cap * 2 : 16;
		uint32_t *v = realloc(lt->pg, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		lt->pg = v;
		lt->cap = cap;
	}
	lt->pg[lt->n++] = slot;
	return 0;
}

KVT_API int kvt_seq_open(struct kvt_pager *p, kvt_seq_t *out)
{
	uint32_t slot;
	int r;

	if (!p || !out)
		return -EINVAL;
	pthread_mutex_lock(&p->lock);
	r = seq_new(p, &slot);
	if (!r)
		*out = seq_handle(p, slot);
	pthread_mutex_unlock(&p->lock);
	return r;
}

KVT_API int kvt_seq_close(struct kvt_pager *p, kvt_seq_t h)
{
	int r = 0;
	pthread_mutex_lock(&p->lock);
	struct seq *s = kvt_seq_get(p, h, &r);
	if (s && (s->batches || s->busy))
		r = -EBUSY;
	else if (s)
		seq_free(p, (uint32_t)(h & 0xffffff));
	CHECK_INVARIANTS(p);
	pthread_mutex_unlock(&p->lock);
	return r;
}

/* A new tail page for layer tab lt (lock held). */
static int new_tail(struct kvt_pager *p, uint32_t seq, uint32_t layer,
		    struct layer_tab *lt)
{
	uint32_t s, f;
	int r;

	f = kvt_alloc_tail_frame(p);
	if (f == NO_FRAME)
		return -ENOSPC;
	s = kvt_page_new(p);
	if (s == NO_PAGE) {
		kvt_frame_free(&p->t[KVT_TIER_FAST], f);
		return -ENOSPC;
	}
	struct page *pg = &p->pages[s];
	pg->seq = seq;
	pg->layer = layer;
	pg->index = lt->n;
	/* Before lt_push: if it fails, the FREE below pairs with this NEW. */
	TRACE(p, 0, KVT_EV_NEW, s, -1, KVT_TIER_FAST, (uint32_t)p->page_bytes, 0, 0.f);
	r = lt_push(lt, s);
	if (r) {
		kvt_frame_free(&p->t[KVT_TIER_FAST], f);
		p->pages[s].refs = 1;
		kvt_page_unref(p, s);
		return r;
	}
	pg->refs = 1;
	pg->pins = 1;
	pg->flags = PF_TAILPIN;
	kvt_place(p, s, KVT_TIER_FAST, f);
	kvt_set_top(pg);
	return 0;
}

/* Append ntok tokens from k and v, which are device memory (src_dev) or
 * host memory. */
static int append(struct kvt_pager *p, kvt_seq_t h, unsigned layer, const void *k,
		  const void *v, unsigned ntok, int src_dev)
{
	const uint8_t *kb = k, *vb = v;
	int r = 0;

	if (!p || (ntok && (!k || !v)))
		return -EINVAL;
	pthread_mutex_lock(&p->lock);
	struct seq *s = kvt_seq_get(p, h, &r);
	if (!s)
		goto out;
	if (layer >= p->cfg.n_layers) {
		r = -EINVAL;
		goto out;
	}
	if (s->parked) {
		r = -EBUSY;
		goto out;
	}
	/* The lock is dropped below: keep park and close off meanwhile. */
	s->busy++;
	while (ntok) {
		struct layer_tab *lt = &s->lt[layer];
		struct page *pg = lt->n ? &p->pages[lt->pg[lt->n - 1]] : NULL;
		if (!pg || (pg->flags & PF_SEALED)) {
			r = new_tail(p, (uint32_t)(h & 0xffffff), layer, lt);
			if (r)
				break;
			/* The lock may have been dropped: the table may have moved. */
			pg = &p->pages[lt->pg[lt->n - 1]];
		}
		uint32_t slot = lt->pg[lt->n - 1];
		/* The tail changes: copies below it are stale now. */
		for (int ti = KVT_TIER_HOST; ti < KVT_NTIERS; ti++)
			if (pg->frame[ti] != NO_FRAME) {
				kvt_unplace(p, slot, ti, 0, 0);
				TRACE(p, 0, KVT_EV_DROP, slot, ti, pg->top, 0, 0, 0.f);
			}
		unsigned n = p->cfg.page_tokens - pg->ntok;
		if (n > ntok)
			n = ntok;
		uint8_t *dst = frame_ptr(&p->t[KVT_TIER_FAST], pg->frame[KVT_TIER_FAST]);
		uint64_t off = pg->ntok * p->tok_bytes, len = n * p->tok_bytes;
		/* The tail is pinned: its frame cannot move while we copy. */
		pthread_mutex_unlock(&p->lock);
		if (p->dev->ops->host_visible) {
			memcpy(dst + off, kb, len);
			memcpy(dst + p->half + off, vb, len);
		} else {
			int dir = src_dev ? KVT_D2D : KVT_H2D;
			r = kvt_dev_copy(p->dev, dst + off, kb, len, dir);
			if (!r)
				r = kvt_dev_copy(p->dev, dst + p->half + off, vb, len, dir);
		}
		pthread_mutex_lock(&p->lock);
		if (r)
			break;
		pg = &p->pages[slot];
		pg->ntok += n;
		lt->ntok += n;
		kb += len;
		vb += len;
		ntok -= n;
		if (pg->ntok == p->cfg.page_tokens) {
			pg->flags |= PF_SEALED;
			TRACE(p, 0, KVT_EV_SEAL, slot, pg->top, -1, 0, 0, 0.f);
			if (pg->flags & PF_TAILPIN) {
				pg->flags &= ~PF_TAILPIN;
				kvt_unpin(p, slot);
			}
		}
	}
	s->busy--;
out:
	CHECK_INVARIANTS(p);
	pthread_mutex_unlock(&p->lock);
	return r;
}

KVT_API int kvt_seq_append(struct kvt_pager *p, kvt_seq_t h, unsigned layer,
			   const void *k, const void *v, unsigned ntok)
{
	return append(p, h, layer, k, v, ntok, 0);
}

KVT_API int kvt_seq_append_dev(struct kvt_pager *p, kvt_seq_t h, unsigned layer,
			       const void *k, const void *v, unsigned ntok)
{
	return append(p, h, layer, k, v, ntok, 1);
}

/* Tokens (pages = 0) or pages (pages = 1) in a layer of the sequence. */
static int seq_count(struct kvt_pager *p, kvt_seq_t h, unsigned layer, int pages)
{
	int r = 0;
	pthread_mutex_lock(&p->lock);
	struct seq *s = kvt_seq_get(p, h, &r);
	if (s && layer >= p->cfg.n_layers)
		r = -EINVAL;
	else if (s)
		r = (int)(pages ? s->lt[layer].n : s->lt[layer].ntok);
	pthread_mutex_unlock(&p->lock);
	return r;
}

KVT_API int kvt_seq_tokens(struct kvt_pager *p, kvt_seq_t h, unsigned layer)
{
	return seq_count(p, h, layer, 0);
}

KVT_API int kvt_seq_pages(struct kvt_pager *p, kvt_seq_t h, unsigned layer)
{
	return seq_count(p, h, layer, 1);
}

/* ---------------------------------------------------------------------
 * Fork, park, resume, drain
 */

KVT_API int kvt_seq_fork(struct kvt_pager *p, kvt_seq_t h, unsigned ntok, kvt_seq_t *out)
{
	uint32_t cslot;
	unsigned pt;
	int r = 0;

	if (!p || !out)
		return -EINVAL;
	pt = p->cfg.page_tokens;
	pthread_mutex_lock(&p->lock);
	struct seq *s = kvt_seq_get(p, h, &r);
	if (!s)
		goto unlock;
	for (unsigned l = 0; l < p->cfg.n_layers; l++)
		if (ntok > s->lt[l].ntok) {
			r = -EINVAL;
			goto unlock;
		}
	r = seq_new(p, &cslot);
	if (r)
		goto unlock;
	s = p->seqs[(uint32_t)(h & 0xffffff)];
	struct seq *c = p->seqs[cslot];
	for (unsigned l = 0; l < p->cfg.n_layers && !r; l++) {
		for (unsigned i = 0; i < ntok / pt; i++) {
			uint32_t slot = s->lt[l].pg[i];
			r = lt_push(&c->lt[l], slot);
			if (r)
				break;
			p->pages[slot].refs++;
		}
		c->lt[l].ntok = (ntok / pt) * pt;
	}
	kvt_seq_t child = seq_handle(p, cslot);
	pthread_mutex_unlock(&p->lock);

	/* The partial page at the boundary is copied into the child's tail. */
	for (unsigned l = 0; l < p->cfg.n_layers && !r && ntok % pt; l++) {
		uint32_t idx = ntok / pt;
		struct kvt_batch *b;
		struct kvt_view v;
		r = kvt_acquire_tier(p, h, l, &idx, 1, p->target, 0, &b);
		if (r)
			break;
		r = kvt_batch_next(b, &v);
		if (r == 1)
			r = append(p, child, l, v.k, v.v, ntok % pt, v.tier == KVT_TIER_FAST);
		else if (r == 0)
			r = -EIO;
		kvt_batch_release(b);
	}
	if (r) {
		kvt_seq_close(p, child);
		return r;
	}
	*out = child;
	return 0;
unlock:
	pthread_mutex_unlock(&p->lock);
	return r;
}

/* Every page of the sequence as (slot, gen) references (lock held). */
static int seq_refs(struct kvt_pager *p, struct seq *s, struct job *j)
{
	uint32_t n = 0;
	for (unsigned l = 0; l < p->cfg.n_layers; l++)
		n += s->lt[l].n;
	j->pages = malloc((n ? n : 1) * sizeof(*j->pages));
	if (!j->pages)
		return -ENOMEM;
	j->n = 0;
	for (unsigned l = 0; l < p->cfg.n_layers; l++)
		for (uint32_t i = 0; i < s->lt[l].n; i++) {
			uint32_t slot = s->lt[l].pg[i];
			j->pages[j->n++] = (struct pref){ slot, p->pages[slot].gen };
		}
	return 0;
}

KVT_API int kvt_seq_park(struct kvt_pager *p, kvt_seq_t h)
{
	struct job j = { 0 };
	int r = 0;

	pthread_mutex_lock(&p->lock);
	struct seq *s = kvt_seq_get(p, h, &r);
	if (!s || s->parked)
		goto out;
	if (s->batches || s->busy) {
		r = -EBUSY;
		goto out;
	}
	s->parked = 1;
	s->busy++;
	for (unsigned l = 0; l < p->cfg.n_layers; l++) {
		struct layer_tab *lt = &s->lt[l];
		if (lt->n) {
			uint32_t slot = lt->pg[lt->n - 1];
			if (p->pages[slot].flags & PF_TAILPIN) {
				p->pages[slot].flags &= ~PF_TAILPIN;
				kvt_unpin(p, slot);
			}
		}
	}
	r = seq_refs(p, s, &j);
	if (!r) {
		j.lo = 0;
		j.hi = p->last;
		r = kvt_run_job_sync(p, &j);
		free(j.pages);
	}
	s->busy--;
	/* Shared pages pinned by another sequence's batch stay up: fine. */
	if (r == -EBUSY)
		r = 0;
out:
	pthread_mutex_unlock(&p->lock);
	return r;
}

KVT_API int kvt_seq_resume(struct kvt_pager *p, kvt_seq_t h)
{
	int r = 0;

	pthread_mutex_lock(&p->lock);
	struct seq *s = kvt_seq_get(p, h, &r);
	if (s && s->busy)
		r = -EBUSY;
	if (!s || !s->parked || r) {
		pthread_mutex_unlock(&p->lock);
		return r;
	}
	/* busy keeps close, park and another resume off while the lock is
	 * dropped below. */
	s->busy++;
	pthread_mutex_unlock(&p->lock);

	/* Tails first, synchronously, and pinned again. */
	for (unsigned l = 0; l < p->cfg.n_layers && !r; l++) {
		pthread_mutex_lock(&p->lock);
		struct layer_tab *lt = &s->lt[l];
		uint32_t idx = lt->n ? lt->n - 1 : 0;
		int partial = lt->n && !(p->pages[lt->pg[idx]].flags & PF_SEALED);
		pthread_mutex_unlock(&p->lock);
		if (!partial)
			continue;
		struct kvt_batch *b;
		struct kvt_view v;
		r = kvt_acquire_tier(p, h, l, &idx, 1, KVT_TIER_FAST, 0, &b);
		if (r)
			break;
		r = kvt_batch_next(b, &v);
		if (r == 1) {
			pthread_mutex_lock(&p->lock);
			struct page *pg = &p->pages[b->e[0].slot];
			if (!(pg->flags & PF_TAILPIN)) {
				pg->pins++;
				pg->flags |= PF_TAILPIN;
			}
			pthread_mutex_unlock(&p->lock);
			r = 0;
		} else if (r == 0) {
			r = -EIO;
		}
		kvt_batch_release(b);
	}
	pthread_mutex_lock(&p->lock);
	s->busy--;
	if (r) {
		pthread_mutex_unlock(&p->lock);
		return r;
	}
	s->parked = 0;
	int queued = 0;

	for (unsigned l = 0; l < p->cfg.n_layers; l++)
		for (uint32_t i = 0; i < s->lt[l].n; i++)
			queued |= kvt_queue_prefetch(p, s->lt[l].pg[i], 0);
	if (queued)
		pthread_cond_signal(&p->work);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

KVT_API int kvt_pager_drain(struct kvt_pager *p, int tier)
{
	struct job j = { .lo = tier, .hi = tier + 1 };
	int r;

	if (!p || tier < 0 || tier >= p->last)
		return -EINVAL;
	pthread_mutex_lock(&p->lock);
	struct tier *t = &p->t[tier];
	j.pages = malloc(((size_t)t->nframes + 1) * sizeof(*j.pages));
	if (!j.pages) {
		pthread_mutex_unlock(&p->lock);
		return -ENOMEM;
	}
	for (uint32_t f = 0; f < t->nframes; f++)
		if (t->owner[f] != NO_PAGE)
			j.pages[j.n++] = (struct pref){ t->owner[f], p->pages[t->owner[f]].gen };
	r = kvt_run_job_sync(p, &j);
	free(j.pages);
	pthread_mutex_unlock(&p->lock);
	return r;
}
