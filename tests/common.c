/* SPDX-License-Identifier: MIT */
#include "common.h"

#include <errno.h>

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
	cfg->io_depth = 16;
	const char *dir = getenv("KVT_TEST_DIR");
	snprintf(cfg->nvme_path, sizeof(cfg->nvme_path), "%s", dir ? dir : "");
	cfg->log = t_log;
	cfg->log_arg = NULL;
}

struct kvt_pager *t_open(const struct kvt_config *cfg, struct kvt_device **dev)
{
	struct kvt_pager *p;
	int r = kvt_device_open("cpu", 0, dev);
	if (r) {
		fprintf(stderr, "kvt_device_open: %s\n", strerror(-r));
		exit(1);
	}
	r = kvt_pager_open(cfg, *dev, &p);
	if (r == -EOPNOTSUPP || r == -ENOSYS)
		SKIP("pager needs io_uring here: %s", strerror(-r));
	if (r) {
		fprintf(stderr, "kvt_pager_open: %s\n", strerror(-r));
		exit(1);
	}
	return p;
}

void t_close(struct kvt_pager *p, struct kvt_device *dev)
{
	kvt_pager_close(p);
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
	const float *k = vw->k, *v = vw->v;
	unsigned tok0 = vw->page * cfg->page_tokens;
	for (unsigned t = 0; t < vw->ntok; t++)
		for (unsigned i = 0; i < per; i++) {
			float ek = val(seed, layer, tok0 + t, 0, i);
			float ev = val(seed, layer, tok0 + t, 1, i);
			if (memcmp(&k[t * per + i], &ek, 4) || memcmp(&v[t * per + i], &ev, 4)) {
				fprintf(stderr, "layer %u page %u token %u elem %u differs (tier %u)\n",
					layer, vw->page, tok0 + t, i, vw->tier);
				return -1;
			}
		}
	return 0;
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
