/* SPDX-License-Identifier: MIT */
/*
 * Live capacity: tier.fast.bytes and tier.host.bytes change while the
 * pager runs (kvt_pager_set), within what tier.X.max_bytes reserved at
 * open.
 *
 * First the refusals, each naming the problem and changing nothing: above
 * the reservation (-ERANGE), under 2 pages (-EINVAL), the NVMe tier and
 * max_bytes (-EPERM), not above the pinned tails (-EBUSY), and, on a
 * pager without NVMe, a host tier too small for the pages that have
 * nowhere else to go (-ENOSPC). Then a shrink with nothing running: the
 * frames go offline, what lived in them is demoted, the stats and the
 * metrics show capacity, online and reserved frames, watermarks follow.
 * Then, for host_in_place 0 and 1, two threads verify every byte of 4
 * sequences (with unsealed tails pinned in the fast tier) while a third
 * shrinks and grows both tiers at random; once more without NVMe, where
 * the memory of offline host frames goes back to the kernel (mincore
 * says so in the case at rest). Afterwards every shrink
 * completes, every page verifies, nothing is lost, the invariants hold.
 */
#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "common.h"
#include "pager/internal.h"

#define LAYERS	4u
#define TOKENS	46u		/* per layer: 11 full pages and a tail of 2 tokens */
#define NPG	12u		/* pages per layer */
#define NSEQ	4u
#define NREAD	2u
#define FAST	32u		/* frames at open */
#define FAST_MAX 48u
#define HOST	64u
#define HOST_MAX 96u

static struct kvt_config cfg;
static struct kvt_pager *P;
static kvt_seq_t seqs[NSEQ];
static int stop;			/* atomic */
static unsigned long passes;		/* atomic */

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

static char *pages_text(unsigned n)
{
	static char buf[8][32];
	static unsigned k;
	char *b = buf[k++ % 8];
	snprintf(b, 32, "%llu", (unsigned long long)n * kvt_pager_page_bytes(P));
	return b;
}

/* key = n pages must fail with want, say `says` and change nothing. */
static void refused(struct kvt_pager *p, const char *key, const char *value, int want,
		    const char *says)
{
	struct kvt_config before, after;
	struct kvt_stats s0, s1;
	char err[512] = "";

	kvt_pager_config(p, &before);
	CHECK_EQ(kvt_pager_stats(p, &s0), 0);
	int r = kvt_pager_set(p, key, value, err, sizeof(err));
	if (r != want || !err[0] || !strstr(err, says) || strchr(err, '\n')) {
		fprintf(stderr, "%s = %s: %d (%s), expected %d with \"%s\"\n", key, value, r, err,
			want, says);
		exit(1);
	}
	kvt_pager_config(p, &after);
	CHECK(memcmp(&before, &after, sizeof(before)) == 0);
	CHECK_EQ(kvt_pager_stats(p, &s1), 0);
	for (int ti = 0; ti < KVT_NTIERS; ti++)
		CHECK_EQ(s0.tier[ti].capacity, s1.tier[ti].capacity);
}

static void set_ok(struct kvt_pager *p, const char *key, const char *value)
{
	char err[512] = "";
	int r = kvt_pager_set(p, key, value, err, sizeof(err));
	if (r) {
		fprintf(stderr, "%s = %s: %s (%s)\n", key, value, strerror(-r), err);
		exit(1);
	}
}

/* Wait (at most 5 s times t_slow()) until every shrink is done: online == capacity. */
static void settle(struct kvt_pager *p)
{
	struct kvt_stats st;
	uint64_t end = now_ms() + 5000ull * t_slow();

	for (;;) {
		int pending = 0;
		CHECK_EQ(kvt_pager_stats(p, &st), 0);
		for (int ti = 0; ti < KVT_NTIERS; ti++) {
			CHECK(st.tier[ti].online >= st.tier[ti].capacity);
			pending |= st.tier[ti].online != st.tier[ti].capacity;
		}
		if (!pending)
			return;
		if (now_ms() > end) {
			for (int ti = 0; ti < KVT_NTIERS; ti++)
				fprintf(stderr, "%s: capacity %llu, online %llu, used %llu\n",
					kvt_tier_name(ti), (unsigned long long)st.tier[ti].capacity,
					(unsigned long long)st.tier[ti].online,
					(unsigned long long)st.tier[ti].used);
			fprintf(stderr, "a shrink did not complete within %u s\n", 5 * t_slow());
			exit(1);
		}
		usleep(2000);
	}
}

static void verify_all(void)
{
	for (unsigned i = 0; i < NSEQ; i++)
		CHECK_EQ(t_verify_seq(P, seqs[i], &cfg, 300 + i, 0), LAYERS * NPG);
}

/* Offline host frames whose memory went back to the kernel are not
 * resident (mincore); returns how many offline frames were looked at. */
static unsigned offline_not_resident(struct kvt_pager *p)
{
	struct tier *t = &p->t[KVT_TIER_HOST];
	long pg = sysconf(_SC_PAGESIZE);
	unsigned n = 0;

	pthread_mutex_lock(&p->lock);
	for (uint32_t f = 0; f < t->nframes; f++) {
		if (!(t->offmap[f / 64] >> (f % 64) & 1))
			continue;
		unsigned char vec[64];
		size_t pages = t->stride / (size_t)pg;
		CHECK(pages <= sizeof(vec));
		CHECK(mincore(t->base + (uint64_t)f * t->stride, t->stride, vec) == 0);
		for (size_t i = 0; i < pages; i++)
			if (vec[i] & 1) {
				fprintf(stderr, "offline host frame %u is still resident\n", f);
				exit(1);
			}
		n++;
	}
	pthread_mutex_unlock(&p->lock);
	return n;
}

/* A pager without NVMe: the host tier is the last one, so its sole
 * copies cannot leave it. Without NVMe nothing is registered with
 * io_uring, so the memory of offline host frames goes back to the kernel. */
static void no_nvme(void)
{
	struct kvt_config c2;
	struct kvt_device *dev;
	struct kvt_pager *p;
	struct kvt_stats st;
	kvt_seq_t s;
	char v[32];

	t_config(&c2, 1, 8, 16, 0);
	c2.host_hugepages = KVT_HUGE_OFF;	/* 4 KiB pages: released frame by frame */
	c2.host_mlock = KVT_OFF;		/* locked memory is kept */
	p = t_open(&c2, &dev);
	uint64_t pb = kvt_pager_page_bytes(p);
	CHECK_EQ(kvt_seq_open(p, &s), 0);
	t_append(p, s, &c2, 9, 0, 20 * c2.page_tokens);	/* 20 pages: 8 + 16 hold them */
	snprintf(v, sizeof(v), "%llu", (unsigned long long)(10 * pb));
	refused(p, "tier.host.bytes", v, -ENOSPC, "nowhere");
	snprintf(v, sizeof(v), "%llu", (unsigned long long)(17 * pb));
	refused(p, "tier.host.bytes", v, -ERANGE, "reserved at open");
	snprintf(v, sizeof(v), "%llu", (unsigned long long)(13 * pb));
	set_ok(p, "tier.host.bytes", v);
	settle(p);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK_EQ(st.tier[KVT_TIER_HOST].capacity, 13);
	CHECK(st.tier[KVT_TIER_HOST].used <= 13);
	CHECK_EQ(st.host_releases, 1);
	CHECK_EQ(offline_not_resident(p), 3);
	CHECK_EQ(t_verify_seq(p, s, &c2, 9, 0), 20);
	t_check_inv(p);
	snprintf(v, sizeof(v), "%llu", (unsigned long long)(16 * pb));
	set_ok(p, "tier.host.bytes", v);
	CHECK_EQ(t_verify_seq(p, s, &c2, 9, 0), 20);
	CHECK_EQ(kvt_seq_close(p, s), 0);
	t_close(p, dev);
}

/* Wait (at most 5 s times t_slow()) until the migration thread has nothing queued or in
 * flight: the last reads leave prefetches behind them. */
static void idle(struct kvt_pager *p)
{
	uint64_t end = now_ms() + 5000ull * t_slow();

	for (;;) {
		pthread_mutex_lock(&p->lock);
		int busy = p->demand.n || kvt_pf_queued(p) || p->jobs || p->moving;
		pthread_mutex_unlock(&p->lock);
		if (!busy)
			return;
		if (now_ms() > end) {
			fprintf(stderr, "the migration thread never went idle\n");
			exit(1);
		}
		usleep(1000);
	}
}

/* Shrink both tiers with nothing running; check what the stats and the
 * metrics say. */
static void still(void)
{
	static char doc[1 << 16];
	struct kvt_stats st;
	char line[160];
	uint64_t pb = kvt_pager_page_bytes(P);

	refused(P, "tier.fast.bytes", pages_text(FAST_MAX + 1), -ERANGE, "reserved at open");
	refused(P, "tier.host.bytes", pages_text(1), -EINVAL, "at least 2");
	refused(P, "tier.nvme.bytes", pages_text(100), -EPERM, "cannot change while");
	refused(P, "tier.host.max_bytes", pages_text(200), -EPERM, "cannot change while");
	refused(P, "tier.fast.bytes", "lots", -EINVAL, "tier.fast.bytes");
	/* 16 tails are pinned in the fast tier: 16 frames cannot hold them
	 * and leave room for anything else. */
	refused(P, "tier.fast.bytes", pages_text(NSEQ * LAYERS), -EBUSY, "pinned");

	verify_all();	/* fill the fast and host tiers */
	idle(P);
	set_ok(P, "tier.fast.bytes", pages_text(20));
	set_ok(P, "tier.host.bytes", pages_text(8));
	settle(P);
	CHECK_EQ(kvt_pager_stats(P, &st), 0);
	CHECK_EQ(st.tier[KVT_TIER_FAST].capacity, 20);
	CHECK_EQ(st.tier[KVT_TIER_FAST].online, 20);
	CHECK_EQ(st.tier[KVT_TIER_FAST].reserved, FAST_MAX);
	CHECK_EQ(st.tier[KVT_TIER_HOST].capacity, 8);
	CHECK_EQ(st.tier[KVT_TIER_HOST].reserved, HOST_MAX);
	CHECK(st.tier[KVT_TIER_FAST].used <= 20 && st.tier[KVT_TIER_HOST].used <= 8);
	CHECK(st.tier[KVT_TIER_FAST].shrinks >= 1 && st.tier[KVT_TIER_HOST].shrinks >= 1);
	CHECK_EQ(st.lost_pages, 0);
	pthread_mutex_lock(&P->lock);
	CHECK_EQ(P->t[KVT_TIER_FAST].wm_high, 20 * cfg.tier[KVT_TIER_FAST].wm_high / 100);
	CHECK_EQ(P->t[KVT_TIER_HOST].noff, HOST_MAX - 8);
	pthread_mutex_unlock(&P->lock);
	t_check_inv(P);
	int n = kvt_stats_prometheus(&st, doc, sizeof(doc));
	CHECK(n > 0);
	snprintf(line, sizeof(line), "\nkvt_tier_capacity_bytes{tier=\"host\"} %llu\n",
		 (unsigned long long)(8 * pb));
	CHECK(strstr(doc, line));
	snprintf(line, sizeof(line), "\nkvt_tier_reserved_bytes{tier=\"fast\"} %llu\n",
		 (unsigned long long)(FAST_MAX * pb));
	CHECK(strstr(doc, line));
	snprintf(line, sizeof(line), "\nkvt_tier_online_bytes{tier=\"fast\"} %llu\n",
		 (unsigned long long)(20 * pb));
	CHECK(strstr(doc, line));
	verify_all();
	/* Grow past the size given at open, up to the reservation. */
	set_ok(P, "tier.fast.bytes", pages_text(FAST_MAX));
	set_ok(P, "tier.host.bytes", pages_text(HOST_MAX));
	CHECK_EQ(kvt_pager_stats(P, &st), 0);
	CHECK_EQ(st.tier[KVT_TIER_FAST].capacity, FAST_MAX);
	CHECK_EQ(st.tier[KVT_TIER_FAST].online, FAST_MAX);
	CHECK_EQ(st.tier[KVT_TIER_HOST].online, HOST_MAX);
	verify_all();
	t_check_inv(P);
}

static void *reader(void *arg)
{
	unsigned id = (unsigned)(uintptr_t)arg;

	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		for (unsigned i = id; i < NSEQ; i += NREAD) {
			CHECK_EQ(t_verify_seq(P, seqs[i], &cfg, 300 + i, 0), LAYERS * NPG);
			kvt_pager_step(P);
			__atomic_add_fetch(&passes, 1, __ATOMIC_RELAXED);
		}
	}
	return NULL;
}

static unsigned long changes, refusals;
static unsigned host_lo, host_hi;	/* the changer's range for the host tier */

static void *changer(void *arg)
{
	uint64_t rng = now_ms() * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)&rng;
	uint64_t end = now_ms() + (uint64_t)(uintptr_t)arg;
	char err[512];

	if (!rng)
		rng = 1;
	fprintf(stderr, "changer seed %#llx\n", (unsigned long long)rng);
	while (now_ms() < end || changes < 20) {
		int ti = (int)rnd(&rng, 2);
		/* fast: above the 16 tails plus room for two readers' batches */
		unsigned n = ti == KVT_TIER_FAST ? 24 + rnd(&rng, FAST_MAX - 24 + 1)
						 : host_lo + rnd(&rng, host_hi - host_lo + 1);
		char key[64];
		struct kvt_stats st;

		snprintf(key, sizeof(key), "tier.%s.bytes", kvt_tier_name(ti));
		int r = kvt_pager_set(P, key, pages_text(n), err, sizeof(err));
		if (r == -EBUSY || r == -ENOSPC) {
			refusals++;
		} else if (r) {
			fprintf(stderr, "%s = %u pages: %s (%s)\n", key, n, strerror(-r), err);
			exit(1);
		} else {
			CHECK_EQ(kvt_pager_stats(P, &st), 0);
			CHECK_EQ(st.tier[ti].capacity, n);
			changes++;
		}
		if (rnd(&rng, 8) == 0)
			t_check_inv(P);
		usleep(1000 + rnd(&rng, 20000));
	}
	return NULL;
}

/* nvme: with an NVMe tier (host HOST of HOST_MAX frames), else without
 * one: the host tier then holds every sealed page (176 of them; 192 of
 * 208 frames at open, the changer keeps it at 184 or more), and the
 * memory of its offline frames goes back to the kernel. */
static void under_load(int in_place, int nvme)
{
	unsigned host = nvme ? HOST : 192, host_max = nvme ? HOST_MAX : 208;
	struct kvt_device *dev;
	struct kvt_stats st;
	pthread_t rd[NREAD], ch;

	t_config(&cfg, LAYERS, FAST, host, nvme ? 2000 : 0);
	cfg.tier[KVT_TIER_FAST].max_bytes = FAST_MAX * kvt_config_page_bytes(&cfg);
	cfg.tier[KVT_TIER_HOST].max_bytes = host_max * kvt_config_page_bytes(&cfg);
	cfg.host_in_place = in_place;
	if (!nvme)
		cfg.host_mlock = KVT_OFF;	/* so offline frames are released */
	host_lo = nvme ? 2 : 184;
	host_hi = host_max;
	P = t_open(&cfg, &dev);
	CHECK_EQ(kvt_pager_stats(P, &st), 0);
	CHECK_EQ(st.tier[KVT_TIER_FAST].capacity, FAST);
	CHECK_EQ(st.tier[KVT_TIER_FAST].online, FAST);
	CHECK_EQ(st.tier[KVT_TIER_FAST].reserved, FAST_MAX);
	CHECK_EQ(st.tier[KVT_TIER_HOST].reserved, host_max);
	/* Pages registered with io_uring or locked are never given back. */
	if (st.nvme_registered_buffers || st.host_mlocked)
		CHECK_EQ(st.host_releases, 0);
	for (unsigned i = 0; i < NSEQ; i++) {
		CHECK(kvt_seq_open(P, &seqs[i]) == 0);
		t_append(P, seqs[i], &cfg, 300 + i, 0, TOKENS);
	}
	if (!in_place && nvme)
		still();

	stop = 0;
	passes = changes = refusals = 0;
	for (unsigned i = 0; i < NREAD; i++)
		CHECK(pthread_create(&rd[i], NULL, reader, (void *)(uintptr_t)i) == 0);
	CHECK(pthread_create(&ch, NULL, changer, (void *)(uintptr_t)t_scale(2000)) == 0);
	pthread_join(ch, NULL);
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	for (unsigned i = 0; i < NREAD; i++)
		pthread_join(rd[i], NULL);
	CHECK(passes >= NSEQ);

	settle(P);
	verify_all();
	t_quiesce(P);
	t_check_inv(P);
	CHECK_EQ(kvt_pager_stats(P, &st), 0);
	CHECK_EQ(st.lost_pages, 0);
	CHECK_EQ(st.io_errors, 0);
	CHECK_EQ(st.csum_failures, 0);
	CHECK_EQ(st.pages, NSEQ * LAYERS * NPG);
	for (int ti = 0; ti < 2; ti++)
		CHECK(st.tier[ti].used <= st.tier[ti].capacity);
	CHECK(st.tier[KVT_TIER_FAST].shrinks + st.tier[KVT_TIER_HOST].shrinks > 0);
	CHECK(st.tier[KVT_TIER_FAST].grows + st.tier[KVT_TIER_HOST].grows > 0);
	printf("host_in_place=%d%s: %lu changes, %lu refused, %lu sequence passes\n", in_place,
	       nvme ? "" : ", no nvme", changes, refusals, passes);
	for (unsigned i = 0; i < NSEQ; i++)
		CHECK(kvt_seq_close(P, seqs[i]) == 0);
	t_close(P, dev);
}

int main(void)
{
	no_nvme();
	under_load(0, 1);
	under_load(1, 1);
	under_load(0, 0);
	return 0;
}
