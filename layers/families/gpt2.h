// The GPT-2 family (model.architecture gpt2; ARCHITECTURE.md "The model: one decoder, a
// block per family"): learned positions, pre-LN blocks with biases, GELU MLP, head tied to
// the token embedding; HF GPT-2 names without "transformer." (hf_gpt2.h maps them).
#pragma once
#include <memory>

#include "layers/families/family.h"

namespace driftless::layers {

std::unique_ptr<Family> make_gpt2(const GptConfig& config);

}  // namespace driftless::layers
