// The mask classification the CUDA host skips tiles by (expr::mask_cover): against every pair
// of many random small boxes, it never says hidden (or visible) where one pair disagrees, and
// it proves the boxes of the common masks (windows, sinks, head masks) whole.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "layers/attention/expr/expr.h"

namespace driftless::layers::expr {
namespace {

constexpr int kHeads = 4;

std::vector<ParamDecl> decls() {
  return {{"slope", {kHeads}, {0.5, 0.25, 0.125, 0.0625}, false},
          {"width", {kHeads}, {3, 9, 17, 40}, false}};
}

// Every pair of the box under eval_bool: {some visible, some hidden}.
std::pair<bool, bool> brute(const Program& m, const PairBox& b) {
  const std::vector<ParamDecl> d = decls();
  std::vector<std::vector<double>> values;
  std::vector<const double*> ptrs;
  for (const ParamDecl& x : d) values.push_back(x.init);
  for (const auto& v : values) ptrs.push_back(v.data());
  Bindings<double> bind{ptrs.data(), 0};
  bool any_visible = false, any_hidden = false;
  for (int64_t h = b.h0; h <= b.h1; ++h)
    for (int64_t q = b.q0; q <= b.q1; ++q)
      for (int64_t k = b.k0; k <= b.k1; ++k)
        (eval_bool(*m.root, bind, 0.0, h, q, k) ? any_visible : any_hidden) = true;
  return {any_visible, any_hidden};
}

MaskCover cover(const std::string& src, PairBox b) {
  return mask_cover(*compile_mask_mod(src, decls(), kHeads), b);
}

TEST(MaskCover, NeverContradictsAPairOfTheBox) {
  const char* masks[] = {
      "q - k < 24 || k < 4",
      "h != 1 || q - k < 8",
      "k > 2",
      "q - k < 16 && q - k > -3",
      "abs(q - k) <= 5 || h == 0",
      "!(k >= 10 && k < 20)",
      "min(q, 30) - max(k, 2) >= 1",
      "clamp(q - k, 0, 15) < 12 || k * 2 == q",
      "where(h < 2, q - k, k - q) < 7",
      "q - k < width[h]",
      "slope[h] > 0.1 && q >= k",
      "q / 4.0 < k",
      "floor(q / 8.0) == floor(k / 8.0) || k < 3",
      "-k + 3 * q - h >= 2 * k",
      "clamp(k, 10, 20) != q",
  };
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> pos(0, 60), len(0, 12), head(0, kHeads - 1);
  int proven = 0, tried = 0;
  for (const char* src : masks) {
    const auto m = compile_mask_mod(src, decls(), kHeads);
    for (int t = 0; t < 400; ++t) {
      PairBox b;
      b.q0 = pos(rng), b.q1 = b.q0 + len(rng);
      b.k0 = pos(rng), b.k1 = b.k0 + len(rng);
      b.h0 = head(rng), b.h1 = std::min<int64_t>(kHeads - 1, b.h0 + head(rng));
      const MaskCover c = mask_cover(*m, b);
      const auto [visible, hidden] = brute(*m, b);
      ++tried;
      if (c == MaskCover::hidden) {
        ++proven;
        EXPECT_FALSE(visible) << src << " called hidden: q [" << b.q0 << ", " << b.q1 << "] k ["
                              << b.k0 << ", " << b.k1 << "] h [" << b.h0 << ", " << b.h1 << "]";
      }
      if (c == MaskCover::visible) {
        ++proven;
        EXPECT_FALSE(hidden) << src << " called visible: q [" << b.q0 << ", " << b.q1 << "] k ["
                             << b.k0 << ", " << b.k1 << "] h [" << b.h0 << ", " << b.h1 << "]";
      }
    }
  }
  // The check above means something only where the classification proves boxes.
  EXPECT_GT(proven, tried / 4);
}

TEST(MaskCover, ProvesTheCommonMasksTiles) {
  // A sliding window: a query tile far past a key tile sees none of it, near the diagonal all.
  EXPECT_EQ(cover("q - k < 256", {1024, 1087, 0, 127, 0, 3}), MaskCover::hidden);
  EXPECT_EQ(cover("q - k < 256", {1024, 1087, 960, 1023, 0, 3}), MaskCover::visible);
  EXPECT_EQ(cover("q - k < 256", {1024, 1087, 768, 895, 0, 3}), MaskCover::mixed);
  // Sinks: the first keys stay visible however far the query.
  EXPECT_EQ(cover("q - k < 24 || k < 4", {1024, 1087, 0, 3, 0, 3}), MaskCover::visible);
  EXPECT_EQ(cover("q - k < 24 || k < 4", {1024, 1087, 64, 127, 0, 3}), MaskCover::hidden);
  EXPECT_EQ(cover("q - k < 24 || k < 4", {1024, 1087, 0, 127, 0, 3}), MaskCover::mixed);
  // A head mask: proven per head range only.
  EXPECT_EQ(cover("h != 1 || q - k < 8", {100, 163, 0, 63, 1, 1}), MaskCover::hidden);
  EXPECT_EQ(cover("h != 1 || q - k < 8", {100, 163, 0, 63, 2, 3}), MaskCover::visible);
  EXPECT_EQ(cover("h != 1 || q - k < 8", {100, 163, 0, 63, 0, 3}), MaskCover::mixed);
  // Rows that see nothing.
  EXPECT_EQ(cover("k > 2", {0, 63, 0, 2, 0, 3}), MaskCover::hidden);
  // Reals and table entries are never proven (the kernels round them in float).
  EXPECT_EQ(cover("q / 4.0 < k", {1000, 1001, 0, 1, 0, 3}), MaskCover::mixed);
  EXPECT_EQ(cover("slope[h] > 10 && q - k < 4", {100, 101, 0, 1, 0, 3}), MaskCover::hidden);
  EXPECT_EQ(cover("slope[h] > 10 || q - k < 4", {100, 101, 0, 1, 0, 3}), MaskCover::mixed);
  EXPECT_THROW(cover("k > 2", {5, 4, 0, 1, 0, 0}), std::exception);
  EXPECT_THROW(mask_cover(*compile_score_mod("score", decls(), kHeads), {0, 1, 0, 1, 0, 0}),
               std::exception);
}

}  // namespace
}  // namespace driftless::layers::expr
