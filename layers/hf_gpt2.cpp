// See hf_gpt2.h. The HF side follows transformers' GPT2Config / GPT2LMHeadModel.
#include "layers/hf_gpt2.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

namespace driftless::layers {

namespace {

constexpr const char* kOp = "hf gpt2";
constexpr const char* kPrefix = "transformer.";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

template <typename T>
T value_or(const nlohmann::json& hf, const char* key, T fallback) {
  return hf_value_or<T>(kOp, hf, key, fallback);
}

}  // namespace

nlohmann::json hf_gpt2_config(const GptConfig& c, int64_t end_of_text) {
  DL_CHECK(c.kv_heads() == c.n_head, kOp,
           "GQA (n_kv_head " << c.kv_heads() << " != n_head " << c.n_head
                             << ") cannot be expressed in a transformers GPT2Config");
  DL_CHECK(c.softcap <= 0, kOp, "softcap " << c.softcap << " cannot be expressed in GPT2Config");
  DL_CHECK(!c.alibi, kOp, "ALiBi cannot be expressed in GPT2Config (GPT-2 uses learned positions)");
  DL_CHECK(c.score_mod.empty() && c.mask_mod.empty(), kOp,
           "model.score_mod / mask_mod expressions cannot be expressed in GPT2Config");
  nlohmann::json j;
  j["architectures"] = {"GPT2LMHeadModel"};
  j["model_type"] = "gpt2";
  j["vocab_size"] = c.vocab_size;
  j["n_positions"] = c.n_positions;
  j["n_ctx"] = c.n_positions;
  j["n_embd"] = c.n_embd;
  j["n_layer"] = c.n_layer;
  j["n_head"] = c.n_head;
  j["n_inner"] = nullptr;  // 4 n_embd
  j["activation_function"] = "gelu_new";
  j["layer_norm_epsilon"] = 1e-5;
  // Our dropout acts on the embeddings and on each residual branch, not on attention weights.
  j["embd_pdrop"] = c.dropout;
  j["resid_pdrop"] = c.dropout;
  j["attn_pdrop"] = 0.0;
  j["initializer_range"] = 0.02;
  j["scale_attn_weights"] = true;
  j["scale_attn_by_inverse_layer_idx"] = false;
  j["reorder_and_upcast_attn"] = false;
  j["tie_word_embeddings"] = true;
  j["use_cache"] = true;
  const int64_t eot = end_of_text >= 0 ? end_of_text : c.vocab_size == 50257 ? 50256 : -1;
  j["bos_token_id"] = j["eos_token_id"] =
      eot >= 0 && eot < c.vocab_size ? nlohmann::json(eot) : nlohmann::json(nullptr);
  j["torch_dtype"] = "float32";
  return j;
}

GptConfig gpt_config_from_hf(const nlohmann::json& hf) {
  DL_CHECK(hf.is_object(), kOp, "config.json must hold a JSON object, got " << hf.type_name());
  const std::string type = value_or<std::string>(hf, "model_type", "gpt2");
  DL_CHECK(type == "gpt2", kOp, "config.json: model_type \"" << type << "\" is not \"gpt2\"");
  GptConfig c;
  c.vocab_size = value_or<int64_t>(hf, "vocab_size", 50257);
  c.n_positions = value_or<int64_t>(hf, "n_positions", 1024);
  c.n_embd = value_or<int64_t>(hf, "n_embd", 768);
  c.n_layer = value_or<int64_t>(hf, "n_layer", 12);
  c.n_head = value_or<int64_t>(hf, "n_head", 12);
  DL_CHECK(c.vocab_size > 0 && c.n_positions > 0 && c.n_embd > 0 && c.n_layer > 0 && c.n_head > 0,
           kOp, "config.json: vocab_size, n_positions, n_embd, n_layer, n_head must be positive");
  DL_CHECK(c.n_embd % c.n_head == 0, kOp,
           "config.json: n_embd " << c.n_embd << " is not a multiple of n_head " << c.n_head);
  for (const char* key : {"n_kv_head", "num_key_value_heads", "n_head_kv"}) {
    const int64_t kv = value_or<int64_t>(hf, key, c.n_head);
    DL_CHECK(kv == c.n_head, kOp,
             "config.json: " << key << " " << kv << " != n_head " << c.n_head
                             << ": GQA cannot be expressed in GPT2Config");
  }
  const int64_t inner = value_or<int64_t>(hf, "n_inner", 4 * c.n_embd);
  DL_CHECK(inner == 4 * c.n_embd, kOp,
           "config.json: n_inner " << inner << " != 4 n_embd (" << 4 * c.n_embd << ")");
  const std::string act = value_or<std::string>(hf, "activation_function", "gelu_new");
  DL_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", kOp,
           "config.json: activation_function \""
               << act << "\" (only the tanh GELU, gelu_new, is supported)");
  const double eps = value_or<double>(hf, "layer_norm_epsilon", 1e-5);
  DL_CHECK(std::abs(eps - 1e-5) <= 1e-12, kOp,
           "config.json: layer_norm_epsilon " << eps << " (only 1e-05 is supported)");
  DL_CHECK(value_or<bool>(hf, "tie_word_embeddings", true), kOp,
           "config.json: tie_word_embeddings false (our LM head is tied to wte)");
  DL_CHECK(value_or<bool>(hf, "scale_attn_weights", true), kOp,
           "config.json: scale_attn_weights false is not supported");
  DL_CHECK(!value_or<bool>(hf, "scale_attn_by_inverse_layer_idx", false), kOp,
           "config.json: scale_attn_by_inverse_layer_idx true is not supported");
  // GPT2Config's default dropout is 0.1; ours applies to embeddings and residual branches.
  c.dropout = value_or<double>(hf, "resid_pdrop", 0.1);
  DL_CHECK(c.dropout >= 0 && c.dropout < 1, kOp,
           "config.json: resid_pdrop must be in [0, 1), got " << c.dropout);
  return c;
}

std::string hf_gpt2_name(const std::string& name) {
  return kPrefix + name;
}

std::string gpt_name_from_hf(const std::string& hf_name) {
  std::string n =
      hf_name.rfind(kPrefix, 0) == 0 ? hf_name.substr(std::string(kPrefix).size()) : hf_name;
  const bool ours =
      n == "wte.weight" || n == "wpe.weight" || n.rfind("ln_f.", 0) == 0 ||
      (n.rfind("h.", 0) == 0 && !ends_with(n, ".attn.bias") && !ends_with(n, ".attn.masked_bias"));
  return ours ? n : "";
}

std::vector<std::pair<std::string, Shape>> gpt_parameter_shapes(const GptConfig& c) {
  const int64_t C = c.n_embd, qkv = (c.n_head + 2 * c.kv_heads()) * c.head_dim();
  std::vector<std::pair<std::string, Shape>> out = {{"wte.weight", {c.vocab_size, C}},
                                                    {"wpe.weight", {c.n_positions, C}}};
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    out.push_back({h + "ln_1.weight", {C}});
    out.push_back({h + "ln_1.bias", {C}});
    out.push_back({h + "attn.c_attn.weight", {qkv, C}});
    out.push_back({h + "attn.c_attn.bias", {qkv}});
    out.push_back({h + "attn.c_proj.weight", {C, C}});
    out.push_back({h + "attn.c_proj.bias", {C}});
    out.push_back({h + "ln_2.weight", {C}});
    out.push_back({h + "ln_2.bias", {C}});
    out.push_back({h + "mlp.c_fc.weight", {4 * C, C}});
    out.push_back({h + "mlp.c_fc.bias", {4 * C}});
    out.push_back({h + "mlp.c_proj.weight", {C, 4 * C}});
    out.push_back({h + "mlp.c_proj.bias", {C}});
  }
  out.push_back({"ln_f.weight", {C}});
  out.push_back({"ln_f.bias", {C}});
  return out;
}

bool hf_gpt2_transposed(const std::string& name) {
  return ends_with(name, "attn.c_attn.weight") || ends_with(name, "attn.c_proj.weight") ||
         ends_with(name, "mlp.c_fc.weight") || ends_with(name, "mlp.c_proj.weight");
}

void save_hf_gpt2(const GptConfig& config, const std::map<std::string, Tensor>& params,
                  const std::string& dir, int64_t end_of_text, int64_t max_shard_bytes) {
  // Refuses what GPT-2 cannot express.
  const nlohmann::json hf = hf_gpt2_config(config, end_of_text);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, shape] : gpt_parameter_shapes(config)) {
    auto it = params.find(name);
    DL_CHECK(it != params.end(), kOp, "parameter " << name << " is missing");
    DL_CHECK(it->second.shape() == shape, kOp,
             name << " has shape " << shape_str(it->second.shape()) << ", expected "
                  << shape_str(shape));
    Tensor t = it->second.detach().to(Device::cpu, DType::f32);
    if (hf_gpt2_transposed(name)) t = t.transpose(0, 1).contiguous();  // (out, in) -> (in, out)
    tensors.push_back({hf_gpt2_name(name), t});
  }
  DL_CHECK(params.size() == tensors.size(), kOp,
           params.size() << " parameters given, a GPT-2 with this config has " << tensors.size());
  write_hf_weights(kOp, dir, tensors, max_shard_bytes);
  write_text_atomically(kOp, dir + "/config.json", hf.dump(2) + "\n");
}

void save_hf_gpt2(const Gpt& model, const std::string& dir, int64_t end_of_text,
                  int64_t max_shard_bytes) {
  save_hf_gpt2(model.config(), parameters_by_name(model), dir, end_of_text, max_shard_bytes);
}

HfGpt2 load_hf_gpt2(const std::string& dir) {
  const std::string config_path = dir + "/config.json";
  HfGpt2 out;
  out.config = gpt_config_from_hf(read_hf_config(kOp, dir));
  const std::vector<SafetensorsFile> files = open_hf_weights(kOp, dir, "GPT2LMHeadModel");
  // Bound what config.json asks for by what the weight files hold (a byte a parameter, at
  // the least) before listing or allocating anything: n_layer 1e9 is an error, not 4 GB.
  const GptConfig& g = out.config;
  const double E = double(g.n_embd);
  const double implied = double(g.vocab_size) * E + double(g.n_positions) * E + 2 * E +
                         double(g.n_layer) * (12 * E * E + 13 * E);
  const double stored = hf_stored_bytes(files);
  DL_CHECK(implied <= stored, kOp,
           config_path << " describes " << implied << " parameters (n_layer " << g.n_layer
                       << ", n_embd " << g.n_embd << ", vocab_size " << g.vocab_size
                       << ", n_positions " << g.n_positions << "), more than the " << stored
                       << " bytes of weights in " << dir << " can hold");
  const auto expected = gpt_parameter_shapes(out.config);
  std::map<std::string, Shape> shapes(expected.begin(), expected.end());

  struct Source {
    const SafetensorsFile* file = nullptr;
    std::string name;  // in the file
  };
  std::map<std::string, Source> sources;  // ours -> where it is
  Source lm_head;
  for (const auto& file : files) {
    for (const auto& hf_name : file.names()) {
      if (hf_name == "lm_head.weight") {
        lm_head = {&file, hf_name};
        continue;
      }
      const std::string name = gpt_name_from_hf(hf_name);
      if (name.empty() &&
          (ends_with(hf_name, ".attn.bias") || ends_with(hf_name, ".attn.masked_bias")))
        continue;  // causal-mask buffers of old transformers versions (any dtype)
      DL_CHECK(!name.empty() && shapes.count(name), kOp,
               file.path() << ": unexpected tensor " << hf_name << " for a GPT-2 with n_layer "
                           << out.config.n_layer);
      DL_CHECK(!sources.count(name), kOp,
               file.path() << ": " << name << " appears twice (" << sources[name].name << " in "
                           << sources[name].file->path() << ", " << hf_name << ")");
      sources[name] = {&file, hf_name};
    }
  }
  for (const auto& [name, shape] : expected) {
    DL_CHECK(sources.count(name), kOp,
             files.front().path() << (files.size() > 1 ? " (and the other shards)" : "")
                                  << ": missing tensor " << hf_gpt2_name(name));
    const Source& src = sources[name];
    Tensor t = hf_float_weight(kOp, *src.file, src.name);
    Shape want = shape;
    if (hf_gpt2_transposed(name)) std::swap(want[0], want[1]);
    DL_CHECK(t.shape() == want, kOp,
             src.file->path() << ": " << src.name << " has shape " << shape_str(t.shape())
                              << ", expected " << shape_str(want) << " from config.json");
    t = t.to(DType::f32);
    if (hf_gpt2_transposed(name)) t = t.transpose(0, 1);
    out.params[name] = t.contiguous().clone();
  }
  if (lm_head.file) {
    Tensor head = hf_float_weight(kOp, *lm_head.file, lm_head.name);
    const Tensor& wte = out.params.at("wte.weight");
    DL_CHECK(head.shape() == wte.shape() && head.to_vector<float>() == wte.to_vector<float>(), kOp,
             lm_head.file->path() << ": lm_head.weight differs from wte.weight; untied heads are "
                                     "not supported");
  }
  return out;
}

}  // namespace driftless::layers
