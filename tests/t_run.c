/* SPDX-License-Identifier: MIT */
/*
 * kvt-run end to end on a synthetic model: the tiered run's dumped logits
 * equal the dense reference run's; a conversation saved by one process and
 * restored by another continues exactly as an uninterrupted one; batched
 * sequences and --json work; bad input is refused with a message that
 * says what to change, and a refused run writes nothing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/common.h"
#include "kernels/cpu/amx.h"
#include "kernels/cpu/kernels.h"

static char bin[1024], mk[1024], dir[1024], model[1200];
static char out[1 << 16];

/* A shell command; its output into out; its exit status (tests/common.h). */
#define run(...) t_shell(out, sizeof(out), __VA_ARGS__)

static float *load_floats(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	float *v;
	long size;

	CHECK(f);
	CHECK(!fseek(f, 0, SEEK_END));
	size = ftell(f);
	rewind(f);
	CHECK(size >= 0 && size % 4 == 0);
	v = malloc((size_t)size + 4);
	CHECK(v);
	CHECK(fread(v, 1, (size_t)size, f) == (size_t)size);
	fclose(f);
	*n = (size_t)size / 4;
	return v;
}

/* The "ids" array of sequence k in kvt-run's JSON, as text. */
static void json_ids(const char *json, int k, char *buf, size_t len)
{
	const char *p = json;

	for (int i = 0; i <= k; i++) {
		p = strstr(p, "\"ids\":[");
		CHECK(p);
		p += 7;
	}
	const char *e = strchr(p, ']');
	CHECK(e && (size_t)(e - p) < len);
	memcpy(buf, p, (size_t)(e - p));
	buf[e - p] = 0;
}

/* The number after "key": in JSON, from the first occurrence at or after from. */
static double json_num(const char *json, const char *from, const char *key)
{
	char k[128];
	const char *p = from ? strstr(json, from) : json;

	CHECK(p);
	snprintf(k, sizeof(k), "\"%s\":", key);
	p = strstr(p, k);
	CHECK(p);
	return strtod(p + strlen(k), NULL);
}

int main(void)
{
	const char *build = getenv("BUILD"), *tdir = getenv("KVT_TEST_DIR");
	const unsigned V = 300;
	char ids_a[4096], ids_b[4096], ids_c[4096], path[1400];
	size_t na, nb;
	float *a, *b;
	struct stat st;

	snprintf(bin, sizeof(bin), "%s/kvt-run", build && *build ? build : "build");
	snprintf(mk, sizeof(mk), "%s/kvt-mkmodel", build && *build ? build : "build");
	if (access(bin, X_OK) || access(mk, X_OK))
		SKIP("%s or %s not built", bin, mk);
	snprintf(dir, sizeof(dir), "%s/t_run.%d", tdir ? tdir : "/tmp", (int)getpid());
	CHECK(!mkdir(dir, 0700));
	snprintf(model, sizeof(model), "%s/m.gguf", dir);
	CHECK_EQ(run("%s --layers 3 --dim 128 --heads 4 --kv-heads 2 --vocab %u --ctx 1024 "
		     "--type f16 -o %s 2>&1", mk, V, model), 0);

	/* Tiered (fast tier an eighth of the KV) against dense: logits and tokens. */
	CHECK_EQ(run("%s -m %s -p 'The history of the world is often told as a story of kings and "
		     "wars, but most of the people who ever lived were farmers.' -n 12 --temp 0 "
		     "--fast 64K --host 64K --nvme-path %s --dump-logits %s/tiered.f32 --json 2>&1",
		     bin, model, dir, dir), 0);
	json_ids(out, 0, ids_a, sizeof(ids_a));
	CHECK(strstr(out, "\"pager\":{"));
	/* The GEMM path is named, and kvt-run never runs OpenBLAS kernels
	 * weaker than the cpu has unless told to keep them. */
	CHECK(strstr(out, "GEMM: ") && strstr(out, "OpenBLAS "));
	CHECK(!strstr(out, "weaker than this cpu"));
	/* and the tiles or the bf16 dots, where the cpu has them */
	CHECK(!strstr(out, "AMX bf16 tiles for the block types") == (kvt_amx() != KVT_BF16_TILES));
	CHECK(!strstr(out, "AVX512-BF16 dots for the block types") == (kvt_amx() != KVT_BF16_DOTS));
	if (kvt_amx_can() >= KVT_BF16_DOTS) {
		CHECK_EQ(run("KVT_AMX=dots %s -m %s -p 'Hi' -n 1 --dense --json 2>&1", bin, model), 0);
		CHECK(strstr(out, "AVX512-BF16 dots for the block types"));
	}
	/* KVT_SIMD holds the kernels to AVX2 (or C) on a cpu with more */
	if (kvt_cpu_simd() >= 1) {
		CHECK_EQ(run("KVT_SIMD=1 %s -m %s -p 'Hi' -n 1 --dense --json 2>&1", bin, model), 0);
		CHECK(strstr(out, "AVX2 kernels") && !strstr(out, "AMX"));
	}
	if (kvt_blas_core_wanted()) {
		CHECK_EQ(run("KVT_BLAS_KEEP=1 %s -m %s -p 'Hi' -n 1 --dense --json 2>&1", bin, model), 0);
		CHECK(strstr(out, "weaker than this cpu (set OPENBLAS_CORETYPE="));
		printf("OpenBLAS chose %s on this cpu; kvt-run set it to %s\n", kvt_blas_core(),
		       kvt_blas_core_wanted());
	}
	CHECK_EQ(run("%s -m %s -p 'The history of the world is often told as a story of kings and "
		     "wars, but most of the people who ever lived were farmers.' -n 12 --temp 0 "
		     "--dense --dump-logits %s/dense.f32 --json 2>&1", bin, model, dir), 0);
	json_ids(out, 0, ids_b, sizeof(ids_b));
	CHECK(!strcmp(ids_a, ids_b));
	snprintf(path, sizeof(path), "%s/tiered.f32", dir);
	a = load_floats(path, &na);
	snprintf(path, sizeof(path), "%s/dense.f32", dir);
	b = load_floats(path, &nb);
	CHECK_EQ(na, 12 * V);
	CHECK_EQ(nb, na);
	for (size_t r = 0; r < 12; r++) {
		double d = 0, m = 0;

		for (size_t i = 0; i < V; i++) {
			d = fmax(d, fabs((double)a[r * V + i] - b[r * V + i]));
			m = fmax(m, fabs((double)b[r * V + i]));
		}
		if (d > 1e-4 * m) {
			fprintf(stderr, "step %zu: logits differ by %g (max %g)\n", r, d, m);
			return 1;
		}
	}
	free(a);
	free(b);
	printf("tiered logits match dense; tokens %s\n", ids_a);

	/* Token ids in, 20 tokens in one go vs 8 + save, restore + 12 in another process. */
	snprintf(path, sizeof(path), "%s/ids.txt", dir);
	{
		FILE *f = fopen(path, "w");

		CHECK(f);
		for (int i = 0; i < 200; i++)
			fprintf(f, "%d%c", 3 + (i * 37) % (V - 3), i % 10 == 9 ? '\n' : ' ');
		fclose(f);
	}
	CHECK_EQ(run("%s -m %s --prompt-ids %s -n 20 --temp 0 --ignore-eos --fast 64K --host 64K "
		     "--nvme-path %s --json 2>&1", bin, model, path, dir), 0);
	json_ids(out, 0, ids_a, sizeof(ids_a));
	CHECK_EQ(run("%s -m %s --prompt-ids %s -n 8 --temp 0 --ignore-eos --fast 64K --host 64K "
		     "--nvme-path %s --save %s/conv.kvts --json 2>&1", bin, model, path, dir, dir), 0);
	json_ids(out, 0, ids_b, sizeof(ids_b));
	CHECK_EQ(run("%s -m %s --restore %s/conv.kvts -n 12 --ctx 512 --temp 0 --ignore-eos "
		     "--fast 64K --host 64K --nvme-path %s --json 2>&1", bin, model, dir, dir), 0);
	json_ids(out, 0, ids_c, sizeof(ids_c));
	CHECK(strstr(out, "\"prompt_tokens\":0"));	/* no prefill after a restore */
	{
		char joined[8192];

		snprintf(joined, sizeof(joined), "%s,%s", ids_b, ids_c);
		if (strcmp(joined, ids_a)) {
			fprintf(stderr, "restored run differs:\n  %s\n  %s\n", ids_a, joined);
			return 1;
		}
	}
	printf("save + restore in a new process continues the same: %s\n", ids_a);

	/* The bytes figures: each step's least NVMe read (what fast and host,
	 * less their stage, cannot hold) against what was read, in --json and
	 * in the summary. KV of ~240 tokens (180 KiB) over 64 KiB of fast and
	 * host: the pager reads close to the least, never below it. */
	CHECK_EQ(run("%s -m %s --prompt-ids %s -n 40 --temp 0 --ignore-eos --fast 32K --host 32K "
		     "--nvme-path %s --json 2>&1", bin, model, path, dir), 0);
	{
		double mn = json_num(out, NULL, "read_min_bytes"), steps = json_num(out, NULL, "read_steps");
		double rd = json_num(out, "\"nvme\":{\"capacity\"", "bytes_out");

		printf("nvme read %.0f bytes in %.0f steps, the least %.0f: %.2f times\n", rd, steps, mn,
		       rd / mn);
		CHECK(steps >= 32 && mn > 64 * 1024);
		CHECK(rd >= mn * 0.95 && rd <= mn * 1.25);
		/* The decode's own share of them, and the disk's busy time. */
		double drd = json_num(out, "\"decode_io\"", "nvme_read_bytes");
		double dmn = json_num(out, "\"decode_io\"", "min_bytes");
		double busy = json_num(out, "\"decode_io\"", "nvme_busy_s");
		CHECK(drd > 0 && drd <= rd && dmn > 0 && dmn <= mn && busy > 0);
		CHECK(drd >= dmn * 0.95 && drd <= dmn * 1.25);
	}
	CHECK_EQ(run("%s -m %s --prompt-ids %s -n 8 --temp 0 --ignore-eos --fast 32K --host 32K "
		     "--nvme-path %s 2>&1", bin, model, path, dir), 0);
	CHECK(strstr(out, "\nnvme read ") && strstr(out, "MB a step, the least it had to read "));
	CHECK(strstr(out, "\ndecode over nvme: ") && strstr(out, "the disk busy "));

	/* --tokenize prints the ids -p's text becomes, in the form
	 * --prompt-ids reads: as many as the run's prompt_tokens, and the two
	 * prompts give the same logits, byte for byte (on one thread: with
	 * two, the order partial attentions merge in may move the last bits). */
	{
		char want[64];

		CHECK_EQ(run("%s -m %s -p 'The pager keeps hot pages close.' --tokenize > %s/tok.txt",
			     bin, model, dir), 0);
		CHECK_EQ(run("wc -w < %s/tok.txt", dir), 0);
		CHECK(atoi(out) > 2);
		snprintf(want, sizeof(want), "\"prompt_tokens\":%d,", atoi(out));
		CHECK_EQ(run("%s -m %s -p 'The pager keeps hot pages close.' -n 4 --temp 0 "
			     "--ignore-eos -t 1 --dump-logits %s/text.f32 --json 2>&1", bin, model, dir), 0);
		CHECK(strstr(out, want));
		CHECK_EQ(run("%s -m %s --prompt-ids %s/tok.txt -n 4 --temp 0 --ignore-eos -t 1 "
			     "--dump-logits %s/ids.f32 --json 2>&1", bin, model, dir, dir), 0);
		CHECK(strstr(out, want));
		CHECK_EQ(run("cmp %s/text.f32 %s/ids.f32 && test -s %s/ids.f32", dir, dir, dir), 0);
	}

	/* --policy NAME:key=value is a policy with parameters for every tier,
	 * not a tier named "NAME:key"; TIER=NAME:key=value is one tier's. */
	CHECK_EQ(run("%s -m %s --prompt-ids %s -n 2 --fast 64K --host 64K --nvme-path %s "
		     "--policy s3fifo:small=20 2>&1", bin, model, path, dir), 0);
	CHECK(strstr(out, "policy s3fifo:small=20/s3fifo:small=20/s3fifo:small=20,"));
	CHECK_EQ(run("%s -m %s --prompt-ids %s -n 2 --fast 64K --host 64K --nvme-path %s "
		     "--policy host=s3fifo:small=20 2>&1", bin, model, path, dir), 0);
	CHECK(strstr(out, "policy auto/s3fifo:small=20/auto,"));
	/* A bad policy parameter: the failure line names it and its range. */
	CHECK_EQ(run("%s -m %s --prompt-ids %s -n 2 --fast 64K --host 64K --nvme-path %s "
		     "--policy host=s3fifo:small=150 2>&1", bin, model, path, dir), 1);
	CHECK(strstr(out, "kvt-run: cannot open the pager: tier.host.policy = s3fifo:small=150: "
		      "small=150: must be 1..99 (percent of the tier)\n"));

	/* The device: cpu by name, and the line that says which, with the
	 * kernels it runs; cuda by name either runs on a GPU or fails with
	 * the reason and exit 1; auto says why it is on the cpu. */
	CHECK_EQ(run("%s -m %s --prompt-ids %s -n 2 --device cpu --fast 64K --host 64K "
		     "--nvme-path %s 2>&1", bin, model, path, dir), 0);
	CHECK(strstr(out, "device cpu; kernels: cpu, "));
	CHECK(strstr(out, "\ndevice: cpu (host memory); fast tier"));
	{
		int rc = run("%s -m %s --prompt-ids %s -n 2 --device cuda --fast 64K --host 64K "
			     "--nvme-path %s 2>&1", bin, model, path, dir);

		if (rc) {
			CHECK_EQ(rc, 1);
			CHECK(strstr(out, "--device cuda: cuda: "));
			printf("--device cuda here: %s", out);
			CHECK_EQ(run("%s -m %s --prompt-ids %s -n 2 --fast 64K --host 64K "
				     "--nvme-path %s 2>&1", bin, model, path, dir), 0);
			CHECK(strstr(out, "device: cuda: ") && strstr(out, "; using cpu\n"));
		} else {
			CHECK(strstr(out, "device cuda; kernels: "));
		}
	}

	/* Metrics on port 0: the port the kernel picked is said at the start
	 * and in the summary (the same one), and is in --json. */
	CHECK_EQ(run("%s -m %s --prompt-ids %s -n 2 --fast 64K --host 64K --nvme-path %s "
		     "--set metrics.http=127.0.0.1:0 2>&1", bin, model, path, dir), 0);
	{
		const char *at = strstr(out, "kvt-run: metrics: http port "), *sum;
		int pa, pb;

		CHECK(at && (sum = strstr(at + 1, "\nmetrics: http port ")));
		pa = atoi(at + strlen("kvt-run: metrics: http port "));
		pb = atoi(sum + strlen("\nmetrics: http port "));
		CHECK(pa > 0 && pa < 65536 && pb == pa);
	}
	CHECK_EQ(run("%s -m %s --prompt-ids %s -n 2 --fast 64K --host 64K --nvme-path %s "
		     "--set metrics.http=127.0.0.1:0 --json 2>/dev/null", bin, model, path, dir), 0);
	CHECK(json_num(out, NULL, "metrics_http_port") > 0);

	/* Three sequences from one prompt, sampled. */
	CHECK_EQ(run("%s -m %s --prompt-ids %s -n 6 --batch 3 --seed 5 --fast 128K --host 64K "
		     "--nvme-path %s --json 2>&1", bin, model, path, dir), 0);
	json_ids(out, 2, ids_c, sizeof(ids_c));
	CHECK(strstr(out, "\"batch\":3"));
	printf("batch of 3: third sequence %s\n", ids_c);

	/* A tier size the config file gives is kept, even when it equals the
	 * default (1G); a tier not given gets what the KV needs. */
	CHECK_EQ(run("printf '[tier.fast]\\nbytes = 1G\\n' > %s/fast.ini && %s -m %s --prompt-ids %s "
		     "-n 8 -c %s/fast.ini --print-config 2>&1", dir, bin, model, path, dir), 0);
	CHECK(strstr(out, "[tier.fast]\nbytes = 1G\n"));
	CHECK(!strstr(out, "[tier.host]\nbytes = 4G\n"));

	/* Bad input: each refused up front with what to change. */
#define REFUSED(needle, ...) do { \
		int rc_ = run(__VA_ARGS__); \
		if (rc_ == 0 || !strstr(out, needle)) { \
			fprintf(stderr, "expected a refusal naming \"%s\", got exit %d:\n%s\n", \
				needle, rc_, out); \
			return 1; \
		} \
		printf("refused: %s", out); \
	} while (0)
	REFUSED("raise --ctx", "%s -m %s --prompt-ids %s -n 8 --ctx 100 2>&1", bin, model, path);
	REFUSED("device.name", "%s -m %s --prompt-ids %s -n 8 --device gpu 2>&1", bin, model, path);
	REFUSED("raise --nvme", "%s -m %s --prompt-ids %s -n 8 --fast 64K --host 64K --nvme 64K "
		"--nvme-path %s 2>&1", bin, model, path, dir);
	REFUSED("raise --fast", "%s -m %s --prompt-ids %s -n 8 --fast 16K 2>&1", bin, model, path);
	REFUSED("--nvme-path", "%s -m %s --prompt-ids %s -n 8 --fast 64K --host 64K "
		"--nvme-path %s/no/such/dir/f 2>&1", bin, model, path, dir);
	REFUSED("lower --host", "%s -m %s --prompt-ids %s -n 8 --host 100T 2>&1", bin, model, path);
	REFUSED("not a token id", "echo '1 2 x' > %s/bad.txt; %s -m %s --prompt-ids %s/bad.txt 2>&1",
		dir, bin, model, dir);
	REFUSED("outside the vocabulary", "echo '1 2 99999' > %s/bad.txt; %s -m %s --prompt-ids "
		"%s/bad.txt 2>&1", dir, bin, model, dir);
	REFUSED("-p TEXT or -f FILE", "%s -m %s --prompt-ids %s --tokenize 2>&1", bin, model, path);
	REFUSED("tensor", "head -c 100000 %s > %s/cut.gguf; %s -m %s/cut.gguf -p hi 2>&1",
		model, dir, bin, dir);
	REFUSED("checksum", "cp %s/conv.kvts %s/bad.kvts && printf 'X' | dd of=%s/bad.kvts bs=1 "
		"seek=3000 conv=notrunc 2>/dev/null; %s -m %s --restore %s/bad.kvts -n 2 --ctx 512 2>&1",
		dir, dir, dir, bin, model, dir);
	/* The refused runs left nothing behind in the NVMe directory. */
	CHECK_EQ(run("ls %s | grep -v -e '^m.gguf$' -e '.f32$' -e '^ids.txt$' -e '.kvts$' "
		     "-e '^bad.txt$' -e '^cut.gguf$' -e '^tok.txt$' -e '^fast.ini$' | wc -l", dir), 0);
	CHECK_EQ(atoi(out), 0);
	CHECK_EQ(stat(model, &st), 0);
	run("rm -rf %s", dir);
	return 0;
}
