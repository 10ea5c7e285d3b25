// MPI backend (mpi_communicator.h). Reductions never use MPI_Allreduce/MPI_Reduce_scatter,
// whose summation order MPI does not fix: data is exchanged (alltoall), summed here in
// rank order 0..P−1, and (for all_reduce) the summed chunks are all-gathered, so every rank
// ends with the same bits.
#include "parallel/mpi_communicator.h"

#include <chrono>
#include <climits>
#include <thread>

namespace driftless::parallel {

namespace {
bool mpi_alive() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  return initialised && !finalised;
}

int checked_count(const char* op, int64_t n) {
  DL_CHECK(n <= INT_MAX, op, "chunk of " << n << " elements exceeds MPI's int count limit");
  return int(n);
}

char* byte_ptr(const Tensor& t) {
  return static_cast<char*>(t.raw_data());
}
}  // namespace

MpiComm& MpiComm::operator=(MpiComm&& other) noexcept {
  if (this != &other) {
    reset();
    comm_ = other.release();
  }
  return *this;
}

MPI_Comm MpiComm::release() {
  MPI_Comm c = comm_;
  comm_ = MPI_COMM_NULL;
  return c;
}

void MpiComm::reset() {
  if (comm_ != MPI_COMM_NULL && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_SELF && mpi_alive())
    MPI_Comm_free(&comm_);
  comm_ = MPI_COMM_NULL;
}

void mpi_check(int code, const char* op, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  DL_FAIL(op, call << " failed on rank " << world_rank() << ": " << std::string(text, len));
}

MPI_Datatype mpi_datatype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::bf16:
      return MPI_UINT16_T;  // moved as bits; summed as float here
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
  }
  DL_FAIL("mpi", "no MPI datatype for dtype " << int(dtype));
}

int world_rank() {
  if (!mpi_alive()) return 0;
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

MpiCommunicator::MpiCommunicator(MpiComm comm, CommOptions options)
    : Communicator(options), comm_(std::move(comm)) {
  DL_CHECK(mpi_alive(), "mpi", "MPI is not initialised (create a parallel::World first)");
  DL_CHECK(comm_.get() != MPI_COMM_NULL, "mpi", "communicator is MPI_COMM_NULL");
  mpi_check(MPI_Comm_set_errhandler(comm_.get(), MPI_ERRORS_RETURN), "mpi",
            "MPI_Comm_set_errhandler");
  mpi_check(MPI_Comm_rank(comm_.get(), &rank_), "mpi", "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(comm_.get(), &size_), "mpi", "MPI_Comm_size");
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::duplicate(MPI_Comm parent, CommOptions options) {
  DL_CHECK(mpi_alive(), "mpi", "MPI is not initialised (create a parallel::World first)");
  MPI_Comm dup = MPI_COMM_NULL;
  mpi_check(MPI_Comm_dup(parent, &dup), "mpi", "MPI_Comm_dup");
  return std::make_unique<MpiCommunicator>(MpiComm(dup), options);
}

void MpiCommunicator::check_usable(const char* op) const {
  DL_CHECK(
      !broken_, op,
      "communicator is unusable after an earlier collective timed out on rank " << world_rank());
}

void MpiCommunicator::wait(const char* op, MPI_Request* reqs, int count,
                           std::vector<Tensor> in_use) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(
                                           std::chrono::duration<double>(options_.timeout_s));
  for (int polls = 0;; ++polls) {
    int done = 0;
    mpi_check(MPI_Testall(count, reqs, &done, MPI_STATUSES_IGNORE), op, "MPI_Testall");
    if (done) return;
    if (clock::now() > deadline) {
      // A started collective cannot be cancelled: park its buffers and refuse further use.
      broken_ = true;
      for (auto& t : in_use) abandoned_.push_back(std::move(t));
      DL_FAIL(op, "collective " << op << " timed out after " << options_.timeout_s << " s on rank "
                                << world_rank() << " (rank " << rank_ << " of " << size_
                                << " in this group)");
    }
    // Spin briefly for latency, then back off so oversubscribed ranks make progress.
    if (polls < 64)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(polls < 1024 ? 20 : 200));
  }
}

void MpiCommunicator::all_gather_into(const Tensor& out, const Tensor& in) {
  const char* op = "all_gather_into";
  check_usable(op);
  check_gather_shapes(op, out, in);
  const int n = checked_count(op, in.numel());
  const MPI_Datatype type = mpi_datatype(in.dtype());
  const bool in_place =
      byte_ptr(in) == byte_ptr(out) + int64_t(rank_) * n * int64_t(dtype_size(in.dtype()));
  MPI_Request req;
  mpi_check(MPI_Iallgather(in_place ? MPI_IN_PLACE : in.raw_data(), n, type, out.raw_data(), n,
                           type, comm_.get(), &req),
            op, "MPI_Iallgather");
  wait(op, req, {out, in});
}

void MpiCommunicator::reduce_scatter(const Tensor& out, const Tensor& in) {
  const char* op = "reduce_scatter";
  check_usable(op);
  check_gather_shapes(op, in, out);
  const int n = checked_count(op, out.numel());
  const MPI_Datatype type = mpi_datatype(in.dtype());
  // parts (P, n): chunk rank() of every rank's in, in rank order.
  Tensor parts = Tensor::empty({int64_t(size_) * n}, in.dtype());
  MPI_Request req;
  mpi_check(MPI_Ialltoall(in.raw_data(), n, type, parts.raw_data(), n, type, comm_.get(), &req), op,
            "MPI_Ialltoall");
  wait(op, req, {in, parts});
  sum_chunks_in_rank_order(out.view({int64_t(n)}), parts, size_);
}

void MpiCommunicator::all_reduce(const Tensor& t) {
  const char* op = "all_reduce";
  check_usable(op);
  check_tensor(op, t);
  const int64_t total = t.numel();
  // Rank r reduces elements [displs[r], displs[r] + counts[r]); chunks differ by at most one.
  std::vector<int> counts(size_), displs(size_);
  for (int r = 0, at = 0; r < size_; ++r) {
    counts[r] = checked_count(op, total / size_ + (r < total % size_ ? 1 : 0));
    displs[r] = at;
    at += counts[r];
  }
  DL_CHECK(total <= INT_MAX, op, "tensor of " << total << " elements exceeds MPI's int limit");
  const int mine = counts[rank_];
  std::vector<int> recv_counts(size_, mine), recv_displs(size_);
  for (int r = 0; r < size_; ++r) recv_displs[r] = r * mine;
  const MPI_Datatype type = mpi_datatype(t.dtype());
  Tensor parts = Tensor::empty({int64_t(size_) * mine}, t.dtype());
  MPI_Request req;
  mpi_check(MPI_Ialltoallv(t.raw_data(), counts.data(), displs.data(), type, parts.raw_data(),
                           recv_counts.data(), recv_displs.data(), type, comm_.get(), &req),
            op, "MPI_Ialltoallv");
  wait(op, req, {t, parts});
  Tensor flat = t.view({total});
  sum_chunks_in_rank_order(flat.narrow(0, displs[rank_], mine), parts, size_);
  mpi_check(MPI_Iallgatherv(MPI_IN_PLACE, 0, type, t.raw_data(), counts.data(), displs.data(), type,
                            comm_.get(), &req),
            op, "MPI_Iallgatherv");
  wait(op, req, {t});
}

void MpiCommunicator::reduce(const Tensor& t, int root) {
  const char* op = "reduce";
  check_usable(op);
  check_tensor(op, t);
  check_root(op, root);
  const int n = checked_count(op, t.numel());
  const MPI_Datatype type = mpi_datatype(t.dtype());
  // parts (P, n) on root: every rank's t, in rank order, summed there like all_reduce does.
  Tensor parts = rank_ == root ? Tensor::empty({int64_t(size_) * n}, t.dtype()) : Tensor();
  MPI_Request req;
  mpi_check(MPI_Igather(t.raw_data(), n, type, rank_ == root ? parts.raw_data() : nullptr, n, type,
                        root, comm_.get(), &req),
            op, "MPI_Igather");
  wait(op, req, {t, parts});
  if (rank_ == root) sum_chunks_in_rank_order(t.view({int64_t(n)}), parts, size_);
}

void MpiCommunicator::broadcast(const Tensor& t, int root) {
  const char* op = "broadcast";
  check_usable(op);
  check_tensor(op, t);
  check_root(op, root);
  const int n = checked_count(op, t.numel());
  MPI_Request req;
  mpi_check(MPI_Ibcast(t.raw_data(), n, mpi_datatype(t.dtype()), root, comm_.get(), &req), op,
            "MPI_Ibcast");
  wait(op, req, {t});
}

void MpiCommunicator::barrier() {
  const char* op = "barrier";
  check_usable(op);
  MPI_Request req;
  mpi_check(MPI_Ibarrier(comm_.get(), &req), op, "MPI_Ibarrier");
  wait(op, req, {});
}

void MpiCommunicator::all_to_all(const Tensor& out, const Tensor& in) {
  const char* op = "all_to_all";
  check_usable(op);
  check_all_to_all(op, out, in);
  const int n = checked_count(op, in.numel() / size_);
  const MPI_Datatype type = mpi_datatype(in.dtype());
  MPI_Request req;
  mpi_check(MPI_Ialltoall(in.raw_data(), n, type, out.raw_data(), n, type, comm_.get(), &req), op,
            "MPI_Ialltoall");
  wait(op, req, {out, in});
}

}  // namespace driftless::parallel
