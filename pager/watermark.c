/* SPDX-License-Identifier: MIT */
/*
 * Watermarks and live capacity. Each tier keeps wm_min, wm_low and
 * wm_high per cent of its capacity free (kswapd semantics: the migration
 * thread reclaims from below low up to high; an append below min waits).
 * A tier's capacity changes while the pager runs (kvt_pager_set on bytes,
 * the memory-pressure hook on the host tier): a shrink takes free frames
 * offline and leaves a debt the migration thread pays by eviction, a grow
 * pays the debt off and brings frames back; pages never move between
 * frames of one tier, so views stay valid.
 *
 * Everything here runs with p->lock held, except kvt_pager_pressure,
 * which takes it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "pager/errf.h"
#include "pager/internal.h"

/* Watermarks in frames, from the per cents and the live capacity. */
void kvt_tier_marks(struct kvt_pager *p, int ti)
{
	struct tier *t = &p->t[ti];
	const struct kvt_tier_config *tc = &p->cfg.tier[ti];

	t->wm_min = (uint32_t)((uint64_t)t->online * tc->wm_min / 100);
	t->wm_low = (uint32_t)((uint64_t)t->online * tc->wm_low / 100);
	t->wm_high = (uint32_t)((uint64_t)t->online * tc->wm_high / 100);
	/* The stage: frames the policy's share leaves for pages on their way
	 * in. Every tier keeps its watermark's free frames; the tier batches
	 * read from (the landing tier) also keeps what the pages in flight
	 * and not yet read take: one NVMe ring's worth (io.depth requests of
	 * io.max_io_bytes, what keeps the disk busy), at most a quarter of
	 * the tier, at least 8 frames where it has 16. The stage is also
	 * what the disk can read ahead while compute does the rest of a
	 * layer: a quarter kept it busy where an eighth left it idle a third
	 * of the step, at the cost of as many more bytes read a step
	 * (docs/benchmarks.md, "Reads across layers"). */
	uint32_t st = t->wm_high;
	/* The landing tier, and when pages are copied up, the host tier
	 * their NVMe reads land in on the way. */
	if (ti == p->target || (ti == KVT_TIER_HOST && p->target == KVT_TIER_FAST)) {
		uint64_t ring = (uint64_t)p->cfg.io_depth * p->cfg.max_io_bytes / p->page_bytes;
		uint64_t r = t->online / 4 < ring ? t->online / 4 : ring;
		if (r < 8)
			r = t->online >= 16 ? 8 : t->online > 1 ? t->online / 2 : 1;
		if (r > st)
			st = (uint32_t)r;
	}
	p->stage[ti] = st;
}

/* Set the live capacity of tier ti to n frames (lock held; n checked by
 * kvt_resize_check). A shrink takes free frames offline at once and leaves
 * the rest to the migration thread (reclaim pays the debt before anything
 * else); a grow pays off what is left of a shrink, then brings offline
 * frames back. Watermarks follow the capacity. */
static void tier_resize(struct kvt_pager *p, int ti, uint32_t n)
{
	struct tier *t = &p->t[ti];
	uint32_t nw = (t->nframes + 63) / 64, got;

	if (n < t->online) {
		t->online = n;
		t->st.shrinks++;
		while (debt(t) && t->nfree)
			kvt_frame_offline(t, kvt_frame_alloc_run(t, 1, &got));
	} else if (n > t->online) {
		t->online = n;
		t->st.grows++;
		for (uint32_t w = 0; w < nw && t->online + t->noff > t->nframes; w++)
			while (t->offmap[w] && t->online + t->noff > t->nframes)
				kvt_frame_online(t, w * 64 + (uint32_t)__builtin_ctzll(t->offmap[w]));
	}
	kvt_tier_marks(p, ti);
	t->retry_ns = 0;
	pthread_cond_signal(&p->work);
	/* Frames came back: allocations and batches waiting may go on. */
	pthread_cond_broadcast(&p->done);
	p->events++;
}

/* The capacity tier ti should have: its configured bytes, and for the
 * host tier no more than the memory-pressure limit (lock held). */
void kvt_tier_apply(struct kvt_pager *p, int ti)
{
	uint64_t n = p->cfg.tier[ti].bytes / p->page_bytes;

	if (ti == KVT_TIER_HOST && n > p->psi_frames)
		n = p->psi_frames;
	if (n > p->t[ti].nframes)
		n = p->t[ti].nframes;
	tier_resize(p, ti, (uint32_t)n);
}

/* Whether tier ti can be given n frames (lock held). Refused: more than
 * were reserved at open (-ERANGE), fewer than 2 (-EINVAL), not more than
 * the pages pinned or in flight in it (-EBUSY: they cannot leave), or
 * fewer than the pages that have no copy above it need with the tiers
 * below (-ENOSPC: they would have nowhere to go). */
int kvt_resize_check(struct kvt_pager *p, int ti, uint64_t n, const char *key,
		     const char *value, char *err, size_t errlen)
{
	struct tier *t = &p->t[ti];
	uint64_t room = n, need = 0, busy = 0;

	if (n > t->nframes)
		return kvt_errf(err, errlen, -ERANGE,
				"%s = %s: %llu frames, above the %u reserved at open "
				"(tier.%s.max_bytes = %llu bytes)", key, value,
				(unsigned long long)n, t->nframes, kvt_tier_name(ti),
				(unsigned long long)t->nframes * t->stride);
	if (n < 2)
		return kvt_errf(err, errlen, -EINVAL, "%s = %s: holds %llu page%s: must hold at "
				"least 2", key, value, (unsigned long long)n, n == 1 ? "" : "s");
	for (uint32_t f = 0; f < t->nframes; f++) {
		uint32_t s = t->owner[f];
		if (s != NO_PAGE && (p->pages[s].pins || p->pages[s].state == P_MOVING))
			busy++;
	}
	if (n <= busy)
		return kvt_errf(err, errlen, -EBUSY, "%s = %s: %llu frames, but %llu pages of the "
				"%s tier are pinned (sequence tails, batches) or moving: it needs "
				"more than that", key, value, (unsigned long long)n,
				(unsigned long long)busy, kvt_tier_name(ti));
	for (int b = ti + 1; b <= p->last; b++)
		room += p->t[b].online;
	for (uint32_t s = 0; s < p->npages; s++) {
		const struct page *pg = &p->pages[s];
		need += (pg->state == P_READY || pg->state == P_MOVING) && pg->top >= ti;
	}
	if (need > room)
		return kvt_errf(err, errlen, -ENOSPC, "%s = %s: %llu pages have no copy above the "
				"%s tier, and at %llu frames it and the tiers below hold %llu: "
				"they would have nowhere to go",
				key, value, (unsigned long long)need, kvt_tier_name(ti),
				(unsigned long long)n, (unsigned long long)room);
	return 0;
}

int kvt_host_limit(struct kvt_pager *p, uint32_t n)
{
	uint64_t want = p->cfg.tier[KVT_TIER_HOST].bytes / p->page_bytes;

	if (n < want && n < p->t[KVT_TIER_HOST].online) {
		char v[24];
		snprintf(v, sizeof(v), "%u", n);
		int r = kvt_resize_check(p, KVT_TIER_HOST, n, "psi", v, NULL, 0);
		if (r)
			return r;
	}
	p->psi_frames = n;
	kvt_tier_apply(p, KVT_TIER_HOST);
	return 0;
}

void kvt_pager_pressure(struct kvt_pager *p, int r, double avg10, int triggered)
{
	pthread_mutex_lock(&p->lock);
	p->psi_ok = !r;
	p->psi_avg10 = r ? 0 : avg10;
	uint64_t pb = p->page_bytes;
	uint64_t top = p->cfg.tier[KVT_TIER_HOST].bytes / pb;
	uint64_t floor = p->cfg.host_floor / pb;
	double th = p->cfg.psi_threshold;
	if (floor < 2)
		floor = 2;
	if (top > p->t[KVT_TIER_HOST].nframes)
		top = p->t[KVT_TIER_HOST].nframes;
	uint64_t step = top > floor ? (top - floor + 7) / 8 : 1;
	uint64_t cur = p->psi_frames < top ? p->psi_frames : top;
	if (!r && th > 0 && (avg10 >= th || triggered) && cur > floor) {
		uint64_t n = cur > floor + step ? cur - step : floor;
		/* Not below what the pinned pages and the pages with nowhere
		 * else to go need: try smaller steps down to one frame. */
		while (n < cur && kvt_host_limit(p, (uint32_t)n))
			n += (cur - n + 1) / 2;
		if (n < cur)
			p->psi_shrinks++;
	} else if ((r || th <= 0 || avg10 < th / 2) && p->psi_frames != UINT32_MAX) {
		uint64_t n = cur + step;
		if (!kvt_host_limit(p, n >= top ? UINT32_MAX : (uint32_t)n))
			p->psi_grows++;
	}
	pthread_mutex_unlock(&p->lock);
}
