/* SPDX-License-Identifier: MIT */
#include "common.h"

#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "pager/internal.h"

void t_log(void *arg, int level, const char *msg)
{
	static const char *const lv[] = { "error", "warn", "info", "debug" };
	if (level <= KVT_LOG_WARN || getenv("KVT_TEST_VERBOSE"))
		fprintf(stderr, "[%s] %s: %s\n", arg ? (const char *)arg : "kvt",
			lv[level & 3], msg);
}

unsigned t_scale(unsigned n)
{
	const char *s = getenv("KVT_TEST_SCALE");
	unsigned d = s ? (unsigned)atoi(s) : 1;
	if (d < 1)
		d = 1;
	return n / d ? n / d : 1;
}

unsigned t_slow(void)
{
	static unsigned slow;
	const char *s = getenv("KVT_TEST_SLOW");
	double load;

	if (slow)
		return slow;
	if (s && atoi(s) >= 1)
		return slow = (unsigned)atoi(s);
#ifdef KVT_DEBUG
	slow = 4;
#else
	slow = 1;
#endif
	if (getloadavg(&load, 1) == 1 && load > sysconf(_SC_NPROCESSORS_ONLN))
		slow *= 2;
	return slow;
}

void t_skip_part(const char *part, const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "skip-part: %s: ", part);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void t_config(struct kvt_config *cfg, unsigned layers, unsigned fast_pages,
	      unsigned host_pages, unsigned nvme_pages)
{
	kvt_config_default(cfg);
	cfg->n_layers = layers;
	cfg->n_kv_heads = 2;
	cfg->head_dim = 64;
	cfg->page_tokens = 4;
	cfg->dtype_bytes = 4;
	uint64_t pb = kvt_config_page_bytes(cfg);
	cfg->tier[KVT_TIER_FAST].bytes = pb * fast_pages;
	cfg->tier[KVT_TIER_HOST].bytes = pb * host_pages;
	cfg->tier[KVT_TIER_NVME].bytes = pb * nvme_pages;
	cfg->host_prefault_threads = 1;
	/* The copy up into the fast tier, as the tests were written for;
	 * those of reading in place ask for it (t_open_tiers). */
	cfg->host_in_place = 0;
	cfg->io_depth = 16;
	const char *dir = getenv("KVT_TEST_DIR");
	snprintf(cfg->nvme_path, sizeof(cfg->nvme_path), "%s", dir ? dir : "");
	cfg->log = t_log;
	cfg->log_arg = NULL;
}

/* Backend plug-ins (the tests' emu, the CUDA one) live in the build
 * folder, above the tests' own: look there unless told otherwise. */
__attribute__((constructor)) static void plugin_dir(void)
{
	char exe[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 4);

	if (getenv("KVT_PLUGIN_DIR") || n <= 0)
		return;
	exe[n] = 0;
	char *slash = strrchr(exe, '/');
	if (!slash)
		return;
	strcpy(slash, "/..");
	setenv("KVT_PLUGIN_DIR", exe, 0);
}

struct kvt_device *t_dev;

struct kvt_pager *t_open_dev(const struct kvt_config *cfg, const char *name,
			     struct kvt_device **dev)
{
	struct kvt_pager *p;
	char why[512];
	int r = kvt_device_open_why(name, 0, dev, why, sizeof(why));
	if (r) {
		fprintf(stderr, "kvt_device_open(%s): %s: %s\n", name, strerror(-r), why);
		exit(1);
	}
	t_dev = *dev;
	r = kvt_pager_open(cfg, *dev, &p);
	if (r == -EOPNOTSUPP || r == -ENOSYS)
		SKIP("pager needs io_uring here: %s", strerror(-r));
	if (r) {
		fprintf(stderr, "kvt_pager_open: %s\n", strerror(-r));
		exit(1);
	}
	return p;
}

struct kvt_pager *t_open(const struct kvt_config *cfg, struct kvt_device **dev)
{
	return t_open_dev(cfg, "cpu", dev);
}

void t_close(struct kvt_pager *p, struct kvt_device *dev)
{
	CHECK_EQ(kvt_pager_close(p), 0);
	if (t_dev == dev)
		t_dev = NULL;
	kvt_device_close(dev);
}

static float val(uint32_t seed, unsigned layer, unsigned tok, unsigned kv, unsigned i)
{
	/* 32 bits that differ for every (seed, layer, tok, kv, i); kept a
	 * finite float by fixing the exponent bits. */
	uint32_t x = seed * 2654435761u ^ layer * 40503u ^ tok * 2246822519u ^ kv * 3266489917u ^ i;
	x ^= x >> 15; x *= 2246822519u; x ^= x >> 13;
	x = (x & 0x807fffffu) | 0x3f000000u;
	float f;
	memcpy(&f, &x, 4);
	return f;
}

void t_fill_tokens(const struct kvt_config *cfg, uint32_t seed, unsigned layer,
		   unsigned tok0, unsigned ntok, float *k, float *v)
{
	unsigned per = cfg->n_kv_heads * cfg->head_dim;
	for (unsigned t = 0; t < ntok; t++)
		for (unsigned i = 0; i < per; i++) {
			k[t * per + i] = val(seed, layer, tok0 + t, 0, i);
			v[t * per + i] = val(seed, layer, tok0 + t, 1, i);
		}
}

void t_append(struct kvt_pager *p, kvt_seq_t s, const struct kvt_config *cfg,
	      uint32_t seed, unsigned tok0, unsigned ntok)
{
	unsigned per = cfg->n_kv_heads * cfg->head_dim;
	float *k = malloc(sizeof(float) * per * ntok), *v = malloc(sizeof(float) * per * ntok);
	CHECK(k && v);
	for (unsigned l = 0; l < cfg->n_layers; l++) {
		t_fill_tokens(cfg, seed, l, tok0, ntok, k, v);
		int r = kvt_seq_append(p, s, l, k, v, ntok);

		t_progress();
		if (r) {
			fprintf(stderr, "kvt_seq_append(layer %u): %s\n", l, strerror(-r));
			exit(1);
		}
	}
	free(k);
	free(v);
}

int t_check_view(const struct kvt_config *cfg, uint32_t seed, unsigned layer,
		 const struct kvt_view *vw)
{
	unsigned per = cfg->n_kv_heads * cfg->head_dim;
	unsigned tok0 = vw->page * cfg->page_tokens;
	size_t bytes = (size_t)vw->ntok * per * sizeof(float);
	float *k = malloc(bytes + 1), *v = malloc(bytes + 1);
	int ret = 0;

	CHECK(k && v);
	t_progress();
	/* The view may be device memory: read it as a runtime would. */
	if (t_dev) {
		CHECK_EQ(kvt_device_read(t_dev, k, vw->k, bytes), 0);
		CHECK_EQ(kvt_device_read(t_dev, v, vw->v, bytes), 0);
	} else {
		memcpy(k, vw->k, bytes);
		memcpy(v, vw->v, bytes);
	}
	for (unsigned t = 0; t < vw->ntok && !ret; t++)
		for (unsigned i = 0; i < per; i++) {
			float ek = val(seed, layer, tok0 + t, 0, i);
			float ev = val(seed, layer, tok0 + t, 1, i);
			if (memcmp(&k[t * per + i], &ek, 4) || memcmp(&v[t * per + i], &ev, 4)) {
				fprintf(stderr, "layer %u page %u token %u elem %u differs (tier %u)\n",
					layer, vw->page, tok0 + t, i, vw->tier);
				ret = -1;
				break;
			}
		}
	free(k);
	free(v);
	return ret;
}

unsigned t_verify_seq(struct kvt_pager *p, kvt_seq_t s, const struct kvt_config *cfg,
		      uint32_t seed, int allow_lost)
{
	unsigned seen = 0;
	for (unsigned l = 0; l < cfg->n_layers; l++) {
		struct kvt_batch *b;
		struct kvt_view vw;
		int r = kvt_acquire(p, s, l, NULL, 0, &b);
		if (r) {
			fprintf(stderr, "kvt_acquire(layer %u): %s\n", l, strerror(-r));
			exit(1);
		}
		while ((r = kvt_batch_next(b, &vw)) != 0) {
			if (r == -EIO && allow_lost)
				continue;
			if (r < 0) {
				fprintf(stderr, "kvt_batch_next(layer %u page %u): %s\n",
					l, vw.page, strerror(-r));
				exit(1);
			}
			CHECK(t_check_view(cfg, seed, l, &vw) == 0);
			seen++;
		}
		kvt_batch_release(b);
	}
	return seen;
}

struct kvt_pager *t_open_tiers(struct kvt_config *cfg, struct kvt_device **dev,
			       unsigned layers, unsigned fast, unsigned host, unsigned nvme,
			       int in_place, int prefetch_depth)
{
	t_config(cfg, layers, fast, host, nvme);
	cfg->host_in_place = in_place;
	if (prefetch_depth >= 0)
		cfg->prefetch_depth = (unsigned)prefetch_depth;
	return t_open(cfg, dev);
}

void t_check_inv(struct kvt_pager *p)
{
	char err[256];

	t_progress();
	pthread_mutex_lock(&p->lock);
	int r = kvt_pager_check(p, err, sizeof(err));
	pthread_mutex_unlock(&p->lock);
	if (r) {
		fprintf(stderr, "%s%sinvariant: %s\n", t_sub, *t_sub ? ": " : "", err);
		exit(1);
	}
}

void t_quiesce_locked(struct kvt_pager *p)
{
	pthread_mutex_lock(&p->lock);
	for (;;) {
		int moving = 0;
		for (uint32_t s = 0; s < p->npages && !moving; s++)
			moving = p->pages[s].state == P_MOVING;
		if (!moving)
			break;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 10000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&p->done, &p->lock, &ts);
	}
}

void t_quiesce(struct kvt_pager *p)
{
	t_quiesce_locked(p);
	pthread_mutex_unlock(&p->lock);
}

void t_drain_to_nvme(struct kvt_pager *p)
{
	CHECK_EQ(kvt_pager_drain(p, KVT_TIER_FAST), 0);
	CHECK_EQ(kvt_pager_drain(p, KVT_TIER_HOST), 0);
}

void t_drain_pinned(struct kvt_pager *p, int tier)
{
	int r = kvt_pager_drain(p, tier);
	if (r && r != -EBUSY)
		fprintf(stderr, "%s: kvt_pager_drain(%s): %s\n", t_sub, kvt_tier_name(tier),
			strerror(-r));
	CHECK(r == 0 || r == -EBUSY);
}

const char *volatile t_sub = "";
static unsigned long progress, progress_seen;

void t_progress(void)
{
	__atomic_add_fetch(&progress, 1, __ATOMIC_RELAXED);
}

static void on_alarm(int sig)
{
	char msg[200];
	unsigned long now = __atomic_load_n(&progress, __ATOMIC_RELAXED);

	if (now != progress_seen) {	/* slow, not stuck: another period */
		progress_seen = now;
		alarm(6 * t_slow());
		return;
	}
	int n = snprintf(msg, sizeof(msg), "%s: stuck for %u s\n", t_sub, 6 * t_slow());
	(void)sig;
	if (write(2, msg, (size_t)n) < 0)
		_exit(1);
	_exit(1);
}

int t_run_case(const char *name, int width, void (*fn)(int), int arg)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		exit(1);
	}
	if (pid == 0) {
		t_sub = name;
		signal(SIGALRM, on_alarm);
		alarm(6 * t_slow());
		fn(arg);
		exit(0);
	}
	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	fprintf(stderr, "%-*s %s\n", width, name, rc == 0 ? "ok" : rc == T_SKIP ? "skip" : "FAIL");
	if (rc == T_SKIP) {
		char part[96];
		size_t i;

		for (i = 0; name[i] && i + 1 < sizeof(part); i++)
			part[i] = name[i] == ' ' || name[i] == ':' ? '-' : name[i];
		part[i] = 0;
		t_skip_part(part, "the case skipped (its reason above)");
	}
	return rc;
}

int t_run_cases(const struct t_case *cases, unsigned n, int in_place_too, int width)
{
	int fails = 0, skips = 0, runs = 0;

	for (int in_place = 0; in_place <= (in_place_too ? 1 : 0); in_place++)
		for (unsigned i = 0; i < n; i++) {
			char full[96];
			if (in_place_too)
				snprintf(full, sizeof(full), "%s(host_in_place=%d)", cases[i].name,
					 in_place);
			else
				snprintf(full, sizeof(full), "%s", cases[i].name);
			int rc = t_run_case(full, width, cases[i].fn, in_place);
			runs++;
			fails += rc != 0 && rc != T_SKIP;
			skips += rc == T_SKIP;
		}
	if (fails)
		return 1;
	return skips == runs ? T_SKIP : 0;
}

int32_t t_argmax(const float *v, size_t n)
{
	size_t best = 0;

	for (size_t i = 1; i < n; i++)
		if (v[i] > v[best])
			best = i;
	return (int32_t)best;
}

double t_rel_err(const float *a, const float *b, size_t n)
{
	double d = 0, m = 0;

	for (size_t i = 0; i < n; i++) {
		/* fmax drops a NaN: a NaN or an infinity anywhere is no match. */
		if (!isfinite(a[i]) || !isfinite(b[i]))
			return INFINITY;
		d = fmax(d, fabs((double)a[i] - b[i]));
		m = fmax(m, fabs((double)b[i]));
	}
	return m ? d / m : d;
}

const char *t_dir(void)
{
	const char *d = getenv("KVT_TEST_DIR");

	return d ? d : "/tmp";
}


int t_vshell(char *out, size_t outlen, const char *fmt, va_list ap)
{
	char cmd[8192];
	size_t n;
	FILE *f;
	int st;

	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	CHECK((f = popen(cmd, "r")));
	n = fread(out, 1, outlen - 1, f);
	out[n] = 0;
	st = pclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

int t_shell(char *out, size_t outlen, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = t_vshell(out, outlen, fmt, ap);
	va_end(ap);
	return r;
}
