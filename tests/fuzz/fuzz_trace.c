/* SPDX-License-Identifier: MIT */
/*
 * kvtier trace files: the reader (pager/trace.c: kvt_trace_open,
 * kvt_trace_summarize) and kvt-sim's replay of them (pager/sim.c:
 * kvt_sim_trace_load, which also takes oracleGeneral files, then
 * kvt_sim_run on the tiers the header names, or on one small LRU tier as
 * `kvt-sim replay --tier` would give one). An input is a whole file.
 */
#include "tests/fuzz/fuzz.h"
#include "pager/trace.h"
#include "pager/sim.h"
#include "pager/policy.h"

#define MAX_FRAMES	(1u << 16)

static struct fuzz_file file;

static void replay(const char *path)
{
	struct kvt_sim_config cfg = { 0 };
	struct kvt_sim_result res;
	struct kvt_sim_trace t;
	char err[512] = "";
	int r;

	r = kvt_sim_trace_load(path, &t, err, sizeof(err));
	if (r) {
		fuzz_check_err(err, sizeof(err));
		return;
	}
	if (t.has_hdr)
		kvt_sim_config_trace(&cfg, &t);
	cfg.page_bytes = t.has_hdr && t.hdr.page_bytes ? t.hdr.page_bytes : 4096;
	if (!cfg.ntiers) {
		cfg.ntiers = 1;
		snprintf(cfg.tier[0].policy, sizeof(cfg.tier[0].policy), "lru");
		cfg.tier[0].frames = 8;
	}
	/* The replay keeps per-frame state for the tiers the header names,
	 * as large as it says (4 billion frames: over 100 GB); that is
	 * kvt-sim's contract, not a bug, so the target replays at most
	 * MAX_FRAMES a tier. */
	for (unsigned ti = 0; ti < cfg.ntiers; ti++)
		if (cfg.tier[ti].frames > MAX_FRAMES)
			cfg.tier[ti].frames = MAX_FRAMES;
	cfg.backed = -1;
	for (unsigned ti = 0; ti < cfg.ntiers; ti++) {
		const struct kvt_policy_ops *o = kvt_policy_find(cfg.tier[ti].policy);
		if (o && (o->flags & KVT_POLICY_OFFLINE))
			FUZZ_CHECK(kvt_sim_trace_next(&t) == 0);
	}
	err[0] = 0;
	r = kvt_sim_run(&cfg, &t, &res, err, sizeof(err));
	if (r)
		fuzz_check_err(err, sizeof(err));
	else
		FUZZ_CHECK(res.refs == t.naccess);
	kvt_sim_trace_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_file_set(&file, "trace", data, size);
	struct kvt_trace_summary s;
	struct kvt_trace t;
	char err[512] = "";

	if (!kvt_trace_open(path, &t, err, sizeof(err))) {
		volatile uint64_t sink = 0;

		FUZZ_CHECK(t.nrec == 0 || t.rec);
		for (size_t i = 0; i < t.nrec; i++)
			sink += t.rec[i].key + t.rec[i].event;
		if (t.hdr.config_len)
			sink += (uint8_t)t.config[t.hdr.config_len - 1];
		FUZZ_CHECK(kvt_trace_summarize(&t, &s) == 0);
		(void)sink;
		kvt_trace_close(&t);
	} else {
		fuzz_check_err(err, sizeof(err));
	}
	replay(path);
	return 0;
}
