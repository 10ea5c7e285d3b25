// Launchers of the reference CUDA varlen attention (flash_cuda.cu), called by the host glue
// in attention_cuda.cpp. Plain pointers and POD structs only: nvcc compiles this as C++17
// and it must not see tensor.h. Same math as cpu/flash_cpu.h; all launches go to the
// default stream. Speed is not the goal (no tensor cores): exactness and determinism are.
#pragma once
#include "layers/attention/rtc_std.h"
#include "layers/attention/score_mod.h"

namespace driftless::layers::gpu {

// One document (spec.h DocSpan), in device memory.
struct Doc {
  int64_t q_offset, q_len, k_offset, k_len;
};

struct Problem {
  const void* q = nullptr;  // (T_q, H, D), f32 or bf16 (bf16 == true)
  const void* k = nullptr;  // (T_k, H_kv, D)
  const void* v = nullptr;  // (T_k, H_kv, D)
  bool bf16 = false;
  // Row strides of q, k and v counted in heads (a row of q is q_row_heads * head_dim
  // elements; heads stay head_dim apart); 0: packed (H and H_kv). Only the fast kernels
  // (fast/) read rows of wider tensors (q of the fused QKV product, K/V of the K/V buffer)
  // in place; the reference kernels take packed rows. 16-bit, in the padding after bf16:
  // the struct is a kernel parameter, and growing it past 120 bytes made nvcc address it
  // through a pointer and slowed the forward and dQ kernels (BENCHMARKS.md).
  int16_t q_row_heads = 0, k_row_heads = 0, v_row_heads = 0;
  const Doc* docs = nullptr;       // (N) device
  const int32_t* q_doc = nullptr;  // (T_q) device: document of each q row, -1 for padding
  const int32_t* k_doc = nullptr;  // (T_k) device: document of each k row, -1 for padding
  int64_t t_q = 0, t_k = 0, heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 1.0f;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
};

// The score modifier of a call: its description (score_mod.h) in f32, parameters in device
// memory. The kernels take none, softcap and ALiBi.
using ModKind = ScoreModKind;
using Mod = ScoreModDesc<float>;

#ifndef __CUDACC_RTC__
// Writes every row of out (T_q, H, D) and lse (H, T_q): padded rows and rows that see no
// key get 0 and -inf.
void launch_forward(const Problem& p, const Mod& mod, void* out, float* lse);
// Writes every element of dq (T_q, H, D), dk and dv (T_k, H_kv, D) (dtype of q). delta is
// (T_q * H) f32 scratch. No atomics: each output row is reduced by one block in a fixed
// order, so the result is bitwise reproducible.
void launch_backward(const Problem& p, const Mod& mod, const void* out, const void* dout,
                     const float* lse, float* delta, void* dq, void* dk, void* dv);
#endif

}  // namespace driftless::layers::gpu
