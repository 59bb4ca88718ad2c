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

/* 0, -EINVAL (n_vocab 0, top_p <= 0, a NaN), -ENOMEM. */
int  kvt_sampler_new(const struct kvt_sampler_params *sp, uint32_t n_vocab,
		     struct kvt_sampler **out);
void kvt_sampler_free(struct kvt_sampler *s);
/* A token id from logits (n_vocab); logits are not modified. */
int32_t kvt_sample(struct kvt_sampler *s, const float *logits);

#endif
