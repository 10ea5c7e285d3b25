// The model's modifier expressions, compiled once (model_mod.h).
#include "layers/attention/expr/model_mod.h"

#include <map>
#include <mutex>

#include "engine/core/error.h"

namespace driftless::layers::expr {

namespace {

struct Compiled {
  std::shared_ptr<const Program> score, mask;
  std::vector<Tensor> params;
};

const Compiled& compiled(const std::string& score, const std::string& mask,
                         const std::vector<ParamDecl>& params, int heads) {
  static std::mutex mu;
  static std::map<std::string, Compiled> cache;
  std::string key = score + "\n" + mask + "\n" + std::to_string(heads);
  for (const ParamDecl& d : params) {
    key += "\n" + d.name + (d.learnable ? "!" : "");
    for (int64_t s : d.shape) key += " " + std::to_string(s);
    for (double v : d.init) key += " " + std::to_string(v);
  }
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  Compiled c;
  if (!score.empty()) c.score = compile_score_mod(score, params, heads);
  if (!mask.empty()) c.mask = compile_mask_mod(mask, params, heads);
  for (const ParamDecl& d : params) {
    std::vector<float> v(d.init.begin(), d.init.end());
    c.params.push_back(Tensor::from_vector(v).reshape(Shape(d.shape)));
  }
  return cache.emplace(key, std::move(c)).first->second;
}

}  // namespace

ScoreModSpec model_score_mod(const std::string& score, const std::string& mask,
                             const std::vector<ParamDecl>& params, int heads, int64_t head_offset,
                             const std::vector<Tensor>& learnable) {
  const Compiled& c = compiled(score, mask, params, heads);
  std::vector<Tensor> values = c.params;
  for (size_t i = 0; i < learnable.size() && i < values.size(); ++i)
    if (params[i].learnable) {
      DL_CHECK(learnable[i].defined(), "score_mod",
               "learnable parameter '" << params[i].name << "' has no tensor");
      values[i] = learnable[i];
    }
  return ScoreModSpec::make_expression(c.score, c.mask, values, head_offset);
}

}  // namespace driftless::layers::expr
