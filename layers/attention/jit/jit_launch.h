// The fast attention's forward and backward for a user score expression on CUDA: the
// kernels compiled at run time (attention_program.h, through the process kernel cache) and
// launched by the driver with the geometry of the ahead-of-time launchers (fast_attention.h
// forward_with / backward_with). CUDA build only.
#pragma once
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

// What NVRTC compiles for on the current device: sm_90a on compute 9.0 (the wgmma kernels
// need the a), else sm_<major><minor>.
std::string device_arch();

}  // namespace driftless::layers::jit
