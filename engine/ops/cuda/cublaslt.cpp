// See cublaslt.h. Row-major out = op(a) op(b) is column-major out^T = op(b)^T op(a)^T, so
// cuBLASLt's A is our b and its B is our a; its M is our n (the bias runs along it, as the
// bias of a Linear runs along the output features) and its N our m.
#include "engine/ops/cuda/cublaslt.h"

#include <array>
#include <atomic>
#include <climits>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

#include "engine/core/cuda/check.h"
#include "engine/core/cuda/stream.h"
#include "engine/ops/cuda/cublas_handle.h"

namespace driftless::ops::gpu {

namespace {

// Distinct problems seen in a run are few (a handful per layer shape); the bound only
// keeps a pathological caller from growing the cache without limit.
constexpr size_t kMaxCachedAlgos = 4096;

std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}

// RAII for the descriptor objects of one call.
struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  ~MatmulDesc() {
    if (d) cublasLtMatmulDescDestroy(d);
  }
};
struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  ~Layout() {
    if (l) cublasLtMatrixLayoutDestroy(l);
  }
};
struct Preference {
  cublasLtMatmulPreference_t p = nullptr;
  ~Preference() {
    if (p) cublasLtMatmulPreferenceDestroy(p);
  }
};

cudaDataType_t cuda_type(DType t) {
  DL_CHECK(t == DType::f32 || t == DType::bf16, "cublaslt",
           "matmul takes f32 or bf16, got " << dtype_name(t));
  return t == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F;
}

// Largest power of two (up to 256, cuBLASLt's default assumption) dividing the address:
// row slices of a tensor are not 256-byte aligned, and the heuristic must know.
uint32_t alignment(const void* p) {
  uintptr_t v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

uint32_t stride_alignment(int64_t bytes) {
  uint32_t a = 256;
  while (a > 1 && bytes % a != 0) a /= 2;
  return a;
}

template <class T>
void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  DL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)));
}

std::array<std::atomic<int64_t>, kLtEpilogues> run_counts{};
std::atomic<int64_t> with_c_count{0};

using AlgoKey = std::tuple<int, int, int, int64_t, int64_t, int64_t, bool, bool, bool, int,
                           uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, int64_t, int64_t,
                           int64_t>;

}  // namespace

bool lt_matmul(const LtMatmul& p) {
  const int64_t m = p.ta ? p.ca : p.ra, k = p.ta ? p.ra : p.ca, n = p.tb ? p.rb : p.cb;
  if (m * n == 0) return true;
  if (k == 0) return false;  // the caller's path writes the zeros (or leaves d when accumulating)
  for (int64_t v : {m, n, k, p.ra, p.ca, p.rb, p.cb, p.lda, p.ldb, p.ldd})
    if (v > INT_MAX) return false;
  const bool has_aux = p.epilogue == LtEpilogue::gelu_aux_bias || p.epilogue == LtEpilogue::dgelu;
  if (has_aux && n % 8 != 0) return false;  // aux ld rule
  int device = 0;
  DL_CUDA_CHECK(cudaGetDevice(&device));
  const cudaDataType_t ab = cuda_type(p.ab), out = cuda_type(p.out);

  MatmulDesc desc;
  DL_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_attr(desc.d, CUBLASLT_MATMUL_DESC_TRANSA, int32_t(p.tb ? CUBLAS_OP_T : CUBLAS_OP_N));
  set_attr(desc.d, CUBLASLT_MATMUL_DESC_TRANSB, int32_t(p.ta ? CUBLAS_OP_T : CUBLAS_OP_N));
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  if (p.epilogue == LtEpilogue::bias) epi = CUBLASLT_EPILOGUE_BIAS;
  if (p.epilogue == LtEpilogue::gelu_aux_bias) epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  if (p.epilogue == LtEpilogue::dgelu) epi = CUBLASLT_EPILOGUE_DGELU;
  set_attr(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(epi));
  const bool has_bias = p.epilogue == LtEpilogue::bias || p.epilogue == LtEpilogue::gelu_aux_bias;
  if (has_bias) {
    set_attr(desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
    set_attr(desc.d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(out));
  }
  if (has_aux) {
    set_attr(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux);
    set_attr(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(n));
    set_attr(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, int32_t(out));
  }
  // Stored shapes in column-major terms: b (rb, cb) row-major is (cb, rb) column-major.
  Layout la, lb, ld;
  const int64_t lda = p.lda > 0 ? p.lda : p.ca, ldb = p.ldb > 0 ? p.ldb : p.cb,
                ldd = p.ldd > 0 ? p.ldd : n;
  DL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la.l, ab, uint64_t(p.cb), uint64_t(p.rb), ldb));
  DL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb.l, ab, uint64_t(p.ca), uint64_t(p.ra), lda));
  DL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld.l, out, uint64_t(n), uint64_t(m), ldd));

  // A row start is only as aligned as the pointer and the row stride in bytes allow.
  const int64_t sz_ab = int64_t(dtype_size(p.ab)), sz_out = int64_t(dtype_size(p.out));
  const uint32_t al_a = std::min(alignment(p.b), stride_alignment(ldb * sz_ab)),
                 al_b = std::min(alignment(p.a), stride_alignment(lda * sz_ab)),
                 al_d = std::min(alignment(p.d), stride_alignment(ldd * sz_out)),
                 al_c = p.c ? std::min(alignment(p.c), stride_alignment(ldd * sz_out)) : al_d;
  const uint32_t al_x = std::min(has_bias ? alignment(p.bias) : 256u,
                                 has_aux ? alignment(p.aux) : 256u);
  const AlgoKey key{device,       int(p.ab),       int(p.out), m,    n,    k,    p.ta, p.tb,
                    p.accumulate, int(p.epilogue), al_a,       al_b, al_c, al_d, al_x,
                    lda,          ldb,             ldd};
  static std::map<AlgoKey, std::optional<cublasLtMatmulAlgo_t>> cache;
  std::optional<cublasLtMatmulAlgo_t> algo;
  {
    std::lock_guard<std::mutex> lock(cache_mutex());
    auto it = cache.find(key);
    if (it != cache.end()) {
      algo = it->second;
      if (!algo) return false;
    }
  }
  if (!algo) {
    Preference pref;
    DL_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.p));
    const uint64_t ws = kGemmWorkspaceBytes;
    DL_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    const std::array<std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t>, 4> aligns{{
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, al_a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, al_b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, al_c},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, al_d},
    }};
    for (const auto& [attr, v] : aligns)
      DL_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, attr, &v, sizeof(v)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
        cublaslt_handle(), desc.d, la.l, lb.l, ld.l, ld.l, pref.p, 1, &result, &found);
    if (st == CUBLAS_STATUS_SUCCESS && found > 0) algo = result.algo;
    std::lock_guard<std::mutex> lock(cache_mutex());
    if (cache.size() >= kMaxCachedAlgos) cache.clear();
    cache[key] = algo;
    if (!algo) return false;
  }
  const float alpha = 1.0f, beta = p.accumulate ? 1.0f : 0.0f;
  DL_CUBLAS_CHECK(cublasLtMatmul(cublaslt_handle(), desc.d, &alpha, p.b, la.l, p.a, lb.l, &beta,
                                 p.c ? p.c : p.d, ld.l, p.d, ld.l, &*algo, gemm_workspace(),
                                 kGemmWorkspaceBytes, cuda::compute_stream()));
  ++run_counts[size_t(p.epilogue)];
  if (p.accumulate && p.c && p.c != p.d) ++with_c_count;
  return true;
}

int64_t lt_matmul_count(LtEpilogue epilogue) {
  return run_counts[size_t(epilogue)].load();
}

int64_t lt_matmul_with_c_count() { return with_c_count.load(); }

}  // namespace driftless::ops::gpu
