// The random expression generator of the expression fuzz tests (tests/layers/
// score_expr_fuzz_test.cpp, tests/nvrtc/emit_cuda_test.cpp): expressions from the grammar over
// the tables `bias` (heads, 7), `slope` (heads) and the scalar `t`, and byte-level mutations.
#pragma once
#include <cstdint>
#include <iterator>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "layers/attention/expr/expr.h"

namespace driftless::layers::expr {

constexpr int kFuzzHeads = 3;

// The declarations the generated expressions read, for kFuzzHeads heads.
inline std::vector<ParamDecl> fuzz_decls() {
  return {{"bias", {kFuzzHeads, 7}, std::vector<double>(kFuzzHeads * 7, 0.25), true},
          {"slope", {kFuzzHeads}, {0.5, 0.25, 0.125}, false},
          {"t", {}, {2.0}, true}};
}

struct ExprGen {
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

}  // namespace driftless::layers::expr
