/* SPDX-License-Identifier: MIT */
/*
 * streaming: what StreamingLLM (Xiao et al., ICLR '24) keeps. Attention
 * concentrates on the first tokens of a sequence (attention sinks) and on
 * the most recent ones, so the policy keeps the sink pages (page index
 * below `sink`) and the recent window (the last `window` pages of each
 * (sequence, layer) table) and evicts every other page first, the one that
 * entered the tier first. Window pages go next, then sinks, each oldest
 * first: they are returned only when nothing else is left.
 *
 * The window is "the last pages the tier has seen of that table" (window.h):
 * as pages are appended, older ones leave the window without an event, so
 * the class of a page is decided when victims() looks. A page whose seq,
 * layer or index is unknown (KVT_REF_NONE) is neither sink nor window: with
 * no positions at all the policy is FIFO. Accesses change nothing.
 *
 * params: "sink=N" pages (default 1), "window=N" pages (default 4), each
 * 0..2^20. Per page 40 bytes; the state holds a map of 16 bytes per table
 * with pages in the tier. victims() walks the queue up to three times
 * (once per class) and stops when it has want keys: its cost is want plus
 * the pages of the classes it passes over, O(n) at worst.
 */
#include <errno.h>
#include <stdlib.h>

#include "pager/policy.h"
#include "pager/policy/helpers.h"
#include "pager/policy/list.h"
#include "pager/policy/window.h"

struct st_meta {
	struct kvt_lnode node;		/* first: meta is also the list node */
	uint32_t seq, layer, index;
	uint32_t tracked;		/* counted in the window map */
};

struct streaming {
	struct kvt_lnode head;		/* FIFO: next oldest, prev newest */
	uint64_t sink, window;
	struct kvwin win;
};

enum { OTHER, WINDOW, SINK };

static int st_init(void **state, const char *params, size_t capacity,
		   char *err, size_t errlen)
{
	uint64_t sink = 1, window = 4;
	const struct seg_param known[] = {
		{ .key = "sink", .num = &sink, .num_max = 1u << 20, .what = "pages" },
		{ .key = "window", .num = &window, .num_max = 1u << 20, .what = "pages" },
	};
	struct streaming *s;

	(void)capacity;
	if (seg_params_parse(params, known, 2, err, errlen))
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	if (kvwin_init(&s->win)) {
		free(s);
		return -ENOMEM;
	}
	lnode_init_head(&s->head);
	s->sink = sink;
	s->window = window;
	*state = s;
	return 0;
}

static void st_destroy(void *state)
{
	struct streaming *s = state;

	kvwin_destroy(&s->win);
	free(s);
}

static void st_on_insert(void *state, const struct kvt_ref *r, void *meta)
{
	struct streaming *s = state;
	struct st_meta *m = meta;

	m->node.key = r->key;
	m->seq = r->seq;
	m->layer = r->layer;
	m->index = r->index;
	m->tracked = (uint32_t)kvwin_add(&s->win, r);
	lnode_add_before(&s->head, &m->node);
}

static void st_on_access(void *state, const struct kvt_ref *r, void *meta)
{
	(void)state; (void)r; (void)meta;
}

static void st_on_remove(void *state, uint64_t key, void *meta)
{
	struct streaming *s = state;
	struct st_meta *m = meta;

	(void)key;
	if (m->tracked)
		kvwin_del(&s->win, m->seq, m->layer);
	lnode_del(&m->node);
}

static int st_class(const struct streaming *s, const struct st_meta *m)
{
	if (!m->tracked)
		return OTHER;
	if (m->index < s->sink)
		return SINK;
	if ((uint64_t)m->index + s->window >= kvwin_top(&s->win, m->seq, m->layer))
		return WINDOW;
	return OTHER;
}

/* Up to want unpinned keys: other pages, then window pages, then sinks,
 * each class oldest first. Only looks. */
static size_t st_victims(void *state, uint64_t *out, size_t want,
			 int (*pinned)(void *arg, uint64_t key), void *arg)
{
	struct streaming *s = state;
	size_t n = 0;

	for (int cls = OTHER; cls <= SINK && n < want; cls++)
		for (const struct kvt_lnode *e = s->head.next; e != &s->head && n < want;
		     e = e->next) {
			const struct st_meta *m = (const struct st_meta *)e;

			if (st_class(s, m) == cls && (!pinned || !pinned(arg, e->key)))
				out[n++] = e->key;
		}
	return n;
}

const struct kvt_policy_ops kvt_policy_streaming = {
	.name		= "streaming",
	.meta_size	= sizeof(struct st_meta),
	.init		= st_init,
	.destroy	= st_destroy,
	.on_insert	= st_on_insert,
	.on_access	= st_on_access,
	.on_remove	= st_on_remove,
	.victims	= st_victims,
};
