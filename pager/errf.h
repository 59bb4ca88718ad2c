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
 * `return kvt_errf(err, errlen, -EINVAL, ...)` reports and fails at once. */
static inline int kvt_errf(char *err, size_t errlen, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static inline int kvt_errf(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return rc;
}

#endif
