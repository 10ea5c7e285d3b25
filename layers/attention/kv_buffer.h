// Per-layer K/V buffers (ARCHITECTURE.md "K/V buffers"): kv (B, S, 2, H_kv, D) and a gradient
// buffer of the same shape, allocated once and reused across steps. A micro-sequence writes
// only its slice [q0, q1) of sequence b; attention reads the extent [first_document_begin,
// q1) as views (no concatenation of pasts, no copies). In backward, the extent's dK/dV are
// added into the gradient buffer, and the slice [q0, q1) flows back into the K/V projection;
// because micro-sequences run backward in reverse order, every later micro-sequence has
// added to that slice by then.
#pragma once
#include <functional>
#include <memory>

#include "engine/core/kv_exchange.h"
#include "engine/core/tensor.h"

namespace driftless::layers {

class KvBuffer {
 public:
  // (Re)allocates only when the shape, dtypes or device change. The gradient buffer may be
  // wider than the K/V (f32 for bf16 K/V): it accumulates over micro-sequences and ranks.
  // It is allocated at its first use (grad_to_accumulate): the layouts whose K/V gradient
  // never goes through it (one micro-sequence: kv_write_read's sole and whole-chunk cases,
  // the ring's per-call sums) never hold it, which at long contexts is the largest buffer
  // (f32, every row of the sequence, per layer: 77 GB for a ring over 1M tokens of GPT-2).
  void ensure(int64_t sequences, int64_t sequence_length, int64_t kv_heads, int64_t head_dim,
              DType dtype, Device device, DType grad_dtype);
  const Tensor& kv() const { return kv_; }  // (B, S, 2, H_kv, D)
  DType grad_dtype() const { return grad_dtype_; }
  // Zeroes the gradient buffer if a backward accumulated into it since the last zeroing
  // (slices whose gradient bypasses the buffer leave it clean: no memset per step).
  void zero_grad() const {
    if (grad_.defined() && grad_dirty_) grad_.zero_();
    grad_dirty_ = false;
  }
  // The gradient buffer (B, S, 2, H_kv, D), to accumulate into (allocated zeroed at the first
  // call): it must be zeroed before the next step.
  const Tensor& grad_to_accumulate() const;
  int64_t bytes() const {
    return (kv_.defined() ? int64_t(kv_.nbytes()) : 0) +
           (grad_.defined() ? int64_t(grad_.nbytes()) : 0);
  }

 private:
  Tensor kv_;
  mutable Tensor grad_;
  DType grad_dtype_ = DType::f32;
  mutable bool grad_dirty_ = false;
};

struct KvRows {
  int64_t sequence = 0;              // b: which sequence of the buffer
  int64_t q0 = 0, q1 = 0;            // this rank's query rows (absolute in the sequence)
  int64_t first_document_begin = 0;  // start of the K extent
  // Rows at the end of each rank's chunk of the span that other ranks read
  // (ModelInput::exchange_rows); < 0: whole chunks.
  int64_t exchange_rows = -1;
  // Sequences [sequence, sequence + sequences) read as ONE run of sequences x S rows (q0,
  // q1 and first_document_begin count in it): whole sequences of a slice, written and read
  // with one copy instead of one per sequence. Single-rank exchange only.
  int64_t sequences = 1;
};

// Writes k_local/v_local (T_q, H_kv, D) into the buffer at [q0, q1) of sequence b (then
// all-gathers the micro-sequence span over the exchange), and returns the extent
// [first_document_begin, q1) as (k, v) views, linked to k_local/v_local by one autograd node
// implementing the gradient rule above.
std::pair<Tensor, Tensor> kv_write_read(KvBuffer& buffer, const KvRows& slice,
                                        const Tensor& k_local, const Tensor& v_local,
                                        KvExchange* exchange = nullptr);

}  // namespace driftless::layers
