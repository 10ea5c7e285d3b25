// The shared math of the built-in score modifiers (layers/attention/score_mod.h), the one
// implementation the CPU kernels run and the CUDA kernels are to take: each derivative
// against central finite differences in float64 (CONTRIBUTING.md tier 1), reached the way
// the kernels reach it (a description bound from a ScoreModSpec, then its functor).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "layers/attention/spec.h"

namespace driftless::layers {
namespace {

constexpr double kStep = 1e-5;
// Central differences err by about step^2 * |f'''| (the curvature of softcap grows as
// 1 / cap^2) plus rounding of about 1e-16 / step.
constexpr double kTol = 1e-8;

const std::vector<double> kScores{-60.0, -4.0, -1.3, -0.25, 0.0, 0.1, 0.9, 2.5, 7.0, 45.0};

// (h, q_idx, k_idx) triples: both signs of q - k, distance 0, and distances past the
// relative-position clamp.
struct Pos {
  int h, q, k;
};
const std::vector<Pos> kPositions{{0, 0, 0},  {1, 5, 2},  {2, 2, 5},
                                  {0, 40, 1}, {1, 3, 30}, {2, 9, 9}};

double central(const auto& f, double x) {
  return (f(x + kStep) - f(x - kStep)) / (2 * kStep);
}

// d value / d score of the functor of `m` against central differences, at every score and
// position; returns how many points were checked.
int check_score_derivative(const ScoreModSpec& m) {
  const BoundScoreMod<double> b = bind_score_mod<double>(m, Device::cpu);
  int checked = 0;
  score_mod::visit_score_mod(b.desc, [&](const auto& mod) {
    for (const Pos& p : kPositions)
      for (double s : kScores) {
        auto value = [&](double x) { return mod.value(x, 0, p.h, p.q, p.k); };
        const double fd = central(value, s);
        const double d = mod.derivative(s, 0, p.h, p.q, p.k);
        EXPECT_NEAR(d, fd, kTol * std::max(1.0, std::abs(fd)))
            << score_mod_name(m.kind) << " at score " << s << ", h " << p.h << ", q " << p.q
            << ", k " << p.k;
        ++checked;
      }
  });
  return checked;
}

TEST(ScoreModMath, SoftcapDerivativeMatchesFiniteDifferences) {
  for (double cap : {0.5, 1.5, 30.0}) {
    SCOPED_TRACE(cap);
    EXPECT_EQ(check_score_derivative(ScoreModSpec::make_softcap(cap)),
              int(kPositions.size() * kScores.size()));
  }
}

TEST(ScoreModMath, SoftcapValueIsCapTimesTanh) {
  for (double cap : {0.5, 30.0})
    for (double s : kScores) {
      EXPECT_EQ(score_mod::softcap_value(s, cap), cap * std::tanh(s / cap));
      EXPECT_LT(std::abs(score_mod::softcap_value(s, cap)), cap + 1e-12);
    }
  // In f32 too: the form the CUDA kernels compute in.
  EXPECT_NEAR(score_mod::softcap_value(3.0f, 2.0f), 2.0 * std::tanh(1.5), 1e-6);
  EXPECT_NEAR(score_mod::softcap_derivative(3.0f, 2.0f), 1.0 - std::pow(std::tanh(1.5), 2), 1e-6);
}

TEST(ScoreModMath, AlibiDerivativeMatchesFiniteDifferences) {
  const ScoreModSpec m =
      ScoreModSpec::make_alibi(Tensor::from_vector(std::vector<float>{0.5f, 0.125f, 2.0f}));
  EXPECT_EQ(check_score_derivative(m), int(kPositions.size() * kScores.size()));
  // The value: score - slope[h] * |q - k|, symmetric in q - k.
  const BoundScoreMod<double> b = bind_score_mod<double>(m, Device::cpu);
  const score_mod::Alibi<double> mod{b.desc.alibi_slopes};
  EXPECT_EQ(mod.value(1.0, 0, 1, 5, 2), 1.0 - 0.125 * 3);
  EXPECT_EQ(mod.value(1.0, 0, 1, 2, 5), 1.0 - 0.125 * 3);
  EXPECT_EQ(mod.value(1.0, 0, 2, 9, 9), 1.0);
}

ScoreModSpec relative_position(int heads, int max_distance) {
  const int nb = 2 * max_distance + 1;
  std::vector<double> table(size_t(heads * nb));
  for (size_t i = 0; i < table.size(); ++i) table[i] = std::sin(0.7 * double(i) + 0.3);
  return ScoreModSpec::make_relative_position(
      Tensor::from_vector(table).reshape({int64_t(heads), int64_t(nb)}), max_distance);
}

TEST(ScoreModMath, RelativePositionDerivativeMatchesFiniteDifferences) {
  EXPECT_EQ(check_score_derivative(relative_position(3, 4)),
            int(kPositions.size() * kScores.size()));
}

// d value / d table against central differences in every table entry: param_grad adds
// dvalue times the derivative, so with dvalue = 1 it is the row of the Jacobian.
TEST(ScoreModMath, RelativePositionTableGradientMatchesFiniteDifferences) {
  const int heads = 3, max_distance = 4;
  const ScoreModSpec m = relative_position(heads, max_distance);
  BoundScoreMod<double> b = bind_score_mod<double>(m, Device::cpu);
  double* table = b.relative_position_table.data<double>();
  const score_mod::RelativePosition<double> mod{table, heads, max_distance};
  ASSERT_EQ(mod.param_count(), heads * (2 * max_distance + 1));
  for (const Pos& p : kPositions) {
    const double s = 0.4;
    std::vector<double> grad(size_t(mod.param_count()), 0.0);
    mod.param_grad(1.0, s, 0, p.h, p.q, p.k, grad.data());
    for (int64_t i = 0; i < mod.param_count(); ++i) {
      const double saved = table[i];
      auto value = [&](double x) {
        table[i] = x;
        const double v = mod.value(s, 0, p.h, p.q, p.k);
        table[i] = saved;
        return v;
      };
      EXPECT_NEAR(grad[size_t(i)], central(value, saved), kTol)
          << "table entry " << i << " at h " << p.h << ", q " << p.q << ", k " << p.k;
    }
  }
}

TEST(ScoreModMath, NoneIsTheIdentity) {
  EXPECT_EQ(check_score_derivative(ScoreModSpec::none()), int(kPositions.size() * kScores.size()));
}

// The description carries the spec's parameters in the compute type, and visiting it gives
// the functor of its kind.
TEST(ScoreModDesc, BindsParametersInTheComputeType) {
  const BoundScoreMod<float> s =
      bind_score_mod<float>(ScoreModSpec::make_softcap(2.5), Device::cpu);
  EXPECT_EQ(s.desc.kind, ScoreModKind::softcap);
  EXPECT_EQ(s.desc.softcap, 2.5f);

  const BoundScoreMod<float> a = bind_score_mod<float>(
      ScoreModSpec::make_alibi(Tensor::from_vector(std::vector<double>{0.25, 4.0})), Device::cpu);
  ASSERT_NE(a.desc.alibi_slopes, nullptr);
  EXPECT_EQ(a.desc.alibi_slopes[1], 4.0f);

  const BoundScoreMod<double> r = bind_score_mod<double>(relative_position(3, 2), Device::cpu);
  EXPECT_EQ(r.desc.relative_position_heads, 3);
  EXPECT_EQ(r.desc.relative_position_max_distance, 2);
  EXPECT_EQ(r.desc.relative_position_table[7], std::sin(0.7 * 7 + 0.3));

  int visited = 0;
  score_mod::visit_score_mod(r.desc, [&](const auto& mod) {
    using M = std::decay_t<decltype(mod)>;
    EXPECT_TRUE((std::is_same_v<M, score_mod::RelativePosition<double>>));
    if constexpr (std::is_same_v<M, score_mod::RelativePosition<double>>) {
      EXPECT_EQ(mod.param_count(), 3 * 5);
    }
    ++visited;
  });
  EXPECT_EQ(visited, 1);
}

TEST(ScoreModDesc, RefusesAnUnknownKind) {
  ScoreModSpec m;
  m.kind = ScoreModKind(17);
  try {
    bind_score_mod<float>(m, Device::cpu);
    ADD_FAILURE() << "no error for kind 17";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[attention] unknown score modifier kind 17"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace driftless::layers
