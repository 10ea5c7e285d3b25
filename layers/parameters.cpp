// ParameterSlab (see parameters.h).
#include "layers/parameters.h"

namespace driftless::layers {

void ParameterSlab::declare(const std::string& name, const Shape& shape, bool weight_decay) {
  DL_CHECK(!params_.defined(), "parameters", "declare '" << name << "' after allocate()");
  for (const auto& p : parameters_)
    DL_CHECK(p.name != name, "parameters", "parameter '" << name << "' declared twice");
  Parameter p;
  p.name = name;
  p.begin = numel_;
  p.end = numel_ + shape_numel(shape);
  p.weight_decay = weight_decay;
  numel_ = p.end;
  parameters_.push_back(p);
  shapes_.push_back(shape);
}

void ParameterSlab::allocate(Device device) {
  params_ = Tensor::zeros({numel_}, DType::f32, device);
  grads_ = Tensor::zeros({numel_}, DType::f32, device);
  for (size_t i = 0; i < parameters_.size(); ++i) {
    Parameter& p = parameters_[i];
    p.value = params_.narrow(0, p.begin, p.end - p.begin).view(shapes_[i]);
    p.value.set_requires_grad(true);
    p.grad = grads_.narrow(0, p.begin, p.end - p.begin).view(shapes_[i]);
    p.value.set_grad(p.grad);
  }
}

const Parameter& ParameterSlab::get(const std::string& name) const {
  for (const auto& p : parameters_)
    if (p.name == name) return p;
  DL_FAIL("parameters", "no parameter named '" << name << "'");
}

}  // namespace driftless::layers
