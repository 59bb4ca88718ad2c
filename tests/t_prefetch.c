/* SPDX-License-Identifier: MIT */
/*
 * Prefetch (prefetch_depth = 2; the fast tier holds three layers, not all
 * four):
 *  - layer-ahead: acquiring layer L of a parked sequence (everything on
 *    NVMe) queues layers L+1 and L+2; while layer 0 is consumed slowly they
 *    come up, and acquiring layers 1 and 2 then hits (prefetch_hit);
 *  - exactly: after the prefetch settles, every page of layers 1 and 2 is a
 *    hit, issued counts the pages queued, nothing is late; past the last
 *    layer it wraps to the first (the next step's); a prefetch that finds
 *    prefetch's share of the stage full of pages not read yet, and no
 *    free frame, is dropped; every prefetch issued is accounted for;
 *  - kvt_prefetch of a layer (and of a page list), then waiting, then
 *    acquiring: every prefetched page is a hit;
 *  - a prefetched page evicted unused counts as wasted;
 *  - prefetch_depth = 0: plain acquires issue no prefetch;
 *  - a tier too small for the depth: prefetch goes no more layers ahead
 *    than the tier holds (depth 3 with room for one or two layers
 *    prefetches one or two), in the fast tier and in the host tier read
 *    in place;
 *  - a sequence closed while its prefetch is in flight: the invariant
 *    check passes right away, and the pages are freed as they land.
 * Every page read is checked bit-exact.
 */
#include <errno.h>
#include <time.h>
#include <unistd.h>
#include "common.h"
#include "pager/internal.h"

#define LAYERS	4u
#define NPG	8u
#define SEED	53u

/* Wait until the migration thread has nothing queued or in flight. With
 * the lock held, an empty queue and no page MOVING mean that nothing is
 * (a popped request is marked MOVING before the lock is dropped). */
static void settle(struct kvt_pager *p)
{
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pthread_mutex_lock(&p->lock);
	for (;;) {
		int busy = p->demand.n || kvt_pf_queued(p) || p->jobs;
		for (uint32_t s = 0; s < p->npages && !busy; s++)
			busy = p->pages[s].state == P_MOVING;
		if (!busy)
			break;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - t0.tv_sec > 20 * t_slow()) {
			fprintf(stderr, "migration thread never went idle\n");
			exit(1);
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 5000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&p->done, &p->lock, &ts);
	}
	pthread_mutex_unlock(&p->lock);
}

/* Settled (nothing queued or moving): no prefetch is counted twice (a
 * hit, late, wasted, dropped, or landed and waiting for its reader; a
 * request that found its page up already is none of them), and the pages
 * landed and waiting are as many as the flags say. */
static void settled_accounts(struct kvt_pager *p)
{
	struct kvt_stats st;
	uint32_t flagged = 0;

	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	pthread_mutex_lock(&p->lock);
	for (uint32_t i = 0; i < p->npages; i++)
		flagged += !!(p->pages[i].flags & PF_PREFETCHED);
	CHECK_EQ(flagged, p->pf_landed);
	CHECK(st.prefetch_hit + st.prefetch_late + st.prefetch_wasted + st.prefetch_dropped +
	      p->pf_landed <= st.prefetch_issued);
	pthread_mutex_unlock(&p->lock);
}

/* Everything down to NVMe. */
static void push_down(struct kvt_pager *p)
{
	struct kvt_stats st;

	settle(p);
	t_drain_to_nvme(p);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK_EQ(st.tier[KVT_TIER_FAST].used, 0);
	CHECK_EQ(st.tier[KVT_TIER_HOST].used, 0);
}

/* Acquire a whole layer and check it; sleep_us after each page. */
static void read_layer(struct kvt_pager *p, kvt_seq_t s, const struct kvt_config *cfg,
		       unsigned layer, unsigned sleep_us)
{
	struct kvt_batch *b;
	struct kvt_view v;
	unsigned n = 0;
	int r;

	CHECK_EQ(kvt_acquire(p, s, layer, NULL, 0, &b), 0);
	while ((r = kvt_batch_next(b, &v)) == 1) {
		CHECK(t_check_view(cfg, SEED, layer, &v) == 0);
		n++;
		if (sleep_us)
			usleep(sleep_us);
	}
	CHECK_EQ(r, 0);
	CHECK_EQ(n, NPG);
	kvt_batch_release(b);
}

/* Pages of a layer not in the fast tier now. */
static unsigned not_fast(struct kvt_pager *p, kvt_seq_t h, unsigned layer)
{
	const struct layer_tab *lt = &p->seqs[h & 0xffffff]->lt[layer];
	unsigned n = 0;

	pthread_mutex_lock(&p->lock);
	for (uint32_t i = 0; i < lt->n; i++)
		n += p->pages[lt->pg[i]].frame[KVT_TIER_FAST] == NO_FRAME;
	pthread_mutex_unlock(&p->lock);
	return n;
}

static struct kvt_stats stats(struct kvt_pager *p)
{
	struct kvt_stats st;
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	return st;
}

static void with_depth(void)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_stats a, b;
	kvt_seq_t s;

	t_config(&cfg, LAYERS, 3 * NPG + 2, 8 * NPG, 4 * LAYERS * NPG);
	cfg.prefetch_depth = 2;
	struct kvt_pager *p = t_open(&cfg, &dev);
	CHECK_EQ(kvt_seq_open(p, &s), 0);
	t_append(p, s, &cfg, SEED, 0, NPG * cfg.page_tokens);
	CHECK_EQ(stats(p).prefetch_issued, 0);

	/* 1. Overlap: park, then read layer 0 slowly; layers 1 and 2 come up
	 * meanwhile. */
	CHECK_EQ(kvt_seq_park(p, s), 0);
	a = stats(p);
	CHECK_EQ(a.tier[KVT_TIER_FAST].used, 0);
	CHECK_EQ(a.tier[KVT_TIER_HOST].used, 0);
	CHECK_EQ(a.tier[KVT_TIER_NVME].used, LAYERS * NPG);
	kvt_pager_step(p);
	read_layer(p, s, &cfg, 0, 5000);
	CHECK(stats(p).prefetch_issued > a.prefetch_issued);
	read_layer(p, s, &cfg, 1, 0);
	read_layer(p, s, &cfg, 2, 0);
	b = stats(p);
	fprintf(stderr, "overlap: issued %llu hit %llu late %llu dropped %llu\n",
		(unsigned long long)(b.prefetch_issued - a.prefetch_issued),
		(unsigned long long)(b.prefetch_hit - a.prefetch_hit),
		(unsigned long long)(b.prefetch_late - a.prefetch_late),
		(unsigned long long)(b.prefetch_dropped - a.prefetch_dropped));
	CHECK(b.prefetch_issued > a.prefetch_issued);
	CHECK(b.prefetch_hit > a.prefetch_hit);
	CHECK_EQ(b.lost_pages, 0);
	t_check_inv(p);

	/* 2. Exact counts, with the prefetch given time to settle. */
	push_down(p);
	kvt_pager_step(p);
	a = stats(p);
	read_layer(p, s, &cfg, 0, 0);
	settle(p);
	b = stats(p);
	CHECK_EQ(b.prefetch_issued - a.prefetch_issued, 2 * NPG);	/* layers 1, 2 */
	read_layer(p, s, &cfg, 1, 0);
	b = stats(p);
	CHECK_EQ(b.prefetch_hit - a.prefetch_hit, NPG);
	CHECK_EQ(b.prefetch_issued - a.prefetch_issued, 3 * NPG);	/* + layer 3 */
	settle(p);
	read_layer(p, s, &cfg, 2, 0);
	b = stats(p);
	CHECK_EQ(b.prefetch_hit - a.prefetch_hit, 2 * NPG);
	CHECK_EQ(b.prefetch_late, a.prefetch_late);
	CHECK_EQ(b.prefetch_wasted, a.prefetch_wasted);
	/* Layer 3's prefetch (queued by layer 1) found prefetch's share of
	 * the stage full of layer 2's pages, landed and not read yet, and no
	 * free frame: dropped, not brought in by evicting. */
	CHECK(b.prefetch_dropped > a.prefetch_dropped);
	settled_accounts(p);
	/* The last layer queues the next step's first layers, 0 and 1: their
	 * pages that layer 3 coming up evicted (some of layer 0's). */
	settle(p);
	a = stats(p);
	unsigned evicted = not_fast(p, s, 0) + not_fast(p, s, 1);
	CHECK(evicted > 0);
	read_layer(p, s, &cfg, LAYERS - 1, 0);
	b = stats(p);
	CHECK_EQ(b.prefetch_issued - a.prefetch_issued, evicted);
	/* Queued again by layer 2: as many as prefetch's share held. */
	CHECK(b.prefetch_hit > a.prefetch_hit && b.prefetch_hit - a.prefetch_hit <= NPG);
	settle(p);
	settled_accounts(p);
	t_check_inv(p);

	/* 3. Explicit kvt_prefetch: a whole layer, and a page list. */
	push_down(p);
	kvt_pager_step(p);
	a = stats(p);
	CHECK_EQ(kvt_prefetch(p, s, 3, NULL, 0), 0);
	settle(p);
	b = stats(p);
	CHECK_EQ(b.prefetch_issued - a.prefetch_issued, NPG);
	CHECK_EQ(b.tier[KVT_TIER_FAST].used, NPG);
	read_layer(p, s, &cfg, 3, 0);
	b = stats(p);
	CHECK_EQ(b.prefetch_hit - a.prefetch_hit, NPG);

	/* Layer 2: reading layer 3 queued the next step's layers 0 and 1. */
	uint32_t some[3] = { 0, 2, 5 };
	settle(p);
	b = stats(p);
	CHECK_EQ(kvt_prefetch(p, s, 2, some, 3), 0);
	settle(p);
	a = stats(p);
	CHECK_EQ(a.prefetch_issued - b.prefetch_issued, 3);
	uint64_t dropped = a.prefetch_dropped - b.prefetch_dropped;
	read_layer(p, s, &cfg, 2, 0);
	settle(p);
	b = stats(p);
	/* Layers 0 and 1, prefetched by layer 3 and not read, hold most of
	 * prefetch's share: what did not fit was dropped, the rest hits. */
	CHECK(b.prefetch_hit > a.prefetch_hit);
	CHECK_EQ(b.prefetch_hit - a.prefetch_hit + dropped, 3);
	/* Bad arguments queue nothing. */
	uint32_t bad = NPG;
	CHECK_EQ(kvt_prefetch(p, s, 0, &bad, 1), -EINVAL);
	CHECK_EQ(kvt_prefetch(p, s, LAYERS, NULL, 0), -EINVAL);
	CHECK_EQ(stats(p).prefetch_issued, b.prefetch_issued);
	t_check_inv(p);

	/* 4. Wasted: prefetched into the fast tier, evicted unused. */
	push_down(p);
	a = stats(p);
	CHECK_EQ(kvt_prefetch(p, s, 1, NULL, 0), 0);
	settle(p);
	b = stats(p);
	CHECK_EQ(b.prefetch_issued - a.prefetch_issued, NPG);
	CHECK_EQ(b.tier[KVT_TIER_FAST].used, NPG);
	CHECK_EQ(kvt_pager_drain(p, KVT_TIER_FAST), 0);
	b = stats(p);
	CHECK_EQ(b.prefetch_wasted - a.prefetch_wasted, NPG);
	CHECK_EQ(b.prefetch_hit, a.prefetch_hit);
	/* Used after all: no hit any more, the data is still right. */
	read_layer(p, s, &cfg, 1, 0);
	CHECK_EQ(stats(p).prefetch_hit, a.prefetch_hit);
	t_check_inv(p);

	/* 5. Closed while its prefetch is in flight (slow reads make sure it
	 * is): the pages are freed as they land, the pager stays consistent
	 * throughout. */
	push_down(p);
	settle(p);
	struct kvt_fault slow = { .slow_us = 20000 };
	pthread_mutex_lock(&p->lock);
	kvt_nvme_set_fault(p->nvme, &slow);	/* settled: no transfer running */
	pthread_mutex_unlock(&p->lock);
	CHECK_EQ(kvt_prefetch(p, s, 2, NULL, 0), 0);
	for (int moving = 0, tries = 0; !moving; tries++) {
		CHECK(tries < 10000);
		pthread_mutex_lock(&p->lock);
		for (uint32_t i = 0; i < p->npages && !moving; i++)
			moving = p->pages[i].state == P_MOVING;
		pthread_mutex_unlock(&p->lock);
		if (!moving)
			usleep(100);
	}
	CHECK_EQ(kvt_seq_close(p, s), 0);
	t_check_inv(p);
	settle(p);
	pthread_mutex_lock(&p->lock);
	kvt_nvme_set_fault(p->nvme, NULL);
	pthread_mutex_unlock(&p->lock);
	t_check_inv(p);
	b = stats(p);
	CHECK_EQ(b.pages, 0);
	CHECK_EQ(b.seqs, 0);
	for (int t = 0; t < KVT_NTIERS; t++)
		CHECK_EQ(b.tier[t].used, 0);
	CHECK_EQ(b.lost_pages, 0);
	t_close(p, dev);
}

static void without_depth(void)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	kvt_seq_t s;

	t_config(&cfg, LAYERS, 3 * NPG + 2, 8 * NPG, 4 * LAYERS * NPG);
	cfg.prefetch_depth = 0;
	struct kvt_pager *p = t_open(&cfg, &dev);
	CHECK_EQ(kvt_seq_open(p, &s), 0);
	t_append(p, s, &cfg, SEED, 0, NPG * cfg.page_tokens);
	CHECK_EQ(kvt_seq_park(p, s), 0);
	for (int round = 0; round < 2; round++) {
		kvt_pager_step(p);
		for (unsigned l = 0; l < LAYERS; l++)
			read_layer(p, s, &cfg, l, 1000);
		settle(p);
	}
	struct kvt_stats st = stats(p);
	CHECK_EQ(st.prefetch_issued, 0);
	CHECK_EQ(st.prefetch_hit, 0);
	CHECK_EQ(st.prefetch_late, 0);
	CHECK_EQ(st.prefetch_wasted, 0);
	CHECK(st.tier[KVT_TIER_FAST].promotions > 0);
	/* kvt_prefetch still works when asked for. */
	push_down(p);
	CHECK_EQ(kvt_prefetch(p, s, 2, NULL, 0), 0);
	settle(p);
	CHECK_EQ(stats(p).prefetch_issued, NPG);
	read_layer(p, s, &cfg, 2, 0);
	CHECK_EQ(stats(p).prefetch_hit, NPG);
	t_check_inv(p);
	CHECK_EQ(kvt_seq_close(p, s), 0);
	t_close(p, dev);
}

/* prefetch_depth 3 where the tier batches read from holds `fits` layers
 * (and a few frames more): the layers prefetched are min(fits, 3). */
static void shallow(int in_place, unsigned fits)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	kvt_seq_t s;

	/* Reading in place, the host tier is the one that counts; the fast
	 * tier holds a layer of its own that the pages never go to. */
	if (in_place)
		t_config(&cfg, LAYERS, NPG + 4, fits * NPG + 4, 4 * LAYERS * NPG);
	else
		t_config(&cfg, LAYERS, fits * NPG + 4, 8 * NPG, 4 * LAYERS * NPG);
	cfg.prefetch_depth = 3;
	cfg.host_in_place = in_place;
	struct kvt_pager *p = t_open(&cfg, &dev);
	CHECK_EQ(kvt_seq_open(p, &s), 0);
	t_append(p, s, &cfg, SEED, 0, NPG * cfg.page_tokens);
	push_down(p);
	kvt_pager_step(p);
	struct kvt_stats a = stats(p);
	read_layer(p, s, &cfg, 0, 0);
	settle(p);
	struct kvt_stats b = stats(p);
	unsigned depth = fits < 3 ? fits : 3;

	CHECK_EQ(b.prefetch_issued - a.prefetch_issued, depth * NPG);
	CHECK_EQ(b.prefetch_wasted, 0);
	for (unsigned l = 1; l <= depth; l++)
		read_layer(p, s, &cfg, l, 0);
	b = stats(p);
	/* With no more room than the layers prefetched, the layer being read
	 * may still be pinned when they come up: some find no frame and are
	 * dropped (prefetch never waits). */
	CHECK(b.prefetch_hit > a.prefetch_hit);
	if (fits > depth)
		CHECK_EQ(b.prefetch_hit - a.prefetch_hit, depth * NPG);
	t_check_inv(p);
	CHECK_EQ(kvt_seq_close(p, s), 0);
	t_close(p, dev);
}

int main(void)
{
	for (int in_place = 0; in_place <= 1; in_place++)
		for (unsigned fits = 1; fits <= 4; fits++)
			shallow(in_place, fits);
	without_depth();
	with_depth();
	return 0;
}
