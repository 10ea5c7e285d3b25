// Paths of the source and build trees for tests (golden files, configs, scratch space).
#pragma once
#include <string>

namespace driftless::testing {
std::string source_dir();
std::string binary_dir();
// A fresh empty scratch folder under the build tree, named after the current test.
std::string scratch_dir();
}  // namespace driftless::testing
