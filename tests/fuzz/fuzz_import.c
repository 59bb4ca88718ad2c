/* SPDX-License-Identifier: MIT */
/*
 * The interchange imports (pager/trace.c): libCacheSim oracleGeneral
 * (kvt_trace_import_oracle, and kvt-sim's direct reader of it,
 * kvt_sim_trace_oracle) and Mooncake JSONL (kvt_trace_import_mooncake).
 * Byte 0 picks the format (even: oracleGeneral, odd: Mooncake); the rest
 * is the file.
 *
 * Checked: what an import writes is a trace the reader takes, with one
 * ACCESS record per record it imported, and the oracleGeneral export of
 * it succeeds.
 */
#include "tests/fuzz/fuzz.h"
#include "pager/trace.h"
#include "pager/sim.h"

static struct fuzz_file in, out, back;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[512] = "";
	struct kvt_trace t;
	int r, mooncake;

	if (size < 1)
		return 0;
	mooncake = data[0] & 1;
	const char *ip = fuzz_file_set(&in, "in", data + 1, size - 1);
	const char *op = fuzz_file_empty(&out, "out");

	r = mooncake ? kvt_trace_import_mooncake(ip, op, err, sizeof(err))
		     : kvt_trace_import_oracle(ip, op, err, sizeof(err));
	if (r) {
		FUZZ_CHECK(r < 0);
		fuzz_check_err(err, sizeof(err));
	} else {
		struct kvt_trace_summary s;

		err[0] = 0;
		r = kvt_trace_open(op, &t, err, sizeof(err));
		if (r)
			fprintf(stderr, "the import's output: %s\n", err);
		FUZZ_CHECK(r == 0);
		FUZZ_CHECK(kvt_trace_summarize(&t, &s) == 0);
		FUZZ_CHECK(s.events[KVT_EV_ACCESS] == t.nrec);
		if (!mooncake)
			FUZZ_CHECK(t.nrec == (size - 1) / 24);
		kvt_trace_close(&t);
		err[0] = 0;
		r = kvt_trace_export_oracle(op, fuzz_file_empty(&back, "back"), err, sizeof(err));
		if (r)
			fprintf(stderr, "export: %s\n", err);
		FUZZ_CHECK(r == 0);
	}
	if (!mooncake) {
		struct kvt_sim_trace st;

		err[0] = 0;
		if (kvt_sim_trace_oracle(ip, &st, err, sizeof(err)))
			fuzz_check_err(err, sizeof(err));
		else
			kvt_sim_trace_free(&st);
	}
	return 0;
}
