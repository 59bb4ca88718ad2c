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

/* The layout of struct kvt_policy_ops and the meaning of its calls: a
 * change to either bumps it, and the loader refuses a plug-in built for
 * another (kvt_policy_load). */
#define KVT_POLICY_ABI	1

struct kvt_policy_ops {
	/* A plug-in sets both (.abi = KVT_POLICY_ABI, .size = sizeof(struct
	 * kvt_policy_ops)); the built-in policies, compiled with the library,
	 * may leave them 0. */
	uint32_t abi;			/* KVT_POLICY_ABI the table was built for */
	uint32_t size;			/* sizeof(struct kvt_policy_ops) there */
	const char *name;
	size_t meta_size;		/* bytes per page for the policy */
	unsigned flags;			/* enum kvt_policy_flag */
	/* params: the text after "name:" ("key=value,..."), or "" (NULL
	 * reads as ""). 0, or -EINVAL for params it refuses (or a capacity
	 * it cannot take), with one line in err (errlen bytes; err may be
	 * NULL) that names the key and the values allowed: "small=150: must
	 * be 1..99 (percent of the tier)"; -ENOMEM. */
	int    (*init)(void **state, const char *params, size_t capacity,
		       char *err, size_t errlen);
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

/*
 * Look a policy up by the name in spec ("lru" or "lru:key=value"). A name
 * that contains a '/' is the path of a plug-in, a shared object that
 * exports `const struct kvt_policy_ops kvt_policy` (KVT_POLICY_SYMBOL):
 * "./build/plugins/example.so" or "/opt/p/mine.so:k=1" (the path ends at
 * the first ':', so it cannot hold one). The first look-up of a path
 * dlopen()s it and checks the table; the object then stays loaded for the
 * life of the process (never dlclose()d: states and metadata made by its
 * code may outlive any one user), and later look-ups of the same file
 * return the same table. NULL for an unknown name, an empty name, a NULL
 * spec, or a plug-in refused (see kvt_policy_load for why).
 */
const struct kvt_policy_ops *kvt_policy_find(const char *spec);
/*
 * kvt_policy_find, with the reason for a NULL in err (errlen bytes, always
 * terminated; err may be NULL), worded to follow "SPEC: ": no such policy; a path dlopen() cannot
 * load (dlerror's text); no kvt_policy symbol in it; a table built for
 * another KVT_POLICY_ABI, or smaller than this one's (the message names
 * both ABIs and this library's version); a table with a NULL
 * name, init, destroy, on_insert, on_access, on_remove or victims, flags
 * it does not know, or a name that is empty or holds ':' or '/'; a name
 * already taken by a built-in policy or by a plug-in loaded from another
 * file. Thread-safe.
 */
const struct kvt_policy_ops *kvt_policy_load(const char *spec, char *err, size_t errlen);
/* The params part of spec ("" when there is none). */
const char *kvt_policy_params(const char *spec);

/* What a plug-in exports, and how: a plug-in built with the library's
 * flags (-fvisibility=hidden) marks the table with KVT_POLICY_EXPORT. */
#define KVT_POLICY_SYMBOL	"kvt_policy"
#define KVT_POLICY_EXPORT	__attribute__((visibility("default")))
/* NULL-terminated list of the built-in policies. */
extern const struct kvt_policy_ops *const kvt_policies[];

/* The built-in policies: the build lists every file under pager/policy/
 * that defines a `const struct kvt_policy_ops kvt_policy_NAME`. */
#define KVT_POLICY(sym) extern const struct kvt_policy_ops sym;
#include "policies.h"
#undef KVT_POLICY

#endif
