// The run-time compiled attention kernels of score expressions (layers/attention/jit/) built
// to CUBIN with NVRTC for every kernel variant, on a machine with the toolkit and no GPU; and
// the cache keys: equal exactly when the compiled kernel is the same.
#include "layers/attention/jit/attention_program.h"

#include <gtest/gtest.h>
#include <nvrtc.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <set>
#include <string>
#include <vector>

#include "layers/attention/jit/kernel_headers.h"
#include "layers/attention/jit/nvrtc_compile.h"

namespace driftless::layers::jit {
namespace {

using expr::ParamDecl;

std::vector<ParamDecl> decls() {
  std::vector<double> bias(4 * 16);
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = 0.01 * double(i);
  return {{"slope", {4}, {0.5, 0.25, 0.125, 0.0625}, false}, {"bias", {4, 16}, bias, false}};
}

std::shared_ptr<const expr::Program> score(const std::string& s) {
  return expr::compile_score_mod(s, decls(), 4);
}

const char* kSoftcap = "30 * tanh(score / 30)";
const char* kAlibi = "score - slope[h] * abs(q - k)";
const char* kT5 =
    "score + bias[h, clamp(where(q - k < 8, q - k, 8 + int(log((q - k) / 8.0) / log(16.0) * "
    "8)), 0, 15)]";
const char* kCausalOnly = "score * (1 + 0.02 * sqrt(q - k)) + 0.2 * log(q - k + 1)";
const char* kWhere = "where(q >= k && h != 2, score - 0.5 * sqrt(q - k), score / 2)";

// A learnable per-head bias by distance (the GPU tests' table) and, with it, a learnable
// scalar read by every head (a table the dK/dV CTA keeps whole).
std::vector<ParamDecl> learnable_decls() {
  return {{"bias", {4, 64}, std::vector<double>(4 * 64, 0.0), true},
          {"temp", {}, {1.0}, true},
          {"slope", {4}, {0.5, 0.25, 0.125, 0.0625}, false}};
}
const char* kLearnBias = "score + bias[h, min(abs(q - k), 63)]";
const char* kLearnTwo = "temp * score + bias[h, min(abs(q - k), 63)] - slope[h] * abs(q - k)";
std::shared_ptr<const expr::Program> learnable(const std::string& s) {
  return expr::compile_score_mod(s, learnable_decls(), 4);
}

bool nvrtc_usable() {
  int major = 0, minor = 0;
  return nvrtcVersion(&major, &minor) == NVRTC_SUCCESS;
}

// Masks: a window with sinks reading a table, and a head mask (run alone, with the identity).
const char* kSinks = "q - k < 24 || k < 4 && slope[h] > 0.1";
const char* kHeadMask = "h != 1 || q - k < 8";
std::shared_ptr<const expr::Program> mask(const std::string& s) {
  return expr::compile_mask_mod(s, decls(), 4);
}

// "" on success, else the error. An empty expression with a mask: the mask alone.
std::string try_compile(const std::string& expression, const ProgramSpec& spec,
                        const std::string& mask_source = "") {
  try {
    const bool learn = expression == kLearnBias || expression == kLearnTwo;
    const auto m = mask_source.empty() ? nullptr
                   : learn             ? expr::compile_mask_mod(mask_source, learnable_decls(), 4)
                                       : mask(mask_source);
    const auto s = expression.empty() ? identity_score(*m)
                                      : (learn ? learnable(expression) : score(expression));
    const AttentionProgram p = make_program(*s, spec, m.get());
    const CompiledProgram c = compile_program(p);
    if (c.lowered.size() != p.kernels.size()) return "lowered names missing";
    for (const std::string& l : c.lowered)  // the ELF's symbol table names each kernel
      if (l.empty() || c.cubin.find(l) == std::string::npos) return "kernel " + l + " missing";
    if (c.cubin.size() < 1000) return "CUBIN too small";
    const CompiledProgram back = from_binary(to_binary(c));
    if (back.lowered != c.lowered || back.cubin != c.cubin) return "binary round trip";
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

ProgramSpec spec(Pass pass, int d, bool wgmma, const char* arch) {
  return ProgramSpec{pass, d, wgmma, arch};
}

struct Case {
  std::string expression;
  ProgramSpec spec;
  std::string mask = "";
};

// Compiles the cases two at a time (the machines that run this have few cores).
void compile_all(const std::vector<Case>& cases) {
  for (size_t i = 0; i < cases.size(); i += 2) {
    std::vector<std::future<std::string>> runs;
    for (size_t j = i; j < cases.size() && j < i + 2; ++j)
      runs.push_back(std::async(std::launch::async, try_compile, cases[j].expression, cases[j].spec,
                                cases[j].mask));
    for (size_t j = 0; j < runs.size(); ++j) {
      const Case& c = cases[i + j];
      EXPECT_EQ(runs[j].get(), "")
          << c.expression << " mask " << c.mask << " " << pass_name(c.spec.pass) << " D "
          << c.spec.head_dim << (c.spec.wgmma ? " wgmma " : " mma ") << c.spec.arch;
    }
  }
}

TEST(AttentionJit, EveryKernelVariantCompilesToCubin) {
  if (!nvrtc_usable()) GTEST_SKIP() << "NVRTC is not usable";
  std::vector<Case> cases;
  for (int d : {64, 128}) {
    cases.push_back({kSoftcap, spec(Pass::forward, d, false, "sm_80")});
    cases.push_back({kSoftcap, spec(Pass::forward, d, false, "sm_90a")});
    cases.push_back({kSoftcap, spec(Pass::forward, d, true, "sm_90a")});
    cases.push_back({kSoftcap, spec(Pass::backward, d, false, "sm_80")});
    cases.push_back({kSoftcap, spec(Pass::backward, d, true, "sm_90a")});
    cases.push_back({kSoftcap, spec(Pass::backward_atomic, d, true, "sm_90a")});
  }
  compile_all(cases);
}

TEST(AttentionJit, ExpressionsWithTablesAndBranchesCompile) {
  if (!nvrtc_usable()) GTEST_SKIP() << "NVRTC is not usable";
  std::vector<Case> cases;
  for (const char* e : {kAlibi, kT5, kWhere, kCausalOnly}) {
    cases.push_back({e, spec(Pass::forward, 128, true, "sm_90a")});
    cases.push_back({e, spec(Pass::forward, 64, false, "sm_80")});
    cases.push_back({e, spec(Pass::backward_atomic, 64, true, "sm_90a")});
    cases.push_back({e, spec(Pass::backward, 128, false, "sm_80")});
  }
  compile_all(cases);
}

// Masks in every pass and head dim of both kernel families: with a score expression, and alone
// (the identity score).
TEST(AttentionJit, MasksCompileInEveryPass) {
  if (!nvrtc_usable()) GTEST_SKIP() << "NVRTC is not usable";
  std::vector<Case> cases;
  for (int d : {64, 128}) {
    for (Pass pass : {Pass::forward, Pass::backward, Pass::backward_atomic}) {
      cases.push_back({kAlibi, spec(pass, d, true, "sm_90a"), kSinks});
      cases.push_back({"", spec(pass, d, true, "sm_90a"), kHeadMask});
    }
    cases.push_back({kSoftcap, spec(Pass::forward, d, false, "sm_80"), kHeadMask});
    cases.push_back({"", spec(Pass::backward, d, false, "sm_80"), kSinks});
  }
  // A learnable score table with a mask: the mask gates the table's gradient too.
  cases.push_back({kLearnBias, spec(Pass::backward, 64, true, "sm_90a"), "q - k < 24 || k < 4"});
  // Programs for calls that shift document 0's positions (DL_DOC_SHIFT).
  for (Pass pass : {Pass::forward, Pass::backward}) {
    ProgramSpec shifted = spec(pass, 64, true, "sm_90a");
    shifted.shifted = true;
    cases.push_back({kAlibi, shifted, kSinks});
  }
  compile_all(cases);
}

// A program compiled for calls without a shift refuses to pack one (it would ignore it), and
// the shifted program is another kernel (its key differs).
TEST(AttentionJit, OnlyAShiftedProgramTakesAShift) {
  const auto s = score(kAlibi);
  ProgramSpec plain = spec(Pass::forward, 64, true, "sm_90a");
  ProgramSpec shifted = plain;
  shifted.shifted = true;
  const AttentionProgram a = make_program(*s, plain), b = make_program(*s, shifted);
  EXPECT_NE(a.key, b.key);
  const std::vector<const float*> params(s->params.size(), nullptr);
  EXPECT_NO_THROW(pack_mod(b, *s, params, 0, 0.125f, nullptr, 300, 40));
  EXPECT_NO_THROW(pack_mod(a, *s, params, 0, 0.125f, nullptr, 0, 0));
  try {
    pack_mod(a, *s, params, 0, 0.125f, nullptr, 300, 40);
    ADD_FAILURE() << "an unshifted program packed a shift";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("shifted"), std::string::npos) << e.what();
  }
}

// Learnable tables: the dK/dV kernel's fixed-point accumulation (param_grad.cuh) through the
// emitted param_grad, in both backwards and both kernel families, and the conversion kernel.
TEST(AttentionJit, LearnableTablesCompileWithTheirGradientKernels) {
  if (!nvrtc_usable()) GTEST_SKIP() << "NVRTC is not usable";
  std::vector<Case> cases = {
      {kLearnBias, spec(Pass::backward, 64, true, "sm_90a")},
      {kLearnBias, spec(Pass::backward_atomic, 128, true, "sm_90a")},
      {kLearnBias, spec(Pass::backward, 128, false, "sm_80")},
      {kLearnBias, spec(Pass::forward, 64, true, "sm_90a")},
      {kLearnTwo, spec(Pass::backward_atomic, 64, true, "sm_90a")},
      {kLearnTwo, spec(Pass::backward, 128, true, "sm_90a")},
  };
  // Without the accumulator's register runs (the GPU tests' reference for their bits).
  ProgramSpec no_runs = spec(Pass::backward, 64, true, "sm_90a");
  no_runs.grad_runs = 0;
  cases.push_back({kLearnTwo, no_runs});
  compile_all(cases);
}

// More learnable tables than the dK/dV accumulator keeps register runs for (param_grad.cuh,
// kMaxGradRuns): the last table adds straight into shared memory. dist is read twice a pair,
// so its run changes entry between the two reads.
TEST(AttentionJit, LearnableTablesPastTheRegisterRunsCompile) {
  if (!nvrtc_usable()) GTEST_SKIP() << "NVRTC is not usable";
  const std::vector<ParamDecl> d = {{"gain", {}, {1.0}, true},
                                    {"hb", {4}, std::vector<double>(4, 0.0), true},
                                    {"dist", {4, 16}, std::vector<double>(64, 0.0), true},
                                    {"off", {}, {0.0}, true},
                                    {"hs", {4}, std::vector<double>(4, 0.0), true}};
  const auto s = expr::compile_score_mod(
      "gain * score + hb[h] + dist[h, min(abs(q - k), 15)] + dist[h, min(k, 15)] + off + "
      "hs[h] * abs(q - k)",
      d, 4);
  ASSERT_EQ(expr::grad_tables(*s).size(), 5u);
  for (Pass pass : {Pass::backward, Pass::backward_atomic}) {
    const AttentionProgram p = make_program(*s, spec(pass, 64, true, "sm_90a"));
    const CompiledProgram c = compile_program(p);
    EXPECT_EQ(c.lowered.size(), p.kernels.size()) << pass_name(pass);
  }
}

TEST(AttentionJit, BrokenProgramFailsWithTheLog) {
  if (!nvrtc_usable()) GTEST_SKIP() << "NVRTC is not usable";
  AttentionProgram p = make_program(*score(kSoftcap), spec(Pass::forward, 64, false, "sm_80"));
  p.source += "static_assert(false, \"deliberately broken\");\n";
  try {
    compile_program(p);
    FAIL() << "a broken program compiled";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("deliberately broken"), std::string::npos) << e.what();
  }
}

// A wrong layout of ModExpr (what the host packs) fails to compile instead of running.
TEST(AttentionJit, ModLayoutIsCheckedByTheProgram) {
  if (!nvrtc_usable()) GTEST_SKIP() << "NVRTC is not usable";
  AttentionProgram p = make_program(*score(kT5), spec(Pass::forward, 64, false, "sm_80"));
  const std::string good = "sizeof(M) == " + std::to_string(p.layout.size);
  const size_t at = p.source.find(good);
  ASSERT_NE(at, std::string::npos) << p.source;
  p.source.replace(at, good.size(), "sizeof(M) == " + std::to_string(p.layout.size + 8));
  EXPECT_THROW(compile_program(p), std::exception);
  // The mask functor's own size is asserted too, and the whole of ModExpr with it.
  const auto m = mask(kSinks);
  AttentionProgram q = make_program(*score(kT5), spec(Pass::forward, 64, false, "sm_80"), m.get());
  EXPECT_EQ(try_compile(kT5, q.spec, kSinks), "");
  const std::string mask_good = "sizeof(DlUserMask) == " + std::to_string(q.layout.mask.size);
  const size_t mat = q.source.find(mask_good);
  ASSERT_NE(mat, std::string::npos) << q.source;
  q.source.replace(mat, mask_good.size(),
                   "sizeof(DlUserMask) == " + std::to_string(q.layout.mask.size + 8));
  EXPECT_THROW(compile_program(q), std::exception);
}

TEST(AttentionJit, KeysDifferExactlyWhenTheKernelDiffers) {
  auto key = [](const std::string& e, Pass pass, int d, bool w, const char* arch) {
    return make_program(*score(e), spec(pass, d, w, arch)).key;
  };
  const std::string base = key(kSoftcap, Pass::forward, 64, true, "sm_90a");
  // Constants are kernel arguments: another cap, or the same expression written otherwise,
  // is the same kernel.
  EXPECT_EQ(base, key("50 * tanh(score / 50)", Pass::forward, 64, true, "sm_90a"));
  EXPECT_EQ(base, key("30.0*tanh( (score)/3e1 )", Pass::forward, 64, true, "sm_90a"));
  EXPECT_EQ(key(kAlibi, Pass::backward, 128, true, "sm_90a"),
            key("score - slope[h] * abs(q - k)", Pass::backward, 128, true, "sm_90a"));
  std::set<std::string> keys{base};
  auto add = [&](const std::string& k, const char* what) {
    EXPECT_TRUE(keys.insert(k).second) << what << " shares a key";
  };
  add(key("30 * tanh(score / 30) + 0", Pass::forward, 64, true, "sm_90a"), "structure");
  add(key("30 * sigmoid(score / 30)", Pass::forward, 64, true, "sm_90a"), "function");
  add(key(kSoftcap, Pass::forward, 128, true, "sm_90a"), "head dim");
  add(key(kSoftcap, Pass::forward, 64, false, "sm_90a"), "mma.sync kernel");
  add(key(kSoftcap, Pass::forward, 64, false, "sm_80"), "architecture");
  add(key(kSoftcap, Pass::backward, 64, true, "sm_90a"), "backward");
  add(key(kSoftcap, Pass::backward_atomic, 64, true, "sm_90a"), "atomic backward");
  add(key(kAlibi, Pass::forward, 64, true, "sm_90a"), "another expression");
  add(key(kT5, Pass::forward, 64, true, "sm_90a"), "a table expression");
  // A constant that lets the value reach -inf gives the functor its guard
  // (expr::may_be_minus_inf): another kernel than the same structure's without it.
  add(key("score - exp(q * 1e-9)", Pass::forward, 64, true, "sm_90a"), "an unguarded expression");
  add(key("score - exp(q * 0.1)", Pass::forward, 64, true, "sm_90a"), "the -inf guard");
  // The same expression with a learnable table: another functor (its param_grad) and, in the
  // backward, another dK/dV kernel.
  for (Pass pass : {Pass::forward, Pass::backward, Pass::backward_atomic}) {
    auto fixed = expr::compile_score_mod(
        kLearnBias,
        [] {
          std::vector<ParamDecl> d = learnable_decls();
          for (ParamDecl& x : d) x.learnable = false;
          return d;
        }(),
        4);
    const std::string f = make_program(*fixed, spec(pass, 64, true, "sm_90a")).key;
    const std::string l = make_program(*learnable(kLearnBias), spec(pass, 64, true, "sm_90a")).key;
    EXPECT_NE(f, l) << pass_name(pass);
    add(l, "a learnable table");
    ProgramSpec no_runs = spec(pass, 64, true, "sm_90a");
    no_runs.grad_runs = 0;
    const AttentionProgram n = make_program(*learnable(kLearnBias), no_runs);
    const bool option =
        std::find(n.options.begin(), n.options.end(), "-DDL_GRAD_RUNS=0") != n.options.end();
    if (pass == Pass::forward) {  // no accumulator: the same kernel
      EXPECT_FALSE(option);
      EXPECT_EQ(n.key, l);
    } else {
      EXPECT_TRUE(option) << pass_name(pass);
      add(n.key, "learnable tables without register runs");
    }
  }
  // A mask is in the key by its structure: another structure is another kernel, another
  // constant the same; a mask alone is not the identity score alone.
  auto mkey = [](const char* e, const char* m, Pass pass) {
    const auto mp = mask(m);
    const auto sp = e != nullptr ? score(e) : identity_score(*mp);
    return make_program(*sp, spec(pass, 64, true, "sm_90a"), mp.get()).key;
  };
  for (Pass pass : {Pass::forward, Pass::backward, Pass::backward_atomic}) {
    const std::string sinks = mkey(kAlibi, "q - k < 24 || k < 4", pass);
    EXPECT_EQ(sinks, mkey(kAlibi, "q - k < 256 || k < 64", pass)) << pass_name(pass);
    EXPECT_EQ(sinks, mkey("score - slope[h] * abs(q - k)", "(q-k<24)||(k<4)", pass));
    add(sinks, "a score with a mask");
    add(mkey(kAlibi, "q - k < 24 && k < 4", pass), "a mask of another structure");
    add(mkey(kAlibi, "q - k <= 24 || k < 4", pass), "a mask of another comparison");
    add(mkey(nullptr, "q - k < 24 || k < 4", pass), "a mask alone");
    add(make_program(*identity_score(*mask("k < 4")), spec(pass, 64, true, "sm_90a")).key,
        "the identity score alone");
  }
  // The key names what compiled it.
  EXPECT_NE(base.find(kJitFormat), std::string::npos);
  EXPECT_NE(base.find(nvrtc_version()), std::string::npos);
  EXPECT_NE(base.find("--gpu-architecture=sm_90a"), std::string::npos);
  EXPECT_NE(base.find("tanh"), std::string::npos);
}

TEST(AttentionJit, PacksConstantsAndTablesAtTheirOffsets) {
  auto s = score("score - 0.75 * slope[h] + bias[h, 3] * 2");
  const AttentionProgram p = make_program(*s, spec(Pass::forward, 64, false, "sm_80"));
  const float* slope = reinterpret_cast<const float*>(0x1000);
  const float* bias = reinterpret_cast<const float*>(0x2000);
  const std::vector<unsigned char> b = pack_mod(p, *s, {slope, bias}, 3, 0.125f);
  ASSERT_EQ(b.size(), p.layout.size);
  auto at = [&](size_t off, auto v) {
    std::memcpy(&v, b.data() + off, sizeof v);
    return v;
  };
  EXPECT_EQ(at(p.layout.params[0], (const float*)nullptr), slope);
  EXPECT_EQ(at(p.layout.params[1], (const float*)nullptr), bias);
  EXPECT_EQ(at(p.layout.head_offset, 0), 3);
  EXPECT_EQ(at(p.layout.scale, 0.f), 0.125f);
  const std::vector<expr::Literal> c = s->constants();
  ASSERT_EQ(p.layout.slots, c.size());
  for (size_t i = 0; i < c.size(); ++i) {
    EXPECT_EQ(at(p.layout.c + 4 * i, 0.f), float(c[i].value));
    EXPECT_EQ(at(p.layout.ci + 8 * i, 0LL), (long long)c[i].value);
  }
  EXPECT_THROW(pack_mod(p, *s, {slope}, 0, 1.f), std::exception);
}

// A score functor of 4-byte alignment (no table, no constant) with a mask of 8 (constants):
// ModExpr takes the mask's alignment, the functor keeps its own; the program checks both.
TEST(AttentionJit, MaskAlignmentBeyondTheScoresCompiles) {
  if (!nvrtc_usable()) GTEST_SKIP() << "NVRTC is not usable";
  const auto m = expr::compile_mask_mod("k > 2", {}, 4);
  const auto s = identity_score(*m);
  const AttentionProgram p = make_program(*s, spec(Pass::forward, 64, false, "sm_80"), m.get());
  EXPECT_EQ(p.layout.user_align, 4u);
  EXPECT_EQ(p.layout.align, 8u);
  EXPECT_EQ(p.layout.mask.align, 8u);
  try {
    const CompiledProgram c = compile_program(p);
    EXPECT_EQ(c.lowered.size(), p.kernels.size());
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
}

// The mask functor follows ModExpr's last member but one (U::Bound): the same tables, the same
// head_offset, its own constants; the score's offsets are those of the score alone.
TEST(AttentionJit, PacksTheMaskAfterTheScore) {
  auto s = score("score - 0.75 * slope[h] + bias[h, 3] * 2");
  auto m = mask("q - k < 24 || k < 4 && slope[h] > 0.1");
  const AttentionProgram alone = make_program(*s, spec(Pass::forward, 64, false, "sm_80"));
  const AttentionProgram p = make_program(*s, spec(Pass::forward, 64, false, "sm_80"), m.get());
  EXPECT_EQ(p.layout.scale, alone.layout.scale);
  EXPECT_EQ(p.layout.c, alone.layout.c);
  EXPECT_EQ(p.layout.k_shift, alone.layout.k_shift);
  ASSERT_TRUE(p.layout.has_mask);
  EXPECT_FALSE(alone.layout.has_mask);
  EXPECT_GE(p.layout.mask.at, alone.layout.k_shift + 12);  // past qs, ks and the Bound
  EXPECT_EQ(p.layout.mask.at % 8, 0u);
  EXPECT_EQ(p.layout.size, p.layout.mask.at + p.layout.mask.size);
  const float* slope = reinterpret_cast<const float*>(0x1000);
  const float* bias = reinterpret_cast<const float*>(0x2000);
  const std::vector<unsigned char> b =
      pack_mod(p, *s, {slope, bias}, 3, 0.125f, nullptr, 0, 0, m.get());
  ASSERT_EQ(b.size(), p.layout.size);
  auto at = [&](size_t off, auto v) {
    std::memcpy(&v, b.data() + off, sizeof v);
    return v;
  };
  EXPECT_EQ(at(p.layout.scale, 0.f), 0.125f);
  EXPECT_EQ(at(p.layout.mask.params[0], (const float*)nullptr), slope);
  EXPECT_EQ(at(p.layout.mask.params[1], (const float*)nullptr), bias);
  EXPECT_EQ(at(p.layout.mask.head_offset, 0), 3);
  const std::vector<expr::Literal> c = m->constants();
  ASSERT_EQ(p.layout.mask.slots, c.size());
  ASSERT_EQ(c.size(), 3u);  // 24, 4 and 0.1
  for (size_t i = 0; i < c.size(); ++i) {
    EXPECT_EQ(at(p.layout.mask.c + 4 * i, 0.f), float(c[i].value));
    EXPECT_EQ(at(p.layout.mask.ci + 8 * i, 0LL), (long long)c[i].value);
  }
  // The score's constants where the score alone has them.
  for (size_t i = 0; i < s->constants().size(); ++i)
    EXPECT_EQ(at(p.layout.c + 4 * i, 0.f), float(s->constants()[i].value));
  // Packed without its mask (or a mask into a program without one): refused.
  EXPECT_THROW(pack_mod(p, *s, {slope, bias}, 3, 0.125f), std::exception);
  EXPECT_THROW(pack_mod(alone, *s, {slope, bias}, 3, 0.125f, nullptr, 0, 0, m.get()),
               std::exception);
}

TEST(AttentionJit, PacksTheLearnablesSums) {
  auto s = learnable(kLearnTwo);
  const AttentionProgram p = make_program(*s, spec(Pass::backward, 64, false, "sm_80"));
  auto* sums = reinterpret_cast<unsigned long long*>(0x3000);
  const float* t[3] = {reinterpret_cast<const float*>(0x1000),
                       reinterpret_cast<const float*>(0x2000),
                       reinterpret_cast<const float*>(0x4000)};
  const std::vector<unsigned char> b = pack_mod(p, *s, {t[0], t[1], t[2]}, 2, 0.5f, sums);
  ASSERT_EQ(b.size(), p.layout.size);
  unsigned long long* got = nullptr;
  std::memcpy(&got, b.data() + p.layout.grad_acc, sizeof got);
  EXPECT_EQ(got, sums);
  EXPECT_EQ(p.layout.grad_acc, 3 * 8u);  // after the three table pointers
  EXPECT_EQ(p.layout.head_offset, 4 * 8u);
  int h = 0;
  std::memcpy(&h, b.data() + p.layout.head_offset, 4);
  EXPECT_EQ(h, 2);
}

// The backward passes of learnable tables end with the conversion of their sums; the forward
// is the forward alone.
TEST(AttentionJit, LearnableBackwardsEndWithTheGradientConversion) {
  auto s = learnable(kLearnBias);
  const AttentionProgram f = make_program(*s, spec(Pass::forward, 64, true, "sm_90a"));
  const AttentionProgram b = make_program(*s, spec(Pass::backward, 64, true, "sm_90a"));
  const AttentionProgram a = make_program(*s, spec(Pass::backward_atomic, 64, true, "sm_90a"));
  EXPECT_EQ(f.kernels.size(), 1u);
  ASSERT_EQ(b.kernels.size(), 3u);
  ASSERT_EQ(a.kernels.size(), 2u);
  EXPECT_NE(b.kernels[2].find("param_grad_to_f32"), std::string::npos);
  EXPECT_NE(a.kernels[1].find("param_grad_to_f32"), std::string::npos);
  EXPECT_EQ(make_program(*score(kAlibi), spec(Pass::backward, 64, true, "sm_90a")).kernels.size(),
            2u);
}

// The tables a dK/dV CTA keeps: a table subscripted by h first, its group's rows; another,
// whole (expr::grad_tables, the emitted grad_table's source).
TEST(AttentionJit, GradTablesKeepTheGroupsRowsOrTheWholeTable) {
  auto s = learnable(kLearnTwo);
  const std::vector<expr::GradTable> t = expr::grad_tables(*s);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].offset, 0);
  EXPECT_EQ(t[0].numel, 256);
  EXPECT_EQ(t[0].per_head, 64);
  EXPECT_EQ(t[1].offset, 256);
  EXPECT_EQ(t[1].numel, 1);
  EXPECT_EQ(t[1].per_head, 0);
  EXPECT_EQ(expr::grad_slots(*s, 1), 65);
  EXPECT_EQ(expr::grad_slots(*s, 4), 257);
  auto mixed =
      expr::compile_score_mod("score + bias[h, 3] + bias[min(h, 2), 5]", learnable_decls(), 4);
  EXPECT_EQ(expr::grad_slots(*mixed, 2), 256 + 1);  // bias whole (one read not by h), temp
  EXPECT_TRUE(expr::grad_tables(*score(kT5)).empty());
}

TEST(AttentionJit, RefusesMasksInTheScoresPlace) {
  auto m = mask("q - k < 4");
  EXPECT_THROW(make_program(*m, spec(Pass::forward, 64, false, "sm_80")), std::exception);
  EXPECT_THROW(
      make_program(*score(kAlibi), spec(Pass::forward, 64, false, "sm_80"), score(kSoftcap).get()),
      std::exception);
  EXPECT_THROW(make_program(*identity_score(*m), spec(Pass::forward, 96, false, "sm_80"), m.get()),
               std::exception);
  EXPECT_THROW(make_program(*score(kAlibi), spec(Pass::forward, 96, false, "sm_80")),
               std::exception);
  EXPECT_THROW(make_program(*score(kAlibi), spec(Pass::backward_atomic, 64, false, "sm_80")),
               std::exception);
}

// Every header the embedded headers include by a quoted path is embedded too (NVRTC would
// otherwise fail on the GPU machine only).
TEST(AttentionJit, EmbeddedHeadersAreClosedUnderInclude) {
  std::set<std::string> names;
  for (const EmbeddedHeader& h : kernel_headers()) names.insert(h.name);
  for (const EmbeddedHeader& h : kernel_headers()) {
    EXPECT_FALSE(h.text.empty()) << h.name;
    // Lines inside #ifndef __CUDACC_RTC__ (up to its #else or #endif) are host-only.
    int depth = 0, host_from = -1;
    size_t at = 0;
    while (at < h.text.size()) {
      const size_t end = std::min(h.text.find('\n', at), h.text.size());
      const std::string line = h.text.substr(at, end - at);
      at = end + 1;
      if (line.rfind("#if", 0) == 0) {
        ++depth;
        if (line == "#ifndef __CUDACC_RTC__" || line.rfind("#ifndef __CUDACC_RTC__ ", 0) == 0)
          if (host_from < 0) host_from = depth;
      } else if (line.rfind("#endif", 0) == 0) {
        if (host_from == depth) host_from = -1;
        --depth;
      } else if (line.rfind("#else", 0) == 0) {
        if (host_from == depth) host_from = -1;
      } else if (line.rfind("#include \"", 0) == 0 && host_from < 0) {
        const std::string inc = line.substr(10, line.find('"', 10) - 10);
        EXPECT_TRUE(names.count(inc)) << h.name << " includes " << inc << ", not embedded";
      }
    }
  }
}

}  // namespace
}  // namespace driftless::layers::jit
