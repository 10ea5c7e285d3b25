// The tiled CPU kernels against the dense float64 reference (CONTRIBUTING.md tier 3) over
// lengths that straddle every tile boundary (tiles are 32 query rows x 64 keys), packed
// documents including empty ones, a past (k longer than q), GQA/MQA, head dims and
// windows. fp32 must be within 1e-5 (max-norm relative error), f64 within 1e-12.
#include <gtest/gtest.h>

#include "layers/attention/mask.h"
#include "tests/layers/attention_test_util.h"

namespace driftless::testing {
namespace {

constexpr double kTolF32 = 1e-5;
constexpr double kTolF64 = 1e-12;

void check_both(const Case& c) {
  expect_matches_reference(c, DType::f32, kTolF32);
  expect_matches_reference(c, DType::f64, kTolF64);
}

TEST(AttentionLengths, SingleDocumentEveryLength) {
  for (int64_t n : {1, 7, 63, 65, 113, 127, 129})
    for (bool causal : {true, false}) {
      Case c;
      c.docs = {{n, n}};
      c.causal = causal;
      c.seed = uint64_t(n);
      check_both(c);
    }
}

TEST(AttentionLengths, Length1023) {
  Case c;
  c.docs = {{1023, 1023}};
  c.heads = 1;
  c.kv_heads = 1;
  c.head_dim = 32;
  expect_matches_reference(c, DType::f32, kTolF32);
}

TEST(AttentionLengths, PackedDocumentsWithEmptyOnes) {
  Case c;
  c.docs = {{7, 7}, {0, 0}, {63, 63}, {1, 1}, {65, 65}, {0, 0}, {113, 113}, {0, 0}};
  check_both(c);
  c.causal = false;
  c.seed = 2;
  check_both(c);
}

TEST(AttentionLengths, PastKeysLongerThanQueries) {
  Case c;
  // The micro-sequence shape: each document's queries are the last rows of its keys.
  c.docs = {{5, 70}, {64, 129}, {1, 127}, {7, 7}, {33, 1023 - 70 - 129 - 127 - 7}};
  check_both(c);
}

TEST(AttentionLengths, RowsThatSeeNoKey) {
  Case c;
  // More queries than keys: under bottom-right causal alignment the first 7 rows of
  // (10, 3) see nothing; (4, 0) has queries but no keys, (0, 5) keys but no queries.
  c.docs = {{10, 3}, {4, 0}, {0, 5}, {9, 9}};
  check_both(c);
}

TEST(AttentionLengths, GroupedQueryAttention) {
  for (auto [h, hkv] : std::vector<std::pair<int64_t, int64_t>>{{4, 4}, {4, 2}, {8, 2}, {3, 1}}) {
    Case c;
    c.docs = {{65, 65}, {7, 40}, {0, 3}};
    c.heads = h;
    c.kv_heads = hkv;
    c.head_dim = 16;
    c.seed = uint64_t(h * 10 + hkv);
    check_both(c);
  }
}

TEST(AttentionLengths, HeadDims) {
  for (int64_t d : {32, 64, 80, 128}) {
    Case c;
    c.docs = {{129, 129}, {30, 63}};
    c.head_dim = d;
    c.seed = uint64_t(d);
    expect_matches_reference(c, DType::f32, kTolF32);
  }
  Case c;
  c.docs = {{127, 200}};
  c.head_dim = 80;
  expect_matches_reference(c, DType::f64, kTolF64);
}

TEST(AttentionLengths, SlidingWindows) {
  struct W {
    bool causal;
    int64_t left, right;
  };
  for (W w : {W{true, 16, -1}, W{true, 0, -1}, W{false, 5, 3}, W{false, -1, 0}, W{false, 70, 70},
              W{false, 0, 0}}) {
    Case c;
    c.docs = {{129, 129}, {20, 100}, {1, 1}};
    c.causal = w.causal;
    c.window_left = w.left;
    c.window_right = w.right;
    c.seed = uint64_t(w.left * 7 + w.right + 3);
    check_both(c);
  }
}

TEST(AttentionLengths, CustomSoftmaxScale) {
  Case c;
  c.docs = {{65, 65}};
  c.scale = 0.37;
  check_both(c);
}

// The CUDA kernels compute visible key ranges in 32 bits with windows clamped by
// window_in_32_bits: the same ranges as in 64 bits, for windows past the document and for
// documents with more queries than keys (negative query positions), up to lengths near the
// kernels' limit (fast_attention.h kMaxDocLen = 2^29).
TEST(AttentionLengths, VisibleKeysIn32BitsMatch64Bits) {
  const int64_t big = (int64_t(1) << 29) - 1;
  const std::vector<std::pair<int64_t, int64_t>> docs = {
      {1, 1}, {5, 3}, {3, 5}, {64, 64}, {113, 203}, {203, 113}, {big, big}, {big, 7}, {7, big}};
  const std::vector<int64_t> windows = {-1, 0, 1, 2, 63, 200, int64_t(1) << 40, INT64_MAX};
  for (const auto& [n_q, n_k] : docs)
    for (const bool causal : {false, true})
      for (const int64_t wl : windows)
        for (const int64_t wr : windows)
          for (const int64_t i : {int64_t(0), n_q / 2, n_q - 1}) {
            int64_t lo64, hi64;
            layers::visible_keys(i, n_q, n_k, causal, wl, wr, &lo64, &hi64);
            // A window wider than the document bounds nothing (no overflow near INT64_MAX).
            int64_t lo_open, hi_open;
            layers::visible_keys(i, n_q, n_k, causal, wl >= n_q + n_k ? -1 : wl,
                                 wr >= n_q + n_k ? -1 : wr, &lo_open, &hi_open);
            EXPECT_EQ(lo64, lo_open) << n_q << " " << n_k << " " << i << " " << wl << " " << wr;
            EXPECT_EQ(hi64, hi_open) << n_q << " " << n_k << " " << i << " " << wl << " " << wr;
            int lo32, hi32;
            layers::visible_key_range<int>(int(i), int(n_q), int(n_k), causal,
                                           layers::window_in_32_bits(wl, n_q, n_k),
                                           layers::window_in_32_bits(wr, n_q, n_k), &lo32, &hi32);
            // Empty ranges need only stay empty.
            if (lo64 > hi64) {
              EXPECT_GT(lo32, hi32) << n_q << " " << n_k << " " << i << " " << wl << " " << wr;
              continue;
            }
            EXPECT_EQ(lo32, lo64) << n_q << " " << n_k << " " << i << " " << wl << " " << wr;
            EXPECT_EQ(hi32, hi64) << n_q << " " << n_k << " " << i << " " << wl << " " << wr;
          }
}

}  // namespace
}  // namespace driftless::testing
