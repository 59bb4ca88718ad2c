/* SPDX-License-Identifier: MIT */
/*
 * The sampler: greedy is the argmax (lowest id on ties, NaN never), top_k
 * 1 is greedy at any temperature, a seed fixes the sequence (and a golden
 * one guards the generator), draws follow softmax(logits / temp) within 5
 * sigma over 200k draws, top_k and top_p never draw outside what they
 * keep and renormalise over it (worked examples with known
 * probabilities), large vocabularies take the partial-selection path, odd
 * logits (NaN, infinities) behave, and bad parameters are refused.
 */
#include <errno.h>
#include <math.h>
#include <time.h>

#include "common.h"
#include "runtime/sampler.h"

static struct kvt_sampler *mk(float temp, unsigned top_k, float top_p, uint64_t seed, uint32_t n)
{
	struct kvt_sampler_params sp = { .temp = temp, .top_k = top_k, .top_p = top_p, .seed = seed };
	struct kvt_sampler *s;

	CHECK_EQ(kvt_sampler_new(&sp, n, &s), 0);
	CHECK(s);
	return s;
}

static uint64_t rng = 88172645463325252ull;

static uint32_t rnd(uint32_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)((rng >> 16) % n);
}

/* Draw n times and check the frequencies against want[] (which sums to 1):
 * every id with want 0 never drawn, the others within 5 sigma. */
static void check_freq(struct kvt_sampler *s, const float *logits, uint32_t nv,
		       const double *want, unsigned n, const char *what)
{
	unsigned *cnt = calloc(nv, sizeof(*cnt)), i;

	CHECK(cnt);
	for (i = 0; i < n; i++) {
		int32_t id = kvt_sample(s, logits);

		CHECK(id >= 0 && (uint32_t)id < nv);
		cnt[id]++;
	}
	for (i = 0; i < nv; i++) {
		double mean = n * want[i], sd = sqrt(n * want[i] * (1 - want[i]));

		if ((want[i] == 0 && cnt[i]) || fabs(cnt[i] - mean) > 5 * sd + 1) {
			fprintf(stderr, "%s: id %u drawn %u times in %u, expected %.1f +- %.1f\n",
				what, i, cnt[i], n, mean, sd);
			exit(1);
		}
	}
	free(cnt);
}

/* softmax(logits / temp) into p. */
static void softmax(const float *l, uint32_t n, double temp, double *p)
{
	double max = -INFINITY, sum = 0;
	uint32_t i;

	for (i = 0; i < n; i++)
		max = l[i] > max ? l[i] : max;
	for (i = 0; i < n; i++)
		sum += p[i] = exp((l[i] - max) / temp);
	for (i = 0; i < n; i++)
		p[i] /= sum;
}

static void c_greedy(int arg)
{
	static const float l[6] = { 0.5f, 3.0f, -1.0f, 3.0f, NAN, 2.9f };
	static const float nan_first[3] = { NAN, -5.0f, -4.0f };
	float copy[6];
	float r[64];
	struct kvt_sampler *s;
	unsigned i, j, trial;

	/* temp 0 and below: the argmax, the lower of two equal ids, every time. */
	s = mk(0, 0, 1, 1, 6);
	memcpy(copy, l, sizeof(l));
	for (i = 0; i < 100; i++)
		CHECK_EQ(kvt_sample(s, l), 1);
	CHECK(!memcmp(copy, l, sizeof(l)));	/* untouched (NaN bits too) */
	kvt_sampler_free(s);
	s = mk(-1, 5, 0.5f, 1, 3);
	CHECK_EQ(kvt_sample(s, nan_first), 2);
	kvt_sampler_free(s);

	/* top_k 1 is greedy at any temperature, ties and all. */
	for (trial = 0; trial < 300; trial++) {
		float temps[] = { 0.01f, 1.0f, 100.0f, 1e30f };
		int32_t want = 0;

		for (j = 0; j < 64; j++)
			r[j] = (float)rnd(8);	/* many ties */
		for (j = 1; j < 64; j++)
			if (r[j] > r[want])
				want = (int32_t)j;
		s = mk(0, 0, 1, trial, 64);
		CHECK_EQ(kvt_sample(s, r), want);
		kvt_sampler_free(s);
		for (i = 0; i < 4; i++) {
			s = mk(temps[i], 1, trial % 2 ? 0.3f : 1.0f, trial, 64);
			CHECK_EQ(kvt_sample(s, r), want);
			kvt_sampler_free(s);
		}
	}
	(void)arg;
}

static void c_seed(int arg)
{
	/* The first draws of seed 42 over these logits: a different value here
	 * means a different generator or arithmetic, and so different runs. */
	static const int32_t golden[16] = { 0, 2, 4, 7, 7, 5, 5, 6, 5, 4, 4, 2, 6, 2, 4, 6 };
	float l[8] = { 1, 0.5f, 0.9f, 0.8f, 1.1f, 0.2f, 0.4f, 0.7f };
	struct kvt_sampler *a = mk(1, 0, 1, 42, 8), *b = mk(1, 0, 1, 42, 8), *c = mk(1, 0, 1, 43, 8);
	int32_t x[1000], y[1000];
	unsigned i, diff = 0;

	for (i = 0; i < 1000; i++) {
		x[i] = kvt_sample(a, l);
		y[i] = kvt_sample(b, l);
		diff += kvt_sample(c, l) != x[i];
	}
	CHECK(!memcmp(x, y, sizeof(x)));
	CHECK(diff > 500);	/* about 7/8 differ by chance */
	for (i = 0; i < 16; i++)
		if (x[i] != golden[i]) {
			fprintf(stderr, "draw %u of seed 42: %d, golden %d; first 16:", i, x[i], golden[i]);
			for (i = 0; i < 16; i++)
				fprintf(stderr, " %d", x[i]);
			fprintf(stderr, "\n");
			exit(1);
		}
	kvt_sampler_free(a);
	kvt_sampler_free(b);
	kvt_sampler_free(c);

	/* Seeds 0 and 1 and with top_k / top_p: still reproducible. */
	a = mk(0.8f, 3, 0.9f, 0, 8);
	b = mk(0.8f, 3, 0.9f, 0, 8);
	for (i = 0; i < 1000; i++)
		CHECK_EQ(kvt_sample(a, l), kvt_sample(b, l));
	kvt_sampler_free(a);
	kvt_sampler_free(b);
	(void)arg;
}

static void c_softmax(int arg)
{
	static const float l[8] = { 1.0f, 0.0f, 2.5f, -1.0f, 0.5f, 2.0f, -3.0f, 1.5f };
	static const float temps[3] = { 0.7f, 1.0f, 2.0f };
	double p[8];
	unsigned i, n = t_scale(200000);
	struct kvt_sampler *s;

	for (i = 0; i < 3; i++) {
		softmax(l, 8, temps[i], p);
		/* top_k >= n_vocab and top_p >= 1 are no limit. */
		s = mk(temps[i], i == 2 ? 8 : 0, i == 1 ? 1.5f : 1.0f, 7 + i, 8);
		check_freq(s, l, 8, p, n, "softmax");
		kvt_sampler_free(s);
	}
	printf("  %u draws at each of 3 temperatures within 5 sigma of softmax\n", n);
	(void)arg;
}

/*
 * Worked examples. Logits ln p with p = 0.25, 0.1, 0.5, 0.15 for ids 0..3
 * (so at temp 1 the probabilities are p):
 * - top_k 2: ids 2 and 0, renormalised 2/3 and 1/3.
 * - top_p 0.7: by probability 0.5 (id 2), then 0.75 with id 0 reaches it:
 *   ids 2 and 0 again, 2/3 and 1/3.
 * - top_p 0.8: 0.5 + 0.25 + 0.15 = 0.9: ids 2, 0, 3 as 5/9, 5/18, 1/6.
 * - top_p 0.4: 0.5 alone holds it: id 2 always.
 * - top_k 3, top_p 0.8: of 5/9, 5/18, 1/6, the first two hold 5/6 >= 0.8:
 *   ids 2 and 0, 2/3 and 1/3.
 * - top_k 2 over logits 5, 5, 5, 1: the two lowest ids of the tie, halves.
 */
static void c_filters(int arg)
{
	const float l[4] = { logf(0.25f), logf(0.1f), logf(0.5f), logf(0.15f) };
	static const float tie[4] = { 5, 5, 5, 1 };
	static const struct {
		unsigned top_k;
		float top_p;
		const float *l;
		double want[4];
	} ex[] = {
		{ 2, 1.0f, NULL, { 1 / 3.0, 0, 2 / 3.0, 0 } },
		{ 0, 0.7f, NULL, { 1 / 3.0, 0, 2 / 3.0, 0 } },
		{ 0, 0.8f, NULL, { 5 / 18.0, 0, 5 / 9.0, 1 / 6.0 } },
		{ 0, 0.4f, NULL, { 0, 0, 1, 0 } },
		{ 3, 0.8f, NULL, { 1 / 3.0, 0, 2 / 3.0, 0 } },
		{ 2, 1.0f, tie, { 0.5, 0.5, 0, 0 } },
	};
	unsigned i, n = t_scale(200000);

	for (i = 0; i < sizeof(ex) / sizeof(ex[0]); i++) {
		struct kvt_sampler *s = mk(1.0f, ex[i].top_k, ex[i].top_p, 100 + i, 4);
		char what[64];

		snprintf(what, sizeof(what), "example %u (top_k %u, top_p %.2f)", i, ex[i].top_k,
			 ex[i].top_p);
		check_freq(s, ex[i].l ? ex[i].l : l, 4, ex[i].want, n, what);
		kvt_sampler_free(s);
	}
	/* The temperature applies before top_p: at temp 0.5 the probabilities
	 * go as p^2 (0.0625, 0.01, 0.25, 0.0225; 0.25 of 0.345 is 0.725), so
	 * top_p 0.7 keeps id 2 alone. */
	{
		struct kvt_sampler *s = mk(0.5f, 0, 0.7f, 9, 4);

		check_freq(s, l, 4, (const double[]){ 0, 0, 1, 0 }, 10000, "temp then top_p");
		kvt_sampler_free(s);
	}
	(void)arg;
}

static int cmp_desc(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;

	return (x < y) - (x > y);
}

/* Large vocabularies: top_k by partial selection, top_p alone by a sort;
 * no draw ever falls outside what the test works out independently. */
static void c_large(int arg)
{
	uint32_t nv = 100000, i, j, draws = t_scale(300);
	float *l = malloc(nv * sizeof(*l)), *sorted = malloc(nv * sizeof(*sorted)), kth;
	struct kvt_sampler *s;
	double t0, t1, sum, acc, max, cut;
	struct timespec ts;

	CHECK(l && sorted);
	for (i = 0; i < nv; i++)
		l[i] = (float)rnd(1000000) / 50000.0f;	/* 0..20, few ties */
	memcpy(sorted, l, nv * sizeof(*l));
	qsort(sorted, nv, sizeof(*sorted), cmp_desc);

	/* top_k 40: every draw has a logit >= the 40th highest. */
	kth = sorted[39];
	s = mk(1.5f, 40, 1.0f, 5, nv);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	t0 = ts.tv_sec + ts.tv_nsec * 1e-9;
	for (j = 0; j < draws; j++) {
		int32_t id = kvt_sample(s, l);

		CHECK(id >= 0 && (uint32_t)id < nv && l[id] >= kth);
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	t1 = ts.tv_sec + ts.tv_nsec * 1e-9;
	printf("  top_k 40 of %u: %.3f ms a draw\n", nv, (t1 - t0) * 1e3 / draws);
	kvt_sampler_free(s);

	/* top_p 0.5 alone, temp 0.3: the nucleus is the prefix of the sorted
	 * logits whose softmax mass first reaches 0.5. */
	max = sorted[0];
	for (sum = 0, i = 0; i < nv; i++)
		sum += exp((sorted[i] - max) / 0.3);
	for (acc = 0, i = 0; i < nv; i++) {
		acc += exp((sorted[i] - max) / 0.3);
		if (acc >= 0.5 * sum)
			break;
	}
	cut = sorted[i];
	s = mk(0.3f, 0, 0.5f, 6, nv);
	for (j = 0; j < draws / 10; j++) {	/* each sorts the vocabulary */
		int32_t id = kvt_sample(s, l);

		CHECK(id >= 0 && (uint32_t)id < nv && l[id] >= cut);
	}
	printf("  top_p 0.5 of %u: nucleus of %u tokens\n", nv, i + 1);
	kvt_sampler_free(s);
	free(l);
	free(sorted);
	(void)arg;
}

static void c_odd(int arg)
{
	static const float all_nan[3] = { NAN, NAN, NAN };
	static const float pinf[4] = { 1, INFINITY, 3, INFINITY };
	static const float ninf[3] = { -INFINITY, -INFINITY, -INFINITY };
	static const float some_ninf[4] = { -INFINITY, 0, -INFINITY, 0 };
	static const float with_nan[4] = { 0, NAN, 0, NAN };
	struct kvt_sampler *s;
	unsigned i;

	s = mk(1, 0, 1, 3, 3);
	CHECK_EQ(kvt_sample(s, all_nan), 0);
	check_freq(s, ninf, 3, (const double[]){ 1 / 3.0, 1 / 3.0, 1 / 3.0 }, 30000, "all -inf");
	kvt_sampler_free(s);
	s = mk(1, 0, 1, 3, 4);
	check_freq(s, pinf, 4, (const double[]){ 0, 0.5, 0, 0.5 }, 30000, "+inf");
	check_freq(s, some_ninf, 4, (const double[]){ 0, 0.5, 0, 0.5 }, 30000, "-inf");
	check_freq(s, with_nan, 4, (const double[]){ 0.5, 0, 0.5, 0 }, 30000, "NaN");
	kvt_sampler_free(s);
	s = mk(1, 2, 0.9f, 3, 4);
	check_freq(s, with_nan, 4, (const double[]){ 0.5, 0, 0.5, 0 }, 30000, "NaN, top_k");
	kvt_sampler_free(s);
	s = mk(0, 0, 1, 3, 4);
	CHECK_EQ(kvt_sample(s, pinf), 1);
	CHECK_EQ(kvt_sample(s, with_nan), 0);
	kvt_sampler_free(s);
	/* A tiny temperature is greedy in effect; one vocabulary entry. */
	s = mk(1e-20f, 0, 1, 3, 4);
	for (i = 0; i < 100; i++)
		CHECK_EQ(kvt_sample(s, (const float[]){ 0, 1, 0.999f, 0 }), 1);
	kvt_sampler_free(s);
	s = mk(1, 0, 0.1f, 3, 1);
	CHECK_EQ(kvt_sample(s, (const float[]){ 42 }), 0);
	kvt_sampler_free(s);
	(void)arg;
}

static void c_bad(int arg)
{
	struct kvt_sampler_params ok = { .temp = 1, .top_k = 0, .top_p = 1, .seed = 1 }, p;
	struct kvt_sampler *s = (struct kvt_sampler *)&ok;

	CHECK_EQ(kvt_sampler_new(&ok, 0, &s), -EINVAL);
	CHECK(!s);
	CHECK_EQ(kvt_sampler_new(&ok, (uint32_t)INT32_MAX + 1, &s), -EINVAL);
	CHECK_EQ(kvt_sampler_new(NULL, 4, &s), -EINVAL);
	p = ok; p.top_p = 0;
	CHECK_EQ(kvt_sampler_new(&p, 4, &s), -EINVAL);
	p = ok; p.top_p = -0.5f;
	CHECK_EQ(kvt_sampler_new(&p, 4, &s), -EINVAL);
	p = ok; p.top_p = NAN;
	CHECK_EQ(kvt_sampler_new(&p, 4, &s), -EINVAL);
	p = ok; p.temp = NAN;
	CHECK_EQ(kvt_sampler_new(&p, 4, &s), -EINVAL);
	p = ok; p.temp = INFINITY;
	CHECK_EQ(kvt_sampler_new(&p, 4, &s), -EINVAL);
	CHECK(!s);
	/* Allowed: greedy by a negative or -inf temp, top_p above 1, top_k above n. */
	p = ok; p.temp = -INFINITY; p.top_p = INFINITY; p.top_k = 1000;
	CHECK_EQ(kvt_sampler_new(&p, 4, &s), 0);
	CHECK_EQ(kvt_sample(s, (const float[]){ 0, 0, 1, 1 }), 2);
	CHECK_EQ(kvt_sample(s, NULL), -EINVAL);
	CHECK_EQ(kvt_sample(NULL, (const float[]){ 0 }), -EINVAL);
	kvt_sampler_free(s);
	kvt_sampler_free(NULL);
	(void)arg;
}

int main(void)
{
	static const struct t_case cases[] = {
		{ "greedy", c_greedy },
		{ "seed", c_seed },
		{ "softmax", c_softmax },
		{ "filters", c_filters },
		{ "large", c_large },
		{ "odd_logits", c_odd },
		{ "bad_params", c_bad },
	};

	return t_run_cases(cases, sizeof(cases) / sizeof(cases[0]), 0, 12);
}
