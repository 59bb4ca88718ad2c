/* SPDX-License-Identifier: MIT */
/*
 * Traces: the reader (every check at open), the buffered writer, the
 * recorder the live pager appends to, a summary that counts what a trace
 * says the way the pager's statistics count it, and the interchange with
 * libCacheSim's oracleGeneral and Mooncake's JSONL traces.
 * docs/trace-format.md describes the bytes; pager/trace.h the contracts.
 *
 * Library rules: nothing prints, functions return 0 or -errno; messages
 * go into the caller's err buffer.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "pager/afile.h"
#include "pager/errf.h"
#include "pager/internal.h"
#include "pager/trace.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "traces are little-endian and read in place: a big-endian reader needs byte swaps"
#endif

#define WBUF_BYTES	(1u << 20)	/* writer buffer */
#define REC_ALIGN	64		/* rec_off is rounded up to this */
#define REC_SIZE_MAX	4096		/* a larger rec_size is not a trace */
#define OG_SIZE		24		/* oracleGeneral request */

/* ---------------------------------------------------------------------
 * Reading
 */

/* Inputs larger than this are refused rather than read into memory. */
#define INPUT_MAX	((size_t)1 << 40)
#define ZSTD_MAGIC	"\x28\xb5\x2f\xfd"

static const char *input_name(const char *path)
{
	return strcmp(path, "-") ? path : "standard input";
}

/* All of fd into a malloc'd buffer. */
static int read_all(int fd, const char *path, struct kvt_input *in, char *err, size_t errlen)
{
	size_t cap = 1 << 16, n = 0;
	uint8_t *b = malloc(cap), *nb;
	ssize_t r;

	for (;;) {
		if (!b)
			return kvt_errf(err, errlen, -ENOMEM, "%s: out of memory", input_name(path));
		if (n == cap) {
			if (cap >= INPUT_MAX) {
				free(b);
				return kvt_errf(err, errlen, -EFBIG, "%s: larger than %zu bytes",
						input_name(path), INPUT_MAX);
			}
			nb = realloc(b, cap *= 2);
			if (!nb)
				free(b);
			b = nb;
			continue;
		}
		r = read(fd, b + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;

			free(b);
			return kvt_errf(err, errlen, -e, "%s: %s", input_name(path), strerror(e));
		}
		if (!r)
			break;
		n += (size_t)r;
	}
	in->buf = b;
	in->p = b;
	in->n = n;
	return 0;
}

/* Replace the zstd-compressed bytes of *in by what they decompress to:
 * every frame, one after another, as the zstd tool does. */
static int unzstd(const char *path, struct kvt_input *in, char *err, size_t errlen)
{
	ZSTD_DStream *z = ZSTD_createDStream();
	ZSTD_inBuffer src = { in->p, in->n, 0 };
	size_t cap = in->n * 4 > (1 << 16) ? in->n * 4 : (1 << 16), r = 1, frame = 0;
	ZSTD_outBuffer dst = { malloc(cap), cap, 0 };
	int rc = 0;

	if (!z || !dst.dst) {
		rc = kvt_errf(err, errlen, -ENOMEM, "%s: out of memory", input_name(path));
		goto out;
	}
	while (src.pos < src.size || r) {
		if (dst.pos == dst.size) {
			void *nb = dst.size < INPUT_MAX ? realloc(dst.dst, dst.size * 2) : NULL;

			if (!nb) {
				rc = dst.size < INPUT_MAX
					? kvt_errf(err, errlen, -ENOMEM, "%s: out of memory", input_name(path))
					: kvt_errf(err, errlen, -EFBIG, "%s: decompresses to more than %zu "
						   "bytes", input_name(path), INPUT_MAX);
				goto out;
			}
			dst.dst = nb;
			dst.size *= 2;
		}
		size_t before = src.pos, made = dst.pos;

		r = ZSTD_decompressStream(z, &dst, &src);
		if (ZSTD_isError(r)) {
			rc = kvt_errf(err, errlen, -EINVAL, "%s: the zstd frame at byte %zu: %s",
				      input_name(path), frame, ZSTD_getErrorName(r));
			goto out;
		}
		if (!r)
			frame = src.pos;	/* a frame ended; the next starts here */
		else if (src.pos == src.size && src.pos == before && dst.pos == made &&
			 dst.pos < dst.size) {
			rc = kvt_errf(err, errlen, -EINVAL, "%s: the zstd frame at byte %zu: truncated "
				      "(the input ends inside it, at byte %zu)", input_name(path),
				      frame, src.pos);
			goto out;
		}
	}
	free(in->buf);
	if (in->map)
		munmap(in->map, in->n);
	in->map = NULL;
	in->buf = dst.dst;
	in->p = dst.dst;
	in->n = dst.pos;
	in->zstd = 1;
	dst.dst = NULL;
out:
	free(dst.dst);
	ZSTD_freeDStream(z);
	return rc;
}

int kvt_input_open(const char *path, struct kvt_input *in, char *err, size_t errlen)
{
	struct stat st;
	int fd, rc = 0;

	memset(in, 0, sizeof(*in));
	if (!strcmp(path, "-")) {
		fd = STDIN_FILENO;
	} else {
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return kvt_errf(err, errlen, -errno, "%s: %s", path, strerror(errno));
	}
	if (fstat(fd, &st)) {
		rc = kvt_errf(err, errlen, -errno, "%s: %s", input_name(path), strerror(errno));
	} else if (S_ISDIR(st.st_mode)) {
		rc = kvt_errf(err, errlen, -EISDIR, "%s: is a directory", input_name(path));
	} else if (fd != STDIN_FILENO && !S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) {
		/* a device could be endless: "-" takes one through the shell */
		rc = kvt_errf(err, errlen, -EINVAL, "%s: not a regular file or a pipe", path);
	} else if (S_ISREG(st.st_mode) && st.st_size > 0 && fd != STDIN_FILENO) {
		in->map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (in->map == MAP_FAILED) {
			in->map = NULL;
			rc = kvt_errf(err, errlen, -errno, "%s: mmap: %s", path, strerror(errno));
		} else {
			in->p = in->map;
			in->n = (size_t)st.st_size;
		}
	} else {
		rc = read_all(fd, path, in, err, errlen);	/* stdin, a pipe, /proc, empty */
	}
	if (fd != STDIN_FILENO)
		close(fd);
	if (!rc && in->n >= 4 && !memcmp(in->p, ZSTD_MAGIC, 4))
		rc = unzstd(path, in, err, errlen);
	if (rc)
		kvt_input_close(in);
	return rc;
}

void kvt_input_close(struct kvt_input *in)
{
	if (in->map)
		munmap(in->map, in->n);
	free(in->buf);
	memset(in, 0, sizeof(*in));
}

static void unmap(struct kvt_trace *t)
{
	kvt_input_close(&t->in);
	free(t->own);
	memset(t, 0, sizeof(*t));
}

int kvt_trace_open(const char *path, struct kvt_trace *t, char *err, size_t errlen)
{
	struct kvt_input in;
	int rc;

	memset(t, 0, sizeof(*t));
	rc = kvt_input_open(path, &in, err, errlen);
	return rc ? rc : kvt_trace_open_input(&in, path, t, err, errlen);
}

int kvt_trace_open_input(struct kvt_input *in, const char *path, struct kvt_trace *t,
			 char *err, size_t errlen)
{
	uint64_t size, hdr_size, rec_size, config_len, rec_off, nrec, tail;
	const uint8_t *b;

	memset(t, 0, sizeof(*t));
	t->in = *in;
	memset(in, 0, sizeof(*in));
	path = input_name(path);
	size = t->in.n;
	b = t->in.p;
	if (size < 8) {
		unmap(t);
		return kvt_errf(err, errlen, -EINVAL, "%s: byte %llu: truncated header (%llu of %zu bytes)",
				path, (unsigned long long)size, (unsigned long long)size,
				sizeof(struct kvt_trace_hdr));
	}

#define BAD(off, ...) do { char _m[256]; snprintf(_m, sizeof(_m), __VA_ARGS__); \
		unmap(t); return kvt_errf(err, errlen, -EINVAL, "%s: byte %llu: %s", path, \
					  (unsigned long long)(off), _m); } while (0)
	if (memcmp(b, KVT_TRACE_MAGIC, 8))
		BAD(0, "bad magic (not a kvtier trace)");
	if (size < 24)
		BAD(size, "truncated header (%llu of %zu bytes)", (unsigned long long)size,
		    sizeof(struct kvt_trace_hdr));
	uint32_t version, u32;
	memcpy(&version, b + 8, 4);
	if (version != KVT_TRACE_VERSION)
		BAD(8, "unknown version %u (this reader knows %u)", version, KVT_TRACE_VERSION);
	memcpy(&u32, b + 12, 4);
	hdr_size = u32;
	if (hdr_size < sizeof(struct kvt_trace_hdr) || hdr_size % 8)
		BAD(12, "hdr_size %llu: must be >= %zu and a multiple of 8",
		    (unsigned long long)hdr_size, sizeof(struct kvt_trace_hdr));
	memcpy(&u32, b + 16, 4);
	rec_size = u32;
	if (rec_size < sizeof(struct kvt_trace_rec) || rec_size % 8 || rec_size > REC_SIZE_MAX)
		BAD(16, "rec_size %llu: must be %zu..%u and a multiple of 8",
		    (unsigned long long)rec_size, sizeof(struct kvt_trace_rec), REC_SIZE_MAX);
	if (size < hdr_size)
		BAD(size, "truncated header (%llu of %llu bytes)", (unsigned long long)size,
		    (unsigned long long)hdr_size);
	memcpy(&t->hdr, b, sizeof(t->hdr));
	config_len = t->hdr.config_len;
	rec_off = t->hdr.rec_off;
	if (hdr_size + config_len > size)
		BAD(20, "config_len %llu runs past the end of the file (%llu bytes)",
		    (unsigned long long)config_len, (unsigned long long)size);
	if (rec_off < hdr_size + config_len || rec_off > size || rec_off % 8)
		BAD(24, "rec_off %llu: must be 8-aligned, at or after the config text (byte %llu) "
		    "and within the file (%llu bytes)", (unsigned long long)rec_off,
		    (unsigned long long)(hdr_size + config_len), (unsigned long long)size);
	if (t->hdr.source > KVT_SRC_SYNTH)
		BAD(offsetof(struct kvt_trace_hdr, source), "unknown source %u", t->hdr.source);
	for (int i = 0; i < 3; i++)
		if (!memchr(t->hdr.policy[i], 0, sizeof(t->hdr.policy[i])))
			BAD(offsetof(struct kvt_trace_hdr, policy) + 32 * (unsigned)i,
			    "policy %d is not NUL-terminated", i);
	nrec = (size - rec_off) / rec_size;
	tail = (size - rec_off) % rec_size;
	if (tail)
		BAD(rec_off + nrec * rec_size, "truncated record %llu (%llu of %llu bytes)",
		    (unsigned long long)nrec, (unsigned long long)tail,
		    (unsigned long long)rec_size);
	for (uint64_t i = 0; i < nrec; i++) {
		const uint8_t *r = b + rec_off + i * rec_size;
		uint64_t at = rec_off + i * rec_size;
		uint8_t ev = r[offsetof(struct kvt_trace_rec, event)];
		uint8_t from = r[offsetof(struct kvt_trace_rec, from)];
		uint8_t to = r[offsetof(struct kvt_trace_rec, to)];

		if (ev < 1 || ev > KVT_EV_MAX)
			BAD(at + offsetof(struct kvt_trace_rec, event), "record %llu: unknown event %u",
			    (unsigned long long)i, ev);
		if (from > 2 && from != KVT_TRACE_NONE)
			BAD(at + offsetof(struct kvt_trace_rec, from), "record %llu: bad tier %u in from",
			    (unsigned long long)i, from);
		if (to > 2 && to != KVT_TRACE_NONE)
			BAD(at + offsetof(struct kvt_trace_rec, to), "record %llu: bad tier %u in to",
			    (unsigned long long)i, to);
	}
#undef BAD
	t->config = (const char *)b + hdr_size;
	t->nrec = nrec;
	if (rec_size == sizeof(struct kvt_trace_rec)) {
		t->rec = (const struct kvt_trace_rec *)(b + rec_off);
	} else {
		struct kvt_trace_rec *v = malloc((nrec ? nrec : 1) * sizeof(*v));
		if (!v) {
			unmap(t);
			return kvt_errf(err, errlen, -ENOMEM, "%s: out of memory", path);
		}
		for (uint64_t i = 0; i < nrec; i++)
			memcpy(&v[i], b + rec_off + i * rec_size, sizeof(*v));
		t->own = v;
		t->rec = v;
	}
	return 0;
}

void kvt_trace_close(struct kvt_trace *t)
{
	if (t)
		unmap(t);
}

/* ---------------------------------------------------------------------
 * Writing
 */

struct kvt_trace_writer {
	struct kvt_afile af;	/* PATH.PID.tmp until kvt_trace_finish */
	int	 err;		/* first error, sticky */
	struct kvt_trace_hdr hdr;
	uint8_t	*buf;
	size_t	 n, cap;
};

static int write_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;
	while (n) {
		ssize_t w = write(fd, b, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (w == 0)
			return -EIO;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

static void wflush(struct kvt_trace_writer *w)
{
	if (w->n && !w->err)
		w->err = write_all(w->af.fd, w->buf, w->n);
	w->n = 0;
}

int kvt_trace_create(const char *path, const struct kvt_trace_hdr *hdr,
		     const char *config, size_t config_len, struct kvt_trace_writer **out)
{
	static const uint8_t zero[REC_ALIGN];
	struct kvt_trace_writer *w;
	int rc;

	if (!path || !hdr || !out || (config_len && !config) || config_len > UINT32_MAX)
		return -EINVAL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->buf = malloc(WBUF_BYTES);
	if (!w->buf) {
		free(w);
		return -ENOMEM;
	}
	w->cap = WBUF_BYTES;
	rc = kvt_afile_open(&w->af, path, 0644, NULL, 0);
	if (rc) {
		free(w->buf);
		free(w);
		return rc;
	}
	w->hdr = *hdr;
	memcpy(w->hdr.magic, KVT_TRACE_MAGIC, 8);
	w->hdr.version = KVT_TRACE_VERSION;
	w->hdr.hdr_size = sizeof(struct kvt_trace_hdr);
	w->hdr.rec_size = sizeof(struct kvt_trace_rec);
	w->hdr.config_len = (uint32_t)config_len;
	w->hdr.rec_off = (sizeof(struct kvt_trace_hdr) + config_len + REC_ALIGN - 1) /
			 REC_ALIGN * REC_ALIGN;
	w->hdr.config_hash = XXH3_64bits(config_len ? config : "", config_len);
	rc = write_all(w->af.fd, &w->hdr, sizeof(w->hdr));
	if (!rc && config_len)
		rc = write_all(w->af.fd, config, config_len);
	if (!rc)
		rc = write_all(w->af.fd, zero, w->hdr.rec_off - sizeof(w->hdr) - config_len);
	if (rc) {
		kvt_afile_abort(&w->af);
		free(w->buf);
		free(w);
		return rc;
	}
	*out = w;
	return 0;
}

int kvt_trace_put(struct kvt_trace_writer *w, const struct kvt_trace_rec *r, size_t n)
{
	size_t bytes = n * sizeof(*r);

	if (w->err)
		return w->err;
	if (w->n + bytes > w->cap || bytes >= w->cap / 4)
		wflush(w);
	if (bytes >= w->cap / 4) {
		/* A large block (the recorder's buffers) goes out as one write. */
		if (!w->err)
			w->err = write_all(w->af.fd, r, bytes);
	} else {
		memcpy(w->buf + w->n, r, bytes);
		w->n += bytes;
	}
	return w->err;
}

int kvt_trace_finish(struct kvt_trace_writer *w)
{
	int rc;

	if (!w)
		return 0;
	wflush(w);
	rc = w->err;
	/* The header again: fields known only at the end (dropped). */
	if (!rc && pwrite(w->af.fd, &w->hdr, sizeof(w->hdr), 0) != (ssize_t)sizeof(w->hdr))
		rc = errno ? -errno : -EIO;
	if (rc)
		kvt_afile_abort(&w->af);
	else
		rc = kvt_afile_commit(&w->af, NULL, 0);
	free(w->buf);
	free(w);
	return rc;
}

void kvt_trace_abort(struct kvt_trace_writer *w)
{
	if (!w)
		return;
	kvt_afile_abort(&w->af);
	free(w->buf);
	free(w);
}

/* ---------------------------------------------------------------------
 * The recorder: the live pager fills records in place in in-memory
 * buffers, under its lock; a thread of the recorder writes full buffers
 * out, one write() each. The appender never waits for I/O: when every
 * buffer is full and no more may be allocated, records go to a scratch
 * record and are counted as dropped, and a KVT_EV_GAP record stands where
 * they were.
 */

#define RB_RECS		2048	/* records per buffer: 96 KiB */
#define RB_PREALLOC	4
#define RB_MAX		512	/* at most 48 MiB waiting for the disk */

struct rbuf {
	struct rbuf *next;
	uint32_t n;
	struct kvt_trace_rec r[RB_RECS];
};

struct kvt_recorder {
	struct kvt_recorder_head h;	/* the appender's fast path (first) */
	struct kvt_trace_writer *w;
	pthread_t th;
	pthread_mutex_t mu;	/* guards the lists and stop */
	pthread_cond_t cv;
	struct rbuf *full, **full_tail, *spare;
	uint32_t nbufs, max_bufs;
	int	 stop;
	/* The appender's side, under the caller's lock. */
	struct rbuf *cur;
	uint64_t records;	/* in buffers handed over */
	uint64_t dropped, gap;
	int	 gap_fix;	/* cur->r[0] is a GAP waiting for the time of r[1] */
	struct kvt_trace_rec sink;	/* where dropped records are written */
};

static void *recorder_main(void *arg)
{
	struct kvt_recorder *r = arg;

	pthread_mutex_lock(&r->mu);
	for (;;) {
		while (!r->full && !r->stop)
			pthread_cond_wait(&r->cv, &r->mu);
		struct rbuf *b = r->full;
		if (!b)
			break;
		r->full = b->next;
		if (!r->full)
			r->full_tail = &r->full;
		pthread_mutex_unlock(&r->mu);
		/* A failed write keeps failing (sticky); buffers still cycle. */
		(void)kvt_trace_put(r->w, b->r, b->n);
		pthread_mutex_lock(&r->mu);
		b->n = 0;
		b->next = r->spare;
		r->spare = b;
	}
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

int kvt_recorder_start(const char *path, const struct kvt_trace_hdr *hdr, const char *config,
		       size_t config_len, unsigned max_bufs, struct kvt_recorder **out)
{
	struct kvt_recorder *r = calloc(1, sizeof(*r));
	int rc;

	if (!r)
		return -ENOMEM;
	r->full_tail = &r->full;
	r->max_bufs = max_bufs ? max_bufs : RB_MAX;
	for (uint32_t i = 0; i < RB_PREALLOC && i < r->max_bufs; i++) {
		struct rbuf *b = malloc(sizeof(*b));
		if (!b) {
			rc = -ENOMEM;
			goto fail;
		}
		/* Touched now, so no page faults under the pager's lock later. */
		memset(b, 0, sizeof(*b));
		b->next = r->spare;
		r->spare = b;
		r->nbufs++;
	}
	rc = kvt_trace_create(path, hdr, config, config_len, &r->w);
	if (rc)
		goto fail;
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	rc = -pthread_create(&r->th, NULL, recorder_main, r);
	if (rc) {
		pthread_mutex_destroy(&r->mu);
		pthread_cond_destroy(&r->cv);
		kvt_trace_abort(r->w);
		goto fail;
	}
	*out = r;
	return 0;
fail:
	while (r->spare) {
		struct rbuf *b = r->spare;
		r->spare = b->next;
		free(b);
	}
	free(r);
	return rc;
}

/* The current buffer's record count, with a pending GAP's time filled in
 * from the record after it. */
static void seal_cur(struct kvt_recorder *r)
{
	struct rbuf *b = r->cur;

	b->n = (uint32_t)(r->h.next - b->r);
	if (r->gap_fix && b->n > 1) {
		b->r[0].time = b->r[1].time;
		b->r[0].step = b->r[1].step;
	}
	r->gap_fix = 0;
	r->records += b->n;
}

/* Hand the current buffer to the thread (when it holds records) and take
 * an empty one. Returns 0 when there is none to take. Caller's lock. */
static int rotate(struct kvt_recorder *r)
{
	struct rbuf *b;

	if (r->cur)
		seal_cur(r);
	pthread_mutex_lock(&r->mu);
	if (r->cur && r->cur->n) {
		r->cur->next = NULL;
		*r->full_tail = r->cur;
		r->full_tail = &r->cur->next;
		pthread_cond_signal(&r->cv);
	} else if (r->cur) {
		r->cur->next = r->spare;
		r->spare = r->cur;
	}
	r->cur = NULL;
	b = r->spare;
	if (b) {
		r->spare = b->next;
	} else if (r->nbufs < r->max_bufs) {
		/* The rare path (the disk is behind): malloc does no I/O. */
		b = malloc(sizeof(*b));
		if (b)
			r->nbufs++;
	}
	pthread_mutex_unlock(&r->mu);
	r->cur = b;
	if (b) {
		b->n = 0;
		r->h.next = b->r;
		r->h.end = b->r + RB_RECS;
	} else {
		r->h.next = r->h.end = NULL;
	}
	return b != NULL;
}

struct kvt_trace_rec *kvt_recorder_slot_slow(struct kvt_recorder *r)
{
	if (!rotate(r)) {
		r->dropped++;
		r->gap++;
		return &r->sink;
	}
	if (r->gap) {
		/* An empty buffer: the GAP first; its time and step are those
		 * of the record the caller is about to fill in. */
		*r->h.next++ = (struct kvt_trace_rec){
			.key = r->gap, .seq = KVT_REF_NONE, .layer = KVT_REF_NONE,
			.index = KVT_REF_NONE, .event = KVT_EV_GAP, .from = KVT_TRACE_NONE,
			.to = KVT_TRACE_NONE,
		};
		r->gap = 0;
		r->gap_fix = 1;
	}
	return r->h.next++;
}

void kvt_recorder_counts(const struct kvt_recorder *r, uint64_t *records, uint64_t *dropped)
{
	*records = r->records + (r->cur ? (uint64_t)(r->h.next - r->cur->r) : 0);
	*dropped = r->dropped;
}

int kvt_recorder_finish(struct kvt_recorder *r)
{
	int rc;

	if (!r)
		return 0;
	if (r->cur)
		seal_cur(r);
	pthread_mutex_lock(&r->mu);
	if (r->cur && r->cur->n) {
		r->cur->next = NULL;
		*r->full_tail = r->cur;
		r->full_tail = &r->cur->next;
	} else if (r->cur) {
		r->cur->next = r->spare;
		r->spare = r->cur;
	}
	r->cur = NULL;
	r->stop = 1;
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
	pthread_join(r->th, NULL);
	if (r->gap) {
		/* Records dropped after the last that got a buffer: a GAP at
		 * the end stands for them, timed as the last of them. */
		struct kvt_trace_rec g = {
			.time = r->sink.time, .step = r->sink.step, .key = r->gap,
			.seq = KVT_REF_NONE, .layer = KVT_REF_NONE, .index = KVT_REF_NONE,
			.event = KVT_EV_GAP, .from = KVT_TRACE_NONE, .to = KVT_TRACE_NONE,
		};
		(void)kvt_trace_put(r->w, &g, 1);
		r->gap = 0;
	}
	r->w->hdr.dropped = r->dropped;
	rc = kvt_trace_finish(r->w);
	while (r->spare) {
		struct rbuf *b = r->spare;
		r->spare = b->next;
		free(b);
	}
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->cv);
	free(r);
	return rc;
}

/* ---------------------------------------------------------------------
 * A map from 64-bit keys to 64-bit values (open addressing)
 */

struct kmap {
	uint64_t *key;
	int64_t	 *val;
	uint8_t	 *used;
	size_t	  cap, n;		/* cap: a power of two */
};

static int kmap_init(struct kmap *m, size_t want)
{
	size_t cap = 64;
	while (cap < want * 2)
		cap *= 2;
	m->key = malloc(cap * sizeof(*m->key));
	m->val = malloc(cap * sizeof(*m->val));
	m->used = calloc(cap, 1);
	m->cap = cap;
	m->n = 0;
	if (!m->key || !m->val || !m->used) {
		free(m->key);
		free(m->val);
		free(m->used);
		return -ENOMEM;
	}
	return 0;
}

static void kmap_free(struct kmap *m)
{
	free(m->key);
	free(m->val);
	free(m->used);
}

static inline size_t kmap_hash(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return (size_t)k;
}

/* The slot of key k, inserting it (value v0) when absent; *fresh tells. */
static int64_t *kmap_get(struct kmap *m, uint64_t k, int64_t v0, int *fresh)
{
	if ((m->n + 1) * 2 > m->cap) {
		struct kmap g;
		if (kmap_init(&g, m->cap))
			return NULL;
		for (size_t i = 0; i < m->cap; i++) {
			if (!m->used[i])
				continue;
			size_t j = kmap_hash(m->key[i]) & (g.cap - 1);
			while (g.used[j])
				j = (j + 1) & (g.cap - 1);
			g.used[j] = 1;
			g.key[j] = m->key[i];
			g.val[j] = m->val[i];
			g.n++;
		}
		kmap_free(m);
		*m = g;
	}
	size_t j = kmap_hash(k) & (m->cap - 1);
	while (m->used[j] && m->key[j] != k)
		j = (j + 1) & (m->cap - 1);
	*fresh = !m->used[j];
	if (!m->used[j]) {
		m->used[j] = 1;
		m->key[j] = k;
		m->val[j] = v0;
		m->n++;
	}
	return &m->val[j];
}

/* ---------------------------------------------------------------------
 * Summary
 */

int kvt_trace_summarize(const struct kvt_trace *t, struct kvt_trace_summary *s)
{
	struct kmap keys;
	int pager = t->hdr.source == KVT_SRC_PAGER;
	int last = t->hdr.frames[KVT_TIER_NVME] ? 2 : 1;	/* as the pager's p->last */
	int fresh;

	memset(s, 0, sizeof(*s));
	if (kmap_init(&keys, 1024))
		return -ENOMEM;
	for (size_t i = 0; i < t->nrec; i++) {
		const struct kvt_trace_rec *r = &t->rec[i];

		s->events[r->event]++;
		if (i == 0 || r->step < s->first_step)
			s->first_step = r->step;
		if (i == 0 || r->step > s->last_step)
			s->last_step = r->step;
		switch (r->event) {
		case KVT_EV_ACCESS:
			if (!kmap_get(&keys, r->key, 0, &fresh)) {
				kmap_free(&keys);
				return -ENOMEM;
			}
			if (!pager)
				break;
			if (r->from == KVT_TRACE_NONE) {
				for (int ti = 0; ti <= last; ti++)
					s->misses[ti]++;
			} else {
				for (int ti = 0; ti < r->from; ti++)
					s->misses[ti]++;
				s->hits[r->from]++;
			}
			break;
		case KVT_EV_PROMOTE:
		case KVT_EV_DEMOTE:
			if (!pager || r->from > 2 || r->to > 2)
				break;
			if (r->event == KVT_EV_PROMOTE)
				s->promotions[r->to]++;
			else
				s->demotions[r->from]++;
			s->bytes_out[r->from] += r->bytes;
			s->bytes_in[r->to] += r->bytes;
			break;
		case KVT_EV_DROP:
			if (pager && r->from <= 2 && r->to <= 2 && r->to > r->from) {
				s->demotions[r->from]++;
				s->drops[r->from]++;
			}
			break;
		case KVT_EV_GAP:
			s->dropped += r->key;
			break;
		}
	}
	s->keys = keys.n;
	kmap_free(&keys);
	return 0;
}

/* ---------------------------------------------------------------------
 * Interchange
 */

static uint64_t realtime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Finish the output (rc 0) or drop it (rc set: out stays as it was). */
static int out_finish(struct kvt_trace_writer *w, int rc, const char *out, char *err, size_t errlen)
{
	int r2;

	if (rc) {
		kvt_trace_abort(w);
		return rc;
	}
	r2 = kvt_trace_finish(w);
	if (r2)
		rc = kvt_errf(err, errlen, r2, "%s: %s", out, strerror(-r2));
	return rc;
}

int kvt_trace_import_oracle(const char *in, const char *out, char *err, size_t errlen)
{
	struct kvt_trace_hdr hdr = { .source = KVT_SRC_ORACLE, .start_ns = realtime_ns() };
	struct kvt_trace_writer *w;
	struct kvt_input f;
	size_t n;
	int rc;

	rc = kvt_input_open(in, &f, err, errlen);
	if (rc)
		return rc;
	in = input_name(in);
	n = f.n / OG_SIZE;
	if (f.n % OG_SIZE) {
		rc = kvt_errf(err, errlen, -EINVAL, "%s: byte %zu: truncated request %zu (%zu of %d bytes)",
			      in, n * OG_SIZE, n, f.n % OG_SIZE, OG_SIZE);
		kvt_input_close(&f);
		return rc;
	}
	rc = kvt_trace_create(out, &hdr, NULL, 0, &w);
	if (rc) {
		kvt_input_close(&f);
		return kvt_errf(err, errlen, rc, "%s: %s", out, strerror(-rc));
	}
	for (size_t i = 0; i < n && !rc; i++) {
		const uint8_t *q = f.p + i * OG_SIZE;
		uint32_t clock, size;
		uint64_t id;
		memcpy(&clock, q, 4);
		memcpy(&id, q + 4, 8);
		memcpy(&size, q + 12, 4);
		struct kvt_trace_rec r = {
			.time = clock, .step = i, .key = id, .seq = KVT_REF_NONE,
			.layer = KVT_REF_NONE, .index = KVT_REF_NONE, .bytes = size,
			.event = KVT_EV_ACCESS, .from = KVT_TRACE_NONE, .to = KVT_TRACE_NONE,
		};
		rc = kvt_trace_put(w, &r, 1);
		if (rc)
			rc = kvt_errf(err, errlen, rc, "%s: %s", out, strerror(-rc));
	}
	kvt_input_close(&f);
	return out_finish(w, rc, out, err, errlen);
}

int kvt_trace_export_oracle(const char *in, const char *out, char *err, size_t errlen)
{
	struct kvt_trace t;
	struct kmap last;
	int64_t *next = NULL;
	size_t nacc = 0, k;
	struct kvt_afile af;
	FILE *fo = NULL;
	int rc, fresh;

	rc = kvt_trace_open(in, &t, err, errlen);
	if (rc)
		return rc;
	for (size_t i = 0; i < t.nrec; i++)
		nacc += t.rec[i].event == KVT_EV_ACCESS;
	next = malloc((nacc ? nacc : 1) * sizeof(*next));
	if (!next || kmap_init(&last, 1024)) {
		free(next);
		kvt_trace_close(&t);
		return kvt_errf(err, errlen, -ENOMEM, "%s: out of memory", in);
	}
	/* Backwards: each request's next request for the same key, as the
	 * 1-based index libCacheSim's traceConv writes. */
	k = nacc;
	for (size_t i = t.nrec; i-- > 0;) {
		const struct kvt_trace_rec *r = &t.rec[i];
		if (r->event != KVT_EV_ACCESS)
			continue;
		k--;
		int64_t *v = kmap_get(&last, r->key, -1, &fresh);
		if (!v) {
			rc = kvt_errf(err, errlen, -ENOMEM, "%s: out of memory", in);
			goto out;
		}
		next[k] = *v;
		*v = (int64_t)k + 1;
	}
	rc = kvt_afile_open(&af, out, 0644, err, errlen);
	if (rc)
		goto out;
	if (!(fo = kvt_afile_stdio(&af))) {
		rc = kvt_errf(err, errlen, -errno, "%s: %s", out, strerror(errno));
		kvt_afile_abort(&af);
		goto out;
	}
	setvbuf(fo, NULL, _IOFBF, WBUF_BYTES);
	k = 0;
	for (size_t i = 0; i < t.nrec; i++) {
		const struct kvt_trace_rec *r = &t.rec[i];
		uint8_t q[OG_SIZE];
		uint32_t clock, size;

		if (r->event != KVT_EV_ACCESS)
			continue;
		if (t.hdr.source == KVT_SRC_ORACLE) {
			clock = r->time > UINT32_MAX ? UINT32_MAX : (uint32_t)r->time;
			size = r->bytes;
		} else {
			uint64_t s = r->time / 1000000000ull;
			clock = s > UINT32_MAX ? UINT32_MAX : (uint32_t)s;
			size = r->bytes ? r->bytes : t.hdr.page_bytes ? t.hdr.page_bytes : 1;
		}
		memcpy(q, &clock, 4);
		memcpy(q + 4, &r->key, 8);
		memcpy(q + 12, &size, 4);
		memcpy(q + 16, &next[k], 8);
		k++;
		if (fwrite(q, 1, OG_SIZE, fo) != OG_SIZE) {
			rc = kvt_errf(err, errlen, -EIO, "%s: %s", out, strerror(errno));
			break;
		}
	}
	if (rc)
		kvt_afile_abort(&af);
	else
		rc = kvt_afile_commit(&af, err, errlen);
out:
	kmap_free(&last);
	free(next);
	kvt_trace_close(&t);
	return rc;
}

/* --- Mooncake JSONL ------------------------------------------------------
 * A scanner for one JSON object per line: only what the importer needs is
 * interpreted; every other value is checked for well-formedness and
 * skipped. */

struct js {
	const char *p, *e;	/* the line (no newline) */
	const char *line0;
	const char *why;	/* what went wrong */
	const char *at;		/* where */
};

#define JS_DEPTH 64

static int js_err(struct js *j, const char *why)
{
	if (!j->why) {
		j->why = why;
		j->at = j->p;
	}
	return -1;
}

static void js_ws(struct js *j)
{
	while (j->p < j->e && (*j->p == ' ' || *j->p == '\t' || *j->p == '\r' || *j->p == '\n'))
		j->p++;
}

static int js_lit(struct js *j, char c)
{
	js_ws(j);
	if (j->p < j->e && *j->p == c) {
		j->p++;
		return 0;
	}
	return -1;
}

/* A string; its raw bytes (escapes not decoded) in [*s, *s + *n). */
static int js_string(struct js *j, const char **s, size_t *n)
{
	js_ws(j);
	if (j->p >= j->e || *j->p != '"')
		return js_err(j, "expected a string");
	const char *b = ++j->p;
	while (j->p < j->e && *j->p != '"') {
		unsigned char c = (unsigned char)*j->p;
		if (c < 0x20)
			return js_err(j, "control character in a string");
		if (c == '\\') {
			j->p++;
			if (j->p >= j->e)
				break;
			if (*j->p == 'u') {
				for (int i = 1; i <= 4; i++)
					if (j->p + i >= j->e || !strchr("0123456789abcdefABCDEF", j->p[i]) ||
					    !j->p[i])
						return js_err(j, "bad \\u escape");
				j->p += 4;
			} else if (!strchr("\"\\/bfnrt", *j->p) || !*j->p) {
				return js_err(j, "bad escape");
			}
		}
		j->p++;
	}
	if (j->p >= j->e)
		return js_err(j, "unterminated string");
	*s = b;
	*n = (size_t)(j->p - b);
	j->p++;
	return 0;
}

/* A number. *isint when it is a non-negative integer that fits u64 (in
 * *u); *d holds its value in any case. */
static int js_number(struct js *j, double *d, uint64_t *u, int *isint)
{
	const char *b;
	char buf[64];
	int frac = 0, ovf = 0;

	js_ws(j);
	b = j->p;
	*u = 0;
	if (j->p < j->e && *j->p == '-')
		j->p++;
	if (j->p >= j->e || *j->p < '0' || *j->p > '9')
		return js_err(j, "expected a number");
	if (*j->p == '0' && j->p + 1 < j->e && j->p[1] >= '0' && j->p[1] <= '9')
		return js_err(j, "leading zero in a number");
	while (j->p < j->e && *j->p >= '0' && *j->p <= '9') {
		unsigned dgt = (unsigned)(*j->p - '0');
		if (*u > (UINT64_MAX - dgt) / 10)
			ovf = 1;
		else
			*u = *u * 10 + dgt;
		j->p++;
	}
	if (j->p < j->e && *j->p == '.') {
		frac = 1;
		j->p++;
		if (j->p >= j->e || *j->p < '0' || *j->p > '9')
			return js_err(j, "expected digits after '.'");
		while (j->p < j->e && *j->p >= '0' && *j->p <= '9')
			j->p++;
	}
	if (j->p < j->e && (*j->p == 'e' || *j->p == 'E')) {
		frac = 1;
		j->p++;
		if (j->p < j->e && (*j->p == '+' || *j->p == '-'))
			j->p++;
		if (j->p >= j->e || *j->p < '0' || *j->p > '9')
			return js_err(j, "expected digits in the exponent");
		while (j->p < j->e && *j->p >= '0' && *j->p <= '9')
			j->p++;
	}
	size_t n = (size_t)(j->p - b);
	if (n >= sizeof(buf)) {
		*d = *b == '-' ? -HUGE_VAL : HUGE_VAL;
	} else {
		memcpy(buf, b, n);
		buf[n] = 0;
		*d = strtod(buf, NULL);
	}
	*isint = *b != '-' && !frac && !ovf;
	return 0;
}

static int js_skip(struct js *j, int depth)
{
	const char *s;
	size_t n;
	double d;
	uint64_t u;
	int isint;

	if (depth > JS_DEPTH)
		return js_err(j, "nested too deeply");
	js_ws(j);
	if (j->p >= j->e)
		return js_err(j, "expected a value");
	switch (*j->p) {
	case '"':
		return js_string(j, &s, &n);
	case '{':
		j->p++;
		if (!js_lit(j, '}'))
			return 0;
		for (;;) {
			if (js_string(j, &s, &n) || js_lit(j, ':'))
				return js_err(j, "expected \"key\":");
			if (js_skip(j, depth + 1))
				return -1;
			if (!js_lit(j, '}'))
				return 0;
			if (js_lit(j, ','))
				return js_err(j, "expected ',' or '}'");
		}
	case '[':
		j->p++;
		if (!js_lit(j, ']'))
			return 0;
		for (;;) {
			if (js_skip(j, depth + 1))
				return -1;
			if (!js_lit(j, ']'))
				return 0;
			if (js_lit(j, ','))
				return js_err(j, "expected ',' or ']'");
		}
	case 't':
	case 'f':
	case 'n': {
		static const char *const lits[] = { "true", "false", "null" };
		for (int i = 0; i < 3; i++) {
			size_t l = strlen(lits[i]);
			if ((size_t)(j->e - j->p) >= l && !memcmp(j->p, lits[i], l)) {
				j->p += l;
				return 0;
			}
		}
		return js_err(j, "bad literal");
	}
	default:
		return js_number(j, &d, &u, &isint);
	}
}

static int key_is(const char *s, size_t n, const char *k)
{
	return strlen(k) == n && !memcmp(s, k, n);
}

/* Hash ids of one line are appended to *ids (grown as needed). */
struct mc_line {
	uint64_t ts_ns;
	uint64_t *ids;
	size_t nids, cap;
};

static int mc_parse(struct js *j, struct mc_line *l)
{
	const char *k;
	size_t kn;
	int have_ts = 0, have_ids = 0, isint;
	double d;
	uint64_t u;

	l->nids = 0;
	if (js_lit(j, '{'))
		return js_err(j, "expected '{'");
	if (!js_lit(j, '}'))
		goto done;
	for (;;) {
		if (js_string(j, &k, &kn))
			return -1;
		if (js_lit(j, ':'))
			return js_err(j, "expected ':'");
		if (key_is(k, kn, "timestamp")) {
			if (have_ts)
				return js_err(j, "\"timestamp\" given twice");
			have_ts = 1;
			js_ws(j);
			const char *at = j->p;
			if (js_number(j, &d, &u, &isint))
				return -1;
			if (d < 0 || !isfinite(d) || d * 1e6 >= 1.8e19) {
				j->p = at;
				return js_err(j, "\"timestamp\" must be a number of milliseconds >= 0");
			}
			l->ts_ns = isint && u <= UINT64_MAX / 1000000 ? u * 1000000ull
								      : (uint64_t)llround(d * 1e6);
		} else if (key_is(k, kn, "input_length") || key_is(k, kn, "output_length")) {
			js_ws(j);
			const char *at = j->p;
			if (js_number(j, &d, &u, &isint))
				return -1;
			if (!isint) {
				j->p = at;
				return js_err(j, "lengths must be integers >= 0");
			}
		} else if (key_is(k, kn, "hash_ids")) {
			if (have_ids)
				return js_err(j, "\"hash_ids\" given twice");
			have_ids = 1;
			if (js_lit(j, '['))
				return js_err(j, "\"hash_ids\" must be an array");
			if (js_lit(j, ']')) {
				for (;;) {
					const char *at;
					js_ws(j);
					at = j->p;
					if (js_number(j, &d, &u, &isint))
						return -1;
					if (!isint) {
						j->p = at;
						return js_err(j, "hash ids must be integers >= 0");
					}
					if (l->nids == l->cap) {
						size_t cap = l->cap ? l->cap * 2 : 64;
						uint64_t *v = realloc(l->ids, cap * sizeof(*v));
						if (!v)
							return js_err(j, "out of memory");
						l->ids = v;
						l->cap = cap;
					}
					l->ids[l->nids++] = u;
					if (!js_lit(j, ']'))
						break;
					if (js_lit(j, ','))
						return js_err(j, "expected ',' or ']' in \"hash_ids\"");
				}
			}
		} else if (js_skip(j, 1)) {
			return -1;
		}
		if (!js_lit(j, '}'))
			break;
		if (js_lit(j, ','))
			return js_err(j, "expected ',' or '}'");
	}
done:
	js_ws(j);
	if (j->p != j->e)
		return js_err(j, "text after the object");
	if (!have_ts)
		return js_err(j, "no \"timestamp\"");
	if (!have_ids)
		return js_err(j, "no \"hash_ids\"");
	return 0;
}

int kvt_trace_import_mooncake(const char *in, const char *out, char *err, size_t errlen)
{
	struct kvt_trace_hdr hdr = { .source = KVT_SRC_MOONCAKE, .start_ns = realtime_ns(),
				     .page_tokens = 512 };
	struct kvt_trace_writer *w;
	struct mc_line l = { 0 };
	struct kvt_input f;
	uint64_t req = 0;
	size_t lineno = 0;
	int rc;

	rc = kvt_input_open(in, &f, err, errlen);
	if (rc)
		return rc;
	in = input_name(in);
	rc = kvt_trace_create(out, &hdr, NULL, 0, &w);
	if (rc) {
		kvt_input_close(&f);
		return kvt_errf(err, errlen, rc, "%s: %s", out, strerror(-rc));
	}
	for (const char *p = (const char *)f.p, *end = p + f.n; p < end && !rc;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;
		struct js j = { .p = p, .e = le, .line0 = p };

		lineno++;
		js_ws(&j);
		if (j.p == j.e) {		/* a blank line */
			p = nl ? nl + 1 : end;
			continue;
		}
		if (memchr(p, 0, (size_t)(le - p))) {
			rc = kvt_errf(err, errlen, -EINVAL, "%s: line %zu: NUL byte", in, lineno);
			break;
		}
		if (mc_parse(&j, &l)) {
			rc = kvt_errf(err, errlen, -EINVAL, "%s: line %zu: column %zu: %s", in, lineno,
				      (size_t)(j.at - j.line0) + 1, j.why);
			break;
		}
		for (size_t i = 0; i < l.nids && !rc; i++) {
			struct kvt_trace_rec r = {
				.time = l.ts_ns, .step = req, .key = l.ids[i], .seq = (uint32_t)req,
				.layer = KVT_REF_NONE, .index = (uint32_t)i,
				.event = KVT_EV_ACCESS, .from = KVT_TRACE_NONE, .to = KVT_TRACE_NONE,
			};
			rc = kvt_trace_put(w, &r, 1);
			if (rc)
				rc = kvt_errf(err, errlen, rc, "%s: %s", out, strerror(-rc));
		}
		req++;
		p = nl ? nl + 1 : end;
	}
	free(l.ids);
	kvt_input_close(&f);
	return out_finish(w, rc, out, err, errlen);
}
