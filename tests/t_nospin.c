/* SPDX-License-Identifier: MIT */
/* A page that cannot get a frame (the fast tier is all pinned tails) is
 * reported with -ENOSPC soon, without spinning, and comes up once a tail
 * goes away. */
#include <errno.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

static double cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
	       (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

static double wall_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_batch *b;
	struct kvt_view v;
	kvt_seq_t a, t[3];

	/* OpenBLAS starts threads of its own as it loads, and they spin a
	 * while for work that never comes (the kernels keep it on one
	 * thread): that CPU time is not the pager's. Without them, then. */
	(void)argc;
	if (!getenv("OPENBLAS_NUM_THREADS")) {
		setenv("OPENBLAS_NUM_THREADS", "1", 1);
		execv("/proc/self/exe", argv);
	}
	t_config(&cfg, 1, 4, 8, 64);
	for (int i = 0; i < KVT_NTIERS; i++)
		cfg.tier[i].wm_min = cfg.tier[i].wm_low = cfg.tier[i].wm_high = 0;
	cfg.prefetch_depth = 0;
	struct kvt_pager *p = t_open(&cfg, &dev);
	CHECK_EQ(kvt_seq_open(p, &a), 0);
	t_append(p, a, &cfg, 5, 0, 13);		/* 3 sealed pages + a 1-token tail */
	for (int i = 0; i < 3; i++) {		/* 3 more tails fill the fast tier */
		CHECK_EQ(kvt_seq_open(p, &t[i]), 0);
		t_append(p, t[i], &cfg, 6 + i, 0, 1);
	}
	uint32_t idx = 0;
	double w0 = wall_s(), c0 = cpu_s();
	CHECK_EQ(kvt_acquire(p, a, 0, &idx, 1, &b), 0);
	int r = kvt_batch_next(b, &v);
	double dw = wall_s() - w0, dc = cpu_s() - c0;
	kvt_batch_release(b);
	fprintf(stderr, "no frame: %d after %.3f s wall, %.3f s cpu\n", r, dw, dc);
	CHECK_EQ(r, -ENOSPC);
	CHECK_EQ(v.page, 0);
	CHECK(dw < 2.0 * t_slow());	/* soon, on a busy machine too */
	CHECK(dc < 0.5 * dw + 0.05);		/* waited, did not spin */

	/* A tail goes: the page comes up and reads right. */
	CHECK_EQ(kvt_seq_close(p, t[0]), 0);
	CHECK_EQ(kvt_acquire(p, a, 0, &idx, 1, &b), 0);
	CHECK_EQ(kvt_batch_next(b, &v), 1);
	CHECK_EQ(t_check_view(&cfg, 5, 0, &v), 0);
	kvt_batch_release(b);
	t_check_inv(p);
	for (int i = 1; i < 3; i++)
		CHECK_EQ(kvt_seq_close(p, t[i]), 0);
	CHECK_EQ(kvt_seq_close(p, a), 0);
	t_close(p, dev);
	return 0;
}
