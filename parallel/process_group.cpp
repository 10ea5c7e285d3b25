// World (MPI lifetime, local rank), group arithmetic and ProcessGroups (process_group.h).
#include "parallel/process_group.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "engine/core/env.h"
#include "parallel/mpi_communicator.h"
#include "parallel/nccl_communicator.h"

namespace driftless::parallel {

bool World::launched_by_mpi() {
  return env_set("OMPI_COMM_WORLD_SIZE") || env_set("PMI_SIZE") || env_set("PMIX_RANK");
}

World::World(WorldOptions options) : options_(options) {
  if (!launched_by_mpi() && !options.force_mpi) return;
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  DL_CHECK(!finalised, "world", "MPI was already finalised in this process");
  if (!initialised) {
    int provided = 0;
    mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "world",
              "MPI_Init_thread");
    owns_mpi_ = true;
  }
  uses_mpi_ = true;
  mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "world", "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "world", "MPI_Comm_size");
  MPI_Comm local = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
            "world", "MPI_Comm_split_type");
  MpiComm owned(local);
  mpi_check(MPI_Comm_rank(local, &local_rank_), "world", "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(local, &local_size_), "world", "MPI_Comm_size");
  local_rank_ = choose_local_rank(env_value("OMPI_COMM_WORLD_LOCAL_RANK").c_str(),
                                  env_value("SLURM_LOCALID").c_str(), local_rank_);
}

int choose_local_rank(const char* ompi_local_rank, const char* slurm_local_id, int shared_rank) {
  for (const char* v : {ompi_local_rank, slurm_local_id}) {
    if (!v || !*v) continue;
    char* end = nullptr;
    const long r = std::strtol(v, &end, 10);
    DL_CHECK(*end == 0 && r >= 0, "world", "local rank '" << v << "' is not a number >= 0");
    return int(r);
  }
  return shared_rank;
}

World::~World() {
  if (!owns_mpi_) return;
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (!finalised) MPI_Finalize();
}

std::unique_ptr<Communicator> World::communicator(Device device) const {
  if (!uses_mpi_) return make_single_process_communicator(options_.comm, device);
  if (device == Device::cuda) {
    select_local_gpu(local_rank_);
    MPI_Comm dup = MPI_COMM_NULL;
    mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &dup), "world", "MPI_Comm_dup");
    return make_nccl_communicator(MpiComm(dup), options_.comm);
  }
  return MpiCommunicator::duplicate(MPI_COMM_WORLD, options_.comm);
}

void World::abort(int code) const {
  std::fflush(stdout);
  std::fflush(stderr);
  if (uses_mpi_) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

void validate_layout(int world_size, const GroupLayout& l) {
  DL_CHECK(l.data_parallel >= 1 && l.sequence_data_parallel >= 1 &&
               world_size == l.data_parallel * l.sequence_data_parallel,
           "process_groups",
           "world size " << world_size << " must equal data_parallel " << l.data_parallel
                         << " x sequence_data_parallel " << l.sequence_data_parallel
                         << " (= " << l.data_parallel * l.sequence_data_parallel << ")"
                         << (world_size == 1 && !World::launched_by_mpi()
                                 ? "; not launched by mpirun: start "
                                   "`mpirun -np " +
                                       std::to_string(l.world_size()) + " ...`"
                                 : ""));
  DL_CHECK(
      l.context_parallel_group == 0 || (l.context_parallel_group >= 1 &&
                                        l.sequence_data_parallel % l.context_parallel_group == 0),
      "process_groups",
      "context_parallel_group " << l.context_parallel_group
                                << " must divide the ranks sharing a sequence ("
                                << l.sequence_data_parallel << ")");
}

RankCoords rank_coords(int rank, const GroupLayout& l) {
  DL_CHECK(rank >= 0 && rank < l.world_size(), "process_groups",
           "rank " << rank << " out of range for " << l.world_size() << " ranks");
  return {rank % l.sequence_data_parallel, rank / l.sequence_data_parallel};
}

std::vector<int> sdp_group_ranks(int rank, const GroupLayout& l) {
  const RankCoords c = rank_coords(rank, l);
  std::vector<int> ranks;
  for (int s = 0; s < l.sequence_data_parallel; ++s)
    ranks.push_back(c.batch_rank * l.sequence_data_parallel + s);
  return ranks;
}

std::vector<int> batch_group_ranks(int rank, const GroupLayout& l) {
  const RankCoords c = rank_coords(rank, l);
  std::vector<int> ranks;
  for (int b = 0; b < l.data_parallel; ++b)
    ranks.push_back(b * l.sequence_data_parallel + c.sdp_rank);
  return ranks;
}

namespace {
// The ranks of MPI_COMM_WORLD with the same color, ordered by world rank.
std::unique_ptr<Communicator> split(int color, int world_rank, Device device,
                                    const CommOptions& options) {
  MPI_Comm comm = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split(MPI_COMM_WORLD, color, world_rank, &comm), "process_groups",
            "MPI_Comm_split");
  if (device == Device::cuda) return make_nccl_communicator(MpiComm(comm), options);
  return std::make_unique<MpiCommunicator>(MpiComm(comm), options);
}
}  // namespace

ProcessGroups::ProcessGroups(const World& world, GroupLayout layout, Device device)
    : layout_(layout) {
  validate_layout(world.size(), layout);
  coords_ = rank_coords(world.rank(), layout);
  const CommOptions& options = world.options().comm;
  if (!world.uses_mpi()) {
    data_ = make_single_process_communicator(options, device);
    sdp_ = make_single_process_communicator(options, device);
    batch_ = make_single_process_communicator(options, device);
    if (layout.context_parallel_group > 0) {
      cp_group_ = make_single_process_communicator(options, device);
      cp_ring_ = make_single_process_communicator(options, device);
    }
    return;
  }
  if (device == Device::cuda) select_local_gpu(world.local_rank());
  data_ = world.communicator(device);
  // MPI_Comm_split is collective over the world: every rank makes both splits in order.
  sdp_ = split(coords_.batch_rank, world.rank(), device, options);
  batch_ = split(coords_.sdp_rank, world.rank(), device, options);
  if (const int G = layout.context_parallel_group; G > 0) {
    cp_group_ = split(world.rank() / G, world.rank(), device, options);
    cp_ring_ = split(coords_.batch_rank * G + coords_.sdp_rank % G, world.rank(), device, options);
  }
}

ProcessGroups::~ProcessGroups() = default;

int run_guarded(const World& world, const std::function<void()>& fn) {
  std::string message;
  try {
    fn();
    return 0;
  } catch (const std::exception& e) {
    message = e.what();
  } catch (...) {
    message = "unknown exception";
  }
  std::fprintf(stderr, "rank %d: %s\n", world.rank(), message.c_str());
  std::fflush(stderr);
  if (world.uses_mpi()) world.abort(1);
  return 1;
}

}  // namespace driftless::parallel
