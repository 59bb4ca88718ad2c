/* SPDX-License-Identifier: MIT */
/*
 * The control socket: every request of the line protocol over a real
 * socket (stats, stats json, metrics, get, set, drain, help, an unknown
 * command, a 5000-byte line), clients that stop mid-line or stay silent
 * while another is served within a second, the socket's mode (0600), the
 * path rules (a stale socket is replaced; a file or a live socket is not),
 * the default path under $XDG_RUNTIME_DIR, the peer check (as root: a
 * child running as nobody is refused) and the kvtctl binary.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "common.h"

static char sock_path[108];

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int dial(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	CHECK(fd >= 0);
	CHECK(strlen(path) < sizeof(sa.sun_path));
	strcpy(sa.sun_path, path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		int e = errno;
		close(fd);
		return -e;
	}
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

/* Read one reply (up to and including the line "."), with a deadline of
 * secs (times t_slow()) for all of it; returns it without the "." line, malloc'd. */
static char *read_reply(int fd, double secs)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	double end = now() + secs * t_slow();

	CHECK(buf);
	for (;;) {
		buf[len] = 0;
		if (len >= 2 && !strcmp(buf + len - 2, ".\n") && (len == 2 || buf[len - 3] == '\n'))
			break;
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int ms = (int)((end - now()) * 1000);
		if (ms <= 0 || poll(&pfd, 1, ms) != 1) {
			fprintf(stderr, "no reply within %.1f s; got so far: %.200s\n", secs, buf);
			exit(1);
		}
		if (cap - len < 4096) {
			buf = realloc(buf, cap *= 2);
			CHECK(buf);
		}
		/* A byte at a time: the next reply must stay in the socket. */
		ssize_t r = recv(fd, buf + len, 1, 0);
		CHECK(r > 0);
		len += (size_t)r;
	}
	buf[len - 2] = 0;
	return buf;
}

/* One request on fd, its reply. */
static char *ask(int fd, const char *req)
{
	send_all(fd, req, strlen(req));
	send_all(fd, "\n", 1);
	return read_reply(fd, 5.0);
}

/* ask and compare the whole reply. */
static void expect(int fd, const char *req, const char *want)
{
	char *r = ask(fd, req);

	if (strcmp(r, want)) {
		fprintf(stderr, "'%s': got '%s', expected '%s'\n", req, r, want);
		exit(1);
	}
	free(r);
}

/* ask; the reply must be one "error ..." line. */
static void expect_error(int fd, const char *req, const char *has)
{
	char *r = ask(fd, req);

	if (strncmp(r, "error ", 6) || strchr(r, '\n') != r + strlen(r) - 1 ||
	    (has && !strstr(r, has))) {
		fprintf(stderr, "'%.60s': got '%s', expected one line 'error ...%s'\n", req, r,
			has ? has : "");
		exit(1);
	}
	free(r);
}

static int balanced_json(const char *s)
{
	int depth = 0, str = 0;

	while (*s == ' ')
		s++;
	if (*s != '{')
		return 0;
	for (; *s; s++) {
		if (str) {
			if (*s == '\\' && s[1])
				s++;
			else if (*s == '"')
				str = 0;
			continue;
		}
		if (*s == '"')
			str = 1;
		else if (*s == '{' || *s == '[')
			depth++;
		else if (*s == '}' || *s == ']') {
			if (--depth < 0)
				return 0;
			if (!depth) {
				s++;
				while (*s == '\n' || *s == ' ')
					s++;
				return !*s;
			}
		}
	}
	return 0;
}

/* As root: a child that becomes nobody must be refused by the peer check.
 * The socket lives in its own world-traversable directory under /tmp and
 * is opened up (0666) so that the refusal comes from SO_PEERCRED, not
 * from the file mode. */
static void check_peer_refused(struct kvt_pager *p)
{
	char dir[] = "/tmp/kvt-ctl.XXXXXX", path[128];
	struct kvt_control *c2;
	int st;

	if (geteuid() != 0) {
		t_skip_part("peer-check", "not root");
		return;
	}
	CHECK(mkdtemp(dir));
	CHECK(!chmod(dir, 0711));
	snprintf(path, sizeof(path), "%s/c.sock", dir);
	CHECK_EQ(kvt_control_start(p, path, &c2), 0);
	CHECK(!chmod(path, 0666));
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (!pid) {
		char buf[256];
		size_t len = 0;
		gid_t g = 65534;

		if (setgroups(1, &g) || setresgid(65534, 65534, 65534) ||
		    setresuid(65534, 65534, 65534))
			_exit(3);
		int fd = dial(path);
		if (fd == -EACCES)
			_exit(4);	/* cannot reach the socket at all here */
		if (fd < 0)
			_exit(5);
		for (;;) {
			struct pollfd pfd = { .fd = fd, .events = POLLIN };
			if (poll(&pfd, 1, 5000 * (int)t_slow()) != 1)
				_exit(6);
			ssize_t r = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);
			if (r <= 0)
				break;
			len += (size_t)r;
		}
		buf[len] = 0;
		_exit(strncmp(buf, "error permission denied\n", 24) ? 7 : 0);
	}
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	CHECK(WIFEXITED(st));
	if (WEXITSTATUS(st) == 4 || WEXITSTATUS(st) == 3)
		t_skip_part("peer-check", "nobody cannot reach %s", path);
	else
		CHECK_EQ(WEXITSTATUS(st), 0);
	kvt_control_stop(c2);
	CHECK(access(path, F_OK) && errno == ENOENT);
	CHECK(!rmdir(dir));
}

/* Run kvtctl; its stdout and stderr into out, returns the exit status. */
static int kvtctl(const char *bin, char *out, size_t len, const char *args)
{
	char cmd[1024];
	size_t n = 0;
	FILE *f;
	int st;

	snprintf(cmd, sizeof(cmd), "%s -s '%s' %s 2>&1", bin, sock_path, args);
	f = popen(cmd, "r");
	CHECK(f);
	while (n + 1 < len && fgets(out + n, (int)(len - n), f))
		n += strlen(out + n);
	out[n] = 0;
	st = pclose(f);
	CHECK(WIFEXITED(st));
	return WEXITSTATUS(st);
}

static void check_kvtctl(void)
{
	const char *build = getenv("BUILD");
	char bin[512], out[8192];

	snprintf(bin, sizeof(bin), "%s/kvtctl", build && *build ? build : "build");
	if (access(bin, X_OK)) {
		t_skip_part("kvtctl", "%s not built", bin);
		return;
	}
	CHECK_EQ(kvtctl(bin, out, sizeof(out), "get tier.fast.policy"), 0);
	CHECK(!strcmp(out, "arc\n"));
	CHECK_EQ(kvtctl(bin, out, sizeof(out), "set access.prefetch_depth=3"), 0);
	CHECK(!strcmp(out, "ok\n"));
	CHECK_EQ(kvtctl(bin, out, sizeof(out), "get access.prefetch_depth"), 0);
	CHECK(!strcmp(out, "3\n"));
	CHECK_EQ(kvtctl(bin, out, sizeof(out), "set io.depth=8"), 1);
	CHECK(!strncmp(out, "kvtctl: ", 8));
	CHECK_EQ(kvtctl(bin, out, sizeof(out), "get no.such"), 1);
	CHECK_EQ(kvtctl(bin, out, sizeof(out), "stats json"), 0);
	CHECK(balanced_json(out));
	CHECK_EQ(kvtctl(bin, out, sizeof(out), "top -n 2"), 0);
	CHECK(strstr(out, "fast") && strstr(out, "nvme") && strstr(out, "in MB/s"));
}

int main(void)
{
	const char *tdir = getenv("KVT_TEST_DIR");
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_control *ctl, *other;
	struct stat st;
	char *r;

	struct kvt_pager *p = t_open_tiers(&cfg, &dev, 2, 16, 32, 256, 0, 1);
	kvt_seq_t s;
	CHECK_EQ(kvt_seq_open(p, &s), 0);
	t_append(p, s, &cfg, 7, 0, 40);

	snprintf(sock_path, sizeof(sock_path), "%s/ctl.%d.sock", tdir && *tdir ? tdir : "/tmp",
		 (int)getpid());
	/* A regular file at the path is refused, a stale socket replaced. */
	int fd = open(sock_path, O_CREAT | O_WRONLY | O_EXCL, 0600);
	CHECK(fd >= 0);
	close(fd);
	CHECK_EQ(kvt_control_start(p, sock_path, &ctl), -EEXIST);
	CHECK(!unlink(sock_path));
	{
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		strcpy(sa.sun_path, sock_path);
		fd = socket(AF_UNIX, SOCK_STREAM, 0);
		CHECK(fd >= 0 && !bind(fd, (struct sockaddr *)&sa, sizeof(sa)));
		close(fd);	/* bound, never listened: stale */
	}
	CHECK_EQ(kvt_control_start(p, sock_path, &ctl), 0);
	CHECK(!lstat(sock_path, &st) && S_ISSOCK(st.st_mode));
	CHECK_EQ(st.st_mode & 07777, 0600);
	/* A live socket is not taken over. */
	CHECK_EQ(kvt_control_start(p, sock_path, &other), -EEXIST);

	int c = dial(sock_path);
	CHECK(c >= 0);

	r = ask(c, "stats");
	CHECK(strstr(r, "fast: used ") && strstr(r, "host: used ") && strstr(r, "nvme: used "));
	CHECK(strstr(r, "hits") && strstr(r, "bytes in") && strstr(r, "prefetch: issued"));
	free(r);
	r = ask(c, "stats json");
	CHECK(balanced_json(r) && strstr(r, "\"tier"));
	free(r);
	r = ask(c, "metrics");
	CHECK(strstr(r, "# TYPE kvt_tier_hits_total counter"));
	free(r);
	r = ask(c, "help");
	CHECK(strstr(r, "stats json") && strstr(r, "drain"));
	free(r);

	expect(c, "get tier.fast.policy", "auto\n");
	expect(c, "set tier.fast.policy=arc", "ok\n");
	expect(c, "get tier.fast.policy", "arc\n");
	expect_error(c, "set io.depth=8", NULL);
	expect_error(c, "set tier.fast.policy=nope", NULL);
	expect(c, "get tier.fast.policy", "arc\n");
	expect_error(c, "get tier.fast.nope", "unknown key");
	expect_error(c, "frobnicate now", "unknown command: frobnicate");
	expect_error(c, "drain nvme", NULL);
	expect(c, "drain fast", "ok\n");
	expect(c, "  get   access.prefetch_depth\r", "1\n");

	/* A 5000-byte line: one error, then the connection still answers. */
	{
		char *big = malloc(5001);
		CHECK(big);
		memset(big, 'x', 5000);
		big[5000] = 0;
		expect_error(c, big, "line too long");
		free(big);
		expect(c, "get access.prefetch_depth", "1\n");
	}
	/* Two requests in one write: two replies, in order. */
	send_all(c, "get tier.fast.policy\nget access.prefetch_depth\n", 47);
	r = read_reply(c, 5.0);
	CHECK(!strcmp(r, "arc\n"));
	free(r);
	r = read_reply(c, 5.0);
	CHECK(!strcmp(r, "1\n"));
	free(r);

	/* One client stops mid-line and goes away, one stays silent, one
	 * holds half a line: the next is still answered at once. */
	int half = dial(sock_path), silent = dial(sock_path), gone = dial(sock_path);
	CHECK(half >= 0 && silent >= 0 && gone >= 0);
	send_all(half, "stats js", 8);
	send_all(gone, "get tier.fa", 11);
	close(gone);
	int d = dial(sock_path);
	CHECK(d >= 0);
	double t0 = now();
	r = ask(d, "stats");
	double dt = now() - t0;
	CHECK(strstr(r, "fast: used "));
	free(r);
	if (dt >= 1.0) {
		fprintf(stderr, "a request took %.2f s behind idle clients\n", dt);
		exit(1);
	}
	expect(c, "get tier.fast.policy", "arc\n");
	/* The half line completes later and is answered. */
	send_all(half, "on\n", 3);
	r = read_reply(half, 5.0);
	CHECK(balanced_json(r));
	free(r);
	/* A client that sends a request and shuts down its side still gets
	 * the reply. */
	int hc = dial(sock_path);
	CHECK(hc >= 0);
	send_all(hc, "get tier.fast.policy\n", 21);
	CHECK(!shutdown(hc, SHUT_WR));
	r = read_reply(hc, 5.0);
	CHECK(!strcmp(r, "arc\n"));
	free(r);
	close(hc);

	check_kvtctl();
	check_peer_refused(p);

	close(half);
	close(silent);
	close(d);
	close(c);
	kvt_control_stop(ctl);
	CHECK(access(sock_path, F_OK) && errno == ENOENT);

	/* The default path under $XDG_RUNTIME_DIR. */
	char dflt[256];
	snprintf(dflt, sizeof(dflt), "%s/kvtier.sock", tdir && *tdir ? tdir : "/tmp");
	if (strlen(dflt) < sizeof(sock_path) && access(dflt, F_OK)) {
		CHECK(!setenv("XDG_RUNTIME_DIR", tdir && *tdir ? tdir : "/tmp", 1));
		CHECK_EQ(kvt_control_start(p, NULL, &ctl), 0);
		c = dial(dflt);
		CHECK(c >= 0);
		expect(c, "get tier.fast.policy", "arc\n");
		close(c);
		kvt_control_stop(ctl);
		CHECK(access(dflt, F_OK) && errno == ENOENT);
	}

	CHECK_EQ(kvt_seq_close(p, s), 0);
	t_close(p, dev);
	return 0;
}
