// HF Llama directories (layers/hf_llama.h) without the model: LlamaConfig keys both ways
// (transformers 4 and 5 spellings of rope_theta), refusals naming the key, q|k|v and gate|up
// split and joined row for row, tied and untied heads, shards and bf16 files.
#include "layers/hf_llama.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "engine/core/safetensors.h"
#include "tests/error_of.h"
#include "tests/test_paths.h"

namespace driftless::layers {
namespace {

GptConfig tiny(bool tied, int64_t kv = 2) {
  GptConfig c;
  c.architecture = Architecture::llama;
  c.vocab_size = 37;
  c.n_positions = 32;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = kv;
  c.n_embd = 16;
  c.intermediate_size = 24;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 5000.0;
  c.tie_word_embeddings = tied;
  return c;
}

// Element k of parameter p is 1000 p + k (every element distinct, exact in f32); with
// bf16_exact, p + (k % 8) / 8 (exact in bf16's 8 significant bits).
std::map<std::string, Tensor> params_of(const GptConfig& c, bool bf16_exact = false) {
  std::map<std::string, Tensor> out;
  int p = 0;
  for (const auto& [name, shape] : llama_parameter_shapes(c)) {
    std::vector<float> v(size_t(shape_numel(shape)));
    for (size_t k = 0; k < v.size(); ++k)
      v[k] = bf16_exact ? float(p) + float(k % 8) / 8.0f : float(1000 * p + int(k));
    out[name] = Tensor::from_vector(v, shape);
    ++p;
  }
  return out;
}

using testing::error_of;

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream(path) << j.dump(2);
}

TEST(HfLlama, ConfigRoundTrip) {
  for (bool tied : {true, false}) {
    for (int64_t kv : {0, 2, 1}) {
      const GptConfig c = tiny(tied, kv);
      const nlohmann::json j = hf_llama_config(c, 36);
      EXPECT_EQ(j.at("model_type"), "llama");
      EXPECT_EQ(j.at("architectures"), nlohmann::json::array({"LlamaForCausalLM"}));
      EXPECT_EQ(j.at("hidden_size"), 16);
      EXPECT_EQ(j.at("intermediate_size"), 24);
      EXPECT_EQ(j.at("num_key_value_heads"), c.kv_heads());
      EXPECT_EQ(j.at("head_dim"), 4);
      EXPECT_EQ(j.at("max_position_embeddings"), 32);
      EXPECT_EQ(j.at("rope_parameters").at("rope_theta"), 5000.0);
      EXPECT_EQ(j.at("rope_parameters").at("rope_type"), "default");
      EXPECT_EQ(j.at("tie_word_embeddings"), tied);
      EXPECT_EQ(j.at("bos_token_id"), 36);
      EXPECT_EQ(j.at("eos_token_id"), 36);
      EXPECT_EQ(j.at("attention_bias"), false);
      const GptConfig back = llama_config_from_hf(j);
      EXPECT_TRUE(back.is_llama());
      EXPECT_EQ(back.vocab_size, c.vocab_size);
      EXPECT_EQ(back.n_positions, c.n_positions);
      EXPECT_EQ(back.n_layer, c.n_layer);
      EXPECT_EQ(back.n_head, c.n_head);
      EXPECT_EQ(back.kv_heads(), c.kv_heads());
      EXPECT_EQ(back.n_embd, c.n_embd);
      EXPECT_EQ(back.intermediate_size, 24);
      EXPECT_EQ(back.rms_norm_eps, 1e-5);
      EXPECT_EQ(back.rope_theta, 5000.0);
      EXPECT_EQ(back.tie_word_embeddings, tied);
    }
  }
  // An end-of-text outside the vocabulary is null, not a wrong id.
  EXPECT_TRUE(hf_llama_config(tiny(true), 50256).at("eos_token_id").is_null());
}

TEST(HfLlama, RopeThetaInEitherSpellingAndLlamaConfigDefaults) {
  nlohmann::json v4 = {
      {"model_type", "llama"}, {"rope_theta", 500000.0}, {"rope_scaling", nullptr}};
  EXPECT_EQ(llama_config_from_hf(v4).rope_theta, 500000.0);
  nlohmann::json v5 = {{"model_type", "llama"},
                       {"rope_parameters", {{"rope_theta", 1e6}, {"rope_type", "default"}}}};
  EXPECT_EQ(llama_config_from_hf(v5).rope_theta, 1e6);
  // LlamaConfig's own defaults for absent keys.
  const GptConfig d = llama_config_from_hf({{"model_type", "llama"}});
  EXPECT_EQ(d.vocab_size, 32000);
  EXPECT_EQ(d.n_embd, 4096);
  EXPECT_EQ(d.intermediate_size, 11008);
  EXPECT_EQ(d.n_layer, 32);
  EXPECT_EQ(d.kv_heads(), 32);
  EXPECT_EQ(d.n_positions, 2048);
  EXPECT_EQ(d.rms_norm_eps, 1e-6);
  EXPECT_EQ(d.rope_theta, 10000.0);
  EXPECT_FALSE(d.tie_word_embeddings);
}

TEST(HfLlama, RefusesWhatOurModelCannotRun) {
  const nlohmann::json ok = hf_llama_config(tiny(true));
  auto refused = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json j = ok;
    j[key] = value;
    return error_of([&] { llama_config_from_hf(j); });
  };
  EXPECT_NE(refused("model_type", "mistral").find("\"mistral\""), std::string::npos);
  EXPECT_NE(refused("hidden_act", "gelu").find("hidden_act \"gelu\""), std::string::npos);
  EXPECT_NE(refused("attention_bias", true).find("attention_bias"), std::string::npos);
  EXPECT_NE(refused("mlp_bias", true).find("mlp_bias"), std::string::npos);
  EXPECT_NE(refused("head_dim", 8).find("head_dim 8"), std::string::npos);
  EXPECT_NE(refused("num_key_value_heads", 3).find("num_key_value_heads 3"), std::string::npos);
  EXPECT_NE(refused("hidden_size", "big").find("hidden_size has the wrong type"),
            std::string::npos);
  // Counts are not truncated: 1.7 layers is an error, Python's 2.0 is 2.
  EXPECT_NE(refused("num_hidden_layers", 1.7).find("num_hidden_layers must be an integer, got 1.7"),
            std::string::npos);
  EXPECT_EQ(refused("num_hidden_layers", 2.0), "");
  const std::string scaled = refused("rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}});
  EXPECT_NE(scaled.find("rope_scaling.rope_type \"llama3\""), std::string::npos) << scaled;
  EXPECT_NE(refused("rope_parameters", {{"rope_type", "yarn"}, {"rope_theta", 1e4}}).find("yarn"),
            std::string::npos);
  EXPECT_NE(refused("rope_scaling", {{"type", "linear"}, {"factor", 2.0}}).find("linear"),
            std::string::npos);
  // Export: what LlamaConfig cannot express.
  GptConfig c = tiny(true);
  c.sliding_window = 8;
  EXPECT_NE(error_of([&] { hf_llama_config(c); }).find("sliding_window 8"), std::string::npos);
  c = tiny(true);
  c.softcap = 30;
  EXPECT_NE(error_of([&] { hf_llama_config(c); }).find("softcap"), std::string::npos);
  c = tiny(true);
  c.architecture = Architecture::gpt2;
  EXPECT_NE(error_of([&] { hf_llama_config(c); }).find("not llama"), std::string::npos);
}

TEST(HfLlama, SplitsAndJoinsRowForRow) {
  for (bool tied : {true, false}) {
    const GptConfig c = tiny(tied);
    const auto params = params_of(c);
    const std::string dir = testing::scratch_dir() + "/hf";
    save_hf_llama(c, params, dir, 36);
    SafetensorsFile f = read_safetensors(dir + "/model.safetensors");
    EXPECT_EQ(f.metadata().at("format"), "pt");
    EXPECT_EQ(f.contains("lm_head.weight"), !tied);
    EXPECT_EQ(f.names().size(), 2 + 9 * 2 + (tied ? 0u : 1u));
    const int64_t Q = 16, KV = 8, F = 24;
    const auto qkv = params.at("layers.1.self_attn.qkv_proj.weight").to_vector<float>();
    const auto gate_up = params.at("layers.0.mlp.gate_up_proj.weight").to_vector<float>();
    EXPECT_EQ(f.get("model.layers.1.self_attn.q_proj.weight").shape(), (Shape{Q, 16}));
    EXPECT_EQ(f.get("model.layers.1.self_attn.k_proj.weight").shape(), (Shape{KV, 16}));
    auto row_of = [](const std::vector<float>& v, int64_t r) {
      return std::vector<float>(v.begin() + r * 16, v.begin() + (r + 1) * 16);
    };
    auto file_row = [&](const char* n, int64_t r) {
      return row_of(f.get(n).to_vector<float>(), r);
    };
    EXPECT_EQ(file_row("model.layers.1.self_attn.q_proj.weight", 3), row_of(qkv, 3));
    EXPECT_EQ(file_row("model.layers.1.self_attn.k_proj.weight", 5), row_of(qkv, Q + 5));
    EXPECT_EQ(file_row("model.layers.1.self_attn.v_proj.weight", 2), row_of(qkv, Q + KV + 2));
    EXPECT_EQ(file_row("model.layers.0.mlp.gate_proj.weight", 7), row_of(gate_up, 7));
    EXPECT_EQ(file_row("model.layers.0.mlp.up_proj.weight", 7), row_of(gate_up, F + 7));
    EXPECT_EQ(f.get("model.layers.0.mlp.down_proj.weight").shape(), (Shape{16, F}));
    EXPECT_EQ(read_json(dir + "/config.json").at("tie_word_embeddings"), tied);

    const HfLlama back = load_hf_llama(dir);
    EXPECT_EQ(back.config.tie_word_embeddings, tied);
    ASSERT_EQ(back.params.size(), params.size());
    for (const auto& [name, t] : params)
      EXPECT_EQ(back.params.at(name).to_vector<float>(), t.to_vector<float>()) << name;
  }
}

TEST(HfLlama, ParameterShapesAreTheModelsSlabAndTheModelRoundTrips) {
  for (bool tied : {true, false}) {
    for (int64_t kv : {0, 2, 1}) {
      const GptConfig c = tiny(tied, kv);
      Gpt model(c);
      model.init(7);
      const auto shapes = llama_parameter_shapes(c);
      ASSERT_EQ(shapes.size(), model.slab().parameters().size());
      for (size_t i = 0; i < shapes.size(); ++i) {
        EXPECT_EQ(shapes[i].first, model.slab().parameters()[i].name);
        EXPECT_EQ(shapes[i].second, model.slab().parameters()[i].value.shape()) << shapes[i].first;
      }
      const std::string dir = testing::scratch_dir() + "/hf";
      save_hf_llama(model, dir);
      const HfLlama back = load_hf_llama(dir);
      Gpt again(back.config);
      load_into(back, again);
      EXPECT_EQ(again.slab().params().to_vector<float>(), model.slab().params().to_vector<float>());
    }
  }
}

TEST(HfLlama, ShardsAndBf16) {
  const GptConfig c = tiny(false);
  const auto params = params_of(c);
  const std::string dir = testing::scratch_dir() + "/hf";
  save_hf_llama(c, params, dir, -1, 4000);
  EXPECT_FALSE(std::filesystem::exists(dir + "/model.safetensors"));
  const nlohmann::json index = read_json(dir + "/model.safetensors.index.json");
  std::set<std::string> shards;
  for (const auto& [name, shard] : index.at("weight_map").items())
    shards.insert(shard.get<std::string>());
  EXPECT_GT(shards.size(), 2u);
  EXPECT_TRUE(shards.count("model-00001-of-0000" + std::to_string(shards.size()) + ".safetensors"));
  EXPECT_EQ(index.at("weight_map").size(), 2 + 9 * 2 + 1u);
  HfLlama back = load_hf_llama(dir);
  for (const auto& [name, t] : params)
    EXPECT_EQ(back.params.at(name).to_vector<float>(), t.to_vector<float>()) << name;
  // Exporting again unsharded leaves no stale index behind.
  save_hf_llama(c, params, dir);
  EXPECT_FALSE(std::filesystem::exists(dir + "/model.safetensors.index.json"));

  // A bf16 file (values chosen exact in bf16) reads back equal.
  const auto exact = params_of(c, true);
  std::vector<std::pair<std::string, Tensor>> bf16;
  for (auto& [n, t] : hf_llama_tensors(c, exact)) bf16.push_back({n, t.to(DType::bf16)});
  write_safetensors(dir + "/model.safetensors", bf16, {{"format", "pt"}});
  back = load_hf_llama(dir);
  for (const auto& [name, t] : exact)
    EXPECT_EQ(back.params.at(name).to_vector<float>(), t.to_vector<float>()) << name;
}

TEST(HfLlama, RefusesUnknownMissingAndUntiedHeads) {
  const GptConfig c = tiny(true);
  const auto params = params_of(c);
  const std::string dir = testing::scratch_dir() + "/hf";
  save_hf_llama(c, params, dir);
  auto tensors = hf_llama_tensors(c, params);
  auto rewrite = [&](std::vector<std::pair<std::string, Tensor>> t) {
    write_safetensors(dir + "/model.safetensors", t, {{"format", "pt"}});
    return error_of([&] { load_hf_llama(dir); });
  };
  auto with = tensors;
  with.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", Tensor::zeros({2})});
  EXPECT_EQ(rewrite(with), "");  // old transformers' buffer: ignored
  with = tensors;
  with.push_back({"model.layers.0.self_attn.q_proj.bias", Tensor::zeros({16})});
  EXPECT_NE(rewrite(with).find("unexpected tensor model.layers.0.self_attn.q_proj.bias"),
            std::string::npos);
  with = tensors;
  with.erase(with.begin() + 3);
  EXPECT_NE(rewrite(with).find("missing tensor"), std::string::npos);
  with = tensors;
  with.push_back({"lm_head.weight", params.at("embed_tokens.weight")});
  EXPECT_EQ(rewrite(with), "");  // tied and equal: fine
  with.back().second = Tensor::zeros({37, 16});
  EXPECT_NE(rewrite(with).find("lm_head.weight differs"), std::string::npos);
  // Untied config without lm_head.
  nlohmann::json j = read_json(dir + "/config.json");
  j["tie_word_embeddings"] = false;
  write_json(dir + "/config.json", j);
  EXPECT_NE(rewrite(tensors).find("lm_head.weight is missing"), std::string::npos);
  // A config asking for more than the files hold.
  j["num_hidden_layers"] = 1000000;
  write_json(dir + "/config.json", j);
  EXPECT_NE(error_of([&] { load_hf_llama(dir); }).find("more than the"), std::string::npos);
}

}  // namespace
}  // namespace driftless::layers
