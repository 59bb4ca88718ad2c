/* SPDX-License-Identifier: MIT */
/*
 * Configuration: defaults, one key at a time, INI files (libinih), the
 * cross-field checks, and printing back as INI.
 *
 * Every key is one row of keys[] below: its name ("section.key"), its type,
 * where it lives in struct kvt_config and its range. kvt_config_set,
 * kvt_config_validate and kvt_config_print all walk that table, so a key is
 * parsed, range-checked and printed the same way everywhere, and the print
 * order is the table order. A new key is one row here and one row in
 * docs/config.md.
 *
 * Contract (see include/kvt/config.h): 0 or -errno, one line into err on
 * failure, *cfg untouched on failure. Nothing here prints or exits.
 *
 * libinih as Debian builds it has process-wide settings (ini_max_line and
 * friends, exported as variables); we only read ini_max_line's effect
 * (through the reader's buffer size) and never write any of them.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <arpa/inet.h>
#include <ini.h>
#include <kvt/config.h>
#include "pager/errf.h"
#include "pager/hooks.h"

#define KVT_API __attribute__((visibility("default")))

#define PAGE_ALIGN	4096u	/* O_DIRECT: page bytes must be a multiple */
#define MSG_MAX		512	/* one error line before the file:line prefix */
#define ECHO_MAX	72	/* characters of a value echoed in a message */

enum ktype {
	T_UINT,		/* unsigned, min..max */
	T_SIZE,		/* uint64_t, K/M/G/T suffixes, min..max, multiple of align */
	T_ENUM,		/* int (or unsigned) from syms[], or a number min..max if num */
	T_DOUBLE,	/* double, min..max, finite */
	T_POLICY,	/* char[size]: [a-z0-9_:=,.-]{1,size-1} */
	T_PATH,		/* char[size]: anything an INI line can carry back */
	T_NAME,		/* char[size]: one of syms[], stored as written there */
};

struct sym {
	const char *name;
	int value;
};

struct key {
	const char *name;		/* "section.key", as in the INI file */
	enum ktype type;
	size_t off;			/* offset of the field in struct kvt_config */
	size_t size;			/* T_POLICY, T_PATH, T_NAME: array size */
	uint64_t min, max;		/* T_UINT, T_SIZE, T_DOUBLE, T_ENUM if num */
	uint64_t align;			/* T_SIZE: value must be a multiple (0 = any) */
	const struct sym *syms;		/* T_ENUM, T_NAME: {NULL} terminated; the
					 * first entry with a value is the one printed */
	int num;			/* T_ENUM: numbers min..max accepted too */
};

static const struct sym dtype_syms[] = {
	{ "f16", 2 }, { "bf16", 2 }, { "f32", 4 }, { NULL, 0 },
};
static const struct sym tristate_syms[] = {
	{ "off", KVT_OFF }, { "auto", KVT_AUTO }, { "on", KVT_ON }, { NULL, 0 },
};
static const struct sym numa_syms[] = {
	{ "any", KVT_NUMA_ANY }, { "interleave", KVT_NUMA_INTERLEAVE }, { NULL, 0 },
};
static const struct sym huge_syms[] = {
	{ "off", KVT_HUGE_OFF }, { "auto", KVT_HUGE_AUTO },
	{ "hugetlb", KVT_HUGE_HUGETLB }, { "thp", KVT_HUGE_THP }, { NULL, 0 },
};
/* The first name of each value is the one printed. */
static const struct sym in_place_syms[] = {
	{ "off", 0 }, { "on", 1 }, { "auto", KVT_IN_PLACE_AUTO },
	{ "0", 0 }, { "1", 1 }, { "false", 0 }, { "true", 1 }, { "no", 0 }, { "yes", 1 },
	{ NULL, 0 },
};
static const struct sym device_syms[] = {
	{ "cpu", 0 }, { "cuda", 1 }, { "auto", 2 }, { NULL, 0 },
};

#define OFF(f)		offsetof(struct kvt_config, f)
#define FSIZE(f)	sizeof(((struct kvt_config *)0)->f)
#define UINT(n, f, lo, hi)	{ n, T_UINT, OFF(f), 0, lo, hi, 0, NULL, 0 }
#define SIZE(n, f, lo, hi, al)	{ n, T_SIZE, OFF(f), 0, lo, hi, al, NULL, 0 }
#define ENUM(n, f, s)		{ n, T_ENUM, OFF(f), 0, 0, 0, 0, s, 0 }
#define ENUMN(n, f, s, lo, hi)	{ n, T_ENUM, OFF(f), 0, lo, hi, 0, s, 1 }
#define STR(n, t, f, s)		{ n, t, OFF(f), FSIZE(f), 0, 0, 0, s, 0 }

#define TIER(sec, i) \
	SIZE(sec ".bytes", tier[i].bytes, 0, UINT64_MAX, 0), \
	STR(sec ".policy", T_POLICY, tier[i].policy, NULL), \
	UINT(sec ".wm_min", tier[i].wm_min, 0, 50), \
	UINT(sec ".wm_low", tier[i].wm_low, 0, 50), \
	UINT(sec ".wm_high", tier[i].wm_high, 0, 50)

/* Fault injection (include/kvt/config.h, pager/nvme.h): rows of keys[]
 * only in a library built with -DKVT_FAULTS. A release build keeps the
 * rows in fault_keys[] alone, to name the build flag when it refuses
 * them. */
#define FAULT_MAX	1000000u
#define FAULT_KEYS \
	UINT("fault.eio", fault_eio, 0, FAULT_MAX), \
	UINT("fault.short", fault_short, 0, FAULT_MAX), \
	UINT("fault.enospc", fault_enospc, 0, FAULT_MAX), \
	UINT("fault.flip", fault_flip, 0, FAULT_MAX), \
	UINT("fault.slow_us", fault_slow_us, 0, FAULT_MAX)

static const struct key fault_keys[] = { FAULT_KEYS };
#define NFAULT_KEYS (sizeof(fault_keys) / sizeof(fault_keys[0]))
#define FAULT_FLAG	"fault injection is not built in (build the library with " \
			"-DKVT_FAULTS: make FAULTS=1, make asan or make tsan)"

/* Geometry bounds keep page bytes below 2^37, so the product never overflows. */
static const struct key keys[] = {
	UINT("geometry.layers", n_layers, 1, 4096),
	UINT("geometry.kv_heads", n_kv_heads, 1, 1024),
	UINT("geometry.head_dim", head_dim, 1, 4096),
	UINT("geometry.page_tokens", page_tokens, 1, 4096),
	ENUM("geometry.dtype", dtype_bytes, dtype_syms),
	TIER("tier.fast", KVT_TIER_FAST),
	SIZE("tier.fast.max_bytes", tier[KVT_TIER_FAST].max_bytes, 0, UINT64_MAX, 0),
	TIER("tier.host", KVT_TIER_HOST),
	SIZE("tier.host.max_bytes", tier[KVT_TIER_HOST].max_bytes, 0, UINT64_MAX, 0),
	SIZE("tier.host.floor", host_floor, 0, UINT64_MAX, 0),
	TIER("tier.nvme", KVT_TIER_NVME),
	STR("nvme.path", T_PATH, nvme_path, NULL),
	ENUM("nvme.direct", nvme_direct, tristate_syms),
	UINT("io.depth", io_depth, 1, 4096),
	SIZE("io.max_io_bytes", max_io_bytes, 4096, 64u << 20, 4096),
	ENUMN("host.numa_node", host_numa_node, numa_syms, 0, 1023),
	ENUM("host.hugepages", host_hugepages, huge_syms),
	ENUM("host.mlock", host_mlock, tristate_syms),
	UINT("host.prefault_threads", host_prefault_threads, 0, 64),
	ENUM("access.host_in_place", host_in_place, in_place_syms),
	UINT("access.prefetch_depth", prefetch_depth, 0, 64),
	STR("psi.path", T_PATH, psi_path, NULL),
	{ "psi.threshold", T_DOUBLE, OFF(psi_threshold), 0, 0, 100, 0, NULL, 0 },
	UINT("psi.interval_ms", psi_interval_ms, 10, 60000),
	STR("metrics.http", T_PATH, metrics_http, NULL),
	UINT("control.idle_ms", control_idle_ms, 0, 86400000),
	STR("device.name", T_NAME, device, device_syms),
	{ "device.copy_gbps", T_DOUBLE, OFF(copy_gbps), 0, 0, 10000, 0, NULL, 0 },
#ifdef KVT_FAULTS
	FAULT_KEYS,
#endif
};
#define NKEYS (sizeof(keys) / sizeof(keys[0]))

static const char *const tier_sec[KVT_NTIERS] = { "tier.fast", "tier.host", "tier.nvme" };

/* ---- messages ---- */

/* Copy s for a message: at most max characters, control bytes as '?', so
 * an echoed value can never break the message into two lines. */
static const char *echo(const char *s, char *buf, size_t len, size_t max)
{
	size_t i, n = 0;

	if (!s)
		s = "(null)";
	for (i = 0; s[i] && n + 4 < len; i++) {
		if (i == max) {
			memcpy(buf + n, "...", 3);
			n += 3;
			break;
		}
		buf[n++] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
	}
	buf[n] = '\0';
	return buf;
}

/* ---- numbers in the "C" locale ---- */

/* glibc hands back its static C locale for this call: no allocation. */
static locale_t c_locale(void)
{
	return newlocale(LC_ALL_MASK, "C", (locale_t)0);
}

/* Decimal digits (no sign, no space, no 0x) with, where suffix is set, an
 * optional binary suffix K, M, G or T (either case). */
static int parse_num(const char *s, int suffix, uint64_t *out)
{
	unsigned long long x;
	unsigned shift = 0;
	char *end;

	if (!isdigit((unsigned char)s[0]))
		return -EINVAL;
	errno = 0;
	x = strtoull(s, &end, 10);
	if (errno == ERANGE)
		return -ERANGE;
	switch (suffix ? *end : 0) {
	case 'K': case 'k': shift = 10; end++; break;
	case 'M': case 'm': shift = 20; end++; break;
	case 'G': case 'g': shift = 30; end++; break;
	case 'T': case 't': shift = 40; end++; break;
	}
	if (*end)
		return -EINVAL;
	if (shift && x > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = (uint64_t)x << shift;
	return 0;
}

/* Largest suffix that is exact, so the text parses back to the same value. */
static void fmt_size(uint64_t x, char *buf, size_t len)
{
	static const char suf[] = "TGMK";
	static const unsigned shift[] = { 40, 30, 20, 10 };
	unsigned i;

	for (i = 0; x && i < 4; i++)
		if (!(x & ((UINT64_C(1) << shift[i]) - 1))) {
			snprintf(buf, len, "%llu%c", (unsigned long long)(x >> shift[i]), suf[i]);
			return;
		}
	snprintf(buf, len, "%llu", (unsigned long long)x);
}

static int parse_double(const char *s, double *out)
{
	locale_t c = c_locale();
	char *end;
	double x;

	if (!isdigit((unsigned char)s[0]) && s[0] != '.')
		return -EINVAL;
	if (!c)
		return -ENOMEM;
	errno = 0;
	x = strtod_l(s, &end, c);
	freelocale(c);
	if (*end || errno == ERANGE || !isfinite(x))
		return -EINVAL;
	*out = x;
	return 0;
}

/* Shortest of %.15g / %.17g that reads back as the same double. */
static int fmt_double(double x, char *buf, size_t len)
{
	locale_t c = c_locale(), old;

	if (!c)
		return -ENOMEM;
	old = uselocale(c);
	snprintf(buf, len, "%.15g", x);
	if (strtod_l(buf, NULL, c) != x)
		snprintf(buf, len, "%.17g", x);
	uselocale(old);
	freelocale(c);
	return 0;
}

/* ---- the table ---- */

static const struct key *find_key(const char *name)
{
	size_t i;

	for (i = 0; i < NKEYS; i++)
		if (!strcmp(keys[i].name, name))
			return &keys[i];
	return NULL;
}

/* A fault.* key this build does not take (all of them without
 * KVT_FAULTS), or NULL. */
static const struct key *refused_fault_key(const char *name)
{
	size_t i;

	if (find_key(name))
		return NULL;
	for (i = 0; i < NFAULT_KEYS; i++)
		if (!strcmp(fault_keys[i].name, name))
			return &fault_keys[i];
	return NULL;
}

static void *field(struct kvt_config *c, const struct key *k)
{
	return (char *)c + k->off;
}

static const void *cfield(const struct kvt_config *c, const struct key *k)
{
	return (const char *)c + k->off;
}

/* "a, b or c" (then "or MIN..MAX" for numbers). */
static void syms_text(const struct key *k, char *buf, size_t len)
{
	size_t n = 0, i;

	buf[0] = '\0';
	for (i = 0; k->syms[i].name && n < len; i++) {
		const char *sep = i == 0 ? "" :
			(!k->syms[i + 1].name && !k->num) ? " or " : ", ";
		n += snprintf(buf + n, len - n, "%s%s", sep, k->syms[i].name);
	}
	if (k->num && n < len)
		snprintf(buf + n, len - n, " or %llu..%llu",
			 (unsigned long long)k->min, (unsigned long long)k->max);
}

/* What a key accepts, for "KEY = VALUE: must be <range>". */
static void range_text(const struct key *k, char *buf, size_t len)
{
	char a[32], b[32];

	switch (k->type) {
	case T_UINT:
	case T_DOUBLE:
		snprintf(buf, len, "%llu..%llu", (unsigned long long)k->min,
			 (unsigned long long)k->max);
		break;
	case T_SIZE:
		if (k->max == UINT64_MAX && !k->min) {
			snprintf(buf, len, "a size in bytes with an optional K, M, G or T suffix (binary)");
		} else {
			fmt_size(k->min, a, sizeof(a));
			fmt_size(k->max, b, sizeof(b));
			snprintf(buf, len, "%s..%s", a, b);
		}
		if (k->align > 1) {
			size_t n = strlen(buf);

			fmt_size(k->align, a, sizeof(a));
			snprintf(buf + n, len - n, ", a multiple of %s", a);
		}
		break;
	case T_ENUM:
	case T_NAME:
		syms_text(k, buf, len);
		break;
	case T_POLICY:
		snprintf(buf, len, "1..%zu characters of a-z 0-9 _ : = , . -", k->size - 1);
		break;
	case T_PATH:
		snprintf(buf, len, "at most %zu characters", k->size - 1);
		break;
	}
}

static const char *sym_name(const struct sym *s, int value)
{
	for (; s->name; s++)
		if (s->value == value)
			return s->name;
	return NULL;
}

/* Case-insensitive, as the INI file may say ON or Auto. */
static const struct sym *sym_find(const struct sym *s, const char *name)
{
	for (; s->name; s++)
		if (!strcasecmp(s->name, name))
			return s;
	return NULL;
}

/* The field's current value as INI text (numbers for out-of-range enums,
 * so a bad value is still visible). */
static int value_text(const struct kvt_config *c, const struct key *k, char *buf, size_t len)
{
	const void *f = cfield(c, k);
	const char *s;
	int iv;

	switch (k->type) {
	case T_UINT:
		snprintf(buf, len, "%u", *(const unsigned *)f);
		break;
	case T_SIZE:
		fmt_size(*(const uint64_t *)f, buf, len);
		break;
	case T_ENUM:
		iv = *(const int *)f;	/* also reads the unsigned dtype_bytes */
		s = sym_name(k->syms, iv);
		if (s)
			snprintf(buf, len, "%s", s);
		else
			snprintf(buf, len, "%d", iv);
		break;
	case T_DOUBLE:
		return fmt_double(*(const double *)f, buf, len);
	case T_POLICY:
	case T_PATH:
	case T_NAME:
		snprintf(buf, len, "%.*s", (int)strnlen(f, k->size), (const char *)f);
		break;
	}
	return 0;
}

/* Why an INI line could not carry this path back unchanged, or NULL. */
static const char *path_problem(const char *s, size_t size)
{
	size_t i, n = strnlen(s, size);

	if (n == size)
		return "too long";
	for (i = 0; i < n; i++) {
		unsigned char ch = s[i];

		if (ch < 0x20 || ch == 0x7f)
			return "contains a control character";
		if (ch == ';' && (i == 0 || s[i - 1] == ' ' || s[i - 1] == '\t'))
			return "has ';' at the start or after white space (an INI comment)";
	}
	if (n && (isspace((unsigned char)s[0]) || isspace((unsigned char)s[n - 1])))
		return "starts or ends with white space";
	return NULL;
}

static int policy_ok(const char *s, size_t size)
{
	size_t i, n = strnlen(s, size), name;
	const char *colon;
	int path;

	if (n == 0 || n == size)
		return 0;
	colon = memchr(s, ':', n);
	name = colon ? (size_t)(colon - s) : n;
	/* A name with a '/' is a plug-in's path (pager/policy.h): it may also
	 * hold capitals, '/', '+' and '~'; the params after it may not. */
	path = memchr(s, '/', name) != NULL;
	for (i = 0; i < n; i++)
		if (!strchr("abcdefghijklmnopqrstuvwxyz0123456789_:=,.-", s[i]) &&
		    !(path && i < name && strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZ/+~", s[i])))
			return 0;
	return 1;
}

/* Is the field's current value in range? (validate) */
static int field_ok(const struct kvt_config *c, const struct key *k)
{
	const void *f = cfield(c, k);
	const struct sym *s;
	uint64_t u;
	double d;
	int iv;

	switch (k->type) {
	case T_UINT:
		u = *(const unsigned *)f;
		return u >= k->min && u <= k->max;
	case T_SIZE:
		u = *(const uint64_t *)f;
		return u >= k->min && u <= k->max && (k->align <= 1 || !(u % k->align));
	case T_ENUM:
		iv = *(const int *)f;
		if (sym_name(k->syms, iv))
			return 1;
		return k->num && iv >= 0 && (uint64_t)iv >= k->min && (uint64_t)iv <= k->max;
	case T_DOUBLE:
		d = *(const double *)f;
		return d >= (double)k->min && d <= (double)k->max && !signbit(d);
	case T_POLICY:
		return policy_ok(f, k->size);
	case T_PATH:
		return !path_problem(f, k->size);
	case T_NAME:
		/* exactly as stored by set: lower case */
		return strnlen(f, k->size) < k->size && (s = sym_find(k->syms, f)) &&
			!strcmp(s->name, f);
	}
	return 0;
}

/* "KEY = VALUE: must be RANGE" */
static int bad_value(char *msg, size_t len, const struct key *k, const char *v)
{
	char e[ECHO_MAX + 8], r[160];

	range_text(k, r, sizeof(r));
	return kvt_errf(msg, len, -EINVAL, "%s = %s: must be %s", k->name,
			echo(v, e, sizeof(e), ECHO_MAX), r);
}

/* Parse v for k and store it in *c; on failure *c is untouched. */
static int set_key(struct kvt_config *c, const char *name, const char *v,
		   char *msg, size_t len)
{
	const struct key *k;
	const struct sym *s;
	char e[ECHO_MAX + 8], r[32];
	const char *why;
	void *f;
	uint64_t u;
	double d;
	int rc;

	if (!name || !*name)
		return kvt_errf(msg, len, -EINVAL, "no key given");
	k = find_key(name);
	if (!k && (k = refused_fault_key(name)))
		return kvt_errf(msg, len, -EINVAL, "%s: " FAULT_FLAG, k->name);
	if (!k)
		return kvt_errf(msg, len, -EINVAL, "unknown key \"%s\"",
				echo(name, e, sizeof(e), ECHO_MAX));
	if (!v)
		return kvt_errf(msg, len, -EINVAL, "%s: no value given", k->name);
	f = field(c, k);

	switch (k->type) {
	case T_UINT:
		if (parse_num(v, 0, &u) || u < k->min || u > k->max)
			return bad_value(msg, len, k, v);
		*(unsigned *)f = (unsigned)u;
		return 0;
	case T_SIZE:
		rc = parse_num(v, 1, &u);
		if (rc == -ERANGE)
			return kvt_errf(msg, len, -EINVAL, "%s = %s: too large (must fit in 64 bits)",
					k->name, echo(v, e, sizeof(e), ECHO_MAX));
		if (rc || u < k->min || u > k->max)
			return bad_value(msg, len, k, v);
		if (k->align > 1 && u % k->align) {
			fmt_size(k->align, r, sizeof(r));
			return kvt_errf(msg, len, -EINVAL, "%s = %s: must be a multiple of %s",
					k->name, echo(v, e, sizeof(e), ECHO_MAX), r);
		}
		*(uint64_t *)f = u;
		return 0;
	case T_ENUM:
		if ((s = sym_find(k->syms, v))) {
			*(int *)f = s->value;
			return 0;
		}
		if (k->num && !parse_num(v, 0, &u) && u >= k->min && u <= k->max) {
			*(int *)f = (int)u;
			return 0;
		}
		return bad_value(msg, len, k, v);
	case T_DOUBLE:
		rc = parse_double(v, &d);
		if (rc == -ENOMEM)
			return kvt_errf(msg, len, rc, "%s: out of memory", k->name);
		if (rc || d < (double)k->min || d > (double)k->max)
			return bad_value(msg, len, k, v);
		*(double *)f = d;
		return 0;
	case T_POLICY:
		if (!policy_ok(v, k->size))
			return bad_value(msg, len, k, v);
		break;
	case T_PATH:
		why = path_problem(v, k->size);
		if (why && !strcmp(why, "too long"))
			return kvt_errf(msg, len, -EINVAL, "%s = %s: too long (at most %zu characters)",
					k->name, echo(v, e, sizeof(e), ECHO_MAX), k->size - 1);
		if (why)
			return kvt_errf(msg, len, -EINVAL, "%s = %s: %s", k->name,
					echo(v, e, sizeof(e), ECHO_MAX), why);
		break;
	case T_NAME:
		if (!(s = sym_find(k->syms, v)))
			return bad_value(msg, len, k, v);
		v = s->name;
		break;
	}
	/* strings: clear the whole array so equal configs compare equal */
	memset(f, 0, k->size);
	memcpy(f, v, strlen(v));
	return 0;
}

/* ---- public ---- */

KVT_API void kvt_config_default(struct kvt_config *cfg)
{
	static const unsigned wm[KVT_NTIERS][3] = { { 1, 2, 4 }, { 1, 2, 4 }, { 0, 0, 0 } };
	static const uint64_t bytes[KVT_NTIERS] = { 1ull << 30, 4ull << 30, 64ull << 30 };
	int t;

	memset(cfg, 0, sizeof(*cfg));
	cfg->n_layers = 32;
	cfg->n_kv_heads = 8;
	cfg->head_dim = 128;
	cfg->page_tokens = 16;
	cfg->dtype_bytes = 2;
	for (t = 0; t < KVT_NTIERS; t++) {
		cfg->tier[t].bytes = bytes[t];
		strcpy(cfg->tier[t].policy, "auto");
		cfg->tier[t].wm_min = wm[t][0];
		cfg->tier[t].wm_low = wm[t][1];
		cfg->tier[t].wm_high = wm[t][2];
	}
	cfg->nvme_direct = KVT_AUTO;
	cfg->io_depth = 32;
	cfg->max_io_bytes = 1u << 20;
	cfg->host_numa_node = KVT_NUMA_ANY;
	cfg->host_hugepages = KVT_HUGE_AUTO;
	cfg->host_mlock = KVT_AUTO;
	cfg->host_prefault_threads = 0;
	cfg->host_in_place = KVT_IN_PLACE_AUTO;
	cfg->prefetch_depth = 2;
	strcpy(cfg->psi_path, "/proc/pressure/memory");
	cfg->psi_threshold = 0;
	cfg->psi_interval_ms = 1000;
	cfg->control_idle_ms = 30000;
	cfg->host_floor = 0;
	strcpy(cfg->device, "auto");
	cfg->copy_gbps = 0;
}

/* 0 when the product does not fit (validate refuses such a geometry first). */
KVT_API uint64_t kvt_config_page_bytes(const struct kvt_config *cfg)
{
	uint64_t b = 2;	/* K and V */

	if (__builtin_mul_overflow(b, (uint64_t)cfg->page_tokens, &b) ||
	    __builtin_mul_overflow(b, (uint64_t)cfg->n_kv_heads, &b) ||
	    __builtin_mul_overflow(b, (uint64_t)cfg->head_dim, &b) ||
	    __builtin_mul_overflow(b, (uint64_t)cfg->dtype_bytes, &b))
		return 0;
	return b;
}

/* One key, range-checked alone: cross-field rules are validate's job, so
 * a caller can move wm_low above wm_high in two steps. */
KVT_API int kvt_config_set(struct kvt_config *cfg, const char *key, const char *value,
			   char *err, size_t errlen)
{
	if (!cfg)
		return kvt_errf(err, errlen, -EINVAL, "no configuration given");
	return set_key(cfg, key, value, err, errlen);
}

/* metrics.http (pager/hooks.h): the text alone; ops/http.c binds it. */
int kvt_config_http_addr(const char *s, unsigned char addr[16], int *v6, unsigned *port,
			 char *why, size_t whylen)
{
	static const char usage[] = "must be a loopback address (127.0.0.0/8, localhost or "
				    "[::1]) and a port 0..65535, e.g. 127.0.0.1:9187";
	static const unsigned char loop6[16] = { [15] = 1 };
	char host[64];
	const char *colon, *h;
	size_t hl;
	char *end;

	memset(addr, 0, 16);
	if (s[0] == '[') {
		const char *rb = strchr(s, ']');
		if (!rb || rb[1] != ':')
			goto bad;
		h = s + 1;
		hl = (size_t)(rb - h);
		colon = rb + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon)
			goto bad;
		h = s;
		hl = (size_t)(colon - s);
	}
	if (!hl || hl >= sizeof(host) || !colon[1] || colon[1] < '0' || colon[1] > '9')
		goto bad;
	memcpy(host, h, hl);
	host[hl] = 0;
	errno = 0;
	unsigned long n = strtoul(colon + 1, &end, 10);
	if (*end || errno || n > 65535)
		goto bad;
	*port = (unsigned)n;
	if (s[0] == '[') {
		if (inet_pton(AF_INET6, host, addr) != 1 || memcmp(addr, loop6, 16))
			goto bad;
		*v6 = 1;
		return 0;
	}
	if (!strcmp(host, "localhost"))
		strcpy(host, "127.0.0.1");
	if (inet_pton(AF_INET, host, addr) != 1 || addr[0] != 127)
		goto bad;
	*v6 = 0;
	return 0;
bad:
	return kvt_errf(why, whylen, -EINVAL, "metrics.http = %.80s: %s", s, usage);
}

KVT_API int kvt_config_validate(const struct kvt_config *cfg, char *err, size_t errlen)
{
	char v[KVT_PATH_MAX], e[ECHO_MAX + 8], a[32], b[32];
	uint64_t page;
	size_t i;
	int t, rc;

	if (!cfg)
		return kvt_errf(err, errlen, -EINVAL, "no configuration given");
	for (i = 0; i < NKEYS; i++) {
		const struct key *k = &keys[i];
		const char *why;

		if (field_ok(cfg, k))
			continue;
		if (k->type == T_PATH && (why = path_problem(cfield(cfg, k), k->size))) {
			value_text(cfg, k, v, sizeof(v));
			return kvt_errf(err, errlen, -EINVAL, "%s = %s: %s", k->name,
					echo(v, e, sizeof(e), ECHO_MAX), why);
		}
		rc = value_text(cfg, k, v, sizeof(v));
		if (rc)
			return kvt_errf(err, errlen, rc, "%s: out of memory", k->name);
		return bad_value(err, errlen, k, v);
	}
	for (i = 0; i < NFAULT_KEYS; i++) {
		const struct key *k = &fault_keys[i];

		if (*(const unsigned *)cfield(cfg, k) && refused_fault_key(k->name))
			return kvt_errf(err, errlen, -EINVAL, "%s = %u: " FAULT_FLAG, k->name,
					*(const unsigned *)cfield(cfg, k));
	}
	for (t = 0; t < KVT_NTIERS; t++) {
		const struct kvt_tier_config *tc = &cfg->tier[t];

		if (tc->wm_min > tc->wm_low || tc->wm_low > tc->wm_high)
			return kvt_errf(err, errlen, -EINVAL,
					"%s: wm_min = %u, wm_low = %u, wm_high = %u: must be "
					"wm_min <= wm_low <= wm_high", tier_sec[t],
					tc->wm_min, tc->wm_low, tc->wm_high);
	}
	for (t = KVT_TIER_FAST; t <= KVT_TIER_HOST; t++) {
		const struct kvt_tier_config *tc = &cfg->tier[t];

		if (!tc->max_bytes || tc->max_bytes >= tc->bytes)
			continue;
		fmt_size(tc->max_bytes, a, sizeof(a));
		fmt_size(tc->bytes, b, sizeof(b));
		return kvt_errf(err, errlen, -EINVAL,
				"%s.max_bytes = %s: must be 0 or at least %s.bytes = %s",
				tier_sec[t], a, tier_sec[t], b);
	}
	if (cfg->tier[KVT_TIER_NVME].max_bytes)
		return kvt_errf(err, errlen, -EINVAL, "tier.nvme.max_bytes: the NVMe tier cannot grow");
	if (cfg->metrics_http[0]) {
		unsigned char addr[16];
		unsigned port;
		int v6;

		rc = kvt_config_http_addr(cfg->metrics_http, addr, &v6, &port, err, errlen);
		if (rc)
			return rc;
	}
	page = kvt_config_page_bytes(cfg);
	if (!page || page % PAGE_ALIGN)
		return kvt_errf(err, errlen, -EINVAL,
				"geometry: page bytes = page_tokens %u x kv_heads %u x head_dim %u"
				" x 2 (K and V) x %u (dtype) = %llu: must be a multiple of %u"
				" (O_DIRECT)", cfg->page_tokens, cfg->n_kv_heads, cfg->head_dim,
				cfg->dtype_bytes, (unsigned long long)page, PAGE_ALIGN);
	for (t = KVT_TIER_FAST; t <= KVT_TIER_HOST; t++) {
		uint64_t n = cfg->tier[t].bytes / page;

		if (n >= 2)
			continue;
		fmt_size(cfg->tier[t].bytes, a, sizeof(a));
		fmt_size(page, b, sizeof(b));
		fmt_size(2 * page, v, sizeof(v));
		return kvt_errf(err, errlen, -EINVAL,
				"%s.bytes = %s holds %llu page%s of %s: must hold at least 2 (%s)",
				tier_sec[t], a, (unsigned long long)n, n == 1 ? "" : "s", b, v);
	}
	return 0;
}

/* Appends to a buffer, counting what did not fit. */
struct out {
	char *buf;
	size_t len, n;
};

__attribute__((format(printf, 2, 3)))
static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = vsnprintf(o->n < o->len ? o->buf + o->n : NULL,
		      o->n < o->len ? o->len - o->n : 0, fmt, ap);
	va_end(ap);
	if (r > 0)
		o->n += (size_t)r;
}

KVT_API int kvt_config_print(const struct kvt_config *cfg, char *buf, size_t len)
{
	struct out o = { buf, len, 0 };
	char v[KVT_PATH_MAX], prev[32] = "";
	size_t i;
	int rc;

	if (!cfg)
		return -EINVAL;
	put(&o, "; kvtier configuration (page = %llu bytes)\n",
	    (unsigned long long)kvt_config_page_bytes(cfg));
	for (i = 0; i < NKEYS; i++) {
		const struct key *k = &keys[i];
		const char *dot = strrchr(k->name, '.');
		int seclen = (int)(dot - k->name);

		if (strncmp(prev, k->name, seclen) || prev[seclen]) {
			put(&o, "\n[%.*s]\n", seclen, k->name);
			snprintf(prev, sizeof(prev), "%.*s", seclen, k->name);
		}
		rc = value_text(cfg, k, v, sizeof(v));
		if (rc)
			return rc;
		put(&o, "%s =%s%s\n", dot + 1, v[0] ? " " : "", v);
	}
	if (o.n >= len || o.n > INT32_MAX)
		return -ENOSPC;
	return (int)o.n;
}

/* ---- INI files ---- */

struct load {
	struct kvt_config cfg;	/* the copy being filled; *cfg only on success */
	FILE *f;
	char *line;		/* getline's buffer */
	size_t cap;
	unsigned lineno;	/* lines handed to inih so far */
	unsigned err_line;	/* first error seen by reader or handler, 0 = none */
	int err;		/* its -errno */
	int io_errno;		/* read failure */
	char msg[MSG_MAX];
	unsigned char seen[NKEYS];	/* keys the file sets, by index in keys[] */
};

/* fgets for inih, one line per call, so lineno is inih's line number.
 * Leading white space is dropped, which makes indented keys plain keys
 * (inih would take them for continuation lines). A line longer than inih's
 * buffer is refused: inih would silently cut it in two. Returns NULL at
 * EOF or after the first error, which ends the parse. */
static char *reader(char *str, int num, void *stream)
{
	struct load *st = stream;
	ssize_t n;
	char *s;
	size_t len;

	if (st->err_line || st->io_errno)
		return NULL;
	errno = 0;
	n = getline(&st->line, &st->cap, st->f);
	if (n < 0) {
		if (ferror(st->f))
			st->io_errno = errno ? errno : EIO;
		return NULL;
	}
	st->lineno++;
	if (memchr(st->line, '\0', (size_t)n)) {
		st->err_line = st->lineno;
		st->err = -EINVAL;
		kvt_errf(st->msg, sizeof(st->msg), 0, "NUL byte in line");
		return NULL;
	}
	for (s = st->line; *s == ' ' || *s == '\t' || *s == '\r' || *s == '\v' || *s == '\f'; s++)
		;
	len = (size_t)n - (size_t)(s - st->line);
	if (num < 3 || len >= (size_t)num) {
		st->err_line = st->lineno;
		st->err = -EINVAL;
		kvt_errf(st->msg, sizeof(st->msg), 0, "line too long (at most %d characters)", num - 2);
		return NULL;
	}
	memcpy(str, s, len + 1);
	return str;
}

static int handler(void *user, const char *section, const char *name, const char *value)
{
	struct load *st = user;
	char key[256], e[ECHO_MAX + 8];
	int rc;

	if (st->err_line)
		return 0;
	if (!value) {	/* only if someone turned on ini_allow_no_value */
		rc = kvt_errf(st->msg, sizeof(st->msg), -EINVAL, "%s: expected key = value",
			      echo(name, e, sizeof(e), ECHO_MAX));
	} else if (!section[0]) {
		rc = kvt_errf(st->msg, sizeof(st->msg), -EINVAL,
			      "unknown key \"%s\" (before any [section])",
			      echo(name, e, sizeof(e), ECHO_MAX));
	} else {
		snprintf(key, sizeof(key), "%s.%s", section, name);
		rc = set_key(&st->cfg, key, value, st->msg, sizeof(st->msg));
	}
	if (!rc) {
		st->seen[find_key(key) - keys] = 1;
		return 1;
	}
	st->err_line = st->lineno;
	st->err = rc;
	return 0;
}

KVT_API int kvt_config_load(struct kvt_config *cfg, const char *path, char *err, size_t errlen)
{
	return kvt_config_load_keys(cfg, path, NULL, NULL, err, errlen);
}

KVT_API int kvt_config_load_keys(struct kvt_config *cfg, const char *path,
				 void (*seen)(void *arg, const char *key), void *arg,
				 char *err, size_t errlen)
{
	struct load *st;
	char p[256], eb[128], vmsg[MSG_MAX];
	int rc, e;

	if (!cfg || !path)
		return kvt_errf(err, errlen, -EINVAL, "no configuration or path given");
	echo(path, p, sizeof(p), 200);
	st = calloc(1, sizeof(*st));
	if (!st)
		return kvt_errf(err, errlen, -ENOMEM, "%s: out of memory", p);
	memcpy(&st->cfg, cfg, sizeof(*cfg));
	st->f = fopen(path, "re");
	if (!st->f) {
		e = errno;
		free(st);
		return kvt_errf(err, errlen, -e, "%s: %s", p, strerror_r(e, eb, sizeof(eb)));
	}

	rc = ini_parse_stream(reader, st, handler, st);

	if (st->io_errno) {
		e = st->io_errno;
		rc = kvt_errf(err, errlen, -e, "%s: %s", p, strerror_r(e, eb, sizeof(eb)));
	} else if (rc > 0 && (!st->err_line || (unsigned)rc < st->err_line)) {
		rc = kvt_errf(err, errlen, -EINVAL, "%s:%d: expected [section] or key = value", p, rc);
	} else if (st->err_line) {
		rc = kvt_errf(err, errlen, st->err, "%s:%u: %s", p, st->err_line, st->msg);
	} else if (rc == -2) {
		rc = kvt_errf(err, errlen, -ENOMEM, "%s: out of memory", p);
	} else if (rc) {
		rc = kvt_errf(err, errlen, -EIO, "%s: cannot be parsed (libinih: %d)", p, rc);
	} else if ((rc = kvt_config_validate(&st->cfg, vmsg, sizeof(vmsg)))) {
		rc = kvt_errf(err, errlen, rc, "%s: %s", p, vmsg);
	} else {
		memcpy(cfg, &st->cfg, sizeof(*cfg));
		for (size_t i = 0; seen && i < NKEYS; i++)
			if (st->seen[i])
				seen(arg, keys[i].name);
	}
	fclose(st->f);
	free(st->line);
	free(st);
	return rc;
}
