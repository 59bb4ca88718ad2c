/* SPDX-License-Identifier: MIT */
/*
 * Policies rank the pages of one tier; they own nothing else. A policy sees
 * page keys and its own per-page metadata, never memory, I/O or locks, so
 * the same object runs in the live pager and in a simulator.
 *
 * The tier owns the metadata: meta_size bytes per resident page, zeroed
 * before on_insert, stable until on_remove. Keys are opaque to the policy.
 * The caller serialises all calls on one state.
 */
#ifndef KVT_PAGER_POLICY_H
#define KVT_PAGER_POLICY_H

#include <stddef.h>
#include <stdint.h>

struct kvt_policy_ops {
	const char *name;
	size_t meta_size;		/* bytes per page for the policy */
	/* params: the text after "name:" ("key=value,..."), or "" */
	int    (*init)(void **state, const char *params, size_t capacity);
	void   (*destroy)(void *state);
	/* A page entered the tier. */
	void   (*on_insert)(void *state, uint64_t key, void *meta);
	/* A page was used; called at most once per page per step. */
	void   (*on_access)(void *state, uint64_t key, void *meta,
			    uint64_t step, float score);
	/* A page left the tier. */
	void   (*on_remove)(void *state, uint64_t key, void *meta);
	/* Up to want keys to evict, best first, skipping keys for which
	 * pinned(arg, key) is true. Only looks: it does not evict; the caller
	 * calls on_remove for each page it really removes. May move internal
	 * cursors (clock hand) and clear reference bits. Returns the count. */
	size_t (*victims)(void *state, uint64_t *out, size_t want,
			  int (*pinned)(void *arg, uint64_t key), void *arg);
};

/* Look a policy up by the name in spec ("lru" or "lru:key=value"). */
const struct kvt_policy_ops *kvt_policy_find(const char *spec);
/* The params part of spec ("" when there is none). */
const char *kvt_policy_params(const char *spec);
/* NULL-terminated list of the built-in policies. */
extern const struct kvt_policy_ops *const kvt_policies[];

extern const struct kvt_policy_ops kvt_policy_lru;
extern const struct kvt_policy_ops kvt_policy_clock;
extern const struct kvt_policy_ops kvt_policy_mru;
extern const struct kvt_policy_ops kvt_policy_lifo;
extern const struct kvt_policy_ops kvt_policy_fifo;
extern const struct kvt_policy_ops kvt_policy_lfu;
extern const struct kvt_policy_ops kvt_policy_sieve;
extern const struct kvt_policy_ops kvt_policy_s3fifo;
extern const struct kvt_policy_ops kvt_policy_2q;
extern const struct kvt_policy_ops kvt_policy_slru;
extern const struct kvt_policy_ops kvt_policy_arc;

#endif
