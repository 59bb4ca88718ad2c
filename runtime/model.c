/* SPDX-License-Identifier: MIT */
/*
 * Llama-family model loading (see runtime/model.h).
 *
 * Every number the forward pass will use is checked here, once: the
 * geometry read from the metadata must agree with the shape of every
 * tensor, so the kernels can trust n_in and n_out without re-checking.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/quants.h"
#include "runtime/gguf.h"
#include "runtime/model.h"
#include "runtime/tokenizer.h"

typedef unsigned long long ull;

struct ld {
	struct kvt_model *m;
	const char *path;
	char *err;
	size_t errlen;
	char key[4][96];		/* key(): the architecture's keys, in turn */
	unsigned next_key;
};

/* "<architecture>.name": the metadata keys of the model's architecture
 * (llama.block_count, qwen2.block_count). Four in use at once at most. */
static const char *key(struct ld *l, const char *name)
{
	char *k = l->key[l->next_key++ % 4];

	snprintf(k, sizeof(l->key[0]), "%s.%s", l->m->hp.arch, name);
	return k;
}

static int fail(struct ld *l, int ret, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (l->err && l->errlen) {
		va_start(ap, fmt);
		vsnprintf(msg, sizeof(msg), fmt, ap);
		va_end(ap);
		snprintf(l->err, l->errlen, "%s: %s", l->path, msg);
	}
	return ret;
}

/* An unsigned metadata value stored as any integer type. */
static int get_uint(struct ld *l, const char *key, uint32_t *v, int required)
{
	const struct kvt_gguf_kv *kv = kvt_gguf_find_kv(l->m->g, key);
	uint64_t x = 0;

	if (!kv) {
		if (required)
			return fail(l, -EINVAL, "metadata key %s is missing", key);
		return 0;
	}
	if (kv->type == KVT_GGUF_U32 || kv->type == KVT_GGUF_I32) {
		uint32_t t;

		memcpy(&t, kv->data, 4);
		if (kv->type == KVT_GGUF_I32 && (int32_t)t < 0)
			goto bad;
		x = t;
	} else if (kv->type == KVT_GGUF_U64 || kv->type == KVT_GGUF_I64) {
		memcpy(&x, kv->data, 8);
	} else if (kv->type == KVT_GGUF_U16 || kv->type == KVT_GGUF_U8) {
		uint16_t t = 0;

		memcpy(&t, kv->data, kv->type == KVT_GGUF_U16 ? 2 : 1);
		x = t;
	} else {
		return fail(l, -EINVAL, "metadata key %s at offset %llu is not an integer",
			    key, (ull)kv->off);
	}
	if (x == 0 || x > (1u << 30))
		goto bad;
	*v = (uint32_t)x;
	return 0;
bad:
	return fail(l, -EINVAL, "metadata key %s at offset %llu: %llu is out of range 1..2^30",
		    key, (ull)kv->off, (ull)x);
}

static int get_float(struct ld *l, const char *key, float *v)
{
	const struct kvt_gguf_kv *kv = kvt_gguf_find_kv(l->m->g, key);

	if (!kv)
		return 0;
	if (kv->type == KVT_GGUF_F32) {
		memcpy(v, kv->data, 4);
	} else if (kv->type == KVT_GGUF_F64) {
		double d;

		memcpy(&d, kv->data, 8);
		*v = (float)d;
	} else {
		return fail(l, -EINVAL, "metadata key %s at offset %llu is not a float",
			    key, (ull)kv->off);
	}
	if (!isfinite(*v) || *v <= 0)
		return fail(l, -EINVAL, "metadata key %s at offset %llu: %g is not a positive number",
			    key, (ull)kv->off, (double)*v);
	return 0;
}

static int str_eq(const struct kvt_gguf_str *s, const char *c)
{
	return s->len == strlen(c) && !memcmp(s->ptr, c, s->len);
}

/* A 2-D weight of shape (n_out, n_in), ne = { n_in, n_out }. */
static int mat(struct ld *l, const char *name, uint32_t n_in, uint32_t n_out,
	       struct kvt_mat *w, int optional)
{
	const struct kvt_gguf_tensor *t = kvt_gguf_find_tensor(l->m->g, name);

	if (!t) {
		if (optional)
			return 1;
		return fail(l, -EINVAL, "tensor %s is missing", name);
	}
	if (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != 1 || t->ne[3] != 1)
		return fail(l, -EINVAL, "tensor %s (info at offset %llu) has shape [%llu, %llu, %llu, %llu], expected [%u, %u]",
			    name, (ull)t->info_off, (ull)t->ne[0], (ull)t->ne[1],
			    (ull)t->ne[2], (ull)t->ne[3], n_in, n_out);
	if (!kvt_mat_row_bytes(t->type, n_in)) {
		const char *tn = kvt_ggml_type_name(t->type);
		const struct kvt_qtype *q = kvt_qtype(t->type);

		if (q)
			return fail(l, -EINVAL, "tensor %s (info at offset %llu) has type %s, whose blocks "
				    "of %u do not divide its rows of %u", name, (ull)t->info_off, tn,
				    q->blk, n_in);
		return fail(l, -EINVAL, "tensor %s (info at offset %llu) has type %s, which kvt-run "
			    "does not compute with (it reads " KVT_WTYPES ")", name, (ull)t->info_off,
			    tn ? tn : "unknown");
	}
	w->data = t->data;
	w->type = t->type;
	w->n_in = n_in;
	w->n_out = n_out;
	return 0;
}

/* A norm vector, copied to f32 whatever its stored type. */
static int norm(struct ld *l, const char *name, uint32_t n, float **out)
{
	const struct kvt_gguf_tensor *t = kvt_gguf_find_tensor(l->m->g, name);
	struct kvt_mat w;
	uint32_t i;

	if (!t)
		return fail(l, -EINVAL, "tensor %s is missing", name);
	if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
		return fail(l, -EINVAL, "tensor %s (info at offset %llu) has %llu values, expected %u",
			    name, (ull)t->info_off, (ull)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]), n);
	if (!kvt_mat_row_bytes(t->type, n)) {
		const char *tn = kvt_ggml_type_name(t->type);

		return fail(l, -EINVAL, "tensor %s (info at offset %llu) has type %s, which kvt-run "
			    "does not read for a norm of %u values", name, (ull)t->info_off,
			    tn ? tn : "unknown", n);
	}
	if (!(*out = malloc(n * sizeof(float))))
		return fail(l, -ENOMEM, "out of memory");
	w = (struct kvt_mat){ .data = t->data, .type = t->type, .n_in = n, .n_out = 1 };
	kvt_mat_row(*out, &w, 0);
	for (i = 0; i < n; i++)
		if (!isfinite((*out)[i]))
			return fail(l, -EINVAL, "tensor %s (info at offset %llu): value %u is not finite",
				    name, (ull)t->info_off, i);
	return 0;
}

static int load_hparams(struct ld *l)
{
	struct kvt_hparams *hp = &l->m->hp;
	struct kvt_gguf_str s;
	const struct kvt_gguf_tensor *emb;
	float factor = 0;
	int ret;

	if (kvt_gguf_get_str(l->m->g, "general.architecture", &s))
		return fail(l, -EINVAL, "metadata key general.architecture is missing or not a string");
	if (!str_eq(&s, "llama") && !str_eq(&s, "qwen2"))
		return fail(l, -EINVAL, "architecture \"%.*s\" is not supported (llama and qwen2 are)",
			    (int)(s.len > 64 ? 64 : s.len), s.ptr);
	memcpy(hp->arch, s.ptr, s.len);
	hp->arch[s.len] = 0;
	/* Qwen2 rotates each head's dims i and i + rope_dim / 2 together
	 * (llama.cpp's NEOX RoPE), Llama adjacent pairs. */
	hp->rope_neox = str_eq(&s, "qwen2");
	if ((ret = get_uint(l, key(l, "block_count"), &hp->n_layer, 1)) ||
	    (ret = get_uint(l, key(l, "embedding_length"), &hp->n_embd, 1)) ||
	    (ret = get_uint(l, key(l, "feed_forward_length"), &hp->n_ff, 1)) ||
	    (ret = get_uint(l, key(l, "attention.head_count"), &hp->n_head, 1)) ||
	    (ret = get_uint(l, key(l, "context_length"), &hp->n_ctx_train, 1)))
		return ret;
	hp->n_head_kv = hp->n_head;
	if ((ret = get_uint(l, key(l, "attention.head_count_kv"), &hp->n_head_kv, 0)))
		return ret;
	if (hp->n_embd % hp->n_head)
		return fail(l, -EINVAL, "%s.embedding_length %u is not a multiple of %s.attention.head_count %u",
			    hp->arch, hp->n_embd, hp->arch, hp->n_head);
	if (hp->n_head % hp->n_head_kv)
		return fail(l, -EINVAL, "%s.attention.head_count %u is not a multiple of head_count_kv %u",
			    hp->arch, hp->n_head, hp->n_head_kv);
	hp->head_dim = hp->n_embd / hp->n_head;
	hp->rope_dim = hp->head_dim;
	if ((ret = get_uint(l, key(l, "rope.dimension_count"), &hp->rope_dim, 0)))
		return ret;
	if (hp->rope_dim > hp->head_dim || hp->rope_dim % 2)
		return fail(l, -EINVAL, "the rotated dimensions per head (%u, %s.rope.dimension_count "
			    "or the head size) must be even and at most the head size %u",
			    hp->rope_dim, hp->arch, hp->head_dim);
	/* Nine tensors a block, plus embedding and norm, before anything is
	 * sized by the block count. */
	if ((uint64_t)hp->n_layer * 9 + 2 > l->m->g->n_tensors)
		return fail(l, -EINVAL, "%s.block_count %u needs at least %llu tensors but the file has %llu",
			    hp->arch, hp->n_layer, (ull)hp->n_layer * 9 + 2, (ull)l->m->g->n_tensors);
	hp->rope_theta = 10000.0f;
	hp->rms_eps = 1e-5f;
	if ((ret = get_float(l, key(l, "rope.freq_base"), &hp->rope_theta)) ||
	    (ret = get_float(l, key(l, "attention.layer_norm_rms_epsilon"), &hp->rms_eps)))
		return ret;

	/*
	 * RoPE scaling: linear (positions divided by llama.rope.scaling.factor)
	 * unless the type is "none". Llama 3.1's "llama3" scaling has no GGUF
	 * scaling type: llama.cpp's converter bakes it into rope_freqs.weight
	 * (one divisor per pair, see load_rope_freqs) and writes no type or
	 * factor for it. A file that says "llama3" anyway is taken when it
	 * has that tensor, and its factor is then ignored: the divisors
	 * already carry it, and dividing the positions as well would scale
	 * twice.
	 */
	hp->rope_freq_scale = 1.0f;
	if (!kvt_gguf_get_str(l->m->g, key(l, "rope.scaling.type"), &s) &&
	    !str_eq(&s, "none") && !str_eq(&s, "linear") && !str_eq(&s, "llama3"))
		return fail(l, -EINVAL, "%s.rope.scaling.type \"%.*s\" is not supported "
			    "(none, linear, or llama3 with rope_freqs.weight)",
			    hp->arch, (int)(s.len > 32 ? 32 : s.len), s.ptr);
	if (!kvt_gguf_get_str(l->m->g, key(l, "rope.scaling.type"), &s) && str_eq(&s, "llama3")) {
		if (!kvt_gguf_find_tensor(l->m->g, "rope_freqs.weight"))
			return fail(l, -EINVAL, "%s.rope.scaling.type \"llama3\" needs tensor "
				    "rope_freqs.weight (the per-pair factors that carry it), which is missing",
				    hp->arch);
	} else {
		if ((ret = get_float(l, key(l, "rope.scaling.factor"), &factor)) ||
		    (!factor && (ret = get_float(l, key(l, "rope.scale_linear"), &factor))))
			return ret;
		if (factor && !(kvt_gguf_get_str(l->m->g, key(l, "rope.scaling.type"), &s) == 0 &&
				str_eq(&s, "none")))
			hp->rope_freq_scale = 1.0f / factor;
	}

	emb = kvt_gguf_find_tensor(l->m->g, "token_embd.weight");
	if (!emb)
		return fail(l, -EINVAL, "tensor token_embd.weight is missing");
	if (emb->ne[1] == 0 || emb->ne[1] > (1u << 30))
		return fail(l, -EINVAL, "tensor token_embd.weight (info at offset %llu): vocabulary of %llu",
			    (ull)emb->info_off, (ull)emb->ne[1]);
	hp->n_vocab = (uint32_t)emb->ne[1];
	return 0;
}

/*
 * rope_freqs.weight, as llama.cpp's converter writes it for Llama 3.x:
 * rope_dim / 2 f32 divisors, one per pair (llama.cpp's freq_factors, shape
 * {n_rot / 2}). Then the per-pair inverse frequencies, once: the forward
 * pass only multiplies them by the position.
 */
static int load_rope_freqs(struct ld *l)
{
	struct kvt_model *m = l->m;
	const struct kvt_hparams *hp = &m->hp;
	const struct kvt_gguf_tensor *t = kvt_gguf_find_tensor(m->g, "rope_freqs.weight");
	uint32_t n = hp->rope_dim / 2, i;

	if (t) {
		if (t->type != KVT_GGML_F32) {
			const char *tn = kvt_ggml_type_name(t->type);

			return fail(l, -EINVAL, "tensor rope_freqs.weight (info at offset %llu) has type %s, "
				    "expected f32", (ull)t->info_off, tn ? tn : "unknown");
		}
		if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
			return fail(l, -EINVAL, "tensor rope_freqs.weight (info at offset %llu) has shape "
				    "[%llu, %llu, %llu, %llu], expected [%u] (rotated dimensions %u / 2)",
				    (ull)t->info_off, (ull)t->ne[0], (ull)t->ne[1], (ull)t->ne[2],
				    (ull)t->ne[3], n, hp->rope_dim);
		if (!(m->rope_freqs = malloc((n ? n : 1) * sizeof(float))))
			return fail(l, -ENOMEM, "out of memory");
		memcpy(m->rope_freqs, t->data, n * sizeof(float));
		for (i = 0; i < n; i++)
			if (!isfinite(m->rope_freqs[i]) || m->rope_freqs[i] <= 0)
				return fail(l, -EINVAL, "tensor rope_freqs.weight (info at offset %llu): "
					    "value %u is %g, expected a positive finite divisor",
					    (ull)t->info_off, i, (double)m->rope_freqs[i]);
	}
	if (!(m->rope_inv_freq = malloc((n ? n : 1) * sizeof(double))))
		return fail(l, -ENOMEM, "out of memory");
	kvt_rope_inv_freq(m->rope_inv_freq, hp->rope_dim, hp->rope_theta, hp->rope_freq_scale,
			  m->rope_freqs);
	return 0;
}

/* An optional vector of n values (a bias): 0 and *out NULL without it. */
static int opt_vec(struct ld *l, const char *name, uint32_t n, float **out)
{
	*out = NULL;
	return kvt_gguf_find_tensor(l->m->g, name) ? norm(l, name, n, out) : 0;
}

/* Row i of a head, moved where adjacent-pair RoPE rotates it as NEOX RoPE
 * rotates i: dims i and i + half (half = rope_dim / 2) become 2i and
 * 2i + 1; dims past rope_dim stay. Q and K reordered alike leave every
 * q . k, and so attention, as it was. */
static uint32_t neox_row(uint32_t i, uint32_t rope_dim)
{
	uint32_t half = rope_dim / 2;

	return i >= rope_dim ? i : i < half ? 2 * i : 2 * (i - half) + 1;
}

/* wq's and wk's rows (and their biases) reordered by neox_row, into one
 * allocation the layer owns: qwen2 runs on the adjacent-pair RoPE of the
 * kernels, at the cost of a copy of wq and wk. */
static int neox_reorder(struct ld *l, struct kvt_layer *L)
{
	const struct kvt_hparams *hp = &l->m->hp;
	struct kvt_mat *w[2] = { &L->wq, &L->wk };
	float *b[2] = { L->bq, L->bk };
	size_t rb[2], off = 0;
	char *dst;

	for (int k = 0; k < 2; k++)
		rb[k] = kvt_mat_row_bytes(w[k]->type, w[k]->n_in);
	if (!(dst = L->wqk_own = malloc(rb[0] * w[0]->n_out + rb[1] * w[1]->n_out)))
		return fail(l, -ENOMEM, "out of memory");
	for (int k = 0; k < 2; k++) {
		uint32_t n = w[k]->n_out;
		float *was = b[k] ? malloc(n * sizeof(float)) : NULL;

		if (b[k] && !was)
			return fail(l, -ENOMEM, "out of memory");
		if (was)
			memcpy(was, b[k], n * sizeof(float));
		for (uint32_t r = 0; r < n; r++) {
			uint32_t h = r / hp->head_dim;
			uint32_t to = h * hp->head_dim + neox_row(r % hp->head_dim, hp->rope_dim);

			memcpy(dst + off + (size_t)to * rb[k],
			       (const char *)w[k]->data + (size_t)r * rb[k], rb[k]);
			if (was)
				b[k][to] = was[r];
		}
		free(was);
		w[k]->data = dst + off;
		off += rb[k] * n;
	}
	return 0;
}

/* m->type: the weight type of most of the layers' matrices' bytes, then
 * any other their matrices use ("q4_k+q6_k", as a _M file mixes them). */
static void describe_types(struct kvt_model *m)
{
	uint64_t bytes[64] = { 0 };
	uint32_t i, k, best = 0;
	size_t len;

	for (i = 0; i < m->hp.n_layer; i++) {
		const struct kvt_layer *L = &m->layers[i];
		const struct kvt_mat *w[] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up,
					      &L->w_down };
		for (k = 0; k < sizeof(w) / sizeof(w[0]); k++)
			if (w[k]->type < 64)
				bytes[w[k]->type] += (uint64_t)w[k]->n_out *
						     kvt_mat_row_bytes(w[k]->type, w[k]->n_in);
	}
	if (!m->hp.n_layer)
		best = m->tok_embd.type;
	for (k = 0; k < 64; k++)
		if (bytes[k] > bytes[best])
			best = k;
	snprintf(m->type, sizeof(m->type), "%s", kvt_ggml_type_name(best));
	for (k = 0; k < 64; k++) {
		len = strlen(m->type);
		if (k != best && bytes[k] && len + 1 < sizeof(m->type))
			snprintf(m->type + len, sizeof(m->type) - len, "+%s", kvt_ggml_type_name(k));
	}
}

static int load_weights(struct ld *l)
{
	struct kvt_model *m = l->m;
	const struct kvt_hparams *hp = &m->hp;
	uint32_t kv_dim = hp->head_dim * hp->n_head_kv, i;
	char name[96];
	int ret;

	if (!(m->layers = calloc(hp->n_layer, sizeof(*m->layers))))
		return fail(l, -ENOMEM, "out of memory");
	if ((ret = mat(l, "token_embd.weight", hp->n_embd, hp->n_vocab, &m->tok_embd, 0)) ||
	    (ret = norm(l, "output_norm.weight", hp->n_embd, &m->out_norm)))
		return ret;
	ret = mat(l, "output.weight", hp->n_embd, hp->n_vocab, &m->output, 1);
	if (ret < 0)
		return ret;
	m->tied = ret == 1;
	if (m->tied)
		m->output = m->tok_embd;

	for (i = 0; i < hp->n_layer; i++) {
		struct kvt_layer *L = &m->layers[i];
#define T(s) (snprintf(name, sizeof(name), "blk.%u." s, i), name)
		if ((ret = norm(l, T("attn_norm.weight"), hp->n_embd, &L->attn_norm)) ||
		    (ret = norm(l, T("ffn_norm.weight"), hp->n_embd, &L->ffn_norm)) ||
		    (ret = mat(l, T("attn_q.weight"), hp->n_embd, hp->n_embd, &L->wq, 0)) ||
		    (ret = mat(l, T("attn_k.weight"), hp->n_embd, kv_dim, &L->wk, 0)) ||
		    (ret = mat(l, T("attn_v.weight"), hp->n_embd, kv_dim, &L->wv, 0)) ||
		    (ret = mat(l, T("attn_output.weight"), hp->n_embd, hp->n_embd, &L->wo, 0)) ||
		    (ret = mat(l, T("ffn_gate.weight"), hp->n_embd, hp->n_ff, &L->w_gate, 0)) ||
		    (ret = mat(l, T("ffn_up.weight"), hp->n_embd, hp->n_ff, &L->w_up, 0)) ||
		    (ret = mat(l, T("ffn_down.weight"), hp->n_ff, hp->n_embd, &L->w_down, 0)) ||
		    (ret = opt_vec(l, T("attn_q.bias"), hp->n_embd, &L->bq)) ||
		    (ret = opt_vec(l, T("attn_k.bias"), kv_dim, &L->bk)) ||
		    (ret = opt_vec(l, T("attn_v.bias"), kv_dim, &L->bv)))
			return ret;
		if (hp->rope_neox && (ret = neox_reorder(l, L)))
			return ret;
#undef T
	}
	for (i = 0; i < m->g->n_tensors; i++)
		m->weight_bytes += m->g->tensors[i].nbytes;
	describe_types(m);
	return 0;
}

int kvt_model_load(const char *path, struct kvt_model **out, char *err, size_t errlen)
{
	struct kvt_model *m = calloc(1, sizeof(*m));
	struct ld l = { .m = m, .path = path, .err = err, .errlen = errlen };
	struct kvt_gguf_str s;
	const char *base;
	int ret;

	*out = NULL;
	if (!m)
		return fail(&l, -ENOMEM, "out of memory");
	ret = kvt_gguf_open(path, &m->g, err, errlen);	/* its message names the file */
	if (ret)
		goto fail;
	if ((ret = load_hparams(&l)) || (ret = load_rope_freqs(&l)) || (ret = load_weights(&l)))
		goto fail;
	ret = kvt_tokenizer_load(m->g, &m->tok, err, errlen);
	if (ret)
		goto fail;
	if (kvt_tokenizer_n_vocab(m->tok) != m->hp.n_vocab) {
		ret = fail(&l, -EINVAL, "tokenizer.ggml.tokens has %u entries but token_embd.weight has %u rows",
			   kvt_tokenizer_n_vocab(m->tok), m->hp.n_vocab);
		goto fail;
	}
	base = strrchr(path, '/');
	base = base ? base + 1 : path;
	if (!kvt_gguf_get_str(m->g, "general.name", &s))
		snprintf(m->name, sizeof(m->name), "%.*s", (int)(s.len > 63 ? 63 : s.len), s.ptr);
	else
		snprintf(m->name, sizeof(m->name), "%s", base);
	*out = m;
	return 0;
fail:
	kvt_model_free(m);
	return ret;
}

void kvt_model_free(struct kvt_model *m)
{
	uint32_t i;

	if (!m)
		return;
	if (m->layers)
		for (i = 0; i < m->hp.n_layer; i++) {
			free(m->layers[i].attn_norm);
			free(m->layers[i].ffn_norm);
			free(m->layers[i].bq);
			free(m->layers[i].bk);
			free(m->layers[i].bv);
			free(m->layers[i].wqk_own);
		}
	free(m->layers);
	free(m->out_norm);
	free(m->rope_freqs);
	free(m->rope_inv_freq);
	kvt_tokenizer_free(m->tok);
	kvt_gguf_close(m->g);
	free(m);
}

uint64_t kvt_model_kv_bytes_per_token(const struct kvt_model *m, int kv_type)
{
	return (uint64_t)m->hp.n_layer * 2 *
	       kvt_kv_bytes(kv_type, (size_t)m->hp.n_head_kv * m->hp.head_dim);
}
