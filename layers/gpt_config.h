// The shape of a model: GPT-2 (learned positions, LayerNorm, GELU MLP, biases) or
// Llama-family (rotary positions, RMSNorm, SwiGLU MLP, no biases). Also the `model:`
// section of a run config (train/config.h uses this struct directly: one place per concept).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "layers/attention/expr/expr.h"

namespace driftless::layers {

enum class Architecture { gpt2, llama };

struct GptConfig {
  Architecture architecture = Architecture::gpt2;
  int64_t vocab_size = 50257;
  int64_t n_positions = 1024;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_kv_head = 0;  // 0: n_head
  int64_t n_embd = 768;
  double dropout = 0.0;
  double softcap = 0.0;
  bool alibi = false;
  // llama only (gpt2 refuses values other than these defaults):
  int64_t intermediate_size = 0;  // SwiGLU width F; 0: 4 n_embd
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;     // rotary base; positions are document positions
  bool tie_word_embeddings = true;  // false: a separate lm_head.weight (V, C)
  int64_t sliding_window = 0;       // a query sees the last W keys of its document; 0: off
  bool is_llama() const { return architecture == Architecture::llama; }
  int64_t mlp_width() const { return intermediate_size > 0 ? intermediate_size : 4 * n_embd; }
  // Attention modifier expressions (README "Score and mask expressions"); "" is off. On CPU and
  // on CUDA (bf16, head_dim 64 or 128: the kernels compiled at run time). score_mod_params: name ->
  // YAML {shape, init, learnable}, resolved by the config into score_mod_decls.
  std::string score_mod;
  std::string mask_mod;
  std::map<std::string, std::string> score_mod_params;
  std::vector<expr::ParamDecl> score_mod_decls;
  int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int64_t head_dim() const { return n_embd / n_head; }
};

}  // namespace driftless::layers
