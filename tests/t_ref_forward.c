/* SPDX-License-Identifier: MIT */
/*
 * The runtime's logits against a forward pass written here from scratch,
 * in double precision, sharing no code with runtime/infer.c or kernels/:
 * RMSNorm, RoPE (adjacent pairs for llama, i and i + rope_dim / 2 for
 * qwen2's NEOX ordering), grouped-query attention with a causal mask,
 * SwiGLU, the Q, K, V biases of qwen2, a tied or separate output matrix.
 * The weights are a seeded synthetic model (runtime/synth.c writes it)
 * read straight out of the GGUF file with the GGUF parser; every
 * hyperparameter is read from the file too, so a loader that misreads one
 * is caught as surely as a kernel that miscomputes.
 *
 * Each model runs a prompt of NP = 1016 tokens (prefilled in chunks of
 * 16, so the prefill crosses chunk edges) then GEN fixed tokens decoded
 * one at a time, on the dense path and on the pager (pages of 64 tokens);
 * the logits after the prefill and after every decoded token are
 * compared with the reference's.
 *
 * Tolerance: max |runtime - reference| <= TOL * max |reference| over each
 * row, TOL = 4e-6. f32 weights and f32 KV (f16 KV is not used: its
 * rounding, 5e-4 relative per element, would hide the signal), so the
 * runtime departs from the reference by f32 rounding alone: a unit
 * roundoff of 6e-8, dot products of 16 to 1024 terms whose errors mostly
 * cancel, through two layers. Measured: 2.5e-7 to 6.3e-7 (AVX-512
 * kernels, OpenBLAS); TOL leaves a factor of six for other instruction
 * sets and summation orders.
 *
 * Able to fail: the runtime's logits against the reference run with the
 * RoPE base off by one (10001 for 10000), with the other RoPE ordering,
 * and with the RMS epsilon ten times larger must each differ by more than
 * SENS * TOL = 4e-5, or the tolerance would be too loose to catch such a
 * bug. Measured: 5.8e-5 and 8.7e-5 for the base (why the prompt is long:
 * a base off by one moves the angles in proportion to the position),
 * 0.1 and 0.28 for the ordering, 7e-3 and 1.2e-2 for the epsilon.
 * KVT_TEST_SCALE (the sanitizer builds) divides the prompt, and the base
 * check, which needs the whole of it, is then left to the plain build.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/model_common.h"
#include "runtime/gguf.h"
#include "runtime/infer.h"
#include "runtime/synth.h"

#define TOL	4e-6
#define SENS	10.0	/* a planted bug must exceed TOL by this factor */
#define NP_FULL	1016	/* the prompt; KVT_TEST_SCALE shortens it */
#define GEN	8
#define FF	192

/* The reference's model: hyperparameters and f32 tensors, straight from the file. */
struct ref {
	unsigned n_layer, dim, n_head, n_kv, head_dim, rope_dim, ff, vocab;
	double theta, eps;
	int neox;		/* qwen2: rotate dims i and i + rope_dim / 2 */
	const float *embd, *out_norm, *out;	/* out: token_embd when tied */
	struct ref_layer {
		const float *attn_norm, *wq, *wk, *wv, *bq, *bk, *bv, *wo;
		const float *ffn_norm, *wg, *wu, *wd;
	} *l;
};

/* Knobs of the planted bugs the tolerance must catch. */
struct plant {
	double theta_add, eps_mul;
	int flip_neox;
};

static const struct plant honest = { 0, 1, 0 };
static unsigned NP;	/* the prompt's tokens: NP_FULL, or fewer when scaled down */

static const float *tensor(const struct kvt_gguf *g, const char *name, uint64_t ne0,
			   uint64_t ne1, int optional)
{
	const struct kvt_gguf_tensor *t = kvt_gguf_find_tensor(g, name);

	if (!t && optional)
		return NULL;
	if (!t || t->type != KVT_GGML_F32 || t->ne[0] != ne0 || t->ne[1] != ne1) {
		fprintf(stderr, "tensor %s: %s\n", name, t ? "not f32 or of another shape" : "missing");
		exit(1);
	}
	return t->data;
}

static unsigned u32(const struct kvt_gguf *g, const char *arch, const char *what)
{
	char key[128];
	uint32_t v;

	snprintf(key, sizeof(key), "%s.%s", arch, what);
	if (kvt_gguf_get_u32(g, key, &v)) {
		fprintf(stderr, "key %s: missing\n", key);
		exit(1);
	}
	return v;
}

static double f32(const struct kvt_gguf *g, const char *arch, const char *what)
{
	char key[128];
	float v;

	snprintf(key, sizeof(key), "%s.%s", arch, what);
	if (kvt_gguf_get_f32(g, key, &v)) {
		fprintf(stderr, "key %s: missing\n", key);
		exit(1);
	}
	return v;
}

static void ref_load(struct ref *r, const struct kvt_gguf *g)
{
	struct kvt_gguf_str s;
	char arch[16], name[64];

	CHECK(kvt_gguf_get_str(g, "general.architecture", &s) == 0 && s.len < sizeof(arch));
	memcpy(arch, s.ptr, s.len);
	arch[s.len] = 0;
	r->neox = !strcmp(arch, "qwen2");
	r->n_layer = u32(g, arch, "block_count");
	r->dim = u32(g, arch, "embedding_length");
	r->n_head = u32(g, arch, "attention.head_count");
	r->n_kv = u32(g, arch, "attention.head_count_kv");
	r->ff = u32(g, arch, "feed_forward_length");
	r->head_dim = r->dim / r->n_head;
	r->rope_dim = u32(g, arch, "rope.dimension_count");
	r->theta = f32(g, arch, "rope.freq_base");
	r->eps = f32(g, arch, "attention.layer_norm_rms_epsilon");
	CHECK(r->rope_dim <= r->head_dim && r->n_head % r->n_kv == 0);
	r->vocab = (unsigned)kvt_gguf_find_tensor(g, "token_embd.weight")->ne[1];

	unsigned kvd = r->n_kv * r->head_dim;

	r->embd = tensor(g, "token_embd.weight", r->dim, r->vocab, 0);
	r->out_norm = tensor(g, "output_norm.weight", r->dim, 1, 0);
	r->out = tensor(g, "output.weight", r->dim, r->vocab, 1);
	if (!r->out)
		r->out = r->embd;
	CHECK((r->l = calloc(r->n_layer, sizeof(*r->l))));
	for (unsigned i = 0; i < r->n_layer; i++) {
		struct ref_layer *L = &r->l[i];
#define T(x, a, b, opt) (snprintf(name, sizeof(name), "blk.%u." x, i), tensor(g, name, a, b, opt))
		L->attn_norm = T("attn_norm.weight", r->dim, 1, 0);
		L->wq = T("attn_q.weight", r->dim, r->dim, 0);
		L->wk = T("attn_k.weight", r->dim, kvd, 0);
		L->wv = T("attn_v.weight", r->dim, kvd, 0);
		L->bq = T("attn_q.bias", r->dim, 1, 1);
		L->bk = T("attn_k.bias", kvd, 1, 1);
		L->bv = T("attn_v.bias", kvd, 1, 1);
		L->wo = T("attn_output.weight", r->dim, r->dim, 0);
		L->ffn_norm = T("ffn_norm.weight", r->dim, 1, 0);
		L->wg = T("ffn_gate.weight", r->dim, r->ff, 0);
		L->wu = T("ffn_up.weight", r->dim, r->ff, 0);
		L->wd = T("ffn_down.weight", r->ff, r->dim, 0);
#undef T
		CHECK(r->neox == (L->bq && L->bk && L->bv));
	}
}

/* y (rows) = W x + b; W is (rows, cols) f32, row-major (ggml's ne0 = cols). */
static void matvec(double *y, const float *w, const float *b, const double *x, unsigned rows,
		   unsigned cols)
{
	for (unsigned o = 0; o < rows; o++) {
		double acc = b ? b[o] : 0;
		const float *row = w + (size_t)o * cols;

		for (unsigned i = 0; i < cols; i++)
			acc += (double)row[i] * x[i];
		y[o] = acc;
	}
}

static void rmsnorm(double *y, const double *x, const float *w, unsigned n, double eps)
{
	double ss = 0;

	for (unsigned i = 0; i < n; i++)
		ss += x[i] * x[i];
	double k = 1 / sqrt(ss / n + eps);
	for (unsigned i = 0; i < n; i++)
		y[i] = x[i] * k * w[i];
}

/* Rotate one head's first rope_dim dims for position pos. */
static void rope(double *h, unsigned rope_dim, unsigned pos, double theta, int neox)
{
	unsigned half = rope_dim / 2;

	for (unsigned i = 0; i < half; i++) {
		double a = pos * pow(theta, -2.0 * i / rope_dim), c = cos(a), s = sin(a);
		unsigned i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
		double x0 = h[i0], x1 = h[i1];

		h[i0] = x0 * c - x1 * s;
		h[i1] = x0 * s + x1 * c;
	}
}

/* The logits (n_tok, vocab) of tokens from position 0; only the last GEN + 1
 * rows are computed (the others are left as they are). */
static double *ref_forward(const struct ref *r, const int32_t *tok, unsigned n_tok,
			   const struct plant *pl)
{
	const unsigned D = r->dim, HD = r->head_dim, KVD = r->n_kv * HD, G = r->n_head / r->n_kv;
	const double theta = r->theta + pl->theta_add, eps = r->eps * pl->eps_mul;
	const int neox = r->neox ^ pl->flip_neox;
	double *x = malloc(sizeof(double) * n_tok * D);		/* (n_tok, D) residual */
	double *kc = malloc(sizeof(double) * n_tok * KVD);	/* (n_tok, KVD) this layer's K */
	double *vc = malloc(sizeof(double) * n_tok * KVD);	/* (n_tok, KVD) */
	double *xn = malloc(sizeof(double) * D), *q = malloc(sizeof(double) * D);
	double *att = malloc(sizeof(double) * D), *o = malloc(sizeof(double) * D);
	double *g = malloc(sizeof(double) * r->ff), *u = malloc(sizeof(double) * r->ff);
	double *sc = malloc(sizeof(double) * n_tok);
	double *logits = malloc(sizeof(double) * n_tok * r->vocab);

	CHECK(x && kc && vc && xn && q && att && o && g && u && sc && logits);
	for (unsigned t = 0; t < n_tok; t++)
		for (unsigned i = 0; i < D; i++)
			x[(size_t)t * D + i] = r->embd[(size_t)tok[t] * D + i];

	for (unsigned l = 0; l < r->n_layer; l++) {
		const struct ref_layer *L = &r->l[l];

		/* K and V of every position first: position t attends to 0..t. */
		for (unsigned t = 0; t < n_tok; t++) {
			rmsnorm(xn, x + (size_t)t * D, L->attn_norm, D, eps);
			matvec(kc + (size_t)t * KVD, L->wk, L->bk, xn, KVD, D);
			matvec(vc + (size_t)t * KVD, L->wv, L->bv, xn, KVD, D);
			for (unsigned h = 0; h < r->n_kv; h++)
				rope(kc + (size_t)t * KVD + h * HD, r->rope_dim, t, theta, neox);
		}
		for (unsigned t = 0; t < n_tok; t++) {
			double *xt = x + (size_t)t * D;

			rmsnorm(xn, xt, L->attn_norm, D, eps);
			matvec(q, L->wq, L->bq, xn, D, D);
			for (unsigned h = 0; h < r->n_head; h++) {
				const double *qh = q + h * HD;
				unsigned kvh = h / G;
				double m = -INFINITY, sum = 0;

				rope(q + h * HD, r->rope_dim, t, theta, neox);
				for (unsigned j = 0; j <= t; j++) {
					const double *k = kc + (size_t)j * KVD + kvh * HD;
					double d = 0;

					for (unsigned i = 0; i < HD; i++)
						d += qh[i] * k[i];
					sc[j] = d / sqrt((double)HD);
					m = fmax(m, sc[j]);
				}
				for (unsigned j = 0; j <= t; j++)
					sum += sc[j] = exp(sc[j] - m);
				for (unsigned i = 0; i < HD; i++) {
					double a = 0;

					for (unsigned j = 0; j <= t; j++)
						a += sc[j] * vc[(size_t)j * KVD + kvh * HD + i];
					att[h * HD + i] = a / sum;
				}
			}
			matvec(o, L->wo, NULL, att, D, D);
			for (unsigned i = 0; i < D; i++)
				xt[i] += o[i];

			rmsnorm(xn, xt, L->ffn_norm, D, eps);
			matvec(g, L->wg, NULL, xn, r->ff, D);
			matvec(u, L->wu, NULL, xn, r->ff, D);
			for (unsigned i = 0; i < r->ff; i++)
				g[i] = g[i] / (1 + exp(-g[i])) * u[i];
			matvec(o, L->wd, NULL, g, D, r->ff);
			for (unsigned i = 0; i < D; i++)
				xt[i] += o[i];
		}
	}
	for (unsigned t = n_tok - GEN - 1; t < n_tok; t++) {	/* the rows compared */
		rmsnorm(xn, x + (size_t)t * D, r->out_norm, D, eps);
		matvec(logits + (size_t)t * r->vocab, r->out, NULL, xn, r->vocab, D);
	}
	free(x); free(kc); free(vc); free(xn); free(q); free(att); free(o);
	free(g); free(u); free(sc);
	return logits;
}

/* max |got - want| / max |want| over one row; infinity if got has a value
 * that is not finite. */
static double row_err(const float *got, const double *want, unsigned n)
{
	double d = 0, w = 0;

	for (unsigned i = 0; i < n; i++) {
		if (!isfinite(got[i]))
			return INFINITY;
		d = fmax(d, fabs(got[i] - want[i]));
		w = fmax(w, fabs(want[i]));
	}
	return d / w;
}

/* Worst row error of the runtime's logits rows (the prefill's last, then
 * each decode step's) against the reference's rows at the same positions. */
static double worst_err(const float *got, const double *ref, unsigned V)
{
	double worst = 0;

	for (unsigned s = 0; s <= GEN; s++)
		worst = fmax(worst, row_err(got + (size_t)s * V, ref + (size_t)(NP - 1 + s) * V, V));
	return worst;
}

/* The runtime's logits: prefill tok[0, NP), then decode tok[NP, NP + GEN)
 * one at a time; rows (GEN + 1, V) into out. */
static void run_engine(struct kvt_model *m, int dense, const int32_t *tok, float *out, unsigned V)
{
	struct kvt_engine_params ep;
	struct kvt_session *s;
	struct rig r;

	memset(&r, 0, sizeof(r));
	kvt_engine_params_default(&ep);
	ep.n_ctx = NP + GEN;
	ep.kv_type = KVT_KV_F32;
	ep.chunk = 16;
	ep.n_threads = 2;
	ep.dense = dense;
	if (!dense) {
		/* Pages of 64 tokens: whole 4 KiB blocks down to one KV head of 16. */
		uint64_t pages = (uint64_t)m->hp.n_layer * ((NP + GEN + 63) / 64);

		r.p = t_open_model_pager(m, KVT_KV_F32, 64, pages, 4, pages + 16, NULL, &r.dev);
	}
	rig_engine(&r, m, &ep);
	CHECK_EQ(kvt_session_new(r.e, &s), 0);
	CHECK_EQ(kvt_eval(r.e, s, tok, NP, NULL, NULL), 0);
	for (unsigned i = 0; i <= GEN; i++) {
		const float *lg = kvt_session_logits(s);

		CHECK(lg);
		memcpy(out + (size_t)i * V, lg, V * sizeof(float));
		if (i < GEN)
			CHECK_EQ(kvt_decode(r.e, &s, &tok[NP + i], 1), 1);
	}
	kvt_session_free(r.e, s);
	rig_close(&r);
}

static void check_model(const char *name, const struct kvt_synth *syn)
{
	char path[512], err[512];
	struct kvt_gguf *g;
	struct kvt_model *m;
	struct ref r;
	int32_t tok[NP_FULL + GEN];
	uint64_t x = syn->seed * 0x9e3779b97f4a7c15ull + 1;

	snprintf(path, sizeof(path), "%s/ref-%s-%d.gguf", t_dir(), name, (int)getpid());
	if (kvt_synth_write(syn, path, err, sizeof(err))) {
		fprintf(stderr, "synth: %s\n", err);
		exit(1);
	}
	if (kvt_gguf_open(path, &g, err, sizeof(err)) ||
	    kvt_model_load(path, &m, err, sizeof(err))) {
		fprintf(stderr, "%s: %s\n", path, err);
		exit(1);
	}
	unlink(path);
	memset(&r, 0, sizeof(r));
	ref_load(&r, g);
	CHECK_EQ(r.vocab, m->hp.n_vocab);
	for (unsigned i = 0; i < NP + GEN; i++) {
		x ^= x << 13; x ^= x >> 7; x ^= x << 17;
		tok[i] = (int32_t)(x % r.vocab);
	}

	const unsigned V = r.vocab;
	double *want = ref_forward(&r, tok, NP + GEN, &honest);
	float *got = malloc(sizeof(float) * (GEN + 1) * V);
	CHECK(got);
	for (int dense = 1; dense >= 0; dense--) {
		run_engine(m, dense, tok, got, V);
		double e = worst_err(got, want, V);

		fprintf(stderr, "%s (%s, %s output, %s path): max |d| %.2e of max |ref| (limit %g)\n",
			name, r.neox ? "NEOX RoPE" : "llama RoPE", r.out == r.embd ? "tied" : "own",
			dense ? "dense" : "paged", e, TOL);
		CHECK(e <= TOL);
	}

	/* The tolerance must catch what it is there to catch. */
	static const struct { const char *what; struct plant p; } bugs[] = {
		{ "RoPE base off by one", { 1, 1, 0 } },	/* first: needs the full prompt */
		{ "the other RoPE ordering", { 0, 1, 1 } },
		{ "RMS epsilon x10", { 0, 10, 0 } },
	};
	for (unsigned b = NP < NP_FULL; b < sizeof(bugs) / sizeof(bugs[0]); b++) {
		double *bad = ref_forward(&r, tok, NP + GEN, &bugs[b].p);
		double e = worst_err(got, bad, V);

		fprintf(stderr, "%s: against a reference with %s: %.2e\n", name, bugs[b].what, e);
		CHECK(e > SENS * TOL);
		free(bad);
	}
	free(got);
	free(want);
	free(r.l);
	kvt_model_free(m);
	kvt_gguf_close(g);
}

int main(void)
{
	struct kvt_synth llama, qwen2;

	NP = t_scale(NP_FULL) < 64 ? 64 : t_scale(NP_FULL);

	kvt_synth_default(&llama);
	llama.layers = 2; llama.dim = 64; llama.heads = 4; llama.kv_heads = 2;
	llama.ff = FF; llama.vocab = 300; llama.ctx = 2048; llama.seed = 41;
	llama.type = KVT_GGML_F32;
	check_model("llama-gqa-own", &llama);

	kvt_synth_default(&qwen2);
	qwen2.layers = 2; qwen2.dim = 64; qwen2.heads = 4; qwen2.kv_heads = 1;
	qwen2.ff = FF; qwen2.vocab = 300; qwen2.ctx = 2048; qwen2.seed = 42;
	qwen2.type = KVT_GGML_F32; qwen2.qwen2 = 1; qwen2.tied = 1;
	qwen2.tokenizer = KVT_SYNTH_TOK_GPT2; qwen2.pre = "qwen2";
	check_model("qwen2-mqa-tied", &qwen2);
	return 0;
}
