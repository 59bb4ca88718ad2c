/* SPDX-License-Identifier: MIT */
/*
 * The control socket's protocol (ops/control.c) without the socket: what
 * the fuzz target (tests/fuzz/fuzz_control.c) drives. Not installed.
 */
#ifndef KVT_OPS_CONTROL_H
#define KVT_OPS_CONTROL_H

#include <stddef.h>

#include <kvt/pager.h>

/* The control protocol without a socket, for the fuzz target.
 * The n bytes at in are one client's whole stream (lines, then EOF):
 * every complete line is answered against p as the socket's thread would
 * answer it, and the replies, concatenated and NUL-terminated, go to *out
 * (malloc'd, NULL when there are none; *outlen bytes before the NUL).
 * An unfinished last line is dropped, as at EOF. 0 or -ENOMEM. */
int kvt_control_feed(struct kvt_pager *p, const char *in, size_t n, char **out, size_t *outlen);

#endif
