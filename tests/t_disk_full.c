/* SPDX-License-Identifier: MIT */
/*
 * A disk that is full ends the session that needed it, and only that one:
 * with every NVMe write failing with ENOSPC, a session whose prompt
 * outgrows the fast and host tiers ends with -ENOSPC, gives its pages
 * back, and a session decoded alongside it goes on with logits equal to
 * the dense reference. No page is lost.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "tests/fault_common.h"
#include "runtime/infer.h"
#include "runtime/gguf.h"
#include "runtime/synth.h"

#define GEN 8

int main(void)
{
	const char *dir = getenv("KVT_TEST_DIR") ? getenv("KVT_TEST_DIR") : "/tmp";
	struct kvt_synth syn = { .layers = 2, .dim = 64, .heads = 4, .kv_heads = 4, .ctx = 4096,
				 .vocab = 300, .seed = 5, .type = KVT_GGML_F32 };
	struct kvt_fault full = { .enospc_every = 1 };
	struct kvt_engine_params ep;
	struct kvt_engine *dense, *e;
	struct kvt_session *ref, *a, *b;
	struct kvt_device *dev;
	struct kvt_pager *p;
	struct kvt_config cfg;
	struct kvt_model *m;
	struct kvt_stats st;
	char path[512], err[512];
	int32_t prompt[64], big[700], tok[2];
	float ref_logits[GEN][300];
	uint64_t pb;

	snprintf(path, sizeof(path), "%s/disk-full-%d.gguf", dir, (int)getpid());
	CHECK_EQ(kvt_synth_write(&syn, path, err, sizeof(err)), 0);
	CHECK_EQ(kvt_model_load(path, &m, err, sizeof(err)), 0);
	unlink(path);
	for (int i = 0; i < 64; i++)
		prompt[i] = 3 + (i * 7) % 290;
	for (int i = 0; i < 700; i++)
		big[i] = 3 + (i * 13) % 290;

	/* The reference: session a alone, dense. */
	kvt_engine_params_default(&ep);
	ep.n_ctx = 1024;
	ep.n_threads = 2;
	ep.dense = 1;
	CHECK_EQ(kvt_engine_new(m, NULL, &ep, &dense, err, sizeof(err)), 0);
	CHECK_EQ(kvt_session_new(dense, &ref), 0);
	CHECK_EQ(kvt_eval(dense, ref, prompt, 64, NULL, NULL), 0);
	for (int i = 0; i < GEN; i++) {
		memcpy(ref_logits[i], kvt_session_logits(ref), sizeof(ref_logits[i]));
		tok[0] = t_argmax(ref_logits[i], 300);
		CHECK_EQ(kvt_decode(dense, &ref, tok, 1), 1);
	}

	/* Tiers: fast and host hold 48 pages of 4 KiB; the disk is full. */
	kvt_config_default(&cfg);
	kvt_engine_pager_geometry(m, KVT_KV_F16, &cfg);
	cfg.page_tokens = 16;
	pb = kvt_config_page_bytes(&cfg);
	CHECK_EQ(pb, 4096);
	cfg.tier[KVT_TIER_FAST].bytes = 24 * pb;
	cfg.tier[KVT_TIER_HOST].bytes = 24 * pb;
	cfg.tier[KVT_TIER_NVME].bytes = 512 * pb;
	snprintf(cfg.nvme_path, sizeof(cfg.nvme_path), "%s", dir);
	cfg.host_hugepages = KVT_HUGE_OFF;
	cfg.log = t_log;
	p = t_open(&cfg, &dev);
	fault_set(p, &full);
	ep.dense = 0;
	CHECK_EQ(kvt_engine_new(m, p, &ep, &e, err, sizeof(err)), 0);
	CHECK_EQ(kvt_session_new(e, &a), 0);
	CHECK_EQ(kvt_eval(e, a, prompt, 64, NULL, NULL), 0);	/* 8 pages */

	/* b needs 88 pages: more than fast and host hold, and the disk takes none. */
	CHECK_EQ(kvt_session_new(e, &b), 0);
	CHECK_EQ(kvt_eval(e, b, big, 700, NULL, NULL), -ENOSPC);
	CHECK_EQ(kvt_session_error(b), -ENOSPC);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	printf("b ended with -ENOSPC after %u tokens; enospc %llu, nvme paused %d, pages left %llu\n",
	       kvt_session_len(b), (unsigned long long)st.enospc, st.nvme_paused,
	       (unsigned long long)st.pages);
	CHECK(st.enospc >= 1);
	CHECK_EQ(st.pages, 2 * 4);		/* b's pages were given back, a's remain */

	/* a and b decoded together: b is skipped, a goes on as if alone. */
	for (int i = 0; i < GEN; i++) {
		const float *lg = kvt_session_logits(a);
		struct kvt_session *both[2] = { a, b };
		double d = 0, mx = 0;

		for (int v = 0; v < 300; v++) {
			d = fmax(d, fabs((double)lg[v] - ref_logits[i][v]));
			mx = fmax(mx, fabs((double)ref_logits[i][v]));
		}
		if (d > 1e-4 * mx) {
			fprintf(stderr, "step %d: a's logits differ from dense by %g (max %g)\n", i, d, mx);
			return 1;
		}
		tok[0] = t_argmax(lg, 300);
		tok[1] = 3;
		CHECK_EQ(kvt_decode(e, both, tok, 2), 1);
	}
	CHECK_EQ(kvt_session_error(a), 0);
	CHECK_EQ(kvt_session_park(e, b), -ENOSPC);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK_EQ(st.lost_pages, 0);
	printf("a decoded %d tokens alongside, equal to dense; no page lost\n", GEN);

	kvt_session_free(e, a);
	kvt_session_free(e, b);
	kvt_engine_free(e);
	fault_set(p, NULL);
	t_close(p, dev);
	kvt_session_free(dense, ref);
	kvt_engine_free(dense);
	kvt_model_free(m);
	return 0;
}
