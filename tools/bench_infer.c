/* SPDX-License-Identifier: MIT */
/*
 * kvt-bench decode, resume and prefill: the inference runtime
 * (runtime/infer.h) over the pager, each figure printed beside the
 * reference it answers to, measured in the same run.
 *
 *   decode   decode tokens/s at long contexts over three tier set-ups,
 *            against max(the all-resident step time, the step's NVMe bytes
 *            at fio's sequential read rate)
 *   resume   time to the first new token of a conversation parked on NVMe,
 *            against recomputing its prefill
 *   prefill  prefill GFLOP/s against OpenBLAS sgemm on the prefill's own
 *            shapes; decode tokens/s against reading the weights and the KV
 *            once per token at the machine's read bandwidth
 *
 * The model is a synthetic Llama (runtime/synth.h) of the geometry on the
 * command line, written to a temporary file in --dir and unlinked as soon
 * as it is mapped; or -m FILE. K/V are f16. The pager is the cpu device's
 * (the fast tier is an arena in RAM), the NVMe tier a temporary file in
 * --dir ($TMPDIR or /tmp by default); tier sizes are whole pages. Medians
 * throughout; every run prints the command lines that reproduce it.
 */
#define _GNU_SOURCE
#include <cblas.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include <kvt/pager.h>
#include "kernels/cpu/kernels.h"
#include "runtime/gguf.h"
#include "runtime/infer.h"
#include "runtime/model.h"
#include "runtime/synth.h"
#include "tools/bench.h"

#define MAX_CTX		8	/* --ctx values */
#define MAX_SAMPLES	64	/* timed steps or repeats */
#define FIO_DEPTH	32	/* the pager's default io.depth */
#define FIO_BS		(1u << 20)	/* the pager's default io.max_io_bytes */
#define GEMM_CALLS	5	/* sgemm calls per shape and round (median) */

struct iopts {
	const char *sub;	/* "decode", "resume", "prefill" */
	const char *model;	/* -m FILE; NULL: synthetic of syn's geometry */
	struct kvt_synth syn;
	const char *dir;	/* as given; NULL: $TMPDIR or /tmp */
	char	 dirbuf[KVT_PATH_MAX];	/* the directory used */
	unsigned threads;	/* engine threads, 0 = one per online cpu */
	uint64_t ctx[MAX_CTX];
	int	 nctx;
	unsigned steps, warmup, repeat, tokens;
	uint64_t bw_bytes;	/* prefill: bandwidth buffer */
	double	 fio_seconds;
	const char *policy;	/* every tier's; NULL: the config's default */
	int	 prefetch;	/* prefetch_depth; -1: the config's default */
	const char *set[16];	/* KEY=VALUE config settings, in order */
	int	 nset;
	int	 json;
	unsigned convs, batch, history, system;	/* serve */
	unsigned max_batch;	/* the engine's; 0 = 1 */
	int	 kv_type;	/* enum kvt_kv_type (prefill's --kv-type; f16 elsewhere) */
};

static void fail(const struct iopts *o, const char *what, int r)
{
	fprintf(stderr, "kvt-bench %s: %s: %s\n", o->sub, what, strerror(r < 0 ? -r : r));
	exit(1);
}

static void failmsg(const struct iopts *o, const char *msg)
{
	fprintf(stderr, "kvt-bench %s: %s\n", o->sub, msg);
	exit(1);
}

static double mib(uint64_t b) { return (double)b / (1 << 20); }

static uint64_t round_up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

/* ---------------------------------------------------------------------
 * Options
 */

enum {
	O_LAYERS = 256, O_DIM, O_HEADS, O_KV_HEADS, O_FF, O_VOCAB, O_WTYPE, O_DIR, O_THREADS,
	O_CTX, O_STEPS, O_WARMUP, O_REPEAT, O_TOKENS, O_BW_BYTES, O_FIO_SECONDS, O_JSON,
	O_MODEL, O_HELP, O_POLICY, O_PREFETCH, O_SET, O_CONVS, O_BATCH, O_HISTORY, O_SYSTEM,
	O_KV_TYPE,
};

/* Which options a subcommand takes (bits of 1 << (code - O_LAYERS)). */
#define OBIT(c)		(1u << ((c) - O_LAYERS))
#define O_COMMON	(OBIT(O_LAYERS) | OBIT(O_DIM) | OBIT(O_HEADS) | OBIT(O_KV_HEADS) | \
			 OBIT(O_FF) | OBIT(O_VOCAB) | OBIT(O_WTYPE) | OBIT(O_DIR) | \
			 OBIT(O_THREADS) | OBIT(O_JSON) | OBIT(O_MODEL) | OBIT(O_HELP))
#define O_TIERS		(OBIT(O_POLICY) | OBIT(O_PREFETCH) | OBIT(O_SET))

static const struct option long_opts[] = {
	{ "layers", required_argument, 0, O_LAYERS }, { "dim", required_argument, 0, O_DIM },
	{ "heads", required_argument, 0, O_HEADS }, { "kv-heads", required_argument, 0, O_KV_HEADS },
	{ "ff", required_argument, 0, O_FF }, { "vocab", required_argument, 0, O_VOCAB },
	{ "wtype", required_argument, 0, O_WTYPE }, { "dir", required_argument, 0, O_DIR },
	{ "threads", required_argument, 0, O_THREADS }, { "ctx", required_argument, 0, O_CTX },
	{ "steps", required_argument, 0, O_STEPS }, { "warmup", required_argument, 0, O_WARMUP },
	{ "repeat", required_argument, 0, O_REPEAT }, { "tokens", required_argument, 0, O_TOKENS },
	{ "bw-bytes", required_argument, 0, O_BW_BYTES },
	{ "fio-seconds", required_argument, 0, O_FIO_SECONDS }, { "json", no_argument, 0, O_JSON },
	{ "model", required_argument, 0, O_MODEL }, { "help", no_argument, 0, O_HELP },
	{ "policy", required_argument, 0, O_POLICY },
	{ "prefetch", required_argument, 0, O_PREFETCH }, { "set", required_argument, 0, O_SET },
	{ "convs", required_argument, 0, O_CONVS }, { "batch", required_argument, 0, O_BATCH },
	{ "history", required_argument, 0, O_HISTORY }, { "system", required_argument, 0, O_SYSTEM },
	{ "kv-type", required_argument, 0, O_KV_TYPE },
	{ 0 } };

static const struct { const char *name; uint32_t type; } wtypes[] = {
	{ "f32", KVT_GGML_F32 }, { "f16", KVT_GGML_F16 }, { "bf16", KVT_GGML_BF16 },
	{ "q8_0", KVT_GGML_Q8_0 },
};

static const char *wtype_name(uint32_t t)
{
	for (size_t i = 0; i < sizeof(wtypes) / sizeof(wtypes[0]); i++)
		if (wtypes[i].type == t)
			return wtypes[i].name;
	return "?";
}

static void usage_infer(const char *sub, FILE *f)
{
	fprintf(f, "usage: kvt-bench %s [-m FILE | --layers N --dim N --heads N --kv-heads N --ff N\n"
		   "                 --vocab N --wtype f32|f16|bf16|q8_0] [--dir DIR] [--threads N] [--json]\n",
		sub);
	if (!strcmp(sub, "decode"))
		fprintf(f, "                 [--ctx LIST] [--steps N] [--warmup N] [--fio-seconds S]\n"
			   "  defaults: 8 layers, dim 512, 8 heads (8 KV), ff 1536, vocab 4096, f16 weights;\n"
			   "  --ctx 4K,16K,64K, --steps 8, --warmup 2, --fio-seconds 3\n");
	else if (!strcmp(sub, "serve"))
		fprintf(f, "                 [--convs N] [--batch N] [--history N] [--system N]\n"
			   "                 [--tokens N] [--repeat N]\n"
			   "  defaults: 4 layers, dim 256, 4 heads (4 KV), ff 768, vocab 4096, f16 weights;\n"
			   "  --convs 32, --batch 4, --history 2048, --system 4096, --tokens 4 (a turn),\n"
			   "  --repeat 2 (timed rounds)\n");
	else if (!strcmp(sub, "resume"))
		fprintf(f, "                 [--ctx N] [--repeat N] [--fio-seconds S]\n"
			   "  defaults: 4 layers, dim 256, 4 heads (4 KV), ff 768, vocab 4096, f16 weights;\n"
			   "  --ctx 32K, --repeat 5, --fio-seconds 3\n");
	else
		fprintf(f, "                 [--tokens N] [--ctx N] [--steps N] [--warmup N] [--repeat N]\n"
			   "                 [--bw-bytes SIZE] [--kv-type f16|f32|q8_0|q4_0] [--set KEY=VALUE]\n"
			   "  defaults: 8 layers, dim 1024, 16 heads (8 KV), ff 2816, vocab 4096, f16 weights;\n"
			   "  --tokens 1024 (prefill), --ctx 4K (decode), --steps 8, --warmup 2, --repeat 3,\n"
			   "  --bw-bytes 1G\n"
			   "  --set KEY=VALUE  a config key (docs/config.md), e.g. --set page_tokens=64\n");
	fprintf(f, "  -m FILE  a GGUF Llama model instead of the synthetic one\n"
		   "  --dir    where the NVMe tier file, the fio file and the model go ($TMPDIR or /tmp)\n");
	if (strcmp(sub, "prefill"))
		fprintf(f, "  --policy P    every tier's policy (default: the config's, auto)\n"
			   "  --prefetch N  layers prefetched ahead (default: the config's, 2)\n"
			   "  --set KEY=VALUE  any config key (docs/config.md) but the tier sizes, which each\n"
			   "                set-up fixes; e.g. --set access.host_in_place=on\n");
}

static const char *opt_name(int code)
{
	for (const struct option *p = long_opts; p->name; p++)
		if (p->val == code)
			return p->name;
	return "?";
}

static int parse_uint(const char *s, unsigned *out)
{
	uint64_t v;

	if (bench_parse_size(s, &v) || v > UINT_MAX)
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

/* argv[0] is the subcommand. Returns 0, 1 for --help, or 2 on a usage error. */
static int parse_opts(struct iopts *o, unsigned allowed, int argc, char **argv)
{
	int c;

	while ((c = getopt_long(argc, argv, "m:j", long_opts, NULL)) != -1) {
		unsigned *u = NULL;
		int bad = 0;

		if (c == 'm')
			c = O_MODEL;
		else if (c == 'j')
			c = O_JSON;
		if (c < O_LAYERS || c > O_KV_TYPE)
			return 2;
		if (!(allowed & OBIT(c))) {
			fprintf(stderr, "kvt-bench %s: --%s is not an option of %s\n", o->sub,
				opt_name(c), o->sub);
			return 2;
		}
		switch (c) {
		case O_LAYERS: u = &o->syn.layers; break;
		case O_DIM: u = &o->syn.dim; break;
		case O_HEADS: u = &o->syn.heads; break;
		case O_KV_HEADS: u = &o->syn.kv_heads; break;
		case O_FF: u = &o->syn.ff; break;
		case O_VOCAB: u = &o->syn.vocab; break;
		case O_THREADS: u = &o->threads; break;
		case O_STEPS: u = &o->steps; break;
		case O_WARMUP: u = &o->warmup; break;
		case O_REPEAT: u = &o->repeat; break;
		case O_TOKENS: u = &o->tokens; break;
		case O_CONVS: u = &o->convs; break;
		case O_BATCH: u = &o->batch; break;
		case O_HISTORY: u = &o->history; break;
		case O_SYSTEM: u = &o->system; break;
		case O_WTYPE:
			bad = 1;
			for (size_t i = 0; i < sizeof(wtypes) / sizeof(wtypes[0]); i++)
				if (!strcmp(optarg, wtypes[i].name)) {
					o->syn.type = wtypes[i].type;
					bad = 0;
				}
			break;
		case O_DIR: o->dir = optarg; break;
		case O_KV_TYPE:
			o->kv_type = kvt_kv_parse(optarg);
			bad = o->kv_type < 0;
			break;
		case O_POLICY:
			o->policy = optarg;
			bad = strlen(optarg) >= KVT_POLICY_MAX;
			break;
		case O_PREFETCH: {
			unsigned v;

			bad = parse_uint(optarg, &v) || v > 64;
			o->prefetch = bad ? -1 : (int)v;
			break;
		}
		case O_SET: {
			struct kvt_config probe;
			char key[128], err[512];
			const char *eq = strchr(optarg, '=');

			kvt_config_default(&probe);
			bad = !eq || (size_t)(eq - optarg) >= sizeof(key) || o->nset == 16;
			if (!bad) {
				snprintf(key, sizeof(key), "%.*s", (int)(eq - optarg), optarg);
				if (kvt_config_set(&probe, key, eq + 1, err, sizeof(err)))
					failmsg(o, err);
				o->set[o->nset++] = optarg;
			}
			break;
		}
		case O_MODEL: o->model = optarg; break;
		case O_JSON: o->json = 1; break;
		case O_HELP: return 1;
		case O_CTX:
			o->nctx = bench_parse_list(optarg, o->ctx, MAX_CTX);
			bad = o->nctx <= 0;
			for (int i = 0; !bad && i < o->nctx; i++)
				bad = !o->ctx[i] || o->ctx[i] > (1u << 30);
			break;
		case O_BW_BYTES:
			bad = bench_parse_size(optarg, &o->bw_bytes) || o->bw_bytes < (1u << 20);
			break;
		case O_FIO_SECONDS:
			o->fio_seconds = atof(optarg);
			bad = !(o->fio_seconds > 0 && o->fio_seconds <= 600);
			break;
		}
		if (u)
			bad = parse_uint(optarg, u) != 0;
		if (bad) {
			fprintf(stderr, "kvt-bench %s: bad value for --%s: '%s'\n", o->sub,
				opt_name(c), optarg);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kvt-bench %s: unexpected argument '%s'\n", o->sub, argv[optind]);
		return 2;
	}
	if (!o->steps || o->steps > MAX_SAMPLES || !o->repeat || o->repeat > MAX_SAMPLES ||
	    o->warmup > 1000 || !o->tokens) {
		fprintf(stderr, "kvt-bench %s: --steps and --repeat must be 1..%d, --tokens positive\n",
			o->sub, MAX_SAMPLES);
		return 2;
	}
	if (!o->model) {
		struct kvt_synth sy = o->syn;	/* ctx is set from --ctx later */
		char err[256];

		sy.ctx = 1;
		if (kvt_synth_check(&sy, err, sizeof(err))) {
			fprintf(stderr, "kvt-bench %s: model geometry: %s\n", o->sub, err);
			return 2;
		}
	}
	const char *d = o->dir ? o->dir : getenv("TMPDIR");

	snprintf(o->dirbuf, sizeof(o->dirbuf), "%s", d && *d ? d : "/tmp");
	return 0;
}

/* A growing line of text (the reproduce commands). */
struct line {
	char s[4096];
	size_t n;
};

__attribute__((format(printf, 2, 3)))
static void put(struct line *l, const char *fmt, ...)
{
	va_list ap;
	int r;

	if (l->n >= sizeof(l->s))
		return;
	va_start(ap, fmt);
	r = vsnprintf(l->s + l->n, sizeof(l->s) - l->n, fmt, ap);
	va_end(ap);
	if (r > 0)
		l->n += (size_t)r;
}

static void put_quoted(struct line *l, const char *s)
{
	char q[KVT_PATH_MAX * 4 + 3];

	if (bench_shell_quote(s, q, sizeof(q)))
		put(l, "'?'");
	else
		put(l, "%s", q);
}

/* The kvt-bench command line of this run, every parameter spelled out;
 * extra (NULL or "") goes after the model. */
static void print_repro(const struct iopts *o, const char *extra)
{
	struct line l = { .n = 0 };
	FILE *f = o->json ? stderr : stdout;

	put(&l, "kvt-bench %s ", o->sub);
	if (o->model) {
		put(&l, "-m ");
		put_quoted(&l, o->model);
	} else {
		put(&l, "--layers %u --dim %u --heads %u --kv-heads %u --ff %u --vocab %u --wtype %s",
		    o->syn.layers, o->syn.dim, o->syn.heads, o->syn.kv_heads ? o->syn.kv_heads : o->syn.heads,
		    o->syn.ff ? o->syn.ff : 4 * o->syn.dim, o->syn.vocab, wtype_name(o->syn.type));
	}
	if (extra && *extra)
		put(&l, " %s", extra);
	if (o->threads)
		put(&l, " --threads %u", o->threads);
	if (o->policy)
		put(&l, " --policy %s", o->policy);
	if (o->prefetch >= 0)
		put(&l, " --prefetch %d", o->prefetch);
	for (int i = 0; i < o->nset; i++) {
		put(&l, " --set ");
		put_quoted(&l, o->set[i]);
	}
	put(&l, " --dir ");
	put_quoted(&l, o->dirbuf);
	if (o->json)
		put(&l, " --json");
	fprintf(f, "reproduce: %s\n", l.s);
}

/* The fio command bench_fio runs for the NVMe reference (the file itself
 * is a temporary one of that size in --dir). */
static void print_fio_repro(const struct iopts *o, uint64_t size)
{
	struct line l = { .n = 0 };
	FILE *f = o->json ? stderr : stdout;

	put(&l, "fio --name=kvt-ref --filename=");
	put_quoted(&l, o->dirbuf);
	put(&l, "/FILE --size=%" PRIu64 " --bs=%u --iodepth=%u --rw=read --ioengine=io_uring"
	    " --direct=1 --time_based --runtime=%.0fms --output-format=json %s", size, FIO_BS,
	    FIO_DEPTH, o->fio_seconds * 1000, BENCH_FIO_LIKE_KVT);
	fprintf(f, "reference: %s   (FILE: %" PRIu64 " bytes written first)\n", l.s, size);
}

/* fio's sequential read rate (bytes/s) as the pager reads: 1 MiB requests,
 * depth 32, O_DIRECT, registered files and buffers, over file. 0: none. */
static double fio_read(const struct iopts *o, const char *file, uint64_t size)
{
	if (!file)
		return 0;
	return bench_fio(file, size, size < FIO_BS ? size & ~4095ull : FIO_BS, FIO_DEPTH, "read",
			 1, o->fio_seconds, BENCH_FIO_LIKE_KVT, NULL);
}

/* ---------------------------------------------------------------------
 * Model, pager and engine
 */

static struct kvt_model *get_model(const struct iopts *o)
{
	struct kvt_model *m;
	char path[KVT_PATH_MAX + 64], err[512];
	int r, fd;

	if (o->model) {
		if ((r = kvt_model_load(o->model, &m, err, sizeof(err))))
			failmsg(o, err);
		return m;
	}
	snprintf(path, sizeof(path), "%s/kvt-bench-model.XXXXXX", o->dirbuf);
	if ((fd = mkstemp(path)) < 0)
		fail(o, path, -errno);
	close(fd);
	/* Unlinked once mapped: the mapping lives on, nothing is left behind. */
	r = kvt_synth_write(&o->syn, path, err, sizeof(err));
	if (!r)
		r = kvt_model_load(path, &m, err, sizeof(err));
	unlink(path);
	if (r)
		failmsg(o, err);
	return m;
}

static uint64_t mat_bytes(const struct kvt_mat *w)
{
	uint64_t row;

	switch (w->type) {
	case KVT_GGML_F32: row = (uint64_t)w->n_in * 4; break;
	case KVT_GGML_Q8_0: row = (uint64_t)w->n_in / 32 * 34; break;
	default: row = (uint64_t)w->n_in * 2; break;
	}
	return row * w->n_out;
}

/* Weight bytes one decoded token reads: every tensor but the embedding
 * table, of which it reads one row (unless the head is tied to it). */
static uint64_t weight_bytes_per_token(const struct kvt_model *m)
{
	return m->weight_bytes - (m->tied ? 0 : mat_bytes(&m->tok_embd));
}

static void describe_model(const struct iopts *o, const struct kvt_model *m, unsigned nthreads)
{
	const struct kvt_hparams *hp = &m->hp;

	if (o->json)
		return;
	printf("model: %s, %u layers, dim %u, %u heads (%u KV, head dim %u), ff %u, vocab %u, "
	       "%s weights %.0f MiB; KV %s %.1f KiB/token; %u threads\n", m->name, hp->n_layer,
	       hp->n_embd, hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_ff, hp->n_vocab, m->type,
	       mib(m->weight_bytes), kvt_kv_name(o->kv_type),
	       (double)kvt_model_kv_bytes_per_token(m, o->kv_type) / 1024, nthreads);
}

static unsigned engine_threads(const struct iopts *o)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return o->threads ? o->threads : n > 0 ? (unsigned)n : 1;
}

struct rig {
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_pager *p;
	struct kvt_engine *e;
	uint64_t pb;		/* page bytes */
};

/* The page geometry for m with f16 K/V: cfg's defaults plus the model's. */
/* The config every pager of a run starts from: defaults, the model's
 * geometry, then the --set keys (so a page size given there is the one
 * planned with and printed). */
static void geometry(const struct iopts *o, const struct kvt_model *m, struct kvt_config *cfg)
{
	char err[512];

	kvt_config_default(cfg);
	kvt_engine_pager_geometry(m, o->kv_type, cfg);
	/* Pages of whole 4 KiB blocks, for O_DIRECT, as kvt-run makes them:
	 * q8_0 and q4_0 KV need more tokens a page. */
	while (kvt_config_page_bytes(cfg) % 4096)
		cfg->page_tokens *= 2;
	for (int i = 0; i < o->nset; i++) {
		char key[128];
		const char *eq = strchr(o->set[i], '=');

		snprintf(key, sizeof(key), "%.*s", (int)(eq - o->set[i]), o->set[i]);
		if (kvt_config_set(cfg, key, eq + 1, err, sizeof(err)))
			failmsg(o, err);
	}
}

/* Pages of one session of n_ctx tokens, all layers. */
static uint64_t session_pages(const struct kvt_model *m, const struct kvt_config *cfg,
			      unsigned n_ctx)
{
	return (uint64_t)m->hp.n_layer * ((n_ctx + cfg->page_tokens - 1) / cfg->page_tokens);
}

/* Fast-tier frames that hold `pages` (the KV plus its tails) with the
 * tier's high watermark still free, so the migration thread never starts
 * demoting: "all resident" means all resident. */
static uint64_t resident_frames(const struct kvt_config *cfg, uint64_t pages)
{
	unsigned keep = cfg->tier[KVT_TIER_FAST].wm_high + 1;

	return pages * 100 / (100 - keep) + 16;
}

static void rig_open(struct rig *g, const struct iopts *o, struct kvt_model *m, unsigned n_ctx,
		     uint64_t fast, uint64_t host, uint64_t nvme)
{
	struct kvt_engine_params ep;
	char err[512];
	int r;

	memset(g, 0, sizeof(*g));
	geometry(o, m, &g->cfg);
	g->pb = kvt_config_page_bytes(&g->cfg);
	g->cfg.tier[KVT_TIER_FAST].bytes = fast * g->pb;
	g->cfg.tier[KVT_TIER_HOST].bytes = host * g->pb;
	g->cfg.tier[KVT_TIER_NVME].bytes = nvme * g->pb;
	snprintf(g->cfg.nvme_path, sizeof(g->cfg.nvme_path), "%s", o->dirbuf);
	for (int t = 0; o->policy && t < KVT_NTIERS; t++)
		snprintf(g->cfg.tier[t].policy, sizeof(g->cfg.tier[t].policy), "%s", o->policy);
	if (o->prefetch >= 0)
		g->cfg.prefetch_depth = (unsigned)o->prefetch;
	g->cfg.log = bench_log;
	if (kvt_config_validate(&g->cfg, err, sizeof(err)))
		failmsg(o, err);
	/* device.name (--set device.name=cuda), auto by default. */
	char why[512];
	if ((r = kvt_device_open_why(g->cfg.device, g->cfg.copy_gbps, &g->dev, why, sizeof(why))))
		failmsg(o, why);
	if ((r = kvt_pager_open(&g->cfg, g->dev, &g->p)))
		fail(o, "pager", r);
	kvt_engine_params_default(&ep);
	ep.n_ctx = n_ctx;
	ep.n_threads = o->threads;
	ep.max_batch = o->max_batch ? o->max_batch : 1;
	ep.kv_type = o->kv_type;
	if ((r = kvt_engine_new(m, g->p, &ep, &g->e, err, sizeof(err))))
		failmsg(o, err);
}

static void rig_close(struct rig *g)
{
	kvt_engine_free(g->e);
	kvt_pager_close(g->p);
	kvt_device_close(g->dev);
}

static struct kvt_session *new_session(const struct iopts *o, struct rig *g)
{
	struct kvt_session *s;
	int r = kvt_session_new(g->e, &s);

	if (r)
		fail(o, "session", r);
	return s;
}

static void fill(const struct iopts *o, struct rig *g, struct kvt_session *s, unsigned n)
{
	int r = kvt_session_fill_random(g->e, s, n, 1);

	if (r)
		fail(o, "kvt_session_fill_random", r);
}

/* One decode step of s; the token is any valid id (no sampler involved). */
static void step(const struct iopts *o, struct rig *g, struct kvt_session *s, unsigned i,
		 uint32_t n_vocab)
{
	int32_t tok = (int32_t)(3 + i % (n_vocab - 3));
	int r = kvt_decode(g->e, &s, &tok, 1);

	if (r < 0)
		fail(o, "kvt_decode", r);
	if (r == 0)
		fail(o, "kvt_decode (session ended)", kvt_session_error(s));
}

static void stats(const struct iopts *o, struct rig *g, struct kvt_stats *st)
{
	int r = kvt_pager_stats(g->p, st);

	if (r)
		fail(o, "stats", r);
}

/* The deltas between two snapshots that the tables print. */
struct delta {
	uint64_t nvme_read;		/* bytes read out of the NVMe tier */
	uint64_t read_min;		/* the least it had to read (kvt_stats.read_min_bytes) */
	double	 fast_hit;		/* fast hits / fast lookups */
	uint64_t pf_hit, pf_late, pf_wasted, pf_dropped;
	double	 stall_s;
	double	 per_op;		/* NVMe pages per read or write issued */
	double	 qd;			/* NVMe ops in flight on average while busy */
	double	 busy_s;		/* time with an NVMe op in flight */
};

static void diff(const struct kvt_stats *a, const struct kvt_stats *b, struct delta *d)
{
	const struct kvt_tier_stats *fa = &a->tier[KVT_TIER_FAST], *fb = &b->tier[KVT_TIER_FAST];
	double look = (double)(fb->hits + fb->misses - fa->hits - fa->misses);

	d->nvme_read = b->tier[KVT_TIER_NVME].bytes_out - a->tier[KVT_TIER_NVME].bytes_out;
	d->read_min = b->read_min_bytes - a->read_min_bytes;
	d->per_op = b->nvme_ops > a->nvme_ops ? (double)(b->nvme_reqs - a->nvme_reqs) /
						(double)(b->nvme_ops - a->nvme_ops) : 0;
	d->fast_hit = look ? (double)(fb->hits - fa->hits) / look : 0;
	d->pf_hit = b->prefetch_hit - a->prefetch_hit;
	d->pf_late = b->prefetch_late - a->prefetch_late;
	d->pf_wasted = b->prefetch_wasted - a->prefetch_wasted;
	d->pf_dropped = b->prefetch_dropped - a->prefetch_dropped;
	d->busy_s = (double)(b->nvme_busy_ns - a->nvme_busy_ns) / 1e9;
	d->qd = b->nvme_busy_ns > a->nvme_busy_ns ?
		(double)(b->nvme_depth_ns - a->nvme_depth_ns) /
		(double)(b->nvme_busy_ns - a->nvme_busy_ns) : 0;
	d->stall_s = (double)(b->stall_ns - a->stall_ns) / 1e9;
}

/* ---------------------------------------------------------------------
 * decode: tokens/s at long contexts over three tier set-ups
 *
 * For each context: three fresh pagers, one session each,
 * filled with kvt_session_fill_random, --warmup steps, then --steps timed
 * steps: (a) all KV in the fast tier, (b) fast 1/4, host 1/4, NVMe the
 * rest, (c) fast 1/10, a host tier that only stages the reads (see
 * staging_pages, no share of the KV), NVMe the rest; the fast tier gets one tail page per layer on
 * top. The bound of (b) and (c) is max((a)'s step time, the NVMe bytes a
 * step read / fio's rate): compute that cannot go faster than resident,
 * reads that cannot go faster than fio. fio's sequential read rate, over
 * a file as large as the largest context's KV, is taken right before and
 * right after each of (b) and (c) (three readings a context, the middle
 * one shared); each bound uses the mean of its two, since the virtual
 * disks these run on change speed from one minute to the next.
 */

/* (c)'s host tier: no share of the KV, only the staging NVMe reads land in
 * on their way up. It holds one full ring of reads (io.depth reads of
 * io.max_io_bytes: 1024 pages of 32 KiB by default), so the disk's queue
 * need not wait for attention to consume a page, but at most an eighth of
 * the KV (and at least 16 pages), so that at short contexts it stays
 * staging. */
static uint64_t staging_pages(const struct kvt_config *cfg, uint64_t total)
{
	uint64_t ring = (uint64_t)cfg->io_depth * cfg->max_io_bytes / kvt_config_page_bytes(cfg);
	uint64_t cap = total / 8;

	return ring < cap ? ring : cap < 16 ? 16 : cap;
}

struct decode_res {
	double	 step_s;		/* median */
	double	 nvme_read;		/* bytes per step */
	double	 min_read;		/* the least a step had to read (the tiers above hold
					 * the rest), bytes per step */
	double	 fast_hit;
	double	 stall_s;		/* per step */
	double	 per_op;		/* NVMe pages per operation */
	double	 qd;			/* NVMe ops in flight while busy, mean */
	double	 busy;			/* share of the timed steps the disk was busy */
	uint64_t pf_hit, pf_late, pf_wasted, pf_dropped;	/* over the timed steps */
	double	 t[MAX_SAMPLES];	/* the step times */
};

static void run_decode(const struct iopts *o, struct kvt_model *m, unsigned ctx, unsigned n_ctx,
		       uint64_t fast, uint64_t host, uint64_t nvme, struct decode_res *res)
{
	struct rig g;
	struct kvt_stats a, b;
	struct delta d;
	double t[MAX_SAMPLES], wall = 0;
	unsigned i;

	rig_open(&g, o, m, n_ctx, fast, host, nvme);
	struct kvt_session *s = new_session(o, &g);

	fill(o, &g, s, ctx);
	for (i = 0; i < o->warmup; i++)
		step(o, &g, s, i, m->hp.n_vocab);
	stats(o, &g, &a);
	for (i = 0; i < o->steps; i++) {
		double t0 = cli_now();

		step(o, &g, s, i, m->hp.n_vocab);
		t[i] = cli_now() - t0;
		wall += t[i];
	}
	stats(o, &g, &b);
	diff(&a, &b, &d);
	memcpy(res->t, t, o->steps * sizeof(double));
	res->step_s = bench_median(t, (int)o->steps);
	res->nvme_read = (double)d.nvme_read / o->steps;
	res->min_read = (double)d.read_min / o->steps;
	res->fast_hit = d.fast_hit;
	res->stall_s = d.stall_s / o->steps;
	res->per_op = d.per_op;
	res->qd = d.qd;
	res->busy = wall > 0 ? d.busy_s / wall : 0;
	res->pf_hit = d.pf_hit;
	res->pf_late = d.pf_late;
	res->pf_wasted = d.pf_wasted;
	res->pf_dropped = d.pf_dropped;
	kvt_session_free(g.e, s);
	rig_close(&g);
}

/*
 * XXH3 over page-sized blocks, as the pager checks every page it reads
 * from NVMe: GB/s on one core, median of five passes over 64 MiB (more
 * than the caches hold), in this run. A step's checksums cost its NVMe
 * bytes at this rate, on the migration thread, beside compute.
 */
static double xxh3_gbps(uint64_t pb)
{
	size_t len = (size_t)64 << 20, n = len / pb;
	unsigned char *buf = malloc(len);
	double r[5];
	uint64_t sink = 0, x = 0x9e3779b97f4a7c15ull;

	if (!buf || !n)
		return free(buf), 0;
	for (size_t i = 0; i < len; i += 8) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		memcpy(buf + i, &x, 8);
	}
	for (int k = 0; k < 5; k++) {
		double t0 = cli_now();

		for (size_t i = 0; i < n; i++)
			sink += XXH3_64bits(buf + i * pb, pb);
		r[k] = (double)(n * pb) / (cli_now() - t0) / 1e9;
	}
	free(buf);
	return sink == 42 ? 0 : bench_median(r, 5);	/* sink: keep the hashes */
}

int bench_decode(int argc, char **argv)
{
	struct iopts o = {
		.sub = "decode", .prefetch = -1, .nctx = 3, .ctx = { 4096, 16384, 65536 },
		.steps = 8, .warmup = 2, .repeat = 1, .tokens = 1, .fio_seconds = 3,
		.syn = { .layers = 8, .dim = 512, .heads = 8, .kv_heads = 8, .ff = 1536, .vocab = 4096,
			 .seed = 1, .type = KVT_GGML_F16 },
	};
	static const char *const setup_name[3] = { "fast 100%", "fast 25/host 25/nvme",
						    "fast 10/staging/nvme" };
	int r = parse_opts(&o, O_COMMON | O_TIERS | OBIT(O_CTX) | OBIT(O_STEPS) | OBIT(O_WARMUP) |
			   OBIT(O_FIO_SECONDS), argc, argv);

	if (r) {
		usage_infer(o.sub, r == 1 ? stdout : stderr);
		return r == 1 ? 0 : 2;
	}
	uint64_t cmax = 0;

	for (int ci = 0; ci < o.nctx; ci++)
		cmax = o.ctx[ci] > cmax ? o.ctx[ci] : cmax;
	o.syn.ctx = (unsigned)round_up(cmax + o.warmup + o.steps + 64, 256);
	struct kvt_model *m = get_model(&o);
	struct kvt_config cfg;

	geometry(&o, m, &cfg);
	uint64_t pb = kvt_config_page_bytes(&cfg), layers = m->hp.n_layer;

	/* The fio file: as large as the largest context's KV, like the NVMe
	 * tier's file. */
	unsigned nmax = (unsigned)round_up(cmax + o.warmup + o.steps + 16, cfg.page_tokens);
	uint64_t fsz = round_up(session_pages(m, &cfg, nmax) * pb, FIO_BS);
	char file[KVT_PATH_MAX + 64];
	int have_file = bench_make_file(o.dirbuf, fsz, file, sizeof(file)) == 0;

	if (!have_file)
		fprintf(stderr, "kvt-bench decode: cannot make a %.0f MiB file in %s for fio: the "
			"bound uses the resident time only\n", mib(fsz), o.dirbuf);
	describe_model(&o, m, engine_threads(&o));
	double xxh = xxh3_gbps(pb);
	if (!o.json) {
		printf("xxh3: %.1f GB/s on one core over %" PRIu64 " KiB pages (median of 5, this run); "
		       "csum ms = a step's NVMe bytes at that rate: the CPU its page checks take\n",
		       xxh, pb >> 10);
		printf("context: kvt_session_fill_random (random K/V, no prefill); %u warm-up steps, "
		       "median of %u timed steps; page %u tokens = %" PRIu64 " KiB\n",
		       o.warmup, o.steps, cfg.page_tokens, pb >> 10);
		printf("tiers: fast 100%% = all KV in the fast tier (the reference); staging = a host "
		       "tier that NVMe reads pass through, no share of the KV: one ring of reads "
		       "(io.depth x io.max_io_bytes), at most 1/8 of the KV\n");
		printf("min MB = what the tiers above NVMe cannot hold of what a step reads (their "
		       "capacity less the frames kept for pages on their way), the least a step must "
		       "read; rd/min = nvme MB / min MB (goal 1.05); rd/cap = nvme MB / (KV less the "
		       "whole capacity of fast and host, stage included)\n");
		printf("bound = max(fast 100%% ms/step at that context (median of both its runs, first "
		       "and last), min MB/step / fio GB/s) (goal 1.10); "
		       "fio: sequential %uK reads, depth %u, O_DIRECT, %s, %.0f s, right before and "
		       "after each of the two tiered set-ups, the mean of the two\n",
		       FIO_BS >> 10, FIO_DEPTH, BENCH_FIO_LIKE_KVT, o.fio_seconds);
		printf("%-6s %-21s %7s %9s %8s %8s %8s %6s %6s %6s %5s %5s %8s %22s %8s %8s %12s %9s %6s\n", "ctx",
		       "tiers", "KV MiB", "ms/step", "tok/s", "nvme MB", "min MB", "rd/min", "rd/cap", "pg/op", "qd",
		       "busy", "fast hit",
		       "pf h/l/w/d",
		       "stall ms", "csum ms",
		       "fio b/a GB/s",
		       "bound ms", "ratio");
	}
	fflush(stdout);
	for (int ci = 0; ci < o.nctx; ci++) {
		unsigned ctx = (unsigned)o.ctx[ci];
		unsigned n_ctx = (unsigned)round_up((uint64_t)ctx + o.warmup + o.steps + 16,
						    cfg.page_tokens);
		uint64_t total = session_pages(m, &cfg, n_ctx);
		uint64_t kv = (uint64_t)ctx * kvt_model_kv_bytes_per_token(m, KVT_KV_F16);
		uint64_t fast[3] = { resident_frames(&cfg, total + layers), total / 4 + layers,
				     total / 10 + layers };
		uint64_t host[3] = { 16, total / 4, staging_pages(&cfg, total) };
		uint64_t nvme[3] = { 0, total + total / 8, total + total / 8 };
		/* (a) runs first and again last: its reference is the median of
		 * both runs' steps, so drift over the context's runs hits the
		 * bound as it hits (b) and (c). fio reads before (b), between
		 * (b) and (c), and after (c). */
		static const int order[4] = { 0, 1, 2, 0 };
		struct decode_res res[4];
		double pool[2 * MAX_SAMPLES], rd[3] = { 0, 0, 0 };
		char cs[32];

		for (int k = 0; k < 4; k++) {
			if (have_file && k > 0)
				rd[k - 1] = fio_read(&o, file, fsz);
			run_decode(&o, m, ctx, n_ctx, fast[order[k]], host[order[k]], nvme[order[k]],
				   &res[k]);
		}
		memcpy(pool, res[0].t, o.steps * sizeof(double));
		memcpy(pool + o.steps, res[3].t, o.steps * sizeof(double));
		double t_res = bench_median(pool, 2 * (int)o.steps);

		bench_fmt_size(ctx, cs, sizeof(cs));
		for (int k = 0; k < 4; k++) {
			const struct decode_res *rs = &res[k];
			int su = order[k];
			double f0 = su ? rd[su - 1] : 0, f1 = su ? rd[su] : 0;
			double fio = f0 > 0 && f1 > 0 ? (f0 + f1) / 2 : 0;
			/* What the disk must do: the bytes the tiers above cannot
			 * hold, not what the pager chose to read. */
			double io = fio > 0 ? rs->min_read / fio : 0;
			double rratio = rs->min_read > 0 ? rs->nvme_read / rs->min_read : 0;
			double above = (double)(fast[su] + host[su]) * (double)pb;
			double craw = (double)kv > above ? rs->nvme_read / ((double)kv - above) : 0;
			double bound = t_res > io ? t_res : io;
			double csum_ms = xxh > 0 ? rs->nvme_read / (xxh * 1e9) * 1e3 : 0;
			char bstr[32], rstr[32], pf[32], fstr[40], name[40];

			snprintf(name, sizeof(name), "%s%s", setup_name[su], k == 3 ? " again" : "");
			if (o.json) {
				printf("{\"bench\":\"decode\",\"ctx\":%u,\"tiers\":\"%s\",\"fast_pages\":%" PRIu64
				       ",\"host_pages\":%" PRIu64 ",\"nvme_pages\":%" PRIu64 ",\"page_bytes\":%"
				       PRIu64 ",\"kv_bytes\":%" PRIu64 ",\"step_ms\":%.3f,\"tok_per_s\":%.2f,"
				       "\"nvme_bytes_per_step\":%.0f,\"min_bytes_per_step\":%.0f,"
				       "\"read_ratio\":%.3f,\"read_capacity_ratio\":%.3f,\"nvme_pages_per_op\":%.2f,"
				       "\"nvme_queue_depth\":%.2f,\"nvme_busy\":%.3f,"
				       "\"fast_hit\":%.4f,\"prefetch_hit\":%" PRIu64
				       ",\"prefetch_late\":%" PRIu64 ",\"prefetch_wasted\":%" PRIu64
				       ",\"prefetch_dropped\":%" PRIu64 ",\"stall_ms_per_step\":%.3f,"
				       "\"csum_ms_per_step\":%.3f,\"xxh3_gbps\":%.2f,"
				       "\"resident_ms\":%.3f,\"fio_gbps\":%.3f,\"fio_before_gbps\":%.3f,"
				       "\"fio_after_gbps\":%.3f,\"bound_ms\":%.3f,\"ratio\":%.3f,"
				       "\"goal\":1.10,\"read_goal\":1.05,\"context\":\"fill_random\"}\n",
				       ctx, name, fast[su], host[su], nvme[su], pb, kv,
				       rs->step_s * 1e3, 1 / rs->step_s, rs->nvme_read, rs->min_read, rratio,
				       craw, rs->per_op, rs->qd,
				       rs->busy, rs->fast_hit, rs->pf_hit, rs->pf_late, rs->pf_wasted,
				       rs->pf_dropped, rs->stall_s * 1e3, csum_ms, xxh, t_res * 1e3,
				       fio / 1e9,
				       f0 / 1e9, f1 / 1e9, bound * 1e3, rs->step_s / bound);
			} else {
				snprintf(bstr, sizeof(bstr), "%.1f", bound * 1e3);
				snprintf(rstr, sizeof(rstr), "%.2f", rs->step_s / bound);
				snprintf(pf, sizeof(pf), "%" PRIu64 "/%" PRIu64 "/%" PRIu64 "/%" PRIu64,
					 rs->pf_hit, rs->pf_late, rs->pf_wasted, rs->pf_dropped);
				snprintf(fstr, sizeof(fstr), "%.2f/%.2f", f0 / 1e9, f1 / 1e9);
				char mstr[16], rr[16], rc[16];
				snprintf(mstr, sizeof(mstr), "%.1f", rs->min_read / 1e6);
				snprintf(rr, sizeof(rr), "%.2f", rratio);
				snprintf(rc, sizeof(rc), "%.2f", craw);
				printf("%-6s %-21s %7.0f %9.1f %8.2f %8.1f %8s %6s %6s %6.1f %5.1f %4.0f%% %8.3f "
				       "%22s %8.1f %8.1f %12s %9s %6s\n",
				       cs, name, mib(kv), rs->step_s * 1e3, 1 / rs->step_s,
				       rs->nvme_read / 1e6, su ? mstr : "", su ? rr : "", su ? rc : "",
				       rs->per_op, rs->qd,
				       rs->busy * 100, rs->fast_hit, pf,
				       rs->stall_s * 1e3, csum_ms,
				       su ? fstr : "", su ? bstr : "", su ? rstr : "");
				if (k == 3)
					printf("%-6s %-21s %7s %9.1f %8.2f %8s %8s %6s %6s %6s %5s %5s %8s %22s "
					       "%8s %8s %12s %9s %6s\n",
					       cs, "fast 100% both runs", "", t_res * 1e3, 1 / t_res, "", "", "", "",
					       "", "", "", "", "", "", "", "", "ref", "-");
			}
		}
		fflush(stdout);
	}
	if (have_file)
		unlink(file);
	{
		struct line l = { .n = 0 };
		char cs[32];

		put(&l, "--ctx ");
		for (int ci = 0; ci < o.nctx; ci++)
			put(&l, "%s%s", ci ? "," : "", bench_fmt_size(o.ctx[ci], cs, sizeof(cs)));
		put(&l, " --steps %u --warmup %u --fio-seconds %g", o.steps, o.warmup, o.fio_seconds);
		print_repro(&o, l.s);
		print_fio_repro(&o, fsz);
	}
	kvt_model_free(m);
	return 0;
}

/* ---------------------------------------------------------------------
 * resume: a conversation parked on NVMe, back to its next token
 */

static void prefill_progress(void *arg, unsigned done)
{
	const unsigned *n = arg;

	if (isatty(2)) {
		fprintf(stderr, "\rprefill %u/%u", done, *n);
		if (done == *n)
			fputs("\r\033[K", stderr);
	}
}

/*
 * One pager whose fast and host tiers hold a fifth of the conversation's
 * KV; a real prefill (kvt_eval of random token ids) builds it and is
 * timed: that is what recomputing it costs. Then --repeat times: park
 * (everything goes down to NVMe), then kvt_session_resume and one
 * kvt_decode step, timed together, with the NVMe bytes they read from the
 * stats. The I/O floor is those bytes at fio's sequential read rate.
 */
int bench_resume(int argc, char **argv)
{
	struct iopts o = {
		.sub = "resume", .prefetch = -1, .nctx = 1, .ctx = { 32768 }, .steps = 1,
		.repeat = 5, .tokens = 1, .fio_seconds = 3,
		.syn = { .layers = 4, .dim = 256, .heads = 4, .kv_heads = 4, .ff = 768, .vocab = 4096,
			 .seed = 1, .type = KVT_GGML_F16 },
	};
	int r = parse_opts(&o, O_COMMON | O_TIERS | OBIT(O_CTX) | OBIT(O_REPEAT) |
			   OBIT(O_FIO_SECONDS), argc, argv);

	if (r || o.nctx != 1) {
		if (!r)
			fprintf(stderr, "kvt-bench resume: --ctx takes one context\n");
		usage_infer(o.sub, r == 1 ? stdout : stderr);
		return r == 1 ? 0 : 2;
	}
	unsigned ctx = (unsigned)o.ctx[0];

	o.syn.ctx = (unsigned)round_up((uint64_t)ctx + o.repeat + 64, 256);
	struct kvt_model *m = get_model(&o);
	struct kvt_config cfg;

	geometry(&o, m, &cfg);
	unsigned n_ctx = (unsigned)round_up((uint64_t)ctx + o.repeat + 16, cfg.page_tokens);
	uint64_t layers = m->hp.n_layer, total = session_pages(m, &cfg, n_ctx);
	uint64_t pb = kvt_config_page_bytes(&cfg);
	uint64_t kv = (uint64_t)ctx * kvt_model_kv_bytes_per_token(m, KVT_KV_F16);
	/* Fast and host together hold a fifth of it: most of it must come
	 * back from NVMe. */
	uint64_t fast = total / 10 + layers, host = total / 10, nvme = total + total / 4;
	struct rig g;
	struct kvt_stats a, b, c;
	struct delta d;

	/* The I/O floor: the KV at fio's sequential read rate. */
	char file[KVT_PATH_MAX + 64];
	uint64_t fsz = round_up(total * pb, FIO_BS);
	double fio = 0;

	if (bench_make_file(o.dirbuf, fsz, file, sizeof(file)) == 0) {
		fio = fio_read(&o, file, fsz);
		unlink(file);
	}
	describe_model(&o, m, engine_threads(&o));
	rig_open(&g, &o, m, n_ctx, fast, host, nvme);

	/* The conversation: a real prefill of ctx random token ids. Its time
	 * is the cost of recomputing it. */
	int32_t *tok = malloc((size_t)ctx * sizeof(int32_t));
	uint64_t x = 0x9e3779b97f4a7c15ull;

	if (!tok)
		fail(&o, "malloc", -ENOMEM);
	for (unsigned i = 0; i < ctx; i++) {
		x ^= x << 13; x ^= x >> 7; x ^= x << 17;
		tok[i] = (int32_t)(3 + x % (m->hp.n_vocab - 3));
	}
	struct kvt_session *s = new_session(&o, &g);

	if (!o.json) {
		printf("tiers: fast %" PRIu64 " + host %" PRIu64 " pages hold %.0f%% of the %" PRIu64
		       " pages of KV (%.0f MiB); NVMe %" PRIu64 " pages\n", fast, host,
		       100.0 * (double)(fast + host) / (double)total, total, mib(kv), nvme);
		fflush(stdout);
	}
	stats(&o, &g, &a);
	double t0 = cli_now();

	if ((r = kvt_eval(g.e, s, tok, ctx, prefill_progress, &ctx)))
		fail(&o, "kvt_eval", r);
	double t_prefill = cli_now() - t0;

	stats(&o, &g, &b);
	diff(&a, &b, &d);
	struct delta dpre = d;

	/* Park, then resume + one token, repeat times. A park writes only
	 * pages with no clean copy below (the prefill over these small tiers
	 * has written most already); later parks only drop. */
	double t_park[MAX_SAMPLES], t_ttft[MAX_SAMPLES], t_resume[MAX_SAMPLES];
	double nvme_read[MAX_SAMPLES], park0 = 0;
	uint64_t park0_written = 0, parked_nvme = 0, parked_up = 0, nread_min = UINT64_MAX;

	for (unsigned k = 0; k < o.repeat; k++) {
		stats(&o, &g, &a);
		t0 = cli_now();
		if ((r = kvt_session_park(g.e, s)))
			fail(&o, "kvt_session_park", r);
		t_park[k] = cli_now() - t0;
		stats(&o, &g, &b);
		if (!k) {
			park0 = t_park[0];
			park0_written = b.tier[KVT_TIER_NVME].bytes_in - a.tier[KVT_TIER_NVME].bytes_in;
			parked_nvme = b.tier[KVT_TIER_NVME].used;
			parked_up = b.tier[KVT_TIER_FAST].used + b.tier[KVT_TIER_HOST].used;
		}
		t0 = cli_now();
		if ((r = kvt_session_resume(g.e, s)))
			fail(&o, "kvt_session_resume", r);
		t_resume[k] = cli_now() - t0;
		step(&o, &g, s, k, m->hp.n_vocab);
		t_ttft[k] = cli_now() - t0;
		stats(&o, &g, &c);
		diff(&b, &c, &d);
		nvme_read[k] = (double)d.nvme_read;
		nread_min = d.nvme_read < nread_min ? d.nvme_read : nread_min;
	}
	double park = o.repeat > 1 ? bench_median(t_park + 1, (int)o.repeat - 1) : park0;
	double resume = bench_median(t_resume, (int)o.repeat);
	double ttft = bench_median(t_ttft, (int)o.repeat);
	double nread = bench_median(nvme_read, (int)o.repeat);
	double floor_s = fio > 0 ? nread / fio : 0;
	/* The prefill ran over the same small tiers and waited for NVMe at
	 * times: less its stall (summed over threads, so more than the wall
	 * time it cost), it is a lower bound on a recompute with all KV in
	 * RAM. */
	double pre_min = t_prefill - dpre.stall_s > 0 ? t_prefill - dpre.stall_s : 0;

	if (!nread_min)
		fprintf(stderr, "kvt-bench resume: a resume read nothing from NVMe: the upper tiers "
			"held the conversation\n");
	if (o.json) {
		printf("{\"bench\":\"resume\",\"ctx\":%u,\"kv_bytes\":%" PRIu64 ",\"fast_pages\":%" PRIu64
		       ",\"host_pages\":%" PRIu64 ",\"nvme_pages\":%" PRIu64 ",\"prefill_s\":%.3f,"
		       "\"prefill_tok_per_s\":%.1f,\"prefill_nvme_read_bytes\":%" PRIu64
		       ",\"prefill_stall_s\":%.3f,\"first_park_ms\":%.2f,\"first_park_written\":%" PRIu64
		       ",\"park_ms\":%.2f,\"parked_pages_nvme\":%" PRIu64 ",\"parked_pages_upper\":%" PRIu64
		       ",\"resume_ms\":%.2f,\"ttft_ms\":%.2f,\"nvme_read_bytes\":%.0f,"
		       "\"nvme_read_bytes_min\":%" PRIu64 ",\"fio_gbps\":%.3f,\"io_floor_ms\":%.2f,"
		       "\"speedup\":%.1f,\"speedup_less_stall\":%.1f,\"goal\":10,\"repeat\":%u}\n",
		       ctx, kv, fast, host, nvme, t_prefill, ctx / t_prefill, dpre.nvme_read,
		       dpre.stall_s, park0 * 1e3, park0_written, park * 1e3, parked_nvme, parked_up,
		       resume * 1e3, ttft * 1e3, nread, nread_min, fio / 1e9, floor_s * 1e3,
		       t_prefill / ttft, pre_min / ttft, o.repeat);
	} else {
		char cs[32];

		printf("prefill (the recompute): %u tokens in %.2f s = %.1f tok/s; NVMe read during it "
		       "%.0f MB, stalled %.2f s (thread sum)\n", ctx, t_prefill, ctx / t_prefill,
		       (double)dpre.nvme_read / 1e6, dpre.stall_s);
		printf("first park: %.1f ms, wrote %.0f MB; then %" PRIu64 " pages on NVMe, %" PRIu64
		       " in fast/host; later parks %.1f ms (median)\n", park0 * 1e3,
		       (double)park0_written / 1e6, parked_nvme, parked_up, park * 1e3);
		printf("%-6s %9s %10s %9s %9s %9s %10s %8s %11s %6s\n", "ctx", "resume ms",
		       "1st tok ms", "NVMe MB", "fio GB/s", "floor ms", "prefill s", "speedup",
		       "-stall", "goal");
		printf("%-6s %9.1f %10.1f %9.1f %9.2f %9.1f %10.2f %7.0fx %10.0fx %6s\n",
		       bench_fmt_size(ctx, cs, sizeof(cs)), resume * 1e3, ttft * 1e3, nread / 1e6,
		       fio / 1e9, floor_s * 1e3, t_prefill, t_prefill / ttft, pre_min / ttft, ">=10x");
		printf("1st tok = kvt_session_resume + one kvt_decode step, median of %u (parked again "
		       "between); NVMe MB: read by it (median; least %.1f); floor = those bytes at fio's "
		       "rate; -stall: speedup against the prefill less its stall\n", o.repeat,
		       (double)nread_min / 1e6);
	}
	fflush(stdout);
	{
		char ex[128], cs[32];

		snprintf(ex, sizeof(ex), "--ctx %s --repeat %u --fio-seconds %g",
			 bench_fmt_size(ctx, cs, sizeof(cs)), o.repeat, o.fio_seconds);
		print_repro(&o, ex);
		print_fio_repro(&o, fsz);
	}
	free(tok);
	kvt_session_free(g.e, s);
	rig_close(&g);
	kvt_model_free(m);
	return 0;
}

/* ---------------------------------------------------------------------
 * prefill: against sgemm; decode against the read bandwidth
 */

/* Distinct (n_out, n_in) matrix shapes of one layer and how many of each. */
struct shape {
	unsigned n_out, n_in, count;
};

static unsigned layer_shapes(const struct kvt_layer *L, struct shape *sh)
{
	const struct kvt_mat *ms[7] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up,
					&L->w_down };
	unsigned n = 0;

	for (int i = 0; i < 7; i++) {
		unsigned j;

		for (j = 0; j < n; j++)
			if (sh[j].n_out == ms[i]->n_out && sh[j].n_in == ms[i]->n_in)
				break;
		if (j == n)
			sh[n++] = (struct shape){ ms[i]->n_out, ms[i]->n_in, 0 };
		sh[j].count++;
	}
	return n;
}

/* OpenBLAS's threads spin, calling sched_yield, for 2^28 cycles after a
 * threaded call (its THREAD_TIMEOUT) before they sleep: on two cores that
 * took 7 to 13 per cent off the prefill timed after the reference
 * (docs/benchmarks.md). Its shutdown ends them; its next threaded call
 * starts them again. Weak: a BLAS without it leaves them be. */
extern int blas_thread_shutdown_(void) __attribute__((weak));

static void blas_rest(int prev)
{
	openblas_set_num_threads(prev);
	if (blas_thread_shutdown_)
		blas_thread_shutdown_();
}

/* sgemm y (rows, n_out) = x (rows, n_in) * W^T, as kvt_matmul lays it out. */
static void gemm(const struct shape *s, unsigned rows, const float *x, const float *w, float *y)
{
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)s->n_out, (int)s->n_in,
		    1.0f, x, (int)s->n_in, w, (int)s->n_in, 0.0f, y, (int)s->n_out);
}

/* Read bandwidth: a sum over the buffer split into tasks on a pool. */
struct sweep {
	const uint8_t *buf;
	uint64_t bytes;
	unsigned tasks;
	uint64_t sink[256];	/* per thread */
};

typedef uint64_t v2u64 __attribute__((vector_size(16)));

static void sweep_task(void *arg, unsigned task, unsigned thread)
{
	struct sweep *sw = arg;
	uint64_t per = sw->bytes / sw->tasks / 64 * 64;
	const v2u64 *p = (const v2u64 *)(sw->buf + (uint64_t)task * per);
	v2u64 a = { 0, 0 }, b = a, c = a, d = a;

	for (uint64_t i = 0; i < per / 16; i += 4) {
		a += p[i];
		b += p[i + 1];
		c += p[i + 2];
		d += p[i + 3];
	}
	a += b + c + d;
	sw->sink[thread & 255] += a[0] + a[1];
}

/*
 * One pager with all KV in the fast tier. (i) --repeat rounds of: every
 * distinct matrix shape of a layer through cblas_sgemm at the prefill's
 * chunk of rows (median of GEMM_CALLS calls each), then a prefill of
 * --tokens random ids in a fresh session; the prefill's flops over its
 * median time against the sgemm mix's. (ii) a session of --ctx tokens
 * from kvt_session_fill_random, then --steps rounds of: a sum over
 * --bw-bytes on a pool of the engine's thread count, one decode step; the
 * bound is (weight bytes a token reads + the KV) at that read rate.
 */
int bench_prefill(int argc, char **argv)
{
	struct iopts o = {
		.sub = "prefill", .prefetch = -1, .nctx = 1, .ctx = { 4096 }, .steps = 8, .warmup = 2,
		.repeat = 3, .tokens = 1024, .bw_bytes = 1ull << 30,
		.syn = { .layers = 8, .dim = 1024, .heads = 16, .kv_heads = 8, .ff = 2816, .vocab = 4096,
			 .seed = 1, .type = KVT_GGML_F16 },
	};
	int r = parse_opts(&o, O_COMMON | OBIT(O_SET) | OBIT(O_CTX) | OBIT(O_STEPS) |
			   OBIT(O_WARMUP) | OBIT(O_REPEAT) | OBIT(O_TOKENS) | OBIT(O_BW_BYTES) |
			   OBIT(O_KV_TYPE),
			   argc, argv);

	if (r || o.nctx != 1) {
		if (!r)
			fprintf(stderr, "kvt-bench prefill: --ctx takes one context\n");
		usage_infer(o.sub, r == 1 ? stdout : stderr);
		return r == 1 ? 0 : 2;
	}
	unsigned ctx = (unsigned)o.ctx[0], ntok = o.tokens;
	uint64_t want = ctx + o.warmup + o.steps > ntok ? ctx + o.warmup + o.steps : ntok;

	o.syn.ctx = (unsigned)round_up(want + 64, 256);
	struct kvt_model *m = get_model(&o);
	const struct kvt_hparams *hp = &m->hp;
	struct kvt_config cfg;

	geometry(&o, m, &cfg);
	unsigned n_ctx = (unsigned)round_up(want + 16, cfg.page_tokens);
	uint64_t total = session_pages(m, &cfg, n_ctx);
	struct rig g;

	rig_open(&g, &o, m, n_ctx, resident_frames(&cfg, total + hp->n_layer), 16, 0);
	unsigned nthreads = engine_threads(&o), chunk = kvt_engine_params(g.e)->chunk;
	unsigned rows = ntok < chunk ? ntok : chunk;
	describe_model(&o, m, nthreads);

	/* Flops. The layers' matrices: 2 per weight per token; the head runs
	 * for the last row of each chunk only; causal attention: 2 flops per
	 * (query head dim, earlier-or-same position) for the scores and as
	 * many for the values, 4 * n_embd * n(n+1)/2 per layer. */
	struct shape sh[7];
	unsigned nsh = layer_shapes(&m->layers[0], sh);
	double layer_params = 0;

	for (unsigned i = 0; i < nsh; i++)
		layer_params += (double)sh[i].n_out * sh[i].n_in * sh[i].count;
	double f_mat = 2 * layer_params * hp->n_layer * ntok;
	double f_head = 2.0 * hp->n_vocab * hp->n_embd * ((ntok + chunk - 1) / chunk);
	double f_attn = 4.0 * hp->n_embd * ((double)ntok * (ntok + 1) / 2) * hp->n_layer;
	double f_total = f_mat + f_head + f_attn;

	/* The sgemm reference: OpenBLAS with the engine's thread count, f32,
	 * rows = the prefill's chunk, every shape of a layer weighted by its
	 * count; one untimed call per shape first. */
	unsigned maxo = 0, maxi = 0;

	for (unsigned i = 0; i < nsh; i++) {
		maxo = sh[i].n_out > maxo ? sh[i].n_out : maxo;
		maxi = sh[i].n_in > maxi ? sh[i].n_in : maxi;
	}
	float *gx = malloc((size_t)rows * maxi * sizeof(float));
	float *gw = malloc((size_t)maxo * maxi * sizeof(float));
	float *gy = malloc((size_t)rows * maxo * sizeof(float));

	if (!gx || !gw || !gy)
		fail(&o, "malloc", -ENOMEM);
	for (size_t i = 0; i < (size_t)rows * maxi; i++)
		gx[i] = (float)(i % 97) / 97.0f - 0.5f;
	for (size_t i = 0; i < (size_t)maxo * maxi; i++)
		gw[i] = (float)(i % 89) / 89.0f - 0.5f;
	int blas_prev = openblas_get_num_threads();

	openblas_set_num_threads((int)nthreads);
	for (unsigned i = 0; i < nsh; i++)
		gemm(&sh[i], rows, gx, gw, gy);
	blas_rest(blas_prev);

	double t_shape[7][MAX_SAMPLES], t_gemm[MAX_SAMPLES], t_pre[MAX_SAMPLES];

	/* Alternate the reference and the prefill so drift hits both alike;
	 * each shape's time in a round is the median of GEMM_CALLS calls. */
	for (unsigned k = 0; k < o.repeat; k++) {
		openblas_set_num_threads((int)nthreads);
		t_gemm[k] = 0;
		for (unsigned i = 0; i < nsh; i++) {
			double tc[GEMM_CALLS];

			for (int c = 0; c < GEMM_CALLS; c++) {
				double t0 = cli_now();

				gemm(&sh[i], rows, gx, gw, gy);
				tc[c] = cli_now() - t0;
			}
			t_shape[i][k] = bench_median(tc, GEMM_CALLS);
			t_gemm[k] += t_shape[i][k] * sh[i].count;
		}
		blas_rest(blas_prev);

		int32_t *tok = malloc((size_t)ntok * sizeof(int32_t));
		uint64_t x = 0x9e3779b97f4a7c15ull + k;

		if (!tok)
			fail(&o, "malloc", -ENOMEM);
		for (unsigned i = 0; i < ntok; i++) {
			x ^= x << 13; x ^= x >> 7; x ^= x << 17;
			tok[i] = (int32_t)(3 + x % (hp->n_vocab - 3));
		}
		struct kvt_session *s = new_session(&o, &g);
		double t0 = cli_now();

		if ((r = kvt_eval(g.e, s, tok, ntok, NULL, NULL)))
			fail(&o, "kvt_eval", r);
		t_pre[k] = cli_now() - t0;
		kvt_session_free(g.e, s);
		free(tok);
	}
	double gemm_flops = 2.0 * rows * layer_params;
	double sgemm_gflops = gemm_flops / bench_median(t_gemm, (int)o.repeat) / 1e9;
	double pre_s = bench_median(t_pre, (int)o.repeat);
	double pre_gflops = f_total / pre_s / 1e9;

	if (o.json) {
		for (unsigned i = 0; i < nsh; i++)
			printf("{\"bench\":\"sgemm\",\"m\":%u,\"n\":%u,\"k\":%u,\"count\":%u,"
			       "\"gflops\":%.2f,\"threads\":%u}\n", rows, sh[i].n_out, sh[i].n_in,
			       sh[i].count, 2.0 * rows * sh[i].n_out * sh[i].n_in /
			       bench_median(t_shape[i], (int)o.repeat) / 1e9, nthreads);
		printf("{\"bench\":\"prefill\",\"tokens\":%u,\"chunk\":%u,\"prefill_s\":%.4f,"
		       "\"tok_per_s\":%.1f,\"flops\":%.4g,\"flops_matmul\":%.4g,\"flops_attn\":%.4g,"
		       "\"gflops\":%.2f,\"sgemm_gflops\":%.2f,\"ratio\":%.3f,\"repeat\":%u}\n",
		       ntok, chunk, pre_s, ntok / pre_s, f_total, f_mat + f_head, f_attn, pre_gflops,
		       sgemm_gflops, pre_gflops / sgemm_gflops, o.repeat);
	} else {
		printf("(i) prefill of %u random token ids, all KV resident, chunk %u, median of %u; "
		       "reference: OpenBLAS cblas_sgemm, f32, %u threads, on the layer's shapes "
		       "(median of %u x %d calls), taking turns with the prefills:\n",
		       ntok, chunk, o.repeat, nthreads, o.repeat, GEMM_CALLS);
		for (unsigned i = 0; i < nsh; i++)
			printf("    sgemm %u x %u x %u (x%u per layer): %.1f GFLOP/s\n", rows, sh[i].n_out,
			       sh[i].n_in, sh[i].count, 2.0 * rows * sh[i].n_out * sh[i].n_in /
			       bench_median(t_shape[i], (int)o.repeat) / 1e9);
		printf("%-7s %9s %9s %11s %9s %9s %10s %6s\n", "tokens", "prefill s", "tok/s",
		       "GFLOP/tok", "attn %", "GFLOP/s", "sgemm GF/s", "ratio");
		printf("%-7u %9.3f %9.1f %11.3f %9.1f %9.1f %10.1f %6.2f\n", ntok, pre_s, ntok / pre_s,
		       f_total / ntok / 1e9, 100 * f_attn / f_total, pre_gflops, sgemm_gflops,
		       pre_gflops / sgemm_gflops);
	}
	fflush(stdout);
	free(gx);
	free(gw);
	free(gy);

	/* (ii) decode at ctx against (weights + KV) at the read bandwidth,
	 * the sweep and the step taking turns. */
	struct kvt_pool *pool;
	struct sweep sw = { .bytes = o.bw_bytes / 64 * 64 };

	if ((r = kvt_pool_new(o.threads, &pool)))
		fail(&o, "pool", r);
	sw.tasks = 16 * kvt_pool_threads(pool);
	uint8_t *buf = mmap(NULL, sw.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (buf == MAP_FAILED)
		fail(&o, "mmap", -errno);
	memset(buf, 1, sw.bytes);
	sw.buf = buf;
	struct kvt_session *s = new_session(&o, &g);

	fill(&o, &g, s, ctx);
	for (unsigned i = 0; i < o.warmup; i++)
		step(&o, &g, s, i, hp->n_vocab);
	kvt_pool_run(pool, sweep_task, &sw, sw.tasks);
	double t_bw[MAX_SAMPLES], t_step[MAX_SAMPLES];

	for (unsigned i = 0; i < o.steps; i++) {
		double t0 = cli_now();

		kvt_pool_run(pool, sweep_task, &sw, sw.tasks);
		t_bw[i] = cli_now() - t0;
		t0 = cli_now();
		step(&o, &g, s, i, hp->n_vocab);
		t_step[i] = cli_now() - t0;
	}
	double bw = (double)(sw.bytes / sw.tasks / 64 * 64 * sw.tasks) / bench_median(t_bw, (int)o.steps);
	double dstep = bench_median(t_step, (int)o.steps);
	uint64_t wb = weight_bytes_per_token(m);
	uint64_t kvb = (uint64_t)(ctx + o.warmup + o.steps / 2) * kvt_model_kv_bytes_per_token(m, o.kv_type);
	double bound = (double)(wb + kvb) / bw;
	unsigned bw_threads = kvt_pool_threads(pool);

	if (o.json) {
		printf("{\"bench\":\"decode_bw\",\"ctx\":%u,\"step_ms\":%.3f,\"tok_per_s\":%.2f,"
		       "\"weight_bytes\":%" PRIu64 ",\"kv_bytes\":%" PRIu64 ",\"read_gbps\":%.3f,"
		       "\"threads\":%u,\"bound_ms\":%.3f,\"ratio\":%.3f,\"steps\":%u,"
		       "\"context\":\"fill_random\",\"kv_type\":\"%s\"}\n", ctx, dstep * 1e3, 1 / dstep,
		       wb, kvb, bw / 1e9, bw_threads, bound * 1e3, dstep / bound, o.steps,
		       kvt_kv_name(o.kv_type));
	} else {
		char cs[32];

		printf("(ii) decode at %s tokens (kvt_session_fill_random), median of %u steps; reference: "
		       "a %u-thread sum over %.0f MiB, taking turns with the steps\n",
		       bench_fmt_size(ctx, cs, sizeof(cs)), o.steps, bw_threads, mib(sw.bytes));
		printf("%-7s %9s %9s %11s %9s %9s %9s %6s\n", "ctx", "ms/step", "tok/s", "weights MiB",
		       "KV MiB", "read GB/s", "bound ms", "ratio");
		printf("%-7s %9.2f %9.1f %11.1f %9.1f %9.2f %9.2f %6.2f\n", cs, dstep * 1e3, 1 / dstep,
		       mib(wb), mib(kvb), bw / 1e9, bound * 1e3, dstep / bound);
	}
	fflush(stdout);
	{
		char ex[160], cs[32], bs[32];

		snprintf(ex, sizeof(ex), "--tokens %u --ctx %s --steps %u --warmup %u --repeat %u "
			 "--bw-bytes %s --kv-type %s", ntok, bench_fmt_size(ctx, cs, sizeof(cs)), o.steps,
			 o.warmup, o.repeat, bench_fmt_size(o.bw_bytes, bs, sizeof(bs)),
			 kvt_kv_name(o.kv_type));
		print_repro(&o, ex);
	}
	uint64_t sink = 0;

	for (int i = 0; i < 256; i++)
		sink += sw.sink[i];
	if (sink == 42)
		fputc(' ', stderr);	/* keep the reads */
	munmap(buf, sw.bytes);
	kvt_pool_free(pool);
	kvt_session_free(g.e, s);
	rig_close(&g);
	kvt_model_free(m);
	return 0;
}

/* ---------------------------------------------------------------------
 * serve: many conversations, and conversations sharing a system prompt
 *
 * Part 1, many conversations: --convs sessions of --history tokens each
 * (kvt_session_fill_random). A turn takes the next --batch of them in
 * round-robin order, resumes those that are parked, decodes --tokens
 * steps for all of them together, and (set-up "park") parks them again.
 * Set-ups: "resident" (every page in the fast tier: the reference),
 * "park" and "keep" (the same tiers: fast 2x the active set, host 1/4 of
 * the KV, NVMe the rest; "keep" never parks and leaves the choice to the
 * policies). One round over all conversations warms up; --rounds more are
 * timed. Reported: median turn time, tokens/s over all sessions, the
 * ratio to resident, the fast tier's hit ratio, NVMe bytes read a turn.
 *
 * Part 2, a shared system prompt: --system tokens computed once in a root
 * session, then --convs sessions forked from it, each adding --history/8
 * tokens of its own ("fork"); against the same conversations each holding
 * its own copy of the prompt ("copy"). Same tiers for both: fast 1/4, host
 * 1/4 of the copies' KV, NVMe the rest. Reported: pages held, set-up time,
 * then turns as in part 1 without parking.
 */

struct serve_res {
	double	 turn_s;		/* median */
	double	 tok_s;			/* tokens decoded a second, all sessions */
	double	 setup_s;
	double	 fast_hit;
	double	 nvme_read;		/* bytes a turn */
	uint64_t pages;			/* live pages after set-up */
};

/* A turn: resume (if parked), o->tokens batched steps, park (if asked). */
static double serve_turn(const struct iopts *o, struct rig *g, struct kvt_session **ss,
			 unsigned n, int park, uint32_t n_vocab, unsigned *tick)
{
	int32_t tok[64];
	double t0 = cli_now();
	int r;

	for (unsigned i = 0; park && i < n; i++)
		if ((r = kvt_session_resume(g->e, ss[i])))
			fail(o, "kvt_session_resume", r);
	for (unsigned k = 0; k < o->tokens; k++) {
		for (unsigned i = 0; i < n; i++)
			tok[i] = (int32_t)(3 + (*tick)++ % (n_vocab - 3));
		if ((r = kvt_decode(g->e, ss, tok, n)) != (int)n)
			fail(o, "kvt_decode", r < 0 ? r : -EIO);
	}
	for (unsigned i = 0; park && i < n; i++)
		if ((r = kvt_session_park(g->e, ss[i])))
			fail(o, "kvt_session_park", r);
	return cli_now() - t0;
}

/* Rounds of turns over convs sessions, the first round untimed. */
static void serve_rounds(const struct iopts *o, struct rig *g, struct kvt_session **conv,
			 unsigned convs, int park, uint32_t n_vocab, struct serve_res *res)
{
	unsigned b = o->batch, turns = (convs + b - 1) / b, tick = 0, nt = 0;
	double t[MAX_SAMPLES], total = 0;
	struct kvt_stats a, z;
	struct delta d;

	for (unsigned round = 0; round <= o->repeat; round++) {
		if (round == 1)
			stats(o, g, &a);
		for (unsigned k = 0; k < turns; k++) {
			unsigned first = k * b, n = convs - first < b ? convs - first : b;
			double s = serve_turn(o, g, conv + first, n, park, n_vocab, &tick);

			if (round && nt < MAX_SAMPLES)
				t[nt++] = s;
			if (round)
				total += s;
		}
	}
	stats(o, g, &z);
	diff(&a, &z, &d);
	res->turn_s = bench_median(t, (int)nt);
	res->tok_s = (double)o->repeat * convs * o->tokens / total;
	res->fast_hit = d.fast_hit;
	res->nvme_read = (double)d.nvme_read / ((double)o->repeat * turns);
}

static void serve_print(const struct iopts *o, const char *part, const char *name,
			const struct serve_res *r, const struct serve_res *ref, uint64_t pb)
{
	if (o->json) {
		printf("{\"bench\":\"serve\",\"part\":\"%s\",\"setup\":\"%s\",\"convs\":%u,"
		       "\"batch\":%u,\"history\":%u,\"system\":%u,\"tokens_per_turn\":%u,"
		       "\"pages\":%" PRIu64 ",\"page_bytes\":%" PRIu64 ",\"setup_s\":%.3f,"
		       "\"turn_ms\":%.3f,\"tok_per_s\":%.2f,\"ratio\":%.3f,\"fast_hit\":%.4f,"
		       "\"nvme_bytes_per_turn\":%.0f}\n",
		       part, name, o->convs, o->batch, o->history, o->system, o->tokens, r->pages,
		       pb, r->setup_s, r->turn_s * 1e3, r->tok_s, ref ? r->turn_s / ref->turn_s : 1,
		       r->fast_hit, r->nvme_read);
		return;
	}
	char ratio[16] = "ref";

	if (ref)
		snprintf(ratio, sizeof(ratio), "%.2f", r->turn_s / ref->turn_s);
	printf("%-7s %-9s %7" PRIu64 " %7.1f %9.2f %8.1f %8.1f %6s %8.3f %8.1f\n", part, name,
	       r->pages, mib(r->pages * pb), r->setup_s, r->turn_s * 1e3, r->tok_s, ratio,
	       r->fast_hit, r->nvme_read / 1e6);
}

int bench_serve(int argc, char **argv)
{
	struct iopts o = {
		.sub = "serve", .prefetch = -1, .steps = 1, .warmup = 0, .repeat = 2, .tokens = 4,
		.convs = 32, .batch = 4, .history = 2048, .system = 4096,
		.syn = { .layers = 4, .dim = 256, .heads = 4, .kv_heads = 4, .ff = 768, .vocab = 4096,
			 .seed = 1, .type = KVT_GGML_F16 },
	};
	int r = parse_opts(&o, O_COMMON | O_TIERS | OBIT(O_REPEAT) | OBIT(O_TOKENS) |
			   OBIT(O_CONVS) | OBIT(O_BATCH) | OBIT(O_HISTORY) | OBIT(O_SYSTEM),
			   argc, argv);

	if (!r && (!o.convs || !o.batch || o.batch > 64 || o.batch > o.convs || !o.history ||
		   !o.system || o.tokens > 1024)) {
		fprintf(stderr, "kvt-bench serve: --convs, --history and --system must be positive, "
			"--batch 1..64 and at most --convs, --tokens at most 1024\n");
		r = 2;
	}
	if (r) {
		usage_infer(o.sub, r == 1 ? stdout : stderr);
		return r == 1 ? 0 : 2;
	}
	unsigned own = o.history / 8 ? o.history / 8 : 1;
	unsigned longest = (o.history > o.system + own ? o.history : o.system + own) +
			   (o.repeat + 1) * o.tokens + 64;

	o.syn.ctx = (unsigned)round_up(longest, 256);
	struct kvt_model *m = get_model(&o);
	struct kvt_config cfg;

	geometry(&o, m, &cfg);
	uint64_t pb = kvt_config_page_bytes(&cfg), layers = m->hp.n_layer;
	unsigned n_ctx = (unsigned)round_up(longest, cfg.page_tokens);
	uint64_t per_conv = session_pages(m, &cfg, o.history + (o.repeat + 1) * o.tokens);
	uint64_t total = per_conv * o.convs;
	struct kvt_session **conv = calloc(o.convs + 1, sizeof(*conv));
	struct serve_res res[5];

	if (!conv)
		fail(&o, "calloc", -ENOMEM);
	describe_model(&o, m, engine_threads(&o));
	if (!o.json) {
		printf("part 1: %u conversations of %u tokens, %u at a time, %u tokens a turn; "
		       "part 2: a %u-token system prompt, %u conversations adding %u tokens each\n",
		       o.convs, o.history, o.batch, o.tokens, o.system, o.convs, own);
		printf("%-7s %-9s %7s %7s %9s %8s %8s %6s %8s %8s\n", "part", "set-up", "pages", "MiB",
		       "set-up s", "turn ms", "tok/s", "ratio", "fast hit", "nvme MB");
	}
	/* Part 1: resident, park, keep. */
	for (int su = 0; su < 3; su++) {
		uint64_t active = per_conv * o.batch;
		uint64_t fast = su ? 2 * active + layers * o.convs : resident_frames(&cfg, total +
										   layers * o.convs);
		uint64_t host = su ? total / 4 : 16, nvme = su ? total + total / 8 : 0;
		struct rig g;
		struct kvt_stats st;

		o.max_batch = o.batch;
		rig_open(&g, &o, m, n_ctx, fast, host, nvme);
		double t0 = cli_now();

		for (unsigned i = 0; i < o.convs; i++) {
			conv[i] = new_session(&o, &g);
			fill(&o, &g, conv[i], o.history);
			if (su == 1 && (r = kvt_session_park(g.e, conv[i])))
				fail(&o, "kvt_session_park", r);
		}
		res[su].setup_s = cli_now() - t0;
		stats(&o, &g, &st);
		res[su].pages = st.pages;
		serve_rounds(&o, &g, conv, o.convs, su == 1, m->hp.n_vocab, &res[su]);
		serve_print(&o, "many", su == 0 ? "resident" : su == 1 ? "park" : "keep", &res[su],
			    su ? &res[0] : NULL, pb);
		for (unsigned i = 0; i < o.convs; i++)
			kvt_session_free(g.e, conv[i]);
		rig_close(&g);
		fflush(stdout);
	}
	/* Part 2: fork against copy, on the same tiers. */
	uint64_t copy_pages = session_pages(m, &cfg, o.system + own) * o.convs;

	for (int su = 3; su < 5; su++) {
		struct kvt_session *root = NULL;
		struct rig g;
		struct kvt_stats st;

		rig_open(&g, &o, m, n_ctx, copy_pages / 4 + 2 * layers * (o.convs + 1),
			 copy_pages / 4, copy_pages + copy_pages / 8);
		double t0 = cli_now();

		if (su == 3) {
			root = new_session(&o, &g);
			fill(&o, &g, root, o.system);
		}
		for (unsigned i = 0; i < o.convs; i++) {
			if (root) {
				if ((r = kvt_session_fork(g.e, root, o.system, &conv[i])))
					fail(&o, "kvt_session_fork", r);
			} else {
				conv[i] = new_session(&o, &g);
				fill(&o, &g, conv[i], o.system);
			}
			fill(&o, &g, conv[i], own);
		}
		res[su].setup_s = cli_now() - t0;
		stats(&o, &g, &st);
		res[su].pages = st.pages;
		serve_rounds(&o, &g, conv, o.convs, 0, m->hp.n_vocab, &res[su]);
		serve_print(&o, "shared", su == 3 ? "fork" : "copy", &res[su],
			    su == 4 ? &res[3] : NULL, pb);
		for (unsigned i = 0; i < o.convs; i++)
			kvt_session_free(g.e, conv[i]);
		if (root)
			kvt_session_free(g.e, root);
		rig_close(&g);
		fflush(stdout);
	}
	{
		char extra[256];

		snprintf(extra, sizeof(extra), "--convs %u --batch %u --history %u --system %u "
			 "--tokens %u --repeat %u", o.convs, o.batch, o.history, o.system, o.tokens,
			 o.repeat);
		print_repro(&o, extra);
	}
	free(conv);
	kvt_model_free(m);
	return 0;
}
