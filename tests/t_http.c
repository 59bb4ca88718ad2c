/* SPDX-License-Identifier: MIT */
/*
 * The metrics endpoint (metrics.http), through a plain socket client:
 * GET /metrics answers 200 with Content-Type: text/plain; version=0.0.4,
 * a Content-Length that matches, Connection: close, and a body the
 * exposition checker (prom_check.h) accepts; a counter in it moves after
 * pages are acquired. HEAD has the headers only; another path is 404,
 * another method 405, malformed requests (request line, version, header
 * line, an endless head, a NUL) 400, and the endpoint keeps serving after
 * each. Silent clients, a client that stops mid-request, one that never
 * reads its reply, and more idle connections than there are slots hold
 * up nobody: a scrape still answers within a second. Addresses that are
 * not loopback are refused at open with a message naming the key.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <strings.h>
#include "common.h"
#include "ops/http.h"
#include "prom_check.h"

static int port;
static char last_log[512];
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static void logcb(void *arg, int level, const char *msg)
{
	pthread_mutex_lock(&log_lock);
	snprintf(last_log, sizeof(last_log), "%s", msg);
	pthread_mutex_unlock(&log_lock);
	(void)arg;
	(void)level;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int dial(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	CHECK(fd >= 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	return fd;
}

static void send_all(int fd, const char *s, size_t n)
{
	while (n) {
		ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
		CHECK(w > 0);
		s += w;
		n -= (size_t)w;
	}
}

/* Everything until the server closes, within secs (times t_slow()); malloc'd, NUL-terminated. */
static char *read_all(int fd, double secs, size_t *len)
{
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap);
	double end = now() + secs * t_slow();

	CHECK(buf);
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int ms = (int)((end - now()) * 1000);
		if (ms <= 0 || poll(&pfd, 1, ms) != 1) {
			fprintf(stderr, "no complete reply within %.1f s; got %zu bytes: %.200s\n",
				secs, n, n ? buf : "");
			exit(1);
		}
		if (cap - n < 4096) {
			buf = realloc(buf, cap *= 2);
			CHECK(buf);
		}
		ssize_t r = recv(fd, buf + n, cap - n - 1, 0);
		CHECK(r >= 0);
		if (!r)
			break;
		n += (size_t)r;
	}
	buf[n] = 0;
	*len = n;
	return buf;
}

struct resp {
	int status;
	char ctype[128];
	long clen;
	int close;
	const char *body;
	size_t blen;
	char *raw;
};

/* One request (raw bytes) on a new connection; its response parsed. */
static struct resp ask(const char *req, size_t reqlen, double *secs)
{
	struct resp r = { .clen = -1 };
	size_t n;
	double t0 = now();
	int fd = dial();

	send_all(fd, req, reqlen);
	r.raw = read_all(fd, 5.0, &n);
	close(fd);
	if (secs)
		*secs = now() - t0;
	char *hend = strstr(r.raw, "\r\n\r\n");
	CHECK(hend);
	*hend = 0;
	r.body = hend + 4;
	r.blen = n - (size_t)(r.body - r.raw);
	CHECK(sscanf(r.raw, "HTTP/1.1 %d ", &r.status) == 1);
	for (char *l = strstr(r.raw, "\r\n"); l; l = strstr(l, "\r\n")) {
		l += 2;
		if (!strncasecmp(l, "Content-Type: ", 14))
			sscanf(l + 14, "%127[^\r]", r.ctype);
		else if (!strncasecmp(l, "Content-Length: ", 16))
			r.clen = atol(l + 16);
		else if (!strncasecmp(l, "Connection: close\r", 18) ||
			 !strcasecmp(l, "Connection: close"))
			r.close = 1;
	}
	return r;
}

static struct resp askz(const char *req)
{
	return ask(req, strlen(req), NULL);
}

/* A scrape: 200, the headers, a valid exposition; returns the value of
 * the sample `name` (without labels). */
static double scrape(const char *name, double max_secs)
{
	double secs;
	static const char req[] = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n"
				  "User-Agent: t_http\r\nAccept: */*\r\n\r\n";
	struct resp r = ask(req, sizeof(req) - 1, &secs);
	char why[256], key[160];

	CHECK_EQ(r.status, 200);
	CHECK(!strcmp(r.ctype, "text/plain; version=0.0.4"));
	CHECK_EQ(r.clen, (long)r.blen);
	CHECK(r.close);
	if (prom_check(r.body, r.blen, why, sizeof(why))) {
		fprintf(stderr, "exposition: %s\n", why);
		exit(1);
	}
	if (secs > max_secs) {
		fprintf(stderr, "a scrape took %.2f s\n", secs);
		exit(1);
	}
	snprintf(key, sizeof(key), "\n%s ", name);
	const char *at = strstr(r.body, key);
	CHECK(at);
	double v = strtod(at + strlen(key), NULL);
	free(r.raw);
	return v;
}

static void expect_status(const char *req, size_t len, int status, const char *what)
{
	struct resp r = ask(req, len, NULL);
	if (r.status != status || !r.close || r.clen != (long)r.blen) {
		fprintf(stderr, "%s: status %d (close %d, length %ld of %zu), expected %d\n", what,
			r.status, r.close, r.clen, r.blen, status);
		exit(1);
	}
	free(r.raw);
	scrape("kvt_sequences", 1.0);	/* still serving */
}

static void refused_addr(const char *addr)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_pager *p;
	char err[256];

	t_config(&cfg, 1, 4, 4, 0);
	CHECK_EQ(kvt_config_set(&cfg, "metrics.http", addr, err, sizeof(err)), 0);
	CHECK_EQ(kvt_config_validate(&cfg, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "metrics.http") && strstr(err, "loopback"));
	cfg.log = logcb;
	CHECK_EQ(kvt_device_open("cpu", 0, &dev), 0);
	last_log[0] = 0;
	CHECK_EQ(kvt_pager_open(&cfg, dev, &p), -EINVAL);
	CHECK(strstr(last_log, "metrics.http") && strstr(last_log, "loopback"));
	kvt_device_close(dev);
}

/* The control socket's stats name the port the kernel picked for port 0. */
static void control_stats_port(struct kvt_pager *p, int want)
{
	const char *tdir = getenv("KVT_TEST_DIR");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kvt_control *ctl;
	char reply[8192], line[64];
	size_t n = 0;
	ssize_t r;
	int fd;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/http-ctl.%d.sock",
		 tdir && *tdir ? tdir : "/tmp", (int)getpid());
	CHECK_EQ(kvt_control_start(p, sa.sun_path, &ctl), 0);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(fd >= 0 && !connect(fd, (struct sockaddr *)&sa, sizeof(sa)));
	CHECK_EQ(write(fd, "stats\n", 6), 6);
	/* the reply ends with a line holding a dot */
	while (n < 3 || memcmp(reply + n - 3, "\n.\n", 3)) {
		CHECK(n < sizeof(reply) - 1);
		r = read(fd, reply + n, sizeof(reply) - 1 - n);
		CHECK(r > 0);
		n += (size_t)r;
	}
	reply[n] = 0;
	close(fd);
	kvt_control_stop(ctl);
	snprintf(line, sizeof(line), "\nmetrics: http port %d (GET /metrics)\n", want);
	if (!strstr(reply, line)) {
		fprintf(stderr, "stats has no \"%s\":\n%s", line + 1, reply);
		exit(1);
	}
}

int main(void)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_stats st;
	struct kvt_pager *p;
	kvt_seq_t s;

	refused_addr("0.0.0.0:9187");
	refused_addr("10.1.2.3:80");
	refused_addr("[::]:9187");
	refused_addr("127.0.0.1");
	refused_addr("127.0.0.1:65536");
	refused_addr("example.com:80");
	refused_addr("127.0.0.1:-1");

	t_config(&cfg, 2, 8, 16, 64);
	snprintf(cfg.metrics_http, sizeof(cfg.metrics_http), "127.0.0.1:0");
	p = t_open(&cfg, &dev);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	port = st.metrics_http_port;
	CHECK(port > 0);
	control_stats_port(p, port);
	{
		char err[256];
		CHECK_EQ(kvt_pager_set(p, "metrics.http", "127.0.0.1:1", err, sizeof(err)), -EPERM);
	}

	/* A counter moves after activity. */
	double a0 = scrape("kvt_acquired_pages_total", 1.0);
	CHECK_EQ(kvt_seq_open(p, &s), 0);
	t_append(p, s, &cfg, 3, 0, 40);
	CHECK_EQ(t_verify_seq(p, s, &cfg, 3, 0), 20);
	CHECK_EQ(scrape("kvt_sequences", 1.0), 1);
	double a1 = scrape("kvt_acquired_pages_total", 1.0);
	CHECK_EQ(a1 - a0, 20);

	/* HEAD, 404, 405, 400s. */
	{
		struct resp r = askz("HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
		CHECK_EQ(r.status, 200);
		CHECK(r.clen > 1000 && r.blen == 0);
		free(r.raw);
		r = askz("GET /metrics?name[]=kvt_pages HTTP/1.0\r\n\r\n");
		CHECK_EQ(r.status, 200);
		CHECK(strstr(r.body, "\nkvt_pages 20\n"));
		free(r.raw);
		r = askz("GET /metrics HTTP/1.1\n\n");	/* bare newlines are read too */
		CHECK_EQ(r.status, 200);
		free(r.raw);
	}
#define REQ(s) s, sizeof(s) - 1
	expect_status(REQ("GET / HTTP/1.1\r\n\r\n"), 404, "GET /");
	expect_status(REQ("GET /metricsx HTTP/1.1\r\n\r\n"), 404, "GET /metricsx");
	expect_status(REQ("POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), 405, "POST");
	expect_status(REQ("DELETE /metrics HTTP/1.1\r\n\r\n"), 405, "DELETE");
	expect_status(REQ("garbage\r\n\r\n"), 400, "no request line");
	expect_status(REQ("GET /metrics HTTP/2.0\r\n\r\n"), 400, "HTTP/2.0");
	expect_status(REQ("GET /metrics\r\n\r\n"), 400, "no version");
	expect_status(REQ("GET  /metrics HTTP/1.1\r\n\r\n"), 400, "two spaces");
	expect_status(REQ("GET metrics HTTP/1.1\r\n\r\n"), 400, "target without /");
	expect_status(REQ("G(T /metrics HTTP/1.1\r\n\r\n"), 400, "bad method");
	expect_status(REQ("GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n"), 400, "header line");
	expect_status(REQ("GET /metrics HTTP/1.1\r\nX\0Y: 1\r\n\r\n"), 400, "NUL");
	{
		size_t n = 9000;
		char *big = malloc(n);
		CHECK(big);
		memcpy(big, "GET /metrics HTTP/1.1\r\nX-Long: ", 31);
		memset(big + 31, 'a', n - 31);
		expect_status(big, n, 400, "an endless head");
		free(big);
	}

	/* Clients that hold up nobody. */
	int silent[3], half = dial(), noread = dial();
	for (int i = 0; i < 3; i++)
		silent[i] = dial();
	send_all(half, "GET /metr", 9);
	send_all(noread, REQ("GET /metrics HTTP/1.1\r\n\r\n"));
	scrape("kvt_sequences", 1.0);
	/* More idle connections than the endpoint has slots. */
	int idle[20];
	for (int i = 0; i < 20; i++)
		idle[i] = dial();
	scrape("kvt_sequences", 1.0);
	scrape("kvt_pages", 1.0);
	for (int i = 0; i < 20; i++)
		close(idle[i]);
	for (int i = 0; i < 3; i++)
		close(silent[i]);
	close(half);
	close(noread);
	scrape("kvt_sequences", 1.0);

	CHECK_EQ(kvt_seq_close(p, s), 0);
	t_close(p, dev);

	/* Other spellings of loopback. */
	t_config(&cfg, 1, 4, 4, 0);
	snprintf(cfg.metrics_http, sizeof(cfg.metrics_http), "localhost:0");
	p = t_open(&cfg, &dev);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	port = st.metrics_http_port;
	CHECK(port > 0);
	scrape("kvt_sequences", 1.0);
	t_close(p, dev);
	{
		struct sockaddr_storage sa;
		socklen_t sl;
		char why[256];
		CHECK_EQ(kvt_http_addr("[::1]:9187", &sa, &sl, why, sizeof(why)), 0);
		CHECK_EQ(sa.ss_family, AF_INET6);
		CHECK_EQ(kvt_http_addr("127.200.0.1:0", &sa, &sl, why, sizeof(why)), 0);
		CHECK_EQ(kvt_http_addr("[::2]:9187", &sa, &sl, why, sizeof(why)), -EINVAL);
	}
	return 0;
}
