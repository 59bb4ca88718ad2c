/* SPDX-License-Identifier: MIT */
/*
 * kvt-sim: replay a trace against tiers and policies, draw miss-ratio
 * curves, generate synthetic traces. The engine is pager/sim.c; this file
 * is flags, loading, printing and gnuplot.
 *
 *   kvt-sim run TRACE [--tier NAME=SIZE:POLICY[:COSTS]]... [--json]
 *   kvt-sim mrc TRACE --policies lru,clock,... --sizes 1%,5%,... [--plot F.png]
 *   kvt-sim gen scan|zipf ... -o FILE
 *   kvt-sim info TRACE
 *
 * TRACE is a kvtier trace (docs/trace-format.md) or a libCacheSim
 * oracleGeneral file, told apart by the kvtier magic, either of them
 * possibly zstd-compressed, or "-" for standard input. Results go to
 * stdout, messages and the progress bar (on a terminal) to stderr.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pager/afile.h"
#include "pager/policy.h"
#include "pager/sim.h"
#include "pager/trace.h"
#include "tools/cli.h"

#define MAX_LIST 64

static const char *prog = "kvt-sim";

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvt-sim run TRACE [options]      replay a trace against tiers\n"
		"       kvt-sim mrc TRACE [options]      miss ratio against size, per policy\n"
		"       kvt-sim gen scan|zipf [options]  write a synthetic trace\n"
		"       kvt-sim info TRACE               what a trace holds\n"
		"\n"
		"TRACE: a kvtier trace (kvt-run --trace, kvt-trace import) or a libCacheSim\n"
		"oracleGeneral file (24-byte records), recognised by its first bytes; either\n"
		"may be zstd-compressed (*.oracleGeneral.zst), and - reads standard input.\n"
		"\n"
		"run\n"
		"  --tier NAME=SIZE:POLICY[:COSTS]  a tier, top first; repeat for more. SIZE:\n"
		"                        pages (4096), a share of the trace's pages (10%%) or\n"
		"                        bytes (64M, needs the page size); POLICY: a spec such\n"
		"                        as lru or s3fifo:small=20; COSTS: bw=12G,lat=5us (a page\n"
		"                        moved in or out), or rbw/rlat (read up), wbw/wlat\n"
		"                        (write down). A kvtier trace recorded by the pager\n"
		"                        brings its own tiers (fast, host, nvme): --tier host=...\n"
		"                        replaces one of them, --only drops those not given.\n"
		"  --only                only the tiers given with --tier\n"
		"  --origin COSTS        cost of reading a page from the backing store\n"
		"  --page-bytes N        bytes per page (default: the trace's header, else 4096)\n"
		"  --backed, --no-backing  a backing store under the last tier holds every\n"
		"                        page (default for traces without NEW records) or not\n"
		"                        (as the pager: only copies stay in the last tier)\n"
		"  --wm-min N            frames tier 0 keeps free for new pages (default 0)\n"
		"  --prefetch N          the pager's layer-ahead prefetch, N layers (default 0;\n"
		"                        kvt-run's is 2); made at once, not on a thread\n"
		"  --json                one JSON object on stdout\n"
		"  --no-bar              no progress bar\n"
		"\n"
		"mrc\n"
		"  --policies LIST       comma-separated policy specs (default auto,lru,clock,s3fifo,sieve)\n"
		"  --sizes LIST          sizes as for --tier: 1%%,2%%,5%% or 1000,2000 or 64M,128M\n"
		"                        (default 1%%,2%%,5%%,10%%,20%%,30%%,40%%,50%%,75%%,90%%)\n"
		"  --threads N           replays at once (default: the CPUs); output is the same\n"
		"  --csv FILE, --json FILE  the points (policy, frames, size_pct, refs, hits,\n"
		"                        misses, miss_ratio); '-' for stdout\n"
		"  --plot FILE           FILE.png or FILE.svg through gnuplot (repeatable); the\n"
		"                        gnuplot script is kept beside it as FILE.gp\n"
		"  --title TEXT          the plot's title\n"
		"\n"
		"gen scan  --layers L --pages P --append-every A --steps S -o FILE\n"
		"          the decode scan: each step reads every page of every layer once, in\n"
		"          order; every A steps one page is appended to each layer\n"
		"gen zipf  --requests N --objects M [--alpha 1.0] [--seed 1] -o FILE\n"
		"  --format kvt|oracle   kvtier (default for scan) or oracleGeneral (zipf)\n"
		"  --page-bytes N        recorded as the page size (default 4096)\n"
		"\n"
		"--version               the version and the build's features\n");
}

static int die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 1;
}

static int bad_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad_usage(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (kvt-sim --help lists the options)\n");
	return 2;
}

/* An unsigned integer, all of s: 0 or -1. */
static int parse_u64(const char *s, uint64_t *v)
{
	char *end;

	if (!s || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	*v = strtoull(s, &end, 10);
	return errno || *end ? -1 : 0;
}

/* A size: "N" pages, "N%" of the trace's pages, "NK|M|G|T[B|iB]" bytes.
 * kind: 0 pages, 1 percent (*pct), 2 bytes. */
struct size {
	int kind;
	double v;
};

static int parse_size(const char *s, struct size *z)
{
	char *end;
	double v;

	if (!s || *s < '0' || *s > '9')
		return -1;
	v = strtod(s, &end);
	if (end == s || !(v > 0))
		return -1;
	if (!strcmp(end, "%")) {
		if (v > 100)
			return -1;
		*z = (struct size){ 1, v };
		return 0;
	}
	if (!*end) {
		if (v != (double)(uint64_t)v)
			return -1;
		*z = (struct size){ 0, v };
		return 0;
	}
	static const char sfx[] = "KMGT";
	const char *p = strchr(sfx, *end);
	if (!p || !*end)
		return -1;
	end++;
	if (*end && strcmp(end, "B") && strcmp(end, "iB"))
		return -1;
	*z = (struct size){ 2, v * (double)(1ull << (10 * (p - sfx + 1))) };
	return 0;
}

/* Frames for a size, at least 1; 0 when it cannot be resolved. */
static uint64_t size_frames(const struct size *z, uint32_t npages, uint64_t page_bytes)
{
	double f;

	switch (z->kind) {
	case 1: f = z->v / 100.0 * npages; break;
	case 2: f = page_bytes ? z->v / (double)page_bytes : 0; break;
	default: f = z->v; break;
	}
	if (f < 1 && f > 0)
		f = 1;
	return (uint64_t)(f + 1e-9);
}

static int split_list(char *s, char **v, int max)
{
	int n = 0;

	for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
		if (n == max)
			return -1;
		v[n++] = tok;
	}
	return n;
}

/* ---------------------------------------------------------------------
 * Progress
 */

struct bar {
	const char *what;
	double last;
};

static void bar_cb(void *arg, double frac)
{
	struct bar *b = arg;
	double now = cli_now();

	if (frac < 1 && now - b->last < 0.1)
		return;
	b->last = now;
	cli_bar(b->what, frac, "");
}

static int load(const char *path, struct kvt_sim_trace *t, int quiet)
{
	char err[512];
	int r;

	if (!quiet && cli_bar_on)
		fprintf(stderr, "loading %s...\r", path);
	r = kvt_sim_trace_load(path, t, err, sizeof(err));
	if (!quiet && cli_bar_on)
		fprintf(stderr, "\033[K");
	if (r)
		return die("%s", err);
	if (!t->naccess)
		return die("%s: no ACCESS records: nothing to replay", path);
	if (t->gaps)
		fprintf(stderr, "%s: warning: %s: the recorder dropped records in %llu places; "
			"a replay cannot match the live run exactly\n", prog, path,
			(unsigned long long)t->gaps);
	return 0;
}

static const char *source_name(const struct kvt_sim_trace *t)
{
	if (!t->has_hdr)
		return "no header";
	switch (t->hdr.source) {
	case KVT_SRC_PAGER: return "recorded by the pager";
	case KVT_SRC_ORACLE: return "imported from oracleGeneral";
	case KVT_SRC_MOONCAKE: return "imported from Mooncake";
	case KVT_SRC_SYNTH: return "synthetic";
	default: return "unknown source";
	}
}

static int any_offline(const char *const *pol, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		const struct kvt_policy_ops *o = kvt_policy_find(pol[i]);
		if (o && (o->flags & KVT_POLICY_OFFLINE))
			return 1;
	}
	return 0;
}

/* ---------------------------------------------------------------------
 * run
 */

struct tierspec {
	char name[32];
	struct size size;
	struct kvt_sim_tier t;
};

/* "NAME=SIZE:POLICY[:params][:COSTS]". The last field is costs when its
 * first key is one of bw, lat, rbw, rlat, wbw, wlat. */
static int parse_tier(const char *arg, struct tierspec *ts, char *err, size_t errlen)
{
	char buf[256], *eq, *sz, *pol, *costs = NULL, *c;

	memset(ts, 0, sizeof(*ts));
	if (strlen(arg) >= sizeof(buf)) {
		snprintf(err, errlen, "--tier %s: too long", arg);
		return -1;
	}
	strcpy(buf, arg);
	eq = strchr(buf, '=');
	if (!eq || eq == buf || eq - buf >= (long)sizeof(ts->name)) {
		snprintf(err, errlen, "--tier %s: want NAME=SIZE:POLICY[:COSTS]", arg);
		return -1;
	}
	*eq = 0;
	snprintf(ts->name, sizeof(ts->name), "%.*s", (int)(eq - buf), buf);
	sz = eq + 1;
	pol = strchr(sz, ':');
	if (!pol) {
		snprintf(err, errlen, "--tier %s: no policy (want NAME=SIZE:POLICY, e.g. fast=10%%:lru)",
			 arg);
		return -1;
	}
	*pol++ = 0;
	if (parse_size(sz, &ts->size)) {
		snprintf(err, errlen, "--tier %s: size '%s': want pages (4096), a share of the "
			 "trace's pages (10%%) or bytes (64M)", arg, sz);
		return -1;
	}
	c = strrchr(pol, ':');
	if (c) {
		static const char *const keys[] = { "bw=", "lat=", "rbw=", "rlat=", "wbw=", "wlat=" };
		for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
			if (!strncmp(c + 1, keys[i], strlen(keys[i]))) {
				*c = 0;
				costs = c + 1;
				break;
			}
	}
	if (!*pol || strlen(pol) >= sizeof(ts->t.policy)) {
		snprintf(err, errlen, "--tier %s: bad policy '%s'", arg, pol);
		return -1;
	}
	snprintf(ts->t.policy, sizeof(ts->t.policy), "%s", pol);
	if (!kvt_policy_find(pol)) {
		snprintf(err, errlen, "--tier %s: no such policy '%.*s' (built in:", arg,
			 (int)strcspn(pol, ":"), pol);
		for (const struct kvt_policy_ops *const *p = kvt_policies; *p; p++)
			snprintf(err + strlen(err), errlen - strlen(err), " %s", (*p)->name);
		snprintf(err + strlen(err), errlen - strlen(err), ")");
		return -1;
	}
	if (costs) {
		char e[200];
		if (kvt_sim_parse_costs(costs, &ts->t, e, sizeof(e))) {
			snprintf(err, errlen, "--tier %s: %s", arg, e);
			return -1;
		}
	}
	return 0;
}

static void mib(char *buf, size_t len, uint64_t bytes, uint64_t pb)
{
	if (pb > 1)
		snprintf(buf, len, "%.1f", (double)bytes / (1 << 20));
	else
		snprintf(buf, len, "%llu", (unsigned long long)bytes);
}

/* The first and last record's time: oracleGeneral's clock_time is in
 * whole seconds (an imported one keeps it), a kvtier trace's in ns. */
static const char *time_span(const struct kvt_sim_trace *t, char *buf, size_t len)
{
	if (t->time_s)
		snprintf(buf, len, "%llu s .. %llu s", (unsigned long long)t->time_first,
			 (unsigned long long)t->time_last);
	else
		snprintf(buf, len, "%.6f s .. %.6f s", t->time_first / 1e9, t->time_last / 1e9);
	return buf;
}

static void print_run(const char *path, const struct kvt_sim_trace *t,
		      const struct kvt_sim_config *c, char names[][32],
		      const struct kvt_sim_result *r, double secs)
{
	uint64_t pb = c->page_bytes;
	const char *unit = pb > 1 ? "MiB" : "pages";
	int backed = c->backed < 0 ? !t->nnew : c->backed;

	char span[64];

	printf("trace   %s: %s, %s; %zu records, %llu references, %u pages, %llu steps, time %s; "
	       "loaded in %.2f s\n", path, t->format, source_name(t), t->n,
	       (unsigned long long)t->naccess, t->npages, (unsigned long long)t->steps,
	       time_span(t, span, sizeof(span)), t->load_s);
	printf("replay  %u tier%s, %s; %.2f s, %.2f M references/s\n", c->ntiers,
	       c->ntiers > 1 ? "s" : "",
	       backed ? "backing store under the last tier" : "no backing store",
	       secs, secs > 0 ? (double)r->refs / secs / 1e6 : 0);
	printf("\n%-6s %-14s %9s %9s %11s %11s %7s %9s %9s %9s %9s %9s %8s %8s %9s",
	       "tier", "policy", "frames", "used", "hits", "misses", "hit%", "promoted",
	       "demoted", "dropped", unit, unit, "down", "up", "move s");
	printf("%s\n", r->mass_total > 0 ? "   mass%" : "");
	printf("%-6s %-14s %9s %9s %11s %11s %7s %9s %9s %9s %9s %9s %8s %8s %9s%s\n", "", "", "",
	       "", "", "", "", "", "", "", "in", "out", unit, unit, "",
	       r->mass_total > 0 ? "" : "");
	for (unsigned ti = 0; ti < c->ntiers; ti++) {
		const struct kvt_sim_tier_result *x = &r->tier[ti];
		char in[32], out[32], dn[32], up[32];
		uint64_t look = x->hits + x->misses;
		mib(in, sizeof(in), x->bytes_in, pb);
		mib(out, sizeof(out), x->bytes_out, pb);
		mib(dn, sizeof(dn), x->down_bytes, pb);
		mib(up, sizeof(up), x->up_bytes, pb);
		printf("%-6s %-14s %9llu %9llu %11llu %11llu %6.2f%% %9llu %9llu %9llu %9s %9s %8s "
		       "%8s %9.3f", names[ti], c->tier[ti].policy,
		       (unsigned long long)c->tier[ti].frames, (unsigned long long)x->used,
		       (unsigned long long)x->hits, (unsigned long long)x->misses,
		       look ? 100.0 * (double)x->hits / (double)look : 0,
		       (unsigned long long)x->promotions, (unsigned long long)x->demotions,
		       (unsigned long long)x->drops, in, out, dn, up, x->move_s);
		if (r->mass_total > 0)
			printf(" %7.2f%%", 100.0 * x->mass / r->mass_total);
		printf("\n");
	}
	printf("\nstore   %llu reads from the backing store; %llu references or new pages found "
	       "no frame\n", (unsigned long long)r->origin_reads, (unsigned long long)r->refused);
	printf("stall   %.3f s estimated in all, %.3f ms per step (%llu steps)\n", r->stall_s,
	       r->steps ? 1e3 * r->stall_s / (double)r->steps : 0, (unsigned long long)r->steps);
	if (c->prefetch_depth)
		printf("prefetch depth %u: issued %llu, hit %llu, wasted %llu, dropped %llu; %.3f s of "
		       "moves off the demand path\n", c->prefetch_depth,
		       (unsigned long long)r->prefetch_issued, (unsigned long long)r->prefetch_hit,
		       (unsigned long long)r->prefetch_wasted, (unsigned long long)r->prefetch_dropped,
		       r->prefetch_s);
	if (t->has_hdr && t->hdr.source == KVT_SRC_PAGER) {
		printf("live    what the trace says the pager did:");
		for (unsigned ti = 0; ti < 3 && t->hdr.frames[ti]; ti++)
			printf("  %s hits %llu misses %llu promoted %llu demoted %llu",
			       kvt_tier_name((int)ti), (unsigned long long)t->live.hits[ti],
			       (unsigned long long)t->live.misses[ti],
			       (unsigned long long)t->live.promotions[ti],
			       (unsigned long long)t->live.demotions[ti]);
		printf("\n");
	}
}

/* s as a JSON string (quotes, backslashes and control bytes escaped). */
static void jstr(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			printf("\\%c", ch);
		else if (ch < 0x20)
			printf("\\u%04x", ch);
		else
			putchar(ch);
	}
	putchar('"');
}

static void json_run(const char *path, const struct kvt_sim_trace *t,
		     const struct kvt_sim_config *c, char names[][32],
		     const struct kvt_sim_result *r, double secs)
{
	printf("{\"trace\": ");
	jstr(path);
	printf(", \"format\": \"%s\", \"records\": %zu, \"references\": %llu, "
	       "\"pages\": %u, \"steps\": %llu, \"time_first_s\": %.9g, \"time_last_s\": %.9g, "
	       "\"load_s\": %.3f, \"replay_s\": %.3f,\n"
	       " \"backed\": %d, \"page_bytes\": %llu,\n \"tiers\": [",
	       t->format, t->n, (unsigned long long)t->naccess, t->npages,
	       (unsigned long long)t->steps, t->time_s ? (double)t->time_first : t->time_first / 1e9,
	       t->time_s ? (double)t->time_last : t->time_last / 1e9, t->load_s, secs,
	       c->backed < 0 ? !t->nnew : c->backed, (unsigned long long)c->page_bytes);
	for (unsigned ti = 0; ti < c->ntiers; ti++) {
		const struct kvt_sim_tier_result *x = &r->tier[ti];
		uint64_t look = x->hits + x->misses;
		printf("%s\n  {\"name\": ", ti ? "," : "");
		jstr(names[ti]);
		printf(", \"policy\": ");
		jstr(c->tier[ti].policy);
		printf(", \"frames\": %llu, \"used\": %llu, "
		       "\"hits\": %llu, \"misses\": %llu, \"hit_ratio\": %.6f, \"promotions\": %llu, "
		       "\"demotions\": %llu, \"drops\": %llu, \"bytes_in\": %llu, \"bytes_out\": %llu, "
		       "\"down_bytes\": %llu, \"up_bytes\": %llu, \"move_s\": %.6f, \"mass_share\": %.6f}",
		       (unsigned long long)c->tier[ti].frames, (unsigned long long)x->used,
		       (unsigned long long)x->hits, (unsigned long long)x->misses,
		       look ? (double)x->hits / (double)look : 0, (unsigned long long)x->promotions,
		       (unsigned long long)x->demotions, (unsigned long long)x->drops,
		       (unsigned long long)x->bytes_in, (unsigned long long)x->bytes_out,
		       (unsigned long long)x->down_bytes, (unsigned long long)x->up_bytes, x->move_s,
		       r->mass_total > 0 ? x->mass / r->mass_total : 0);
	}
	printf("\n ], \"origin_reads\": %llu, \"refused\": %llu, \"stall_s\": %.6f, "
	       "\"stall_per_step_s\": %.9f, \"mass_total\": %.6f, \"prefetch_depth\": %u, "
	       "\"prefetch\": {\"issued\": %llu, \"hit\": %llu, \"wasted\": %llu, "
	       "\"dropped\": %llu, \"move_s\": %.6f}",
	       (unsigned long long)r->origin_reads, (unsigned long long)r->refused, r->stall_s,
	       r->steps ? r->stall_s / (double)r->steps : 0, r->mass_total, c->prefetch_depth,
	       (unsigned long long)r->prefetch_issued, (unsigned long long)r->prefetch_hit,
	       (unsigned long long)r->prefetch_wasted, (unsigned long long)r->prefetch_dropped,
	       r->prefetch_s);
	if (t->has_hdr && t->hdr.source == KVT_SRC_PAGER) {
		printf(",\n \"live\": [");
		for (unsigned ti = 0; ti < 3 && t->hdr.frames[ti]; ti++)
			printf("%s{\"hits\": %llu, \"misses\": %llu, \"promotions\": %llu, "
			       "\"demotions\": %llu, \"drops\": %llu}", ti ? ", " : "",
			       (unsigned long long)t->live.hits[ti], (unsigned long long)t->live.misses[ti],
			       (unsigned long long)t->live.promotions[ti],
			       (unsigned long long)t->live.demotions[ti],
			       (unsigned long long)t->live.drops[ti]);
		printf("]");
	}
	printf("}\n");
}

static int cmd_run(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "tier", required_argument, 0, 't' }, { "only", no_argument, 0, 'O' },
		{ "origin", required_argument, 0, 'g' }, { "page-bytes", required_argument, 0, 'b' },
		{ "backed", no_argument, 0, 'B' }, { "no-backing", no_argument, 0, 'N' },
		{ "wm-min", required_argument, 0, 'w' }, { "prefetch", required_argument, 0, 'f' },
		{ "json", no_argument, 0, 'j' }, { "no-bar", no_argument, 0, 'q' },
		{ "help", no_argument, 0, 'h' }, { 0 } };
	struct tierspec ts[KVT_SIM_MAX_TIERS];
	uint64_t depth = 0;
	struct kvt_sim_tier origin = { 0 };
	unsigned nts = 0;
	uint64_t page_bytes = 0, wm_min = 0;
	int only = 0, backed = -1, json = 0, no_bar = 0, c;
	char err[512];

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 't':
			if (nts == KVT_SIM_MAX_TIERS)
				return bad_usage("at most %d tiers", KVT_SIM_MAX_TIERS);
			if (parse_tier(optarg, &ts[nts], err, sizeof(err)))
				return bad_usage("%s", err);
			for (unsigned i = 0; i < nts; i++)
				if (!strcmp(ts[i].name, ts[nts].name))
					return bad_usage("--tier %s: tier '%s' given twice", optarg,
							 ts[i].name);
			nts++;
			break;
		case 'O': only = 1; break;
		case 'g':
			if (kvt_sim_parse_costs(optarg, &origin, err, sizeof(err)))
				return bad_usage("--origin %s: %s", optarg, err);
			break;
		case 'b':
			if (parse_u64(optarg, &page_bytes) || !page_bytes)
				return bad_usage("--page-bytes %s: want a positive integer", optarg);
			break;
		case 'B': backed = 1; break;
		case 'N': backed = 0; break;
		case 'w':
			if (parse_u64(optarg, &wm_min) || wm_min >= UINT32_MAX)
				return bad_usage("--wm-min %s: want a number of frames", optarg);
			break;
		case 'f':
			if (parse_u64(optarg, &depth) || depth > 64)
				return bad_usage("--prefetch %s: want a depth 0..64", optarg);
			break;
		case 'j': json = 1; break;
		case 'q': no_bar = 1; break;
		case 'h': usage(stdout); return 0;
		default: return 2;
		}
	}
	if (optind != argc - 1)
		return bad_usage(optind >= argc ? "run: no trace given" : "run: one trace, please");
	const char *path = argv[optind];
	cli_bar_on = isatty(2) && !no_bar && !json;

	struct kvt_sim_trace t;
	if (load(path, &t, json))
		return 1;

	struct kvt_sim_config cfg = { 0 };
	char names[KVT_SIM_MAX_TIERS][32] = { { 0 } };
	if (t.has_hdr && !only) {
		kvt_sim_config_trace(&cfg, &t);
		for (unsigned ti = 0; ti < cfg.ntiers; ti++)
			snprintf(names[ti], sizeof(names[ti]), "%s", kvt_tier_name((int)ti));
	}
	if (t.has_hdr && t.hdr.page_bytes)
		cfg.page_bytes = t.hdr.page_bytes;
	if (page_bytes)
		cfg.page_bytes = page_bytes;
	if (!cfg.page_bytes)
		cfg.page_bytes = 4096;
	for (unsigned i = 0; i < nts; i++) {
		unsigned ti = 0;
		while (ti < cfg.ntiers && strcmp(names[ti], ts[i].name))
			ti++;
		if (ti == cfg.ntiers) {
			if (cfg.ntiers == KVT_SIM_MAX_TIERS) {
				kvt_sim_trace_free(&t);
				return bad_usage("at most %d tiers", KVT_SIM_MAX_TIERS);
			}
			cfg.ntiers++;
			snprintf(names[ti], sizeof(names[ti]), "%.31s", ts[i].name);
		}
		cfg.tier[ti] = ts[i].t;
		cfg.tier[ti].frames = size_frames(&ts[i].size, t.npages, cfg.page_bytes);
		if (!cfg.tier[ti].frames) {
			kvt_sim_trace_free(&t);
			return bad_usage("--tier %s: the size comes to no frame", ts[i].name);
		}
	}
	if (!cfg.ntiers) {
		kvt_sim_trace_free(&t);
		return bad_usage("%s carries no tiers: give them, e.g. --tier fast=10%%:lru "
				 "--tier host=40%%:clock", path);
	}
	cfg.backed = backed;
	cfg.origin_bw = origin.up_bw;
	cfg.origin_lat = origin.up_lat;
	cfg.tier[0].wm_min = (uint32_t)wm_min;
	cfg.prefetch_depth = (unsigned)depth;
	if (depth && !t.layer) {
		kvt_sim_trace_free(&t);
		return bad_usage("--prefetch: %s does not say which layer a page is in", path);
	}
	struct bar b = { "replay", 0 };
	cfg.progress = cli_bar_on ? bar_cb : NULL;
	cfg.progress_arg = &b;
	for (unsigned ti = 0; ti < cfg.ntiers; ti++) {
		const struct kvt_policy_ops *o = kvt_policy_find(cfg.tier[ti].policy);
		if (o && (o->flags & KVT_POLICY_OFFLINE) && kvt_sim_trace_next(&t)) {
			kvt_sim_trace_free(&t);
			return die("out of memory for the next-use times");
		}
	}

	struct kvt_sim_result res;
	double t0 = cli_now();
	int r = kvt_sim_run(&cfg, &t, &res, err, sizeof(err));
	double secs = cli_now() - t0;
	if (cfg.progress)
		cli_bar_done();
	if (r) {
		kvt_sim_trace_free(&t);
		return die("%s: %s", path, err);
	}
	if (json)
		json_run(path, &t, &cfg, names, &res, secs);
	else
		print_run(path, &t, &cfg, names, &res, secs);
	kvt_sim_trace_free(&t);
	return 0;
}

/* ---------------------------------------------------------------------
 * mrc
 */

/* Write the gnuplot script for out (pass 0: pngcairo or svg; 1: png). The
 * script names out, unless gnuplot is given out='...' first (-e): that is
 * how the image goes to its temporary. 0, or 1 after a message. */
static int write_script(const char *script, const char *out, int svg, int pass,
			const struct kvt_sim_point *pt, unsigned np, unsigned ns, int by_pct,
			uint32_t npages, const char *title)
{
	const char *term = svg ? "svg size 960,600 dynamic noenhanced font 'Helvetica,13'"
		: pass == 0 ? "pngcairo size 960,600 noenhanced font ',11'"
			    : "png size 960,600 noenhanced";
	struct kvt_afile a;
	double lo = 0, hi = 0;
	char err[600];
	FILE *f;

	if (kvt_afile_open(&a, script, 0644, err, sizeof(err)))
		return die("%s", err);
	if (!(f = kvt_afile_stdio(&a))) {
		kvt_afile_abort(&a);
		return die("%s: %s", script, strerror(errno));
	}
	for (unsigned i = 0; i < np * ns; i++) {
		double x = by_pct ? 100.0 * (double)pt[i].frames / npages : (double)pt[i].frames;
		if (!i || x < lo)
			lo = x;
		if (x > hi)
			hi = x;
	}
	fprintf(f, "# kvt-sim mrc: miss ratio against size, one line per policy\n");
	fprintf(f, "if (!exists('out')) out = '%s'\n", out);
	fprintf(f, "set terminal %s\nset output out\n", term);
	fprintf(f, "set title '%s'\n", title);
	fprintf(f, "set xlabel '%s'\nset ylabel 'miss ratio'\n",
		by_pct ? "cache size (% of the pages in the trace)" : "cache size (pages)");
	fprintf(f, "set yrange [0:1.05]\nset grid\nset key outside right top\n");
	if (lo > 0 && hi / lo >= 20)
		fprintf(f, "set logscale x\n");
	fprintf(f, "set autoscale xfix\nset offsets graph 0.03, graph 0.03, 0, 0\n");
	for (unsigned p = 0; p < np; p++) {
		fprintf(f, "$d%u << EOD\n", p);
		for (unsigned s = 0; s < ns; s++) {
			const struct kvt_sim_point *x = &pt[p * ns + s];
			fprintf(f, "%.6g %.6f\n",
				by_pct ? 100.0 * (double)x->frames / npages : (double)x->frames,
				x->miss_ratio);
		}
		fprintf(f, "EOD\n");
	}
	fprintf(f, "plot ");
	for (unsigned p = 0; p < np; p++)
		fprintf(f, "%s$d%u using 1:2 with linespoints lw 2 pt %u title '%s'",
			p ? ", \\\n     " : "", p, 1 + p % 12, pt[p * ns].policy);
	fprintf(f, "\n");
	if (ferror(f)) {
		kvt_afile_abort(&a);
		return die("%s: write failed", script);
	}
	if (kvt_afile_commit(&a, err, sizeof(err)))
		return die("%s", err);
	return 0;
}

/* The plot out (.png or .svg) and its script OUT.gp, both written whole
 * (pager/afile.h): gnuplot draws into out's temporary, renamed into place
 * once gnuplot succeeds. */
static int write_plot(const char *out, const struct kvt_sim_point *pt, unsigned np,
		      unsigned ns, int by_pct, uint32_t npages, const char *title)
{
	char script[4096], err[600];
	const char *dot = strrchr(out, '.');
	int svg = dot && !strcmp(dot, ".svg");

	if (!dot || (strcmp(dot, ".png") && !svg))
		return die("--plot %s: want a name ending in .png or .svg", out);
	snprintf(script, sizeof(script), "%s.gp", out);
	for (int pass = 0; pass < 2; pass++) {
		struct kvt_afile img;

		if (pass && svg)
			break;
		if (write_script(script, out, svg, pass, pt, np, ns, by_pct, npages, title))
			return 1;
		if (system("command -v gnuplot >/dev/null 2>&1") != 0)
			return die("gnuplot is not installed (apt-get install gnuplot-nox): no %s; "
				   "the script is %s, and the CSV/JSON were written", out, script);
		/* gnuplot writes the temporary by name: the same file as img.fd,
		 * which the commit then syncs and renames. */
		if (kvt_afile_open(&img, out, 0644, err, sizeof(err)))
			return die("%s", err);
		char cmd[9000];
		snprintf(cmd, sizeof(cmd), "gnuplot -e \"out='%s'\" '%s' 2>/dev/null", img.tmp, script);
		if (system(cmd) == 0) {
			if (kvt_afile_commit(&img, err, sizeof(err)))
				return die("%s", err);
			return 0;
		}
		kvt_afile_abort(&img);
	}
	return die("gnuplot failed on %s (run it by hand to see why): no %s", script, out);
}

/* Text output path through fn, or to stdout for "-". 0, or 1 after a
 * message naming flag. */
static int write_text(const char *flag, const char *path,
		      void (*fn)(FILE *f, const void *arg), const void *arg)
{
	struct kvt_afile a;
	char err[600];
	FILE *f;

	if (!strcmp(path, "-")) {
		fn(stdout, arg);
		return fflush(stdout) ? die("%s: stdout: %s", flag, strerror(errno)) : 0;
	}
	if (kvt_afile_open(&a, path, 0644, err, sizeof(err)))
		return die("%s %s", flag, err);
	if (!(f = kvt_afile_stdio(&a))) {
		kvt_afile_abort(&a);
		return die("%s %s: %s", flag, path, strerror(errno));
	}
	fn(f, arg);
	if (ferror(f)) {
		kvt_afile_abort(&a);
		return die("%s %s: write failed", flag, path);
	}
	if (kvt_afile_commit(&a, err, sizeof(err)))
		return die("%s %s", flag, err);
	return 0;
}

struct mrc_out {
	const struct kvt_sim_point *pt;
	size_t n;
	uint32_t npages;
	const char *path;
};

static void mrc_csv(FILE *f, const void *arg)
{
	const struct mrc_out *o = arg;

	kvt_sim_mrc_csv(f, o->pt, o->n, o->npages);
}

static void mrc_json(FILE *f, const void *arg)
{
	const struct mrc_out *o = arg;

	kvt_sim_mrc_json(f, o->pt, o->n, o->npages, o->path);
}

static int cmd_mrc(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "policies", required_argument, 0, 'p' }, { "sizes", required_argument, 0, 's' },
		{ "threads", required_argument, 0, 'T' }, { "csv", required_argument, 0, 'c' },
		{ "json", required_argument, 0, 'j' },
		{ "plot", required_argument, 0, 'P' }, { "title", required_argument, 0, 'i' },
		{ "page-bytes", required_argument, 0, 'b' },
		{ "no-bar", no_argument, 0, 'q' }, { "help", no_argument, 0, 'h' }, { 0 } };
	char pol_buf[1024] = "auto,lru,clock,s3fifo,sieve";
	char size_buf[1024] = "1%,2%,5%,10%,20%,30%,40%,50%,75%,90%";
	const char *csv = NULL, *jsn = NULL, *plots[8], *title = NULL;
	unsigned nplots = 0;
	uint64_t threads = 0, page_bytes = 0;
	int no_bar = 0, c;
	char err[512];

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'p':
			if (strlen(optarg) >= sizeof(pol_buf))
				return bad_usage("--policies: too long");
			strcpy(pol_buf, optarg);
			break;
		case 's':
			if (strlen(optarg) >= sizeof(size_buf))
				return bad_usage("--sizes: too long");
			strcpy(size_buf, optarg);
			break;
		case 'T':
			if (parse_u64(optarg, &threads) || !threads || threads > 256)
				return bad_usage("--threads %s: want 1..256", optarg);
			break;
		case 'c': csv = optarg; break;
		case 'j': jsn = optarg; break;
		case 'P':
			if (nplots == 8)
				return bad_usage("--plot: at most 8");
			plots[nplots++] = optarg;
			break;
		case 'i': title = optarg; break;
		case 'b':
			if (parse_u64(optarg, &page_bytes) || !page_bytes)
				return bad_usage("--page-bytes %s: want a positive integer", optarg);
			break;
		case 'q': no_bar = 1; break;
		case 'h': usage(stdout); return 0;
		default: return 2;
		}
	}
	if (optind != argc - 1)
		return bad_usage(optind >= argc ? "mrc: no trace given" : "mrc: one trace, please");
	const char *path = argv[optind];

	char *pol[MAX_LIST], *szs[MAX_LIST];
	int np = split_list(pol_buf, pol, MAX_LIST), ns = split_list(size_buf, szs, MAX_LIST);
	struct size sz[MAX_LIST];
	if (np <= 0)
		return bad_usage("--policies: want 1..%d comma-separated policies", MAX_LIST);
	if (ns <= 0)
		return bad_usage("--sizes: want 1..%d comma-separated sizes", MAX_LIST);
	for (int i = 0; i < np; i++) {
		const struct kvt_policy_ops *o = kvt_policy_find(pol[i]);
		char why[256] = "";
		void *st;
		if (!o)
			return bad_usage("--policies: no such policy '%s'", pol[i]);
		if (o->init(&st, kvt_policy_params(pol[i]), 64, why, sizeof(why)))
			return bad_usage("--policies: '%s': %s", pol[i],
					 why[0] ? why : "bad parameters");
		o->destroy(st);
	}
	int by_pct = 1;
	for (int i = 0; i < ns; i++) {
		if (parse_size(szs[i], &sz[i]))
			return bad_usage("--sizes: '%s': want pages (4096), a share of the trace's "
					 "pages (10%%) or bytes (64M)", szs[i]);
		by_pct &= sz[i].kind == 1;
	}
	for (unsigned i = 0; i < nplots; i++) {
		const char *dot = strrchr(plots[i], '.');
		if (!dot || (strcmp(dot, ".png") && strcmp(dot, ".svg")))
			return bad_usage("--plot %s: want a name ending in .png or .svg", plots[i]);
	}
	if (!threads) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		threads = n > 0 ? (uint64_t)n : 1;
	}
	cli_bar_on = isatty(2) && !no_bar;

	struct kvt_sim_trace t;
	if (load(path, &t, 0))
		return 1;
	if (!page_bytes)
		page_bytes = t.has_hdr && t.hdr.page_bytes ? t.hdr.page_bytes : 4096;
	uint64_t frames[MAX_LIST];
	for (int i = 0; i < ns; i++) {
		frames[i] = size_frames(&sz[i], t.npages, page_bytes);
		if (!frames[i]) {
			kvt_sim_trace_free(&t);
			return bad_usage("--sizes: '%s' comes to no frame", szs[i]);
		}
	}
	if (any_offline((const char *const *)pol, (unsigned)np) && kvt_sim_trace_next(&t)) {
		kvt_sim_trace_free(&t);
		return die("out of memory for the next-use times");
	}
	struct kvt_sim_point *pt = calloc((size_t)np * ns, sizeof(*pt));
	if (!pt) {
		kvt_sim_trace_free(&t);
		return die("out of memory");
	}
	struct bar b = { "mrc", 0 };
	double t0 = cli_now();
	int r = kvt_sim_mrc(&t, (const char *const *)pol, (unsigned)np, frames, (unsigned)ns,
			    (unsigned)threads, pt, cli_bar_on ? bar_cb : NULL, &b,
			    err, sizeof(err));
	double secs = cli_now() - t0;
	if (cli_bar_on)
		cli_bar_done();
	if (r) {
		free(pt);
		kvt_sim_trace_free(&t);
		return die("%s: %s", path, err);
	}

	/* The table: one row per size, one column per policy. */
	int to_stdout = (csv && !strcmp(csv, "-")) || (jsn && !strcmp(jsn, "-"));
	FILE *tab = to_stdout ? stderr : stdout;
	fprintf(tab, "miss ratio, %s: %llu references, %u pages; %u replays on %llu threads in "
		"%.2f s\n", path, (unsigned long long)t.naccess, t.npages, np * ns, (unsigned long long)threads,
		secs);
	fprintf(tab, "%10s %9s", "size", "frames");
	for (int p = 0; p < np; p++)
		fprintf(tab, " %10.10s", pol[p]);
	fprintf(tab, "\n");
	for (int s = 0; s < ns; s++) {
		char lab[32];
		if (sz[s].kind == 1)
			snprintf(lab, sizeof(lab), "%g%%", sz[s].v);
		else
			snprintf(lab, sizeof(lab), "%.30s", szs[s]);
		fprintf(tab, "%10s %9llu", lab, (unsigned long long)frames[s]);
		for (int p = 0; p < np; p++)
			fprintf(tab, " %10.4f", pt[p * ns + s].miss_ratio);
		fprintf(tab, "\n");
	}

	int rc = 0;
	const struct mrc_out mo = { pt, (size_t)np * ns, t.npages, path };
	if (csv && write_text("--csv", csv, mrc_csv, &mo))
		rc = 1;
	if (jsn && write_text("--json", jsn, mrc_json, &mo))
		rc = 1;
	char ttl[512];
	const char *base = strrchr(path, '/');
	if (title)
		snprintf(ttl, sizeof(ttl), "%s", title);
	else
		snprintf(ttl, sizeof(ttl), "%s: %llu references, %u pages",
			 base ? base + 1 : path, (unsigned long long)t.naccess, t.npages);
	for (char *q = ttl; *q; q++)
		if (*q == '\'')
			*q = '"';
	for (unsigned i = 0; i < nplots; i++) {
		if (write_plot(plots[i], pt, (unsigned)np, (unsigned)ns, by_pct, t.npages, ttl))
			rc = 1;
		else
			fprintf(stderr, "%s: wrote %s\n", prog, plots[i]);
	}
	free(pt);
	kvt_sim_trace_free(&t);
	return rc;
}

/* ---------------------------------------------------------------------
 * gen
 */

/* keys (and steps, NULL: step = index) as an oracleGeneral file. */
static int write_oracle(const char *out, const uint64_t *keys, const uint64_t *steps,
			size_t n, uint64_t page_bytes)
{
	struct kvt_sim_trace t;
	int64_t *next;
	uint32_t *last;
	struct kvt_afile a;
	char err[600];
	FILE *f;
	int r = kvt_sim_trace_keys(&t, keys, n);

	if (r)
		return die("%s: %s", out, strerror(-r));
	next = malloc((n ? n : 1) * sizeof(*next));
	last = malloc(((size_t)t.npages + 1) * sizeof(*last));
	if (!next || !last) {
		free(next);
		free(last);
		kvt_sim_trace_free(&t);
		return die("out of memory");
	}
	/* libCacheSim's convention: the 1-based index of the next request
	 * for the object, -1 for none. */
	memset(last, 0xff, ((size_t)t.npages + 1) * sizeof(*last));
	for (size_t i = n; i-- > 0;) {
		uint32_t id = t.id[i];
		next[i] = last[id] == UINT32_MAX ? -1 : (int64_t)last[id] + 1;
		last[id] = (uint32_t)i;
	}
	if (kvt_afile_open(&a, out, 0644, err, sizeof(err))) {
		r = die("%s", err);
		goto done;
	}
	if (!(f = kvt_afile_stdio(&a))) {
		kvt_afile_abort(&a);
		r = die("%s: %s", out, strerror(errno));
		goto done;
	}
	static uint8_t buf[24 * 4096];
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t tm = (uint32_t)(steps ? steps[i] : i), sz = (uint32_t)page_bytes;
		memcpy(buf + k * 24, &tm, 4);
		memcpy(buf + k * 24 + 4, &keys[i], 8);
		memcpy(buf + k * 24 + 12, &sz, 4);
		memcpy(buf + k * 24 + 16, &next[i], 8);
		if (++k == 4096 || i + 1 == n) {
			if (fwrite(buf, 24, k, f) != k)
				break;
			k = 0;
		}
	}
	if (ferror(f)) {
		kvt_afile_abort(&a);
		r = die("%s: write failed", out);
	} else if (kvt_afile_commit(&a, err, sizeof(err))) {
		r = die("%s", err);
	}
done:
	free(next);
	free(last);
	kvt_sim_trace_free(&t);
	return r;
}

/* keys as a kvtier trace: ACCESS records (and a STEP record at each new
 * step); scan traces carry layer and index (key = layer << 32 | index). */
static int write_kvt(const char *out, const uint64_t *keys, const uint64_t *steps, size_t n,
		     uint64_t page_bytes, uint64_t seed, int scan, const char *config)
{
	struct kvt_trace_hdr h = { 0 };
	struct kvt_trace_writer *w;
	struct kvt_trace_rec buf[4096];
	size_t k = 0;
	uint64_t prev = UINT64_MAX;
	int r;

	h.seed = seed;
	h.page_bytes = (uint32_t)page_bytes;
	h.source = KVT_SRC_SYNTH;
	r = kvt_trace_create(out, &h, config, strlen(config), &w);
	if (r)
		return die("%s: %s", out, strerror(-r));
	for (size_t i = 0; i < n && !r; i++) {
		uint64_t st = steps ? steps[i] : i;
		if (steps && st != prev) {
			buf[k++] = (struct kvt_trace_rec){ .event = KVT_EV_STEP, .step = st,
				.key = 0, .seq = KVT_REF_NONE, .layer = KVT_REF_NONE,
				.index = KVT_REF_NONE, .from = KVT_TRACE_NONE, .to = KVT_TRACE_NONE };
			prev = st;
		}
		buf[k++] = (struct kvt_trace_rec){ .event = KVT_EV_ACCESS, .step = st, .time = i,
			.key = keys[i], .seq = scan ? 0 : KVT_REF_NONE,
			.layer = scan ? (uint32_t)(keys[i] >> 32) : KVT_REF_NONE,
			.index = scan ? (uint32_t)keys[i] : KVT_REF_NONE,
			.bytes = (uint32_t)page_bytes, .from = KVT_TRACE_NONE, .to = KVT_TRACE_NONE };
		if (k >= 4095 || i + 1 == n) {
			r = kvt_trace_put(w, buf, k);
			k = 0;
		}
	}
	int r2 = kvt_trace_finish(w);
	if (r || r2)
		return die("%s: %s", out, strerror(-(r ? r : r2)));
	return 0;
}

static int cmd_gen(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "layers", required_argument, 0, 'l' }, { "pages", required_argument, 0, 'n' },
		{ "append-every", required_argument, 0, 'a' }, { "steps", required_argument, 0, 's' },
		{ "requests", required_argument, 0, 'r' }, { "objects", required_argument, 0, 'm' },
		{ "alpha", required_argument, 0, 'A' }, { "seed", required_argument, 0, 'S' },
		{ "format", required_argument, 0, 'f' }, { "page-bytes", required_argument, 0, 'b' },
		{ "output", required_argument, 0, 'o' }, { "help", no_argument, 0, 'h' }, { 0 } };
	uint64_t layers = 8, pages = 2048, every = 16, steps = 600;
	uint64_t requests = 10000000, objects = 1000000, seed = 1, page_bytes = 4096;
	double alpha = 1.0;
	const char *out = NULL, *format = NULL, *what;
	int c;

	if (argc < 2 || (strcmp(argv[1], "scan") && strcmp(argv[1], "zipf"))) {
		if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
			usage(stdout);
			return 0;
		}
		return bad_usage("gen: want 'scan' or 'zipf'");
	}
	what = argv[1];
	argv++;
	argc--;
	argv[0] = (char *)(!strcmp(what, "scan") ? "kvt-sim gen scan" : "kvt-sim gen zipf");
	optind = 1;
	while ((c = getopt_long(argc, argv, "o:h", lo, NULL)) != -1) {
		uint64_t *dst = NULL;
		switch (c) {
		case 'l': dst = &layers; break;
		case 'n': dst = &pages; break;
		case 'a': dst = &every; break;
		case 's': dst = &steps; break;
		case 'r': dst = &requests; break;
		case 'm': dst = &objects; break;
		case 'S': dst = &seed; break;
		case 'b': dst = &page_bytes; break;
		case 'A': {
			char *end;
			alpha = strtod(optarg, &end);
			if (*end || !(alpha >= 0 && alpha <= 10))
				return bad_usage("--alpha %s: want 0..10", optarg);
			continue;
		}
		case 'f':
			if (strcmp(optarg, "kvt") && strcmp(optarg, "oracle"))
				return bad_usage("--format %s: want kvt or oracle", optarg);
			format = optarg;
			continue;
		case 'o': out = optarg; continue;
		case 'h': usage(stdout); return 0;
		default: return 2;
		}
		if (parse_u64(optarg, dst))
			return bad_usage("--%s %s: want a non-negative integer", lo[c == 'l' ? 0 :
					 c == 'n' ? 1 : c == 'a' ? 2 : c == 's' ? 3 : c == 'r' ? 4 :
					 c == 'm' ? 5 : c == 'S' ? 7 : 9].name, optarg);
	}
	if (optind != argc)
		return bad_usage("gen %s: unexpected '%s'", what, argv[optind]);
	if (!out)
		return bad_usage("gen %s: no output file (-o FILE)", what);
	if (page_bytes >= UINT32_MAX)
		return bad_usage("--page-bytes: at most %u", UINT32_MAX - 1);

	uint64_t *keys = NULL, *st = NULL;
	size_t n;
	char config[256];
	if (!strcmp(what, "scan")) {
		if (!layers || !pages || !steps || layers > UINT32_MAX || pages > UINT32_MAX ||
		    steps > UINT32_MAX || every > UINT32_MAX)
			return bad_usage("gen scan: --layers, --pages and --steps must be positive");
		int64_t got = kvt_sim_gen_scan((unsigned)layers, (unsigned)pages, (unsigned)every,
					       (unsigned)steps, &keys, &st);
		if (got < 0)
			return die("gen scan: %s", got == -E2BIG ? "too many records (4G at most)"
								    : strerror((int)-got));
		n = (size_t)got;
		snprintf(config, sizeof(config), "# kvt-sim gen scan --layers %llu --pages %llu "
			 "--append-every %llu --steps %llu\n", (unsigned long long)layers,
			 (unsigned long long)pages, (unsigned long long)every,
			 (unsigned long long)steps);
	} else {
		if (!requests || !objects || objects >= UINT32_MAX || requests >= UINT32_MAX)
			return bad_usage("gen zipf: --requests and --objects must be 1..%u",
					 UINT32_MAX - 1);
		keys = malloc(requests * sizeof(*keys));
		if (!keys)
			return die("out of memory for %llu requests", (unsigned long long)requests);
		int r = kvt_sim_gen_zipf(requests, objects, alpha, seed, keys);
		if (r) {
			free(keys);
			return die("gen zipf: %s", strerror(-r));
		}
		n = requests;
		snprintf(config, sizeof(config), "# kvt-sim gen zipf --requests %llu --objects %llu "
			 "--alpha %g --seed %llu\n", (unsigned long long)requests,
			 (unsigned long long)objects, alpha, (unsigned long long)seed);
	}
	if (!format)
		format = !strcmp(what, "scan") ? "kvt" : "oracle";
	int r = !strcmp(format, "oracle") ? write_oracle(out, keys, st, n, page_bytes)
		: write_kvt(out, keys, st, n, page_bytes, seed, !strcmp(what, "scan"), config);
	if (!r)
		fprintf(stderr, "%s: wrote %s: %zu requests (%s)\n", prog, out, n,
			!strcmp(format, "oracle") ? "oracleGeneral" : "kvtier");
	free(keys);
	free(st);
	return r;
}

static int cmd_info(int argc, char **argv)
{
	struct kvt_sim_trace t;
	char span[64];

	if (argc != 2)
		return bad_usage("info: one trace, please");
	if (load(argv[1], &t, 1))
		return 1;
	printf("%s: %s, %s\n", argv[1], t.format, source_name(&t));
	printf("records %zu (inputs), references %llu, new %llu, scores %llu, pages %u, steps %llu\n",
	       t.n, (unsigned long long)t.naccess, (unsigned long long)t.nnew,
	       (unsigned long long)t.nscore, t.npages, (unsigned long long)t.steps);
	printf("time %s\n", time_span(&t, span, sizeof(span)));
	if (t.has_hdr) {
		printf("page bytes %u; tiers:", t.hdr.page_bytes);
		for (int ti = 0; ti < 3; ti++)
			if (t.hdr.frames[ti])
				printf(" %s %u frames %.32s", kvt_tier_name(ti), t.hdr.frames[ti],
				       t.hdr.policy[ti]);
		printf("\n");
	}
	if (t.gaps)
		printf("gaps: %llu (the recorder fell behind)\n", (unsigned long long)t.gaps);
	printf("loaded in %.3f s\n", t.load_s);
	kvt_sim_trace_free(&t);
	return 0;
}

int main(int argc, char **argv)
{
	if (cli_version(argc, argv, "kvt-sim"))
		return 0;
	if (argc < 2)
		return usage(stderr), 2;
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(stdout);
		return 0;
	}
	/* getopt names argv[0] in its messages */
	if (!strcmp(argv[1], "run"))
		return argv[1] = (char *)"kvt-sim run", cmd_run(argc - 1, argv + 1);
	if (!strcmp(argv[1], "mrc"))
		return argv[1] = (char *)"kvt-sim mrc", cmd_mrc(argc - 1, argv + 1);
	if (!strcmp(argv[1], "gen"))
		return cmd_gen(argc - 1, argv + 1);
	if (!strcmp(argv[1], "info"))
		return cmd_info(argc - 1, argv + 1);
	return bad_usage("unknown command '%s'", argv[1]);
}
