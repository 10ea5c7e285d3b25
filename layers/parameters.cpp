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

void ParameterSlab::allocate(Device device, DType compute_dtype) {
  DL_CHECK(compute_dtype == DType::f32 || compute_dtype == DType::bf16, "parameters",
           "compute dtype must be f32 or bf16, got " << dtype_name(compute_dtype));
  compute_dtype_ = compute_dtype;
  params_ = Tensor::zeros({numel_}, DType::f32, device);
  grads_ = Tensor::zeros({numel_}, DType::f32, device);
  if (compute_dtype != DType::f32) compute_ = Tensor::zeros({numel_}, compute_dtype, device);
  for (size_t i = 0; i < parameters_.size(); ++i) {
    Parameter& p = parameters_[i];
    const int64_t n = p.end - p.begin;
    p.value = params_.narrow(0, p.begin, n).view(shapes_[i]);
    p.grad = grads_.narrow(0, p.begin, n).view(shapes_[i]);
    p.compute = compute_.defined() ? compute_.narrow(0, p.begin, n).view(shapes_[i]) : p.value;
    p.compute.set_requires_grad(true);
    p.compute.set_grad(p.grad);
  }
}

void ParameterSlab::sync_compute() const {
  if (compute_.defined()) compute_.copy_(params_);
}

const Parameter& ParameterSlab::get(const std::string& name) const {
  for (const auto& p : parameters_)
    if (p.name == name) return p;
  DL_FAIL("parameters", "no parameter named '" << name << "'");
}

}  // namespace driftless::layers
