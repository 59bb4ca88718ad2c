/* SPDX-License-Identifier: MIT */
/*
 * The replay engine (pager/sim.h): trace loading and remapping, the
 * multi-tier replay that mirrors the pager's residency rules (pager/table.c,
 * pager/migrate.c, pager/acquire.c), the miss-ratio curves on a thread
 * pool, and the synthetic traces.
 *
 * Mirroring the pager: the functions below named after the pager's
 * (place, unplace, unevictable, reclaim, demote_write, promote, touch,
 * count_lookup; kvt_place and kvt_unplace there) do what theirs do, in the same order, with the I/O taken
 * out: a move is instant and always succeeds, so the states MOVING and
 * LOST do not arise except for the one page a promotion is bringing up.
 * Keys handed to the policies are the dense page ids.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pager/errf.h"
#include "pager/policy.h"
#include "pager/sim.h"
#include "kvt/sim.h"

#define MAX_VICTIMS	64	/* victims asked for at once, as the pager */
#define PROGRESS_MASK	((1u << 20) - 1)
#define ORACLE_REC	24	/* {u32 time; u64 obj_id; u32 size; i64 next} */
#define STAGE		1	/* the tier a page from further down lands in */

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------------
 * Key -> dense id: open addressing, linear probing, grown at half load.
 */

struct kslot {
	uint64_t k;
	uint32_t v;		/* id + 1; 0 = empty */
	uint32_t pad;
};

struct kmap {
	struct kslot *s;	/* key and value side by side: one cache line */
	size_t	  mask, n;
};

static inline size_t khash(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return (size_t)k;
}

static int kmap_init(struct kmap *m, size_t want)
{
	size_t cap = 1024;

	while (cap < 2 * want)
		cap *= 2;
	m->s = calloc(cap, sizeof(*m->s));
	m->mask = cap - 1;
	m->n = 0;
	return m->s ? 0 : -ENOMEM;
}

static void kmap_free(struct kmap *m)
{
	free(m->s);
	memset(m, 0, sizeof(*m));
}

static int kmap_grow(struct kmap *m)
{
	struct kmap g;
	int r = kmap_init(&g, m->mask + 1);

	if (r)
		return r;
	for (size_t i = 0; i <= m->mask; i++) {
		if (!m->s[i].v)
			continue;
		size_t j = khash(m->s[i].k) & g.mask;
		while (g.s[j].v)
			j = (j + 1) & g.mask;
		g.s[j] = m->s[i];
	}
	g.n = m->n;
	kmap_free(m);
	*m = g;
	return 0;
}

/* The slot of key: found (v != 0) or where it would go (v == 0). */
static inline size_t kmap_slot(const struct kmap *m, uint64_t key)
{
	size_t j = khash(key) & m->mask;

	while (m->s[j].v && m->s[j].k != key)
		j = (j + 1) & m->mask;
	return j;
}

/* The trace's page table under construction. */
struct remap {
	struct kmap map;
	uint64_t *key;
	uint32_t n, cap;
};

/* The id of key, a new one if it is new; KVT_SIM_NONE on ENOMEM. */
static uint32_t remap_id(struct remap *rm, uint64_t key)
{
	size_t j = kmap_slot(&rm->map, key);

	if (rm->map.s[j].v)
		return rm->map.s[j].v - 1;
	if (rm->n == UINT32_MAX - 1)
		return KVT_SIM_NONE;
	if (rm->n == rm->cap) {
		uint32_t cap = rm->cap ? rm->cap * 2 : 1024;
		uint64_t *k = realloc(rm->key, (size_t)cap * sizeof(*k));
		if (!k)
			return KVT_SIM_NONE;
		rm->key = k;
		rm->cap = cap;
	}
	rm->key[rm->n] = key;
	rm->map.s[j].k = key;
	rm->map.s[j].v = ++rm->n;
	if (++rm->map.n * 2 > rm->map.mask && kmap_grow(&rm->map))
		return KVT_SIM_NONE;
	return rm->n - 1;
}

/* ---------------------------------------------------------------------
 * Loading
 */

void kvt_sim_trace_free(struct kvt_sim_trace *t)
{
	free(t->id);
	free(t->ev);
	free(t->flags);
	free(t->step);
	free(t->score);
	free(t->next);
	free(t->key);
	free(t->seq);
	free(t->layer);
	free(t->index);
	free(t->config);
	memset(t, 0, sizeof(*t));
}

int kvt_sim_trace_keys(struct kvt_sim_trace *t, const uint64_t *keys, size_t n)
{
	struct remap rm = { 0 };
	int r;

	memset(t, 0, sizeof(*t));
	if (n >= UINT32_MAX)
		return -E2BIG;
	r = kmap_init(&rm.map, 1024);
	if (r)
		return r;
	t->id = malloc((n ? n : 1) * sizeof(*t->id));
	if (!t->id) {
		kmap_free(&rm.map);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		if (i + 16 < n)
			__builtin_prefetch(&rm.map.s[khash(keys[i + 16]) & rm.map.mask]);
		uint32_t id = remap_id(&rm, keys[i]);
		if (id == KVT_SIM_NONE) {
			kmap_free(&rm.map);
			free(rm.key);
			kvt_sim_trace_free(t);
			return -ENOMEM;
		}
		t->id[i] = id;
	}
	kmap_free(&rm.map);
	t->n = n;
	t->naccess = n;
	t->steps = n;
	t->npages = rm.n;
	t->key = rm.key;
	t->source = KVT_SRC_SYNTH;
	snprintf(t->format, sizeof(t->format), "keys");
	return 0;
}

/* oracleGeneral from in, which is closed here. */
static int oracle_input(struct kvt_input *in, const char *path, struct kvt_sim_trace *t,
			char *err, size_t errlen, double t0)
{
	struct remap rm = { 0 };
	size_t len = in->n, n;
	int r;

	memset(t, 0, sizeof(*t));
	if (!len) {
		kvt_input_close(in);
		return kvt_errf(err, errlen, -EINVAL, "%s: empty file", path);
	}
	if (len % ORACLE_REC) {
		kvt_input_close(in);
		return kvt_errf(err, errlen, -EINVAL, "%s: oracleGeneral: %zu bytes is not a whole "
				"number of 24-byte records: byte offset %zu starts a truncated one",
				path, len, len - len % ORACLE_REC);
	}
	n = len / ORACLE_REC;
	if (n >= UINT32_MAX) {
		kvt_input_close(in);
		return kvt_errf(err, errlen, -E2BIG, "%s: %zu records: at most %u", path, n,
				UINT32_MAX - 1);
	}
	r = kmap_init(&rm.map, 1 << 16);
	t->id = malloc(n * sizeof(*t->id));
	if (r || !t->id) {
		kvt_input_close(in);
		kmap_free(&rm.map);
		free(t->id);
		t->id = NULL;
		return kvt_errf(err, errlen, -ENOMEM, "%s: out of memory", path);
	}
	const uint8_t *b = in->p;
	uint32_t clock0, clock1;

	memcpy(&clock0, b, 4);
	memcpy(&clock1, b + (n - 1) * ORACLE_REC, 4);
	for (size_t i = 0; i < n; i++) {
		uint64_t key;
		memcpy(&key, b + i * ORACLE_REC + 4, sizeof(key));
		if (i + 16 < n) {
			uint64_t k16;
			memcpy(&k16, b + (i + 16) * ORACLE_REC + 4, sizeof(k16));
			__builtin_prefetch(&rm.map.s[khash(k16) & rm.map.mask]);
		}
		uint32_t id = remap_id(&rm, key);
		if (id == KVT_SIM_NONE) {
			kvt_input_close(in);
			kmap_free(&rm.map);
			free(rm.key);
			kvt_sim_trace_free(t);
			return kvt_errf(err, errlen, -ENOMEM, "%s: out of memory at record %zu", path, i);
		}
		t->id[i] = id;
	}
	kvt_input_close(in);
	kmap_free(&rm.map);
	t->n = n;
	t->naccess = n;
	t->steps = n;
	t->npages = rm.n;
	t->key = rm.key;
	t->source = KVT_SRC_ORACLE;
	t->time_first = clock0;
	t->time_last = clock1;
	t->time_s = 1;
	snprintf(t->format, sizeof(t->format), "oracleGeneral");
	t->load_s = now_s() - t0;
	return 0;
}

int kvt_sim_trace_oracle(const char *path, struct kvt_sim_trace *t, char *err, size_t errlen)
{
	double t0 = now_s();
	struct kvt_input in;
	int r;

	memset(t, 0, sizeof(*t));
	r = kvt_input_open(path, &in, err, errlen);
	return r ? r : oracle_input(&in, path, t, err, errlen, t0);
}

static int is_input(uint8_t ev)
{
	return ev == KVT_EV_ACCESS || ev == KVT_EV_NEW || ev == KVT_EV_FREE ||
	       ev == KVT_EV_SCORE || ev == KVT_EV_STEP || ev == KVT_EV_SEAL;
}

int kvt_sim_trace_recs(struct kvt_sim_trace *t, const struct kvt_trace_rec *rec, size_t nrec,
		       const struct kvt_trace_hdr *hdr, char *err, size_t errlen)
{
	struct remap rm = { 0 };
	uint64_t off0 = hdr ? hdr->rec_off : 0, rsz = sizeof(*rec);
	size_t n = 0, k = 0, nscore = 0, bad = SIZE_MAX;
	uint32_t pcap = 0;
	/* The pager's key is slot | generation << 32: per slot (low 32
	 * bits), the page made there and not freed since (id + 1, 0: none).
	 * Only for what the pager wrote (a header that says so). */
	struct remap sl = { 0 };
	uint32_t *held = NULL, hcap = 0;
	const int pager = hdr && hdr->source == KVT_SRC_PAGER;
	int r;

	memset(t, 0, sizeof(*t));
	for (size_t i = 0; i < nrec; i++) {
		const struct kvt_trace_rec *x = &rec[i];
		if (x->event < KVT_EV_ACCESS || x->event > KVT_EV_MAX)
			return kvt_errf(err, errlen, -EINVAL, "record %zu (byte offset %llu): unknown "
					"event %u", i, (unsigned long long)(off0 + i * rsz), x->event);
		if ((x->from >= 3 && x->from != KVT_TRACE_NONE) ||
		    (x->to >= 3 && x->to != KVT_TRACE_NONE))
			return kvt_errf(err, errlen, -EINVAL, "record %zu (byte offset %llu): tier "
					"%u -> %u", i, (unsigned long long)(off0 + i * rsz), x->from, x->to);
		n += is_input(x->event);
		nscore += x->event == KVT_EV_SCORE;
	}
	if (n >= UINT32_MAX)
		return kvt_errf(err, errlen, -E2BIG, "%zu input records: at most %u", n, UINT32_MAX - 1);
	r = kmap_init(&rm.map, 1024);
	if (!r)
		r = kmap_init(&sl.map, 1024);
	t->id = malloc((n ? n : 1) * sizeof(*t->id));
	t->ev = malloc(n ? n : 1);
	t->flags = malloc(n ? n : 1);
	t->step = malloc((n ? n : 1) * sizeof(*t->step));
	t->score = nscore ? calloc(n, sizeof(*t->score)) : NULL;
	if (r || !t->id || !t->ev || !t->flags || !t->step || (nscore && !t->score))
		goto nomem;
	for (size_t i = 0; i < nrec; i++) {
		const struct kvt_trace_rec *x = &rec[i];
		switch (x->event) {
		case KVT_EV_PROMOTE:
		case KVT_EV_DEMOTE:
		case KVT_EV_DROP:
		case KVT_EV_LOST:
			continue;
		case KVT_EV_GAP:
			t->gaps++;
			continue;
		case KVT_EV_ACCESS:
			t->naccess++;
			break;
		case KVT_EV_NEW:
			t->nnew++;
			break;
		case KVT_EV_SCORE:
			t->nscore++;
			break;
		default:
			break;
		}
		uint32_t id = KVT_SIM_NONE, had = rm.n;
		if (x->event != KVT_EV_STEP) {
			id = remap_id(&rm, x->key);
			if (id == KVT_SIM_NONE)
				goto nomem;
			if (id >= pcap) {
				uint32_t cap = pcap ? pcap * 2 : 1024;
				uint32_t *s = realloc(t->seq, cap * sizeof(*s));
				if (s)
					t->seq = s;
				uint32_t *l = realloc(t->layer, cap * sizeof(*l));
				if (l)
					t->layer = l;
				uint32_t *ix = realloc(t->index, cap * sizeof(*ix));
				if (ix)
					t->index = ix;
				if (!s || !l || !ix)
					goto nomem;
				pcap = cap;
			}
			if (pager && (x->event == KVT_EV_NEW || x->event == KVT_EV_FREE)) {
				uint32_t si = remap_id(&sl, (uint32_t)x->key);

				if (si == KVT_SIM_NONE)
					goto nomem;
				if (si >= hcap) {
					uint32_t cap = hcap ? hcap * 2 : 1024;
					uint32_t *h = realloc(held, cap * sizeof(*h));
					if (!h)
						goto nomem;
					memset(h + hcap, 0, (cap - hcap) * sizeof(*h));
					held = h;
					hcap = cap;
				}
				/* A page made in a slot that holds one (itself, or
				 * another generation) not freed since: two pages
				 * under one slot, which the replay cannot tell
				 * apart. After a GAP records may be missing: let be. */
				if (x->event == KVT_EV_NEW && held[si] && !t->gaps) {
					bad = i;
					break;
				}
				if (x->event == KVT_EV_NEW)
					held[si] = id + 1;
				else if (held[si] == id + 1)
					held[si] = 0;
			}
			if (rm.n != had) {	/* a new page: who made it */
				t->seq[id] = x->seq;
				t->layer[id] = x->layer;
				t->index[id] = x->index;
			}
		}
		if (k && x->step != t->step[k - 1])
			t->steps++;
		t->id[k] = id;
		t->ev[k] = x->event;
		t->flags[k] = x->flags;
		t->step[k] = x->step;
		if (t->score)
			t->score[k] = x->event == KVT_EV_SCORE ? x->score : 0;
		k++;
	}
	free(held);
	kmap_free(&sl.map);
	free(sl.key);
	if (bad != SIZE_MAX) {
		uint64_t key = rec[bad].key;

		kmap_free(&rm.map);
		free(rm.key);
		kvt_sim_trace_free(t);
		return kvt_errf(err, errlen, -EINVAL, "record %zu (byte offset %llu): page %#llx made "
				"in slot %u, which holds a page not freed since: not a trace the "
				"pager writes", bad, (unsigned long long)(off0 + bad * rsz),
				(unsigned long long)key, (unsigned)(uint32_t)key);
	}
	t->steps += k > 0;
	kmap_free(&rm.map);
	t->n = k;
	/* Accesses only, record i in step i, no flags: the arrays say
	 * nothing the fast path does not assume. */
	int plain = !t->score;
	for (size_t i = 0; plain && i < k; i++)
		plain = t->ev[i] == KVT_EV_ACCESS && !t->flags[i] && t->step[i] == i;
	if (plain) {
		free(t->ev);
		free(t->flags);
		free(t->step);
		t->ev = t->flags = NULL;
		t->step = NULL;
	}
	t->npages = rm.n;
	t->key = rm.key;
	if (hdr) {
		t->hdr = *hdr;
		t->has_hdr = 1;
		t->source = (int)hdr->source;
	}
	if (nrec) {
		t->time_first = rec[0].time;
		t->time_last = rec[nrec - 1].time;
	}
	t->time_s = t->source == KVT_SRC_ORACLE;
	snprintf(t->format, sizeof(t->format), "kvtier");
	struct kvt_trace view = { .rec = rec, .nrec = nrec };
	if (hdr)
		view.hdr = *hdr;
	kvt_trace_summarize(&view, &t->live);
	return 0;
nomem:
	free(held);
	kmap_free(&sl.map);
	free(sl.key);
	kmap_free(&rm.map);
	free(rm.key);
	kvt_sim_trace_free(t);
	return kvt_errf(err, errlen, -ENOMEM, "out of memory");
}

/* A kvtier trace from in, which passes to kvt_trace_open_input. */
static int kvt_input_trace(struct kvt_input *in, const char *path, struct kvt_sim_trace *t,
			   char *err, size_t errlen, double t0)
{
	struct kvt_trace tr;
	char e[256];
	int r;

	memset(t, 0, sizeof(*t));
	r = kvt_trace_open_input(in, path, &tr, e, sizeof(e));
	if (r)
		return kvt_errf(err, errlen, r, "%s", e);
	r = kvt_sim_trace_recs(t, tr.rec, tr.nrec, &tr.hdr, e, sizeof(e));
	if (!r && tr.hdr.config_len) {
		t->config = malloc((size_t)tr.hdr.config_len + 1);
		if (!t->config) {
			r = -ENOMEM;
			snprintf(e, sizeof(e), "out of memory");
			kvt_sim_trace_free(t);
		} else {
			memcpy(t->config, tr.config, tr.hdr.config_len);
			t->config[tr.hdr.config_len] = 0;
		}
	}
	kvt_trace_close(&tr);
	if (r)
		return kvt_errf(err, errlen, r, "%s: %s", path, e);
	t->load_s = now_s() - t0;
	return 0;
}

int kvt_sim_trace_kvt(const char *path, struct kvt_sim_trace *t, char *err, size_t errlen)
{
	double t0 = now_s();
	struct kvt_input in;
	int r;

	memset(t, 0, sizeof(*t));
	r = kvt_input_open(path, &in, err, errlen);
	return r ? r : kvt_input_trace(&in, path, t, err, errlen, t0);
}

int kvt_sim_trace_load(const char *path, struct kvt_sim_trace *t, char *err, size_t errlen)
{
	double t0 = now_s();
	const char *name = strcmp(path, "-") ? path : "standard input";
	struct kvt_input in;
	char e[384];
	int r;

	memset(t, 0, sizeof(*t));
	r = kvt_input_open(path, &in, err, errlen);
	if (r)
		return r;
	if (in.n >= 8 && !memcmp(in.p, KVT_TRACE_MAGIC, 8))
		return kvt_input_trace(&in, name, t, err, errlen, t0);
	r = oracle_input(&in, name, t, e, sizeof(e), t0);
	if (r == -EINVAL)
		return kvt_errf(err, errlen, r, "%s: not a kvtier trace (no %s magic), nor %s",
				name, KVT_TRACE_MAGIC, e + (strncmp(e, name, strlen(name)) ? 0 :
							      strlen(name) + 2));
	if (r)
		return kvt_errf(err, errlen, r, "%s", e);
	return 0;
}

/*
 * next[i]: the policy time of the page's next counted reference after
 * record i. A reference counts when it is the page's first ACCESS in its
 * step (the pager's touch()); the counted references are numbered 1, 2,
 * ... in trace order, which is the replay's kvt_ref.time for them.
 */
int kvt_sim_trace_next(struct kvt_sim_trace *t)
{
	uint64_t *last;
	uint32_t *nx, *after, time = 0;

	if (t->next)
		return 0;
	if (t->n >= UINT32_MAX)
		return -E2BIG;
	nx = malloc((t->n ? t->n : 1) * sizeof(*nx));
	last = malloc(((size_t)t->npages + 1) * sizeof(*last));
	if (!nx || !last) {
		free(nx);
		free(last);
		return -ENOMEM;
	}
	for (uint32_t p = 0; p < t->npages; p++)
		last[p] = UINT64_MAX;
	for (size_t i = 0; i < t->n; i++) {
		uint32_t id = t->id[i];
		uint64_t st = t->step ? t->step[i] : i;
		nx[i] = 0;
		if (t->ev && t->ev[i] != KVT_EV_ACCESS)
			continue;
		if (last[id] != st) {
			last[id] = st;
			nx[i] = ++time;
		}
	}
	after = (uint32_t *)last;	/* reused: (npages) next counted time */
	for (uint32_t p = 0; p < t->npages; p++)
		after[p] = UINT32_MAX;
	for (size_t i = t->n; i-- > 0;) {
		uint32_t id = t->id[i], c = nx[i];
		if (id == KVT_SIM_NONE) {
			nx[i] = UINT32_MAX;
			continue;
		}
		nx[i] = after[id];
		if (c)
			after[id] = c;
	}
	free(last);
	t->next = nx;
	return 0;
}

/* ---------------------------------------------------------------------
 * Configuration
 */

void kvt_sim_config_hdr(struct kvt_sim_config *c, const struct kvt_trace_hdr *h)
{
	memset(c, 0, sizeof(*c));
	c->backed = -1;
	c->page_bytes = h->page_bytes;
	for (int ti = 0; ti < 3; ti++) {
		if (!h->frames[ti])
			break;
		struct kvt_sim_tier *t = &c->tier[c->ntiers++];
		t->frames = h->frames[ti];
		memcpy(t->policy, h->policy[ti], sizeof(h->policy[ti]));
		t->policy[sizeof(h->policy[ti])] = 0;
		if (!t->policy[0])
			snprintf(t->policy, sizeof(t->policy), "auto");
	}
}

void kvt_sim_config_trace(struct kvt_sim_config *c, const struct kvt_sim_trace *t)
{
	const char *p = t->config;
	int ti = -1;

	if (t->has_hdr)
		kvt_sim_config_hdr(c, &t->hdr);
	/* "[tier.NAME]" sections, "key = value" lines, as kvt_config_print
	 * writes them; anything else is skipped. */
	while (p && *p) {
		size_t len = strcspn(p, "\n");
		char line[256], *eq;

		snprintf(line, sizeof(line), "%.*s", (int)(len < 255 ? len : 255), p);
		p += len + (p[len] == '\n');
		if (line[0] == '[') {
			ti = -1;
			for (int i = 0; i < 3; i++) {
				char sec[32];
				snprintf(sec, sizeof(sec), "[tier.%s]", i == 0 ? "fast" : i == 1 ? "host" : "nvme");
				if (!strncmp(line, sec, strlen(sec)))
					ti = i;
			}
			continue;
		}
		eq = strchr(line, '=');
		if (ti < 0 || (unsigned)ti >= c->ntiers || !eq)
			continue;
		char *k = line, *v = eq + 1, *e = eq;
		while (e > k && (e[-1] == ' ' || e[-1] == '\t'))
			e--;
		*e = 0;
		while (*v == ' ' || *v == '\t')
			v++;
		size_t vl = strlen(v);
		while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\r' || v[vl - 1] == '\t'))
			v[--vl] = 0;
		struct kvt_sim_tier *x = &c->tier[ti];
		if (!strcmp(k, "policy") && vl && vl < sizeof(x->policy)) {
			memcpy(x->policy, v, vl + 1);
		} else if (!strcmp(k, "wm_min") || !strcmp(k, "wm_low") || !strcmp(k, "wm_high")) {
			char *end;
			unsigned long pct = strtoul(v, &end, 10);
			if (*end || pct > 100)
				continue;
			uint32_t f = (uint32_t)(x->frames * pct / 100);
			if (k[3] == 'm')
				x->wm_min = f;
			else if (k[3] == 'l')
				x->wm_low = f;
			else
				x->wm_high = f;
		}
	}
}

/* "10G" (bytes/s, binary suffixes) or "5us" (seconds): value, or -1. */
static double parse_num(const char *s, size_t len, int is_time)
{
	char buf[64], *end;
	double v;

	if (!len || len >= sizeof(buf))
		return -1;
	memcpy(buf, s, len);
	buf[len] = 0;
	v = strtod(buf, &end);
	if (end == buf || !(v >= 0) || isinf(v))
		return -1;
	if (is_time) {
		static const struct { const char *u; double m; } u[] = {
			{ "", 1 }, { "s", 1 }, { "ms", 1e-3 }, { "us", 1e-6 }, { "ns", 1e-9 } };
		for (size_t i = 0; i < sizeof(u) / sizeof(u[0]); i++)
			if (!strcmp(end, u[i].u))
				return v * u[i].m;
		return -1;
	}
	static const char sfx[] = "KMGT";
	const char *p = *end ? strchr(sfx, *end) : NULL;
	if (*end && !p)
		return -1;
	if (p) {
		v *= (double)(1ull << (10 * (p - sfx + 1)));
		end++;
		if (*end == 'B' || !strcmp(end, "iB"))
			end += *end == 'B' ? 1 : 2;
		if (!strcmp(end, "/s"))
			end += 2;
	}
	return *end ? -1 : v;
}

int kvt_sim_parse_costs(const char *s, struct kvt_sim_tier *t, char *err, size_t errlen)
{
	while (s && *s) {
		size_t len = strcspn(s, ","), klen = strcspn(s, "=");
		if (klen >= len)
			return kvt_errf(err, errlen, -EINVAL, "'%.*s': want key=value", (int)len, s);
		const char *v = s + klen + 1;
		size_t vlen = len - klen - 1;
		int is_time = (klen >= 3 && !memcmp(s + klen - 3, "lat", 3));
		double x = parse_num(v, vlen, is_time);
		if (x < 0)
			return kvt_errf(err, errlen, -EINVAL, "'%.*s': %s", (int)len, s,
					is_time ? "want a time like 80us, 2ms or 0.001"
						: "want bytes per second like 12G or 3500M");
		if (klen == 2 && !memcmp(s, "bw", 2))
			t->up_bw = t->down_bw = x;
		else if (klen == 3 && !memcmp(s, "lat", 3))
			t->up_lat = t->down_lat = x;
		else if (klen == 3 && !memcmp(s, "rbw", 3))
			t->up_bw = x;
		else if (klen == 4 && !memcmp(s, "rlat", 4))
			t->up_lat = x;
		else if (klen == 3 && !memcmp(s, "wbw", 3))
			t->down_bw = x;
		else if (klen == 4 && !memcmp(s, "wlat", 4))
			t->down_lat = x;
		else
			return kvt_errf(err, errlen, -EINVAL, "'%.*s': unknown key (bw, lat, rbw, rlat, "
					"wbw, wlat)", (int)klen, s);
		s += len + (s[len] == ',');
	}
	return 0;
}

/* ---------------------------------------------------------------------
 * The replay
 */

struct sim;

struct stier {
	const struct kvt_policy_ops *pol;
	void	 *pst;
	size_t	  msz;
	uint8_t	 *meta;		/* (nframes, msz) */
	uint32_t *owner;	/* (nframes) page id */
	uint32_t *freel;	/* (nframes) stack of free frames */
	uint32_t  nframes, nfree;
	uint32_t  wm_min, wm_low, wm_high;
	double	  up_cost, down_cost;	/* seconds per page moved up out / down in */
	struct sim *s;		/* unevictable()'s context: */
	int	  ti;
	int	  dup_only;	/* only pages with a copy in the other top tier */
};

struct sim {
	const struct kvt_sim_trace *t;
	unsigned  nt;
	int	  last, backed;
	uint64_t  pb;
	double	  origin_cost;
	struct stier tr[KVT_SIM_MAX_TIERS];
	uint32_t *frame;	/* (npages, nt) frame per tier, KVT_SIM_NONE */
	uint8_t	 *pin;		/* (npages) tail pin */
	uint64_t *last_step;	/* (npages) step of the last counted access */
	uint32_t *nextu;	/* (npages) next use (offline policies), or NULL */
	uint32_t  moving;	/* the page a promotion is bringing up */
	uint32_t  dups;		/* pages with a copy in both tiers 0 and 1 */
	/* Pager traces: the policies see the pager's keys (the page slot,
	 * reused after a free, so a ghost may match a new page as it does
	 * live); slot2id maps a slot to the page now in it, or, when the
	 * slots are too sparse for an array (a slot can be any 32-bit
	 * number: a corrupt trace must not cost gigabytes), slotmap does,
	 * holding every slot of the trace from the start. Else keys are the
	 * ids. */
	int	  slots;
	uint32_t *slot2id;
	struct kmap slotmap;	/* slot -> id + 1, when slot2id is NULL */
	uint64_t  time, step;
	struct kmap tails;	/* (seq, layer) -> tail page id */
	/* moves[src][dst]: pages moved; their time is summed at the end
	 * (count x cost), so every path gives the same figure */
	uint64_t  moves[KVT_SIM_MAX_TIERS][KVT_SIM_MAX_TIERS];
	uint64_t  pf_moves[KVT_SIM_MAX_TIERS][KVT_SIM_MAX_TIERS];	/* of prefetches */
	/* Layer-ahead prefetch (prefetch_depth > 0): (seq, layer, index) ->
	 * page id, the pages brought up by prefetch and not used since, and
	 * whether the move under way is a prefetch. */
	unsigned  depth;
	struct kmap where;
	struct kmap lsize;	/* (seq, layer) -> its pages so far (highest index
				 * made or read, + 1) */
	uint8_t	 *pf;
	int	  in_pf;
	struct kvt_sim_result *r;
};

static inline uint32_t *fr(const struct sim *s, uint32_t id)
{
	return s->frame + (size_t)id * s->nt;
}

static inline void *meta_at(const struct stier *t, uint32_t f)
{
	return t->meta + (size_t)f * t->msz;
}

static inline unsigned copies(const struct sim *s, uint32_t id)
{
	const uint32_t *f = fr(s, id);
	unsigned n = 0;

	for (unsigned ti = 0; ti < s->nt; ti++)
		n += f[ti] != KVT_SIM_NONE;
	return n;
}

/* The tier of the top copy, nt when there is none. */
static inline unsigned top(const struct sim *s, uint32_t id)
{
	const uint32_t *f = fr(s, id);
	unsigned ti = 0;

	while (ti < s->nt && f[ti] == KVT_SIM_NONE)
		ti++;
	return ti;
}

static inline uint64_t pkey_of(const struct sim *s, uint32_t id)
{
	return s->slots ? (uint32_t)s->t->key[id] : id;
}

static inline uint32_t id_of(const struct sim *s, uint64_t key)
{
	if (!s->slots)
		return (uint32_t)key;
	if (s->slot2id)
		return s->slot2id[key];
	return s->slotmap.s[kmap_slot(&s->slotmap, key)].v - 1;
}

static inline struct kvt_ref ref_of(const struct sim *s, uint32_t id)
{
	const struct kvt_sim_trace *t = s->t;
	uint32_t nx = s->nextu ? s->nextu[id] : UINT32_MAX;

	return (struct kvt_ref){
		.key = pkey_of(s, id), .time = s->time, .step = s->step,
		.next = nx == UINT32_MAX ? KVT_NEVER : nx,
		.seq = t->seq ? t->seq[id] : KVT_REF_NONE,
		.layer = t->layer ? t->layer[id] : KVT_REF_NONE,
		.index = t->index ? t->index[id] : KVT_REF_NONE,
	};
}

static inline uint32_t falloc(struct stier *t)
{
	return t->freel[--t->nfree];
}

static void place(struct sim *s, int ti, uint32_t id, uint32_t f)
{
	struct stier *t = &s->tr[ti];
	struct kvt_ref r = ref_of(s, id);

	fr(s, id)[ti] = f;
	t->owner[f] = id;
	if (ti < 2 && s->nt >= 2 && fr(s, id)[!ti] != KVT_SIM_NONE)
		s->dups++;
	if (s->slot2id)
		s->slot2id[(uint32_t)s->t->key[id]] = id;
	else if (s->slots)
		s->slotmap.s[kmap_slot(&s->slotmap, (uint32_t)s->t->key[id])].v = id + 1;
	memset(meta_at(t, f), 0, t->msz);
	t->pol->on_insert(t->pst, &r, meta_at(t, f));
}

/* As the pager's: a demotion counts when the top copy leaves. */
static void unplace(struct sim *s, int ti, uint32_t id, int demote, int drop)
{
	struct stier *t = &s->tr[ti];
	uint32_t f = fr(s, id)[ti];
	unsigned tp = top(s, id);

	t->pol->on_remove(t->pst, pkey_of(s, id), meta_at(t, f));
	if (ti == 0 && s->pf && s->pf[id]) {
		s->pf[id] = 0;
		s->r->prefetch_wasted++;
	}
	t->owner[f] = KVT_SIM_NONE;
	t->freel[t->nfree++] = f;
	fr(s, id)[ti] = KVT_SIM_NONE;
	if (ti < 2 && s->nt >= 2 && fr(s, id)[!ti] != KVT_SIM_NONE)
		s->dups--;
	if (demote && tp == (unsigned)ti) {
		s->r->tier[ti].demotions++;
		s->r->tier[ti].drops += drop;
	}
}

static int unevictable(void *arg, uint64_t key)
{
	const struct stier *t = arg;
	const struct sim *s = t->s;
	uint32_t id = id_of(s, key);
	int only_last;

	/* A pager trace never has two live pages in one slot; a corrupt one
	 * can, and then a key the policy holds may name a page that is not
	 * here: never a victim. */
	if (id >= s->t->npages || fr(s, id)[t->ti] == KVT_SIM_NONE)
		return 1;
	only_last = copies(s, id) == 1 && t->ti == s->last && !s->backed;
	if (id == s->moving)
		return 1;
	/* Below the addressable tiers a copy under another may go even when
	 * the page is pinned (the pager's NVMe rule). */
	if (t->ti >= 2)
		return only_last;
	if (t->dup_only && fr(s, id)[!t->ti] == KVT_SIM_NONE)
		return 1;
	return s->pin[id] || only_last;
}

static int demote_write(struct sim *s, int ti, const uint32_t *wl, uint32_t n);

static void drop_or_list(struct sim *s, uint32_t id, int ti, uint32_t *wl, uint32_t *nw)
{
	if (copies(s, id) > 1)
		unplace(s, ti, id, 1, 1);
	else
		wl[(*nw)++] = id;
}

/* Make need frames of tier ti free: 0, or -ENOSPC; for a prefetch
 * (pf), -EAGAIN rather than evict a prefetched page not used yet. */
static int reclaim(struct sim *s, int ti, uint32_t need, int pf)
{
	struct stier *t = &s->tr[ti];
	uint64_t keys[MAX_VICTIMS];
	uint32_t wl[MAX_VICTIMS];
	unsigned idle = 0;

	if (need > t->nframes)
		need = t->nframes;
	while (t->nfree < need) {
		uint32_t want = need - t->nfree, before = t->nfree;
		if (want > MAX_VICTIMS)
			want = MAX_VICTIMS;
		size_t nv = 0;
		if (ti < 2 && s->nt >= 2 && s->dups) {
			/* As the pager copying up: a page in both of the top
			 * tiers gives up one copy before any page goes. */
			t->dup_only = 1;
			nv = t->pol->victims(t->pst, keys, want, unevictable, t);
			t->dup_only = 0;
		}
		if (!nv)
			nv = t->pol->victims(t->pst, keys, want, unevictable, t);
		if (!nv)
			return -ENOSPC;
		uint32_t nw = 0;
		for (size_t i = 0; i < nv; i++) {
			uint32_t v = id_of(s, keys[i]), j;
			/* Two keys that name one page (two live pages in one
			 * slot of a corrupt pager trace): the page goes once. */
			if (v >= s->t->npages || fr(s, v)[ti] == KVT_SIM_NONE)
				continue;
			for (j = 0; j < nw && wl[j] != v; j++)
				;
			if (j < nw)
				continue;
			if (pf && s->pf[v])
				return -EAGAIN;
			drop_or_list(s, v, ti, wl, &nw);
		}
		if (nw) {
			int r = demote_write(s, ti, wl, nw);
			if (r < 0)
				return r;
		}
		/* The pager would loop as long; a replay stops. */
		if (t->nfree == before && ++idle > 4)
			return -ENOSPC;
	}
	return 0;
}

/* Write the only copy of n pages of tier ti one tier down (with a
 * backing store under the last tier, drop them there). Returns the
 * number moved or -ENOSPC. */
static int demote_write(struct sim *s, int ti, const uint32_t *wl, uint32_t n)
{
	struct stier *dst = &s->tr[ti + 1];
	uint32_t mv[MAX_VICTIMS], mf[MAX_VICTIMS], m = 0;
	int r;

	if (ti + 1 > s->last) {
		if (!s->backed)
			return -ENOSPC;
		for (uint32_t i = 0; i < n; i++)	/* the store has them: drops */
			unplace(s, ti, wl[i], 1, 1);
		return (int)n;
	}
	r = reclaim(s, ti + 1, n, 0);
	if (!dst->nfree)
		return r ? r : -ENOSPC;
	for (uint32_t i = 0; i < n && dst->nfree; i++) {
		uint32_t id = wl[i];
		const uint32_t *f = fr(s, id);
		if (id == s->moving || s->pin[id] || f[ti] == KVT_SIM_NONE ||
		    f[ti + 1] != KVT_SIM_NONE)
			continue;
		if (copies(s, id) > 1) {
			unplace(s, ti, id, 1, 1);
			continue;
		}
		mf[m] = falloc(dst);
		mv[m++] = id;
	}
	for (uint32_t i = 0; i < m; i++) {
		struct kvt_sim_tier_result *src = &s->r->tier[ti], *d = &s->r->tier[ti + 1];
		place(s, ti + 1, mv[i], mf[i]);
		unplace(s, ti, mv[i], 1, 0);
		src->bytes_out += s->pb;
		src->down_bytes += s->pb;
		d->bytes_in += s->pb;
		(s->in_pf ? s->pf_moves : s->moves)[ti][ti + 1]++;
	}
	return m ? (int)m : (r ? r : 0);
}

/* A page used: on_access once per page per step, and the clock. */
static inline void touch(struct sim *s, uint32_t id)
{
	if (s->last_step[id] != s->step) {
		struct stier *t = &s->tr[0];
		s->last_step[id] = s->step;
		s->time++;
		struct kvt_ref r = ref_of(s, id);
		t->pol->on_access(t->pst, &r, meta_at(t, fr(s, id)[0]));
	}
}

/* Bring page id up to tier 0: a demand miss, or a prefetch (pf). 0, or
 * -ENOSPC (-EAGAIN: a prefetch that would evict a prefetched page). */
static int promote(struct sim *s, uint32_t id, int pf)
{
	struct stier *t0 = &s->tr[0];
	struct kvt_sim_result *r = s->r;
	uint64_t (*mv)[KVT_SIM_MAX_TIERS] = pf ? s->pf_moves : s->moves;
	unsigned tp;
	int via, rf, rh = 0;

	s->in_pf = pf;
	rf = reclaim(s, 0, 1, pf);
	s->moving = id;
	tp = top(s, id);	/* the reclaim may have pushed it down */
	via = tp != s->nt && tp > STAGE;
	if (via)
		rh = reclaim(s, STAGE, 1, pf);
	s->moving = KVT_SIM_NONE;
	s->in_pf = 0;
	/* As the pager: a reclaim that gave up (-EAGAIN) after freeing a
	 * frame still lets the move go. */
	if (!t0->nfree || (via && !s->tr[STAGE].nfree)) {
		if (pf)
			r->prefetch_dropped++;
		else
			r->refused++;
		return rf == -EAGAIN || rh == -EAGAIN ? -EAGAIN : -ENOSPC;
	}
	uint32_t f0 = falloc(t0), src = tp;
	/* As the pager's land(): a page brought up on demand is used in this
	 * step by its arrival (on_insert, with the clock already moved on), so
	 * the touch() that follows does not count it again. A prefetched page
	 * is used when it is first read. */
	if (!pf && s->last_step[id] != s->step) {
		s->last_step[id] = s->step;
		s->time++;
	}
	if (via) {
		struct stier *h = &s->tr[STAGE];
		place(s, STAGE, id, falloc(h));
		r->tier[tp].bytes_out += s->pb;
		r->tier[STAGE].bytes_in += s->pb;
		r->tier[STAGE].promotions++;
		for (unsigned b = STAGE; b < tp; b++)
			r->tier[b].up_bytes += s->pb;
		mv[tp][STAGE]++;
		src = STAGE;
	}
	if (src == s->nt) {
		r->origin_reads++;
		r->tier[0].bytes_in += s->pb;
	} else {
		r->tier[src].bytes_out += s->pb;
		r->tier[0].bytes_in += s->pb;
		r->tier[0].promotions++;
		for (unsigned b = 0; b < src; b++)
			r->tier[b].up_bytes += s->pb;
		mv[src][0]++;
	}
	place(s, 0, id, f0);
	if (pf)
		s->pf[id] = 1;
	return 0;
}

static uint64_t where_key(uint32_t seq, uint32_t layer, uint32_t index)
{
	return (uint64_t)seq * 0x9e3779b97f4a7c15ull ^ (uint64_t)layer * 0xc2b2ae3d27d4eb4full ^
	       (uint64_t)index * 0x165667b19e3779f9ull ^ ((uint64_t)index << 32 | layer);
}

/* Page id was made or read: its layer has at least index + 1 pages, as
 * the pager's layer table would (the replay sees a layer grow only
 * through its records). */
static int layer_grew(struct sim *s, uint32_t id)
{
	const struct kvt_sim_trace *t = s->t;
	uint64_t k = (uint64_t)t->seq[id] << 32 | t->layer[id];
	size_t j = kmap_slot(&s->lsize, k);

	if (t->index[id] == KVT_REF_NONE)
		return 0;
	if (s->lsize.s[j].v) {
		if (s->lsize.s[j].v < t->index[id] + 1)
			s->lsize.s[j].v = t->index[id] + 1;
		return 0;
	}
	s->lsize.s[j].k = k;
	s->lsize.s[j].v = t->index[id] + 1;
	if (++s->lsize.n * 2 > s->lsize.mask)
		return kmap_grow(&s->lsize);
	return 0;
}

/* The page at (seq, layer, index) now: it becomes id. */
static int where_set(struct sim *s, uint32_t id)
{
	const struct kvt_sim_trace *t = s->t;
	uint64_t k = where_key(t->seq[id], t->layer[id], t->index[id]);
	size_t j = kmap_slot(&s->where, k);

	if (!s->where.s[j].v) {
		s->where.s[j].k = k;
		s->where.s[j].v = id + 1;
		if (++s->where.n * 2 > s->where.mask)
			return kmap_grow(&s->where);
		return 0;
	}
	s->where.s[j].v = id + 1;
	return 0;
}

/* The pager's layer-ahead prefetch after an acquire of page id: the same
 * page index of the next `depth` layers of its sequence (past the last,
 * when a kvtier header gives the count, the first ones), each brought up
 * unless it is in tier 0 already (or in no tier: the pager has nothing
 * to read it from). As in the pager, no more layers than tier 0 holds.
 * Made at once here; the pager's migration thread does it when no demand
 * is waiting. */
static int prefetch_after(struct sim *s, uint32_t id)
{
	const struct kvt_sim_trace *t = s->t;
	uint32_t seq = t->seq[id], layer = t->layer[id], index = t->index[id];

	if (seq == KVT_REF_NONE || layer == KVT_REF_NONE || index == KVT_REF_NONE)
		return 0;
	uint32_t nl = t->has_hdr ? t->hdr.n_layers : 0;
	if (layer_grew(s, id))
		return -ENOMEM;
	uint64_t lp = s->lsize.s[kmap_slot(&s->lsize, (uint64_t)seq << 32 | layer)].v;
	unsigned depth = s->depth;
	uint64_t fits = lp ? s->tr[0].nframes / lp : depth;

	if (depth > fits)
		depth = (unsigned)fits;
	for (unsigned d = 1; d <= depth && (!nl || d < nl); d++) {
		uint32_t l = nl ? (layer + d) % nl : layer + d;
		size_t j = kmap_slot(&s->where, where_key(seq, l, index));
		uint32_t y = s->where.s[j].v ? s->where.s[j].v - 1 : KVT_SIM_NONE;
		if (y == KVT_SIM_NONE || t->seq[y] != seq || t->layer[y] != l ||
		    t->index[y] != index)
			continue;
		unsigned tp = top(s, y);
		if (tp == 0 || tp == s->nt)
			continue;
		s->r->prefetch_issued++;
		promote(s, y, 1);
	}
	return 0;
}

static void count_lookup(struct sim *s, unsigned tp)
{
	for (unsigned ti = 0; ti < s->nt; ti++) {
		if (tp == ti) {
			s->r->tier[ti].hits++;
			return;
		}
		s->r->tier[ti].misses++;
	}
}

static void access_one(struct sim *s, uint32_t id, uint32_t next)
{
	unsigned tp = top(s, id);

	if (s->nextu)
		s->nextu[id] = next;
	count_lookup(s, tp);
	if (tp == 0 && s->pf && s->pf[id]) {
		s->pf[id] = 0;
		s->r->prefetch_hit++;
	}
	/* After a demand promotion touch() finds the page counted already
	 * and calls nothing, as the pager's pin after land(). */
	if (tp == 0 || !promote(s, id, 0))
		touch(s, id);
}

static uint64_t tail_key(const struct sim *s, uint32_t id)
{
	return (uint64_t)s->t->seq[id] << 32 | s->t->layer[id];
}

static void unpin_tail(struct sim *s, uint32_t id)
{
	s->pin[id] = 0;
	if (s->t->seq && s->tails.s) {
		size_t j = kmap_slot(&s->tails, tail_key(s, id));
		if (s->tails.s[j].v == id + 1)
			s->tails.s[j].v = (uint32_t)-1;	/* tombstone: no tail now */
	}
}

static int new_page(struct sim *s, uint32_t id, int sealed)
{
	struct stier *t0 = &s->tr[0];

	if (s->t->seq && s->t->seq[id] != KVT_REF_NONE) {
		size_t j = kmap_slot(&s->tails, tail_key(s, id));
		uint32_t prev = s->tails.s[j].v;
		if (prev && prev != (uint32_t)-1 && prev - 1 != id)
			s->pin[prev - 1] = 0;	/* a new tail: the old one was sealed */
		if (!s->tails.s[j].v) {
			s->tails.s[j].k = tail_key(s, id);
			if (++s->tails.n * 2 > s->tails.mask) {
				s->tails.s[j].v = id + 1;
				if (kmap_grow(&s->tails))
					return -ENOMEM;
				j = kmap_slot(&s->tails, tail_key(s, id));
			}
		}
		s->tails.s[j].v = id + 1;
	}
	if (s->depth && s->t->seq && s->t->seq[id] != KVT_REF_NONE &&
	    (where_set(s, id) || layer_grew(s, id)))
		return -ENOMEM;
	if (copies(s, id))
		return 0;
	if (t0->nfree <= t0->wm_min) {
		int r = reclaim(s, 0, t0->wm_min + 1, 0);
		if (r < 0 && !t0->nfree) {
			s->r->refused++;
			return 0;
		}
	}
	place(s, 0, id, falloc(t0));
	s->last_step[id] = UINT64_MAX;
	s->pin[id] = !sealed;
	return 0;
}

static void free_page(struct sim *s, uint32_t id)
{
	for (unsigned ti = 0; ti < s->nt; ti++)
		if (fr(s, id)[ti] != KVT_SIM_NONE)
			unplace(s, (int)ti, id, 0, 0);
	if (s->pin[id])
		unpin_tail(s, id);
}

static void score_one(struct sim *s, uint32_t id, float score)
{
	s->r->mass_total += score;
	for (unsigned ti = 0; ti < s->nt; ti++) {
		struct stier *t = &s->tr[ti];
		uint32_t f = fr(s, id)[ti];
		if (f == KVT_SIM_NONE)
			continue;
		s->r->tier[ti].mass += score;
		if (t->pol->on_score) {
			struct kvt_ref r = ref_of(s, id);
			r.score = score;
			t->pol->on_score(t->pst, &r, meta_at(t, f));
		}
	}
}

/* The migration thread's background work, made synchronous. */
static void background(struct sim *s)
{
	for (int ti = 0; ti < s->last; ti++) {
		struct stier *t = &s->tr[ti];
		if (t->wm_low && t->nfree < t->wm_low)
			(void)reclaim(s, ti, t->wm_high, 0);
	}
}

/* Every record of the trace, with the general rules. */
static int run_general(struct sim *s, void (*progress)(void *, double), void *arg)
{
	const struct kvt_sim_trace *t = s->t;
	uint64_t prev = UINT64_MAX;
	int bg = 0, r;

	for (unsigned ti = 0; ti < s->nt; ti++)
		bg |= s->tr[ti].wm_low != 0;
	for (size_t i = 0; i < t->n; i++) {
		uint32_t id = t->id[i];
		uint8_t ev = t->ev ? t->ev[i] : KVT_EV_ACCESS;

		if (progress && !(i & PROGRESS_MASK))
			progress(arg, (double)i / (double)t->n);
		s->step = t->step ? t->step[i] : i;
		if (s->step != prev) {
			s->r->steps++;
			prev = s->step;
		}
		if (t->flags && (t->flags[i] & KVT_TF_SEALED) && id != KVT_SIM_NONE &&
		    s->pin[id] && ev != KVT_EV_NEW)
			unpin_tail(s, id);
		switch (ev) {
		case KVT_EV_ACCESS:
			s->r->refs++;
			access_one(s, id, t->next ? t->next[i] : UINT32_MAX);
			if (s->depth && (r = prefetch_after(s, id)))
				return r;
			break;
		case KVT_EV_NEW:
			if (s->nextu)
				s->nextu[id] = t->next ? t->next[i] : UINT32_MAX;
			r = new_page(s, id, t->flags && (t->flags[i] & KVT_TF_SEALED));
			if (r)
				return r;
			break;
		case KVT_EV_FREE:
			free_page(s, id);
			break;
		case KVT_EV_SCORE:
			score_one(s, id, t->score ? t->score[i] : 0);
			break;
		case KVT_EV_SEAL:	/* the pager's carry SEALED: done above */
			if (s->pin[id])
				unpin_tail(s, id);
			break;
		default:
			break;
		}
		if (bg)
			background(s);
	}
	return 0;
}

/*
 * One backed tier, accesses only, one step per record: the common case of
 * miss-ratio curves and imported traces, with the same calls in the same
 * order as run_general() makes for it (a test holds them equal), minus
 * the bookkeeping that cannot matter there.
 */
static void run_fast(struct sim *s, void (*progress)(void *, double), void *arg)
{
	const struct kvt_sim_trace *t = s->t;
	struct stier *T = &s->tr[0];
	const struct kvt_policy_ops *ops = T->pol;
	void *st = T->pst;
	uint8_t *meta = T->meta;
	size_t msz = T->msz, n = t->n;
	uint32_t *frame = s->frame, *owner = T->owner;
	const uint32_t *ids = t->id, *next = s->nextu ? t->next : NULL;
	uint64_t hits = 0, time = 0, evicted = 0;
	struct kvt_ref ref = { .next = KVT_NEVER, .seq = KVT_REF_NONE,
			       .layer = KVT_REF_NONE, .index = KVT_REF_NONE };

	for (size_t i = 0; i < n; i++) {
		uint32_t x = ids[i], f;

		if (progress && !(i & PROGRESS_MASK))
			progress(arg, (double)i / (double)n);
		/* Two stages: the frame of the page 16 ahead, then the
		 * metadata of the page 8 ahead (its frame is in cache by now;
		 * it may still change before we get there: only a hint). */
		if (i + 16 < n) {
			__builtin_prefetch(&frame[ids[i + 16]]);
			uint32_t f8 = frame[ids[i + 8]];
			if (f8 != KVT_SIM_NONE)
				__builtin_prefetch(meta + (size_t)f8 * msz, 1);
		}
		f = frame[x];
		ref.key = x;
		ref.step = i;
		if (next)
			ref.next = next[i] == UINT32_MAX ? KVT_NEVER : next[i];
		if (f != KVT_SIM_NONE) {
			hits++;
			ref.time = ++time;
			ops->on_access(st, &ref, meta + (size_t)f * msz);
			continue;
		}
		if (T->nfree) {
			f = T->freel[--T->nfree];
		} else {
			uint64_t v;
			if (ops->victims(st, &v, 1, NULL, NULL) != 1) {
				s->r->refused++;
				continue;
			}
			f = frame[v];
			ops->on_remove(st, v, meta + (size_t)f * msz);
			frame[v] = KVT_SIM_NONE;
			evicted++;
		}
		frame[x] = f;
		owner[f] = x;
		memset(meta + (size_t)f * msz, 0, msz);
		/* A demand miss: the arrival is the use (promote()). */
		ref.time = ++time;
		ops->on_insert(st, &ref, meta + (size_t)f * msz);
	}
	s->time = time;
	s->r->refs = n;
	s->r->steps = n;
	s->r->tier[0].hits = hits;
	s->r->tier[0].misses = n - hits;
	s->r->origin_reads = n - hits - s->r->refused;
	s->r->tier[0].bytes_in = s->r->origin_reads * s->pb;
	s->r->tier[0].demotions = s->r->tier[0].drops = evicted;
}

static double cost(double bw, double lat, uint64_t bytes)
{
	return lat + (bw > 0 ? (double)bytes / bw : 0);
}

static void sim_free(struct sim *s)
{
	for (unsigned ti = 0; ti < KVT_SIM_MAX_TIERS; ti++) {
		struct stier *t = &s->tr[ti];
		if (t->pst)
			t->pol->destroy(t->pst);
		free(t->meta);
		free(t->owner);
		free(t->freel);
	}
	free(s->frame);
	free(s->pin);
	free(s->last_step);
	free(s->nextu);
	free(s->slot2id);
	kmap_free(&s->slotmap);
	free(s->pf);
	kmap_free(&s->where);
	kmap_free(&s->lsize);
	kmap_free(&s->tails);
}

int kvt_sim_run(const struct kvt_sim_config *c, const struct kvt_sim_trace *t,
		struct kvt_sim_result *res, char *err, size_t errlen)
{
	struct sim s = { 0 };
	int offline = 0, r = 0;

	memset(res, 0, sizeof(*res));
	if (!c || !t || !c->ntiers || c->ntiers > KVT_SIM_MAX_TIERS)
		return kvt_errf(err, errlen, -EINVAL, "%u tiers: want 1..%d", c ? c->ntiers : 0,
				KVT_SIM_MAX_TIERS);
	s.t = t;
	s.nt = c->ntiers;
	s.last = (int)c->ntiers - 1;
	s.backed = c->backed < 0 ? !t->nnew : !!c->backed;
	s.pb = c->page_bytes ? c->page_bytes : 1;
	s.r = res;
	s.moving = KVT_SIM_NONE;
	s.origin_cost = cost(c->origin_bw, c->origin_lat, s.pb);
	for (unsigned ti = 0; ti < s.nt; ti++) {
		const struct kvt_sim_tier *tc = &c->tier[ti];
		struct stier *x = &s.tr[ti];
		if (!tc->frames || tc->frames >= UINT32_MAX) {
			r = kvt_errf(err, errlen, -EINVAL, "tier %u: %llu frames: want 1..%u", ti,
				     (unsigned long long)tc->frames, UINT32_MAX - 1);
			goto out;
		}
		x->pol = tc->ops ? tc->ops : kvt_policy_find(tc->policy);
		if (!x->pol) {
			r = kvt_errf(err, errlen, -EINVAL, "tier %u: policy '%s': no such policy", ti,
				     tc->policy);
			goto out;
		}
		offline |= !!(x->pol->flags & KVT_POLICY_OFFLINE);
		x->nframes = x->nfree = (uint32_t)tc->frames;
		x->msz = x->pol->meta_size;
		x->meta = aligned_alloc(64, ((size_t)x->nframes * x->msz + 64) & ~(size_t)63);
		x->owner = malloc((size_t)x->nframes * sizeof(*x->owner));
		x->freel = malloc((size_t)x->nframes * sizeof(*x->freel));
		if (!x->meta || !x->owner || !x->freel) {
			r = kvt_errf(err, errlen, -ENOMEM, "tier %u: out of memory", ti);
			goto out;
		}
		/* Frames are handed out from 0 up (policies never see them). */
		for (uint32_t f = 0; f < x->nframes; f++) {
			x->freel[f] = x->nframes - 1 - f;
			x->owner[f] = KVT_SIM_NONE;
		}
		char why[256] = "";
		r = x->pol->init(&x->pst, kvt_policy_params(tc->policy), x->nframes,
				 why, sizeof(why));
		if (r) {
			x->pst = NULL;
			r = kvt_errf(err, errlen, r == -ENOMEM ? r : -EINVAL, "tier %u: policy '%s': %s",
				     ti, tc->policy, r != -ENOMEM && why[0] ? why : strerror(-r));
			goto out;
		}
		x->wm_min = tc->wm_min;
		x->wm_low = tc->wm_low;
		x->wm_high = tc->wm_high < tc->wm_low ? tc->wm_low : tc->wm_high;
		x->up_cost = cost(tc->up_bw, tc->up_lat, s.pb);
		x->down_cost = cost(tc->down_bw, tc->down_lat, s.pb);
		x->s = &s;
		x->ti = (int)ti;
	}
	if (offline && !t->next) {
		r = kvt_errf(err, errlen, -EINVAL, "an offline policy needs the next-use times "
			     "(kvt_sim_trace_next)");
		goto out;
	}
	size_t np = (size_t)t->npages + 1;
	s.frame = malloc(np * s.nt * sizeof(*s.frame));
	s.pin = calloc(np, 1);
	s.last_step = malloc(np * sizeof(*s.last_step));
	s.nextu = offline ? malloc(np * sizeof(*s.nextu)) : NULL;
	if (!s.frame || !s.pin || !s.last_step || (offline && !s.nextu) ||
	    kmap_init(&s.tails, 64)) {
		r = kvt_errf(err, errlen, -ENOMEM, "out of memory for %u pages", t->npages);
		goto out;
	}
	if (t->has_hdr && t->hdr.source == KVT_SRC_PAGER && t->npages) {
		uint64_t ns = 0;	/* slot 0xffffffff makes 2^32 */
		for (uint32_t p = 0; p < t->npages; p++)
			if ((uint32_t)t->key[p] >= ns)
				ns = (uint64_t)(uint32_t)t->key[p] + 1;
		s.slots = 1;
		if (ns <= 2 * (uint64_t)t->npages + 65536)
			s.slot2id = calloc((size_t)ns + 1, sizeof(*s.slot2id));
		else if (!kmap_init(&s.slotmap, t->npages))
			for (uint32_t p = 0; p < t->npages; p++) {
				size_t j = kmap_slot(&s.slotmap, (uint32_t)t->key[p]);
				if (!s.slotmap.s[j].v) {
					s.slotmap.s[j].k = (uint32_t)t->key[p];
					s.slotmap.s[j].v = p + 1;
				}
			}
		if (!s.slot2id && !s.slotmap.s) {
			r = kvt_errf(err, errlen, -ENOMEM, "out of memory for %llu slots",
				     (unsigned long long)ns);
			goto out;
		}
	}
	if (c->prefetch_depth && t->seq && t->layer && t->index) {
		s.depth = c->prefetch_depth;
		s.pf = calloc(np, 1);
		if (!s.pf || kmap_init(&s.where, t->npages) || kmap_init(&s.lsize, 1024)) {
			r = kvt_errf(err, errlen, -ENOMEM, "out of memory for %u pages", t->npages);
			goto out;
		}
		/* Pages made before the trace began (or without NEW records):
		 * where they first appear. A NEW moves the entry on. */
		for (uint32_t p = 0; p < t->npages; p++)
			if (t->seq[p] != KVT_REF_NONE && t->layer[p] != KVT_REF_NONE &&
			    t->index[p] != KVT_REF_NONE) {
				size_t j = kmap_slot(&s.where, where_key(t->seq[p], t->layer[p],
									 t->index[p]));
				if (!s.where.s[j].v && where_set(&s, p)) {
					r = kvt_errf(err, errlen, -ENOMEM, "out of memory");
					goto out;
				}
			}
	}
	memset(s.frame, 0xff, np * s.nt * sizeof(*s.frame));
	memset(s.last_step, 0xff, np * sizeof(*s.last_step));
	if (s.nextu)
		memset(s.nextu, 0xff, np * sizeof(*s.nextu));

	if (s.nt == 1 && s.backed && !t->ev && !t->step && !t->flags &&
	    !s.tr[0].wm_low && !s.depth) {
		run_fast(&s, c->progress, c->progress_arg);
	} else {
		r = run_general(&s, c->progress, c->progress_arg);
		if (r)
			r = kvt_errf(err, errlen, r, "replay: %s", strerror(-r));
	}
	if (c->progress)
		c->progress(c->progress_arg, 1);
	for (unsigned ti = 0; ti < s.nt; ti++) {
		struct kvt_sim_tier_result *x = &res->tier[ti];
		x->used = s.tr[ti].nframes - s.tr[ti].nfree;
		double demand = ti ? 0 : (double)res->origin_reads * s.origin_cost, pf = 0;
		for (unsigned src = 0; src < s.nt; src++) {
			double cst = src < ti ? s.tr[ti].down_cost : s.tr[src].up_cost;
			demand += (double)s.moves[src][ti] * cst;
			pf += (double)s.pf_moves[src][ti] * cst;
		}
		x->move_s = demand + pf;
		res->stall_s += demand;
		res->prefetch_s += pf;
	}
out:
	sim_free(&s);
	return r;
}

/* ---------------------------------------------------------------------
 * Miss-ratio curves
 */

struct mrc {
	const struct kvt_sim_trace *t;
	const char *const *pol;
	const uint64_t *frames;
	unsigned np, ns;
	struct kvt_sim_point *out;
	unsigned next_task;		/* atomic */
	uint64_t done;			/* atomic: records replayed */
	int err;			/* first error, atomic */
	char msg[256];
	pthread_mutex_t lock;
};

/* A worker's progress: records done in its current replay. */
struct wprog {
	struct mrc *m;
	uint64_t done;
};

static void mrc_progress(void *arg, double frac)
{
	struct wprog *w = arg;
	uint64_t now = (uint64_t)(frac * (double)w->m->t->n);

	if (now > w->done) {
		__atomic_fetch_add(&w->m->done, now - w->done, __ATOMIC_RELAXED);
		w->done = now;
	}
}

static void *mrc_worker(void *arg)
{
	struct mrc *m = arg;

	for (;;) {
		unsigned k = __atomic_fetch_add(&m->next_task, 1, __ATOMIC_RELAXED);
		if (k >= m->np * m->ns || __atomic_load_n(&m->err, __ATOMIC_RELAXED))
			break;
		struct wprog w = { m, 0 };
		struct kvt_sim_config c = { .ntiers = 1, .backed = 1,
					    .progress = mrc_progress, .progress_arg = &w };
		struct kvt_sim_point *p = &m->out[k];
		struct kvt_sim_result res;
		char e[256];
		double t0 = now_s();

		snprintf(c.tier[0].policy, sizeof(c.tier[0].policy), "%s", m->pol[k / m->ns]);
		c.tier[0].frames = m->frames[k % m->ns];
		int r = kvt_sim_run(&c, m->t, &res, e, sizeof(e));
		if (r) {
			pthread_mutex_lock(&m->lock);
			if (!m->err) {
				snprintf(m->msg, sizeof(m->msg), "%s", e);
				__atomic_store_n(&m->err, r, __ATOMIC_RELAXED);
			}
			pthread_mutex_unlock(&m->lock);
			break;
		}
		memset(p, 0, sizeof(*p));
		snprintf(p->policy, sizeof(p->policy), "%s", c.tier[0].policy);
		p->frames = c.tier[0].frames;
		p->refs = res.refs;
		p->hits = res.tier[0].hits;
		p->misses = res.tier[0].misses;
		p->miss_ratio = res.refs ? (double)p->misses / (double)res.refs : 0;
		p->seconds = now_s() - t0;
		mrc_progress(&w, 1.0);
	}
	return NULL;
}

int kvt_sim_mrc(const struct kvt_sim_trace *t, const char *const *policies, unsigned np,
		const uint64_t *frames, unsigned nsizes, unsigned threads,
		struct kvt_sim_point *out, void (*progress)(void *arg, double frac),
		void *arg, char *err, size_t errlen)
{
	struct mrc m = { .t = t, .pol = policies, .frames = frames, .np = np, .ns = nsizes,
			 .out = out };
	pthread_t th[256];
	unsigned nth = 0;
	uint64_t total;

	if (!np || !nsizes)
		return kvt_errf(err, errlen, -EINVAL, "no policies or no sizes");
	for (unsigned p = 0; p < np; p++) {
		const struct kvt_policy_ops *ops = kvt_policy_find(policies[p]);
		void *st;
		if (!ops)
			return kvt_errf(err, errlen, -EINVAL, "policy '%s': no such policy", policies[p]);
		if ((ops->flags & KVT_POLICY_OFFLINE) && !t->next)
			return kvt_errf(err, errlen, -EINVAL, "policy '%s' is offline: the trace needs "
					"its next-use times (kvt_sim_trace_next)", policies[p]);
		char why[256] = "";
		int r = ops->init(&st, kvt_policy_params(policies[p]), 64, why, sizeof(why));
		if (r)
			return kvt_errf(err, errlen, r == -ENOMEM ? r : -EINVAL, "policy '%s': %s",
					policies[p], r != -ENOMEM && why[0] ? why : strerror(-r));
		ops->destroy(st);
	}
	for (unsigned s = 0; s < nsizes; s++)
		if (!frames[s] || frames[s] >= UINT32_MAX)
			return kvt_errf(err, errlen, -EINVAL, "size %llu frames: want 1..%u",
					(unsigned long long)frames[s], UINT32_MAX - 1);
	if (threads < 1)
		threads = 1;
	if (threads > np * nsizes)
		threads = np * nsizes;
	if (threads > 256)
		threads = 256;
	pthread_mutex_init(&m.lock, NULL);
	for (; nth < threads; nth++)
		if (pthread_create(&th[nth], NULL, mrc_worker, &m))
			break;
	if (!nth)
		mrc_worker(&m);
	total = (uint64_t)np * nsizes * (t->n ? t->n : 1);
	while (progress && nth) {
		uint64_t d = __atomic_load_n(&m.done, __ATOMIC_RELAXED);
		progress(arg, (double)d / (double)total);
		if (d >= total || __atomic_load_n(&m.err, __ATOMIC_RELAXED) ||
		    __atomic_load_n(&m.next_task, __ATOMIC_RELAXED) >= np * nsizes + nth)
			break;
		struct timespec ts = { 0, 200000000 };
		nanosleep(&ts, NULL);
	}
	for (unsigned i = 0; i < nth; i++)
		pthread_join(th[i], NULL);
	if (progress)
		progress(arg, 1);
	pthread_mutex_destroy(&m.lock);
	if (m.err)
		return kvt_errf(err, errlen, m.err, "%s", m.msg);
	return 0;
}

void kvt_sim_mrc_csv(FILE *f, const struct kvt_sim_point *pt, size_t n, uint32_t npages)
{
	fprintf(f, "policy,frames,size_pct,refs,hits,misses,miss_ratio\n");
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%s,%llu,%.4f,%llu,%llu,%llu,%.6f\n", pt[i].policy,
			(unsigned long long)pt[i].frames,
			npages ? 100.0 * (double)pt[i].frames / npages : 0,
			(unsigned long long)pt[i].refs, (unsigned long long)pt[i].hits,
			(unsigned long long)pt[i].misses, pt[i].miss_ratio);
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

void kvt_sim_mrc_json(FILE *f, const struct kvt_sim_point *pt, size_t n, uint32_t npages,
		      const char *trace)
{
	fprintf(f, "{\"trace\": ");
	json_str(f, trace ? trace : "");
	fprintf(f, ", \"pages\": %u, \"points\": [", npages);
	for (size_t i = 0; i < n; i++) {
		fprintf(f, "%s\n  {\"policy\": ", i ? "," : "");
		json_str(f, pt[i].policy);
		fprintf(f, ", \"frames\": %llu, \"size_pct\": %.4f, \"refs\": %llu, \"hits\": %llu, "
			"\"misses\": %llu, \"miss_ratio\": %.6f}",
			(unsigned long long)pt[i].frames,
			npages ? 100.0 * (double)pt[i].frames / npages : 0,
			(unsigned long long)pt[i].refs, (unsigned long long)pt[i].hits,
			(unsigned long long)pt[i].misses, pt[i].miss_ratio);
	}
	fprintf(f, "\n]}\n");
}

/* ---------------------------------------------------------------------
 * Synthetic traces
 */

int64_t kvt_sim_gen_scan(unsigned layers, unsigned pages, unsigned append_every,
			 unsigned steps, uint64_t **keys, uint64_t **step)
{
	uint64_t n = 0, k = 0;

	*keys = NULL;
	if (step)
		*step = NULL;
	if (!layers || !pages || !steps)
		return -EINVAL;
	for (unsigned s = 0; s < steps; s++)
		n += (uint64_t)layers * (pages + (append_every ? s / append_every : 0));
	if (n >= UINT32_MAX)
		return -E2BIG;
	*keys = malloc(n * sizeof(**keys));
	if (step)
		*step = malloc(n * sizeof(**step));
	if (!*keys || (step && !*step)) {
		free(*keys);
		*keys = NULL;
		if (step) {
			free(*step);
			*step = NULL;
		}
		return -ENOMEM;
	}
	for (unsigned s = 0; s < steps; s++) {
		uint64_t np = pages + (append_every ? s / append_every : 0);
		for (uint64_t l = 0; l < layers; l++)
			for (uint64_t i = 0; i < np; i++) {
				if (step)
					(*step)[k] = s;
				(*keys)[k++] = l << 32 | i;
			}
	}
	return (int64_t)n;
}

static inline uint64_t xs64(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545f4914f6cdd1dull;
}

int kvt_sim_gen_zipf(uint64_t n, uint64_t nkeys, double alpha, uint64_t seed, uint64_t *keys)
{
	double *prob, sum = 0;
	uint32_t *alias, *small, *large, ns = 0, nl = 0;
	uint64_t rng = seed ^ 0x9e3779b97f4a7c15ull;

	if (!nkeys || nkeys >= UINT32_MAX || !(alpha >= 0))
		return -EINVAL;
	if (!rng)
		rng = 1;
	prob = malloc(nkeys * sizeof(*prob));
	alias = malloc(nkeys * sizeof(*alias));
	small = malloc(nkeys * sizeof(*small));
	large = malloc(nkeys * sizeof(*large));
	if (!prob || !alias || !small || !large) {
		free(prob);
		free(alias);
		free(small);
		free(large);
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < nkeys; i++)
		sum += prob[i] = 1.0 / pow((double)(i + 1), alpha);
	for (uint64_t i = 0; i < nkeys; i++) {
		prob[i] = prob[i] * (double)nkeys / sum;
		alias[i] = (uint32_t)i;
		if (prob[i] < 1.0)
			small[ns++] = (uint32_t)i;
		else
			large[nl++] = (uint32_t)i;
	}
	/* Vose: pair each small column with a large one. */
	while (ns && nl) {
		uint32_t l = small[--ns], g = large[nl - 1];
		alias[l] = g;
		prob[g] -= 1.0 - prob[l];
		if (prob[g] < 1.0) {
			nl--;
			small[ns++] = g;
		}
	}
	while (nl)
		prob[large[--nl]] = 1.0;
	while (ns)
		prob[small[--ns]] = 1.0;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t u = xs64(&rng);
		uint32_t col = (uint32_t)(((u >> 32) * nkeys) >> 32);
		double coin = (double)(u & 0xffffffffu) * (1.0 / 4294967296.0);
		uint64_t rank = coin < prob[col] ? col : alias[col];
		keys[i] = (rank + 1) * 0x9e3779b97f4a7c15ull;
	}
	free(prob);
	free(alias);
	free(small);
	free(large);
	return 0;
}

/* ---------------------------------------------------------------------
 * The stable API (include/kvt/sim.h): what libkvt.so exports of the
 * engine, thin wrappers over the functions above.
 */

#define KVT_API __attribute__((visibility("default")))

KVT_API int kvt_sim_open(const char *path, struct kvt_sim_trace **out, char *err, size_t errlen)
{
	struct kvt_sim_trace *t;
	int r;

	*out = NULL;
	if (!path)
		return kvt_errf(err, errlen, -EINVAL, "no trace path");
	t = malloc(sizeof(*t));
	if (!t)
		return kvt_errf(err, errlen, -ENOMEM, "%s: out of memory", path);
	r = kvt_sim_trace_load(path, t, err, errlen);
	if (r) {
		free(t);
		return r;
	}
	*out = t;
	return 0;
}

KVT_API int kvt_sim_open_keys(const uint64_t *keys, size_t n, struct kvt_sim_trace **out)
{
	struct kvt_sim_trace *t = malloc(sizeof(*t));
	int r;

	*out = NULL;
	if (!t)
		return -ENOMEM;
	r = kvt_sim_trace_keys(t, keys, n);
	if (r) {
		free(t);
		return r;
	}
	*out = t;
	return 0;
}

KVT_API void kvt_sim_close(struct kvt_sim_trace *t)
{
	if (!t)
		return;
	kvt_sim_trace_free(t);
	free(t);
}

KVT_API int kvt_sim_describe(const struct kvt_sim_trace *t, struct kvt_sim_info *out)
{
	memset(out, 0, sizeof(*out));
	out->records = t->n;
	out->refs = t->naccess;
	out->news = t->nnew;
	out->steps = t->steps;
	out->pages = t->npages;
	out->page_bytes = t->has_hdr ? t->hdr.page_bytes : 0;
	out->gaps = t->gaps;
	out->source = t->has_hdr ? t->hdr.source : UINT32_MAX;
	snprintf(out->format, sizeof(out->format), "%s", t->format);
	return 0;
}

/* The next-use times, the first time an offline policy needs them. */
static int need_next(struct kvt_sim_trace *t, const struct kvt_policy_ops *ops,
		     char *err, size_t errlen)
{
	int r = ops && (ops->flags & KVT_POLICY_OFFLINE) ? kvt_sim_trace_next(t) : 0;

	return r ? kvt_errf(err, errlen, r, "the next-use times of an offline policy: %s",
			    strerror(-r)) : 0;
}

KVT_API int kvt_sim_curve(struct kvt_sim_trace *t, const char *const *policies, unsigned np,
		  const uint64_t *frames, unsigned nsizes, unsigned threads,
		  uint64_t *hits, uint64_t *misses, uint64_t *refs,
		  char *err, size_t errlen)
{
	struct kvt_sim_point *pt;
	size_t n = (size_t)np * nsizes;
	int r;

	*refs = 0;
	for (unsigned p = 0; p < np; p++)
		if ((r = need_next(t, kvt_policy_find(policies[p]), err, errlen)))
			return r;
	pt = calloc(n ? n : 1, sizeof(*pt));
	if (!pt)
		return kvt_errf(err, errlen, -ENOMEM, "out of memory");
	r = kvt_sim_mrc(t, policies, np, frames, nsizes, threads, pt, NULL, NULL, err, errlen);
	for (size_t i = 0; !r && i < n; i++) {
		hits[i] = pt[i].hits;
		misses[i] = pt[i].misses;
	}
	if (!r)
		*refs = t->naccess;
	free(pt);
	return r;
}

KVT_API int kvt_sim_replay(struct kvt_sim_trace *t, const struct kvt_sim_level *lv, unsigned n,
		   int backed, struct kvt_sim_counts *out, char *err, size_t errlen)
{
	struct kvt_sim_config c = { .ntiers = n, .backed = backed < 0 ? -1 : !!backed };
	struct kvt_sim_result *res;
	char why[256];
	int r;

	if (!n || n > KVT_SIM_MAX_TIERS)
		return kvt_errf(err, errlen, -EINVAL, "%u tiers: want 1..%d", n, KVT_SIM_MAX_TIERS);
	for (unsigned i = 0; i < n; i++) {
		const struct kvt_policy_ops *o = lv[i].ops;
		const char *spec = lv[i].policy ? lv[i].policy : o ? o->name : NULL;
		struct kvt_sim_tier *tc = &c.tier[i];

		if (!spec || !*spec)
			return kvt_errf(err, errlen, -EINVAL, "tier %u: no policy", i);
		if (strlen(spec) >= sizeof(tc->policy))
			return kvt_errf(err, errlen, -EINVAL, "tier %u: policy '%.40s...': longer "
					"than %zu characters", i, spec, sizeof(tc->policy) - 1);
		if (o && (!o->init || !o->destroy || !o->on_insert || !o->on_access ||
			  !o->on_remove || !o->victims))
			return kvt_errf(err, errlen, -EINVAL, "tier %u: policy '%s': its table lacks "
					"a method (init, destroy, on_insert, on_access, on_remove "
					"and victims are required)", i, spec);
		if (!o && !(o = kvt_policy_load(spec, why, sizeof(why))))
			return kvt_errf(err, errlen, -EINVAL, "tier %u: %s: %s", i, spec, why);
		if ((r = need_next(t, o, err, errlen)))
			return r;
		snprintf(tc->policy, sizeof(tc->policy), "%s", spec);
		tc->ops = lv[i].ops;
		tc->frames = lv[i].frames;
	}
	res = malloc(sizeof(*res));
	if (!res)
		return kvt_errf(err, errlen, -ENOMEM, "out of memory");
	r = kvt_sim_run(&c, t, res, err, errlen);
	for (unsigned i = 0; !r && i < n; i++) {
		const struct kvt_sim_tier_result *x = &res->tier[i];
		out[i] = (struct kvt_sim_counts){
			.refs = res->refs, .hits = x->hits, .misses = x->misses,
			.promotions = x->promotions, .demotions = x->demotions,
			.drops = x->drops, .used = x->used,
		};
	}
	free(res);
	return r;
}
