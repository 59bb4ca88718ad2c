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

/* What the caller knows of one reference to a page. A field it does not
 * know holds KVT_REF_NONE (the u32 fields), KVT_NEVER (next) or 0 (score). */
#define KVT_REF_NONE	UINT32_MAX
#define KVT_NEVER	UINT64_MAX

struct kvt_ref {
	uint64_t key;		/* the page, opaque */
	uint64_t time;		/* references counted so far, all tiers: a clock */
	uint64_t step;		/* decode step */
	uint64_t next;		/* time of the key's next reference: only offline
				 * replays know it (belady); KVT_NEVER otherwise */
	uint32_t seq;		/* sequence that created the page */
	uint32_t layer;		/* its layer */
	uint32_t index;		/* its index in the layer's page table */
	float	 score;		/* attention mass on the page in this step */
};

enum kvt_policy_flag {
	KVT_POLICY_OFFLINE = 1,		/* needs kvt_ref.next: replays only */
};

struct kvt_policy_ops {
	const char *name;
	size_t meta_size;		/* bytes per page for the policy */
	unsigned flags;			/* enum kvt_policy_flag */
	/* params: the text after "name:" ("key=value,..."), or "" */
	int    (*init)(void **state, const char *params, size_t capacity);
	void   (*destroy)(void *state);
	/* A page entered the tier; r describes it and the reference that
	 * brought it (r->next as for on_access). */
	void   (*on_insert)(void *state, const struct kvt_ref *r, void *meta);
	/* A resident page was used; called at most once per page per step. */
	void   (*on_access)(void *state, const struct kvt_ref *r, void *meta);
	/* Optional: the attention mass r->score that the page carried in
	 * step r->step, reported after the step's attention. */
	void   (*on_score)(void *state, const struct kvt_ref *r, void *meta);
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

/* The built-in policies: the build lists every file under pager/policy/
 * that defines a `const struct kvt_policy_ops kvt_policy_NAME`. */
#define KVT_POLICY(sym) extern const struct kvt_policy_ops sym;
#include "policies.h"
#undef KVT_POLICY

#endif
