// The file side shared by the HuggingFace converters (hf_gpt2.h, hf_llama.h): config.json
// values with defaults, save_pretrained's weight files (one model.safetensors or shards named
// by model.safetensors.index.json) both ways, and the model-independent half of importing.
#pragma once
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/json_limits.h"
#include "engine/core/safetensors.h"
#include "engine/core/tensor.h"
#include "layers/gpt.h"

namespace driftless::layers {

// A model in our names and layouts ((out, in) weights), f32 on cpu.
struct HfModel {
  GptConfig config;
  std::map<std::string, Tensor> params;
};

// A config.json value or `fallback` when absent or null; a present value of the wrong type is
// an error naming the key (`op` starts the message).
// An integer key must hold a JSON integer (n_layer 1.7 is refused, not truncated).
template <typename T>
T hf_value_or(const char* op, const nlohmann::json& hf, const char* key, T fallback) {
  auto it = hf.find(key);
  if (it == hf.end() || it->is_null()) return fallback;
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (it->is_number()) {
      const std::optional<int64_t> v = json_integer(*it);
      DL_CHECK(v && *v >= int64_t(std::numeric_limits<T>::min()) &&
                   (*v < 0 || uint64_t(*v) <= uint64_t(std::numeric_limits<T>::max())),
               op, "config.json: " << key << " must be an integer, got " << it->dump());
      return T(*v);
    }
  }
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    DL_FAIL(op, "config.json: " << key << " has the wrong type (" << it->dump() << ")");
  }
}

// A JSON file (a regular file, nested at most kMaxJsonDepth deep), parsed.
nlohmann::json read_json_file(const char* op, const std::string& path);
// A weight of `file` as f32; a weight stored as an integer or bool type is refused, naming it.
Tensor hf_float_weight(const char* op, const SafetensorsFile& file, const std::string& name);
void write_text_atomically(const char* op, const std::string& path, const std::string& text);
// DIR/config.json, parsed; an error when it does not exist.
nlohmann::json read_hf_config(const char* op, const std::string& dir);

// The weight files of a save_pretrained directory: model.safetensors, or the shards that
// model.safetensors.index.json names (each checked to hold what the index puts in it). Other
// formats are refused with the way to convert them (`hf_class`: "LlamaForCausalLM", ...).
std::vector<SafetensorsFile> open_hf_weights(const char* op, const std::string& dir,
                                             const std::string& hf_class);
// Total stored bytes of `files`: a bound on the parameters config.json may ask for, checked
// before anything is allocated.
double hf_stored_bytes(const std::vector<SafetensorsFile>& files);

// Writes `tensors` (HF names, in order) into DIR as save_pretrained does: one
// model.safetensors when max_shard_bytes is 0 or they fit, else model-0000i-of-0000n.safetensors
// and model.safetensors.index.json (metadata.total_size, weight_map). Metadata format "pt",
// which transformers requires. Creates DIR and removes weight files a previous export left.
void write_hf_weights(const char* op, const std::string& dir,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      int64_t max_shard_bytes = 0);

// Copies `hf.params` into `model` by slab name (every parameter present, shapes equal).
void load_into(const HfModel& hf, Gpt& model);
// The slab of `model` by name (f32 views; callers convert when writing).
std::map<std::string, Tensor> parameters_by_name(const Gpt& model);

}  // namespace driftless::layers
