// Tensor creation, views, copies and the CPU bodies of copy/fill/add_ (see tensor.h).
#include "engine/core/tensor.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <optional>
#include <sstream>

#include "engine/core/checked_size.h"
#include "engine/core/device_ops.h"
#include "engine/core/random.h"

namespace driftless {

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

int64_t normalize_dim(int64_t dim, int64_t rank, const char* op) {
  int64_t d = dim < 0 ? dim + rank : dim;
  DL_CHECK(d >= 0 && d < rank, op, "dim " << dim << " out of range for a tensor of rank " << rank);
  return d;
}

// ---- creation ----

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t s : shape)
    DL_CHECK(s >= 0, "empty", "negative size in shape " << shape_str(shape));
  DL_CHECK(checked_product(shape, int64_t(dtype_size(dtype))), "empty",
           "expected a shape whose bytes fit in 63 bits, got " << shape_str(shape) << " of "
                                                               << dtype_name(dtype));
  auto impl = std::make_shared<TensorImpl>();
  Allocator& alloc = device == Device::cpu ? allocator_for(Device::cpu) : cuda::allocator();
  impl->storage = std::make_shared<Storage>(alloc, size_t(shape_numel(shape)) * dtype_size(dtype));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  return full(shape, 0.0, dtype, device);
}

Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) {
  return full(shape, 1.0, dtype, device);
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::arange(int64_t n, DType dtype) {
  Tensor t = empty({n}, dtype);
  visit_dtype(dtype, [&](auto z) {
    using T = decltype(z);
    T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = convert<T>(double(i));
  });
  return t;
}

namespace {
template <class Gen>
Tensor generate(const Shape& shape, DType dtype, Gen gen) {
  DL_CHECK(is_floating(dtype), "random", "random fill needs a floating dtype, got "
                                             << dtype_name(dtype));
  Tensor t = Tensor::empty(shape, dtype);
  visit_dtype(dtype, [&](auto z) {
    using T = decltype(z);
    T* p = t.data<T>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = convert<T>(gen(uint64_t(i)));
  });
  return t;
}
}  // namespace

Tensor Tensor::randn(const Shape& shape, uint64_t seed, DType dtype, double mean, double std) {
  return generate(shape, dtype, [&](uint64_t i) { return mean + std * random::normal(seed, i); });
}

Tensor Tensor::uniform(const Shape& shape, uint64_t seed, double low, double high, DType dtype) {
  return generate(shape, dtype,
                  [&](uint64_t i) { return low + (high - low) * random::uniform01(seed, i); });
}

// ---- properties ----

int64_t Tensor::size(int64_t d) const { return shape()[normalize_dim(d, dim(), "size")]; }

bool Tensor::is_contiguous() const {
  const auto& sh = shape();
  const auto& st = strides();
  int64_t expected = 1;
  for (size_t i = sh.size(); i-- > 0;) {
    if (sh[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= sh[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  auto& im = impl();
  return static_cast<char*>(im.storage->data()) + im.offset * int64_t(dtype_size(im.dtype));
}

double Tensor::item() const {
  DL_CHECK(numel() == 1, "item", "tensor of shape " << shape_str(shape()) << " is not one element");
  return to_vector<double>()[0];
}

double Tensor::at(std::initializer_list<int64_t> index) const {
  DL_CHECK(device() == Device::cpu, "at", "element access needs a cpu tensor");
  DL_CHECK(int64_t(index.size()) == dim(), "at",
           index.size() << " indices for a tensor of rank " << dim());
  int64_t off = 0, d = 0;
  for (int64_t i : index) {
    DL_CHECK(i >= 0 && i < shape()[d], "at",
             "index " << i << " out of range for dim " << d << " of size " << shape()[d]);
    off += i * strides()[d++];
  }
  return visit_dtype(dtype(), [&](auto z) {
    using T = decltype(z);
    return convert<double>(static_cast<const T*>(raw_data())[off]);
  });
}

// ---- views ----

Tensor Tensor::make_view(Shape shape, Shape strides, int64_t offset) const {
  auto im = std::make_shared<TensorImpl>();
  im->storage = impl().storage;
  im->shape = std::move(shape);
  im->strides = std::move(strides);
  im->offset = offset;
  im->dtype = dtype();
  return Tensor(std::move(im));
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = normalize_dim(d, dim(), "narrow");
  DL_CHECK(start >= 0 && length >= 0 && start + length <= shape()[d], "narrow",
           "range [" << start << ", " << start + length << ") out of bounds for dim " << d
                     << " of shape " << shape_str(shape()));
  Shape sh = shape();
  sh[d] = length;
  return make_view(sh, strides(), offset() + start * strides()[d]);
}

Tensor Tensor::joined(const std::vector<Tensor>& parts, int64_t dim) {
  if (parts.empty() || !parts[0].defined() || parts[0].dim() == 0) return Tensor();
  const Tensor& first = parts[0];
  const int64_t d = normalize_dim(dim, first.dim(), "joined");
  Shape sh = first.shape();
  for (size_t i = 1; i < parts.size(); ++i) {
    const Tensor& t = parts[i];
    if (!t.shares_storage(first) || t.dtype() != first.dtype() || t.dim() != first.dim() ||
        t.strides() != first.strides())
      return Tensor();
    for (int64_t k = 0; k < t.dim(); ++k)
      if (k != d && t.size(k) != first.size(k)) return Tensor();
    if (t.offset() != first.offset() + sh[d] * first.strides()[d]) return Tensor();
    sh[d] += t.size(d);
  }
  return first.make_view(sh, first.strides(), first.offset());
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = normalize_dim(d, dim(), "select");
  DL_CHECK(index >= 0 && index < shape()[d], "select",
           "index " << index << " out of range for dim " << d << " of shape "
                    << shape_str(shape()));
  Shape sh = shape(), st = strides();
  int64_t off = offset() + index * st[d];
  sh.erase(sh.begin() + d);
  st.erase(st.begin() + d);
  return make_view(sh, st, off);
}

namespace {
// Resolves one -1 in a target shape.
Shape infer_shape(const Shape& target, int64_t numel, const Shape& from) {
  Shape out = target;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      DL_CHECK(infer < 0, "reshape", "more than one -1 in " << shape_str(target));
      infer = int64_t(i);
    } else {
      known *= out[i];
    }
  }
  if (infer >= 0) {
    DL_CHECK(known > 0 && numel % known == 0, "reshape",
             "cannot reshape " << shape_str(from) << " into " << shape_str(target));
    out[infer] = numel / known;
  }
  DL_CHECK(shape_numel(out) == numel, "reshape",
           "cannot reshape " << shape_str(from) << " (" << numel << " elements) into "
                             << shape_str(target));
  return out;
}
}  // namespace

Tensor Tensor::view(const Shape& target) const {
  Shape sh = infer_shape(target, numel(), shape());
  DL_CHECK(is_contiguous(), "view",
           "tensor of shape " << shape_str(shape()) << " is not contiguous; use reshape");
  return make_view(sh, contiguous_strides(sh), offset());
}

namespace {
// Strides that make `to` a view of a tensor of shape `from` with strides `st` (the same
// elements in row-major order), or nothing when no view can: each run of dims that is
// contiguous with itself in memory must map onto whole dims of `to` (PyTorch's rule).
std::optional<Shape> view_strides(const Shape& from, const Shape& st, const Shape& to) {
  int64_t numel = 1;
  for (int64_t d : from) numel *= d;
  if (numel == 0 || from.empty()) return contiguous_strides(to);
  Shape out(to.size(), 1);
  int64_t view_d = int64_t(to.size()) - 1, base = st.back(), run = 1, view_run = 1;
  for (int64_t d = int64_t(from.size()) - 1; d >= 0; --d) {
    run *= from[size_t(d)];
    if (d == 0 || (from[size_t(d - 1)] != 1 && st[size_t(d - 1)] != run * base)) {
      while (view_d >= 0 && (view_run < run || to[size_t(view_d)] == 1)) {
        out[size_t(view_d)] = view_run * base;
        view_run *= to[size_t(view_d)];
        --view_d;
      }
      if (view_run != run) return std::nullopt;
      if (d > 0) {
        base = st[size_t(d - 1)];
        run = view_run = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}
}  // namespace

Tensor Tensor::reshape(const Shape& target) const {
  if (is_contiguous()) return view(target);
  const Shape sh = infer_shape(target, numel(), shape());
  if (std::optional<Shape> st = view_strides(shape(), strides(), sh))
    return make_view(sh, *st, offset());
  return contiguous().view(sh);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  d0 = normalize_dim(d0, dim(), "transpose");
  d1 = normalize_dim(d1, dim(), "transpose");
  Shape sh = shape(), st = strides();
  std::swap(sh[d0], sh[d1]);
  std::swap(st[d0], st[d1]);
  return make_view(sh, st, offset());
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  DL_CHECK(int64_t(dims.size()) == dim(), "permute",
           dims.size() << " dims given for a tensor of rank " << dim());
  Shape sh(dims.size()), st(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = normalize_dim(dims[i], dim(), "permute");
    DL_CHECK(!seen[d], "permute", "dim " << d << " appears twice");
    seen[d] = true;
    sh[i] = shape()[d];
    st[i] = strides()[d];
  }
  return make_view(sh, st, offset());
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = normalize_dim(d, dim() + 1, "unsqueeze");
  Shape sh = shape(), st = strides();
  int64_t stride = d < dim() ? st[d] * sh[d] : 1;
  sh.insert(sh.begin() + d, 1);
  st.insert(st.begin() + d, stride);
  return make_view(sh, st, offset());
}

Tensor Tensor::squeeze(int64_t d) const {
  d = normalize_dim(d, dim(), "squeeze");
  DL_CHECK(shape()[d] == 1, "squeeze", "dim " << d << " has size " << shape()[d] << ", not 1");
  Shape sh = shape(), st = strides();
  sh.erase(sh.begin() + d);
  st.erase(st.begin() + d);
  return make_view(sh, st, offset());
}

// ---- copies (CPU bodies) ----

namespace {
// Calls f(element offset) for every element of t in row-major order.
template <class F>
void for_each_offset(const Tensor& t, F&& f) {
  const int64_t n = t.numel();
  if (n == 0) return;
  if (t.is_contiguous()) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
  const auto& sh = t.shape();
  const auto& st = t.strides();
  const int64_t rank = t.dim();
  std::vector<int64_t> idx(rank, 0);
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    f(off);
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++idx[d] < sh[d]) {
        off += st[d];
        break;
      }
      off -= st[d] * (sh[d] - 1);
      idx[d] = 0;
    }
  }
}

void cpu_copy(const Tensor& dst, const Tensor& src) {
  visit_dtype(dst.dtype(), [&](auto zd) {
    using D = decltype(zd);
    visit_dtype(src.dtype(), [&](auto zs) {
      using S = decltype(zs);
      D* pd = static_cast<D*>(dst.raw_data());
      const S* ps = static_cast<const S*>(src.raw_data());
      if (dst.is_contiguous() && src.is_contiguous()) {
        for (int64_t i = 0, n = dst.numel(); i < n; ++i) pd[i] = convert<D>(ps[i]);
        return;
      }
      std::vector<int64_t> src_offsets;
      src_offsets.reserve(size_t(src.numel()));
      for_each_offset(src, [&](int64_t o) { src_offsets.push_back(o); });
      size_t k = 0;
      for_each_offset(dst, [&](int64_t o) { pd[o] = convert<D>(ps[src_offsets[k++]]); });
    });
  });
}
}  // namespace

void Tensor::copy_(const Tensor& src) const {
  DL_CHECK(shape() == src.shape(), "copy_",
           "shape " << shape_str(src.shape()) << " does not match destination "
                    << shape_str(shape()));
  if (device() == Device::cpu && src.device() == Device::cpu) {
    cpu_copy(*this, src);
  } else {
    cuda::copy(*this, src);
  }
}

void Tensor::fill_(double value) const {
  if (device() != Device::cpu) return cuda::fill(*this, value);
  visit_dtype(dtype(), [&](auto z) {
    using T = decltype(z);
    T* p = static_cast<T*>(raw_data());
    T v = convert<T>(value);
    for_each_offset(*this, [&](int64_t o) { p[o] = v; });
  });
}

Tensor Tensor::plus(const Tensor& src) const {
  DL_CHECK(shape() == src.shape() && dtype() == src.dtype() && device() == src.device(), "plus",
           "cannot add " << shape_str(src.shape()) << " " << dtype_name(src.dtype()) << " to "
                         << shape_str(shape()) << " " << dtype_name(dtype()));
  if (device() != Device::cpu) {
    Tensor out = Tensor::empty(shape(), dtype(), device());
    if (cuda::add_units(out, *this, src)) return out;
  }
  Tensor out = clone();
  out.add_(src);
  return out;
}

void Tensor::add_(const Tensor& src) const {
  DL_CHECK(shape() == src.shape() && dtype() == src.dtype() && device() == src.device(), "add_",
           "cannot add " << shape_str(src.shape()) << " " << dtype_name(src.dtype()) << " into "
                         << shape_str(shape()) << " " << dtype_name(dtype()));
  if (device() != Device::cpu) return cuda::add_(*this, src);
  Tensor s = src.contiguous();
  visit_dtype(dtype(), [&](auto z) {
    using T = decltype(z);
    T* p = static_cast<T*>(raw_data());
    const T* q = s.data<T>();
    int64_t k = 0;
    for_each_offset(*this, [&](int64_t o) {
      p[o] = convert<T>(convert<double>(p[o]) + convert<double>(q[k++]));
    });
  });
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(Device dev) const { return to(dev, dtype()); }
Tensor Tensor::to(DType dt) const { return to(device(), dt); }
Tensor Tensor::to(Device dev, DType dt) const {
  if (dev == device() && dt == dtype()) return *this;
  Tensor out = empty(shape(), dt, dev);
  out.copy_(*this);
  return out;
}

// ---- autograd fields ----

Tensor& Tensor::set_requires_grad(bool value) {
  DL_CHECK(!value || is_floating(dtype()), "requires_grad",
           "only floating tensors can require grad, got " << dtype_name(dtype()));
  impl().requires_grad = value;
  return *this;
}

Tensor Tensor::grad() const { return Tensor(impl().grad); }

void Tensor::set_grad(const Tensor& grad) const { impl().grad = grad.impl_ptr(); }

void Tensor::zero_grad() const { impl().grad.reset(); }

Tensor Tensor::detach() const { return make_view(shape(), strides(), offset()); }

// ---- printing ----

std::string Tensor::str(int64_t max_per_dim) const {
  std::ostringstream os;
  if (!defined()) return "Tensor(undefined)";
  Tensor c = to(Device::cpu, DType::f64).contiguous();
  const double* p = c.data<double>();
  const Shape& sh = c.shape();
  std::function<void(int64_t, int64_t)> rec = [&](int64_t d, int64_t base) {
    if (d == c.dim()) {
      os << p[base];
      return;
    }
    os << "[";
    int64_t stride = c.strides()[d];
    for (int64_t i = 0; i < sh[d]; ++i) {
      if (sh[d] > max_per_dim && i == max_per_dim / 2) {
        os << "..., ";
        i = sh[d] - max_per_dim / 2;
      }
      rec(d + 1, base + i * stride);
      if (i + 1 < sh[d]) os << ", ";
    }
    os << "]";
  };
  os << "Tensor(";
  rec(0, 0);
  os << ", shape=" << shape_str(sh) << ", dtype=" << dtype_name(dtype())
     << ", device=" << device_name(device());
  if (requires_grad()) os << ", requires_grad";
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace driftless
