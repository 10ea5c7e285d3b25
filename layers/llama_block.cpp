// The Llama-family block of Gpt (architecture llama; ARCHITECTURE.md "Model"): RMSNorm,
// fused QKV with rotary positions applied once before the route (so K enters every K/V
// buffer already rotated), output projection, RMSNorm, SwiGLU MLP; no biases.
#include "engine/autograd/autograd.h"
#include "engine/core/random.h"
#include "engine/ops/ops.h"
#include "layers/gpt.h"
#include "layers/linear.h"
#include "layers/recompute_keep.h"

namespace driftless::layers {

namespace {

std::string llama_name(int64_t l, const std::string& part) {
  return "layers." + std::to_string(l) + "." + part;
}

}  // namespace

void Gpt::declare_llama() {
  const GptConfig& c = config_;
  DL_CHECK(c.head_dim() % 2 == 0, "gpt",
           "llama: head dim " << c.head_dim() << " (n_embd " << c.n_embd << " / n_head " << c.n_head
                              << ") must be even for rotary positions");
  const int64_t C = c.n_embd, D = c.head_dim(), F = c.mlp_width();
  const int64_t qkv = (c.n_head + 2 * c.kv_heads()) * D;
  // Norm gains are not weight-decayed (the flag), as GPT-2's layer-norm parameters.
  slab_.declare("embed_tokens.weight", {c.vocab_size, C}, true);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    slab_.declare(llama_name(l, "input_layernorm.weight"), {C}, false);
    slab_.declare(llama_name(l, "self_attn.qkv_proj.weight"), {qkv, C}, true);  // rows Q|K|V
    slab_.declare(llama_name(l, "self_attn.o_proj.weight"), {C, c.n_head * D}, true);
    slab_.declare(llama_name(l, "post_attention_layernorm.weight"), {C}, false);
    slab_.declare(llama_name(l, "mlp.gate_up_proj.weight"), {2 * F, C}, true);  // rows gate|up
    slab_.declare(llama_name(l, "mlp.down_proj.weight"), {C, F}, true);
  }
  slab_.declare("norm.weight", {C}, false);
  if (!c.tie_word_embeddings) slab_.declare("lm_head.weight", {c.vocab_size, C}, true);
}

Tensor Gpt::llama_block(int64_t l, const Tensor& x, const Tensor& positions,
                        const std::vector<PartInput>& slice, const ForwardOptions& o,
                        const std::vector<PartRows>& rows) {
  // As GPT-2's block: without taps and dropout the residual sums ride in the output
  // projections' GEMMs; with either, the branch outputs exist on their own.
  const bool fused_residual = !o.sink && (!o.training || config_.dropout == 0);
  const GptConfig& c = config_;
  auto n = [l](const std::string& part) { return llama_name(l, part); };
  Tensor h = ops::rms_norm(x, p(n("input_layernorm.weight")), c.rms_norm_eps);
  h = tap(h, n("input_layernorm"), o.sink, rows);
  Tensor r;
  if (fused_residual) {
    r = llama_attention(l, h, positions, slice, o, rows, x);
  } else {
    Tensor a = llama_attention(l, h, positions, slice, o, rows, Tensor());
    a = ops::dropout(a, c.dropout, random::derive(o.dropout_seed, 2 * l + 1), dropout_rows(slice),
                     o.training);
    r = ops::add(x, tap(a, n("self_attn"), o.sink, rows));
  }
  Tensor m = ops::rms_norm(r, p(n("post_attention_layernorm.weight")), c.rms_norm_eps);
  m = tap(m, n("post_attention_layernorm"), o.sink, rows);
  m = ops::swiglu(linear(m, p(n("mlp.gate_up_proj.weight")), Tensor()));  // (T, F)
  const Tensor& w_down = p(n("mlp.down_proj.weight"));
  Tensor out;
  if (fused_residual) {
    out = linear(m, w_down, Tensor(), r);
  } else {
    m = linear(m, w_down, Tensor());
    m = ops::dropout(m, c.dropout, random::derive(o.dropout_seed, 2 * l + 2), dropout_rows(slice),
                     o.training);
    out = ops::add(r, tap(m, n("mlp"), o.sink, rows));
  }
  return tap(out, n("out"), o.sink, rows);
}

Tensor Gpt::llama_attention(int64_t l, const Tensor& h, const Tensor& positions,
                            const std::vector<PartInput>& slice, const ForwardOptions& o,
                            const std::vector<PartRows>& rows, const Tensor& residual) {
  auto n = [l](const std::string& part) { return llama_name(l, part); };
  if (o.recompute == Recompute::attention && autograd::grad_enabled()) {
    // training.recompute attention: the branch keeps its input (and the residual); its QKV,
    // rotated QKV, attention output and LSE are made again in the backward.
    auto keep = std::make_shared<const Recomputable>(slice, rows, o);
    std::vector<Tensor> in{h};
    if (residual.defined()) in.push_back(residual);
    return autograd::checkpoint(
        n("self_attn"),
        [this, l, keep, positions](const std::vector<Tensor>& in, bool again) {
          return llama_attention(l, in[0], positions, keep->slice, keep->run(again), keep->rows,
                                 in.size() > 1 ? in[1] : Tensor());
        },
        in, attention_parameters(l));
  }
  const GptConfig& c = config_;
  Tensor qkv = linear(h, p(n("self_attn.qkv_proj.weight")), Tensor());  // (T, (H + 2 Hkv) D)
  qkv = tap(qkv, n("self_attn.qkv"), o.sink, rows);
  qkv = ops::rope(qkv, positions, c.n_head, c.kv_heads(), c.rope_theta);
  qkv = tap(qkv, n("self_attn.rope"), o.sink, rows);
  Tensor y = route_attention(l, qkv, slice, o, rows, n("self_attn"));  // (T, H D)
  return linear(y, p(n("self_attn.o_proj.weight")), Tensor(), residual);
}

}  // namespace driftless::layers
