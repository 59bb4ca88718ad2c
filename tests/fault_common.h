/* SPDX-License-Identifier: MIT */
/* Set-up and tear-down shared by the t_fault_* tests (NVMe fault injection
 * through the pager's internals). */
#ifndef KVT_TESTS_FAULT_COMMON_H
#define KVT_TESTS_FAULT_COMMON_H

#include "common.h"
#include "pager/internal.h"

/* Set (f) or clear (NULL) the NVMe fault with no transfer running (the handle has no lock). */
static inline void fault_set(struct kvt_pager *p, const struct kvt_fault *f)
{
	t_quiesce_locked(p);
	kvt_nvme_set_fault(p->nvme, f);
	pthread_mutex_unlock(&p->lock);
}

/* t_open, then open *s and fill it with npg full (sealed) pages per layer of seed. */
static inline struct kvt_pager *fault_open_filled(const struct kvt_config *cfg,
						  struct kvt_device **dev, kvt_seq_t *s,
						  uint32_t seed, unsigned npg)
{
	struct kvt_pager *p = t_open(cfg, dev);
	CHECK_EQ(kvt_seq_open(p, s), 0);
	t_append(p, *s, cfg, seed, 0, npg * cfg->page_tokens);
	return p;
}

/* Drain everything down to NVMe and check it holds all pages; *st gets the stats. */
static inline void fault_push_to_nvme(struct kvt_pager *p, unsigned pages, struct kvt_stats *st)
{
	t_drain_to_nvme(p);
	CHECK_EQ(kvt_pager_stats(p, st), 0);
	CHECK_EQ(st->tier[KVT_TIER_NVME].used, pages);
}

/* Under fault f, step and read all pages of s back bit-exact; then clear the fault. */
static inline void fault_verify_under(struct kvt_pager *p, kvt_seq_t s,
				      const struct kvt_config *cfg, uint32_t seed,
				      unsigned pages, const struct kvt_fault *f)
{
	fault_set(p, f);
	kvt_pager_step(p);
	CHECK_EQ(t_verify_seq(p, s, cfg, seed, 0), pages);
	fault_set(p, NULL);
}

/* Close s, wait for in-flight pages to land, check no page is left anywhere; *st gets the stats. */
static inline void fault_close_empty(struct kvt_pager *p, kvt_seq_t s, struct kvt_stats *st)
{
	CHECK_EQ(kvt_seq_close(p, s), 0);
	t_quiesce(p);
	CHECK_EQ(kvt_pager_stats(p, st), 0);
	CHECK_EQ(st->pages, 0);
	for (int t = 0; t < KVT_NTIERS; t++)
		CHECK_EQ(st->tier[t].used, 0);
}

#endif
