/* SPDX-License-Identifier: MIT */
/*
 * kvtctl: talk to a pager's control socket (kvt_control_start).
 *
 *   kvtctl [-s PATH] stats | stats json | metrics | get KEY | set KEY=VALUE
 *                    | drain fast|host | trace start FILE | trace stop | help
 *                    | top [-n N]
 *
 * Prints the reply without its closing "."; an "error" reply goes to
 * stderr and exits 1. top redraws per-tier use and bytes in/out per second
 * (from successive "stats json") once a second until interrupted, or N
 * times with -n. trace start takes FILE relative to our directory and
 * sends it absolute (the pager opens it, from its own directory).
 *
 * The default path is kvt_control_default_path's, as the server's. Before
 * a reply is believed the server's uid is checked (SO_PEERCRED): it must
 * be ours or root, else whoever holds the path could answer in its place.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <kvt/pager.h>

#include "tools/cli.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: kvtctl [-s PATH] stats|stats json|metrics|get KEY|set KEY=VALUE|"
		   "drain fast|host|\n"
		   "              trace start FILE|trace stop|help|top [-n N]\n"
		   "  -s PATH  control socket (default $XDG_RUNTIME_DIR/kvtier.sock, else\n"
		   "           /run/user/UID/kvtier.sock, else ${TMPDIR:-/tmp}/kvtier-UID/kvtier.sock)\n"
		   "  --version  the version and the build's features\n");
}

static int connect_to(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "kvtctl: %s: path too long\n", path);
		return -1;
	}
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		fprintf(stderr, "kvtctl: %s: %s\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	/* The server's uid is the listener's, taken when it called listen(). */
	struct ucred cr;
	socklen_t crlen = sizeof(cr);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen)) {
		fprintf(stderr, "kvtctl: %s: cannot tell who serves it (SO_PEERCRED): %s\n",
			path, strerror(errno));
		close(fd);
		return -1;
	}
	if (cr.uid != geteuid() && cr.uid != 0) {
		fprintf(stderr, "kvtctl: %s is served by uid %u, neither us (uid %u) nor root: "
			"not trusted\n", path, (unsigned)cr.uid, (unsigned)geteuid());
		close(fd);
		return -1;
	}
	return fd;
}

/* Send one request and read its reply (dot-unstuffed, without the final
 * "." line) into a malloc'd string. Returns NULL on a broken connection. */
static char *request(int fd, const char *req)
{
	size_t cap = 65536, len = 0, n = strlen(req), off = 0;
	char *buf = malloc(cap), *line;

	if (!buf)
		return NULL;
	while (off < n) {
		ssize_t w = send(fd, req + off, n - off, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			goto broken;
		off += (size_t)w;
	}
	if (send(fd, "\n", 1, MSG_NOSIGNAL) != 1)
		goto broken;
	/* Read until a line "." alone. */
	for (;;) {
		ssize_t r;

		buf[len] = 0;
		line = len >= 2 && !strcmp(buf + len - 2, ".\n") &&
		       (len == 2 || buf[len - 3] == '\n') ? buf + len - 2 : NULL;
		if (line)
			break;
		if (cap - len < 4096) {
			char *nb = realloc(buf, cap * 2);
			if (!nb)
				goto broken;
			buf = nb;
			cap *= 2;
		}
		r = recv(fd, buf + len, cap - len - 1, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			goto broken;
		len += (size_t)r;
	}
	*line = 0;
	/* Undo the dot-stuffing: a line starting ".." lost one ".". */
	char *w = buf;
	for (char *s = buf; *s; ) {
		char *nl = strchr(s, '\n');
		size_t l = nl ? (size_t)(nl - s) + 1 : strlen(s);

		if (s[0] == '.') {
			s++;
			l--;
		}
		memmove(w, s, l);
		w += l;
		s += l;
	}
	*w = 0;
	return buf;
broken:
	free(buf);
	return NULL;
}

/* An unsigned field of the tier's object in "stats json". */
static unsigned long long json_tier_u(const char *json, const char *tier, const char *key)
{
	char pat[64];
	const char *p = strstr(json, "\"tiers\":{");

	if (!p)
		return 0;
	snprintf(pat, sizeof(pat), "\"%s\":{", tier);
	p = strstr(p, pat);
	if (!p)
		return 0;
	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(p, pat);
	return p ? strtoull(p + strlen(pat), NULL, 10) : 0;
}

static const char *const tiers[] = { "fast", "host", "nvme" };

static int top(int fd, long count)
{
	unsigned long long prev_in[3] = { 0 }, prev_out[3] = { 0 };
	int tty = isatty(STDOUT_FILENO);
	double prev_t = 0;

	for (long i = 0; count <= 0 || i < count; i++) {
		char *js;
		double now;

		if (i) {
			struct timespec ts = { 1, 0 };
			while (nanosleep(&ts, &ts) && errno == EINTR)
				;
		}
		js = request(fd, "stats json");
		now = cli_now();
		if (!js) {
			fprintf(stderr, "kvtctl: connection closed\n");
			return 1;
		}
		if (!strncmp(js, "error", 5)) {
			fprintf(stderr, "kvtctl: %s", js);
			free(js);
			return 1;
		}
		if (tty)
			fputs("\033[H\033[2J", stdout);
		printf("%-5s %12s %12s %9s %12s %12s\n", "tier", "used MiB", "cap MiB", "used%",
		       "in MB/s", "out MB/s");
		for (int t = 0; t < 3; t++) {
			unsigned long long cap = json_tier_u(js, tiers[t], "capacity");
			unsigned long long used = json_tier_u(js, tiers[t], "used");
			unsigned long long fb = json_tier_u(js, tiers[t], "frame_bytes");
			unsigned long long in = json_tier_u(js, tiers[t], "bytes_in");
			unsigned long long out = json_tier_u(js, tiers[t], "bytes_out");
			double dt = now - prev_t;

			printf("%-5s %12.1f %12.1f %8.1f%% %12.1f %12.1f\n", tiers[t],
			       (double)(used * fb) / (1 << 20), (double)(cap * fb) / (1 << 20),
			       cap ? 100.0 * (double)used / (double)cap : 0.0,
			       i && dt > 0 ? (double)(in - prev_in[t]) / dt / 1e6 : 0.0,
			       i && dt > 0 ? (double)(out - prev_out[t]) / dt / 1e6 : 0.0);
			prev_in[t] = in;
			prev_out[t] = out;
		}
		prev_t = now;
		fflush(stdout);
		free(js);
	}
	return 0;
}

int main(int argc, char **argv)
{
	char path[512] = "", req[8192];
	int a = 1, fd, rc;
	char *reply;

	if (cli_version(argc, argv, "kvtctl"))
		return 0;
	if (a < argc && !strcmp(argv[a], "-s")) {
		if (a + 1 >= argc) {
			usage(stderr);
			return 2;
		}
		snprintf(path, sizeof(path), "%s", argv[a + 1]);
		a += 2;
	}
	if (a >= argc) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[a], "-h") || !strcmp(argv[a], "--help")) {
		usage(stdout);
		return 0;
	}
	if (!path[0]) {
		char why[512];

		if (kvt_control_default_path(path, sizeof(path), why, sizeof(why))) {
			fprintf(stderr, "kvtctl: %s\n", why);
			return 1;
		}
	}

	if (!strcmp(argv[a], "top")) {
		long n = 0;

		if (a + 1 < argc) {
			char *end;

			if (strcmp(argv[a + 1], "-n") || a + 2 >= argc ||
			    (n = strtol(argv[a + 2], &end, 10)) <= 0 || *end || a + 3 != argc) {
				usage(stderr);
				return 2;
			}
		}
		fd = connect_to(path);
		if (fd < 0)
			return 1;
		rc = top(fd, n);
		close(fd);
		return rc;
	}

	/* trace start FILE: the pager's process opens FILE, so it goes absolute. */
	char abs[4096];
	if (!strcmp(argv[a], "trace") && a + 2 < argc && !strcmp(argv[a + 1], "start") &&
	    argv[a + 2][0] != '/') {
		char cwd[2048];

		if (a + 3 != argc) {
			usage(stderr);
			return 2;
		}
		if (!getcwd(cwd, sizeof(cwd))) {
			fprintf(stderr, "kvtctl: trace start %s: cannot tell the current directory: %s\n",
				argv[a + 2], strerror(errno));
			return 1;
		}
		if ((size_t)snprintf(abs, sizeof(abs), "%s/%s", cwd, argv[a + 2]) >= sizeof(abs)) {
			fprintf(stderr, "kvtctl: trace start %s: path too long\n", argv[a + 2]);
			return 2;
		}
		argv[a + 2] = abs;
	}

	/* The words of the command, joined by spaces, are one request line. */
	size_t len = 0;
	for (int i = a; i < argc; i++) {
		size_t l = strlen(argv[i]);

		if (strchr(argv[i], '\n') || len + l + 2 > sizeof(req)) {
			fprintf(stderr, "kvtctl: request too long or has a newline\n");
			return 2;
		}
		if (len)
			req[len++] = ' ';
		memcpy(req + len, argv[i], l);
		len += l;
	}
	req[len] = 0;

	fd = connect_to(path);
	if (fd < 0)
		return 1;
	reply = request(fd, req);
	close(fd);
	if (!reply) {
		fprintf(stderr, "kvtctl: connection closed before the reply ended\n");
		return 1;
	}
	if (!strncmp(reply, "error", 5) && (reply[5] == ' ' || reply[5] == '\n')) {
		const char *msg = reply[5] == ' ' ? reply + 6 : reply + 5;

		fprintf(stderr, "kvtctl: %s", msg);
		free(reply);
		return 1;
	}
	fputs(reply, stdout);
	free(reply);
	return 0;
}
