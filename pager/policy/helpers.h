/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the policies: "key=value" parameters (every policy
 * that takes any), the victims() walk over two recency lists (2q, arc),
 * and ghost lists of keys (2q, arc, s3fifo).
 *
 * A ghost list remembers the keys of pages that left the tier, so that a
 * policy can tell a page coming back soon from a new one. The policy sees
 * keys only and the tier drops a page's metadata on on_remove, so ghosts
 * live in the policy state: a pool of nodes allocated once at init (the
 * bound is fixed then; a ghost never grows past it), a chained hash of
 * keys over the pool, and up to GHOST_LISTS recency lists threaded through
 * it. Links are 32-bit pool indices: a node is 24 bytes. Every operation
 * is O(1) plus the length of one hash chain (the table has at least as
 * many buckets as the pool has nodes).
 */
#ifndef KVT_PAGER_POLICY_HELPERS_H
#define KVT_PAGER_POLICY_HELPERS_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pager/errf.h"
#include "pager/policy/list.h"

/* ---- parameters ---------------------------------------------------- */

/*
 * One "key=value" parameter. Either a percentage (val set): an integer
 * 0..max, optionally followed by '%'; or a plain number (num set, val
 * NULL): an integer min..num_max, nothing after it. Either pointer holds
 * the default and is overwritten when the key is given. what, optional,
 * says what the number counts ("percent of the tier", "pages"): it ends
 * the message for a value out of range.
 */
struct seg_param {
	const char *key;
	unsigned *val;		/* a percentage, or NULL */
	unsigned max;
	uint64_t *num;		/* a plain number, when val is NULL */
	uint64_t min, num_max;
	int repeat;		/* the key may be given again; the last counts */
	const char *what;	/* the unit, for messages; NULL: none */
};

/* "KEY=VALUE: must be MIN..MAX (WHAT)" for p, into err; returns -EINVAL.
 * value is the text given (vlen bytes, not terminated). */
static inline int seg_param_range(const struct seg_param *p, const char *value, size_t vlen,
				  char *err, size_t errlen)
{
	uint64_t lo = p->val ? 0 : p->min, hi = p->val ? p->max : p->num_max;
	const char *what = p->what ? p->what : p->val ? "percent" : NULL;

	return kvt_errf(err, errlen, -EINVAL, "%s=%.*s: must be %llu..%llu%s%s%s",
			p->key, (int)(vlen > 64 ? 64 : vlen), value, (unsigned long long)lo,
			(unsigned long long)hi, what ? " (" : "", what ? what : "", what ? ")" : "");
}

/*
 * Parse params ("key=value,..."; NULL or "" keeps every default) against
 * the n (at most 32; 0 for a policy without parameters) known keys.
 * -EINVAL for an unknown key, a repeated one (unless its entry allows
 * it), a missing or empty value, a value that is not decimal digits (plus
 * an optional '%' for a percentage) or lies outside its range, and an
 * empty item (",," or a trailing ','), with one line in err (errlen bytes;
 * err may be NULL) that names the key and, for a bad value, its range:
 * "small=150: must be 1..99 (percent of the tier)". On -EINVAL some values
 * may have been overwritten: the caller fails its init and drops them.
 */
static inline int seg_params_parse(const char *params, const struct seg_param *p,
				   size_t n, char *err, size_t errlen)
{
	const char *s = params;
	uint32_t seen = 0;

	if (!s || !*s)
		return 0;
	if (!n)
		return kvt_errf(err, errlen, -EINVAL, "takes no parameters (got '%.64s')", s);
	for (;;) {
		size_t klen = strcspn(s, "=,"), i;
		uint64_t v = 0, lo, hi;
		const char *d = s + klen + 1, *val = d;

		if (!klen && (!*s || *s == ','))
			return kvt_errf(err, errlen, -EINVAL, "empty item in '%.64s'", params);
		if (s[klen] != '=')
			return kvt_errf(err, errlen, -EINVAL, "'%.*s': expected key=value",
					(int)(klen > 64 ? 64 : klen), s);
		for (i = 0; i < n; i++)
			if (strlen(p[i].key) == klen && !memcmp(p[i].key, s, klen))
				break;
		if (i == n || i >= 32) {
			char known[256];
			size_t at = 0;

			known[0] = 0;
			for (size_t j = 0; j < n && j < 32 && at < sizeof(known); j++)
				at += (size_t)snprintf(known + at, sizeof(known) - at, "%s%s",
						       j ? ", " : "", p[j].key);
			return kvt_errf(err, errlen, -EINVAL, "unknown key '%.*s' (known: %s)",
					(int)(klen > 64 ? 64 : klen), s, known);
		}
		if ((seen >> i & 1) && !p[i].repeat)
			return kvt_errf(err, errlen, -EINVAL, "%s given twice", p[i].key);
		seen |= 1u << i;
		lo = p[i].val ? 0 : p[i].min;
		hi = p[i].val ? p[i].max : p[i].num_max;
		if (*d < '0' || *d > '9')
			return seg_param_range(&p[i], val, strcspn(val, ","), err, errlen);
		for (; *d >= '0' && *d <= '9'; d++) {
			unsigned dig = (unsigned)(*d - '0');

			if (dig > hi || v > (hi - dig) / 10)
				return seg_param_range(&p[i], val, strcspn(val, ","), err, errlen);
			v = v * 10 + dig;
		}
		if (v < lo)
			return seg_param_range(&p[i], val, strcspn(val, ","), err, errlen);
		if (p[i].val) {
			if (*d == '%')
				d++;
			*p[i].val = (unsigned)v;
		} else {
			*p[i].num = v;
		}
		if (!*d)
			return 0;
		if (*d != ',')
			return seg_param_range(&p[i], val, strcspn(val, ","), err, errlen);
		s = d + 1;
	}
}

/* pct percent of capacity, rounded down, without overflow. */
static inline size_t seg_pct(size_t capacity, unsigned pct)
{
	return capacity / 100 * pct + capacity % 100 * pct / 100;
}

/* ---- victims over two lists ---------------------------------------- */

/* The first node from e on (e included) that is not pinned; head if none. */
static inline const struct kvt_lnode *
seg_unpinned(const struct kvt_lnode *head, const struct kvt_lnode *e,
	     int (*pinned)(void *arg, uint64_t key), void *arg)
{
	while (e != head && pinned && pinned(arg, e->key))
		e = e->next;
	return e;
}

/*
 * victims() for two recency lists walked from their first node (oldest):
 * the next victim comes from list a while a holds more than limit pages,
 * counting na down for each page picked from a (so the keys come out in
 * the order that repeated single evictions would take them), otherwise
 * from b; either falls back on the other once it has no unpinned page
 * left. Pinned pages still count in na: they stay resident. Only reads the
 * lists; visits each node at most once, so a tier of only pinned pages
 * costs one pass. Returns the count.
 */
static inline size_t seg_collect2(const struct kvt_lnode *a, size_t na, size_t limit,
				  const struct kvt_lnode *b, uint64_t *out, size_t want,
				  int (*pinned)(void *arg, uint64_t key), void *arg)
{
	const struct kvt_lnode *ea = seg_unpinned(a, a->next, pinned, arg);
	const struct kvt_lnode *eb = seg_unpinned(b, b->next, pinned, arg);
	size_t n = 0;

	while (n < want && (ea != a || eb != b)) {
		if (ea != a && (na > limit || eb == b)) {
			out[n++] = ea->key;
			na -= na > 0;
			ea = seg_unpinned(a, ea->next, pinned, arg);
		} else {
			out[n++] = eb->key;
			eb = seg_unpinned(b, eb->next, pinned, arg);
		}
	}
	return n;
}

/* ---- ghost lists --------------------------------------------------- */

#define GHOST_LISTS	2
#define GHOST_NIL	UINT32_MAX

struct ghost_node {
	uint64_t key;
	uint32_t prev, next;		/* list links: pool indices */
	uint32_t hnext;			/* hash chain, or the free chain */
	uint32_t list;			/* which list holds a used node */
};

struct kvt_ghost {
	/* (GHOST_LISTS + cap): the sentinels of the lists, then the pool.
	 * A list is circular through its sentinel: first (oldest) is
	 * node[l].next, last (newest) is node[l].prev. */
	struct ghost_node *node;
	uint32_t *bucket;		/* (mask + 1) chain heads, GHOST_NIL = empty */
	uint32_t mask;
	uint32_t free;			/* free nodes, chained through hnext */
	uint32_t cap;			/* pool nodes */
	uint32_t count[GHOST_LISTS];	/* keys on each list */
};

/* A 64-bit finaliser: keys that share low bits or strides spread out. */
static inline uint32_t ghost_hash(const struct kvt_ghost *g, uint64_t key)
{
	key ^= key >> 33;
	key *= 0xff51afd7ed558ccdull;
	key ^= key >> 33;
	key *= 0xc4ceb9fe1a85ec53ull;
	key ^= key >> 33;
	return (uint32_t)key & g->mask;
}

/* Room for cap keys over all lists (cap may be 0: the ghost then forgets
 * everything). -EINVAL when cap does not fit 32-bit indices, -ENOMEM.
 * On failure nothing is left allocated. */
static inline int ghost_init(struct kvt_ghost *g, size_t cap)
{
	size_t nb = 1;

	memset(g, 0, sizeof(*g));
	if (cap > UINT32_MAX / 4)
		return -EINVAL;
	while (nb < cap)
		nb <<= 1;
	g->node = calloc(GHOST_LISTS + cap, sizeof(*g->node));
	g->bucket = malloc(nb * sizeof(*g->bucket));
	if (!g->node || !g->bucket) {
		free(g->node);
		free(g->bucket);
		g->node = NULL;
		g->bucket = NULL;
		return -ENOMEM;
	}
	memset(g->bucket, 0xff, nb * sizeof(*g->bucket));	/* GHOST_NIL */
	g->mask = (uint32_t)(nb - 1);
	g->cap = (uint32_t)cap;
	for (uint32_t l = 0; l < GHOST_LISTS; l++)
		g->node[l].prev = g->node[l].next = l;
	g->free = GHOST_NIL;
	for (uint32_t i = GHOST_LISTS + g->cap; i-- > GHOST_LISTS; ) {
		g->node[i].hnext = g->free;
		g->free = i;
	}
	return 0;
}

static inline void ghost_destroy(struct kvt_ghost *g)
{
	free(g->node);
	free(g->bucket);
}

/* The bytes of a ghost's nodes (sentinels and pool) and of its buckets. */
static inline size_t ghost_node_bytes(const struct kvt_ghost *g)
{
	return (GHOST_LISTS + (size_t)g->cap) * sizeof(*g->node);
}

static inline size_t ghost_bucket_bytes(const struct kvt_ghost *g)
{
	return ((size_t)g->mask + 1) * sizeof(*g->bucket);
}

/* The cache lines a ghost's memory spans. */
static inline size_t ghost_lines(const struct kvt_ghost *g)
{
	return (ghost_node_bytes(g) + ghost_bucket_bytes(g)) / 64 + 2;
}

/* Ask for the whole ghost in the caches ahead of a run of look-ups:
 * between runs it is cold (the decode streams the KV through the caches),
 * and asked for at once its lines come in together, where each look-up
 * alone waits for its chain, one line after another. Worth it where the
 * run would touch a good share of them (ghost_lines()). */
static inline void ghost_warm(const struct kvt_ghost *g)
{
	const char *n = (const char *)g->node, *b = (const char *)g->bucket;

	for (size_t o = 0, nb = ghost_node_bytes(g); o < nb; o += 64)
		__builtin_prefetch(n + o);
	for (size_t o = 0, bb = ghost_bucket_bytes(g); o < bb; o += 64)
		__builtin_prefetch(b + o);
}

/* The list that holds key, or -1 when the ghost does not remember it. */
static inline int ghost_find(const struct kvt_ghost *g, uint64_t key)
{
	for (uint32_t i = g->bucket[ghost_hash(g, key)]; i != GHOST_NIL; i = g->node[i].hnext)
		if (g->node[i].key == key)
			return (int)g->node[i].list;
	return -1;
}

/* Forget key. Returns the list it was on, or -1 when it was not there. */
static inline int ghost_take(struct kvt_ghost *g, uint64_t key)
{
	uint32_t *link = &g->bucket[ghost_hash(g, key)];

	for (uint32_t i = *link; i != GHOST_NIL; link = &g->node[i].hnext, i = *link) {
		struct ghost_node *e = &g->node[i];

		if (e->key != key)
			continue;
		*link = e->hnext;
		g->node[e->prev].next = e->next;
		g->node[e->next].prev = e->prev;
		g->count[e->list]--;
		e->hnext = g->free;
		g->free = i;
		return (int)e->list;
	}
	return -1;
}

/* Forget the oldest key of list l. Returns 0, or -1 when l is empty. */
static inline int ghost_pop(struct kvt_ghost *g, uint32_t l)
{
	if (!g->count[l])
		return -1;
	ghost_take(g, g->node[g->node[l].next].key);
	return 0;
}

/*
 * Remember key as the newest of list l (moving it there if the ghost
 * already holds it). A full pool first forgets the oldest key of l, or of
 * another list when l is empty; a pool of 0 remembers nothing. So a
 * one-list ghost of cap keys is a FIFO of the last cap keys pushed.
 */
static inline void ghost_push(struct kvt_ghost *g, uint32_t l, uint64_t key)
{
	struct ghost_node *e;
	uint32_t i, h;

	if (!g->cap)
		return;
	ghost_take(g, key);
	for (uint32_t o = 0; g->free == GHOST_NIL && o <= GHOST_LISTS; o++)
		ghost_pop(g, o ? o - 1 : l);
	i = g->free;
	e = &g->node[i];
	g->free = e->hnext;
	h = ghost_hash(g, key);
	e->key = key;
	e->list = l;
	e->hnext = g->bucket[h];
	g->bucket[h] = i;
	e->next = l;
	e->prev = g->node[l].prev;
	g->node[e->prev].next = i;
	g->node[l].prev = i;
	g->count[l]++;
}

/* Keys on list l. */
static inline size_t ghost_count(const struct kvt_ghost *g, uint32_t l)
{
	return g->count[l];
}

#endif
