// The Llama family's parameters, init and block pieces (llama.h).
#include "layers/families/llama.h"

#include "engine/core/error.h"
#include "engine/ops/ops.h"
#include "layers/linear.h"

namespace driftless::layers {

namespace {

class Llama final : public Family {
 public:
  explicit Llama(const GptConfig& c) : c_(c) {
    DL_CHECK(c.head_dim() % 2 == 0, "gpt",
             "llama: head dim " << c.head_dim() << " (n_embd " << c.n_embd << " / n_head "
                                << c.n_head << ") must be even for rotary positions");
  }

  // HF's init: every matrix N(0, 0.02), unit gains; gains are not weight-decayed.
  void declare(ParameterDeclarer& d) const override {
    const int64_t C = c_.n_embd, D = c_.head_dim(), F = c_.mlp_width();
    const int64_t qkv = (c_.n_head + 2 * c_.kv_heads()) * D;
    d.matrix("embed_tokens.weight", {c_.vocab_size, C});
    for (int64_t l = 0; l < c_.n_layer; ++l) {
      const std::string at = layer_prefix(l);
      d.gain(at + "input_layernorm.weight", {C});
      d.matrix(at + "self_attn.qkv_proj.weight", {qkv, C});  // rows Q|K|V
      d.matrix(at + "self_attn.o_proj.weight", {C, c_.n_head * D});
      d.gain(at + "post_attention_layernorm.weight", {C});
      d.matrix(at + "mlp.gate_up_proj.weight", {2 * F, C});  // rows gate|up
      d.matrix(at + "mlp.down_proj.weight", {C, F});
    }
    d.gain("norm.weight", {C});
    if (!c_.tie_word_embeddings) d.matrix("lm_head.weight", {c_.vocab_size, C});
  }

  std::string layer_prefix(int64_t l) const override { return "layers." + std::to_string(l) + "."; }
  const BlockNames& names() const override {
    static const BlockNames names{"input_layernorm", "self_attn", "post_attention_layernorm", "mlp",
                                  "norm"};
    return names;
  }
  std::string embedding_name() const override { return "embed_tokens.weight"; }
  std::string head_name() const override {
    return c_.tie_word_embeddings ? "embed_tokens.weight" : "lm_head.weight";
  }

  // n_positions is max_position_embeddings, a documented limit: rotary positions need no
  // table, so positions are not checked against it.
  Tensor embed(const LayerWeights& w, const Tensor& tokens,
               const std::vector<int32_t>&) const override {
    return ops::embedding(w("embed_tokens.weight"), tokens);  // (T, C)
  }

  // Each token's index in its document, never its row: (T) i32.
  Tensor block_positions(const std::vector<int32_t>& positions, Device device) const override {
    return Tensor::from_vector(positions).to(device);
  }

  Tensor norm(const LayerWeights& w, const std::string& name, const Tensor& x) const override {
    return ops::rms_norm(x, w(name + ".weight"), c_.rms_norm_eps);
  }

  Tensor qkv(const LayerWeights& w, const Tensor& h, const Tensor& positions,
             const BranchTap& tap) const override {
    Tensor qkv = linear(h, w("self_attn.qkv_proj.weight"), Tensor());  // (T, (H + 2 Hkv) D)
    qkv = tap(qkv, "qkv");
    qkv = ops::rope(qkv, positions, c_.n_head, c_.kv_heads(), c_.rope_theta);
    return tap(qkv, "rope");
  }

  Tensor attention_out(const LayerWeights& w, const Tensor& y,
                       const Tensor& residual) const override {
    return linear(y, w("self_attn.o_proj.weight"), Tensor(), residual);
  }

  Tensor mlp(const LayerWeights& w, const Tensor& x, const Tensor& residual) const override {
    Tensor m = ops::swiglu(linear(x, w("mlp.gate_up_proj.weight"), Tensor()));  // (T, F)
    return linear(m, w("mlp.down_proj.weight"), Tensor(), residual);
  }

  std::vector<std::string> attention_parameters() const override {
    return {"self_attn.qkv_proj.weight", "self_attn.o_proj.weight"};
  }

 private:
  GptConfig c_;
};

}  // namespace

std::unique_ptr<Family> make_llama(const GptConfig& config) {
  return std::make_unique<Llama>(config);
}

}  // namespace driftless::layers
