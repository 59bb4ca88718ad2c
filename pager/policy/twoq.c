/* SPDX-License-Identifier: MIT */
/*
 * 2Q (Johnson & Shasha, VLDB'94), the full version. Three queues:
 *
 *   A1in  FIFO of pages seen once lately, at most about Kin of them
 *   A1out FIFO of the keys (no pages) that A1in pushed out, at most Kout
 *   Am    LRU of the pages that came back after leaving A1in
 *
 * A new page enters A1in. A hit in A1in changes nothing: re-use soon after
 * the first use is taken as one correlated burst, not as a sign of a hot
 * page. A page whose key is still in A1out when it comes back is hot and
 * enters Am; a hit in Am moves the page to Am's most recent end. So a
 * one-time scan only flows through A1in and A1out and never pushes Am's
 * pages out.
 *
 * victims() follows the paper's reclaimfor(): the oldest page of A1in while
 * A1in holds more than Kin pages, else the least recent page of Am; each
 * falls back on the other when it has nothing unpinned. A page removed from
 * A1in, by victims() or by any other removal, leaves its key in A1out; one
 * removed from Am is forgotten, as the paper does with Am's evictions. So a
 * page removed and inserted again with the same key comes back into Am if
 * it had left A1in lately, and into A1in otherwise.
 *
 * Params: kin=PCT (A1in target, % of capacity, default 25) and kout=PCT
 * (A1out size, % of capacity, default 50), each 0..100. The sizes are
 * rounded down; kout=0 turns A1out off (every page then enters A1in).
 * Per page: a list node and a queue flag (32 bytes). A1out costs 24 bytes
 * per remembered key plus a hash table of at least as many 4-byte buckets,
 * allocated once at init.
 */
#include <errno.h>
#include <stdlib.h>

#include "pager/policy.h"
#include "pager/policy/list.h"
#include "pager/policy/helpers.h"

struct twoq_meta {
	struct kvt_lnode node;		/* first: meta is also the list node */
	uint32_t in_am;			/* 0: on A1in, 1: on Am */
};

struct twoq {
	struct kvt_lnode a1in;		/* FIFO: first = oldest */
	struct kvt_lnode am;		/* LRU: first = least recently used */
	size_t n_a1in, n_am;		/* pages on each */
	size_t kin;			/* A1in gives victims while larger */
	struct kvt_ghost a1out;		/* list 0: keys pushed out of A1in */
};

/* params as in the file comment; -EINVAL for anything else or a capacity
 * too large for the ghost's indices; -ENOMEM. */
static int twoq_init(void **state, const char *params, size_t capacity,
		     char *err, size_t errlen)
{
	unsigned kin = 25, kout = 50;
	const struct seg_param known[] = {
		{ .key = "kin", .val = &kin, .max = 100, .what = "percent of the tier" },
		{ .key = "kout", .val = &kout, .max = 100, .what = "percent of the tier" },
	};
	struct twoq *s;
	int r;

	if (seg_params_parse(params, known, 2, err, errlen))
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	r = ghost_init(&s->a1out, seg_pct(capacity, kout));
	if (r)
		goto fail;
	lnode_init_head(&s->a1in);
	lnode_init_head(&s->am);
	s->kin = seg_pct(capacity, kin);
	*state = s;
	return 0;
fail:
	free(s);
	return r;
}

/* Frees the state and A1out; the pages' metadata belongs to the tier. */
static void twoq_destroy(void *state)
{
	struct twoq *s = state;

	ghost_destroy(&s->a1out);
	free(s);
}

/* A key remembered in A1out is forgotten there and its page enters Am as
 * the most recent; any other page enters A1in as the newest. */
static void twoq_on_insert(void *state, const struct kvt_ref *r, void *meta)
{
	uint64_t key = r->key;
	struct twoq *s = state;
	struct twoq_meta *m = meta;

	m->node.key = key;
	if (ghost_take(&s->a1out, key) >= 0) {
		m->in_am = 1;
		lnode_add_before(&s->am, &m->node);
		s->n_am++;
	} else {
		m->in_am = 0;
		lnode_add_before(&s->a1in, &m->node);
		s->n_a1in++;
	}
}

/* A hit in Am makes the page the most recent; a hit in A1in does nothing.
 * step and score do not matter to 2Q. */
static void twoq_on_access(void *state, const struct kvt_ref *r, void *meta)
{
	struct twoq *s = state;
	struct twoq_meta *m = meta;

	(void)r;
	if (m->in_am)
		lnode_move_last(&s->am, &m->node);
}

/* Any removal is an eviction: a page leaving A1in leaves its key as the
 * newest in A1out (the oldest key there is forgotten when A1out is full);
 * a page leaving Am is forgotten. */
static void twoq_on_remove(void *state, uint64_t key, void *meta)
{
	struct twoq *s = state;
	struct twoq_meta *m = meta;

	lnode_del(&m->node);
	if (m->in_am) {
		s->n_am--;
	} else {
		s->n_a1in--;
		ghost_push(&s->a1out, 0, key);
	}
}

/*
 * Up to want unpinned keys, in the order that repeated reclaimfor() would
 * take them if the caller removed each: A1in's oldest while A1in would
 * still hold more than Kin pages, then Am's least recent. Only looks.
 * Visits each page at most once, so an all-pinned tier returns 0 after
 * one pass.
 */
static size_t twoq_victims(void *state, uint64_t *out, size_t want,
			   int (*pinned)(void *arg, uint64_t key), void *arg)
{
	struct twoq *s = state;

	return seg_collect2(&s->a1in, s->n_a1in, s->kin, &s->am, out, want,
			    pinned, arg);
}

const struct kvt_policy_ops kvt_policy_2q = {
	.name		= "2q",
	.meta_size	= sizeof(struct twoq_meta),
	.init		= twoq_init,
	.destroy	= twoq_destroy,
	.on_insert	= twoq_on_insert,
	.on_access	= twoq_on_access,
	.on_remove	= twoq_on_remove,
	.victims	= twoq_victims,
};
