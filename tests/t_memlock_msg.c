/* SPDX-License-Identifier: MIT */
/*
 * host.mlock=on over a low RLIMIT_MEMLOCK: kvt-run and kvt-demo fail to
 * open the pager with one line that names RLIMIT_MEMLOCK, its value and
 * the way out, not a bare "Operation not permitted" or "Cannot allocate
 * memory". Each tool runs in a child with the limit at 64 KiB (the host
 * tier needs more) and without CAP_IPC_LOCK (dropped from the bounding
 * set, so the exec'd tool cannot have it even as root). Skipped when the
 * capability cannot be dropped, or when mlock succeeds regardless (a
 * sanitizer whose interceptor does nothing).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/capability.h>

#include "tests/common.h"

static char out[1 << 16];
static char dir[1024];

/* dir goes whatever the outcome. */
static void cleanup(void)
{
	char cmd[1100];

	if (dir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd))
			fprintf(stderr, "%s: not removed\n", dir);
	}
}

/* Run cmd through sh in a child with RLIMIT_MEMLOCK 64 KiB and no
 * CAP_IPC_LOCK; stdout and stderr go to out. Returns the exit status. */
static int run_limited(const char *cmd)
{
	int fd[2], st;
	size_t n = 0;
	ssize_t r;
	pid_t pid;

	CHECK(!pipe(fd));
	pid = fork();
	CHECK(pid >= 0);
	if (!pid) {
		struct rlimit rl = { 64 << 10, 64 << 10 };

		dup2(fd[1], 1);
		dup2(fd[1], 2);
		close(fd[0]);
		close(fd[1]);
		if (prctl(PR_CAPBSET_DROP, CAP_IPC_LOCK, 0, 0, 0) && errno != EINVAL) {
			printf("PR_CAPBSET_DROP: %s\n", strerror(errno));
			_exit(T_SKIP);
		}
		if (setrlimit(RLIMIT_MEMLOCK, &rl)) {
			printf("setrlimit: %s\n", strerror(errno));
			_exit(T_SKIP);
		}
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	close(fd[1]);
	while (n < sizeof(out) - 1 && (r = read(fd[0], out + n, sizeof(out) - 1 - n)) != 0) {
		if (r < 0 && errno == EINTR)
			continue;
		CHECK(r > 0);
		n += (size_t)r;
	}
	out[n] = 0;
	close(fd[0]);
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* The tool failed, and its last line is the "cannot open the pager" one,
 * naming RLIMIT_MEMLOCK, its 65536 bytes and what the tier needs. */
static void check_refusal(const char *tool, int rc, const char *needs)
{
	const char *last, *want = "RLIMIT_MEMLOCK is 65536 bytes, the host tier needs ";

	fprintf(stderr, "%s: exit %d:\n%s", tool, rc, out);
	if (rc == T_SKIP)
		SKIP("%s", out);
	if (rc == 0)
		SKIP("%s locked the host tier over the limit (privileged, or a sanitizer's mlock)",
		     tool);
	CHECK(rc != 127);
	CHECK(out[0] && out[strlen(out) - 1] == '\n');
	out[strlen(out) - 1] = 0;
	last = strrchr(out, '\n');
	last = last ? last + 1 : out;
	CHECK(strstr(last, "cannot open the pager: "));
	CHECK(strstr(last, want));
	CHECK(!strncmp(strstr(last, want) + strlen(want), needs, strlen(needs)));
	CHECK(strstr(last, "host.mlock=auto"));
	/* Said once, on that line. */
	CHECK(strstr(out, "RLIMIT_MEMLOCK") == strstr(last, "RLIMIT_MEMLOCK"));
}

int main(void)
{
	const char *build = getenv("BUILD"), *tdir = getenv("KVT_TEST_DIR");
	char bin[1024], cmd[8192];
	int rc;

	if (!build || !*build)
		build = "build";
	snprintf(dir, sizeof(dir), "%s/t_memlock_msg.%d", tdir ? tdir : "/tmp", (int)getpid());
	CHECK(!mkdir(dir, 0700));
	atexit(cleanup);

	/* kvt-demo: a 1 MiB host tier, the NVMe file in dir. */
	snprintf(bin, sizeof(bin), "%s/kvt-demo", build);
	if (access(bin, X_OK))
		SKIP("%s not built", bin);
	snprintf(cmd, sizeof(cmd), "printf '[host]\\nmlock = on\\n' > %s/on.ini && "
		 "%s -c %s/on.ini -t 256 -s 1 -l 2 --fast 1M --host 1M --nvme 16M --dir %s "
		 "--device cpu", dir, bin, dir, dir);
	rc = run_limited(cmd);
	check_refusal("kvt-demo", rc, "1048576 ");

	/* kvt-run, on a model made for it, host.mlock=on from --set. */
	char mk[1024];
	snprintf(mk, sizeof(mk), "%s/kvt-mkmodel", build);
	snprintf(bin, sizeof(bin), "%s/kvt-run", build);
	if (access(bin, X_OK) || access(mk, X_OK))
		SKIP("%s or %s not built", bin, mk);
	snprintf(cmd, sizeof(cmd), "%s --layers 2 --dim 64 --heads 4 --kv-heads 2 --vocab 300 "
		 "--ctx 512 --type f16 -o %s/m.gguf >/dev/null 2>&1 && "
		 "%s -m %s/m.gguf -p hi -n 1 --fast 64K --host 1M --nvme-path %s "
		 "--set host.mlock=on --device cpu", mk, dir, bin, dir, dir);
	rc = run_limited(cmd);
	check_refusal("kvt-run", rc, "1048576 ");
	return 0;
}
