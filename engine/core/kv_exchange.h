// The K/V exchange interface (ARCHITECTURE.md "K/V buffers"): how the ranks sharing a
// sequence move K/V rows and their gradients. Header-only with inline defaults (the
// single-rank exchange), below both floors that meet in it: layers/ (the K/V buffers and routes
// call it) and parallel/ (implements it over a communicator) each include it downward, and
// neither sees the other.
#pragma once

#include "engine/core/tensor.h"

namespace driftless {

// How K/V are exchanged between the P ranks sharing a sequence (SDP; context parallelism
// uses its all_gather, routes/ring_route.h, and its all_to_all, all_to_all_route.h). A
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
};

// `exchange`, or the one single-rank exchange when it is null (a route or buffer without
// other ranks).
inline KvExchange& exchange_or_single(KvExchange* exchange) {
  static KvExchange single_rank;
  return exchange ? *exchange : single_rank;
}

}  // namespace driftless
