// Embedding lookup: rows of weight gathered by integer ids; backward scatter-adds the
// output gradient into a zero weight gradient (rows hit twice get the sum). Ids are
// checked against the vocabulary before any work (ARCHITECTURE.md "Errors"), on the host for
// both devices. The CUDA backward (engine/ops/cuda/embedding.cu) gives each weight row to
// one block that sums its positions in order: deterministic, no atomics.
#include "engine/ops/cuda/embedding.h"

#include <cstring>
#include <vector>

#include "engine/ops/op_utils.h"
#include "engine/ops/ops.h"

namespace driftless::ops {

using autograd::Context;

// ---- the CUDA body: host side of the kernels of cuda/embedding.cu ----
namespace gpu {

namespace {

Tensor embedding_forward(const Tensor& weight, const std::vector<int64_t>& ids,
                         const Shape& ids_shape) {
  const int64_t c = weight.size(1), n = int64_t(ids.size());
  Shape out_shape = ids_shape;
  out_shape.push_back(c);
  Tensor out = empty_cuda(out_shape, weight.dtype());
  if (n == 0) return out;
  Tensor dev_ids = Tensor::from_vector(ids).to(Device::cuda);
  launch_embedding_forward(weight.dtype(), weight.raw_data(), dev_ids.data<int64_t>(),
                           out.raw_data(), n, c);
  return out;
}

Tensor embedding_backward(const Tensor& g_in, const std::vector<int64_t>& ids,
                          const Shape& weight_shape, const Tensor& into) {
  const int64_t v = weight_shape[0], c = weight_shape[1];
  Tensor g = g_in.contiguous();
  // Positions grouped by id in increasing order (counting sort, stable): row r owns
  // positions[offsets[r] .. offsets[r+1]).
  std::vector<int64_t> offsets(size_t(v) + 1, 0), positions(ids.size());
  for (int64_t id : ids) ++offsets[size_t(id) + 1];
  for (int64_t r = 0; r < v; ++r) offsets[size_t(r) + 1] += offsets[size_t(r)];
  std::vector<int64_t> fill(offsets.begin(), offsets.end() - 1);
  for (size_t i = 0; i < ids.size(); ++i) positions[size_t(fill[size_t(ids[i])]++)] = int64_t(i);
  Tensor dev_off = Tensor::from_vector(offsets).to(Device::cuda);
  Tensor dev_pos = positions.empty() ? Tensor::empty({1}, DType::i64, Device::cuda)
                                     : Tensor::from_vector(positions).to(Device::cuda);
  if (into.defined()) {
    DL_CHECK(into.dtype() == DType::f32 && into.is_contiguous() && into.shape() == weight_shape,
             "embedding",
             "gradient storage must be contiguous f32 " << shape_str(weight_shape) << ", got "
                                                        << shape_str(into.shape()));
    std::vector<int64_t> hit;  // the rows some id hits, increasing
    for (int64_t r = 0; r < v; ++r)
      if (offsets[size_t(r) + 1] > offsets[size_t(r)]) hit.push_back(r);
    if (hit.empty()) return Tensor();
    Tensor dev_rows = Tensor::from_vector(hit).to(Device::cuda);
    launch_embedding_backward_into(g.dtype(), g.raw_data(), dev_off.data<int64_t>(),
                                   dev_pos.data<int64_t>(), dev_rows.data<int64_t>(),
                                   int64_t(hit.size()), into.data<float>(), c);
    return Tensor();
  }
  Tensor dw = empty_cuda(weight_shape, g.dtype());
  launch_embedding_backward(g.dtype(), g.raw_data(), dev_off.data<int64_t>(),
                            dev_pos.data<int64_t>(), dw.raw_data(), v, c);
  return dw;
}

}  // namespace

}  // namespace gpu

Tensor embedding(const Tensor& weight_in, const Tensor& ids_in) {
  const char* op = "embedding";
  detail::require_float(op, weight_in, "weight");
  detail::require_int(op, ids_in, "ids");
  DL_CHECK(weight_in.dim() == 2, op, "weight must be (V, C), got " << shape_str(weight_in.shape()));
  // ids may live on the host even for a cuda weight: they are validated there anyway, and
  // host ids spare a device-to-host copy (a sync) per call.
  const Device dev =
      detail::device_of(op, {weight_in, ids_in.device() == Device::cpu ? Tensor() : ids_in});
  const int64_t v = weight_in.size(0), c = weight_in.size(1);
  std::vector<int64_t> ids = ids_in.to_vector<int64_t>();
  for (size_t i = 0; i < ids.size(); ++i)
    DL_CHECK(ids[i] >= 0 && ids[i] < v, op,
             "id " << ids[i] << " at flat position " << i << " of ids " << shape_str(ids_in.shape())
                   << " is out of range for weight " << shape_str(weight_in.shape()));
  Tensor weight = weight_in.contiguous();
  Shape out_shape = ids_in.shape();
  out_shape.push_back(c);
  Tensor out;
  if (dev == Device::cuda)
    out = gpu::embedding_forward(weight, ids, ids_in.shape());
  else
    out = Tensor::empty(out_shape, weight.dtype());
  if (dev == Device::cpu)
    detail::dispatch_float(op, weight.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* pw = weight.data<T>();
      T* po = out.data<T>();
      for (size_t i = 0; i < ids.size(); ++i)
        std::memcpy(po + int64_t(i) * c, pw + ids[i] * c, size_t(c) * sizeof(T));
    });
  Context ctx;
  ctx.data() = std::move(ids);
  Shape sw = weight_in.shape();
  DType dt = weight_in.dtype();
  // weight_in is captured for its f32 gradient storage (autograd::accumulating_grad): on
  // cuda the row sums go straight there in f32, touching only the rows the ids hit, instead
  // of a dense (V, C) gradient in the compute dtype that the engine converts and adds.
  return autograd::record(
      op, {weight_in, ids_in}, out, std::move(ctx),
      [sw, dt, weight_in](Context& ctx, const std::vector<Tensor>& gs) {
        const auto& ids = std::any_cast<std::vector<int64_t>&>(ctx.data());
        if (gs[0].device() == Device::cuda) {
          // Into f32 storage from f32 or bf16 gradients (an f64 gradient keeps the engine's
          // conversion and add).
          const bool into_ok = gs[0].dtype() == DType::f32 || gs[0].dtype() == DType::bf16;
          return std::vector<Tensor>{
              gpu::embedding_backward(gs[0], ids, sw,
                                      into_ok ? autograd::accumulating_grad(weight_in) : Tensor()),
              Tensor()};
        }
        Tensor g = gs[0].contiguous();
        Tensor dw = Tensor::zeros(sw, dt);
        const int64_t c = sw[1];
        detail::dispatch_float("embedding", dt, [&](auto z) {
          using T = decltype(z);
          const T* pg = g.data<T>();
          T* pd = dw.data<T>();
          for (size_t i = 0; i < ids.size(); ++i)
            for (int64_t j = 0; j < c; ++j) pd[ids[i] * c + j] += pg[int64_t(i) * c + j];
        });
        return std::vector<Tensor>{dw, Tensor()};
      });
}

}  // namespace driftless::ops
