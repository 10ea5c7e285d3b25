// Rotary position embedding of a fused QKV row (HF Llama's rotate_half convention) as one
// node: the forward rotates each Q and K head by its token's angles, the backward by the
// opposite angles (the transpose), V passes through. CUDA body in engine/ops/cuda/rope.cu.
#include "engine/ops/cuda/rope.h"

#include <cmath>
#include <vector>

#include "engine/ops/op_utils.h"
#include "engine/ops/ops.h"
#include "engine/ops/rope_freq.h"

namespace driftless::ops {

using autograd::Context;

// ---- the CUDA body: host side of the kernels of cuda/rope.cu ----
namespace gpu {

namespace {

Tensor rope(const Tensor& x, const Tensor& positions, int64_t rotated, int64_t d,
            const std::vector<float>& inv_freq, bool inverse) {
  DL_CHECK(positions.device() == Device::cuda && positions.dtype() == DType::i32 &&
               positions.is_contiguous(),
           "rope", "positions must be contiguous i32 on the GPU");
  DL_CHECK(inv_freq.size() <= size_t(kRopeMaxHalf), "rope",
           "head dim " << d << " is over the cuda kernel's " << 2 * kRopeMaxHalf);
  RopeFreqs freqs;
  for (size_t i = 0; i < inv_freq.size(); ++i) freqs.inv_freq[i] = inv_freq[i];
  Tensor out = empty_cuda(x.shape(), x.dtype());
  launch_rope(x.dtype(), x.raw_data(), positions.data<int32_t>(), out.raw_data(), x.size(0),
              x.size(1), rotated, d, freqs, inverse);
  return out;
}

}  // namespace

}  // namespace gpu

namespace {

// x (N, W) contiguous, W = heads_total * d, of which the first `rotated` heads turn: out[i] =
// x[i] c - x[i + d/2] s', out[i + d/2] = x[i + d/2] c + x[i] s' with s' = s (forward) or -s
// (inverse, the backward's transpose). The angle is f32 pos * inv_freq as HF computes it; f32
// takes its cos/sin in f32, f64 takes the cos/sin of the same f32 angle in double (so f64 is
// the exact reference of the f32 op, not a rotation by other angles).
Tensor rope_rows(const Tensor& x, const Tensor& positions, int64_t rotated, int64_t d, double theta,
                 bool inverse) {
  const std::vector<float> inv_freq = detail::rope_inv_freq(d, theta);
  if (x.device() == Device::cuda) return gpu::rope(x, positions, rotated, d, inv_freq, inverse);
  const int64_t n = x.size(0), w = x.size(1), half = d / 2;
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  const int32_t* pos = positions.data<int32_t>();
  detail::dispatch_float("rope", x.dtype(), [&](auto z) {
    using T = decltype(z);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    std::vector<T> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
    for (int64_t r = 0; r < n; ++r) {
      const float p = float(pos[r]);
      for (int64_t i = 0; i < half; ++i) {
        const float angle = p * inv_freq[size_t(i)];
        cs[size_t(i)] = std::cos(T(angle));
        sn[size_t(i)] = inverse ? -std::sin(T(angle)) : std::sin(T(angle));
      }
      const T* xr = px + r * w;
      T* yr = po + r * w;
      for (int64_t h = 0; h < rotated; ++h)
        for (int64_t i = 0; i < half; ++i) {
          const T a = xr[h * d + i], b = xr[h * d + half + i];
          yr[h * d + i] = a * cs[size_t(i)] - b * sn[size_t(i)];
          yr[h * d + half + i] = b * cs[size_t(i)] + a * sn[size_t(i)];
        }
      for (int64_t i = rotated * d; i < w; ++i) yr[i] = xr[i];
    }
  });
  return out;
}

}  // namespace

Tensor rope(const Tensor& qkv_in, const Tensor& positions_in, int64_t heads, int64_t kv_heads,
            double theta) {
  const char* op = "rope";
  detail::require_float(op, qkv_in, "qkv");
  detail::require_defined(op, positions_in, "positions");
  DL_CHECK(qkv_in.dim() == 2, op,
           "qkv must be (N, (H + 2 H_kv) D), got shape " << shape_str(qkv_in.shape()));
  DL_CHECK(heads > 0 && kv_heads > 0, op,
           "heads and kv_heads must be positive, got " << heads << " and " << kv_heads);
  const int64_t n = qkv_in.size(0), width = qkv_in.size(1), total = heads + 2 * kv_heads;
  DL_CHECK(width % total == 0 && width > 0, op,
           "qkv width " << width << " of " << shape_str(qkv_in.shape())
                        << " must be (H + 2 H_kv) * D = " << total << " * D for H = " << heads
                        << ", H_kv = " << kv_heads);
  const int64_t d = width / total;
  DL_CHECK(d % 2 == 0, op,
           "head dim D = " << d << " (qkv width " << width << " / (H + 2 H_kv) = " << total
                           << ") must be even");
  DL_CHECK(positions_in.dtype() == DType::i32, op,
           "positions must be i32, got " << dtype_name(positions_in.dtype()) << " of shape "
                                         << shape_str(positions_in.shape()));
  DL_CHECK(positions_in.shape() == Shape{n}, op,
           "positions must have shape [" << n << "] (one per row of qkv "
                                         << shape_str(qkv_in.shape()) << "), got "
                                         << shape_str(positions_in.shape()));
  DL_CHECK(theta > 0, op, "theta must be > 0, got " << theta);
  detail::device_of(op, {qkv_in, positions_in});
  Tensor qkv = qkv_in.contiguous(), positions = positions_in.contiguous();
  const int64_t rotated = heads + kv_heads;
  Tensor out = rope_rows(qkv, positions, rotated, d, theta, false);
  Context ctx;
  ctx.save_for_backward({positions});
  return autograd::record(op, {qkv_in}, out, std::move(ctx),
                          [rotated, d, theta](Context& c, const std::vector<Tensor>& g) {
                            return std::vector<Tensor>{rope_rows(
                                g[0].contiguous(), c.saved_tensors()[0], rotated, d, theta, true)};
                          });
}

}  // namespace driftless::ops
