// A seeded fuzz test of the modifier expression compiler (layers/attention/expr/): random
// expressions from the grammar and byte-level mutations of valid ones go through the parser,
// the typer, the deriver and the emitter. Every input either compiles or is refused with a
// driftless::Error; a compiled one prints to a canonical text that compiles to itself, emits
// CUDA, and reads only inside its tables at any position. Bounded in count and time.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "layers/attention/expr/expr.h"

namespace driftless::layers::expr {
namespace {

constexpr int kHeads = 3;

std::vector<ParamDecl> decls() {
  return {{"bias", {kHeads, 7}, std::vector<double>(kHeads * 7, 0.25), true},
          {"slope", {kHeads}, {0.5, 0.25, 0.125}, false},
          {"t", {}, {2.0}, true}};
}

struct Gen {
  std::mt19937_64 rng;
  int pick(int n) { return int(rng() % uint64_t(n)); }

  std::string integer(int depth) {
    switch (depth <= 0 ? pick(4) : pick(12)) {
      case 0:
        return "q";
      case 1:
        return "k";
      case 2:
        return "h";
      case 3:
        return std::to_string(pick(20) - 5);
      case 4:
        return integer(depth - 1) + " + " + integer(depth - 1);
      case 5:
        return integer(depth - 1) + " - " + integer(depth - 1);
      case 6:
        return "(" + integer(depth - 1) + ") * " + integer(depth - 1);
      case 7:
        return "abs(" + integer(depth - 1) + ")";
      case 8:
        return "min(" + integer(depth - 1) + ", " + integer(depth - 1) + ")";
      case 9:
        return "clamp(" + integer(depth - 1) + ", " + std::to_string(pick(4) - 2) + ", " +
               std::to_string(pick(30)) + ")";
      case 10:
        return "int(" + real(depth - 1, false) + ")";
      default:
        return "where(" + cond(depth - 1) + ", " + integer(depth - 1) + ", " + integer(depth - 1) +
               ")";
    }
  }
  std::string real(int depth, bool score) {
    const int n = depth <= 0 ? 4 : 18;
    switch (pick(n)) {
      case 0:
        return score ? "score" : "1.5";
      case 1:
        return std::to_string(pick(1000) / 100.0);
      case 2:
        return "slope[h]";
      case 3:
        return score ? "t" : "q * 0.5";
      case 4:
        return real(depth - 1, score) + " + " + real(depth - 1, score);
      case 5:
        return real(depth - 1, score) + " * " + real(depth - 1, score);
      case 6:
        return real(depth - 1, score) + " / " + real(depth - 1, score);
      case 7:
        return "-" + real(depth - 1, score);
      case 8:
        return "tanh(" + real(depth - 1, score) + ")";
      case 9:
        return "exp(" + real(depth - 1, score) + ")";
      case 10:
        return "log(" + real(depth - 1, score) + ")";
      case 11:
        return "sqrt(" + real(depth - 1, score) + ")";
      case 12:
        return "pow(" + real(depth - 1, score) + ", " + std::to_string(pick(5) - 2) + ")";
      case 13:
        return "sigmoid(" + real(depth - 1, score) + ")";
      case 14:
        return "abs(" + real(depth - 1, score) + ")";
      case 15:
        return (score ? "bias[h, " : "slope[") + std::string(score ? "" : "") +
               (score ? integer(depth - 1) + "]" : "h]");
      case 16:
        return "(" + cond(depth - 1) + " ? " + real(depth - 1, score) + " : " +
               real(depth - 1, score) + ")";
      default:
        return "(" + integer(depth - 1) + ")";
    }
  }
  std::string cond(int depth) {
    switch (depth <= 0 ? 0 : pick(4)) {
      case 0:
        return integer(depth - 1) + " < " + integer(depth - 1);
      case 1:
        return "(" + cond(depth - 1) + ") && (" + cond(depth - 1) + ")";
      case 2:
        return "!(" + cond(depth - 1) + ")";
      default:
        return integer(depth - 1) + " == " + integer(depth - 1);
    }
  }
  // One to four byte edits: delete, duplicate, insert a token, swap two bytes.
  std::string mutate(std::string s) {
    static const char* tokens[] = {
        "(",      ")", ",",  "[",     "]",          "-",  "!",  "*",    "/",
        "?",      ":", "q",  "score", "1e999",      "0",  ".",  "e",    "bias",
        "clamp(", "<", "==", "&&",    "9999999999", "  ", "\n", "\x01", "\xff"};
    for (int edits = 1 + pick(4); edits > 0 && !s.empty(); --edits) {
      const size_t at = size_t(pick(int(s.size())));
      switch (pick(4)) {
        case 0:
          s.erase(at, 1 + size_t(pick(3)));
          break;
        case 1:
          s.insert(at, s.substr(at, 1 + size_t(pick(8))));
          break;
        case 2:
          s.insert(at, tokens[pick(int(std::size(tokens)))]);
          break;
        default:
          std::swap(s[at], s[size_t(pick(int(s.size())))]);
      }
    }
    return s;
  }
};

// Every table read of the program at (h, q, k) is inside its table.
void expect_reads_inside(const Node& n, const Program& p, int64_t h, int64_t q, int64_t k) {
  if (n.op == Op::param && !n.args.empty()) {
    static const std::vector<double> zeros(64, 0.0);
    std::vector<const double*> ptrs(p.params.size(), zeros.data());
    const Bindings<double> b{ptrs.data(), 0};
    const int64_t at = param_index(n, b, 0.5, h, q, k);
    ASSERT_TRUE(at >= 0 && at < p.params[size_t(n.param)].numel())
        << p.source << " reads entry " << at << " at h " << h << " q " << q << " k " << k;
  }
  for (const auto& a : n.args) expect_reads_inside(*a, p, h, q, k);
}

// One input: compiled or refused with an Error; a compiled one round-trips, emits, and reads
// inside its tables. Returns whether it compiled.
bool check(const std::string& source, bool mask, const std::vector<ParamDecl>& d) {
  std::shared_ptr<const Program> p;
  try {
    p = mask ? compile_mask_mod(source, d, kHeads) : compile_score_mod(source, d, kHeads);
  } catch (const Error&) {
    return false;
  }
  const std::string canonical = p->canonical();
  std::shared_ptr<const Program> again;
  EXPECT_NO_THROW(again = mask ? compile_mask_mod(canonical, d, kHeads)
                               : compile_score_mod(canonical, d, kHeads))
      << source << "\n -> " << canonical;
  if (again) {
    EXPECT_EQ(again->canonical(), canonical) << source;
  }
  EXPECT_FALSE(p->functor_text.empty());
  EXPECT_NO_THROW(emit_cuda(*p, "DlFunctor", false)) << source;
  if (!mask) {
    EXPECT_NO_THROW(folded_constants(*p, 0.125f)) << source;
  }
  const int64_t positions[] = {0, 1, 6, 7, 100, 65535, kMaxPosition};
  for (int64_t h = 0; h < kHeads; ++h)
    for (int64_t q : positions)
      for (int64_t k : {int64_t(0), int64_t(5), q, kMaxPosition}) {
        expect_reads_inside(*p->root, *p, h, q, k);
        if (p->d_score) expect_reads_inside(*p->d_score, *p, h, q, k);
      }
  return true;
}

TEST(ScoreExprFuzz, RandomAndMutatedExpressionsCompileOrAreRefused) {
  Gen g{std::mt19937_64(20261129)};
  const std::vector<ParamDecl> d = decls();
  const auto start = std::chrono::steady_clock::now();
  int compiled = 0, refused = 0, n = 0;
  for (; n < 4000; ++n) {
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(3)) break;
    const bool mask = n % 3 == 2;
    std::string s = mask ? g.cond(1 + g.pick(4)) : g.real(1 + g.pick(5), true);
    if (n % 2 == 1) s = g.mutate(s);
    (check(s, mask, d) ? compiled : refused)++;
    if (HasFatalFailure()) return;
  }
  // The generator makes both kinds, and the loop ran long enough to mean something.
  EXPECT_GT(compiled, n / 10) << compiled << " of " << n;
  EXPECT_GT(refused, n / 20) << refused << " of " << n;
  EXPECT_GT(n, 300);
}

}  // namespace
}  // namespace driftless::layers::expr
