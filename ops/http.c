/* SPDX-License-Identifier: MIT */
/*
 * The metrics endpoint (metrics.http = 127.0.0.1:9187): one thread serving
 * HTTP/1.1 on a loopback address, for a Prometheus scraper on the same
 * machine.
 *
 *   GET /metrics (or HEAD)  200, Content-Type: text/plain; version=0.0.4
 *   another method there    405, Allow: GET, HEAD
 *   any other path          404
 *   a malformed request     400 (also a request head over REQ_MAX bytes)
 *
 * Every reply carries Content-Length and Connection: close; the
 * connection is closed after one reply. A query string is ignored.
 *
 * Nobody waits for a client: the thread polls the listening socket, an
 * eventfd (stop) and up to MAX_CLIENTS non-blocking sockets, each with a
 * deadline (CLIENT_MS from accept for the request and the reply); a client
 * past it is closed. When all slots are taken, a new connection takes the
 * slot of the oldest client that has not finished its request, so silent
 * clients cannot lock the endpoint. The reply is built from
 * kvt_pager_stats (which takes the pager lock briefly) and
 * kvt_stats_prometheus.
 *
 * Only loopback addresses are accepted (kvt_http_addr), since the
 * endpoint has no authentication.
 *
 * Library rules: nothing prints, functions return 0 or -errno.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <kvt/pager.h>
#include "ops/http.h"
#include "pager/hooks.h"

#define MAX_CLIENTS	16
#define REQ_MAX		8192		/* bytes of a request head */
#define CLIENT_MS	5000		/* a client's whole life */
#define LINGER_MS	1000		/* after the reply, waiting for the peer to close */

struct hclient {
	int fd;				/* -1: free slot */
	int state;			/* 0 reading, 1 writing, 2 lingering */
	uint64_t deadline, since;	/* ms */
	char in[REQ_MAX];
	size_t inlen;
	char *out;
	size_t outoff, outlen;
};

struct kvt_http {
	struct kvt_pager *p;
	pthread_t th;
	int lfd, efd;
	int port;
	struct hclient cl[MAX_CLIENTS];
};

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int kvt_http_addr(const char *s, struct sockaddr_storage *sa, socklen_t *salen,
		  char *why, size_t whylen)
{
	unsigned char addr[16];
	unsigned port;
	int v6, r;

	memset(sa, 0, sizeof(*sa));
	r = kvt_config_http_addr(s, addr, &v6, &port, why, whylen);
	if (r)
		return r;
	if (v6) {
		struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)sa;
		memcpy(&a6->sin6_addr, addr, 16);
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons((uint16_t)port);
		*salen = sizeof(*a6);
		return 0;
	}
	struct sockaddr_in *a4 = (struct sockaddr_in *)sa;
	memcpy(&a4->sin_addr, addr, 4);
	a4->sin_family = AF_INET;
	a4->sin_port = htons((uint16_t)port);
	*salen = sizeof(*a4);
	return 0;
}

/* --- replies ------------------------------------------------------------- */

static void client_close(struct hclient *c)
{
	if (c->fd >= 0)
		close(c->fd);
	free(c->out);
	c->fd = -1;
	c->out = NULL;
	c->inlen = c->outoff = c->outlen = 0;
	c->state = 0;
}

/* Set the reply: status line, headers, body (may be NULL). */
static void reply(struct hclient *c, const char *status, const char *extra,
		  const char *ctype, const char *body, size_t blen, int head_only)
{
	char hdr[512];
	int n = snprintf(hdr, sizeof(hdr), "HTTP/1.1 %s\r\nContent-Type: %s\r\n"
			 "Content-Length: %zu\r\nConnection: close\r\n%s\r\n",
			 status, ctype, blen, extra ? extra : "");
	size_t len = (size_t)n + (head_only ? 0 : blen);

	c->out = malloc(len ? len : 1);
	if (!c->out) {
		client_close(c);
		return;
	}
	memcpy(c->out, hdr, (size_t)n);
	if (!head_only && blen)
		memcpy(c->out + n, body, blen);
	c->outlen = len;
	c->outoff = 0;
	c->state = 1;
}

static void reply_text(struct hclient *c, const char *status, const char *extra,
		       const char *msg)
{
	reply(c, status, extra, "text/plain; charset=utf-8", msg, strlen(msg), 0);
}

/* The exposition, in a buffer that grows until it fits; NULL on failure. */
static char *exposition(struct kvt_pager *p, size_t *len)
{
	struct kvt_stats *st = malloc(sizeof(*st));
	size_t cap = 32768;
	char *buf = NULL;

	if (!st || kvt_pager_stats(p, st)) {
		free(st);
		return NULL;
	}
	for (;;) {
		buf = malloc(cap);
		if (!buf)
			break;
		int n = kvt_stats_prometheus(st, buf, cap);
		if (n >= 0) {
			*len = (size_t)n;
			break;
		}
		free(buf);
		buf = NULL;
		if (n != -ENOSPC || cap >= (16u << 20))
			break;
		cap *= 2;
	}
	free(st);
	return buf;
}

static int token_char(char ch)
{
	return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
	       strchr("!#$%&'*+-.^_`|~", ch);
}

/* A complete request head in c->in[0, end): answer it. */
static void answer(struct kvt_http *h, struct hclient *c, size_t end)
{
	char *s = c->in, *line_end, *sp1, *sp2, *q;

	c->in[end] = 0;
	line_end = strstr(s, "\n");
	*line_end = 0;
	if (line_end > s && line_end[-1] == '\r')
		line_end[-1] = 0;
	/* METHOD SP TARGET SP HTTP/1.x */
	sp1 = strchr(s, ' ');
	sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
	if (!sp1 || !sp2 || sp1 == s || sp2 == sp1 + 1 || strchr(sp2 + 1, ' ') ||
	    (strcmp(sp2 + 1, "HTTP/1.1") && strcmp(sp2 + 1, "HTTP/1.0")) || sp1[1] != '/') {
		reply_text(c, "400 Bad Request", NULL, "bad request line\n");
		return;
	}
	for (q = s; q < sp1; q++)
		if (!token_char(*q)) {
			reply_text(c, "400 Bad Request", NULL, "bad method\n");
			return;
		}
	for (q = sp1 + 1; q < sp2; q++)
		if ((unsigned char)*q <= 0x20 || *q == 0x7f) {
			reply_text(c, "400 Bad Request", NULL, "bad target\n");
			return;
		}
	/* Header lines: "name: value", name a token. */
	for (char *l = line_end + 1; *l;) {
		char *nl = strchr(l, '\n');
		size_t n = nl ? (size_t)(nl - l) : strlen(l);
		if (n && l[n - 1] == '\r')
			n--;
		if (n) {
			char *colon = memchr(l, ':', n);
			if (!colon || colon == l) {
				reply_text(c, "400 Bad Request", NULL, "bad header line\n");
				return;
			}
			for (q = l; q < colon; q++)
				if (!token_char(*q)) {
					reply_text(c, "400 Bad Request", NULL, "bad header name\n");
					return;
				}
		}
		l = nl ? nl + 1 : l + n;
		if (!nl)
			break;
	}
	*sp1 = *sp2 = 0;
	q = strchr(sp1 + 1, '?');
	if (q)
		*q = 0;
	if (strcmp(sp1 + 1, "/metrics")) {
		reply_text(c, "404 Not Found", NULL, "not found: try /metrics\n");
		return;
	}
	int head = !strcmp(s, "HEAD");
	if (strcmp(s, "GET") && !head) {
		reply_text(c, "405 Method Not Allowed", "Allow: GET, HEAD\r\n",
			   "method not allowed\n");
		return;
	}
	size_t len = 0;
	char *body = exposition(h->p, &len);
	if (!body) {
		reply_text(c, "500 Internal Server Error", NULL, "no statistics\n");
		return;
	}
	reply(c, "200 OK", NULL, "text/plain; version=0.0.4", body, len, head);
	free(body);
}

/* --- the loop ------------------------------------------------------------ */

/* End of the request head in c->in (after the blank line), or 0. */
static size_t head_end(const struct hclient *c)
{
	for (size_t i = 0; i + 1 < c->inlen; i++) {
		if (c->in[i] != '\n')
			continue;
		if (c->in[i + 1] == '\n')
			return i + 2;
		if (i + 2 < c->inlen && c->in[i + 1] == '\r' && c->in[i + 2] == '\n')
			return i + 3;
	}
	return 0;
}

static void on_read(struct kvt_http *h, struct hclient *c)
{
	for (;;) {
		size_t room = sizeof(c->in) - 1 - c->inlen;
		char sink[512];
		ssize_t n;

		if (c->state == 2) {	/* lingering: discard until EOF */
			n = recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT);
			if (n > 0)
				continue;
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
				return;
			client_close(c);
			return;
		}
		if (c->state != 0)
			return;
		if (!room) {
			reply_text(c, "400 Bad Request", NULL, "request head too long\n");
			return;
		}
		n = recv(c->fd, c->in + c->inlen, room, MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			client_close(c);	/* gone before a whole request */
			return;
		}
		c->inlen += (size_t)n;
		if (memchr(c->in, 0, c->inlen)) {
			reply_text(c, "400 Bad Request", NULL, "NUL in request\n");
			return;
		}
		size_t end = head_end(c);
		if (end) {
			answer(h, c, end);
			return;
		}
	}
}

/* on_read over a buffer (pager/http.h). */
int kvt_http_feed(struct kvt_pager *p, const char *in, size_t n, char **out, size_t *outlen)
{
	struct kvt_http *h = calloc(1, sizeof(*h));
	struct hclient *c;
	int answered = 0, ret = 0;

	*out = NULL;
	*outlen = 0;
	if (!h)
		return -ENOMEM;
	h->p = p;
	c = &h->cl[0];
	c->fd = -1;
	while (!answered) {
		size_t room = sizeof(c->in) - 1 - c->inlen, k = n < room ? n : room, end;

		answered = 1;
		if (!room) {
			reply_text(c, "400 Bad Request", NULL, "request head too long\n");
			break;
		}
		if (!k) {
			answered = 0;
			break;		/* EOF before a whole head: closed, no reply */
		}
		memcpy(c->in + c->inlen, in, k);
		c->inlen += k;
		in += k;
		n -= k;
		if (memchr(c->in, 0, c->inlen))
			reply_text(c, "400 Bad Request", NULL, "NUL in request\n");
		else if ((end = head_end(c)))
			answer(h, c, end);
		else
			answered = 0;
	}
	if (answered && c->state == 1) {
		*out = c->out;
		*outlen = c->outlen;
		c->out = NULL;
	} else if (answered) {
		ret = -ENOMEM;	/* reply() could not allocate and closed */
	}
	free(c->out);
	free(h);
	return ret;
}

static void on_write(struct hclient *c)
{
	while (c->outoff < c->outlen) {
		ssize_t n = send(c->fd, c->out + c->outoff, c->outlen - c->outoff,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n < 0) {
			client_close(c);
			return;
		}
		c->outoff += (size_t)n;
	}
	/* All sent: half-close and let the peer close, so our close does
	 * not reset a connection whose reply it has not read yet. */
	shutdown(c->fd, SHUT_WR);
	free(c->out);
	c->out = NULL;
	c->outoff = c->outlen = 0;
	c->state = 2;
	uint64_t d = now_ms() + LINGER_MS;
	if (d < c->deadline)
		c->deadline = d;
}

static void accept_one(struct kvt_http *h)
{
	int fd = accept4(h->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	struct hclient *slot = NULL, *oldest = NULL;

	if (fd < 0)
		return;
	for (int i = 0; i < MAX_CLIENTS; i++) {
		struct hclient *c = &h->cl[i];
		if (c->fd < 0) {
			slot = c;
			break;
		}
		if (c->state != 1 && (!oldest || c->since < oldest->since))
			oldest = c;
	}
	if (!slot && oldest) {
		client_close(oldest);
		slot = oldest;
	}
	if (!slot) {
		close(fd);
		return;
	}
	slot->fd = fd;
	slot->state = 0;
	slot->since = now_ms();
	slot->deadline = slot->since + CLIENT_MS;
}

static void *serve(void *arg)
{
	struct kvt_http *h = arg;
	struct pollfd pfd[2 + MAX_CLIENTS];
	int map[2 + MAX_CLIENTS];

	for (;;) {
		nfds_t n = 0;
		uint64_t now = now_ms(), next = UINT64_MAX;

		pfd[n++] = (struct pollfd){ .fd = h->efd, .events = POLLIN };
		pfd[n++] = (struct pollfd){ .fd = h->lfd, .events = POLLIN };
		for (int i = 0; i < MAX_CLIENTS; i++) {
			struct hclient *c = &h->cl[i];
			if (c->fd < 0)
				continue;
			if (now >= c->deadline) {
				client_close(c);
				continue;
			}
			if (c->deadline < next)
				next = c->deadline;
			map[n] = i;
			pfd[n++] = (struct pollfd){ .fd = c->fd,
				.events = c->state == 1 ? POLLOUT : POLLIN };
		}
		int ms = next == UINT64_MAX ? -1 : (int)(next - now) + 1;
		if (poll(pfd, n, ms) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pfd[0].revents)
			break;
		for (nfds_t k = 2; k < n; k++) {
			struct hclient *c = &h->cl[map[k]];
			short re = pfd[k].revents;

			if (!re || c->fd < 0)
				continue;
			if (re & (POLLIN | POLLHUP | POLLERR))
				on_read(h, c);
			if (c->fd >= 0 && c->state == 0 && (re & (POLLERR | POLLNVAL)))
				client_close(c);
			if (c->fd >= 0 && c->state == 1)
				on_write(c);
		}
		if (pfd[1].revents & POLLIN)
			accept_one(h);
	}
	return NULL;
}

int kvt_http_start(struct kvt_pager *p, const char *addr, struct kvt_http **out,
		   char *why, size_t whylen)
{
	struct sockaddr_storage sa, got;
	socklen_t salen, glen = sizeof(got);
	struct kvt_http *h;
	int one = 1, r;

	r = kvt_http_addr(addr, &sa, &salen, why, whylen);
	if (r)
		return r;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->p = p;
	for (int i = 0; i < MAX_CLIENTS; i++)
		h->cl[i].fd = -1;
	h->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	h->lfd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (h->efd < 0 || h->lfd < 0) {
		r = -errno;
		snprintf(why, whylen, "metrics.http = %.80s: socket: %s", addr, strerror(-r));
		goto fail;
	}
	setsockopt(h->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(h->lfd, (struct sockaddr *)&sa, salen) || listen(h->lfd, MAX_CLIENTS) ||
	    getsockname(h->lfd, (struct sockaddr *)&got, &glen)) {
		r = -errno;
		snprintf(why, whylen, "metrics.http = %.80s: %s", addr, strerror(-r));
		goto fail;
	}
	h->port = ntohs(got.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&got)->sin6_port
						  : ((struct sockaddr_in *)&got)->sin_port);
	r = -pthread_create(&h->th, NULL, serve, h);
	if (r) {
		snprintf(why, whylen, "metrics.http: thread: %s", strerror(-r));
		goto fail;
	}
	*out = h;
	return 0;
fail:
	if (h->lfd >= 0)
		close(h->lfd);
	if (h->efd >= 0)
		close(h->efd);
	free(h);
	return r;
}

int kvt_http_port(const struct kvt_http *h)
{
	return h ? h->port : 0;
}

void kvt_http_stop(struct kvt_http *h)
{
	uint64_t one = 1;

	if (!h)
		return;
	while (write(h->efd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
	pthread_join(h->th, NULL);
	for (int i = 0; i < MAX_CLIENTS; i++)
		client_close(&h->cl[i]);
	close(h->lfd);
	close(h->efd);
	free(h);
}
