// The NVRTC program of a score expression's attention kernels (attention_program.h): the
// emitted functor, ModExpr's layout checks and the name expressions of one pass's kernels,
// over the embedded kernel headers (kernel_headers.h), and the key that names all of it.
#include "layers/attention/jit/attention_program.h"

#include <nvrtc.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "engine/core/env.h"
#include "engine/core/error.h"
#include "layers/attention/jit/kernel_headers.h"

namespace driftless::layers::jit {
namespace {

constexpr const char* kOp = "attention";
constexpr const char* kFast = "driftless::layers::gpu::fast::";

size_t round_up(size_t x, size_t a) {
  return (x + a - 1) / a * a;
}

// The emitted functor with its comment line (the canonical text, constants included) replaced
// by the canonical structure: the program text then depends on the structure only.
std::string functor_source(const expr::Program& p, const std::string& name) {
  std::string src = expr::emit_cuda(p, name, true);
  const std::string tag = p.is_mask ? "// mask_mod: " : "// score_mod: ";
  const size_t at = src.find(tag);
  DL_CHECK(at != std::string::npos, kOp, "the emitted functor has no " << tag << "line");
  const size_t end = src.find('\n', at);
  return src.substr(0, at) + "// " + p.canonical_structure() + src.substr(end);
}

// NVRTC has no offsetof (nor __builtin_offsetof): the sizes and alignments of the functor
// and of ModExpr are asserted; the member offsets follow from them by the ABI's rule for
// these plain structs (mod_layout), the same on the host and in device code.
std::string layout_asserts(const ModLayout& l) {
  std::string mask;
  if (l.has_mask)
    mask = "static_assert(sizeof(DlUserMask) == " + std::to_string(l.mask.size) +
           " && alignof(DlUserMask) == " + std::to_string(l.mask.align) +
           ", \"ModExpr layout: the mask functor\");\n";
  return mask + "static_assert(sizeof(DlUserMod) == " + std::to_string(l.scale) +
         " && alignof(DlUserMod) == " + std::to_string(l.user_align) +
         ", \"ModExpr layout: the functor\");\n" +
         "static_assert(sizeof(M) == " + std::to_string(l.size) +
         " && alignof(M) == " + std::to_string(l.align) + ", \"ModExpr layout: ModExpr\");\n";
}

std::string cuda_include_dir() {
  if (const std::string home = env_value("CUDA_HOME"); !home.empty()) return home + "/include";
#ifdef DL_CUDA_INCLUDE_DIR
  return DL_CUDA_INCLUDE_DIR;
#else
  return "/usr/local/cuda/include";
#endif
}

}  // namespace

const char* pass_name(Pass p) {
  switch (p) {
    case Pass::forward:
      return "forward";
    case Pass::backward:
      return "backward";
    case Pass::backward_atomic:
      return "backward_atomic";
  }
  return "?";
}

namespace {

// Lays out the members a functor of `prog` starts with from offset `at`; returns the end
// offset and raises `align` to theirs.
size_t lay_members(const expr::Program& prog, FunctorMembers& m, size_t at, size_t& align) {
  for (size_t i = 0; i < prog.params.size(); ++i) {
    m.params.push_back(at);
    at += 8;
    align = 8;
  }
  if (prog.param_count > 0) {  // the learnables' fixed-point sums (emit_cuda's grad_acc)
    m.grad_acc = at;
    at += 8;
    align = 8;
  }
  m.head_offset = at;
  at += 4;
  m.slots = prog.constants().size();
  if (m.slots > 0) {
    m.c = at;
    at += 4 * m.slots;
    at = round_up(at, 8);
    m.ci = at;
    at += 8 * m.slots;
    align = 8;
  }
  return at;
}

}  // namespace

ModLayout mod_layout(const expr::Program& score, const expr::Program* mask) {
  ModLayout l;
  size_t align = 4;
  size_t at = lay_members(score, l, 0, align);
  l.folds = size_t(expr::fold_count(score));
  if (l.folds > 0) {
    l.f = at;
    at += 4 * l.folds;
  }
  const size_t user = round_up(at, align);  // sizeof(U)
  l.scale = user;
  l.user_align = align;
  l.h = user + 4;
  l.doc = user + 8;
  l.q_shift = user + 12;
  l.k_shift = user + 16;
  // then qs, ks and U::Bound (bound_slots floats), which bind fills in the kernel
  const size_t end = user + 28 + 4 * size_t(expr::bound_slots(score));
  // then the mask functor V, laid out as emit_cuda writes a mask's members (NoMask: 1 byte)
  l.has_mask = mask != nullptr;
  MaskLayout& m = l.mask;
  if (mask != nullptr) {
    size_t malign = 4;
    const size_t mat = lay_members(*mask, m, 0, malign);
    m.size = round_up(mat, malign);
    m.align = malign;
    m.at = round_up(end, malign);
    for (size_t& x : m.params) x += m.at;
    m.grad_acc += m.at;
    m.head_offset += m.at;
    m.c += m.at;
    m.ci += m.at;
  } else {
    m.at = end;
  }
  l.align = std::max(align, m.align);
  l.size = round_up(m.at + m.size, l.align);
  return l;
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "nvrtc unavailable";
  return "nvrtc " + std::to_string(major) + "." + std::to_string(minor);
}

std::shared_ptr<const expr::Program> identity_score(const expr::Program& mask) {
  std::vector<expr::ParamDecl> decls = mask.params;
  for (expr::ParamDecl& d : decls) d.learnable = false;
  return expr::compile_score_mod("score", decls, mask.heads);
}

AttentionProgram make_program(const expr::Program& score, const ProgramSpec& spec,
                              const expr::Program* mask) {
  DL_CHECK(!score.is_mask, kOp, "the score expression of a program is a mask_mod");
  DL_CHECK(mask == nullptr || mask->is_mask, kOp,
           "the mask expression of a program is a score_mod");
  DL_CHECK(mask == nullptr || mask->params.size() == score.params.size(), kOp,
           "the mask declares " << (mask ? mask->params.size() : 0) << " parameters, the score "
                                << score.params.size() << " (they share the declarations)");
  DL_CHECK(
      spec.head_dim == 64 || spec.head_dim == 128, kOp,
      "score_mod / mask_mod expressions on CUDA take head_dim 64 or 128, not " << spec.head_dim);
  DL_CHECK(!spec.wgmma || spec.arch == "sm_90a", kOp,
           "the wgmma kernels compile for sm_90a, not " << spec.arch);
  DL_CHECK(spec.wgmma || spec.pass != Pass::backward_atomic, kOp,
           "the atomic-dQ backward runs on the wgmma kernels only");
  AttentionProgram p;
  p.spec = spec;
  p.layout = mod_layout(score, mask);
  const std::string D = std::to_string(spec.head_dim), W = spec.wgmma ? "true" : "false";
  std::string src = "// driftless: run-time compiled attention (" +
                    std::string(pass_name(spec.pass)) + ", head_dim " + D +
                    (spec.wgmma ? ", wgmma" : ", mma.sync") + ")\n";
  src += "#include \"layers/attention/cuda/fast/mod_expr.cuh\"\n";
  if (spec.pass == Pass::forward)
    src += spec.wgmma ? "#include \"layers/attention/cuda/fast/sm90/fwd_kernel.cuh\"\n"
                      : "#include \"layers/attention/cuda/fast/mma_sync/forward_kernel.cuh\"\n";
  else
    src += "#include \"layers/attention/cuda/fast/mma_sync/fast_dkv.cuh\"\n";
  if (spec.wgmma)  // wgmma.cuh compiles its products to nothing without sm_90a's features
    src +=
        "#ifndef DL_WGMMA\n#error \"the wgmma kernels need sm_90a (DL_WGMMA undefined)\"\n#endif\n";
  if (mask != nullptr) src += functor_source(*mask, "DlUserMask");
  src += functor_source(score, "DlUserMod");
  src += "namespace dl_jit {\nusing M = " + std::string(kFast) + "ModExpr<DlUserMod" +
         (mask != nullptr ? ", DlUserMask" : "") + ">;\n";
  src += layout_asserts(p.layout);
  src += "}  // namespace dl_jit\n";
  p.source = src;
  const std::string fast = kFast, M = "dl_jit::M";
  switch (spec.pass) {
    case Pass::forward:
      if (spec.wgmma)
        p.kernels = {"&" + fast + "sm90::forward_kernel<" + fast + "sm90::FwdConfig<" + D + ", " +
                     M + ">, " + M + ", false>"};
      else
        p.kernels = {"&" + fast + "fwd::forward_kernel<" + D + ", " + M + ", false>"};
      break;
    case Pass::backward:
      p.kernels = {"&" + fast + "bwd::dq_kernel<" + D + ", " + M + ", " + W + ">",
                   "&" + fast + "bwd::dkv_kernel<" + D + ", " + M + ", " + W + ", false, 1>"};
      break;
    case Pass::backward_atomic: {
      // mma_sync/fast_dkv.cuh DkvWarpgroups
      const std::string wg = spec.head_dim == 128 ? "2" : "1";
      p.kernels = {"&" + fast + "bwd::dkv_kernel<" + D + ", " + M + ", true, true, " + wg + ">"};
      break;
    }
  }
  // Learnable tables: the backward ends with their gradient's conversion (param_grad.cuh).
  if (spec.pass != Pass::forward && score.param_count > 0)
    p.kernels.push_back("&" + fast + "param_grad_to_f32<" + M + ">");
  // The flags of the nvcc build (cmake/cuda.cmake) that reach device code, with NVRTC's
  // defaults for the math flags written out (nvcc's are the same).
  p.options = {"--gpu-architecture=" + spec.arch, "-std=c++17", "-DDRIFTLESS_SM90A=1", "-DNDEBUG",
               "--fmad=true", "--ftz=false", "--prec-div=true", "--prec-sqrt=true",
               // the shared headers' unannotated (host) functions, never called, as device
               // functions: NVRTC refuses host functions
               "-default-device", "-I" + cuda_include_dir()};
  // (the dK/dV kernel's accumulator of learnable tables is the only reader)
  if (spec.grad_runs >= 0 && spec.pass != Pass::forward && score.param_count > 0)
    p.options.push_back("-DDL_GRAD_RUNS=" + std::to_string(spec.grad_runs));
  if (spec.shifted) p.options.push_back("-DDL_DOC_SHIFT=1");
  std::string key =
      std::string(kJitFormat) + "\n" + nvrtc_version() + "\narch " + spec.arch + "\noptions";
  for (const std::string& o : p.options) key += " " + o;
  key += "\nkernels";
  for (const std::string& k : p.kernels) key += " " + k;
  key += "\nprogram\n" + p.source;
  for (const EmbeddedHeader& h : kernel_headers())
    key += "\nheader " + h.name + " " + std::to_string(h.text.size()) + "\n" + h.text;
  p.key = std::move(key);
  return p;
}

std::vector<unsigned char> pack_mod(const AttentionProgram& program, const expr::Program& score,
                                    const std::vector<const float*>& params, int head_offset,
                                    float scale, unsigned long long* grad_acc, int64_t shift_q,
                                    int64_t shift_k, const expr::Program* mask) {
  const ModLayout& l = program.layout;
  DL_CHECK(l.has_mask == (mask != nullptr), kOp,
           "the program was made " << (l.has_mask ? "with" : "without") << " a mask, packed "
                                   << (mask != nullptr ? "with" : "without") << " one");
  DL_CHECK(params.size() == score.params.size(), kOp,
           "the expression declares " << score.params.size() << " parameters, " << params.size()
                                      << " given");
  std::vector<unsigned char> out(l.size, 0);
  auto put = [&](size_t at, const void* v, size_t n) { std::memcpy(out.data() + at, v, n); };
  // The leading members of a functor of `prog` (lay_members): tables, sums, head offset and
  // literal slots.
  auto put_members = [&](const expr::Program& prog, const FunctorMembers& m) {
    for (size_t i = 0; i < params.size(); ++i) put(m.params[i], &params[i], sizeof(const float*));
    if (prog.param_count > 0) put(m.grad_acc, &grad_acc, sizeof grad_acc);
    put(m.head_offset, &head_offset, 4);
    const std::vector<expr::Literal> constants = prog.constants();
    DL_CHECK(constants.size() == m.slots, kOp, "constant slots changed");
    for (size_t i = 0; i < constants.size(); ++i) {
      const float c = float(constants[i].value);
      const long long ci = (long long)constants[i].value;
      put(m.c + 4 * i, &c, 4);
      put(m.ci + 8 * i, &ci, 8);
    }
  };
  put_members(score, l);
  const std::vector<float> folds = expr::folded_constants(score, scale);
  DL_CHECK(folds.size() == l.folds, kOp, "folded constants changed");
  for (size_t i = 0; i < folds.size(); ++i) put(l.f + 4 * i, &folds[i], 4);
  put(l.scale, &scale, 4);
  DL_CHECK(shift_q >= INT32_MIN && shift_q <= INT32_MAX && shift_k >= INT32_MIN &&
               shift_k <= INT32_MAX,
           kOp, "first_doc_shift (" << shift_q << ", " << shift_k << ") exceeds 32 bits");
  DL_CHECK(program.spec.shifted || (shift_q == 0 && shift_k == 0), kOp,
           "first_doc_shift (" << shift_q << ", " << shift_k
                               << ") needs a program compiled for shifted calls "
                                  "(ProgramSpec::shifted); this one ignores the shift");
  const int32_t sq = int32_t(shift_q), sk = int32_t(shift_k);
  put(l.q_shift, &sq, 4);
  put(l.k_shift, &sk, 4);
  if (mask != nullptr) {  // the same tables, its own constants
    const MaskLayout& m = l.mask;
    DL_CHECK(mask->params.size() == params.size(), kOp,
             "the mask declares " << mask->params.size() << " parameters, " << params.size()
                                  << " given");
    put_members(*mask, m);
  }
  return out;
}

}  // namespace driftless::layers::jit
