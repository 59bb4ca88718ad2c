/* SPDX-License-Identifier: MIT */
/*
 * Text into a caller's buffer, snprintf-style: the stats as JSON
 * (stats.c) and as Prometheus text (ops/metrics.c).
 */
#ifndef KVT_PAGER_OUT_H
#define KVT_PAGER_OUT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

struct out {
	char *buf;
	size_t len, pos;	/* pos counts what would have been written */
};

/* Append; past len only pos moves, so the caller learns the size it needed. */
static inline void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	size_t room = o->pos < o->len ? o->len - o->pos : 0;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(o->buf + (room ? o->pos : 0), room, fmt, ap);
	va_end(ap);
	if (n > 0)
		o->pos += (size_t)n;
}

#endif
