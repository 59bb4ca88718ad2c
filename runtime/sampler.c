/* SPDX-License-Identifier: MIT */
/*
 * Token sampling (see runtime/sampler.h for the contract).
 *
 * Candidates are ordered by logit, higher first, then by id, lower first,
 * so every choice that depends on order (argmax, which of equal logits
 * top_k keeps, where the nucleus ends) is deterministic. top_k keeps its
 * k best with a heap of size k in one pass (O(n log k), the vocabulary is
 * never sorted); only top_p without top_k sorts every candidate.
 * Probabilities are computed in double, relative to the highest logit.
 *
 * The generator is xoshiro256** seeded through splitmix64: the same seed
 * draws the same tokens on every platform for the same logits.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/sampler.h"

struct cand {
	float logit;
	int32_t id;
};

struct kvt_sampler {
	struct kvt_sampler_params p;
	uint32_t n_vocab;
	uint64_t rng[4];		/* xoshiro256** state */
	struct cand *c;			/* (n_vocab) candidates of the current draw */
	double *w;			/* (n_vocab) their weights, exp((logit - max) / temp) */
};

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t xoshiro(uint64_t *s)
{
	uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return r;
}

/* Uniform in [0, 1), 53 random bits. */
static double uniform(struct kvt_sampler *s)
{
	return (double)(xoshiro(s->rng) >> 11) * 0x1.0p-53;
}

/* a ranks before b: higher logit, then lower id. */
static bool better(const struct cand *a, const struct cand *b)
{
	return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cmp_cand(const void *x, const void *y)
{
	const struct cand *a = x, *b = y;

	return better(a, b) ? -1 : better(b, a) ? 1 : 0;
}

/* Lowest id of the highest logit; NaN never wins; 0 if all are NaN. */
static int32_t argmax(const float *logits, uint32_t n)
{
	uint32_t i, best = 0;

	while (best < n && isnan(logits[best]))
		best++;
	if (best == n)
		return 0;
	for (i = best + 1; i < n; i++)
		if (logits[i] > logits[best])
			best = i;
	return (int32_t)best;
}

/* Restore the heap c[0..n) (worst candidate at the root) below i. */
static void sift_down(struct cand *c, uint32_t n, uint32_t i)
{
	struct cand x = c[i];
	uint32_t k;

	while ((k = 2 * i + 1) < n) {
		if (k + 1 < n && better(&c[k], &c[k + 1]))
			k++;
		if (!better(&x, &c[k]))
			break;
		c[i] = c[k];
		i = k;
	}
	c[i] = x;
}

/* The k best non-NaN logits into s->c, best first; returns how many (< k
 * only when fewer are not NaN). */
static uint32_t top_k(struct kvt_sampler *s, const float *logits, uint32_t k)
{
	struct cand *c = s->c, x;
	uint32_t i, m = 0;

	for (i = 0; i < s->n_vocab; i++) {
		if (isnan(logits[i]))
			continue;
		x = (struct cand){ .logit = logits[i], .id = (int32_t)i };
		if (m < k) {
			uint32_t j = m++;

			/* sift up: the root stays the worst kept */
			while (j && better(&c[(j - 1) / 2], &x)) {
				c[j] = c[(j - 1) / 2];
				j = (j - 1) / 2;
			}
			c[j] = x;
		} else if (better(&x, &c[0])) {
			c[0] = x;
			sift_down(c, m, 0);
		}
	}
	qsort(c, m, sizeof(*c), cmp_cand);
	return m;
}

int kvt_sampler_new(const struct kvt_sampler_params *sp, uint32_t n_vocab,
		    struct kvt_sampler **out)
{
	struct kvt_sampler *s;
	uint64_t x;
	int i;

	*out = NULL;
	if (!sp || !n_vocab || n_vocab > INT32_MAX || isnan(sp->temp) || isnan(sp->top_p) ||
	    sp->top_p <= 0 || (isinf(sp->temp) && sp->temp > 0))
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->p = *sp;
	s->n_vocab = n_vocab;
	s->c = malloc(n_vocab * sizeof(*s->c));
	s->w = malloc(n_vocab * sizeof(*s->w));
	if (!s->c || !s->w) {
		kvt_sampler_free(s);
		return -ENOMEM;
	}
	x = sp->seed;
	for (i = 0; i < 4; i++)
		s->rng[i] = splitmix64(&x);
	*out = s;
	return 0;
}

void kvt_sampler_free(struct kvt_sampler *s)
{
	if (!s)
		return;
	free(s->c);
	free(s->w);
	free(s);
}

int32_t kvt_sample(struct kvt_sampler *s, const float *logits)
{
	const struct kvt_sampler_params *p;
	uint32_t i, m = 0, last = 0;
	bool sorted = false;
	double sum = 0, acc, u;
	float max;

	if (!s || !logits)
		return -EINVAL;
	p = &s->p;
	if (p->temp <= 0 || p->top_k == 1)
		return argmax(logits, s->n_vocab);

	if (p->top_k && p->top_k < s->n_vocab) {
		m = top_k(s, logits, p->top_k);
		sorted = true;
	} else {
		for (i = 0; i < s->n_vocab; i++)
			if (!isnan(logits[i]))
				s->c[m++] = (struct cand){ .logit = logits[i], .id = (int32_t)i };
		if (p->top_p < 1) {
			qsort(s->c, m, sizeof(*s->c), cmp_cand);
			sorted = true;
		}
	}
	if (!m)
		return 0;

	/* Weights relative to the best: it weighs 1 (even when it is +inf,
	 * when every other weighs 0); all -inf is uniform. */
	max = s->c[0].logit;
	if (!sorted)
		for (i = 1; i < m; i++)
			if (s->c[i].logit > max)
				max = s->c[i].logit;
	for (i = 0; i < m; i++) {
		float l = s->c[i].logit;

		s->w[i] = l == max ? 1.0 : exp(((double)l - max) / p->temp);
		sum += s->w[i];
	}

	/* The nucleus: the shortest prefix holding top_p of the mass. */
	if (p->top_p < 1) {
		double want = (double)p->top_p * sum;

		for (acc = 0, i = 0; i < m; i++) {
			acc += s->w[i];
			if (acc >= want)
				break;
		}
		if (i < m) {
			m = i + 1;
			sum = acc;
		}
	}

	u = uniform(s) * sum;
	for (acc = 0, i = 0; i < m; i++) {
		if (s->w[i] <= 0)
			continue;
		acc += s->w[i];
		last = i;
		if (u < acc)
			break;
	}
	return s->c[last].id;
}
