// Runs a regression: each layout as `driftless train` in a child process (under mpirun when
// it has several ranks), then compares each against its baseline and writes the reports.
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

#include "train/regress.h"

namespace driftless::train {

struct RegressRunOptions {
  std::string driftless_binary;  // path of the driftless executable
  std::string mpirun = "mpirun";
  bool keep_going = true;        // run every layout even after a failure
};

// Returns one result per compared layout (baselines marked "none" are not listed).
std::vector<LayoutResult> run_regression(const RegressConfig& config,
                                         const RegressRunOptions& options, std::ostream& log);

}  // namespace driftless::train
