/* SPDX-License-Identifier: MIT */
/*
 * A live pager on tiny tiers, for the targets that answer requests against
 * one (control protocol, HTTP): cpu device, 2 layers, 2 KV heads of 64
 * f32, pages of 4 tokens (4 KiB, the O_DIRECT multiple the geometry asks),
 * 4 fast and 8 host pages, no NVMe tier, and one sequence of 12 tokens a
 * layer (3 pages each), so stats, get, set and drain have something to
 * act on.
 *
 * Opened once per process (an open costs tens of milliseconds, a request
 * microseconds). rig_reset puts back every setting a request can change
 * (policies, watermarks, capacities, prefetch depth, host floor), so that
 * an input finds the pager as the last one did, save where its pages sit.
 */
#ifndef KVT_TESTS_FUZZ_PAGER_RIG_H
#define KVT_TESTS_FUZZ_PAGER_RIG_H

#include <stdarg.h>
#include "tests/fuzz/fuzz.h"
#include <kvt/config.h>
#include <kvt/device.h>
#include <kvt/pager.h>

struct rig {
	struct kvt_device *dev;
	struct kvt_pager *p;
	struct kvt_config cfg;		/* as opened */
};

static inline void rig_open(struct rig *r)
{
	static float k[12 * 2 * 64], v[12 * 2 * 64];
	struct kvt_config c;
	kvt_seq_t s;
	uint64_t pb;
	char why[512];

	kvt_config_default(&c);
	c.n_layers = 2;
	c.n_kv_heads = 2;
	c.head_dim = 64;
	c.page_tokens = 4;
	c.dtype_bytes = 4;
	pb = kvt_config_page_bytes(&c);
	c.tier[KVT_TIER_FAST].bytes = 4 * pb;
	c.tier[KVT_TIER_HOST].bytes = 8 * pb;
	c.tier[KVT_TIER_NVME].bytes = 0;
	c.host_prefault_threads = 1;
	c.host_hugepages = KVT_HUGE_OFF;
	FUZZ_CHECK(kvt_device_open("cpu", 0, &r->dev) == 0);
	if (kvt_config_validate(&c, why, sizeof(why))) {
		fprintf(stderr, "rig: %s\n", why);
		abort();
	}
	FUZZ_CHECK(kvt_pager_open(&c, r->dev, &r->p) == 0);
	kvt_pager_config(r->p, &r->cfg);
	FUZZ_CHECK(kvt_seq_open(r->p, &s) == 0);
	for (unsigned l = 0; l < c.n_layers; l++)
		FUZZ_CHECK(kvt_seq_append(r->p, s, l, k, v, 12) == 0);
}

/* Set key to the text of fmt; the value was valid at open, so it must be
 * taken now, but for a watermark that another one still in the changed
 * order refuses: that returns -EINVAL, and the caller sets them again. */
static inline int rig_set(struct rig *r, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static inline int rig_set(struct rig *r, const char *key, const char *fmt, ...)
{
	char v[KVT_POLICY_MAX + 32], err[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(v, sizeof(v), fmt, ap);
	va_end(ap);
	return kvt_pager_set(r->p, key, v, err, sizeof(err));
}

static inline void rig_reset(struct rig *r)
{
	static const char *const sec[] = { "tier.fast", "tier.host" };
	const struct kvt_config *c = &r->cfg;
	char key[64];

	for (int ti = 0; ti < 2; ti++) {
		const struct kvt_tier_config *t = &c->tier[ti];
		int bad;

		snprintf(key, sizeof(key), "%s.policy", sec[ti]);
		FUZZ_CHECK(rig_set(r, key, "%s", t->policy[0] ? t->policy : "lru") == 0);
		snprintf(key, sizeof(key), "%s.bytes", sec[ti]);
		FUZZ_CHECK(rig_set(r, key, "%llu", (unsigned long long)t->bytes) == 0);
		for (int pass = 0; pass < 3; pass++) {
			snprintf(key, sizeof(key), "%s.wm_min", sec[ti]);
			bad = rig_set(r, key, "%u", t->wm_min) != 0;
			snprintf(key, sizeof(key), "%s.wm_low", sec[ti]);
			bad |= rig_set(r, key, "%u", t->wm_low) != 0;
			snprintf(key, sizeof(key), "%s.wm_high", sec[ti]);
			bad |= rig_set(r, key, "%u", t->wm_high) != 0;
			if (!bad)
				break;
		}
		FUZZ_CHECK(!bad);
	}
	FUZZ_CHECK(rig_set(r, "access.prefetch_depth", "%u", c->prefetch_depth) == 0);
	FUZZ_CHECK(rig_set(r, "tier.host.floor", "%llu", (unsigned long long)c->host_floor) == 0);
}

#endif
