// See test_paths.h.
#include "tests/test_paths.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace driftless::testing {
std::string source_dir() { return DL_SOURCE_DIR; }
std::string binary_dir() { return DL_BINARY_DIR; }
std::string scratch_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "none";
  auto dir = std::filesystem::path(DL_BINARY_DIR) / "scratch" / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}
}  // namespace driftless::testing
