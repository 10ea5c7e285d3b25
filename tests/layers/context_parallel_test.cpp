// Context parallelism (the ring and all-to-all routes, layers/attention/routes/) at model level, P
// ranks as P threads of one process over an in-process exchange: for ring and a2a, with
// micro-sequences, GQA, softcap, ALiBi and expressions of positions, the rank-order sum of every
// rank's parameter gradients and losses equals the single-rank run's.
#include "layers/attention/context_parallel.h"

#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <functional>
#include <memory>
#include <thread>

#include "data/sampler.h"
#include "engine/autograd/autograd.h"
#include "layers/attention/attention.h"
#include "layers/attention/routes/all_to_all_route.h"
#include "layers/attention/routes/buffer_route.h"
#include "layers/attention/routes/hybrid_route.h"
#include "layers/attention/routes/ring_route.h"
#include "layers/gpt.h"
#include "tests/error_of.h"
#include "tests/layers/gpt_test_util.h"

namespace driftless::layers {
namespace {

// The collectives of KvExchange among P threads: each posts its tensor, all meet at a
// barrier, each reads what it needs, all meet again before anyone reuses a tensor.
struct Hub {
  explicit Hub(int64_t p) : P(p), sync(std::ptrdiff_t(p)), posted(size_t(p)) {}
  int64_t P;
  std::barrier<> sync;
  std::vector<Tensor> posted;
};

class ThreadExchange final : public KvExchange {
 public:
  ThreadExchange(Hub& hub, int64_t rank) : hub_(hub), rank_(rank) {}
  int64_t ranks() const override { return hub_.P; }
  int64_t rank() const override { return rank_; }
  void all_to_all(const Tensor& out, const Tensor& in) override {
    post(in);
    const int64_t n = in.numel() / hub_.P;
    Tensor o = out.view({out.numel()});
    for (int64_t p = 0; p < hub_.P; ++p)
      o.narrow(0, p * n, n)
          .copy_(hub_.posted[size_t(p)].contiguous().view({in.numel()}).narrow(0, rank_ * n, n));
    hub_.sync.arrive_and_wait();
  }
  void all_gather(const Tensor& span, int64_t rows) override {
    EXPECT_LT(rows, 0) << "the ring gathers whole chunks";
    post(span);
    const int64_t c = span.size(0) / hub_.P;
    for (int64_t p = 0; p < hub_.P; ++p)
      if (p != rank_) span.narrow(0, p * c, c).copy_(hub_.posted[size_t(p)].narrow(0, p * c, c));
    hub_.sync.arrive_and_wait();
  }
  void reduce_scatter_packed(const Tensor& packed) override {
    post(packed);
    Tensor sum = hub_.posted[0].select(0, rank_).clone();
    for (int64_t p = 1; p < hub_.P; ++p) sum.add_(hub_.posted[size_t(p)].select(0, rank_));
    hub_.sync.arrive_and_wait();
    packed.select(0, rank_).copy_(sum);
  }

 private:
  void post(const Tensor& t) {
    hub_.posted[size_t(rank_)] = t;
    hub_.sync.arrive_and_wait();
  }
  Hub& hub_;
  int64_t rank_;
};

GptConfig tiny_config(double softcap = 0, bool alibi = false) {
  GptConfig c = test_util::tiny_gpt_config();
  c.softcap = softcap;
  c.alibi = alibi;
  return c;
}

data::PackedSequence packed(const std::vector<int32_t>& lengths, uint64_t seed) {
  return test_util::packed(lengths, 37, seed);
}

struct RankResult {
  std::vector<float> grads;
  double loss = 0;
  int64_t buffer_bytes = 0;  // the route's K/V buffers after the step
};

// One rank's step over `seqs` in m micro-sequences (ex == nullptr: the plain single run).
// Hybrid: ex is the all-to-all group, ring the exchange across the groups.
RankResult run_rank(const GptConfig& cfg, const std::vector<data::PackedSequence>& seqs, int m,
                    ContextParallel kind, KvExchange* ex, KvExchange* ring = nullptr) {
  Gpt model(cfg);
  model.init(11);
  const int64_t S = int64_t(seqs[0].tokens.size());
  int32_t P = ex ? int32_t(ex->ranks()) : 1, r = ex ? int32_t(ex->rank()) : 0;
  const int32_t G = P;
  if (kind == ContextParallel::hybrid) {
    P = G * int32_t(ring->ranks());
    r = int32_t(ring->rank()) * G + r;
  }
  std::unique_ptr<AttentionRoute> route;
  if (kind == ContextParallel::hybrid)
    route = std::make_unique<HybridRoute>(ex, ring);
  else if (kind == ContextParallel::ring)
    route = std::make_unique<RingRoute>(ex);
  else if (kind == ContextParallel::a2a)
    route = std::make_unique<AllToAllRoute>(ex);
  else
    route = std::make_unique<BufferRoute>(ex);
  model.prepare_route(*route, int64_t(seqs.size()), S);
  model.slab().zero_grads();
  route->zero_grads();
  int64_t tokens = 0;
  for (const auto& s : seqs) tokens += s.loss_tokens();
  ForwardOptions o;
  o.route = route.get();
  std::vector<std::vector<data::ModelInput>> inputs(static_cast<size_t>(m)),
      wholes(static_cast<size_t>(m));
  std::vector<Tensor> losses;
  for (int i = 0; i < m; ++i) {
    for (const auto& seq : seqs) {
      if (kind == ContextParallel::hybrid) {
        // Written out (not hybrid_chunks): group g holds ring chunks g, 2Q-1-g of 2Q, and
        // rank a of the group piece a of each.
        const int32_t Q = P / G, g = r / G, a = r % G;
        for (int32_t c : {g, 2 * Q - 1 - g}) {
          inputs[size_t(i)].push_back(data::make_model_input(seq, {i, m, c * G + a, 2 * P}, 0));
          wholes[size_t(i)].push_back(data::make_model_input(seq, {i, m, c, 2 * Q}, 0));
        }
      } else if (kind == ContextParallel::ring) {
        inputs[size_t(i)].push_back(data::make_model_input(seq, {i, m, r, 2 * P}, 0));
        inputs[size_t(i)].push_back(data::make_model_input(seq, {i, m, 2 * P - 1 - r, 2 * P}, 0));
      } else {
        inputs[size_t(i)].push_back(data::make_model_input(seq, {i, m, r, P}, 0));
        wholes[size_t(i)].push_back(data::make_model_input(seq, {i, m, 0, 1}, 0));
      }
    }
    std::vector<PartInput> slice;
    const size_t per = inputs[size_t(i)].size() / seqs.size();
    for (size_t j = 0; j < seqs.size(); ++j)
      for (size_t c = 0; c < per; ++c)
        slice.push_back(
            {std::make_shared<const data::ModelInput>(inputs[size_t(i)][j * per + c]), int64_t(j),
             int64_t(j),
             wholes[size_t(i)].empty() ? nullptr
             : kind == ContextParallel::hybrid
                 ? std::make_shared<const data::ModelInput>(wholes[size_t(i)][j * per + c])
                 : std::make_shared<const data::ModelInput>(wholes[size_t(i)][j])});
    losses.push_back(model.loss(slice, 1.0 / double(tokens), o));
  }
  RankResult res;
  for (int i = m - 1; i >= 0; --i) {
    res.loss += losses[size_t(i)].item();
    autograd::backward(losses[size_t(i)]);
  }
  res.grads = model.slab().grads().to_vector<float>();
  res.buffer_bytes = route->buffer_bytes();
  return res;
}

// The rank-order sum over P threaded ranks (what the data-group all-reduce makes).
RankResult run_parallel(const GptConfig& cfg, const std::vector<data::PackedSequence>& seqs, int m,
                        ContextParallel kind, int64_t P) {
  Hub hub(P);
  std::vector<RankResult> results(static_cast<size_t>(P));
  std::vector<std::string> errors(static_cast<size_t>(P));
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < P; ++r)
    threads.emplace_back([&, r] {
      ThreadExchange ex(hub, r);
      try {
        results[size_t(r)] = run_rank(cfg, seqs, m, kind, &ex);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
        std::abort();  // the others would wait at the barrier forever
      }
    });
  for (auto& t : threads) t.join();
  RankResult sum = results[0];
  for (int64_t r = 1; r < P; ++r) {
    sum.loss += results[size_t(r)].loss;
    for (size_t i = 0; i < sum.grads.size(); ++i) sum.grads[i] += results[size_t(r)].grads[i];
  }
  return sum;
}

// The hybrid over Q groups of G threaded ranks: rank r is piece r % G of group r / G.
RankResult run_hybrid(const GptConfig& cfg, const std::vector<data::PackedSequence>& seqs, int m,
                      int64_t G, int64_t Q) {
  std::vector<std::unique_ptr<Hub>> groups, rings;
  for (int64_t g = 0; g < Q; ++g) groups.push_back(std::make_unique<Hub>(G));
  for (int64_t a = 0; a < G; ++a) rings.push_back(std::make_unique<Hub>(Q));
  const int64_t P = G * Q;
  std::vector<RankResult> results(static_cast<size_t>(P));
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < P; ++r)
    threads.emplace_back([&, r] {
      ThreadExchange group(*groups[size_t(r / G)], r % G), ring(*rings[size_t(r % G)], r / G);
      try {
        results[size_t(r)] = run_rank(cfg, seqs, m, ContextParallel::hybrid, &group, &ring);
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        std::abort();  // the others would wait at the barrier forever
      }
    });
  for (auto& t : threads) t.join();
  RankResult sum = results[0];
  for (int64_t r = 1; r < P; ++r) {
    sum.loss += results[size_t(r)].loss;
    for (size_t i = 0; i < sum.grads.size(); ++i) sum.grads[i] += results[size_t(r)].grads[i];
  }
  return sum;
}

using test_util::rms_rel;

// Documents crossing every chunk boundary, zero-length ones, one long document, short ones.
std::vector<data::PackedSequence> batch() {
  return {packed({5, 0, 11, 3, 13, 16}, 4), packed({48}, 5), packed({1, 30, 0, 17}, 6)};
}

void expect_same_as_single(ContextParallel kind, int64_t P, int m, double softcap = 0,
                           bool alibi = false) {
  const GptConfig cfg = tiny_config(softcap, alibi);
  const auto seqs = batch();
  const RankResult single = run_rank(cfg, seqs, 1, ContextParallel::none, nullptr);
  const RankResult cp = run_parallel(cfg, seqs, m, kind, P);
  EXPECT_LT(rms_rel(cp.grads, single.grads), 1e-5);
  EXPECT_NEAR(cp.loss, single.loss, 1e-5 * std::abs(single.loss));
  double norm = 0;
  for (float g : single.grads) norm += std::abs(g);
  EXPECT_GT(norm, 0.0);
}

TEST(ContextParallel, RingMatchesTheSingleRun) {
  for (int64_t P : {1, 2, 3})
    for (int m : {1, 2}) {
      SCOPED_TRACE("ring P = " + std::to_string(P) + ", m = " + std::to_string(m));
      expect_same_as_single(ContextParallel::ring, P, m);
    }
}

TEST(ContextParallel, RingWithSoftcapAndFourRanks) {
  expect_same_as_single(ContextParallel::ring, 4, 1, 5.0);
  expect_same_as_single(ContextParallel::ring, 2, 2, 5.0);
}

TEST(ContextParallel, AllToAllMatchesTheSingleRun) {
  for (int64_t P : {1, 2})
    for (int m : {1, 2, 4}) {
      SCOPED_TRACE("a2a P = " + std::to_string(P) + ", m = " + std::to_string(m));
      expect_same_as_single(ContextParallel::a2a, P, m);
    }
  expect_same_as_single(ContextParallel::a2a, 2, 2, 5.0);
  // ALiBi: each rank's heads take their own slopes (a wrong head offset fails here).
  expect_same_as_single(ContextParallel::a2a, 2, 1, 0, true);
  expect_same_as_single(ContextParallel::a2a, 2, 2, 0, true);
}

// 2 x 2 (a2a pairs, ring of 2), and the degenerate shapes: one group (a2a's head split over
// the ring's two chunks) and groups of one (the ring itself); with micro-sequences and softcap.
TEST(ContextParallel, HybridMatchesTheSingleRun) {
  const auto seqs = batch();
  for (double softcap : {0.0, 5.0}) {
    const GptConfig cfg = tiny_config(softcap);
    const RankResult single = run_rank(cfg, seqs, 1, ContextParallel::none, nullptr);
    for (auto [G, Q] : {std::pair<int64_t, int64_t>{2, 2}, {2, 1}, {1, 2}, {1, 4}})
      for (int m : {1, 2}) {
        if (softcap > 0 && !(G == 2 && Q == 2)) continue;
        SCOPED_TRACE("hybrid G = " + std::to_string(G) + ", groups = " + std::to_string(Q) +
                     ", m = " + std::to_string(m) + ", softcap = " + std::to_string(softcap));
        const RankResult cp = run_hybrid(cfg, seqs, m, G, Q);
        EXPECT_LT(rms_rel(cp.grads, single.grads), 1e-5);
        EXPECT_NEAR(cp.loss, single.loss, 1e-5 * std::abs(single.loss));
      }
  }
}

// Score and mask expressions of document positions, and ALiBi: every ring and hybrid call
// gives its modifier the positions the single run's call does (its keys start at the first
// document's start).
// The table is indexed by the key's absolute position and the mask keeps sinks k < 3, so a
// shift that moved q and k together would fail as well as one that broke the distance.
TEST(ContextParallel, RingAndHybridGiveModifiersDocumentPositions) {
  GptConfig cfg = tiny_config();
  cfg.score_mod = "score - slope[h] * (q - k) + table[h, min(k, 15)]";
  cfg.mask_mod = "q - k < 9 || k < 3";
  std::vector<double> table;
  for (int i = 0; i < 4 * 16; ++i) table.push_back(0.4 * std::sin(0.9 * i));
  cfg.score_mod_decls = {{"slope", {4}, {0.5, 0.25, 0.125, 0.0625}, false},
                         {"table", {4, 16}, table, true}};
  const auto seqs = batch();
  const RankResult single = run_rank(cfg, seqs, 1, ContextParallel::none, nullptr);
  for (auto [P, m] : {std::pair<int64_t, int>{2, 1}, {2, 2}, {3, 2}, {4, 1}}) {
    SCOPED_TRACE("ring P = " + std::to_string(P) + ", m = " + std::to_string(m));
    const RankResult cp = run_parallel(cfg, seqs, m, ContextParallel::ring, P);
    EXPECT_LT(rms_rel(cp.grads, single.grads), 1e-5);
    EXPECT_NEAR(cp.loss, single.loss, 1e-5 * std::abs(single.loss));
  }
  for (int m : {1, 2}) {
    SCOPED_TRACE("hybrid 2 x 2, m = " + std::to_string(m));
    const RankResult cp = run_hybrid(cfg, seqs, m, 2, 2);
    EXPECT_LT(rms_rel(cp.grads, single.grads), 1e-5);
  }
  expect_same_as_single(ContextParallel::ring, 2, 2, 0, true);
  expect_same_as_single(ContextParallel::ring, 3, 1, 0, true);
}

// A sliding window shorter than the chunks and one longer: each ring and hybrid call covers
// its chunk's keys from its first document's start, so the window is the single run's.
TEST(ContextParallel, RingAndHybridTakeASlidingWindow) {
  const auto seqs = batch();
  for (int64_t W : {5, 20}) {
    GptConfig cfg = tiny_config();
    cfg.sliding_window = W;
    const RankResult single = run_rank(cfg, seqs, 1, ContextParallel::none, nullptr);
    GptConfig full = tiny_config();
    const RankResult unwindowed = run_rank(full, seqs, 1, ContextParallel::none, nullptr);
    ASSERT_GT(rms_rel(single.grads, unwindowed.grads), 1e-3) << "the window must matter";
    for (auto [P, m] : {std::pair<int64_t, int>{2, 1}, {3, 2}}) {
      SCOPED_TRACE("W = " + std::to_string(W) + ", ring P = " + std::to_string(P) +
                   ", m = " + std::to_string(m));
      EXPECT_LT(rms_rel(run_parallel(cfg, seqs, m, ContextParallel::ring, P).grads, single.grads),
                1e-5);
    }
    SCOPED_TRACE("W = " + std::to_string(W) + ", hybrid 2 x 2");
    EXPECT_LT(rms_rel(run_hybrid(cfg, seqs, 2, 2, 2).grads, single.grads), 1e-5);
  }
}

// With one micro-sequence the ring sums its K/V gradients in a temporary of the call, so the
// buffers' gradient (f32, every row, per layer) is never allocated; with two, later
// micro-sequences add into earlier rows across backward calls, so it is.
TEST(ContextParallel, TheRingHoldsAGradientBufferOnlyWithMicroSequences) {
  const GptConfig cfg = tiny_config();
  const auto seqs = batch();
  const int64_t S = int64_t(seqs[0].tokens.size());
  const int64_t kv_width = cfg.n_kv_head * (cfg.n_embd / cfg.n_head);                  // H_kv D
  const int64_t kv_bytes = cfg.n_layer * int64_t(seqs.size()) * S * 2 * kv_width * 4;  // f32
  Hub one(1);
  ThreadExchange ex(one, 0);
  EXPECT_EQ(run_rank(cfg, seqs, 1, ContextParallel::ring, &ex).buffer_bytes, kv_bytes);
  EXPECT_EQ(run_rank(cfg, seqs, 2, ContextParallel::ring, &ex).buffer_bytes, 2 * kv_bytes);
}

// Without an exchange (one rank, the library used directly) both paths still run.
TEST(ContextParallel, WithoutAnExchangeBothPathsRunOnOneRank) {
  const GptConfig cfg = tiny_config();
  const auto seqs = batch();
  const RankResult single = run_rank(cfg, seqs, 1, ContextParallel::none, nullptr);
  for (ContextParallel kind : {ContextParallel::ring, ContextParallel::a2a})
    for (int m : {1, 2}) {
      const RankResult r = run_rank(cfg, seqs, m, kind, nullptr);
      EXPECT_LT(rms_rel(r.grads, single.grads), 1e-5) << int(kind) << " m " << m;
    }
}

std::string error_of(const std::function<void()>& f) {
  return testing::error_of(f, "no error");
}

// Inputs the ring or a2a cannot take are refused, naming what is wrong.
TEST(ContextParallel, BadInputsAreClearErrors) {
  // a2a needs the heads to divide over the ranks.
  KvExchange one;
  Tensor qkv = Tensor::zeros({6, (3 + 2 * 3) * 4});
  struct TwoRanks final : KvExchange {
    int64_t ranks() const override { return 2; }
  } two;
  EXPECT_NE(error_of([&] { tokens_to_heads(qkv, 1, 3, 3, two); }).find("divisible by 2 ranks"),
            std::string::npos);
  // The ring: a right window, a bias tensor, or chunks that are not r and 2P-1-r.
  Gpt model(tiny_config());
  const auto seq = batch()[0];
  // One rank: chunks 0 and 1 of 2.
  const data::ModelInput a = data::make_model_input(seq, {0, 1, 0, 2}, 0),
                         b = data::make_model_input(seq, {0, 1, 1, 2}, 0);
  Tensor q = Tensor::zeros({48, 4, 4}), k = Tensor::zeros({48, 2, 4});
  KvBuffer buffer;
  buffer.ensure(1, 48, 2, 4, DType::f32, Device::cpu, DType::f32);
  AttentionSpec base;
  EXPECT_NE(error_of([&] {
              ring_attention(q, k, k, {{{&b, &a}, 0}}, buffer, one, base);
            }).find("chunk 0 must be rows [0, 24)"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              ring_attention(q, k, k, {{{&a, &b}, 1}}, buffer, one, base);
            }).find("does not fit the K/V buffer"),
            std::string::npos);
  base.window_right = 4;
  EXPECT_NE(error_of([&] {
              ring_attention(q, k, k, {{{&a, &b}, 0}}, buffer, one, base);
            }).find("no right window"),
            std::string::npos);
  base.window_right = -1;
  base.bias = Tensor::zeros({4, 1, 1});
  EXPECT_NE(error_of([&] {
              ring_attention(q, k, k, {{{&a, &b}, 0}}, buffer, one, base);
            }).find("no bias tensor"),
            std::string::npos);
  struct ThreeRanks final : KvExchange {
    int64_t ranks() const override { return 3; }
  } three;
  AllToAllRoute a2a(&three);
  EXPECT_NE(error_of([&] { model.prepare_route(a2a, 1, 48); }).find("head groups"),
            std::string::npos);
}

// The test would pass vacuously if every rank computed the whole sequence: a ring whose
// gather leaves the other ranks' rows stale (here: this rank's own chunk copied there) must
// be caught.
TEST(ContextParallel, AWrongRingStepIsCaught) {
  struct Stuck final : KvExchange {
    Stuck(Hub& h, int64_t r) : inner(h, r) {}
    int64_t ranks() const override { return inner.ranks(); }
    int64_t rank() const override { return inner.rank(); }
    void all_gather(const Tensor& span, int64_t rows) override {
      inner.all_gather(span, rows);
      const int64_t c = span.size(0) / ranks();
      for (int64_t p = 0; p < ranks(); ++p)  // the bug: our own chunks in every slot
        if (p != rank()) span.narrow(0, p * c, c).copy_(span.narrow(0, rank() * c, c));
    }
    void reduce_scatter_packed(const Tensor& p) override { inner.reduce_scatter_packed(p); }
    ThreadExchange inner;
  };
  const GptConfig cfg = tiny_config();
  const auto seqs = batch();
  const RankResult single = run_rank(cfg, seqs, 1, ContextParallel::none, nullptr);
  Hub hub(2);
  std::vector<RankResult> res(2);
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      Stuck ex(hub, r);
      res[size_t(r)] = run_rank(cfg, seqs, 1, ContextParallel::ring, &ex);
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < res[0].grads.size(); ++i) res[0].grads[i] += res[1].grads[i];
  EXPECT_GT(rms_rel(res[0].grads, single.grads), 1e-3);
}

}  // namespace
}  // namespace driftless::layers
