/* SPDX-License-Identifier: MIT */
/*
 * The GGUF reader (runtime/gguf.c) and the model loader's checks on top
 * of it (runtime/model.c, which also loads the tokenizer). An input is a
 * whole file. The reader gets an exact-size heap copy, so ASan sees any
 * read past the end; what it hands out is then walked as a caller would:
 * every string, array element and tensor byte must lie inside the buffer.
 */
#include "tests/fuzz/fuzz.h"
#include "runtime/gguf.h"
#include "runtime/model.h"

static struct fuzz_file file;

static void walk(const struct kvt_gguf *g, const uint8_t *buf, size_t size)
{
	const uint8_t *end = buf + size;
	volatile uint8_t sink = 0;

	for (uint64_t i = 0; i < g->n_kv; i++) {
		const struct kvt_gguf_kv *kv = &g->kv[i];
		char key[KVT_GGUF_NAME_MAX + 1];

		FUZZ_CHECK(kv->key.len <= KVT_GGUF_NAME_MAX);
		FUZZ_CHECK((const uint8_t *)kv->key.ptr >= buf &&
			   (const uint8_t *)kv->key.ptr + kv->key.len <= end);
		memcpy(key, kv->key.ptr, kv->key.len);
		key[kv->key.len] = 0;
		/* The lookup by name finds this pair or an earlier one of the
		 * same name (a NUL inside a key makes names compare shorter). */
		if (!memchr(key, 0, kv->key.len))
			FUZZ_CHECK(kvt_gguf_find_kv(g, key) != NULL);
		for (uint64_t j = 0; kv->strs && j < kv->n; j++) {
			const struct kvt_gguf_str *s = &kv->strs[j];
			FUZZ_CHECK((const uint8_t *)s->ptr >= buf &&
				   (const uint8_t *)s->ptr + s->len <= end);
			if (s->len)
				sink ^= (uint8_t)(s->ptr[0] ^ s->ptr[s->len - 1]);
		}
		uint32_t u32; int32_t i32; float f32; uint64_t u64, n;
		struct kvt_gguf_str str;
		const struct kvt_gguf_str *strs;
		int32_t ia[8];
		float fa[8];
		(void)kvt_gguf_get_u32(g, key, &u32);
		(void)kvt_gguf_get_i32(g, key, &i32);
		(void)kvt_gguf_get_f32(g, key, &f32);
		(void)kvt_gguf_get_u64(g, key, &u64);
		(void)kvt_gguf_get_str(g, key, &str);
		(void)kvt_gguf_get_str_arr(g, key, &strs, &n);
		if (!kvt_gguf_get_i32_arr(g, key, ia, 8, &n) && n)
			sink ^= (uint8_t)ia[(n < 8 ? n : 8) - 1];
		if (!kvt_gguf_get_f32_arr(g, key, fa, 8, &n) && n) {
			uint32_t bits;
			memcpy(&bits, &fa[0], 4);	/* any bits: NaN too */
			sink ^= (uint8_t)bits;
		}
	}
	for (uint64_t i = 0; i < g->n_tensors; i++) {
		const struct kvt_gguf_tensor *t = &g->tensors[i];
		uint64_t bytes;

		FUZZ_CHECK(t->n_dims >= 1 && t->n_dims <= KVT_GGUF_MAX_DIMS);
		FUZZ_CHECK(kvt_ggml_type_name(t->type) != NULL);
		FUZZ_CHECK(kvt_ggml_nbytes(t->type, t->n_dims, t->ne, &bytes) == 0 &&
			   bytes == t->nbytes);
		FUZZ_CHECK((const uint8_t *)t->data >= buf &&
			   t->nbytes <= (uint64_t)(end - (const uint8_t *)t->data));
		if (t->nbytes)
			sink ^= ((const uint8_t *)t->data)[0] ^
				((const uint8_t *)t->data)[t->nbytes - 1];
	}
	(void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *buf = malloc(size ? size : 1);
	struct kvt_gguf *g;
	struct kvt_model *m;
	char err[512];
	int r;

	FUZZ_CHECK(buf);
	memcpy(buf, data, size);
	err[0] = 0;
	r = kvt_gguf_open_mem(buf, size, "fuzz", &g, err, sizeof(err));
	if (r) {
		FUZZ_CHECK(r == -EINVAL || r == -ENOMEM);
		FUZZ_CHECK(g == NULL);
		fuzz_check_err(err, sizeof(err));
	} else {
		walk(g, buf, size);
		kvt_gguf_close(g);
	}
	free(buf);

	/* The loader maps the file itself and checks what a model needs. */
	err[0] = 0;
	r = kvt_model_load(fuzz_file_set(&file, "gguf", data, size), &m, err, sizeof(err));
	if (r) {
		FUZZ_CHECK(r < 0);
		fuzz_check_err(err, sizeof(err));
	} else {
		FUZZ_CHECK(m->hp.n_layer > 0 && m->hp.n_vocab > 0);
		kvt_model_free(m);
	}
	return 0;
}
