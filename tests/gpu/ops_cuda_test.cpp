// Backends agree (CONTRIBUTING.md tier 2) for the generic ops (engine/ops/ops.h): every op's
// CUDA result, forward and input gradients (autograd::backward on both devices with the
// same cotangent), equals its CPU result within the tolerance of kTolerances below, on
// fresh random inputs (the seed is printed) at odd shapes. Outputs come from cache blocks
// poisoned with NaN, so an element a kernel forgets to write shows. Each CUDA computation
// runs twice and must repeat bit for bit. Also gradient clipping on cuda (AdamW:
// optim_cuda_test.cpp). Skips when no GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/autograd/autograd.h"
#include "engine/core/device_ops.h"
#include "engine/core/tensor.h"
#include "engine/ops/cuda/backend.h"
#include "engine/ops/ops.h"
#include "engine/optim/clip.h"
#include "tests/gpu/gpu_test_util.h"

namespace driftless {
namespace {

// ---- The one tolerance table ----
// Metric, per element: |cuda - cpu| / (|cpu| + rms(cpu)); the test asserts its maximum over
// the tensor is <= the entry (rms(cpu) keeps elements that cancel to ~0 meaningful).
// The CPU reference runs in f32 for f32 and bf16 (on the same bf16-rounded inputs) and in
// f64 for f64.
// f32: 0 where both backends do the same IEEE operations (add, mul, scalar ops applied
//   in double then rounded, gathers, copies, the dropout mask); 2e-6 for gelu (device
//   tanhf vs libm, ~2 ulp, plus FMA contraction); 1e-5 for reductions, matmul, norms and
//   softmaxes (fp32 sums in another order than the CPU's double or Eigen's: ~sqrt(n) ulp
//   of the scale for n <= 1e5; the softmaxes' exp is the ex2 approximation, ~2^-22
//   relative plus the rounding of v log2 e).
// bf16: the CUDA op computes in fp32 and rounds its output once (<= 2^-9 relative); a
//   gradient passes through a few such roundings (cotangent, saved output, the backward's
//   own output), so 4 roundings (1.6e-2) for most ops; 3e-2 for softmax / log_softmax /
//   cross-entropy, whose backward re-reads a rounded output through exp().
// f64: both backends accumulate in f64 in different orders: 1e-12.
// swiglu, rope f32: 5e-6, a few ulp of the scale: device expf / sincosf (<= 2 ulp, sincosf
//   over the full range, the same f32 angle on both sides) against libm, plus FMA
//   contraction of the products. rms_norm bf16 rounds twice in its forward (the normalised
//   row, then times the weight, as HF does) against the f32 reference: within 1.6e-2.
struct Tol {
  double f32, bf16, f64;
};
const std::map<std::string, Tol> kTolerances = {
    {"add", {1e-5, 1.6e-2, 1e-12}},  // 0 forward; backward sums broadcast dims
    {"sub", {1e-5, 1.6e-2, 1e-12}},
    {"mul", {1e-5, 1.6e-2, 1e-12}},
    {"scale", {0, 1.6e-2, 0}},
    {"add_scalar", {0, 1.6e-2, 0}},
    {"neg", {0, 0, 0}},
    {"broadcast_to", {1e-5, 1.6e-2, 1e-12}},  // backward is sum_to
    {"sum_to", {1e-5, 1.6e-2, 1e-12}},
    {"sum", {1e-5, 1.6e-2, 1e-12}},
    {"mean", {1e-5, 1.6e-2, 1e-12}},
    {"sum_all", {1e-5, 1.6e-2, 1e-12}},
    {"gelu", {2e-6, 1.6e-2, 1e-12}},
    {"layer_norm", {1e-5, 1.6e-2, 1e-12}},
    {"rms_norm", {1e-5, 1.6e-2, 1e-12}},
    {"swiglu", {5e-6, 1.6e-2, 1e-12}},
    {"rope", {5e-6, 1.6e-2, 1e-12}},
    {"softmax", {1e-5, 3e-2, 1e-12}},
    {"log_softmax", {1e-5, 3e-2, 1e-12}},
    {"cross_entropy", {1e-5, 3e-2, 1e-12}},
    {"matmul", {1e-5, 1.6e-2, 1e-12}},
    {"embedding", {1e-5, 1.6e-2, 1e-12}},  // backward sums repeated ids
    {"shape", {0, 0, 0}},  // concat, split, narrow, reshape, transpose, permute, contiguous
    {"dropout", {0, 1.6e-2, 0}},
};

double rms(const std::vector<double>& r) {
  double s = 0;
  for (double v : r) s += v * v;
  return std::sqrt(s / double(std::max<size_t>(r.size(), 1)));
}

// max_i |t_i - r_i| / (|r_i| + rms(r)); NaN anywhere in t gives NaN.
double max_err(const Tensor& t, const Tensor& r) {
  std::vector<double> a = t.to_vector<double>(), b = r.to_vector<double>();
  EXPECT_EQ(a.size(), b.size());
  const double scale = rms(b) + 1e-30;
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::isnan(a[i]) && !std::isnan(b[i])) return std::nan("");
    const double e = std::abs(a[i] - b[i]) / (std::abs(b[i]) + scale);
    if (e > worst) worst = e;
  }
  return worst;
}

double tolerance(const std::string& op, DType dt) {
  const Tol& t = kTolerances.at(op);
  return dt == DType::f32 ? t.f32 : dt == DType::bf16 ? t.bf16 : t.f64;
}

void expect_close(const std::string& op, const std::string& what, DType dt, const Tensor& t,
                  const Tensor& r) {
  ASSERT_TRUE(t.defined() && r.defined()) << op << " " << what;
  ASSERT_EQ(t.shape(), r.shape()) << op << " " << what;
  EXPECT_EQ(t.device(), Device::cuda) << op << " " << what;
  const double e = max_err(t, r), tol = tolerance(op, dt);
  std::printf("[ops_cuda] %-13s %-4s %-28s max_err %.3g (tol %.3g)\n", op.c_str(), dtype_name(dt),
              what.c_str(), e, tol);
  EXPECT_TRUE(e <= tol) << op << " " << dtype_name(dt) << " " << what << ": max error " << e
                        << " > tolerance " << tol << " (shape " << shape_str(r.shape()) << ")";
}

void expect_bitwise(const std::string& op, const std::string& what, const Tensor& a,
                    const Tensor& b) {
  EXPECT_EQ(a.to_vector<double>(), b.to_vector<double>())
      << op << " " << what << ": two cuda runs on the same inputs differ";
}

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

struct Result {
  Tensor out;
  std::vector<Tensor> grads;
};

// Runs fn on `inputs` (leaves requiring grad where floating), then backward with `cot`.
Result run(const Fn& fn, const std::vector<Tensor>& inputs, const Tensor& cot, bool backward) {
  std::vector<Tensor> leaves;
  for (const Tensor& t : inputs) {
    Tensor l = t.detach();
    if (backward && is_floating(l.dtype())) l.set_requires_grad();
    leaves.push_back(l);
  }
  if (inputs.empty() || inputs[0].device() == Device::cuda) testing::poison_cache();
  Result r;
  r.out = fn(leaves);
  if (backward) {
    if (r.out.device() == Device::cuda) testing::poison_cache();
    autograd::backward(r.out, cot);
    for (const Tensor& l : leaves) r.grads.push_back(l.requires_grad() ? l.grad() : Tensor());
  }
  return r;
}

// in: f64 cpu tensors (floating ones are rounded to dt first) or integer tensors. Compares
// the cuda result at dt with the cpu result (f32, or f64 for f64) on the same values.
// positive_cotangent: |N(0, 1)| + 0.25, where a gradient sums many terms into one element
// (signed terms can cancel to ~0, where the relative error is unbounded).
void check(const std::string& op, const std::string& name, const Fn& fn,
           const std::vector<Tensor>& in, DType dt, bool backward = true,
           bool positive_cotangent = false) {
  SCOPED_TRACE(op + " " + name + " " + dtype_name(dt));
  const DType cpu_dt = dt == DType::f64 ? DType::f64 : DType::f32;
  std::vector<Tensor> cpu_in, gpu_in;
  testing::inputs_for(in, dt, cpu_in, gpu_in);
  // The cotangent: random values representable in dt.
  Tensor probe = fn(cpu_in);
  Tensor cot64 = Tensor::randn(probe.shape(), testing::fresh_seed("ops_cuda"), DType::f64);
  cot64 = (positive_cotangent ? testing::positive(cot64) : cot64).to(dt);
  Result ref = run(fn, cpu_in, cot64.to(cpu_dt), backward);
  Result a = run(fn, gpu_in, cot64.to(Device::cuda), backward);
  Result b = run(fn, gpu_in, cot64.to(Device::cuda), backward);
  EXPECT_EQ(a.out.dtype(), dt);
  expect_close(op, name + " out", dt, a.out, ref.out);
  expect_bitwise(op, name + " out", a.out, b.out);
  for (size_t i = 0; i < a.grads.size(); ++i) {
    if (!ref.grads[i].defined()) continue;
    const std::string what = name + " d" + std::to_string(i);
    expect_close(op, what, dt, a.grads[i], ref.grads[i]);
    expect_bitwise(op, what, a.grads[i], b.grads[i]);
  }
}

Tensor rnd(const Shape& shape) {
  return Tensor::randn(shape, testing::fresh_seed("ops_cuda"), DType::f64);
}

const DType kDtypes[] = {DType::f32, DType::bf16, DType::f64};

TEST(OpsCuda, Matmul) {
  DL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        auto fn = [=](const auto& x) { return ops::matmul(x[0], x[1], ta, tb); };
        auto mat = [](int64_t r, int64_t c, bool t) { return t ? rnd({c, r}) : rnd({r, c}); };
        const std::string tag = std::string(ta ? "T" : "N") + (tb ? "T" : "N");
        check("matmul", tag + " 7x129x65", fn, {mat(7, 129, ta), mat(129, 65, tb)}, dt);
        check("matmul", tag + " 1x1x1", fn, {mat(1, 1, ta), mat(1, 1, tb)}, dt);
        check("matmul", tag + " 1x65x1", fn, {mat(1, 65, ta), mat(65, 1, tb)}, dt);
        // Batched, both operands 3-D.
        Tensor a3 = ta ? rnd({3, 13, 7}) : rnd({3, 7, 13});
        Tensor b3 = tb ? rnd({3, 5, 13}) : rnd({3, 13, 5});
        check("matmul", tag + " batched", fn, {a3, b3}, dt);
        // 2-D b broadcast over a's batch (folded into M when !ta), and 2-D a over b's.
        Tensor a4 = ta ? rnd({2, 3, 13, 7}) : rnd({2, 3, 7, 13});
        check("matmul", tag + " b broadcast", fn, {a4, mat(13, 65, tb)}, dt);
        check("matmul", tag + " a broadcast", fn, {mat(7, 13, ta), b3}, dt);
      }
    check(
        "matmul", "K=0", [](const auto& x) { return ops::matmul(x[0], x[1]); },
        {rnd({5, 0}), rnd({0, 3})}, dt, false);
    check(
        "matmul", "non-contiguous",
        [](const auto& x) { return ops::matmul(ops::transpose(x[0], 0, 1), x[1]); },
        {rnd({65, 7}), rnd({65, 33})}, dt);
  }
}

TEST(OpsCuda, Elementwise) {
  DL_REQUIRE_GPU();
  struct Bin {
    const char* op;
    Tensor (*fn)(const Tensor&, const Tensor&);
  };
  const Bin bins[] = {{"add", ops::add}, {"sub", ops::sub}, {"mul", ops::mul}};
  for (DType dt : kDtypes) {
    for (const Bin& bin : bins) {
      auto fn = [f = bin.fn](const auto& x) { return f(x[0], x[1]); };
      check(bin.op, "same shape", fn, {rnd({7, 129}), rnd({7, 129})}, dt);
      check(bin.op, "bias row", fn, {rnd({65, 129}), rnd({129})}, dt);
      check(bin.op, "general broadcast", fn, {rnd({7, 1, 5}), rnd({1, 3, 1})}, dt);
      // Gradients of the [1] / zero-dim operands sum 455 / 13 positive terms (signed ones
      // cancelled: bf16 0.0170 > 0.016 with seed 3695720032744581356).
      check(bin.op, "scalar-like", fn, {rnd({1}), testing::positive(rnd({7, 65}))}, dt, true, true);
      check(bin.op, "zero-dim", fn, {rnd({}), testing::positive(rnd({13}))}, dt, true, true);
      check(
          bin.op, "transposed view",
          [f = bin.fn](const auto& x) { return f(ops::transpose(x[0], 0, 1), x[1]); },
          {rnd({129, 7}), rnd({7, 129})}, dt);
      check(bin.op, "large", fn, {rnd({65537}), rnd({65537})}, dt);
    }
    for (const Shape& s : {Shape{7, 129}, Shape{1}, Shape{3, 5, 7}}) {
      const std::string tag = shape_str(s);
      check(
          "scale", tag, [](const auto& x) { return ops::scale(x[0], -0.37); }, {rnd(s)}, dt);
      check(
          "add_scalar", tag, [](const auto& x) { return ops::add_scalar(x[0], 1.7); }, {rnd(s)},
          dt);
      check(
          "neg", tag, [](const auto& x) { return ops::neg(x[0]); }, {rnd(s)}, dt);
      check(
          "gelu", tag, [](const auto& x) { return ops::gelu(x[0]); }, {rnd(s)}, dt);
    }
    check(
        "scale", "transposed view",
        [](const auto& x) { return ops::scale(ops::transpose(x[0], 0, 1), 3.0); }, {rnd({13, 7})},
        dt);
    check(
        "gelu", "large", [](const auto& x) { return ops::gelu(x[0]); }, {rnd({65537})}, dt);
    check(
        "gelu", "transposed view",
        [](const auto& x) { return ops::gelu(ops::transpose(x[0], 0, 1)); }, {rnd({13, 7})}, dt);
    check(
        "broadcast_to", "(1,5)->(7,3,5)",
        [](const auto& x) {
          return ops::broadcast_to(x[0], {7, 3, 5});
        },
        {rnd({1, 5})}, dt);
    check(
        "sum_to", "(7,3,5)->(3,1)",
        [](const auto& x) {
          return ops::sum_to(x[0], {3, 1});
        },
        {rnd({7, 3, 5})}, dt);
    check(
        "sum_to", "(2000,3)->(3)", [](const auto& x) { return ops::sum_to(x[0], {3}); },
        {rnd({2000, 3})}, dt);
    check(
        "sum_to", "(5,4000)->(5,1)",
        [](const auto& x) {
          return ops::sum_to(x[0], {5, 1});
        },
        {rnd({5, 4000})}, dt);
  }
}

TEST(OpsCuda, Reductions) {
  DL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    for (int64_t d : {0, 1, 2, -1})
      for (bool keep : {false, true}) {
        const std::string tag = "dim " + std::to_string(d) + (keep ? " keepdim" : "");
        check(
            "sum", tag, [=](const auto& x) { return ops::sum(x[0], d, keep); }, {rnd({7, 65, 3})},
            dt);
        check(
            "mean", tag, [=](const auto& x) { return ops::mean(x[0], d, keep); }, {rnd({7, 65, 3})},
            dt);
      }
    check(
        "sum", "size-1 dim", [](const auto& x) { return ops::sum(x[0], 1); }, {rnd({7, 1, 5})}, dt);
    check(
        "sum", "long rows", [](const auto& x) { return ops::sum(x[0], 1); }, {rnd({3, 100003})},
        dt);
    check(
        "mean", "many columns", [](const auto& x) { return ops::mean(x[0], 0); },
        {rnd({129, 2049})}, dt);
    // Few adjacent outputs, long sums: the chunked two-pass reduction (a bias gradient),
    // with a last chunk shorter than the others.
    check(
        "sum", "bias gradient", [](const auto& x) { return ops::sum(x[0], 0); }, {rnd({4099, 773})},
        dt);
    check(
        "sum", "two kept dims", [](const auto& x) { return ops::sum(x[0], 0); }, {rnd({600, 5, 9})},
        dt);
    check(
        "mean", "transposed view",
        [](const auto& x) { return ops::mean(ops::transpose(x[0], 0, 1), 1); }, {rnd({65, 7})}, dt);
    for (const Shape& s : {Shape{}, Shape{1}, Shape{129, 65}, Shape{(1 << 20) + 7}})
      check(
          "sum_all", shape_str(s), [](const auto& x) { return ops::sum_all(x[0]); }, {rnd(s)}, dt);
  }
}

TEST(OpsCuda, LayerNorm) {
  DL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    auto affine = [](const auto& x) { return ops::layer_norm(x[0], x[1], x[2]); };
    auto no_affine = [](const auto& x) { return ops::layer_norm(x[0], Tensor(), Tensor()); };
    auto weight_only = [](const auto& x) { return ops::layer_norm(x[0], x[1], Tensor()); };
    check("layer_norm", "(7,65)", affine, {rnd({7, 65}), rnd({65}), rnd({65})}, dt);
    check("layer_norm", "(3,5,768)", affine, {rnd({3, 5, 768}), rnd({768}), rnd({768})}, dt);
    check("layer_norm", "(200,129) chunks", affine, {rnd({200, 129}), rnd({129}), rnd({129})}, dt);
    check("layer_norm", "(1,1)", affine, {rnd({1, 1}), rnd({1}), rnd({1})}, dt);
    // Widths of whole 16-byte packs per lane take the register kernels (1, 4 and 8 packs of
    // bf16; 2048 f32 is past their limit and takes the scalar ones).
    check("layer_norm", "(9,2048)", affine, {rnd({9, 2048}), rnd({2048}), rnd({2048})}, dt);
    check("layer_norm", "(70,256) no affine", no_affine, {rnd({70, 256})}, dt);
    check("layer_norm", "(5,1024) weight only", weight_only, {rnd({5, 1024}), rnd({1024})}, dt);
    check("layer_norm", "no affine", no_affine, {rnd({129, 7})}, dt);
    check("layer_norm", "weight only", weight_only, {rnd({13, 33}), rnd({33})}, dt);
  }
}

// x times factor, an f64 cpu tensor (inputs over a wider range than N(0, 1)).
Tensor scaled(const Tensor& x, double factor) {
  std::vector<double> v = x.to_vector<double>();
  for (double& e : v) e *= factor;
  return Tensor::from_vector(v, x.shape());
}

TEST(OpsCuda, RmsNorm) {
  DL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    auto fn = [](const auto& x) { return ops::rms_norm(x[0], x[1], 1e-6); };
    check("rms_norm", "(7,65)", fn, {rnd({7, 65}), rnd({65})}, dt);
    check("rms_norm", "(3,5,768)", fn, {rnd({3, 5, 768}), rnd({768})}, dt);
    // 200 rows: six whole chunks of 32 for the weight gradient's partials and a partial one.
    check("rms_norm", "(200,129) chunks", fn, {rnd({200, 129}), rnd({129})}, dt);
    // One element: dx = w g (1 - x^2 / (x^2 + eps)) / sqrt(x^2 + eps) is a difference of
    // two nearly equal terms unless eps is comparable with x^2; each backend then keeps only
    // eps / (x^2 + eps) of its precision (measured: f64 5.2e-12 apart at eps 1e-6, f32 3.7e-5
    // relative at eps 1e-2). eps 1 keeps the term >= 0.1 for |x| <= 3: inside both bounds.
    check(
        "rms_norm", "(1,1)", [](const auto& x) { return ops::rms_norm(x[0], x[1], 1.0); },
        {rnd({1, 1}), rnd({1})}, dt);
    check("rms_norm", "(9,4096)", fn, {rnd({9, 4096}), rnd({4096})}, dt);
    check(
        "rms_norm", "eps 0.5", [](const auto& x) { return ops::rms_norm(x[0], x[1], 0.5); },
        {rnd({13, 33}), rnd({33})}, dt);
    check(
        "rms_norm", "transposed view",
        [](const auto& x) { return ops::rms_norm(ops::transpose(x[0], 0, 1), x[1], 1e-6); },
        {rnd({65, 7}), rnd({65})}, dt);
  }
}

TEST(OpsCuda, Swiglu) {
  DL_REQUIRE_GPU();
  auto fn = [](const auto& x) { return ops::swiglu(x[0]); };
  for (DType dt : kDtypes) {
    check("swiglu", "(7,130)", fn, {rnd({7, 130})}, dt);
    check("swiglu", "(3,5,22)", fn, {rnd({3, 5, 22})}, dt);
    check("swiglu", "(1,2)", fn, {rnd({1, 2})}, dt);
    check("swiglu", "(129,5504)", fn, {rnd({129, 5504})}, dt);
    // Gates out to +-100: exp(-gate) overflows to inf, sigmoid to 0, without NaN.
    check("swiglu", "wide range", fn, {scaled(rnd({7, 64}), 30)}, dt);
    check(
        "swiglu", "transposed view",
        [](const auto& x) { return ops::swiglu(ops::transpose(x[0], 0, 1)); }, {rnd({10, 7})}, dt);
  }
}

TEST(OpsCuda, Rope) {
  DL_REQUIRE_GPU();
  auto pos = [](const std::vector<int32_t>& p) { return Tensor::from_vector(p); };
  // n positions drawn from [0, max] (a fresh seed each run).
  auto random_pos = [](int64_t n, int32_t max) {
    std::mt19937_64 g(testing::fresh_seed("ops_cuda"));
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (auto& v : p) v = int32_t(g() % (uint64_t(max) + 1));
    return Tensor::from_vector(p);
  };
  auto fn = [](int64_t h, int64_t hkv, double theta) {
    return [=](const auto& x) { return ops::rope(x[0], x[1], h, hkv, theta); };
  };
  for (DType dt : kDtypes) {
    check("rope", "N5 H2 Hkv1 D6 restarts", fn(2, 1, 1e4), {rnd({5, 24}), pos({0, 1, 2, 0, 1})},
          dt);
    // Llama-like heads (H 8, H_kv 2, D 128) at positions up to 1e6: angles of 1e6 radians,
    // which only a full-range sincosf gets right.
    check("rope", "N129 H8 Hkv2 D128", fn(8, 2, 5e5), {rnd({129, 1536}), random_pos(129, 1000000)},
          dt);
    check("rope", "D2", fn(1, 1, 1e4), {rnd({3, 6}), pos({0, 7, 1000000})}, dt);
    check("rope", "D512", fn(1, 1, 1e4), {rnd({2, 1536}), pos({3, 999999})}, dt);
    check("rope", "MHA H3 D10", fn(3, 3, 1e4), {rnd({7, 90}), random_pos(7, 100)}, dt);
    check("rope", "no rows", fn(2, 1, 1e4), {rnd({0, 24}), pos({})}, dt, false);
    // All positions 0: the identity, bit for bit.
    std::vector<Tensor> cpu_in, gpu_in;
    testing::inputs_for({rnd({5, 24}), pos({0, 0, 0, 0, 0})}, dt, cpu_in, gpu_in);
    EXPECT_EQ(ops::rope(gpu_in[0], gpu_in[1], 2, 1, 1e4).to_vector<double>(),
              gpu_in[0].to_vector<double>())
        << dtype_name(dt);
  }
  // The kernel's frequencies travel in the launch: head dims up to 512.
  Tensor wide = Tensor::zeros({1, 3 * 514}, DType::f32, Device::cuda);
  EXPECT_THROW(ops::rope(wide, pos({0}).to(Device::cuda), 1, 1, 1e4), Error);
}

TEST(OpsCuda, Softmax) {
  DL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    for (const char* op : {"softmax", "log_softmax"}) {
      const bool log = std::string(op) == "log_softmax";
      auto at = [log](int64_t d) {
        return [log, d](const auto& x) {
          return log ? ops::log_softmax(x[0], d) : ops::softmax(x[0], d);
        };
      };
      check(op, "(7,129) dim -1", at(-1), {rnd({7, 129})}, dt);
      check(op, "(13,7) dim 0", at(0), {rnd({13, 7})}, dt);
      check(op, "(3,65,5) dim 1", at(1), {rnd({3, 65, 5})}, dt);
      check(op, "(1,1)", at(-1), {rnd({1, 1})}, dt);
      check(op, "(3,5000) dim -1", at(-1), {rnd({3, 5000})}, dt);
    }
  }
}

TEST(OpsCuda, CrossEntropy) {
  DL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    for (int64_t v : {1, 7, 129, 50257}) {
      const int64_t n = v == 50257 ? 65 : 13;
      std::vector<int64_t> t(static_cast<size_t>(n));
      std::mt19937_64 g(testing::fresh_seed("ops_cuda"));
      for (auto& x : t) x = int64_t(g() % uint64_t(v));
      Tensor mask = Tensor::uniform({n}, testing::fresh_seed("ops_cuda"), 0, 1, DType::f64);
      mask.narrow(0, 1, 2).zero_();  // masked rows get no gradient
      const std::string tag = "V=" + std::to_string(v);
      check(
          "cross_entropy", tag + " mask",
          [](const auto& x) { return ops::cross_entropy(x[0], x[1], x[2]); },
          {rnd({n, v}), Tensor::from_vector(t), mask}, dt);
      check(
          "cross_entropy", tag + " no mask i32",
          [](const auto& x) { return ops::cross_entropy(x[0], x[1]); },
          {rnd({n, v}), Tensor::from_vector(t).to(DType::i32)}, dt);
    }
  }
}

// The fused loss + dlogits kernel (lm_loss's path) gives bitwise what the separate forward
// and backward kernels give: f32 logits with f32 and bf16 dlogits, rows padded to a multiple
// of 64 (the 16-byte path, with a v % 4 tail) and unpadded odd rows (the scalar path).
TEST(OpsCuda, CrossEntropyForwardBackwardMatchesTheSeparateKernels) {
  DL_REQUIRE_GPU();
  for (int64_t v : {1, 7, 129, 50257})
    for (bool padded : {true, false})
      for (DType gdt : {DType::f32, DType::bf16}) {
        SCOPED_TRACE("V=" + std::to_string(v) + (padded ? " padded" : "") + " " + dtype_name(gdt));
        const int64_t n = 37, ld = padded ? (v + 63) / 64 * 64 : v;
        Tensor logits = ops::mul(rnd({n, ld}), Tensor::full({}, 3.0, DType::f64))
                            .to(Device::cuda, DType::f32)
                            .narrow(1, 0, v);
        std::vector<int64_t> t(static_cast<size_t>(n));
        std::mt19937_64 g(testing::fresh_seed("ops_cuda"));
        for (auto& x : t) x = int64_t(g() % uint64_t(v));
        Tensor targets = Tensor::from_vector(t).to(Device::cuda);
        Tensor mask = Tensor::uniform({n}, testing::fresh_seed("ops_cuda"), 0, 1, DType::f32);
        mask.narrow(0, 1, 2).zero_();
        mask = mask.to(Device::cuda);
        Tensor go = Tensor::full({}, 0.37, DType::f32, Device::cuda);
        std::vector<Tensor> f = ops::gpu::cross_entropy_forward(logits, targets, mask);
        Tensor d = ops::gpu::cross_entropy_backward(go, logits, f[1], targets, mask, false, gdt)[0];
        std::vector<Tensor> fb =
            ops::gpu::cross_entropy_forward_backward(go, logits, targets, mask, gdt);
        EXPECT_EQ(fb[0].to_vector<double>(), f[0].to_vector<double>()) << "loss";
        ASSERT_EQ(fb[1].shape(), d.shape());
        EXPECT_EQ(fb[1].dtype(), gdt);
        EXPECT_EQ(fb[1].to_vector<double>(), d.to_vector<double>()) << "dlogits";
      }
}

TEST(OpsCuda, Embedding) {
  DL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    auto fn = [](const auto& x) { return ops::embedding(x[0], x[1]); };
    std::vector<int64_t> ids = {3, 0, 128, 3, 3, 7, 0};  // repeats sum in the backward
    check("embedding", "(129,65) ids(7)", fn, {rnd({129, 65}), Tensor::from_vector(ids)}, dt);
    check("embedding", "ids (3,5) i32", fn,
          {rnd({13, 7}),
           Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 12, 1, 1, 0},
                               {3, 5})},
          dt);
    std::vector<int64_t> many(4099);
    std::mt19937_64 g(testing::fresh_seed("ops_cuda"));
    for (auto& x : many) x = int64_t(g() % 50);
    check("embedding", "(50,768) ids(4099)", fn, {rnd({50, 768}), Tensor::from_vector(many)}, dt);
  }
}

TEST(OpsCuda, ShapeOps) {
  DL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    check(
        "shape", "concat dim 1",
        [](const auto& x) {
          return ops::concat({x[0], x[1], x[2]}, 1);
        },
        {rnd({7, 1, 5}), rnd({7, 65, 5}), rnd({7, 3, 5})}, dt);
    check(
        "shape", "split + concat",
        [](const auto& x) {
          auto p = ops::split(x[0], {1, 7, 0, 57}, 0);
          return ops::concat({p[3], p[1], p[0], p[2]}, 0);
        },
        {rnd({65, 3})}, dt);
    check(
        "shape", "narrow", [](const auto& x) { return ops::narrow(x[0], 1, 2, 5); }, {rnd({7, 13})},
        dt);
    check(
        "shape", "reshape of a view",
        [](const auto& x) { return ops::reshape(ops::transpose(x[0], 0, 1), {-1}); },
        {rnd({7, 13})}, dt);
    check(
        "shape", "permute + contiguous",
        [](const auto& x) {
          return ops::contiguous(ops::permute(x[0], {2, 0, 1}));
        },
        {rnd({3, 5, 7})}, dt);
  }
}

TEST(OpsCuda, Dropout) {
  DL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    for (double p : {0.0, 0.3, 1.0}) {
      const std::string tag = "p=" + std::to_string(p);
      check(
          "dropout", tag, [p](const auto& x) { return ops::dropout(x[0], p, 1234); },
          {rnd({7, 129})}, dt);
      check(
          "dropout", tag + " transposed",
          [p](const auto& x) { return ops::dropout(ops::transpose(x[0], 0, 1), p, 99); },
          {rnd({13, 7})}, dt);
      // Rows named by global ids (the model's layout-independent masks): the device
      // draws the CPU's mask for the same ids.
      check(
          "dropout", tag + " row ids",
          [p](const auto& x) {
            return ops::dropout(x[0], p, 7, {{1000, 3}, {5, 6}});
          },
          {rnd({9, 65})}, dt);
    }
  }
}

TEST(OpsCuda, ClipGradNorm) {
  DL_REQUIRE_GPU();
  for (int64_t n : {int64_t(1), int64_t(129), int64_t(3) << 20}) {
    for (DType dt : {DType::f32, DType::f64}) {
      Tensor g_cpu = Tensor::randn({n}, testing::fresh_seed("ops_cuda"), dt);
      Tensor g_gpu = g_cpu.to(Device::cuda);
      const double sq_cpu = optim::grad_norm_squared(g_cpu);
      const double sq_gpu = optim::grad_norm_squared(g_gpu);
      std::printf("[ops_cuda] grad_norm_sq  %-4s n=%lld rel_err %.3g\n", dtype_name(dt),
                  (long long)n, std::abs(sq_gpu - sq_cpu) / sq_cpu);
      EXPECT_NEAR(sq_gpu, sq_cpu, 1e-10 * sq_cpu) << "n=" << n;  // both in double
      EXPECT_EQ(optim::grad_norm_squared(g_gpu), sq_gpu) << "not reproducible";
      const double norm_cpu = optim::clip_grad_norm(g_cpu, 0.5);
      const double norm_gpu = optim::clip_grad_norm(g_gpu, 0.5);
      EXPECT_NEAR(norm_gpu, norm_cpu, 1e-10 * norm_cpu);
      // Same double norm in, same T(factor) multiply: equal unless the norms' last bits
      // differ, which moves the factor by at most an ulp.
      const double e = max_err(g_gpu, g_cpu);
      EXPECT_LE(e, 1e-6) << "scaled gradients";
    }
  }
}

TEST(OpsCuda, EmbeddingTakesHostIdsForACudaWeight) {
  // The model passes token ids from the host (no device-to-host sync per call); the result
  // and the gradient equal those with ids on the device.
  DL_REQUIRE_GPU();
  Tensor w = Tensor::randn({97, 24}, 11).to(Device::cuda);
  w.set_requires_grad(true);
  Tensor ids = Tensor::from_vector<int32_t>({3, 96, 0, 3, 41});
  Tensor a = ops::embedding(w, ids), b = ops::embedding(w, ids.to(Device::cuda));
  EXPECT_EQ(a.device(), Device::cuda);
  EXPECT_EQ(a.to(Device::cpu).to_vector<float>(), b.to(Device::cpu).to_vector<float>());
  autograd::backward(ops::sum_all(a));
  const std::vector<float> g = w.grad().to(Device::cpu).to_vector<float>();
  EXPECT_EQ(g[3 * 24], 2.0f);  // id 3 twice
  EXPECT_EQ(g[1 * 24], 0.0f);
}

}  // namespace
}  // namespace driftless
