/* SPDX-License-Identifier: MIT */
/*
 * The GPU paths on the tests' emulated GPU (tests/emu_backend.c: device
 * memory the host cannot touch, copies and kernels that finish late):
 * every compute op against the cpu kernels, the pager's device paths bit
 * for bit, and the forward pass against the dense cpu reference. The same
 * checks run on a real GPU in t_cuda.
 */
#include "tests/backend_check.h"

int main(void)
{
	struct kvt_device *dev;
	char why[512];
	int r = kvt_device_open_why("emu", 0, &dev, why, sizeof(why));

	/* The device computes with the block types widened to f16: the cpu
	 * reference keeps f32 activations too (no integer dots). */
	kvt_cpu_set_int8_dots(0);

	if (r) {
		fprintf(stderr, "emu: %s (make tests builds libkvt-emu.so)\n", why);
		return 1;
	}
	bc_ops(dev, "emu");
	kvt_device_close(dev);
	bc_pager("emu");
	bc_decode("emu", 1e-4);
	bc_sessions("emu");

	/* A host tier the device could not register is copied up, not read
	 * in place (kernels could not reach it). */
	struct kvt_config cfg;
	struct kvt_pager *p;
	struct kvt_stats st;
	kvt_seq_t a;

	setenv("KVT_EMU_REGISTER_FAIL", "1", 1);
	t_config(&cfg, 2, 6, 40, 100);
	cfg.host_in_place = 1;
	p = t_open_dev(&cfg, "emu", &dev);
	CHECK_EQ(kvt_seq_open(p, &a), 0);
	t_append(p, a, &cfg, 3, 0, 60);
	CHECK_EQ(t_verify_seq(p, a, &cfg, 3, 0), 30);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK_EQ(st.host_in_place, 0);
	CHECK(st.tier[KVT_TIER_FAST].promotions > 0);
	CHECK_EQ(kvt_seq_close(p, a), 0);
	t_close(p, dev);
	unsetenv("KVT_EMU_REGISTER_FAIL");
	printf("emu   %-44s ok\n", "host tier not registered: copied up");
	return 0;
}
