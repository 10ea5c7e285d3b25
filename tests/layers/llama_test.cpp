// The Llama-family model (architecture llama) on CPU: its parameter names (the HF import
// relies on them), gradients into every parameter, micro-sequences against one pass, tied
// and untied heads, GQA, the sliding window, and rotary positions taken from the
// in-document index (never the row), caught when they are off by one at a part boundary.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "engine/autograd/autograd.h"
#include "engine/ops/ops.h"
#include "layers/attention/routes/buffer_route.h"
#include "layers/gpt.h"
#include "tests/layers/gpt_test_util.h"

namespace driftless::layers {
namespace {

using test_util::packed;
using test_util::rms_rel;

GptConfig llama_config() {
  GptConfig c = test_util::tiny_gpt_config();
  c.architecture = Architecture::llama;
  c.intermediate_size = 24;
  c.rope_theta = 100.0;  // small base: positions far apart rotate visibly in a short test
  return c;
}

struct Step {
  double loss = 0;
  std::vector<float> grads;
};

// Loss and gradient slab of a step over `seqs` cut into m micro-sequences (buffer route).
// shift_later_parts: positions + 1 in every micro-sequence but the first (the planted
// off-by-one of TestFaults::shift_positions).
Step step(Gpt& model, const std::vector<data::PackedSequence>& seqs, int m,
          bool shift_later_parts = false) {
  const int64_t S = int64_t(seqs[0].tokens.size());
  BufferRoute route;
  model.slab().zero_grads();
  model.prepare_route(route, int64_t(seqs.size()), S);
  route.zero_grads();
  int64_t tokens = 0;
  for (const auto& s : seqs) tokens += s.loss_tokens();
  std::vector<std::vector<data::ModelInput>> inputs(static_cast<size_t>(m));
  std::vector<Tensor> losses;
  ForwardOptions o;
  o.route = &route;
  Step r;
  for (int i = 0; i < m; ++i) {
    std::vector<PartInput> slice;
    for (size_t b = 0; b < seqs.size(); ++b) {
      data::ModelInput in = data::make_model_input(seqs[b], {i, m, 0, 1}, 0);
      if (shift_later_parts && in.query_begin > 0)
        for (int32_t& p : in.position_index) ++p;
      inputs[size_t(i)].push_back(std::move(in));
    }
    for (size_t b = 0; b < seqs.size(); ++b)
      slice.push_back(
          {std::make_shared<const data::ModelInput>(inputs[size_t(i)][b]), int64_t(b), int64_t(b)});
    losses.push_back(model.loss(slice, 1.0 / double(tokens), o));
    r.loss += losses.back().to_vector<float>()[0];
  }
  for (int i = m - 1; i >= 0; --i) autograd::backward(losses[size_t(i)]);
  r.grads = model.slab().grads().to_vector<float>();
  return r;
}

void set_param(Gpt& model, const std::string& name, const Tensor& value) {
  model.slab().get(name).value.copy_(value);
  model.slab().sync_compute();
}

TEST(Llama, ParameterNamesShapesAndCount) {
  const GptConfig c = llama_config();  // C 16, H 4, H_kv 2, D 4, F 24, V 37, 2 layers
  Gpt model(c);
  std::vector<std::string> expected{"embed_tokens.weight"};
  for (int l = 0; l < 2; ++l)
    for (const char* part :
         {"input_layernorm.weight", "self_attn.qkv_proj.weight", "self_attn.o_proj.weight",
          "post_attention_layernorm.weight", "mlp.gate_up_proj.weight", "mlp.down_proj.weight"})
      expected.push_back("layers." + std::to_string(l) + "." + part);
  expected.push_back("norm.weight");
  std::vector<std::string> names;
  for (const auto& p : model.slab().parameters()) names.push_back(p.name);
  EXPECT_EQ(names, expected);
  EXPECT_EQ(model.slab().get("embed_tokens.weight").value.shape(), (Shape{37, 16}));
  EXPECT_EQ(model.slab().get("layers.1.self_attn.qkv_proj.weight").value.shape(),
            (Shape{(4 + 2 * 2) * 4, 16}));
  EXPECT_EQ(model.slab().get("layers.1.self_attn.o_proj.weight").value.shape(), (Shape{16, 16}));
  EXPECT_EQ(model.slab().get("layers.0.mlp.gate_up_proj.weight").value.shape(), (Shape{48, 16}));
  EXPECT_EQ(model.slab().get("layers.0.mlp.down_proj.weight").value.shape(), (Shape{16, 24}));
  const int64_t per_layer = 16 + 32 * 16 + 16 * 16 + 16 + 48 * 16 + 16 * 24;
  EXPECT_EQ(model.num_parameters(), 37 * 16 + 2 * per_layer + 16);
  EXPECT_FALSE(model.slab().get("norm.weight").weight_decay);
  EXPECT_FALSE(model.slab().get("layers.0.input_layernorm.weight").weight_decay);
  EXPECT_TRUE(model.slab().get("layers.0.mlp.down_proj.weight").weight_decay);

  GptConfig u = c;
  u.tie_word_embeddings = false;
  Gpt untied(u);
  EXPECT_EQ(untied.slab().parameters().back().name, "lm_head.weight");
  EXPECT_EQ(untied.num_parameters(), model.num_parameters() + 37 * 16);
  // intermediate_size 0: 4 n_embd.
  GptConfig w = c;
  w.intermediate_size = 0;
  EXPECT_EQ(Gpt(w).slab().get("layers.0.mlp.down_proj.weight").value.shape(), (Shape{16, 64}));
}

TEST(Llama, InitIsHfLlamas) {
  Gpt model(llama_config());
  model.init(7);
  for (const auto& p : model.slab().parameters()) {
    const auto v = p.value.to_vector<float>();
    if (p.name.find("norm.weight") != std::string::npos) {
      for (float x : v) EXPECT_EQ(x, 1.0f) << p.name;
      continue;
    }
    double s = 0;
    for (float x : v) s += double(x) * x;
    EXPECT_NEAR(std::sqrt(s / double(v.size())), 0.02, 0.004) << p.name;
  }
}

TEST(Llama, LossAndGradientsReachEveryParameterTiedAndUntied) {
  for (bool tied : {true, false}) {
    GptConfig c = llama_config();
    c.tie_word_embeddings = tied;
    Gpt model(c);
    model.init(1);
    const Step s = step(model, {packed({5, 0, 11, 3, 13}, 37, 2)}, 1);
    EXPECT_NEAR(s.loss, std::log(37.0), 0.1);  // small init: near uniform
    for (const auto& p : model.slab().parameters()) {
      double norm = 0;
      for (int64_t i = p.begin; i < p.end; ++i) norm += std::abs(s.grads[size_t(i)]);
      EXPECT_GT(norm, 0.0) << p.name << " tied " << tied;
      EXPECT_TRUE(std::isfinite(norm)) << p.name;
    }
  }
}

// The tiny model overfits one packed sequence with plain gradient descent on the slab.
TEST(Llama, LossDecreasesOnATinyOverfit) {
  Gpt model(llama_config());
  model.init(2);
  const auto seqs = std::vector<data::PackedSequence>{packed({12, 20}, 37, 3)};
  const double first = step(model, seqs, 1).loss;
  double last = first;
  for (int i = 0; i < 60; ++i) {
    const Step s = step(model, seqs, 2);
    last = s.loss;
    autograd::NoGradGuard no_grad;
    model.slab().params().add_(ops::scale(model.slab().grads(), -0.5));
    model.slab().sync_compute();
  }
  EXPECT_LT(last, 0.5 * first) << "first " << first << ", last " << last;
}

// An untied head holding the embedding's values computes the tied model's loss, and the
// tied embedding's gradient is the sum of the untied embedding's and head's.
TEST(Llama, UntiedHeadEqualToTheEmbeddingIsTheTiedModel) {
  GptConfig c = llama_config();
  Gpt tied(c);
  tied.init(3);
  c.tie_word_embeddings = false;
  Gpt untied(c);
  untied.init(4);
  for (const auto& p : tied.slab().parameters()) set_param(untied, p.name, p.value);
  set_param(untied, "lm_head.weight", tied.slab().get("embed_tokens.weight").value);
  const auto seqs = std::vector<data::PackedSequence>{packed({9, 20, 3}, 37, 5)};
  const Step a = step(tied, seqs, 1), b = step(untied, seqs, 1);
  EXPECT_NEAR(a.loss, b.loss, 1e-6);
  const auto& e = untied.slab().get("embed_tokens.weight");
  const auto& h = untied.slab().get("lm_head.weight");
  const auto& t = tied.slab().get("embed_tokens.weight");
  std::vector<float> sum, ref;
  for (int64_t i = 0; i < e.end - e.begin; ++i) {
    sum.push_back(b.grads[size_t(e.begin + i)] + b.grads[size_t(h.begin + i)]);
    ref.push_back(a.grads[size_t(t.begin + i)]);
  }
  EXPECT_LT(rms_rel(sum, ref), 1e-5);
}

// GQA: 4 query heads over 2 key/value heads is the 4-key/value-head model whose K/V heads
// are each repeated for their group (query head h reads key/value head h / 2).
TEST(Llama, GqaIsMultiHeadWithRepeatedKeyValueHeads) {
  GptConfig c = llama_config();
  Gpt gqa(c);
  gqa.init(5);
  c.n_kv_head = 4;
  Gpt mha(c);
  mha.init(6);
  const int64_t D = 4, C = 16;
  for (const auto& p : gqa.slab().parameters()) {
    if (p.name.find("qkv_proj") == std::string::npos) {
      set_param(mha, p.name, p.value);
      continue;
    }
    const Tensor& w = p.value;  // (4 + 2 + 2) D rows: Q | K | V
    Tensor m = Tensor::empty({(4 + 4 + 4) * D, C});
    m.narrow(0, 0, 4 * D).copy_(w.narrow(0, 0, 4 * D));
    for (int64_t part = 0; part < 2; ++part)  // K then V
      for (int64_t h = 0; h < 4; ++h)
        m.narrow(0, (4 + part * 4 + h) * D, D).copy_(w.narrow(0, (4 + part * 2 + h / 2) * D, D));
    set_param(mha, p.name, m);
  }
  const auto seqs = std::vector<data::PackedSequence>{packed({17, 30, 1}, 37, 7)};
  EXPECT_NEAR(step(gqa, seqs, 1).loss, step(mha, seqs, 1).loss, 1e-6);
}

TEST(Llama, MicroSequencesGiveTheGradientsOfOnePass) {
  for (int64_t window : {0, 6}) {
    GptConfig c = llama_config();
    c.sliding_window = window;
    Gpt model(c);
    model.init(3);
    auto seqs = std::vector<data::PackedSequence>{packed({5, 0, 11, 3, 13}, 37, 4),
                                                  packed({32}, 37, 5), packed({1, 30, 1}, 37, 6)};
    const Step simple = step(model, seqs, 1);
    for (int m : {2, 4, 8}) {
      const Step s = step(model, seqs, m);
      EXPECT_LT(rms_rel(s.grads, simple.grads), 1e-5) << "m = " << m << ", window " << window;
      EXPECT_NEAR(s.loss, simple.loss, 1e-5);
    }
  }
}

// The window (HF/Mistral: a query at p sees keys p - W < j <= p) changes nothing while every
// document fits in it, and changes the result once one is longer than W.
TEST(Llama, SlidingWindowMattersOnlyForDocumentsLongerThanIt) {
  auto grads = [](int64_t window, const std::vector<int32_t>& docs) {
    GptConfig c = llama_config();
    c.sliding_window = window;
    Gpt model(c);
    model.init(9);
    return step(model, {packed(docs, 37, 10)}, 1).grads;
  };
  const std::vector<int32_t> short_docs{8, 3, 8, 7, 6}, long_doc{8, 9, 15};
  EXPECT_LT(rms_rel(grads(8, short_docs), grads(0, short_docs)), 1e-6);
  EXPECT_GT(rms_rel(grads(8, long_doc), grads(0, long_doc)), 1e-3);
  // In the 15-token document (its last token carries no loss) the query at position 13 sees
  // keys 0..13 with W = 14, and loses key 0 with W = 13.
  EXPECT_LT(rms_rel(grads(14, long_doc), grads(0, long_doc)), 1e-6);
  EXPECT_GT(rms_rel(grads(13, long_doc), grads(14, long_doc)), 1e-5);
}

// Rotary positions are each token's index in its document: a document's loss is the same
// wherever it sits in the packed row (attention never crosses documents, so only a position
// taken from the row would tell them apart).
TEST(Llama, RotaryPositionsAreDocumentPositionsNotRows) {
  Gpt model(llama_config());
  model.init(11);
  data::PackedSequence alone = packed({24}, 37, 12);
  data::PackedSequence after = packed({16, 24}, 37, 13);
  std::copy(alone.tokens.begin(), alone.tokens.end(), after.tokens.begin() + 16);
  std::copy(alone.labels.begin(), alone.labels.end(), after.labels.begin() + 16);
  // Only the second document carries loss.
  for (int i = 0; i < 16; ++i) after.labels[size_t(i)] = -1;
  const double a = step(model, {alone}, 1).loss;
  const double b = step(model, {after}, 1).loss;
  EXPECT_NEAR(a, b, 1e-6);
  // And the same with the document crossing a micro-sequence boundary at row 20.
  EXPECT_NEAR(step(model, {after}, 2).loss, a, 1e-6);
}

// Keeps the forward rows of one tapped tensor at their places in the sequence.
class RowSink : public TensorSink {
 public:
  RowSink(std::string name, int64_t S) : name_(std::move(name)), S_(S) {}
  void write(const std::string& name, const std::string& kind, const Tensor& value,
             const std::vector<PartRows>& rows) override {
    if (name != name_ || kind != "forward") return;
    const int64_t w = value.size(1);
    if (out.empty()) out.assign(size_t(S_ * w), 0.0f);
    const auto v = value.to_vector<float>();
    int64_t at = 0;
    for (const PartRows& r : rows)
      for (int64_t i = 0; i < r.rows; ++i, ++at)
        std::copy_n(v.begin() + at * w, w, out.begin() + (r.begin + i) * w);
  }
  std::vector<float> out;

 private:
  std::string name_;
  int64_t S_;
};

// layer 0's rotated QKV rows of `seq` run as parts {i, m, c, P}, one after another over one
// K/V buffer (what SDP's ranks hold, minus the exchange), with positions + shift in parts
// that start after row 0.
std::vector<float> rotated_rows(Gpt& model, const data::PackedSequence& seq, int m, int P,
                                int shift) {
  const int64_t S = int64_t(seq.tokens.size());
  BufferRoute route;
  model.prepare_route(route, 1, S);
  RowSink sink("layers.0.self_attn.rope", S);
  ForwardOptions o;
  o.route = &route;
  o.sink = &sink;
  o.training = false;
  autograd::NoGradGuard no_grad;
  for (int i = 0; i < m; ++i)
    for (int c = 0; c < P; ++c) {
      data::ModelInput in = data::make_model_input(seq, {i, m, c, P}, 0);
      if (in.query_begin > 0)
        for (int32_t& p : in.position_index) p += shift;
      model.loss({{std::make_shared<const data::ModelInput>(in), 0, 0}}, 1.0, o);
    }
  return sink.out;
}

// A document crossing a micro-sequence boundary (row 24) and rank boundaries (rows 12, 36)
// gets the rotated Q and K rows of the one-pass run (positions continue across the cuts);
// positions one too high after a cut change them.
TEST(Llama, RotatedRowsAcrossMicroSequenceAndRankBoundariesEqualOnePass) {
  Gpt model(llama_config());
  model.init(15);
  const data::PackedSequence seq = packed({5, 40, 3}, 37, 16);
  const std::vector<float> whole = rotated_rows(model, seq, 1, 1, 0);
  ASSERT_EQ(whole.size(), size_t(48 * 32));
  EXPECT_LT(rms_rel(rotated_rows(model, seq, 2, 2, 0), whole), 1e-6);
  EXPECT_LT(rms_rel(rotated_rows(model, seq, 4, 1, 0), whole), 1e-6);
  EXPECT_GT(rms_rel(rotated_rows(model, seq, 2, 2, 1), whole), 1e-3);
}

// The planted off-by-one: positions one too high in every part after a sequence's first
// (what a position continued wrongly across a micro-sequence boundary gives) must change the
// gradients by over 10x the regression's 1e-5 tolerance.
TEST(Llama, PositionsOffByOneAcrossMicroSequencesAreCaught) {
  Gpt model(llama_config());
  model.init(13);
  auto seqs = std::vector<data::PackedSequence>{packed({5, 40, 3}, 37, 14)};
  const Step simple = step(model, seqs, 1);
  EXPECT_LT(rms_rel(step(model, seqs, 4).grads, simple.grads), 1e-5);
  EXPECT_GT(rms_rel(step(model, seqs, 4, /*shift_later_parts=*/true).grads, simple.grads), 1e-4);
}

}  // namespace
}  // namespace driftless::layers
