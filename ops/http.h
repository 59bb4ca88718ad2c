/* SPDX-License-Identifier: MIT */
/*
 * The metrics endpoint (metrics.http): a thread serving GET /metrics over
 * HTTP/1.1 on a loopback address. Private to ops/.
 */
#ifndef KVT_OPS_HTTP_H
#define KVT_OPS_HTTP_H

#include <stddef.h>
#include <sys/socket.h>

/* Parse "HOST:PORT" with HOST 127.x.y.z, localhost or [::1] and PORT
 * 0..65535 (0: any free port). 0 and *sa, or -EINVAL with why (one line)
 * naming what is wrong: anything but a loopback address is refused. */
int kvt_http_addr(const char *s, struct sockaddr_storage *sa, socklen_t *salen,
		  char *why, size_t whylen);

struct kvt_pager;
struct kvt_http;
/* Bind, listen, start the thread. 0, or -errno with why filled. */
int  kvt_http_start(struct kvt_pager *p, const char *addr, struct kvt_http **out,
		    char *why, size_t whylen);
/* The port bound (useful with port 0). */
int  kvt_http_port(const struct kvt_http *h);
void kvt_http_stop(struct kvt_http *h);

/* The request parser without a socket, for the fuzz target: the n bytes
 * at in arrive as one client's stream, in reads of at most the head's
 * room, and the reply the server would send (status line, headers, body)
 * goes to *out (malloc'd; NULL and *outlen 0 when the stream ends before
 * a whole request head, which the server answers by closing). 0 or
 * -ENOMEM. */
int kvt_http_feed(struct kvt_pager *p, const char *in, size_t n, char **out, size_t *outlen);

#endif
