/* SPDX-License-Identifier: MIT */
/*
 * Many threads and sequences at once, on tiny tiers (fast 40 pages, host
 * 40, nvme 2000): 6 workers, each owning 2 sequences, append, acquire
 * (checking every byte and the page's token count), step, fork their own
 * sequences (at page boundaries and inside pages; the child is checked,
 * extended and closed), park and resume, close and reopen, until every
 * kind of operation has run at least MIN_OPS times and the drains
 * MIN_DRAINS times (about 1.5 s on an idle machine; the same work, only
 * slower, under the sanitizers and on a busy machine: no wall-clock
 * deadline, no scaling down); meanwhile one more thread reads the stats
 * (and their JSON) and drains the host tier (and now and then the fast
 * tier). Afterwards:
 * nothing lost, no I/O error, the invariant check passes, and closing
 * everything leaves every tier empty.
 *
 * Pins are budgeted to fit the fast tier: per worker at most 2 partial
 * tails of its unaligned sequence, 2 of a fork child and 2 pages of a
 * batch (its other sequence is appended in whole pages), 36 of 40 frames
 * for 6 workers. Run it under TSan: it is the race detector's test.
 */
#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>
#include "common.h"
#include "pager/internal.h"

#define LAYERS	 2u
#define MAXTOK	 48u		/* tokens per layer before a sequence is recycled */
#define NTHREADS 6u
#define MIN_OPS	 200ul		/* of each kind, all workers together */
#define MIN_DRAINS 60ul

static struct kvt_config cfg;
static struct kvt_pager *P;
static int stop;		/* atomic */
static uint32_t next_seed = 1000;	/* atomic */

enum { OP_APPEND, OP_READ, OP_STEP, OP_FORK, OP_PARK, OP_REOPEN, OP_BUSY, NOPS };
static const char *const op_name[NOPS] = { "append", "read", "step", "fork", "park/resume",
					   "reopen", "append-while-parked" };
static unsigned long op_count[NOPS];	/* atomic */

struct sq {
	kvt_seq_t h;
	uint32_t seed;
	unsigned ntok;		/* tokens in every layer */
	int parked;
	int aligned;		/* appended in whole pages only (no pinned tail) */
};

struct worker {
	pthread_t th;
	unsigned id;
	uint64_t rng;
	struct sq sq[2];
};

static unsigned rnd(struct worker *w, unsigned n)
{
	w->rng ^= w->rng << 13;
	w->rng ^= w->rng >> 7;
	w->rng ^= w->rng << 17;
	return (unsigned)((w->rng >> 11) % n);
}

static void count(int op)
{
	__atomic_add_fetch(&op_count[op], 1, __ATOMIC_RELAXED);
}

static int stopped(void)
{
	return __atomic_load_n(&stop, __ATOMIC_ACQUIRE);
}

static void sq_open(struct sq *q, int aligned)
{
	CHECK_EQ(kvt_seq_open(P, &q->h), 0);
	q->seed = __atomic_add_fetch(&next_seed, 1, __ATOMIC_RELAXED);
	q->ntok = 0;
	q->parked = 0;
	q->aligned = aligned;
}

/* Acquire up to two pages of a layer of h (tokens ntok, contents seed)
 * and check them. */
static void read_some(struct worker *w, kvt_seq_t h, uint32_t seed, unsigned ntok)
{
	unsigned pt = cfg.page_tokens, npg = (ntok + pt - 1) / pt;
	if (!npg)
		return;
	unsigned layer = rnd(w, LAYERS), n = 1 + rnd(w, 2);
	uint32_t idx[2] = { rnd(w, npg), rnd(w, npg) };
	if (rnd(w, 4) == 0)
		idx[0] = npg - 1;	/* the tail */
	struct kvt_batch *b;
	struct kvt_view v;
	unsigned got = 0;
	int r;

	r = kvt_acquire(P, h, layer, idx, n, &b);
	if (r) {
		fprintf(stderr, "worker %u: kvt_acquire: %s\n", w->id, strerror(-r));
		exit(1);
	}
	while ((r = kvt_batch_next(b, &v)) != 0) {
		if (r != 1) {
			fprintf(stderr, "worker %u: kvt_batch_next(layer %u page %u): %s\n",
				w->id, layer, v.page, strerror(-r));
			exit(1);
		}
		unsigned want = ntok - v.page * pt < pt ? ntok - v.page * pt : pt;
		CHECK(v.page < npg);
		CHECK_EQ(v.ntok, want);
		CHECK(v.tier == KVT_TIER_FAST);
		CHECK(t_check_view(&cfg, seed, layer, &v) == 0);
		got++;
	}
	CHECK_EQ(got, n);
	kvt_batch_release(b);
}

static void do_append(struct worker *w, struct sq *q)
{
	unsigned pt = cfg.page_tokens;
	unsigned add = q->aligned ? pt * (1 + rnd(w, 2)) : 1 + rnd(w, 2 * pt - 1);

	if (q->parked)
		return;
	if (q->ntok + add > MAXTOK) {
		CHECK_EQ(kvt_seq_close(P, q->h), 0);
		sq_open(q, q->aligned);
		count(OP_REOPEN);
	}
	t_append(P, q->h, &cfg, q->seed, q->ntok, add);
	q->ntok += add;
	count(OP_APPEND);
}

/* Fork at a page boundary, or (unaligned parent) anywhere; check the
 * child, extend it with the parent's contents, check again, close it. */
static void do_fork(struct worker *w, struct sq *q)
{
	unsigned pt = cfg.page_tokens;
	unsigned at = q->ntok ? rnd(w, q->ntok + 1) : 0;
	kvt_seq_t c;

	if (q->aligned)
		at -= at % pt;
	int r = kvt_seq_fork(P, q->h, at, &c);
	if (r) {
		fprintf(stderr, "worker %u: kvt_seq_fork(%u of %u): %s\n", w->id, at, q->ntok,
			strerror(-r));
		exit(1);
	}
	for (unsigned l = 0; l < LAYERS; l++) {
		CHECK_EQ(kvt_seq_tokens(P, c, l), at);
		CHECK_EQ(kvt_seq_pages(P, c, l), (at + pt - 1) / pt);
	}
	read_some(w, c, q->seed, at);
	/* Whole pages only when the fork is page-aligned: no new tail pins. */
	unsigned add = at % pt ? pt - at % pt : pt;
	if (at + add <= MAXTOK) {
		t_append(P, c, &cfg, q->seed, at, add);
		read_some(w, c, q->seed, at + add);
	}
	read_some(w, q->h, q->seed, q->ntok);	/* the parent is untouched */
	CHECK_EQ(kvt_seq_close(P, c), 0);
	count(OP_FORK);
}

static void do_park(struct worker *w, struct sq *q)
{
	if (!q->parked) {
		CHECK_EQ(kvt_seq_park(P, q->h), 0);
		q->parked = 1;
		if (rnd(w, 2)) {
			float k[256], v[256];	/* one token: 2 heads x 64 */
			t_fill_tokens(&cfg, q->seed, 0, q->ntok, 1, k, v);
			CHECK_EQ(kvt_seq_append(P, q->h, 0, k, v, 1), -EBUSY);
			count(OP_BUSY);
		}
	} else {
		CHECK_EQ(kvt_seq_resume(P, q->h), 0);
		q->parked = 0;
	}
	count(OP_PARK);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	sq_open(&w->sq[0], 1);
	sq_open(&w->sq[1], 0);
	while (!stopped()) {
		struct sq *q = &w->sq[rnd(w, 2)];
		unsigned op = rnd(w, 100);
		if (op < 30) {
			do_append(w, q);
		} else if (op < 70) {
			read_some(w, q->h, q->seed, q->ntok);
			count(OP_READ);
		} else if (op < 78) {
			kvt_pager_step(P);
			count(OP_STEP);
		} else if (op < 86) {
			do_fork(w, q);
		} else if (op < 96) {
			do_park(w, q);
		} else {
			CHECK_EQ(kvt_seq_close(P, q->h), 0);
			sq_open(q, q->aligned);
			count(OP_REOPEN);
		}
	}
	for (int i = 0; i < 2; i++) {
		/* A last full check of what the sequence holds. */
		for (unsigned pg = 0; pg * cfg.page_tokens < w->sq[i].ntok; pg++) {
			for (unsigned l = 0; l < LAYERS; l++) {
				struct kvt_batch *b;
				struct kvt_view v;
				CHECK_EQ(kvt_acquire(P, w->sq[i].h, l, &pg, 1, &b), 0);
				CHECK_EQ(kvt_batch_next(b, &v), 1);
				CHECK(t_check_view(&cfg, w->sq[i].seed, l, &v) == 0);
				CHECK_EQ(kvt_batch_next(b, &v), 0);
				kvt_batch_release(b);
			}
		}
		CHECK_EQ(kvt_seq_close(P, w->sq[i].h), 0);
	}
	return NULL;
}

static void *admin_main(void *arg)
{
	static char json[1 << 15];
	unsigned long *drains = arg;
	struct kvt_stats st;
	unsigned i = 0;

	while (!stopped()) {
		CHECK_EQ(kvt_pager_stats(P, &st), 0);
		CHECK_EQ(st.lost_pages, 0);
		CHECK(st.tier[KVT_TIER_FAST].used <= st.tier[KVT_TIER_FAST].capacity);
		int n = kvt_stats_json(&st, json, sizeof(json));
		CHECK(n > 0 && json[0] == '{' && json[n - 1] == '}');
		if (++i % 4 == 0) {
			int r = kvt_pager_drain(P, i % 16 == 0 ? KVT_TIER_FAST : KVT_TIER_HOST);
			if (r && r != -EBUSY) {
				fprintf(stderr, "kvt_pager_drain: %s\n", strerror(-r));
				exit(1);
			}
			__atomic_add_fetch(drains, 1, __ATOMIC_RELAXED);
		}
		usleep(5000);
	}
	return NULL;
}

int main(void)
{
	struct kvt_device *dev;
	struct kvt_stats st;
	struct worker w[NTHREADS];
	pthread_t admin;
	unsigned long drains = 0;
	char err[256];

	t_config(&cfg, LAYERS, 40, 40, 2000);
	P = t_open(&cfg, &dev);
	for (unsigned i = 0; i < NTHREADS; i++) {
		w[i] = (struct worker){ .id = i, .rng = 0x9e3779b97f4a7c15ull * (i + 1) };
		CHECK_EQ(pthread_create(&w[i].th, NULL, worker_main, &w[i]), 0);
	}
	CHECK_EQ(pthread_create(&admin, NULL, admin_main, &drains), 0);

	/* Until every kind of operation has had its share. */
	for (;;) {
		int done = __atomic_load_n(&drains, __ATOMIC_RELAXED) >= MIN_DRAINS;

		for (int op = 0; op < NOPS && done; op++)
			done = __atomic_load_n(&op_count[op], __ATOMIC_RELAXED) >= MIN_OPS;
		if (done)
			break;
		usleep(10000);
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	for (unsigned i = 0; i < NTHREADS; i++)
		CHECK_EQ(pthread_join(w[i].th, NULL), 0);
	CHECK_EQ(pthread_join(admin, NULL), 0);

	for (int op = 0; op < NOPS; op++)
		fprintf(stderr, "%s %lu, ", op_name[op], op_count[op]);
	fprintf(stderr, "drains %lu\n", drains);
	for (int op = 0; op < NOPS; op++)
		CHECK(op_count[op] >= MIN_OPS);

	/* Let pages closed while in flight land (and be freed); a page that
	 * never does is a hang, which the runner's timeout reports. */
	for (;;) {
		CHECK_EQ(kvt_pager_stats(P, &st), 0);
		if (!st.pages)
			break;
		usleep(1000);
	}
	pthread_mutex_lock(&P->lock);
	int r = kvt_pager_check(P, err, sizeof(err));
	pthread_mutex_unlock(&P->lock);
	if (r) {
		fprintf(stderr, "invariant: %s\n", err);
		return 1;
	}
	fprintf(stderr, "nvme: in %llu out %llu pages; fast promotions %llu\n",
		(unsigned long long)(st.tier[KVT_TIER_NVME].bytes_in / kvt_pager_page_bytes(P)),
		(unsigned long long)(st.tier[KVT_TIER_NVME].bytes_out / kvt_pager_page_bytes(P)),
		(unsigned long long)st.tier[KVT_TIER_FAST].promotions);
	CHECK_EQ(st.lost_pages, 0);
	CHECK_EQ(st.io_errors, 0);
	CHECK_EQ(st.csum_failures, 0);
	CHECK_EQ(st.seqs, 0);
	CHECK_EQ(st.pages, 0);
	for (int t = 0; t < KVT_NTIERS; t++)
		CHECK_EQ(st.tier[t].used, 0);
	CHECK(st.tier[KVT_TIER_NVME].bytes_in > 0);
	t_close(P, dev);
	return 0;
}
