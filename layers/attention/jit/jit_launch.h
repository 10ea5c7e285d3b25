// The fast attention's forward and backward for a user score expression on CUDA: the
// kernels compiled at run time (attention_program.h, through the process kernel cache) and
// launched by the driver with the geometry of the ahead-of-time launchers (fast_attention.h
// forward_with / backward_with). CUDA build only.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "layers/attention/cuda/fast/fast_attention.h"
#include "layers/attention/expr/expr.h"

namespace driftless::layers::jit {

// A score expression bound for one call: its tables as f32 device arrays (one per declared
// parameter) and the global head of the call's head 0. With learnable tables the backward
// also takes grad_acc, 2 param_count + 1 zeroed integers (the fixed-point sums,
// cuda/fast/param_grad.cuh), and writes d loss / d table entries to dparams (param_count
// f32, the flat gradient of the CPU's ExprMod::param_grad).
// mask: a mask expression over the same declarations (null: none); a mask alone runs with
// score = jit::identity_score(*mask).
struct BoundExpr {
  const expr::Program* score = nullptr;
  const expr::Program* mask = nullptr;
  std::vector<const float*> params;
  int head_offset = 0;
  unsigned long long* grad_acc = nullptr;
  float* dparams = nullptr;
  int64_t shift_q = 0, shift_k = 0;  // AttentionSpec::first_doc_shift (ModExpr q_shift, k_shift)
};

// fast::forward and fast::backward with the expression as the modifier (same arguments).
void forward(const gpu::Problem& p, const BoundExpr& e, const gpu::fast::Tile* tiles, int n_tiles,
             bool padded, void* out, float* lse);
void backward(const gpu::Problem& p, const BoundExpr& e, const gpu::fast::Tile* q_tiles,
              int n_q_tiles, const gpu::fast::Tile* k_tiles, int n_k_tiles, bool q_padded,
              bool k_padded, const void* out, const void* dout, const float* lse, float* delta,
              void* dq, void* dk, void* dv, gpu::fast::OutRows rows = {}, float* dq_acc = nullptr);

// The programs of one call, as forward() and backward() fetch them (prefetch): the score
// expression (null: the mask alone, run with identity_score(*mask), as the attention op does),
// the mask, the head dim, whether the call shifts document 0's positions (BoundExpr shift_q,
// shift_k not both 0) and its backward's mode (AttentionSpec::deterministic; false takes the
// atomic-dQ backward where the kernels have it).
struct ProgramUse {
  const expr::Program* score = nullptr;
  const expr::Program* mask = nullptr;
  int head_dim = 64;
  bool shifted = false;
  bool deterministic = true;
};

// Fetches the forward and backward programs of these calls through the process kernel cache
// (read from its disk, else compiled with NVRTC, then loaded on the current device), up to
// `threads` at a time: a caller that knows its calls ahead pays one program's compile time per
// `threads` programs instead of one per program at each first use (NVRTC compiles a program on
// one core). The calls then find them loaded, while they fit in the cache's capacity.
// DRIFTLESS_GRAD_RUNS is read as the calls read it. Rethrows the first failure after every
// fetch has ended. Returns the number of distinct programs fetched.
size_t prefetch(const std::vector<ProgramUse>& uses, int threads);

// What NVRTC compiles for on the current device: sm_90a on compute 9.0 (the wgmma kernels
// need the a), else sm_<major><minor>.
std::string device_arch();

}  // namespace driftless::layers::jit
