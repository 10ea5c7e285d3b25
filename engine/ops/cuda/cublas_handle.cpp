// See cublas_handle.h.
#include "engine/ops/cuda/cublas_handle.h"

#include <array>
#include <memory>
#include <mutex>

#include "engine/core/cuda/check.h"

namespace driftless::ops::gpu {

namespace {

constexpr int kMaxDevices = 64;

class Handles {
 public:
  Handles() {
    DL_CUBLAS_CHECK(cublasCreate(&blas_));
    DL_CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
    DL_CUBLAS_CHECK(cublasSetAtomicsMode(blas_, CUBLAS_ATOMICS_NOT_ALLOWED));
    DL_CUBLAS_CHECK(cublasSetPointerMode(blas_, CUBLAS_POINTER_MODE_HOST));
    DL_CUDA_CHECK(cudaMalloc(&workspace_, kGemmWorkspaceBytes));
    DL_CUBLAS_CHECK(cublasSetWorkspace(blas_, workspace_, kGemmWorkspaceBytes));
    DL_CUBLAS_CHECK(cublasLtCreate(&lt_));
  }
  ~Handles() {
    // At process exit the driver may already be shutting down: ignore errors here.
    if (lt_) cublasLtDestroy(lt_);
    if (blas_) cublasDestroy(blas_);
    if (workspace_) cudaFree(workspace_);
  }
  Handles(const Handles&) = delete;
  Handles& operator=(const Handles&) = delete;
  cublasHandle_t blas() const { return blas_; }
  cublasLtHandle_t lt() const { return lt_; }
  void* workspace() const { return workspace_; }

 private:
  cublasHandle_t blas_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
};

const Handles& handles() {
  static std::mutex mutex;
  static std::array<std::unique_ptr<Handles>, kMaxDevices> per_device;
  int device = 0;
  DL_CUDA_CHECK(cudaGetDevice(&device));
  DL_CHECK(device >= 0 && device < kMaxDevices, "cublas",
           "device index " << device << " out of range");
  std::lock_guard<std::mutex> lock(mutex);
  auto& h = per_device[size_t(device)];
  if (!h) h = std::make_unique<Handles>();
  return *h;
}

}  // namespace

cublasHandle_t cublas_handle() {
  return handles().blas();
}

cublasLtHandle_t cublaslt_handle() {
  return handles().lt();
}

void* gemm_workspace() {
  return handles().workspace();
}

}  // namespace driftless::ops::gpu
