// The attention route: how a layer's attention gets the keys and values of its slice
// (ARCHITECTURE.md "Attention routes"). The model projects QKV, the route attends, the model
// projects what comes back; which K/V the queries see, through which buffer and over which
// ranks, is the route's alone.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "data/model_input.h"
#include "engine/core/tensor.h"
#include "layers/attention/spec.h"

namespace driftless::layers {

// One sequence of the micro-batch slice the model runs now: an entry of the step plan's
// forward (train/step_plan.h), whose inputs it shares with the copies that recompute keeps.
struct PartInput {
  std::shared_ptr<const data::ModelInput> input;
  int64_t slot = 0;             // which K/V buffer sequence it uses
  int64_t global_sequence = 0;  // index in the step's global batch (for tensor logs)
  // Context parallel a2a: the whole micro-sequence (SequencePart {i, m, 0, 1}), whose rows
  // this rank attends for its heads. Ring: the slice lists chunks r and 2P-1-r of each
  // sequence as two consecutive entries with the same slot. Null for the other routes.
  std::shared_ptr<const data::ModelInput> whole;
};

// The attention layers' shape: what a route needs to size its buffers and cut QKV.
struct AttentionShape {
  int64_t layers = 0;
  int64_t heads = 0;     // H
  int64_t kv_heads = 0;  // H_kv
  int64_t head_dim = 0;  // D
};

// One layer's call: everything but the QKV product.
struct RouteCall {
  int64_t layer = 0;
  const std::vector<PartInput>* slice = nullptr;
  AttentionShape shape;
  // The modifier of heads [h0, h0 + n) (softcap, or ALiBi slopes of those heads): routes
  // that attend a subset of the heads ask for theirs.
  std::function<ScoreModSpec(int64_t h0, int64_t n)> score_mod;
  bool deterministic = true;  // AttentionSpec::deterministic
  // Sliding window: a query at document position p sees keys p - window_left .. p
  // (AttentionSpec::window_left; -1 unbounded). Every route must honour it or refuse it.
  int64_t window_left = -1;
};

class AttentionRoute {
 public:
  virtual ~AttentionRoute() = default;
  // qkv (T, (H + 2 H_kv) D), the rows of the slice's sequences in order -> (T, H D).
  virtual Tensor attend(const RouteCall& call, const Tensor& qkv) = 0;
  // Per-layer K/V buffers for `slots` sequences of `sequence_length` tokens, allocated once
  // (routes without buffers keep none).
  virtual void prepare(const AttentionShape& shape, int64_t slots, int64_t sequence_length,
                       DType dtype, Device device) {}
  // Before a depth-first group's forwards: the K/V gradient buffers start from zero.
  virtual void zero_grads() {}
  virtual int64_t buffer_bytes() const { return 0; }
};

// ---- shared by the routes (slice_attention.cpp) ----
// The attention call of one sequence from its ModelInput (padding in FA3 convention:
// memory offsets in cu_seqlens_*, real lengths in seqused_*).
AttentionSpec spec_from_input(const data::ModelInput& in);
// The attention call of several sequences side by side: each part's documents, with its
// q rows after the previous parts' and its K extent (k_rows[i] rows) after theirs.
AttentionSpec merge_specs(const std::vector<AttentionSpec>& parts,
                          const std::vector<int64_t>& k_rows);
// q (T, H, D), k and v (T, H_kv, D) of the rows of qkv (T, (H + 2 H_kv) D).
struct QkvParts {
  Tensor q, k, v;
};
QkvParts split_qkv(const Tensor& qkv, int64_t heads, int64_t kv_heads, int64_t head_dim);

}  // namespace driftless::layers
