// The Llama family (model.architecture llama; ARCHITECTURE.md "The model: one decoder, a
// block per family"): rotary positions applied to the fused QKV once before the route (so K
// enters every K/V buffer already rotated), RMSNorm, SwiGLU MLP, no biases; HF Llama names
// without "model." (hf_llama.h maps them).
#pragma once
#include <memory>

#include "layers/families/family.h"

namespace driftless::layers {

std::unique_ptr<Family> make_llama(const GptConfig& config);

}  // namespace driftless::layers
