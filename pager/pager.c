/* SPDX-License-Identifier: MIT */
/*
 * The pager: open and close, live configuration changes, the step, stats,
 * trace start and stop, the log callback and the hooks the ops layer
 * registers with. The rest of the core, one part a file, each with its
 * contract at its top: table.c (frames and pages), seq.c (sequences),
 * acquire.c (batches), migrate.c (the migration engine), watermark.c
 * (watermarks and live capacity); internal.h holds what they share.
 *
 * Threads: runtime threads take p->lock for bookkeeping only; all transfers
 * (device copies and NVMe I/O) run on the migration thread, which releases
 * the lock around them while the pages it moves are MOVING.
 */
#define _GNU_SOURCE		/* pthread_setname_np */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pager/errf.h"
#include "pager/internal.h"

void kvt_plog(struct kvt_pager *p, int level, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (!p->cfg.log)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	p->cfg.log(p->cfg.log_arg, level, msg);
}

/* ---------------------------------------------------------------------
 * Open and close
 */

static uint16_t next_tag(void)
{
	static uint32_t tags;
	uint32_t t;
	do
		t = __atomic_add_fetch(&tags, 1, __ATOMIC_RELAXED) & 0xffff;
	while (!t);
	return (uint16_t)t;
}

/* bytes reserved, of which `online` bytes in service at open. */
static int tier_init(struct kvt_pager *p, int ti, uint64_t bytes, uint64_t online,
		     uint8_t *base)
{
	struct tier *t = &p->t[ti];
	const char *spec = p->cfg.tier[ti].policy;
	uint32_t nw;
	int r;

	t->id = ti;
	t->stride = p->page_bytes;
	t->nframes = (uint32_t)(bytes / t->stride);
	t->online = (uint32_t)(online / t->stride);
	if (t->online > t->nframes)
		t->online = t->nframes;
	t->nfree = t->online;
	t->base = base;
	char why[256];
	t->pol = kvt_policy_load(spec, why, sizeof(why));
	if (!t->pol) {
		kvt_plog(p, KVT_LOG_ERROR, "tier.%s.policy = %s: %s", kvt_tier_name(ti), spec, why);
		return -EINVAL;
	}
	if (t->pol->flags & KVT_POLICY_OFFLINE) {
		kvt_plog(p, KVT_LOG_ERROR, "tier.%s.policy = %s: needs future references; "
		     "it runs only in kvt-sim", kvt_tier_name(ti), spec);
		return -EINVAL;
	}
	nw = (t->nframes + 63) / 64;
	t->freemap = calloc(nw ? nw : 1, sizeof(uint64_t));
	t->offmap = calloc(nw ? nw : 1, sizeof(uint64_t));
	t->owner = malloc(((size_t)t->nframes + 1) * sizeof(uint32_t));
	t->meta = calloc((size_t)t->nframes + 1, t->pol->meta_size ? t->pol->meta_size : 1);
	if (!t->freemap || !t->offmap || !t->owner || !t->meta)
		return -ENOMEM;
	for (uint32_t f = 0; f < t->nframes; f++) {
		if (f < t->online)
			t->freemap[f / 64] |= 1ull << (f % 64);
		else
			kvt_frame_offline(t, f);
		t->owner[f] = NO_PAGE;
	}
	/* Sized for every frame reserved: the pages resident never exceed
	 * the capacity a policy was given, whatever the live capacity. */
	why[0] = 0;
	r = t->pol->init(&t->pst, kvt_policy_params(spec), t->nframes, why, sizeof(why));
	if (r) {
		kvt_plog(p, KVT_LOG_ERROR, "tier.%s.policy = %s: %s", kvt_tier_name(ti), spec,
			 r == -EINVAL && why[0] ? why : strerror(-r));
		t->pst = NULL;
		return r;
	}
	kvt_tier_marks(p, ti);
	t->st.frame_bytes = t->stride;
	return 0;
}

static void pager_free(struct kvt_pager *p)
{
	for (int i = KVT_NSVC; i-- > 0;)
		if (p->svc[i].stop)
			p->svc[i].stop(p->svc[i].arg);
	if (p->thread_started) {
		pthread_mutex_lock(&p->lock);
		p->stop = 1;
		pthread_cond_signal(&p->work);
		pthread_mutex_unlock(&p->lock);
		pthread_join(p->thread, NULL);
	}
	if (p->rec) {
		/* Nobody appends any more: no lock needed. The error is lost;
		 * kvt_pager_trace_stop reports it. */
		(void)kvt_recorder_finish(p->rec);
		p->rec = NULL;
	}
	for (uint32_t i = 0; i < p->nseqs; i++) {
		struct seq *s = p->seqs[i];
		if (s->lt)
			for (unsigned l = 0; l < p->cfg.n_layers; l++)
				free(s->lt[l].pg);
		free(s->lt);
		free(s);
	}
	free(p->seqs);
	for (int ti = 0; ti < KVT_NTIERS; ti++) {
		struct tier *t = &p->t[ti];
		if (t->pst)
			t->pol->destroy(t->pst);
		free(t->freemap);
		free(t->offmap);
		free(t->owner);
		free(t->meta);
	}
	if (p->nvme)
		kvt_nvme_close(p->nvme);
	if (p->host.base) {
		if (p->dev->ops->unregister_host)
			p->dev->ops->unregister_host(p->dev->ctx, p->host.base);
		kvt_host_arena_close(&p->host);
	}
	if (p->fast_mem)
		p->dev->ops->free(p->dev->ctx, p->fast_mem, p->fast_bytes);
	if (p->dev_log)		/* the log we lent the device goes with us */
		kvt_device_set_log(p->dev, NULL, NULL);
	free(p->pages);
	free(p->demand.v);
	free(p->prefetch.v);
	free(p->pf_far.v);
	free(p->moves);
	free(p->ios);
	free(p->order);
	pthread_mutex_destroy(&p->lock);
	pthread_mutex_destroy(&p->trace_mu);
	pthread_cond_destroy(&p->work);
	pthread_cond_destroy(&p->done);
	free(p);
}

int kvt_pager_open_core(const struct kvt_config *cfg, struct kvt_device *dev,
			struct kvt_pager **out)
{
	struct kvt_pager *p;
	char err[256];
	uint64_t pb, frames[KVT_NTIERS], res[KVT_NTIERS];
	int r;

	if (!cfg || !dev || !out)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	pthread_mutexattr_t ma;

	/* Held for microseconds at a time: a waiter that went straight to
	 * sleep took tens of microseconds to wake on a VM. Adaptive, every
	 * taker spins a little first; the decode threads' calls spin longer
	 * (kvt_lock). */
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
	pthread_mutex_init(&p->lock, &ma);
	pthread_mutexattr_destroy(&ma);
	pthread_mutex_init(&p->trace_mu, NULL);
	pthread_cond_init(&p->work, NULL);
	pthread_cond_init(&p->done, NULL);
	p->cfg = *cfg;
	p->dev = dev;
	if (!dev->log && cfg->log) {
		kvt_device_set_log(dev, cfg->log, cfg->log_arg);
		p->dev_log = 1;
	}
	r = kvt_config_validate(cfg, err, sizeof(err));
	if (r) {
		kvt_plog(p, KVT_LOG_ERROR, "%s", err);
		goto fail;
	}
	p->tag = next_tag();
	pb = kvt_config_page_bytes(cfg);
	p->page_bytes = pb;
	p->half = pb / 2;
	p->tok_bytes = (uint64_t)cfg->n_kv_heads * cfg->head_dim * cfg->dtype_bytes;
	/* Auto reads in place where the device says it pays: always on
	 * cpu (the copy up would be a memcpy that buys nothing), on a GPU
	 * where its kernels read pinned host memory about as fast as its
	 * copy engine moves it (measured when the device opened). */
	int in_place = cfg->host_in_place == KVT_IN_PLACE_AUTO ? dev->in_place_auto
							       : cfg->host_in_place;
	p->target = in_place && dev->ops->host_addressable ? KVT_TIER_HOST : KVT_TIER_FAST;
	/* frames: in service at open; res: reserved (max_bytes), the most a
	 * live change may grow the tier to. */
	for (int ti = 0; ti < KVT_NTIERS; ti++) {
		uint64_t mb = cfg->tier[ti].max_bytes;
		frames[ti] = cfg->tier[ti].bytes / pb;
		res[ti] = (mb > cfg->tier[ti].bytes ? mb : cfg->tier[ti].bytes) / pb;
	}
	p->last = frames[KVT_TIER_NVME] ? KVT_TIER_NVME : KVT_TIER_HOST;
	if (res[0] + res[1] + res[2] >= NO_PAGE) {
		kvt_plog(p, KVT_LOG_ERROR, "too many frames: %llu", (unsigned long long)(res[0] + res[1] + res[2]));
		r = -EINVAL;
		goto fail;
	}

	p->fast_bytes = res[KVT_TIER_FAST] * pb;
	uint64_t dfree, dtotal;
	if (dev->ops->mem_info && !dev->ops->mem_info(dev->ctx, &dfree, &dtotal) &&
	    p->fast_bytes > dfree) {
		kvt_plog(p, KVT_LOG_ERROR, "fast tier: %llu MiB asked for, %s has %llu MiB free "
			 "of %llu MiB", (unsigned long long)(p->fast_bytes >> 20), dev->ops->name,
			 (unsigned long long)(dfree >> 20), (unsigned long long)(dtotal >> 20));
		r = -ENOMEM;
		goto fail;
	}
	r = dev->ops->alloc(dev->ctx, p->fast_bytes, &p->fast_mem);
	if (r) {
		kvt_plog(p, KVT_LOG_ERROR, "fast tier: %s cannot allocate %llu bytes: %s",
		     dev->ops->name, (unsigned long long)p->fast_bytes, strerror(-r));
		p->fast_mem = NULL;
		goto fail;
	}
	/* The host tier goes on the device's node when the device knows it
	 * and the configuration leaves the choice to us: preferred, not
	 * bound, so a host tier larger than that node spills over. */
	int node = cfg->host_numa_node;
	struct kvt_device_info di;
	if (node == KVT_NUMA_ANY && !dev->ops->host_visible && !kvt_device_info(dev, &di) &&
	    di.numa_node >= 0)
		node = di.numa_node | KVT_NUMA_PREFER;
	r = kvt_host_arena_open(&p->host, res[KVT_TIER_HOST] * pb, cfg->host_hugepages,
				cfg->host_mlock, node, cfg->host_prefault_threads);
	if (r) {
		kvt_plog(p, KVT_LOG_ERROR, "host tier: %llu bytes: %s%s%s",
		     (unsigned long long)(res[KVT_TIER_HOST] * pb), strerror(-r),
		     p->host.notes[0] ? ": " : "", p->host.notes);
		memset(&p->host, 0, sizeof(p->host));
		goto fail;
	}
	if (p->host.notes[0])
		kvt_plog(p, KVT_LOG_INFO, "host tier: %s", p->host.notes);
	if (dev->ops->register_host) {
		r = dev->ops->register_host(dev->ctx, p->host.base, p->host.bytes);
		if (r && !dev->ops->host_visible && p->target == KVT_TIER_HOST) {
			/* Kernels can read only registered host memory in place. */
			p->target = KVT_TIER_FAST;
			kvt_tier_marks(p, KVT_TIER_FAST);	/* the stages move with it */
			kvt_tier_marks(p, KVT_TIER_HOST);
			kvt_plog(p, KVT_LOG_WARN, "host tier: %s cannot register it (%s): pages are "
				 "copied up, not read in place", dev->ops->name, strerror(-r));
		} else if (r) {
			kvt_plog(p, KVT_LOG_WARN, "host tier: device cannot register it: %s", strerror(-r));
		}
		r = 0;
	}
	if (p->last == KVT_TIER_NVME) {
		struct kvt_nvme_opts o = {
			.path = cfg->nvme_path, .bytes = frames[KVT_TIER_NVME] * pb,
			.direct = cfg->nvme_direct, .depth = cfg->io_depth,
			.max_io = cfg->max_io_bytes, .log = cfg->log, .log_arg = cfg->log_arg,
		};
		r = kvt_nvme_open(&o, &p->nvme);
		if (r) {
			kvt_plog(p, KVT_LOG_ERROR, "nvme tier: %s: %s",
			     cfg->nvme_path[0] ? cfg->nvme_path : "(temp dir)", strerror(-r));
			p->nvme = NULL;
			goto fail;
		}
		if (kvt_nvme_register_buffers(p->nvme, p->host.base, p->host.bytes))
			kvt_plog(p, KVT_LOG_INFO, "nvme tier: plain buffers (registration refused)");
		kvt_nvme_info(p->nvme, &p->nvme_info);
		/* fault.*: non-zero only where the library has KVT_FAULTS (validate). */
		struct kvt_fault f = { cfg->fault_eio, cfg->fault_short, cfg->fault_enospc,
				       cfg->fault_flip, cfg->fault_slow_us };
		kvt_nvme_set_fault(p->nvme, &f);
		if (f.eio_every | f.short_every | f.enospc_every | f.flip_every | f.slow_us)
			kvt_plog(p, KVT_LOG_WARN, "nvme tier: fault injection on: eio 1/%u, short "
				 "1/%u, enospc 1/%u, flip 1/%u, slow %u us (0 = off)", f.eio_every,
				 f.short_every, f.enospc_every, f.flip_every, f.slow_us);
	}

	/* The memory of offline host frames can go back to the kernel unless
	 * something holds it: buffers registered with io_uring (their pages
	 * stay pinned: a read would land in pages we no longer map), a
	 * device's registration, hugetlb pages (released only whole), or
	 * mlock (unlocking frame by frame would split the mapping into as
	 * many pieces as there are runs of offline frames, up to the
	 * system's limit on mappings). */
	p->t[KVT_TIER_HOST].release = p->host.hugepages != KVT_HUGE_HUGETLB &&
				      !p->host.mlocked && !dev->ops->register_host &&
				      !(p->nvme && p->nvme_info.registered_buffers);
	r = tier_init(p, KVT_TIER_FAST, p->fast_bytes, frames[KVT_TIER_FAST] * pb, p->fast_mem);
	if (!r)
		r = tier_init(p, KVT_TIER_HOST, p->host.bytes, frames[KVT_TIER_HOST] * pb,
			      p->host.base);
	if (!r)
		r = tier_init(p, KVT_TIER_NVME, frames[KVT_TIER_NVME] * pb,
			      frames[KVT_TIER_NVME] * pb, NULL);
	if (r)
		goto fail;
	kvt_scores_update(p);

	/* Pages in flight take frames beyond the resident set twice over
	 * (landing, and waiting to be consumed): a batch is an eighth of the
	 * fast tier, so the set a policy keeps is not eaten by it, but at
	 * least what fills the NVMe queue (depth x largest request: one
	 * batch's reads are all the disk sees at a time), up to a quarter. */
	uint64_t fill = (uint64_t)cfg->io_depth * cfg->max_io_bytes / pb;
	uint64_t mb = frames[KVT_TIER_FAST] / 8;
	if (mb < fill)
		mb = fill < frames[KVT_TIER_FAST] / 4 ? fill : frames[KVT_TIER_FAST] / 4;
	p->move_batch = (uint32_t)(mb > MAX_MOVE ? MAX_MOVE : mb < 8 ? 8 : mb);
	p->extent = cfg->max_io_bytes / pb > 1 ? (uint32_t)(cfg->max_io_bytes / pb) : 1;
	p->npages = (uint32_t)(res[0] + res[1] + res[2]);
	p->pages = calloc((size_t)p->npages + 1, sizeof(*p->pages));
	p->moves = malloc(MAX_FLIGHT * sizeof(*p->moves));
	p->ios = malloc(MAX_FLIGHT * sizeof(*p->ios));
	p->order = malloc(MAX_FLIGHT * sizeof(*p->order));
	if (!p->pages || !p->moves || !p->ios || !p->order) {
		r = -ENOMEM;
		goto fail;
	}
	p->free_page = NO_PAGE;
	for (uint32_t s = p->npages; s-- > 0;) {
		struct page *pg = &p->pages[s];
		pg->frame[0] = pg->frame[1] = pg->frame[2] = NO_FRAME;
		pg->next_free = p->free_page;
		p->free_page = s;
	}
	p->free_seq = NO_PAGE;
	p->psi_frames = UINT32_MAX;

	r = -pthread_create(&p->thread, NULL, kvt_migrate_main, p);
	if (r)
		goto fail;
	p->thread_started = 1;
	pthread_setname_np(p->thread, "kvt-migrate");
	*out = p;
	return 0;
fail:
	pager_free(p);
	return r;
}

KVT_API int kvt_pager_close(struct kvt_pager *p)
{
	if (!p)
		return 0;
	/* A batch still held would be released into freed memory. */
	pthread_mutex_lock(&p->lock);
	for (uint32_t i = 0; i < p->nseqs; i++)
		if (p->seqs[i]->batches) {
			pthread_mutex_unlock(&p->lock);
			return -EBUSY;
		}
	pthread_mutex_unlock(&p->lock);
	pager_free(p);
	return 0;
}

KVT_API struct kvt_device *kvt_pager_device(const struct kvt_pager *p)
{
	return p ? p->dev : NULL;
}

KVT_API size_t kvt_pager_page_bytes(const struct kvt_pager *p)
{
	return p->page_bytes;
}

KVT_API void kvt_pager_config(const struct kvt_pager *p, struct kvt_config *out)
{
	/* kvt_pager_set changes parts of it while the pager runs. */
	struct kvt_pager *q = (struct kvt_pager *)p;
	pthread_mutex_lock(&q->lock);
	*out = p->cfg;
	pthread_mutex_unlock(&q->lock);
}

/* The bytes a tier can hold of a step's pages: its capacity less the
 * frames kept for pages on their way. Lock held. */
static uint64_t holds(const struct kvt_pager *p, int ti)
{
	uint64_t cap = p->t[ti].online;

	return (cap > p->stage[ti] ? cap - p->stage[ti] : 0) * p->page_bytes;
}

KVT_API uint64_t kvt_pager_step(struct kvt_pager *p)
{
	pthread_mutex_lock(&p->lock);
	if (p->step_pages) {
		/* What the step read beyond what the tiers above NVMe hold. */
		uint64_t read = p->step_pages * p->page_bytes;
		uint64_t held = holds(p, KVT_TIER_FAST) + holds(p, KVT_TIER_HOST);
		p->st.read_min_bytes += read > held ? read - held : 0;
		p->st.read_steps++;
		p->step_pages = 0;
	}
	uint64_t s = ++p->step;
	if (p->rec)
		kvt_trace_step(p);
	pthread_mutex_unlock(&p->lock);
	return s;
}

/* ---------------------------------------------------------------------
 * Live changes
 */

/* "tier.<name>.<field>": the tier and the field, or -1. */
static int tier_key(const char *key, const char **field)
{
	if (strncmp(key, "tier.", 5))
		return -1;
	for (int ti = 0; ti < KVT_NTIERS; ti++) {
		const char *n = kvt_tier_name(ti);
		size_t l = strlen(n);
		if (!strncmp(key + 5, n, l) && key[5 + l] == '.') {
			*field = key + 6 + l;
			return ti;
		}
	}
	return -1;
}

struct by_step {
	uint64_t step;
	uint32_t frame;
};

static int by_step_cmp(const void *a, const void *b)
{
	const struct by_step *x = a, *y = b;
	if (x->step != y->step)
		return x->step < y->step ? -1 : 1;
	return x->frame < y->frame ? -1 : x->frame > y->frame;
}

/* Replace the policy of tier ti by spec. The new state and its metadata
 * area are built first, without the lock (the tier's frame count never
 * changes), so a failure changes nothing. Under the lock the new policy
 * is told about every page resident in the tier, least recently used
 * first, and takes over; frames reserved for a move in flight are not
 * resident yet (kvt_place() tells whichever policy is in force when the move
 * lands). The old state is destroyed after the lock is dropped: nothing
 * can reach it any more. Pages neither move nor change state. */
static int swap_policy(struct kvt_pager *p, int ti, const char *key, const char *spec,
		       char *err, size_t errlen)
{
	struct tier *t = &p->t[ti];
	char why[256];
	const struct kvt_policy_ops *pol = kvt_policy_load(spec, why, sizeof(why)), *old_pol;
	struct by_step *order;
	uint8_t *meta, *old_meta;
	void *pst = NULL, *old_pst;
	uint32_t n = 0;
	int r;

	if (!pol)
		return kvt_errf(err, errlen, -EINVAL, "%s = %s: %s", key, spec, why);
	if (pol->flags & KVT_POLICY_OFFLINE)
		return kvt_errf(err, errlen, -EINVAL, "%s = %s: needs future references; "
				"it runs only in kvt-sim", key, spec);
	meta = calloc((size_t)t->nframes + 1, pol->meta_size ? pol->meta_size : 1);
	order = malloc(((size_t)t->nframes + 1) * sizeof(*order));
	if (!meta || !order) {
		free(meta);
		free(order);
		return kvt_errf(err, errlen, -ENOMEM, "%s = %s: out of memory", key, spec);
	}
	why[0] = 0;
	r = pol->init(&pst, kvt_policy_params(spec), t->nframes, why, sizeof(why));
	if (r) {
		free(meta);
		free(order);
		if (r != -ENOMEM)
			r = -EINVAL;
		return kvt_errf(err, errlen, r, "%s = %s: %s", key, spec,
				r == -EINVAL && why[0] ? why : strerror(-r));
	}

	pthread_mutex_lock(&p->lock);
	for (uint32_t f = 0; f < t->nframes; f++) {
		uint32_t s = t->owner[f];
		if (s != NO_PAGE && p->pages[s].frame[ti] == f)
			order[n++] = (struct by_step){ p->pages[s].last_step, f };
	}
	qsort(order, n, sizeof(*order), by_step_cmp);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t f = order[i].frame;
		struct kvt_ref ref = ref_of(p, t->owner[f]);
		pol->on_insert(pst, &ref, meta + (size_t)f * pol->meta_size);
	}
	old_pol = t->pol;
	old_pst = t->pst;
	old_meta = t->meta;
	t->pol = pol;
	t->pst = pst;
	t->meta = meta;
	kvt_scores_update(p);
	snprintf(p->cfg.tier[ti].policy, sizeof(p->cfg.tier[ti].policy), "%s", spec);
	pthread_cond_signal(&p->work);	/* the new ranking may free frames */
	pthread_mutex_unlock(&p->lock);

	old_pol->destroy(old_pst);
	free(old_meta);
	free(order);
	return 0;
}

void kvt_pager_attach(struct kvt_pager *p, enum kvt_service kind, void (*stop)(void *arg),
		      void *arg, int port)
{
	pthread_mutex_lock(&p->lock);
	p->svc[kind].stop = stop;
	p->svc[kind].arg = arg;
	if (kind == KVT_SVC_HTTP)
		p->http_port = port;
	pthread_mutex_unlock(&p->lock);
}

/* Change one configuration key while the pager runs. The value is parsed
 * and range-checked by kvt_config_set on a copy of the configuration;
 * what can change live is applied, the rest refused with -EPERM. All or
 * nothing: on any error nothing changes. */
KVT_API int kvt_pager_set(struct kvt_pager *p, const char *key, const char *value,
			  char *err, size_t errlen)
{
	struct kvt_config c;
	const char *field = NULL;
	int ti, r;

	if (!p)
		return kvt_errf(err, errlen, -EINVAL, "no pager given");
	pthread_mutex_lock(&p->lock);
	c = p->cfg;
	r = kvt_config_set(&c, key, value, err, errlen);
	if (r)
		goto out;
	ti = tier_key(key, &field);
	if (!strcmp(key, "access.prefetch_depth")) {
		p->cfg.prefetch_depth = c.prefetch_depth;
	} else if (!strcmp(key, "tier.host.floor") ||
		   (!strcmp(key, "psi.threshold") && p->svc[KVT_SVC_PSI].stop)) {
		/* The watcher reads both at its next reading. */
		p->cfg.host_floor = c.host_floor;
		p->cfg.psi_threshold = c.psi_threshold;
	} else if (!strcmp(key, "psi.threshold")) {
		r = kvt_errf(err, errlen, -EPERM, "%s: the memory-pressure watcher was not started "
			     "at open (psi.threshold was 0 or psi.path empty): restart with it in "
			     "the config", key);
	} else if (ti >= 0 && !strcmp(field, "policy")) {
		pthread_mutex_unlock(&p->lock);
		return swap_policy(p, ti, key, c.tier[ti].policy, err, errlen);
	} else if (ti >= 0 && (!strcmp(field, "wm_min") || !strcmp(field, "wm_low") ||
			       !strcmp(field, "wm_high"))) {
		const struct kvt_tier_config *tc = &c.tier[ti];
		struct tier *t = &p->t[ti];
		if (tc->wm_min > tc->wm_low || tc->wm_low > tc->wm_high) {
			r = kvt_errf(err, errlen, -EINVAL,
				     "%s = %s: wm_min = %u, wm_low = %u, wm_high = %u: must be "
				     "wm_min <= wm_low <= wm_high", key, value,
				     tc->wm_min, tc->wm_low, tc->wm_high);
			goto out;
		}
		p->cfg.tier[ti].wm_min = tc->wm_min;
		p->cfg.tier[ti].wm_low = tc->wm_low;
		p->cfg.tier[ti].wm_high = tc->wm_high;
		kvt_tier_marks(p, ti);
		t->retry_ns = 0;
		/* Reclaim to the new marks; an allocation waiting at the old
		 * min may now go ahead. */
		pthread_cond_signal(&p->work);
		pthread_cond_broadcast(&p->done);
	} else if (ti >= 0 && ti != KVT_TIER_NVME && !strcmp(field, "bytes")) {
		r = kvt_resize_check(p, ti, c.tier[ti].bytes / p->page_bytes, key, value, err, errlen);
		if (r)
			goto out;
		p->cfg.tier[ti].bytes = c.tier[ti].bytes;
		kvt_tier_apply(p, ti);
	} else {
		/* access.host_in_place among them: batches, queued moves and
		 * prefetched pages are bound to the tier acquire hands back. */
		r = kvt_errf(err, errlen, -EPERM,
			     "%s cannot change while the pager runs (restart with it in the config)",
			     key);
	}
out:
	pthread_mutex_unlock(&p->lock);
	return r;
}

/* ---------------------------------------------------------------------
 * Stats
 */

KVT_API int kvt_pager_stats(struct kvt_pager *p, struct kvt_stats *st)
{
	struct kvt_nvme_info ni;

	if (!p || !st)
		return -EINVAL;
	pthread_mutex_lock(&p->lock);
	*st = p->st;
	st->step = p->step;
	st->seqs = p->open_seqs;
	st->pages = p->live_pages;
	st->nvme_paused = now_ns() < p->nvme_paused_until;
	st->trace_on = p->rec != NULL;
	if (p->rec)
		kvt_recorder_counts(p->rec, &st->trace_records, &st->trace_dropped);
	else {
		st->trace_records = p->trace_records;
		st->trace_dropped = p->trace_dropped;
	}
	st->metrics_http_port = p->http_port;
	st->host_releases = p->t[KVT_TIER_HOST].release;
	st->psi_watching = p->svc[KVT_SVC_PSI].stop != NULL;
	st->psi_ok = p->psi_ok;
	st->psi_some_avg10 = p->psi_avg10;
	st->psi_shrinks = p->psi_shrinks;
	st->psi_grows = p->psi_grows;
	st->host_limit_bytes = p->psi_frames == UINT32_MAX ? 0 : (uint64_t)p->psi_frames * p->page_bytes;
	for (int ti = 0; ti < KVT_NTIERS; ti++) {
		const struct tier *t = &p->t[ti];
		st->tier[ti] = t->st;
		st->tier[ti].capacity = t->online;
		st->tier[ti].online = t->nframes - t->noff;
		st->tier[ti].reserved = t->nframes;
		st->tier[ti].used = t->nframes - t->nfree - t->noff;
		st->tier[ti].stage = p->stage[ti];
	}
	/* The ring's own counters, as the migration thread last copied them
	 * (it owns the ring and runs it without the lock). */
	ni = p->nvme_info;
	/* Under the lock: kvt_pager_set may swap a tier's policy. */
	st->meta_bytes = (uint64_t)(p->npages + 1) * sizeof(struct page);
	for (int ti = 0; ti < KVT_NTIERS; ti++) {
		const struct tier *t = &p->t[ti];
		st->meta_bytes += ((uint64_t)t->nframes + 1) * (sizeof(uint32_t) + t->pol->meta_size) +
				  ((t->nframes + 63) / 64) * 2 * sizeof(uint64_t);
	}
	pthread_mutex_unlock(&p->lock);
	kvt_device_info(p->dev, &st->dev);
	st->fast_alloc_bytes = p->fast_bytes;
	st->host_hugepages = p->host.hugepages;
	st->host_mlocked = p->host.mlocked;
	st->host_numa_node = p->host.numa_node;
	st->host_overhead_bytes = p->host.mapped - p->host.bytes;
	snprintf(st->host_notes, sizeof(st->host_notes), "%s", p->host.notes);
	if (p->nvme) {
		st->nvme_direct = ni.direct;
		st->nvme_registered_files = ni.registered_files;
		st->nvme_registered_buffers = ni.registered_buffers;
		st->short_ios = ni.short_ios;
		st->nvme_ops = ni.ops;
		st->nvme_reqs = ni.reqs;
		st->nvme_busy_ns = ni.busy_ns;
		st->nvme_depth_ns = ni.depth_ns;
		snprintf(st->nvme_notes, sizeof(st->nvme_notes), "%s", ni.notes);
	}
	return 0;
}

/* ---------------------------------------------------------------------
 * Trace start and stop
 */

/* The configuration in force as INI text (malloc'd), or NULL. */
static char *config_text(const struct kvt_config *cfg, size_t *len)
{
	for (size_t cap = 16384; cap <= (1u << 24); cap *= 2) {
		char *buf = malloc(cap);
		if (!buf)
			return NULL;
		int n = kvt_config_print(cfg, buf, cap);
		if (n >= 0 && (size_t)n < cap) {
			*len = (size_t)n;
			return buf;
		}
		free(buf);
		if (n != -ENOSPC)
			return NULL;
	}
	return NULL;
}

KVT_API int kvt_pager_trace_start(struct kvt_pager *p, const char *path)
{
	struct kvt_trace_hdr hdr = { 0 };
	struct kvt_recorder *rec;
	struct kvt_config *cfg;
	struct timespec ts;
	char *text;
	size_t len = 0;
	int r;

	if (!p || !path || !*path)
		return -EINVAL;
	cfg = malloc(sizeof(*cfg));
	if (!cfg)
		return -ENOMEM;
	/* trace_mu: one start or stop at a time; p->rec changes only under
	 * both locks, so reading it under either is enough. */
	pthread_mutex_lock(&p->trace_mu);
	if (p->rec) {
		r = -EBUSY;
		goto out;
	}
	pthread_mutex_lock(&p->lock);
	*cfg = p->cfg;
	for (int ti = 0; ti < KVT_NTIERS; ti++) {
		hdr.frames[ti] = p->t[ti].nframes;
		snprintf(hdr.policy[ti], sizeof(hdr.policy[ti]), "%s", p->cfg.tier[ti].policy);
	}
	pthread_mutex_unlock(&p->lock);
	hdr.page_tokens = cfg->page_tokens;
	hdr.n_layers = cfg->n_layers;
	hdr.n_kv_heads = cfg->n_kv_heads;
	hdr.head_dim = cfg->head_dim;
	hdr.kv_bytes = cfg->dtype_bytes;
	hdr.page_bytes = (uint32_t)p->page_bytes;
	hdr.source = KVT_SRC_PAGER;
	clock_gettime(CLOCK_REALTIME, &ts);
	hdr.start_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	text = config_text(cfg, &len);
	if (!text) {
		r = -ENOMEM;
		goto out;
	}
	/* The file is created and its header written without the pager lock. */
	r = kvt_recorder_start(path, &hdr, text, len, 0, &rec);
	free(text);
	if (r)
		goto out;
	pthread_mutex_lock(&p->lock);
	p->rec = rec;
	p->rec_t0 = now_ns();
	p->trace_records = p->trace_dropped = 0;
	kvt_trace_step(p);		/* the step the trace starts at */
	pthread_mutex_unlock(&p->lock);
out:
	pthread_mutex_unlock(&p->trace_mu);
	free(cfg);
	return r;
}

KVT_API int kvt_pager_trace_stop(struct kvt_pager *p)
{
	struct kvt_recorder *rec;
	int r;

	if (!p)
		return -EINVAL;
	pthread_mutex_lock(&p->trace_mu);
	pthread_mutex_lock(&p->lock);
	rec = p->rec;
	if (rec) {
		kvt_recorder_counts(rec, &p->trace_records, &p->trace_dropped);
		p->rec = NULL;
	}
	pthread_mutex_unlock(&p->lock);
	/* Nobody appends to rec any more: flush and close without the lock. */
	r = rec ? kvt_recorder_finish(rec) : -ENOENT;
	pthread_mutex_unlock(&p->trace_mu);
	return r;
}
