// The ring route (route.h; ARCHITECTURE.md "Context parallelism"): K/V chunks passed around
// the ranks that share a sequence, with the load-balanced causal split. The slice lists
// chunks r and 2P-1-r of each sequence as two consecutive entries sharing a K/V slot.
#pragma once
#include <vector>

#include "data/model_input.h"
#include "layers/attention/context_parallel.h"
#include "layers/attention/kv_buffer.h"
#include "layers/attention/routes/route.h"
#include "layers/attention/spec.h"

namespace driftless::layers {

// Rank r of P holds chunks r and 2P-1-r of each micro-sequence's 2P chunks of Lc rows (the
// load-balanced causal split): ModelInputs of SequencePart {i, m, chunk, 2P}.
struct RingSequence {
  const data::ModelInput* chunk[2] = {nullptr, nullptr};  // chunks r and 2P-1-r
  int64_t slot = 0;                                       // K/V buffer sequence
};
// q (T, H, D), k / v (T, H_kv, D): per sequence j, rows [j 2Lc, (j+1) 2Lc) hold its chunk r
// then its chunk 2P-1-r. K/V chunks travel around the ring, each step's send overlapping the
// attention of the chunk at hand, and land in the buffer (keys of later micro-sequences and
// of the backward). Per query chunk: one causal call over its own rows, and one call per
// earlier chunk (and the past) that its first document reaches back into (only the first
// document of a chunk can), merged by LSE (lse_merge.h). Backward: the same calls with the
// merged out and LSE, dK/dV added into the buffer's gradient, and the micro-sequence's
// gradient rows reduce-scattered to their owners (same traffic as returning them around the
// ring). base: score modifier (its q and k are positions in the document in every call:
// AttentionSpec::first_doc_shift; its learnable inputs get the sum of the calls' gradients),
// scale, determinism; no bias tensor, no window.
Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                      const std::vector<RingSequence>& sequences, KvBuffer& buffer, KvExchange& ex,
                      const AttentionSpec& base);

class RingRoute : public AttentionRoute {
 public:
  explicit RingRoute(KvExchange* exchange = nullptr) : exchange_(exchange) {}
  Tensor attend(const RouteCall& call, const Tensor& qkv) override;
  void prepare(const AttentionShape& shape, int64_t slots, int64_t sequence_length, DType dtype,
               Device device) override;
  void zero_grads() override;
  int64_t buffer_bytes() const override;

 private:
  KvExchange* exchange_;  // nullptr: this rank alone
  std::vector<KvBuffer> buffers_;
};

}  // namespace driftless::layers
