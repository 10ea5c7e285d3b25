// HF GPT-2 directories (layers/hf_gpt2.h): round trip, the Conv1D transposition element by
// element, names and metadata transformers expects, and refusal of what GPT-2 cannot say.
#include "layers/hf_gpt2.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "engine/autograd/autograd.h"
#include "engine/core/safetensors.h"
#include "tests/error_of.h"
#include "tests/test_paths.h"

namespace driftless::layers {
namespace {

GptConfig tiny() {
  GptConfig c;
  c.vocab_size = 37;
  c.n_positions = 16;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 16;
  return c;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream f(path);
  f << j.dump(2);
}

using testing::error_of;

// The tensors of an exported directory, by name, for hand-editing.
std::vector<std::pair<std::string, Tensor>> exported_tensors(const std::string& dir) {
  SafetensorsFile f = read_safetensors(dir + "/model.safetensors");
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& n : f.names()) out.push_back({n, f.get(n)});
  return out;
}

TEST(HfGpt2, ParameterShapesAreTheModelsSlab) {
  for (int64_t kv : {0, 2, 1}) {
    GptConfig c = tiny();
    c.n_kv_head = kv;
    Gpt model(c);
    const auto shapes = gpt_parameter_shapes(c);
    ASSERT_EQ(shapes.size(), model.slab().parameters().size());
    for (size_t i = 0; i < shapes.size(); ++i) {
      EXPECT_EQ(shapes[i].first, model.slab().parameters()[i].name);
      EXPECT_EQ(shapes[i].second, model.slab().parameters()[i].value.shape()) << shapes[i].first;
    }
  }
}

TEST(HfGpt2, RoundTripIsExact) {
  const std::string dir = testing::scratch_dir() + "/hf";
  Gpt model(tiny());
  model.init(11);
  save_hf_gpt2(model, dir);
  HfGpt2 back = load_hf_gpt2(dir);
  EXPECT_EQ(back.config.vocab_size, 37);
  EXPECT_EQ(back.config.n_positions, 16);
  EXPECT_EQ(back.config.n_layer, 2);
  EXPECT_EQ(back.config.n_head, 4);
  EXPECT_EQ(back.config.kv_heads(), 4);
  EXPECT_EQ(back.config.n_embd, 16);
  EXPECT_EQ(back.config.dropout, 0.0);
  ASSERT_EQ(back.params.size(), model.slab().parameters().size());
  for (const auto& p : model.slab().parameters())
    EXPECT_EQ(back.params.at(p.name).to_vector<float>(), p.value.to_vector<float>()) << p.name;

  Gpt again(back.config);
  load_into(back, again);
  EXPECT_EQ(again.slab().params().to_vector<float>(), model.slab().params().to_vector<float>());
}

TEST(HfGpt2, FileHasTransformersNamesLayoutsAndConfig) {
  const std::string dir = testing::scratch_dir() + "/hf";
  GptConfig c = tiny();
  Gpt model(c);
  model.init(5);
  const int64_t C = c.n_embd;
  {
    // Hand-built weights: ours[o][i] = 1000 o + i, so the transposition shows element-wise.
    autograd::NoGradGuard no_grad;
    for (const char* n : {"h.1.attn.c_attn.weight", "h.0.mlp.c_fc.weight", "wte.weight"}) {
      const Tensor& w = model.slab()[n];
      std::vector<float> v(size_t(w.numel()));
      for (int64_t o = 0; o < w.size(0); ++o)
        for (int64_t i = 0; i < w.size(1); ++i) v[size_t(o * w.size(1) + i)] = float(1000 * o + i);
      w.copy_(Tensor::from_vector(v, w.shape()));
    }
  }
  save_hf_gpt2(model, dir);

  SafetensorsFile f = read_safetensors(dir + "/model.safetensors");
  EXPECT_EQ(f.metadata().at("format"), "pt");  // transformers refuses a file without it
  EXPECT_FALSE(f.contains("lm_head.weight"));  // tied: omitted, as save_pretrained does
  EXPECT_EQ(f.names().size(), 2 + 12 * 2 + 2u);
  for (const auto& n : f.names()) EXPECT_EQ(n.rfind("transformer.", 0), 0u) << n;

  Tensor attn = f.get("transformer.h.1.attn.c_attn.weight");
  ASSERT_EQ(attn.shape(), (Shape{C, 3 * C}));  // Conv1D: (in, out)
  Tensor fc = f.get("transformer.h.0.mlp.c_fc.weight");
  ASSERT_EQ(fc.shape(), (Shape{C, 4 * C}));
  for (int64_t i = 0; i < C; ++i) {
    for (int64_t o = 0; o < 3 * C; ++o) ASSERT_EQ(attn.at({i, o}), double(1000 * o + i));
    for (int64_t o = 0; o < 4 * C; ++o) ASSERT_EQ(fc.at({i, o}), double(1000 * o + i));
  }
  Tensor wte = f.get("transformer.wte.weight");  // an embedding: not transposed
  ASSERT_EQ(wte.shape(), (Shape{c.vocab_size, C}));
  EXPECT_EQ(wte.at({3, 5}), 3005.0);
  EXPECT_EQ(f.get("transformer.h.0.attn.c_proj.weight").shape(), (Shape{C, C}));
  EXPECT_EQ(f.get("transformer.h.0.mlp.c_proj.weight").shape(), (Shape{4 * C, C}));
  EXPECT_EQ(f.get("transformer.h.0.attn.c_proj.weight").at({2, 7}),
            model.slab()["h.0.attn.c_proj.weight"].at({7, 2}));

  const auto j = read_json(dir + "/config.json");
  EXPECT_EQ(j.at("model_type"), "gpt2");
  EXPECT_EQ(j.at("architectures"), nlohmann::json::array({"GPT2LMHeadModel"}));
  EXPECT_EQ(j.at("vocab_size"), 37);
  EXPECT_EQ(j.at("n_positions"), 16);
  EXPECT_EQ(j.at("n_embd"), 16);
  EXPECT_EQ(j.at("n_layer"), 2);
  EXPECT_EQ(j.at("n_head"), 4);
  EXPECT_EQ(j.at("activation_function"), "gelu_new");
  EXPECT_EQ(j.at("layer_norm_epsilon"), 1e-5);
  EXPECT_TRUE(j.at("tie_word_embeddings").get<bool>());
  // bos/eos: the tokenizer's end-of-text, never GPT-2's 50256 outside a smaller vocabulary.
  EXPECT_TRUE(j.at("eos_token_id").is_null());
  EXPECT_TRUE(j.at("bos_token_id").is_null());
  EXPECT_EQ(hf_gpt2_config(c, 36).at("eos_token_id"), 36);
  EXPECT_TRUE(hf_gpt2_config(c, 37).at("eos_token_id").is_null());
  GptConfig gpt2 = c;
  gpt2.vocab_size = 50257;
  EXPECT_EQ(hf_gpt2_config(gpt2).at("bos_token_id"), 50256);
}

TEST(HfGpt2, GqaIsRefusedBothWays) {
  GptConfig c = tiny();
  c.n_kv_head = 2;
  Gpt model(c);
  const std::string dir = testing::scratch_dir() + "/hf";
  const std::string e = error_of([&] { save_hf_gpt2(model, dir); });
  EXPECT_NE(e.find("GQA (n_kv_head 2 != n_head 4)"), std::string::npos) << e;
  EXPECT_FALSE(std::filesystem::exists(dir + "/model.safetensors"));

  Gpt plain(tiny());
  save_hf_gpt2(plain, dir);
  auto j = read_json(dir + "/config.json");
  j["n_kv_head"] = 2;
  write_json(dir + "/config.json", j);
  const std::string e2 = error_of([&] { load_hf_gpt2(dir); });
  EXPECT_NE(e2.find("n_kv_head 2 != n_head 4"), std::string::npos) << e2;

  GptConfig soft = tiny();
  soft.softcap = 30;
  EXPECT_NE(error_of([&] { hf_gpt2_config(soft); }).find("softcap"), std::string::npos);
  GptConfig alibi = tiny();
  alibi.alibi = true;
  EXPECT_NE(error_of([&] { hf_gpt2_config(alibi); }).find("ALiBi"), std::string::npos);
}

TEST(HfGpt2, ConfigsOurModelCannotRunAreRefused) {
  nlohmann::json base = hf_gpt2_config(tiny());
  EXPECT_EQ(gpt_config_from_hf(base).n_embd, 16);
  auto refused = [&](const char* key, nlohmann::json value, const std::string& expect) {
    nlohmann::json j = base;
    j[key] = value;
    const std::string e = error_of([&] { gpt_config_from_hf(j); });
    EXPECT_NE(e.find(expect), std::string::npos) << key << ": " << e;
  };
  refused("model_type", "llama", "model_type \"llama\"");
  refused("activation_function", "relu", "activation_function \"relu\"");
  refused("layer_norm_epsilon", 1e-6, "layer_norm_epsilon");
  refused("n_inner", 100, "n_inner 100");
  refused("tie_word_embeddings", false, "tie_word_embeddings");
  refused("scale_attn_by_inverse_layer_idx", true, "scale_attn_by_inverse_layer_idx");
  refused("n_head", 5, "not a multiple of n_head 5");
  refused("n_layer", "two", "n_layer has the wrong type");
  // GPT2Config's defaults fill what a minimal config.json leaves out.
  const GptConfig d = gpt_config_from_hf(nlohmann::json{{"model_type", "gpt2"}});
  EXPECT_EQ(d.vocab_size, 50257);
  EXPECT_EQ(d.n_positions, 1024);
  EXPECT_EQ(d.n_embd, 768);
  EXPECT_EQ(d.n_layer, 12);
  EXPECT_EQ(d.n_head, 12);
  EXPECT_EQ(d.dropout, 0.1);
}

TEST(HfGpt2, OldBuffersBareNamesAndATiedHeadAreAccepted) {
  // The hub's gpt2 file: bare names ("h.0..."), attn.bias / masked_bias buffers, and other
  // writers add lm_head.weight equal to wte.
  const std::string dir = testing::scratch_dir() + "/hf";
  Gpt model(tiny());
  model.init(2);
  save_hf_gpt2(model, dir);
  auto tensors = exported_tensors(dir);
  Tensor wte;
  for (auto& [n, t] : tensors) {
    if (n == "transformer.wte.weight") wte = t;
    n = n.substr(std::string("transformer.").size());
  }
  tensors.push_back({"h.0.attn.bias", Tensor::ones({1, 1, 16, 16})});
  tensors.push_back({"h.1.attn.masked_bias", Tensor::full({}, -1e4)});
  tensors.push_back({"lm_head.weight", wte.to(DType::bf16).to(DType::f32)});
  write_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
  // A bf16 lm_head that is not bitwise wte: refused rather than silently dropped.
  EXPECT_NE(error_of([&] { load_hf_gpt2(dir); }).find("lm_head.weight differs"), std::string::npos);
  tensors.back().second = wte;
  write_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
  HfGpt2 back = load_hf_gpt2(dir);
  for (const auto& p : model.slab().parameters())
    EXPECT_EQ(back.params.at(p.name).to_vector<float>(), p.value.to_vector<float>()) << p.name;
}

TEST(HfGpt2, Bf16WeightsAreWidened) {
  const std::string dir = testing::scratch_dir() + "/hf";
  Gpt model(tiny());
  model.init(4);
  save_hf_gpt2(model, dir);
  auto tensors = exported_tensors(dir);
  for (auto& [n, t] : tensors) t = t.to(DType::bf16);
  write_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
  HfGpt2 back = load_hf_gpt2(dir);
  const Tensor& w = back.params.at("h.1.attn.c_attn.weight");
  EXPECT_EQ(w.dtype(), DType::f32);
  EXPECT_EQ(w.at({5, 3}),
            model.slab()["h.1.attn.c_attn.weight"].to(DType::bf16).to(DType::f32).at({5, 3}));
}

TEST(HfGpt2, MissingUnknownAndMisshapenTensorsAreNamed) {
  const std::string dir = testing::scratch_dir() + "/hf";
  Gpt model(tiny());
  save_hf_gpt2(model, dir);
  const auto good = exported_tensors(dir);

  auto without = good;
  std::erase_if(without, [](const auto& e) { return e.first == "transformer.h.1.mlp.c_fc.bias"; });
  write_safetensors(dir + "/model.safetensors", without, {{"format", "pt"}});
  EXPECT_NE(
      error_of([&] { load_hf_gpt2(dir); }).find("missing tensor transformer.h.1.mlp.c_fc.bias"),
      std::string::npos);

  auto extra = good;
  extra.push_back({"transformer.h.2.ln_1.weight", Tensor::ones({16})});
  write_safetensors(dir + "/model.safetensors", extra, {{"format", "pt"}});
  EXPECT_NE(
      error_of([&] { load_hf_gpt2(dir); }).find("unexpected tensor transformer.h.2.ln_1.weight"),
      std::string::npos);

  auto misshapen = good;
  for (auto& [n, t] : misshapen)
    if (n == "transformer.h.0.attn.c_proj.weight") t = Tensor::zeros({16, 8});
  write_safetensors(dir + "/model.safetensors", misshapen, {{"format", "pt"}});
  EXPECT_NE(error_of([&] {
              load_hf_gpt2(dir);
            }).find("transformer.h.0.attn.c_proj.weight has shape [16, 8], expected [16, 16]"),
            std::string::npos)
      << error_of([&] { load_hf_gpt2(dir); });

  std::filesystem::remove(dir + "/config.json");
  EXPECT_NE(error_of([&] { load_hf_gpt2(dir); }).find("config.json does not exist"),
            std::string::npos);
  std::filesystem::create_directory(dir + "/config.json");
  EXPECT_NE(error_of([&] { load_hf_gpt2(dir); }).find("config.json is not a file"),
            std::string::npos);
}

TEST(HfGpt2, ConfigAskingForMoreThanTheWeightsHoldIsRefusedBeforeAllocating) {
  const std::string dir = testing::scratch_dir() + "/hf";
  Gpt model(tiny());
  save_hf_gpt2(model, dir);
  nlohmann::json config = read_json(dir + "/config.json");
  config["n_layer"] = 1e9;
  write_json(dir + "/config.json", config);
  const std::string e = error_of([&] { load_hf_gpt2(dir); });
  EXPECT_NE(e.find("(n_layer 1000000000, n_embd 16, vocab_size 37, n_positions 16), more than "
                   "the "),
            std::string::npos)
      << e;
}

// Careless or hostile directories: an integer weight is not read as float bits, counts are
// not truncated, a dropout no run accepts is refused at import, nesting and FIFOs are
// refused by name, never a crash or a hang.
TEST(HfGpt2, HostileDirectoriesAreRefusedByName) {
  const std::string dir = testing::scratch_dir() + "/hf";
  Gpt model(tiny());
  model.init(5);
  save_hf_gpt2(model, dir);
  const auto good = exported_tensors(dir);
  const nlohmann::json config = read_json(dir + "/config.json");

  auto as_i32 = good;
  for (auto& [n, t] : as_i32)
    if (n == "transformer.h.0.ln_1.weight") t = Tensor::zeros({16}, DType::i32);
  write_safetensors(dir + "/model.safetensors", as_i32, {{"format", "pt"}});
  EXPECT_NE(error_of([&] {
              load_hf_gpt2(dir);
            }).find("transformer.h.0.ln_1.weight is stored as I32; expected a float weight"),
            std::string::npos)
      << error_of([&] { load_hf_gpt2(dir); });
  write_safetensors(dir + "/model.safetensors", good, {{"format", "pt"}});

  auto refused = [&](const char* key, nlohmann::json value, const std::string& expect) {
    nlohmann::json j = config;
    j[key] = value;
    write_json(dir + "/config.json", j);
    const std::string e = error_of([&] { load_hf_gpt2(dir); });
    EXPECT_NE(e.find(expect), std::string::npos) << key << ": " << e;
  };
  refused("n_layer", 1.7, "config.json: n_layer must be an integer, got 1.7");
  refused("n_embd", 16.5, "config.json: n_embd must be an integer, got 16.5");
  refused("resid_pdrop", 5, "config.json: resid_pdrop must be in [0, 1), got 5");
  write_json(dir + "/config.json", config);
  EXPECT_EQ(error_of([&] { load_hf_gpt2(dir); }), "");

  std::ofstream(dir + "/config.json") << "{\"n_layer\": " << std::string(100000, '[');
  EXPECT_NE(error_of([&] { load_hf_gpt2(dir); }).find("JSON nested deeper than 64 levels"),
            std::string::npos);
  write_json(dir + "/config.json", config);

  // A shard that is a FIFO: open() would wait for a writer forever.
  std::filesystem::remove(dir + "/model.safetensors");
  nlohmann::json index = {{"weight_map", nlohmann::json::object()}};
  for (const auto& e : good) index["weight_map"][e.first] = "model-00001-of-00001.safetensors";
  write_json(dir + "/model.safetensors.index.json", index);
  ASSERT_EQ(::mkfifo((dir + "/model-00001-of-00001.safetensors").c_str(), 0600), 0);
  EXPECT_NE(
      error_of([&] { load_hf_gpt2(dir); }).find(dir + "/model-00001-of-00001.safetensors (a FIFO)"),
      std::string::npos)
      << error_of([&] { load_hf_gpt2(dir); });
}

// save_pretrained with max_shard_size: model.safetensors.index.json names the shards; the
// shards together are the model. An index naming a missing shard, or a shard not holding
// what the index puts there, is an error naming both.
TEST(HfGpt2, ShardedDirectoriesAreRead) {
  const std::string dir = testing::scratch_dir() + "/hf";
  Gpt model(tiny());
  model.init(6);
  save_hf_gpt2(model, dir);
  const auto tensors = exported_tensors(dir);
  std::filesystem::remove(dir + "/model.safetensors");
  std::vector<std::pair<std::string, Tensor>> first, second;
  nlohmann::json index = {{"metadata", {{"total_size", 0}}},
                          {"weight_map", nlohmann::json::object()}};
  for (const auto& e : tensors) {
    const bool later = e.first.find(".h.1.") != std::string::npos;
    (later ? second : first).push_back(e);
    index["weight_map"][e.first] =
        later ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
  }
  write_safetensors(dir + "/model-00001-of-00002.safetensors", first, {{"format", "pt"}});
  write_safetensors(dir + "/model-00002-of-00002.safetensors", second, {{"format", "pt"}});
  write_json(dir + "/model.safetensors.index.json", index);
  HfGpt2 back = load_hf_gpt2(dir);
  for (const auto& p : model.slab().parameters())
    EXPECT_EQ(back.params.at(p.name).to_vector<float>(), p.value.to_vector<float>()) << p.name;

  auto wrong = index;
  wrong["weight_map"]["transformer.h.1.ln_1.bias"] = "model-00001-of-00002.safetensors";
  write_json(dir + "/model.safetensors.index.json", wrong);
  EXPECT_NE(error_of([&] { load_hf_gpt2(dir); })
                .find("puts transformer.h.1.ln_1.bias in model-00001-of-00002.safetensors, which "
                      "does not hold it"),
            std::string::npos)
      << error_of([&] { load_hf_gpt2(dir); });
  std::filesystem::remove(dir + "/model-00002-of-00002.safetensors");
  write_json(dir + "/model.safetensors.index.json", index);
  EXPECT_NE(error_of([&] {
              load_hf_gpt2(dir);
            }).find("names shard model-00002-of-00002.safetensors, which does not exist"),
            std::string::npos);
}

// Only pytorch_model.bin (what save_pretrained wrote before safetensors became its default):
// refused with what is there and the command that converts it.
TEST(HfGpt2, PickleOnlyDirectoryIsRefusedWithTheConversion) {
  const std::string dir = testing::scratch_dir() + "/hf";
  Gpt model(tiny());
  save_hf_gpt2(model, dir);
  std::filesystem::rename(dir + "/model.safetensors", dir + "/pytorch_model.bin");
  const std::string e = error_of([&] { load_hf_gpt2(dir); });
  EXPECT_NE(e.find("has no model.safetensors (nor model.safetensors.index.json); it has "
                   "pytorch_model.bin"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("save_pretrained('" + dir + "', safe_serialization=True)"), std::string::npos)
      << e;
}

// The exported reference model, read the way transformers reads it (Conv1D x @ W + b, names,
// format metadata, tied head) by tests/reference/check_hf_export.py in plain PyTorch, gives
// the golden logits of tests/reference/. Runs only where Debian's python3-torch is installed.
TEST(HfGpt2, ExportGivesTheReferenceLogitsReadTheTransformersWay) {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 with torch (Debian python3-torch) not found";
  const std::string ref = testing::source_dir() + "/tests/reference";
  const std::string input = ref + "/golden/gpt2_tiny_input.safetensors";
  const std::string golden = ref + "/golden/gpt2_tiny_golden.safetensors";
  SafetensorsFile f = read_safetensors(input);
  const auto j = nlohmann::json::parse(f.metadata().at("case")).at("model");
  GptConfig c;
  c.vocab_size = j.at("vocab_size");
  c.n_positions = j.at("n_positions");
  c.n_layer = j.at("n_layer");
  c.n_head = j.at("n_head");
  c.n_embd = j.at("n_embd");
  HfGpt2 hf{c, {}};
  for (const auto& n : f.names())
    if (n.rfind("param.", 0) == 0) hf.params[n.substr(6)] = f.get(n);
  Gpt model(c);
  load_into(hf, model);
  const std::string dir = testing::scratch_dir() + "/hf";
  save_hf_gpt2(model, dir);
  const std::string cmd = "/usr/bin/python3 " + ref + "/check_hf_export.py " + dir + " " + input +
                          " " + golden + " 1e-5";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

}  // namespace
}  // namespace driftless::layers
