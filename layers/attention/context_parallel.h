// Context parallelism over the ranks sharing a sequence, next to SDP's K/V
// all-gather (kv_buffer.h): ring attention with a load-balanced causal split, and Ulysses
// all-to-all. Both keep ARCHITECTURE.md's contracts ("Canonical varlen layout": canonical
// cu_seqlens per call, keys before first_document_begin never read; "K/V buffers": the
// per-layer buffer written slice by slice); the ring departs from "Who holds which tokens"
// in one way: rank r holds chunks r and 2P-1-r of 2P instead of chunk r of P.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "data/model_input.h"
#include "layers/attention/kv_buffer.h"
#include "layers/attention/spec.h"

namespace driftless::layers {

enum class ContextParallel { none, ring, a2a };

// "ring" or "a2a" (distributed.context_parallel.kind) with size > 1; none otherwise.
ContextParallel context_parallel_kind(const std::string& kind, int64_t size);

// The ring's load-balanced causal split: of a micro-sequence's 2P chunks, rank r holds
// chunks r and 2P-1-r (the one place this pairing is written).
inline std::array<int64_t, 2> ring_chunks(int64_t rank, int64_t P) {
  return {rank, 2 * P - 1 - rank};
}
// The rank holding chunk b of 2P.
inline int64_t ring_owner(int64_t chunk, int64_t P) {
  return chunk < P ? chunk : 2 * P - 1 - chunk;
}

// ---- a2a (Ulysses) ----
// qkv (T, (H + 2 H_kv) D): n sequences' local rows, T / n = L / P each (this rank's chunk of
// every micro-sequence, SDP's split) -> (n L, (H + 2 H_kv) D / P): each sequence's L rows in
// order with this rank's heads, q heads [r H/P, (r+1) H/P) then k and v heads
// [r H_kv/P, (r+1) H_kv/P). One all-to-all; one autograd node (backward: the inverse).
Tensor tokens_to_heads(const Tensor& qkv, int64_t sequences, int64_t heads, int64_t kv_heads,
                       KvExchange& ex);
// y (n L, H D / P) -> (T, H D): the attention output back to this rank's rows, all heads.
Tensor heads_to_tokens(const Tensor& y, int64_t sequences, KvExchange& ex);

// ---- ring ----
// Rank r of P holds chunks r and 2P-1-r of each micro-sequence's 2P chunks of Lc rows (the
// load-balanced causal split): ModelInputs of SliceSpec {i, m, chunk, 2P}.
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
// ring). base: score modifier, scale, determinism (no ALiBi: the partial calls do not know
// the token distance).
Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                      const std::vector<RingSequence>& sequences, KvBuffer& buffer, KvExchange& ex,
                      const AttentionSpec& base);

}  // namespace driftless::layers
