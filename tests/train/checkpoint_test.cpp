// Checkpoint files: each tensor's checksum catches damaged data, non-finite values are
// refused, names whose step does not fit are errors naming the file, and retention keeps
// the newest.
#include "train/checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/core/error.h"
#include "engine/core/safetensors.h"
#include "tests/test_paths.h"
#include "tests/train/tiny_run.h"

namespace driftless::train {
namespace {

namespace fs = std::filesystem;

using tiny_run::error_of;

layers::GptConfig tiny() {
  layers::GptConfig c;
  c.vocab_size = 17;
  c.n_positions = 8;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 8;
  return c;
}

TEST(Checkpoint, ChecksumsFindDamagedData) {
  const std::string path = testing::scratch_dir() + "/ckpt.safetensors";
  layers::Gpt model(tiny());
  model.init(3);
  save_checkpoint(path, model, nullptr, {4, "model: {}\n"});
  verify_checkpoint(path);
  const std::string first = "model." + model.slab().parameters().front().name;
  const auto begin = read_safetensors(path).entry(first).begin;
  const auto data_start = fs::file_size(path) - model.slab().numel() * 4;
  {
    // One flipped bit in the first tensor, still a finite number.
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(data_start + begin));
    char c = 0;
    f.read(&c, 1);
    c = char(c ^ 1);
    f.seekp(std::streamoff(data_start + begin));
    f.write(&c, 1);
  }
  const std::string e = error_of([&] { verify_checkpoint(path); });
  EXPECT_NE(e.find(path + ": the data of " + first + " does not match its checksum"),
            std::string::npos)
      << e;
  layers::Gpt other(tiny());
  EXPECT_NE(error_of([&] { load_checkpoint(path, other, nullptr); }).find("damaged"),
            std::string::npos);
  // A truncated file (a copy cut short) is refused by name too.
  fs::resize_file(path, fs::file_size(path) - 5);
  EXPECT_NE(error_of([&] { verify_checkpoint(path); }).find(path), std::string::npos);
}

TEST(Checkpoint, NonFiniteValuesAreRefusedWithoutChecksums) {
  // A file with no checksums (as written before they existed) still may not hold NaN.
  const std::string path = testing::scratch_dir() + "/old.safetensors";
  layers::Gpt model(tiny());
  model.init(3);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& p : model.slab().parameters()) tensors.push_back({"model." + p.name, p.value});
  Tensor bad = tensors.back().second.clone();
  std::vector<uint8_t> ff(4, 0xFF);
  std::memcpy(bad.raw_data(), ff.data(), 4);
  tensors.back().second = bad;
  write_safetensors(path, tensors,
                    {{"format", kCheckpointFormat}, {"step", "1"}, {"config", "model: {}\n"}});
  const std::string e = error_of([&] { verify_checkpoint(path); });
  EXPECT_NE(e.find(tensors.back().first + " holds a NaN at element 0"), std::string::npos) << e;
}

TEST(Checkpoint, ListingNewestFirstAndRetention) {
  const std::string dir = testing::scratch_dir();
  fs::create_directories(dir + "/checkpoints");
  for (int s : {3, 10, 7, 1}) std::ofstream(checkpoint_path(dir, s)) << "x";
  std::ofstream(dir + "/checkpoints/step_000005.safetensors.tmp.99") << "x";
  auto all = list_checkpoints(dir);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].first, 10);
  EXPECT_EQ(all[3].first, 1);
  EXPECT_EQ(latest_checkpoint(dir), checkpoint_path(dir, 10));
  prune_checkpoints(dir, 2);
  all = list_checkpoints(dir);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1].first, 7);
  prune_checkpoints(dir, 0);  // 0 keeps all
  EXPECT_EQ(list_checkpoints(dir).size(), 2u);
  // A step number of 20 digits is an error that names the file, not a crash.
  const std::string huge = dir + "/checkpoints/step_99999999999999999999.safetensors";
  std::ofstream(huge) << "x";
  const std::string e = error_of([&] { latest_checkpoint(dir); });
  EXPECT_NE(e.find(huge + ": expected a step number below 2^63"), std::string::npos) << e;
}

}  // namespace
}  // namespace driftless::train
