// The model's modifier expressions (model.score_mod, model.mask_mod, model.score_mod_params)
// as the ScoreModSpec of an attention call: compiled once per distinct configuration and
// shared by every layer and call. Fixed parameters are constants made once; a learnable one
// is the calling layer's tensor (its slab parameter), which the attention op differentiates.
#pragma once
#include <string>
#include <vector>

#include "layers/attention/expr/expr.h"
#include "layers/attention/spec.h"

namespace driftless::layers::expr {

// The spec of a call holding the model's heads [head_offset, head_offset + its H).
// learnable: empty, or one tensor per declaration (defined for the learnable ones).
ScoreModSpec model_score_mod(const std::string& score, const std::string& mask,
                             const std::vector<ParamDecl>& params, int heads, int64_t head_offset,
                             const std::vector<Tensor>& learnable = {});

}  // namespace driftless::layers::expr
