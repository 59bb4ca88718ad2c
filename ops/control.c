/* SPDX-License-Identifier: MIT */
/*
 * The control socket: one thread serving a Unix stream socket with a line
 * protocol (stats, stats json, metrics, get, set, drain, trace, help), for kvtctl
 * and for scripts.
 *
 * One thread polls the listening socket, an eventfd (stop) and up to
 * MAX_CLIENTS non-blocking client sockets. Every client has its own input
 * buffer (one line of at most LINE_MAX bytes) and output buffer, so a
 * client that stays silent, stops mid-line or never reads its replies
 * holds up nobody: the thread only ever waits in poll(). It does wait for
 * the pager itself (a drain runs to completion before the next request).
 *
 * Replies are lines ending in "\n" followed by a line "." alone; a reply
 * line that starts with "." is sent with one more "." in front (as SMTP
 * does), so the terminator is never ambiguous. Errors are one line
 * "error ..." then ".".
 *
 * Every line gets a reply: a blank line (or one of NULs and blanks only)
 * is answered "error empty command", a line with a NUL byte among its
 * words "error NUL byte in the request".
 *
 * Access: the socket is created mode 0600 and every peer is checked with
 * SO_PEERCRED (our effective uid or root); anyone else gets
 * "error permission denied" and is closed. The default path's fallback
 * directory is private (kvt_control_default_path).
 *
 * Slots: MAX_CLIENTS clients at once. Nobody can hold the operator out:
 * a client that sends and reads nothing for control.idle_ms is closed
 * (told "error idle ..."), and a connection that finds every slot taken
 * takes the slot of the client idle the longest (told "error closed: ..."),
 * so a connection that passes the peer check is never refused for want
 * of room. Idle means: no byte received from it or sent to it; the order
 * is by a counter stamped at each, not by the clock, so it is exact.
 *
 * Library rules: nothing prints, functions return 0 or -errno.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <kvt/config.h>
#include <kvt/pager.h>
#include "ops/control.h"

#include "pager/hooks.h"		/* kvt_plog */

#define KVT_API __attribute__((visibility("default")))

#define MAX_CLIENTS	16
#define LINE_MAX_	4096		/* bytes of one request line, newline excluded */
#define OUT_HIGH	(64u << 10)	/* stop reading requests above this much unsent */

struct client {
	int fd;				/* -1: free slot */
	char in[LINE_MAX_ + 1];		/* the unfinished line (no NUL) */
	size_t inlen;
	int discard;			/* dropping the rest of a too-long line */
	int closing;			/* out of memory: close, answer nothing more */
	int eof;			/* the peer sent all it will send */
	char *out;			/* unsent reply bytes: out[outoff, outlen) */
	size_t outoff, outlen, outcap;
	uint64_t active_ns;		/* CLOCK_MONOTONIC of the last byte in or out */
	uint64_t active_seq;		/* ctl->seq then: orders the idle exactly */
};

struct kvt_control {
	struct kvt_pager *p;
	pthread_t th;
	int lfd;			/* listening socket */
	int efd;			/* eventfd: stop */
	dev_t dev;			/* the socket file we made, so stop */
	ino_t ino;			/* unlinks only that one */
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	uint64_t idle_ns;		/* control.idle_ms; 0: no limit */
	uint64_t seq;			/* activity counter (struct client.active_seq) */
	struct client cl[MAX_CLIENTS];
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The client did something: it is the least idle now. */
static void touch(struct kvt_control *ctl, struct client *c)
{
	c->active_ns = mono_ns();
	c->active_seq = ++ctl->seq;
}

/* --- output buffers ------------------------------------------------------ */

/* Append n bytes; on allocation failure the client is closed (the reply
 * cannot be delivered whole). */
static void out_raw(struct client *c, const char *s, size_t n)
{
	if (c->closing)
		return;
	if (c->outlen + n > c->outcap) {
		size_t cap = c->outcap ? c->outcap : 4096;
		char *nb;

		while (cap < c->outlen + n)
			cap *= 2;
		nb = realloc(c->out, cap);
		if (!nb) {
			c->closing = 1;
			c->outoff = c->outlen = 0;
			return;
		}
		c->out = nb;
		c->outcap = cap;
	}
	memcpy(c->out + c->outlen, s, n);
	c->outlen += n;
}

/* Append text as reply lines: dot-stuffed, each ending in "\n". */
static void out_text(struct client *c, const char *s)
{
	while (*s) {
		const char *nl = strchr(s, '\n');
		size_t n = nl ? (size_t)(nl - s) : strlen(s);

		if (s[0] == '.')
			out_raw(c, ".", 1);
		out_raw(c, s, n);
		out_raw(c, "\n", 1);
		s += n + (nl ? 1 : 0);
	}
}

static void out_fmt(struct client *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void out_fmt(struct client *c, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	out_text(c, buf);
}

static void out_end(struct client *c)
{
	out_raw(c, ".\n", 2);
}

static void out_error(struct client *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void out_error(struct client *c, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	int n = snprintf(buf, sizeof(buf), "error ");

	va_start(ap, fmt);
	vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
	va_end(ap);
	/* One line: a message never carries a newline into the reply. */
	for (char *q = buf; *q; q++)
		if (*q == '\n' || *q == '\r')
			*q = ' ';
	out_text(c, buf);
	out_end(c);
}

static const char *errstr(int err, char *buf, size_t len)
{
	return strerror_r(err, buf, len);
}

/* --- requests ------------------------------------------------------------ */

/* Fill a growing buffer with fn(st, buf, len) (returns length or -ENOSPC).
 * Returns a malloc'd string or NULL. */
static char *render(const void *arg, int (*fn)(const void *, char *, size_t))
{
	size_t len = 16384;

	for (;;) {
		char *buf = malloc(len);
		int n;

		if (!buf)
			return NULL;
		n = fn(arg, buf, len);
		if (n >= 0 && (size_t)n < len)
			return buf;
		free(buf);
		if (n != -ENOSPC && n >= 0 && (size_t)n >= len)
			len = (size_t)n + 1;
		else if (n == -ENOSPC && len < (64u << 20))
			len *= 2;
		else
			return NULL;
	}
}

static int r_json(const void *st, char *b, size_t n) { return kvt_stats_json(st, b, n); }
static int r_prom(const void *st, char *b, size_t n) { return kvt_stats_prometheus(st, b, n); }
static int r_cfg(const void *cfg, char *b, size_t n) { return kvt_config_print(cfg, b, n); }

static void cmd_stats(struct kvt_control *ctl, struct client *c, int form)
{
	struct kvt_stats *st = calloc(1, sizeof(*st));
	char eb[128];
	int rc;

	if (!st) {
		out_error(c, "out of memory");
		return;
	}
	rc = kvt_pager_stats(ctl->p, st);
	if (rc) {
		out_error(c, "stats: %s", errstr(-rc, eb, sizeof(eb)));
		free(st);
		return;
	}
	if (form) {
		char *txt = render(st, form == 1 ? r_json : r_prom);

		if (!txt) {
			out_error(c, "out of memory");
		} else {
			out_text(c, txt);
			out_end(c);
		}
		free(txt);
		free(st);
		return;
	}
	for (int t = 0; t < KVT_NTIERS; t++) {
		const struct kvt_tier_stats *ts = &st->tier[t];

		out_fmt(c, "%s: used %llu/%llu frames (%.1f/%.1f MiB), online %llu of %llu reserved, "
			"hits %llu, misses %llu, bytes in %llu, bytes out %llu",
			kvt_tier_name(t), (unsigned long long)ts->used,
			(unsigned long long)ts->capacity,
			(double)(ts->used * ts->frame_bytes) / (1 << 20),
			(double)(ts->capacity * ts->frame_bytes) / (1 << 20),
			(unsigned long long)ts->online, (unsigned long long)ts->reserved,
			(unsigned long long)ts->hits, (unsigned long long)ts->misses,
			(unsigned long long)ts->bytes_in, (unsigned long long)ts->bytes_out);
	}
	out_fmt(c, "device: %s (%s), fast tier %.1f MiB; copies up %.1f MB in %.1f ms, down "
		"%.1f MB in %.1f ms; kernels %.1f ms", st->dev.name, st->dev.desc,
		(double)st->fast_alloc_bytes / (1 << 20), (double)st->dev.copy_bytes[KVT_DEV_H2D] / 1e6,
		(double)st->dev.copy_ns[KVT_DEV_H2D] / 1e6, (double)st->dev.copy_bytes[KVT_DEV_D2H] / 1e6,
		(double)st->dev.copy_ns[KVT_DEV_D2H] / 1e6, (double)st->dev.kernel_ns / 1e6);
	out_fmt(c, "prefetch: issued %llu, hit %llu, late %llu, wasted %llu, dropped %llu",
		(unsigned long long)st->prefetch_issued, (unsigned long long)st->prefetch_hit,
		(unsigned long long)st->prefetch_late, (unsigned long long)st->prefetch_wasted,
		(unsigned long long)st->prefetch_dropped);
	if (st->metrics_http_port)	/* the port bound, the kernel's pick for port 0 */
		out_fmt(c, "metrics: http port %d (GET /metrics)", st->metrics_http_port);
	if (st->psi_watching) {
		uint64_t h = st->psi_some_avg10 > 0 && st->psi_some_avg10 <= 100 ?
			     (uint64_t)(st->psi_some_avg10 * 100 + 0.5) : 0;
		char lim[48] = "none";

		if (st->host_limit_bytes)
			snprintf(lim, sizeof(lim), "%llu frames",
				 (unsigned long long)(st->host_limit_bytes /
						      st->tier[KVT_TIER_HOST].frame_bytes));
		out_fmt(c, "memory pressure: some avg10 %llu.%02llu%%%s, host limit %s, "
			"shrinks %llu, grows %llu", (unsigned long long)(h / 100),
			(unsigned long long)(h % 100), st->psi_ok ? "" : " (no reading)", lim,
			(unsigned long long)st->psi_shrinks, (unsigned long long)st->psi_grows);
	}
	out_fmt(c, "seqs %llu, pages %llu, acquires %llu, lost pages %llu, io errors %llu",
		(unsigned long long)st->seqs, (unsigned long long)st->pages,
		(unsigned long long)st->acquires, (unsigned long long)st->lost_pages,
		(unsigned long long)st->io_errors);
	out_end(c);
	free(st);
}

/* The value of "section.name" in kvt_config_print's INI text, or NULL. */
static const char *ini_value(char *ini, const char *key, char **end)
{
	const char *dot = strrchr(key, '.');
	size_t seclen, namelen;
	int insec = 0;

	if (!dot || dot == key || !dot[1])
		return NULL;
	seclen = (size_t)(dot - key);
	namelen = strlen(dot + 1);
	for (char *line = ini; *line; ) {
		char *nl = strchr(line, '\n');
		size_t n = nl ? (size_t)(nl - line) : strlen(line);

		if (line[0] == '[') {
			insec = n == seclen + 2 && !strncmp(line + 1, key, seclen) &&
				line[seclen + 1] == ']';
		} else if (insec && n > namelen && !strncmp(line, dot + 1, namelen) &&
			   (line[namelen] == ' ' || line[namelen] == '=')) {
			char *v = line + namelen;

			while (*v == ' ')
				v++;
			if (*v != '=')
				goto next;
			v++;
			if (*v == ' ')
				v++;
			*end = line + n;
			return v;
		}
next:
		line += n + (nl ? 1 : 0);
	}
	return NULL;
}

static void cmd_get(struct kvt_control *ctl, struct client *c, const char *key)
{
	struct kvt_config *cfg = malloc(sizeof(*cfg));
	char *ini = NULL, *end;
	const char *v;

	if (!cfg) {
		out_error(c, "out of memory");
		return;
	}
	kvt_pager_config(ctl->p, cfg);
	ini = render(cfg, r_cfg);
	free(cfg);
	if (!ini) {
		out_error(c, "out of memory");
		return;
	}
	v = ini_value(ini, key, &end);
	if (!v) {
		out_error(c, "unknown key: %.200s", key);
	} else {
		*end = 0;
		if (*v)
			out_text(c, v);
		else
			out_raw(c, "\n", 1);
		out_end(c);
	}
	free(ini);
}

static char *trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
		*--e = 0;
	return s;
}

static void cmd_set(struct kvt_control *ctl, struct client *c, char *arg)
{
	char *eq = strchr(arg, '='), err[512] = "", eb[128];
	int rc;

	if (!eq) {
		out_error(c, "usage: set KEY=VALUE");
		return;
	}
	*eq = 0;
	rc = kvt_pager_set(ctl->p, trim(arg), trim(eq + 1), err, sizeof(err));
	if (!rc) {
		out_text(c, "ok");
		out_end(c);
	} else {
		out_error(c, "%s", err[0] ? err : errstr(-rc, eb, sizeof(eb)));
	}
}

static void cmd_drain(struct kvt_control *ctl, struct client *c, const char *arg)
{
	char eb[128];
	int tier, rc;

	if (!strcmp(arg, "fast"))
		tier = KVT_TIER_FAST;
	else if (!strcmp(arg, "host"))
		tier = KVT_TIER_HOST;
	else {
		out_error(c, "usage: drain fast|host");
		return;
	}
	rc = kvt_pager_drain(ctl->p, tier);
	if (rc) {
		out_error(c, "drain %s: %s", arg, errstr(-rc, eb, sizeof(eb)));
	} else {
		out_text(c, "ok");
		out_end(c);
	}
}

/* trace start FILE | trace stop. FILE must be absolute: it is opened by
 * the pager's process, whose working directory is not the client's. */
static void cmd_trace(struct kvt_control *ctl, struct client *c, char *arg)
{
	char *sub = arg, *rest = arg + strcspn(arg, " \t"), eb[128];
	int rc;

	if (*rest)
		*rest++ = 0;
	rest = trim(rest);
	if (!strcmp(sub, "start") && *rest) {
		if (rest[0] != '/') {
			out_error(c, "trace start %.200s: give an absolute path (the pager does not "
				  "run in your directory)", rest);
			return;
		}
		rc = kvt_pager_trace_start(ctl->p, rest);
		if (rc == -EBUSY)
			out_error(c, "trace start: a trace is already being recorded (trace stop first)");
		else if (rc)
			out_error(c, "trace start %.200s: %s", rest, errstr(-rc, eb, sizeof(eb)));
		else {
			out_text(c, "ok");
			out_end(c);
		}
	} else if (!strcmp(sub, "stop") && !*rest) {
		struct kvt_stats *st;

		rc = kvt_pager_trace_stop(ctl->p);
		if (rc == -ENOENT) {
			out_error(c, "trace stop: no trace is being recorded");
			return;
		}
		if (rc) {
			out_error(c, "trace stop: writing the trace failed: %s",
				  errstr(-rc, eb, sizeof(eb)));
			return;
		}
		out_text(c, "ok");
		st = calloc(1, sizeof(*st));
		if (st && !kvt_pager_stats(ctl->p, st))
			out_fmt(c, "%llu records, %llu dropped",
				(unsigned long long)st->trace_records,
				(unsigned long long)st->trace_dropped);
		free(st);
		out_end(c);
	} else {
		out_error(c, "usage: trace start FILE | trace stop");
	}
}

static const char help_text[] =
	"stats            per tier used/capacity, hits, misses, bytes in/out; prefetch\n"
	"stats json       the statistics as one JSON object\n"
	"metrics          the Prometheus text exposition\n"
	"get KEY          one configuration value (e.g. get tier.fast.policy)\n"
	"set KEY=VALUE    change a live key (kvt_pager_set)\n"
	"drain fast|host  demote everything out of a tier and wait\n"
	"trace start FILE record a trace into FILE (an absolute path; docs/trace-format.md)\n"
	"trace stop       finish the trace: records written, records dropped\n"
	"help             this list\n";

/* One request line: n bytes, the newline excluded, NUL-terminated at n. */
static void handle_line(struct kvt_control *ctl, struct client *c, char *line, size_t n)
{
	char *cmd, *arg;
	size_t words = 0;

	if (n && line[n - 1] == '\r')
		line[--n] = 0;
	for (size_t i = 0; i < n; i++)
		words += line[i] != 0 && line[i] != ' ' && line[i] != '\t';
	if (!words) {
		out_error(c, "empty command");	/* every line is answered */
		return;
	}
	if (strlen(line) != n) {
		out_error(c, "NUL byte in the request (at byte %zu)", strlen(line));
		return;
	}
	cmd = trim(line);
	arg = cmd + strcspn(cmd, " \t");
	if (*arg)
		*arg++ = 0;
	arg = trim(arg);

	if (!strcmp(cmd, "stats") && !*arg)
		cmd_stats(ctl, c, 0);
	else if (!strcmp(cmd, "stats") && !strcmp(arg, "json"))
		cmd_stats(ctl, c, 1);
	else if (!strcmp(cmd, "metrics") && !*arg)
		cmd_stats(ctl, c, 2);
	else if (!strcmp(cmd, "get") && *arg)
		cmd_get(ctl, c, arg);
	else if (!strcmp(cmd, "set"))
		cmd_set(ctl, c, arg);
	else if (!strcmp(cmd, "drain"))
		cmd_drain(ctl, c, arg);
	else if (!strcmp(cmd, "trace"))
		cmd_trace(ctl, c, arg);
	else if (!strcmp(cmd, "help")) {
		out_text(c, help_text);
		out_end(c);
	} else if (!strcmp(cmd, "stats") || !strcmp(cmd, "metrics") || !strcmp(cmd, "get"))
		out_error(c, "usage: see help");
	else
		out_error(c, "unknown command: %.200s", cmd);
}

/* --- clients ------------------------------------------------------------- */

static void client_close(struct client *c)
{
	if (c->fd >= 0)
		close(c->fd);
	free(c->out);
	memset(c, 0, sizeof(*c));
	c->fd = -1;
}

static size_t pending(const struct client *c)
{
	return c->outlen - c->outoff;
}

/* Answer the complete lines in the input buffer while the unsent output
 * stays under OUT_HIGH. */
static void pump(struct kvt_control *ctl, struct client *c)
{
	while (!c->closing && pending(c) < OUT_HIGH) {
		char *nl = memchr(c->in, '\n', c->inlen);
		size_t used;

		if (c->discard) {
			if (!nl) {
				c->inlen = 0;
				return;
			}
			c->discard = 0;
		} else if (!nl) {
			if (c->inlen > LINE_MAX_) {
				out_error(c, "line too long (max %u bytes)", LINE_MAX_);
				c->discard = 1;
				c->inlen = 0;
			}
			return;
		} else {
			*nl = 0;
			handle_line(ctl, c, c->in, (size_t)(nl - c->in));
		}
		used = (size_t)(nl - c->in) + 1;
		memmove(c->in, c->in + used, c->inlen - used);
		c->inlen -= used;
	}
}

/* The protocol without a socket (ops/control.h). */
int kvt_control_feed(struct kvt_pager *p, const char *in, size_t n, char **out, size_t *outlen)
{
	struct kvt_control *ctl = calloc(1, sizeof(*ctl));
	struct client *c;
	char *res = NULL;
	size_t len = 0;
	int ret = 0;

	*out = NULL;
	*outlen = 0;
	if (!ctl)
		return -ENOMEM;
	ctl->p = p;
	c = &ctl->cl[0];
	c->fd = -1;
	for (;;) {
		size_t k = sizeof(c->in) - c->inlen;

		k = k < n ? k : n;
		memcpy(c->in + c->inlen, in, k);
		c->inlen += k;
		in += k;
		n -= k;
		pump(ctl, c);
		if (pending(c)) {
			char *nr = realloc(res, len + pending(c) + 1);

			if (!nr) {
				ret = -ENOMEM;
				break;
			}
			res = nr;
			memcpy(res + len, c->out + c->outoff, pending(c));
			len += pending(c);
			c->outoff = c->outlen = 0;
		}
		if (c->closing) {
			ret = -ENOMEM;
			break;
		}
		if (!n && !memchr(c->in, '\n', c->inlen))
			break;		/* the rest is an unfinished line: EOF drops it */
	}
	free(c->out);
	free(ctl);
	if (ret) {
		free(res);
		return ret;
	}
	if (res)
		res[len] = 0;
	*out = res;
	*outlen = len;
	return 0;
}

/* Send what the socket takes now. Returns -1 if the client is gone. */
static int flush(struct kvt_control *ctl, struct client *c)
{
	while (pending(c)) {
		ssize_t n = send(c->fd, c->out + c->outoff, pending(c),
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			return -1;
		}
		c->outoff += (size_t)n;
		touch(ctl, c);
	}
	c->outoff = c->outlen = 0;
	return 0;
}

/* Read what is there. Returns -1 on EOF or error. */
static int fill(struct kvt_control *ctl, struct client *c)
{
	for (;;) {
		size_t room = sizeof(c->in) - c->inlen;
		ssize_t n;

		if (!room)
			return 0;
		n = recv(c->fd, c->in + c->inlen, room, MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
		}
		if (!n)
			return -1;
		touch(ctl, c);
		c->inlen += (size_t)n;
		if ((size_t)n < room)
			return 0;
	}
}

/* A refused peer gets one line; it is not waited for. */
static void refuse(int fd, const char *msg)
{
	ssize_t r = send(fd, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT);

	(void)r;
	close(fd);
}

/* Close a client, with a last line unless a reply is half sent (the line
 * would land inside it). What is unsent is dropped. */
static void say_bye(struct client *c, const char *msg)
{
	if (!c->outoff) {
		ssize_t r = send(c->fd, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT);

		(void)r;
	}
	client_close(c);
}

#define STR_(x)	#x
#define STR(x)	STR_(x)

static void accept_one(struct kvt_control *ctl)
{
	struct ucred cr;
	socklen_t crlen = sizeof(cr);
	int fd = accept4(ctl->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

	if (fd < 0)
		return;		/* EAGAIN, ECONNABORTED, EMFILE: try again on the next poll */
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) ||
	    (cr.uid != geteuid() && cr.uid != 0)) {
		refuse(fd, "error permission denied\n.\n");
		return;
	}
	struct client *slot = NULL;

	for (int i = 0; i < MAX_CLIENTS && !slot; i++)
		if (ctl->cl[i].fd < 0)
			slot = &ctl->cl[i];
	if (!slot) {
		/* Every slot taken: the client idle the longest makes room. */
		slot = &ctl->cl[0];
		for (int i = 1; i < MAX_CLIENTS; i++)
			if (ctl->cl[i].active_seq < slot->active_seq)
				slot = &ctl->cl[i];
		say_bye(slot, "error closed: idle the longest while all " STR(MAX_CLIENTS)
			" control slots were taken, and a new client came\n.\n");
	}
	slot->fd = fd;
	touch(ctl, slot);
}

/* Close the clients idle for idle_ns or longer; returns the milliseconds
 * until the next one would be (poll's timeout), -1 for none. */
static int reap_idle(struct kvt_control *ctl)
{
	uint64_t now = mono_ns(), next = UINT64_MAX;

	if (!ctl->idle_ns)
		return -1;
	for (int i = 0; i < MAX_CLIENTS; i++) {
		struct client *c = &ctl->cl[i];
		uint64_t due;

		if (c->fd < 0)
			continue;
		due = c->active_ns + ctl->idle_ns;
		if (due <= now) {
			char msg[96];

			snprintf(msg, sizeof(msg), "error idle for %llu ms (control.idle_ms): "
				 "closed\n.\n", (unsigned long long)(ctl->idle_ns / 1000000));
			say_bye(c, msg);
		} else if (due < next) {
			next = due;
		}
	}
	if (next == UINT64_MAX)
		return -1;
	/* Rounded up, so that a wake-up finds the client due. */
	next = (next - now + 999999) / 1000000;
	return next > INT32_MAX ? INT32_MAX : (int)next;
}

/* Answer, send, and answer again while the socket takes it all. Returns
 * -1 when the client is to be closed. */
static int service(struct kvt_control *ctl, struct client *c)
{
	for (;;) {
		pump(ctl, c);
		if (flush(ctl, c) < 0)
			return -1;
		if (pending(c))
			return 0;		/* wait for POLLOUT */
		if (c->closing || c->eof)
			return -1;		/* everything asked has been answered */
		if (!memchr(c->in, '\n', c->inlen))
			return 0;		/* wait for POLLIN */
	}
}

static void *serve(void *arg)
{
	struct kvt_control *ctl = arg;
	struct pollfd pfd[2 + MAX_CLIENTS];
	int map[2 + MAX_CLIENTS];

	for (;;) {
		int timeout = reap_idle(ctl);
		nfds_t n = 0;

		pfd[n++] = (struct pollfd){ .fd = ctl->efd, .events = POLLIN };
		pfd[n++] = (struct pollfd){ .fd = ctl->lfd, .events = POLLIN };
		for (int i = 0; i < MAX_CLIENTS; i++) {
			struct client *c = &ctl->cl[i];

			if (c->fd < 0)
				continue;
			map[n] = i;
			pfd[n++] = (struct pollfd){ .fd = c->fd,
				.events = pending(c) ? POLLOUT : POLLIN };
		}
		if (poll(pfd, n, timeout) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pfd[0].revents)
			break;
		for (nfds_t k = 2; k < n; k++) {
			struct client *c = &ctl->cl[map[k]];
			short re = pfd[k].revents;

			if (!re)
				continue;
			if (re & POLLIN) {
				if (fill(ctl, c) < 0)
					c->eof = 1;	/* still answer what it sent */
			} else if (!(re & POLLOUT)) {
				client_close(c);	/* POLLERR, POLLHUP, POLLNVAL */
				continue;
			}
			if (service(ctl, c) < 0)
				client_close(c);
		}
		if (pfd[1].revents & POLLIN)
			accept_one(ctl);
	}
	return NULL;
}

/* --- start / stop -------------------------------------------------------- */

/* The fallback directory, ${TMPDIR:-/tmp}/kvtier-UID: made here mode 0700,
 * or, when it is there already, taken only if it is a directory (not a
 * symbolic link) of ours, mode 0700 exactly. Anyone can create names in
 * /tmp: a directory of someone else's there would let them take the
 * socket's name first, or answer in the server's place. */
static int private_dir(const char *dir, char *why, size_t whylen)
{
	uid_t uid = geteuid();
	struct stat st;

	if (!mkdir(dir, 0700)) {
		/* Ours, and in a sticky /tmp nobody else can swap it: the umask
		 * may have narrowed 0700, nothing may widen it. */
		if (chmod(dir, 0700)) {
			int e = errno;

			snprintf(why, whylen, "%s: chmod 0700: %s", dir, strerror(e));
			return -e;
		}
		return 0;
	}
	if (errno != EEXIST) {
		int e = errno;

		snprintf(why, whylen, "%s: cannot create it: %s", dir, strerror(e));
		return -e;
	}
	if (lstat(dir, &st)) {
		int e = errno;

		snprintf(why, whylen, "%s: %s", dir, strerror(e));
		return -e;
	}
	if (S_ISLNK(st.st_mode)) {
		snprintf(why, whylen, "%s is a symbolic link, not a directory of ours: "
			 "refused (remove it, or set XDG_RUNTIME_DIR)", dir);
		return -ENOTDIR;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(why, whylen, "%s is not a directory: refused (remove it, or set "
			 "XDG_RUNTIME_DIR)", dir);
		return -ENOTDIR;
	}
	if (st.st_uid != uid) {
		snprintf(why, whylen, "%s is owned by uid %u, not by us (uid %u): refused "
			 "(remove it, or set XDG_RUNTIME_DIR)", dir, (unsigned)st.st_uid,
			 (unsigned)uid);
		return -EPERM;
	}
	if ((st.st_mode & 07777) != 0700) {
		snprintf(why, whylen, "%s has mode %04o, must be 0700: refused (chmod 700 it, "
			 "or set XDG_RUNTIME_DIR)", dir, (unsigned)(st.st_mode & 07777));
		return -EPERM;
	}
	return 0;
}

KVT_API int kvt_control_default_path(char *buf, size_t len, char *why, size_t whylen)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR"), *tmp = getenv("TMPDIR");
	char run[64], dir[4096], scratch[8];
	uid_t uid = geteuid();
	struct stat st;
	int n, rc;

	if (!why || !whylen) {
		why = scratch;
		whylen = sizeof(scratch);
	}
	why[0] = 0;
	if (!buf || !len)
		return -EINVAL;
	snprintf(run, sizeof(run), "/run/user/%u", (unsigned)uid);
	if (xdg && *xdg) {
		n = snprintf(buf, len, "%s/kvtier.sock", xdg);
	} else if (!stat(run, &st) && S_ISDIR(st.st_mode) && st.st_uid == uid) {
		n = snprintf(buf, len, "%s/kvtier.sock", run);
	} else {
		if (!tmp || tmp[0] != '/')
			tmp = "/tmp";
		n = snprintf(dir, sizeof(dir), "%s/kvtier-%u", tmp, (unsigned)uid);
		if (n < 0 || (size_t)n >= sizeof(dir))
			goto too_long;
		n = snprintf(buf, len, "%s/kvtier.sock", dir);
		if (n < 0 || (size_t)n >= len)
			goto too_long;
		rc = private_dir(dir, why, whylen);
		if (rc)
			buf[0] = 0;
		return rc;
	}
	if (n >= 0 && (size_t)n < len)
		return 0;
too_long:
	buf[0] = 0;
	snprintf(why, whylen, "the control socket's default path is too long (over %zu "
		 "bytes): give a path", len - 1);
	return -ENAMETOOLONG;
}

/* 0 if path is free (absent, or a socket nobody listens on, now removed),
 * -EEXIST if something else or a live socket is there. */
static int clear_stale(const char *path, const struct sockaddr_un *sa)
{
	struct stat st;
	int fd, rc;

	if (lstat(path, &st))
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(st.st_mode))
		return -EEXIST;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	rc = connect(fd, (const struct sockaddr *)sa, sizeof(*sa));
	close(fd);
	if (!rc)
		return -EEXIST;		/* someone serves it */
	if (errno != ECONNREFUSED)
		return -EEXIST;
	if (unlink(path) && errno != ENOENT)
		return -errno;
	return 0;
}

KVT_API int kvt_control_start(struct kvt_pager *p, const char *path,
			      struct kvt_control **out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kvt_control *ctl;
	struct stat st;
	int rc;

	if (!p || !out)
		return -EINVAL;
	ctl = calloc(1, sizeof(*ctl));
	if (!ctl)
		return -ENOMEM;
	ctl->p = p;
	ctl->lfd = ctl->efd = -1;
	{
		struct kvt_config *cfg = malloc(sizeof(*cfg));

		if (!cfg) {
			free(ctl);
			return -ENOMEM;
		}
		kvt_pager_config(p, cfg);
		ctl->idle_ns = (uint64_t)cfg->control_idle_ms * 1000000u;
		free(cfg);
	}
	for (int i = 0; i < MAX_CLIENTS; i++)
		ctl->cl[i].fd = -1;
	if (path && *path) {
		if (strlen(path) >= sizeof(ctl->path)) {
			rc = -ENAMETOOLONG;
			goto fail;
		}
		strcpy(ctl->path, path);
	} else {
		char why[512];

		rc = kvt_control_default_path(ctl->path, sizeof(ctl->path), why, sizeof(why));
		if (rc) {
			kvt_plog(p, KVT_LOG_ERROR, "control socket: %s", why);
			goto fail;
		}
	}
	memcpy(sa.sun_path, ctl->path, strlen(ctl->path) + 1);

	rc = clear_stale(ctl->path, &sa);
	if (rc)
		goto fail;
	ctl->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ctl->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (ctl->efd < 0 || ctl->lfd < 0) {
		rc = -errno;
		goto fail;
	}
	/* Nobody can connect before listen(), so bind, narrow the mode, then
	 * listen: the umask (process-wide) is left alone. */
	if (bind(ctl->lfd, (struct sockaddr *)&sa, sizeof(sa))) {
		rc = errno == EADDRINUSE ? -EEXIST : -errno;
		goto fail;
	}
	if (chmod(ctl->path, 0600) || lstat(ctl->path, &st)) {
		rc = -errno;
		goto fail_unlink;
	}
	ctl->dev = st.st_dev;
	ctl->ino = st.st_ino;
	if (listen(ctl->lfd, MAX_CLIENTS)) {
		rc = -errno;
		goto fail_unlink;
	}
	rc = -pthread_create(&ctl->th, NULL, serve, ctl);
	if (rc)
		goto fail_unlink;
	*out = ctl;
	return 0;

fail_unlink:
	unlink(ctl->path);
fail:
	if (ctl->lfd >= 0)
		close(ctl->lfd);
	if (ctl->efd >= 0)
		close(ctl->efd);
	free(ctl);
	return rc;
}

KVT_API void kvt_control_stop(struct kvt_control *ctl)
{
	uint64_t one = 1;
	struct stat st;

	if (!ctl)
		return;
	while (write(ctl->efd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
	pthread_join(ctl->th, NULL);
	for (int i = 0; i < MAX_CLIENTS; i++)
		client_close(&ctl->cl[i]);
	close(ctl->lfd);
	close(ctl->efd);
	/* Remove the socket only if it is still the one we made. */
	if (!lstat(ctl->path, &st) && st.st_dev == ctl->dev && st.st_ino == ctl->ino)
		unlink(ctl->path);
	free(ctl);
}
