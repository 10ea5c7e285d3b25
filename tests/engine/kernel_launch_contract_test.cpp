// The launch contract of engine/core/cuda/launch.cuh, checked over the sources (CPU, so CI
// checks it): kernels launch through cuda::launch, which on sm_90 lets a kernel be placed
// before the kernel ahead of it ends, so every kernel must begin with
// cuda::dependent_kernel_begin() (the wait for that kernel's writes). A kernel without it
// would read stale memory only sometimes; no compiler and few tests would notice.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_paths.h"

namespace driftless {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> cuda_sources() {
  std::vector<fs::path> out;
  for (const char* dir : {"engine", "layers", "parallel", "apps"})
    for (const auto& e : fs::recursive_directory_iterator(fs::path(testing::source_dir()) / dir)) {
      const std::string ext = e.path().extension().string();
      if (e.is_regular_file() && (ext == ".cu" || ext == ".cuh")) out.push_back(e.path());
    }
  return out;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The body of the kernel whose `__global__` is at `at`: from the `{` after its parameter
// list (the last `)` before the first `{`; attributes such as __launch_bounds__ come first).
std::string body_start(const std::string& src, size_t at) {
  const size_t open = src.find('{', at);
  if (open == std::string::npos) return "";
  const size_t end = src.find_first_of(";}", open + 1);
  return src.substr(open + 1, end == std::string::npos ? std::string::npos : end - open);
}

TEST(KernelLaunchContract, EveryKernelBeginsWithTheDependencyWait) {
  const std::regex first(R"(^\s*cuda::dependent_kernel_begin\(\);)");
  int kernels = 0;
  for (const fs::path& p : cuda_sources()) {
    const std::string src = read(p);
    for (size_t at = src.find("__global__"); at != std::string::npos;
         at = src.find("__global__", at + 1)) {
      ++kernels;
      const size_t line = size_t(std::count(src.begin(), src.begin() + long(at), '\n')) + 1;
      EXPECT_TRUE(std::regex_search(body_start(src, at), first))
          << p << ":" << line << ": a kernel whose first statement is not "
          << "cuda::dependent_kernel_begin();";
    }
  }
  EXPECT_GT(kernels, 30) << "the scan found too few kernels: sources moved?";
}

TEST(KernelLaunchContract, NoTripleChevronLaunches) {
  for (const fs::path& p : cuda_sources()) {
    if (p.filename() == "launch.cuh") continue;  // its comment shows the syntax
    const std::string src = read(p);
    EXPECT_EQ(src.find("<<<"), std::string::npos)
        << p << " launches a kernel with <<<>>>: use cuda::launch (launch.cuh)";
  }
}

}  // namespace
}  // namespace driftless
