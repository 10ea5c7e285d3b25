// Row-major GEMMs on cuda. One matrix (the common case: every Linear) goes through
// cuBLASLt (cublaslt.h), which also fuses a Linear's bias, or its bias and GELU, into the
// product; batches, f64, and any problem cuBLASLt has no algorithm for go through
// cublasGemmStridedBatchedEx. Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T,
// so B goes first. f32 uses CUBLAS_COMPUTE_32F (no TF32: results stay close to the CPU),
// bf16 stores with fp32 accumulation, f64 in f64.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>

#include "engine/core/cuda/check.h"
#include "engine/core/cuda/stream.h"
#include "engine/ops/cuda/backend.h"
#include "engine/ops/cuda/cublas_handle.h"
#include "engine/ops/cuda/cublaslt.h"
#include "engine/ops/cuda/reduce.h"

namespace driftless::ops::gpu {

namespace {

cudaDataType_t cublas_type(DType dtype) {
  if (dtype == DType::bf16) return CUDA_R_16BF;
  if (dtype == DType::f64) return CUDA_R_64F;
  DL_CHECK(dtype == DType::f32, "matmul", "no cuda kernel for dtype " << dtype_name(dtype));
  return CUDA_R_32F;
}

// The cublas path: c = op(a) op(b) (+ c when accumulate), a and b of dtype ab, c of dtype cd.
void gemm_cublas(DType ab, DType cd, const void* a, int64_t ra, int64_t ca, bool ta,
                 int64_t stride_a, const void* b, int64_t rb, int64_t cb, bool tb, int64_t stride_b,
                 void* c, int64_t batch, bool accumulate, int64_t lda = 0, int64_t ldb = 0,
                 int64_t ldc = 0) {
  const int64_t m = ta ? ca : ra, k = ta ? ra : ca, n = tb ? rb : cb;
  for (int64_t v : {m, n, k, ra, ca, rb, cb, batch})
    DL_CHECK(v <= INT_MAX, "matmul", "dimension " << v << " exceeds cuBLAS's int range");
  const cublasComputeType_t compute = ab == DType::f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  const float alpha_f = 1.0f, beta_f = accumulate ? 1.0f : 0.0f;
  const double alpha_d = 1.0, beta_d = accumulate ? 1.0 : 0.0;
  const void* alpha = ab == DType::f64 ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = ab == DType::f64 ? static_cast<const void*>(&beta_d) : &beta_f;
  // k == 0: beta = 0 makes cuBLAS write zeros.
  DL_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      cublas_handle(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, int(n),
      int(m), int(k), alpha, b, cublas_type(ab), int(std::max<int64_t>(ldb > 0 ? ldb : cb, 1)),
      stride_b, a, cublas_type(ab), int(std::max<int64_t>(lda > 0 ? lda : ca, 1)), stride_a, beta,
      c, cublas_type(cd), int(ldc > 0 ? ldc : n), m * n, int(batch), compute, CUBLAS_GEMM_DEFAULT));
}

void check_linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  DL_CHECK(x.is_contiguous() && w.is_contiguous() && (!bias.defined() || bias.is_contiguous()),
           "linear", "cuda linear takes contiguous x, weight and bias");
  DL_CHECK(x.dtype() == w.dtype() && (!bias.defined() || bias.dtype() == x.dtype()), "linear",
           "x, weight and bias must share a dtype, got " << dtype_name(x.dtype()) << ", "
                                                         << dtype_name(w.dtype()));
}

// x (N, in) w^T (w (out, in)) into y (N, out), with the bias epilogue or gelu_aux_bias.
LtMatmul linear_problem(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                        LtEpilogue epilogue) {
  LtMatmul p;
  p.ab = p.out = x.dtype();
  p.a = x.raw_data(), p.ra = x.size(0), p.ca = x.size(1);
  p.b = w.raw_data(), p.rb = w.size(0), p.cb = w.size(1), p.tb = true;
  p.d = y.raw_data();
  p.epilogue = epilogue;
  p.bias = bias.defined() ? bias.raw_data() : nullptr;
  return p;
}

}  // namespace

void gemm(DType dtype, const void* a, int64_t ra, int64_t ca, bool ta, int64_t stride_a,
          const void* b, int64_t rb, int64_t cb, bool tb, int64_t stride_b, void* c,
          int64_t batch) {
  const int64_t m = ta ? ca : ra, n = tb ? rb : cb;
  if (m * n * batch == 0) return;
  cublas_type(dtype);  // rejects a dtype without a kernel
  if (batch == 1 && dtype != DType::f64) {
    LtMatmul p;
    p.ab = p.out = dtype;
    p.a = a, p.ra = ra, p.ca = ca, p.ta = ta;
    p.b = b, p.rb = rb, p.cb = cb, p.tb = tb;
    p.d = c;
    if (lt_matmul(p)) return;
  }
  gemm_cublas(dtype, dtype, a, ra, ca, ta, stride_a, b, rb, cb, tb, stride_b, c, batch, false);
}

namespace {

// One fp32-output product on already-resolved strides (see gemm_f32_out).
void gemm_f32_out_one(DType ab, const void* a, int64_t ra, int64_t ca, bool ta, const void* b,
                      int64_t rb, int64_t cb, bool tb, void* c, bool accumulate, int64_t lda,
                      int64_t ldb, int64_t ldc) {
  LtMatmul p;
  p.ab = ab;
  p.out = DType::f32;
  p.a = a, p.ra = ra, p.ca = ca, p.ta = ta;
  p.b = b, p.rb = rb, p.cb = cb, p.tb = tb;
  p.d = c;
  p.lda = lda, p.ldb = ldb, p.ldd = ldc;
  p.accumulate = accumulate;
  if (lt_matmul(p)) return;
  gemm_cublas(ab, DType::f32, a, ra, ca, ta, 0, b, rb, cb, tb, 0, c, 1, accumulate, lda, ldb, ldc);
}

}  // namespace

void gemm_f32_out(DType ab, const void* a, int64_t ra, int64_t ca, bool ta, const void* b,
                  int64_t rb, int64_t cb, bool tb, void* c, bool accumulate, int64_t lda,
                  int64_t ldb, int64_t ldc) {
  const int64_t m = ta ? ca : ra, k = ta ? ra : ca, n = tb ? rb : cb;
  DL_CHECK(ab == DType::f32 || ab == DType::bf16, "matmul",
           "fp32-output product takes f32 or bf16 operands, got " << dtype_name(ab));
  if (m * n == 0) return;
  lda = lda > 0 ? lda : ca, ldb = ldb > 0 ? ldb : cb, ldc = ldc > 0 ? ldc : n;
  if (k == 0) {
    if (!accumulate)
      DL_CUDA_CHECK(cudaMemset2DAsync(c, size_t(ldc) * sizeof(float), 0, size_t(n) * sizeof(float),
                                      size_t(m), cuda::compute_stream()));
    return;
  }
  // A dim that is not a multiple of 8 (GPT-2's vocabulary, 50257) makes cuBLAS take
  // byte-aligned kernels for the whole product, several times slower. So the product runs
  // on the largest multiple of 8 of each such dim, and the few leftover rows, columns or
  // contraction terms (k: accumulated on top) as small separate products.
  // The sub-block [i0, i0+mi) x [j0, j0+nj) over contraction terms [l0, l0+kl):
  const size_t esz = dtype_size(ab);
  auto part = [&](int64_t i0, int64_t mi, int64_t j0, int64_t nj, int64_t l0, int64_t kl,
                  bool acc) {
    if (mi == 0 || nj == 0 || kl == 0) return;
    const char* pa = static_cast<const char*>(a) + esz * size_t(ta ? l0 * lda + i0 : i0 * lda + l0);
    const char* pb = static_cast<const char*>(b) + esz * size_t(tb ? j0 * ldb + l0 : l0 * ldb + j0);
    float* pc = static_cast<float*>(c) + i0 * ldc + j0;
    gemm_f32_out_one(ab, pa, ta ? kl : mi, ta ? mi : kl, ta, pb, tb ? nj : kl, tb ? kl : nj, tb, pc,
                     acc, lda, ldb, ldc);
  };
  auto cut = [](int64_t d) { return d >= 64 && d % 8 != 0 ? d / 8 * 8 : d; };
  const int64_t m8 = cut(m), n8 = cut(n), k8 = cut(k);
  for (auto [i0, mi] : {std::pair{int64_t(0), m8}, std::pair{m8, m - m8}})
    for (auto [j0, nj] : {std::pair{int64_t(0), n8}, std::pair{n8, n - n8}}) {
      part(i0, mi, j0, nj, 0, k8, accumulate);
      part(i0, mi, j0, nj, k8, k - k8, true);
    }
}

Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                      const Tensor& residual) {
  check_linear(x, w, bias);
  const int64_t rows = x.size(0), in = x.size(1), out = w.size(0);
  DL_CHECK(!residual.defined() || (residual.is_contiguous() && residual.dtype() == x.dtype() &&
                                   residual.shape() == Shape({rows, out})),
           "linear", "the residual must be contiguous (" << rows << ", " << out << ") "
                                                         << dtype_name(x.dtype()));
  Tensor y = Tensor::empty({rows, out}, x.dtype(), Device::cuda);  // (N, out)
  if (y.numel() == 0) return y;
  // The bias rides in cuBLASLt's epilogue and the residual in its C operand (beta = 1): one
  // pass over the output. A Llama projection has a residual but no bias.
  if ((bias.defined() || residual.defined()) && in > 0 && x.dtype() != DType::f64) {
    LtMatmul p = linear_problem(x, w, bias, y, bias.defined() ? LtEpilogue::bias : LtEpilogue::none);
    if (residual.defined()) {
      p.accumulate = true;
      p.c = residual.raw_data();
    }
    if (lt_matmul(p)) return y;
  }
  if (in == 0)
    y.zero_();
  else
    gemm(x.dtype(), x.raw_data(), rows, in, false, 0, w.raw_data(), out, in, true, 0, y.raw_data(),
         1);
  if (bias.defined()) y = binary(Binary::add, y, bias, y.shape());
  return residual.defined() ? binary(Binary::add, y, residual, y.shape()) : y;
}

std::vector<Tensor> linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor& bias) {
  check_linear(x, w, bias);
  const int64_t rows = x.size(0), in = x.size(1), out = w.size(0);
  // GELU_AUX_BIAS only in bf16, where it pays (the pre-activation is written by the GEMM,
  // saving a read and a write of (N, out)). fp32 is the mode that must stay within 1e-4 of
  // the CPU run, and it keeps the gelu kernel that matches the CPU to 2e-6 rather than rely
  // on how cuBLASLt evaluates tanh; its SIMT fp32 GEMM dwarfs the saved pass anyway.
  if (bias.defined() && in > 0 && rows * out > 0 && x.dtype() == DType::bf16) {
    Tensor y = Tensor::empty({rows, out}, x.dtype(), Device::cuda);    // (N, out)
    Tensor pre = Tensor::empty({rows, out}, x.dtype(), Device::cuda);  // (N, out)
    LtMatmul p = linear_problem(x, w, bias, y, LtEpilogue::gelu_aux_bias);
    p.aux = pre.raw_data();
    if (lt_matmul(p)) return {y, pre};
  }
  Tensor pre = linear_forward(x, w, bias);
  return {unary(Unary::gelu, pre, pre.shape()), pre};
}

void linear_param_grads(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) {
  const int64_t rows = dy.size(0), out = dy.size(1), in = x.size(1);
  DL_CHECK(dy.is_contiguous() && x.is_contiguous() && x.size(0) == rows && dy.dtype() == x.dtype() &&
               (dy.dtype() == DType::f32 || dy.dtype() == DType::bf16),
           "linear", "parameter gradients take contiguous dy and x of one dtype, f32 or bf16");
  DL_CHECK(dw.dtype() == DType::f32 && dw.is_contiguous() && dw.shape() == Shape({out, in}) &&
               (!db.defined() || (db.dtype() == DType::f32 && db.shape() == Shape({out}))),
           "linear", "parameter gradients accumulate into contiguous f32 dw (out, in) and db (out)");
  if (rows == 0 || dw.numel() == 0) return;
  gemm_f32_out(dy.dtype(), dy.raw_data(), rows, out, true, x.raw_data(), rows, in, false,
               dw.raw_data(), true);
  if (db.defined()) {
    Tensor scratch = Tensor::empty({bias_grad_chunks(rows) * out}, DType::f32, Device::cuda);
    launch_bias_grad(dy.dtype(), dy.raw_data(), rows, out, db.data<float>(), scratch.data<float>());
  }
}

Tensor linear_dgelu_input_grad(const Tensor& dy, const Tensor& w, const Tensor& pre) {
  const int64_t rows = dy.size(0), out = w.size(0), in = w.size(1);
  if (dy.dtype() != DType::bf16 || w.dtype() != DType::bf16 || pre.dtype() != DType::bf16 ||
      !dy.is_contiguous() || !w.is_contiguous() || !pre.is_contiguous() || rows * in * out == 0 ||
      pre.shape() != Shape{rows, in} || dy.size(1) != out)
    return Tensor();
  Tensor dpre = Tensor::empty({rows, in}, DType::bf16, Device::cuda);
  LtMatmul p;
  p.ab = p.out = DType::bf16;
  p.a = dy.raw_data(), p.ra = rows, p.ca = out;
  p.b = w.raw_data(), p.rb = out, p.cb = in;
  p.d = dpre.raw_data();
  p.epilogue = LtEpilogue::dgelu;
  p.aux = pre.raw_data();
  return lt_matmul(p) ? dpre : Tensor();
}

}  // namespace driftless::ops::gpu
