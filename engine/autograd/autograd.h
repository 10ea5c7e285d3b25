// Define-by-run reverse-mode autograd (ARCHITECTURE.md "Granularity of the autograd graph").
// An op computes its outputs, then calls record() with its inputs, a Context of saved tensors
// and a backward function; record() links the outputs to a Node.
//
// Rules:
// - Leaves (requires_grad, no grad_fn) ACCUMULATE: backward adds into .grad (+=), so
//   gradients of several backward passes (micro-batches) sum until zero_grad().
// - Interior gradients are summed over all consumers, handed to the producing node once,
//   and freed as soon as that node has run.
// - After backward the graph is freed (saved tensors dropped); a second backward through
//   it throws driftless::Error naming the node.
// - Saved tensors are stored detached, so saving an op's own output makes no cycle.
#pragma once
#include <any>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace driftless::autograd {

// Whether ops record graph nodes on this thread.
bool grad_enabled();

// Disables recording for its scope (evaluation, optimizer steps, generation).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Enables recording for its scope, whatever the caller's mode (a backward that builds a
// small graph of its own, e.g. lm_loss recomputing its chunks).
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

// What a backward needs from its forward: saved tensors plus any other value.
class Context {
 public:
  void save_for_backward(std::vector<Tensor> tensors);
  const std::vector<Tensor>& saved_tensors() const { return saved_; }
  std::any& data() { return data_; }
  void clear() {
    saved_.clear();
    data_.reset();
  }

 private:
  std::vector<Tensor> saved_;
  std::any data_;
};

// backward(ctx, grad_outputs) returns one gradient per input (undefined = no gradient).
// grad_outputs has one entry per output; an output nobody used gets zeros.
using BackwardFn =
    std::function<std::vector<Tensor>(Context& ctx, const std::vector<Tensor>& grad_outputs)>;

struct OutputMeta {
  Shape shape;
  DType dtype;
  Device device;
};

class Node {
 public:
  Node(std::string name, std::vector<Tensor> inputs, std::vector<OutputMeta> outputs,
       Context ctx, BackwardFn fn);
  const std::string& name() const { return name_; }
  const std::vector<Tensor>& inputs() const { return inputs_; }
  const std::vector<OutputMeta>& outputs() const { return outputs_; }
  bool released() const { return released_; }
  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs);
  // Drops saved tensors and input edges; the node can no longer run.
  void release();

 private:
  std::string name_;
  std::vector<Tensor> inputs_;
  std::vector<OutputMeta> outputs_;
  Context ctx_;
  BackwardFn fn_;
  bool released_ = false;
};

// Links outputs to a new node when grad is enabled and some input requires grad; the
// outputs then require grad. Returns the outputs (same handles).
std::vector<Tensor> record(std::string name, const std::vector<Tensor>& inputs,
                           const std::vector<Tensor>& outputs, Context ctx, BackwardFn fn);
// Single-output convenience.
Tensor record(std::string name, const std::vector<Tensor>& inputs, const Tensor& output,
              Context ctx, BackwardFn fn);

// The f32 gradient storage backward would add leaf t's gradient into, when it already
// exists as a contiguous f32 tensor of t's shape (a parameter's view of the gradient slab);
// undefined otherwise (t is not a leaf needing a gradient, or its .grad is missing, of
// another dtype or strided). A backward function may add its gradient for t into it itself
// (a weight-gradient GEMM with beta = 1 writes f32 straight into the slab, never rounding
// the partial gradient to the compute dtype) and return an undefined gradient for t: the
// same sum as the engine's accumulation, one pass instead of three.
Tensor accumulating_grad(const Tensor& t);

// Inside a backward function: the gradient the nodes that already ran have summed for t, a
// non-leaf input of the running node, when it is a contiguous tensor of t's shape, dtype and
// device; undefined otherwise (and outside a backward). Taking it empties t's slot, so the
// gradient the function returns for t must include it: a kernel that makes t's gradient can
// add it in the same pass (layer norm's dx plus the residual stream's gradient) instead of
// the engine summing the two into a third tensor afterwards.
Tensor take_pending_grad(const Tensor& t);
// How many pending gradients take_pending_grad has handed out in this process: tests check
// that a fused path takes them, not only that the sums are right.
int64_t pending_grads_taken();

// Called once per leaf of the graph, right after the last gradient this backward pass
// delivers to it has been accumulated into its .grad (data-parallel gradient buckets start
// their reduction from here while the rest of the backward runs).
using LeafDoneHook = std::function<void(const Tensor& leaf)>;

// Runs reverse mode from root. grad defaults to ones (root must then have one element).
void backward(const Tensor& root, const Tensor& grad = Tensor(),
              const LeafDoneHook& on_leaf_done = {});

// Activation checkpointing. fn(inputs, recomputing) runs once under no-grad and only the
// inputs are kept; the node's backward runs fn again (recomputing = true) with grad enabled
// on detached copies of the inputs and backpropagates its gradient through that graph, which
// is then freed. Each input enters the recomputed graph through an identity node, so the ops
// of fn see a non-leaf and fuse pending gradients (take_pending_grad) as they would without
// checkpointing: the gradients are the same bits. `params` are the leaves fn uses: their
// gradients accumulate into .grad in the nested backward (accumulating_grad works as usual),
// and they are inputs of the checkpoint node so the outer backward's on_leaf_done fires for
// them once it has run. fn must be deterministic (dropout seeded by row ids) and its side
// effects safe to repeat in the backward's order. With grad disabled, plainly fn(inputs).
using CheckpointFn = std::function<Tensor(const std::vector<Tensor>& inputs, bool recomputing)>;
Tensor checkpoint(const std::string& name, CheckpointFn fn, const std::vector<Tensor>& inputs,
                  const std::vector<Tensor>& params);

}  // namespace driftless::autograd
