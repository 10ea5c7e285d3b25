// See hf_llama.h. The HF side follows transformers' LlamaConfig / LlamaForCausalLM.
#include "layers/hf_llama.h"

#include <cmath>

namespace driftless::layers {

namespace {

constexpr const char* kOp = "hf llama";

template <typename T>
T value_or(const nlohmann::json& hf, const char* key, T fallback) {
  return hf_value_or<T>(kOp, hf, key, fallback);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string layer(int64_t l) {
  return "layers." + std::to_string(l) + ".";
}

// Rows [begin, begin + n) of a (R, C) tensor, as a new f32 cpu tensor.
Tensor rows(const Tensor& t, int64_t begin, int64_t n) {
  return t.narrow(0, begin, n).contiguous().clone();
}

// Row-wise concatenation of (R_i, C) f32 cpu tensors.
Tensor cat_rows(const std::vector<Tensor>& parts) {
  std::vector<float> values;
  int64_t r = 0;
  for (const auto& p : parts) {
    const std::vector<float> v = p.to_vector<float>();
    values.insert(values.end(), v.begin(), v.end());
    r += p.shape()[0];
  }
  return Tensor::from_vector(values, Shape{r, parts.front().shape()[1]});
}

// rope_theta from transformers 5's rope_parameters or 4.x's rope_theta / rope_scaling;
// anything but the plain rotary is refused with the type it names.
double rope_theta_from_hf(const nlohmann::json& hf) {
  double theta = value_or<double>(hf, "rope_theta", 10000.0);
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    auto it = hf.find(key);
    if (it == hf.end() || it->is_null()) continue;
    DL_CHECK(it->is_object(), kOp, "config.json: " << key << " must be an object or null");
    std::string type = value_or<std::string>(*it, "rope_type", "");
    if (type.empty()) type = value_or<std::string>(*it, "type", "default");
    DL_CHECK(type == "default", kOp,
             "config.json: " << key << ".rope_type \"" << type
                             << "\" (RoPE scaling) is not supported: our rotary is the plain one "
                                "(rope_type default)");
    if (it->contains("rope_theta")) theta = value_or<double>(*it, "rope_theta", theta);
  }
  return theta;
}

}  // namespace

nlohmann::json hf_llama_config(const GptConfig& c, int64_t end_of_text) {
  DL_CHECK(c.is_llama(), kOp, "the model's architecture is not llama");
  DL_CHECK(c.sliding_window <= 0, kOp,
           "sliding_window " << c.sliding_window
                             << " cannot be expressed in LlamaConfig (every query sees its whole "
                                "context there); that is MistralForCausalLM's, not exported");
  DL_CHECK(c.softcap <= 0, kOp, "softcap " << c.softcap << " cannot be expressed in LlamaConfig");
  DL_CHECK(!c.alibi, kOp, "ALiBi cannot be expressed in LlamaConfig (Llama uses RoPE)");
  DL_CHECK(c.score_mod.empty() && c.mask_mod.empty(), kOp,
           "model.score_mod / mask_mod expressions cannot be expressed in LlamaConfig");
  DL_CHECK(c.n_embd % c.n_head == 0 && c.n_head % c.kv_heads() == 0, kOp,
           "n_embd " << c.n_embd << ", n_head " << c.n_head << ", n_kv_head " << c.kv_heads()
                     << ": heads must divide n_embd and kv heads divide heads");
  nlohmann::json j;
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.n_embd;
  j["intermediate_size"] = c.mlp_width();
  j["num_hidden_layers"] = c.n_layer;
  j["num_attention_heads"] = c.n_head;
  j["num_key_value_heads"] = c.kv_heads();
  j["head_dim"] = c.head_dim();
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.n_positions;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_parameters"] = {{"rope_theta", c.rope_theta}, {"rope_type", "default"}};
  j["rope_theta"] = c.rope_theta;
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["mlp_bias"] = false;
  j["pretraining_tp"] = 1;
  j["initializer_range"] = 0.02;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["use_cache"] = true;
  j["bos_token_id"] = j["eos_token_id"] = end_of_text >= 0 && end_of_text < c.vocab_size
                                              ? nlohmann::json(end_of_text)
                                              : nlohmann::json(nullptr);
  j["pad_token_id"] = nullptr;
  j["torch_dtype"] = "float32";
  return j;
}

GptConfig llama_config_from_hf(const nlohmann::json& hf) {
  DL_CHECK(hf.is_object(), kOp, "config.json must hold a JSON object, got " << hf.type_name());
  const std::string type = value_or<std::string>(hf, "model_type", "llama");
  DL_CHECK(type == "llama", kOp, "config.json: model_type \"" << type << "\" is not \"llama\"");
  GptConfig c;
  c.architecture = Architecture::llama;
  c.vocab_size = value_or<int64_t>(hf, "vocab_size", 32000);
  c.n_embd = value_or<int64_t>(hf, "hidden_size", 4096);
  c.intermediate_size = value_or<int64_t>(hf, "intermediate_size", 11008);
  c.n_layer = value_or<int64_t>(hf, "num_hidden_layers", 32);
  c.n_head = value_or<int64_t>(hf, "num_attention_heads", 32);
  const int64_t kv = value_or<int64_t>(hf, "num_key_value_heads", c.n_head);
  c.n_positions = value_or<int64_t>(hf, "max_position_embeddings", 2048);
  DL_CHECK(c.vocab_size > 0 && c.n_embd > 0 && c.intermediate_size > 0 && c.n_layer > 0 &&
               c.n_head > 0 && kv > 0 && c.n_positions > 0,
           kOp,
           "config.json: vocab_size, hidden_size, intermediate_size, num_hidden_layers, "
           "num_attention_heads, num_key_value_heads, max_position_embeddings must be positive");
  DL_CHECK(c.n_embd % c.n_head == 0, kOp,
           "config.json: hidden_size " << c.n_embd << " is not a multiple of num_attention_heads "
                                       << c.n_head);
  DL_CHECK(c.n_head % kv == 0, kOp,
           "config.json: num_attention_heads "
               << c.n_head << " is not a multiple of num_key_value_heads " << kv);
  c.n_kv_head = kv == c.n_head ? 0 : kv;
  const int64_t head_dim = value_or<int64_t>(hf, "head_dim", c.n_embd / c.n_head);
  DL_CHECK(head_dim == c.n_embd / c.n_head, kOp,
           "config.json: head_dim " << head_dim << " != hidden_size / num_attention_heads ("
                                    << c.n_embd / c.n_head << "); our heads split n_embd evenly");
  const std::string act = value_or<std::string>(hf, "hidden_act", "silu");
  DL_CHECK(act == "silu", kOp,
           "config.json: hidden_act \"" << act << "\" (only silu, SwiGLU's, is supported)");
  for (const char* key : {"attention_bias", "mlp_bias"})
    DL_CHECK(!value_or<bool>(hf, key, false), kOp,
             "config.json: " << key << " true is not supported (our Llama has no biases)");
  c.rms_norm_eps = value_or<double>(hf, "rms_norm_eps", 1e-6);
  DL_CHECK(c.rms_norm_eps > 0, kOp, "config.json: rms_norm_eps must be positive");
  c.rope_theta = rope_theta_from_hf(hf);
  DL_CHECK(c.rope_theta > 0, kOp, "config.json: rope_theta must be positive");
  c.tie_word_embeddings = value_or<bool>(hf, "tie_word_embeddings", false);
  // LlamaConfig's attention_dropout acts on attention weights, which ours has not.
  c.dropout = 0.0;
  return c;
}

std::vector<std::pair<std::string, Shape>> llama_parameter_shapes(const GptConfig& c) {
  const int64_t C = c.n_embd, D = c.head_dim(), F = c.mlp_width();
  const int64_t qkv = (c.n_head + 2 * c.kv_heads()) * D;
  std::vector<std::pair<std::string, Shape>> out = {{"embed_tokens.weight", {c.vocab_size, C}}};
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = layer(l);
    out.push_back({h + "input_layernorm.weight", {C}});
    out.push_back({h + "self_attn.qkv_proj.weight", {qkv, C}});
    out.push_back({h + "self_attn.o_proj.weight", {C, c.n_head * D}});
    out.push_back({h + "post_attention_layernorm.weight", {C}});
    out.push_back({h + "mlp.gate_up_proj.weight", {2 * F, C}});
    out.push_back({h + "mlp.down_proj.weight", {C, F}});
  }
  out.push_back({"norm.weight", {C}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, C}});
  return out;
}

std::vector<std::pair<std::string, Tensor>> hf_llama_tensors(
    const GptConfig& c, const std::map<std::string, Tensor>& params) {
  const auto shapes = llama_parameter_shapes(c);
  std::map<std::string, Tensor> p;
  for (const auto& [name, shape] : shapes) {
    auto it = params.find(name);
    DL_CHECK(it != params.end(), kOp, "parameter " << name << " is missing");
    DL_CHECK(it->second.shape() == shape, kOp,
             name << " has shape " << shape_str(it->second.shape()) << ", expected "
                  << shape_str(shape));
    p[name] = it->second.detach().to(Device::cpu, DType::f32).contiguous();
  }
  DL_CHECK(params.size() == shapes.size(), kOp,
           params.size() << " parameters given, a llama with this config has " << shapes.size());
  const int64_t D = c.head_dim(), Q = c.n_head * D, KV = c.kv_heads() * D, F = c.mlp_width();
  std::vector<std::pair<std::string, Tensor>> out = {
      {"model.embed_tokens.weight", p["embed_tokens.weight"]}};
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = layer(l), m = "model." + h;
    const Tensor& qkv = p[h + "self_attn.qkv_proj.weight"];
    const Tensor& gate_up = p[h + "mlp.gate_up_proj.weight"];
    out.push_back({m + "self_attn.q_proj.weight", rows(qkv, 0, Q)});
    out.push_back({m + "self_attn.k_proj.weight", rows(qkv, Q, KV)});
    out.push_back({m + "self_attn.v_proj.weight", rows(qkv, Q + KV, KV)});
    out.push_back({m + "self_attn.o_proj.weight", p[h + "self_attn.o_proj.weight"]});
    out.push_back({m + "mlp.gate_proj.weight", rows(gate_up, 0, F)});
    out.push_back({m + "mlp.up_proj.weight", rows(gate_up, F, F)});
    out.push_back({m + "mlp.down_proj.weight", p[h + "mlp.down_proj.weight"]});
    out.push_back({m + "input_layernorm.weight", p[h + "input_layernorm.weight"]});
    out.push_back(
        {m + "post_attention_layernorm.weight", p[h + "post_attention_layernorm.weight"]});
  }
  out.push_back({"model.norm.weight", p["norm.weight"]});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", p["lm_head.weight"]});
  return out;
}

void save_hf_llama(const GptConfig& config, const std::map<std::string, Tensor>& params,
                   const std::string& dir, int64_t end_of_text, int64_t max_shard_bytes) {
  const nlohmann::json hf = hf_llama_config(config, end_of_text);  // refuses first
  write_hf_weights(kOp, dir, hf_llama_tensors(config, params), max_shard_bytes);
  write_text_atomically(kOp, dir + "/config.json", hf.dump(2) + "\n");
}

void save_hf_llama(const Gpt& model, const std::string& dir, int64_t end_of_text,
                   int64_t max_shard_bytes) {
  save_hf_llama(model.config(), parameters_by_name(model), dir, end_of_text, max_shard_bytes);
}

HfLlama load_hf_llama(const std::string& dir) {
  HfLlama out;
  out.config = llama_config_from_hf(read_hf_config(kOp, dir));
  const GptConfig& c = out.config;
  const std::vector<SafetensorsFile> files = open_hf_weights(kOp, dir, "LlamaForCausalLM");
  // Bound what config.json asks for by what the weight files hold (a byte a parameter, at the
  // least) before allocating: num_hidden_layers 1e9 is an error, not an out-of-memory.
  const double C = double(c.n_embd), D = double(c.head_dim()), F = double(c.mlp_width());
  const double per_layer = 2 * C + (double(c.n_head) + 2 * double(c.kv_heads())) * D * C +
                           double(c.n_head) * D * C + 3 * F * C;
  const double implied = double(c.vocab_size) * C + C + double(c.n_layer) * per_layer;
  DL_CHECK(implied <= hf_stored_bytes(files), kOp,
           dir << "/config.json describes " << implied << " parameters, more than the "
               << hf_stored_bytes(files) << " bytes of weights in " << dir << " can hold");

  // Every HF tensor we expect, with its shape.
  const int64_t H = c.n_head, Hkv = c.kv_heads(), Dh = c.head_dim(), Fi = c.mlp_width();
  std::map<std::string, Shape> want = {{"model.embed_tokens.weight", {c.vocab_size, c.n_embd}},
                                       {"model.norm.weight", {c.n_embd}}};
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string m = "model." + layer(l);
    want[m + "self_attn.q_proj.weight"] = {H * Dh, c.n_embd};
    want[m + "self_attn.k_proj.weight"] = {Hkv * Dh, c.n_embd};
    want[m + "self_attn.v_proj.weight"] = {Hkv * Dh, c.n_embd};
    want[m + "self_attn.o_proj.weight"] = {c.n_embd, H * Dh};
    want[m + "mlp.gate_proj.weight"] = {Fi, c.n_embd};
    want[m + "mlp.up_proj.weight"] = {Fi, c.n_embd};
    want[m + "mlp.down_proj.weight"] = {c.n_embd, Fi};
    want[m + "input_layernorm.weight"] = {c.n_embd};
    want[m + "post_attention_layernorm.weight"] = {c.n_embd};
  }
  want["lm_head.weight"] = {c.vocab_size, c.n_embd};

  std::map<std::string, Tensor> hf;  // HF name -> f32
  for (const auto& file : files) {
    for (const auto& name : file.names()) {
      if (ends_with(name, "rotary_emb.inv_freq")) continue;  // buffer of old transformers
      auto it = want.find(name);
      DL_CHECK(it != want.end(), kOp,
               file.path() << ": unexpected tensor " << name << " for a LlamaForCausalLM with "
                           << c.n_layer << " layers");
      DL_CHECK(!hf.count(name), kOp, file.path() << ": " << name << " appears twice");
      Tensor t = hf_float_weight(kOp, file, name);
      DL_CHECK(t.shape() == it->second, kOp,
               file.path() << ": " << name << " has shape " << shape_str(t.shape()) << ", expected "
                           << shape_str(it->second) << " from config.json");
      hf[name] = t.to(DType::f32).contiguous().clone();
    }
  }
  for (const auto& [name, shape] : want)
    DL_CHECK(hf.count(name) || name == "lm_head.weight", kOp,
             files.front().path() << (files.size() > 1 ? " (and the other shards)" : "")
                                  << ": missing tensor " << name);
  if (c.tie_word_embeddings) {
    if (hf.count("lm_head.weight"))
      DL_CHECK(hf["lm_head.weight"].to_vector<float>() ==
                   hf["model.embed_tokens.weight"].to_vector<float>(),
               kOp,
               dir << ": tie_word_embeddings is true but lm_head.weight differs from "
                      "model.embed_tokens.weight");
  } else {
    DL_CHECK(hf.count("lm_head.weight"), kOp,
             dir << ": tie_word_embeddings is false but lm_head.weight is missing");
    out.params["lm_head.weight"] = hf["lm_head.weight"];
  }
  out.params["embed_tokens.weight"] = hf["model.embed_tokens.weight"];
  out.params["norm.weight"] = hf["model.norm.weight"];
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = layer(l), m = "model." + h;
    out.params[h + "self_attn.qkv_proj.weight"] =
        cat_rows({hf[m + "self_attn.q_proj.weight"], hf[m + "self_attn.k_proj.weight"],
                  hf[m + "self_attn.v_proj.weight"]});
    out.params[h + "mlp.gate_up_proj.weight"] =
        cat_rows({hf[m + "mlp.gate_proj.weight"], hf[m + "mlp.up_proj.weight"]});
    for (const char* n : {"self_attn.o_proj.weight", "mlp.down_proj.weight",
                          "input_layernorm.weight", "post_attention_layernorm.weight"})
      out.params[h + n] = hf[m + n];
  }
  return out;
}

}  // namespace driftless::layers
