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

	if (r) {
		fprintf(stderr, "emu: %s (make tests builds libkvt-emu.so)\n", why);
		return 1;
	}
	bc_ops(dev, "emu");
	kvt_device_close(dev);
	bc_pager("emu");
	bc_decode("emu", 1e-4);
	bc_sessions("emu");
	return 0;
}
