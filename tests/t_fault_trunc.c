/* SPDX-License-Identifier: MIT */
/*
 * The NVMe file shrinks under the pager (truncated to zero while every
 * page's only copy is there): each read comes back empty, the page is
 * lost (-EIO), and kvt_pager_last_error says why in words: a short read
 * (-ENODATA), tier nvme, the page and its offset, not "Input/output
 * error".
 */
#include <errno.h>
#include <unistd.h>

#include "fault_common.h"

#define LAYERS	2u
#define NPG	8u
#define SEED	5u

int main(void)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_stats st;
	struct kvt_pager_error e;
	kvt_seq_t s;
	char line[256], want[96];
	unsigned lost = 0;

	t_config(&cfg, LAYERS, 4, 4, 4 * NPG);
	struct kvt_pager *p = fault_open_filled(&cfg, &dev, &s, SEED, NPG);

	CHECK_EQ(kvt_pager_last_error(p, &e, line, sizeof(line)), 0);
	CHECK_EQ(e.cause, 0);
	CHECK_EQ(line[0], 0);
	fault_push_to_nvme(p, LAYERS * NPG, &st);
	/* No transfer runs now (quiesced): the file can go. */
	t_quiesce_locked(p);
	if (ftruncate(kvt_nvme_fd(p->nvme), 0))
		SKIP("the NVMe tier is not a file that can be truncated: %s", strerror(errno));
	pthread_mutex_unlock(&p->lock);

	kvt_pager_step(p);
	for (unsigned l = 0; l < LAYERS; l++) {
		struct kvt_batch *b;
		struct kvt_view v;
		int r;

		CHECK_EQ(kvt_acquire(p, s, l, NULL, 0, &b), 0);
		while ((r = kvt_batch_next(b, &v)) != 0) {
			CHECK_EQ(r, -EIO);
			lost++;
		}
		kvt_batch_release(b);
	}
	CHECK_EQ(lost, LAYERS * NPG);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK_EQ(st.lost_pages, lost);
	CHECK_EQ(st.csum_failures, 0);

	CHECK_EQ(kvt_pager_last_error(p, &e, line, sizeof(line)), -ENODATA);
	fprintf(stderr, "last error: %s\n", line);
	CHECK_EQ(e.tier, KVT_TIER_NVME);
	CHECK_EQ(e.count, lost);
	CHECK(e.layer < LAYERS && e.index < NPG);
	CHECK_EQ(e.offset % p->t[KVT_TIER_NVME].stride, 0);
	CHECK(e.offset < (uint64_t)p->t[KVT_TIER_NVME].nframes * p->t[KVT_TIER_NVME].stride);
	CHECK(strstr(line, "short read"));
	CHECK(strstr(line, "tier nvme"));
	snprintf(want, sizeof(want), "at offset %llu ", (unsigned long long)e.offset);
	CHECK(strstr(line, want));
	/* A short buffer gets the start of the line, terminated. */
	CHECK_EQ(kvt_pager_last_error(p, NULL, want, 8), -ENODATA);
	CHECK(!strncmp(want, line, 7) && !want[7]);

	fault_close_empty(p, s, &st);
	t_close(p, dev);
	return 0;
}
