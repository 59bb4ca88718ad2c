/* SPDX-License-Identifier: MIT */
/*
 * The replay engine's stable API (include/kvt/sim.h, what libkvt.so
 * exports for the Python package): a trace from keys and from a file,
 * kvt_sim_curve equal to one kvt_sim_replay per point, a caller's own
 * policy table called and counted as the built-in it wraps, several
 * tiers, and bad input refused with a message naming it.
 */
#include "common.h"

#include <errno.h>
#include <unistd.h>

#include <kvt/sim.h>
#include "pager/policy.h"

#define NKEYS	20000

/* A table of our own over the built-in fifo, counting the calls. */
static unsigned long n_insert, n_access, n_remove, n_victims;

static void c_insert(void *st, const struct kvt_ref *r, void *m)
{
	n_insert++;
	kvt_policy_fifo.on_insert(st, r, m);
}

static void c_access(void *st, const struct kvt_ref *r, void *m)
{
	n_access++;
	kvt_policy_fifo.on_access(st, r, m);
}

static void c_remove(void *st, uint64_t key, void *m)
{
	n_remove++;
	kvt_policy_fifo.on_remove(st, key, m);
}

static size_t c_victims(void *st, uint64_t *out, size_t want,
			int (*pinned)(void *, uint64_t), void *arg)
{
	n_victims++;
	return kvt_policy_fifo.victims(st, out, want, pinned, arg);
}

static struct kvt_policy_ops counted(void)
{
	struct kvt_policy_ops o = kvt_policy_fifo;

	o.name = "counted";
	o.on_insert = c_insert;
	o.on_access = c_access;
	o.on_remove = c_remove;
	o.victims = c_victims;
	return o;
}

/* Keys with a skew: a hot tenth of them half the time. */
static void make_keys(uint64_t *k, size_t n)
{
	uint64_t x = 88172645463325252ull;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		k[i] = (x & 1) ? (x >> 8) % 100 : 100 + (x >> 8) % 900;
	}
}

static void curve_equals_replays(struct kvt_sim_trace *t)
{
	static const char *const pol[] = { "lru", "fifo", "s3fifo", "belady" };
	static const uint64_t frames[] = { 10, 100, 400 };
	uint64_t hits[12], misses[12], refs = 0;
	char err[256] = "";

	CHECK_EQ(kvt_sim_curve(t, pol, 4, frames, 3, 2, hits, misses, &refs, err, sizeof(err)), 0);
	CHECK_EQ(refs, NKEYS);
	for (unsigned p = 0; p < 4; p++)
		for (unsigned s = 0; s < 3; s++) {
			struct kvt_sim_level lv = { .policy = pol[p], .frames = frames[s] };
			struct kvt_sim_counts c;
			CHECK_EQ(kvt_sim_replay(t, &lv, 1, 1, &c, err, sizeof(err)), 0);
			CHECK_EQ(c.refs, NKEYS);
			CHECK_EQ(c.hits, hits[p * 3 + s]);
			CHECK_EQ(c.misses, misses[p * 3 + s]);
			CHECK_EQ(c.hits + c.misses, NKEYS);
			CHECK_EQ(c.used, frames[s]);
		}
	/* Belady misses least, and more frames miss less. */
	for (unsigned s = 0; s < 3; s++)
		CHECK(misses[3 * 3 + s] < misses[0 * 3 + s]);
	CHECK(misses[0] > misses[1] && misses[1] > misses[2]);
}

static void own_table(struct kvt_sim_trace *t)
{
	struct kvt_policy_ops o = counted();
	struct kvt_sim_level mine[2] = { { .ops = &o, .frames = 50 }, { .policy = "lru", .frames = 300 } };
	struct kvt_sim_level ref[2] = { { .policy = "fifo", .frames = 50 }, { .policy = "lru", .frames = 300 } };
	struct kvt_sim_counts a[2], b[2];
	char err[256] = "";

	CHECK_EQ(kvt_sim_replay(t, mine, 2, 1, a, err, sizeof(err)), 0);
	CHECK_EQ(kvt_sim_replay(t, ref, 2, 1, b, err, sizeof(err)), 0);
	CHECK(!memcmp(a, b, sizeof(a)));
	CHECK(b[0].demotions > 0 && b[1].hits > 0);
	/* Our table was the one called: one insert per page that came in,
	 * one access per tier-0 hit (one step per record), one remove per
	 * page that left. */
	CHECK_EQ(n_insert, a[0].misses);
	CHECK_EQ(n_access, a[0].hits);
	CHECK_EQ(n_remove, n_insert - a[0].used);
	CHECK(n_victims > 0);
}

static void bad_input(struct kvt_sim_trace *t, const char *dir)
{
	struct kvt_policy_ops o = counted();
	struct kvt_sim_level lv = { .policy = "nosuch", .frames = 10 };
	struct kvt_sim_counts c[9];
	struct kvt_sim_trace *x = t;
	uint64_t f = 0, h, m, r;
	const char *lru = "lru", *nosuch = "nosuch";
	char err[256], path[512];

	snprintf(path, sizeof(path), "%s/absent.kvtt", dir);
	CHECK_EQ(kvt_sim_open(path, &x, err, sizeof(err)), -ENOENT);
	CHECK(x == NULL && strstr(err, "absent.kvtt"));

	CHECK_EQ(kvt_sim_replay(t, &lv, 1, 1, c, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "nosuch"));
	lv.policy = "lru";
	CHECK_EQ(kvt_sim_replay(t, &lv, 0, 1, c, err, sizeof(err)), -EINVAL);
	CHECK_EQ(kvt_sim_replay(t, &lv, 9, 1, c, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "9 tiers"));
	lv.frames = 0;
	CHECK_EQ(kvt_sim_replay(t, &lv, 1, 1, c, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "0 frames"));
	o.victims = NULL;
	lv = (struct kvt_sim_level){ .ops = &o, .frames = 10 };
	CHECK_EQ(kvt_sim_replay(t, &lv, 1, 1, c, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "counted") && strstr(err, "victims"));

	CHECK_EQ(kvt_sim_curve(t, &nosuch, 1, (uint64_t[]){ 10 }, 1, 1, &h, &m, &r, err,
			       sizeof(err)), -EINVAL);
	CHECK(strstr(err, "nosuch"));
	CHECK_EQ(kvt_sim_curve(t, &lru, 1, &f, 1, 1, &h, &m, &r, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "0 frames"));
}

/* A file: the trace's keys as oracleGeneral requests read back the same. */
static void from_file(const uint64_t *keys, struct kvt_sim_trace *t, const char *dir)
{
	struct kvt_sim_trace *f;
	struct kvt_sim_info a, b;
	char path[512], err[256] = "";
	FILE *fp;

	snprintf(path, sizeof(path), "%s/keys.oracle", dir);
	fp = fopen(path, "wb");
	CHECK(fp);
	for (uint32_t i = 0; i < NKEYS; i++) {
		uint32_t size = 4096;
		int64_t next = -1;	/* the importer does not trust it */
		CHECK(fwrite(&i, 4, 1, fp) == 1 && fwrite(&keys[i], 8, 1, fp) == 1 &&
		      fwrite(&size, 4, 1, fp) == 1 && fwrite(&next, 8, 1, fp) == 1);
	}
	CHECK_EQ(fclose(fp), 0);
	CHECK_EQ(kvt_sim_open(path, &f, err, sizeof(err)), 0);
	CHECK_EQ(kvt_sim_describe(f, &a), 0);
	CHECK_EQ(kvt_sim_describe(t, &b), 0);
	CHECK(!strcmp(a.format, "oracleGeneral") && !strcmp(b.format, "keys"));
	CHECK_EQ(a.refs, b.refs);
	CHECK_EQ(a.pages, b.pages);
	CHECK_EQ(b.source, UINT32_MAX);

	const char *pol = "belady";
	uint64_t fr = 64, h[2], m[2], r[2];
	CHECK_EQ(kvt_sim_curve(f, &pol, 1, &fr, 1, 1, &h[0], &m[0], &r[0], err, sizeof(err)), 0);
	CHECK_EQ(kvt_sim_curve(t, &pol, 1, &fr, 1, 1, &h[1], &m[1], &r[1], err, sizeof(err)), 0);
	CHECK_EQ(h[0], h[1]);
	CHECK_EQ(m[0], m[1]);
	kvt_sim_close(f);
	unlink(path);
}

int main(void)
{
	uint64_t *keys = malloc(NKEYS * sizeof(*keys));
	struct kvt_sim_trace *t;
	struct kvt_sim_info in;
	const char *dir = getenv("KVT_TEST_DIR");

	CHECK(keys);
	make_keys(keys, NKEYS);
	CHECK_EQ(kvt_sim_open_keys(keys, NKEYS, &t), 0);
	CHECK_EQ(kvt_sim_describe(t, &in), 0);
	CHECK_EQ(in.refs, NKEYS);
	CHECK_EQ(in.records, NKEYS);
	CHECK_EQ(in.pages, 1000);
	CHECK_EQ(in.news, 0);
	curve_equals_replays(t);
	own_table(t);
	bad_input(t, dir ? dir : "/tmp");
	from_file(keys, t, dir ? dir : "/tmp");
	kvt_sim_close(t);
	kvt_sim_close(NULL);
	free(keys);
	return 0;
}
