// DL_HOST_DEVICE marks small functions (masks, score modifiers) that both the CPU kernels
// and the CUDA kernels call, so the two paths share one definition (ARCHITECTURE.md "Score
// modifiers": user functors with __host__ __device__ value and derivative).
#pragma once

#ifdef __CUDACC__
#define DL_HOST_DEVICE __host__ __device__
#else
#define DL_HOST_DEVICE
#endif
