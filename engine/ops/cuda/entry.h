// DL_CUDA_ENTRY(declaration): declares a host function that a CUDA file of the ops defines
// (a kernel's launcher in a .cu, a cuBLAS call in a cuda/*.cpp). Without the CUDA backend the
// same line defines it as a function that throws, so the op files that call it build and link
// in a CPU-only build, where their device check (op_utils.h device_of) never reaches it.
#pragma once

#ifdef DRIFTLESS_HAVE_CUDA
#define DL_CUDA_ENTRY(...) __VA_ARGS__;
#else
#include "engine/core/error.h"

namespace driftless::ops::detail {
[[noreturn]] inline void no_cuda_backend(const char* function) {
  DL_FAIL(function,
          "no CUDA backend: this driftless was built without CUDA (configure with "
          "-DDRIFTLESS_CUDA=ON on a machine with nvcc)");
}
}  // namespace driftless::ops::detail

#define DL_CUDA_ENTRY(...)                               \
  inline __VA_ARGS__ {                                   \
    ::driftless::ops::detail::no_cuda_backend(__func__); \
  }
#endif
