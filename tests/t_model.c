/* SPDX-License-Identifier: MIT */
/*
 * Random workloads against a model of the sequences, on tiny tiers (fast 12
 * pages, host 10, nvme 400, 3 layers): up to 5 sequences opened, closed and
 * forked (inside pages, at boundaries, at 0, and beyond the length: -EINVAL),
 * appends of 1..9 tokens to every layer (-EBUSY while parked), acquires of
 * random page subsets (duplicates too, or the whole layer) with every byte
 * checked against the model, prefetches, steps, park/resume, drains of the
 * fast and host tiers. Run once with host_in_place off and once on.
 *
 * The model: per sequence its tokens (equal in every layer), a list of
 * (first token -> seed) segments (a fork child keeps its parent's segments
 * up to the fork point, then its own seed), and per layer the model ids of
 * its pages (a fork shares the whole pages, a new page gets a new id).
 *
 * After every operation, with p->lock held: kvt_pager_check() == 0, every
 * unparked sequence's partial tails hold PF_TAILPIN and a fast frame, a
 * parked one holds no tail pin, no page is wanted by a batch (every batch
 * was consumed and released); after a drain of the fast tier only pinned
 * or prefetched pages are in it (nothing is promoted for nobody); and in
 * the stats: used <= capacity per tier, seqs == open sequences, pages ==
 * the unique model pages (plus pages of closed sequences whose move is
 * still in flight), no lost page, no I/O error.
 * A page keeps one view id (generation, slot) for its life, whichever
 * sequence reads it.
 *
 * Then a directed case on the emptied pager (big_batch): a batch of
 * exactly the pages that fill the host tier while the fast tier is full of
 * unpinned pages must come up.
 *
 * Pins are budgeted to fit the fast tier: at most 6 tail pins (two
 * unparked sequences with partial tails) so that a batch always finds
 * frames. Usage: t_model [seed [ops [pass]]]; ops default 2000 (t_scale);
 * pass 0 or 1 runs only host_in_place off (seed) or on (seed + 1).
 */
#include <errno.h>
#include <signal.h>
#include <unistd.h>
#include "common.h"
#include "pager/internal.h"

#define LAYERS	3u
#define MAXSEQ	5u
#define MAXSEG	32u
#define TAIL_BUDGET 6u
#define WATCHDOG_S (4 * t_slow())	/* one operation taking longer is stuck */

struct seg {
	unsigned start;
	uint32_t seed;
};

struct mseq {
	int open, parked;
	kvt_seq_t h;
	uint32_t seed;
	unsigned ntok;
	struct seg seg[MAXSEG];
	unsigned nseg;
	uint32_t *pid[LAYERS];	/* model page ids */
	unsigned npg, cap;
};

static struct kvt_config cfg;
static struct kvt_pager *P;
static struct mseq S[MAXSEQ];
static uint64_t rng;
static uint32_t seed0;
static unsigned opno, in_place;
static const char *volatile opname = "open";
static uint32_t next_pid = 1;
static uint64_t *vid;		/* model page id -> view id (0: not seen yet) */
static uint32_t *stamp;		/* scratch for counting unique ids */
static uint32_t stamp_gen;
static uint32_t pid_cap;
static uint64_t expect_step;

#define CK(cond) do { if (!(cond)) { \
	fprintf(stderr, "%s:%d: check failed: %s (seed %u in_place %u op %u %s)\n", \
		__FILE__, __LINE__, #cond, seed0, in_place, opno, opname); exit(1); } } while (0)
#define CK_EQ(a, b) do { long long _a = (long long)(a), _b = (long long)(b); \
	if (_a != _b) { fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld " \
		"(seed %u in_place %u op %u %s)\n", __FILE__, __LINE__, #a, _a, #b, _b, \
		seed0, in_place, opno, opname); exit(1); } } while (0)

static void on_alarm(int sig)
{
	char msg[160];
	int n = snprintf(msg, sizeof(msg), "t_model: one operation stuck for %d s (seed %u in_place %u op %u %s)\n",
			 WATCHDOG_S, seed0, in_place, opno, opname);
	(void)sig;
	if (write(2, msg, (size_t)n) < 0)
		_exit(1);
	_exit(1);
}

static unsigned rnd(unsigned n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (unsigned)((rng >> 11) % n);
}

static unsigned pt(void)
{
	return cfg.page_tokens;
}

static unsigned pages_of(unsigned ntok)
{
	return (ntok + pt() - 1) / pt();
}

static uint32_t new_pid(void)
{
	uint32_t id = next_pid++;
	if (id >= pid_cap) {
		uint32_t cap = pid_cap ? pid_cap * 2 : 4096;
		vid = realloc(vid, cap * sizeof(*vid));
		stamp = realloc(stamp, cap * sizeof(*stamp));
		CK(vid && stamp);
		memset(vid + pid_cap, 0, (cap - pid_cap) * sizeof(*vid));
		memset(stamp + pid_cap, 0, (cap - pid_cap) * sizeof(*stamp));
		pid_cap = cap;
	}
	return id;
}

static void grow(struct mseq *m, unsigned npg)
{
	if (npg <= m->cap)
		return;
	unsigned cap = m->cap ? m->cap : 16;
	while (cap < npg)
		cap *= 2;
	for (unsigned l = 0; l < LAYERS; l++) {
		m->pid[l] = realloc(m->pid[l], cap * sizeof(uint32_t));
		CK(m->pid[l]);
	}
	m->cap = cap;
}

static void mseq_free(struct mseq *m)
{
	for (unsigned l = 0; l < LAYERS; l++)
		free(m->pid[l]);
	memset(m, 0, sizeof(*m));
}

/* Model side of appending n tokens: new pages get new ids. */
static void model_append(struct mseq *m, unsigned n)
{
	unsigned before = pages_of(m->ntok), after = pages_of(m->ntok + n);
	grow(m, after);
	for (unsigned l = 0; l < LAYERS; l++)
		for (unsigned i = before; i < after; i++)
			m->pid[l][i] = new_pid();
	m->npg = after;
	m->ntok += n;
}

static uint32_t seed_at(const struct mseq *m, unsigned tok)
{
	for (unsigned i = m->nseg; i-- > 0;)
		if (m->seg[i].start <= tok)
			return m->seg[i].seed;
	CK(!"no segment");
	return 0;
}

static unsigned nopen(void)
{
	unsigned n = 0;
	for (unsigned i = 0; i < MAXSEQ; i++)
		n += S[i].open;
	return n;
}

static unsigned tail_pins(const struct mseq *m)
{
	return m->open && !m->parked && m->ntok % pt() ? LAYERS : 0;
}

static unsigned all_tail_pins(void)
{
	unsigned n = 0;
	for (unsigned i = 0; i < MAXSEQ; i++)
		n += tail_pins(&S[i]);
	return n;
}

static int pick_open(void)
{
	unsigned n = nopen();
	if (!n)
		return -1;
	unsigned k = rnd(n);
	for (unsigned i = 0; i < MAXSEQ; i++)
		if (S[i].open && !k--)
			return (int)i;
	return -1;
}

static int free_slot(void)
{
	for (unsigned i = 0; i < MAXSEQ; i++)
		if (!S[i].open)
			return (int)i;
	return -1;
}

/* Compare one view with the model, token by token. */
static void check_view(const struct mseq *m, unsigned layer, const struct kvt_view *v)
{
	unsigned per = cfg.n_kv_heads * cfg.head_dim;
	float k[per], vv[per];
	const float *vk = v->k, *vv_ = v->v;

	CK(v->page < m->npg);
	unsigned exp_ntok = m->ntok - v->page * pt();
	if (exp_ntok > pt())
		exp_ntok = pt();
	CK_EQ(v->ntok, exp_ntok);
	if (in_place)
		CK(v->tier == KVT_TIER_FAST || v->tier == KVT_TIER_HOST);
	else
		CK_EQ(v->tier, KVT_TIER_FAST);
	for (unsigned t = 0; t < v->ntok; t++) {
		unsigned tok = v->page * pt() + t;
		t_fill_tokens(&cfg, seed_at(m, tok), layer, tok, 1, k, vv);
		if (memcmp(vk + (size_t)t * per, k, sizeof(k)) ||
		    memcmp(vv_ + (size_t)t * per, vv, sizeof(vv))) {
			fprintf(stderr, "layer %u page %u token %u differs (tier %u, seed %u)\n",
				layer, v->page, tok, v->tier, seed_at(m, tok));
			CK(!"page contents");
		}
	}
	uint32_t id = m->pid[layer][v->page];
	if (!vid[id])
		vid[id] = v->id;
	CK_EQ(vid[id], v->id);
	CK_EQ((uint32_t)v->id, v->id & 0xffffffffu);
}

static unsigned model_unique_pages(void)
{
	unsigned n = 0;
	stamp_gen++;
	for (unsigned i = 0; i < MAXSEQ; i++) {
		if (!S[i].open)
			continue;
		for (unsigned l = 0; l < LAYERS; l++)
			for (unsigned k = 0; k < S[i].npg; k++) {
				uint32_t id = S[i].pid[l][k];
				if (stamp[id] != stamp_gen) {
					stamp[id] = stamp_gen;
					n++;
				}
			}
	}
	return n;
}

static struct seq *iseq(const struct mseq *m)
{
	return P->seqs[(uint32_t)(m->h & 0xffffff)];
}

static void check_all(void)
{
	char err[256];
	struct kvt_stats st;

	pthread_mutex_lock(&P->lock);
	int r = kvt_pager_check(P, err, sizeof(err));
	if (r)
		fprintf(stderr, "invariant: %s\n", err);
	CK_EQ(r, 0);
	for (unsigned i = 0; i < MAXSEQ; i++) {
		const struct mseq *m = &S[i];
		if (!m->open)
			continue;
		struct seq *s = iseq(m);
		CK(s->open);
		CK_EQ(s->parked, m->parked);
		for (unsigned l = 0; l < LAYERS; l++) {
			struct layer_tab *lt = &s->lt[l];
			CK_EQ(lt->n, m->npg);
			CK_EQ(lt->ntok, m->ntok);
			if (!lt->n)
				continue;
			struct page *pg = &P->pages[lt->pg[lt->n - 1]];
			if (m->ntok % pt() && !m->parked) {
				CK(pg->flags & PF_TAILPIN);
				CK(pg->frame[KVT_TIER_FAST] != NO_FRAME);
				CK_EQ(pg->ntok, m->ntok % pt());
			} else {
				CK(!(pg->flags & PF_TAILPIN));
			}
		}
	}
	/* Every batch was consumed and released: no page is wanted. */
	for (uint32_t k = 0; k < P->npages; k++)
		if (P->pages[k].state != P_FREE)
			CK_EQ(P->pages[k].want, 0);
	uint32_t doomed = 0;
	for (uint32_t k = 0; k < P->npages; k++)
		doomed += P->pages[k].state != P_FREE && (P->pages[k].flags & PF_DOOMED);
	CK_EQ(P->live_pages - doomed, model_unique_pages());
	pthread_mutex_unlock(&P->lock);

	CK_EQ(kvt_pager_stats(P, &st), 0);
	for (int ti = 0; ti < KVT_NTIERS; ti++)
		CK(st.tier[ti].used <= st.tier[ti].capacity);
	CK_EQ(st.seqs, nopen());
	/* A closed sequence's page whose move is in flight is freed when the
	 * move lands (PF_DOOMED): live until then. */
	CK(st.pages >= model_unique_pages());
	CK_EQ(st.lost_pages, 0);
	CK_EQ(st.io_errors, 0);
	CK_EQ(st.csum_failures, 0);
	CK_EQ(st.step, expect_step);

	int i = pick_open();
	if (i >= 0) {
		unsigned l = rnd(LAYERS);
		CK_EQ(kvt_seq_tokens(P, S[i].h, l), S[i].ntok);
		CK_EQ(kvt_seq_pages(P, S[i].h, l), S[i].npg);
	}
}

static void op_open(void)
{
	int i = free_slot();
	if (i < 0)
		return;
	struct mseq *m = &S[i];
	CK_EQ(kvt_seq_open(P, &m->h), 0);
	m->open = 1;
	m->seed = rnd(1u << 30) + 1;
	m->seg[0] = (struct seg){ 0, m->seed };
	m->nseg = 1;
}

static void op_close(void)
{
	int i = pick_open();
	if (i < 0)
		return;
	CK_EQ(kvt_seq_close(P, S[i].h), 0);
	mseq_free(&S[i]);
}

static void op_append(void)
{
	int i = pick_open();
	if (i < 0)
		return;
	struct mseq *m = &S[i];
	unsigned per = cfg.n_kv_heads * cfg.head_dim;
	if (m->parked) {
		float k[per], v[per];
		t_fill_tokens(&cfg, m->seed, 0, m->ntok, 1, k, v);
		CK_EQ(kvt_seq_append(P, m->h, rnd(LAYERS), k, v, 1), -EBUSY);
		return;
	}
	unsigned n = 1 + rnd(9);
	unsigned others = all_tail_pins() - tail_pins(m);
	if ((m->ntok + n) % pt() && others + LAYERS > TAIL_BUDGET) {
		/* End on a page boundary: no tail pin left. */
		n = pt() - m->ntok % pt();
	}
	t_append(P, m->h, &cfg, m->seed, m->ntok, n);
	model_append(m, n);
}

static void op_fork(void)
{
	int i = pick_open(), c = free_slot();
	if (i < 0)
		return;
	struct mseq *m = &S[i];
	kvt_seq_t h;
	if (rnd(8) == 0 || c < 0) {
		/* Beyond the length: refused, nothing opened. */
		struct kvt_stats a, b;
		CK_EQ(kvt_pager_stats(P, &a), 0);
		CK_EQ(kvt_seq_fork(P, m->h, m->ntok + 1 + rnd(5), &h), -EINVAL);
		CK_EQ(kvt_pager_stats(P, &b), 0);
		CK_EQ(b.seqs, a.seqs);
		CK_EQ(b.pages, a.pages);
		return;
	}
	if (m->nseg >= MAXSEG)
		return;
	unsigned ntok = rnd(m->ntok + 1);
	if (ntok % pt() && all_tail_pins() + LAYERS > TAIL_BUDGET)
		ntok -= ntok % pt();
	CK_EQ(kvt_seq_fork(P, m->h, ntok, &h), 0);
	struct mseq *ch = &S[c];
	ch->open = 1;
	ch->h = h;
	ch->seed = rnd(1u << 30) + 1;
	ch->nseg = 0;
	for (unsigned k = 0; k < m->nseg && m->seg[k].start < ntok; k++)
		ch->seg[ch->nseg++] = m->seg[k];
	ch->seg[ch->nseg++] = (struct seg){ ntok, ch->seed };
	ch->ntok = ntok;
	ch->npg = pages_of(ntok);
	grow(ch, ch->npg);
	for (unsigned l = 0; l < LAYERS; l++) {
		for (unsigned k = 0; k < ntok / pt(); k++)
			ch->pid[l][k] = m->pid[l][k];
		if (ntok % pt())
			ch->pid[l][ntok / pt()] = new_pid();
	}
}

static void op_acquire(void)
{
	int i = pick_open();
	if (i < 0 || !S[i].npg)
		return;
	struct mseq *m = &S[i];
	unsigned layer = rnd(LAYERS);
	uint32_t idx[16];
	unsigned cnt[4096 / 4];
	unsigned n;
	const uint32_t *list;

	if (rnd(4) == 0 && m->npg <= sizeof(cnt) / sizeof(cnt[0])) {
		list = NULL;
		n = m->npg;
	} else {
		n = 1 + rnd(m->npg < 8 ? m->npg : 8);
		for (unsigned k = 0; k < n; k++)
			idx[k] = rnd(m->npg);
		list = idx;
	}
	if (rnd(6) == 0) {
		opname = "prefetch";
		CK_EQ(kvt_prefetch(P, m->h, layer, list, list ? n : 0), 0);
		return;
	}
	if (m->npg > sizeof(cnt) / sizeof(cnt[0]))
		return;
	memset(cnt, 0, m->npg * sizeof(cnt[0]));
	for (unsigned k = 0; k < n; k++)
		cnt[list ? idx[k] : k]++;

	struct kvt_batch *b;
	struct kvt_view v;
	int r;
	CK_EQ(kvt_acquire(P, m->h, layer, list, list ? n : 0, &b), 0);
	unsigned seen = 0;
	while ((r = kvt_batch_next(b, &v)) != 0) {
		if (r < 0)
			fprintf(stderr, "kvt_batch_next(layer %u page %u): %s\n", layer, v.page, strerror(-r));
		CK_EQ(r, 1);
		CK(v.page < m->npg && cnt[v.page] > 0);
		cnt[v.page]--;
		check_view(m, layer, &v);
		seen++;
	}
	CK_EQ(seen, n);
	kvt_batch_release(b);
}

/* Residency of a sequence's pages and the tiers (lock held), for failures. */
static void dump_seq(const struct mseq *m)
{
	struct seq *s = iseq(m);
	for (int ti = 0; ti < KVT_NTIERS; ti++)
		fprintf(stderr, "%s: %u/%u free\n", kvt_tier_name(ti), P->t[ti].nfree, P->t[ti].nframes);
	for (unsigned l = 0; l < LAYERS; l++)
		for (uint32_t k = 0; k < s->lt[l].n; k++) {
			uint32_t o = s->lt[l].pg[k];
			struct page *pg = &P->pages[o];
			fprintf(stderr, "  layer %u page %u: slot %u state %u refs %u pins %u want %u flags %#x "
				"frames %d %d %d\n", l, k, o, pg->state, pg->refs, pg->pins, pg->want,
				pg->flags, (int)pg->frame[0], (int)pg->frame[1], (int)pg->frame[2]);
		}
}

static void op_park(void)
{
	int i = pick_open();
	if (i < 0)
		return;
	struct mseq *m = &S[i];
	if (m->parked) {
		if ((m->ntok % pt() ? LAYERS : 0) + all_tail_pins() > TAIL_BUDGET)
			return;
		opname = "resume";
		CK_EQ(kvt_seq_resume(P, m->h), 0);
		m->parked = 0;
		return;
	}
	CK_EQ(kvt_seq_park(P, m->h), 0);
	m->parked = 1;
	/* No page of a parked sequence stays in the fast tier unless another,
	 * unparked, sequence shares it (then prefetch for that one may bring
	 * it back). Pages queued for prefetch before the park may come back. */
	pthread_mutex_lock(&P->lock);
	struct seq *s = iseq(m);
	for (unsigned l = 0; l < LAYERS; l++)
		for (uint32_t k = 0; k < s->lt[l].n; k++) {
			struct page *pg = &P->pages[s->lt[l].pg[k]];
			if (pg->frame[KVT_TIER_FAST] == NO_FRAME || pg->refs > 1)
				continue;
			if (pg->flags & (PF_PREFETCHED | PF_PFMOVE))
				continue;
			fprintf(stderr, "parked: layer %u page %u still in the fast tier (flags %#x pins %u)\n",
				l, k, pg->flags, pg->pins);
			dump_seq(m);
			CK(!"parked page in the fast tier");
		}
	pthread_mutex_unlock(&P->lock);
}

static void op_drain(void)
{
	int tier = rnd(2) ? KVT_TIER_FAST : KVT_TIER_HOST;
	opname = tier == KVT_TIER_FAST ? "drain fast" : "drain host";
	int r = kvt_pager_drain(P, tier);
	if (r == -EBUSY) {
		/* Only tail pins stay up (no batch is held here). */
		CK(all_tail_pins() > 0);
	} else {
		CK_EQ(r, 0);
	}
	if (tier != KVT_TIER_FAST)
		return;
	/* What is left (or came back) is pinned, or was brought up by a
	 * prefetch queued earlier. No batch is held: nothing is demanded. */
	pthread_mutex_lock(&P->lock);
	struct tier *t = &P->t[KVT_TIER_FAST];
	for (uint32_t f = 0; f < t->nframes; f++) {
		uint32_t o = t->owner[f];
		if (o == NO_PAGE)
			continue;
		struct page *pg = &P->pages[o];
		if (!pg->pins && pg->state == P_READY && !(pg->flags & PF_PREFETCHED)) {
			fprintf(stderr, "drain fast: returned %d, page slot %u in frame %u afterwards "
				"(flags %#x want %u frames %d %d %d)\n", r, o, f, pg->flags, pg->want,
				(int)pg->frame[0], (int)pg->frame[1], (int)pg->frame[2]);
			CK(!"unpinned page left after drain");
		}
	}
	pthread_mutex_unlock(&P->lock);
}

/* A directed case first: one sequence of 22 full pages per layer, written
 * layer by layer, leaves layer 2's pages 10..21 in the fast tier (full,
 * nothing pinned) and 0..9 in the host tier (full). A batch of exactly
 * those 10 host pages must still come up: the fast tier's pages can go
 * to NVMe by way of the host tier. */
static void big_batch(void)
{
	struct mseq *m = &S[0];
	uint32_t idx[10];
	struct kvt_batch *b;
	struct kvt_view v;
	int r;

	opname = "big batch";
	op_open();
	t_append(P, m->h, &cfg, m->seed, 0, 22 * pt());
	model_append(m, 22 * pt());
	check_all();
	pthread_mutex_lock(&P->lock);
	struct layer_tab *lt = &iseq(m)->lt[2];
	for (unsigned i = 0; i < 22; i++) {
		struct page *pg = &P->pages[lt->pg[i]];
		CK_EQ(pg->top, i < 10 ? KVT_TIER_HOST : KVT_TIER_FAST);
		CK_EQ(pg->pins, 0);
	}
	CK_EQ(P->t[KVT_TIER_FAST].nfree, 0);
	CK_EQ(P->t[KVT_TIER_HOST].nfree, 0);
	pthread_mutex_unlock(&P->lock);
	for (unsigned i = 0; i < 10; i++)
		idx[i] = i;
	CK_EQ(kvt_acquire(P, m->h, 2, idx, 10, &b), 0);
	unsigned seen = 0;
	while ((r = kvt_batch_next(b, &v)) != 0) {
		if (r < 0)
			fprintf(stderr, "kvt_batch_next(layer 2 page %u): %s\n", v.page, strerror(-r));
		CK_EQ(r, 1);
		CK(v.page < 10);
		check_view(m, 2, &v);
		seen++;
	}
	CK_EQ(seen, 10);
	kvt_batch_release(b);
	check_all();
	CK_EQ(kvt_seq_close(P, m->h), 0);
	mseq_free(m);
	check_all();
}

static void run(uint32_t seed, unsigned ops, unsigned inplace)
{
	struct kvt_device *dev;

	seed0 = seed;
	in_place = inplace;
	rng = seed * 0x9E3779B97F4A7C15ull + 1;
	t_config(&cfg, LAYERS, 12, 10, 400);
	cfg.host_in_place = (int)inplace;
	/* The directed cases name where LRU leaves pages. */
	for (int t = 0; t < KVT_NTIERS; t++)
		snprintf(cfg.tier[t].policy, sizeof(cfg.tier[t].policy), "lru");
	P = t_open(&cfg, &dev);
	memset(S, 0, sizeof(S));
	expect_step = 0;

	for (opno = 0; opno < ops; opno++) {
		unsigned w = rnd(100);
		alarm(WATCHDOG_S);
		if (w < 6) {
			opname = "open";
			op_open();
		} else if (w < 10) {
			opname = "close";
			op_close();
		} else if (w < 16) {
			opname = "fork";
			op_fork();
		} else if (w < 46) {
			opname = "append";
			op_append();
		} else if (w < 78) {
			opname = "acquire";
			op_acquire();
		} else if (w < 86) {
			opname = "step";
			CK_EQ(kvt_pager_step(P), ++expect_step);
		} else if (w < 95) {
			opname = "park";
			op_park();
		} else {
			op_drain();
		}
		check_all();
	}
	/* Everything still reads back, then close it all: the tiers are empty. */
	opname = "final";
	alarm(WATCHDOG_S);
	for (unsigned i = 0; i < MAXSEQ; i++) {
		if (!S[i].open)
			continue;
		for (unsigned l = 0; l < LAYERS && S[i].npg; l++) {
			struct kvt_batch *b;
			struct kvt_view v;
			int r;
			CK_EQ(kvt_acquire(P, S[i].h, l, NULL, 0, &b), 0);
			unsigned seen = 0;
			while ((r = kvt_batch_next(b, &v)) != 0) {
				CK_EQ(r, 1);
				check_view(&S[i], l, &v);
				seen++;
			}
			CK_EQ(seen, S[i].npg);
			kvt_batch_release(b);
		}
		CK_EQ(kvt_seq_close(P, S[i].h), 0);
		mseq_free(&S[i]);
	}
	check_all();
	/* Pages freed while moving go when their move lands: allow 1 s
	 * (times t_slow()). */
	struct kvt_stats st;
	for (int tries = 0;; tries++) {
		CK_EQ(kvt_pager_stats(P, &st), 0);
		if (!st.pages && !st.tier[0].used && !st.tier[1].used && !st.tier[2].used)
			break;
		if (tries == 100 * (int)t_slow()) {
			fprintf(stderr, "after closing all: pages %llu used %llu %llu %llu\n",
				(unsigned long long)st.pages, (unsigned long long)st.tier[0].used,
				(unsigned long long)st.tier[1].used, (unsigned long long)st.tier[2].used);
			CK(!"pages left after closing every sequence");
		}
		usleep(10000);
	}
	alarm(WATCHDOG_S);
	big_batch();
	alarm(0);
	t_close(P, dev);
}

int main(int argc, char **argv)
{
	uint32_t seed = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 0) : 12345;
	unsigned ops = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 0) : t_scale(2000);

	int only = argc > 3 ? atoi(argv[3]) : -1;	/* 0 or 1: that pass only */

	signal(SIGALRM, on_alarm);
	if (only != 1)
		run(seed, ops, 0);
	if (only != 0)
		run(seed + 1, ops, 1);
	free(vid);
	free(stamp);
	return 0;
}
