/* SPDX-License-Identifier: MIT */
/*
 * Files written for a user never go through a link, appear whole, and
 * leave no temporary (pager/afile.h).
 *
 * The helper itself: a link planted at the output path is replaced, its
 * target untouched; a link planted at the temporary's name is refused and
 * left alone; a stale temporary of a dead writer is removed, one of a
 * running process and names of another pattern are kept; an aborted
 * write leaves the old file; modes are as asked.
 *
 * Then every tool that writes files, each output path holding a link to a
 * file of the test's and a stale temporary beside it: kvt-mkmodel -o,
 * kvt-run --trace, --metrics, --dump-logits and --save, kvt-trace import
 * and export, kvt-sim gen -o, mrc --csv, --json and --plot (when gnuplot
 * is installed). Each output must be a regular file holding what the tool
 * wrote (a trace kvt-trace reads, a model kvt-run loads, and so on), each
 * link's target unchanged, and no temporary left.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/common.h"
#include "pager/afile.h"

#define VICTIM_TEXT "the victim's own bytes\n"

static char dir[1024], victim[1200], build[1024];
static char out[1 << 16];
static pid_t dead;		/* a PID that ran and is gone */

static void cleanup(void)
{
	char cmd[1100];

	if (dir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd))
			fprintf(stderr, "%s: not removed\n", dir);
	}
}

/* Run a shell command; stdout and stderr into out. Its exit status. */
static int run(const char *fmt, ...)
{
	char cmd[8192];
	va_list ap;
	size_t n;
	FILE *f;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	CHECK((f = popen(cmd, "r")));
	n = fread(out, 1, sizeof(out) - 1, f);
	out[n] = 0;
	st = pclose(f);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		fprintf(stderr, "%s\n-> %d:\n%s", cmd, WIFEXITED(st) ? WEXITSTATUS(st) : -1, out);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	CHECK(f && fputs(text, f) >= 0 && !fclose(f));
}

/* The whole of path (NUL-terminated; *n its size). */
static char *get(const char *path, size_t *n)
{
	struct stat st;
	char *b;
	FILE *f;

	CHECK(!stat(path, &st));
	CHECK((b = malloc((size_t)st.st_size + 1)) && (f = fopen(path, "r")));
	CHECK_EQ(fread(b, 1, (size_t)st.st_size, f), st.st_size);
	fclose(f);
	b[st.st_size] = 0;
	if (n)
		*n = (size_t)st.st_size;
	return b;
}

static void victim_intact(void)
{
	char *v = get(victim, NULL);

	if (strcmp(v, VICTIM_TEXT)) {
		fprintf(stderr, "%s was written through a link\n", victim);
		exit(1);
	}
	free(v);
}

/* Plant at path a link to the victim, and beside it the stale temporary
 * of a writer that died. */
static void plant(const char *path)
{
	char stale[1400];

	unlink(path);
	CHECK(!symlink(victim, path));
	snprintf(stale, sizeof(stale), "%s.%d.tmp", path, (int)dead);
	put(stale, "half of an old file");
}

/* path is a regular file (not the link) of at least min bytes, mode
 * `mode`, the victim is intact, and no temporary of path is left. */
static void landed(const char *path, size_t min, mode_t mode)
{
	char name[1400];
	const char *base = strrchr(path, '/') + 1;
	struct dirent *de;
	struct stat st;
	DIR *d;

	if (lstat(path, &st) || !S_ISREG(st.st_mode)) {
		fprintf(stderr, "%s: not a regular file\n", path);
		exit(1);
	}
	if ((size_t)st.st_size < min || (st.st_mode & 0777) != mode) {
		fprintf(stderr, "%s: %lld bytes, mode %o; want >= %zu, %o\n", path,
			(long long)st.st_size, st.st_mode & 0777, min, mode);
		exit(1);
	}
	victim_intact();
	CHECK((d = opendir(dir)));
	snprintf(name, sizeof(name), "%s.", base);
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);

		if (!strncmp(de->d_name, name, strlen(name)) && len > 4 &&
		    !strcmp(de->d_name + len - 4, ".tmp")) {
			fprintf(stderr, "%s/%s: a temporary left\n", dir, de->d_name);
			exit(1);
		}
	}
	closedir(d);
}

static void path_of(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", dir, name);
}

static void test_helper(void)
{
	char path[1200], tmp[1300], other[1300], live[1300], err[512];
	struct kvt_afile a;
	struct stat st;
	char *b;

	path_of(path, sizeof(path), "out.txt");

	/* A link at the output path: replaced by the file, target untouched. */
	plant(path);
	CHECK_EQ(kvt_afile_put(path, 0644, "new\n", 4, err, sizeof(err)), 0);
	landed(path, 4, 0644);
	b = get(path, NULL);
	CHECK(!strcmp(b, "new\n"));
	free(b);

	/* The temporary's own name holding a link: refused, nothing touched. */
	snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
	CHECK(!symlink(victim, tmp));
	CHECK_EQ(kvt_afile_put(path, 0644, "newer\n", 6, err, sizeof(err)), -EEXIST);
	printf("link at the temporary: %s\n", err);
	CHECK(strstr(err, tmp) && strstr(err, "not touched"));
	CHECK(!lstat(tmp, &st) && S_ISLNK(st.st_mode));
	victim_intact();
	b = get(path, NULL);
	CHECK(!strcmp(b, "new\n"));
	free(b);
	CHECK(!unlink(tmp));

	/* Our own PID's leftover (an earlier life of this PID) is replaced;
	 * a running process's temporary and other names are kept; the dead
	 * writer's goes. */
	put(tmp, "ours, from before");
	snprintf(live, sizeof(live), "%s.%d.tmp", path, (int)getppid());
	put(live, "a writer that still runs");
	snprintf(other, sizeof(other), "%s.x%d.tmp", path, (int)dead);
	put(other, "not a temporary of ours");
	plant(path);
	CHECK_EQ(kvt_afile_put(path, 0600, "x", 1, err, sizeof(err)), 0);
	CHECK(!lstat(live, &st) && !lstat(other, &st));
	CHECK(!unlink(live) && !unlink(other));
	landed(path, 1, 0600);

	/* An abort leaves the old file and no temporary. */
	CHECK_EQ(kvt_afile_open(&a, path, 0644, err, sizeof(err)), 0);
	CHECK_EQ(kvt_afile_write(&a, "partial", 7), 0);
	kvt_afile_abort(&a);
	landed(path, 1, 0600);
	b = get(path, NULL);
	CHECK(!strcmp(b, "x"));
	free(b);

	/* A directory is not a file name. */
	CHECK_EQ(kvt_afile_open(&a, "some/dir/", 0644, err, sizeof(err)), -EISDIR);
	CHECK(strstr(err, "names a directory"));
}

static void test_tools(void)
{
	char model[1200], trace[1200], metrics[1200], logits[1200], session[1200];
	char og[1200], back[1200], gen[1200], csv[1200], jsn[1200], png[1200], gp[1300];
	char *b;
	size_t n;

	path_of(model, sizeof(model), "m.gguf");
	path_of(trace, sizeof(trace), "run.kvtt");
	path_of(metrics, sizeof(metrics), "kvt.prom");
	path_of(logits, sizeof(logits), "logits.f32");
	path_of(session, sizeof(session), "conv.kvts");
	path_of(og, sizeof(og), "run.og");
	path_of(back, sizeof(back), "back.kvtt");
	path_of(gen, sizeof(gen), "zipf.og");
	path_of(csv, sizeof(csv), "mrc.csv");
	path_of(jsn, sizeof(jsn), "mrc.json");
	path_of(png, sizeof(png), "mrc.png");
	snprintf(gp, sizeof(gp), "%s.gp", png);

	plant(model);
	CHECK_EQ(run("%s/kvt-mkmodel --layers 2 --dim 64 --heads 4 --kv-heads 2 --vocab 300 "
		     "--ctx 512 --type f16 -o %s 2>&1", build, model), 0);
	landed(model, 1024, 0644);

	plant(trace);
	plant(metrics);
	plant(logits);
	plant(session);
	CHECK_EQ(run("%s/kvt-run -m %s -p 'The tiers of a pager' -n 4 --temp 0 --fast 64K "
		     "--host 64K --nvme-path %s --device cpu --trace %s --metrics %s "
		     "--dump-logits %s --save %s 2>&1", build, model, dir, trace, metrics, logits,
		     session), 0);
	landed(trace, 256, 0644);
	landed(metrics, 100, 0644);
	landed(logits, 4 * 300 * 4, 0644);
	landed(session, 64, 0600);
	b = get(metrics, NULL);
	CHECK(strstr(b, "# TYPE kvt_"));
	free(b);
	free(get(logits, &n));
	CHECK_EQ(n % (300 * 4), 0);
	CHECK_EQ(run("%s/kvt-trace info %s 2>&1", build, trace), 0);
	/* The session is whole: a restore continues it. */
	CHECK_EQ(run("%s/kvt-run -m %s --restore %s -n 1 --temp 0 --fast 64K --host 64K "
		     "--nvme-path %s --device cpu 2>&1", build, model, session, dir), 0);

	plant(og);
	CHECK_EQ(run("%s/kvt-trace export oracle %s %s 2>&1", build, trace, og), 0);
	landed(og, 24, 0644);
	plant(back);
	CHECK_EQ(run("%s/kvt-trace import oracle %s %s 2>&1", build, og, back), 0);
	landed(back, 256, 0644);
	CHECK_EQ(run("%s/kvt-trace info %s 2>&1", build, back), 0);

	plant(gen);
	CHECK_EQ(run("%s/kvt-sim gen zipf --requests 5000 --objects 500 --seed 3 -o %s 2>&1",
		     build, gen), 0);
	landed(gen, 5000 * 24, 0644);
	plant(csv);
	plant(jsn);
	int plot = !system("command -v gnuplot >/dev/null 2>&1");
	if (plot) {
		plant(png);
		plant(gp);
	}
	CHECK_EQ(run("%s/kvt-sim mrc %s --policies lru,clock --sizes 10%%,50%% --threads 1 "
		     "--no-bar --csv %s --json %s %s%s 2>&1", build, gen, csv, jsn,
		     plot ? "--plot " : "", plot ? png : ""), 0);
	landed(csv, 20, 0644);
	landed(jsn, 20, 0644);
	b = get(csv, NULL);
	CHECK(strstr(b, "lru") && strstr(b, "clock"));
	free(b);
	if (plot) {
		landed(png, 100, 0644);
		landed(gp, 100, 0644);
		b = get(png, NULL);
		CHECK(!memcmp(b, "\x89PNG", 4));
		free(b);
	} else {
		printf("gnuplot not installed: --plot not checked\n");
	}
}

int main(void)
{
	const char *b = getenv("BUILD"), *tdir = getenv("KVT_TEST_DIR");
	pid_t pid;

	snprintf(build, sizeof(build), "%s", b && *b ? b : "build");
	snprintf(dir, sizeof(dir), "%s/t_afile.%d", tdir ? tdir : "/tmp", (int)getpid());
	CHECK(!mkdir(dir, 0700));
	atexit(cleanup);
	umask(022);
	snprintf(victim, sizeof(victim), "%s/victim", dir);
	put(victim, VICTIM_TEXT);
	/* A PID that is not running: a child that has exited and been reaped. */
	CHECK((pid = fork()) >= 0);
	if (!pid)
		_exit(0);
	CHECK_EQ(waitpid(pid, NULL, 0), pid);
	dead = pid;

	test_helper();
	printf("helper ok\n");
	if (access(build, X_OK)) {
		printf("%s: no build folder: the tools are not checked\n", build);
		return 0;
	}
	test_tools();
	printf("tools ok\n");
	return 0;
}
