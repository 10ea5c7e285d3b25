// Kernel launches with programmatic dependent launch (PDL, sm_90 and later). A kernel
// launched through cuda::launch may be placed on the GPU while the kernel before it on the
// stream still runs: its blocks are resident when that one ends, instead of being launched
// only then (the gap between two dependent kernels; a GPT-2 step runs ~490 of them).
//
// The contract of a kernel launched here: its first statement is dependent_kernel_begin(),
// which returns once every earlier kernel of the stream has finished and its writes are
// visible (griddepcontrol.wait), and then lets the next launch be placed as soon as all of
// this kernel's blocks are placed (griddepcontrol.launch_dependents: the next kernel's
// blocks take only room this one no longer needs, and wait in their own begin). Launched
// plainly, both instructions do nothing, so a kernel may be launched either way.
//
// DRIFTLESS_PDL=0 in the environment launches plainly (for A/B timing); so do devices before sm_90,
// and so does any kernel whose code was not compiled for sm_90 or later: a build for sm_80
// only (or an sm_90a build on a newer GPU) runs JIT-compiled compute_80 code, in which
// dependent_kernel_begin() is empty, so that code must not be launched early.
#pragma once
#ifndef __CUDACC_RTC__  // NVRTC (the run-time compiled kernels) takes the device part only
#include <cuda_runtime.h>

#include <utility>

#include "engine/core/cuda/check.h"
#include "engine/core/cuda/stream.h"
#endif

namespace driftless::cuda {

__device__ __forceinline__ void dependent_kernel_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

#ifndef __CUDACC_RTC__
// kernel<<<grid, block, smem, compute_stream()>>>(args...), with PDL where enabled. The
// kernel must begin with dependent_kernel_begin() (see the file comment).
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = compute_stream();
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = use_dependent_launch(reinterpret_cast<const void*>(kernel)) ? 1 : 0;
  DL_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}
#endif

}  // namespace driftless::cuda
