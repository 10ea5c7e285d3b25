// The shared decoder's forward as a handful of autograd nodes per block (ARCHITECTURE.md
// "Granularity"); what differs between families is in layers/families/.
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
  family_ = make_family(c);
  ParameterDeclarer declare(slab_, inits_);
  family_->declare(declare);
  // Learnable expression parameters (model.score_mod_params, learnable: true): one copy per
  // layer, not weight-decayed (like gains and biases), starting at their configured values.
  for (int64_t l = 0; l < c.n_layer; ++l)
    for (const expr::ParamDecl& d : c.score_mod_decls)
      if (d.learnable)
        declare.values(score_mod_param_name(l, d.name), Shape(d.shape),
                       std::vector<float>(d.init.begin(), d.init.end()));
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
  const std::vector<Parameter>& params = slab_.parameters();
  for (size_t index = 0; index < params.size(); ++index) {
    const Tensor& value = params[index].value;
    const ParameterInit& init = inits_[index];
    switch (init.kind) {
      case ParameterInit::Kind::values:
        value.copy_(Tensor::from_vector(init.values).reshape(value.shape()));
        break;
      case ParameterInit::Kind::ones:
        value.fill_(1.0);
        break;
      case ParameterInit::Kind::zeros:
        value.fill_(0.0);
        break;
      case ParameterInit::Kind::normal:
        value.copy_(
            Tensor::randn(value.shape(), random::derive(seed, index), DType::f32, 0.0, init.std));
        break;
    }
  }
  slab_.sync_compute();
}

std::string Gpt::score_mod_param_name(int64_t l, const std::string& name) const {
  return family_->layer_prefix(l) + "score_mod." + name;
}

std::vector<Tensor> Gpt::attention_parameters(int64_t l) const {
  const LayerWeights w = weights(l);
  std::vector<Tensor> out;
  for (const std::string& part : family_->attention_parameters()) out.push_back(w(part));
  for (const Tensor& t : score_mod_parameters(l)) out.push_back(t);
  return out;
}

std::vector<Tensor> Gpt::score_mod_parameters(int64_t l) const {
  std::vector<Tensor> out;
  for (const expr::ParamDecl& d : config_.score_mod_decls)
    if (d.learnable) out.push_back(p(score_mod_param_name(l, d.name)));
  return out;
}

std::vector<Tensor> Gpt::layer_parameters(int64_t l) const {
  const std::string prefix = family_->layer_prefix(l);
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
    family_->check_positions(in.position_index);
    tokens.insert(tokens.end(), in.tokens.begin(), in.tokens.end());
    positions.insert(positions.end(), in.position_index.begin(), in.position_index.end());
    rows.push_back({s.global_sequence, in.query_begin, in.num_queries()});
  }
  // Ids stay on the host: embedding validates them there and uploads them once itself.
  Tensor x = family_->embed({slab_, ""}, Tensor::from_vector(tokens), positions);  // (T, C)
  x = ops::dropout(x, config_.dropout, random::derive(o.dropout_seed, 0), dropout_rows(slice),
                   o.training);
  x = tap(x, "embed", o.sink, rows);
  const Tensor block_positions = family_->block_positions(positions, device_);
  for (int64_t l = 0; l < config_.n_layer; ++l) {
    if (o.recompute != Recompute::full) {
      x = block(l, x, block_positions, slice, o, rows);
      continue;
    }
    // training.recompute full: the block keeps only its input; its backward runs it again.
    auto keep = std::make_shared<const Recomputable>(slice, rows, o);
    x = autograd::checkpoint(
        family_->layer_prefix(l) + "block",
        [this, l, keep, block_positions](const std::vector<Tensor>& in, bool again) {
          return block(l, in[0], block_positions, keep->slice, keep->run(again), keep->rows);
        },
        {x}, layer_parameters(l));
  }
  const std::string& final_norm = family_->names().final_norm;
  x = family_->norm({slab_, ""}, final_norm, x);
  return tap(x, final_norm, o.sink, rows);
}

Tensor Gpt::block(int64_t l, const Tensor& x, const Tensor& positions,
                  const std::vector<PartInput>& slice, const ForwardOptions& o,
                  const std::vector<PartRows>& rows) {
  // Without taps and dropout the residual sums ride in the output projections' GEMMs (one
  // rounding, no add pass); with either, the branch outputs exist on their own.
  const bool fused_residual = !o.sink && (!o.training || config_.dropout == 0);
  const BlockNames& names = family_->names();
  const LayerWeights w = weights(l);
  Tensor h = family_->norm(w, names.attn_norm, x);
  h = tap(h, w.prefix + names.attn_norm, o.sink, rows);
  Tensor r;
  if (fused_residual) {
    r = attention(l, h, positions, slice, o, rows, x);
  } else {
    Tensor a = attention(l, h, positions, slice, o, rows);
    a = ops::dropout(a, config_.dropout, random::derive(o.dropout_seed, 2 * l + 1),
                     dropout_rows(slice), o.training);
    r = ops::add(x, tap(a, w.prefix + names.attn, o.sink, rows));
  }
  Tensor m = family_->norm(w, names.mlp_norm, r);
  m = tap(m, w.prefix + names.mlp_norm, o.sink, rows);
  Tensor out;
  if (fused_residual) {
    out = family_->mlp(w, m, r);
  } else {
    m = family_->mlp(w, m, Tensor());
    m = ops::dropout(m, config_.dropout, random::derive(o.dropout_seed, 2 * l + 2),
                     dropout_rows(slice), o.training);
    out = ops::add(r, tap(m, w.prefix + names.mlp, o.sink, rows));
  }
  return tap(out, w.prefix + "out", o.sink, rows);
}

Tensor Gpt::attention(int64_t l, const Tensor& x, const Tensor& positions,
                      const std::vector<PartInput>& slice, const ForwardOptions& o,
                      const std::vector<PartRows>& rows, const Tensor& residual) {
  const LayerWeights w = weights(l);
  const std::string name = w.prefix + family_->names().attn;
  if (o.recompute == Recompute::attention && autograd::grad_enabled()) {
    // training.recompute attention: the branch keeps its input (and the residual); what it
    // makes before the route, the attention output and LSE are made again in the backward.
    auto keep = std::make_shared<const Recomputable>(slice, rows, o);
    std::vector<Tensor> in{x};
    if (residual.defined()) in.push_back(residual);
    return autograd::checkpoint(
        name,
        [this, l, keep, positions](const std::vector<Tensor>& in, bool again) {
          return attention(l, in[0], positions, keep->slice, keep->run(again), keep->rows,
                           in.size() > 1 ? in[1] : Tensor());
        },
        in, attention_parameters(l));
  }
  const Tensor qkv = family_->qkv(w, x, positions, {o.sink, rows, name});  // (T, (H + 2 Hkv) D)
  const Tensor y = route_attention(l, qkv, slice, o, rows, name);          // (T, H D)
  return family_->attention_out(w, y, residual);
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

Tensor Gpt::logits(const std::vector<PartInput>& slice, const ForwardOptions& o) {
  std::vector<PartRows> rows;
  Tensor x = hidden(slice, o, rows);
  return linear(x, p(family_->head_name()), Tensor());  // (T, V)
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
  return lm_loss(x, p(family_->head_name()), Tensor::from_vector(labels), Tensor::from_vector(mask),
                 loss_scale, 0, o.recompute_loss);
}

}  // namespace driftless::layers
