// The trainer: builds data, model and optimizer from a
// Config, runs steps in any batch layout (ARCHITECTURE.md "Data flow"), evaluates, checkpoints,
// writes metrics and tensor logs. Layout-independent: the sampler, initialisation and
// every RNG depend on (seed, step) only, so any layout of the same config computes the
// same global batch and, up to rounding, the same gradients.
#pragma once
#include <atomic>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/sampler.h"
#include "engine/optim/schedule.h"
#include "layers/gpt.h"
#include "parallel/communicator.h"
#include "train/config.h"
#include "train/layout.h"
#include "train/run_directory.h"
#include "train/slab_optimizer.h"
#include "train/step_hooks.h"
#include "train/step_plan.h"
#include "train/tensor_log.h"

namespace driftless::train {

struct TrainerOptions {
  bool resume = false;     // continue from the run's newest intact checkpoint
  bool overwrite = false;  // a run directory holding a run is cleared instead of refused
  // --resume: keys allowed to differ from the checkpoint's config although the run then
  // no longer continues bit for bit.
  std::vector<std::string> allow_changes;
  int64_t rank = 0;                              // world rank
  parallel::Communicator* data_group = nullptr;  // all ranks (dp x sdp); nullptr: one rank
  // All ranks on host tensors (MPI): agreement on the config and the stop step, cheap next
  // to NCCL's device round trips. nullptr: data_group.
  parallel::Communicator* control = nullptr;
  KvExchange* sdp_exchange = nullptr;  // ranks sharing a sequence
  // Hybrid context parallelism: this rank's all-to-all group, and the ring across the groups.
  KvExchange* cp_group_exchange = nullptr;
  KvExchange* cp_ring_exchange = nullptr;
  // Changes to the route and to every step's plan applied from outside (nullptr: none).
  const StepHooks* hooks = nullptr;
  // A signal number (SIGINT, SIGTERM) set by a handler on any rank: every rank finishes the
  // step, they agree on it, write one checkpoint and stop (status 128 + the signal).
  const std::atomic<int>* stop = nullptr;
  bool progress = true;         // progress bar / lines on `log`
  std::ostream* log = nullptr;  // default std::cerr
};

struct StepStats {
  int64_t step = 0;
  double loss = 0;       // mean over the global batch's loss tokens
  double grad_norm = 0;  // before clipping
  double lr = 0;
  int64_t tokens = 0;  // tokens of the global batch
  double flops = 0;    // model FLOPs of the step (forward + backward, all ranks)
  double seconds = 0;
  // Host time (part of seconds): making the batch and its plan before any GPU work, and
  // issuing the forwards and backwards (on a GPU, a stretch as long as their GPU time means
  // the host, not the GPU, sets the pace).
  double prepare_seconds = 0, issue_seconds = 0;
  // A non-finite step (update skipped): the first parameter whose gradient is not finite,
  // or "" when only the loss is.
  std::string non_finite;
};

std::unique_ptr<data::Dataset> open_training_data(const Config& c, bool validation);
data::SamplerConfig sampler_config(const Config& c);

class Trainer {
 public:
  Trainer(const Config& config, const TrainerOptions& options = {});
  ~Trainer();

  // One optimizer step on global batch `step`.
  StepStats train_step(int64_t step);
  // Mean loss over training.eval_batches validation batches (or training batches from a
  // separate stream when there is no validation set).
  double evaluate();
  // The whole run: resume, steps, eval, checkpoints, metrics, summary. Returns the exit
  // status: 0, or 128 + the signal when stopped by `stop` (after writing a checkpoint).
  // Throws after training.max_nonfinite_steps non-finite steps in a row.
  int run();
  // Writes the checkpoint of `step` (collective); returns its path (written by rank 0).
  std::string save(int64_t step);

  layers::Gpt& model() { return *model_; }
  const Config& config() const { return config_; }
  const Layout& layout() const { return layout_; }
  int64_t next_step() const { return next_step_; }

 private:
  bool is_root() const { return options_.rank == 0; }
  parallel::Communicator* control() const {
    return options_.control ? options_.control : options_.data_group;
  }
  // The stop signal the ranks agree on (the largest any rank saw; 0: none).
  int agreed_stop() const;
  // --resume: the newest checkpoint that verifies (saying which it skipped), agreed over
  // the ranks, with its config checked against this run's.
  std::string checkpoint_to_resume();
  // The forwards and backwards of the step's plan; returns the sum of its losses (read
  // after the last backward: no host sync inside the step).
  // issue_seconds (or null): set to the host time spent issuing the forwards and backwards.
  double run_plan(const StepPlan& plan, const layers::ForwardOptions& fo, double loss_scale,
                  double* issue_seconds = nullptr);
  // The gradients reduced over the data group, their norm and clipping, the optimizer's
  // update, and the tensor logs of gradients and parameters.
  StepStats reduce_and_update(int64_t step, double loss_sum, const data::GlobalBatch& batch,
                              TensorLogger* logger);
  std::ostream& log() const;
  void all_reduce(const Tensor& t) const;
  // Sum of v over the data group (v itself on one rank).
  double all_reduce_scalar(double v) const;

  Config config_;
  TrainerOptions options_;
  std::unique_ptr<RunDirectory> run_dir_;  // rank 0: the lock on run.output_dir
  Layout layout_;
  Device device_ = Device::cpu;  // precision.device: parameters, slabs, K/V buffers, inputs
  std::unique_ptr<data::Dataset> train_data_, val_data_;
  std::unique_ptr<data::Sampler> sampler_, val_sampler_;
  std::unique_ptr<layers::Gpt> model_;
  std::unique_ptr<SlabOptimizer> optimizer_;  // with the gradient reduction
  optim::LrSchedule schedule_;
  int64_t next_step_ = 0;
  std::unique_ptr<layers::AttentionRoute> route_;  // the layout's (attention_route)
  double peak_flops_ = 0;                          // per GPU, for MFU; 0: unknown
};

}  // namespace driftless::train
