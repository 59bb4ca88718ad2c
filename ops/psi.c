/* SPDX-License-Identifier: MIT */
/*
 * The memory-pressure watcher: a thread that reads the "some avg10" of
 * psi.path (/proc/pressure/memory) every psi.interval_ms and hands it to
 * the pager's pressure hook (kvt_pager_pressure, pager/hooks.h), which
 * limits the host tier through the live capacity mechanism: while
 * avg10 is at or above psi.threshold it takes an eighth of the way
 * between tier.host.bytes and tier.host.floor off at each reading, down
 * to the floor; once avg10 is below half the threshold it gives the same
 * step back at each reading, up to tier.host.bytes. Between the two it
 * holds.
 *
 * On a real PSI file (procfs) it also registers a trigger (stall of
 * threshold per cent of a 2 s window) and wakes on POLLPRI, so pressure
 * is acted on without waiting for the next reading; where the kernel
 * refuses the trigger, or the file is not on procfs (a test's fake file),
 * it only reads periodically. The file is opened anew at each reading, so
 * a file replaced by rename is seen.
 *
 * A file that cannot be read or parsed is said once through the log
 * callback; the watcher carries on reading, quietly, and the pager runs
 * as if there were no pressure.
 *
 * Library rules: nothing prints, functions return 0 or -errno.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <kvt/config.h>
#include <kvt/pager.h>
#include "ops/psi.h"
#include "pager/hooks.h"

#define PROC_MAGIC	0x9fa0		/* PROC_SUPER_MAGIC */
#define TRIGGER_WIN_US	2000000u	/* unprivileged triggers need a multiple of 2 s */

struct kvt_psi {
	struct kvt_pager *p;
	pthread_t th;
	int efd;			/* eventfd: stop */
	int tfd;			/* trigger, or -1 */
	int warned;			/* the reading failed and we said so */
	char path[KVT_PATH_MAX];
	unsigned interval_ms;
};

/* "some avg10=X ..." of the text in buf: 0 and *avg10, or -EINVAL. */
int kvt_psi_parse(const char *buf, double *avg10)
{
	for (const char *l = buf; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
		const char *a;
		char *end;

		if (strncmp(l, "some ", 5))
			continue;
		a = strstr(l, " avg10=");
		if (!a || (strchr(l, '\n') && a > strchr(l, '\n')))
			return -EINVAL;
		double v = strtod(a + 7, &end);
		if (end == a + 7 || (*end != ' ' && *end != '\n' && *end) || !(v >= 0 && v <= 100))
			return -EINVAL;
		*avg10 = v;
		return 0;
	}
	return -EINVAL;
}

/* Read the file: 0 and *avg10, or -errno with why[] filled. */
static int read_avg10(struct kvt_psi *w, double *avg10, char *why, size_t len)
{
	char buf[512];
	ssize_t n = 0;
	int fd = open(w->path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		int e = errno;
		snprintf(why, len, "%s", strerror(e));
		return -e;
	}
	while ((size_t)n < sizeof(buf) - 1) {
		ssize_t r = read(fd, buf + n, sizeof(buf) - 1 - (size_t)n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;
			close(fd);
			snprintf(why, len, "%s", strerror(e));
			return -e;
		}
		if (!r)
			break;
		n += r;
	}
	close(fd);
	buf[n] = 0;
	if (kvt_psi_parse(buf, avg10)) {
		snprintf(why, len, "no \"some avg10=\" line with a value 0..100");
		return -EINVAL;
	}
	return 0;
}

/* A trigger where the kernel gives one (procfs only: writing to a plain
 * file would change it). */
static void open_trigger(struct kvt_psi *w, double threshold)
{
	struct statfs sf;
	char spec[64];
	int fd;

	w->tfd = -1;
	fd = open(w->path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return;
	if (fstatfs(fd, &sf) || sf.f_type != PROC_MAGIC) {
		close(fd);
		return;
	}
	unsigned stall = (unsigned)(threshold / 100.0 * TRIGGER_WIN_US);
	if (stall < 1000)
		stall = 1000;
	int n = snprintf(spec, sizeof(spec), "some %u %u", stall, TRIGGER_WIN_US);
	if (write(fd, spec, (size_t)n + 1) < 0) {
		kvt_plog(w->p, KVT_LOG_INFO, "psi: %s: no trigger (%s): reading every %u ms",
			w->path, strerror(errno), w->interval_ms);
		close(fd);
		return;
	}
	w->tfd = fd;
}

/* One reading and what it asks of the host tier. */
static void tick(struct kvt_psi *w, int triggered)
{
	struct kvt_pager *p = w->p;
	char why[128];
	double avg10 = 0;
	int r = read_avg10(w, &avg10, why, sizeof(why));

	if (r && !w->warned) {
		kvt_plog(p, KVT_LOG_WARN, "psi: %s: %s: the host tier will not shrink under "
			"memory pressure", w->path, why);
		w->warned = 1;
	}
	kvt_pager_pressure(p, r, avg10, triggered);
}

static void *watch(void *arg)
{
	struct kvt_psi *w = arg;

	tick(w, 0);
	for (;;) {
		struct pollfd pfd[2] = {
			{ .fd = w->efd, .events = POLLIN },
			{ .fd = w->tfd, .events = POLLPRI },
		};
		int n = poll(pfd, w->tfd >= 0 ? 2 : 1, (int)w->interval_ms);
		if (n < 0 && errno != EINTR)
			break;
		if (n > 0 && pfd[0].revents)
			break;
		int trig = n > 0 && (pfd[1].revents & POLLPRI);
		if (n > 0 && (pfd[1].revents & (POLLERR | POLLNVAL))) {
			close(w->tfd);
			w->tfd = -1;
		}
		tick(w, trig);
	}
	return NULL;
}

int kvt_psi_start(struct kvt_pager *p, struct kvt_psi **out)
{
	struct kvt_psi *w = calloc(1, sizeof(*w));
	struct kvt_config *cfg = malloc(sizeof(*cfg));
	int r;

	if (!w || !cfg) {
		free(w);
		free(cfg);
		return -ENOMEM;
	}
	kvt_pager_config(p, cfg);
	w->p = p;
	w->tfd = -1;
	snprintf(w->path, sizeof(w->path), "%s", cfg->psi_path);
	w->interval_ms = cfg->psi_interval_ms;
	w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->efd < 0) {
		r = -errno;
		free(cfg);
		free(w);
		return r;
	}
	open_trigger(w, cfg->psi_threshold);
	free(cfg);
	r = -pthread_create(&w->th, NULL, watch, w);
	if (r) {
		if (w->tfd >= 0)
			close(w->tfd);
		close(w->efd);
		free(w);
		return r;
	}
	*out = w;
	return 0;
}

void kvt_psi_stop(struct kvt_psi *w)
{
	uint64_t one = 1;

	if (!w)
		return;
	while (write(w->efd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
	pthread_join(w->th, NULL);
	if (w->tfd >= 0)
		close(w->tfd);
	close(w->efd);
	free(w);
}
