/* SPDX-License-Identifier: MIT */
/*
 * The control socket's guards, each of which was once missing:
 * - the fallback directory (${TMPDIR:-/tmp}/kvtier-UID): made mode 0700
 *   when absent; a symbolic link, a file, a directory of the wrong mode or
 *   (as root) of another owner planted there is refused, by
 *   kvt_control_default_path, kvt_control_start (the message through the
 *   log callback) and kvtctl, each naming the path; kvtctl finds the
 *   server there without -s;
 * - kvtctl believes only a server of our uid or root: a fake server
 *   running as nobody (as root only) is refused, naming its uid, while the
 *   same fake server of our uid is believed;
 * - every line gets a reply: a blank line, one of blanks and "\r", one of
 *   NULs only ("error empty command"), one with a NUL among words;
 * - a client silent for control.idle_ms is told and closed, not sooner;
 * - with every slot held by a silent client, a new connection is still
 *   served, and the client idle the longest, and only it, makes room.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "common.h"

#define SLOTS	16	/* ops/control.c's MAX_CLIENTS */

static char logged[1024];	/* the last message of the log callback */

static void capture(void *arg, int level, const char *msg)
{
	(void)arg;
	(void)level;
	snprintf(logged, sizeof(logged), "%s", msg);
}

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
	CHECK(!connect(fd, (struct sockaddr *)&sa, sizeof(sa)));
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

/* Everything the peer sends until it closes; 60 s without a byte fails
 * (a bound for a broken server, not a measure). */
static char *read_to_eof(int fd)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);

	CHECK(buf);
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };

		if (poll(&pfd, 1, 60000) != 1) {
			buf[len] = 0;
			fprintf(stderr, "not closed; got so far: '%.200s'\n", buf);
			exit(1);
		}
		ssize_t r = recv(fd, buf + len, cap - 1 - len, 0);
		if (r < 0 && errno == ECONNRESET)
			break;
		CHECK(r >= 0);
		if (!r)
			break;
		len += (size_t)r;
		CHECK(len < cap - 1);
	}
	buf[len] = 0;
	return buf;
}

/* One reply (up to the line "."), without the "." line, malloc'd. */
static char *read_reply(int fd)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);

	CHECK(buf);
	for (;;) {
		buf[len] = 0;
		if (len >= 2 && !strcmp(buf + len - 2, ".\n") && (len == 2 || buf[len - 3] == '\n'))
			break;
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		if (poll(&pfd, 1, 60000) != 1) {
			fprintf(stderr, "no reply; got so far: '%.200s'\n", buf);
			exit(1);
		}
		ssize_t r = recv(fd, buf + len, 1, 0);	/* the next reply stays queued */
		if (r <= 0) {
			fprintf(stderr, "closed before the reply ended; got '%.200s'\n", buf);
			exit(1);
		}
		len += (size_t)r;
		CHECK(len < cap - 1);
	}
	buf[len - 2] = 0;
	return buf;
}

/* Send n bytes of req (a line, newline included) and compare the reply. */
static void expect_n(int fd, const char *req, size_t n, const char *want)
{
	send_all(fd, req, n);
	char *r = read_reply(fd);
	if (strcmp(r, want)) {
		fprintf(stderr, "request of %zu bytes: got '%s', expected '%s'\n", n, r, want);
		exit(1);
	}
	free(r);
}

static void expect(int fd, const char *req, const char *want)
{
	expect_n(fd, req, strlen(req), want);
}

/* Run "kvtctl ARGS" with env prefix; its stdout and stderr into out,
 * returns the exit status, or -1 when kvtctl is not built. */
static int kvtctl(const char *env, const char *args, char *out, size_t len)
{
	const char *build = getenv("BUILD");
	char bin[512], cmd[2048];
	size_t n = 0;
	FILE *f;
	int st;

	snprintf(bin, sizeof(bin), "%s/kvtctl", build && *build ? build : "build");
	if (access(bin, X_OK))
		return -1;
	snprintf(cmd, sizeof(cmd), "%s %s %s 2>&1", env, bin, args);
	f = popen(cmd, "r");
	CHECK(f);
	while (n + 1 < len && fgets(out + n, (int)(len - n), f))
		n += strlen(out + n);
	out[n] = 0;
	st = pclose(f);
	CHECK(WIFEXITED(st));
	return WEXITSTATUS(st);
}

/* A planted fallback directory is refused by all three, each naming it
 * and saying what is wrong. */
static void expect_refused(struct kvt_pager *p, const char *dir, int err, const char *what)
{
	char path[256], why[512], out[2048], env[600];
	struct kvt_control *ctl;
	int rc;

	strcpy(path, "x");
	CHECK_EQ(kvt_control_default_path(path, sizeof(path), why, sizeof(why)), err);
	if (path[0] || !strstr(why, dir) || !strstr(why, what)) {
		fprintf(stderr, "%s: path '%s', why '%s'; expected '' and the path and '%s'\n",
			dir, path, why, what);
		exit(1);
	}
	logged[0] = 0;
	CHECK_EQ(kvt_control_start(p, NULL, &ctl), err);
	if (!strstr(logged, dir) || !strstr(logged, what)) {
		fprintf(stderr, "kvt_control_start logged '%s'\n", logged);
		exit(1);
	}
	snprintf(env, sizeof(env), "env -u XDG_RUNTIME_DIR TMPDIR='%s'", getenv("TMPDIR"));
	rc = kvtctl(env, "stats", out, sizeof(out));
	if (rc >= 0 && (rc != 1 || !strstr(out, dir) || !strstr(out, what))) {
		fprintf(stderr, "kvtctl: exit %d, '%s'\n", rc, out);
		exit(1);
	}
}

static void check_fallback(struct kvt_pager *p, const char *tdir)
{
	char run[64], base[256], dir[300], want[400], path[256], why[512], out[2048], env[600];
	struct kvt_control *ctl;
	struct stat st;
	int fd;

	snprintf(run, sizeof(run), "/run/user/%u", (unsigned)geteuid());
	if (!stat(run, &st) && S_ISDIR(st.st_mode) && st.st_uid == geteuid()) {
		fprintf(stderr, "fallback path: skipped (%s is there: no fallback)\n", run);
		return;
	}
	snprintf(base, sizeof(base), "%s/fb", tdir);
	CHECK(!mkdir(base, 0700));
	CHECK(!unsetenv("XDG_RUNTIME_DIR"));
	CHECK(!setenv("TMPDIR", base, 1));
	snprintf(dir, sizeof(dir), "%s/kvtier-%u", base, (unsigned)geteuid());
	snprintf(want, sizeof(want), "%s/kvtier.sock", dir);

	/* A symbolic link to a directory that would pass. */
	char target[320];
	snprintf(target, sizeof(target), "%s/elsewhere", base);
	CHECK(!mkdir(target, 0700));
	CHECK(!symlink(target, dir));
	expect_refused(p, dir, -ENOTDIR, "symbolic link");
	CHECK(!unlink(dir));
	/* A file. */
	fd = open(dir, O_CREAT | O_EXCL | O_WRONLY, 0600);
	CHECK(fd >= 0);
	close(fd);
	expect_refused(p, dir, -ENOTDIR, "not a directory");
	CHECK(!unlink(dir));
	/* A directory anyone can enter and list. */
	CHECK(!mkdir(dir, 0700) && !chmod(dir, 0755));
	expect_refused(p, dir, -EPERM, "mode 0755");
	/* Of another owner (only root can make one). */
	if (geteuid() == 0) {
		CHECK(!chmod(dir, 0700) && !chown(dir, 65534, 65534));
		expect_refused(p, dir, -EPERM, "owned by uid 65534");
	} else {
		fprintf(stderr, "fallback path, another owner: skipped (not root)\n");
	}
	CHECK(!rmdir(dir));

	/* Absent: made 0700 (whatever the umask), the socket inside, found by
	 * kvtctl without -s. */
	mode_t um = umask(0277);	/* mkdir alone would make it 0500 */
	CHECK_EQ(kvt_control_default_path(path, sizeof(path), why, sizeof(why)), 0);
	umask(um);
	CHECK(!strcmp(path, want));
	CHECK(!lstat(dir, &st) && S_ISDIR(st.st_mode));
	CHECK_EQ(st.st_mode & 07777, 0700);
	CHECK(!rmdir(dir));
	CHECK_EQ(kvt_control_start(p, NULL, &ctl), 0);
	CHECK(!lstat(dir, &st) && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0700);
	CHECK(!lstat(want, &st) && S_ISSOCK(st.st_mode));
	snprintf(env, sizeof(env), "env -u XDG_RUNTIME_DIR TMPDIR='%s'", base);
	int rc = kvtctl(env, "get control.idle_ms", out, sizeof(out));
	if (rc >= 0 && (rc != 0 || strcmp(out, "0\n"))) {
		fprintf(stderr, "kvtctl on the default path: exit %d, '%s'\n", rc, out);
		exit(1);
	}
	kvt_control_stop(ctl);
	CHECK(!rmdir(dir));
	CHECK(!rmdir(target));
	CHECK(!rmdir(base));
}

/* A fake control server: answers every line "ok", as uid (or as we are
 * when uid < 0). Returns its pid; path is where it listens. */
static pid_t fake_server(const char *path, int uid)
{
	int ready[2];
	char c;

	CHECK(!pipe(ready));
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (!pid) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		gid_t g = (gid_t)uid;
		int lfd;

		close(ready[0]);
		if (uid >= 0 && (setgroups(1, &g) || setresgid(g, g, g) ||
				 setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid)))
			_exit(3);
		strcpy(sa.sun_path, path);
		lfd = socket(AF_UNIX, SOCK_STREAM, 0);
		if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 4))
			_exit(4);
		if (write(ready[1], "r", 1) != 1)
			_exit(5);
		for (;;) {
			int fd = accept(lfd, NULL, NULL);
			char buf[512];

			if (fd < 0)
				_exit(6);
			ssize_t r;

			/* One reply a line, as the real server. */
			while ((r = recv(fd, buf, sizeof(buf), 0)) > 0)
				for (ssize_t i = 0; i < r; i++)
					if (buf[i] == '\n' &&
					    send(fd, "ok\n.\n", 5, MSG_NOSIGNAL) != 5)
						_exit(0);
			close(fd);
		}
	}
	close(ready[1]);
	CHECK_EQ(read(ready[0], &c, 1), 1);	/* listening */
	close(ready[0]);
	return pid;
}

static void stop_child(pid_t pid)
{
	int st;

	CHECK(!kill(pid, SIGKILL));
	CHECK_EQ(waitpid(pid, &st, 0), pid);
}

static void check_peer_uid(void)
{
	char dir[] = "/tmp/kvt-fake.XXXXXX", path[128], args[256], out[2048];
	pid_t pid;
	int rc;

	if (kvtctl("", "--version", out, sizeof(out)) < 0) {
		fprintf(stderr, "kvtctl's peer check: skipped (kvtctl not built)\n");
		return;
	}
	CHECK(mkdtemp(dir));
	CHECK(!chmod(dir, 0777));	/* nobody must be able to bind there */
	snprintf(path, sizeof(path), "%s/c.sock", dir);
	snprintf(args, sizeof(args), "-s '%s' stats", path);

	/* The fake server, of our uid: believed (the fake works). */
	pid = fake_server(path, -1);
	rc = kvtctl("", args, out, sizeof(out));
	stop_child(pid);
	CHECK(!unlink(path));
	if (rc != 0 || strcmp(out, "ok\n")) {
		fprintf(stderr, "kvtctl and a server of ours: exit %d, '%s'\n", rc, out);
		exit(1);
	}
	if (geteuid() != 0) {
		fprintf(stderr, "kvtctl's peer check: skipped (not root: cannot run a server "
			"as another uid)\n");
		CHECK(!rmdir(dir));
		return;
	}
	/* As nobody: refused, the uid named, the reply not printed. */
	pid = fake_server(path, 65534);
	rc = kvtctl("", args, out, sizeof(out));
	stop_child(pid);
	CHECK(!unlink(path));
	CHECK(!rmdir(dir));
	if (rc != 1 || !strstr(out, "uid 65534") || strstr(out, "ok")) {
		fprintf(stderr, "kvtctl and a server of uid 65534: exit %d, '%s'\n", rc, out);
		exit(1);
	}
}

static void check_empty_lines(const char *sock)
{
	int c = dial(sock);

	expect(c, "\n", "error empty command\n");
	expect(c, " \t \r\n", "error empty command\n");
	expect_n(c, "\0\0\0\n", 4, "error empty command\n");
	expect_n(c, "\0 \0\r\n", 5, "error empty command\n");
	expect_n(c, "get\0 access.prefetch_depth\n", 27,
		 "error NUL byte in the request (at byte 3)\n");
	/* Two blank lines in one write: two replies; then a real request. */
	send_all(c, "\n\n", 2);
	for (int i = 0; i < 2; i++) {
		char *r = read_reply(c);
		CHECK(!strcmp(r, "error empty command\n"));
		free(r);
	}
	expect(c, "get access.prefetch_depth\n", "2\n");
	close(c);
}

/* Every slot held by a client, client i the i-th least recently active:
 * a new connection is served, the client idle the longest is told and
 * closed, the others stay. */
static void check_slots(const char *sock)
{
	int cl[SLOTS], op, op2;
	char *r;

	for (int i = 0; i < SLOTS; i++) {
		cl[i] = dial(sock);
		expect(cl[i], "get access.prefetch_depth\n", "2\n");
	}
	/* Client 0 speaks again: client 1 is now the one idle the longest. */
	expect(cl[0], "get access.prefetch_depth\n", "2\n");
	op = dial(sock);
	expect(op, "get access.prefetch_depth\n", "2\n");
	r = read_to_eof(cl[1]);
	if (!strstr(r, "error closed: idle the longest")) {
		fprintf(stderr, "client 1 got '%s' when it made room\n", r);
		exit(1);
	}
	free(r);
	/* One more: client 2 makes room, then 0 and 3 still answer. */
	op2 = dial(sock);
	expect(op2, "get access.prefetch_depth\n", "2\n");
	r = read_to_eof(cl[2]);
	CHECK(strstr(r, "error closed: idle the longest"));
	free(r);
	expect(cl[0], "get access.prefetch_depth\n", "2\n");
	expect(cl[3], "get access.prefetch_depth\n", "2\n");
	expect(op, "get access.prefetch_depth\n", "2\n");
	for (int i = 0; i < SLOTS; i++)
		close(cl[i]);
	close(op);
	close(op2);
}

/* A client silent for control.idle_ms is told and closed, not sooner; a
 * client that keeps talking stays. */
static void check_idle(const char *tdir)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_control *ctl;
	char sock[108];
	const unsigned ms = 300;

	t_config(&cfg, 1, 8, 16, 16);
	cfg.control_idle_ms = ms;
	struct kvt_pager *p = t_open(&cfg, &dev);
	snprintf(sock, sizeof(sock), "%s/idle.sock", tdir);
	CHECK_EQ(kvt_control_start(p, sock, &ctl), 0);

	double t0 = now();
	int silent = dial(sock), talker = dial(sock);
	expect(talker, "get control.idle_ms\n", "300\n");
	char *r = read_to_eof(silent);
	double dt = now() - t0;
	if (strcmp(r, "error idle for 300 ms (control.idle_ms): closed\n.\n")) {
		fprintf(stderr, "the silent client got '%s'\n", r);
		exit(1);
	}
	free(r);
	if (dt < ms / 1000.0) {
		fprintf(stderr, "closed after %.3f s, before control.idle_ms\n", dt);
		exit(1);
	}
	close(silent);
	close(talker);
	kvt_control_stop(ctl);
	t_close(p, dev);
}

int main(void)
{
	const char *tdir = getenv("KVT_TEST_DIR");
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_control *ctl;
	char sock[108], dirbuf[] = "/tmp/kvt-guard.XXXXXX";

	if (!tdir || !*tdir) {
		CHECK(mkdtemp(dirbuf));
		tdir = dirbuf;
	}
	/* No idle limit here: the slot check must not race the clock. */
	t_config(&cfg, 1, 8, 16, 16);
	cfg.control_idle_ms = 0;
	cfg.log = capture;
	struct kvt_pager *p = t_open(&cfg, &dev);

	snprintf(sock, sizeof(sock), "%s/guard.sock", tdir);
	CHECK_EQ(kvt_control_start(p, sock, &ctl), 0);
	check_empty_lines(sock);
	check_slots(sock);
	kvt_control_stop(ctl);

	check_fallback(p, tdir);
	t_close(p, dev);
	check_peer_uid();
	check_idle(tdir);
	return 0;
}
