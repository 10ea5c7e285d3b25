// ModelInput: what one (sequence, micro-sequence, sdp rank) hands to the model. Implements
// ARCHITECTURE.md "Who holds which tokens", "Canonical varlen layout" and "Padding between
// sequences"; built by data/length_model.h from document lengths alone.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "engine/core/tensor.h"

namespace driftless::data {

// Letters used below: S tokens in the sequence, m micro-sequences of L = S/m tokens,
// P sdp ranks, rank r holds Lq = L/P queries of micro-sequence i.
//   q0 = query_begin = i·L + r·Lq,   q1 = query_end = q0 + Lq.
// A document j of the sequence occupies [start_j, start_j + extent_j), where extent_j is its
// length rounded up to a multiple of pad_documents_to (its length when padding is off);
// its real tokens are [start_j, start_j + length_j), the rest is padding.
struct ModelInput {
  // ---- where this slice sits ----
  int64_t sequence_length = 0;   // S
  int32_t micro_sequence = 0;    // i
  int32_t micro_sequences = 1;   // m
  int32_t chunk = 0;             // c of n: SDP rank r of P, or a ring chunk of 2P
  int32_t chunks = 1;            // n
  int32_t pad_documents_to = 0;  // 0 or 1: no padding
  int64_t query_begin = 0;       // q0: absolute position of the first query row
  int64_t query_end = 0;         // q1: one past the last query row; end of the K extent
  // Absolute start (in the sequence) of the first document with a query row in [q0, q1).
  // The K extent handed to attention is [first_document_begin, query_end).
  int64_t first_document_begin = 0;
  // SDP K/V exchange of this micro-sequence's span (L rows, P chunks of L/P): only the last
  // exchange_rows rows of each chunk are ever read by another rank, in this micro-sequence
  // or a later one (the rows of the document that straddles the chunk's end, from its
  // start or the chunk's start). 0: no document crosses a chunk end, nothing to exchange;
  // L/P: whole chunks; -1 (a ModelInput not made by the length model): unknown, whole
  // chunks. The same on every rank of the sequence (a function of the document lengths, i
  // and P), so every rank runs the same collective.
  int64_t exchange_rows = -1;

  // ---- per query row, [T_q] with T_q = q1 - q0 (row t is position q0 + t) ----
  std::vector<int32_t> tokens;     // sampler's packed tokens (padding rows: end-of-text)
  std::vector<int32_t> labels;     // next token of the same document; -1 where there is none
  std::vector<int32_t> loss_mask;  // 1 where labels[t] >= 0, else 0 (last token, padding)
  // Position of the row inside its document: p - start_j; restarts at 0 at every document
  // start, also when the document began in an earlier micro-sequence or on another rank.
  std::vector<int32_t> position_index;
  std::vector<int32_t> document_index_q;  // j: index of the row's document in the sequence

  // ---- per key row, [T_k] with T_k = q1 - first_document_begin ----
  std::vector<int32_t> document_index_k;  // row u is position first_document_begin + u

  // ---- varlen metadata, one entry per listed document ----
  // Listed documents are those with at least one row (real or padding) in [q0, q1), in
  // order; a zero-length document never has one. document_ids[n] is the sequence index j
  // of the n-th listed document.
  std::vector<int32_t> document_ids;
  // Canonical prefix sums (length num_docs + 1, start at 0, non-decreasing) over the REAL
  // rows: document n has query rows [max(start,q0), min(start+length, q1)) and key rows
  // [start, min(start+length, q1)). Without padding cu_seqlens_q[-1] = q1 - q0 and
  // cu_seqlens_k[-1] = q1 - first_document_begin.
  std::vector<int32_t> cu_seqlens_q;
  std::vector<int32_t> cu_seqlens_k;
  // Longest real query / key run of one listed document (0 when none).
  int32_t max_seqlen_q = 0;
  int32_t max_seqlen_k = 0;
  // Memory layout (always filled; equal to cu_seqlens_* when padding is off): document n's
  // query rows are at [cu_seqlens_q_padded[n], cu_seqlens_q_padded[n+1]) of the T_q rows,
  // of which the first seqused_q[n] are real; likewise for keys within the T_k rows. These
  // satisfy the canonical contract: start at 0 and end at T_q and T_k.
  // Causal alignment (bottom-right, real rows only): query a of document n sees key b iff
  // b <= a + seqused_k[n] - seqused_q[n].
  std::vector<int32_t> cu_seqlens_q_padded;
  std::vector<int32_t> cu_seqlens_k_padded;
  std::vector<int32_t> seqused_q;
  std::vector<int32_t> seqused_k;
  int32_t max_seqlen_q_padded = 0;  // longest memory run of query rows of one document
  int32_t max_seqlen_k_padded = 0;

  int64_t num_queries() const { return query_end - query_begin; }
  int64_t num_keys() const { return query_end - first_document_begin; }
  int64_t num_documents() const { return int64_t(document_ids.size()); }
  bool padded() const { return pad_documents_to > 1; }
};

// The int arrays of a ModelInput as int32 CPU tensors ([T_q], [T_k] or [num_docs + 1]).
struct ModelInputTensors {
  Tensor tokens, labels, loss_mask, position_index, document_index_q, document_index_k;
  Tensor cu_seqlens_q, cu_seqlens_k, cu_seqlens_q_padded, cu_seqlens_k_padded;
  Tensor seqused_q, seqused_k;
};
ModelInputTensors to_tensors(const ModelInput& in);

// Every field, for `driftless batch` and for debugging.
nlohmann::json to_json(const ModelInput& in);

}  // namespace driftless::data
