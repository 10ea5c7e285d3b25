// The value-type Tensor: a shared descriptor (storage, shape, strides, offset, dtype)
// plus the autograd fields engine/autograd fills in. Copying a Tensor copies the handle,
// not the data. View methods here (narrow, reshape, transpose, permute) share storage and
// are NOT recorded by autograd: the differentiable versions live in engine/ops.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/allocator.h"
#include "engine/core/dtype.h"
#include "engine/core/error.h"

namespace driftless {

namespace autograd {
class Node;
}

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& shape);
int64_t shape_numel(const Shape& shape);

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;  // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;
  // Autograd (engine/autograd): a leaf has requires_grad and no grad_fn; an interior
  // tensor has the node that made it and which of that node's outputs it is.
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<autograd::Node> grad_fn;
  int output_nr = 0;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Creation. Memory of empty() is uninitialised.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu);
  static Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32,
                     Device device = Device::cpu);
  static Tensor arange(int64_t n, DType dtype = DType::i64);
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);
  template <class T>
  static Tensor from_vector(const std::vector<T>& values) {
    return from_vector(values, Shape{int64_t(values.size())});
  }
  // Seeded fills: the same (seed, shape, dtype) gives the same numbers on every machine
  // (counter-based generator, no std:: distributions).
  static Tensor randn(const Shape& shape, uint64_t seed, DType dtype = DType::f32,
                      double mean = 0.0, double std = 1.0);
  static Tensor uniform(const Shape& shape, uint64_t seed, double low, double high,
                        DType dtype = DType::f32);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  int64_t offset() const { return impl().offset; }
  int64_t dim() const { return int64_t(impl().shape.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return shape_numel(impl().shape); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage ? impl().storage->device() : Device::cpu; }
  bool is_contiguous() const;
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype()); }

  // Typed pointer to the first element (at offset). Checks that T matches the dtype.
  template <class T>
  T* data() const;
  void* raw_data() const;
  // The single element of a one-element tensor, converted to double.
  double item() const;
  // Element at a multi-index (any dtype, cpu only), converted to double; for tests.
  double at(std::initializer_list<int64_t> index) const;
  // All elements in row-major order as T (converting), cpu or cuda.
  template <class T>
  std::vector<T> to_vector() const;

  // Views (share storage, no copy, not recorded by autograd).
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;  // drops dim
  Tensor view(const Shape& shape) const;  // throws if strides cannot express it
  Tensor reshape(const Shape& shape) const;  // view when possible, else a copy
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  // The inverse of narrow: parts that are adjacent narrows along dim of one tensor (same
  // storage, shape but for dim, and strides; each starting where the one before ends) as
  // one view spanning them all. Undefined when they are not.
  static Tensor joined(const std::vector<Tensor>& parts, int64_t dim);

  // Copies.
  Tensor contiguous() const;  // self when already contiguous
  Tensor clone() const;  // always a fresh contiguous copy
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;
  Tensor to(Device device, DType dtype) const;
  // Elementwise copy from src (same shape; converts dtype; any device pair).
  void copy_(const Tensor& src) const;
  void fill_(double value) const;
  void zero_() const { fill_(0.0); }
  // this += src (same shape and dtype); used for gradient accumulation.
  void add_(const Tensor& src) const;
  // A fresh contiguous this + src (same shape, dtype and device): clone() then add_(src),
  // the same bits, in one pass on cuda (gradient sums of two consumers).
  Tensor plus(const Tensor& src) const;

  bool shares_storage(const Tensor& other) const {
    return defined() && other.defined() && impl_->storage == other.impl_->storage;
  }

  // Autograd fields (see engine/autograd/autograd.h for the rules).
  bool requires_grad() const { return defined() && impl_->requires_grad; }
  Tensor& set_requires_grad(bool value = true);
  Tensor grad() const;  // undefined until backward reached this leaf
  void set_grad(const Tensor& grad) const;
  void zero_grad() const;
  const std::shared_ptr<autograd::Node>& grad_fn() const { return impl().grad_fn; }
  int output_nr() const { return impl().output_nr; }
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  // Same storage and view, no autograd history.
  Tensor detach() const;

  std::string str(int64_t max_per_dim = 6) const;
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  TensorImpl& impl() const {
    DL_CHECK(impl_ != nullptr, "tensor", "use of an undefined tensor");
    return *impl_;
  }

 private:
  Tensor make_view(Shape shape, Shape strides, int64_t offset) const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Row-major strides of a shape.
Shape contiguous_strides(const Shape& shape);
// Normalises a possibly negative dim against rank; throws naming op.
int64_t normalize_dim(int64_t dim, int64_t rank, const char* op);

// ---- template definitions ----

template <class T>
T* Tensor::data() const {
  DL_CHECK(dtype_of<T> == dtype(), "data",
           "tensor holds " << dtype_name(dtype()) << ", asked for " << dtype_name(dtype_of<T>));
  return static_cast<T*>(raw_data());
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  DL_CHECK(int64_t(values.size()) == shape_numel(shape), "from_vector",
           values.size() << " values do not fill shape " << shape_str(shape));
  Tensor t = empty(shape, dtype_of<T>);
  T* p = t.data<T>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = to(Device::cpu, dtype_of<T>).contiguous();
  const T* p = c.data<T>();
  return std::vector<T>(p, p + c.numel());
}

}  // namespace driftless
