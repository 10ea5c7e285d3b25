// The run-time compiled attention kernels of a user score expression (ARCHITECTURE.md
// "Score modifiers"): the NVRTC program text (the emitted functor, the fast kernels' embedded
// headers and the instantiations of one pass), its cache key, and the bytes of its modifier.
#pragma once
#include <cstddef>
#include <cstdint>
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
};

// Byte layout of ModExpr<U> (fast/mod_expr.cuh) for the emitted functor U: what the host
// packs; the program asserts it (static_assert), so a mismatch fails the compile.
struct ModLayout {
  size_t size = 0, align = 4;
  std::vector<size_t> params;             // offset of each declared parameter's pointer
  size_t grad_acc = 0;                    // with learnable tables: the sums' address
  size_t head_offset = 0, c = 0, ci = 0;  // c, ci: the constant slots (when slots > 0)
  size_t slots = 0;
  size_t f = 0, folds = 0;  // the folded constants (expr::folded_constants), when folds > 0
  size_t scale = 0, h = 0, doc = 0, q_shift = 0, k_shift = 0;
};
ModLayout mod_layout(const expr::Program& score);

struct AttentionProgram {
  ProgramSpec spec;
  std::string source;                // the whole program but the embedded headers
  std::vector<std::string> kernels;  // name expressions of the kernels, in launch order
  std::vector<std::string> options;  // NVRTC options
  ModLayout layout;
  std::string key;  // the kernel cache key (see make_program)
};

// The program of `score` (a checked score expression) for `spec`.
// Its key holds a format tag, the program text (with the expression's canonical structure:
// constants are kernel arguments, so expressions that differ only in a constant share it),
// every embedded header, the options, the architecture and the NVRTC and driftless versions.
// Learnable tables are pointers like fixed ones, but the functor differs (grad_acc, param_grad),
// so the text, and the key, differ from the same expression with fixed tables.
// Throws "[attention] ..." for a mask or an unsupported spec.
AttentionProgram make_program(const expr::Program& score, const ProgramSpec& spec);

// ModExpr<U>'s bytes: the table pointers (device addresses, one per declared parameter),
// head_offset, the constants by slot, the softmax scale; h and doc are bound in the kernel.
// grad_acc: with learnable tables, the backward's (hi[n], lo[n], overflow) sums, zeroed
// (param_grad.cuh); ignored otherwise.
std::vector<unsigned char> pack_mod(const AttentionProgram& program, const expr::Program& score,
                                    const std::vector<const float*>& params, int head_offset,
                                    float scale, unsigned long long* grad_acc = nullptr,
                                    int64_t shift_q = 0, int64_t shift_k = 0);

// "nvrtc <major>.<minor>", or "nvrtc unavailable".
std::string nvrtc_version();
// The version of the kernels' code that a key names beside the headers' text.
constexpr const char* kJitFormat = "driftless-attention-jit/1";

}  // namespace driftless::layers::jit
