/* SPDX-License-Identifier: MIT */
/*
 * Disk full: every NVMe write completes with -ENOSPC. Demoting the host
 * tier then fails, keeps every page where it is, pauses demotion to NVMe
 * (stats.nvme_paused, stats.enospc) and loses nothing: every page still
 * reads back bit-exact. With the fault cleared and the pause (100 ms) over,
 * draining the host tier again takes the pages down to NVMe, and they
 * still read back intact.
 */
#include <errno.h>
#include <time.h>
#include <unistd.h>
#include "common.h"
#include "pager/internal.h"

#define LAYERS	2u
#define NPG	50u	/* full pages per layer: 100 pages */
#define SEED	23u

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

	t_config(&cfg, LAYERS, 8, 200, 256);
	p = t_open(&cfg, &dev);
	CHECK_EQ(kvt_seq_open(p, &s), 0);

	struct kvt_fault f = { .enospc_every = 1 };
	set_fault(p, &f);
	t_append(p, s, &cfg, SEED, 0, NPG * cfg.page_tokens);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK_EQ(st.tier[KVT_TIER_NVME].used, 0);
	CHECK_EQ(st.tier[KVT_TIER_FAST].used + st.tier[KVT_TIER_HOST].used, LAYERS * NPG);

	/* Force demotion to NVMe: every write fails. */
	int r = kvt_pager_drain(p, KVT_TIER_HOST);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	fprintf(stderr, "drain(host) with the disk full: %d (%s), host used %llu, enospc %llu\n",
		r, r ? strerror(-r) : "ok", (unsigned long long)st.tier[KVT_TIER_HOST].used,
		(unsigned long long)st.enospc);
	CHECK(r < 0 || st.tier[KVT_TIER_HOST].used > 0);
	CHECK(st.enospc >= 1);
	CHECK_EQ(st.nvme_paused, 1);
	CHECK_EQ(st.lost_pages, 0);
	CHECK_EQ(st.tier[KVT_TIER_NVME].used, 0);
	CHECK_EQ(st.tier[KVT_TIER_FAST].used + st.tier[KVT_TIER_HOST].used, LAYERS * NPG);
	CHECK_EQ(st.pages, LAYERS * NPG);
	check_inv(p);

	/* Nothing lost: every page reads back (the fast tier's pages go down
	 * to the host tier on the way, no NVMe write needed). */
	kvt_pager_step(p);
	CHECK_EQ(t_verify_seq(p, s, &cfg, SEED, 0), LAYERS * NPG);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK_EQ(st.lost_pages, 0);
	CHECK_EQ(st.tier[KVT_TIER_NVME].used, 0);
	check_inv(p);

	/* Disk has room again; after the pause the pages go down. */
	set_fault(p, NULL);
	usleep(150 * 1000);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK_EQ(st.nvme_paused, 0);
	uint64_t enospc = st.enospc;
	CHECK_EQ(kvt_pager_drain(p, KVT_TIER_HOST), 0);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK_EQ(st.enospc, enospc);
	CHECK_EQ(st.tier[KVT_TIER_HOST].used, 0);
	CHECK(st.tier[KVT_TIER_NVME].used > 0);
	CHECK_EQ(st.tier[KVT_TIER_FAST].used + st.tier[KVT_TIER_NVME].used, LAYERS * NPG);
	CHECK_EQ(st.lost_pages, 0);
	check_inv(p);

	kvt_pager_step(p);
	CHECK_EQ(t_verify_seq(p, s, &cfg, SEED, 0), LAYERS * NPG);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK_EQ(st.lost_pages, 0);
	CHECK_EQ(st.csum_failures + st.io_errors, 0);
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
