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

#include "engine/core/tensor.h"

namespace driftless::layers {

// How K/V are exchanged between the P ranks sharing a sequence (SDP; context parallelism
// uses its all_to_all and ring_shift, routes/all_to_all_route.h and ring_route.h). A
// micro-sequence's span of L rows is cut into P chunks of L/P rows; rank r owns chunk r. The
// single-rank exchange (P = 1) does nothing; parallel/ provides the collective one.
class KvExchange {
 public:
  virtual ~KvExchange() = default;
  virtual int64_t ranks() const { return 1; }
  virtual int64_t rank() const { return 0; }
  // span (L, 2, H_kv, D), contiguous view of the buffer: this rank filled its chunk; fill
  // the others' (all-gather in place). rows: only the last `rows` rows of each chunk are
  // read by other ranks (ModelInput::exchange_rows): just those move; 0 moves nothing,
  // < 0 or >= L/P whole chunks.
  virtual void all_gather(const Tensor& span, int64_t rows = -1) {}
  // grad span (L, 2, H_kv, D): sum over ranks; afterwards this rank's chunk holds the sum
  // (reduce-scatter in place; other chunks are left undefined). With rows, only the last
  // `rows` rows of each chunk are summed: no other rank adds to the rows before them.
  virtual void reduce_scatter(const Tensor& grad_span, int64_t rows = -1) {}
  // packed (P, rows, ...) contiguous: slice rank() becomes the rank-order sum of every
  // rank's slice rank() (the others are left undefined). The tails of a span gathered by the
  // caller: the same sums as reduce_scatter(span, rows) on a span holding them.
  virtual void reduce_scatter_packed(const Tensor& packed) {}

  // ---- context parallelism over the same ranks (routes/ring_route.h, all_to_all_route.h) ----
  // in (P·n), out (P·n): chunk p of in goes to rank p, chunk p of out comes from rank p.
  virtual void all_to_all(const Tensor& out, const Tensor& in) {
    out.view({out.numel()}).copy_(in.contiguous().view({in.numel()}));  // one rank: a copy
  }
  // A ring step in flight; wait() returns once it is complete.
  class Pending {
   public:
    virtual ~Pending() = default;
    virtual void wait() {}  // the base: already complete
  };
  // Sends `send` to the next rank (rank + 1 mod P) and receives into `recv` what the previous
  // rank sends, overlapping work issued after it where the backend can (NCCL: a side
  // stream). The caller neither writes send nor reads recv before wait(). Inline: parallel/
  // implements this interface without linking layers/.
  virtual std::unique_ptr<Pending> ring_shift(const Tensor& send, const Tensor& recv) {
    recv.copy_(send);  // one rank: the ring is this rank
    return std::make_unique<Pending>();
  }
};

// Test-only fault switches: regression must catch real bugs (configs/regress/demo_fault.yaml).
struct KvFaults {
  bool drop_grad_slice = false;      // return a zero K/V gradient instead of the slice
  bool skip_reduce_scatter = false;  // SDP: use the local partial sum, not the ranks' sum
};

class KvBuffer {
 public:
  // (Re)allocates only when the shape, dtypes or device change. The gradient buffer may be
  // wider than the K/V (f32 for bf16 K/V): it accumulates over micro-sequences and ranks.
  void ensure(int64_t sequences, int64_t sequence_length, int64_t kv_heads, int64_t head_dim,
              DType dtype, Device device, DType grad_dtype);
  const Tensor& kv() const { return kv_; }      // (B, S, 2, H_kv, D)
  const Tensor& grad() const { return grad_; }  // (B, S, 2, H_kv, D)
  // Zeroes the gradient buffer if a backward accumulated into it since the last zeroing
  // (slices whose gradient bypasses the buffer leave it clean: no memset per step).
  void zero_grad() const {
    if (grad_.defined() && grad_dirty_) grad_.zero_();
    grad_dirty_ = false;
  }
  // The gradient buffer, to accumulate into: it must be zeroed before the next step.
  const Tensor& grad_to_accumulate() const {
    grad_dirty_ = true;
    return grad_;
  }
  int64_t bytes() const { return kv_.defined() ? 2 * int64_t(kv_.nbytes()) : 0; }

 private:
  Tensor kv_, grad_;
  mutable bool grad_dirty_ = false;
};

struct KvSlice {
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
std::pair<Tensor, Tensor> kv_write_read(KvBuffer& buffer, const KvSlice& slice,
                                        const Tensor& k_local, const Tensor& v_local,
                                        KvExchange* exchange = nullptr,
                                        const KvFaults* faults = nullptr);

}  // namespace driftless::layers
