// The NCCL backend of the Communicator (ARCHITECTURE.md "Communicator"): cuda tensors, one GPU
// per rank. Compiled only with CUDA; without it these functions throw driftless::Error.
#pragma once
#include <mpi.h>

#include <memory>

#include "parallel/communicator.h"
#include "parallel/mpi_communicator.h"

namespace driftless::parallel {

// Makes the rank's GPU (local_rank modulo the visible devices) current; throws
// "rank R has no GPU" when none is visible. Returns the device index.
int select_local_gpu(int local_rank);

// An NCCL communicator over the ranks of group (ownership taken; kept for the unique-id
// bootstrap and the barrier). Rank 0 of the group makes the unique id; MPI_Bcast shares it.
std::unique_ptr<Communicator> make_nccl_communicator(MpiComm group, CommOptions options = {});

}  // namespace driftless::parallel
