/* SPDX-License-Identifier: MIT */
/*
 * Opening the NVMe path: the three kinds of path, and the refusals.
 *   - a new file path: created 0600, present while open, gone after close;
 *   - an existing file: -EEXIST, the file untouched;
 *   - a missing directory: -ENOENT, nothing created;
 *   - a file system without O_DIRECT: KVT_ON -> -EINVAL with nothing left
 *     behind, KVT_AUTO -> buffered, notes say why, one warning logged, and
 *     I/O works.
 * The last needs a file system that refuses O_DIRECT: /dev/shm where tmpfs
 * still does (before Linux 6.6), else a ramfs mounted in a private mount
 * namespace (root only; gone with the process). Neither: skip (77) after
 * the other checks passed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include "common.h"
#include "pager/nvme.h"

#define PG	4096u
#define BYTES	(16u * PG)

static unsigned warnings;

static void count_log(void *arg, int level, const char *msg)
{
	if (level == KVT_LOG_WARN)
		warnings++;
	t_log(arg, level, msg);
}

static struct kvt_nvme_opts opts(const char *path, int direct)
{
	return (struct kvt_nvme_opts){ .path = path, .bytes = BYTES, .direct = direct,
				       .depth = 4, .log = count_log };
}

static unsigned entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	unsigned cnt = 0;

	CHECK(d != NULL);
	while ((e = readdir(d)) != NULL)
		cnt += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(d);
	return cnt;
}

/* Does dir refuse O_DIRECT? 1 yes, 0 no, -1 cannot tell. */
static int refuses_direct(const char *dir)
{
	char path[4096];
	int fd, r;

	snprintf(path, sizeof(path), "%s/probe-%d", dir, (int)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0)
		return -1;
	r = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_DIRECT) ? (errno == EINVAL ? 1 : -1) : 0;
	close(fd);
	unlink(path);
	return r;
}

static void file_modes(const char *dir)
{
	struct kvt_nvme_info info;
	struct kvt_nvme *n;
	struct kvt_nvme_opts o;
	struct stat st;
	char path[4096], sub[4096];

	/* A new file: ours while open, removed by close. */
	snprintf(path, sizeof(path), "%s/nvme-new", dir);
	o = opts(path, KVT_AUTO);
	CHECK_EQ(kvt_nvme_open(&o, &n), 0);
	kvt_nvme_info(n, &info);
	CHECK_EQ(info.created, 1);
	CHECK(strcmp(info.path, path) == 0);
	CHECK(stat(path, &st) == 0);
	CHECK_EQ(st.st_size, BYTES);
	CHECK_EQ(st.st_mode & 0777, 0600);
	kvt_nvme_close(n);
	CHECK(stat(path, &st) != 0 && errno == ENOENT);

	/* An existing file: refused, untouched. */
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0644);

	CHECK(fd >= 0);
	CHECK_EQ(write(fd, "hello", 5), 5);
	close(fd);
	CHECK_EQ(kvt_nvme_open(&o, &n), -EEXIST);
	char buf[16] = { 0 };

	fd = open(path, O_RDONLY);
	CHECK(fd >= 0);
	CHECK_EQ(read(fd, buf, sizeof(buf)), 5);
	close(fd);
	CHECK(memcmp(buf, "hello", 5) == 0);
	CHECK(stat(path, &st) == 0);
	CHECK_EQ(st.st_mode & 0777, 0644);
	CHECK(unlink(path) == 0);

	/* Missing directories. */
	snprintf(sub, sizeof(sub), "%s/missing/nvme", dir);
	o = opts(sub, KVT_AUTO);
	CHECK_EQ(kvt_nvme_open(&o, &n), -ENOENT);
	snprintf(sub, sizeof(sub), "%s/missing/", dir);
	o = opts(sub, KVT_AUTO);
	CHECK_EQ(kvt_nvme_open(&o, &n), -ENOENT);
	CHECK(stat(sub, &st) != 0 && errno == ENOENT);

	/* Bad arguments. */
	o = opts(dir, KVT_AUTO);
	o.depth = 0;
	CHECK_EQ(kvt_nvme_open(&o, &n), -EINVAL);
	o = opts(dir, 7);
	CHECK_EQ(kvt_nvme_open(&o, &n), -EINVAL);
	o = opts(dir, KVT_AUTO);
	o.bytes = 0;
	CHECK_EQ(kvt_nvme_open(&o, &n), -EINVAL);
	CHECK_EQ(entries(dir), 0);
}

/* dir refuses O_DIRECT. */
static void fallback(const char *dir)
{
	struct kvt_nvme_info info;
	struct kvt_nvme_opts o;
	struct kvt_nvme *n;
	char path[4096];
	uint8_t *buf;

	/* Required: refused, nothing left behind (directory or file path). */
	o = opts(dir, KVT_ON);
	CHECK_EQ(kvt_nvme_open(&o, &n), -EINVAL);
	snprintf(path, sizeof(path), "%s/nvme-on", dir);
	o = opts(path, KVT_ON);
	CHECK_EQ(kvt_nvme_open(&o, &n), -EINVAL);
	CHECK_EQ(entries(dir), 0);
	CHECK_EQ(warnings, 0);

	/* Auto: buffered, said so once. */
	o = opts(dir, KVT_AUTO);
	CHECK_EQ(kvt_nvme_open(&o, &n), 0);
	kvt_nvme_info(n, &info);
	CHECK_EQ(info.direct, 0);
	CHECK(info.notes[0] != 0);
	CHECK_EQ(warnings, 1);
	CHECK_EQ(entries(dir), 0);	/* the temp file is unlinked already */
	fprintf(stderr, "notes: %s\n", info.notes);

	CHECK(posix_memalign((void **)&buf, PG, 2 * PG) == 0);
	memset(buf, 0x5a, PG);
	memset(buf + PG, 0, PG);
	struct kvt_io io = { .off = 3 * PG, .buf = buf, .len = PG, .op = KVT_IO_WRITE };

	CHECK_EQ(kvt_nvme_run(n, &io, 1, NULL, NULL), 0);
	CHECK_EQ(io.res, 0);
	io.op = KVT_IO_READ;
	io.buf = buf + PG;
	CHECK_EQ(kvt_nvme_run(n, &io, 1, NULL, NULL), 0);
	CHECK_EQ(io.res, 0);
	CHECK(memcmp(buf, buf + PG, PG) == 0);
	free(buf);
	kvt_nvme_close(n);

	/* Off: buffered without a word. */
	o = opts(dir, KVT_OFF);
	CHECK_EQ(kvt_nvme_open(&o, &n), 0);
	kvt_nvme_info(n, &info);
	CHECK_EQ(info.direct, 0);
	CHECK_EQ(warnings, 1);
	kvt_nvme_close(n);
}

int main(void)
{
	const char *tdir = getenv("KVT_TEST_DIR");
	char dir[2048], mnt[2200];
	int r;

	CHECK(snprintf(dir, sizeof(dir), "%s/fallback-%d", tdir ? tdir : "/tmp",
		       (int)getpid()) < (int)sizeof(dir) - 64);
	CHECK(mkdir(dir, 0700) == 0);
	file_modes(dir);

	r = refuses_direct("/dev/shm");
	if (r == 1) {
		snprintf(mnt, sizeof(mnt), "/dev/shm/kvt-fallback-%d", (int)getpid());
		CHECK(mkdir(mnt, 0700) == 0);
		fallback(mnt);
		rmdir(mnt);
		rmdir(dir);
		return 0;
	}
	/* A ramfs of our own, in a mount namespace of our own. */
	snprintf(mnt, sizeof(mnt), "%s/ramfs", dir);
	CHECK(mkdir(mnt, 0700) == 0);
	if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
	    mount("kvt-ramfs", mnt, "ramfs", 0, "mode=0700")) {
		rmdir(mnt);
		rmdir(dir);
		SKIP("/dev/shm accepts O_DIRECT and no private ramfs here (%s)", strerror(errno));
	}
	if (refuses_direct(mnt) != 1) {
		umount2(mnt, MNT_DETACH);
		rmdir(mnt);
		rmdir(dir);
		SKIP("no file system here refuses O_DIRECT");
	}
	fallback(mnt);
	/* Not lazy: close must have let go of every file on it. */
	CHECK(umount(mnt) == 0);
	rmdir(mnt);
	rmdir(dir);
	return 0;
}
