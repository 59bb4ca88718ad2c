/* SPDX-License-Identifier: MIT */
/*
 * Session files (runtime/infer.c: kvt_session_peek and
 * kvt_session_restore, what `kvt-run --restore` reads): restored into an
 * engine over a tiny synthetic model (2 layers, width 32, the smallest
 * llama vocabulary) and a live pager on tiny tiers, with a context of 32
 * tokens.
 *
 * Byte 0 of the input is a mode, the rest is the file. The file carries
 * the model's fingerprint and ends in a checksum of everything before it,
 * which random bytes never match; so that the fuzzer gets past them to
 * the lengths, tokens and K/V: mode bit 0 copies the model's fields
 * (version to fingerprint, bytes 8-39) from a session this engine saved,
 * and bit 1 appends the right checksum. With both clear the file is
 * taken as it is.
 *
 * Checked: a refused file says why in one line and leaves no session; a
 * restored one holds the tokens of the file, each in the vocabulary.
 */
#include "tests/fuzz/fuzz.h"
#include <xxhash.h>
#include <kvt/config.h>
#include <kvt/device.h>
#include <kvt/pager.h>
#include "runtime/infer.h"
#include "runtime/model.h"
#include "runtime/synth.h"

#define HDR_BYTES	48	/* struct sess_hdr */
#define N_CTX		32

static struct fuzz_file sess_file;
static struct kvt_model *m;
static struct kvt_device *dev;
static struct kvt_pager *p;
static struct kvt_engine *e;
static uint8_t saved[HDR_BYTES];	/* the header of a session saved here */

static void setup(void)
{
	struct kvt_engine_params ep;
	struct kvt_synth syn;
	struct kvt_config c;
	struct kvt_session *s;
	char err[512], dir[] = "/tmp/kvt-fuzz-session.XXXXXX", path[64], mpath[64];
	int32_t toks[3] = { 1, 100, 200 };
	uint64_t pb;
	FILE *f;

	kvt_engine_params_default(&ep);
	ep.n_threads = 1;
	ep.n_ctx = N_CTX;
	kvt_synth_default(&syn);
	syn.dim = 32;
	syn.heads = 2;
	syn.ff = 64;
	syn.ctx = 64;
	syn.vocab = KVT_SYNTH_MIN_VOCAB;
	/* The model in a file of its own (the writer renames a temporary
	 * into place, which a memfd's /proc path cannot take); the mapping
	 * outlives the name. */
	FUZZ_CHECK(mkdtemp(dir) != NULL);
	snprintf(mpath, sizeof(mpath), "%s/m.gguf", dir);
	if (kvt_synth_write(&syn, mpath, err, sizeof(err)) ||
	    kvt_model_load(mpath, &m, err, sizeof(err))) {
		fprintf(stderr, "model: %s\n", err);
		abort();
	}
	unlink(mpath);
	kvt_config_default(&c);
	kvt_engine_pager_geometry(m, ep.kv_type, &c);
	c.page_tokens = 32;	/* 4 KiB pages: O_DIRECT's multiple */
	pb = kvt_config_page_bytes(&c);
	c.tier[KVT_TIER_FAST].bytes = 4 * pb;
	c.tier[KVT_TIER_HOST].bytes = 16 * pb;
	c.tier[KVT_TIER_NVME].bytes = 0;
	c.host_prefault_threads = 1;
	c.host_hugepages = KVT_HUGE_OFF;
	FUZZ_CHECK(kvt_device_open("cpu", 0, &dev) == 0);
	FUZZ_CHECK(kvt_pager_open(&c, dev, &p) == 0);
	if (kvt_engine_new(m, p, &ep, &e, err, sizeof(err))) {
		fprintf(stderr, "engine: %s\n", err);
		abort();
	}
	/* A session of ours, for its header. */
	snprintf(path, sizeof(path), "%s/s", dir);
	FUZZ_CHECK(kvt_session_new(e, &s) == 0);
	FUZZ_CHECK(kvt_eval(e, s, toks, 3, NULL, NULL) == 0);
	if (kvt_session_save(e, s, path, err, sizeof(err))) {
		fprintf(stderr, "save: %s\n", err);
		abort();
	}
	kvt_session_free(e, s);
	f = fopen(path, "rb");
	FUZZ_CHECK(f && fread(saved, 1, HDR_BYTES, f) == HDR_BYTES);
	fclose(f);
	unlink(path);
	rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvt_session *s = NULL;
	char err[512] = "";
	unsigned len;
	uint8_t *buf;
	size_t n;
	int r;

	if (!e)
		setup();
	if (size < 1)
		return 0;
	n = size - 1;
	buf = malloc(n + 8);
	FUZZ_CHECK(buf);
	memcpy(buf, data + 1, n);
	if ((data[0] & 1) && n >= 40)
		memcpy(buf + 8, saved + 8, 32);
	if (data[0] & 2) {
		uint64_t sum = XXH3_64bits(buf, n);
		memcpy(buf + n, &sum, 8);
		n += 8;
	}
	const char *path = fuzz_file_set(&sess_file, "session", buf, n);

	r = kvt_session_peek(path, &len, err, sizeof(err));
	if (r)
		fuzz_check_err(err, sizeof(err));
	err[0] = 0;
	r = kvt_session_restore(e, path, &s, err, sizeof(err));
	if (r) {
		FUZZ_CHECK(r < 0 && s == NULL);
		fuzz_check_err(err, sizeof(err));
	} else {
		uint32_t flen;

		memcpy(&flen, buf + 40, 4);
		FUZZ_CHECK(kvt_session_len(s) == flen && flen <= N_CTX);
		const int32_t *t = kvt_session_tokens(s);
		for (unsigned i = 0; i < flen; i++)
			FUZZ_CHECK(!memcmp(&t[i], buf + HDR_BYTES + 4 * i, 4) &&
				   t[i] >= 0 && (uint32_t)t[i] < m->hp.n_vocab);
		kvt_session_free(e, s);
	}
	free(buf);
	return 0;
}
