// The GPT-2 family's parameters, init and block pieces (gpt2.h).
#include "layers/families/gpt2.h"

#include <cmath>

#include "engine/core/error.h"
#include "engine/ops/ops.h"
#include "layers/linear.h"

namespace driftless::layers {

namespace {

class Gpt2 final : public Family {
 public:
  explicit Gpt2(const GptConfig& c) : c_(c) {}

  void declare(ParameterDeclarer& d) const override {
    const int64_t C = c_.n_embd, qkv = (c_.n_head + 2 * c_.kv_heads()) * c_.head_dim();
    // Residual projections start at N(0, 0.02 / sqrt(2 n_layer)), as GPT-2's.
    const double residual_std = 0.02 / std::sqrt(2.0 * double(c_.n_layer));
    d.matrix("wte.weight", {c_.vocab_size, C});
    d.matrix("wpe.weight", {c_.n_positions, C});
    for (int64_t l = 0; l < c_.n_layer; ++l) {
      const std::string at = layer_prefix(l);
      d.gain(at + "ln_1.weight", {C});
      d.bias(at + "ln_1.bias", {C});
      d.matrix(at + "attn.c_attn.weight", {qkv, C});
      d.bias(at + "attn.c_attn.bias", {qkv});
      d.matrix(at + "attn.c_proj.weight", {C, C}, residual_std);
      d.bias(at + "attn.c_proj.bias", {C});
      d.gain(at + "ln_2.weight", {C});
      d.bias(at + "ln_2.bias", {C});
      d.matrix(at + "mlp.c_fc.weight", {4 * C, C});
      d.bias(at + "mlp.c_fc.bias", {4 * C});
      d.matrix(at + "mlp.c_proj.weight", {C, 4 * C}, residual_std);
      d.bias(at + "mlp.c_proj.bias", {C});
    }
    d.gain("ln_f.weight", {C});
    d.bias("ln_f.bias", {C});
  }

  std::string layer_prefix(int64_t l) const override { return "h." + std::to_string(l) + "."; }
  const BlockNames& names() const override {
    static const BlockNames names{"ln_1", "attn", "ln_2", "mlp", "ln_f"};
    return names;
  }
  std::string embedding_name() const override { return "wte.weight"; }
  std::string head_name() const override { return "wte.weight"; }

  void check_positions(const std::vector<int32_t>& positions) const override {
    for (int32_t pos : positions)
      DL_CHECK(pos < c_.n_positions, "gpt",
               "position " << pos << " exceeds model.n_positions (" << c_.n_positions
                           << "); use shorter documents or a larger n_positions");
  }

  Tensor embed(const LayerWeights& w, const Tensor& tokens,
               const std::vector<int32_t>& positions) const override {
    Tensor x = ops::embedding(w("wte.weight"), tokens);  // (T, C)
    return ops::add(x, ops::embedding(w("wpe.weight"), Tensor::from_vector(positions)));
  }

  Tensor norm(const LayerWeights& w, const std::string& name, const Tensor& x) const override {
    return ops::layer_norm(x, w(name + ".weight"), w(name + ".bias"));
  }

  Tensor qkv(const LayerWeights& w, const Tensor& h, const Tensor&,
             const BranchTap& tap) const override {
    Tensor qkv = linear(h, w("attn.c_attn.weight"), w("attn.c_attn.bias"));  // (T, (H + 2 Hkv) D)
    return tap(qkv, "qkv");
  }

  Tensor attention_out(const LayerWeights& w, const Tensor& y,
                       const Tensor& residual) const override {
    return linear(y, w("attn.c_proj.weight"), w("attn.c_proj.bias"), residual);
  }

  Tensor mlp(const LayerWeights& w, const Tensor& x, const Tensor& residual) const override {
    return layers::mlp(x, w("mlp.c_fc.weight"), w("mlp.c_fc.bias"), w("mlp.c_proj.weight"),
                       w("mlp.c_proj.bias"), residual);
  }

  std::vector<std::string> attention_parameters() const override {
    return {"attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias"};
  }

 private:
  GptConfig c_;
};

}  // namespace

std::unique_ptr<Family> make_gpt2(const GptConfig& config) {
  return std::make_unique<Gpt2>(config);
}

}  // namespace driftless::layers
