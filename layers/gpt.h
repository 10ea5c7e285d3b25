// The GPT-2 model: token + learned position embeddings (positions from the length model,
// restarting per document), pre-LN blocks whose attention is projection, attention route
// (layers/attention/routes/route.h: where K/V come from; the model knows no parallel
// scheme), projection; GELU MLP, final LN, LM head tied to the token embedding. Parameters
// live in one ParameterSlab with HF GPT-2 names (without the "transformer." prefix),
// weights stored (out, in).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "data/model_input.h"
#include "layers/attention/routes/route.h"
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

class Gpt {
 public:
  // compute: f32, or bf16 (bf16 activations and K/V, f32 master weights, f32 gradients).
  explicit Gpt(const GptConfig& config, Device device = Device::cpu, DType compute = DType::f32);
  const GptConfig& config() const { return config_; }
  ParameterSlab& slab() { return slab_; }
  const ParameterSlab& slab() const { return slab_; }
  int64_t num_parameters() const { return slab_.numel(); }
  // GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02/sqrt(2 n_layer)),
  // zero biases, unit layer-norm gains. Seeded per parameter: same on every machine.
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
  Tensor block(int64_t layer, const Tensor& x, const std::vector<PartInput>& slice,
               const ForwardOptions& options, const std::vector<PartRows>& rows);
  // The attention branch of a block: projection, route, projection. With `residual`
  // defined, residual + the branch, the sum in the output projection's node (linear's
  // residual).
  Tensor self_attention(int64_t layer, const Tensor& x, const std::vector<PartInput>& slice,
                        const ForwardOptions& options, const std::vector<PartRows>& rows,
                        const Tensor& residual = Tensor());
  // The modifier of every attention call (softcap, or ALiBi slopes of heads [h0, h0 + n)).
  ScoreModSpec score_mod(int64_t h0, int64_t n) const;
  const Tensor& p(const std::string& name) const { return slab_[name]; }

  GptConfig config_;
  Device device_;
  ParameterSlab slab_;
  Tensor alibi_slopes_;
};

}  // namespace driftless::layers
