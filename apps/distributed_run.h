// The process wiring every training command shares (train, bench train): the MPI world,
// the process groups of the config's layout (NCCL for cuda runs), the SDP K/V exchange, and
// the rule that an error on one rank ends the whole job (MPI_Abort), never a hang.
#pragma once
#include <functional>

#include "train/config.h"
#include "train/trainer.h"

namespace driftless::apps {

// Configures the process kernel cache from the config, then calls body(options) with rank,
// data group and SDP exchange filled in; returns its status.
// One process: errors propagate to main (one "driftless: error:" line).
int run_distributed(const train::Config& config,
                    const std::function<int(train::TrainerOptions&)>& body);

}  // namespace driftless::apps
