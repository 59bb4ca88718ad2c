/* SPDX-License-Identifier: MIT */
/*
 * Intrusive doubly linked lists for policies. The node lives in the page's
 * policy metadata (owned by the tier, stable until on_remove), so a policy
 * never allocates per page. A list is circular through a sentinel head that
 * lives in the policy state: the first node is head.next, the last is
 * head.prev, and an empty list points at itself. Every operation is O(1) and
 * branch-free.
 *
 * The node carries the page key because every list policy must hand keys
 * back from victims(); policies that need more per page embed this node as
 * the first member of their own metadata struct.
 */
#ifndef KVT_PAGER_POLICY_LIST_H
#define KVT_PAGER_POLICY_LIST_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "pager/errf.h"

struct kvt_lnode {
	struct kvt_lnode *prev, *next;
	uint64_t key;
};

/* An empty list: the sentinel points at itself. */
static inline void lnode_init_head(struct kvt_lnode *head)
{
	head->prev = head->next = head;
}

/* Link n just before pos (pos may be the head: then n becomes the last). */
static inline void lnode_add_before(struct kvt_lnode *pos, struct kvt_lnode *n)
{
	struct kvt_lnode *p = pos->prev;
	n->prev = p;
	n->next = pos;
	p->next = n;
	pos->prev = n;
}

/* Unlink n; its own pointers are left stale (the caller relinks or drops it). */
static inline void lnode_del(struct kvt_lnode *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
}

/* Move n to the end of head's list. Correct when n is already last. */
static inline void lnode_move_last(struct kvt_lnode *head, struct kvt_lnode *n)
{
	lnode_del(n);
	lnode_add_before(head, n);
}

/*
 * The victims() walk shared by recency lists: collect up to want keys
 * starting at the first node (backward = 0) or the last (backward = 1),
 * skipping those pinned(arg, key) holds (pinned may be NULL: none are).
 * Only reads the list; visits each node at most once. Returns the count.
 */
static inline size_t lnode_collect(const struct kvt_lnode *head, int backward,
				   uint64_t *out, size_t want,
				   int (*pinned)(void *arg, uint64_t key), void *arg)
{
	size_t n = 0;
	const struct kvt_lnode *e = backward ? head->prev : head->next;

	while (n < want && e != head) {
		if (!pinned || !pinned(arg, e->key))
			out[n++] = e->key;
		e = backward ? e->prev : e->next;
	}
	return n;
}

/*
 * The methods of a policy that is one list in the state (the state is the
 * sentinel itself): lru, mru and lifo differ only in what an access does
 * and which end victims() starts from, so they share the rest.
 */

/* params must be "" (no knobs): -EINVAL otherwise; -ENOMEM. The capacity
 * is not needed: the list grows through the tier's metadata. */
static inline int lpol_init(void **state, const char *params, size_t capacity,
			    char *err, size_t errlen)
{
	struct kvt_lnode *head;

	(void)capacity;
	if (params && *params)
		return kvt_errf(err, errlen, -EINVAL, "takes no parameters (got '%.64s')", params);
	head = malloc(sizeof(*head));
	if (!head)
		return -ENOMEM;
	lnode_init_head(head);
	*state = head;
	return 0;
}

/* Frees the state only; the pages' metadata belongs to the tier. */
static inline void lpol_destroy(void *state)
{
	free(state);
}

/* A new page goes last (most recent). */
static inline void lpol_insert_last(void *state, const struct kvt_ref *r, void *meta)
{
	uint64_t key = r->key;
	struct kvt_lnode *n = meta;

	n->key = key;
	lnode_add_before(state, n);
}

/* A used page moves last; step and score do not matter. */
static inline void lpol_access_last(void *state, const struct kvt_ref *r, void *meta)
{
	(void)r;
	lnode_move_last(state, meta);
}

/* Unlink the page; the tier may reuse meta as soon as this returns. */
static inline void lpol_remove(void *state, uint64_t key, void *meta)
{
	(void)state; (void)key;
	lnode_del(meta);
}

/* Up to want unpinned keys from the first node on. Only looks. */
static inline size_t lpol_victims_first(void *state, uint64_t *out, size_t want,
					int (*pinned)(void *arg, uint64_t key), void *arg)
{
	return lnode_collect(state, 0, out, want, pinned, arg);
}

/* Up to want unpinned keys from the last node back. Only looks. */
static inline size_t lpol_victims_last(void *state, uint64_t *out, size_t want,
				       int (*pinned)(void *arg, uint64_t key), void *arg)
{
	return lnode_collect(state, 1, out, want, pinned, arg);
}

#endif
