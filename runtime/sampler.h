/* SPDX-License-Identifier: MIT */
/*
 * Token sampling: greedy, or temperature then top-k then top-p (nucleus)
 * with a seeded generator, so a run is reproducible from its seed.
 */
#ifndef KVT_RUNTIME_SAMPLER_H
#define KVT_RUNTIME_SAMPLER_H

#include <stdint.h>

struct kvt_sampler_params {
	float	 temp;		/* <= 0: greedy (argmax, lowest id on ties) */
	unsigned top_k;		/* 0: no limit */
	float	 top_p;		/* >= 1: no limit */
	uint64_t seed;
};

struct kvt_sampler;

/* 0, -EINVAL (n_vocab 0 or over INT32_MAX, top_p <= 0, a NaN, temp
 * +inf), -ENOMEM. top_k over n_vocab is no limit. */
int  kvt_sampler_new(const struct kvt_sampler_params *sp, uint32_t n_vocab,
		     struct kvt_sampler **out);
void kvt_sampler_free(struct kvt_sampler *s);
/* A token id from logits (n_vocab); logits are not modified. A NaN logit
 * is never drawn (0 if all are NaN); -inf ones only when all are. -EINVAL
 * for NULL arguments. A sampler holds the generator's state: one thread
 * at a time. */
int32_t kvt_sample(struct kvt_sampler *s, const float *logits);

#endif
