// GPT-2 forward as a handful of autograd nodes per block (ARCHITECTURE.md "Granularity");
// the Llama block is in llama_block.cpp.
#include "layers/gpt.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "engine/autograd/autograd.h"
#include "engine/core/random.h"
#include "engine/ops/ops.h"
#include "layers/attention/expr/model_mod.h"
#include "layers/attention/routes/local_route.h"
#include "layers/linear.h"
#include "layers/lm_loss.h"
#include "layers/recompute_keep.h"

namespace driftless::layers {

namespace {

std::string layer_name(int64_t l, const std::string& part) {
  return "h." + std::to_string(l) + "." + part;
}

}  // namespace

std::vector<ops::DropoutRows> dropout_rows(const std::vector<PartInput>& slice) {
  std::vector<ops::DropoutRows> rows;
  for (const auto& s : slice)
    rows.push_back({s.global_sequence * s.input->sequence_length + s.input->query_begin,
                    s.input->num_queries()});
  return rows;
}

Gpt::Gpt(const GptConfig& c, Device device, DType compute) : config_(c), device_(device) {
  DL_CHECK(c.n_embd % c.n_head == 0 && c.n_head % c.kv_heads() == 0, "gpt",
           "n_embd " << c.n_embd << ", n_head " << c.n_head << ", n_kv_head " << c.kv_heads()
                     << " do not divide");
  DL_CHECK(!(c.alibi && c.softcap > 0), "gpt",
           "alibi and softcap together are not supported (one score modifier per layer)");
  const int64_t C = c.n_embd, D = c.head_dim(), qkv = (c.n_head + 2 * c.kv_heads()) * D;
  if (c.is_llama()) {
    declare_llama();
  } else {
    slab_.declare("wte.weight", {c.vocab_size, C}, true);
    slab_.declare("wpe.weight", {c.n_positions, C}, true);
    for (int64_t l = 0; l < c.n_layer; ++l) {
      slab_.declare(layer_name(l, "ln_1.weight"), {C}, false);
      slab_.declare(layer_name(l, "ln_1.bias"), {C}, false);
      slab_.declare(layer_name(l, "attn.c_attn.weight"), {qkv, C}, true);
      slab_.declare(layer_name(l, "attn.c_attn.bias"), {qkv}, false);
      slab_.declare(layer_name(l, "attn.c_proj.weight"), {C, C}, true);
      slab_.declare(layer_name(l, "attn.c_proj.bias"), {C}, false);
      slab_.declare(layer_name(l, "ln_2.weight"), {C}, false);
      slab_.declare(layer_name(l, "ln_2.bias"), {C}, false);
      slab_.declare(layer_name(l, "mlp.c_fc.weight"), {4 * C, C}, true);
      slab_.declare(layer_name(l, "mlp.c_fc.bias"), {4 * C}, false);
      slab_.declare(layer_name(l, "mlp.c_proj.weight"), {C, 4 * C}, true);
      slab_.declare(layer_name(l, "mlp.c_proj.bias"), {C}, false);
    }
    slab_.declare("ln_f.weight", {C}, false);
    slab_.declare("ln_f.bias", {C}, false);
  }
  // Learnable expression parameters (model.score_mod_params, learnable: true): one copy per
  // layer, not weight-decayed (like gains and biases).
  for (int64_t l = 0; l < c.n_layer; ++l)
    for (const expr::ParamDecl& d : c.score_mod_decls)
      if (d.learnable) slab_.declare(score_mod_param_name(l, d.name), Shape(d.shape), false);
  slab_.allocate(device, compute);
  if (c.alibi) {
    std::vector<float> slopes(size_t(c.n_head));
    for (int64_t h = 0; h < c.n_head; ++h)
      slopes[size_t(h)] = float(std::pow(2.0, -8.0 * double(h + 1) / double(c.n_head)));
    alibi_slopes_ = Tensor::from_vector(slopes);
  }
}

void Gpt::init(uint64_t seed) {
  autograd::NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * double(config_.n_layer));
  uint64_t index = 0;
  for (const auto& prm : slab_.parameters()) {
    const std::string& n = prm.name;
    auto ends_with = [&](const std::string& s) {
      return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
    };
    if (const expr::ParamDecl* d = score_mod_decl(n)) {
      std::vector<float> v(d->init.begin(), d->init.end());  // its configured init values
      prm.value.copy_(Tensor::from_vector(v).reshape(prm.value.shape()));
    } else if (ends_with("ln_1.weight") || ends_with("ln_2.weight") || n == "ln_f.weight" ||
        ends_with("layernorm.weight") || n == "norm.weight") {
      prm.value.fill_(1.0);
    } else if (ends_with(".bias")) {
      prm.value.fill_(0.0);
    } else {
      double std = ends_with("c_proj.weight") ? residual_std : 0.02;
      prm.value.copy_(
          Tensor::randn(prm.value.shape(), random::derive(seed, index), DType::f32, 0.0, std));
    }
    ++index;
  }
  slab_.sync_compute();
}

std::string Gpt::score_mod_param_name(int64_t l, const std::string& name) const {
  return layer_prefix(l) + "score_mod." + name;
}

const expr::ParamDecl* Gpt::score_mod_decl(const std::string& slab_name) const {
  const size_t at = slab_name.find(".score_mod.");
  if (at == std::string::npos) return nullptr;
  const std::string name = slab_name.substr(at + std::string(".score_mod.").size());
  for (const expr::ParamDecl& d : config_.score_mod_decls)
    if (d.learnable && d.name == name) return &d;
  return nullptr;
}

std::vector<Tensor> Gpt::attention_parameters(int64_t l) const {
  const std::string at = layer_prefix(l);
  std::vector<Tensor> out;
  const std::vector<std::string> parts =
      config_.is_llama() ? std::vector<std::string>{"self_attn.qkv_proj.weight", "self_attn.o_proj.weight"}
                         : std::vector<std::string>{"attn.c_attn.weight", "attn.c_attn.bias",
                                                    "attn.c_proj.weight", "attn.c_proj.bias"};
  for (const std::string& part : parts) out.push_back(p(at + part));
  for (const Tensor& t : score_mod_parameters(l)) out.push_back(t);
  return out;
}

std::vector<Tensor> Gpt::score_mod_parameters(int64_t l) const {
  std::vector<Tensor> out;
  for (const expr::ParamDecl& d : config_.score_mod_decls)
    if (d.learnable) out.push_back(p(score_mod_param_name(l, d.name)));
  return out;
}

std::string Gpt::layer_prefix(int64_t l) const {
  return (config_.is_llama() ? "layers." : "h.") + std::to_string(l) + ".";
}

std::vector<Tensor> Gpt::layer_parameters(int64_t l) const {
  const std::string prefix = layer_prefix(l);
  std::vector<Tensor> out;
  for (const auto& prm : slab_.parameters())
    if (prm.name.compare(0, prefix.size(), prefix) == 0) out.push_back(prm.value);
  return out;
}

AttentionShape Gpt::attention_shape() const {
  return {config_.n_layer, config_.n_head, config_.kv_heads(), config_.head_dim()};
}

void Gpt::prepare_route(AttentionRoute& route, int64_t slots, int64_t sequence_length) const {
  route.prepare(attention_shape(), slots, sequence_length, compute_dtype(), device_);
}

ScoreModSpec Gpt::score_mod(int64_t l, int64_t h0, int64_t n) const {
  if (!config_.score_mod.empty() || !config_.mask_mod.empty()) {
    std::vector<Tensor> learnable;  // per declaration: the layer's slab tensor, or undefined
    for (const expr::ParamDecl& d : config_.score_mod_decls)
      learnable.push_back(d.learnable ? p(score_mod_param_name(l, d.name)) : Tensor());
    return expr::model_score_mod(config_.score_mod, config_.mask_mod, config_.score_mod_decls,
                                 int(config_.n_head), h0, learnable);
  }
  if (config_.softcap > 0) return ScoreModSpec::make_softcap(config_.softcap);
  if (config_.alibi) return ScoreModSpec::make_alibi(alibi_slopes_.narrow(0, h0, n).contiguous());
  return ScoreModSpec::none();
}

Tensor Gpt::hidden(const std::vector<PartInput>& slice, const ForwardOptions& o,
                   std::vector<PartRows>& rows) {
  DL_CHECK(!slice.empty(), "gpt", "empty micro-batch slice");
  std::vector<int32_t> tokens, positions;
  rows.clear();
  for (const auto& s : slice) {
    const data::ModelInput& in = *s.input;
    for (int32_t t : in.tokens)
      DL_CHECK(t >= 0 && t < config_.vocab_size, "gpt",
               "token " << t << " outside the vocabulary of " << config_.vocab_size);
    // Llama's n_positions is max_position_embeddings, a documented limit: rotary positions
    // need no table.
    if (!config_.is_llama())
      for (int32_t pos : in.position_index)
        DL_CHECK(pos < config_.n_positions, "gpt",
                 "position " << pos << " exceeds model.n_positions (" << config_.n_positions
                             << "); use shorter documents or a larger n_positions");
    tokens.insert(tokens.end(), in.tokens.begin(), in.tokens.end());
    positions.insert(positions.end(), in.position_index.begin(), in.position_index.end());
    rows.push_back({s.global_sequence, in.query_begin, in.num_queries()});
  }
  // Ids stay on the host: embedding validates them there and uploads them once itself.
  Tensor x = ops::embedding(embedding_weight(), Tensor::from_vector(tokens));  // (T, C)
  if (!config_.is_llama())
    x = ops::add(x, ops::embedding(p("wpe.weight"), Tensor::from_vector(positions)));
  x = ops::dropout(x, config_.dropout, random::derive(o.dropout_seed, 0), dropout_rows(slice),
                   o.training);
  x = tap(x, "embed", o.sink, rows);
  // Rotary positions (llama): each token's index in its document, never its row (T) i32
  const Tensor rope_positions =
      config_.is_llama() ? Tensor::from_vector(positions).to(device_) : Tensor();
  auto run_block = [this, rope_positions](int64_t l, const Tensor& in,
                                          const std::vector<PartInput>& s,
                                          const ForwardOptions& opt,
                                          const std::vector<PartRows>& r) {
    return config_.is_llama() ? llama_block(l, in, rope_positions, s, opt, r)
                              : block(l, in, s, opt, r);
  };
  for (int64_t l = 0; l < config_.n_layer; ++l) {
    if (o.recompute != Recompute::full) {
      x = run_block(l, x, slice, o, rows);
      continue;
    }
    // training.recompute full: the block keeps only its input; its backward runs it again.
    auto keep = std::make_shared<const Recomputable>(slice, rows, o);
    x = autograd::checkpoint(
        layer_prefix(l) + "block",
        [run_block, l, keep](const std::vector<Tensor>& in, bool again) {
          return run_block(l, in[0], keep->slice, keep->run(again), keep->rows);
        },
        {x}, layer_parameters(l));
  }
  if (config_.is_llama()) {
    x = ops::rms_norm(x, p("norm.weight"), config_.rms_norm_eps);
    return tap(x, "norm", o.sink, rows);
  }
  x = ops::layer_norm(x, p("ln_f.weight"), p("ln_f.bias"));
  return tap(x, "ln_f", o.sink, rows);
}

Tensor Gpt::block(int64_t l, const Tensor& x, const std::vector<PartInput>& slice,
                  const ForwardOptions& o, const std::vector<PartRows>& rows) {
  // Without taps and dropout the residual sums ride in the output projections' GEMMs (one
  // rounding, no add pass); with either, the branch outputs exist on their own.
  const bool fused_residual = !o.sink && (!o.training || config_.dropout == 0);
  Tensor h = ops::layer_norm(x, p(layer_name(l, "ln_1.weight")), p(layer_name(l, "ln_1.bias")));
  h = tap(h, layer_name(l, "ln_1"), o.sink, rows);
  Tensor r;
  if (fused_residual) {
    r = self_attention(l, h, slice, o, rows, x);
  } else {
    Tensor a = self_attention(l, h, slice, o, rows);
    a = ops::dropout(a, config_.dropout, random::derive(o.dropout_seed, 2 * l + 1),
                     dropout_rows(slice), o.training);
    r = ops::add(x, tap(a, layer_name(l, "attn"), o.sink, rows));
  }
  Tensor m = ops::layer_norm(r, p(layer_name(l, "ln_2.weight")), p(layer_name(l, "ln_2.bias")));
  m = tap(m, layer_name(l, "ln_2"), o.sink, rows);
  auto mlp_of = [&](const Tensor& in, const Tensor& residual) {
    return mlp(in, p(layer_name(l, "mlp.c_fc.weight")), p(layer_name(l, "mlp.c_fc.bias")),
               p(layer_name(l, "mlp.c_proj.weight")), p(layer_name(l, "mlp.c_proj.bias")),
               residual);
  };
  Tensor out;
  if (fused_residual) {
    out = mlp_of(m, r);
  } else {
    m = mlp_of(m, Tensor());
    m = ops::dropout(m, config_.dropout, random::derive(o.dropout_seed, 2 * l + 2),
                     dropout_rows(slice), o.training);
    out = ops::add(r, tap(m, layer_name(l, "mlp"), o.sink, rows));
  }
  return tap(out, layer_name(l, "out"), o.sink, rows);
}

Tensor Gpt::self_attention(int64_t l, const Tensor& x, const std::vector<PartInput>& slice,
                           const ForwardOptions& o, const std::vector<PartRows>& rows,
                           const Tensor& residual) {
  if (o.recompute == Recompute::attention && autograd::grad_enabled()) {
    // training.recompute attention: the branch keeps its input (and the residual); its
    // QKV, attention output and LSE are made again in the backward.
    auto keep = std::make_shared<const Recomputable>(slice, rows, o);
    std::vector<Tensor> in{x};
    if (residual.defined()) in.push_back(residual);
    return autograd::checkpoint(
        layer_name(l, "attn"),
        [this, l, keep](const std::vector<Tensor>& in, bool again) {
          return self_attention(l, in[0], keep->slice, keep->run(again), keep->rows,
                                in.size() > 1 ? in[1] : Tensor());
        },
        in, attention_parameters(l));
  }
  Tensor qkv = linear(x, p(layer_name(l, "attn.c_attn.weight")),
                      p(layer_name(l, "attn.c_attn.bias")));  // (T, (H + 2 Hkv) D)
  qkv = tap(qkv, layer_name(l, "attn.qkv"), o.sink, rows);
  Tensor y = route_attention(l, qkv, slice, o, rows, layer_name(l, "attn"));  // (T, H D)
  return linear(y, p(layer_name(l, "attn.c_proj.weight")), p(layer_name(l, "attn.c_proj.bias")),
                residual);
}

Tensor Gpt::route_attention(int64_t l, const Tensor& qkv, const std::vector<PartInput>& slice,
                            const ForwardOptions& o, const std::vector<PartRows>& rows,
                            const std::string& prefix) {
  static LocalRoute local;
  RouteCall call;
  call.layer = l;
  call.slice = &slice;
  call.shape = attention_shape();
  call.score_mod = [this, l](int64_t h0, int64_t n) { return score_mod(l, h0, n); };
  call.deterministic = o.deterministic;
  // HF/Mistral: a query at p sees keys j with p - W < j <= p.
  call.window_left = config_.sliding_window > 0 ? config_.sliding_window - 1 : -1;
  Tensor y = (o.route ? *o.route : local).attend(call, qkv);  // (T, H D)
  return tap(y, prefix + ".core", o.sink, rows);
}

const Tensor& Gpt::embedding_weight() const {
  return p(config_.is_llama() ? "embed_tokens.weight" : "wte.weight");
}

const Tensor& Gpt::head_weight() const {
  return config_.is_llama() && !config_.tie_word_embeddings ? p("lm_head.weight")
                                                            : embedding_weight();
}

Tensor Gpt::logits(const std::vector<PartInput>& slice, const ForwardOptions& o) {
  std::vector<PartRows> rows;
  Tensor x = hidden(slice, o, rows);
  return linear(x, head_weight(), Tensor());  // (T, V)
}

Tensor Gpt::loss(const std::vector<PartInput>& slice, double loss_scale, const ForwardOptions& o) {
  std::vector<PartRows> rows;
  Tensor x = hidden(slice, o, rows);  // (T, C)
  std::vector<int32_t> labels;
  std::vector<float> mask;
  for (const auto& s : slice) {
    for (size_t t = 0; t < s.input->labels.size(); ++t) {
      const int32_t lab = s.input->labels[t];
      labels.push_back(lab >= 0 ? lab : 0);
      mask.push_back(s.input->loss_mask[t] ? 1.0f : 0.0f);
    }
  }
  // Head and cross-entropy in one chunked node: the (T, V) logits never exist whole.
  return lm_loss(x, head_weight(), Tensor::from_vector(labels), Tensor::from_vector(mask),
                 loss_scale, 0, o.recompute_loss);
}

}  // namespace driftless::layers
