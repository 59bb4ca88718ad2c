/* SPDX-License-Identifier: MIT */
/*
 * Sequence life cycle: fork, park, resume, close. Each case runs in its own
 * process (a watchdog fails it after 6 s times t_slow()), with
 * host_in_place off and on.
 *
 * fork:   whole pages are shared (the page count does not grow, the child's
 *         table holds the parent's slots with refs 2), the partial page at
 *         the boundary is copied into a new tail of the child; appends to
 *         either side never change the other's data; fork at 0 makes an
 *         empty sequence; beyond the length is -EINVAL and opens nothing.
 * park:   afterwards no page of the sequence is in the fast tier (fast used
 *         is what the other sequence holds), its tails are unpinned;
 *         appends are -EBUSY; acquire still returns the right data.
 * resume: the partial tails are pinned in the fast tier again (PF_TAILPIN
 *         and a fast frame); appends work; all data right.
 * close:  -EBUSY while a batch is unreleased; closing the parent keeps the
 *         child's shared pages readable; after closing everything no page is
 *         live and every tier is empty.
 * park-big: park of a sequence with more pages in the fast tier than the
 *         host tier has frames still empties the fast tier of them.
 */
#include <errno.h>
#include <time.h>
#include <unistd.h>
#include "common.h"
#include "pager/internal.h"

#define LAYERS 3u

static unsigned pt(const struct kvt_config *cfg)
{
	return cfg->page_tokens;
}

/* Every page of every layer: ntok tokens, token t has seed a if t < split,
 * else seed b. */
static void verify2(struct kvt_pager *p, kvt_seq_t s, const struct kvt_config *cfg,
		    uint32_t a, unsigned split, uint32_t b, unsigned ntok)
{
	unsigned per = cfg->n_kv_heads * cfg->head_dim, np = (ntok + pt(cfg) - 1) / pt(cfg);
	float k[per], v[per];

	for (unsigned l = 0; l < cfg->n_layers; l++) {
		struct kvt_batch *bt;
		struct kvt_view vw;
		unsigned seen = 0;
		int r;
		CHECK_EQ(kvt_seq_tokens(p, s, l), ntok);
		CHECK_EQ(kvt_seq_pages(p, s, l), np);
		CHECK_EQ(kvt_acquire(p, s, l, NULL, 0, &bt), 0);
		while ((r = kvt_batch_next(bt, &vw)) != 0) {
			if (r < 0)
				fprintf(stderr, "%s: kvt_batch_next(layer %u page %u): %s\n", t_sub, l,
					vw.page, strerror(-r));
			CHECK_EQ(r, 1);
			unsigned want = ntok - vw.page * pt(cfg);
			CHECK_EQ(vw.ntok, want < pt(cfg) ? want : pt(cfg));
			for (unsigned t = 0; t < vw.ntok; t++) {
				unsigned tok = vw.page * pt(cfg) + t;
				t_fill_tokens(cfg, tok < split ? a : b, l, tok, 1, k, v);
				if (memcmp((const float *)vw.k + (size_t)t * per, k, sizeof(k)) ||
				    memcmp((const float *)vw.v + (size_t)t * per, v, sizeof(v))) {
					fprintf(stderr, "%s: layer %u token %u differs (tier %u)\n", t_sub, l,
						tok, vw.tier);
					exit(1);
				}
			}
			seen++;
		}
		CHECK_EQ(seen, np);
		kvt_batch_release(bt);
	}
}

static struct seq *iseq(struct kvt_pager *p, kvt_seq_t h)
{
	return p->seqs[(uint32_t)(h & 0xffffff)];
}

static uint64_t live_pages(struct kvt_pager *p)
{
	struct kvt_stats st;
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	return st.pages;
}

/* Pages of h in the fast tier (lock held). */
static unsigned fast_pages_of(struct kvt_pager *p, kvt_seq_t h)
{
	struct seq *s = iseq(p, h);
	unsigned n = 0;
	for (unsigned l = 0; l < p->cfg.n_layers; l++)
		for (uint32_t i = 0; i < s->lt[l].n; i++)
			n += p->pages[s->lt[l].pg[i]].frame[KVT_TIER_FAST] != NO_FRAME;
	return n;
}

/* After closing everything: nothing live, every tier empty. A page whose
 * move was in flight at the close is freed when it lands: allow 1 s
 * (times t_slow()). */
static void check_empty(struct kvt_pager *p)
{
	struct kvt_stats st;
	for (int tries = 0;; tries++) {
		CHECK_EQ(kvt_pager_stats(p, &st), 0);
		if (!st.pages && !st.tier[0].used && !st.tier[1].used && !st.tier[2].used)
			break;
		if (tries == 100 * (int)t_slow()) {
			fprintf(stderr, "%s: after closing all: pages %llu used %llu %llu %llu\n", t_sub,
				(unsigned long long)st.pages, (unsigned long long)st.tier[0].used,
				(unsigned long long)st.tier[1].used, (unsigned long long)st.tier[2].used);
			exit(1);
		}
		usleep(10000);
	}
	CHECK_EQ(st.seqs, 0);
	t_check_inv(p);
}

static void t_fork(int in_place)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_pager *p = t_open_tiers(&cfg, &dev, LAYERS, 32, 16, 400, in_place, -1);
	kvt_seq_t a, c16, c10, c0, cfull, x;
	const uint32_t A = 11, B = 22, C = 33, D = 44;

	CHECK_EQ(kvt_seq_open(p, &a), 0);
	t_append(p, a, &cfg, A, 0, 18);		/* 4 full pages + 2 tokens, per layer */
	CHECK_EQ(live_pages(p), 15);

	/* At a page boundary: only shared pages. */
	CHECK_EQ(kvt_seq_fork(p, a, 16, &c16), 0);
	CHECK_EQ(live_pages(p), 15);
	CHECK_EQ(kvt_seq_tokens(p, c16, 1), 16);
	CHECK_EQ(kvt_seq_pages(p, c16, 1), 4);
	pthread_mutex_lock(&p->lock);
	for (unsigned l = 0; l < LAYERS; l++)
		for (unsigned i = 0; i < 4; i++) {
			uint32_t s = iseq(p, a)->lt[l].pg[i];
			CHECK_EQ(iseq(p, c16)->lt[l].pg[i], s);
			CHECK_EQ(p->pages[s].refs, 2);
		}
	pthread_mutex_unlock(&p->lock);
	t_check_inv(p);

	/* Inside page 2: pages 0 and 1 shared, 2 tokens copied into a new tail. */
	CHECK_EQ(kvt_seq_fork(p, a, 10, &c10), 0);
	CHECK_EQ(live_pages(p), 15 + LAYERS);
	pthread_mutex_lock(&p->lock);
	for (unsigned l = 0; l < LAYERS; l++) {
		struct layer_tab *pl = &iseq(p, a)->lt[l], *cl = &iseq(p, c10)->lt[l];
		CHECK_EQ(cl->n, 3);
		CHECK_EQ(cl->pg[0], pl->pg[0]);
		CHECK_EQ(cl->pg[1], pl->pg[1]);
		CHECK(cl->pg[2] != pl->pg[2]);
		struct page *tail = &p->pages[cl->pg[2]];
		CHECK_EQ(tail->ntok, 2);
		CHECK_EQ(tail->refs, 1);
		CHECK(tail->flags & PF_TAILPIN);
		CHECK(tail->frame[KVT_TIER_FAST] != NO_FRAME);
		CHECK_EQ(p->pages[pl->pg[0]].refs, 3);
	}
	pthread_mutex_unlock(&p->lock);
	verify2(p, c10, &cfg, A, 10, A, 10);
	t_check_inv(p);

	/* The child's appends do not change the parent, nor the parent's the child. */
	t_append(p, c10, &cfg, B, 10, 7);
	t_append(p, a, &cfg, A, 18, 5);
	t_append(p, c16, &cfg, C, 16, 3);
	verify2(p, a, &cfg, A, 23, A, 23);
	verify2(p, c10, &cfg, A, 10, B, 17);
	verify2(p, c16, &cfg, A, 16, C, 19);

	/* At 0: an empty sequence that shares nothing. */
	uint64_t before = live_pages(p);
	CHECK_EQ(kvt_seq_fork(p, a, 0, &c0), 0);
	CHECK_EQ(live_pages(p), before);
	for (unsigned l = 0; l < LAYERS; l++) {
		CHECK_EQ(kvt_seq_tokens(p, c0, l), 0);
		CHECK_EQ(kvt_seq_pages(p, c0, l), 0);
	}
	t_append(p, c0, &cfg, D, 0, 6);
	verify2(p, c0, &cfg, D, 0, D, 6);

	/* The whole length, tail included. */
	CHECK_EQ(kvt_seq_fork(p, a, 23, &cfull), 0);
	verify2(p, cfull, &cfg, A, 23, A, 23);

	/* Beyond the length: refused, nothing opened. */
	struct kvt_stats s0, s1;
	CHECK_EQ(kvt_pager_stats(p, &s0), 0);
	CHECK_EQ(kvt_seq_fork(p, a, 24, &x), -EINVAL);
	CHECK_EQ(kvt_seq_fork(p, a, ~0u, &x), -EINVAL);
	CHECK_EQ(kvt_seq_fork(p, c0, 7, &x), -EINVAL);
	CHECK_EQ(kvt_pager_stats(p, &s1), 0);
	CHECK_EQ(s1.seqs, s0.seqs);
	CHECK_EQ(s1.seqs, 5);
	CHECK_EQ(s1.pages, s0.pages);
	t_check_inv(p);

	/* Pages pushed down and back: still right on both sides. */
	t_drain_pinned(p, KVT_TIER_FAST);
	t_drain_pinned(p, KVT_TIER_HOST);
	verify2(p, a, &cfg, A, 23, A, 23);
	verify2(p, c10, &cfg, A, 10, B, 17);

	/* Closing the parent keeps the children's shared pages. */
	CHECK_EQ(kvt_seq_close(p, a), 0);
	verify2(p, c16, &cfg, A, 16, C, 19);
	verify2(p, c10, &cfg, A, 10, B, 17);
	verify2(p, cfull, &cfg, A, 23, A, 23);
	t_check_inv(p);
	CHECK_EQ(kvt_seq_close(p, c16), 0);
	CHECK_EQ(kvt_seq_close(p, cfull), 0);
	verify2(p, c10, &cfg, A, 10, B, 17);
	CHECK_EQ(kvt_seq_close(p, c10), 0);
	CHECK_EQ(kvt_seq_close(p, c0), 0);
	check_empty(p);
	t_close(p, dev);
}

/* Parks a (10 tokens: 2 full pages and a tail of 2 per layer) while b
 * (6 tokens) stays; checks park, then resume. */
static void t_park_resume(int in_place)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_pager *p = t_open_tiers(&cfg, &dev, LAYERS, 24, 16, 400, in_place, -1);
	kvt_seq_t a, b;
	struct kvt_stats st;
	const uint32_t A = 5, B = 6;
	unsigned per = cfg.n_kv_heads * cfg.head_dim;
	float k[per], v[per];

	CHECK_EQ(kvt_seq_open(p, &a), 0);
	CHECK_EQ(kvt_seq_open(p, &b), 0);
	t_append(p, a, &cfg, A, 0, 10);
	t_append(p, b, &cfg, B, 0, 6);

	CHECK_EQ(kvt_seq_park(p, a), 0);
	pthread_mutex_lock(&p->lock);
	unsigned a_fast = fast_pages_of(p, a), b_fast = fast_pages_of(p, b);
	unsigned used = p->t[KVT_TIER_FAST].nframes - p->t[KVT_TIER_FAST].nfree;
	for (unsigned l = 0; l < LAYERS; l++) {
		struct layer_tab *lt = &iseq(p, a)->lt[l];
		struct page *tail = &p->pages[lt->pg[lt->n - 1]];
		CHECK(!(tail->flags & PF_TAILPIN));
		CHECK_EQ(tail->pins, 0);
	}
	pthread_mutex_unlock(&p->lock);
	CHECK_EQ(a_fast, 0);
	CHECK_EQ(b_fast, 2 * LAYERS);
	CHECK_EQ(used, b_fast);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK_EQ(st.tier[KVT_TIER_FAST].used, b_fast);
	/* Nothing brings them back by itself. */
	usleep(50000);
	pthread_mutex_lock(&p->lock);
	a_fast = fast_pages_of(p, a);
	pthread_mutex_unlock(&p->lock);
	CHECK_EQ(a_fast, 0);
	t_check_inv(p);

	/* Appends are refused, nothing changes. */
	t_fill_tokens(&cfg, A, 0, 10, 1, k, v);
	for (unsigned l = 0; l < LAYERS; l++)
		CHECK_EQ(kvt_seq_append(p, a, l, k, v, 1), -EBUSY);
	for (unsigned l = 0; l < LAYERS; l++)
		CHECK_EQ(kvt_seq_tokens(p, a, l), 10);
	/* Park again: still parked, fine. */
	CHECK_EQ(kvt_seq_park(p, a), 0);
	CHECK_EQ(kvt_seq_append(p, a, 1, k, v, 1), -EBUSY);

	/* Acquire works on a parked sequence. */
	verify2(p, a, &cfg, A, 10, A, 10);
	verify2(p, b, &cfg, B, 6, B, 6);
	CHECK_EQ(kvt_seq_append(p, a, 2, k, v, 1), -EBUSY);
	t_check_inv(p);

	/* Park again (pages came up for the reads), push them to the bottom,
	 * then resume: the tails come back pinned in the fast tier. */
	CHECK_EQ(kvt_seq_resume(p, a), 0);
	CHECK_EQ(kvt_seq_park(p, a), 0);
	t_drain_pinned(p, KVT_TIER_HOST);
	CHECK_EQ(kvt_seq_resume(p, a), 0);
	pthread_mutex_lock(&p->lock);
	for (unsigned l = 0; l < LAYERS; l++) {
		struct layer_tab *lt = &iseq(p, a)->lt[l];
		struct page *tail = &p->pages[lt->pg[lt->n - 1]];
		CHECK_EQ(lt->n, 3);
		CHECK(tail->flags & PF_TAILPIN);
		CHECK(tail->pins >= 1);
		CHECK(tail->frame[KVT_TIER_FAST] != NO_FRAME);
		CHECK_EQ(tail->ntok, 2);
	}
	pthread_mutex_unlock(&p->lock);
	t_check_inv(p);
	/* Resume of a running sequence: nothing to do. */
	CHECK_EQ(kvt_seq_resume(p, a), 0);

	/* Appends work again; everything reads right. */
	t_append(p, a, &cfg, A, 10, 7);
	verify2(p, a, &cfg, A, 17, A, 17);
	verify2(p, b, &cfg, B, 6, B, 6);
	/* The tail pin survived a drain of the fast tier. */
	t_drain_pinned(p, KVT_TIER_FAST);
	pthread_mutex_lock(&p->lock);
	for (unsigned l = 0; l < LAYERS; l++) {
		struct layer_tab *lt = &iseq(p, a)->lt[l];
		struct page *tail = &p->pages[lt->pg[lt->n - 1]];
		CHECK_EQ(tail->ntok, 1);
		CHECK(tail->flags & PF_TAILPIN);
		CHECK(tail->frame[KVT_TIER_FAST] != NO_FRAME);
	}
	pthread_mutex_unlock(&p->lock);

	/* A parked sequence closes like any other. */
	CHECK_EQ(kvt_seq_park(p, b), 0);
	CHECK_EQ(kvt_seq_close(p, b), 0);
	CHECK_EQ(kvt_seq_close(p, a), 0);
	check_empty(p);
	t_close(p, dev);
}

/* 7 full pages per layer, all in the fast tier (21 pages), more than the
 * host tier's 16 frames: park must still take every one out of it. */
static void t_park_big(int in_place)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_pager *p = t_open_tiers(&cfg, &dev, LAYERS, 24, 16, 400, in_place, -1);
	kvt_seq_t a;

	CHECK_EQ(kvt_seq_open(p, &a), 0);
	t_append(p, a, &cfg, 9, 0, 28);
	pthread_mutex_lock(&p->lock);
	CHECK_EQ(fast_pages_of(p, a), 21);
	pthread_mutex_unlock(&p->lock);
	CHECK_EQ(kvt_seq_park(p, a), 0);
	pthread_mutex_lock(&p->lock);
	unsigned left = fast_pages_of(p, a);
	pthread_mutex_unlock(&p->lock);
	if (left)
		fprintf(stderr, "%s: %u of 21 pages still in the fast tier after park\n", t_sub, left);
	CHECK_EQ(left, 0);
	t_check_inv(p);
	verify2(p, a, &cfg, 9, 28, 9, 28);
	CHECK_EQ(kvt_seq_close(p, a), 0);
	check_empty(p);
	t_close(p, dev);
}

static void t_close_cases(int in_place)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_pager *p = t_open_tiers(&cfg, &dev, LAYERS, 24, 16, 400, in_place, -1);
	kvt_seq_t a, c, d;
	struct kvt_batch *b;
	struct kvt_view v;

	CHECK_EQ(kvt_seq_open(p, &a), 0);
	CHECK_EQ(kvt_seq_open(p, &d), 0);
	t_append(p, a, &cfg, 1, 0, 30);
	t_append(p, d, &cfg, 2, 0, 40);		/* pushes some of a down */

	/* An unreleased batch holds the sequence open. */
	CHECK_EQ(kvt_acquire(p, a, 0, NULL, 0, &b), 0);
	CHECK_EQ(kvt_batch_next(b, &v), 1);
	CHECK_EQ(kvt_seq_close(p, a), -EBUSY);
	CHECK_EQ(kvt_seq_tokens(p, a, 0), 30);
	kvt_batch_release(b);

	/* A batch of a fork child holds the child, not the parent. */
	CHECK_EQ(kvt_seq_fork(p, a, 21, &c), 0);
	CHECK_EQ(kvt_acquire(p, c, 2, NULL, 0, &b), 0);
	CHECK_EQ(kvt_seq_close(p, c), -EBUSY);
	CHECK_EQ(kvt_seq_close(p, a), 0);
	unsigned n = 0;
	int r;
	while ((r = kvt_batch_next(b, &v)) == 1) {
		CHECK(t_check_view(&cfg, 1, 2, &v) == 0);
		n++;
	}
	CHECK_EQ(r, 0);
	CHECK_EQ(n, 6);
	kvt_batch_release(b);
	/* The parent is gone; the child's shared pages are not. */
	t_drain_pinned(p, KVT_TIER_FAST);
	verify2(p, c, &cfg, 1, 21, 1, 21);
	t_check_inv(p);
	CHECK_EQ(kvt_seq_close(p, c), 0);
	CHECK_EQ(kvt_seq_close(p, d), 0);
	check_empty(p);

	/* Pages spread over all three tiers, then closed. */
	CHECK_EQ(kvt_seq_open(p, &a), 0);
	t_append(p, a, &cfg, 3, 0, 150);
	struct kvt_stats st;
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK(st.tier[KVT_TIER_NVME].used > 0);
	verify2(p, a, &cfg, 3, 150, 3, 150);
	CHECK_EQ(kvt_seq_close(p, a), 0);
	check_empty(p);

	/* A batch still held keeps the pager open: closing it would leave
	 * the release to freed memory. */
	CHECK_EQ(kvt_seq_open(p, &a), 0);
	t_append(p, a, &cfg, 4, 0, 9);
	CHECK_EQ(kvt_acquire(p, a, 1, NULL, 0, &b), 0);
	CHECK_EQ(kvt_batch_next(b, &v), 1);
	CHECK_EQ(kvt_pager_close(p), -EBUSY);
	CHECK(t_check_view(&cfg, 4, 1, &v) == 0);
	kvt_batch_release(b);
	CHECK_EQ(kvt_seq_close(p, a), 0);
	t_close(p, dev);
}

int main(void)
{
	static const struct t_case cases[] = {
		{ "fork", t_fork },
		{ "park-resume", t_park_resume },
		{ "close", t_close_cases },
		{ "park-big", t_park_big },
	};

	return t_run_cases(cases, sizeof(cases) / sizeof(cases[0]), 1, 40);
}
