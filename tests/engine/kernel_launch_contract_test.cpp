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
      if (e.is_regular_file() &&
          (ext == ".cu" || ext == ".cuh" || ext == ".h" || ext == ".hpp" || ext == ".inl"))
        out.push_back(e.path());
    }
  return out;
}

// The file with its comments blanked (newlines kept, so line numbers stay): a `__global__`
// or `<<<` in a comment is not code.
std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    if (s[i] == '"') {  // skip string literals
      for (++i; i < s.size() && s[i] != '"'; ++i)
        if (s[i] == '\\') ++i;
    } else if (s[i] == '/' && s[i + 1] == '/') {
      for (; i < s.size() && s[i] != '\n'; ++i) s[i] = ' ';
    } else if (s[i] == '/' && s[i + 1] == '*') {
      for (; i + 1 < s.size() && !(s[i] == '*' && s[i + 1] == '/'); ++i)
        if (s[i] != '\n') s[i] = ' ';
      if (i + 1 < s.size()) s[i] = s[i + 1] = ' ';
    }
  }
  return s;
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

TEST(KernelLaunchContract, EveryLaunchGoesThroughCudaLaunch) {
  for (const fs::path& p : cuda_sources()) {
    const std::string src = read(p);
    EXPECT_EQ(src.find("<<<"), std::string::npos)
        << p << " launches a kernel with <<<>>>: use cuda::launch (launch.cuh)";
    if (p.filename() == "launch.cuh") continue;  // the one direct launch
    EXPECT_EQ(src.find("cudaLaunchKernel"), std::string::npos)
        << p << " launches a kernel itself: use cuda::launch (launch.cuh)";
    EXPECT_EQ(src.find("cudaLaunchCooperativeKernel"), std::string::npos) << p;
  }
}

}  // namespace
}  // namespace driftless
