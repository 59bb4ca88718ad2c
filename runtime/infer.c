/* SPDX-License-Identifier: MIT */
/*
 * The forward pass over paged (or dense) K/V; see runtime/infer.h.
 *
 * Rows: a forward step runs R rows at once, each a (session, token,
 * position); a prefill chunk is R rows of one session, a batched decode
 * step one row per session. The matrix products run over all R rows, so
 * the weights are read once per step; attention runs per session over its
 * own rows. Scratch for R rows is allocated once, at engine creation.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "kernels/cpu/quants.h"
#include "pager/afile.h"
#include "runtime/gguf.h"
#include "runtime/infer.h"

struct kvt_session {
	kvt_seq_t seq;			/* paged path */
	uint8_t **dk, **dv;		/* dense path: (n_layer) -> (n_ctx, kv_dim) */
	float	**kb;			/* selector on: (n_layer) -> (max_pages, n_kv_heads,
					 * 2, head_dim) min and max of each key dim */
	int32_t *tokens;		/* (len) */
	unsigned len;
	float	*logits;		/* (n_vocab), valid when have_logits */
	int	 have_logits;
	int	 parked;		/* appends refused until resume (-EBUSY) */
	int	 err;			/* -errno that ended the session */
};

/* One session's rows in a step. */
struct span {
	struct kvt_session *s;
	unsigned r0, n;			/* rows r0 .. r0 + n - 1 */
};

/* A layer's weights as the backend keeps them (kernels/compute.h): on
 * cpu the model's own, on a GPU copies in device memory. */
struct layer_w {
	const float *attn_norm, *ffn_norm;	/* (n_embd) buffers */
	const float *bq, *bk, *bv;		/* (n_embd | kv_dim) buffers; NULL without */
	struct kvt_mat wq, wk, wv, wo, w_gate, w_up, w_down;
};


struct kvt_engine {
	struct kvt_model *m;
	struct kvt_pager *p;		/* NULL on the dense path */
	struct kvt_engine_params ep;
	struct kvt_compute cx;		/* the kernels: the pager's device's, or cpu */
	int	 hostmem;		/* buffers are host memory (KVT_CX_HOST_MEMORY) */
	int	 async;			/* kernels run after the call (KVT_CX_ASYNC) */
	unsigned nthreads;
	unsigned page_tokens;
	unsigned kv_dim;		/* n_head_kv * head_dim */
	size_t kvrow;			/* bytes of one token's K (or V): kv_dim values */
	unsigned max_rows;
	unsigned max_pages;		/* n_ctx / page_tokens + 2: pages of a layer, at most */
	uint32_t *page_ids;		/* (max_pages): 0, 1, 2, ... */
	int	 select;		/* the Quest selector is on */
	int	 masses;		/* decode rows compute page masses */
	struct kvt_attn_shape sh1;	/* one row, for the key bounds */
	struct kvt_engine_stats st;

	/* Weights as the backend keeps them. */
	struct layer_w *w;		/* (n_layer) */
	struct kvt_mat output;		/* (n_vocab, n_embd) */
	const float *out_norm;		/* (n_embd) buffer */
	const double *inv_freq;		/* (rope_dim / 2) buffer */
	unsigned n_prepared;		/* matrices prepared, to release */

	/* Buffers (backend memory) for max_rows rows. */
	float	*x, *xn, *tmp;		/* (rows, n_embd) */
	float	*q, *att;		/* (rows, n_embd) */
	float	*k, *v;			/* (rows, kv_dim) */
	float	*g, *u;			/* (rows, n_ff) */
	void	*kh, *vh;		/* (rows) K and V rows of k, v in the KV type
					 * (f16, q8_0, q4_0; unused for f32) */
	uint32_t *dpos;			/* (rows) positions; pos itself on cpu */
	float	*logits;		/* (max_batch, n_vocab) */
	struct buf { void *p; size_t bytes; } *bufs;	/* what alloc_buf made, to free */
	unsigned nbufs, bufs_cap;

	/* Host memory; the same as the buffers above on cpu. */
	uint32_t *pos;			/* (rows) */
	uint32_t *last;			/* (max_batch) the row each span's logits come from */
	float	*hx;			/* (rows, n_embd) embedding rows before upload */
	float	*hk, *hv;		/* (rows, kv_dim) kvt_session_fill_random's K, V */
	float	*zeros;			/* (rows, n_embd) zeros, for a failed session's rows */
	struct kvt_page_ref *refs;	/* (max_pages) pages for one attn_pages call */

	/* Decode rows (paged path only). */
	float	*pm, *pl;		/* (max_pages, n_head) each page's partial */
	float	*mass;			/* (max_pages) */
	float	*psc;			/* (max_pages) page bounds (selector) */
	struct cand *cand;		/* (max_pages) selector candidates */
	uint32_t *sel;			/* (max_pages) pages chosen, ascending */
	uint8_t	*mark;			/* (max_pages) candidates chosen */
	float	*krow;			/* (kv_dim) one K row as f32 (key bounds) */
};

/* A page the selector may take: its bound and index. */
struct cand {
	float	 score;
	uint32_t page;
};

/* One attention call spread over the pool. */
struct attn_job {
	struct kvt_engine *e;
	struct kvt_session *s;
	unsigned layer, n_pages, n_tasks;
	const uint32_t *pages;		/* (n_pages) page indices, ascending */
	int	 partial;		/* write each page's partial to e->pm, e->pl */
	const float *q;
	const uint32_t *qpos;
	int err;			/* an error of some task (any one), read after the join */
};

void kvt_engine_params_default(struct kvt_engine_params *ep)
{
	*ep = (struct kvt_engine_params){
		.n_ctx = 4096, .kv_type = KVT_KV_F16, .chunk = 256, .max_batch = 16,
		.scores = 1, .select_sink = 1,
	};
}

int kvt_select_parse(struct kvt_engine_params *ep, const char *spec, char *err, size_t errlen)
{
	unsigned pages = 0, sink = 1;
	float frac = 0;
	const char *p;

	if (!strcmp(spec, "full") || !strcmp(spec, "none")) {
		ep->select_pages = 0;
		ep->select_frac = 0;
		ep->select_sink = 1;
		return 0;
	}
	if (strncmp(spec, "quest", 5) || (spec[5] && spec[5] != ':')) {
		snprintf(err, errlen, "selector \"%s\": expected full or quest:pages=K|frac=F[,sink=N]", spec);
		return -EINVAL;
	}
	for (p = spec[5] ? spec + 6 : spec + 5; *p;) {
		size_t klen = strcspn(p, "="), vlen;
		char val[32], *end;

		if (!p[klen]) {
			snprintf(err, errlen, "selector \"%s\": \"%s\" is not KEY=VALUE", spec, p);
			return -EINVAL;
		}
		vlen = strcspn(p + klen + 1, ",");
		if (!vlen || vlen >= sizeof(val)) {
			snprintf(err, errlen, "selector \"%s\": bad value for \"%.*s\"", spec, (int)klen, p);
			return -EINVAL;
		}
		memcpy(val, p + klen + 1, vlen);
		val[vlen] = 0;
		errno = 0;
		if (klen == 5 && !strncmp(p, "pages", 5)) {
			unsigned long v = strtoul(val, &end, 10);

			if (errno || *end || val[0] == '-' || !v || v > (1ul << 30))
				goto bad;
			pages = (unsigned)v;
		} else if (klen == 4 && !strncmp(p, "sink", 4)) {
			unsigned long v = strtoul(val, &end, 10);

			if (errno || *end || val[0] == '-' || v > (1ul << 30))
				goto bad;
			sink = (unsigned)v;
		} else if (klen == 4 && !strncmp(p, "frac", 4)) {
			frac = strtof(val, &end);
			if (errno || *end || !(frac > 0 && frac <= 1))
				goto bad;
		} else {
			snprintf(err, errlen, "selector \"%s\": unknown key \"%.*s\" (pages, frac, sink)",
				 spec, (int)klen, p);
			return -EINVAL;
		}
		p += klen + 1 + vlen;
		if (*p == ',')
			p++;
		continue;
bad:
		snprintf(err, errlen, "selector \"%s\": \"%s\" is not a valid %.*s (pages >= 1, "
			 "frac in (0, 1], sink >= 0)", spec, val, (int)klen, p);
		return -EINVAL;
	}
	if (!pages == !(frac > 0)) {
		snprintf(err, errlen, "selector \"%s\": give one of pages=K and frac=F", spec);
		return -EINVAL;
	}
	ep->select_pages = pages;
	ep->select_frac = frac;
	ep->select_sink = sink;
	return 0;
}

void kvt_select_format(const struct kvt_engine_params *ep, char *buf, size_t len)
{
	if (ep->select_pages)
		snprintf(buf, len, "quest:pages=%u,sink=%u", ep->select_pages, ep->select_sink);
	else if (ep->select_frac > 0)
		snprintf(buf, len, "quest:frac=%g,sink=%u", (double)ep->select_frac, ep->select_sink);
	else
		snprintf(buf, len, "full");
}

void kvt_engine_pager_geometry(const struct kvt_model *m, int kv_type, struct kvt_config *cfg)
{
	cfg->n_layers = m->hp.n_layer;
	cfg->n_kv_heads = m->hp.n_head_kv;
	cfg->head_dim = m->hp.head_dim;
	cfg->dtype_bytes = kv_type == KVT_KV_F32 ? 4 : 2;
	if (kvt_kv_block(kv_type))	/* a head's row of blocks, as 2-byte units */
		cfg->head_dim = (uint32_t)kvt_kv_bytes(kv_type, m->hp.head_dim) / 2;
}

static int efail(char *err, size_t errlen, int ret, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return ret;
}

const struct kvt_engine_params *kvt_engine_params(const struct kvt_engine *e)
{
	return &e->ep;
}

/* A buffer of the backend, freed with the engine. */
static int alloc_buf(struct kvt_engine *e, void *out, size_t bytes)
{
	void **o = out;
	int r;

	if (e->nbufs == e->bufs_cap) {
		unsigned cap = e->bufs_cap ? 2 * e->bufs_cap : 32;
		struct buf *nb = realloc(e->bufs, cap * sizeof(*nb));

		if (!nb)
			return -ENOMEM;
		e->bufs = nb;
		e->bufs_cap = cap;
	}
	if ((r = e->cx.ops->alloc(e->cx.ctx, bytes, o)))
		return r;
	e->bufs[e->nbufs++] = (struct buf){ *o, bytes };
	return 0;
}

/* Constant data the kernels read (norms, RoPE frequencies): the host's
 * own on cpu, an uploaded copy elsewhere. */
static int const_buf(struct kvt_engine *e, const void *host, size_t bytes, const void **out)
{
	void *b;
	int r;

	if (e->hostmem) {
		*out = host;
		return 0;
	}
	if ((r = alloc_buf(e, &b, bytes)) || (r = e->cx.ops->upload(e->cx.ctx, b, host, bytes)))
		return r;
	*out = b;
	return 0;
}

static int prepare(struct kvt_engine *e, const struct kvt_mat *w, struct kvt_mat *out)
{
	int r = e->cx.ops->mat_prepare(e->cx.ctx, w, out);

	if (!r)
		e->n_prepared++;
	return r;
}

/* x (rows, n) += b in every row, one call; b NULL: nothing. */
static int add_bias(struct kvt_engine *e, float *x, const float *b, unsigned rows, size_t n)
{
	return b ? e->cx.ops->add(e->cx.ctx, x, b, rows, n) : 0;
}

/* The model's weights as the backend keeps them. */
static int prepare_weights(struct kvt_engine *e)
{
	const struct kvt_model *m = e->m;
	const size_t E = m->hp.n_embd, KVD = (size_t)m->hp.head_dim * m->hp.n_head_kv;
	int r;

	if ((r = const_buf(e, m->out_norm, E * sizeof(float), (const void **)&e->out_norm)) ||
	    (r = const_buf(e, m->rope_inv_freq, m->hp.rope_dim / 2 * sizeof(double),
			   (const void **)&e->inv_freq)) ||
	    (r = prepare(e, &m->output, &e->output)))
		return r;
	for (unsigned l = 0; l < m->hp.n_layer; l++) {
		const struct kvt_layer *L = &m->layers[l];
		struct layer_w *W = &e->w[l];

		if ((r = const_buf(e, L->attn_norm, E * sizeof(float), (const void **)&W->attn_norm)) ||
		    (r = const_buf(e, L->ffn_norm, E * sizeof(float), (const void **)&W->ffn_norm)) ||
		    (r = prepare(e, &L->wq, &W->wq)) || (r = prepare(e, &L->wk, &W->wk)) ||
		    (r = prepare(e, &L->wv, &W->wv)) || (r = prepare(e, &L->wo, &W->wo)) ||
		    (r = prepare(e, &L->w_gate, &W->w_gate)) || (r = prepare(e, &L->w_up, &W->w_up)) ||
		    (r = prepare(e, &L->w_down, &W->w_down)))
			return r;
		if (L->bq && (r = const_buf(e, L->bq, E * sizeof(float), (const void **)&W->bq)))
			return r;
		if (L->bk && (r = const_buf(e, L->bk, KVD * sizeof(float), (const void **)&W->bk)))
			return r;
		if (L->bv && (r = const_buf(e, L->bv, KVD * sizeof(float), (const void **)&W->bv)))
			return r;
	}
	return 0;
}

static void release_weights(struct kvt_engine *e)
{
	unsigned n = e->n_prepared;

	if (!e->w)
		return;
	if (n) {
		e->cx.ops->mat_release(e->cx.ctx, &e->output);
		n--;
	}
	for (unsigned l = 0; l < e->m->hp.n_layer && n; l++) {
		struct kvt_mat *ms[] = { &e->w[l].wq, &e->w[l].wk, &e->w[l].wv, &e->w[l].wo,
					 &e->w[l].w_gate, &e->w[l].w_up, &e->w[l].w_down };

		for (unsigned i = 0; i < 7 && n; i++, n--)
			e->cx.ops->mat_release(e->cx.ctx, ms[i]);
	}
	e->n_prepared = 0;
}

int kvt_engine_new(struct kvt_model *m, struct kvt_pager *pager,
		   const struct kvt_engine_params *ep, struct kvt_engine **out,
		   char *err, size_t errlen)
{
	const struct kvt_hparams *hp = &m->hp;
	struct kvt_engine *e;
	size_t R, i;
	int ret = -ENOMEM;

	*out = NULL;
	if (!ep->n_ctx || !ep->chunk || !ep->max_batch ||
	    !kvt_kv_name(ep->kv_type))
		return efail(err, errlen, -EINVAL, "engine: n_ctx, chunk and max_batch must be positive, "
			     "kv type f16, f32, q8_0 or q4_0");
	if (kvt_kv_block(ep->kv_type) && hp->head_dim % 32)
		return efail(err, errlen, -EINVAL, "engine: %s KV needs a head size that is a "
			     "multiple of 32 (this model's is %u)", kvt_kv_name(ep->kv_type), hp->head_dim);
	if (!ep->dense && !pager)
		return efail(err, errlen, -EINVAL, "engine: no pager");
	if (ep->select_frac < 0 || ep->select_frac > 1)
		return efail(err, errlen, -EINVAL, "engine: the selector's fraction must be in (0, 1]");
	if (ep->dense && (ep->select_pages || ep->select_frac > 0))
		return efail(err, errlen, -EINVAL, "engine: the page selector needs the pager (not the dense path)");
	if (!(e = calloc(1, sizeof(*e))))
		return efail(err, errlen, -ENOMEM, "out of memory");
	e->m = m;
	e->ep = *ep;
	e->p = ep->dense ? NULL : pager;
	e->kv_dim = hp->n_head_kv * hp->head_dim;
	e->kvrow = kvt_kv_bytes(ep->kv_type, e->kv_dim);
	if (e->p) {
		struct kvt_config pc, mc;

		kvt_pager_config(e->p, &pc);
		mc = pc;
		kvt_engine_pager_geometry(m, ep->kv_type, &mc);
		if (pc.n_layers != mc.n_layers || pc.n_kv_heads != mc.n_kv_heads ||
		    pc.head_dim != mc.head_dim || pc.dtype_bytes != mc.dtype_bytes) {
			ret = efail(err, errlen, -EINVAL,
				    "engine: the pager's geometry (%u layers, %u KV heads x %u, %u-byte values) "
				    "is not the model's (%u layers, %u KV heads x %u, %u-byte values)",
				    pc.n_layers, pc.n_kv_heads, pc.head_dim, pc.dtype_bytes,
				    mc.n_layers, mc.n_kv_heads, mc.head_dim, mc.dtype_bytes);
			goto fail;
		}
		e->page_tokens = pc.page_tokens;
	}
	/* The kernels are the pager's device's (the dense reference path
	 * runs on the cpu). */
	ret = kvt_compute_open(e->p ? kvt_pager_device(e->p) : NULL, ep->n_threads, &e->cx,
			       err, errlen);
	if (ret)
		goto fail;
	e->hostmem = !!(e->cx.ops->flags & KVT_CX_HOST_MEMORY);
	e->async = !!(e->cx.ops->flags & KVT_CX_ASYNC);
	e->nthreads = e->cx.ops->threads(e->cx.ctx);
	e->select = ep->select_pages || ep->select_frac > 0;
	if (kvt_kv_block(ep->kv_type) && !e->hostmem) {
		ret = efail(err, errlen, -ENOTSUP, "engine: %s KV runs on the cpu backend only, "
			    "not on %s (whose attention reads f16 or f32 KV)",
			    kvt_kv_name(ep->kv_type), e->cx.ops->name);
		goto fail;
	}
	if (e->select && !e->hostmem) {
		ret = efail(err, errlen, -ENOTSUP, "engine: the page selector runs on the cpu "
			    "backend only, not on %s", e->cx.ops->name);
		goto fail;
	}
	if (ep->on_attn && !(e->cx.ops->flags & KVT_CX_SCORES)) {
		ret = efail(err, errlen, -ENOTSUP, "engine: attention masses (on_attn) are not "
			    "computed on %s", e->cx.ops->name);
		goto fail;
	}
	ret = -ENOMEM;
	R = e->max_rows = ep->chunk > ep->max_batch ? ep->chunk : ep->max_batch;
	if (!(e->w = calloc(hp->n_layer, sizeof(*e->w))) ||
	    !(e->pos = malloc(R * sizeof(uint32_t))) ||
	    !(e->last = malloc(ep->max_batch * sizeof(uint32_t))))
		goto nomem;
	if (alloc_buf(e, &e->x, R * hp->n_embd * sizeof(float)) ||
	    alloc_buf(e, &e->xn, R * hp->n_embd * sizeof(float)) ||
	    alloc_buf(e, &e->tmp, R * hp->n_embd * sizeof(float)) ||
	    alloc_buf(e, &e->q, R * hp->n_embd * sizeof(float)) ||
	    alloc_buf(e, &e->att, R * hp->n_embd * sizeof(float)) ||
	    alloc_buf(e, &e->k, R * e->kv_dim * sizeof(float)) ||
	    alloc_buf(e, &e->v, R * e->kv_dim * sizeof(float)) ||
	    alloc_buf(e, &e->g, R * hp->n_ff * sizeof(float)) ||
	    alloc_buf(e, &e->u, R * hp->n_ff * sizeof(float)) ||
	    alloc_buf(e, &e->kh, R * e->kvrow) ||
	    alloc_buf(e, &e->vh, R * e->kvrow) ||
	    alloc_buf(e, &e->logits, (size_t)ep->max_batch * hp->n_vocab * sizeof(float)))
		goto nomem;
	if (e->hostmem) {
		e->dpos = e->pos;
		e->hx = e->x;
		e->hk = e->k;
		e->hv = e->v;
	} else if (alloc_buf(e, &e->dpos, R * sizeof(uint32_t)) ||
		   !(e->hx = malloc(R * hp->n_embd * sizeof(float))) ||
		   !(e->hk = malloc(R * e->kv_dim * sizeof(float))) ||
		   !(e->hv = malloc(R * e->kv_dim * sizeof(float))) ||
		   !(e->zeros = calloc(R * hp->n_embd, sizeof(float)))) {
		goto nomem;
	}
	if (e->p) {
		size_t np = e->max_pages = ep->n_ctx / e->page_tokens + 2;

		e->masses = (ep->scores || ep->on_attn) && (e->cx.ops->flags & KVT_CX_SCORES);
		e->sh1 = (struct kvt_attn_shape){
			.rows = 1, .n_head = hp->n_head, .n_kv_heads = hp->n_head_kv,
			.head_dim = hp->head_dim, .scale = 1.0f / sqrtf((float)hp->head_dim),
			.kv_type = ep->kv_type,
		};
		if (!(e->page_ids = malloc(np * sizeof(uint32_t))) ||
		    !(e->refs = malloc(np * sizeof(*e->refs))) ||
		    !(e->pm = malloc(np * hp->n_head * sizeof(float))) ||
		    !(e->pl = malloc(np * hp->n_head * sizeof(float))) ||
		    !(e->mass = malloc(np * sizeof(float))) ||
		    !(e->psc = malloc(np * sizeof(float))) ||
		    !(e->cand = malloc(np * sizeof(*e->cand))) ||
		    !(e->sel = malloc(np * sizeof(uint32_t))) ||
		    !(e->mark = malloc(np)) ||
		    !(e->krow = malloc(e->kv_dim * sizeof(float))))
			goto nomem;
		for (i = 0; i < np; i++)
			e->page_ids[i] = (uint32_t)i;
	}
	if ((ret = prepare_weights(e))) {
		efail(err, errlen, ret, "engine: %s cannot take the model's weights: %s",
		      e->cx.ops->name, strerror(-ret));
		goto fail;
	}
	if (e->p) {
		/* What attention over the most rows and pages needs, now: a
		 * decode step must not be the first to run out of memory. */
		struct kvt_attn_shape sh = {
			.rows = (unsigned)R, .n_head = hp->n_head, .n_kv_heads = hp->n_head_kv,
			.head_dim = hp->head_dim, .scale = 1.0f / sqrtf((float)hp->head_dim),
			.kv_type = ep->kv_type,
		};
		const struct kvt_compute_ops *o = e->cx.ops;

		if ((ret = o->attn_begin(e->cx.ctx, &sh, NULL, NULL, o->parallel ? e->nthreads : 1,
					 (unsigned)e->max_pages)) || (ret = o->sync(e->cx.ctx))) {
			efail(err, errlen, ret, "engine: %s cannot hold attention over %zu rows: %s",
			      o->name, R, strerror(-ret));
			goto fail;
		}
	}
	*out = e;
	return 0;
nomem:
	ret = efail(err, errlen, -ENOMEM, "engine: out of memory for %zu rows of scratch", R);
fail:
	kvt_engine_free(e);
	return ret;
}

void kvt_engine_free(struct kvt_engine *e)
{
	if (!e)
		return;
	if (e->cx.ops) {
		e->cx.ops->sync(e->cx.ctx);
		release_weights(e);
		for (unsigned i = 0; i < e->nbufs; i++)
			e->cx.ops->free(e->cx.ctx, e->bufs[i].p, e->bufs[i].bytes);
	}
	free(e->bufs);
	kvt_compute_close(&e->cx);
	free(e->w);
	free(e->page_ids);
	free(e->refs);
	free(e->pm); free(e->pl); free(e->mass); free(e->psc); free(e->cand); free(e->sel);
	free(e->mark);
	free(e->krow);
	free(e->pos); free(e->last);
	if (!e->hostmem) {
		free(e->hx); free(e->hk); free(e->hv); free(e->zeros);
	}
	free(e);
}

void kvt_engine_describe(const struct kvt_engine *e, char *buf, size_t len)
{
	if (e->cx.ops->describe)
		e->cx.ops->describe(e->cx.ctx, buf, len);
	else
		snprintf(buf, len, "%s", e->cx.ops->name);
}

/* ---------------------------------------------------------------------
 * Sessions
 */

void kvt_engine_stats(const struct kvt_engine *e, struct kvt_engine_stats *st)
{
	*st = e->st;
}

/* Bytes of one layer's key bounds. */
static size_t bounds_layer_bytes(const struct kvt_engine *e)
{
	return (size_t)e->max_pages * 2 * e->kv_dim * sizeof(float);
}

/* Fold n K rows (n, kv_dim) in the engine's KV type, at positions pos0
 * .. pos0 + n - 1, into the session's key bounds of one layer: the rows
 * as stored, so the bound holds for the keys attention reads. A row that
 * starts a page starts its bounds afresh. */
static void bounds_add(struct kvt_engine *e, struct kvt_session *s, unsigned layer,
		       uint32_t pos0, const void *k, unsigned n)
{
	const unsigned hd = e->m->hp.head_dim, nkv = e->m->hp.n_head_kv;
	const size_t pst = 2 * (size_t)e->kv_dim;

	if (!s->kb)
		return;
	for (unsigned t = 0; t < n; t++) {
		uint32_t pos = pos0 + t;
		float *b = s->kb[layer] + (size_t)(pos / e->page_tokens) * pst;
		const float *r;

		if (e->ep.kv_type == KVT_KV_F16) {
			kvt_f16_to_f32(e->krow, (const uint16_t *)k + (size_t)t * e->kv_dim, e->kv_dim);
			r = e->krow;
		} else if (kvt_kv_block(e->ep.kv_type)) {
			kvt_dequant((uint32_t)kvt_kv_block(e->ep.kv_type), e->krow,
				    (const uint8_t *)k + t * e->kvrow, e->kv_dim / 32, kvt_cpu_simd());
			r = e->krow;
		} else {
			r = (const float *)k + (size_t)t * e->kv_dim;
		}
		for (unsigned g = 0; g < nkv; g++, r += hd) {
			float *mn = b + (size_t)g * 2 * hd, *mx = mn + hd;

			if (pos % e->page_tokens == 0) {
				memcpy(mn, r, hd * sizeof(float));
				memcpy(mx, r, hd * sizeof(float));
				continue;
			}
			for (unsigned i = 0; i < hd; i++) {
				mn[i] = r[i] < mn[i] ? r[i] : mn[i];
				mx[i] = r[i] > mx[i] ? r[i] : mx[i];
			}
		}
	}
}

/* Rebuild the key bounds of pages first .. of every layer from the
 * pager (a fork's copied tail). 0 or the pager's error. */
static int bounds_from_pager(struct kvt_engine *e, struct kvt_session *s, uint32_t first)
{
	for (unsigned l = 0; s->kb && l < e->m->hp.n_layer; l++) {
		int np = kvt_seq_pages(e->p, s->seq, l), r, err = 0;
		struct kvt_batch *b;
		struct kvt_view vw;

		if (np < 0)
			return np;
		if ((uint32_t)np <= first)
			continue;
		if ((r = kvt_acquire(e->p, s->seq, l, e->page_ids + first, (unsigned)np - first, &b)))
			return r;
		while ((r = kvt_batch_next(b, &vw)) != 0) {
			if (r < 0) {
				err = r;
				continue;
			}
			if (vw.ntok)
				bounds_add(e, s, l, vw.page * e->page_tokens, vw.k, vw.ntok);
		}
		kvt_batch_release(b);
		if (err)
			return err;
	}
	return 0;
}

/* What a session holds besides the pager's pages: the dense K/V, the key
 * bounds. */
static void session_free_kv(struct kvt_engine *e, struct kvt_session *s)
{
	unsigned l;

	for (l = 0; s->kb && l < e->m->hp.n_layer; l++)
		if (s->kb[l]) {
			free(s->kb[l]);
			e->st.bound_bytes -= bounds_layer_bytes(e);
		}
	free(s->kb);
	s->kb = NULL;

	for (l = 0; s->dk && l < e->m->hp.n_layer; l++)
		free(s->dk[l]);
	for (l = 0; s->dv && l < e->m->hp.n_layer; l++)
		free(s->dv[l]);
	free(s->dk);
	free(s->dv);
}

static int session_alloc(struct kvt_engine *e, struct kvt_session **out)
{
	const struct kvt_hparams *hp = &e->m->hp;
	struct kvt_session *s = calloc(1, sizeof(*s));
	size_t row = e->kvrow;
	unsigned l;

	*out = NULL;
	if (!s)
		return -ENOMEM;
	if (!(s->tokens = malloc((size_t)e->ep.n_ctx * sizeof(int32_t))) ||
	    !(s->logits = malloc((size_t)hp->n_vocab * sizeof(float))))
		goto nomem;
	if (e->ep.dense) {
		if (!(s->dk = calloc(hp->n_layer, sizeof(*s->dk))) ||
		    !(s->dv = calloc(hp->n_layer, sizeof(*s->dv))))
			goto nomem;
		for (l = 0; l < hp->n_layer; l++)
			if (!(s->dk[l] = malloc(e->ep.n_ctx * row)) ||
			    !(s->dv[l] = malloc(e->ep.n_ctx * row)))
				goto nomem;
	} else if (e->select) {
		if (!(s->kb = calloc(hp->n_layer, sizeof(*s->kb))))
			goto nomem;
		for (l = 0; l < hp->n_layer; l++) {
			if (!(s->kb[l] = malloc(bounds_layer_bytes(e))))
				goto nomem;
			e->st.bound_bytes += bounds_layer_bytes(e);
		}
	}
	*out = s;
	return 0;
nomem:
	session_free_kv(e, s);
	free(s->tokens);
	free(s->logits);
	free(s);
	return -ENOMEM;
}

int kvt_session_new(struct kvt_engine *e, struct kvt_session **out)
{
	int ret = session_alloc(e, out);

	if (ret || e->ep.dense)
		return ret;
	ret = kvt_seq_open(e->p, &(*out)->seq);
	if (ret) {
		(*out)->seq = 0;
		kvt_session_free(e, *out);
		*out = NULL;
	}
	return ret;
}

void kvt_session_free(struct kvt_engine *e, struct kvt_session *s)
{
	if (!s)
		return;
	if (s->seq)
		kvt_seq_close(e->p, s->seq);
	session_free_kv(e, s);
	free(s->tokens);
	free(s->logits);
	free(s);
}

int kvt_session_fork(struct kvt_engine *e, struct kvt_session *s, unsigned ntok,
		     struct kvt_session **out)
{
	struct kvt_session *c;
	size_t row = e->kvrow;
	unsigned l;
	int ret;

	*out = NULL;
	if (s->err)
		return s->err;
	if (ntok > s->len)
		return -ERANGE;
	if ((ret = session_alloc(e, &c)))
		return ret;
	if (e->ep.dense) {
		for (l = 0; l < e->m->hp.n_layer; l++) {
			memcpy(c->dk[l], s->dk[l], ntok * row);
			memcpy(c->dv[l], s->dv[l], ntok * row);
		}
	} else if ((ret = kvt_seq_fork(e->p, s->seq, ntok, &c->seq))) {
		c->seq = 0;
		kvt_session_free(e, c);
		return ret;
	} else if (c->kb) {
		/* Whole pages are shared: so are their bounds. A partial page
		 * was copied short: its bounds are rebuilt from what was. */
		size_t whole = (size_t)(ntok / e->page_tokens) * 2 * e->kv_dim * sizeof(float);

		for (l = 0; l < e->m->hp.n_layer; l++)
			memcpy(c->kb[l], s->kb[l], whole);
		if (ntok % e->page_tokens && (ret = bounds_from_pager(e, c, ntok / e->page_tokens))) {
			kvt_session_free(e, c);
			return ret;
		}
	}
	memcpy(c->tokens, s->tokens, ntok * sizeof(int32_t));
	c->len = ntok;
	if (ntok == s->len && s->have_logits) {
		memcpy(c->logits, s->logits, e->m->hp.n_vocab * sizeof(float));
		c->have_logits = 1;
	}
	*out = c;
	return 0;
}

int kvt_session_park(struct kvt_engine *e, struct kvt_session *s)
{
	int ret;

	if (s->err)
		return s->err;
	ret = e->ep.dense ? 0 : kvt_seq_park(e->p, s->seq);
	if (!ret)
		s->parked = 1;
	return ret;
}

int kvt_session_resume(struct kvt_engine *e, struct kvt_session *s)
{
	int ret;

	if (s->err)
		return s->err;
	ret = e->ep.dense ? 0 : kvt_seq_resume(e->p, s->seq);
	if (!ret)
		s->parked = 0;
	return ret;
}

unsigned kvt_session_len(const struct kvt_session *s) { return s->len; }

static int gather_layer(struct kvt_engine *e, struct kvt_session *s, unsigned layer,
			uint8_t *k, uint8_t *v);

int kvt_session_read_kv(struct kvt_engine *e, struct kvt_session *s, unsigned layer,
			void *k, void *v)
{
	if (layer >= e->m->hp.n_layer)
		return -EINVAL;
	if (s->err)
		return s->err;
	return gather_layer(e, s, layer, k, v);
}
const int32_t *kvt_session_tokens(const struct kvt_session *s) { return s->tokens; }
int kvt_session_error(const struct kvt_session *s) { return s->err; }

const float *kvt_session_logits(const struct kvt_session *s)
{
	return s->have_logits ? s->logits : NULL;
}

/* ---------------------------------------------------------------------
 * Attention
 */

/* One task (host backends): a contiguous run of the layer's pages,
 * acquired as one batch and folded into this thread's part in readiness
 * order. */
static void attn_task(void *arg, unsigned task, unsigned thread)
{
	struct attn_job *j = arg;
	struct kvt_engine *e = j->e;
	const struct kvt_compute_ops *o = e->cx.ops;
	unsigned a = (unsigned)((uint64_t)task * j->n_pages / j->n_tasks);
	unsigned b = (unsigned)((uint64_t)(task + 1) * j->n_pages / j->n_tasks);
	struct kvt_batch *bt;
	struct kvt_view vw;
	int r, err = 0;

	if (a == b)
		return;
	r = kvt_acquire(e->p, j->s->seq, j->layer, j->pages + a, b - a, &bt);
	if (r) {
		__atomic_store_n(&j->err, r, __ATOMIC_RELAXED);
		return;
	}
	while ((r = kvt_batch_next(bt, &vw)) != 0) {
		if (r < 0) {
			err = r;	/* a lost page: the rest are still drained */
			continue;
		}
		if (err)
			continue;
		/* The next page on its way into the caches while this one is
		 * folded: reading the fast or host tier is bound by memory
		 * latency more than by its bandwidth. */
		const void *next = kvt_batch_peek(bt);
		if (next && o->prefetch)
			o->prefetch(e->cx.ctx, next, kvt_pager_page_bytes(e->p));
		struct kvt_page_ref ref = {
			.k = vw.k, .v = vw.v, .ntok = vw.ntok, .pos0 = vw.page * e->page_tokens,
		};
		if (j->partial) {
			ref.pm = e->pm + (size_t)vw.page * e->m->hp.n_head;
			ref.pl = e->pl + (size_t)vw.page * e->m->hp.n_head;
		}
		err = o->attn_pages(e->cx.ctx, thread, &ref, 1);
	}
	kvt_batch_release(bt);
	if (err)
		__atomic_store_n(&j->err, err, __ATOMIC_RELAXED);
}

/* Most pages in one attn_pages call of an async backend: 256K tokens of
 * 16-token pages in one call (docs/benchmarks.md, "Decode attention on
 * the GPU": each call ends in a tail of half-idle SMs). */
#define ASYNC_CHUNK 16384

/* The job's pages on an async backend (a GPU): one thread acquires them
 * all as one held batch and hands them to the kernels in chunks, as many
 * as are ready at a time. Kernels read the pages after attn_pages
 * returns, so they stay pinned until the backend has synchronised; and
 * before waiting for pages still on their way, what was handed over is
 * finished and given back, so that the frames it holds can take them. */
static int attn_async(struct attn_job *j)
{
	struct kvt_engine *e = j->e;
	const struct kvt_compute_ops *o = e->cx.ops;
	void *c = e->cx.ctx;
	struct kvt_batch *bt;
	struct kvt_view vw;
	unsigned n = 0, base = 0, synced = 0;	/* pages handed over, issued, finished */
	int r, err = 0;

	if (!j->n_pages)
		return 0;
	if ((r = kvt_acquire(e->p, j->s->seq, j->layer, j->pages, j->n_pages, &bt)))
		return r;
	kvt_batch_hold(bt);
	for (;;) {
		int ready = kvt_batch_peek(bt) != NULL;

		if (n > base && (n - base == ASYNC_CHUNK || !ready)) {
			if (!err)
				err = o->attn_pages(c, 0, e->refs + base, n - base);
			base = n;
		}
		if (!ready && synced < n) {
			/* The next call may wait: give back what is held. */
			if ((r = o->sync(c)) && !err)
				err = r;
			kvt_batch_done(bt);
			synced = n;
		}
		if ((r = kvt_batch_next(bt, &vw)) == 0)
			break;
		if (r < 0) {
			if (!err)
				err = r;	/* a lost page: the rest are still drained */
			continue;
		}
		e->refs[n++] = (struct kvt_page_ref){
			.k = vw.k, .v = vw.v, .ntok = vw.ntok, .pos0 = vw.page * e->page_tokens,
		};
	}
	if (n > base && !err)
		err = o->attn_pages(c, 0, e->refs + base, n - base);
	/* The pages are read until the kernels are done. */
	if ((r = o->sync(c)) && !err)
		err = r;
	kvt_batch_release(bt);
	return err;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cand_by_score(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->score != y->score)
		return x->score > y->score ? -1 : 1;
	return x->page < y->page ? -1 : x->page > y->page;	/* ties: the older page */
}

/* Move the want best of c[0..n) (by cand_by_score) to c[0..want), in
 * any order: quickselect, the middle element as the pivot. */
static void top_k(struct cand *c, unsigned n, unsigned want)
{
	unsigned lo = 0, hi = n;

	while (want && hi - lo > 1) {
		unsigned mid = lo + (hi - lo) / 2, st = lo;
		struct cand piv = c[mid], x;

		c[mid] = c[hi - 1];
		c[hi - 1] = piv;
		for (unsigned i = lo; i < hi - 1; i++)
			if (cand_by_score(&c[i], &piv) < 0) {
				x = c[i];
				c[i] = c[st];
				c[st++] = x;
			}
		c[hi - 1] = c[st];
		c[st] = piv;
		if (st == want)
			return;
		if (st < want)
			lo = st + 1;
		else
			hi = st;
	}
}

/* Quest: choose the pages a decode row q (n_head, head_dim) attends to in
 * this layer of np pages. Returns how many, in e->sel ascending, or np
 * when all of them (e->sel untouched). The first select_sink pages and
 * the tail are always taken; of the others, those with the highest bound
 * on q . k. */
static unsigned select_pages(struct kvt_engine *e, struct kvt_session *s, unsigned layer,
			     const float *q, unsigned np)
{
	const size_t pst = 2 * (size_t)e->kv_dim;
	unsigned K, sink = e->ep.select_sink, nc, want, n = 0, i;

	K = e->ep.select_pages ? e->ep.select_pages
			       : (unsigned)ceil((double)e->ep.select_frac * np);
	if (sink > np - 1)
		sink = np - 1;
	if (K < sink + 1)
		K = sink + 1;
	if (K >= np)
		return np;
	nc = np - 1 - sink;		/* candidates: sink .. np - 2 */
	want = K - sink - 1;
	kvt_attn_key_bound(&e->sh1, q, s->kb[layer] + sink * pst, nc, e->psc);
	for (i = 0; i < nc; i++)
		e->cand[i] = (struct cand){ e->psc[i], sink + i };
	top_k(e->cand, nc, want);
	memset(e->mark, 0, nc);
	for (i = 0; i < want; i++)
		e->mark[e->cand[i].page - sink] = 1;
	for (i = 0; i < sink; i++)
		e->sel[n++] = i;
	for (i = 0; i < nc; i++)
		if (e->mark[i])
			e->sel[n++] = sink + i;
	e->sel[n++] = np - 1;
	return n;
}

/* out (n, n_embd) = attention of rows q (n, n_embd) at qpos over every
 * token of the session in this layer (a decode row with the selector on:
 * over the pages it chose). */
static int attend(struct kvt_engine *e, struct kvt_session *s, unsigned layer,
		  const float *q, const uint32_t *qpos, unsigned n, float *out)
{
	const struct kvt_hparams *hp = &e->m->hp;
	struct attn_job j = { .e = e, .s = s, .layer = layer, .q = q, .qpos = qpos };
	unsigned i;
	int np;

	if (e->ep.dense) {
		struct kvt_attn_shape sh = {
			.rows = n, .n_head = hp->n_head, .n_kv_heads = hp->n_head_kv,
			.head_dim = hp->head_dim, .scale = 1.0f / sqrtf((float)hp->head_dim),
			.kv_type = e->ep.kv_type,
		};
		return kvt_attn_dense(&sh, out, q, qpos, s->dk[layer], s->dv[layer],
				      qpos[n - 1] + 1);
	}
	np = kvt_seq_pages(e->p, s->seq, layer);
	if (np < 0)
		return np;
	j.pages = e->page_ids;
	j.n_pages = (unsigned)np;
	if (n == 1 && np) {
		uint64_t t0 = e->select ? now_ns() : 0;

		e->st.decode_layers++;
		if (e->select && (j.n_pages = select_pages(e, s, layer, q, (unsigned)np)) < (unsigned)np) {
			j.pages = e->sel;
			e->st.pages_skipped += (unsigned)np - j.n_pages;
			e->st.bytes_skipped += (uint64_t)((unsigned)np - j.n_pages) *
					       kvt_pager_page_bytes(e->p);
		}
		if (e->select)
			e->st.select_ns += now_ns() - t0;
		e->st.pages_attended += j.n_pages;
		/* Masses cost a little: worked out when someone uses them. */
		j.partial = e->masses && (e->ep.on_attn || kvt_pager_wants_scores(e->p));
		/* Pages left out keep these: no mass. */
		if (j.partial && j.n_pages < (unsigned)np)
			for (i = 0; i < (unsigned)np * hp->n_head; i++) {
				e->pm[i] = -INFINITY;
				e->pl[i] = 0;
			}
	}
	const struct kvt_compute_ops *o = e->cx.ops;
	struct kvt_attn_shape sh = {
		.rows = n, .n_head = hp->n_head, .n_kv_heads = hp->n_head_kv,
		.head_dim = hp->head_dim, .scale = 1.0f / sqrtf((float)hp->head_dim),
		.kv_type = e->ep.kv_type,
	};
	int r = o->attn_begin(e->cx.ctx, &sh, q, qpos, o->parallel ? e->nthreads : 1, j.n_pages);

	if (r)
		return r;
	if (o->parallel) {
		j.n_tasks = j.n_pages < e->nthreads ? j.n_pages : e->nthreads;
		if (j.n_tasks)
			o->parallel(e->cx.ctx, attn_task, &j, j.n_tasks);
	} else {
		j.err = attn_async(&j);
	}
	if (j.err)
		return j.err;
	if ((r = o->attn_end(e->cx.ctx, out)))
		return r;
	if (j.partial) {
		uint64_t t0 = now_ns();

		o->attn_mass(e->cx.ctx, e->pm, e->pl, (unsigned)np, e->mass);
		if (e->ep.scores && kvt_pager_wants_scores(e->p))
			r = kvt_seq_score(e->p, s->seq, layer, e->mass, (unsigned)np);
		e->st.score_ns += now_ns() - t0;
		if (r)
			return r;
		if (e->ep.on_attn)
			e->ep.on_attn(e->ep.on_attn_arg, s, layer, q, e->mass, (unsigned)np);
	}
	return 0;
}

/* ---------------------------------------------------------------------
 * Forward
 */

/* Append rows r0 .. r0 + n - 1 of the step's K and V (buffers) to the
 * session's layer, at positions pos0 on. On a backend whose buffers are
 * device memory they were synchronised before (forward_rows). */
static int store_kv(struct kvt_engine *e, struct kvt_session *s, unsigned layer,
		    unsigned r0, unsigned n, uint32_t pos0)
{
	size_t row = e->kvrow;
	const void *k, *v;

	if (e->ep.kv_type != KVT_KV_F32) {
		k = (const uint8_t *)e->kh + r0 * row;
		v = (const uint8_t *)e->vh + r0 * row;
	} else {
		k = e->k + (size_t)r0 * e->kv_dim;
		v = e->v + (size_t)r0 * e->kv_dim;
	}
	if (e->ep.dense) {
		memcpy(s->dk[layer] + pos0 * row, k, n * row);
		memcpy(s->dv[layer] + pos0 * row, v, n * row);
		return 0;
	}
	if (!e->hostmem)
		return kvt_seq_append_dev(e->p, s->seq, layer, k, v, n);
	int ret = kvt_seq_append(e->p, s->seq, layer, k, v, n);

	if (!ret)
		bounds_add(e, s, layer, pos0, k, n);
	return ret;
}

/* A session that failed gives its pages back at once, so the space it
 * held (the likely cause: a full tier) goes to the sessions still running. */
static void end_session(struct kvt_engine *e, struct kvt_session *s, int err)
{
	s->err = err;
	if (s->seq && !kvt_seq_close(e->p, s->seq))
		s->seq = 0;
}

/* Rows of a buffer set to zero. */
static int zero_rows(struct kvt_engine *e, float *x, size_t n)
{
	if (e->hostmem) {
		memset(x, 0, n * sizeof(float));
		return 0;
	}
	return e->cx.ops->upload(e->cx.ctx, x, e->zeros, n * sizeof(float));
}

/* Run rows tok[0..R) through the model; the spans say which session owns
 * which rows (their positions continue each session's length). On return
 * each span's session that is still fine has its tokens appended and the
 * logits of its last row. Session errors are recorded in the session;
 * the return is -errno only for a failure of the whole step. */
static int forward_rows(struct kvt_engine *e, struct span *sp, unsigned nsp,
			const int32_t *tok, unsigned R);

/* A step that fails part-way has appended K/V for some layers and not
 * others: its sessions cannot go on, and are ended. */
static int forward(struct kvt_engine *e, struct span *sp, unsigned nsp, const int32_t *tok,
		   unsigned R)
{
	int ret = forward_rows(e, sp, nsp, tok, R);

	for (unsigned i = 0; ret < 0 && i < nsp; i++)
		if (!sp[i].s->err)
			end_session(e, sp[i].s, ret);
	return ret;
}

static int forward_rows(struct kvt_engine *e, struct span *sp, unsigned nsp,
			const int32_t *tok, unsigned R)
{
	const struct kvt_model *m = e->m;
	const struct kvt_hparams *hp = &m->hp;
	const struct kvt_compute_ops *o = e->cx.ops;
	void *c = e->cx.ctx;
	const size_t E = hp->n_embd, KV = e->kv_dim;
	const int conv = e->ep.kv_type != KVT_KV_F32;	/* K, V stored converted */
	unsigned l, r, i, live = 0;
	int ret;

	if (e->p)
		kvt_pager_step(e->p);
	for (i = 0; i < nsp; i++)
		for (r = 0; r < sp[i].n; r++)
			e->pos[sp[i].r0 + r] = sp[i].s->len + r;
	/* The embedding rows, looked up in the mapping (exact), then where
	 * the kernels read them (on cpu they are there already). */
	for (r = 0; r < R; r++)
		kvt_mat_row(e->hx + r * E, &m->tok_embd, (uint32_t)tok[r]);
	if ((ret = o->upload(c, e->x, e->hx, R * E * sizeof(float))) ||
	    (ret = o->upload(c, e->dpos, e->pos, R * sizeof(uint32_t))))
		return ret;

	for (l = 0; l < hp->n_layer; l++) {
		const struct layer_w *W = &e->w[l];

		if ((ret = o->rmsnorm(c, e->xn, e->x, NULL, R, hp->n_embd, W->attn_norm, hp->rms_eps)) ||
		    (ret = o->matmul_n(c, 3, (float *const[]){ e->q, e->k, e->v }, e->xn, R,
				       (const struct kvt_mat *const[]){ &W->wq, &W->wk, &W->wv })) ||
		    (ret = add_bias(e, e->q, W->bq, R, hp->n_embd)) ||
		    (ret = add_bias(e, e->k, W->bk, R, KV)) ||
		    (ret = add_bias(e, e->v, W->bv, R, KV)) ||
		    (ret = o->rope(c, e->q, R, hp->n_head, hp->head_dim, hp->rope_dim, e->dpos,
				   e->inv_freq)) ||
		    (ret = o->rope(c, e->k, R, hp->n_head_kv, hp->head_dim, hp->rope_dim, e->dpos,
				   e->inv_freq)))
			return ret;
		if (conv && ((ret = o->to_kv(c, e->kh, e->k, R * KV, e->ep.kv_type)) ||
			     (ret = o->to_kv(c, e->vh, e->v, R * KV, e->ep.kv_type))))
			return ret;
		/* The pager copies K and V from the buffers: they must be done. */
		if (e->async && (ret = o->sync(c)))
			return ret;
		for (i = 0; i < nsp; i++) {
			struct span *p = &sp[i];

			if (p->s->err)
				continue;
			ret = store_kv(e, p->s, l, p->r0, p->n, p->s->len);
			if (!ret)
				ret = attend(e, p->s, l, e->q + p->r0 * E, e->dpos + p->r0, p->n,
					     e->att + p->r0 * E);
			if (ret) {
				end_session(e, p->s, ret);
				if ((ret = zero_rows(e, e->att + p->r0 * E, p->n * E)))
					return ret;
			}
		}
		if ((ret = o->matmul_n(c, 1, &e->tmp, e->att, R,
				       (const struct kvt_mat *const[]){ &W->wo })) ||
		    (ret = o->add(c, e->x, e->tmp, 1, R * E)) ||
		    (ret = o->rmsnorm(c, e->xn, e->x, NULL, R, hp->n_embd, W->ffn_norm, hp->rms_eps)) ||
		    (ret = o->matmul_n(c, 2, (float *const[]){ e->g, e->u }, e->xn, R,
				       (const struct kvt_mat *const[]){ &W->w_gate, &W->w_up })) ||
		    (ret = o->swiglu(c, e->g, e->u, R * hp->n_ff)) ||
		    (ret = o->matmul_n(c, 1, &e->tmp, e->g, R,
				       (const struct kvt_mat *const[]){ &W->w_down })) ||
		    (ret = o->add(c, e->x, e->tmp, 1, R * E)))
			return ret;
	}

	/* The head, for the last row of each span only. */
	for (i = 0; i < nsp; i++)
		e->last[i] = sp[i].r0 + sp[i].n - 1;
	if ((ret = o->rmsnorm(c, e->xn, e->x, e->last, nsp, hp->n_embd, e->out_norm, hp->rms_eps)) ||
	    (ret = o->matmul_n(c, 1, &e->logits, e->xn, nsp,
			       (const struct kvt_mat *const[]){ &e->output })))
		return ret;
	for (i = 0; i < nsp; i++) {
		struct kvt_session *s = sp[i].s;

		if (s->err)
			continue;
		if ((ret = o->download(c, s->logits, e->logits + (size_t)i * hp->n_vocab,
				       hp->n_vocab * sizeof(float))))
			return ret;
		memcpy(s->tokens + s->len, tok + sp[i].r0, sp[i].n * sizeof(int32_t));
		s->len += sp[i].n;
		s->have_logits = 1;
		live++;
	}
	return (int)live;
}

static int check_tokens(const struct kvt_engine *e, const int32_t *t, unsigned n)
{
	unsigned i;

	for (i = 0; i < n; i++)
		if (t[i] < 0 || (uint32_t)t[i] >= e->m->hp.n_vocab)
			return -EINVAL;
	return 0;
}

int kvt_eval(struct kvt_engine *e, struct kvt_session *s, const int32_t *tokens,
	     unsigned n, void (*progress)(void *arg, unsigned done), void *arg)
{
	unsigned done = 0;
	int ret;

	if (s->err)
		return s->err;
	if (s->parked)
		return -EBUSY;
	if ((uint64_t)s->len + n > e->ep.n_ctx)
		return -ERANGE;
	if ((ret = check_tokens(e, tokens, n)))
		return ret;
	while (done < n) {
		struct span sp = { .s = s, .r0 = 0 };

		sp.n = n - done < e->ep.chunk ? n - done : e->ep.chunk;
		ret = forward(e, &sp, 1, tokens + done, sp.n);
		if (ret < 0)
			return ret;
		if (s->err)
			return s->err;
		done += sp.n;
		if (progress)
			progress(arg, done);
	}
	return 0;
}

int kvt_decode(struct kvt_engine *e, struct kvt_session *const *ss, const int32_t *tokens,
	       unsigned n)
{
	struct span sp[64];
	int32_t tk[64];
	unsigned i, j, done = 0, live = 0;
	int ret;

	/* Refused as a whole, changing nothing: a parked session (resume it
	 * first) or one named twice. */
	for (i = 0; i < n; i++) {
		if (ss[i]->parked && !ss[i]->err)
			return -EBUSY;
		for (j = 0; j < i; j++)
			if (ss[j] == ss[i])
				return -EINVAL;
	}
	while (done < n) {
		unsigned cnt = 0, lim = e->ep.max_batch < 64 ? e->ep.max_batch : 64;

		for (i = done; i < n && cnt < lim; i++) {
			struct kvt_session *s = ss[i];

			if (s->err)
				continue;
			if (s->len + 1 > e->ep.n_ctx) {
				s->err = -ERANGE;
				continue;
			}
			if (check_tokens(e, &tokens[i], 1)) {
				s->err = -EINVAL;
				continue;
			}
			sp[cnt] = (struct span){ .s = s, .r0 = cnt, .n = 1 };
			tk[cnt++] = tokens[i];
		}
		done = i;
		if (!cnt)
			continue;
		ret = forward(e, sp, cnt, tk, cnt);
		if (ret < 0)
			return ret;
		live += (unsigned)ret;
	}
	return (int)live;
}

/* K and V (n values each) from the host's hk, hv into the buffers
 * store_kv reads, in the KV type, finished. */
static int fill_kv(struct kvt_engine *e, size_t n)
{
	const struct kvt_compute_ops *o = e->cx.ops;
	void *c = e->cx.ctx;
	int r;

	if ((r = o->upload(c, e->k, e->hk, n * sizeof(float))) ||
	    (r = o->upload(c, e->v, e->hv, n * sizeof(float))))
		return r;
	if (e->ep.kv_type != KVT_KV_F32 &&
	    ((r = o->to_kv(c, e->kh, e->k, n, e->ep.kv_type)) ||
	     (r = o->to_kv(c, e->vh, e->v, n, e->ep.kv_type))))
		return r;
	return o->sync(c);
}

int kvt_session_fill_random(struct kvt_engine *e, struct kvt_session *s, unsigned n,
			    uint64_t seed)
{
	const size_t KV = e->kv_dim;
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
	unsigned done = 0, l;
	int ret;

	if (s->err)
		return s->err;
	if ((uint64_t)s->len + n > e->ep.n_ctx)
		return -ERANGE;
	while (done < n) {
		unsigned c = n - done < e->max_rows ? n - done : e->max_rows;
		size_t i;

		for (l = 0; l < e->m->hp.n_layer; l++) {
			/* values in [-1, 1): what rotated keys and values look like in scale */
			for (i = 0; i < c * KV; i++) {
				x ^= x << 13; x ^= x >> 7; x ^= x << 17;
				e->hk[i] = (float)(x >> 40) / (float)(1 << 23) - 1.0f;
				e->hv[i] = (float)((x >> 16) & 0xffffff) / (float)(1 << 23) - 1.0f;
			}
			if ((ret = fill_kv(e, c * KV)) || (ret = store_kv(e, s, l, 0, c, s->len))) {
				end_session(e, s, ret);
				return ret;
			}
		}
		memset(s->tokens + s->len, 0, c * sizeof(int32_t));
		s->len += c;
		done += c;
	}
	s->have_logits = 0;	/* they were for the token before the fill */
	return 0;
}

/* ---------------------------------------------------------------------
 * Save and restore
 */

#define SESS_MAGIC	"KVTSESS"
#define SESS_VERSION	1

struct sess_hdr {
	char	 magic[8];
	uint32_t version;
	uint32_t kv_type;
	uint32_t n_layer, n_head_kv, head_dim, n_vocab;
	uint64_t model_fp;		/* ties the file to the model's weights */
	uint32_t len;
	uint32_t has_logits;
};

/* A fingerprint of the model: its geometry and a sample of its weights. */
static uint64_t model_fp(const struct kvt_model *m)
{
	const struct kvt_gguf *g = m->g;
	uint64_t h = XXH3_64bits(&m->hp, sizeof(m->hp));
	uint64_t i;

	for (i = 0; i < g->n_tensors; i++) {
		const struct kvt_gguf_tensor *t = &g->tensors[i];

		h = XXH3_64bits_withSeed(t->data, t->nbytes < 256 ? t->nbytes : 256, h);
	}
	return h;
}

static int write_all(int fd, const void *p, size_t n, XXH3_state_t *st)
{
	const char *c = p;

	XXH3_64bits_update(st, p, n);
	while (n) {
		ssize_t w = write(fd, c, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

static int read_all(int fd, void *p, size_t n, XXH3_state_t *st)
{
	char *c = p;
	size_t want = n;

	while (n) {
		ssize_t r = read(fd, c, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -ENODATA;
		c += r;
		n -= (size_t)r;
	}
	if (st)
		XXH3_64bits_update(st, p, want);
	return 0;
}

/* Gather one layer's K and V, (len, kv_dim) each, into k and v. */
static int gather_layer(struct kvt_engine *e, struct kvt_session *s, unsigned layer,
			uint8_t *k, uint8_t *v)
{
	size_t row = e->kvrow;
	struct kvt_batch *b;
	struct kvt_view vw;
	int r, err = 0;

	if (e->ep.dense) {
		memcpy(k, s->dk[layer], s->len * row);
		memcpy(v, s->dv[layer], s->len * row);
		return 0;
	}
	if ((r = kvt_acquire(e->p, s->seq, layer, NULL, 0, &b)))
		return r;
	while ((r = kvt_batch_next(b, &vw)) != 0) {
		size_t at = (size_t)vw.page * e->page_tokens;

		if (r < 0) {
			err = r;
			continue;
		}
		if (at + vw.ntok > s->len) {
			err = -EIO;
			continue;
		}
		/* The page may be device memory. */
		if (!err && ((r = e->cx.ops->download(e->cx.ctx, k + at * row, vw.k, vw.ntok * row)) ||
			     (r = e->cx.ops->download(e->cx.ctx, v + at * row, vw.v, vw.ntok * row))))
			err = r;
	}
	kvt_batch_release(b);
	return err;
}

int kvt_session_save(struct kvt_engine *e, struct kvt_session *s, const char *path,
		     char *err, size_t errlen)
{
	const struct kvt_hparams *hp = &e->m->hp;
	size_t bytes = (size_t)s->len * e->kvrow;
	struct sess_hdr h = {
		.magic = SESS_MAGIC, .version = SESS_VERSION, .kv_type = (uint32_t)e->ep.kv_type,
		.n_layer = hp->n_layer, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim,
		.n_vocab = hp->n_vocab, .model_fp = model_fp(e->m), .len = s->len,
		.has_logits = (uint32_t)s->have_logits,
	};
	XXH3_state_t *st = XXH3_createState();
	uint8_t *k = malloc(bytes ? bytes : 1), *v = malloc(bytes ? bytes : 1);
	struct kvt_afile af = { .fd = -1 };
	uint64_t sum;
	unsigned l;
	int fd, ret;

	if (!st || !k || !v) {
		ret = efail(err, errlen, -ENOMEM, "%s: out of memory", path);
		goto out;
	}
	if (s->err) {
		ret = efail(err, errlen, s->err, "%s: the session has failed (%s)", path, strerror(-s->err));
		goto out;
	}
	/* Through a temporary and a rename (pager/afile.h), so a crash never
	 * leaves a torn session; 0600: the conversation is the user's. */
	if ((ret = kvt_afile_open(&af, path, 0600, err, errlen)))
		goto out;
	fd = af.fd;
	XXH3_64bits_reset(st);
	if ((ret = write_all(fd, &h, sizeof(h), st)) ||
	    (ret = write_all(fd, s->tokens, s->len * sizeof(int32_t), st)) ||
	    (s->have_logits && (ret = write_all(fd, s->logits, hp->n_vocab * sizeof(float), st))))
		goto werr;
	for (l = 0; l < hp->n_layer; l++) {
		if ((ret = gather_layer(e, s, l, k, v))) {
			efail(err, errlen, ret, "%s: cannot read layer %u of the session: %s",
			      path, l, strerror(-ret));
			goto unlink;
		}
		if ((ret = write_all(fd, k, bytes, st)) || (ret = write_all(fd, v, bytes, st)))
			goto werr;
	}
	sum = XXH3_64bits_digest(st);
	if ((ret = write_all(fd, &sum, sizeof(sum), st)))
		goto werr;
	/* fsync, rename into place, fsync the directory. */
	ret = kvt_afile_commit(&af, err, errlen);
	goto out;
werr:
	efail(err, errlen, ret, "%s: write failed: %s", af.tmp, strerror(-ret));
unlink:
	kvt_afile_abort(&af);
out:
	XXH3_freeState(st);
	free(k);
	free(v);
	return ret;
}

int kvt_session_peek(const char *path, unsigned *len, char *err, size_t errlen)
{
	struct sess_hdr h;
	int fd = open(path, O_RDONLY | O_CLOEXEC), ret;

	if (fd < 0)
		return efail(err, errlen, -errno, "%s: %s", path, strerror(errno));
	ret = read_all(fd, &h, sizeof(h), NULL);
	close(fd);
	if (ret == -ENODATA || (!ret && (memcmp(h.magic, SESS_MAGIC, sizeof(h.magic)) ||
					 h.version != SESS_VERSION)))
		return efail(err, errlen, -EINVAL, "%s: not a kvtier session file (bad magic or version at offset 0)", path);
	if (ret)
		return efail(err, errlen, ret, "%s: %s", path, strerror(-ret));
	*len = h.len;
	return 0;
}

int kvt_session_restore(struct kvt_engine *e, const char *path, struct kvt_session **out,
			char *err, size_t errlen)
{
	const struct kvt_hparams *hp = &e->m->hp;
	XXH3_state_t *st = XXH3_createState();
	struct kvt_session *s = NULL;
	struct sess_hdr h;
	uint8_t *k = NULL, *v = NULL;
	uint64_t sum, want;
	size_t bytes;
	unsigned l;
	int fd, ret;

	*out = NULL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return efail(err, errlen, -errno, "%s: %s", path, strerror(errno));
	if (!st) {
		ret = efail(err, errlen, -ENOMEM, "%s: out of memory", path);
		goto out;
	}
	XXH3_64bits_reset(st);
	if ((ret = read_all(fd, &h, sizeof(h), st)))
		goto short_file;
	if (memcmp(h.magic, SESS_MAGIC, sizeof(h.magic)) || h.version != SESS_VERSION) {
		ret = efail(err, errlen, -EINVAL, "%s: not a kvtier session file (bad magic or version at offset 0)", path);
		goto out;
	}
	if (h.kv_type != (uint32_t)e->ep.kv_type || h.n_layer != hp->n_layer ||
	    h.n_head_kv != hp->n_head_kv || h.head_dim != hp->head_dim ||
	    h.n_vocab != hp->n_vocab || h.model_fp != model_fp(e->m)) {
		ret = efail(err, errlen, -EINVAL, "%s: the session was saved from another model or KV type", path);
		goto out;
	}
	if (h.len > e->ep.n_ctx) {
		ret = efail(err, errlen, -ERANGE, "%s: %u tokens do not fit a context of %u (raise the context size)",
			    path, h.len, e->ep.n_ctx);
		goto out;
	}
	if (h.has_logits > 1) {
		ret = efail(err, errlen, -EINVAL, "%s: corrupt header at offset %zu", path,
			    offsetof(struct sess_hdr, has_logits));
		goto out;
	}
	if ((ret = kvt_session_new(e, &s))) {
		efail(err, errlen, ret, "%s: cannot open a session: %s", path, strerror(-ret));
		goto out;
	}
	bytes = (size_t)h.len * e->kvrow;
	if (!(k = malloc(bytes ? bytes : 1)) || !(v = malloc(bytes ? bytes : 1))) {
		ret = efail(err, errlen, -ENOMEM, "%s: out of memory", path);
		goto out;
	}
	if ((ret = read_all(fd, s->tokens, h.len * sizeof(int32_t), st)) ||
	    (h.has_logits && (ret = read_all(fd, s->logits, hp->n_vocab * sizeof(float), st))))
		goto short_file;
	if ((ret = check_tokens(e, s->tokens, h.len))) {
		efail(err, errlen, ret, "%s: a token id is out of the model's vocabulary", path);
		goto out;
	}
	for (l = 0; l < hp->n_layer; l++) {
		if ((ret = read_all(fd, k, bytes, st)) || (ret = read_all(fd, v, bytes, st)))
			goto short_file;
		if (e->ep.dense) {
			memcpy(s->dk[l], k, bytes);
			memcpy(s->dv[l], v, bytes);
		} else if (h.len && (ret = kvt_seq_append(e->p, s->seq, l, k, v, h.len))) {
			efail(err, errlen, ret, "%s: cannot store layer %u: %s", path, l, strerror(-ret));
			goto out;
		} else {
			bounds_add(e, s, l, 0, k, h.len);
		}
	}
	want = XXH3_64bits_digest(st);
	if ((ret = read_all(fd, &sum, sizeof(sum), NULL)))
		goto short_file;
	if (sum != want) {
		ret = efail(err, errlen, -EINVAL, "%s: checksum mismatch: the file is corrupt", path);
		goto out;
	}
	if (read(fd, &sum, 1) != 0) {
		ret = efail(err, errlen, -EINVAL, "%s: trailing bytes after the checksum", path);
		goto out;
	}
	s->len = h.len;
	s->have_logits = (int)h.has_logits;
	*out = s;
	s = NULL;
	ret = 0;
	goto out;
short_file:
	if (ret == -ENODATA)
		ret = efail(err, errlen, -EINVAL, "%s: truncated at offset %lld", path,
			    (long long)lseek(fd, 0, SEEK_CUR));
	else
		efail(err, errlen, ret, "%s: read failed: %s", path, strerror(-ret));
out:
	if (s)
		kvt_session_free(e, s);
	free(k);
	free(v);
	XXH3_freeState(st);
	close(fd);
	return ret;
}
