/* SPDX-License-Identifier: MIT */
/*
 * Llama 3.x per-pair RoPE divisors (rope_freqs.weight, llama.cpp's
 * freq_factors): a synthetic model with Llama 3.1's factors loads with the
 * factors the converter's formula gives; RoPE with them matches the
 * formula in double, pos * theta^(-2i/n_rot) / factor[i], and differs from
 * plain RoPE exactly on the pairs whose factor is not 1; the forward pass
 * applies them (all-ones factors give plain RoPE's logits bit for bit,
 * all-twos those of linear scaling by 2); the tiered path matches the
 * dense one; and bad tensors and scaling types are refused by name.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/model_common.h"
#include "runtime/gguf.h"
#include "runtime/infer.h"
#include "runtime/synth.h"

#define TOL 1e-4
#define THETA 10000.0	/* what runtime/synth.c writes as llama.rope.freq_base */

/* 2 layers, head dim 32: with theta 10000 Llama 3.1's factors are 1 for
 * pairs 0..10, interpolated for 11 and 12, and 8 for 13..15. */
static const struct kvt_synth base_syn = {
	.layers = 2, .dim = 128, .heads = 4, .kv_heads = 2, .ctx = 4096, .vocab = 300,
	.seed = 21, .type = KVT_GGML_F32,
};
#define HD 32u

static char dir[256];

static void tpath(char *p, size_t n, const char *tag)
{
	snprintf(p, n, "%s/rope-%s-%d.gguf", dir, tag, (int)getpid());
}

static void synth(const struct kvt_synth *s, const char *path)
{
	char err[512];

	if (kvt_synth_write(s, path, err, sizeof(err))) {
		fprintf(stderr, "synth: %s\n", err);
		exit(1);
	}
}

static struct kvt_model *load(const char *path)
{
	struct kvt_model *m;
	char err[512];

	if (kvt_model_load(path, &m, err, sizeof(err))) {
		fprintf(stderr, "load: %s\n", err);
		exit(1);
	}
	return m;
}

/* What a rewritten file changes: metadata set (or left as is when 0 or
 * NULL), and rope_freqs.weight kept, dropped or replaced. */
struct edit {
	const char *scaling_type;	/* llama.rope.scaling.type */
	float scaling_factor;		/* llama.rope.scaling.factor */
	uint32_t rope_dim;		/* llama.rope.dimension_count */
	int freqs;			/* 0 keep, -1 drop, 1 write the tensor below */
	uint32_t type, n_dims;
	uint64_t ne[2];
	const void *data;
};

static char *dupstr(const struct kvt_gguf_str *s)
{
	char *c = malloc(s->len + 1);

	CHECK(c);
	memcpy(c, s->ptr, s->len);
	c[s->len] = '\0';
	return c;
}

/* Copy the GGUF at src to dst with the edit applied. Copies the value
 * types runtime/synth.c writes. */
static void rewrite(const char *src, const char *dst, const struct edit *ed)
{
	struct kvt_gguf_writer *w;
	struct kvt_gguf *g;
	char err[512], *key;
	void *tmp[8];
	unsigned nt = 0;

	CHECK_EQ(kvt_gguf_open(src, &g, err, sizeof(err)), 0);
	CHECK_EQ(kvt_gguf_writer_new(&w), 0);
	for (uint64_t i = 0; i < g->n_kv; i++) {
		const struct kvt_gguf_kv *kv = &g->kv[i];

		key = dupstr(&kv->key);
		if ((ed->scaling_type && !strcmp(key, "llama.rope.scaling.type")) ||
		    (ed->scaling_factor && !strcmp(key, "llama.rope.scaling.factor")) ||
		    (ed->rope_dim && !strcmp(key, "llama.rope.dimension_count"))) {
			free(key);
			continue;
		}
		if (kv->type == KVT_GGUF_U32) {
			uint32_t v;

			memcpy(&v, kv->data, 4);
			CHECK_EQ(kvt_gguf_add_u32(w, key, v), 0);
		} else if (kv->type == KVT_GGUF_F32) {
			float v;

			memcpy(&v, kv->data, 4);
			CHECK_EQ(kvt_gguf_add_f32(w, key, v), 0);
		} else if (kv->type == KVT_GGUF_STRING) {
			char *v = dupstr(&kv->strs[0]);

			CHECK_EQ(kvt_gguf_add_str(w, key, v), 0);
			free(v);
		} else if (kv->type == KVT_GGUF_ARRAY && kv->arr_type == KVT_GGUF_STRING) {
			char **v = malloc(kv->n * sizeof(*v));

			CHECK(v);
			for (uint64_t j = 0; j < kv->n; j++)
				v[j] = dupstr(&kv->strs[j]);
			CHECK_EQ(kvt_gguf_add_str_arr(w, key, (const char *const *)v, kv->n), 0);
			for (uint64_t j = 0; j < kv->n; j++)
				free(v[j]);
			free(v);
		} else if (kv->type == KVT_GGUF_ARRAY &&
			   (kv->arr_type == KVT_GGUF_F32 || kv->arr_type == KVT_GGUF_I32)) {
			void *v = malloc(kv->n * 4);

			CHECK(v && nt < 8);
			memcpy(v, kv->data, kv->n * 4);
			tmp[nt++] = v;
			if (kv->arr_type == KVT_GGUF_F32)
				CHECK_EQ(kvt_gguf_add_f32_arr(w, key, v, kv->n), 0);
			else
				CHECK_EQ(kvt_gguf_add_i32_arr(w, key, v, kv->n), 0);
		} else {
			fprintf(stderr, "rewrite: %s: value type %u not copied\n", key, kv->type);
			exit(1);
		}
		free(key);
	}
	if (ed->scaling_type)
		CHECK_EQ(kvt_gguf_add_str(w, "llama.rope.scaling.type", ed->scaling_type), 0);
	if (ed->scaling_factor)
		CHECK_EQ(kvt_gguf_add_f32(w, "llama.rope.scaling.factor", ed->scaling_factor), 0);
	if (ed->rope_dim)
		CHECK_EQ(kvt_gguf_add_u32(w, "llama.rope.dimension_count", ed->rope_dim), 0);
	for (uint64_t i = 0; i < g->n_tensors; i++) {
		const struct kvt_gguf_tensor *t = &g->tensors[i];

		key = dupstr(&t->name);
		if (!ed->freqs || strcmp(key, "rope_freqs.weight"))
			CHECK_EQ(kvt_gguf_add_tensor(w, key, t->n_dims, t->ne, t->type, t->data), 0);
		free(key);
	}
	if (ed->freqs == 1)
		CHECK_EQ(kvt_gguf_add_tensor(w, "rope_freqs.weight", ed->n_dims, ed->ne, ed->type,
					     ed->data), 0);
	if (kvt_gguf_writer_write(w, dst, err, sizeof(err))) {
		fprintf(stderr, "rewrite: %s\n", err);
		exit(1);
	}
	kvt_gguf_writer_free(w);
	kvt_gguf_close(g);
	while (nt)
		free(tmp[--nt]);
}

/* A rewritten file with rope_freqs.weight = n f32 values v. */
static void with_freqs(const char *src, const char *dst, const float *v, uint64_t n)
{
	const struct edit ed = { .freqs = 1, .type = KVT_GGML_F32, .n_dims = 1, .ne = { n, 1 },
				 .data = v };

	rewrite(src, dst, &ed);
}

/* Llama 3.1's factors, straight from convert_hf_to_gguf.py, in double. */
static double llama3_factor(unsigned i, unsigned n_rot)
{
	double freq = 1.0 / pow(THETA, 2.0 * i / n_rot), wavelen = 2 * M_PI / freq, smooth;

	if (wavelen < 8192.0 / 4)
		return 1;
	if (wavelen > 8192.0 / 1)
		return 8;
	smooth = (8192.0 / wavelen - 1) / (4 - 1);
	return 1 / ((1 - smooth) / 8 + smooth);
}

static uint64_t rng = 0x1234567;

static float rndf(void)
{
	rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
	return (float)((rng >> 40) / (double)(1 << 24) * 2 - 1);
}

/* (a) The factors, and RoPE with them against the formula. */
static void test_rope(const char *p0, const char *p3)
{
	static const uint32_t pos[] = { 0, 1, 5, 100, 2047, 8191, 65535, 131071 };
	struct kvt_model *m0 = load(p0), *m3 = load(p3);
	const struct kvt_gguf_tensor *t = kvt_gguf_find_tensor(m3->g, "rope_freqs.weight");
	const unsigned nh = m3->hp.n_head, n = nh * HD;
	float fac[HD / 2], x[4 * HD], y[4 * HD], z[4 * HD];
	unsigned n1 = 0, n8 = 0, nmid = 0, ndiff = 0;
	double worst = 0;

	CHECK(!m0->rope_freqs && m0->rope_inv_freq);
	CHECK(t && m3->rope_freqs && m3->rope_inv_freq);
	CHECK_EQ(m3->hp.head_dim, HD);
	CHECK_EQ(m3->hp.rope_dim, HD);
	CHECK(m3->hp.rope_freq_scale == 1.0f && m3->hp.rope_theta == (float)THETA);
	CHECK(t->type == KVT_GGML_F32 && t->ne[0] == HD / 2 && t->nbytes == sizeof(fac));
	memcpy(fac, t->data, sizeof(fac));	/* the file's values, not the loader's copy */
	for (unsigned i = 0; i < HD / 2; i++) {
		double want = llama3_factor(i, HD);

		if (fabs(fac[i] - want) > 1e-6 * want) {
			fprintf(stderr, "factor %u: %.9g in the file, %.9g from the formula\n",
				i, fac[i], want);
			exit(1);
		}
		CHECK(m3->rope_freqs[i] == fac[i]);
		n1 += want == 1;
		n8 += want == 8;
		nmid += want > 1 && want < 8;
	}
	CHECK(n1 > 0 && n8 > 0 && nmid > 0);

	for (unsigned c = 0; c < sizeof(pos) / sizeof(pos[0]); c++) {
		for (unsigned i = 0; i < n; i++)
			x[i] = y[i] = z[i] = rndf();
		kvt_rope(y, nh, HD, HD, pos[c], m3->rope_inv_freq);
		kvt_rope(z, nh, HD, HD, pos[c], m0->rope_inv_freq);
		for (unsigned h = 0; h < nh; h++)
			for (unsigned i = 0; i < HD / 2; i++) {
				const float *px = x + h * HD + 2 * i, *p = y + h * HD + 2 * i;
				const float *q = z + h * HD + 2 * i;
				double a = pos[c] * pow(THETA, -2.0 * i / HD) / fac[i];
				double r0 = px[0] * cos(a) - px[1] * sin(a);
				double r1 = px[0] * sin(a) + px[1] * cos(a);
				double mag = fabs(px[0]) + fabs(px[1]);
				double e = fmax(fabs(p[0] - r0), fabs(p[1] - r1)) / mag;

				worst = fmax(worst, e);
				if (!(e <= 1e-5)) {
					fprintf(stderr, "pos %u head %u pair %u: (%.9g, %.9g), expected "
						"(%.9g, %.9g)\n", pos[c], h, i, p[0], p[1], r0, r1);
					exit(1);
				}
				/* Plain RoPE: the same where the factor is 1, else not. */
				if (fac[i] == 1.0f || pos[c] == 0) {
					CHECK(p[0] == q[0] && p[1] == q[1]);
				} else if (pos[c] >= 100) {
					CHECK(fmax(fabs(p[0] - q[0]), fabs(p[1] - q[1])) > 1e-3 * mag);
					ndiff++;
				}
			}
	}
	CHECK(ndiff > 0);
	printf("rope: factors as llama.cpp's converter computes them (%u of 1, %u between, %u of 8); "
	       "worst relative error vs the formula %.2e; %u pairs differ from plain RoPE\n",
	       n1, nmid, n8, worst, ndiff);
	kvt_model_free(m0);
	kvt_model_free(m3);
}

/* An engine: dense, or over a pager with tiers sized in per cent of the KV. */
static void rig_open(struct rig *r, struct kvt_model *m, int tiered, unsigned n_ctx)
{
	const unsigned page_tokens = 16;
	struct kvt_engine_params ep;

	memset(r, 0, sizeof(*r));
	kvt_engine_params_default(&ep);
	ep.n_ctx = n_ctx;
	ep.kv_type = KVT_KV_F16;
	ep.chunk = 64;
	ep.max_batch = 4;
	ep.n_threads = tiered ? 2 : 1;
	ep.dense = !tiered;
	if (tiered) {
		uint64_t pages = (uint64_t)m->hp.n_layer * ((n_ctx + page_tokens - 1) / page_tokens);

		r->p = t_open_model_pager(m, KVT_KV_F16, page_tokens,
					  pages / 10 < 2ull * m->hp.n_layer ? 2ull * m->hp.n_layer : pages / 10,
					  pages / 4 < 4 ? 4 : pages / 4, pages + 16, "lru", &r->dev);
	}
	rig_engine(r, m, &ep);
}

/* Prefill np tokens then greedy decode: logits (gen, n_vocab) and tokens
 * (gen) of the model at path, dense or tiered. */
static void run(const char *path, int tiered, unsigned np, unsigned gen, float *logits,
		int32_t *toks, int check_paged)
{
	struct kvt_model *m = load(path);
	uint32_t V = m->hp.n_vocab;
	int32_t *prompt = malloc(np * sizeof(int32_t));
	struct kvt_session *s;
	uint64_t x = 0x9e3779b97f4a7c15ull;
	struct rig r;

	CHECK(prompt);
	for (unsigned i = 0; i < np; i++) {
		x ^= x << 13; x ^= x >> 7; x ^= x << 17;
		prompt[i] = (int32_t)(3 + x % (V - 3));
	}
	rig_open(&r, m, tiered, np + gen);
	CHECK_EQ(kvt_session_new(r.e, &s), 0);
	t_greedy(r.e, s, prompt, np, gen, logits, toks, V);
	if (check_paged) {
		struct kvt_stats st;

		CHECK_EQ(kvt_pager_stats(r.p, &st), 0);
		CHECK(st.tier[KVT_TIER_FAST].capacity < st.pages);
		CHECK(st.tier[KVT_TIER_FAST].misses > 0);
		CHECK_EQ(st.lost_pages, 0);
	}
	kvt_session_free(r.e, s);
	rig_close(&r);
	kvt_model_free(m);
	free(prompt);
}

/* (a) The forward pass applies the factors; (b) tiered equals dense. */
static void test_forward(const char *p0, const char *p3)
{
	const unsigned np = t_scale(160) < 24 ? 24 : t_scale(160), gen = 6, V = base_syn.vocab;
	const size_t n = (size_t)gen * V;
	float *l0 = malloc(n * 4), *l1 = malloc(n * 4), *l2 = malloc(n * 4), *llin = malloc(n * 4);
	float *l3 = malloc(n * 4), *l3t = malloc(n * 4), *l3b = malloc(n * 4);
	float ones[HD / 2], twos[HD / 2];
	int32_t t0[8], t1[8], t2[8], tlin[8], t3[8], t3t[8], t3b[8];
	char p1[512], p2[512], plin[512], p3b[512];
	const struct edit lin2 = { .scaling_type = "linear", .scaling_factor = 2 };
	const struct edit l3type = { .scaling_type = "llama3", .scaling_factor = 8 };
	struct kvt_model *m;
	double e;

	CHECK(l0 && l1 && l2 && llin && l3 && l3t && l3b);
	for (unsigned i = 0; i < HD / 2; i++) {
		ones[i] = 1;
		twos[i] = 2;
	}
	tpath(p1, sizeof(p1), "ones");
	tpath(p2, sizeof(p2), "twos");
	tpath(plin, sizeof(plin), "lin2");
	tpath(p3b, sizeof(p3b), "l3type");
	with_freqs(p0, p1, ones, HD / 2);
	with_freqs(p0, p2, twos, HD / 2);
	rewrite(p0, plin, &lin2);
	rewrite(p3, p3b, &l3type);

	run(p0, 0, np, gen, l0, t0, 0);
	run(p1, 0, np, gen, l1, t1, 0);
	run(p2, 0, np, gen, l2, t2, 0);
	run(plin, 0, np, gen, llin, tlin, 0);
	run(p3, 0, np, gen, l3, t3, 0);
	run(p3b, 0, np, gen, l3b, t3b, 0);

	/* Factors of 1 are plain RoPE; factors of 2 are linear scaling by 2
	 * (the same angles in double, so the same bits). */
	CHECK(!memcmp(l1, l0, n * 4));
	CHECK(!memcmp(l2, llin, n * 4));
	CHECK(memcmp(l2, l0, n * 4));
	/* Llama 3.1's factors change the logits. */
	e = t_rel_err(l3, l0, n);
	CHECK(e > 1e-6);
	printf("forward: all-ones factors = plain RoPE, all-twos = linear scaling by 2 (bit for bit); "
	       "llama3 factors move the logits by %.2e relative\n", e);
	/* A file that also says scaling type "llama3" with factor 8: the same
	 * model (the factor is carried by the tensor, not applied again). */
	m = load(p3b);
	CHECK(m->hp.rope_freq_scale == 1.0f && m->rope_freqs);
	kvt_model_free(m);
	CHECK(!memcmp(l3b, l3, n * 4));
	printf("forward: scaling.type \"llama3\" + factor 8 with rope_freqs.weight: same logits\n");

	/* (b) The tiered path pages (a tenth of the KV fast) and matches. */
	run(p3, 1, np, gen, l3t, t3t, 1);
	for (unsigned i = 0; i < gen; i++) {
		e = t_rel_err(l3t + (size_t)i * V, l3 + (size_t)i * V, V);
		if (!(e <= TOL) || t3t[i] != t3[i]) {
			fprintf(stderr, "tiered vs dense step %u: relative error %.3g (limit %g), "
				"token %d vs %d\n", i, e, TOL, t3t[i], t3[i]);
			exit(1);
		}
	}
	printf("tiered (fast 10%%, host 25%%, nvme) = dense with llama3 factors: %u steps within %g\n",
	       gen, TOL);
	unlink(p1);
	unlink(p2);
	unlink(plin);
	unlink(p3b);
	free(l0); free(l1); free(l2); free(llin); free(l3); free(l3t); free(l3b);
}

/* (c) Refusals: -EINVAL with one line naming the problem. */
static void expect_refused(const char *src, const struct edit *ed, const char *what,
			   const char *want1, const char *want2)
{
	struct kvt_model *m = NULL;
	char p[512], err[512] = "";
	int ret;

	tpath(p, sizeof(p), "bad");
	rewrite(src, p, ed);
	ret = kvt_model_load(p, &m, err, sizeof(err));
	unlink(p);
	if (ret != -EINVAL || m || !strstr(err, want1) || (want2 && !strstr(err, want2)) ||
	    strchr(err, '\n')) {
		fprintf(stderr, "%s: ret %d, err \"%s\", wanted -EINVAL and \"%s\"%s%s\n", what, ret,
			err, want1, want2 ? " and " : "", want2 ? want2 : "");
		exit(1);
	}
	printf("  %-24s %s\n", what, strncmp(err, p, strlen(p)) ? err : err + strlen(p) + 2);
}

static void test_refused(const char *p0, const char *p3)
{
	float f[HD / 2 + 1];
	uint16_t h[HD / 2];
	struct edit ed;
	char p[512];
	struct kvt_model *m;

	for (unsigned i = 0; i <= HD / 2; i++)
		f[i] = 1.5f;
	for (unsigned i = 0; i < HD / 2; i++)
		h[i] = 0x3c00;	/* 1.0 in f16 */
	printf("refused:\n");
	ed = (struct edit){ .freqs = 1, .type = KVT_GGML_F32, .n_dims = 1, .ne = { HD / 2 - 1, 1 },
			    .data = f };
	expect_refused(p0, &ed, "too few factors", "rope_freqs.weight", "[15, 1, 1, 1], expected [16]");
	ed.ne[0] = HD / 2 + 1;
	expect_refused(p0, &ed, "too many factors", "rope_freqs.weight", "[17, 1, 1, 1], expected [16]");
	ed = (struct edit){ .freqs = 1, .type = KVT_GGML_F32, .n_dims = 2, .ne = { HD / 4, 2 },
			    .data = f };
	expect_refused(p0, &ed, "2-D factors", "rope_freqs.weight", "[8, 2, 1, 1], expected [16]");
	ed = (struct edit){ .freqs = 1, .type = KVT_GGML_F16, .n_dims = 1, .ne = { HD / 2, 1 },
			    .data = h };
	expect_refused(p0, &ed, "f16 factors", "rope_freqs.weight", "has type f16, expected f32");
	ed = (struct edit){ .freqs = 1, .type = KVT_GGML_F32, .n_dims = 1, .ne = { HD / 2, 1 },
			    .data = f };
	f[3] = 0;
	expect_refused(p0, &ed, "a zero factor", "rope_freqs.weight", "value 3 is 0, expected a positive");
	f[3] = 1.5f;
	f[7] = -2;
	expect_refused(p0, &ed, "a negative factor", "rope_freqs.weight", "value 7 is -2, expected");
	f[7] = 1.5f;
	f[15] = NAN;
	expect_refused(p0, &ed, "a NaN factor", "rope_freqs.weight", "value 15 is nan");
	f[15] = 1.5f;
	f[0] = INFINITY;
	expect_refused(p0, &ed, "an infinite factor", "rope_freqs.weight", "value 0 is inf");
	f[0] = 1.5f;
	ed = (struct edit){ .scaling_type = "llama3", .scaling_factor = 8, .freqs = -1 };
	expect_refused(p3, &ed, "llama3 without factors", "\"llama3\" needs tensor rope_freqs.weight",
		       NULL);
	ed = (struct edit){ .scaling_type = "yarn" };
	expect_refused(p3, &ed, "yarn", "llama.rope.scaling.type \"yarn\" is not supported", NULL);
	/* n_rot / 2 factors, not head_dim / 2, when fewer dims are rotated. */
	ed = (struct edit){ .rope_dim = HD / 2 };
	expect_refused(p3, &ed, "rope dims 16, 16 factors", "rope_freqs.weight", "expected [8] (rotated dimensions 16 / 2)");

	/* ...and the same with rope_dim / 2 factors loads. */
	ed = (struct edit){ .rope_dim = HD / 2, .freqs = 1, .type = KVT_GGML_F32, .n_dims = 1,
			    .ne = { HD / 4, 1 }, .data = f };
	tpath(p, sizeof(p), "rd16");
	rewrite(p0, p, &ed);
	m = load(p);
	unlink(p);
	CHECK_EQ(m->hp.rope_dim, HD / 2);
	CHECK(m->rope_freqs && m->rope_freqs[HD / 4 - 1] == 1.5f);
	CHECK(m->rope_inv_freq[1] == pow(THETA, -2.0 / (HD / 2)) / 1.5f);
	kvt_model_free(m);
	printf("  %-24s loaded\n", "rope dims 16, 8 factors");
}

int main(void)
{
	const char *d = getenv("KVT_TEST_DIR");
	struct kvt_synth s = base_syn;
	char p0[512], p3[512];

	snprintf(dir, sizeof(dir), "%s", d && *d ? d : "/tmp");
	tpath(p0, sizeof(p0), "plain");
	tpath(p3, sizeof(p3), "llama3");
	synth(&s, p0);
	s.rope_freqs = KVT_SYNTH_ROPE_LLAMA3;
	synth(&s, p3);
	test_rope(p0, p3);
	test_forward(p0, p3);
	test_refused(p0, p3);
	unlink(p0);
	unlink(p3);
	return 0;
}
