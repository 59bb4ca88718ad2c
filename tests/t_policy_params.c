/* SPDX-License-Identifier: MIT */
/*
 * A policy's refusal names what is wrong. For every built-in policy, bad
 * params make init fail with -EINVAL and one line that names the key and
 * the values allowed (not "Invalid argument"): the exact lines below. A
 * built-in policy missing from the table fails the test, so a new one
 * must say how it refuses. Then the same line reaches the caller:
 *  - kvt_pager_open logs "tier.host.policy = SPEC: LINE";
 *  - kvt_pager_set puts "tier.host.policy = SPEC: LINE" in its err and
 *    changes nothing (the old policy still serves);
 *  - the example plug-in of docs/policies.md words its refusal the same way.
 */
#include <errno.h>
#include <libgen.h>
#include <unistd.h>

#include "common.h"
#include "pager/policy.h"

struct bad {
	const char *policy, *params, *line;
};

static const struct bad bad[] = {
	{ "arc", "p=1", "takes no parameters (got 'p=1')" },
	{ "auto", "mode=3", "mode=3: must be 0..2 (0 decide, 1 always MRU, 2 always LRU)" },
	{ "auto", "sample=3", "sample=3: must be a power of two in 1..1048576" },
	{ "auto", "sample=0", "sample=0: must be 1..1048576 (a power of two)" },
	{ "belady", "x", "takes no parameters (got 'x')" },
	{ "clock", "bits=2", "takes no parameters (got 'bits=2')" },
	{ "fifo", "a=1", "takes no parameters (got 'a=1')" },
	{ "h2o", "decay=0", "decay=0: must be 1..100 (percent of a score kept per step)" },
	{ "h2o", "recent=x", "recent=x: must be 0..1048576 (pages)" },
	{ "h2o", "recent=4,recent=5", "recent given twice" },
	{ "kvscan", "mode=9", "mode=9: must be 0..2 (0 detect, 1 scan ranking, 2 SIEVE only)" },
	{ "lfu", "age=-1", "age=-1: must be 0..18446744073709551615 (accesses between halvings)" },
	{ "lfu", "age=18446744073709551616",
	  "age=18446744073709551616: must be 0..18446744073709551615 (accesses between halvings)" },
	{ "lifo", ",", "takes no parameters (got ',')" },
	{ "lirs", "hir=101", "hir=101: must be 0..100 (percent of the tier)" },
	{ "lru", "size=1", "takes no parameters (got 'size=1')" },
	{ "mru", "size=1", "takes no parameters (got 'size=1')" },
	{ "s3fifo", "small=150", "small=150: must be 1..99 (percent of the tier)" },
	{ "s3fifo", "small=10%", "small=10%: must be 1..99 (percent of the tier)" },
	{ "s3fifo", "big=1", "unknown key 'big' (known: small)" },
	{ "sieve", "hand=0", "takes no parameters (got 'hand=0')" },
	{ "slru", "protected=80%x", "protected=80%x: must be 0..100 (percent of the tier)" },
	{ "slru", "protected", "'protected': expected key=value" },
	{ "streaming", "window=2000000", "window=2000000: must be 0..1048576 (pages)" },
	{ "streaming", "sink=1,,window=2", "empty item in 'sink=1,,window=2'" },
	{ "streaming", "sink=", "sink=: must be 0..1048576 (pages)" },
	{ "2q", "kin=10,kout=20,", "empty item in 'kin=10,kout=20,'" },
	{ "2q", "kout=5,z=1", "unknown key 'z' (known: kin, kout)" },
};

static const struct kvt_policy_ops *must_find(const char *name)
{
	const struct kvt_policy_ops *o = kvt_policy_find(name);

	if (!o)
		fprintf(stderr, "no policy %s\n", name);
	CHECK(o);
	return o;
}

/* init(params) refuses with exactly line; a short buffer gets its start. */
static void check_bad(const struct bad *b)
{
	const struct kvt_policy_ops *o = must_find(b->policy);
	char why[256], shorter[8];
	void *st = NULL;

	memset(why, 'x', sizeof(why));
	CHECK_EQ(o->init(&st, b->params, 64, why, sizeof(why)), -EINVAL);
	if (strcmp(why, b->line)) {
		fprintf(stderr, "%s:%s: \"%s\", expected \"%s\"\n", b->policy, b->params, why,
			b->line);
		exit(1);
	}
	CHECK_EQ(o->init(&st, b->params, 64, shorter, sizeof(shorter)), -EINVAL);
	CHECK(!strncmp(shorter, b->line, sizeof(shorter) - 1) && !shorter[sizeof(shorter) - 1]);
	CHECK_EQ(o->init(&st, b->params, 64, NULL, 0), -EINVAL);
}

static char logged[1024];

static void keep_log(void *arg, int level, const char *msg)
{
	(void)arg;
	if (level == KVT_LOG_ERROR && !logged[0])
		snprintf(logged, sizeof(logged), "%s", msg);
}

int main(void)
{
	/* Every built-in policy has a refusal above, and each is exact. */
	for (const struct kvt_policy_ops *const *o = kvt_policies; *o; o++) {
		size_t i = 0;

		while (i < sizeof(bad) / sizeof(bad[0]) && strcmp(bad[i].policy, (*o)->name))
			i++;
		if (i == sizeof(bad) / sizeof(bad[0])) {
			fprintf(stderr, "policy %s: no bad parameter tested\n", (*o)->name);
			return 1;
		}
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		check_bad(&bad[i]);

	/* Good params still pass, and write nothing. */
	{
		char why[16] = "unchanged";
		void *st = NULL;
		const struct kvt_policy_ops *o = must_find("s3fifo");

		CHECK_EQ(o->init(&st, "small=99", 64, why, sizeof(why)), 0);
		CHECK(!strcmp(why, "unchanged"));
		o->destroy(st);
	}

	/* The example plug-in: $(BUILD)/tests/t_policy_params ->
	 * $(BUILD)/plugins/example.so (make tests builds it). */
	{
		char exe[4096], path[4200 + 32], err[256];
		ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		const struct kvt_policy_ops *o;
		void *st = NULL;

		CHECK(n > 0);
		exe[n] = 0;
		snprintf(path, sizeof(path), "%s/../plugins/example.so", dirname(exe));
		if (access(path, R_OK)) {
			fprintf(stderr, "%s: not built: the example is not checked\n", path);
		} else {
			o = kvt_policy_load(path, err, sizeof(err));
			if (!o)
				fprintf(stderr, "%s: %s\n", path, err);
			CHECK(o);
			CHECK_EQ(o->init(&st, "keep=2000", 8, err, sizeof(err)), -EINVAL);
			CHECK(!strcmp(err, "keep=2000: must be 0..1024 (layers)"));
		}
	}

	/* Through the pager: at open, and live. */
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_pager *p;
	char err[512];

	t_config(&cfg, 1, 8, 8, 0);
	cfg.tier[KVT_TIER_NVME].bytes = 0;
	snprintf(cfg.tier[KVT_TIER_HOST].policy, sizeof(cfg.tier[KVT_TIER_HOST].policy),
		 "s3fifo:small=150");
	cfg.log = keep_log;
	CHECK_EQ(kvt_device_open("cpu", 0, &dev), 0);
	CHECK_EQ(kvt_pager_open(&cfg, dev, &p), -EINVAL);
	fprintf(stderr, "open: %s\n", logged);
	CHECK(!strcmp(logged, "tier.host.policy = s3fifo:small=150: "
		      "small=150: must be 1..99 (percent of the tier)"));

	snprintf(cfg.tier[KVT_TIER_HOST].policy, sizeof(cfg.tier[KVT_TIER_HOST].policy), "lru");
	CHECK_EQ(kvt_pager_open(&cfg, dev, &p), 0);
	CHECK_EQ(kvt_pager_set(p, "tier.host.policy", "2q:kin=101", err, sizeof(err)), -EINVAL);
	fprintf(stderr, "set: %s\n", err);
	CHECK(!strcmp(err, "tier.host.policy = 2q:kin=101: kin=101: must be 0..100 "
		      "(percent of the tier)"));
	struct kvt_config now;
	kvt_pager_config(p, &now);
	CHECK(!strcmp(now.tier[KVT_TIER_HOST].policy, "lru"));
	CHECK_EQ(kvt_pager_set(p, "tier.host.policy", "2q:kin=10", err, sizeof(err)), 0);
	kvt_pager_config(p, &now);
	CHECK(!strcmp(now.tier[KVT_TIER_HOST].policy, "2q:kin=10"));
	CHECK_EQ(kvt_pager_close(p), 0);
	kvt_device_close(dev);
	return 0;
}
