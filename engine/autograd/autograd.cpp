// The reverse-mode engine: topological order by depth-first search from the root, then
// one pass in reverse order with per-node gradient slots freed as they are consumed.
#include "engine/autograd/autograd.h"

#include <atomic>

#include <unordered_map>
#include <unordered_set>

namespace driftless::autograd {

namespace {
thread_local bool tls_grad_enabled = true;
}

bool grad_enabled() { return tls_grad_enabled; }

NoGradGuard::NoGradGuard() : previous_(tls_grad_enabled) { tls_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { tls_grad_enabled = previous_; }

EnableGradGuard::EnableGradGuard() : previous_(tls_grad_enabled) { tls_grad_enabled = true; }
EnableGradGuard::~EnableGradGuard() { tls_grad_enabled = previous_; }

void Context::save_for_backward(std::vector<Tensor> tensors) {
  saved_.clear();
  for (auto& t : tensors) saved_.push_back(t.defined() ? t.detach() : Tensor());
}

Node::Node(std::string name, std::vector<Tensor> inputs, std::vector<OutputMeta> outputs,
           Context ctx, BackwardFn fn)
    : name_(std::move(name)),
      inputs_(std::move(inputs)),
      outputs_(std::move(outputs)),
      ctx_(std::move(ctx)),
      fn_(std::move(fn)) {}

std::vector<Tensor> Node::apply(const std::vector<Tensor>& grad_outputs) {
  DL_CHECK(!released_, name_.c_str(),
           "backward through a graph that was already freed (backward was called twice "
           "through this node)");
  std::vector<Tensor> grads = fn_(ctx_, grad_outputs);
  DL_CHECK(grads.size() == inputs_.size(), name_.c_str(),
           "backward returned " << grads.size() << " gradients for " << inputs_.size()
                                << " inputs");
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined() || !inputs_[i].defined()) continue;
    DL_CHECK(grads[i].shape() == inputs_[i].shape(), name_.c_str(),
             "gradient of input " << i << " has shape " << shape_str(grads[i].shape())
                                  << ", input has " << shape_str(inputs_[i].shape()));
  }
  return grads;
}

void Node::release() {
  released_ = true;
  ctx_.clear();
  fn_ = nullptr;
  inputs_.clear();
}

std::vector<Tensor> record(std::string name, const std::vector<Tensor>& inputs,
                           const std::vector<Tensor>& outputs, Context ctx, BackwardFn fn) {
  bool needed = false;
  if (grad_enabled())
    for (const auto& t : inputs) needed = needed || t.requires_grad();
  if (!needed) return outputs;
  std::vector<OutputMeta> metas;
  for (const auto& o : outputs) metas.push_back({o.shape(), o.dtype(), o.device()});
  auto node = std::make_shared<Node>(std::move(name), inputs, std::move(metas), std::move(ctx),
                                     std::move(fn));
  for (size_t i = 0; i < outputs.size(); ++i) {
    TensorImpl& im = outputs[i].impl();
    im.requires_grad = true;
    im.grad_fn = node;
    im.output_nr = int(i);
  }
  return outputs;
}

Tensor record(std::string name, const std::vector<Tensor>& inputs, const Tensor& output,
              Context ctx, BackwardFn fn) {
  return record(std::move(name), inputs, std::vector<Tensor>{output}, std::move(ctx),
                std::move(fn))[0];
}

namespace {
void accumulate(Tensor& slot, const Tensor& g) {
  if (!slot.defined()) {
    slot = g;
  } else {
    // Never add into the slot's tensor in place: it may be the caller's seed, or the same
    // tensor an op returned for two inputs (add's backward), so sum into a fresh one.
    slot = slot.plus(g.dtype() == slot.dtype() ? g : g.to(slot.dtype()));
  }
}
}  // namespace

namespace {
// The running backward's gradient slots (per node, per output) and the node whose backward
// function runs, for take_pending_grad.
thread_local std::unordered_map<Node*, std::vector<Tensor>>* t_slots = nullptr;
thread_local const Node* t_running = nullptr;
std::atomic<int64_t> g_pending_taken{0};

// Sets a thread-local for a scope and puts the previous value back on exit (a backward may
// run inside another's node, and an exception may leave it).
template <class T>
struct Restore {
  T& var;
  T prev;
  Restore(T& v, T now) : var(v), prev(v) { var = now; }
  ~Restore() { var = prev; }
  Restore(const Restore&) = delete;
  Restore& operator=(const Restore&) = delete;
};
}  // namespace

int64_t pending_grads_taken() { return g_pending_taken.load(); }

Tensor take_pending_grad(const Tensor& t) {
  if (!t_slots || !t_running || !t.defined() || !t.grad_fn()) return Tensor();
  // Only an input of the running node: its returned gradient is what replaces the slot.
  bool input = false;
  for (const Tensor& in : t_running->inputs())
    input = input || (in.defined() && in.impl_ptr() == t.impl_ptr());
  DL_CHECK(input, "take_pending_grad",
           "the tensor is not an input of the running backward's node ("
               << t_running->name() << "): its pending gradient would be lost");
  auto it = t_slots->find(t.grad_fn().get());
  if (it == t_slots->end() || size_t(t.output_nr()) >= it->second.size()) return Tensor();
  Tensor& slot = it->second[size_t(t.output_nr())];
  if (!slot.defined() || !slot.is_contiguous() || slot.shape() != t.shape() ||
      slot.dtype() != t.dtype() || slot.device() != t.device())
    return Tensor();
  Tensor pending = slot;
  slot = Tensor();
  ++g_pending_taken;
  return pending;
}

Tensor accumulating_grad(const Tensor& t) {
  if (!t.defined() || !t.requires_grad() || t.grad_fn()) return Tensor();
  Tensor g = t.grad();
  if (!g.defined() || g.dtype() != DType::f32 || !g.is_contiguous() || g.shape() != t.shape() ||
      g.device() != t.device())
    return Tensor();
  return g;
}

void backward(const Tensor& root, const Tensor& grad, const LeafDoneHook& on_leaf_done) {
  DL_CHECK(root.requires_grad(), "backward",
           "the tensor does not require grad (no input of its graph requires grad)");
  Tensor seed = grad;
  if (!seed.defined()) {
    DL_CHECK(root.numel() == 1, "backward",
             "implicit gradient needs a one-element root, got shape " << shape_str(root.shape()));
    seed = Tensor::ones(root.shape(), root.dtype(), root.device());
  }
  DL_CHECK(seed.shape() == root.shape(), "backward",
           "gradient shape " << shape_str(seed.shape()) << " does not match root "
                             << shape_str(root.shape()));
  if (root.is_leaf()) {
    Tensor g = root.grad();
    accumulate(g, seed);
    root.set_grad(g);
    if (on_leaf_done) on_leaf_done(root);
    return;
  }

  // Post-order DFS (iterative: deep graphs must not overflow the stack).
  std::vector<Node*> order;
  std::unordered_set<Node*> visited;
  std::vector<std::pair<Node*, size_t>> stack{{root.grad_fn().get(), 0}};
  visited.insert(root.grad_fn().get());
  DL_CHECK(!root.grad_fn()->released(), root.grad_fn()->name().c_str(),
           "backward through a graph that was already freed (backward was called twice)");
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < node->inputs().size()) {
      const Tensor& in = node->inputs()[next++];
      if (in.defined() && in.grad_fn() && !visited.count(in.grad_fn().get())) {
        visited.insert(in.grad_fn().get());
        stack.push_back({in.grad_fn().get(), 0});
      }
    } else {
      order.push_back(node);
      stack.pop_back();
    }
  }

  // Edges into each leaf that needs a gradient: the hook fires when the last one has run.
  std::unordered_map<const void*, int64_t> leaf_edges;
  if (on_leaf_done)
    for (Node* node : order)
      for (const Tensor& in : node->inputs())
        if (in.defined() && in.requires_grad() && !in.grad_fn()) ++leaf_edges[in.impl_ptr().get()];
  auto edge_done = [&](const Tensor& in) {
    if (!on_leaf_done || !in.defined() || !in.requires_grad() || in.grad_fn()) return;
    if (--leaf_edges[in.impl_ptr().get()] == 0) on_leaf_done(in);
  };

  std::unordered_map<Node*, std::vector<Tensor>> slots;
  const Restore slots_scope(t_slots, &slots);  // take_pending_grad sees this backward's slots
  slots[root.grad_fn().get()].resize(root.grad_fn()->outputs().size());
  slots[root.grad_fn().get()][root.output_nr()] = seed;
  // Keep nodes alive while we run them even as their consumers release edges.
  std::vector<std::shared_ptr<Node>> keep;
  for (size_t i = order.size(); i-- > 0;) {
    Node* node = order[i];
    auto it = slots.find(node);
    if (it == slots.end()) {  // reached only through inputs needing no gradient
      for (const Tensor& in : node->inputs()) edge_done(in);
      continue;
    }
    std::vector<Tensor> gouts = std::move(it->second);
    slots.erase(it);
    gouts.resize(node->outputs().size());
    for (size_t k = 0; k < gouts.size(); ++k) {
      const OutputMeta& m = node->outputs()[k];
      if (!gouts[k].defined()) gouts[k] = Tensor::zeros(m.shape, m.dtype, m.device);
    }
    std::vector<Tensor> grads;
    {
      const Restore running(t_running, static_cast<const Node*>(node));
      grads = node->apply(gouts);
    }
    const std::vector<Tensor> inputs = node->inputs();
    for (size_t k = 0; k < inputs.size(); ++k) {
      const Tensor& in = inputs[k];
      if (!grads[k].defined() || !in.defined() || !in.requires_grad()) continue;
      if (in.grad_fn()) {
        keep.push_back(in.grad_fn());
        auto& s = slots[in.grad_fn().get()];
        s.resize(in.grad_fn()->outputs().size());
        accumulate(s[in.output_nr()], grads[k]);
      } else {
        Tensor g = in.grad();
        if (g.defined()) {
          g.add_(grads[k].dtype() == g.dtype() ? grads[k] : grads[k].to(g.dtype()));
        } else {
          g = grads[k].dtype() == in.dtype() ? grads[k].contiguous().clone()
                                             : grads[k].to(in.dtype()).contiguous();
        }
        in.set_grad(g);
      }
    }
    for (const Tensor& in : inputs) edge_done(in);
    node->release();
  }
}

Tensor checkpoint(const std::string& name, CheckpointFn fn, const std::vector<Tensor>& inputs,
                  const std::vector<Tensor>& params) {
  bool needed = false;
  if (grad_enabled()) {
    for (const auto& t : inputs) needed = needed || t.requires_grad();
    for (const auto& t : params) needed = needed || t.requires_grad();
  }
  if (!needed) return fn(inputs, false);
  Tensor y;
  {
    NoGradGuard no_grad;
    y = fn(inputs, false).detach();  // a fresh handle: the node becomes its grad_fn
  }
  const size_t n = inputs.size();
  std::vector<bool> wants(n);
  for (size_t i = 0; i < n; ++i) wants[i] = inputs[i].requires_grad();
  std::vector<Tensor> edges = inputs;
  edges.insert(edges.end(), params.begin(), params.end());
  Context ctx;
  ctx.save_for_backward(inputs);
  const std::string node_name = "checkpoint:" + name;
  return record(
      node_name, edges, y, std::move(ctx),
      [fn = std::move(fn), n, wants, node_name, edge_count = edges.size()](
          Context& c, const std::vector<Tensor>& g) -> std::vector<Tensor> {
        std::vector<Tensor> grads(edge_count);
        {
          EnableGradGuard grad_on;
          std::vector<Tensor> again(n);
          auto caught = std::make_shared<std::vector<Tensor>>(n);
          for (size_t i = 0; i < n; ++i) {
            const Tensor& saved = c.saved_tensors()[i];
            if (!saved.defined() || !wants[i]) {
              again[i] = saved;
              continue;
            }
            Tensor leaf = saved.detach();
            leaf.set_requires_grad(true);
            // The identity keeps the input a non-leaf inside fn; its backward hands the summed
            // gradient out instead of accumulating it into a leaf's .grad (one copy fewer).
            again[i] = record("checkpoint_input", {leaf}, saved.detach(), Context{},
                              [caught, i](Context&, const std::vector<Tensor>& gi) {
                                (*caught)[i] = gi[0];
                                return std::vector<Tensor>{Tensor()};
                              });
          }
          Tensor out = fn(again, true);
          DL_CHECK(out.shape() == g[0].shape(), node_name.c_str(),
                   "the recomputed output has shape " << shape_str(out.shape())
                                                      << ", the forward's had "
                                                      << shape_str(g[0].shape()));
          if (out.requires_grad()) backward(out, g[0]);
          for (size_t i = 0; i < n; ++i) grads[i] = (*caught)[i];
        }
        c.clear();
        return grads;
      });
}

}  // namespace driftless::autograd
