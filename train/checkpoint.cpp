// Checkpoint save/load (checkpoint.h).
#include "train/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "engine/autograd/autograd.h"
#include "engine/core/checksum.h"
#include "engine/core/json_limits.h"
#include "engine/core/safetensors.h"
#include "engine/optim/clip.h"
#include "train/config.h"

namespace driftless::train {

namespace fs = std::filesystem;

namespace {
constexpr const char* kChecksumsKey = "checksums";
}  // namespace

std::string checkpoint_path(const std::string& run_dir, int64_t step) {
  std::ostringstream os;
  os << run_dir << "/checkpoints/step_" << std::setw(6) << std::setfill('0') << step
     << ".safetensors";
  return os.str();
}

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& run_dir) {
  const fs::path dir = fs::path(run_dir) / "checkpoints";
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  const std::regex pattern(R"(step_(\d+)\.safetensors)");
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (!std::regex_match(name, m, pattern)) continue;
    // Names driftless cannot have written are not checkpoints: a directory, a FIFO, or a
    // step past 2^63 (step_<30 digits>) is left alone rather than read or refused.
    if (!e.is_regular_file(ec)) continue;
    const std::string digits = m[1];
    int64_t step = 0;
    const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), step);
    if (r.ec != std::errc() || r.ptr != digits.data() + digits.size()) continue;
    out.emplace_back(step, e.path().string());
  }
  std::sort(out.begin(), out.end(), std::greater<>());
  return out;
}

std::string latest_checkpoint(const std::string& run_dir) {
  const auto all = list_checkpoints(run_dir);
  return all.empty() ? "" : all.front().second;
}

void prune_checkpoints(const std::string& run_dir, int64_t keep) {
  if (keep <= 0) return;
  const auto all = list_checkpoints(run_dir);
  for (size_t i = size_t(keep); i < all.size(); ++i) {
    std::error_code ec;
    fs::remove(all[i].second, ec);
    DL_CHECK(!ec, "checkpoint",
             "training.keep_checkpoints: cannot remove " << all[i].second << ": " << ec.message());
  }
}

OptimizerSnapshot OptimizerSnapshot::of(const optim::AdamW& opt) {
  return {opt.state().m, opt.state().v, opt.state().step, opt.shard_begin(), opt.shard_end()};
}

void save_checkpoint(const std::string& path, const layers::Gpt& model,
                     const OptimizerSnapshot* optimizer, const CheckpointInfo& info) {
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent);
  const std::string bad = first_non_finite_parameter(model);
  DL_CHECK(bad.empty(), "checkpoint",
           "not writing " << path << ": parameter " << bad
                          << " holds a NaN or an infinity (a checkpoint must be resumable)");
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& p : model.slab().parameters()) tensors.push_back({"model." + p.name, p.value});
  std::map<std::string, std::string> meta{{"format", kCheckpointFormat},
                                          {"step", std::to_string(info.step)},
                                          {"config", info.config_yaml}};
  if (optimizer) {
    tensors.push_back({"optim.m", optimizer->m});
    tensors.push_back({"optim.v", optimizer->v});
    meta["optim_step"] = std::to_string(optimizer->step);
    meta["optim_shard"] = std::to_string(optimizer->begin) + ":" + std::to_string(optimizer->end);
  }
  write_safetensors(path, tensors, meta, kChecksumsKey);
}

namespace {
std::string metadata(const SafetensorsFile& f, const std::string& key) {
  auto it = f.metadata().find(key);
  DL_CHECK(it != f.metadata().end(), "checkpoint",
           f.path() << " has no '" << key << "' metadata; not a driftless checkpoint");
  return it->second;
}

// A non-negative integer of the metadata (text, so damage there is no exception of stoll).
int64_t metadata_int(const SafetensorsFile& f, const std::string& key, const std::string& text) {
  int64_t v = -1;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  DL_CHECK(r.ec == std::errc() && r.ptr == text.data() + text.size() && v >= 0, "checkpoint",
           f.path() << ": expected a non-negative integer in the '" << key << "' metadata, got '"
                    << text << "'");
  return v;
}

CheckpointInfo info_of(const SafetensorsFile& f) {
  DL_CHECK(
      metadata(f, "format") == kCheckpointFormat, "checkpoint",
      f.path() << " has format '" << metadata(f, "format") << "', expected " << kCheckpointFormat);
  CheckpointInfo info;
  info.step = metadata_int(f, "step", metadata(f, "step"));
  info.config_yaml = metadata(f, "config");
  return info;
}

// verify_checkpoint's checks on an open file.
void verify(const SafetensorsFile& f) {
  info_of(f);
  nlohmann::json sums = nlohmann::json::object();
  auto it = f.metadata().find(kChecksumsKey);
  if (it != f.metadata().end()) {
    try {
      DL_CHECK(!json_too_deep(it->second), "checkpoint",
               f.path() << ": the stored checksums are nested too deep; the file is damaged");
      sums = nlohmann::json::parse(it->second);
    } catch (const nlohmann::json::exception&) {
      DL_FAIL("checkpoint", f.path() << ": the stored checksums are not JSON; the file is damaged");
    }
  }
  // The metadata (step, optimizer step, config) is covered by its own checksum. Files
  // written before it existed have none and load as before; their step is still checked
  // against the file's name by --resume.
  if (sums.contains(kMetadataChecksumName))
    DL_CHECK(
        sums[kMetadataChecksumName] == safetensors_metadata_checksum(f.metadata(), kChecksumsKey),
        "checkpoint",
        f.path() << ": the metadata (step, optimizer step, config) does not match its "
                    "checksum; the file is damaged or was edited");
  if (f.metadata().count("optim_step")) {
    const int64_t step = metadata_int(f, "step", metadata(f, "step"));
    const int64_t optim_step = metadata_int(f, "optim_step", metadata(f, "optim_step"));
    DL_CHECK(optim_step <= step + 1, "checkpoint",
             f.path() << ": optim_step " << optim_step << " exceeds the " << step + 1
                      << " steps of step " << step << "; the file is damaged");
  }
  for (const std::string& name : f.names()) {
    const SafetensorsFile::Entry& e = f.entry(name);
    const unsigned char* data = f.bytes(name);
    const size_t n = size_t(e.end - e.begin);
    if (sums.contains(name))
      DL_CHECK(sums[name] == checksum_hex(checksum64(data, n)), "checkpoint",
               f.path() << ": the data of " << name
                        << " does not match its checksum; the file is damaged");
    if (e.stored != "F32") continue;
    for (size_t i = 0; i < n / 4; ++i) {
      float v;
      std::memcpy(&v, data + 4 * i, 4);
      DL_CHECK(std::isfinite(v), "checkpoint",
               f.path() << ": " << name << " holds " << (std::isnan(v) ? "a NaN" : "an infinity")
                        << " at element " << i << "; a checkpoint's values must be finite");
    }
  }
}
}  // namespace

CheckpointInfo read_checkpoint_info(const std::string& path) {
  return info_of(read_safetensors(path));
}

void verify_checkpoint(const std::string& path) {
  verify(read_safetensors(path));
}

std::string first_non_finite_parameter(const layers::Gpt& model) {
  for (const auto& p : model.slab().parameters())
    if (!std::isfinite(optim::grad_norm_squared(p.value))) return p.name;
  return "";
}

CheckpointInfo load_checkpoint(const std::string& path, layers::Gpt& model,
                               optim::AdamW* optimizer) {
  SafetensorsFile f = read_safetensors(path);
  CheckpointInfo info = info_of(f);
  verify(f);
  autograd::NoGradGuard no_grad;
  for (const auto& p : model.slab().parameters()) {
    Tensor t = f.get("model." + p.name);
    DL_CHECK(t.shape() == p.value.shape(), "checkpoint",
             path << ": model." << p.name << " has shape " << shape_str(t.shape())
                  << ", the model expects " << shape_str(p.value.shape()));
    p.value.copy_(t);
  }
  model.slab().sync_compute();
  if (optimizer) {
    DL_CHECK(f.contains("optim.m") && f.contains("optim.v"), "checkpoint",
             path << " holds no optimizer state (optim.m, optim.v)");
    const std::string shard = metadata(f, "optim_shard");
    const size_t colon = std::min(shard.find(':'), shard.size());
    const int64_t begin = metadata_int(f, "optim_shard", shard.substr(0, colon));
    const int64_t end =
        metadata_int(f, "optim_shard", shard.substr(std::min(colon + 1, shard.size())));
    const int64_t b = optimizer->shard_begin(), e = optimizer->shard_end();
    DL_CHECK(begin <= b && e <= end, "checkpoint",
             path << ": stored optimizer state covers [" << begin << ", " << end
                  << "), this rank needs [" << b << ", " << e << ")");
    optimizer->load_state(f.get("optim.m").narrow(0, b - begin, e - b),
                          f.get("optim.v").narrow(0, b - begin, e - b),
                          metadata_int(f, "optim_step", metadata(f, "optim_step")));
  }
  return info;
}

void init_from_checkpoint(const std::string& path, layers::Gpt& model) {
  DL_CHECK(fs::is_regular_file(path), "checkpoint",
           "training.init_from: " << path << " does not exist");
  const layers::GptConfig s = parse_config_text(read_checkpoint_info(path).config_yaml).model;
  const layers::GptConfig& m = model.config();
  std::ostringstream differ;  // "--set model.key=stored" for each key that differs
  differ << std::boolalpha;
  auto check = [&](const char* key, auto stored, auto run) {
    if (stored != run) differ << " --set model." << key << "=" << stored;
  };
  check("architecture", config_name(s.architecture), config_name(m.architecture));
  check("vocab_size", s.vocab_size, m.vocab_size);
  check("n_positions", s.n_positions, m.n_positions);
  check("n_layer", s.n_layer, m.n_layer);
  check("n_head", s.n_head, m.n_head);
  check("n_kv_head", s.kv_heads(), m.kv_heads());
  check("n_embd", s.n_embd, m.n_embd);
  check("softcap", s.softcap, m.softcap);
  check("alibi", s.alibi, m.alibi);
  check("intermediate_size", s.intermediate_size, m.intermediate_size);
  check("rms_norm_eps", s.rms_norm_eps, m.rms_norm_eps);
  check("rope_theta", s.rope_theta, m.rope_theta);
  check("tie_word_embeddings", s.tie_word_embeddings, m.tie_word_embeddings);
  check("sliding_window", s.sliding_window, m.sliding_window);
  DL_CHECK(differ.str().empty(), "checkpoint",
           "training.init_from: " << path
                                  << " holds another model; expected the run's model "
                                     "section to match it:"
                                  << differ.str());
  load_checkpoint(path, model, nullptr);
}

}  // namespace driftless::train
