/* SPDX-License-Identifier: MIT */
/*
 * A checker of the Prometheus text format 0.0.4, for the tests that read
 * the pager's metrics (t_metrics, t_http). prom_check(text, len, why,
 * whylen) is 0 for a valid exposition, else -1 with the first problem
 * (and its line) in why. Everything is static; not thread-safe (one
 * static parse state).
 */
#ifndef KVT_TESTS_PROM_CHECK_H
#define KVT_TESTS_PROM_CHECK_H

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------
 * A checker of the text format 0.0.4, stricter than Prometheus where the
 * library promises more: every family has one HELP and one TYPE (counter,
 * gauge or histogram) before its samples and stays in one block; counters
 * end in _total; histogram series have le ascending, cumulative counts,
 * a +Inf bucket equal to _count, and a _sum.
 */
#define MAXFAM	128
#define MAXSER	64
#define MAXSMP	1024
#define MAXLAB	8

struct series {			/* one histogram series: its labels without le */
	char key[256];
	double last_le, last_cnt, inf, count;
	int nbucket, has_inf, has_sum, has_count;
};

struct fam {
	char name[128], type[16];
	int help, typed, samples, closed;
	struct series ser[MAXSER];
	int nser;
};

struct prom {
	struct fam fam[MAXFAM];
	int nfam, cur;			/* cur: the family of the block in progress, or -1 */
	char seen[MAXSMP][320];		/* name{labels} of every sample, for duplicates */
	int nseen;
	unsigned line;
	char why[256];
};

static int p_fail(struct prom *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int p_fail(struct prom *p, const char *fmt, ...)
{
	va_list ap;
	if (!p->why[0]) {
		int n = snprintf(p->why, sizeof(p->why), "line %u: ", p->line);
		va_start(ap, fmt);
		vsnprintf(p->why + n, sizeof(p->why) - (size_t)n, fmt, ap);
		va_end(ap);
	}
	return -1;
}

static int name_start(char c, int colon)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
}

static int name_char(char c, int colon)
{
	return name_start(c, colon) || (c >= '0' && c <= '9');
}

/* A metric name (colon) or label name at *s into out; 0 or -1. */
static int p_name(struct prom *p, const char **s, char *out, size_t cap, int colon)
{
	size_t n = 0;
	if (!name_start(**s, colon))
		return p_fail(p, "bad %s name at '%.20s'", colon ? "metric" : "label", *s);
	while (name_char(**s, colon)) {
		if (n + 1 >= cap)
			return p_fail(p, "name too long");
		out[n++] = *(*s)++;
	}
	out[n] = 0;
	return 0;
}

static int ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);
	return a >= b && !strcmp(s + a - b, suffix);
}

/* A float as the format has it: Go's ParseFloat, so also +Inf, -Inf, NaN. */
static int p_float(const char *s, size_t n, double *v)
{
	char tmp[64], *end;
	if (!n || n >= sizeof(tmp))
		return -1;
	memcpy(tmp, s, n);
	tmp[n] = 0;
	if (!strcmp(tmp, "+Inf") || !strcmp(tmp, "Inf")) {
		*v = INFINITY;
		return 0;
	}
	if (!strcmp(tmp, "-Inf")) {
		*v = -INFINITY;
		return 0;
	}
	if (!strcmp(tmp, "NaN")) {
		*v = NAN;
		return 0;
	}
	if (!(tmp[0] == '-' || tmp[0] == '+' || tmp[0] == '.' || (tmp[0] >= '0' && tmp[0] <= '9')))
		return -1;
	errno = 0;
	*v = strtod(tmp, &end);
	return *end || errno == ERANGE ? -1 : 0;
}

static struct fam *fam_find(struct prom *p, const char *name)
{
	for (int i = 0; i < p->nfam; i++)
		if (!strcmp(p->fam[i].name, name))
			return &p->fam[i];
	return NULL;
}

/* Make f the family of the current block; a family may not come back. */
static int fam_enter(struct prom *p, struct fam *f)
{
	int i = (int)(f - p->fam);
	if (p->cur == i)
		return 0;
	if (f->closed)
		return p_fail(p, "family %s appears in two blocks", f->name);
	if (p->cur >= 0)
		p->fam[p->cur].closed = 1;
	p->cur = i;
	return 0;
}

static int p_comment(struct prom *p, const char *s)
{
	char name[128];
	int help;

	if (!strncmp(s, "# HELP ", 7))
		help = 1;
	else if (!strncmp(s, "# TYPE ", 7))
		help = 0;
	else
		return 0;		/* any other comment is ignored */
	s += 7;
	if (p_name(p, &s, name, sizeof(name), 1))
		return -1;
	struct fam *f = fam_find(p, name);
	if (!f) {
		if (p->nfam == MAXFAM)
			return p_fail(p, "too many families");
		f = &p->fam[p->nfam++];
		memset(f, 0, sizeof(*f));
		snprintf(f->name, sizeof(f->name), "%s", name);
	}
	if (fam_enter(p, f))
		return -1;
	if (help) {
		if (f->help++)
			return p_fail(p, "second HELP for %s", name);
		if (*s != ' ')
			return p_fail(p, "HELP %s without text", name);
		for (s++; *s; s++)
			if (*s == '\\' && (s[1] == '\\' || s[1] == 'n'))
				s++;
			else if (*s == '\\')
				return p_fail(p, "bad escape in HELP %s", name);
		return 0;
	}
	if (f->typed++)
		return p_fail(p, "second TYPE for %s", name);
	if (f->samples)
		return p_fail(p, "TYPE for %s after its samples", name);
	if (*s++ != ' ')
		return p_fail(p, "TYPE %s without a type", name);
	if (strcmp(s, "counter") && strcmp(s, "gauge") && strcmp(s, "histogram"))
		return p_fail(p, "TYPE %s is '%s'", name, s);
	snprintf(f->type, sizeof(f->type), "%s", s);
	return 0;
}

struct label {
	char name[64], value[128];
};

/* {name="value",...} at *s; values unescaped. */
static int p_labels(struct prom *p, const char **s, struct label *lab, int *nlab)
{
	*nlab = 0;
	if (**s != '{')
		return 0;
	(*s)++;
	if (**s == '}') {
		(*s)++;
		return 0;
	}
	for (;;) {
		if (*nlab == MAXLAB)
			return p_fail(p, "too many labels");
		struct label *l = &lab[(*nlab)++];
		size_t n = 0;
		if (p_name(p, s, l->name, sizeof(l->name), 0))
			return -1;
		if (!strncmp(l->name, "__", 2))
			return p_fail(p, "reserved label name %s", l->name);
		for (int k = 0; k < *nlab - 1; k++)
			if (!strcmp(lab[k].name, l->name))
				return p_fail(p, "label %s twice", l->name);
		if (*(*s)++ != '=' || *(*s)++ != '"')
			return p_fail(p, "expected =\" after label %s", l->name);
		for (;;) {
			char c = *(*s)++;
			if (!c)
				return p_fail(p, "unterminated label value");
			if (c == '"')
				break;
			if (c == '\\') {
				c = *(*s)++;
				if (c == 'n')
					c = '\n';
				else if (c != '\\' && c != '"')
					return p_fail(p, "bad escape in label %s", l->name);
			}
			if (n + 1 >= sizeof(l->value))
				return p_fail(p, "label value too long");
			l->value[n++] = c;
		}
		l->value[n] = 0;
		if (**s == '}') {
			(*s)++;
			return 0;
		}
		if (*(*s)++ != ',')
			return p_fail(p, "expected , or } after label %s", l->name);
	}
}

static struct series *series_of(struct prom *p, struct fam *f, const struct label *lab, int nlab)
{
	char key[256] = "";
	size_t n = 0;
	for (int k = 0; k < nlab; k++)
		if (strcmp(lab[k].name, "le"))
			n += (size_t)snprintf(key + n, sizeof(key) - n, "%s=%s,", lab[k].name,
					      lab[k].value);
	for (int i = 0; i < f->nser; i++)
		if (!strcmp(f->ser[i].key, key))
			return &f->ser[i];
	if (f->nser == MAXSER) {
		p_fail(p, "too many series in %s", f->name);
		return NULL;
	}
	struct series *sr = &f->ser[f->nser++];
	memset(sr, 0, sizeof(*sr));
	snprintf(sr->key, sizeof(sr->key), "%s", key);
	sr->last_le = -INFINITY;
	return sr;
}

static int p_histogram(struct prom *p, struct fam *f, const char *suffix,
		       const struct label *lab, int nlab, double v)
{
	struct series *sr = series_of(p, f, lab, nlab);
	const char *le = NULL;

	if (!sr)
		return -1;
	for (int k = 0; k < nlab; k++)
		if (!strcmp(lab[k].name, "le"))
			le = lab[k].value;
	if (strcmp(suffix, "_bucket")) {
		if (le)
			return p_fail(p, "le on %s%s", f->name, suffix);
		if (!strcmp(suffix, "_sum")) {
			if (sr->has_sum++)
				return p_fail(p, "second _sum for %s{%s}", f->name, sr->key);
			return 0;
		}
		if (sr->has_count++)
			return p_fail(p, "second _count for %s{%s}", f->name, sr->key);
		sr->count = v;
		if (!sr->has_inf)
			return p_fail(p, "%s{%s}: _count before the +Inf bucket", f->name, sr->key);
		if (v != sr->inf)
			return p_fail(p, "%s{%s}: _count %g != +Inf bucket %g", f->name, sr->key, v,
				      sr->inf);
		return 0;
	}
	double bound;
	if (!le || p_float(le, strlen(le), &bound) || isnan(bound))
		return p_fail(p, "bucket of %s without a valid le", f->name);
	if (sr->has_inf)
		return p_fail(p, "%s{%s}: bucket after +Inf", f->name, sr->key);
	if (sr->nbucket && !(bound > sr->last_le))
		return p_fail(p, "%s{%s}: le %s not ascending", f->name, sr->key, le);
	if (sr->nbucket && v < sr->last_cnt)
		return p_fail(p, "%s{%s}: le %s count %g below the previous %g", f->name, sr->key,
			      le, v, sr->last_cnt);
	if (v < 0 || v != floor(v))
		return p_fail(p, "%s{%s}: bucket count %g", f->name, sr->key, v);
	sr->nbucket++;
	sr->last_le = bound;
	sr->last_cnt = v;
	if (isinf(bound)) {
		sr->has_inf = 1;
		sr->inf = v;
	}
	return 0;
}

static int p_sample(struct prom *p, const char *s)
{
	struct label lab[MAXLAB];
	char name[128], key[320];
	int nlab;
	double v;
	const char *start = s;

	if (p_name(p, &s, name, sizeof(name), 1) || p_labels(p, &s, lab, &nlab))
		return -1;
	if (*s++ != ' ')
		return p_fail(p, "expected a space before the value");
	const char *ve = strchr(s, ' ');
	size_t vn = ve ? (size_t)(ve - s) : strlen(s);
	if (p_float(s, vn, &v))
		return p_fail(p, "bad value '%.*s'", (int)vn, s);
	if (ve) {		/* an optional integer timestamp */
		char *end;
		strtoll(ve + 1, &end, 10);
		if (end == ve + 1 || *end)
			return p_fail(p, "bad timestamp '%s'", ve + 1);
	}
	snprintf(key, sizeof(key), "%.*s", (int)(s - 1 - start), start);
	for (int i = 0; i < p->nseen; i++)
		if (!strcmp(p->seen[i], key))
			return p_fail(p, "sample %s twice", key);
	if (p->nseen == MAXSMP)
		return p_fail(p, "too many samples");
	snprintf(p->seen[p->nseen++], sizeof(p->seen[0]), "%s", key);

	/* The family: the name itself, or a histogram's name under its suffix. */
	struct fam *f = fam_find(p, name);
	const char *suffix = "";
	if (!f || !f->typed) {
		static const char *const sfx[] = { "_bucket", "_sum", "_count" };
		f = NULL;
		for (size_t k = 0; k < 3 && !f; k++)
			if (ends_with(name, sfx[k])) {
				char base[128];
				snprintf(base, sizeof(base), "%.*s",
					 (int)(strlen(name) - strlen(sfx[k])), name);
				f = fam_find(p, base);
				suffix = sfx[k];
				if (f && strcmp(f->type, "histogram"))
					f = NULL;
			}
	}
	if (!f || !f->typed)
		return p_fail(p, "sample %s without a TYPE before it", name);
	if (fam_enter(p, f))
		return -1;
	f->samples++;
	if (!strcmp(f->type, "histogram")) {
		if (!*suffix)
			return p_fail(p, "histogram %s sample without a suffix", name);
		return p_histogram(p, f, suffix, lab, nlab, v);
	}
	if (!strcmp(f->type, "counter")) {
		if (!ends_with(name, "_total"))
			return p_fail(p, "counter %s does not end in _total", name);
		if (!(v >= 0))
			return p_fail(p, "counter %s is %g", name, v);
	} else if (ends_with(name, "_total")) {
		return p_fail(p, "%s %s ends in _total", f->type, name);
	}
	return 0;
}

/* 0 when s[0, n) is a valid exposition; else -1 with the reason in why. */
static int prom_check(const char *s, size_t n, char *why, size_t whylen)
{
	static struct prom p;
	char line[1024];
	int r = 0;

	memset(&p, 0, sizeof(p));
	p.cur = -1;
	if (n && s[n - 1] != '\n')
		r = p_fail(&p, "does not end in a newline");
	for (size_t i = 0; !r && i < n;) {
		const char *nl = memchr(s + i, '\n', n - i);
		size_t ln = nl ? (size_t)(nl - (s + i)) : n - i;
		p.line++;
		if (ln >= sizeof(line)) {
			r = p_fail(&p, "line too long");
			break;
		}
		memcpy(line, s + i, ln);
		line[ln] = 0;
		if (memchr(s + i, 0, ln))
			r = p_fail(&p, "NUL in a line");
		else if (!ln)
			r = p_fail(&p, "empty line");
		else if (line[0] == '#')
			r = p_comment(&p, line);
		else
			r = p_sample(&p, line);
		i += ln + 1;
	}
	for (int i = 0; !r && i < p.nfam; i++) {
		struct fam *f = &p.fam[i];
		if (!f->help || !f->typed)
			r = p_fail(&p, "family %s lacks %s", f->name, f->help ? "TYPE" : "HELP");
		else if (!f->samples)
			r = p_fail(&p, "family %s has no samples", f->name);
		for (int k = 0; !r && k < f->nser; k++)
			if (!f->ser[k].has_inf || !f->ser[k].has_sum || !f->ser[k].has_count)
				r = p_fail(&p, "histogram %s{%s} lacks its +Inf bucket, _sum or _count",
					   f->name, f->ser[k].key);
	}
	snprintf(why, whylen, "%s", p.why);
	return r;
}

#endif
