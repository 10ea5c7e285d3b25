// The job's ranks and their groups (ARCHITECTURE.md "Communicator"): World owns MPI for the
// process, ProcessGroups builds data (all ranks), sdp (ranks sharing a sequence; consecutive
// ranks) and batch-data (ranks with the same sdp position) communicators for one device.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "parallel/communicator.h"

namespace driftless::parallel {

struct WorldOptions {
  // Initialise MPI even when no launcher is detected (a single-rank MPI world); otherwise
  // MPI is initialised only under mpirun/srun.
  bool force_mpi = false;
  CommOptions comm;  // timeout of every collective made from this world
};

// MPI_Init_thread / MPI_Finalize for the process (RAII; at most one World at a time).
// Without a launcher the world is one rank and no MPI call is made. If MPI was initialised
// by someone else, World neither initialises nor finalises it.
class World {
 public:
  explicit World(WorldOptions options = {});
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  // True when the environment shows an MPI launcher (OMPI_COMM_WORLD_SIZE, PMI_SIZE,
  // PMIX_RANK).
  static bool launched_by_mpi();

  bool uses_mpi() const { return uses_mpi_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Rank among the ranks on this machine (MPI shared-memory split): which GPU to use.
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  const WorldOptions& options() const { return options_; }
  // All ranks of the job, on the backend for device (cpu: MPI or single; cuda: NCCL).
  std::unique_ptr<Communicator> communicator(Device device = Device::cpu) const;
  // Ends every rank of the job (MPI_Abort), or this process when MPI is not in use.
  [[noreturn]] void abort(int code) const;

 private:
  WorldOptions options_;
  bool uses_mpi_ = false, owns_mpi_ = false;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
};

// Which GPU of its host a rank takes: the launcher's local rank (OMPI_COMM_WORLD_LOCAL_RANK,
// then SLURM_LOCALID; null when unset) where it gives one, else the rank among the ranks
// sharing this machine's memory (MPI_Comm_split_type). The launcher's wins so that a wrapper
// can place ranks as if on several hosts (tests/gpu/multinode.sh); never the global rank.
int choose_local_rank(const char* ompi_local_rank, const char* slurm_local_id, int shared_rank);

// ---- group arithmetic (no MPI; rank = batch_rank · sdp + sdp_rank) ----
struct GroupLayout {
  int data_parallel = 1;           // sdp groups splitting the batch
  int sequence_data_parallel = 1;  // ranks sharing one sequence
  // Hybrid context parallelism: consecutive ranks per all-to-all group within the ranks
  // sharing a sequence (0: no such groups).
  int context_parallel_group = 0;
  int world_size() const { return data_parallel * sequence_data_parallel; }
};
// Throws driftless::Error naming world size, data_parallel and sequence_data_parallel when
// world_size != data_parallel × sequence_data_parallel (or either is < 1).
void validate_layout(int world_size, const GroupLayout& layout);
struct RankCoords {
  int sdp_rank = 0;    // position within its sdp group (which chunk of a sequence)
  int batch_rank = 0;  // which sdp group (which sequences of the batch); also its rank in
                       // the batch-data group
};
RankCoords rank_coords(int rank, const GroupLayout& layout);
std::vector<int> sdp_group_ranks(int rank, const GroupLayout& layout);    // consecutive ranks
std::vector<int> batch_group_ranks(int rank, const GroupLayout& layout);  // stride sdp

class ProcessGroups {
 public:
  // Validates the layout against world.size() before creating anything. device cuda
  // selects the rank's GPU (local rank) and uses NCCL; it throws when the rank has none.
  ProcessGroups(const World& world, GroupLayout layout, Device device = Device::cpu);
  ~ProcessGroups();
  const GroupLayout& layout() const { return layout_; }
  const RankCoords& coords() const { return coords_; }
  Communicator& data() const { return *data_; }         // all ranks
  Communicator& sdp() const { return *sdp_; }           // ranks sharing a sequence
  Communicator& batch_data() const { return *batch_; }  // ranks with the same sdp_rank
  // Hybrid context parallelism (layout.context_parallel_group > 0, else nullptr): the ranks of
  // this rank's all-to-all group, and the ranks at its place in the other groups of its
  // sequence (the ring), each ordered by world rank.
  Communicator* cp_group() const { return cp_group_.get(); }
  Communicator* cp_ring() const { return cp_ring_.get(); }

 private:
  GroupLayout layout_;
  RankCoords coords_;
  std::unique_ptr<Communicator> data_, sdp_, batch_, cp_group_, cp_ring_;
};

// Runs fn; an exception prints "rank R: message" to stderr and ends the whole job
// (MPI_Abort under MPI, so no rank is left hanging in a collective). Returns 0 on success,
// or 1 after an exception when MPI is not in use.
int run_guarded(const World& world, const std::function<void()>& fn);

}  // namespace driftless::parallel
