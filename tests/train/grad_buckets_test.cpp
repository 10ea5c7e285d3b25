// GradientBuckets (train/grad_buckets.h): the slab is cut into buckets in reverse
// declaration order, a bucket is reduced as soon as the backward has finished all of its
// parameters (a parameter used early and late in the graph holds its bucket back until its
// last use), every bucket exactly once per step, and finish() reduces what the backward
// never reached.
#include "train/grad_buckets.h"

#include <gtest/gtest.h>

#include "engine/ops/ops.h"

namespace driftless::train {
namespace {

// Records the slab ranges it all-reduces (a world of one rank: the sum is the identity).
class RecordingComm final : public parallel::Communicator {
 public:
  RecordingComm() : Communicator({}) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* backend() const override { return "recording"; }
  Device device() const override { return Device::cpu; }
  void all_gather_into(const Tensor&, const Tensor&) override {}
  void reduce_scatter(const Tensor&, const Tensor&) override {}
  void all_reduce(const Tensor& t) override {
    reduced.push_back({t.offset(), t.numel()});
    log.push_back("reduce " + std::to_string(t.offset()));
  }
  void reduce(const Tensor& t, int root) override {
    reduced.push_back({t.offset(), t.numel()});
    roots.push_back(root);
  }
  void broadcast(const Tensor&, int) override {}
  void barrier() override {}
  void all_to_all(const Tensor&, const Tensor&) override {}
  std::vector<std::pair<int64_t, int64_t>> reduced;  // (offset, numel)
  std::vector<int> roots;                            // of reduce calls
  std::vector<std::string> log;
};

TEST(GradientBuckets, ReduceEachBucketOnceAsSoonAsItsParametersAreFinal) {
  layers::ParameterSlab slab;
  slab.declare("embed", {4}, true);  // used first and last, like a tied embedding
  slab.declare("a", {4}, true);
  slab.declare("b", {4}, true);
  slab.declare("unused", {4}, true);  // no gradient this step
  slab.allocate();
  RecordingComm comm;
  // 16 bytes per parameter: 16-byte buckets hold one parameter each.
  GradientBuckets buckets(slab, comm, 16);
  ASSERT_EQ(buckets.size(), 4);
  for (const auto& p : slab.parameters()) p.value.fill_(1.0);
  const Tensor& e = slab["embed"];
  Tensor h = ops::mul(e, slab["a"]);             // embed, a
  h = ops::mul(h, slab["b"]);                   // b
  Tensor root = ops::sum_all(ops::mul(h, e));   // embed again (last op, so first in backward)
  buckets.start_step();
  auto hook = buckets.hook();
  autograd::backward(root, Tensor(), [&](const Tensor& leaf) {
    comm.log.push_back("leaf");
    hook(leaf);
  });
  // Reduced from the hook in the backward's order: b (begin 8) first; embed (begin 0) was
  // used by the first node the backward ran but is held back until its last use, the
  // node mul(embed, a), which also finishes a (begin 4).
  ASSERT_EQ(comm.reduced.size(), 3u);
  EXPECT_EQ(comm.reduced[0].first, 8);
  EXPECT_EQ(comm.reduced[1].first, 0);
  EXPECT_EQ(comm.reduced[2].first, 4);
  EXPECT_EQ(buckets.started_early(), 3);
  buckets.finish();
  ASSERT_EQ(comm.reduced.size(), 4u);  // the unused parameter's bucket, from finish()
  EXPECT_EQ(comm.reduced[3].first, 12);
  // A second step starts over: every bucket again, once.
  comm.reduced.clear();
  buckets.start_step();
  buckets.finish();
  EXPECT_EQ(comm.reduced.size(), 4u);
}

TEST(GradientBuckets, ZeroBucketSizeIsOneBucketOverTheSlab) {
  layers::ParameterSlab slab;
  slab.declare("x", {3}, true);
  slab.declare("y", {5}, false);
  slab.allocate();
  RecordingComm comm;
  GradientBuckets buckets(slab, comm, 0);
  ASSERT_EQ(buckets.size(), 1);
  buckets.start_step();
  buckets.finish();
  ASSERT_EQ(comm.reduced.size(), 1u);
  EXPECT_EQ(comm.reduced[0], (std::pair<int64_t, int64_t>{0, 8}));
}

TEST(GradientBuckets, ZeroOneReducesEachBucketToTheOwnersOfItsElements) {
  // Shards of 5 elements: rank 0 owns [0, 5), rank 1 [5, 10), rank 2 [10, 15), rank 3
  // [15, 16). Buckets of one 4-element parameter each; a bucket across a shard border is
  // reduced in two pieces, each to its owner: a reduce-scatter cut into buckets.
  layers::ParameterSlab slab;
  for (const char* n : {"p0", "p1", "p2", "p3"}) slab.declare(n, {4}, true);
  slab.allocate();
  RecordingComm comm;
  GradientBuckets buckets(slab, comm, 16, 5);
  buckets.start_step();
  buckets.finish();
  const std::vector<std::pair<int64_t, int64_t>> pieces = {
      {12, 3}, {15, 1}, {8, 2}, {10, 2}, {4, 1}, {5, 3}, {0, 4}};
  EXPECT_EQ(comm.reduced, pieces);
  EXPECT_EQ(comm.roots, (std::vector<int>{2, 3, 1, 2, 0, 1, 0}));
}

}  // namespace
}  // namespace driftless::train
