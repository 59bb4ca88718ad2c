/* SPDX-License-Identifier: MIT */
/*
 * Where pages go on NVMe. Two sequences are appended in small chunks, every
 * layer per chunk (as a prefill writes them), so pages of different layers
 * and sequences come down interleaved. Parked, each run of page indices
 * the size of io.max_io_bytes (an extent) must sit in consecutive frames
 * in index order, so that reading a layer back coalesces. With an NVMe
 * tier exactly as large as the pages (no room for whole extents at the
 * end), everything must still fit: placement falls back to any frame.
 * Every page is read back bit-exact, the invariants hold, and the stats
 * count the reads, 1.5 pages each or more.
 */
#include <errno.h>
#include "common.h"
#include "pager/internal.h"

#define LAYERS	3u
#define EXT	8u		/* pages per extent: max_io_bytes / page */
#define CHUNK	3u		/* pages appended per layer at a time */
#define NPG	37u		/* pages per layer and sequence (partial last extent) */

/* Pages of (s, layer) whose frame does not follow its extent's first. */
static unsigned misplaced(struct kvt_pager *p, kvt_seq_t h, unsigned layer)
{
	const struct layer_tab *lt = &p->seqs[h & 0xffffff]->lt[layer];
	unsigned bad = 0;

	pthread_mutex_lock(&p->lock);
	CHECK_EQ(lt->n, NPG);
	for (uint32_t i = 0; i < lt->n; i++) {
		uint32_t f = p->pages[lt->pg[i]].frame[KVT_TIER_NVME];
		uint32_t f0 = p->pages[lt->pg[i - i % EXT]].frame[KVT_TIER_NVME];
		CHECK(f != NO_FRAME);
		bad += f != f0 + i % EXT;
	}
	pthread_mutex_unlock(&p->lock);
	return bad;
}

static void run(unsigned nvme_pages, int exact)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	kvt_seq_t s[2];

	t_config(&cfg, LAYERS, 8, 16, nvme_pages);
	cfg.max_io_bytes = EXT * kvt_config_page_bytes(&cfg);
	struct kvt_pager *p = t_open(&cfg, &dev);
	CHECK_EQ(p->extent, EXT);
	for (int i = 0; i < 2; i++)
		CHECK_EQ(kvt_seq_open(p, &s[i]), 0);
	for (unsigned pg = 0; pg < NPG; pg += CHUNK) {
		unsigned n = NPG - pg < CHUNK ? NPG - pg : CHUNK;
		for (int i = 0; i < 2; i++)
			t_append(p, s[i], &cfg, 100 + (unsigned)i, pg * cfg.page_tokens,
				 n * cfg.page_tokens);
	}
	for (int i = 0; i < 2; i++)
		CHECK_EQ(kvt_seq_park(p, s[i]), 0);
	t_quiesce(p);
	t_check_inv(p);

	unsigned bad = 0;
	for (int i = 0; i < 2; i++)
		for (unsigned l = 0; l < LAYERS; l++)
			bad += misplaced(p, s[i], l);
	fprintf(stderr, "nvme %u pages: %u of %u pages out of extent order\n", nvme_pages, bad,
		2 * LAYERS * NPG);
	if (!exact)
		CHECK_EQ(bad, 0);
	struct kvt_stats a, b;
	CHECK_EQ(kvt_pager_stats(p, &a), 0);
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(kvt_seq_resume(p, s[i]), 0);
		CHECK_EQ(t_verify_seq(p, s[i], &cfg, 100 + (unsigned)i, 0), LAYERS * NPG);
	}
	t_quiesce(p);
	t_check_inv(p);
	/* Read back: the stats count the coalesced reads. */
	CHECK_EQ(kvt_pager_stats(p, &b), 0);
	uint64_t ops = b.nvme_ops - a.nvme_ops, reqs = b.nvme_reqs - a.nvme_reqs;
	fprintf(stderr, "read back: %llu pages in %llu reads\n", (unsigned long long)reqs,
		(unsigned long long)ops);
	CHECK_EQ(reqs, b.tier[KVT_TIER_NVME].bytes_out / kvt_config_page_bytes(&cfg) -
		       a.tier[KVT_TIER_NVME].bytes_out / kvt_config_page_bytes(&cfg));
	/* Read back through a stage of 8 frames, in runs of at most an
	 * extent: 2.3 to 2.6 pages a read as run, 1.98 under TSan's timing,
	 * where a read of a run cut short by the stage comes more often.
	 * One page a read would be no coalescing at all. */
	if (!exact)
		CHECK(ops > 0 && 2 * reqs >= 3 * ops);
	t_close(p, dev);
}

int main(void)
{
	/* Room for whole extents: every page in place. */
	run(2 * LAYERS * ((NPG + EXT - 1) / EXT * EXT) + 2 * EXT, 0);
	/* Exactly the pages: the last extents do not fit whole. */
	run(2 * LAYERS * NPG, 1);
	return 0;
}
