// Parameters and their gradients in two flat f32 slabs allocated once (ARCHITECTURE.md "Memory
// in a step"), with named views. The model computes with `compute` views: autograd leaves
// whose .grad is the matching f32 view of the gradient slab, so backward accumulates
// straight into the slab (in f32, whatever the compute dtype) and one reduction and one
// optimizer pass cover every parameter. With an f32 compute dtype `compute` IS the master
// `value`; with bf16 it views a third slab, a rounded copy of the f32 masters that
// sync_compute() refreshes after the masters change (optimizer step, load, init).
#pragma once
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace driftless::layers {

struct Parameter {
  std::string name;
  Tensor value;    // f32 master: view of the parameter slab
  Tensor compute;  // what the model computes with (== value for f32), requires grad
  Tensor grad;     // f32 view of the gradient slab
  int64_t begin = 0, end = 0;  // element range in the slabs
  bool weight_decay = true;    // false for biases and layer-norm gains
};

class ParameterSlab {
 public:
  // Declare every parameter first, then allocate() once.
  void declare(const std::string& name, const Shape& shape, bool weight_decay);
  void allocate(Device device = Device::cpu, DType compute_dtype = DType::f32);
  // Rounds the f32 masters into the compute slab (nothing to do for f32).
  void sync_compute() const;
  DType compute_dtype() const { return compute_dtype_; }

  const Tensor& params() const { return params_; }  // (numel) f32
  const Tensor& grads() const { return grads_; }    // (numel) f32
  // (numel) in the compute dtype when it is not f32 (the rounded copy), else undefined.
  const Tensor& compute() const { return compute_; }
  int64_t numel() const { return numel_; }
  const std::vector<Parameter>& parameters() const { return parameters_; }
  const Parameter& get(const std::string& name) const;
  // The tensor the model computes with.
  const Tensor& operator[](const std::string& name) const { return get(name).compute; }
  void zero_grads() const { grads_.zero_(); }

 private:
  std::vector<Parameter> parameters_;
  std::vector<Shape> shapes_;
  int64_t numel_ = 0;
  DType compute_dtype_ = DType::f32;
  Tensor params_, grads_, compute_;
};

}  // namespace driftless::layers
