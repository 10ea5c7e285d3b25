// The modifier expression language (layers/attention/expr/): parsing and precedence, every
// kind of error with its column, symbolic derivatives against central finite differences
// in float64 over many random expressions, and the canonical text a kernel cache keys on.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "layers/attention/expr/expr.h"
#include "layers/attention/expr/expr_mod.h"

namespace driftless::layers::expr {
namespace {

constexpr int kHeads = 4;

std::vector<ParamDecl> decls(bool learnable) {
  ParamDecl slope{"slope", {kHeads}, {0.5, 0.25, 0.125, 0.0625}, learnable};
  ParamDecl bias{"bias", {kHeads, 17}, {}, learnable};
  for (int i = 0; i < kHeads * 17; ++i) bias.init.push_back(0.01 * ((i * 7) % 23) - 0.1);
  ParamDecl temp{"temp", {}, {1.7}, learnable};
  return {slope, bias, temp};
}

std::string error_of(const std::string& src, bool mask = false) {
  try {
    if (mask)
      compile_mask_mod(src, decls(true), kHeads);
    else
      compile_score_mod(src, decls(true), kHeads);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string canon(const std::string& src) {
  return compile_score_mod(src, decls(false), kHeads)->canonical();
}

struct Eval {
  std::shared_ptr<const Program> p;
  std::vector<ParamDecl> d;
  std::vector<std::vector<double>> values;
  std::vector<const double*> ptrs;
  explicit Eval(const std::string& src, bool learnable = true) : d(decls(learnable)) {
    p = compile_score_mod(src, d, kHeads);
    for (const auto& x : d) values.push_back(x.init);
    for (const auto& v : values) ptrs.push_back(v.data());
  }
  ExprMod<double> mod() const {
    ExprMod<double> m;
    m.score = p.get();
    m.b.params = ptrs.data();
    return m;
  }
};

TEST(ScoreExpr, PrecedenceAndAssociativity) {
  EXPECT_EQ(canon("score+1*2"), "score + 1.0 * 2.0");
  EXPECT_EQ(canon("(score+1)*2"), "(score + 1.0) * 2.0");
  EXPECT_EQ(canon("score - (1 - 2)"), "score - (1.0 - 2.0)");
  EXPECT_EQ(canon("(score - 1) - 2"), "score - 1.0 - 2.0");
  EXPECT_EQ(canon("-score*-2"), "-score * -2.0");
  EXPECT_EQ(canon("q - k < 4 && k > 1 || h == 0 ? score : -score"),
            "where(q - k < 4 && k > 1 || h == 0, score, -score)");
}

TEST(ScoreExpr, TernaryNestsRight) {
  Eval e("q < 2 ? 1 : q < 4 ? 2 : 3");
  const auto m = e.mod();
  EXPECT_EQ(m.value(0, 0, 0, 1, 0), 1);
  EXPECT_EQ(m.value(0, 0, 0, 3, 0), 2);
  EXPECT_EQ(m.value(0, 0, 0, 9, 0), 3);
}

TEST(ScoreExpr, ErrorsNameTheColumnWithACaret) {
  const std::string e = error_of("score + foo * 2");
  EXPECT_NE(e.find("[score_mod] unknown identifier 'foo'"), std::string::npos) << e;
  EXPECT_NE(e.find("known: score, q, k, h"), std::string::npos) << e;
  EXPECT_NE(e.find("slope"), std::string::npos) << e;  // the declared parameters too
  EXPECT_NE(e.find("at column 9:\n  score + foo * 2\n          ^"), std::string::npos) << e;

  EXPECT_NE(error_of("tanh(score, 2)").find("tanh() takes 1 argument(s), got 2 at column 1"),
            std::string::npos);
  EXPECT_NE(error_of("score + slope").find("'slope' has 1 dimension(s) but is indexed with 0"),
            std::string::npos);
  EXPECT_NE(error_of("score + bias[h]").find("indexed with 1 subscript(s)"), std::string::npos)
      << error_of("score + bias[h]");
  EXPECT_NE(error_of("score + bias[h, q - k]").find("may be outside [0, 16]"), std::string::npos);
  EXPECT_NE(error_of("score + bias[h, q / 2]").find("must be an integer index expression"),
            std::string::npos);
  EXPECT_NE(error_of("score + slope[h + 1]").find("subscript 0 of 'slope' may be outside [0, 3]"),
            std::string::npos);
  EXPECT_NE(error_of("floor(score)").find("has no derivative"), std::string::npos);
  EXPECT_NE(error_of("score + int(slope[h])").find("has no derivative"), std::string::npos);
  EXPECT_NE(error_of("score > 0").find("must be a number, got a boolean"), std::string::npos);
  EXPECT_NE(error_of("score + (q < k)").find("takes numbers, got a boolean"), std::string::npos)
      << error_of("score + (q < k)");
  EXPECT_NE(error_of("pow(score, q)").find("exponent of pow() must be a number at column 12"),
            std::string::npos);
  EXPECT_NE(error_of("score * (2 + 3").find("expected ')' to close the '(' at column 9"),
            std::string::npos);
  EXPECT_NE(error_of("score 2").find("unexpected '2' at column 7"), std::string::npos);
  EXPECT_NE(error_of("1 < q < 3").find("comparisons do not chain"), std::string::npos);
  EXPECT_NE(error_of("score + doc").find("document index) is not available"), std::string::npos);
  EXPECT_NE(error_of("q - k < score", true).find("[mask_mod] mask_mod cannot read score"),
            std::string::npos);
  EXPECT_NE(error_of("q - k", true).find("a mask_mod must be a boolean, got an integer"),
            std::string::npos);
  EXPECT_NE(error_of("").find("expected a value, got the end at column 1"), std::string::npos);
  // A bounded subscript is accepted: clamp proves the range.
  EXPECT_EQ(error_of("score + bias[h, clamp(q - k, -8, 8) + 8]"), "");
}

TEST(ScoreExpr, DeclarationsAreChecked) {
  auto d = decls(true);
  d[0].shape = {kHeads + 1};
  d[0].init.push_back(0);
  EXPECT_THROW(compile_score_mod("score", d, kHeads), Error);
  d = decls(true);
  d[1].init.pop_back();
  EXPECT_THROW(compile_score_mod("score", d, kHeads), Error);
  d = decls(true);
  d[2].name = "exp";
  EXPECT_THROW(compile_score_mod("score", d, kHeads), Error);
}

TEST(ScoreExpr, CanonicalIgnoresFormattingAndKeepsMeaning) {
  EXPECT_EQ(canon("30*tanh(score/30)"), canon("  30.0 * tanh( (score) / 3e1 )  "));
  EXPECT_EQ(canon("30*tanh(score/30)"), "30.0 * tanh(score / 30.0)");
  EXPECT_EQ(canon("score - slope[h]*abs(q-k)"), canon("score-(slope[ h ]*(abs((q - k))))"));
  EXPECT_EQ(canon("q > 3 ? score : 0"), canon("where(q>3, score, 0.0)"));
  EXPECT_NE(canon("30*tanh(score/30)"), canon("30*tanh(score/31)"));
  EXPECT_NE(canon("score - 1 - 2"), canon("score - (1 - 2)"));
  EXPECT_NE(canon("score * 2 + 1"), canon("score * (2 + 1)"));
  // Canonical text parses back to itself.
  for (const char* s : {"score - slope[h] * abs(q - k)", "-(score + 1) * -temp / (2 - q)",
                        "where(!(q < k) && h != 1, score, exp(-score))",
                        "score + bias[h, clamp(q - k, -8, 8) + 8]"}) {
    const std::string c = canon(s);
    EXPECT_EQ(canon(c), c);
  }
}

TEST(ScoreExpr, StructureSeparatesConstants) {
  auto a = compile_score_mod("30 * tanh(score / 30)", decls(false), kHeads);
  auto b = compile_score_mod("50.0*tanh(score/ 50)", decls(false), kHeads);
  EXPECT_EQ(a->canonical_structure(), b->canonical_structure());
  EXPECT_NE(a->canonical(), b->canonical());
  EXPECT_EQ(a->canonical_structure().substr(0, 31), "score: $0 * tanh(score / $1); s");
  ASSERT_EQ(b->constants().size(), 2u);
  EXPECT_EQ(b->constants()[0].value, 50.0);
  EXPECT_FALSE(b->constants()[0].integer);
  auto c = compile_score_mod("score + bias[h, clamp(q - k, -8, 8) + 8]", decls(false), kHeads);
  EXPECT_EQ(c->canonical_structure().substr(0, 50),
            "score: score + bias[h, clamp(q - k, -#0, #1) + #2]");
  EXPECT_TRUE(c->constants()[1].integer);
  // Learnability is structure (it adds param_grad).
  EXPECT_NE(compile_score_mod("score * temp", decls(false), kHeads)->canonical_structure(),
            compile_score_mod("score * temp", decls(true), kHeads)->canonical_structure());
}

TEST(ScoreExpr, DerivativesAreReadable) {
  auto p = compile_score_mod("score - slope[h] * abs(q - k)", decls(true), kHeads);
  EXPECT_EQ(to_string(*p->d_score, *p), "1.0");
  ASSERT_EQ(p->d_occurrence.size(), 1u);
  EXPECT_EQ(to_string(*p->d_occurrence[0], *p), "-abs(q - k)");
  auto s = compile_score_mod("30 * tanh(score / 30)", decls(true), kHeads);
  EXPECT_EQ(to_string(*s->d_score, *s),
            "30.0 * ((1.0 - tanh(score / 30.0) * tanh(score / 30.0)) * (1.0 / 30.0))");
}

// Random expressions of score and a learnable scalar/table entries, built from a grammar
// whose functions stay finite and smooth near the sample points.
std::string random_expr(std::mt19937& g, int depth) {
  std::uniform_int_distribution<int> pick(0, depth <= 0 ? 4 : 17);
  switch (pick(g)) {
    case 0:
      return "score";
    case 1:
      return "temp";
    case 2:
      return "slope[h]";
    case 3:
      return "bias[h, clamp(q - k, -8, 8) + 8]";
    case 4:
      return std::to_string(std::uniform_int_distribution<int>(1, 9)(g)) + ".5";
    case 5:
      return "(" + random_expr(g, depth - 1) + " + " + random_expr(g, depth - 1) + ")";
    case 6:
      return "(" + random_expr(g, depth - 1) + " - " + random_expr(g, depth - 1) + ")";
    case 7:
      return "(" + random_expr(g, depth - 1) + " * " + random_expr(g, depth - 1) + ")";
    case 8:
      return "(" + random_expr(g, depth - 1) + " / (2.5 + abs(" + random_expr(g, depth - 1) + ")))";
    case 9:
      return "tanh(" + random_expr(g, depth - 1) + ")";
    case 10:
      return "exp(tanh(" + random_expr(g, depth - 1) + "))";
    case 11:
      return "log(1.5 + sigmoid(" + random_expr(g, depth - 1) + "))";
    case 12:
      return "sqrt(1 + pow(" + random_expr(g, depth - 1) + ", 2))";
    case 13:
      return "-" + random_expr(g, depth - 1);
    case 14:
      return "where(q - k > 3, " + random_expr(g, depth - 1) + ", " + random_expr(g, depth - 1) +
             ")";
    case 15:
      return "min(" + random_expr(g, depth - 1) + ", 20 + score)";
    case 16:
      return "clamp(" + random_expr(g, depth - 1) + ", -50, 50)";
    default:
      return "(score * slope[h] - temp * abs(q - k))";
  }
}

TEST(ScoreExpr, DerivativesMatchFiniteDifferencesOnRandomExpressions) {
  std::mt19937 g(7);
  std::uniform_real_distribution<double> u(-3, 3);
  int checked = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const std::string src = random_expr(g, 4);
    SCOPED_TRACE(src);
    Eval e(src);
    ExprMod<double> m = e.mod();
    std::vector<double> grad(size_t(m.param_count()));
    for (int pt = 0; pt < 4; ++pt) {
      const double s = u(g);
      const int h = pt % kHeads, q = 3 + 5 * pt, k = (7 * pt) % 13;
      const double eps = 1e-6;
      // Kinks (abs, min, clamp, where on q, k) are never within eps of these points in
      // score: skip a point whose one-sided slopes disagree.
      const double f0 = m.value(s, 0, h, q, k);
      const double fp = m.value(s + eps, 0, h, q, k), fm = m.value(s - eps, 0, h, q, k);
      if (!std::isfinite(f0)) continue;
      const double right = (fp - f0) / eps, left = (f0 - fm) / eps;
      if (std::abs(right - left) > 1e-3 * std::max(1.0, std::abs(right))) continue;
      const double fd = (fp - fm) / (2 * eps);
      EXPECT_NEAR(m.derivative(s, 0, h, q, k), fd, 1e-6 * std::max(1.0, std::abs(fd)));
      // d value / d every learnable entry: perturb each entry the pair can read.
      std::fill(grad.begin(), grad.end(), 0.0);
      m.param_grad(1.0, s, 0, h, q, k, grad.data());
      for (size_t pi = 0; pi < e.values.size(); ++pi)
        for (size_t j = 0; j < e.values[pi].size(); ++j) {
          double& w = e.values[pi][j];
          const double w0 = w;
          w = w0 + eps;
          const double a = m.value(s, 0, h, q, k);
          w = w0 - eps;
          const double b = m.value(s, 0, h, q, k);
          w = w0;
          const double fdp = (a - b) / (2 * eps);
          const double got = grad[size_t(e.p->grad_offset[pi]) + j];
          EXPECT_NEAR(got, fdp, 1e-5 * std::max(1.0, std::abs(fdp)))
              << e.d[pi].name << "[" << j << "] at s " << s << " h " << h;
        }
      ++checked;
    }
  }
  EXPECT_GT(checked, 300);
}

TEST(ScoreExpr, IntegerIndexMathIsExact) {
  // T5-style buckets: exact distances below 4, logarithmic above, clamped to the table.
  Eval e(
      "score + bias[h, clamp(where(q - k < 4, q - k, 4 + int(log((q - k) / 4.0) / log(4.0) * 4)), "
      "0, 16)]");
  const auto m = e.mod();
  for (int d : {0, 1, 3, 4, 7, 16, 63, 1000, 100000}) {
    const int dist = d < 4 ? d : 4 + int(std::log(d / 4.0) / std::log(4.0) * 4);
    const int bucket = std::min(std::max(dist, 0), 16);
    EXPECT_EQ(m.value(0.0, 0, 1, d + 5, 5), e.values[1][size_t(17 + bucket)]) << d;
  }
}

}  // namespace
}  // namespace driftless::layers::expr
