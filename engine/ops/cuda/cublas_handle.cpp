// See cublas_handle.h.
#include "engine/ops/cuda/cublas_handle.h"

#include <array>
#include <memory>
#include <mutex>

#include "engine/core/cuda/check.h"

namespace driftless::ops::gpu {

namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;
constexpr int kMaxDevices = 64;

class CublasHandle {
 public:
  CublasHandle() {
    DL_CUBLAS_CHECK(cublasCreate(&handle_));
    DL_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
    DL_CUBLAS_CHECK(cublasSetAtomicsMode(handle_, CUBLAS_ATOMICS_NOT_ALLOWED));
    DL_CUBLAS_CHECK(cublasSetPointerMode(handle_, CUBLAS_POINTER_MODE_HOST));
    DL_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
    DL_CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_, kWorkspaceBytes));
  }
  ~CublasHandle() {
    // At process exit the driver may already be shutting down: ignore errors here.
    if (handle_) cublasDestroy(handle_);
    if (workspace_) cudaFree(workspace_);
  }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
};

}  // namespace

cublasHandle_t cublas_handle() {
  static std::mutex mutex;
  static std::array<std::unique_ptr<CublasHandle>, kMaxDevices> handles;
  int device = 0;
  DL_CUDA_CHECK(cudaGetDevice(&device));
  DL_CHECK(device >= 0 && device < kMaxDevices, "cublas",
           "device index " << device << " out of range");
  std::lock_guard<std::mutex> lock(mutex);
  auto& h = handles[size_t(device)];
  if (!h) h = std::make_unique<CublasHandle>();
  return h->get();
}

}  // namespace driftless::ops::gpu
