// CUDA bodies of the core device primitives (device_ops.h): host<->device transfers go
// through contiguous staging buffers; strided views and dtype conversion run as kernels.
#include "engine/core/device_ops.h"

#include <cstring>

#include "engine/core/cuda/check.h"
#include "engine/core/cuda/elementwise.cuh"
#include "engine/core/cuda/pinned_staging.h"

namespace driftless::cuda {

namespace {
StridedView view_of(const Tensor& t) {
  DL_CHECK(t.dim() <= kMaxDims, "cuda", "tensors of rank " << t.dim() << " exceed " << kMaxDims);
  StridedView v{};
  v.data = t.raw_data();
  v.dtype = t.dtype();
  v.rank = int(t.dim());
  for (int d = 0; d < v.rank; ++d) {
    v.shape[d] = t.shape()[d];
    v.strides[d] = t.strides()[d];
  }
  return v;
}
}  // namespace

bool built_with_cuda() { return true; }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string device_name() {
  if (device_count() == 0) return "";
  int d = 0;
  DL_CUDA_CHECK(cudaGetDevice(&d));
  cudaDeviceProp prop{};
  DL_CUDA_CHECK(cudaGetDeviceProperties(&prop, d));
  return prop.name;
}

void synchronize() { DL_CUDA_CHECK(cudaDeviceSynchronize()); }

void copy(const Tensor& dst, const Tensor& src) {
  const bool dst_gpu = dst.device() == Device::cuda, src_gpu = src.device() == Device::cuda;
  if (dst_gpu && src_gpu) return launch_copy(view_of(dst), view_of(src), dst.numel());
  if (dst_gpu) {
    // Host -> device: convert and compact on the host, one memcpy, then scatter if needed.
    // Small copies are asynchronous through pinned memory (no drain of the GPU's queue).
    Tensor staged = src.dtype() == dst.dtype() ? src.contiguous() : src.to(dst.dtype());
    auto upload = [&](void* to) {
      if (dst.nbytes() <= kStagingSlotBytes)
        copy_to_device_async(to, staged.raw_data(), dst.nbytes());
      else
        DL_CUDA_CHECK(cudaMemcpy(to, staged.raw_data(), dst.nbytes(), cudaMemcpyHostToDevice));
    };
    if (dst.is_contiguous()) return upload(dst.raw_data());
    Tensor dev = Tensor::empty(dst.shape(), dst.dtype(), Device::cuda);
    upload(dev.raw_data());
    return launch_copy(view_of(dst), view_of(dev), dst.numel());
  }
  // Device -> host: compact on the device, one memcpy, convert on the host.
  Tensor dev = src.contiguous();
  Tensor host = Tensor::empty(src.shape(), src.dtype(), Device::cpu);
  DL_CUDA_CHECK(cudaMemcpy(host.raw_data(), dev.raw_data(), src.nbytes(), cudaMemcpyDeviceToHost));
  dst.copy_(host);
}

void fill(const Tensor& dst, double value) { launch_fill(view_of(dst), value, dst.numel()); }

void add_(const Tensor& dst, const Tensor& src) {
  launch_add(view_of(dst), view_of(src), dst.numel());
}

bool add_units(const Tensor& dst, const Tensor& a, const Tensor& b) {
  for (const Tensor* t : {&dst, &a, &b})
    if (!t->is_contiguous() || reinterpret_cast<uintptr_t>(t->raw_data()) % 16 != 0) return false;
  const int64_t bytes = dst.numel() * int64_t(dtype_size(dst.dtype()));
  if (bytes % 16 != 0 || dtype_size(dst.dtype()) > 8) return false;
  launch_add3(view_of(dst), view_of(a), view_of(b), bytes / 16);
  return true;
}

}  // namespace driftless::cuda
