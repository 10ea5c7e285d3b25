// The ring route (route.h; ARCHITECTURE.md "Context parallelism"): the ranks that share a
// sequence hold its chunks in the load-balanced causal split and all-gather their K/V. The
// slice lists chunks r and 2P-1-r of each sequence as two consecutive entries sharing a slot.
#pragma once
#include <vector>

#include "data/model_input.h"
#include "layers/attention/context_parallel.h"
#include "layers/attention/kv_buffer.h"
#include "layers/attention/routes/buffered_route.h"
#include "layers/attention/spec.h"

namespace driftless::layers {

// Rank r of P holds chunks r and 2P-1-r of each micro-sequence's 2P chunks of Lc rows (the
// load-balanced causal split): ModelInputs of SequencePart {i, m, chunk, 2P}.
struct RingSequence {
  const data::ModelInput* chunk[2] = {nullptr, nullptr};  // chunks r and 2P-1-r
  int64_t slot = 0;                                       // K/V buffer sequence
};
// q (T, H, D), k / v (T, H_kv, D): per sequence j, rows [j 2Lc, (j+1) 2Lc) hold its chunk r
// then its chunk 2P-1-r. Every rank's K/V chunks are all-gathered in one collective into the
// buffer (keys of later micro-sequences and of the backward); then each query chunk is ONE
// attention call over the buffer rows from the start of its first document (which may lie in
// an earlier chunk or micro-sequence) to its own end, bottom-right causal per document, as
// the SDP buffer route's call: no partial calls, no LSE merge, and the positions a modifier
// or mask sees are document positions. This is the all-gather form of context parallelism
// (Llama 3's) with the ring's load-balanced chunks: the compute was never overlapped with
// the chunk-by-chunk ring shifts well enough to pay for ~2P small calls and their merges
// (BENCHMARKS.md, the ring's phase timings). Backward: the same calls, dK/dV added into the
// buffer's gradient, and the micro-sequence's gradient rows reduce-scattered to their owners.
// base: score modifier (its learnable inputs get the sum of the calls' gradients), scale,
// determinism, left window; no bias tensor, no right window.
Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                      const std::vector<RingSequence>& sequences, KvBuffer& buffer, KvExchange& ex,
                      const AttentionSpec& base);

class RingRoute : public BufferedRoute {
 public:
  explicit RingRoute(KvExchange* exchange = nullptr) : exchange_(exchange) {}
  Tensor attend(const RouteCall& call, const Tensor& qkv) override;

 private:
  KvExchange* exchange_;  // nullptr: this rank alone
};

}  // namespace driftless::layers
