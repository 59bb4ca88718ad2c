/* SPDX-License-Identifier: MIT */
/*
 * The forward pass: an engine runs a model over sessions whose K/V live in
 * the pager (or, for the reference path, in plain contiguous memory).
 *
 * Layer by layer, each session's new K/V rows are appended to the pager,
 * then its pages are acquired through the batch API and folded into the
 * attention as they become ready (online softmax per page, log-sum-exp
 * merge of the partials), while layer-ahead prefetch brings the next
 * layers up. The dense path computes the same thing with a plain softmax
 * over contiguous K/V: the tests hold the two to the same logits.
 *
 * Errors that belong to one session (a lost page, no frame, a full disk)
 * end that session (kvt_session_error): its pages are given back at once,
 * so the space goes to the others, which keep running. The functions
 * return -errno only for what stops the whole call.
 */
#ifndef KVT_RUNTIME_INFER_H
#define KVT_RUNTIME_INFER_H

#include <stddef.h>
#include <stdint.h>

#include <kvt/pager.h>
#include "runtime/model.h"

/* The session and layer of a decode row's attention, for on_attn. */
struct kvt_session;

struct kvt_engine_params {
	unsigned n_threads;	/* compute threads, 0 = one per online cpu */
	unsigned n_ctx;		/* most tokens a session may hold */
	int	 kv_type;	/* enum kvt_kv_type: KVT_KV_F16 (default), F32,
				 * Q8_0 or Q4_0 (the last two cpu backend only;
				 * head size a multiple of 32) */
	unsigned chunk;		/* prefill rows per forward step (256) */
	unsigned max_batch;	/* most sessions decoded together (16) */
	int	 dense;		/* reference path: no pager */

	/* Attention scores (paged path, decode rows only: a step that gives a
	 * session one token). After each layer's attention, each page's share
	 * of the softmax mass, averaged over the query heads, goes to the
	 * pager (kvt_seq_score), for policies that rank by it (h2o): only
	 * while some tier's policy has on_score (kvt_pager_wants_scores), so
	 * it costs nothing otherwise. 1 by default; 0 never sends them. */
	int	 scores;
	/* Optional: sees what went to the pager, and the query it came from:
	 * q (n_head, head_dim) rotated and unscaled, mass (n) over the
	 * layer's pages (0 for pages the selector skipped). Called on the
	 * engine's thread inside kvt_decode/kvt_eval; it must not call the
	 * engine. For tests and tools. */
	void	(*on_attn)(void *arg, const struct kvt_session *s, unsigned layer,
			   const float *q, const float *mass, unsigned n);
	void	*on_attn_arg;

	/* Query-aware page selection for decode rows (Quest); off when both
	 * select_pages and select_frac are 0 (the default). Each layer
	 * attends to at most K pages: the first select_sink and the tail
	 * always, the rest the highest by the bound of kvt_attn_key_bound.
	 * The pages left out are not acquired, so never read nor fetched.
	 * K = select_pages, or else ceil(select_frac * the layer's pages); a
	 * K at or above the layer's pages attends to all of them (exactly the
	 * full attention). Approximate attention: see runtime/README.md.
	 * kvt_select_parse fills these from "quest:pages=K" and the like. */
	unsigned select_pages;
	float	 select_frac;	/* in (0, 1] */
	unsigned select_sink;	/* first pages always attended (1) */
};

void kvt_engine_params_default(struct kvt_engine_params *ep);

/* Set the selector of ep from a spec: "full" (no selection) or
 * "quest:KEY=VALUE,..." with keys pages (K, >= 1), frac (a fraction of
 * the pages in (0, 1]; one of pages and frac) and sink (first pages
 * always kept, default 1). 0, or -EINVAL with one line in err; ep is
 * unchanged on error. */
int  kvt_select_parse(struct kvt_engine_params *ep, const char *spec, char *err, size_t errlen);
/* The spec ep's selector is set to, as kvt_select_parse takes it. */
void kvt_select_format(const struct kvt_engine_params *ep, char *buf, size_t len);

/* Fill the page geometry of a pager config from the model and KV type
 * (for q8_0 and q4_0, whose values are not whole 2-byte units, head_dim
 * counts a head's bytes in 2-byte units: the pager only sizes pages by
 * them). */
void kvt_engine_pager_geometry(const struct kvt_model *m, int kv_type, struct kvt_config *cfg);

/* An engine and its sessions are used from one thread at a time (the
 * engine's scratch is shared); the engine runs its own compute threads. */
struct kvt_engine;
struct kvt_session;

/* pager must have the model's geometry (kvt_engine_pager_geometry) and
 * outlive the engine; it is ignored (may be NULL) with ep->dense. The
 * forward pass runs on the kernels of the pager's device (cpu, or a GPU
 * through its plug-in: kernels/compute.h); the dense path on the cpu.
 * 0, -EINVAL with one line in err (a geometry mismatch, n_ctx 0),
 * -ENOTSUP (the page selector or on_attn on a backend without them),
 * -ENOMEM, or the backend's error taking the weights. */
int  kvt_engine_new(struct kvt_model *m, struct kvt_pager *pager,
		    const struct kvt_engine_params *ep, struct kvt_engine **out,
		    char *err, size_t errlen);
void kvt_engine_free(struct kvt_engine *e);
const struct kvt_engine_params *kvt_engine_params(const struct kvt_engine *e);

/* What the engine's attention did since it was made (paged path; zeros on
 * the dense one). */
struct kvt_engine_stats {
	uint64_t decode_layers;		/* (decode row, layer) attentions */
	uint64_t pages_attended;	/* pages acquired and folded in by them */
	uint64_t pages_skipped;		/* pages the selector left out */
	uint64_t bytes_skipped;		/* their bytes: never read, nor fetched */
	uint64_t select_ns;		/* time spent scoring and choosing pages */
	uint64_t score_ns;		/* time spent on masses for the pager */
	uint64_t bound_bytes;		/* the selector's per-page key bounds
					 * held now, all sessions */
};
void kvt_engine_stats(const struct kvt_engine *e, struct kvt_engine_stats *st);
/* One line: what the engine's kernels run on (the compute backend's own
 * description, e.g. "cpu, AVX-512 kernels, 2 threads"). */
void kvt_engine_describe(const struct kvt_engine *e, char *buf, size_t len);

/* Sessions. A session holds its tokens, its K/V and the logits after its
 * last token. */
int  kvt_session_new(struct kvt_engine *e, struct kvt_session **out);
/* A session sharing the first ntok tokens of s (whole pages shared, not
 * copied; the dense path copies). Its logits are those of s when ntok is
 * all of s, else it has none until the next eval. */
int  kvt_session_fork(struct kvt_engine *e, struct kvt_session *s, unsigned ntok,
		      struct kvt_session **out);
void kvt_session_free(struct kvt_engine *e, struct kvt_session *s);
int  kvt_session_park(struct kvt_engine *e, struct kvt_session *s);
int  kvt_session_resume(struct kvt_engine *e, struct kvt_session *s);
unsigned kvt_session_len(const struct kvt_session *s);
/* Copy one layer's K and V, (len, n_kv_heads, head_dim) each in the
 * engine's KV type, into k and v (from the pager or the dense store).
 * 0, -EINVAL (layer out of range), or the pager's error (-EIO, ...). */
int  kvt_session_read_kv(struct kvt_engine *e, struct kvt_session *s, unsigned layer,
			 void *k, void *v);
const int32_t *kvt_session_tokens(const struct kvt_session *s);	/* (len) */
/* (n_vocab) logits after the last token, NULL before the first eval. */
const float *kvt_session_logits(const struct kvt_session *s);
/* 0, or the -errno that ended the session. */
int  kvt_session_error(const struct kvt_session *s);

/* Save a session (tokens, K/V, last logits, checksummed) to path, and
 * restore one in another engine over the same model. -EINVAL with a
 * message for a file that is not a session of this model. A save goes
 * through path's temporary, mode 0600, renamed into place (pager/afile.h):
 * path is the old session or the new one, never a link followed. */
int  kvt_session_save(struct kvt_engine *e, struct kvt_session *s, const char *path,
		      char *err, size_t errlen);
int  kvt_session_restore(struct kvt_engine *e, const char *path, struct kvt_session **out,
			 char *err, size_t errlen);
/* The number of tokens a saved session holds, from its header alone (to
 * size a context before restoring). 0, or -errno with one line in err. */
int  kvt_session_peek(const char *path, unsigned *len, char *err, size_t errlen);

/* For benchmarks: append n positions of seeded random K/V (token id 0)
 * to every layer without running the model, so a long context can be set
 * up in the time it takes to write it. Decoding after it costs what it
 * would after a real prefill of that length. 0, -ERANGE, or the
 * session's error. */
int  kvt_session_fill_random(struct kvt_engine *e, struct kvt_session *s, unsigned n,
			     uint64_t seed);

/* Feed n tokens to one session (prefill), in chunks of ep.chunk rows.
 * progress, if set, is called after each chunk with tokens done so far.
 * 0, -ERANGE (would exceed n_ctx), -EINVAL (a token id out of range),
 * -EBUSY (parked: resume it first; nothing changes), or the session's
 * error. */
int  kvt_eval(struct kvt_engine *e, struct kvt_session *s, const int32_t *tokens,
	      unsigned n, void (*progress)(void *arg, unsigned done), void *arg);

/* One token for each of n sessions, decoded together (the weights are read
 * once for all). A session that fails is ended (kvt_session_error); the
 * rest go on. Returns the number of sessions that are still fine, or
 * -errno when nothing could run: -EBUSY (changing nothing) when one of
 * them is parked, -EINVAL when one is named twice. */
int  kvt_decode(struct kvt_engine *e, struct kvt_session *const *ss, const int32_t *tokens,
		unsigned n);

#endif
