/* SPDX-License-Identifier: MIT */
/*
 * The fault.* keys (NVMe fault injection through the configuration).
 * Built with KVT_FAULTS (the sanitizer builds):
 *  - each key takes 0..1000000 and refuses anything else, naming the key;
 *  - kvt_config_print writes a [fault] section that loads back the same;
 *  - a pager opened with fault.flip = 1 spoils every NVMe read: a page
 *    pushed down to NVMe comes back -EIO, counted lost; with fault.short
 *    alone every page reads back bit-exact, the short reads retried;
 *  - the keys take effect at open only: kvt_pager_set refuses them.
 * Built without (a release build): every fault.* key is refused by
 * kvt_config_set and by an INI file with one line naming the key and the
 * build flag, a field set by hand is refused by kvt_config_validate and
 * kvt_pager_open, and nothing is printed for them.
 */
#include <errno.h>
#include <unistd.h>
#include "fault_common.h"

static const char *const keys[] = {
	"fault.eio", "fault.short", "fault.enospc", "fault.flip", "fault.slow_us",
};
#define NK (sizeof(keys) / sizeof(keys[0]))

static char ini[512];

static void write_ini(const char *text)
{
	snprintf(ini, sizeof(ini), "%s/fault-config.%d.ini", t_dir(), (int)getpid());
	FILE *f = fopen(ini, "w");
	CHECK(f);
	fputs(text, f);
	CHECK(fclose(f) == 0);
}

#ifdef KVT_FAULTS
/* Open a pager with cfg, fill one sequence, push it to NVMe, read it all
 * back: returns the pages that came back -EIO (the rest verified). */
static unsigned open_and_read(struct kvt_config *cfg, struct kvt_stats *st)
{
	struct kvt_device *dev;
	kvt_seq_t s;
	char err[256];
	unsigned seen;

	struct kvt_pager *p = fault_open_filled(cfg, &dev, &s, 5, 8);
	t_drain_to_nvme(p);
	CHECK_EQ(kvt_pager_set(p, "fault.eio", "0", err, sizeof(err)), -EPERM);
	CHECK(!strncmp(err, "fault.eio cannot change", 23));
	kvt_pager_step(p);
	seen = t_verify_seq(p, s, cfg, 5, 1);
	CHECK_EQ(kvt_pager_stats(p, st), 0);
	CHECK_EQ(kvt_seq_close(p, s), 0);
	t_close(p, dev);
	return 2 * 8 - seen;
}
#endif

int main(void)
{
	struct kvt_config cfg;
	char err[256], buf[16384];
	int n;

	kvt_config_default(&cfg);
#ifdef KVT_FAULTS
	struct kvt_config back;
	for (unsigned i = 0; i < NK; i++) {
		CHECK_EQ(kvt_config_set(&cfg, keys[i], "1000001", err, sizeof(err)), -EINVAL);
		CHECK(strstr(err, keys[i]) && strstr(err, "0..1000000"));
		CHECK_EQ(kvt_config_set(&cfg, keys[i], "-1", err, sizeof(err)), -EINVAL);
		char v[16];
		snprintf(v, sizeof(v), "%u", 3 + i);
		CHECK_EQ(kvt_config_set(&cfg, keys[i], v, err, sizeof(err)), 0);
	}
	CHECK_EQ(cfg.fault_eio, 3);
	CHECK_EQ(cfg.fault_short, 4);
	CHECK_EQ(cfg.fault_enospc, 5);
	CHECK_EQ(cfg.fault_flip, 6);
	CHECK_EQ(cfg.fault_slow_us, 7);
	CHECK_EQ(kvt_config_validate(&cfg, err, sizeof(err)), 0);
	n = kvt_config_print(&cfg, buf, sizeof(buf));
	CHECK(n > 0);
	CHECK(strstr(buf, "\n[fault]\neio = 3\nshort = 4\nenospc = 5\nflip = 6\nslow_us = 7\n"));
	write_ini(buf);
	kvt_config_default(&back);
	CHECK_EQ(kvt_config_load(&back, ini, err, sizeof(err)), 0);
	unlink(ini);
	CHECK(!memcmp(&back, &cfg, sizeof(cfg)));

	/* Every read has a bit flipped (writes are not touched, so the pages
	 * get down to NVMe): every page that comes up from there is lost. */
	struct kvt_stats st;
	t_config(&cfg, 2, 4, 4, 64);
	cfg.fault_flip = 1;
	unsigned lost = open_and_read(&cfg, &st);
	CHECK(lost >= 1);
	CHECK_EQ(st.lost_pages, lost);
	CHECK_EQ(st.csum_failures, lost);

	/* Short reads alone lose nothing. */
	t_config(&cfg, 2, 4, 4, 64);
	CHECK_EQ(kvt_config_set(&cfg, "fault.short", "1", err, sizeof(err)), 0);
	CHECK_EQ(open_and_read(&cfg, &st), 0);
	CHECK_EQ(st.lost_pages, 0);
	CHECK(st.short_ios >= 1);
	printf("fault.* accepted; fault.flip = 1 lost %u pages, fault.short = 1 retried %llu reads\n",
	       lost, (unsigned long long)st.short_ios);
#else
	struct kvt_config before = cfg;
	for (unsigned i = 0; i < NK; i++) {
		CHECK_EQ(kvt_config_set(&cfg, keys[i], "3", err, sizeof(err)), -EINVAL);
		CHECK(!strncmp(err, keys[i], strlen(keys[i])));
		CHECK(strstr(err, "-DKVT_FAULTS"));
		CHECK(!strchr(err, '\n'));
	}
	CHECK(!memcmp(&before, &cfg, sizeof(cfg)));
	/* An unknown key in the section stays an unknown key. */
	CHECK_EQ(kvt_config_set(&cfg, "fault.bogus", "3", err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "unknown key") && !strstr(err, "KVT_FAULTS"));

	write_ini("[io]\ndepth = 8\n[fault]\nflip = 9\n");
	CHECK_EQ(kvt_config_load(&cfg, ini, err, sizeof(err)), -EINVAL);
	unlink(ini);
	CHECK(strstr(err, ":4: fault.flip: ") && strstr(err, "-DKVT_FAULTS"));
	CHECK_EQ(cfg.io_depth, before.io_depth);

	cfg.fault_slow_us = 50;
	CHECK_EQ(kvt_config_validate(&cfg, err, sizeof(err)), -EINVAL);
	CHECK(!strncmp(err, "fault.slow_us = 50: ", 20) && strstr(err, "-DKVT_FAULTS"));
	struct kvt_config small;
	struct kvt_device *dev;
	struct kvt_pager *p;
	t_config(&small, 2, 4, 4, 64);
	small.fault_enospc = 2;
	CHECK_EQ(kvt_device_open("cpu", 0, &dev), 0);
	CHECK_EQ(kvt_pager_open(&small, dev, &p), -EINVAL);
	kvt_device_close(dev);

	cfg = before;
	n = kvt_config_print(&cfg, buf, sizeof(buf));
	CHECK(n > 0);
	CHECK(!strstr(buf, "[fault]") && !strstr(buf, "eio"));
	printf("fault.* refused: %s\n", err);
#endif
	return 0;
}
