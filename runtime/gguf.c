/* SPDX-License-Identifier: MIT */
/*
 * GGUF v3 reader and writer (see runtime/gguf.h for the contract).
 *
 * The reader walks the file once with a cursor that refuses to step past
 * the end: every read goes through take(), which compares the requested
 * length with what is left (never pos + n, which could wrap). Counts that
 * size an allocation are first bounded by the bytes left divided by the
 * smallest encoding of one item, so a forged count cannot make us
 * allocate more than a small multiple of the file size. The first problem
 * ends the parse with one message; nothing is printed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pager/afile.h"
#include "runtime/gguf.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "GGUF is little-endian and this reader does not swap bytes"
#endif

#define MSG_MAX		512
#define MIN_KV_BYTES	13	/* key length + type + a 1-byte value */
#define MIN_TINFO_BYTES	32	/* name length + n_dims + 1 dim + type + offset */

typedef unsigned long long ull;

struct rd {
	const uint8_t *p;	/* (size) bytes being parsed */
	uint64_t size;
	uint64_t pos;		/* cursor, always <= size */
	const char *name;	/* file name for messages */
	char ctx[KVT_GGUF_NAME_MAX + 64];	/* "kv 3 (key)" or "tensor 2 (name)" */
	char *err;
	size_t errlen;
};

/* One line "name: ctx: msg" into err; returns -EINVAL. Keys and names
 * from the file are quoted as they are, so their control bytes (a
 * newline, an escape) are shown as '?', to keep the message one line. */
static int fail(struct rd *r, const char *fmt, ...)
{
	char msg[MSG_MAX];
	va_list ap;

	if (r->err && r->errlen) {
		va_start(ap, fmt);
		vsnprintf(msg, sizeof(msg), fmt, ap);
		va_end(ap);
		snprintf(r->err, r->errlen, "%s: %s: %s", r->name, r->ctx, msg);
		for (char *c = r->err; *c; c++)
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				*c = '?';
	}
	return -EINVAL;
}

static int take(struct rd *r, uint64_t n, const void **out, const char *what)
{
	if (n > r->size - r->pos)
		return fail(r, "%s of %llu bytes at offset %llu runs past end of file (size %llu)",
			    what, (ull)n, (ull)r->pos, (ull)r->size);
	*out = r->p + r->pos;
	r->pos += n;
	return 0;
}

static int rd_u32(struct rd *r, uint32_t *v, const char *what)
{
	const void *q = NULL;
	int ret = take(r, 4, &q, what);

	if (!ret)
		memcpy(v, q, 4);
	return ret;
}

static int rd_u64(struct rd *r, uint64_t *v, const char *what)
{
	const void *q = NULL;
	int ret = take(r, 8, &q, what);

	if (!ret)
		memcpy(v, q, 8);
	return ret;
}

static int rd_str(struct rd *r, struct kvt_gguf_str *s, uint64_t max, const char *what)
{
	char w[64];
	uint64_t off = r->pos, len;
	const void *q = NULL;
	int ret;

	snprintf(w, sizeof(w), "%s length", what);
	ret = rd_u64(r, &len, w);
	if (ret)
		return ret;
	if (len > max)
		return fail(r, "%s %llu at offset %llu is too long (max %llu)",
			    w, (ull)len, (ull)off, (ull)max);
	if (len > r->size - r->pos)
		return fail(r, "%s %llu at offset %llu runs past end of file (size %llu)",
			    w, (ull)len, (ull)off, (ull)r->size);
	ret = take(r, len, &q, what);
	if (ret)
		return ret;
	s->ptr = q;
	s->len = len;
	return 0;
}

/* Bytes of one value of a fixed-size type; 0 for STRING and ARRAY; -1 unknown. */
static int vsize(uint32_t t)
{
	static const signed char sz[] = {
		[KVT_GGUF_U8] = 1, [KVT_GGUF_I8] = 1, [KVT_GGUF_U16] = 2,
		[KVT_GGUF_I16] = 2, [KVT_GGUF_U32] = 4, [KVT_GGUF_I32] = 4,
		[KVT_GGUF_F32] = 4, [KVT_GGUF_BOOL] = 1, [KVT_GGUF_STRING] = 0,
		[KVT_GGUF_ARRAY] = 0, [KVT_GGUF_U64] = 8, [KVT_GGUF_I64] = 8,
		[KVT_GGUF_F64] = 8,
	};
	return t < sizeof(sz) ? sz[t] : -1;
}

/* Every tensor type GGUF files carry (ggml's type_traits): its name,
 * values per block and bytes per block, so that any file parses and the
 * loader can name the type of a tensor it does not compute with. */
static const struct { const char *name; uint16_t blk, size; } ggml_types[] = {
	[0] = { "f32", 1, 4 },		[1] = { "f16", 1, 2 },
	[2] = { "q4_0", 32, 18 },	[3] = { "q4_1", 32, 20 },
	[6] = { "q5_0", 32, 22 },	[7] = { "q5_1", 32, 24 },
	[8] = { "q8_0", 32, 34 },	[9] = { "q8_1", 32, 36 },
	[10] = { "q2_k", 256, 84 },	[11] = { "q3_k", 256, 110 },
	[12] = { "q4_k", 256, 144 },	[13] = { "q5_k", 256, 176 },
	[14] = { "q6_k", 256, 210 },	[15] = { "q8_k", 256, 292 },
	[16] = { "iq2_xxs", 256, 66 },	[17] = { "iq2_xs", 256, 74 },
	[18] = { "iq3_xxs", 256, 98 },	[19] = { "iq1_s", 256, 50 },
	[20] = { "iq4_nl", 32, 18 },	[21] = { "iq3_s", 256, 110 },
	[22] = { "iq2_s", 256, 82 },	[23] = { "iq4_xs", 256, 136 },
	[24] = { "i8", 1, 1 },		[25] = { "i16", 1, 2 },
	[26] = { "i32", 1, 4 },		[27] = { "i64", 1, 8 },
	[28] = { "f64", 1, 8 },		[29] = { "iq1_m", 256, 56 },
	[30] = { "bf16", 1, 2 },	[34] = { "tq1_0", 256, 54 },
	[35] = { "tq2_0", 256, 66 },	[39] = { "mxfp4", 32, 17 },
};

const char *kvt_ggml_type_name(uint32_t type)
{
	return type < sizeof(ggml_types) / sizeof(ggml_types[0]) ? ggml_types[type].name : NULL;
}

int kvt_ggml_nbytes(uint32_t type, uint32_t n_dims, const uint64_t *ne, uint64_t *bytes)
{
	uint64_t b;
	uint32_t i;

	if (n_dims < 1 || n_dims > KVT_GGUF_MAX_DIMS || !kvt_ggml_type_name(type))
		return -EINVAL;
	if (ne[0] % ggml_types[type].blk ||
	    __builtin_mul_overflow(ne[0] / ggml_types[type].blk, ggml_types[type].size, &b))
		return -EINVAL;
	for (i = 1; i < n_dims; i++)
		if (__builtin_mul_overflow(b, ne[i], &b))
			return -EINVAL;
	*bytes = b;
	return 0;
}

static int parse_kv(struct rd *r, struct kvt_gguf_kv *kv, uint64_t i)
{
	uint64_t j, n = 1, off;
	uint32_t t;
	int ret, es;

	kv->off = r->pos;
	snprintf(r->ctx, sizeof(r->ctx), "kv %llu", (ull)i);
	ret = rd_str(r, &kv->key, KVT_GGUF_NAME_MAX, "key");
	if (ret)
		return ret;
	snprintf(r->ctx, sizeof(r->ctx), "kv %llu (%.*s)", (ull)i, (int)kv->key.len, kv->key.ptr);
	off = r->pos;
	ret = rd_u32(r, &kv->type, "value type");
	if (ret)
		return ret;
	if (vsize(kv->type) < 0)
		return fail(r, "unknown value type %u at offset %llu", kv->type, (ull)off);
	t = kv->type;
	if (t == KVT_GGUF_ARRAY) {
		off = r->pos;
		ret = rd_u32(r, &kv->arr_type, "array element type");
		if (ret)
			return ret;
		t = kv->arr_type;
		if (t == KVT_GGUF_ARRAY)
			return fail(r, "nested array at offset %llu is not supported", (ull)off);
		if (vsize(t) < 0)
			return fail(r, "unknown array element type %u at offset %llu", t, (ull)off);
		off = r->pos;
		ret = rd_u64(r, &n, "array length");
		if (ret)
			return ret;
		es = t == KVT_GGUF_STRING ? 8 : vsize(t);
		if (n > (r->size - r->pos) / (uint64_t)es)
			return fail(r, "array length %llu at offset %llu runs past end of file (size %llu)",
				    (ull)n, (ull)off, (ull)r->size);
	}
	kv->n = n;
	if (t == KVT_GGUF_STRING) {
		char w[40];

		kv->strs = calloc(n ? n : 1, sizeof(*kv->strs));
		if (!kv->strs)
			return -ENOMEM;
		for (j = 0; j < n; j++) {
			if (kv->type == KVT_GGUF_ARRAY)
				snprintf(w, sizeof(w), "string %llu", (ull)j);
			else
				snprintf(w, sizeof(w), "string");
			ret = rd_str(r, &kv->strs[j], UINT64_MAX, w);
			if (ret)
				return ret;
		}
		return 0;
	}
	return take(r, n * (uint64_t)vsize(t), &kv->data, "value");
}

static int parse_tinfo(struct rd *r, struct kvt_gguf_tensor *ti, uint64_t i)
{
	uint64_t off;
	uint32_t d;
	int ret;

	ti->info_off = r->pos;
	snprintf(r->ctx, sizeof(r->ctx), "tensor %llu", (ull)i);
	ret = rd_str(r, &ti->name, KVT_GGUF_NAME_MAX, "name");
	if (ret)
		return ret;
	snprintf(r->ctx, sizeof(r->ctx), "tensor %llu (%.*s)", (ull)i,
		 (int)ti->name.len, ti->name.ptr);
	off = r->pos;
	ret = rd_u32(r, &ti->n_dims, "n_dims");
	if (ret)
		return ret;
	if (ti->n_dims < 1 || ti->n_dims > KVT_GGUF_MAX_DIMS)
		return fail(r, "n_dims %u at offset %llu is out of range 1..%d",
			    ti->n_dims, (ull)off, KVT_GGUF_MAX_DIMS);
	for (d = 0; d < KVT_GGUF_MAX_DIMS; d++)
		ti->ne[d] = 1;
	for (d = 0; d < ti->n_dims; d++) {
		off = r->pos;
		ret = rd_u64(r, &ti->ne[d], "dim");
		if (ret)
			return ret;
		if (ti->ne[d] > (uint64_t)INT64_MAX)
			return fail(r, "ne[%u] %llu at offset %llu is out of range",
				    d, (ull)ti->ne[d], (ull)off);
	}
	off = r->pos;
	ret = rd_u32(r, &ti->type, "type");
	if (ret)
		return ret;
	if (!kvt_ggml_type_name(ti->type))
		return fail(r, "unknown tensor type %u at offset %llu (not a ggml type)",
			    ti->type, (ull)off);
	if (kvt_ggml_nbytes(ti->type, ti->n_dims, ti->ne, &ti->nbytes))
		return fail(r, "dims [%llu, %llu, %llu, %llu] at offset %llu: bad for %s or size overflows",
			    (ull)ti->ne[0], (ull)ti->ne[1], (ull)ti->ne[2], (ull)ti->ne[3],
			    (ull)(ti->info_off + 8 + ti->name.len + 4), kvt_ggml_type_name(ti->type));
	return rd_u64(r, &ti->offset, "data offset");
}

static int cmp_name(const void *a, const void *b)
{
	const struct kvt_gguf_str *x = *(const struct kvt_gguf_str *const *)a;
	const struct kvt_gguf_str *y = *(const struct kvt_gguf_str *const *)b;
	int c = memcmp(x->ptr, y->ptr, x->len < y->len ? x->len : y->len);

	return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* Refuse two keys (or two tensors) with the same name: sort, compare neighbours. */
static int check_dups(struct rd *r, const struct kvt_gguf_str **v, uint64_t n, const char *what)
{
	uint64_t i;

	if (n < 2)
		return 0;
	qsort(v, n, sizeof(*v), cmp_name);
	for (i = 1; i < n; i++)
		if (!cmp_name(&v[i - 1], &v[i])) {
			snprintf(r->ctx, sizeof(r->ctx), "%s %.*s", what, (int)v[i]->len, v[i]->ptr);
			return fail(r, "appears twice");
		}
	return 0;
}

/* After an item fails: say that its count could never fit, the likely cause. */
static void add_note(struct rd *r, const char *what, uint64_t off, uint64_t n)
{
	size_t len;

	if (!r->err || !r->errlen)
		return;
	len = strlen(r->err);
	snprintf(r->err + len, r->errlen - len, " (%s %llu at offset %llu cannot fit in a file of %llu bytes)",
		 what, (ull)n, (ull)off, (ull)r->size);
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static int parse(struct kvt_gguf *g, struct rd *r)
{
	const struct kvt_gguf_str **names = NULL;
	const struct kvt_gguf_kv *akv;
	const uint8_t *magic = NULL;
	uint64_t i, n_kv, n_t, cap, start, end;
	int ret;

	snprintf(r->ctx, sizeof(r->ctx), "header");
	ret = take(r, 4, (const void **)&magic, "magic");
	if (ret)
		goto out;
	if (memcmp(magic, "GGUF", 4)) {
		ret = fail(r, "bad magic %02x %02x %02x %02x at offset 0 (expected \"GGUF\")",
			   magic[0], magic[1], magic[2], magic[3]);
		goto out;
	}
	ret = rd_u32(r, &g->version, "version");
	if (ret)
		goto out;
	if (g->version != KVT_GGUF_VERSION) {
		ret = fail(r, "unsupported version %u at offset 4 (only %d is read)",
			   g->version, KVT_GGUF_VERSION);
		goto out;
	}
	ret = rd_u64(r, &n_t, "tensor count");
	if (!ret)
		ret = rd_u64(r, &n_kv, "kv count");
	if (ret)
		goto out;
	/* Each item takes at least MIN bytes, so item cap - 1 is the last that
	 * can be reached before the end; g->n_* count allocated entries until
	 * the parse succeeds (kvt_gguf_close frees that many). */
	ret = -ENOMEM;
	cap = min_u64(n_kv, (r->size - r->pos) / MIN_KV_BYTES + 1);
	g->kv = calloc(cap ? cap : 1, sizeof(*g->kv));
	names = calloc(cap ? cap : 1, sizeof(*names));
	if (!g->kv || !names)
		goto out;
	g->n_kv = cap;
	for (i = 0; i < n_kv; i++) {
		if (i >= cap) {
			ret = fail(r, "kv %llu at offset %llu runs past end of file (size %llu)",
				   (ull)i, (ull)r->pos, (ull)r->size);
			goto out;
		}
		ret = parse_kv(r, &g->kv[i], i);
		if (ret) {
			if (n_kv > r->size / MIN_KV_BYTES)
				add_note(r, "kv count", 16, n_kv);
			goto out;
		}
		names[i] = &g->kv[i].key;
	}
	ret = check_dups(r, names, n_kv, "key");
	if (ret)
		goto out;

	g->alignment = KVT_GGUF_ALIGN;
	akv = kvt_gguf_find_kv(g, "general.alignment");
	if (akv) {
		uint32_t a = 0;

		if (akv->type == KVT_GGUF_U32)
			memcpy(&a, akv->data, 4);
		if (!a || (a & (a - 1))) {
			snprintf(r->ctx, sizeof(r->ctx), "kv general.alignment");
			ret = fail(r, "at offset %llu must be a u32 power of two", (ull)akv->off);
			goto out;
		}
		g->alignment = a;
	}

	ret = -ENOMEM;
	cap = min_u64(n_t, (r->size - r->pos) / MIN_TINFO_BYTES + 1);
	g->tensors = calloc(cap ? cap : 1, sizeof(*g->tensors));
	free(names);
	names = calloc(cap ? cap : 1, sizeof(*names));
	if (!g->tensors || !names)
		goto out;
	g->n_tensors = cap;
	for (i = 0; i < n_t; i++) {
		if (i >= cap) {
			snprintf(r->ctx, sizeof(r->ctx), "tensor %llu", (ull)i);
			ret = fail(r, "info at offset %llu runs past end of file (size %llu)",
				   (ull)r->pos, (ull)r->size);
			goto out;
		}
		ret = parse_tinfo(r, &g->tensors[i], i);
		if (ret) {
			if (n_t > r->size / MIN_TINFO_BYTES)
				add_note(r, "tensor count", 8, n_t);
			goto out;
		}
		names[i] = &g->tensors[i].name;
	}
	ret = check_dups(r, names, g->n_tensors, "tensor");
	if (ret)
		goto out;

	/* The data section starts at the next multiple of the alignment. */
	g->data_off = r->pos;
	if (r->pos % g->alignment)
		g->data_off = r->pos + (g->alignment - r->pos % g->alignment);
	if (g->n_tensors && g->data_off > r->size) {
		snprintf(r->ctx, sizeof(r->ctx), "data section");
		ret = fail(r, "start at offset %llu (tensor infos end at %llu, aligned to %u) is past end of file (size %llu)",
			   (ull)g->data_off, (ull)r->pos, g->alignment, (ull)r->size);
		goto out;
	}
	for (i = 0; i < g->n_tensors; i++) {
		struct kvt_gguf_tensor *ti = &g->tensors[i];

		snprintf(r->ctx, sizeof(r->ctx), "tensor %llu (%.*s)", (ull)i,
			 (int)ti->name.len, ti->name.ptr);
		if (ti->offset % g->alignment) {
			ret = fail(r, "data offset %llu (at offset %llu) is not a multiple of alignment %u",
				   (ull)ti->offset, (ull)(ti->info_off + 8 + ti->name.len + 4 +
							  8ull * ti->n_dims + 4), g->alignment);
			goto out;
		}
		/* data_off <= size here, so data_off + offset cannot wrap when offset <= size. */
		if (ti->offset > r->size - g->data_off ||
		    ti->nbytes > r->size - g->data_off - ti->offset) {
			if (ti->nbytes > UINT64_MAX - g->data_off ||
			    ti->offset > UINT64_MAX - g->data_off - ti->nbytes) {
				ret = fail(r, "data offset %llu + %llu bytes past end of file (size %llu)",
					   (ull)ti->offset, (ull)ti->nbytes, (ull)r->size);
				goto out;
			}
			start = g->data_off + ti->offset;
			end = start + ti->nbytes;
			ret = fail(r, "data [%llu, %llu) past end of file (size %llu)",
				   (ull)start, (ull)end, (ull)r->size);
			goto out;
		}
		ti->data = r->p + g->data_off + ti->offset;
	}
	ret = 0;
out:
	free(names);
	return ret;
}

static int open_common(struct kvt_gguf *g, const char *name, char *err, size_t errlen)
{
	struct rd r = {
		.p = g->base, .size = g->size, .name = name, .err = err, .errlen = errlen,
	};
	int ret = parse(g, &r);

	if (ret == -ENOMEM && err && errlen)
		snprintf(err, errlen, "%s: out of memory", name);
	return ret;
}

int kvt_gguf_open_mem(const void *buf, size_t size, const char *name,
		      struct kvt_gguf **out, char *err, size_t errlen)
{
	struct kvt_gguf *g;
	int ret;

	*out = NULL;
	if (err && errlen)
		err[0] = '\0';
	g = calloc(1, sizeof(*g));
	if (!g) {
		ret = -ENOMEM;
		if (err && errlen)
			snprintf(err, errlen, "%s: out of memory", name);
		goto out;
	}
	g->base = buf;
	g->size = size;
	ret = open_common(g, name, err, errlen);
out:
	if (ret) {
		kvt_gguf_close(g);
		return ret;
	}
	*out = g;
	return 0;
}

/*
 * The file's bytes in anonymous memory of small pages, read-only once
 * read: 0 or -errno. Decode reads every weight every step, and mapped
 * from the page cache (ext4's large folios) or in transparent huge pages
 * it measured, on the virtual machines this project runs on, a step or
 * two in every dozen or so taking 2 to 5 times as long as the rest (the
 * median unchanged, the mean a fifth longer); read into small pages, not
 * (docs/benchmarks.md, "Weights read, not mapped"). KVT_MODEL_MMAP=1 maps
 * the file instead: a faster start, and the page cache shared between
 * processes.
 */
static int read_anon(int fd, uint64_t size, void **out)
{
	void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t off = 0;
	int ret = 0;

	if (m == MAP_FAILED)
		return -errno;
	madvise(m, size, MADV_NOHUGEPAGE);	/* advice: a kernel without THP refuses it */
	while (off < size) {
		size_t want = size - off < (1u << 26) ? (size_t)(size - off) : 1u << 26;
		ssize_t n = pread(fd, (char *)m + off, want, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			ret = n < 0 ? -errno : -EIO;	/* EIO: the file shrank under us */
			break;
		}
		off += (uint64_t)n;
	}
	if (!ret && mprotect(m, size, PROT_READ))
		ret = -errno;
	if (ret) {
		munmap(m, size);
		return ret;
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);	/* the copy is what is read now */
	*out = m;
	return 0;
}

int kvt_gguf_open(const char *path, struct kvt_gguf **out, char *err, size_t errlen)
{
	struct kvt_gguf *g = NULL;
	struct stat st;
	int fd = -1, ret;
	void *m;

	*out = NULL;
	if (err && errlen)
		err[0] = '\0';
	g = calloc(1, sizeof(*g));
	if (!g) {
		ret = -ENOMEM;
		if (err && errlen)
			snprintf(err, errlen, "%s: out of memory", path);
		goto out;
	}
	/* O_NONBLOCK: a FIFO (or a device) opens at once and is refused
	 * below, where a plain open would wait for a writer forever; on a
	 * regular file the flag changes nothing. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0 || fstat(fd, &st)) {
		ret = -errno;
		if (err && errlen)
			snprintf(err, errlen, "%s: cannot open: %s", path, strerror(-ret));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		ret = -EINVAL;
		if (err && errlen)
			snprintf(err, errlen, "%s: not a regular file", path);
		goto out;
	}
	g->size = (uint64_t)st.st_size;
	if (g->size) {
		const char *env = getenv("KVT_MODEL_MMAP");
		int map = env && !strcmp(env, "1");

		if (map) {
			m = mmap(NULL, g->size, PROT_READ, MAP_PRIVATE, fd, 0);
			ret = m == MAP_FAILED ? -errno : 0;
		} else {
			ret = read_anon(fd, g->size, &m);
		}
		if (ret) {
			if (err && errlen)
				snprintf(err, errlen, "%s: %s %llu bytes: %s", path,
					 map ? "mmap of" : "reading",
					 (ull)g->size, strerror(-ret));
			goto out;
		}
		g->map = g->base = m;
	}
	ret = open_common(g, path, err, errlen);
out:
	if (fd >= 0)
		close(fd);
	if (ret) {
		kvt_gguf_close(g);
		return ret;
	}
	*out = g;
	return 0;
}

void kvt_gguf_close(struct kvt_gguf *g)
{
	uint64_t i;

	if (!g)
		return;
	if (g->kv)
		for (i = 0; i < g->n_kv; i++)
			free(g->kv[i].strs);
	free(g->kv);
	free(g->tensors);
	if (g->map)
		munmap((void *)g->map, g->size);
	free(g);
}

static int str_is(const struct kvt_gguf_str *s, const char *c)
{
	size_t n = strlen(c);

	return s->len == n && !memcmp(s->ptr, c, n);
}

const struct kvt_gguf_kv *kvt_gguf_find_kv(const struct kvt_gguf *g, const char *key)
{
	uint64_t i;

	for (i = 0; i < g->n_kv; i++)
		if (str_is(&g->kv[i].key, key))
			return &g->kv[i];
	return NULL;
}

const struct kvt_gguf_tensor *kvt_gguf_find_tensor(const struct kvt_gguf *g, const char *name)
{
	uint64_t i;

	for (i = 0; i < g->n_tensors; i++)
		if (str_is(&g->tensors[i].name, name))
			return &g->tensors[i];
	return NULL;
}

/* The kv for key if it has type t (and element type at for arrays). */
static int lookup(const struct kvt_gguf *g, const char *key, uint32_t t, uint32_t at,
		  const struct kvt_gguf_kv **kv)
{
	const struct kvt_gguf_kv *k = kvt_gguf_find_kv(g, key);

	if (!k)
		return -ENOENT;
	if (k->type != t || (t == KVT_GGUF_ARRAY && k->arr_type != at))
		return -EINVAL;
	*kv = k;
	return 0;
}

static int get_scalar(const struct kvt_gguf *g, const char *key, uint32_t t, void *v, size_t n)
{
	const struct kvt_gguf_kv *k;
	int ret = lookup(g, key, t, 0, &k);

	if (!ret)
		memcpy(v, k->data, n);
	return ret;
}

int kvt_gguf_get_u32(const struct kvt_gguf *g, const char *key, uint32_t *v)
{
	return get_scalar(g, key, KVT_GGUF_U32, v, sizeof(*v));
}

int kvt_gguf_get_i32(const struct kvt_gguf *g, const char *key, int32_t *v)
{
	return get_scalar(g, key, KVT_GGUF_I32, v, sizeof(*v));
}

int kvt_gguf_get_f32(const struct kvt_gguf *g, const char *key, float *v)
{
	return get_scalar(g, key, KVT_GGUF_F32, v, sizeof(*v));
}

int kvt_gguf_get_u64(const struct kvt_gguf *g, const char *key, uint64_t *v)
{
	return get_scalar(g, key, KVT_GGUF_U64, v, sizeof(*v));
}

int kvt_gguf_get_str(const struct kvt_gguf *g, const char *key, struct kvt_gguf_str *v)
{
	const struct kvt_gguf_kv *k;
	int ret = lookup(g, key, KVT_GGUF_STRING, 0, &k);

	if (!ret)
		*v = k->strs[0];
	return ret;
}

int kvt_gguf_get_str_arr(const struct kvt_gguf *g, const char *key,
			 const struct kvt_gguf_str **strs, uint64_t *n)
{
	const struct kvt_gguf_kv *k;
	int ret = lookup(g, key, KVT_GGUF_ARRAY, KVT_GGUF_STRING, &k);

	if (!ret) {
		*strs = k->strs;
		*n = k->n;
	}
	return ret;
}

static int get_arr(const struct kvt_gguf *g, const char *key, uint32_t at,
		   void *dst, uint64_t cap, uint64_t *n)
{
	const struct kvt_gguf_kv *k;
	int ret = lookup(g, key, KVT_GGUF_ARRAY, at, &k);

	if (ret)
		return ret;
	*n = k->n;
	if (cap && k->n)
		memcpy(dst, k->data, (k->n < cap ? k->n : cap) * (uint64_t)vsize(at));
	return 0;
}

int kvt_gguf_get_i32_arr(const struct kvt_gguf *g, const char *key,
			 int32_t *dst, uint64_t cap, uint64_t *n)
{
	return get_arr(g, key, KVT_GGUF_I32, dst, cap, n);
}

int kvt_gguf_get_f32_arr(const struct kvt_gguf *g, const char *key,
			 float *dst, uint64_t cap, uint64_t *n)
{
	return get_arr(g, key, KVT_GGUF_F32, dst, cap, n);
}

/* ---- writer ---- */

struct wtensor {
	char *name;			/* owned copy */
	uint32_t n_dims;
	uint32_t type;
	uint64_t ne[KVT_GGUF_MAX_DIMS];
	const void *data;		/* (nbytes) borrowed from the caller */
	uint64_t nbytes;
};

struct kvt_gguf_writer {
	uint8_t *kv;			/* (kv_len) serialized kv pairs, capacity kv_cap */
	size_t kv_len, kv_cap;
	uint64_t n_kv;
	struct wtensor *t;		/* (n_t) tensors, capacity t_cap */
	uint64_t n_t, t_cap;
	int err;			/* first error, sticky */
};

int kvt_gguf_writer_new(struct kvt_gguf_writer **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

void kvt_gguf_writer_free(struct kvt_gguf_writer *w)
{
	uint64_t i;

	if (!w)
		return;
	for (i = 0; i < w->n_t; i++)
		free(w->t[i].name);
	free(w->t);
	free(w->kv);
	free(w);
}

static int wfail(struct kvt_gguf_writer *w, int err)
{
	if (!w->err)
		w->err = err;
	return err;
}

static int put(struct kvt_gguf_writer *w, const void *p, size_t n)
{
	if (w->err)
		return w->err;
	if (n > w->kv_cap - w->kv_len) {
		size_t cap = w->kv_cap ? w->kv_cap : 4096;
		uint8_t *q;

		while (n > cap - w->kv_len) {
			if (cap > SIZE_MAX / 2)
				return wfail(w, -ENOMEM);
			cap *= 2;
		}
		q = realloc(w->kv, cap);
		if (!q)
			return wfail(w, -ENOMEM);
		w->kv = q;
		w->kv_cap = cap;
	}
	if (n)
		memcpy(w->kv + w->kv_len, p, n);
	w->kv_len += n;
	return 0;
}

static int put_u32(struct kvt_gguf_writer *w, uint32_t v) { return put(w, &v, 4); }
static int put_u64(struct kvt_gguf_writer *w, uint64_t v) { return put(w, &v, 8); }

static int put_str(struct kvt_gguf_writer *w, const char *s)
{
	size_t n = strlen(s);
	int ret = put_u64(w, n);

	return ret ? ret : put(w, s, n);
}

/* Key and type; the caller appends the value. */
static int put_head(struct kvt_gguf_writer *w, const char *key, uint32_t type)
{
	int ret;

	if (w->err)
		return w->err;
	if (!key || strlen(key) > KVT_GGUF_NAME_MAX)
		return wfail(w, -EINVAL);
	ret = put_str(w, key);
	if (!ret)
		ret = put_u32(w, type);
	if (!ret)
		w->n_kv++;
	return ret;
}

static int add_scalar(struct kvt_gguf_writer *w, const char *key, uint32_t t, const void *v, size_t n)
{
	int ret = put_head(w, key, t);

	return ret ? ret : put(w, v, n);
}

int kvt_gguf_add_u32(struct kvt_gguf_writer *w, const char *key, uint32_t v)
{
	return add_scalar(w, key, KVT_GGUF_U32, &v, sizeof(v));
}

int kvt_gguf_add_i32(struct kvt_gguf_writer *w, const char *key, int32_t v)
{
	return add_scalar(w, key, KVT_GGUF_I32, &v, sizeof(v));
}

int kvt_gguf_add_u64(struct kvt_gguf_writer *w, const char *key, uint64_t v)
{
	return add_scalar(w, key, KVT_GGUF_U64, &v, sizeof(v));
}

int kvt_gguf_add_f32(struct kvt_gguf_writer *w, const char *key, float v)
{
	return add_scalar(w, key, KVT_GGUF_F32, &v, sizeof(v));
}

int kvt_gguf_add_str(struct kvt_gguf_writer *w, const char *key, const char *v)
{
	int ret = put_head(w, key, KVT_GGUF_STRING);

	return ret ? ret : put_str(w, v);
}

static int add_arr(struct kvt_gguf_writer *w, const char *key, uint32_t at, const void *v, uint64_t n)
{
	int ret = put_head(w, key, KVT_GGUF_ARRAY);

	if (!ret)
		ret = put_u32(w, at);
	if (!ret)
		ret = put_u64(w, n);
	if (!ret && n > SIZE_MAX / 4)
		ret = wfail(w, -EINVAL);
	return ret ? ret : put(w, v, n * 4);
}

int kvt_gguf_add_i32_arr(struct kvt_gguf_writer *w, const char *key, const int32_t *v, uint64_t n)
{
	return add_arr(w, key, KVT_GGUF_I32, v, n);
}

int kvt_gguf_add_f32_arr(struct kvt_gguf_writer *w, const char *key, const float *v, uint64_t n)
{
	return add_arr(w, key, KVT_GGUF_F32, v, n);
}

int kvt_gguf_add_str_arr(struct kvt_gguf_writer *w, const char *key, const char *const *v, uint64_t n)
{
	uint64_t i;
	int ret = put_head(w, key, KVT_GGUF_ARRAY);

	if (!ret)
		ret = put_u32(w, KVT_GGUF_STRING);
	if (!ret)
		ret = put_u64(w, n);
	for (i = 0; !ret && i < n; i++)
		ret = put_str(w, v[i]);
	return ret;
}

int kvt_gguf_add_tensor(struct kvt_gguf_writer *w, const char *name, uint32_t n_dims,
			const uint64_t *ne, uint32_t type, const void *data)
{
	struct wtensor *t;
	uint32_t d;

	if (w->err)
		return w->err;
	if (!name || strlen(name) > KVT_GGUF_NAME_MAX || n_dims < 1 ||
	    n_dims > KVT_GGUF_MAX_DIMS)
		return wfail(w, -EINVAL);
	if (w->n_t == w->t_cap) {
		uint64_t cap = w->t_cap ? w->t_cap * 2 : 16;

		t = realloc(w->t, cap * sizeof(*t));
		if (!t)
			return wfail(w, -ENOMEM);
		w->t = t;
		w->t_cap = cap;
	}
	t = &w->t[w->n_t];
	memset(t, 0, sizeof(*t));
	for (d = 0; d < KVT_GGUF_MAX_DIMS; d++)
		t->ne[d] = d < n_dims ? ne[d] : 1;
	t->n_dims = n_dims;
	t->type = type;
	t->data = data;
	if (kvt_ggml_nbytes(type, n_dims, t->ne, &t->nbytes))
		return wfail(w, -EINVAL);
	t->name = strdup(name);
	if (!t->name)
		return wfail(w, -ENOMEM);
	w->n_t++;
	return 0;
}

static uint64_t align_up(uint64_t x)
{
	return (x + KVT_GGUF_ALIGN - 1) / KVT_GGUF_ALIGN * KVT_GGUF_ALIGN;
}

static int wr(FILE *f, const void *p, size_t n)
{
	return n && fwrite(p, 1, n, f) != n ? -EIO : 0;
}

static int wr_pad(FILE *f, uint64_t *pos)
{
	static const uint8_t zero[KVT_GGUF_ALIGN];
	uint64_t n = align_up(*pos) - *pos;

	*pos += n;
	return wr(f, zero, n);
}

int kvt_gguf_writer_write(struct kvt_gguf_writer *w, const char *path, char *err, size_t errlen)
{
	const uint32_t ver = KVT_GGUF_VERSION;
	uint64_t i, off = 0, pos, n;
	struct kvt_afile af;
	FILE *f = NULL;
	int ret = w->err;

	if (ret) {
		if (err && errlen)
			snprintf(err, errlen, "%s: an earlier add failed: %s", path, strerror(-ret));
		return ret;
	}
	/* Written whole through a temporary, never through a link (afile.h). */
	if ((ret = kvt_afile_open(&af, path, 0644, err, errlen)))
		return ret;
	if (!(f = kvt_afile_stdio(&af))) {
		ret = -errno;
		kvt_afile_abort(&af);
		if (err && errlen)
			snprintf(err, errlen, "%s: cannot create: %s", path, strerror(-ret));
		return ret;
	}
	ret = wr(f, "GGUF", 4);
	ret = ret ? ret : wr(f, &ver, 4);
	ret = ret ? ret : wr(f, &w->n_t, 8);
	ret = ret ? ret : wr(f, &w->n_kv, 8);
	ret = ret ? ret : wr(f, w->kv, w->kv_len);
	pos = 24 + w->kv_len;
	for (i = 0; !ret && i < w->n_t; i++) {
		const struct wtensor *t = &w->t[i];

		n = strlen(t->name);
		ret = wr(f, &n, 8);
		ret = ret ? ret : wr(f, t->name, n);
		ret = ret ? ret : wr(f, &t->n_dims, 4);
		ret = ret ? ret : wr(f, t->ne, 8ull * t->n_dims);
		ret = ret ? ret : wr(f, &t->type, 4);
		ret = ret ? ret : wr(f, &off, 8);
		pos += 8 + n + 4 + 8ull * t->n_dims + 4 + 8;
		off = align_up(off + t->nbytes);
	}
	for (i = 0; !ret && i < w->n_t; i++) {
		ret = wr_pad(f, &pos);
		ret = ret ? ret : wr(f, w->t[i].data, w->t[i].nbytes);
		pos += w->t[i].nbytes;
	}
	if (!ret)
		ret = wr_pad(f, &pos);
	if (ret) {
		kvt_afile_abort(&af);
		if (err && errlen)
			snprintf(err, errlen, "%s: write: %s", path, strerror(-ret));
		return ret;
	}
	return kvt_afile_commit(&af, err, errlen);
}
