/* SPDX-License-Identifier: MIT */
/*
 * Short NVMe reads (every second read request comes back with half its
 * bytes) are retried by the I/O path: with every page on NVMe, two full
 * passes read every page back bit-exact, nothing is lost, no error is
 * counted, and stats.short_ios counts the retries.
 */
#include <errno.h>
#include <time.h>
#include "common.h"
#include "pager/internal.h"

#define LAYERS	2u
#define NPG	60u
#define SEED	31u

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

int main(void)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_stats st;
	struct kvt_pager *p;
	kvt_seq_t s;

	/* The host tier holds everything, so each page is read once a pass. */
	t_config(&cfg, LAYERS, 4, 2 * LAYERS * NPG, 4 * NPG);
	cfg.prefetch_depth = 0;
	p = t_open(&cfg, &dev);
	CHECK_EQ(kvt_seq_open(p, &s), 0);
	t_append(p, s, &cfg, SEED, 0, NPG * cfg.page_tokens);

	struct kvt_fault f = { .short_every = 2 };
	for (int round = 0; round < 2; round++) {
		CHECK_EQ(kvt_pager_drain(p, KVT_TIER_FAST), 0);
		CHECK_EQ(kvt_pager_drain(p, KVT_TIER_HOST), 0);
		CHECK_EQ(kvt_pager_stats(p, &st), 0);
		CHECK_EQ(st.tier[KVT_TIER_NVME].used, LAYERS * NPG);
		uint64_t short0 = st.short_ios, out0 = st.tier[KVT_TIER_NVME].bytes_out;

		set_fault(p, &f);
		kvt_pager_step(p);
		CHECK_EQ(t_verify_seq(p, s, &cfg, SEED, 0), LAYERS * NPG);
		set_fault(p, NULL);

		CHECK_EQ(kvt_pager_stats(p, &st), 0);
		fprintf(stderr, "round %d: short_ios %llu, pages read %llu\n", round,
			(unsigned long long)(st.short_ios - short0),
			(unsigned long long)((st.tier[KVT_TIER_NVME].bytes_out - out0) /
					     st.tier[KVT_TIER_NVME].frame_bytes));
		CHECK(st.short_ios > short0);
		CHECK_EQ(st.tier[KVT_TIER_NVME].bytes_out - out0, LAYERS * NPG * kvt_pager_page_bytes(p));
		CHECK_EQ(st.lost_pages, 0);
		CHECK_EQ(st.io_errors, 0);
		CHECK_EQ(st.csum_failures, 0);
		check_inv(p);
	}

	CHECK_EQ(kvt_seq_close(p, s), 0);
	quiesce(p);	/* pages closed while in flight are freed as they land */
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK_EQ(st.pages, 0);
	for (int t = 0; t < KVT_NTIERS; t++)
		CHECK_EQ(st.tier[t].used, 0);
	t_close(p, dev);
	return 0;
}
