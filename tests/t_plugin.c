/* SPDX-License-Identifier: MIT */
/*
 * Policy plug-ins: the example of docs/policies.md
 * (docs/examples/policy_example.c, built by the Makefile into
 * $(BUILD)/plugins/example.so) is loaded by path, runs in the cache
 * simulator like a built-in and in a live pager as the fast tier's
 * policy; the broken copies next to it are refused with a reason.
 */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <unistd.h>

#include <kvt/version.h>

#include "policy_sim.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

static char dir[PATH_MAX];		/* $(BUILD)/plugins */

static const char *plugin(const char *name, const char *params)
{
	static char spec[PATH_MAX + 64];

	snprintf(spec, sizeof(spec), "%s/%s.so%s%s", dir, name, params ? ":" : "",
		 params ? params : "");
	return spec;
}

/* kvt_policy_load refuses spec with a reason that contains want. */
static void refused(const char *spec, const char *want)
{
	char err[512];

	memset(err, 'x', sizeof(err));
	CHECK(!kvt_policy_load(spec, err, sizeof(err)));
	if (!strstr(err, want))
		fprintf(stderr, "%s: \"%s\", expected \"%s\"\n", spec ? spec : "(null)", err, want);
	CHECK(strstr(err, want));
	CHECK(!kvt_policy_find(spec));
}

static struct kvt_ref lref(uint64_t key, uint64_t step, uint32_t layer)
{
	struct kvt_ref r = ref_at(key, step);

	r.seq = 0;
	r.layer = layer;
	r.index = (uint32_t)key;
	return r;
}

static void test_load(void)
{
	const struct kvt_policy_ops *o, *o2;
	char err[256];
	struct sim s;

	o = kvt_policy_load(plugin("example", NULL), err, sizeof(err));
	if (!o)
		fprintf(stderr, "%s\n", err);
	CHECK(o);
	CHECK(!strcmp(o->name, "layerlru"));
	CHECK_EQ(err[0], 0);
	/* The same file again, through find and with params: the same table. */
	o2 = kvt_policy_find(plugin("example", "keep=2"));
	CHECK(o2 == o);
	CHECK(!strcmp(kvt_policy_params(plugin("example", "keep=2")), "keep=2"));
	/* Its own params are its own business. */
	check_params(o, 8, "keep=3", 0);
	check_params(o, 8, "keep=x", -EINVAL);
	check_params(o, 8, "lru=1", -EINVAL);

	/*
	 * layerlru, keep=1, a tier of 3: pages 1 (layer 0), 2 3 4 (layer 1).
	 *   1 2 3 m          other LRU: 2 3, kept: 1
	 *   4 m  evicts 2 (1 is kept although least recent): 3 4
	 *   3 h              4 3
	 *   2 m  evicts 4:   3 2
	 * 1 hit; left: 3 2, then 1.
	 */
	{
		static const uint64_t left[] = { 3, 2, 1 };
		static const uint32_t layer[] = { 0, 0, 1, 1, 1 };
		static const uint64_t tr[] = { 1, 2, 3, 4, 3, 2 };

		sim_open(&s, o, 3);
		for (size_t i = 0; i < N(tr); i++) {
			struct kvt_ref r = lref(tr[i], i, layer[tr[i]]);
			sim_ref_r(&s, &r);
		}
		CHECK_EQ(s.hits, 1);
		CHECK(slot_of(&s, 4) < 0);
		check_victims(&s, 3, left, 3);
		sim_close(&s);
	}
	/* The contract checks the built-ins go through. */
	{
		static const uint64_t fwd[] = { 1, 2, 3, 4, 5 };
		struct stress c = {
			.cap = 32, .nkeys = 200, .ops = t_scale(30000), .params = "keep=2",
			.ref = 3, .put = 5, .access = 6, .remove = 7,
			.skew = 1, .reinsert = 1, .same_again = 1, .same_one = 1,
			.positions = 1,
		};

		check_pinned_order(o, fwd, 0);
		check_all_pinned(o, 10000, 1, 0);
		stress_run(o, &c);
	}
}

static void test_refused(void)
{
	char err[8];
	char long_path[5000];

	refused(plugin("nonexistent", NULL), "cannot load");
	refused(plugin("nosym", NULL), "no symbol kvt_policy");
	refused(plugin("novictims", "keep=1"), "victims is NULL");
	refused(plugin("builtin", NULL), "'lru' is taken by a built-in policy");
	/* twin.so is the example again in another file: same name. */
	refused(plugin("twin", NULL), "'layerlru' is taken by another plug-in");
	/* Another ABI's table, or one without the ABI fields: the message
	 * names the plug-in's ABI, the library's version and its ABI. */
	char want[256];
	snprintf(want, sizeof(want), "was built for policy ABI %u (table of %zu bytes); libkvt %s "
		 "takes ABI %u (%zu bytes)", KVT_POLICY_ABI + 1, sizeof(struct kvt_policy_ops),
		 KVT_VERSION_STRING, KVT_POLICY_ABI, sizeof(struct kvt_policy_ops));
	refused(plugin("nextabi", NULL), want);
	snprintf(want, sizeof(want), "carries no policy ABI version (.abi, .size: built for a "
		 "libkvt before 0.1.0?); libkvt %s takes ABI %u", KVT_VERSION_STRING, KVT_POLICY_ABI);
	refused(plugin("noabi", NULL), want);
	refused("./", "cannot load");
	refused("nope:x=1", "no such policy");
	refused("", "no such policy");
	refused(":lru", "no such policy");
	refused(NULL, "no policy");
	memset(long_path, 'a', sizeof(long_path) - 1);
	long_path[0] = '/';
	long_path[sizeof(long_path) - 1] = '\0';
	refused(long_path, "too long");
	/* A short buffer gets a terminated prefix; none at all is fine. */
	CHECK(!kvt_policy_load("nope", err, sizeof(err)));
	CHECK_EQ(strlen(err), sizeof(err) - 1);
	CHECK(!kvt_policy_load("nope", NULL, 0));
	/* Still loadable after all that, and built-ins unchanged. */
	CHECK(kvt_policy_find(plugin("example", NULL)));
	CHECK(kvt_policy_find("lru") == &kvt_policy_lru);
}

/* The plug-in as the fast tier's policy of a live pager: every page read
 * back intact through demotions and promotions; a bad path fails the open. */
static void test_pager(void)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_pager *p;
	kvt_seq_t sq;
	const char *spec = plugin("example", "keep=1");

	if (strlen(spec) >= sizeof(cfg.tier[0].policy)) {
		t_skip_part("pager", "plug-in path too long for a config value");
		return;
	}
	t_config(&cfg, 4, 8, 64, 0);
	snprintf(cfg.tier[KVT_TIER_FAST].policy, sizeof(cfg.tier[0].policy), "%s", spec);
	p = t_open(&cfg, &dev);
	CHECK_EQ(kvt_seq_open(p, &sq), 0);
	t_append(p, sq, &cfg, 7, 0, 40);	/* 10 pages a layer, 40 in all > 8 */
	for (int round = 0; round < 3; round++)
		CHECK_EQ(t_verify_seq(p, sq, &cfg, 7, 0), 40);
	t_close(p, dev);

	t_config(&cfg, 4, 8, 64, 0);
	snprintf(cfg.tier[KVT_TIER_FAST].policy, sizeof(cfg.tier[0].policy), "%s",
		 plugin("nosym", NULL));
	CHECK(kvt_device_open("cpu", 0, &dev) == 0);
	CHECK(kvt_pager_open(&cfg, dev, &p) < 0);
	kvt_device_close(dev);
}

int main(int argc, char **argv)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	(void)argc;
	if (n <= 0) {
		n = (ssize_t)strlen(argv[0]);
		memcpy(exe, argv[0], (size_t)n);
	}
	exe[n] = '\0';
	/* $(BUILD)/tests/t_plugin -> $(BUILD)/plugins */
	snprintf(dir, sizeof(dir), "%s/../plugins", dirname(exe));
	if (realpath(dir, exe))
		snprintf(dir, sizeof(dir), "%s", exe);
	if (access(plugin("example", NULL), R_OK))
		SKIP("%s: not built (make tests builds it)", plugin("example", NULL));
	test_load();
	test_refused();
	test_pager();
	return 0;
}
