// open_dataset: picks the format from the path (see dataset.h).
#include "data/dataset.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/llmc_shards.h"
#include "data/memmap_dataset.h"
#include "engine/core/error.h"
#include "engine/core/json_limits.h"
#include "engine/core/regular_file.h"

namespace driftless::data {

std::unique_ptr<Dataset> open_dataset(const std::string& path, int32_t vocab_size,
                                      int32_t end_of_text) {
  namespace fs = std::filesystem;
  auto defaults = [&](int32_t vocab, int32_t eot) {
    if (vocab_size <= 0) vocab_size = vocab;
    if (end_of_text < 0) end_of_text = eot;
  };
  auto strip = [](const std::string& p, const std::string& ext) {
    return p.size() > ext.size() && p.compare(p.size() - ext.size(), ext.size(), ext) == 0
               ? p.substr(0, p.size() - ext.size())
               : p;
  };
  if (fs::is_directory(path)) {  // a folder of llm.c shards, in name order
    defaults(50257, 50256);
    std::vector<std::string> shards;
    for (const auto& e : fs::directory_iterator(path))
      if (e.path().extension() == ".bin" && LlmcShardDataset::is_shard(e.path().string()))
        shards.push_back(e.path().string());
    std::sort(shards.begin(), shards.end());
    DL_CHECK(!shards.empty(), "dataset", "expected llm.c .bin shards in folder " << path);
    return std::make_unique<LlmcShardDataset>(shards, vocab_size, end_of_text);
  }
  if (fs::is_regular_file(path) && LlmcShardDataset::is_shard(path)) {
    defaults(50257, 50256);
    return std::make_unique<LlmcShardDataset>(std::vector<std::string>{path}, vocab_size,
                                              end_of_text);
  }
  std::string prefix = strip(strip(path, ".bin"), ".idx");
  DL_CHECK(fs::exists(prefix + ".idx") && fs::exists(prefix + ".bin"), "dataset",
           "expected PREFIX.bin + PREFIX.idx, an llm.c shard or a folder of shards, got " << path);
  if (fs::exists(prefix + ".json")) {
    const std::string json_path = prefix + ".json";
    DL_CHECK(fs::is_regular_file(json_path), "dataset",
             "expected " << json_path
                         << " to be a file of JSON metadata, got a directory or "
                            "another kind of file");
    int64_t vocab = 0, eot = 0;
    const std::string text = read_regular_file(json_path, "dataset", size_t(1) << 20);
    DL_CHECK(!json_too_deep(text), "dataset",
             "expected JSON metadata in " << json_path << ", got nesting deeper than "
                                          << kMaxJsonDepth << " levels");
    try {
      const nlohmann::json meta = nlohmann::json::parse(text);
      DL_CHECK(meta.is_object(), "dataset",
               "expected a JSON object in " << json_path << ", got " << meta.type_name());
      // An integer key holds a JSON integer: 257.9 is refused, not truncated to 257.
      auto integer = [&](const char* key, int64_t fallback) {
        if (!meta.contains(key)) return fallback;
        const std::optional<int64_t> v = json_integer(meta[key]);
        DL_CHECK(v, "dataset",
                 json_path << ": expected an integer " << key << ", got "
                           << json_excerpt(meta[key].dump()));
        return *v;
      };
      vocab = integer("vocab_size", 50257);
      eot = integer("end_of_text", 50256);
    } catch (const nlohmann::json::exception& e) {
      DL_FAIL("dataset", "expected JSON metadata with integer vocab_size and end_of_text in "
                             << json_path << ", got " << e.what());
    }
    DL_CHECK(
        vocab >= 2 && vocab <= (int64_t(1) << 31) - 1 && eot >= 0 && eot < vocab, "dataset",
        json_path << ": expected 2 <= vocab_size < 2^31 and 0 <= end_of_text < vocab_size, got "
                  << vocab << " and " << eot);
    defaults(int32_t(vocab), int32_t(eot));
  }
  defaults(50257, 50256);
  return std::make_unique<MemmapDataset>(prefix, vocab_size, end_of_text);
}

}  // namespace driftless::data
