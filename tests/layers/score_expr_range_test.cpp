// The range analysis of score expressions (layers/attention/expr/value_range.cpp) and the
// guard it decides in the emitted CUDA functor: an expression whose value may be -inf on a pair
// returns NaN there (so the GPU makes the row NaN, as the CPU does), every other one is
// emitted without it (the built-ins written as expressions keep the built-ins' instructions).
// The analysis is checked against the CPU's float evaluation of random expressions.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "layers/attention/expr/expr.h"
#include "tests/expr_fuzz_gen.h"

namespace driftless::layers::expr {
namespace {

constexpr int kHeads = 4;
// What the emitted value_log2 and value return when guarded (emit_cuda.cpp returned).
constexpr const char* kGuard = "v == -(1e38f * 1e38f) ? __int_as_float(0x7fc00000) : v";

std::vector<ParamDecl> decls() {
  return {{"slope", {kHeads}, {0.5, 0.25, 0.125, 0.0625}, false},
          {"bias", {kHeads, 64}, std::vector<double>(kHeads * 64, 0.0), true},
          {"temp", {}, {1.5}, true}};
}

std::shared_ptr<const Program> score(const std::string& s) {
  return compile_score_mod(s, decls(), kHeads);
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// s is analysed as may be -inf (or not), and its functor, with literals as members (the kernel
// cache's) or in the code, has the guard in value_log2 and value (or nowhere).
void expect_guard(const char* s, bool guarded) {
  const auto p = score(s);
  EXPECT_EQ(may_be_minus_inf(*p), guarded)
      << s << ": [" << value_range(*p).lo << ", " << value_range(*p).hi << "]";
  const size_t want = guarded ? 2 : 0;
  EXPECT_EQ(count(p->functor_text, kGuard), want) << s;
  EXPECT_EQ(count(emit_cuda(*p, "DlFunctor", false), kGuard), want) << s;
}

// The built-ins and other expressions whose value is finite for finite moderate inputs (or
// only NaN or +inf, which already reach the row as NaN) get no guard.
TEST(ScoreExprRange, BoundedExpressionsAreNotGuarded) {
  const char* bounded[] = {
      "score",
      "30 * tanh(score / 30)",          // softcap
      "score - slope[h] * abs(q - k)",  // ALiBi
      "score + bias[h, min(abs(q - k), 63)]",
      "temp * score + bias[h, clamp(where(q - k < 8, q - k, 8 + int(log((q - k) / 8.0) / "
      "log(16.0) * 8)), 0, 63)]",  // T5 buckets: the log is inside an index
      "where(q - k < 16 && h != 1, 0.8 * score + 0.1 * sqrt(abs(q - k) + 1), score - 0.05 * (q - "
      "k))",
      "score + log(abs(q - k) + 1.0)",
      "max(log(sigmoid(score)), -20.0)",
      "clamp(score + log(q + 0.0), -50.0, 50.0)",
      "score / (abs(q - k) + 1.0)",
      "score + sqrt(q - 5.0)",  // NaN for q < 5, never -inf
      "score + exp(score)",     // +inf at most
      "score * exp(-pow(score, 2))",
      "score * exp(-(score * score))",  // a square
      "score + exp(q * 1e-9)",
      "-(1.0 * q * q * q)",
      "pow(score, 2) - 3 * sigmoid(score)",
  };
  for (const char* s : bounded) expect_guard(s, false);
  // The softcap's range is its cap's; ALiBi's is bounded by the slope and the distance.
  const RealRange softcap = value_range(*score("30 * tanh(score / 30)"));
  EXPECT_GE(softcap.lo, -30.0);
  EXPECT_LE(softcap.hi, 30.0);
  const RealRange alibi = value_range(*score("score - slope[h] * abs(q - k)"));
  EXPECT_TRUE(std::isfinite(alibi.lo) && std::isfinite(alibi.hi));
}

// An expression that can make -inf from finite inputs gets the guard, in value_log2 (what the
// kernels call) and value.
TEST(ScoreExprRange, ExpressionsThatMayBeMinusInfinityAreGuarded) {
  const char* unbounded[] = {
      "score + log(q - k)",
      "score + log(q - k + 0.0)",  // -inf on the diagonal, which every causal row sees
      "-exp(score)",
      "score - exp(q * 0.1)",
      "score / temp",                            // a learnable temperature may reach 0
      "score - 1.0 / (q - k)",                   // division by a distance that may be 0
      "log(sigmoid(score))",                     // sigmoid rounds to 0 past score -88
      "score + log(bias[h, 3])",                 // a table entry may be 0
      "score * temp * bias[h, 0] * bias[h, 1]",  // the product of moderate values overflows
      "-(1.0 * q * q * q * q * q)",
      "score * 1e30 * 1e30",
      "pow(score, -1)",
      "where(q > k, score, log(k - q + 0.0))",
      "min(score, log(q + 0.0))",
      "score - tanh(score) / (q - k + 0.0)",
      // The emitter folds 3e38 * 1e-38 into one float, which overflows: the chain is unknown.
      "(-1.0 / (q + 1e30)) * 3e38 * 1e-38",
  };
  for (const char* s : unbounded) expect_guard(s, true);
}

// The guard depends on a literal's value, which the kernel cache passes as a kernel argument:
// two expressions of one structure, one guarded, emit different functors, so they never share
// a compiled kernel (its key holds the functor text).
TEST(ScoreExprRange, TheGuardSeparatesKernelsOfOneStructure) {
  const auto small = score("score - exp(q * 1e-9)"), large = score("score - exp(q * 0.1)");
  ASSERT_EQ(small->canonical_structure(), large->canonical_structure());
  EXPECT_FALSE(may_be_minus_inf(*small));
  EXPECT_TRUE(may_be_minus_inf(*large));
  // The functors without their comment line, which names the constants (the kernel cache's
  // key has the structure there instead: jit/attention_program.cpp functor_source).
  auto code = [](const Program& p) {
    std::string s = p.functor_text;
    const size_t at = s.find("// score_mod: ");
    return s.erase(at, s.find('\n', at) - at);
  };
  EXPECT_NE(code(*small), code(*large));
}

// Masks have no value to guard.
TEST(ScoreExprRange, MasksAreNeverGuarded) {
  const auto m = compile_mask_mod("q - k < 256 || k < 64", decls(), kHeads);
  EXPECT_FALSE(may_be_minus_inf(*m));
  EXPECT_EQ(count(m->functor_text, kGuard), 0u);
}

// Soundness against the CPU's float evaluation: random expressions at scores and table entries
// up to kModerate and positions up to kMaxPosition. Every finite value lies in the proven range
// (to float rounding), and an expression whose value times log2 e is -inf at some pair (the
// kernels' value_log2) is guarded.
TEST(ScoreExprRange, RangesHoldTheCpuFloatValuesOfRandomExpressions) {
  ExprGen g{std::mt19937_64(20261130)};
  const std::vector<ParamDecl> d = fuzz_decls();
  const float scores[] = {0.f,
                          -0.f,
                          1.f,
                          -1.f,
                          0.125f,
                          -3.5f,
                          87.f,
                          -89.f,
                          100.f,
                          -100.f,
                          1e6f,
                          -1e6f,
                          1e14f,
                          -1e14f,
                          float(kModerate),
                          -float(kModerate)};
  const float entries[] = {
      0.f, 1.f, -1.f, 1e-30f, -1e-30f, 1e10f, -1e10f, float(kModerate), -float(kModerate)};
  const int64_t positions[] = {0, 1, 2, 7, 100, 65535, kMaxPosition - 1, kMaxPosition};
  const auto start = std::chrono::steady_clock::now();
  int programs = 0, guarded = 0, minus_inf = 0;
  for (int n = 0; n < 3000; ++n) {
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(3)) break;
    std::shared_ptr<const Program> p;
    const std::string s = g.real(1 + g.pick(4), true);
    try {
      p = compile_score_mod(s, d, kFuzzHeads);
    } catch (const Error&) {
      continue;
    }
    ++programs;
    const RealRange r = value_range(*p);
    const bool guard = may_be_minus_inf(*p);
    guarded += guard ? 1 : 0;
    bool saw_minus_inf = false;
    for (float entry : entries) {
      std::vector<std::vector<float>> tables;
      for (const ParamDecl& decl : d) tables.emplace_back(size_t(decl.numel()), entry);
      std::vector<const float*> ptrs;
      for (const auto& t : tables) ptrs.push_back(t.data());
      const Bindings<float> b{ptrs.data(), 0};
      for (float sc : scores)
        for (int64_t q : positions)
          for (int64_t k : {int64_t(0), int64_t(1), q, kMaxPosition})
            for (int64_t h = 0; h < kFuzzHeads; ++h) {
              const float v = eval_real(*p->root, b, sc, h, q, k);
              if (std::isnan(v)) continue;
              const double slack = 1e-3 * std::fabs(double(v)) + 1e-5;
              ASSERT_GE(double(v), r.lo - slack) << s << " at score " << sc << " entry " << entry
                                                 << " h " << h << " q " << q << " k " << k;
              ASSERT_LE(double(v), r.hi + slack) << s << " at score " << sc << " entry " << entry
                                                 << " h " << h << " q " << q << " k " << k;
              volatile float log2 = v * 1.4426950408889634f;
              saw_minus_inf = saw_minus_inf || log2 == -std::numeric_limits<float>::infinity();
            }
    }
    minus_inf += saw_minus_inf ? 1 : 0;
    ASSERT_TRUE(!saw_minus_inf || guard) << s << " is -inf at some pair but not guarded";
  }
  std::printf("[value range] %d programs, %d guarded, %d -inf at some pair\n", programs, guarded,
              minus_inf);
  // The generator makes both kinds, and enough of them to mean something.
  EXPECT_GT(programs, 200);
  EXPECT_GT(minus_inf, 5) << "of " << programs;
  EXPECT_LT(guarded, programs) << "every random expression guarded";
}

}  // namespace
}  // namespace driftless::layers::expr
