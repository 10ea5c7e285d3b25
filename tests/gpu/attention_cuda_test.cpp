// Backends agree (CONTRIBUTING.md tier 2) for the varlen attention op: the CUDA kernels
// (layers/attention/cuda/) against the CPU kernels through attention_forward /
// attention_backward, for out, lse, dq, dk, dv, on odd lengths, packed documents with
// zero-length ones, a K past, GQA/MQA, several head dims, causal and windows, softcap,
// ALiBi and padding. Outputs come from NaN-poisoned cache blocks; CUDA runs twice and must
// repeat bit for bit. Skips when no GPU is present.
//
// Tolerances. f32: both backends do the same fp32 operations per element but sum in another
// order (the CPU's 64-key tiles vs 128-key tiles with tree sums for the softmax
// denominator, FMA contraction on the GPU, device expf/tanhf within 2 ulp); over at most
// ~4k terms that is a few 1e-7 of the tensor's scale, so 1e-5 of max|cpu| leaves a margin
// of ~10 and still catches any masking or indexing error (those are O(1)). bf16: the
// FlashAttention criterion of CONTRIBUTING.md: against an f64 reference on the same
// bf16-rounded inputs, the CUDA error is at most 2x the CPU bf16 path's error (the same
// computation: f32 on bf16 inputs, rounded once), plus 1e-6 for the LSE, which both
// compute in f32 and whose bf16 reference error can itself be ~1e-7.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/core/device_ops.h"
#include "engine/core/tensor.h"
#include "layers/attention/attention.h"
#include "layers/attention/replay.h"
#include "tests/gpu/attention_check.h"
#include "tests/gpu/gpu_test_util.h"

namespace driftless {
namespace {

using attention_check::Case;
using attention_check::kNames;
using attention_check::make;
using attention_check::Problem;
using attention_check::Result;
using attention_check::run;
using attention_check::same_bits;
using layers::ScoreModSpec;

// max|t - r| / max|r| over finite entries; -inf must match exactly, NaN fails (returns inf).
double rel_err(const Tensor& t, const Tensor& r, const std::string& what) {
  const auto tv = t.to_vector<double>(), rv = r.to_vector<double>();
  EXPECT_EQ(tv.size(), rv.size()) << what;
  double num = 0, den = 0;
  for (size_t i = 0; i < rv.size(); ++i) {
    if (std::isnan(tv[i])) return INFINITY;
    if (std::isinf(rv[i]) || std::isinf(tv[i])) {
      EXPECT_EQ(tv[i], rv[i]) << what << " element " << i;
      continue;
    }
    num = std::max(num, std::abs(tv[i] - rv[i]));
    den = std::max(den, std::abs(rv[i]));
  }
  return den > 0 ? num / den : num;
}

// Wherever the CPU wrote an exact 0 (padded rows, rows that see no key, keys no query
// sees), the CUDA result must be an exact 0 too.
void expect_zeros_match(const Tensor& t, const Tensor& r, const std::string& what) {
  const auto tv = t.to_vector<double>(), rv = r.to_vector<double>();
  int64_t bad = 0;
  for (size_t i = 0; i < rv.size(); ++i)
    if (rv[i] == 0 && tv[i] != 0) ++bad;
  EXPECT_EQ(bad, 0) << what << ": elements that must be exactly 0 are not";
}

std::vector<Case> cases() {
  std::vector<Case> c;
  for (int64_t n : {1, 7, 63, 65, 129, 1023}) c.push_back({"len" + std::to_string(n), {{n, n}}});
  c.push_back({"packed_zero_len", {{5, 5}, {0, 0}, {63, 63}, {1, 1}, {0, 0}, {129, 129}, {7, 7}}});
  c.push_back({"past", {{7, 20}, {65, 200}, {30, 30}, {1, 147}}});
  for (int64_t kv : {4, 2, 1})
    c.push_back({"gqa_h4_kv" + std::to_string(kv), {{65, 65}, {33, 90}}, 4, kv});
  c.push_back({"mqa_h8", {{65, 65}, {33, 90}}, 8, 1});
  for (int64_t d : {32, 80, 128})
    c.push_back({"d" + std::to_string(d), {{63, 63}, {70, 129}}, 2, 1, d});
  c.push_back({"noncausal", {{63, 40}, {70, 129}}, 2, 2, 64, false});
  c.push_back({"causal_window", {{129, 129}, {50, 200}}, 2, 1, 64, true, 16});
  c.push_back({"window_lr", {{129, 129}, {50, 200}}, 2, 1, 64, false, 10, 5});
  Case sc{"softcap", {{65, 65}, {40, 129}}, 4, 2};
  sc.mod = Case::softcap;
  sc.cap = 3.0;
  c.push_back(sc);
  Case al{"alibi", {{65, 65}, {40, 129}}, 4, 2};
  al.mod = Case::alibi;
  c.push_back(al);
  Case al2 = al;
  al2.name = "alibi_noncausal";
  al2.causal = false;
  c.push_back(al2);
  c.push_back({"padding", {{7, 7, 3, 2}, {0, 0, 4, 4}, {65, 100, 5, 0}, {30, 30, 0, 9}}, 4, 2});
  c.push_back({"padding_k_longer_than_q", {{1, 20, 2, 3}, {17, 17, 1, 1}}, 2, 1, 80});
  return c;
}

TEST(AttentionCuda, F32MatchesCpu) {
  DL_REQUIRE_GPU();
  uint64_t seed = 1234;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Problem p = make(c, seed += 10, /*bf16_values=*/false);
    const Result r = run(p, DType::f32, Device::cpu);
    const Result t = run(p, DType::f32, Device::cuda);
    const Result t2 = run(p, DType::f32, Device::cuda);
    double worst = 0;
    for (int i = 0; i < 5; ++i) {
      const double e = rel_err(t.t[i], r.t[i], kNames[i]);
      worst = std::max(worst, e);
      EXPECT_LE(e, 1e-5) << c.name << " " << kNames[i];
      if (i != 1) expect_zeros_match(t.t[i], r.t[i], c.name + " " + kNames[i]);
      EXPECT_TRUE(same_bits(t.t[i], t2.t[i]))
          << c.name << " " << kNames[i] << " not bitwise repeatable";
    }
    std::printf("[attention cuda f32] %-26s max rel err %.3g\n", c.name.c_str(), worst);
  }
}

TEST(AttentionCuda, Bf16WithinTwiceTheCpuBf16Error) {
  DL_REQUIRE_GPU();
  uint64_t seed = 777;
  for (const Case& c : cases()) {
    if (c.name == "len1" || c.name == "len7" || c.name == "len63") continue;
    SCOPED_TRACE(c.name);
    // The reference sees the bf16-rounded inputs: only the computation's error is compared.
    const Problem p = make(c, seed += 10);
    const Result ref = run(p, DType::f64, Device::cpu);
    const Result cpu = run(p, DType::bf16, Device::cpu);
    const Result gpu = run(p, DType::bf16, Device::cuda);
    const Result gpu2 = run(p, DType::bf16, Device::cuda);
    for (int i = 0; i < 5; ++i) {
      const double ec = rel_err(cpu.t[i], ref.t[i], kNames[i]);
      const double eg = rel_err(gpu.t[i], ref.t[i], kNames[i]);
      EXPECT_LE(eg, 2 * ec + (i == 1 ? 1e-6 : 0.0))
          << c.name << " " << kNames[i] << ": cuda bf16 error " << eg << ", cpu bf16 error " << ec;
      if (i != 1) expect_zeros_match(gpu.t[i], cpu.t[i], c.name + " " + kNames[i]);
      EXPECT_TRUE(same_bits(gpu.t[i], gpu2.t[i]))
          << c.name << " " << kNames[i] << " not bitwise repeatable";
      if (i == 0 || i == 3)
        std::printf("[attention cuda bf16] %-26s %s err cuda %.3g cpu %.3g\n", c.name.c_str(),
                    kNames[i], eg, ec);
    }
  }
}

TEST(AttentionCuda, UnsupportedInputsFailClearly) {
  DL_REQUIRE_GPU();
  Case c{"relpos", {{9, 9}}};
  Problem p = make(c, 5);
  p.spec.score_mod = ScoreModSpec::make_relative_position(Tensor::zeros({2, 9}), 4);
  Tensor q = p.q.to(Device::cuda), k = p.k.to(Device::cuda), v = p.v.to(Device::cuda);
  try {
    layers::attention_forward(q, k, v, p.spec);
    FAIL() << "relative-position on cuda did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not on cuda yet"), std::string::npos) << e.what();
  }
  EXPECT_THROW(layers::attention_forward(q, p.k, v, make(c, 5).spec), Error);  // mixed devices
}

}  // namespace
}  // namespace driftless

namespace driftless {
namespace {
// `driftless attention --device cuda`: the replay of a dumped call on cuda equals the CPU
// replay within the f32 tolerance of this file.
TEST(AttentionCuda, ReplayOnCudaMatchesCpu) {
  DL_REQUIRE_GPU();
  layers::AttentionCall call;
  call.q = Tensor::randn({40, 4, 32}, 1);
  call.k = Tensor::randn({40, 2, 32}, 2);
  call.v = Tensor::randn({40, 2, 32}, 3);
  call.d_out = Tensor::randn({40, 4, 32}, 4);
  call.spec = layers::AttentionSpec::from_lengths({7, 0, 33}, {7, 0, 33}, true);
  auto cpu = layers::replay_attention(call, "cpu");
  auto gpu = layers::replay_attention(call, "cuda");
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    ASSERT_EQ(cpu[i].first, gpu[i].first);
    auto a = cpu[i].second.to_vector<double>(), b = gpu[i].second.to_vector<double>();
    ASSERT_EQ(a.size(), b.size());
    for (size_t j = 0; j < a.size(); ++j) {
      if (std::isfinite(a[j]) || std::isfinite(b[j])) {
        EXPECT_NEAR(a[j], b[j], 1e-5 * (1 + std::abs(a[j]))) << cpu[i].first << "[" << j << "]";
      }
    }
  }
}
}  // namespace
}  // namespace driftless
