// Generation over the K/V cache (layers/generate.h): one token at a time over the buffers
// must give exactly what recomputing the whole sequence from scratch gives, token for token
// and logit for logit; sampling is seeded and respects top-k.
#include "layers/generate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>

#include "engine/autograd/autograd.h"
#include "tests/layers/gpt_test_util.h"

namespace driftless::layers {
namespace {

GptConfig tiny_config() {
  return test_util::tiny_gpt_config(41, 48);
}

// A random model whose weights are large enough that greedy decoding does not collapse
// onto one token, so the test exercises attention over a growing past.
Gpt random_model(const GptConfig& c, uint64_t seed) {
  Gpt m(c);
  m.init(seed);
  autograd::NoGradGuard no_grad;
  for (const auto& p : m.slab().parameters())
    if (p.name.find("weight") != std::string::npos && p.name.find("ln_") == std::string::npos &&
        p.name.find("norm") == std::string::npos)
      p.value.copy_(
          Tensor::randn(p.value.shape(), seed + 7 + uint64_t(p.begin), DType::f32, 0.0, 0.3));
  return m;
}

// Logits of the last row when the whole sequence is run from position 0 in a fresh model
// (its own buffers), i.e. no cache, and through the training path (autograd on) rather
// than generation's no-grad path.
std::vector<float> uncached_last_logits(const Gpt& weights, const std::vector<int32_t>& seq) {
  Gpt fresh(weights.config());
  {
    autograd::NoGradGuard no_grad;
    fresh.slab().params().copy_(weights.slab().params());
  }
  const int64_t n = int64_t(seq.size());
  BufferRoute route;
  fresh.prepare_route(route, 1, n);
  const data::ModelInput in = generation_input(seq, 0, n);
  ForwardOptions o;
  o.training = false;
  o.route = &route;
  Tensor logits =
      fresh.logits({{std::make_shared<const data::ModelInput>(in), 0, 0}}, o);  // (n, V)
  EXPECT_TRUE(logits.requires_grad());
  return logits.narrow(0, n - 1, 1).to_vector<float>();
}

double max_rel(const std::vector<float>& t, const std::vector<float>& r) {
  double d = 0, s = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    d = std::max(d, std::abs(double(t[i]) - r[i]));
    s = std::max(s, std::abs(double(r[i])));
  }
  return d / std::max(s, 1e-30);
}

TEST(Generate, CachedGreedyEqualsRecomputingEachStep) {
  for (uint64_t seed : {1, 2, 3, 4, 5}) {
    GptConfig c = tiny_config();
    if (seed == 3) c.n_kv_head = 0;  // plain multi-head as well as GQA
    if (seed >= 4) {                 // llama: rotary positions over the cache
      c.architecture = Architecture::llama;
      c.intermediate_size = 24;
    }
    if (seed == 5) {  // an untied head, and a sliding window shorter than the sequence
      c.tie_word_embeddings = false;
      c.sliding_window = 6;
    }
    Gpt model = random_model(c, seed);
    const std::vector<int32_t> prompt = {3, 17, 5, 40, 0, 22, 9};
    const int64_t n_new = 30;
    const std::vector<int32_t> got = generate(model, prompt, n_new, 1, 1.0, 0);
    ASSERT_EQ(int64_t(got.size()), n_new);

    // The reference: at each step, recompute the whole sequence and take the argmax.
    std::vector<int32_t> seq = prompt;
    for (int64_t i = 0; i < n_new; ++i) {
      const std::vector<float> ref = uncached_last_logits(model, seq);
      const int32_t next = int32_t(std::max_element(ref.begin(), ref.end()) - ref.begin());
      ASSERT_EQ(got[size_t(i)], next) << "seed " << seed << ", new token " << i;
      seq.push_back(next);
    }
    std::set<int32_t> distinct(got.begin(), got.end());
    EXPECT_GE(distinct.size(), 3u) << "the test model should not collapse onto one token";
  }
}

TEST(Generate, CachedLogitsEqualRecomputedLogitsAtEveryPosition) {
  Gpt model = random_model(tiny_config(), 5);
  std::vector<int32_t> seq = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12,
                              13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
                              25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35};
  for (auto& t : seq) t = (t * 13 + 7) % 41;
  const int64_t n_prompt = 4;
  BufferRoute cache;
  model.prepare_route(cache, 1, int64_t(seq.size()));
  std::vector<float> cached =
      forward_cached(model, cache, std::span<const int32_t>(seq.data(), size_t(n_prompt)), 0);
  for (size_t pos = size_t(n_prompt);; ++pos) {
    const std::vector<int32_t> prefix(seq.begin(), seq.begin() + int64_t(pos));
    const std::vector<float> ref = uncached_last_logits(model, prefix);
    ASSERT_EQ(cached.size(), ref.size());
    EXPECT_LE(max_rel(cached, ref), 1e-5) << "sequence length " << pos;
    if (pos == seq.size()) break;
    cached = forward_cached(model, cache, std::span<const int32_t>(&seq[pos], 1), int64_t(pos));
  }
}

TEST(Generate, StopsAtEndOfTextAndAtThePositionTable) {
  Gpt model = random_model(tiny_config(), 1);
  const std::vector<int32_t> prompt = {3, 17, 5};
  const std::vector<int32_t> greedy = generate(model, prompt, 10, 1, 1.0, 0);
  // Declaring the 4th greedy token end-of-text stops generation right before it.
  const int32_t eot = greedy[3];
  const auto first = std::find(greedy.begin(), greedy.end(), eot) - greedy.begin();
  const std::vector<int32_t> stopped = generate(model, prompt, 10, 1, 1.0, 0, eot);
  EXPECT_EQ(std::vector<int32_t>(greedy.begin(), greedy.begin() + first), stopped);
  // Asking for more than fits: the sequence ends at n_positions.
  const std::vector<int32_t> all = generate(model, prompt, 1000, 1, 1.0, 0);
  EXPECT_EQ(int64_t(all.size()), tiny_config().n_positions - int64_t(prompt.size()));
}

TEST(Generate, SamplingIsSeededAndStaysInTheTopK) {
  Gpt model = random_model(tiny_config(), 2);
  const std::vector<int32_t> prompt = {3, 17, 5};
  const auto a = generate(model, prompt, 20, 5, 1.0, 42);
  EXPECT_EQ(a, generate(model, prompt, 20, 5, 1.0, 42));
  EXPECT_NE(a, generate(model, prompt, 20, 5, 1.0, 43));
  // temperature 0 is greedy whatever top_k says
  EXPECT_EQ(generate(model, prompt, 20, 0, 0.0, 42), generate(model, prompt, 20, 1, 1.0, 7));
  // Every sampled token is among the 5 most likely for its prefix.
  std::vector<int32_t> seq = prompt;
  for (int32_t t : a) {
    std::vector<float> l = uncached_last_logits(model, seq);
    std::vector<float> sorted = l;
    std::sort(sorted.rbegin(), sorted.rend());
    EXPECT_GE(l[size_t(t)], sorted[4]);
    seq.push_back(t);
  }
}

TEST(Generate, ChooseTokenFollowsTheDistribution) {
  const std::vector<float> logits = {0.0f, std::log(3.0f), -100.0f};
  int counts[3] = {0, 0, 0};
  for (uint64_t i = 0; i < 4000; ++i) ++counts[choose_token(logits, 0, 1.0, 9, i)];
  EXPECT_NEAR(counts[1] / 4000.0, 0.75, 0.03);
  EXPECT_EQ(counts[2], 0);
  EXPECT_EQ(choose_token(logits, 1, 1.0, 9, 0), 1);
  for (uint64_t i = 0; i < 200; ++i) EXPECT_EQ(choose_token(logits, 1, 5.0, 9, i), 1);
}

// `sample --logits`: documents packed into one sequence give, row for row, the logits of each
// document run alone (positions restart, attention stays inside a document); running the
// same tokens as one document differs (the check can fail).
TEST(Generate, PackedLogitsAreEachDocumentsOwn) {
  Gpt model = random_model(tiny_config(), 4);
  const std::vector<std::vector<int32_t>> docs = {{3, 17, 5, 40, 0}, {22}, {9, 9, 1, 30, 2, 7, 11}};
  const Tensor packed = packed_logits(model, docs);  // (13, V)
  ASSERT_EQ(packed.shape(), (Shape{13, 41}));
  int64_t row = 0;
  std::vector<int32_t> all;
  for (const auto& d : docs) {
    const Tensor alone = packed_logits(model, {d});
    const int64_t n = int64_t(d.size());
    EXPECT_LE(max_rel(packed.narrow(0, row, n).to_vector<float>(), alone.to_vector<float>()), 1e-6)
        << "document at row " << row;
    // The last row equals generation's prefill of the same document.
    EXPECT_LE(max_rel(alone.narrow(0, n - 1, 1).to_vector<float>(), uncached_last_logits(model, d)),
              1e-5);
    row += n;
    all.insert(all.end(), d.begin(), d.end());
  }
  const Tensor joined = packed_logits(model, {all});
  EXPECT_GT(max_rel(joined.to_vector<float>(), packed.to_vector<float>()), 1e-2);
  EXPECT_THROW(packed_logits(model, {{1, 2}, {}}), Error);                   // an empty document
  EXPECT_THROW(packed_logits(model, {std::vector<int32_t>(49, 1)}), Error);  // > n_positions
  EXPECT_THROW(packed_logits(model, {{1, 41}}), Error);  // outside the vocabulary
}

TEST(Generate, EmptyOrTooLongPromptIsAClearError) {
  Gpt model = random_model(tiny_config(), 1);
  EXPECT_THROW(generate(model, std::vector<int32_t>{}, 4, 1, 1.0, 0), Error);
  EXPECT_THROW(generate(model, std::vector<int32_t>(48, 1), 4, 1, 1.0, 0), Error);
  EXPECT_THROW(generate(model, std::vector<int32_t>{41}, 4, 1, 1.0, 0), Error);
}

}  // namespace
}  // namespace driftless::layers
