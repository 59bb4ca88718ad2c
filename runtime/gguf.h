/* SPDX-License-Identifier: MIT */
/*
 * GGUF v3: a checked reader over a read-only mapping, and a small writer.
 *
 * Reader contract: kvt_gguf_open returns 0 or -errno and never prints or
 * exits. Every count, length, size and offset in the file is checked
 * against the file size before it is used, so a truncated or corrupt file
 * is -EINVAL with one line in err ("PATH: WHAT: WHY at offset N"), never a
 * crash or an over-read. Every ggml tensor type parses (its block size is
 * known); a type number ggml does not have is refused at open. The file
 * is little-endian; so must the host be.
 *
 * Everything a struct kvt_gguf hands out (strings, array elements, tensor
 * data) points into the mapping and lives until kvt_gguf_close. Strings
 * are NOT NUL-terminated: use ptr and len. Array elements and scalar
 * values sit at arbitrary byte offsets: read them with the getters (which
 * copy), never by casting data to float * or int32_t *. Tensor data is
 * aligned to general.alignment (32 by default) and may be cast.
 */
#ifndef KVT_RUNTIME_GGUF_H
#define KVT_RUNTIME_GGUF_H

#include <stddef.h>
#include <stdint.h>

/* Metadata value types (gguf_type). */
enum kvt_gguf_vtype {
	KVT_GGUF_U8 = 0, KVT_GGUF_I8 = 1, KVT_GGUF_U16 = 2, KVT_GGUF_I16 = 3,
	KVT_GGUF_U32 = 4, KVT_GGUF_I32 = 5, KVT_GGUF_F32 = 6, KVT_GGUF_BOOL = 7,
	KVT_GGUF_STRING = 8, KVT_GGUF_ARRAY = 9, KVT_GGUF_U64 = 10,
	KVT_GGUF_I64 = 11, KVT_GGUF_F64 = 12,
};

/* Tensor types (ggml_type values) that the runtime names; the weight
 * types it computes with are the kernels' (kernels/compute.h). */
enum kvt_ggml_type {
	KVT_GGML_F32 = 0,
	KVT_GGML_F16 = 1,
	KVT_GGML_Q4_0 = 2, KVT_GGML_Q4_1 = 3, KVT_GGML_Q5_0 = 6, KVT_GGML_Q5_1 = 7,
	KVT_GGML_Q8_0 = 8,	/* blocks of 32: f16 scale + 32 int8 = 34 bytes */
	KVT_GGML_Q2_K = 10, KVT_GGML_Q3_K = 11, KVT_GGML_Q4_K = 12, KVT_GGML_Q5_K = 13,
	KVT_GGML_Q6_K = 14,
	KVT_GGML_BF16 = 30,
};

#define KVT_GGUF_VERSION	3
#define KVT_GGUF_ALIGN		32	/* default general.alignment */
#define KVT_GGUF_MAX_DIMS	4
#define KVT_GGUF_NAME_MAX	1024	/* longest key or tensor name accepted */

/* A string in the mapping: len bytes at ptr, no terminating NUL. */
struct kvt_gguf_str {
	const char *ptr;
	uint64_t len;
};

struct kvt_gguf_kv {
	struct kvt_gguf_str key;
	uint32_t type;			/* enum kvt_gguf_vtype */
	uint32_t arr_type;		/* element type when type is ARRAY */
	uint64_t n;			/* array elements; 1 for a scalar */
	const void *data;		/* (n, element size), unaligned; NULL for strings */
	struct kvt_gguf_str *strs;	/* (n) when the value is a string or string array */
	uint64_t off;			/* file offset of the pair (for messages) */
};

struct kvt_gguf_tensor {
	struct kvt_gguf_str name;	/* at most KVT_GGUF_NAME_MAX bytes */
	uint32_t n_dims;		/* 1..4 */
	uint32_t type;			/* enum kvt_ggml_type */
	uint64_t ne[KVT_GGUF_MAX_DIMS];	/* ne[0] contiguous; unused dims are 1 */
	uint64_t offset;		/* data offset within the data section */
	uint64_t nbytes;		/* bytes of data */
	const void *data;		/* (ne[3], ne[2], ne[1], row bytes), aligned */
	uint64_t info_off;		/* file offset of the tensor info record */
};

struct kvt_gguf {
	const uint8_t *map;		/* (size) the file, read-only; NULL if owned by caller */
	const uint8_t *base;		/* (size) the bytes parsed */
	uint64_t size;			/* file size in bytes */
	uint32_t version;		/* 3 */
	uint32_t alignment;		/* general.alignment, a power of two */
	uint64_t n_kv;
	struct kvt_gguf_kv *kv;		/* (n_kv) in file order */
	uint64_t n_tensors;
	struct kvt_gguf_tensor *tensors;	/* (n_tensors) in file order */
	uint64_t data_off;		/* file offset of the data section */
};

/* Map path read-only and parse it. 0 and *out set, or -ENOENT/-EACCES/...
 * for open errors, -EINVAL for a malformed file, -ENOMEM; on failure one
 * line in err (if errlen > 0) and *out is NULL. */
int kvt_gguf_open(const char *path, struct kvt_gguf **out, char *err, size_t errlen);
/* Parse size bytes at buf, which the caller keeps valid until close (tests
 * use it with an exact-size heap copy so ASan sees any over-read). name
 * prefixes messages. Same returns as kvt_gguf_open. */
int kvt_gguf_open_mem(const void *buf, size_t size, const char *name,
		      struct kvt_gguf **out, char *err, size_t errlen);
/* Unmap and free; NULL is a no-op. */
void kvt_gguf_close(struct kvt_gguf *g);

/* Lookups: NULL if absent. Keys and names compare as whole byte strings. */
const struct kvt_gguf_kv *kvt_gguf_find_kv(const struct kvt_gguf *g, const char *key);
const struct kvt_gguf_tensor *kvt_gguf_find_tensor(const struct kvt_gguf *g, const char *name);

/* Typed getters: 0, -ENOENT if the key is absent, -EINVAL if its type is
 * not exactly the one asked for (no conversions). *v untouched on error. */
int kvt_gguf_get_u32(const struct kvt_gguf *g, const char *key, uint32_t *v);
int kvt_gguf_get_i32(const struct kvt_gguf *g, const char *key, int32_t *v);
int kvt_gguf_get_f32(const struct kvt_gguf *g, const char *key, float *v);
int kvt_gguf_get_u64(const struct kvt_gguf *g, const char *key, uint64_t *v);
int kvt_gguf_get_str(const struct kvt_gguf *g, const char *key, struct kvt_gguf_str *v);
/* A string array: *strs points at n entries owned by g. */
int kvt_gguf_get_str_arr(const struct kvt_gguf *g, const char *key,
			 const struct kvt_gguf_str **strs, uint64_t *n);
/* Numeric arrays: *n is the length; min(*n, cap) elements are copied to
 * dst (dst may be NULL when cap is 0, to ask the length). */
int kvt_gguf_get_i32_arr(const struct kvt_gguf *g, const char *key,
			 int32_t *dst, uint64_t cap, uint64_t *n);
int kvt_gguf_get_f32_arr(const struct kvt_gguf *g, const char *key,
			 float *dst, uint64_t cap, uint64_t *n);

/* ggml's name of a tensor type ("f32", "q4_k", "iq2_xxs", ...), or NULL
 * for a number that is no ggml type. Every named type parses; which the
 * runtime computes with is the kernels' business (kvt_mat_row_bytes). */
const char *kvt_ggml_type_name(uint32_t type);
/* Bytes of a tensor of type with dims ne[0..n_dims): 0, -EINVAL for an
 * unknown type, ne[0] not a multiple of the block, or overflow. */
int kvt_ggml_nbytes(uint32_t type, uint32_t n_dims, const uint64_t *ne, uint64_t *bytes);

/*
 * Writer: collects kv pairs and tensors, then writes one GGUF v3 file with
 * alignment 32. Tensor data is borrowed, not copied: it must stay valid
 * until kvt_gguf_writer_write. The add functions return 0 or -errno; the
 * first error also sticks and is returned again by kvt_gguf_writer_write,
 * so a caller may add many items and check once.
 */
struct kvt_gguf_writer;

int kvt_gguf_writer_new(struct kvt_gguf_writer **out);
void kvt_gguf_writer_free(struct kvt_gguf_writer *w);

int kvt_gguf_add_u32(struct kvt_gguf_writer *w, const char *key, uint32_t v);
int kvt_gguf_add_i32(struct kvt_gguf_writer *w, const char *key, int32_t v);
int kvt_gguf_add_u64(struct kvt_gguf_writer *w, const char *key, uint64_t v);
int kvt_gguf_add_f32(struct kvt_gguf_writer *w, const char *key, float v);
int kvt_gguf_add_str(struct kvt_gguf_writer *w, const char *key, const char *v);
int kvt_gguf_add_str_arr(struct kvt_gguf_writer *w, const char *key,
			 const char *const *v, uint64_t n);
int kvt_gguf_add_i32_arr(struct kvt_gguf_writer *w, const char *key,
			 const int32_t *v, uint64_t n);
int kvt_gguf_add_f32_arr(struct kvt_gguf_writer *w, const char *key,
			 const float *v, uint64_t n);
/* ne[0] is the contiguous dimension; data holds kvt_ggml_nbytes bytes. */
int kvt_gguf_add_tensor(struct kvt_gguf_writer *w, const char *name, uint32_t n_dims,
			const uint64_t *ne, uint32_t type, const void *data);
/* Write the file (truncating path). 0 or -errno with one line in err. */
int kvt_gguf_writer_write(struct kvt_gguf_writer *w, const char *path,
			  char *err, size_t errlen);

#endif
