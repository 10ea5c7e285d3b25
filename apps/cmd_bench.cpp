// `driftless bench memory`: peak activation memory of one training step for several
// micro-sequence counts (the point of micro-sequences is less memory). Wiring only; the
// measurement uses the allocator's in-use/peak counters around Trainer::train_step.
// `driftless bench attention`: the CUDA attention op (bf16) forward and forward+backward on
// a fixed set of shapes, timed with CUDA events (warm-up, then the median of N), in TFLOP/s
// counted exactly from the documents; tests/reference/bench_attention.py prints the ratios
// against PyTorch from the JSON line this prints last. Each shape runs with the deterministic
// backward and, where the kernels have it (Hopper), with the atomic dQ one (AttentionSpec::
// deterministic = false; SDPA's FlashAttention backward sums dQ with atomics too, while
// FlexAttention's computes dQ per query block).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/bench_train.h"
#include "apps/command.h"
#include "engine/core/device_ops.h"
#include "layers/attention/attention.h"
#include "layers/attention/expr/expr.h"
#include "layers/attention/jit/kernel_cache.h"
#include "train/trainer.h"
#ifdef DRIFTLESS_HAVE_CUDA
#include <cuda_runtime.h>

#include "engine/core/cuda/check.h"
#include "layers/attention/cuda/fast/fast_attention.h"
#endif

namespace driftless::apps {
namespace {

struct BenchArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::vector<int64_t> micro_sequences = {1, 2, 4};
  int warmup = 3, reps = 20;
  std::vector<std::string> shapes;  // bench attention: names to keep (substrings); all if empty
  // bench attention --docs: one shape of these document lengths instead of the built-in ones
  std::vector<int64_t> docs;
  int64_t heads = 32, kv_heads = 0, head_dim = 64;  // kv_heads 0: heads
  double softcap = 0;
  // bench attention --score-mod: a score expression for every shape (in place of softcap),
  // compiled at run time on CUDA; it may read the tables `slope` (H) and `bias` (H, 64).
  std::string score_mod;
  bool alibi = false;      // bench attention --alibi: the built-in ALiBi with `slope`'s values
  bool learnable = false;  // bench attention --learnable: --score-mod's tables take gradients
  bool queued = false;     // bench attention --queued: the reps as one queue (device time)
  std::string mask_mod;    // bench attention --mask-mod: a mask expression (with --score-mod's)
};

struct AttnShape {
  std::string name;
  std::vector<int64_t> docs;  // document lengths, packed one after another
  int64_t heads, kv_heads, head_dim;
  double softcap = 0;
};

std::vector<AttnShape> attention_shapes() {
  const std::vector<int64_t> dense(4, 4096);  // 4 x 4096 = 16k tokens
  const std::vector<int64_t> packed = {512, 1536, 768, 1280, 256, 1792, 1024, 1024};  // 8192
  return {{"causal_t4096_d64", dense, 32, 32, 64},
          {"causal_t4096_d128", dense, 16, 16, 128},
          {"docs8_t8192_d64", packed, 32, 32, 64},
          {"docs8_t8192_d64_softcap30", packed, 32, 32, 64, 30.0},
          {"causal_t4096_d128_gqa4", dense, 32, 8, 128}};
}

// --score-mod's expression with the bench's fixed tables: `slope` (H), ALiBi's slopes
// 2^(-8 (h + 1) / H), and `bias` (H, 64), a per-head bias by distance (index
// min(abs(q - k), 63)) decaying with it, as tests/reference/flex_attention_bench.py builds.
std::vector<double> bench_slopes(int64_t heads) {
  std::vector<double> slope;
  for (int64_t h = 0; h < heads; ++h)
    slope.push_back(std::pow(2.0, -8.0 * double(h + 1) / double(heads)));
  return slope;
}

[[maybe_unused]] layers::ScoreModSpec bench_score_mod(const std::string& source,
                                                      const std::string& mask, int64_t heads,
                                                      bool learnable) {
  const std::vector<double> slope = bench_slopes(heads);
  std::vector<double> bias;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t d = 0; d < 64; ++d) bias.push_back(-slope[size_t(h)] * double(d));
  std::vector<layers::expr::ParamDecl> decls = {{"slope", {heads}, slope, learnable},
                                                {"bias", {heads, 64}, bias, learnable}};
  std::vector<Tensor> params;
  for (const auto& d : decls)
    params.push_back(
        Tensor::from_vector(std::vector<float>(d.init.begin(), d.init.end()), Shape(d.shape)));
  return layers::ScoreModSpec::make_expression(
      source.empty() ? nullptr : layers::expr::compile_score_mod(source, decls, int(heads)),
      mask.empty() ? nullptr : layers::expr::compile_mask_mod(mask, decls, int(heads)), params);
}

#ifdef DRIFTLESS_HAVE_CUDA
// Shortest queue whose energy bench attention reports (s): the driver refreshes the counter
// every few tens of milliseconds.
constexpr double kEnergySpan = 1.0;

std::string mj_text(double mj) {
  if (std::isnan(mj)) return "-";
  std::ostringstream o;
  o << std::fixed << std::setprecision(1) << mj;
  return o.str();
}
#endif

int run_attention(const BenchArgs& a) {
#ifndef DRIFTLESS_HAVE_CUDA
  (void)a;
  DL_FAIL("bench", "attention needs a CUDA build");
#else
  DL_CHECK(cuda::device_count() > 0, "bench", "attention needs a CUDA device");
  std::cout << "shape                        fwd_ms  fwd_TFLOPs  fwdbwd_ms  bwd_TFLOPs  "
               "fwdbwd_TFLOPs  backward        fwd_host_us  fwdbwd_host_us    fwd_mJ"
               "   fwdbwd_mJ\n";
  std::vector<bool> modes = {true};  // AttentionSpec::deterministic
  if (layers::gpu::fast::atomic_dq()) modes.push_back(false);
  nlohmann::json rows = nlohmann::json::array();
  cudaEvent_t e0, e1;
  DL_CUDA_CHECK(cudaEventCreate(&e0));
  DL_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<AttnShape> shapes;
  if (!a.docs.empty()) {
    DL_CHECK(std::all_of(a.docs.begin(), a.docs.end(), [](int64_t n) { return n > 0; }), "bench",
             "--docs takes positive document lengths");
    DL_CHECK(a.heads > 0 && a.kv_heads >= 0 && (a.kv_heads == 0 || a.heads % a.kv_heads == 0),
             "bench", "--heads must be a positive multiple of --kv-heads");
    int64_t t = 0;
    for (int64_t n : a.docs) t += n;
    std::string name = "docs" + std::to_string(a.docs.size()) + "_t" + std::to_string(t) + "_d" +
                       std::to_string(a.head_dim);
    if (a.softcap > 0) name += "_softcap" + std::to_string(int(a.softcap));
    shapes.push_back(
        {name, a.docs, a.heads, a.kv_heads > 0 ? a.kv_heads : a.heads, a.head_dim, a.softcap});
  }
  for (const AttnShape& sh : a.docs.empty() ? attention_shapes() : std::vector<AttnShape>{})
    if (a.shapes.empty() ||
        std::any_of(a.shapes.begin(), a.shapes.end(),
                    [&](const std::string& s) { return sh.name.find(s) != std::string::npos; }))
      shapes.push_back(sh);
  const bool expr = !a.score_mod.empty() || !a.mask_mod.empty();
  DL_CHECK(!expr || !a.alibi, "bench", "--alibi and --score-mod / --mask-mod exclude each other");
  if (expr || a.alibi) {  // in place of softcap: shapes named *_expr, *_alibi
    std::vector<AttnShape> kept;
    for (AttnShape sh : shapes)
      if (sh.softcap == 0) {
        sh.name += a.alibi ? "_alibi" : "_expr";
        kept.push_back(sh);
      }
    shapes = kept;
  }
  DL_CHECK(!shapes.empty(), "bench", "no attention shape matches --shape");
  for (const AttnShape& sh : shapes)
    for (const bool deterministic : modes) {
      int64_t t = 0;
      double pairs = 0;  // visible (query, key) pairs per head: causal within each document
      for (int64_t n : sh.docs) {
        t += n;
        pairs += double(n) * double(n + 1) / 2;
      }
      const double fwd_flops = 4.0 * double(sh.head_dim) * pairs * double(sh.heads);
      const double bwd_flops = 2.5 * fwd_flops;
      layers::AttentionSpec spec = layers::AttentionSpec::from_lengths(sh.docs, sh.docs, true);
      if (sh.softcap > 0) spec.score_mod = layers::ScoreModSpec::make_softcap(sh.softcap);
      if (!a.score_mod.empty() || !a.mask_mod.empty())
        spec.score_mod = bench_score_mod(a.score_mod, a.mask_mod, sh.heads, a.learnable);
      if (a.alibi) {
        const std::vector<double> sl = bench_slopes(sh.heads);
        spec.score_mod = layers::ScoreModSpec::make_alibi(
            Tensor::from_vector(std::vector<float>(sl.begin(), sl.end())));
      }
      // The tables on the device once, as a model's parameters are: no copy in each call.
      for (Tensor& t : spec.score_mod.expression_params) t = t.to(Device::cuda);
      if (spec.score_mod.alibi_slopes.defined())
        spec.score_mod.alibi_slopes = spec.score_mod.alibi_slopes.to(Device::cuda);
      spec.deterministic = deterministic;
      const char* backward_name = deterministic ? "deterministic" : "atomic_dq";
      Tensor q = Tensor::randn({t, sh.heads, sh.head_dim}, 1).to(Device::cuda, DType::bf16);
      Tensor k = Tensor::randn({t, sh.kv_heads, sh.head_dim}, 2).to(Device::cuda, DType::bf16);
      Tensor v = Tensor::randn({t, sh.kv_heads, sh.head_dim}, 3).to(Device::cuda, DType::bf16);
      Tensor dout = Tensor::randn({t, sh.heads, sh.head_dim}, 4).to(Device::cuda, DType::bf16);
      auto call = [&](bool backward) {
        layers::AttentionOutputs f = layers::attention_forward(q, k, v, spec);
        if (backward) layers::attention_backward(q, k, v, spec, f.out, f.lse, dout);
      };
      // GPU time of a call (ms), and in *host_us the host's time to issue one (us): per call,
      // the median of each call's own (the GPU idle meanwhile); queued, the whole queue's
      // over the calls (the host may wait there for the GPU). Queued, *mj is the GPU's
      // energy a call (mJ) over the queue, NaN where the queue lasted under kEnergySpan
      // seconds (the counter's refresh makes shorter spans meaningless) or there is no counter.
      auto time_ms = [&](bool backward, double* host_us, double* mj) {
        *mj = std::numeric_limits<double>::quiet_NaN();
        using clock = std::chrono::steady_clock;
        auto us_since = [](clock::time_point t0) {
          return std::chrono::duration<double, std::micro>(clock::now() - t0).count();
        };
        if (a.queued) {  // the host enqueues ahead of the GPU: its per-call work is hidden
          for (int r = 0; r < a.warmup; ++r) call(backward);
          DL_CUDA_CHECK(cudaDeviceSynchronize());  // the energy counted from an idle queue
          const double j0 = cuda::energy_joules();
          DL_CUDA_CHECK(cudaEventRecord(e0));
          const clock::time_point t0 = clock::now();
          for (int r = 0; r < a.reps; ++r) call(backward);
          *host_us = us_since(t0) / std::max(a.reps, 1);
          DL_CUDA_CHECK(cudaEventRecord(e1));
          DL_CUDA_CHECK(cudaEventSynchronize(e1));
          const double j1 = cuda::energy_joules();
          if (us_since(t0) >= kEnergySpan * 1e6) *mj = (j1 - j0) * 1e3 / std::max(a.reps, 1);
          float x = 0;
          DL_CUDA_CHECK(cudaEventElapsedTime(&x, e0, e1));
          return double(x) / std::max(a.reps, 1);
        }
        std::vector<float> ms;
        std::vector<double> host;
        for (int r = 0; r < a.warmup + a.reps; ++r) {
          DL_CUDA_CHECK(cudaEventRecord(e0));
          const clock::time_point t0 = clock::now();
          call(backward);
          const double issued = us_since(t0);
          DL_CUDA_CHECK(cudaEventRecord(e1));
          DL_CUDA_CHECK(cudaEventSynchronize(e1));
          float x = 0;
          DL_CUDA_CHECK(cudaEventElapsedTime(&x, e0, e1));
          if (r >= a.warmup) ms.push_back(x), host.push_back(issued);
        }
        std::sort(ms.begin(), ms.end());
        std::sort(host.begin(), host.end());
        *host_us = host[host.size() / 2];
        return double(ms[ms.size() / 2]);
      };
      double f_host = 0, fb_host = 0, f_mj = 0, fb_mj = 0;
      const double f_ms = time_ms(false, &f_host, &f_mj), fb_ms = time_ms(true, &fb_host, &fb_mj);
      const double b_ms = fb_ms - f_ms;
      const double f_tf = fwd_flops / (f_ms * 1e9), b_tf = bwd_flops / (b_ms * 1e9);
      const double fb_tf = (fwd_flops + bwd_flops) / (fb_ms * 1e9);
      std::cout << std::left << std::setw(28) << sh.name << std::right << std::fixed
                << std::setprecision(3) << std::setw(8) << f_ms << std::setprecision(1)
                << std::setw(12) << f_tf << std::setprecision(3) << std::setw(11) << fb_ms
                << std::setprecision(1) << std::setw(12) << b_tf << std::setw(15) << fb_tf << "  "
                << std::left << std::setw(15) << backward_name << std::right << std::setw(12)
                << f_host << std::setw(16) << fb_host << std::setw(10) << mj_text(f_mj)
                << std::setw(12) << mj_text(fb_mj) << "\n";
      rows.push_back({{"shape", sh.name},
                      {"backward", backward_name},
                      {"tokens", t},
                      {"docs", sh.docs},
                      {"heads", sh.heads},
                      {"kv_heads", sh.kv_heads},
                      {"head_dim", sh.head_dim},
                      {"softcap", sh.softcap},
                      {"score_mod", a.score_mod},
                      {"mask_mod", a.mask_mod},
                      {"alibi", a.alibi},
                      {"learnable", a.learnable},
                      {"timing", a.queued ? "queued" : "per_call"},
                      {"fwd_flops", fwd_flops},
                      {"bwd_flops", bwd_flops},
                      {"fwd_ms", f_ms},
                      {"fwdbwd_ms", fb_ms},
                      {"fwd_tflops", f_tf},
                      {"bwd_tflops", b_tf},
                      {"fwdbwd_tflops", fb_tf},
                      {"fwd_host_us", f_host},
                      {"fwdbwd_host_us", fb_host},
                      {"fwd_mj", json_number(f_mj)},
                      {"fwdbwd_mj", json_number(fb_mj)}});
    }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::cout << rows.dump() << "\n";
  return 0;
#endif
}

int run_memory(const BenchArgs& a) {
  std::cout << "micro_sequences  peak_activation_MiB  resident_before_MiB  step_seconds\n";
  nlohmann::json rows = nlohmann::json::array();
  double first = 0;
  for (int64_t m : a.micro_sequences) {
    auto overrides = a.overrides;
    overrides.push_back("schedule.micro_sequences=" + std::to_string(m));
    overrides.push_back("training.eval_interval=0");
    train::Config c = train::load_config(a.config, overrides);
    layers::jit::configure_process_kernel_cache(train::kernel_cache_options(c));
    train::TrainerOptions o;
    o.progress = false;
    train::Trainer trainer(c, o);
    const Device dev = c.precision.device;
    trainer.train_step(0);  // warm up: K/V buffers, optimizer state
    const size_t before = memory_stats(dev).bytes_in_use;
    reset_peak_memory(dev);
    const auto st = trainer.train_step(1);
    const double peak = double(memory_stats(dev).peak_bytes_in_use - before) / (1 << 20);
    if (first == 0) first = peak;
    std::cout << std::setw(15) << m << std::setw(21) << std::fixed << std::setprecision(1) << peak
              << std::setw(21) << double(before) / (1 << 20) << std::setw(14)
              << std::setprecision(3) << st.seconds << "   (" << std::setprecision(2)
              << peak / first << "x of m=" << a.micro_sequences[0] << ")\n";
    rows.push_back({{"micro_sequences", m},
                    {"peak_activation_bytes", peak * (1 << 20)},
                    {"resident_bytes", before},
                    {"step_seconds", st.seconds}});
  }
  std::cout << rows.dump() << "\n";
  return 0;
}

Registrar reg({"bench",
               "Benchmarks (memory: peak activation memory vs micro-sequences; attention: "
               "CUDA attention TFLOP/s; train: training tokens/s, MFU, memory)",
               [](CLI::App& sub) {
                 auto a = std::make_shared<BenchArgs>();
                 auto* mem = sub.add_subcommand(
                     "memory", "peak activation memory of a training step for each m");
                 mem->add_option("--config,-c", a->config, "run config")->required();
                 mem->add_option("--set", a->overrides, "override a key (repeatable)");
                 mem->add_option("--micro-sequences,-m", a->micro_sequences,
                                 "micro-sequence counts to measure");
                 auto* att = sub.add_subcommand(
                     "attention", "CUDA attention forward and forward+backward TFLOP/s (bf16)");
                 att->add_option("--warmup", a->warmup, "untimed calls first");
                 att->add_option("--reps", a->reps,
                                 "timed calls (the median is reported; the mean with --queued)");
                 att->add_option("--shape", a->shapes,
                                 "only the shapes whose name contains this (repeatable): "
                                 "causal_t4096_d64, causal_t4096_d128, docs8_t8192_d64, "
                                 "docs8_t8192_d64_softcap30, causal_t4096_d128_gqa4");
                 att->add_option("--docs", a->docs,
                                 "instead of the built-in shapes, one of these causal "
                                 "documents packed in one sequence (e.g. --docs 1024,512,2048)")
                     ->delimiter(',');
                 att->add_option("--heads", a->heads, "query heads of the --docs shape")
                     ->check(CLI::PositiveNumber);
                 att->add_option("--kv-heads", a->kv_heads,
                                 "key/value heads of the --docs shape (default: --heads)");
                 att->add_option("--head-dim", a->head_dim, "head dim of the --docs shape")
                     ->check(CLI::IsMember({64, 128}));
                 att->add_option("--softcap", a->softcap, "softcap of the --docs shape (0: none)");
                 att->add_option("--score-mod", a->score_mod,
                                 "score expression for every shape without softcap (named "
                                 "*_expr), compiled at run time (e.g. "
                                 "'30 * tanh(score / 30)', 'score - slope[h] * abs(q - k)', "
                                 "'score + bias[h, min(abs(q - k), 63)]')");
                 att->add_option("--mask-mod", a->mask_mod,
                                 "mask expression for every shape without softcap (named "
                                 "*_expr; alone or with --score-mod), e.g. 'q - k < 256'; "
                                 "DRIFTLESS_MASK_TILE_SKIP=0 times it without the tiles and "
                                 "blocks it hides being skipped. TFLOP/s still count every "
                                 "causal pair: compare the times");
                 att->add_flag("--queued", a->queued,
                               "time the reps as one queue and report their mean: the GPU's "
                               "time, the host's per-call work hidden behind it (by default "
                               "each call is timed alone, from before its host work to its "
                               "last kernel, as tests/reference/bench_attention.py times "
                               "PyTorch); also the GPU's energy a call (fwd_mJ, fwdbwd_mJ, "
                               "from NVML's counter) where the queue lasts a second or more: "
                               "raise --reps until it does (a long run is power-capped, and "
                               "its speed then follows the energy)");
                 att->add_flag("--learnable", a->learnable,
                               "--score-mod's tables `slope` and `bias` take gradients (the "
                               "backward computes them, as in training)");
                 att->add_flag("--alibi", a->alibi,
                               "the built-in ALiBi, slopes 2^(-8 (h + 1) / H) (the table "
                               "`slope` of --score-mod), on every shape without softcap "
                               "(named *_alibi)");
                 auto train_run = std::make_shared<std::function<int()>>();
                 auto* tr = add_bench_train(sub, train_run.get());
                 sub.require_subcommand(1);
                 return std::function<int()>([a, att, tr, train_run] {
                   if (tr->parsed()) return (*train_run)();
                   return att->parsed() ? run_attention(*a) : run_memory(*a);
                 });
               }});

}  // namespace
}  // namespace driftless::apps
