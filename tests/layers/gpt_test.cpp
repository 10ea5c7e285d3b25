// The GPT-2 model on CPU: a loss that backpropagates into every parameter, and the heart of
// the promise at model level: micro-sequences over the K/V buffers give the gradients of
// one pass over the whole sequence.
#include "layers/gpt.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "data/sampler.h"
#include "engine/autograd/autograd.h"
#include "layers/attention/routes/buffer_route.h"
#include "layers/attention/routes/fault_route.h"
#include "layers/attention/routes/local_route.h"
#include "tests/layers/gpt_test_util.h"

namespace driftless::layers {
namespace {

using test_util::packed;
using test_util::rms_rel;

GptConfig tiny_config() {
  return test_util::tiny_gpt_config();
}

// Gradient slab after a full step over `seqs` cut into m micro-sequences.
// route: the buffer route's (over one rank) unless given.
std::vector<float> gradients(Gpt& model, const std::vector<data::PackedSequence>& seqs, int m,
                             AttentionRoute* route = nullptr, bool reversed_slots = false) {
  const int64_t S = int64_t(seqs[0].tokens.size());
  BufferRoute buffers;
  if (!route) route = &buffers;
  model.slab().zero_grads();
  model.prepare_route(*route, int64_t(seqs.size()), S);
  route->zero_grads();
  int64_t tokens = 0;
  for (const auto& s : seqs) tokens += s.loss_tokens();
  std::vector<std::vector<data::ModelInput>> inputs(static_cast<size_t>(m));
  std::vector<Tensor> losses;
  ForwardOptions o;
  o.route = route;
  for (int i = 0; i < m; ++i) {
    std::vector<PartInput> slice;
    for (size_t b = 0; b < seqs.size(); ++b)
      inputs[size_t(i)].push_back(data::make_model_input(seqs[b], {i, m, 0, 1}, 0));
    for (size_t b = 0; b < seqs.size(); ++b)
      slice.push_back({std::make_shared<const data::ModelInput>(inputs[size_t(i)][b]), int64_t(b),
                       reversed_slots ? int64_t(seqs.size() - 1 - b) : int64_t(b)});
    losses.push_back(model.loss(slice, 1.0 / double(tokens), o));
  }
  for (int i = m - 1; i >= 0; --i) autograd::backward(losses[size_t(i)]);
  return model.slab().grads().to_vector<float>();
}

TEST(Gpt, LossAndGradientsReachEveryParameter) {
  Gpt model(tiny_config());
  model.init(1);
  auto seqs = std::vector<data::PackedSequence>{packed({5, 0, 11, 3, 13}, 37, 2)};
  auto g = gradients(model, seqs, 1);
  for (const auto& p : model.slab().parameters()) {
    double norm = 0;
    for (int64_t i = p.begin; i < p.end; ++i) norm += std::abs(g[size_t(i)]);
    EXPECT_GT(norm, 0.0) << p.name;
    EXPECT_TRUE(std::isfinite(norm)) << p.name;
  }
}

// model.score_mod_params with learnable: true: one slab parameter per layer, initialised
// to the configured values, reached by the gradient; fixed ones are not in the slab.
TEST(Gpt, LearnableExpressionParametersArePerLayerSlabParameters) {
  GptConfig c = tiny_config();
  c.score_mod = "score - slope[h] * abs(q - k) + bias[h, clamp(q - k, 0, 3)]";
  c.score_mod_decls = {{"slope", {c.n_head}, std::vector<double>(size_t(c.n_head), 0.25), false},
                       {"bias", {c.n_head, 4}, std::vector<double>(size_t(4 * c.n_head), 0.5),
                        true}};
  Gpt model(c);
  model.init(1);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const Parameter& b = model.slab().get("h." + std::to_string(l) + ".score_mod.bias");
    EXPECT_EQ(b.value.shape(), (Shape{c.n_head, 4}));
    EXPECT_FALSE(b.weight_decay);
    for (float v : b.value.to_vector<float>()) EXPECT_EQ(v, 0.5f);
  }
  for (const auto& p : model.slab().parameters())
    EXPECT_EQ(p.name.find("slope"), std::string::npos) << "a fixed parameter in the slab";
  auto seqs = std::vector<data::PackedSequence>{packed({5, 0, 11, 3, 13}, 37, 2)};
  auto g = gradients(model, seqs, 1);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const Parameter& b = model.slab().get("h." + std::to_string(l) + ".score_mod.bias");
    double norm = 0;
    for (int64_t i = b.begin; i < b.end; ++i) norm += std::abs(g[size_t(i)]);
    EXPECT_GT(norm, 0.0) << b.name;
  }
  // Micro-sequences see the same document positions: the same gradients.
  auto g2 = gradients(model, seqs, 2);
  EXPECT_LT(rms_rel(g2, g), 1e-5);
}

TEST(Gpt, MicroSequencesGiveTheGradientsOfOnePass) {
  Gpt model(tiny_config());
  model.init(3);
  auto seqs = std::vector<data::PackedSequence>{packed({5, 0, 11, 3, 13}, 37, 4),
                                                packed({32}, 37, 5), packed({1, 30, 1}, 37, 6)};
  auto simple = gradients(model, seqs, 1);
  for (int m : {2, 4, 8}) {
    auto g = gradients(model, seqs, m);
    EXPECT_LT(rms_rel(g, simple), 1e-5) << "m = " << m;
  }
}

// Whole sequences in adjacent slots write and read their K/V as one run of the buffer
// (one copy); in any other slot order each sequence goes on its own. Same gradients.
TEST(Gpt, WholeSequencesInAdjacentSlotsMatchThePerSequencePath) {
  Gpt model(tiny_config());
  model.init(5);
  auto seqs = std::vector<data::PackedSequence>{packed({5, 0, 11, 3, 13}, 37, 7),
                                                packed({32}, 37, 8), packed({1, 30, 1}, 37, 9)};
  auto run = gradients(model, seqs, 1);
  auto apart = gradients(model, seqs, 1, nullptr, /*reversed_slots=*/true);
  EXPECT_LT(rms_rel(run, apart), 1e-6);
  double norm = 0;
  for (float v : run) norm += std::abs(v);
  EXPECT_GT(norm, 0.0);
}

// Whole sequences on one rank may read K/V straight from the QKV product (the local route,
// the trainer's choice without micro-sequences): the same bits as through the K/V buffer.
// Micro-sequences need the buffer: the local route refuses them.
TEST(Gpt, LocalRouteGivesTheBufferRoutesBits) {
  Gpt model(tiny_config());
  model.init(6);
  auto seqs =
      std::vector<data::PackedSequence>{packed({5, 0, 11, 3, 13}, 37, 10), packed({32}, 37, 11)};
  LocalRoute local;
  EXPECT_EQ(gradients(model, seqs, 1, &local), gradients(model, seqs, 1));
  try {
    gradients(model, seqs, 4, &local);
    FAIL() << "the local route took micro-sequences";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected whole sequences"), std::string::npos)
        << e.what();
  }
}

TEST(Gpt, DroppedKvGradientSliceIsCaught) {
  Gpt model(tiny_config());
  model.init(3);
  auto seqs = std::vector<data::PackedSequence>{packed({5, 0, 11, 3, 13}, 37, 4)};
  auto simple = gradients(model, seqs, 1);
  RouteFaults f;
  f.layer = 1;
  f.drop_kv_grad_slice = true;
  FaultRoute faulty(f, nullptr, [](KvExchange* ex) { return std::make_unique<BufferRoute>(ex); });
  EXPECT_GT(rms_rel(gradients(model, seqs, 4, &faulty), simple), 1e-3);
  // The fault is in layer 1 only: the route it wraps gives the plain gradients elsewhere.
  RouteFaults none;
  FaultRoute clean(none, nullptr, [](KvExchange* ex) { return std::make_unique<BufferRoute>(ex); });
  EXPECT_EQ(gradients(model, seqs, 4, &clean), gradients(model, seqs, 4));
}

TEST(Gpt, PositionBeyondTableIsAClearError) {
  GptConfig c = tiny_config();
  c.n_positions = 8;
  Gpt model(c);
  model.init(1);
  auto seqs = std::vector<data::PackedSequence>{packed({32}, 37, 2)};
  try {
    gradients(model, seqs, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds model.n_positions (8)"), std::string::npos);
  }
}

}  // namespace
}  // namespace driftless::layers
