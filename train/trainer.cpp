// The training loop (trainer.h).
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/memmap_dataset.h"
#include "data/random_dataset.h"
#include "engine/autograd/autograd.h"
#include "engine/core/device_ops.h"
#include "engine/core/random.h"
#include "engine/optim/clip.h"
#include "layers/attention/jit/kernel_cache.h"
#include "train/checkpoint.h"
#include "train/flops.h"
#include "train/metrics_file.h"
#include "train/progress.h"
#include "train/rank_agreement.h"
#include "train/resume.h"
#include "train/step_plan.h"
#include "train/tensor_log.h"

namespace driftless::train {

namespace fs = std::filesystem;

std::unique_ptr<data::Dataset> open_training_data(const Config& c, bool validation) {
  const DataConfig& d = c.data;
  if (d.format == DataFormat::random) {
    data::RandomDatasetConfig r;
    r.num_documents = d.random_documents;
    r.distribution = d.random_distribution;
    r.max_length = int32_t(d.random_max_length);
    r.mean_length = double(d.random_mean_length);
    r.vocab_size = int32_t(c.model.vocab_size);
    r.seed = uint64_t(c.training.seed) ^ (validation ? 0x9e3779b97f4a7c15ull : 0);
    return std::make_unique<data::RandomDataset>(r);
  }
  const std::string& path = validation ? d.validation_path : d.path;
  if (path.empty()) return nullptr;
  auto ds = data::open_dataset(path);
  const bool is_memmap = dynamic_cast<const data::MemmapDataset*>(ds.get()) != nullptr;
  DL_CHECK(is_memmap == (d.format == DataFormat::memmap), "train",
           path << " is " << (is_memmap ? "a memmap .bin/.idx dataset" : "an llm.c shard dataset")
                << " but data.format is " << config_name(d.format));
  DL_CHECK(ds->vocab_size() <= c.model.vocab_size, "train",
           path << " uses a vocabulary of " << ds->vocab_size()
                << " tokens, more than model.vocab_size (" << c.model.vocab_size << ")");
  // Every token against the vocabulary now, not when the sampler first reaches it.
  if (is_memmap) static_cast<const data::MemmapDataset&>(*ds).validate();
  return ds;
}

data::SamplerConfig sampler_config(const Config& c) {
  data::SamplerConfig s;
  s.sequence_length = c.batch.sequence_length;
  s.sequences = c.batch.sequences;
  s.seed = uint64_t(c.training.seed);
  s.long_documents = c.data.long_documents;
  s.pad_documents_to = int32_t(c.data.pad_documents_to);
  s.shuffle = c.data.shuffle;
  return s;
}

Trainer::Trainer(const Config& config, const TrainerOptions& options)
    : config_(config),
      options_(options),
      layout_(Layout::from_config(config, options.rank)),
      device_(config.precision.device) {
  const int64_t world = options.data_group ? options.data_group->size() : 1;
  DL_CHECK(world == layout_.world_size(), "train",
           "world size " << world << " does not equal data_parallel (" << layout_.data_parallel
                         << ") x the ranks sharing a sequence (sequence_data_parallel "
                         << layout_.sequence_data_parallel << " x context_parallel.size "
                         << layout_.context_parallel << ")");
  if (options.hooks) options.hooks->check(layout_);
  DL_CHECK(layout_.sequence_ranks() == 1 || options.sdp_exchange, "train",
           "sequence_data_parallel or context_parallel.size > 1 needs an exchange between the "
           "ranks of a sequence (run under mpirun)");
  DL_CHECK(config.precision.compute == DType::f32 || device_ == Device::cuda, "train",
           "precision.compute " << dtype_name(config.precision.compute)
                                << " needs precision.device cuda (the CPU computes in f32)");
  DL_CHECK(device_ == Device::cpu || cuda::device_count() > 0, "train",
           "precision.device cuda, but no CUDA device is available"
               << (cuda::device_count() == 0 ? " (no GPU, or a build without CUDA)" : ""));
  micro_batches(layout_, config.batch.sequences);  // validates the split before any work
  train_data_ = open_training_data(config, false);
  val_data_ = open_training_data(config, true);
  sampler_ = std::make_unique<data::Sampler>(*train_data_, sampler_config(config));
  if (val_data_) val_sampler_ = std::make_unique<data::Sampler>(*val_data_, sampler_config(config));
  if (is_root())
    run_dir_ = std::make_unique<RunDirectory>(config.run.output_dir,
                                              options.resume      ? RunDirMode::resume
                                              : options.overwrite ? RunDirMode::overwrite
                                                                  : RunDirMode::fresh,
                                              log());

  model_ = std::make_unique<layers::Gpt>(config.model, device_, config.precision.compute);
  model_->init(uint64_t(config.training.seed));
  if (!config.training.init_from.empty() && !options.resume)
    init_from_checkpoint(config.training.init_from, *model_);
  const RouteMaker make_route = [&](KvExchange* exchange, bool keep_buffers) {
    return attention_route(layout_, exchange,
                           config.distributed.kv_exchange == KvExchangeMode::full,
                           options.cp_group_exchange, options.cp_ring_exchange, keep_buffers);
  };
  route_ = options.hooks ? options.hooks->route(make_route, options.sdp_exchange)
                         : make_route(options.sdp_exchange, false);
  const int64_t slots = config.batch.sequences / layout_.data_parallel / layout_.depth_first;
  model_->prepare_route(*route_, slots, config.batch.sequence_length);

  SlabOptimizerOptions optimizer_options = SlabOptimizerOptions::of(config);
  if (options.hooks)
    optimizer_options.decays = [hooks = options.hooks](const layers::Parameter& p) {
      return hooks->decays(p);
    };
  optimizer_ = std::make_unique<SlabOptimizer>(model_->slab(), optimizer_options,
                                               options.data_group, control());
  if (device_ == Device::cuda) {
    peak_flops_ = config.precision.peak_tflops * 1e12;
    if (peak_flops_ == 0) peak_flops_ = cuda_peak_flops(config.precision.compute);
  }
  schedule_.max_lr = config.optimizer.lr;
  schedule_.min_lr = config.optimizer.min_lr;
  schedule_.warmup_steps = config.optimizer.warmup_steps;
  schedule_.total_steps = config.training.steps;
  schedule_.decay = config.optimizer.decay;
  optim::validate(schedule_);

  if (control()) {  // names, shapes and slab offsets: what every collective relies on
    Entries layout;
    for (const auto& p : model_->slab().parameters())
      layout.emplace_back(p.name, shape_str(p.value.shape()) + " at " + std::to_string(p.begin));
    check_ranks_agree(*control(), layout, "parameter layout");
  }
  if (options.resume) {
    const std::string ckpt = checkpoint_to_resume();
    CheckpointInfo info = load_checkpoint(ckpt, *model_, &optimizer_->adamw());
    next_step_ = info.step + 1;
    log() << "resumed from " << ckpt << " (step " << info.step << ")\n";
  }
}

Trainer::~Trainer() = default;

std::string Trainer::checkpoint_to_resume() {
  const std::string& dir = config_.run.output_dir;
  // Rank 0 reads and verifies; the others take the step it chose.
  int64_t step = -1;
  std::string path;
  if (is_root()) {
    path = newest_intact_checkpoint(dir, log());
    step = read_checkpoint_info(path).step;
  }
  if (control() && control()->size() > 1) {
    step = all_ranks_max(*control(), step);
    if (!is_root())
      for (const auto& [s, p] : list_checkpoints(dir))
        if (s == step) path = p;
    DL_CHECK(!path.empty(), "train",
             "--resume: rank " << options_.rank << " does not see the checkpoint of step " << step
                               << " that rank 0 chose in " << dir << "/checkpoints");
  }
  const Config stored = parse_config_text(read_checkpoint_info(path).config_yaml);
  check_resume_config(path, stored, config_, options_.allow_changes, log());
  return path;
}

int Trainer::agreed_stop() const {
  const int mine = options_.stop ? options_.stop->load() : 0;
  if (!control() || control()->size() == 1) return mine;
  return int(all_ranks_max(*control(), mine));
}

std::ostream& Trainer::log() const {
  return options_.log ? *options_.log : std::cerr;
}

void Trainer::all_reduce(const Tensor& t) const {
  if (options_.data_group && options_.data_group->size() > 1) options_.data_group->all_reduce(t);
}

double Trainer::all_reduce_scalar(double v) const {
  if (!options_.data_group || options_.data_group->size() == 1) return v;
  Tensor t = Tensor::full({1}, v, DType::f64, device_);  // on the communicator's device
  all_reduce(t);
  return t.item();
}

double Trainer::run_plan(const StepPlan& plan, const layers::ForwardOptions& fo, double loss_scale,
                         double* issue_seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  model_->slab().zero_grads();
  std::vector<Tensor> loss_parts;  // read after the backward: no host sync inside the step
  for (const PlannedGroup& group : plan.groups) {
    route_->zero_grads();
    std::vector<Tensor> losses;
    for (const PlannedForward& f : group.forward)
      losses.push_back(model_->loss(f.inputs, loss_scale, fo));
    // The step's very last backward pass completes the parameter gradients: its leaf hook
    // starts the bucketed data-parallel reduction while the backward goes on.
    const bool last_group = &group == &plan.groups.back();
    if (last_group) optimizer_->start_step();
    for (size_t n = 0; n < group.backward.size(); ++n) {
      const Tensor& loss = losses[size_t(group.backward[n])];
      loss_parts.push_back(loss.detach());
      const bool last = last_group && n + 1 == group.backward.size();
      autograd::backward(loss, Tensor(), last ? optimizer_->hook() : autograd::LeafDoneHook());
    }
  }
  if (issue_seconds)
    *issue_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double loss_sum = 0;
  for (const Tensor& l : loss_parts) loss_sum += l.item();
  return loss_sum;
}

StepStats Trainer::reduce_and_update(int64_t step, double loss_sum, const data::GlobalBatch& batch,
                                     TensorLogger* logger) {
  // The gradients this rank updates with, summed over the data group.
  const Tensor update_grads = optimizer_->reduced_grads();
  const double norm_sq = optimizer_->grad_norm_squared(update_grads);

  StepStats st;
  st.step = step;
  st.loss = all_reduce_scalar(loss_sum);
  st.tokens = config_.batch.sequences * config_.batch.sequence_length;
  st.flops = step_flops(config_.model, batch);
  st.grad_norm = std::sqrt(norm_sq);
  // The clipping factor rides in the optimizer's pass over the gradients, unless the tensor
  // log is to record the clipped gradients themselves.
  double clip = config_.optimizer.grad_clip > 0
                    ? optim::clip_coefficient(st.grad_norm, config_.optimizer.grad_clip)
                    : 1.0;
  if (logger && clip != 1.0) {
    optim::scale_grads(update_grads, clip);
    clip = 1.0;
  }
  st.lr = optim::learning_rate(schedule_, step);
  if (logger) {
    optimizer_->gather_grads(update_grads);  // whole gradients for the log
    for (const auto& p : model_->slab().parameters())
      logger->write_whole("param_grad/" + p.name, "param_grad", p.grad);
  }
  if (std::isfinite(st.grad_norm) && std::isfinite(st.loss)) {
    optimizer_->step(update_grads, st.lr, clip);
  } else {
    st.non_finite = optimizer_->first_non_finite_gradient();
  }
  if (logger) {
    for (const auto& p : model_->slab().parameters())
      logger->write_whole("param/" + p.name, "param", p.value);
    logger->combine([&](Tensor& t) {  // logs live on the host; NCCL reduces device tensors
      if (device_ == Device::cpu) return all_reduce(t);
      Tensor d = t.to(device_);
      all_reduce(d);
      t.copy_(d);
    });
    if (is_root()) logger->save(config_.run.output_dir + "/tensor_logs", step);
  }
  return st;
}

StepStats Trainer::train_step(int64_t step) {
  const auto t0 = std::chrono::steady_clock::now();
  const data::GlobalBatch batch = sampler_->batch(step);
  DL_CHECK(batch.loss_tokens > 0, "train", "global batch " << step << " has no loss tokens");
  const double loss_scale = 1.0 / double(batch.loss_tokens);
  const bool logging =
      std::find(config_.run.tensor_logs.steps.begin(), config_.run.tensor_logs.steps.end(), step) !=
      config_.run.tensor_logs.steps.end();
  std::unique_ptr<TensorLogger> logger;
  if (logging)
    logger = std::make_unique<TensorLogger>(config_.batch.sequences, config_.batch.sequence_length,
                                            config_.run.tensor_logs.kinds);
  layers::ForwardOptions fo;
  fo.sink = logger.get();
  fo.route = route_.get();
  fo.training = true;
  fo.dropout_seed = random::derive(uint64_t(config_.training.seed), uint64_t(step));
  fo.deterministic = config_.training.deterministic;
  fo.recompute = config_.training.recompute;

  PlanOptions po;
  po.pad_documents_to = int32_t(config_.data.pad_documents_to);
  StepPlan plan = plan_step(layout_, batch, po);
  if (options_.hooks) options_.hooks->rewrite(plan);
  fo.recompute_loss = plan.recompute_loss;
  const auto t1 = std::chrono::steady_clock::now();
  double issue_seconds = 0;
  const double loss_sum = run_plan(plan, fo, loss_scale, &issue_seconds);
  StepStats st = reduce_and_update(step, loss_sum, batch, logger.get());
  st.prepare_seconds = std::chrono::duration<double>(t1 - t0).count();
  st.issue_seconds = issue_seconds;
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  next_step_ = step + 1;
  return st;
}

double Trainer::evaluate() {
  autograd::NoGradGuard no_grad;
  data::Sampler& sampler = val_sampler_ ? *val_sampler_ : *sampler_;
  // Without a validation set, evaluate on training batches far beyond the run's steps.
  const int64_t offset = val_sampler_ ? 0 : int64_t(1) << 40;
  double loss = 0, tokens = 0;
  PlanOptions po;
  po.pad_documents_to = int32_t(config_.data.pad_documents_to);
  po.evaluation = true;
  for (int64_t k = 0; k < config_.training.eval_batches; ++k) {
    const data::GlobalBatch batch = sampler.batch(offset + k);
    tokens += double(batch.loss_tokens);
    const StepPlan plan = plan_step(layout_, batch, po);
    for (const PlannedGroup& group : plan.groups)
      for (const PlannedForward& f : group.forward) {
        layers::ForwardOptions fo;
        fo.training = false;  // whole sequences, no exchange: the local route, no buffer
        fo.recompute_loss = plan.recompute_loss;
        loss += model_->loss(f.inputs, 1.0, fo).item();
      }
  }
  return all_reduce_scalar(loss) / std::max(tokens, 1.0);
}

std::string Trainer::save(int64_t step) {
  const OptimizerSnapshot snap = optimizer_->snapshot();  // a collective when sharded
  const std::string path = checkpoint_path(config_.run.output_dir, step);
  if (is_root()) {
    save_checkpoint(path, *model_, &snap, {step, config_to_yaml(config_)});
    prune_checkpoints(config_.run.output_dir, config_.training.keep_checkpoints);
  }
  return path;
}

namespace {
const char* signal_name(int sig) {
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}

// The process kernel cache's counters so far (rank 0's), on the lines of runs that used it.
void add_kernel_cache_stats(nlohmann::json& line) {
  const layers::jit::KernelCacheStats s = layers::jit::process_kernel_cache().stats();
  if (s.hits == 0 && s.misses == 0 && s.evictions == 0 && s.disk_errors == 0) return;
  line["kernel_cache_hits"] = s.hits;
  line["kernel_cache_misses"] = s.misses;
  line["kernel_cache_disk_hits"] = s.disk_hits;
  line["kernel_cache_compiles"] = s.compiles;
  line["kernel_cache_evictions"] = s.evictions;
  line["kernel_cache_disk_errors"] = s.disk_errors;
}
}  // namespace

int Trainer::run() {
  const std::string dir = config_.run.output_dir;
  MetricsWriter metrics;
  if (is_root()) {  // the directory is ours (run_dir_): created, locked, checked writable
    std::ofstream(dir + "/config.yaml") << config_to_yaml(config_);
    metrics.open(dir + "/metrics.jsonl", options_.resume);
    log() << "driftless train: " << model_->num_parameters() << " parameters, "
          << layout_.describe() << ", " << config_.batch.sequences << " x "
          << config_.batch.sequence_length << " tokens per step, run dir " << dir << "\n";
  }
  if (next_step_ >= config_.training.steps) {
    if (is_root())
      log() << "nothing to train: the checkpoint is at step " << next_step_ - 1
            << " and training.steps is " << config_.training.steps
            << " (raise training.steps to train further)\n";
    return 0;
  }
  Progress progress(log(), config_.training.steps, config_.training.log_interval,
                    options_.progress && is_root());
  const auto start = std::chrono::steady_clock::now();
  int64_t tokens_done = 0;
  double flops_done = 0, train_seconds = 0;  // training steps only (no eval, no checkpoints)
  const double world = double(layout_.world_size());
  StepStats last;
  double last_val = std::nan("");
  int64_t non_finite_run = 0;  // consecutive non-finite steps, the first of them below
  StepStats first_non_finite;
  // A signal before step 0 still lets one step run: the checkpoint of a stopped run is
  // always at a completed step.
  int stop = 0;
  for (int64_t step = next_step_; step < config_.training.steps && !stop; ++step) {
    last = train_step(step);
    tokens_done += last.tokens;
    flops_done += last.flops;
    train_seconds += last.seconds;
    const double tps = double(tokens_done) / std::max(train_seconds, 1e-9);
    // Model FLOP utilisation over all GPUs of the run (0 when the peak is unknown).
    const double mfu =
        peak_flops_ > 0 ? flops_done / std::max(train_seconds, 1e-9) / (peak_flops_ * world) : 0;
    if (is_root()) {
      nlohmann::json line{{"step", step},
                          {"loss", last.loss},
                          {"lr", last.lr},
                          {"grad_norm", last.grad_norm},
                          {"tokens", last.tokens},
                          {"tokens_per_second", tps},
                          {"mfu", mfu},
                          {"step_seconds", last.seconds}};
      add_kernel_cache_stats(line);
      metrics.write(line.dump());
      std::ostringstream extra;
      extra << "loss " << std::fixed << std::setprecision(4) << last.loss << "  "
            << std::setprecision(0) << tps << " tok/s";
      if (mfu > 0) extra << "  MFU " << std::setprecision(1) << 100 * mfu << "%";
      progress.update(step + 1, extra.str());
    }
    const bool finite = std::isfinite(last.loss) && std::isfinite(last.grad_norm);
    if (finite) {
      non_finite_run = 0;
    } else {
      if (non_finite_run++ == 0) first_non_finite = last;
      const std::string where = last.non_finite.empty()
                                    ? std::string("the loss")
                                    : "first non-finite gradient: " + last.non_finite;
      if (is_root()) {
        std::ostringstream line;
        line << "step " << step << ": loss " << last.loss << ", gradient norm " << last.grad_norm
             << " (" << where << "); update skipped (" << non_finite_run << " in a row of at most "
             << config_.training.max_nonfinite_steps << ")";
        progress.message(line.str());
      }
      DL_CHECK(non_finite_run < config_.training.max_nonfinite_steps, "train",
               non_finite_run << " steps in a row (" << first_non_finite.step << " to " << step
                              << ") had a non-finite loss or gradient norm, at step "
                              << first_non_finite.step << " first in "
                              << (first_non_finite.non_finite.empty()
                                      ? std::string("the loss")
                                      : "the gradient of " + first_non_finite.non_finite)
                              << "; stopped without writing a checkpoint "
                                 "(training.max_nonfinite_steps "
                              << config_.training.max_nonfinite_steps << ")");
    }
    const bool last_step = step + 1 == config_.training.steps;
    if (config_.training.eval_interval > 0 &&
        ((step + 1) % config_.training.eval_interval == 0 || last_step)) {
      last_val = evaluate();
      if (is_root()) {
        metrics.write(nlohmann::json{{"step", step}, {"val_loss", last_val}}.dump());
        std::ostringstream line;
        line << "step " << step + 1 << ": validation loss " << std::fixed << std::setprecision(4)
             << last_val;
        progress.message(line.str());
      }
    }
    // Every rank leaves at the same step, whichever rank the signal reached.
    stop = agreed_stop();
    const int64_t every = config_.training.checkpoint_interval;
    if (last_step || stop || (every > 0 && (step + 1) % every == 0)) {
      const std::string path = save(step);
      if (stop && is_root())
        progress.message(std::string("interrupted by ") + signal_name(stop) +
                         ": checkpoint written at step " + std::to_string(step) + " (" + path +
                         "); continue with --resume");
    }
  }
  progress.finish();
  if (is_root() && tokens_done > 0) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    log() << "summary: " << (next_step_) << " steps, final loss " << std::fixed
          << std::setprecision(4) << last.loss;
    if (!std::isnan(last_val)) log() << ", validation loss " << last_val;
    log() << ", " << std::setprecision(0) << double(tokens_done) / std::max(train_seconds, 1e-9)
          << " tokens/s";
    if (peak_flops_ > 0)
      log() << ", MFU " << std::setprecision(1)
            << 100 * flops_done / std::max(train_seconds, 1e-9) / (peak_flops_ * world) << "%";
    log() << ", " << Progress::format_duration(elapsed) << ", checkpoint " << latest_checkpoint(dir)
          << "\n";
  }
  // A stopped run's status is not 0, and mpirun kills the other ranks when one exits so:
  // no rank leaves before rank 0 has written the checkpoint and said so.
  if (stop && control() && control()->size() > 1) control()->barrier();
  return stop ? 128 + stop : 0;
}

}  // namespace driftless::train
