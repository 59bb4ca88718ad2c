/* SPDX-License-Identifier: MIT */
/* Files written whole through a temporary and a rename (afile.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pager/afile.h"
#include "pager/errf.h"

/* Split path into its directory (".", "/" or the part before the last
 * '/') and its last component. -ENAMETOOLONG, or -EISDIR when the last
 * component is empty ("dir/"). */
static int split(const char *path, char *dir, size_t dirlen, const char **base)
{
	const char *slash = strrchr(path, '/');

	*base = slash ? slash + 1 : path;
	if (!**base)
		return -EISDIR;
	if (!slash)
		snprintf(dir, dirlen, ".");
	else if ((size_t)(slash - path) >= dirlen)
		return -ENAMETOOLONG;
	else
		snprintf(dir, dirlen, "%.*s", slash == path ? 1 : (int)(slash - path), path);
	return 0;
}

/* 1 when name is base + ".PID.tmp" for some PID; *pid gets it. */
static int tmp_of(const char *name, const char *base, size_t blen, long *pid)
{
	const char *s = name + blen + 1;
	char *end;

	if (strncmp(name, base, blen) || name[blen] != '.' || *s < '1' || *s > '9')
		return 0;
	*pid = strtol(s, &end, 10);
	return !strcmp(end, ".tmp") && *pid > 0;
}

int kvt_afile_sweep(const char *path)
{
	char dir[KVT_PATH_MAX];
	const char *base;
	struct dirent *de;
	size_t blen;
	DIR *d;
	int n = 0;

	if (!path || split(path, dir, sizeof(dir), &base) || !(d = opendir(dir)))
		return 0;
	blen = strlen(base);
	while ((de = readdir(d))) {
		struct stat st;
		long pid;

		if (!tmp_of(de->d_name, base, blen, &pid) || pid == (long)getpid())
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) ||
		    !S_ISREG(st.st_mode) || st.st_uid != geteuid())
			continue;
		/* A PID that runs (ours to signal or not) may still be writing. */
		if ((pid_t)pid != pid || !kill((pid_t)pid, 0) || errno != ESRCH)
			continue;
		n += !unlinkat(dirfd(d), de->d_name, 0);
	}
	closedir(d);
	return n;
}

int kvt_afile_open(struct kvt_afile *a, const char *path, mode_t mode,
		   char *err, size_t errlen)
{
	char dir[KVT_PATH_MAX];
	const char *base;
	struct stat st;
	int r;

	a->fd = -1;
	a->f = NULL;
	if (!path || !*path)
		return kvt_errf(err, errlen, -EINVAL, "no file name");
	if (strlen(path) >= sizeof(a->path))
		return kvt_errf(err, errlen, -ENAMETOOLONG, "%.64s...: path too long", path);
	if ((r = split(path, dir, sizeof(dir), &base)))
		return kvt_errf(err, errlen, r, "%s: %s", path, r == -EISDIR ?
				"names a directory, not a file" : strerror(-r));
	snprintf(a->path, sizeof(a->path), "%s", path);
	if (!lstat(path, &st) && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode) ||
				  S_ISSOCK(st.st_mode))) {
		a->tmp[0] = 0;
		a->fd = open(path, O_WRONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
		if (a->fd < 0)
			return kvt_errf(err, errlen, -errno, "%s: cannot open: %s", path,
					strerror(errno));
		return 0;
	}
	snprintf(a->tmp, sizeof(a->tmp), "%s.%ld.tmp", path, (long)getpid());
	kvt_afile_sweep(path);
	for (int tries = 0; tries < 2; tries++) {
		a->fd = open(a->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
		if (a->fd >= 0 || errno != EEXIST)
			break;
		/* Ours, from an earlier life of this PID: a regular file of
		 * this user goes; anything else stays and is refused. */
		if (lstat(a->tmp, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid())
			return kvt_errf(err, errlen, -EEXIST, "%s: exists and is not a file of ours "
					"left by an earlier write (a link, or another user's): not "
					"touched; remove it", a->tmp);
		if (unlink(a->tmp) && errno != ENOENT)
			break;
	}
	if (a->fd < 0)
		return kvt_errf(err, errlen, -errno, "%s: cannot create: %s", a->tmp,
				strerror(errno));
	return 0;
}

FILE *kvt_afile_stdio(struct kvt_afile *a)
{
	if (!a->f && a->fd >= 0)
		a->f = fdopen(a->fd, "w");
	return a->f;
}

int kvt_afile_write(struct kvt_afile *a, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(a->fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Close the stream or the fd; 0 or -errno of the first failure. */
static int close_tmp(struct kvt_afile *a)
{
	int r = 0;

	if (a->f) {
		if (fclose(a->f))
			r = -errno;
	} else if (a->fd >= 0 && close(a->fd)) {
		r = -errno;
	}
	a->f = NULL;
	a->fd = -1;
	return r;
}

void kvt_afile_abort(struct kvt_afile *a)
{
	if (a->fd < 0)
		return;
	close_tmp(a);
	if (a->tmp[0])
		unlink(a->tmp);
}

int kvt_afile_commit(struct kvt_afile *a, char *err, size_t errlen)
{
	char dir[KVT_PATH_MAX];
	const char *base;
	int r = 0, dfd;

	if (a->fd < 0)
		return kvt_errf(err, errlen, -EBADF, "%s: not open", a->path);
	if (a->f && fflush(a->f))
		r = -errno;
	/* Not every file system syncs (EINVAL: a pipe, a special file). */
	if (!r && fsync(a->fd) && errno != EINVAL && errno != EROFS)
		r = -errno;
	int c = close_tmp(a);
	if (!r)
		r = c;
	if (!a->tmp[0])
		return r ? kvt_errf(err, errlen, r, "%s: write failed: %s", a->path,
				    strerror(-r)) : 0;
	if (r) {
		unlink(a->tmp);
		return kvt_errf(err, errlen, r, "%s: write failed: %s", a->tmp, strerror(-r));
	}
	if (rename(a->tmp, a->path)) {
		r = -errno;
		unlink(a->tmp);
		return kvt_errf(err, errlen, r, "%s: cannot rename %s into place: %s", a->path,
				a->tmp, strerror(-r));
	}
	/* The rename survives a power loss only once its directory is on disk
	 * (split cannot fail: open checked the path). */
	split(a->path, dir, sizeof(dir), &base);
	if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return kvt_errf(err, errlen, -errno, "%s: written, but its directory cannot be "
				"opened to sync: %s", a->path, strerror(errno));
	if (fsync(dfd) && errno != EINVAL && errno != EROFS)
		r = kvt_errf(err, errlen, -errno, "%s: written, but its directory could not be "
			     "synced: %s", a->path, strerror(errno));
	close(dfd);
	return r;
}

int kvt_afile_put(const char *path, mode_t mode, const void *buf, size_t len,
		  char *err, size_t errlen)
{
	struct kvt_afile a;
	int r = kvt_afile_open(&a, path, mode, err, errlen);

	if (r)
		return r;
	if ((r = kvt_afile_write(&a, buf, len))) {
		kvt_afile_abort(&a);
		return kvt_errf(err, errlen, r, "%s: write failed: %s", a.tmp, strerror(-r));
	}
	return kvt_afile_commit(&a, err, errlen);
}
