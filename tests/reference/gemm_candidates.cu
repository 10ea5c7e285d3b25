// Times every candidate cuBLASLt's heuristic offers for each GEMM of a Llama-shaped training
// step (SmolLM2-135M at 16 x 2048 tokens by default), built with the descriptors that
// engine/ops/cuda/cublaslt.cpp uses (row-major out = op(a) op(b) as column-major out^T; bf16
// operands, fp32 accumulation; bf16 or fp32 output; the residual as a separate C; dW added into
// fp32 with beta = 1; the loss's logits in 2624-row chunks). Prints each candidate's time and
// tile, the heuristic's first choice against the fastest, and their sums over a step.
//   nvcc -O2 -std=c++17 -arch=sm_90a -o gemm_candidates tests/reference/gemm_candidates.cu -lcublasLt
//   ./gemm_candidates [tokens C qkv_width mlp_width layers]   (SmolLM2-360M at 8 x 2048:
//   ./gemm_candidates 16384 960 1600 2560 32)
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define CK(x)                                                               \
  do {                                                                      \
    auto e = (x);                                                           \
    if (int(e) != 0) {                                                      \
      std::printf("error %d at %s:%d\n", int(e), __FILE__, __LINE__);       \
      std::exit(1);                                                         \
    }                                                                       \
  } while (0)

struct Prob {
  std::string name;
  int64_t ra, ca;
  bool ta;
  int64_t rb, cb;
  bool tb;
  bool f32out;
  bool acc;
  bool sep_c;
  int64_t ldd;  // 0 = n
  int count;    // times per step
};

int main(int argc, char** argv) {
  const int64_t T = argc > 1 ? atoll(argv[1]) : 32768;
  const int64_t C = argc > 2 ? atoll(argv[2]) : 576;
  const int64_t QKV = argc > 3 ? atoll(argv[3]) : 960;
  const int64_t F = argc > 4 ? atoll(argv[4]) : 1536;
  const int64_t L = argc > 5 ? atoll(argv[5]) : 30;
  const int64_t V = 49152, CH = 2624, G = 2 * CH;
  std::vector<Prob> probs = {
      {"fwd_qkv", T, C, false, QKV, C, true, false, false, false, 0, int(L)},
      {"fwd_o+res", T, C, false, C, C, true, false, true, true, 0, int(L)},
      {"fwd_gateup", T, C, false, 2 * F, C, true, false, false, false, 0, int(L)},
      {"fwd_down+res", T, F, false, C, F, true, false, true, true, 0, int(L)},
      {"fwd_logits", CH, C, false, V, C, true, true, false, false, V, int((T + CH - 1) / CH)},
      {"dx_qkv", T, QKV, false, QKV, C, false, false, false, false, 0, int(L)},
      {"dx_o", T, C, false, C, C, false, false, false, false, 0, int(L)},
      {"dx_gateup", T, 2 * F, false, 2 * F, C, false, false, false, false, 0, int(L)},
      {"dx_down", T, C, false, C, F, false, false, false, false, 0, int(L)},
      {"dx_logits", G, V, false, V, C, false, true, false, false, 0, int((T + G - 1) / G)},
      {"dw_qkv", T, QKV, true, T, C, false, true, true, false, 0, int(L)},
      {"dw_o", T, C, true, T, C, false, true, true, false, 0, int(L)},
      {"dw_gateup", T, 2 * F, true, T, C, false, true, true, false, 0, int(L)},
      {"dw_down", T, C, true, T, F, false, true, true, false, 0, int(L)},
      {"dw_logits", G, V, true, G, C, false, true, true, false, 0, int((T + G - 1) / G)},
  };
  cublasLtHandle_t h;
  CK(cublasLtCreate(&h));
  const size_t ws_bytes = size_t(32) << 20;
  void* ws;
  CK(cudaMalloc(&ws, ws_bytes));
  const size_t big = size_t(512) << 20;
  void *A, *B, *D, *Cc;
  CK(cudaMalloc(&A, big));
  CK(cudaMalloc(&B, big));
  CK(cudaMalloc(&D, big));
  CK(cudaMalloc(&Cc, big));
  {
    std::vector<__nv_bfloat16> h(big / 2);
    for (size_t i = 0; i < h.size(); ++i) h[i] = __float2bfloat16((rand() % 2001 - 1000) * 1e-3f);
    CK(cudaMemcpy(A, h.data(), big, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(B, h.data(), big, cudaMemcpyHostToDevice));
    CK(cudaMemset(D, 0, big));
    CK(cudaMemcpy(Cc, h.data(), big, cudaMemcpyHostToDevice));
  }
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  double tot_def = 0, tot_best = 0;
  for (const Prob& p : probs) {
    const int64_t m = p.ta ? p.ca : p.ra, k = p.ta ? p.ra : p.ca, n = p.tb ? p.rb : p.cb;
    const cudaDataType_t out = p.f32out ? CUDA_R_32F : CUDA_R_16BF;
    cublasLtMatmulDesc_t desc;
    CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t opA = p.tb ? CUBLAS_OP_T : CUBLAS_OP_N, opB = p.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA)));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB)));
    cublasLtMatrixLayout_t la, lb, ld;
    const int64_t ldd = p.ldd ? p.ldd : n;
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, p.cb, p.rb, p.cb));
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, p.ca, p.ra, p.ca));
    CK(cublasLtMatrixLayoutCreate(&ld, out, n, m, ldd));
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t w = ws_bytes;
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w,
                                            sizeof(w)));
    const int want = 32;
    std::vector<cublasLtMatmulHeuristicResult_t> res(want);
    int found = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, want, res.data(), &found));
    const float alpha = 1, beta = p.acc ? 1 : 0;
    const void* cptr = p.sep_c ? Cc : D;
    double def = 0, best = 1e30;
    int besti = -1;
    std::printf("%s m=%ld n=%ld k=%ld x%d: %d candidates\n", p.name.c_str(), long(m), long(n),
                long(k), p.count, found);
    for (int i = 0; i < found; ++i) {
      auto run = [&] {
        return cublasLtMatmul(h, desc, &alpha, B, la, A, lb, &beta, cptr, ld, D, ld, &res[i].algo,
                              ws, ws_bytes, s);
      };
      if (run() != CUBLAS_STATUS_SUCCESS) continue;
      for (int r = 0; r < 3; ++r) run();
      const int reps = 20;
      CK(cudaEventRecord(e0, s));
      for (int r = 0; r < reps; ++r) run();
      CK(cudaEventRecord(e1, s));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      const double us = 1000.0 * ms / reps;
      int tile = 0, splitk = 0, stages = 0, cluster = 0, red = 0, swz = 0;
      size_t sz;
      cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                           sizeof(tile), &sz);
      cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                           sizeof(splitk), &sz);
      cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages,
                                           sizeof(stages), &sz);
      cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID,
                                           &cluster, sizeof(cluster), &sz);
      cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                           &red, sizeof(red), &sz);
      cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz,
                                           sizeof(swz), &sz);
      if (i < 8 || us < best)
        std::printf("  #%2d %8.1f us  %6.1f TF/s tile=%d splitk=%d red=%d stages=%d cluster=%d "
                    "swz=%d ws=%zu\n",
                    i, us, 2.0 * m * n * k / us * 1e-6, tile, splitk, red, stages, cluster, swz,
                    res[i].workspaceSize);
      if (i == 0) def = us;
      if (us < best) best = us, besti = i;
    }
    std::printf("  default %.1f us, best #%d %.1f us (%.3fx); per step %.2f -> %.2f ms\n", def,
                besti, best, def / best, def * p.count / 1000, best * p.count / 1000);
    tot_def += def * p.count / 1000, tot_best += best * p.count / 1000;
  }
  std::printf("TOTAL per step: default %.2f ms, best %.2f ms\n", tot_def, tot_best);
  return 0;
}
