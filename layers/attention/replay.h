// One attention call as a safetensors file, so a call dumped from a failing run can be
// replayed alone (`driftless attention --in call.safetensors --out result.safetensors`).
//
// Call file tensors: q (T_q, H, D), k, v (T_k, H_kv, D), cu_seqlens_q, cu_seqlens_k (i32);
// optional: d_out (T_q, H, D; without it only the forward runs), cu_seqlens_q_padded,
// cu_seqlens_k_padded, seqused_q, seqused_k (i32), bias, alibi_slopes,
// relative_position_table. Metadata (all strings): causal ("true"/"false", default false),
// window_left, window_right (default -1), first_doc_shift_q, first_doc_shift_k (default 0:
// AttentionSpec::first_doc_shift), softmax_scale (default 1/sqrt(D)), max_seqlen_q,
// max_seqlen_k (default: the longest real length), score_mod ("none", "softcap", "alibi",
// "relative_position"; default none), softcap, relative_position_max_distance, deterministic
// ("true"/"false", default true: AttentionSpec::deterministic). Keys starting
// with "info." are free-form and copied to the result; any other key is an error.
// Result file tensors: out, lse, and with d_out: dq, dk, dv, dbias (with bias),
// d_relative_position_table (with that modifier). Metadata: the call's, plus "device".
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "layers/attention/spec.h"

namespace driftless::layers {

struct AttentionCall {
  Tensor q, k, v, d_out;
  AttentionSpec spec;
  std::map<std::string, std::string> info;  // "info.*" metadata
};

AttentionCall read_attention_call(const std::string& path);
void write_attention_call(const std::string& path, const AttentionCall& call);

// Runs forward (and backward when d_out is given) on device ("cpu" or "cuda") and returns
// the result tensors in file order.
std::vector<std::pair<std::string, Tensor>> replay_attention(const AttentionCall& call,
                                                             const std::string& device);

// read_attention_call + replay_attention + write (atomic) of the result file.
void replay_attention_file(const std::string& in, const std::string& out,
                           const std::string& device);

}  // namespace driftless::layers
