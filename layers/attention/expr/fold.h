// Constant folding of the CUDA emitter (emit_cuda.cpp): the factors of a product chain, and
// how the host computes a chain's folded constant in IEEE float (the kernels read it as a
// kernel argument). Internal to the expression compiler.
#pragma once
#include <vector>

#include "layers/attention/expr/expr.h"

namespace driftless::layers::expr::detail {

// A real constant: literals and arithmetic of literals (no score, index or table).
bool is_const(const Node& n);

// One factor of a product chain: a constant (multiplying, or dividing), the score, or any
// other subexpression.
struct Factor {
  enum Kind { mul_const, div_const, score, other } kind;
  const Node* n;
};
// The factors of n in order (products flattened, divisions by a constant as div_const).
void collect_factors(const Node& n, std::vector<Factor>& out);

constexpr const char* kLog2eText = "1.4426950408889634f";
constexpr const char* kTwoLog2eText = "2.8853900817779268f";
constexpr float kLog2e = 1.4426950408889634f, kTwoLog2e = 2.8853900817779268f;

// How the host computes a folded constant: from `start` (or 1), times the softmax scale and
// the constant factors, divided by the constant divisors, in order.
struct FoldStep {
  enum Kind { start, scale, mul, div } kind;
  float value = 0;          // start
  const Node* n = nullptr;  // mul, div: a constant subexpression
};
using FoldRecipe = std::vector<FoldStep>;

// A constant in float as the kernels read it (c[slot] = float(value); an integer literal
// made real from its int), each operation rounded as the emitted __f*_rn would.
float const_value(const Node& n);
// The folded constant of a recipe for a call of softmax scale `scale`.
float run_recipe(const FoldRecipe& r, float scale);

}  // namespace driftless::layers::expr::detail
