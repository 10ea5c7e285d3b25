// Tier 3 of CONTRIBUTING.md, "against something real": the tiny GPT-2's loss, logits, every
// parameter gradient and a 10-step AdamW loss trajectory against PyTorch (float64) on the
// same weights and packed batch. The inputs (written by this file, see
// GptReferenceInput.DISABLED_Write) and the golden outputs (tests/reference/gpt2_reference.py) are
// committed under tests/reference/golden/; tests/reference/regenerate.sh rebuilds both. No Python
// here.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "data/sampler.h"
#include "engine/autograd/autograd.h"
#include "engine/core/random.h"
#include "engine/core/safetensors.h"
#include "engine/optim/adamw.h"
#include "layers/attention/routes/buffer_route.h"
#include "layers/gpt.h"
#include "tests/layers/gpt_test_util.h"
#include "tests/test_paths.h"

namespace driftless::layers {
namespace {

// Tolerances of the fp32 model against the float64 reference, relative as rms(t - r) / rms(r).
constexpr double kLossTol = 1e-5;
constexpr double kLogitsTol = 1e-5;
constexpr double kGradTol = 1e-4;
// The trajectory is held to the loss tolerance. Measured when the golden file was made:
// loss 3e-8, logits 4e-7, worst gradient 1.1e-6, trajectory 1.9e-7 — the same as PyTorch's
// own fp32 run against its float64 one (8e-8, 4.8e-7, 1.3e-6, 2.2e-7), which
// gpt2_reference.py prints when regenerating.
constexpr double kTrajectoryTol = 1e-5;

std::string input_path() {
  return testing::source_dir() + "/tests/reference/golden/gpt2_tiny_input.safetensors";
}
std::string golden_path() {
  return testing::source_dir() + "/tests/reference/golden/gpt2_tiny_golden.safetensors";
}

// Everything both sides agree on: the model, the batch and the optimizer.
struct ReferenceCase {
  GptConfig config;
  std::vector<data::PackedSequence> sequences;
  optim::AdamWConfig adamw;
  int steps = 10;
  std::map<std::string, Tensor> params;  // by our parameter name
};

// The case written by WriteInput (only when regenerating): documents of several lengths,
// including zero-length and one-token ones, and weights that are not GPT-2's init (random
// biases and layer-norm gains, larger attention weights) so every parameter matters.
ReferenceCase make_case() {
  ReferenceCase c;
  c.config.vocab_size = 64;
  c.config.n_positions = 32;
  c.config.n_layer = 2;
  c.config.n_head = 4;
  c.config.n_embd = 32;
  c.adamw.lr = 1e-2;
  c.adamw.beta1 = 0.9;
  c.adamw.beta2 = 0.95;
  c.adamw.eps = 1e-8;
  c.adamw.weight_decay = 0.1;
  const std::vector<std::vector<int32_t>> lengths = {{5, 0, 11, 3, 13}, {1, 19, 0, 12}};
  uint64_t seed = 100;
  for (const auto& doc_lengths : lengths) {
    data::PackedSequence s;
    s.index = int64_t(c.sequences.size());
    s.document_lengths = doc_lengths;
    int64_t S = 0;
    for (int32_t l : doc_lengths) S += l;
    Tensor r = Tensor::uniform({S}, seed++, 0, double(c.config.vocab_size));
    for (int64_t i = 0; i < S; ++i) s.tokens.push_back(int32_t(r.at({i})));
    int64_t pos = 0;
    for (int32_t l : doc_lengths) {
      for (int32_t j = 0; j < l; ++j) s.labels.push_back(j + 1 < l ? s.tokens[pos + j + 1] : -1);
      pos += l;
    }
    c.sequences.push_back(s);
  }
  Gpt model(c.config);
  uint64_t index = 0;
  for (const auto& p : model.slab().parameters()) {
    const bool gain = p.name.find("ln_") != std::string::npos && p.name.ends_with(".weight");
    const bool bias = p.name.ends_with(".bias");
    const double std =
        gain || bias ? 0.1 : (p.name.find("c_attn") != std::string::npos ? 0.25 : 0.1);
    Tensor t = Tensor::randn(p.value.shape(), random::derive(7, index++), DType::f32, 0.0, std);
    if (gain) {
      std::vector<float> v = t.to_vector<float>();
      for (float& x : v) x += 1.0f;
      t = Tensor::from_vector(v, t.shape());
    }
    c.params[p.name] = t;
  }
  return c;
}

nlohmann::json case_json(const ReferenceCase& c, const ParameterSlab& slab) {
  nlohmann::json j;
  j["model"] = {{"vocab_size", c.config.vocab_size}, {"n_positions", c.config.n_positions},
                {"n_layer", c.config.n_layer},       {"n_head", c.config.n_head},
                {"n_kv_head", c.config.kv_heads()},  {"n_embd", c.config.n_embd},
                {"layer_norm_epsilon", 1e-5},        {"activation", "gelu_tanh"}};
  j["adamw"] = {{"lr", c.adamw.lr},
                {"beta1", c.adamw.beta1},
                {"beta2", c.adamw.beta2},
                {"eps", c.adamw.eps},
                {"weight_decay", c.adamw.weight_decay},
                {"steps", c.steps}};
  nlohmann::json decay = nlohmann::json::object();
  for (const auto& p : slab.parameters()) decay[p.name] = p.weight_decay;
  j["weight_decay_on"] = decay;
  j["loss"] = "sum of cross-entropy over tokens with label >= 0, divided by their count";
  return j;
}

// Regeneration only (tests/reference/regenerate.sh runs it with
// --gtest_also_run_disabled_tests): writes the committed input file.
TEST(GptReferenceInput, DISABLED_Write) {
  ReferenceCase c = make_case();
  Gpt model(c.config);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& p : model.slab().parameters())
    tensors.push_back({"param." + p.name, c.params.at(p.name)});
  for (auto& t : test_util::packed_tensors(c.sequences)) tensors.push_back(std::move(t));
  std::filesystem::create_directories(std::filesystem::path(input_path()).parent_path());
  write_safetensors(input_path(), tensors, {{"case", case_json(c, model.slab()).dump()}});
  std::cout << "wrote " << input_path() << "\n";
}

// The committed input file back into a case.
ReferenceCase load_case() {
  SafetensorsFile f = read_safetensors(input_path());
  const auto j = nlohmann::json::parse(f.metadata().at("case"));
  ReferenceCase c;
  const auto& m = j.at("model");
  c.config.vocab_size = m.at("vocab_size");
  c.config.n_positions = m.at("n_positions");
  c.config.n_layer = m.at("n_layer");
  c.config.n_head = m.at("n_head");
  c.config.n_kv_head = m.at("n_kv_head");
  c.config.n_embd = m.at("n_embd");
  const auto& a = j.at("adamw");
  c.adamw.lr = a.at("lr");
  c.adamw.beta1 = a.at("beta1");
  c.adamw.beta2 = a.at("beta2");
  c.adamw.eps = a.at("eps");
  c.adamw.weight_decay = a.at("weight_decay");
  c.steps = a.at("steps");
  const auto tokens = f.get("tokens"), labels = f.get("labels");
  const auto lengths = f.get("document_lengths").to_vector<int32_t>();
  const auto counts = f.get("document_counts").to_vector<int32_t>();
  const int64_t B = tokens.size(0);
  size_t next = 0;
  for (int64_t b = 0; b < B; ++b) {
    data::PackedSequence s;
    s.index = b;
    s.tokens = tokens.select(0, b).to_vector<int32_t>();
    s.labels = labels.select(0, b).to_vector<int32_t>();
    s.document_lengths.assign(lengths.begin() + int64_t(next),
                              lengths.begin() + int64_t(next) + counts[size_t(b)]);
    next += size_t(counts[size_t(b)]);
    c.sequences.push_back(s);
  }
  for (const auto& name : f.names())
    if (name.starts_with("param.")) c.params[name.substr(6)] = f.get(name);
  return c;
}

std::unique_ptr<Gpt> make_model(const ReferenceCase& c) {
  auto model = std::make_unique<Gpt>(c.config);
  autograd::NoGradGuard no_grad;
  for (const auto& p : model->slab().parameters()) p.value.copy_(c.params.at(p.name));
  return model;
}

int64_t loss_tokens(const ReferenceCase& c) {
  int64_t n = 0;
  for (const auto& s : c.sequences) n += s.loss_tokens();
  return n;
}

// Loss of one step over the whole batch cut into m micro-sequences; gradients land in the
// slab (zeroed first). Returns the summed loss.
double step_loss(Gpt& model, const ReferenceCase& c, int m) {
  const int64_t S = int64_t(c.sequences[0].tokens.size());
  model.slab().zero_grads();
  BufferRoute route;
  model.prepare_route(route, int64_t(c.sequences.size()), S);
  route.zero_grads();
  std::vector<std::vector<data::ModelInput>> inputs(static_cast<size_t>(m));
  std::vector<Tensor> losses;
  ForwardOptions o;
  o.route = &route;
  for (int i = 0; i < m; ++i) {
    std::vector<PartInput> slice;
    for (const auto& s : c.sequences)
      inputs[size_t(i)].push_back(data::make_model_input(s, {i, m, 0, 1}, 0));
    for (size_t b = 0; b < c.sequences.size(); ++b)
      slice.push_back(
          {std::make_shared<const data::ModelInput>(inputs[size_t(i)][b]), int64_t(b), int64_t(b)});
    losses.push_back(model.loss(slice, 1.0 / double(loss_tokens(c)), o));
  }
  double total = 0;
  for (const auto& l : losses) total += l.item();
  for (int i = m - 1; i >= 0; --i) autograd::backward(losses[size_t(i)]);
  return total;
}

// rms(t - r) / rms(r), in double.
double rms_rel(const Tensor& test, const Tensor& ref) {
  EXPECT_EQ(test.shape(), ref.shape());
  const auto t = test.to_vector<double>(), r = ref.to_vector<double>();
  double d = 0, s = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    d += (t[i] - r[i]) * (t[i] - r[i]);
    s += r[i] * r[i];
  }
  return std::sqrt(d / (s + 1e-300));
}

class GptReference : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(input_path())) << input_path();
    ASSERT_TRUE(std::filesystem::exists(golden_path())) << golden_path();
    golden_ = std::make_unique<SafetensorsFile>(read_safetensors(golden_path()));
    case_ = load_case();
  }
  std::unique_ptr<SafetensorsFile> golden_;
  ReferenceCase case_;
};

TEST_F(GptReference, InputsAreTheCaseThisFileWrites) {
  // The committed input was made by make_case(); if the model's parameter list changes,
  // regenerate (tests/reference/regenerate.sh) rather than patch the files.
  ReferenceCase fresh = make_case();
  Gpt model(fresh.config);
  ASSERT_EQ(case_.params.size(), model.slab().parameters().size());
  for (const auto& p : model.slab().parameters()) {
    ASSERT_TRUE(case_.params.count(p.name)) << p.name << " missing from " << input_path();
    EXPECT_EQ(case_.params.at(p.name).shape(), p.value.shape()) << p.name;
    EXPECT_EQ(rms_rel(case_.params.at(p.name), fresh.params.at(p.name)), 0.0) << p.name;
  }
  for (size_t b = 0; b < fresh.sequences.size(); ++b) {
    EXPECT_EQ(case_.sequences[b].tokens, fresh.sequences[b].tokens);
    EXPECT_EQ(case_.sequences[b].labels, fresh.sequences[b].labels);
    EXPECT_EQ(case_.sequences[b].document_lengths, fresh.sequences[b].document_lengths);
  }
}

TEST_F(GptReference, LossLogitsAndGradientsMatchPyTorch) {
  auto model = make_model(case_);
  const double loss = step_loss(*model, case_, 1);
  const double ref_loss = golden_->get("loss").to_vector<double>()[0];
  const double loss_err = std::abs(loss - ref_loss) / std::abs(ref_loss);
  std::cout << "loss " << loss << " vs " << ref_loss << ": rel " << loss_err << "\n";
  EXPECT_LE(loss_err, kLossTol);

  double worst = 0;
  std::string worst_name;
  for (const auto& p : model->slab().parameters()) {
    ASSERT_TRUE(golden_->contains("grad." + p.name)) << p.name;
    const double e = rms_rel(p.grad, golden_->get("grad." + p.name));
    EXPECT_LE(e, kGradTol) << "gradient of " << p.name;
    if (e > worst) worst = e, worst_name = p.name;
  }
  std::cout << "worst gradient rms_rel " << worst << " (" << worst_name << ")\n";

  std::vector<data::ModelInput> inputs;
  for (const auto& s : case_.sequences)
    inputs.push_back(data::make_model_input(s, {0, 1, 0, 1}, 0));
  std::vector<PartInput> slice;
  for (size_t b = 0; b < inputs.size(); ++b)
    slice.push_back({std::make_shared<const data::ModelInput>(inputs[b]), int64_t(b), int64_t(b)});
  BufferRoute route;
  model->prepare_route(route, int64_t(inputs.size()), int64_t(case_.sequences[0].tokens.size()));
  Tensor logits = [&] {
    autograd::NoGradGuard no_grad;
    ForwardOptions o;
    o.route = &route;
    return model->logits(slice, o);
  }();
  const double logits_err = rms_rel(logits, golden_->get("logits"));
  std::cout << "logits rms_rel " << logits_err << "\n";
  EXPECT_LE(logits_err, kLogitsTol);
}

TEST_F(GptReference, MicroSequencesMatchPyTorch) {
  auto model = make_model(case_);
  for (int m : {2, 4, 8}) {
    const double loss = step_loss(*model, case_, m);
    const double ref_loss = golden_->get("loss").to_vector<double>()[0];
    EXPECT_LE(std::abs(loss - ref_loss) / std::abs(ref_loss), kLossTol) << "m = " << m;
    for (const auto& p : model->slab().parameters())
      EXPECT_LE(rms_rel(p.grad, golden_->get("grad." + p.name)), kGradTol)
          << "gradient of " << p.name << ", m = " << m;
  }
}

TEST_F(GptReference, AdamWLossTrajectoryMatchesPyTorch) {
  auto model = make_model(case_);
  std::vector<optim::ParamRange> ranges;
  for (const auto& p : model->slab().parameters())
    ranges.push_back({p.name, p.begin, p.end, p.weight_decay});
  optim::AdamW adamw(case_.adamw, ranges, model->slab().numel());
  const auto ref = golden_->get("losses").to_vector<double>();
  ASSERT_EQ(ref.size(), size_t(case_.steps + 1));
  double worst = 0;
  for (int step = 0; step <= case_.steps; ++step) {
    const double loss = step_loss(*model, case_, 1);
    const double e = std::abs(loss - ref[size_t(step)]) / std::abs(ref[size_t(step)]);
    EXPECT_LE(e, kTrajectoryTol) << "loss before update " << step << ": " << loss << " vs "
                                 << ref[size_t(step)];
    worst = std::max(worst, e);
    if (step < case_.steps) adamw.step(model->slab().params(), model->slab().grads());
  }
  std::cout << "trajectory " << ref.front() << " -> " << ref.back() << ", worst rel " << worst
            << "\n";
  EXPECT_LT(ref.back(), ref.front() - 0.1);  // the optimizer does move the loss
}

}  // namespace
}  // namespace driftless::layers
