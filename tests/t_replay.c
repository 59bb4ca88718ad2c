/* SPDX-License-Identifier: MIT */
/*
 * A trace recorded by the live pager, replayed by kvt-sim's engine with
 * the trace's own configuration, reproduces the live hits and misses per
 * tier exactly (and the promotions, demotions and drops), for every
 * online policy, with two tiers and with three.
 *
 * The live pager is made deterministic: one runtime thread, prefetch
 * depth 0, every watermark 0 (no background demotion: reclaim happens only
 * on demand, synchronously for the waiting thread), the host tier not
 * read in place, and one page per acquire (a batch of one: no hit of a
 * batch is pinned while its misses are promoted).
 *
 * A tail page filled by an append loses its pin then; the SEAL record
 * tells the replay, so a step may read its pages in any order (here in
 * page order, the tail last, after the reads that evict).
 */
#include "common.h"

#include <errno.h>
#include <unistd.h>

#include "pager/policy.h"
#include "pager/sim.h"

#define LAYERS	4
#define STEPS	24
#define PREFILL	38	/* tokens: 9 full pages and a partial tail per layer */

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

#include <time.h>
static double cli_now_t(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void acquire_one(struct kvt_pager *p, kvt_seq_t s, unsigned layer, uint32_t idx)
{
	struct kvt_batch *b;
	struct kvt_view v;

	CHECK_EQ(kvt_acquire(p, s, layer, &idx, 1, &b), 0);
	CHECK_EQ(kvt_batch_next(b, &v), 1);
	CHECK_EQ(v.page, idx);
	CHECK_EQ(kvt_batch_next(b, &v), 0);
	kvt_batch_release(b);
}

/* Record a decode with the live pager; returns 0, or 77 to skip. */
static int record(const char *path, const char *policy, unsigned fast, unsigned host,
		  unsigned nvme, struct kvt_stats *st)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_pager *p;
	kvt_seq_t s;
	float mass[256];

	t_config(&cfg, LAYERS, fast, host, nvme);
	for (int ti = 0; ti < KVT_NTIERS; ti++) {
		/* an absent tier (0 frames) keeps lru: a policy may refuse 0 */
		snprintf(cfg.tier[ti].policy, sizeof(cfg.tier[ti].policy), "%s",
			 ti == KVT_TIER_NVME && !nvme ? "lru" : policy);
		cfg.tier[ti].wm_min = cfg.tier[ti].wm_low = cfg.tier[ti].wm_high = 0;
	}
	cfg.prefetch_depth = 0;
	cfg.host_in_place = 0;
	p = t_open(&cfg, &dev);
	CHECK_EQ(kvt_pager_trace_start(p, path), 0);
	CHECK_EQ(kvt_seq_open(p, &s), 0);
	t_append(p, s, &cfg, 7, 0, PREFILL);
	for (unsigned step = 0; step < STEPS; step++) {
		kvt_pager_step(p);
		t_append(p, s, &cfg, 7, PREFILL + step, 1);
		for (unsigned l = 0; l < LAYERS; l++) {
			uint32_t n = (uint32_t)kvt_seq_pages(p, s, l);
			for (uint32_t i = 0; i < n; i++) {
				/* the first two pages, a random half of the rest, a
				 * skewed few more often, and the tail */
				uint64_t r = i + 1 < n ? rnd() : 1;
				if (i < 2 || (r & 1) || (i % 5 == 0 && (r & 6)))
					acquire_one(p, s, l, i);
			}
			acquire_one(p, s, l, 0);	/* again: a lookup, not an access */
			for (uint32_t i = 0; i < n && i < 256; i++)
				mass[i] = (float)(rnd() % 1000) / 1000.0f / (float)n;
			CHECK_EQ(kvt_seq_score(p, s, l, mass, n < 256 ? n : 256), 0);
		}
	}
	double t0 = cli_now_t();
	CHECK_EQ(kvt_pager_trace_stop(p), 0);
	if (getenv("T_VERBOSE"))
		fprintf(stderr, "stop %.3f\n", cli_now_t() - t0);
	CHECK_EQ(kvt_pager_stats(p, st), 0);
	t_check_inv(p);
	kvt_seq_close(p, s);
	t_close(p, dev);
	return 0;
}

static int replay(const char *path, const char *policy, unsigned ntiers,
		  const struct kvt_stats *st)
{
	struct kvt_sim_trace t;
	struct kvt_sim_config c;
	struct kvt_sim_result r;
	char err[512];
	int bad = 0;

	if (kvt_sim_trace_kvt(path, &t, err, sizeof(err))) {
		fprintf(stderr, "%s\n", err);
		CHECK(0);
	}
	CHECK_EQ(t.gaps, 0);
	CHECK_EQ(t.hdr.source, KVT_SRC_PAGER);
	kvt_sim_config_trace(&c, &t);
	CHECK_EQ(c.ntiers, ntiers);
	CHECK(!strcmp(c.tier[0].policy, policy));
	CHECK(t.config && strstr(t.config, "[tier.fast]"));
	for (unsigned ti = 0; ti < ntiers; ti++)
		CHECK(!c.tier[ti].wm_min && !c.tier[ti].wm_low && !c.tier[ti].wm_high);
	CHECK_EQ(kvt_sim_run(&c, &t, &r, err, sizeof(err)), 0);
	for (unsigned ti = 0; ti < ntiers; ti++) {
		const struct kvt_tier_stats *l = &st->tier[ti];
		const struct kvt_sim_tier_result *x = &r.tier[ti];
		/* The trace says what the live pager counted... */
		CHECK_EQ(t.live.hits[ti], l->hits);
		CHECK_EQ(t.live.misses[ti], l->misses);
		/* ...and the replay does it again. */
		if (x->hits != l->hits || x->misses != l->misses ||
		    x->promotions != l->promotions || x->demotions != l->demotions ||
		    x->drops != l->drops) {
			fprintf(stderr, "%s, %u tiers, %s: live hits %llu misses %llu promoted %llu "
				"demoted %llu dropped %llu; replay %llu %llu %llu %llu %llu\n", policy,
				ntiers, kvt_tier_name((int)ti), (unsigned long long)l->hits,
				(unsigned long long)l->misses, (unsigned long long)l->promotions,
				(unsigned long long)l->demotions, (unsigned long long)l->drops,
				(unsigned long long)x->hits, (unsigned long long)x->misses,
				(unsigned long long)x->promotions, (unsigned long long)x->demotions,
				(unsigned long long)x->drops);
			bad = 1;
		}
		CHECK_EQ(x->bytes_in, l->bytes_in);
		CHECK_EQ(x->bytes_out, l->bytes_out);
	}
	CHECK_EQ(r.refused, 0);
	CHECK_EQ(r.origin_reads, 0);	/* every page was made by a NEW */
	CHECK(r.tier[0].misses > 100);	/* the tiers were under pressure */
	if (ntiers == 3)		/* pages came up from NVMe through host */
		CHECK(r.tier[2].hits > 50 && r.tier[1].promotions > 50 && r.tier[1].demotions > 50);
	kvt_sim_trace_free(&t);
	return bad;
}

int main(void)
{
	char dir[] = "/tmp/kvt-t_replay-XXXXXX", path[64];
	int failed = 0, ran = 0;

	CHECK(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/trace.kvt", dir);
	for (const struct kvt_policy_ops *const *o = kvt_policies; *o; o++) {
		if ((*o)->flags & KVT_POLICY_OFFLINE)
			continue;	/* the pager refuses them */
		if (getenv("T_POLICY") && strcmp(getenv("T_POLICY"), (*o)->name))
			continue;
		struct kvt_stats st;
		/* Two tiers: 12 fast frames (4 hold tails), 120 host frames for
		 * the 4 x 16 pages; then three, with a host tier of 24. */
		double t0 = cli_now_t();
		record(path, (*o)->name, 12, 120, 0, &st);
		if (getenv("T_VERBOSE"))
			fprintf(stderr, "record %.3f\n", cli_now_t() - t0);
		failed |= replay(path, (*o)->name, 2, &st);
		record(path, (*o)->name, 12, 24, 96, &st);
		failed |= replay(path, (*o)->name, 3, &st);
		ran++;
		if (getenv("T_VERBOSE"))
			fprintf(stderr, "%s ok\n", (*o)->name);
	}
	unlink(path);
	rmdir(dir);
	CHECK(ran >= 10 || getenv("T_POLICY"));
	if (failed)
		return 1;
	printf("t_replay: %d policies, live and replay equal\n", ran);
	return 0;
}
