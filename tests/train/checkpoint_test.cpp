// Checkpoint files: each tensor's checksum catches damaged data, non-finite values are
// refused, names whose step does not fit are errors naming the file, and retention keeps
// the newest.
#include "train/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/core/error.h"
#include "engine/core/safetensors.h"
#include "tests/test_paths.h"
#include "tests/train/tiny_run.h"
#include "train/resume.h"

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

// Replaces `from` by `to` (the same length) in the file's bytes: an edit by hand.
void edit_bytes(const std::string& path, const std::string& from, const std::string& to) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  const size_t at = bytes.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  bytes.replace(at, from.size(), to);
  std::ofstream(path, std::ios::binary) << bytes;
}

// Editing the step (5 -> 2) or the optimizer's step (-> 0) is found like damaged data.
TEST(Checkpoint, TheChecksumCoversTheMetadata) {
  const std::string path = testing::scratch_dir() + "/ckpt.safetensors";
  layers::Gpt model(tiny());
  model.init(3);
  save_checkpoint(path, model, nullptr, {5, "model: {}\n"});
  verify_checkpoint(path);
  edit_bytes(path, "\"step\":\"5\"", "\"step\":\"2\"");
  const std::string e = error_of([&] { verify_checkpoint(path); });
  EXPECT_NE(e.find(path + ": the metadata (step, optimizer step, config) does not match its "
                          "checksum"),
            std::string::npos)
      << e;
  layers::Gpt other(tiny());
  EXPECT_NE(error_of([&] { load_checkpoint(path, other, nullptr); }).find("metadata"),
            std::string::npos);
}

// Files written before the metadata had a checksum still load; what can be checked is:
// the optimizer's step against the step, and (by --resume) the step against the file name.
TEST(Checkpoint, OlderFilesAreCheckedForAnImpossibleStep) {
  const std::string dir = testing::scratch_dir();
  layers::Gpt model(tiny());
  model.init(3);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& p : model.slab().parameters()) tensors.push_back({"model." + p.name, p.value});
  const std::string path = checkpoint_path(dir, 5);
  std::filesystem::create_directories(dir + "/checkpoints");
  write_safetensors(path, tensors,
                    {{"format", kCheckpointFormat},
                     {"step", "5"},
                     {"optim_step", "9"},
                     {"config", "model: {}\n"}});
  EXPECT_NE(error_of([&] { verify_checkpoint(path); }).find("optim_step 9 exceeds the 6 steps"),
            std::string::npos);
  write_safetensors(path, tensors,
                    {{"format", kCheckpointFormat}, {"step", "2"}, {"config", "model: {}\n"}});
  verify_checkpoint(path);  // nothing in the file itself says it is wrong
  std::ostringstream log;
  const std::string e = error_of([&] { newest_intact_checkpoint(dir, log); });
  EXPECT_NE(e.find("none of the 1 checkpoints"), std::string::npos) << e;
  EXPECT_NE(log.str().find(path + ": its metadata says step 2, its name step 5"), std::string::npos)
      << log.str();
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
  // Names driftless cannot have written are not checkpoints, nor errors that would block
  // --resume and --overwrite: a step of 30 digits, a directory, a FIFO.
  std::ofstream(dir + "/checkpoints/step_" + std::string(30, '9') + ".safetensors") << "x";
  fs::create_directories(checkpoint_path(dir, 99));
  ASSERT_EQ(::mkfifo(checkpoint_path(dir, 98).c_str(), 0600), 0);
  all = list_checkpoints(dir);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(latest_checkpoint(dir), checkpoint_path(dir, 10));
}

}  // namespace
}  // namespace driftless::train
