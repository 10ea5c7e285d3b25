// The GPT-2 model: token + learned position embeddings
// (positions from the length model, restarting per document), pre-LN blocks with varlen
// per-document causal attention over per-layer K/V buffers, GELU MLP, final LN, LM head
// tied to the token embedding. Parameters live in one ParameterSlab with HF GPT-2 names
// (without the "transformer." prefix), weights stored (out, in).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "data/model_input.h"
#include "layers/gpt_config.h"
#include "layers/attention/context_parallel.h"
#include "layers/attention/kv_buffer.h"
#include "layers/parameters.h"
#include "layers/tap.h"

namespace driftless::layers {

// Test-only faults (regression must catch them; see tests/e2e).
struct ModelFaults {
  int64_t layer = -1;                   // which layer the fault is in (-1: none)
  bool cu_seqlens_k_from_begin = false;  // cu_seqlens_k[0] = first_document_begin (micro-seq >= 1)
  bool drop_kv_grad_slice = false;      // a K/V gradient slice is lost
  bool skip_kv_reduce_scatter = false;  // SDP: a K/V gradient slice is not reduced over ranks
  bool reverse_micro_sequences = false;  // micro-sequences run forward in the wrong order (trainer)
};

// One sequence of the micro-batch slice the model runs now.
struct SliceInput {
  const data::ModelInput* input = nullptr;
  int64_t slot = 0;             // which K/V buffer sequence it uses
  int64_t global_sequence = 0;  // index in the step's global batch (for tensor logs)
  // Context parallel a2a: the whole micro-sequence (SliceSpec {i, m, 0, 1}), whose rows
  // this rank attends for its heads. Ring: the slice lists chunks r and 2P-1-r of each
  // sequence as two consecutive entries with the same slot.
  const data::ModelInput* whole = nullptr;
};

struct ForwardOptions {
  TensorSink* sink = nullptr;       // tensor logs
  KvExchange* exchange = nullptr;   // SDP K/V exchange (nullptr: single rank)
  // Context parallelism over the exchange's ranks instead of SDP (context_parallel.h).
  ContextParallel context_parallel = ContextParallel::none;
  const ModelFaults* faults = nullptr;
  bool training = true;             // dropout on
  // The loss recomputes its logits in the backward instead of saving dx / dW: set when
  // several forwards are in flight before their backwards (lm_loss.h).
  bool recompute_loss = false;
  // SDP: exchange whole chunks of K/V instead of only the rows other ranks read
  // (ModelInput::exchange_rows); distributed.kv_exchange: full.
  bool full_kv_exchange = false;
  // Slices of whole sequences on one rank (one micro-sequence) read their K/V straight
  // from the QKV product instead of through the K/V buffer, which would only be a copy (the
  // trainer then allocates none). Bitwise the same results: the buffer copy is exact and
  // the sole slice's K/V gradient bypasses the buffer anyway. Other slices take the buffer
  // whatever the flag; the caller sets it only when no later call reads the buffer's rows
  // (generation's decode steps read the prompt's K/V there, so it leaves it off).
  bool kv_direct = false;
  // false: attention's backward may sum dQ with atomic adds (AttentionSpec::deterministic;
  // training.deterministic).
  bool deterministic = true;
  uint64_t dropout_seed = 0;
};

class Gpt {
 public:
  // compute: f32, or bf16 (bf16 activations and K/V, f32 master weights, f32 gradients).
  explicit Gpt(const GptConfig& config, Device device = Device::cpu,
               DType compute = DType::f32);
  const GptConfig& config() const { return config_; }
  ParameterSlab& slab() { return slab_; }
  const ParameterSlab& slab() const { return slab_; }
  int64_t num_parameters() const { return slab_.numel(); }
  // GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02/sqrt(2 n_layer)),
  // zero biases, unit layer-norm gains. Seeded per parameter: same on every machine.
  void init(uint64_t seed);
  DType compute_dtype() const { return slab_.compute_dtype(); }

  // K/V buffers for `slots` sequences of `sequence_length` tokens (allocated once), of
  // n_kv_head / head_groups heads (context parallel a2a: this rank's heads only).
  void prepare_buffers(int64_t slots, int64_t sequence_length, int64_t head_groups = 1);
  void zero_kv_grads();
  int64_t kv_buffer_bytes() const;

  // Sum over loss-masked rows of the slice of the cross-entropy, times loss_scale: ()
  Tensor loss(const std::vector<SliceInput>& slice, double loss_scale,
              const ForwardOptions& options);
  // Logits (sum of T_q, V) of the slice.
  Tensor logits(const std::vector<SliceInput>& slice, const ForwardOptions& options);

 private:
  Tensor hidden(const std::vector<SliceInput>& slice, const ForwardOptions& options,
                std::vector<RowBlock>& rows);
  Tensor block(int64_t layer, const Tensor& x, const std::vector<SliceInput>& slice,
               const ForwardOptions& options, const std::vector<RowBlock>& rows);
  // The attention branch of a block; with `residual` defined, residual + the branch, the
  // sum in the output projection's node (linear's residual).
  Tensor self_attention(int64_t layer, const Tensor& x, const std::vector<SliceInput>& slice,
                        const ForwardOptions& options, const std::vector<RowBlock>& rows,
                        const Tensor& residual = Tensor());
  // The attention core of context parallelism: qkv (T, (H + 2 H_kv) D) -> (T, H D).
  Tensor context_parallel_core(int64_t layer, const Tensor& qkv,
                               const std::vector<SliceInput>& slice, const ForwardOptions& options);
  // The modifier of every attention call (softcap, or ALiBi slopes of heads [h0, h0 + n)).
  ScoreModSpec score_mod(int64_t h0, int64_t n) const;
  const Tensor& p(const std::string& name) const { return slab_[name]; }

  GptConfig config_;
  Device device_;
  ParameterSlab slab_;
  std::vector<KvBuffer> kv_buffers_;
  Tensor alibi_slopes_;
};

}  // namespace driftless::layers
