// The parameter declarer and the family registry (family.h).
#include "layers/families/family.h"

#include "engine/core/error.h"
#include "layers/families/gpt2.h"
#include "layers/families/llama.h"

namespace driftless::layers {

void ParameterDeclarer::add(const std::string& name, const Shape& shape, bool decay,
                            ParameterInit init) {
  slab_.declare(name, shape, decay);
  inits_.push_back(std::move(init));
}

void ParameterDeclarer::matrix(const std::string& name, const Shape& shape, double std) {
  add(name, shape, true, {ParameterInit::Kind::normal, std, {}});
}

void ParameterDeclarer::gain(const std::string& name, const Shape& shape) {
  add(name, shape, false, {ParameterInit::Kind::ones, 0, {}});
}

void ParameterDeclarer::bias(const std::string& name, const Shape& shape) {
  add(name, shape, false, {ParameterInit::Kind::zeros, 0, {}});
}

void ParameterDeclarer::values(const std::string& name, const Shape& shape,
                               std::vector<float> init) {
  add(name, shape, false, {ParameterInit::Kind::values, 0, std::move(init)});
}

std::unique_ptr<Family> make_family(const GptConfig& config) {
  switch (config.architecture) {
    case Architecture::gpt2:
      return make_gpt2(config);
    case Architecture::llama:
      return make_llama(config);
  }
  DL_FAIL("gpt", "unknown model.architecture " << int(config.architecture));
}

}  // namespace driftless::layers
