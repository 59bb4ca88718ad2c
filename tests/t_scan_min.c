/* SPDX-License-Identifier: MIT */
/*
 * The decode scan over the pager alone (no model): every page of every
 * layer read once a step, layer after layer, by one thread or two (each
 * half a layer, as the runtime's compute threads do), with the default
 * settings: the auto policy, layer-ahead prefetch, the host tier read in
 * place; and again with pages copied up to the fast tier before they are
 * read, as on a GPU that does not read host memory in place. Fast and
 * host hold a quarter of the KV each, so half of every
 * step must come up from NVMe. After two steps, each step reads from NVMe
 * at most 1.05 times the least it must (1.10 copying up) (kvt_stats.read_min_bytes: what
 * fast and host, less the frames kept for pages on their way, cannot
 * hold), for every context size tried; pages read are checked bit for
 * bit on the first step. The same scan with LRU in every tier reads far
 * more (so the check is one that can fail). So does a reader that falls
 * behind, as on a busy machine, unless the pager holds what it brings up
 * ahead of its readers to the stage: each reader here lets the pager run
 * as far ahead as it will before it reads its batch, and the step still
 * reads at most 1.10 times the least (one such reader or two at once).
 */
#include <errno.h>
#include <pthread.h>
#include <unistd.h>

#include "common.h"
#include "pager/internal.h"

struct part {
	struct kvt_pager *p;
	kvt_seq_t s;
	unsigned layer, lo, hi;
	const struct kvt_config *cfg;
	int check, behind;
};

/* A reader the scheduler does not run for a while: after its acquire it
 * lets the pager bring up whatever it will (until nothing is moving or
 * queued that may start), then reads. A machine busy with other work does this to the
 * readers now and then, at random; here every batch is left behind. */
static void fall_behind(struct kvt_pager *p)
{
	for (unsigned quiet = 0, i = 0; quiet < 2 && i < 1000; i++) {
		usleep(200);
		pthread_mutex_lock(&p->lock);
		/* Queued prefetches wait while a batch has pages it has not
		 * asked for yet (this one): the pager is idle then too. */
		int pf = kvt_pf_queued(p) && kvt_stage_room(p, 1);
		quiet = p->moving || p->demand.n || pf ? 0 : quiet + 1;
		pthread_mutex_unlock(&p->lock);
	}
}

static void *read_part(void *arg)
{
	struct part *h = arg;
	uint32_t *idx = malloc((h->hi - h->lo) * sizeof(*idx));
	struct kvt_batch *b;
	struct kvt_view v;
	unsigned n = 0;
	int r;

	CHECK(idx);
	for (unsigned i = h->lo; i < h->hi; i++)
		idx[i - h->lo] = i;
	CHECK_EQ(kvt_acquire(h->p, h->s, h->layer, idx, h->hi - h->lo, &b), 0);
	if (h->behind)
		fall_behind(h->p);
	while ((r = kvt_batch_next(b, &v)) == 1) {
		if (h->check)
			CHECK(t_check_view(h->cfg, 1, h->layer, &v) == 0);
		n++;
	}
	CHECK_EQ(r, 0);
	CHECK_EQ(n, h->hi - h->lo);
	kvt_batch_release(b);
	free(idx);
	return NULL;
}

/* One step: every layer, split over `threads` readers. */
static void scan(struct kvt_pager *p, kvt_seq_t s, const struct kvt_config *cfg, unsigned per,
		 unsigned threads, int check, int behind)
{
	for (unsigned l = 0; l < cfg->n_layers; l++) {
		pthread_t th[2];
		struct part pt[2];

		for (unsigned t = 0; t < threads; t++) {
			pt[t] = (struct part){ p, s, l, per * t / threads, per * (t + 1) / threads, cfg,
					       check, behind };
			CHECK_EQ(pthread_create(&th[t], NULL, read_part, &pt[t]), 0);
		}
		for (unsigned t = 0; t < threads; t++)
			CHECK_EQ(pthread_join(th[t], NULL), 0);
	}
	kvt_pager_step(p);
}

/* NVMe pages read a step over the least, after two steps; policy NULL:
 * the default; behind: every reader falls behind (fall_behind()). */
static double ratio(unsigned layers, unsigned per, unsigned threads, const char *policy,
		    int in_place, int behind)
{
	unsigned total = layers * per, steps = 8;
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_stats a, b;
	kvt_seq_t s;

	t_config(&cfg, layers, total / 4, total / 4, total * 2);
	cfg.host_in_place = in_place;	/* KVT_IN_PLACE_AUTO: the default */
	cfg.prefetch_depth = 2;
	for (int i = 0; policy && i < KVT_NTIERS; i++)
		snprintf(cfg.tier[i].policy, sizeof(cfg.tier[i].policy), "%s", policy);
	struct kvt_pager *p = t_open(&cfg, &dev);
	CHECK_EQ(kvt_seq_open(p, &s), 0);
	t_append(p, s, &cfg, 1, 0, per * cfg.page_tokens);
	scan(p, s, &cfg, per, threads, 1, behind);
	scan(p, s, &cfg, per, threads, 0, behind);
	CHECK_EQ(kvt_pager_stats(p, &a), 0);
	for (unsigned i = 0; i < steps; i++)
		scan(p, s, &cfg, per, threads, 0, behind);
	CHECK_EQ(kvt_pager_stats(p, &b), 0);
	uint64_t pb = kvt_pager_page_bytes(p);
	uint64_t rd = (b.tier[KVT_TIER_NVME].bytes_out - a.tier[KVT_TIER_NVME].bytes_out) / pb;
	uint64_t mn = (b.read_min_bytes - a.read_min_bytes) / pb;
	/* Half of every step cannot be held above: the least is at least
	 * that, and the stage takes a little more. */
	CHECK(mn >= (uint64_t)steps * total / 2);
	CHECK_EQ(b.read_steps - a.read_steps, steps);
	printf("%u layers x %u pages, %u reader%s%s, %s, %s: %.1f pages a step from NVMe, the "
	       "least %.1f: %.3f; prefetch hit %llu, late %llu, wasted %llu, dropped %llu\n", layers,
	       per, threads, threads > 1 ? "s" : "", behind ? " behind" : "",
	       policy ? policy : "default policy", in_place ? "host read in place" : "pages copied up",
	       (double)rd / steps, (double)mn / steps, (double)rd / (double)mn,
	       (unsigned long long)(b.prefetch_hit - a.prefetch_hit),
	       (unsigned long long)(b.prefetch_late - a.prefetch_late),
	       (unsigned long long)(b.prefetch_wasted - a.prefetch_wasted),
	       (unsigned long long)(b.prefetch_dropped - a.prefetch_dropped));
	CHECK_EQ(b.lost_pages, 0);
	CHECK_EQ(kvt_seq_close(p, s), 0);
	t_close(p, dev);
	return (double)rd / (double)mn;
}

/* ratio() at most limit, in one of three tries: how far the stage runs
 * ahead of the readers depends on when each thread runs, and on a busy
 * machine (other work on every core, a sanitizer's timing) a run can
 * fall behind and read a page twice; a pager that reads more than it
 * must does so in every try. */
static int ratio_within(double limit, unsigned layers, unsigned per, unsigned threads,
			const char *policy, int in_place, int behind)
{
	for (int i = 0; i < 3; i++)
		if (ratio(layers, per, threads, policy, in_place, behind) <= limit)
			return 1;
	return 0;
}

int main(void)
{
	static const unsigned geo[][2] = { { 4, 64 }, { 8, 128 }, { 8, 256 } };
	const unsigned ng = sizeof(geo) / sizeof(geo[0]);

	for (unsigned g = 0; g < ng; g++)
		for (unsigned threads = 1; threads <= 2; threads++) {
			CHECK(ratio_within(1.05, geo[g][0], geo[g][1], threads, NULL, KVT_IN_PLACE_AUTO, 0));
			/* Copied up, as on a GPU that does not read the host
			 * tier in place: every page read from NVMe passes
			 * through both (1.16 to 1.32 while a page could sit in
			 * both). Held to 1.10: 0.97 to 1.03 as run, up to 1.05
			 * under ASan's timing. */
			CHECK(ratio_within(1.10, geo[g][0], geo[g][1], threads, NULL, 0, 0));
		}
	/* Every reader left behind, one or two at once: what the pager
	 * brings up ahead of them is held to the stage, prefetch included.
	 * Held to 1.10: 1.00 to 1.05 as run, up to 1.07 under ASan's timing
	 * (one reader: 1.07 to 1.08 with a window per batch and prefetch's
	 * half of the stage on top; 1.18 to 1.39 when a batch asked for all
	 * its pages at once; two at once were 1.09 to 1.10 and not held). */
	for (unsigned g = 0; g < ng; g++)
		for (unsigned threads = 1; threads <= 2; threads++) {
			CHECK(ratio_within(1.10, geo[g][0], geo[g][1], threads, NULL, KVT_IN_PLACE_AUTO, 1));
			CHECK(ratio_within(1.10, geo[g][0], geo[g][1], threads, NULL, 0, 1));
		}
	/* Recency alone on a scan: the host tier ends up a staging buffer. */
	CHECK(ratio(8, 256, 1, "lru", KVT_IN_PLACE_AUTO, 0) > 1.2);
	return 0;
}
