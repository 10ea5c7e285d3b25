// See lm_loss.h. The cross-entropy of each chunk is the existing fused one (engine/ops/
// loss.cpp on CPU, engine/ops/cuda/softmax.cu on cuda), so the chunked loss is the
// unchunked one computed piecewise.
//
// Precision on cuda: the logits chunk is written in fp32 straight from the GEMM (cuBLASLt,
// bf16 operands, fp32 accumulation and fp32 output), so the softmax never sees logits
// rounded to bf16 (a bf16 logit near 10 is off by 0.03, which moves every probability of
// the row by 3%). dlogits are computed in fp32 and rounded to bf16 once as they are
// written, only as an operand of the dx and dW GEMMs, whose accumulation and outputs are
// fp32 (the first dW product writes it, the later ones add with beta = 1). The loss is
// summed in fp32 on the device in a fixed order, over all rows' losses at once.
#include "layers/lm_loss.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "engine/autograd/autograd.h"
#include "engine/ops/cuda/backend.h"
#include "engine/ops/ops.h"

namespace driftless::layers {

namespace {

struct Grads {
  Tensor dx;  // (T, C) f32/f64, undefined when x needs no gradient
  Tensor dw;  // (V, C) f32/f64, undefined when weight needs no gradient
};

// Any device and dtype: the generic matmul and cross-entropy ops per chunk. dlogits come
// from the cross-entropy node's own backward, applied to a private leaf.
Tensor chunked_generic(const Tensor& x, const Tensor& w, const std::vector<int64_t>& labels,
                       const Tensor& mask, double loss_scale, int64_t rows, Grads& gr) {
  const int64_t t_rows = x.size(0);
  const DType acc = mask.dtype();
  double total = 0;
  for (int64_t r0 = 0; r0 < t_rows; r0 += rows) {
    const int64_t n = std::min(rows, t_rows - r0);
    Tensor xr = x.narrow(0, r0, n);  // (n, C)
    Tensor tr =
        Tensor::from_vector(std::vector<int64_t>(labels.begin() + r0, labels.begin() + r0 + n))
            .to(x.device());
    Tensor mr = mask.narrow(0, r0, n);  // (n)
    Tensor logits;                      // (n, V)
    {
      autograd::NoGradGuard no_grad;
      logits = ops::matmul(xr, w, false, true);
    }
    if (!gr.dx.defined() && !gr.dw.defined()) {
      autograd::NoGradGuard no_grad;
      total += ops::cross_entropy(logits, tr, mr).item();
      continue;
    }
    logits.set_requires_grad(true);
    Tensor l;
    {
      autograd::EnableGradGuard record;  // a private one-node graph, also inside a backward
      l = ops::cross_entropy(logits, tr, mr);
    }
    total += l.item();
    autograd::NoGradGuard no_grad;
    Tensor dlogits = l.grad_fn()->apply({Tensor::full({}, loss_scale, acc, x.device())})[0];
    if (gr.dx.defined()) gr.dx.narrow(0, r0, n).copy_(ops::matmul(dlogits, w));  // (n, C)
    if (gr.dw.defined()) gr.dw.add_(ops::matmul(dlogits, xr, true, false));      // (V, C)
  }
  return Tensor::full({}, total * loss_scale, acc, x.device());
}

// cuda, f32 or bf16 operands: fp32 logits, dlogits, dx and dW (see the file comment).
Tensor chunked_cuda(const Tensor& x, const Tensor& w, const std::vector<int64_t>& labels,
                    const Tensor& mask, double loss_scale, int64_t rows, Grads& gr) {
  namespace gpu = ops::gpu;
  const int64_t t_rows = x.size(0), c = x.size(1), v = w.size(0);
  // Logit rows padded to a multiple of 64 elements: with GPT-2's odd 50257 the (n, V)
  // operands would leave the GEMMs byte-aligned rows and cuBLAS's slow SIMT-era kernels.
  const int64_t ld = (v + 63) / 64 * 64;
  const DType dt = x.dtype();
  Tensor targets = Tensor::from_vector(labels).to(Device::cuda);  // (T) i64
  Tensor scale = Tensor::full({}, loss_scale, DType::f32, Device::cuda);
  Tensor total = Tensor::zeros({}, DType::f32, Device::cuda);
  // dlogits of up to kLmLossGradChunks chunks side by side (bf16: 2 x 2560 rows of GPT-2 is
  // 515 MB), so one dx and one dW product cover them all: dW is (V, C) f32 read and written
  // by every accumulating product (308 MB for GPT-2), which per chunk cost more than the
  // product itself.
  const bool want_grads = gr.dx.defined() || gr.dw.defined();
  const int64_t group_rows = std::min(t_rows, rows * kLmLossGradChunks);
  Tensor dgroup = want_grads ? Tensor::empty({group_rows, ld}, dt, Device::cuda) : Tensor();
  // Every chunk writes its rows' losses here and one sum follows the chunks (three launches
  // per chunk fewer than summing each chunk's rows and adding them up, and the same sum with
  // or without gradients: a recomputing forward reports the loss bits of a plain one).
  Tensor row_losses = Tensor::empty({t_rows}, DType::f32, Device::cuda);
  int64_t g0 = 0;  // first row of the group being filled
  auto flush = [&](int64_t end) {
    const int64_t n = end - g0;
    if (n == 0) return;
    if (gr.dx.defined())
      gpu::gemm_f32_out(dt, dgroup.raw_data(), n, v, false, w.raw_data(), v, c, false,
                        gr.dx.narrow(0, g0, n).raw_data(), false, ld);
    // The first group writes dW (its storage starts uninitialised), the rest add to it.
    if (gr.dw.defined())
      gpu::gemm_f32_out(dt, dgroup.raw_data(), n, v, true, x.narrow(0, g0, n).raw_data(), n, c,
                        false, gr.dw.raw_data(), g0 > 0, ld);
    g0 = end;
  };
  for (int64_t r0 = 0; r0 < t_rows; r0 += rows) {
    const int64_t n = std::min(rows, t_rows - r0);
    Tensor xr = x.narrow(0, r0, n);                                                    // (n, C)
    Tensor tr = targets.narrow(0, r0, n);                                              // (n)
    Tensor mr = mask.narrow(0, r0, n);                                                 // (n)
    Tensor logits = Tensor::empty({n, ld}, DType::f32, Device::cuda).narrow(1, 0, v);  // (n, V)
    gpu::gemm_f32_out(dt, xr.raw_data(), n, c, false, w.raw_data(), v, c, true, logits.raw_data(),
                      false, 0, 0, ld);
    if (!want_grads) {
      gpu::cross_entropy_forward(logits, tr, mr, row_losses.narrow(0, r0, n));
      continue;
    }
    // The loss and dlogits in one pass over the logits; dlogits straight in the GEMM
    // operand's dtype, into the group's rows (ld apart).
    Tensor into = dgroup.narrow(0, r0 - g0, n).narrow(1, 0, v);
    gpu::cross_entropy_forward_backward(scale, logits, tr, mr, dt, into,
                                        row_losses.narrow(0, r0, n));
    logits = Tensor();  // the chunk's logits are dead: the allocator may reuse them
    if (r0 + n - g0 == group_rows || r0 + n == t_rows) flush(r0 + n);
  }
  if (t_rows > 0) total = ops::sum_all(row_losses);
  return gpu::unary(gpu::Unary::scale, total, {}, loss_scale);
}

}  // namespace

int64_t lm_loss_chunk_rows(int64_t v) {
  const int64_t rows = kLmLossChunkBytes / (std::max<int64_t>(v, 1) * 4);
  // A multiple of 64 keeps the chunk's GEMMs on aligned, whole-tile row counts.
  return rows >= 64 ? rows / 64 * 64 : std::max<int64_t>(rows, 1);
}

Tensor lm_loss(const Tensor& x, const Tensor& weight, const Tensor& labels, const Tensor& loss_mask,
               double loss_scale, int64_t chunk_rows, bool recompute) {
  const char* op = "lm_loss";
  DL_CHECK(x.defined() && weight.defined() && labels.defined(), op,
           "x, weight and labels must be defined tensors");
  DL_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1), op,
           "x " << shape_str(x.shape()) << " does not match weight (V, C) "
                << shape_str(weight.shape()));
  DL_CHECK(x.dtype() == weight.dtype(), op,
           "x is " << dtype_name(x.dtype()) << " but weight is " << dtype_name(weight.dtype()));
  const bool bf16_ok = x.dtype() == DType::bf16 && x.device() == Device::cuda;
  DL_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::f64 || bf16_ok, op,
           "x must be f32 or f64 (or bf16 on cuda), got " << dtype_name(x.dtype()));
  DL_CHECK(x.device() == weight.device(), op, "x and weight must be on one device");
  const int64_t t_rows = x.size(0), c = x.size(1), v = weight.size(0);
  DL_CHECK(labels.shape() == Shape{t_rows} &&
               (labels.dtype() == DType::i32 || labels.dtype() == DType::i64),
           op,
           "labels must be i32/i64 of shape [" << t_rows << "], got " << dtype_name(labels.dtype())
                                               << " " << shape_str(labels.shape()));
  DL_CHECK(!loss_mask.defined() ||
               (loss_mask.shape() == Shape{t_rows} && is_floating(loss_mask.dtype())),
           op,
           "loss_mask must be floating of shape [" << t_rows << "], got "
                                                   << shape_str(loss_mask.shape()));
  DL_CHECK(v > 0 || t_rows == 0, op, "weight " << shape_str(weight.shape()) << " has no rows");
  DL_CHECK(chunk_rows >= 0, op, "chunk_rows must be >= 0, got " << chunk_rows);
  std::vector<int64_t> lab = labels.to_vector<int64_t>();
  for (size_t i = 0; i < lab.size(); ++i)
    DL_CHECK(lab[i] >= 0 && lab[i] < v, op,
             "label " << lab[i] << " at row " << i << " is out of range [0, " << v << ")");

  const Device dev = x.device();
  const DType acc = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const int64_t rows = chunk_rows > 0 ? chunk_rows : lm_loss_chunk_rows(v);
  Tensor xc = x.contiguous().detach(), wc = weight.contiguous().detach();
  Tensor mask = loss_mask.defined() ? loss_mask.to(dev, acc).contiguous()
                                    : Tensor::ones({t_rows}, acc, dev);  // (T)
  const bool want_dx = autograd::grad_enabled() && x.requires_grad();
  const bool want_dw = autograd::grad_enabled() && weight.requires_grad();
  // Runs the chunks; with dx / dW wanted, also their gradients (fp32, see the file comment).
  auto run = [=](bool dx, bool dw, Grads& gr) {
    // On cuda the first dW product overwrites its storage (no 154 MB memset for GPT-2);
    // without rows there is no product, so dW is zeros.
    const bool cuda_f32 = dev == Device::cuda && acc == DType::f32;
    if (dx) gr.dx = Tensor::empty({t_rows, c}, acc, dev);
    if (dw)
      gr.dw = cuda_f32 && t_rows > 0 ? Tensor::empty({v, c}, acc, dev)
                                     : Tensor::zeros({v, c}, acc, dev);
    return cuda_f32 ? chunked_cuda(xc, wc, lab, mask, loss_scale, rows, gr)
                    : chunked_generic(xc, wc, lab, mask, loss_scale, rows, gr);
  };
  Grads gr;
  Tensor loss = run(want_dx && !recompute, want_dw && !recompute, gr);
  // Only the recomputing backward keeps the inputs (x, weight, labels, mask) alive.
  std::function<Tensor(bool, bool, Grads&)> rerun;
  if (recompute) rerun = run;

  autograd::Context ctx;
  ctx.save_for_backward({gr.dx, gr.dw});
  // A leaf weight (the tied embedding, whose .grad is the f32 gradient slab) gets dW in
  // the accumulation dtype: rounding it to bf16 first would lose the fp32 accumulation.
  const DType dtx = x.dtype(), dtw = weight.is_leaf() ? acc : weight.dtype();
  return autograd::record(
      op, {x, weight}, loss, std::move(ctx),
      [rerun, want_dx, want_dw, dtx, dtw, weight](
          autograd::Context& cx, const std::vector<Tensor>& g) -> std::vector<Tensor> {
        autograd::NoGradGuard no_grad;
        Grads saved{cx.saved_tensors()[0], cx.saved_tensors()[1]};
        if (rerun) rerun(want_dx, want_dw, saved);  // the chunks again, with gradients
        // On cuda the upstream gradient scales dx into its dtype and dW into the weight's
        // f32 gradient storage where it has one, each in one pass that reads the scale on
        // the device (ops::gpu::scaled_into).
        auto scaled = [&](const Tensor& d, DType to, const Tensor& into) -> Tensor {
          if (!d.defined()) return Tensor();
          if (d.device() != Device::cuda) return ops::scale(d, g[0].item()).to(to);
          if (d.dtype() == DType::f32 && (into.defined() || to == DType::bf16)) {
            const Tensor s = g[0].to(Device::cuda, DType::f32);
            if (into.defined()) {
              ops::gpu::scaled_into(d, s, into);
              return Tensor();
            }
            Tensor r = Tensor::empty(d.shape(), to, Device::cuda);  // scaled and rounded at once
            ops::gpu::scaled_into(d, s, r);
            return r;
          }
          return ops::gpu::binary(ops::gpu::Binary::mul, d, g[0].to(Device::cuda, d.dtype()),
                                  d.shape())
              .to(to);
        };
        const Tensor dw_into = saved.dw.defined() && saved.dw.dtype() == DType::f32 &&
                                       saved.dw.device() == Device::cuda
                                   ? autograd::accumulating_grad(weight)
                                   : Tensor();
        return {scaled(saved.dx, dtx, Tensor()), scaled(saved.dw, dtw, dw_into)};
      });
}

}  // namespace driftless::layers
