/* SPDX-License-Identifier: MIT */
/*
 * The memory-pressure watcher, driven by a fake pressure file (psi.path):
 * with "some avg10=50.00" the host tier shrinks to tier.host.floor while
 * two threads verify every page; between half the threshold and the
 * threshold it holds; with avg10=0.00 it grows back to tier.host.bytes
 * (or to a smaller tier.host.bytes set meanwhile). Stats, JSON and metrics
 * show the reading, the limit, the shrinks and grows. A file that is
 * missing or does not parse is said once through the log callback and the
 * pager carries on. psi.threshold is live only where the watcher was
 * started. Every page verifies at the end, nothing is lost, the
 * invariants hold.
 */
#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>
#include "common.h"
#include "pager/internal.h"

#define LAYERS	4u
#define TOKENS	46u
#define NPG	12u
#define NSEQ	4u
#define NREAD	2u
#define HOST	64u
#define FLOOR	8u

static struct kvt_config cfg;
static struct kvt_pager *P;
static kvt_seq_t seqs[NSEQ];
static int stop;
static unsigned long passes;
static char fake[512];

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned psi_msgs;
static char last_msg[512];

static void logcb(void *arg, int level, const char *msg)
{
	(void)arg;
	pthread_mutex_lock(&log_lock);
	if (!strncmp(msg, "psi: ", 5)) {
		psi_msgs++;
		snprintf(last_msg, sizeof(last_msg), "%s", msg);
	}
	pthread_mutex_unlock(&log_lock);
	t_log(NULL, level, msg);
}

static unsigned msgs(void)
{
	pthread_mutex_lock(&log_lock);
	unsigned n = psi_msgs;
	pthread_mutex_unlock(&log_lock);
	return n;
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Replace the fake file at once (rename), as the kernel's file would
 * change between two reads. */
static void pressure(const char *text)
{
	char tmp[600];
	snprintf(tmp, sizeof(tmp), "%s.tmp", fake);
	FILE *f = fopen(tmp, "w");
	CHECK(f);
	fputs(text, f);
	CHECK(fclose(f) == 0);
	CHECK(rename(tmp, fake) == 0);
}

static void some(double avg10)
{
	char buf[256];
	snprintf(buf, sizeof(buf), "some avg10=%.2f avg60=%.2f avg300=1.00 total=123456\n"
		 "full avg10=%.2f avg60=0.00 avg300=0.00 total=4567\n", avg10, avg10 / 2,
		 avg10 / 4);
	pressure(buf);
}

static uint64_t host_capacity(void)
{
	struct kvt_stats st;
	CHECK_EQ(kvt_pager_stats(P, &st), 0);
	return st.tier[KVT_TIER_HOST].capacity;
}

/* Wait (at most 5 s times t_slow()) for the host tier's capacity to be n. */
static void wait_host(uint64_t n)
{
	uint64_t end = now_ms() + 5000ull * t_slow();
	while (host_capacity() != n) {
		if (now_ms() > end) {
			fprintf(stderr, "host capacity %llu, expected %llu within 5 s (x%u)\n",
				(unsigned long long)host_capacity(), (unsigned long long)n, t_slow());
			exit(1);
		}
		usleep(5000);
	}
}

static void *reader(void *arg)
{
	unsigned id = (unsigned)(uintptr_t)arg;

	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		for (unsigned i = id; i < NSEQ; i += NREAD) {
			CHECK_EQ(t_verify_seq(P, seqs[i], &cfg, 500 + i, 0), LAYERS * NPG);
			kvt_pager_step(P);
			__atomic_add_fetch(&passes, 1, __ATOMIC_RELAXED);
		}
	}
	return NULL;
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

static void has(const char *doc, const char *fmt, unsigned long long v)
{
	char line[256];
	snprintf(line, sizeof(line), fmt, v);
	if (!strstr(doc, line)) {
		fprintf(stderr, "no line \"%s\" in:\n%s\n", line, doc);
		exit(1);
	}
}

/* No such file: one message, and the pager works as without a watcher. */
static void missing(const char *dir)
{
	struct kvt_device *dev;
	struct kvt_stats st;
	kvt_seq_t s;
	char err[256];

	t_config(&cfg, 2, 8, 16, 64);
	cfg.log = logcb;
	snprintf(cfg.psi_path, sizeof(cfg.psi_path), "%s/no-such-psi.%d", dir, (int)getpid());
	cfg.psi_threshold = 10;
	cfg.psi_interval_ms = 10;
	P = t_open(&cfg, &dev);
	CHECK_EQ(kvt_seq_open(P, &s), 0);
	t_append(P, s, &cfg, 1, 0, 40);
	usleep(100000);
	CHECK_EQ(t_verify_seq(P, s, &cfg, 1, 0), 2 * 10);
	CHECK_EQ(msgs(), 1);
	CHECK(strstr(last_msg, "no-such-psi") && strstr(last_msg, "No such file") &&
	      strstr(last_msg, "will not shrink"));
	CHECK_EQ(kvt_pager_stats(P, &st), 0);
	CHECK_EQ(st.psi_watching, 1);
	CHECK_EQ(st.psi_ok, 0);
	CHECK_EQ(st.tier[KVT_TIER_HOST].capacity, 16);
	/* psi.path and psi.interval_ms take effect at open only. */
	CHECK_EQ(kvt_pager_set(P, "psi.path", "/tmp/x", err, sizeof(err)), -EPERM);
	CHECK_EQ(kvt_pager_set(P, "psi.interval_ms", "50", err, sizeof(err)), -EPERM);
	CHECK_EQ(kvt_pager_set(P, "psi.threshold", "101", err, sizeof(err)), -EINVAL);
	CHECK_EQ(kvt_seq_close(P, s), 0);
	t_close(P, dev);

	/* No watcher at open: psi.threshold cannot start one. */
	t_config(&cfg, 2, 8, 16, 64);
	P = t_open(&cfg, &dev);
	CHECK_EQ(kvt_pager_set(P, "psi.threshold", "5", err, sizeof(err)), -EPERM);
	CHECK(strstr(err, "not started at open"));
	CHECK_EQ(kvt_pager_stats(P, &st), 0);
	CHECK_EQ(st.psi_watching, 0);
	t_close(P, dev);
}

/* The kernel's own file, where there is one: read (with a trigger where
 * the kernel gives one), and nothing shrinks at a threshold of 99 %. */
static void real_psi(void)
{
	struct kvt_device *dev;
	struct kvt_stats st;

	if (access("/proc/pressure/memory", R_OK)) {
		t_skip_part("real-psi", "no /proc/pressure/memory");
		return;
	}
	t_config(&cfg, 2, 8, 16, 64);
	cfg.log = logcb;
	cfg.psi_threshold = 99;
	cfg.psi_interval_ms = 10;
	P = t_open(&cfg, &dev);
	uint64_t end = now_ms() + 2000ull * t_slow();
	do {
		usleep(10000);
		CHECK_EQ(kvt_pager_stats(P, &st), 0);
	} while (!st.psi_ok && now_ms() < end);
	CHECK_EQ(st.psi_ok, 1);
	CHECK(st.psi_some_avg10 >= 0 && st.psi_some_avg10 <= 100);
	if (st.psi_some_avg10 < 99)
		CHECK_EQ(st.tier[KVT_TIER_HOST].capacity, 16);
	t_close(P, dev);
}

int main(void)
{
	const char *tdir = getenv("KVT_TEST_DIR");
	const char *dir = tdir && *tdir ? tdir : "/tmp";
	static char doc[1 << 16];
	struct kvt_device *dev;
	struct kvt_stats st;
	pthread_t rd[NREAD];

	snprintf(fake, sizeof(fake), "%s/psi-memory.%d", dir, (int)getpid());
	missing(dir);
	real_psi();

	some(0);
	t_config(&cfg, LAYERS, 32, HOST, 2000);
	cfg.log = logcb;
	snprintf(cfg.psi_path, sizeof(cfg.psi_path), "%s", fake);
	cfg.psi_threshold = 10;
	cfg.psi_interval_ms = 20;
	cfg.host_floor = FLOOR * kvt_config_page_bytes(&cfg);
	P = t_open(&cfg, &dev);
	uint64_t pb = kvt_pager_page_bytes(P);
	pthread_mutex_lock(&log_lock);
	psi_msgs = 0;
	pthread_mutex_unlock(&log_lock);
	for (unsigned i = 0; i < NSEQ; i++) {
		CHECK(kvt_seq_open(P, &seqs[i]) == 0);
		t_append(P, seqs[i], &cfg, 500 + i, 0, TOKENS);
	}
	for (unsigned i = 0; i < NREAD; i++)
		CHECK(pthread_create(&rd[i], NULL, reader, (void *)(uintptr_t)i) == 0);
	usleep(100000);
	CHECK_EQ(host_capacity(), HOST);

	/* Pressure: down to the floor. */
	some(50);
	wait_host(FLOOR);
	CHECK_EQ(kvt_pager_stats(P, &st), 0);
	CHECK_EQ(st.psi_ok, 1);
	CHECK(st.psi_some_avg10 == 50.0);
	CHECK(st.psi_shrinks >= 1);
	CHECK_EQ(st.host_limit_bytes, FLOOR * pb);
	CHECK(kvt_stats_prometheus(&st, doc, sizeof(doc)) > 0);
	has(doc, "\nkvt_memory_pressure_some_avg10_ratio 0.5\n", 0);
	has(doc, "\nkvt_memory_pressure_watching 1\n", 0);
	has(doc, "\nkvt_memory_pressure_shrinks_total %llu\n", st.psi_shrinks);
	has(doc, "\nkvt_tier_capacity_bytes{tier=\"host\"} %llu\n", FLOOR * pb);
	has(doc, "\nkvt_host_limit_bytes %llu\n", FLOOR * pb);
	CHECK(kvt_stats_json(&st, doc, sizeof(doc)) > 0);
	has(doc, "\"psi\":{\"watching\":1,\"ok\":1,\"some_avg10\":50.00,\"shrinks\":%llu,",
	    st.psi_shrinks);

	/* The operator lowers the host tier meanwhile: that is where it
	 * comes back to. */
	char v[32];
	snprintf(v, sizeof(v), "%llu", (unsigned long long)(32 * pb));
	set_ok("tier.host.bytes", v);
	CHECK_EQ(host_capacity(), FLOOR);

	/* Between half the threshold and the threshold: it holds. */
	some(7);
	usleep(200000);
	CHECK_EQ(host_capacity(), FLOOR);

	/* No pressure: back to tier.host.bytes, then to a larger one. */
	uint64_t grows0 = st.psi_grows;
	some(0);
	wait_host(32);
	snprintf(v, sizeof(v), "%llu", (unsigned long long)(HOST * pb));
	set_ok("tier.host.bytes", v);
	wait_host(HOST);
	usleep(100000);
	CHECK_EQ(kvt_pager_stats(P, &st), 0);
	CHECK(st.psi_grows > grows0);
	CHECK_EQ(st.host_limit_bytes, 0);

	/* A threshold above the pressure: no shrink; a floor changed live. */
	set_ok("psi.threshold", "60");
	some(50);
	usleep(200000);
	CHECK_EQ(host_capacity(), HOST);
	snprintf(v, sizeof(v), "%llu", (unsigned long long)(16 * pb));
	set_ok("tier.host.floor", v);
	some(70);
	wait_host(16);

	/* A file that does not parse: said once; the limit goes away. */
	pressure("nonsense\n");
	wait_host(HOST);
	pressure("some avg10=abc\n");
	usleep(100000);
	CHECK_EQ(msgs(), 1);
	CHECK(strstr(last_msg, fake) && strstr(last_msg, "some avg10="));
	CHECK_EQ(kvt_pager_stats(P, &st), 0);
	CHECK_EQ(st.psi_ok, 0);

	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	for (unsigned i = 0; i < NREAD; i++)
		pthread_join(rd[i], NULL);
	CHECK(passes >= NSEQ);
	for (unsigned i = 0; i < NSEQ; i++)
		CHECK_EQ(t_verify_seq(P, seqs[i], &cfg, 500 + i, 0), LAYERS * NPG);
	t_quiesce(P);
	t_check_inv(P);
	CHECK_EQ(kvt_pager_stats(P, &st), 0);
	CHECK_EQ(st.lost_pages, 0);
	CHECK_EQ(st.io_errors, 0);
	CHECK_EQ(st.pages, NSEQ * LAYERS * NPG);
	printf("%lu sequence passes, %llu shrinks, %llu grows\n", passes,
	       (unsigned long long)st.psi_shrinks, (unsigned long long)st.psi_grows);
	for (unsigned i = 0; i < NSEQ; i++)
		CHECK(kvt_seq_close(P, seqs[i]) == 0);
	t_close(P, dev);
	unlink(fake);
	return 0;
}
