// Step FLOPs and GPU peaks (flops.h).
#include "train/flops.h"

#include "engine/core/device_ops.h"

namespace driftless::train {

double step_flops(const layers::GptConfig& m, const data::GlobalBatch& batch) {
  const double C = double(m.n_embd), L = double(m.n_layer);
  const double qkv = double(m.n_head + 2 * m.kv_heads()) * double(m.head_dim());
  // Weights of the matrix products per layer: qkv, attention projection, the MLP's (GELU:
  // C -> 4C -> C; SwiGLU: C -> 2F -> F -> C).
  const double mlp = m.is_llama() ? 3 * C * double(m.mlp_width()) : 8 * C * C;
  const double per_layer = qkv * C + C * C + mlp;
  const double matmul_params = L * per_layer + double(m.vocab_size) * C;  // + the head
  double tokens = 0, pairs = 0;
  for (const auto& s : batch.sequences) {
    tokens += double(s.tokens.size());
    for (int32_t n : s.document_lengths) {
      // Query i sees min(i + 1, W) keys under a sliding window W.
      const double w = m.sliding_window > 0 ? double(m.sliding_window) : double(n), k = double(n);
      pairs += w >= k ? 0.5 * k * (k + 1) : 0.5 * w * (w + 1) + (k - w) * w;
    }
  }
  // Forward: 2 flops per multiply-add. Attention: QK^T and PV, each 2 D per pair and head.
  const double forward = 2 * matmul_params * tokens +
                         L * 4 * double(m.n_head) * double(m.head_dim()) * pairs;
  return 3 * forward;
}

double cuda_peak_flops(DType compute) {
  const std::string name = cuda::device_name();
  const bool bf16 = compute == DType::bf16;
  // Dense peaks from the vendors' data sheets (SXM parts).
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos ||
      name.find("GH200") != std::string::npos)
    return bf16 ? 989.4e12 : 66.9e12;
  if (name.find("A100") != std::string::npos) return bf16 ? 312e12 : 19.5e12;
  return 0;
}

}  // namespace driftless::train
