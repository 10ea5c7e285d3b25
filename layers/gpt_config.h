// The shape of a GPT-2 model. Also the `model:` section of a run config
// (train/config.h uses this struct directly: one place per concept).
#pragma once
#include <cstdint>

namespace driftless::layers {

struct GptConfig {
  int64_t vocab_size = 50257;
  int64_t n_positions = 1024;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_kv_head = 0;  // 0: n_head
  int64_t n_embd = 768;
  double dropout = 0.0;
  double softcap = 0.0;
  bool alibi = false;
  int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int64_t head_dim() const { return n_embd / n_head; }
};

}  // namespace driftless::layers
