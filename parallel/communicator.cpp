// Shared argument checks of the Communicator, the single-process backend, and the
// rank-order sum the MPI backend reduces with (ARCHITECTURE.md "Communicator", "Precision and
// determinism": fixed reduction orders).
#include "parallel/communicator.h"

#include <type_traits>

namespace driftless::parallel {

Communicator::Communicator(CommOptions options) : options_(options) {
  set_timeout_s(options.timeout_s);
}

void Communicator::set_timeout_s(double seconds) {
  DL_CHECK(seconds > 0, "communicator", "timeout must be > 0 seconds, got " << seconds);
  options_.timeout_s = seconds;
}

void Communicator::check_tensor(const char* op, const Tensor& t) const {
  DL_CHECK(t.defined(), op, "undefined tensor");
  DL_CHECK(t.is_contiguous(), op,
           "tensor " << shape_str(t.shape()) << " must be contiguous (strides "
                     << shape_str(t.strides()) << ")");
  DL_CHECK(t.device() == device(), op,
           backend() << " communicator moves " << device_name(device()) << " tensors, got a "
                     << device_name(t.device()) << " tensor");
}

void Communicator::check_gather_shapes(const char* op, const Tensor& big,
                                       const Tensor& small) const {
  check_tensor(op, big);
  check_tensor(op, small);
  DL_CHECK(big.dtype() == small.dtype(), op,
           "dtypes differ: " << dtype_name(big.dtype()) << " and " << dtype_name(small.dtype()));
  DL_CHECK(big.numel() == int64_t(size()) * small.numel(), op,
           "the full tensor " << shape_str(big.shape()) << " (" << big.numel()
                              << " elements) must hold " << size() << " chunks of "
                              << shape_str(small.shape()) << " (" << small.numel() << " elements)");
}

void Communicator::check_root(const char* op, int root) const {
  DL_CHECK(root >= 0 && root < size(), op,
           "root " << root << " out of range for " << size() << " ranks");
}

namespace {
// Byte ranges of two contiguous tensors intersect (a collective's buffers must not).
bool overlap(const Tensor& a, const Tensor& b) {
  const char* pa = static_cast<const char*>(a.raw_data());
  const char* pb = static_cast<const char*>(b.raw_data());
  return a.nbytes() > 0 && b.nbytes() > 0 && pa < pb + b.nbytes() && pb < pa + a.nbytes();
}
}  // namespace

void Communicator::check_all_to_all(const char* op, const Tensor& out, const Tensor& in) const {
  check_tensor(op, out);
  check_tensor(op, in);
  DL_CHECK(
      out.dtype() == in.dtype(), op,
      "dtypes differ: out " << dtype_name(out.dtype()) << " and in " << dtype_name(in.dtype()));
  DL_CHECK(out.numel() == in.numel(), op,
           "out " << shape_str(out.shape()) << " (" << out.numel() << " elements) and in "
                  << shape_str(in.shape()) << " (" << in.numel()
                  << " elements) must hold the same number of elements");
  DL_CHECK(in.numel() % size() == 0, op,
           "in " << shape_str(in.shape()) << " (" << in.numel() << " elements) must split into "
                 << size() << " equal chunks, one per rank");
  DL_CHECK(!overlap(out, in), op, "out and in overlap; all_to_all needs separate buffers");
}

Tensor Communicator::own_chunk(const Tensor& buffer) const {
  DL_CHECK(buffer.defined() && buffer.dim() >= 1, "own_chunk", "needs a tensor with dim 0");
  DL_CHECK(buffer.size(0) % size() == 0, "own_chunk",
           "dim 0 of " << shape_str(buffer.shape()) << " must divide over " << size() << " ranks");
  const int64_t n = buffer.size(0) / size();
  return buffer.narrow(0, int64_t(rank()) * n, n);
}

namespace {
struct CompletedWork final : Work {
  void wait() override {}
};
}  // namespace

std::unique_ptr<Work> Communicator::all_reduce_async(const Tensor& t) {
  all_reduce(t);
  return std::make_unique<CompletedWork>();
}

std::unique_ptr<Work> Communicator::reduce_async(const Tensor& t, int root) {
  reduce(t, root);
  return std::make_unique<CompletedWork>();
}

void Communicator::all_gather_in_place(const Tensor& buffer) {
  all_gather_into(buffer, own_chunk(buffer));
}

void Communicator::reduce_scatter_in_place(const Tensor& buffer) {
  reduce_scatter(own_chunk(buffer), buffer);
}

namespace {

class SingleProcessCommunicator final : public Communicator {
 public:
  SingleProcessCommunicator(CommOptions options, Device device)
      : Communicator(options), device_(device) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* backend() const override { return "single"; }
  Device device() const override { return device_; }

  void all_gather_into(const Tensor& out, const Tensor& in) override {
    check_gather_shapes("all_gather_into", out, in);
    copy_flat(out, in);
  }
  void reduce_scatter(const Tensor& out, const Tensor& in) override {
    check_gather_shapes("reduce_scatter", in, out);
    copy_flat(out, in);
  }
  void all_reduce(const Tensor& t) override { check_tensor("all_reduce", t); }
  void reduce(const Tensor& t, int root) override {
    check_tensor("reduce", t);
    check_root("reduce", root);
  }
  void broadcast(const Tensor& t, int root) override {
    check_tensor("broadcast", t);
    check_root("broadcast", root);
  }
  void barrier() override {}
  void all_to_all(const Tensor& out, const Tensor& in) override {
    check_all_to_all("all_to_all", out, in);
    copy_flat(out, in);
  }

 private:
  static void copy_flat(const Tensor& dst, const Tensor& src) {
    if (dst.raw_data() == src.raw_data()) return;
    dst.view({dst.numel()}).copy_(src.view({src.numel()}));
  }
  Device device_;
};

template <class T>
void sum_typed(T* out, const T* parts, int64_t n, int64_t chunks) {
  using Acc = std::conditional_t<std::is_same_v<T, bf16>, float, T>;
  for (int64_t i = 0; i < n; ++i) {
    Acc acc = convert<Acc>(parts[i]);
    for (int64_t c = 1; c < chunks; ++c) acc += convert<Acc>(parts[c * n + i]);
    out[i] = convert<T>(acc);
  }
}

}  // namespace

std::unique_ptr<Communicator> make_single_process_communicator(CommOptions options, Device device) {
  return std::make_unique<SingleProcessCommunicator>(options, device);
}

void sum_chunks_in_rank_order(const Tensor& out, const Tensor& parts, int64_t chunks) {
  DL_CHECK(chunks >= 1, "sum_chunks", "chunks must be >= 1, got " << chunks);
  DL_CHECK(out.is_contiguous() && parts.is_contiguous() && out.device() == Device::cpu &&
               parts.device() == Device::cpu,
           "sum_chunks", "needs contiguous cpu tensors");
  DL_CHECK(out.dtype() == parts.dtype(), "sum_chunks",
           "dtypes differ: " << dtype_name(out.dtype()) << " and " << dtype_name(parts.dtype()));
  DL_CHECK(parts.numel() == chunks * out.numel(), "sum_chunks",
           "parts " << shape_str(parts.shape()) << " must hold " << chunks << " chunks of "
                    << shape_str(out.shape()));
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    sum_typed<T>(out.data<T>(), parts.data<T>(), out.numel(), chunks);
  });
}

}  // namespace driftless::parallel
