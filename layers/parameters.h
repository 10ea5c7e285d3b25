// Parameters and their gradients in two flat f32 slabs allocated once (DESIGN.md "Memory
// in a step"), with named views. A parameter view is an autograd leaf whose .grad is the
// matching view of the gradient slab, so backward accumulates straight into the slab and
// one reduction and one optimizer pass cover every parameter.
#pragma once
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace driftless::layers {

struct Parameter {
  std::string name;
  Tensor value;  // view of the parameter slab, requires grad
  Tensor grad;   // view of the gradient slab
  int64_t begin = 0, end = 0;  // element range in the slabs
  bool weight_decay = true;    // false for biases and layer-norm gains
};

class ParameterSlab {
 public:
  // Declare every parameter first, then allocate() once.
  void declare(const std::string& name, const Shape& shape, bool weight_decay);
  void allocate(Device device = Device::cpu);

  const Tensor& params() const { return params_; }  // (numel) f32
  const Tensor& grads() const { return grads_; }    // (numel) f32
  int64_t numel() const { return numel_; }
  const std::vector<Parameter>& parameters() const { return parameters_; }
  const Parameter& get(const std::string& name) const;
  const Tensor& operator[](const std::string& name) const { return get(name).value; }
  void zero_grads() const { grads_.zero_(); }

 private:
  std::vector<Parameter> parameters_;
  std::vector<Shape> shapes_;
  int64_t numel_ = 0;
  Tensor params_, grads_;
};

}  // namespace driftless::layers
