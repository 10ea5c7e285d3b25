// NCCL backend (nccl_communicator.h). Blocking collectives run on the compute stream, so
// they are ordered after the kernels that produced their inputs; the host then polls the
// stream and ncclCommGetAsyncError until the deadline, and on error or timeout aborts the
// NCCL communicator (ncclCommAbort) before throwing. all_reduce_async runs on a side stream
// that waits for an event recorded on the compute stream, so gradient buckets reduce while
// the backward goes on; its Work polls an event the same way. all_to_all is grouped
// ncclSend/ncclRecv pairs, blocking like the collectives. The stream-ordered in-place
// collectives (the SDP K/V exchange) are enqueued on the compute stream without a wait; the
// next one, or any waiting call, checks them. Sums: NCCL's ring/tree order is fixed for a
// given topology and every rank receives the same reduced bits.
#include "parallel/nccl_communicator.h"

#ifdef DRIFTLESS_HAVE_CUDA
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "engine/core/cuda/check.h"
#include "engine/core/env.h"
#include "engine/core/cuda/stream.h"
#endif

namespace driftless::parallel {

#ifndef DRIFTLESS_HAVE_CUDA

int select_local_gpu(int) {
  DL_FAIL("nccl", "rank " << world_rank()
                          << " asked for a GPU, but driftless was built "
                             "without CUDA (configure with -DDRIFTLESS_CUDA=ON)");
}

std::unique_ptr<Communicator> make_nccl_communicator(MpiComm, CommOptions) {
  DL_FAIL("nccl",
          "driftless was built without CUDA; NCCL communicators need "
          "-DDRIFTLESS_CUDA=ON");
}

#else

namespace {

#define DL_NCCL_CHECK(op, expr)                             \
  do {                                                      \
    ncclResult_t dl_nccl_ = (expr);                         \
    if (dl_nccl_ != ncclSuccess) fail(op, #expr, dl_nccl_); \
  } while (0)

ncclDataType_t nccl_datatype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
  }
  DL_FAIL("nccl", "no NCCL datatype for dtype " << int(dtype));
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(MpiComm group, CommOptions options)
      : Communicator(options), bootstrap_(std::move(group), options) {
    rank_ = bootstrap_.rank();
    size_ = bootstrap_.size();
    // ncclUniqueId is 128 bytes: moved as 32 int32 through the MPI bootstrap (with timeout).
    static_assert(sizeof(ncclUniqueId) % sizeof(int32_t) == 0);
    ncclUniqueId id{};
    Tensor id_bytes = Tensor::zeros({int64_t(sizeof(id) / sizeof(int32_t))}, DType::i32);
    if (rank_ == 0) {
      DL_NCCL_CHECK("nccl", ncclGetUniqueId(&id));
      std::memcpy(id_bytes.raw_data(), &id, sizeof(id));
    }
    bootstrap_.broadcast(id_bytes, 0);
    std::memcpy(&id, id_bytes.raw_data(), sizeof(id));
    DL_NCCL_CHECK("nccl", ncclCommInitRank(&comm_, size_, id, rank_));
  }
  ~NcclCommunicator() override {
    if (comm_ == nullptr) return;
    if (broken_)
      ncclCommAbort(comm_);
    else
      ncclCommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "nccl"; }
  Device device() const override { return Device::cuda; }

  void all_gather_into(const Tensor& out, const Tensor& in) override {
    enqueue_all_gather(out, in);
    wait("all_gather_into");
  }
  void reduce_scatter(const Tensor& out, const Tensor& in) override {
    enqueue_reduce_scatter(out, in);
    wait("reduce_scatter");
  }
  void all_gather_in_place_ordered(const Tensor& buffer) override {
    wait_ordered("all_gather_in_place_ordered");
    enqueue_all_gather(buffer, own_chunk(buffer));
    record_ordered();
  }
  void reduce_scatter_in_place_ordered(const Tensor& buffer) override {
    wait_ordered("reduce_scatter_in_place_ordered");
    enqueue_reduce_scatter(own_chunk(buffer), buffer);
    record_ordered();
  }
  void all_reduce(const Tensor& t) override {
    const char* op = "all_reduce";
    check_usable(op);
    check_tensor(op, t);
    DL_NCCL_CHECK(op, ncclAllReduce(t.raw_data(), t.raw_data(), size_t(t.numel()),
                                    nccl_datatype(t.dtype()), ncclSum, comm_, stream()));
    wait(op);
  }
  void reduce(const Tensor& t, int root) override {
    const char* op = "reduce";
    check_usable(op);
    check_tensor(op, t);
    check_root(op, root);
    DL_NCCL_CHECK(op, ncclReduce(t.raw_data(), t.raw_data(), size_t(t.numel()),
                                 nccl_datatype(t.dtype()), ncclSum, root, comm_, stream()));
    wait(op);
  }
  std::unique_ptr<Work> all_reduce_async(const Tensor& t) override {
    const char* op = "all_reduce_async";
    check_usable(op);
    check_tensor(op, t);
    cudaStream_t side = side_stream();
    DL_NCCL_CHECK(op, ncclAllReduce(t.raw_data(), t.raw_data(), size_t(t.numel()),
                                    nccl_datatype(t.dtype()), ncclSum, comm_, side));
    return finish_async(side, {t});
  }
  std::unique_ptr<Work> reduce_async(const Tensor& t, int root) override {
    const char* op = "reduce_async";
    check_usable(op);
    check_tensor(op, t);
    check_root(op, root);
    cudaStream_t side = side_stream();
    DL_NCCL_CHECK(op, ncclReduce(t.raw_data(), t.raw_data(), size_t(t.numel()),
                                 nccl_datatype(t.dtype()), ncclSum, root, comm_, side));
    return finish_async(side, {t});
  }
  void broadcast(const Tensor& t, int root) override {
    const char* op = "broadcast";
    check_usable(op);
    check_tensor(op, t);
    check_root(op, root);
    DL_NCCL_CHECK(op, ncclBroadcast(t.raw_data(), t.raw_data(), size_t(t.numel()),
                                    nccl_datatype(t.dtype()), root, comm_, stream()));
    wait(op);
  }
  void barrier() override {
    const char* op = "barrier";
    check_usable(op);
    DL_CUDA_CHECK(cudaStreamSynchronize(stream()));
    bootstrap_.barrier();
  }
  void all_to_all(const Tensor& out, const Tensor& in) override {
    enqueue_all_to_all("all_to_all", out, in);
    wait("all_to_all");
  }
  void all_to_all_ordered(const Tensor& out, const Tensor& in) override {
    wait_ordered("all_to_all_ordered");
    enqueue_all_to_all("all_to_all_ordered", out, in);
    record_ordered();
  }

 private:
  static cudaStream_t stream() { return cudaStreamLegacy; }

  void enqueue_all_to_all(const char* op, const Tensor& out, const Tensor& in) {
    check_usable(op);
    check_all_to_all(op, out, in);
    const size_t chunk = in.nbytes() / size_t(size_);
    const size_t n = size_t(in.numel() / size_);
    const ncclDataType_t type = nccl_datatype(in.dtype());
    // This rank's own chunk is a device copy; the others are one send and one receive per peer.
    DL_CUDA_CHECK(cudaMemcpyAsync(byte_ptr(out) + size_t(rank_) * chunk,
                                  byte_ptr(in) + size_t(rank_) * chunk, chunk,
                                  cudaMemcpyDeviceToDevice, stream()));
    grouped(op, [&] {
      ncclResult_t st = ncclSuccess;
      for (int p = 0; p < size_ && st == ncclSuccess; ++p) {
        if (p == rank_) continue;
        st = ncclSend(byte_ptr(in) + size_t(p) * chunk, n, type, p, comm_, stream());
        if (st == ncclSuccess)
          st = ncclRecv(byte_ptr(out) + size_t(p) * chunk, n, type, p, comm_, stream());
      }
      return st;
    });
  }

  void enqueue_all_gather(const Tensor& out, const Tensor& in) {
    const char* op = "all_gather_into";
    check_usable(op);
    check_gather_shapes(op, out, in);
    DL_NCCL_CHECK(op, ncclAllGather(in.raw_data(), out.raw_data(), size_t(in.numel()),
                                    nccl_datatype(in.dtype()), comm_, stream()));
  }
  void enqueue_reduce_scatter(const Tensor& out, const Tensor& in) {
    const char* op = "reduce_scatter";
    check_usable(op);
    check_gather_shapes(op, in, out);
    DL_NCCL_CHECK(op, ncclReduceScatter(in.raw_data(), out.raw_data(), size_t(out.numel()),
                                        nccl_datatype(in.dtype()), ncclSum, comm_, stream()));
  }
  static char* byte_ptr(const Tensor& t) { return static_cast<char*>(t.raw_data()); }

  // Runs issue() (the ncclSend/ncclRecv calls, returning the first failure) inside
  // ncclGroupStart/End. The group is closed even when a call fails, so that NCCL's
  // thread-local group state does not swallow the next collective of any communicator.
  template <class Issue>
  void grouped(const char* op, const Issue& issue) {
    DL_NCCL_CHECK(op, ncclGroupStart());
    const ncclResult_t issued = issue();
    const ncclResult_t ended = ncclGroupEnd();
    if (issued != ncclSuccess) fail(op, "ncclSend/ncclRecv", issued);
    if (ended != ncclSuccess) fail(op, "ncclGroupEnd()", ended);
  }

  // At most one stream-ordered collective in flight: the previous one must have completed
  // (within the deadline) before the next is issued, so a hung peer is still reported, and
  // the host never queues more than about a layer of work behind a collective.
  void wait_ordered(const char* op) {
    if (!ordered_) return;
    wait(op, [this] { return ordered_->done(); });
    ordered_.reset();
  }
  void record_ordered() {
    ordered_ = std::make_unique<cuda::Event>();
    ordered_->record(stream());
  }

  void check_usable(const char* op) const {
    DL_CHECK(!broken_, op,
             "NCCL communicator was aborted after an earlier failure on rank " << world_rank());
  }

  [[noreturn]] void fail(const char* op, const char* call, ncclResult_t code) {
    abort_comm();
    DL_FAIL(op, call << " failed on rank " << world_rank() << ": " << ncclGetErrorString(code));
  }

  void abort_comm() {
    if (comm_ != nullptr && !broken_) ncclCommAbort(comm_);
    broken_ = true;
    comm_ = nullptr;
  }

  // The side stream's priority: high, so the gradient buckets' all-reduces get SMs while the
  // backward's kernels run (BENCHMARKS.md, the dp4 bucket and stream-priority variants).
  // DRIFTLESS_COMM_PRIORITY=normal gives the default priority (to measure the difference).
  static cuda::Stream::Priority side_priority() {
    return env_value("DRIFTLESS_COMM_PRIORITY") == "normal" ? cuda::Stream::Priority::normal
                                                            : cuda::Stream::Priority::high;
  }
  // The side stream, ordered after everything issued so far on the compute stream.
  cudaStream_t side_stream() {
    if (!side_) side_ = std::make_unique<cuda::Stream>(side_priority());
    cuda::Event ready;
    ready.record(stream());
    side_->wait(ready);
    return side_->get();
  }
  // The Work holds its tensors until wait(): the side stream may still use them after the
  // caller dropped its handles, and the caching allocator must not hand their blocks out
  // before.
  std::unique_ptr<Work> finish_async(cudaStream_t side, std::vector<Tensor> tensors) {
    auto work = std::make_unique<NcclWork>(this, std::move(tensors));
    work->done.record(side);
    return work;
  }

  struct NcclWork final : Work {
    NcclWork(NcclCommunicator* c, std::vector<Tensor> t) : comm(c), tensors(std::move(t)) {}
    // A host wait: returns once the side stream has passed the collective, so whatever is
    // issued afterwards, on any stream, sees its result.
    void wait() override {
      comm->wait("async collective", [this] { return done.done(); });
      tensors.clear();
    }
    // The compute stream waits for the side stream's event; the tensors may go (later use on
    // the compute stream is ordered after the collective), the completion is checked as the
    // communicator's stream-ordered collective.
    void wait_ordered() override {
      comm->wait_ordered("async collective");
      DL_CUDA_CHECK(cudaStreamWaitEvent(stream(), done.get(), 0));
      comm->record_ordered();
      tensors.clear();
    }
    NcclCommunicator* comm;
    std::vector<Tensor> tensors;
    cuda::Event done;
  };

  void wait(const char* op) {
    wait(op, [] {
      const cudaError_t st = cudaStreamQuery(stream());
      if (st == cudaErrorNotReady) return false;
      DL_CUDA_CHECK(st);
      return true;
    });
  }

  // Waits until finished() (which throws on a CUDA error), or an asynchronous NCCL error,
  // or the deadline.
  template <class Finished>
  void wait(const char* op, const Finished& finished) {
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(
                                             std::chrono::duration<double>(options_.timeout_s));
    for (int polls = 0;; ++polls) {
      bool ok = false;
      try {
        ok = finished();
      } catch (const Error& e) {
        abort_comm();
        DL_FAIL(op, "cuda error during collective " << op << " on rank " << world_rank() << ": "
                                                    << e.what());
      }
      if (ok) return;
      ncclResult_t async = ncclSuccess;
      DL_NCCL_CHECK(op, ncclCommGetAsyncError(comm_, &async));
      if (async != ncclSuccess) fail(op, "asynchronous NCCL error", async);
      if (clock::now() > deadline) {
        abort_comm();
        DL_FAIL(op, "collective " << op << " timed out after " << options_.timeout_s
                                  << " s on rank " << world_rank() << " (rank " << rank_ << " of "
                                  << size_ << " in this group)");
      }
      if (polls < 64)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(polls < 1024 ? 20 : 200));
    }
  }

  MpiCommunicator bootstrap_;
  std::unique_ptr<cuda::Stream> side_;    // all_reduce_async, reduce_async
  std::unique_ptr<cuda::Event> ordered_;  // the stream-ordered collective in flight
  ncclComm_t comm_ = nullptr;
  int rank_ = 0, size_ = 1;
  bool broken_ = false;
};

}  // namespace

int select_local_gpu(int local_rank) {
  int count = 0;
  const cudaError_t st = cudaGetDeviceCount(&count);
  DL_CHECK(st == cudaSuccess && count > 0, "nccl",
           "rank " << world_rank() << " has no GPU (cudaGetDeviceCount: "
                   << (st == cudaSuccess ? "0 devices" : cudaGetErrorString(st)) << ")");
  const int device = local_rank % count;
  DL_CUDA_CHECK(cudaSetDevice(device));
  return device;
}

std::unique_ptr<Communicator> make_nccl_communicator(MpiComm group, CommOptions options) {
  return std::make_unique<NcclCommunicator>(std::move(group), options);
}

#endif  // DRIFTLESS_HAVE_CUDA

}  // namespace driftless::parallel
