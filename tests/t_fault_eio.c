/* SPDX-License-Identifier: MIT */
/*
 * A failed NVMe read loses exactly that page: every page of a sequence is
 * pushed to NVMe, reads are made to fail (every Nth completes with -EIO,
 * or, built as t_fault_flip, every Nth has one bit flipped so that its
 * XXH3 check fails), and every page is acquired.
 *  - the pages whose reads failed, and only they, come back as -EIO
 *    (view.page naming them), every other page is bit-exact;
 *  - stats: lost_pages == the number of -EIO pages == one in N of the
 *    reads made, io_errors (EIO) or csum_failures (flip) count them;
 *  - the invariant check passes;
 *  - lost is permanent: with the fault cleared a second pass reports the
 *    same pages -EIO and serves the rest;
 *  - closing the sequence frees everything, lost pages included.
 */
#include <errno.h>
#include <unistd.h>

#include "fault_common.h"

#ifndef FAULT_FLIP
#define FAULT_FLIP 0
#endif

#define LAYERS	2u
#define NPG	60u	/* full pages per layer */
#define EVERY	5u	/* every EVERY-th read fails */
#define SEED	11u

/* Acquire every page of every layer. lost[l][i] is set for -EIO pages.
 * Every page must come out exactly once, as data (checked) or -EIO. */
static unsigned pass(struct kvt_pager *p, kvt_seq_t s, const struct kvt_config *cfg,
		     uint8_t lost[LAYERS][NPG])
{
	unsigned nlost = 0;

	for (unsigned l = 0; l < LAYERS; l++) {
		uint8_t seen[NPG] = { 0 };
		struct kvt_batch *b;
		struct kvt_view v;
		int r;

		CHECK_EQ(kvt_acquire(p, s, l, NULL, 0, &b), 0);
		while ((r = kvt_batch_next(b, &v)) != 0) {
			CHECK(v.page < NPG);
			CHECK(!seen[v.page]);
			seen[v.page] = 1;
			if (r == -EIO) {
				CHECK(v.k == NULL && v.v == NULL);
				lost[l][v.page] = 1;
				nlost++;
				continue;
			}
			if (r != 1) {
				fprintf(stderr, "layer %u page %u: %s\n", l, v.page, strerror(-r));
				exit(1);
			}
			CHECK_EQ(v.ntok, cfg->page_tokens);
			CHECK(t_check_view(cfg, SEED, l, &v) == 0);
		}
		kvt_batch_release(b);
		for (unsigned i = 0; i < NPG; i++)
			CHECK(seen[i]);
	}
	return nlost;
}

/* The pages marked lost in the pager are exactly those reported. */
static void check_lost_state(struct kvt_pager *p, kvt_seq_t h, uint8_t lost[LAYERS][NPG])
{
	pthread_mutex_lock(&p->lock);
	struct seq *q = p->seqs[h & 0xffffff];
	for (unsigned l = 0; l < LAYERS; l++) {
		CHECK_EQ(q->lt[l].n, NPG);
		for (unsigned i = 0; i < NPG; i++) {
			int is_lost = p->pages[q->lt[l].pg[i]].state == P_LOST;
			if (is_lost != lost[l][i]) {
				fprintf(stderr, "layer %u page %u: state lost %d, reported -EIO %d\n",
					l, i, is_lost, lost[l][i]);
				exit(1);
			}
		}
	}
	pthread_mutex_unlock(&p->lock);
}

/*
 * kvt_pager_last_error names the last page lost: one of those reported,
 * the cause (checksum mismatch for a flip, the read's -EIO otherwise),
 * tier nvme and the offset of the page's copy there: what the file holds
 * at that offset is that page's data (a flip happens in memory, after the
 * read), so the offset is checked by reading it.
 */
static void check_last_error(struct kvt_pager *p, const struct kvt_config *cfg,
			     uint8_t lost[LAYERS][NPG], unsigned nlost)
{
	struct kvt_pager_error e;
	char line[256], want[128];
	size_t stride = p->t[KVT_TIER_NVME].stride;
	void *buf;

	CHECK_EQ(kvt_pager_last_error(p, &e, line, sizeof(line)), FAULT_FLIP ? -EBADMSG : -EIO);
	fprintf(stderr, "last error: %s\n", line);
	CHECK_EQ(e.cause, FAULT_FLIP ? -EBADMSG : -EIO);
	CHECK_EQ(e.tier, KVT_TIER_NVME);
	CHECK_EQ(e.count, nlost);
	CHECK(e.layer < LAYERS && e.index < NPG && lost[e.layer][e.index]);
	CHECK_EQ(e.bytes, p->page_bytes);
	CHECK_EQ(e.offset % stride, 0);
	CHECK(strstr(line, FAULT_FLIP ? "checksum mismatch" : "Input/output error"));
	CHECK(strstr(line, "tier nvme"));
	snprintf(want, sizeof(want), "at offset %llu ", (unsigned long long)e.offset);
	CHECK(strstr(line, want));
	snprintf(want, sizeof(want), "page %u (seq %u, layer %u, index %u) lost", e.page, e.seq,
		 e.layer, e.index);
	CHECK(strstr(line, want));

	CHECK_EQ(posix_memalign(&buf, 4096, stride), 0);
	CHECK_EQ(pread(kvt_nvme_fd(p->nvme), buf, stride, (off_t)e.offset), (ssize_t)stride);
	struct kvt_device *dev = t_dev;
	struct kvt_view v = { .k = buf, .v = (char *)buf + p->half, .page = e.index,
			      .ntok = cfg->page_tokens, .tier = KVT_TIER_NVME };
	t_dev = NULL;		/* buf is host memory */
	CHECK(t_check_view(cfg, SEED, e.layer, &v) == 0);
	t_dev = dev;
	free(buf);
}

int main(void)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_stats st;
	kvt_seq_t s;
	static uint8_t lost1[LAYERS][NPG], lost2[LAYERS][NPG];

	t_config(&cfg, LAYERS, 4, 4, 4 * NPG);
	struct kvt_pager *p = fault_open_filled(&cfg, &dev, &s, SEED, NPG);	/* all sealed */

	/* Everything down to NVMe, the only copy of every page. */
	fault_push_to_nvme(p, LAYERS * NPG, &st);
	CHECK_EQ(st.tier[KVT_TIER_FAST].used, 0);
	CHECK_EQ(st.tier[KVT_TIER_HOST].used, 0);
	CHECK_EQ(st.lost_pages, 0);
	CHECK_EQ(st.io_errors + st.csum_failures, 0);
	t_check_inv(p);

	struct kvt_fault f = { 0 };
	if (FAULT_FLIP)
		f.flip_every = EVERY;
	else
		f.eio_every = EVERY;
	struct kvt_tier_stats nv0 = st.tier[KVT_TIER_NVME];
	fault_set(p, &f);
	kvt_pager_step(p);
	unsigned n1 = pass(p, s, &cfg, lost1);
	fault_set(p, NULL);

	CHECK(n1 >= 1);
	CHECK(n1 < LAYERS * NPG);
	check_lost_state(p, s, lost1);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	fprintf(stderr, "%u of %u pages lost; io_errors %llu csum_failures %llu\n", n1,
		LAYERS * NPG, (unsigned long long)st.io_errors,
		(unsigned long long)st.csum_failures);
	CHECK_EQ(st.lost_pages, n1);
	/* Every page had its only copy on NVMe, so nothing was written during
	 * the pass, and every NVMe transfer (io_count) was a read: exactly one
	 * in EVERY failed, and each failure lost its page. */
	CHECK_EQ(st.tier[KVT_TIER_NVME].bytes_in, nv0.bytes_in);
	uint64_t reads = st.tier[KVT_TIER_NVME].io_count - nv0.io_count;
	CHECK(reads >= LAYERS * NPG);
	CHECK_EQ(n1, reads / EVERY);
	if (FAULT_FLIP) {
		CHECK(st.csum_failures >= 1);
		CHECK_EQ(st.csum_failures, n1);
		CHECK_EQ(st.io_errors, 0);
	} else {
		CHECK(st.io_errors >= 1);
		CHECK_EQ(st.io_errors, n1);
		CHECK_EQ(st.csum_failures, 0);
	}
	/* Lost pages hold no frame; the others are still somewhere. */
	CHECK_EQ(st.pages, LAYERS * NPG);
	t_check_inv(p);
	check_last_error(p, &cfg, lost1, n1);

	/* Lost is permanent; the rest is served, from any tier. */
	kvt_pager_step(p);
	unsigned n2 = pass(p, s, &cfg, lost2);
	CHECK_EQ(n2, n1);
	CHECK(memcmp(lost1, lost2, sizeof(lost1)) == 0);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK_EQ(st.lost_pages, n1);
	t_check_inv(p);

	/* And once more with everything pushed down again first. */
	t_drain_to_nvme(p);
	memset(lost2, 0, sizeof(lost2));
	CHECK_EQ(pass(p, s, &cfg, lost2), n1);
	CHECK(memcmp(lost1, lost2, sizeof(lost1)) == 0);
	t_check_inv(p);

	fault_close_empty(p, s, &st);
	CHECK_EQ(st.seqs, 0);
	CHECK_EQ(st.lost_pages, n1);
	t_check_inv(p);
	t_close(p, dev);
	return 0;
}
