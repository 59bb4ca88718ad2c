/* SPDX-License-Identifier: MIT */
/*
 * The CUDA backend on a real GPU: every kernel against the cpu kernels,
 * the pager's device paths bit for bit (copies both ways, device appends,
 * held batches, the host tier read in place through its mapping), and
 * tiered decode on the GPU against dense decode on the cpu. The checks
 * are t_emu's (tests/backend_check.h). Without the plug-in or a GPU it
 * exits 77 and says which.
 */
#include "tests/backend_check.h"

int main(void)
{
	struct kvt_device *dev;
	char why[512];
	int r = kvt_device_open_why("cuda", 0, &dev, why, sizeof(why));

	/* The GPU computes with the block types widened to f16: the cpu
	 * reference keeps f32 activations too (no integer dots). */
	kvt_cpu_set_int8_dots(0);

	if (r)
		SKIP("%s", why);
	struct kvt_device_info di;
	CHECK_EQ(kvt_device_info(dev, &di), 0);
	printf("cuda: %s; %.1f GiB; in place %.1f GB/s, copy up %.1f GB/s: host tier %s\n", di.desc,
	       di.mem_total / 1073741824.0, di.in_place_gbps, di.copy_up_gbps,
	       di.host_in_place ? "read in place" : "copied up");
	bc_ops(dev, "cuda");
	kvt_device_close(dev);
	bc_pager("cuda");
	/* f16, q8_0 and bf16 weights: the activations are rounded to f16 for
	 * cuBLAS, as llama.cpp's CUDA backend does; 2e-3 relative bounds
	 * what that does to the logits of these small models. */
	bc_decode("cuda", 2e-3);
	bc_sessions("cuda");
	return 0;
}
