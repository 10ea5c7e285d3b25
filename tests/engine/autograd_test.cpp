// The autograd engine's rules (engine/autograd/autograd.h), exercised through ops: leaves
// accumulate, a reused tensor gets the summed gradient, a second backward through a freed
// graph throws, NoGradGuard records nothing, unused outputs of a multi-output node get zeros.
#include "engine/autograd/autograd.h"

#include <cstring>

#include "engine/ops/ops.h"
#include "tests/engine/ops_test_util.h"

namespace driftless {
namespace {

using testing::all_close;
using testing::rnd;

TEST(Autograd, LeavesAccumulateAcrossBackwardCalls) {
  Tensor x = Tensor::from_vector<double>({1, 2, 3}).set_requires_grad();
  autograd::backward(ops::sum_all(ops::scale(x, 2.0)));
  EXPECT_TRUE(all_close(x.grad(), {2, 2, 2}));
  autograd::backward(ops::sum_all(ops::mul(x, x)));
  EXPECT_TRUE(all_close(x.grad(), {4, 6, 8}));  // 2 + 2x
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, TensorUsedTwiceGetsSummedGradient) {
  Tensor x = Tensor::from_vector<double>({1, -2}).set_requires_grad();
  Tensor y = ops::scale(x, 3.0);           // interior, used twice below
  Tensor z = ops::add(ops::mul(y, y), y);  // d/dy = 2y + 1, dy/dx = 3
  autograd::backward(ops::sum_all(z));
  EXPECT_TRUE(all_close(x.grad(), {3 * (2 * 3 + 1), 3 * (2 * -6 + 1)}));
}

TEST(Autograd, LeafDoneHookFiresOnceAfterTheLastContribution) {
  // a is used early and late in the graph (like a tied embedding); b once. The hook must
  // see each leaf exactly once, with its gradient complete at that moment.
  Tensor a = Tensor::from_vector<double>({1, 2}).set_requires_grad();
  Tensor b = Tensor::from_vector<double>({3, 4}).set_requires_grad();
  Tensor c = Tensor::from_vector<double>({5, 6}).set_requires_grad();
  Tensor h = ops::mul(a, b);                   // first use of a
  Tensor root = ops::sum_all(ops::add(ops::scale(h, 2.0), ops::mul(a, a)));  // second use
  Tensor unused = ops::scale(c, 1.0);  // not on the root's graph: never reported
  std::vector<std::pair<std::string, std::vector<double>>> seen;
  autograd::backward(root, Tensor(), [&](const Tensor& leaf) {
    const std::string name = leaf.impl_ptr() == a.impl_ptr() ? "a" : "b";
    seen.push_back({name, leaf.grad().to_vector<double>()});
  });
  ASSERT_EQ(seen.size(), 2u);
  for (const auto& [name, g] : seen) {
    const std::vector<double> want = name == "a" ? std::vector<double>{2 * 3 + 2 * 1, 2 * 4 + 2 * 2}
                                                 : std::vector<double>{2 * 1, 2 * 2};
    EXPECT_EQ(g, want) << name;
  }
  EXPECT_NE(seen[0].first, seen[1].first);
}

TEST(Autograd, SeedGradientIsNotModified) {
  // add returns the same gradient tensor for both inputs and p also reaches the root
  // through q: summing into p's slot must not write into the caller's seed (or q's slot).
  Tensor x = Tensor::from_vector<double>({1, 2}).set_requires_grad();
  Tensor p = ops::scale(x, 1.0);
  Tensor q = ops::scale(p, 2.0);
  Tensor root = ops::add(p, q);
  Tensor seed = Tensor::from_vector<double>({1, 10});
  autograd::backward(root, seed);
  EXPECT_TRUE(all_close(seed, {1, 10}));
  EXPECT_TRUE(all_close(x.grad(), {3, 30}));
}

TEST(Autograd, SharedGradientSlotsStayIndependent) {
  // u = a + b hands one tensor to both a's and b's slots; a then gets a second
  // contribution. b's gradient must stay 1 whatever order the nodes run in.
  for (int order = 0; order < 2; ++order) {
    Tensor x = Tensor::from_vector<double>({1, 2}).set_requires_grad();
    Tensor y = Tensor::from_vector<double>({3, 4}).set_requires_grad();
    Tensor a = ops::scale(x, 1.0), b = ops::scale(y, 1.0);
    Tensor u = ops::add(a, b), v = ops::scale(a, 5.0);
    Tensor w = order ? ops::add(u, v) : ops::add(v, u);
    autograd::backward(ops::sum_all(w));
    EXPECT_TRUE(all_close(x.grad(), {6, 6})) << order;
    EXPECT_TRUE(all_close(y.grad(), {1, 1})) << order;
  }
}

TEST(Autograd, BackwardTwiceThroughSameGraphThrows) {
  Tensor x = rnd({3}, 1).set_requires_grad();
  Tensor loss = ops::sum_all(ops::gelu(x));
  autograd::backward(loss);
  EXPECT_DL_ERROR(autograd::backward(loss), "sum_all", "backward");
  // A graph that shares a freed node also throws, naming that node.
  Tensor h = ops::scale(x, 2.0);
  autograd::backward(ops::sum_all(h));
  EXPECT_DL_ERROR(autograd::backward(ops::sum_all(ops::mul(h, h))), "[scale]", "freed");
}

TEST(Autograd, NoGradGuardRecordsNothing) {
  Tensor x = rnd({2, 3}, 1).set_requires_grad();
  {
    autograd::NoGradGuard guard;
    EXPECT_FALSE(autograd::grad_enabled());
    Tensor y = ops::matmul(x, ops::transpose(x, 0, 1));
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    EXPECT_DL_ERROR(autograd::backward(ops::sum_all(y)), "[backward]", "does not require grad");
  }
  EXPECT_TRUE(autograd::grad_enabled());
  EXPECT_NE(ops::gelu(x).grad_fn(), nullptr);
  EXPECT_EQ(ops::gelu(x).grad_fn()->name(), "gelu");
  // An op whose inputs need no gradient records nothing either.
  EXPECT_EQ(ops::gelu(x.detach()).grad_fn(), nullptr);
}

TEST(Autograd, MultiOutputNodeWithOneOutputUsed) {
  Tensor x = Tensor::from_vector<double>({1, 2, 3, 4, 5}).set_requires_grad();
  auto parts = ops::split(x, {2, 3}, 0);
  EXPECT_EQ(parts[0].grad_fn(), parts[1].grad_fn());
  EXPECT_EQ(parts[1].output_nr(), 1);
  autograd::backward(ops::sum_all(ops::mul(parts[1], parts[1])));
  EXPECT_TRUE(all_close(x.grad(), {0, 0, 6, 8, 10}));
}

TEST(Autograd, OpsOnNonLeafViewsAccumulateIntoTheBase) {
  // Both halves of one split feed the loss through different ops.
  Tensor x = Tensor::from_vector<double>({1, 2, 3, 4}, {2, 2}).set_requires_grad();
  auto rows = ops::split(x, {1, 1}, 0);
  Tensor loss = ops::add(ops::sum_all(ops::scale(rows[0], 2.0)), ops::sum_all(rows[1]));
  autograd::backward(loss);
  EXPECT_TRUE(all_close(x.grad(), {2, 2, 1, 1}));
}

// A node that takes its input's pending gradient (autograd::take_pending_grad) returns it
// inside its own gradient, and the engine does not add it a second time. y = 3 h + h with h
// = 2 x: add's backward runs first and leaves 1 in h's slot; the scale node takes it and
// returns 3 + 1. A node that does not take it gets the engine's sum instead.
TEST(Autograd, TakenPendingGradientIsNotAddedTwice) {
  for (bool take : {true, false}) {
    SCOPED_TRACE(take ? "taken" : "left to the engine");
    Tensor x = Tensor::from_vector<double>({1, -2}).set_requires_grad();
    Tensor h = ops::scale(x, 2.0);
    std::vector<Tensor> seen;  // what the scale node found pending
    Tensor t3 = autograd::record(
        "scale3", {h}, ops::scale(h.detach(), 3.0), autograd::Context(),
        [h, take, &seen](autograd::Context&, const std::vector<Tensor>& g) {
          Tensor own = ops::scale(g[0], 3.0);
          Tensor pending = take ? autograd::take_pending_grad(h) : Tensor();
          seen.push_back(pending);
          return std::vector<Tensor>{pending.defined() ? ops::add(own, pending) : own};
        });
    const int64_t taken_before = autograd::pending_grads_taken();
    autograd::backward(ops::sum_all(ops::add(t3, h)));
    EXPECT_EQ(autograd::pending_grads_taken(), taken_before + (take ? 1 : 0));
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].defined(), take);
    if (take) EXPECT_TRUE(all_close(seen[0], {1, 1}));
    EXPECT_TRUE(all_close(x.grad(), {8, 8}));  // 2 * (3 + 1)
  }
  // Outside a backward there is nothing pending.
  Tensor y = ops::scale(Tensor::from_vector<double>({1}).set_requires_grad(), 2.0);
  EXPECT_FALSE(autograd::take_pending_grad(y).defined());
  // A tensor that is not an input of the running node: its gradient would be lost, so the
  // engine refuses.
  Tensor x = Tensor::from_vector<double>({1, -2}).set_requires_grad();
  Tensor h = ops::scale(x, 2.0), u = ops::scale(x, 5.0);
  Tensor t = autograd::record("takes_other", {u}, ops::scale(u.detach(), 1.0), autograd::Context(),
                              [h](autograd::Context&, const std::vector<Tensor>& g) {
                                autograd::take_pending_grad(h);
                                return std::vector<Tensor>{g[0]};
                              });
  EXPECT_THROW(autograd::backward(ops::sum_all(ops::add(t, h))), Error);
}

// ---- checkpoint: the gradients of a checkpointed function are the bits of the plain one ----

// Two layers whose weights are leaves; w1 is also used outside the checkpoint (like a tied
// embedding), and the input reaches the output twice (a residual).
Tensor two_layers(const Tensor& x, const Tensor& w1, const Tensor& w2) {
  Tensor h = ops::gelu(ops::matmul(x, w1));
  return ops::add(x, ops::matmul(ops::mul(h, h), w2));
}

template <class T>
bool same_bits(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.shape() != b.shape()) return false;
  const std::vector<T> va = a.to_vector<T>(), vb = b.to_vector<T>();
  return std::memcmp(va.data(), vb.data(), va.size() * sizeof(T)) == 0;
}

// mode 0: plain; 1: the two layers checkpointed; 2: nested (each layer checkpointed inside
// an outer checkpoint). Returns x0, w1, w2's gradients and counts leaf-done calls.
template <class T>
std::vector<Tensor> checkpoint_grads(DType dt, int mode, int* leaf_done = nullptr) {
  Tensor x0 = rnd({5, 4}, 1, dt).set_requires_grad();
  Tensor w1 = rnd({4, 4}, 2, dt).set_requires_grad();
  Tensor w2 = rnd({4, 4}, 3, dt).set_requires_grad();
  Tensor x = ops::scale(x0, 1.5);  // a non-leaf input to the checkpoint
  auto layer = [](const Tensor& in, const Tensor& w) { return ops::gelu(ops::matmul(in, w)); };
  Tensor y;
  if (mode == 0) {
    y = two_layers(x, w1, w2);
  } else if (mode == 1) {
    y = autograd::checkpoint(
        "two", [&](const std::vector<Tensor>& in, bool) { return two_layers(in[0], w1, w2); },
        {x}, {w1, w2});
  } else {
    y = autograd::checkpoint(
        "outer",
        [&](const std::vector<Tensor>& in, bool) {
          Tensor h = autograd::checkpoint(
              "inner", [&](const std::vector<Tensor>& i2, bool) { return layer(i2[0], w1); },
              {in[0]}, {w1});
          return ops::add(in[0], ops::matmul(ops::mul(h, h), w2));
        },
        {x}, {w1, w2});
  }
  // w1 is used outside too, and so is x0 (through another path: x itself feeds only the
  // checkpoint, as a block's input does; a sum of three gradients for x would depend on
  // which two the checkpoint adds first, checkpoint or not a matter of association).
  Tensor root = ops::sum_all(ops::mul(ops::add(y, layer(ops::scale(x0, 0.5), w1)), y));
  int done = 0;
  autograd::backward(root, Tensor(), [&](const Tensor&) { ++done; });
  if (leaf_done) *leaf_done = done;
  return {x0.grad(), w1.grad(), w2.grad()};
}

template <class T>
void expect_checkpoint_exact(DType dt) {
  int plain_done = 0, done = 0;
  const std::vector<Tensor> plain = checkpoint_grads<T>(dt, 0, &plain_done);
  for (int mode : {1, 2}) {
    const std::vector<Tensor> ck = checkpoint_grads<T>(dt, mode, &done);
    for (size_t i = 0; i < plain.size(); ++i)
      EXPECT_TRUE(same_bits<T>(plain[i], ck[i])) << "mode " << mode << " gradient " << i;
    EXPECT_EQ(done, plain_done) << "mode " << mode << ": each leaf's hook fires once";
  }
}

TEST(Checkpoint, GradientsAreTheBitsOfThePlainGraphF64) { expect_checkpoint_exact<double>(DType::f64); }
TEST(Checkpoint, GradientsAreTheBitsOfThePlainGraphF32) { expect_checkpoint_exact<float>(DType::f32); }

TEST(Checkpoint, ForwardKeepsNothingAndRecomputesOnceInTheBackward) {
  Tensor w = rnd({3, 3}, 4).set_requires_grad();
  Tensor x = rnd({2, 3}, 5).set_requires_grad();
  int calls = 0, recomputes = 0;
  Tensor y = autograd::checkpoint(
      "f",
      [&](const std::vector<Tensor>& in, bool again) {
        ++calls;
        recomputes += again;
        // The first run records nothing: its activations are not kept.
        if (!again) EXPECT_FALSE(autograd::grad_enabled());
        return ops::matmul(in[0], w);
      },
      {x}, {w});
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(y.grad_fn()->name(), "checkpoint:f");
  autograd::backward(ops::sum_all(y));
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(recomputes, 1);
  EXPECT_TRUE(x.grad().defined() && w.grad().defined());
  // The graph is freed like any other: a second backward through it throws.
  EXPECT_THROW(autograd::backward(ops::sum_all(y)), Error);
}

TEST(Checkpoint, WithoutGradItIsThePlainFunction) {
  Tensor w = rnd({3, 3}, 4).set_requires_grad();
  autograd::NoGradGuard no_grad;
  Tensor y = autograd::checkpoint(
      "f", [&](const std::vector<Tensor>& in, bool) { return ops::matmul(in[0], w); },
      {rnd({2, 3}, 5)}, {w});
  EXPECT_FALSE(y.requires_grad());
}

}  // namespace
}  // namespace driftless
