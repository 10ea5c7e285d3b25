// The autograd engine's rules (engine/autograd/autograd.h), exercised through ops: leaves
// accumulate, a reused tensor gets the summed gradient, a second backward through a freed
// graph throws, NoGradGuard records nothing, unused outputs of a multi-output node get zeros.
#include "engine/autograd/autograd.h"

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

}  // namespace
}  // namespace driftless
