/* SPDX-License-Identifier: MIT */
/*
 * Files that appear whole or not at all, and never through a link: every
 * file the library and the tools write for a user (traces, conversions,
 * sessions, metrics, CSVs, plots) goes through here.
 *
 * The data goes to a temporary beside the target, PATH.PID.tmp, created
 * with O_CREAT | O_EXCL | O_NOFOLLOW: a link planted at either name is
 * never followed, and nothing that is there already is truncated. Commit
 * fsyncs it, renames it over PATH (rename replaces a link at PATH with
 * the file; the link's target is not touched) and fsyncs the directory,
 * so a reader of PATH, a crash or a power loss sees the old file or the
 * new one, never a part. A temporary that a writer of PATH left when it
 * died (a regular file of this user named PATH.PID.tmp whose PID no
 * longer runs) is removed when PATH is next written.
 *
 * A FIFO, character device or socket at PATH itself (not behind a link)
 * is a stream, not a file: it is opened as it is (O_WRONLY | O_NOFOLLOW,
 * never created or truncated), written in place, and commit only closes
 * it; there is no temporary. That is how a trace goes to a pipe.
 *
 * Not thread-safe on one struct kvt_afile; two writers of one PATH each
 * get a temporary of their own, and the last commit wins.
 */
#ifndef KVT_PAGER_AFILE_H
#define KVT_PAGER_AFILE_H

#include <stdio.h>
#include <sys/types.h>

#include <kvt/config.h>

struct kvt_afile {
	int	 fd;			/* the temporary, open for writing; -1 when closed */
	FILE	*f;			/* kvt_afile_stdio's stream over fd, or NULL */
	char	 path[KVT_PATH_MAX];	/* the target */
	char	 tmp[KVT_PATH_MAX + 32];	/* PATH.PID.tmp; "" for a stream */
};

/*
 * Start writing path: remove stale temporaries of path (kvt_afile_sweep),
 * then create PATH.PID.tmp with mode (0644 for outputs, 0600 for what
 * only the user should read; the umask applies). 0, or -errno with one
 * line in err (errlen bytes; err may be NULL) naming the file: a path
 * longer than KVT_PATH_MAX, a temporary that exists and is not a regular
 * file of this user (a link, another user's: not touched), or open's
 * errno. On failure *a holds nothing to release.
 */
int  kvt_afile_open(struct kvt_afile *a, const char *path, mode_t mode,
		    char *err, size_t errlen);
/* A stdio stream over the temporary (fully buffered); kvt_afile_commit
 * and kvt_afile_abort flush and close it. NULL, errno set, if fdopen
 * fails. */
FILE *kvt_afile_stdio(struct kvt_afile *a);
/* All of buf to the temporary (not through the stream). 0 or -errno. */
int  kvt_afile_write(struct kvt_afile *a, const void *buf, size_t len);
/*
 * Flush, fsync and close the temporary, rename it over the target and
 * fsync the directory. 0, or -errno with one line in err; on any failure
 * before the rename the temporary is removed and the target is as it
 * was. A failed directory fsync after the rename is reported (the file
 * is in place, but may not survive a power loss).
 */
int  kvt_afile_commit(struct kvt_afile *a, char *err, size_t errlen);
/* Close and remove the temporary; the target stays as it was. A stream
 * is only closed. */
void kvt_afile_abort(struct kvt_afile *a);
/* The whole file at once: open, write len bytes of buf, commit. */
int  kvt_afile_put(const char *path, mode_t mode, const void *buf, size_t len,
		   char *err, size_t errlen);
/*
 * Remove the temporaries PATH.PID.tmp in path's directory that are
 * regular files of this user whose PID is not a running process. Returns
 * how many it removed (errors are ignored: a temporary not removed is
 * only clutter).
 */
int  kvt_afile_sweep(const char *path);

#endif
