// See hf_files.h. Follows transformers' save_pretrained layout (shard names, index keys).
#include "layers/hf_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/autograd/autograd.h"
#include "engine/core/json_limits.h"
#include "engine/core/regular_file.h"

namespace driftless::layers {

nlohmann::json read_json_file(const char* op, const std::string& path) {
  const std::string text = read_regular_file(path, op);
  if (const auto deep = json_too_deep(text))
    DL_FAIL(op,
            path << ": JSON nested deeper than " << kMaxJsonDepth << " levels at byte " << *deep);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    DL_FAIL(op, path << " is not valid JSON: " << e.what());
  }
}

Tensor hf_float_weight(const char* op, const SafetensorsFile& file, const std::string& name) {
  const std::string& stored = file.entry(name).stored;
  DL_CHECK(stored == "F32" || stored == "F16" || stored == "BF16" || stored == "F64", op,
           file.path() << ": " << name << " is stored as " << stored
                       << "; expected a float weight (F32, F16, BF16 or F64)");
  return file.get(name).to(DType::f32);
}

void write_text_atomically(const char* op, const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    // Not through a symbolic link or a FIFO left under the temporary name.
    ::unlink(tmp.c_str());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    DL_CHECK(fd >= 0, op, "cannot write " << tmp << ": " << std::strerror(errno));
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ::close(fd);
        ::unlink(tmp.c_str());
        DL_FAIL(op, "writing " << tmp << " failed: " << std::strerror(errno));
      }
      done += size_t(n);
    }
    DL_CHECK(::close(fd) == 0, op, "writing " << tmp << " failed: " << std::strerror(errno));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    DL_FAIL(op, "cannot rename " << tmp << " to " << path);
  }
}

nlohmann::json read_hf_config(const char* op, const std::string& dir) {
  const std::string path = dir + "/config.json";
  DL_CHECK(std::filesystem::is_regular_file(path), op,
           path << (std::filesystem::exists(path) ? " is not a file" : " does not exist"));
  nlohmann::json j = read_json_file(op, path);
  DL_CHECK(j.is_object(), op, path << " must hold a JSON object, got " << j.type_name());
  return j;
}

std::vector<SafetensorsFile> open_hf_weights(const char* op, const std::string& dir,
                                             const std::string& hf_class) {
  namespace fs = std::filesystem;
  const std::string single = dir + "/model.safetensors";
  const std::string index = dir + "/model.safetensors.index.json";
  if (fs::exists(single)) {
    std::vector<SafetensorsFile> files;
    files.push_back(read_safetensors(single));
    return files;
  }
  if (fs::exists(index)) {
    const nlohmann::json j = read_json_file(op, index);
    DL_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), op,
             index << ": expected an object with a \"weight_map\" object");
    std::vector<std::string> shards;  // in order of first mention
    for (const auto& [name, shard] : j["weight_map"].items()) {
      DL_CHECK(shard.is_string(), op,
               index << ": weight_map[\"" << name << "\"] must be a file name, got "
                     << json_excerpt(shard.dump()));
      if (std::find(shards.begin(), shards.end(), shard.get<std::string>()) == shards.end())
        shards.push_back(shard.get<std::string>());
    }
    std::vector<SafetensorsFile> files;
    for (const auto& shard : shards) {
      DL_CHECK(fs::exists(dir + "/" + shard), op,
               index << " names shard " << shard << ", which does not exist in " << dir);
      files.push_back(read_safetensors(dir + "/" + shard));
    }
    for (const auto& [name, shard] : j["weight_map"].items()) {
      const size_t i = size_t(std::find(shards.begin(), shards.end(), shard.get<std::string>()) -
                              shards.begin());
      DL_CHECK(files[i].contains(name), op,
               index << " puts " << name << " in " << shard.get<std::string>()
                     << ", which does not hold it");
    }
    return files;
  }
  std::string found;
  for (const char* other : {"pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5",
                            "flax_model.msgpack", "model.ckpt.index"})
    if (fs::exists(dir + "/" + other)) found += std::string(found.empty() ? "" : ", ") + other;
  DL_FAIL(op, dir << " has no model.safetensors (nor model.safetensors.index.json)"
                  << (found.empty() ? "" : "; it has " + found)
                  << ". Only safetensors weights are read; convert with python3 -c \"from "
                     "transformers import "
                  << hf_class << "; " << hf_class << ".from_pretrained('" << dir
                  << "').save_pretrained('" << dir << "', safe_serialization=True)\"");
}

double hf_stored_bytes(const std::vector<SafetensorsFile>& files) {
  double stored = 0;
  for (const auto& file : files)
    for (const auto& name : file.names())
      stored += double(file.entry(name).end - file.entry(name).begin);
  return stored;
}

void write_hf_weights(const char* op, const std::string& dir,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      int64_t max_shard_bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  DL_CHECK(!ec, op, "cannot create directory " << dir << ": " << ec.message());
  // A stale index or shard next to a fresh model.safetensors (or the reverse) would be read
  // by whichever loader looks first.
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string f = entry.path().filename().string();
    if (f == "model.safetensors" || f == "model.safetensors.index.json" ||
        (f.rfind("model-", 0) == 0 && f.size() > 12 &&
         f.compare(f.size() - 12, 12, ".safetensors") == 0))
      fs::remove(entry.path(), ec);
  }
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  // Greedy in order, as save_pretrained's shard_checkpoint does; a tensor larger than the
  // limit gets a shard of its own.
  std::vector<std::vector<std::pair<std::string, Tensor>>> shards(1);
  int64_t in_shard = 0, total = 0;
  for (const auto& t : tensors) {
    const int64_t bytes = t.second.numel() * int64_t(dtype_size(t.second.dtype()));
    if (max_shard_bytes > 0 && in_shard > 0 && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(t);
    in_shard += bytes;
    total += bytes;
  }
  if (shards.size() == 1) {
    write_safetensors(dir + "/model.safetensors", tensors, meta);
    return;
  }
  nlohmann::json index;
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = nlohmann::json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    write_safetensors(dir + "/" + name, shards[s], meta);
    for (const auto& t : shards[s]) index["weight_map"][t.first] = name;
  }
  write_text_atomically(op, dir + "/model.safetensors.index.json", index.dump(2) + "\n");
}

void load_into(const HfModel& hf, Gpt& model) {
  autograd::NoGradGuard no_grad;
  size_t used = 0;
  for (const auto& p : model.slab().parameters()) {
    auto it = hf.params.find(p.name);
    DL_CHECK(it != hf.params.end(), "hf", "parameter " << p.name << " is missing");
    DL_CHECK(it->second.shape() == p.value.shape(), "hf",
             p.name << " has shape " << shape_str(it->second.shape()) << ", the model has "
                    << shape_str(p.value.shape()));
    p.value.copy_(it->second.to(p.value.device()));
    ++used;
  }
  DL_CHECK(used == hf.params.size(), "hf",
           hf.params.size() << " parameters imported, the model has " << used);
  model.slab().sync_compute();
}

std::map<std::string, Tensor> parameters_by_name(const Gpt& model) {
  std::map<std::string, Tensor> params;
  for (const auto& p : model.slab().parameters()) params[p.name] = p.value;
  return params;
}

}  // namespace driftless::layers
