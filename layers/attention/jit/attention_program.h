// The run-time compiled attention kernels of a user score expression (ARCHITECTURE.md
// "Score modifiers"): the NVRTC program text (the emitted functor, the fast kernels' embedded
// headers and the instantiations of one pass), its cache key, and the bytes of its modifier.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "layers/attention/expr/expr.h"

namespace driftless::layers::jit {

// The kernels of one program, in launch order:
//   forward          the forward kernel (sm90's TMA kernel where wgmma, else mma.sync);
//   backward         the deterministic backward's dq_kernel, then dkv_kernel;
//   backward_atomic  the atomic-dQ backward's dkv_kernel<..., kDq = true> (wgmma only);
// the backward passes of an expression with learnable tables end with param_grad_to_f32.
enum class Pass { forward, backward, backward_atomic };
const char* pass_name(Pass p);

struct ProgramSpec {
  Pass pass = Pass::forward;
  int head_dim = 64;            // 64 or 128
  bool wgmma = false;           // the sm_90a kernels (fast_attention.h use_wgmma)
  std::string arch = "sm_90a";  // NVRTC's --gpu-architecture: sm_90a for wgmma
  // Learnable tables: how many get a register run in the dK/dV accumulator (param_grad.cuh
  // kMaxGradRuns); -1 keeps the header's default. 0 is the accumulator without runs, one
  // atomic pair a contribution, which the GPU tests compare bit for bit against the runs.
  int grad_runs = -1;
  // The call shifts document 0's positions (AttentionSpec::first_doc_shift; no route's calls
  // do): compiled with DL_DOC_SHIFT, which adds the shift per pair (mod_expr.cuh qpos, kpos).
  bool shifted = false;
};

// Byte layout of ModExpr<U, V> (fast/mod_expr.cuh) for the emitted functors U (score) and V
// (mask, or NoMask): what the host packs; the program asserts it (static_assert), so a
// mismatch fails the compile. Offsets are from the start of ModExpr.
// The members every emitted functor starts with (emit_cuda), score or mask alike.
struct FunctorMembers {
  std::vector<size_t> params;             // offset of each declared parameter's pointer
  size_t grad_acc = 0;                    // with learnable tables: the sums' address
  size_t head_offset = 0, c = 0, ci = 0;  // c, ci: the constant slots (when slots > 0)
  size_t slots = 0;
};
struct MaskLayout : FunctorMembers {    // the same tables; grad_acc unused by a mask
  size_t at = 0, size = 1, align = 1;  // V within ModExpr (NoMask: one empty byte)
};
struct ModLayout : FunctorMembers {
  size_t size = 0, align = 4;  // ModExpr's (the mask's alignment may exceed the functor's)
  size_t user_align = 4;       // the score functor U's
  size_t f = 0, folds = 0;  // the folded constants (expr::folded_constants), when folds > 0
  size_t scale = 0, h = 0, doc = 0, q_shift = 0, k_shift = 0;
  bool has_mask = false;
  MaskLayout mask;
};
ModLayout mod_layout(const expr::Program& score, const expr::Program* mask = nullptr);

struct AttentionProgram {
  ProgramSpec spec;
  std::string source;                // the whole program but the embedded headers
  std::vector<std::string> kernels;  // name expressions of the kernels, in launch order
  std::vector<std::string> options;  // NVRTC options
  ModLayout layout;
  std::string key;  // the kernel cache key (see make_program)
};

// The program of `score` (a checked score expression) and `mask` (a checked mask expression
// over the same declarations, or null) for `spec`. A mask alone runs with the identity score
// (identity_score).
// Its key holds a format tag, the program text (with the expression's canonical structure:
// constants are kernel arguments, so expressions that differ only in a constant share it),
// every embedded header, the options, the architecture and the NVRTC and driftless versions.
// Learnable tables are pointers like fixed ones, but the functor differs (grad_acc, param_grad),
// so the text, and the key, differ from the same expression with fixed tables.
// The mask's canonical structure is in the text, its constants are kernel arguments as the
// score's are.
// Throws "[attention] ..." for an unsupported spec, a score given as the mask or the reverse.
AttentionProgram make_program(const expr::Program& score, const ProgramSpec& spec,
                              const expr::Program* mask = nullptr);

// The score expression `score` over mask's declarations (all fixed: a mask has no gradient),
// which runs a mask given alone: its value is the built-ins' scaled score in log2 units.
std::shared_ptr<const expr::Program> identity_score(const expr::Program& mask);

// ModExpr<U, V>'s bytes: the table pointers (device addresses, one per declared parameter),
// head_offset, the constants by slot, the softmax scale; h and doc are bound in the kernel;
// with a mask (the program's), its functor's table pointers, head_offset and constants.
// grad_acc: with learnable tables, the backward's (hi[n], lo[n], overflow) sums, zeroed
// (param_grad.cuh); ignored otherwise.
std::vector<unsigned char> pack_mod(const AttentionProgram& program, const expr::Program& score,
                                    const std::vector<const float*>& params, int head_offset,
                                    float scale, unsigned long long* grad_acc = nullptr,
                                    int64_t shift_q = 0, int64_t shift_k = 0,
                                    const expr::Program* mask = nullptr);

// "nvrtc <major>.<minor>", or "nvrtc unavailable".
std::string nvrtc_version();
// The version of the kernels' code that a key names beside the headers' text.
constexpr const char* kJitFormat = "driftless-attention-jit/1";

}  // namespace driftless::layers::jit
