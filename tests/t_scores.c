/* SPDX-License-Identifier: MIT */
/*
 * Attention scores for the pager: each page's share of the softmax mass.
 *
 * 1. Kernels: pages folded in random order into several accumulators
 *    with kvt_attn_page_partial, merged, then kvt_attn_mass; against a
 *    softmax in double over the contiguous K, per page, for MHA, GQA and
 *    MQA, f16 and f32 K, one and several rows. The output equals
 *    kvt_attn_page's to the bit (the partials change nothing).
 * 2. The engine: a synthetic model decoding over a pager small enough to
 *    page, two threads; after every decode step, each layer's masses (as
 *    sent to kvt_seq_score, seen through on_attn) sum to 1 and equal a
 *    softmax in double of the row's q over the layer's K read back from
 *    the session, within 1e-5. With scores off the logits are the same
 *    (within 1e-5: pages arrive in varying order). The tiers run h2o when it is built (it consumes the
 *    scores), lru otherwise.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/model_common.h"
#include "pager/policy.h"
#include "runtime/gguf.h"
#include "runtime/infer.h"
#include "runtime/synth.h"

#define TOL 1e-5

static uint64_t rng = 0x243f6a8885a308d3ull;

static uint32_t rnd32(void)
{
	rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

static unsigned rndn(unsigned n) { return rnd32() % n; }
static float rndf(void) { return (float)rnd32() / 2147483648.0f - 1.0f; }	/* [-1, 1) */

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	CHECK(p);
	return p;
}

static double kval(const void *k, int kv_type, size_t i)
{
	if (kv_type == KVT_KV_F16) {
		float f;

		kvt_f16_to_f32(&f, (const uint16_t *)k + i, 1);
		return f;
	}
	return ((const float *)k)[i];
}

/* mass (n_pages) by a softmax in double: of rows q (rows, n_head, hd) at
 * qpos over K (n_ctx, n_kv, hd) cut into pages at p_start, averaged over
 * the (row, head) pairs that see any token. */
static void ref_mass(const struct kvt_attn_shape *sh, const float *q, const uint32_t *qpos,
		     const void *k, unsigned n_ctx, const unsigned *p_start, unsigned n_pages,
		     double *mass)
{
	unsigned G = sh->n_head / sh->n_kv_heads, hd = sh->head_dim, pairs = 0;
	double *s = xmalloc((n_ctx + 1) * sizeof(double));

	for (unsigned j = 0; j < n_pages; j++)
		mass[j] = 0;
	for (unsigned r = 0; r < sh->rows; r++)
		for (unsigned h = 0; h < sh->n_head; h++) {
			const float *qv = q + ((size_t)r * sh->n_head + h) * hd;
			unsigned n = qpos[r] + 1 < n_ctx ? qpos[r] + 1 : n_ctx;
			double mx = -INFINITY, sum = 0;

			if (!n)
				continue;
			pairs++;
			for (unsigned t = 0; t < n; t++) {
				double d = 0;

				for (unsigned i = 0; i < hd; i++)
					d += qv[i] * kval(k, sh->kv_type, ((size_t)t * sh->n_kv_heads + h / G) * hd + i);
				s[t] = d * sh->scale;
				mx = fmax(mx, s[t]);
			}
			for (unsigned t = 0; t < n; t++)
				sum += s[t] = exp(s[t] - mx);
			for (unsigned j = 0; j < n_pages; j++)
				for (unsigned t = p_start[j]; t < p_start[j + 1] && t < n; t++)
					mass[j] += s[t] / sum;
		}
	for (unsigned j = 0; pairs && j < n_pages; j++)
		mass[j] /= pairs;
	free(s);
}

static double kernel_case(int kv_type, unsigned n_head, unsigned n_kv, unsigned hd, unsigned rows,
			  unsigned n_ctx)
{
	struct kvt_attn_shape sh = { rows, n_head, n_kv, hd, 1.0f / sqrtf((float)hd), kv_type };
	size_t esz = kv_type == KVT_KV_F16 ? 2 : 4, tok = (size_t)n_kv * hd * esz, nh = (size_t)rows * n_head;
	uint8_t *k = xmalloc(n_ctx * tok), *v = xmalloc(n_ctx * tok);
	float *q = xmalloc(nh * hd * 4), *o1 = xmalloc(nh * hd * 4), *o2 = xmalloc(nh * hd * 4);
	uint32_t *qpos = xmalloc(rows * 4);
	unsigned *p_start = xmalloc((n_ctx + 1) * sizeof(unsigned)), *order, n_pages = 0;
	unsigned n_acc = 1 + rndn(3), page = 1 + rndn(40);
	float qscale = rnd32() & 1 ? 1.0f : 6.0f, *pm, *pl, *mass;
	struct kvt_attn_acc acc[3], plain;
	double *ref, worst = 0, sum = 0;

	for (size_t i = 0; i < (size_t)n_ctx * n_kv * hd; i++) {
		float kf = rndf(), vf = rndf();

		if (kv_type == KVT_KV_F16) {
			kvt_f32_to_f16((uint16_t *)k + i, &kf, 1);
			kvt_f32_to_f16((uint16_t *)v + i, &vf, 1);
		} else {
			((float *)k)[i] = kf;
			((float *)v)[i] = vf;
		}
	}
	for (size_t i = 0; i < nh * hd; i++)
		q[i] = rndf() * qscale;
	for (unsigned r = 0; r < rows; r++)
		qpos[r] = n_ctx - rows + r;
	for (unsigned t = 0; t < n_ctx; t += page)
		p_start[n_pages++] = t;
	p_start[n_pages] = n_ctx;
	order = xmalloc(n_pages * sizeof(unsigned));
	for (unsigned i = 0; i < n_pages; i++)
		order[i] = i;
	for (unsigned i = n_pages; i > 1; i--) {
		unsigned j = rndn(i), x = order[i - 1];

		order[i - 1] = order[j];
		order[j] = x;
	}
	pm = xmalloc(n_pages * nh * 4);
	pl = xmalloc(n_pages * nh * 4);
	mass = xmalloc(n_pages * 4);
	ref = xmalloc(n_pages * sizeof(double));
	for (unsigned a = 0; a < n_acc; a++)
		CHECK_EQ(kvt_attn_acc_init(&acc[a], &sh), 0);
	CHECK_EQ(kvt_attn_acc_init(&plain, &sh), 0);
	for (unsigned i = 0; i < n_pages; i++) {
		unsigned pg = order[i], t0 = p_start[pg], nt = p_start[pg + 1] - t0;

		/* Garbage where the kernel must write. */
		for (size_t x = 0; x < nh; x++)
			pm[pg * nh + x] = pl[pg * nh + x] = 12345.0f;
		CHECK_EQ(kvt_attn_page_partial(&acc[i % n_acc], q, qpos, k + t0 * tok, v + t0 * tok, nt, t0,
					       pm + pg * nh, pl + pg * nh), 0);
		/* The plain call, in the same order into one accumulator. */
		CHECK_EQ(kvt_attn_page(&plain, q, qpos, k + t0 * tok, v + t0 * tok, nt, t0), 0);
	}
	/* The partials cost nothing in accuracy: one accumulator fed both ways
	 * is the same to the bit, unless the plain calls gathered whole pages
	 * to fold them together (more than four query vectors per KV head:
	 * kvt_attn_flush), which sums in another order. */
	if (n_acc == 1) {
		kvt_attn_finish(&acc[0], o1);
		kvt_attn_finish(&plain, o2);
		if (rows * (sh.n_head / sh.n_kv_heads) <= 4) {
			CHECK(!memcmp(o1, o2, nh * hd * 4));
		} else {
			float big = 0, diff = 0;

			for (size_t i = 0; i < nh * hd; i++) {
				big = fmaxf(big, fabsf(o1[i]));
				diff = fmaxf(diff, fabsf(o1[i] - o2[i]));
			}
			CHECK(diff <= 1e-5f * big);
		}
	}
	for (unsigned a = 1; a < n_acc; a++)
		kvt_attn_merge(&acc[0], &acc[a]);
	kvt_attn_mass(&acc[0], pm, pl, n_pages, mass);
	ref_mass(&sh, q, qpos, k, n_ctx, p_start, n_pages, ref);
	for (unsigned j = 0; j < n_pages; j++) {
		worst = fmax(worst, fabs(mass[j] - ref[j]));
		sum += mass[j];
		CHECK(mass[j] >= 0);
	}
	if (!(worst <= TOL) || !(fabs(sum - 1) <= TOL)) {
		fprintf(stderr, "kernel case kv %d heads %u/%u hd %u rows %u ctx %u pages %u: "
			"worst mass error %.3g, sum %.9f\n", kv_type, n_head, n_kv, hd, rows, n_ctx,
			n_pages, worst, sum);
		exit(1);
	}
	for (unsigned a = 0; a < n_acc; a++)
		kvt_attn_acc_free(&acc[a]);
	kvt_attn_acc_free(&plain);
	free(k); free(v); free(q); free(o1); free(o2); free(qpos); free(p_start); free(order);
	free(pm); free(pl); free(mass); free(ref);
	return worst;
}

static void test_kernels(void)
{
	static const unsigned geo[][3] = { { 4, 4, 64 }, { 8, 2, 64 }, { 4, 1, 32 }, { 6, 3, 48 }, { 8, 4, 128 } };
	double worst = 0;
	unsigned cases = 0;

	for (int simd = kvt_cpu_simd(); simd >= 0; simd--) {
		kvt_cpu_set_simd_max(simd);
		for (unsigned g = 0; g < sizeof(geo) / sizeof(geo[0]); g++)
			for (int kt = 0; kt < 2; kt++)
				for (unsigned rows = 1; rows <= 3; rows += 2) {
					unsigned n_ctx = 1 + rndn(t_scale(600));

					worst = fmax(worst, kernel_case(kt ? KVT_KV_F32 : KVT_KV_F16, geo[g][0],
									geo[g][1], geo[g][2], rows,
									n_ctx < rows ? rows : n_ctx));
					cases++;
				}
	}
	kvt_cpu_set_simd_max(2);
	printf("kernels: %u cases, masses within %.2e of a softmax in double, summing to 1\n",
	       cases, worst);
	fflush(stdout);
}

/* ---- the engine ---- */

struct seen {
	unsigned n_layer, n_head, hd, calls;
	float *q;		/* (n_layer, n_head, hd) */
	float *mass;		/* (n_layer, max_pages) */
	unsigned *np;		/* (n_layer) */
	unsigned max_pages;
};

static void on_attn(void *arg, const struct kvt_session *s, unsigned layer, const float *q,
		    const float *mass, unsigned n)
{
	struct seen *w = arg;

	(void)s;
	CHECK(layer < w->n_layer && n <= w->max_pages);
	memcpy(w->q + (size_t)layer * w->n_head * w->hd, q, (size_t)w->n_head * w->hd * sizeof(float));
	memcpy(w->mass + (size_t)layer * w->max_pages, mass, n * sizeof(float));
	w->np[layer] = n;
	w->calls++;
}

static void rig_open(struct rig *r, struct kvt_model *m, int kv_type, unsigned pt, unsigned n_ctx,
		     const char *policy, int scores, struct seen *w)
{
	struct kvt_engine_params ep;
	uint64_t pages;

	kvt_engine_params_default(&ep);
	ep.n_ctx = n_ctx;
	ep.kv_type = kv_type;
	ep.chunk = 48;
	ep.n_threads = 2;
	ep.scores = scores;
	if (w) {
		ep.on_attn = on_attn;
		ep.on_attn_arg = w;
	}
	pages = (uint64_t)m->hp.n_layer * ((n_ctx + pt - 1) / pt);
	r->p = t_open_model_pager(m, kv_type, pt,
				  pages / 5 > 2 * m->hp.n_layer ? pages / 5 : 2 * m->hp.n_layer,
				  pages / 4 > 4 ? pages / 4 : 4, pages + 16, policy, &r->dev);
	rig_engine(r, m, &ep);
}

static void test_engine(const char *name, const struct kvt_synth *syn, int kv_type, unsigned pt,
			unsigned prompt, unsigned gen)
{
	struct kvt_model *m = make_model(syn, "scores");
	const struct kvt_hparams *hp = &m->hp;
	const char *policy = kvt_policy_find("h2o") ? "h2o" : "lru";
	unsigned n_ctx = prompt + gen + 1, max_pages = n_ctx / pt + 2, G = hp->n_head / hp->n_head_kv;
	size_t esz = kv_type == KVT_KV_F16 ? 2 : 4, row = (size_t)hp->n_head_kv * hp->head_dim * esz;
	struct seen w = { hp->n_layer, hp->n_head, hp->head_dim, 0, NULL, NULL, NULL, max_pages };
	struct kvt_attn_shape sh = { 1, hp->n_head, hp->n_head_kv, hp->head_dim,
				     1.0f / sqrtf((float)hp->head_dim), kv_type };
	uint8_t *k = xmalloc(n_ctx * row), *v = xmalloc(n_ctx * row);
	unsigned *p_start = xmalloc((max_pages + 1) * sizeof(unsigned));
	double *ref = xmalloc(max_pages * sizeof(double)), worst = 0, worst_sum = 0, worst_off = 0;
	float *lg[2];
	int32_t *toks = xmalloc((prompt + gen) * sizeof(int32_t));
	struct kvt_session *s;
	struct kvt_stats st;
	struct rig r;

	(void)G;
	w.q = xmalloc((size_t)hp->n_layer * hp->n_head * hp->head_dim * sizeof(float));
	w.mass = xmalloc((size_t)hp->n_layer * max_pages * sizeof(float));
	w.np = xmalloc(hp->n_layer * sizeof(unsigned));
	for (unsigned i = 0; i < prompt; i++)
		toks[i] = (int32_t)(3 + rndn(hp->n_vocab - 3));

	for (int pass = 0; pass < 2; pass++) {
		rig_open(&r, m, kv_type, pt, n_ctx, policy, !pass, pass ? NULL : &w);
		lg[pass] = xmalloc((size_t)gen * hp->n_vocab * sizeof(float));
		CHECK_EQ(kvt_session_new(r.e, &s), 0);
		w.calls = 0;
		CHECK_EQ(kvt_eval(r.e, s, toks, prompt, NULL, NULL), 0);
		CHECK_EQ(w.calls, 0);		/* prefill rows report nothing */
		for (unsigned i = 0; i < gen; i++) {
			const float *l = kvt_session_logits(s);

			CHECK(l);
			memcpy(lg[pass] + (size_t)i * hp->n_vocab, l, hp->n_vocab * sizeof(float));
			if (!pass)
				toks[prompt + i] = t_argmax(l, hp->n_vocab);
			w.calls = 0;
			CHECK_EQ(kvt_decode(r.e, &s, &toks[prompt + i], 1), 1);
			if (pass)
				continue;
			CHECK_EQ(w.calls, hp->n_layer);
			/* The row was at position len - 1 and saw every token. */
			for (unsigned l2 = 0; l2 < hp->n_layer; l2++) {
				unsigned len = kvt_session_len(s), np = (len + pt - 1) / pt;
				uint32_t qpos = len - 1;
				double sum = 0;

				CHECK_EQ(w.np[l2], np);
				CHECK_EQ(kvt_session_read_kv(r.e, s, l2, k, v), 0);
				for (unsigned j = 0; j <= np; j++)
					p_start[j] = j * pt < len ? j * pt : len;
				ref_mass(&sh, w.q + (size_t)l2 * hp->n_head * hp->head_dim, &qpos, k, len,
					 p_start, np, ref);
				for (unsigned j = 0; j < np; j++) {
					float got = w.mass[(size_t)l2 * max_pages + j];

					sum += got;
					if (!(fabs(got - ref[j]) <= TOL)) {
						fprintf(stderr, "%s: step %u layer %u page %u/%u: mass %.9f, "
							"softmax %.9f\n", name, i, l2, j, np, got, ref[j]);
						exit(1);
					}
					worst = fmax(worst, fabs(got - ref[j]));
				}
				worst_sum = fmax(worst_sum, fabs(sum - 1));
				CHECK(fabs(sum - 1) <= TOL);
			}
		}
		CHECK_EQ(kvt_session_error(s), 0);
		CHECK_EQ(kvt_pager_stats(r.p, &st), 0);
		if (!pass && st.tier[KVT_TIER_FAST].capacity < st.pages)
			CHECK(st.tier[KVT_TIER_FAST].misses > 0);	/* it really paged */
		kvt_session_free(r.e, s);
		rig_close(&r);
	}
	/* Scores on or off: the same computation (up to the order in which
	 * pages arrive and threads merge, which varies from run to run). */
	for (unsigned i = 0; i < gen; i++) {
		const float *a = lg[0] + (size_t)i * hp->n_vocab, *b = lg[1] + (size_t)i * hp->n_vocab;
		double d = 0, mx = 0;

		for (unsigned x = 0; x < hp->n_vocab; x++) {
			d = fmax(d, fabs((double)a[x] - b[x]));
			mx = fmax(mx, fabs((double)b[x]));
		}
		CHECK(d <= 1e-5 * mx);
		CHECK_EQ(t_argmax(a, hp->n_vocab), t_argmax(b, hp->n_vocab));
		worst_off = fmax(worst_off, d / mx);
	}
	printf("engine %-16s %s: %u steps x %u layers, masses within %.2e of a softmax in double, "
	       "sums within %.2e of 1; logits with scores off within %.2e\n",
	       name, policy, gen, hp->n_layer, worst, worst_sum, worst_off);
	free(lg[0]); free(lg[1]); free(k); free(v); free(p_start); free(ref); free(toks);
	free(w.q); free(w.mass); free(w.np);
	kvt_model_free(m);
}

int main(void)
{
	struct kvt_synth gqa = { .layers = 2, .dim = 256, .heads = 8, .kv_heads = 2, .ctx = 4096,
				 .vocab = 300, .seed = 31, .type = KVT_GGML_F16 };
	struct kvt_synth mha = { .layers = 3, .dim = 64, .heads = 4, .kv_heads = 4, .ctx = 4096,
				 .vocab = 280, .seed = 32, .type = KVT_GGML_F32 };

	test_kernels();
	test_engine("gqa-f16kv", &gqa, KVT_KV_F16, 16, t_scale(300) < 20 ? 20 : t_scale(300), 6);
	test_engine("mha-f32kv", &mha, KVT_KV_F32, 8, t_scale(200) < 20 ? 20 : t_scale(200), 6);
	return 0;
}
