/* SPDX-License-Identifier: MIT */
/*
 * The cpu device. Its "device memory" is a separate arena of host memory
 * whose size is the VRAM budget; copies run on one copy thread per
 * direction (like one CUDA stream each way) and complete in order, so a
 * fence is just a sequence number. An optional bandwidth cap emulates PCIe.
 */
#define _GNU_SOURCE		/* pthread_setname_np */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "kernels/device.h"

#define QLEN 8192		/* copies queued per direction */
#define WAKE_EVERY 64		/* copies between wake-ups of waiters */

struct copy {
	void	   *dst;
	const void *src;
	size_t	    bytes;
};

struct engine {
	pthread_mutex_t	lock;
	pthread_cond_t	work;		/* copy thread waits for copies */
	pthread_cond_t	done;		/* fence waiters, and submitters when full */
	struct copy	q[QLEN];
	uint64_t	head;		/* next sequence number to queue (starts 1) */
	uint64_t	tail;		/* copies completed: fences <= tail are done */
	int		sleeping;
	int		waiters;
	int		stop;
	double		ns_per_byte;	/* 0: uncapped */
	pthread_t	thread;
	int		started;
	uint64_t	*busy_ns;	/* the device's counter for this engine */
};

struct cpu_dev {
	struct engine e[2];		/* [KVT_H2D] (D2D too), [KVT_D2H] */
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t)
{
	struct timespec ts = { (time_t)(t / 1000000000ull), (long)(t % 1000000000ull) };
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

/* The copy thread reads the ring without the lock: a producer fills an
 * entry before it publishes head (release), and the thread publishes tail
 * (release) after each copy. The lock is only for sleeping and waking. */
static void *copy_thread(void *arg)
{
	struct engine *e = arg;
	uint64_t busy_until = 0;

	for (;;) {
		uint64_t tail = __atomic_load_n(&e->tail, __ATOMIC_RELAXED);
		uint64_t head = __atomic_load_n(&e->head, __ATOMIC_ACQUIRE);
		if (head == tail + 1) {
			/* Spin a little before sleeping: back-to-back copies
			 * of small pages would otherwise pay a wake-up each. */
			for (int i = 0; i < 4000 && __atomic_load_n(&e->head, __ATOMIC_ACQUIRE) == tail + 1; i++)
				__builtin_ia32_pause();
			pthread_mutex_lock(&e->lock);
			while (e->head == tail + 1 && !e->stop) {
				e->sleeping = 1;
				pthread_cond_wait(&e->work, &e->lock);
				e->sleeping = 0;
			}
			int stop = e->head == tail + 1 && e->stop;
			pthread_mutex_unlock(&e->lock);
			if (stop)
				break;
			continue;
		}
		/* Everything queued up to head, without looking at the shared
		 * counters in between: one release store per copy. */
		uint64_t t0 = now_ns();
		for (; tail + 1 != head; tail++) {
			const struct copy *c = &e->q[(tail + 1) % QLEN];
			memcpy(c->dst, c->src, c->bytes);
			if (e->ns_per_byte > 0) {
				uint64_t t = now_ns();
				/* Behind by a late wake-up: catch up. Idle a while:
				 * the link was free, start the budget afresh. */
				if (busy_until + 1000000 < t)
					busy_until = t;
				busy_until += (uint64_t)(c->bytes * e->ns_per_byte);
				/* Sleep only when well ahead: a sleep overshoots by
				 * tens of microseconds. */
				if (busy_until > t + 200000)
					sleep_until(busy_until);
			}
			__atomic_store_n(&e->tail, tail + 1, __ATOMIC_RELEASE);
			/* Waiters are woken every WAKE_EVERY copies and at the
			 * end of what was queued; each re-checks its own
			 * condition. The fence pairs with the waiters' increment
			 * then re-check: either they see the new tail or we see
			 * them. */
			if ((tail + 1) % WAKE_EVERY == 0 || tail + 2 == head) {
				__atomic_thread_fence(__ATOMIC_SEQ_CST);
				if (__atomic_load_n(&e->waiters, __ATOMIC_RELAXED)) {
					pthread_mutex_lock(&e->lock);
					pthread_cond_broadcast(&e->done);
					pthread_mutex_unlock(&e->lock);
				}
			}
		}
		kvt_dev_count(e->busy_ns, now_ns() - t0);
	}
	return NULL;
}

static int cpu_alloc(void *ctx, size_t bytes, void **out)
{
	void *p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	*out = p;
	return 0;
}

static void cpu_free(void *ctx, void *p, size_t bytes)
{
	if (p)
		munmap(p, bytes ? bytes : 1);
}

static int cpu_copy_async(void *ctx, void *dst, const void *src, size_t bytes,
			  int dir, uint64_t *fence)
{
	struct cpu_dev *d = ctx;
	struct engine *e;

	if (dir != KVT_H2D && dir != KVT_D2H && dir != KVT_D2D)
		return -EINVAL;
	dir = dir == KVT_D2H;		/* D2D runs on the H2D engine, in its order */
	e = &d->e[dir];
	pthread_mutex_lock(&e->lock);
	if (e->head - __atomic_load_n(&e->tail, __ATOMIC_ACQUIRE) > QLEN - 1) {
		/* Full: wait for a group of slots, not one, or producer and
		 * copier would take turns sleeping once per copy. */
		__atomic_add_fetch(&e->waiters, 1, __ATOMIC_SEQ_CST);
		while (e->head - __atomic_load_n(&e->tail, __ATOMIC_SEQ_CST) > QLEN - WAKE_EVERY)
			pthread_cond_wait(&e->done, &e->lock);
		__atomic_sub_fetch(&e->waiters, 1, __ATOMIC_SEQ_CST);
	}
	e->q[e->head % QLEN] = (struct copy){ dst, src, bytes };
	*fence = e->head << 1 | (uint64_t)dir;
	__atomic_store_n(&e->head, e->head + 1, __ATOMIC_RELEASE);
	if (e->sleeping)
		pthread_cond_signal(&e->work);
	pthread_mutex_unlock(&e->lock);
	return 0;
}

static int cpu_fence_done(void *ctx, uint64_t fence)
{
	struct cpu_dev *d = ctx;
	struct engine *e = &d->e[fence & 1];
	return fence == 0 || __atomic_load_n(&e->tail, __ATOMIC_ACQUIRE) >= fence >> 1;
}

static int cpu_fence_wait(void *ctx, uint64_t fence)
{
	struct cpu_dev *d = ctx;
	struct engine *e = &d->e[fence & 1];

	for (int i = 0; i < 4000; i++) {
		if (cpu_fence_done(ctx, fence))
			return 0;
		__builtin_ia32_pause();
	}
	pthread_mutex_lock(&e->lock);
	while (__atomic_load_n(&e->tail, __ATOMIC_ACQUIRE) < fence >> 1) {
		__atomic_add_fetch(&e->waiters, 1, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(&e->tail, __ATOMIC_SEQ_CST) < fence >> 1)
			pthread_cond_wait(&e->done, &e->lock);
		__atomic_sub_fetch(&e->waiters, 1, __ATOMIC_SEQ_CST);
	}
	pthread_mutex_unlock(&e->lock);
	return 0;
}

static void cpu_close(void *ctx)
{
	struct cpu_dev *d = ctx;
	for (int i = 0; i < 2; i++) {
		struct engine *e = &d->e[i];
		if (e->started) {
			pthread_mutex_lock(&e->lock);
			e->stop = 1;
			pthread_cond_signal(&e->work);
			pthread_mutex_unlock(&e->lock);
			pthread_join(e->thread, NULL);
		}
		pthread_mutex_destroy(&e->lock);
		pthread_cond_destroy(&e->work);
		pthread_cond_destroy(&e->done);
	}
	free(d);
}

static void cpu_describe(void *ctx, struct kvt_device_info *out)
{
	struct cpu_dev *d = ctx;

	if (d->e[0].ns_per_byte > 0)
		snprintf(out->desc, sizeof(out->desc), "host memory, copies capped at %.3g GB/s",
			 1.0 / d->e[0].ns_per_byte);
	else
		snprintf(out->desc, sizeof(out->desc), "host memory");
}

static const struct kvt_device_ops cpu_ops = {
	.name		  = "cpu",
	.alloc		  = cpu_alloc,
	.free		  = cpu_free,
	.copy_async	  = cpu_copy_async,
	.fence_wait	  = cpu_fence_wait,
	.fence_done	  = cpu_fence_done,
	.describe	  = cpu_describe,
	.host_addressable = 1,
	.host_visible	  = 1,
	.close		  = cpu_close,
};

int kvt_cpu_device_open(double copy_gbps, struct kvt_device *out)
{
	struct cpu_dev *d = calloc(1, sizeof(*d));
	int r = 0;

	if (!d)
		return -ENOMEM;
	for (int i = 0; i < 2; i++) {
		struct engine *e = &d->e[i];
		pthread_mutex_init(&e->lock, NULL);
		pthread_cond_init(&e->work, NULL);
		pthread_cond_init(&e->done, NULL);
		e->head = 1;
		e->ns_per_byte = copy_gbps > 0 ? 1.0 / copy_gbps : 0;
		e->busy_ns = &out->cnt.copy_ns[i];
	}
	for (int i = 0; i < 2; i++) {
		r = -pthread_create(&d->e[i].thread, NULL, copy_thread, &d->e[i]);
		if (r)
			goto fail;
		d->e[i].started = 1;
		pthread_setname_np(d->e[i].thread, i ? "kvt-copy-d2h" : "kvt-copy-h2d");
	}
	out->ops = &cpu_ops;
	out->ctx = d;
	/* compute stays NULL: the cpu kernels (kvt_compute_open). Naming
	 * them here would link them, and OpenBLAS with its threads, into
	 * every program that uses the pager alone. */
	out->in_place_auto = 1;	/* a copy up would be a memcpy that buys nothing */
	return 0;
fail:
	cpu_close(d);
	return r;
}
