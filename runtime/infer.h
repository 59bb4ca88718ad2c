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

struct kvt_engine_params {
	unsigned n_threads;	/* compute threads, 0 = one per online cpu */
	unsigned n_ctx;		/* most tokens a session may hold */
	int	 kv_type;	/* enum kvt_kv_type: KVT_KV_F16 (default) or F32 */
	unsigned chunk;		/* prefill rows per forward step (256) */
	unsigned max_batch;	/* most sessions decoded together (16) */
	int	 dense;		/* reference path: no pager */
};

void kvt_engine_params_default(struct kvt_engine_params *ep);

/* Fill the page geometry of a pager config from the model and KV type. */
void kvt_engine_pager_geometry(const struct kvt_model *m, int kv_type, struct kvt_config *cfg);

/* An engine and its sessions are used from one thread at a time (the
 * engine's scratch is shared); the engine runs its own compute threads. */
struct kvt_engine;
struct kvt_session;

/* pager must have the model's geometry (kvt_engine_pager_geometry) and
 * outlive the engine; it is ignored (may be NULL) with ep->dense. 0,
 * -EINVAL with one line in err (a geometry mismatch, n_ctx 0), -ENOMEM. */
int  kvt_engine_new(struct kvt_model *m, struct kvt_pager *pager,
		    const struct kvt_engine_params *ep, struct kvt_engine **out,
		    char *err, size_t errlen);
void kvt_engine_free(struct kvt_engine *e);
const struct kvt_engine_params *kvt_engine_params(const struct kvt_engine *e);

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
const int32_t *kvt_session_tokens(const struct kvt_session *s);	/* (len) */
/* (n_vocab) logits after the last token, NULL before the first eval. */
const float *kvt_session_logits(const struct kvt_session *s);
/* 0, or the -errno that ended the session. */
int  kvt_session_error(const struct kvt_session *s);

/* Save a session (tokens, K/V, last logits, checksummed) to path, and
 * restore one in another engine over the same model. -EINVAL with a
 * message for a file that is not a session of this model. */
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
