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
#include "tests/expr_fuzz_gen.h"

namespace driftless::layers::expr {
namespace {

constexpr int kHeads = kFuzzHeads;

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
  ExprGen g{std::mt19937_64(20261129)};
  const std::vector<ParamDecl> d = fuzz_decls();
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
