// Hostile and careless modifier expressions (layers/attention/expr/): parameter names that
// would inject code into the generated CUDA source, clamps with empty ranges, integer
// arithmetic that wraps, nesting and length past the bounds, derivatives that would grow
// exponentially, scores that are never finite and numbers past the doubles. Each is refused
// with a clear error (naming the column where there is one) or computed right; none crashes.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <unordered_set>
#include <vector>

#include "engine/core/error.h"
#include "layers/attention/expr/expr.h"

namespace driftless::layers::expr {
namespace {

constexpr int kHeads = 4;

std::vector<ParamDecl> bias_decl(int64_t n = 16) {
  return {{"bias", {kHeads, n}, std::vector<double>(size_t(kHeads * n), 0.5), false}};
}

// The error of compiling `source` as a score (or mask) expression, "" if it compiles.
std::string error_of(const std::string& source, const std::vector<ParamDecl>& decls = {},
                     bool mask = false) {
  try {
    if (mask)
      compile_mask_mod(source, decls, kHeads);
    else
      compile_score_mod(source, decls, kHeads);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR(source_error, ...)                                                        \
  do {                                                                                         \
    const std::string err_ = (source_error);                                                   \
    for (const char* want_ : {__VA_ARGS__})                                                    \
      EXPECT_NE(err_.find(want_), std::string::npos) << "want '" << want_ << "' in: " << err_; \
  } while (0)

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// Distinct nodes of a graph (what derivation allocates), however often each is read.
size_t distinct_nodes(const Node& n, std::unordered_set<const Node*>& seen) {
  if (!seen.insert(&n).second) return 0;
  size_t c = 1;
  for (const auto& a : n.args) c += distinct_nodes(*a, seen);
  return c;
}
size_t distinct_nodes(const Node& n) {
  std::unordered_set<const Node*> seen;
  return distinct_nodes(n, seen);
}

TEST(ScoreExprHostile, ParameterNamesMustBeIdentifiers) {
  const std::vector<std::string> bad = {"a;\n#include \"/etc/hostname\"\nconst float* p_b",
                                        "a;\n#define dl_abs(x) 0\n//",
                                        "",
                                        "9a",
                                        "a b",
                                        "a-b",
                                        "caf\xc3\xa9",
                                        "int",
                                        "float",
                                        "while",
                                        "threadIdx",
                                        "__x",
                                        "a__b",
                                        "_X",
                                        "dl_abs",
                                        "DL_DOC_SHIFT",
                                        "tanh",
                                        "score",
                                        "h",
                                        std::string(kMaxParamNameLength + 1, 'a')};
  for (const std::string& name : bad) {
    SCOPED_TRACE(name);
    const std::string problem = param_name_problem(name);
    EXPECT_FALSE(problem.empty());
    // Printable and on one line, whatever the name holds.
    for (char c : problem) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << int(c);
    const std::vector<ParamDecl> decls = {{name, {}, {1.0}, false}};
    EXPECT_ERROR(error_of("score", decls), "[score_mod]", "parameter name");
  }
  for (const std::string name : {"slope", "_bias", "b2", "Bias_2", "scale", "c", "f", "p_x"}) {
    EXPECT_EQ(param_name_problem(name), "") << name;
    EXPECT_EQ(error_of("score * " + name, {{name, {}, {1.0}, false}}), "") << name;
  }
  EXPECT_EQ(param_name_problem(std::string(kMaxParamNameLength, 'a')), "");
}

// The emitted CUDA holds nothing a user wrote but identifiers and canonical printing: no
// preprocessor line but the helpers' guard, no backslash (no line splice), and the comment
// that names the expression is one line. A program whose names were changed after it was
// checked is refused by the emitter itself.
TEST(ScoreExprHostile, EmittedSourceHoldsOnlyCanonicalText) {
  auto decls = bias_decl();
  decls.push_back({"slope", {kHeads}, {0.5, 0.25, 0.125, 0.0625}, true});
  const auto p = compile_score_mod(
      "score - slope[h] * abs(q - k) + bias[h, clamp(q - k, 0, 15)] + where(q < 3, 1e-3, "
      "-2.5) / sqrt(1 + (q + k) * 1.0)",
      decls, kHeads);
  const auto m = compile_mask_mod("q - k < 256 || k < int(bias[h, 0])", decls, kHeads);
  for (const auto& [prog, members] : std::vector<std::pair<const Program*, bool>>{
           {p.get(), false}, {p.get(), true}, {m.get(), true}}) {
    const std::string src = emit_cuda(*prog, "DlFunctor", members);
    EXPECT_EQ(src.find('\\'), std::string::npos);
    size_t at = 0;
    int comments = 0;
    while (at < src.size()) {
      const size_t end = std::min(src.find('\n', at), src.size());
      const std::string line = src.substr(at, end - at);
      at = end + 1;
      if (line.rfind("#", 0) == 0) {
        EXPECT_TRUE(line == "#ifndef DL_EXPR_HELPERS" || line == "#define DL_EXPR_HELPERS" ||
                    line == "#endif")
            << line;
      }
      if (line.rfind("// score_mod: ", 0) == 0 || line.rfind("// mask_mod: ", 0) == 0) {
        ++comments;
        EXPECT_EQ(line.substr(line.find(": ") + 2), prog->canonical());
      }
    }
    EXPECT_EQ(comments, 1);
  }
  Program forged = *p;
  forged.params[0].name = "a;\n#define dl_abs(x) 0\n//";
  EXPECT_THROW(emit_cuda(forged, "DlFunctor", true), Error);
}

// A clamp whose lower bound may exceed its upper one is refused (the range proof took it
// for an empty range, and the read left the table), and so is integer arithmetic that may
// wrap in 64 bits, which the proof in doubles took for a small number.
TEST(ScoreExprHostile, SubscriptProofsAreSound) {
  const auto decls = bias_decl();
  EXPECT_ERROR(error_of("score + bias[h, clamp(q, 1000000, 0)]", decls), "lower bound",
               "column 17");
  EXPECT_ERROR(error_of("score + bias[h, clamp(q - k, 5, -1000000)]", decls), "lower bound");
  EXPECT_ERROR(error_of("score + bias[h, clamp(q, k, 3)]", decls), "lower bound");
  EXPECT_ERROR(error_of("score + clamp(score, 2.0, -1.0)", decls), "lower bound");
  EXPECT_ERROR(error_of("score + bias[h, 2147483647*2147483647*2147483647 + 1000000 - "
                        "2147483647*2147483647*2147483647]",
                        decls),
               "overflow 64 bits", "column 38");
  EXPECT_ERROR(error_of("score + q * q * q"), "overflow 64 bits");
  EXPECT_ERROR(error_of("q * q * k < 5", {}, true), "overflow 64 bits");
  EXPECT_ERROR(error_of("score + bias[h, clamp(int(score), 0, 15)]", decls), "rounds");
  // The ranges that stay: the documented buckets, distances and their squares.
  EXPECT_EQ(error_of("score + bias[h, clamp(where(q - k < 8, q - k, 8 + int(log((q - k) / 8.0) "
                     "/ log(16.0) * 8)), 0, 15)]",
                     decls),
            "");
  EXPECT_EQ(error_of("score + bias[h, min(abs(q - k), 15)] - (q - k) * (q - k) * 1e-6", decls), "");
  // The message of a subscript out of its table: the column of its operator, the range.
  EXPECT_EQ(error_of("score + bias[h, clamp(q - k, -3, 20) + clamp(-q, -3, 0) * 0]", bias_decl(24)),
            "[score_mod] subscript 1 of 'bias' may be outside [0, 23] (it can be in [-3, 20]); "
            "bound it with clamp() at column 38:\n  score + bias[h, clamp(q - k, -3, 20) + "
            "clamp(-q, -3, 0) * 0]\n  " +
                std::string(37, ' ') + "^");
}

// int() and the rounding functions saturate to the 32-bit integers and take NaN to 0, so
// arithmetic on them is proven free of overflow (and the GPU's dl_index does the same).
TEST(ScoreExprHostile, RoundingSaturatesTo32Bits) {
  const auto p = compile_score_mod("score + int(1e30 * (q + 1.0)) * 0.5", {}, kHeads);
  const Bindings<double> b;
  EXPECT_EQ(eval_real(*p->root, b, 0.0, 0, 3, 0), 2147483647 * 0.5);
  const auto n = compile_score_mod("score + floor(log(q - k + 0.0))", {}, kHeads);
  EXPECT_EQ(eval_real(*n->root, b, 0.0, 0, 0, 0), -2147483648.0);  // log(0) = -inf
  EXPECT_NE(emit_cuda(*n, "DlFunctor").find("dl_index(floorf("), std::string::npos);
}

TEST(ScoreExprHostile, DepthAndLengthAreBounded) {
  // Past the length: refused before parsing.
  EXPECT_ERROR(error_of(repeat("(", 10000) + "score" + repeat(")", 10000)), "at most 16384");
  EXPECT_ERROR(error_of("score" + repeat(" + 1", 25000)), "at most 16384");
  EXPECT_ERROR(error_of(repeat("-", 100000) + "score"), "at most 16384");
  EXPECT_ERROR(error_of(repeat("!", 100000) + "(q < k)", {}, true), "at most 16384");
  EXPECT_ERROR(error_of(std::string(9600000, ' ') + "q < k", {}, true), "[mask_mod]",
               "at most 16384");
  // Within the length but past the depth: refused at the column where it goes too deep.
  EXPECT_ERROR(error_of(repeat("(", 5000) + "score" + repeat(")", 5000)), "nests deeper than 512",
               "column 257");
  EXPECT_ERROR(error_of("score" + repeat(" + 1", 3000)), "nests deeper than 512");
  EXPECT_LT(error_of("score" + repeat(" + 1", 3000)).size(), 400u);  // the source around it
  EXPECT_ERROR(error_of(repeat("-", 5000) + "score"), "nests deeper than 512");
  EXPECT_ERROR(error_of(repeat("!", 5000) + "(q < k)", {}, true), "nests deeper than 512");
  EXPECT_ERROR(error_of(repeat("abs(", 600) + "score" + repeat(")", 600)), "nests deeper");
  // Within both: long chains are fine.
  EXPECT_EQ(error_of("score" + repeat(" + 1", 400)), "");
  EXPECT_EQ(error_of(repeat("(", 200) + "score" + repeat(")", 200)), "");
  std::string chain = "q < 0";
  for (int i = 1; i < 300; ++i) chain += " || q == " + std::to_string(i);
  EXPECT_EQ(error_of(chain, {}, true), "");
}

// Derivatives share subexpressions: nested abs() (whose derivative read its argument's twice,
// 2^depth terms) and tanh() are linear in distinct nodes; what the evaluator would walk is
// bounded by kMaxTerms with a clear error.
TEST(ScoreExprHostile, DerivationIsLinearAndBounded) {
  const auto start = std::chrono::steady_clock::now();
  for (int depth : {26, 200}) {
    const auto p =
        compile_score_mod(repeat("abs(", depth) + "score - 1" + repeat(")", depth), {}, kHeads);
    EXPECT_LE(distinct_nodes(*p->d_score), size_t(12 * depth)) << depth;
    const Bindings<double> b;
    EXPECT_EQ(eval_real(*p->d_score, b, 0.25, 0, 0, 0), -1.0);  // d |score - 1| at 0.25
    EXPECT_EQ(eval_real(*p->d_score, b, 3.0, 0, 0, 0), 1.0);
  }
  const auto t = compile_score_mod(repeat("tanh(", 100) + "score" + repeat(")", 100), {}, kHeads);
  EXPECT_LE(distinct_nodes(*t->d_score), size_t(12 * 100));
  EXPECT_ERROR(error_of(repeat("tanh(score + ", 200) + "score" + repeat(")", 200)),
               "more than 65536 terms");
  // Learnable factors: each read has its own derivative (the product of the others).
  std::vector<ParamDecl> w = {{"w", {}, {1.0}, true}};
  const auto f = compile_score_mod("score" + repeat(" * w", 100), w, kHeads);
  EXPECT_EQ(f->d_occurrence.size(), 100u);
  EXPECT_ERROR(error_of("score" + repeat(" * w", 300), w), "more than 65536 terms",
               "300 reads of learnable parameters");
  EXPECT_ERROR(error_of("score" + repeat(" * w", 1000), w), "nests deeper than 512");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 30.0);  // a hang guard, not a benchmark: each case took tens of seconds
}

// A score that is not finite for every pair is refused where it is written; one that is not
// finite for some pairs is NaN (expr_mod.h), never a hidden pair (tests/layers/
// score_expr_attention_test.cpp runs it through the attention op).
TEST(ScoreExprHostile, ScoresThatAreNeverFiniteAreRefused) {
  EXPECT_ERROR(error_of("score + sqrt(-1.0)"), "NaN for every pair", "column 9");
  EXPECT_ERROR(error_of("score / 0"), "division by zero", "column 7");
  EXPECT_ERROR(error_of("score / (2 - 2)"), "division by zero");
  EXPECT_ERROR(error_of("score + log(0.0)"), "-inf for every pair");
  EXPECT_ERROR(error_of("score + 1e30 * 1e30"), "+inf for every pair");
  EXPECT_ERROR(error_of("score * pow(0.0, -1)"), "+inf for every pair");
  EXPECT_ERROR(error_of("q < sqrt(-1.0)", {}, true), "NaN for every pair");
  EXPECT_EQ(error_of("score + sqrt(2.0) + log(0.5) / 3"), "");
}

TEST(ScoreExprHostile, NumbersPastTheDoublesNameTheirColumn) {
  EXPECT_ERROR(error_of("score + 1e999"), "[score_mod] the number 1e999 is out of range",
               "column 9");
  EXPECT_ERROR(error_of("score * 2" + std::string(400, '0') + ".0"), "out of range", "column 9");
  EXPECT_ERROR(error_of("score + 1e39"), "does not fit a float", "column 9");
  EXPECT_ERROR(error_of("q < 99999999999", {}, true), "does not fit 32 bits", "column 5");
  EXPECT_EQ(error_of("score + 1e-999"), "");  // underflow is 0
}

}  // namespace
}  // namespace driftless::layers::expr
