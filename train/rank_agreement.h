// Ranks of one job agreeing before and during a run: the same resolved configuration and
// parameter layout before step 0 (a mismatch names the first differing key instead of
// crashing in a collective or training silently apart), and one value per step (the stop
// signal) so that every rank ends at the same step. All calls are collective.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "parallel/communicator.h"

namespace driftless::train {

using Entries = std::vector<std::pair<std::string, std::string>>;

// Every rank's text, in rank order (any lengths). comm moves cpu or cuda tensors.
std::vector<std::string> all_gather_text(parallel::Communicator& comm, const std::string& text);

// Ranks compare a hash of entries; when they differ, every rank throws the same
// driftless::Error naming the first key whose value differs from rank 0's, with both
// values ("model.n_layer is 2 on rank 0 but 4 on rank 1"). `what` names the entries.
void check_ranks_agree(parallel::Communicator& comm, const Entries& entries,
                       const std::string& what);

// The largest of the ranks' values (every rank gets it).
int64_t all_ranks_max(parallel::Communicator& comm, int64_t value);

}  // namespace driftless::train
