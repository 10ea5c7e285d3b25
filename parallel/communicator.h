// The Communicator of ARCHITECTURE.md "Communicator": one interface for the collectives a step
// needs, with single-process, MPI (CPU tensors) and NCCL (cuda tensors) backends. Tensors are
// contiguous and chunked along their flat element order; sums are deterministic.
#pragma once
#include <memory>
#include <string>

#include "engine/core/tensor.h"

namespace driftless::parallel {

struct CommOptions {
  // A collective that has not completed after this many seconds throws driftless::Error
  // ("collective X timed out after N s on rank R"); the communicator is unusable afterwards
  // and the job should end (run_guarded does that).
  double timeout_s = 300.0;
};

// A collective in flight (Communicator::all_reduce_async). wait() returns once it has
// completed, or throws on error or timeout like the blocking collectives.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  // Orders what is issued afterwards on the compute stream after the collective without
  // blocking the host where the backend can: NCCL makes the compute stream wait for the
  // collective's event, and checks its completion (errors, the deadline) like the
  // stream-ordered collectives below. Other backends: wait().
  virtual void wait_ordered() { wait(); }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;  // "single", "mpi", "nccl"
  // Which tensors this communicator moves (cpu for single/MPI, cuda for NCCL).
  virtual Device device() const = 0;

  // out (P·n), in (n): chunk r of out receives rank r's in. in may be out's own chunk
  // (out.narrow(0, rank·n, n) of a contiguous out): then nothing is copied locally.
  virtual void all_gather_into(const Tensor& out, const Tensor& in) = 0;
  // in (P·n), out (n): out = Σ over ranks r = 0..P−1, in that order, of chunk rank() of
  // rank r's in. out may be in's own chunk (in-place reduce-scatter).
  virtual void reduce_scatter(const Tensor& out, const Tensor& in) = 0;
  // t = Σ over ranks of t, bitwise identical on every rank. Any numel.
  virtual void all_reduce(const Tensor& t) = 0;
  // all_reduce that may overlap with work issued after it. NCCL runs it on the
  // communicator's side stream, ordered after everything already issued on the compute
  // stream; the caller leaves t alone until wait(). Other backends finish it before
  // returning. Same sums as all_reduce.
  virtual std::unique_ptr<Work> all_reduce_async(const Tensor& t);
  // On root: t = Σ over ranks of t (in rank order for MPI, as all_reduce); other ranks' t
  // is left unchanged. Any numel. ZeRO-1 reduces each gradient bucket to its owners.
  virtual void reduce(const Tensor& t, int root) = 0;
  // reduce that may overlap with later work, like all_reduce_async.
  virtual std::unique_ptr<Work> reduce_async(const Tensor& t, int root);
  // t = root's t.
  virtual void broadcast(const Tensor& t, int root) = 0;
  virtual void barrier() = 0;

  // ---- context parallelism (layers/attention/routes/ring_route.h, all_to_all_route.h) ----
  // in (P·n), out (P·n), same dtype: chunk p of in goes to rank p, chunk p of out comes
  // from rank p (Ulysses: tokens ↔ heads). out and in must not overlap.
  virtual void all_to_all(const Tensor& out, const Tensor& in) = 0;
  // all_to_all, stream-ordered like all_gather_in_place_ordered (the host does not wait for
  // it; kernels issued after it see its result).
  virtual void all_to_all_ordered(const Tensor& out, const Tensor& in) { all_to_all(out, in); }

  // In-place forms: buffer (P·n, ...) of which this rank holds chunk rank() along dim 0.
  void all_gather_in_place(const Tensor& buffer);
  void reduce_scatter_in_place(const Tensor& buffer);
  // The same, stream-ordered: they may return before the collective has completed. NCCL
  // enqueues it on the compute stream, so kernels issued after it see its result, and checks
  // its completion (errors, the deadline) when the next stream-ordered collective is issued
  // and in every waiting call after it (the collectives above, Work::wait). The host stays a
  // collective ahead of the GPU instead of draining it at each one (the SDP K/V exchange runs
  // two per layer). Other backends complete them before returning.
  virtual void all_gather_in_place_ordered(const Tensor& buffer) { all_gather_in_place(buffer); }
  virtual void reduce_scatter_in_place_ordered(const Tensor& buffer) {
    reduce_scatter_in_place(buffer);
  }
  // This rank's chunk of a buffer split into size() equal parts along dim 0.
  Tensor own_chunk(const Tensor& buffer) const;

  double timeout_s() const { return options_.timeout_s; }
  void set_timeout_s(double seconds);

 protected:
  explicit Communicator(CommOptions options);
  // Shared argument checks; op names the collective in the message.
  void check_tensor(const char* op, const Tensor& t) const;
  void check_gather_shapes(const char* op, const Tensor& big, const Tensor& small) const;
  void check_root(const char* op, int root) const;
  // all_to_all: same dtype, equal numel dividing over size(), no overlap.
  void check_all_to_all(const char* op, const Tensor& out, const Tensor& in) const;

  CommOptions options_;
};

// World size 1, no MPI: every collective is the identity (or a copy between out and in).
std::unique_ptr<Communicator> make_single_process_communicator(CommOptions options = {},
                                                               Device device = Device::cpu);

// Deterministic sum of P equal chunks laid out contiguously in parts (P·n): out = parts[0]
// + parts[1] + ... in rank order, accumulated in the element type (float for bf16). out
// may alias any chunk of parts. Used by the MPI backend; exposed for tests.
void sum_chunks_in_rank_order(const Tensor& out, const Tensor& parts, int64_t chunks);

}  // namespace driftless::parallel
