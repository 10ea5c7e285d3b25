// SlabOptimizer (train/slab_optimizer.h): whole, it is AdamW over the slab after the
// gradients are all-reduced; sharded, a rank updates only its shard of the slab with the
// sums reduced to it, gathers the rest, and its snapshot holds the whole moments.
#include "train/slab_optimizer.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/ops/ops.h"
#include "engine/optim/clip.h"

namespace driftless::train {
namespace {

// Rank `rank` of a world of two whose other rank holds the same tensors as this one: every
// sum doubles, every gather repeats this rank's chunk.
class TwinComm final : public parallel::Communicator {
 public:
  explicit TwinComm(int rank) : Communicator({}), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return 2; }
  const char* backend() const override { return "twin"; }
  Device device() const override { return Device::cpu; }
  void all_gather_into(const Tensor& out, const Tensor& in) override {
    const int64_t n = in.numel();
    const Tensor mine = in.clone();
    for (int64_t r = 0; r < 2; ++r) out.narrow(0, r * n, n).copy_(mine);
  }
  void reduce_scatter(const Tensor&, const Tensor&) override {}
  void all_reduce(const Tensor& t) override { t.copy_(ops::scale(t, 2.0)); }
  void reduce(const Tensor& t, int root) override {
    if (root == rank_) t.copy_(ops::scale(t, 2.0));
  }
  void broadcast(const Tensor&, int) override {}
  void barrier() override {}
  void all_to_all(const Tensor&, const Tensor&) override {}

 private:
  int rank_;
};

void fill(const layers::ParameterSlab& slab) {
  std::vector<float> p, g;
  for (int64_t i = 0; i < slab.numel(); ++i) {
    p.push_back(0.1f * float(i % 7) - 0.3f);
    g.push_back(0.05f * float(i % 5) - 0.1f);
  }
  slab.params().copy_(Tensor::from_vector(p));
  slab.grads().copy_(Tensor::from_vector(g));
}

layers::ParameterSlab make_slab() {
  layers::ParameterSlab slab;
  slab.declare("w", {3, 5}, true);
  slab.declare("b", {5}, false);
  slab.declare("g", {7}, false);
  slab.allocate();
  fill(slab);
  return slab;
}

SlabOptimizerOptions options(bool shard) {
  SlabOptimizerOptions o;
  o.adamw.weight_decay = 0.1;
  o.shard = shard;
  return o;
}

TEST(SlabOptimizer, WholeIsAdamWOverTheReducedSlab) {
  layers::ParameterSlab slab = make_slab(), reference = make_slab();
  TwinComm comm(0);
  SlabOptimizer opt(slab, options(false), &comm, &comm);
  const Tensor reduced = opt.reduced_grads();  // all-reduced: twice this rank's
  EXPECT_EQ(reduced.numel(), slab.numel());
  opt.step(reduced, 1e-2, 1.0);
  std::vector<optim::ParamRange> ranges;
  for (const auto& p : reference.parameters())
    ranges.push_back({p.name, p.begin, p.end, p.weight_decay});
  optim::AdamW adamw(options(false).adamw, ranges, reference.numel());
  adamw.step(reference.params(), ops::scale(reference.grads(), 2.0), 1e-2);
  EXPECT_EQ(slab.params().to_vector<float>(), reference.params().to_vector<float>());
}

TEST(SlabOptimizer, ShardedUpdatesItsShardWithItsSumsAndGathersTheMoments) {
  layers::ParameterSlab whole = make_slab();
  TwinComm whole_comm(1);
  SlabOptimizer unsharded(whole, options(false), &whole_comm, &whole_comm);
  unsharded.step(unsharded.reduced_grads(), 1e-2, 1.0);

  layers::ParameterSlab slab = make_slab();
  TwinComm comm(1);  // rank 1 owns elements [14, 27) of 27
  SlabOptimizer opt(slab, options(true), &comm, &comm);
  const Tensor reduced = opt.reduced_grads();
  ASSERT_EQ(reduced.numel(), 13);
  EXPECT_EQ(reduced.offset(), 14);
  // Its own shard's sums (doubled), the other rank's elements left as they were.
  EXPECT_FLOAT_EQ(slab.grads().to_vector<float>()[20], 2 * (0.05f * float(20 % 5) - 0.1f));
  EXPECT_FLOAT_EQ(slab.grads().to_vector<float>()[3], 0.05f * float(3 % 5) - 0.1f);
  // The norm is over every shard (the twin's equals this one's).
  const double mine = optim::grad_norm_squared(reduced);
  EXPECT_DOUBLE_EQ(opt.grad_norm_squared(reduced), 2 * mine);
  opt.step(reduced, 1e-2, 1.0);
  const auto got = slab.params().to_vector<float>(), want = whole.params().to_vector<float>();
  for (int64_t i = 14; i < 27; ++i) EXPECT_EQ(got[size_t(i)], want[size_t(i)]) << i;
  // The gather repeats this rank's shard into the twin's (both ranks identical here).
  for (int64_t i = 0; i < 13; ++i) EXPECT_EQ(got[size_t(i)], want[size_t(i + 14)]) << i;
  const OptimizerSnapshot snap = opt.snapshot();
  EXPECT_EQ(snap.begin, 0);
  EXPECT_EQ(snap.end, 27);
  EXPECT_EQ(snap.m.numel(), 27);
  EXPECT_EQ(snap.step, 1);
}

TEST(SlabOptimizer, FirstNonFiniteGradientIsLookedForInTheOwnShard) {
  layers::ParameterSlab slab = make_slab();
  slab.grads().narrow(0, 2, 1).fill_(std::nan(""));  // in "w", owned by rank 0
  TwinComm rank1(1);
  SlabOptimizer sharded(slab, options(true), &rank1, &rank1);
  EXPECT_EQ(sharded.first_non_finite_gradient(), "");  // rank 1 never reads element 2
  SlabOptimizer whole(slab, options(false), &rank1, &rank1);
  EXPECT_EQ(whole.first_non_finite_gradient(), "w");
}

}  // namespace
}  // namespace driftless::train
