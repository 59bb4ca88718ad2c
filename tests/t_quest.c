/* SPDX-License-Identifier: MIT */
/*
 * The Quest page selector (kvt_engine_params.select_*).
 *
 * 1. The bound: for random pages, kvt_attn_key_bound is at least the
 *    largest scaled logit of any key of the page over the query heads,
 *    and equals it for a page of one token.
 * 2. K at or above the layer's pages (pages=K, frac=1) is the full
 *    attention: logits within 1e-6 relative of the paged full path and
 *    within 1e-4 of the dense path, the same tokens, nothing skipped.
 * 3. Where attention is peaked (planted keys among random ones), the top
 *    pages by the bound keep most of the mass.
 * 4. Smaller K: decoding the full path's tokens (teacher forcing), the
 *    logits' relative error and the top-1 agreement with full attention,
 *    and the share of layer 0's true attention mass on the pages kept
 *    (against K/pages for a random pick), printed for K = 1/2, 1/4,
 *    1/8 of the pages; asserted loosely (see the bounds below). Pages
 *    left out are never acquired: the pager hands out exactly the pages
 *    attended. The synthetic models' attention is diffuse (random
 *    weights: every logit near 0, each page's mass near 1/pages), so no
 *    selection can keep much more than its share of the pages there, and
 *    dropping pages moves the output a lot: these numbers say how the
 *    error grows as K shrinks, not how Quest does on a trained model,
 *    whose heads are peaked (what 3 is about).
 * 5. Bounds after a fork inside a page and after a restore: a child
 *    forked at a token inside a page and a session restored from a save
 *    made at that token hold the same K, so with the selector on they
 *    decode to the same logits.
 * 6. The choice: in every layer of every step, the pages attended are
 *    the first ones, the tail and the best by the bound over the keys
 *    read back from the session.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/model_common.h"
#include "kernels/cpu/qdots.h"
#include "runtime/gguf.h"
#include "runtime/infer.h"
#include "runtime/synth.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd32(void)
{
	rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

static unsigned rndn(unsigned n) { return rnd32() % n; }
static float rndf(void) { return (float)rnd32() / 2147483648.0f - 1.0f; }

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	CHECK(p);
	return p;
}

/* ---- 1. the bound ---- */

static void test_bound(void)
{
	static const unsigned geo[][3] = { { 4, 4, 64 }, { 8, 2, 64 }, { 4, 1, 32 }, { 6, 3, 20 } };
	unsigned cases = 0;
	double tight = 0;

	for (int simd = kvt_cpu_simd(); simd >= 0; simd--)	/* every path */
	for (unsigned g = 0; g < sizeof(geo) / sizeof(geo[0]); g++) {
		kvt_cpu_set_simd_max(simd);
		unsigned nh = geo[g][0], nkv = geo[g][1], hd = geo[g][2], G = nh / nkv;
		struct kvt_attn_shape sh = { 1, nh, nkv, hd, 1.0f / sqrtf((float)hd), KVT_KV_F32 };
		unsigned np = 40, T = 16;
		float *k = xmalloc((size_t)np * T * nkv * hd * 4), *b = xmalloc((size_t)np * nkv * 2 * hd * 4);
		float *q = xmalloc((size_t)nh * hd * 4), *sc = xmalloc(np * 4);

		for (size_t i = 0; i < (size_t)np * T * nkv * hd; i++)
			k[i] = rndf() * (1 + (float)(i % 7));
		for (unsigned i = 0; i < nh * hd; i++)
			q[i] = rndf() * 3;
		/* Page j holds 1 + j % T tokens: page 0, 16, 32 a single one. */
		for (unsigned j = 0; j < np; j++)
			for (unsigned kh = 0; kh < nkv; kh++) {
				float *mn = b + ((size_t)j * nkv + kh) * 2 * hd, *mx = mn + hd;

				for (unsigned i = 0; i < hd; i++) {
					mn[i] = INFINITY;
					mx[i] = -INFINITY;
					for (unsigned t = 0; t <= j % T; t++) {
						float x = k[(((size_t)j * T + t) * nkv + kh) * hd + i];

						mn[i] = fminf(mn[i], x);
						mx[i] = fmaxf(mx[i], x);
					}
				}
			}
		kvt_attn_key_bound(&sh, q, b, np, sc);
		for (unsigned j = 0; j < np; j++) {
			double best = -INFINITY, mag = 0;

			for (unsigned h = 0; h < nh; h++)
				for (unsigned t = 0; t <= j % T; t++) {
					double d = 0, a = 0;

					for (unsigned i = 0; i < hd; i++) {
						double x = (double)q[h * hd + i] *
							   k[(((size_t)j * T + t) * nkv + h / G) * hd + i];
						d += x;
						a += fabs(x);
					}
					best = fmax(best, d * sh.scale);
					mag = fmax(mag, a * sh.scale);
				}
			/* f32 sums in another order: a rounding's worth of slack. */
			if (!(sc[j] >= best - 1e-5 * mag)) {
				fprintf(stderr, "bound: geometry %u/%u/%u page %u: bound %.7g below the "
					"largest logit %.7g\n", nh, nkv, hd, j, sc[j], best);
				exit(1);
			}
			if (j % T == 0) {
				CHECK(fabs(sc[j] - best) <= 1e-5 * mag);
				tight = fmax(tight, fabs(sc[j] - best) / mag);
			}
			cases++;
		}
		free(k); free(b); free(q); free(sc);
	}
	kvt_cpu_set_simd_max(2);
	printf("bound: %u pages, never below the largest logit; one-token pages within %.1e\n",
	       cases, tight);
}

/* Where attention is peaked, the bound finds the pages that matter: among
 * pages of random keys a few far back hold one key aligned with the
 * queries of its KV head (a logit of 10 or more where the others are
 * near 0); the top K
 * pages by the bound, with the first and the tail as the engine takes
 * them, must keep most of the true attention mass, far more than the
 * most recent K pages. Returns the mass kept. */
static double needles(unsigned nh, unsigned nkv, unsigned hd, unsigned np, unsigned T,
		      unsigned n_needle, unsigned K, double *recent)
{
	struct kvt_attn_shape sh = { 1, nh, nkv, hd, 1.0f / sqrtf((float)hd), KVT_KV_F32 };
	unsigned G = nh / nkv, n = np * T, *order = xmalloc(np * sizeof(unsigned));
	float *k = xmalloc((size_t)n * nkv * hd * 4), *b = xmalloc((size_t)np * nkv * 2 * hd * 4);
	float *q = xmalloc((size_t)nh * hd * 4), *sc = xmalloc(np * 4), *u = xmalloc(hd * 4);
	double *pm = xmalloc(np * sizeof(double)), *s = xmalloc(n * sizeof(double)), kept = 0;
	char *keep = xmalloc(np);

	for (size_t i = 0; i < (size_t)n * nkv * hd; i++)
		k[i] = rndf();
	for (unsigned i = 0; i < nh * hd; i++)
		q[i] = rndf();
	for (unsigned i = 0; i < n_needle; i++) {
		/* Far back: not the first page, nor among the last K. */
		unsigned j = 1 + rndn(np - K - 1), t = j * T + rndn(T);

		for (unsigned g = 0; g < nkv; g++) {
			double nrm = 0, lo = INFINITY;

			for (unsigned x = 0; x < hd; x++) {
				u[x] = 0;
				for (unsigned h = g * G; h < (g + 1) * G; h++)
					u[x] += q[h * hd + x];
				nrm += (double)u[x] * u[x];
			}
			for (unsigned h = g * G; h < (g + 1) * G; h++) {
				double d = 0;

				for (unsigned x = 0; x < hd; x++)
					d += q[h * hd + x] * u[x] / sqrt(nrm);
				lo = fmin(lo, d);
			}
			for (unsigned x = 0; x < hd; x++)	/* logit >= 10 for every head */
				k[((size_t)t * nkv + g) * hd + x] = (float)(u[x] / sqrt(nrm) * 10 / (sh.scale * lo));
		}
	}
	for (unsigned j = 0; j < np; j++)
		for (unsigned g = 0; g < nkv; g++) {
			float *mn = b + ((size_t)j * nkv + g) * 2 * hd, *mx = mn + hd;

			for (unsigned x = 0; x < hd; x++) {
				mn[x] = INFINITY;
				mx[x] = -INFINITY;
				for (unsigned t = j * T; t < (j + 1) * T; t++) {
					mn[x] = fminf(mn[x], k[((size_t)t * nkv + g) * hd + x]);
					mx[x] = fmaxf(mx[x], k[((size_t)t * nkv + g) * hd + x]);
				}
			}
		}
	/* The true mass per page, averaged over the heads. */
	for (unsigned j = 0; j < np; j++)
		pm[j] = 0;
	for (unsigned h = 0; h < nh; h++) {
		double mx = -INFINITY, sum = 0;

		for (unsigned t = 0; t < n; t++) {
			double d = 0;

			for (unsigned x = 0; x < hd; x++)
				d += (double)q[h * hd + x] * k[((size_t)t * nkv + h / G) * hd + x];
			s[t] = d * sh.scale;
			mx = fmax(mx, s[t]);
		}
		for (unsigned t = 0; t < n; t++)
			sum += s[t] = exp(s[t] - mx);
		for (unsigned t = 0; t < n; t++)
			pm[t / T] += s[t] / sum / nh;
	}
	/* The engine's rule: the first page, the tail, the best K - 2 of the rest. */
	kvt_attn_key_bound(&sh, q, b, np, sc);
	for (unsigned j = 0; j < np; j++)
		order[j] = j;
	for (unsigned a = 1; a + 1 < np; a++)	/* selection sort of 1 .. np - 2 by bound */
		for (unsigned c = a + 1; c + 1 < np; c++)
			if (sc[order[c]] > sc[order[a]]) {
				unsigned x = order[a];
				order[a] = order[c];
				order[c] = x;
			}
	memset(keep, 0, np);
	keep[0] = keep[np - 1] = 1;
	for (unsigned a = 1; a < K - 1; a++)
		keep[order[a]] = 1;
	*recent = pm[0];
	for (unsigned j = 0; j < np; j++) {
		kept += keep[j] ? pm[j] : 0;
		*recent += j >= np - (K - 1) ? pm[j] : 0;
	}
	free(order); free(k); free(b); free(q); free(sc); free(u); free(pm); free(s); free(keep);
	return kept;
}

static void test_needles(void)
{
	static const unsigned geo[][3] = { { 8, 8, 64 }, { 8, 2, 64 }, { 8, 1, 128 } };
	double worst = 1, worst_recent = 0;

	for (unsigned g = 0; g < sizeof(geo) / sizeof(geo[0]); g++)
		for (unsigned rep = 0; rep < 4; rep++) {
			double recent, kept = needles(geo[g][0], geo[g][1], geo[g][2], 128, 16, 4, 16, &recent);

			if (!(kept >= 0.9 && kept >= 3 * recent)) {
				fprintf(stderr, "needles %u/%u/%u: the top 16 of 128 pages by the bound keep "
					"%.3f of the mass, the recent 16 %.3f\n", geo[g][0], geo[g][1],
					geo[g][2], kept, recent);
				exit(1);
			}
			worst = fmin(worst, kept);
			worst_recent = fmax(worst_recent, recent);
		}
	printf("needles: 4 pages of 128 hold a key the queries attend to; the top 16 by the bound "
	       "keep >= %.1f%% of the mass (the most recent 16: <= %.1f%%)\n", 100 * worst,
	       100 * worst_recent);
}

/* ---- the engine ---- */

/* Layer 0's masses of the last decode step (its q depends on the token
 * alone, so engines fed the same tokens share it). */
struct seen {
	float *mass;
	unsigned n;
};

static void on_attn(void *arg, const struct kvt_session *s, unsigned layer, const float *q,
		    const float *mass, unsigned n)
{
	struct seen *w = arg;

	(void)s; (void)q;
	if (layer)
		return;
	memcpy(w->mass, mass, n * sizeof(float));
	w->n = n;
}

/* sel NULL: dense; "full": paged, all pages; else a selector spec. roomy:
 * a fast tier that holds everything (pages come in list order) instead
 * of one that holds a fifth. */
static void rig_open(struct rig *r, struct kvt_model *m, int kv_type, unsigned pt, unsigned n_ctx,
		     unsigned threads, const char *sel, int roomy, struct seen *w)
{
	struct kvt_engine_params ep;
	uint64_t pages;
	char err[512];

	memset(r, 0, sizeof(*r));
	kvt_engine_params_default(&ep);
	ep.n_ctx = n_ctx;
	ep.kv_type = kv_type;
	ep.chunk = 64;
	ep.n_threads = threads;
	ep.dense = !sel;
	if (w) {
		ep.on_attn = on_attn;
		ep.on_attn_arg = w;
	}
	if (sel && kvt_select_parse(&ep, sel, err, sizeof(err))) {
		fprintf(stderr, "%s\n", err);
		exit(1);
	}
	if (sel) {
		pages = (uint64_t)m->hp.n_layer * 3 * ((n_ctx + pt - 1) / pt);	/* three sessions */
		r->p = t_open_model_pager(m, kv_type, pt,
					  roomy ? pages + 16 : pages / 15 > 4 * m->hp.n_layer ?
					  pages / 15 : 4 * m->hp.n_layer,
					  pages / 12 > 4 ? pages / 12 : 4, pages + 32, NULL, &r->dev);
	}
	rig_engine(r, m, &ep);
}

/* What a decode phase did, from the pager's and the engine's counters. */
struct phase {
	uint64_t acquires, nvme_read, attended, skipped, bytes_skipped;
};

/* Prefill, then decode gen tokens: greedy when force is 0 (written to
 * toks), else toks. logits (gen, V) out; with w, layer 0's masses of
 * each step into mass0 (gen, mp). */
static void run(struct rig *r, uint32_t V, const int32_t *prompt, unsigned np, int32_t *toks,
		unsigned gen, int force, float *logits, struct seen *w, float *mass0, unsigned mp,
		struct phase *ph)
{
	struct kvt_engine_stats e0, e1;
	struct kvt_stats s0, s1;
	struct kvt_session *s;

	CHECK_EQ(kvt_session_new(r->e, &s), 0);
	CHECK_EQ(kvt_eval(r->e, s, prompt, np, NULL, NULL), 0);
	if (r->p)
		CHECK_EQ(kvt_pager_stats(r->p, &s0), 0);
	kvt_engine_stats(r->e, &e0);
	for (unsigned i = 0; i < gen; i++) {
		const float *lg = kvt_session_logits(s);

		CHECK(lg);
		memcpy(logits + (size_t)i * V, lg, V * sizeof(float));
		if (!force)
			toks[i] = t_argmax(lg, V);
		CHECK_EQ(kvt_decode(r->e, &s, &toks[i], 1), 1);
		if (w) {
			CHECK(w->n <= mp);
			memcpy(mass0 + (size_t)i * mp, w->mass, w->n * sizeof(float));
		}
	}
	kvt_engine_stats(r->e, &e1);
	if (r->p && ph) {
		CHECK_EQ(kvt_pager_stats(r->p, &s1), 0);
		ph->acquires = s1.acquires - s0.acquires;
		ph->nvme_read = s1.tier[KVT_TIER_NVME].bytes_out - s0.tier[KVT_TIER_NVME].bytes_out;
		ph->attended = e1.pages_attended - e0.pages_attended;
		ph->skipped = e1.pages_skipped - e0.pages_skipped;
		ph->bytes_skipped = e1.bytes_skipped - e0.bytes_skipped;
		CHECK_EQ(ph->bytes_skipped, ph->skipped * kvt_pager_page_bytes(r->p));
	}
	CHECK_EQ(kvt_session_error(s), 0);
	kvt_session_free(r->e, s);
}

static void prompt_tokens(int32_t *t, unsigned n, uint32_t n_vocab)
{
	for (unsigned i = 0; i < n; i++)
		t[i] = (int32_t)(3 + rndn(n_vocab - 3));
}

/* ---- 2. K at or above the pages: the full attention ---- */

static void test_full(const char *name, const struct kvt_synth *syn, int kv_type, unsigned pt,
		      unsigned np, unsigned gen)
{
	struct kvt_model *m = make_model(syn, name);
	uint32_t V = m->hp.n_vocab;
	unsigned n_ctx = np + gen + 1, maxp = (n_ctx + pt - 1) / pt;
	int32_t *prompt = xmalloc(np * 4), tref[64], tgot[64];
	float *dense = xmalloc((size_t)gen * V * 4), *full = xmalloc((size_t)gen * V * 4);
	float *got = xmalloc((size_t)gen * V * 4);
	char spec[2][64];
	struct phase ph;
	struct rig r;

	CHECK(gen <= 64);
	prompt_tokens(prompt, np, V);
	rig_open(&r, m, kv_type, pt, n_ctx, 1, NULL, 0, NULL);
	run(&r, V, prompt, np, tref, gen, 0, dense, NULL, NULL, 0, NULL);
	rig_close(&r);
	rig_open(&r, m, kv_type, pt, n_ctx, 1, "full", 1, NULL);
	run(&r, V, prompt, np, tref, gen, 1, full, NULL, NULL, 0, NULL);
	rig_close(&r);
	snprintf(spec[0], sizeof(spec[0]), "quest:pages=%u", maxp + rndn(3));
	snprintf(spec[1], sizeof(spec[1]), "quest:frac=1,sink=3");
	for (int k = 0; k < 2; k++)
		for (int roomy = 1; roomy >= 0; roomy--) {
			double e_full = 0, e_dense = 0;

			/* Roomy and one thread: pages fold in the same order as
			 * the full path's, so the logits must match to rounding.
			 * Paging over two threads: to the dense path's tolerance. */
			rig_open(&r, m, kv_type, pt, n_ctx, roomy ? 1 : 2, spec[k], roomy, NULL);
			run(&r, V, prompt, np, tgot, gen, 0, got, NULL, NULL, 0, &ph);
			rig_close(&r);
			for (unsigned i = 0; i < gen; i++) {
				e_full = fmax(e_full, t_rel_err(got + (size_t)i * V, full + (size_t)i * V, V));
				e_dense = fmax(e_dense, t_rel_err(got + (size_t)i * V, dense + (size_t)i * V, V));
				CHECK_EQ(tgot[i], tref[i]);
			}
			CHECK_EQ(ph.skipped, 0);
			CHECK_EQ(ph.acquires, ph.attended);
			CHECK(e_dense <= 1e-4);
			if (roomy && !(e_full <= 1e-6)) {
				fprintf(stderr, "%s %s: relative error %.3g against the full path\n",
					name, spec[k], e_full);
				exit(1);
			}
			printf("%-14s %-22s %-12s %u pages, %u steps: same tokens; relative error %.2e "
			       "against the full path, %.2e against the dense path\n", name, spec[k],
			       roomy ? "1 thread" : "paged, 2 thr", maxp, gen, e_full, e_dense);
		}
	free(prompt); free(dense); free(full); free(got);
	kvt_model_free(m);
}

/* ---- 3. smaller K: how close ---- */

static void test_approx(const char *name, const struct kvt_synth *syn, int kv_type, unsigned pt,
			unsigned np, unsigned gen)
{
	struct kvt_model *m = make_model(syn, name);
	uint32_t V = m->hp.n_vocab;
	unsigned n_ctx = np + gen + 1, mp = (n_ctx + pt - 1) / pt + 2;
	int32_t *prompt = xmalloc(np * 4), *toks = xmalloc(gen * 4);
	float *full = xmalloc((size_t)gen * V * 4), *got = xmalloc((size_t)gen * V * 4);
	float *m_full = xmalloc((size_t)gen * mp * 4), *m_got = xmalloc((size_t)gen * mp * 4);
	struct seen w = { xmalloc(mp * 4), 0 };
	static const unsigned div[] = { 2, 4, 8 };
	double half_err = 0;
	struct phase pf, ph;
	struct rig r;

	prompt_tokens(prompt, np, V);
	rig_open(&r, m, kv_type, pt, n_ctx, 2, "full", 0, &w);
	run(&r, V, prompt, np, toks, gen, 0, full, &w, m_full, mp, &pf);
	rig_close(&r);
	CHECK_EQ(pf.skipped, 0);
	printf("%-14s full attention: %u prompt tokens, %u pages of %u tokens, %u steps; "
	       "NVMe %.1f KiB read per step\n", name, np, (np + pt - 1) / pt, pt, gen,
	       pf.nvme_read / 1024.0 / gen);
	for (unsigned d = 0; d < sizeof(div) / sizeof(div[0]); d++) {
		unsigned K = (np / pt + 1) / div[d], agree = 0;
		double worst = 0, mean = 0, cap = 0, frac = 0, base = 0;
		char spec[64];

		snprintf(spec, sizeof(spec), "quest:pages=%u", K);
		rig_open(&r, m, kv_type, pt, n_ctx, 2, spec, 0, &w);
		run(&r, V, prompt, np, toks, gen, 1, got, &w, m_got, mp, &ph);
		rig_close(&r);
		for (unsigned i = 0; i < gen; i++) {
			const float *a = got + (size_t)i * V, *b = full + (size_t)i * V;
			unsigned n = (np + i + 1 + pt - 1) / pt, kept = 0;
			double e = t_rel_err(a, b, V), c = 0, forced = m_full[(size_t)i * mp + n - 1];

			worst = fmax(worst, e);
			mean += e / gen;
			agree += t_argmax(a, V) == t_argmax(b, V);
			/* Layer 0 sees the same q and K in both: the true mass on
			 * the pages this one kept. */
			for (unsigned j = 0; j < n; j++)
				if (m_got[(size_t)i * mp + j] > 0) {
					c += m_full[(size_t)i * mp + j];
					kept++;
				}
			CHECK_EQ(kept, K < n ? K : n);
			cap += c / gen;
			frac += (double)kept / n / gen;
			/* A random pick of the same count besides the forced first
			 * page and (short) tail keeps this on average. */
			forced += m_full[(size_t)i * mp];
			base += (forced + (1 - forced) * (kept - 2) / (n - 2)) / gen;
		}
		CHECK(ph.skipped > 0);
		CHECK_EQ(ph.acquires, ph.attended);	/* the rest were never acquired */
		CHECK(ph.nvme_read <= pf.nvme_read);
		printf("%-14s %-18s top-1 agreement %u/%u, logit error mean %.3f max %.3f; layer 0 "
		       "keeps %.1f%% of the true attention mass on %.1f%% of the pages (a random pick: "
		       "%.1f%%); skipped %llu pages (%.1f KiB/step), NVMe %.1f KiB read per step\n",
		       name, spec, agree, gen, mean, worst, 100 * cap, 100 * frac, 100 * base,
		       (unsigned long long)ph.skipped,
		       ph.bytes_skipped / 1024.0 / gen, ph.nvme_read / 1024.0 / gen);
		/* Loose bounds, measured on these seeded models (whose attention
		 * is diffuse: see the header): about what a random pick of as
		 * many pages keeps (0.97 to 1.02 of it measured) where it picks a
		 * few, at half the pages the same top token on a sixth of the
		 * steps at least (10/24 and 17/24 measured, 6/24 at
		 * KVT_TEST_SCALE=4; 8 to 24 of 24 with other prompts; chance
		 * would be 1/V), and less error with more pages. */
		if (K >= 6)
			CHECK(cap >= 0.9 * base);
		if (div[d] == 2) {
			CHECK(agree * 6 >= gen);
			half_err = mean;
		}
		if (div[d] == 8)
			CHECK(mean > half_err);
	}
	free(prompt); free(toks); free(full); free(got); free(m_full); free(m_got); free(w.mass);
	kvt_model_free(m);
}

/* ---- 4. bounds after a fork inside a page and after a restore ---- */

static void test_fork_restore(const struct kvt_synth *syn, int kv_type, unsigned pt, unsigned np,
			      unsigned gen)
{
	struct kvt_model *m = make_model(syn, "fork");
	uint32_t V = m->hp.n_vocab;
	unsigned cut = np / 2 + pt / 2 + 1, n_ctx = np + gen + 1;
	int32_t *prompt = xmalloc(np * 4), *toks = xmalloc(gen * 4);
	float *a = xmalloc((size_t)gen * V * 4), *b = xmalloc((size_t)gen * V * 4);
	struct kvt_session *s, *c, *rs;
	char path[512], err[512], spec[64];
	double worst = 0;
	struct rig r;

	CHECK(cut % pt);
	prompt_tokens(prompt, np, V);
	prompt_tokens(toks, gen, V);
	snprintf(path, sizeof(path), "%s/quest-%d.session", t_dir(), (int)getpid());
	snprintf(spec, sizeof(spec), "quest:pages=%u", (cut / pt + 1) / 3 + 1);
	rig_open(&r, m, kv_type, pt, n_ctx, 1, spec, 1, NULL);
	CHECK_EQ(kvt_session_new(r.e, &s), 0);
	CHECK_EQ(kvt_eval(r.e, s, prompt, cut, NULL, NULL), 0);
	if (kvt_session_save(r.e, s, path, err, sizeof(err))) {
		fprintf(stderr, "save: %s\n", err);
		exit(1);
	}
	CHECK_EQ(kvt_eval(r.e, s, prompt + cut, np - cut, NULL, NULL), 0);
	CHECK_EQ(kvt_session_fork(r.e, s, cut, &c), 0);
	kvt_session_free(r.e, s);
	if (kvt_session_restore(r.e, path, &rs, err, sizeof(err))) {
		fprintf(stderr, "restore: %s\n", err);
		exit(1);
	}
	unlink(path);
	/* Past the end of the page the fork copied, so its bounds count. */
	for (unsigned i = 0; i < gen; i++) {
		CHECK_EQ(kvt_decode(r.e, &c, &toks[i], 1), 1);
		memcpy(a + (size_t)i * V, kvt_session_logits(c), V * sizeof(float));
		CHECK_EQ(kvt_decode(r.e, &rs, &toks[i], 1), 1);
		memcpy(b + (size_t)i * V, kvt_session_logits(rs), V * sizeof(float));
		worst = fmax(worst, t_rel_err(a + (size_t)i * V, b + (size_t)i * V, V));
	}
	CHECK(worst <= 1e-6);
	printf("fork at token %u (inside page %u) and restore, %s: %u steps, logits within %.1e\n",
	       cut, cut / pt, spec, gen, worst);
	kvt_session_free(r.e, c);
	kvt_session_free(r.e, rs);
	rig_close(&r);
	free(prompt); free(toks); free(a); free(b);
	kvt_model_free(m);
}

/* ---- 6. the choice, layer by layer ---- */

/* Every layer's q and masses of the last decode step. */
struct all_seen {
	unsigned n_layer, qn, mp;
	float *q, *mass;
	unsigned *n;
};

static void on_attn_all(void *arg, const struct kvt_session *s, unsigned layer, const float *q,
			const float *mass, unsigned n)
{
	struct all_seen *w = arg;

	(void)s;
	CHECK(layer < w->n_layer && n <= w->mp);
	memcpy(w->q + (size_t)layer * w->qn, q, w->qn * sizeof(float));
	memcpy(w->mass + (size_t)layer * w->mp, mass, n * sizeof(float));
	w->n[layer] = n;
}

/* The pages each layer attended to (mass > 0) are exactly the first sink,
 * the tail and the best K - sink - 1 of the rest by the bound over keys
 * read back from the session: the bounds the engine keeps as K rows come
 * in (prefill chunks, decode rows) are those of the stored keys. */
static void test_choice(const struct kvt_synth *syn, int kv_type, unsigned pt, unsigned np,
			unsigned gen, unsigned K, unsigned sink)
{
	struct kvt_model *m = make_model(syn, "choice");
	const struct kvt_hparams *hp = &m->hp;
	unsigned n_ctx = np + gen + 1, mp = n_ctx / pt + 2, nkv = hp->n_head_kv, hd = hp->head_dim;
	struct kvt_attn_shape sh = { 1, hp->n_head, nkv, hd, 1.0f / sqrtf((float)hd), kv_type };
	size_t esz = kv_type == KVT_KV_F16 ? 2 : 4, row = (size_t)nkv * hd;
	struct all_seen w = { hp->n_layer, hp->n_head * hd, mp, NULL, NULL, NULL };
	uint8_t *k = xmalloc(n_ctx * row * esz), *v = xmalloc(n_ctx * row * esz);
	float *kf = xmalloc(n_ctx * row * 4), *b = xmalloc((size_t)mp * 2 * row * 4), *sc = xmalloc(mp * 4);
	int32_t *prompt = xmalloc(np * 4), tok;
	struct kvt_engine_params ep;
	struct kvt_session *s;
	struct rig r;
	char spec[64], err[256];
	unsigned checked = 0;

	w.q = xmalloc((size_t)hp->n_layer * w.qn * 4);
	w.mass = xmalloc((size_t)hp->n_layer * mp * 4);
	w.n = xmalloc(hp->n_layer * sizeof(unsigned));
	prompt_tokens(prompt, np, hp->n_vocab);
	snprintf(spec, sizeof(spec), "quest:pages=%u,sink=%u", K, sink);
	rig_open(&r, m, kv_type, pt, n_ctx, 2, spec, 0, NULL);
	/* on_attn_all instead of on_attn: a second engine over the same pager. */
	ep = *kvt_engine_params(r.e);
	ep.on_attn = on_attn_all;
	ep.on_attn_arg = &w;
	kvt_engine_free(r.e);
	if (kvt_engine_new(m, r.p, &ep, &r.e, err, sizeof(err))) {
		fprintf(stderr, "engine: %s\n", err);
		exit(1);
	}
	CHECK_EQ(kvt_session_new(r.e, &s), 0);
	CHECK_EQ(kvt_eval(r.e, s, prompt, np, NULL, NULL), 0);
	for (unsigned i = 0; i < gen; i++) {
		tok = t_argmax(kvt_session_logits(s), hp->n_vocab);
		CHECK_EQ(kvt_decode(r.e, &s, &tok, 1), 1);
		for (unsigned l = 0; l < hp->n_layer; l++) {
			unsigned len = kvt_session_len(s), n = (len + pt - 1) / pt, got = 0;
			const float *mass = w.mass + (size_t)l * mp;
			unsigned *order = xmalloc(n * sizeof(unsigned)), nc = 0;

			CHECK_EQ(w.n[l], n);
			CHECK_EQ(kvt_session_read_kv(r.e, s, l, k, v), 0);
			if (kv_type == KVT_KV_F16)
				kvt_f16_to_f32(kf, (const uint16_t *)k, len * row);
			else
				memcpy(kf, k, len * row * 4);
			for (unsigned j = 0; j < n; j++)
				for (unsigned g = 0; g < nkv; g++) {
					float *mn = b + ((size_t)j * nkv + g) * 2 * hd, *mx = mn + hd;

					for (unsigned x = 0; x < hd; x++) {
						mn[x] = INFINITY;
						mx[x] = -INFINITY;
						for (unsigned t = j * pt; t < (j + 1) * pt && t < len; t++) {
							mn[x] = fminf(mn[x], kf[t * row + g * hd + x]);
							mx[x] = fmaxf(mx[x], kf[t * row + g * hd + x]);
						}
					}
				}
			kvt_attn_key_bound(&sh, w.q + (size_t)l * w.qn, b, n, sc);
			for (unsigned j = sink; j + 1 < n; j++)
				order[nc++] = j;
			for (unsigned a = 0; a < nc; a++)	/* by bound, ties to the older */
				for (unsigned c = a + 1; c < nc; c++)
					if (sc[order[c]] > sc[order[a]]) {
						unsigned x = order[a];
						order[a] = order[c];
						order[c] = x;
					}
			for (unsigned j = 0; j < n; j++)
				got += mass[j] > 0;
			CHECK_EQ(got, K < n ? K : n);
			for (unsigned j = 0; j < sink && j < n; j++)
				CHECK(mass[j] > 0);
			CHECK(mass[n - 1] > 0);
			for (unsigned a = 0, cut = K - sink - 1; a < nc; a++) {
				int want = a < cut;

				/* Same keys, same kernel: the same bounds. A tie at
				 * the cut (none seen) could go either way. */
				if (cut && cut < nc && (sc[order[a]] == sc[order[cut]] ||
							sc[order[a]] == sc[order[cut - 1]]) &&
				    sc[order[cut]] == sc[order[cut - 1]])
					continue;
				if ((mass[order[a]] > 0) != want) {
					fprintf(stderr, "choice: step %u layer %u: page %u (bound %.6g, rank %u) %s\n",
						i, l, order[a], sc[order[a]], a, want ? "left out" : "taken");
					exit(1);
				}
				checked++;
			}
			free(order);
		}
	}
	printf("choice %s: %u steps x %u layers, every page taken or left out as the bounds "
	       "over the stored keys say (%u checked)\n", spec, gen, hp->n_layer, checked);
	kvt_session_free(r.e, s);
	rig_close(&r);
	free(k); free(v); free(kf); free(b); free(sc); free(prompt); free(w.q); free(w.mass); free(w.n);
	kvt_model_free(m);
}

/* ---- 5. specs ---- */

static void test_parse(void)
{
	struct kvt_engine_params ep;
	char err[256], buf[64];

	kvt_engine_params_default(&ep);
	CHECK_EQ(kvt_select_parse(&ep, "quest:pages=12", err, sizeof(err)), 0);
	CHECK(ep.select_pages == 12 && ep.select_frac == 0 && ep.select_sink == 1);
	kvt_select_format(&ep, buf, sizeof(buf));
	CHECK(!strcmp(buf, "quest:pages=12,sink=1"));
	CHECK_EQ(kvt_select_parse(&ep, "quest:frac=0.25,sink=0", err, sizeof(err)), 0);
	CHECK(ep.select_pages == 0 && ep.select_frac == 0.25f && ep.select_sink == 0);
	CHECK_EQ(kvt_select_parse(&ep, "full", err, sizeof(err)), 0);
	CHECK(ep.select_pages == 0 && ep.select_frac == 0);
	static const char *bad[] = { "quest", "quest:", "quest:pages=0", "quest:frac=0",
				     "quest:frac=1.5", "quest:pages=4,frac=0.5", "quest:pages=x",
				     "quest:depth=3", "quest:pages", "quest:pages=-1", "lru",
				     "questx:pages=3" };
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ep.select_pages = 7;
		err[0] = 0;
		CHECK_EQ(kvt_select_parse(&ep, bad[i], err, sizeof(err)), -EINVAL);
		CHECK(err[0] && ep.select_pages == 7);
	}
	printf("specs: parsed, bad ones refused (e.g. %s)\n", err);
}

int main(void)
{
	struct kvt_synth gqa = { .layers = 2, .dim = 256, .heads = 8, .kv_heads = 2, .ctx = 8192,
				 .vocab = 300, .seed = 41, .type = KVT_GGML_F16 };
	struct kvt_synth mha = { .layers = 3, .dim = 64, .heads = 4, .kv_heads = 4, .ctx = 8192,
				 .vocab = 280, .seed = 42, .type = KVT_GGML_F32 };
	/* q4_0 KV: heads of 64 in 36 bytes, 128-token pages of 9 blocks of 4 KiB */
	struct kvt_synth q4kv = { .layers = 2, .dim = 256, .heads = 4, .kv_heads = 4, .ctx = 8192,
				  .vocab = 300, .seed = 43, .type = KVT_GGML_F16 };
	unsigned long_np = t_scale(1000) < 96 ? 96 : t_scale(1000);

	/* f32 queries on q4_0 K in decode too, as in the dense path the
	 * selections are checked against (t_kernels checks the rounded ones) */
	kvt_cpu_set_int8_dots(0);
	test_parse();
	test_bound();
	test_needles();
	test_full("gqa-f16kv", &gqa, KVT_KV_F16, 16, t_scale(300) < 40 ? 40 : t_scale(300), 12);
	test_full("mha-f32kv", &mha, KVT_KV_F32, 8, t_scale(200) < 40 ? 40 : t_scale(200), 12);
	test_full("mha-q4_0kv", &q4kv, KVT_KV_Q4_0, 128, t_scale(600) < 300 ? 300 : t_scale(600), 12);
	test_approx("gqa-f16kv", &gqa, KVT_KV_F16, 16, long_np, 24);
	test_approx("mha-f32kv", &mha, KVT_KV_F32, 8, long_np / 2, 24);
	test_fork_restore(&gqa, KVT_KV_F16, 16, t_scale(300) < 64 ? 64 : t_scale(300), 40);
	test_choice(&gqa, KVT_KV_F16, 16, t_scale(400) < 100 ? 100 : t_scale(400), 20, 9, 2);
	test_choice(&mha, KVT_KV_F32, 8, t_scale(200) < 60 ? 60 : t_scale(200), 20, 6, 1);
	return 0;
}
