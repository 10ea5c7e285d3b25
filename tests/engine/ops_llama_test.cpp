// rms_norm, swiglu and rope (the Llama family's ops): forward values against formulas
// written out here (HF Llama's), float64 central-difference gradchecks on odd shapes, f32
// against f64, and the "[op] ..." errors of bad inputs.
#include <cmath>
#include <vector>

#include "engine/ops/ops.h"
#include "tests/engine/ops_test_util.h"

namespace driftless {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::rnd;

using testing::rms_rel;

// The op on f32 copies against the op in f64: output and every floating input's gradient
// within 1e-5 relative (CONTRIBUTING.md).
template <class F>
void expect_f32_matches_f64(const char* name, F fn, const std::vector<Tensor>& in64) {
  std::vector<Tensor> a, b;
  for (const Tensor& t : in64) {
    const bool fl = is_floating(t.dtype());
    a.push_back(fl ? t.to(DType::f32).set_requires_grad() : t);
    b.push_back(fl ? t.clone().set_requires_grad() : t);
  }
  Tensor ya = fn(a), yb = fn(b);
  EXPECT_EQ(ya.dtype(), DType::f32) << name;
  EXPECT_LE(rms_rel(ya, yb), 1e-5) << name << " forward";
  Tensor cot = Tensor::randn(yb.shape(), 99, DType::f64);
  autograd::backward(ya, cot.to(DType::f32));
  autograd::backward(yb, cot);
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].requires_grad()) continue;
    EXPECT_LE(rms_rel(a[i].grad(), b[i].grad()), 1e-5) << name << " d" << i;
  }
}

Tensor positions_of(const std::vector<int32_t>& p) {
  return Tensor::from_vector(p);
}

// ---- rms_norm ----

TEST(OpsRmsNorm, ForwardValues) {
  // Rows (1, 2, 3, 4) and (-2, 0, 0, 0): mean squares 7.5 and 1.
  Tensor x = Tensor::from_vector(std::vector<double>{1, 2, 3, 4, -2, 0, 0, 0}).reshape({2, 4});
  Tensor w = Tensor::from_vector(std::vector<double>{1, -1, 0.5, 2});
  const double eps = 1e-5, a = 1 / std::sqrt(7.5 + eps), b = 1 / std::sqrt(1 + eps);
  EXPECT_TRUE(all_close(ops::rms_norm(x, w, eps), {a, -2 * a, 1.5 * a, 8 * a, -2 * b, 0, 0, 0}));
}

TEST(OpsRmsNorm, Gradcheck) {
  for (const Shape& shape : {Shape{5, 7}, Shape{2, 3, 7}, Shape{1, 1}, Shape{7}}) {
    const int64_t c = shape.back();
    EXPECT_TRUE(gradcheck(
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{ops::rms_norm(in[0], in[1], 1e-5)};
        },
        {rnd(shape, 1), rnd({c}, 2)}))
        << shape_str(shape);
  }
  // A large eps makes it matter in the gradient too.
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{ops::rms_norm(in[0], in[1], 0.5)};
      },
      {rnd({3, 5}, 3), rnd({5}, 4)}));
}

TEST(OpsRmsNorm, FrozenWeightGetsNoGradient) {
  Tensor x = rnd({3, 7}, 5).set_requires_grad();
  Tensor w = rnd({7}, 6);
  autograd::backward(ops::sum_all(ops::rms_norm(x, w, 1e-6)));
  EXPECT_TRUE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
}

TEST(OpsRmsNorm, F32MatchesF64) {
  expect_f32_matches_f64("rms_norm",
                         [](const auto& in) { return ops::rms_norm(in[0], in[1], 1e-6); },
                         {rnd({7, 65}, 7), rnd({65}, 8)});
}

TEST(OpsRmsNorm, BadInput) {
  Tensor x = rnd({4, 8}, 1);
  EXPECT_DL_ERROR(ops::rms_norm(x, rnd({7}, 2)), "[rms_norm]", "weight", "[8]", "[7]");
  EXPECT_DL_ERROR(ops::rms_norm(x, Tensor()), "[rms_norm]", "weight", "undefined");
  EXPECT_DL_ERROR(ops::rms_norm(x, rnd({8}, 2, DType::f32)), "[rms_norm]", "f32");
  EXPECT_DL_ERROR(ops::rms_norm(rnd({4, 0}, 1), rnd({0}, 2)), "[rms_norm]", "[4, 0]");
  EXPECT_DL_ERROR(ops::rms_norm(x, rnd({8}, 2), -1.0), "[rms_norm]", "eps");
}

// ---- swiglu ----

TEST(OpsSwiglu, ForwardValues) {
  // One row: gate (0, 1, -2), up (5, 3, 0.5).
  Tensor x = Tensor::from_vector(std::vector<double>{0, 1, -2, 5, 3, 0.5}).reshape({1, 6});
  auto silu = [](double a) { return a / (1 + std::exp(-a)); };
  Tensor y = ops::swiglu(x);
  EXPECT_EQ(y.shape(), Shape({1, 3}));
  EXPECT_TRUE(all_close(y, {0, silu(1) * 3, silu(-2) * 0.5}));
}

TEST(OpsSwiglu, Gradcheck) {
  for (const Shape& shape : {Shape{5, 14}, Shape{2, 3, 10}, Shape{2}, Shape{1, 2}})
    EXPECT_TRUE(gradcheck(
        [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::swiglu(in[0])}; },
        {rnd(shape, 11)}))
        << shape_str(shape);
}

TEST(OpsSwiglu, StridedInputAndF32) {
  // A non-contiguous input (a transposed view) gives the values of its contiguous copy.
  Tensor x = rnd({6, 3}, 12);
  Tensor xt = ops::transpose(x, 0, 1);
  EXPECT_TRUE(all_close(ops::swiglu(xt), ops::swiglu(xt.contiguous()).to_vector<double>()));
  expect_f32_matches_f64("swiglu", [](const auto& in) { return ops::swiglu(in[0]); },
                         {rnd({7, 26}, 13)});
}

TEST(OpsSwiglu, BadInput) {
  EXPECT_DL_ERROR(ops::swiglu(rnd({4, 7}, 1)), "[swiglu]", "even", "[4, 7]");
  EXPECT_DL_ERROR(ops::swiglu(Tensor::full({}, 1.0, DType::f64)), "[swiglu]", "zero-dim");
}

// ---- rope ----

// HF Llama's rotation of one head of D values at position p, written out independently:
// inv_freq = 1 / theta^(2i/D) in f32 (the exponent rounded to f32 first), angle in f32,
// cos/sin in double, rotate_half: out = x * cos(emb) + rotate_half(x) * sin(emb) with emb
// = cat(freqs, freqs) and rotate_half(x) = cat(-x2, x1).
std::vector<double> hf_rope_head(const std::vector<double>& x, int32_t p, double theta) {
  const size_t d = x.size(), half = d / 2;
  std::vector<double> emb(d), out(d), rot(d);
  for (size_t i = 0; i < half; ++i) {
    const float inv = 1.0f / float(std::pow(double(float(theta)), double(float(2 * i) / float(d))));
    emb[i] = emb[i + half] = double(float(p) * inv);
    rot[i] = -x[i + half];
    rot[i + half] = x[i];
  }
  for (size_t i = 0; i < d; ++i) out[i] = x[i] * std::cos(emb[i]) + rot[i] * std::sin(emb[i]);
  return out;
}

TEST(OpsRope, MatchesHfFormula) {
  // N = 5 rows, H = 2, H_kv = 1, D = 6: row width (2 + 2) * 6 = 24; V is the last 6.
  const int64_t h = 2, hkv = 1, d = 6, w = (h + 2 * hkv) * d;
  const std::vector<int32_t> pos = {0, 1, 2, 0, 123457};
  const double theta = 10000;
  Tensor x = rnd({5, w}, 21);
  const std::vector<double> xv = x.to_vector<double>();
  const std::vector<double> y = ops::rope(x, positions_of(pos), h, hkv, theta).to_vector<double>();
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t head = 0; head < h + 2 * hkv; ++head) {
      std::vector<double> in(xv.begin() + r * w + head * d, xv.begin() + r * w + (head + 1) * d);
      const std::vector<double> want = head < h + hkv ? hf_rope_head(in, pos[r], theta) : in;
      for (int64_t i = 0; i < d; ++i)
        EXPECT_NEAR(y[r * w + head * d + i], want[i], 1e-12)
            << "row " << r << " head " << head << " element " << i;
    }
  // f32 agrees with the same formula within f32 rounding (f32 angles, f32 cos/sin).
  const std::vector<double> y32 =
      ops::rope(x.to(DType::f32), positions_of(pos), h, hkv, theta).to_vector<double>();
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y32[i], y[i], 1e-5) << i;
}

TEST(OpsRope, RotateHalfPairs) {
  // x = e_0 of one head of D = 4 at position 3: out = (cos a0, 0, sin a0, 0), a0 = 3 * 1.
  // x = e_1: pair (1, 3) turns by a1 = 3 / sqrt(theta) (theta^(-2/4)).
  const double theta = 100;
  Tensor e0 = Tensor::from_vector(std::vector<double>{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  Tensor e1 = Tensor::from_vector(std::vector<double>{0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  Tensor p = positions_of({3});
  const double a1 = double(3.0f * (1.0f / 10.0f));
  EXPECT_TRUE(all_close(ops::rope(e0.reshape({1, 12}), p, 1, 1, theta),
                        {std::cos(3.0), 0, std::sin(3.0), 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_TRUE(all_close(ops::rope(e1.reshape({1, 12}), p, 1, 1, theta),
                        {0, std::cos(a1), 0, std::sin(a1), 0, 0, 0, 0, 0, 0, 0, 0}));
}

TEST(OpsRope, PositionZeroIsIdentity) {
  Tensor x = rnd({4, 40}, 22);  // H = 3, H_kv = 1, D = 8
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor xd = x.to(dt);
    Tensor y = ops::rope(xd, positions_of({0, 0, 0, 0}), 3, 1, 500000.0);
    EXPECT_TRUE(all_close(y, xd.to_vector<double>(), 0)) << dtype_name(dt);
  }
}

TEST(OpsRope, Gradcheck) {
  const std::vector<int32_t> pos = {0, 1, 2, 0, 1};
  struct Case {
    int64_t h, hkv, d;
  };
  for (Case c : {Case{2, 1, 6}, Case{1, 1, 2}, Case{4, 2, 6}, Case{3, 3, 10}}) {
    const int64_t w = (c.h + 2 * c.hkv) * c.d;
    EXPECT_TRUE(gradcheck(
        [c](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{ops::rope(in[0], in[1], c.h, c.hkv, 10000.0)};
        },
        {rnd({5, w}, 23), positions_of(pos)}))
        << c.h << " " << c.hkv << " " << c.d;
  }
}

TEST(OpsRope, BackwardIsTheInverseRotation) {
  // A rotation's transpose is its inverse: the gradient of <rope(x), rope(v)> is v
  // itself, for any x, at large positions too. V passes its gradient through.
  const std::vector<int32_t> pos = {7, 1000000, 65535, 0, 3};
  Tensor v = rnd({5, 36}, 24);  // H = 2, H_kv = 2, D = 6
  Tensor x = rnd({5, 36}, 25).set_requires_grad();
  Tensor y = ops::rope(x, positions_of(pos), 2, 2, 10000.0);
  Tensor target;
  {
    autograd::NoGradGuard no_grad;
    target = ops::rope(v, positions_of(pos), 2, 2, 10000.0);
  }
  autograd::backward(y, target);
  EXPECT_TRUE(all_close(x.grad(), v.to_vector<double>(), 1e-12));
}

TEST(OpsRope, F32MatchesF64) {
  expect_f32_matches_f64("rope",
                         [](const auto& in) { return ops::rope(in[0], in[1], 4, 2, 10000.0); },
                         {rnd({7, 64}, 26), positions_of({0, 1, 2, 3, 0, 1, 2047})});  // D = 8
}

TEST(OpsRope, NoRows) {
  Tensor x = rnd({0, 24}, 27).set_requires_grad();
  Tensor y = ops::rope(x, positions_of({}), 2, 1, 1e4);
  EXPECT_EQ(y.shape(), Shape({0, 24}));
  autograd::backward(y, rnd({0, 24}, 28));
  EXPECT_EQ(x.grad().shape(), Shape({0, 24}));
}

TEST(OpsRope, BadInput) {
  Tensor x = rnd({5, 24}, 1);
  Tensor p = positions_of({0, 1, 2, 0, 1});
  EXPECT_DL_ERROR(ops::rope(x, p, 3, 1, 1e4), "[rope]", "24", "(H + 2 H_kv) * D", "5 * D");
  EXPECT_DL_ERROR(ops::rope(rnd({5, 15}, 1), p, 3, 1, 1e4), "[rope]", "D = 3", "even");
  EXPECT_DL_ERROR(ops::rope(x, positions_of({0, 1, 2}), 2, 1, 1e4), "[rope]", "positions", "[5]",
                  "[3]");
  EXPECT_DL_ERROR(ops::rope(x, Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 0, 1}), 2, 1, 1e4),
                  "[rope]", "positions", "i32", "i64");
  EXPECT_DL_ERROR(ops::rope(x.reshape({5, 4, 6}), p, 2, 1, 1e4), "[rope]", "[5, 4, 6]");
  EXPECT_DL_ERROR(ops::rope(x, p, 0, 1, 1e4), "[rope]", "heads");
  EXPECT_DL_ERROR(ops::rope(x, p, 2, 1, 0.0), "[rope]", "theta");
  EXPECT_DL_ERROR(ops::rope(x, Tensor(), 2, 1, 1e4), "[rope]", "positions", "undefined");
}

}  // namespace
}  // namespace driftless
