// What --resume continues from: the newest checkpoint of the run directory that verifies
// (checksums, finite values), falling back past damaged newer ones and saying so, and the
// rule that a config key changed since the checkpoint, which would break bit-for-bit
// continuation, is refused unless the user allows it by name (docs/guarantees.md).
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

#include "train/config.h"

namespace driftless::train {

// The newest intact checkpoint of run_dir; each damaged newer one is reported on log with
// the reason. Throws when there is no checkpoint, or none intact.
std::string newest_intact_checkpoint(const std::string& run_dir, std::ostream& log);

// Keys whose change keeps every number of the run the same (evaluation, logging,
// checkpointing, paths and timeouts); training.steps too when the learning rate does not
// depend on it (optimizer.decay constant).
bool changes_no_numbers(const std::string& key, const Config& stored, const Config& now);

// Throws, listing every changed key with both values and the --allow-change flags, when a
// key that changes the numbers differs between the checkpoint's config and this run's and
// is not in `allowed`; allowed changes are reported on log.
void check_resume_config(const std::string& checkpoint, const Config& stored, const Config& now,
                         const std::vector<std::string>& allowed, std::ostream& log);

}  // namespace driftless::train
