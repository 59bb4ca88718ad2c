/* SPDX-License-Identifier: MIT */
/*
 * kvt-run: generate text from a GGUF Llama-family model whose KV cache
 * lives in the pager's tiers (fast, host, NVMe).
 *
 *   kvt-run -m model.gguf -p "Once upon a time" -n 128
 *   kvt-run -m model.gguf -f long.txt -n 64 --fast 64M --host 128M
 *
 * Generated text goes to stdout as it comes; progress bars (on a
 * terminal), timings and the tier table go to stderr. --json prints one
 * JSON object on stdout instead. Every check that can be made before the
 * work starts is made first, with a message that says what to change.
 *
 * main() is the run in order: parse_options fills struct opts (the
 * config file, then the flags); load reads the model and the prompt,
 * sizes the tiers and opens the pager and the engine; prefill, generate;
 * report prints the results; finish saves, ends the trace and frees.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <kvt/pager.h>
#include "pager/afile.h"
#include "runtime/infer.h"
#include "runtime/sampler.h"
#include "runtime/tokenizer.h"
#include "tools/cli.h"

#define MAX_BATCH 64

struct opts {
	const char *model, *prompt, *prompt_file, *prompt_ids, *dump_logits;
	const char *save, *restore, *metrics, *control, *trace;
	unsigned n_predict, n_ctx, batch, threads;
	int json, dense, print_config, tokenize, ignore_eos, no_bar, page_set;
	int tier_set[KVT_NTIERS];
	struct kvt_sampler_params sp;
	struct kvt_engine_params ep;
	struct kvt_config cfg;
};

static const char *prog = "kvt-run";

/* What must not outlive the process: the pager (whose close removes the
 * NVMe file it created) on an error exit, and that file on a signal. */
static struct kvt_pager *live_pager;
static char created_path[KVT_PATH_MAX];
/* --dump-logits goes to a temporary, renamed into place at the end
 * (pager/afile.h); an error exit removes it. */
static struct kvt_afile dump_file = { .fd = -1 };

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvt-run -m MODEL [-p TEXT | -f FILE | --prompt-ids FILE] [options]\n"
		"\n"
		"model and prompt\n"
		"  -m, --model FILE      GGUF model: llama or qwen2; F32, F16, BF16, Q4_0 to Q8_0,\n"
		"                        Q2_K to Q6_K (the _S/_M/_L mixes)\n"
		"  -p, --prompt TEXT     prompt text\n"
		"  -f, --file FILE       prompt text from a file (long documents)\n"
		"      --prompt-ids FILE prompt as whitespace-separated token ids\n"
		"  -n, --predict N       tokens to generate (128)\n"
		"      --ctx N           context per sequence (prompt + N, rounded up to a page)\n"
		"      --batch N         sequences generated together from the prompt, which\n"
		"                        they share (its pages computed once) (1)\n"
		"      --ignore-eos      keep going past the end-of-text token\n"
		"sampling\n"
		"      --temp T          temperature; 0 = greedy (0.8)\n"
		"      --top-k N         keep the N most likely tokens; 0 = all (40)\n"
		"      --top-p P         keep the smallest set with probability >= P (0.95)\n"
		"      --seed N          random seed (1)\n"
		"tiers (any config key also works: --set KEY=VALUE, docs/config.md)\n"
		"  -c, --config FILE     INI file; the flags below override it\n"
		"      --set KEY=VALUE   one config key, e.g. --set io.depth=64\n"
		"      --fast SIZE       fast tier (default: what the KV needs, at most 1G)\n"
		"      --host SIZE       host tier (default: what the KV needs, at most 4G)\n"
		"      --nvme SIZE       NVMe tier (default: what the KV needs, at most 64G)\n"
		"      --nvme-path PATH  file, block device or directory for the NVMe tier\n"
		"      --device NAME     where the fast tier and the kernels are: cuda (a GPU), cpu,\n"
		"                        or auto: cuda where one is usable, else cpu (auto)\n"
		"      --policy [TIER=]NAME  eviction policy of one tier, or of all\n"
		"      --prefetch N      layers prefetched ahead of attention\n"
		"      --page-tokens N   tokens per page (16)\n"
		"      --kv-type T       f16, f32, q8_0 or q4_0 (f16; q8_0, q4_0: GGML's 8-bit and\n"
		"                        4-bit blocks, 17/32 and 9/32 of f16's bytes, cpu backend\n"
		"                        only)\n"
		"      --dense           reference path: KV in plain memory, no pager\n"
		"      --select SPEC     pages each decode step attends to: full (all, the default),\n"
		"                        or quest:pages=K | quest:frac=F [,sink=N] (the first N\n"
		"                        pages, the tail and the best by a bound on q.k; the rest\n"
		"                        are never read: approximate attention, runtime/README.md)\n"
		"      --no-scores       do not report attention masses to the pager (h2o ranks by them)\n"
		"  -t, --threads N       compute threads (one per cpu)\n"
		"sessions\n"
		"      --save FILE       save the conversation (tokens and KV) at the end\n"
		"      --restore FILE    start from a saved conversation (no prefill)\n"
		"output\n"
		"      --dump-logits FILE  each generated token's logits, raw little-endian\n"
		"                        float32 rows of n_vocab: per step, one row for each\n"
		"                        sequence still generating, in sequence order\n"
		"      --json            one JSON object on stdout: text, ids, timings, stats\n"
		"      --metrics FILE    the pager's stats in Prometheus text format, rewritten\n"
		"                        every second of decode and at the end\n"
		"      --control PATH    serve the control socket (kvtctl) at PATH while running;\n"
		"                        \"default\": $XDG_RUNTIME_DIR/kvtier.sock or the like\n"
		"      --trace FILE      record what the pager does, from its open to the end, into\n"
		"                        FILE (docs/trace-format.md; inspect with kvt-trace)\n"
		"      --no-progress     no progress bars\n"
		"      --print-config    print the effective configuration and exit\n"
		"      --tokenize        print the prompt's token ids (what --prompt-ids reads) and\n"
		"                        exit\n"
		"      --version         print the version and the build's features, and exit\n"
		"environment\n"
		"  KVT_SIMD=0|1          hold the cpu kernels to portable C, or to AVX2\n"
		"  KVT_EXACT_DOTS=1      quantized weights multiply f32 activations: no 8-bit\n"
		"                        activations in decode, no bf16 tiles or dots in prefill;\n"
		"                        f32 queries on q8_0 and q4_0 K\n"
		"  KVT_AMX=0|dots        the prefill's products on quantized weights: OpenBLAS's\n"
		"                        sgemm (0), or AVX512-BF16 dot products where the cpu has\n"
		"                        them (dots; the default on AMD cpus without AMX tiles)\n"
		"  KVT_BLAS_KEEP=1       keep the kernels OpenBLAS chose, even if weaker than the cpu\n"
		"  KVT_MODEL_MMAP=1      map the model file instead of reading it into memory\n");
}

/* What lies behind an -EIO from the pager, as ": page 7 (...) lost:
 * checksum mismatch reading tier nvme at offset ..."; "" for any other
 * error, or when the pager lost no page. */
static const char *lost_page(int r)
{
	static char line[320];

	line[0] = 0;
	if (r == -EIO && live_pager) {
		line[0] = ':';
		line[1] = ' ';
		if (!kvt_pager_last_error(live_pager, NULL, line + 2, sizeof(line) - 2))
			line[0] = 0;
	}
	return line;
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;

	cli_bar_done();
	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	kvt_afile_abort(&dump_file);
	kvt_pager_close(live_pager);
	exit(1);
}

/* --metrics: the pager's stats in the Prometheus text format, the file
 * replaced whole (a temporary renamed over it) so that a reader such as
 * node_exporter's textfile collector never sees half of it. 0, or 1 after
 * a message. */
static int write_metrics(struct kvt_pager *pg, const char *path)
{
	static char text[65536];
	struct kvt_stats st;
	char err[600];
	int n;

	if ((n = kvt_pager_stats(pg, &st)) || (n = kvt_stats_prometheus(&st, text, sizeof(text))) < 0) {
		fprintf(stderr, "%s: --metrics %s: %s\n", prog, path, strerror(-n));
		return 1;
	}
	if (kvt_afile_put(path, 0644, text, (size_t)n, err, sizeof(err))) {
		fprintf(stderr, "%s: --metrics %s\n", prog, err);
		return 1;
	}
	return 0;
}

static void on_signal(int sig)
{
	if (created_path[0])
		unlink(created_path);	/* async-signal-safe; the pager would have removed it */
	signal(sig, SIG_DFL);
	raise(sig);
}

static unsigned parse_uint(const char *flag, const char *s, unsigned lo, unsigned hi)
{
	unsigned long long v;
	char *end;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || v < lo || v > hi) {
		fprintf(stderr, "%s: %s: \"%s\" is not an integer in %u..%u\n", prog, flag, s, lo, hi);
		exit(2);
	}
	return (unsigned)v;
}

static float parse_float(const char *flag, const char *s, float lo, float hi)
{
	char *end;
	float v;

	errno = 0;
	v = strtof(s, &end);
	if (errno || end == s || *end || !(v >= lo && v <= hi)) {
		fprintf(stderr, "%s: %s: \"%s\" is not a number in %g..%g\n", prog, flag, s,
			(double)lo, (double)hi);
		exit(2);
	}
	return v;
}

/* A key given by the config file or a flag: kvt-run leaves its value alone,
 * even where it equals the default, and chooses only what was not given
 * (tier sizes, page tokens). */
static void key_given(void *arg, const char *key)
{
	struct opts *o = arg;
	int t;

	for (t = 0; t < KVT_NTIERS; t++) {
		char k[32];

		snprintf(k, sizeof(k), "tier.%s.bytes", kvt_tier_name(t));
		if (!strcmp(key, k))
			o->tier_set[t] = 1;
	}
	if (!strcmp(key, "geometry.page_tokens"))
		o->page_set = 1;
}

static void set_key(struct opts *o, const char *key, const char *val)
{
	char err[512];

	if (kvt_config_set(&o->cfg, key, val, err, sizeof(err))) {
		fprintf(stderr, "%s: %s\n", prog, err);
		exit(2);
	}
	key_given(o, key);
}

static void set_policy(struct opts *o, const char *arg)
{
	const char *eq = strchr(arg, '='), *colon = strchr(arg, ':');
	char key[64];
	int t;

	if (colon && eq && colon < eq)
		eq = NULL;	/* NAME:key=value: a policy's parameters, every tier */

	for (t = 0; t < KVT_NTIERS; t++) {
		size_t n = strlen(kvt_tier_name(t));

		if (eq && (size_t)(eq - arg) == n && !strncmp(arg, kvt_tier_name(t), n)) {
			snprintf(key, sizeof(key), "tier.%s.policy", kvt_tier_name(t));
			set_key(o, key, eq + 1);
			return;
		}
	}
	if (eq) {
		fprintf(stderr, "%s: --policy %s: the tier must be fast, host or nvme\n", prog, arg);
		exit(2);
	}
	for (t = 0; t < KVT_NTIERS; t++) {
		snprintf(key, sizeof(key), "tier.%s.policy", kvt_tier_name(t));
		set_key(o, key, arg);
	}
}

/* While the pager opens, its first error is held back to end the "cannot
 * open the pager" line: the one line that says why. */
static int hold_error;
static char held_error[512];

static void log_cb(void *arg, int level, const char *msg)
{
	(void)arg;
	if (hold_error && level == KVT_LOG_ERROR && !held_error[0]) {
		snprintf(held_error, sizeof(held_error), "%s", msg);
		return;
	}
	if (level <= KVT_LOG_WARN) {
		cli_bar_done();
		fprintf(stderr, "%s: %s\n", prog, msg);
	}
}

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t cap = 0, n = 0;

	if (!f)
		die("%s: %s", path, strerror(errno));
	for (;;) {
		if (n + 4096 + 1 > cap) {
			cap = cap ? cap * 2 : 65536;
			if (!(buf = realloc(buf, cap)))
				die("%s: out of memory", path);
		}
		size_t r = fread(buf + n, 1, cap - n - 1, f);

		n += r;
		if (r == 0)
			break;
	}
	if (ferror(f))
		die("%s: read error", path);
	fclose(f);
	buf[n] = 0;
	*len = n;
	return buf;
}

/* Token ids, whitespace-separated. */
static int32_t *read_ids(const char *path, uint32_t n_vocab, unsigned *n)
{
	size_t len, cap = 0;
	char *text = read_file(path, &len), *p = text, *end;
	int32_t *ids = NULL;

	*n = 0;
	for (;;) {
		long long v;

		while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
			p++;
		if (!*p)
			break;
		errno = 0;
		v = strtoll(p, &end, 10);
		if (end == p || errno || (*end && !strchr(" \t\r\n", *end)))
			die("%s: byte %zu: \"%.*s\" is not a token id", path, (size_t)(p - text),
			    (int)strcspn(p, " \t\r\n") < 16 ? (int)strcspn(p, " \t\r\n") : 16, p);
		if (v < 0 || v >= n_vocab)
			die("%s: byte %zu: token id %lld is outside the vocabulary (0..%u)",
			    path, (size_t)(p - text), v, n_vocab - 1);
		if (*n == cap && !(ids = realloc(ids, (cap = cap ? cap * 2 : 1024) * sizeof(*ids))))
			die("%s: out of memory", path);
		ids[(*n)++] = (int32_t)v;
		p = end;
	}
	free(text);
	return ids;
}

static int32_t *tokenize_text(const struct kvt_tokenizer *tok, const char *text, size_t len,
			      int add_bos, unsigned *n)
{
	int32_t *ids = malloc(64 * sizeof(*ids));
	int need = ids ? kvt_tokenize(tok, text, len, add_bos, ids, 64) : -ENOMEM;

	if (need > 64) {
		int32_t *bigger = realloc(ids, (size_t)need * sizeof(*ids));

		if (!bigger)
			die("out of memory for %d prompt tokens", need);
		ids = bigger;
		need = kvt_tokenize(tok, text, len, add_bos, ids, (size_t)need);
	}
	if (need < 0)
		die("cannot tokenize the prompt: %s", strerror(-need));
	*n = (unsigned)need;
	return ids;
}

/* Checks made before anything is allocated: each says what to change. */
static void check_nvme_path(const char *path)
{
	struct stat st;
	char *dup, *dir;

	if (!path[0])
		return;
	if (!stat(path, &st)) {
		if (S_ISDIR(st.st_mode) && access(path, W_OK | X_OK))
			die("nvme path %s: directory is not writable (%s); give another --nvme-path",
			    path, strerror(errno));
		if (!S_ISDIR(st.st_mode) && !S_ISBLK(st.st_mode))
			die("nvme path %s already exists and is not a directory or block device; "
			    "remove it or give another --nvme-path", path);
		if (S_ISBLK(st.st_mode) && access(path, R_OK | W_OK))
			die("nvme path %s: %s", path, strerror(errno));
		return;
	}
	if (errno != ENOENT)
		die("nvme path %s: %s", path, strerror(errno));
	if (path[strlen(path) - 1] != '/')
		snprintf(created_path, sizeof(created_path), "%s", path);
	dup = strdup(path);
	dir = dup ? dirname(dup) : NULL;
	if (!dir || access(dir, W_OK | X_OK))
		die("nvme path %s: directory %s is missing or not writable; give another --nvme-path",
		    path, dir ? dir : "?");
	free(dup);
}

static double mib(uint64_t b) { return (double)b / (1 << 20); }

/* "512 KiB", "1.5 MiB", "2.0 GiB": sizes in messages a user copies into a flag. */
static const char *human(uint64_t b, char *buf, size_t len)
{
	if (b < (1u << 20))
		snprintf(buf, len, "%lluK", (unsigned long long)((b + 1023) >> 10));
	else if (b < (1ull << 30))
		snprintf(buf, len, "%.1fM", (double)b / (1 << 20) + 0.05);
	else
		snprintf(buf, len, "%.2fG", (double)b / (1 << 30) + 0.005);
	return buf;
}

static void plan_tiers(struct opts *o, const struct kvt_model *m, unsigned n_prompt)
{
	struct kvt_config *c = &o->cfg;
	uint64_t pb = kvt_config_page_bytes(c), frames[KVT_NTIERS], total = 0;
	uint64_t pages_seq = (o->n_ctx + c->page_tokens - 1) / c->page_tokens;
	uint64_t shared = n_prompt / c->page_tokens;	/* whole prompt pages forks share */
	uint64_t need = (uint64_t)m->hp.n_layer * (pages_seq + (o->batch - 1) * (pages_seq - shared));
	uint64_t tails = (uint64_t)m->hp.n_layer * o->batch * 2;
	/* Frames beyond the pages themselves: a page moving between two full
	 * tiers needs a free frame on the way, and clean copies take room. */
	uint64_t spare = 64 + need / 32;
	uint64_t left = need, mem = 0;
	struct sysinfo si;
	char hb[32];
	int t;

	/* A tier whose size was not given gets what the KV needs, at most its
	 * default; NVMe, where space is cheap, room for all of it. */
	for (t = 0; t < KVT_NTIERS; t++) {
		uint64_t want = t == KVT_TIER_NVME ? need + spare : left + tails;

		/* The tier batches read from keeps up to an eighth of its frames
		 * (and at least 8) for pages on their way in, out of its
		 * policy's share: room for them too, or a KV that should fit
		 * all in the fast tier spills. */
		if (t != KVT_TIER_NVME && left)
			want += want / 7 + 8;

		if (!o->tier_set[t] && c->tier[t].bytes / pb > want)
			c->tier[t].bytes = want * pb;
		frames[t] = c->tier[t].bytes / pb;
		left = left > frames[t] ? left - frames[t] : 0;
		total += frames[t];
	}
	if (o->dense)
		return;
	if (frames[KVT_TIER_FAST] < tails)
		die("the fast tier holds %llu pages of %llu KiB but %u sequence(s) of %u layers need %llu "
		    "(a tail page each, and room to bring one in): raise --fast to at least %s",
		    (unsigned long long)frames[0], (unsigned long long)(pb >> 10), o->batch,
		    m->hp.n_layer, (unsigned long long)tails, human(tails * pb, hb, sizeof(hb)));
	if (need + tails + spare > total)
		die("a context of %u tokens x %u sequence(s) needs %.1f MiB of KV (%llu pages, with %llu "
		    "spare for moving them) but the tiers hold %.1f MiB in all: raise --nvme (or --host), "
		    "or lower --ctx/--batch", o->n_ctx, o->batch, mib((need + tails + spare) * pb),
		    (unsigned long long)(need + tails + spare), (unsigned long long)spare,
		    mib(total * pb));
	if (!sysinfo(&si)) {
		uint64_t ram = (uint64_t)si.totalram * si.mem_unit;

		mem = m->weight_bytes + c->tier[KVT_TIER_FAST].bytes + c->tier[KVT_TIER_HOST].bytes;
		if (mem > ram)
			die("the model (%.0f MiB) plus the fast and host tiers (%.0f MiB) need more than "
			    "this machine's %.0f MiB of memory: lower --host or --fast",
			    mib(m->weight_bytes),
			    mib(c->tier[KVT_TIER_FAST].bytes + c->tier[KVT_TIER_HOST].bytes), mib(ram));
	}
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	size_t len = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3 :
		     (s[0] & 0xf8) == 0xf0 ? 4 : 0;
	uint32_t cp;

	if (!len || len > n)
		return 0;
	cp = len == 1 ? s[0] : s[0] & (0x7f >> len);
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	/* overlong forms, surrogates and values past U+10FFFF are not UTF-8 */
	if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
	    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
		return 0;
	return len;
}

/* A JSON string of len bytes: control bytes escaped, bytes that are not
 * valid UTF-8 (a model may emit any byte token) as U+FFFD. */
static void json_str(FILE *f, const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0, n;

	fputc('"', f);
	while (i < len) {
		unsigned char c = u[i];

		if (!(n = utf8_len(u + i, len - i))) {
			fputs("\\ufffd", f);
			i++;
			continue;
		}
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", f);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fwrite(u + i, 1, n, f);
		i += n;
	}
	fputc('"', f);
}

struct out_seq {
	int32_t *ids;
	unsigned n;
	char *text;
	size_t len, cap;
	int done, err;
};

static void append_text(struct out_seq *q, const char *p, size_t n)
{
	if (q->len + n + 1 > q->cap) {
		q->cap = (q->len + n + 1) * 2;
		if (!(q->text = realloc(q->text, q->cap)))
			die("out of memory");
	}
	memcpy(q->text + q->len, p, n);
	q->len += n;
}

static void on_prefill(void *arg, unsigned done)
{
	const unsigned *total = arg;
	char ex[64];

	snprintf(ex, sizeof(ex), "%u/%u tokens", done, *total);
	cli_bar("prefill", (double)done / *total, ex);
}

/* Fill *o from the command line: the config file first, then the flags
 * over it. Returns -1 when the run should go on, else the exit status
 * (0 after --help, 2 on a usage error, said on stderr). */
static int parse_options(int argc, char **argv, struct opts *o)
{
	enum { O_PROMPT_IDS = 256, O_CTX, O_BATCH, O_EOS, O_TEMP, O_TOPK, O_TOPP, O_SEED, O_SET,
	       O_FAST, O_HOST, O_NVME, O_NVME_PATH, O_POLICY, O_PREFETCH, O_PAGE, O_KVTYPE,
	       O_DENSE, O_SAVE, O_RESTORE, O_DUMP, O_JSON, O_NOBAR, O_PRINTCFG, O_TOKENIZE, O_METRICS,
	       O_CONTROL, O_SELECT, O_NOSCORES, O_TRACE, O_DEVICE };
	static const struct option lo[] = {
		{ "model", required_argument, 0, 'm' }, { "prompt", required_argument, 0, 'p' },
		{ "file", required_argument, 0, 'f' }, { "prompt-ids", required_argument, 0, O_PROMPT_IDS },
		{ "predict", required_argument, 0, 'n' }, { "ctx", required_argument, 0, O_CTX },
		{ "batch", required_argument, 0, O_BATCH }, { "ignore-eos", no_argument, 0, O_EOS },
		{ "temp", required_argument, 0, O_TEMP }, { "top-k", required_argument, 0, O_TOPK },
		{ "top-p", required_argument, 0, O_TOPP }, { "seed", required_argument, 0, O_SEED },
		{ "config", required_argument, 0, 'c' }, { "set", required_argument, 0, O_SET },
		{ "fast", required_argument, 0, O_FAST }, { "host", required_argument, 0, O_HOST },
		{ "nvme", required_argument, 0, O_NVME }, { "nvme-path", required_argument, 0, O_NVME_PATH },
		{ "policy", required_argument, 0, O_POLICY }, { "prefetch", required_argument, 0, O_PREFETCH },
		{ "page-tokens", required_argument, 0, O_PAGE }, { "kv-type", required_argument, 0, O_KVTYPE },
		{ "dense", no_argument, 0, O_DENSE }, { "threads", required_argument, 0, 't' },
		{ "save", required_argument, 0, O_SAVE }, { "restore", required_argument, 0, O_RESTORE },
		{ "dump-logits", required_argument, 0, O_DUMP }, { "json", no_argument, 0, O_JSON },
		{ "no-progress", no_argument, 0, O_NOBAR }, { "print-config", no_argument, 0, O_PRINTCFG },
		{ "tokenize", no_argument, 0, O_TOKENIZE },
		{ "metrics", required_argument, 0, O_METRICS }, { "control", required_argument, 0, O_CONTROL },
		{ "trace", required_argument, 0, O_TRACE },
		{ "select", required_argument, 0, O_SELECT }, { "no-scores", no_argument, 0, O_NOSCORES },
		{ "device", required_argument, 0, O_DEVICE },
		{ "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 },
	};
	char err[1024];
	int c;

	*o = (struct opts){ .n_predict = 128, .batch = 1,
			    .sp = { .temp = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 1 } };
	kvt_config_default(&o->cfg);
	kvt_engine_params_default(&o->ep);
	o->ep.n_ctx = 0;
	/* The config file first, so flags override it whatever their order:
	 * a first pass over the options takes -c/--config only. */
	opterr = 0;
	while ((c = getopt_long(argc, argv, "m:p:f:n:c:t:h", lo, NULL)) != -1) {
		if (c != 'c')
			continue;
		if (kvt_config_load_keys(&o->cfg, optarg, key_given, o, err, sizeof(err))) {
			fprintf(stderr, "%s: %s\n", prog, err);
			return 2;
		}
	}
	opterr = 1;
	optind = 0;
	while ((c = getopt_long(argc, argv, "m:p:f:n:c:t:h", lo, NULL)) != -1) {
		switch (c) {
		case 'm': o->model = optarg; break;
		case 'p': o->prompt = optarg; break;
		case 'f': o->prompt_file = optarg; break;
		case O_PROMPT_IDS: o->prompt_ids = optarg; break;
		case 'n': o->n_predict = parse_uint("-n", optarg, 0, 1u << 24); break;
		case O_CTX: o->n_ctx = parse_uint("--ctx", optarg, 1, 1u << 24); break;
		case O_BATCH: o->batch = parse_uint("--batch", optarg, 1, MAX_BATCH); break;
		case O_EOS: o->ignore_eos = 1; break;
		case O_TEMP: o->sp.temp = parse_float("--temp", optarg, 0, 100); break;
		case O_TOPK: o->sp.top_k = parse_uint("--top-k", optarg, 0, 1u << 30); break;
		case O_TOPP: o->sp.top_p = parse_float("--top-p", optarg, 1e-6f, 1); break;
		case O_SEED: o->sp.seed = parse_uint("--seed", optarg, 0, 0xffffffffu); break;
		case 'c': break;
		case O_SET: {
			char *eq = strchr(optarg, '=');

			if (!eq) {
				fprintf(stderr, "%s: --set %s: expected KEY=VALUE\n", prog, optarg);
				return 2;
			}
			*eq = 0;
			set_key(o, optarg, eq + 1);
			break;
		}
		case O_FAST: set_key(o, "tier.fast.bytes", optarg); break;
		case O_HOST: set_key(o, "tier.host.bytes", optarg); break;
		case O_NVME: set_key(o, "tier.nvme.bytes", optarg); break;
		case O_NVME_PATH: set_key(o, "nvme.path", optarg); break;
		case O_DEVICE: set_key(o, "device.name", optarg); break;
		case O_POLICY: set_policy(o, optarg); break;
		case O_PREFETCH: set_key(o, "access.prefetch_depth", optarg); break;
		case O_PAGE: set_key(o, "geometry.page_tokens", optarg); break;
		case O_KVTYPE: {
			int t = kvt_kv_parse(optarg);

			if (t < 0) {
				fprintf(stderr, "%s: --kv-type: \"%s\" is not f16, f32, q8_0 or q4_0\n",
					prog, optarg);
				return 2;
			}
			o->ep.kv_type = t;
			break;
		}
		case O_DENSE: o->dense = 1; break;
		case O_SELECT:
			if (kvt_select_parse(&o->ep, optarg, err, sizeof(err))) {
				fprintf(stderr, "%s: --select: %s\n", prog, err);
				return 2;
			}
			break;
		case O_NOSCORES: o->ep.scores = 0; break;
		case 't': o->threads = parse_uint("-t", optarg, 1, 1024); break;
		case O_SAVE: o->save = optarg; break;
		case O_RESTORE: o->restore = optarg; break;
		case O_DUMP: o->dump_logits = optarg; break;
		case O_JSON: o->json = 1; break;
		case O_NOBAR: o->no_bar = 1; break;
		case O_PRINTCFG: o->print_config = 1; break;
		case O_TOKENIZE: o->tokenize = 1; break;
		case O_METRICS: o->metrics = optarg; break;
		case O_CONTROL: o->control = optarg; break;
		case O_TRACE: o->trace = optarg; break;
		case 'h': usage(stdout); return 0;
		default: fprintf(stderr, "%s: see --help\n", prog); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "%s: unexpected argument \"%s\" (see --help)\n", prog, argv[optind]);
		return 2;
	}
	if (!o->model) {
		fprintf(stderr, "%s: -m MODEL is required (make one with kvt-mkmodel; see --help)\n", prog);
		return 2;
	}
	if (!!o->prompt + !!o->prompt_file + !!o->prompt_ids > 1) {
		fprintf(stderr, "%s: give one of -p, -f and --prompt-ids\n", prog);
		return 2;
	}
	if (!o->prompt && !o->prompt_file && !o->prompt_ids && !o->restore) {
		fprintf(stderr, "%s: no prompt: give -p TEXT, -f FILE, --prompt-ids FILE or --restore FILE\n", prog);
		return 2;
	}
	if (o->dense && (o->ep.select_pages || o->ep.select_frac > 0)) {
		fprintf(stderr, "%s: --select chooses among the pager's pages; drop --dense\n", prog);
		return 2;
	}
	if (o->trace && o->dense) {
		fprintf(stderr, "%s: --trace records what the pager does; --dense runs without it\n", prog);
		return 2;
	}
	if ((o->restore || o->save) && o->batch > 1) {
		fprintf(stderr, "%s: --save and --restore keep one conversation; drop --batch\n", prog);
		return 2;
	}
	if (o->save) {
		char *dup = strdup(o->save), *d = dup ? dirname(dup) : NULL;

		if (!d || access(d, W_OK | X_OK)) {
			fprintf(stderr, "%s: --save %s: directory %s is missing or not writable\n", prog,
				o->save, d ? d : "?");
			return 2;
		}
		free(dup);
	}
	return -1;
}

/* What a run holds, from the model to the generated text; run_free
 * releases it. */
struct run {
	struct kvt_model *m;
	struct kvt_device *dev;			/* NULL with --dense */
	struct kvt_pager *pg;			/* NULL with --dense */
	struct kvt_control *ctl;		/* with --control */
	struct kvt_engine *e;
	struct kvt_session *ss[MAX_BATCH];	/* (batch) one per sequence */
	struct kvt_sampler *smp[MAX_BATCH];	/* (batch) */
	struct out_seq out[MAX_BATCH];		/* (batch) what each generated */
	int32_t *prompt;			/* (n_prompt) token ids */
	unsigned n_prompt;
	unsigned n_steps, n_fed;		/* decode steps, tokens they ran */
	double t_load, t_prefill, t_decode;	/* seconds */
	struct kvt_stats st0;			/* the pager's, as decode began */
	FILE *dump;				/* --dump-logits */
	char kernels[320];			/* what the engine computes with */
};

/* The prompt's token ids, read or tokenized, and the context they need
 * (o->n_ctx, when not given). */
static void load_prompt(struct opts *o, struct run *run)
{
	const struct kvt_model *m = run->m;
	char err[1024];

	if (o->prompt_ids) {
		run->prompt = read_ids(o->prompt_ids, m->hp.n_vocab, &run->n_prompt);
	} else if (o->prompt || o->prompt_file) {
		size_t len;
		char *text = o->prompt ? strdup(o->prompt) : read_file(o->prompt_file, &len);

		if (!text)
			die("out of memory");
		/* a new conversation starts with BOS if the vocabulary asks for
		 * one (tokenizer.ggml.add_bos_token); the continuation of a
		 * restored one takes none */
		run->prompt = tokenize_text(m->tok, text, strlen(text), o->restore ? 0 : -1,
					    &run->n_prompt);
		free(text);
	}
	if (o->tokenize)
		return;
	if (!o->restore && !run->n_prompt)
		die("the prompt is empty");

	unsigned pt = o->cfg.page_tokens;
	uint64_t want = (uint64_t)run->n_prompt + o->n_predict + (o->save ? 1 : 0);

	if (o->restore) {
		unsigned saved;

		if (kvt_session_peek(o->restore, &saved, err, sizeof(err)))
			die("%s", err);
		want += saved;
	}
	if (!o->n_ctx)
		o->n_ctx = (unsigned)((want + pt - 1) / pt * pt);
	else if (want > o->n_ctx)
		die("the %s is %llu tokens and -n asks for %u more, but --ctx is %u: raise --ctx "
		    "to at least %llu or shorten the prompt", o->restore ? "conversation" : "prompt",
		    (unsigned long long)(want - o->n_predict - (o->save ? 1 : 0)), o->n_predict,
		    o->n_ctx, (unsigned long long)want);
}

/* The device, the pager and what serves it (trace, control socket). */
static void open_pager(struct opts *o, struct run *run)
{
	char why[1024];
	int r;

	if ((r = kvt_device_open_why(o->cfg.device, o->cfg.copy_gbps, &run->dev, why, sizeof(why))))
		die("--device %s: %s", o->cfg.device, why[0] ? why : strerror(-r));
	if (why[0] && !o->json)
		fprintf(stderr, "%s: device: %s\n", prog, why);
	kvt_device_set_log(run->dev, log_cb, NULL);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	signal(SIGPIPE, on_signal);
	hold_error = 1;
	r = kvt_pager_open(&o->cfg, run->dev, &run->pg);
	hold_error = 0;
	if (r)
		die("cannot open the pager: %s", held_error[0] ? held_error : strerror(-r));
	if (held_error[0])
		fprintf(stderr, "%s: %s\n", prog, held_error);
	live_pager = run->pg;
	if (o->trace && (r = kvt_pager_trace_start(run->pg, o->trace)))
		die("--trace %s: %s", o->trace, strerror(-r));
	if (o->control && (r = kvt_control_start(run->pg, strcmp(o->control, "default") ?
						 o->control : NULL, &run->ctl)))
		die("--control %s: %s", o->control, strerror(-r));
	if (o->cfg.metrics_http[0] && !o->json) {
		struct kvt_stats st;

		kvt_pager_stats(run->pg, &st);
		fprintf(stderr, "%s: metrics: http port %d (GET /metrics)\n", prog,
			st.metrics_http_port);
	}
}

/* Everything before the first token: the model, the prompt, the checks,
 * the tiers, the engine. Returns -1 when the run should go on, or the exit
 * status after --tokenize or --print-config; dies on an error. */
static int load(struct opts *o, struct run *run)
{
	char err[1024], hb[4][32];
	double t0;
	int r;

	cli_bar_on = isatty(2) && !o->no_bar;
	o->cfg.log = log_cb;

	t0 = cli_now();
	if ((r = kvt_model_load(o->model, &run->m, err, sizeof(err))))
		die("%s", err);
	kvt_engine_pager_geometry(run->m, o->ep.kv_type, &o->cfg);
	if (!o->page_set) {
		/* Pages of whole 4 KiB blocks, for O_DIRECT: small models need more tokens a page. */
		while (kvt_config_page_bytes(&o->cfg) % 4096)
			o->cfg.page_tokens *= 2;
	}

	load_prompt(o, run);
	if (o->tokenize) {
		if (!o->prompt && !o->prompt_file)
			die("--tokenize takes a text prompt: give -p TEXT or -f FILE");
		for (unsigned k = 0; k < run->n_prompt; k++)
			printf("%d%c", run->prompt[k], k + 1 == run->n_prompt ? '\n' : ' ');
		return 0;
	}
	if (o->n_ctx > run->m->hp.n_ctx_train && !o->json)
		fprintf(stderr, "%s: note: a context of %u tokens is beyond the %u the model was trained on\n",
			prog, o->n_ctx, run->m->hp.n_ctx_train);
	o->ep.n_ctx = o->n_ctx;
	o->ep.n_threads = o->threads;
	o->ep.max_batch = o->batch;
	o->ep.dense = o->dense;

	if ((r = kvt_config_validate(&o->cfg, err, sizeof(err))))
		die("%s", err);
	plan_tiers(o, run->m, run->n_prompt);
	if (o->print_config) {
		char buf[16384];

		if (kvt_config_print(&o->cfg, buf, sizeof(buf)) < 0)
			die("configuration too large to print");
		fputs(buf, stdout);
		return 0;
	}
	if (!o->dense)
		check_nvme_path(o->cfg.nvme_path);
	if (o->dump_logits) {
		if (kvt_afile_open(&dump_file, o->dump_logits, 0644, err, sizeof(err)))
			die("--dump-logits %s", err);
		if (!(run->dump = kvt_afile_stdio(&dump_file)))
			die("--dump-logits %s: %s", o->dump_logits, strerror(errno));
	}

	if (!o->dense)
		open_pager(o, run);
	if ((r = kvt_engine_new(run->m, run->pg, &o->ep, &run->e, err, sizeof(err))))
		die("%s", err);
	run->t_load = cli_now() - t0;
	kvt_engine_describe(run->e, run->kernels, sizeof(run->kernels));
	if (!o->json)
		fprintf(stderr, "%s: device %s; kernels: %s\n", prog,
			run->dev ? kvt_device_name(run->dev) : "none", run->kernels);

	const struct kvt_model *m = run->m;

	if (!o->json)
		fprintf(stderr, "%s: %s: %u layers, %u dims, %u heads (%u KV), %s weights, vocab %u; "
			"context %u, KV %s %s/sequence; fast %s, host %s, nvme %s; "
			"policy %s/%s/%s, prefetch %u%s\n",
			prog, m->name, m->hp.n_layer, m->hp.n_embd, m->hp.n_head, m->hp.n_head_kv,
			m->type, m->hp.n_vocab, o->n_ctx, kvt_kv_name(o->ep.kv_type),
			human(kvt_model_kv_bytes_per_token(m, o->ep.kv_type) * o->n_ctx,
			      hb[0], sizeof(hb[0])),
			human(o->cfg.tier[0].bytes, hb[1], sizeof(hb[1])),
			human(o->cfg.tier[1].bytes, hb[2], sizeof(hb[2])),
			human(o->cfg.tier[2].bytes, hb[3], sizeof(hb[3])),
			o->cfg.tier[0].policy, o->cfg.tier[1].policy, o->cfg.tier[2].policy,
			o->cfg.prefetch_depth, o->dense ? " (dense reference path: tiers unused)" : "");
	return -1;
}

/* Prefill (or restore), then fork the batch from the prompt and give each
 * sequence its sampler. */
static void prefill(const struct opts *o, struct run *run)
{
	char err[1024];
	double t0 = cli_now();
	unsigned i;
	int r;

	if (o->restore) {
		if ((r = kvt_session_restore(run->e, o->restore, &run->ss[0], err, sizeof(err))))
			die("%s", err);
	} else if ((r = kvt_session_new(run->e, &run->ss[0]))) {
		die("cannot open a sequence: %s", strerror(-r));
	}
	if (run->n_prompt) {
		r = kvt_eval(run->e, run->ss[0], run->prompt, run->n_prompt, on_prefill, &run->n_prompt);
		cli_bar_done();
		if (r == -ERANGE)
			die("the prompt does not fit the context of %u tokens: raise --ctx", o->n_ctx);
		if (r)
			die("prefill failed: %s%s", strerror(-r), lost_page(r));
	}
	if (!kvt_session_logits(run->ss[0]))
		die("the restored conversation has no logits to continue from: give a prompt");
	run->t_prefill = cli_now() - t0;
	for (i = 1; i < o->batch; i++)
		if ((r = kvt_session_fork(run->e, run->ss[0], kvt_session_len(run->ss[0]), &run->ss[i])))
			die("cannot fork sequence %u: %s", i, strerror(-r));
	for (i = 0; i < o->batch; i++) {
		struct kvt_sampler_params sp = o->sp;

		sp.seed = o->sp.seed + i;
		if ((r = kvt_sampler_new(&sp, run->m->hp.n_vocab, &run->smp[i])))
			die("sampler: %s", strerror(-r));
		if (!(run->out[i].ids = malloc((o->n_predict + 1) * sizeof(int32_t))))
			die("out of memory");
	}
}

/* Generate: sample from each sequence's logits, feed the tokens back together. */
static void generate(const struct opts *o, struct run *run)
{
	const struct kvt_model *m = run->m;
	double t0 = cli_now(), t_metrics = 0;
	unsigned i, step;
	int r, metrics_failed = 0;

	if (run->pg)
		kvt_pager_stats(run->pg, &run->st0);

	for (step = 0; step < o->n_predict; step++) {
		struct kvt_session *feed_ss[MAX_BATCH];
		int32_t feed[MAX_BATCH];
		unsigned nrun = 0;
		char piece[256], ex[64];

		for (i = 0; i < o->batch; i++) {
			struct out_seq *q = &run->out[i];
			const float *lg = kvt_session_logits(run->ss[i]);
			int32_t id;
			int len;

			if (q->done)
				continue;
			if (kvt_session_error(run->ss[i])) {
				q->done = 1;
				q->err = kvt_session_error(run->ss[i]);
				cli_bar_done();
				fprintf(stderr, "%s: sequence %u ended: %s%s%s\n", prog, i,
					strerror(-q->err), lost_page(q->err),
					o->batch > 1 ? "; the others go on" : "");
				continue;
			}
			id = kvt_sample(run->smp[i], lg);
			if (run->dump && fwrite(lg, sizeof(float), m->hp.n_vocab, run->dump) !=
			    m->hp.n_vocab)
				die("--dump-logits %s: %s", o->dump_logits, strerror(errno));
			q->ids[q->n++] = id;
			len = kvt_token_piece(m->tok, id, piece, sizeof(piece));
			if (len > (int)sizeof(piece))
				len = sizeof(piece);
			if (len > 0)
				append_text(q, piece, (size_t)len);
			if (o->batch == 1 && !o->json && len > 0) {
				if (cli_bar_on)
					fputs("\r\033[K", stderr);
				fwrite(piece, 1, (size_t)len, stdout);
				fflush(stdout);
			}
			if (id == kvt_tokenizer_eos(m->tok) && !o->ignore_eos) {
				q->done = 1;
				continue;
			}
			if (step + 1 < o->n_predict || o->save) {
				feed_ss[nrun] = run->ss[i];
				feed[nrun++] = id;
			}
		}
		if (!nrun)
			break;
		r = kvt_decode(run->e, feed_ss, feed, nrun);
		if (r < 0)
			die("decode failed: %s%s", strerror(-r), lost_page(r));
		run->n_steps++;
		run->n_fed += nrun;
		/* --metrics is rewritten as the run goes, at most once a second;
		 * after a failure (said once) only the final write is tried. */
		if (o->metrics && run->pg && !metrics_failed && cli_now() - t_metrics >= 1.0) {
			t_metrics = cli_now();
			metrics_failed = write_metrics(run->pg, o->metrics);
		}
		snprintf(ex, sizeof(ex), "%u/%u tokens", step + 1, o->n_predict);
		/* Text streaming to a terminal is its own progress; otherwise a bar. */
		if (o->batch > 1 || o->json || !isatty(1))
			cli_bar("decode", (double)(step + 1) / o->n_predict, ex);
	}
	run->t_decode = cli_now() - t0;
	cli_bar_done();
	for (i = 0; i < o->batch; i++)
		if (!run->out[i].err && kvt_session_error(run->ss[i])) {
			run->out[i].err = kvt_session_error(run->ss[i]);
			fprintf(stderr, "%s: sequence %u ended: %s%s\n", prog, i,
				strerror(-run->out[i].err), lost_page(run->out[i].err));
		}
	if (o->batch == 1 && !o->json)
		fputc('\n', stdout);
	if (run->dump) {
		char err[1024];

		if (kvt_afile_commit(&dump_file, err, sizeof(err)))
			die("--dump-logits %s", err);
	}
	run->dump = NULL;
}

/* The results: one JSON object on stdout, or the text of a batch on stdout
 * and the timings and tier table on stderr; --metrics. Returns 1 when
 * --metrics could not be written, else 0. */
static int report(const struct opts *o, const struct run *run)
{
	const struct kvt_model *m = run->m;
	struct kvt_stats st;
	struct kvt_engine_stats es;
	unsigned gen = 0, i, n_prompt = run->n_prompt;
	double t_prefill = run->t_prefill, t_decode = run->t_decode;
	char sel[64];
	int failed = 0;

	memset(&st, 0, sizeof(st));
	if (run->pg)
		kvt_pager_stats(run->pg, &st);
	kvt_engine_stats(run->e, &es);
	kvt_select_format(&o->ep, sel, sizeof(sel));
	for (i = 0; i < o->batch; i++)
		gen += run->out[i].n;
	if (o->json) {
		static char buf[32768];
		unsigned k;

		printf("{\"model\":");
		json_str(stdout, m->name, strlen(m->name));
		printf(",\"kernels\":");
		json_str(stdout, run->kernels, strlen(run->kernels));
		printf(",\"n_ctx\":%u,\"prompt_tokens\":%u,\"batch\":%u,\"load_s\":%.6f,"
		       "\"prefill\":{\"tokens\":%u,\"seconds\":%.6f,\"tokens_per_s\":%.3f},"
		       "\"decode\":{\"tokens\":%u,\"steps\":%u,\"seconds\":%.6f,\"tokens_per_s\":%.3f},"
		       "\"sequences\":[",
		       o->n_ctx, n_prompt, o->batch, run->t_load, n_prompt, t_prefill,
		       t_prefill > 0 ? n_prompt / t_prefill : 0.0, gen, run->n_steps, t_decode,
		       t_decode > 0 ? run->n_fed / t_decode : 0.0);
		for (i = 0; i < o->batch; i++) {
			const struct out_seq *q = &run->out[i];

			printf("%s{\"error\":", i ? "," : "");
			if (q->err)
				json_str(stdout, strerror(-q->err), strlen(strerror(-q->err)));
			else
				printf("null");
			printf(",\"text\":");
			json_str(stdout, q->text ? q->text : "", q->len);
			printf(",\"ids\":[");
			for (k = 0; k < q->n; k++)
				printf("%s%d", k ? "," : "", q->ids[k]);
			printf("]}");
		}
		printf("]");
		if (run->pg)
			printf(",\"select\":{\"spec\":\"%s\",\"decode_layers\":%llu,"
			       "\"pages_attended\":%llu,\"pages_skipped\":%llu,\"bytes_skipped\":%llu,"
			       "\"select_s\":%.6f,\"score_s\":%.6f,\"bound_bytes\":%llu}",
			       sel, (unsigned long long)es.decode_layers,
			       (unsigned long long)es.pages_attended,
			       (unsigned long long)es.pages_skipped,
			       (unsigned long long)es.bytes_skipped, es.select_ns / 1e9,
			       es.score_ns / 1e9, (unsigned long long)es.bound_bytes);
		if (run->pg) {
			const struct kvt_stats *a = &run->st0;

			printf(",\"decode_io\":{\"nvme_read_bytes\":%llu,\"nvme_written_bytes\":%llu,"
			       "\"min_bytes\":%llu,\"nvme_busy_s\":%.6f}",
			       (unsigned long long)(st.tier[KVT_TIER_NVME].bytes_out -
						    a->tier[KVT_TIER_NVME].bytes_out),
			       (unsigned long long)(st.tier[KVT_TIER_NVME].bytes_in -
						    a->tier[KVT_TIER_NVME].bytes_in),
			       (unsigned long long)(st.read_min_bytes - a->read_min_bytes),
			       (double)(st.nvme_busy_ns - a->nvme_busy_ns) / 1e9);
		}
		if (run->pg && kvt_stats_json(&st, buf, sizeof(buf)) > 0)
			printf(",\"pager\":%s", buf);
		if (st.metrics_http_port)
			printf(",\"metrics_http_port\":%d", st.metrics_http_port);
		printf("}\n");
	} else {
		for (i = 0; o->batch > 1 && i < o->batch; i++)
			printf("--- sequence %u%s\n%.*s\n", i, run->out[i].err ? " (ended early)" : "",
			       (int)run->out[i].len, run->out[i].text ? run->out[i].text : "");
		fprintf(stderr, "\nload %.2f s; prefill %u tokens in %.2f s (%.1f tokens/s); "
			"decode %u tokens in %.2f s (%.2f tokens/s, %u sequence(s))\n",
			run->t_load, n_prompt, t_prefill, t_prefill > 0 ? n_prompt / t_prefill : 0.0,
			gen, t_decode, t_decode > 0 ? run->n_fed / t_decode : 0.0, o->batch);
		if (run->pg) {
			fputc('\n', stderr);
			cli_print_tiers(stderr, &st);
			cli_print_decode_io(stderr, &run->st0, &st, run->n_steps, t_decode);
		}
		if (st.metrics_http_port)
			fprintf(stderr, "metrics: http port %d (GET /metrics)\n", st.metrics_http_port);
		if (run->pg && (o->ep.select_pages || o->ep.select_frac > 0))
			fprintf(stderr, "select %s: decode attended %llu pages, skipped %llu "
				"(over all layers and steps: %.1f MiB not read nor fetched, %.1f%%), "
				"choosing took %.1f ms; key bounds %.1f MiB\n", sel,
				(unsigned long long)es.pages_attended,
				(unsigned long long)es.pages_skipped, mib(es.bytes_skipped),
				es.pages_attended + es.pages_skipped ?
				100.0 * es.pages_skipped / (es.pages_attended + es.pages_skipped) : 0.0,
				es.select_ns / 1e6, mib(es.bound_bytes));
	}
	if (o->metrics && run->pg)
		failed |= write_metrics(run->pg, o->metrics);
	return failed;
}

/* Save the conversation (after the results are out, so a failed save
 * loses none of them), end the trace, release everything. Returns the
 * exit status: 1 when a sequence ended early or something could not be
 * written (failed), else 0. */
static int finish(const struct opts *o, struct run *run, int failed)
{
	char err[1024];
	unsigned i;
	int r;

	if (o->save && !run->out[0].err &&
	    kvt_session_save(run->e, run->ss[0], o->save, err, sizeof(err))) {
		fprintf(stderr, "%s: %s\n", prog, err);
		failed = 1;
	}
	for (i = 0; i < o->batch; i++) {
		kvt_session_free(run->e, run->ss[i]);
		kvt_sampler_free(run->smp[i]);
		free(run->out[i].ids);
		free(run->out[i].text);
		if (run->out[i].err)
			failed = 1;
	}
	kvt_engine_free(run->e);
	kvt_control_stop(run->ctl);
	/* After the sessions are freed (their pages' FREE records are in) and
	 * the control socket is gone (it could stop the trace too). */
	if (o->trace && run->pg) {
		struct kvt_stats tst;

		r = kvt_pager_trace_stop(run->pg);
		kvt_pager_stats(run->pg, &tst);
		if (r && r != -ENOENT) {
			fprintf(stderr, "%s: --trace %s: %s\n", prog, o->trace, strerror(-r));
			failed = 1;
		} else if (!o->json && r != -ENOENT) {
			fprintf(stderr, "%s: trace: %llu records (%llu dropped) in %s\n", prog,
				(unsigned long long)tst.trace_records,
				(unsigned long long)tst.trace_dropped, o->trace);
		}
	}
	kvt_pager_close(run->pg);
	live_pager = NULL;
	kvt_device_close(run->dev);
	kvt_model_free(run->m);
	free(run->prompt);
	return failed;
}

int main(int argc, char **argv)
{
	static struct opts o;
	static struct run run;
	int rc;

	if (cli_version(argc, argv, "kvt-run"))
		return 0;
	cli_blas_core(argv);
	if ((rc = parse_options(argc, argv, &o)) >= 0)
		return rc;
	if ((rc = load(&o, &run)) >= 0) {
		kvt_model_free(run.m);
		free(run.prompt);
		return rc;
	}
	prefill(&o, &run);
	generate(&o, &run);
	rc = report(&o, &run);
	return finish(&o, &run, rc);
}
