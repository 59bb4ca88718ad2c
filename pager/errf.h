/* SPDX-License-Identifier: MIT */
/*
 * The one-line messages that go with a -errno: config, live changes,
 * traces and the simulator all report through this.
 */
#ifndef KVT_PAGER_ERRF_H
#define KVT_PAGER_ERRF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* Write one line into err (when err and errlen allow); returns rc, so
 * `return kvt_errf(err, errlen, -EINVAL, ...)` reports and fails at once.
 * Text quoted from a file (a policy name in a trace's header, a key) may
 * hold any byte: control bytes show as '?', so the line stays one line. */
static inline int kvt_errf(char *err, size_t errlen, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static inline int kvt_errf(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
		for (char *c = err; *c; c++)
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				*c = '?';
	}
	return rc;
}

#endif
