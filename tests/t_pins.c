/* SPDX-License-Identifier: MIT */
/*
 * Pinned pages are never victims. Each case runs in its own process (a
 * watchdog of 6 s times t_slow()), with host_in_place off and on. Tiers: fast 12 pages, host 16,
 * nvme 512, 3 layers.
 *
 * held-view: a batch of two resident pages of sequence A; one view is held
 *   while sequence B appends 75 pages and reads them all back several times
 *   and both tiers are drained (-EBUSY: the pins stay): the held view's
 *   bytes are intact, its page (view->id: generation and slot) is still
 *   in the very frame it was handed out from, so is the batch's second
 *   page; after the release both leave the fast tier on a drain.
 * tails:    A's partial tails (one per layer) stay in their fast frames with
 *   PF_TAILPIN through the same pressure and drains; after park they can
 *   be evicted, after resume they are pinned again.
 * threads:  one thread acquires one page of A at a time, holds the view
 *   and checks its bytes and frame twice, while another thread appends to
 *   B, reads B and drains the tiers.
 * peek:     kvt_batch_peek names the page the next kvt_batch_next hands
 *   out (its K) when it is ready, pinned already: NULL before any page of
 *   a batch on NVMe is in, and at the end.
 */
#include <errno.h>
#include <pthread.h>
#include <unistd.h>
#include "common.h"
#include "pager/internal.h"

#define LAYERS 3u

/* Every case opens its pager with t_open_tiers(..., LAYERS, 12, 16, 512,
 * in_place, prefetch_depth): prefetch_depth 0 where a test counts what is
 * left in a tier after a drain (a prefetch queued before the drain may land
 * after it). */

/* Read pages of every layer of s in batches of at most 4 pages. */
static void read_all(struct kvt_pager *p, kvt_seq_t s, const struct kvt_config *cfg,
		     uint32_t seed, unsigned npages)
{
	for (unsigned l = 0; l < cfg->n_layers; l++)
		for (unsigned i0 = 0; i0 < npages; i0 += 4) {
			uint32_t idx[4];
			unsigned n = 0;
			for (unsigned i = i0; i < npages && n < 4; i++)
				idx[n++] = i;
			struct kvt_batch *b;
			struct kvt_view v;
			int r;
			unsigned seen = 0;
			CHECK_EQ(kvt_acquire(p, s, l, idx, n, &b), 0);
			while ((r = kvt_batch_next(b, &v)) != 0) {
				if (r < 0)
					fprintf(stderr, "%s: kvt_batch_next(layer %u page %u): %s\n", t_sub, l,
						v.page, strerror(-r));
				CHECK_EQ(r, 1);
				CHECK(t_check_view(cfg, seed, l, &v) == 0);
				seen++;
			}
			CHECK_EQ(seen, n);
			kvt_batch_release(b);
		}
}

struct held {
	struct kvt_view v;
	uint32_t slot, gen, frame;
	unsigned layer;
	float *copy;		/* K then V of its ntok tokens */
};

static void hold(struct kvt_pager *p, const struct kvt_config *cfg, struct held *h,
		 const struct kvt_view *v, unsigned layer)
{
	size_t bytes = (size_t)v->ntok * cfg->n_kv_heads * cfg->head_dim * sizeof(float);
	h->v = *v;
	h->layer = layer;
	h->slot = (uint32_t)v->id;
	h->gen = (uint32_t)(v->id >> 32);
	pthread_mutex_lock(&p->lock);
	CHECK_EQ(p->pages[h->slot].gen, h->gen);
	h->frame = p->pages[h->slot].frame[v->tier];
	CHECK(h->frame != NO_FRAME);
	CHECK((const uint8_t *)v->k == p->t[v->tier].base + (uint64_t)h->frame * p->t[v->tier].stride);
	pthread_mutex_unlock(&p->lock);
	h->copy = malloc(2 * bytes);
	CHECK(h->copy);
	memcpy(h->copy, v->k, bytes);
	memcpy((uint8_t *)h->copy + bytes, v->v, bytes);
}

static void still_held(struct kvt_pager *p, const struct kvt_config *cfg, const struct held *h,
		       uint32_t seed)
{
	size_t bytes = (size_t)h->v.ntok * cfg->n_kv_heads * cfg->head_dim * sizeof(float);
	pthread_mutex_lock(&p->lock);
	struct page *pg = &p->pages[h->slot];
	CHECK_EQ(pg->gen, h->gen);
	CHECK_EQ(pg->state, P_READY);
	CHECK(pg->pins >= 1);
	CHECK_EQ(pg->frame[h->v.tier], h->frame);
	CHECK_EQ(p->t[h->v.tier].owner[h->frame], h->slot);
	pthread_mutex_unlock(&p->lock);
	CHECK(memcmp(h->v.k, h->copy, bytes) == 0);
	CHECK(memcmp(h->v.v, (const uint8_t *)h->copy + bytes, bytes) == 0);
	CHECK(t_check_view(cfg, seed, h->layer, &h->v) == 0);
}

static void t_held_view(int in_place)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_pager *p = t_open_tiers(&cfg, &dev, LAYERS, 12, 16, 512, in_place, 0);
	kvt_seq_t a, b;
	const uint32_t A = 71, B = 72;
	struct kvt_stats s0, s1;

	CHECK_EQ(kvt_seq_open(p, &a), 0);
	CHECK_EQ(kvt_seq_open(p, &b), 0);
	t_append(p, a, &cfg, A, 0, 12);		/* 3 full pages per layer, resident */

	struct kvt_batch *bt;
	struct kvt_view v;
	uint32_t idx[2] = { 2, 0 };
	struct held h1, h2;
	CHECK_EQ(kvt_acquire(p, a, 1, idx, 2, &bt), 0);
	CHECK_EQ(kvt_batch_next(bt, &v), 1);
	CHECK(v.page == 2 || v.page == 0);
	CHECK_EQ(v.tier, KVT_TIER_FAST);
	hold(p, &cfg, &h1, &v, 1);
	CHECK_EQ(kvt_pager_stats(p, &s0), 0);

	/* Pressure: 75 more pages through 12 fast and 16 host frames. */
	t_append(p, b, &cfg, B, 0, 100);
	still_held(p, &cfg, &h1, A);
	for (int round = 0; round < 3; round++) {
		kvt_pager_step(p);
		read_all(p, b, &cfg, B, 25);
		still_held(p, &cfg, &h1, A);
		t_drain_pinned(p, KVT_TIER_FAST);
		still_held(p, &cfg, &h1, A);
		t_drain_pinned(p, KVT_TIER_HOST);
		still_held(p, &cfg, &h1, A);
		t_check_inv(p);
	}
	CHECK_EQ(kvt_pager_drain(p, KVT_TIER_FAST), -EBUSY);
	CHECK_EQ(kvt_pager_stats(p, &s1), 0);
	/* The pressure was real: pages went down and came back up. */
	CHECK(s1.tier[KVT_TIER_NVME].bytes_in > s0.tier[KVT_TIER_NVME].bytes_in);
	CHECK(s1.tier[in_place ? KVT_TIER_HOST : KVT_TIER_FAST].promotions >
	      s0.tier[in_place ? KVT_TIER_HOST : KVT_TIER_FAST].promotions);
	CHECK_EQ(s1.tier[KVT_TIER_FAST].used, 2);	/* the batch's two pins */
	/* A's unpinned pages did leave the fast tier. */
	pthread_mutex_lock(&p->lock);
	struct seq *sa = p->seqs[(uint32_t)(a & 0xffffff)];
	for (unsigned l = 0; l < LAYERS; l++)
		for (unsigned i = 0; i < 3; i++) {
			uint32_t slot = sa->lt[l].pg[i];
			int pinned = l == 1 && (i == 0 || i == 2);
			CHECK_EQ(p->pages[slot].frame[KVT_TIER_FAST] != NO_FRAME, pinned);
		}
	pthread_mutex_unlock(&p->lock);

	/* The batch's second page was pinned all along too. */
	CHECK_EQ(kvt_batch_next(bt, &v), 1);
	CHECK_EQ(v.page, 2 - h1.v.page);
	CHECK_EQ(v.tier, KVT_TIER_FAST);
	hold(p, &cfg, &h2, &v, 1);
	still_held(p, &cfg, &h2, A);
	CHECK_EQ(kvt_batch_next(bt, &v), 0);
	/* Still pinned until the release. */
	read_all(p, b, &cfg, B, 25);
	still_held(p, &cfg, &h1, A);
	still_held(p, &cfg, &h2, A);
	kvt_batch_release(bt);

	/* Released: now they can go. */
	CHECK_EQ(kvt_pager_drain(p, KVT_TIER_FAST), 0);
	pthread_mutex_lock(&p->lock);
	CHECK_EQ(p->pages[h1.slot].frame[KVT_TIER_FAST], NO_FRAME);
	CHECK_EQ(p->pages[h2.slot].frame[KVT_TIER_FAST], NO_FRAME);
	CHECK_EQ(p->pages[h1.slot].pins, 0);
	CHECK_EQ(p->t[KVT_TIER_FAST].nfree, p->t[KVT_TIER_FAST].nframes);
	pthread_mutex_unlock(&p->lock);
	t_check_inv(p);
	CHECK_EQ(t_verify_seq(p, a, &cfg, A, 0), 9);
	free(h1.copy);
	free(h2.copy);
	CHECK_EQ(kvt_seq_close(p, a), 0);
	CHECK_EQ(kvt_seq_close(p, b), 0);
	t_close(p, dev);
}

/* The tail of each layer of a (slot, frame), checked to be pinned in the
 * fast tier (lock held). */
static void tails_pinned(struct kvt_pager *p, kvt_seq_t a, uint32_t *slot, uint32_t *frame, int record)
{
	struct seq *s = p->seqs[(uint32_t)(a & 0xffffff)];
	for (unsigned l = 0; l < LAYERS; l++) {
		struct layer_tab *lt = &s->lt[l];
		uint32_t t = lt->pg[lt->n - 1];
		struct page *pg = &p->pages[t];
		CHECK(pg->flags & PF_TAILPIN);
		CHECK(pg->pins >= 1);
		CHECK(!(pg->flags & PF_SEALED));
		CHECK(pg->frame[KVT_TIER_FAST] != NO_FRAME);
		if (record) {
			slot[l] = t;
			frame[l] = pg->frame[KVT_TIER_FAST];
		} else {
			CHECK_EQ(t, slot[l]);
			CHECK_EQ(pg->frame[KVT_TIER_FAST], frame[l]);
		}
	}
}

static void t_tails(int in_place)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_pager *p = t_open_tiers(&cfg, &dev, LAYERS, 12, 16, 512, in_place, 0);
	kvt_seq_t a, b;
	const uint32_t A = 81, B = 82;
	uint32_t slot[LAYERS], frame[LAYERS];

	CHECK_EQ(kvt_seq_open(p, &a), 0);
	CHECK_EQ(kvt_seq_open(p, &b), 0);
	t_append(p, a, &cfg, A, 0, 10);		/* 2 full pages and a tail of 2 */
	pthread_mutex_lock(&p->lock);
	tails_pinned(p, a, slot, frame, 1);
	pthread_mutex_unlock(&p->lock);

	unsigned bt = 0;
	for (int round = 0; round < 4; round++) {
		t_append(p, b, &cfg, B, bt, 24);
		bt += 24;
		kvt_pager_step(p);
		read_all(p, b, &cfg, B, bt / 4);
		t_drain_pinned(p, KVT_TIER_FAST);
		t_drain_pinned(p, KVT_TIER_HOST);
		pthread_mutex_lock(&p->lock);
		tails_pinned(p, a, slot, frame, 0);
		pthread_mutex_unlock(&p->lock);
		t_check_inv(p);
	}
	/* A's full pages went; its tails stayed and read right. */
	CHECK_EQ(kvt_pager_drain(p, KVT_TIER_FAST), -EBUSY);
	struct kvt_stats st;
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK_EQ(st.tier[KVT_TIER_FAST].used, LAYERS);
	CHECK_EQ(t_verify_seq(p, a, &cfg, A, 0), 9);

	/* Another append to the tail: still the same page, frame and pin. */
	t_append(p, a, &cfg, A, 10, 1);
	pthread_mutex_lock(&p->lock);
	tails_pinned(p, a, slot, frame, 0);
	pthread_mutex_unlock(&p->lock);

	/* Parked: the tails are ordinary pages that can be evicted. */
	CHECK_EQ(kvt_seq_park(p, a), 0);
	CHECK_EQ(kvt_pager_drain(p, KVT_TIER_FAST), 0);
	pthread_mutex_lock(&p->lock);
	for (unsigned l = 0; l < LAYERS; l++) {
		CHECK_EQ(p->pages[slot[l]].frame[KVT_TIER_FAST], NO_FRAME);
		CHECK(!(p->pages[slot[l]].flags & PF_TAILPIN));
		CHECK_EQ(p->pages[slot[l]].pins, 0);
	}
	pthread_mutex_unlock(&p->lock);
	/* Resumed: pinned in the fast tier again (any frame). */
	CHECK_EQ(kvt_seq_resume(p, a), 0);
	pthread_mutex_lock(&p->lock);
	tails_pinned(p, a, slot, frame, 1);
	pthread_mutex_unlock(&p->lock);
	t_append(p, b, &cfg, B, bt, 24);
	bt += 24;
	read_all(p, b, &cfg, B, bt / 4);
	t_drain_pinned(p, KVT_TIER_FAST);
	pthread_mutex_lock(&p->lock);
	tails_pinned(p, a, slot, frame, 0);
	pthread_mutex_unlock(&p->lock);
	CHECK_EQ(t_verify_seq(p, a, &cfg, A, 0), 9);
	t_check_inv(p);
	CHECK_EQ(kvt_seq_close(p, a), 0);
	CHECK_EQ(kvt_seq_close(p, b), 0);
	t_close(p, dev);
}

static struct kvt_pager *TP;
static struct kvt_config TC;
static kvt_seq_t TA, TB;
static int tstop;

static void *reader(void *arg)
{
	uint64_t rng = 7;
	unsigned iters = t_scale(400);
	(void)arg;
	for (unsigned i = 0; i < iters; i++) {
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		unsigned layer = (unsigned)(rng % LAYERS);
		uint32_t idx = (uint32_t)((rng >> 8) % 6);
		struct kvt_batch *b;
		struct kvt_view v;
		struct held h;
		CHECK_EQ(kvt_acquire(TP, TA, layer, &idx, 1, &b), 0);
		int r = kvt_batch_next(b, &v);
		if (r != 1)
			fprintf(stderr, "%s: kvt_batch_next: %d\n", t_sub, r);
		CHECK_EQ(r, 1);
		CHECK_EQ(v.page, idx);
		hold(TP, &TC, &h, &v, layer);
		still_held(TP, &TC, &h, 91);
		for (int k = 0; k < 50; k++)
			sched_yield();
		still_held(TP, &TC, &h, 91);
		CHECK_EQ(kvt_batch_next(b, &v), 0);
		kvt_batch_release(b);
		free(h.copy);
		t_progress();
	}
	__atomic_store_n(&tstop, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void t_threads(int in_place)
{
	struct kvt_device *dev;
	TP = t_open_tiers(&TC, &dev, LAYERS, 12, 16, 512, in_place, 2);
	pthread_t th;

	CHECK_EQ(kvt_seq_open(TP, &TA), 0);
	CHECK_EQ(kvt_seq_open(TP, &TB), 0);
	t_append(TP, TA, &TC, 91, 0, 24);	/* 6 full pages per layer */
	CHECK_EQ(pthread_create(&th, NULL, reader, NULL), 0);
	unsigned bt = 0;
	while (!__atomic_load_n(&tstop, __ATOMIC_ACQUIRE)) {
		if (bt >= 160) {
			CHECK_EQ(kvt_seq_close(TP, TB), 0);
			CHECK_EQ(kvt_seq_open(TP, &TB), 0);
			bt = 0;
		}
		t_append(TP, TB, &TC, 92, bt, 16);
		bt += 16;
		read_all(TP, TB, &TC, 92, bt / 4);
		t_drain_pinned(TP, bt % 32 ? KVT_TIER_FAST : KVT_TIER_HOST);
		kvt_pager_step(TP);
	}
	CHECK_EQ(pthread_join(th, NULL), 0);
	t_check_inv(TP);
	CHECK_EQ(t_verify_seq(TP, TA, &TC, 91, 0), 18);
	CHECK_EQ(kvt_seq_close(TP, TA), 0);
	CHECK_EQ(kvt_seq_close(TP, TB), 0);
	t_close(TP, dev);
}

/* Read layer l of s through a batch, peeking before each next; returns
 * how many peeks named a page. */
static unsigned read_peeking(struct kvt_pager *p, kvt_seq_t s, const struct kvt_config *cfg,
			     uint32_t seed, unsigned l, unsigned n)
{
	struct kvt_batch *b;
	struct kvt_view v;
	unsigned named = 0, seen = 0;
	int r;

	CHECK_EQ(kvt_acquire(p, s, l, NULL, 0, &b), 0);
	for (;;) {
		const void *next = kvt_batch_peek(b);
		if ((r = kvt_batch_next(b, &v)) != 1)
			break;
		CHECK(t_check_view(cfg, seed, l, &v) == 0);
		if (next) {
			CHECK(next == v.k);
			named++;
		}
		seen++;
	}
	CHECK_EQ(r, 0);
	CHECK_EQ(seen, n);
	CHECK(kvt_batch_peek(b) == NULL);
	kvt_batch_release(b);
	return named;
}

static void t_peek(int in_place)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_pager *p = t_open_tiers(&cfg, &dev, LAYERS, 12, 16, 512, in_place, 0);
	kvt_seq_t a;
	const uint32_t A = 73;

	CHECK(kvt_batch_peek(NULL) == NULL);
	CHECK_EQ(kvt_seq_open(p, &a), 0);
	t_append(p, a, &cfg, A, 0, 12);		/* 3 full pages per layer, resident */
	/* Every page ready at the acquire: each next is named in advance. */
	CHECK_EQ(read_peeking(p, a, &cfg, A, 1, 3), 3);

	/* Everything on NVMe: nothing is ready before the first next. */
	CHECK_EQ(kvt_seq_park(p, a), 0);
	t_drain_to_nvme(p);
	struct kvt_batch *b;
	CHECK_EQ(kvt_acquire(p, a, 2, NULL, 0, &b), 0);
	CHECK(kvt_batch_peek(b) == NULL);
	kvt_batch_release(b);
	CHECK_EQ(kvt_seq_resume(p, a), 0);
	read_peeking(p, a, &cfg, A, 2, 3);
	t_check_inv(p);
	CHECK_EQ(kvt_seq_close(p, a), 0);
	t_close(p, dev);
}

int main(void)
{
	static const struct t_case cases[] = {
		{ "held-view", t_held_view },
		{ "tails", t_tails },
		{ "threads", t_threads },
		{ "peek", t_peek },
	};

	return t_run_cases(cases, sizeof(cases) / sizeof(cases[0]), 1, 32);
}
