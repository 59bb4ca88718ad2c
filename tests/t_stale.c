/* SPDX-License-Identifier: MIT */
/*
 * Handles and arguments that must be refused, without side effects:
 *  - a closed sequence's handle is -ESTALE from every call (append,
 *    acquire, prefetch, fork, park, resume, close, tokens, pages), also
 *    after its slot went to a new sequence, whose data it never reaches;
 *  - another pager's handle is -EINVAL; made-up handles (0, ~0, random,
 *    right tag with a slot out of range: -EINVAL; right tag and slot with
 *    a wrong generation: -ESTALE) never crash and never succeed;
 *  - a bad layer is -EINVAL; a page index out of range is -EINVAL and
 *    leaves no pin, no waiter and nothing queued (the pages can all still
 *    be drained, and a page on NVMe stays there);
 *  - NULL out-pointers and bad tiers are -EINVAL.
 * Each case runs in its own process with a 6 s watchdog.
 */
#include <errno.h>
#include <unistd.h>
#include "common.h"
#include "pager/internal.h"

#define LAYERS 2u

static struct kvt_config cfg;

#define SENTINEL ((struct kvt_batch *)(uintptr_t)0x5e1)

/* Every call that takes a sequence handle refuses h with one of the errors
 * allowed (want, or also alt when alt != 0), and hands nothing out. */
static void all_refuse(struct kvt_pager *p, kvt_seq_t h, int want, int alt, const char *what)
{
	unsigned per = cfg.n_kv_heads * cfg.head_dim;
	float k[per], v[per];
	uint32_t idx[1] = { 0 };
	struct kvt_batch *b = SENTINEL;
	kvt_seq_t out = 0x1234;
	int r[12], n = 0;
	static const char *const names[] = { "append", "acquire", "acquire(list)", "prefetch",
		"fork", "fork(0)", "park", "resume", "tokens", "pages", "close", "append(0)" };

	t_fill_tokens(&cfg, 1, 0, 0, 1, k, v);
	r[n++] = kvt_seq_append(p, h, 0, k, v, 1);
	r[n++] = kvt_acquire(p, h, 0, NULL, 0, &b);
	CHECK(b == SENTINEL || b == NULL);
	r[n++] = kvt_acquire(p, h, 1, idx, 1, &b);
	CHECK(b == SENTINEL || b == NULL);
	r[n++] = kvt_prefetch(p, h, 0, NULL, 0);
	r[n++] = kvt_seq_fork(p, h, 1, &out);
	r[n++] = kvt_seq_fork(p, h, 0, &out);
	CHECK_EQ(out, 0x1234);
	r[n++] = kvt_seq_park(p, h);
	r[n++] = kvt_seq_resume(p, h);
	r[n++] = kvt_seq_tokens(p, h, 0);
	r[n++] = kvt_seq_pages(p, h, 1);
	r[n++] = kvt_seq_close(p, h);
	r[n++] = kvt_seq_append(p, h, 1, k, v, 0);
	for (int i = 0; i < n; i++)
		if (r[i] != want && (!alt || r[i] != alt)) {
			fprintf(stderr, "%s: %s handle %#llx: %s returned %d, expected %d%s\n", t_sub, what,
				(unsigned long long)h, names[i], r[i], want, alt ? " or the other" : "");
			exit(1);
		}
}

static kvt_seq_t mk(uint16_t tag, uint32_t gen, uint32_t slot)
{
	return (uint64_t)tag << 48 | (uint64_t)(gen & 0xffffff) << 24 | (slot & 0xffffff);
}

static void t_closed(int unused)
{
	struct kvt_device *dev;
	struct kvt_pager *p;
	kvt_seq_t a, b, keep;
	struct kvt_stats s0, s1;

	t_config(&cfg, LAYERS, 16, 16, 256);
	p = t_open(&cfg, &dev);
	CHECK_EQ(kvt_seq_open(p, &keep), 0);
	t_append(p, keep, &cfg, 3, 0, 9);
	CHECK_EQ(kvt_seq_open(p, &a), 0);
	t_append(p, a, &cfg, 1, 0, 10);
	CHECK_EQ(kvt_seq_close(p, a), 0);
	CHECK_EQ(kvt_pager_stats(p, &s0), 0);
	all_refuse(p, a, -ESTALE, 0, "closed");
	CHECK_EQ(kvt_pager_stats(p, &s1), 0);
	CHECK_EQ(s1.seqs, s0.seqs);
	CHECK_EQ(s1.pages, s0.pages);
	t_check_inv(p);

	/* The slot goes to a new sequence: the old handle still reaches nothing. */
	CHECK_EQ(kvt_seq_open(p, &b), 0);
	CHECK_EQ(b & 0xffffff, a & 0xffffff);	/* same slot, reused */
	CHECK(b != a);
	t_append(p, b, &cfg, 2, 0, 14);
	CHECK_EQ(kvt_pager_stats(p, &s0), 0);
	all_refuse(p, a, -ESTALE, 0, "closed, slot reused");
	CHECK_EQ(kvt_pager_stats(p, &s1), 0);
	CHECK_EQ(s1.seqs, s0.seqs);
	CHECK_EQ(s1.pages, s0.pages);
	CHECK_EQ(s1.acquires, s0.acquires);
	/* The new sequence is untouched (not closed, parked or appended to). */
	CHECK_EQ(kvt_seq_tokens(p, b, 0), 14);
	CHECK_EQ(kvt_seq_tokens(p, b, 1), 14);
	t_append(p, b, &cfg, 2, 14, 1);
	CHECK_EQ(t_verify_seq(p, b, &cfg, 2, 0), 2 * 4);
	CHECK_EQ(t_verify_seq(p, keep, &cfg, 3, 0), 2 * 3);
	t_check_inv(p);

	/* Many generations of one slot: every old handle stays stale. */
	kvt_seq_t old[64];
	unsigned nold = 0;
	CHECK_EQ(kvt_seq_close(p, b), 0);
	old[nold++] = a;
	old[nold++] = b;
	for (unsigned i = 0; i < t_scale(60); i++) {
		kvt_seq_t h;
		CHECK_EQ(kvt_seq_open(p, &h), 0);
		for (unsigned j = 0; j < nold; j++)
			CHECK(h != old[j]);
		t_append(p, h, &cfg, 100 + i, 0, 1 + i % 6);
		CHECK_EQ(kvt_seq_close(p, h), 0);
		old[nold++] = h;
	}
	for (unsigned j = 0; j < nold; j++) {
		CHECK_EQ(kvt_seq_tokens(p, old[j], 0), -ESTALE);
		CHECK_EQ(kvt_seq_close(p, old[j]), -ESTALE);
	}
	all_refuse(p, old[nold - 1], -ESTALE, 0, "closed");
	CHECK_EQ(kvt_seq_close(p, keep), 0);
	t_check_inv(p);
	t_close(p, dev);
}

static void t_foreign(int unused)
{
	struct kvt_device *dev1, *dev2;
	struct kvt_pager *p1, *p2;
	kvt_seq_t a1, a2;

	t_config(&cfg, LAYERS, 16, 16, 256);
	p1 = t_open(&cfg, &dev1);
	p2 = t_open(&cfg, &dev2);
	CHECK(p1->tag != p2->tag);
	CHECK_EQ(kvt_seq_open(p1, &a1), 0);
	CHECK_EQ(kvt_seq_open(p2, &a2), 0);
	t_append(p1, a1, &cfg, 1, 0, 6);
	t_append(p2, a2, &cfg, 2, 0, 7);
	/* Same slot in both pagers: the tag tells them apart. */
	CHECK_EQ(a1 & 0xffffffffffffull, a2 & 0xffffffffffffull);
	all_refuse(p2, a1, -EINVAL, 0, "foreign");
	all_refuse(p1, a2, -EINVAL, 0, "foreign");
	CHECK_EQ(t_verify_seq(p1, a1, &cfg, 1, 0), 2 * 2);
	CHECK_EQ(t_verify_seq(p2, a2, &cfg, 2, 0), 2 * 2);
	CHECK_EQ(kvt_seq_tokens(p1, a1, 0), 6);
	CHECK_EQ(kvt_seq_tokens(p2, a2, 0), 7);
	t_check_inv(p1);
	t_check_inv(p2);
	CHECK_EQ(kvt_seq_close(p1, a1), 0);
	CHECK_EQ(kvt_seq_close(p2, a2), 0);
	t_close(p2, dev2);
	t_close(p1, dev1);
}

static void t_madeup(int unused)
{
	struct kvt_device *dev;
	struct kvt_pager *p;
	kvt_seq_t a, c;
	struct kvt_stats s0, s1;
	uint64_t rng = 0x9E3779B97F4A7C15ull;

	t_config(&cfg, LAYERS, 16, 16, 256);
	p = t_open(&cfg, &dev);
	CHECK_EQ(kvt_seq_open(p, &a), 0);
	CHECK_EQ(kvt_seq_open(p, &c), 0);
	t_append(p, a, &cfg, 1, 0, 9);
	t_append(p, c, &cfg, 2, 0, 5);
	CHECK_EQ(kvt_pager_stats(p, &s0), 0);
	uint16_t tag = (uint16_t)(a >> 48);
	uint32_t gen = (uint32_t)(a >> 24) & 0xffffff, slot = (uint32_t)a & 0xffffff;

	all_refuse(p, 0, -EINVAL, -ESTALE, "zero");
	all_refuse(p, ~0ull, -EINVAL, -ESTALE, "all ones");
	all_refuse(p, mk(tag, 0, 0xffffff), -EINVAL, 0, "slot out of range");
	all_refuse(p, mk(tag, gen, 2), -EINVAL, 0, "slot never opened");
	all_refuse(p, mk(tag, gen + 1, slot), -ESTALE, 0, "wrong generation");
	all_refuse(p, mk(tag, gen ^ 0x800000, slot), -ESTALE, 0, "wrong generation");
	all_refuse(p, mk((uint16_t)(tag + 1), gen, slot), -EINVAL, 0, "wrong tag");
	all_refuse(p, mk(0, gen, slot), -EINVAL, 0, "tag 0");
	for (unsigned i = 0; i < t_scale(300); i++) {
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		kvt_seq_t h = rng;
		if (i % 3 == 1)	/* right tag, anything else random */
			h = (h & 0xffffffffffffull) | (uint64_t)tag << 48;
		if (h == a || h == c)
			continue;
		all_refuse(p, h, -EINVAL, -ESTALE, "random");
	}
	CHECK_EQ(kvt_pager_stats(p, &s1), 0);
	CHECK_EQ(s1.seqs, 2);
	CHECK_EQ(s1.pages, s0.pages);
	CHECK_EQ(s1.acquires, s0.acquires);
	CHECK_EQ(kvt_seq_tokens(p, a, 0), 9);
	CHECK_EQ(kvt_seq_tokens(p, c, 1), 5);
	CHECK_EQ(t_verify_seq(p, a, &cfg, 1, 0), 2 * 3);
	CHECK_EQ(t_verify_seq(p, c, &cfg, 2, 0), 2 * 2);
	t_check_inv(p);
	CHECK_EQ(kvt_seq_close(p, a), 0);
	CHECK_EQ(kvt_seq_close(p, c), 0);
	t_close(p, dev);
}

/* No pin, no waiter and (when queued == 0) no queued work left anywhere
 * (lock taken). */
static void no_pins(struct kvt_pager *p, kvt_seq_t h, int queued)
{
	struct seq *s = p->seqs[(uint32_t)(h & 0xffffff)];
	pthread_mutex_lock(&p->lock);
	CHECK_EQ(s->batches, 0);
	for (uint32_t i = 0; i < p->npages; i++) {
		struct page *pg = &p->pages[i];
		if (pg->state == P_FREE)
			continue;
		CHECK_EQ(pg->pins, (pg->flags & PF_TAILPIN) ? 1 : 0);
		CHECK_EQ(pg->want, 0);
		if (queued)
			continue;
		if (pg->flags & (PF_QDEMAND | PF_QPREF))
			fprintf(stderr, "%s: page slot %u queued (flags %#x state %u frames %d %d %d)\n", t_sub,
				i, pg->flags, pg->state, (int)pg->frame[0], (int)pg->frame[1], (int)pg->frame[2]);
		CHECK(!(pg->flags & (PF_QDEMAND | PF_QPREF)));
	}
	pthread_mutex_unlock(&p->lock);
}

static void t_bad_args(int unused)
{
	struct kvt_device *dev;
	struct kvt_pager *p;
	kvt_seq_t a;
	struct kvt_batch *b = SENTINEL;
	struct kvt_view v;
	struct kvt_stats s0, s1;
	unsigned per;

	/* 12 full pages per layer (24) over a fast tier of 8: some on NVMe. */
	t_config(&cfg, LAYERS, 8, 8, 256);
	cfg.prefetch_depth = 1;
	p = t_open(&cfg, &dev);
	per = cfg.n_kv_heads * cfg.head_dim;
	float k[per], vv[per];
	t_fill_tokens(&cfg, 1, 0, 0, 1, k, vv);
	CHECK_EQ(kvt_seq_open(p, &a), 0);
	t_append(p, a, &cfg, 1, 0, 48);
	t_check_inv(p);

	/* Bad layer. */
	CHECK_EQ(kvt_seq_append(p, a, LAYERS, k, vv, 1), -EINVAL);
	CHECK_EQ(kvt_seq_append(p, a, ~0u, k, vv, 1), -EINVAL);
	CHECK_EQ(kvt_acquire(p, a, LAYERS, NULL, 0, &b), -EINVAL);
	CHECK(b == SENTINEL || b == NULL);
	b = SENTINEL;
	CHECK_EQ(kvt_acquire(p, a, ~0u, NULL, 0, &b), -EINVAL);
	CHECK(b == SENTINEL || b == NULL);
	CHECK_EQ(kvt_prefetch(p, a, LAYERS, NULL, 0), -EINVAL);
	CHECK_EQ(kvt_seq_tokens(p, a, LAYERS), -EINVAL);
	CHECK_EQ(kvt_seq_pages(p, a, ~0u), -EINVAL);
	for (unsigned l = 0; l < LAYERS; l++)
		CHECK_EQ(kvt_seq_tokens(p, a, l), 48);

	/* NULL where a pointer is needed, bad tiers. */
	CHECK_EQ(kvt_seq_append(p, a, 0, NULL, vv, 1), -EINVAL);
	CHECK_EQ(kvt_seq_append(p, a, 0, k, NULL, 1), -EINVAL);
	CHECK_EQ(kvt_acquire(p, a, 0, NULL, 0, NULL), -EINVAL);
	CHECK_EQ(kvt_seq_fork(p, a, 4, NULL), -EINVAL);
	CHECK_EQ(kvt_seq_open(p, NULL), -EINVAL);
	CHECK_EQ(kvt_batch_next(NULL, &v), -EINVAL);
	kvt_batch_release(NULL);
	CHECK_EQ(kvt_pager_stats(p, NULL), -EINVAL);
	CHECK_EQ(kvt_pager_drain(p, KVT_TIER_NVME), -EINVAL);
	CHECK_EQ(kvt_pager_drain(p, -1), -EINVAL);
	CHECK_EQ(kvt_pager_drain(p, 7), -EINVAL);
	CHECK_EQ(kvt_pager_stats(p, &s0), 0);
	CHECK_EQ(s0.seqs, 1);
	for (unsigned l = 0; l < LAYERS; l++)
		CHECK_EQ(kvt_seq_tokens(p, a, l), 48);

	/* Page 0 is on a lower tier now (the fast tier has the last pages). */
	pthread_mutex_lock(&p->lock);
	uint32_t slot0 = p->seqs[(uint32_t)(a & 0xffffff)]->lt[0].pg[0];
	uint32_t slot0b = p->seqs[(uint32_t)(a & 0xffffff)]->lt[1].pg[0];
	CHECK(p->pages[slot0].frame[KVT_TIER_FAST] == NO_FRAME);
	CHECK(p->pages[slot0b].frame[KVT_TIER_FAST] == NO_FRAME);
	pthread_mutex_unlock(&p->lock);

	/* Page index out of range: -EINVAL, no side effect. */
	uint32_t bad1[] = { 0, 12 }, bad2[] = { 11, 0, ~0u }, bad3[] = { 12 };
	CHECK_EQ(kvt_acquire(p, a, 0, bad1, 2, &b), -EINVAL);
	CHECK(b == SENTINEL || b == NULL);
	b = SENTINEL;
	CHECK_EQ(kvt_acquire(p, a, 0, bad2, 3, &b), -EINVAL);
	CHECK(b == SENTINEL || b == NULL);
	b = SENTINEL;
	CHECK_EQ(kvt_acquire(p, a, 1, bad3, 1, &b), -EINVAL);
	CHECK(b == SENTINEL || b == NULL);
	CHECK_EQ(kvt_prefetch(p, a, 0, bad1, 2), -EINVAL);
	CHECK_EQ(kvt_prefetch(p, a, 1, bad2, 3), -EINVAL);
	no_pins(p, a, 0);
	usleep(50000);
	CHECK_EQ(kvt_pager_stats(p, &s1), 0);
	CHECK_EQ(s1.prefetch_issued, s0.prefetch_issued);
	CHECK_EQ(s1.tier[KVT_TIER_FAST].promotions, s0.tier[KVT_TIER_FAST].promotions);
	CHECK_EQ(s1.tier[KVT_TIER_HOST].promotions, s0.tier[KVT_TIER_HOST].promotions);
	CHECK_EQ(s1.tier[KVT_TIER_FAST].hits + s1.tier[KVT_TIER_FAST].misses,
		 s0.tier[KVT_TIER_FAST].hits + s0.tier[KVT_TIER_FAST].misses);
	pthread_mutex_lock(&p->lock);
	CHECK(p->pages[slot0].frame[KVT_TIER_FAST] == NO_FRAME);
	CHECK(p->pages[slot0b].frame[KVT_TIER_FAST] == NO_FRAME);
	pthread_mutex_unlock(&p->lock);
	/* Nothing holds the sequence: it parks, and every page can leave the
	 * fast tier. */
	CHECK_EQ(kvt_pager_drain(p, KVT_TIER_FAST), 0);
	CHECK_EQ(kvt_pager_stats(p, &s1), 0);
	CHECK_EQ(s1.tier[KVT_TIER_FAST].used, 0);
	CHECK_EQ(kvt_seq_park(p, a), 0);
	CHECK_EQ(kvt_seq_resume(p, a), 0);
	t_check_inv(p);
	/* A good acquire still works and a good list still reads right. */
	uint32_t good[] = { 11, 0, 5 };
	CHECK_EQ(kvt_acquire(p, a, 1, good, 3, &b), 0);
	int r;
	unsigned n = 0;
	while ((r = kvt_batch_next(b, &v)) == 1) {
		CHECK(t_check_view(&cfg, 1, 1, &v) == 0);
		n++;
	}
	CHECK_EQ(r, 0);
	CHECK_EQ(n, 3);
	kvt_batch_release(b);
	no_pins(p, a, 1);	/* resume queued prefetches */
	CHECK_EQ(kvt_seq_close(p, a), 0);
	t_check_inv(p);
	t_close(p, dev);
}

int main(void)
{
	static const struct t_case cases[] = {
		{ "closed", t_closed },
		{ "foreign", t_foreign },
		{ "made-up", t_madeup },
		{ "bad-args", t_bad_args },
	};

	return t_run_cases(cases, sizeof(cases) / sizeof(cases[0]), 0, 24);
}
