/* SPDX-License-Identifier: MIT */
/* Set-up shared by the tests that run the inference engine over a pager.
 * Kept out of common.c: it links the runtime, and with it OpenBLAS, whose
 * start-up threads would count in t_nospin's CPU check. */
#ifndef KVT_TESTS_MODEL_COMMON_H
#define KVT_TESTS_MODEL_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include "common.h"
#include <unistd.h>
#include "runtime/infer.h"
#include "runtime/synth.h"

/* A pager with model m's page geometry (kv_type, page_tokens tokens a
 * page) and tiers of fast, host and nvme pages, every tier's policy
 * `policy` (NULL: the default), its NVMe file in t_dir(), no huge pages;
 * exits as t_open does. */
static inline struct kvt_pager *t_open_model_pager(const struct kvt_model *m, int kv_type,
						   unsigned page_tokens, uint64_t fast,
						   uint64_t host, uint64_t nvme,
						   const char *policy, struct kvt_device **dev)
{
	struct kvt_config cfg;
	uint64_t pb;

	kvt_config_default(&cfg);
	kvt_engine_pager_geometry(m, kv_type, &cfg);
	cfg.page_tokens = page_tokens;
	pb = kvt_config_page_bytes(&cfg);
	cfg.tier[KVT_TIER_FAST].bytes = fast * pb;
	cfg.tier[KVT_TIER_HOST].bytes = host * pb;
	cfg.tier[KVT_TIER_NVME].bytes = nvme * pb;
	for (int i = 0; policy && i < KVT_NTIERS; i++)
		snprintf(cfg.tier[i].policy, sizeof(cfg.tier[i].policy), "%s", policy);
	snprintf(cfg.nvme_path, sizeof(cfg.nvme_path), "%s", t_dir());
	cfg.host_hugepages = KVT_HUGE_OFF;
	cfg.log = t_log;
	return t_open(&cfg, dev);
}

/* Write syn to a file in t_dir() named after tag, load it and unlink it
 * (the mapping stays valid); exit with the reason on failure. */
static inline struct kvt_model *make_model(const struct kvt_synth *syn, const char *tag)
{
	char path[512], err[512];
	struct kvt_model *m;

	snprintf(path, sizeof(path), "%s/%s-%d.gguf", t_dir(), tag, (int)getpid());
	if (kvt_synth_write(syn, path, err, sizeof(err))) {
		fprintf(stderr, "synth: %s\n", err);
		exit(1);
	}
	if (kvt_model_load(path, &m, err, sizeof(err))) {
		fprintf(stderr, "load: %s\n", err);
		exit(1);
	}
	unlink(path);
	return m;
}

/* An engine and the pager under it (p NULL: dense). */
struct rig {
	struct kvt_device *dev;
	struct kvt_pager *p;
	struct kvt_engine *e;
};

/* r->e over r->p (set first, or NULL), or exit with the reason. */
static inline void rig_engine(struct rig *r, struct kvt_model *m,
			      const struct kvt_engine_params *ep)
{
	char err[512];

	if (kvt_engine_new(m, r->p, ep, &r->e, err, sizeof(err))) {
		fprintf(stderr, "engine: %s\n", err);
		exit(1);
	}
}

/* Prefill prompt (np tokens; none when np is 0) into s, then decode gen
 * tokens greedily: each step's logits into logits (gen, V), its argmax
 * into toks (gen). Exits on any error. */
static inline void t_greedy(struct kvt_engine *e, struct kvt_session *s, const int32_t *prompt,
			    unsigned np, unsigned gen, float *logits, int32_t *toks, uint32_t V)
{
	if (np)
		CHECK_EQ(kvt_eval(e, s, prompt, np, NULL, NULL), 0);
	for (unsigned i = 0; i < gen; i++) {
		const float *lg = kvt_session_logits(s);

		CHECK(lg);
		memcpy(logits + (size_t)i * V, lg, V * sizeof(float));
		toks[i] = t_argmax(lg, V);
		if (i + 1 < gen)
			CHECK_EQ(kvt_decode(e, &s, &toks[i], 1), 1);
	}
}

static inline void rig_close(struct rig *r)
{
	kvt_engine_free(r->e);
	if (r->p)
		t_close(r->p, r->dev);
}

#endif
