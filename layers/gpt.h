// The model: one decoder for every family (ARCHITECTURE.md "The model: one decoder, a block
// per family"): embeddings, a stack of pre-norm blocks, a final norm and the LM head, with
// recompute and dropout streams; the family (layers/families/) supplies its parameters, their
// init and the pieces of its block. Attention is projection, attention route
// (layers/attention/routes/route.h: where K/V come from; the model knows no parallel
// scheme), projection. Parameters live in one ParameterSlab, weights stored (out, in).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "data/model_input.h"
#include "engine/ops/ops.h"
#include "layers/attention/routes/route.h"
#include "layers/families/family.h"
#include "layers/gpt_config.h"
#include "layers/parameters.h"
#include "layers/recompute.h"
#include "layers/tap.h"

namespace driftless::layers {

struct ForwardOptions {
  TensorSink* sink = nullptr;  // tensor logs
  // Where each layer's attention gets its keys and values (routes/route.h), prepared with
  // prepare_route. nullptr: whole sequences on one rank, K/V straight from QKV (LocalRoute).
  AttentionRoute* route = nullptr;
  bool training = true;  // dropout on
  // The loss recomputes its logits in the backward instead of saving dx / dW: set when
  // several forwards are in flight before their backwards (lm_loss.h).
  bool recompute_loss = false;
  // false: attention's backward may sum dQ with atomic adds (AttentionSpec::deterministic;
  // training.deterministic).
  bool deterministic = true;
  uint64_t dropout_seed = 0;
  // Activations recomputed in the backward (autograd::checkpoint around each block, or
  // around each attention branch); the gradients are the same bits.
  Recompute recompute = Recompute::none;
};

// The slice's rows named by their place in the step's global batch (sequence x S +
// position), so dropout draws the mask `simple` draws whatever the layout.
std::vector<ops::DropoutRows> dropout_rows(const std::vector<PartInput>& slice);

class Gpt {
 public:
  // compute: f32, or bf16 (bf16 activations and K/V, f32 master weights, f32 gradients).
  explicit Gpt(const GptConfig& config, Device device = Device::cpu, DType compute = DType::f32);
  const GptConfig& config() const { return config_; }
  ParameterSlab& slab() { return slab_; }
  const ParameterSlab& slab() const { return slab_; }
  int64_t num_parameters() const { return slab_.numel(); }
  // Every parameter as its family declared it (GPT-2: N(0, 0.02), residual projections
  // N(0, 0.02/sqrt(2 n_layer)), zero biases, unit gains; Llama, HF's: every matrix
  // N(0, 0.02), unit gains), expression parameters at their configured values. Seeded per
  // parameter: same on every machine.
  void init(uint64_t seed);
  DType compute_dtype() const { return slab_.compute_dtype(); }

  Device device() const { return device_; }
  AttentionShape attention_shape() const;
  // Sizes a route's K/V buffers for `slots` sequences of `sequence_length` tokens in the
  // model's compute dtype and device (allocated once).
  void prepare_route(AttentionRoute& route, int64_t slots, int64_t sequence_length) const;

  // Sum over loss-masked rows of the slice of the cross-entropy, times loss_scale: ()
  Tensor loss(const std::vector<PartInput>& slice, double loss_scale,
              const ForwardOptions& options);
  // Logits (sum of T_q, V) of the slice.
  Tensor logits(const std::vector<PartInput>& slice, const ForwardOptions& options);

 private:
  Tensor hidden(const std::vector<PartInput>& slice, const ForwardOptions& options,
                std::vector<PartRows>& rows);
  // One block: norm, attention branch, residual, norm, MLP, residual (dropout on each
  // branch). positions: the family's block_positions (rotary positions), or undefined.
  Tensor block(int64_t layer, const Tensor& x, const Tensor& positions,
               const std::vector<PartInput>& slice, const ForwardOptions& options,
               const std::vector<PartRows>& rows);
  // The route's call of a layer: qkv (T, (H + 2 H_kv) D) -> (T, H D), tapped as
  // `prefix`.core.
  Tensor route_attention(int64_t layer, const Tensor& qkv, const std::vector<PartInput>& slice,
                         const ForwardOptions& options, const std::vector<PartRows>& rows,
                         const std::string& prefix);
  // Layer l's parameters in slab order (the inputs of a recomputed block's checkpoint node).
  std::vector<Tensor> layer_parameters(int64_t layer) const;
  LayerWeights weights(int64_t layer) const { return {slab_, family_->layer_prefix(layer)}; }
  // The attention branch of a block: projection, route, projection. With `residual`
  // defined, residual + the branch, the sum in the output projection's node (linear's
  // residual).
  Tensor attention(int64_t layer, const Tensor& x, const Tensor& positions,
                   const std::vector<PartInput>& slice, const ForwardOptions& options,
                   const std::vector<PartRows>& rows, const Tensor& residual = Tensor());
  // The modifier of layer `layer`'s attention calls (softcap, ALiBi slopes of heads
  // [h0, h0 + n), or the model's expressions with the layer's learnable parameters).
  ScoreModSpec score_mod(int64_t layer, int64_t h0, int64_t n) const;
  // Layer l's learnable expression parameter `name` in the slab: "<layer prefix>score_mod.name",
  // and all of layer l's (the extra inputs of a recomputed attention branch).
  std::string score_mod_param_name(int64_t layer, const std::string& name) const;
  std::vector<Tensor> score_mod_parameters(int64_t layer) const;
  // The leaves of layer l's attention branch (its projections and score_mod parameters): the
  // extra inputs of its checkpoint under training.recompute attention.
  std::vector<Tensor> attention_parameters(int64_t layer) const;
  const Tensor& p(const std::string& name) const { return slab_[name]; }

  GptConfig config_;
  std::unique_ptr<Family> family_;
  Device device_;
  ParameterSlab slab_;
  std::vector<ParameterInit> inits_;  // per slab parameter, as declared
  Tensor alibi_slopes_;
};

}  // namespace driftless::layers
