// Model FLOPs of a training step and the GPU's peak, for the tokens/s and MFU that train
// and bench report. Model FLOPs follow the PaLM / llm.c convention: 3x the
// forward (no recomputation counted), matrix products only, causal attention counted by
// the (query, key) pairs each document really has, not S^2/2.
#pragma once
#include <string>

#include "data/sampler.h"
#include "engine/core/dtype.h"
#include "layers/gpt_config.h"

namespace driftless::train {

// Forward + backward FLOPs of one global batch.
double step_flops(const layers::GptConfig& model, const data::GlobalBatch& batch);
// Peak dense FLOP/s of the current GPU in the compute dtype ("f32" without TF32, or "bf16"),
// looked up from its name; 0 when unknown (MFU is then not reported).
double cuda_peak_flops(DType compute);

}  // namespace driftless::train
