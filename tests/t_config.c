/* SPDX-License-Identifier: MIT */
/*
 * Configuration: defaults, every kind of key, every refusal (-EINVAL, one
 * line naming the key, the config untouched), INI files (good, bad line,
 * syntax error, too long, unknown key, missing), cross-field validation,
 * and print -> load round trips. No pager is opened.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tests/common.h"

static char dir[1024];
static char err[512];
static char made[32][64];	/* files written, removed at exit */
static unsigned nmade;
static int own_dir;		/* dir is our mkdtemp: remove it too */

static void cleanup(void)
{
	char p[2048];
	unsigned i;

	for (i = 0; i < nmade; i++) {
		snprintf(p, sizeof(p), "%s/%s", dir, made[i]);
		unlink(p);
	}
	if (own_dir)
		rmdir(dir);
}

static void log_nothing(void *arg, int level, const char *msg)
{
	(void)arg; (void)level; (void)msg;
}

static const char *tpath(const char *name)
{
	static char p[2048];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return p;
}

static const char *write_file(const char *name, const char *text)
{
	const char *p = tpath(name);
	FILE *f;
	unsigned i;

	for (i = 0; i < nmade && strcmp(made[i], name); i++)
		;
	if (i == nmade) {
		CHECK(nmade < 32 && strlen(name) < sizeof(made[0]));
		strcpy(made[nmade++], name);
	}
	f = fopen(p, "we");
	CHECK(f);
	CHECK(fputs(text, f) >= 0);
	CHECK(fclose(f) == 0);
	return p;
}

/* Messages are one line. */
static void check_one_line(const char *msg)
{
	CHECK(msg[0]);
	CHECK(!strchr(msg, '\n'));
}

static void set_ok(struct kvt_config *c, const char *key, const char *value)
{
	int rc = kvt_config_set(c, key, value, err, sizeof(err));

	if (rc) {
		fprintf(stderr, "set %s = %s: %d: %s\n", key, value, rc, err);
		exit(1);
	}
}

static void test_defaults(void)
{
	struct kvt_config c;

	kvt_config_default(&c);
	CHECK_EQ(kvt_config_page_bytes(&c), 64 * 1024);
	CHECK_EQ(kvt_config_validate(&c, err, sizeof(err)), 0);
	CHECK_EQ(c.n_layers, 32);
	CHECK_EQ(c.tier[KVT_TIER_FAST].bytes, 1ull << 30);
	CHECK_EQ(c.tier[KVT_TIER_HOST].bytes, 4ull << 30);
	CHECK_EQ(c.tier[KVT_TIER_NVME].bytes, 64ull << 30);
	CHECK(!strcmp(c.tier[KVT_TIER_NVME].policy, "auto"));
	CHECK_EQ(c.tier[KVT_TIER_FAST].wm_high, 4);
	CHECK_EQ(c.tier[KVT_TIER_NVME].wm_high, 0);
	CHECK_EQ(c.nvme_direct, KVT_AUTO);
	CHECK_EQ(c.io_depth, 32);
	CHECK_EQ(c.max_io_bytes, 1 << 20);
	CHECK_EQ(c.host_numa_node, KVT_NUMA_ANY);
	CHECK_EQ(c.host_hugepages, KVT_HUGE_AUTO);
	CHECK_EQ(c.host_mlock, KVT_AUTO);
	CHECK_EQ(c.prefetch_depth, 2);
	CHECK(!strcmp(c.device, "auto"));
	CHECK(!c.nvme_path[0] && !c.log && !c.log_arg && c.copy_gbps == 0);
}

static void test_set(void)
{
	struct kvt_config c;

	kvt_config_default(&c);
	set_ok(&c, "geometry.layers", "40");
	CHECK_EQ(c.n_layers, 40);
	set_ok(&c, "geometry.dtype", "f32");
	CHECK_EQ(c.dtype_bytes, 4);
	set_ok(&c, "geometry.dtype", "BF16");
	CHECK_EQ(c.dtype_bytes, 2);
	set_ok(&c, "tier.fast.bytes", "256M");
	CHECK_EQ(c.tier[KVT_TIER_FAST].bytes, 256ull << 20);
	set_ok(&c, "tier.host.bytes", "3g");
	CHECK_EQ(c.tier[KVT_TIER_HOST].bytes, 3ull << 30);
	set_ok(&c, "tier.nvme.bytes", "2T");
	CHECK_EQ(c.tier[KVT_TIER_NVME].bytes, 2ull << 40);
	set_ok(&c, "tier.nvme.bytes", "12345");
	CHECK_EQ(c.tier[KVT_TIER_NVME].bytes, 12345);
	set_ok(&c, "tier.nvme.bytes", "0");
	CHECK_EQ(c.tier[KVT_TIER_NVME].bytes, 0);
	set_ok(&c, "io.max_io_bytes", "64K");
	CHECK_EQ(c.max_io_bytes, 64 << 10);
	set_ok(&c, "io.max_io_bytes", "64M");
	CHECK_EQ(c.max_io_bytes, 64 << 20);
	set_ok(&c, "tier.host.policy", "lfu:decay=0.5,k-2");
	CHECK(!strcmp(c.tier[KVT_TIER_HOST].policy, "lfu:decay=0.5,k-2"));
	set_ok(&c, "tier.host.policy", "lru");	/* shorter: no tail left behind */
	CHECK(!memcmp(c.tier[KVT_TIER_HOST].policy, "lru\0\0\0\0\0", 8));
	set_ok(&c, "tier.fast.wm_low", "50");	/* above wm_high: set allows it */
	CHECK_EQ(c.tier[KVT_TIER_FAST].wm_low, 50);
	CHECK_EQ(kvt_config_validate(&c, err, sizeof(err)), -EINVAL);
	set_ok(&c, "tier.fast.wm_high", "50");
	set_ok(&c, "nvme.path", "/tmp/kvt nvme;x");
	CHECK(!strcmp(c.nvme_path, "/tmp/kvt nvme;x"));
	set_ok(&c, "nvme.path", "");
	CHECK(!c.nvme_path[0]);
	set_ok(&c, "nvme.direct", "on");
	CHECK_EQ(c.nvme_direct, KVT_ON);
	set_ok(&c, "io.depth", "4096");
	CHECK_EQ(c.io_depth, 4096);
	set_ok(&c, "host.numa_node", "interleave");
	CHECK_EQ(c.host_numa_node, KVT_NUMA_INTERLEAVE);
	set_ok(&c, "host.numa_node", "1023");
	CHECK_EQ(c.host_numa_node, 1023);
	set_ok(&c, "host.numa_node", "any");
	CHECK_EQ(c.host_numa_node, KVT_NUMA_ANY);
	set_ok(&c, "host.hugepages", "thp");
	CHECK_EQ(c.host_hugepages, KVT_HUGE_THP);
	set_ok(&c, "host.mlock", "off");
	CHECK_EQ(c.host_mlock, KVT_OFF);
	set_ok(&c, "host.prefault_threads", "64");
	CHECK_EQ(c.host_prefault_threads, 64);
	set_ok(&c, "access.host_in_place", "yes");
	CHECK_EQ(c.host_in_place, 1);
	set_ok(&c, "access.host_in_place", "Off");
	CHECK_EQ(c.host_in_place, 0);
	set_ok(&c, "access.host_in_place", "1");
	CHECK_EQ(c.host_in_place, 1);
	set_ok(&c, "access.prefetch_depth", "0");
	CHECK_EQ(c.prefetch_depth, 0);
	set_ok(&c, "device.name", "CUDA");
	CHECK(!strcmp(c.device, "cuda"));
	set_ok(&c, "device.copy_gbps", "12.5");
	CHECK(c.copy_gbps == 12.5);
	set_ok(&c, "device.copy_gbps", "10000");
	CHECK(c.copy_gbps == 10000);
	CHECK_EQ(kvt_config_validate(&c, err, sizeof(err)), 0);
}

static void test_bad_values(void)
{
	static char long_policy[80], long_path[KVT_PATH_MAX + 10];
	static const char *bad[][2] = {
		{ "io.depth", "0" }, { "io.depth", "4097" }, { "io.depth", "-1" },
		{ "io.depth", "" }, { "io.depth", "abc" }, { "io.depth", "8x" },
		{ "io.depth", " 8" }, { "io.depth", "+8" }, { "io.depth", "0x10" },
		{ "io.depth", "99999999999999999999999" },
		{ "tier.fast.wm_low", "60" }, { "tier.nvme.wm_min", "51" },
		{ "geometry.dtype", "f8" }, { "geometry.dtype", "" },
		{ "geometry.layers", "0" }, { "geometry.layers", "4097" },
		{ "geometry.kv_heads", "0" }, { "geometry.head_dim", "1.5" },
		{ "geometry.page_tokens", "-16" },
		{ "tier.fast.bytes", "12X" }, { "tier.fast.bytes", "1.5G" },
		{ "tier.fast.bytes", "-1" }, { "tier.fast.bytes", "" },
		{ "tier.fast.bytes", "M" }, { "tier.fast.bytes", "1MB" },
		{ "tier.fast.bytes", "99999999999T" },
		{ "tier.host.bytes", "18446744073709551616" },
		{ "tier.nvme.bytes", "16777216T" },
		{ "io.max_io_bytes", "1K" }, { "io.max_io_bytes", "5000" },
		{ "io.max_io_bytes", "128M" }, { "io.max_io_bytes", "0" },
		{ "tier.fast.policy", "LRU" }, { "tier.fast.policy", "" },
		{ "tier.host.policy", "a b" }, { "tier.nvme.policy", long_policy },
		{ "tier.host.policy", "lru;x" },
		{ "nvme.path", "/tmp/a\nb" }, { "nvme.path", " /tmp/a" },
		{ "nvme.path", "/tmp/a " }, { "nvme.path", "/tmp/a ;b" },
		{ "nvme.path", ";b" }, { "nvme.path", long_path },
		{ "nvme.direct", "maybe" }, { "nvme.direct", "2" },
		{ "host.numa_node", "1024" }, { "host.numa_node", "-1" },
		{ "host.numa_node", "node0" },
		{ "host.hugepages", "yes" }, { "host.mlock", "1" },
		{ "host.prefault_threads", "65" },
		{ "access.host_in_place", "2" }, { "access.host_in_place", "maybe" },
		{ "access.prefetch_depth", "65" },
		{ "device.name", "gpu" }, { "device.name", "" },
		{ "device.copy_gbps", "-1" }, { "device.copy_gbps", "10001" },
		{ "device.copy_gbps", "nan" }, { "device.copy_gbps", "inf" },
		{ "device.copy_gbps", "1e" }, { "device.copy_gbps", "1,5" },
		{ "device.copy_gbps", "1e999" },
		/* unknown keys */
		{ "io.dept", "1" }, { "io", "1" }, { "geometry.layers.x", "1" },
		{ "tier.fast", "1" }, { "tier.gpu.bytes", "1G" }, { "IO.depth", "1" },
		{ "depth", "1" },
	};
	struct kvt_config c, copy;
	size_t i;

	memset(long_policy, 'a', KVT_POLICY_MAX);
	memset(long_path, 'p', KVT_PATH_MAX);
	long_path[0] = '/';
	kvt_config_default(&c);
	set_ok(&c, "nvme.path", "/var/tmp/kvt");
	set_ok(&c, "tier.fast.policy", "clock");
	memcpy(&copy, &c, sizeof(c));
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc;

		err[0] = '\0';
		rc = kvt_config_set(&c, bad[i][0], bad[i][1], err, sizeof(err));
		if (rc != -EINVAL || !strstr(err, bad[i][0]) || strchr(err, '\n')) {
			fprintf(stderr, "set %s = \"%.40s\": rc %d, err \"%s\"\n",
				bad[i][0], bad[i][1], rc, err);
			exit(1);
		}
		CHECK(!memcmp(&c, &copy, sizeof(c)));
		fprintf(stderr, "  refused: %s\n", err);
	}

	/* the messages the docs promise */
	kvt_config_set(&c, "io.depth", "0", err, sizeof(err));
	CHECK(!strcmp(err, "io.depth = 0: must be 1..4096"));
	kvt_config_set(&c, "tier.fast.wm_low", "60", err, sizeof(err));
	CHECK(!strcmp(err, "tier.fast.wm_low = 60: must be 0..50"));
	kvt_config_set(&c, "io.dept", "1", err, sizeof(err));
	CHECK(!strcmp(err, "unknown key \"io.dept\""));
	kvt_config_set(&c, "geometry.dtype", "f8", err, sizeof(err));
	CHECK(!strcmp(err, "geometry.dtype = f8: must be f16, bf16 or f32"));
	kvt_config_set(&c, "host.numa_node", "x", err, sizeof(err));
	CHECK(!strcmp(err, "host.numa_node = x: must be any, interleave or 0..1023"));

	/* NULLs, no err buffer, a tiny one */
	CHECK_EQ(kvt_config_set(&c, NULL, "1", err, sizeof(err)), -EINVAL);
	CHECK_EQ(kvt_config_set(&c, "io.depth", NULL, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "io.depth"));
	CHECK_EQ(kvt_config_set(&c, "io.depth", "0", NULL, 0), -EINVAL);
	memset(err, 'x', sizeof(err));
	CHECK_EQ(kvt_config_set(&c, "io.depth", "0", err, 5), -EINVAL);
	CHECK(!strcmp(err, "io.d") && err[5] == 'x');
	CHECK(!memcmp(&c, &copy, sizeof(c)));
}

static const char good_ini[] =
	"; a test configuration\n"
	"# comments of both kinds\n"
	"\n"
	"[geometry]\n"
	"layers = 24\n"
	"kv_heads=4\n"
	"  head_dim = 64     ; indented, inline comment\n"
	"\tpage_tokens = 32\n"
	"dtype = f32\r\n"
	"[tier.fast]\n"
	"bytes = 512M\n"
	"policy = clock\n"
	"[tier.host]\n"
	"bytes = 8G\n"
	"wm_min = 2\n"
	"wm_low = 5\n"
	"wm_high = 10\n"
	"[tier.nvme]\n"
	"bytes = 0\n"
	"[nvme]\n"
	"path = /var/tmp/kvt;x\n"
	"direct = off\n"
	"[io]\n"
	"depth = 128\n"
	"max_io_bytes = 256K\n"
	"[host]\n"
	"numa_node = 1\n"
	"hugepages = hugetlb\n"
	"mlock = on\n"
	"prefault_threads = 8\n"
	"[access]\n"
	"host_in_place = true\n"
	"prefetch_depth = 4\n"
	"[device]\n"
	"name = cpu\n"
	"copy_gbps = 25.5\n";

static void test_load_good(void)
{
	struct kvt_config c;
	const char *p = write_file("good.ini", good_ini);

	kvt_config_default(&c);
	c.log_arg = &c;
	if (kvt_config_load(&c, p, err, sizeof(err))) {
		fprintf(stderr, "load: %s\n", err);
		exit(1);
	}
	CHECK_EQ(c.n_layers, 24);
	CHECK_EQ(c.n_kv_heads, 4);
	CHECK_EQ(c.head_dim, 64);
	CHECK_EQ(c.page_tokens, 32);
	CHECK_EQ(c.dtype_bytes, 4);
	CHECK_EQ(kvt_config_page_bytes(&c), 32 * 4 * 64 * 2 * 4);
	CHECK_EQ(c.tier[KVT_TIER_FAST].bytes, 512ull << 20);
	CHECK(!strcmp(c.tier[KVT_TIER_FAST].policy, "clock"));
	CHECK_EQ(c.tier[KVT_TIER_FAST].wm_high, 4);	/* not in the file: kept */
	CHECK_EQ(c.tier[KVT_TIER_HOST].bytes, 8ull << 30);
	CHECK_EQ(c.tier[KVT_TIER_HOST].wm_min, 2);
	CHECK_EQ(c.tier[KVT_TIER_HOST].wm_low, 5);
	CHECK_EQ(c.tier[KVT_TIER_HOST].wm_high, 10);
	CHECK_EQ(c.tier[KVT_TIER_NVME].bytes, 0);
	CHECK(!strcmp(c.nvme_path, "/var/tmp/kvt;x"));
	CHECK_EQ(c.nvme_direct, KVT_OFF);
	CHECK_EQ(c.io_depth, 128);
	CHECK_EQ(c.max_io_bytes, 256 << 10);
	CHECK_EQ(c.host_numa_node, 1);
	CHECK_EQ(c.host_hugepages, KVT_HUGE_HUGETLB);
	CHECK_EQ(c.host_mlock, KVT_ON);
	CHECK_EQ(c.host_prefault_threads, 8);
	CHECK_EQ(c.host_in_place, 1);
	CHECK_EQ(c.prefetch_depth, 4);
	CHECK(!strcmp(c.device, "cpu"));
	CHECK(c.copy_gbps == 25.5);
	CHECK(c.log_arg == &c);
}

/* Loading text must fail with -EINVAL, "NAME:LINE:" and want in the
 * message, and leave the config as it was. */
static void load_bad(const char *name, const char *text, int line, const char *want)
{
	struct kvt_config c, copy;
	char prefix[2048];
	const char *p = write_file(name, text);
	int rc;

	kvt_config_default(&c);
	set_ok(&c, "io.depth", "7");
	memcpy(&copy, &c, sizeof(c));
	err[0] = '\0';
	rc = kvt_config_load(&c, p, err, sizeof(err));
	if (line)
		snprintf(prefix, sizeof(prefix), "%s:%d: ", p, line);
	else
		snprintf(prefix, sizeof(prefix), "%s: ", p);
	if (rc != -EINVAL || strncmp(err, prefix, strlen(prefix)) ||
	    (want && !strstr(err, want))) {
		fprintf(stderr, "%s: rc %d, err \"%s\", want \"%s...%s\"\n",
			name, rc, err, prefix, want ? want : "");
		exit(1);
	}
	check_one_line(err);
	CHECK(!memcmp(&c, &copy, sizeof(c)));
	fprintf(stderr, "  refused: %s\n", err);
}

static void test_load_bad(void)
{
	struct kvt_config c, copy;
	char text[1024];
	int rc;

	/* good lines before the bad one change nothing either */
	load_bad("badline.ini", "[geometry]\nlayers = 12\n[io]\nmax_io_bytes = 8K\n\n"
		 "; comment\ndepth = 0\n[host]\nmlock = off\n", 7,
		 "io.depth = 0: must be 1..4096");
	load_bad("unknown.ini", "[io]\ndepth = 8\ndept = 9\n", 3, "unknown key \"io.dept\"");
	load_bad("nosection.ini", "layers = 4\n[io]\ndepth = 8\n", 1, "\"layers\"");
	load_bad("syntax.ini", "[io]\ndepth = 8\njunk\nmax_io_bytes = 1M\n", 3, "expected");
	load_bad("syntax2.ini", "[io\ndepth = 8\n", 1, "expected");
	/* a syntax error before a bad value is the one reported */
	load_bad("syntax3.ini", "[io]\njunk\ndepth = 0\n", 2, "expected");
	load_bad("dtype.ini", "[geometry]\ndtype = f8\n", 2, "geometry.dtype = f8: must be f16, bf16 or f32");
	load_bad("size.ini", "[tier.fast]\nbytes = 4Q\n", 2, "tier.fast.bytes");
	load_bad("overflow.ini", "[tier.fast]\nbytes = 99999999999T\n", 2, "tier.fast.bytes");
	/* inih would cut a long line in two; we refuse it */
	snprintf(text, sizeof(text), "[nvme]\npath = /%0300d\n", 0);
	load_bad("long.ini", text, 2, "too long");
	/* each value fine, the whole not: validate runs before anything is kept */
	load_bad("wm.ini", "[tier.fast]\nwm_low = 5\n", 0, "wm_min <= wm_low <= wm_high");
	load_bad("page.ini", "[geometry]\nhead_dim = 100\n", 0, "51200");

	/* files that cannot be read */
	kvt_config_default(&c);
	memcpy(&copy, &c, sizeof(c));
	CHECK_EQ(kvt_config_load(&c, tpath("does-not-exist.ini"), err, sizeof(err)), -ENOENT);
	CHECK(strstr(err, "does-not-exist.ini") && strstr(err, strerror(ENOENT)));
	check_one_line(err);
	rc = kvt_config_load(&c, dir, err, sizeof(err));
	CHECK(rc < 0);
	CHECK(strstr(err, dir));
	CHECK(!memcmp(&c, &copy, sizeof(c)));
	/* an empty file changes nothing and is fine */
	CHECK_EQ(kvt_config_load(&c, write_file("empty.ini", ""), err, sizeof(err)), 0);
	CHECK(!memcmp(&c, &copy, sizeof(c)));
}

static void test_validate(void)
{
	struct kvt_config c;

	kvt_config_default(&c);
	c.tier[KVT_TIER_HOST].wm_min = 3;	/* > wm_low 2 */
	CHECK_EQ(kvt_config_validate(&c, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "tier.host") && strstr(err, "wm_min <= wm_low <= wm_high"));
	check_one_line(err);

	kvt_config_default(&c);
	c.tier[KVT_TIER_FAST].wm_high = 1;	/* < wm_low 2 */
	CHECK_EQ(kvt_config_validate(&c, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "tier.fast"));

	kvt_config_default(&c);
	set_ok(&c, "geometry.head_dim", "100");	/* 16*8*100*2*2 = 51200 */
	CHECK_EQ(kvt_config_page_bytes(&c), 51200);
	CHECK_EQ(kvt_config_validate(&c, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "51200") && strstr(err, "4096"));
	check_one_line(err);

	kvt_config_default(&c);
	set_ok(&c, "tier.fast.bytes", "127K");	/* 1 page of 64K */
	CHECK_EQ(kvt_config_validate(&c, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "tier.fast.bytes") && strstr(err, "at least 2"));
	set_ok(&c, "tier.fast.bytes", "64K");
	CHECK_EQ(kvt_config_validate(&c, err, sizeof(err)), -EINVAL);
	CHECK(!strcmp(err, "tier.fast.bytes = 64K holds 1 page of 64K: must hold at least 2 (128K)"));
	set_ok(&c, "tier.fast.bytes", "128K");
	CHECK_EQ(kvt_config_validate(&c, err, sizeof(err)), 0);
	set_ok(&c, "tier.host.bytes", "0");
	CHECK_EQ(kvt_config_validate(&c, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "tier.host.bytes"));
	set_ok(&c, "tier.host.bytes", "128K");
	set_ok(&c, "tier.nvme.bytes", "0");	/* no NVMe tier: fine */
	CHECK_EQ(kvt_config_validate(&c, err, sizeof(err)), 0);

	/* fields written directly, bypassing set */
	kvt_config_default(&c);
	c.io_depth = 0;
	CHECK_EQ(kvt_config_validate(&c, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "io.depth = 0: must be 1..4096"));
	kvt_config_default(&c);
	strcpy(c.device, "gpu");
	CHECK_EQ(kvt_config_validate(&c, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "device.name"));
	kvt_config_default(&c);
	c.tier[KVT_TIER_NVME].policy[0] = '\0';
	CHECK_EQ(kvt_config_validate(&c, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "tier.nvme.policy"));
	kvt_config_default(&c);
	c.dtype_bytes = 3;
	CHECK_EQ(kvt_config_validate(&c, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "geometry.dtype = 3"));
	kvt_config_default(&c);
	c.host_numa_node = -3;
	CHECK_EQ(kvt_config_validate(&c, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "host.numa_node"));
	kvt_config_default(&c);
	c.max_io_bytes = 4096 + 512;
	CHECK_EQ(kvt_config_validate(&c, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "io.max_io_bytes"));
	kvt_config_default(&c);
	c.copy_gbps = -0.0;
	CHECK_EQ(kvt_config_validate(&c, err, sizeof(err)), -EINVAL);
	kvt_config_default(&c);
	strcpy(c.nvme_path, "/tmp/x\n");
	CHECK_EQ(kvt_config_validate(&c, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "nvme.path"));
	check_one_line(err);
	kvt_config_default(&c);
	memset(c.nvme_path, 'a', sizeof(c.nvme_path));	/* no NUL */
	CHECK_EQ(kvt_config_validate(&c, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "nvme.path"));
	kvt_config_default(&c);
	c.n_kv_heads = 0xffffffffu;
	CHECK_EQ(kvt_config_validate(&c, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "geometry.kv_heads"));
	CHECK_EQ(kvt_config_validate(NULL, err, sizeof(err)), -EINVAL);
}

/* print -> file -> load into defaults must give back the same bytes. */
static void round_trip(const struct kvt_config *a, const char *name)
{
	struct kvt_config b, a0;
	static char buf[16384];
	const char *p;
	int n;

	memcpy(&a0, a, sizeof(a0));
	a0.log = NULL;
	a0.log_arg = NULL;
	n = kvt_config_print(a, buf, sizeof(buf));
	CHECK(n > 0);
	CHECK_EQ((size_t)n, strlen(buf));
	p = write_file(name, buf);
	kvt_config_default(&b);
	b.log = log_nothing;	/* set, so the zeroing below is what makes them equal */
	b.log_arg = &b;
	if (kvt_config_load(&b, p, err, sizeof(err))) {
		fprintf(stderr, "round trip %s: %s\n%s", name, err, buf);
		exit(1);
	}
	b.log = NULL;
	b.log_arg = NULL;
	if (memcmp(&a0, &b, sizeof(b))) {
		static char buf2[16384];

		kvt_config_print(&b, buf2, sizeof(buf2));
		fprintf(stderr, "round trip %s differs:\n%s\n--- loaded:\n%s", name, buf, buf2);
		exit(1);
	}
}

static void test_print(void)
{
	struct kvt_config c;
	char small[64];
	int n;

	kvt_config_default(&c);
	round_trip(&c, "rt-default.ini");

	/* every field away from its default */
	set_ok(&c, "geometry.layers", "80");
	set_ok(&c, "geometry.kv_heads", "16");
	set_ok(&c, "geometry.head_dim", "256");
	set_ok(&c, "geometry.page_tokens", "64");
	set_ok(&c, "geometry.dtype", "f32");
	set_ok(&c, "tier.fast.bytes", "12345678M");
	set_ok(&c, "tier.fast.policy", "lfu:decay=0.25,window=8");
	set_ok(&c, "tier.fast.wm_min", "3");
	set_ok(&c, "tier.fast.wm_low", "7");
	set_ok(&c, "tier.fast.wm_high", "50");
	set_ok(&c, "tier.host.bytes", "1099511627776000");
	set_ok(&c, "tier.host.policy", "clock");
	set_ok(&c, "tier.nvme.bytes", "123456789");
	set_ok(&c, "tier.nvme.policy", "mru");
	set_ok(&c, "tier.nvme.wm_high", "9");
	set_ok(&c, "nvme.path", "/mnt/nvme 0/kv=cache;1");
	set_ok(&c, "nvme.direct", "on");
	set_ok(&c, "io.depth", "1");
	set_ok(&c, "io.max_io_bytes", "12K");
	set_ok(&c, "host.numa_node", "interleave");
	set_ok(&c, "host.hugepages", "off");
	set_ok(&c, "host.mlock", "on");
	set_ok(&c, "host.prefault_threads", "3");
	set_ok(&c, "access.host_in_place", "on");
	set_ok(&c, "access.prefetch_depth", "64");
	set_ok(&c, "device.name", "cuda");
	set_ok(&c, "device.copy_gbps", "0.1");
	c.log = log_nothing;
	c.log_arg = &c;
	CHECK_EQ(kvt_config_validate(&c, err, sizeof(err)), 0);
	round_trip(&c, "rt-all.ini");

	c.copy_gbps = 1.0 / 3.0;		/* needs all 17 digits */
	set_ok(&c, "host.numa_node", "5");
	set_ok(&c, "host.hugepages", "thp");
	set_ok(&c, "nvme.direct", "off");
	round_trip(&c, "rt-thirds.ini");

	/* a locale with a decimal comma must not leak into the file */
	if (setlocale(LC_NUMERIC, "de_DE.UTF-8") || setlocale(LC_NUMERIC, "fr_FR.UTF-8") ||
	    setlocale(LC_NUMERIC, "de_DE")) {
		set_ok(&c, "device.copy_gbps", "2.5");
		CHECK(c.copy_gbps == 2.5);
		round_trip(&c, "rt-locale.ini");
		setlocale(LC_NUMERIC, "C");
	} else {
		fprintf(stderr, "  (no decimal-comma locale here: that case not run)\n");
	}

	/* too small a buffer */
	n = kvt_config_print(&c, small, sizeof(small));
	CHECK_EQ(n, -ENOSPC);
	CHECK_EQ(kvt_config_print(&c, NULL, 0), -ENOSPC);
}

/* The example file at the repository root is the defaults, key for key
 * (the tests run from the repository root; elsewhere this part is left out). */
static void test_example(void)
{
	struct kvt_config a, b;

	if (access("kvt.ini.example", R_OK)) {
		fprintf(stderr, "  (kvt.ini.example not here: not checked)\n");
		return;
	}
	kvt_config_default(&a);
	memset(&b, 0, sizeof(b));
	kvt_config_default(&b);
	b.io_depth = 1;
	b.tier[KVT_TIER_NVME].bytes = 0;
	strcpy(b.tier[KVT_TIER_HOST].policy, "clock");
	if (kvt_config_load(&b, "kvt.ini.example", err, sizeof(err))) {
		fprintf(stderr, "kvt.ini.example: %s\n", err);
		exit(1);
	}
	CHECK(!memcmp(&a, &b, sizeof(a)));
}

static void note_key(void *arg, const char *key)
{
	char *seen = arg;

	strcat(seen, key);
	strcat(seen, " ");
}

/* kvt_config_load_keys names the keys a file sets, a value equal to the
 * default included, once each, and none when the load fails. */
static void test_load_keys(void)
{
	struct kvt_config c;
	char seen[512] = "";

	kvt_config_default(&c);
	CHECK_EQ(kvt_config_load_keys(&c, write_file("keys.ini", "[io]\ndepth = 64\n"
				      "[tier.fast]\nbytes = 1G\n[io]\ndepth = 8\n"),
				      note_key, seen, err, sizeof(err)), 0);
	CHECK(!strcmp(seen, "tier.fast.bytes io.depth "));
	CHECK_EQ(c.io_depth, 8);
	seen[0] = 0;
	CHECK(kvt_config_load_keys(&c, write_file("keys-bad.ini", "[tier.fast]\nbytes = 1G\n"
					"[io]\ndepth = 0\n"), note_key, seen, err, sizeof(err)) < 0);
	CHECK(!seen[0]);
	CHECK_EQ(kvt_config_load_keys(&c, tpath("keys.ini"), NULL, NULL, err, sizeof(err)), 0);
}

int main(void)
{
	const char *d = getenv("KVT_TEST_DIR");

	if (d && *d) {
		snprintf(dir, sizeof(dir), "%s", d);
	} else {
		strcpy(dir, "/tmp/kvt-t_config.XXXXXX");
		CHECK(mkdtemp(dir));
		own_dir = 1;
	}
	atexit(cleanup);
	test_defaults();
	test_set();
	test_bad_values();
	test_load_good();
	test_load_bad();
	test_validate();
	test_print();
	test_example();
	test_load_keys();
	return 0;
}
