// Return-code checks for CUDA runtime and cuBLAS calls: a failure throws driftless::Error
// naming the call, the file:line and the library's own message (CONTRIBUTING.md "GPU code").
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "engine/core/error.h"

#define DL_CUDA_CHECK(expr)                                                             \
  do {                                                                                  \
    cudaError_t dl_err_ = (expr);                                                       \
    if (dl_err_ != cudaSuccess)                                                         \
      DL_FAIL("cuda", #expr << " failed at " << __FILE__ << ":" << __LINE__ << ": "     \
                            << cudaGetErrorString(dl_err_));                            \
  } while (0)

#define DL_CUBLAS_CHECK(expr)                                                           \
  do {                                                                                  \
    cublasStatus_t dl_st_ = (expr);                                                     \
    if (dl_st_ != CUBLAS_STATUS_SUCCESS)                                                \
      DL_FAIL("cublas", #expr << " failed at " << __FILE__ << ":" << __LINE__ << ": "   \
                              << cublasGetStatusString(dl_st_));                        \
  } while (0)

// After a kernel launch: the launch error always; in debug builds also synchronise so an
// asynchronous fault is reported at the launch that caused it.
#ifdef NDEBUG
#define DL_CUDA_LAUNCH_CHECK() DL_CUDA_CHECK(cudaGetLastError())
#else
#define DL_CUDA_LAUNCH_CHECK()                 \
  do {                                         \
    DL_CUDA_CHECK(cudaGetLastError());         \
    DL_CUDA_CHECK(cudaDeviceSynchronize());    \
  } while (0)
#endif
