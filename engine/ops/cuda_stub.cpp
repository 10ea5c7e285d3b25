// The CUDA op bodies (engine/ops/cuda/backend.h) when driftless is built without CUDA:
// every call explains the build. Unreachable through the ops, whose device check
// (op_utils.h device_of) already refuses cuda tensors in such a build.
#ifndef DRIFTLESS_HAVE_CUDA
#include "engine/ops/cuda/backend.h"
#include "engine/ops/cuda/cublaslt.h"

namespace driftless::ops::gpu {

namespace {
[[noreturn]] void no_cuda(const char* op) {
  DL_FAIL(op,
          "no CUDA backend: this driftless was built without CUDA (configure with "
          "-DDRIFTLESS_CUDA=ON on a machine with nvcc)");
}
}  // namespace

void gemm(DType, const void*, int64_t, int64_t, bool, int64_t, const void*, int64_t, int64_t, bool,
          int64_t, void*, int64_t) {
  no_cuda("matmul");
}
void gemm_f32_out(DType, const void*, int64_t, int64_t, bool, const void*, int64_t, int64_t, bool,
                  void*, bool, int64_t, int64_t, int64_t) {
  no_cuda("matmul");
}
bool lt_matmul(const LtMatmul&) {
  no_cuda("matmul");
}
int64_t lt_matmul_count(LtEpilogue) {
  return 0;
}
int64_t lt_matmul_with_c_count() { return 0; }
Tensor linear_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  no_cuda("linear");
}
std::vector<Tensor> linear_gelu_forward(const Tensor&, const Tensor&, const Tensor&) {
  no_cuda("linear_gelu");
}
void linear_param_grads(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  no_cuda("linear");
}
Tensor linear_dgelu_input_grad(const Tensor&, const Tensor&, const Tensor&) {
  no_cuda("mlp");
}
Tensor binary(Binary, const Tensor&, const Tensor&, const Shape&) {
  no_cuda("elementwise");
}
Tensor unary(Unary, const Tensor&, const Shape&, double) {
  no_cuda("elementwise");
}
Tensor gelu_backward(const Tensor&, const Tensor&) {
  no_cuda("gelu");
}
Tensor dropout(const Tensor&, double, uint64_t, const Tensor&, int64_t) {
  no_cuda("dropout");
}
Tensor sum_to(const Tensor&, const Shape&, double) {
  no_cuda("sum_to");
}
std::vector<Tensor> layer_norm_forward(const Tensor&, const Tensor&, const Tensor&, double) {
  no_cuda("layer_norm");
}
std::vector<Tensor> layer_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                        const Tensor&, bool, bool, const Tensor&, const Tensor&,
                                        const Tensor&) {
  no_cuda("layer_norm");
}
std::vector<Tensor> rms_norm_forward(const Tensor&, const Tensor&, double) {
  no_cuda("rms_norm");
}
std::vector<Tensor> rms_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                      bool, const Tensor&, const Tensor&) {
  no_cuda("rms_norm");
}
Tensor swiglu_forward(const Tensor&) {
  no_cuda("swiglu");
}
Tensor swiglu_backward(const Tensor&, const Tensor&) {
  no_cuda("swiglu");
}
Tensor rope(const Tensor&, const Tensor&, int64_t, int64_t, const std::vector<float>&, bool) {
  no_cuda("rope");
}
Tensor softmax_forward(const Tensor&, int64_t, bool) {
  no_cuda("softmax");
}
Tensor softmax_backward(const Tensor&, const Tensor&, int64_t, bool) {
  no_cuda("softmax");
}
std::vector<Tensor> cross_entropy_forward(const Tensor&, const Tensor&, const Tensor&,
                                          const Tensor&) {
  no_cuda("cross_entropy");
}
std::vector<Tensor> cross_entropy_backward(const Tensor&, const Tensor&, const Tensor&,
                                           const Tensor&, const Tensor&, bool,
                                           std::optional<DType>) {
  no_cuda("cross_entropy");
}
std::vector<Tensor> cross_entropy_forward_backward(const Tensor&, const Tensor&, const Tensor&,
                                                   const Tensor&, std::optional<DType>,
                                                   const Tensor&, const Tensor&) {
  no_cuda("cross_entropy");
}
Tensor embedding_forward(const Tensor&, const std::vector<int64_t>&, const Shape&) {
  no_cuda("embedding");
}
Tensor embedding_backward(const Tensor&, const std::vector<int64_t>&, const Shape&,
                          const Tensor&) {
  no_cuda("embedding");
}
void scaled_into(const Tensor&, const Tensor&, const Tensor&) {
  no_cuda("scaled_into");
}
double sum_squares(const Tensor&) {
  no_cuda("clip_grad_norm");
}
void scale_inplace(const Tensor&, double) {
  no_cuda("clip_grad_norm");
}

}  // namespace driftless::ops::gpu
#endif
