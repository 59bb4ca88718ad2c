/* SPDX-License-Identifier: MIT */
/*
 * One check for every CUDA and cuBLAS call of the plug-in: a failure is
 * logged through the device's log with the statement, file, line and the
 * error's name and text, and becomes -EIO (-ENOMEM for an allocation
 * that found no memory). Nothing here aborts: a device error fails the
 * call that met it, and the runtime ends the sessions of that step.
 */
#ifndef KVT_KERNELS_CUDA_CHECK_H
#define KVT_KERNELS_CUDA_CHECK_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "kernels/device.h"

static inline int cu_check(struct kvt_device *dev, cudaError_t e, const char *what,
			   const char *file, int line)
{
	if (e == cudaSuccess)
		return 0;
	kvt_dev_log(dev, KVT_LOG_ERROR, "cuda: %s:%d: %s: %s (%s)", file, line, what,
	       cudaGetErrorString(e), cudaGetErrorName(e));
	/* Reported now: consume it, or it stays this thread's last error and
	 * the next kernel launch on the thread (which reads cudaGetLastError)
	 * or cuBLAS call fails with it. A sticky error is not reset by this
	 * and keeps failing every later call, as it should. */
	(void)cudaGetLastError();
	return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

static inline int cublas_check(struct kvt_device *dev, cublasStatus_t s, const char *what,
			       const char *file, int line)
{
	if (s == CUBLAS_STATUS_SUCCESS)
		return 0;
	kvt_dev_log(dev, KVT_LOG_ERROR, "cublas: %s:%d: %s: %s (%d)", file, line, what,
	       cublasGetStatusString(s), (int)s);
	return s == CUBLAS_STATUS_ALLOC_FAILED ? -ENOMEM : -EIO;
}

/* CU(dev, call): 0 or -errno, the failure logged. */
#define CU(dev, call)	  cu_check((dev), (call), #call, __FILE__, __LINE__)
#define CUBLAS(dev, call) cublas_check((dev), (call), #call, __FILE__, __LINE__)

#endif
