/* SPDX-License-Identifier: MIT */
/*
 * Live changes through the control socket while sequences decode: two
 * threads acquire and verify every page of 4 sequences (tails pinned in
 * the fast tier) and step, as kvt-run's decode does, while a client on
 * the socket sends, in a random order, set tier.X.policy, set
 * access.prefetch_depth, set tier.fast.bytes / tier.host.bytes (shrinks
 * and grows), drain fast|host, stats, metrics and get. Every reply is
 * checked: "ok", or for a capacity the tier cannot take or a drain of
 * pinned pages one "error" line saying why; get returns what was last
 * set. A few of the commands go through the kvtctl binary when it is
 * built. Afterwards every shrink completes, every page verifies, nothing
 * is lost and the invariants hold.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "common.h"

#define LAYERS	4u
#define TOKENS	46u
#define NPG	12u
#define NSEQ	4u
#define NREAD	2u

static struct kvt_config cfg;
static struct kvt_pager *P;
static kvt_seq_t seqs[NSEQ];
static int stop;
static unsigned long passes;
static char sock_path[108];

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static unsigned rnd(uint64_t *s, unsigned n)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return (unsigned)((*s >> 11) % n);
}

static int dial(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	CHECK(fd >= 0);
	strcpy(sa.sun_path, sock_path);
	CHECK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	return fd;
}

static void send_all(int fd, const char *s, size_t n)
{
	while (n) {
		ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
		CHECK(w > 0);
		s += w;
		n -= (size_t)w;
	}
}

/* One request, its reply without the final "." line (malloc'd). A drain
 * waits for the pager: 10 s. */
static char *ask(int fd, const char *req)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	double end = now() + 10.0 * t_slow();

	CHECK(buf);
	send_all(fd, req, strlen(req));
	send_all(fd, "\n", 1);
	for (;;) {
		buf[len] = 0;
		if (len >= 2 && !strcmp(buf + len - 2, ".\n") && (len == 2 || buf[len - 3] == '\n'))
			break;
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int ms = (int)((end - now()) * 1000);
		if (ms <= 0 || poll(&pfd, 1, ms) != 1) {
			fprintf(stderr, "'%s': no reply within %u s; got: %.200s\n", req,
				10 * t_slow(), buf);
			exit(1);
		}
		if (cap - len < 4096) {
			buf = realloc(buf, cap *= 2);
			CHECK(buf);
		}
		ssize_t r = recv(fd, buf + len, cap - len - 1, 0);
		CHECK(r > 0);
		len += (size_t)r;
	}
	buf[len - 2] = 0;
	return buf;
}

/* "ok", or (when one of the reasons is allowed) one error line with it. */
static int ok_or(const char *req, char *r, const char *const *why)
{
	if (!strcmp(r, "ok\n"))
		return 1;
	for (; why && *why; why++)
		if (!strncmp(r, "error ", 6) && strstr(r, *why) &&
		    strchr(r, '\n') == r + strlen(r) - 1)
			return 0;
	fprintf(stderr, "'%s': %s", req, r);
	exit(1);
}

static void *reader(void *arg)
{
	unsigned id = (unsigned)(uintptr_t)arg;

	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		for (unsigned i = id; i < NSEQ; i += NREAD) {
			CHECK_EQ(t_verify_seq(P, seqs[i], &cfg, 700 + i, 0), LAYERS * NPG);
			kvt_pager_step(P);
			__atomic_add_fetch(&passes, 1, __ATOMIC_RELAXED);
		}
	}
	return NULL;
}

static const char *kvtctl_bin(void)
{
	static char bin[512];
	const char *build = getenv("BUILD");

	snprintf(bin, sizeof(bin), "%s/kvtctl", build && *build ? build : "build");
	return bin;
}

/* kvtctl ARGS: its exit status, its output in out. */
static int kvtctl(char *out, size_t len, const char *args)
{
	char cmd[1024];
	size_t n = 0;

	snprintf(cmd, sizeof(cmd), "%s -s '%s' %s 2>&1", kvtctl_bin(), sock_path, args);
	FILE *f = popen(cmd, "r");
	CHECK(f);
	while (n + 1 < len && fgets(out + n, (int)(len - n), f))
		n += strlen(out + n);
	out[n] = 0;
	int st = pclose(f);
	CHECK(WIFEXITED(st));
	return WEXITSTATUS(st);
}

int main(void)
{
	static const char *const policies[] = { "lru", "clock", "arc", "s3fifo", "2q", "sieve" };
	static const char *const cap_why[] = { "pinned", "nowhere", NULL };
	static const char *const drain_why[] = { "Device or resource busy", NULL };
	const char *tdir = getenv("KVT_TEST_DIR");
	struct kvt_control *ctl;
	struct kvt_device *dev;
	struct kvt_stats st;
	pthread_t rd[NREAD];
	char req[128], host_val[32] = "", out[8192];
	unsigned long sets = 0, refused = 0, drains = 0, busy = 0;

	t_config(&cfg, LAYERS, 32, 64, 2000);
	uint64_t pb = kvt_config_page_bytes(&cfg);
	cfg.tier[KVT_TIER_FAST].max_bytes = 48 * pb;
	cfg.tier[KVT_TIER_HOST].max_bytes = 96 * pb;
	P = t_open(&cfg, &dev);
	for (unsigned i = 0; i < NSEQ; i++) {
		CHECK(kvt_seq_open(P, &seqs[i]) == 0);
		t_append(P, seqs[i], &cfg, 700 + i, 0, TOKENS);
	}
	snprintf(sock_path, sizeof(sock_path), "%s/ctl-live.%d.sock", tdir && *tdir ? tdir : "/tmp",
		 (int)getpid());
	CHECK_EQ(kvt_control_start(P, sock_path, &ctl), 0);
	int c = dial();

	for (unsigned i = 0; i < NREAD; i++)
		CHECK(pthread_create(&rd[i], NULL, reader, (void *)(uintptr_t)i) == 0);

	uint64_t rng = (uint64_t)now() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
	fprintf(stderr, "seed %#llx\n", (unsigned long long)rng);
	double end = now() + t_scale(2000) / 1000.0;
	int used_kvtctl = 0;
	/* The commands the issue names, once each in order, then at random. */
	for (unsigned k = 0; now() < end || k < 40; k++) {
		unsigned what = k < 4 ? k : rnd(&rng, 9);
		char *r;

		switch (what) {
		case 0:
			r = ask(c, "set tier.host.policy=arc");
			ok_or("policy", r, NULL);
			break;
		case 1:
			r = ask(c, "set access.prefetch_depth=4");
			ok_or("prefetch", r, NULL);
			break;
		case 2:
		case 5: {
			unsigned n = 2 + rnd(&rng, 95);
			snprintf(req, sizeof(req), "set tier.host.bytes=%llu",
				 (unsigned long long)(n * pb));
			r = ask(c, req);
			if (ok_or(req, r, cap_why)) {
				snprintf(host_val, sizeof(host_val), "%llu",
					 (unsigned long long)(n * pb));
				sets++;
			} else {
				refused++;
			}
			break;
		}
		case 3:
		case 6: {
			const char *tier = what == 3 || rnd(&rng, 2) ? "host" : "fast";
			snprintf(req, sizeof(req), "drain %s", tier);
			r = ask(c, req);
			if (ok_or(req, r, drain_why))
				drains++;
			else
				busy++;
			break;
		}
		case 4: {
			unsigned n = 24 + rnd(&rng, 25);
			snprintf(req, sizeof(req), "set tier.fast.bytes=%llu",
				 (unsigned long long)(n * pb));
			r = ask(c, req);
			if (ok_or(req, r, cap_why))
				sets++;
			else
				refused++;
			break;
		}
		case 7:
			snprintf(req, sizeof(req), "set tier.%s.policy=%s",
				 kvt_tier_name((int)rnd(&rng, KVT_NTIERS)), policies[rnd(&rng, 6)]);
			r = ask(c, req);
			ok_or(req, r, NULL);
			break;
		default:
			r = ask(c, rnd(&rng, 2) ? "stats" : "metrics");
			CHECK(strstr(r, "online") || strstr(r, "kvt_tier_online_bytes{tier=\"host\"}"));
			free(r);
			snprintf(req, sizeof(req), "set access.prefetch_depth=%u", rnd(&rng, 5));
			r = ask(c, req);
			ok_or(req, r, NULL);
			break;
		}
		free(r);
		usleep(500);
		if (host_val[0] && rnd(&rng, 4) == 0) {
			/* get shows what was last set (the same size, written back
			 * with the largest exact suffix). */
			r = ask(c, "get tier.host.bytes");
			struct kvt_config now_cfg;
			kvt_pager_config(P, &now_cfg);
			CHECK_EQ(now_cfg.tier[KVT_TIER_HOST].bytes, strtoull(host_val, NULL, 10));
			CHECK(r[0] >= '0' && r[0] <= '9');
			free(r);
		}
		if (!used_kvtctl && k >= 10 && !access(kvtctl_bin(), X_OK)) {
			used_kvtctl = 1;
			CHECK_EQ(kvtctl(out, sizeof(out), "set tier.host.policy=clock"), 0);
			CHECK(!strcmp(out, "ok\n"));
			CHECK_EQ(kvtctl(out, sizeof(out), "get tier.host.policy"), 0);
			CHECK(!strcmp(out, "clock\n"));
			int rc = kvtctl(out, sizeof(out), "drain host");
			CHECK(rc == 0 || (rc == 1 && strstr(out, "busy")));
			snprintf(req, sizeof(req), "set tier.fast.bytes=%llu",
				 (unsigned long long)(40 * pb));
			rc = kvtctl(out, sizeof(out), req);
			CHECK(rc == 0 || (rc == 1 && strstr(out, "pinned")));
		}
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	for (unsigned i = 0; i < NREAD; i++)
		pthread_join(rd[i], NULL);
	CHECK(passes >= NSEQ);

	/* Back to the sizes at open; every shrink completes. The readers'
	 * last prefetches may still be landing: those pages are MOVING, and
	 * a shrink refuses to count on their frames. */
	t_quiesce(P);
	snprintf(req, sizeof(req), "set tier.fast.bytes=%llu", (unsigned long long)(32 * pb));
	char *r = ask(c, req);
	ok_or(req, r, NULL);
	free(r);
	snprintf(req, sizeof(req), "set tier.host.bytes=%llu", (unsigned long long)(64 * pb));
	r = ask(c, req);
	ok_or(req, r, NULL);
	free(r);
	double deadline = now() + 5.0 * t_slow();
	for (;;) {
		CHECK_EQ(kvt_pager_stats(P, &st), 0);
		if (st.tier[0].online == 32 && st.tier[1].online == 64)
			break;
		CHECK(now() < deadline);
		usleep(2000);
	}
	r = ask(c, "drain host");
	ok_or("drain host", r, NULL);	/* nothing is pinned now */
	drains++;
	free(r);
	for (unsigned i = 0; i < NSEQ; i++)
		CHECK_EQ(t_verify_seq(P, seqs[i], &cfg, 700 + i, 0), LAYERS * NPG);
	t_check_inv(P);
	CHECK_EQ(kvt_pager_stats(P, &st), 0);
	CHECK_EQ(st.lost_pages, 0);
	CHECK_EQ(st.io_errors, 0);
	CHECK_EQ(st.csum_failures, 0);
	CHECK_EQ(st.pages, NSEQ * LAYERS * NPG);
	CHECK(sets > 0 && drains > 0);
	printf("%lu capacity changes (%lu refused), %lu drains (%lu busy), %lu passes%s\n", sets,
	       refused, drains, busy, passes, used_kvtctl ? ", kvtctl too" : "");
	close(c);
	kvt_control_stop(ctl);
	for (unsigned i = 0; i < NSEQ; i++)
		CHECK(kvt_seq_close(P, seqs[i]) == 0);
	t_close(P, dev);
	return 0;
}
