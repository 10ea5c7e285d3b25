// A model family (ARCHITECTURE.md "The model: one decoder, a block per family"): its
// parameters and their initial values, and the pieces of its block that the shared decoder
// (layers/gpt.h) calls. A new family adds its own files here and one line to make_family.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "layers/gpt_config.h"
#include "layers/parameters.h"
#include "layers/tap.h"

namespace driftless::layers {

// How a parameter starts (Gpt::init, seeded per parameter): N(0, std), ones or zeros.
struct ParameterInit {
  enum class Kind { normal, ones, zeros, values } kind = Kind::normal;
  double std = 0.02;
  std::vector<float> values;  // Kind::values (a learnable expression parameter's init)
};

// Declares parameters in slab order with their weight decay and initial value, so init
// reads each parameter's rule instead of guessing it from its name.
class ParameterDeclarer {
 public:
  ParameterDeclarer(ParameterSlab& slab, std::vector<ParameterInit>& inits)
      : slab_(slab), inits_(inits) {}
  // A weight matrix or embedding: weight-decayed, N(0, std).
  void matrix(const std::string& name, const Shape& shape, double std = 0.02);
  // A norm gain: not decayed, ones.
  void gain(const std::string& name, const Shape& shape);
  // A bias: not decayed, zeros.
  void bias(const std::string& name, const Shape& shape);
  // Not decayed, starting at the given values (a learnable expression parameter).
  void values(const std::string& name, const Shape& shape, std::vector<float> init);

 private:
  void add(const std::string& name, const Shape& shape, bool decay, ParameterInit init);
  ParameterSlab& slab_;
  std::vector<ParameterInit>& inits_;
};

// Layer `prefix`'s parameters by their name within the layer ("" for the model's own).
struct LayerWeights {
  const ParameterSlab& slab;
  std::string prefix;
  const Tensor& operator()(const std::string& part) const { return slab[prefix + part]; }
};

// Taps a tensor of the branch being built under `prefix`.part (tap.h).
struct BranchTap {
  TensorSink* sink;
  const std::vector<PartRows>& rows;
  std::string prefix;
  Tensor operator()(const Tensor& x, const std::string& part) const {
    return tap(x, prefix + "." + part, sink, rows);
  }
};

// The names of a block's pieces, as tap names within the layer (and the checkpoint name of
// the attention branch).
struct BlockNames {
  std::string attn_norm;   // the norm before attention
  std::string attn;        // the attention branch (its output before the residual)
  std::string mlp_norm;    // the norm before the MLP
  std::string mlp;         // the MLP branch
  std::string final_norm;  // the norm after the last block (a model parameter, no layer)
};

class Family {
 public:
  virtual ~Family() = default;
  // Every parameter but the learnable expression parameters, in slab order.
  virtual void declare(ParameterDeclarer& d) const = 0;
  // "h.{l}." or "layers.{l}.": layer l's parameter and tensor names start with it.
  virtual std::string layer_prefix(int64_t layer) const = 0;
  virtual const BlockNames& names() const = 0;
  // The token embedding, and the LM head's weight (the embedding when tied).
  virtual std::string embedding_name() const = 0;
  virtual std::string head_name() const = 0;
  // Refuses positions (an input's in-document indices) the family cannot embed.
  virtual void check_positions(const std::vector<int32_t>& positions) const { (void)positions; }
  // tokens (T) i32 on the host, positions their in-document indices -> (T, C).
  virtual Tensor embed(const LayerWeights& w, const Tensor& tokens,
                       const std::vector<int32_t>& positions) const = 0;
  // What every block gets besides its input (rotary positions on the device), or undefined.
  virtual Tensor block_positions(const std::vector<int32_t>& positions, Device device) const {
    (void)positions, (void)device;
    return Tensor();
  }
  // The norm `name` (BlockNames) of w's layer over x (T, C).
  virtual Tensor norm(const LayerWeights& w, const std::string& name, const Tensor& x) const = 0;
  // The attention branch up to the route: h (T, C) -> qkv (T, (H + 2 H_kv) D), tapping what
  // it makes on the way.
  virtual Tensor qkv(const LayerWeights& w, const Tensor& h, const Tensor& positions,
                     const BranchTap& tap) const = 0;
  // The output projection y (T, H D) -> (T, C), plus residual when defined (in the GEMM).
  virtual Tensor attention_out(const LayerWeights& w, const Tensor& y,
                               const Tensor& residual) const = 0;
  // The MLP (T, C) -> (T, C), plus residual when defined.
  virtual Tensor mlp(const LayerWeights& w, const Tensor& x, const Tensor& residual) const = 0;
  // The parameters of the attention branch within a layer (the leaves of its checkpoint).
  virtual std::vector<std::string> attention_parameters() const = 0;
};

// The family of config.architecture (validates what that family needs of the shape).
std::unique_ptr<Family> make_family(const GptConfig& config);

}  // namespace driftless::layers
