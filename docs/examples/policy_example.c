/* SPDX-License-Identifier: MIT */
/*
 * layerlru, an example policy plug-in: LRU, except that the pages of the
 * first `keep` layers (param keep=N, default 1) go only when no other page
 * is left. Build and load it (docs/policies.md): in the tree, or against
 * an installed libkvt:
 *   cc -O2 -fPIC -shared -I. -Ibuild/gen -o layerlru.so docs/examples/policy_example.c
 *   cc -O2 -fPIC -shared $(pkg-config --cflags kvt) -o layerlru.so policy_example.c
 *   kvt-run ... --policy fast=./layerlru.so:keep=2
 */
#include <errno.h>
#include <stdlib.h>

#include "pager/policy.h"
#include "pager/policy/helpers.h"	/* seg_params_parse */
#include "pager/policy/list.h"		/* intrusive lists, lnode_collect */

struct ll_meta {
	struct kvt_lnode node;		/* on one of the two LRU lists */
	uint32_t kept;			/* which one */
};

struct layerlru {
	struct kvt_lnode other, kept;	/* LRU: next = least recently used */
	uint64_t keep;
};

/* keep=N, 0..1024 layers: a bad value gets a line in err naming it. */
static int ll_init(void **state, const char *params, size_t capacity,
		   char *err, size_t errlen)
{
	uint64_t keep = 1;
	const struct seg_param known[] = {
		{ .key = "keep", .num = &keep, .num_max = 1024, .what = "layers" },
	};
	struct layerlru *s;

	(void)capacity;
	if (seg_params_parse(params, known, 1, err, errlen))
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	lnode_init_head(&s->other);
	lnode_init_head(&s->kept);
	s->keep = keep;
	*state = s;
	return 0;
}

static void ll_destroy(void *state)
{
	free(state);
}

/* A new page is the most recent of its list; its layer picks the list. */
static void ll_insert(void *state, const struct kvt_ref *r, void *meta)
{
	struct layerlru *s = state;
	struct ll_meta *m = meta;

	m->node.key = r->key;
	m->kept = r->layer != KVT_REF_NONE && r->layer < s->keep;
	lnode_add_before(m->kept ? &s->kept : &s->other, &m->node);
}

static void ll_access(void *state, const struct kvt_ref *r, void *meta)
{
	struct layerlru *s = state;
	struct ll_meta *m = meta;

	(void)r;
	lnode_move_last(m->kept ? &s->kept : &s->other, &m->node);
}

static void ll_remove(void *state, uint64_t key, void *meta)
{
	(void)state; (void)key;
	lnode_del(meta);
}

/* Least recent first: the other layers, then the kept ones. Only looks. */
static size_t ll_victims(void *state, uint64_t *out, size_t want,
			 int (*pinned)(void *arg, uint64_t key), void *arg)
{
	struct layerlru *s = state;
	size_t n = lnode_collect(&s->other, 0, out, want, pinned, arg);

	return n + lnode_collect(&s->kept, 0, out + n, want - n, pinned, arg);
}

/* The tests build broken copies by defining these (Makefile, PLUGINS). */
#ifndef EXAMPLE_NAME
#define EXAMPLE_NAME	"layerlru"
#define EXAMPLE_SYMBOL	kvt_policy		/* KVT_POLICY_SYMBOL */
#define EXAMPLE_VICTIMS	ll_victims
#endif
#ifndef EXAMPLE_ABI
#define EXAMPLE_ABI	KVT_POLICY_ABI
#endif

KVT_POLICY_EXPORT const struct kvt_policy_ops EXAMPLE_SYMBOL = {
	.abi		= EXAMPLE_ABI,
	.size		= sizeof(struct kvt_policy_ops),
	.name		= EXAMPLE_NAME,
	.meta_size	= sizeof(struct ll_meta),
	.init		= ll_init,
	.destroy	= ll_destroy,
	.on_insert	= ll_insert,
	.on_access	= ll_access,
	.on_remove	= ll_remove,
	.victims	= EXAMPLE_VICTIMS,
};
