/* SPDX-License-Identifier: MIT */
/*
 * Watermarks (kswapd semantics), per tier: min 5 %, low 20 %, high 40 % of
 * 40 frames = 2, 8 and 16 free frames. Each case runs in its own process
 * (6 s watchdog).
 *
 * fast-background: after a burst of appends the idle tier is not left below
 *   low; stepped down to exactly low free frames nothing moves; one frame
 *   below low and the migration thread demotes until at least high frames
 *   are free, within 2 s, and not much more than that; then, idle with
 *   free >= low, nothing moves.
 * fast-quiet: filled to exactly low free frames, nothing moves at all.
 * fast-min: while appending 400 pages in a row no append leaves fewer
 *   than min frames free (it waits for reclaim instead), every append
 *   succeeds and every byte reads back.
 * fast-pinned: with the fast tier pinned full of
 *   tails down to min, one more tail still gets a frame (nothing is
 *   evictable, so the reserve goes); with every frame pinned the next
 *   append fails with -ENOSPC at once (no hang), and works again after a
 *   sequence is closed.
 * host-background, host-quiet: the same for the host tier (fast 16 pages
 *   without watermarks, pages reach the host tier by demotion).
 */
#include <errno.h>
#include <time.h>
#include <unistd.h>
#include "common.h"
#include "pager/internal.h"

#define FRAMES	40u
#define WM_MIN	2u		/* 5 % of 40 */
#define WM_LOW	8u		/* 20 % */
#define WM_HIGH	16u		/* 40 % */

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void set_wm(struct kvt_config *cfg, int tier, unsigned mn, unsigned lo, unsigned hi)
{
	cfg->tier[tier].wm_min = mn;
	cfg->tier[tier].wm_low = lo;
	cfg->tier[tier].wm_high = hi;
}

static uint64_t free_of(struct kvt_pager *p, int tier)
{
	struct kvt_stats st;
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK(st.tier[tier].used <= st.tier[tier].capacity);
	return st.tier[tier].capacity - st.tier[tier].used;
}

/* Wait (up to 2 s times t_slow()) for tier to have at least want free frames. */
static void wait_free(struct kvt_pager *p, int tier, uint64_t want)
{
	double t0 = now_s();
	uint64_t f;
	while ((f = free_of(p, tier)) < want) {
		if (now_s() - t0 > 2.0 * t_slow()) {
			fprintf(stderr, "%s: %s tier: %llu frames free after 2 s (x%u), want >= %llu\n",
				t_sub, kvt_tier_name(tier), (unsigned long long)f, t_slow(),
				(unsigned long long)want);
			exit(1);
		}
		usleep(2000);
	}
}

/* Nothing moves between two snapshots 200 ms apart. */
static void quiet(struct kvt_pager *p)
{
	struct kvt_stats a, b;
	CHECK_EQ(kvt_pager_stats(p, &a), 0);
	usleep(200000);
	CHECK_EQ(kvt_pager_stats(p, &b), 0);
	for (int ti = 0; ti < KVT_NTIERS; ti++) {
		if (a.tier[ti].used != b.tier[ti].used || a.tier[ti].demotions != b.tier[ti].demotions ||
		    a.tier[ti].promotions != b.tier[ti].promotions ||
		    a.tier[ti].bytes_in != b.tier[ti].bytes_in) {
			fprintf(stderr, "%s: %s tier moved while idle: used %llu -> %llu, demotions "
				"%llu -> %llu, promotions %llu -> %llu\n", t_sub, kvt_tier_name(ti),
				(unsigned long long)a.tier[ti].used, (unsigned long long)b.tier[ti].used,
				(unsigned long long)a.tier[ti].demotions,
				(unsigned long long)b.tier[ti].demotions,
				(unsigned long long)a.tier[ti].promotions,
				(unsigned long long)b.tier[ti].promotions);
			exit(1);
		}
	}
}

/* Wait (up to 2 s times t_slow()) until two snapshots 50 ms apart agree. */
static void settle(struct kvt_pager *p)
{
	struct kvt_stats a, b;
	double t0 = now_s();
	CHECK_EQ(kvt_pager_stats(p, &a), 0);
	for (;;) {
		usleep(50000);
		CHECK_EQ(kvt_pager_stats(p, &b), 0);
		int same = 1;
		for (int ti = 0; ti < KVT_NTIERS; ti++)
			same &= a.tier[ti].used == b.tier[ti].used &&
				a.tier[ti].demotions == b.tier[ti].demotions;
		if (same)
			return;
		if (now_s() - t0 > 2.0 * t_slow()) {
			fprintf(stderr, "%s: still moving after 2 s (x%u)\n", t_sub, t_slow());
			exit(1);
		}
		a = b;
	}
}

/* Append one full page (4 tokens) of the only layer. */
static void page_append(struct kvt_pager *p, kvt_seq_t s, const struct kvt_config *cfg,
			uint32_t seed, unsigned *ntok)
{
	t_append(p, s, cfg, seed, *ntok, cfg->page_tokens);
	*ntok += cfg->page_tokens;
}

/* A one-layer pager whose tier (FRAMES frames) has watermarks of 5/20/40 %
 * and whose other tier has none (the fast tier has FRAMES frames, or 16
 * when tier is the host tier); checks they come to WM_MIN/LOW/HIGH frames. */
static struct kvt_pager *open_wm(struct kvt_config *cfg, struct kvt_device **dev, int tier)
{
	int other = tier == KVT_TIER_FAST ? KVT_TIER_HOST : KVT_TIER_FAST;

	t_config(cfg, 1, tier == KVT_TIER_FAST ? FRAMES : 16, FRAMES, 1024);
	set_wm(cfg, tier, 5, 20, 40);
	set_wm(cfg, other, 0, 0, 0);
	struct kvt_pager *p = t_open(cfg, dev);
	pthread_mutex_lock(&p->lock);
	CHECK_EQ(p->t[tier].wm_min, WM_MIN);
	CHECK_EQ(p->t[tier].wm_low, WM_LOW);
	CHECK_EQ(p->t[tier].wm_high, WM_HIGH);
	pthread_mutex_unlock(&p->lock);
	return p;
}

/* fast-background and host-background on tier. A burst of pages (fast:
 * 36, free drops below low (8) at the 33rd; host: 16 fill the fast tier,
 * each further one pushes one page into the host tier, past 32 of them its
 * free frames drop below low): once idle the tier is not left below low.
 * Stepped down to exactly low, nothing moves; one page below low, back up
 * to high within 2 s, and not far past it; then idle, nothing moves. */
static void background(int tier)
{
	int fast = tier == KVT_TIER_FAST;
	uint32_t seed = fast ? 1 : 4;
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_pager *p = open_wm(&cfg, &dev, tier);
	kvt_seq_t s;
	unsigned ntok = 0;
	struct kvt_stats st;

	CHECK_EQ(kvt_seq_open(p, &s), 0);
	for (unsigned i = 0; i < (fast ? 36 : 16 + 36); i++)
		page_append(p, s, &cfg, seed, &ntok);
	settle(p);
	CHECK(free_of(p, tier) >= WM_LOW);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK(st.tier[tier].demotions > 0);
	if (fast)
		CHECK_EQ(st.tier[KVT_TIER_HOST].used + st.tier[KVT_TIER_FAST].used, 36);
	else
		CHECK(st.tier[KVT_TIER_NVME].used > 0);
	/* Step down to exactly low: nothing moves. */
	for (unsigned i = 0; (fast || i < 100) && free_of(p, tier) > WM_LOW; i++)
		page_append(p, s, &cfg, seed, &ntok);
	CHECK_EQ(free_of(p, tier), WM_LOW);
	quiet(p);
	/* One page below low: back up to high within 2 s, and not far past it. */
	page_append(p, s, &cfg, seed, &ntok);
	wait_free(p, tier, WM_HIGH);
	settle(p);
	uint64_t f = free_of(p, tier);
	if (f > WM_HIGH + 2)
		fprintf(stderr, "%s: %llu %sframes free, high is %u: demoted too much\n", t_sub,
			(unsigned long long)f, fast ? "" : "host ", WM_HIGH);
	CHECK(f <= WM_HIGH + 2);
	/* Idle at free >= low: nothing moves. */
	quiet(p);
	CHECK_EQ(t_verify_seq(p, s, &cfg, seed, 0), ntok / cfg.page_tokens);
	t_check_inv(p);
	CHECK_EQ(kvt_seq_close(p, s), 0);
	t_close(p, dev);
}

/* fast-quiet and host-quiet on tier: filled to exactly low free frames
 * (fast: FRAMES - WM_LOW pages; host: pages pushed into it until then),
 * nothing moves at all and nothing went down from the tier. */
static void quiet_at_low(int tier)
{
	int fast = tier == KVT_TIER_FAST;
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_pager *p = open_wm(&cfg, &dev, tier);
	kvt_seq_t s;
	unsigned ntok = 0;

	CHECK_EQ(kvt_seq_open(p, &s), 0);
	for (unsigned i = 0; fast ? i < FRAMES - WM_LOW : i < 200 && free_of(p, tier) > WM_LOW; i++)
		page_append(p, s, &cfg, fast ? 2 : 5, &ntok);
	CHECK_EQ(free_of(p, tier), WM_LOW);
	quiet(p);
	struct kvt_stats st;
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK_EQ(st.tier[tier].demotions, 0);
	CHECK_EQ(st.tier[tier + 1].used, 0);	/* the tier below */
	if (fast)
		CHECK_EQ(st.tier[KVT_TIER_FAST].used, FRAMES - WM_LOW);
	CHECK_EQ(kvt_seq_close(p, s), 0);
	t_close(p, dev);
}

static void t_fast_background(int unused) { background(KVT_TIER_FAST); }
static void t_host_background(int unused) { background(KVT_TIER_HOST); }
static void t_fast_quiet(int unused) { quiet_at_low(KVT_TIER_FAST); }
static void t_host_quiet(int unused) { quiet_at_low(KVT_TIER_HOST); }

static void t_fast_min(int unused)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_pager *p = open_wm(&cfg, &dev, KVT_TIER_FAST);
	kvt_seq_t s;
	unsigned ntok = 0;

	/* 400 pages as fast as they come: never below min after an append. */
	CHECK_EQ(kvt_seq_open(p, &s), 0);
	for (unsigned i = 0; i < t_scale(400); i++) {
		page_append(p, s, &cfg, 3, &ntok);
		uint64_t f = free_of(p, KVT_TIER_FAST);
		if (f < WM_MIN)
			fprintf(stderr, "%s: page %u: %llu fast frames free, min is %u\n", t_sub, i,
				(unsigned long long)f, WM_MIN);
		CHECK(f >= WM_MIN);
	}
	CHECK_EQ(t_verify_seq(p, s, &cfg, 3, 0), ntok / cfg.page_tokens);
	t_check_inv(p);
	CHECK_EQ(kvt_seq_close(p, s), 0);
	t_close(p, dev);
}

static void t_fast_pinned(int unused)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_pager *p = open_wm(&cfg, &dev, KVT_TIER_FAST);
	unsigned per = cfg.n_kv_heads * cfg.head_dim;
	float k[per], v[per];

	/* Tails pin the fast tier down to min free frames. */
	kvt_seq_t q[FRAMES + 1];
	unsigned nq = 0;
	for (; nq < FRAMES - WM_MIN; nq++) {
		CHECK_EQ(kvt_seq_open(p, &q[nq]), 0);
		t_fill_tokens(&cfg, 100 + nq, 0, 0, 1, k, v);
		CHECK_EQ(kvt_seq_append(p, q[nq], 0, k, v, 1), 0);
	}
	CHECK_EQ(free_of(p, KVT_TIER_FAST), WM_MIN);
	/* Nothing is evictable: the reserve is used, the append succeeds. */
	double t0 = now_s();
	for (; nq < FRAMES; nq++) {
		CHECK_EQ(kvt_seq_open(p, &q[nq]), 0);
		t_fill_tokens(&cfg, 100 + nq, 0, 0, 1, k, v);
		int r = kvt_seq_append(p, q[nq], 0, k, v, 1);
		if (r)
			fprintf(stderr, "%s: append with %u tails pinned: %s\n", t_sub, nq, strerror(-r));
		CHECK_EQ(r, 0);
	}
	CHECK_EQ(free_of(p, KVT_TIER_FAST), 0);
	/* Every frame pinned: refused, at once. */
	CHECK_EQ(kvt_seq_open(p, &q[nq]), 0);
	t_fill_tokens(&cfg, 100 + nq, 0, 0, 1, k, v);
	CHECK_EQ(kvt_seq_append(p, q[nq], 0, k, v, 1), -ENOSPC);
	CHECK_EQ(kvt_seq_tokens(p, q[nq], 0), 0);
	CHECK(now_s() - t0 < 3.0);
	t_check_inv(p);
	/* A frame comes free: it works again. */
	CHECK_EQ(kvt_seq_close(p, q[0]), 0);
	CHECK_EQ(kvt_seq_append(p, q[nq], 0, k, v, 1), 0);
	for (unsigned i = 1; i <= nq; i++) {
		struct kvt_batch *b;
		struct kvt_view vw;
		CHECK_EQ(kvt_acquire(p, q[i], 0, NULL, 0, &b), 0);
		CHECK_EQ(kvt_batch_next(b, &vw), 1);
		CHECK_EQ(vw.ntok, 1);
		CHECK(t_check_view(&cfg, 100 + i, 0, &vw) == 0);
		CHECK_EQ(kvt_batch_next(b, &vw), 0);
		kvt_batch_release(b);
		CHECK_EQ(kvt_seq_close(p, q[i]), 0);
	}
	t_check_inv(p);
	t_close(p, dev);
}

int main(void)
{
	static const struct t_case cases[] = {
		{ "fast-background", t_fast_background },
		{ "fast-quiet", t_fast_quiet },
		{ "fast-min", t_fast_min },
		{ "fast-pinned", t_fast_pinned },
		{ "host-background", t_host_background },
		{ "host-quiet", t_host_quiet },
	};

	return t_run_cases(cases, sizeof(cases) / sizeof(cases[0]), 0, 20);
}
