/* SPDX-License-Identifier: MIT */
/* Test helpers: exit 0 pass, 1 fail, 77 skip (liburing's convention). */
#ifndef KVT_TESTS_COMMON_H
#define KVT_TESTS_COMMON_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <kvt/pager.h>

#define T_SKIP 77

#define CHECK(cond) do { if (!(cond)) { \
	fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
	exit(1); } } while (0)
#define CHECK_EQ(a, b) do { long long _a = (long long)(a), _b = (long long)(b); \
	if (_a != _b) { fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", \
		__FILE__, __LINE__, #a, _a, #b, _b); exit(1); } } while (0)
#define SKIP(...) do { fprintf(stderr, "skip: " __VA_ARGS__); fputc('\n', stderr); \
	exit(T_SKIP); } while (0)

/* Run the shell command fmt... (printf-style); what it writes to stdout
 * (add "2>&1" for stderr too) into out, NUL-terminated and cut at outlen
 * - 1 bytes; its exit status, 128 when it did not exit. t_vshell is the
 * same with a va_list. */
int t_shell(char *out, size_t outlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int t_vshell(char *out, size_t outlen, const char *fmt, va_list ap);

/* A part of a test that cannot run here while the rest goes on: prints the
 * line "skip-part: PART: reason" (to stderr, flushed), which tests/run.sh
 * lists as the skip "TEST/PART" and checks against tests/expected-skips.
 * part: a short name without ':' or spaces. A test whose every part
 * skipped exits T_SKIP instead. */
void t_skip_part(const char *part, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* A small geometry for tests: 2 KV heads x 64 dims x 4 tokens, f32:
 * page = 4 * 2 * 64 * 2 * 4 = 4 KiB. Tier sizes in pages. */
void t_config(struct kvt_config *cfg, unsigned layers, unsigned fast_pages,
	      unsigned host_pages, unsigned nvme_pages);
/* Open a cpu device and a pager; exits 1 on failure, 77 when the NVMe tier
 * cannot be opened here. */
struct kvt_pager *t_open(const struct kvt_config *cfg, struct kvt_device **dev);
/* The same on the device called name ("cpu", or a plug-in: "emu" is the
 * tests' emulated GPU). */
struct kvt_pager *t_open_dev(const struct kvt_config *cfg, const char *name,
			     struct kvt_device **dev);
/* The device t_open last opened: t_check_view reads views through it. */
extern struct kvt_device *t_dev;
void t_close(struct kvt_pager *p, struct kvt_device *dev);

/* Deterministic token contents: the value of element i of K (kv = 0) or
 * V (kv = 1) of token tok of (seed, layer). Floats whose bits encode all
 * of it, so any misplaced byte is caught. */
void t_fill_tokens(const struct kvt_config *cfg, uint32_t seed, unsigned layer,
		   unsigned tok0, unsigned ntok, float *k, float *v);
/* Append ntok tokens of every layer with t_fill_tokens contents. */
void t_append(struct kvt_pager *p, kvt_seq_t s, const struct kvt_config *cfg,
	      uint32_t seed, unsigned tok0, unsigned ntok);
/* Check that a view holds the tokens [page*page_tokens, +ntok) of
 * (seed, layer). Returns 0 if equal, else prints the first difference and
 * returns -1. */
int t_check_view(const struct kvt_config *cfg, uint32_t seed, unsigned layer,
		 const struct kvt_view *v);
/* Acquire every page of every layer and check each one; returns pages seen
 * (lost pages count as failures unless allow_lost). */
unsigned t_verify_seq(struct kvt_pager *p, kvt_seq_t s, const struct kvt_config *cfg,
		      uint32_t seed, int allow_lost);

/* t_config(cfg, layers, fast, host, nvme), host_in_place, prefetch_depth (if >= 0), t_open. */
struct kvt_pager *t_open_tiers(struct kvt_config *cfg, struct kvt_device **dev,
			       unsigned layers, unsigned fast, unsigned host, unsigned nvme,
			       int in_place, int prefetch_depth);

/* kvt_pager_check under the pager lock; a violation is printed and exits 1. */
void t_check_inv(struct kvt_pager *p);
/* Wait until no page is MOVING (in-flight pages have landed); returns with p->lock held. */
void t_quiesce_locked(struct kvt_pager *p);
/* Wait until no page is MOVING (in-flight pages have landed, closed ones are freed). */
void t_quiesce(struct kvt_pager *p);
/* Drain the fast, then the host tier, each of which must return 0. */
void t_drain_to_nvme(struct kvt_pager *p);
/* Drain a tier that may hold pins: 0 or -EBUSY, anything else fails. */
void t_drain_pinned(struct kvt_pager *p, int tier);

/* Name of the case (sub-test) this process runs ("" outside t_run_case's children). */
extern const char *volatile t_sub;
/* Run fn(arg) in a forked child with a watchdog: it fails the case when
 * 6 s times t_slow() pass with no t_progress() (the helpers below that
 * append, check or verify call it); print "name ok|skip|FAIL" (a skip also as t_skip_part(name), its spaces
 * and colons made dashes); returns its status. */
int t_run_case(const char *name, int width, void (*fn)(int), int arg);
/* A case for t_run_cases: its name and body. */
struct t_case {
	const char *name;
	void (*fn)(int arg);
};
/* t_run_case each case (in_place_too: for arg = host_in_place 0 then 1); 1 if any failed, T_SKIP if all skipped, else 0. */
int t_run_cases(const struct t_case *cases, unsigned n, int in_place_too, int width);

/* Scale for sanitizer builds: KVT_TEST_SCALE (default 1) divides loops. */
unsigned t_scale(unsigned n);
/* How much slower than an idle machine's plain build this run may go:
 * KVT_TEST_SLOW if set (>= 1), else 4 in a sanitizer build (KVT_DEBUG,
 * TSan's slow-down being the largest) and 1 otherwise, doubled when the
 * load average is above the number of cpus. Wall-clock limits in tests
 * (watchdogs, "not done within") are multiplied by it. */
unsigned t_slow(void);
/* Tell t_run_case's watchdog that the case moves on (a page appended,
 * read or checked): cheap, from any thread. */
void t_progress(void);
/* A log callback that prints to stderr with a prefix. */
void t_log(void *arg, int level, const char *msg);

/* $KVT_TEST_DIR, else /tmp. */
const char *t_dir(void);

/* The index of the largest of v[0, n) (the first of equals): greedy's token. */
int32_t t_argmax(const float *v, size_t n);
/* max |a - b| / max |b| over n values (max |a - b| when b is all zero);
 * infinity when a value of either is not finite. */
double t_rel_err(const float *a, const float *b, size_t n);

#endif
