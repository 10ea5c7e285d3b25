// Reading only regular files (engine/core/regular_file.h), bounded JSON (json_limits.h) and
// overflow-checked sizes (checked_size.h): a FIFO or a directory is refused at once, never
// waited on; deep nesting is found on the raw text; products that wrap are refused.
#include "engine/core/regular_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "engine/core/checked_size.h"
#include "engine/core/error.h"
#include "engine/core/json_limits.h"
#include "engine/core/mapped_file.h"
#include "engine/core/safetensors.h"
#include "engine/core/tensor.h"
#include "tests/error_of.h"
#include "tests/test_paths.h"

namespace driftless {
namespace {

using testing::error_of;

// Each of these would block in open() for a FIFO without a writer; the test would hang.
TEST(RegularFile, FifosAndDirectoriesAreRefusedNotWaitedOn) {
  const std::string dir = testing::scratch_dir();
  const std::string fifo = dir + "/step_000009.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(error_of([&] {
              read_regular_file(fifo, "config");
            }).find("[config] expected a regular file, got " + fifo + " (a FIFO)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { MappedFile m(fifo, "dataset"); }).find("(a FIFO)"), std::string::npos);
  EXPECT_NE(error_of([&] { read_safetensors(fifo); }).find("(a FIFO)"), std::string::npos);
  EXPECT_NE(error_of([&] { read_regular_file(dir, "config"); }).find("(a directory)"),
            std::string::npos);
  EXPECT_EQ(non_regular_kind(fifo), "a FIFO");
  EXPECT_EQ(non_regular_kind(dir + "/absent"), "");
  std::ofstream(dir + "/a.txt") << "hello";
  EXPECT_EQ(read_regular_file(dir + "/a.txt", "config"), "hello");
  EXPECT_NE(error_of([&] { read_regular_file(dir + "/a.txt", "config", 3); }).find("at most 3"),
            std::string::npos);
}

TEST(JsonLimits, NestingIsMeasuredOnTheTextOutsideStrings) {
  EXPECT_FALSE(json_too_deep("{\"a\": [[1]]}", 3));
  EXPECT_EQ(json_too_deep("{\"a\": [[[1]]]}", 3), 8u);
  EXPECT_FALSE(json_too_deep("{\"a\": \"[[[[\\\"[[[[\"}", 1));  // brackets inside a string
  EXPECT_EQ(json_too_deep(std::string(100000, '['), 64), 64u);
  EXPECT_EQ(json_integer(nlohmann::json(12)), 12);
  EXPECT_EQ(json_integer(nlohmann::json(1e9)), 1000000000);  // Python's 1000000000.0
  EXPECT_FALSE(json_integer(nlohmann::json(1.7)));
  EXPECT_FALSE(json_integer(nlohmann::json(257.9)));
  EXPECT_FALSE(json_integer(nlohmann::json("12")));
  EXPECT_FALSE(json_integer(nlohmann::json(1e300)));
}

TEST(CheckedSize, ProductsThatWrapOrGoNegativeAreRefused) {
  EXPECT_EQ(checked_product({8, 2, 3}, 8), 384);
  EXPECT_FALSE(checked_product({8, 2, (int64_t(1) << 57) + 1}, 8));  // 2^64 + 128 wraps to 128
  EXPECT_FALSE(checked_product({12, -3}));
  EXPECT_FALSE(checked_product({12, int64_t(1) << 62}));
  EXPECT_EQ(checked_product({}), 1);
  EXPECT_NE(error_of([] {
              Tensor::empty({int64_t(1) << 40, int64_t(1) << 40});
            }).find("expected a shape whose bytes fit in 63 bits"),
            std::string::npos);
}

}  // namespace
}  // namespace driftless
