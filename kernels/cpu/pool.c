/* SPDX-License-Identifier: MIT */
/*
 * The kernels' thread pool (kernels.h). The decode loop calls
 * kvt_pool_run a few hundred times per token, so a run must cost little
 * more than handing its tasks out: no lock, no allocation, and no system
 * call unless a worker went to sleep.
 *
 * One run, as the caller sees it:
 *
 *   1. with no worker inside (gen even, busy == 0) write fn, arg and
 *      n_tasks, reset next, then open the run: gen += 1 (odd);
 *   2. if any worker sleeps, FUTEX_WAKE (up to n_tasks - 1 of them) on gen;
 *   3. take tasks from next (atomic fetch-add) until none are left;
 *   4. close the run: gen += 1 (even); then wait for busy == 0.
 *
 * And as a worker sees it: spin on gen for SPIN_NS, then sleep on it
 * (futex); when gen changes to an odd value, busy += 1, read gen again
 * and join only if it is still odd (open), take tasks, busy -= 1.
 *
 * Why this is safe without a lock. A worker only touches the run's fields
 * while it counts in busy and has seen the run open after counting
 * itself; the caller only writes them after it closed the run and then
 * saw busy == 0. Both sides use sequentially consistent accesses, so
 * either the caller's busy load sees the worker, or the worker's gen load
 * sees the close (Dekker). The same argument, on sleepers and gen, means
 * a worker about to sleep either sees the new run or is woken. Workers
 * that slept through a whole run never join it and cost it nothing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cpu/kernels.h"

#define MAX_THREADS	256
#define SPIN_NS		50000	/* a worker spins this long before it sleeps */
#define CACHELINE	64

typedef void (*task_fn)(void *arg, unsigned task, unsigned thread);

struct worker {
	struct kvt_pool *pool;
	unsigned	 id;		/* 1..n_threads-1; the caller is 0 */
	pthread_t	 th;
};

struct kvt_pool {
	unsigned	 n_threads;	/* including the caller */
	unsigned	 started;	/* workers created */
	struct worker	*w;		/* (n_threads - 1) */

	/* Hot words: gen is read by every spinning worker, next and busy
	 * are written by every task taker.
	 *   gen:	odd while a run is open; the futex word
	 *   sleepers:	workers in (or about to enter) FUTEX_WAIT
	 *   stop:	set before the last change of gen
	 *   next:	the next task to hand out
	 *   busy:	workers inside the open run
	 * The current run (fn, arg, n_tasks: see the comment at the top for
	 * who may touch them and when) shares gen's line, so that a worker
	 * that sees the run open has them in the same transfer. */
	uint32_t	 gen __attribute__((aligned(CACHELINE)));
	uint32_t	 sleepers;
	int		 stop;
	unsigned	 n_tasks;
	task_fn		 fn;
	void		*arg;
	unsigned	 next __attribute__((aligned(CACHELINE)));
	unsigned	 busy __attribute__((aligned(CACHELINE)));
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void futex_wait(uint32_t *addr, uint32_t val)
{
	/* EAGAIN (gen already moved) and EINTR both just mean: look again. */
	syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(uint32_t *addr, int n)
{
	syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

/* Take tasks of the open run until none are left. */
static void take_tasks(struct kvt_pool *p, unsigned thread)
{
	task_fn fn = p->fn;
	void *arg = p->arg;
	unsigned n = p->n_tasks, i;

	while ((i = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED)) < n)
		fn(arg, i, thread);
}

/* Wait until gen differs from seen and return it: spin for SPIN_NS (a
 * run that follows soon costs no system call on either side), then sleep
 * on the futex. */
static uint32_t wait_gen(struct kvt_pool *p, uint32_t seen)
{
	uint64_t t0 = 0;
	uint32_t g;

	for (unsigned i = 1;; i++) {
		g = __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE);
		if (g != seen)
			return g;
		cpu_relax();
		if (i % 64 == 0) {
			uint64_t t = now_ns();
			if (!t0)
				t0 = t;
			else if (t - t0 > SPIN_NS)
				break;
		}
	}
	for (;;) {
		__atomic_fetch_add(&p->sleepers, 1, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(&p->gen, __ATOMIC_SEQ_CST) == seen)
			futex_wait(&p->gen, seen);
		__atomic_fetch_sub(&p->sleepers, 1, __ATOMIC_SEQ_CST);
		g = __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE);
		if (g != seen)
			return g;
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct kvt_pool *p = w->pool;
	uint32_t seen = 0, g;

	for (;;) {
		g = wait_gen(p, seen);
		if (__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE))
			break;
		seen = g;
		if (!(g & 1))
			continue;		/* a run we missed, already closed */
		__atomic_fetch_add(&p->busy, 1, __ATOMIC_SEQ_CST);
		g = __atomic_load_n(&p->gen, __ATOMIC_SEQ_CST);
		if (g & 1) {
			seen = g;
			take_tasks(p, w->id);
		}
		__atomic_fetch_sub(&p->busy, 1, __ATOMIC_RELEASE);
	}
	return NULL;
}

/* Threads this process may run on (its affinity mask), else the online
 * cpus. */
static unsigned cpu_count(void)
{
	cpu_set_t set;
	long n;

	if (!sched_getaffinity(0, sizeof(set), &set) && CPU_COUNT(&set) > 0)
		return (unsigned)CPU_COUNT(&set);
	n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (unsigned)n : 1;
}

int kvt_pool_new(unsigned n_threads, struct kvt_pool **out)
{
	struct kvt_pool *p;
	sigset_t all, old;
	int ret = 0;

	*out = NULL;
	if (!n_threads)
		n_threads = cpu_count();
	if (n_threads > MAX_THREADS)
		n_threads = MAX_THREADS;
	p = aligned_alloc(CACHELINE, (sizeof(*p) + CACHELINE - 1) / CACHELINE * CACHELINE);
	if (!p)
		return -ENOMEM;
	*p = (struct kvt_pool){ .n_threads = n_threads };
	if (n_threads > 1) {
		p->w = calloc(n_threads - 1, sizeof(*p->w));
		if (!p->w) {
			ret = -ENOMEM;
			goto err;
		}
	}
	/* Workers take no signals: they belong to the process's threads
	 * that handle them, not to a library's. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (unsigned i = 0; i + 1 < n_threads; i++) {
		char name[16];

		p->w[i] = (struct worker){ .pool = p, .id = i + 1 };
		ret = -pthread_create(&p->w[i].th, NULL, worker_main, &p->w[i]);
		if (ret)
			break;
		snprintf(name, sizeof(name), "kvt-pool-%u", i + 1);
		pthread_setname_np(p->w[i].th, name);
		p->started++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret)
		goto err;
	*out = p;
	return 0;
err:
	kvt_pool_free(p);
	return ret;
}

void kvt_pool_free(struct kvt_pool *p)
{
	if (!p)
		return;
	__atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
	__atomic_fetch_add(&p->gen, 2, __ATOMIC_SEQ_CST);	/* stays even: no run */
	futex_wake(&p->gen, INT_MAX);
	for (unsigned i = 0; i < p->started; i++)
		pthread_join(p->w[i].th, NULL);
	free(p->w);
	free(p);
}

unsigned kvt_pool_threads(const struct kvt_pool *p)
{
	return p ? p->n_threads : 1;
}

void kvt_pool_run(struct kvt_pool *p, void (*fn)(void *arg, unsigned task, unsigned thread),
		  void *arg, unsigned n_tasks)
{
	uint32_t g;

	if (!p || p->n_threads == 1 || n_tasks <= 1) {
		for (unsigned i = 0; i < n_tasks; i++)
			fn(arg, i, 0);
		return;
	}
	p->fn = fn;
	p->arg = arg;
	p->n_tasks = n_tasks;
	__atomic_store_n(&p->next, 0, __ATOMIC_RELAXED);
	g = __atomic_load_n(&p->gen, __ATOMIC_RELAXED) + 1;
	__atomic_store_n(&p->gen, g, __ATOMIC_SEQ_CST);
	/* A wake-up is a system call (tens of microseconds on some VMs):
	 * only when someone sleeps, and no more workers than there are
	 * tasks besides the caller's. */
	if (__atomic_load_n(&p->sleepers, __ATOMIC_SEQ_CST))
		futex_wake(&p->gen, n_tasks - 1 < INT_MAX ? (int)(n_tasks - 1) : INT_MAX);

	take_tasks(p, 0);

	/* Every task is handed out; close the run so that late workers stay
	 * out, then wait for those still running one. Tasks are short, so
	 * spin; yield now and then in case a worker was preempted on an
	 * oversubscribed machine. */
	__atomic_store_n(&p->gen, g + 1, __ATOMIC_SEQ_CST);
	for (unsigned i = 1; __atomic_load_n(&p->busy, __ATOMIC_SEQ_CST); i++) {
		cpu_relax();
		if (i % 4096 == 0)
			sched_yield();
	}
}
