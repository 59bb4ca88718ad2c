/* SPDX-License-Identifier: MIT */
/*
 * kvt_pager_set while the pager runs. First the refusals: an unknown key,
 * a bad value, watermarks out of order, an unknown policy or bad policy
 * parameters (-EINVAL), keys that only take effect at open (-EPERM); each
 * leaves the configuration as it was. Then, on small tiers (fast 32 pages,
 * host 64, nvme 2000) holding 4 sequences of 48 pages (6 times the fast
 * tier), two threads decode (acquire every page of every layer, check every
 * byte, step) while a third changes, at random, the policy of each tier
 * among all built-in ones (some with parameters), the watermarks and the
 * prefetch depth. Afterwards every page verifies, nothing is lost, the
 * invariant check passes, the configuration shows the last change, and
 * each tier's policy ranks exactly the pages resident in it.
 */
#include <errno.h>
#include <pthread.h>
#include <time.h>
#include "common.h"
#include "pager/internal.h"

#define LAYERS	4u
#define TOKENS	48u		/* per layer: 12 pages of 4 tokens */
#define NSEQ	4u
#define NREAD	2u

static struct kvt_config cfg;
static struct kvt_pager *P;
static kvt_seq_t seqs[NSEQ];
static int stop;			/* atomic */
static unsigned long passes;		/* atomic: sequences verified */

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static unsigned rnd(uint64_t *s, unsigned n)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return (unsigned)((*s >> 11) % n);
}

static void conf_text(char *buf, size_t len)
{
	struct kvt_config c;
	kvt_pager_config(P, &c);
	CHECK(kvt_config_print(&c, buf, len) > 0);
}

/* key = value must fail with want, name the problem and change nothing. */
static void refused(const char *key, const char *value, int want, const char *says)
{
	static char before[16384], after[16384];
	const struct kvt_policy_ops *pol[KVT_NTIERS];
	uint32_t wm[KVT_NTIERS][3];
	char err[512] = "";

	conf_text(before, sizeof(before));
	pthread_mutex_lock(&P->lock);
	for (int ti = 0; ti < KVT_NTIERS; ti++) {
		pol[ti] = P->t[ti].pol;
		wm[ti][0] = P->t[ti].wm_min;
		wm[ti][1] = P->t[ti].wm_low;
		wm[ti][2] = P->t[ti].wm_high;
	}
	pthread_mutex_unlock(&P->lock);
	int r = kvt_pager_set(P, key, value, err, sizeof(err));
	if (r != want || !err[0] || (says && !strstr(err, says))) {
		fprintf(stderr, "%s = %s: %d (%s), expected %d with \"%s\"\n", key, value, r, err,
			want, says ? says : "");
		exit(1);
	}
	conf_text(after, sizeof(after));
	CHECK(strcmp(before, after) == 0);
	pthread_mutex_lock(&P->lock);
	for (int ti = 0; ti < KVT_NTIERS; ti++) {
		CHECK(pol[ti] == P->t[ti].pol);
		CHECK(wm[ti][0] == P->t[ti].wm_min && wm[ti][1] == P->t[ti].wm_low &&
		      wm[ti][2] == P->t[ti].wm_high);
	}
	pthread_mutex_unlock(&P->lock);
}

static void set_ok(const char *key, const char *value)
{
	char err[512] = "";
	int r = kvt_pager_set(P, key, value, err, sizeof(err));
	if (r) {
		fprintf(stderr, "%s = %s: %s (%s)\n", key, value, strerror(-r), err);
		exit(1);
	}
}

static void refusals(void)
{
	struct kvt_config c;

	refused("tier.fast.bogus", "1", -EINVAL, "unknown key");
	refused("access.prefetch_depth", "65", -EINVAL, "access.prefetch_depth");
	refused("tier.host.wm_low", "abc", -EINVAL, "tier.host.wm_low");
	refused("tier.nvme.wm_high", "51", -EINVAL, "tier.nvme.wm_high");
	refused("tier.fast.wm_min", "30", -EINVAL, "wm_min <= wm_low <= wm_high");
	refused("tier.host.wm_high", "1", -EINVAL, "wm_min <= wm_low <= wm_high");
	refused("tier.host.policy", "nosuch", -EINVAL, "no such policy");
	refused("tier.fast.policy", "s3fifo:small=0", -EINVAL, "tier.fast.policy");
	refused("tier.nvme.policy", "2q:bogus=1", -EINVAL, "tier.nvme.policy");
	refused("tier.host.policy", "LRU!", -EINVAL, "tier.host.policy");
	refused("io.depth", "8", -EPERM, "cannot change while the pager runs");
	refused("tier.nvme.bytes", "1M", -EPERM, "cannot change while the pager runs");
	refused("tier.fast.max_bytes", "1M", -EPERM, "cannot change while the pager runs");
	refused("tier.fast.bytes", "1M", -ERANGE, "reserved at open");
	refused("tier.host.bytes", "4K", -EINVAL, "at least 2");
	refused("access.host_in_place", "1", -EPERM, "cannot change while the pager runs");
	refused("geometry.layers", "0", -EINVAL, "geometry.layers");

	/* Watermarks move in steps that keep their order. */
	set_ok("tier.fast.wm_high", "40");
	set_ok("tier.fast.wm_low", "30");
	set_ok("tier.fast.wm_min", "20");
	kvt_pager_config(P, &c);
	CHECK_EQ(c.tier[KVT_TIER_FAST].wm_min, 20);
	CHECK_EQ(c.tier[KVT_TIER_FAST].wm_low, 30);
	CHECK_EQ(c.tier[KVT_TIER_FAST].wm_high, 40);
	pthread_mutex_lock(&P->lock);
	uint32_t nf = P->t[KVT_TIER_FAST].nframes;
	CHECK_EQ(P->t[KVT_TIER_FAST].wm_min, nf * 20 / 100);
	CHECK_EQ(P->t[KVT_TIER_FAST].wm_low, nf * 30 / 100);
	CHECK_EQ(P->t[KVT_TIER_FAST].wm_high, nf * 40 / 100);
	pthread_mutex_unlock(&P->lock);
	set_ok("access.prefetch_depth", "0");
	set_ok("tier.host.policy", "arc");
	kvt_pager_config(P, &c);
	CHECK_EQ(c.prefetch_depth, 0);
	CHECK(strcmp(c.tier[KVT_TIER_HOST].policy, "arc") == 0);
	CHECK(P->t[KVT_TIER_HOST].pol == &kvt_policy_arc);
}

static void *reader(void *arg)
{
	unsigned id = (unsigned)(uintptr_t)arg;

	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		for (unsigned i = id; i < NSEQ; i += NREAD) {
			unsigned n = t_verify_seq(P, seqs[i], &cfg, 100 + i, 0);
			CHECK_EQ(n, LAYERS * TOKENS / cfg.page_tokens);
			kvt_pager_step(P);
			__atomic_add_fetch(&passes, 1, __ATOMIC_RELAXED);
		}
	}
	return NULL;
}

static const char *const params[] = { "s3fifo:small=20", "s3fifo:small=60", "2q:kin=30",
				      "2q:kin=10,kout=80", "slru:protected=50", "lfu:age=64" };
#define NPARAMS (sizeof(params) / sizeof(params[0]))

/* The last policy set on each tier. */
static char last_policy[KVT_NTIERS][KVT_POLICY_MAX];
static unsigned long changes;

static void *changer(void *arg)
{
	uint64_t rng = (uint64_t)(uintptr_t)&rng ^ now_ms() * 0x9e3779b97f4a7c15ull;
	uint64_t end = now_ms() + (uint64_t)(uintptr_t)arg;
	unsigned npol = 0;
	char key[64], val[64], err[512];

	if (!rng)
		rng = 1;
	fprintf(stderr, "changer seed %#llx\n", (unsigned long long)rng);
	while (kvt_policies[npol])
		npol++;
	while (now_ms() < end || changes < 3 * (npol + NPARAMS)) {
		int ti = (int)rnd(&rng, KVT_NTIERS);
		unsigned what = rnd(&rng, 10);
		if (what < 5) {
			/* Cycle through every policy at least once per tier. */
			unsigned k = changes < 3 * (npol + NPARAMS) ? (unsigned)(changes / 3)
							   : rnd(&rng, npol + NPARAMS);
			const char *spec = k < npol ? kvt_policies[k]->name : params[k - npol];
			if (k < npol && (kvt_policies[k]->flags & KVT_POLICY_OFFLINE))
				spec = "lru";	/* refused live: it needs the future */
			snprintf(key, sizeof(key), "tier.%s.policy", kvt_tier_name(ti));
			set_ok(key, spec);
			snprintf(last_policy[ti], sizeof(last_policy[ti]), "%s", spec);
		} else if (what < 8) {
			unsigned v[3] = { rnd(&rng, 51), rnd(&rng, 51), rnd(&rng, 51) };
			static const char *const f[3] = { "wm_min", "wm_low", "wm_high" };
			for (int i = 0; i < 3; i++)	/* sort: min <= low <= high */
				for (int j = i + 1; j < 3; j++)
					if (v[j] < v[i]) {
						unsigned x = v[i];
						v[i] = v[j];
						v[j] = x;
					}
			/* min and low to 0 first, so every step keeps the order. */
			for (int i = 0; i < 2; i++) {
				snprintf(key, sizeof(key), "tier.%s.%s", kvt_tier_name(ti), f[i]);
				set_ok(key, "0");
			}
			for (int i = 2; i >= 0; i--) {
				snprintf(key, sizeof(key), "tier.%s.%s", kvt_tier_name(ti), f[i]);
				snprintf(val, sizeof(val), "%u", v[i]);
				set_ok(key, val);
			}
			if (v[2] < 50) {	/* and one out of order, refused */
				snprintf(key, sizeof(key), "tier.%s.wm_low", kvt_tier_name(ti));
				snprintf(val, sizeof(val), "%u", v[2] + 1);
				CHECK_EQ(kvt_pager_set(P, key, val, err, sizeof(err)), -EINVAL);
			}
		} else {
			snprintf(val, sizeof(val), "%u", rnd(&rng, 5));
			set_ok("access.prefetch_depth", val);
		}
		changes++;
	}
	return NULL;
}

static int never(void *arg, uint64_t key)
{
	(void)arg;
	(void)key;
	return 0;
}

/* Each tier's policy ranks exactly the pages resident in it, once each. */
static void check_policy_population(void)
{
	pthread_mutex_lock(&P->lock);
	for (int ti = 0; ti < KVT_NTIERS; ti++) {
		struct tier *t = &P->t[ti];
		uint64_t *keys = calloc((size_t)t->nframes + 1, sizeof(*keys));
		uint8_t *seen = calloc((size_t)P->npages + 1, 1);
		uint32_t resident = 0;
		CHECK(keys && seen);
		for (uint32_t f = 0; f < t->nframes; f++)
			resident += t->owner[f] != NO_PAGE && P->pages[t->owner[f]].frame[ti] == f;
		size_t n = t->pol->victims(t->pst, keys, t->nframes, never, NULL);
		for (size_t i = 0; i < n; i++) {
			CHECK(keys[i] < P->npages);
			CHECK(!seen[keys[i]]);
			seen[keys[i]] = 1;
			CHECK(P->pages[keys[i]].frame[ti] != NO_FRAME);
		}
		if (n != resident) {
			fprintf(stderr, "%s tier, policy %s: %zu ranked, %u resident\n",
				kvt_tier_name(ti), t->pol->name, n, resident);
			exit(1);
		}
		free(keys);
		free(seen);
	}
	pthread_mutex_unlock(&P->lock);
}

int main(void)
{
	struct kvt_device *dev;
	struct kvt_config c;
	struct kvt_stats st;
	pthread_t rd[NREAD], ch;

	P = t_open_tiers(&cfg, &dev, LAYERS, 32, 64, 2000, 0, 2);
	refusals();

	for (unsigned i = 0; i < NSEQ; i++) {
		CHECK(kvt_seq_open(P, &seqs[i]) == 0);
		t_append(P, seqs[i], &cfg, 100 + i, 0, TOKENS);
	}
	for (unsigned i = 0; i < NREAD; i++)
		CHECK(pthread_create(&rd[i], NULL, reader, (void *)(uintptr_t)i) == 0);
	CHECK(pthread_create(&ch, NULL, changer, (void *)(uintptr_t)t_scale(1500)) == 0);
	pthread_join(ch, NULL);
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	for (unsigned i = 0; i < NREAD; i++)
		pthread_join(rd[i], NULL);

	CHECK(passes >= NSEQ);
	for (unsigned i = 0; i < NSEQ; i++)
		CHECK_EQ(t_verify_seq(P, seqs[i], &cfg, 100 + i, 0), LAYERS * TOKENS / cfg.page_tokens);
	t_quiesce(P);
	t_check_inv(P);
	check_policy_population();

	CHECK(kvt_pager_stats(P, &st) == 0);
	CHECK_EQ(st.lost_pages, 0);
	CHECK_EQ(st.io_errors, 0);
	CHECK_EQ(st.csum_failures, 0);
	CHECK_EQ(st.pages, NSEQ * LAYERS * TOKENS / cfg.page_tokens);
	kvt_pager_config(P, &c);
	for (int ti = 0; ti < KVT_NTIERS; ti++) {
		if (!last_policy[ti][0])
			continue;
		CHECK(strcmp(c.tier[ti].policy, last_policy[ti]) == 0);
		CHECK(P->t[ti].pol == kvt_policy_find(last_policy[ti]));
	}
	/* Every policy, swapped in over resident pages, ranks all of them. */
	for (unsigned k = 0; kvt_policies[k]; k++)
		for (int ti = 0; ti < KVT_NTIERS && !(kvt_policies[k]->flags & KVT_POLICY_OFFLINE);
		     ti++) {
			char key[64];
			snprintf(key, sizeof(key), "tier.%s.policy", kvt_tier_name(ti));
			set_ok(key, kvt_policies[k]->name);
			check_policy_population();
			set_ok(key, params[(k + (unsigned)ti) % NPARAMS]);
			check_policy_population();
		}
	t_check_inv(P);
	for (unsigned i = 0; i < NSEQ; i++)
		CHECK_EQ(t_verify_seq(P, seqs[i], &cfg, 100 + i, 0), LAYERS * TOKENS / cfg.page_tokens);

	printf("%lu changes, %lu sequence passes, %llu steps\n", changes, passes,
	       (unsigned long long)st.step);

	for (unsigned i = 0; i < NSEQ; i++)
		CHECK(kvt_seq_close(P, seqs[i]) == 0);
	t_close(P, dev);
	return 0;
}
