/* SPDX-License-Identifier: MIT */
/*
 * kvt-demo: the pager under a synthetic long-context decode. A context
 * whose KV cache is several times the fast tier is prefilled, then every
 * decode step appends one token per layer and runs full attention (one
 * query per KV head, online softmax) over every page of every layer,
 * taking the pages in the order the pager hands them over. Each page's
 * contents are checked against what was written. Ends with the tier table.
 *
 * `make run` runs it on its embedded defaults; `kvt-demo --help` for more.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <kvt/pager.h>
#include "tools/cli.h"

typedef _Float16 half;

/* While the pager opens, its first error is held back to end the "cannot
 * open the pager" line: the one line that says why. */
static int hold_error;
static char held_error[512];

static void log_cb(void *arg, int level, const char *msg)
{
	(void)arg;
	if (hold_error && level == KVT_LOG_ERROR && !held_error[0])
		snprintf(held_error, sizeof(held_error), "%s", msg);
	else if (level <= KVT_LOG_WARN)
		fprintf(stderr, "kvt-demo: %s\n", msg);
}

/* The value written at element i of token t of layer l (K or V): small
 * numbers exactly representable in f16, so the check is exact. */
static inline half val(unsigned l, unsigned t, unsigned i, int v)
{
	return (half)((float)((l * 31u + t * 7u + i * 3u + (unsigned)v * 11u) % 64u) / 64.0f - 0.5f);
}

/* Online softmax over one page's tokens, per KV head: the partial state
 * (running max, sum, weighted V) carries from page to page, so the order
 * pages arrive in does not matter. */
#define ATTEND_BODY \
	for (unsigned j = 0; j < ntok; j++) \
		for (unsigned h = 0; h < H; h++) { \
			const half *kr = pk + (size_t)j * H * D + h * D; \
			const half *vr = pv + (size_t)j * H * D + h * D; \
			const float *qh = q + h * D; \
			float *ah = acc + h * D; \
			float dot = 0; \
			for (unsigned i = 0; i < D; i++) \
				dot += qh[i] * (float)kr[i]; \
			dot /= sqrtf((float)D); \
			float m = dot > mx[h] ? dot : mx[h]; \
			float scale = expf(mx[h] - m), w = expf(dot - m); \
			sum[h] = sum[h] * scale + w; \
			for (unsigned i = 0; i < D; i++) \
				ah[i] = ah[i] * scale + w * (float)vr[i]; \
			mx[h] = m; \
		}

__attribute__((target("avx2,fma,f16c"), optimize("O3", "fast-math")))
static void attend_f16c(const half *pk, const half *pv, unsigned ntok, unsigned H, unsigned D,
			const float *q, float *acc, float *mx, float *sum)
{
	ATTEND_BODY
}

static void attend_plain(const half *pk, const half *pv, unsigned ntok, unsigned H, unsigned D,
			 const float *q, float *acc, float *mx, float *sum)
{
	ATTEND_BODY
}

static void attend(const half *pk, const half *pv, unsigned ntok, unsigned H, unsigned D,
		   const float *q, float *acc, float *mx, float *sum)
{
	static int fast = -1;
	if (fast < 0)
		fast = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
		       __builtin_cpu_supports("f16c");
	(fast ? attend_f16c : attend_plain)(pk, pv, ntok, H, D, q, acc, mx, sum);
}

static void set_or_die(struct kvt_config *cfg, const char *key, const char *val)
{
	char err[512];

	if (kvt_config_set(cfg, key, val, err, sizeof(err))) {
		fprintf(stderr, "kvt-demo: %s\n", err);
		exit(2);
	}
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvt-demo [options]\n"
		"  -c, --config FILE   INI file (docs/config.md); flags below override it\n"
		"  -t, --context N     tokens of context to prefill (default 16384)\n"
		"  -s, --steps N       decode steps (default 12)\n"
		"  -l, --layers N      layers (default 8)\n"
		"      --fast SIZE     fast tier (default 64M: 1/8 of the KV)\n"
		"      --host SIZE     host tier (default 128M)\n"
		"      --nvme SIZE     NVMe tier (default 1G)\n"
		"      --dir PATH      where the NVMe-tier file goes (default $TMPDIR or /tmp)\n"
		"  -p, --policy NAME   policy of every tier (default mru)\n"
		"      --prefetch N    layers prefetched ahead (default 2)\n"
		"      --device NAME   cpu, cuda or auto: where the fast tier is (default auto)\n"
		"      --json          print the final stats as JSON\n"
		"      --version       print the version and the build's features, and exit\n");
}

int main(int argc, char **argv)
{
	struct kvt_config cfg;
	char err[512];
	unsigned context = 16384, steps = 12;
	int json = 0, r;
	const char *policy = "mru";
	static const struct option opts[] = {
		{ "config", required_argument, 0, 'c' }, { "context", required_argument, 0, 't' },
		{ "steps", required_argument, 0, 's' }, { "layers", required_argument, 0, 'l' },
		{ "fast", required_argument, 0, 'F' }, { "host", required_argument, 0, 'H' },
		{ "nvme", required_argument, 0, 'N' }, { "dir", required_argument, 0, 'd' },
		{ "policy", required_argument, 0, 'p' }, { "prefetch", required_argument, 0, 'P' },
		{ "json", no_argument, 0, 'j' }, { "help", no_argument, 0, 'h' },
		{ "device", required_argument, 0, 'D' }, { 0 } };

	if (cli_version(argc, argv, "kvt-demo"))
		return 0;
	kvt_config_default(&cfg);
	cfg.n_layers = 8;
	cfg.tier[KVT_TIER_FAST].bytes = 64ull << 20;
	cfg.tier[KVT_TIER_HOST].bytes = 128ull << 20;
	cfg.tier[KVT_TIER_NVME].bytes = 1ull << 30;
	/* A config file first, so flags override it. */
	for (int i = 1; i < argc - 1; i++)
		if (!strcmp(argv[i], "-c") || !strcmp(argv[i], "--config")) {
			policy = NULL;
			if ((r = kvt_config_load(&cfg, argv[i + 1], err, sizeof(err)))) {
				fprintf(stderr, "kvt-demo: %s\n", err);
				return 2;
			}
		}
	int c;
	while ((c = getopt_long(argc, argv, "c:t:s:l:p:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': break;
		case 't': context = (unsigned)strtoul(optarg, NULL, 10); break;
		case 's': steps = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'l': cfg.n_layers = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'F': set_or_die(&cfg, "tier.fast.bytes", optarg); break;
		case 'H': set_or_die(&cfg, "tier.host.bytes", optarg); break;
		case 'N': set_or_die(&cfg, "tier.nvme.bytes", optarg); break;
		case 'd': snprintf(cfg.nvme_path, sizeof(cfg.nvme_path), "%s", optarg); break;
		case 'p': policy = optarg; break;
		case 'P': cfg.prefetch_depth = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'j': json = 1; break;
		case 'D': set_or_die(&cfg, "device.name", optarg); break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (policy)
		for (int t = 0; t < KVT_NTIERS; t++)
			snprintf(cfg.tier[t].policy, sizeof(cfg.tier[t].policy), "%s", policy);
	cfg.dtype_bytes = 2;
	cfg.log = log_cb;
	if ((r = kvt_config_validate(&cfg, err, sizeof(err)))) {
		fprintf(stderr, "kvt-demo: %s\n", err);
		return 2;
	}
	uint64_t pb = kvt_config_page_bytes(&cfg);
	unsigned pt = cfg.page_tokens, L = cfg.n_layers, H = cfg.n_kv_heads, D = cfg.head_dim;
	uint64_t kv_pages = (uint64_t)L * ((context + steps + pt - 1) / pt);
	uint64_t frames = cfg.tier[0].bytes / pb + cfg.tier[1].bytes / pb + cfg.tier[2].bytes / pb;
	if (kv_pages + L > frames) {
		fprintf(stderr, "kvt-demo: the context needs %llu pages of %llu KiB but the tiers hold %llu; "
			"raise --nvme or lower --context\n", (unsigned long long)kv_pages,
			(unsigned long long)(pb >> 10), (unsigned long long)frames);
		return 2;
	}
	cli_bar_on = isatty(2);

	struct kvt_device *dev;
	struct kvt_pager *p;
	kvt_seq_t s;
	char why[512];
	if ((r = kvt_device_open_why(cfg.device, cfg.copy_gbps, &dev, why, sizeof(why)))) {
		fprintf(stderr, "kvt-demo: --device %s: %s\n", cfg.device, why);
		return 1;
	}
	if (why[0])
		fprintf(stderr, "kvt-demo: device: %s\n", why);
	/* Pages in device memory the host cannot read are copied out to be
	 * checked (this demo attends on the host). */
	struct kvt_device_info di;
	kvt_device_info(dev, &di);
	half *hk = NULL, *hv = NULL;
	if (!di.host_visible && (!(hk = malloc(pb / 2)) || !(hv = malloc(pb / 2)))) {
		fprintf(stderr, "kvt-demo: out of memory\n");
		return 1;
	}
	hold_error = 1;
	r = kvt_pager_open(&cfg, dev, &p);
	hold_error = 0;
	if (r) {
		fprintf(stderr, "kvt-demo: cannot open the pager: %s\n",
			held_error[0] ? held_error : strerror(-r));
		return 1;
	}
	if (held_error[0])
		fprintf(stderr, "kvt-demo: %s\n", held_error);
	if ((r = kvt_seq_open(p, &s))) {
		fprintf(stderr, "kvt-demo: %s\n", strerror(-r));
		return 1;
	}
	/* With --json, stdout holds the JSON alone: what is said on the way goes to stderr. */
	FILE *say = json ? stderr : stdout;

	fprintf(say, "kvt-demo: %u layers x %u KV heads x %u dims, %u tokens/page (%llu KiB pages), "
		"device %s\n", L, H, D, pt, (unsigned long long)(pb >> 10), kvt_device_name(dev));
	fprintf(say, "context %u tokens = %.0f MiB of KV; fast %.0f MiB, host %.0f MiB, nvme %.0f MiB; "
		"policy %s, prefetch %u layers\n", context,
		(double)kv_pages * (double)pb / (1 << 20), (double)cfg.tier[0].bytes / (1 << 20),
		(double)cfg.tier[1].bytes / (1 << 20), (double)cfg.tier[2].bytes / (1 << 20),
		cfg.tier[0].policy, cfg.prefetch_depth);
	fflush(say);

	/* Prefill, a chunk of tokens at a time. */
	unsigned chunk = 256, tokd = H * D;
	half *k = malloc(sizeof(half) * tokd * chunk), *v = malloc(sizeof(half) * tokd * chunk);
	if (!k || !v)
		return 1;
	double t0 = cli_now();
	for (unsigned t = 0; t < context; t += chunk) {
		unsigned n = context - t < chunk ? context - t : chunk;
		for (unsigned l = 0; l < L; l++) {
			for (unsigned j = 0; j < n; j++)
				for (unsigned i = 0; i < tokd; i++) {
					k[j * tokd + i] = val(l, t + j, i, 0);
					v[j * tokd + i] = val(l, t + j, i, 1);
				}
			if ((r = kvt_seq_append(p, s, l, k, v, n))) {
				fprintf(stderr, "\nkvt-demo: append: %s\n", strerror(-r));
				return 1;
			}
		}
		char ex[64];
		snprintf(ex, sizeof(ex), "prefill %u/%u tokens", t + n, context);
		cli_bar("prefill", (double)(t + n) / context, ex);
	}
	double t_prefill = cli_now() - t0;

	/* Decode: append one token, attend over everything. */
	float *q = malloc(sizeof(float) * tokd), *acc = malloc(sizeof(float) * tokd);
	float *mx = malloc(sizeof(float) * H), *sum = malloc(sizeof(float) * H);
	uint64_t mismatches = 0, pages_seen = 0;
	double t_attn = 0;
	t0 = cli_now();
	for (unsigned st = 0; st < steps; st++) {
		unsigned pos = context + st;
		for (unsigned l = 0; l < L; l++) {
			for (unsigned i = 0; i < tokd; i++) {
				k[i] = val(l, pos, i, 0);
				v[i] = val(l, pos, i, 1);
			}
			if ((r = kvt_seq_append(p, s, l, k, v, 1))) {
				fprintf(stderr, "\nkvt-demo: append: %s\n", strerror(-r));
				return 1;
			}
		}
		for (unsigned l = 0; l < L; l++) {
			struct kvt_batch *b;
			struct kvt_view vw;
			for (unsigned i = 0; i < tokd; i++) {
				q[i] = (float)((i * 13 + l) % 17) / 17.0f - 0.5f;
				acc[i] = 0;
			}
			for (unsigned h = 0; h < H; h++) {
				mx[h] = -INFINITY;
				sum[h] = 0;
			}
			if ((r = kvt_acquire(p, s, l, NULL, 0, &b))) {
				fprintf(stderr, "\nkvt-demo: acquire: %s\n", strerror(-r));
				return 1;
			}
			while ((r = kvt_batch_next(b, &vw)) != 0) {
				if (r < 0) {
					char lost[320] = "";

					if (r == -EIO)
						kvt_pager_last_error(p, NULL, lost, sizeof(lost));
					fprintf(stderr, "\nkvt-demo: page %u of layer %u: %s%s%s\n", vw.page, l,
						strerror(-r), lost[0] ? ": " : "", lost);
					return 1;
				}
				const half *pk = vw.k, *pv = vw.v;
				unsigned t = vw.page * pt;
				if (hk) {
					size_t nb = (size_t)vw.ntok * tokd * sizeof(half);
					if ((r = kvt_device_read(dev, hk, vw.k, nb)) ||
					    (r = kvt_device_read(dev, hv, vw.v, nb))) {
						fprintf(stderr, "\nkvt-demo: reading page %u: %s\n", vw.page,
							strerror(-r));
						return 1;
					}
					pk = hk;
					pv = hv;
				}
				double a0 = cli_now();
				attend(pk, pv, vw.ntok, H, D, q, acc, mx, sum);
				t_attn += cli_now() - a0;
				/* Check the first and last element of K and V. */
				unsigned last = vw.ntok - 1;
				if (pk[0] != val(l, t, 0, 0) || pv[0] != val(l, t, 0, 1) ||
				    pk[(size_t)last * tokd + tokd - 1] != val(l, t + last, tokd - 1, 0) ||
				    pv[(size_t)last * tokd + tokd - 1] != val(l, t + last, tokd - 1, 1))
					mismatches++;
				pages_seen++;
			}
			kvt_batch_release(b);
		}
		kvt_pager_step(p);
		char ex[64];
		snprintf(ex, sizeof(ex), "decode step %u/%u", st + 1, steps);
		cli_bar("decode", (double)(st + 1) / steps, ex);
	}
	double t_decode = cli_now() - t0;
	cli_bar_done();

	struct kvt_stats stt;
	kvt_pager_stats(p, &stt);
	if (json) {
		static char buf[65536];
		int n = kvt_stats_json(&stt, buf, sizeof(buf));

		if (n < 0) {
			fprintf(stderr, "kvt-demo: --json: %s\n", strerror(-n));
			return 1;
		}
		printf("%s\n", buf);
	} else {
		printf("\nprefill %.2f s (%.0f tokens/s); decode %.2f s for %u steps (%.2f tokens/s, %.0f ms/step, "
		       "%.0f ms of it attention)\n", t_prefill, context / t_prefill, t_decode, steps,
		       steps / t_decode, t_decode / steps * 1e3, t_attn / steps * 1e3);
		printf("pages read %llu, checked %llu, mismatches %llu\n\n",
		       (unsigned long long)stt.acquires, (unsigned long long)pages_seen,
		       (unsigned long long)mismatches);
		cli_print_tiers(stdout, &stt);
	}
	free(k); free(v); free(q); free(acc); free(mx); free(sum); free(hk); free(hv);
	kvt_seq_close(p, s);
	kvt_pager_close(p);
	kvt_device_close(dev);
	return mismatches ? 1 : 0;
}
