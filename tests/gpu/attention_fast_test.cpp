// The fast tensor-core attention kernels (layers/attention/cuda/fast/) against the
// float64 CPU reference, with FlashAttention's criterion (CONTRIBUTING.md): for out, lse, dq,
// dk and dv, the error of the CUDA bf16 result is at most 2x the error of the plain bf16
// reference, the same computation in bf16 (layers::attention_forward_bf16_operands: the CPU
// kernels on the same bf16 inputs, P and dS rounded to bf16 where they enter a product, as in
// the kernels and in FlashAttention's PyTorch reference). Covers the lengths of CONTRIBUTING.md,
// (q, k) length pairs such as (1, 147) and (1024, 1023), zero-length documents, GQA 4:1 and
// MQA, softcap, ALiBi, padding, sliding windows, head dims 64 and 128. Each CUDA call runs on
// NaN-poisoned memory and twice: the two results must be bitwise equal. Skips without a GPU. On a
// Hopper GPU with an sm_90a build this tests the wgmma kernels; ctest runs it a second time with
// DRIFTLESS_ATTN_WGMMA=0 (attention_fast_mma_sync) for the mma.sync kernels. At D = 128 the atomic
// mode's dK/dV kernel has two warpgroups (128 keys) and the deterministic one one: the bitwise
// check of dk and dv between the modes is what holds them to the same query steps.
//
// Error metric: max|t - r| / max|r| over the tensor. Bound: 2x the bf16 reference's error;
// for the LSE, which both compute in f32 (the reference's error ~1e-7), plus 1e-6 for the
// kernels' exp2 / log2 approximations. A masking or indexing error is O(1e-2) or more.
// Where the reference is exactly 0 everywhere (dq and dk of documents whose rows each see one
// key: dS = P (dP - delta) with dP == delta exactly), the kernels' fp32 dP (tensor-core sum)
// and delta (warp tree) round differently, so the bound is absolute: 1e-5.
// (A reference that kept P and dS in f32 and rounded only its results needed 5e-4 added to
// cover the kernels' bf16 operands, and the atomic dQ, whose dS is one bf16 rounding as in
// FlashAttention's kernels, exceeded even that on one problem.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/core/device_ops.h"
#include "engine/core/env.h"
#include "engine/core/tensor.h"
#include "layers/attention/attention.h"
#include "layers/attention/cuda/fast/fast_attention.h"
#include "tests/gpu/attention_check.h"
#include "tests/gpu/gpu_test_util.h"

namespace driftless {
namespace {

using namespace attention_check;

std::vector<Case> cases() {
  std::vector<Case> c;
  for (int64_t d : {64, 128}) {
    const std::string sd = "_d" + std::to_string(d);
    for (int64_t n : {1, 7, 63, 65, 113, 127, 129, 1023})
      c.push_back({"len" + std::to_string(n) + sd, {{n, n}}, 2, 1, d});
    for (auto [q, k] : std::vector<std::pair<int64_t, int64_t>>{
             {1, 1}, {1, 147}, {113, 203}, {128, 217}, {1023, 1024}, {1024, 1023}})
      c.push_back({"q" + std::to_string(q) + "_k" + std::to_string(k) + sd, {{q, k}}, 2, 1, d});
    c.push_back({"packed_zero_len" + sd,
                 {{5, 5}, {0, 0}, {63, 63}, {1, 1}, {0, 0}, {129, 129}, {0, 7}, {7, 7}},
                 4,
                 2,
                 d});
    c.push_back({"gqa4" + sd, {{65, 65}, {130, 200}}, 8, 2, d});
    c.push_back({"mqa" + sd, {{65, 65}, {130, 200}}, 4, 1, d});
    Case sc{"softcap30" + sd, {{129, 129}, {100, 230}}, 4, 1, d};
    sc.mod = Case::softcap;
    c.push_back(sc);
    Case sc3 = sc;
    sc3.name = "softcap3" + sd;
    sc3.cap = 3.0;
    c.push_back(sc3);
    Case al{"alibi" + sd, {{129, 129}, {100, 230}}, 4, 2, d};
    al.mod = Case::alibi;
    c.push_back(al);
    c.push_back({"padding" + sd,
                 {{7, 7, 3, 2}, {0, 0, 4, 4}, {65, 100, 5, 0}, {130, 130, 0, 9}, {1, 20, 2, 3}},
                 4,
                 2,
                 d});
    // The training layout (every document with q_len == k_len) with several documents, GQA,
    // padding between them and each modifier.
    c.push_back({"eq_docs_gqa" + sd,
                 {{5, 5}, {0, 0}, {63, 63}, {1, 1}, {129, 129}, {64, 64}, {200, 200}},
                 4,
                 2,
                 d});
    c.push_back({"eq_padding" + sd,
                 {{7, 7, 3, 3}, {0, 0, 4, 4}, {100, 100, 5, 5}, {130, 130, 0, 0}},
                 4,
                 2,
                 d});
    Case esc{"eq_softcap30" + sd, {{129, 129}, {230, 230}}, 4, 1, d};
    esc.mod = Case::softcap;
    c.push_back(esc);
    Case eal{"eq_alibi" + sd, {{129, 129}, {230, 230}}, 4, 2, d};
    eal.mod = Case::alibi;
    c.push_back(eal);
    c.push_back({"window_causal" + sd, {{1023, 1023}, {50, 200}}, 2, 1, d, true, 100});
    c.push_back({"window_lr" + sd, {{300, 300}, {50, 200}}, 2, 1, d, false, 70, 20});
    // Windows wider than any document (2^40 left, INT32_MAX right): no bound at all. The
    // dK/dV kernel's query range once wrapped these in 32 bits (dK/dV all zero).
    c.push_back(
        {"window_huge" + sd, {{300, 300}, {50, 200}}, 2, 1, d, false, int64_t(1) << 40, INT32_MAX});
    c.push_back({"noncausal" + sd, {{63, 40}, {170, 129}}, 2, 2, d, false});
  }
  c.push_back({"q4001_k4096_d64", {{4001, 4096}}, 1, 1, 64});
  // DRIFTLESS_ATTN_FAST_QUICK=1: only documents up to 300 rows; =2: a handful of odd shapes (for
  // compute-sanitizer memcheck and racecheck runs).
  if (const std::string quick_env = env_value("DRIFTLESS_ATTN_FAST_QUICK"); !quick_env.empty()) {
    const std::vector<std::string> few = {"len65_d64",   "q113_k203_d128", "packed_zero_len_d128",
                                          "padding_d64", "gqa4_d128",      "softcap30_d64",
                                          "alibi_d128",  "window_lr_d64"};
    std::vector<Case> quick;
    for (const Case& x : c) {
      const bool small = std::all_of(x.docs.begin(), x.docs.end(),
                                     [](const Doc& d) { return d.q <= 300 && d.k <= 300; });
      const bool listed = std::find(few.begin(), few.end(), x.name) != few.end();
      if (std::string(quick_env) == "2" ? listed : small) quick.push_back(x);
    }
    return quick;
  }
  return c;
}

TEST(AttentionFast, Bf16WithinTwiceTheCpuBf16Error) {
  DL_REQUIRE_GPU();
  uint64_t seed = 9001;
  double worst_ratio[5] = {0, 0, 0, 0, 0}, worst_err[5] = {0, 0, 0, 0, 0};
  double worst_plain[5] = {0, 0, 0, 0, 0};  // cuda error / bf16 reference error
  const std::vector<Case> all = cases();
  const std::vector<Problem> problems = make_all(all, seed);
  const std::vector<References> refs = references(problems);
  for (size_t n = 0; n < all.size(); ++n) {
    const Case& c = all[n];
    SCOPED_TRACE(c.name);
    const Problem& p = problems[n];
    const Result& ref = refs[n].f64;
    const Result& cpu = refs[n].bf16;
    const Result gpu = run(p, DType::bf16, Device::cuda);
    const Result gpu2 = run(p, DType::bf16, Device::cuda);
    std::printf("[attention fast] %-22s", c.name.c_str());
    for (int i = 0; i < 5; ++i) {
      bool zero_ref = false;
      const double ec = err(cpu.t[i], ref.t[i], kNames[i], &zero_ref);
      const double eg = err(gpu.t[i], ref.t[i], kNames[i], &zero_ref);
      const double bound = bound_of(i, ec, zero_ref);
      EXPECT_LE(eg, bound) << c.name << " " << kNames[i] << ": cuda bf16 error " << eg
                           << ", bf16 reference error " << ec;
      EXPECT_TRUE(same_bits(gpu.t[i], gpu2.t[i]))
          << c.name << " " << kNames[i] << " not bitwise repeatable";
      worst_err[i] = std::max(worst_err[i], eg);
      worst_ratio[i] = std::max(worst_ratio[i], eg / bound);
      if (!zero_ref && ec > 0) worst_plain[i] = std::max(worst_plain[i], eg / ec);
      std::printf(" %s %.2e/%.2e", kNames[i], eg, ec);
    }
    std::printf("\n");
    expect_padding(p, c, gpu);
  }
  for (int i = 0; i < 5; ++i)
    std::printf(
        "[attention fast] worst %s: error %.3g, error / bound %.3f, cuda / bf16-reference error "
        "%.2f\n",
        kNames[i], worst_err[i], worst_ratio[i], worst_plain[i]);
}

// q, k and v as the column blocks of one (T, (H + 2 H_kv) D) bf16 buffer on cuda, as the
// fused QKV product the model splits; forward and backward of p on them (p: T_q == T_k).
struct QkvRun {
  AttentionOutputs f;
  AttentionGrads g;
};
QkvRun run_qkv_layout(const Problem& p, const Case& c) {
  const int64_t t = p.q.size(0), H = c.heads, Hkv = c.kv_heads, D = c.head_dim;
  Tensor qkv = Tensor::zeros({t, (H + 2 * Hkv) * D}, DType::bf16, Device::cuda);
  Tensor q = qkv.narrow(1, 0, H * D).reshape({t, H, D});
  Tensor k = qkv.narrow(1, H * D, Hkv * D).reshape({t, Hkv, D});
  Tensor v = qkv.narrow(1, (H + Hkv) * D, Hkv * D).reshape({t, Hkv, D});
  q.copy_(p.q.to(Device::cuda, DType::bf16));
  k.copy_(p.k.to(Device::cuda, DType::bf16));
  v.copy_(p.v.to(Device::cuda, DType::bf16));
  AttentionOutputs f = layers::attention_forward(q, k, v, p.spec);
  AttentionGrads g = layers::attention_backward(q, k, v, p.spec, f.out, f.lse,
                                                p.dout.to(Device::cuda, DType::bf16));
  return {f, g};
}

// The non-deterministic backward (AttentionSpec::deterministic = false; on Hopper the dK/dV
// kernel then also sums dQ, with atomic adds): dq within the same criterion against the
// float64 reference, out, lse, dk and dv the deterministic call's bits (their sums do not
// change), padded rows zero. Cases of the training layout also run on one QKV buffer, whose
// dq rows are wider (dq within 1e-2 of the packed call: the adds' order differs).
TEST(AttentionFast, AtomicDqWithinTwiceTheCpuBf16Error) {
  DL_REQUIRE_GPU();
#ifdef DRIFTLESS_HAVE_CUDA  // fast:: exists in the CUDA build only
  std::printf("[attention fast] atomic dQ kernels %s\n",
              layers::gpu::fast::atomic_dq() ? "on" : "off (deterministic kernels run)");
#endif
  uint64_t seed = 9001;  // the problems of the deterministic test
  double worst = 0;
  const std::vector<Case> all = cases();
  std::vector<Problem> problems = make_all(all, seed);
  for (Problem& p : problems) p.spec.deterministic = false;
  const std::vector<References> refs = references(problems);
  for (size_t n = 0; n < all.size(); ++n) {
    const Case& c = all[n];
    SCOPED_TRACE(c.name);
    Problem p = problems[n];
    p.spec.deterministic = true;
    const Result det = run(p, DType::bf16, Device::cuda);
    p.spec.deterministic = false;
    const Result& ref = refs[n].f64;
    const Result& cpu = refs[n].bf16;
    const Result gpu = run(p, DType::bf16, Device::cuda);
    bool zero_ref = false;
    const double ec = err(cpu.t[2], ref.t[2], "dq", &zero_ref);
    const double eg = err(gpu.t[2], ref.t[2], "dq", &zero_ref);
    const double bound = bound_of(2, ec, zero_ref);
    EXPECT_LE(eg, bound) << "dq: cuda bf16 error " << eg << ", bf16 reference error " << ec;
    worst = std::max(worst, eg / bound);
    std::printf("[attention fast] atomic dQ %-22s dq %.2e / %.2e (bound %.2e)\n", c.name.c_str(),
                eg, ec, bound);
    for (int i : {0, 1, 3, 4})
      EXPECT_TRUE(same_bits(gpu.t[i], det.t[i])) << kNames[i] << " differs from deterministic";
    expect_padding(p, c, gpu);
    if (c.name.rfind("eq_", 0) != 0 || p.k.size(0) != p.q.size(0)) continue;
    const AttentionGrads g = run_qkv_layout(p, c).g;
    EXPECT_LE(err(g.dq.to(Device::cpu), gpu.t[2], "dq", &zero_ref), 1e-2) << "qkv layout dq";
    EXPECT_TRUE(same_bits(g.dk.to(Device::cpu), det.t[3])) << "qkv layout dk";
  }
  std::printf("[attention fast] atomic dQ: worst dq error / bound %.3f\n", worst);
}

// q, k and v as row views of wider tensors, as the model passes them (q: a column block of
// the fused QKV product; k and v: components of the K/V buffer's (T, 2, H_kv, D) rows). The
// kernels read such rows in place (16-byte aligned row strides) or from a packed copy (odd
// strides); either way the results must be the bits of the packed call.
TEST(AttentionFast, StridedInputsGiveThePackedBits) {
  DL_REQUIRE_GPU();
  uint64_t seed = 4242;
  for (const Case& c : cases()) {
    if (c.name != "gqa4_d64" && c.name != "padding_d128" && c.name != "softcap30_d64" &&
        c.name != "len1023_d64" && c.name != "eq_docs_gqa_d64" && c.name != "eq_padding_d128")
      continue;
    SCOPED_TRACE(c.name);
    const Problem p = make(c, seed += 10);
    const Result packed = run(p, DType::bf16, Device::cuda);
    const int64_t tq = p.q.size(0), tk = p.k.size(0), D = c.head_dim;
    for (int64_t extra : {int64_t(0), int64_t(8)}) {  // whole heads apart; 8 elements off
      SCOPED_TRACE("extra " + std::to_string(extra));
      Tensor wide = Tensor::zeros({tq, (c.heads + 1) * D + extra}, DType::bf16, Device::cuda);
      Tensor q = wide.narrow(1, D, c.heads * D).reshape({tq, c.heads, D});
      q.copy_(p.q.to(Device::cuda, DType::bf16));
      Tensor kv = Tensor::zeros({tk, 2, c.kv_heads, D}, DType::bf16, Device::cuda);
      Tensor k = kv.select(1, 0), v = kv.select(1, 1);
      k.copy_(p.k.to(Device::cuda, DType::bf16));
      v.copy_(p.v.to(Device::cuda, DType::bf16));
      EXPECT_FALSE(q.is_contiguous());
      Tensor dout = p.dout.to(Device::cuda, DType::bf16);
      AttentionOutputs f = layers::attention_forward(q, k, v, p.spec);
      AttentionGrads g = layers::attention_backward(q, k, v, p.spec, f.out, f.lse, dout);
      const Tensor got[5] = {f.out, f.lse, g.dq, g.dk, g.dv};
      for (int i = 0; i < 5; ++i)
        EXPECT_TRUE(same_bits(got[i].to(Device::cpu), packed.t[i])) << kNames[i];
    }
    if (tq != tk) continue;
    // q, k and v as the column blocks of one QKV product: the gradients come back as the
    // blocks of one buffer in the same layout (which the model's split joins without a copy).
    const int64_t H = c.heads, Hkv = c.kv_heads;
    const auto [f, g] = run_qkv_layout(p, c);
    EXPECT_TRUE(Tensor::joined({g.dq.reshape({tq, H * D}), g.dk.reshape({tk, Hkv * D}),
                                g.dv.reshape({tk, Hkv * D})},
                               1)
                    .defined())
        << "dq, dk, dv: the blocks of one gradient buffer";
    const Tensor got[5] = {f.out, f.lse, g.dq, g.dk, g.dv};
    for (int i = 0; i < 5; ++i)
      EXPECT_TRUE(same_bits(got[i].to(Device::cpu), packed.t[i])) << "qkv layout " << kNames[i];
  }
}

}  // namespace
}  // namespace driftless
