// The MPI backend of the Communicator (ARCHITECTURE.md "Communicator"): CPU tensors, and the
// bootstrap that shares the NCCL unique id. Every collective is non-blocking and polled
// against a deadline, and sums are done locally in rank order, so results are deterministic.
#pragma once
#include <mpi.h>

#include <vector>

#include "parallel/communicator.h"

namespace driftless::parallel {

// Owns an MPI communicator (MPI_Comm_free on destruction unless it is MPI_COMM_WORLD,
// MPI_COMM_SELF or MPI_COMM_NULL, or MPI is already finalised).
class MpiComm {
 public:
  MpiComm() = default;
  explicit MpiComm(MPI_Comm comm) : comm_(comm) {}
  ~MpiComm() { reset(); }
  MpiComm(MpiComm&& other) noexcept : comm_(other.release()) {}
  MpiComm& operator=(MpiComm&& other) noexcept;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;
  MPI_Comm get() const { return comm_; }
  MPI_Comm release();
  void reset();

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// Throws driftless::Error "[op] <call> failed: <MPI's message>" when code != MPI_SUCCESS.
void mpi_check(int code, const char* op, const char* call);
MPI_Datatype mpi_datatype(DType dtype);
int world_rank();  // rank in MPI_COMM_WORLD (0 when MPI is not initialised)

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of comm; sets MPI_ERRORS_RETURN on it so failures become errors.
  explicit MpiCommunicator(MpiComm comm, CommOptions options = {});
  // A private duplicate of parent (so its traffic never matches anyone else's).
  static std::unique_ptr<MpiCommunicator> duplicate(MPI_Comm parent, CommOptions options = {});

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "mpi"; }
  Device device() const override { return Device::cpu; }
  MPI_Comm comm() const { return comm_.get(); }

  void all_gather_into(const Tensor& out, const Tensor& in) override;
  void reduce_scatter(const Tensor& out, const Tensor& in) override;
  void all_reduce(const Tensor& t) override;
  void reduce(const Tensor& t, int root) override;
  void broadcast(const Tensor& t, int root) override;
  void barrier() override;
  void all_to_all(const Tensor& out, const Tensor& in) override;

 private:
  void check_usable(const char* op) const;
  // Polls the requests until all complete or the timeout passes; keep alive the tensors MPI
  // may still touch if they do not (they are parked in abandoned_, never freed under MPI).
  void wait(const char* op, MPI_Request* reqs, int count, std::vector<Tensor> in_use);
  void wait(const char* op, MPI_Request& req, std::vector<Tensor> in_use) {
    wait(op, &req, 1, std::move(in_use));
  }

  MpiComm comm_;
  int rank_ = 0, size_ = 1;
  bool broken_ = false;
  std::vector<Tensor> abandoned_;
};

}  // namespace driftless::parallel
