// The CUDA source expression modifiers emit (expr::emit_cuda) compiles with NVRTC to PTX:
// no GPU needed, built only where the CUDA toolkit is found (CI machines have none), and a
// test skips itself when NVRTC cannot be loaded.
#include <gtest/gtest.h>
#include <nvrtc.h>

#include <string>
#include <vector>

#include "engine/core/error.h"
#include "layers/attention/expr/expr.h"
#include "tests/expr_fuzz_gen.h"

namespace driftless::layers::expr {
namespace {

// NVRTC's log on failure, "" on success.
std::string compile(const std::string& src) {
  nvrtcProgram prog;
  if (nvrtcCreateProgram(&prog, src.c_str(), "mod.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS)
    return "nvrtcCreateProgram failed";
  const char* opts[] = {"--gpu-architecture=compute_80", "-std=c++17"};
  const nvrtcResult r = nvrtcCompileProgram(prog, 2, opts);
  size_t n = 0;
  nvrtcGetProgramLogSize(prog, &n);
  std::string log(n, '\0');
  nvrtcGetProgramLog(prog, log.data());
  size_t ptx = 0;
  if (r == NVRTC_SUCCESS) nvrtcGetPTXSize(prog, &ptx);
  nvrtcDestroyProgram(&prog);
  if (r != NVRTC_SUCCESS) return "NVRTC: " + log;
  return ptx > 0 ? "" : "empty PTX";
}

// A kernel that instantiates every member so the device code is really generated; param_grad
// hands its entries to an accumulator (the kernels' is cuda/fast/param_grad.cuh), here a
// plain add at table t's offset in the flat gradient (grad_table).
std::string with_kernel(const std::string& functor, const std::string& name, bool mask,
                        bool params) {
  std::string k = functor;
  if (params)
    k += "struct ProbeAcc {\n  float* g;\n"
         "  __device__ void add(int t, long long e, float ds, float d) {\n"
         "    long long offset, numel, per_head;\n"
         "    " +
         name +
         "::grad_table(t, offset, numel, per_head);\n"
         "    g[offset + e] += ds * d;\n  }\n};\n";
  k += "extern \"C\" __global__ void probe(" + name +
       " m, float* out, float* grad) {\n  const int i = threadIdx.x;\n";
  if (mask)
    k += "  out[i] = m.visible(0, i % 4, i, i / 2) ? 1.f : 0.f;\n";
  else
    k += "  out[i] = m.value(out[i], 0, i % 4, i, i / 2) + m.derivative(out[i], 0, i % 4, i, 3);\n"
         "  " +
         name +
         "::Bound bd;\n  m.bind_into(bd, i % 4);\n"
         "  out[i] += m.value_log2(out[i], 0.125f, 0, i % 4, i, i / 2, &bd) +\n"
         "            m.derivative_dot(out[i], 0.125f, 0, i % 4, i, 3, &bd);\n";
  if (params)
    k += "  ProbeAcc acc{grad};\n  m.param_grad(1.f, out[i], 0, i % 4, i, i / 2, acc);\n"
         "  static_assert(" +
         name + "::kHasParamGrad, \"learnable\");\n";
  return k + "}\n";
}

TEST(EmitCuda, EmittedFunctorsCompileWithNvrtc) {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) GTEST_SKIP() << "NVRTC is not usable";
  // The probe notices broken source (an undefined name), so a pass below means something.
  ASSERT_NE(compile("extern \"C\" __global__ void probe(float* o) { o[0] = nope; }\n"), "");
  std::vector<ParamDecl> d{{"slope", {4}, {0.5, 0.25, 0.125, 0.0625}, false},
                           {"bias", {4, 16}, std::vector<double>(64, 0.0), true},
                           {"temp", {}, {1.5}, true}};
  const char* scores[] = {
      "30 * tanh(score / 30)", "score - slope[h] * abs(q - k)",
      "temp * score + bias[h, clamp(where(q - k < 8, q - k, 8 + int(log((q - k) / 8.0) / "
      "log(16.0) * 8)), 0, 15)]",
      "where(q - k > 3 && h != 2, sqrt(1 + pow(score, 2)) / sigmoid(score), min(exp(score), "
      "max(-score, 1.5)))",
      "clamp(score, -5, 5) + floor(q / 3.0) - ceil(k / 2.0) + round(0.5 * h)",
      // Values that may be -inf: returned NaN there (expr::may_be_minus_inf)
      "score + log(q - k + 0.0)", "log(sigmoid(score)) - exp(temp * score)",
      // int() saturated to 32 bits (dl_index) in 32-bit and in 64-bit integer arithmetic
      "score + bias[h, clamp(int(q * 0.5), 0, 15)] + (int(k * 1e10) - 7) * (q - k) * 1e-9"};
  for (const char* s : scores)
    for (bool members : {false, true}) {
      auto p = compile_score_mod(s, d, 4);
      const std::string src = emit_cuda(*p, "UserMod", members);
      EXPECT_EQ(compile(with_kernel(src, "UserMod", false, p->param_count > 0)), "") << s << "\n"
                                                                                     << src;
    }
  // Masks as the attention kernels take them (fast::ModExpr's second functor): tables, learnable
  // ones too (the mask only reads them), integer and real arithmetic, literals by slot or inline.
  const char* masks[] = {
      "k < 64 || q - k < 256 && h != 1 && slope[h] > 0.1",
      "q - k < 24 || k < 4",
      "h != 1 || q - k < 8",
      "k > 2",
      "!(abs(q - k) > 5) || where(h < 2, q, k) == min(q, 3 * k) || bias[h, 3] > temp",
      "floor(q / 64.0) == floor(k / 64.0) && clamp(q - k, 0, 15) < 12"};
  for (const char* mask : masks)
    for (bool members : {false, true}) {
      auto m = compile_mask_mod(mask, d, 4);
      const std::string src = emit_cuda(*m, "UserMask", members);
      EXPECT_EQ(compile(with_kernel(src, "UserMask", true, false)), "") << mask << "\n" << src;
    }
}

// Random expressions of the fuzz generator that compile also compile with NVRTC: the
// emitter's 32- and 64-bit integer arithmetic, dl_index and the helpers' templates agree on
// types for any mix (seeded; 60 programs, so it stays within seconds).
TEST(EmitCuda, RandomExpressionsCompileWithNvrtc) {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) GTEST_SKIP() << "NVRTC is not usable";
  ExprGen g{std::mt19937_64(57)};
  const std::vector<ParamDecl> d = fuzz_decls();
  int compiled = 0;
  for (int n = 0; n < 1000 && compiled < 60; ++n) {
    const bool mask = n % 3 == 2;
    const std::string s = mask ? g.cond(2 + g.pick(3)) : g.real(2 + g.pick(4), true);
    std::shared_ptr<const Program> p;
    try {
      p = mask ? compile_mask_mod(s, d, kFuzzHeads) : compile_score_mod(s, d, kFuzzHeads);
    } catch (const Error&) {
      continue;
    }
    ++compiled;
    const std::string src = emit_cuda(*p, "UserMod", n % 2 == 0);
    EXPECT_EQ(compile(with_kernel(src, "UserMod", mask, !mask && p->param_count > 0)), "")
        << s << "\n"
        << src;
  }
  EXPECT_EQ(compiled, 60);
}

}  // namespace
}  // namespace driftless::layers::expr
