/* SPDX-License-Identifier: MIT */
/*
 * GGUF reader and writer: a small model written with the writer reads back
 * equal (every key, every tensor); every truncation of it and a list of
 * targeted corruptions are refused with -EINVAL and a message naming the
 * problem, never a crash. Truncations are parsed from exact-size heap
 * copies (kvt_gguf_open_mem) so ASan catches any over-read, and a sample
 * of them also through files (kvt_gguf_open: read into memory, or mapped).
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "runtime/gguf.h"

static char path[4096];

static const char *const strs[] = { "alpha", "", "<0xFF>", "a longer string with spaces" };
static const int32_t i32s[] = { -1, 0, 7, INT32_MAX, INT32_MIN };
static const float f32s[] = { 0.5f, -2.25f, 1e-5f };

/* Tensor data: F32 (3, 8), F16 (2, 32), BF16 (16), Q8_0 (2, 64). */
static float t_f32[3 * 8];
static uint16_t t_f16[2 * 32];
static uint16_t t_bf16[16];
static uint8_t t_q8[2 * 2 * 34];

struct tdesc {
	const char *name;
	uint32_t n_dims, type;
	uint64_t ne[4];
	const void *data;
	uint64_t nbytes;
};

static const struct tdesc tens[] = {
	{ "blk.0.attn_norm.weight", 2, KVT_GGML_F32, { 8, 3 }, t_f32, sizeof(t_f32) },
	{ "blk.0.attn_q.weight", 2, KVT_GGML_F16, { 32, 2 }, t_f16, sizeof(t_f16) },
	{ "output_norm.weight", 1, KVT_GGML_BF16, { 16 }, t_bf16, sizeof(t_bf16) },
	{ "token_embd.weight", 2, KVT_GGML_Q8_0, { 64, 2 }, t_q8, sizeof(t_q8) },
};
#define NT (sizeof(tens) / sizeof(tens[0]))

static void write_model(void)
{
	struct kvt_gguf_writer *w;
	char err[256] = "";
	unsigned i;

	for (i = 0; i < sizeof(t_f32) / 4; i++)
		t_f32[i] = (float)i * 0.25f - 1.0f;
	for (i = 0; i < sizeof(t_f16) / 2; i++)
		t_f16[i] = (uint16_t)(0x3c00 + i);
	for (i = 0; i < sizeof(t_bf16) / 2; i++)
		t_bf16[i] = (uint16_t)(0x3f80 + i);
	for (i = 0; i < sizeof(t_q8); i++)
		t_q8[i] = (uint8_t)(i * 37 + 1);

	CHECK_EQ(kvt_gguf_writer_new(&w), 0);
	CHECK_EQ(kvt_gguf_add_str(w, "general.architecture", "llama"), 0);
	CHECK_EQ(kvt_gguf_add_u32(w, "llama.block_count", 1), 0);
	CHECK_EQ(kvt_gguf_add_i32(w, "test.i32", -42), 0);
	CHECK_EQ(kvt_gguf_add_u64(w, "test.u64", 1ull << 40), 0);
	CHECK_EQ(kvt_gguf_add_f32(w, "llama.rope.freq_base", 10000.0f), 0);
	CHECK_EQ(kvt_gguf_add_str_arr(w, "tokenizer.ggml.tokens", strs, 4), 0);
	CHECK_EQ(kvt_gguf_add_i32_arr(w, "tokenizer.ggml.token_type", i32s, 5), 0);
	CHECK_EQ(kvt_gguf_add_f32_arr(w, "tokenizer.ggml.scores", f32s, 3), 0);
	CHECK_EQ(kvt_gguf_add_f32_arr(w, "test.empty", NULL, 0), 0);
	for (i = 0; i < NT; i++)
		CHECK_EQ(kvt_gguf_add_tensor(w, tens[i].name, tens[i].n_dims, tens[i].ne,
					     tens[i].type, tens[i].data), 0);
	/* A Q8_0 row that is not whole blocks is refused, and the error sticks. */
	CHECK_EQ(kvt_gguf_writer_write(w, path, err, sizeof(err)), 0);
	CHECK_EQ(kvt_gguf_add_tensor(w, "bad", 1, (uint64_t[]){ 33 }, KVT_GGML_Q8_0, t_q8), -EINVAL);
	CHECK_EQ(kvt_gguf_writer_write(w, "/nonexistent/x", err, sizeof(err)), -EINVAL);
	CHECK(err[0]);
	kvt_gguf_writer_free(w);
}

static void check_model(const struct kvt_gguf *g)
{
	const struct kvt_gguf_str *sv;
	struct kvt_gguf_str s;
	int32_t i32, ia[8];
	uint32_t u32;
	uint64_t u64, n;
	float f, fa[8];
	unsigned i;

	CHECK_EQ(g->version, 3);
	CHECK_EQ(g->alignment, 32);
	CHECK_EQ(g->n_kv, 9);
	CHECK_EQ(g->n_tensors, NT);
	CHECK_EQ(g->data_off % 32, 0);

	CHECK_EQ(kvt_gguf_get_str(g, "general.architecture", &s), 0);
	CHECK(s.len == 5 && !memcmp(s.ptr, "llama", 5));
	CHECK_EQ(kvt_gguf_get_u32(g, "llama.block_count", &u32), 0);
	CHECK_EQ(u32, 1);
	CHECK_EQ(kvt_gguf_get_i32(g, "test.i32", &i32), 0);
	CHECK_EQ(i32, -42);
	CHECK_EQ(kvt_gguf_get_u64(g, "test.u64", &u64), 0);
	CHECK_EQ(u64, 1ull << 40);
	CHECK_EQ(kvt_gguf_get_f32(g, "llama.rope.freq_base", &f), 0);
	CHECK(f == 10000.0f);
	CHECK_EQ(kvt_gguf_get_str_arr(g, "tokenizer.ggml.tokens", &sv, &n), 0);
	CHECK_EQ(n, 4);
	for (i = 0; i < 4; i++)
		CHECK(sv[i].len == strlen(strs[i]) && !memcmp(sv[i].ptr, strs[i], sv[i].len));
	CHECK_EQ(kvt_gguf_get_i32_arr(g, "tokenizer.ggml.token_type", ia, 8, &n), 0);
	CHECK_EQ(n, 5);
	CHECK(!memcmp(ia, i32s, sizeof(i32s)));
	CHECK_EQ(kvt_gguf_get_f32_arr(g, "tokenizer.ggml.scores", fa, 2, &n), 0);
	CHECK_EQ(n, 3);
	CHECK(fa[0] == f32s[0] && fa[1] == f32s[1]);
	CHECK_EQ(kvt_gguf_get_f32_arr(g, "test.empty", NULL, 0, &n), 0);
	CHECK_EQ(n, 0);

	/* Missing keys and type mismatches. */
	CHECK_EQ(kvt_gguf_get_u32(g, "nope", &u32), -ENOENT);
	CHECK_EQ(kvt_gguf_get_f32(g, "llama.block_count", &f), -EINVAL);
	CHECK_EQ(kvt_gguf_get_i32(g, "llama.block_count", &i32), -EINVAL);
	CHECK_EQ(kvt_gguf_get_u32(g, "test.i32", &u32), -EINVAL);
	CHECK_EQ(kvt_gguf_get_str(g, "tokenizer.ggml.tokens", &s), -EINVAL);
	CHECK_EQ(kvt_gguf_get_f32_arr(g, "tokenizer.ggml.token_type", fa, 8, &n), -EINVAL);
	CHECK_EQ(kvt_gguf_get_i32_arr(g, "tokenizer.ggml.scores", ia, 8, &n), -EINVAL);
	CHECK_EQ(kvt_gguf_get_str_arr(g, "tokenizer.ggml.scores", &sv, &n), -EINVAL);
	CHECK(!kvt_gguf_find_kv(g, "llama"));	/* a prefix is not a match */

	for (i = 0; i < NT; i++) {
		const struct kvt_gguf_tensor *t = kvt_gguf_find_tensor(g, tens[i].name);
		unsigned d;

		CHECK(t);
		CHECK_EQ(t->n_dims, tens[i].n_dims);
		CHECK_EQ(t->type, tens[i].type);
		for (d = 0; d < 4; d++)
			CHECK_EQ(t->ne[d], d < tens[i].n_dims ? tens[i].ne[d] : 1);
		CHECK_EQ(t->nbytes, tens[i].nbytes);
		CHECK_EQ(((uintptr_t)t->data - (uintptr_t)g->base) % 32, 0);
		CHECK(!memcmp(t->data, tens[i].data, t->nbytes));
	}
	CHECK(!kvt_gguf_find_tensor(g, "blk.0"));
}

static uint8_t *load(size_t *size)
{
	FILE *f = fopen(path, "rb");
	uint8_t *b;
	long n;

	CHECK(f);
	CHECK(!fseek(f, 0, SEEK_END));
	n = ftell(f);
	CHECK(n > 0);
	rewind(f);
	b = malloc((size_t)n);
	CHECK(b);
	CHECK_EQ(fread(b, 1, (size_t)n, f), n);
	fclose(f);
	*size = (size_t)n;
	return b;
}

/* Open size bytes of buf from an exact-size copy; returns the open's result. */
static int open_copy(const uint8_t *buf, size_t size, char *err, size_t errlen)
{
	struct kvt_gguf *g = NULL;
	uint8_t *c = malloc(size ? size : 1);
	int ret;

	CHECK(c);
	memcpy(c, buf, size);
	ret = kvt_gguf_open_mem(c, size, "model.gguf", &g, err, errlen);
	if (!ret)
		kvt_gguf_close(g);
	else
		CHECK(!g);
	free(c);
	return ret;
}

static int open_file(const uint8_t *buf, size_t size, char *err, size_t errlen)
{
	char p2[4200];
	struct kvt_gguf *g = NULL;
	int fd, ret;

	snprintf(p2, sizeof(p2), "%s.cut", path);
	fd = open(p2, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0);
	CHECK_EQ(write(fd, buf, size), (long long)size);
	close(fd);
	ret = kvt_gguf_open(p2, &g, err, errlen);
	if (!ret)
		kvt_gguf_close(g);
	unlink(p2);
	return ret;
}

static void expect_refused(const uint8_t *buf, size_t size, const char *what,
			   const char *want1, const char *want2)
{
	char err[512] = "";
	int ret = open_copy(buf, size, err, sizeof(err));

	if (ret != -EINVAL || !strstr(err, want1) || (want2 && !strstr(err, want2))) {
		fprintf(stderr, "%s: ret %d, err \"%s\", wanted -EINVAL and \"%s\"%s%s\n",
			what, ret, err, want1, want2 ? " and " : "", want2 ? want2 : "");
		exit(1);
	}
	printf("  %-22s %s\n", what, err);
}

static void put_u32(uint8_t *b, uint64_t off, uint32_t v) { memcpy(b + off, &v, 4); }
static void put_u64(uint8_t *b, uint64_t off, uint64_t v) { memcpy(b + off, &v, 8); }

int main(void)
{
	const char *dir = getenv("KVT_TEST_DIR");
	const struct kvt_gguf_tensor *t;
	struct kvt_gguf *g;
	char err[512];
	uint8_t *buf, *c;
	size_t size, cut, data_end = 0, n_trunc = 0;
	uint64_t ndims_off, type_off, offs_off;
	unsigned i;

	snprintf(path, sizeof(path), "%s/t_gguf.%d.gguf", dir && *dir ? dir : "/tmp", (int)getpid());
	write_model();

	/* Round trip through the file path and the memory path. */
	CHECK_EQ(kvt_gguf_open(path, &g, err, sizeof(err)), 0);
	check_model(g);
	for (i = 0; i < g->n_tensors; i++) {
		uint64_t e = g->data_off + g->tensors[i].offset + g->tensors[i].nbytes;

		data_end = e > data_end ? e : data_end;
	}
	t = kvt_gguf_find_tensor(g, "blk.0.attn_q.weight");
	CHECK(t);
	ndims_off = t->info_off + 8 + t->name.len;
	type_off = ndims_off + 4 + 8ull * t->n_dims;
	offs_off = type_off + 4;
	buf = load(&size);
	CHECK_EQ(size, g->size);
	/* Read into memory of its own (the default) or, with
	 * KVT_MODEL_MMAP=1, the file mapped: the same bytes either way. */
	CHECK(!memcmp(g->base, buf, size));
	{
		struct kvt_gguf *g2;

		CHECK_EQ(setenv("KVT_MODEL_MMAP", "1", 1), 0);
		CHECK_EQ(kvt_gguf_open(path, &g2, err, sizeof(err)), 0);
		unsetenv("KVT_MODEL_MMAP");
		CHECK(g2->base != g->base && !memcmp(g2->base, buf, size));
		check_model(g2);
		kvt_gguf_close(g2);
	}
	{
		struct kvt_gguf *g2;

		CHECK_EQ(kvt_gguf_open_mem(buf, size, "m", &g2, err, sizeof(err)), 0);
		check_model(g2);
		kvt_gguf_close(g2);
	}
	CHECK(data_end <= size);

	/* Every truncation short of the last tensor's data fails cleanly:
	 * every byte of header, kv and tensor infos, and every 3rd of data. */
	for (cut = 0; cut < data_end; cut += cut < g->data_off ? 1 : 3) {
		err[0] = '\0';
		CHECK_EQ(open_copy(buf, cut, err, sizeof(err)), -EINVAL);
		if (!err[0] || !strstr(err, "model.gguf: ")) {
			fprintf(stderr, "cut %zu: no message (\"%s\")\n", cut, err);
			return 1;
		}
		if (cut % 7 == 0 || cut > g->data_off) {
			err[0] = '\0';
			CHECK_EQ(open_file(buf, cut, err, sizeof(err)), -EINVAL);
			CHECK(err[0]);
		}
		n_trunc++;
	}
	printf("  %zu truncations refused (file %zu bytes, data at %llu)\n", n_trunc, size,
	       (unsigned long long)g->data_off);
	/* Sample messages. */
	open_copy(buf, g->kv[1].off + 10, err, sizeof(err));
	CHECK(strstr(err, "kv 1") && strstr(err, "past end of file"));
	printf("  cut at %llu: %s\n", (unsigned long long)g->kv[1].off + 10, err);
	open_copy(buf, data_end - 1, err, sizeof(err));
	CHECK(strstr(err, "token_embd.weight") && strstr(err, "data ["));
	printf("  cut at %zu: %s\n", data_end - 1, err);

	/* Targeted corruptions. */
	c = malloc(size);
	CHECK(c);
#define FRESH() memcpy(c, buf, size)
	FRESH(); c[0] = 'X';
	expect_refused(c, size, "bad magic", "magic", NULL);
	FRESH(); put_u32(c, 4, 2);
	expect_refused(c, size, "version 2", "version 2", NULL);
	FRESH(); put_u32(c, 4, 99);
	expect_refused(c, size, "version 99", "version 99", NULL);
	FRESH(); put_u64(c, 8, 1ull << 40);
	expect_refused(c, size, "huge tensor count", "tensor count", NULL);
	FRESH(); put_u64(c, 16, UINT64_MAX);
	expect_refused(c, size, "huge kv count", "kv count", NULL);
	FRESH(); put_u64(c, 24, 1ull << 62);
	expect_refused(c, size, "huge key length", "key length", NULL);
	FRESH(); put_u64(c, g->kv[0].off + 8 + g->kv[0].key.len + 4, UINT64_MAX);
	expect_refused(c, size, "huge string length", "string length", "general.architecture");
	{
		const struct kvt_gguf_kv *kv = kvt_gguf_find_kv(g, "tokenizer.ggml.tokens");
		uint64_t alen = kv->off + 8 + kv->key.len + 4 + 4;

		FRESH(); put_u64(c, alen, 1ull << 61);
		expect_refused(c, size, "huge array length", "array length", "tokenizer.ggml.tokens");
		FRESH(); put_u32(c, alen - 4, 9);
		expect_refused(c, size, "nested array", "nested array", NULL);
		FRESH(); put_u32(c, alen - 8, 13);
		expect_refused(c, size, "unknown value type", "unknown value type 13", NULL);
	}
	FRESH(); put_u32(c, ndims_off, 5);
	expect_refused(c, size, "n_dims 5", "n_dims 5", "blk.0.attn_q.weight");
	FRESH(); put_u32(c, type_off, 5);	/* ggml's removed Q4_3: no type now */
	expect_refused(c, size, "unknown tensor type", "unknown tensor type 5", "blk.0.attn_q.weight");
	FRESH(); put_u64(c, offs_off, t->offset + 1);
	expect_refused(c, size, "unaligned offset", "not a multiple of alignment", "blk.0.attn_q.weight");
	FRESH(); put_u64(c, offs_off, 1ull << 20);
	expect_refused(c, size, "data past EOF", "past end of file", "blk.0.attn_q.weight");
	FRESH(); put_u64(c, offs_off, (UINT64_MAX / 32) * 32);
	expect_refused(c, size, "offset wraps", "past end of file", "blk.0.attn_q.weight");
	FRESH(); put_u64(c, ndims_off + 4, UINT64_MAX / 2);
	expect_refused(c, size, "dims overflow", "overflows", "blk.0.attn_q.weight");
	FRESH(); memcpy(c + kvt_gguf_find_kv(g, "test.i32")->off + 8, "test.u64", 8);
	expect_refused(c, size, "duplicate key", "test.u64", "appears twice");
	free(c);

	kvt_gguf_close(g);

	/* Open errors. */
	CHECK_EQ(kvt_gguf_open("/nonexistent/model.gguf", &g, err, sizeof(err)), -ENOENT);
	CHECK(!g && strstr(err, "/nonexistent/model.gguf"));
	CHECK_EQ(kvt_gguf_open("/tmp", &g, err, sizeof(err)), -EINVAL);
	kvt_gguf_close(NULL);
	/* A FIFO with no writer: refused at once, not waited on (the alarm
	 * ends the test if open blocks). */
	{
		char fifo[sizeof(path) + 8];

		snprintf(fifo, sizeof(fifo), "%s.fifo", path);
		CHECK(!mkfifo(fifo, 0600));
		alarm(10 * t_slow());
		CHECK_EQ(kvt_gguf_open(fifo, &g, err, sizeof(err)), -EINVAL);
		alarm(0);
		CHECK(strstr(err, "not a regular file"));
		unlink(fifo);
	}

	unlink(path);
	free(buf);
	printf("t_gguf: ok\n");
	return 0;
}
