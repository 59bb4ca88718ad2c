// SPDX-License-Identifier: MIT
//
// copy-probe: ways to move many page-sized pieces between pinned host
// memory and a GPU, against one copy of the whole buffer, in one run.
// It measured what a batched copy path would gain over the pager's copy
// path as it was (a cudaMemcpyAsync and an event a page, one stream a
// direction), before cuda_device.c gathered copies into batches;
// docs/benchmarks.md, "Small copies on the GPU", has its figures. `make
// cuda` builds it:
//
//   build/copy-probe [total MiB, 1024] [repeats, 5]
//
// The pieces go to (come from) the device in a shuffled order, as the
// pager's frames do. Ways, each timed from the first call to the end of
// a synchronisation, median of the repeats, alternating with the rest:
//
//   event-each   a cudaMemcpyAsync and a cudaEventRecord a piece (the
//                pager's path until it gathered copies into batches)
//   no-events    a cudaMemcpyAsync a piece, no events
//   streams4     as event-each, the pieces dealt round four streams
//   batch64      cudaMemcpyBatchAsync of 64 pieces and an event a batch
//                (what cuda_device.c does now while a stream is busy)
//   kernel64     one kernel a 64 pieces, the SMs reading (writing) the
//                host memory in place through its mapping, an event a batch
//   one-copy     one cudaMemcpyAsync of the whole buffer: the reference
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <random>
#include <vector>

#define CK(x)                                                                           \
	do {                                                                            \
		cudaError_t e_ = (x);                                                   \
		if (e_ != cudaSuccess) {                                                \
			fprintf(stderr, "copy-probe: %s: %s\n", #x, cudaGetErrorString(e_)); \
			exit(1);                                                        \
		}                                                                       \
	} while (0)

#define NEV	1024
#define BATCH	64

struct piece {
	const uint4 *src;
	uint4 *dst;
	size_t n;	// uint4s
};

static __global__ void gather(const piece *p)
{
	const piece q = p[blockIdx.y];

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < q.n;
	     i += (size_t)gridDim.x * blockDim.x)
		q.dst[i] = q.src[i];
}

static double now()
{
	return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
		.count();
}

int main(int argc, char **argv)
{
	const size_t total = (argc > 1 ? strtoull(argv[1], 0, 10) : 1024) << 20;
	const int reps = argc > 2 ? atoi(argv[2]) : 5;
	const size_t sizes[] = { 64 << 10, 256 << 10, 1 << 20, 4 << 20 };
	const char *ways[] = { "one-copy", "event-each", "no-events", "streams4", "batch64",
			       "kernel64" };
	const int nways = 6;
	uint8_t *host, *dev;
	cudaStream_t st[4];
	cudaEvent_t ev[NEV];
	piece *pc_host, *pc_dev;
	cudaDeviceProp prop;
	int sms;

	CK(cudaGetDeviceProperties(&prop, 0));
	sms = prop.multiProcessorCount;
	CK(cudaHostAlloc((void **)&host, total, cudaHostAllocMapped | cudaHostAllocPortable));
	CK(cudaMalloc((void **)&dev, total));
	memset(host, 1, total);
	CK(cudaMemset(dev, 2, total));
	for (int i = 0; i < 4; i++)
		CK(cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking));
	for (int i = 0; i < NEV; i++)
		CK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
	CK(cudaHostAlloc((void **)&pc_host, (total / sizes[0]) * sizeof(piece), 0));
	CK(cudaMalloc((void **)&pc_dev, (total / sizes[0]) * sizeof(piece)));
	printf("copy-probe: %s, %d SMs, %zu MiB a pass, %d repeats, %d copy engines\n", prop.name, sms,
	       total >> 20, reps, prop.asyncEngineCount);
	printf("%-8s %-4s %-11s %9s %7s\n", "size", "dir", "way", "GB/s", "ratio");

	std::mt19937 rng(1);
	for (size_t sz : sizes) {
		const size_t n = total / sz;
		std::vector<size_t> perm(n);

		for (size_t i = 0; i < n; i++)
			perm[i] = i;
		std::shuffle(perm.begin(), perm.end(), rng);
		for (int dir = 0; dir < 2; dir++) {
			// dir 0: host -> device, 1: device -> host
			std::vector<double> t[6];
			auto src_of = [&](size_t i) {
				return dir ? dev + perm[i] * sz : host + i * sz;
			};
			auto dst_of = [&](size_t i) {
				return dir ? host + i * sz : dev + perm[i] * sz;
			};

			for (size_t i = 0; i < n; i++)
				pc_host[i] = piece{ (const uint4 *)src_of(i), (uint4 *)dst_of(i), sz / 16 };
			CK(cudaMemcpy(pc_dev, pc_host, n * sizeof(piece), cudaMemcpyHostToDevice));
			for (int r = 0; r < reps; r++) {
				for (int w = 0; w < nways; w++) {
					double t0 = now();

					switch (w) {
					case 0:
						CK(cudaMemcpyAsync(dir ? host : dev, dir ? dev : host, n * sz,
								   cudaMemcpyDefault, st[0]));
						break;
					case 1:
					case 2:
					case 3:
						for (size_t i = 0; i < n; i++) {
							cudaStream_t s = st[w == 3 ? i % 4 : 0];

							CK(cudaMemcpyAsync(dst_of(i), src_of(i), sz,
									   cudaMemcpyDefault, s));
							if (w != 2)
								CK(cudaEventRecord(ev[i % NEV], s));
						}
						break;
					case 4: {
						void *d[BATCH], *s[BATCH];
						size_t z[BATCH], idx = 0;
						cudaMemcpyAttributes at = {};

						at.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
						for (size_t i = 0; i < n; i += BATCH) {
							size_t m = std::min((size_t)BATCH, n - i);

							for (size_t k = 0; k < m; k++) {
								d[k] = dst_of(i + k);
								s[k] = (void *)src_of(i + k);
								z[k] = sz;
							}
							CK(cudaMemcpyBatchAsync(d, s, z, m, &at, &idx, 1, st[0]));
							CK(cudaEventRecord(ev[(i / BATCH) % NEV], st[0]));
						}
						break;
					}
					case 5: {
						unsigned bx = (unsigned)std::max<size_t>(
							1, std::min<size_t>(sz / 16 / 256, 8));

						for (size_t i = 0; i < n; i += BATCH) {
							unsigned m = (unsigned)std::min((size_t)BATCH, n - i);

							gather<<<dim3(bx, m), 256, 0, st[0]>>>(pc_dev + i);
							CK(cudaEventRecord(ev[(i / BATCH) % NEV], st[0]));
						}
						CK(cudaGetLastError());
						break;
					}
					}
					CK(cudaDeviceSynchronize());
					t[w].push_back(now() - t0);
				}
			}
			double ref = 0;
			for (int w = 0; w < nways; w++) {
				std::sort(t[w].begin(), t[w].end());
				double gbps = (double)(n * sz) / t[w][t[w].size() / 2] / 1e9;

				if (w == 0)
					ref = gbps;
				printf("%-8zu %-4s %-11s %9.2f %7.3f\n", sz, dir ? "d2h" : "h2d", ways[w], gbps,
				       gbps / ref);
			}
			fflush(stdout);
		}
	}
	return 0;
}
