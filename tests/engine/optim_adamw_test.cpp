// AdamW on the flat parameter slab (engine/optim/adamw.h): two steps against values
// worked out by hand, per-range weight decay, bias correction, sharding (ZeRO-1) and the
// checkpoint state round trip.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/optim/adamw.h"
#include "engine/optim/clip.h"

namespace driftless::optim {
namespace {

Tensor slab(const std::vector<float>& values) {
  return Tensor::from_vector(values);
}

// Slab of 5: [0, 2) "w" with decay, [2, 4) "b" without, element 4 is padding (no range).
//
// Hand computation, lr = 0.1, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, wd = 0.1, p0 = 1,
// gradients g1 = 0.5 then g2 = -0.25:
// step 1 (t = 1): bias corrections 1 - 0.9 = 0.1, 1 - 0.999 = 0.001
//   m1 = 0.1 * 0.5 = 0.05            v1 = 0.001 * 0.25 = 0.00025
//   m^ = 0.05 / 0.1 = 0.5            v^ = 0.00025 / 0.001 = 0.25, sqrt = 0.5
//   update = 0.5 / (0.5 + 1e-8) = 0.99999998
//   decay:    p1 = 1 * (1 - 0.1 * 0.1) - 0.1 * 0.99999998 = 0.99 - 0.099999998 = 0.890000002
//   no decay: p1 = 1 - 0.099999998 = 0.900000002
// step 2 (t = 2): bias corrections 1 - 0.81 = 0.19, 1 - 0.998001 = 0.001999
//   m2 = 0.9 * 0.05 + 0.1 * (-0.25) = 0.045 - 0.025 = 0.02
//   v2 = 0.999 * 0.00025 + 0.001 * 0.0625 = 0.00024975 + 0.0000625 = 0.00031225
//   m^ = 0.02 / 0.19 = 0.1052631579   v^ = 0.00031225 / 0.001999 = 0.1562031016
//   sqrt(v^) = 0.3952253807; update = 0.1052631579 / 0.3952253907 = 0.2663370329
//   decay:    p2 = 0.890000002 * 0.99 - 0.02663370329 = 0.8811000020 - 0.0266337033
//                = 0.8544662987
//   no decay: p2 = 0.900000002 - 0.0266337033 = 0.8733662987
TEST(AdamW, TwoStepsMatchHandComputation) {
  AdamWConfig cfg{.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1};
  AdamW opt(cfg, {{"w", 0, 2, true}, {"b", 2, 4, false}}, 5);
  Tensor p = slab({1, 1, 1, 1, 1});
  opt.step(p, slab({0.5f, 0.5f, 0.5f, 0.5f, 0.5f}));
  EXPECT_EQ(opt.state().step, 1);
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(p.at({i}), 0.890000002, 1e-6) << i;
  for (int i = 2; i < 4; ++i) EXPECT_NEAR(p.at({i}), 0.900000002, 1e-6) << i;
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(opt.state().m.at({i}), 0.05, 1e-8);
    EXPECT_NEAR(opt.state().v.at({i}), 0.00025, 1e-10);
  }

  opt.step(p, slab({-0.25f, -0.25f, -0.25f, -0.25f, -0.25f}), 0.1);
  EXPECT_EQ(opt.state().step, 2);
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(p.at({i}), 0.8544662987, 1e-6) << i;
  for (int i = 2; i < 4; ++i) EXPECT_NEAR(p.at({i}), 0.8733662987, 1e-6) << i;
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(opt.state().m.at({i}), 0.02, 1e-8);
    EXPECT_NEAR(opt.state().v.at({i}), 0.00031225, 1e-10);
  }
  // Padding outside every range: neither parameter nor state moves.
  EXPECT_EQ(p.at({4}), 1.0);
  EXPECT_EQ(opt.state().m.at({4}), 0.0);
  EXPECT_EQ(opt.state().v.at({4}), 0.0);
}

// With zero gradients the Adam part is exactly 0, so only decoupled decay moves weights:
// decayed ranges shrink by (1 - lr * wd) per step, no-decay ranges stay put bit for bit.
TEST(AdamW, WeightDecayOffForNoDecayRange) {
  AdamWConfig cfg{.lr = 0.5, .weight_decay = 0.5};
  AdamW opt(cfg, {{"ln.g", 0, 3, false}, {"w", 3, 6, true}, {"bias", 6, 8, false}}, 8);
  Tensor p = slab({1, 2, 3, 4, 5, 6, 7, 8});
  Tensor g = Tensor::zeros({8});
  opt.step(p, g);
  opt.step(p, g);
  const std::vector<double> want = {1, 2, 3, 4 * 0.5625, 5 * 0.5625, 6 * 0.5625, 7, 8};
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(p.at({i}), want[i]) << i;
}

// Without bias correction the first update would be lr * (1-b1) g / (sqrt(1-b2) |g| + eps),
// far from lr; with it, it is lr * g / (|g| + eps) ~ lr * sign(g) whatever the betas. At a
// later step the result must follow the corrected formula (double reference below).
TEST(AdamW, BiasCorrection) {
  for (auto [b1, b2] : {std::pair{0.9, 0.999}, std::pair{0.5, 0.99}, std::pair{0.0, 0.9}}) {
    AdamW opt({.lr = 0.01, .beta1 = b1, .beta2 = b2, .eps = 1e-12}, {{"w", 0, 2, true}}, 2);
    Tensor p = slab({0, 0});
    opt.step(p, slab({1e-3f, -4.0f}));
    EXPECT_NEAR(p.at({0}), -0.01, 1e-8) << b1 << " " << b2;
    EXPECT_NEAR(p.at({1}), 0.01, 1e-8) << b1 << " " << b2;
  }
  const double lr = 0.01, b1 = 0.8, b2 = 0.95, eps = 1e-8;
  AdamW opt({.lr = lr, .beta1 = b1, .beta2 = b2, .eps = eps}, {{"w", 0, 1, true}}, 1);
  Tensor p = slab({0.3f});
  double pr = 0.3, m = 0, v = 0;
  for (int t = 1; t <= 10; ++t) {
    const double g = std::sin(double(t)) * 0.1;
    opt.step(p, slab({float(g)}));
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    pr -= lr * (m / (1 - std::pow(b1, t))) / (std::sqrt(v / (1 - std::pow(b2, t))) + eps);
  }
  EXPECT_NEAR(p.at({0}), pr, 1e-6);
}

// ZeRO-1: optimizers owning [0, k) and [k, n) (cutting a range) give bit for bit the
// parameters of one optimizer owning everything; grads may be the slab or the shard.
TEST(AdamW, ShardsMatchWholeSlab) {
  const int64_t n = 1000, k = 437;
  std::vector<ParamRange> ranges = {
      {"a", 0, 300, true}, {"b", 300, 310, false}, {"c", 310, 900, true}, {"d", 904, 1000, false}};
  AdamWConfig cfg{.lr = 1e-2, .weight_decay = 0.1};
  AdamW whole(cfg, ranges, n);
  AdamW lo(cfg, ranges, n, 0, k);
  AdamW hi(cfg, ranges, n, k, n);
  Tensor p_whole = Tensor::randn({n}, 1);
  Tensor p_shard = p_whole.clone();
  for (int s = 0; s < 3; ++s) {
    Tensor g = Tensor::randn({n}, 100 + s);
    whole.step(p_whole, g, 1e-2 * (s + 1));
    lo.step(p_shard, g, 1e-2 * (s + 1));                              // whole slab of grads
    hi.step(p_shard, g.narrow(0, k, n - k).clone(), 1e-2 * (s + 1));  // reduce-scattered shard
  }
  EXPECT_EQ(p_whole.to_vector<float>(), p_shard.to_vector<float>());
  std::vector<float> m = whole.state().m.to_vector<float>();
  std::vector<float> m_lo = lo.state().m.to_vector<float>(), m_hi = hi.state().m.to_vector<float>();
  m_lo.insert(m_lo.end(), m_hi.begin(), m_hi.end());
  EXPECT_EQ(m, m_lo);
  EXPECT_EQ(hi.state().m.numel(), n - k);
}

// The fused pass (gradient scale, bf16 compute copy) gives the bits of the separate passes:
// scale_grads (p *= float(c)), the step, and the slab's rounding copy.
TEST(AdamW, ScaleAndComputeCopyMatchSeparatePasses) {
  const int64_t n = 1000;
  std::vector<ParamRange> ranges = {{"a", 0, 300, true}, {"b", 300, n, false}};
  AdamWConfig cfg{.lr = 1e-2, .weight_decay = 0.1};
  AdamW fused(cfg, ranges, n), separate(cfg, ranges, n);
  Tensor p_fused = Tensor::randn({n}, 3), p_sep = p_fused.clone();
  Tensor compute = Tensor::zeros({n}, DType::bf16);
  for (int s = 0; s < 3; ++s) {
    const double c = 0.3 + 0.2 * s;
    Tensor g = Tensor::randn({n}, 200 + s);
    fused.step(p_fused, g, 1e-2, c, compute);
    Tensor gs = g.clone();
    scale_grads(gs, c);
    separate.step(p_sep, gs, 1e-2);
    EXPECT_EQ(p_fused.to_vector<float>(), p_sep.to_vector<float>()) << "step " << s;
    EXPECT_EQ(compute.to_vector<float>(), p_sep.to(DType::bf16).to_vector<float>()) << "step " << s;
  }
  // A compute slab of another size or dtype is refused.
  EXPECT_THROW(fused.step(p_fused, Tensor::randn({n}, 9), 1e-2, 1.0, Tensor::zeros({n - 1}, DType::bf16)),
               Error);
  EXPECT_THROW(fused.step(p_fused, Tensor::randn({n}, 9), 1e-2, 1.0, Tensor::zeros({n})), Error);
}

// A run resumed from state() continues exactly as the uninterrupted one.
TEST(AdamW, StateRoundTrip) {
  AdamWConfig cfg{.lr = 3e-3, .weight_decay = 0.01};
  std::vector<ParamRange> ranges = {{"w", 0, 64, true}, {"b", 64, 70, false}};
  AdamW a(cfg, ranges, 70);
  Tensor p = Tensor::randn({70}, 7);
  a.step(p, Tensor::randn({70}, 8));
  a.step(p, Tensor::randn({70}, 9));
  Tensor p_resumed = p.clone();
  AdamW b(cfg, ranges, 70);
  Tensor m_view = b.state().m;
  b.load_state(a.state().m.clone(), a.state().v.clone(), a.state().step);
  EXPECT_EQ(b.state().step, 2);
  EXPECT_TRUE(m_view.shares_storage(b.state().m));  // loaded into the buffers allocated once
  Tensor g = Tensor::randn({70}, 10);
  a.step(p, g);
  b.step(p_resumed, g);
  EXPECT_EQ(p.to_vector<float>(), p_resumed.to_vector<float>());
  EXPECT_EQ(a.state().v.to_vector<float>(), b.state().v.to_vector<float>());
}

template <class F>
void expect_adamw_error(F&& f, const std::string& fragment) {
  try {
    f();
    FAIL() << "expected driftless::Error containing " << fragment;
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("[adamw]"), std::string::npos) << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
  }
}

TEST(AdamW, BadInputThrows) {
  expect_adamw_error(
      [] {
        AdamW({}, {{"a", 0, 5, true}, {"b", 4, 8, true}}, 8);
      },
      "sorted and disjoint");
  expect_adamw_error([] { AdamW({}, {{"a", 0, 9, true}}, 8); }, "inside the slab");
  expect_adamw_error([] { AdamW({}, {}, 8, 4, 9); }, "shard inside");
  expect_adamw_error([] { AdamW({.beta1 = 1.0}, {}, 8); }, "betas");
  AdamW opt({}, {{"a", 0, 8, true}}, 8, 0, 4);
  expect_adamw_error([&] { opt.step(Tensor::zeros({8}, DType::f64), Tensor::zeros({8})); },
                     "f64 [8]");
  expect_adamw_error([&] { opt.step(Tensor::zeros({8}), Tensor::zeros({5})); }, "got 5");
  expect_adamw_error([&] { opt.step(Tensor::zeros({8}), Tensor::zeros({8}), -1.0); }, "lr");
  expect_adamw_error([&] { opt.load_state(Tensor::zeros({8}), Tensor::zeros({4}), 1); },
                     "f32 [4], got f32 [8]");
}

}  // namespace
}  // namespace driftless::optim
