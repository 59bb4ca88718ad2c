/* SPDX-License-Identifier: MIT */
/*
 * The tiered forward pass against the dense reference: for several model
 * geometries, tier sizes (one a tenth of the KV) and policies, the logits
 * of every step match within 1e-4 relative and greedy decoding picks the
 * same tokens. Then the same for batched decoding with forks, park and
 * resume, and a session saved and restored in another process.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/model_common.h"
#include "kernels/cpu/qdots.h"
#include "runtime/gguf.h"
#include "runtime/infer.h"
#include "runtime/synth.h"

#define TOL 1e-4

struct geo {
	const char *name;
	struct kvt_synth syn;
	int kv_type;
	unsigned page_tokens, chunk, prompt, gen;
};

struct tiers {
	const char *name;
	unsigned fast_pct, host_pct;	/* of the KV's pages; nvme gets the rest */
	const char *policy;
	unsigned threads;
};

static void prompt_tokens(int32_t *t, unsigned n, uint32_t n_vocab, unsigned seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (unsigned i = 0; i < n; i++) {
		x ^= x << 13; x ^= x >> 7; x ^= x << 17;
		t[i] = (int32_t)(3 + x % (n_vocab - 3));
	}
}

/* An engine: dense, or over a fresh pager with tiers sized in per cent of
 * the KV the run needs (n_ctx tokens, nseq sequences). */
static void rig_open(struct rig *r, struct kvt_model *m, const struct geo *g,
		     const struct tiers *t, unsigned n_ctx, unsigned nseq)
{
	struct kvt_engine_params ep;

	memset(r, 0, sizeof(*r));
	kvt_engine_params_default(&ep);
	ep.n_ctx = n_ctx;
	ep.kv_type = g->kv_type;
	ep.chunk = g->chunk;
	ep.max_batch = 8;
	ep.n_threads = t ? t->threads : 1;
	ep.dense = !t;
	if (t) {
		uint64_t pages, fast, host;

		pages = (uint64_t)m->hp.n_layer * nseq * ((n_ctx + g->page_tokens - 1) / g->page_tokens);
		fast = pages * t->fast_pct / 100;
		host = pages * t->host_pct / 100;
		if (fast < 2ull * m->hp.n_layer * nseq)
			fast = 2ull * m->hp.n_layer * nseq;
		if (host < 4)
			host = 4;	/* the staging the NVMe tier reads through */
		r->p = t_open_model_pager(m, g->kv_type, g->page_tokens, fast, host, pages + 16,
					  t->policy, &r->dev);
	}
	rig_engine(r, m, &ep);
}

/* Prefill then greedy decode; logits (gen, n_vocab) and tokens (gen) out. */
static void generate(struct rig *r, struct kvt_session *s, const int32_t *prompt, unsigned np,
		     unsigned gen, float *logits, int32_t *toks, uint32_t V)
{
	t_greedy(r->e, s, prompt, np, gen, logits, toks, V);
}

static void compare(const char *what, const float *a, const float *b, const int32_t *ta,
		    const int32_t *tb, unsigned gen, uint32_t V, double *worst)
{
	for (unsigned i = 0; i < gen; i++) {
		double e = t_rel_err(a + (size_t)i * V, b + (size_t)i * V, V);

		if (e > *worst)
			*worst = e;
		if (!(e <= TOL) || ta[i] != tb[i]) {
			fprintf(stderr, "%s: step %u: relative error %.3g (limit %g), token %d vs %d\n",
				what, i, e, TOL, ta[i], tb[i]);
			exit(1);
		}
	}
}

static const struct geo geos[] = {
	{ "mha-f32w-f16kv", { .layers = 2, .dim = 64, .heads = 4, .kv_heads = 4, .ctx = 4096,
			      .vocab = 300, .seed = 11, .type = KVT_GGML_F32 },
	  KVT_KV_F16, 16, 256, 640, 12 },
	{ "gqa-f16w-f32kv", { .layers = 3, .dim = 128, .heads = 8, .kv_heads = 2, .ctx = 4096,
			      .vocab = 320, .seed = 12, .type = KVT_GGML_F16 },
	  KVT_KV_F32, 16, 7, 200, 10 },
	{ "mqa-q8w-f16kv", { .layers = 2, .dim = 64, .heads = 4, .kv_heads = 1, .ctx = 4096,
			     .vocab = 288, .seed = 13, .type = KVT_GGML_Q8_0, .tied = 1 },
	  KVT_KV_F16, 64, 64, 300, 10 },
	{ "gqa-bf16w-f16kv", { .layers = 2, .dim = 96, .heads = 6, .kv_heads = 3, .ctx = 4096,
			       .vocab = 260, .seed = 14, .type = KVT_GGML_BF16 },
	  KVT_KV_F16, 64, 32, 160, 8 },
	/* Qwen2 (biases, NEOX RoPE through reordered wq and wk rows) on the
	 * _K_M mix, and Llama on q4_0. */
	{ "qwen2-q4km-f16kv", { .layers = 2, .dim = 256, .heads = 4, .kv_heads = 2, .ctx = 4096,
				.vocab = 300, .seed = 15, .type = KVT_GGML_Q4_K, .mix = 1,
				.qwen2 = 1, .tokenizer = KVT_SYNTH_TOK_GPT2, .pre = "qwen2" },
	  KVT_KV_F16, 16, 64, 200, 8 },
	{ "gqa-q4_0w-f32kv", { .layers = 2, .dim = 128, .heads = 4, .kv_heads = 2, .ctx = 4096,
			       .vocab = 300, .seed = 16, .type = KVT_GGML_Q4_0 },
	  KVT_KV_F32, 16, 16, 120, 8 },
	/* q8_0 KV: 136-byte head rows, so pages of 64 tokens are whole 4 KiB
	 * blocks. */
	{ "mha-q8w-q8kv", { .layers = 2, .dim = 512, .heads = 4, .kv_heads = 4, .ctx = 4096,
			    .vocab = 300, .seed = 18, .type = KVT_GGML_Q8_0 },
	  KVT_KV_Q8_0, 64, 48, 300, 8 },
	/* q4_0 KV: 72-byte head rows, 64-token pages of 9 blocks of 4 KiB. */
	{ "mha-q4w-q4kv", { .layers = 2, .dim = 512, .heads = 4, .kv_heads = 4, .ctx = 4096,
			    .vocab = 300, .seed = 19, .type = KVT_GGML_Q4_0 },
	  KVT_KV_Q4_0, 64, 48, 300, 8 },
};

static const struct tiers tier_sets[] = {
	{ "all-fast", 100, 0, "lru", 2 },
	{ "fast10-host25-lru", 10, 25, "lru", 2 },
	{ "fast10-nvme-clock", 10, 0, "clock", 1 },
	{ "fast10-host25-mru", 10, 25, "mru", 2 },
	{ "fast10-host25-arc", 10, 25, "arc", 2 },
	{ "fast10-nvme-s3fifo", 10, 0, "s3fifo", 2 },
	{ "fast10-host25-sieve", 10, 25, "sieve", 1 },
};

static void test_geometries(void)
{
	for (unsigned gi = 0; gi < sizeof(geos) / sizeof(geos[0]); gi++) {
		struct geo g = geos[gi];
		struct kvt_model *m = make_model(&g.syn, g.name);
		uint32_t V = m->hp.n_vocab;
		unsigned np = t_scale(g.prompt) < 8 ? 8 : t_scale(g.prompt), n_ctx = np + g.gen;
		int32_t *prompt = malloc(np * sizeof(int32_t));
		float *ref = malloc((size_t)g.gen * V * sizeof(float));
		float *got = malloc((size_t)g.gen * V * sizeof(float));
		int32_t tref[64], tgot[64];
		struct kvt_session *s;
		struct rig r;

		CHECK(prompt && ref && got && g.gen <= 64);
		prompt_tokens(prompt, np, V, gi + 1);
		rig_open(&r, m, &g, NULL, n_ctx, 1);
		CHECK_EQ(kvt_session_new(r.e, &s), 0);
		generate(&r, s, prompt, np, g.gen, ref, tref, V);
		kvt_session_free(r.e, s);
		rig_close(&r);

		for (unsigned ti = 0; ti < sizeof(tier_sets) / sizeof(tier_sets[0]); ti++) {
			const struct tiers *t = &tier_sets[ti];
			struct kvt_stats st;
			double worst = 0;
			char what[128];

			rig_open(&r, m, &g, t, n_ctx, 1);
			CHECK_EQ(kvt_session_new(r.e, &s), 0);
			generate(&r, s, prompt, np, g.gen, got, tgot, V);
			snprintf(what, sizeof(what), "%s/%s", g.name, t->name);
			compare(what, got, ref, tgot, tref, g.gen, V, &worst);
			CHECK_EQ(kvt_pager_stats(r.p, &st), 0);
			printf("%-18s %-20s ok: %u steps, worst relative error %.2e, fast hits %llu, "
			       "misses %llu, nvme reads %llu\n", g.name, t->name, g.gen, worst,
			       (unsigned long long)st.tier[KVT_TIER_FAST].hits,
			       (unsigned long long)st.tier[KVT_TIER_FAST].misses,
			       (unsigned long long)st.tier[KVT_TIER_NVME].bytes_out / kvt_pager_page_bytes(r.p));
			/* A fast tier smaller than the KV must really have paged. */
			if (st.tier[KVT_TIER_FAST].capacity < st.pages)
				CHECK(st.tier[KVT_TIER_FAST].misses > 0);
			CHECK_EQ(st.lost_pages, 0);
			kvt_session_free(r.e, s);
			rig_close(&r);
		}
		free(prompt); free(ref); free(got);
		kvt_model_free(m);
	}
}

/* Three sequences decoded together, two of them forks of the first;
 * every step's logits equal the dense path doing the same. */
static void test_batch_fork_park(void)
{
	const struct geo *g = &geos[1];
	struct kvt_model *m = make_model(&g->syn, "batch");
	const struct tiers t = { "fast10", 10, 20, "lru", 2 };
	uint32_t V = m->hp.n_vocab;
	unsigned np = t_scale(96) < 16 ? 16 : t_scale(96), gen = 8, n_ctx = np + gen + 8;
	int32_t prompt[128], extra[8] = { 5, 6, 7, 8, 9, 10, 11, 12 };
	float *lg[2][3];
	struct rig r[2];
	int i, k;

	prompt_tokens(prompt, np, V, 77);
	for (i = 0; i < 2; i++) {
		struct kvt_session *ss[3];
		int32_t tok[3];

		rig_open(&r[i], m, g, i ? &t : NULL, n_ctx, 3);
		CHECK_EQ(kvt_session_new(r[i].e, &ss[0]), 0);
		CHECK_EQ(kvt_eval(r[i].e, ss[0], prompt, np, NULL, NULL), 0);
		CHECK_EQ(kvt_session_fork(r[i].e, ss[0], np, &ss[1]), 0);
		CHECK(kvt_session_logits(ss[1]));
		CHECK_EQ(kvt_session_fork(r[i].e, ss[0], np / 2 + 1, &ss[2]), 0);
		CHECK(!kvt_session_logits(ss[2]));
		CHECK_EQ(kvt_eval(r[i].e, ss[2], extra, 8, NULL, NULL), 0);
		/* Park the second while the others go on, then bring it back. */
		CHECK_EQ(kvt_session_park(r[i].e, ss[1]), 0);
		for (k = 0; k < 3; k++)
			CHECK(lg[i][k] = malloc((size_t)gen * V * sizeof(float)));
		for (unsigned st = 0; st < gen; st++) {
			for (k = 0; k < 3; k++) {
				memcpy(lg[i][k] + (size_t)st * V, kvt_session_logits(ss[k]), V * sizeof(float));
				tok[k] = t_argmax(kvt_session_logits(ss[k]), V);
			}
			if (st == 2)
				CHECK_EQ(kvt_session_resume(r[i].e, ss[1]), 0);
			if (st < 2)	/* ss[1] parked: the other two only */
				CHECK_EQ(kvt_decode(r[i].e, (struct kvt_session *[]){ ss[0], ss[2] },
						    (int32_t[]){ tok[0], tok[2] }, 2), 2);
			else
				CHECK_EQ(kvt_decode(r[i].e, ss, tok, 3), 3);
		}
		for (k = 0; k < 3; k++)
			kvt_session_free(r[i].e, ss[k]);
		rig_close(&r[i]);
	}
	for (k = 0; k < 3; k++) {
		double worst = 0;
		int32_t ta[8], tb[8];

		for (unsigned st = 0; st < gen; st++) {
			ta[st] = t_argmax(lg[1][k] + (size_t)st * V, V);
			tb[st] = t_argmax(lg[0][k] + (size_t)st * V, V);
		}
		compare("batch", lg[1][k], lg[0][k], ta, tb, gen, V, &worst);
		printf("batch+fork+park  sequence %d ok: worst relative error %.2e\n", k, worst);
		free(lg[0][k]);
		free(lg[1][k]);
	}
	kvt_model_free(m);
}

/* Save after a prefill, restore in a child process over a fresh pager and
 * continue: the logits equal the dense run's. Broken files are refused. */
static void test_save_restore(void)
{
	const struct geo *g = &geos[0];
	struct kvt_model *m = make_model(&g->syn, "save");
	const struct tiers t = { "fast10", 10, 25, "lru", 2 };
	uint32_t V = m->hp.n_vocab;
	unsigned np = t_scale(150) < 16 ? 16 : t_scale(150), gen = 6, n_ctx = np + gen;
	int32_t prompt[160], tref[8], tgot[8];
	float *ref = malloc((size_t)gen * V * sizeof(float)), *got = malloc((size_t)gen * V * sizeof(float));
	char path[512], bad[600], err[512];
	struct kvt_session *s;
	struct rig r;
	int status;
	pid_t pid;

	CHECK(ref && got);
	prompt_tokens(prompt, np, V, 99);
	snprintf(path, sizeof(path), "%s/equiv-%d.session", t_dir(), (int)getpid());
	rig_open(&r, m, g, NULL, n_ctx, 1);
	CHECK_EQ(kvt_session_new(r.e, &s), 0);
	generate(&r, s, prompt, np, gen, ref, tref, V);
	kvt_session_free(r.e, s);
	rig_close(&r);

	rig_open(&r, m, g, &t, n_ctx, 1);
	CHECK_EQ(kvt_session_new(r.e, &s), 0);
	CHECK_EQ(kvt_eval(r.e, s, prompt, np, NULL, NULL), 0);
	CHECK_EQ(kvt_session_park(r.e, s), 0);	/* saved from NVMe, as a parked one would be */
	if (kvt_session_save(r.e, s, path, err, sizeof(err))) {
		fprintf(stderr, "save: %s\n", err);
		exit(1);
	}
	kvt_session_free(r.e, s);
	rig_close(&r);

	fflush(NULL);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		double worst = 0;

		rig_open(&r, m, g, &t, n_ctx, 1);
		if (kvt_session_restore(r.e, path, &s, err, sizeof(err))) {
			fprintf(stderr, "restore: %s\n", err);
			_exit(1);
		}
		CHECK_EQ(kvt_session_len(s), np);
		CHECK(!memcmp(kvt_session_tokens(s), prompt, np * sizeof(int32_t)));
		generate(&r, s, NULL, 0, gen, got, tgot, V);
		compare("restored", got, ref, tgot, tref, gen, V, &worst);
		printf("save+restore     ok in a new process: worst relative error %.2e\n", worst);
		kvt_session_free(r.e, s);
		rig_close(&r);
		fflush(NULL);
		_exit(0);
	}
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

	/* A flipped byte, a truncated file, another model: each refused. */
	{
		FILE *f = fopen(path, "r+b");
		long size;
		int c;

		CHECK(f);
		CHECK(!fseek(f, 0, SEEK_END));
		size = ftell(f);
		CHECK(!fseek(f, size / 2, SEEK_SET));
		c = fgetc(f);
		CHECK(!fseek(f, size / 2, SEEK_SET));
		fputc(c ^ 0x10, f);
		fclose(f);
		rig_open(&r, m, g, NULL, n_ctx, 1);
		CHECK_EQ(kvt_session_restore(r.e, path, &s, err, sizeof(err)), -EINVAL);
		CHECK(strstr(err, "checksum"));
		printf("corrupt session refused: %s\n", err);
		CHECK(!truncate(path, size / 3));
		CHECK_EQ(kvt_session_restore(r.e, path, &s, err, sizeof(err)), -EINVAL);
		CHECK(strstr(err, "truncated"));
		printf("truncated session refused: %s\n", err);
		rig_close(&r);
	}
	{
		struct kvt_model *m2 = make_model(&geos[3].syn, "other");

		rig_open(&r, m, g, NULL, n_ctx, 1);
		CHECK_EQ(kvt_session_new(r.e, &s), 0);
		CHECK_EQ(kvt_eval(r.e, s, prompt, 4, NULL, NULL), 0);
		/* A link planted at the temporary name is neither followed nor
		 * removed, and the save says why; a stale temporary of our own
		 * (a save that died: PATH.PID.tmp, pager/afile.h) is replaced. */
		{
			char tmp[600], victim[600];
			struct stat st;
			FILE *f;

			snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
			snprintf(victim, sizeof(victim), "%s.victim", path);
			CHECK((f = fopen(victim, "w")) && fputs("keep me", f) >= 0 && !fclose(f));
			CHECK(!symlink(victim, tmp));
			CHECK_EQ(kvt_session_save(r.e, s, path, err, sizeof(err)), -EEXIST);
			CHECK(strstr(err, "not touched"));
			CHECK(!stat(victim, &st) && st.st_size == 7);
			CHECK(!lstat(tmp, &st) && S_ISLNK(st.st_mode));
			printf("link at the temporary name refused: %s\n", err);
			CHECK(!unlink(tmp) && !unlink(victim));
			CHECK((f = fopen(tmp, "w")) && fputs("half a session", f) >= 0 && !fclose(f));
			CHECK_EQ(kvt_session_save(r.e, s, path, err, sizeof(err)), 0);
			CHECK(lstat(tmp, &st) && errno == ENOENT);
			CHECK(!stat(path, &st) && (st.st_mode & 0777) == 0600);
		}
		kvt_session_free(r.e, s);
		rig_close(&r);
		rig_open(&r, m2, &geos[3], NULL, n_ctx, 1);
		CHECK_EQ(kvt_session_restore(r.e, path, &s, err, sizeof(err)), -EINVAL);
		printf("other model's session refused: %s\n", err);
		rig_close(&r);
		kvt_model_free(m2);
	}
	snprintf(bad, sizeof(bad), "%s", path);
	unlink(bad);
	free(ref);
	free(got);
	kvt_model_free(m);
}

/* Bad requests: past the context, a token outside the vocabulary. */
static void test_bad_input(void)
{
	const struct geo *g = &geos[0];
	struct kvt_model *m = make_model(&g->syn, "bad");
	int32_t t[8] = { 3, 4, 5, 6, 7, 8, 9, 10 };
	struct kvt_session *s;
	struct rig r;

	rig_open(&r, m, g, NULL, 6, 1);
	CHECK_EQ(kvt_session_new(r.e, &s), 0);
	CHECK_EQ(kvt_eval(r.e, s, t, 8, NULL, NULL), -ERANGE);
	CHECK_EQ(kvt_session_len(s), 0);
	t[2] = (int32_t)m->hp.n_vocab;
	CHECK_EQ(kvt_eval(r.e, s, t, 3, NULL, NULL), -EINVAL);
	t[2] = -1;
	CHECK_EQ(kvt_eval(r.e, s, t, 3, NULL, NULL), -EINVAL);
	CHECK_EQ(kvt_session_len(s), 0);
	CHECK_EQ(kvt_session_error(s), 0);
	t[2] = 5;
	CHECK_EQ(kvt_eval(r.e, s, t, 6, NULL, NULL), 0);
	CHECK_EQ(kvt_decode(r.e, &s, t, 1), 0);		/* full: ended, none left */
	CHECK_EQ(kvt_session_error(s), -ERANGE);
	kvt_session_free(r.e, s);
	rig_close(&r);
	kvt_model_free(m);
	printf("bad input refused\n");
}

int main(void)
{
	/* The dense path's prefill takes sgemm where the pager's chunks take
	 * the integer dots on x rounded to 8 bits: compare the paths on f32
	 * activations (t_quants holds the integer dots to their bound). */
	kvt_cpu_set_int8_dots(0);
	test_geometries();
	test_batch_fork_park();
	test_save_restore();
	test_bad_input();
	return 0;
}
