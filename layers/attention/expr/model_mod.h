// The model's modifier expressions (model.score_mod, model.mask_mod, model.score_mod_params)
// as the ScoreModSpec of an attention call: compiled once per distinct configuration and
// shared by every layer and call; parameters are constants (the config refuses learnable).
#pragma once
#include <string>
#include <vector>

#include "layers/attention/expr/expr.h"
#include "layers/attention/spec.h"

namespace driftless::layers::expr {

// The spec of a call holding the model's heads [head_offset, head_offset + its H).
ScoreModSpec model_score_mod(const std::string& score, const std::string& mask,
                             const std::vector<ParamDecl>& params, int heads, int64_t head_offset);

}  // namespace driftless::layers::expr
