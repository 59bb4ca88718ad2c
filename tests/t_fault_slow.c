/* SPDX-License-Identifier: MIT */
/*
 * Slow NVMe completions (each delayed 2 ms): every page still reads back
 * bit-exact, nothing is lost, and the NVMe tier's latency stats show it:
 * io_ns_max >= 2 ms and every read made under the fault lands in a
 * latency bucket of >= 1024 us. Then very slow ones (150 ms, more than
 * any wait inside the pager) with a batch twice the fast tier: every page
 * is still served, none reported -ENOSPC.
 */
#include <errno.h>
#include <time.h>
#include "common.h"
#include "pager/internal.h"

#define LAYERS	2u
#define NPG	30u
#define SEED	37u
#define SLOW_US	2000u
#define VERY_SLOW_US 150000u
#define FAST	4u	/* fast tier pages */

static void check_inv(struct kvt_pager *p)
{
	char err[256];

	pthread_mutex_lock(&p->lock);
	int r = kvt_pager_check(p, err, sizeof(err));
	pthread_mutex_unlock(&p->lock);
	if (r) {
		fprintf(stderr, "invariant: %s\n", err);
		exit(1);
	}
}

/* Wait until no page is MOVING (lock held on return): the migration
 * thread is then outside any transfer, and pages freed while in flight
 * have been freed. */
static void quiesce_locked(struct kvt_pager *p)
{
	pthread_mutex_lock(&p->lock);
	for (;;) {
		int moving = 0;
		for (uint32_t s = 0; s < p->npages && !moving; s++)
			moving = p->pages[s].state == P_MOVING;
		if (!moving)
			break;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 10000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&p->done, &p->lock, &ts);
	}
}

static void quiesce(struct kvt_pager *p)
{
	quiesce_locked(p);
	pthread_mutex_unlock(&p->lock);
}

/* Set the fault while the migration thread is outside kvt_nvme_run (the
 * NVMe handle has no lock of its own). */
static void set_fault(struct kvt_pager *p, const struct kvt_fault *f)
{
	quiesce_locked(p);
	kvt_nvme_set_fault(p->nvme, f);
	pthread_mutex_unlock(&p->lock);
}

/* Completions in buckets of >= 2^10 us (bucket b holds us < 2^b). */
static uint64_t slow_count(const struct kvt_tier_stats *t)
{
	uint64_t n = 0;
	for (int b = 11; b < KVT_LAT_BUCKETS; b++)
		n += t->lat_hist[b];
	return n;
}

int main(void)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_stats st;
	struct kvt_pager *p;
	kvt_seq_t s;

	/* The host tier holds everything: each page is read exactly once. */
	t_config(&cfg, LAYERS, FAST, 2 * LAYERS * NPG, 4 * NPG);
	cfg.prefetch_depth = 0;
	p = t_open(&cfg, &dev);
	CHECK_EQ(kvt_seq_open(p, &s), 0);
	t_append(p, s, &cfg, SEED, 0, NPG * cfg.page_tokens);
	CHECK_EQ(kvt_pager_drain(p, KVT_TIER_FAST), 0);
	CHECK_EQ(kvt_pager_drain(p, KVT_TIER_HOST), 0);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK_EQ(st.tier[KVT_TIER_NVME].used, LAYERS * NPG);
	struct kvt_tier_stats before = st.tier[KVT_TIER_NVME];

	struct kvt_fault f = { .slow_us = SLOW_US };
	set_fault(p, &f);
	kvt_pager_step(p);
	CHECK_EQ(t_verify_seq(p, s, &cfg, SEED, 0), LAYERS * NPG);
	set_fault(p, NULL);

	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	const struct kvt_tier_stats *nv = &st.tier[KVT_TIER_NVME];
	uint64_t reads = (nv->bytes_out - before.bytes_out) / nv->frame_bytes;
	fprintf(stderr, "reads %llu, io_ns_max %llu, slow completions %llu\n",
		(unsigned long long)reads, (unsigned long long)nv->io_ns_max,
		(unsigned long long)(slow_count(nv) - slow_count(&before)));
	CHECK_EQ(reads, LAYERS * NPG);
	CHECK(nv->io_ns_max >= (uint64_t)SLOW_US * 1000);
	CHECK(nv->io_count >= before.io_count + reads);
	CHECK(slow_count(nv) - slow_count(&before) >= reads);
	CHECK(nv->io_ns_total - before.io_ns_total >= reads * SLOW_US * 1000);
	CHECK_EQ(st.lost_pages, 0);
	CHECK_EQ(st.io_errors + st.csum_failures, 0);
	check_inv(p);

	/* Fault gone: still right. */
	kvt_pager_step(p);
	CHECK_EQ(t_verify_seq(p, s, &cfg, SEED, 0), LAYERS * NPG);

	/* Very slow completions (longer than any internal wait) and a batch
	 * larger than the fast tier: it comes up in rounds, and every page is
	 * still served; slowness is no reason to report -ENOSPC. */
	CHECK_EQ(kvt_pager_drain(p, KVT_TIER_FAST), 0);
	CHECK_EQ(kvt_pager_drain(p, KVT_TIER_HOST), 0);
	f.slow_us = VERY_SLOW_US;
	set_fault(p, &f);
	kvt_pager_step(p);
	{
		uint32_t idx[2 * FAST];
		struct kvt_batch *b;
		struct kvt_view v;
		unsigned got = 0;
		int r;
		for (unsigned i = 0; i < 2 * FAST; i++)
			idx[i] = 3 * i;		/* not neighbours: no coalescing */
		CHECK_EQ(kvt_acquire(p, s, 1, idx, 2 * FAST, &b), 0);
		while ((r = kvt_batch_next(b, &v)) != 0) {
			if (r != 1) {
				fprintf(stderr, "very slow: page %u: %s\n", v.page, strerror(-r));
				exit(1);
			}
			CHECK(t_check_view(&cfg, SEED, 1, &v) == 0);
			got++;
		}
		CHECK_EQ(got, 2 * FAST);
		kvt_batch_release(b);
	}
	set_fault(p, NULL);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK(st.tier[KVT_TIER_NVME].io_ns_max >= (uint64_t)VERY_SLOW_US * 1000);
	CHECK_EQ(st.lost_pages, 0);
	check_inv(p);

	CHECK_EQ(kvt_seq_close(p, s), 0);
	quiesce(p);	/* pages closed while in flight are freed as they land */
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK_EQ(st.pages, 0);
	for (int t = 0; t < KVT_NTIERS; t++)
		CHECK_EQ(st.tier[t].used, 0);
	t_close(p, dev);
	return 0;
}
